//! Runs a probe's or a hook's [`Target`] (upstream's pkg/probe and the lifecycle handler runner):
//! exec through the runtime's ExecSync, an HTTP GET (HTTPS without verifying the certificate, as
//! upstream), a TCP connect, a gRPC health check (grpc.health.v1), a sleep. Failures read as
//! upstream's, which quotes Go's net errors ("dial tcp 10.0.0.5:80: connect: connection refused").
//!
//! The HTTP client is hyper's connection API rather than a pooled client: each probe is one
//! connection with no keep-alive (upstream's DisableKeepAlives), and redirects are followed only
//! on the same host (upstream's followNonLocalRedirects=false), which a general client would not
//! express.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use tokio::net::TcpStream;

use crate::probes::{Probed, Target};
use crate::runtime::Cri;

/// At most this much of a probe's output (exec output, an HTTP body) is kept (upstream's 10 KiB).
const MAX_OUTPUT: usize = 10 * 1024;
/// The `kube-<purpose>/<major>.<minor>` user agent of probes and hooks.
const VERSION: &str = "1.34";
const MAX_REDIRECTS: usize = 10;

/// Runs a probe once (upstream's runProbe): the outcome and its output.
pub async fn probe(cri: &Cri, container_id: &str, target: &Target, timeout: Duration) -> Probed {
    match target {
        Target::Exec { command } => exec_probe(cri, container_id, command, timeout).await,
        Target::Http { .. } => http_probe(target, timeout).await,
        Target::Tcp { host, port } => tcp_probe(host, *port, timeout).await,
        Target::Grpc { host, port, service } => grpc_probe(host, *port, service, timeout).await,
        Target::Sleep { .. } => Probed::Error("a probe cannot sleep".into()),
    }
}

/// Runs a lifecycle hook (upstream's handlerRunner.Run); the error is what failed.
pub async fn hook(cri: &Cri, container_id: &str, target: &Target) -> Result<(), String> {
    match target {
        Target::Exec { command } => {
            let (code, output) = exec(cri, container_id, command, 0).await.map_err(|s| rpc_error(&s))?;
            if code == 0 {
                Ok(())
            } else {
                Err(format!(
                    "command '{}' exited with {code}: {}, message: {:?}",
                    command.join(" "),
                    String::from_utf8_lossy(&output),
                    String::from_utf8_lossy(&output)
                ))
            }
        }
        // Any answer will do: upstream does not look at a hook's status code.
        Target::Http { .. } => get(target, "lifecycle", None).await.map(drop),
        Target::Tcp { host, port } => TcpStream::connect((host.as_str(), *port))
            .await
            .map(drop)
            .map_err(|e| dial_error(host, *port, &e)),
        Target::Sleep { seconds } => {
            tokio::time::sleep(Duration::from_secs(u64::try_from(*seconds).unwrap_or(0))).await;
            Ok(())
        }
        Target::Grpc { .. } => Err("a hook cannot be a gRPC call".into()),
    }
}

async fn tcp_probe(host: &str, port: u16, timeout: Duration) -> Probed {
    match tokio::time::timeout(timeout, TcpStream::connect((host, port))).await {
        Ok(Ok(_)) => Probed::Success,
        Ok(Err(error)) => Probed::Failure(dial_error(host, port, &error)),
        Err(_) => Probed::Failure(format!("dial tcp {}: i/o timeout", join(host, port))),
    }
}

fn rpc_error(status: &tonic::Status) -> String {
    format!("rpc error: code = {:?} desc = {}", status.code(), status.message())
}

async fn exec(
    cri: &Cri,
    container_id: &str,
    command: &[String],
    timeout: i64,
) -> Result<(i32, Vec<u8>), tonic::Status> {
    let mut runtime = cri.runtime.clone();
    let request =
        cri::ExecSyncRequest { container_id: container_id.to_owned(), cmd: command.to_vec(), timeout };
    let response = runtime.exec_sync(request).await?.into_inner();
    let mut output = response.stdout;
    output.extend(response.stderr);
    output.truncate(MAX_OUTPUT);
    Ok((response.exit_code, output))
}

async fn exec_probe(cri: &Cri, container_id: &str, command: &[String], timeout: Duration) -> Probed {
    let seconds = i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX);
    let timed_out =
        || Probed::Failure(format!("command timed out: {:?} timed out after {timeout:?}", command.join(" ")));
    // The runtime enforces the timeout; the client waits a little longer for its answer.
    match tokio::time::timeout(timeout + Duration::from_secs(1), exec(cri, container_id, command, seconds))
        .await
    {
        Ok(Ok((0, _))) => Probed::Success,
        Ok(Ok((_, output))) => Probed::Failure(String::from_utf8_lossy(&output).into_owned()),
        Ok(Err(status)) if status.code() == tonic::Code::DeadlineExceeded => timed_out(),
        Ok(Err(status)) => Probed::Error(rpc_error(&status)),
        Err(_) => timed_out(),
    }
}

fn join(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// A connect error in Go's words, as upstream's messages quote them.
fn dial_error(host: &str, port: u16, error: &std::io::Error) -> String {
    let cause = match error.raw_os_error() {
        Some(libc::ECONNREFUSED) => "connect: connection refused".to_owned(),
        Some(libc::EHOSTUNREACH) => "connect: no route to host".to_owned(),
        Some(libc::ENETUNREACH) => "connect: network is unreachable".to_owned(),
        Some(libc::ECONNRESET) => "read: connection reset by peer".to_owned(),
        _ => error.to_string(),
    };
    format!("dial tcp {}: {cause}", join(host, port))
}

/// One GET of an HTTP target, following redirects on the same host; the last response's status
/// and (at most [`MAX_OUTPUT`] of its) body.
async fn get(target: &Target, purpose: &str, timeout: Option<Duration>) -> Result<(u16, String), String> {
    let Target::Http { scheme, host, port, path, headers } = target else {
        return Err("not an HTTP target".into());
    };
    let mut path = path.clone();
    let url = |path: &str| format!("{scheme}://{}{path}", join(host, *port));
    for _ in 0..=MAX_REDIRECTS {
        let shown = url(&path);
        let once = get_once(scheme, host, *port, &path, headers, purpose);
        let answer = match timeout {
            Some(timeout) => tokio::time::timeout(timeout, once).await,
            None => Ok(once.await),
        };
        let (status, location, body) = match answer {
            Ok(Ok(answer)) => answer,
            Ok(Err(error)) => return Err(format!("Get {shown:?}: {error}")),
            Err(_) => {
                return Err(format!(
                    "Get {shown:?}: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
                ));
            }
        };
        // A redirect on the same host is followed; one elsewhere ends the probe with its answer.
        match location.filter(|_| (300..400).contains(&status)) {
            Some(location) if location.starts_with('/') => path = location,
            Some(location) => {
                let prefix = format!("{scheme}://{}", join(host, *port));
                match location.strip_prefix(&prefix).filter(|rest| rest.is_empty() || rest.starts_with('/')) {
                    Some(rest) => path = if rest.is_empty() { "/".to_owned() } else { rest.to_owned() },
                    None => return Ok((status, body)),
                }
            }
            None => return Ok((status, body)),
        }
    }
    Err(format!("Get {:?}: stopped after {MAX_REDIRECTS} redirects", url(&path)))
}

async fn get_once(
    scheme: &str,
    host: &str,
    port: u16,
    path: &str,
    headers: &[(String, String)],
    purpose: &str,
) -> Result<(u16, Option<String>, String), String> {
    let stream = TcpStream::connect((host, port)).await.map_err(|e| dial_error(host, port, &e))?;
    let mut request = hyper::Request::get(path);
    let named = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    if !named("host") {
        request = request.header(hyper::header::HOST, join(host, port));
    }
    if !named("user-agent") {
        request = request.header(hyper::header::USER_AGENT, format!("kube-{purpose}/{VERSION}"));
    }
    if !named("accept") {
        request = request.header(hyper::header::ACCEPT, "*/*");
    }
    for (name, value) in headers {
        // An empty Accept removes the default (upstream's NewProbeRequest).
        if name.eq_ignore_ascii_case("accept") && value.is_empty() {
            continue;
        }
        request = request.header(name.as_str(), value.as_str());
    }
    request = request.header(hyper::header::CONNECTION, "close");
    let request = request.body(Empty::<Bytes>::new()).map_err(|e| e.to_string())?;
    let response = if scheme == "https" {
        let stream =
            tls_connector().connect(server_name(host)?, stream).await.map_err(|e| format!("tls: {e}"))?;
        send(TokioIo::new(stream), request).await?
    } else {
        send(TokioIo::new(stream), request).await?
    };
    Ok(response)
}

async fn send<T>(
    io: T,
    request: hyper::Request<Empty<Bytes>>,
) -> Result<(u16, Option<String>, String), String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(io).await.map_err(|e| e.to_string())?;
    let driving = tokio::spawn(connection);
    let response = sender.send_request(request).await.map_err(|e| e.to_string());
    let outcome = match response {
        Ok(response) => {
            let status = response.status().as_u16();
            let location = response
                .headers()
                .get(hyper::header::LOCATION)
                .and_then(|l| l.to_str().ok())
                .map(str::to_owned);
            let mut body = response.into_body();
            let mut kept = Vec::new();
            while kept.len() < MAX_OUTPUT {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Some(data) = frame.data_ref() {
                            kept.extend_from_slice(data);
                        }
                    }
                    _ => break,
                }
            }
            kept.truncate(MAX_OUTPUT);
            Ok((status, location, String::from_utf8_lossy(&kept).into_owned()))
        }
        Err(error) => Err(error),
    };
    driving.abort();
    outcome
}

async fn http_probe(target: &Target, timeout: Duration) -> Probed {
    match get(target, "probe", Some(timeout)).await {
        Ok((status, _)) if (200..300).contains(&status) => Probed::Success,
        Ok((status, body)) if (300..400).contains(&status) => {
            Probed::Warning(format!("Probe terminated redirects, Response body: {body}"))
        }
        Ok((status, _)) => Probed::Failure(format!("HTTP probe failed with statuscode: {status}")),
        Err(error) => Probed::Failure(error),
    }
}

fn server_name(host: &str) -> Result<rustls::pki_types::ServerName<'static>, String> {
    rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|e| format!("tls: {e}"))
}

/// TLS that accepts any certificate: upstream's probes and hooks use InsecureSkipVerify (a pod's
/// serving certificate is not one the kubelet could check).
fn tls_connector() -> tokio_rustls::TlsConnector {
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map(|builder| {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
                    .with_no_client_auth()
            });
        Arc::new(config.unwrap_or_else(|_| {
            // The ring provider supports the default versions; this is never reached.
            rustls::ClientConfig::builder()
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))))
                .with_no_client_auth()
        }))
    });
    tokio_rustls::TlsConnector::from(config.clone())
}

/// Accepts any server certificate, checking only that the handshake is signed by it.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// grpc.health.v1.Health/Check (upstream's grpc prober): SERVING is a success.
async fn grpc_probe(host: &str, port: u16, service: &str, timeout: Duration) -> Probed {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    let address = join(host, port);
    let endpoint = match tonic::transport::Endpoint::from_shared(format!("http://{address}")) {
        Ok(endpoint) => endpoint,
        Err(error) => return Probed::Error(error.to_string()),
    };
    let endpoint = endpoint.connect_timeout(timeout).timeout(timeout);
    let endpoint = match endpoint.user_agent(format!("kube-probe/{VERSION}")) {
        Ok(endpoint) => endpoint,
        Err(error) => return Probed::Error(error.to_string()),
    };
    let channel = match tokio::time::timeout(timeout, endpoint.connect()).await {
        Ok(Ok(channel)) => channel,
        Ok(Err(error)) => {
            let cause =
                std::error::Error::source(&error).map_or_else(|| error.to_string(), ToString::to_string);
            return Probed::Failure(format!("error: failed to connect service at {address:?}: {cause}"));
        }
        Err(_) => {
            return Probed::Failure(format!(
                "timeout: failed to connect service {address:?} within {timeout:?}: context deadline exceeded"
            ));
        }
    };
    let request = HealthCheckRequest { service: service.to_owned() };
    match HealthClient::new(channel).check(request).await {
        Ok(response) => {
            let status = response.into_inner().status;
            if status == ServingStatus::Serving as i32 {
                Probed::Success
            } else {
                let name = ServingStatus::try_from(status).map_or("UNKNOWN", |s| s.as_str_name());
                Probed::Failure(format!("service unhealthy (responded with {name:?})"))
            }
        }
        Err(status) if status.code() == tonic::Code::Unimplemented => Probed::Failure(format!(
            "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
            status.message()
        )),
        Err(status)
            if status.code() == tonic::Code::DeadlineExceeded || status.code() == tonic::Code::Cancelled =>
        {
            Probed::Failure(format!("timeout: health rpc did not complete within {timeout:?}"))
        }
        Err(status) => Probed::Failure(format!("error: health rpc probe failed: {}", rpc_error(&status))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tcp_and_http_probes_against_local_servers() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let timeout = Duration::from_secs(5);
        assert_eq!(
            tcp_probe("127.0.0.1", port, timeout).await,
            Probed::Failure(format!("dial tcp 127.0.0.1:{port}: connect: connection refused"))
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap().port();
        // A tiny HTTP server: /ok answers 200, /moved redirects to /ok, /away off the host, / 500.
        tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else { return };
                tokio::spawn(async move {
                    use tokio::io::{AsyncReadExt, AsyncWriteExt};
                    let mut buffer = vec![0; 4096];
                    let n = stream.read(&mut buffer).await.unwrap_or(0);
                    let request = String::from_utf8_lossy(&buffer[..n]).into_owned();
                    assert!(
                        request.contains("User-Agent: kube-probe/1.34")
                            || request.contains("user-agent: kube-probe/1.34"),
                        "{request}"
                    );
                    let line = request.lines().next().unwrap_or_default().to_owned();
                    let answer = if line.starts_with("GET /ok ") {
                        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok".to_owned()
                    } else if line.starts_with("GET /moved ") {
                        "HTTP/1.1 302 Found\r\nlocation: /ok\r\ncontent-length: 0\r\n\r\n".to_owned()
                    } else if line.starts_with("GET /away ") {
                        "HTTP/1.1 302 Found\r\nlocation: http://192.0.2.1/\r\ncontent-length: 5\r\n\r\nmoved"
                            .to_owned()
                    } else {
                        "HTTP/1.1 500 Oops\r\ncontent-length: 0\r\n\r\n".to_owned()
                    };
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        let http = |path: &str| Target::Http {
            scheme: "http".into(),
            host: "127.0.0.1".into(),
            port: open,
            path: path.into(),
            headers: vec![],
        };
        assert_eq!(tcp_probe("127.0.0.1", open, timeout).await, Probed::Success);
        assert_eq!(http_probe(&http("/ok"), timeout).await, Probed::Success);
        assert_eq!(http_probe(&http("/moved"), timeout).await, Probed::Success);
        assert_eq!(
            http_probe(&http("/away"), timeout).await,
            Probed::Warning("Probe terminated redirects, Response body: moved".into())
        );
        assert_eq!(
            http_probe(&http("/"), timeout).await,
            Probed::Failure("HTTP probe failed with statuscode: 500".into())
        );
        let refused = Target::Http {
            scheme: "http".into(),
            host: "127.0.0.1".into(),
            port,
            path: "/".into(),
            headers: vec![],
        };
        assert_eq!(
            http_probe(&refused, timeout).await,
            Probed::Failure(format!(
                "Get \"http://127.0.0.1:{port}/\": dial tcp 127.0.0.1:{port}: connect: connection refused"
            ))
        );
    }

    #[tokio::test]
    async fn grpc_probes_against_the_health_service() {
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter.set_service_status("db", tonic_health::ServingStatus::NotServing).await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tokio::spawn(tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming));
        let timeout = Duration::from_secs(5);
        assert_eq!(grpc_probe("127.0.0.1", port, "", timeout).await, Probed::Success);
        assert_eq!(
            grpc_probe("127.0.0.1", port, "db", timeout).await,
            Probed::Failure("service unhealthy (responded with \"NOT_SERVING\")".into())
        );
        let missing = grpc_probe("127.0.0.1", port, "nope", timeout).await;
        assert!(
            matches!(&missing, Probed::Failure(m) if m.starts_with("error: health rpc probe failed")),
            "{missing:?}"
        );
    }
}
