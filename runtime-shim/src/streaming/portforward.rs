//! Port-forward sessions, as the kubelet's `cri/streaming/portforward` serves them.
//!
//! SPDY (`portforward.k8s.io`): per forwarded connection the client opens a data and an error stream
//! with the same `requestID` and `port` headers; a stream without a valid port or stream type is
//! refused; once both arrived the backend forwards the data stream, and a failure is written as text
//! on the error stream. Websocket (`v4.channel.k8s.io`, `v4.base64.channel.k8s.io`, or none named):
//! the ports are the request's (else the `ports` query parameter), two channels per port (data 2i,
//! error 2i+1), each starting with the port as two little-endian bytes.

use std::collections::HashMap;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use k8s_cri::v1 as api;
use tokio::io::AsyncWriteExt;

use super::Shared;
use super::http::{self, Body};
use super::remotecommand::Sink;
use super::spdy::{ChannelReader, Session, SpdyStream};
use super::ws::{self, Channels};

/// The SPDY protocol served.
const SPDY_PROTOCOLS: &[&str] = &["portforward.k8s.io"];
/// Websocket subprotocols served ("" = a client naming none).
const WS_PROTOCOLS: &[&str] = &["v4.channel.k8s.io", "v4.base64.channel.k8s.io", ""];
/// Bytes buffered between the backend and a client stream.
const PIPE: usize = 64 << 10;

pub(super) fn serve(
    shared: &Arc<Shared>,
    mut req: Request<Incoming>,
    pf: api::PortForwardRequest,
) -> Response<Body> {
    let shared = shared.clone();
    let sandbox = pf.pod_sandbox_id;
    if http::is_websocket(&req) {
        let ports = if pf.port.is_empty() {
            match query_ports(req.uri().query().unwrap_or_default()) {
                Ok(ports) => ports,
                Err(message) => return http::error(StatusCode::BAD_REQUEST, &message),
            }
        } else {
            // Validated by get_port_forward.
            pf.port.iter().filter_map(|port| u16::try_from(*port).ok()).collect()
        };
        let (response, protocol) = match http::websocket_upgrade(&req, WS_PROTOCOLS) {
            Ok(ok) => ok,
            Err(response) => return *response,
        };
        let upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            let Ok(upgraded) = upgrade.await else { return };
            let count = u8::try_from(ports.len() * 2).unwrap_or(0);
            let data: Vec<u8> = (0..count).step_by(2).collect();
            let all: Vec<u8> = (0..count).collect();
            let mut channels =
                Channels::start(upgraded, ws::framing(protocol), &data, &all, shared.config.idle_timeout)
                    .await;
            let mut forwards = Vec::new();
            for (index, port) in ports.iter().enumerate() {
                let channel = u8::try_from(index * 2).unwrap_or(0);
                let (Some(data), Some(error), Some(reader)) = (
                    channels.writers.get(&channel).cloned(),
                    channels.writers.get(&(channel + 1)).cloned(),
                    channels.readers.remove(&channel),
                ) else {
                    continue;
                };
                let port_bytes = port.to_le_bytes();
                data.write(&port_bytes).await;
                error.write(&port_bytes).await;
                forwards.push(tokio::spawn(forward(
                    shared.clone(),
                    sandbox.clone(),
                    *port,
                    reader,
                    Sink::Ws(data),
                    Sink::Ws(error),
                )));
            }
            for forward in forwards {
                let _ = forward.await;
            }
            channels.close().await;
        });
        return response;
    }
    let (response, _) = match http::spdy_upgrade(&req, SPDY_PROTOCOLS) {
        Ok(ok) => ok,
        Err(response) => return *response,
    };
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = upgrade.await else { return };
        let mut session = Session::start(TokioIo::new(upgraded), shared.config.idle_timeout);
        serve_spdy(&shared, &sandbox, &mut session).await;
        session.close().await;
    });
    response
}

/// The `ports` query parameter (comma-separated, repeatable), as the kubelet's `NewV4Options`.
fn query_ports(query: &str) -> Result<Vec<u16>, String> {
    let values: Vec<String> = query
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .filter(|(key, _)| *key == "ports")
        .map(|(_, value)| value.replace("%2C", ",").replace("%2c", ","))
        .collect();
    if values.is_empty() {
        return Err("query parameter \"ports\" is required".to_owned());
    }
    let mut ports = Vec::new();
    for value in values {
        if value.is_empty() {
            return Err("query parameter \"ports\" cannot be empty".to_owned());
        }
        for port in value.split(',') {
            match port.parse::<u16>() {
                Ok(0) => return Err(format!("port {value:?} must be > 0")),
                Ok(port) => ports.push(port),
                Err(err) => return Err(format!("unable to parse {value:?} as a port: {err}")),
            }
        }
    }
    Ok(ports)
}

/// A stream's port and type, or why it is refused (the kubelet's `httpStreamReceived`).
fn check(stream: &SpdyStream) -> Result<(u16, bool), String> {
    let port = stream.header("port").filter(|p| !p.is_empty()).ok_or("\"port\" header is required")?;
    let port = match port.parse::<u16>() {
        Ok(0) => return Err(format!("port {port:?} must be > 0")),
        Ok(port) => port,
        Err(err) => return Err(format!("unable to parse {port:?} as a port: {err}")),
    };
    match stream.header("streamtype") {
        Some("data") => Ok((port, true)),
        Some("error") => Ok((port, false)),
        None | Some("") => Err("\"streamType\" header is required".to_owned()),
        Some(other) => Err(format!("invalid stream type {other:?}")),
    }
}

/// Half of a pair, waiting for the other.
#[derive(Default)]
struct Pair {
    data: Option<(u16, SpdyStream)>,
    error: Option<SpdyStream>,
}

async fn serve_spdy(shared: &Arc<Shared>, sandbox: &str, session: &mut Session) {
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let pair_timeout = shared.config.stream_creation_timeout;
    let (expired_tx, mut expired) = tokio::sync::mpsc::unbounded_channel::<String>();
    loop {
        let stream = tokio::select! {
            stream = session.streams.recv() => match stream { Some(stream) => stream, None => return },
            Some(request_id) = expired.recv() => {
                if let Some(pair) = pairs.remove(&request_id) && let Some(error) = pair.error {
                    let message = format!("(request={request_id}) timed out waiting for streams");
                    error.out.write(message.as_bytes()).await;
                    error.out.close().await;
                }
                continue;
            }
        };
        let Ok((port, is_data)) = check(&stream) else {
            stream.out.refuse().await;
            continue;
        };
        stream.out.reply().await;
        let request_id = match stream.header("requestid").filter(|id| !id.is_empty()) {
            Some(id) => id.to_owned(),
            // Clients older than request ids: consecutive error then data streams (the kubelet's guess).
            None if is_data => stream.id.saturating_sub(2).to_string(),
            None => stream.id.to_string(),
        };
        let pair = pairs.entry(request_id.clone()).or_insert_with(|| {
            let expired_tx = expired_tx.clone();
            let request_id = request_id.clone();
            tokio::spawn(async move {
                tokio::time::sleep(pair_timeout).await;
                let _ = expired_tx.send(request_id);
            });
            Pair::default()
        });
        let duplicate = if is_data { pair.data.is_some() } else { pair.error.is_some() };
        if duplicate {
            if let Some(error) = &pair.error {
                let kind = if is_data { "data" } else { "error" };
                let message = format!(
                    "error processing stream for request {request_id}: {kind} stream already assigned"
                );
                error.out.write(message.as_bytes()).await;
            }
            continue;
        }
        if is_data {
            pair.data = Some((port, stream));
        } else {
            pair.error = Some(stream);
        }
        if pair.data.is_some() && pair.error.is_some() {
            let Some(Pair { data: Some((port, data)), error: Some(error) }) = pairs.remove(&request_id)
            else {
                continue;
            };
            tokio::spawn(forward(
                shared.clone(),
                sandbox.to_owned(),
                port,
                data.reader,
                Sink::Spdy(data.out),
                Sink::Spdy(error.out),
            ));
        }
    }
}

/// Runs the backend's forward of `port` between the client's `incoming`/`data` and the pod, then
/// writes a failure on `error` and closes both.
async fn forward(
    shared: Arc<Shared>,
    sandbox: String,
    port: u16,
    mut incoming: ChannelReader,
    data: Sink,
    error: Sink,
) {
    let (ours, theirs) = tokio::io::duplex(PIPE);
    let (ours_read, mut ours_write) = tokio::io::split(ours);
    let inbound = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut incoming, &mut ours_write).await;
        let _ = ours_write.shutdown().await;
    });
    let outbound = tokio::spawn(data.pump(ours_read));
    let result = shared.backend.clone().port_forward(sandbox.clone(), port, theirs).await;
    if let Err(err) = result {
        let message = format!("error forwarding port {port} to pod {sandbox}, uid : {err}");
        error.write(message.as_bytes()).await;
    }
    error.close().await;
    inbound.abort();
    let _ = outbound.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_from_the_query() {
        assert_eq!(query_ports("ports=80,443&ports=8080"), Ok(vec![80, 443, 8080]));
        assert_eq!(query_ports("ports=80%2C81"), Ok(vec![80, 81]));
        assert!(query_ports("").is_err());
        assert!(query_ports("ports=").is_err());
        assert!(query_ports("ports=0").is_err());
        assert!(query_ports("ports=x").is_err());
        assert!(query_ports("ports=70000").is_err());
    }
}
