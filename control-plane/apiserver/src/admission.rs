//! The admission plugins of kube-apiserver's default chain that apply here, run on create after
//! defaulting: ServiceAccount (a pod runs as its namespace's `default` service account unless it
//! names one, which must exist), DefaultTolerationSeconds, Priority (priorityClassName → priority,
//! the global default class otherwise), LimitRanger (container defaults from the namespace's
//! LimitRanges) and DefaultStorageClass. NamespaceLifecycle is in the create handler.

use keel_api::resources::{self, Resource};
use keel_api::status::{ApiError, GroupResource};
use keel_store::RangeRequest;
use serde_json::{Value, json};

use crate::handlers::{Handlers, store_error};
use crate::objects;

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
            _ => {}
        }
        Ok(())
    }

    async fn admit_service_account(
        &self,
        resource: &Resource,
        namespace: &str,
        pod: &mut Value,
    ) -> Result<(), ApiError> {
        let name = objects::name(pod).to_owned();
        let account = pod
            .pointer("/spec/serviceAccountName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or("default")
            .to_owned();
        if self.read("", "serviceaccounts", Some(namespace), &account).await?.is_none() {
            return Err(forbidden(
                resource,
                &name,
                format!(
                    "error looking up service account {namespace}/{account}: serviceaccount {account:?} not found"
                ),
            ));
        }
        pod["spec"]["serviceAccountName"] = account.clone().into();
        pod["spec"]["serviceAccount"] = account.into();
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
