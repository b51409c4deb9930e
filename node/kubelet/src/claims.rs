//! persistentVolumeClaim volumes (upstream's desired-state-of-world populator for claims, and the
//! checks of its hostPath and local volume plugins): a pod volume's claim and the
//! PersistentVolume bound to it resolved to what the kubelet mounts — a hostPath, or a local
//! path bind-mounted into the pod's directory — or upstream's error, word for word.
//!
//! Pure: the IO edge ([`crate::pods`]) reads the claims, their volumes and the Node's labels
//! ([`crate::volumes::Sources`]), checks the paths and makes the bind mounts.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    NodeSelectorRequirement, PersistentVolume, PersistentVolumeClaim, Pod, PodSpec, VolumeNodeAffinity,
};
use keel_api::labels::{Operator, Requirement};

/// The finalizer that keeps a claim in use from going (upstream's PVCProtectionFinalizer): a
/// claim being deleted without it is not mounted any more.
pub const PVC_PROTECTION_FINALIZER: &str = "kubernetes.io/pvc-protection";

/// The directory of local volumes under a pod's `volumes` (upstream's escaped plugin name).
pub const LOCAL_PLUGIN_DIR: &str = "kubernetes.io~local-volume";

/// An object as the kubelet read it: the object, or the read's error message.
pub type Fetched<T> = Result<T, String>;

/// What the PersistentVolume behind a claim is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A hostPath PV: its path, mounted as it is once its `type` check passes.
    HostPath { path: String, kind: Option<String> },
    /// A local PV: its path, bind-mounted into the pod's directory.
    Local { path: String },
    /// Any other source, which keel-kubelet does not mount.
    Unsupported,
}

/// A claim resolved to its bound PersistentVolume (upstream's volume.Spec of a PV).
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedVolume {
    /// The PV's name: upstream's volume spec name, which names the volume in mount errors and
    /// its directory under the pod's.
    pub name: String,
    pub source: Source,
    /// The pod volume's `readOnly` (the spec's ReadOnly): the whole volume is mounted read-only.
    pub read_only: bool,
    pub node_affinity: Option<VolumeNodeAffinity>,
}

/// The volumes the pod's containers mount and those they use as raw block devices (upstream's
/// GetPodVolumeNames): the kubelet sets up nothing else.
pub fn used_volumes(spec: &PodSpec) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut mounts, mut devices) = (BTreeSet::new(), BTreeSet::new());
    let containers = spec.init_containers.iter().flatten().chain(&spec.containers);
    for container in containers {
        mounts.extend(container.volume_mounts.iter().flatten().map(|m| m.name.clone()));
        devices.extend(container.volume_devices.iter().flatten().map(|d| d.name.clone()));
    }
    for container in spec.ephemeral_containers.iter().flatten() {
        mounts.extend(container.volume_mounts.iter().flatten().map(|m| m.name.clone()));
        devices.extend(container.volume_devices.iter().flatten().map(|d| d.name.clone()));
    }
    (mounts, devices)
}

/// The claims the pod's used volumes name.
pub fn claim_names(pod: &Pod) -> BTreeSet<String> {
    let Some(spec) = &pod.spec else { return BTreeSet::new() };
    let (mounts, devices) = used_volumes(spec);
    spec.volumes
        .iter()
        .flatten()
        .filter(|v| mounts.contains(&v.name) || devices.contains(&v.name))
        .filter_map(|v| v.persistent_volume_claim.as_ref().map(|c| c.claim_name.clone()))
        .collect()
}

/// upstream's getPVCExtractPV: the name of the PV a claim is bound to, or why it cannot be used.
pub fn bound_volume_name(claim: &Fetched<PersistentVolumeClaim>) -> Result<String, String> {
    let claim = claim.as_ref().map_err(|e| format!("failed to fetch PVC from API server: {e}"))?;
    let protected = claim.metadata.finalizers.iter().flatten().any(|f| f == PVC_PROTECTION_FINALIZER);
    if claim.metadata.deletion_timestamp.is_some() && !protected {
        return Err("PVC is being deleted".into());
    }
    if claim.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        return Err("PVC is not bound".into());
    }
    match claim.spec.as_ref().and_then(|s| s.volume_name.clone()).filter(|n| !n.is_empty()) {
        Some(name) => Ok(name),
        None => Err("PVC has empty pvc.Spec.VolumeName".into()),
    }
}

/// The pod volume `volume` that uses claim `claim_name` of `namespace`, read-only or not.
#[derive(Debug, Clone, Copy)]
pub struct PodVolume<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub claim_name: &'a str,
    pub read_only: bool,
    /// Whether a container mounts it (volumeMounts) and uses it as a block device (volumeDevices).
    pub mounted: bool,
    pub device: bool,
}

/// upstream's createVolumeSpec for a claim: the claim bound, its PV claimed by it (by UID), and
/// the PV's volume mode the one the containers use it in. `volume` is what was read of the PV
/// the claim names (`None`: the claim names none). The error is the populator's, as it reaches
/// [`unable_to_mount`].
pub fn resolve(
    pod_volume: &PodVolume<'_>,
    claim: &Fetched<PersistentVolumeClaim>,
    volume: Option<&Fetched<PersistentVolume>>,
) -> Result<ClaimedVolume, String> {
    let processing =
        |e: String| format!("error processing PVC {}/{}: {e}", pod_volume.namespace, pod_volume.claim_name);
    let name = bound_volume_name(claim).map_err(processing)?;
    let claim_uid = claim.as_ref().ok().and_then(|c| c.metadata.uid.clone()).unwrap_or_default();
    let pv = match volume {
        Some(Ok(pv)) => pv,
        Some(Err(e)) => return Err(processing(format!("failed to fetch PV {name} from API server: {e}"))),
        None => return Err(processing(format!("failed to fetch PV {name} from API server: not read"))),
    };
    let spec = pv.spec.clone().unwrap_or_default();
    let Some(claim_ref) = &spec.claim_ref else {
        return Err(processing(format!(
            "found PV object {name} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        )));
    };
    let ref_uid = claim_ref.uid.clone().unwrap_or_default();
    if ref_uid != claim_uid {
        return Err(processing(format!(
            "found PV object {name} but its pv.Spec.ClaimRef.UID {ref_uid} does not point to claim.UID {claim_uid}"
        )));
    }
    let Some(mode) = spec.volume_mode.as_deref() else {
        return Err(format!("cannot get volumeMode for volume: {name}"));
    };
    if pod_volume.mounted && mode != "Filesystem" {
        return Err(format!(
            "volume {} has volumeMode {mode}, but is specified in volumeMounts",
            pod_volume.name
        ));
    }
    if pod_volume.device && mode != "Block" {
        return Err(format!(
            "volume {} has volumeMode {mode}, but is specified in volumeDevices",
            pod_volume.name
        ));
    }
    if pod_volume.device {
        return Err(format!(
            "volume {}: raw block volumes (volumeDevices) are not supported by keel-kubelet yet",
            pod_volume.name
        ));
    }
    let source = if let Some(host) = &spec.host_path {
        Source::HostPath { path: host.path.clone(), kind: host.type_.clone() }
    } else if let Some(local) = &spec.local {
        Source::Local { path: local.path.clone() }
    } else {
        Source::Unsupported
    };
    Ok(ClaimedVolume { name, source, read_only: pod_volume.read_only, node_affinity: spec.node_affinity })
}

/// upstream's WaitForAttachAndMount error for a pod some of whose volumes could not be
/// processed (`not_processed`: volume name and error) while `unmounted` are not mounted.
pub fn unable_to_mount(unmounted: &BTreeSet<String>, not_processed: &BTreeMap<String, String>) -> String {
    let errors: BTreeSet<&str> = not_processed.values().map(String::as_str).collect();
    format!(
        "Unable to attach or mount volumes: unmounted volumes=[{}], unattached volumes=[], failed to process volumes=[{}]: {}",
        unmounted.iter().map(String::as_str).collect::<Vec<_>>().join(" "),
        not_processed.keys().map(String::as_str).collect::<Vec<_>>().join(" "),
        errors.into_iter().collect::<Vec<_>>().join("; ")
    )
}

/// upstream's ValidatePathNoBacksteps.
pub fn no_backsteps(path: &str) -> Result<(), String> {
    match path.split('/').any(|part| part == "..") {
        true => Err("must not contain '..'".into()),
        false => Ok(()),
    }
}

/// One requirement of a node selector term, as upstream's nodeaffinity parses it.
fn label_requirement(expression: &NodeSelectorRequirement) -> Result<Requirement, String> {
    let operator = match expression.operator.as_str() {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::GreaterThan,
        "Lt" => Operator::LessThan,
        other => {
            return Err(format!(
                "operator: Unsupported value: {other:?}: supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\", \"Gt\", \"Lt\""
            ));
        }
    };
    let values = expression.values.clone().unwrap_or_default();
    Requirement::new(expression.key.clone(), operator, values).map_err(|e| e.message().to_owned())
}

/// upstream's CheckNodeAffinity as the kubelet calls it (before it mounts a PV): the node is
/// only its labels, so `matchFields` (metadata.name) never rule a term out.
pub fn check_node_affinity(
    affinity: Option<&VolumeNodeAffinity>,
    labels: &BTreeMap<String, String>,
) -> Result<(), String> {
    let Some(required) = affinity.and_then(|a| a.required.as_ref()) else { return Ok(()) };
    let mut errors = Vec::new();
    for term in &required.node_selector_terms {
        let expressions = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        if expressions.is_empty() && fields.is_empty() {
            continue;
        }
        let mut parsed = Vec::new();
        let mut term_errors = Vec::new();
        for expression in expressions {
            match label_requirement(expression) {
                Ok(requirement) => parsed.push(requirement),
                Err(error) => term_errors.push(error),
            }
        }
        for field in fields {
            match field.operator.as_str() {
                "In" | "NotIn" if field.values.as_ref().map_or(0, Vec::len) != 1 => {
                    term_errors.push("values: Invalid value: must have one element".to_owned());
                }
                "In" | "NotIn" => {}
                other => term_errors.push(format!(
                    "operator: Unsupported value: {other:?}: supported values: \"In\", \"NotIn\""
                )),
            }
        }
        if !term_errors.is_empty() {
            errors.extend(term_errors);
            continue;
        }
        if parsed.iter().all(|r| r.matches(labels)) {
            return Ok(());
        }
    }
    match errors.len() {
        0 => Err("no matching NodeSelectorTerms".into()),
        1 => Err(errors.remove(0)),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, HostPathVolumeSource, LocalVolumeSource, NodeSelector, NodeSelectorTerm, ObjectReference,
        PersistentVolumeClaimSpec, PersistentVolumeClaimStatus, PersistentVolumeClaimVolumeSource,
        PersistentVolumeSpec, Volume, VolumeDevice, VolumeMount,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn claim(phase: &str, volume_name: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data".into()),
                namespace: Some("shop".into()),
                uid: Some("claim-uid".into()),
                ..ObjectMeta::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                volume_name: volume_name.map(Into::into),
                ..PersistentVolumeClaimSpec::default()
            }),
            status: Some(PersistentVolumeClaimStatus { phase: Some(phase.into()), ..Default::default() }),
        }
    }

    fn pv(f: impl FnOnce(&mut PersistentVolumeSpec)) -> PersistentVolume {
        let mut spec = PersistentVolumeSpec {
            claim_ref: Some(ObjectReference {
                namespace: Some("shop".into()),
                name: Some("data".into()),
                uid: Some("claim-uid".into()),
                ..ObjectReference::default()
            }),
            volume_mode: Some("Filesystem".into()),
            local: Some(LocalVolumeSource { path: "/mnt/disks/a".into(), fs_type: None }),
            ..PersistentVolumeSpec::default()
        };
        f(&mut spec);
        PersistentVolume {
            metadata: ObjectMeta { name: Some("pv-a".into()), ..ObjectMeta::default() },
            spec: Some(spec),
            status: None,
        }
    }

    const MOUNTED: PodVolume<'static> = PodVolume {
        name: "vol",
        namespace: "shop",
        claim_name: "data",
        read_only: false,
        mounted: true,
        device: false,
    };

    fn resolved(
        claim: &Fetched<PersistentVolumeClaim>,
        volume: &Fetched<PersistentVolume>,
    ) -> Result<ClaimedVolume, String> {
        resolve(&MOUNTED, claim, Some(volume))
    }

    #[test]
    fn a_bound_claim_resolves_to_its_volume() {
        let claimed = resolved(&Ok(claim("Bound", Some("pv-a"))), &Ok(pv(|_| {}))).unwrap();
        assert_eq!(claimed.name, "pv-a");
        assert_eq!(claimed.source, Source::Local { path: "/mnt/disks/a".into() });
        assert!(!claimed.read_only);
        let read_only = PodVolume { read_only: true, ..MOUNTED };
        let host = pv(|s| {
            s.local = None;
            s.host_path = Some(HostPathVolumeSource { path: "/srv".into(), type_: Some("Directory".into()) });
        });
        let claimed = resolve(&read_only, &Ok(claim("Bound", Some("pv-a"))), Some(&Ok(host))).unwrap();
        assert_eq!(claimed.source, Source::HostPath { path: "/srv".into(), kind: Some("Directory".into()) });
        assert!(claimed.read_only);
        let other = pv(|s| s.local = None);
        assert_eq!(
            resolved(&Ok(claim("Bound", Some("pv-a"))), &Ok(other)).unwrap().source,
            Source::Unsupported
        );
    }

    #[test]
    fn claims_not_bound_to_their_volume_in_upstreams_words() {
        let error = |claim: Fetched<PersistentVolumeClaim>, volume: Fetched<PersistentVolume>| {
            resolved(&claim, &volume).unwrap_err()
        };
        let fine = || Ok(pv(|_| {}));
        assert_eq!(
            error(Ok(claim("Pending", Some("pv-a"))), fine()),
            "error processing PVC shop/data: PVC is not bound"
        );
        assert_eq!(
            error(Ok(claim("Bound", None)), fine()),
            "error processing PVC shop/data: PVC has empty pvc.Spec.VolumeName"
        );
        assert_eq!(
            error(Err("persistentvolumeclaims \"data\" not found".into()), fine()),
            "error processing PVC shop/data: failed to fetch PVC from API server: persistentvolumeclaims \"data\" not found"
        );
        let mut deleting = claim("Bound", Some("pv-a"));
        deleting.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(
            error(Ok(deleting.clone()), fine()),
            "error processing PVC shop/data: PVC is being deleted"
        );
        deleting.metadata.finalizers = Some(vec![PVC_PROTECTION_FINALIZER.into()]);
        assert!(resolved(&Ok(deleting), &fine()).is_ok());
        let bound = || Ok(claim("Bound", Some("pv-a")));
        assert_eq!(
            error(bound(), Err("persistentvolumes \"pv-a\" not found".into())),
            "error processing PVC shop/data: failed to fetch PV pv-a from API server: persistentvolumes \"pv-a\" not found"
        );
        assert_eq!(
            error(bound(), Ok(pv(|s| s.claim_ref = None))),
            "error processing PVC shop/data: found PV object pv-a but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        );
        let elsewhere = pv(|s| s.claim_ref.as_mut().unwrap().uid = Some("other".into()));
        assert_eq!(
            error(bound(), Ok(elsewhere)),
            "error processing PVC shop/data: found PV object pv-a but its pv.Spec.ClaimRef.UID other does not point to claim.UID claim-uid"
        );
        assert_eq!(
            error(bound(), Ok(pv(|s| s.volume_mode = None))),
            "cannot get volumeMode for volume: pv-a"
        );
    }

    #[test]
    fn block_volumes_are_refused() {
        let block = || Ok(pv(|s| s.volume_mode = Some("Block".into())));
        let bound = || Ok(claim("Bound", Some("pv-a")));
        assert_eq!(
            resolved(&bound(), &block()).unwrap_err(),
            "volume vol has volumeMode Block, but is specified in volumeMounts"
        );
        let device = PodVolume { mounted: false, device: true, ..MOUNTED };
        assert_eq!(
            resolve(&device, &bound(), Some(&Ok(pv(|_| {})))).unwrap_err(),
            "volume vol has volumeMode Filesystem, but is specified in volumeDevices"
        );
        assert!(
            resolve(&device, &bound(), Some(&block())).unwrap_err().contains("not supported by keel-kubelet")
        );
    }

    #[test]
    fn the_message_of_volumes_not_processed() {
        let unmounted = BTreeSet::from(["b".to_owned(), "a".to_owned()]);
        let not_processed = BTreeMap::from([
            ("b".to_owned(), "error processing PVC shop/y: PVC is not bound".to_owned()),
            ("a".to_owned(), "error processing PVC shop/x: PVC is not bound".to_owned()),
        ]);
        assert_eq!(
            unable_to_mount(&unmounted, &not_processed),
            "Unable to attach or mount volumes: unmounted volumes=[a b], unattached volumes=[], failed to process volumes=[a b]: error processing PVC shop/x: PVC is not bound; error processing PVC shop/y: PVC is not bound"
        );
    }

    #[test]
    fn used_volumes_and_their_claims() {
        let mount =
            |name: &str| VolumeMount { name: name.into(), mount_path: "/m".into(), ..Default::default() };
        let claimed = |name: &str, claim: &str| Volume {
            name: name.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                read_only: None,
            }),
            ..Volume::default()
        };
        let spec = PodSpec {
            init_containers: Some(vec![Container {
                name: "i".into(),
                volume_mounts: Some(vec![mount("a")]),
                ..Default::default()
            }]),
            containers: vec![Container {
                name: "c".into(),
                volume_devices: Some(vec![VolumeDevice { name: "b".into(), device_path: "/dev/b".into() }]),
                ..Default::default()
            }],
            volumes: Some(vec![claimed("a", "one"), claimed("b", "two"), claimed("unused", "three")]),
            ..PodSpec::default()
        };
        let (mounts, devices) = used_volumes(&spec);
        assert_eq!((mounts.len(), devices.len()), (1, 1));
        let names = claim_names(&Pod { spec: Some(spec), ..Pod::default() });
        assert_eq!(names.into_iter().collect::<Vec<_>>(), ["one", "two"]);
    }

    #[test]
    fn node_affinity_as_the_kubelet_checks_it() {
        let labels = BTreeMap::from([("kubernetes.io/hostname".to_owned(), "n1".to_owned())]);
        let affinity = |terms: Vec<NodeSelectorTerm>| VolumeNodeAffinity {
            required: Some(NodeSelector { node_selector_terms: terms }),
        };
        let expression = |key: &str, operator: &str, values: &[&str]| NodeSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
        };
        let term = |expressions: Vec<NodeSelectorRequirement>| NodeSelectorTerm {
            match_expressions: Some(expressions),
            match_fields: None,
        };
        assert_eq!(check_node_affinity(None, &labels), Ok(()));
        let here = affinity(vec![term(vec![expression("kubernetes.io/hostname", "In", &["n1"])])]);
        assert_eq!(check_node_affinity(Some(&here), &labels), Ok(()));
        let there = affinity(vec![term(vec![expression("kubernetes.io/hostname", "In", &["n2"])])]);
        assert_eq!(check_node_affinity(Some(&there), &labels).unwrap_err(), "no matching NodeSelectorTerms");
        // Terms are ORed; an empty term selects nothing; a node without a name passes matchFields.
        let either = affinity(vec![
            NodeSelectorTerm::default(),
            term(vec![expression("kubernetes.io/hostname", "In", &["n2"])]),
            NodeSelectorTerm {
                match_expressions: None,
                match_fields: Some(vec![expression("metadata.name", "In", &["n2"])]),
            },
        ]);
        assert_eq!(check_node_affinity(Some(&either), &labels), Ok(()));
        let nothing = affinity(vec![NodeSelectorTerm::default()]);
        assert!(check_node_affinity(Some(&nothing), &labels).is_err());
        let bad = affinity(vec![term(vec![expression("kubernetes.io/hostname", "Near", &["n1"])])]);
        assert!(
            check_node_affinity(Some(&bad), &labels).unwrap_err().contains("Unsupported value: \"Near\"")
        );
    }

    #[test]
    fn backsteps() {
        assert!(no_backsteps("/mnt/disks/a").is_ok());
        assert_eq!(no_backsteps("/mnt/../etc").unwrap_err(), "must not contain '..'");
    }
}
