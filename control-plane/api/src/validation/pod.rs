//! Pods and pod templates (core's ValidatePodSpec, ValidatePodCreate, ValidatePodUpdate and
//! ValidatePodTemplateSpec), on the fields most clients set.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::quantity::Quantity;
use super::{
    FieldError, child, duplicate, forbidden, index, invalid, invalid_str, key, list, map_at, meta, names,
    not_found, not_supported, required, semantic_eq, str_at,
};

/// The volume sources in the order upstream checks them, with the path child it names when one is
/// too many (`downwarAPI` and `cephFS` are upstream's spellings).
const VOLUME_SOURCES: &[(&str, &str)] = &[
    ("emptyDir", "emptyDir"),
    ("hostPath", "hostPath"),
    ("gitRepo", "gitRepo"),
    ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("secret", "secret"),
    ("nfs", "nfs"),
    ("iscsi", "iscsi"),
    ("glusterfs", "glusterfs"),
    ("flocker", "flocker"),
    ("persistentVolumeClaim", "persistentVolumeClaim"),
    ("rbd", "rbd"),
    ("cinder", "cinder"),
    ("cephfs", "cephFS"),
    ("quobyte", "quobyte"),
    ("downwardAPI", "downwarAPI"),
    ("fc", "fc"),
    ("flexVolume", "flexVolume"),
    ("configMap", "configMap"),
    ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"),
    ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"),
    ("azureDisk", "azureDisk"),
    ("storageos", "storageos"),
    ("projected", "projected"),
    ("scaleIO", "scaleIO"),
    ("csi", "csi"),
    ("ephemeral", "ephemeral"),
    ("image", "image"),
];

const UPDATABLE_POD_SPEC_FIELDS: &[&str] = &[
    "`spec.containers[*].image`",
    "`spec.initContainers[*].image`",
    "`spec.activeDeadlineSeconds`",
    "`spec.tolerations` (only additions to existing tolerations)",
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
];

/// ValidatePodCreate: metadata and spec, and what only pods (not templates) check.
pub(super) fn pod(pod: &Value) -> Vec<FieldError> {
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    let mut errors = pod_spec(spec, "spec");
    for field in ["containers", "initContainers"] {
        for (i, container) in list(spec, field).iter().enumerate() {
            let image = str_at(container, "image").unwrap_or_default();
            if image.len() != image.trim().len() {
                errors.push(invalid_str(
                    &child(&index(&child("spec", field), i), "image"),
                    image,
                    "must not have leading or trailing whitespace",
                ));
            }
        }
    }
    errors
}

/// ValidatePodTemplateSpec at `path` (`spec.template`).
pub(super) fn template(template: &Value, path: &str) -> Vec<FieldError> {
    let metadata = template.get("metadata").unwrap_or(&Value::Null);
    let mut errors = meta::labels(metadata.get("labels"), &child(path, "labels"));
    errors.extend(meta::annotations(metadata.get("annotations"), &child(path, "annotations")));
    let spec = template.get("spec").unwrap_or(&Value::Null);
    errors.extend(pod_spec(spec, &child(path, "spec")));
    if !list(spec, "ephemeralContainers").is_empty() {
        errors.push(forbidden(
            &child(&child(path, "spec"), "ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }
    errors
}

/// The spec's restartPolicy, `Always` when left to its default.
pub(super) fn restart_policy(spec: &Value) -> &str {
    str_at(spec, "restartPolicy").unwrap_or("Always")
}

/// ValidatePodSpec at `path`.
pub(super) fn pod_spec(spec: &Value, path: &str) -> Vec<FieldError> {
    let (volumes, mut errors) = volumes(list(spec, "volumes"), &child(path, "volumes"));
    errors.extend(containers(list(spec, "containers"), &volumes, &child(path, "containers")));
    errors.extend(init_containers(spec, &volumes, &child(path, "initContainers")));
    if let Some(policy) = str_at(spec, "restartPolicy")
        && !["Always", "OnFailure", "Never"].contains(&policy)
    {
        errors.push(not_supported(&child(path, "restartPolicy"), policy, &["Always", "OnFailure", "Never"]));
    }
    if let Some(policy) = str_at(spec, "dnsPolicy") {
        let supported = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
        if !supported.contains(&policy) {
            errors.push(not_supported(&child(path, "dnsPolicy"), policy, &supported));
        }
    }
    errors.extend(meta::labels(spec.get("nodeSelector"), &child(path, "nodeSelector")));
    for field in ["serviceAccountName", "nodeName"] {
        if let Some(name) = str_at(spec, field).filter(|n| !n.is_empty()) {
            errors.extend(
                names::dns1123_subdomain(name).iter().map(|m| invalid_str(&child(path, field), name, m)),
            );
        }
    }
    if let Some(seconds) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64)
        && !(1..=i64::from(i32::MAX)).contains(&seconds)
    {
        errors.push(invalid(
            &child(path, "activeDeadlineSeconds"),
            &seconds.into(),
            &names::range(1, i64::from(i32::MAX)),
        ));
    }
    for field in ["hostname", "subdomain"] {
        if let Some(name) = str_at(spec, field).filter(|n| !n.is_empty()) {
            errors
                .extend(names::dns1123_label(name).iter().map(|m| invalid_str(&child(path, field), name, m)));
        }
    }
    errors.extend(tolerations(list(spec, "tolerations"), &child(path, "tolerations")));
    if let Some(name) = str_at(spec, "priorityClassName").filter(|n| !n.is_empty()) {
        errors.extend(
            names::dns1123_subdomain(name)
                .iter()
                .map(|m| invalid_str(&child(path, "priorityClassName"), name, m)),
        );
    }
    errors
}

/// ValidateVolumes: the volumes that are valid by name, and the errors.
fn volumes(volumes: &[Value], path: &str) -> (BTreeSet<String>, Vec<FieldError>) {
    let mut names = BTreeSet::new();
    let mut errors = Vec::new();
    for (i, volume) in volumes.iter().enumerate() {
        let at = index(path, i);
        let name = str_at(volume, "name").unwrap_or_default();
        let mut own = volume_source(volume, &at);
        if name.is_empty() {
            own.push(required(&child(&at, "name"), ""));
        } else {
            own.extend(names::dns1123_label(name).iter().map(|m| invalid_str(&child(&at, "name"), name, m)));
        }
        if names.contains(name) {
            own.push(duplicate(&child(&at, "name"), name));
        }
        if own.is_empty() {
            names.insert(name.to_owned());
        } else {
            errors.extend(own);
        }
    }
    (names, errors)
}

/// validateVolumeSource: exactly one source, and what the common ones need.
fn volume_source(volume: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut count = 0;
    for (field, shown) in VOLUME_SOURCES {
        let Some(source) = volume.get(*field).filter(|s| !s.is_null()) else { continue };
        if count > 0 {
            errors.push(forbidden(&child(path, shown), "may not specify more than 1 volume type"));
            continue;
        }
        count += 1;
        let at = child(path, field);
        let missing = |name: &str| str_at(source, name).is_none_or(str::is_empty);
        match *field {
            "hostPath" if missing("path") => errors.push(required(&child(&at, "path"), "")),
            "secret" if missing("secretName") => errors.push(required(&child(&at, "secretName"), "")),
            "configMap" if missing("name") => errors.push(required(&child(&at, "name"), "")),
            "persistentVolumeClaim" if missing("claimName") => {
                errors.push(required(&child(&at, "claimName"), ""));
            }
            "nfs" => {
                if missing("server") {
                    errors.push(required(&child(&at, "server"), ""));
                }
                if missing("path") {
                    errors.push(required(&child(&at, "path"), ""));
                }
                let nfs_path = str_at(source, "path").unwrap_or_default();
                if !nfs_path.starts_with('/') {
                    errors.push(invalid_str(&child(&at, "path"), nfs_path, "must be an absolute path"));
                }
            }
            _ => {}
        }
        for field_mode in ["defaultMode"] {
            if let Some(mode) = source.get(field_mode).and_then(Value::as_i64)
                && !(0..=0o777).contains(&mode)
            {
                errors.push(invalid(
                    &child(&at, field_mode),
                    &mode.into(),
                    "must be a number between 0 and 0777 (octal), both inclusive",
                ));
            }
        }
    }
    if count == 0 {
        errors.push(required(path, "must specify a volume type"));
    }
    errors
}

/// validateContainers.
fn containers(containers: &[Value], volumes: &BTreeSet<String>, path: &str) -> Vec<FieldError> {
    if containers.is_empty() {
        return vec![required(path, "")];
    }
    let mut errors = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, container) in containers.iter().enumerate() {
        let at = index(path, i);
        errors.extend(container_common(container, volumes, &at));
        let name = str_at(container, "name").unwrap_or_default();
        if !seen.insert(name) {
            errors.push(duplicate(&child(&at, "name"), name));
        }
        if container.get("restartPolicy").is_some_and(|p| !p.is_null()) {
            errors.push(forbidden(&child(&at, "restartPolicy"), "may not be set for non-init containers"));
        }
    }
    errors.extend(host_port_conflicts(containers, path));
    errors
}

/// validateInitContainers: names unique across init and regular containers.
fn init_containers(spec: &Value, volumes: &BTreeSet<String>, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut seen: BTreeSet<&str> =
        list(spec, "containers").iter().map(|c| str_at(c, "name").unwrap_or_default()).collect();
    for (i, container) in list(spec, "initContainers").iter().enumerate() {
        let at = index(path, i);
        errors.extend(container_common(container, volumes, &at));
        let mut restart_always = false;
        if let Some(policy) = str_at(container, "restartPolicy") {
            if policy == "Always" {
                restart_always = true;
            } else {
                errors.push(not_supported(&child(&at, "restartPolicy"), policy, &["Always"]));
            }
        }
        let name = str_at(container, "name").unwrap_or_default();
        if seen.contains(name) {
            errors.push(duplicate(&child(&at, "name"), name));
        } else if !name.is_empty() {
            seen.insert(name);
        }
        errors.extend(host_port_conflicts(std::slice::from_ref(container), path));
        if !restart_always {
            for field in ["lifecycle", "livenessProbe", "readinessProbe", "startupProbe"] {
                if container.get(field).is_some_and(|v| !v.is_null()) {
                    errors.push(forbidden(
                        &child(&at, field),
                        "may not be set for init containers without restartPolicy=Always",
                    ));
                }
            }
        }
    }
    errors
}

/// validateContainerCommon.
fn container_common(container: &Value, volumes: &BTreeSet<String>, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let name = str_at(container, "name").unwrap_or_default();
    if name.is_empty() {
        errors.push(required(&child(path, "name"), ""));
    } else {
        errors.extend(names::dns1123_label(name).iter().map(|m| invalid_str(&child(path, "name"), name, m)));
    }
    if str_at(container, "image").is_none_or(str::is_empty) {
        errors.push(required(&child(path, "image"), ""));
    }
    if let Some(policy) = str_at(container, "terminationMessagePolicy")
        && !["File", "FallbackToLogsOnError"].contains(&policy)
    {
        errors.push(not_supported(
            &child(path, "terminationMessagePolicy"),
            policy,
            &["File", "FallbackToLogsOnError"],
        ));
    }
    errors.extend(ports(list(container, "ports"), &child(path, "ports")));
    errors.extend(env(list(container, "env"), &child(path, "env")));
    errors.extend(volume_mounts(list(container, "volumeMounts"), volumes, &child(path, "volumeMounts")));
    if let Some(policy) = str_at(container, "imagePullPolicy")
        && !["Always", "IfNotPresent", "Never"].contains(&policy)
    {
        errors.push(not_supported(
            &child(path, "imagePullPolicy"),
            policy,
            &["Always", "IfNotPresent", "Never"],
        ));
    }
    errors.extend(resources(container.get("resources").unwrap_or(&Value::Null), &child(path, "resources")));
    errors
}

/// validateContainerPorts.
fn ports(ports: &[Value], path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut names = BTreeSet::new();
    for (i, port) in ports.iter().enumerate() {
        let at = index(path, i);
        if let Some(name) = str_at(port, "name").filter(|n| !n.is_empty()) {
            let problems = super::names::port_name(name);
            if !problems.is_empty() {
                errors.extend(problems.iter().map(|m| invalid_str(&child(&at, "name"), name, m)));
            } else if !names.insert(name) {
                errors.push(duplicate(&child(&at, "name"), name));
            }
        }
        match port.get("containerPort").and_then(Value::as_i64).unwrap_or(0) {
            0 => errors.push(required(&child(&at, "containerPort"), "")),
            number => errors.extend(
                super::names::port_num(number)
                    .iter()
                    .map(|m| invalid(&child(&at, "containerPort"), &number.into(), m)),
            ),
        }
        if let Some(number) = port.get("hostPort").and_then(Value::as_i64).filter(|p| *p != 0) {
            errors.extend(
                super::names::port_num(number)
                    .iter()
                    .map(|m| invalid(&child(&at, "hostPort"), &number.into(), m)),
            );
        }
        if let Some(protocol) = str_at(port, "protocol")
            && !["SCTP", "TCP", "UDP"].contains(&protocol)
        {
            errors.push(not_supported(&child(&at, "protocol"), protocol, &["SCTP", "TCP", "UDP"]));
        }
    }
    errors
}

/// checkHostPortConflicts: one protocol/hostIP/hostPort per pod.
fn host_port_conflicts(containers: &[Value], path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut seen = BTreeSet::new();
    for (ci, container) in containers.iter().enumerate() {
        for (pi, port) in list(container, "ports").iter().enumerate() {
            let Some(host_port) = port.get("hostPort").and_then(Value::as_i64).filter(|p| *p != 0) else {
                continue;
            };
            let taken = format!(
                "{}/{}/{host_port}",
                str_at(port, "protocol").unwrap_or("TCP"),
                str_at(port, "hostIP").unwrap_or_default()
            );
            if !seen.insert(taken.clone()) {
                let at = child(&index(&child(&index(path, ci), "ports"), pi), "hostPort");
                errors.push(duplicate(&at, &taken));
            }
        }
    }
    errors
}

/// ValidateEnv: names required and printable, one source for valueFrom.
fn env(vars: &[Value], path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (i, var) in vars.iter().enumerate() {
        let at = index(path, i);
        let name = str_at(var, "name").unwrap_or_default();
        if name.is_empty() {
            errors.push(required(&child(&at, "name"), ""));
        } else {
            errors
                .extend(names::env_var_name(name).iter().map(|m| invalid_str(&child(&at, "name"), name, m)));
        }
        let Some(from) = var.get("valueFrom").filter(|v| !v.is_null()) else { continue };
        let from_path = child(&at, "valueFrom");
        let sources: Vec<&str> = ["fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef"]
            .into_iter()
            .filter(|s| from.get(*s).is_some_and(|v| !v.is_null()))
            .collect();
        for source in ["configMapKeyRef", "secretKeyRef"] {
            let Some(selector) = from.get(source).filter(|v| !v.is_null()) else { continue };
            let at = child(&from_path, source);
            let name = str_at(selector, "name").unwrap_or_default();
            errors.extend(
                names::dns1123_subdomain(name).iter().map(|m| invalid_str(&child(&at, "name"), name, m)),
            );
            match str_at(selector, "key").unwrap_or_default() {
                "" => errors.push(required(&child(&at, "key"), "")),
                k => {
                    errors.extend(names::config_key(k).iter().map(|m| invalid_str(&child(&at, "key"), k, m)));
                }
            }
        }
        let value_set = str_at(var, "value").is_some_and(|v| !v.is_empty());
        if sources.is_empty() {
            errors.push(invalid_str(
                &from_path,
                "",
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ));
        } else if value_set {
            errors.push(invalid_str(&from_path, "", "may not be specified when `value` is not empty"));
        } else if sources.len() > 1 {
            errors.push(invalid_str(&from_path, "", "may not have more than one field specified at a time"));
        }
    }
    errors
}

/// ValidateVolumeMounts: each names a volume of the pod, mount paths unique.
fn volume_mounts(mounts: &[Value], volumes: &BTreeSet<String>, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut paths = BTreeSet::new();
    for (i, mount) in mounts.iter().enumerate() {
        let at = index(path, i);
        let name = str_at(mount, "name").unwrap_or_default();
        if name.is_empty() {
            errors.push(required(&child(&at, "name"), ""));
        }
        if !volumes.contains(name) {
            errors.push(not_found(&child(&at, "name"), name));
        }
        let mount_path = str_at(mount, "mountPath").unwrap_or_default();
        if mount_path.is_empty() {
            errors.push(required(&child(&at, "mountPath"), ""));
        }
        if !paths.insert(mount_path) {
            errors.push(invalid_str(&child(&at, "mountPath"), mount_path, "must be unique"));
        }
    }
    errors
}

/// Whether requests of `name` may be below its limit: native resources but huge pages.
fn overcommit_allowed(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    native && !name.starts_with("hugepages-")
}

/// validateResourceRequirements: quantities not negative, requests within limits.
fn resources(resources: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let read = |kind: &str| -> BTreeMap<String, (String, Option<Quantity>)> {
        map_at(resources, kind)
            .into_iter()
            .flatten()
            .map(|(k, v)| {
                let text = v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string());
                let quantity = Quantity::parse(&text);
                (k.clone(), (text, quantity))
            })
            .collect()
    };
    let (limits, requests) = (read("limits"), read("requests"));
    let (limits_path, requests_path) = (child(path, "limits"), child(path, "requests"));
    for (kind_path, values) in [(&limits_path, &limits), (&requests_path, &requests)] {
        for (name, (_, quantity)) in values {
            if let Some(q) = quantity.filter(Quantity::is_negative) {
                errors.push(invalid_str(
                    &key(kind_path, name),
                    &q.canonical(),
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
    for (name, (_, request)) in &requests {
        let Some(request) = request else { continue };
        match limits.get(name) {
            Some((_, Some(limit))) => {
                if request != limit && !overcommit_allowed(name) {
                    errors.push(invalid_str(
                        &requests_path,
                        &request.canonical(),
                        &format!("must be equal to {name} limit of {}", limit.canonical()),
                    ));
                } else if request > limit {
                    errors.push(invalid_str(
                        &requests_path,
                        &request.canonical(),
                        &format!("must be less than or equal to {name} limit of {}", limit.canonical()),
                    ));
                }
            }
            Some((_, None)) => {}
            None if !overcommit_allowed(name) => {
                errors.push(required(&limits_path, "Limit must be set for non overcommitable resources"));
            }
            None => {}
        }
    }
    errors
}

/// ValidateTolerations.
fn tolerations(tolerations: &[Value], path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (i, toleration) in tolerations.iter().enumerate() {
        let at = index(path, i);
        let k = str_at(toleration, "key").unwrap_or_default();
        let operator = str_at(toleration, "operator").unwrap_or_default();
        let effect = str_at(toleration, "effect").unwrap_or_default();
        let value = str_at(toleration, "value").unwrap_or_default();
        if !k.is_empty() {
            errors.extend(names::qualified_name(k).iter().map(|m| invalid_str(&child(&at, "key"), k, m)));
        }
        if k.is_empty() && operator != "Exists" {
            errors.push(invalid_str(
                &child(&at, "operator"),
                operator,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if toleration.get("tolerationSeconds").is_some_and(|s| !s.is_null()) && effect != "NoExecute" {
            errors.push(invalid_str(
                &child(&at, "effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match operator {
            "Equal" | "" => {
                let problems = names::label_value(value);
                if !problems.is_empty() {
                    errors.push(invalid_str(&child(&at, "operator"), value, &problems.join(";")));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    errors.push(invalid_str(
                        &child(&at, "operator"),
                        value,
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errors.push(not_supported(&child(&at, "operator"), other, &["Equal", "Exists"])),
        }
        if !effect.is_empty() && !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
            errors.push(not_supported(
                &child(&at, "effect"),
                effect,
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            ));
        }
    }
    errors
}

/// ValidatePodUpdate: the spec as created, but for images, activeDeadlineSeconds, added tolerations
/// and a negative grace period raised to 1.
pub(super) fn pod_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = pod(new);
    let (old_spec, new_spec) =
        (old.get("spec").unwrap_or(&Value::Null), new.get("spec").unwrap_or(&Value::Null));
    for field in ["containers", "initContainers"] {
        let (before, after) = (list(old_spec, field), list(new_spec, field));
        let at = child("spec", field);
        if before.len() != after.len() {
            errors.push(forbidden(&at, "pod updates may not add or remove containers"));
            return errors;
        }
        for (i, container) in after.iter().enumerate() {
            if str_at(container, "image").is_none_or(str::is_empty) {
                errors.push(required(&child(&index(&at, i), "image"), ""));
            }
        }
    }
    let deadline = |spec: &Value| spec.get("activeDeadlineSeconds").and_then(Value::as_i64);
    match (deadline(old_spec), deadline(new_spec)) {
        (_, Some(new)) if !(0..=i64::from(i32::MAX)).contains(&new) => {
            errors.push(invalid(
                "spec.activeDeadlineSeconds",
                &new.into(),
                &names::range(0, i64::from(i32::MAX)),
            ));
            return errors;
        }
        (Some(old), Some(new)) if old < new => {
            errors.push(invalid(
                "spec.activeDeadlineSeconds",
                &new.into(),
                "must be less than or equal to previous value",
            ));
            return errors;
        }
        (Some(_), None) => errors.push(invalid(
            "spec.activeDeadlineSeconds",
            &Value::Null,
            "must not update from a positive integer to nil value",
        )),
        _ => {}
    }
    errors.extend(only_added_tolerations(list(new_spec, "tolerations"), list(old_spec, "tolerations")));
    // What may change is taken from the old spec; anything else left different is refused.
    let mut munged = new_spec.clone();
    for field in ["containers", "initContainers"] {
        if let Some(containers) = munged.get_mut(field).and_then(Value::as_array_mut) {
            for (container, before) in containers.iter_mut().zip(list(old_spec, field)) {
                if let Some(map) = container.as_object_mut() {
                    match before.get("image") {
                        Some(image) => map.insert("image".into(), image.clone()),
                        None => map.remove("image"),
                    };
                }
            }
        }
    }
    let grace = |spec: &Value| spec.get("terminationGracePeriodSeconds").and_then(Value::as_i64);
    let raised_from_negative = grace(old_spec).is_some_and(|g| g < 0) && grace(&munged) == Some(1);
    if let Some(map) = munged.as_object_mut() {
        for field in ["activeDeadlineSeconds", "tolerations", "schedulingGates"] {
            match old_spec.get(field) {
                Some(value) => map.insert(field.into(), value.clone()),
                None => map.remove(field),
            };
        }
        if raised_from_negative {
            map.insert(
                "terminationGracePeriodSeconds".into(),
                old_spec["terminationGracePeriodSeconds"].clone(),
            );
        }
    }
    if !semantic_eq(Some(&munged), Some(old_spec)) {
        let mut changed = Vec::new();
        diff(old_spec, &munged, "", &mut changed);
        errors.push(forbidden(
            "spec",
            &format!(
                "pod updates may not change fields other than {}\n{}",
                UPDATABLE_POD_SPEC_FIELDS.join(","),
                changed.join("\n")
            ),
        ));
    }
    errors
}

/// validateOnlyAddedTolerations: every old toleration kept (its tolerationSeconds aside).
fn only_added_tolerations(new: &[Value], old: &[Value]) -> Vec<FieldError> {
    let without_seconds = |t: &Value| {
        let mut t = t.clone();
        if let Some(map) = t.as_object_mut() {
            map.remove("tolerationSeconds");
        }
        t
    };
    for toleration in old {
        let kept =
            new.iter().any(|n| semantic_eq(Some(&without_seconds(n)), Some(&without_seconds(toleration))));
        if !kept {
            return vec![forbidden(
                "spec.tolerations",
                "existing toleration can not be modified except its tolerationSeconds",
            )];
        }
    }
    tolerations(new, "spec.tolerations")
}

/// The differing fields of two specs, one `- path: old` / `+ path: new` pair each (upstream prints a
/// Go diff of the specs here).
fn diff(old: &Value, new: &Value, path: &str, out: &mut Vec<String>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let (x, y) = (a.get(k), b.get(k));
                if !semantic_eq(x, y) {
                    diff(x.unwrap_or(&Value::Null), y.unwrap_or(&Value::Null), &child(path, k), out);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                if !semantic_eq(Some(x), Some(y)) {
                    diff(x, y, &index(path, i), out);
                }
            }
        }
        _ => {
            out.push(format!("- {path}: {old}"));
            out.push(format!("+ {path}: {new}"));
        }
    }
}
