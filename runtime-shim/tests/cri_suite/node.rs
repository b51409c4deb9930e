//! Where the suite runs: [`SuiteNode`] (a testbed host with a registry, the reference CNI plugins and
//! a scratch directory) and keel-shim started on it ([`Shim`]), shared by the test binaries that run
//! the suite or drive keel-shim over CRI.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Result;
use keel_testbed::containerd::{PAUSE_REGISTRY, pause_registry_in};
use keel_testbed::registry::Registry;
use keel_testbed::{Daemon, Fabric, Forwarder, Host, Readiness};

use super::Env;

/// The pod network of the suite's node: the reference bridge with host-local (its state in `data_dir`)
/// and portmap.
fn suite_conflist(data_dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0", "name": "keel-suite",
        "plugins": [
            {"type": "bridge", "bridge": "suite0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": SUITE_SUBNET}]], "dataDir": data_dir}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ]
    })
    .to_string()
}

const SUITE_SUBNET: &str = "10.99.0.0/24";
const SUITE_GATEWAY: &str = "10.99.0.1";

/// A node for [`cri_suite::run_all`]: a host on a fabric, a registry on its loopback (at
/// [`PAUSE_REGISTRY`]) holding the pause image, busybox and busybox again under the image group's name,
/// a CNI conf dir and the suite's scratch directory. Start the runtime inside `node`, drop it first.
#[derive(Debug)]
pub struct SuiteNode {
    pub env: Env,
    pub pause: String,
    pub net_d: tempfile::TempDir,
    pub scratch: tempfile::TempDir,
    _registry: Registry,
    pub node: Host,
    _fabric: Fabric,
}

impl SuiteNode {
    pub fn new() -> Result<SuiteNode> {
        keel_testbed::require_root()?;
        let fabric = Fabric::new()?;
        let node = fabric.add_host("node")?;
        let (registry, pause) = pause_registry_in(node.fd())?;
        let forwarder = Forwarder::start(node.fd(), PAUSE_REGISTRY.parse()?)?;
        let pushed = forwarder.local_addr().to_string();
        let busybox = keel_testbed::images::busybox_image()?;
        for (repo, tag) in [("keel/busybox", "latest"), ("keel/image-suite", "v1")] {
            keel_testbed::registry::push_oci_layout_to(&pushed, &busybox.layout, &busybox.tag, repo, tag)?;
        }
        let inspected = keel_testbed::registry::skopeo(&[
            "inspect",
            "--tls-verify=false",
            "--format",
            "{{.Digest}}",
            &format!("docker://{pushed}/keel/image-suite:v1"),
        ])?;
        let digest = inspected.trim();
        anyhow::ensure!(digest.starts_with("sha256:"), "skopeo inspect answered the digest {digest:?}");
        let scratch = tempfile::Builder::new().prefix("keel-suite-").tempdir()?;
        let net_d = tempfile::Builder::new().prefix("keel-suite-netd-").tempdir()?;
        std::fs::create_dir(scratch.path().join("ipam"))?;
        std::fs::write(
            net_d.path().join("10-keel-suite.conflist"),
            suite_conflist(&scratch.path().join("ipam")),
        )?;
        let env = Env {
            image: format!("{PAUSE_REGISTRY}/keel/busybox:latest"),
            scratch_image: format!("{PAUSE_REGISTRY}/keel/image-suite:v1"),
            scratch_image_by_digest: format!("{PAUSE_REGISTRY}/keel/image-suite@{digest}"),
            missing_image: format!("{PAUSE_REGISTRY}/keel/missing:v1"),
            node: Some(node.fd().clone()),
            pod_subnet: SUITE_SUBNET.parse()?,
            ipam_dir: Some(scratch.path().join("ipam").join("keel-suite")),
            host_ip: SUITE_GATEWAY.parse()?,
            scratch: scratch.path().to_owned(),
            runtime_handler: String::new(),
        };
        Ok(SuiteNode { env, pause, net_d, scratch, _registry: registry, node, _fabric: fabric })
    }
}

/// A keel-shim daemon on a socket in a temp dir (`/tmp/keel-shim-*`, its `--root` the `root` inside),
/// ready once its socket accepts.
#[derive(Debug)]
pub struct Shim {
    // Dropped in this order: keel-shim (and what it forked), the mounts left under its directory (a
    // failed test), the directory.
    pub daemon: Daemon,
    _mounts: MountGuard,
    pub dir: tempfile::TempDir,
}

/// Unmounts whatever is left mounted under a directory (overlays, namespaces, shm of a failed test) so
/// that it can be removed.
#[derive(Debug)]
struct MountGuard(PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        let prefix = format!("{}/", self.0.display());
        let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else { return };
        let mut points: Vec<&str> = mountinfo
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|p| p.starts_with(&prefix))
            .collect();
        points.sort_unstable();
        for point in points.iter().rev() {
            let _ = nix::mount::umount2(*point, nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

impl Shim {
    pub fn start(cni_conf_dir: &Path) -> Result<Shim> {
        Shim::start_in(None, cni_conf_dir, &[])
    }

    /// keel-shim inside the network namespace of `node` (the machine's own when `None`), pulling from
    /// `insecure` registries over plain HTTP.
    pub fn start_in(node: Option<&Host>, cni_conf_dir: &Path, insecure: &[&str]) -> Result<Shim> {
        Shim::start_with(node, cni_conf_dir, insecure, &[])
    }

    /// [`Shim::start_in`] with `runtimes` (`NAME=BINARY`, each given as `--runtime`).
    pub fn start_with(
        node: Option<&Host>,
        cni_conf_dir: &Path,
        insecure: &[&str],
        runtimes: &[&str],
    ) -> Result<Shim> {
        let mut args = Vec::new();
        for registry in insecure {
            args.extend(["--insecure-registry", registry]);
        }
        Shim::start_with_args(node, cni_conf_dir, runtimes, &args)
    }

    /// keel-shim inside `node` with `runtimes` (`NAME=BINARY`, each given as `--runtime`) and `args`
    /// added to its command line.
    pub fn start_with_args(
        node: Option<&Host>,
        cni_conf_dir: &Path,
        runtimes: &[&str],
        args: &[&str],
    ) -> Result<Shim> {
        let dir = tempfile::Builder::new().prefix("keel-shim-").tempdir()?;
        let mut cmd = Shim::command(dir.path(), cni_conf_dir, &[], runtimes);
        cmd.args(args);
        let ready = Readiness::UnixSocket(Shim::socket_in(dir.path()));
        let timeout = Duration::from_secs(20);
        let daemon = match node {
            Some(node) => node.start_daemon("keel-shim", cmd, ready, timeout)?,
            None => Daemon::start("keel-shim", cmd, ready, timeout)?,
        };
        Ok(Shim { daemon, _mounts: MountGuard(dir.path().to_owned()), dir })
    }

    /// The command line of keel-shim with its socket and root in `dir` (see [`Shim::socket_in`] and
    /// [`Shim::root_in`]).
    pub fn command(dir: &Path, cni_conf_dir: &Path, insecure: &[&str], runtimes: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_keel-shim"));
        cmd.arg("--socket").arg(Shim::socket_in(dir));
        cmd.arg("--root").arg(Shim::root_in(dir));
        cmd.arg("--cni-conf-dir").arg(cni_conf_dir);
        cmd.arg("--cni-bin-dir").arg("/usr/lib/cni");
        for registry in insecure {
            cmd.arg("--insecure-registry").arg(registry);
        }
        for runtime in runtimes {
            cmd.arg("--runtime").arg(runtime);
        }
        cmd
    }

    /// The socket of a keel-shim started in `dir`.
    pub fn socket_in(dir: &Path) -> PathBuf {
        dir.join("cri.sock")
    }

    /// The `--root` of a keel-shim started in `dir`.
    pub fn root_in(dir: &Path) -> PathBuf {
        dir.join("root")
    }

    pub fn socket(&self) -> PathBuf {
        Shim::socket_in(self.dir.path())
    }

    pub fn root(&self) -> PathBuf {
        Shim::root_in(self.dir.path())
    }
}
