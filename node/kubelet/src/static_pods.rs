//! Static pods: pods from manifest files under `staticPodPath` (`--pod-manifest-path`), run by
//! the kubelet with no API server in the way, and their mirror pods in the API (upstream's file
//! config source, pkg/kubelet/config, and its mirror client). Pure but for [`scan`], which reads
//! the directory.
//!
//! - A manifest is one Pod (YAML or JSON). It is defaulted as the API server defaults a pod and
//!   validated as it validates one created; a static pod may not refer to API objects (service
//!   accounts, ConfigMaps, Secrets, claims, trust bundles). Then upstream's file-source defaults:
//!   the name `<name>-<node>`, the namespace `default` when none, `spec.nodeName`, a UID hashed
//!   from the file's bytes, the node's name and the file's path (upstream hashes its decoded
//!   object: the same file on the same node keeps its UID, a changed file gets a new one), the
//!   annotations `kubernetes.io/config.hash` (that UID), `config.source: file` and
//!   `config.seen`, a toleration of every NoExecute taint, phase Pending.
//! - Its mirror pod is the same pod in the API with `kubernetes.io/config.mirror` set to the hash
//!   and the Node as its controller owner (NodeRestriction requires it). The kubelet writes the
//!   static pod's status to its mirror; a mirror deleted or of another hash is replaced.
//! - Files whose names start with a dot are skipped, as are directories; a file that cannot be
//!   used is logged and skipped (upstream's "Could not process manifest file").

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{Value, json};
use sha2::Digest;

pub const CONFIG_HASH: &str = "kubernetes.io/config.hash";
pub const CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";
pub const CONFIG_SOURCE: &str = "kubernetes.io/config.source";
pub const CONFIG_SEEN: &str = "kubernetes.io/config.seen";

/// The largest manifest read (upstream's maxConfigLength).
const MAX_MANIFEST: u64 = 10 << 20;

/// The static pod of a manifest file's `bytes` at `path`, for the node `node_name`, first seen
/// `seen` (RFC 3339); the error is upstream's reason for skipping it.
pub fn from_manifest(bytes: &[u8], path: &str, node_name: &str, seen: &str) -> Result<Pod, String> {
    let unparsable = |e: String| format!("{path}: couldn't parse as pod({e}), please check config file");
    let mut value: Value = serde_yaml_ng::from_slice(bytes).map_err(|e| unparsable(e.to_string()))?;
    let kind = value.get("kind").and_then(Value::as_str).unwrap_or_default();
    let version = value.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    if kind.is_empty() {
        return Err(unparsable("Object 'Kind' is missing".into()));
    }
    if (kind, version) != ("Pod", "v1") {
        return Err(unparsable(format!("no kind {kind:?} is registered for version {version:?}")));
    }
    let name = value.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_owned();
    if name.is_empty() {
        return Err("invalid pod: name is needed for the pod".into());
    }
    let uid = match value.pointer("/metadata/uid").and_then(Value::as_str).filter(|u| !u.is_empty()) {
        Some(uid) => uid.to_owned(),
        None => {
            let mut hash = sha2::Sha256::new();
            hash.update(bytes);
            hash.update(format!("host:{node_name}file:{path}").as_bytes());
            hash.finalize().iter().take(16).map(|b| format!("{b:02x}")).collect()
        }
    };
    let metadata =
        value.get_mut("metadata").and_then(Value::as_object_mut).ok_or("invalid pod: no metadata")?;
    metadata.insert("uid".into(), json!(uid));
    metadata.insert("name".into(), json!(format!("{name}-{}", node_name.to_lowercase())));
    if metadata.get("namespace").and_then(Value::as_str).is_none_or(str::is_empty) {
        metadata.insert("namespace".into(), json!("default"));
    }
    let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(CONFIG_HASH.into(), json!(uid));
        annotations.insert(CONFIG_SOURCE.into(), json!("file"));
        annotations.insert(CONFIG_SEEN.into(), json!(seen));
    }
    let spec = value.get_mut("spec").and_then(Value::as_object_mut).ok_or("invalid pod: no spec")?;
    spec.insert("nodeName".into(), json!(node_name));
    // AddOrUpdateTolerationInPod: tolerate every NoExecute taint, once.
    let tolerate_all = json!({"operator": "Exists", "effect": "NoExecute"});
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(list) = tolerations.as_array_mut()
        && !list.contains(&tolerate_all)
    {
        list.push(tolerate_all);
    }
    let pods = keel_api::resources::find("", "v1", "pods").ok_or("the pods resource is unknown")?;
    keel_api::defaults::apply(pods, &mut value);
    let errors = keel_api::validation::validate_create(pods, &value);
    if !errors.is_empty() {
        let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
        return Err(format!("invalid pod: [{}]", shown.join(" ")));
    }
    if let Some(resource) = api_reference(&value) {
        return Err(format!("static pods may not reference {resource}"));
    }
    value["status"] = json!({"phase": "Pending"});
    serde_json::from_value(value).map_err(|e| unparsable(e.to_string()))
}

/// The kind of API object a pod refers to, as upstream's HasAPIObjectReference names it (the
/// service account, then Secrets, ConfigMaps, claims, then the volumes that reach others).
pub fn api_reference(pod: &Value) -> Option<&'static str> {
    let spec = pod.get("spec")?;
    if spec.get("serviceAccountName").and_then(Value::as_str).is_some_and(|a| !a.is_empty()) {
        return Some("serviceaccounts");
    }
    let containers: Vec<&Value> = ["containers", "initContainers", "ephemeralContainers"]
        .iter()
        .flat_map(|list| spec.get(*list).and_then(Value::as_array).into_iter().flatten())
        .collect();
    let volumes: Vec<&Value> = spec.get("volumes").and_then(Value::as_array).into_iter().flatten().collect();
    let projected = |key: &str| {
        volumes.iter().any(|v| {
            let sources = v.pointer("/projected/sources").and_then(Value::as_array);
            sources.into_iter().flatten().any(|s| s.get(key).is_some())
        })
    };
    let env_refers = |key: &str, from_key: &str| {
        containers.iter().any(|c| {
            let env = c.get("env").and_then(Value::as_array).into_iter().flatten();
            let env_from = c.get("envFrom").and_then(Value::as_array).into_iter().flatten();
            env.filter_map(|e| e.get("valueFrom")).any(|f| f.get(key).is_some())
                || env_from.into_iter().any(|f| f.get(from_key).is_some())
        })
    };
    // VisitPodSecretNames: pull secrets, env, secret volumes and the volume plugins' secret refs.
    let secret_volume = volumes.iter().any(|v| {
        v.get("secret").is_some()
            || v.pointer("/azureFile/secretName").is_some()
            || ["cephfs", "cinder", "flexVolume", "iscsi", "rbd", "scaleIO", "storageos"]
                .iter()
                .any(|plugin| v.get(*plugin).and_then(|p| p.get("secretRef")).is_some())
            || v.pointer("/csi/nodePublishSecretRef").is_some()
    });
    let pull_secrets = spec.get("imagePullSecrets").and_then(Value::as_array).is_some_and(|s| !s.is_empty());
    if pull_secrets || env_refers("secretKeyRef", "secretRef") || secret_volume || projected("secret") {
        return Some("secrets");
    }
    let config_map_volume = volumes.iter().any(|v| v.get("configMap").is_some());
    if env_refers("configMapKeyRef", "configMapRef") || config_map_volume || projected("configMap") {
        return Some("configmaps");
    }
    if spec.get("resourceClaims").and_then(Value::as_array).is_some_and(|c| !c.is_empty()) {
        return Some("resourceclaims");
    }
    for volume in &volumes {
        for (key, resource) in [
            ("csi", "csidrivers (via CSI volumes)"),
            ("glusterfs", "endpoints (via glusterFS volumes)"),
            ("persistentVolumeClaim", "persistentvolumeclaims"),
            ("ephemeral", "persistentvolumeclaims (via ephemeral volumes)"),
        ] {
            if volume.get(key).is_some() {
                return Some(resource);
            }
        }
        let sources = volume.pointer("/projected/sources").and_then(Value::as_array);
        for source in sources.into_iter().flatten() {
            for (key, resource) in [
                ("serviceAccountToken", "serviceaccounts (via projected volumes)"),
                ("clusterTrustBundle", "clustertrustbundles"),
                ("podCertificate", "podcertificates"),
            ] {
                if source.get(key).is_some() {
                    return Some(resource);
                }
            }
        }
    }
    None
}

/// The mirror pod of `pod` (a static pod), owned by the Node `node_uid` (upstream's
/// CreateMirrorPod): the API gives it its own UID.
pub fn mirror(pod: &Pod, node_uid: &str) -> Pod {
    let mut mirror = pod.clone();
    let hash = hash(pod).unwrap_or_default().to_owned();
    let annotations = mirror.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(CONFIG_MIRROR.into(), hash);
    mirror.metadata.uid = None;
    mirror.metadata.resource_version = None;
    mirror.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default(),
        uid: node_uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    mirror.status = None;
    mirror
}

/// A static pod's hash (`kubernetes.io/config.hash`).
pub fn hash(pod: &Pod) -> Option<&str> {
    pod.metadata.annotations.as_ref()?.get(CONFIG_HASH).map(String::as_str)
}

/// Whether `pod` is a mirror pod (it is run from its static pod, never itself).
pub fn is_mirror(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(CONFIG_MIRROR))
}

/// Whether `mirror` mirrors `pod` as it is now (upstream's IsMirrorPodOf).
pub fn is_mirror_of(mirror: &Pod, pod: &Pod) -> bool {
    let mirrored = mirror.metadata.annotations.as_ref().and_then(|a| a.get(CONFIG_MIRROR));
    mirror.metadata.name == pod.metadata.name
        && mirror.metadata.namespace == pod.metadata.namespace
        && mirrored.map(String::as_str) == hash(pod)
}

/// The static pods of `path` (a directory of manifests, or one manifest) for `node_name`, by
/// UID; what cannot be used is logged and skipped. `seen` gives a pod's first-seen time by UID.
pub fn scan(path: &Path, node_name: &str, seen: &dyn Fn(&str) -> String) -> Vec<Pod> {
    use std::io::Read;
    let files: Vec<std::path::PathBuf> = match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            let Ok(entries) = std::fs::read_dir(path) else { return Vec::new() };
            let mut files: Vec<_> = entries
                .filter_map(Result::ok)
                .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                .map(|e| e.path())
                .collect();
            files.sort();
            files
        }
        Ok(meta) if meta.is_file() => vec![path.to_owned()],
        Ok(_) => {
            tracing::error!(path = %path.display(), "path is not a directory or file");
            return Vec::new();
        }
        Err(_) => return Vec::new(),
    };
    let mut pods = Vec::new();
    for file in files {
        match std::fs::metadata(&file) {
            Ok(meta) if meta.is_dir() => {
                tracing::error!(path = %file.display(), "Provided manifest path is a directory, not recursing into manifest path");
                continue;
            }
            Ok(meta) if meta.is_file() => {}
            _ => continue,
        }
        let mut bytes = Vec::new();
        let read = std::fs::File::open(&file).and_then(|f| f.take(MAX_MANIFEST).read_to_end(&mut bytes));
        if let Err(error) = read {
            tracing::error!(path = %file.display(), %error, "Could not process manifest file");
            continue;
        }
        let shown = file.display().to_string();
        // The UID does not depend on when it was seen: read it first, then stamp the time.
        match from_manifest(&bytes, &shown, node_name, "") {
            Ok(mut pod) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if let Some(annotations) = pod.metadata.annotations.as_mut() {
                    annotations.insert(CONFIG_SEEN.into(), seen(&uid));
                }
                pods.push(pod);
            }
            Err(error) => tracing::error!(path = %shown, %error, "Could not process manifest file"),
        }
    }
    pods
}

#[cfg(test)]
mod tests;
