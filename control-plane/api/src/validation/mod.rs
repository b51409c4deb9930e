//! Validation of objects beyond their types and names, as kube-apiserver's REST strategies run it
//! (upstream's `pkg/apis/core/validation`, `pkg/apis/apps/validation`, `pkg/apis/batch/validation`,
//! `pkg/apis/storage/validation` for the CSI objects, `pkg/apis/networking/validation` for
//! ServiceCIDRs and IPAddresses, `pkg/apis/resource/validation` in part, and
//! apimachinery's `ValidateObjectMeta`), on objects as JSON values. No IO.
//!
//! [`validate_create`] and [`validate_update`] answer the field errors upstream answers, with its
//! field paths and messages (Kubernetes 1.34): a bad value is shown as Go shows it — strings quoted,
//! numbers as they are, maps and structs as JSON. Objects are validated after defaulting, so a field
//! upstream defaults is never reported missing.

pub mod certificates;
mod config;
mod dra;
pub(crate) mod meta;
pub(crate) mod names;
pub mod networking;
mod pod;
pub mod quantity;
mod service;
mod storage;
mod workloads;

pub use names::dns1123_subdomain;
use serde_json::{Map, Value};

use crate::resources::Resource;
use crate::status::{FieldError, FieldErrorKind};

/// The field errors of `object` as created (after defaulting; name and generateName are checked
/// when the name is given out).
pub fn validate_create(resource: &Resource, object: &Value) -> Vec<FieldError> {
    if let Some(errors) = custom(resource, None, object) {
        return errors;
    }
    let mut object = object.clone();
    crate::defaults::apply(resource, &mut object);
    let mut errors = meta::object_meta(&object);
    errors.extend(match (resource.group, resource.plural) {
        ("", "pods") => pod::pod(&object),
        ("", "services") => service::service(&object),
        ("", "configmaps") => config::config_map(&object),
        ("", "secrets") => config::secret(&object),
        ("", "replicationcontrollers") => workloads::replication_controller(&object),
        ("apps", "deployments") => workloads::deployment(&object),
        ("apps", "replicasets") => workloads::replica_set(&object),
        ("apps", "statefulsets") => workloads::stateful_set(&object),
        ("apps", "daemonsets") => workloads::daemon_set(&object),
        ("batch", "jobs") => workloads::job(&object),
        ("batch", "cronjobs") => workloads::cron_job(&object),
        ("certificates.k8s.io", "certificatesigningrequests") => {
            certificates::certificate_signing_request(&object)
        }
        ("networking.k8s.io", "servicecidrs") => networking::service_cidr(&object),
        ("networking.k8s.io", "ipaddresses") => networking::ip_address(&object),
        ("storage.k8s.io", "csidrivers") => storage::csi_driver(&object),
        ("storage.k8s.io", "csinodes") => storage::csi_node(&object),
        ("storage.k8s.io", "csistoragecapacities") => storage::csi_storage_capacity(&object),
        ("storage.k8s.io", "volumeattachments") => storage::volume_attachment(&object),
        ("resource.k8s.io", "resourceclaims") => dra::resource_claim(&object),
        ("resource.k8s.io", "resourceslices") => dra::resource_slice(&object),
        _ => Vec::new(),
    });
    errors
}

/// The field errors of an update of the main resource from `old` (as stored) to `new` (as it would
/// be stored). Writes through subresources (status, scale) are not validated here.
pub fn validate_update(resource: &Resource, old: &Value, new: &Value) -> Vec<FieldError> {
    if let Some(errors) = custom(resource, Some(old), new) {
        return errors;
    }
    let (mut old, mut new) = (old.clone(), new.clone());
    crate::defaults::apply(resource, &mut old);
    crate::defaults::apply(resource, &mut new);
    let mut errors = meta::object_meta_update(&old, &new);
    errors.extend(match (resource.group, resource.plural) {
        ("", "pods") => pod::pod_update(&old, &new),
        ("", "services") => service::service(&new),
        ("", "configmaps") => config::config_map_update(&old, &new),
        ("", "secrets") => config::secret_update(&old, &new),
        ("", "replicationcontrollers") => workloads::replication_controller(&new),
        ("apps", "deployments") => workloads::deployment_update(&old, &new),
        ("apps", "replicasets") => workloads::replica_set_update(&old, &new),
        ("apps", "statefulsets") => workloads::stateful_set_update(&old, &new),
        ("apps", "daemonsets") => workloads::daemon_set_update(&old, &new),
        ("batch", "jobs") => workloads::job_update(&old, &new),
        ("batch", "cronjobs") => workloads::cron_job(&new),
        ("certificates.k8s.io", "certificatesigningrequests") => {
            certificates::certificate_signing_request_update(&old, &new, certificates::Write::Update)
        }
        ("networking.k8s.io", "servicecidrs") => networking::service_cidr_update(&old, &new),
        ("networking.k8s.io", "ipaddresses") => networking::ip_address_update(&old, &new),
        ("storage.k8s.io", "csidrivers") => storage::csi_driver_update(&old, &new),
        ("storage.k8s.io", "csinodes") => storage::csi_node_update(&old, &new),
        ("storage.k8s.io", "csistoragecapacities") => storage::csi_storage_capacity_update(&old, &new),
        ("storage.k8s.io", "volumeattachments") => storage::volume_attachment_update(&old, &new),
        ("resource.k8s.io", "resourceclaims") => dra::resource_claim_update(&old, &new),
        ("resource.k8s.io", "resourceslices") => dra::resource_slice_update(&old, &new),
        _ => Vec::new(),
    });
    errors
}

/// The field errors of a write through a subresource of `resource` from `old` to `new`, for the
/// subresources whose strategies validate (a CSR's `/status` and `/approval`); none for others.
pub fn validate_subresource_update(
    resource: &Resource,
    subresource: &str,
    old: &Value,
    new: &Value,
) -> Vec<FieldError> {
    let write = match (resource.group, resource.plural, subresource) {
        ("certificates.k8s.io", "certificatesigningrequests", "status") => certificates::Write::Status,
        ("certificates.k8s.io", "certificatesigningrequests", "approval") => certificates::Write::Approval,
        _ => return Vec::new(),
    };
    let mut errors = meta::object_meta_update(old, new);
    errors.extend(certificates::certificate_signing_request_update(old, new, write));
    errors
}

/// CustomResourceDefinitions ([`crate::crd`]) and custom resources (their metadata, then their
/// structural schema); `None` for other resources.
fn custom(resource: &Resource, old: Option<&Value>, new: &Value) -> Option<Vec<FieldError>> {
    if resource.group == "apiextensions.k8s.io" && resource.plural == "customresourcedefinitions" {
        return Some(match old {
            Some(old) => crate::crd::validate_update(old, new),
            None => crate::crd::validate(new),
        });
    }
    if !resource.custom {
        return None;
    }
    let mut errors = match old {
        Some(old) => meta::object_meta_update(old, new),
        None => meta::object_meta(new),
    };
    if let Some(version) = crate::custom::version_of(resource) {
        // What the schema says of metadata is not checked against values: ObjectMeta rules apply.
        let mut body = new.clone();
        if let Value::Object(map) = &mut body {
            map.remove("metadata");
        }
        version.schema.validate(&body, "", &mut errors);
    }
    Some(errors)
}

// ---- Field paths, as upstream's field.Path prints them. ----

/// `path.name` (or `name` at the root).
pub(crate) fn child(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_owned() } else { format!("{path}.{name}") }
}

/// `path[i]`.
pub(crate) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// `path[key]`: map keys are not quoted.
pub(crate) fn key(path: &str, key: &str) -> String {
    format!("{path}[{key}]")
}

// ---- Errors, as upstream's field package words them. ----

fn required(path: &str, detail: &str) -> FieldError {
    FieldError::required(path, detail)
}

fn forbidden(path: &str, detail: &str) -> FieldError {
    FieldError::forbidden(path, detail)
}

/// An invalid string value (quoted as Go's `%q`).
pub(crate) fn invalid_str(path: &str, value: &str, detail: &str) -> FieldError {
    let shown = crate::labels::go_quote(value);
    FieldError {
        field: path.to_owned(),
        kind: FieldErrorKind::Invalid,
        detail: if detail.is_empty() { shown } else { format!("{shown}: {detail}") },
    }
}

/// An invalid value of another type: numbers as they are, maps and objects as JSON.
pub(crate) fn invalid(path: &str, value: &Value, detail: &str) -> FieldError {
    match value {
        Value::String(s) => invalid_str(path, s, detail),
        _ => FieldError::invalid(path, value, detail),
    }
}

fn not_supported(path: &str, value: &str, supported: &[&str]) -> FieldError {
    FieldError::not_supported(path, &Value::String(value.to_owned()), supported)
}

fn duplicate(path: &str, value: &str) -> FieldError {
    FieldError::duplicate(path, &Value::String(value.to_owned()))
}

fn not_found(path: &str, value: &str) -> FieldError {
    FieldError {
        field: path.to_owned(),
        kind: FieldErrorKind::NotFound,
        detail: crate::labels::go_quote(value),
    }
}

/// `Too long: may not be more than N bytes`.
pub(crate) fn too_long(path: &str, max: usize) -> FieldError {
    FieldError {
        field: path.to_owned(),
        kind: FieldErrorKind::TooLong,
        detail: format!("may not be more than {max} bytes"),
    }
}

/// upstream's ValidateNonnegativeField.
fn nonnegative(value: Option<&Value>, path: &str) -> Vec<FieldError> {
    match value.and_then(Value::as_i64) {
        Some(n) if n < 0 => vec![FieldError::invalid(path, &n.into(), "must be greater than or equal to 0")],
        _ => Vec::new(),
    }
}

/// upstream's ValidateImmutableField: the new value is shown.
pub(crate) fn immutable(new: Option<&Value>, old: Option<&Value>, path: &str) -> Vec<FieldError> {
    if semantic_eq(new, old) {
        return Vec::new();
    }
    vec![invalid(path, new.unwrap_or(&Value::Null), "field is immutable")]
}

// ---- Reading JSON objects. ----

fn str_at<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

fn list<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

fn map_at<'a>(value: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    value.get(key).and_then(Value::as_object)
}

/// Upstream's semantic equality: a missing field, null, an empty list and an empty map are all the
/// zero value.
fn semantic_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    fn zero(v: Option<&Value>) -> bool {
        match v {
            None | Some(Value::Null) => true,
            Some(Value::Array(items)) => items.is_empty(),
            Some(Value::Object(map)) => map.is_empty(),
            _ => false,
        }
    }
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            x.iter().all(|(k, v)| semantic_eq(Some(v), y.get(k)))
                && y.iter().all(|(k, v)| x.contains_key(k) || zero(Some(v)))
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| semantic_eq(Some(p), Some(q)))
        }
        (x, y) if zero(x) && zero(y) => true,
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

#[cfg(test)]
mod tests;
