//! Per-resource behaviour on writes (upstream's REST strategies), on objects as JSON values: what a
//! create resets, how an update of the main resource and of `/status` split spec from status, which
//! resources carry a `metadata.generation` and when it moves, and how the scale subresource maps to
//! a resource. No IO.

use serde_json::{Value, json};

use crate::resources::Resource;

/// Whether writes to the main resource leave `status` alone (it has a `/status` subresource).
pub fn has_status(resource: &Resource) -> bool {
    resource.subresource("status").is_some()
}

/// Whether objects of `resource` are created with `metadata.generation` 1, as upstream's strategy
/// sets it (workloads, pods, replication controllers, endpoint slices, disruption budgets, priority
/// classes, device classes, resource slices, CRDs and custom resources); the others (namespaces,
/// nodes, services, volumes and claims, volume attachments, resource claims...) carry none.
pub fn tracks_generation(resource: &Resource) -> bool {
    resource.custom
        || matches!(
            (resource.group, resource.plural),
            ("", "pods" | "replicationcontrollers")
                | ("apps", "daemonsets" | "deployments" | "replicasets" | "statefulsets")
                | ("batch", "cronjobs" | "jobs")
                | ("discovery.k8s.io", "endpointslices")
                | ("policy", "poddisruptionbudgets")
                | ("scheduling.k8s.io", "priorityclasses")
                | ("resource.k8s.io", "deviceclasses" | "resourceslices")
                | ("apiextensions.k8s.io", "customresourcedefinitions")
        )
}

/// Whether an update whose spec changed gives an object that has no generation yet its first one
/// (upstream's CSIDriver strategy bumps a generation it never set on create).
pub fn generation_starts_on_update(resource: &Resource) -> bool {
    resource.group == "storage.k8s.io" && resource.plural == "csidrivers"
}

/// Whether a DELETE that removed the object answers with the object (upstream's stores with
/// ReturnDeletedObject, 1.34) rather than a Success Status naming it.
pub fn returns_deleted_object(resource: &Resource) -> bool {
    matches!(
        (resource.group, resource.plural),
        (
            "",
            "namespaces"
                | "persistentvolumes"
                | "persistentvolumeclaims"
                | "pods"
                | "podtemplates"
                | "resourcequotas"
                | "services"
                | "serviceaccounts"
        ) | (
            "resource.k8s.io",
            "deviceclasses"
                | "devicetaintrules"
                | "resourceclaims"
                | "resourceclaimtemplates"
                | "resourceslices"
        ) | (
            "storage.k8s.io",
            "csidrivers" | "csinodes" | "storageclasses" | "volumeattachments" | "volumeattributesclasses"
        )
    )
}

/// Resets what a client may not set on create (PrepareForCreate): the status of resources with a
/// status subresource starts empty — pods start Pending, namespaces Active with the `kubernetes`
/// finalizer.
pub fn prepare_for_create(resource: &Resource, object: &mut Value) {
    let Value::Object(map) = object else { return };
    match (resource.group, resource.plural) {
        ("", "pods") => {
            map.insert("status".into(), json!({"phase": "Pending", "qosClass": qos_class(map.get("spec"))}));
        }
        ("", "namespaces") => {
            let spec = map.entry("spec").or_insert_with(|| json!({}));
            if spec.get("finalizers").is_none() {
                spec["finalizers"] = json!(["kubernetes"]);
            }
            map.insert("status".into(), json!({"phase": "Active"}));
        }
        // upstream's CRD strategy: an empty status that records the storage version as stored.
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            let stored: Vec<Value> =
                crate::crd::storage_version(object).map(Value::from).into_iter().collect();
            if let Value::Object(map) = object {
                map.insert(
                    "status".into(),
                    json!({"acceptedNames": {"plural": "", "kind": ""}, "conditions": [], "storedVersions": stored}),
                );
            }
        }
        // Custom resources always carry a generation (upstream's customResourceStrategy).
        _ if resource.custom => {
            if has_status(resource) {
                map.remove("status");
            }
            if let Some(Value::Object(metadata)) = map.get_mut("metadata") {
                metadata.insert("generation".into(), 1.into());
            }
        }
        // upstream's PV and PVC strategies reset the status; a PV starts Pending, and so does a
        // claim as its defaulting reads it back (its lastPhaseTransitionTime is not kept here).
        ("", "persistentvolumes" | "persistentvolumeclaims") => {
            map.insert("status".into(), json!({"phase": "Pending"}));
        }
        // csrStrategy: an empty status (the requestor is set by the server: certificates).
        ("certificates.k8s.io", "certificatesigningrequests") => {
            map.insert("status".into(), json!({}));
        }
        // upstream's serviceCIDRStrategy resets nothing: a status sent on create is kept.
        ("networking.k8s.io", "servicecidrs") => {}
        _ if has_status(resource) => {
            map.remove("status");
        }
        // MutableCSINodeAllocatableCount is off in 1.34: its field is dropped.
        ("storage.k8s.io", "csidrivers") => {
            if let Some(Value::Object(spec)) = map.get_mut("spec") {
                spec.remove("nodeAllocatableUpdatePeriodSeconds");
            }
        }
        _ => {}
    }
}

/// Keeps what an update of the main resource may not change (PrepareForUpdate): the status of
/// resources with a status subresource.
pub fn prepare_for_update(resource: &Resource, old: &Value, new: &mut Value) {
    // A CRD's new storage version joins status.storedVersions.
    let stored = (resource.group == "apiextensions.k8s.io" && resource.plural == "customresourcedefinitions")
        .then(|| crate::crd::storage_version(new).map(str::to_owned))
        .flatten();
    if has_status(resource)
        && !keeps_no_status_on_update(resource)
        && let Value::Object(map) = new
    {
        match old.get("status") {
            Some(status) => map.insert("status".into(), status.clone()),
            None => map.remove("status"),
        };
    }
    if resource.group == "certificates.k8s.io" && resource.plural == "certificatesigningrequests" {
        crate::certificates::prepare_for_update(old, new);
    }
    if resource.group == "storage.k8s.io"
        && resource.plural == "csidrivers"
        && old.pointer("/spec/nodeAllocatableUpdatePeriodSeconds").is_none()
        && let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.remove("nodeAllocatableUpdatePeriodSeconds");
    }
    if let Some(storage) = stored
        && let Some(status) = new.get_mut("status").and_then(Value::as_object_mut)
    {
        let versions = status.entry("storedVersions").or_insert_with(|| json!([]));
        if let Value::Array(versions) = versions
            && !versions.iter().any(|v| v == storage.as_str())
        {
            versions.push(storage.into());
        }
    }
}

/// Resources with a `/status` subresource whose main-resource updates still write the status sent:
/// upstream's serviceCIDRStrategy.PrepareForUpdate copies nothing from the old object (only
/// server-side apply drops `status`, a reset field).
fn keeps_no_status_on_update(resource: &Resource) -> bool {
    resource.group == "networking.k8s.io" && resource.plural == "servicecidrs"
}

/// An update through `/status`: the old object with the new status (and nothing else of the new).
pub fn status_update(old: &Value, new: &Value) -> Value {
    let mut merged = old.clone();
    if let Value::Object(map) = &mut merged {
        match new.get("status") {
            Some(status) => map.insert("status".into(), status.clone()),
            None => map.remove("status"),
        };
    }
    merged
}

/// Whether an update of `resource` from `old` to `new` bumps `metadata.generation`: a change of
/// the spec ([`spec_changed`]); for a custom resource without a status subresource, any change
/// outside metadata (upstream's customResourceStrategy).
pub fn generation_moves(resource: &Resource, old: &Value, new: &Value) -> bool {
    if resource.custom && !has_status(resource) {
        let strip = |object: &Value| -> Value {
            let mut copy = object.clone();
            if let Value::Object(map) = &mut copy {
                map.remove("metadata");
            }
            copy
        };
        return strip(old) != strip(new);
    }
    spec_changed(old, new)
}

/// Whether the change from `old` to `new` bumps `metadata.generation`: any change outside
/// metadata and status (the spec, and `data`-like top-level fields of resources with a spec-less
/// shape), as upstream's strategies compare specs.
pub fn spec_changed(old: &Value, new: &Value) -> bool {
    let strip = |object: &Value| -> Value {
        let mut copy = object.clone();
        if let Value::Object(map) = &mut copy {
            for field in ["metadata", "status", "apiVersion", "kind"] {
                map.remove(field);
            }
        }
        copy
    };
    strip(old) != strip(new)
}

/// The Guaranteed / Burstable / BestEffort class of a pod spec (requests and limits of its
/// containers), as upstream's qos.GetPodQOS computes it for cpu and memory.
fn qos_class(spec: Option<&Value>) -> &'static str {
    let containers =
        spec.and_then(|s| s.get("containers")).and_then(Value::as_array).into_iter().flatten().chain(
            spec.and_then(|s| s.get("initContainers")).and_then(Value::as_array).into_iter().flatten(),
        );
    let (mut any, mut guaranteed) = (false, true);
    for container in containers {
        let resources = container.get("resources");
        let get =
            |kind: &str, name: &str| resources.and_then(|r| r.get(kind)).and_then(|m| m.get(name)).cloned();
        for name in ["cpu", "memory"] {
            let (request, limit) = (get("requests", name), get("limits", name));
            if request.is_some() || limit.is_some() {
                any = true;
            }
            // A request defaults to its limit; Guaranteed needs both set and equal.
            if limit.is_none() || request.as_ref().is_some_and(|r| Some(r) != limit.as_ref()) {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// The finalizer a deletion of `resource` adds before anything else (upstream's CRD REST Delete).
pub fn delete_finalizer(resource: &Resource) -> Option<&'static str> {
    (resource.group == "apiextensions.k8s.io" && resource.plural == "customresourcedefinitions")
        .then_some(crate::crd::CLEANUP_FINALIZER)
}

/// The value at a simple JSON path (`.spec.replicas`).
fn at_path<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let pointer: String = path.split('.').filter(|p| !p.is_empty()).map(|p| format!("/{p}")).collect();
    object.pointer(&pointer)
}

/// A custom resource's Scale, read at its CRD's paths (upstream's scaleFromCustomResource).
fn custom_scale(paths: &crate::custom::ScalePaths, object: &Value) -> Value {
    let replicas = |path: &str| at_path(object, path).and_then(Value::as_i64).unwrap_or(0);
    let selector = paths
        .label_selector
        .as_deref()
        .and_then(|path| at_path(object, path))
        .and_then(Value::as_str)
        .unwrap_or_default();
    scale(object, &json!(replicas(&paths.spec_replicas)), &json!(replicas(&paths.status_replicas)), selector)
}

/// An autoscaling/v1 Scale naming `object`, with its replicas and selector.
fn scale(object: &Value, spec_replicas: &Value, status_replicas: &Value, selector: &str) -> Value {
    let metadata = &object["metadata"];
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "uid": metadata["uid"],
            "resourceVersion": metadata["resourceVersion"],
            "creationTimestamp": metadata["creationTimestamp"],
        },
        "spec": {"replicas": spec_replicas},
        "status": {"replicas": status_replicas, "selector": selector},
    })
}

/// The autoscaling/v1 Scale of a scalable object (deployments, replicasets, statefulsets,
/// replication controllers, custom resources with a scale subresource). The selector is upstream's
/// string form of the object's selector: a LabelSelector's match labels and expressions, a
/// replication controller's label map.
pub fn scale_of(resource: &Resource, object: &Value) -> Value {
    if let Some(paths) = crate::custom::version_of(resource).and_then(|v| v.scale.clone()) {
        return custom_scale(&paths, object);
    }
    let label_map = resource.group.is_empty() && resource.plural == "replicationcontrollers";
    let selector = match object.pointer("/spec/selector") {
        Some(Value::Object(labels)) if label_map => {
            let set =
                labels.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned())).collect();
            crate::labels::LabelSelector::from_set(&set).map(|s| s.to_string()).unwrap_or_default()
        }
        Some(selector @ Value::Object(_)) => label_selector_string(selector),
        _ => String::new(),
    };
    scale(
        object,
        &object.pointer("/spec/replicas").cloned().unwrap_or(json!(default_replicas(resource))),
        &object.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
        &selector,
    )
}

/// `metav1.LabelSelectorAsSelector(selector).String()`; empty for one that does not convert.
fn label_selector_string(selector: &Value) -> String {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    serde_json::from_value::<LabelSelector>(selector.clone())
        .ok()
        .and_then(|s| crate::labels::LabelSelector::from_k8s(&s).ok())
        .map(|s| s.to_string())
        .unwrap_or_default()
}

fn default_replicas(_resource: &Resource) -> i64 {
    1
}

/// Applies a Scale's `spec.replicas` to a scaled object of `resource` (at its CRD's
/// specReplicasPath for a custom resource).
pub fn apply_scale_to(resource: &Resource, object: &mut Value, scale: &Value) -> Result<(), String> {
    let Some(paths) = crate::custom::version_of(resource).and_then(|v| v.scale.clone()) else {
        return apply_scale(object, scale);
    };
    let replicas =
        scale.pointer("/spec/replicas").and_then(Value::as_i64).ok_or("spec.replicas: Required value")?;
    if replicas < 0 {
        return Err(format!("spec.replicas: Invalid value: {replicas}: must be greater than or equal to 0"));
    }
    let mut node = object;
    let parts: Vec<&str> = paths.spec_replicas.split('.').filter(|p| !p.is_empty()).collect();
    for (i, part) in parts.iter().enumerate() {
        let Value::Object(map) = node else { return Err(format!("{}: not an object", paths.spec_replicas)) };
        if i + 1 == parts.len() {
            map.insert((*part).to_owned(), json!(replicas));
            return Ok(());
        }
        node = map.entry((*part).to_owned()).or_insert_with(|| json!({}));
    }
    Ok(())
}

/// Applies a Scale's `spec.replicas` to the scaled object.
pub fn apply_scale(object: &mut Value, scale: &Value) -> Result<(), String> {
    let replicas =
        scale.pointer("/spec/replicas").and_then(Value::as_i64).ok_or("spec.replicas: Required value")?;
    if replicas < 0 {
        return Err(format!("spec.replicas: Invalid value: {replicas}: must be greater than or equal to 0"));
    }
    if replicas > i64::from(i32::MAX) {
        return Err(format!("spec.replicas: Invalid value: {replicas}: must be at most {}", i32::MAX));
    }
    object["spec"]["replicas"] = json!(replicas);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;

    #[test]
    fn create_resets_status() {
        let deployments = find("apps", "v1", "deployments").unwrap();
        let mut d = json!({"spec": {"replicas": 2}, "status": {"replicas": 9}});
        prepare_for_create(deployments, &mut d);
        assert!(d.get("status").is_none());
        let pods = find("", "v1", "pods").unwrap();
        let mut p = json!({"spec": {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}});
        prepare_for_create(pods, &mut p);
        assert_eq!(p["status"], json!({"phase": "Pending", "qosClass": "Guaranteed"}));
        let mut p = json!({"spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Running"}});
        prepare_for_create(pods, &mut p);
        assert_eq!(p["status"]["qosClass"], "BestEffort");
        let namespaces = find("", "v1", "namespaces").unwrap();
        let mut n = json!({"metadata": {"name": "x"}});
        prepare_for_create(namespaces, &mut n);
        assert_eq!(n["spec"]["finalizers"], json!(["kubernetes"]));
        let configmaps = find("", "v1", "configmaps").unwrap();
        let mut c = json!({"data": {"a": "b"}});
        prepare_for_create(configmaps, &mut c);
        assert_eq!(c, json!({"data": {"a": "b"}}));
        let claims = find("", "v1", "persistentvolumeclaims").unwrap();
        let mut claim = json!({"spec": {"volumeName": "pv"}, "status": {"phase": "Bound"}});
        prepare_for_create(claims, &mut claim);
        assert_eq!(claim["status"], json!({"phase": "Pending"}));
    }

    /// upstream's serviceCIDRStrategy: neither create nor a main-resource update touches status;
    /// `/status` writes keep the spec.
    #[test]
    fn service_cidrs_keep_the_status_they_are_sent() {
        let cidrs = find("networking.k8s.io", "v1", "servicecidrs").unwrap();
        let ready = json!({"conditions": [{"type": "Ready", "status": "True"}]});
        let mut created = json!({"spec": {"cidrs": ["10.96.0.0/16"]}, "status": ready});
        prepare_for_create(cidrs, &mut created);
        assert_eq!(created["status"], ready);
        let mut updated = json!({"spec": {"cidrs": ["10.96.0.0/16"]}});
        prepare_for_update(cidrs, &created, &mut updated);
        assert!(updated.get("status").is_none());
        let status = status_update(&created, &json!({"spec": {"cidrs": ["10.0.0.0/8"]}, "status": {}}));
        assert_eq!(status, json!({"spec": {"cidrs": ["10.96.0.0/16"]}, "status": {}}));
        assert!(!tracks_generation(cidrs));
        assert!(!tracks_generation(find("networking.k8s.io", "v1", "ipaddresses").unwrap()));
    }

    #[test]
    fn spec_and_status_split() {
        let deployments = find("apps", "v1", "deployments").unwrap();
        let old = json!({"spec": {"replicas": 1}, "status": {"replicas": 1}});
        let mut new = json!({"spec": {"replicas": 3}, "status": {"replicas": 7}});
        prepare_for_update(deployments, &old, &mut new);
        assert_eq!(new["status"]["replicas"], 1);
        let through_status =
            status_update(&old, &json!({"spec": {"replicas": 5}, "status": {"replicas": 2}}));
        assert_eq!(
            (through_status["spec"]["replicas"].as_i64(), through_status["status"]["replicas"].as_i64()),
            (Some(1), Some(2))
        );
        assert!(spec_changed(&old, &new));
        assert!(!spec_changed(&old, &json!({"spec": {"replicas": 1}, "metadata": {"labels": {"a": "b"}}})));
    }

    #[test]
    fn scale() {
        let deployments = find("apps", "v1", "deployments").unwrap();
        let mut d = json!({"metadata": {"name": "web", "namespace": "d", "resourceVersion": "5"},
                           "spec": {"replicas": 2, "selector": {"matchLabels": {"b": "2", "a": "1"}}}, "status": {"replicas": 2}});
        let scale = scale_of(deployments, &d);
        assert_eq!(scale["spec"]["replicas"], 2);
        assert_eq!(scale["status"]["selector"], "a=1,b=2");
        assert_eq!(scale["metadata"]["resourceVersion"], "5");
        apply_scale(&mut d, &json!({"spec": {"replicas": 4}})).unwrap();
        assert_eq!(d["spec"]["replicas"], 4);
        assert!(apply_scale(&mut d, &json!({"spec": {"replicas": -1}})).is_err());
        assert!(apply_scale(&mut d, &json!({"spec": {}})).is_err());
        let sets = find("apps", "v1", "replicasets").unwrap();
        let rs = json!({"spec": {"selector": {"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]}]}}});
        assert_eq!(scale_of(sets, &rs)["status"]["selector"], "app=web,tier in (be,fe)");
        let rcs = find("", "v1", "replicationcontrollers").unwrap();
        let rc = json!({"metadata": {"name": "rc"}, "spec": {"replicas": 3, "selector": {"b": "2", "a": "1"}},
                        "status": {"replicas": 2}});
        let scale = scale_of(rcs, &rc);
        assert_eq!(
            (&scale["spec"]["replicas"], &scale["status"]["replicas"], &scale["status"]["selector"]),
            (&json!(3), &json!(2), &json!("a=1,b=2"))
        );
    }

    #[test]
    fn generations_as_upstream_strategies_keep_them() {
        let tracked = |group: &str, plural: &str| tracks_generation(find(group, "v1", plural).unwrap());
        assert!(
            tracked("", "pods") && tracked("", "replicationcontrollers") && tracked("apps", "deployments")
        );
        assert!(tracked("resource.k8s.io", "deviceclasses") && tracked("resource.k8s.io", "resourceslices"));
        assert!(
            tracked("discovery.k8s.io", "endpointslices") && tracked("scheduling.k8s.io", "priorityclasses")
        );
        assert!(!tracked("", "namespaces") && !tracked("", "services") && !tracked("", "nodes"));
        assert!(
            !tracked("storage.k8s.io", "volumeattachments") && !tracked("resource.k8s.io", "resourceclaims")
        );
        assert!(!tracked("storage.k8s.io", "csidrivers"));
        assert!(generation_starts_on_update(find("storage.k8s.io", "v1", "csidrivers").unwrap()));
    }
}
