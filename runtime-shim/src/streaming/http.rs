//! HTTP/1.1 serving of the streaming URLs: routing, tokens, and the two upgrades (SPDY/3.1 with
//! `X-Stream-Protocol-Version` negotiation as apimachinery's `httpstream.Handshake`; websocket with
//! `Sec-WebSocket-Protocol` negotiation as `wsstream`), answering errors as the kubelet does.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONNECTION, HeaderMap, HeaderValue, UPGRADE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use super::Shared;
use super::cache::Cached;
use super::{portforward, remotecommand};

/// The header carrying SPDY stream protocol versions (request: offered; response: chosen).
pub const PROTOCOL_VERSION: &str = "X-Stream-Protocol-Version";
/// The header listing the server's versions when none matches.
const ACCEPTED_VERSIONS: &str = "X-Accepted-Stream-Protocol-Versions";

/// A response body.
pub type Body = Full<Bytes>;

pub(super) async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else { continue };
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let shared = shared.clone();
                async move { Ok::<_, Infallible>(route(&shared, req)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tcp), service)
                .with_upgrades()
                .await;
        });
    }
}

fn route(shared: &Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let (Some(kind), Some(token)) = (parts.next(), parts.next()) else { return not_found() };
    if !matches!(kind, "exec" | "attach" | "portforward") || token.is_empty() || token.contains('/') {
        return not_found();
    }
    if req.method() != Method::GET && req.method() != Method::POST {
        return error(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed");
    }
    match (kind, shared.cache.consume(token)) {
        ("exec", Some(Cached::Exec(exec))) => remotecommand::serve_exec(shared, req, exec),
        ("attach", Some(Cached::Attach(attach))) => remotecommand::serve_attach(shared, req, attach),
        ("portforward", Some(Cached::PortForward(pf))) => portforward::serve(shared, req, pf),
        _ => not_found(),
    }
}

/// Go's `http.NotFound`.
pub fn not_found() -> Response<Body> {
    error(StatusCode::NOT_FOUND, "404 page not found")
}

/// Go's `http.Error`: the message as plain text, with a newline.
pub fn error(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{message}\n"))));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    response
}

fn header_tokens<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|value| !value.is_empty())
        .collect()
}

/// Whether the request asks for a websocket (`Connection: upgrade` and `Upgrade: websocket`).
pub fn is_websocket(req: &Request<Incoming>) -> bool {
    let upgrade =
        header_tokens(req.headers(), "connection").iter().any(|t| t.eq_ignore_ascii_case("upgrade"));
    upgrade && header_tokens(req.headers(), "upgrade").iter().any(|t| t.eq_ignore_ascii_case("websocket"))
}

/// Answers a websocket upgrade choosing one of `supported` (403 when none fits, as x/net/websocket's
/// handshake failure; 400 for a malformed upgrade). Ok: the 101 response and the chosen protocol.
pub fn websocket_upgrade(
    req: &Request<Incoming>,
    supported: &[&'static str],
) -> Result<(Response<Body>, &'static str), Box<Response<Body>>> {
    let headers = req.headers();
    if headers.get("sec-websocket-version").and_then(|v| v.to_str().ok()) != Some("13") {
        let mut response = error(StatusCode::BAD_REQUEST, "unsupported websocket version");
        response.headers_mut().insert("sec-websocket-version", HeaderValue::from_static("13"));
        return Err(Box::new(response));
    }
    let Some(key) = headers.get("sec-websocket-key") else {
        return Err(Box::new(error(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key")));
    };
    let offered = header_tokens(headers, "sec-websocket-protocol");
    let Some(protocol) = super::ws::negotiate(&offered, supported) else {
        let message = format!("requested protocol(s) are not supported: {offered:?}; supports {supported:?}");
        return Err(Box::new(error(StatusCode::FORBIDDEN, &message)));
    };
    let mut response = Response::new(Body::default());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let out = response.headers_mut();
    out.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    out.insert(UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
        out.insert("sec-websocket-accept", accept);
    }
    if !protocol.is_empty() {
        out.insert("sec-websocket-protocol", HeaderValue::from_static(protocol));
    }
    Ok((response, protocol))
}

/// `httpstream.Handshake` then the SPDY/3.1 upgrade check: the 101 response and the version chosen
/// from `supported` in the client's order. 400 without `X-Stream-Protocol-Version` or upgrade
/// headers; 403 (listing the server's versions) when no version is shared.
pub fn spdy_upgrade(
    req: &Request<Incoming>,
    supported: &[&'static str],
) -> Result<(Response<Body>, &'static str), Box<Response<Body>>> {
    let offered = header_tokens(req.headers(), PROTOCOL_VERSION);
    if offered.is_empty() {
        let message = format!("unable to upgrade: {PROTOCOL_VERSION} is required");
        return Err(Box::new(error(StatusCode::BAD_REQUEST, &message)));
    }
    let Some(protocol) = offered.iter().find_map(|wanted| supported.iter().copied().find(|p| p == wanted))
    else {
        let message = format!(
            "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server accepts {supported:?}"
        );
        let mut response = error(StatusCode::FORBIDDEN, &message);
        for version in supported {
            response.headers_mut().append(ACCEPTED_VERSIONS, HeaderValue::from_static(version));
        }
        return Err(Box::new(response));
    };
    let headers = req.headers();
    let connection = header_tokens(headers, "connection").iter().any(|t| t.eq_ignore_ascii_case("upgrade"));
    let spdy = header_tokens(headers, "upgrade").iter().any(|t| t.to_ascii_lowercase().contains("spdy/3.1"));
    if !connection || !spdy {
        return Err(Box::new(error(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: missing upgrade headers in request",
        )));
    }
    let mut response = Response::new(Body::default());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let out = response.headers_mut();
    out.insert(PROTOCOL_VERSION, HeaderValue::from_static(protocol));
    out.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    out.insert(UPGRADE, HeaderValue::from_static("SPDY/3.1"));
    Ok((response, protocol))
}
