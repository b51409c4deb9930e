//! The committer: one thread that owns every write. It takes all requests queued while the previous
//! commit was on disk (group commit), evaluates them in arrival order against the index plus the
//! batch's own earlier changes, writes the batch in one redb transaction with an fsync, then applies
//! it to the index, answers every writer and publishes the events. A write is acknowledged only after
//! its fsync; readers never see a change before it is durable.
//!
//! The same loop expires leases, runs scheduled compactions and deletes compacted records in chunks
//! between batches, so no other thread ever waits on redb's write lock.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use redb::{Database, Durability};
use tokio::sync::{broadcast, oneshot};

use super::disk::{LEASES, META, REVISIONS, Record, table_key};
use super::index::{Change, Entry, Index, RecordId, key_value};
use crate::error::{Result, StoreError};
use crate::types::{
    Compare, Event, EventKind, KeyValue, Lease, LeaseId, OpResult, Revision, Txn, TxnOp, TxnResponse,
};

/// The most requests one group commit takes.
const MAX_BATCH: usize = 1024;
/// A group commit stops taking requests once they carry this many bytes.
const MAX_BATCH_BYTES: usize = 64 * 1024 * 1024;
/// The most compacted records deleted per commit, so a large compaction never stalls writers.
const GARBAGE_CHUNK: usize = 4096;

/// A request to the committer, with where to answer.
#[derive(Debug)]
pub(crate) enum Request {
    Txn { txn: Txn, reply: oneshot::Sender<Result<TxnResponse>> },
    GrantLease { ttl_secs: i64, reply: oneshot::Sender<Result<Lease>> },
    RevokeLease { id: LeaseId, reply: oneshot::Sender<Result<()>> },
    Compact { revision: Revision, reply: oneshot::Sender<Result<()>> },
}

impl Request {
    /// Roughly what the request holds in memory: its keys and values.
    fn bytes(&self) -> usize {
        match self {
            Request::Txn { txn, .. } => txn
                .success
                .iter()
                .chain(&txn.failure)
                .map(|op| op.key().len() + if let TxnOp::Put { value, .. } = op { value.len() } else { 0 })
                .sum(),
            _ => 0,
        }
    }
}

/// The changes of one group commit, in revision order, as watchers receive them.
#[derive(Debug)]
pub(crate) struct Batch {
    pub events: Vec<Event>,
}

/// A granted lease as the committer tracks it.
#[derive(Debug)]
pub(crate) struct LeaseState {
    pub ttl_secs: i64,
    pub deadline: Instant,
    pub keys: HashSet<String>,
}

/// What the store handle, the watches and the committer share.
pub(crate) struct Shared {
    /// Written only by the committer, after each commit; read by every range and watch.
    pub index: RwLock<Index>,
    pub db: Database,
    /// Taken (dropped) by the committer when it stops, which ends every watch.
    pub events: Mutex<Option<broadcast::Sender<Arc<Batch>>>>,
    /// Written by the committer (grants, revokes, attached keys) and by keep-alives (deadlines).
    pub leases: Mutex<HashMap<LeaseId, LeaseState>>,
    /// Set after the engine failed: the store then refuses writes until reopened.
    pub failed: Mutex<Option<StoreError>>,
    /// Durable commits made, and transactions acknowledged by them (group commit shares one among many).
    pub commits: AtomicU64,
    pub transactions: AtomicU64,
}

impl std::fmt::Debug for Shared {
    /// Never the data: Secrets live in the index.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// When the committer compacts on its own.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Schedule {
    /// Every interval, compact to the revision that was current one interval before (as
    /// kube-apiserver does with etcd); `None` leaves compaction to callers.
    pub compaction_interval: Option<Duration>,
}

/// Ends every watch when the committer stops, also when it panics: their broadcast sender goes.
struct CloseWatches<'a>(&'a Shared);

impl Drop for CloseWatches<'_> {
    fn drop(&mut self) {
        lock(&self.0.events).take();
    }
}

/// Runs until every request sender is gone.
pub(crate) fn run(
    shared: &Shared,
    requests: &Receiver<Request>,
    mut garbage: Vec<RecordId>,
    schedule: Schedule,
) {
    let _close_watches = CloseWatches(shared);
    let mut next_lease_id = initial_lease_id();
    let mut compaction = schedule.compaction_interval.map(|every| (after(every), 0));
    loop {
        let failed = lock(&shared.failed).clone();
        if let Some(error) = failed {
            // After an engine failure only requests matter: each is refused.
            match requests.recv() {
                Ok(request) => refuse(vec![request], &error),
                Err(_) => break,
            }
            continue;
        }
        let now = Instant::now();
        let mut wake = now + Duration::from_secs(1);
        if let Some((at, _)) = compaction {
            wake = wake.min(at);
        }
        if let Some(deadline) = lock(&shared.leases).values().map(|l| l.deadline).min() {
            wake = wake.min(deadline);
        }
        if !garbage.is_empty() {
            wake = now;
        }
        let mut batch = Vec::new();
        match requests.recv_timeout(wake.saturating_duration_since(now)) {
            Ok(request) => batch.push(request),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        let mut bytes = batch.iter().map(Request::bytes).sum::<usize>();
        while batch.len() < MAX_BATCH && bytes < MAX_BATCH_BYTES {
            match requests.try_recv() {
                Ok(request) => {
                    bytes += request.bytes();
                    batch.push(request);
                }
                Err(_) => break,
            }
        }
        if let Some((at, target)) = &mut compaction
            && Instant::now() >= *at
        {
            let (current, compacted) = {
                let index = read(&shared.index);
                (index.current, index.compacted)
            };
            if *target > compacted {
                let (reply, _ignored) = oneshot::channel();
                batch.push(Request::Compact { revision: *target, reply });
            }
            *target = current;
            *at = after(schedule.compaction_interval.unwrap_or_default());
        }
        let expiring = lock(&shared.leases).values().any(|lease| lease.deadline <= Instant::now());
        if batch.is_empty() && !expiring && garbage.is_empty() {
            continue;
        }
        commit(shared, batch, &mut garbage, &mut next_lease_id);
    }
}

/// `now + ttl`, or as far as the clock goes.
pub(crate) fn after(ttl: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(ttl).unwrap_or_else(|| now + Duration::from_secs(u64::from(u32::MAX)))
}

fn read(index: &RwLock<Index>) -> std::sync::RwLockReadGuard<'_, Index> {
    index.read().unwrap_or_else(PoisonError::into_inner)
}

fn initial_lease_id() -> LeaseId {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(1);
    // Positive, spread like etcd's ids, and far from overflowing when incremented.
    ((nanos as i64) & 0x3fff_ffff_ffff_ffff).max(1)
}

fn refuse(batch: Vec<Request>, error: &StoreError) {
    for request in batch {
        // A writer that stopped waiting has nobody to tell.
        let _gone = match request {
            Request::Txn { reply, .. } => reply.send(Err(error.clone())).is_err(),
            Request::GrantLease { reply, .. } => reply.send(Err(error.clone())).is_err(),
            Request::RevokeLease { reply, .. } => reply.send(Err(error.clone())).is_err(),
            Request::Compact { reply, .. } => reply.send(Err(error.clone())).is_err(),
        };
    }
}

/// An answer to send once the batch is durable.
enum Reply {
    Txn(oneshot::Sender<Result<TxnResponse>>, Result<TxnResponse>),
    Lease(oneshot::Sender<Result<Lease>>, Result<Lease>),
    Done(oneshot::Sender<Result<()>>, Result<()>),
}

/// The batch being evaluated: its changes on top of the index.
struct Pending<'a> {
    index: &'a Index,
    /// The latest state of every key this batch changed (`None`: deleted), with its record id.
    overlay: HashMap<String, Option<(KeyValue, u32)>>,
    revision: Revision,
    compacted: Revision,
    records: Vec<Record>,
    events: Vec<Event>,
    granted: Vec<(LeaseId, i64)>,
    revoked: Vec<LeaseId>,
    /// Keys this batch put with a lease, by lease (the lease's key set learns them after the commit).
    leased: HashMap<LeaseId, Vec<String>>,
    compact_to: Option<Revision>,
}

impl Pending<'_> {
    fn lookup(&self, key: &str) -> Option<(KeyValue, u32)> {
        match self.overlay.get(key) {
            Some(state) => state.clone(),
            None => self.index.latest_with_sub(key),
        }
    }

    /// The key's mod_revision if it exists, without copying it.
    fn mod_revision(&self, key: &str) -> Option<Revision> {
        match self.overlay.get(key) {
            Some(state) => state.as_ref().map(|(kv, _)| kv.mod_revision),
            None => self.index.latest_entry(key).filter(|e| !e.is_tombstone()).map(|e| e.id.revision),
        }
    }

    fn holds(&self, compare: &Compare) -> bool {
        let current = self.mod_revision(compare.key());
        match compare {
            Compare::Exists(_) => current.is_some(),
            Compare::Absent(_) => current.is_none(),
            Compare::ModRevision(_, revision) => current.unwrap_or(0) == *revision,
        }
    }

    /// Applies `ops` at revision `self.revision + 1` if any of them changes something.
    fn apply(&mut self, ops: Vec<TxnOp>) -> Vec<OpResult> {
        let revision = self.revision + 1;
        let mut sub = 0;
        let mut results = Vec::with_capacity(ops.len());
        for op in ops {
            match op {
                TxnOp::Get { key } => results.push(OpResult::Get(self.lookup(&key).map(|(kv, _)| kv))),
                TxnOp::Put { key, value, lease } => {
                    let prev = self.lookup(&key);
                    let entry = Entry {
                        id: RecordId { revision, sub },
                        create_revision: prev.as_ref().map_or(revision, |(kv, _)| kv.create_revision),
                        version: prev.as_ref().map_or(1, |(kv, _)| kv.version + 1),
                        lease,
                    };
                    self.change(key, entry, Some(value), prev.clone());
                    results.push(OpResult::Put { prev: prev.map(|(kv, _)| kv) });
                    sub += 1;
                }
                TxnOp::Delete { key } => {
                    let prev = self.lookup(&key);
                    if prev.is_some() {
                        let entry = Entry {
                            id: RecordId { revision, sub },
                            create_revision: 0,
                            version: 0,
                            lease: 0,
                        };
                        self.change(key, entry, None, prev.clone());
                        sub += 1;
                    }
                    results.push(OpResult::Delete { prev: prev.map(|(kv, _)| kv) });
                }
            }
        }
        if sub > 0 {
            self.revision = revision;
        }
        results
    }

    fn change(&mut self, key: String, entry: Entry, value: Option<Bytes>, prev: Option<(KeyValue, u32)>) {
        let prev_id = prev.as_ref().map(|(kv, sub)| RecordId { revision: kv.mod_revision, sub: *sub });
        let (kind, kv) = match &value {
            Some(value) => (EventKind::Put, key_value(&key, &entry, value.clone())),
            None => (EventKind::Delete, deleted(&key, entry.id.revision)),
        };
        self.overlay.insert(key.clone(), value.is_some().then(|| (kv.clone(), entry.id.sub)));
        if value.is_some() && entry.lease != 0 {
            self.leased.entry(entry.lease).or_default().push(key.clone());
        }
        self.events.push(Event { kind, kv, prev_kv: prev.map(|(kv, _)| kv) });
        self.records.push(Record { key, entry, value, prev: prev_id });
    }

    fn txn(&mut self, txn: Txn, leases: &HashMap<LeaseId, LeaseState>) -> Result<TxnResponse> {
        let succeeded = txn.compares.iter().all(|c| self.holds(c));
        let ops = if succeeded { txn.success } else { txn.failure };
        for op in &ops {
            if let TxnOp::Put { lease, .. } = op
                && *lease != 0
                && (!leases.contains_key(lease) || self.revoked.contains(lease))
            {
                return Err(StoreError::LeaseNotFound { id: *lease });
            }
        }
        let results = self.apply(ops);
        Ok(TxnResponse { succeeded, revision: self.revision, results })
    }

    /// Deletes the lease's keys in one revision.
    fn revoke(&mut self, id: LeaseId, leases: &HashMap<LeaseId, LeaseState>) -> Result<()> {
        let lease = leases.get(&id).filter(|_| !self.revoked.contains(&id));
        let lease = lease.ok_or(StoreError::LeaseNotFound { id })?;
        let mut keys: Vec<String> = lease.keys.iter().cloned().collect();
        keys.extend(self.leased.get(&id).into_iter().flatten().cloned());
        keys.sort();
        keys.dedup();
        let ops = keys
            .into_iter()
            .filter(|key| self.lookup(key).is_some_and(|(kv, _)| kv.lease == id))
            .map(TxnOp::delete)
            .collect();
        self.apply(ops);
        self.revoked.push(id);
        Ok(())
    }

    fn compact(&mut self, revision: Revision) -> Result<()> {
        let compacted = self.compact_to.unwrap_or(self.compacted);
        if revision <= compacted {
            return Err(StoreError::Compacted { requested: revision, compacted });
        }
        if revision > self.revision {
            return Err(StoreError::FutureRevision { requested: revision, current: self.revision });
        }
        self.compact_to = Some(revision);
        Ok(())
    }
}

/// What a watch sees of a deleted key.
pub(crate) fn deleted(key: &str, revision: Revision) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Bytes::new(),
        create_revision: 0,
        mod_revision: revision,
        version: 0,
        lease: 0,
    }
}

fn commit(shared: &Shared, batch: Vec<Request>, garbage: &mut Vec<RecordId>, next_lease_id: &mut LeaseId) {
    let index = read(&shared.index);
    let leases = lock(&shared.leases);
    let mut pending = Pending {
        index: &index,
        overlay: HashMap::new(),
        revision: index.current,
        compacted: index.compacted,
        records: Vec::new(),
        events: Vec::new(),
        granted: Vec::new(),
        revoked: Vec::new(),
        leased: HashMap::new(),
        compact_to: None,
    };
    let mut replies = Vec::with_capacity(batch.len());
    // Read under the lease lock keep-alives take: a lease renewed in time is not revoked.
    let now = Instant::now();
    let mut expired: Vec<LeaseId> =
        leases.iter().filter(|(_, lease)| lease.deadline <= now).map(|(id, _)| *id).collect();
    expired.sort_unstable();
    for id in expired {
        let _already_revoked = pending.revoke(id, &leases);
    }
    for request in batch {
        match request {
            Request::Txn { txn, reply } => {
                let result = pending.txn(txn, &leases);
                replies.push(Reply::Txn(reply, result));
            }
            Request::GrantLease { ttl_secs, reply } => {
                while leases.contains_key(next_lease_id) {
                    *next_lease_id += 1;
                }
                let id = *next_lease_id;
                *next_lease_id += 1;
                pending.granted.push((id, ttl_secs));
                let ttl = Duration::from_secs(ttl_secs.unsigned_abs());
                replies.push(Reply::Lease(reply, Ok(Lease { id, ttl })));
            }
            Request::RevokeLease { id, reply } => {
                let result = pending.revoke(id, &leases);
                replies.push(Reply::Done(reply, result));
            }
            Request::Compact { revision, reply } => {
                let result = pending.compact(revision);
                replies.push(Reply::Done(reply, result));
            }
        }
    }
    drop(leases);
    let Pending { records, events, granted, revoked, compact_to, revision, .. } = pending;
    drop(index);

    let chunk: Vec<RecordId> = garbage.drain(..garbage.len().min(GARBAGE_CHUNK)).collect();
    let durable = is_durable(&records, &granted, &revoked, compact_to);
    let written = write(&shared.db, &records, &granted, &revoked, compact_to, &chunk);
    if let Err(error) = written {
        let error = StoreError::Engine(format!("committing revision {revision}: {error}"));
        tracing::error!(%error, "the embedded store stops accepting writes");
        *lock(&shared.failed) = Some(error.clone());
        // No further events will come: watches end (with `Closed`) rather than wait forever.
        lock(&shared.events).take();
        garbage.extend(chunk);
        for reply in replies {
            send(reply, Some(&error));
        }
        return;
    }

    {
        let mut index = shared.index.write().unwrap_or_else(PoisonError::into_inner);
        let mut leases = lock(&shared.leases);
        for record in records {
            if let Some(prev) = index.latest(&record.key)
                && prev.lease != 0
                && let Some(lease) = leases.get_mut(&prev.lease)
            {
                lease.keys.remove(&record.key);
            }
            if record.value.is_some()
                && record.entry.lease != 0
                && let Some(lease) = leases.get_mut(&record.entry.lease)
            {
                lease.keys.insert(record.key.clone());
            }
            index.apply(Change { key: record.key, entry: record.entry, value: record.value });
        }
        index.current = revision;
        for id in revoked {
            leases.remove(&id);
        }
        for (id, ttl_secs) in granted {
            let deadline = after(Duration::from_secs(ttl_secs.unsigned_abs()));
            leases.insert(id, LeaseState { ttl_secs, deadline, keys: HashSet::new() });
        }
        if let Some(to) = compact_to {
            garbage.extend(index.compact(to));
        }
    }
    if durable {
        shared.commits.fetch_add(1, Ordering::Relaxed);
    }
    let transactions = replies.iter().filter(|reply| matches!(reply, Reply::Txn(..))).count();
    shared.transactions.fetch_add(transactions as u64, Ordering::Relaxed);
    for reply in replies {
        send(reply, None);
    }
    if !events.is_empty()
        && let Some(sender) = lock(&shared.events).as_ref()
    {
        // No receiver means no watch: nothing to deliver.
        let _no_watchers = sender.send(Arc::new(Batch { events }));
    }
}

fn send(reply: Reply, error: Option<&StoreError>) {
    // A writer that stopped waiting has nobody to tell; its write stands, as with etcd.
    let _gone = match reply {
        Reply::Txn(to, result) => to.send(error.map_or(result, |e| Err(e.clone()))).is_err(),
        Reply::Lease(to, result) => to.send(error.map_or(result, |e| Err(e.clone()))).is_err(),
        Reply::Done(to, result) => to.send(error.map_or(result, |e| Err(e.clone()))).is_err(),
    };
}

/// Whether a batch changes what must survive a crash (otherwise it only deletes compacted records).
fn is_durable(
    records: &[Record],
    granted: &[(LeaseId, i64)],
    revoked: &[LeaseId],
    compact_to: Option<Revision>,
) -> bool {
    !records.is_empty() || !granted.is_empty() || !revoked.is_empty() || compact_to.is_some()
}

/// One redb transaction, fsynced before it returns.
fn write(
    db: &Database,
    records: &[Record],
    granted: &[(LeaseId, i64)],
    revoked: &[LeaseId],
    compact_to: Option<Revision>,
    garbage: &[RecordId],
) -> Result<(), redb::Error> {
    let mut txn = db.begin_write()?;
    let durable = is_durable(records, granted, revoked, compact_to);
    // Garbage alone need not be durable now: if it is lost, the next open finds it again.
    txn.set_durability(if durable { Durability::Immediate } else { Durability::None })?;
    // Only the tables this batch changes are opened: an opened table is rewritten at commit.
    if !records.is_empty() || !garbage.is_empty() {
        let mut table = txn.open_table(REVISIONS)?;
        for record in records {
            table.insert(table_key(record.entry.id), record.encode().as_slice())?;
        }
        for id in garbage {
            table.remove(table_key(*id))?;
        }
    }
    if let Some(to) = compact_to {
        txn.open_table(META)?.insert("compacted", to.to_le_bytes().as_slice())?;
    }
    if !granted.is_empty() || !revoked.is_empty() {
        let mut leases = txn.open_table(LEASES)?;
        for (id, ttl) in granted {
            leases.insert(id, ttl)?;
        }
        for id in revoked {
            leases.remove(id)?;
        }
    }
    txn.commit()?;
    Ok(())
}
