//! [`Containerd`]: containerd 1.6 with a generated config, its own root/state dirs and a unix socket in a
//! temp dir, and the CRI plugin enabled.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::netns::NetNsFd;
use crate::process::{Daemon, Readiness};

const START_TIMEOUT: Duration = Duration::from_secs(30);
/// `sun_path` holds 108 bytes including the NUL; leave room for the `.ttrpc` suffix.
const MAX_SOCKET_PATH: usize = 100;

/// What [`Containerd::start`] should set up.
#[derive(Debug)]
pub struct ContainerdOptions {
    /// Where CNI plugins live (`/usr/lib/cni` from containernetworking-plugins by default).
    pub cni_bin_dir: PathBuf,
    /// Where CNI network configs live; `None` uses an empty directory inside the fixture.
    pub cni_conf_dir: Option<PathBuf>,
    /// The network namespace containerd runs in (a test host's, so CNI wires pods there); the
    /// machine's own when `None`.
    pub netns: Option<NetNsFd>,
    /// The mount namespace containerd runs in (the one its kubelet runs in); the machine's own when
    /// `None`.
    pub mount_ns: Option<crate::mount_ns::MountNsFd>,
    /// The CRI's `sandbox_image` (the pause image every pod sandbox runs); `localhost/keel/pause:latest`
    /// when `None`.
    pub sandbox_image: Option<String>,
    /// Registries (`HOST:PORT`) pulled from over plain HTTP, such as a testbed [`Registry`] on loopback.
    ///
    /// [`Registry`]: crate::registry::Registry
    pub plain_http_registries: Vec<String>,
    /// Mirrors of registries: (`registry`, endpoint URL such as `http://127.0.0.1:5000`), tried before
    /// the registry itself.
    pub registry_mirrors: Vec<(String, String)>,
    /// Whether the CRI plugin puts containers in cgroups (their resources, OOM kills); off by default,
    /// as the benchmarks measure it without (`disable_cgroup`).
    pub cgroups: bool,
}

impl Default for ContainerdOptions {
    fn default() -> Self {
        ContainerdOptions {
            cni_bin_dir: PathBuf::from("/usr/lib/cni"),
            cni_conf_dir: None,
            netns: None,
            mount_ns: None,
            sandbox_image: None,
            plain_http_registries: Vec::new(),
            registry_mirrors: Vec::new(),
            cgroups: false,
        }
    }
}

/// One plugin row of `ctr plugins ls`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plugin {
    pub kind: String,
    pub id: String,
    pub status: String,
}

/// A running containerd; dropping it stops the daemon and removes its root, state and socket.
#[derive(Debug)]
pub struct Containerd {
    // Declared before `_dir` so the daemon stops before its directories are removed.
    daemon: Daemon,
    socket: PathBuf,
    config: PathBuf,
    _dir: tempfile::TempDir,
}

impl Containerd {
    /// Writes a config, starts containerd and waits until `ctr --address SOCK version` succeeds.
    pub fn start(opts: &ContainerdOptions) -> Result<Containerd> {
        let dir =
            tempfile::Builder::new().prefix("keel-ctd-").tempdir().context("creating containerd dir")?;
        let socket = dir.path().join("containerd.sock");
        if socket.as_os_str().len() > MAX_SOCKET_PATH {
            bail!(
                "containerd socket path {} is too long for a unix socket (set TMPDIR shorter)",
                socket.display()
            );
        }
        let conf_dir = match &opts.cni_conf_dir {
            Some(conf_dir) => conf_dir.clone(),
            None => {
                let conf_dir = dir.path().join("net.d");
                std::fs::create_dir(&conf_dir).with_context(|| format!("creating {}", conf_dir.display()))?;
                conf_dir
            }
        };
        let config = dir.path().join("config.toml");
        std::fs::write(&config, config_toml(dir.path(), &socket, opts, &conf_dir))
            .with_context(|| format!("writing containerd config {}", config.display()))?;
        let mut cmd = Command::new("containerd");
        cmd.arg("--config").arg(&config);
        if let Some(ns) = &opts.netns {
            ns.enter_on_spawn(&mut cmd);
        }
        if let Some(ns) = &opts.mount_ns {
            ns.enter_on_spawn(&mut cmd);
        }
        let mut ready = Command::new("ctr");
        ready.arg("--address").arg(&socket).arg("version");
        let daemon = Daemon::start("containerd", cmd, Readiness::Command(ready), START_TIMEOUT)
            .context("starting containerd")?;
        Ok(Containerd { daemon, socket, config, _dir: dir })
    }

    /// The gRPC unix socket (the CRI endpoint too).
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The generated config file.
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.daemon.pid()
    }

    /// The containerd daemon (its pid, its log, or to kill it).
    pub fn daemon(&mut self) -> &mut Daemon {
        &mut self.daemon
    }

    /// `ctr --address SOCK`, ready for arguments.
    pub fn ctr(&self) -> Command {
        let mut cmd = Command::new("ctr");
        cmd.arg("--address").arg(&self.socket);
        cmd
    }

    /// The plugins containerd loaded, from `ctr plugins ls`.
    pub fn plugins(&self) -> Result<Vec<Plugin>> {
        let output = self.ctr().args(["plugins", "ls"]).output().context("running ctr plugins ls")?;
        if !output.status.success() {
            bail!(
                "ctr plugins ls exited with {}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(parse_plugins(&String::from_utf8_lossy(&output.stdout)))
    }

    /// Fails unless the CRI plugin (`io.containerd.grpc.v1` `cri`) reports `ok`.
    pub fn check_cri(&self) -> Result<()> {
        let plugins = self.plugins()?;
        match plugins.iter().find(|p| p.kind == "io.containerd.grpc.v1" && p.id == "cri") {
            Some(plugin) if plugin.status == "ok" => Ok(()),
            Some(plugin) => bail!(
                "the CRI plugin is {:?}; last containerd log lines:\n{}",
                plugin.status,
                self.daemon.log_tail(50)
            ),
            None => bail!(
                "no CRI plugin in ctr plugins ls; last containerd log lines:\n{}",
                self.daemon.log_tail(50)
            ),
        }
    }
}

impl Drop for Containerd {
    /// Stops containerd, then unmounts what its CRI left mounted under the fixture's directory (the
    /// network namespaces and /dev/shm of sandboxes a failed test did not remove), so that nothing is
    /// left on the machine and the directory can be removed.
    fn drop(&mut self) {
        let _ = self.daemon.stop();
        let dir = self._dir.path().to_string_lossy().into_owned();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut mounts: Vec<&str> = mountinfo
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .filter(|point| point.starts_with(&format!("{dir}/")))
            .collect();
        // Deepest first.
        mounts.sort_by_key(|point| std::cmp::Reverse(point.len()));
        for point in mounts {
            let _ = nix::mount::umount2(point, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// Where [`pause_registry_in`] serves the pause image inside a host: the host's own loopback.
pub const PAUSE_REGISTRY: &str = "127.0.0.1:5000";

/// Starts a [`Registry`] on the loopback of the network namespace `ns` (at [`PAUSE_REGISTRY`]), pushes
/// the testbed's pause image to it (through a forwarder, from the machine) and returns the registry
/// and the image reference a containerd running in `ns` pulls as its `sandbox_image` (list
/// [`PAUSE_REGISTRY`] in [`ContainerdOptions::plain_http_registries`]).
///
/// [`Registry`]: crate::registry::Registry
pub fn pause_registry_in(ns: &NetNsFd) -> Result<(crate::registry::Registry, String)> {
    let image = crate::images::pause_image()?;
    let addr: std::net::SocketAddr = PAUSE_REGISTRY.parse().context("the pause registry's address")?;
    let registry = crate::registry::Registry::start_in(Some(ns), addr)?;
    let forwarder = crate::Forwarder::start(ns, addr)?;
    crate::registry::push_oci_layout_to(
        &forwarder.local_addr().to_string(),
        &image.layout,
        &image.tag,
        "keel/pause",
        "latest",
    )?;
    Ok((registry, format!("{PAUSE_REGISTRY}/keel/pause:latest")))
}

/// Parses `ctr plugins ls` (columns TYPE, ID, PLATFORMS, STATUS; PLATFORMS may hold `,`-joined values).
pub fn parse_plugins(text: &str) -> Vec<Plugin> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [kind, id, .., status] if fields.len() >= 3 => {
                    Some(Plugin { kind: (*kind).into(), id: (*id).into(), status: (*status).into() })
                }
                _ => None,
            }
        })
        .collect()
}

fn toml_str(path: &Path) -> String {
    toml_string(&path.to_string_lossy())
}

fn toml_string(text: &str) -> String {
    // TOML basic strings share JSON's escapes for everything a path or image name can hold.
    serde_json::Value::String(text.to_owned()).to_string()
}

fn config_toml(dir: &Path, socket: &Path, opts: &ContainerdOptions, cni_conf_dir: &Path) -> String {
    let root = toml_str(&dir.join("root"));
    let state = toml_str(&dir.join("state"));
    let opt = toml_str(&dir.join("opt"));
    let grpc = toml_str(socket);
    let mut ttrpc_path = socket.as_os_str().to_owned();
    ttrpc_path.push(".ttrpc");
    let ttrpc = toml_str(Path::new(&ttrpc_path));
    let bin_dir = toml_str(&opts.cni_bin_dir);
    let conf_dir = toml_str(cni_conf_dir);
    let sandbox_image = toml_string(opts.sandbox_image.as_deref().unwrap_or("localhost/keel/pause:latest"));
    // containerd 1.6's CRI reaches a registry over plain HTTP when a mirror names an http:// endpoint.
    let plain_http = opts.plain_http_registries.iter().map(|host| (host.clone(), format!("http://{host}")));
    let mirrors: String = plain_http
        .chain(opts.registry_mirrors.iter().cloned())
        .map(|(registry, endpoint)| {
            let key = toml_string(&registry);
            let endpoint = toml_string(&endpoint);
            format!("  [plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.{key}]\n    endpoint = [{endpoint}]\n")
        })
        .collect();
    let disable_cgroup = !opts.cgroups;
    format!(
        r#"version = 2
root = {root}
state = {state}
# Snapshotters that need special filesystems only log errors here.
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = {grpc}
  tcp_address = ""

[ttrpc]
  address = {ttrpc}

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = {opt}

[plugins."io.containerd.grpc.v1.cri"]
  disable_cgroup = {disable_cgroup}
  disable_apparmor = true
  # Sandbox network namespaces under the state dir, not /run/netns: removed with the fixture.
  netns_mounts_under_state_dir = true
  # The machine's root lacks CAP_SYS_RESOURCE: runc could not lower a sandbox's oom_score_adj to -998.
  restrict_oom_score_adj = true
  sandbox_image = {sandbox_image}
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {bin_dir}
    conf_dir = {conf_dir}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
{mirrors}"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plugin_rows() {
        let text = "TYPE  ID  PLATFORMS  STATUS\n\
                    io.containerd.grpc.v1  cri  linux/amd64  ok\n\
                    io.containerd.snapshotter.v1  btrfs  linux/amd64,linux/386  skip\n\
                    io.containerd.grpc.v1  version  -  ok\n\nshort\n";
        let plugins = parse_plugins(text);
        assert_eq!(plugins.len(), 3);
        assert_eq!(
            plugins[0],
            Plugin { kind: "io.containerd.grpc.v1".into(), id: "cri".into(), status: "ok".into() }
        );
        assert_eq!(plugins[1].status, "skip");
    }
}
