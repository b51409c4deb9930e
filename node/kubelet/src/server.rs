//! The kubelet API on :10250 (upstream's pkg/kubelet/server): HTTPS with a serving certificate
//! (`--tls-cert-file`, or one made once under `--cert-dir` as upstream's self-signed default);
//! each request authenticated (a client certificate from `--client-ca-file`, a bearer token
//! through TokenReview with `--authentication-token-webhook`, else anonymous when
//! `--anonymous-auth`) and authorized (AlwaysAllow, or Webhook: a SubjectAccessReview on
//! `nodes/<subresource>` as upstream's nodeAuthorizerAttributesGetter names it, `nodes/pods` and
//! `nodes/healthz` tried before `nodes/proxy`). Served: `/healthz`, `/pods` and
//! `/containerLogs/{namespace}/{pod}/{container}` with every PodLogOptions field.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_cri::v1 as cri;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use rustls::RootCertStore;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use tokio::io::{AsyncBufReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

use crate::container_logs::{Format, LogOptions, LogWriter, log_container_id};
use crate::pods::Kubelet;

type Body = UnsyncBoxBody<Bytes, Infallible>;

/// How the API is served and who may use it.
#[derive(Debug, Clone)]
pub struct ServerConfigFlags {
    pub address: SocketAddr,
    /// `--tls-cert-file` and `--tls-private-key-file`; none: a self-signed pair under `cert_dir`.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// serverTLSBootstrap: the certificate the kubelet-serving signer issued (over `tls`).
    pub serving: Option<Arc<crate::bootstrap::ServingCertificate>>,
    pub cert_dir: PathBuf,
    /// `--client-ca-file`: the CA client certificates are verified against.
    pub client_ca_file: Option<PathBuf>,
    /// `--anonymous-auth` (upstream's flag default: true).
    pub anonymous: bool,
    /// `--authentication-token-webhook`.
    pub token_webhook: bool,
    /// `--authorization-mode`: AlwaysAllow, or Webhook.
    pub authorization: Authorization,
    /// How long a token review, an allowed and a denied SubjectAccessReview are cached
    /// (authentication.webhook.cacheTTL, authorization.webhook.cacheAuthorizedTTL and
    /// cacheUnauthorizedTTL: 2 min, 5 min, 30 s).
    pub token_cache_ttl: Duration,
    pub authorized_ttl: Duration,
    pub unauthorized_ttl: Duration,
    /// The Node's name (the SubjectAccessReviews' object) and host name (the self-signed SAN).
    pub node_name: String,
    pub hostname: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authorization {
    AlwaysAllow,
    Webhook,
}

impl std::str::FromStr for Authorization {
    type Err = String;
    fn from_str(text: &str) -> Result<Authorization, String> {
        match text {
            "AlwaysAllow" => Ok(Authorization::AlwaysAllow),
            "Webhook" => Ok(Authorization::Webhook),
            other => Err(format!("unknown authorization mode {other:?}: AlwaysAllow or Webhook")),
        }
    }
}

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// The nodes subresources a request's path is authorized as, in the order they are tried
/// (upstream's GetRequestAttributes with KubeletFineGrainedAuthz on, as in 1.34).
pub fn subresources(path: &str) -> Vec<&'static str> {
    let under =
        |prefix: &str| path == prefix || path.strip_prefix(prefix).is_some_and(|r| r.starts_with('/'));
    let mut all = Vec::new();
    if under("/pods") || under("/runningpods") {
        all.push("pods");
    } else if under("/healthz") {
        all.push("healthz");
    } else if under("/configz") {
        all.push("configz");
    }
    all.push(if under("/stats") {
        "stats"
    } else if under("/metrics") {
        "metrics"
    } else if under("/logs") {
        "log"
    } else if under("/checkpoint") {
        "checkpoint"
    } else if under("/statusz") {
        "statusz"
    } else if under("/flagz") {
        "configz"
    } else {
        "proxy"
    });
    all
}

/// The API verb of an HTTP method, as upstream maps them.
pub fn verb(method: &hyper::Method) -> &'static str {
    match *method {
        hyper::Method::POST => "create",
        hyper::Method::GET => "get",
        hyper::Method::PUT => "update",
        hyper::Method::PATCH => "patch",
        hyper::Method::DELETE => "delete",
        _ => "",
    }
}

/// The serving certificate chain and key: the files given, or `<cert-dir>/kubelet.crt` and
/// `kubelet.key`, made once (a CA `<host>-ca@<unix time>` signing `<host>@<unix time>` for the
/// host name, valid a year, both in the .crt) as upstream's GenerateSelfSignedCertKey.
fn serving_pair(
    flags: &ServerConfigFlags,
) -> anyhow::Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)> {
    use anyhow::Context;
    let (cert, key) = match &flags.tls {
        Some(pair) => pair.clone(),
        None => {
            let (cert, key) = (flags.cert_dir.join("kubelet.crt"), flags.cert_dir.join("kubelet.key"));
            if !(cert.exists() && key.exists()) {
                write_self_signed(&flags.hostname, &cert, &key)?;
            }
            (cert, key)
        }
    };
    let chain = CertificateDer::pem_file_iter(&cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .with_context(|| format!("reading {}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(&key).with_context(|| format!("reading {}", key.display()))?;
    Ok((chain, key))
}

fn write_self_signed(host: &str, cert_path: &Path, key_path: &Path) -> anyhow::Result<()> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    let now = Timestamp::now().as_second();
    let year = time::Duration::days(365);
    let start = time::OffsetDateTime::now_utc() - time::Duration::hours(1);
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, format!("{host}-ca@{now}"));
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    (ca.not_before, ca.not_after) = (start, start + year);
    let ca_cert = ca.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(vec![host.to_owned()])?;
    leaf.distinguished_name.push(DnType::CommonName, format!("{host}@{now}"));
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    (leaf.not_before, leaf.not_after) = (start, start + year);
    let issuer = Issuer::new(ca, ca_key);
    let cert = leaf.signed_by(&key, &issuer)?;
    if let Some(dir) = cert_path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(cert_path, format!("{}{}", cert.pem(), ca_cert.pem()))?;
    std::fs::write(key_path, key.serialize_pem())?;
    std::fs::set_permissions(key_path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(())
}

fn tls_config(flags: &ServerConfigFlags) -> anyhow::Result<Arc<ServerConfig>> {
    use anyhow::Context;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let resolver: Arc<dyn rustls::server::ResolvesServerCert> = match &flags.serving {
        Some(serving) => serving.clone(),
        None => {
            let (chain, key) = serving_pair(flags)?;
            let signing = rustls::crypto::ring::sign::any_supported_type(&key)?;
            Arc::new(rustls::sign::SingleCertAndKey::from(rustls::sign::CertifiedKey::new(chain, signing)))
        }
    };
    let builder =
        ServerConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
    let mut config = match &flags.client_ca_file {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for ca in
                CertificateDer::pem_file_iter(path).with_context(|| format!("reading {}", path.display()))?
            {
                roots.add(ca?)?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()?;
            builder.with_client_cert_verifier(verifier).with_cert_resolver(resolver)
        }
        None => builder.with_no_client_auth().with_cert_resolver(resolver),
    };
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A time-bounded cache of webhook answers (upstream caches TokenReviews 2 min, authorized
/// SubjectAccessReviews 5 min and denied ones 30 s).
#[derive(Debug, Default)]
struct Cache<V> {
    entries: Mutex<HashMap<String, (V, Instant)>>,
}

impl<V: Clone> Cache<V> {
    fn get(&self, key: &str) -> Option<V> {
        let entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.get(key).filter(|(_, until)| Instant::now() < *until).map(|(v, _)| v.clone())
    }

    fn put(&self, key: String, value: V, ttl: Duration) {
        let mut entries = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        entries.retain(|_, (_, until)| now < *until);
        entries.insert(key, (value, now + ttl));
    }
}

/// The server's state: the kubelet it answers for and its webhook caches.
struct Server {
    kubelet: Arc<Kubelet>,
    flags: ServerConfigFlags,
    tokens: Cache<Option<User>>,
    decisions: Cache<bool>,
    /// The node's last CPU and memory sample, for the rate of its CPU use.
    node_sample: Mutex<Option<crate::stats::NodeSample>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("flags", &self.flags).finish_non_exhaustive()
    }
}

fn text(code: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    typed(code, "text/plain; charset=utf-8", body)
}

/// The Prometheus text format's Content-Type.
const PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";

fn typed(code: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).boxed_unsync());
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static(content_type));
    response
}

/// The user of a verified client certificate: CN the name, each O a group.
fn certificate_user(certificate: &CertificateDer<'_>) -> Option<User> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate).ok()?;
    let subject = parsed.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_owned();
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok().map(str::to_owned)).collect();
    Some(User { name, uid: String::new(), groups, extra: Default::default() })
}

impl Server {
    /// Who sent `request` (upstream's authenticator union, anonymous last and only when nothing
    /// else failed): Err for 401.
    async fn authenticate(
        &self,
        request: &Request<Incoming>,
        peer: Option<&CertificateDer<'static>>,
    ) -> Result<User, ()> {
        if let Some(user) = peer.and_then(certificate_user) {
            return Ok(user);
        }
        let token = request
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().split_once(' '))
            .filter(|(scheme, token)| scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty())
            .map(|(_, token)| token.trim().to_owned());
        if let Some(token) = token.filter(|_| self.flags.token_webhook) {
            if let Some(answer) = self.tokens.get(&token) {
                return answer.ok_or(());
            }
            let review = TokenReview {
                spec: TokenReviewSpec { token: Some(token.clone()), audiences: None },
                ..TokenReview::default()
            };
            let api: Api<TokenReview> = Api::all(self.kubelet.client.clone());
            let answer = match api.create(&PostParams::default(), &review).await {
                Ok(review) => {
                    review.status.filter(|s| s.authenticated == Some(true)).and_then(|s| s.user).map(|u| {
                        User {
                            name: u.username.unwrap_or_default(),
                            uid: u.uid.unwrap_or_default(),
                            groups: u.groups.unwrap_or_default(),
                            extra: u.extra.unwrap_or_default(),
                        }
                    })
                }
                Err(error) => {
                    tracing::warn!(%error, "reviewing a bearer token");
                    return Err(());
                }
            };
            self.tokens.put(token, answer.clone(), self.flags.token_cache_ttl);
            return answer.ok_or(());
        }
        if self.flags.anonymous {
            return Ok(User {
                name: "system:anonymous".into(),
                uid: String::new(),
                groups: vec!["system:unauthenticated".into()],
                extra: Default::default(),
            });
        }
        Err(())
    }

    /// Whether `user` may `verb` the node's `subresource` (a SubjectAccessReview in Webhook mode).
    async fn authorize(&self, user: &User, verb: &str, subresource: &str) -> Result<bool, String> {
        if self.flags.authorization == Authorization::AlwaysAllow {
            return Ok(true);
        }
        let key = format!("{user:?}/{verb}/{subresource}");
        if let Some(allowed) = self.decisions.get(&key) {
            return Ok(allowed);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.to_owned()),
                    version: Some("v1".into()),
                    resource: Some("nodes".into()),
                    subresource: Some(subresource.to_owned()),
                    name: Some(self.flags.node_name.clone()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.kubelet.client.clone());
        let review = api.create(&PostParams::default(), &review).await.map_err(|e| e.to_string())?;
        let allowed = review.status.is_some_and(|s| s.allowed);
        let ttl = if allowed { self.flags.authorized_ttl } else { self.flags.unauthorized_ttl };
        self.decisions.put(key, allowed, ttl);
        Ok(allowed)
    }

    async fn handle(
        self: Arc<Self>,
        request: Request<Incoming>,
        peer: Option<CertificateDer<'static>>,
    ) -> Response<Body> {
        let Ok(user) = self.authenticate(&request, peer.as_ref()).await else {
            return text(StatusCode::UNAUTHORIZED, "Unauthorized");
        };
        let path = request.uri().path().to_owned();
        let verb = verb(request.method());
        let tried = subresources(&path);
        let mut allowed = false;
        for subresource in &tried {
            match self.authorize(&user, verb, subresource).await {
                Ok(true) => {
                    allowed = true;
                    break;
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%error, user = user.name, verb, subresource, "authorizing a kubelet API request");
                    let message = format!(
                        "Authorization error (user={}, verb={verb}, resource=nodes, subresource={subresource})",
                        user.name
                    );
                    return text(StatusCode::INTERNAL_SERVER_ERROR, message);
                }
            }
        }
        if !allowed {
            let message = format!(
                "Forbidden (user={}, verb={verb}, resource=nodes, subresource(s)=[{}])\n",
                user.name,
                tried.join(" ")
            );
            return text(StatusCode::FORBIDDEN, message);
        }
        let query = request.uri().query().unwrap_or_default().to_owned();
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let method = request.method().clone();
        match (&method, segments.as_slice()) {
            (&hyper::Method::GET, ["healthz", ..]) => text(StatusCode::OK, "ok"),
            (&hyper::Method::GET, ["pods"] | ["pods", ""]) => self.pods(),
            (&hyper::Method::GET, ["stats", "summary"]) => match self.summary().await {
                Ok(summary) => typed(
                    StatusCode::OK,
                    "application/json",
                    serde_json::to_vec(&summary).unwrap_or_default(),
                ),
                Err(message) => text(StatusCode::INTERNAL_SERVER_ERROR, message),
            },
            (&hyper::Method::GET, ["metrics"]) => match self.running().await {
                Ok(running) => typed(
                    StatusCode::OK,
                    PROMETHEUS,
                    crate::stats::kubelet_metrics(&self.kubelet.node_name, &running),
                ),
                Err(message) => text(StatusCode::INTERNAL_SERVER_ERROR, message),
            },
            (&hyper::Method::GET, ["metrics", "resource"]) => match self.summary().await {
                Ok(summary) => typed(StatusCode::OK, PROMETHEUS, crate::stats::resource_metrics(&summary)),
                Err(message) => text(StatusCode::INTERNAL_SERVER_ERROR, message),
            },
            (&hyper::Method::GET, ["containerLogs", namespace, pod, container]) => {
                self.container_logs(namespace, pod, container, &query).await
            }
            (&hyper::Method::GET, ["containerLogs", ..]) => {
                text(StatusCode::BAD_REQUEST, r#"{"message": "Missing container name."}"#)
            }
            (
                &hyper::Method::GET | &hyper::Method::POST,
                [kind @ ("exec" | "attach"), namespace, pod, rest @ ..],
            ) if matches!(rest.len(), 1 | 2) => {
                let (uid, container) = match rest {
                    [uid, container] => (Some(*uid), *container),
                    _ => (None, rest[0]),
                };
                let (kind, namespace, pod, container) =
                    ((*kind).to_owned(), (*namespace).to_owned(), (*pod).to_owned(), container.to_owned());
                self.stream(request, &kind, &namespace, &pod, uid.map(str::to_owned), &container, &query)
                    .await
            }
            (&hyper::Method::GET | &hyper::Method::POST, ["portForward", namespace, pod, rest @ ..])
                if rest.len() <= 1 =>
            {
                let (namespace, pod, uid) =
                    ((*namespace).to_owned(), (*pod).to_owned(), rest.first().map(|u| (*u).to_owned()));
                self.port_forward(request, &namespace, &pod, uid, &query).await
            }
            (&hyper::Method::POST, ["run", namespace, pod, rest @ ..]) if matches!(rest.len(), 1 | 2) => {
                let container = rest[rest.len() - 1];
                let uid = (rest.len() == 2).then(|| rest[0]);
                self.run(namespace, pod, uid, container, &query).await
            }
            _ => text(StatusCode::NOT_FOUND, "404 page not found"),
        }
    }

    /// The pod `namespace/name` (of `uid` when given) and what the runtime holds of it;
    /// upstream's 404 "pod does not exist".
    async fn runtime_pod(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
    ) -> Result<(Pod, crate::pod_runtime::PodRuntime), Response<Body>> {
        let pod = self
            .kubelet
            .pod_by_name(namespace, name)
            .filter(|p| uid.is_none_or(|uid| p.metadata.uid.as_deref() == Some(uid)));
        let Some(pod) = pod else { return Err(text(StatusCode::NOT_FOUND, "pod does not exist")) };
        let mut cri = self.kubelet.cri.clone();
        match cri.pod(pod.metadata.uid.as_deref().unwrap_or_default()).await {
            Ok(runtime) => Ok((pod, runtime)),
            Err(status) => Err(text(StatusCode::INTERNAL_SERVER_ERROR, status.message().to_owned())),
        }
    }

    /// The running container `name` of a pod's runtime; upstream's findContainer error (500).
    fn running_container(
        runtime: &crate::pod_runtime::PodRuntime,
        name: &str,
    ) -> Result<String, Box<Response<Body>>> {
        runtime.running().find(|c| c.name == name).map(|c| c.id.clone()).ok_or_else(|| {
            Box::new(text(StatusCode::INTERNAL_SERVER_ERROR, format!("container not found ({name:?})")))
        })
    }

    /// `/exec` and `/attach`: CRI Exec or Attach, then the client's upgrade proxied to the
    /// runtime's stream.
    #[expect(clippy::too_many_arguments, reason = "one request's route parameters")]
    async fn stream(
        &self,
        request: Request<Incoming>,
        kind: &str,
        namespace: &str,
        pod: &str,
        uid: Option<String>,
        container: &str,
        query: &str,
    ) -> Response<Body> {
        let options = match crate::streaming::stream_options(query) {
            Ok(options) => options,
            Err(message) => return text(StatusCode::BAD_REQUEST, message),
        };
        let (_, runtime) = match self.runtime_pod(namespace, pod, uid.as_deref()).await {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        let id = match Self::running_container(&runtime, container) {
            Ok(id) => id,
            Err(refused) => return *refused,
        };
        let mut cri = self.kubelet.cri.clone();
        let url = if kind == "exec" {
            let exec = cri::ExecRequest {
                container_id: id,
                cmd: options.command,
                tty: options.tty,
                stdin: options.stdin,
                stdout: options.stdout,
                stderr: options.stderr,
            };
            cri.runtime.exec(exec).await.map(|r| r.into_inner().url)
        } else {
            let attach = cri::AttachRequest {
                container_id: id,
                stdin: options.stdin,
                tty: options.tty,
                stdout: options.stdout,
                stderr: options.stderr,
            };
            cri.runtime.attach(attach).await.map(|r| r.into_inner().url)
        };
        match url {
            Ok(url) => crate::streaming::proxy_upgrade(request, &url).await,
            Err(status) => cri_refusal(&status),
        }
    }

    /// `/portForward`: CRI PortForward on the pod's sandbox, then the upgrade proxied.
    async fn port_forward(
        &self,
        request: Request<Incoming>,
        namespace: &str,
        pod: &str,
        uid: Option<String>,
        query: &str,
    ) -> Response<Body> {
        let ports = match crate::streaming::forwarded_ports(query) {
            Ok(ports) => ports,
            Err(message) => return text(StatusCode::BAD_REQUEST, message),
        };
        let (_, runtime) = match self.runtime_pod(namespace, pod, uid.as_deref()).await {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        let Some(sandbox) = runtime.sandboxes.first() else {
            return text(StatusCode::INTERNAL_SERVER_ERROR, format!("pod not found ({pod:?})"));
        };
        let mut cri = self.kubelet.cri.clone();
        let forward = cri::PortForwardRequest { pod_sandbox_id: sandbox.id.clone(), port: ports };
        match cri.runtime.port_forward(forward).await {
            Ok(answer) => crate::streaming::proxy_upgrade(request, &answer.into_inner().url).await,
            Err(status) => cri_refusal(&status),
        }
    }

    /// `/run`: the command of the `cmd` query (split at spaces, as upstream) run through
    /// ExecSync; its output, or the error.
    async fn run(
        &self,
        namespace: &str,
        pod: &str,
        uid: Option<&str>,
        container: &str,
        query: &str,
    ) -> Response<Body> {
        let command: Vec<String> = form_urlencoded::parse(query.as_bytes())
            .filter(|(key, _)| key == "cmd")
            .flat_map(|(_, value)| value.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .collect();
        let (_, runtime) = match self.runtime_pod(namespace, pod, uid).await {
            Ok(found) => found,
            Err(refused) => return refused,
        };
        let id = match Self::running_container(&runtime, container) {
            Ok(id) => id,
            Err(refused) => return *refused,
        };
        let mut cri = self.kubelet.cri.clone();
        let request = cri::ExecSyncRequest { container_id: id, cmd: command, timeout: 0 };
        match cri.runtime.exec_sync(request).await {
            Ok(answer) => {
                let answer = answer.into_inner();
                let mut output = answer.stdout;
                output.extend(answer.stderr);
                text(StatusCode::OK, output)
            }
            Err(status) => cri_refusal(&status),
        }
    }

    /// What the runtime runs of the pods the kubelet knows (upstream's runtime cache for its
    /// running pods and containers gauges).
    async fn running(&self) -> Result<crate::stats::Running, String> {
        let mut cri = self.kubelet.cri.clone();
        let failed = |status: tonic::Status| format!("listing the runtime's pods: {}", status.message());
        let sandboxes = cri.runtime.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }).await;
        let containers = cri.runtime.list_containers(cri::ListContainersRequest { filter: None }).await;
        let (sandboxes, containers) =
            (sandboxes.map_err(failed)?.into_inner(), containers.map_err(failed)?.into_inner());
        let mut running = crate::stats::Running { pleg: self.kubelet.pleg.counts(), ..Default::default() };
        let ready = cri::PodSandboxState::SandboxReady as i32;
        running.pods = sandboxes
            .items
            .iter()
            .filter(|s| s.state == ready && s.labels.contains_key("io.kubernetes.pod.uid"))
            .count();
        for container in
            containers.containers.iter().filter(|c| c.labels.contains_key("io.kubernetes.pod.uid"))
        {
            *running.containers.entry(crate::stats::container_state(container.state)).or_default() += 1;
        }
        Ok(running)
    }

    /// The node's and its pods' resource usage now (see [`crate::stats`]).
    async fn summary(&self) -> Result<crate::stats::Summary, String> {
        use crate::stats;
        let read = |path: &str| std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"));
        let (proc_stat, meminfo) = (read("/proc/stat")?, read("/proc/meminfo")?);
        let now = Timestamp::now();
        // /proc/stat counts in USER_HZ, 100 on every Linux ABI.
        let cpu_core_nanos = stats::cpu_core_nanos(&proc_stat, 100).ok_or("no cpu line in /proc/stat")?;
        let sample = stats::NodeSample { time: now, cpu_core_nanos, memory: stats::meminfo(&meminfo) };
        let previous =
            self.node_sample.lock().unwrap_or_else(std::sync::PoisonError::into_inner).replace(sample);
        let fs = nix::sys::statvfs::statvfs(&self.kubelet.root_dir).ok().map(|fs| {
            let fragment = fs.fragment_size();
            let capacity = fs.blocks() * fragment;
            let available = fs.blocks_available() * fragment;
            (capacity, available, fs.files(), fs.files_available())
        });
        let mut cri = self.kubelet.cri.clone();
        let containers = cri
            .runtime
            .list_container_stats(cri::ListContainerStatsRequest { filter: None })
            .await
            .map_err(|status| format!("listing container stats: {}", status.message()))?
            .into_inner()
            .stats;
        let pods = self.kubelet.pods();
        let started: BTreeMap<String, i64> = pods
            .iter()
            .filter_map(|pod| self.kubelet.status_of(pod.metadata.uid.as_deref()?))
            .flat_map(|status| {
                status
                    .init_container_statuses
                    .into_iter()
                    .flatten()
                    .chain(status.container_statuses.into_iter().flatten())
            })
            .filter_map(|c| {
                let id = c.container_id?.split_once("://")?.1.to_owned();
                let started = c.state?.running?.started_at?.0;
                Some((id, i64::try_from(started.as_nanosecond()).ok()?))
            })
            .collect();
        let inputs = stats::Inputs {
            node_name: &self.kubelet.node_name,
            boot_time: stats::boot_time(&proc_stat).unwrap_or(now),
            fs,
            pods: &pods,
            containers: &containers,
            started: &started,
        };
        Ok(stats::summary(now, &sample, previous.as_ref(), &inputs))
    }

    /// `/pods`: a v1 PodList of the pods bound here, as the API last gave them.
    fn pods(&self) -> Response<Body> {
        let list = serde_json::json!({
            "kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": self.kubelet.pods(),
        });
        typed(StatusCode::OK, "application/json", serde_json::to_vec(&list).unwrap_or_default())
    }

    async fn container_logs(
        &self,
        namespace: &str,
        name: &str,
        container: &str,
        query: &str,
    ) -> Response<Body> {
        let options = match LogOptions::from_query(query) {
            Ok(options) => options,
            Err(refused) => {
                return text(
                    StatusCode::from_u16(refused.code).unwrap_or(StatusCode::BAD_REQUEST),
                    refused.message,
                );
            }
        };
        let Some(pod) = self.kubelet.pod_by_name(namespace, name) else {
            return text(StatusCode::NOT_FOUND, format!("pod {name:?} does not exist"));
        };
        let spec = pod.spec.as_ref();
        let known = spec.iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()));
        if !known.into_iter().any(|c| c.name == container) {
            return text(StatusCode::NOT_FOUND, format!("container {container:?} not found in pod {name:?}"));
        }
        let status = self
            .kubelet
            .status_of(pod.metadata.uid.as_deref().unwrap_or_default())
            .or_else(|| pod.status.clone())
            .unwrap_or_default();
        let id = match log_container_id(name, &status, container, options.previous) {
            Ok(id) => id,
            Err(message) => return text(StatusCode::BAD_REQUEST, message),
        };
        let bare = id.split_once("://").map_or(id.as_str(), |(_, bare)| bare).to_owned();
        let mut cri = self.kubelet.cri.clone();
        let request = cri::ContainerStatusRequest { container_id: bare.clone(), verbose: false };
        let log_path = match cri.runtime.container_status(request).await {
            Ok(answer) => answer.into_inner().status.map(|s| s.log_path).unwrap_or_default(),
            Err(status) => {
                let message = format!(
                    "failed to get container status {id:?}: rpc error: code = {:?} desc = {}",
                    status.code(),
                    status.message()
                );
                return text(StatusCode::BAD_REQUEST, message);
            }
        };
        let file = match open_log(&log_path).await {
            Ok(file) => file,
            Err(message) => return text(StatusCode::BAD_REQUEST, message),
        };
        let (sender, receiver) = mpsc::channel::<Bytes>(16);
        tokio::spawn(stream_log(file, log_path, options, cri, bare, sender));
        let stream = futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|chunk| (Ok::<_, Infallible>(Frame::data(chunk)), receiver))
        });
        let mut response = Response::new(StreamBody::new(stream).boxed_unsync());
        response.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
}

async fn open_log(path: &str) -> Result<tokio::fs::File, String> {
    let resolved = tokio::fs::canonicalize(path)
        .await
        .map_err(|e| format!("failed to try resolving symlinks in path {path:?}: {e}"))?;
    tokio::fs::File::open(&resolved).await.map_err(|e| format!("failed to open log file {path:?}: {e}"))
}

/// How often a followed log is looked at again when it has nothing new (upstream waits on
/// fsnotify events; a poll this short is as prompt for a reader and needs no watch descriptor).
const FOLLOW_POLL: Duration = Duration::from_millis(100);

/// Sends the log at `path` from where its tail starts, then, when following, what is appended
/// until the container stops running or the reader goes away (upstream's ReadLogs).
async fn stream_log(
    mut file: tokio::fs::File,
    path: String,
    options: LogOptions,
    mut cri: crate::runtime::Cri,
    container_id: String,
    sender: mpsc::Sender<Bytes>,
) {
    let tail = options.tail_lines.unwrap_or(-1);
    let start = {
        let std_file = match file.try_clone().await {
            Ok(clone) => clone.into_std().await,
            Err(_) => return,
        };
        let mut std_file = std_file;
        tokio::task::spawn_blocking(move || crate::container_logs::tail_start(&mut std_file, tail))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(0)
    };
    if file.seek(std::io::SeekFrom::Start(start)).await.is_err() {
        return;
    }
    let limited = tail >= 0 && !options.follow;
    let mut left = tail;
    let mut reader = tokio::io::BufReader::new(file);
    let mut writer = LogWriter::new(&options, Timestamp::now());
    let mut format = None;
    let mut line = Vec::new();
    let (mut checked, mut found) = (Instant::now(), true);
    loop {
        if limited && left == 0 {
            return;
        }
        let read = reader.read_until(b'\n', &mut line).await;
        let complete = line.last() == Some(&b'\n');
        match read {
            Err(error) => {
                tracing::warn!(%error, path, "reading a container log");
                return;
            }
            Ok(_) if !complete && options.follow => {
                // At the end: once the container no longer runs, one more read ends it (as
                // upstream's `found`); a rotated file is opened again; else wait for more.
                if !found || sender.is_closed() {
                    return;
                }
                if checked.elapsed() < Duration::from_secs(1) {
                    tokio::time::sleep(FOLLOW_POLL).await;
                    continue;
                }
                checked = Instant::now();
                if reopened(&path, reader.get_mut()).await {
                    match tokio::fs::File::open(&path).await {
                        Ok(file) => reader = tokio::io::BufReader::new(file),
                        Err(_) => continue,
                    }
                } else {
                    found = running(&mut cri, &container_id).await;
                }
                continue;
            }
            Ok(0) => return,
            Ok(_) => {}
        }
        checked = Instant::now();
        let format = match format {
            Some(format) => format,
            None => match Format::of(&line) {
                Some(found) => *format.insert(found),
                None => {
                    tracing::warn!(path, "unsupported log format");
                    return;
                }
            },
        };
        let message = format.parse(&line);
        line.clear();
        let Ok(message) = message else { continue };
        let written = writer.write(&message);
        if !written.bytes.is_empty() && sender.send(Bytes::from(written.bytes)).await.is_err() {
            return;
        }
        if written.done {
            return;
        }
        if limited {
            left -= 1;
        }
    }
}

async fn running(cri: &mut crate::runtime::Cri, id: &str) -> bool {
    let request = cri::ContainerStatusRequest { container_id: id.to_owned(), verbose: false };
    match cri.runtime.container_status(request).await {
        Ok(answer) => answer
            .into_inner()
            .status
            .is_some_and(|s| s.state == cri::ContainerState::ContainerRunning as i32),
        // upstream: an unavailable runtime may come back; anything else ends the follow.
        Err(status) => status.code() == tonic::Code::Unavailable,
    }
}

/// Whether the file at `path` is no longer the one open (rotated or recreated).
async fn reopened(path: &str, open: &mut tokio::fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(now), Ok(held)) = (tokio::fs::metadata(path).await, open.metadata().await) else { return false };
    now.ino() != held.ino() || now.dev() != held.dev()
}

/// Serves the kubelet API until the task is dropped.
pub async fn serve(kubelet: Arc<Kubelet>, flags: ServerConfigFlags) -> anyhow::Result<()> {
    use anyhow::Context;
    let tls = tls_config(&flags)?;
    let listener = tokio::net::TcpListener::bind(flags.address)
        .await
        .with_context(|| format!("listening on {}", flags.address))?;
    tracing::info!(address = %flags.address, "serving the kubelet API");
    let server = Arc::new(Server {
        kubelet,
        flags,
        tokens: Cache::default(),
        decisions: Cache::default(),
        node_sample: Mutex::new(None),
    });
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accepting a kubelet API connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (server, acceptor) = (server.clone(), acceptor.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(stream).await else { return };
            let peer = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.clone().into_owned());
            let service = hyper::service::service_fn(move |request| {
                let (server, peer) = (server.clone(), peer.clone());
                async move { Ok::<_, Infallible>(server.handle(request, peer).await) }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let _ = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).await;
        });
    }
}

/// A runtime's refusal as upstream's streaming.WriteError answers it: NotFound 404, ResourceExhausted
/// 429, anything else 500, the error's text as the body.
fn cri_refusal(status: &tonic::Status) -> Response<Body> {
    let code = match status.code() {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    text(code, format!("rpc error: code = {:?} desc = {}", status.code(), status.message()))
}

/// Serves upstream's plain-HTTP healthz endpoint (healthzBindAddress:healthzPort): `ok` on
/// `/healthz`, 404 elsewhere, until the task is dropped.
pub async fn serve_healthz(address: SocketAddr) -> anyhow::Result<()> {
    use anyhow::Context;
    let listener =
        tokio::net::TcpListener::bind(address).await.with_context(|| format!("listening on {address}"))?;
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        tokio::spawn(async move {
            let service = hyper::service::service_fn(|request: Request<Incoming>| async move {
                let answer = if request.uri().path() == "/healthz" {
                    text(StatusCode::OK, "ok")
                } else {
                    text(StatusCode::NOT_FOUND, "404 page not found\n")
                };
                Ok::<_, Infallible>(answer)
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let _ = builder.serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_authorize_as_upstream_names_them() {
        assert_eq!(subresources("/pods"), ["pods", "proxy"]);
        assert_eq!(subresources("/healthz/ping"), ["healthz", "proxy"]);
        assert_eq!(subresources("/podsx"), ["proxy"]);
        assert_eq!(subresources("/stats/summary"), ["stats"]);
        assert_eq!(subresources("/metrics/cadvisor"), ["metrics"]);
        assert_eq!(subresources("/logs/"), ["log"]);
        assert_eq!(subresources("/containerLogs/ns/p/c"), ["proxy"]);
        assert_eq!(verb(&hyper::Method::POST), "create");
    }
}
