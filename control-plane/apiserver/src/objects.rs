//! Objects as JSON values: reading a request body, checking its type against the URL, filling the
//! metadata the server owns on create (name from generateName, uid, creationTimestamp, generation)
//! and carrying the store revision as `metadata.resourceVersion`. No IO.

use keel_api::resources::Resource;
use keel_api::status::{ApiError, FieldError};
use serde_json::{Map, Value, json};

use crate::negotiate::{self, BodyType};

/// The largest request body accepted (kube-apiserver's 3 MiB); more is 413.
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Parses a request body (JSON, YAML or protobuf); no Content-Type means JSON (the Python client
/// sends none).
pub fn decode(body: &[u8], content_type: Option<&str>) -> Result<Value, ApiError> {
    decode_as(body, content_type, None)
}

/// [`decode`] for a body meant to be a `resource` (named in protobuf's refusals).
pub fn decode_as(
    body: &[u8],
    content_type: Option<&str>,
    resource: Option<&Resource>,
) -> Result<Value, ApiError> {
    let value: Value = match negotiate::body_type(content_type)? {
        // Custom resources have no protobuf form: upstream's CRD handler answers 415.
        BodyType::Protobuf if resource.is_some_and(|r| !keel_api::custom::supports_protobuf(r)) => {
            return Err(ApiError::UnsupportedMediaType(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml".into(),
            ));
        }
        BodyType::Protobuf => crate::protobuf::decode_body(body, resource)?,
        BodyType::Json => serde_json::from_slice(body).map_err(|e| {
            ApiError::BadRequest(format!("the object provided is unrecognized: json parse error: {e}"))
        })?,
        BodyType::Yaml => serde_yaml_ng::from_slice(body).map_err(|e| {
            ApiError::BadRequest(format!("the object provided is unrecognized: yaml parse error: {e}"))
        })?,
    };
    if !value.is_object() {
        return Err(ApiError::BadRequest("the object provided is not a JSON object".into()));
    }
    Ok(value)
}

/// The body's apiVersion and kind must be the resource's (both may be left out).
pub fn check_type(object: &Value, resource: &Resource) -> Result<(), ApiError> {
    let expected_version = resource.api_version();
    if let Some(version) = object.get("apiVersion").and_then(Value::as_str)
        && version != expected_version
    {
        return Err(ApiError::BadRequest(format!(
            "the API version in the data ({version}) does not match the expected API version ({expected_version})"
        )));
    }
    if let Some(kind) = object.get("kind").and_then(Value::as_str)
        && kind != resource.kind
    {
        return Err(ApiError::BadRequest(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            resource.kind
        )));
    }
    Ok(())
}

fn metadata_mut(object: &mut Value) -> Result<&mut Map<String, Value>, ApiError> {
    let map = object.as_object_mut().ok_or_else(|| ApiError::BadRequest("not an object".into()))?;
    let metadata = map.entry("metadata").or_insert_with(|| json!({}));
    metadata.as_object_mut().ok_or_else(|| ApiError::BadRequest("metadata must be an object".into()))
}

/// `metadata.name`, or empty.
pub fn name(object: &Value) -> &str {
    object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default()
}

/// What kube-apiserver's name generator appends: 5 characters without vowels or look-alikes.
pub(crate) fn generated_suffix(random: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = random;
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// Whether a name breaks the rule upstream applies to `resource`, and how (its message): a DNS-1123
/// label for namespaces, a DNS-1035 label for services, a path segment for RBAC objects (names like
/// `system:node`), an IP address for IPAddresses, a DNS-1123 subdomain for everything else.
pub fn validate_name(name: &str, resource: &Resource) -> Option<String> {
    let segment_ok = |part: &str, first_letter: bool| {
        !part.is_empty()
            && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && if first_letter {
                part.as_bytes()[0].is_ascii_lowercase()
            } else {
                part.as_bytes()[0].is_ascii_alphanumeric()
            }
            && part.as_bytes()[part.len() - 1].is_ascii_alphanumeric()
    };
    let alphanumeric_ends = "must start and end with an alphanumeric character";
    match (resource.group, resource.plural) {
        ("", "namespaces") => (name.len() > 63 || !segment_ok(name, false)).then(|| {
            format!("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and {alphanumeric_ends}")
        }),
        ("", "services") => (name.len() > 63 || !segment_ok(name, true)).then(|| {
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character".to_owned()
        }),
        // ValidateIPAddressName: the address itself, in canonical form.
        ("networking.k8s.io", "ipaddresses") => {
            keel_api::validation::networking::ip_address_name(name).into_iter().next()
        }
        // ValidateCertificateRequestName allows any name: only the path segment rules apply.
        ("rbac.authorization.k8s.io", _) | ("certificates.k8s.io", "certificatesigningrequests") => {
            if name == "." || name == ".." {
                Some(format!("may not be '{name}'"))
            } else if name.contains('/') || name.contains('%') {
                Some("may not contain '/' or '%'".to_owned())
            } else {
                None
            }
        }
        _ => (name.len() > 253 || !name.split('.').all(|part| segment_ok(part, false))).then(|| {
            format!("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and {alphanumeric_ends}")
        }),
    }
}

/// Fills what the server owns on create; returns the object's name. `random` feeds generateName and
/// the uid; `now` is the creation time (RFC 3339).
pub fn prepare_create(
    object: &mut Value,
    resource: &Resource,
    namespace: Option<&str>,
    uid: &str,
    random: u64,
    now: &str,
) -> Result<String, ApiError> {
    check_type(object, resource)?;
    if let Value::Object(map) = object {
        map.insert("apiVersion".into(), resource.api_version().into());
        map.insert("kind".into(), resource.kind.into());
    }
    let metadata = metadata_mut(object)?;
    if metadata.get("resourceVersion").and_then(Value::as_str).is_some_and(|rv| !rv.is_empty()) {
        return Err(ApiError::BadRequest(
            "resourceVersion should not be set on objects to be created".into(),
        ));
    }
    let mut name = metadata.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
    if name.is_empty()
        && let Some(prefix) = metadata.get("generateName").and_then(Value::as_str)
    {
        if resource.group == "networking.k8s.io" && resource.plural == "ipaddresses" {
            // upstream's IPAddress strategy has a no-op name generator: the prefix is the name.
            name = prefix.to_owned();
        } else {
            // As upstream: the prefix is cut so the name fits 63 characters with its 5-character suffix.
            let prefix: String = prefix.chars().take(58).collect();
            name = format!("{prefix}{}", generated_suffix(random));
        }
        metadata.insert("name".into(), name.clone().into());
    }
    match (resource.namespaced, namespace, metadata.get("namespace").and_then(Value::as_str)) {
        (true, Some(url), Some(body)) if !body.is_empty() && body != url => {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request"
                    .into(),
            ));
        }
        (true, Some(url), _) => {
            metadata.insert("namespace".into(), url.into());
        }
        (true, None, _) => {
            return Err(ApiError::BadRequest("a namespaced resource needs a namespace".into()));
        }
        (false, _, _) => {
            metadata.remove("namespace");
        }
    }
    let mut causes = Vec::new();
    if name.is_empty() {
        causes.push(FieldError::required("metadata.name", "name or generateName is required"));
    } else if let Some(problem) = validate_name(&name, resource) {
        causes.push(FieldError::invalid("metadata.name", &Value::String(name.clone()), &problem));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid(resource.group, resource.kind, &name, causes));
    }
    metadata.insert("uid".into(), uid.into());
    metadata.insert("creationTimestamp".into(), now.into());
    metadata.remove("resourceVersion");
    metadata.remove("deletionTimestamp");
    if keel_api::strategy::tracks_generation(resource) {
        metadata.insert("generation".into(), 1.into());
    }
    Ok(name)
}

/// Sets `metadata.resourceVersion` (the store revision the object was last written at).
pub fn set_resource_version(object: &mut Value, revision: i64) {
    if let Ok(metadata) = metadata_mut(object) {
        metadata.insert("resourceVersion".into(), revision.to_string().into());
    }
}

/// The object without `metadata.resourceVersion`, as stored.
/// Objects are stored with `metadata` as their first key, so [`served_bytes`] finds it without
/// parsing.
pub fn for_storage(object: &Value) -> Result<Vec<u8>, ApiError> {
    let encode = |e: serde_json::Error| ApiError::Internal(format!("encoding the object: {e}"));
    let mut stored = object.clone();
    let Value::Object(map) = &mut stored else { return serde_json::to_vec(&stored).map_err(encode) };
    let mut metadata = map.remove("metadata").unwrap_or_else(|| json!({}));
    if let Value::Object(metadata) = &mut metadata {
        metadata.remove("resourceVersion");
    }
    let mut out = b"{\"metadata\":".to_vec();
    out.extend(serde_json::to_vec(&metadata).map_err(encode)?);
    let rest = serde_json::to_vec(&stored).map_err(encode)?;
    // `rest` is `{...}`: its members follow metadata's.
    if rest.len() > 2 {
        out.push(b',');
        out.extend_from_slice(&rest[1..]);
    } else {
        out.push(b'}');
    }
    Ok(out)
}

/// A stored object as served, with its resourceVersion.
pub fn from_storage(bytes: &[u8], revision: i64) -> Result<Value, ApiError> {
    let mut object: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::Internal(format!("decoding a stored object: {e}")))?;
    set_resource_version(&mut object, revision);
    Ok(object)
}

/// A stored object as `resource` serves it: its resourceVersion set and, for a resource stored in
/// another API version's form (events.k8s.io Events), converted ([`keel_api::convert`]).
pub fn served(resource: &Resource, bytes: &[u8], revision: i64) -> Result<Value, ApiError> {
    Ok(keel_api::convert::from_storage(resource, from_storage(bytes, revision)?))
}

/// What is stored of an object written through `resource` ([`for_storage`] of its stored form).
pub fn stored(resource: &Resource, object: &Value) -> Result<Vec<u8>, ApiError> {
    if keel_api::convert::converts(resource) {
        return for_storage(&keel_api::convert::to_storage(resource, object.clone()));
    }
    for_storage(object)
}

/// [`served`] as bytes: spliced without parsing ([`served_bytes`]) where the stored form is the
/// served one, parsed and converted otherwise.
pub fn served_json(resource: &Resource, bytes: &[u8], revision: i64) -> Result<Vec<u8>, ApiError> {
    if !keel_api::convert::converts(resource)
        && let Some(spliced) = served_bytes(bytes, revision)
    {
        return Ok(spliced);
    }
    serde_json::to_vec(&served(resource, bytes, revision)?)
        .map_err(|e| ApiError::Internal(format!("encoding an object: {e}")))
}

/// A stored object as served, without parsing it: `metadata.resourceVersion` spliced into the
/// bytes, which [`for_storage`] begins with `{"metadata":{`; `None` for bytes not of that shape
/// (the caller then parses).
pub fn served_bytes(stored: &[u8], revision: i64) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(stored.len() + 32);
    splice_into(stored, revision, &mut out).then_some(out)
}

/// [`served_bytes`] appended to `out`; false (nothing appended) for bytes not of that shape.
fn splice_into(stored: &[u8], revision: i64, out: &mut Vec<u8>) -> bool {
    const MARK: &[u8] = b"{\"metadata\":{";
    if !stored.starts_with(MARK) {
        return false;
    }
    let at = MARK.len();
    out.extend_from_slice(&stored[..at]);
    out.extend_from_slice(b"\"resourceVersion\":\"");
    out.extend_from_slice(revision.to_string().as_bytes());
    out.push(b'"');
    if stored.get(at) != Some(&b'}') {
        out.push(b',');
    }
    out.extend_from_slice(&stored[at..]);
    true
}

/// [`served_json`] appended to `out`, without an intermediate copy where the bytes are spliced.
pub fn write_served(
    resource: &Resource,
    bytes: &[u8],
    revision: i64,
    out: &mut Vec<u8>,
) -> Result<(), ApiError> {
    if keel_api::convert::converts(resource) || !splice_into(bytes, revision, out) {
        serde_json::to_writer(out, &served(resource, bytes, revision)?)
            .map_err(|e| ApiError::Internal(format!("encoding an object: {e}")))?;
    }
    Ok(())
}

/// The store key of an object: `/registry/<resource>/[<namespace>/]<name>`.
pub fn key(resource: &Resource, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(namespace) if resource.namespaced => format!("{}{namespace}/{name}", resource.key_prefix()),
        _ => format!("{}{name}", resource.key_prefix()),
    }
}

#[cfg(test)]
mod tests {
    use keel_api::resources::find;

    use super::*;

    #[test]
    fn create_fills_server_fields() {
        let configmaps = find("", "v1", "configmaps").unwrap();
        let mut object = json!({"metadata": {"generateName": "cfg-"}, "data": {"a": "b"}});
        let name =
            prepare_create(&mut object, configmaps, Some("default"), "u-1", 12345, "2026-11-30T10:00:00Z")
                .unwrap();
        assert!(name.starts_with("cfg-") && name.len() == 9, "{name}");
        assert_eq!(object["kind"], "ConfigMap");
        assert_eq!(object["apiVersion"], "v1");
        assert_eq!(object["metadata"]["namespace"], "default");
        assert_eq!(object["metadata"]["uid"], "u-1");
        assert!(object["metadata"].get("generation").is_none());
        let mut long = json!({"metadata": {"generateName": "x".repeat(80)}});
        let name = prepare_create(&mut long, configmaps, Some("d"), "u", 7, "t").unwrap();
        assert_eq!(name.len(), 63);
        let deployments = find("apps", "v1", "deployments").unwrap();
        let mut object = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        prepare_create(&mut object, deployments, Some("a"), "u", 1, "t").unwrap();
        assert_eq!(object["metadata"]["generation"], 1);
        // Upstream's namespace strategy keeps no generation, whatever its subresources.
        let namespaces = find("", "v1", "namespaces").unwrap();
        let mut object = json!({"metadata": {"name": "ns"}});
        prepare_create(&mut object, namespaces, None, "u", 1, "t").unwrap();
        assert!(object["metadata"].get("generation").is_none(), "{object}");
    }

    #[test]
    fn create_refuses_bad_objects() {
        let configmaps = find("", "v1", "configmaps").unwrap();
        let mut wrong_kind = json!({"kind": "Secret", "metadata": {"name": "a"}});
        let error = prepare_create(&mut wrong_kind, configmaps, Some("d"), "u", 1, "t").unwrap_err();
        assert_eq!(error.code(), 400);
        let mut bad_name = json!({"metadata": {"name": "Not_Valid"}});
        let error = prepare_create(&mut bad_name, configmaps, Some("d"), "u", 1, "t").unwrap_err();
        assert_eq!((error.code(), error.reason()), (422, "Invalid"));
        assert!(
            error.to_string().starts_with("ConfigMap \"Not_Valid\" is invalid: metadata.name: Invalid value")
        );
        let mut other_ns = json!({"metadata": {"name": "a", "namespace": "x"}});
        assert_eq!(
            prepare_create(&mut other_ns, configmaps, Some("d"), "u", 1, "t").unwrap_err().code(),
            400
        );
        let mut no_name = json!({"metadata": {}});
        assert_eq!(prepare_create(&mut no_name, configmaps, Some("d"), "u", 1, "t").unwrap_err().code(), 422);
        let namespaces = find("", "v1", "namespaces").unwrap();
        let mut dotted = json!({"metadata": {"name": "a.b"}});
        assert_eq!(prepare_create(&mut dotted, namespaces, None, "u", 1, "t").unwrap_err().code(), 422);
        let rbac = find("rbac.authorization.k8s.io", "v1", "clusterroles").unwrap();
        assert!(validate_name("system:node", rbac).is_none());
        assert!(validate_name("..", rbac).is_some() && validate_name("a/b", rbac).is_some());
        let services = find("", "v1", "services").unwrap();
        assert!(validate_name("1svc", services).is_some() && validate_name("svc-1", services).is_none());
        assert!(
            validate_name(&"a".repeat(70), configmaps).is_none(),
            "subdomain labels have no 63 limit upstream"
        );
        let ips = find("networking.k8s.io", "v1", "ipaddresses").unwrap();
        assert!(validate_name("10.96.0.10", ips).is_none() && validate_name("2001:db8::a", ips).is_none());
        assert_eq!(
            validate_name("2001:db8:0::a", ips).as_deref(),
            Some("must be in canonical form (\"2001:db8::a\")")
        );
        let mut generated = json!({"metadata": {"generateName": "10.96.0.11"}});
        assert_eq!(prepare_create(&mut generated, ips, None, "u", 1, "t").unwrap(), "10.96.0.11");
    }

    #[test]
    fn bodies() {
        assert!(decode(br#"{"a":1}"#, None).is_ok());
        assert!(decode(br#"{"a":1}"#, Some("application/json; charset=utf-8")).is_ok());
        assert_eq!(decode(b"{", None).unwrap_err().code(), 400);
        assert_eq!(decode(b"[]", None).unwrap_err().code(), 400);
        assert_eq!(decode(b"a: b", Some("text/plain")).unwrap_err().code(), 415);
        let yaml = decode(
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y\ndata:\n  a: b\n",
            Some("application/yaml"),
        )
        .unwrap();
        assert_eq!(yaml["data"]["a"], "b");
        assert_eq!(decode(b"a: [", Some("application/yaml")).unwrap_err().code(), 400);
    }

    #[test]
    fn keys_and_versions() {
        let pods = find("", "v1", "pods").unwrap();
        assert_eq!(key(pods, Some("default"), "web"), "/registry/pods/default/web");
        let nodes = find("", "v1", "nodes").unwrap();
        assert_eq!(key(nodes, None, "n1"), "/registry/minions/n1");
        let mut object = json!({"metadata": {"name": "a", "resourceVersion": "7"}});
        let stored = for_storage(&object).unwrap();
        assert!(!String::from_utf8_lossy(&stored).contains("resourceVersion"));
        let served = from_storage(&stored, 9).unwrap();
        assert_eq!(served["metadata"]["resourceVersion"], "9");
        let spliced: Value = serde_json::from_slice(&served_bytes(&stored, 9).unwrap()).unwrap();
        assert_eq!(spliced, served);
        let empty: Value =
            serde_json::from_slice(&served_bytes(br#"{"metadata":{},"kind":"X"}"#, 3).unwrap()).unwrap();
        assert_eq!(empty["metadata"]["resourceVersion"], "3");
        assert!(served_bytes(b"[]", 1).is_none());
        assert!(served_bytes(br#"{"kind":"X","metadata":{}}"#, 1).is_none(), "metadata must come first");
        // A value mentioning metadata does not fool it: metadata is always first.
        let tricky = json!({"data": {"x": "\"metadata\":{"}, "metadata": {"name": "t"}});
        let stored = for_storage(&tricky).unwrap();
        assert!(stored.starts_with(br#"{"metadata":{"#));
        let back: Value = serde_json::from_slice(&served_bytes(&stored, 4).unwrap()).unwrap();
        assert_eq!(back["data"]["x"], "\"metadata\":{");
        assert_eq!(back["metadata"]["resourceVersion"], "4");
        assert_eq!(for_storage(&json!({})).unwrap(), br#"{"metadata":{}}"#);
        set_resource_version(&mut object, 3);
        assert_eq!(object["metadata"]["resourceVersion"], "3");
    }
}
