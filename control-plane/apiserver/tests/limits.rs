//! The server's limits as kube-apiserver's flags set them: writes beyond
//! `--max-mutating-requests-inflight` answered 429 with Retry-After while reads and watches go on,
//! and a request not answered within `--request-timeout` answered 504 Timeout.

use crate::common;

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, ensure};
use common::Server;
use keel_store::Store;
use keel_store::embedded::{EmbeddedStore, Options};
use serde_json::Value;

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const BODY: &str = r#"{"metadata":{"name":"slow"}}"#;

async fn start(configure: impl FnOnce(&mut keel_apiserver::Config)) -> Result<Server> {
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(Options::new(dir.path().join("data")))?);
    Server::start_with(store, dir, configure).await
}

/// A create whose headers are sent and whose body is not yet: the server holds it in flight.
fn slow_create(
    server: &Server,
    query: &str,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>> {
    let mut tls = common::tls_stream(
        server.address,
        &server.pki.ca_pem,
        Some((&server.pki.admin_cert_pem, &server.pki.admin_key_pem)),
    )?;
    write!(
        tls,
        "POST {CMS}{query} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        server.address,
        BODY.len()
    )?;
    tls.flush()?;
    Ok(tls)
}

/// Sends the rest of a slow create and reads its answer.
fn finish(mut tls: rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>) -> Result<String> {
    tls.write_all(BODY.as_bytes())?;
    let mut answer = Vec::new();
    match tls.read_to_end(&mut answer) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => return Err(e.into()),
    }
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_beyond_the_limit_are_told_to_retry() -> Result<()> {
    let server = start(|config| config.limits.max_mutating_requests_inflight = 1).await?;
    // Once the server reads a slow create's headers, it holds the only write slot. (A create of the
    // probe's own may hold it first: the slow one is then refused, and tried again.)
    let mut refused = None;
    for _ in 0..50 {
        let slow = tokio::task::block_in_place(|| slow_create(&server, ""))?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let other = br#"{"metadata":{"name":"other"}}"#;
        let (status, head, body) =
            server.request_with_headers("POST", CMS, &[("Content-Type", "application/json")], other).await?;
        if status == 429 {
            refused = Some((slow, head, body));
            break;
        }
        ensure!(status == 201 || status == 409, "{status} {body}");
        let answer = tokio::task::block_in_place(|| finish(slow))?;
        ensure!(
            answer.starts_with("HTTP/1.1 429")
                || answer.starts_with("HTTP/1.1 201")
                || answer.starts_with("HTTP/1.1 409"),
            "{answer}"
        );
    }
    let Some((slow, head, body)) = refused else {
        anyhow::bail!("no write was refused while one was in flight")
    };
    ensure!(head.to_ascii_lowercase().contains("retry-after: 1"), "{head}");
    let status: Value = serde_json::from_str(&body)?;
    ensure!(status["reason"] == "TooManyRequests" && status["details"]["retryAfterSeconds"] == 1, "{status}");
    // Reads and watches are not writes.
    ensure!(server.request("GET", CMS, &[], b"").await?.0 == 200);
    let (status, _, _) = server.request("GET", &format!("{CMS}?watch=1&timeoutSeconds=1"), &[], b"").await?;
    ensure!(status == 200);
    let answer = tokio::task::block_in_place(|| finish(slow))?;
    ensure!(answer.starts_with("HTTP/1.1 201") || answer.starts_with("HTTP/1.1 409"), "{answer}");
    let (status, _, body) = server
        .request("POST", CMS, &[("Content-Type", "application/json")], br#"{"metadata":{"name":"after"}}"#)
        .await?;
    ensure!(status == 201, "the slot is free again: {status} {body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_past_its_timeout_is_a_504() -> Result<()> {
    let server = start(|config| config.limits.request_timeout = Duration::from_millis(500)).await?;
    // A write is no watch, whatever its query says.
    for query in ["", "?watch=true"] {
        let slow = tokio::task::block_in_place(|| slow_create(&server, query))?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let answer = tokio::task::block_in_place(|| finish(slow))?;
        ensure!(answer.starts_with("HTTP/1.1 504"), "{query}: {answer}");
        ensure!(
            answer.contains(r#""reason":"Timeout""#)
                && answer.contains("request did not complete within requested timeout"),
            "{answer}"
        );
    }
    // Nothing was created, and a watch outlives the timeout: it still sees a change made after it.
    ensure!(server.request("GET", &format!("{CMS}/slow"), &[], b"").await?.0 == 404);
    let watch = {
        let (address, ca) = (server.address, server.pki.ca_pem.clone());
        let (cert, key) = (server.pki.admin_cert_pem.clone(), server.pki.admin_key_pem.clone());
        tokio::task::spawn_blocking(move || {
            let path = format!("{CMS}?watch=1&timeoutSeconds=3");
            common::raw_request(address, &ca, Some((&cert, &key)), "GET", &path, &[], b"")
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let late = br#"{"metadata":{"name":"late"}}"#;
    ensure!(server.request("POST", CMS, &[("Content-Type", "application/json")], late).await?.0 == 201);
    let (status, _, events) = watch.await??;
    ensure!(status == 200 && events.contains(r#""name":"late""#), "{status} {events}");
    Ok(())
}
