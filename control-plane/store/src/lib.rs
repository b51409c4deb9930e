//! keel-store: where resource objects live. A [`Store`] has the etcd v3 semantics the API server needs
//! (one global revision, create/mod revisions and versions per key, transactions guarded by revisions,
//! ordered watches with previous values, compaction, leases), with two backends behind it:
//!
//! - [`embedded::EmbeddedStore`], the default: one data directory, redb underneath, group commit, watch
//!   fan-out in process. No etcd to run.
//! - [`etcd::EtcdStore`]: an etcd 3.4+ cluster through etcd-client, under a key prefix of its own.
//!
//! One conformance suite (tests/conformance) runs the same test functions against both.

pub mod embedded;
mod error;
pub mod etcd;
mod types;
pub mod validate;

use std::fmt;
use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{Stream, StreamExt};

pub use error::{Result, StoreError};
pub use types::*;

/// The events of a watch in revision order, with no gaps. It ends after an error (a compacted start
/// revision, a closed store); dropping it cancels the watch.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<Event>> + Send>>;

/// What a watch with progress yields: an event, or the news that every event of its prefix up to a
/// revision has been delivered — revisions that changed only other keys included (etcd's progress
/// notification). A cache fed by such a watch knows how current it is without any event of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchItem {
    Event(Event),
    Progress(Revision),
}

/// [`WatchStream`] with progress items between the events, in revision order.
pub type ProgressStream = Pin<Box<dyn Stream<Item = Result<WatchItem>> + Send>>;

/// The outcome of a guarded write: done at a revision, or refused because the key was not as expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Written at `revision`; `prev` is what the key held before.
    Written { revision: Revision, prev: Option<KeyValue> },
    /// The guard failed; `current` is the key as it is now.
    Conflict { current: Option<KeyValue> },
}

/// The store contract: etcd v3 semantics, as the API server uses them.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug {
    /// Reads a key or a prefix, at the latest or a given revision.
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse>;

    /// Runs a transaction atomically: one revision for all its changes.
    async fn txn(&self, txn: Txn) -> Result<TxnResponse>;

    /// Watches every key under `prefix`: events with revision ≥ `start` (`None`: only changes after
    /// now), each with the key's previous value. A `start` older than the compacted revision yields
    /// [`StoreError::Compacted`] as the stream's only item.
    async fn watch(&self, prefix: &str, start: Option<Revision>) -> Result<WatchStream> {
        let items = self.watch_with_progress(prefix, start).await?;
        Ok(Box::pin(items.filter_map(|item| {
            std::future::ready(match item {
                Ok(WatchItem::Event(event)) => Some(Ok(event)),
                Ok(WatchItem::Progress(_)) => None,
                Err(error) => Some(Err(error)),
            })
        })))
    }

    /// [`Store::watch`] with [`WatchItem::Progress`] items: how often they come is the backend's (see
    /// [`Store::prompt_progress`]); a progress revision is never below an event already delivered.
    async fn watch_with_progress(&self, prefix: &str, start: Option<Revision>) -> Result<ProgressStream>;

    /// Whether progress follows every change of the store at once (the embedded store reports it after
    /// each commit), so that waiting for a watch to reach [`Store::current_revision`] is a short wait.
    /// etcd reports progress on its own schedule (every 10 minutes by default), and the requested
    /// progress notifications of the etcd 3.4 here are not ordered with the events (etcd #15220).
    fn prompt_progress(&self) -> bool;

    /// Forgets every revision of a key older than `revision` except the one visible at `revision`.
    /// Reads and watches from before it then fail with [`StoreError::Compacted`].
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// The store's current revision, read consistently (no write acknowledged before this call is newer).
    async fn current_revision(&self) -> Result<Revision>;

    /// Grants a lease; keys put with it are deleted when it expires or is revoked.
    async fn grant_lease(&self, ttl: Duration) -> Result<Lease>;

    /// Revokes a lease, deleting its keys in one revision.
    async fn revoke_lease(&self, id: LeaseId) -> Result<()>;

    /// Renews a lease for its full TTL; returns that TTL.
    async fn keep_alive(&self, id: LeaseId) -> Result<Duration>;

    /// Whether `key`, as this store read it at `mod_revision`, is kept in a form it would no longer write (a value
    /// encrypted with a key that no longer comes first, or stored plain where it would now be
    /// encrypted). An update that changes nothing still writes such a value, so that rewriting
    /// every object moves it to the current form (upstream's GuaranteedUpdate, `origState.stale`).
    /// Stores that keep values as given have nothing stale.
    async fn is_stale(&self, key: &str, mod_revision: Revision) -> Result<bool> {
        let _ = (key, mod_revision);
        Ok(false)
    }

    /// One key at the latest revision.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        Ok(self.range(RangeRequest::key(key)).await?.kvs.pop())
    }

    /// Writes a key unconditionally; returns the revision.
    async fn put(&self, key: &str, value: Bytes) -> Result<Revision> {
        Ok(self.txn(Txn::new().and_then([TxnOp::put(key, value)])).await?.revision)
    }

    /// Creates a key that must not exist (`lease` 0 for none).
    async fn create(&self, key: &str, value: Bytes, lease: LeaseId) -> Result<Outcome> {
        let txn = Txn::new()
            .when([Compare::Absent(key.into())])
            .and_then([TxnOp::put_with_lease(key, value, lease)])
            .or_else([TxnOp::get(key)]);
        outcome(self.txn(txn).await?)
    }

    /// Replaces a key whose mod_revision is `expected` (optimistic concurrency).
    async fn update(&self, key: &str, value: Bytes, expected: Revision, lease: LeaseId) -> Result<Outcome> {
        let txn = Txn::new()
            .when([Compare::ModRevision(key.into(), expected)])
            .and_then([TxnOp::put_with_lease(key, value, lease)])
            .or_else([TxnOp::get(key)]);
        outcome(self.txn(txn).await?)
    }

    /// Deletes a key that exists, and whose mod_revision is `expected` when given.
    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<Outcome> {
        let guard = match expected {
            Some(revision) => Compare::ModRevision(key.into(), revision),
            None => Compare::Exists(key.into()),
        };
        let txn = Txn::new().when([guard]).and_then([TxnOp::delete(key)]).or_else([TxnOp::get(key)]);
        outcome(self.txn(txn).await?)
    }
}

/// Reads a single-op guarded transaction back as an [`Outcome`].
fn outcome(response: TxnResponse) -> Result<Outcome> {
    let mut results = response.results.into_iter();
    match (response.succeeded, results.next()) {
        (true, Some(OpResult::Put { prev } | OpResult::Delete { prev })) => {
            Ok(Outcome::Written { revision: response.revision, prev })
        }
        (false, Some(OpResult::Get(current))) => Ok(Outcome::Conflict { current }),
        (_, other) => Err(StoreError::Engine(format!("a guarded single-op transaction answered {other:?}"))),
    }
}
