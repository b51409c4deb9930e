//! [`StoreError`]: every way a store request can fail, the same for every backend.

use std::path::PathBuf;

use crate::types::{LeaseId, Revision};

/// A failed store request. Cloneable: one engine failure answers every transaction of a group commit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The revision asked for was compacted away (the API server answers 410 Gone).
    #[error("required revision {requested} has been compacted (compacted revision {compacted})")]
    Compacted { requested: Revision, compacted: Revision },
    /// The revision asked for is newer than the store's.
    #[error("required revision {requested} is a future revision (current revision {current})")]
    FutureRevision { requested: Revision, current: Revision },
    #[error("invalid key {key:?}: {reason}")]
    InvalidKey { key: String, reason: &'static str },
    #[error("request of {size} bytes exceeds the {limit}-byte request limit")]
    RequestTooLarge { size: usize, limit: usize },
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("lease {id} not found")]
    LeaseNotFound { id: LeaseId },
    /// The backend cannot be reached or did not answer in time; the request may be retried. For a
    /// write this is ambiguous, as with etcd: a member that died with the write in flight may have
    /// applied it, so a retried guarded write can meet its own earlier success as a conflict.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The embedded data directory cannot be used; nothing in it was changed.
    #[error("data directory {}: {reason}", path.display())]
    DataDir { path: PathBuf, reason: String },
    /// The storage engine failed; the embedded store refuses further writes until reopened. For the
    /// write that met the failure this is ambiguous like [`StoreError::Unavailable`]: its commit may
    /// have reached the disk before the failure was seen.
    #[error("storage engine: {0}")]
    Engine(String),
    #[error("the store is closed")]
    Closed,
    /// A value could not be transformed to or from its stored form (encryption at rest: a key
    /// that is gone, a value that was changed). The message is upstream's for the operation: the
    /// reason alone for a read or write of one key, `unable to transform key "K": reason` in a list.
    #[error("{0}")]
    Transform(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;
