//! [`MountNs`]: a private mount namespace where chosen paths are files of the fixture's, for a peer
//! that writes machine-wide state the test must not change.
//!
//! The upstream kubelet is that peer: its container manager (setupKernelTunables) sets six global
//! sysctls (vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops,
//! kernel.keys.root_maxkeys and root_maxbytes), none of them per network namespace, and it links
//! every container's log from the fixed /var/log/containers (hidden here by a directory of the
//! fixture's over /var/log). In a [`MountNs`] those paths are bind
//! mounts of files under the fixture's temp dir, so the kubelet reads and writes them there and the
//! machine's own stay as they were. The runtime it drives must join the same namespace: the volumes
//! the kubelet mounts (tmpfs for secrets and tokens) exist only inside it.
//!
//! The namespace is held by a `sleep` process made in it; it ends when that process and every
//! process that joined are gone, and its mounts with it.

use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::process::{Daemon, Readiness};

/// A private mount namespace with some paths bound to files of its own; see the module docs.
#[derive(Debug)]
pub struct MountNs {
    fd: MountNsFd,
    // Declared before `dir`: the holder goes before the files it binds.
    holder: Daemon,
    dir: tempfile::TempDir,
}

/// What an existing path inside the namespace is: a file holding `contents`, or an empty directory.
#[derive(Debug, Clone)]
pub enum Overlay {
    File { path: PathBuf, contents: String },
    Dir { path: PathBuf },
}

/// The kubelet's kernel tunables (upstream's desiredState, with the values it wants, so it finds
/// them set and writes nothing), and /var/log for its log links.
pub fn kubelet_overlays() -> Vec<Overlay> {
    let file =
        |path: &str, contents: &str| Overlay::File { path: path.into(), contents: format!("{contents}\n") };
    vec![
        file("/proc/sys/vm/overcommit_memory", "1"),
        file("/proc/sys/vm/panic_on_oom", "0"),
        file("/proc/sys/kernel/panic", "10"),
        file("/proc/sys/kernel/panic_on_oops", "1"),
        file("/proc/sys/kernel/keys/root_maxkeys", "1000000"),
        file("/proc/sys/kernel/keys/root_maxbytes", "25000000"),
        Overlay::Dir { path: "/var/log".into() },
    ]
}

impl MountNs {
    /// Makes the namespace with `overlays` bound in it.
    pub fn new(overlays: &[Overlay]) -> Result<MountNs> {
        let dir = tempfile::Builder::new().prefix("keel-mntns-").tempdir().context("the overlays' dir")?;
        // (source, target) as C strings, prepared before the fork: the child only makes syscalls.
        let mut binds = Vec::new();
        for (index, overlay) in overlays.iter().enumerate() {
            let source = dir.path().join(index.to_string());
            let target = match overlay {
                Overlay::File { path, contents } => {
                    std::fs::write(&source, contents)
                        .with_context(|| format!("writing {}", source.display()))?;
                    path
                }
                Overlay::Dir { path } => {
                    std::fs::create_dir(&source).with_context(|| format!("creating {}", source.display()))?;
                    path
                }
            };
            binds.push((c_path(&source)?, c_path(target)?));
        }
        let mut command = Command::new("sleep");
        command.arg("infinity");
        // SAFETY: between fork and exec the hook makes only unshare(2) and mount(2) calls on strings
        // allocated before the fork.
        unsafe {
            command.pre_exec(move || {
                let check =
                    |rc: libc::c_int| if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) };
                check(libc::unshare(libc::CLONE_NEWNS))?;
                // Nothing made in here propagates back to the machine's namespace.
                check(libc::mount(
                    c"none".as_ptr(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ))?;
                for (source, target) in &binds {
                    check(libc::mount(
                        source.as_ptr(),
                        target.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND,
                        std::ptr::null(),
                    ))?;
                }
                Ok(())
            });
        }
        let holder = Daemon::start("mount-ns", command, Readiness::None, std::time::Duration::from_secs(5))
            .context("starting the mount namespace's holder")?;
        let path = format!("/proc/{}/ns/mnt", holder.pid());
        let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        Ok(MountNs { fd: MountNsFd(Arc::new(OwnedFd::from(file))), holder, dir })
    }

    /// A handle to join it with (valid while the namespace lives).
    pub fn fd(&self) -> &MountNsFd {
        &self.fd
    }

    /// The namespace's mount table (its holder's), to see what was mounted in it.
    pub fn mountinfo(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/mountinfo", self.holder.pid()))
    }

    /// Where the overlays' files are on the machine (the `index`th overlay is `<dir>/<index>`).
    pub fn overlay_dir(&self) -> &Path {
        self.dir.path()
    }
}

/// An open mount namespace, to join.
#[derive(Debug, Clone)]
pub struct MountNsFd(Arc<OwnedFd>);

impl MountNsFd {
    /// Makes `command` join this namespace between fork and exec.
    pub fn enter_on_spawn(&self, command: &mut Command) {
        crate::netns::setns_on_spawn(command, Arc::clone(&self.0), libc::CLONE_NEWNS);
    }
}

fn c_path(path: &Path) -> Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("{} holds a NUL", path.display()))
}
