//! The embedded store's data directory and its redb file: opening it safely, the record format, and
//! loading it back into an [`Index`].
//!
//! Tables:
//! - `meta`: `format` (the data directory's identity and version), `compacted` (the compaction
//!   revision).
//! - `revisions`: `(revision, sub)` → one record per changed key, in commit order (etcd's key bucket).
//!   The newest record's revision is the store's revision: every revision has a record, and
//!   compaction never deletes the newest one of any key.
//! - `leases`: lease id → TTL in seconds.

use std::fs::{self, File};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use redb::{Database, DatabaseError, ReadableDatabase, ReadableTable, StorageError, TableDefinition};

use super::index::{Change, Entry, Index, RecordId};
use crate::error::{Result, StoreError};
use crate::types::{LeaseId, Revision};

pub(crate) const META: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("meta");
pub(crate) const REVISIONS: TableDefinition<'_, (u64, u32), &[u8]> = TableDefinition::new("revisions");
pub(crate) const LEASES: TableDefinition<'_, i64, i64> = TableDefinition::new("leases");

/// The database file inside the data directory.
pub(crate) const DB_FILE: &str = "keel-store.redb";
/// The database while it is being created.
const NEW_DB_FILE: &str = "keel-store.redb.new";
/// Written once into `meta` at creation; any other value is a foreign or future file.
const FORMAT: &[u8] = b"keel-store/1";

/// One changed key as stored in `revisions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub key: String,
    pub entry: Entry,
    /// `None` for a deletion.
    pub value: Option<Bytes>,
    /// The key's previous record, for the watch's previous value.
    pub prev: Option<RecordId>,
}

// The record layout, little-endian: kind u8 (0 put, 1 delete) | create_revision i64 | version i64 |
// lease i64 | prev revision i64 (0: none) | prev sub u32 | key length u32 | key | value.
// Written by hand: a dozen fixed fields do not need a serialization framework in the write path.
const HEADER: usize = 1 + 8 + 8 + 8 + 8 + 4 + 4;

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let value = self.value.as_deref().unwrap_or_default();
        let mut out = Vec::with_capacity(HEADER + self.key.len() + value.len());
        out.push(u8::from(self.value.is_none()));
        out.extend_from_slice(&self.entry.create_revision.to_le_bytes());
        out.extend_from_slice(&self.entry.version.to_le_bytes());
        out.extend_from_slice(&self.entry.lease.to_le_bytes());
        let prev = self.prev.unwrap_or(RecordId { revision: 0, sub: 0 });
        out.extend_from_slice(&prev.revision.to_le_bytes());
        out.extend_from_slice(&prev.sub.to_le_bytes());
        out.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        out.extend_from_slice(self.key.as_bytes());
        out.extend_from_slice(value);
        out
    }

    pub fn decode(id: RecordId, bytes: &[u8]) -> Result<Record> {
        let corrupt = || StoreError::Engine(format!("record {id:?} is malformed"));
        let header = bytes.get(..HEADER).ok_or_else(corrupt)?;
        let i64_at = |at: usize| i64::from_le_bytes(header[at..at + 8].try_into().unwrap_or_default());
        let u32_at = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().unwrap_or_default());
        let deleted = match header[0] {
            0 => false,
            1 => true,
            _ => return Err(corrupt()),
        };
        let key_len = u32_at(37) as usize;
        let key = bytes.get(HEADER..HEADER + key_len).ok_or_else(corrupt)?;
        let key = std::str::from_utf8(key).map_err(|_| corrupt())?.to_owned();
        let value = Bytes::copy_from_slice(&bytes[HEADER + key_len..]);
        let prev = RecordId { revision: i64_at(25), sub: u32_at(33) };
        Ok(Record {
            key,
            entry: Entry { id, create_revision: i64_at(1), version: i64_at(9), lease: i64_at(17) },
            value: (!deleted).then_some(value),
            prev: (prev.revision != 0).then_some(prev),
        })
    }
}

pub(crate) fn table_key(id: RecordId) -> (u64, u32) {
    (id.revision as u64, id.sub)
}

/// What a data directory held when opened.
#[derive(Debug)]
pub(crate) struct Loaded {
    pub db: Database,
    pub index: Index,
    pub leases: Vec<(LeaseId, i64)>,
    /// Records a compaction forgot but did not delete before the store stopped.
    pub garbage: Vec<RecordId>,
}

/// Opens (or creates) the data directory `dir`, refusing anything that is not a keel-store directory
/// in good order: a foreign file or directory, a corrupted database, one opened by another process.
pub(crate) fn open(dir: &Path, cache_bytes: usize) -> Result<Loaded> {
    let refuse = |reason: String| StoreError::DataDir { path: dir.to_owned(), reason };
    let path = dir.join(DB_FILE);
    if !prepare_dir(dir).map_err(refuse)? {
        create(dir, &path).map_err(refuse)?;
    }
    let mut builder = Database::builder();
    builder.set_cache_size(cache_bytes).set_check_integrity_on_open(true);
    // redb's open verifies every page checksum (set above), so a damaged file is refused; the panic
    // guard is a second line should a damaged file still trip an assertion inside the engine.
    let db = match catch_unwind(AssertUnwindSafe(|| builder.open(&path))) {
        Ok(Ok(db)) => db,
        Ok(Err(DatabaseError::DatabaseAlreadyOpen)) => {
            return Err(refuse(format!("{} is in use by another keel-store", path.display())));
        }
        Ok(Err(DatabaseError::Storage(StorageError::Corrupted(detail)))) => {
            return Err(refuse(format!("{} is corrupted: {detail}", path.display())));
        }
        Ok(Err(error)) => return Err(refuse(format!("cannot open {}: {error}", path.display()))),
        Err(_) => {
            return Err(refuse(format!("{} is corrupted: the engine failed reading it", path.display())));
        }
    };
    load(db).map_err(|e| refuse(e.to_string()))
}

/// Creates `dir` when missing and returns whether it holds a database. A directory holding anything
/// but our database is not ours to use; a half-created database (the temporary file of [`create`])
/// is removed.
fn prepare_dir(dir: &Path) -> Result<bool, String> {
    match fs::metadata(dir) {
        Ok(meta) if !meta.is_dir() => return Err("exists and is not a directory".into()),
        Ok(meta) => {
            if meta.permissions().mode() & 0o077 != 0 {
                // As etcd does: say so, but leave the operator's directory as it is.
                tracing::warn!(
                    dir = %dir.display(),
                    mode = format!("{:o}", meta.permissions().mode() & 0o777),
                    "the data directory is readable by others; 0700 keeps Secrets private"
                );
            }
        }
        Err(_) => create_dir(dir)?,
    }
    let entries = fs::read_dir(dir).map_err(|e| format!("cannot read it: {e}"))?;
    let mut foreign: Vec<PathBuf> = Vec::new();
    let mut has_db = false;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read it: {e}"))?;
        if entry.file_name() == DB_FILE {
            has_db = true;
        } else if entry.file_name() == "lost+found" {
            // The data directory is the root of a filesystem of its own.
        } else if entry.file_name() == NEW_DB_FILE {
            fs::remove_file(entry.path())
                .map_err(|e| format!("removing a half-created {NEW_DB_FILE}: {e}"))?;
        } else {
            foreign.push(entry.file_name().into());
        }
    }
    if !foreign.is_empty() {
        foreign.sort();
        return Err(format!("not a keel-store data directory: it holds {foreign:?}"));
    }
    Ok(has_db)
}

/// Creates `dir` (mode 0700: Secrets live here) and any missing parents, each made durable in its
/// parent.
fn create_dir(dir: &Path) -> Result<(), String> {
    let mut missing = vec![dir];
    while let Some(parent) = missing.last().and_then(|d| d.parent()).filter(|p| !p.as_os_str().is_empty()) {
        if parent.exists() {
            break;
        }
        missing.push(parent);
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create it: {e}"))?;
    for created in missing {
        if let Some(parent) = created.parent().filter(|p| !p.as_os_str().is_empty()) {
            sync_dir(parent).map_err(|e| format!("syncing {}: {e}", parent.display()))?;
        }
    }
    Ok(())
}

/// Creates and initializes the database under a temporary name, then renames it into place: a crash
/// never leaves a database without its format marker.
fn create(dir: &Path, path: &Path) -> Result<(), String> {
    let new = dir.join(NEW_DB_FILE);
    // Empty and private first (mode 0600: Secrets live here); redb initializes an empty file.
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&new)
        .map_err(|e| format!("creating {}: {e}", new.display()))?;
    let db = Database::create(&new).map_err(|e| format!("creating {}: {e}", new.display()))?;
    initialize(&db).map_err(|e| format!("initializing {}: {e}", new.display()))?;
    drop(db);
    fs::rename(&new, path).map_err(|e| format!("renaming {} into place: {e}", new.display()))?;
    sync_dir(dir).map_err(|e| format!("syncing the directory: {e}"))
}

fn initialize(db: &Database) -> Result<(), redb::Error> {
    let txn = db.begin_write()?;
    {
        let mut meta = txn.open_table(META)?;
        meta.insert("format", FORMAT)?;
        meta.insert("compacted", 0i64.to_le_bytes().as_slice())?;
        txn.open_table(REVISIONS)?;
        txn.open_table(LEASES)?;
    }
    txn.commit()?;
    Ok(())
}

/// Makes a directory's entries (a created file, a rename) durable.
pub(crate) fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

fn engine(error: impl std::fmt::Display) -> StoreError {
    StoreError::Engine(error.to_string())
}

fn load(db: Database) -> Result<Loaded> {
    let txn = db.begin_read().map_err(engine)?;
    let meta = txn.open_table(META).map_err(|_| engine("no keel-store metadata: a foreign redb file"))?;
    let meta_i64 = |name: &str| -> Result<i64> {
        let value = meta.get(name).map_err(engine)?.ok_or_else(|| engine(format!("no {name} in meta")))?;
        let bytes: [u8; 8] = value.value().try_into().map_err(|_| engine(format!("malformed {name}")))?;
        Ok(i64::from_le_bytes(bytes))
    };
    match meta.get("format").map_err(engine)? {
        Some(format) if format.value() == FORMAT => {}
        Some(format) => {
            let format = String::from_utf8_lossy(format.value()).into_owned();
            return Err(engine(format!("format {format:?}, this keel-store reads {:?}", "keel-store/1")));
        }
        None => return Err(engine("no keel-store format marker: a foreign redb file")),
    }
    let compacted = meta_i64("compacted")?;
    let mut index = Index::default();
    let revisions = txn.open_table(REVISIONS).map_err(engine)?;
    for row in revisions.iter().map_err(engine)? {
        let (key, value) = row.map_err(engine)?;
        let (rev, sub) = key.value();
        let record = Record::decode(RecordId { revision: rev as Revision, sub }, value.value())?;
        index.apply(Change { key: record.key, entry: record.entry, value: record.value });
    }
    if index.current < compacted {
        return Err(engine(format!(
            "compacted at {compacted} but records end at revision {}",
            index.current
        )));
    }
    let garbage = index.compact(compacted);
    let leases = txn
        .open_table(LEASES)
        .map_err(engine)?
        .iter()
        .map_err(engine)?
        .map(|row| row.map(|(id, ttl)| (id.value(), ttl.value())).map_err(engine))
        .collect::<Result<_>>()?;
    drop((meta, revisions));
    drop(txn);
    Ok(Loaded { db, index, leases, garbage })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let id = RecordId { revision: 7, sub: 2 };
        let put = Record {
            key: "/registry/pods/default/nginx".into(),
            entry: Entry { id, create_revision: 3, version: 2, lease: 99 },
            value: Some(Bytes::from_static(b"{\"kind\":\"Pod\"}")),
            prev: Some(RecordId { revision: 3, sub: 0 }),
        };
        assert_eq!(Record::decode(id, &put.encode()).unwrap(), put);
        let delete = Record {
            entry: Entry { id, create_revision: 0, version: 0, lease: 0 },
            value: None,
            prev: None,
            ..put
        };
        assert_eq!(Record::decode(id, &delete.encode()).unwrap(), delete);
        assert!(Record::decode(id, b"short").is_err());
    }
}
