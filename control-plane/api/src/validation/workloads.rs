//! Workloads: apps/v1 Deployments, ReplicaSets, StatefulSets and DaemonSets, core/v1
//! ReplicationControllers, batch/v1 Jobs and CronJobs (upstream's apps, core and batch validation,
//! and the selector immutability the apps strategies add on update).

use serde_json::Value;

use super::{
    FieldError, child, forbidden, immutable, invalid, invalid_str, meta, nonnegative, not_supported, pod,
    required, semantic_eq, str_at,
};

const NOT_MATCHING: &str = "`selector` does not match template `labels`";

fn spec(object: &Value) -> &Value {
    object.get("spec").unwrap_or(&Value::Null)
}

fn template_labels(template: &Value) -> Option<&Value> {
    template.pointer("/metadata/labels")
}

/// The selector as given: typed objects carry an absent one as `{}`, which upstream's decoding
/// leaves nil.
fn given_selector(spec: &Value) -> Option<&Value> {
    spec.get("selector").filter(|s| !s.is_null() && s.as_object().is_none_or(|m| !m.is_empty()))
}

/// A LabelSelector as Go's encoding/json shows it (empty fields omitted).
fn shown(selector: &Value) -> Value {
    match selector {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !super::semantic_eq(Some(v), None))
                .map(|(k, v)| (k.clone(), shown(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(shown).collect()),
        other => other.clone(),
    }
}

/// A required, non-empty selector that matches the template (Deployments, ReplicaSets,
/// StatefulSets). An absent selector selects nothing, so it matches no template either.
fn selector_and_template(spec: &Value, path: &str, empty_message: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let selector_path = child(path, "selector");
    let selector = given_selector(spec);
    match selector {
        None => errors.push(required(&selector_path, "")),
        Some(selector) => {
            errors.extend(meta::label_selector(selector, &selector_path));
            if meta::selector_is_empty(selector) {
                errors.push(invalid(&selector_path, &shown(selector), empty_message));
            }
        }
    }
    let template = spec.get("template").unwrap_or(&Value::Null);
    let template_path = child(path, "template");
    let matches = match selector {
        None => Some(false),
        Some(s) if meta::selector_is_empty(s) => Some(true),
        Some(s) => meta::selector_matches(s, template_labels(template)),
    };
    if matches == Some(false) {
        errors.push(labels_mismatch(template, &template_path));
    }
    errors
}

/// upstream's ValidateImmutableField for a selector.
fn immutable_selector(old: &Value, new: &Value) -> Vec<FieldError> {
    let (before, after) = (given_selector(spec(old)), given_selector(spec(new)));
    if super::semantic_eq(before, after) {
        return Vec::new();
    }
    vec![invalid("spec.selector", &after.map_or(Value::Null, shown), "field is immutable")]
}

fn labels_mismatch(template: &Value, template_path: &str) -> FieldError {
    let labels = template_labels(template).cloned().unwrap_or(Value::Null);
    invalid(&child(&child(template_path, "metadata"), "labels"), &labels, NOT_MATCHING)
}

/// ValidatePodTemplateSpecForReplicaSet's checks of the pod: restartPolicy Always, no deadline.
fn always_restarting(template: &Value, template_path: &str, kind: &str) -> Vec<FieldError> {
    let mut errors = pod::template(template, template_path);
    let pod_spec = template.get("spec").unwrap_or(&Value::Null);
    let spec_path = child(template_path, "spec");
    let policy = pod::restart_policy(pod_spec);
    if policy != "Always" {
        errors.push(not_supported(&child(&spec_path, "restartPolicy"), policy, &["Always"]));
    }
    if pod_spec.get("activeDeadlineSeconds").is_some_and(|v| !v.is_null()) {
        errors.push(forbidden(
            &child(&spec_path, "activeDeadlineSeconds"),
            &format!("activeDeadlineSeconds in {kind} is not Supported"),
        ));
    }
    errors
}

/// ValidateDeployment.
pub(super) fn deployment(object: &Value) -> Vec<FieldError> {
    let spec = spec(object);
    let mut errors = nonnegative(spec.get("replicas"), "spec.replicas");
    errors.extend(selector_and_template(spec, "spec", "empty selector is invalid for deployment"));
    errors.extend(always_restarting(
        spec.get("template").unwrap_or(&Value::Null),
        "spec.template",
        "ReplicaSet",
    ));
    if let Some(strategy) = spec.get("strategy").filter(|s| !s.is_null()) {
        match str_at(strategy, "type") {
            None | Some("RollingUpdate") => {}
            Some("Recreate") => {
                if strategy.get("rollingUpdate").is_some_and(|r| !r.is_null()) {
                    errors.push(forbidden(
                        "spec.strategy.rollingUpdate",
                        "may not be specified when strategy `type` is 'Recreate'",
                    ));
                }
            }
            Some(_) => errors.push(super::FieldError::not_supported(
                "spec.strategy",
                strategy,
                &["Recreate", "RollingUpdate"],
            )),
        }
    }
    errors.extend(nonnegative(spec.get("minReadySeconds"), "spec.minReadySeconds"));
    errors.extend(nonnegative(spec.get("revisionHistoryLimit"), "spec.revisionHistoryLimit"));
    if let Some(deadline) = spec.get("progressDeadlineSeconds").and_then(Value::as_i64) {
        errors.extend(nonnegative(spec.get("progressDeadlineSeconds"), "spec.progressDeadlineSeconds"));
        if deadline <= spec.get("minReadySeconds").and_then(Value::as_i64).unwrap_or(0) {
            errors.push(invalid(
                "spec.progressDeadlineSeconds",
                &deadline.into(),
                "must be greater than minReadySeconds",
            ));
        }
    }
    errors
}

/// ValidateDeploymentUpdate, and the selector apps/v1 keeps.
pub(super) fn deployment_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = deployment(new);
    errors.extend(immutable_selector(old, new));
    errors
}

/// ValidateReplicaSet.
pub(super) fn replica_set(object: &Value) -> Vec<FieldError> {
    let spec = spec(object);
    let mut errors = nonnegative(spec.get("replicas"), "spec.replicas");
    errors.extend(nonnegative(spec.get("minReadySeconds"), "spec.minReadySeconds"));
    // Upstream's words, "deployment" included.
    errors.extend(selector_and_template(spec, "spec", "empty selector is invalid for deployment"));
    errors.extend(always_restarting(
        spec.get("template").unwrap_or(&Value::Null),
        "spec.template",
        "ReplicaSet",
    ));
    errors
}

pub(super) fn replica_set_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = replica_set(new);
    errors.extend(immutable_selector(old, new));
    errors
}

/// ValidateReplicationControllerSpec: a non-empty label-map selector (mutable, unlike apps/v1's)
/// matching the template's labels, replicas given and non-negative, a pod template that always
/// restarts.
pub(super) fn replication_controller(object: &Value) -> Vec<FieldError> {
    let spec = spec(object);
    let mut errors = nonnegative(spec.get("minReadySeconds"), "spec.minReadySeconds");
    let selector = spec.get("selector").and_then(Value::as_object).filter(|m| !m.is_empty());
    if selector.is_none() {
        errors.push(required("spec.selector", ""));
    }
    match spec.get("replicas") {
        None | Some(Value::Null) => errors.push(required("spec.replicas", "")),
        replicas => errors.extend(nonnegative(replicas, "spec.replicas")),
    }
    match spec.get("template").filter(|t| !t.is_null()) {
        None => errors.push(required("spec.template", "")),
        Some(template) => {
            let labels = template_labels(template).and_then(Value::as_object);
            let label = |k: &str| labels.and_then(|l| l.get(k));
            if let Some(selector) = selector
                && !selector.iter().all(|(k, v)| label(k) == Some(v))
            {
                errors.push(labels_mismatch(template, "spec.template"));
            }
            errors.extend(always_restarting(template, "spec.template", "ReplicationController"));
        }
    }
    errors
}

/// ValidateDaemonSet.
pub(super) fn daemon_set(object: &Value) -> Vec<FieldError> {
    let spec = spec(object);
    let mut errors = Vec::new();
    let selector = given_selector(spec);
    if let Some(selector) = selector {
        errors.extend(meta::label_selector(selector, "spec.selector"));
    }
    let template = spec.get("template").unwrap_or(&Value::Null);
    // An absent selector selects nothing, so it cannot match.
    let matches = selector.map_or(Some(false), |s| meta::selector_matches(s, template_labels(template)));
    if matches == Some(false) {
        errors.push(labels_mismatch(template, "spec.template"));
    }
    if let Some(selector) = selector.filter(|s| meta::selector_is_empty(s)) {
        errors.push(invalid("spec.selector", &shown(selector), "empty selector is invalid for daemonset"));
    }
    errors.extend(always_restarting(template, "spec.template", "DaemonSet"));
    errors.extend(nonnegative(spec.get("minReadySeconds"), "spec.minReadySeconds"));
    if let Some(strategy) = spec.get("updateStrategy").filter(|s| !s.is_null())
        && let Some(kind) = str_at(strategy, "type")
        && !["RollingUpdate", "OnDelete"].contains(&kind)
    {
        errors.push(super::FieldError::not_supported(
            "spec.updateStrategy",
            strategy,
            &["RollingUpdate", "OnDelete"],
        ));
    }
    errors.extend(nonnegative(spec.get("revisionHistoryLimit"), "spec.revisionHistoryLimit"));
    errors
}

pub(super) fn daemon_set_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = daemon_set(new);
    errors.extend(immutable_selector(old, new));
    errors
}

/// ValidateStatefulSet (whose pod template upstream checks only for labels and annotations).
pub(super) fn stateful_set(object: &Value) -> Vec<FieldError> {
    let spec = spec(object);
    let mut errors = Vec::new();
    if let Some(policy) = str_at(spec, "podManagementPolicy")
        && !["OrderedReady", "Parallel"].contains(&policy)
    {
        errors.push(invalid_str("spec.podManagementPolicy", policy, "must be 'OrderedReady' or 'Parallel'"));
    }
    if let Some(strategy) = spec.get("updateStrategy").filter(|s| !s.is_null()) {
        let rolling = strategy.get("rollingUpdate").filter(|r| !r.is_null());
        match str_at(strategy, "type") {
            None | Some("RollingUpdate") => {
                if let Some(rolling) = rolling {
                    errors.extend(nonnegative(
                        rolling.get("partition"),
                        "spec.updateStrategy.rollingUpdate.partition",
                    ));
                }
            }
            Some("OnDelete") => {
                if let Some(rolling) = rolling {
                    errors.push(invalid(
                        "spec.updateStrategy.rollingUpdate",
                        rolling,
                        "only allowed for updateStrategy 'RollingUpdate'",
                    ));
                }
            }
            Some(_) => {
                errors.push(invalid(
                    "spec.updateStrategy",
                    strategy,
                    "must be 'RollingUpdate' or 'OnDelete'",
                ));
            }
        }
    }
    errors.extend(nonnegative(spec.get("replicas"), "spec.replicas"));
    errors.extend(nonnegative(spec.get("minReadySeconds"), "spec.minReadySeconds"));
    errors.extend(nonnegative(spec.pointer("/ordinals/start"), "spec.ordinals.start"));
    errors.extend(selector_and_template(spec, "spec", "empty selector is invalid for statefulset"));
    let template = spec.get("template").unwrap_or(&Value::Null);
    let metadata = template.get("metadata").unwrap_or(&Value::Null);
    errors.extend(meta::labels(metadata.get("labels"), "spec.template.labels"));
    errors.extend(meta::annotations(metadata.get("annotations"), "spec.template.annotations"));
    let pod_spec = template.get("spec").unwrap_or(&Value::Null);
    let policy = pod::restart_policy(pod_spec);
    if policy != "Always" {
        errors.push(not_supported("spec.template.spec.restartPolicy", policy, &["Always"]));
    }
    if pod_spec.get("activeDeadlineSeconds").is_some_and(|v| !v.is_null()) {
        errors.push(forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            "activeDeadlineSeconds in StatefulSet is not Supported",
        ));
    }
    errors
}

/// ValidateStatefulSetUpdate: only some of the spec may change.
pub(super) fn stateful_set_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = stateful_set(new);
    let mut kept = spec(new).clone();
    if let Some(map) = kept.as_object_mut() {
        for field in [
            "replicas",
            "ordinals",
            "template",
            "updateStrategy",
            "revisionHistoryLimit",
            "persistentVolumeClaimRetentionPolicy",
            "minReadySeconds",
        ] {
            match spec(old).get(field) {
                Some(value) => map.insert(field.into(), value.clone()),
                None => map.remove(field),
            };
        }
    }
    if !semantic_eq(Some(&kept), Some(spec(old))) {
        errors.push(forbidden(
            "spec",
            "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
        ));
    }
    errors
}

/// validateJobSpec at `path`: counts, the pod template, a restartPolicy of OnFailure or Never.
fn job_spec(spec: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for field in
        ["parallelism", "completions", "activeDeadlineSeconds", "backoffLimit", "ttlSecondsAfterFinished"]
    {
        errors.extend(nonnegative(spec.get(field), &child(path, field)));
    }
    let template_path = child(path, "template");
    let template = spec.get("template").unwrap_or(&Value::Null);
    errors.extend(pod::template(template, &template_path));
    let policy = pod::restart_policy(template.get("spec").unwrap_or(&Value::Null));
    if !["OnFailure", "Never"].contains(&policy) {
        errors.push(not_supported(
            &child(&child(&template_path, "spec"), "restartPolicy"),
            policy,
            &["OnFailure", "Never"],
        ));
    }
    errors
}

/// ValidateJob. The selector is upstream's to generate unless `manualSelector` is set, so only a
/// manual one is required; any selector given must match the template.
pub(super) fn job(object: &Value) -> Vec<FieldError> {
    let spec = spec(object);
    let mut errors = job_spec(spec, "spec");
    let manual = spec.get("manualSelector").and_then(Value::as_bool) == Some(true);
    match given_selector(spec) {
        None if manual => errors.push(required("spec.selector", "")),
        None => {}
        Some(selector) => {
            errors.extend(meta::label_selector(selector, "spec.selector"));
            let template = spec.get("template").unwrap_or(&Value::Null);
            if meta::selector_matches(selector, template_labels(template)) == Some(false) {
                errors.push(labels_mismatch(template, "spec.template"));
            }
        }
    }
    errors
}

/// ValidateJobUpdate: selector and pod template fixed once created.
pub(super) fn job_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = job(new);
    errors.extend(immutable_selector(old, new));
    errors.extend(immutable(spec(new).get("template"), spec(old).get("template"), "spec.template"));
    errors
}

/// ValidateCronJob: a schedule, a concurrency policy, and a job template whose selector is left to
/// be generated.
pub(super) fn cron_job(object: &Value) -> Vec<FieldError> {
    let spec = spec(object);
    let mut errors = Vec::new();
    match str_at(spec, "schedule").unwrap_or_default() {
        "" => errors.push(required("spec.schedule", "")),
        schedule => errors.extend(schedule_format(schedule)),
    }
    errors.extend(nonnegative(spec.get("startingDeadlineSeconds"), "spec.startingDeadlineSeconds"));
    if let Some(policy) = str_at(spec, "concurrencyPolicy")
        && !["Allow", "Forbid", "Replace"].contains(&policy)
    {
        errors.push(not_supported("spec.concurrencyPolicy", policy, &["Allow", "Forbid", "Replace"]));
    }
    for field in ["successfulJobsHistoryLimit", "failedJobsHistoryLimit"] {
        errors.extend(nonnegative(spec.get(field), &child("spec", field)));
    }
    let job = spec.pointer("/jobTemplate/spec").unwrap_or(&Value::Null);
    errors.extend(job_spec(job, "spec.jobTemplate.spec"));
    if let Some(selector) = given_selector(job) {
        errors.push(invalid(
            "spec.jobTemplate.spec.selector",
            &shown(selector),
            "`selector` will be auto-generated",
        ));
    }
    if job.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        errors.push(super::FieldError::not_supported(
            "spec.jobTemplate.spec.manualSelector",
            &Value::Bool(true),
            &["nil", "false"],
        ));
    }
    errors
}

/// The field count of a standard cron schedule (robfig/cron's ParseStandard), descriptors aside.
fn schedule_format(schedule: &str) -> Vec<FieldError> {
    let mut fields: Vec<&str> = schedule.split_whitespace().collect();
    if fields.first().is_some_and(|f| f.starts_with("TZ=") || f.starts_with("CRON_TZ=")) {
        fields.remove(0);
    }
    if fields.first().is_some_and(|f| f.starts_with('@')) || fields.len() == 5 {
        return Vec::new();
    }
    vec![invalid_str(
        "spec.schedule",
        schedule,
        &format!("expected exactly 5 fields, found {}: [{}]", fields.len(), fields.join(" ")),
    )]
}
