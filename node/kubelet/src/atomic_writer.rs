//! upstream's AtomicWriter (pkg/volume/util/atomic_writer.go): a volume's files written so that a
//! container never sees half an update. The files live in a timestamped directory
//! (`..2026_12_03_12_00_00.<n>`); `..data` is a symlink to it, swapped by a rename; each top-level
//! name the user sees is a symlink through `..data`. A payload equal to what is there writes
//! nothing. The IO edge of [`crate::volumes`].

use std::collections::BTreeSet;
use std::io;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path};

use k8s_openapi::jiff::Timestamp;

use crate::volumes::Payload;

const DATA_DIR: &str = "..data";
const NEW_DATA_DIR: &str = "..data_tmp";

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

/// A payload path must stay inside the volume and not start with `..` (upstream's validatePath).
fn check_path(path: &str) -> io::Result<()> {
    let relative = Path::new(path);
    if path.is_empty() || relative.is_absolute() || path.starts_with("..") {
        return Err(invalid(format!("invalid path {path:?}: must be relative and may not start with '..'")));
    }
    if relative.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err(invalid(format!("invalid path {path:?}: must not contain '..'")));
    }
    Ok(())
}

/// Whether the files under `dir` are the payload's, byte for byte and mode for mode.
fn same(dir: &Path, payload: &Payload) -> bool {
    let mut seen = 0;
    for (path, file) in payload {
        let full = dir.join(path);
        let Ok(metadata) = std::fs::metadata(&full) else { return false };
        if metadata.permissions().mode() & 0o777 != file.mode {
            return false;
        }
        match std::fs::read(&full) {
            Ok(data) if data == file.data => seen += 1,
            _ => return false,
        }
    }
    // No file more than the payload's.
    fn count(dir: &Path) -> usize {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| if entry.path().is_dir() { count(&entry.path()) } else { 1 })
            .sum()
    }
    seen == count(dir)
}

fn top_level(path: &str) -> &str {
    path.split('/').next().unwrap_or(path)
}

/// Writes `payload` into `target` (which exists); returns whether anything changed.
pub fn write(target: &Path, payload: &Payload) -> io::Result<bool> {
    for path in payload.keys() {
        check_path(path)?;
    }
    let data_link = target.join(DATA_DIR);
    let old = std::fs::read_link(&data_link).ok();
    let names: BTreeSet<&str> = payload.keys().map(|p| top_level(p)).collect();
    if let Some(old) = &old
        && same(&target.join(old), payload)
        && names.iter().all(|name| std::fs::symlink_metadata(target.join(name)).is_ok())
    {
        return Ok(false);
    }
    let now = Timestamp::now();
    let stamp = format!("..{}.{}", now.strftime("%Y_%m_%d_%H_%M_%S"), now.subsec_nanosecond());
    let fresh = target.join(&stamp);
    std::fs::create_dir(&fresh)?;
    std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o755))?;
    for (path, file) in payload {
        let full = fresh.join(path);
        if let Some(parent) = full.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&full, &file.data)?;
        std::fs::set_permissions(&full, std::fs::Permissions::from_mode(file.mode))?;
    }
    let new_link = target.join(NEW_DATA_DIR);
    let _ = std::fs::remove_file(&new_link);
    symlink(&stamp, &new_link)?;
    std::fs::rename(&new_link, &data_link)?;
    for name in &names {
        let link = target.join(name);
        if std::fs::symlink_metadata(&link).is_err() {
            symlink(Path::new(DATA_DIR).join(name), &link)?;
        }
    }
    // What the old payload showed and the new one does not, and the old files.
    for entry in std::fs::read_dir(target)?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !names.contains(name.as_str()) && entry.file_type()?.is_symlink() {
            std::fs::remove_file(entry.path())?;
        }
    }
    if let Some(old) = old {
        std::fs::remove_dir_all(target.join(old))?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volumes::File;

    fn payload(entries: &[(&str, &str, u32)]) -> Payload {
        entries
            .iter()
            .map(|(path, data, mode)| {
                ((*path).to_owned(), File { data: data.as_bytes().to_vec(), mode: *mode })
            })
            .collect()
    }

    #[test]
    fn updates_swap_the_data_link() {
        let dir = tempfile::tempdir().unwrap();
        let first = payload(&[("a", "1", 0o644), ("conf/b", "2", 0o600)]);
        assert!(write(dir.path(), &first).unwrap());
        assert_eq!(std::fs::read_to_string(dir.path().join("a")).unwrap(), "1");
        assert_eq!(std::fs::read_to_string(dir.path().join("conf/b")).unwrap(), "2");
        assert_eq!(std::fs::read_link(dir.path().join("a")).unwrap(), Path::new("..data/a"));
        let mode = std::fs::metadata(dir.path().join("conf/b")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(!write(dir.path(), &first).unwrap(), "the same payload writes nothing");
        let old = std::fs::read_link(dir.path().join(DATA_DIR)).unwrap();
        let second = payload(&[("a", "3", 0o644)]);
        assert!(write(dir.path(), &second).unwrap());
        assert_eq!(std::fs::read_to_string(dir.path().join("a")).unwrap(), "3");
        assert!(std::fs::symlink_metadata(dir.path().join("conf")).is_err(), "a name no longer there goes");
        assert!(!dir.path().join(old).exists(), "the old files go");
        assert!(write(dir.path(), &payload(&[("../escape", "x", 0o644)])).is_err());
    }
}
