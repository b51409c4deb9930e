//! Layers unpacked into snapshots, and an image assembled from the blobs of its manifest.
//!
//! Each layer is unpacked once, into `DIR/snapshots/<chain id hex>/fs`: into a temporary directory
//! first, renamed into place once the whole layer is written and its uncompressed digest matches the
//! config's diff id. Layers are gzip-compressed or plain tars (told by their first bytes, whatever
//! the media type says); zstd is refused.
//!
//! OCI whiteouts become overlayfs ones, as containerd's overlay snapshotter makes them: `.wh.NAME`
//! becomes a 0/0 character device `NAME`, `.wh..wh..opq` the `trusted.overlay.opaque=y` xattr of its
//! directory. Ownership, modes, mtimes, symlinks, hard links, device nodes, fifos and xattrs are kept.
//! An entry with a `..` component, or one written through a symlink that leads out of the layer's
//! directory, fails the layer.

use std::ffi::CString;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Component, Path, PathBuf};

use oci_spec::image::{ImageConfiguration, ImageManifest};
use sha2::Digest as _;

use super::store::{ImageStore, Record, temp_name};
use super::{Image, ImageError, hex, sha256_digest};

/// The overlayfs xattr that makes a directory opaque.
pub const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

/// Parses an image manifest (OCI, or Docker schema 2: the same shape).
pub(crate) fn parse_manifest(bytes: &[u8], digest: &str) -> Result<ImageManifest, ImageError> {
    serde_json::from_slice(bytes).map_err(|e| ImageError::Invalid(format!("manifest {digest}: {e}")))
}

/// The chain ids of `diff_ids`: the first is its diff id, each next one
/// `sha256(<previous chain id> + " " + <diff id>)`.
#[must_use]
pub fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    let mut chain: Vec<String> = Vec::with_capacity(diff_ids.len());
    for diff in diff_ids {
        let next = match chain.last() {
            None => diff.clone(),
            Some(previous) => sha256_digest(format!("{previous} {diff}").as_bytes()),
        };
        chain.push(next);
    }
    chain
}

/// Assembles the image whose manifest `manifest_digest` (and whose config and layers) are in the store:
/// unpacks the layers that have no snapshot yet and records the image under `names`. Blocking.
pub(crate) fn build_image(
    store: &ImageStore,
    index_digest: Option<String>,
    manifest_digest: &str,
    names: &[String],
) -> Result<Image, ImageError> {
    let manifest_bytes = store.read_blob(manifest_digest)?;
    let manifest = parse_manifest(&manifest_bytes, manifest_digest)?;
    let config_digest = manifest.config().digest().to_string();
    let config_bytes = store.read_blob(&config_digest)?;
    let config: ImageConfiguration = serde_json::from_slice(&config_bytes)
        .map_err(|e| ImageError::Invalid(format!("image config {config_digest}: {e}")))?;
    let diff_ids = config.rootfs().diff_ids().clone();
    if diff_ids.len() != manifest.layers().len() {
        return Err(ImageError::Invalid(format!(
            "manifest {manifest_digest} has {} layers but its config {} diff ids",
            manifest.layers().len(),
            diff_ids.len()
        )));
    }
    let chains = chain_ids(&diff_ids);
    let mut layer_digests = Vec::new();
    let mut size = manifest_bytes.len() as u64 + config_bytes.len() as u64;
    for ((layer, diff_id), chain) in manifest.layers().iter().zip(&diff_ids).zip(&chains) {
        let digest = layer.digest().to_string();
        let media_type = layer.media_type().to_string();
        if media_type.contains("zstd") {
            return Err(ImageError::Invalid(format!("layer {digest}: unsupported media type {media_type}")));
        }
        let blob = store.blob_path(&digest)?;
        size += std::fs::metadata(&blob).map(|m| m.len()).unwrap_or_else(|_| layer.size());
        let snapshot = store.snapshot_dir(chain)?;
        if !snapshot.join("fs").is_dir() {
            unpack_snapshot(&blob, &store.snapshots_dir(), &snapshot, diff_id).map_err(|e| match e {
                ImageError::Io(m) => ImageError::Io(format!("unpacking layer {digest}: {m}")),
                ImageError::Invalid(m) => ImageError::Invalid(format!("unpacking layer {digest}: {m}")),
                other => other,
            })?;
        }
        layer_digests.push(digest);
    }
    let record = Record {
        id: config_digest.clone(),
        repo_tags: Vec::new(),
        repo_digests: Vec::new(),
        manifest_digest: manifest_digest.to_owned(),
        index_digest,
        config_digest,
        layer_digests,
        diff_ids,
        chain_ids: chains,
        size,
    };
    store.commit(record, names)
}

/// Unpacks the layer blob `blob` into `snapshot/fs` through a temporary directory in `snapshots`,
/// checking that its uncompressed digest is `diff_id`.
fn unpack_snapshot(blob: &Path, snapshots: &Path, snapshot: &Path, diff_id: &str) -> Result<(), ImageError> {
    let temp = snapshots.join(temp_name());
    let fs = temp.join("fs");
    let result = (|| {
        std::fs::create_dir_all(&fs).map_err(|e| ImageError::io(format!("creating {}", fs.display()), e))?;
        let file = std::fs::File::open(blob)
            .map_err(|e| ImageError::io(format!("opening {}", blob.display()), e))?;
        unpack_layer(file, &fs, Some(diff_id))?;
        match std::fs::rename(&temp, snapshot) {
            Ok(()) => Ok(()),
            // Unpacked meanwhile by another pull of an image sharing the layer.
            Err(_) if snapshot.join("fs").is_dir() => {
                let _ = std::fs::remove_dir_all(&temp);
                Ok(())
            }
            Err(e) => Err(ImageError::io(format!("renaming into {}", snapshot.display()), e)),
        }
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&temp);
    }
    result
}

/// A reader that hashes what passes through it.
struct Hashing<R> {
    inner: R,
    hasher: sha2::Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// Unpacks the layer `layer` (a gzip-compressed or plain tar) into the directory `dest`, turning
/// whiteouts into overlayfs ones. With `diff_id`, fails unless the uncompressed tar has that digest.
///
/// # Errors
/// [`ImageError::Invalid`] for a malformed layer, a path escaping `dest`, or a digest mismatch
/// ([`ImageError::Digest`]); [`ImageError::Io`] when writing fails.
pub fn unpack_layer(mut layer: impl Read, dest: &Path, diff_id: Option<&str>) -> Result<(), ImageError> {
    let mut magic = [0u8; 4];
    let mut got = 0;
    while got < magic.len() {
        match layer.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ImageError::io("reading the layer", e)),
        }
    }
    let head = io::Cursor::new(magic[..got].to_vec()).chain(layer);
    let decompressed: Box<dyn Read> = match magic[..got] {
        [0x1f, 0x8b, ..] => Box::new(flate2::read::MultiGzDecoder::new(head)),
        [0x28, 0xb5, 0x2f, 0xfd] => {
            return Err(ImageError::Invalid("zstd-compressed layers are not supported".to_owned()));
        }
        _ => Box::new(head),
    };
    let mut archive = tar::Archive::new(Hashing { inner: decompressed, hasher: sha2::Sha256::new() });
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(true);
    archive.set_preserve_mtime(true);
    archive.set_unpack_xattrs(true);
    archive.set_overwrite(true);
    let bad = |e: io::Error| ImageError::Invalid(format!("reading the layer's tar: {e}"));
    for entry in archive.entries().map_err(bad)? {
        let mut entry = entry.map_err(bad)?;
        let path = entry.path().map_err(bad)?.into_owned();
        let relative = relative(&path)?;
        let Some(name) = relative.file_name().map(|n| n.to_string_lossy().into_owned()) else { continue };
        let parent = relative.parent().unwrap_or(Path::new(""));
        if name == ".wh..wh..opq" {
            let dir = ensure_dir(dest, parent)?;
            set_xattr(&dir, OPAQUE_XATTR, b"y")?;
            continue;
        }
        if let Some(hidden) = name.strip_prefix(".wh.") {
            let dir = ensure_dir(dest, parent)?;
            let target = dir.join(hidden);
            remove_existing(&target)?;
            mknod(&target, libc::S_IFCHR, 0, 0)?;
            continue;
        }
        let kind = entry.header().entry_type();
        if kind.is_character_special() || kind.is_block_special() || kind.is_fifo() {
            let dir = ensure_dir(dest, parent)?;
            let target = dir.join(&name);
            remove_existing(&target)?;
            let header = entry.header();
            let file_type = if kind.is_character_special() {
                libc::S_IFCHR
            } else if kind.is_block_special() {
                libc::S_IFBLK
            } else {
                libc::S_IFIFO
            };
            let major = header.device_major().map_err(bad)?.unwrap_or(0);
            let minor = header.device_minor().map_err(bad)?.unwrap_or(0);
            let mode = header.mode().map_err(bad)? & 0o7777;
            mknod(&target, file_type, major, minor)?;
            let (uid, gid) = (header.uid().map_err(bad)?, header.gid().map_err(bad)?);
            std::os::unix::fs::lchown(&target, u32::try_from(uid).ok(), u32::try_from(gid).ok())
                .map_err(|e| ImageError::io(format!("chown {}", target.display()), e))?;
            std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .map_err(|e| ImageError::io(format!("chmod {}", target.display()), e))?;
            continue;
        }
        let unpacked = entry
            .unpack_in(dest)
            .map_err(|e| ImageError::Invalid(format!("unpacking {}: {e}", path.display())))?;
        if !unpacked {
            return Err(ImageError::Invalid(format!("entry {} is outside the layer", path.display())));
        }
    }
    let mut hashing = archive.into_inner();
    io::copy(&mut hashing, &mut io::sink()).map_err(|e| ImageError::io("reading the layer", e))?;
    if let Some(expected) = diff_id {
        let actual = format!("sha256:{}", hex(&hashing.hasher.finalize()));
        if actual != expected {
            return Err(ImageError::Digest {
                what: "the layer's uncompressed content".to_owned(),
                expected: expected.to_owned(),
                actual,
            });
        }
    }
    Ok(())
}

/// `path` without its root and `.` components; refused if it has a `..` component.
fn relative(path: &Path) -> Result<PathBuf, ImageError> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::ParentDir => {
                return Err(ImageError::Invalid(format!("entry {} has a '..' component", path.display())));
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(out)
}

/// `dest/relative`, its missing directories created (0755); refused if a component is not a
/// directory (a symlink is refused: it could lead out of `dest`).
fn ensure_dir(dest: &Path, relative: &Path) -> Result<PathBuf, ImageError> {
    let mut dir = dest.to_path_buf();
    for component in relative.components() {
        dir.push(component);
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(ImageError::Invalid(format!(
                    "{} is not a directory (a whiteout or device below it)",
                    dir.display()
                )));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::create_dir(&dir)
                .map_err(|e| ImageError::io(format!("creating {}", dir.display()), e))?,
            Err(e) => return Err(ImageError::io(format!("stat {}", dir.display()), e)),
        }
    }
    Ok(dir)
}

/// Removes whatever is at `path` (not following a symlink).
fn remove_existing(path: &Path) -> Result<(), ImageError> {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(_) => Ok(()),
    };
    removed.map_err(|e| ImageError::io(format!("replacing {}", path.display()), e))
}

fn c_path(path: &Path) -> Result<CString, ImageError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| ImageError::Invalid(format!("{} has a NUL byte", path.display())))
}

fn mknod(path: &Path, file_type: libc::mode_t, major: u32, minor: u32) -> Result<(), ImageError> {
    let c = c_path(path)?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    let rc = unsafe { libc::mknod(c.as_ptr(), file_type | 0o600, libc::makedev(major, minor)) };
    if rc != 0 {
        return Err(ImageError::io(format!("mknod {}", path.display()), io::Error::last_os_error()));
    }
    Ok(())
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) -> Result<(), ImageError> {
    let c = c_path(path)?;
    let n = CString::new(name).map_err(|_| ImageError::Invalid(format!("xattr name {name:?}")))?;
    // SAFETY: `c` and `n` are NUL-terminated and `value` is valid for `value.len()` bytes.
    let rc = unsafe { libc::lsetxattr(c.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if rc != 0 {
        return Err(ImageError::io(
            format!("setting {name} on {}", path.display()),
            io::Error::last_os_error(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_ids_chain_diff_ids() {
        let a = format!("sha256:{}", "a".repeat(64));
        let b = format!("sha256:{}", "b".repeat(64));
        let chain = chain_ids(&[a.clone(), b.clone()]);
        assert_eq!(chain[0], a);
        assert_eq!(chain[1], sha256_digest(format!("{a} {b}").as_bytes()));
        assert!(chain_ids(&[]).is_empty());
    }
}
