//! The NodeRestriction admission plugin (upstream's plugin/pkg/admission/noderestriction, 1.34): of
//! what the Node authorizer lets a kubelet write, it may write only its own — its Node (no
//! taints, owner references or restricted labels changed), its Lease and CSINode, its
//! ResourceSlices, mirror pods bound to it that use nothing secret, the status and evictions of
//! pods bound to it, and the status of claims. Anyone but a node passes untouched.

use keel_api::status::{ApiError, GroupResource};
use serde_json::Value;

use crate::admission::MIRROR_POD_ANNOTATION;
use crate::auth::User;
use crate::node_authorizer::{NODE_LEASE_NAMESPACE, node_identity};

/// What a request does to an object (upstream's admission operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

impl Operation {
    fn upstream(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// One admission request (upstream's admission.Attributes): for a create the new object, for an
/// update both, for a delete (or an eviction, a create of pods/eviction) the current one as `old`.
#[derive(Debug)]
pub struct Attributes<'a> {
    pub user: &'a User,
    pub operation: Operation,
    pub group: &'a str,
    pub plural: &'a str,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub object: Option<&'a Value>,
    pub old: Option<&'a Value>,
    /// The requesting node's own Node as the server's cache holds it (upstream's nodes lister),
    /// for a mirror pod's owner reference: `Ok(None)` when there is none, `Err` when it could not
    /// be read. Looked up only for a node's pod create.
    pub own_node: Result<Option<Value>, String>,
}

/// Marks a refusal that is the requesting node's absence (a 404, as upstream's lister answers).
const NODE_NOT_FOUND: &str = "\u{0}node-not-found";

/// upstream's Plugin.Admit: `Ok` when the request may go on.
pub fn admit(a: &Attributes<'_>) -> Result<(), ApiError> {
    let Some(node) = node_identity(a.user) else { return Ok(()) };
    let refused = |reason: String| forbidden(a, reason);
    if node.is_empty() {
        return Err(refused(format!("could not determine node from user {:?}", a.user.name)));
    }
    match (a.group, a.plural) {
        ("", "pods") => match a.subresource {
            // upstream returns its nodes lister's NotFound as it is (404, resource `node`).
            "" => pod(node, a).map_err(|reason| {
                if reason == NODE_NOT_FOUND {
                    ApiError::NotFound { resource: GroupResource::new("", "node"), name: node.to_owned() }
                } else {
                    refused(reason)
                }
            }),
            "status" => pod_status(node, a).map_err(refused),
            "eviction" => bound_to(node, a.old).then_some(()).ok_or_else(|| {
                refused(format!("node {node} can only evict pods with spec.nodeName set to itself"))
            }),
            other => Err(refused(format!(
                "unexpected pod subresource {other:?}, only 'status' and 'eviction' are allowed"
            ))),
        },
        ("", "nodes") => own_node(node, a).map_err(refused),
        ("", "persistentvolumeclaims") if a.subresource != "status" => {
            Err(refused("may only update PVC status".into()))
        }
        ("", "persistentvolumeclaims") => pvc_status(node, a).map_err(refused),
        ("coordination.k8s.io", "leases") => {
            if a.namespace != NODE_LEASE_NAMESPACE {
                return Err(refused(format!(
                    "can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"
                )));
            }
            named_after(node, a, "can only access node lease with the same name as the requesting node")
                .map_err(refused)
        }
        ("storage.k8s.io", "csinodes") => {
            named_after(node, a, "can only access CSINode with the same name as the requesting node")
                .map_err(refused)
        }
        ("resource.k8s.io", "resourceslices") => {
            let slice = if a.operation == Operation::Create { a.object } else { a.old };
            let slice_node = slice.and_then(|s| s.pointer("/spec/nodeName")).and_then(Value::as_str);
            if slice_node == Some(node) {
                Ok(())
            } else if a.operation == Operation::Create {
                Err(refused(
                    "can only create ResourceSlice with the same NodeName as the requesting node".into(),
                ))
            } else {
                Err(refused(
                    "can only update or delete ResourceSlice with the same NodeName as the requesting node"
                        .into(),
                ))
            }
        }
        _ => Ok(()),
    }
}

/// upstream's admitServiceAccount: a node asks for a service account token only bound to a pod
/// bound to it (`pod` is the pod the request names, as it is). Returns the audience the node must
/// then show that pod uses ([`admit_token_audience`]), or `None` when the user is not a node.
pub fn admit_token_binding(
    user: &User,
    name: &str,
    request: &Value,
    pod: Option<&Value>,
) -> Result<Option<String>, ApiError> {
    let Some(node) = node_identity(user) else { return Ok(None) };
    let refused = |reason: String| token_refused(name, reason);
    if node.is_empty() {
        return Err(refused(format!("could not determine node from user {:?}", user.name)));
    }
    let reference = request.pointer("/spec/boundObjectRef").filter(|r| !r.is_null());
    let text = |pointer: &str| {
        reference.and_then(|r| r.pointer(pointer)).and_then(Value::as_str).unwrap_or_default()
    };
    if reference.is_none()
        || text("/apiVersion") != "v1"
        || text("/kind") != "Pod"
        || text("/name").is_empty()
    {
        return Err(refused("node requested token not bound to a pod".into()));
    }
    let uid = text("/uid");
    if uid.is_empty() {
        return Err(refused("node requested token with a pod binding without a uid".into()));
    }
    let Some(pod) = pod else {
        return Err(ApiError::not_found("", "pods", text("/name")));
    };
    if pod.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid) {
        return Err(refused(format!(
            "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
        )));
    }
    if !bound_to(node, Some(pod)) {
        return Err(refused("node requested token bound to a pod scheduled on a different node".into()));
    }
    // ServiceAccountNodeAudienceRestriction (beta, on since 1.33).
    let audiences: Vec<&str> = request
        .pointer("/spec/audiences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    match audiences.as_slice() {
        [] => Ok(Some(String::new())),
        [one] => Ok(Some((*one).to_owned())),
        _ => Err(refused("node may only request 0 or 1 audiences".into())),
    }
}

/// Where a pod's volumes name token audiences, in upstream's podReferencesAudience order.
#[derive(Debug, PartialEq, Eq)]
pub enum AudienceSource<'a> {
    /// A projected service account token's audience.
    Projected(&'a str),
    /// A CSI driver whose `tokenRequests` audiences count: an inline CSI volume's, or an in-tree
    /// volume's that CSI migration hands to that driver.
    Driver(&'a str),
    /// A claim (the volume's own, or a generic ephemeral volume's `<pod>-<volume>`) whose bound
    /// PersistentVolume's CSI driver counts.
    Claim(String),
}

/// The audience sources of `pod`'s volumes.
pub fn audience_sources(pod: &Value) -> Vec<AudienceSource<'_>> {
    let pod_name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let volumes = pod.pointer("/spec/volumes").and_then(Value::as_array).into_iter().flatten();
    let mut sources = Vec::new();
    for volume in volumes {
        let projected = volume.pointer("/projected/sources").and_then(Value::as_array);
        for token in projected.into_iter().flatten().filter_map(|s| s.get("serviceAccountToken")) {
            sources.push(AudienceSource::Projected(
                token.get("audience").and_then(Value::as_str).unwrap_or_default(),
            ));
        }
        let present = |field: &str| volume.get(field).is_some_and(|v| !v.is_null());
        if volume.pointer("/ephemeral/volumeClaimTemplate").is_some_and(|t| !t.is_null()) {
            let name = volume.get("name").and_then(Value::as_str).unwrap_or_default();
            sources.push(AudienceSource::Claim(format!("{pod_name}-{name}")));
        } else if present("persistentVolumeClaim") {
            let claim = volume.pointer("/persistentVolumeClaim/claimName").and_then(Value::as_str);
            sources.push(AudienceSource::Claim(claim.unwrap_or_default().to_owned()));
        } else if let Some(driver) = csi_driver(volume) {
            sources.push(AudienceSource::Driver(driver));
        }
    }
    sources
}

/// The CSI driver of a volume source: a Volume's or a PersistentVolume's `spec` — `csi.driver`,
/// or the driver CSI migration translates an in-tree source to (csi-translation-lib's
/// inTreePlugins; upstream translates the whole source, and only the driver's name matters here).
pub fn csi_driver(source: &Value) -> Option<&str> {
    const MIGRATED: [(&str, &str); 7] = [
        ("gcePersistentDisk", "pd.csi.storage.gke.io"),
        ("awsElasticBlockStore", "ebs.csi.aws.com"),
        ("cinder", "cinder.csi.openstack.org"),
        ("azureDisk", "disk.csi.azure.com"),
        ("azureFile", "file.csi.azure.com"),
        ("vsphereVolume", "csi.vsphere.vmware.com"),
        ("portworxVolume", "pxd.portworx.com"),
    ];
    if let Some(csi) = source.get("csi").filter(|c| !c.is_null()) {
        return Some(csi.get("driver").and_then(Value::as_str).unwrap_or_default());
    }
    MIGRATED
        .iter()
        .find(|(field, _)| source.get(*field).is_some_and(|v| !v.is_null()))
        .map(|(_, driver)| *driver)
}

/// The rest of upstream's validateNodeServiceAccountAudience: `found` says whether one of the
/// pod's [`AudienceSource`]s names `audience`, `errors` are the lookups that failed on the way
/// (a claim, volume or CSIDriver not found, in the lister's words). Not found, a node may still
/// ask when `may_request_audience` (RBAC's `request-serviceaccounts-token-audience` on the
/// audience) says so — but not when a lookup failed.
pub fn admit_token_audience(
    user: &User,
    name: &str,
    audience: &str,
    found: bool,
    errors: &[String],
    may_request_audience: impl Fn(&str) -> bool,
) -> Result<(), ApiError> {
    if found {
        return Ok(());
    }
    if !errors.is_empty() {
        return Err(token_refused(
            name,
            format!("error validating audience {audience:?}: {}", aggregate(errors)),
        ));
    }
    if may_request_audience(audience) {
        return Ok(());
    }
    Err(token_refused(
        name,
        format!(
            "audience {audience:?} not found in pod spec volume, {} is not authorized to request tokens for this audience",
            user.name
        ),
    ))
}

/// apimachinery's utilerrors.Aggregate message: one error as it is, several deduplicated in
/// brackets.
fn aggregate(errors: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for error in errors {
        if !seen.contains(&error.as_str()) {
            seen.push(error);
        }
    }
    match seen.as_slice() {
        [one] => (*one).to_owned(),
        many => format!("[{}]", many.join(", ")),
    }
}

fn token_refused(name: &str, reason: String) -> ApiError {
    ApiError::Forbidden {
        resource: GroupResource::new("", "serviceaccounts"),
        name: name.to_owned(),
        detail: reason,
    }
}

fn forbidden(a: &Attributes<'_>, reason: String) -> ApiError {
    ApiError::Forbidden {
        resource: GroupResource::new(a.group, a.plural),
        name: a.name.to_owned(),
        detail: reason,
    }
}

fn bound_to(node: &str, pod: Option<&Value>) -> bool {
    pod.and_then(|p| p.pointer("/spec/nodeName")).and_then(Value::as_str) == Some(node)
}

/// The object's name is the node's (a create is checked by the object's name, as upstream reads
/// it from the object).
fn named_after(node: &str, a: &Attributes<'_>, reason: &str) -> Result<(), String> {
    let name = match a.operation {
        Operation::Create => a.object.map(crate::objects::name).unwrap_or(a.name),
        _ => a.name,
    };
    if name == node { Ok(()) } else { Err(reason.to_owned()) }
}

/// upstream's admitPod: a node creates only mirror pods of its own, and deletes only its pods.
fn pod(node: &str, a: &Attributes<'_>) -> Result<(), String> {
    match a.operation {
        Operation::Create => mirror_pod(node, a.object.unwrap_or(&Value::Null), &a.own_node),
        Operation::Delete => {
            if bound_to(node, a.old) {
                Ok(())
            } else {
                Err(format!("node {node:?} can only delete pods with spec.nodeName set to itself"))
            }
        }
        Operation::Update => Err(format!(
            "unexpected operation {:?}, node {node:?} can only create and delete mirror pods",
            a.operation.upstream()
        )),
    }
}

/// upstream's admitPodCreate.
fn mirror_pod(node: &str, pod: &Value, own_node: &Result<Option<Value>, String>) -> Result<(), String> {
    if pod.pointer("/metadata/annotations").and_then(|a| a.get(MIRROR_POD_ANNOTATION)).is_none() {
        return Err(format!(
            "pod does not have {MIRROR_POD_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"
        ));
    }
    if !bound_to(node, Some(pod)) {
        return Err(format!("node {node:?} can only create pods with spec.nodeName set to itself"));
    }
    let owners =
        pod.pointer("/metadata/ownerReferences").and_then(Value::as_array).cloned().unwrap_or_default();
    match owners.as_slice() {
        [] => {}
        [owner] => {
            if owner["apiVersion"] != "v1" || owner["kind"] != "Node" || owner["name"] != node {
                return Err(format!(
                    "node {node:?} can only create pods with an owner reference set to itself"
                ));
            }
            if owner["controller"] != true {
                return Err(format!(
                    "node {node:?} can only create pods with a controller owner reference set to itself"
                ));
            }
            if owner["blockOwnerDeletion"] == true {
                return Err(format!("node {node:?} must not set blockOwnerDeletion on an owner reference"));
            }
            // The owner must be this node, not an earlier one of the same name.
            let found = match own_node {
                Ok(Some(found)) => found,
                Ok(None) => return Err(NODE_NOT_FOUND.to_owned()),
                Err(error) => return Err(format!("error looking up node {node} to verify uid: {error}")),
            };
            let (owner_uid, node_uid) = (
                owner["uid"].as_str().unwrap_or_default(),
                found.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default(),
            );
            if owner_uid != node_uid {
                // upstream's words, its order: "expected" is the owner's, "got" the node's.
                return Err(format!("node {node} UID mismatch: expected {owner_uid} got {node_uid}"));
            }
        }
        _ => {
            return Err(format!(
                "node {node:?} can only create pods with a single owner reference set to itself"
            ));
        }
    }
    // What a mirror pod may not use (upstream's checkMirrorPodForAPIReferences, in its order).
    let spec: k8s_openapi::api::core::v1::PodSpec =
        serde_json::from_value(pod["spec"].clone()).unwrap_or_default();
    let uses = |what: &str| format!("node {node:?} can not create pods that reference {what}");
    if spec.service_account_name.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(uses("a service account"));
    }
    if !crate::node_authorizer::graph::pod_secret_names(&spec).is_empty() {
        return Err(uses("secrets"));
    }
    if !crate::node_authorizer::graph::pod_configmap_names(&spec).is_empty() {
        return Err(uses("configmaps"));
    }
    let volumes = spec.volumes.iter().flatten();
    if volumes.clone().any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some()) {
        return Err(uses("persistentvolumeclaims"));
    }
    let projected = volumes.filter_map(|v| v.projected.as_ref()).flat_map(|p| p.sources.iter().flatten());
    if projected.clone().any(|s| s.cluster_trust_bundle.is_some()) {
        return Err(uses("clustertrustbundles"));
    }
    if spec.resource_claims.as_ref().is_some_and(|c| !c.is_empty()) {
        return Err(uses("resourceclaims"));
    }
    Ok(())
}

/// upstream's admitPVCStatus: a claim's status write changes only `status.capacity`,
/// `status.conditions` and the allocated resources (volume expansion's recovery, GA in 1.34);
/// resourceVersion and managedFields aside, the rest must stay as it is.
fn pvc_status(node: &str, a: &Attributes<'_>) -> Result<(), String> {
    if a.operation != Operation::Update {
        return Err(format!("unexpected operation {:?}", a.operation.upstream()));
    }
    let comparable = |claim: Option<&Value>| {
        let mut claim = claim.cloned().unwrap_or(Value::Null);
        if let Some(metadata) = claim.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.remove("resourceVersion");
            metadata.remove("managedFields");
        }
        if let Some(status) = claim.get_mut("status").and_then(Value::as_object_mut) {
            for field in ["capacity", "conditions", "allocatedResourceStatuses", "allocatedResources"] {
                status.remove(field);
            }
        }
        claim
    };
    let (old, new) = (comparable(a.old), comparable(a.object));
    if old == new {
        return Ok(());
    }
    // upstream prints cmp.Diff of the two claims after its message; here the fields that differ.
    Err(format!(
        "node {node:?} is not allowed to update fields other than status.capacity and status.conditions: {}",
        differing_fields(&old, &new, "").join(", ")
    ))
}

/// The JSON paths at which two values differ (objects compared key by key).
fn differing_fields(old: &Value, new: &Value, path: &str) -> Vec<String> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut keys: Vec<&String> = o.keys().chain(n.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .flat_map(|k| {
                    let (a, b) = (o.get(k).unwrap_or(&Value::Null), n.get(k).unwrap_or(&Value::Null));
                    differing_fields(a, b, &format!("{path}.{k}"))
                })
                .collect()
        }
        (a, b) if a == b => Vec::new(),
        _ => vec![path.trim_start_matches('.').to_owned()],
    }
}

/// upstream's admitPodStatus: only its own pods' status, labels and claim statuses left alone.
fn pod_status(node: &str, a: &Attributes<'_>) -> Result<(), String> {
    if a.operation != Operation::Update {
        return Err(format!("unexpected operation {:?}", a.operation.upstream()));
    }
    if !bound_to(node, a.old) {
        return Err(format!(
            "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
        ));
    }
    let field = |object: Option<&Value>, pointer: &str| object.and_then(|o| o.pointer(pointer)).cloned();
    if field(a.object, "/metadata/labels") != field(a.old, "/metadata/labels") {
        return Err(format!("node {node:?} cannot update labels through pod status"));
    }
    if field(a.object, "/status/resourceClaimStatuses") != field(a.old, "/status/resourceClaimStatuses") {
        return Err(format!("node {node:?} cannot update resource claim statues"));
    }
    if field(a.object, "/status/extendedResourceClaimStatus")
        != field(a.old, "/status/extendedResourceClaimStatus")
    {
        return Err(format!("node {node:?} cannot update extended resource claim status"));
    }
    Ok(())
}

/// upstream's admitNode.
fn own_node(node: &str, a: &Attributes<'_>) -> Result<(), String> {
    let requested = match a.operation {
        Operation::Create => a.object.map(crate::objects::name).unwrap_or(a.name),
        _ => a.name,
    };
    if requested != node {
        return Err(format!("node {node:?} is not allowed to modify node {requested:?}"));
    }
    let labels = |object: Option<&Value>| -> Vec<(String, String)> {
        let map = object.and_then(|o| o.pointer("/metadata/labels")).and_then(Value::as_object);
        map.into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect()
    };
    let field = |object: Option<&Value>, pointer: &str| object.and_then(|o| o.pointer(pointer)).cloned();
    match a.operation {
        Operation::Create => {
            if field(a.object, "/spec/configSource").is_some_and(|c| !c.is_null()) {
                return Err(format!(
                    "node {node:?} is not allowed to create pods with a non-nil configSource"
                ));
            }
            let forbidden = forbidden_labels(&modified_labels(&labels(a.object), &[]));
            if !forbidden.is_empty() {
                return Err(format!(
                    "node {node:?} is not allowed to set the following labels: {}",
                    forbidden.join(", ")
                ));
            }
        }
        Operation::Update => {
            let config_source = field(a.object, "/spec/configSource").filter(|c| !c.is_null());
            if config_source.is_some() && config_source != field(a.old, "/spec/configSource") {
                return Err(format!(
                    "node {node:?} is not allowed to update configSource to a new non-nil configSource"
                ));
            }
            let empty_as_none = |v: Option<Value>| v.filter(|v| v.as_array().is_none_or(|a| !a.is_empty()));
            if empty_as_none(field(a.object, "/spec/taints")) != empty_as_none(field(a.old, "/spec/taints")) {
                return Err(format!("node {node:?} is not allowed to modify taints"));
            }
            if empty_as_none(field(a.object, "/metadata/ownerReferences"))
                != empty_as_none(field(a.old, "/metadata/ownerReferences"))
            {
                return Err(format!("node {node:?} is not allowed to modify ownerReferences"));
            }
            let forbidden = forbidden_labels(&modified_labels(&labels(a.object), &labels(a.old)));
            if !forbidden.is_empty() {
                return Err(format!("is not allowed to modify labels: {}", forbidden.join(", ")));
            }
        }
        Operation::Delete => {}
    }
    Ok(())
}

/// Keys set, changed or removed between two label sets, sorted.
fn modified_labels(new: &[(String, String)], old: &[(String, String)]) -> Vec<String> {
    let mut modified: Vec<String> = new
        .iter()
        .filter(|(k, v)| !old.iter().any(|(ok, ov)| ok == k && ov == v))
        .chain(old.iter().filter(|(k, v)| !new.iter().any(|(nk, nv)| nk == k && nv == v)))
        .map(|(k, _)| k.clone())
        .collect();
    modified.sort();
    modified.dedup();
    modified
}

/// The labels a node may not set (upstream's getForbiddenLabels): node-restriction.kubernetes.io
/// ones, and kubernetes.io / k8s.io ones other than the kubelet's own.
fn forbidden_labels(modified: &[String]) -> Vec<String> {
    modified
        .iter()
        .filter(|key| {
            let namespace = key.split_once('/').map(|(ns, _)| ns).unwrap_or_default();
            in_namespace(namespace, "node-restriction.kubernetes.io")
                || (is_kubernetes_label(namespace) && !is_kubelet_label(key))
        })
        .cloned()
        .collect()
}

fn in_namespace(namespace: &str, domain: &str) -> bool {
    namespace == domain || namespace.strip_suffix(domain).is_some_and(|rest| rest.ends_with('.'))
}

fn is_kubernetes_label(namespace: &str) -> bool {
    in_namespace(namespace, "kubernetes.io") || in_namespace(namespace, "k8s.io")
}

/// upstream's kubeletapis.IsKubeletLabel: what a kubelet sets on its own Node.
fn is_kubelet_label(key: &str) -> bool {
    const LABELS: &[&str] = &[
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
    ];
    let namespace = key.split_once('/').map(|(ns, _)| ns).unwrap_or_default();
    LABELS.contains(&key)
        || in_namespace(namespace, "kubelet.kubernetes.io")
        || in_namespace(namespace, "node.kubernetes.io")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::node_authorizer::{NODE_USER_PREFIX, NODES_GROUP};

    fn node(name: &str) -> User {
        User::named(&format!("{NODE_USER_PREFIX}{name}"), &[NODES_GROUP])
    }

    fn attributes<'a>(
        user: &'a User,
        operation: Operation,
        (group, plural, subresource): (&'a str, &'a str, &'a str),
        name: &'a str,
        object: Option<&'a Value>,
        old: Option<&'a Value>,
    ) -> Attributes<'a> {
        Attributes {
            user,
            operation,
            group,
            plural,
            subresource,
            namespace: "ns",
            name,
            object,
            old,
            own_node: Ok(Some(json!({"metadata": {"name": "n1", "uid": "u"}}))),
        }
    }

    fn detail(result: Result<(), ApiError>) -> String {
        match result {
            Err(ApiError::Forbidden { detail, .. }) => detail,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_node_writes_only_its_own_node_and_no_restricted_label_or_taint() {
        let n1 = node("n1");
        let own = json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "example.com/x": "y"}}});
        assert!(admit(&attributes(&n1, Operation::Create, ("", "nodes", ""), "", Some(&own), None)).is_ok());
        let other = json!({"metadata": {"name": "n2"}});
        assert_eq!(
            detail(admit(&attributes(&n1, Operation::Create, ("", "nodes", ""), "", Some(&other), None))),
            "node \"n1\" is not allowed to modify node \"n2\""
        );
        let labelled = json!({"metadata": {"name": "n1", "labels": {
            "node-role.kubernetes.io/control-plane": "", "node-restriction.kubernetes.io/pool": "a",
            "node.kubernetes.io/exclude-from-external-load-balancers": ""}}});
        assert_eq!(
            detail(admit(&attributes(&n1, Operation::Create, ("", "nodes", ""), "", Some(&labelled), None))),
            "node \"n1\" is not allowed to set the following labels: node-restriction.kubernetes.io/pool, node-role.kubernetes.io/control-plane"
        );
        let tainted =
            json!({"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}});
        assert_eq!(
            detail(admit(&attributes(
                &n1,
                Operation::Update,
                ("", "nodes", ""),
                "n1",
                Some(&tainted),
                Some(&own)
            ))),
            "node \"n1\" is not allowed to modify taints"
        );
        let status = json!({"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "example.com/x": "y"}}, "status": {"phase": "Running"}});
        assert!(
            admit(&attributes(
                &n1,
                Operation::Update,
                ("", "nodes", "status"),
                "n1",
                Some(&status),
                Some(&own)
            ))
            .is_ok()
        );
        assert!(admit(&attributes(&n1, Operation::Delete, ("", "nodes", ""), "n2", None, None)).is_err());
    }

    #[test]
    fn a_node_creates_only_its_own_mirror_pods_using_nothing_secret() {
        let n1 = node("n1");
        let mirror = |extra: Value| {
            let mut pod = json!({"metadata": {"name": "etcd-n1", "annotations": {MIRROR_POD_ANNOTATION: "h"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "u", "controller": true}]},
                "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}});
            if let Some(volumes) = extra.get("volumes") {
                pod["spec"]["volumes"] = volumes.clone();
            }
            pod
        };
        let create =
            |pod: &Value| admit(&attributes(&n1, Operation::Create, ("", "pods", ""), "", Some(pod), None));
        assert!(create(&mirror(json!({}))).is_ok());
        let secret = mirror(json!({"volumes": [{"name": "s", "secret": {"secretName": "x"}}]}));
        assert_eq!(detail(create(&secret)), "node \"n1\" can not create pods that reference secrets");
        let mut plain = mirror(json!({}));
        plain["metadata"]["annotations"] = json!({});
        assert_eq!(
            detail(create(&plain)),
            "pod does not have \"kubernetes.io/config.mirror\" annotation, node \"n1\" can only create mirror pods"
        );
        let mut elsewhere = mirror(json!({}));
        elsewhere["spec"]["nodeName"] = json!("n2");
        assert_eq!(
            detail(create(&elsewhere)),
            "node \"n1\" can only create pods with spec.nodeName set to itself"
        );
        // The owner's uid is checked against the node's own: another's, a missing node (404, as
        // upstream's lister answers), a node that could not be read.
        let with_node = |own_node: Result<Option<Value>, String>| {
            let pod = mirror(json!({}));
            let mut a = attributes(&n1, Operation::Create, ("", "pods", ""), "etcd-n1", None, None);
            a.own_node = own_node;
            admit(&Attributes { object: Some(&pod), ..a }).map_err(|e| e.to_string())
        };
        assert_eq!(
            with_node(Ok(Some(json!({"metadata": {"uid": "v"}})))),
            Err("pods \"etcd-n1\" is forbidden: node n1 UID mismatch: expected u got v".into())
        );
        assert_eq!(with_node(Ok(None)), Err("node \"n1\" not found".into()));
        assert_eq!(
            with_node(Err("the node cache is not serving yet".into())),
            Err("pods \"etcd-n1\" is forbidden: error looking up node n1 to verify uid: the node cache is not serving yet".into())
        );
    }

    #[test]
    fn a_node_writes_only_capacity_and_conditions_of_a_claims_status() {
        let n1 = node("n1");
        let old = json!({"metadata": {"name": "data", "resourceVersion": "5", "labels": {"a": "b"}},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "1Gi"}}});
        let status = |new: &Value| {
            let a = attributes(
                &n1,
                Operation::Update,
                ("", "persistentvolumeclaims", "status"),
                "data",
                Some(new),
                Some(&old),
            );
            admit(&a)
        };
        let mut grown = old.clone();
        grown["metadata"]["resourceVersion"] = json!("");
        grown["status"]["capacity"]["storage"] = json!("2Gi");
        grown["status"]["conditions"] = json!([{"type": "Resizing", "status": "True"}]);
        grown["status"]["allocatedResources"] = json!({"storage": "2Gi"});
        assert!(status(&grown).is_ok());
        let mut relabelled = grown.clone();
        relabelled["metadata"]["labels"]["a"] = json!("c");
        relabelled["status"]["phase"] = json!("Lost");
        assert_eq!(
            detail(status(&relabelled)),
            "node \"n1\" is not allowed to update fields other than status.capacity and status.conditions: metadata.labels.a, status.phase"
        );
    }

    #[test]
    fn a_node_deletes_evicts_and_updates_the_status_of_only_its_pods() {
        let n1 = node("n1");
        let mine = json!({"metadata": {"name": "p", "labels": {"app": "a"}}, "spec": {"nodeName": "n1"}});
        let theirs = json!({"metadata": {"name": "q"}, "spec": {"nodeName": "n2"}});
        assert!(admit(&attributes(&n1, Operation::Delete, ("", "pods", ""), "p", None, Some(&mine))).is_ok());
        assert_eq!(
            detail(admit(&attributes(&n1, Operation::Delete, ("", "pods", ""), "q", None, Some(&theirs)))),
            "node \"n1\" can only delete pods with spec.nodeName set to itself"
        );
        assert!(
            admit(&attributes(&n1, Operation::Create, ("", "pods", "eviction"), "q", None, Some(&theirs)))
                .is_err()
        );
        let mut relabelled = mine.clone();
        relabelled["metadata"]["labels"]["app"] = json!("b");
        assert_eq!(
            detail(admit(&attributes(
                &n1,
                Operation::Update,
                ("", "pods", "status"),
                "p",
                Some(&relabelled),
                Some(&mine)
            ))),
            "node \"n1\" cannot update labels through pod status"
        );
        let mut running = mine.clone();
        running["status"] = json!({"phase": "Running"});
        assert!(
            admit(&attributes(
                &n1,
                Operation::Update,
                ("", "pods", "status"),
                "p",
                Some(&running),
                Some(&mine)
            ))
            .is_ok()
        );
        assert_eq!(
            detail(admit(&attributes(
                &n1,
                Operation::Update,
                ("", "pods", ""),
                "p",
                Some(&running),
                Some(&mine)
            ))),
            "unexpected operation \"UPDATE\", node \"n1\" can only create and delete mirror pods"
        );
    }

    #[test]
    fn leases_are_the_nodes_own_and_others_pass_untouched() {
        let n1 = node("n1");
        let mut lease =
            attributes(&n1, Operation::Update, ("coordination.k8s.io", "leases", ""), "n1", None, None);
        lease.namespace = NODE_LEASE_NAMESPACE;
        assert!(admit(&lease).is_ok());
        lease.name = "n2";
        assert!(admit(&lease).is_err());
        let alice = User::named("alice", &[]);
        let any = json!({"metadata": {"name": "x"}});
        assert!(
            admit(&attributes(&alice, Operation::Create, ("", "pods", ""), "", Some(&any), None)).is_ok()
        );
        let nameless = User::named("system:node:", &[NODES_GROUP]);
        assert_eq!(
            detail(admit(&attributes(
                &nameless,
                Operation::Create,
                ("", "configmaps", ""),
                "",
                Some(&any),
                None
            ))),
            "could not determine node from user \"system:node:\""
        );
    }

    #[test]
    fn audience_sources_follow_the_volumes() {
        let pod = json!({"metadata": {"name": "web"}, "spec": {"volumes": [
            {"name": "token", "projected": {"sources": [{"configMap": {"name": "c"}},
                {"serviceAccountToken": {"path": "t"}}, {"serviceAccountToken": {"path": "u", "audience": "vault"}}]}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "inline", "csi": {"driver": "csi.example.com"}},
            {"name": "disk", "gcePersistentDisk": {"pdName": "d"}},
            {"name": "scratch-dir", "emptyDir": {}},
        ]}});
        assert_eq!(
            audience_sources(&pod),
            [
                AudienceSource::Projected(""),
                AudienceSource::Projected("vault"),
                AudienceSource::Claim("web-scratch".into()),
                AudienceSource::Claim("data".into()),
                AudienceSource::Driver("csi.example.com"),
                AudienceSource::Driver("pd.csi.storage.gke.io"),
            ]
        );
        assert_eq!(csi_driver(&json!({"hostPath": {"path": "/x"}})), None);
        assert_eq!(csi_driver(&json!({"portworxVolume": {"volumeID": "p"}})), Some("pxd.portworx.com"));
    }

    #[test]
    fn a_failed_lookup_outweighs_an_rbac_grant() {
        let n1 = node("n1");
        let granted = |_: &str| true;
        assert!(admit_token_audience(&n1, "sa", "vault", true, &["lost".into()], |_| false).is_ok());
        assert!(admit_token_audience(&n1, "sa", "vault", false, &[], granted).is_ok());
        let errors = ["a".to_owned(), "b".to_owned(), "a".to_owned()];
        let refused = admit_token_audience(&n1, "sa", "vault", false, &errors, granted).unwrap_err();
        assert!(refused.to_string().ends_with("error validating audience \"vault\": [a, b]"), "{refused}");
        assert_eq!(aggregate(&["only".into()]), "only");
    }
}
