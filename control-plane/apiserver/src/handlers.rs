//! The verbs on resources, over the store: get, list (limit/continue, at a resourceVersion), watch
//! (from a resourceVersion, or the current state first), create, update (optimistic concurrency on
//! resourceVersion) and delete. JSON only in this slice.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use keel_api::resources::{self, Resource};
use keel_api::status::ApiError;
use keel_api::strategy;
use keel_store::{EventKind, Outcome, RangeRequest, Store, StoreError};
use serde_json::{Value, json};

use crate::filter::Filter;
use crate::objects;
use crate::request::ResourceRequest;

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
    pub send_initial_events: bool,
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
                "sendInitialEvents" => parsed.send_initial_events = value == "true",
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

/// The server's handle on the store.
#[derive(Debug, Clone)]
pub struct Handlers {
    pub store: Arc<dyn Store>,
    pub services: crate::services::ServiceRanges,
}

impl Handlers {
    pub async fn get(&self, request: &ResourceRequest, name: &str) -> Result<Reply, ApiError> {
        let resource = request.resource;
        let key = objects::key(resource, request.namespace.as_deref(), name);
        let kv = self.store.get(&key).await.map_err(store_error)?;
        let kv = kv.ok_or_else(|| ApiError::not_found(resource.group, resource.plural, name))?;
        Ok(Reply::Json(200, objects::from_storage(&kv.value, kv.mod_revision)?))
    }

    /// The revision a list reads at (`None`: the latest), by kube-apiserver's rules: no
    /// resourceVersion is the latest; "0" is any (the latest here); N with match Exact (or, as the
    /// legacy rule has it, with a limit and no match) is exactly N; N with NotOlderThan (or no match)
    /// is the latest, which must be at least N.
    async fn list_revision(&self, query: &Query) -> Result<Option<i64>, ApiError> {
        let rv = query.resource_version.as_deref();
        match (rv, query.resource_version_match.as_deref()) {
            (None, Some(_)) => Err(ApiError::invalid_query(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            )),
            (Some("0"), Some("Exact")) => Err(ApiError::invalid_query(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            )),
            (None | Some("0"), None | Some("NotOlderThan")) => Ok(None),
            (Some(rv), Some("Exact")) => Ok(Some(parse_revision(rv)?)),
            (Some(rv), None) if query.limit.is_some() => Ok(Some(parse_revision(rv)?)),
            (Some(rv), None | Some("NotOlderThan")) => {
                let wanted = parse_revision(rv)?;
                let current = self.store.current_revision().await.map_err(store_error)?;
                if wanted > current {
                    return Err(ApiError::Timeout(format!(
                        "Too large resource version: {wanted}, current: {current}"
                    )));
                }
                Ok(None)
            }
            (_, Some(other)) => Err(ApiError::invalid_query(
                "resourceVersionMatch",
                &format!("unsupported value {other:?}: supported values: \"Exact\", \"NotOlderThan\""),
            )),
        }
    }

    pub async fn list(&self, request: &ResourceRequest, query: &Query) -> Result<Reply, ApiError> {
        let resource = request.resource;
        let filter =
            Filter::parse(resource, query.label_selector.as_deref(), query.field_selector.as_deref())?;
        let prefix = collection_prefix(resource, request.namespace.as_deref());
        let (mut revision, mut from) = match &query.continue_token {
            Some(token) => {
                let (at, start) = decode_continue(token, &prefix)?;
                (Some(at), Some(start))
            }
            None => (self.list_revision(query).await?, None),
        };
        // With a selector, pages are read until `limit` objects match (or the collection ends), as
        // upstream does; the continue token then points after the last key read.
        // Without a selector, objects are served as stored (their resourceVersion spliced in), not
        // parsed and written again: what makes a LIST of thousands cheap.
        let raw = filter.is_everything();
        let mut items = Vec::new();
        let mut raw_items: Vec<Vec<u8>> = Vec::new();
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
                range = range.limit(limit - items.len() - raw_items.len());
            }
            let response = self.store.range(range).await.map_err(store_error)?;
            revision = Some(response.revision);
            for kv in &response.kvs {
                match objects::served_bytes(&kv.value, kv.mod_revision).filter(|_| raw) {
                    Some(bytes) => raw_items.push(bytes),
                    None => {
                        let object = objects::from_storage(&kv.value, kv.mod_revision)?;
                        if filter.matches(&object) {
                            items.push(object);
                        }
                    }
                }
                last_key = Some(kv.key.clone());
            }
            let full = query.limit.is_some_and(|limit| items.len() + raw_items.len() >= limit);
            if !response.more || full {
                break (response.more, response.count - response.kvs.len(), response.revision);
            }
            from = last_key.as_ref().map(|key| format!("{key}\u{0}"));
        };
        let mut metadata = json!({"resourceVersion": read_at.to_string()});
        if more && let Some(last) = &last_key {
            metadata["continue"] = encode_continue(read_at, &last[prefix.len()..]).into();
            if filter.is_everything() {
                metadata["remainingItemCount"] = remaining.into();
            }
        }
        if raw && items.is_empty() {
            let mut body = serde_json::to_vec(&json!({
                "kind": format!("{}List", resource.kind),
                "apiVersion": resource.api_version(),
                "metadata": metadata,
            }))
            .map_err(|e| ApiError::Internal(format!("encoding a list: {e}")))?;
            body.pop();
            body.extend_from_slice(b",\"items\":[");
            for (i, item) in raw_items.iter().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(item);
            }
            body.extend_from_slice(b"]}");
            return Ok(Reply::Raw(200, Bytes::from(body)));
        }
        // Some stored objects were not of the shape splicing expects: parse them all.
        for bytes in raw_items {
            items.push(
                serde_json::from_slice(&bytes)
                    .map_err(|e| ApiError::Internal(format!("decoding an object: {e}")))?,
            );
        }
        Ok(Reply::Json(
            200,
            json!({
                "kind": format!("{}List", resource.kind),
                "apiVersion": resource.api_version(),
                "metadata": metadata,
                "items": items,
            }),
        ))
    }

    /// A watch from `resourceVersion` (events after it), or with none / "0" the current objects as
    /// ADDED first, then what follows, as kube-apiserver does.
    pub async fn watch(&self, request: &ResourceRequest, query: &Query) -> Result<Reply, ApiError> {
        let resource = request.resource;
        if query.send_initial_events {
            // Until bookmarks exist, say so: clients then list and watch (client-go falls back on 422).
            return Err(ApiError::invalid_query(
                "sendInitialEvents",
                "sendInitialEvents is not supported by this server yet",
            ));
        }
        let filter =
            Filter::parse(resource, query.label_selector.as_deref(), query.field_selector.as_deref())?;
        let prefix = collection_prefix(resource, request.namespace.as_deref());
        let name = request.name.clone();
        let (initial, start) = match query.resource_version.as_deref().filter(|rv| *rv != "0") {
            Some(rv) => {
                let start = parse_revision(rv)?.checked_add(1);
                (
                    Vec::new(),
                    start
                        .ok_or_else(|| ApiError::BadRequest(format!("resourceVersion {rv} is too large")))?,
                )
            }
            None => {
                let current =
                    self.store.range(RangeRequest::prefix(prefix.clone())).await.map_err(store_error)?;
                let mut initial = Vec::new();
                for kv in current.kvs {
                    let object = objects::from_storage(&kv.value, kv.mod_revision)?;
                    if name.as_deref().is_none_or(|n| kv.key.rsplit('/').next() == Some(n))
                        && filter.matches(&object)
                    {
                        initial.push(watch_line("ADDED", object));
                    }
                }
                (initial, current.revision + 1)
            }
        };
        let events = self.store.watch(&prefix, Some(start)).await.map_err(store_error)?;
        let wanted = move |key: &str| name.as_deref().is_none_or(|n| key.rsplit('/').next() == Some(n));
        let everything = filter.is_everything();
        let events = events.filter_map(move |event| {
            let line = match event {
                Ok(event) if !wanted(&event.kv.key) => None,
                // Without a selector nothing needs the object parsed: the stored bytes are sent with
                // the event's resourceVersion spliced in.
                Ok(event) if everything && let Some(line) = raw_watch_line(&event) => Some(line),
                Ok(event) => match watch_event(&event, &filter) {
                    Ok(Some((kind, object))) => Some(watch_line(kind, object)),
                    Ok(None) => None,
                    Err(error) => Some(watch_line("ERROR", error.to_json())),
                },
                Err(error) => Some(watch_line("ERROR", store_error(error).to_json())),
            };
            std::future::ready(line)
        });
        let stream = futures::stream::iter(initial).chain(events);
        let stream: std::pin::Pin<Box<dyn Stream<Item = Bytes> + Send>> =
            match query.timeout_seconds.filter(|s| *s > 0) {
                Some(seconds) => {
                    let deadline = tokio::time::sleep(Duration::from_secs(seconds));
                    Box::pin(stream.take_until(deadline))
                }
                None => Box::pin(stream),
            };
        Ok(Reply::Watch(stream))
    }

    pub async fn create(
        &self,
        request: &ResourceRequest,
        mut object: Value,
        dry_run: bool,
    ) -> Result<Reply, ApiError> {
        let resource = request.resource;
        let namespace = request.namespace.as_deref();
        if let Some(namespace) = namespace {
            self.require_namespace(namespace).await?;
        }
        let uid = uuid::Uuid::new_v4();
        let random = u64::from_le_bytes(uid.as_bytes()[..8].try_into().unwrap_or_default());
        let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        let name = objects::prepare_create(&mut object, resource, namespace, &uid.to_string(), random, &now)?;
        // Upstream's order: defaulting, mutating admission, then the strategy's PrepareForCreate.
        keel_api::defaults::apply(resource, &mut object);
        self.admit_create(resource, namespace, &mut object).await?;
        strategy::prepare_for_create(resource, &mut object);
        let mut object = crate::validation::typed(resource, &object)?;
        if dry_run {
            return Ok(Reply::Json(201, object));
        }
        let key = objects::key(resource, namespace, &name);
        let outcome = if resource.group.is_empty() && resource.plural == "services" {
            self.create_service(&key, &mut object).await?
        } else {
            let stored = objects::for_storage(&object)?;
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

    /// Creates a Service with the ClusterIP and NodePorts it is given, in one transaction.
    async fn create_service(&self, key: &str, service: &mut Value) -> Result<Outcome, ApiError> {
        let taken_under = |prefix: &'static str| async move {
            let held = self.store.range(RangeRequest::prefix(prefix)).await.map_err(store_error)?;
            Ok::<_, ApiError>(
                held.kvs.into_iter().map(|kv| kv.key).collect::<std::collections::HashSet<String>>(),
            )
        };
        for _attempt in 0..5 {
            // A Service of that name answers AlreadyExists, whatever its address.
            if self.store.get(key).await.map_err(store_error)?.is_some() {
                return Ok(Outcome::Conflict { current: None });
            }
            let mut taken = taken_under("/registry/serviceips/").await?;
            taken.extend(taken_under("/registry/servicenodeports/").await?);
            let random =
                u32::from_le_bytes(uuid::Uuid::new_v4().as_bytes()[..4].try_into().unwrap_or_default());
            let mut candidate = service.clone();
            let txn = crate::services::create_txn(
                &self.services,
                &mut candidate,
                key,
                objects::for_storage,
                &|k| taken.contains(k),
                random,
            )?;
            let response = self.store.txn(txn).await.map_err(store_error)?;
            if response.succeeded {
                *service = candidate;
                return Ok(Outcome::Written { revision: response.revision, prev: None });
            }
            if self.store.get(key).await.map_err(store_error)?.is_some() {
                return Ok(Outcome::Conflict { current: None });
            }
            // Another Service took a chosen address or port meanwhile: choose again.
        }
        Err(ApiError::ServiceUnavailable(
            "could not allocate a ClusterIP or NodePort: too many concurrent creates".into(),
        ))
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
        // Only holds that are this object's (their value is its uid) go with it.
        let uid = object.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
        let mut compares = vec![keel_store::Compare::ModRevision(key.to_owned(), revision)];
        let mut ops = vec![keel_store::TxnOp::delete(key)];
        for hold in crate::services::held_keys(resource, object) {
            if let Some(kv) = self.store.get(&hold).await.map_err(store_error)?
                && !uid.is_empty()
                && kv.value.as_ref() == uid.as_bytes()
            {
                compares.push(keel_store::Compare::ModRevision(hold.clone(), kv.mod_revision));
                ops.push(keel_store::TxnOp::delete(hold));
            }
        }
        if ops.len() == 1 {
            return self.store.delete(key, Some(revision)).await.map_err(store_error);
        }
        let txn = keel_store::Txn::new().when(compares).and_then(ops).or_else([keel_store::TxnOp::get(key)]);
        let response = self.store.txn(txn).await.map_err(store_error)?;
        if response.succeeded {
            return Ok(Outcome::Written { revision: response.revision, prev: None });
        }
        let current = match response.results.into_iter().next() {
            Some(keel_store::OpResult::Get(current)) => current,
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
        match Box::pin(self.create(&request, json!({"metadata": {"name": "default"}}), false)).await {
            Ok(_) | Err(ApiError::AlreadyExists { .. }) => Ok(()),
            Err(error) => Err(error),
        }
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
            match self.create(&request(lookup(plural)?), object, false).await {
                Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
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
            match self.create(&request, json!({"metadata": {"name": name}}), false).await {
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
            match self.create(&request, class, false).await {
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
}

impl PatchBody {
    pub fn parse(body: &[u8], content_type: Option<&str>) -> Result<PatchBody, ApiError> {
        let media = content_type.map(|c| c.split(';').next().unwrap_or(c).trim().to_ascii_lowercase());
        let malformed =
            |e: serde_json::Error| ApiError::BadRequest(format!("the patch is not valid JSON: {e}"));
        match media.as_deref() {
            Some("application/json-patch+json") => {
                Ok(PatchBody::Json(serde_json::from_slice(body).map_err(malformed)?))
            }
            Some("application/merge-patch+json") => {
                Ok(PatchBody::Merge(serde_json::from_slice(body).map_err(malformed)?))
            }
            other => Err(ApiError::UnsupportedMediaType(format!(
                "the patch content type {} is not supported yet: application/json-patch+json and application/merge-patch+json are",
                other.unwrap_or("(none)")
            ))),
        }
    }

    pub(crate) fn apply(&self, object: &mut Value) -> Result<(), ApiError> {
        match self {
            PatchBody::Json(operations) => json_patch::patch(object, operations).map_err(|e| {
                ApiError::UnprocessableEntity(format!("the JSON patch could not be applied: {e}"))
            }),
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

/// What a watcher with `filter` sees of a store event: ADDED, MODIFIED or DELETED by whether the old
/// and new states match (the DELETED object is the old content at the event's revision), or nothing.
fn watch_event(
    event: &keel_store::Event,
    filter: &Filter,
) -> Result<Option<(&'static str, Value)>, ApiError> {
    let revision = event.kv.mod_revision;
    let old = event.prev_kv.as_ref().map(|kv| objects::from_storage(&kv.value, revision)).transpose()?;
    let new = match event.kind {
        EventKind::Put => Some(objects::from_storage(&event.kv.value, revision)?),
        EventKind::Delete => None,
    };
    let old_passes = old.as_ref().is_some_and(|o| filter.matches(o));
    let new_passes = new.as_ref().is_some_and(|n| filter.matches(n));
    Ok(match (old, new) {
        (_, Some(new)) if new_passes && old_passes => Some(("MODIFIED", new)),
        (_, Some(new)) if new_passes => Some(("ADDED", new)),
        (Some(old), _) if old_passes => Some(("DELETED", old)),
        _ => None,
    })
}

/// A watch event line built from the stored bytes, or `None` when they are not of the shape
/// [`objects::served_bytes`] splices.
fn raw_watch_line(event: &keel_store::Event) -> Option<Bytes> {
    let (kind, stored) = match event.kind {
        EventKind::Put if event.prev_kv.is_none() => ("ADDED", &event.kv.value),
        EventKind::Put => ("MODIFIED", &event.kv.value),
        EventKind::Delete => ("DELETED", &event.prev_kv.as_ref()?.value),
    };
    let object = objects::served_bytes(stored, event.kv.mod_revision)?;
    let mut line = Vec::with_capacity(object.len() + 32);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(kind.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(&object);
    line.extend_from_slice(b"}\n");
    Some(Bytes::from(line))
}

fn watch_line(kind: &str, object: Value) -> Bytes {
    let mut event = serde_json::Map::new();
    event.insert("type".into(), kind.into());
    event.insert("object".into(), object);
    let mut line = serde_json::to_vec(&event).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
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
    fn watch_events_follow_the_selector() {
        let configmaps = resources::find("", "v1", "configmaps").unwrap();
        let filter = Filter::parse(configmaps, Some("tier=web"), None).unwrap();
        let kv = |labels: Value, revision: i64| keel_store::KeyValue {
            key: "/registry/configmaps/d/a".into(),
            value: serde_json::to_vec(&json!({"metadata": {"name": "a", "labels": labels}})).unwrap().into(),
            create_revision: 1,
            mod_revision: revision,
            version: 1,
            lease: 0,
        };
        let event = |kind, new: Value, old: Option<Value>| keel_store::Event {
            kind,
            kv: kv(new, 7),
            prev_kv: old.map(|old| kv(old, 6)),
        };
        let seen = |e: keel_store::Event| watch_event(&e, &filter).unwrap();
        assert_eq!(seen(event(EventKind::Put, json!({"tier": "web"}), None)).unwrap().0, "ADDED");
        assert_eq!(seen(event(EventKind::Put, json!({"tier": "web"}), Some(json!({})))).unwrap().0, "ADDED");
        assert_eq!(
            seen(event(EventKind::Put, json!({"tier": "web"}), Some(json!({"tier": "web"})))).unwrap().0,
            "MODIFIED"
        );
        let (kind, object) = seen(event(EventKind::Put, json!({}), Some(json!({"tier": "web"})))).unwrap();
        assert_eq!(
            (kind, &object["metadata"]["labels"]["tier"], &object["metadata"]["resourceVersion"]),
            ("DELETED", &json!("web"), &json!("7"))
        );
        assert!(seen(event(EventKind::Put, json!({}), Some(json!({})))).is_none());
        assert_eq!(
            seen(event(EventKind::Delete, json!(null), Some(json!({"tier": "web"})))).unwrap().0,
            "DELETED"
        );
    }

    #[test]
    fn raw_watch_lines_match_parsed_ones() {
        let stored = objects::for_storage(
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "v"}}),
        )
        .unwrap();
        let kv = |value: Vec<u8>, revision| keel_store::KeyValue {
            key: "/registry/configmaps/d/a".into(),
            value: value.into(),
            create_revision: 1,
            mod_revision: revision,
            version: 1,
            lease: 0,
        };
        let everything = Filter::default();
        for (kind, new, prev) in [
            (EventKind::Put, kv(stored.clone(), 5), None),
            (EventKind::Put, kv(stored.clone(), 6), Some(kv(stored.clone(), 5))),
            (EventKind::Delete, kv(Vec::new(), 7), Some(kv(stored.clone(), 6))),
        ] {
            let event = keel_store::Event { kind, kv: new, prev_kv: prev };
            let raw: Value = serde_json::from_slice(&raw_watch_line(&event).unwrap()).unwrap();
            let (parsed_kind, object) = watch_event(&event, &everything).unwrap().unwrap();
            assert_eq!(raw, json!({"type": parsed_kind, "object": object}));
        }
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
