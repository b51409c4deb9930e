//! Storage printers: persistentvolumes, persistentvolumeclaims and storageclasses (upstream's
//! `printPersistentVolume`, `printPersistentVolumeClaim`, `printStorageClass`).

use jiff::Timestamp;
use serde_json::{Value, json};

use super::quantity::quantity_string;
use super::value::{age, annotation, array_at, at, deleting, name, opt_bool, opt_str, str_at};
use super::{AGE, Column, NAME, Row};

/// The storage class annotation that wins over `storageClassName`.
const BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// Upstream's `GetAccessModesAsString`: `RWO`, `ROX`, `RWX`, `RWOP` in that order, each once.
fn access_modes(value: &Value, path: &[&str]) -> String {
    let modes = array_at(value, path);
    let has = |mode: &str| modes.iter().any(|m| m.as_str() == Some(mode));
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| has(mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

/// `spec.volumeMode`, which decoding defaults to `Filesystem`.
fn volume_mode(object: &Value) -> &str {
    opt_str(object, &["spec", "volumeMode"]).unwrap_or("Filesystem")
}

/// The phase, `Terminating` once deletion started; decoding defaults an unset phase to `Pending`.
fn phase(object: &Value) -> &str {
    if deleting(object) {
        return "Terminating";
    }
    match str_at(object, &["status", "phase"]) {
        "" => "Pending",
        phase => phase,
    }
}

pub(super) const PERSISTENT_VOLUME_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Capacity",
        "capacity is the description of the persistent volume's resources and capacity. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#capacity",
    ),
    Column::string(
        "Access Modes",
        "accessModes contains all ways the volume can be mounted. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes",
    ),
    Column::string(
        "Reclaim Policy",
        "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim. Valid options are Retain (default for manually created PersistentVolumes), Delete (default for dynamically provisioned PersistentVolumes), and Recycle (deprecated). Recycle must be supported by the volume plugin underlying this PersistentVolume. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#reclaiming",
    ),
    Column::string(
        "Status",
        "phase indicates if a volume is available, bound to a claim, or released by a claim. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#phase",
    ),
    Column::string(
        "Claim",
        "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim. Expected to be non-nil when bound. claim.VolumeName is the authoritative bind between PV and PVC. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#binding",
    ),
    Column::string("StorageClass", "StorageClass of the pv"),
    Column::string("VolumeAttributesClass", "VolumeAttributesClass of the pv"),
    Column::string(
        "Reason",
        "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI.",
    ),
    AGE,
    Column::string(
        "VolumeMode",
        "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state. Value of Filesystem is implied when not included in spec.",
    )
    .wide(),
];

pub(super) fn persistent_volume(object: &Value, now: Timestamp) -> Row {
    let claim = at(object, &["spec", "claimRef"])
        .map(|c| format!("{}/{}", str_at(c, &["namespace"]), str_at(c, &["name"])))
        .unwrap_or_default();
    // Decoding defaults the reclaim policy to Retain.
    let reclaim = match str_at(object, &["spec", "persistentVolumeReclaimPolicy"]) {
        "" => "Retain",
        policy => policy,
    };
    let class = annotation(object, BETA_STORAGE_CLASS)
        .unwrap_or_else(|| str_at(object, &["spec", "storageClassName"]));
    Row::new(vec![
        json!(name(object)),
        json!(quantity_string(at(object, &["spec", "capacity", "storage"]))),
        json!(access_modes(object, &["spec", "accessModes"])),
        json!(reclaim),
        json!(phase(object)),
        json!(claim),
        json!(class),
        json!(opt_str(object, &["spec", "volumeAttributesClassName"]).unwrap_or("<unset>")),
        json!(str_at(object, &["status", "reason"])),
        json!(age(object, now)),
        json!(volume_mode(object)),
    ])
}

pub(super) const PERSISTENT_VOLUME_CLAIM_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Status", "phase represents the current phase of PersistentVolumeClaim."),
    Column::string("Volume", "volumeName is the binding reference to the PersistentVolume backing this claim."),
    Column::string("Capacity", "capacity represents the actual resources of the underlying volume."),
    Column::string(
        "Access Modes",
        "accessModes contains the actual access modes the volume backing the PVC has. More info: https://kubernetes.io/docs/concepts/storage/persistent-volumes#access-modes-1",
    ),
    Column::string("StorageClass", "StorageClass of the pvc"),
    Column::string("VolumeAttributesClass", "VolumeAttributesClass of the pvc"),
    AGE,
    Column::string(
        "VolumeMode",
        "volumeMode defines what type of volume is required by the claim. Value of Filesystem is implied when not included in claim spec.",
    )
    .wide(),
];

pub(super) fn persistent_volume_claim(object: &Value, now: Timestamp) -> Row {
    let volume = str_at(object, &["spec", "volumeName"]);
    // Capacity and access modes only once bound to a volume.
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            quantity_string(at(object, &["status", "capacity", "storage"])),
            access_modes(object, &["status", "accessModes"]),
        )
    };
    let class = annotation(object, BETA_STORAGE_CLASS)
        .or_else(|| opt_str(object, &["spec", "storageClassName"]))
        .unwrap_or("");
    Row::new(vec![
        json!(name(object)),
        json!(phase(object)),
        json!(volume),
        json!(capacity),
        json!(modes),
        json!(class),
        json!(opt_str(object, &["spec", "volumeAttributesClassName"]).unwrap_or("<unset>")),
        json!(age(object, now)),
        json!(volume_mode(object)),
    ])
}

pub(super) const STORAGE_CLASS_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Provisioner", "provisioner indicates the type of the provisioner."),
    Column::string(
        "ReclaimPolicy",
        "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class. Defaults to Delete.",
    ),
    Column::string(
        "VolumeBindingMode",
        "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound.  When unset, VolumeBindingImmediate is used. This field is only honored by servers that enable the VolumeScheduling feature.",
    ),
    Column::string(
        "AllowVolumeExpansion",
        "allowVolumeExpansion shows whether the storage class allow volume expand.",
    ),
    AGE,
];

pub(super) fn storage_class(object: &Value, now: Timestamp) -> Row {
    let is_default =
        ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"]
            .iter()
            .any(|key| annotation(object, key) == Some("true"));
    let name = if is_default { format!("{} (default)", name(object)) } else { name(object).to_owned() };
    Row::new(vec![
        json!(name),
        json!(str_at(object, &["provisioner"])),
        json!(opt_str(object, &["reclaimPolicy"]).unwrap_or("Delete")),
        json!(opt_str(object, &["volumeBindingMode"]).unwrap_or("Immediate")),
        json!(opt_bool(object, &["allowVolumeExpansion"]).unwrap_or(false)),
        json!(age(object, now)),
    ])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{cells, headers};

    #[test]
    fn persistent_volumes() {
        assert_eq!(
            headers("", "persistentvolumes"),
            [
                "NAME",
                "CAPACITY",
                "ACCESS MODES",
                "RECLAIM POLICY",
                "STATUS",
                "CLAIM",
                "STORAGECLASS",
                "VOLUMEATTRIBUTESCLASS",
                "REASON",
                "AGE",
                "VOLUMEMODE"
            ]
        );
        let pv = json!({
            "metadata": {"name": "pvc-3f2a", "creationTimestamp": "2025-06-01T09:00:00Z"},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "standard", "volumeMode": "Filesystem",
                     "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "default", "name": "data"},
                     "hostPath": {"path": "/tmp/x"}},
            "status": {"phase": "Bound"}
        });
        assert_eq!(
            cells("", "persistentvolumes", &pv),
            [
                json!("pvc-3f2a"),
                json!("10Gi"),
                json!("RWO,RWX"),
                json!("Delete"),
                json!("Bound"),
                json!("default/data"),
                json!("standard"),
                json!("<unset>"),
                json!(""),
                json!("3h"),
                json!("Filesystem")
            ]
        );
        let released = json!({
            "metadata": {"name": "old", "creationTimestamp": "2025-06-01T09:00:00Z", "deletionTimestamp": "2025-06-01T11:00:00Z",
                         "annotations": {"volume.beta.kubernetes.io/storage-class": "legacy"}},
            "spec": {"capacity": {"storage": "1024Mi"}, "accessModes": ["ReadWriteOncePod"], "volumeMode": "Block",
                     "volumeAttributesClassName": "gold", "storageClassName": "standard"},
            "status": {"phase": "Failed", "reason": "VolumeFailedRecycle"}
        });
        assert_eq!(
            cells("", "persistentvolumes", &released),
            [
                json!("old"),
                json!("1Gi"),
                json!("RWOP"),
                json!("Retain"),
                json!("Terminating"),
                json!(""),
                json!("legacy"),
                json!("gold"),
                json!("VolumeFailedRecycle"),
                json!("3h"),
                json!("Block")
            ]
        );
        let bare = cells("", "persistentvolumes", &json!({"metadata": {"name": "b"}}));
        assert_eq!(bare[1..5], [json!("0"), json!(""), json!("Retain"), json!("Pending")]);
    }

    #[test]
    fn persistent_volume_claims() {
        assert_eq!(
            headers("", "persistentvolumeclaims"),
            [
                "NAME",
                "STATUS",
                "VOLUME",
                "CAPACITY",
                "ACCESS MODES",
                "STORAGECLASS",
                "VOLUMEATTRIBUTESCLASS",
                "AGE",
                "VOLUMEMODE"
            ]
        );
        let bound = json!({
            "metadata": {"name": "data", "namespace": "default", "creationTimestamp": "2025-06-01T11:00:00Z"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}},
                     "storageClassName": "standard", "volumeName": "pvc-3f2a", "volumeMode": "Filesystem"},
            "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "10Gi"}}
        });
        assert_eq!(
            cells("", "persistentvolumeclaims", &bound),
            [
                json!("data"),
                json!("Bound"),
                json!("pvc-3f2a"),
                json!("10Gi"),
                json!("RWO"),
                json!("standard"),
                json!("<unset>"),
                json!("60m"),
                json!("Filesystem")
            ]
        );
        let pending = json!({
            "metadata": {"name": "wait", "creationTimestamp": "2025-06-01T11:59:55Z"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Pending"}
        });
        assert_eq!(
            cells("", "persistentvolumeclaims", &pending),
            [
                json!("wait"),
                json!("Pending"),
                json!(""),
                json!(""),
                json!(""),
                json!(""),
                json!("<unset>"),
                json!("5s"),
                json!("Filesystem")
            ]
        );
    }

    #[test]
    fn storage_classes() {
        assert_eq!(
            headers("storage.k8s.io", "storageclasses"),
            ["NAME", "PROVISIONER", "RECLAIMPOLICY", "VOLUMEBINDINGMODE", "ALLOWVOLUMEEXPANSION", "AGE"]
        );
        let standard = json!({
            "metadata": {"name": "standard", "creationTimestamp": "2025-05-01T12:00:00Z",
                         "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "rancher.io/local-path", "reclaimPolicy": "Delete", "volumeBindingMode": "WaitForFirstConsumer"
        });
        assert_eq!(
            cells("storage.k8s.io", "storageclasses", &standard),
            [
                json!("standard (default)"),
                json!("rancher.io/local-path"),
                json!("Delete"),
                json!("WaitForFirstConsumer"),
                json!(false),
                json!("31d")
            ]
        );
        let fast = json!({"metadata": {"name": "fast", "creationTimestamp": "2025-05-01T12:00:00Z",
                                       "annotations": {"storageclass.beta.kubernetes.io/is-default-class": "false"}},
                          "provisioner": "csi.example.com", "reclaimPolicy": "Retain", "allowVolumeExpansion": true});
        assert_eq!(
            cells("storage.k8s.io", "storageclasses", &fast),
            [
                json!("fast"),
                json!("csi.example.com"),
                json!("Retain"),
                json!("Immediate"),
                json!(true),
                json!("31d")
            ]
        );
    }
}
