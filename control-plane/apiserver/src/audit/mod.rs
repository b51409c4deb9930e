//! Auditing as kube-apiserver does it (k8s.io/apiserver/pkg/audit and the WithAuditInit,
//! WithAudit and WithFailedAuthenticationAudit filters): every request has an audit ID (its
//! `Audit-ID` header, else a new UUID, echoed in the response's `Audit-Id`); once it is
//! authenticated the [`policy`] decides its level from who sent it and what it asks, and a
//! [`Record`] — upstream's AuditContext, carried in the request's context — collects the event:
//! metadata first, then what the chain learns (the impersonated user, the authorization decision
//! and reason, the request and response bodies at their levels), written at each [`Stage`] the
//! policy keeps to the [`log`] backend. A request that fails authentication is one
//! ResponseStarted event without a user, as upstream records it.
//!
//! Below RequestResponse Keel redacts Secret values in logged request bodies ([`redact`]), where
//! upstream logs them: issue 18 requires it.

pub mod event;
pub mod log;
pub mod policy;
pub mod redact;
pub mod rotate;

use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use http::HeaderMap;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::auth::User;
use crate::request::RequestInfo;
use event::{Body, Event, ObjectReference, ResponseStatus, UserInfo};
use log::{LogBackend, Mode};
use policy::RequestAuditConfig;
pub use policy::{Level, Policy, Stage};

/// The request header carrying an audit ID, and the response header echoing it.
pub const HEADER_AUDIT_ID: &str = "audit-id";
/// upstream's limit on a logged User-Agent, and what it appends when it cuts one.
const MAX_USER_AGENT: usize = 1024;
const USER_AGENT_TRUNCATED: &str = "...TRUNCATED";

/// The audit annotations upstream's authorization filter adds.
pub const DECISION_ANNOTATION: &str = "authorization.k8s.io/decision";
pub const REASON_ANNOTATION: &str = "authorization.k8s.io/reason";

/// The policy and where its events go (`--audit-policy-file` with `--audit-log-path`).
#[derive(Debug, Clone)]
pub struct Audit {
    policy: Arc<Policy>,
    backend: Arc<LogBackend>,
}

/// What the audit step reads of a request before anything else happens to it.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub audit_id: Arc<str>,
    pub received: jiff::Timestamp,
    /// The path and query as sent.
    pub request_uri: String,
    pub user_agent: String,
    pub source_ips: Vec<String>,
}

impl Incoming {
    /// The request's audit metadata: its ID, when it came, what it asked, from where.
    pub fn read(
        audit_id: Arc<str>,
        received: jiff::Timestamp,
        uri: &http::Uri,
        headers: &HeaderMap,
        peer: Option<IpAddr>,
    ) -> Incoming {
        let mut user_agent = headers
            .get(http::header::USER_AGENT)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        if user_agent.len() > MAX_USER_AGENT {
            let mut cut = MAX_USER_AGENT;
            while !user_agent.is_char_boundary(cut) {
                cut -= 1;
            }
            user_agent.truncate(cut);
            user_agent.push_str(USER_AGENT_TRUNCATED);
        }
        Incoming {
            audit_id,
            received,
            request_uri: uri
                .path_and_query()
                .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned()),
            user_agent,
            source_ips: source_ips(headers, peer),
        }
    }
}

/// The request's audit ID: its `Audit-ID` header as sent, else a new UUID (upstream's
/// WithAuditInit).
pub fn audit_id(headers: &HeaderMap) -> Arc<str> {
    match headers.get(HEADER_AUDIT_ID).map(|v| String::from_utf8_lossy(v.as_bytes())) {
        Some(id) if !id.is_empty() => id.into(),
        _ => uuid::Uuid::new_v4().to_string().into(),
    }
}

/// upstream's SourceIPs: the `X-Forwarded-For` chain, `X-Real-Ip` unless already in it, then the
/// connection's peer unless it ends the chain.
pub fn source_ips(headers: &HeaderMap, peer: Option<IpAddr>) -> Vec<String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default();
    let mut ips: Vec<IpAddr> =
        header("x-forwarded-for").split(',').filter_map(|part| part.trim().parse().ok()).collect();
    if let Ok(real) = header("x-real-ip").trim().parse::<IpAddr>()
        && !ips.contains(&real)
    {
        ips.push(real);
    }
    if let Some(peer) = peer.map(|ip| ip.to_canonical())
        && ips.last() != Some(&peer)
    {
        ips.push(peer);
    }
    ips.iter().map(ToString::to_string).collect()
}

impl Audit {
    pub fn new(policy: Policy, backend: Arc<LogBackend>) -> Audit {
        Audit { policy: Arc::new(policy), backend }
    }

    pub fn backend(&self) -> &Arc<LogBackend> {
        &self.backend
    }

    /// WithAudit: the request's record at the level the policy gives it for `user` (who
    /// authenticated, before impersonation), with its metadata; disabled at level None.
    pub fn begin(&self, user: &User, info: &RequestInfo, incoming: &Incoming, long_running: bool) -> Record {
        let config = self.policy.evaluate(Some(user), info);
        self.record(config, Some(user), info, incoming, long_running)
    }

    /// WithFailedAuthenticationAudit: a request no one could be authenticated for, answered with
    /// `status` (code 401): one ResponseStarted event without a user, when the policy records it.
    pub async fn failed_authentication(&self, info: &RequestInfo, incoming: &Incoming, status: &Value) {
        let config = self.policy.evaluate(None, info);
        let record = self.record(config, None, info, incoming, true);
        record.log_response(Some(status), || Some(status.clone()));
        if let Some(code) = status.get("code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok()) {
            record.set_code(code);
        }
        record.emit(Stage::ResponseStarted).await;
    }

    fn record(
        &self,
        config: RequestAuditConfig,
        user: Option<&User>,
        info: &RequestInfo,
        incoming: &Incoming,
        long_running: bool,
    ) -> Record {
        if config.level == Level::None {
            return Record::default();
        }
        let mut event = Event::new(config.level, incoming.audit_id.clone(), incoming.received);
        event.verb.clone_from(&info.verb);
        event.request_uri.clone_from(&incoming.request_uri);
        event.user_agent.clone_from(&incoming.user_agent);
        event.source_ips.clone_from(&incoming.source_ips);
        if let Some(user) = user {
            event.user = UserInfo::from(user);
        }
        if info.is_resource_request {
            event.object_ref = Some(ObjectReference {
                resource: info.resource.clone(),
                namespace: info.namespace.clone(),
                name: info.name.clone(),
                subresource: info.subresource.clone(),
                api_group: info.api_group.clone(),
                api_version: info.api_version.clone(),
                ..ObjectReference::default()
            });
        }
        Record(Some(Arc::new(Active {
            backend: self.backend.clone(),
            config,
            long_running,
            event: Mutex::new(event),
        })))
    }
}

/// One request's audit event in the making (upstream's AuditContext); cheap to clone, a no-op when
/// the request is not audited.
#[derive(Debug, Clone, Default)]
pub struct Record(Option<Arc<Active>>);

#[derive(Debug)]
struct Active {
    backend: Arc<LogBackend>,
    config: RequestAuditConfig,
    /// Watches and other long-running requests also record ResponseStarted.
    long_running: bool,
    event: Mutex<Event>,
}

/// How a request body is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestBody {
    /// A created or updated object (its metadata also completes the objectRef).
    Object,
    /// A patch, logged as sent.
    Patch { json_patch: bool },
    /// DeleteOptions, logged as upstream's internal version writes them.
    DeleteOptions,
}

/// What one logged body concerns (for the redaction of Secret values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concerning<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
}

impl Record {
    /// The request's level (None when it is not audited).
    pub fn level(&self) -> Level {
        self.0.as_ref().map_or(Level::None, |a| a.config.level)
    }

    fn with_event(&self, change: impl FnOnce(&mut Event, &RequestAuditConfig)) {
        if let Some(active) = &self.0 {
            let mut event = active.event.lock().unwrap_or_else(PoisonError::into_inner);
            change(&mut event, &active.config);
        }
    }

    /// An audit annotation; the first value given for a key stays (as upstream's).
    pub fn annotate(&self, key: &str, value: &str) {
        self.with_event(|event, _| {
            event.annotations.entry(key.to_owned()).or_insert_with(|| value.to_owned());
        });
    }

    /// The user the request acts as, once impersonation has decided it.
    pub fn impersonated(&self, user: &User) {
        self.with_event(|event, _| event.impersonated_user = Some(UserInfo::from(user)));
    }

    /// upstream's LogRequestObject / LogRequestPatch: at Metadata and up an object's metadata fills
    /// the objectRef's blanks; at Request and up the body is logged (Secret values redacted below
    /// RequestResponse, managed fields left out when the policy says so).
    pub fn request_body(&self, concerning: Concerning<'_>, kind: RequestBody, body: &Value) {
        let level = self.level();
        if level == Level::None {
            return;
        }
        if kind == RequestBody::Object {
            let meta = |key: &str| {
                body.pointer(&format!("/metadata/{key}"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            self.with_event(|event, _| {
                let object = event.object_ref.get_or_insert_with(ObjectReference::default);
                for (field, key) in [
                    (&mut object.namespace, "namespace"),
                    (&mut object.name, "name"),
                    (&mut object.uid, "uid"),
                    (&mut object.resource_version, "resourceVersion"),
                ] {
                    if field.is_empty() {
                        *field = meta(key);
                    }
                }
            });
        }
        if level < Level::Request {
            return;
        }
        let omit_managed_fields = self.0.as_ref().is_some_and(|a| a.config.omit_managed_fields);
        let mut logged = match kind {
            RequestBody::DeleteOptions => delete_options(body),
            _ => body.clone(),
        };
        if omit_managed_fields && kind == RequestBody::Object {
            drop_managed_fields(&mut logged);
        }
        if level < Level::RequestResponse {
            redact_below_request_response(concerning, kind, &mut logged);
        }
        let raw = to_raw(&logged);
        self.with_event(|event, _| event.request_object = raw);
    }

    /// upstream's LogResponseObject: a Status's bounded fields at Metadata and up, the object
    /// (`object()`, asked for only then) at RequestResponse.
    pub fn log_response(&self, status: Option<&Value>, object: impl FnOnce() -> Option<Value>) {
        let level = self.level();
        if level == Level::None {
            return;
        }
        let status = status.map(ResponseStatus::from_status);
        let omit_managed_fields = self.0.as_ref().is_some_and(|a| a.config.omit_managed_fields);
        let object = if level == Level::RequestResponse {
            object().map(|mut object| {
                if omit_managed_fields {
                    drop_managed_fields(&mut object);
                }
                object
            })
        } else {
            None
        };
        self.with_event(|event, _| {
            if let Some(status) = status {
                event.response_status = Some(status);
            }
            if let Some(object) = object {
                event.response_object = to_raw(&object);
            }
        });
    }

    /// A response already serialized (a list served from stored bytes): logged as it is at
    /// RequestResponse.
    pub fn log_raw_response(&self, bytes: &[u8]) {
        if self.level() != Level::RequestResponse {
            return;
        }
        let omit_managed_fields = self.0.as_ref().is_some_and(|a| a.config.omit_managed_fields);
        let raw = if omit_managed_fields {
            serde_json::from_slice::<Value>(bytes).ok().and_then(|mut value| {
                drop_managed_fields(&mut value);
                to_raw(&value)
            })
        } else {
            std::str::from_utf8(bytes)
                .ok()
                .and_then(|text| RawValue::from_string(text.to_owned()).ok())
                .map(Arc::from)
        };
        self.with_event(|event, _| event.response_object = raw);
    }

    /// The response's HTTP status code (upstream takes it from WriteHeader).
    pub fn set_code(&self, code: u16) {
        self.with_event(|event, _| {
            event.response_status.get_or_insert_with(ResponseStatus::default).code = code;
        });
    }

    /// RequestReceived; `false` when the event could not be stored and the backend is strict (the
    /// request is then refused, as upstream's blocking-strict mode does).
    pub async fn received(&self) -> bool {
        let stored = self.emit(Stage::RequestReceived).await;
        stored || self.0.as_ref().is_none_or(|a| a.backend.mode() != Mode::BlockingStrict)
    }

    /// The response is about to be sent with `code`: ResponseStarted for long-running requests;
    /// for the others ResponseComplete at once. For a long-running one, the returned guard records
    /// ResponseComplete when it is dropped (with the response's body).
    pub async fn responding(&self, code: u16) -> Option<Completion> {
        let active = self.0.as_ref()?;
        self.set_code(code);
        if active.long_running {
            self.emit(Stage::ResponseStarted).await;
            Some(Completion(self.clone()))
        } else {
            self.emit(Stage::ResponseComplete).await;
            None
        }
    }

    /// The handler panicked with `message`: upstream's Panic stage.
    pub fn panicked(&self, message: &str) {
        self.with_event(|event, _| {
            event.response_status = Some(ResponseStatus::from_status(&serde_json::json!({
                "code": 500, "status": "Failure", "reason": "InternalError",
                "message": format!("APIServer panic'd: {message}"),
            })));
        });
        self.emit_now(Stage::Panic);
    }

    /// The event at `stage` (unless the policy omits it), stamped now.
    fn snapshot(&self, stage: Stage) -> Option<(Event, &Arc<LogBackend>)> {
        let active = self.0.as_ref()?;
        if active.config.omit_stages.contains(&stage) {
            return None;
        }
        let mut event = active.event.lock().unwrap_or_else(PoisonError::into_inner);
        event.stage = stage;
        event.stage_timestamp = if stage == Stage::RequestReceived {
            event.request_received_timestamp
        } else {
            jiff::Timestamp::now()
        };
        Some((event.clone(), &active.backend))
    }

    /// Sends the event at `stage`; `true` when it was stored or not wanted.
    async fn emit(&self, stage: Stage) -> bool {
        match self.snapshot(stage) {
            Some((event, backend)) => backend.process(event).await,
            None => true,
        }
    }

    fn emit_now(&self, stage: Stage) {
        if let Some((event, backend)) = self.snapshot(stage) {
            backend.process_now(event);
        }
    }
}

/// Records a long-running request's ResponseComplete when the response body is done with.
#[derive(Debug)]
pub struct Completion(Record);

impl Drop for Completion {
    fn drop(&mut self) {
        self.0.emit_now(Stage::ResponseComplete);
    }
}

fn to_raw(value: &Value) -> Option<Body> {
    serde_json::value::to_raw_value(value).ok().map(Arc::from)
}

/// An object's, a list's items' or a Table's rows' managed fields left out (upstream's
/// copyWithoutManagedFields).
fn drop_managed_fields(value: &mut Value) {
    let strip = |object: &mut Value| {
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    };
    strip(value);
    if let Some(items) = value.get_mut("items").and_then(Value::as_array_mut) {
        items.iter_mut().for_each(strip);
    }
    if value.get("kind").and_then(Value::as_str) == Some("Table")
        && let Some(rows) = value.get_mut("rows").and_then(Value::as_array_mut)
    {
        for row in rows {
            if let Some(object) = row.get_mut("object") {
                strip(object);
            }
        }
    }
}

/// DeleteOptions as upstream logs them: decoded into meta's internal version and written back in
/// it (`apiVersion: meta.k8s.io/__internal`), so only its known fields.
fn delete_options(body: &Value) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("kind".into(), "DeleteOptions".into());
    out.insert("apiVersion".into(), "meta.k8s.io/__internal".into());
    for field in [
        "gracePeriodSeconds",
        "preconditions",
        "orphanDependents",
        "propagationPolicy",
        "dryRun",
        "ignoreStoreReadErrorWithClusterBreakingPotential",
    ] {
        if let Some(value) = body.get(field).filter(|v| !v.is_null()) {
            out.insert(field.into(), value.clone());
        }
    }
    Value::Object(out)
}

fn redact_below_request_response(concerning: Concerning<'_>, kind: RequestBody, body: &mut Value) {
    match (concerning.group, concerning.resource, concerning.subresource, kind) {
        ("", "secrets", None, RequestBody::Patch { json_patch: true }) => redact::secret_json_patch(body),
        ("", "secrets", None, RequestBody::Object | RequestBody::Patch { .. }) => redact::secret(body),
        ("authentication.k8s.io", "tokenreviews", None, RequestBody::Object) => redact::token_review(body),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::log::{Destination, LogOptions};
    use serde_json::json;

    use crate::audit::log::tests::Shared;

    fn audit(policy: &str) -> (Audit, Shared) {
        let shared = Shared::default();
        let backend =
            LogBackend::start(LogOptions::new(Destination::Writer(Box::new(shared.clone())))).unwrap();
        (Audit::new(Policy::parse(policy.as_bytes()).unwrap().policy, backend), shared)
    }

    async fn events(audit: &Audit, shared: &Shared) -> Vec<Value> {
        audit.backend().flush().await;
        let text = String::from_utf8(shared.0.lock().unwrap().clone()).unwrap();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    fn request(method: &str, uri: &str) -> (RequestInfo, Incoming) {
        let uri: http::Uri = uri.parse().unwrap();
        let info = crate::request::info(&method.parse().unwrap(), uri.path(), uri.query());
        let mut headers = HeaderMap::new();
        headers.insert("user-agent", "kubectl/v1.33.0".parse().unwrap());
        let incoming = Incoming::read(
            "id".into(),
            "2026-12-02T11:02:28Z".parse().unwrap(),
            &uri,
            &headers,
            Some([127, 0, 0, 1].into()),
        );
        (info, incoming)
    }

    #[tokio::test]
    async fn stages_of_a_create_at_request_level() {
        let (audit, shared) = audit("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Request\n");
        let admin = User::named("admin", &["system:masters"]);
        let (info, incoming) = request("POST", "/api/v1/namespaces/default/secrets?fieldManager=me");
        let record = audit.begin(&admin, &info, &incoming, false);
        assert!(record.received().await);
        record.annotate(DECISION_ANNOTATION, "allow");
        record.annotate(DECISION_ANNOTATION, "forbid");
        let secret = json!({"kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "c2VjcmV0"}});
        let concerning = Concerning { group: "", resource: "secrets", subresource: None };
        record.request_body(concerning, RequestBody::Object, &secret);
        record.log_response(None, || panic!("no response object below RequestResponse"));
        assert!(record.responding(201).await.is_none());
        let events = events(&audit, &shared).await;
        assert_eq!(events.len(), 2);
        assert_eq!(events[0]["stage"], "RequestReceived");
        assert_eq!(
            events[0]["objectRef"],
            json!({"resource": "secrets", "namespace": "default", "apiVersion": "v1"})
        );
        assert_eq!(events[0]["requestURI"], "/api/v1/namespaces/default/secrets?fieldManager=me");
        assert_eq!(events[0]["sourceIPs"], json!(["127.0.0.1"]));
        assert_eq!(events[0]["userAgent"], "kubectl/v1.33.0");
        assert!(events[0].get("annotations").is_none());
        assert_eq!(events[1]["stage"], "ResponseComplete");
        assert_eq!(events[1]["objectRef"]["name"], "s", "filled from the body");
        assert_eq!(events[1]["requestObject"]["data"], json!({"k": redact::REDACTED}));
        assert_eq!(events[1]["responseStatus"], json!({"metadata": {}, "code": 201}));
        assert_eq!(events[1]["annotations"], json!({DECISION_ANNOTATION: "allow"}));
        assert!(events[1].get("responseObject").is_none());
    }

    #[tokio::test]
    async fn long_running_requests_and_omitted_stages() {
        let policy = "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nomitManagedFields: true\nrules:\n- level: RequestResponse\n";
        let (audit, shared) = audit(policy);
        let admin = User::named("admin", &["system:masters"]);
        let (info, incoming) = request("GET", "/api/v1/namespaces/default/configmaps?watch=true");
        let record = audit.begin(&admin, &info, &incoming, true);
        assert!(record.received().await);
        let completion = record.responding(200).await;
        assert!(completion.is_some());
        assert_eq!(events(&audit, &shared).await.len(), 1, "ResponseStarted only, so far");
        drop(completion);
        let events = events(&audit, &shared).await;
        let stages: Vec<&str> = events.iter().map(|e| e["stage"].as_str().unwrap()).collect();
        assert_eq!(stages, ["ResponseStarted", "ResponseComplete"]);

        let (info, incoming) = request("GET", "/api/v1/namespaces/default/configmaps");
        let record = audit.begin(&admin, &info, &incoming, false);
        let list =
            json!({"kind": "ConfigMapList", "items": [{"metadata": {"name": "a", "managedFields": [{}]}}]});
        record.log_response(None, || Some(list.clone()));
        record.responding(200).await;
        let last = super::tests::events(&audit, &shared).await.pop().unwrap();
        assert_eq!(last["responseObject"]["items"][0]["metadata"], json!({"name": "a"}));
    }

    #[tokio::test]
    async fn failed_authentication_is_one_event_without_a_user() {
        let (audit, shared) = audit(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  users: [alice]\n- level: Metadata\n",
        );
        let (info, incoming) = request("GET", "/api/v1/namespaces");
        let status = keel_api::status::ApiError::Unauthorized.to_json();
        audit.failed_authentication(&info, &incoming, &status).await;
        let events = events(&audit, &shared).await;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0]["stage"], "ResponseStarted");
        assert_eq!(events[0]["user"], json!({}));
        assert_eq!(
            events[0]["responseStatus"],
            json!({"metadata": {}, "status": "Failure", "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
        );
        // alice's requests are not audited; the policy runs before anything is recorded.
        let record = audit.begin(&User::named("alice", &[]), &info, &incoming, false);
        assert_eq!(record.level(), Level::None);
        record.annotate("a", "b");
        assert!(record.received().await);
        assert!(record.responding(200).await.is_none());
        assert_eq!(super::tests::events(&audit, &shared).await.len(), 1);
    }

    #[test]
    fn delete_options_as_the_internal_version() {
        let body = json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background", "bogus": 1});
        assert_eq!(
            delete_options(&body),
            json!({"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/__internal", "propagationPolicy": "Background"})
        );
    }

    #[test]
    fn source_ips_as_upstream() {
        let mut headers = HeaderMap::new();
        let peer = Some(IpAddr::from([10, 0, 0, 9]));
        assert_eq!(source_ips(&headers, peer), ["10.0.0.9"]);
        headers.insert("x-forwarded-for", "1.2.3.4, bogus, 10.0.0.9".parse().unwrap());
        headers.insert("x-real-ip", "1.2.3.4".parse().unwrap());
        assert_eq!(source_ips(&headers, peer), ["1.2.3.4", "10.0.0.9"]);
        headers.insert("x-real-ip", "5.6.7.8".parse().unwrap());
        assert_eq!(source_ips(&headers, peer), ["1.2.3.4", "10.0.0.9", "5.6.7.8", "10.0.0.9"]);
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(source_ips(&HeaderMap::new(), Some(mapped)), ["127.0.0.1"]);
    }

    #[test]
    fn audit_ids_and_user_agents() {
        let mut headers = HeaderMap::new();
        let generated = audit_id(&headers);
        assert_eq!(uuid::Uuid::parse_str(&generated).map(|u| u.get_version_num()), Ok(4));
        headers.insert("audit-id", "mine".parse().unwrap());
        assert_eq!(&*audit_id(&headers), "mine");
        headers.insert("user-agent", "x".repeat(2000).parse().unwrap());
        let incoming =
            Incoming::read("i".into(), jiff::Timestamp::now(), &"/".parse().unwrap(), &headers, None);
        assert_eq!(incoming.user_agent.len(), 1024 + USER_AGENT_TRUNCATED.len());
        assert!(incoming.user_agent.ends_with("...TRUNCATED"));
    }
}
