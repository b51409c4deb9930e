//! `pods/proxy`: a request relayed to a pod's own address, as kube-apiserver v1.34 relays it
//! (the pod ProxyREST: ResourceLocation picks `scheme://podIP:port`, an UpgradeAwareHandler over
//! the proxy transport carries the request there and the answer back).
//!
//! What is computed here, without IO: the request's parts
//! (`/api/v1/namespaces/<ns>/pods/<[scheme:]name[:port]>/proxy[/<path>]`, upstream's
//! SplitSchemeNamePort and getRequestOptions' subpath), the pod's location (its first pod IP,
//! refused unless global unicast; the port named, else its first container port, else none),
//! the headers that go to the pod (the caller's credentials and hop-by-hop headers out,
//! `X-Forwarded-For` and `X-Forwarded-Uri` in) and those that come back (hop-by-hop and CORS
//! headers out, a redirect's `Location` rewritten under the proxy path). [`transport`] dials
//! the pod and relays.
//!
//! Not done as upstream: an HTML answer's links are not rewritten (upstream's proxy transport
//! re-tokenizes `text/html` bodies to prefix their URLs).

pub mod transport;

#[cfg(test)]
mod tests;

use std::net::IpAddr;

use http::{HeaderMap, HeaderName, HeaderValue, header};
use keel_api::status::ApiError;
use serde_json::Value;

/// The caller's address, kept in a request's extensions for `X-Forwarded-For`.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddress(pub IpAddr);

/// A `pods/proxy` request's path, decoded as upstream reads it (its RequestInfo parts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyPath {
    pub namespace: String,
    /// `name`, `name:port` or `scheme:name:port`, as the path gives it (the request's name).
    pub id: String,
    /// The path the pod is asked for (PodProxyOptions.Path joined onto the location): cleaned,
    /// its trailing slash kept, `""` when the request ends at `proxy`.
    pub path: String,
    /// The request's whole path, decoded (upstream's `req.URL.Path`).
    pub request_path: String,
}

/// Reads `/api/v1/namespaces/<ns>/pods/<id>/proxy[/<path>]` (percent-encoded as it came); none
/// for any other path.
pub fn pod_proxy_path(raw: &str) -> Option<ProxyPath> {
    let request_path = percent_decode_path(raw);
    // upstream's RequestInfo: strings.Split(strings.Trim(path, "/"), "/").
    let parts: Vec<&str> = request_path.trim_matches('/').split('/').collect();
    let ["api", "v1", "namespaces", namespace, "pods", id, "proxy", rest @ ..] = parts.as_slice() else {
        return None;
    };
    if namespace.is_empty() || id.is_empty() {
        return None;
    }
    // getRequestOptions: the parts after the subresource, with a leading slash, and the request's
    // trailing slash.
    let mut subpath = rest.join("/");
    if !subpath.is_empty() && !subpath.starts_with('/') {
        subpath.insert(0, '/');
    }
    if request_path.ends_with('/') && !subpath.ends_with('/') {
        subpath.push('/');
    }
    Some(ProxyPath {
        namespace: (*namespace).to_owned(),
        id: (*id).to_owned(),
        path: join_preserving_trailing_slash(&subpath),
        request_path: request_path.clone(),
    })
}

/// http or https, as a pod's proxy id names it (http when it does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// upstream's SplitSchemeNamePort: `name`, `name:port` or `scheme:name:port` with a scheme of
/// `""`, `http` or `https` and a name that is not empty; the port as given (not necessarily a
/// number). None when the id is none of these.
pub fn split_scheme_name_port(id: &str) -> Option<(Scheme, &str, &str)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => return None,
    };
    let scheme = match scheme {
        "" | "http" => Scheme::Http,
        "https" => Scheme::Https,
        _ => return None,
    };
    (!name.is_empty()).then_some((scheme, name, port))
}

/// Where a pod is reached (upstream's ResourceLocation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub scheme: Scheme,
    pub ip: IpAddr,
    /// The port asked for or the pod's first container port, as text (upstream does not require
    /// a number: the dial decides); none: the scheme's default port.
    pub port: Option<String>,
}

impl Location {
    /// The URL's host (`ip:port`, `[ip]:port`, or the address alone).
    pub fn host(&self) -> String {
        let ip = match self.ip {
            IpAddr::V6(v6) => format!("[{v6}]"),
            IpAddr::V4(v4) => v4.to_string(),
        };
        match &self.port {
            Some(port) => format!("{ip}:{port}"),
            None => ip,
        }
    }
}

/// The location of `pod` for a proxy request naming `scheme` and `port` (upstream's
/// ResourceLocation): the port given, else the first port of the first container that declares
/// one; the pod's first IP, which must be a global unicast address (400 "address not allowed"
/// otherwise, a pod without an IP included).
pub fn resource_location(pod: &Value, scheme: Scheme, port: &str) -> Result<Location, ApiError> {
    let mut port = (!port.is_empty()).then(|| port.to_owned());
    if port.is_none() {
        let containers = pod["spec"]["containers"].as_array().into_iter().flatten();
        port = containers
            .filter_map(|c| c["ports"].as_array().and_then(|p| p.first()))
            .map(|p| p["containerPort"].as_i64().unwrap_or_default().to_string())
            .next();
    }
    let ip = pod["status"]["podIPs"][0]["ip"].as_str().unwrap_or_default();
    let ip = ip
        .parse::<IpAddr>()
        .ok()
        .filter(crate::kubelet_client::global_unicast)
        .ok_or_else(|| ApiError::BadRequest("address not allowed".into()))?;
    Ok(Location { scheme, ip, port })
}

/// A request's `dryRun` parameter, which a connect subresource refuses (upstream's
/// ConnectResource: 400 "dryRun is not supported").
pub fn refuse_dry_run(query: Option<&str>) -> Result<(), ApiError> {
    let pairs = form_urlencoded::parse(query.unwrap_or_default().as_bytes());
    if pairs.into_iter().any(|(key, _)| key == "dryRun") {
        return Err(ApiError::BadRequest("dryRun is not supported".into()));
    }
    Ok(())
}

/// The path and query the pod is sent (Go's URL.RequestURI of the location): the path escaped
/// as Go escapes a URL path, `/` when empty, the caller's query as it came.
pub fn request_uri(path: &str, query: Option<&str>) -> String {
    let mut uri = escape_path(path);
    if uri.is_empty() {
        uri.push('/');
    }
    if let Some(query) = query.filter(|q| !q.is_empty()) {
        uri.push('?');
        uri.push_str(query);
    }
    uri
}

/// What precedes the pod's path in the caller's (upstream's PathPrepend): the request's path
/// less the location's path, e.g. `/api/v1/namespaces/ns/pods/web:80/proxy`.
pub fn path_prepend(proxy: &ProxyPath) -> String {
    let mut suffix = proxy.path.clone();
    if proxy.request_path.ends_with('/') && !suffix.ends_with('/') {
        suffix.push('/');
    }
    proxy.request_path.strip_suffix(suffix.as_str()).unwrap_or(&proxy.request_path).to_owned()
}

/// `X-Forwarded-Uri`: the caller's path as the proxy transport rebuilds it.
pub fn forwarded_uri(prepend: &str, path: &str) -> String {
    let mut uri = join(prepend, &escape_path(path));
    if path.ends_with('/') && !uri.ends_with('/') {
        uri.push('/');
    }
    uri
}

/// The headers the pod is sent (httputil.ReverseProxy with upstream's proxy transport): the
/// caller's, less what the API server consumed and the hop-by-hop headers, with the caller's
/// address appended to `X-Forwarded-For` and `X-Forwarded-Uri` set. `Host` stays the one the
/// caller sent the API server.
pub fn outgoing_headers(incoming: &HeaderMap, client: Option<IpAddr>, forwarded_uri: &str) -> HeaderMap {
    let mut headers = upgrade_headers(incoming, client);
    let trailers = incoming
        .get_all(header::TE)
        .iter()
        .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("trailers"))));
    remove_hop_by_hop(&mut headers);
    if trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
    if let Ok(value) = HeaderValue::from_str(forwarded_uri) {
        headers.insert("x-forwarded-uri", value);
    }
    headers
}

/// The headers an upgrade request takes to the pod (upstream's tryUpgrade): the caller's, less
/// the credentials the API server consumed (Authorization, Impersonate-*: its authentication and
/// impersonation filters drop them), with the caller's address appended to `X-Forwarded-For`.
pub fn upgrade_headers(incoming: &HeaderMap, client: Option<IpAddr>) -> HeaderMap {
    let mut headers = incoming.clone();
    headers.remove(header::AUTHORIZATION);
    let consumed: Vec<HeaderName> = headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            matches!(name, "impersonate-user" | "impersonate-group" | "impersonate-uid")
                || name.starts_with("impersonate-extra-")
        })
        .cloned()
        .collect();
    for name in consumed {
        headers.remove(name);
    }
    if let Some(client) = client {
        let prior: Vec<&str> =
            incoming.get_all("x-forwarded-for").iter().filter_map(|v| v.to_str().ok()).collect();
        let mut value = prior.join(", ");
        if !value.is_empty() {
            value.push_str(", ");
        }
        value.push_str(&client.to_string());
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert("x-forwarded-for", value);
        }
    }
    headers
}

/// The pod's answer's headers as the caller gets them: less the hop-by-hop headers and the
/// CORS headers (upstream's corsRemovingTransport), a redirect's `Location` rewritten to stay
/// under the proxy path, an HTML answer without its `Content-Length`.
pub fn relayed_headers(headers: &mut HeaderMap, pod_host: &str, request_host: &str, prepend: &str) {
    remove_hop_by_hop(headers);
    for cors in [
        "access-control-allow-credentials",
        "access-control-allow-headers",
        "access-control-allow-methods",
        "access-control-allow-origin",
    ] {
        headers.remove(cors);
    }
    let location = headers.get(header::LOCATION).and_then(|v| v.to_str().ok());
    if let Some(location) = location.filter(|l| !l.is_empty()) {
        let rewritten = rewrite_url(location, pod_host, request_host, prepend);
        if let Ok(value) = HeaderValue::from_str(&rewritten) {
            headers.insert(header::LOCATION, value);
        }
        return;
    }
    // Upstream rewrites an HTML body's links (when it can decode it), which drops its length;
    // Keel relays the body as it is, without the length all the same.
    let media_type = |name| {
        let value = headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok()).unwrap_or_default();
        value.split(';').next().unwrap_or_default().trim().to_owned()
    };
    if media_type(header::CONTENT_TYPE) == "text/html"
        && matches!(media_type(header::CONTENT_ENCODING).as_str(), "" | "gzip" | "deflate")
    {
        headers.remove(header::CONTENT_LENGTH);
    }
}

/// The hop-by-hop headers (Go's ReverseProxy's list, and whatever `Connection` names) removed.
fn remove_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<String> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    for name in named {
        headers.remove(name.as_str());
    }
    for hop in [
        "connection",
        "proxy-connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ] {
        headers.remove(hop);
    }
}

/// A URL the pod answered with, as upstream's proxy transport rewrites it (rewriteURL): one on
/// another host, or relative, is left alone; otherwise its scheme and host go (unless it names
/// the API server's host) and its path is put under `prepend` unless it is already there.
pub fn rewrite_url(url: &str, pod_host: &str, request_host: &str, prepend: &str) -> String {
    let (rest, fragment) = match url.split_once('#') {
        Some((rest, fragment)) => (rest, Some(fragment)),
        None => (url, None),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    // scheme ":" then "//" authority, as url.Parse reads them.
    let (scheme, rest) = match rest.split_once(':') {
        Some((scheme, after))
            if !scheme.is_empty()
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')) =>
        {
            (scheme, after)
        }
        _ => ("", rest),
    };
    let (host, path) = match rest.strip_prefix("//") {
        Some(authority) => match authority.find('/') {
            Some(slash) => (&authority[..slash], &authority[slash..]),
            None => (authority, ""),
        },
        None => ("", rest),
    };
    let host = host.rsplit_once('@').map_or(host, |(_, host)| host);
    let different_host = !host.is_empty() && host != pod_host && host != request_host;
    if different_host || !path.starts_with('/') {
        return url.to_owned();
    }
    let keep_origin = host == request_host;
    let mut out = String::new();
    if keep_origin {
        if !scheme.is_empty() {
            out.push_str(scheme);
            out.push(':');
        }
        if !host.is_empty() || rest.starts_with("//") {
            out.push_str("//");
            out.push_str(host);
        }
    }
    let decoded = percent_decode_path(path);
    if decoded.starts_with(prepend) {
        out.push_str(path);
    } else {
        let mut joined = join(prepend, &decoded);
        if decoded.ends_with('/') && !joined.ends_with('/') {
            joined.push('/');
        }
        out.push_str(&escape_path(&joined));
    }
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// Go's path.Join of two elements (empty ones ignored), cleaned.
fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => String::new(),
        (false, true) => clean(a),
        (true, false) => clean(b),
        (false, false) => clean(&format!("{a}/{b}")),
    }
}

/// utilnet's JoinPreservingTrailingSlash("", path): the path cleaned, its trailing slash kept.
fn join_preserving_trailing_slash(path: &str) -> String {
    if path.is_empty() {
        return String::new();
    }
    let mut cleaned = clean(path);
    if path.ends_with('/') && !cleaned.ends_with('/') {
        cleaned.push('/');
    }
    cleaned
}

/// Go's path.Clean: `.` and empty elements dropped, `..` removing the one before it (and
/// nothing above a rooted path's root).
fn clean(path: &str) -> String {
    if path.is_empty() {
        return ".".to_owned();
    }
    let rooted = path.starts_with('/');
    let mut kept: Vec<&str> = Vec::new();
    for element in path.split('/') {
        match element {
            "" | "." => {}
            ".." => {
                if kept.last().is_some_and(|last| *last != "..") {
                    kept.pop();
                } else if !rooted {
                    kept.push("..");
                }
            }
            element => kept.push(element),
        }
    }
    let joined = kept.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// A URL path percent-decoded (no `+` to space: that is the query's encoding).
fn percent_decode_path(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(high), Some(low)) =
                (bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex))
        {
            out.push((high * 16 + low) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A path escaped as Go's URL.EscapedPath escapes one: unreserved characters and
/// `$&+,/:;=@` as they are, everything else `%XX`.
fn escape_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~$&+,/:;=@".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
