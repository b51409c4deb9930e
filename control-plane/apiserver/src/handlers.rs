//! The verbs on resources, over the store: get, list (limit/continue, at a resourceVersion), watch
//! (from a resourceVersion, or the current state first), create, update (optimistic concurrency on
//! resourceVersion) and delete. JSON only in this slice.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use futures::Stream;
use keel_api::resources::{self, Resource};
use keel_api::status::ApiError;
use keel_api::strategy;
use keel_store::{Compare, OpResult, Outcome, RangeRequest, Store, StoreError, Txn, TxnOp};
use serde_json::{Value, json};

use crate::cache::{self, Cache, Change, Entry, WatchCache};
use crate::context::Context;
use crate::filter::Filter;
use crate::objects;
use crate::request::ResourceRequest;
use crate::watch::{Feed, Start, Watcher};

/// What a handler answers: a status code and a JSON body, or a stream of watch events.
pub enum Reply {
    Json(u16, Value),
    /// A JSON body already serialized (large lists, served without parsing every object).
    Raw(u16, Bytes),
    Watch(std::pin::Pin<Box<dyn Stream<Item = Bytes> + Send>>),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Json(code, _) => write!(f, "Reply::Json({code})"),
            Reply::Raw(code, body) => write!(f, "Reply::Raw({code}, {} bytes)", body.len()),
            Reply::Watch(_) => write!(f, "Reply::Watch"),
        }
    }
}

/// Query parameters the handlers read.
#[derive(Debug, Default)]
pub struct Query {
    pub resource_version: Option<String>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub timeout_seconds: Option<u64>,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub resource_version_match: Option<String>,
    /// `sendInitialEvents`, when given.
    pub send_initial_events: Option<bool>,
    pub allow_watch_bookmarks: bool,
    /// `dryRun=All`: everything but the write.
    pub dry_run: bool,
    pub grace_period_seconds: Option<i64>,
    pub propagation_policy: Option<String>,
}

impl Query {
    pub fn parse(query: Option<&str>) -> Result<Query, ApiError> {
        let mut parsed = Query::default();
        for pair in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value);
            match key {
                "resourceVersion" => parsed.resource_version = Some(value).filter(|v| !v.is_empty()),
                "limit" => {
                    let limit: usize = value
                        .parse()
                        .map_err(|_| ApiError::BadRequest(format!("invalid limit {value:?}")))?;
                    parsed.limit = Some(limit).filter(|&l| l > 0);
                }
                "continue" => parsed.continue_token = Some(value).filter(|v| !v.is_empty()),
                "labelSelector" => parsed.label_selector = Some(value),
                "sendInitialEvents" => parsed.send_initial_events = Some(crate::request::query_bool(&value)),
                "allowWatchBookmarks" => parsed.allow_watch_bookmarks = crate::request::query_bool(&value),
                "resourceVersionMatch" => {
                    parsed.resource_version_match = Some(value).filter(|v| !v.is_empty());
                }
                "dryRun" => match value.as_str() {
                    "All" => parsed.dry_run = true,
                    "" => {}
                    other => {
                        return Err(ApiError::BadRequest(format!(
                            "unsupported dryRun value {other:?}: only All is"
                        )));
                    }
                },
                "gracePeriodSeconds" => {
                    parsed.grace_period_seconds = Some(value.parse().map_err(|_| {
                        ApiError::BadRequest(format!("invalid gracePeriodSeconds {value:?}"))
                    })?);
                }
                "propagationPolicy" => parsed.propagation_policy = Some(value),
                "fieldSelector" => parsed.field_selector = Some(value),
                "timeoutSeconds" => {
                    parsed.timeout_seconds =
                        Some(value.parse().map_err(|_| {
                            ApiError::BadRequest(format!("invalid timeoutSeconds {value:?}"))
                        })?);
                }
                _ => {}
            }
        }
        Ok(parsed)
    }
}

pub(crate) fn percent_decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The store's errors as the API answers them.
pub fn store_error(error: StoreError) -> ApiError {
    match error {
        StoreError::Compacted { requested, compacted } => {
            ApiError::Expired(format!("too old resource version: {requested} ({compacted})"))
        }
        StoreError::FutureRevision { .. } => ApiError::Timeout("Too large resource version".into()),
        StoreError::RequestTooLarge { size, limit } => ApiError::RequestEntityTooLarge(format!(
            "the object is {size} bytes, over the {limit}-byte limit"
        )),
        StoreError::InvalidKey { key, reason } => {
            ApiError::BadRequest(format!("invalid name for key {key:?}: {reason}"))
        }
        StoreError::Unavailable(reason) => ApiError::ServiceUnavailable(reason),
        other => ApiError::Internal(other.to_string()),
    }
}

pub(crate) fn parse_revision(value: &str) -> Result<i64, ApiError> {
    value.parse::<i64>().ok().filter(|r| *r >= 0).ok_or_else(|| {
        ApiError::BadRequest(format!(
            "invalid resource version {value:?}: a non-negative integer is expected"
        ))
    })
}

/// Where an object of `request` lives, and the prefix of its collection.
pub(crate) fn collection_prefix(resource: &Resource, namespace: Option<&str>) -> String {
    match namespace {
        Some(namespace) if resource.namespaced => format!("{}{namespace}/", resource.key_prefix()),
        _ => resource.key_prefix(),
    }
}

/// How many times a write retries on a concurrent change.
pub(crate) const RETRIES: usize = 5;

/// An object as read before an update: parsed, as stored, and the revision the write is guarded by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Prior<'a> {
    pub object: &'a Value,
    pub stored: &'a [u8],
    pub revision: i64,
}

/// The server's handle on the store and the watch cache.
#[derive(Debug, Clone)]
pub struct Handlers {
    pub store: Arc<dyn Store>,
    pub cache: Arc<WatchCache>,
    pub services: crate::services::ServiceRanges,
    /// The server's authorizer, for the checks writes make of their writer (RBAC escalation).
    pub authorizer: Arc<crate::authorization::Authorizer>,
    /// The CRDs this server's controllers serve ([`crate::crd::Served`]).
    pub crds_served: crate::crd::Served,
}

/// How current a read must be, by kube-apiserver's resourceVersion rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// No resourceVersion: the latest, consistently.
    Consistent,
    /// "0": whatever is at hand.
    Any,
    /// N with NotOlderThan (or no match, without a limit): the latest, which must be at least N.
    NotOlderThan(i64),
    /// N with Exact (or, as the legacy rule has it, with a limit and no match): exactly N.
    Exact(i64),
}

impl Handlers {
    pub async fn get(&self, request: &ResourceRequest, name: &str) -> Result<Reply, ApiError> {
        let resource = request.resource;
        let key = objects::key(resource, request.namespace.as_deref(), name);
        let kv = self.store.get(&key).await.map_err(store_error)?;
        let kv = kv.ok_or_else(|| ApiError::not_found(resource.group, resource.plural, name))?;
        Ok(Reply::Json(200, objects::served(resource, &kv.value, kv.mod_revision)?))
    }

    /// What a list asks for, checked as upstream's ValidateListOptions does.
    fn list_read(query: &Query) -> Result<Read, ApiError> {
        if query.send_initial_events.is_some() {
            return Err(ApiError::invalid_query(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            ));
        }
        let rv = query.resource_version.as_deref();
        match (rv, query.resource_version_match.as_deref()) {
            (None, Some(_)) => Err(ApiError::invalid_query(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            )),
            (Some(_), Some(_)) if query.continue_token.is_some() => Err(ApiError::invalid_query(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            )),
            (Some("0"), Some("Exact")) => Err(ApiError::invalid_query(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            )),
            (None, None) => Ok(Read::Consistent),
            (Some("0"), None | Some("NotOlderThan")) => Ok(Read::Any),
            (Some(rv), Some("Exact")) => Ok(Read::Exact(parse_revision(rv)?)),
            (Some(rv), None) if query.limit.is_some() => Ok(Read::Exact(parse_revision(rv)?)),
            (Some(rv), None | Some("NotOlderThan")) => Ok(Read::NotOlderThan(parse_revision(rv)?)),
            (_, Some(other)) => Err(ApiError::invalid_query(
                "resourceVersionMatch",
                &format!("unsupported value {other:?}: supported values: \"Exact\", \"NotOlderThan\""),
            )),
        }
    }

    /// Refuses a resourceVersion newer than the store's, as upstream does after waiting for it.
    async fn not_in_the_future(&self, wanted: i64) -> Result<(), ApiError> {
        let current = self.store.current_revision().await.map_err(store_error)?;
        if wanted > current {
            return Err(ApiError::Timeout(format!(
                "Too large resource version: {wanted}, current: {current}"
            )));
        }
        Ok(())
    }

    /// Whether `cache` can serve a read asking for `read`, once it has caught up as far as needed:
    /// a consistent read waits for the store's current revision (only where the store reports
    /// progress promptly; otherwise it goes to the store, as upstream does on etcd before v3.4.31).
    async fn cache_serves(&self, cache: &Cache, read: Read) -> Result<bool, ApiError> {
        let Some(at) = cache.revision() else { return Ok(false) };
        let wanted = match read {
            Read::Exact(_) => return Ok(false),
            Read::Any => return Ok(true),
            Read::NotOlderThan(wanted) if at >= wanted => return Ok(true),
            Read::NotOlderThan(wanted) => {
                self.not_in_the_future(wanted).await?;
                wanted
            }
            Read::Consistent => self.store.current_revision().await.map_err(store_error)?,
        };
        Ok(self.store.prompt_progress() && cache.wait_for(wanted).await)
    }

    pub async fn list(&self, request: &ResourceRequest, query: &Query) -> Result<Reply, ApiError> {
        let resource = request.resource;
        let filter =
            Filter::parse(resource, query.label_selector.as_deref(), query.field_selector.as_deref())?;
        let prefix = collection_prefix(resource, request.namespace.as_deref());
        let read = Self::list_read(query)?;
        let fields = cache::fields_for(resource);
        // The first page from memory when the cache can serve it; the following ones from the store
        // at the revision it was read at (the continue token says which).
        // On a store without prompt progress a quiet cache's revision may be minutes old, too old
        // for the pages that would follow from the store: paged lists go to the store there.
        if query.continue_token.is_none()
            && (query.limit.is_none() || self.store.prompt_progress())
            && let Some(cache) = self.cache.of(resource)
            && self.cache_serves(&cache, read).await?
            && let Some(listed) = cache.list(&prefix, None, &filter, query.limit)
        {
            return list_reply(
                resource,
                &prefix,
                &filter,
                listed.revision,
                &listed.entries,
                listed.more.as_ref(),
            );
        }
        let (mut revision, mut from) = match &query.continue_token {
            Some(token) => {
                let (at, start) = decode_continue(token, &prefix)?;
                (Some(at), Some(start))
            }
            None => match read {
                Read::Consistent | Read::Any => (None, None),
                Read::NotOlderThan(wanted) => {
                    self.not_in_the_future(wanted).await?;
                    (None, None)
                }
                Read::Exact(at) => (Some(at), None),
            },
        };
        // With a selector, pages are read until `limit` objects match (or the collection ends), as
        // upstream does; the continue token then points after the last key read.
        let mut entries = Vec::new();
        let mut last_key = None;
        let (more, remaining, read_at) = loop {
            let mut range = RangeRequest::prefix(prefix.clone());
            if let Some(at) = revision {
                range = range.at(at);
            }
            if let Some(start) = &from {
                range = range.from(start.clone());
            }
            if let Some(limit) = query.limit {
                range = range.limit(limit - entries.len());
            }
            let response = self.store.range(range).await.map_err(store_error)?;
            revision = Some(response.revision);
            for kv in response.kvs.iter() {
                let entry = Entry::new(kv.key.clone(), kv.value.clone(), kv.mod_revision);
                if entry.passes(&filter, &fields) {
                    entries.push(entry);
                }
                last_key = Some(kv.key.clone());
            }
            let full = query.limit.is_some_and(|limit| entries.len() >= limit);
            if !response.more || full {
                break (response.more, response.count - response.kvs.len(), response.revision);
            }
            from = last_key.as_ref().map(|key| format!("{key}\u{0}"));
        };
        let more = last_key.filter(|_| more).map(|last| (last, remaining));
        list_reply(resource, &prefix, &filter, read_at, &entries, more.as_ref())
    }

    /// A watch as kube-apiserver serves it: from `resourceVersion` (the changes after it), or with
    /// none / "0" the current objects as ADDED first; with `sendInitialEvents=true` (a watch-list)
    /// the objects at a revision at least `resourceVersion`, then the bookmark ending them.
    pub async fn watch(&self, request: &ResourceRequest, query: &Query) -> Result<Reply, ApiError> {
        let resource = request.resource;
        let rv = query.resource_version.as_deref();
        check_watch_options(query)?;
        let watcher = Watcher {
            resource,
            prefix: collection_prefix(resource, request.namespace.as_deref()),
            name: request.name.clone(),
            filter: Filter::parse(
                resource,
                query.label_selector.as_deref(),
                query.field_selector.as_deref(),
            )?,
            fields: cache::fields_for(resource),
            bookmarks: query.allow_watch_bookmarks,
            deadline: query
                .timeout_seconds
                .filter(|s| *s > 0)
                .map(|s| tokio::time::Instant::now() + Duration::from_secs(s)),
        };
        let cache = self.cache.of(resource);
        let cache = cache.as_ref();
        let initial = query.send_initial_events.unwrap_or(matches!(rv, None | Some("0")));
        let start = if initial {
            let read = match rv {
                None => Read::Consistent,
                Some("0") => Read::Any,
                Some(rv) => Read::NotOlderThan(parse_revision(rv)?),
            };
            let ends_initial = query.send_initial_events == Some(true);
            match cache {
                Some(cache) if self.cache_serves(cache, read).await? => {
                    match cache.subscribe(&watcher.prefix, None) {
                        Some(sub) => Start {
                            initial: sub.snapshot,
                            initial_end: ends_initial.then_some(sub.revision),
                            replay: sub.replay,
                            after: sub.revision,
                            feed: Feed::Cache(sub.live),
                        },
                        None => {
                            self.start_from_store(&watcher.prefix, Some(cache), read, ends_initial).await?
                        }
                    }
                }
                _ => self.start_from_store(&watcher.prefix, cache, read, ends_initial).await?,
            }
        } else {
            let after = match rv {
                // "0" without initial events: from about now (upstream: the cache's revision).
                Some("0") => match cache.and_then(|cache| cache.revision()) {
                    Some(at) => at,
                    None => self.store.current_revision().await.map_err(store_error)?,
                },
                Some(rv) => {
                    let after = parse_revision(rv)?;
                    if after.checked_add(1).is_none() {
                        return Err(ApiError::BadRequest(format!("resourceVersion {after} is too large")));
                    }
                    self.not_in_the_future(after).await?;
                    after
                }
                // sendInitialEvents=false without a resourceVersion: from now on.
                None => self.store.current_revision().await.map_err(store_error)?,
            };
            let (replay, feed) = self.changes_after(&watcher.prefix, cache, after).await?;
            Start { initial: Vec::new(), initial_end: None, replay, after, feed }
        };
        Ok(Reply::Watch(watcher.stream(start)))
    }

    /// A watch's start read from the store: its objects now (at least `read`'s revision), then the
    /// changes after.
    async fn start_from_store(
        &self,
        prefix: &str,
        cache: Option<&Arc<Cache>>,
        read: Read,
        ends_initial: bool,
    ) -> Result<Start, ApiError> {
        let listed = self.store.range(RangeRequest::prefix(prefix.to_owned())).await.map_err(store_error)?;
        if let Read::NotOlderThan(wanted) = read
            && wanted > listed.revision
        {
            return Err(ApiError::Timeout(format!(
                "Too large resource version: {wanted}, current: {}",
                listed.revision
            )));
        }
        let initial =
            listed.kvs.into_iter().map(|kv| Entry::new(kv.key, kv.value, kv.mod_revision)).collect();
        let (replay, feed) = self.changes_after(prefix, cache, listed.revision).await?;
        Ok(Start {
            initial,
            initial_end: ends_initial.then_some(listed.revision),
            replay,
            after: listed.revision,
            feed,
        })
    }

    /// The changes under `prefix` after revision `after`: from the cache while its window reaches
    /// back that far, otherwise from a store watch (which answers 410 Expired once compacted).
    async fn changes_after(
        &self,
        prefix: &str,
        cache: Option<&Arc<Cache>>,
        after: i64,
    ) -> Result<(Vec<Arc<Change>>, Feed), ApiError> {
        if let Some(sub) = cache.and_then(|cache| cache.subscribe(prefix, Some(after))) {
            return Ok((sub.replay, Feed::Cache(sub.live)));
        }
        let start = after
            .checked_add(1)
            .ok_or_else(|| ApiError::BadRequest(format!("resourceVersion {after} is too large")))?;
        let items = self.store.watch_with_progress(prefix, Some(start)).await.map_err(store_error)?;
        Ok((Vec::new(), Feed::Store(items)))
    }

    pub async fn create(
        &self,
        ctx: &Context,
        request: &ResourceRequest,
        object: Value,
        dry_run: bool,
    ) -> Result<Reply, ApiError> {
        self.create_with(ctx, request, object, dry_run, true).await
    }

    /// A create; `track` records it in managedFields (an apply that creates has recorded itself).
    pub(crate) async fn create_with(
        &self,
        ctx: &Context,
        request: &ResourceRequest,
        mut object: Value,
        dry_run: bool,
        track: bool,
    ) -> Result<Reply, ApiError> {
        let resource = request.resource;
        let namespace = request.namespace.as_deref();
        if let Some(namespace) = namespace {
            self.require_namespace(namespace).await?;
        }
        crate::crd::check_create(self, resource).await?;
        let uid = uuid::Uuid::new_v4();
        let random = u64::from_le_bytes(uid.as_bytes()[..8].try_into().unwrap_or_default());
        let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let name = objects::prepare_create(&mut object, resource, namespace, &uid.to_string(), random, &now)?;
        // Upstream's order: defaulting, mutating admission, then the strategy's PrepareForCreate.
        keel_api::defaults::apply(resource, &mut object);
        if track {
            crate::field_manager::track(ctx, request, None, &mut object);
        }
        self.admit_create(resource, namespace, &mut object).await?;
        strategy::prepare_for_create(resource, &mut object);
        if resource.group == "certificates.k8s.io" && resource.plural == "certificatesigningrequests" {
            let user = &ctx.user;
            let extra = user.extra.iter().map(|(k, v)| (k.clone(), serde_json::json!(v))).collect();
            keel_api::certificates::prepare_for_create(
                &mut object,
                &user.name,
                &user.uid,
                &user.groups,
                &extra,
            );
        }
        let mut object = crate::validation::typed(resource, &object)?;
        let causes = keel_api::validation::validate_create(resource, &object);
        if !causes.is_empty() {
            return Err(ApiError::invalid(resource.group, resource.kind, &name, causes));
        }
        self.validate_write(ctx, request, None, &object)?;
        let key = objects::key(resource, namespace, &name);
        // A dry run answers what the create would: AlreadyExists too.
        if dry_run && self.store.get(&key).await.map_err(store_error)?.is_some() {
            return Err(ApiError::already_exists(resource.group, resource.plural, &name));
        }
        let outcome = if crate::services::is_services(resource) {
            // A dry run too answers with what would be allocated.
            match self.write_service(&key, None, &mut object, dry_run).await? {
                Some(outcome) => outcome,
                None => return Ok(Reply::Json(201, object)),
            }
        } else if dry_run {
            return Ok(Reply::Json(201, object));
        } else {
            let stored = objects::stored(resource, &object)?;
            self.store.create(&key, stored.into(), 0).await.map_err(store_error)?
        };
        match outcome {
            Outcome::Written { revision, .. } => {
                objects::set_resource_version(&mut object, revision);
                if resource.group.is_empty() && resource.plural == "namespaces" {
                    self.ensure_default_service_account(&name).await?;
                }
                Ok(Reply::Json(201, object))
            }
            Outcome::Conflict { .. } => Err(ApiError::already_exists(resource.group, resource.plural, &name)),
        }
    }

    /// Writes a Service with the ClusterIP and NodePorts it holds: created when `prior` is `None`,
    /// else updated from `prior`; the holds it keeps, takes and releases go in the same transaction
    /// ([`crate::services`]). `None` when nothing was written: a dry run, or an update that changes
    /// nothing; `service` then holds what would have been written.
    pub(crate) async fn write_service(
        &self,
        key: &str,
        prior: Option<Prior<'_>>,
        service: &mut Value,
        dry_run: bool,
    ) -> Result<Option<Outcome>, ApiError> {
        let old = prior.as_ref().map(|p| p.object);
        let owner = service.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_owned();
        let mut scan = false;
        for _attempt in 0..RETRIES {
            // A Service of that name answers AlreadyExists, whatever it asks for.
            if prior.is_none() && !dry_run && self.store.get(key).await.map_err(store_error)?.is_some() {
                return Ok(Some(Outcome::Conflict { current: None }));
            }
            let mut taken = HashSet::new();
            if scan {
                for prefix in crate::services::HOLD_PREFIXES {
                    let held = self.store.range(RangeRequest::prefix(prefix)).await.map_err(store_error)?;
                    taken.extend(held.kvs.into_iter().map(|kv| kv.key));
                }
            } else {
                for asked in crate::services::asked_keys(old, service) {
                    if self.store.get(&asked).await.map_err(store_error)?.is_some() {
                        taken.insert(asked);
                    }
                }
            }
            let random =
                u32::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..4].try_into().unwrap_or_default());
            let mut candidate = service.clone();
            let holds = crate::services::allocate(
                &self.services,
                old,
                &mut candidate,
                &|k| taken.contains(k),
                random,
            )?;
            let stored = objects::for_storage(&candidate)?;
            let unchanged = match &prior {
                Some(p) if holds.is_empty() && stored == p.stored => {
                    !self.store.is_stale(key, p.revision).await.map_err(store_error)?
                }
                _ => false,
            };
            if dry_run || unchanged {
                *service = candidate;
                return Ok(None);
            }
            let release = self.owned_holds(&holds.release, &owner).await?;
            let guard = match &prior {
                Some(prior) => Compare::ModRevision(key.to_owned(), prior.revision),
                None => Compare::Absent(key.to_owned()),
            };
            let txn = crate::services::write_txn(key, guard, stored, &owner, &holds.take, &release);
            let response = self.store.txn(txn).await.map_err(store_error)?;
            if response.succeeded {
                *service = candidate;
                return Ok(Some(Outcome::Written { revision: response.revision, prev: None }));
            }
            let current = match response.results.into_iter().next() {
                Some(OpResult::Get(current)) => current,
                _ => None,
            };
            let service_moved = match &prior {
                Some(prior) => current.as_ref().is_none_or(|kv| kv.mod_revision != prior.revision),
                None => current.is_some(),
            };
            if service_moved {
                return Ok(Some(Outcome::Conflict { current }));
            }
            // Another Service took a value chosen here: choose again knowing every hold.
            scan = true;
        }
        Err(ApiError::ServiceUnavailable(
            "could not allocate a ClusterIP or NodePort: too many concurrent writes".into(),
        ))
    }

    /// Of `keys`, those held by `owner` (a hold's value is its Service's uid), with their revisions:
    /// only these are released with it.
    async fn owned_holds(&self, keys: &[String], owner: &str) -> Result<Vec<(String, i64)>, ApiError> {
        let mut owned = Vec::new();
        for key in keys {
            if let Some(kv) = self.store.get(key).await.map_err(store_error)?
                && !owner.is_empty()
                && kv.value.as_ref() == owner.as_bytes()
            {
                owned.push((key.clone(), kv.mod_revision));
            }
        }
        Ok(owned)
    }

    /// Deletes the object at `key` if it is still at `revision`, with what it holds (a Service's
    /// address and node ports) in the same transaction.
    pub(crate) async fn remove(
        &self,
        resource: &Resource,
        key: &str,
        object: &Value,
        revision: i64,
    ) -> Result<Outcome, ApiError> {
        let uid = object.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
        let held = self.owned_holds(&crate::services::held_keys(resource, object), uid).await?;
        if held.is_empty() {
            return self.store.delete(key, Some(revision)).await.map_err(store_error);
        }
        let mut compares = vec![Compare::ModRevision(key.to_owned(), revision)];
        let mut ops = vec![TxnOp::delete(key)];
        for (hold, hold_revision) in held {
            compares.push(Compare::ModRevision(hold.clone(), hold_revision));
            ops.push(TxnOp::delete(hold));
        }
        let txn = Txn::new().when(compares).and_then(ops).or_else([TxnOp::get(key)]);
        let response = self.store.txn(txn).await.map_err(store_error)?;
        if response.succeeded {
            return Ok(Outcome::Written { revision: response.revision, prev: None });
        }
        let current = match response.results.into_iter().next() {
            Some(OpResult::Get(current)) => current,
            _ => None,
        };
        Ok(Outcome::Conflict { current })
    }

    /// NamespaceLifecycle: nothing is created in a namespace that does not exist.
    async fn require_namespace(&self, namespace: &str) -> Result<(), ApiError> {
        let namespaces = resources::find("", "v1", "namespaces")
            .ok_or_else(|| ApiError::Internal("no namespaces".into()))?;
        let key = objects::key(namespaces, None, namespace);
        match self.store.get(&key).await.map_err(store_error)? {
            Some(kv)
                if objects::from_storage(&kv.value, kv.mod_revision)?
                    .pointer("/metadata/deletionTimestamp")
                    .is_some() =>
            {
                Err(ApiError::Forbidden {
                    resource: keel_api::status::GroupResource::new("", "namespaces"),
                    name: namespace.to_owned(),
                    detail: format!(
                        "unable to create new content in namespace {namespace} because it is being terminated"
                    ),
                })
            }
            Some(_) => Ok(()),
            None => Err(ApiError::not_found("", "namespaces", namespace)),
        }
    }

    /// Every namespace has a `default` service account. The serviceaccount controller makes it
    /// upstream; until keel-controller-manager exists the apiserver does, when it creates a
    /// namespace.
    async fn ensure_default_service_account(&self, namespace: &str) -> Result<(), ApiError> {
        let accounts = resources::find("", "v1", "serviceaccounts")
            .ok_or_else(|| ApiError::Internal("no serviceaccounts".into()))?;
        let request = ResourceRequest {
            resource: accounts,
            namespace: Some(namespace.to_owned()),
            name: None,
            subresource: None,
            verb: crate::request::Verb::Create,
        };
        // Upstream's serviceaccount controller makes it: its manager, not the namespace's creator.
        let ctx = Context::internal("kube-controller-manager");
        match Box::pin(self.create(&ctx, &request, json!({"metadata": {"name": "default"}}), false)).await {
            Ok(_) | Err(ApiError::AlreadyExists { .. }) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Every active namespace's `default` ServiceAccount — the serviceaccount controller's work,
    /// done at start until keel-controller-manager runs it, so a namespace whose create was cut
    /// short before its account was made gets it.
    pub async fn ensure_default_service_accounts(&self) -> Result<(), ApiError> {
        let namespaces = resources::find("", "v1", "namespaces")
            .ok_or_else(|| ApiError::Internal("no namespaces".into()))?;
        let listed =
            self.store.range(RangeRequest::prefix(namespaces.key_prefix())).await.map_err(store_error)?;
        for kv in listed.kvs {
            let namespace = objects::from_storage(&kv.value, kv.mod_revision)?;
            if namespace.pointer("/metadata/deletionTimestamp").is_none() {
                self.ensure_default_service_account(objects::name(&namespace)).await?;
            }
        }
        Ok(())
    }

    /// The `kubernetes` Service and its Endpoints, naming this apiserver at `address`.
    pub async fn ensure_kubernetes_service(&self, address: std::net::SocketAddr) -> Result<(), ApiError> {
        let lookup = |plural| {
            resources::find("", "v1", plural).ok_or_else(|| ApiError::Internal(format!("no {plural}")))
        };
        let request = |resource| ResourceRequest {
            resource,
            namespace: Some("default".to_owned()),
            name: None,
            subresource: None,
            verb: crate::request::Verb::Create,
        };
        let service = crate::services::kubernetes_service(&self.services, address.port());
        let endpoints = crate::services::kubernetes_endpoints(&address.ip().to_string(), address.port());
        for (plural, object) in [("services", service), ("endpoints", endpoints.clone())] {
            match self
                .create(&Context::internal("kube-apiserver"), &request(lookup(plural)?), object, false)
                .await
            {
                Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
                // The address was taken meanwhile (the Service deleted, another created at its
                // address): upstream's reconciler reports it and keeps serving; so does this.
                Err(error @ ApiError::Invalid { .. }) => {
                    tracing::error!(%error, "the kubernetes Service could not be created");
                }
                Err(error) => return Err(error),
            }
        }
        // The address may have changed since the last start: the Endpoints follow it.
        let endpoints_resource = lookup("endpoints")?;
        let key = objects::key(endpoints_resource, Some("default"), "kubernetes");
        if let Some(kv) = self.store.get(&key).await.map_err(store_error)? {
            let mut current = objects::from_storage(&kv.value, kv.mod_revision)?;
            if current.get("subsets") != endpoints.get("subsets") {
                current["subsets"] = endpoints["subsets"].clone();
                let stored = objects::for_storage(&current)?;
                self.store.update(&key, stored.into(), kv.mod_revision, 0).await.map_err(store_error)?;
            }
        }
        Ok(())
    }

    /// The default ServiceCIDR, `kubernetes`, from `--service-cluster-ip-range`, Ready — what
    /// kube-apiserver's default ServiceCIDR controller (pkg/controlplane/controller/
    /// defaultservicecidr) does at start: created if missing, its Ready condition applied (field
    /// manager `kubernetes-service-cidr-controller`, forced) when it has none or an Unknown one; one
    /// whose CIDRs differ from the flag is reported and left alone, as upstream does. kube-proxy
    /// waits for the ServiceCIDR informer before its first sync. The CIDR is data: Services'
    /// addresses are still allocated from the flag's range ([`crate::services`]).
    pub async fn ensure_default_service_cidr(&self) -> Result<(), ApiError> {
        const NAME: &str = "kubernetes";
        let resource = resources::find("networking.k8s.io", "v1", "servicecidrs")
            .ok_or_else(|| ApiError::Internal("no servicecidrs".into()))?;
        let request = |verb, subresource: Option<&str>| ResourceRequest {
            resource,
            namespace: None,
            name: None,
            subresource: subresource.map(str::to_owned),
            verb,
        };
        let cidrs = json!([self.services.cidr()]);
        let cidr = json!({"metadata": {"name": NAME}, "spec": {"cidrs": cidrs}});
        match self
            .create(
                &Context::internal("kube-apiserver"),
                &request(crate::request::Verb::Create, None),
                cidr,
                false,
            )
            .await
        {
            Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
            Err(error) => return Err(error),
        }
        let key = objects::key(resource, None, NAME);
        let Some(kv) = self.store.get(&key).await.map_err(store_error)? else { return Ok(()) };
        let current = objects::from_storage(&kv.value, kv.mod_revision)?;
        if current.pointer("/metadata/deletionTimestamp").is_some() {
            return Ok(());
        }
        if current.pointer("/spec/cidrs") != Some(&cidrs) {
            tracing::warn!(
                configured = %cidrs, served = ?current.pointer("/spec/cidrs"),
                "the default ServiceCIDR does not match --service-cluster-ip-range: configure the flag to match it or delete it"
            );
            return Ok(());
        }
        let conditions = current.pointer("/status/conditions").and_then(Value::as_array);
        let ready = conditions.and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
        match ready.and_then(|c| c["status"].as_str()) {
            Some("True") => Ok(()),
            Some("False") => {
                let condition = ready.unwrap_or(&Value::Null);
                tracing::warn!(%condition, "the default ServiceCIDR is not Ready");
                Ok(())
            }
            _ => {
                let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
                let status = json!({
                    "apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR", "metadata": {"name": NAME},
                    "status": {"conditions": [{"type": "Ready", "status": "True",
                        "message": "Kubernetes default Service CIDR is ready", "lastTransitionTime": now}]}
                });
                let body = serde_json::to_vec(&status).map_err(|e| ApiError::Internal(e.to_string()))?;
                let query = Some("fieldManager=kubernetes-service-cidr-controller&force=true");
                let request = request(crate::request::Verb::Patch, Some("status"));
                self.apply(&Context::internal("kube-apiserver"), &request, NAME, &body, query, false)
                    .await
                    .map(|_| ())
            }
        }
    }

    /// Creates the namespaces every cluster has, if missing.
    pub async fn ensure_system_namespaces(&self) -> Result<(), ApiError> {
        let namespaces = resources::find("", "v1", "namespaces")
            .ok_or_else(|| ApiError::Internal("no namespaces".into()))?;
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let request = ResourceRequest {
                resource: namespaces,
                namespace: None,
                name: None,
                subresource: None,
                verb: crate::request::Verb::Create,
            };
            match self
                .create(
                    &Context::internal("kube-apiserver"),
                    &request,
                    json!({"metadata": {"name": name}}),
                    false,
                )
                .await
            {
                Ok(_) => {}
                // Made before a restart: its service account may still be missing (a crash between the two).
                Err(ApiError::AlreadyExists { .. }) => self.ensure_default_service_account(name).await?,
                Err(error) => return Err(error),
            }
        }
        let classes = resources::find("scheduling.k8s.io", "v1", "priorityclasses")
            .ok_or_else(|| ApiError::Internal("no priorityclasses".into()))?;
        for (name, value, description) in crate::admission::SYSTEM_PRIORITY_CLASSES {
            let request = ResourceRequest {
                resource: classes,
                namespace: None,
                name: None,
                subresource: None,
                verb: crate::request::Verb::Create,
            };
            let class = json!({"metadata": {"name": name}, "value": value, "description": description, "preemptionPolicy": "PreemptLowerPriority"});
            match self.create(&Context::internal("kube-apiserver"), &request, class, false).await {
                Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }
}

/// A patch request's body, by its Content-Type.
#[derive(Debug, Clone)]
pub enum PatchBody {
    /// `application/json-patch+json`
    Json(Vec<json_patch::PatchOperation>),
    /// `application/merge-patch+json`
    Merge(Value),
    /// `application/strategic-merge-patch+json` (keel-api's `strategic`)
    Strategic(Value),
}

impl PatchBody {
    pub fn parse(body: &[u8], content_type: Option<&str>) -> Result<PatchBody, ApiError> {
        let media = content_type.map(|c| c.split(';').next().unwrap_or(c).trim().to_ascii_lowercase());
        let malformed =
            |e: serde_json::Error| ApiError::BadRequest(format!("the patch is not valid JSON: {e}"));
        match media.as_deref() {
            Some("application/json-patch+json") => {
                // Not JSON is a 400; JSON that is no list of known operations fails when applied
                // upstream (evanphx/json-patch decodes any list of objects): a 422.
                let operations: Value = serde_json::from_slice(body).map_err(malformed)?;
                Ok(PatchBody::Json(serde_json::from_value(operations).map_err(|e| {
                    ApiError::UnprocessableEntity(format!("the JSON patch could not be applied: {e}"))
                })?))
            }
            Some("application/merge-patch+json") => {
                Ok(PatchBody::Merge(serde_json::from_slice(body).map_err(malformed)?))
            }
            Some("application/strategic-merge-patch+json") => {
                Ok(PatchBody::Strategic(serde_json::from_slice(body).map_err(malformed)?))
            }
            other => Err(ApiError::UnsupportedMediaType(format!(
                "the patch content type {} is not supported yet: application/json-patch+json, application/merge-patch+json and application/strategic-merge-patch+json are",
                other.unwrap_or("(none)")
            ))),
        }
    }

    pub(crate) fn apply(&self, object: &mut Value) -> Result<(), ApiError> {
        match self {
            PatchBody::Json(operations) => json_patch::patch(object, operations).map_err(|e| {
                ApiError::UnprocessableEntity(format!("the JSON patch could not be applied: {e}"))
            }),
            PatchBody::Strategic(patch) => {
                *object = keel_api::strategic::apply(object, patch).map_err(|e| {
                    ApiError::UnprocessableEntity(format!(
                        "the strategic merge patch could not be applied: {e}"
                    ))
                })?;
                Ok(())
            }
            PatchBody::Merge(patch) => {
                json_patch::merge(object, patch);
                if object.is_object() {
                    Ok(())
                } else {
                    Err(ApiError::UnprocessableEntity("the merge patch does not leave an object".into()))
                }
            }
        }
    }
}

/// upstream's validateWatchOptions: sendInitialEvents needs resourceVersionMatch=NotOlderThan, and a
/// match needs sendInitialEvents.
fn check_watch_options(query: &Query) -> Result<(), ApiError> {
    let invalid = |detail: &str| Err(ApiError::invalid_query("resourceVersionMatch", detail));
    match (query.send_initial_events, query.resource_version_match.as_deref()) {
        (None, None) | (Some(_), Some("NotOlderThan")) => Ok(()),
        (Some(_), _) => invalid("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"),
        (None, Some(_)) => {
            invalid("resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")
        }
    }
}

/// A list response: the objects as stored with their resourceVersions spliced in, the list's
/// revision, and when more follow the continue token (and, without a selector, how many remain).
fn list_reply(
    resource: &Resource,
    prefix: &str,
    filter: &Filter,
    revision: i64,
    entries: &[Arc<Entry>],
    more: Option<&(String, usize)>,
) -> Result<Reply, ApiError> {
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if let Some((last, remaining)) = more {
        metadata["continue"] = encode_continue(revision, &last[prefix.len()..]).into();
        if filter.is_everything() {
            metadata["remainingItemCount"] = (*remaining).into();
        }
    }
    let mut body = serde_json::to_vec(&json!({
        "kind": format!("{}List", resource.kind),
        "apiVersion": resource.api_version(),
        "metadata": metadata,
    }))
    .map_err(|e| ApiError::Internal(format!("encoding a list: {e}")))?;
    body.pop();
    // Sized once: a list of thousands is megabytes, and growing it by doubling copies it again
    // and again (and faults in fresh pages each time).
    body.reserve(entries.iter().map(|entry| entry.value.len() + 48).sum::<usize>() + 16);
    body.extend_from_slice(b",\"items\":[");
    for (i, entry) in entries.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        objects::write_served(resource, &entry.value, entry.revision, &mut body)?;
    }
    body.extend_from_slice(b"]}");
    Ok(Reply::Raw(200, Bytes::from(body)))
}

/// kube-apiserver's continue token: base64url of `{"v":"meta.k8s.io/v1","rv":R,"start":KEY}`, KEY
/// relative to the collection, continuing after the last key returned.
fn encode_continue(revision: i64, last: &str) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": revision, "start": format!("{last}\u{0}")});
    URL_SAFE_NO_PAD.encode(token.to_string())
}

fn decode_continue(token: &str, prefix: &str) -> Result<(i64, String), ApiError> {
    let bad = || ApiError::BadRequest(format!("invalid continue token {token:?}"));
    let bytes = URL_SAFE_NO_PAD.decode(token.trim_end_matches('=')).map_err(|_| bad())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let revision = value.get("rv").and_then(Value::as_i64).ok_or_else(bad)?;
    let start = value.get("start").and_then(Value::as_str).ok_or_else(bad)?;
    if value.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") || start.contains("..") {
        return Err(bad());
    }
    Ok((revision, format!("{prefix}{start}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let token = encode_continue(42, "default/web");
        let (revision, start) = decode_continue(&token, "/registry/pods/").unwrap();
        assert_eq!((revision, start.as_str()), (42, "/registry/pods/default/web\u{0}"));
        assert!(decode_continue("!!", "/p/").is_err());
        assert!(decode_continue(&URL_SAFE_NO_PAD.encode("{}"), "/p/").is_err());
    }

    #[test]
    fn queries() {
        let q = Query::parse(Some("limit=5&resourceVersion=10&continue=abc%3D&timeoutSeconds=30&watch=true"))
            .unwrap();
        assert_eq!(
            (q.limit, q.resource_version.as_deref(), q.continue_token.as_deref()),
            (Some(5), Some("10"), Some("abc="))
        );
        assert_eq!(q.timeout_seconds, Some(30));
        assert!(Query::parse(Some("limit=x")).is_err());
        assert_eq!(percent_decode("a%2Fb+c%"), "a/b c%");
    }
}
