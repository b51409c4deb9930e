//! resource.k8s.io/v1 printers (dynamic resource allocation): deviceclasses, resourceclaims and
//! resourceslices (upstream's `printDeviceClass`, `printResourceClaim`, `printResourceSlice`).

use jiff::Timestamp;
use serde_json::{Value, json};

use super::value::{age, array_at, deleting, name, present, str_at};
use super::{AGE, Column, NAME, Row};

pub(super) const DEVICE_CLASS_COLUMNS: &[Column] = &[NAME, AGE];

pub(super) fn device_class(object: &Value, now: Timestamp) -> Row {
    Row::new(vec![json!(name(object)), json!(age(object, now))])
}

pub(super) const RESOURCE_CLAIM_COLUMNS: &[Column] = &[
    NAME,
    Column::string("State", "A summary of the current state (allocated, pending, reserved, etc.)."),
    AGE,
];

/// Upstream's `resourceClaimState`: `deleted` once deletion started, then `pending` until the
/// claim is allocated (unless deleted), or `allocated` and, with consumers, `reserved`.
fn claim_state(object: &Value) -> String {
    let mut states = Vec::new();
    let deleted = deleting(object);
    if deleted {
        states.push("deleted");
    }
    if !present(object, &["status", "allocation"]) {
        if !deleted {
            states.push("pending");
        }
    } else {
        states.push("allocated");
        if !array_at(object, &["status", "reservedFor"]).is_empty() {
            states.push("reserved");
        }
    }
    states.join(",")
}

pub(super) fn resource_claim(object: &Value, now: Timestamp) -> Row {
    Row::new(vec![json!(name(object)), json!(claim_state(object)), json!(age(object, now))])
}

pub(super) const RESOURCE_SLICE_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Node",
        "NodeName identifies the node which provides the resources in this pool. A field selector can be used to list only ResourceSlice objects belonging to a certain node.\n\nThis field can be used to limit access from nodes to ResourceSlices with the same node name. It also indicates to autoscalers that adding new nodes of the same type as some old node might also make new resources available.\n\nExactly one of NodeName, NodeSelector, AllNodes, and PerDeviceNodeSelection must be set. This field is immutable.",
    ),
    Column::string(
        "Driver",
        "Driver identifies the DRA driver providing the capacity information. A field selector can be used to list only ResourceSlice objects with a certain driver name.\n\nMust be a DNS subdomain and should end with a DNS domain owned by the vendor of the driver. This field is immutable.",
    ),
    Column::string(
        "Pool",
        "Name is used to identify the pool. For node-local devices, this is often the node name, but this is not required.\n\nIt must not be longer than 253 characters and must consist of one or more DNS sub-domains separated by slashes. This field is immutable.",
    ),
    AGE,
];

pub(super) fn resource_slice(object: &Value, now: Timestamp) -> Row {
    Row::new(vec![
        json!(name(object)),
        json!(str_at(object, &["spec", "nodeName"])),
        json!(str_at(object, &["spec", "driver"])),
        json!(str_at(object, &["spec", "pool", "name"])),
        json!(age(object, now)),
    ])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{cells, headers};

    #[test]
    fn device_classes() {
        assert_eq!(headers("resource.k8s.io", "deviceclasses"), ["NAME", "AGE"]);
        let class = json!({"metadata": {"name": "gpu.example.com", "creationTimestamp": "2025-06-01T11:59:30Z"},
                           "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}});
        assert_eq!(
            cells("resource.k8s.io", "deviceclasses", &class),
            [json!("gpu.example.com"), json!("30s")]
        );
    }

    #[test]
    fn resource_claims() {
        assert_eq!(headers("resource.k8s.io", "resourceclaims"), ["NAME", "STATE", "AGE"]);
        let state = |claim: serde_json::Value| cells("resource.k8s.io", "resourceclaims", &claim)[1].clone();
        assert_eq!(state(json!({"metadata": {"name": "c"}})), "pending");
        let allocation = json!({"devices": {"results": [{"request": "g", "driver": "d", "pool": "p", "device": "gpu-0"}]}});
        assert_eq!(
            state(json!({"metadata": {"name": "c"}, "status": {"allocation": allocation}})),
            "allocated"
        );
        let reserved =
            json!({"allocation": allocation, "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]});
        assert_eq!(state(json!({"metadata": {"name": "c"}, "status": reserved})), "allocated,reserved");
        let deleted = json!({"name": "c", "deletionTimestamp": "2025-06-01T12:00:00Z"});
        assert_eq!(state(json!({"metadata": deleted.clone()})), "deleted");
        assert_eq!(
            state(json!({"metadata": deleted, "status": {"allocation": allocation}})),
            "deleted,allocated"
        );
    }

    #[test]
    fn resource_slices() {
        assert_eq!(headers("resource.k8s.io", "resourceslices"), ["NAME", "NODE", "DRIVER", "POOL", "AGE"]);
        let slice = json!({
            "metadata": {"name": "n1-gpu-x7", "creationTimestamp": "2025-06-01T10:00:00Z"},
            "spec": {"driver": "gpu.example.com", "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "gpu-0"}]}
        });
        assert_eq!(
            cells("resource.k8s.io", "resourceslices", &slice),
            [json!("n1-gpu-x7"), json!("n1"), json!("gpu.example.com"), json!("n1"), json!("120m")]
        );
        let shared = json!({"metadata": {"name": "s"}, "spec": {"driver": "d", "allNodes": true, "pool": {"name": "p"}}});
        assert_eq!(
            cells("resource.k8s.io", "resourceslices", &shared)[1..4],
            [json!(""), json!("d"), json!("p")]
        );
    }
}
