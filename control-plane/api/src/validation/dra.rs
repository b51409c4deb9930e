//! resource.k8s.io/v1 (dynamic resource allocation): ResourceClaims and ResourceSlices (upstream's
//! `pkg/apis/resource/validation`, 1.34). The structure is checked — request names, exactly one
//! kind of request, device classes, allocation modes, pools and node selection, immutable fields —
//! but not CEL selector expressions, device attributes and capacities, counters, opaque
//! configuration nor status updates.

use std::collections::BTreeSet;

use serde_json::Value;

use super::storage::csi_driver_name;
use super::{
    FieldError, child, duplicate, immutable, index, invalid, invalid_str, list, names, not_supported,
    required, semantic_eq, str_at, too_long,
};

/// resource.DeviceRequestsMaxSize and resource.FirstAvailableDeviceRequestMaxSize.
const MAX_REQUESTS: usize = 32;
const MAX_ALTERNATIVES: usize = 8;
/// resource.PoolNameMaxLength.
const POOL_NAME_MAX: usize = 253;

fn spec(object: &Value) -> &Value {
    object.get("spec").unwrap_or(&Value::Null)
}

fn dns_label(value: &str, path: &str) -> Vec<FieldError> {
    names::dns1123_label(value).iter().map(|m| invalid_str(path, value, m)).collect()
}

fn dns_subdomain(value: &str, path: &str) -> Vec<FieldError> {
    names::dns1123_subdomain(value).iter().map(|m| invalid_str(path, value, m)).collect()
}

/// `Too many: N: must have at most M items`.
fn too_many(path: &str, count: usize, max: usize) -> FieldError {
    FieldError {
        field: path.to_owned(),
        kind: crate::status::FieldErrorKind::TooMany,
        detail: format!("{count}: must have at most {max} items"),
    }
}

/// validateSet's duplicate check on `key` of each item.
fn unique_names(items: &[Value], path: &str) -> Vec<FieldError> {
    let mut seen = BTreeSet::new();
    let mut errors = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let name = str_at(item, "name").unwrap_or_default();
        if !seen.insert(name) {
            errors.push(duplicate(&child(&index(path, i), "name"), name));
        }
    }
    errors
}

/// A device class name, required, and the allocation mode with its count (an exact request or one
/// alternative of `firstAvailable`).
fn device_request_body(request: &Value, path: &str) -> Vec<FieldError> {
    let class = str_at(request, "deviceClassName").unwrap_or_default();
    let class_path = child(path, "deviceClassName");
    let mut errors =
        if class.is_empty() { vec![required(&class_path, "")] } else { dns_subdomain(class, &class_path) };
    let count = request.get("count").and_then(Value::as_i64).unwrap_or(0);
    let count_path = child(path, "count");
    match str_at(request, "allocationMode").unwrap_or_default() {
        "All" if count != 0 => {
            errors.push(invalid(
                &count_path,
                &count.into(),
                "must not be specified when allocationMode is 'All'",
            ));
        }
        "All" => {}
        "ExactCount" if count <= 0 => {
            errors.push(invalid(&count_path, &count.into(), "must be greater than zero"));
        }
        "ExactCount" => {}
        other => errors.push(not_supported(&child(path, "allocationMode"), other, &["All", "ExactCount"])),
    }
    errors
}

/// validateDeviceRequest: a DNS-label name and exactly one of `exactly` and `firstAvailable`.
fn device_request(request: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = dns_label(str_at(request, "name").unwrap_or_default(), &child(path, "name"));
    let alternatives = list(request, "firstAvailable");
    let mut kinds = 0;
    if !alternatives.is_empty() {
        kinds += 1;
        let at = child(path, "firstAvailable");
        for (i, alternative) in alternatives.iter().enumerate() {
            let item = index(&at, i);
            errors.extend(dns_label(str_at(alternative, "name").unwrap_or_default(), &child(&item, "name")));
            errors.extend(device_request_body(alternative, &item));
        }
        if alternatives.len() > MAX_ALTERNATIVES {
            errors.push(too_many(&at, alternatives.len(), MAX_ALTERNATIVES));
        }
        errors.extend(unique_names(alternatives, &at));
    }
    if let Some(exactly) = request.get("exactly").filter(|e| !e.is_null()) {
        kinds += 1;
        errors.extend(device_request_body(exactly, &child(path, "exactly")));
    }
    match kinds {
        0 => errors.push(required(path, "exactly one of `exactly` or `firstAvailable` is required")),
        1 => {}
        _ => errors.push(invalid(
            path,
            &Value::Null,
            "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
        )),
    }
    errors
}

/// ValidateResourceClaim's spec: the device requests.
pub(super) fn resource_claim(object: &Value) -> Vec<FieldError> {
    let requests = spec(object).pointer("/devices/requests").and_then(Value::as_array);
    let requests = requests.map(Vec::as_slice).unwrap_or_default();
    let path = "spec.devices.requests";
    let mut errors: Vec<FieldError> =
        requests.iter().enumerate().flat_map(|(i, r)| device_request(r, &index(path, i))).collect();
    if requests.len() > MAX_REQUESTS {
        errors.push(too_many(path, requests.len(), MAX_REQUESTS));
    }
    errors.extend(unique_names(requests, path));
    errors
}

/// ValidateResourceClaimUpdate: the spec is immutable, and still valid.
pub(super) fn resource_claim_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = immutable(new.get("spec"), old.get("spec"), "spec");
    errors.extend(resource_claim(new));
    errors
}

/// validatePoolName: required, at most 253 bytes, DNS subdomains separated by slashes.
fn pool_name(name: &str, path: &str) -> Vec<FieldError> {
    if name.is_empty() {
        return vec![required(path, "")];
    }
    let mut errors = Vec::new();
    if name.len() > POOL_NAME_MAX {
        errors.push(too_long(path, POOL_NAME_MAX));
    }
    for part in name.split('/') {
        errors.extend(dns_subdomain(part, path));
    }
    errors
}

/// validateResourceSliceSpec without the devices and counters: a driver, a pool, exactly one way
/// to select nodes; `old` for an update, whose driver, pool name and node name are immutable.
fn resource_slice_spec(spec: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = csi_driver_name(str_at(spec, "driver").unwrap_or_default(), "spec.driver");
    let pool = spec.get("pool").unwrap_or(&Value::Null);
    errors.extend(pool_name(str_at(pool, "name").unwrap_or_default(), "spec.pool.name"));
    let count = pool.get("resourceSliceCount").and_then(Value::as_i64).unwrap_or(0);
    if count <= 0 {
        errors.push(invalid("spec.pool.resourceSliceCount", &count.into(), "must be greater than zero"));
    }
    let generation = pool.get("generation").and_then(Value::as_i64).unwrap_or(0);
    if generation < 0 {
        errors.push(invalid(
            "spec.pool.generation",
            &generation.into(),
            "must be greater than or equal to zero",
        ));
    }
    if let Some(old) = old {
        let field = |v: &Value, p: &str| v.pointer(p).cloned().unwrap_or(Value::String(String::new()));
        for (pointer, path) in
            [("/pool/name", "spec.pool.name"), ("/driver", "spec.driver"), ("/nodeName", "spec.nodeName")]
        {
            errors.extend(immutable(Some(&field(spec, pointer)), Some(&field(old, pointer)), path));
        }
    }
    let mut set = Vec::new();
    if let Some(node) = spec.get("nodeName").and_then(Value::as_str) {
        if node.is_empty() {
            errors.push(invalid_str(
                "spec.nodeName",
                node,
                "must be either unset or set to a non-empty string",
            ));
        } else {
            set.push("`nodeName`");
            errors.extend(dns_subdomain(node, "spec.nodeName"));
        }
    }
    if let Some(selector) = spec.get("nodeSelector").filter(|s| !s.is_null()) {
        set.push("`nodeSelector`");
        let terms = list(selector, "nodeSelectorTerms");
        if terms.len() != 1 {
            errors.push(invalid(
                "spec.nodeSelector.nodeSelectorTerms",
                selector.get("nodeSelectorTerms").unwrap_or(&Value::Null),
                "must have exactly one node selector term",
            ));
        }
    }
    for field in ["allNodes", "perDeviceNodeSelection"] {
        match spec.get(field).and_then(Value::as_bool) {
            Some(true) => {
                set.push(if field == "allNodes" { "`allNodes`" } else { "`perDeviceNodeSelection`" });
            }
            Some(false) => {
                errors.push(invalid(
                    &child("spec", field),
                    &false.into(),
                    "must be either unset or set to true",
                ));
            }
            None => {}
        }
    }
    const ONE_OF: &str =
        "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required";
    match set.len() {
        0 => errors.push(required("spec", ONE_OF)),
        1 => {}
        _ => errors.push(invalid_str(
            "spec",
            &format!("{{{}}}", set.join(", ")),
            &format!("{ONE_OF}, but multiple fields are set"),
        )),
    }
    let devices = list(spec, "devices");
    for (i, device) in devices.iter().enumerate() {
        let name = str_at(device, "name").unwrap_or_default();
        errors.extend(dns_label(name, &child(&index("spec.devices", i), "name")));
    }
    errors.extend(unique_names(devices, "spec.devices"));
    errors
}

/// ValidateResourceSlice.
pub(super) fn resource_slice(object: &Value) -> Vec<FieldError> {
    resource_slice_spec(spec(object), None)
}

/// ValidateResourceSliceUpdate.
pub(super) fn resource_slice_update(old: &Value, new: &Value) -> Vec<FieldError> {
    if semantic_eq(new.get("spec"), old.get("spec")) {
        return resource_slice(new);
    }
    resource_slice_spec(spec(new), Some(spec(old)))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::resources::find;
    use crate::validation::{validate_create, validate_update};

    fn create(plural: &str, object: &Value) -> Vec<String> {
        let resource = find("resource.k8s.io", "v1", plural).unwrap();
        validate_create(resource, object).iter().map(ToString::to_string).collect()
    }

    fn update(plural: &str, old: &Value, new: &Value) -> Vec<String> {
        let resource = find("resource.k8s.io", "v1", plural).unwrap();
        validate_update(resource, old, new).iter().map(ToString::to_string).collect()
    }

    fn claim(requests: Value) -> Value {
        let mut claim = json!({"metadata": {"name": "c", "namespace": "d"}, "spec": {"devices": {}}});
        claim["spec"]["devices"]["requests"] = requests;
        claim
    }

    #[test]
    fn resource_claims() {
        // Defaults first: one device of the class.
        assert!(
            create(
                "resourceclaims",
                &claim(json!([{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]))
            )
            .is_empty()
        );
        assert_eq!(
            create(
                "resourceclaims",
                &claim(json!([
                    {"name": "Gpu", "exactly": {"deviceClassName": "gpu", "allocationMode": "All", "count": 2}},
                    {"name": "none"},
                    {"name": "none", "exactly": {"deviceClassName": "", "allocationMode": "Some"}}
                ]))
            ),
            [
                "spec.devices.requests[0].name: Invalid value: \"Gpu\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                "spec.devices.requests[0].exactly.count: Invalid value: 2: must not be specified when allocationMode is 'All'",
                "spec.devices.requests[1]: Required value: exactly one of `exactly` or `firstAvailable` is required",
                "spec.devices.requests[2].exactly.deviceClassName: Required value",
                "spec.devices.requests[2].exactly.allocationMode: Unsupported value: \"Some\": supported values: \"All\", \"ExactCount\"",
                "spec.devices.requests[2].name: Duplicate value: \"none\"",
            ]
        );
        let alternatives = claim(json!([{"name": "g", "firstAvailable": [
            {"name": "big", "deviceClassName": "gpu", "count": -1, "allocationMode": "ExactCount"},
            {"name": "big", "deviceClassName": "gpu"}]}]));
        assert_eq!(
            create("resourceclaims", &alternatives),
            [
                "spec.devices.requests[0].firstAvailable[0].count: Invalid value: -1: must be greater than zero",
                "spec.devices.requests[0].firstAvailable[1].name: Duplicate value: \"big\"",
            ]
        );
        // The spec is immutable; metadata is not.
        let old = claim(json!([{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]));
        let mut relabelled = old.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        assert!(update("resourceclaims", &old, &relabelled).is_empty());
        let changed = claim(json!([{"name": "gpu", "exactly": {"deviceClassName": "other"}}]));
        let errors = update("resourceclaims", &old, &changed);
        assert!(
            errors.len() == 1
                && errors[0].starts_with("spec: Invalid value: {")
                && errors[0].ends_with(": field is immutable"),
            "{errors:?}"
        );
    }

    fn slice(spec: Value) -> Value {
        let mut slice = json!({"metadata": {"name": "n1-gpu"}});
        slice["spec"] = spec;
        slice
    }

    #[test]
    fn resource_slices() {
        let good = slice(json!({"driver": "gpu.example.com", "nodeName": "n1",
            "pool": {"name": "n1", "generation": 0, "resourceSliceCount": 1}, "devices": [{"name": "gpu-0"}]}));
        assert!(create("resourceslices", &good).is_empty());
        assert_eq!(
            create(
                "resourceslices",
                &slice(json!({"driver": "gpu.example.com", "pool": {"name": "p", "resourceSliceCount": 0}}))
            ),
            [
                "spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero",
                "spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
            ]
        );
        let both = slice(
            json!({"driver": "d.example.com", "nodeName": "n1", "allNodes": true, "pool": {"name": "p", "resourceSliceCount": 1},
            "devices": [{"name": "a"}, {"name": "a"}]}),
        );
        assert_eq!(
            create("resourceslices", &both),
            [
                "spec: Invalid value: \"{`nodeName`, `allNodes`}\": exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set",
                "spec.devices[1].name: Duplicate value: \"a\"",
            ]
        );
        assert_eq!(
            create(
                "resourceslices",
                &slice(json!({"pool": {"name": "p", "resourceSliceCount": 1}, "allNodes": true}))
            )[0],
            "spec.driver: Required value"
        );
        let mut moved = good.clone();
        moved["spec"]["nodeName"] = json!("n2");
        moved["spec"]["pool"]["generation"] = json!(1);
        assert_eq!(
            update("resourceslices", &good, &moved),
            ["spec.nodeName: Invalid value: \"n2\": field is immutable"]
        );
    }
}
