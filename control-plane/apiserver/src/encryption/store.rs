//! [`EncryptedStore`]: a keel-store whose values are transformed on the way in and out, as
//! upstream's etcd3 store applies its value.Transformer to every value it writes and reads, with
//! the store key as the authenticated data.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use keel_store::{
    Event, EventKind, KeyValue, Lease, LeaseId, OpResult, ProgressStream, RangeRequest, RangeResponse,
    Result, Revision, Store, StoreError, Txn, TxnOp, TxnResponse, WatchItem,
};

use super::Transformers;
use super::providers::ENCRYPTED_PREFIX;

/// Another store with values encrypted at rest as [`Transformers`] says.
#[derive(Debug)]
pub struct EncryptedStore {
    inner: Arc<dyn Store>,
    transformers: Arc<Transformers>,
}

impl EncryptedStore {
    pub fn new(inner: Arc<dyn Store>, transformers: Transformers) -> EncryptedStore {
        EncryptedStore { inner, transformers: Arc::new(transformers) }
    }
}

impl Transformers {
    fn write(&self, key: &str, value: Bytes) -> Result<Bytes> {
        match self.for_key(key) {
            Some(transformer) => transformer.to_storage(&value, key).map_err(StoreError::Transform),
            None => Ok(value),
        }
    }

    /// The data of a stored value, and whether it is stale.
    fn read_value(&self, key: &str, value: &Bytes) -> Result<(Bytes, bool)> {
        let failed = StoreError::Transform;
        match self.for_key(key) {
            Some(transformer) => {
                let read = transformer.from_storage(value, key).map_err(failed)?;
                Ok((read.data, read.stale))
            }
            None if value.starts_with(ENCRYPTED_PREFIX) => {
                Err(failed("identity transformer tried to read encrypted data".into()))
            }
            None => Ok((value.clone(), false)),
        }
    }

    fn read(&self, mut kv: KeyValue) -> Result<KeyValue> {
        kv.value = self.read_value(&kv.key, &kv.value)?.0;
        Ok(kv)
    }

    /// A value read in a list: an error names its key, as upstream's etcd3 GetList does (a Get
    /// or a write gives the reason alone).
    fn read_listed(&self, kv: KeyValue) -> Result<KeyValue> {
        let key = kv.key.clone();
        self.read(kv).map_err(|error| match error {
            StoreError::Transform(reason) => {
                StoreError::Transform(format!("unable to transform key {key:?}: {reason}"))
            }
            other => other,
        })
    }

    fn read_event(&self, mut event: Event) -> Result<Event> {
        if event.kind == EventKind::Put {
            event.kv = self.read(event.kv)?;
        }
        event.prev_kv = event.prev_kv.map(|kv| self.read(kv)).transpose()?;
        Ok(event)
    }

    fn read_result(&self, result: OpResult) -> Result<OpResult> {
        let read = |kv: Option<KeyValue>| kv.map(|kv| self.read(kv)).transpose();
        Ok(match result {
            OpResult::Put { prev } => OpResult::Put { prev: read(prev)? },
            OpResult::Delete { prev } => OpResult::Delete { prev: read(prev)? },
            OpResult::Get(kv) => OpResult::Get(read(kv)?),
        })
    }

    fn write_op(&self, op: TxnOp) -> Result<TxnOp> {
        Ok(match op {
            TxnOp::Put { key, value, lease } => {
                let value = self.write(&key, value)?;
                TxnOp::Put { key, value, lease }
            }
            other => other,
        })
    }
}

#[async_trait]
impl Store for EncryptedStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        let exact = request.exact;
        let mut response = self.inner.range(request).await?;
        let read = |kv| if exact { self.transformers.read(kv) } else { self.transformers.read_listed(kv) };
        response.kvs = response.kvs.into_iter().map(read).collect::<Result<Vec<_>>>()?;
        Ok(response)
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        let write = |ops: Vec<TxnOp>| {
            ops.into_iter().map(|op| self.transformers.write_op(op)).collect::<Result<Vec<_>>>()
        };
        let txn = Txn { compares: txn.compares, success: write(txn.success)?, failure: write(txn.failure)? };
        let mut response = self.inner.txn(txn).await?;
        response.results = response
            .results
            .into_iter()
            .map(|result| self.transformers.read_result(result))
            .collect::<Result<Vec<_>>>()?;
        Ok(response)
    }

    async fn watch_with_progress(&self, prefix: &str, start: Option<Revision>) -> Result<ProgressStream> {
        let transformers = self.transformers.clone();
        let items = self.inner.watch_with_progress(prefix, start).await?;
        Ok(Box::pin(items.map(move |item| match item? {
            WatchItem::Event(event) => transformers.read_event(event).map(WatchItem::Event),
            progress @ WatchItem::Progress(_) => Ok(progress),
        })))
    }

    fn prompt_progress(&self) -> bool {
        self.inner.prompt_progress()
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease> {
        self.inner.grant_lease(ttl).await
    }

    async fn revoke_lease(&self, id: LeaseId) -> Result<()> {
        self.inner.revoke_lease(id).await
    }

    async fn keep_alive(&self, id: LeaseId) -> Result<Duration> {
        self.inner.keep_alive(id).await
    }

    /// Read again as stored: stale when read by a provider or key that no longer writes. A key
    /// changed since it was read counts as stale too, so the caller's guarded write goes ahead
    /// and meets the change.
    async fn is_stale(&self, key: &str, mod_revision: Revision) -> Result<bool> {
        if self.transformers.for_key(key).is_none() {
            return Ok(false);
        }
        let Some(stored) = self.inner.get(key).await? else { return Ok(true) };
        if stored.mod_revision != mod_revision {
            return Ok(true);
        }
        Ok(self.transformers.read_value(&stored.key, &stored.value)?.1)
    }
}
