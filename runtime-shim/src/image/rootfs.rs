//! A container's root filesystem: an overlay of the image's layer snapshots (read-only lower
//! directories, the top layer first as overlayfs wants them) under the container's own upper and work
//! directories.
//!
//! The mount options must fit a page (4096 bytes): with snapshot paths of about 100 bytes, some 35
//! layers. containerd shortens them by mounting from the snapshots directory with relative paths;
//! keel-shim does not yet.

use std::io;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};

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
    nix::mount::mount(Some("overlay"), target, Some("overlay"), MsFlags::empty(), Some(data.as_str()))
        .map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("mounting the overlay at {}: {e}", target.display()),
            )
        })
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
