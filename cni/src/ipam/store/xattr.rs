//! The `user.keel-cni.address` extended attribute of an address file: the address, so an index link
//! (a hard link, the same inode) names its address without a directory listing.
//!
//! Two calls through libc: nix has no xattr wrappers, and a dependency for two syscalls is not worth
//! it.

use std::ffi::CString;
use std::io;
use std::net::IpAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

const NAME: &[u8] = b"user.keel-cni.address\0";

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// Records `address` on the file at `path`.
pub fn set_address(path: &Path, address: IpAddr) -> io::Result<()> {
    let path = c_path(path)?;
    let value = address.to_string();
    // SAFETY: path and NAME are NUL-terminated; value points at value.len() readable bytes.
    let rc =
        unsafe { libc::setxattr(path.as_ptr(), NAME.as_ptr().cast(), value.as_ptr().cast(), value.len(), 0) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The address recorded on the file at `path`: `Ok(None)` when there is no file; an error when the
/// file carries none (or the filesystem has no user xattrs).
pub fn address(path: &Path) -> io::Result<Option<IpAddr>> {
    let path = c_path(path)?;
    let mut buffer = [0u8; 64];
    // SAFETY: path and NAME are NUL-terminated; buffer has buffer.len() writable bytes.
    let length = unsafe {
        libc::getxattr(path.as_ptr(), NAME.as_ptr().cast(), buffer.as_mut_ptr().cast(), buffer.len())
    };
    if length < 0 {
        let err = io::Error::last_os_error();
        return if err.kind() == io::ErrorKind::NotFound { Ok(None) } else { Err(err) };
    }
    let text =
        std::str::from_utf8(&buffer[..length.unsigned_abs()]).map_err(|_| io::ErrorKind::InvalidData)?;
    text.parse().map(Some).map_err(|_| io::ErrorKind::InvalidData.into())
}
