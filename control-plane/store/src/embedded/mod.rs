//! The embedded store, Keel's default: a data directory holding one redb file, an in-memory index of
//! every key's revisions (latest values in memory, older ones on disk), one committer thread doing group
//! commits, and watches fed in process.

mod commit;
mod disk;
mod index;
mod watch;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use redb::ReadableDatabase;
use tokio::sync::{broadcast, oneshot};

use self::commit::{LeaseState, Request, Schedule, Shared, lock};
use self::disk::{REVISIONS, Record, table_key};
use self::index::{Found, key_value};
use crate::error::{Result, StoreError};
use crate::types::{Lease, LeaseId, RangeRequest, RangeResponse, Revision, Txn, TxnResponse};
use crate::{ProgressStream, Store, validate};

/// How many group commits a watch may fall behind before it reads the missed ones from disk.
const WATCH_BUFFER: usize = 1024;
/// How many requests may wait for the committer before writers wait to enqueue.
const QUEUE: usize = 16 * 1024;

/// Counters of the committer (see [`EmbeddedStore::commit_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitStats {
    pub commits: u64,
    pub transactions: u64,
}

/// How to open an embedded store.
#[derive(Debug, Clone)]
pub struct Options {
    pub data_dir: PathBuf,
    /// redb's page cache.
    pub cache_bytes: usize,
    /// Compact on a schedule: every interval, to the revision current one interval before (the
    /// kube-apiserver default is 5 minutes). `None`: only when asked.
    pub compaction_interval: Option<Duration>,
}

impl Options {
    pub fn new(data_dir: impl Into<PathBuf>) -> Options {
        Options {
            data_dir: data_dir.into(),
            cache_bytes: 256 * 1024 * 1024,
            compaction_interval: Some(Duration::from_secs(300)),
        }
    }
}

/// The embedded store. Dropping it stops the committer after the batch in flight; the data directory
/// is released once every watch of it is dropped too.
pub struct EmbeddedStore {
    shared: Arc<Shared>,
    requests: Option<SyncSender<Request>>,
    committer: Option<JoinHandle<()>>,
    data_dir: PathBuf,
}

impl EmbeddedStore {
    /// Opens the data directory (creating it when missing) and loads it. Refuses a directory that is
    /// foreign, corrupted or open in another process, leaving it untouched.
    pub fn open(options: Options) -> Result<EmbeddedStore> {
        let loaded = disk::open(&options.data_dir, options.cache_bytes)?;
        let mut leases: HashMap<LeaseId, LeaseState> = loaded
            .leases
            .iter()
            .map(|&(id, ttl_secs)| {
                // As etcd does on a restart, every lease gets its whole TTL again.
                let deadline = commit::after(Duration::from_secs(ttl_secs.unsigned_abs()));
                (id, LeaseState { ttl_secs, deadline, keys: Default::default() })
            })
            .collect();
        for (key, id) in loaded.index.leased_keys() {
            if let Some(lease) = leases.get_mut(&id) {
                lease.keys.insert(key.to_owned());
            }
        }
        let (events, _) = broadcast::channel(WATCH_BUFFER);
        let shared = Arc::new(Shared {
            index: loaded.index.into(),
            db: loaded.db,
            events: Mutex::new(Some(events)),
            leases: Mutex::new(leases),
            failed: Mutex::new(None),
            commits: Default::default(),
            transactions: Default::default(),
        });
        let (requests, receiver) = mpsc::sync_channel(QUEUE);
        let schedule = Schedule { compaction_interval: options.compaction_interval };
        let committer = std::thread::Builder::new()
            .name("keel-store-commit".into())
            .spawn({
                let shared = shared.clone();
                let garbage = loaded.garbage;
                move || commit::run(&shared, &receiver, garbage, schedule)
            })
            .map_err(|e| StoreError::Engine(format!("starting the committer thread: {e}")))?;
        Ok(EmbeddedStore {
            shared,
            requests: Some(requests),
            committer: Some(committer),
            data_dir: options.data_dir,
        })
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// How many durable commits the store has made since it was opened, and how many transactions
    /// they acknowledged: with concurrent writers, group commit makes the first far smaller.
    pub fn commit_stats(&self) -> CommitStats {
        CommitStats {
            commits: self.shared.commits.load(std::sync::atomic::Ordering::Relaxed),
            transactions: self.shared.transactions.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    async fn request<T>(&self, make: impl FnOnce(oneshot::Sender<Result<T>>) -> Request) -> Result<T> {
        let (reply, answer) = oneshot::channel();
        let requests = self.requests.as_ref().ok_or(StoreError::Closed)?;
        // A full queue makes this writer wait briefly for room, off the async threads.
        let request = make(reply);
        match requests.try_send(request) {
            Ok(()) => {}
            Err(mpsc::TrySendError::Full(request)) => {
                let requests = requests.clone();
                tokio::task::spawn_blocking(move || requests.send(request))
                    .await
                    .map_err(|_| StoreError::Closed)?
                    .map_err(|_| StoreError::Closed)?;
            }
            Err(mpsc::TrySendError::Disconnected(_)) => return Err(StoreError::Closed),
        }
        answer.await.map_err(|_| StoreError::Closed)?
    }

    /// Reads a range from the index; what only the disk holds (older revisions) comes back as a
    /// [`DiskRead`] to finish off the async threads.
    fn read_range(&self, request: &RangeRequest) -> Result<Result<RangeResponse, DiskRead>> {
        let index = self.shared.index.read().unwrap_or_else(PoisonError::into_inner);
        let revision = match request.revision {
            None | Some(0) => index.current,
            Some(revision) if revision < index.compacted => {
                return Err(StoreError::Compacted { requested: revision, compacted: index.compacted });
            }
            Some(revision) if revision > index.current => {
                return Err(StoreError::FutureRevision { requested: revision, current: index.current });
            }
            Some(revision) => revision,
        };
        let limit = request.limit.unwrap_or(usize::MAX);
        let mut found = Vec::new();
        let mut count = 0;
        index.range(&request.prefix, request.exact, request.from.as_deref(), revision, |item| {
            if !request.count_only && found.len() < limit {
                found.push(item);
            }
            count += 1;
            true
        });
        let more = !request.count_only && count > found.len();
        if found.iter().any(|f| matches!(f, Found::OnDisk { .. })) {
            // Begun under the index lock, like a watch's catch-up: the snapshot holds every record the
            // index named, even if a compaction deletes it meanwhile.
            let txn = self.shared.db.begin_read().map_err(engine)?;
            return Ok(Err(DiskRead { txn, found, more, count, revision }));
        }
        let kvs = found.into_iter().filter_map(|f| if let Found::Ready(kv) = f { Some(kv) } else { None });
        Ok(Ok(RangeResponse { kvs: kvs.collect(), more, count, revision }))
    }
}

/// A range whose older revisions are still to be read from disk, in the snapshot `txn`.
struct DiskRead {
    txn: redb::ReadTransaction,
    found: Vec<Found>,
    more: bool,
    count: usize,
    revision: Revision,
}

impl DiskRead {
    fn finish(self) -> Result<RangeResponse> {
        let table = self.txn.open_table(REVISIONS).map_err(engine)?;
        let mut kvs = Vec::with_capacity(self.found.len());
        for item in self.found {
            kvs.push(match item {
                Found::Ready(kv) => kv,
                Found::OnDisk { key, entry } => {
                    let bytes = table
                        .get(table_key(entry.id))
                        .map_err(engine)?
                        .ok_or_else(|| engine(format!("record {:?} of {key} is missing", entry.id)))?;
                    let record = Record::decode(entry.id, bytes.value())?;
                    key_value(&key, &entry, record.value.unwrap_or_default())
                }
            });
        }
        Ok(RangeResponse { kvs, more: self.more, count: self.count, revision: self.revision })
    }
}

impl std::fmt::Debug for EmbeddedStore {
    /// Where it stands, never what it holds (Secrets live here).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (current, compacted) = {
            let index = self.shared.index.read().unwrap_or_else(PoisonError::into_inner);
            (index.current, index.compacted)
        };
        f.debug_struct("EmbeddedStore")
            .field("data_dir", &self.data_dir)
            .field("revision", &current)
            .field("compacted", &compacted)
            .finish_non_exhaustive()
    }
}

fn engine(error: impl std::fmt::Display) -> StoreError {
    StoreError::Engine(error.to_string())
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        self.requests.take();
        if let Some(committer) = self.committer.take() {
            // The committer ends after its batch in flight; a panic there was already reported.
            let _ended = committer.join();
        }
    }
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        validate::range(&request)?;
        match self.read_range(&request)? {
            Ok(response) => Ok(response),
            Err(disk) => tokio::task::spawn_blocking(move || disk.finish())
                .await
                .map_err(|e| StoreError::Engine(format!("reading older revisions: {e}")))?,
        }
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        validate::txn(&txn)?;
        self.request(|reply| Request::Txn { txn, reply }).await
    }

    async fn watch_with_progress(&self, prefix: &str, start: Option<Revision>) -> Result<ProgressStream> {
        validate::key(prefix)?;
        if start.is_some_and(|r| r < 0) {
            return Err(StoreError::InvalidRequest(format!("negative watch revision {start:?}")));
        }
        Ok(watch::watch(self.shared.clone(), prefix.to_owned(), start.filter(|&r| r > 0)))
    }

    fn prompt_progress(&self) -> bool {
        true
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.request(|reply| Request::Compact { revision, reply }).await
    }

    async fn current_revision(&self) -> Result<Revision> {
        Ok(self.shared.index.read().unwrap_or_else(PoisonError::into_inner).current)
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease> {
        let ttl_secs = validate::lease_ttl(ttl)?;
        self.request(|reply| Request::GrantLease { ttl_secs, reply }).await
    }

    async fn revoke_lease(&self, id: LeaseId) -> Result<()> {
        self.request(|reply| Request::RevokeLease { id, reply }).await
    }

    async fn keep_alive(&self, id: LeaseId) -> Result<Duration> {
        let mut leases = lock(&self.shared.leases);
        // Past its deadline a lease is gone, even if the committer has not revoked it yet.
        let lease = leases.get_mut(&id).filter(|lease| lease.deadline > Instant::now());
        let lease = lease.ok_or(StoreError::LeaseNotFound { id })?;
        let ttl = Duration::from_secs(lease.ttl_secs.unsigned_abs());
        lease.deadline = commit::after(ttl);
        Ok(ttl)
    }
}
