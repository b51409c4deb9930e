//! What Keel leaves out of request bodies logged below RequestResponse, where upstream logs them
//! whole: issue 18 requires that no Secret value reaches an audit event below RequestResponse. A
//! Secret's `data` and `stringData` values (keys kept) are replaced by [`REDACTED`], also inside
//! kubectl's `last-applied-configuration` annotation and in patches of Secrets (merge, strategic,
//! apply and JSON patches); a TokenReview's `spec.token` (which may be a legacy token, a Secret's
//! value) likewise. At RequestResponse bodies are logged as upstream logs them. No IO.

use serde_json::Value;

/// What a redacted value reads.
pub const REDACTED: &str = "<redacted>";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A Secret (or a merge, strategic or apply patch of one) with its values redacted; anything but
/// an object (a body that did not parse) goes whole.
pub fn secret(object: &mut Value) {
    if !object.is_object() {
        *object = Value::String(REDACTED.into());
        return;
    }
    for field in ["data", "stringData"] {
        if let Some(map) = object.get_mut(field) {
            redact_values(map);
        }
    }
    if let Some(annotation) =
        object.pointer_mut(&format!("/metadata/annotations/{}", LAST_APPLIED.replace('/', "~1")))
    {
        redact_last_applied(annotation);
    }
}

/// A JSON patch (RFC 6902) of a Secret with the values it writes to `data`, `stringData` or the
/// last-applied annotation redacted.
pub fn secret_json_patch(patch: &mut Value) {
    let Some(operations) = patch.as_array_mut() else {
        *patch = Value::String(REDACTED.into());
        return;
    };
    for operation in operations {
        let path = operation.get("path").and_then(Value::as_str).unwrap_or_default().to_owned();
        let Some(value) = operation.get_mut("value") else { continue };
        if path.is_empty() {
            secret(value);
        } else if path == "/data" || path == "/stringData" {
            redact_values(value);
        } else if path.starts_with("/data/") || path.starts_with("/stringData/") {
            *value = Value::String(REDACTED.into());
        } else if path == "/metadata" {
            if let Some(annotation) =
                value.pointer_mut(&format!("/annotations/{}", LAST_APPLIED.replace('/', "~1")))
            {
                redact_last_applied(annotation);
            }
        } else if path == "/metadata/annotations" {
            if let Some(annotation) = value.get_mut(LAST_APPLIED) {
                redact_last_applied(annotation);
            }
        } else if path == format!("/metadata/annotations/{}", LAST_APPLIED.replace('/', "~1")) {
            redact_last_applied(value);
        }
    }
}

/// A TokenReview with its token redacted.
pub fn token_review(object: &mut Value) {
    if let Some(token) = object.pointer_mut("/spec/token").filter(|t| t.is_string()) {
        *token = Value::String(REDACTED.into());
    }
}

fn redact_values(map: &mut Value) {
    match map {
        Value::Object(map) => {
            for value in map.values_mut() {
                *value = Value::String(REDACTED.into());
            }
        }
        Value::Null => {}
        other => *other = Value::String(REDACTED.into()),
    }
}

/// The annotation's JSON with the Secret in it redacted; all of it when it is not JSON.
fn redact_last_applied(annotation: &mut Value) {
    let Some(text) = annotation.as_str() else { return };
    match serde_json::from_str::<Value>(text) {
        Ok(mut applied) if applied.is_object() => {
            secret(&mut applied);
            let mut out = applied.to_string();
            out.push('\n');
            *annotation = Value::String(out);
        }
        _ => *annotation = Value::String(REDACTED.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_values_go_keys_stay() {
        let applied = r#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"stringData":{"password":"hunter2"}}"#;
        let mut object = json!({
            "kind": "Secret",
            "metadata": {"name": "s", "annotations": {LAST_APPLIED: format!("{applied}\n"), "other": "kept"}},
            "data": {"a": "aHVudGVyMg==", "b": ""},
            "stringData": {"c": "hunter2"},
            "type": "Opaque"
        });
        secret(&mut object);
        assert_eq!(object["data"], json!({"a": REDACTED, "b": REDACTED}));
        assert_eq!(object["stringData"], json!({"c": REDACTED}));
        assert_eq!(object["type"], "Opaque");
        assert_eq!(object["metadata"]["annotations"]["other"], "kept");
        let annotation = object["metadata"]["annotations"][LAST_APPLIED].as_str().unwrap();
        assert!(!annotation.contains("hunter2"), "{annotation}");
        assert_eq!(
            serde_json::from_str::<Value>(annotation).unwrap()["stringData"],
            json!({"password": REDACTED})
        );
        // A malformed annotation goes whole; a wrong type of data too.
        let mut odd = json!({"metadata": {"annotations": {LAST_APPLIED: "hunter2"}}, "data": "hunter2"});
        secret(&mut odd);
        assert!(!odd.to_string().contains("hunter2"), "{odd}");
        let mut unparsed = Value::String("data: {a: hunter2".into());
        secret(&mut unparsed);
        assert_eq!(unparsed, REDACTED);
    }

    #[test]
    fn json_patches_of_secrets() {
        let mut patch = json!([
            {"op": "add", "path": "/data/a", "value": "aHVudGVy"},
            {"op": "replace", "path": "/stringData", "value": {"b": "hunter2"}},
            {"op": "test", "path": "/data/c", "value": "hunter2"},
            {"op": "add", "path": "/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration", "value": "{\"data\":{\"x\":\"hunter2\"}}"},
            {"op": "add", "path": "", "value": {"data": {"d": "hunter2"}}},
            {"op": "replace", "path": "/metadata/labels/app", "value": "web"},
            {"op": "remove", "path": "/data/e"}
        ]);
        secret_json_patch(&mut patch);
        assert!(!patch.to_string().contains("hunter2") && !patch.to_string().contains("aHVudGVy"), "{patch}");
        assert_eq!(patch[5]["value"], "web");
        assert_eq!(patch[1]["value"], json!({"b": REDACTED}));
        assert_eq!(patch[6], json!({"op": "remove", "path": "/data/e"}));
    }

    #[test]
    fn token_reviews() {
        let mut review = json!({"kind": "TokenReview", "spec": {"token": "abc.def", "audiences": ["a"]}});
        token_review(&mut review);
        assert_eq!(review["spec"], json!({"token": REDACTED, "audiences": ["a"]}));
    }
}
