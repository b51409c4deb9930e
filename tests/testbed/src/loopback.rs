//! Loopback helpers for fixtures: free ports and a minimal HTTP/1.1 GET over `std::net::TcpStream`.
//!
//! Only ever talks to addresses the caller hands in; fixtures only hand in 127.0.0.1.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, bail};

/// A response to [`http_get`]: the status code and the (de-chunked) body as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    pub status: u16,
    pub body: String,
}

/// Picks a free TCP port on 127.0.0.1 by binding port 0 and releasing it.
///
/// Another process can take the port before the daemon binds it; fixtures that use this retry when a
/// daemon reports "address already in use".
pub fn free_port() -> Result<u16> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding 127.0.0.1:0 to pick a free port")?;
    let port = listener.local_addr().context("reading the address of a 127.0.0.1:0 listener")?.port();
    Ok(port)
}

/// `count` distinct free ports on 127.0.0.1 (all bound at once, then released; see [`free_port`]).
pub fn free_ports(count: usize) -> Result<Vec<u16>> {
    let listeners = (0..count)
        .map(|_| {
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("binding 127.0.0.1:0 to pick a free port")
        })
        .collect::<Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|listener| {
            Ok(listener.local_addr().context("reading the address of a 127.0.0.1:0 listener")?.port())
        })
        .collect()
}

/// A `SocketAddr` on 127.0.0.1 with a free port (see [`free_port`]).
pub fn free_local_addr() -> Result<SocketAddr> {
    Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?)))
}

/// Sends `GET path HTTP/1.1` to `addr` and reads the whole response (the request asks the server to close).
///
/// `timeout` bounds the connect and each read and write.
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<HttpResponse> {
    let mut stream =
        TcpStream::connect_timeout(&addr, timeout).with_context(|| format!("connecting to http://{addr}"))?;
    stream.set_read_timeout(Some(timeout)).context("setting a read timeout")?;
    stream.set_write_timeout(Some(timeout)).context("setting a write timeout")?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: keel-testbed\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).with_context(|| format!("sending GET {path} to {addr}"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .with_context(|| format!("reading the response to GET {path} from {addr}"))?;
    parse_response(&raw).with_context(|| format!("parsing the response to GET {path} from {addr}"))
}

fn parse_response(raw: &[u8]) -> Result<HttpResponse> {
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        bail!("no end of headers in {} bytes", raw.len());
    };
    let head = String::from_utf8_lossy(&raw[..split]);
    let body = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .with_context(|| format!("bad status line {status_line:?}"))?;
    let chunked = lines.any(|line| {
        let lower = line.to_ascii_lowercase();
        lower.starts_with("transfer-encoding:") && lower.contains("chunked")
    });
    let body = if chunked { dechunk(body)? } else { body.to_vec() };
    Ok(HttpResponse { status, body: String::from_utf8_lossy(&body).into_owned() })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") else {
            bail!("truncated chunk size line");
        };
        let size_text = String::from_utf8_lossy(&rest[..eol]);
        let size_hex = size_text.split(';').next().unwrap_or_default().trim();
        let size =
            usize::from_str_radix(size_hex, 16).with_context(|| format!("bad chunk size {size_hex:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = rest.get(..size).context("truncated chunk")?;
        out.extend_from_slice(chunk);
        rest = rest.get(size + 2..).context("truncated chunk trailer")?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked_bodies() -> Result<()> {
        let plain = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")?;
        assert_eq!(plain, HttpResponse { status: 200, body: "{}".into() });
        let chunked = parse_response(
            b"HTTP/1.1 503 Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
        )?;
        assert_eq!(chunked, HttpResponse { status: 503, body: "abcde".into() });
        assert!(parse_response(b"garbage").is_err());
        assert!(parse_response(b"HTTP/1.1 xyz\r\n\r\n").is_err());
        Ok(())
    }
}
