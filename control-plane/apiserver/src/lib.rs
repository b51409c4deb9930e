//! keel-apiserver: the Kubernetes REST API over a keel-store. Requests are read as upstream's
//! RequestInfoFactory does ([`request`]), authenticated ([`auth`], certificates from [`pki`]),
//! limited (in-flight and timeouts, [`Limits`]) and negotiated ([`negotiate`]: JSON, YAML, Table,
//! [`protobuf`]);
//! reads are served from the watch cache ([`cache`], [`watch`]) or the store ([`handlers`]); writes
//! are defaulted, admitted ([`admission`]), typed and validated ([`validation`], keel-api's
//! validation) and stored ([`objects`], [`writes`], [`services`] allocation, [`binding`],
//! [`eviction`]);
//! /openapi/v2 and /openapi/v3 are served from documents built at start ([`openapi`]).

pub mod admission;
pub mod audit;
pub mod auth;
pub mod authorization;
pub mod binding;
pub mod cache;
pub mod certificates;
pub mod chain;
pub mod context;
pub mod crd;
pub mod encryption;
pub mod eviction;
pub mod field_manager;
pub mod filter;
pub mod follow;
pub mod handlers;
pub mod kubelet_client;
pub mod negotiate;
pub mod node_authorizer;
pub mod node_restriction;
pub mod objects;
pub mod openapi;
pub mod pki;
pub mod pod_proxy;
pub mod protobuf;
pub mod rbac;
pub mod request;
pub mod reviews;
pub mod services;
pub mod tokens;
pub mod validation;
pub mod watch;
pub mod writes;

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures::{FutureExt, StreamExt};
use http::{Request, Response, StatusCode, header};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use keel_api::status::ApiError;
use keel_api::{discovery, table};
use keel_store::Store;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::auth::{Tokens, User};
use crate::context::Context;
use crate::handlers::{Handlers, Query, Reply};
use crate::negotiate::Format;
use crate::request::{Target, Verb};
use crate::writes::{DeleteOptions, SubresourceBody};

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// The Kubernetes version Keel serves.
pub const KUBERNETES_VERSION: (&str, &str) = ("1", "34");

/// How a server is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// `host:port` clients reach this server at (discovery's serverAddressByClientCIDRs, and the
    /// `kubernetes` Service's endpoint).
    pub address: std::net::SocketAddr,
    pub tokens: Tokens,
    /// `--anonymous-auth`: a request without credentials is system:anonymous (else a 401).
    pub anonymous: bool,
    /// `--authorization-mode`, in order.
    pub authorization: Vec<authorization::Mode>,
    pub services: services::ServiceRanges,
    pub limits: Limits,
    /// The service account token issuer and verifier (`--service-account-*`, `--api-audiences`).
    pub service_accounts: tokens::ServiceAccountConfig,
    /// `--enable-bootstrap-token-auth`.
    pub bootstrap_tokens: bool,
    /// The built-in CSR signers' CA and `--cluster-signing-duration`; none: CSRs are never issued.
    pub signer: Option<certificates::signer::Signer>,
    /// `--audit-policy-file` with `--audit-log-path`: what is audited and where it is written;
    /// `None` audits nothing (as upstream without a policy or a backend).
    pub audit: Option<audit::Audit>,
    /// How kubelets are reached (`pods/log`): `--kubelet-*`.
    pub kubelet: kubelet_client::KubeletClientConfig,
}

impl Config {
    /// Defaults for a server at `address`: no token file, anonymous requests, RBAC, kube-apiserver's
    /// Service ranges and limits, service account tokens signed by a key made at start, bootstrap
    /// tokens on (as kubeadm runs kube-apiserver).
    pub fn new(address: std::net::SocketAddr) -> Config {
        Config {
            address,
            tokens: Tokens::default(),
            anonymous: true,
            authorization: vec![authorization::Mode::Node, authorization::Mode::Rbac],
            services: services::ServiceRanges::default(),
            limits: Limits::default(),
            service_accounts: tokens::ServiceAccountConfig::default(),
            bootstrap_tokens: true,
            signer: None,
            audit: None,
            kubelet: kubelet_client::KubeletClientConfig::default(),
        }
    }
}

/// What one client may hold of the server, with kube-apiserver's flag names and defaults. Watches
/// (long-running) count against neither in-flight limit nor the timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `--max-requests-inflight` (reads; 0: no limit). Beyond it: 429 with Retry-After.
    pub max_requests_inflight: usize,
    /// `--max-mutating-requests-inflight` (writes; 0: no limit).
    pub max_mutating_requests_inflight: usize,
    /// `--request-timeout`: a request not answered by then is a 504 Timeout.
    pub request_timeout: std::time::Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            request_timeout: std::time::Duration::from_secs(60),
        }
    }
}

/// How long a client has to complete its TLS handshake, and (HTTP/1) to send a request's headers
/// (kube-apiserver's ReadHeaderTimeout), so idle half-open connections do not pile up.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(32);

/// A running API server's shared state.
#[derive(Debug)]
pub struct ApiServer {
    handlers: Handlers,
    /// `host:port` clients reach this server at (discovery's serverAddressByClientCIDRs).
    address: String,
    /// Bearer tokens: the token file, service account and bootstrap tokens.
    authenticator: Arc<tokens::TokenAuthenticator>,
    /// The service account issuer's discovery documents (an https issuer only).
    discovery: Option<tokens::oidc::Discovery>,
    anonymous: bool,
    /// The audit policy and log ([`audit`]).
    audit: Option<audit::Audit>,
    inflight: chain::InFlight,
    authorizer: Arc<authorization::Authorizer>,
    request_timeout: std::time::Duration,
    /// The /openapi documents (rebuilt when served resources change: the CRD controllers do).
    openapi: Arc<openapi::OpenApi>,
    /// The CustomResourceDefinition controllers ([`crd`]).
    _crds: crd::CrdControllers,
    /// What keeps the RBAC policy current.
    _rbac: follow::Following,
    /// What keeps the Node authorizer's graph current, when it is a mode.
    _node_graph: Option<follow::Following>,
    /// The CSR approving and signing controllers ([`certificates::controller`]).
    _certificates: Option<follow::Following>,
    /// The client of the kubelets' API.
    kubelet: kubelet_client::KubeletClient,
    /// How `pods/proxy` reaches pods.
    pod_proxy: pod_proxy::transport::ProxyTransport,
}

impl ApiServer {
    /// Prepares a server on `store`, creating the system namespaces.
    pub async fn new(store: Arc<dyn Store>, config: Config) -> Result<Arc<ApiServer>, ApiError> {
        let cache = Arc::new(cache::WatchCache::start(&store));
        let rbac = Arc::new(rbac::Rbac::default());
        let authorizer = Arc::new(authorization::Authorizer::new(config.authorization.clone(), rbac.clone()));
        let handlers = Handlers {
            store,
            cache,
            services: config.services,
            authorizer: authorizer.clone(),
            crds_served: crd::Served::default(),
        };
        let openapi = Arc::new(
            openapi::OpenApi::build(keel_api::resources::RESOURCES, keel_api::openapi::Schemas::builtin())
                .map_err(|e| ApiError::Internal(format!("building the OpenAPI documents: {e}")))?,
        );
        let crds = crd::CrdControllers::start(handlers.clone(), openapi.clone()).await;
        handlers.ensure_system_namespaces().await?;
        handlers.ensure_bootstrap_policy().await?;
        let written = handlers.store.current_revision().await.map_err(handlers::store_error)?;
        let rbac = rbac::follow(handlers.clone(), rbac, written).await;
        let node_graph = match authorizer.node() {
            Some(node) => Some(node.follow(&handlers, written).await),
            None => None,
        };
        let certificates = certificates::controller::start(handlers.clone(), config.signer, written).await;
        let accounts = tokens::service_account::ServiceAccounts::new(config.service_accounts)
            .map_err(|e| ApiError::Internal(format!("service account keys: {e}")))?;
        let accounts = Arc::new(accounts);
        let discovery = tokens::oidc::Discovery::build(&accounts, &config.address.to_string());
        let objects: Arc<dyn tokens::LiveObjects> = Arc::new(handlers.clone());
        let authenticator = Arc::new(tokens::TokenAuthenticator::new(
            config.tokens,
            accounts,
            config.bootstrap_tokens,
            objects,
        ));
        let kubelet = kubelet_client::KubeletClient::new(&config.kubelet)
            .map_err(|e| ApiError::Internal(format!("the kubelet client: {e}")))?;
        let pod_proxy = pod_proxy::transport::ProxyTransport::new()
            .map_err(|e| ApiError::Internal(format!("the pods/proxy transport: {e}")))?;
        let server = Arc::new(ApiServer {
            kubelet,
            pod_proxy,
            handlers,
            address: config.address.to_string(),
            authenticator,
            discovery,
            anonymous: config.anonymous,
            audit: config.audit,
            inflight: chain::InFlight::new(&config.limits),
            authorizer,
            request_timeout: config.limits.request_timeout,
            openapi,
            _crds: crds,
            _rbac: rbac,
            _node_graph: node_graph,
            _certificates: certificates,
        });
        server.handlers.ensure_default_service_accounts().await?;
        server.handlers.ensure_kubernetes_service(config.address).await?;
        server.handlers.ensure_default_service_cidr().await?;
        Ok(server)
    }

    /// The /openapi documents, to rebuild when the served resources change.
    pub fn openapi(&self) -> &openapi::OpenApi {
        &self.openapi
    }

    /// Serves TLS connections from `listener` (HTTP/2 and HTTP/1.1 by ALPN) until the task is
    /// dropped. A connection's verified client certificate names its user.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        tls: Arc<rustls::ServerConfig>,
    ) -> std::io::Result<()> {
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        loop {
            let (stream, peer) = listener.accept().await?;
            // As Go's net package does for kube-apiserver: without it, a response written in
            // several pieces waits for the client's delayed ACK (40 ms on Linux) behind Nagle.
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%peer, %error, "TCP_NODELAY not set");
            }
            let (server, acceptor) = (self.clone(), acceptor.clone());
            tokio::spawn(async move {
                let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(error)) => {
                        tracing::debug!(%peer, %error, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
                let user = stream
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(auth::certificate_user);
                let service = hyper::service::service_fn(move |request| {
                    let (server, user) = (server.clone(), user.clone());
                    async move { Ok::<_, Infallible>(server.handle(request, user, peer.ip()).await) }
                });
                let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                builder
                    .http1()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT);
                if let Err(error) =
                    builder.serve_connection_with_upgrades(TokioIo::new(stream), service).await
                {
                    tracing::debug!(%peer, %error, "connection ended");
                }
            });
        }
    }

    /// The handler chain ([`chain`]): the audit ID (WithAuditInit, echoed as `Audit-Id`),
    /// authentication, auditing around the rest ([`audit`]), impersonation, the in-flight limits,
    /// authorization, then the request served within its timeout.
    async fn handle(
        &self,
        request: Request<Incoming>,
        certificate_user: Option<User>,
        peer: std::net::IpAddr,
    ) -> Response<Body> {
        let received = jiff::Timestamp::now();
        let (mut parts, body) = request.into_parts();
        // A streaming subresource takes the connection's upgrade once it is authorized.
        if let Some(upgrade) = parts.extensions.remove::<hyper::upgrade::OnUpgrade>() {
            parts.extensions.insert(PendingUpgrade(Arc::new(std::sync::Mutex::new(Some(upgrade)))));
        }
        parts.extensions.insert(pod_proxy::ClientAddress(peer));
        let audit_id = audit::audit_id(&parts.headers);
        let mut response = self.audited(parts, body, certificate_user, peer, &audit_id, received).await;
        if let Ok(value) = http::HeaderValue::from_str(&audit_id) {
            response.headers_mut().insert(audit::HEADER_AUDIT_ID, value);
        }
        response
    }

    /// Authentication, then (WithAudit) the request's audit record around the rest of the chain:
    /// RequestReceived before it, ResponseStarted/ResponseComplete as the response goes, Panic if
    /// the handler panics.
    async fn audited(
        &self,
        parts: http::request::Parts,
        body: Incoming,
        certificate_user: Option<User>,
        peer: std::net::IpAddr,
        audit_id: &Arc<str>,
        received: jiff::Timestamp,
    ) -> Response<Body> {
        let info = request::info(&parts.method, parts.uri.path(), parts.uri.query());
        let incoming = self.audit.as_ref().map(|_| {
            audit::Incoming::read(audit_id.clone(), received, &parts.uri, &parts.headers, Some(peer))
        });
        let authenticated =
            chain::authenticate(&parts.headers, certificate_user, &self.authenticator, self.anonymous).await;
        let (user, annotations) = match authenticated {
            Ok(authenticated) => authenticated,
            Err(error) => {
                if let (Some(audit), Some(incoming)) = (&self.audit, &incoming) {
                    audit.failed_authentication(&info, incoming, &error.to_json()).await;
                }
                return error_response(&error);
            }
        };
        let record = match (&self.audit, &incoming) {
            (Some(audit), Some(incoming)) => audit.begin(&user, &info, incoming, info.is_long_running()),
            _ => audit::Record::default(),
        };
        for (key, value) in &annotations {
            record.annotate(key, value);
        }
        if !record.received().await {
            let error = ApiError::Internal("failed to store audit event".into());
            return self.finish(&record, refused(&record, &error)).await;
        }
        let served = std::panic::AssertUnwindSafe(self.authorized(&parts, &info, user, body, &record))
            .catch_unwind()
            .await;
        match served {
            Ok(response) => self.finish(&record, response).await,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|m| (*m).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                record.panicked(&message);
                std::panic::resume_unwind(panic)
            }
        }
    }

    /// The response leaving: its code in the audit event, ResponseComplete (or ResponseStarted,
    /// and ResponseComplete once the body is done, for a long-running request).
    async fn finish(&self, record: &audit::Record, response: Response<Body>) -> Response<Body> {
        match record.responding(response.status().as_u16()).await {
            None => response,
            Some(completion) => {
                response.map(|body| BodyExt::boxed_unsync(Completing { body, _completion: completion }))
            }
        }
    }

    /// Impersonation, the in-flight limits and authorization over the authenticated `user`, then
    /// the request served.
    async fn authorized(
        &self,
        parts: &http::request::Parts,
        info: &request::RequestInfo,
        user: User,
        body: Incoming,
        record: &audit::Record,
    ) -> Response<Body> {
        let impersonating = parts.headers.contains_key("impersonate-user");
        let user = match chain::impersonate(&parts.headers, user, &self.authorizer) {
            Ok(user) => user,
            Err(error) => return refused(record, &error),
        };
        if impersonating {
            record.impersonated(&user);
        }
        let _permit = match self.inflight.admit(info) {
            Ok(permit) => permit,
            Err(error) => return refused(record, &error),
        };
        if let Err(error) = chain::authorize_request(&self.authorizer, &user, info, record) {
            return refused(record, &error);
        }
        self.respond(parts, info, user, body, record).await
    }

    /// An authorized request: negotiated, routed, and its reply shaped into the form asked for.
    async fn respond(
        &self,
        parts: &http::request::Parts,
        info: &request::RequestInfo,
        user: User,
        body: Incoming,
        record: &audit::Record,
    ) -> Response<Body> {
        let (path, query) = (parts.uri.path(), parts.uri.query());
        if let Some(response) = self.openapi.serve(&parts.method, path, query, &parts.headers) {
            return response.map(|body| BodyExt::boxed_unsync(Full::new(body)));
        }
        let accept = parts.headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
        if parts.method == http::Method::GET
            && let Some((code, content_type, cache_control, body)) =
                self.discovery.as_ref().and_then(|d| d.serve(path.trim_end_matches('/'), accept))
        {
            let mut response = Response::builder()
                .status(StatusCode::from_u16(code).unwrap_or(StatusCode::OK))
                .header(header::CONTENT_TYPE, content_type);
            if let Some(cache_control) = cache_control {
                response = response.header(header::CACHE_CONTROL, cache_control);
            }
            return response
                .body(BodyExt::boxed_unsync(Full::new(body)))
                .unwrap_or_else(|_| json_response(500, &json!({})));
        }
        // nodes/proxy: the request relayed to the node's kubelet.
        if let Some((node, port, rest)) = kubelet_client::node_proxy_path(path) {
            return match self.node_proxy(parts, node, port, &rest, query, body).await {
                Ok(response) => response,
                Err(error) => refused(record, &error),
            };
        }
        // pods/proxy: the request relayed to the pod's IP.
        if let Some(proxy) = pod_proxy::pod_proxy_path(path) {
            return match self.pod_proxy(parts, &proxy, query, body).await {
                Ok(response) => response,
                Err(error) => refused(record, &error),
            };
        }
        let target = request::parse(&parts.method, path, query);
        // pods/log answers in text/plain whatever was asked for, as upstream's LogREST.
        if let Ok(Target::Resource(r)) = &target
            && r.resource.plural == "pods"
            && r.resource.group.is_empty()
            && r.subresource.as_deref() == Some("log")
            && r.verb == Verb::Get
        {
            let name = r.name.clone().unwrap_or_default();
            return match self.pod_log(r, &name, query).await {
                Ok(response) => response,
                Err(error) => refused(record, &error),
            };
        }
        // pods/exec, attach and portforward: the upgrade proxied to the pod's kubelet.
        if let Ok(Target::Resource(r)) = &target
            && r.resource.plural == "pods"
            && r.resource.group.is_empty()
            && let Some(subresource @ ("exec" | "attach" | "portforward")) = r.subresource.as_deref()
            && matches!(r.verb, Verb::Get | Verb::Create)
        {
            let name = r.name.clone().unwrap_or_default();
            return match self.pod_stream(parts, r, subresource, &name, query).await {
                Ok(response) => response,
                Err(error) => refused(record, &error),
            };
        }
        let header = |name| parts.headers.get(name).and_then(|v: &http::HeaderValue| v.to_str().ok());
        let root = path.trim_end_matches('/');
        let aggregated = parts.method == http::Method::GET && (root == "/api" || root == "/apis");
        let resource = match &target {
            Ok(Target::Resource(r)) => Some(r),
            _ => None,
        };
        // Custom resources have no protobuf form (keel_api::custom::supports_protobuf).
        let protobuf = resource.is_some_and(|r| keel_api::custom::supports_protobuf(r.resource));
        let offer = negotiate::Offer { table: true, aggregated, protobuf };
        let format = match negotiate::response_format(header(header::ACCEPT), offer) {
            Ok(format) => format,
            Err(error) => return refused(record, &error),
        };
        if let Format::AggregatedDiscovery(version) = format {
            return aggregated_discovery(root == "/api", version);
        }
        // Tables and metadata only (PartialObjectMetadata) are served for reads of resources (not
        // discovery, subresources or writes).
        let read = resource
            .filter(|r| r.subresource.is_none() && matches!(r.verb, Verb::Get | Verb::List | Verb::Watch));
        let table = match (format, read) {
            (Format::Table(version), Some(r)) => {
                let include =
                    table::IncludeObject::from_query(query_param(query, "includeObject").as_deref());
                match include {
                    Ok(include) => {
                        Some((r.resource, table::TableOptions { include, version, no_headers: false }))
                    }
                    Err(error) => return refused(record, &error),
                }
            }
            _ => None,
        };
        let metadata_only = match (format.json_form(), read) {
            (Format::Metadata(version), Some(_)) => Some(version),
            _ => None,
        };
        let fields = match resource
            .map(|_| validation::FieldValidation::parse(query_param(query, "fieldValidation").as_deref()))
        {
            Some(Err(error)) => return refused(record, &error),
            Some(Ok(fields)) => fields,
            None => validation::FieldValidation::default(),
        };
        let ctx = Context::new(
            user,
            header(header::USER_AGENT),
            query_param(query, "fieldManager"),
            fields,
            record.clone(),
        );
        let content_type = header(header::CONTENT_TYPE);
        // As upstream: /version and the health checks are written raw, not as API objects, so
        // their responses are not logged.
        let logs_object = !matches!(target, Ok(Target::Version | Target::Health(_)));
        let routed = self.route(&ctx, path, target, query, content_type, body);
        let result = chain::within_timeout(info, self.request_timeout, routed).await;
        let warnings = ctx.take_warnings();
        // A pre-serialized body is parsed again only when another form is wanted.
        let result = match result {
            Ok(Reply::Raw(code, bytes))
                if table.is_some() || metadata_only.is_some() || format == Format::Yaml =>
            {
                match serde_json::from_slice(&bytes) {
                    Ok(value) => Ok(Reply::Json(code, value)),
                    Err(e) => Err(ApiError::Internal(format!("re-reading a response: {e}"))),
                }
            }
            other => other,
        };
        let result = match (result, metadata_only) {
            (Ok(Reply::Json(code, value)), Some(version)) if code < 300 => {
                Ok(Reply::Json(code, partial_object_metadata(&value, version)))
            }
            (Ok(Reply::Watch(stream)), Some(version)) => {
                Ok(Reply::Watch(Box::pin(stream.map(move |line| {
                    let Ok(mut event) = serde_json::from_slice::<Value>(&line) else { return line };
                    if event["type"] != "ERROR" {
                        event["object"] = partial_object_metadata(&event["object"], version);
                    }
                    let mut out = serde_json::to_vec(&event).unwrap_or_default();
                    out.push(b'\n');
                    Bytes::from(out)
                }))))
            }
            (result, _) => result,
        };
        let result = match (result, table) {
            (Ok(Reply::Json(code, value)), Some((resource, options))) if code < 300 => {
                Ok(Reply::Json(code, as_table(resource, &value, options)))
            }
            (Ok(Reply::Watch(stream)), Some((resource, options))) => {
                let mut tables = table::WatchTables::new(options);
                Ok(Reply::Watch(Box::pin(
                    stream.map(move |line| watch_as_table(&mut tables, resource, &line)),
                )))
            }
            (result, _) => result,
        };
        log_response(record, &result, logs_object);
        let mut response = match result {
            result if format.is_protobuf() => protobuf::respond(result),
            Ok(Reply::Json(code, value)) if format == Format::Yaml => yaml_response(code, &value),
            Ok(Reply::Json(code, value)) => json_response(code, &value),
            Ok(Reply::Raw(code, bytes)) => Response::builder()
                .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
                .header(header::CONTENT_TYPE, "application/json")
                .body(BodyExt::boxed_unsync(Full::new(bytes)))
                .unwrap_or_else(|_| json_response(500, &json!({}))),
            Ok(Reply::Watch(_)) if format == Format::Yaml => error_response(&ApiError::NotAcceptable(
                "watch streams are served in application/json only".into(),
            )),
            Ok(Reply::Watch(stream)) => {
                let body = StreamBody::new(stream.map(|chunk| Ok::<_, Infallible>(Frame::data(chunk))));
                Response::builder()
                    .status(StatusCode::OK)
                    .header(header::CONTENT_TYPE, "application/json")
                    .header(header::TRANSFER_ENCODING, "chunked")
                    .body(BodyExt::boxed_unsync(body))
                    .unwrap_or_else(|_| json_response(500, &json!({})))
            }
            Err(error) => error_response(&error),
        };
        for warning in warnings {
            // As upstream: `299 - "<text>"`, the text with quotes and backslashes escaped.
            let text = warning.replace('\\', "\\\\").replace('"', "\\\"");
            if let Ok(value) = http::HeaderValue::from_str(&format!("299 - \"{text}\"")) {
                response.headers_mut().append(header::WARNING, value);
            }
        }
        response
    }

    async fn route(
        &self,
        ctx: &Context,
        path: &str,
        target: Result<Target, ApiError>,
        query: Option<&str>,
        content_type: Option<&str>,
        body: Incoming,
    ) -> Result<Reply, ApiError> {
        let request = match target? {
            Target::Version => return Ok(Reply::Json(200, version())),
            Target::Health(_) => return Ok(Reply::Json(200, Value::String("ok".into()))),
            Target::CoreVersions => return to_reply(discovery::api_versions(&self.address)),
            Target::Groups => return to_reply(discovery::api_group_list()),
            Target::Group(group) => {
                if !keel_api::resources::groups().contains(&group.as_str()) {
                    return Err(ApiError::NotFoundPath(path.to_owned()));
                }
                return to_reply(discovery::api_group(&group));
            }
            Target::Resources { group, version } => {
                let list = discovery::api_resource_list(&group, &version);
                return to_reply(list.ok_or_else(|| ApiError::NotFoundPath(path.to_owned()))?);
            }
            Target::Resource(request) => request,
        };
        let fields = ctx.field_validation;
        let raw_query = query;
        let query = Query::parse(query)?;
        let name = request.name.clone().unwrap_or_default();
        if request.subresource.is_some() {
            let body = match request.verb {
                Verb::Get => SubresourceBody::None,
                Verb::Update if request.subresource.as_deref() == Some("scale") => {
                    let scale = read_body(body, content_type).await?;
                    log_request_object(ctx, &request, &scale);
                    SubresourceBody::Replace(scale)
                }
                Verb::Update => {
                    let object = read_checked(ctx, body, content_type, &request, fields).await?.1;
                    log_request_object(ctx, &request, &object);
                    SubresourceBody::Replace(object)
                }
                Verb::Patch if field_manager::is_apply(content_type) => {
                    let bytes = read_bytes(body).await?;
                    log_request_patch(ctx, &request, &bytes, content_type);
                    return self.handlers.apply(ctx, &request, &name, &bytes, raw_query, query.dry_run).await;
                }
                Verb::Patch => {
                    field_manager::check_patch_options(raw_query, false)?;
                    let bytes = read_bytes(body).await?;
                    log_request_patch(ctx, &request, &bytes, content_type);
                    SubresourceBody::Patch(handlers::PatchBody::parse(&bytes, content_type)?)
                }
                Verb::Create if request.subresource.as_deref() == Some("binding") => {
                    let binding = read_body(body, content_type).await?;
                    log_request_object(ctx, &request, &binding);
                    return self.handlers.bind(&request, &name, &binding, query.dry_run).await;
                }
                Verb::Create if request.subresource.as_deref() == Some("token") => {
                    let body = read_body(body, content_type).await?;
                    log_request_object(ctx, &request, &body);
                    let namespace = request.namespace.as_deref().unwrap_or_default();
                    self.handlers.admit_token_request(ctx, namespace, &name, &body).await?;
                    let accounts = self.authenticator.service_accounts();
                    let now = tokens::now_ms().div_euclid(1000);
                    let answer =
                        self.handlers.request_token(ctx, accounts, namespace, &name, body, now).await?;
                    return Ok(Reply::Json(201, answer));
                }
                Verb::Create if request.subresource.as_deref() == Some("eviction") => {
                    let eviction = read_body(body, content_type).await?;
                    log_request_object(ctx, &request, &eviction);
                    self.handlers.admit_removal(ctx, &request, &name).await?;
                    return self.handlers.evict(&request, &name, &eviction, &query).await;
                }
                _ => return Err(ApiError::MethodNotAllowed),
            };
            return self.handlers.subresource(ctx, &request, &name, body, query.dry_run).await;
        }
        if request.resource.is_review() {
            let (_, review) = read_checked(ctx, body, content_type, &request, fields).await?;
            log_request_object(ctx, &request, &review);
            let reviewer = reviews::Reviewer { authorizer: &self.authorizer, tokens: &self.authenticator };
            return Ok(Reply::Json(201, reviewer.answer(&ctx.user, &request, review).await?));
        }
        match request.verb {
            Verb::Get => self.handlers.get(&request, &name).await,
            Verb::List => self.handlers.list(&request, &query).await,
            Verb::Watch => self.handlers.watch(&request, &query).await,
            Verb::Create => {
                let (_, object) = read_checked(ctx, body, content_type, &request, fields).await?;
                log_request_object(ctx, &request, &object);
                self.handlers.create(ctx, &request, object, query.dry_run).await
            }
            Verb::Update => {
                let (_, object) = read_checked(ctx, body, content_type, &request, fields).await?;
                log_request_object(ctx, &request, &object);
                self.handlers.update(ctx, &request, &name, object, query.dry_run).await
            }
            Verb::Patch if field_manager::is_apply(content_type) => {
                let bytes = read_bytes(body).await?;
                log_request_patch(ctx, &request, &bytes, content_type);
                self.handlers.apply(ctx, &request, &name, &bytes, raw_query, query.dry_run).await
            }
            Verb::Patch => {
                field_manager::check_patch_options(raw_query, false)?;
                let bytes = read_bytes(body).await?;
                log_request_patch(ctx, &request, &bytes, content_type);
                let patch = handlers::PatchBody::parse(&bytes, content_type)?;
                self.handlers.patch(ctx, &request, &name, &patch, query.dry_run).await
            }
            Verb::Delete | Verb::DeleteCollection => {
                let bytes = read_bytes(body).await?;
                // A `null` body decodes, as upstream's, to no options at all.
                let none = bytes.is_empty() || bytes.trim_ascii() == b"null";
                let options_body = if none { None } else { Some(objects::decode(&bytes, content_type)?) };
                if let Some(options) = &options_body {
                    ctx.audit.request_body(concerning(&request), audit::RequestBody::DeleteOptions, options);
                }
                let options = DeleteOptions::from(options_body.as_ref(), &query);
                if request.verb == Verb::Delete {
                    self.handlers.admit_removal(ctx, &request, &name).await?;
                    self.handlers.delete(&request, &name, &options).await
                } else {
                    self.handlers.delete_collection(ctx, &request, &query, &options).await
                }
            }
        }
    }
}

/// A connection's upgrade, kept in the request's extensions until a streaming subresource takes
/// it (hyper's OnUpgrade is not Clone, which extensions require).
#[derive(Clone)]
struct PendingUpgrade(Arc<std::sync::Mutex<Option<hyper::upgrade::OnUpgrade>>>);

impl ApiServer {
    /// The core/v1 object `plural` `namespace/name` as served (a 404 when there is none).
    async fn core_served(
        &self,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        let resource = keel_api::resources::find("", "v1", plural)
            .ok_or_else(|| ApiError::Internal(format!("no {plural} resource")))?;
        let key = objects::key(resource, namespace, name);
        let stored = self.handlers.store.get(&key).await.map_err(handlers::store_error)?;
        let stored = stored.ok_or_else(|| ApiError::not_found("", plural, name))?;
        objects::served(resource, &stored.value, stored.mod_revision)
    }

    /// The Node `name` as served, for the address of its kubelet.
    async fn node_for_kubelet(&self, name: &str) -> Result<Value, ApiError> {
        self.core_served("nodes", None, name).await
    }

    /// `nodes/proxy`: the request relayed to the node's kubelet (upstream's node ProxyREST over
    /// an UpgradeAwareHandler), at its kubelet port or the one the path names, and the kubelet's
    /// answer relayed back as it streams; a kubelet at a loopback or link-local address is
    /// refused (400 "address not allowed"), as upstream refuses it.
    async fn node_proxy(
        &self,
        parts: &http::request::Parts,
        name: &str,
        port: Option<u16>,
        rest: &str,
        query: Option<&str>,
        body: Incoming,
    ) -> Result<Response<Body>, ApiError> {
        let node = self.node_for_kubelet(name).await?;
        let host = kubelet_client::preferred_address(&node, &self.kubelet.preferred_address_types)
            .map_err(ApiError::Unclassified)?;
        kubelet_client::proxyable(&host).await.map_err(ApiError::BadRequest)?;
        let port = port.unwrap_or_else(|| kubelet_client::kubelet_port(&node));
        let body = Limited::new(body, 3 * 1024 * 1024)
            .collect()
            .await
            .map_err(|e| ApiError::BadRequest(format!("reading the request body: {e}")))?
            .to_bytes();
        let path = match query {
            Some(query) => format!("{rest}?{query}"),
            None => rest.to_owned(),
        };
        let forwarded = kubelet_client::Forwarded {
            method: parts.method.clone(),
            path: &path,
            content_type: parts.headers.get(header::CONTENT_TYPE).cloned(),
            body,
        };
        let answer =
            self.kubelet.send(&host, port, forwarded, false).await.map_err(ApiError::Unclassified)?;
        let (head, answer) = answer.into_parts();
        let stream = answer
            .into_data_stream()
            .take_while(|chunk| std::future::ready(chunk.is_ok()))
            .filter_map(|chunk| std::future::ready(chunk.ok().map(|b| Ok::<_, Infallible>(Frame::data(b)))));
        let mut response = Response::new(BodyExt::boxed_unsync(StreamBody::new(stream)));
        *response.status_mut() = head.status;
        if let Some(content_type) = head.headers.get(header::CONTENT_TYPE) {
            response.headers_mut().insert(header::CONTENT_TYPE, content_type.clone());
        }
        Ok(response)
    }

    /// `pods/proxy`: the request relayed to the pod's IP (upstream's pod ProxyREST over an
    /// UpgradeAwareHandler, [`pod_proxy`]): at the port the path names or the pod's first
    /// container port, over http or https as it says; the answer streamed back with its status
    /// and headers. A path ending at `proxy` is redirected to `proxy/` (GET and HEAD); an
    /// upgrade request is joined to the pod's upgraded connection.
    async fn pod_proxy(
        &self,
        parts: &http::request::Parts,
        proxy: &pod_proxy::ProxyPath,
        query: Option<&str>,
        body: Incoming,
    ) -> Result<Response<Body>, ApiError> {
        pod_proxy::refuse_dry_run(query)?;
        let Some((scheme, name, port)) = pod_proxy::split_scheme_name_port(&proxy.id) else {
            let id = keel_api::labels::go_quote(&proxy.id);
            return Err(ApiError::BadRequest(format!("invalid pod request {id}")));
        };
        let pod = self.core_served("pods", Some(&proxy.namespace), name).await?;
        let location = pod_proxy::resource_location(&pod, scheme, port)?;
        let request_host = parts
            .headers
            .get(header::HOST)
            .cloned()
            .or_else(|| parts.uri.authority().and_then(|a| http::HeaderValue::from_str(a.as_str()).ok()))
            .or_else(|| http::HeaderValue::from_str(&location.host()).ok());
        let client = parts.extensions.get::<pod_proxy::ClientAddress>().map(|c| c.0);
        let streamed = |answer: Response<Incoming>| {
            answer.map(|body| {
                let stream =
                    body.into_data_stream().take_while(|chunk| std::future::ready(chunk.is_ok())).filter_map(
                        |chunk| std::future::ready(chunk.ok().map(|b| Ok::<_, Infallible>(Frame::data(b)))),
                    );
                BodyExt::boxed_unsync(StreamBody::new(stream))
            })
        };
        let upgrade = streaming_upgrade(&parts.headers)
            .then(|| parts.extensions.get::<PendingUpgrade>())
            .flatten()
            .and_then(|pending| pending.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take());
        if let Some(upgrade) = upgrade {
            // upstream dials the location as it is: its path, not the query.
            let mut request = Request::new(body);
            *request.method_mut() = parts.method.clone();
            *request.uri_mut() = pod_proxy::request_uri(&proxy.path, None)
                .parse()
                .map_err(|e| ApiError::BadRequest(format!("the pod's path: {e}")))?;
            *request.headers_mut() = pod_proxy::upgrade_headers(&parts.headers, client);
            if let Some(host) = request_host {
                request.headers_mut().insert(header::HOST, host);
            }
            let answer = self.pod_proxy.upgrade(&location, request, upgrade).await?;
            return Ok(streamed(answer));
        }
        if proxy.path.is_empty() && matches!(parts.method, http::Method::GET | http::Method::HEAD) {
            let mut target = format!("{}/", proxy.request_path);
            if let Some(query) = query.filter(|q| !q.is_empty()) {
                target = format!("{target}?{query}");
            }
            let target = http::HeaderValue::from_bytes(target.as_bytes())
                .map_err(|e| ApiError::BadRequest(format!("the redirect: {e}")))?;
            let mut response = Response::new(BodyExt::boxed_unsync(Full::new(Bytes::new())));
            *response.status_mut() = StatusCode::MOVED_PERMANENTLY;
            response.headers_mut().insert(header::LOCATION, target);
            return Ok(response);
        }
        let prepend = pod_proxy::path_prepend(proxy);
        let mut request = Request::new(body);
        *request.method_mut() = parts.method.clone();
        *request.uri_mut() = pod_proxy::request_uri(&proxy.path, query)
            .parse()
            .map_err(|e| ApiError::BadRequest(format!("the pod's path: {e}")))?;
        *request.headers_mut() = pod_proxy::outgoing_headers(
            &parts.headers,
            client,
            &pod_proxy::forwarded_uri(&prepend, &proxy.path),
        );
        if let Some(host) = &request_host {
            request.headers_mut().insert(header::HOST, host.clone());
        }
        let mut answer = self.pod_proxy.round_trip(&location, request).await?;
        let request_host = request_host.as_ref().and_then(|h| h.to_str().ok()).unwrap_or_default();
        pod_proxy::relayed_headers(answer.headers_mut(), &location.host(), request_host, &prepend);
        Ok(streamed(answer))
    }

    /// `pods/exec`, `pods/attach`, `pods/portforward`: the client's upgrade proxied to the kubelet
    /// of the pod's node (upstream's ExecREST and siblings over an UpgradeAwareHandler with
    /// upgradeRequired: a request that is not an upgrade is a 400 "Upgrade request required").
    async fn pod_stream(
        &self,
        parts: &http::request::Parts,
        request: &request::ResourceRequest,
        subresource: &str,
        name: &str,
        query: Option<&str>,
    ) -> Result<Response<Body>, ApiError> {
        let Reply::Json(_, pod) = self.handlers.get(request, name).await? else {
            return Err(ApiError::Internal("reading the pod".into()));
        };
        let (node_name, path) = kubelet_client::stream_location(&pod, subresource, query)?;
        let upgrade = parts
            .extensions
            .get::<PendingUpgrade>()
            .and_then(|pending| pending.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take());
        let Some(upgrade) = upgrade.filter(|_| streaming_upgrade(&parts.headers)) else {
            return Err(ApiError::BadRequest("Upgrade request required".into()));
        };
        let node = self.node_for_kubelet(&node_name).await?;
        let host = kubelet_client::preferred_address(&node, &self.kubelet.preferred_address_types)
            .map_err(ApiError::Unclassified)?;
        let port = kubelet_client::kubelet_port(&node);
        let answer = self
            .kubelet
            .upgrade(&host, port, &path, &parts.method, &parts.headers, upgrade)
            .await
            .map_err(ApiError::Unclassified)?;
        Ok(answer.map(|body| BodyExt::boxed_unsync(Full::new(body))))
    }

    /// `pods/log`: the pod's container log, streamed from its node's kubelet (upstream's
    /// LogREST and LocationStreamer; an unscheduled pod's log is empty).
    async fn pod_log(
        &self,
        request: &request::ResourceRequest,
        name: &str,
        query: Option<&str>,
    ) -> Result<Response<Body>, ApiError> {
        let options = kubelet_client::PodLogOptions::from_query(query, name)?;
        let Reply::Json(_, pod) = self.handlers.get(request, name).await? else {
            return Err(ApiError::Internal("reading the pod".into()));
        };
        let text = |body: Body| {
            Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, "text/plain")
                .body(body)
                .unwrap_or_else(|_| json_response(500, &json!({})))
        };
        let Some((node_name, path)) = kubelet_client::log_location(&pod, &options)? else {
            return Ok(text(BodyExt::boxed_unsync(Full::new(Bytes::new()))));
        };
        let node = self.node_for_kubelet(&node_name).await?;
        let host = kubelet_client::preferred_address(&node, &self.kubelet.preferred_address_types)
            .map_err(ApiError::Unclassified)?;
        let port = kubelet_client::kubelet_port(&node);
        let insecure = options.insecure_skip_tls_verify_backend;
        let response =
            self.kubelet.get(&host, port, &path, insecure).await.map_err(ApiError::Unclassified)?;
        let code = response.status().as_u16();
        if !(200..=206).contains(&code) {
            // upstream reads at most 50,000 bytes of a refusal.
            let limited = Limited::new(response.into_body(), 50_000);
            let body = limited.collect().await.map(http_body_util::Collected::to_bytes).unwrap_or_default();
            return Err(kubelet_client::refused_by_kubelet(code, &String::from_utf8_lossy(&body), name));
        }
        let stream = response
            .into_body()
            .into_data_stream()
            .take_while(|chunk| std::future::ready(chunk.is_ok()))
            .filter_map(|chunk| std::future::ready(chunk.ok().map(|b| Ok::<_, Infallible>(Frame::data(b)))));
        Ok(text(BodyExt::boxed_unsync(StreamBody::new(stream))))
    }
}

/// Whether `headers` ask to switch protocols (Connection: Upgrade with an Upgrade header).
fn streaming_upgrade(headers: &http::HeaderMap) -> bool {
    let upgrade_token = headers
        .get_all(header::CONNECTION)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("upgrade"))));
    upgrade_token && headers.contains_key(header::UPGRADE)
}

/// What a logged body concerns, for [`audit::redact`].
fn concerning(request: &request::ResourceRequest) -> audit::Concerning<'_> {
    audit::Concerning {
        group: request.resource.group,
        resource: request.resource.plural,
        subresource: request.subresource.as_deref(),
    }
}

/// upstream's LogRequestObject: the body as decoded — with the defaults decoding applies upstream
/// (a main resource's or its status's), before the server's own fields are set.
fn log_request_object(ctx: &Context, request: &request::ResourceRequest, object: &Value) {
    let level = ctx.audit.level();
    if level == audit::Level::None {
        return;
    }
    let of_the_kind = matches!(request.subresource.as_deref(), None | Some("status"));
    if level >= audit::Level::Request && of_the_kind && !request.resource.is_review() {
        let mut defaulted = object.clone();
        keel_api::defaults::apply(request.resource, &mut defaulted);
        ctx.audit.request_body(concerning(request), audit::RequestBody::Object, &defaulted);
    } else {
        ctx.audit.request_body(concerning(request), audit::RequestBody::Object, object);
    }
}

/// upstream's LogRequestPatch: the patch as sent (an apply's YAML as its JSON).
fn log_request_patch(
    ctx: &Context,
    request: &request::ResourceRequest,
    bytes: &[u8],
    content_type: Option<&str>,
) {
    if ctx.audit.level() < audit::Level::Request {
        return;
    }
    let patch = serde_json::from_slice::<Value>(bytes)
        .or_else(|_| serde_yaml_ng::from_slice::<Value>(bytes).map_err(|_| ()))
        .unwrap_or_else(|()| Value::String(String::from_utf8_lossy(bytes).into_owned()));
    let json_patch = content_type.is_some_and(|t| t.starts_with("application/json-patch+json"));
    ctx.audit.request_body(concerning(request), audit::RequestBody::Patch { json_patch }, &patch);
}

async fn read_bytes(body: Incoming) -> Result<Bytes, ApiError> {
    let bytes = Limited::new(body, objects::MAX_BODY_BYTES).collect().await.map_err(|error| {
        if error.is::<http_body_util::LengthLimitError>() {
            ApiError::RequestEntityTooLarge(format!("limit is {}", objects::MAX_BODY_BYTES))
        } else {
            ApiError::BadRequest(format!("reading the request body: {error}"))
        }
    })?;
    Ok(bytes.to_bytes())
}

/// A create or update body, read and checked against the resource's type.
async fn read_checked(
    ctx: &Context,
    body: Incoming,
    content_type: Option<&str>,
    request: &request::ResourceRequest,
    fields: validation::FieldValidation,
) -> Result<(Bytes, Value), ApiError> {
    let raw = read_bytes(body).await?;
    let object = objects::decode_as(&raw, content_type, Some(request.resource))?;
    // Only JSON bodies are scanned for duplicates (the YAML parser refuses them itself).
    let scanned: &[u8] =
        if negotiate::body_type(content_type)? == negotiate::BodyType::Json { &raw } else { b"" };
    objects::check_type(&object, request.resource)?;
    let typed = validation::check(ctx, request.resource, scanned, &object, fields)?;
    Ok((raw, typed))
}

async fn read_body(body: Incoming, content_type: Option<&str>) -> Result<Value, ApiError> {
    objects::decode(&read_bytes(body).await?, content_type)
}

/// A list or one object as a Table.
fn as_table(
    resource: &'static keel_api::resources::Resource,
    value: &Value,
    options: table::TableOptions,
) -> Value {
    let now = jiff::Timestamp::now();
    match value.get("items").and_then(Value::as_array) {
        Some(items) => table::table_with(resource, items, value["metadata"].clone(), options, now),
        None => table::object_table(resource, value, options, now),
    }
}

/// One watch event line with its object as a one-row Table (only the first has column headers).
fn watch_as_table(
    tables: &mut table::WatchTables,
    resource: &'static keel_api::resources::Resource,
    line: &Bytes,
) -> Bytes {
    let Ok(mut event) = serde_json::from_slice::<Value>(line) else { return line.clone() };
    let object = event["object"].clone();
    event["object"] = tables.event_object(resource, &object, jiff::Timestamp::now());
    let mut out = serde_json::to_vec(&event).unwrap_or_default();
    out.push(b'\n');
    Bytes::from(out)
}

/// An object (or a list of them) reduced to its metadata: meta.k8s.io PartialObjectMetadata(List).
fn partial_object_metadata(value: &Value, version: &str) -> Value {
    let api_version = format!("meta.k8s.io/{version}");
    let one = |object: &Value| json!({"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": object["metadata"].clone()});
    match value.get("items").and_then(Value::as_array) {
        Some(items) => json!({
            "kind": "PartialObjectMetadataList",
            "apiVersion": api_version,
            "metadata": value["metadata"].clone(),
            "items": items.iter().map(one).collect::<Vec<_>>(),
        }),
        None => one(value),
    }
}

/// `/api` or `/apis` as an APIGroupDiscoveryList, with the media type naming it (clients tell the
/// aggregated form from the legacy one by it).
fn aggregated_discovery(core: bool, version: &str) -> Response<Body> {
    let document = discovery::aggregated(core, version);
    let mut response = json_response(200, &document);
    let media = format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList");
    if let Ok(value) = http::HeaderValue::from_str(&media) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

/// A refused request's Status, recorded in its audit event as the response.
fn refused(record: &audit::Record, error: &ApiError) -> Response<Body> {
    if record.level() != audit::Level::None {
        let status = error.to_json();
        record.log_response(Some(&status), || Some(status.clone()));
    }
    error_response(error)
}

/// upstream's LogResponseObject for what the handler answered: a Status's fields, and at
/// RequestResponse the object as served (after Table and metadata-only conversions, before
/// encoding; watches log none).
fn log_response(record: &audit::Record, result: &Result<Reply, ApiError>, logs_object: bool) {
    if record.level() == audit::Level::None {
        return;
    }
    match result {
        Ok(Reply::Json(_, value)) if logs_object => {
            let is_status = value.get("kind").and_then(Value::as_str) == Some("Status");
            record.log_response(is_status.then_some(value), || Some(value.clone()));
        }
        Ok(Reply::Raw(_, bytes)) => record.log_raw_response(bytes),
        Ok(_) => {}
        Err(error) => {
            let status = error.to_json();
            record.log_response(Some(&status), || Some(status.clone()));
        }
    }
}

/// A long-running response's body, which records the request's ResponseComplete once hyper is
/// done with it (sent whole, or the client gone).
struct Completing {
    body: Body,
    _completion: audit::Completion,
}

impl hyper::body::Body for Completing {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        hyper::body::Body::poll_frame(std::pin::Pin::new(&mut self.body), cx)
    }

    fn is_end_stream(&self) -> bool {
        hyper::body::Body::is_end_stream(&self.body)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::Body::size_hint(&self.body)
    }
}

/// A refused request's Status; a 429 says when to try again (upstream's tooManyRequests: Retry-After).
fn error_response(error: &ApiError) -> Response<Body> {
    let mut response = json_response(error.code(), &error.to_json());
    if let ApiError::TooManyRequests { retry_after_seconds, .. } = error
        && let Ok(value) = http::HeaderValue::from_str(&retry_after_seconds.to_string())
    {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// One query parameter's (percent-decoded) value.
pub(crate) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| handlers::percent_decode(value))
    })
}

fn to_reply(value: impl serde::Serialize) -> Result<Reply, ApiError> {
    serde_json::to_value(value)
        .map(|v| Reply::Json(200, v))
        .map_err(|e| ApiError::Internal(format!("encoding discovery: {e}")))
}

fn version() -> Value {
    let (major, minor) = KUBERNETES_VERSION;
    json!({
        "major": major, "minor": minor, "gitVersion": format!("v{major}.{minor}.0-keel"),
        "gitCommit": "", "gitTreeState": "clean", "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "", "compiler": "rustc", "platform": "linux/amd64"
    })
}

fn yaml_response(code: u16, value: &Value) -> Response<Body> {
    if let Value::String(_) = value {
        return json_response(code, value);
    }
    match serde_yaml_ng::to_string(value) {
        Ok(text) => Response::builder()
            .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
            .header(header::CONTENT_TYPE, "application/yaml")
            .body(BodyExt::boxed_unsync(Full::new(Bytes::from(text))))
            .unwrap_or_else(|_| json_response(500, &json!({}))),
        Err(_) => json_response(code, value),
    }
}

fn json_response(code: u16, value: &Value) -> Response<Body> {
    let (body, content_type) = match value {
        // Health checks answer in plain text, as upstream.
        Value::String(text) => (Bytes::from(text.clone()), "text/plain; charset=utf-8"),
        other => (Bytes::from(serde_json::to_vec(other).unwrap_or_default()), "application/json"),
    };
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, content_type)
        .body(BodyExt::boxed_unsync(Full::new(body)))
        .unwrap_or_else(|_| Response::new(BodyExt::boxed_unsync(Full::new(Bytes::new()))))
}
