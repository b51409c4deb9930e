//! The admission plugins of kube-apiserver's default chain that apply here, run on create after
//! defaulting: ServiceAccount (a pod runs as its namespace's `default` service account unless it
//! names one, which must exist), DefaultTolerationSeconds, Priority (priorityClassName → priority,
//! the global default class otherwise), LimitRanger (container defaults from the namespace's
//! LimitRanges), DefaultStorageClass and TaintNodesByCondition (a new Node starts tainted
//! not-ready). NamespaceLifecycle is in the create handler.

use keel_api::resources::{self, Resource};
use keel_api::status::{ApiError, GroupResource};
use keel_store::RangeRequest;
use serde_json::{Value, json};

use crate::context::Context;
use crate::handlers::{Handlers, store_error};
use crate::node_authorizer::node_identity;
use crate::node_restriction::{self, AudienceSource, Operation};
use crate::objects;
use crate::request::ResourceRequest;

/// upstream's TaintNodesByCondition admission: a Node is created with the
/// `node.kubernetes.io/not-ready:NoSchedule` taint (unless it has it), so nothing is scheduled to
/// it before the node lifecycle controller sees it Ready and takes the taint off.
fn taint_not_ready(node: &mut Value) {
    let Some(node) = node.as_object_mut() else { return };
    let spec = node.entry("spec").or_insert_with(|| json!({}));
    if !spec.is_object() {
        return;
    }
    let taints = &mut spec["taints"];
    if !taints.is_array() {
        *taints = json!([]);
    }
    let Some(taints) = taints.as_array_mut() else { return };
    let present = taints.iter().any(|t| {
        t.get("key").and_then(Value::as_str) == Some(NOT_READY_TAINT)
            && t.get("effect").and_then(Value::as_str) == Some("NoSchedule")
    });
    if !present {
        taints.push(json!({"key": NOT_READY_TAINT, "effect": "NoSchedule"}));
    }
}

/// The taint of a Node not (yet) Ready.
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

/// The priority classes every cluster has (created at start, as kube-apiserver does).
pub const SYSTEM_PRIORITY_CLASSES: [(&str, i64, &str); 2] = [
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

fn forbidden(resource: &Resource, name: &str, detail: String) -> ApiError {
    ApiError::Forbidden {
        resource: GroupResource::new(resource.group, resource.plural),
        name: name.to_owned(),
        detail,
    }
}

impl Handlers {
    async fn read(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        let Some(resource) = resources::find(group, "v1", plural) else { return Ok(None) };
        let kv = self.store.get(&objects::key(resource, namespace, name)).await.map_err(store_error)?;
        kv.map(|kv| objects::from_storage(&kv.value, kv.mod_revision)).transpose()
    }

    async fn read_all(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<Value>, ApiError> {
        let Some(resource) = resources::find(group, "v1", plural) else { return Ok(Vec::new()) };
        let prefix = crate::handlers::collection_prefix(resource, namespace);
        let listed = self.store.range(RangeRequest::prefix(prefix)).await.map_err(store_error)?;
        listed.kvs.iter().map(|kv| objects::from_storage(&kv.value, kv.mod_revision)).collect()
    }

    /// The validating admission of a write about to be stored (after mutation and validation):
    /// NodeRestriction, then RBAC's escalation checks (upstream runs those in the RBAC storage's
    /// strategy). `old` is the object as it is, for an update.
    pub(crate) fn validate_write(
        &self,
        ctx: &Context,
        request: &ResourceRequest,
        old: Option<&Value>,
        new: &Value,
    ) -> Result<(), ApiError> {
        node_restriction::admit(&node_restriction::Attributes {
            user: &ctx.user,
            operation: if old.is_some() { Operation::Update } else { Operation::Create },
            group: request.resource.group,
            plural: request.resource.plural,
            subresource: request.subresource.as_deref().unwrap_or_default(),
            namespace: request.namespace.as_deref().unwrap_or_default(),
            name: objects::name(new),
            object: Some(new),
            old,
            own_node: self.own_node(ctx, request, old.is_none()),
        })?;
        crate::certificates::admit(&self.authorizer, &ctx.user, request, old, new)?;
        self.check_escalation(ctx, request, new)
    }

    /// NodeRestriction on a delete or an eviction (a create of pods/eviction), which it decides
    /// by the object as it is now. One that does not exist is the handler's to answer.
    pub(crate) async fn admit_removal(
        &self,
        ctx: &Context,
        request: &ResourceRequest,
        name: &str,
    ) -> Result<(), ApiError> {
        if node_identity(&ctx.user).is_none() {
            return Ok(());
        }
        let namespace = request.namespace.as_deref();
        let key = objects::key(request.resource, namespace, name);
        let Some(kv) = self.store.get(&key).await.map_err(store_error)? else { return Ok(()) };
        let current = objects::from_storage(&kv.value, kv.mod_revision)?;
        let subresource = request.subresource.as_deref().unwrap_or_default();
        node_restriction::admit(&node_restriction::Attributes {
            user: &ctx.user,
            operation: if subresource == "eviction" { Operation::Create } else { Operation::Delete },
            group: request.resource.group,
            plural: request.resource.plural,
            subresource,
            namespace: namespace.unwrap_or_default(),
            name,
            object: None,
            old: Some(&current),
            own_node: Ok(None),
        })
    }

    /// NodeRestriction on one item of a DELETE of a collection. upstream admits each item with
    /// the collection's attributes — the item as the old object, but no name — so where it looks
    /// an object up by name it finds none: a node's pod deletes all fail NotFound (which
    /// DeleteCollection passes over, so the pods stay), and what must be named after the node
    /// (its Node, Lease, CSINode) is refused.
    pub(crate) fn admit_collection_item(
        &self,
        ctx: &Context,
        request: &ResourceRequest,
        item: &Value,
    ) -> Result<(), ApiError> {
        if node_identity(&ctx.user).is_none() {
            return Ok(());
        }
        let (group, plural) = (request.resource.group, request.resource.plural);
        if (group, plural) == ("", "pods") && request.subresource.is_none() {
            return Err(ApiError::not_found("", "pods", ""));
        }
        node_restriction::admit(&node_restriction::Attributes {
            user: &ctx.user,
            operation: Operation::Delete,
            group,
            plural,
            subresource: request.subresource.as_deref().unwrap_or_default(),
            namespace: request.namespace.as_deref().unwrap_or_default(),
            name: "",
            object: None,
            old: Some(item),
            own_node: Ok(None),
        })
    }

    /// A node's own Node from the watch cache, for NodeRestriction's check of a mirror pod's owner
    /// (upstream reads its nodes lister); only for a node creating a pod.
    fn own_node(
        &self,
        ctx: &Context,
        request: &ResourceRequest,
        create: bool,
    ) -> Result<Option<Value>, String> {
        let Some(node) = node_identity(&ctx.user) else { return Ok(None) };
        let pod_create = create
            && request.resource.group.is_empty()
            && request.resource.plural == "pods"
            && request.subresource.is_none();
        let Some(nodes) = resources::find("", "v1", "nodes").filter(|_| pod_create) else { return Ok(None) };
        let key = objects::key(nodes, None, node);
        match self.cache.of(nodes).and_then(|cache| cache.get(&key)) {
            Some(Some(entry)) => {
                objects::from_storage(&entry.value, entry.revision).map(Some).map_err(|e| e.to_string())
            }
            Some(None) => Ok(None),
            None => Err("the node cache is not serving yet".into()),
        }
    }

    /// NodeRestriction on a TokenRequest (`serviceaccounts/<name>/token`): for a node, the pod it
    /// binds the token to as it is, then whether one of that pod's volumes names the audience —
    /// a projected token, or a CSI driver's `tokenRequests`, inline or through a claim's volume.
    pub(crate) async fn admit_token_request(
        &self,
        ctx: &Context,
        namespace: &str,
        name: &str,
        request: &Value,
    ) -> Result<(), ApiError> {
        if node_identity(&ctx.user).is_none() {
            return Ok(());
        }
        let reference = request.pointer("/spec/boundObjectRef");
        let pod_name = reference.and_then(|r| r.get("name")).and_then(Value::as_str).unwrap_or_default();
        let is_pod = reference.and_then(|r| r.get("kind")).and_then(Value::as_str) == Some("Pod");
        let pod = if is_pod && !pod_name.is_empty() {
            self.read("", "pods", Some(namespace), pod_name).await?
        } else {
            None
        };
        let Some(audience) = node_restriction::admit_token_binding(&ctx.user, name, request, pod.as_ref())?
        else {
            return Ok(());
        };
        let Some(pod) = pod else { return Ok(()) };
        // upstream's podReferencesAudience: the first source naming the audience ends the walk;
        // the lookups that failed before it count only when none does.
        let (mut found, mut errors) = (false, Vec::new());
        for source in node_restriction::audience_sources(&pod) {
            let driver = match source {
                AudienceSource::Projected(named) => {
                    found = named == audience;
                    if found {
                        break;
                    }
                    continue;
                }
                AudienceSource::Driver(driver) => driver.to_owned(),
                AudienceSource::Claim(claim) => match self.claim_csi_driver(namespace, &claim).await? {
                    Ok(Some(driver)) => driver,
                    Ok(None) => continue,
                    Err(error) => {
                        errors.push(error);
                        continue;
                    }
                },
            };
            let Some(driver) = self.read("storage.k8s.io", "csidrivers", None, &driver).await? else {
                errors.push(format!("csidriver.storage.k8s.io {driver:?} not found"));
                continue;
            };
            let requests = driver.pointer("/spec/tokenRequests").and_then(Value::as_array);
            found = requests
                .into_iter()
                .flatten()
                .any(|r| r.get("audience").and_then(Value::as_str).unwrap_or_default() == audience);
            if found {
                break;
            }
        }
        node_restriction::admit_token_audience(&ctx.user, name, &audience, found, &errors, |audience| {
            let info = crate::request::RequestInfo {
                is_resource_request: true,
                verb: "request-serviceaccounts-token-audience".into(),
                api_version: "v1".into(),
                namespace: namespace.to_owned(),
                resource: audience.to_owned(),
                name: name.to_owned(),
                ..crate::request::RequestInfo::default()
            };
            self.authorizer.allows(&ctx.user, &info)
        })
    }

    /// The CSI driver of the PersistentVolume a claim is bound to (upstream's getCSIFromPVC):
    /// `Ok(None)` when that volume is neither CSI nor migrated to CSI, `Err` with the lister's
    /// words when the claim or its volume is not there.
    async fn claim_csi_driver(
        &self,
        namespace: &str,
        claim: &str,
    ) -> Result<Result<Option<String>, String>, ApiError> {
        let Some(claim) = self.read("", "persistentvolumeclaims", Some(namespace), claim).await? else {
            return Ok(Err(format!("persistentvolumeclaim {claim:?} not found")));
        };
        let volume = claim.pointer("/spec/volumeName").and_then(Value::as_str).unwrap_or_default();
        let found = match volume {
            "" => None,
            volume => self.read("", "persistentvolumes", None, volume).await?,
        };
        let Some(found) = found else {
            return Ok(Err(format!("persistentvolume {volume:?} not found")));
        };
        let spec = found.get("spec").unwrap_or(&Value::Null);
        Ok(Ok(node_restriction::csi_driver(spec).map(str::to_owned)))
    }

    /// Runs the admission chain on an object about to be created.
    pub async fn admit_create(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        object: &mut Value,
    ) -> Result<(), ApiError> {
        match (resource.group, resource.plural) {
            ("", "pods") => {
                let namespace = namespace.unwrap_or("default");
                self.admit_service_account(resource, namespace, object).await?;
                default_toleration_seconds(object);
                self.admit_priority(resource, object).await?;
                self.admit_limit_ranges(namespace, object).await?;
            }
            ("", "persistentvolumeclaims") => self.admit_default_storage_class(object).await?,
            ("", "nodes") => taint_not_ready(object),
            _ => {}
        }
        Ok(())
    }

    /// upstream's ServiceAccount admission plugin: a pod runs as a service account that exists
    /// (`default` unless it names one) and, unless it or its account opts out, gets the account's
    /// token, the cluster's CA and its namespace mounted at
    /// /var/run/secrets/kubernetes.io/serviceaccount in every container (the `kube-api-access-*`
    /// projected volume), and the account's image pull secrets when it names none. A mirror pod
    /// (a kubelet's static pod) may use no service account, secret or token.
    async fn admit_service_account(
        &self,
        resource: &Resource,
        namespace: &str,
        pod: &mut Value,
    ) -> Result<(), ApiError> {
        let name = objects::name(pod).to_owned();
        if pod.pointer("/metadata/annotations").and_then(|a| a.get(MIRROR_POD_ANNOTATION)).is_some() {
            return mirror_pod_references(pod).map_err(|reason| forbidden(resource, &name, reason.into()));
        }
        let account = pod
            .pointer("/spec/serviceAccountName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("default")
            .to_owned();
        let Some(service_account) = self.read("", "serviceaccounts", Some(namespace), &account).await? else {
            return Err(forbidden(
                resource,
                &name,
                format!(
                    "error looking up service account {namespace}/{account}: serviceaccount {account:?} not found"
                ),
            ));
        };
        pod["spec"]["serviceAccountName"] = account.clone().into();
        pod["spec"]["serviceAccount"] = account.into();
        let automount = pod
            .pointer("/spec/automountServiceAccountToken")
            .or_else(|| service_account.get("automountServiceAccountToken"))
            .and_then(Value::as_bool)
            .unwrap_or(true);
        if automount {
            mount_service_account_token(pod);
        }
        let pull_secrets = pod.pointer("/spec/imagePullSecrets").and_then(Value::as_array);
        if pull_secrets.is_none_or(Vec::is_empty)
            && let Some(theirs) = service_account.get("imagePullSecrets").and_then(Value::as_array)
            && !theirs.is_empty()
        {
            let names: Vec<Value> = theirs.iter().map(|r| json!({"name": r["name"]})).collect();
            pod["spec"]["imagePullSecrets"] = Value::Array(names);
        }
        Ok(())
    }

    async fn admit_priority(&self, resource: &Resource, pod: &mut Value) -> Result<(), ApiError> {
        let name = objects::name(pod).to_owned();
        let class = match pod
            .pointer("/spec/priorityClassName")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
        {
            Some(class_name) => {
                let class = self.read("scheduling.k8s.io", "priorityclasses", None, class_name).await?;
                Some(class.ok_or_else(|| {
                    forbidden(resource, &name, format!("no PriorityClass with name {class_name} was found"))
                })?)
            }
            None => self
                .read_all("scheduling.k8s.io", "priorityclasses", None)
                .await?
                .into_iter()
                .find(|c| c.get("globalDefault").and_then(Value::as_bool) == Some(true)),
        };
        let priority = class.as_ref().and_then(|c| c.get("value")).and_then(Value::as_i64).unwrap_or(0);
        if let Some(asked) = pod.pointer("/spec/priority").and_then(Value::as_i64)
            && asked != priority
        {
            return Err(forbidden(resource, &name, "the integer value of priority must not be provided in pod spec; priority admission controller computed it from the given PriorityClass name".into()));
        }
        pod["spec"]["priority"] = priority.into();
        if let Some(class) = class {
            pod["spec"]["priorityClassName"] = class["metadata"]["name"].clone();
            let preemption = class.get("preemptionPolicy").cloned().unwrap_or(json!("PreemptLowerPriority"));
            pod["spec"]["preemptionPolicy"] = preemption;
        } else if pod.pointer("/spec/preemptionPolicy").is_none() {
            pod["spec"]["preemptionPolicy"] = "PreemptLowerPriority".into();
        }
        Ok(())
    }

    async fn admit_limit_ranges(&self, namespace: &str, pod: &mut Value) -> Result<(), ApiError> {
        let ranges = self.read_all("", "limitranges", Some(namespace)).await?;
        for range in ranges {
            for limit in range.pointer("/spec/limits").and_then(Value::as_array).into_iter().flatten() {
                if limit.get("type").and_then(Value::as_str) != Some("Container") {
                    continue;
                }
                for field in ["containers", "initContainers"] {
                    let Some(containers) =
                        pod.pointer_mut(&format!("/spec/{field}")).and_then(Value::as_array_mut)
                    else {
                        continue;
                    };
                    for container in containers {
                        for (kind, source) in [("limits", "default"), ("requests", "defaultRequest")] {
                            let Some(defaults) = limit.get(source).and_then(Value::as_object) else {
                                continue;
                            };
                            for (resource, quantity) in defaults {
                                if container.pointer(&format!("/resources/{kind}/{resource}")).is_none() {
                                    container["resources"][kind][resource] = quantity.clone();
                                }
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    async fn admit_default_storage_class(&self, claim: &mut Value) -> Result<(), ApiError> {
        if claim.pointer("/spec/storageClassName").is_some() {
            return Ok(());
        }
        let classes = self.read_all("storage.k8s.io", "storageclasses", None).await?;
        let default = classes.into_iter().find(|c| {
            c.pointer("/metadata/annotations/storageclass.kubernetes.io~1is-default-class")
                .and_then(Value::as_str)
                == Some("true")
        });
        if let Some(class) = default {
            claim["spec"]["storageClassName"] = class["metadata"]["name"].clone();
        }
        Ok(())
    }
}

/// DefaultTolerationSeconds: a pod tolerates a not-ready or unreachable node for 300 s unless it
/// says otherwise.
fn default_toleration_seconds(pod: &mut Value) {
    let tolerations = pod.pointer("/spec/tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut tolerations = tolerations;
    for key in ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"] {
        let present = tolerations.iter().any(|t| {
            t.get("key").and_then(Value::as_str) == Some(key)
                && t.get("effect").and_then(Value::as_str).is_none_or(|e| e == "NoExecute")
        });
        if !present {
            tolerations.push(
                json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}),
            );
        }
    }
    pod["spec"]["tolerations"] = Value::Array(tolerations);
}

/// The annotation a kubelet puts on the mirror pods of its static pods.
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Where the service account token volume is mounted (upstream's DefaultAPITokenMountPath).
pub const SERVICE_ACCOUNT_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The prefix of its volume's name (upstream's ServiceAccountVolumeName).
const SERVICE_ACCOUNT_VOLUME_PREFIX: &str = "kube-api-access-";

/// upstream's mountServiceAccountToken: the token volume (an existing `kube-api-access-*` one, else
/// a new one) mounted in every init and regular container that has nothing at the mount path yet.
fn mount_service_account_token(pod: &mut Value) {
    let existing = pod.pointer("/spec/volumes").and_then(Value::as_array).and_then(|volumes| {
        volumes
            .iter()
            .filter_map(|v| v["name"].as_str())
            .find(|n| n.starts_with(SERVICE_ACCOUNT_VOLUME_PREFIX))
            .map(str::to_owned)
    });
    let volume_name = existing.clone().unwrap_or_else(|| {
        let random = uuid::Uuid::new_v4().as_u64_pair().0;
        format!("{SERVICE_ACCOUNT_VOLUME_PREFIX}{}", objects::generated_suffix(random))
    });
    let mount = json!({"name": volume_name, "readOnly": true, "mountPath": SERVICE_ACCOUNT_MOUNT_PATH});
    let mut mounted = false;
    for list in ["initContainers", "containers"] {
        let Some(containers) = pod.pointer_mut(&format!("/spec/{list}")).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers {
            let mounts =
                container.as_object_mut().map(|c| c.entry("volumeMounts").or_insert_with(|| json!([])));
            let Some(mounts) = mounts.and_then(Value::as_array_mut) else { continue };
            if !mounts.iter().any(|m| m["mountPath"] == SERVICE_ACCOUNT_MOUNT_PATH) {
                mounts.push(mount.clone());
                mounted = true;
            }
        }
    }
    if existing.is_none() && mounted {
        let volume = json!({"name": volume_name, "projected": {
        "defaultMode": 0o644,
        "sources": [
            // upstream's WarnOnlyBoundTokenExpirationSeconds: an hour and seven seconds.
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [
                {"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}
            ]}}
        ]}});
        if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
            let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
            if let Some(volumes) = volumes.as_array_mut() {
                volumes.push(volume);
            }
        }
    }
}

/// upstream's ServiceAccount Validate for a mirror pod: no service account, secret or token.
fn mirror_pod_references(pod: &Value) -> Result<(), &'static str> {
    if pod.pointer("/spec/serviceAccountName").and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
        return Err("a mirror pod may not reference service accounts");
    }
    let spec: k8s_openapi::api::core::v1::PodSpec =
        serde_json::from_value(pod["spec"].clone()).unwrap_or_default();
    if !crate::node_authorizer::graph::pod_secret_names(&spec).is_empty() {
        return Err("a mirror pod may not reference secrets");
    }
    let projections = spec.volumes.iter().flatten().filter_map(|v| v.projected.as_ref());
    if projections.flat_map(|p| p.sources.iter().flatten()).any(|s| s.service_account_token.is_some()) {
        return Err("a mirror pod may not use ServiceAccountToken volume projections");
    }
    Ok(())
}
