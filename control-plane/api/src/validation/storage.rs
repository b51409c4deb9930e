//! storage.k8s.io/v1's CSI objects: CSIDrivers, CSINodes, CSIStorageCapacities and
//! VolumeAttachments (upstream's `pkg/apis/storage/validation`, 1.34 with its default feature
//! gates: SELinuxMountReadWriteOncePod on, MutableCSINodeAllocatableCount off).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{
    FieldError, child, duplicate, forbidden, immutable, index, invalid, invalid_str, list, meta, names,
    not_supported, required, semantic_eq, str_at, too_long,
};

fn spec(object: &Value) -> &Value {
    object.get("spec").unwrap_or(&Value::Null)
}

/// upstream's ValidateCSIDriverName (also the rule for DRA driver names): required, at most 63
/// characters, a DNS-1123 subdomain once lower-cased.
pub(super) fn csi_driver_name(name: &str, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if name.is_empty() {
        errors.push(required(path, ""));
    }
    if name.len() > 63 {
        errors.push(too_long(path, 63));
    }
    errors.extend(names::dns1123_subdomain(&name.to_lowercase()).iter().map(|m| invalid_str(path, name, m)));
    errors
}

/// `ValidateNodeName` / `ValidateClassName` of a field: a DNS-1123 subdomain.
fn subdomain(value: &str, path: &str) -> Vec<FieldError> {
    names::dns1123_subdomain(value).iter().map(|m| invalid_str(path, value, m)).collect()
}

/// A `*bool` the defaults always set: required.
fn set_flag(spec: &Value, field: &str, path: &str) -> Vec<FieldError> {
    match spec.get(field) {
        None | Some(Value::Null) => vec![required(&child(path, field), "")],
        Some(_) => Vec::new(),
    }
}

/// ValidateCSIDriver's spec checks.
pub(super) fn csi_driver(object: &Value) -> Vec<FieldError> {
    let spec = spec(object);
    // Upstream's path says "attachedRequired".
    let mut errors: Vec<FieldError> = match spec.get("attachRequired") {
        None | Some(Value::Null) => vec![required("spec.attachedRequired", "")],
        Some(_) => Vec::new(),
    };
    errors.extend(set_flag(spec, "podInfoOnMount", "spec"));
    errors.extend(set_flag(spec, "storageCapacity", "spec"));
    if let Some(policy) = str_at(spec, "fsGroupPolicy")
        && !matches!(policy, "File" | "None" | "ReadWriteOnceWithFSType")
    {
        errors.push(not_supported(
            "spec.fsGroupPolicy",
            policy,
            &["File", "None", "ReadWriteOnceWithFSType"],
        ));
    }
    let mut audiences = BTreeSet::new();
    for (i, request) in list(spec, "tokenRequests").iter().enumerate() {
        let at = index("spec.tokenRequests", i);
        let audience = str_at(request, "audience").unwrap_or_default();
        if !audiences.insert(audience) {
            errors.push(duplicate(&child(&at, "audience"), audience));
            continue;
        }
        if let Some(seconds) = request.get("expirationSeconds").and_then(Value::as_i64) {
            let path = child(&at, "expirationSeconds");
            if seconds < 600 {
                errors.push(invalid(
                    &path,
                    &seconds.into(),
                    "may not specify a duration less than 10 minutes",
                ));
            }
            if seconds > 1 << 32 {
                errors.push(invalid(
                    &path,
                    &seconds.into(),
                    "may not specify a duration larger than 2^32 seconds",
                ));
            }
        }
    }
    for mode in list(spec, "volumeLifecycleModes") {
        let mode = mode.as_str().unwrap_or_default();
        if !matches!(mode, "Persistent" | "Ephemeral") {
            errors.push(not_supported("spec.volumeLifecycleModes", mode, &["Persistent", "Ephemeral"]));
        }
    }
    errors.extend(set_flag(spec, "seLinuxMount", "spec"));
    errors
}

/// ValidateCSIDriverUpdate: attachRequired and the lifecycle modes are immutable.
pub(super) fn csi_driver_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = csi_driver(new);
    let (old, new) = (spec(old), spec(new));
    errors.extend(immutable(new.get("attachRequired"), old.get("attachRequired"), "spec.attachedRequired"));
    errors.extend(immutable(
        new.get("volumeLifecycleModes"),
        old.get("volumeLifecycleModes"),
        "spec.volumeLifecycleModes",
    ));
    errors
}

/// The longest node ID a CSINode driver may report (csiNodeIDLongerMaxLength: the strategy allows
/// long IDs).
const NODE_ID_MAX: usize = 256;

/// ValidateCSINode: each driver named once, with a node ID, a non-negative volume limit and
/// qualified topology keys.
pub(super) fn csi_node(object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, driver) in list(spec(object), "drivers").iter().enumerate() {
        let at = index("spec.drivers", i);
        let name = str_at(driver, "name").unwrap_or_default();
        errors.extend(csi_driver_name(name, &child(&at, "name")));
        let node_id = str_at(driver, "nodeID").unwrap_or_default();
        if node_id.is_empty() {
            errors.push(required(&child(&at, "nodeID"), ""));
        }
        if node_id.len() > NODE_ID_MAX {
            errors.push(invalid_str(
                &child(&at, "nodeID"),
                node_id,
                &format!("must be {NODE_ID_MAX} characters or less"),
            ));
        }
        if let Some(count) = driver.pointer("/allocatable/count") {
            errors.extend(super::nonnegative(Some(count), &child(&child(&at, "allocatable"), "count")));
        }
        if !seen.insert(name) {
            errors.push(duplicate(&child(&at, "name"), name));
        }
        let mut keys = BTreeSet::new();
        for key in list(driver, "topologyKeys") {
            let key = key.as_str().unwrap_or_default();
            if key.is_empty() {
                errors.push(required(&at, ""));
            }
            if !keys.insert(key) {
                errors.push(duplicate(&at, key));
            }
            errors.extend(names::qualified_name(key).iter().map(|m| invalid_str(&at, key, m)));
        }
    }
    errors
}

/// The strategy's ValidateCSINode, then ValidateCSINodeUpdate, which validates the node again: a
/// driver, once registered, does not change (its allocatable count neither, with
/// MutableCSINodeAllocatableCount off).
pub(super) fn csi_node_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = csi_node(new);
    errors.extend(csi_node(new));
    for before in list(spec(old), "drivers") {
        for after in list(spec(new), "drivers") {
            if str_at(before, "name") == str_at(after, "name") && !semantic_eq(Some(after), Some(before)) {
                errors.push(invalid("spec.drivers", after, "field is immutable"));
            }
        }
    }
    errors
}

/// ValidateCSIStorageCapacity: a valid node topology selector and class name, a non-negative
/// capacity.
pub(super) fn csi_storage_capacity(object: &Value) -> Vec<FieldError> {
    let mut errors =
        object.get("nodeTopology").map_or_else(Vec::new, |s| meta::label_selector(s, "nodeTopology"));
    errors.extend(subdomain(str_at(object, "storageClassName").unwrap_or_default(), "storageClassName"));
    for field in ["capacity", "maximumVolumeSize"] {
        if let Some(text) = str_at(object, field)
            && super::quantity::Quantity::parse(text).is_some_and(|q| q.is_negative())
        {
            errors.push(invalid_str(field, text, "must be greater than or equal to 0"));
        }
    }
    errors
}

/// ValidateCSIStorageCapacity, then ValidateCSIStorageCapacityUpdate: what CSI's GetCapacity was
/// asked with is immutable.
pub(super) fn csi_storage_capacity_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = csi_storage_capacity(new);
    if !semantic_eq(new.get("nodeTopology"), old.get("nodeTopology")) {
        errors.push(invalid(
            "nodeTopology",
            new.get("nodeTopology").unwrap_or(&Value::Null),
            "field is immutable",
        ));
    }
    let class = str_at(new, "storageClassName").unwrap_or_default();
    if class != str_at(old, "storageClassName").unwrap_or_default() {
        errors.push(invalid_str("storageClassName", class, "field is immutable"));
    }
    errors
}

/// ValidateVolumeAttachment's spec checks: an attacher, exactly one source, a valid node name.
fn attachment_spec(spec: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if str_at(spec, "attacher").is_none_or(str::is_empty) {
        errors.push(required("spec.attacher", ""));
    }
    let source = spec.get("source").unwrap_or(&Value::Null);
    let volume = source.get("persistentVolumeName").filter(|v| !v.is_null());
    let inline = source.get("inlineVolumeSpec").filter(|v| !v.is_null());
    const ONE_SOURCE: &str = "must specify exactly one of inlineVolumeSpec and persistentVolumeName";
    match (volume, inline) {
        (None, None) => errors.push(required("spec.source", ONE_SOURCE)),
        (Some(_), Some(_)) => errors.push(forbidden("spec.source", ONE_SOURCE)),
        (Some(name), None) if name.as_str().is_some_and(str::is_empty) => {
            errors.push(required(
                "spec.source.persistentVolumeName",
                "must specify non empty persistentVolumeName",
            ));
        }
        _ => {}
    }
    errors.extend(subdomain(str_at(spec, "nodeName").unwrap_or_default(), "spec.nodeName"));
    errors
}

/// ValidateVolumeAttachment, then what ValidateVolumeAttachmentV1 adds for new v1 objects: the
/// attacher is a CSI driver name, the persistent volume name a valid name.
pub(super) fn volume_attachment(object: &Value) -> Vec<FieldError> {
    let spec = spec(object);
    let mut errors = attachment_spec(spec);
    errors.extend(csi_driver_name(str_at(spec, "attacher").unwrap_or_default(), "spec.attacher"));
    let volume = spec.pointer("/source/persistentVolumeName").and_then(Value::as_str);
    if let Some(name) = volume.filter(|n| !n.is_empty()) {
        errors.extend(subdomain(name, "spec.source.persistentVolumeName"));
    }
    errors
}

/// The strategy's ValidateVolumeAttachment, then ValidateVolumeAttachmentUpdate, which validates
/// the object again and keeps the spec read-only.
pub(super) fn volume_attachment_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = attachment_spec(spec(new));
    errors.extend(attachment_spec(spec(new)));
    if !semantic_eq(new.get("spec"), old.get("spec")) {
        errors.push(invalid("spec", spec(new), "field is immutable"));
    }
    errors
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use crate::resources::find;
    use crate::validation::{validate_create, validate_update};

    fn create(plural: &str, object: &Value) -> Vec<String> {
        let resource = find("storage.k8s.io", "v1", plural).unwrap();
        validate_create(resource, object).iter().map(ToString::to_string).collect()
    }

    fn update(plural: &str, old: &Value, new: &Value) -> Vec<String> {
        let resource = find("storage.k8s.io", "v1", plural).unwrap();
        validate_update(resource, old, new).iter().map(ToString::to_string).collect()
    }

    fn attachment(source: Value) -> Value {
        let mut attachment =
            json!({"metadata": {"name": "va"}, "spec": {"attacher": "csi.example.com", "nodeName": "n1"}});
        attachment["spec"]["source"] = source;
        attachment
    }

    #[test]
    fn volume_attachments() {
        assert!(create("volumeattachments", &attachment(json!({"persistentVolumeName": "pv-1"}))).is_empty());
        assert_eq!(
            create("volumeattachments", &attachment(json!({}))),
            [
                "spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName"
            ]
        );
        assert_eq!(
            create(
                "volumeattachments",
                &attachment(json!({"persistentVolumeName": "pv", "inlineVolumeSpec": {}}))
            ),
            ["spec.source: Forbidden: must specify exactly one of inlineVolumeSpec and persistentVolumeName"]
        );
        let no_attacher = json!({"metadata": {"name": "va"}, "spec": {"nodeName": "n1", "source": {"persistentVolumeName": "pv"}}});
        let errors = create("volumeattachments", &no_attacher);
        assert_eq!(errors[0], "spec.attacher: Required value");
        assert_eq!(errors[1], "spec.attacher: Required value", "ValidateVolumeAttachmentV1 reports it again");
        // The spec is read-only; the status is not the main resource's business.
        let old = attachment(json!({"persistentVolumeName": "pv-1"}));
        let mut moved = old.clone();
        moved["spec"]["nodeName"] = json!("n2");
        assert_eq!(
            update("volumeattachments", &old, &moved),
            [
                r#"spec: Invalid value: {"attacher":"csi.example.com","nodeName":"n2","source":{"persistentVolumeName":"pv-1"}}: field is immutable"#
            ]
        );
        let mut labelled = old.clone();
        labelled["metadata"]["labels"] = json!({"a": "b"});
        assert!(update("volumeattachments", &old, &labelled).is_empty());
    }

    #[test]
    fn csi_drivers_and_nodes() {
        let driver = json!({"metadata": {"name": "csi.example.com"}, "spec": {"volumeLifecycleModes": ["Persistent", "Sometimes"],
            "tokenRequests": [{"audience": "a", "expirationSeconds": 60}, {"audience": "a"}]}});
        assert_eq!(
            create("csidrivers", &driver),
            [
                "spec.tokenRequests[0].expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes",
                "spec.tokenRequests[1].audience: Duplicate value: \"a\"",
                "spec.volumeLifecycleModes: Unsupported value: \"Sometimes\": supported values: \"Persistent\", \"Ephemeral\"",
            ]
        );
        let old = json!({"metadata": {"name": "d"}, "spec": {}});
        let new = json!({"metadata": {"name": "d"}, "spec": {"attachRequired": false}});
        assert_eq!(
            update("csidrivers", &old, &new),
            ["spec.attachedRequired: Invalid value: false: field is immutable"],
            "the default (true) is what was stored"
        );
        let node = |count: i64| {
            json!({"metadata": {"name": "n1"}, "spec": {"drivers": [
                {"name": "csi.example.com", "nodeID": "n1", "allocatable": {"count": count}, "topologyKeys": ["zone"]}]}})
        };
        assert!(create("csinodes", &node(4)).is_empty());
        assert_eq!(
            create("csinodes", &node(-1)),
            ["spec.drivers[0].allocatable.count: Invalid value: -1: must be greater than or equal to 0"]
        );
        let twice = json!({"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "a.b", "nodeID": "x"}, {"name": "a.b"}]}});
        assert_eq!(
            create("csinodes", &twice),
            ["spec.drivers[1].nodeID: Required value", "spec.drivers[1].name: Duplicate value: \"a.b\""]
        );
        let errors = update("csinodes", &node(4), &node(8));
        assert!(errors.len() == 1 && errors[0].starts_with("spec.drivers: Invalid value: {"), "{errors:?}");
        assert_eq!(update("csinodes", &node(-1), &node(-1)).len(), 2, "upstream validates the node twice");
    }

    #[test]
    fn csi_storage_capacities() {
        let capacity = json!({"metadata": {"name": "c", "namespace": "kube-system"}, "storageClassName": "fast",
            "nodeTopology": {"matchLabels": {"zone": "a"}}, "capacity": "10Gi"});
        assert!(create("csistoragecapacities", &capacity).is_empty());
        let mut bad = capacity.clone();
        bad["storageClassName"] = json!("Fast!");
        bad["capacity"] = json!("-1Gi");
        let errors = create("csistoragecapacities", &bad);
        assert!(
            errors[0]
                .starts_with("storageClassName: Invalid value: \"Fast!\": a lowercase RFC 1123 subdomain")
        );
        assert_eq!(errors[1], "capacity: Invalid value: \"-1Gi\": must be greater than or equal to 0");
        let mut moved = capacity.clone();
        moved["storageClassName"] = json!("slow");
        moved["capacity"] = json!("1Gi");
        assert_eq!(
            update("csistoragecapacities", &capacity, &moved),
            ["storageClassName: Invalid value: \"slow\": field is immutable"]
        );
    }
}
