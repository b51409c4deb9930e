//! pods/eviction: a delete that respects the pod's PodDisruptionBudget, as kube-apiserver's
//! EvictionREST does (what `kubectl drain` calls).
//!
//! A pod that already stopped counting (Succeeded, Failed, being deleted) or never counted
//! (Pending — deleted only at the version judged) is deleted at once, retried on a conflict unless
//! the caller pinned a resourceVersion. Otherwise the one budget whose selector matches the pod
//! decides: none — delete; more than one — 500, as upstream; a budget its controller has not caught
//! up with, or with no disruption left — 429 TooManyRequests with a DisruptionBudget cause; else
//! `status.disruptionsAllowed` is decremented and the pod recorded in `status.disruptedPods` (one
//! guarded write, retried on conflict) before the pod is deleted. An unready pod does not use up the
//! budget when the budget says so (`unhealthyPodEvictionPolicy: AlwaysAllow`) or when enough pods
//! are healthy without it; it is then deleted only if still at the version that was judged (429 if
//! not). Every evicted pod first gets the DisruptionTarget condition. Computing the budget's status
//! is the disruption controller's work (keel-controller-manager).

use keel_api::labels::LabelSelector;
use keel_api::resources;
use keel_api::status::{ApiError, GroupResource};
use keel_store::{Outcome, RangeRequest};
use serde_json::{Value, json};

use crate::handlers::{Handlers, Query, Reply, store_error};
use crate::objects;
use crate::request::ResourceRequest;
use crate::writes::DeleteOptions;

/// Attempts at decrementing a budget that keeps changing under the eviction.
const RETRIES: usize = 5;
/// upstream's MaxDisruptedPodSize: evictions the disruption controller has not confirmed yet.
const MAX_DISRUPTED_PODS: usize = 2000;

/// upstream's createTooManyRequestsError and the "needs N healthy pods" refusal.
fn too_many_requests(retry_after_seconds: i32, cause: String) -> ApiError {
    ApiError::TooManyRequests {
        message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        retry_after_seconds,
        causes: vec![("DisruptionBudget".into(), cause)],
    }
}

fn still_processing(budget: &str) -> ApiError {
    too_many_requests(10, format!("The disruption budget {budget} is still being processed by the server."))
}

fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| conditions.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
}

fn int(object: &Value, pointer: &str) -> i64 {
    object.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

impl Handlers {
    /// POST pods/NAME/eviction with a policy/v1 (or v1beta1) Eviction.
    pub async fn evict(
        &self,
        request: &ResourceRequest,
        name: &str,
        eviction: &Value,
        query: &Query,
    ) -> Result<Reply, ApiError> {
        if eviction.pointer("/metadata/name").and_then(Value::as_str) != Some(name) {
            return Err(ApiError::BadRequest("name in URL does not match name in Eviction object".into()));
        }
        let options = DeleteOptions::from(eviction.get("deleteOptions"), query);
        // A resourceVersion the caller pinned is never retried past.
        let caller_rv = options.precondition_resource_version.is_some();
        let namespace = request.namespace.as_deref().unwrap_or_default();
        let key = objects::key(request.resource, Some(namespace), name);
        let mut attempt = 0;
        let pod = loop {
            attempt += 1;
            let kv = self.store.get(&key).await.map_err(store_error)?;
            let kv = kv.ok_or_else(|| ApiError::not_found("", "pods", name))?;
            let pod = objects::from_storage(&kv.value, kv.mod_revision)?;
            let phase = pod.pointer("/status/phase").and_then(Value::as_str).unwrap_or_default();
            let going = pod.pointer("/metadata/deletionTimestamp").is_some();
            if !going && !matches!(phase, "Succeeded" | "Failed" | "Pending") {
                break pod;
            }
            // It already caused its disruption, or never counted. A pending pod is deleted only as
            // it was judged (it could become ready meanwhile).
            let mut pinned = options.clone();
            if phase == "Pending" && !going && !caller_rv {
                pinned.precondition_resource_version = Some(kv.mod_revision.to_string());
            }
            match self.delete_evicted(request, name, &pinned).await {
                Err(ApiError::Conflict { .. }) if !caller_rv && attempt < RETRIES => {}
                done => return done,
            }
        };
        let budgets = self.budgets_of(namespace, &pod).await?;
        let budget = match budgets.as_slice() {
            [] => return self.delete_evicted(request, name, &options).await,
            [one] => one.clone(),
            _ => {
                return Err(ApiError::Internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
                        .into(),
                ));
            }
        };
        let budget_name =
            budget.0.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        if !is_ready(&pod) {
            let always = budget.0.pointer("/spec/unhealthyPodEvictionPolicy").and_then(Value::as_str)
                == Some("AlwaysAllow");
            let desired = int(&budget.0, "/status/desiredHealthy");
            let healthy_enough = int(&budget.0, "/status/currentHealthy") >= desired && desired > 0;
            if always || healthy_enough {
                // Deleted only if it did not become ready since.
                let mut pinned = options.clone();
                if !caller_rv {
                    pinned.precondition_resource_version =
                        pod.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_owned);
                }
                return match self.delete_evicted(request, name, &pinned).await {
                    Err(ApiError::Conflict { .. }) if !caller_rv => Err(still_processing(&budget_name)),
                    done => done,
                };
            }
        }
        self.take_disruption(namespace, name, budget, options.dry_run).await?;
        self.delete_evicted(request, name, &options).await
    }

    /// The namespace's budgets whose selector matches the pod (a missing or empty selector matches
    /// nothing here, as in upstream's eviction), with their store revisions.
    async fn budgets_of(&self, namespace: &str, pod: &Value) -> Result<Vec<(Value, i64)>, ApiError> {
        let budgets = resources::find("policy", "v1", "poddisruptionbudgets")
            .ok_or_else(|| ApiError::Internal("poddisruptionbudgets are not declared".into()))?;
        let prefix = format!("{}{namespace}/", budgets.key_prefix());
        let listed = self.store.range(RangeRequest::prefix(prefix)).await.map_err(store_error)?;
        let labels = pod
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|map| map.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
            .unwrap_or_default();
        let mut matching = Vec::new();
        for kv in listed.kvs {
            let budget = objects::from_storage(&kv.value, kv.mod_revision)?;
            let Some(selector) = budget.pointer("/spec/selector") else { continue };
            let Ok(selector) = serde_json::from_value(selector.clone()) else { continue };
            let Ok(selector) = LabelSelector::from_k8s(&selector) else { continue };
            if !selector.is_empty() && selector.matches(&labels) {
                matching.push((budget, kv.mod_revision));
            }
        }
        Ok(matching)
    }

    /// upstream's checkAndDecrement, retried on conflict with the budget read again.
    async fn take_disruption(
        &self,
        namespace: &str,
        pod: &str,
        (mut budget, mut revision): (Value, i64),
        dry_run: bool,
    ) -> Result<(), ApiError> {
        let name = budget.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
        let key = format!("/registry/poddisruptionbudgets/{namespace}/{name}");
        for _attempt in 0..RETRIES {
            if int(&budget, "/status/observedGeneration") < int(&budget, "/metadata/generation") {
                return Err(still_processing(&name));
            }
            let allowed = int(&budget, "/status/disruptionsAllowed");
            let forbidden = |detail: &str| ApiError::Forbidden {
                resource: GroupResource::new("policy", "poddisruptionbudget"),
                name: name.clone(),
                detail: detail.to_owned(),
            };
            if allowed < 0 {
                return Err(forbidden("pdb disruptions allowed is negative"));
            }
            let disrupted = budget
                .pointer("/status/disruptedPods")
                .and_then(Value::as_object)
                .map_or(0, serde_json::Map::len);
            if disrupted > MAX_DISRUPTED_PODS {
                return Err(forbidden(
                    "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
                ));
            }
            if allowed == 0 {
                return Err(too_many_requests(
                    0,
                    format!(
                        "The disruption budget {name} needs {} healthy pods and has {} currently",
                        int(&budget, "/status/desiredHealthy"),
                        int(&budget, "/status/currentHealthy")
                    ),
                ));
            }
            if dry_run {
                return Ok(());
            }
            let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            let status = &mut budget["status"];
            status["disruptionsAllowed"] = (allowed - 1).into();
            if allowed == 1 {
                set_disruption_allowed_false(status, &now);
            }
            if !status["disruptedPods"].is_object() {
                status["disruptedPods"] = json!({});
            }
            status["disruptedPods"][pod] = now.into();
            let stored = objects::for_storage(&budget)?;
            match self.store.update(&key, stored.into(), revision, 0).await.map_err(store_error)? {
                Outcome::Written { .. } => return Ok(()),
                Outcome::Conflict { current: Some(current) } => {
                    budget = objects::from_storage(&current.value, current.mod_revision)?;
                    revision = current.mod_revision;
                }
                Outcome::Conflict { current: None } => {
                    return Err(ApiError::not_found("policy", "poddisruptionbudgets", &name));
                }
            }
        }
        Err(still_processing(&name))
    }

    /// upstream's addConditionAndDeletePod: the pod gets the DisruptionTarget condition (what a
    /// Job's podFailurePolicy matches on) — checked against the delete's preconditions — and is
    /// then deleted, the pinned resourceVersion moved to the condition's write. Answers as upstream:
    /// 201 with a Success Status.
    async fn delete_evicted(
        &self,
        request: &ResourceRequest,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Reply, ApiError> {
        let mut options = options.clone();
        if !options.dry_run {
            let (uid, version) =
                (options.precondition_uid.clone(), options.precondition_resource_version.clone());
            let conflict = |detail: String| ApiError::Conflict {
                resource: GroupResource::new("", "pods"),
                name: name.to_owned(),
                detail,
            };
            let updated = self
                .guarded_update(request, name, false, |pod| {
                    let current = |field: &str| {
                        pod.pointer(&format!("/metadata/{field}")).and_then(Value::as_str).unwrap_or_default().to_owned()
                    };
                    if let Some(uid) = &uid
                        && *uid != current("uid")
                    {
                        return Err(conflict(format!(
                            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                            current("uid")
                        )));
                    }
                    if let Some(version) = &version
                        && *version != current("resourceVersion")
                    {
                        return Err(conflict(format!(
                            "the ResourceVersion in the precondition ({version}) does not match the ResourceVersion in record ({}). The object might have been modified",
                            current("resourceVersion")
                        )));
                    }
                    let mut pod = pod.clone();
                    set_disruption_target(&mut pod["status"]);
                    Ok((pod, None))
                })
                .await?;
            if options.precondition_resource_version.is_some() {
                options.precondition_resource_version =
                    updated.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_owned);
            }
        }
        self.delete(request, name, &options).await?;
        Ok(Reply::Json(
            201,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        ))
    }
}

/// upstream's UpdatePodCondition with DisruptionTarget=True, reason EvictionByEvictionAPI: the
/// transition time moves only when the status does.
fn set_disruption_target(status: &mut Value) {
    let now = jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let condition = json!({
        "type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
        "message": "Eviction API: evicting", "lastTransitionTime": now,
    });
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    if let Some(conditions) = status["conditions"].as_array_mut() {
        match conditions.iter_mut().find(|c| c["type"] == "DisruptionTarget") {
            Some(existing) => {
                let time = if existing["status"] == "True" {
                    existing["lastTransitionTime"].clone()
                } else {
                    now.into()
                };
                *existing = condition;
                existing["lastTransitionTime"] = time;
            }
            None => conditions.push(condition),
        }
    }
}

/// upstream's UpdateDisruptionAllowedCondition once no disruption is left: DisruptionAllowed False,
/// reason InsufficientPods.
fn set_disruption_allowed_false(status: &mut Value, now: &str) {
    let condition = json!({
        "type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods", "message": "",
        "lastTransitionTime": now, "observedGeneration": status.get("observedGeneration").cloned().unwrap_or(json!(0)),
    });
    if !status["conditions"].is_array() {
        status["conditions"] = json!([]);
    }
    if let Some(conditions) = status["conditions"].as_array_mut() {
        match conditions.iter_mut().find(|c| c["type"] == "DisruptionAllowed") {
            Some(existing) if existing["status"] == "False" => {}
            Some(existing) => *existing = condition,
            None => conditions.push(condition),
        }
    }
}
