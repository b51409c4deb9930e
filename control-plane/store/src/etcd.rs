//! The etcd backend: [`EtcdStore`] talks to an etcd 3.4+ cluster through etcd-client, with every key
//! under a prefix of its own so several Keel clusters can share one etcd.
//!
//! - Keys: the prefix is prepended to every key sent (ranges, compares, operations, watches) and
//!   stripped from every key returned. Prefix `/cluster-a` and key `/registry/pods/x` make the etcd key
//!   `/cluster-a/registry/pods/x`; an empty prefix stores keys as given.
//! - Failures: every request is bounded by [`EtcdOptions::request_timeout`]. etcd-client balances
//!   requests over all endpoints; one that fails because a member cannot be reached (or has no leader)
//!   is sent again after a short backoff, reads after any transport failure, writes only when etcd
//!   certainly did not receive them. Other failures map to [`StoreError`] as the contract says, a
//!   transport failure or a timeout to [`StoreError::Unavailable`].
//! - Watches resume by themselves after a lost connection, at the revision after the last one
//!   received, over whichever member answers; they give up after [`WATCH_RESUME_TIMEOUT`].

mod call;
mod watch;

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client as ec;

use self::call::{About, Failure, Kind, Retry, with_retries};
pub use self::watch::RESUME_TIMEOUT as WATCH_RESUME_TIMEOUT;
use crate::error::{Result, StoreError};
use crate::types::{
    Compare, KeyValue, Lease, LeaseId, MAX_PREFIX_BYTES, OpResult, RangeRequest, RangeResponse, Revision,
    Txn, TxnOp, TxnResponse,
};
use crate::{ProgressStream, Store, validate};

/// The largest response accepted (tonic's default is 4 MiB: too small for a list or a watch batch).
const MAX_RESPONSE_BYTES: usize = 2 * 1024 * 1024 * 1024 - 1;
/// HTTP/2 pings find a dead connection while a watch waits (etcd refuses pings more often than 5 s).
const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// TLS towards etcd's client URLs (which must then be `https://`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    /// PEM file of the CA that signed the etcd members' certificates (the only CA trusted).
    pub ca_cert: PathBuf,
    /// PEM files of a client certificate and its key, for members that require one.
    pub client_cert_and_key: Option<(PathBuf, PathBuf)>,
    /// The name to verify the members' certificates against instead of each endpoint's host.
    pub domain: Option<String>,
}

/// How to reach etcd.
#[derive(Clone, PartialEq, Eq)]
pub struct EtcdOptions {
    /// Client URLs of the members (`http://127.0.0.1:2379`, `https://…` with [`EtcdOptions::tls`]).
    pub endpoints: Vec<String>,
    /// Prepended to every key: empty (keys stored as given) or an absolute path without a trailing
    /// slash, e.g. `/cluster-a`.
    pub prefix: String,
    /// TLS settings; `None` for plain `http://` endpoints.
    pub tls: Option<EtcdTls>,
    /// User name and password, when etcd's authentication is enabled.
    pub user: Option<(String, String)>,
    /// How long [`EtcdStore::connect`] tries to reach a member; also each TCP connect's timeout.
    pub dial_timeout: Duration,
    /// How long one request may take, retries included.
    pub request_timeout: Duration,
    /// How long a watch that lost its stream keeps trying to resume before it ends with
    /// [`StoreError::Unavailable`].
    pub watch_resume_timeout: Duration,
}

impl EtcdOptions {
    /// These endpoints, no prefix, no TLS, no user; 5 s to connect, 10 s per request, 30 s for a watch
    /// to resume.
    pub fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> EtcdOptions {
        EtcdOptions {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            prefix: String::new(),
            tls: None,
            user: None,
            dial_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            watch_resume_timeout: WATCH_RESUME_TIMEOUT,
        }
    }

    /// Keys go under this prefix (see [`EtcdOptions::prefix`]).
    pub fn prefix(mut self, prefix: impl Into<String>) -> EtcdOptions {
        self.prefix = prefix.into();
        self
    }

    /// Talk TLS to the members (see [`EtcdTls`]).
    pub fn tls(mut self, tls: EtcdTls) -> EtcdOptions {
        self.tls = Some(tls);
        self
    }

    /// Authenticate as this etcd user (the token is renewed by itself when it expires).
    pub fn user(mut self, name: impl Into<String>, password: impl Into<String>) -> EtcdOptions {
        self.user = Some((name.into(), password.into()));
        self
    }

    fn check(&self) -> Result<()> {
        let invalid = |reason: String| Err(StoreError::InvalidRequest(reason));
        if self.endpoints.is_empty() {
            return invalid("no etcd endpoints given".into());
        }
        let prefix = &self.prefix;
        if !prefix.is_empty() && (validate::key(prefix).is_err() || prefix.ends_with('/')) {
            return invalid(format!(
                "etcd key prefix {prefix:?} is neither empty nor an absolute path without a trailing '/'"
            ));
        }
        if prefix.len() > MAX_PREFIX_BYTES {
            return invalid(format!("etcd key prefix is {} bytes, over {MAX_PREFIX_BYTES}", prefix.len()));
        }
        if self.dial_timeout.is_zero()
            || self.request_timeout.is_zero()
            || self.watch_resume_timeout.is_zero()
        {
            return invalid("etcd dial, request and watch resume timeouts must be above zero".into());
        }
        Ok(())
    }
}

impl fmt::Debug for EtcdOptions {
    /// Everything but the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdOptions")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("tls", &self.tls)
            .field("user", &self.user.as_ref().map(|(name, _)| name))
            .field("dial_timeout", &self.dial_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("watch_resume_timeout", &self.watch_resume_timeout)
            .finish()
    }
}

/// The etcd backend of [`Store`]. Cloning it is cheap and shares the connections.
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

/// What requests and watches share.
struct Inner {
    /// Keeps the balanced channel's endpoint list alive.
    _client: ec::Client,
    kv: ec::KvClient,
    watch: ec::WatchClient,
    lease: ec::LeaseClient,
    prefix: String,
    endpoints: String,
    request_timeout: Duration,
    watch_resume_timeout: Duration,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.inner.endpoints)
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects (authenticating when a user is given) and reads the current revision, trying for up
    /// to [`EtcdOptions::dial_timeout`]: an unreachable etcd, a certificate it does not trust or
    /// refused credentials fail here, not at the first request.
    pub async fn connect(options: EtcdOptions) -> Result<EtcdStore> {
        options.check()?;
        let endpoints = options.endpoints.join(",");
        let mut connect = ec::ConnectOptions::new()
            .with_connect_timeout(options.dial_timeout)
            .with_keep_alive(KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT)
            .with_keep_alive_while_idle(true)
            // A member cut off from its leader refuses requests and ends watches instead of serving
            // stale data; requests then go to another member.
            .with_require_leader(true);
        if let Some(tls) = &options.tls {
            connect = connect.with_tls(tls_options(tls).await?);
        }
        if let Some((name, password)) = &options.user {
            connect = connect.with_user(name.as_str(), password.as_str()).with_auto_token_refresh(true);
        }
        let what = match &options.user {
            Some((name, _)) => format!("connecting to etcd at {endpoints} as user {name:?}"),
            None => format!("connecting to etcd at {endpoints}"),
        };
        // TLS failures often read as a closed connection: say what was offered.
        let tls_note = match &options.tls {
            None => String::new(),
            Some(EtcdTls { ca_cert, client_cert_and_key, .. }) => {
                let client = match client_cert_and_key {
                    Some((cert, _)) => format!("client certificate {}", cert.display()),
                    None => "no client certificate".into(),
                };
                format!(" [TLS with CA {}, {client}]", ca_cert.display())
            }
        };
        let failed = |failure: Failure| {
            let message = format!("{}{tls_note}", failure.message);
            match failure.kind {
                Kind::Invalid => StoreError::InvalidRequest(message),
                _ => StoreError::Unavailable(message),
            }
        };
        let client = with_retries(&what, options.dial_timeout, Retry::Always, || {
            ec::Client::connect(&options.endpoints, Some(connect.clone()))
        })
        .await
        .map_err(failed)?;
        let store = EtcdStore {
            inner: Arc::new(Inner {
                kv: client.kv_client().max_decoding_message_size(MAX_RESPONSE_BYTES),
                watch: client.watch_client().max_decoding_message_size(MAX_RESPONSE_BYTES),
                lease: client.lease_client(),
                _client: client,
                prefix: options.prefix,
                endpoints,
                request_timeout: options.request_timeout,
                watch_resume_timeout: options.watch_resume_timeout,
            }),
        };
        let probe = store.inner.get_revision(&what, options.dial_timeout).await;
        probe.map_err(failed)?;
        Ok(store)
    }

    /// The key prefix this store keeps its keys under.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }
}

/// Reads the PEM files of `tls`.
async fn tls_options(tls: &EtcdTls) -> Result<ec::TlsOptions> {
    let read = |what: &'static str, path: PathBuf| async move {
        tokio::fs::read(&path).await.map_err(|e| {
            StoreError::InvalidRequest(format!("reading the etcd {what} {}: {e}", path.display()))
        })
    };
    let ca = read("CA certificate", tls.ca_cert.clone()).await?;
    let mut options = ec::TlsOptions::new().ca_certificate(ec::Certificate::from_pem(ca));
    if let Some((cert, key)) = &tls.client_cert_and_key {
        let cert = read("client certificate", cert.clone()).await?;
        let key = read("client key", key.clone()).await?;
        options = options.identity(ec::Identity::from_pem(cert, key));
    }
    if let Some(domain) = &tls.domain {
        options = options.domain_name(domain.clone());
    }
    Ok(options)
}

impl Inner {
    fn full_key(&self, key: &str) -> Vec<u8> {
        let mut full = Vec::with_capacity(self.prefix.len() + key.len());
        full.extend_from_slice(self.prefix.as_bytes());
        full.extend_from_slice(key.as_bytes());
        full
    }

    /// A key as etcd returned it, without the prefix.
    fn strip(&self, key: &[u8]) -> Result<String> {
        let key = key.strip_prefix(self.prefix.as_bytes()).ok_or_else(|| {
            StoreError::Engine(format!(
                "etcd returned key {:?} outside the prefix {:?}",
                String::from_utf8_lossy(key),
                self.prefix
            ))
        })?;
        String::from_utf8(key.to_vec()).map_err(|_| {
            StoreError::Engine(format!("etcd returned key {:?}, not UTF-8", String::from_utf8_lossy(key)))
        })
    }

    fn key_value(&self, kv: &ec::KeyValue) -> Result<KeyValue> {
        Ok(KeyValue {
            key: self.strip(kv.key())?,
            value: Bytes::copy_from_slice(kv.value()),
            create_revision: kv.create_revision(),
            mod_revision: kv.mod_revision(),
            version: kv.version(),
            lease: kv.lease(),
        })
    }

    fn owned_key_value(&self, kv: ec::KeyValue) -> Result<KeyValue> {
        let (create_revision, mod_revision, version, lease) =
            (kv.create_revision(), kv.mod_revision(), kv.version(), kv.lease());
        let key = self.strip(kv.key())?;
        let (_, value) = kv.into_key_value();
        Ok(KeyValue { key, value: value.into(), create_revision, mod_revision, version, lease })
    }

    async fn call<T, F, Fut>(&self, what: &str, retry: Retry, attempt: F) -> Result<T, Failure>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ec::Error>>,
    {
        with_retries(what, self.request_timeout, retry, attempt).await
    }

    /// The current revision: a linearizable count of one key.
    async fn get_revision(&self, what: &str, timeout: Duration) -> Result<Revision, Failure> {
        let key = self.full_key("/");
        let options = ec::GetOptions::new().with_count_only();
        let response = with_retries(what, timeout, Retry::Always, || {
            let (mut kv, key, options) = (self.kv.clone(), key.clone(), options.clone());
            async move { kv.get(key, Some(options)).await }
        })
        .await?;
        Ok(header_revision(response.header()))
    }
}

fn header_revision(header: Option<&ec::ResponseHeader>) -> Revision {
    header.map_or(0, ec::ResponseHeader::revision)
}

#[async_trait]
impl Store for EtcdStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        validate::range(&request)?;
        let inner = &self.inner;
        let prefix = inner.full_key(&request.prefix);
        let mut options = ec::GetOptions::new();
        let start = if request.exact {
            prefix
        } else {
            options = options.with_range(validate::prefix_end(&prefix));
            request.from.as_deref().map_or(prefix, |from| inner.full_key(from))
        };
        if let Some(limit) = request.limit {
            options = options.with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        }
        let at = request.revision.filter(|&r| r > 0);
        if let Some(revision) = at {
            options = options.with_revision(revision);
        }
        if request.count_only {
            options = options.with_count_only();
        }
        let what = format!("etcd range {:?}", request.prefix);
        let result = inner
            .call(&what, Retry::Always, || {
                let (mut kv, start, options) = (inner.kv.clone(), start.clone(), options.clone());
                async move { kv.get(start, Some(options)).await }
            })
            .await;
        let mut response = match result {
            Ok(response) => response,
            Err(failure) => {
                return Err(inner
                    .error(failure, About { revision: at.unwrap_or(0), ..About::default() })
                    .await);
            }
        };
        let revision = at.unwrap_or_else(|| header_revision(response.header()));
        let count = usize::try_from(response.count()).unwrap_or(0);
        let kvs = response
            .take_kvs()
            .into_iter()
            .map(|kv| inner.owned_key_value(kv))
            .collect::<Result<Vec<_>>>()?;
        let returned = if request.count_only { 0 } else { kvs.len() };
        Ok(RangeResponse { more: count > returned && !request.count_only, kvs, count, revision })
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse> {
        validate::txn(&txn)?;
        let inner = &self.inner;
        let compares: Vec<ec::Compare> = txn
            .compares
            .iter()
            .map(|compare| match compare {
                Compare::Exists(key) => {
                    ec::Compare::create_revision(inner.full_key(key), ec::CompareOp::Greater, 0)
                }
                Compare::Absent(key) => {
                    ec::Compare::create_revision(inner.full_key(key), ec::CompareOp::Equal, 0)
                }
                Compare::ModRevision(key, revision) => {
                    ec::Compare::mod_revision(inner.full_key(key), ec::CompareOp::Equal, *revision)
                }
            })
            .collect();
        let ops = |ops: &[TxnOp]| -> Vec<ec::TxnOp> {
            ops.iter()
                .map(|op| match op {
                    TxnOp::Put { key, value, lease } => {
                        let options = ec::PutOptions::new().with_lease(*lease).with_prev_key();
                        ec::TxnOp::put(inner.full_key(key), value.to_vec(), Some(options))
                    }
                    TxnOp::Delete { key } => {
                        ec::TxnOp::delete(inner.full_key(key), Some(ec::DeleteOptions::new().with_prev_key()))
                    }
                    TxnOp::Get { key } => ec::TxnOp::get(inner.full_key(key), None),
                })
                .collect()
        };
        let request = ec::Txn::new().when(compares).and_then(ops(&txn.success)).or_else(ops(&txn.failure));
        let writes = txn.success.iter().chain(&txn.failure).any(|op| !matches!(op, TxnOp::Get { .. }));
        let retry = if writes { Retry::IfUnsent } else { Retry::Always };
        let what = match txn.success.first().or(txn.failure.first()) {
            Some(op) => format!("etcd transaction on {:?}", op.key()),
            None => "etcd transaction".to_owned(),
        };
        let attempt = || {
            let (mut kv, request) = (inner.kv.clone(), request.clone());
            async move { kv.txn(request).await }
        };
        let response = match inner.call(&what, retry, attempt).await {
            Ok(response) => response,
            Err(failure) => {
                let lease = txn.success.iter().chain(&txn.failure).find_map(|op| match op {
                    TxnOp::Put { lease, .. } if *lease != 0 => Some(*lease),
                    _ => None,
                });
                let size = validate::txn_bytes(&txn);
                return Err(inner
                    .error(failure, About { lease: lease.unwrap_or(0), size, ..About::default() })
                    .await);
            }
        };
        let results = response
            .op_responses()
            .into_iter()
            .map(|op| match op {
                ec::TxnOpResponse::Put(put) => {
                    Ok(OpResult::Put { prev: put.prev_key().map(|kv| inner.key_value(kv)).transpose()? })
                }
                ec::TxnOpResponse::Delete(delete) => Ok(OpResult::Delete {
                    prev: delete.prev_kvs().first().map(|kv| inner.key_value(kv)).transpose()?,
                }),
                ec::TxnOpResponse::Get(get) => {
                    Ok(OpResult::Get(get.kvs().first().map(|kv| inner.key_value(kv)).transpose()?))
                }
                ec::TxnOpResponse::Txn(_) => {
                    Err(StoreError::Engine(format!("{what}: etcd answered a nested txn")))
                }
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TxnResponse {
            succeeded: response.succeeded(),
            revision: header_revision(response.header()),
            results,
        })
    }

    async fn watch_with_progress(&self, prefix: &str, start: Option<Revision>) -> Result<ProgressStream> {
        validate::key(prefix)?;
        if start.is_some_and(|r| r < 0) {
            return Err(StoreError::InvalidRequest(format!("negative watch revision {start:?}")));
        }
        watch::watch(self.inner.clone(), prefix, start.filter(|&r| r > 0)).await
    }

    fn prompt_progress(&self) -> bool {
        false
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let inner = &self.inner;
        if revision <= 0 {
            // etcd would take it (its compacted revision starts at -1); the contract refuses it.
            let compacted = inner.compacted_after(1).await.unwrap_or(0);
            return Err(StoreError::Compacted { requested: revision, compacted });
        }
        let what = format!("etcd compaction to revision {revision}");
        let options = ec::CompactionOptions::new().with_physical();
        let result = inner
            .call(&what, Retry::IfUnsent, || {
                let (mut kv, options) = (inner.kv.clone(), options.clone());
                async move { kv.compact(revision, Some(options)).await }
            })
            .await;
        match result {
            Ok(_) => Ok(()),
            // etcd refuses a revision at or below its compacted one.
            Err(failure) if failure.kind == Kind::Compacted => {
                let compacted = inner.compacted_after(revision).await.unwrap_or(revision);
                Err(StoreError::Compacted { requested: revision, compacted })
            }
            Err(failure) => Err(inner.error(failure, About { revision, ..About::default() }).await),
        }
    }

    async fn current_revision(&self) -> Result<Revision> {
        let inner = &self.inner;
        match inner.get_revision("etcd current revision", inner.request_timeout).await {
            Ok(revision) => Ok(revision),
            Err(failure) => Err(inner.error(failure, About::default()).await),
        }
    }

    async fn grant_lease(&self, ttl: Duration) -> Result<Lease> {
        let inner = &self.inner;
        let ttl_secs = validate::lease_ttl(ttl)?;
        let what = format!("etcd lease grant ({ttl_secs} s)");
        let attempt = || {
            let mut lease = inner.lease.clone();
            async move { lease.grant(ttl_secs, None).await }
        };
        match inner.call(&what, Retry::IfUnsent, attempt).await {
            Ok(granted) if !granted.error().is_empty() => {
                Err(StoreError::Engine(format!("{what}: {}", granted.error())))
            }
            Ok(granted) => {
                Ok(Lease { id: granted.id(), ttl: Duration::from_secs(granted.ttl().unsigned_abs()) })
            }
            Err(failure) => Err(inner.error(failure, About::default()).await),
        }
    }

    async fn revoke_lease(&self, id: LeaseId) -> Result<()> {
        let inner = &self.inner;
        let what = format!("etcd lease revoke {id}");
        let attempt = || {
            let mut lease = inner.lease.clone();
            async move { lease.revoke(id).await }
        };
        match inner.call(&what, Retry::IfUnsent, attempt).await {
            Ok(_) => Ok(()),
            Err(failure) => Err(inner.error(failure, About { lease: id, ..About::default() }).await),
        }
    }

    async fn keep_alive(&self, id: LeaseId) -> Result<Duration> {
        let inner = &self.inner;
        let what = format!("etcd lease keep-alive {id}");
        let renew = || async {
            // etcd-client sends one renewal and checks its answer (lease found) but keeps its TTL to
            // itself; the granted TTL is then read, not renewed a second time.
            let mut lease = inner.lease.clone();
            lease.keep_alive(id).await?;
            let status = lease.time_to_live(id, None).await?;
            match status.granted_ttl() {
                ttl if ttl > 0 && status.ttl() > 0 => Ok(ttl),
                _ => Err(ec::Error::LeaseKeepAliveError("lease not found".into())),
            }
        };
        match inner.call(&what, Retry::Always, renew).await {
            Ok(ttl) => Ok(Duration::from_secs(ttl.unsigned_abs())),
            Err(failure) => Err(inner.error(failure, About { lease: id, ..About::default() }).await),
        }
    }
}
