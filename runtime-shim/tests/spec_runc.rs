//! A spec from `oci::spec::build` run by the real runc and crun (root; crun in a private mount
//! namespace without the cgroup2 mount, as MACHINE.md says it needs): the runtime accepts it, the
//! process gets the user, groups and capabilities the CRI asked for, the CRI mount and the pod's hosts
//! file are there, a recursive read-only mount is read-only down to the tmpfs under it (where
//! keel-shim's probe finds that the kernel and runtime support it), it runs in the pod's network
//! namespace (joined by path) with the pod's sysctl set, and the cgroup the runtime makes at the
//! spec's cgroupsPath carries the memory limit and CPU shares, read back through `cgroup::stats` and
//! removed with `cgroup::remove`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_cri::v1 as api;
use keel_shim::cgroup::{self, Layout};
use keel_shim::oci::features::{self, HandlerFeatures};
use keel_shim::oci::spec::{self, PodFiles, PodNamespaces, SpecInput};
use oci_spec::image::ImageConfiguration;

/// The OCI runtime under test.
#[derive(Debug, Clone, Copy)]
enum Runtime {
    Runc,
    /// crun 1.8 refuses hybrid cgroups: it runs in a private mount namespace without the cgroup2
    /// mount (MACHINE.md), as keel-shim will run it.
    Crun,
}

impl Runtime {
    fn command(self, root: &Path) -> Command {
        let mut command = match self {
            Runtime::Runc => Command::new("runc"),
            Runtime::Crun => {
                let mut c = Command::new("unshare");
                c.args(["-m", "sh", "-c", "umount /sys/fs/cgroup/unified && exec crun \"$@\"", "sh"]);
                c
            }
        };
        command.arg("--root").arg(root);
        command
    }
}

impl Runtime {
    /// Whether keel-shim's probe finds recursive read-only mounts on this kernel with this runtime
    /// (Debian bookworm's runc 1.1.5 and crun 1.8.1 on Linux ≥ 5.12: yes).
    fn recursive_read_only(self) -> bool {
        let binary = Path::new(match self {
            Runtime::Runc => "runc",
            Runtime::Crun => "crun",
        });
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let probed = rt.block_on(features::probe(binary));
        HandlerFeatures::of(&features::kernel_release(), &probed).recursive_read_only_mounts
    }
}

/// A tmpfs mounted at a directory (created); unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(path: &Path) -> Tmpfs {
        use nix::mount::{MsFlags, mount};
        std::fs::create_dir_all(path).unwrap();
        mount(Some("none"), path, Some("tmpfs"), MsFlags::empty(), None::<&str>).unwrap();
        Tmpfs(path.to_owned())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// The container (runtime state) and its cgroup; removed on drop, also when the test fails.
struct Container {
    runtime: Runtime,
    runc_root: PathBuf,
    id: String,
    layout: Layout,
    cgroups_path: String,
}

impl Container {
    fn runc(&self, args: &[&str]) -> std::process::Output {
        self.runtime.command(&self.runc_root).args(args).output().unwrap()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = self.runc(&["delete", "--force", &self.id]);
        let _ = cgroup::remove(&self.layout, &self.cgroups_path);
    }
}

fn s(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn runc_runs_a_built_spec_as_asked() {
    run_a_built_spec(Runtime::Runc);
}

#[test]
fn crun_runs_a_built_spec_as_asked() {
    run_a_built_spec(Runtime::Crun);
}

fn run_a_built_spec(runtime: Runtime) {
    keel_testbed::require_root().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let bundle = scratch.path().join("bundle");
    let rootfs = bundle.join("rootfs");
    for dir in ["bin", "etc", "tmp"] {
        std::fs::create_dir_all(rootfs.join(dir)).unwrap();
    }
    std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
    std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0::/:/bin/sh\napp:x:1000:1000::/:/bin/sh\n").unwrap();
    std::fs::write(rootfs.join("etc/group"), "root:x:0:\napp:x:1000:\nvideo:x:44:app\n").unwrap();
    let data = scratch.path().join("data");
    std::fs::create_dir(&data).unwrap();
    // The container runs as uid 1000 and writes its findings here.
    std::fs::set_permissions(&data, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    std::fs::write(data.join("hello"), "hello from the host\n").unwrap();
    let hosts = scratch.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost pod-host\n").unwrap();
    // A recursive read-only mount's source, with a tmpfs under it (as critest makes it): the tmpfs is
    // read-only in the container too.
    let rro_source = scratch.path().join("rro");
    let _tmpfs = Tmpfs::mount(&rro_source.join("tmpfs"));
    // Writable by uid 1000 but for the mount (a tmpfs's root is 1777 already).
    std::fs::set_permissions(&rro_source, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let rro = runtime.recursive_read_only();
    eprintln!("{runtime:?}: recursive read-only mounts supported: {rro}");

    let id = keel_testbed::unique_prefix();
    let layout = Layout::host().unwrap();
    let cgroups_path = cgroup::cgroups_path("/", &id).unwrap();
    let container = Container {
        runtime,
        runc_root: scratch.path().join("runc"),
        id: id.clone(),
        layout: layout.clone(),
        cgroups_path: cgroups_path.clone(),
    };

    let config = api::ContainerConfig {
        metadata: Some(api::ContainerMetadata { name: "c".into(), attempt: 0 }),
        command: s(&["/bin/busybox", "sh", "-c"]),
        args: s(&[
            "id > /data/id; grep CapBnd /proc/self/status > /data/caps; cat /data/hello /etc/hosts > /data/seen; \
             /bin/busybox readlink /proc/self/ns/net > /data/netns; \
             cat /proc/sys/net/ipv4/ping_group_range > /data/sysctl; \
             for f in /rro/top /rro/tmpfs/below; do /bin/busybox touch $f 2>/dev/null; echo $? >> /data/rro; done; \
             echo done > /data/ready; exec /bin/busybox sleep 600",
        ]),
        mounts: vec![
            api::Mount {
                container_path: "/data".into(),
                host_path: data.to_string_lossy().into_owned(),
                ..Default::default()
            },
            api::Mount {
                container_path: "/rro".into(),
                host_path: rro_source.to_string_lossy().into_owned(),
                readonly: true,
                recursive_read_only: rro,
                ..Default::default()
            },
        ],
        linux: Some(api::LinuxContainerConfig {
            resources: Some(api::LinuxContainerResources {
                memory_limit_in_bytes: 64 << 20,
                cpu_shares: 256,
                ..Default::default()
            }),
            security_context: Some(api::LinuxContainerSecurityContext {
                run_as_username: "app".into(),
                supplemental_groups: vec![3000],
                capabilities: Some(api::Capability {
                    add_capabilities: s(&["NET_BIND_SERVICE"]),
                    drop_capabilities: s(&["ALL"]),
                    add_ambient_capabilities: Vec::new(),
                }),
                ..Default::default()
            }),
        }),
        ..Default::default()
    };
    // The pod's network namespace (joined by path); IPC and UTS stay the host's.
    let netns = keel_testbed::NetNs::create(&keel_testbed::unique_prefix()).unwrap();
    let namespaces = PodNamespaces { net: Some(netns.path().to_owned()), ..Default::default() };
    let sandbox = api::PodSandboxConfig {
        hostname: "pod-host".into(),
        linux: Some(api::LinuxPodSandboxConfig {
            sysctls: [("net.ipv4.ping_group_range".to_owned(), "0 2147483647".to_owned())].into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let image = ImageConfiguration::default();
    let files = PodFiles { hosts: Some(hosts), ..Default::default() };
    let input = SpecInput {
        container: &config,
        sandbox: &sandbox,
        image: &image,
        rootfs: &rootfs,
        namespaces: &namespaces,
        files: &files,
        cgroups_path: &cgroups_path,
        privileged_allowed: false,
        recursive_read_only_supported: rro,
    };
    let built = spec::build(&input).unwrap();
    built.save(bundle.join("config.json")).unwrap();

    let log = std::fs::File::create(scratch.path().join("output")).unwrap();
    let status = runtime
        .command(&container.runc_root)
        .args(["run", "--detach", "--bundle"])
        .arg(&bundle)
        .arg(&id)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .status()
        .unwrap();
    let output = std::fs::read_to_string(scratch.path().join("output")).unwrap_or_default();
    assert!(status.success(), "{runtime:?} run failed: {output}");
    wait_for(&data.join("ready"));

    let id_line = std::fs::read_to_string(data.join("id")).unwrap();
    assert!(id_line.starts_with("uid=1000(app) gid=1000(app)"), "{id_line}");
    for group in ["44(video)", "1000(app)", "3000"] {
        assert!(id_line.contains(group), "{group} missing: {id_line}");
    }
    let caps = std::fs::read_to_string(data.join("caps")).unwrap();
    assert_eq!(
        caps.split_whitespace().nth(1),
        Some("0000000000000400"),
        "bounding set NET_BIND_SERVICE only: {caps}"
    );
    // (Effective ones are empty: a non-root process gets no ambient capabilities, as with containerd.)
    let seen = std::fs::read_to_string(data.join("seen")).unwrap();
    assert_eq!(seen, "hello from the host\n127.0.0.1 localhost pod-host\n");

    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(netns.path()).unwrap());
    let joined = std::fs::read_to_string(data.join("netns")).unwrap();
    assert_eq!(joined.trim(), format!("net:[{inode}]"), "the pod's network namespace");
    // Both writes refused with rro (busybox's touch exits 1); plain ro leaves the tmpfs writable.
    let writes = std::fs::read_to_string(data.join("rro")).unwrap();
    let want = if rro { "1\n1\n" } else { "1\n0\n" };
    assert_eq!(writes, want, "touch's exit codes under /rro (recursive read-only: {rro})");
    let sysctl = std::fs::read_to_string(data.join("sysctl")).unwrap();
    assert_eq!(sysctl.split_whitespace().collect::<Vec<_>>(), ["0", "2147483647"], "the pod's sysctl");

    let stats = cgroup::stats(&layout, &cgroups_path).unwrap();
    assert_eq!(stats.memory_limit, Some(64 << 20), "{stats:?}");
    assert!(stats.pids.unwrap_or(0) >= 1, "{stats:?}");
    let shares =
        layout.v1_mount("cpu").map(|m| m.join(cgroups_path.trim_start_matches('/')).join("cpu.shares"));
    if let Some(shares) = shares {
        assert_eq!(std::fs::read_to_string(shares).unwrap().trim(), "256");
    }

    let killed = container.runc(&["delete", "--force", &id]);
    assert!(killed.status.success(), "{}", String::from_utf8_lossy(&killed.stderr));
    cgroup::remove(&layout, &cgroups_path).unwrap();
    for mount in layout.mount_points() {
        let dir = mount.join(cgroups_path.trim_start_matches('/'));
        assert!(!dir.exists(), "{} is left", dir.display());
    }
}

fn wait_for(marker: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the container never wrote {}", marker.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `host_devices` on a fake /dev made with mknod (root): char and block nodes with their numbers,
/// mode and owner; skipped directories, FIFOs, symlinks and plain files left out.
#[test]
fn host_devices_of_a_fake_dev_tree() {
    use nix::sys::stat::{Mode, SFlag, makedev, mknod};
    use oci_spec::runtime::LinuxDeviceType;

    keel_testbed::require_root().unwrap();
    let root = tempfile::tempdir().unwrap();
    let dev = root.path().join("dev");
    for dir in ["dev/net", "dev/pts", "dev/shm"] {
        std::fs::create_dir_all(root.path().join(dir)).unwrap();
    }
    let node = |path: &str, kind: SFlag, mode: u32, major: u64, minor: u64| {
        mknod(&dev.join(path), kind, Mode::from_bits_truncate(mode), makedev(major, minor)).unwrap();
        // mknod applies the umask: the mode is set again.
        std::fs::set_permissions(dev.join(path), std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    };
    node("null", SFlag::S_IFCHR, 0o666, 1, 3);
    node("loop9", SFlag::S_IFBLK, 0o660, 7, 9);
    node("net/tun", SFlag::S_IFCHR, 0o600, 10, 200);
    node("pts/0", SFlag::S_IFCHR, 0o620, 136, 0);
    node("console", SFlag::S_IFCHR, 0o600, 5, 1);
    node("fifo", SFlag::S_IFIFO, 0o600, 0, 0);
    std::os::unix::fs::symlink("null", dev.join("link")).unwrap();
    std::fs::write(dev.join("plain"), "").unwrap();
    nix::unistd::chown(&dev.join("loop9"), None, Some(nix::unistd::Gid::from_raw(6))).unwrap();

    let devices = spec::host_devices(root.path()).unwrap();
    type Summary = (String, LinuxDeviceType, i64, i64, Option<u32>, Option<u32>);
    let summary: Vec<Summary> = devices
        .iter()
        .map(|d| (d.path().display().to_string(), d.typ(), d.major(), d.minor(), d.file_mode(), d.gid()))
        .collect();
    assert_eq!(
        summary,
        vec![
            ("/dev/loop9".to_owned(), LinuxDeviceType::B, 7, 9, Some(0o660), Some(6)),
            ("/dev/net/tun".to_owned(), LinuxDeviceType::C, 10, 200, Some(0o600), Some(0)),
            ("/dev/null".to_owned(), LinuxDeviceType::C, 1, 3, Some(0o666), Some(0)),
        ]
    );
}
