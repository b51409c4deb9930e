//! Watches of the embedded store. Live events come from the committer's broadcast of each group
//! commit; a watch that starts in the past, or falls behind the broadcast, reads the missed revisions
//! from disk and rejoins. It subscribes before reading where the store stands, so no revision falls
//! between the two: every watch sees its prefix's events in revision order with no gaps. After each
//! commit (and each step of a catch-up) it reports progress to the last revision seen, so a consumer
//! knows at once that a revision which changed other keys has passed.

use std::collections::VecDeque;
use std::sync::Arc;

use futures::StreamExt;
use redb::ReadableDatabase;
use tokio::sync::broadcast::{self, error::RecvError};

use super::commit::{Batch, Shared, deleted, lock};
use super::disk::{REVISIONS, Record, table_key};
use super::index::{RecordId, key_value};
use crate::error::{Result, StoreError};
use crate::types::{Event, EventKind, KeyValue, Revision};
use crate::{ProgressStream, WatchItem};

/// Revisions read from disk per step of a catch-up, and the bytes of values after which a step ends
/// early, to bound the memory a far-behind watch takes.
const CATCH_UP_REVISIONS: Revision = 1000;
const CATCH_UP_BYTES: usize = 16 * 1024 * 1024;

struct Watch {
    shared: Arc<Shared>,
    prefix: String,
    /// The first revision not delivered yet.
    next: Revision,
    /// Read from disk up to this revision before listening to the broadcast again.
    catch_up_to: Option<Revision>,
    receiver: Option<broadcast::Receiver<Arc<Batch>>>,
    queue: VecDeque<Result<WatchItem>>,
    done: bool,
}

pub(crate) fn watch(shared: Arc<Shared>, prefix: String, start: Option<Revision>) -> ProgressStream {
    let receiver = lock(&shared.events).as_ref().map(broadcast::Sender::subscribe);
    let (current, compacted) = {
        let index = shared.index.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        (index.current, index.compacted)
    };
    let next = start.unwrap_or(current + 1).max(1);
    let mut watch = Watch {
        shared,
        prefix,
        next,
        catch_up_to: (next <= current).then_some(current),
        receiver,
        queue: VecDeque::new(),
        done: false,
    };
    if next < compacted {
        watch.fail(StoreError::Compacted { requested: next, compacted });
    }
    futures::stream::unfold(watch, |mut watch| async move {
        loop {
            if let Some(item) = watch.queue.pop_front() {
                return Some((item, watch));
            }
            if watch.done {
                return None;
            }
            watch.step().await;
        }
    })
    .boxed()
}

impl Watch {
    fn fail(&mut self, error: StoreError) {
        self.queue.push_back(Err(error));
        self.done = true;
    }

    fn wants(&self, event: &Event) -> bool {
        event.revision() >= self.next && event.kv.key.starts_with(&self.prefix)
    }

    /// Fills the queue or ends the watch.
    async fn step(&mut self) {
        if let Some(to) = self.catch_up_to {
            let shared = self.shared.clone();
            let (prefix, from) = (self.prefix.clone(), self.next);
            let read = tokio::task::spawn_blocking(move || catch_up(&shared, &prefix, from, to)).await;
            match read {
                Ok(Ok((events, next))) => {
                    self.queue.extend(events.into_iter().map(|event| Ok(WatchItem::Event(event))));
                    self.queue.push_back(Ok(WatchItem::Progress(next - 1)));
                    self.next = next;
                    if next > to {
                        self.catch_up_to = None;
                    }
                }
                Ok(Err(error)) => self.fail(error),
                Err(join) => self.fail(StoreError::Engine(format!("watch catch-up failed: {join}"))),
            }
            return;
        }
        let Some(receiver) = &mut self.receiver else {
            return self.fail(StoreError::Closed);
        };
        match receiver.recv().await {
            Ok(batch) => {
                for event in &batch.events {
                    if self.wants(event) {
                        self.queue.push_back(Ok(WatchItem::Event(event.clone())));
                    }
                }
                if let Some(last) = batch.events.last()
                    && last.revision() >= self.next
                {
                    self.next = last.revision() + 1;
                    self.queue.push_back(Ok(WatchItem::Progress(last.revision())));
                }
            }
            Err(RecvError::Lagged(_)) => {
                let current =
                    self.shared.index.read().unwrap_or_else(std::sync::PoisonError::into_inner).current;
                self.catch_up_to = Some(current);
            }
            Err(RecvError::Closed) => self.fail(StoreError::Closed),
        }
    }
}

/// The events under `prefix` from revision `from` up to `to` (at most [`CATCH_UP_REVISIONS`] of
/// them), read from disk, and the first revision not read.
fn catch_up(shared: &Shared, prefix: &str, from: Revision, to: Revision) -> Result<(Vec<Event>, Revision)> {
    let engine =
        |e: &dyn std::fmt::Display| StoreError::Engine(format!("reading revisions for a watch: {e}"));
    let txn = {
        // Begun under the index lock: compaction deletes records only after moving the index past
        // them, so a snapshot taken while the check below holds still has every record it needs.
        let index = shared.index.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        if from < index.compacted {
            return Err(StoreError::Compacted { requested: from, compacted: index.compacted });
        }
        shared.db.begin_read().map_err(|e| engine(&e))?
    };
    let table = txn.open_table(REVISIONS).map_err(|e| engine(&e))?;
    let last = to.min(from + CATCH_UP_REVISIONS - 1);
    let range = table_key(RecordId { revision: from, sub: 0 })..=table_key(RecordId {
        revision: last,
        sub: u32::MAX,
    });
    let mut events = Vec::new();
    let mut bytes_read = 0;
    for row in table.range(range).map_err(|e| engine(&e))? {
        let (id, bytes) = row.map_err(|e| engine(&e))?;
        let (revision, sub) = id.value();
        let id = RecordId { revision: revision as Revision, sub };
        if bytes_read > CATCH_UP_BYTES && sub == 0 {
            // A whole revision at a time: this one is read by the next step.
            return Ok((events, id.revision));
        }
        bytes_read += bytes.value().len();
        let record = Record::decode(id, bytes.value())?;
        if !record.key.starts_with(prefix) {
            continue;
        }
        let prev_kv = match record.prev {
            Some(prev) => match table.get(table_key(prev)).map_err(|e| engine(&e))? {
                Some(bytes) => put_value(Record::decode(prev, bytes.value())?),
                None => None,
            },
            None => None,
        };
        let (kind, kv) = match record.value {
            Some(value) => (EventKind::Put, key_value(&record.key, &record.entry, value)),
            None => (EventKind::Delete, deleted(&record.key, id.revision)),
        };
        events.push(Event { kind, kv, prev_kv });
    }
    Ok((events, (last + 1).max(from)))
}

fn put_value(record: Record) -> Option<KeyValue> {
    let value = record.value?;
    Some(key_value(&record.key, &record.entry, value))
}
