//! storage.k8s.io/v1's CSI printers: csidrivers, csinodes, csistoragecapacities and
//! volumeattachments (upstream's `printCSIDriver`, `printCSINode`, `printCSIStorageCapacity`,
//! `printVolumeAttachment`).

use jiff::Timestamp;
use serde_json::{Value, json};

use super::quantity::quantity_string;
use super::value::{age, array_at, at, bool_at, name, opt_bool, str_at};
use super::{AGE, Column, NAME, Row};

pub(super) const CSI_DRIVER_COLUMNS: &[Column] = &[
    NAME,
    Column::new("AttachRequired", "boolean", ATTACH_REQUIRED),
    Column::new("PodInfoOnMount", "boolean", POD_INFO_ON_MOUNT),
    Column::new("StorageCapacity", "boolean", STORAGE_CAPACITY),
    Column::string("TokenRequests", TOKEN_REQUESTS),
    Column::new("RequiresRepublish", "boolean", REQUIRES_REPUBLISH),
    Column::string("Modes", VOLUME_LIFECYCLE_MODES),
    AGE,
];

const ATTACH_REQUIRED: &str = "attachRequired indicates this CSI volume driver requires an attach operation (because it implements the CSI ControllerPublishVolume() method), and that the Kubernetes attach detach controller should call the attach volume interface which checks the volumeattachment status and waits until the volume is attached before proceeding to mounting. The CSI external-attacher coordinates with CSI volume driver and updates the volumeattachment status when the attach operation is complete. If the value is specified to false, the attach operation will be skipped. Otherwise the attach operation will be called.\n\nThis field is immutable.";
const POD_INFO_ON_MOUNT: &str = "podInfoOnMount indicates this CSI volume driver requires additional pod information (like podName, podUID, etc.) during mount operations, if set to true. If set to false, pod information will not be passed on mount. Default is false.\n\nThe CSI driver specifies podInfoOnMount as part of driver deployment. If true, Kubelet will pass pod information as VolumeContext in the CSI NodePublishVolume() calls. The CSI driver is responsible for parsing and validating the information passed in as VolumeContext.\n\nThe following VolumeContext will be passed if podInfoOnMount is set to true. This list might grow, but the prefix will be used. \"csi.storage.k8s.io/pod.name\": pod.Name \"csi.storage.k8s.io/pod.namespace\": pod.Namespace \"csi.storage.k8s.io/pod.uid\": string(pod.UID) \"csi.storage.k8s.io/ephemeral\": \"true\" if the volume is an ephemeral inline volume\n                                defined by a CSIVolumeSource, otherwise \"false\"\n\n\"csi.storage.k8s.io/ephemeral\" is a new feature in Kubernetes 1.16. It is only required for drivers which support both the \"Persistent\" and \"Ephemeral\" VolumeLifecycleMode. Other drivers can leave pod info disabled and/or ignore this field. As Kubernetes 1.15 doesn't support this field, drivers can only support one mode when deployed on such a cluster and the deployment determines which mode that is, for example via a command line parameter of the driver.\n\nThis field was immutable in Kubernetes < 1.29 and now is mutable.";
const STORAGE_CAPACITY: &str = "storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity that the driver deployment will report by creating CSIStorageCapacity objects with capacity information, if set to true.\n\nThe check can be enabled immediately when deploying a driver. In that case, provisioning new volumes with late binding will pause until the driver deployment has published some suitable CSIStorageCapacity object.\n\nAlternatively, the driver can be deployed with the field unset or false and it can be flipped later when storage capacity information has been published.\n\nThis field was immutable in Kubernetes <= 1.22 and now is mutable.";
const TOKEN_REQUESTS: &str = "tokenRequests indicates the CSI driver needs pods' service account tokens it is mounting volume for to do necessary authentication. Kubelet will pass the tokens in VolumeContext in the CSI NodePublishVolume calls. The CSI driver should parse and validate the following VolumeContext: \"csi.storage.k8s.io/serviceAccount.tokens\": {\n  \"<audience>\": {\n    \"token\": <token>,\n    \"expirationTimestamp\": <expiration timestamp in RFC3339>,\n  },\n  ...\n}\n\nNote: Audience in each TokenRequest should be different and at most one token is empty string. To receive a new token after expiry, RequiresRepublish can be used to trigger NodePublishVolume periodically.";
const REQUIRES_REPUBLISH: &str = "requiresRepublish indicates the CSI driver wants `NodePublishVolume` being periodically called to reflect any possible change in the mounted volume. This field defaults to false.\n\nNote: After a successful initial NodePublishVolume call, subsequent calls to NodePublishVolume should only update the contents of the volume. New mount points will not be seen by a running container.";
const VOLUME_LIFECYCLE_MODES: &str = "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports. The default if the list is empty is \"Persistent\", which is the usage defined by the CSI specification and implemented in Kubernetes via the usual PV/PVC mechanism.\n\nThe other mode is \"Ephemeral\". In this mode, volumes are defined inline inside the pod spec with CSIVolumeSource and their lifecycle is tied to the lifecycle of that pod. A driver has to be aware of this because it is only going to get a NodePublishVolume call for such a volume.\n\nFor more information about implementing this mode, see https://kubernetes-csi.github.io/docs/ephemeral-local-volumes.html A driver can support one or more of these modes and more modes may be added in the future.\n\nThis field is beta. This field is immutable.";

/// A CSIDriver's row, its spec as decoding defaults it (attach required, the rest off, the
/// `Persistent` lifecycle mode); token requests `<unset>` when there is no list.
pub(super) fn csi_driver(object: &Value, now: Timestamp) -> Row {
    let flag = |field: &str, default: bool| json!(opt_bool(object, &["spec", field]).unwrap_or(default));
    let tokens = match at(object, &["spec", "tokenRequests"]) {
        Some(Value::Array(requests)) => {
            requests.iter().map(|r| str_at(r, &["audience"])).collect::<Vec<_>>().join(",")
        }
        _ => "<unset>".to_owned(),
    };
    let modes: Vec<&str> =
        array_at(object, &["spec", "volumeLifecycleModes"]).iter().filter_map(Value::as_str).collect();
    let modes = if modes.is_empty() { "Persistent".to_owned() } else { modes.join(",") };
    Row::new(vec![
        json!(name(object)),
        flag("attachRequired", true),
        flag("podInfoOnMount", false),
        flag("storageCapacity", false),
        json!(tokens),
        flag("requiresRepublish", false),
        json!(modes),
        json!(age(object, now)),
    ])
}

pub(super) const CSI_NODE_COLUMNS: &[Column] = &[
    NAME,
    Column::new("Drivers", "integer", "Drivers indicates the number of CSI drivers registered on the node"),
    AGE,
];

pub(super) fn csi_node(object: &Value, now: Timestamp) -> Row {
    Row::new(vec![
        json!(name(object)),
        json!(array_at(object, &["spec", "drivers"]).len()),
        json!(age(object, now)),
    ])
}

/// Upstream prints no age for capacities.
pub(super) const CSI_STORAGE_CAPACITY_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "StorageClassName",
        "storageClassName represents the name of the StorageClass that the reported capacity applies to. It must meet the same requirements as the name of a StorageClass object (non-empty, DNS subdomain). If that object no longer exists, the CSIStorageCapacity object is obsolete and should be removed by its creator. This field is immutable.",
    ),
    Column::string(
        "Capacity",
        "capacity is the value reported by the CSI driver in its GetCapacityResponse for a GetCapacityRequest with topology and parameters that match the previous fields.\n\nThe semantic is currently (CSI spec 1.2) defined as: The available capacity, in bytes, of the storage that can be used to provision volumes. If not set, that information is currently unavailable.",
    ),
];

pub(super) fn csi_storage_capacity(object: &Value, _now: Timestamp) -> Row {
    let capacity = match at(object, &["capacity"]) {
        None | Some(Value::Null) => "<unset>".to_owned(),
        quantity => quantity_string(quantity),
    };
    Row::new(vec![json!(name(object)), json!(str_at(object, &["storageClassName"])), json!(capacity)])
}

/// The attacher column is a second `name`-format column, as upstream declares it.
pub(super) const VOLUME_ATTACHMENT_COLUMNS: &[Column] = &[
    NAME,
    Column {
        name: "Attacher",
        kind: "string",
        format: "name",
        description: "attacher indicates the name of the volume driver that MUST handle this request. This is the name returned by GetPluginName().",
        priority: 0,
    },
    Column::string("PV", "persistentVolumeName represents the name of the persistent volume to attach."),
    Column::string("Node", "nodeName represents the node that the volume should be attached to."),
    Column::new(
        "Attached",
        "boolean",
        "attached indicates the volume is successfully attached. This field must only be set by the entity completing the attach operation, i.e. the external-attacher.",
    ),
    AGE,
];

pub(super) fn volume_attachment(object: &Value, now: Timestamp) -> Row {
    Row::new(vec![
        json!(name(object)),
        json!(str_at(object, &["spec", "attacher"])),
        json!(str_at(object, &["spec", "source", "persistentVolumeName"])),
        json!(str_at(object, &["spec", "nodeName"])),
        json!(bool_at(object, &["status", "attached"])),
        json!(age(object, now)),
    ])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{cells, headers, resource};

    #[test]
    fn csi_drivers() {
        assert_eq!(
            headers("storage.k8s.io", "csidrivers"),
            [
                "NAME",
                "ATTACHREQUIRED",
                "PODINFOONMOUNT",
                "STORAGECAPACITY",
                "TOKENREQUESTS",
                "REQUIRESREPUBLISH",
                "MODES",
                "AGE"
            ]
        );
        let driver = json!({
            "metadata": {"name": "hostpath.csi.k8s.io", "creationTimestamp": "2025-06-01T11:59:00Z"},
            "spec": {"attachRequired": false, "podInfoOnMount": true, "storageCapacity": true,
                     "tokenRequests": [{"audience": "vault"}, {"audience": "gcp", "expirationSeconds": 3600}],
                     "requiresRepublish": true, "volumeLifecycleModes": ["Persistent", "Ephemeral"]}
        });
        assert_eq!(
            cells("storage.k8s.io", "csidrivers", &driver),
            [
                json!("hostpath.csi.k8s.io"),
                json!(false),
                json!(true),
                json!(true),
                json!("vault,gcp"),
                json!(true),
                json!("Persistent,Ephemeral"),
                json!("60s")
            ]
        );
        // Decoding's defaults; an empty token list is a list.
        let bare = json!({"metadata": {"name": "d"}, "spec": {"tokenRequests": []}});
        assert_eq!(
            cells("storage.k8s.io", "csidrivers", &bare)[1..7],
            [json!(true), json!(false), json!(false), json!(""), json!(false), json!("Persistent")]
        );
        assert_eq!(cells("storage.k8s.io", "csidrivers", &json!({"spec": {}}))[4], "<unset>");
    }

    #[test]
    fn csi_nodes() {
        assert_eq!(headers("storage.k8s.io", "csinodes"), ["NAME", "DRIVERS", "AGE"]);
        let node = json!({"metadata": {"name": "n1", "creationTimestamp": "2025-05-31T12:00:00Z"},
                          "spec": {"drivers": [{"name": "a", "nodeID": "n1"}, {"name": "b", "nodeID": "n1"}]}});
        assert_eq!(cells("storage.k8s.io", "csinodes", &node), [json!("n1"), json!(2), json!("24h")]);
        assert_eq!(cells("storage.k8s.io", "csinodes", &json!({"spec": {}}))[1], 0);
    }

    #[test]
    fn csi_storage_capacities() {
        assert_eq!(
            headers("storage.k8s.io", "csistoragecapacities"),
            ["NAME", "STORAGECLASSNAME", "CAPACITY"]
        );
        let capacity = json!({"metadata": {"name": "csisc-x", "namespace": "kube-system"},
                              "storageClassName": "fast", "capacity": "2048Mi"});
        assert_eq!(
            cells("storage.k8s.io", "csistoragecapacities", &capacity),
            [json!("csisc-x"), json!("fast"), json!("2Gi")]
        );
        let unknown = json!({"metadata": {"name": "u"}, "storageClassName": "fast"});
        assert_eq!(cells("storage.k8s.io", "csistoragecapacities", &unknown)[2], "<unset>");
    }

    #[test]
    fn volume_attachments() {
        assert_eq!(
            headers("storage.k8s.io", "volumeattachments"),
            ["NAME", "ATTACHER", "PV", "NODE", "ATTACHED", "AGE"]
        );
        let columns = super::super::column_definitions(resource("storage.k8s.io", "volumeattachments"));
        assert_eq!((&columns[1]["format"], &columns[4]["type"]), (&json!("name"), &json!("boolean")));
        let attachment = json!({
            "metadata": {"name": "csi-123", "creationTimestamp": "2025-06-01T11:58:00Z"},
            "spec": {"attacher": "ebs.csi.aws.com", "nodeName": "n1", "source": {"persistentVolumeName": "pv-1"}},
            "status": {"attached": true}
        });
        assert_eq!(
            cells("storage.k8s.io", "volumeattachments", &attachment),
            [
                json!("csi-123"),
                json!("ebs.csi.aws.com"),
                json!("pv-1"),
                json!("n1"),
                json!(true),
                json!("2m")
            ]
        );
        let inline = json!({"metadata": {"name": "i"}, "spec": {"attacher": "a", "nodeName": "n", "source": {"inlineVolumeSpec": {}}}});
        assert_eq!(
            cells("storage.k8s.io", "volumeattachments", &inline)[2..5],
            [json!(""), json!("n"), json!(false)]
        );
    }
}
