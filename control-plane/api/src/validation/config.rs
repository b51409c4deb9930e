//! ConfigMaps and Secrets: valid keys, 1 MiB of data, the fields Secret types need, and `immutable`.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::Value;

use super::{
    FieldError, forbidden, immutable, invalid_str, key, map_at, names, required, semantic_eq, too_long,
};

/// MaxSecretSize, also the limit of a ConfigMap.
const MAX_SIZE: usize = 1024 * 1024;

const IMMUTABLE: &str = "field is immutable when `immutable` is set";

/// ValidateConfigMap.
pub(super) fn config_map(object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let binary = map_at(object, "binaryData");
    let mut size = 0;
    for (k, value) in map_at(object, "data").into_iter().flatten() {
        let at = key("data", k);
        errors.extend(names::config_key(k).iter().map(|m| invalid_str(&at, k, m)));
        if binary.is_some_and(|b| b.contains_key(k)) {
            errors.push(invalid_str(&at, k, "duplicate of key present in binaryData"));
        }
        size += value.as_str().map_or(0, str::len);
    }
    for (k, value) in binary.into_iter().flatten() {
        errors.extend(names::config_key(k).iter().map(|m| invalid_str(&key("binaryData", k), k, m)));
        size += decoded_len(value);
    }
    if size > MAX_SIZE {
        // Upstream's path for the whole object prints as `[]`.
        errors.push(too_long("[]", MAX_SIZE));
    }
    errors
}

/// The length of base64 data once decoded.
fn decoded_len(value: &Value) -> usize {
    let text = value.as_str().unwrap_or_default();
    base64::engine::general_purpose::STANDARD.decode(text).map_or(text.len() / 4 * 3, |bytes| bytes.len())
}

fn is_immutable(object: &Value) -> bool {
    object.get("immutable").and_then(Value::as_bool) == Some(true)
}

/// ValidateConfigMapUpdate.
pub(super) fn config_map_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if is_immutable(old) {
        if !is_immutable(new) {
            errors.push(forbidden("immutable", IMMUTABLE));
        }
        for field in ["data", "binaryData"] {
            if !semantic_eq(old.get(field), new.get(field)) {
                errors.push(forbidden(field, IMMUTABLE));
            }
        }
    }
    errors.extend(config_map(new));
    errors
}

fn secret_type(secret: &Value) -> &str {
    secret.get("type").and_then(Value::as_str).filter(|t| !t.is_empty()).unwrap_or("Opaque")
}

/// ValidateSecret.
pub(super) fn secret(object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let data = map_at(object, "data");
    // Decoding merges stringData into data upstream; keys of both are data's.
    let mut sizes: BTreeMap<&str, usize> =
        data.into_iter().flatten().map(|(k, v)| (k.as_str(), decoded_len(v))).collect();
    for (k, v) in map_at(object, "stringData").into_iter().flatten() {
        sizes.insert(k, v.as_str().map_or(0, str::len));
    }
    let mut size = 0;
    for (k, len) in &sizes {
        errors.extend(names::config_key(k).iter().map(|m| invalid_str(&key("data", k), k, m)));
        size += len;
    }
    if size > MAX_SIZE {
        errors.push(too_long("data", MAX_SIZE));
    }
    let has = |k: &str| sizes.contains_key(k);
    match secret_type(object) {
        "kubernetes.io/service-account-token" => {
            let account = object
                .pointer("/metadata/annotations/kubernetes.io~1service-account.name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if account.is_empty() {
                errors.push(required("metadata.annotations[kubernetes.io/service-account.name]", ""));
            }
        }
        "kubernetes.io/dockercfg" if !has(".dockercfg") => errors.push(required("data[.dockercfg]", "")),
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => {
            errors.push(required("data[.dockerconfigjson]", ""));
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            errors.push(required("data[username]", ""));
            errors.push(required("data[password]", ""));
        }
        "kubernetes.io/ssh-auth" if sizes.get("ssh-privatekey").is_none_or(|len| *len == 0) => {
            errors.push(required("data[ssh-privatekey]", ""));
        }
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    errors.push(required(&key("data", k), ""));
                }
            }
        }
        _ => {}
    }
    errors
}

/// ValidateSecretUpdate.
pub(super) fn secret_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let (old_type, new_type) = (Value::from(secret_type(old)), Value::from(secret_type(new)));
    let mut errors = immutable(Some(&new_type), Some(&old_type), "type");
    if is_immutable(old) {
        if !is_immutable(new) {
            errors.push(forbidden("immutable", IMMUTABLE));
        }
        if !semantic_eq(old.get("data"), new.get("data")) {
            errors.push(forbidden("data", IMMUTABLE));
        }
    }
    errors.extend(secret(new));
    errors
}
