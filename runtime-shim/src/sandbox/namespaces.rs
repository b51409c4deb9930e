//! A pod's network, IPC and UTS namespaces without a process to hold them: a dedicated thread
//! unshares them (a thread's namespaces are its own), sets the hostname, brings the loopback up, and
//! bind-mounts `/proc/thread-self/ns/{net,ipc,uts}` onto files under the sandbox's `ns/` directory;
//! the mounts keep the namespaces alive after the thread is gone. Unmounting them (and every process
//! inside leaving) frees them.

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

/// The namespace kinds, with their `/proc/.../ns` names and clone flags.
const KINDS: [(&str, CloneFlags); 3] =
    [("net", CloneFlags::CLONE_NEWNET), ("ipc", CloneFlags::CLONE_NEWIPC), ("uts", CloneFlags::CLONE_NEWUTS)];

/// Creates the wanted namespaces and mounts them under `ns_dir` (created); `hostname` is set in the
/// new UTS namespace. On failure nothing is left mounted and `ns_dir` is removed.
pub fn create(ns_dir: &Path, wanted: Wanted, hostname: &str) -> io::Result<PodNamespaces> {
    let mut namespaces = PodNamespaces::default();
    if !(wanted.net || wanted.ipc || wanted.uts) {
        return Ok(namespaces);
    }
    std::fs::create_dir_all(ns_dir)?;
    let result = std::thread::scope(|scope| {
        scope
            .spawn(|| unshare_and_mount(ns_dir, wanted, hostname))
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

fn unshare_and_mount(ns_dir: &Path, wanted: Wanted, hostname: &str) -> io::Result<()> {
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
