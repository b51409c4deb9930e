//! The API server's side of the kubelet API (upstream's pkg/kubelet/client and the pods/log
//! REST): the address and port that reach a node's kubelet (`--kubelet-preferred-address-types`,
//! the Node's daemonEndpoints), the PodLogOptions of a `pods/log` request and the kubelet path
//! they become, and the HTTPS client (`--kubelet-client-certificate`/`--kubelet-client-key`;
//! the kubelet's certificate verified against `--kubelet-certificate-authority`, or not at all
//! without one, as upstream).

use std::sync::Arc;

use keel_api::status::{ApiError, FieldError};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};
use serde_json::{Value, json};

/// upstream's default `--kubelet-preferred-address-types`.
pub const DEFAULT_ADDRESS_TYPES: &[&str] =
    &["Hostname", "InternalDNS", "InternalIP", "ExternalDNS", "ExternalIP"];

/// The kubelet port when a Node does not say (upstream's ports.KubeletPort).
pub const KUBELET_PORT: u16 = 10250;

/// How the API server reaches kubelets.
#[derive(Debug, Clone)]
pub struct KubeletClientConfig {
    /// The client certificate and key (PEM) the API server presents.
    pub client_cert: Option<(String, String)>,
    /// The CA (PEM) kubelets' serving certificates are verified against; none: not verified.
    pub ca: Option<String>,
    pub preferred_address_types: Vec<String>,
}

impl Default for KubeletClientConfig {
    fn default() -> KubeletClientConfig {
        KubeletClientConfig {
            client_cert: None,
            ca: None,
            preferred_address_types: DEFAULT_ADDRESS_TYPES.iter().map(|t| (*t).to_owned()).collect(),
        }
    }
}

/// The address a node is reached at (upstream's GetPreferredNodeAddress): the first address of
/// the first preferred type it has, a Hostname also from its `kubernetes.io/hostname` label.
pub fn preferred_address(node: &Value, preferred: &[String]) -> Result<String, String> {
    let addresses = node["status"]["addresses"].as_array().cloned().unwrap_or_default();
    for wanted in preferred {
        if let Some(address) = addresses.iter().find(|a| a["type"].as_str() == Some(wanted.as_str())) {
            return Ok(address["address"].as_str().unwrap_or_default().to_owned());
        }
        if wanted == "Hostname"
            && let Some(host) =
                node["metadata"]["labels"]["kubernetes.io/hostname"].as_str().filter(|h| !h.is_empty())
        {
            return Ok(host.to_owned());
        }
    }
    let known: Vec<String> = addresses
        .iter()
        .map(|a| {
            format!(
                "{{{} {}}}",
                a["type"].as_str().unwrap_or_default(),
                a["address"].as_str().unwrap_or_default()
            )
        })
        .collect();
    Err(format!("no preferred addresses found; known addresses: [{}]", known.join(" ")))
}

/// The kubelet's port: the Node's daemonEndpoints, else 10250.
pub fn kubelet_port(node: &Value) -> u16 {
    node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .unwrap_or(KUBELET_PORT)
}

/// A `pods/log` request's options (v1.PodLogOptions from the query).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodLogOptions {
    pub container: String,
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub since_seconds: Option<i64>,
    /// As given (RFC 3339); sent on in whole seconds.
    pub since_time: Option<jiff::Timestamp>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
    pub insecure_skip_tls_verify_backend: bool,
    pub stream: Option<String>,
}

impl PodLogOptions {
    /// Decodes and validates as upstream's LogREST.Get (ValidatePodLogOptions, the
    /// PodLogsQuerySplitStreams gate off as in 1.34).
    pub fn from_query(query: Option<&str>, name: &str) -> Result<PodLogOptions, ApiError> {
        let mut options = PodLogOptions::default();
        let int = |key: &str, value: &str| {
            value.parse::<i64>().map_err(|_| {
                ApiError::BadRequest(format!("strconv.ParseInt: parsing {value:?}: invalid syntax ({key})"))
            })
        };
        let flag = |value: &str| !(value == "0" || value.eq_ignore_ascii_case("false"));
        for pair in query.into_iter().flat_map(|q| q.split('&')).filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = crate::handlers::percent_decode(value);
            match key {
                "container" => options.container = value,
                "follow" => options.follow = flag(&value),
                "previous" => options.previous = flag(&value),
                "timestamps" => options.timestamps = flag(&value),
                "insecureSkipTLSVerifyBackend" => options.insecure_skip_tls_verify_backend = flag(&value),
                "sinceSeconds" => options.since_seconds = Some(int(key, &value)?),
                "tailLines" => options.tail_lines = Some(int(key, &value)?),
                "limitBytes" => options.limit_bytes = Some(int(key, &value)?),
                "sinceTime" => {
                    let at = value.parse::<jiff::Timestamp>().map_err(|e| {
                        ApiError::BadRequest(format!("parsing time {value:?} as RFC3339: {e} (sinceTime)"))
                    })?;
                    options.since_time = Some(at);
                }
                "stream" => options.stream = Some(value),
                _ => {}
            }
        }
        let mut causes = Vec::new();
        if let Some(n) = options.tail_lines.filter(|n| *n < 0) {
            causes.push(FieldError::invalid("tailLines", &json!(n), "must be greater than or equal to 0"));
        }
        if let Some(n) = options.limit_bytes.filter(|n| *n < 1) {
            causes.push(FieldError::invalid("limitBytes", &json!(n), "must be greater than 0"));
        }
        match (options.since_seconds, options.since_time) {
            (Some(_), Some(_)) => {
                causes.push(FieldError::forbidden(
                    "",
                    "at most one of `sinceTime` or `sinceSeconds` may be specified",
                ));
            }
            (Some(n), None) if n < 1 => {
                causes.push(FieldError::invalid("sinceSeconds", &json!(n), "must be greater than 0"));
            }
            _ => {}
        }
        if options.stream.is_some() {
            causes.push(FieldError::forbidden("stream", "may not be specified"));
        }
        if !causes.is_empty() {
            return Err(ApiError::invalid("", "PodLogOptions", name, causes));
        }
        Ok(options)
    }
}

/// Where the kubelet serves `pod`'s log (upstream's LogLocation): the node it runs on and the
/// `/containerLogs/...` path with the options as query; none when the pod is not scheduled.
pub fn log_location(pod: &Value, options: &PodLogOptions) -> Result<Option<(String, String)>, ApiError> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let container = container_of(pod, &options.container)?;
    let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    if node.is_empty() {
        return Ok(None);
    }
    // url.Values.Encode: the keys sorted.
    let mut params = Vec::new();
    if options.follow {
        params.push(("follow", "true".to_owned()));
    }
    if let Some(n) = options.limit_bytes {
        params.push(("limitBytes", n.to_string()));
    }
    if options.previous {
        params.push(("previous", "true".to_owned()));
    }
    if let Some(n) = options.since_seconds {
        params.push(("sinceSeconds", n.to_string()));
    }
    if let Some(at) = options.since_time {
        params.push(("sinceTime", at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()));
    }
    if let Some(n) = options.tail_lines {
        params.push(("tailLines", n.to_string()));
    }
    if options.timestamps {
        params.push(("timestamps", "true".to_owned()));
    }
    let query: String = form_urlencoded::Serializer::new(String::new()).extend_pairs(params).finish();
    let mut path = format!("/containerLogs/{namespace}/{name}/{container}");
    if !query.is_empty() {
        path = format!("{path}?{query}");
    }
    Ok(Some((node.to_owned(), path)))
}

/// The container a request names, or the pod's only one (upstream's validateContainer).
fn container_of(pod: &Value, asked: &str) -> Result<String, ApiError> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let names = |kind: &str| -> Vec<String> {
        pod["spec"][kind]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect()
    };
    let containers = names("containers");
    let mut all = names("initContainers");
    all.extend(containers.iter().cloned());
    all.extend(names("ephemeralContainers"));
    if asked.is_empty() {
        return match containers.as_slice() {
            [one] => Ok(one.clone()),
            [] => Err(ApiError::BadRequest(format!("a container name must be specified for pod {name}"))),
            _ => Err(ApiError::BadRequest(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                all.join(" ")
            ))),
        };
    }
    if !all.iter().any(|c| c == asked) {
        return Err(ApiError::BadRequest(format!("container {asked} is not valid for pod {name}")));
    }
    Ok(asked.to_owned())
}

/// A kubelet's answer that is not a success, as the API server passes it on (upstream's
/// GenericHttpResponseChecker).
pub fn refused_by_kubelet(code: u16, body: &str, name: &str) -> ApiError {
    match code {
        500 => ApiError::Internal(body.to_owned()),
        400 => ApiError::BadRequest(body.to_owned()),
        _ => ApiError::server_response(code, "pods/log", name, body),
    }
}

/// The TLS client kubelets are reached with.
#[derive(Debug, Clone)]
pub struct KubeletClient {
    verified: Arc<rustls::ClientConfig>,
    unverified: Arc<rustls::ClientConfig>,
    pub preferred_address_types: Vec<String>,
}

impl KubeletClient {
    pub fn new(config: &KubeletClientConfig) -> Result<KubeletClient, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let identity = match &config.client_cert {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("the kubelet client certificate: {e}"))?;
                let key = PrivateKeyDer::from_pem_slice(key.as_bytes())
                    .map_err(|e| format!("the kubelet client key: {e}"))?;
                Some((chain, key))
            }
            None => None,
        };
        let build = |verifier: Arc<dyn rustls::client::danger::ServerCertVerifier>| -> Result<Arc<rustls::ClientConfig>, String> {
            let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .dangerous()
                .with_custom_certificate_verifier(verifier);
            let mut tls = match &identity {
                Some((chain, key)) => {
                    builder.with_client_auth_cert(chain.clone(), key.clone_key()).map_err(|e| e.to_string())?
                }
                None => builder.with_no_client_auth(),
            };
            tls.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Arc::new(tls))
        };
        let unverified: Arc<dyn rustls::client::danger::ServerCertVerifier> =
            Arc::new(Unverified(provider.clone()));
        let verified = match &config.ca {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                    roots.add(cert.map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
                }
                let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider.clone(),
                )
                .build()
                .map_err(|e| e.to_string())?;
                build(verifier)?
            }
            None => build(unverified.clone())?,
        };
        Ok(KubeletClient {
            verified,
            unverified: build(unverified)?,
            preferred_address_types: config.preferred_address_types.clone(),
        })
    }

    /// GET `https://host:port<path>`: the response's status and body, or the Go-worded error.
    pub async fn get(
        &self,
        host: &str,
        port: u16,
        path: &str,
        insecure: bool,
    ) -> Result<hyper::Response<hyper::body::Incoming>, String> {
        let request =
            Forwarded { method: hyper::Method::GET, path, content_type: None, body: bytes::Bytes::new() };
        self.send(host, port, request, insecure).await
    }

    /// Sends `request` to `https://host:port`: the response, or the Go-worded error
    /// (`Get "https://…": dial tcp …`).
    pub async fn send(
        &self,
        host: &str,
        port: u16,
        request: Forwarded<'_>,
        insecure: bool,
    ) -> Result<hyper::Response<hyper::body::Incoming>, String> {
        let url = format!("https://{}{}", join_host_port(host, port), request.path);
        let method = request.method.as_str();
        let op = format!("{}{}", &method[..1], method[1..].to_lowercase());
        let failed = |detail: String| format!("{op} {url:?}: {detail}");
        let tls = if insecure { self.unverified.clone() } else { self.verified.clone() };
        let (mut sender, connection) = dial(host, port, tls).await.map_err(failed)?;
        tokio::spawn(connection);
        let mut builder = hyper::Request::builder()
            .method(request.method.clone())
            .uri(request.path)
            .header(hyper::header::HOST, join_host_port(host, port));
        if let Some(content_type) = request.content_type {
            builder = builder.header(hyper::header::CONTENT_TYPE, content_type);
        }
        let sent =
            builder.body(http_body_util::Full::new(request.body)).map_err(|e| failed(e.to_string()))?;
        sender.send_request(sent).await.map_err(|e| failed(e.to_string()))
    }

    /// Proxies an upgrade request to `https://host:port<path>` (upstream's UpgradeAwareHandler
    /// with upgradeRequired): `method` and `headers` (its Connection, Upgrade, Sec-WebSocket-*
    /// and X-Stream-Protocol-Version) go to the kubelet; on 101 the two upgraded connections are
    /// joined once `client` (the caller's upgrade) completes, and the kubelet's 101 is the answer;
    /// any other answer is relayed.
    pub async fn upgrade(
        &self,
        host: &str,
        port: u16,
        path: &str,
        method: &hyper::Method,
        headers: &hyper::HeaderMap,
        client: hyper::upgrade::OnUpgrade,
    ) -> Result<hyper::Response<bytes::Bytes>, String> {
        use http_body_util::BodyExt;
        let url = format!("https://{}{path}", join_host_port(host, port));
        let failed = |detail: String| format!("error dialing backend: {url}: {detail}");
        let (mut sender, connection) = dial(host, port, self.verified.clone()).await.map_err(failed)?;
        tokio::spawn(async move {
            if let Err(error) = connection.with_upgrades().await {
                tracing::debug!(%error, "a kubelet streaming connection");
            }
        });
        let mut request = hyper::Request::builder()
            .method(method.clone())
            .uri(path)
            .body(http_body_util::Full::new(bytes::Bytes::new()))
            .map_err(|e| failed(e.to_string()))?;
        for (header, value) in headers {
            // The caller's credentials are not the kubelet's business: the API server presents its own.
            if header != hyper::header::HOST
                && header != hyper::header::AUTHORIZATION
                && header != hyper::header::CONTENT_LENGTH
            {
                request.headers_mut().append(header.clone(), value.clone());
            }
        }
        if let Ok(value) = hyper::header::HeaderValue::from_str(&join_host_port(host, port)) {
            request.headers_mut().insert(hyper::header::HOST, value);
        }
        let mut answer = sender.send_request(request).await.map_err(|e| failed(e.to_string()))?;
        let (status, answer_headers) = (answer.status(), answer.headers().clone());
        if status != hyper::StatusCode::SWITCHING_PROTOCOLS {
            let body = http_body_util::Limited::new(answer.into_body(), 50_000);
            let body = body.collect().await.map(http_body_util::Collected::to_bytes).unwrap_or_default();
            let mut relayed = hyper::Response::new(body);
            (*relayed.status_mut(), *relayed.headers_mut()) = (status, answer_headers);
            return Ok(relayed);
        }
        join_upgraded(client, hyper::upgrade::on(&mut answer), "kubelet");
        let mut switched = hyper::Response::new(bytes::Bytes::new());
        (*switched.status_mut(), *switched.headers_mut()) = (status, answer_headers);
        Ok(switched)
    }
}

/// An HTTP/1 connection to the kubelet at `host:port` over TLS (`tls` verifying it or not), to be
/// driven by the caller; the error is the Go-worded detail (`dial tcp …`, `tls: …`).
async fn dial(
    host: &str,
    port: u16,
    tls: Arc<rustls::ClientConfig>,
) -> Result<
    (
        hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
        hyper::client::conn::http1::Connection<
            hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
            http_body_util::Full<bytes::Bytes>,
        >,
    ),
    String,
> {
    let tcp = tokio::net::TcpStream::connect((host, port))
        .await
        .map_err(|e| format!("dial tcp {}: {e}", join_host_port(host, port)))?;
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    let stream =
        tokio_rustls::TlsConnector::from(tls).connect(name, tcp).await.map_err(|e| format!("tls: {e}"))?;
    hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())
}

/// The kubelet path and query of a `pods/exec`, `pods/attach` or `pods/portforward` request
/// (upstream's ExecLocation, AttachLocation and PortForwardLocation with streamParams): the
/// PodExecOptions of the query become the kubelet's `input`/`output`/`error`/`tty`/`command`,
/// PodPortForwardOptions' ports its `port`; the container defaults to a pod's only one. The node
/// it is on, or upstream's BadRequest.
pub fn stream_location(
    pod: &Value,
    subresource: &str,
    query: Option<&str>,
) -> Result<(String, String), ApiError> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let pairs: Vec<(String, String)> =
        form_urlencoded::parse(query.unwrap_or_default().as_bytes()).into_owned().collect();
    let flag = |key: &str| {
        pairs
            .iter()
            .rfind(|(k, _)| k == key)
            .is_some_and(|(_, v)| matches!(v.as_str(), "1" | "t" | "T" | "true" | "TRUE" | "True"))
    };
    let mut params = form_urlencoded::Serializer::new(String::new());
    let path = if subresource == "portforward" {
        let ports: Vec<&str> = pairs.iter().filter(|(k, _)| k == "ports").map(|(_, v)| v.as_str()).collect();
        if !ports.is_empty() {
            params.append_pair("port", &ports.join(","));
        }
        format!("/portForward/{namespace}/{name}")
    } else {
        let mut container =
            pairs.iter().find(|(k, _)| k == "container").map(|(_, v)| v.clone()).unwrap_or_default();
        let spec = &pod["spec"];
        let list = |key: &str| spec[key].as_array().cloned().unwrap_or_default();
        let names: Vec<String> = list("initContainers")
            .iter()
            .chain(list("containers").iter())
            .chain(list("ephemeralContainers").iter())
            .filter_map(|c| c["name"].as_str().map(str::to_owned))
            .collect();
        if container.is_empty() {
            let regular = list("containers");
            match regular.len() {
                1 => container = regular[0]["name"].as_str().unwrap_or_default().to_owned(),
                0 => {
                    return Err(ApiError::BadRequest(format!(
                        "a container name must be specified for pod {name}"
                    )));
                }
                _ => {
                    return Err(ApiError::BadRequest(format!(
                        "a container name must be specified for pod {name}, choose one of: [{}]",
                        names.join(" ")
                    )));
                }
            }
        } else if !names.contains(&container) {
            return Err(ApiError::BadRequest(format!("container {container} is not valid for pod {name}")));
        }
        for (option, param) in [("stdin", "input"), ("stdout", "output"), ("stderr", "error"), ("tty", "tty")]
        {
            if flag(option) {
                params.append_pair(param, "1");
            }
        }
        if subresource == "exec" {
            for (_, command) in pairs.iter().filter(|(k, _)| k == "command") {
                params.append_pair("command", command);
            }
        }
        format!("/{subresource}/{namespace}/{name}/{container}")
    };
    let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    if node.is_empty() {
        return Err(ApiError::BadRequest(format!("pod {name} does not have a host assigned")));
    }
    let query = params.finish();
    Ok((node.to_owned(), if query.is_empty() { path } else { format!("{path}?{query}") }))
}

fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// A verifier that takes any certificate (still checking the handshake's signatures): a kubelet
/// reached without `--kubelet-certificate-authority`, or with insecureSkipTLSVerifyBackend.
#[derive(Debug)]
pub(crate) struct Unverified(pub(crate) Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Whether the kubelet at `host` may be proxied to (upstream's isProxyableHostname): every address
/// it resolves to is a global unicast one (Go's IsGlobalUnicast: not unspecified, loopback,
/// link-local, multicast or the v4 broadcast address; private ranges are global unicast).
pub async fn proxyable(host: &str) -> Result<(), String> {
    let addresses: Vec<std::net::IpAddr> = match host.parse() {
        Ok(ip) => vec![ip],
        Err(_) => tokio::net::lookup_host((host, 0))
            .await
            .map_err(|e| format!("lookup {host}: {e}"))?
            .map(|a| a.ip())
            .collect(),
    };
    if addresses.is_empty() {
        return Err("no addresses for hostname".into());
    }
    if addresses.iter().all(global_unicast) { Ok(()) } else { Err("address not allowed".into()) }
}

/// Go's IP.IsGlobalUnicast: not unspecified, loopback, link-local, multicast or the v4 broadcast
/// address (private ranges are global unicast); an IPv4-mapped IPv6 address judged as IPv4.
pub fn global_unicast(ip: &std::net::IpAddr) -> bool {
    match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => {
            !(v4.is_unspecified()
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast())
        }
        std::net::IpAddr::V6(v6) => {
            !(v6.is_unspecified() || v6.is_loopback() || v6.is_multicast() || v6.is_unicast_link_local())
        }
    }
}

/// A request relayed to a kubelet as it came (`nodes/proxy`): method, path and query, and body.
#[derive(Debug)]
pub struct Forwarded<'a> {
    pub method: hyper::Method,
    pub path: &'a str,
    pub content_type: Option<hyper::header::HeaderValue>,
    pub body: bytes::Bytes,
}

/// The node and the kubelet path of a `nodes/proxy` request: `/api/v1/nodes/<name>[:<port>]/proxy`
/// and what follows it (`/` when nothing does), as upstream's ProxyREST splits it; none for any
/// other path.
pub fn node_proxy_path(path: &str) -> Option<(&str, Option<u16>, String)> {
    let rest = path.strip_prefix("/api/v1/nodes/")?;
    let (name, rest) = rest.split_once('/')?;
    let tail = rest.strip_prefix("proxy")?;
    if !(tail.is_empty() || tail.starts_with('/')) || name.is_empty() {
        return None;
    }
    let (name, port) = match name.split_once(':') {
        Some((name, port)) => (name, Some(port.parse().ok()?)),
        None => (name, None),
    };
    Some((name, port, if tail.is_empty() { "/".to_owned() } else { tail.to_owned() }))
}

/// Joins the client's upgraded connection to the backend's (`what`: kubelet, pod) once both
/// upgrades complete, copying both ways until either side ends.
pub fn join_upgraded(
    client: hyper::upgrade::OnUpgrade,
    backend: hyper::upgrade::OnUpgrade,
    what: &'static str,
) {
    tokio::spawn(async move {
        match tokio::join!(client, backend) {
            (Ok(client), Ok(backend)) => {
                let (mut client, mut backend) =
                    (hyper_util::rt::TokioIo::new(client), hyper_util::rt::TokioIo::new(backend));
                if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut backend).await {
                    tracing::debug!(%error, what, "a proxied stream ended");
                }
            }
            (Err(error), _) | (_, Err(error)) => tracing::debug!(%error, what, "upgrading a proxied stream"),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_global_unicast_kubelets_are_proxied_to() {
        for allowed in ["10.0.0.1", "192.0.2.7", "2001:db8::1"] {
            assert_eq!(proxyable(allowed).await, Ok(()), "{allowed}");
        }
        for refused in ["127.0.0.1", "::1", "169.254.169.254", "fe80::1", "0.0.0.0", "224.0.0.1", "localhost"]
        {
            assert_eq!(proxyable(refused).await, Err("address not allowed".into()), "{refused}");
        }
    }

    #[test]
    fn node_proxy_paths() {
        assert_eq!(node_proxy_path("/api/v1/nodes/n1/proxy"), Some(("n1", None, "/".to_owned())));
        assert_eq!(
            node_proxy_path("/api/v1/nodes/n1:10255/proxy/stats/summary"),
            Some(("n1", Some(10255), "/stats/summary".to_owned()))
        );
        for other in [
            "/api/v1/nodes/n1",
            "/api/v1/nodes/n1/proxyx",
            "/api/v1/nodes/n1:x/proxy",
            "/api/v1/pods/a/proxy",
        ] {
            assert_eq!(node_proxy_path(other), None, "{other}");
        }
    }

    #[test]
    fn the_preferred_address_and_port() {
        let node = json!({"metadata": {"labels": {"kubernetes.io/hostname": "n1-label"}},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                       "daemonEndpoints": {"kubeletEndpoint": {"Port": 10251}}}});
        let types = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(preferred_address(&node, &types(&["InternalIP", "Hostname"])), Ok("10.0.0.1".into()));
        assert_eq!(preferred_address(&node, &types(DEFAULT_ADDRESS_TYPES)), Ok("n1-label".into()));
        assert_eq!(
            preferred_address(&node, &types(&["ExternalIP"])),
            Err("no preferred addresses found; known addresses: [{InternalIP 10.0.0.1}]".into())
        );
        assert_eq!(kubelet_port(&node), 10251);
        assert_eq!(kubelet_port(&json!({})), 10250);
    }

    #[test]
    fn log_options_decode_validate_and_become_the_kubelet_query() {
        let options =
            PodLogOptions::from_query(Some("follow=true&tailLines=5&timestamps=1&container=c"), "web");
        let Ok(options) = options else { panic!("{options:?}") };
        let pod = json!({"metadata": {"name": "web", "namespace": "ns"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c"}, {"name": "d"}], "initContainers": [{"name": "i"}]}});
        assert_eq!(
            log_location(&pod, &options),
            Ok(Some(("n1".into(), "/containerLogs/ns/web/c?follow=true&tailLines=5&timestamps=true".into())))
        );
        let none = PodLogOptions::default();
        assert_eq!(
            log_location(&pod, &none).map_err(|e| e.to_string()),
            Err("a container name must be specified for pod web, choose one of: [i c d]".into())
        );
        let wrong = PodLogOptions { container: "x".into(), ..PodLogOptions::default() };
        assert_eq!(
            log_location(&pod, &wrong).map_err(|e| e.to_string()),
            Err("container x is not valid for pod web".into())
        );
        let unscheduled = json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c"}]}});
        assert_eq!(log_location(&unscheduled, &none), Ok(None));
        let invalid =
            PodLogOptions::from_query(Some("tailLines=-1&limitBytes=0"), "web").map_err(|e| e.to_string());
        assert_eq!(
            invalid,
            Err("PodLogOptions \"web\" is invalid: [tailLines: Invalid value: -1: must be greater than or equal to 0, limitBytes: Invalid value: 0: must be greater than 0]".into())
        );
        let both = PodLogOptions::from_query(Some("sinceSeconds=5&sinceTime=2026-12-03T10:00:00Z"), "web");
        assert_eq!(both.map_err(|e| e.code()), Err(422));
        assert_eq!(PodLogOptions::from_query(Some("tailLines=x"), "web").map_err(|e| e.code()), Err(400));
    }

    #[test]
    fn kubelet_refusals_pass_on_as_upstream() {
        let bad = refused_by_kubelet(
            400,
            "container \"c\" in pod \"web\" is waiting to start: ContainerCreating",
            "web",
        );
        assert_eq!((bad.code(), bad.reason()), (400, "BadRequest"));
        let denied = refused_by_kubelet(
            403,
            "Forbidden (user=x, verb=get, resource=nodes, subresource(s)=[proxy])\n",
            "web",
        );
        assert_eq!(denied.reason(), "Forbidden");
        assert_eq!(
            denied.to_string(),
            "Forbidden (user=x, verb=get, resource=nodes, subresource(s)=[proxy])\n ( pods/log web)"
        );
        let missing = refused_by_kubelet(404, "pod \"web\" does not exist", "web");
        assert_eq!(missing.to_string(), "the server could not find the requested resource ( pods/log web)");
    }
}
