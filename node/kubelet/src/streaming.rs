//! The kubelet API's streaming requests, as upstream's kubelet server serves them: `/exec`,
//! `/attach` and `/portForward` ask the runtime for a streaming URL (CRI Exec, Attach,
//! PortForward) and proxy the client's upgrade (SPDY or websocket) to it, bytes both ways, so
//! whatever protocol the client and the runtime's streaming server agree on is spoken end to end
//! (upstream's proxyStream over an UpgradeAwareHandler with upgradeRequired). `/run` runs a
//! command through ExecSync and answers its output. The query parsing is pure.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// A response body of the kubelet API.
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>;

/// What an exec or attach asks for (upstream's remotecommand Options).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamOptions {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// The exec/attach query (`command=…&input=1&output=1&error=1&tty=1`) as upstream's
/// remotecommand.NewOptions reads it: stderr is dropped under a tty; at least one stream.
pub fn stream_options(query: &str) -> Result<StreamOptions, String> {
    let mut options = StreamOptions::default();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "command" => options.command.push(value.into_owned()),
            "input" => options.stdin = value == "1",
            "output" => options.stdout = value == "1",
            "error" => options.stderr = value == "1",
            "tty" => options.tty = value == "1",
            _ => {}
        }
    }
    if options.tty && options.stderr {
        tracing::warn!("Access to exec with tty and stderr is not supported, bypassing stderr");
        options.stderr = false;
    }
    if !options.stdin && !options.stdout && !options.stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    Ok(options)
}

/// The ports a port-forward asks for in its query (websocket clients name them there; SPDY ones
/// in each stream's headers), as upstream's NewV4Options.
pub fn forwarded_ports(query: &str) -> Result<Vec<i32>, String> {
    let mut ports = Vec::new();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        if key == "port" {
            for part in value.split(',').filter(|p| !p.is_empty()) {
                let port: u16 = part
                    .parse()
                    .map_err(|_| format!("unable to parse {part:?} as a port: invalid syntax"))?;
                if port == 0 {
                    return Err(format!("port {part:?} must be > 0"));
                }
                ports.push(i32::from(port));
            }
        }
    }
    Ok(ports)
}

/// Whether `request` asks to switch protocols.
pub fn is_upgrade<B>(request: &Request<B>) -> bool {
    let has = |name: hyper::header::HeaderName, token: &str| {
        request.headers().get_all(name).iter().any(|v| {
            v.to_str().is_ok_and(|v| v.split(',').any(|part| part.trim().eq_ignore_ascii_case(token)))
        })
    };
    has(hyper::header::CONNECTION, "upgrade") && request.headers().contains_key(hyper::header::UPGRADE)
}

fn plain(code: StatusCode, message: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(message)).boxed_unsync());
    *response.status_mut() = code;
    response
}

/// Proxies `request`, an upgrade, to the runtime's streaming `url` (`http://host:port/path`):
/// its method and headers go to the runtime; on 101 both upgraded connections are joined, else
/// the runtime's answer is relayed. A request that is not an upgrade is refused (400), as
/// upstream's handler with upgradeRequired.
pub async fn proxy_upgrade(mut request: Request<Incoming>, url: &str) -> Response<Body> {
    if !is_upgrade(&request) {
        return plain(StatusCode::BAD_REQUEST, "Upgrade request required".into());
    }
    let uri: hyper::Uri = match url.parse() {
        Ok(uri) => uri,
        Err(error) => {
            return plain(StatusCode::INTERNAL_SERVER_ERROR, format!("the runtime's URL {url}: {error}"));
        }
    };
    let Some(authority) = uri.authority().cloned() else {
        return plain(StatusCode::INTERNAL_SERVER_ERROR, format!("the runtime's URL {url} has no host"));
    };
    let backend = match tokio::net::TcpStream::connect(authority.as_str()).await {
        Ok(stream) => stream,
        Err(error) => {
            return plain(StatusCode::BAD_GATEWAY, format!("dialing the runtime's stream {url}: {error}"));
        }
    };
    let (mut sender, connection) = match hyper::client::conn::http1::handshake(TokioIo::new(backend)).await {
        Ok(pair) => pair,
        Err(error) => return plain(StatusCode::BAD_GATEWAY, format!("the runtime's stream {url}: {error}")),
    };
    tokio::spawn(async move {
        if let Err(error) = connection.with_upgrades().await {
            tracing::debug!(%error, "the runtime's streaming connection");
        }
    });
    let mut outbound = Request::builder()
        .method(request.method().clone())
        .uri(uri.path_and_query().map_or("/", |p| p.as_str()))
        .body(Empty::<Bytes>::new())
        .unwrap_or_default();
    for (name, value) in request.headers() {
        if name != hyper::header::HOST {
            outbound.headers_mut().append(name.clone(), value.clone());
        }
    }
    if let Ok(host) = hyper::header::HeaderValue::from_str(authority.as_str()) {
        outbound.headers_mut().insert(hyper::header::HOST, host);
    }
    let client_side = hyper::upgrade::on(&mut request);
    let mut answer = match sender.send_request(outbound).await {
        Ok(answer) => answer,
        Err(error) => return plain(StatusCode::BAD_GATEWAY, format!("the runtime's stream {url}: {error}")),
    };
    let status = answer.status();
    let headers = answer.headers().clone();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        // The runtime's refusal, relayed whole (it is short).
        let limited = http_body_util::Limited::new(answer.into_body(), 50_000);
        let body = limited.collect().await.map(http_body_util::Collected::to_bytes).unwrap_or_default();
        let mut relayed = Response::new(Full::new(body).boxed_unsync());
        (*relayed.status_mut(), *relayed.headers_mut()) = (status, headers);
        return relayed;
    }
    let runtime_side = hyper::upgrade::on(&mut answer);
    tokio::spawn(async move {
        let (client, runtime) = match tokio::join!(client_side, runtime_side) {
            (Ok(client), Ok(runtime)) => (client, runtime),
            (Err(error), _) | (_, Err(error)) => {
                tracing::debug!(%error, "upgrading a streaming connection");
                return;
            }
        };
        let (mut client, mut runtime) = (TokioIo::new(client), TokioIo::new(runtime));
        if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut runtime).await {
            tracing::debug!(%error, "a streaming connection ended");
        }
    });
    let mut switched = Response::new(Empty::new().boxed_unsync());
    (*switched.status_mut(), *switched.headers_mut()) = (status, headers);
    switched
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_queries_as_upstream_reads_them() {
        let options = stream_options("command=sh&command=-c&command=echo%20hi&output=1&error=1").unwrap();
        assert_eq!(options.command, ["sh", "-c", "echo hi"]);
        assert!(options.stdout && options.stderr && !options.stdin && !options.tty);
        let tty = stream_options("command=sh&input=1&output=1&error=1&tty=1").unwrap();
        assert!(tty.tty && tty.stdin && !tty.stderr);
        assert_eq!(
            stream_options("command=true&input=0").unwrap_err(),
            "you must specify at least 1 of stdin, stdout, stderr"
        );
        assert_eq!(forwarded_ports("port=80,8080&port=9090").unwrap(), [80, 8080, 9090]);
        assert!(forwarded_ports("port=http").unwrap_err().contains("unable to parse"));
        assert!(forwarded_ports("port=0").is_err());
        assert!(forwarded_ports("").unwrap().is_empty());
    }
}
