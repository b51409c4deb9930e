//! Named network namespaces, compatible with `ip netns`: each one is a bind mount of the namespace file
//! under `/run/netns/NAME`, so `ip netns list` and `ip -n NAME ...` see it.
//!
//! Code runs inside a namespace on a dedicated thread that entered it with `setns(CLONE_NEWNET)` (a
//! thread's network namespace is its own; the rest of the process is untouched), and commands are
//! started with a `pre_exec` hook that enters only the network namespace. `ip netns exec` is avoided on
//! purpose: it also unshares the mount namespace and remounts /sys, which hides the cgroup hierarchies
//! from whatever it starts (runc then fails), and it costs a process per call.

use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::future::Future;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;

/// Where `ip netns` keeps its named namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// A handle on a network namespace: an open namespace file, cheap to clone and send to other threads.
/// It keeps the namespace alive while it exists, but does not own its name.
#[derive(Debug, Clone)]
pub struct NetNsFd {
    fd: Arc<OwnedFd>,
}

impl NetNsFd {
    /// Opens a namespace file such as `/run/netns/NAME` or `/proc/PID/ns/net`.
    pub fn open(path: &Path) -> Result<NetNsFd> {
        let file = File::open(path).with_context(|| format!("open network namespace {}", path.display()))?;
        Ok(NetNsFd { fd: Arc::new(OwnedFd::from(file)) })
    }

    /// The network namespace of the calling thread.
    pub fn current() -> Result<NetNsFd> {
        NetNsFd::open(Path::new("/proc/thread-self/ns/net"))
    }

    /// Runs `f` on a new thread that has entered this namespace, and returns its result. A panic in `f`
    /// is resumed on the caller's thread.
    pub fn run<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        std::thread::scope(|scope| {
            let thread = scope.spawn(|| -> Result<T> {
                nix::sched::setns(self.fd.as_fd(), CloneFlags::CLONE_NEWNET)
                    .context("setns(CLONE_NEWNET) into the test namespace")?;
                Ok(f())
            });
            match thread.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Runs the future made by `f` to completion on a current-thread tokio runtime whose thread has
    /// entered this namespace. Sockets made inside it (netlink, TCP) belong to this namespace.
    pub fn block_on<T, Fut, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> Fut + Send,
        Fut: Future<Output = T>,
        T: Send,
    {
        self.run(|| -> Result<T> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("build a tokio runtime for a namespace thread")?;
            Ok(runtime.block_on(f()))
        })?
    }

    /// A command that will run `program` inside this network namespace (and only its network namespace:
    /// mounts, cgroups and PIDs stay the caller's).
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new(program);
        self.enter_on_spawn(&mut command);
        command
    }

    /// Makes `command` enter this network namespace between fork and exec.
    pub fn enter_on_spawn(&self, command: &mut Command) {
        setns_on_spawn(command, Arc::clone(&self.fd), libc::CLONE_NEWNET);
    }

    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A named network namespace this process created; removed (unmounted and unlinked) on drop.
///
/// The kernel frees the namespace itself when nothing refers to it any more: no name, no process inside,
/// no open socket or handle. Stop the processes you started in it before dropping it.
#[derive(Debug)]
pub struct NetNs {
    name: String,
    path: PathBuf,
    fd: NetNsFd,
}

impl NetNs {
    /// Creates a new, empty network namespace named `name` (as `ip netns add NAME` does). Its loopback
    /// is down, as in any new namespace.
    pub fn create(name: &str) -> Result<NetNs> {
        check_name(name)?;
        prepare_netns_dir()?;
        let path = Path::new(NETNS_DIR).join(name);
        let create = || OpenOptions::new().write(true).create_new(true).open(&path);
        if let Err(err) = create() {
            // A test name carrying our own pid that we did not make (names are unique within a process)
            // is the leftover of an earlier, crashed process that had the same pid: take it over.
            if err.kind() != std::io::ErrorKind::AlreadyExists
                || crate::owner_of(name) != Some(std::process::id())
            {
                return Err(err)
                    .with_context(|| format!("create the mount point of network namespace {name}"));
            }
            remove_named(name);
            create().with_context(|| format!("create the mount point of network namespace {name}"))?;
        }
        // rtnetlink's NetworkNamespace::add forks the whole process to unshare, which is unsound in a
        // multi-threaded test harness; unsharing on a thread of our own is safe and cheaper.
        let mounted = std::thread::scope(|scope| {
            scope
                .spawn(|| -> Result<()> {
                    nix::sched::unshare(CloneFlags::CLONE_NEWNET).context("unshare(CLONE_NEWNET)")?;
                    nix::mount::mount(
                        Some("/proc/thread-self/ns/net"),
                        &path,
                        None::<&str>,
                        MsFlags::MS_BIND,
                        None::<&str>,
                    )
                    .context("bind-mount the namespace file")
                })
                .join()
                .unwrap_or_else(|_| bail!("the namespace-creating thread panicked"))
        });
        if let Err(err) = mounted {
            let _ = fs::remove_file(&path);
            return Err(err.context(format!("create network namespace {name}")));
        }
        let fd = match NetNsFd::open(&path) {
            Ok(fd) => fd,
            Err(err) => {
                remove_named(name);
                return Err(err);
            }
        };
        Ok(NetNs { name: name.to_owned(), path, fd })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/NAME`: what `nsenter --net=` and CNI's `CNI_NETNS` take.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A handle that can be cloned and sent to other threads.
    pub fn fd(&self) -> &NetNsFd {
        &self.fd
    }

    /// See [`NetNsFd::run`].
    pub fn run<T: Send, F: FnOnce() -> T + Send>(&self, f: F) -> Result<T> {
        self.fd.run(f)
    }

    /// See [`NetNsFd::block_on`].
    pub fn block_on<T, Fut, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> Fut + Send,
        Fut: Future<Output = T>,
        T: Send,
    {
        self.fd.block_on(f)
    }

    /// See [`NetNsFd::command`].
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        self.fd.command(program)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        remove_named(&self.name);
    }
}

/// Makes /run/netns a mount point with shared propagation, as `ip netns add` does, once per process.
///
/// Both must agree: if `ip netns` turns /run/netns into a self bind mount after we mounted namespace
/// files under it, those mounts stay behind in the covered directory and their files can never be
/// removed (EBUSY). Doing it first, under a lock against parallel test processes, keeps every
/// namespace file in the one shared mount.
fn prepare_netns_dir() -> Result<()> {
    static PREPARED: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
    PREPARED
        .get_or_init(|| prepare_netns_dir_locked().map_err(|err| format!("{err:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn prepare_netns_dir_locked() -> Result<()> {
    fs::create_dir_all(NETNS_DIR).with_context(|| format!("create {NETNS_DIR}"))?;
    let lock = File::create("/run/keel-testbed-netns.lock").context("create the /run/netns setup lock")?;
    let _guard = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, errno)| errno)
        .context("lock /run/netns setup")?;
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").context("read /proc/self/mountinfo")?;
    let is_mount_point = mountinfo.lines().any(|line| line.split(' ').nth(4) == Some(NETNS_DIR));
    if !is_mount_point {
        nix::mount::mount(
            Some(NETNS_DIR),
            NETNS_DIR,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .with_context(|| format!("bind-mount {NETNS_DIR} onto itself"))?;
    }
    nix::mount::mount(
        None::<&str>,
        NETNS_DIR,
        None::<&str>,
        MsFlags::MS_SHARED | MsFlags::MS_REC,
        None::<&str>,
    )
    .with_context(|| format!("make {NETNS_DIR} a shared mount"))
}

/// Removes the name of a network namespace (unmount, unlink), as `ip netns delete` does. Missing names
/// are not an error; other failures are reported on stderr, never panic (this runs in Drop).
pub fn remove_named(name: &str) {
    let path = Path::new(NETNS_DIR).join(name);
    if let Err(err) = nix::mount::umount2(&path, MntFlags::MNT_DETACH)
        && err != nix::errno::Errno::EINVAL
        && err != nix::errno::Errno::ENOENT
    {
        eprintln!("keel-testbed: unmount {}: {err}", path.display());
    }
    if let Err(err) = fs::remove_file(&path)
        && err.kind() != std::io::ErrorKind::NotFound
    {
        eprintln!("keel-testbed: remove {}: {err}", path.display());
    }
}

/// The names of all named network namespaces.
pub fn list_named() -> Result<Vec<String>> {
    let entries = match fs::read_dir(NETNS_DIR) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err).context(format!("read {NETNS_DIR}")),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.with_context(|| format!("read {NETNS_DIR}"))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        bail!("invalid network namespace name {name:?}");
    }
    Ok(())
}

/// Makes `command` join the namespace `fd` (of type `nstype`) between fork and exec.
pub(crate) fn setns_on_spawn(command: &mut Command, fd: Arc<OwnedFd>, nstype: libc::c_int) {
    // SAFETY: the hook runs in the forked child before exec and only calls setns(2), which is
    // async-signal-safe; the descriptor is owned by the closure, so it is open at spawn time.
    unsafe {
        command.pre_exec(move || {
            if libc::setns(fd.as_raw_fd(), nstype) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_are_not_file_names_are_refused() {
        for name in ["", ".", "..", "a/b", "a\0b"] {
            assert!(check_name(name).is_err(), "{name:?}");
        }
        assert!(check_name("keel-t1-0-a").is_ok());
    }
}
