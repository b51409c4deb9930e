//! The proxy transport (upstream's CreateProxyTransport under an UpgradeAwareHandler): a
//! connection to a pod's address per request, plain or TLS as the location's scheme says —
//! the pod's certificate not verified (an IP names it; nothing else could) and no client
//! certificate shown. Failures are worded as Go's dialer and TLS client word them.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper::body::Incoming;
use keel_api::status::ApiError;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Location, Scheme};

/// A connection to a pod, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// How the API server reaches pods.
#[derive(Debug, Clone)]
pub struct ProxyTransport {
    tls: Arc<rustls::ClientConfig>,
}

impl ProxyTransport {
    pub fn new() -> Result<ProxyTransport, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = Arc::new(crate::kubelet_client::Unverified(provider.clone()));
        let mut tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ProxyTransport { tls: Arc::new(tls) })
    }

    /// Sends `request` (its URI the path and query the pod is asked for) to `location`: the
    /// pod's answer, or upstream's 503 "error trying to reach service: …".
    pub async fn round_trip(
        &self,
        location: &Location,
        request: hyper::Request<Incoming>,
    ) -> Result<hyper::Response<Incoming>, ApiError> {
        let unreachable =
            |detail: String| ApiError::ServiceUnavailable(format!("error trying to reach service: {detail}"));
        let stream = self.dial(location).await.map_err(unreachable)?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| unreachable(e.to_string()))?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "a pods/proxy connection");
            }
        });
        sender.send_request(request).await.map_err(|e| unreachable(e.to_string()))
    }

    /// Proxies an upgrade request (upstream's tryUpgrade): the pod's 101 is the answer and the
    /// two upgraded connections are joined once `client`'s upgrade completes; an answer of 400 or
    /// more is relayed; any other is a 500 "invalid upgrade response".
    pub async fn upgrade(
        &self,
        location: &Location,
        request: hyper::Request<Incoming>,
        client: hyper::upgrade::OnUpgrade,
    ) -> Result<hyper::Response<Incoming>, ApiError> {
        let failed = |detail: String| ApiError::Unclassified(format!("error dialing backend: {detail}"));
        let stream = self.dial(location).await.map_err(failed)?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| failed(e.to_string()))?;
        tokio::spawn(async move {
            if let Err(error) = connection.with_upgrades().await {
                tracing::debug!(%error, "a pods/proxy upgraded connection");
            }
        });
        let mut answer =
            sender.send_request(request).await.map_err(|e| ApiError::Unclassified(e.to_string()))?;
        let status = answer.status();
        if status != hyper::StatusCode::SWITCHING_PROTOCOLS {
            if status.as_u16() < 400 {
                return Err(ApiError::Unclassified(format!(
                    "invalid upgrade response: status code {}",
                    status.as_u16()
                )));
            }
            return Ok(answer);
        }
        crate::kubelet_client::join_upgraded(client, hyper::upgrade::on(&mut answer), "pod");
        Ok(answer)
    }

    /// A connection to `location`, or Go's words for why not (`dial tcp …`, `tls: …`).
    async fn dial(&self, location: &Location) -> Result<Box<dyn Io>, String> {
        let port = dial_port(location)?;
        let address = SocketAddr::new(location.ip, port);
        let tcp = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|e| format!("dial tcp {address}: connect: {}", go_errno(&e)))?;
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::debug!(%address, %error, "TCP_NODELAY not set");
        }
        match location.scheme {
            Scheme::Http => Ok(Box::new(tcp)),
            Scheme::Https => {
                let name = ServerName::IpAddress(location.ip.into());
                let connector = tokio_rustls::TlsConnector::from(self.tls.clone());
                let stream = connector.connect(name, tcp).await.map_err(|e| go_tls_error(&e))?;
                Ok(Box::new(stream))
            }
        }
    }
}

/// The port dialled: the location's, else the scheme's. A port that is not a number is refused
/// in the words of Go's URL parser (kube-apiserver v1.34 fails to parse such a location and
/// panics on it, dropping the connection).
fn dial_port(location: &Location) -> Result<u16, String> {
    let Some(port) = &location.port else {
        return Ok(match location.scheme {
            Scheme::Http => 80,
            Scheme::Https => 443,
        });
    };
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        let url = format!("{}://{}", location.scheme.as_str(), location.host());
        let url = keel_api::labels::go_quote(&url);
        return Err(format!("parse {url}: invalid port \":{port}\" after host"));
    }
    port.parse::<u16>().map_err(|_| format!("dial tcp: address {port}: invalid port"))
}

/// An OS error as Go words it (`connection refused`, not `Connection refused (os error 111)`).
fn go_errno(error: &std::io::Error) -> String {
    let text = error.to_string();
    let text = text.find(" (os error ").map_or(text.as_str(), |at| &text[..at]);
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A TLS handshake's failure as Go's TLS client words the common one: a server that does not
/// speak TLS.
fn go_tls_error(error: &std::io::Error) -> String {
    let rustls_error = error.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>());
    match rustls_error {
        Some(rustls::Error::InvalidMessage(_)) => {
            "tls: first record does not look like a TLS handshake".into()
        }
        Some(other) => format!("tls: {other}"),
        None => go_errno(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_by_number_only() {
        let location = |scheme, port: Option<&str>| Location {
            scheme,
            ip: "10.0.0.1".parse().unwrap(),
            port: port.map(str::to_owned),
        };
        assert_eq!(dial_port(&location(Scheme::Http, None)), Ok(80));
        assert_eq!(dial_port(&location(Scheme::Https, None)), Ok(443));
        assert_eq!(dial_port(&location(Scheme::Http, Some("8080"))), Ok(8080));
        assert_eq!(
            dial_port(&location(Scheme::Http, Some("70000"))),
            Err("dial tcp: address 70000: invalid port".into())
        );
        assert_eq!(
            dial_port(&location(Scheme::Http, Some("99999999999999999999"))),
            Err("dial tcp: address 99999999999999999999: invalid port".into())
        );
        for named in ["http", "abc", "-1"] {
            assert_eq!(
                dial_port(&location(Scheme::Https, Some(named))),
                Err(format!("parse \"https://10.0.0.1:{named}\": invalid port \":{named}\" after host")),
            );
        }
    }

    #[test]
    fn os_errors_in_gos_words() {
        // ECONNREFUSED on Linux.
        let refused = std::io::Error::from_raw_os_error(111);
        assert_eq!(go_errno(&refused), "connection refused");
    }
}
