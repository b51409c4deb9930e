//! A power-loss filesystem for storage tests.
//!
//! [`DurableFs::mount`] mounts a FUSE filesystem held entirely in memory. It keeps two views of
//! its content: the *live* view, which processes see, and the *durable* view, what would survive
//! a power cut. [`DurableFs::power_loss`] throws the live view away and mounts the durable one
//! at the same place, so a test can check that what a storage engine acknowledged was durable.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::io::Write;
//! # use keel_testbed::durable_fs::DurableFs;
//! let dir = tempfile::tempdir()?;
//! let mut fs = DurableFs::mount(dir.path())?;
//! let mut f = std::fs::File::create(fs.mountpoint().join("wal"))?;
//! f.write_all(b"acknowledged")?;
//! f.sync_data()?; // durable from here on
//! f.write_all(b" lost")?;
//! fs.power_loss()?; // `f` now fails with ENOTCONN
//! assert_eq!(std::fs::read(fs.mountpoint().join("wal"))?, b"acknowledged");
//! # Ok(())
//! # }
//! ```
//!
//! # Durability semantics
//!
//! - File data (write, truncate/setattr size, fallocate) is durable only after fsync/fdatasync of
//!   that inode (`FUSE_FSYNC`). Data not synced is lost on power loss; the file reverts to its
//!   content at its last fsync (empty if never synced).
//! - Namespace changes (create, mkdir, unlink, rmdir, rename, link, symlink) and attribute
//!   changes (mode, uid/gid, times) become durable at the next "journal commit", which happens at
//!   any fsync of any file or any fsyncdir (like ext4's journal, where an fsync commits all
//!   earlier metadata). A file created and written but never synced, with no commit after it,
//!   does not exist after power loss.
//! - An inode that exists in the durable namespace keeps its durable content; one that was
//!   unlinked in live but not committed comes back.
//!
//! Details of the model:
//!
//! - `fsync` and `fdatasync` behave the same: both make the inode's data durable and commit.
//!   `mknod` (FIFOs, sockets, device nodes) is a namespace change like `create`.
//! - A commit never makes other files' data durable: after an fsync of another file, a
//!   created-but-unsynced file exists and is empty. Files unlinked while open vanish at power
//!   loss even if they were synced.
//! - `sync(2)`/`syncfs(2)` return success but make nothing durable (fuser 0.18 cannot receive
//!   `FUSE_SYNCFS`); tests can call [`DurableFs::sync_all`] instead.
//! - Writes through a shared mapping reach the filesystem only when the kernel writes the pages
//!   back (`msync`, `fsync`, `munmap`, or background writeback); as elsewhere, only an fsync makes
//!   them durable.
//! - With `synchronous=FULL` in rollback-journal mode, SQLite does not sync the directory after
//!   deleting its journal (its commit point), so the last transaction before a power loss rolls
//!   back here, as SQLite documents; `synchronous=EXTRA`, or WAL mode with `FULL`, keep it.
//!
//! # Mount details
//!
//! The filesystem is mounted with mount(2) directly (root is required; no libfuse, no
//! fusermount3) as type `fuse.keel-durable` with source (fsname) `keel-durable-<pid>`, options
//! `allow_other,default_permissions` (the kernel checks permissions from the inode modes) and
//! `nosuid,nodev`, and without writeback cache: every write(2) reaches the in-memory tree before
//! it returns. One thread serves the requests. File locks (`flock`, `fcntl`) are kept by the
//! kernel, locally. The root directory is owned by the mounting user, mode 0755.
//!
//! On Linux 6.6 and later (`FUSE_DIRECT_IO_ALLOW_MMAP`) files are opened in direct-I/O mode:
//! read(2) and write(2) bypass the page cache while shared mappings still work, coherently.
//!
//! A power loss (and [`Drop`]) aborts the FUSE connection and detaches the mount
//! (`umount2(MNT_FORCE | MNT_DETACH)`): processes still holding files or directories of the old
//! mount get `ENOTCONN` from read, write and fsync, never a hang, and kernel page and dentry
//! caches die with the old superblock. Pages already mapped into a process stay readable (stale).
//! On kernels without direct-I/O mmap, the cached pages of the old files are invalidated instead,
//! so held-open reads fail too, but touching a shared mapping of them raises `SIGBUS`.
//! Mounts left behind by crashed test processes are removed by [`sweep_stale_mounts`].

mod content;
mod mountinfo;
mod ops;
mod tree;

use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use fuser::{BackgroundSession, Config, INodeNo, SessionACL};
use nix::mount::MsFlags;
use nix::unistd::{getegid, geteuid};

use self::ops::{Ops, Shared, lock};
use self::tree::Tree;

/// Filesystem type (`fuse.<subtype>`) of our mounts.
const FSTYPE: &str = "fuse.keel-durable";
/// Prefix of our mounts' source (fsname), followed by the mounting process's pid.
const FSNAME_PREFIX: &str = "keel-durable-";
/// How long to wait for a session thread to end after its connection was aborted.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors of [`DurableFs`].
#[derive(Debug, thiserror::Error)]
pub enum DurableFsError {
    /// The mountpoint could not be inspected.
    #[error("cannot inspect mountpoint {path}")]
    InspectMountpoint {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The mountpoint is not an empty directory.
    #[error("mountpoint {path} is not an empty directory")]
    MountpointNotEmptyDir { path: PathBuf },
    /// `/dev/fuse` could not be opened.
    #[error("cannot open /dev/fuse to mount {path}")]
    OpenFuseDevice {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// mount(2) failed.
    #[error("mounting a FUSE filesystem at {path} failed")]
    Mount {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The FUSE session (handshake or its thread) could not start.
    #[error("starting the FUSE session at {path} failed")]
    StartSession {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Aborting or detaching the mount failed.
    #[error("unmounting {path} failed")]
    Unmount {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The old session's thread did not end after its connection was aborted.
    #[error("the FUSE session at {path} did not stop within {timeout:?}")]
    SessionStuck { path: PathBuf, timeout: Duration },
    /// No session is mounted (an earlier power loss failed half-way).
    #[error("no DurableFs session is mounted at {path}")]
    NotMounted { path: PathBuf },
}

/// One mount of the filesystem, served by a background thread.
struct MountSession {
    bg: BackgroundSession,
    fsname: String,
    /// `major:minor` of the mount, to recognise it in mountinfo.
    dev: String,
}

/// A mounted power-loss filesystem. See the module docs.
pub struct DurableFs {
    mountpoint: PathBuf,
    shared: Arc<Mutex<Shared>>,
    session: Option<MountSession>,
}

impl fmt::Debug for DurableFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (epoch, direct_io) = {
            let shared = lock(&self.shared);
            (shared.epoch, shared.direct_io)
        };
        f.debug_struct("DurableFs")
            .field("mountpoint", &self.mountpoint)
            .field("dev", &self.session.as_ref().map(|s| &s.dev))
            .field("epoch", &epoch)
            .field("direct_io", &direct_io)
            .finish_non_exhaustive()
    }
}

impl DurableFs {
    /// Mounts an empty filesystem at `mountpoint`, which must be an existing empty directory.
    pub fn mount(mountpoint: &Path) -> Result<DurableFs, DurableFsError> {
        let inspect = |source| DurableFsError::InspectMountpoint { path: mountpoint.to_owned(), source };
        let is_dir = std::fs::metadata(mountpoint).map_err(inspect)?.is_dir();
        if !is_dir || std::fs::read_dir(mountpoint).map_err(inspect)?.next().is_some() {
            return Err(DurableFsError::MountpointNotEmptyDir { path: mountpoint.to_owned() });
        }
        let mountpoint = mountpoint.canonicalize().map_err(inspect)?;
        let tree = Tree::new(geteuid().as_raw(), getegid().as_raw());
        let shared = Arc::new(Mutex::new(Shared { tree, epoch: 0, direct_io: false }));
        let session = start_session(&mountpoint, &shared, 0)?;
        Ok(DurableFs { mountpoint, shared, session: Some(session) })
    }

    /// Where the filesystem is mounted (canonicalized).
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Simulates a power cut: aborts and lazily detaches the mount (processes holding its files
    /// get errors), replaces the live view by the durable one and mounts it in a fresh session at
    /// the same mountpoint.
    pub fn power_loss(&mut self) -> Result<(), DurableFsError> {
        let session = self
            .session
            .take()
            .ok_or_else(|| DurableFsError::NotMounted { path: self.mountpoint.clone() })?;
        let (referenced, epoch) = {
            let mut shared = lock(&self.shared);
            let referenced = if shared.direct_io { Vec::new() } else { shared.tree.referenced() };
            shared.epoch += 1;
            shared.tree.power_loss();
            (referenced, shared.epoch)
        };
        stop_session(&self.mountpoint, session, &referenced)?;
        self.session = Some(start_session(&self.mountpoint, &self.shared, epoch)?);
        Ok(())
    }

    /// Makes everything written so far durable, like `sync(1)` (for test setup). Dirty pages of
    /// shared mappings that the kernel has not written back yet are not included.
    pub fn sync_all(&self) {
        lock(&self.shared).tree.sync_all();
    }
}

impl Drop for DurableFs {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            let referenced = {
                let mut shared = lock(&self.shared);
                shared.epoch += 1;
                if shared.direct_io { Vec::new() } else { shared.tree.referenced() }
            };
            let _best_effort = stop_session(&self.mountpoint, session, &referenced);
        }
    }
}

/// Mounts a new session serving `shared` at `path`.
fn start_session(
    path: &Path,
    shared: &Arc<Mutex<Shared>>,
    epoch: u64,
) -> Result<MountSession, DurableFsError> {
    let fsname = format!("{FSNAME_PREFIX}{}", std::process::id());
    let device = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .map_err(|source| DurableFsError::OpenFuseDevice { path: path.to_owned(), source })?;
    let options = format!(
        "fd={},rootmode=40755,user_id={},group_id={},allow_other,default_permissions",
        device.as_raw_fd(),
        geteuid(),
        getegid()
    );
    nix::mount::mount(
        Some(fsname.as_str()),
        path,
        Some(FSTYPE),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(options.as_str()),
    )
    .map_err(|e| DurableFsError::Mount { path: path.to_owned(), source: e.into() })?;

    let started = (|| {
        let entries = mountinfo::read()?;
        let ours = mountinfo::topmost_at(&entries, path).filter(|e| e.source == fsname && e.fstype == FSTYPE);
        let dev =
            ours.ok_or_else(|| io::Error::other("the new mount is missing from mountinfo"))?.dev.clone();
        let ops = Ops::new(Arc::clone(shared), epoch);
        let session =
            fuser::Session::from_fd(ops, OwnedFd::from(device), SessionACL::All, Config::default())?;
        Ok(MountSession { bg: session.spawn()?, fsname: fsname.clone(), dev })
    })();
    started.map_err(|source: io::Error| {
        // The connection is aborted once the device fd is closed (dropped above); detach the mount.
        let _best_effort = mountinfo::abort_and_detach(path);
        DurableFsError::StartSession { path: path.to_owned(), source }
    })
}

/// Aborts and detaches `session`'s mount at `path`, then waits for its thread to end.
fn stop_session(path: &Path, session: MountSession, referenced: &[u64]) -> Result<(), DurableFsError> {
    let unmount_err = |source| DurableFsError::Unmount { path: path.to_owned(), source };
    let entries = mountinfo::read().map_err(unmount_err)?;
    let on_top = mountinfo::topmost_at(&entries, path)
        .is_some_and(|e| e.dev == session.dev && e.source == session.fsname);
    if on_top {
        mountinfo::abort_and_detach(path).map_err(unmount_err)?;
    } else if let Some(minor) = session.dev.strip_prefix("0:") {
        // Covered or already detached by someone else: abort through fusectl if it is mounted.
        let _best_effort = std::fs::write(format!("/sys/fs/fuse/connections/{minor}/abort"), "1");
    }
    // Without direct I/O, cached pages would still serve reads of files held open across the
    // abort: drop them so those reads fail too (shared mappings of them then fault with SIGBUS).
    let notifier = session.bg.notifier();
    for &ino in referenced {
        let _best_effort = notifier.inval_inode(INodeNo(ino), 0, 0);
    }
    let deadline = Instant::now() + STOP_TIMEOUT;
    while !session.bg.guard.is_finished() {
        if Instant::now() >= deadline {
            return Err(DurableFsError::SessionStuck { path: path.to_owned(), timeout: STOP_TIMEOUT });
        }
        thread::sleep(Duration::from_millis(2));
    }
    // The session loop ends with ENODEV (or an error) once the connection is aborted.
    let _session_result = session.bg.join();
    Ok(())
}

/// Unmounts (`MNT_FORCE | MNT_DETACH`) the leftovers of crashed test processes: mounts whose
/// fsname is `keel-durable-<pid>` where `<pid>` is no longer alive. Mounts of live pids, and
/// mounts covered by another mount, are left alone; mounts that fail to unmount are skipped.
/// Returns how many were unmounted.
pub fn sweep_stale_mounts() -> io::Result<usize> {
    let mut swept = 0;
    // Stale mounts may be stacked: each round removes the uncovered ones.
    for _round in 0..16 {
        let entries = mountinfo::read()?;
        let mut progressed = false;
        for e in &entries {
            let pid = e.source.strip_prefix(FSNAME_PREFIX).and_then(|p| p.parse::<u32>().ok());
            let Some(pid) = pid.filter(|&p| p > 0) else { continue };
            if !e.fstype.starts_with("fuse") || crate::pid_alive(pid) {
                continue;
            }
            if mountinfo::topmost_at(&entries, &e.mount_point).is_some_and(|top| top.id == e.id)
                && mountinfo::abort_and_detach(&e.mount_point).is_ok()
            {
                swept += 1;
                progressed = true;
            }
        }
        if !progressed {
            break;
        }
    }
    Ok(swept)
}
