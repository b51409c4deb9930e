//! The data of the contract: key-values with their revisions, ranges, transactions and watch events.
//! Plain values with no IO, shared by every backend.

use std::time::Duration;

use bytes::Bytes;

/// A store revision. One global counter, raised by one for every transaction that changes something;
/// signed like etcd's (`0` means "none" in a key's fields, "latest" in a request).
pub type Revision = i64;

/// A lease id (etcd's int64 lease ids; `0` means no lease).
pub type LeaseId = i64;

/// etcd's default `--max-request-bytes` (1.5 MiB): the largest request either backend accepts. Requests
/// are measured with room for etcd's framing and key prefix ([`crate::validate::txn`]), so a request
/// that fits one backend fits both.
pub const MAX_REQUEST_BYTES: usize = 1536 * 1024;

/// The longest key prefix the etcd backend accepts; each key of a request is measured with this much
/// room for it.
pub const MAX_PREFIX_BYTES: usize = 256;

/// The longest key accepted. Kubernetes keys are `/registry/<resource>/<namespace>/<name>` with names of
/// at most 253 characters; anything near this length is a bug in the caller, not data.
pub const MAX_KEY_BYTES: usize = 4096;

/// etcd's `MaxLeaseTTL`: the longest lease either backend grants.
pub const MAX_LEASE_TTL_SECS: i64 = 9_000_000_000;

/// The most compares, and the most operations per branch, one transaction may carry (etcd's default
/// `--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;

/// A key as stored, with its value and revisions (etcd's `mvccpb.KeyValue`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Bytes,
    /// The revision of the transaction that created the key (since its last deletion).
    pub create_revision: Revision,
    /// The revision of the transaction that last changed it.
    pub mod_revision: Revision,
    /// How many times the key was written since it was created, starting at 1.
    pub version: i64,
    /// The lease the key is attached to, 0 for none.
    pub lease: LeaseId,
}

/// Which keys a range reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeRequest {
    /// Every key starting with this prefix (a single key when `prefix` is a whole key and `exact` is set).
    pub prefix: String,
    /// Only the key equal to `prefix`.
    pub exact: bool,
    /// Start at this key (inclusive) instead of the prefix's first key: a continuation. Must start with
    /// `prefix`.
    pub from: Option<String>,
    /// Read as of this revision; `None` reads the latest.
    pub revision: Option<Revision>,
    /// At most this many keys (`None` for all); `more` tells whether keys were left.
    pub limit: Option<usize>,
    /// Return only the count, no key-values.
    pub count_only: bool,
}

impl RangeRequest {
    /// Every key under `prefix`, latest revision.
    pub fn prefix(prefix: impl Into<String>) -> RangeRequest {
        RangeRequest {
            prefix: prefix.into(),
            exact: false,
            from: None,
            revision: None,
            limit: None,
            count_only: false,
        }
    }

    /// One key.
    pub fn key(key: impl Into<String>) -> RangeRequest {
        RangeRequest { exact: true, ..RangeRequest::prefix(key) }
    }

    pub fn from(mut self, key: impl Into<String>) -> RangeRequest {
        self.from = Some(key.into());
        self
    }

    pub fn at(mut self, revision: Revision) -> RangeRequest {
        self.revision = Some(revision);
        self
    }

    pub fn limit(mut self, limit: usize) -> RangeRequest {
        self.limit = Some(limit);
        self
    }

    pub fn count_only(mut self) -> RangeRequest {
        self.count_only = true;
        self
    }
}

/// What a range found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeResponse {
    /// The keys in key order (empty when `count_only`).
    pub kvs: Vec<KeyValue>,
    /// Whether keys beyond `limit` remain in the range.
    pub more: bool,
    /// How many keys the whole range holds (from `from` on), regardless of `limit`.
    pub count: usize,
    /// The revision the range was read at: the requested one, or the store's current revision.
    pub revision: Revision,
}

/// A condition of a transaction on one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compare {
    /// The key exists.
    Exists(String),
    /// The key does not exist.
    Absent(String),
    /// The key's mod_revision equals this (0: the key does not exist).
    ModRevision(String, Revision),
}

impl Compare {
    pub fn key(&self) -> &str {
        match self {
            Compare::Exists(key) | Compare::Absent(key) | Compare::ModRevision(key, _) => key,
        }
    }
}

/// One operation of a transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOp {
    /// Write the key, attached to `lease` (0 for none).
    Put { key: String, value: Bytes, lease: LeaseId },
    /// Delete the key (nothing happens if it does not exist).
    Delete { key: String },
    /// Read the key (as of the transaction).
    Get { key: String },
}

impl TxnOp {
    pub fn put(key: impl Into<String>, value: impl Into<Bytes>) -> TxnOp {
        TxnOp::Put { key: key.into(), value: value.into(), lease: 0 }
    }

    pub fn put_with_lease(key: impl Into<String>, value: impl Into<Bytes>, lease: LeaseId) -> TxnOp {
        TxnOp::Put { key: key.into(), value: value.into(), lease }
    }

    pub fn delete(key: impl Into<String>) -> TxnOp {
        TxnOp::Delete { key: key.into() }
    }

    pub fn get(key: impl Into<String>) -> TxnOp {
        TxnOp::Get { key: key.into() }
    }

    pub fn key(&self) -> &str {
        match self {
            TxnOp::Put { key, .. } | TxnOp::Delete { key } | TxnOp::Get { key } => key,
        }
    }
}

/// `if all compares hold then success else failure`, applied atomically at one revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Txn {
    pub compares: Vec<Compare>,
    pub success: Vec<TxnOp>,
    pub failure: Vec<TxnOp>,
}

impl Txn {
    pub fn new() -> Txn {
        Txn::default()
    }

    pub fn when(mut self, compares: impl IntoIterator<Item = Compare>) -> Txn {
        self.compares.extend(compares);
        self
    }

    pub fn and_then(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Txn {
        self.success.extend(ops);
        self
    }

    pub fn or_else(mut self, ops: impl IntoIterator<Item = TxnOp>) -> Txn {
        self.failure.extend(ops);
        self
    }
}

/// The result of one [`TxnOp`], in the order of the branch that ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// The key was written; `prev` is what it held before.
    Put { prev: Option<KeyValue> },
    /// `prev` is the deleted key-value, `None` when the key did not exist.
    Delete { prev: Option<KeyValue> },
    /// The key as of the transaction.
    Get(Option<KeyValue>),
}

/// What a transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnResponse {
    /// Whether the compares held (the success branch ran).
    pub succeeded: bool,
    /// The transaction's revision if it changed something, otherwise the store's revision it read at.
    pub revision: Revision,
    pub results: Vec<OpResult>,
}

/// Whether an event wrote or deleted its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change seen by a watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// The key after the change. For a delete: the key, an empty value and `mod_revision` set to the
    /// deletion's revision (the other fields 0), as etcd sends it.
    pub kv: KeyValue,
    /// The key before the change, when it existed and its revision was not compacted.
    pub prev_kv: Option<KeyValue>,
}

impl Event {
    /// The revision of the transaction that made this change.
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
}

/// A lease as granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub id: LeaseId,
    /// The time to live granted: whole seconds, at least the one asked for. etcd raises a TTL below its
    /// minimum (2 s with its default election settings); the embedded store grants what is asked.
    pub ttl: Duration,
}
