//! What a request is about, read from its method, path and query: [`info`] as upstream's
//! RequestInfoFactory reads it for authorization and audit (from the path alone, whether or not the
//! resource is served), and [`parse`] as the server routes it (the served resource, or NotFound).

use keel_api::resources::{self, Resource};
use keel_api::status::ApiError;

/// The verbs of the Kubernetes API (RBAC's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

/// A request for a resource (`/api/v1/namespaces/default/pods/web/status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceRequest {
    pub resource: &'static Resource,
    /// Set for namespaced resources addressed under `namespaces/<ns>/`; `None` across all namespaces.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub subresource: Option<String>,
    pub verb: Verb,
}

/// Every path the server answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Version,
    Health(&'static str),
    /// `/api`
    CoreVersions,
    /// `/apis`
    Groups,
    /// `/apis/<group>`
    Group(String),
    /// `/api/v1`, `/apis/<group>/<version>`
    Resources {
        group: String,
        version: String,
    },
    Resource(ResourceRequest),
}

/// upstream's RequestInfo: the attributes authorization decides on. Strings as upstream holds them
/// (empty when absent); `verb` is RBAC's (`get`, `list`, `watch`, `create`, ..., or the lowercased
/// method of a non-resource request).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestInfo {
    pub is_resource_request: bool,
    pub path: String,
    pub verb: String,
    pub api_prefix: String,
    pub api_group: String,
    pub api_version: String,
    pub namespace: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// The request's field selector as given (`fieldSelector`), for authorizers that read it.
    pub field_selector: String,
}

impl RequestInfo {
    /// A watch, proxy or other long-running request (upstream's long-running check: not counted
    /// by the in-flight limits, not timed out).
    pub fn is_long_running(&self) -> bool {
        // upstream's BasicLongRunningRequestCheck(verbs watch, proxy; subresources attach, exec,
        // proxy, log, portforward).
        let streaming =
            matches!(self.subresource.as_str(), "attach" | "exec" | "proxy" | "log" | "portforward");
        self.is_resource_request && (self.verb == "watch" || self.verb == "proxy" || streaming)
    }

    /// The value the field selector requires `field` to equal, if it does (upstream's
    /// GetFieldSelector, read for an `=`/`==` requirement).
    pub fn field_equals(&self, field: &str) -> Option<String> {
        let selector = keel_api::fields::FieldSelector::parse(&self.field_selector).ok()?;
        selector.requires_exact_match(field).map(str::to_owned)
    }

    /// Whether the request only reads (upstream's non-mutating verbs, for the in-flight limits).
    pub fn is_read_only(&self) -> bool {
        matches!(self.verb.as_str(), "get" | "list" | "watch" | "head" | "options")
    }
}

/// Reads a request as upstream's RequestInfoFactory does (`/api` and `/apis` prefixes, the legacy
/// `/watch/` and `/proxy/` segments, `namespaces/<ns>/...`, list versus get versus watch, a list
/// narrowed to one name by `fieldSelector=metadata.name=...`, deletecollection).
pub fn info(method: &http::Method, path: &str, query: Option<&str>) -> RequestInfo {
    let method_verb = method.as_str().to_ascii_lowercase();
    let non_resource =
        || RequestInfo { path: path.to_owned(), verb: method_verb.clone(), ..RequestInfo::default() };
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (prefix, group, version, mut rest): (&str, &str, &str, &[&str]) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("api", "", *version, rest),
        ["apis", group, version, rest @ ..] => ("apis", *group, *version, rest),
        _ => return non_resource(),
    };
    let mut info = RequestInfo {
        is_resource_request: true,
        path: path.to_owned(),
        api_prefix: prefix.to_owned(),
        api_group: group.to_owned(),
        api_version: version.to_owned(),
        ..RequestInfo::default()
    };
    if rest.is_empty() || rest == [""] {
        // `/api/v1` itself is discovery, a non-resource path.
        return non_resource();
    }
    match rest {
        [special @ ("watch" | "proxy"), tail @ ..] => {
            if tail.is_empty() {
                return non_resource();
            }
            info.verb = (*special).to_owned();
            rest = tail;
        }
        _ => {
            info.verb = match method.as_str() {
                "POST" => "create",
                "GET" | "HEAD" => "get",
                "PUT" => "update",
                "PATCH" => "patch",
                "DELETE" => "delete",
                _ => "",
            }
            .to_owned();
        }
    }
    if rest[0] == "namespaces"
        && let Some(namespace) = rest.get(1)
    {
        info.namespace = (*namespace).to_owned();
        // A namespace's own subresources (status, finalize) are the namespace's.
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        }
    }
    info.resource = rest[0].to_owned();
    if let Some(name) = rest.get(1) {
        info.name = (*name).to_owned();
    }
    if rest.len() >= 3 && info.verb != "proxy" {
        info.subresource = rest[2].to_owned();
    }
    info.field_selector = query_value(query, "fieldSelector").unwrap_or_default();
    if info.name.is_empty() && info.verb == "get" {
        info.verb = if is_watch(query) { "watch" } else { "list" }.to_owned();
        let selector = query_value(query, "fieldSelector");
        let name = selector.as_deref().and_then(|s| keel_api::fields::FieldSelector::parse(s).ok());
        if let Some(name) = name.as_ref().and_then(|s| s.requires_exact_match("metadata.name"))
            && is_path_segment_name(name)
        {
            info.name = name.to_owned();
        }
    }
    if info.name.is_empty() && info.verb == "delete" {
        info.verb = "deletecollection".to_owned();
    }
    info
}

/// apimachinery's IsValidPathSegmentName: not `.` or `..`, no `/` or `%`.
fn is_path_segment_name(name: &str) -> bool {
    name != "." && name != ".." && !name.contains(['/', '%'])
}

/// One query parameter's percent-decoded value.
fn query_value(query: Option<&str>, name: &str) -> Option<String> {
    crate::query_param(query, name)
}

fn is_watch(query: Option<&str>) -> bool {
    query.into_iter().flat_map(|q| q.split('&')).any(|pair| match pair.split_once('=') {
        Some(("watch", value)) => query_bool(value),
        _ => pair == "watch",
    })
}

/// A boolean query parameter as apimachinery converts it: false only for `0`, `f`, `false`, `n` and
/// `no` (any case), true for anything else, an empty value included.
pub fn query_bool(value: &str) -> bool {
    !(value == "0" || ["f", "false", "n", "no"].iter().any(|no| value.eq_ignore_ascii_case(no)))
}

/// Reads the target of `method path?query`; unknown paths and resources are NotFound as upstream
/// answers them (404 with a Status).
pub fn parse(method: &http::Method, path: &str, query: Option<&str>) -> Result<Target, ApiError> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').filter(|p| !p.is_empty()).collect();
    let not_found = || ApiError::NotFoundPath(path.to_owned());
    let (group, version, rest) = match parts.as_slice() {
        ["version"] => return Ok(Target::Version),
        [health @ ("healthz" | "livez" | "readyz")] => {
            return Ok(Target::Health(match *health {
                "healthz" => "healthz",
                "livez" => "livez",
                _ => "readyz",
            }));
        }
        ["api"] => return Ok(Target::CoreVersions),
        ["apis"] => return Ok(Target::Groups),
        ["apis", group] => return Ok(Target::Group((*group).to_owned())),
        ["api", version] => {
            return Ok(Target::Resources { group: String::new(), version: (*version).to_owned() });
        }
        ["apis", group, version] => {
            return Ok(Target::Resources { group: (*group).to_owned(), version: (*version).to_owned() });
        }
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(not_found()),
    };
    // `namespaces/<ns>/<resource>...`, except the namespace object itself and its subresources.
    let (namespace, rest): (Option<&str>, &[&str]) = match rest {
        ["namespaces", ns, resource, ..] if !matches!(*resource, "status" | "finalize") => {
            (Some(ns), &rest[2..])
        }
        _ => (None, rest),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (*plural, None, None),
        [plural, name] => (*plural, Some(*name), None),
        [plural, name, sub] => (*plural, Some(*name), Some(*sub)),
        _ => return Err(not_found()),
    };
    let resource = resources::find(group, version, plural).ok_or_else(not_found)?;
    // The proxy subresources are served from the path as it came, before it is parsed
    // (`kubelet_client::node_proxy_path`, `pod_proxy::pod_proxy_path`): one that gets here is not
    // one of theirs (an empty segment, say).
    if let Some(sub) = subresource
        && (resource.subresource(sub).is_none() || sub == "proxy")
    {
        return Err(not_found());
    }
    if namespace.is_some() && !resource.namespaced {
        return Err(not_found());
    }
    let verb = match (method.as_str(), name.is_some()) {
        ("GET", true) => Verb::Get,
        ("GET", false) if is_watch(query) => Verb::Watch,
        ("GET", false) => Verb::List,
        ("POST", _) => Verb::Create,
        ("PUT", true) => Verb::Update,
        ("PATCH", true) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        _ => return Err(ApiError::MethodNotAllowed),
    };
    let verb = if verb == Verb::Get && is_watch(query) { Verb::Watch } else { verb };
    // Only the verbs the resource (or subresource) declares, and across all namespaces only reads,
    // as upstream registers its routes; a create names no object.
    let declared = match subresource.and_then(|sub| resource.subresource(sub)) {
        Some(sub) => sub.verbs,
        None => resource.verbs,
    };
    let verb_name = match verb {
        Verb::Get => "get",
        Verb::List => "list",
        Verb::Watch => "watch",
        Verb::Create => "create",
        Verb::Update => "update",
        Verb::Patch => "patch",
        Verb::Delete => "delete",
        Verb::DeleteCollection => "deletecollection",
    };
    // A watch of one object is a list-watch filtered to it.
    let allowed = declared.contains(&verb_name)
        || (verb == Verb::Watch && name.is_some() && declared.contains(&"watch"));
    let cross_namespace_write =
        resource.namespaced && namespace.is_none() && !matches!(verb, Verb::List | Verb::Watch);
    let create_with_name = verb == Verb::Create && name.is_some() && subresource.is_none();
    if !allowed || cross_namespace_write || create_with_name {
        return Err(ApiError::MethodNotAllowed);
    }
    Ok(Target::Resource(ResourceRequest {
        resource,
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned),
        subresource: subresource.map(str::to_owned),
        verb,
    }))
}

#[cfg(test)]
mod tests {
    use http::Method;

    use super::*;

    #[test]
    fn request_info_as_upstream_reads_it() {
        let read = |method: &Method, path: &str, query: Option<&str>| {
            let i = info(method, path, query);
            (i.is_resource_request, i.verb, i.api_group, i.namespace, i.resource, i.subresource, i.name)
        };
        let s = |v: &str| v.to_owned();
        assert_eq!(
            read(&Method::GET, "/api/v1/namespaces/default/pods/web/log", None),
            (true, s("get"), s(""), s("default"), s("pods"), s("log"), s("web"))
        );
        assert_eq!(
            read(&Method::GET, "/apis/apps/v1/deployments", Some("watch=1")),
            (true, s("watch"), s("apps"), s(""), s("deployments"), s(""), s(""))
        );
        assert_eq!(
            read(&Method::GET, "/api/v1/watch/namespaces/a/pods", None),
            (true, s("watch"), s(""), s("a"), s("pods"), s(""), s(""))
        );
        assert_eq!(
            read(&Method::GET, "/api/v1/namespaces/a", None),
            (true, s("get"), s(""), s("a"), s("namespaces"), s(""), s("a"))
        );
        assert_eq!(
            read(&Method::PUT, "/api/v1/namespaces/a/finalize", None),
            (true, s("update"), s(""), s("a"), s("namespaces"), s("finalize"), s("a"))
        );
        assert_eq!(
            read(&Method::GET, "/api/v1/namespaces/a/configmaps", Some("fieldSelector=metadata.name%3Dx")),
            (true, s("list"), s(""), s("a"), s("configmaps"), s(""), s("x"))
        );
        assert_eq!(
            read(&Method::DELETE, "/apis/batch/v1/namespaces/a/jobs", None),
            (true, s("deletecollection"), s("batch"), s("a"), s("jobs"), s(""), s(""))
        );
        // Unknown resources are read all the same: authorization comes before the 404.
        assert_eq!(
            read(&Method::POST, "/apis/example.com/v1/widgets", None),
            (true, s("create"), s("example.com"), s(""), s("widgets"), s(""), s(""))
        );
        for path in ["/api", "/apis/apps", "/api/v1", "/apis/apps/v1", "/healthz", "/openapi/v2", "/version"]
        {
            let i = info(&Method::GET, path, None);
            assert!(!i.is_resource_request && i.verb == "get" && i.path == path, "{path}: {i:?}");
        }
        assert_eq!(info(&Method::POST, "/logs", None).verb, "post");
        assert!(info(&Method::GET, "/api/v1/watch/pods", None).is_long_running());
    }

    fn resource(method: &Method, path: &str, query: Option<&str>) -> ResourceRequest {
        match parse(method, path, query).unwrap() {
            Target::Resource(request) => request,
            other => panic!("{path} parsed as {other:?}"),
        }
    }

    #[test]
    fn resource_paths() {
        let r = resource(&Method::GET, "/api/v1/namespaces/default/pods/web/status", None);
        assert_eq!(
            (r.resource.plural, r.namespace.as_deref(), r.name.as_deref(), r.subresource.as_deref(), r.verb),
            ("pods", Some("default"), Some("web"), Some("status"), Verb::Get)
        );
        let r = resource(&Method::GET, "/api/v1/pods", Some("watch=true&resourceVersion=5"));
        assert_eq!((r.namespace, r.verb), (None, Verb::Watch));
        let r = resource(&Method::GET, "/api/v1/namespaces/kube-system", None);
        assert_eq!(
            (r.resource.plural, r.name.as_deref(), r.namespace),
            ("namespaces", Some("kube-system"), None)
        );
        let r = resource(&Method::PUT, "/api/v1/namespaces/gone/finalize", None);
        assert_eq!(
            (r.resource.plural, r.subresource.as_deref(), r.verb),
            ("namespaces", Some("finalize"), Verb::Update)
        );
        let r = resource(&Method::DELETE, "/apis/apps/v1/namespaces/a/deployments", None);
        assert_eq!((r.resource.kind, r.verb), ("Deployment", Verb::DeleteCollection));
        let r = resource(&Method::POST, "/api/v1/namespaces", None);
        assert_eq!((r.resource.plural, r.verb), ("namespaces", Verb::Create));
    }

    #[test]
    fn other_paths() {
        assert_eq!(parse(&Method::GET, "/version", None).unwrap(), Target::Version);
        assert_eq!(parse(&Method::GET, "/apis/apps", None).unwrap(), Target::Group("apps".into()));
        assert_eq!(
            parse(&Method::GET, "/api/v1", None).unwrap(),
            Target::Resources { group: String::new(), version: "v1".into() }
        );
        for bad in [
            "/api/v1/widgets",
            "/api/v1/namespaces/a/pods/a/proxy",
            "/api/v1/namespaces/a/nodes/n",
            "/nope",
            "/api/v1/a/b/c/d",
        ] {
            assert!(matches!(parse(&Method::GET, bad, None), Err(ApiError::NotFoundPath(_))), "{bad}");
        }
        assert!(matches!(parse(&Method::PUT, "/api/v1/pods", None), Err(ApiError::MethodNotAllowed)));
        for (method, path) in [
            (Method::DELETE, "/api/v1/namespaces"),
            (Method::DELETE, "/api/v1/configmaps"),
            (Method::POST, "/api/v1/configmaps"),
            (Method::POST, "/api/v1/namespaces/d/configmaps/named"),
            (Method::DELETE, "/api/v1/namespaces/d/pods/p/status"),
        ] {
            assert!(matches!(parse(&method, path, None), Err(ApiError::MethodNotAllowed)), "{method} {path}");
        }
    }
}
