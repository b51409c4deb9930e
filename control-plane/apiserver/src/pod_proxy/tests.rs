use serde_json::json;

use super::*;

fn proxy(path: &str) -> Option<(String, String, String)> {
    pod_proxy_path(path).map(|p| (p.namespace, p.id, p.path))
}

fn owned(namespace: &str, id: &str, path: &str) -> Option<(String, String, String)> {
    Some((namespace.to_owned(), id.to_owned(), path.to_owned()))
}

#[test]
fn pod_proxy_paths() {
    assert_eq!(proxy("/api/v1/namespaces/ns/pods/web/proxy"), owned("ns", "web", ""));
    assert_eq!(proxy("/api/v1/namespaces/ns/pods/web/proxy/"), owned("ns", "web", "/"));
    assert_eq!(
        proxy("/api/v1/namespaces/ns/pods/web:8080/proxy/index.html"),
        owned("ns", "web:8080", "/index.html")
    );
    assert_eq!(
        proxy("/api/v1/namespaces/ns/pods/https:web:8443/proxy/a/b/"),
        owned("ns", "https:web:8443", "/a/b/")
    );
    // Cleaned as upstream joins PodProxyOptions.Path, after decoding.
    assert_eq!(proxy("/api/v1/namespaces/ns/pods/web/proxy//a/./b/../c"), owned("ns", "web", "/a/c"));
    assert_eq!(proxy("/api/v1/namespaces/ns/pods/web/proxy/../../x"), owned("ns", "web", "/x"));
    assert_eq!(proxy("/api/v1/namespaces/ns/pods/web%3A80/proxy/a%20b"), owned("ns", "web:80", "/a b"));
    for other in [
        "/api/v1/namespaces/ns/pods/web",
        "/api/v1/namespaces/ns/pods/web/proxyx",
        "/api/v1/namespaces/ns/pods/web/exec",
        "/api/v1/namespaces/ns/services/web/proxy",
        "/api/v1/nodes/n1/proxy",
        "/api/v1/namespaces/ns/pods//proxy",
        "/apis/v1/namespaces/ns/pods/web/proxy",
    ] {
        assert_eq!(proxy(other), None, "{other}");
    }
}

#[test]
fn scheme_name_and_port() {
    assert_eq!(split_scheme_name_port("web"), Some((Scheme::Http, "web", "")));
    assert_eq!(split_scheme_name_port("web:8080"), Some((Scheme::Http, "web", "8080")));
    assert_eq!(split_scheme_name_port("http:web:8080"), Some((Scheme::Http, "web", "8080")));
    assert_eq!(split_scheme_name_port("https:web:8443"), Some((Scheme::Https, "web", "8443")));
    // A port is not required to be a number (the dial decides), nor present.
    assert_eq!(split_scheme_name_port("web:http"), Some((Scheme::Http, "web", "http")));
    assert_eq!(split_scheme_name_port("https:web:"), Some((Scheme::Https, "web", "")));
    for invalid in ["ftp:web:21", ":8080", "https::443", "a:b:c:d", ""] {
        assert_eq!(split_scheme_name_port(invalid), None, "{invalid}");
    }
}

#[test]
fn the_pods_location() {
    let pod = |ip: &str| {
        json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "ports": [{"containerPort": 8080}, {"containerPort": 9090}]}]},
               "status": {"podIP": ip, "podIPs": [{"ip": ip}]}})
    };
    let location = resource_location(&pod("10.97.0.5"), Scheme::Http, "").unwrap();
    assert_eq!(location.port.as_deref(), Some("8080"), "the first container port");
    assert_eq!(location.host(), "10.97.0.5:8080");
    let location = resource_location(&pod("10.97.0.5"), Scheme::Https, "443").unwrap();
    assert_eq!((location.scheme, location.host()), (Scheme::Https, "10.97.0.5:443".to_owned()));
    let v6 = resource_location(&pod("fd00::5"), Scheme::Http, "80").unwrap();
    assert_eq!(v6.host(), "[fd00::5]:80");
    let portless =
        json!({"spec": {"containers": [{"name": "a"}]}, "status": {"podIPs": [{"ip": "10.97.0.5"}]}});
    let location = resource_location(&portless, Scheme::Http, "").unwrap();
    assert_eq!((location.port.clone(), location.host()), (None, "10.97.0.5".to_owned()));
    for refused in ["127.0.0.1", "169.254.169.254", "::1", "fe80::1", "0.0.0.0", "::ffff:127.0.0.1", "", "x"]
    {
        let error = resource_location(&pod(refused), Scheme::Http, "80").unwrap_err();
        assert_eq!((error.code(), error.to_string()), (400, "address not allowed".to_owned()), "{refused:?}");
    }
    let unscheduled = json!({"spec": {"containers": [{"name": "a"}]}, "status": {}});
    assert_eq!(resource_location(&unscheduled, Scheme::Http, "80").map_err(|e| e.code()), Err(400));
}

#[test]
fn dry_run_is_refused() {
    assert!(refuse_dry_run(None).is_ok());
    assert!(refuse_dry_run(Some("a=b")).is_ok());
    let error = refuse_dry_run(Some("a=b&dryRun=All")).unwrap_err();
    assert_eq!((error.code(), error.to_string()), (400, "dryRun is not supported".to_owned()));
}

#[test]
fn the_uri_the_pod_is_sent_and_the_forwarded_one() {
    assert_eq!(request_uri("", None), "/");
    assert_eq!(request_uri("/a b/c(1)", Some("x=1&y=%20")), "/a%20b/c%281%29?x=1&y=%20");
    assert_eq!(request_uri("/$&+,:;=@~", Some("")), "/$&+,:;=@~");
    let path = pod_proxy_path("/api/v1/namespaces/ns/pods/web:80/proxy/cgi-bin/echo").unwrap();
    let prepend = path_prepend(&path);
    assert_eq!(prepend, "/api/v1/namespaces/ns/pods/web:80/proxy");
    assert_eq!(forwarded_uri(&prepend, &path.path), "/api/v1/namespaces/ns/pods/web:80/proxy/cgi-bin/echo");
    let root = pod_proxy_path("/api/v1/namespaces/ns/pods/web:80/proxy/").unwrap();
    let prepend = path_prepend(&root);
    assert_eq!(prepend, "/api/v1/namespaces/ns/pods/web:80/proxy");
    assert_eq!(forwarded_uri(&prepend, &root.path), "/api/v1/namespaces/ns/pods/web:80/proxy/");
}

#[test]
fn headers_to_the_pod() {
    let mut incoming = HeaderMap::new();
    for (name, value) in [
        ("authorization", "Bearer secret"),
        ("impersonate-user", "someone"),
        ("impersonate-extra-scopes", "x"),
        ("connection", "keep-alive, x-hop"),
        ("x-hop", "1"),
        ("keep-alive", "timeout=5"),
        ("transfer-encoding", "chunked"),
        ("te", "trailers, deflate"),
        ("x-forwarded-for", "192.0.2.1"),
        ("x-custom", "kept"),
        ("host", "apiserver:6443"),
    ] {
        incoming.append(name, HeaderValue::from_static(value));
    }
    let out = outgoing_headers(&incoming, Some("10.0.0.9".parse().unwrap()), "/api/v1/x");
    let names: std::collections::BTreeSet<&str> = out.keys().map(HeaderName::as_str).collect();
    assert_eq!(
        names,
        ["host", "te", "x-custom", "x-forwarded-for", "x-forwarded-uri"].into_iter().collect(),
        "{out:?}"
    );
    assert_eq!(out["te"], "trailers");
    assert_eq!(out["x-forwarded-for"], "192.0.2.1, 10.0.0.9");
    assert_eq!(out["x-forwarded-uri"], "/api/v1/x");
    assert_eq!(out["host"], "apiserver:6443");
    // An upgrade keeps its Connection and Upgrade headers.
    let mut upgrading = HeaderMap::new();
    upgrading.insert("connection", HeaderValue::from_static("Upgrade"));
    upgrading.insert("upgrade", HeaderValue::from_static("websocket"));
    upgrading.insert("authorization", HeaderValue::from_static("Bearer secret"));
    let out = upgrade_headers(&upgrading, Some("10.0.0.9".parse().unwrap()));
    let names: std::collections::BTreeSet<&str> = out.keys().map(HeaderName::as_str).collect();
    assert_eq!(names, ["connection", "upgrade", "x-forwarded-for"].into_iter().collect());
}

#[test]
fn headers_from_the_pod() {
    let mut answer = HeaderMap::new();
    for (name, value) in [
        ("content-type", "text/plain"),
        ("connection", "close"),
        ("transfer-encoding", "chunked"),
        ("access-control-allow-origin", "*"),
        ("access-control-allow-credentials", "true"),
        ("access-control-expose-headers", "x"),
        ("location", "/cgi-bin/"),
    ] {
        answer.append(name, HeaderValue::from_static(value));
    }
    relayed_headers(&mut answer, "10.0.0.5:80", "127.0.0.1:6443", "/api/v1/namespaces/ns/pods/web:80/proxy");
    let names: std::collections::BTreeSet<&str> = answer.keys().map(HeaderName::as_str).collect();
    assert_eq!(names, ["access-control-expose-headers", "content-type", "location"].into_iter().collect());
    assert_eq!(answer["location"], "/api/v1/namespaces/ns/pods/web:80/proxy/cgi-bin/");
    let html = |content_type: &'static str, encoding: Option<&'static str>| {
        let mut answer = HeaderMap::new();
        answer.insert("content-type", HeaderValue::from_static(content_type));
        answer.insert("content-length", HeaderValue::from_static("3"));
        if let Some(encoding) = encoding {
            answer.insert("content-encoding", HeaderValue::from_static(encoding));
        }
        relayed_headers(&mut answer, "10.0.0.5:80", "127.0.0.1:6443", "/p");
        answer.contains_key("content-length")
    };
    assert!(!html("text/html; charset=utf-8", None));
    assert!(!html("text/html", Some("gzip")));
    assert!(html("text/html", Some("br")), "an encoding upstream cannot read: left alone");
    assert!(html("text/plain", None));
}

#[test]
fn redirects_stay_under_the_proxy_path() {
    let prepend = "/api/v1/namespaces/ns/pods/web:80/proxy";
    let rewrite = |url: &str| rewrite_url(url, "10.0.0.5:80", "127.0.0.1:6443", prepend);
    assert_eq!(rewrite("/a/b?x=1#f"), format!("{prepend}/a/b?x=1#f"));
    assert_eq!(rewrite("/"), format!("{prepend}/"));
    assert_eq!(rewrite("http://10.0.0.5:80/a/"), format!("{prepend}/a/"));
    // Already under the proxy path: left there.
    assert_eq!(rewrite(&format!("{prepend}/a")), format!("{prepend}/a"));
    // The API server's own host keeps its origin.
    assert_eq!(rewrite("https://127.0.0.1:6443/a"), format!("https://127.0.0.1:6443{prepend}/a"));
    // Another host, or a relative reference: as the pod said.
    for unchanged in ["http://example.com/a", "a/b", "../up", "mailto:x@example.com"] {
        assert_eq!(rewrite(unchanged), unchanged);
    }
}

#[test]
fn go_path_cleaning() {
    for (path, cleaned) in [
        ("/", "/"),
        ("//", "/"),
        ("/a/../..", "/"),
        ("/a/./b/", "/a/b"),
        ("a/../../b", "../b"),
        ("", "."),
        ("a/..", "."),
    ] {
        assert_eq!(clean(path), cleaned, "{path}");
    }
    assert_eq!(join("/p", ""), "/p");
    assert_eq!(join("/p", "/a/"), "/p/a");
    assert_eq!(join_preserving_trailing_slash("/a//b/"), "/a/b/");
}
