//! A pod's network, IPC and UTS namespaces without a process to hold them: a dedicated thread
//! unshares them (a thread's namespaces are its own), sets the hostname, brings the loopback up, and
//! bind-mounts `/proc/thread-self/ns/{net,ipc,uts}` onto files under the sandbox's `ns/` directory;
//! the mounts keep the namespaces alive after the thread is gone. Unmounting them (and every process
//! inside leaving) frees them. The pod's sysctls are written there too (/proc/sys answers for the
//! namespaces of the thread that opens it); only those of a namespace the pod owns are accepted
//! ([`sysctl_namespace`]).

use std::io;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;

use crate::oci::spec::PodNamespaces;

/// Which namespaces a pod gets of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    /// A network namespace (not for a host-network pod).
    pub net: bool,
    /// An IPC namespace (not for a pod with `ipc: NODE`).
    pub ipc: bool,
    /// A UTS namespace (not for a host-network pod, which keeps the node's hostname).
    pub uts: bool,
}

/// The namespace a sysctl belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SysctlNamespace {
    /// `net.*`.
    Net,
    /// `kernel.shm*`, `kernel.msg*`, `kernel.sem`, `fs.mqueue.*`.
    Ipc,
}

/// The namespace of sysctl `name` (dotted, or slashed as under /proc/sys), as Kubernetes counts
/// namespaced sysctls; `None` for a node-wide one.
pub fn sysctl_namespace(name: &str) -> Option<SysctlNamespace> {
    let dotted = name.replace('/', ".");
    if dotted.starts_with("net.") {
        Some(SysctlNamespace::Net)
    } else if dotted.starts_with("kernel.shm")
        || dotted.starts_with("kernel.msg")
        || dotted == "kernel.sem"
        || dotted.starts_with("fs.mqueue.")
    {
        Some(SysctlNamespace::Ipc)
    } else {
        None
    }
}

/// The /proc/sys path of sysctl `name`: a slashed name as it is, a dotted one with dots as slashes.
fn sysctl_path(name: &str) -> PathBuf {
    let relative = if name.contains('/') { name.to_owned() } else { name.replace('.', "/") };
    Path::new("/proc/sys").join(relative.trim_start_matches('/'))
}

/// The namespace kinds, with their `/proc/.../ns` names and clone flags.
const KINDS: [(&str, CloneFlags); 3] =
    [("net", CloneFlags::CLONE_NEWNET), ("ipc", CloneFlags::CLONE_NEWIPC), ("uts", CloneFlags::CLONE_NEWUTS)];

/// Creates the wanted namespaces and mounts them under `ns_dir` (created); `hostname` is set in the
/// new UTS namespace, `sysctls` in the new namespaces (checked by the caller with
/// [`sysctl_namespace`]). On failure nothing is left mounted and `ns_dir` is removed.
pub fn create(
    ns_dir: &Path,
    wanted: Wanted,
    hostname: &str,
    sysctls: &[(String, String)],
) -> io::Result<PodNamespaces> {
    let mut namespaces = PodNamespaces::default();
    if !(wanted.net || wanted.ipc || wanted.uts) {
        return Ok(namespaces);
    }
    std::fs::create_dir_all(ns_dir)?;
    let result = std::thread::scope(|scope| {
        scope
            .spawn(|| unshare_and_mount(ns_dir, wanted, hostname, sysctls))
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
    });
    if let Err(e) = result {
        remove(ns_dir);
        return Err(e);
    }
    let path = |name: &str| ns_dir.join(name);
    namespaces.net = wanted.net.then(|| path("net"));
    namespaces.ipc = wanted.ipc.then(|| path("ipc"));
    namespaces.uts = wanted.uts.then(|| path("uts"));
    Ok(namespaces)
}

fn unshare_and_mount(
    ns_dir: &Path,
    wanted: Wanted,
    hostname: &str,
    sysctls: &[(String, String)],
) -> io::Result<()> {
    let want = [wanted.net, wanted.ipc, wanted.uts];
    let mut flags = CloneFlags::empty();
    for ((_, flag), on) in KINDS.iter().zip(want) {
        if on {
            flags |= *flag;
        }
    }
    nix::sched::unshare(flags).map_err(|e| io::Error::other(format!("unshare({flags:?}): {e}")))?;
    if wanted.uts {
        nix::unistd::sethostname(hostname)
            .map_err(|e| io::Error::other(format!("sethostname({hostname:?}): {e}")))?;
    }
    if wanted.net {
        loopback_up().map_err(|e| io::Error::other(format!("bringing lo up in the pod: {e}")))?;
    }
    for (name, value) in sysctls {
        let path = sysctl_path(name);
        std::fs::write(&path, value).map_err(|e| {
            io::Error::new(e.kind(), format!("sysctl {name}={value} ({}): {e}", path.display()))
        })?;
    }
    for ((name, _), on) in KINDS.iter().zip(want) {
        if !on {
            continue;
        }
        let target = ns_dir.join(name);
        std::fs::OpenOptions::new().write(true).create_new(true).open(&target)?;
        let source = PathBuf::from(format!("/proc/thread-self/ns/{name}"));
        nix::mount::mount(Some(&source), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>).map_err(
            |e| io::Error::other(format!("bind-mounting {} on {}: {e}", source.display(), target.display())),
        )?;
    }
    Ok(())
}

/// Sets the calling thread's loopback up (what the CNI loopback plugin does for containerd).
fn loopback_up() -> io::Result<()> {
    // SAFETY: a plain socket(2) call; the descriptor is owned right away.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor we just opened and nothing else owns.
    let socket = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the flags of the named interface into the ifreq we own.
    if unsafe { libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut request) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the flags member of the union is the one SIOCGIFFLAGS filled in.
    unsafe {
        request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
    }
    // SAFETY: SIOCSIFFLAGS reads the ifreq we own.
    if unsafe { libc::ioctl(fd, libc::SIOCSIFFLAGS, &request) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `path` is a namespace file (a bind mount of one still in place, as after `create`; not
/// after a reboot or an unmount).
pub fn is_mounted(path: &Path) -> bool {
    nix::sys::statfs::statfs(path).is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::NSFS_MAGIC)
}

/// Unmounts every namespace file under `ns_dir` and removes the directory; missing ones are fine.
/// Errors other than "not mounted" are logged, and the directory is then left in place.
pub fn remove(ns_dir: &Path) {
    for (name, _) in KINDS {
        let target = ns_dir.join(name);
        match nix::mount::umount2(&target, MntFlags::MNT_DETACH) {
            Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => {}
            Err(e) => tracing::warn!(path = %target.display(), "unmounting a pod namespace: {e}"),
        }
        match std::fs::remove_file(&target) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %target.display(), "removing a pod namespace file: {e}"),
        }
    }
    match std::fs::remove_dir(ns_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %ns_dir.display(), "removing the pod's namespace directory: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_sysctls() {
        assert_eq!(sysctl_namespace("net.ipv4.ip_unprivileged_port_start"), Some(SysctlNamespace::Net));
        assert_eq!(sysctl_namespace("net/ipv4/conf/eth0.100/rp_filter"), Some(SysctlNamespace::Net));
        assert_eq!(sysctl_namespace("kernel.shm_rmid_forced"), Some(SysctlNamespace::Ipc));
        assert_eq!(sysctl_namespace("kernel.msgmax"), Some(SysctlNamespace::Ipc));
        assert_eq!(sysctl_namespace("kernel.sem"), Some(SysctlNamespace::Ipc));
        assert_eq!(sysctl_namespace("fs.mqueue.msg_max"), Some(SysctlNamespace::Ipc));
        assert_eq!(sysctl_namespace("kernel.panic"), None);
        assert_eq!(sysctl_namespace("vm.swappiness"), None);
        assert_eq!(sysctl_path("net.ipv4.ip_forward"), Path::new("/proc/sys/net/ipv4/ip_forward"));
        assert_eq!(
            sysctl_path("net/ipv4/conf/eth0.100/rp_filter"),
            Path::new("/proc/sys/net/ipv4/conf/eth0.100/rp_filter")
        );
    }
}
