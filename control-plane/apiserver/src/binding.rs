//! pods/binding: the scheduler's write, as kube-apiserver's BindingREST does it. The Binding is
//! validated (its name is the pod's, its target a node by name), its uid and resourceVersion are
//! preconditions on the pod, and the pod — unassigned, not being deleted, without scheduling gates —
//! gets the node, the Binding's annotations and the condition `PodScheduled=True` in one guarded
//! write (which replaces any `PodScheduled=False` the scheduler reported before).

use keel_api::status::{ApiError, FieldError, GroupResource};
use serde_json::{Value, json};

use crate::handlers::{Handlers, Reply};
use crate::request::ResourceRequest;

/// Why a pod cannot be bound (upstream's words; answered as 409 on `pods/binding`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error("pod {0} is being deleted, cannot be assigned to a host")]
    Deleting(String),
    #[error("pod {pod} is already assigned to node {node:?}")]
    Assigned { pod: String, node: String },
    #[error("pod {0} has non-empty .spec.schedulingGates")]
    Gated(String),
    #[error("Precondition failed: UID in precondition: {expected}, UID in object meta: {actual}")]
    Uid { expected: String, actual: String },
}

/// ValidatePodBinding and BindingREST's name check: the Binding of pod `name`, its target node.
fn check_binding(name: &str, binding: &Value) -> Result<String, ApiError> {
    let given = binding.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    if given != name {
        return Err(ApiError::BadRequest("name in URL does not match name in Binding object".into()));
    }
    let mut causes = Vec::new();
    let kind = binding.pointer("/target/kind").and_then(Value::as_str).unwrap_or_default();
    if !kind.is_empty() && kind != "Node" {
        causes.push(FieldError::not_supported("target.kind", &json!(kind), &["Node", "<empty>"]));
    }
    let target = binding.pointer("/target/name").and_then(Value::as_str).unwrap_or_default();
    if target.is_empty() {
        causes.push(FieldError::required("target.name", ""));
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid("", "Binding", name, causes));
    }
    Ok(target.to_owned())
}

/// The pod assigned to `node` (setPodNodeAndMetadata): nodeName, the Binding's annotations over the
/// pod's, and `PodScheduled=True` (a new transition time unless it was True already; reason and
/// message cleared, as upstream's UpdatePodCondition replaces the condition).
pub fn assign(pod: &Value, binding: &Value, node: &str, now: &str) -> Result<Value, BindError> {
    let name = pod.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
    if let Some(uid) = binding.pointer("/metadata/uid").and_then(Value::as_str).filter(|u| !u.is_empty()) {
        let actual = pod.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
        if uid != actual {
            return Err(BindError::Uid { expected: uid.to_owned(), actual: actual.to_owned() });
        }
    }
    if pod.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
        return Err(BindError::Deleting(name));
    }
    if let Some(assigned) = pod.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
        return Err(BindError::Assigned { pod: name, node: assigned.to_owned() });
    }
    if pod.pointer("/spec/schedulingGates").and_then(Value::as_array).is_some_and(|g| !g.is_empty()) {
        return Err(BindError::Gated(name));
    }
    let mut bound = pod.clone();
    bound["spec"]["nodeName"] = node.into();
    if let Some(annotations) = binding.pointer("/metadata/annotations").and_then(Value::as_object)
        && !annotations.is_empty()
    {
        let metadata = &mut bound["metadata"];
        if !metadata.get("annotations").is_some_and(Value::is_object) {
            metadata["annotations"] = json!({});
        }
        for (key, value) in annotations {
            metadata["annotations"][key] = value.clone();
        }
    }
    let mut conditions =
        pod.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let old = conditions.iter().position(|c| c["type"] == "PodScheduled");
    let since = match old.map(|i| &conditions[i]) {
        Some(old) if old["status"] == "True" => old.get("lastTransitionTime").cloned().unwrap_or(Value::Null),
        _ => now.into(),
    };
    let condition =
        json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": since});
    match old {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
    if !bound.get("status").is_some_and(Value::is_object) {
        bound["status"] = json!({});
    }
    bound["status"]["conditions"] = Value::Array(conditions);
    Ok(bound)
}

impl Handlers {
    /// POST pods/binding: assigns an unassigned pod to a node (the scheduler's write). The
    /// Binding's resourceVersion is a precondition on the pod's.
    pub async fn bind(
        &self,
        request: &ResourceRequest,
        name: &str,
        binding: &Value,
        dry_run: bool,
    ) -> Result<Reply, ApiError> {
        let node = check_binding(name, binding)?;
        let precondition = match binding.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
            Some(rv) if !rv.is_empty() => Some(crate::handlers::parse_revision(rv)?),
            _ => None,
        };
        let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
        self.guarded_update(request, name, dry_run, |pod| {
            let bound = assign(pod, binding, &node, &now).map_err(|error| {
                let resource = match error {
                    // A failed precondition names the pods, as upstream's storage error does.
                    BindError::Uid { .. } => "pods",
                    _ => "pods/binding",
                };
                ApiError::Conflict {
                    resource: GroupResource::new("", resource),
                    name: name.to_owned(),
                    detail: error.to_string(),
                }
            })?;
            Ok((bound, precondition))
        })
        .await?;
        Ok(Reply::Json(
            201,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Value {
        json!({"metadata": {"name": "p", "uid": "u-1", "annotations": {"keep": "1"}},
               "spec": {"containers": [{"name": "c", "image": "i"}]},
               "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                   "reason": "Unschedulable", "message": "0/1 nodes are available", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    }

    fn binding(extra: Value) -> Value {
        let mut binding = json!({"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}});
        if let (Some(into), Value::Object(extra)) = (binding["metadata"].as_object_mut(), extra) {
            into.extend(extra);
        }
        binding
    }

    #[test]
    fn binding_assigns_the_node_and_marks_the_pod_scheduled() {
        let bound =
            assign(&pod(), &binding(json!({"annotations": {"added": "2"}})), "n1", "2026-02-02T00:00:00Z")
                .unwrap();
        assert_eq!(bound["spec"]["nodeName"], "n1");
        assert_eq!(bound["metadata"]["annotations"], json!({"keep": "1", "added": "2"}));
        assert_eq!(
            bound["status"]["conditions"],
            json!([{"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": "2026-02-02T00:00:00Z"}]),
            "the Unschedulable condition is replaced, its reason and message cleared"
        );
        let mut fresh = pod();
        fresh["status"] = json!({"phase": "Pending"});
        let bound = assign(&fresh, &binding(json!({})), "n1", "t").unwrap();
        assert_eq!(bound["status"]["conditions"][0]["type"], "PodScheduled");
        assert_eq!(bound["status"]["phase"], "Pending");
    }

    #[test]
    fn binding_refusals() {
        let mut assigned = pod();
        assigned["spec"]["nodeName"] = json!("n0");
        assert_eq!(
            assign(&assigned, &binding(json!({})), "n1", "t").unwrap_err().to_string(),
            "pod p is already assigned to node \"n0\""
        );
        let mut gated = pod();
        gated["spec"]["schedulingGates"] = json!([{"name": "example.com/wait"}]);
        assert_eq!(assign(&gated, &binding(json!({})), "n1", "t").unwrap_err(), BindError::Gated("p".into()));
        let mut deleting = pod();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(
            assign(&deleting, &binding(json!({})), "n1", "t").unwrap_err(),
            BindError::Deleting("p".into())
        );
        assert_eq!(
            assign(&pod(), &binding(json!({"uid": "u-2"})), "n1", "t").unwrap_err().to_string(),
            "Precondition failed: UID in precondition: u-2, UID in object meta: u-1"
        );
        assert!(assign(&pod(), &binding(json!({"uid": "u-1"})), "n1", "t").is_ok());

        let error = check_binding("q", &binding(json!({}))).unwrap_err();
        assert_eq!(
            (error.code(), error.to_string().as_str()),
            (400, "name in URL does not match name in Binding object")
        );
        let error =
            check_binding("p", &json!({"metadata": {"name": "p"}, "target": {"kind": "Pod"}})).unwrap_err();
        assert_eq!(error.code(), 422);
        assert_eq!(
            error.to_string(),
            "Binding \"p\" is invalid: [target.kind: Unsupported value: \"Pod\": supported values: \"Node\", \"<empty>\", target.name: Required value]"
        );
        assert_eq!(check_binding("p", &binding(json!({}))).unwrap(), "n1");
    }
}
