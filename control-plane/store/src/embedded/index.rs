//! The in-memory MVCC index of the embedded store (etcd's treeIndex, in spirit): for every key, the
//! revisions it has had since the last compaction, and its latest value. Reads at the latest revision
//! are answered from memory alone; older revisions name the record to read from disk. No IO here.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;

use crate::types::{KeyValue, LeaseId, Revision};

/// Where a record lives on disk: the transaction's revision and the op's position in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct RecordId {
    pub revision: Revision,
    pub sub: u32,
}

/// One revision of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub id: RecordId,
    /// 0 for a deletion (a tombstone).
    pub create_revision: Revision,
    pub version: i64,
    pub lease: LeaseId,
}

impl Entry {
    pub fn is_tombstone(&self) -> bool {
        self.version == 0
    }
}

/// A key's retained revisions, oldest first, and its latest value when it exists.
#[derive(Debug, Default)]
struct History {
    entries: Vec<Entry>,
    value: Option<Bytes>,
}

/// What a read at some revision finds for one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// The key's latest value, from memory.
    Ready(KeyValue),
    /// An older revision: its value is in the record `entry.id` on disk.
    OnDisk { key: String, entry: Entry },
}

/// One change to apply: a put (`value` set) or a delete of `key` at `id`.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub key: String,
    pub entry: Entry,
    pub value: Option<Bytes>,
}

#[derive(Default)]
pub(crate) struct Index {
    keys: BTreeMap<String, History>,
    /// The newest committed revision.
    pub current: Revision,
    /// Revisions before this are forgotten (0: never compacted).
    pub compacted: Revision,
}

impl std::fmt::Debug for Index {
    /// Counts, never values (Secrets live here).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Index")
            .field("keys", &self.keys.len())
            .field("current", &self.current)
            .field("compacted", &self.compacted)
            .finish()
    }
}

impl Index {
    /// The key as it is now, if it exists.
    pub fn latest(&self, key: &str) -> Option<KeyValue> {
        let history = self.keys.get(key)?;
        let entry = history.entries.last()?;
        let value = history.value.as_ref()?;
        Some(key_value(key, entry, value.clone()))
    }

    /// The key as it is now with the sub-revision of its record, if it exists.
    pub fn latest_with_sub(&self, key: &str) -> Option<(KeyValue, u32)> {
        let history = self.keys.get(key)?;
        let entry = history.entries.last()?;
        let value = history.value.as_ref()?;
        Some((key_value(key, entry, value.clone()), entry.id.sub))
    }

    /// The entry of the key's latest revision, tombstones included.
    pub fn latest_entry(&self, key: &str) -> Option<Entry> {
        self.keys.get(key)?.entries.last().copied()
    }

    /// The keys under `prefix` (or exactly `prefix` when `exact`), from `from` on, visible at `revision`,
    /// in key order. Calls `visit` for each; stops when it returns false.
    pub fn range(
        &self,
        prefix: &str,
        exact: bool,
        from: Option<&str>,
        revision: Revision,
        mut visit: impl FnMut(Found) -> bool,
    ) {
        let start = from.unwrap_or(prefix);
        let keys = self.keys.range::<str, _>((Bound::Included(start), Bound::Unbounded));
        for (key, history) in keys {
            if exact && key != prefix || !key.starts_with(prefix) {
                break;
            }
            if let Some(found) = visible(key, history, revision)
                && !visit(found)
            {
                break;
            }
        }
    }

    /// Records `change` (its revision must be the newest).
    pub fn apply(&mut self, change: Change) {
        self.current = self.current.max(change.entry.id.revision);
        let history = self.keys.entry(change.key).or_default();
        history.entries.push(change.entry);
        history.value = change.value;
    }

    /// Forgets what no read at or after `revision` can see: for every key, the revisions older than
    /// the one visible at `revision`, and that one too when it is a deletion older than `revision`.
    /// Returns the records to delete from disk.
    pub fn compact(&mut self, revision: Revision) -> Vec<RecordId> {
        let mut dropped = Vec::new();
        self.keys.retain(|_, history| {
            // Entries before `keep` are invisible at `revision` and after.
            let visible_at = history.entries.partition_point(|e| e.id.revision <= revision);
            let mut keep = visible_at.saturating_sub(1);
            if let Some(entry) = history.entries.get(keep)
                && entry.id.revision < revision
                && entry.is_tombstone()
            {
                keep += 1;
            }
            dropped.extend(history.entries.drain(..keep).map(|e| e.id));
            !history.entries.is_empty()
        });
        self.compacted = self.compacted.max(revision);
        dropped
    }

    /// Every live key attached to a lease, with that lease.
    pub fn leased_keys(&self) -> impl Iterator<Item = (&str, LeaseId)> {
        self.keys.iter().filter_map(|(key, history)| {
            let entry = history.entries.last()?;
            (history.value.is_some() && entry.lease != 0).then_some((key.as_str(), entry.lease))
        })
    }
}

/// The key's state at `revision`, if it existed then.
fn visible(key: &str, history: &History, revision: Revision) -> Option<Found> {
    let at = history.entries.partition_point(|e| e.id.revision <= revision).checked_sub(1)?;
    let entry = history.entries[at];
    if entry.is_tombstone() {
        return None;
    }
    if at + 1 == history.entries.len()
        && let Some(value) = &history.value
    {
        return Some(Found::Ready(key_value(key, &entry, value.clone())));
    }
    Some(Found::OnDisk { key: key.to_owned(), entry })
}

pub(crate) fn key_value(key: &str, entry: &Entry, value: Bytes) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value,
        create_revision: entry.create_revision,
        mod_revision: entry.id.revision,
        version: entry.version,
        lease: entry.lease,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(index: &mut Index, key: &str, revision: Revision, value: &'static str) {
        let prev = index.latest(key);
        let entry = Entry {
            id: RecordId { revision, sub: 0 },
            create_revision: prev.as_ref().map_or(revision, |kv| kv.create_revision),
            version: prev.map_or(1, |kv| kv.version + 1),
            lease: 0,
        };
        index.apply(Change { key: key.into(), entry, value: Some(Bytes::from_static(value.as_bytes())) });
    }

    fn delete(index: &mut Index, key: &str, revision: Revision) {
        let entry = Entry { id: RecordId { revision, sub: 0 }, create_revision: 0, version: 0, lease: 0 };
        index.apply(Change { key: key.into(), entry, value: None });
    }

    fn read(index: &Index, prefix: &str, revision: Revision) -> Vec<(String, Revision, bool)> {
        let mut out = Vec::new();
        index.range(prefix, false, None, revision, |found| {
            out.push(match found {
                Found::Ready(kv) => (kv.key, kv.mod_revision, true),
                Found::OnDisk { key, entry } => (key, entry.id.revision, false),
            });
            true
        });
        out
    }

    #[test]
    fn reads_at_revisions() {
        let mut index = Index::default();
        put(&mut index, "/a/1", 1, "x");
        put(&mut index, "/a/2", 2, "y");
        put(&mut index, "/a/1", 3, "z");
        delete(&mut index, "/a/2", 4);
        put(&mut index, "/b", 5, "w");
        assert_eq!(read(&index, "/a/", 5), vec![("/a/1".into(), 3, true)]);
        assert_eq!(read(&index, "/a/", 2), vec![("/a/1".into(), 1, false), ("/a/2".into(), 2, false)]);
        assert_eq!(read(&index, "/a/", 0), vec![]);
        let kv = index.latest("/a/1").unwrap();
        assert_eq!((kv.create_revision, kv.version, kv.mod_revision), (1, 2, 3));
        assert!(index.latest("/a/2").is_none());
    }

    #[test]
    fn compaction_keeps_what_is_visible() {
        let mut index = Index::default();
        put(&mut index, "/a", 1, "x");
        put(&mut index, "/a", 2, "y");
        put(&mut index, "/b", 3, "z");
        delete(&mut index, "/b", 4);
        put(&mut index, "/c", 5, "c");
        delete(&mut index, "/c", 6);
        let mut dropped = index.compact(5);
        dropped.sort();
        let ids: Vec<Revision> = dropped.iter().map(|id| id.revision).collect();
        // /a@1 superseded; /b@3 and its tombstone @4 invisible at 5; /c@5 still visible at 5.
        assert_eq!(ids, vec![1, 3, 4]);
        assert_eq!(read(&index, "/", 5), vec![("/a".into(), 2, true), ("/c".into(), 5, false)]);
        assert_eq!(read(&index, "/", 6), vec![("/a".into(), 2, true)]);
        assert_eq!(index.compacted, 5);
        let ids: Vec<Revision> = index.compact(6).iter().map(|id| id.revision).collect();
        assert_eq!(ids, vec![5]);
        // The tombstone at the compaction revision stays for watchers starting there.
        assert!(index.latest_entry("/c").is_some());
    }
}
