//! The audit log file with kube-apiserver's rotation (its lumberjack logger): a line that would
//! take the file past `--audit-log-maxsize` megabytes (100 when 0) first moves the file aside as
//! `<name>-<UTC 2006-01-02T15-04-05.000><.ext>` and starts a new one; then backups beyond
//! `--audit-log-maxbackup` (newest kept) and older than `--audit-log-maxage` days are removed, and
//! with `--audit-log-compress` the rest gzipped (`<backup>.gz`). Which backups go is computed apart
//! ([`plan`]) from the file system work.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// lumberjack's size when none is given, in megabytes.
const DEFAULT_MAX_SIZE_MB: u64 = 100;
const MEGABYTE: u64 = 1024 * 1024;
/// The backup's timestamp: Go's `2006-01-02T15-04-05.000`.
const BACKUP_TIME: &str = "%Y-%m-%dT%H-%M-%S%.3f";
/// Lines are gathered this far before a write(2).
const BUFFER: usize = 64 * 1024;

/// The rotation flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rotation {
    /// `--audit-log-maxsize`: megabytes; 0 is lumberjack's 100.
    pub max_size_mb: u64,
    /// `--audit-log-maxbackup`: 0 keeps all.
    pub max_backups: usize,
    /// `--audit-log-maxage`: days; 0 keeps all.
    pub max_age_days: u64,
    /// `--audit-log-compress`.
    pub compress: bool,
}

impl Rotation {
    fn max_bytes(&self) -> u64 {
        if self.max_size_mb == 0 {
            DEFAULT_MAX_SIZE_MB * MEGABYTE
        } else {
            self.max_size_mb.saturating_mul(MEGABYTE)
        }
    }
}

/// A backup file found beside the log, with the time its name carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    pub name: String,
    pub time: jiff::Timestamp,
}

/// What to do with the backups.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub remove: Vec<String>,
    pub compress: Vec<String>,
}

/// `audit.log` → (`audit-`, `.log`), as lumberjack splits a name.
fn prefix_and_ext(file_name: &str) -> (String, String) {
    match file_name.rfind('.') {
        Some(dot) => (format!("{}-", &file_name[..dot]), file_name[dot..].to_owned()),
        None => (format!("{file_name}-"), String::new()),
    }
}

/// The name a log moved aside at `now` gets.
pub fn backup_name(file_name: &str, now: jiff::Timestamp) -> String {
    let (prefix, ext) = prefix_and_ext(file_name);
    format!("{prefix}{}{ext}", now.strftime(BACKUP_TIME))
}

/// The backups among a directory's file names, newest first.
pub fn backups<'a>(file_name: &str, names: impl IntoIterator<Item = &'a str>) -> Vec<Backup> {
    let (prefix, ext) = prefix_and_ext(file_name);
    let compressed = format!("{ext}.gz");
    let mut found: Vec<Backup> = names
        .into_iter()
        .filter_map(|name| {
            let rest = name.strip_prefix(&prefix)?;
            let stamp = rest.strip_suffix(compressed.as_str()).or_else(|| rest.strip_suffix(ext.as_str()))?;
            let time = jiff::civil::DateTime::strptime(BACKUP_TIME, stamp)
                .ok()?
                .to_zoned(jiff::tz::TimeZone::UTC)
                .ok()?;
            Some(Backup { name: name.to_owned(), time: time.timestamp() })
        })
        .collect();
    found.sort_by(|a, b| b.time.cmp(&a.time).then_with(|| b.name.cmp(&a.name)));
    found
}

/// lumberjack's millRunOnce over `backups` (newest first) at `now`.
pub fn plan(backups: &[Backup], rotation: &Rotation, now: jiff::Timestamp) -> Plan {
    let mut plan = Plan::default();
    let mut kept: Vec<&Backup> = Vec::new();
    if rotation.max_backups > 0 {
        // A backup and its compressed copy count once.
        let mut seen: Vec<&str> = Vec::new();
        for backup in backups {
            let base = backup.name.strip_suffix(".gz").unwrap_or(&backup.name);
            if !seen.contains(&base) {
                seen.push(base);
            }
            if seen.len() > rotation.max_backups {
                plan.remove.push(backup.name.clone());
            } else {
                kept.push(backup);
            }
        }
    } else {
        kept.extend(backups);
    }
    if rotation.max_age_days > 0 {
        let age = jiff::SignedDuration::from_hours(
            24 * i64::try_from(rotation.max_age_days).unwrap_or(i64::MAX / 24 / 3600),
        );
        let cutoff = now.checked_sub(age).unwrap_or(jiff::Timestamp::MIN);
        kept.retain(|backup| {
            let old = backup.time < cutoff;
            if old {
                plan.remove.push(backup.name.clone());
            }
            !old
        });
    }
    if rotation.compress {
        plan.compress = kept.iter().filter(|b| !b.name.ends_with(".gz")).map(|b| b.name.clone()).collect();
    }
    plan
}

/// The open log file and its size.
#[derive(Debug)]
pub struct RotatingFile {
    path: PathBuf,
    rotation: Rotation,
    /// Buffered: the writer flushes once it has written what was queued.
    file: Option<BufWriter<File>>,
    size: u64,
}

impl RotatingFile {
    /// Makes the file (0600, its directory 0700) if it is missing, as kube-apiserver does at start.
    pub fn create(path: &Path, rotation: Rotation) -> std::io::Result<RotatingFile> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
        Ok(RotatingFile { path: path.to_owned(), rotation, file: None, size: 0 })
    }

    /// Appends `line`, rotating first when it would not fit.
    pub fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        let length = line.len() as u64;
        let max = self.rotation.max_bytes();
        if length > max {
            return Err(std::io::Error::other(format!(
                "write length {length} exceeds maximum file size {max}"
            )));
        }
        if self.file.is_none() {
            self.open_existing(length)?;
        }
        if self.size + length > max {
            self.rotate()?;
        }
        let Some(file) = self.file.as_mut() else { return Err(std::io::Error::other("no log file open")) };
        file.write_all(line)?;
        self.size += length;
        Ok(())
    }

    fn open_existing(&mut self, length: u64) -> std::io::Result<()> {
        match std::fs::metadata(&self.path) {
            Ok(meta) if meta.len() + length >= self.rotation.max_bytes() => self.rotate(),
            Ok(meta) => {
                self.file =
                    Some(BufWriter::with_capacity(BUFFER, OpenOptions::new().append(true).open(&self.path)?));
                self.size = meta.len();
                self.mill();
                Ok(())
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => self.open_new(),
            Err(error) => Err(error),
        }
    }

    fn open_new(&mut self) -> std::io::Result<()> {
        let mut mode = 0o600;
        if let Ok(meta) = std::fs::metadata(&self.path) {
            use std::os::unix::fs::PermissionsExt;
            mode = meta.permissions().mode() & 0o7777;
            let backup = self.path.with_file_name(backup_name(&self.file_name(), jiff::Timestamp::now()));
            std::fs::rename(&self.path, backup)?;
        }
        let file = OpenOptions::new().create(true).write(true).truncate(true).mode(mode).open(&self.path)?;
        self.file = Some(BufWriter::with_capacity(BUFFER, file));
        self.size = 0;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        if let Some(mut file) = self.file.take() {
            file.flush()?;
        }
        self.open_new()?;
        self.mill();
        Ok(())
    }

    /// Writes out what is buffered.
    pub fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.file {
            Some(file) => file.flush(),
            None => Ok(()),
        }
    }

    fn file_name(&self) -> String {
        self.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    }

    /// Removes and compresses backups as [`plan`] says; failures are reported, not fatal.
    fn mill(&self) {
        let rotation = self.rotation;
        if rotation.max_backups == 0 && rotation.max_age_days == 0 && !rotation.compress {
            return;
        }
        let dir = match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
            _ => PathBuf::from("."),
        };
        let Ok(entries) = std::fs::read_dir(&dir) else { return };
        let names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let found = backups(&self.file_name(), names.iter().map(String::as_str));
        let plan = plan(&found, &rotation, jiff::Timestamp::now());
        for name in &plan.remove {
            if let Err(error) = std::fs::remove_file(dir.join(name)) {
                tracing::warn!(%error, backup = %name, "removing an old audit log");
            }
        }
        for name in &plan.compress {
            if let Err(error) = compress(&dir.join(name)) {
                tracing::warn!(%error, backup = %name, "compressing an old audit log");
            }
        }
    }
}

/// `file` gzipped to `file.gz` (same mode), then removed.
fn compress(file: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(file)?.permissions().mode() & 0o7777;
    let mut target = file.as_os_str().to_owned();
    target.push(".gz");
    let mut source = File::open(file)?;
    let out = OpenOptions::new().create(true).write(true).truncate(true).mode(mode).open(&target)?;
    let mut encoder = flate2::write::GzEncoder::new(out, flate2::Compression::default());
    std::io::copy(&mut source, &mut encoder)?;
    encoder.finish()?.sync_all()?;
    std::fs::remove_file(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn backup_names_as_lumberjack() {
        assert_eq!(
            backup_name("audit.log", at("2026-12-02T11:02:28.4085Z")),
            "audit-2026-12-02T11-02-28.408.log"
        );
        assert_eq!(backup_name("audit", at("2026-12-02T11:02:28Z")), "audit-2026-12-02T11-02-28.000");
        let names = [
            "audit.log",
            "audit-2026-12-01T10-00-00.000.log",
            "audit-2026-12-02T10-00-00.000.log.gz",
            "audit-2026-11-01T10-00-00.000.log",
            "audit-garbage.log",
            "other-2026-12-01T10-00-00.000.log",
        ];
        let found = backups("audit.log", names);
        let found: Vec<&str> = found.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(
            found,
            [
                "audit-2026-12-02T10-00-00.000.log.gz",
                "audit-2026-12-01T10-00-00.000.log",
                "audit-2026-11-01T10-00-00.000.log"
            ]
        );
    }

    #[test]
    fn plans_keep_the_newest() {
        let names = [
            "a-2026-12-03T00-00-00.000.log",
            "a-2026-12-02T00-00-00.000.log.gz",
            "a-2026-12-01T00-00-00.000.log",
            "a-2026-11-01T00-00-00.000.log",
        ];
        let found = backups("a.log", names);
        let now = at("2026-12-04T00:00:00Z");
        let keep_two = Rotation { max_backups: 2, ..Rotation::default() };
        assert_eq!(
            plan(&found, &keep_two, now).remove,
            ["a-2026-12-01T00-00-00.000.log", "a-2026-11-01T00-00-00.000.log"]
        );
        let week = Rotation { max_age_days: 7, compress: true, ..Rotation::default() };
        assert_eq!(
            plan(&found, &week, now),
            Plan {
                remove: vec!["a-2026-11-01T00-00-00.000.log".into()],
                compress: vec![
                    "a-2026-12-03T00-00-00.000.log".into(),
                    "a-2026-12-01T00-00-00.000.log".into()
                ],
            }
        );
        assert_eq!(plan(&found, &Rotation::default(), now), Plan::default());
    }

    #[test]
    fn rotates_when_full_and_mills() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/audit.log");
        // A megabyte holds 3 lines of 300 kB.
        let rotation = Rotation { max_size_mb: 1, max_backups: 1, compress: true, ..Rotation::default() };
        let mut file = RotatingFile::create(&path, rotation).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        let line = vec![b'x'; 300_000];
        for _ in 0..3 {
            file.write_line(&line).unwrap();
        }
        let names = |dir: &Path| {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(path.parent().unwrap()), ["audit.log"]);
        file.write_line(&line).unwrap();
        file.flush().unwrap();
        let after = names(path.parent().unwrap());
        assert_eq!(after.len(), 2, "{after:?}");
        assert!(after[0].starts_with("audit-") && after[0].ends_with(".log.gz"), "{after:?}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 300_000);
        let too_big = vec![b'x'; 2 * 1024 * 1024];
        assert_eq!(
            file.write_line(&too_big).unwrap_err().to_string(),
            "write length 2097152 exceeds maximum file size 1048576"
        );
        // An existing file is appended to.
        drop(file);
        let mut again = RotatingFile::create(&path, rotation).unwrap();
        again.write_line(b"y\n").unwrap();
        again.flush().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 300_002);
    }
}
