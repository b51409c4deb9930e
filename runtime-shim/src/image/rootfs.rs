//! A container's root filesystem: an overlay of the image's layer snapshots (read-only lower
//! directories, the top layer first as overlayfs wants them) under the container's own upper and work
//! directories.
//!
//! mount(2)'s options must fit a page (4096 bytes): with snapshot paths of about 100 bytes, some 35
//! layers. Longer ones are given layer by layer through the new mount API (`fsopen`/`fsconfig` with
//! `lowerdir+`, Linux 6.8), where containerd chdirs to use relative paths (not safe in a threaded
//! process).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};

/// The longest option string mount(2) takes (a page, with its NUL).
const MOUNT_DATA_MAX: usize = 4095;

/// The overlay mount options for `layers` (bottom first).
fn options(layers: &[PathBuf], upper: &Path, work: &Path) -> io::Result<String> {
    if layers.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an image with no layers has no root filesystem",
        ));
    }
    for path in layers.iter().map(PathBuf::as_path).chain([upper, work]) {
        let s = path.to_string_lossy();
        if s.contains([',', ':']) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{s}: overlay mount paths cannot hold ',' or ':'"),
            ));
        }
    }
    let lower: Vec<String> = layers.iter().rev().map(|l| l.to_string_lossy().into_owned()).collect();
    Ok(format!("lowerdir={},upperdir={},workdir={}", lower.join(":"), upper.display(), work.display()))
}

/// Mounts at `target` the overlay of `layers` (snapshot directories, bottom first) with `upper` and
/// `work` (created if missing; on the same filesystem).
///
/// # Errors
/// The mount's error; InvalidInput for no layers or paths overlayfs options cannot carry.
pub fn mount(layers: &[PathBuf], upper: &Path, work: &Path, target: &Path) -> io::Result<()> {
    let data = options(layers, upper, work)?;
    std::fs::create_dir_all(upper)?;
    std::fs::create_dir_all(work)?;
    std::fs::create_dir_all(target)?;
    if data.len() > MOUNT_DATA_MAX {
        return mount_layer_by_layer(layers, upper, work, target);
    }
    nix::mount::mount(Some("overlay"), target, Some("overlay"), MsFlags::empty(), Some(data.as_str()))
        .map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("mounting the overlay at {}: {e}", target.display()),
            )
        })
}

const FSOPEN_CLOEXEC: libc::c_uint = 1;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

/// The error of a failed syscall, saying what failed.
fn last_error(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// A syscall's result as an owned file descriptor.
fn owned_fd(rc: libc::c_long, what: &str) -> io::Result<OwnedFd> {
    if rc < 0 {
        return Err(last_error(what));
    }
    let fd = i32::try_from(rc).map_err(|_| io::Error::other(format!("{what}: fd {rc} out of range")))?;
    // SAFETY: the kernel just returned `fd`: open, and owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The overlay mounted through fsopen/fsconfig/fsmount/move_mount, each lower directory given alone
/// (`lowerdir+`, top first), so no option string limits the layer count.
fn mount_layer_by_layer(layers: &[PathBuf], upper: &Path, work: &Path, target: &Path) -> io::Result<()> {
    let fstype = c_string(b"overlay")?;
    // SAFETY: `fstype` is NUL-terminated and outlives the call.
    let rc = unsafe { libc::syscall(libc::SYS_fsopen, fstype.as_ptr(), FSOPEN_CLOEXEC) };
    let fs = owned_fd(rc, "fsopen overlay")?;
    let set = |key: &str, value: &Path| -> io::Result<()> {
        let c_key = c_string(key.as_bytes())?;
        let c_value = c_string(value.as_os_str().as_bytes())?;
        // SAFETY: `c_key` and `c_value` are NUL-terminated and outlive the call; `fs` is an fs context.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                FSCONFIG_SET_STRING,
                c_key.as_ptr(),
                c_value.as_ptr(),
                0,
            )
        };
        if rc < 0 {
            return Err(last_error(&format!("fsconfig {key}={}", value.display())));
        }
        Ok(())
    };
    for layer in layers.iter().rev() {
        set("lowerdir+", layer)?;
    }
    set("upperdir", upper)?;
    set("workdir", work)?;
    // SAFETY: `fs` is an fs context; FSCONFIG_CMD_CREATE takes a null key and value.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    if rc < 0 {
        return Err(last_error(&format!("creating the overlay for {}", target.display())));
    }
    // SAFETY: `fs` is a created fs context.
    let rc = unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), FSMOUNT_CLOEXEC, 0) };
    let mnt = owned_fd(rc, "fsmount")?;
    let empty = c_string(b"")?;
    let to = c_string(target.as_os_str().as_bytes())?;
    // SAFETY: `mnt` is a detached mount; `empty` and `to` are NUL-terminated and outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            mnt.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc < 0 {
        return Err(last_error(&format!("mounting the overlay at {}", target.display())));
    }
    Ok(())
}

/// Unmounts the overlay at `target`; succeeds if nothing is mounted there or `target` does not exist.
///
/// # Errors
/// The unmount's error (EBUSY while a process still uses it).
pub fn unmount(target: &Path) -> io::Result<()> {
    match nix::mount::umount2(target, MntFlags::empty()) {
        Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => Ok(()),
        Err(e) => {
            Err(io::Error::new(io::Error::from(e).kind(), format!("unmounting {}: {e}", target.display())))
        }
    }
}
