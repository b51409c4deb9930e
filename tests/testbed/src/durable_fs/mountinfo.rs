//! Reading `/proc/self/mountinfo` (see proc(5)), and unmounting.

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, umount2};

/// One line of `/proc/self/mountinfo`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MountEntry {
    pub(crate) id: u64,
    pub(crate) parent: u64,
    /// `major:minor` of the mounted filesystem.
    pub(crate) dev: String,
    pub(crate) mount_point: PathBuf,
    pub(crate) fstype: String,
    pub(crate) source: String,
}

/// Undoes the octal escapes (`\040` for a space...) of mountinfo fields.
fn unescape(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal.and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    out
}

fn parse_line(line: &str) -> Option<MountEntry> {
    let (left, right) = line.split_once(" - ")?;
    let mut left = left.split(' ');
    let id = left.next()?.parse().ok()?;
    let parent = left.next()?.parse().ok()?;
    let dev = left.next()?.to_owned();
    let _root = left.next()?;
    let mount_point = PathBuf::from(OsString::from_vec(unescape(left.next()?)));
    let mut right = right.split(' ');
    let fstype = String::from_utf8_lossy(&unescape(right.next()?)).into_owned();
    let source = String::from_utf8_lossy(&unescape(right.next()?)).into_owned();
    Some(MountEntry { id, parent, dev, mount_point, fstype, source })
}

/// Parses mountinfo text; malformed lines are skipped.
pub(crate) fn parse(text: &str) -> Vec<MountEntry> {
    text.lines().filter_map(parse_line).collect()
}

/// The mounts of this process's mount namespace.
pub(crate) fn read() -> io::Result<Vec<MountEntry>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/mountinfo")?))
}

/// The mount that a path lookup of `path` reaches: the one at `path` that nothing covers.
pub(crate) fn topmost_at<'a>(entries: &'a [MountEntry], path: &Path) -> Option<&'a MountEntry> {
    let at_path = || entries.iter().filter(|e| e.mount_point == path);
    at_path().rfind(|e| !at_path().any(|o| o.parent == e.id && o.id != e.id))
}

/// Aborts the FUSE connection (`MNT_FORCE` runs `fuse_umount_begin`, which aborts it even while
/// the mount is busy) and detaches the mount at `path` (`MNT_DETACH`): open files then fail with
/// `ENOTCONN` instead of waiting for a daemon.
pub(crate) fn abort_and_detach(path: &Path) -> io::Result<()> {
    umount2(path, MntFlags::MNT_FORCE | MntFlags::MNT_DETACH).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
60 27 0:53 / /tmp/a\\040b rw,nosuid,nodev,relatime shared:5 - fuse.keel-durable keel-durable-42 rw,user_id=0
61 60 0:54 / /tmp/a\\040b rw,nosuid,nodev,relatime - fuse.keel-durable keel-durable-43 rw,user_id=0
garbage line
";

    #[test]
    fn parses_and_finds_topmost() {
        let entries = parse(SAMPLE);
        assert_eq!(entries.len(), 3);
        let e = &entries[1];
        assert_eq!((e.id, e.parent, e.dev.as_str()), (60, 27, "0:53"));
        assert_eq!(e.mount_point, Path::new("/tmp/a b"));
        assert_eq!((e.fstype.as_str(), e.source.as_str()), ("fuse.keel-durable", "keel-durable-42"));
        assert_eq!(topmost_at(&entries, Path::new("/tmp/a b")).map(|e| e.id), Some(61));
        assert_eq!(topmost_at(&entries, Path::new("/")).map(|e| e.id), Some(27));
        assert_eq!(topmost_at(&entries, Path::new("/nope")), None);
    }

    #[test]
    fn unescape_handles_edges() {
        assert_eq!(unescape("a\\134b\\0"), b"a\\b\\0");
        assert_eq!(unescape("\\011x\\"), b"\tx\\");
        assert_eq!(unescape("\\999"), b"\\999");
    }
}
