//! A container's mounts and devices, as containerd's `WithMounts`, `containerMounts` and
//! `WithDevices`/`WithHostDevices` make them.
//!
//! Mounts: the defaults (/proc, a /dev tmpfs, /dev/pts, /dev/shm, /dev/mqueue, /sys read-only,
//! /sys/fs/cgroup read-only), minus those a CRI or pod mount replaces (and everything under /dev when
//! /dev itself is mounted); then the CRI mounts and the pod's /etc/hostname, /etc/hosts and
//! /etc/resolv.conf (each only if no CRI mount has that destination), sorted by depth so a parent
//! never hides a child. A CRI mount's `recursive_read_only` becomes the OCI option `rro` (read-only
//! with every mount under it too, through mount_setattr), as CRI-O and containerd 2 make it: only for
//! a read-only mount with private propagation, on a handler that supports it.
//!
//! /dev/shm: the pod's ([`PodFiles::shm`](super::PodFiles::shm), a tmpfs its sandbox mounted, as
//! containerd bind-mounts one per pod) when it has one, so POSIX shared memory is shared in the pod;
//! a pod in the host's IPC namespace gets the host's /dev/shm, as with containerd; otherwise (no
//! pod shm) each container gets a tmpfs of its own.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use k8s_cri::v1 as api;
use oci_spec::runtime::{LinuxDevice, LinuxDeviceCgroup, LinuxDeviceType, Mount};

use super::{PodFiles, SpecError};

fn mount(destination: &str, typ: &str, source: &str, options: &[&str]) -> Mount {
    let mut m = Mount::default();
    m.set_destination(PathBuf::from(destination));
    m.set_typ(Some(typ.to_owned()));
    m.set_source(Some(PathBuf::from(source)));
    m.set_options(Some(options.iter().map(|o| (*o).to_owned()).collect()));
    m
}

/// containerd's default mounts without /run (`WithoutRunMount`), plus the read-only cgroup mount
/// `WithMounts` adds. `privileged` makes /sys and /sys/fs/cgroup writable (`WithWriteableSysfs`,
/// `WithWriteableCgroupfs`).
pub(super) fn default_mounts(privileged: bool) -> Vec<Mount> {
    let ro = if privileged { "rw" } else { "ro" };
    vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        mount("/dev", "tmpfs", "tmpfs", &["nosuid", "strictatime", "mode=755", "size=65536k"]),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"],
        ),
        mount("/dev/shm", "tmpfs", "shm", &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]),
        mount("/dev/mqueue", "mqueue", "mqueue", &["nosuid", "noexec", "nodev"]),
        mount("/sys", "sysfs", "sysfs", &["nosuid", "noexec", "nodev", ro]),
        mount("/sys/fs/cgroup", "cgroup", "cgroup", &["nosuid", "noexec", "nodev", "relatime", ro]),
    ]
}

/// A path cleaned lexically as Go's `filepath.Clean` does for absolute paths.
pub(super) fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

/// One bind mount to make: a CRI mount or one the runtime adds.
#[derive(Debug, Clone)]
struct Bind {
    destination: String,
    source: PathBuf,
    readonly: bool,
    /// Read-only all the way down (the OCI `rro` option): the mounts under the source too.
    recursive_read_only: bool,
    propagation: api::MountPropagation,
    /// A CRI mount's host path (created when missing, symlinks resolved); the runtime's own files are
    /// used as they are.
    from_cri: bool,
}

/// A recursive read-only CRI mount as the kubelet, containerd and CRI-O accept it: read-only, with
/// private propagation (a mount event from the host or to it would bring a writable mount under it),
/// on a handler whose kernel and runtime support it (see [`crate::oci::features`]).
fn check_recursive_read_only(
    m: &api::Mount,
    propagation: api::MountPropagation,
    supported: bool,
) -> Result<(), SpecError> {
    let invalid = |reason| SpecError::InvalidMount { path: m.container_path.clone(), reason };
    if !m.readonly {
        return Err(invalid("recursive_read_only needs readonly: true"));
    }
    if propagation != api::MountPropagation::PropagationPrivate {
        return Err(invalid("recursive_read_only needs propagation PROPAGATION_PRIVATE"));
    }
    if !supported {
        return Err(SpecError::RecursiveReadOnlyUnsupported { path: m.container_path.clone() });
    }
    Ok(())
}

/// What a container's mounts depend on besides its config and its pod's files.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct MountOptions {
    /// The rootfs is read-only: so are the pod's /etc files.
    pub readonly_rootfs: bool,
    /// The pod is in the host's IPC namespace: the host's /dev/shm.
    pub host_ipc: bool,
    /// A privileged container: /sys and /sys/fs/cgroup writable.
    pub privileged: bool,
    /// The handler's kernel and runtime make `rro` mounts.
    pub recursive_read_only_supported: bool,
}

/// The spec's mounts and the rootfs propagation (`rslave`/`rshared` when a mount asks for it).
pub(super) fn mounts(
    config: &api::ContainerConfig,
    files: &PodFiles,
    options: MountOptions,
) -> Result<(Vec<Mount>, Option<String>), SpecError> {
    let MountOptions { readonly_rootfs, host_ipc, privileged, recursive_read_only_supported } = options;
    let mut binds = Vec::new();
    for m in &config.mounts {
        if !m.container_path.starts_with('/') {
            return Err(SpecError::InvalidMount { path: m.container_path.clone(), reason: "not absolute" });
        }
        if !m.host_path.starts_with('/') {
            return Err(SpecError::InvalidMount {
                path: m.host_path.clone(),
                reason: "host path not absolute",
            });
        }
        if m.image.as_ref().is_some_and(|image| !image.image.is_empty()) {
            return Err(SpecError::InvalidMount {
                path: m.container_path.clone(),
                reason: "image volumes are not supported",
            });
        }
        if !m.uid_mappings.is_empty() || !m.gid_mappings.is_empty() {
            return Err(SpecError::InvalidMount {
                path: m.container_path.clone(),
                reason: "id-mapped mounts are not supported",
            });
        }
        let propagation = api::MountPropagation::try_from(m.propagation)
            .unwrap_or(api::MountPropagation::PropagationPrivate);
        if m.recursive_read_only {
            check_recursive_read_only(m, propagation, recursive_read_only_supported)?;
        }
        binds.push(Bind {
            destination: m.container_path.clone(),
            source: PathBuf::from(&m.host_path),
            readonly: m.readonly,
            recursive_read_only: m.recursive_read_only,
            propagation,
            from_cri: true,
        });
    }
    let covered = |destination: &str| config.mounts.iter().any(|m| clean(&m.container_path) == destination);
    let pod_files = [
        ("/etc/hostname", &files.hostname),
        ("/etc/hosts", &files.hosts),
        ("/etc/resolv.conf", &files.resolv_conf),
    ];
    for (destination, source) in pod_files {
        if let Some(source) = source
            && !covered(destination)
        {
            binds.push(Bind {
                destination: destination.to_owned(),
                source: source.clone(),
                readonly: readonly_rootfs,
                recursive_read_only: false,
                propagation: api::MountPropagation::PropagationPrivate,
                from_cri: false,
            });
        }
    }
    let shm = if host_ipc { Some(PathBuf::from("/dev/shm")) } else { files.shm.clone() };
    if let Some(shm) = shm
        && !covered("/dev/shm")
    {
        binds.push(Bind {
            destination: "/dev/shm".to_owned(),
            source: shm,
            readonly: false,
            recursive_read_only: false,
            propagation: api::MountPropagation::PropagationPrivate,
            from_cri: false,
        });
    }
    binds.sort_by_key(|b| clean(&b.destination).matches('/').count());

    let destinations: Vec<String> = binds.iter().map(|b| clean(&b.destination)).collect();
    let dev_mounted = destinations.iter().any(|d| d == "/dev");
    let mut out: Vec<Mount> = default_mounts(privileged)
        .into_iter()
        .filter(|m| {
            let destination = clean(&m.destination().to_string_lossy());
            !(destinations.contains(&destination) || (dev_mounted && destination.starts_with("/dev/")))
        })
        .collect();

    let mut rootfs_propagation: Option<String> = None;
    for bind in binds {
        let source = if bind.from_cri { resolve_source(&bind.source)? } else { bind.source };
        let propagation = match bind.propagation {
            api::MountPropagation::PropagationPrivate => "rprivate",
            api::MountPropagation::PropagationHostToContainer => {
                if rootfs_propagation.as_deref() != Some("rshared") {
                    rootfs_propagation = Some("rslave".to_owned());
                }
                "rslave"
            }
            api::MountPropagation::PropagationBidirectional => {
                rootfs_propagation = Some("rshared".to_owned());
                "rshared"
            }
        };
        let rw = match (bind.recursive_read_only, bind.readonly) {
            (true, _) => "rro",
            (false, true) => "ro",
            (false, false) => "rw",
        };
        let mut m = Mount::default();
        m.set_destination(PathBuf::from(&bind.destination));
        m.set_typ(Some("bind".to_owned()));
        m.set_source(Some(source));
        m.set_options(Some(vec!["rbind".to_owned(), propagation.to_owned(), rw.to_owned()]));
        out.push(m);
    }
    Ok((out, rootfs_propagation))
}

/// A CRI mount's host path with symlinks resolved; a missing one is created as a directory (0755), as
/// containerd and CRI-O do (the kubelet's hostPath volumes of type "" rely on it). A path that cannot
/// be created (a file on the way, no permission) is [`SpecError::MountSource`].
fn resolve_source(path: &Path) -> Result<PathBuf, SpecError> {
    let fail = |source: io::Error| SpecError::MountSource { path: path.to_owned(), source };
    match std::fs::symlink_metadata(path) {
        Ok(_) => {}
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new().recursive(true).create(path).map_err(fail)?;
        }
        Err(err) => return Err(fail(err)),
    }
    std::fs::canonicalize(path).map_err(fail)
}

/// Device nodes under `dir` (recursively; the subdirectories and files containerd skips are skipped:
/// pts, shm, fd, mqueue, .lxc, .lxd-mounts, .udev, console; FIFOs and non-devices are ignored), each
/// with its path placed under `container_dir`.
fn devices_in(dir: &Path, container_dir: &Path, out: &mut Vec<LinuxDevice>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            if matches!(
                name.to_str(),
                Some("pts" | "shm" | "fd" | "mqueue" | ".lxc" | ".lxd-mounts" | ".udev")
            ) {
                continue;
            }
            devices_in(&entry.path(), &container_dir.join(&name), out)?;
        } else if name != "console" {
            match device(&entry.path(), &container_dir.join(&name)) {
                Ok(Some(dev)) => out.push(dev),
                Ok(None) => {}
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => return Err(err),
            }
        }
    }
    Ok(())
}

/// The device node at `path` (not following a symlink), `None` if it is not a block or char device.
fn device(path: &Path, container_path: &Path) -> io::Result<Option<LinuxDevice>> {
    let meta = std::fs::symlink_metadata(path)?;
    let typ = if meta.file_type().is_block_device() {
        LinuxDeviceType::B
    } else if meta.file_type().is_char_device() {
        LinuxDeviceType::C
    } else {
        return Ok(None);
    };
    let rdev = meta.rdev();
    let mut dev = LinuxDevice::default();
    dev.set_path(container_path.to_owned());
    dev.set_typ(typ);
    dev.set_major(i64::try_from(nix::sys::stat::major(rdev)).unwrap_or(i64::MAX));
    dev.set_minor(i64::try_from(nix::sys::stat::minor(rdev)).unwrap_or(i64::MAX));
    dev.set_file_mode(Some(meta.mode() & 0o7777));
    dev.set_uid(Some(meta.uid()));
    dev.set_gid(Some(meta.gid()));
    Ok(Some(dev))
}

/// Every device node of the host's /dev under `root` (`/` on a host; a tree in tests), as containerd's
/// `WithHostDevices` gives privileged containers. Paths are the nodes' paths inside the container
/// (`/dev/...`).
pub fn host_devices(root: &Path) -> io::Result<Vec<LinuxDevice>> {
    let mut out = Vec::new();
    devices_in(&root.join("dev"), Path::new("/dev"), &mut out)?;
    out.sort_by(|a, b| a.path().cmp(b.path()));
    Ok(out)
}

/// The CRI's devices (`ContainerConfig.devices`): each host path (symlinks resolved; a directory
/// stands for the devices in it) becomes device nodes at the container path and cgroup rules with
/// the requested permissions, as containerd's `WithDevices`.
pub(super) fn cri_devices(
    config: &api::ContainerConfig,
) -> Result<(Vec<LinuxDevice>, Vec<LinuxDeviceCgroup>), SpecError> {
    let mut nodes = Vec::new();
    let mut rules = Vec::new();
    for requested in &config.devices {
        let fail = |source: io::Error| SpecError::Device { path: requested.host_path.clone(), source };
        let permissions =
            if requested.permissions.is_empty() { "rwm" } else { requested.permissions.as_str() };
        if !permissions.chars().all(|c| matches!(c, 'r' | 'w' | 'm')) {
            return Err(SpecError::InvalidDevice {
                path: requested.host_path.clone(),
                reason: "permissions other than r, w, m",
            });
        }
        if !requested.container_path.starts_with('/') {
            return Err(SpecError::InvalidDevice {
                path: requested.container_path.clone(),
                reason: "not absolute",
            });
        }
        let host = std::fs::canonicalize(&requested.host_path).map_err(fail)?;
        let mut found = Vec::new();
        if host.is_dir() {
            devices_in(&host, Path::new(&requested.container_path), &mut found).map_err(fail)?;
        } else {
            match device(&host, Path::new(&requested.container_path)).map_err(fail)? {
                Some(dev) => found.push(dev),
                None => {
                    return Err(SpecError::InvalidDevice {
                        path: requested.host_path.clone(),
                        reason: "not a device",
                    });
                }
            }
        }
        for dev in found {
            let mut rule = LinuxDeviceCgroup::default();
            rule.set_allow(true);
            rule.set_typ(Some(dev.typ()));
            rule.set_major(Some(dev.major()));
            rule.set_minor(Some(dev.minor()));
            rule.set_access(Some(permissions.to_owned()));
            rules.push(rule);
            nodes.push(dev);
        }
    }
    Ok((nodes, rules))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn destinations(mounts: &[Mount]) -> Vec<String> {
        mounts.iter().map(|m| m.destination().to_string_lossy().into_owned()).collect()
    }

    fn options(mounts: &[Mount], destination: &str) -> Vec<String> {
        mounts
            .iter()
            .find(|m| m.destination() == Path::new(destination))
            .and_then(|m| m.options().clone())
            .unwrap_or_default()
    }

    fn cri_mount(
        container: &str,
        host: &Path,
        readonly: bool,
        propagation: api::MountPropagation,
    ) -> api::Mount {
        api::Mount {
            container_path: container.to_owned(),
            host_path: host.to_string_lossy().into_owned(),
            readonly,
            propagation: propagation as i32,
            ..Default::default()
        }
    }

    #[test]
    fn clean_is_lexical() {
        for (input, want) in
            [("/a/b/../c/", "/a/c"), ("/../x", "/x"), ("//a//./b", "/a/b"), ("/", "/"), ("a", "/a")]
        {
            assert_eq!(clean(input), want, "{input}");
        }
    }

    #[test]
    fn defaults_only_when_nothing_is_mounted() {
        let (built, propagation) =
            mounts(&api::ContainerConfig::default(), &PodFiles::default(), MountOptions::default()).unwrap();
        assert_eq!(
            destinations(&built),
            ["/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys", "/sys/fs/cgroup"]
        );
        assert_eq!(propagation, None);
        assert!(options(&built, "/sys").contains(&"ro".to_owned()));
        assert!(options(&built, "/sys/fs/cgroup").contains(&"ro".to_owned()));
        let (privileged, _) = mounts_of(&api::ContainerConfig::default(), true);
        assert!(options(&privileged, "/sys").contains(&"rw".to_owned()));
        assert!(options(&privileged, "/sys/fs/cgroup").contains(&"rw".to_owned()));
    }

    fn mounts_of(config: &api::ContainerConfig, privileged: bool) -> (Vec<Mount>, Option<String>) {
        mounts(config, &PodFiles::default(), MountOptions { privileged, ..MountOptions::default() }).unwrap()
    }

    #[test]
    fn cri_mounts_are_binds_sorted_by_depth_with_propagation() {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("vol");
        std::fs::create_dir(&host).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&host, &link).unwrap();
        let config = api::ContainerConfig {
            mounts: vec![
                cri_mount("/data/deep/er", &host, false, api::MountPropagation::PropagationHostToContainer),
                cri_mount("/data", &link, true, api::MountPropagation::PropagationPrivate),
                cri_mount("/shared", &host, false, api::MountPropagation::PropagationBidirectional),
            ],
            ..Default::default()
        };
        let (mounts, propagation) = mounts_of(&config, false);
        let names = destinations(&mounts);
        assert_eq!(&names[7..], ["/data", "/shared", "/data/deep/er"]);
        assert_eq!(options(&mounts, "/data"), ["rbind", "rprivate", "ro"]);
        assert_eq!(options(&mounts, "/data/deep/er"), ["rbind", "rslave", "rw"]);
        assert_eq!(options(&mounts, "/shared"), ["rbind", "rshared", "rw"]);
        assert_eq!(propagation.as_deref(), Some("rshared"), "rshared wins over rslave");
        let data = mounts.iter().find(|m| m.destination() == Path::new("/data")).unwrap();
        assert_eq!(
            data.source().as_deref(),
            Some(std::fs::canonicalize(&host).unwrap().as_path()),
            "symlink resolved"
        );
        assert_eq!(data.typ().as_deref(), Some("bind"));

        let only_slave = api::ContainerConfig {
            mounts: vec![cri_mount("/x", &host, false, api::MountPropagation::PropagationHostToContainer)],
            ..Default::default()
        };
        assert_eq!(mounts_of(&only_slave, false).1.as_deref(), Some("rslave"));
    }

    #[test]
    fn cri_mounts_replace_defaults_and_dev_replaces_everything_under_it() {
        let dir = tempfile::tempdir().unwrap();
        let config = api::ContainerConfig {
            mounts: vec![
                cri_mount("/sys/", dir.path(), false, api::MountPropagation::PropagationPrivate),
                cri_mount("/dev", dir.path(), false, api::MountPropagation::PropagationPrivate),
            ],
            ..Default::default()
        };
        let (mounts, _) = mounts_of(&config, false);
        assert_eq!(destinations(&mounts), ["/proc", "/sys/fs/cgroup", "/sys/", "/dev"]);
    }

    #[test]
    fn pod_files_are_mounted_unless_a_cri_mount_covers_them() {
        let dir = tempfile::tempdir().unwrap();
        let files = PodFiles {
            hostname: Some(dir.path().join("hostname")),
            hosts: Some(dir.path().join("hosts")),
            resolv_conf: Some(dir.path().join("resolv.conf")),
            shm: None,
        };
        let config = api::ContainerConfig {
            mounts: vec![cri_mount(
                "/etc/hosts",
                dir.path(),
                false,
                api::MountPropagation::PropagationPrivate,
            )],
            ..Default::default()
        };
        let (built, _) =
            mounts(&config, &files, MountOptions { readonly_rootfs: true, ..MountOptions::default() })
                .unwrap();
        let names = destinations(&built);
        assert_eq!(&names[7..], ["/etc/hosts", "/etc/hostname", "/etc/resolv.conf"]);
        assert_eq!(
            options(&built, "/etc/hostname"),
            ["rbind", "rprivate", "ro"],
            "read-only rootfs: read-only files"
        );
        let hosts = built.iter().find(|m| m.destination() == Path::new("/etc/hosts")).unwrap();
        assert_eq!(hosts.source().as_deref(), Some(std::fs::canonicalize(dir.path()).unwrap().as_path()));
        // No files: nothing added.
        let (built, _) = mounts(
            &api::ContainerConfig::default(),
            &PodFiles::default(),
            MountOptions { readonly_rootfs: true, ..MountOptions::default() },
        )
        .unwrap();
        assert_eq!(built.len(), 7);
    }

    #[test]
    fn host_ipc_binds_the_hosts_dev_shm() {
        let (built, _) = mounts(
            &api::ContainerConfig::default(),
            &PodFiles::default(),
            MountOptions { host_ipc: true, ..MountOptions::default() },
        )
        .unwrap();
        let shm: Vec<&Mount> = built.iter().filter(|m| m.destination() == Path::new("/dev/shm")).collect();
        assert_eq!(shm.len(), 1);
        assert_eq!(shm[0].typ().as_deref(), Some("bind"));
        assert_eq!(shm[0].source().as_deref(), Some(Path::new("/dev/shm")));
    }

    #[test]
    fn missing_host_paths_are_created_and_bad_ones_refused() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("a/b/c");
        let config = api::ContainerConfig {
            mounts: vec![cri_mount("/m", &missing, false, api::MountPropagation::PropagationPrivate)],
            ..Default::default()
        };
        mounts_of(&config, false);
        assert!(missing.is_dir(), "created as containerd and CRI-O create it");

        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let under_file = api::ContainerConfig {
            mounts: vec![cri_mount("/m", &file.join("x"), false, api::MountPropagation::PropagationPrivate)],
            ..Default::default()
        };
        let err = mounts(&under_file, &PodFiles::default(), MountOptions::default()).unwrap_err();
        assert!(matches!(err, SpecError::MountSource { .. }), "{err}");

        let bad: &[(api::Mount, &str)] = &[
            (
                api::Mount { container_path: "rel".into(), host_path: "/x".into(), ..Default::default() },
                "not absolute",
            ),
            (
                api::Mount { container_path: "/x".into(), host_path: String::new(), ..Default::default() },
                "host path",
            ),
            (
                api::Mount {
                    container_path: "/x".into(),
                    host_path: "/x".into(),
                    uid_mappings: vec![api::IdMapping::default()],
                    ..Default::default()
                },
                "id-mapped",
            ),
        ];
        for (m, want) in bad {
            let config = api::ContainerConfig { mounts: vec![m.clone()], ..Default::default() };
            let err = mounts(&config, &PodFiles::default(), MountOptions::default()).unwrap_err();
            assert!(
                matches!(&err, SpecError::InvalidMount { .. }) && err.to_string().contains(want),
                "{err}"
            );
        }
    }

    #[test]
    fn recursive_read_only_mounts_are_rro_when_read_only_private_and_supported() {
        let dir = tempfile::tempdir().unwrap();
        let rro = |readonly: bool, propagation: api::MountPropagation| api::ContainerConfig {
            mounts: vec![api::Mount {
                recursive_read_only: true,
                ..cri_mount("/rro", dir.path(), readonly, propagation)
            }],
            ..Default::default()
        };
        let supported = MountOptions { recursive_read_only_supported: true, ..MountOptions::default() };
        let build = |config: &api::ContainerConfig, options| mounts(config, &PodFiles::default(), options);

        let (built, propagation) =
            build(&rro(true, api::MountPropagation::PropagationPrivate), supported).unwrap();
        assert_eq!(options(&built, "/rro"), ["rbind", "rprivate", "rro"]);
        assert_eq!(propagation, None);

        // What the kubelet and critest refuse: read-write, or propagation other than private; refused
        // before the host path is created.
        for (readonly, propagation, want) in [
            (false, api::MountPropagation::PropagationPrivate, "needs readonly: true"),
            (true, api::MountPropagation::PropagationHostToContainer, "PROPAGATION_PRIVATE"),
            (true, api::MountPropagation::PropagationBidirectional, "PROPAGATION_PRIVATE"),
        ] {
            let mut config = rro(readonly, propagation);
            config.mounts[0].host_path = dir.path().join("not-created").to_string_lossy().into_owned();
            let err = build(&config, supported).unwrap_err();
            assert!(
                matches!(&err, SpecError::InvalidMount { .. }) && err.to_string().contains(want),
                "{err}"
            );
            assert_eq!(err.code(), tonic::Code::InvalidArgument);
            assert!(!dir.path().join("not-created").exists());
        }

        // A handler without rro (an old kernel or runtime): FailedPrecondition.
        let err = build(&rro(true, api::MountPropagation::PropagationPrivate), MountOptions::default())
            .unwrap_err();
        assert!(matches!(err, SpecError::RecursiveReadOnlyUnsupported { .. }), "{err}");
        assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    }

    #[test]
    fn host_devices_come_from_the_dev_tree_under_the_root() {
        // The machine's own /dev stands in for a fake tree (device nodes need mknod; reading is enough).
        let devices = host_devices(Path::new("/")).unwrap();
        let null = devices.iter().find(|d| d.path() == Path::new("/dev/null")).expect("/dev/null");
        assert_eq!((null.typ(), null.major(), null.minor()), (LinuxDeviceType::C, 1, 3));
        assert!(
            devices
                .iter()
                .all(|d| !d.path().starts_with("/dev/pts") && d.path() != Path::new("/dev/console"))
        );
        // A tree without device nodes gives none; one without /dev is an error.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("dev/pts")).unwrap();
        std::fs::write(dir.path().join("dev/notadevice"), "").unwrap();
        assert_eq!(host_devices(dir.path()).unwrap(), Vec::new());
        assert!(host_devices(&dir.path().join("none")).is_err());
    }

    #[test]
    fn cri_devices_become_nodes_and_cgroup_rules() {
        let config = api::ContainerConfig {
            devices: vec![api::Device {
                container_path: "/dev/mynull".into(),
                host_path: "/dev/null".into(),
                permissions: "rw".into(),
            }],
            ..Default::default()
        };
        let (nodes, rules) = cri_devices(&config).unwrap();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].path(), Path::new("/dev/mynull"));
        assert_eq!(rules[0].access().as_deref(), Some("rw"));
        assert_eq!((rules[0].major(), rules[0].minor(), rules[0].allow()), (Some(1), Some(3), true));

        let bad = |host: &str, container: &str, permissions: &str| {
            let config = api::ContainerConfig {
                devices: vec![api::Device {
                    container_path: container.into(),
                    host_path: host.into(),
                    permissions: permissions.into(),
                }],
                ..Default::default()
            };
            cri_devices(&config).unwrap_err()
        };
        assert!(matches!(bad("/dev/null", "/dev/x", "rwx"), SpecError::InvalidDevice { .. }));
        assert!(matches!(bad("/dev/null", "dev/x", "r"), SpecError::InvalidDevice { .. }));
        assert!(matches!(bad("/etc/hostname", "/dev/x", "r"), SpecError::InvalidDevice { .. }));
        assert!(matches!(bad("/nonexistent-device", "/dev/x", "r"), SpecError::Device { .. }));
    }
}
