//! Kubernetes defaulting (SetDefaults_* of k8s.io/kubernetes pkg/apis/*/v1), on objects as JSON: what
//! a created object holds in fields its author left out. No IO; admission that needs other objects
//! (service accounts, priority classes, limit ranges) lives in the apiserver.

use serde_json::{Map, Value, json};

use crate::resources::Resource;

fn object_mut(value: &mut Value) -> Option<&mut Map<String, Value>> {
    value.as_object_mut()
}

/// Sets `key` to `default` in `map` when it is missing.
/// Sets `key` unless it holds something: missing, null and `""` are unset, as Go's zero values are
/// to upstream's defaulting functions (`if spec.RestartPolicy == "" { ... }`) — client-go sends
/// empty strings for fields a program left out.
fn or_insert(map: &mut Map<String, Value>, key: &str, default: Value) {
    let unset = match map.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(_) => false,
    };
    if unset {
        map.insert(key.to_owned(), default);
    }
}

/// Defaults for a created or updated object of `resource`.
pub fn apply(resource: &Resource, object: &mut Value) {
    match (resource.group, resource.plural) {
        ("apiextensions.k8s.io", "customresourcedefinitions") => crate::crd::default(object),
        ("", "pods") => {
            if let Some(spec) = object.get_mut("spec") {
                pod_requests_from_limits(spec);
                pod_spec(spec);
            }
        }
        ("", "services") => service(object),
        ("", "secrets") => secret(object),
        ("", "namespaces") => namespace(object),
        ("", "replicationcontrollers") => replication_controller(object),
        ("", "persistentvolumes") => persistent_volume(object),
        ("", "persistentvolumeclaims") => persistent_volume_claim(object),
        ("storage.k8s.io", "storageclasses") => storage_class(object),
        ("storage.k8s.io", "csidrivers") => csi_driver(object),
        ("resource.k8s.io", "resourceclaims") => resource_claim(object),
        ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets") | ("batch", "jobs") => {
            if let Some(spec) = object.pointer_mut("/spec/template/spec") {
                pod_spec(spec);
            }
            if let Some(spec) = object.get_mut("spec").and_then(object_mut)
                && resource.plural != "daemonsets"
                && resource.plural != "jobs"
            {
                or_insert(spec, "replicas", json!(1));
            }
            if resource.plural == "deployments"
                && let Some(spec) = object.get_mut("spec").and_then(object_mut)
            {
                or_insert(spec, "revisionHistoryLimit", json!(10));
                or_insert(spec, "progressDeadlineSeconds", json!(600));
                or_insert(
                    spec,
                    "strategy",
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
                );
            }
        }
        ("batch", "cronjobs") => {
            if let Some(spec) = object.pointer_mut("/spec/jobTemplate/spec/template/spec") {
                pod_spec(spec);
            }
            if let Some(spec) = object.get_mut("spec").and_then(object_mut) {
                or_insert(spec, "concurrencyPolicy", json!("Allow"));
                or_insert(spec, "suspend", json!(false));
                or_insert(spec, "successfulJobsHistoryLimit", json!(3));
                or_insert(spec, "failedJobsHistoryLimit", json!(1));
            }
        }
        _ => {}
    }
}

/// SetDefaults_ReplicationController: the template's labels as the selector and as the object's
/// labels when those are empty, one replica, the template's pod spec defaulted.
fn replication_controller(object: &mut Value) {
    let template_labels = object.pointer("/spec/template/metadata/labels").filter(|l| l.is_object()).cloned();
    let empty = |value: Option<&Value>| value.and_then(Value::as_object).is_none_or(Map::is_empty);
    if let Some(labels) = template_labels {
        if let Some(spec) = object.get_mut("spec").and_then(object_mut)
            && empty(spec.get("selector"))
        {
            spec.insert("selector".to_owned(), labels.clone());
        }
        if let Some(metadata) = object.get_mut("metadata").and_then(object_mut)
            && empty(metadata.get("labels"))
        {
            metadata.insert("labels".to_owned(), labels);
        }
    }
    if let Some(spec) = object.get_mut("spec").and_then(object_mut) {
        or_insert(spec, "replicas", json!(1));
    }
    if let Some(spec) = object.pointer_mut("/spec/template/spec") {
        pod_spec(spec);
    }
}

/// SetDefaults_PersistentVolume: phase Pending, reclaim policy Retain, volume mode Filesystem (the
/// kubelet refuses to mount a PV without a volume mode).
fn persistent_volume(object: &mut Value) {
    let Some(map) = object_mut(object) else { return };
    let status = map.entry("status").or_insert_with(|| json!({}));
    if let Some(status) = object_mut(status) {
        or_insert(status, "phase", json!("Pending"));
    }
    if let Some(spec) = map.get_mut("spec").and_then(object_mut) {
        or_insert(spec, "persistentVolumeReclaimPolicy", json!("Retain"));
        or_insert(spec, "volumeMode", json!("Filesystem"));
    }
}

/// SetDefaults_PersistentVolumeClaim and its spec's: phase Pending, volume mode Filesystem.
fn persistent_volume_claim(object: &mut Value) {
    let Some(map) = object_mut(object) else { return };
    let status = map.entry("status").or_insert_with(|| json!({}));
    if let Some(status) = object_mut(status) {
        or_insert(status, "phase", json!("Pending"));
    }
    if let Some(spec) = map.get_mut("spec").and_then(object_mut) {
        or_insert(spec, "volumeMode", json!("Filesystem"));
    }
}

/// SetDefaults_StorageClass: reclaim policy Delete, binding mode Immediate (the scheduler's volume
/// binding refuses a class without a mode).
fn storage_class(object: &mut Value) {
    let Some(map) = object_mut(object) else { return };
    or_insert(map, "reclaimPolicy", json!("Delete"));
    or_insert(map, "volumeBindingMode", json!("Immediate"));
}

/// SetDefaults_CSIDriver (with SELinuxMountReadWriteOncePod on, as in 1.34).
fn csi_driver(object: &mut Value) {
    let Some(spec) = object.get_mut("spec").and_then(object_mut) else { return };
    or_insert(spec, "attachRequired", json!(true));
    or_insert(spec, "podInfoOnMount", json!(false));
    or_insert(spec, "storageCapacity", json!(false));
    or_insert(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
    if spec.get("volumeLifecycleModes").and_then(Value::as_array).is_none_or(Vec::is_empty) {
        spec.insert("volumeLifecycleModes".to_owned(), json!(["Persistent"]));
    }
    or_insert(spec, "requiresRepublish", json!(false));
    or_insert(spec, "seLinuxMount", json!(false));
}

/// SetObjectDefaults_ResourceClaim: each exact request and each alternative of `firstAvailable`
/// allocates `ExactCount` devices, one unless counted; tolerations compare with `Equal`.
fn resource_claim(object: &mut Value) {
    fn device_request(request: &mut Value) {
        let Some(map) = object_mut(request) else { return };
        or_insert(map, "allocationMode", json!("ExactCount"));
        if map.get("allocationMode").and_then(Value::as_str) == Some("ExactCount")
            && map.get("count").and_then(Value::as_i64).is_none_or(|n| n == 0)
        {
            map.insert("count".to_owned(), json!(1));
        }
        tolerations(map);
    }
    fn tolerations(map: &mut Map<String, Value>) {
        for toleration in map.get_mut("tolerations").and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(toleration) = object_mut(toleration) {
                or_insert(toleration, "operator", json!("Equal"));
            }
        }
    }
    let requests = object.pointer_mut("/spec/devices/requests").and_then(Value::as_array_mut);
    for request in requests.into_iter().flatten() {
        if let Some(exactly) = request.get_mut("exactly").filter(|e| e.is_object()) {
            device_request(exactly);
        }
        for alternative in
            request.get_mut("firstAvailable").and_then(Value::as_array_mut).into_iter().flatten()
        {
            device_request(alternative);
        }
    }
    let results = object.pointer_mut("/status/allocation/devices/results").and_then(Value::as_array_mut);
    for result in results.into_iter().flatten().filter_map(object_mut) {
        tolerations(result);
    }
}

/// upstream's SetDefaults_Namespace and SetDefaults_NamespaceStatus: a named namespace carries the
/// `kubernetes.io/metadata.name` label with its name, its phase is Active; spec and status are
/// there even when empty (Go writes the structs).
fn namespace(object: &mut Value) {
    let Some(map) = object_mut(object) else { return };
    let name = map
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    if !name.is_empty()
        && let Some(metadata) = map.get_mut("metadata").and_then(object_mut)
    {
        let labels = metadata.entry("labels").or_insert_with(|| json!({}));
        if !labels.is_object() {
            *labels = json!({});
        }
        labels["kubernetes.io/metadata.name"] = name.into();
    }
    or_insert(map, "spec", json!({}));
    let status = map.entry("status").or_insert_with(|| json!({}));
    if let Some(status) = object_mut(status) {
        or_insert(status, "phase", json!("Active"));
    }
}

/// A Secret's `stringData` merged into `data` (base64), over what `data` holds for the same keys,
/// and dropped: it is write-only. Upstream does this in the v1 → internal conversion, so on every
/// write; `type` defaults to Opaque.
fn secret(object: &mut Value) {
    use base64::Engine as _;
    let Some(map) = object.as_object_mut() else { return };
    if let Some(Value::Object(strings)) = map.remove("stringData") {
        let data = map.entry("data").or_insert_with(|| json!({}));
        if !data.is_object() {
            *data = json!({});
        }
        for (key, value) in strings {
            if let (Some(text), Some(data)) = (value.as_str(), data.as_object_mut()) {
                data.insert(key, base64::engine::general_purpose::STANDARD.encode(text).into());
            }
        }
    }
    or_insert(map, "type", json!("Opaque"));
}

/// SetDefaults_Pod's part for a Pod (not a template): a container's limit with no request of
/// the same resource is its request too.
fn pod_requests_from_limits(spec: &mut Value) {
    for field in ["containers", "initContainers"] {
        let containers = spec.get_mut(field).and_then(Value::as_array_mut);
        for container in containers.into_iter().flatten() {
            let Some(resources) = container.get_mut("resources").and_then(object_mut) else { continue };
            let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() else { continue };
            let requests = resources.entry("requests").or_insert_with(|| json!({}));
            if requests.is_null() {
                *requests = json!({});
            }
            if let Some(requests) = object_mut(requests) {
                for (name, limit) in limits {
                    requests.entry(name).or_insert(limit);
                }
            }
        }
    }
}

/// SetDefaults_PodSpec and SetDefaults_Container.
pub fn pod_spec(spec: &mut Value) {
    let Some(map) = object_mut(spec) else { return };
    or_insert(map, "restartPolicy", json!("Always"));
    or_insert(map, "dnsPolicy", json!("ClusterFirst"));
    or_insert(map, "schedulerName", json!("default-scheduler"));
    or_insert(map, "terminationGracePeriodSeconds", json!(30));
    or_insert(map, "securityContext", json!({}));
    or_insert(map, "enableServiceLinks", json!(true));
    for field in ["containers", "initContainers"] {
        if let Some(containers) = map.get_mut(field).and_then(Value::as_array_mut) {
            for container in containers {
                self::container(container);
            }
        }
    }
    if let Some(volumes) = map.get_mut("volumes").and_then(Value::as_array_mut) {
        for volume in volumes.iter_mut().filter_map(Value::as_object_mut) {
            self::volume(volume);
        }
    }
}

/// SetDefaults_Volume and its sources': a volume without a source is an emptyDir; secret,
/// configMap, downwardAPI and projected volumes get the 0644 defaultMode (the upstream kubelet
/// refuses to mount one without it); a projected token expires after an hour; field references
/// are of v1.
fn volume(volume: &mut Map<String, Value>) {
    const DEFAULT_MODE: i64 = 0o644;
    if volume.keys().all(|key| key == "name") {
        volume.insert("emptyDir".into(), json!({}));
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(source) = volume.get_mut(source).and_then(object_mut) {
            or_insert(source, "defaultMode", json!(DEFAULT_MODE));
        }
    }
    let field_refs = |items: Option<&mut Value>| {
        for item in items.and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(field) = item.get_mut("fieldRef").and_then(object_mut) {
                or_insert(field, "apiVersion", json!("v1"));
            }
        }
    };
    field_refs(volume.get_mut("downwardAPI").and_then(|d| d.get_mut("items")));
    let sources =
        volume.get_mut("projected").and_then(|p| p.get_mut("sources")).and_then(Value::as_array_mut);
    for source in sources.into_iter().flatten() {
        if let Some(token) = source.get_mut("serviceAccountToken").and_then(object_mut) {
            or_insert(token, "expirationSeconds", json!(3600));
        }
        field_refs(source.get_mut("downwardAPI").and_then(|d| d.get_mut("items")));
    }
}

fn container(container: &mut Value) {
    let image = container.get("image").and_then(Value::as_str).unwrap_or_default().to_owned();
    let Some(map) = object_mut(container) else { return };
    // `:latest` or no tag (and no digest) pulls always, as upstream.
    let last = image.rsplit('/').next().unwrap_or_default();
    let tagged = last.contains(':') || image.contains('@');
    let policy = if !tagged || image.ends_with(":latest") { "Always" } else { "IfNotPresent" };
    or_insert(map, "imagePullPolicy", json!(policy));
    or_insert(map, "terminationMessagePath", json!("/dev/termination-log"));
    or_insert(map, "terminationMessagePolicy", json!("File"));
    or_insert(map, "resources", json!({}));
    if let Some(ports) = map.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            or_insert(port, "protocol", json!("TCP"));
        }
    }
    // SetDefaults_ObjectFieldSelector: the upstream kubelet refuses a fieldRef without a version.
    for env in map.get_mut("env").and_then(Value::as_array_mut).into_iter().flatten() {
        if let Some(field) = env.get_mut("valueFrom").and_then(|v| v.get_mut("fieldRef")).and_then(object_mut)
        {
            or_insert(field, "apiVersion", json!("v1"));
        }
    }
}

/// SetDefaults_Service: type, session affinity, port protocols and target ports, IP families.
fn service(object: &mut Value) {
    let Some(spec) = object.get_mut("spec").and_then(object_mut) else { return };
    or_insert(spec, "type", json!("ClusterIP"));
    or_insert(spec, "sessionAffinity", json!("None"));
    let kind = spec.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
    if kind != "ExternalName" {
        or_insert(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if matches!(kind.as_str(), "NodePort" | "LoadBalancer") {
        or_insert(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut().filter_map(Value::as_object_mut) {
            or_insert(port, "protocol", json!("TCP"));
            // A targetPort of 0 is unset too (client-go's IntOrString always serializes).
            if port.get("targetPort").and_then(Value::as_i64) == Some(0) {
                port.remove("targetPort");
            }
            if let Some(number) = port.get("port").cloned() {
                or_insert(port, "targetPort", number);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::find;

    #[test]
    fn zero_values_are_unset() {
        let services = find("", "v1", "services").unwrap();
        let mut service = json!({"spec": {"type": "", "sessionAffinity": null, "ports": [
            {"port": 80, "targetPort": 0, "protocol": ""}, {"port": 81, "targetPort": ""}, {"port": 82, "targetPort": "http"}
        ]}});
        apply(services, &mut service);
        assert_eq!(
            (&service["spec"]["type"], &service["spec"]["sessionAffinity"]),
            (&json!("ClusterIP"), &json!("None"))
        );
        let targets: Vec<&Value> =
            service["spec"]["ports"].as_array().unwrap().iter().map(|p| &p["targetPort"]).collect();
        assert_eq!(targets, [&json!(80), &json!(81), &json!("http")]);
        assert_eq!(service["spec"]["ports"][0]["protocol"], "TCP");
        let pods = find("", "v1", "pods").unwrap();
        let mut pod = json!({"spec": {"restartPolicy": "", "containers": [{"name": "c", "image": "b:1", "imagePullPolicy": ""}]}});
        apply(pods, &mut pod);
        assert_eq!(
            (&pod["spec"]["restartPolicy"], &pod["spec"]["containers"][0]["imagePullPolicy"]),
            (&json!("Always"), &json!("IfNotPresent"))
        );
    }

    #[test]
    fn namespaces_carry_their_name_label() {
        let namespaces = crate::resources::find("", "v1", "namespaces").unwrap();
        let mut object = json!({"metadata": {"name": "dev", "labels": {"team": "a"}}});
        apply(namespaces, &mut object);
        assert_eq!(
            object,
            json!({"metadata": {"name": "dev", "labels": {"team": "a", "kubernetes.io/metadata.name": "dev"}},
                   "spec": {}, "status": {"phase": "Active"}})
        );
        let mut renamed = json!({"metadata": {"name": "dev", "labels": {"kubernetes.io/metadata.name": "x"}}, "status": {"phase": "Terminating"}});
        apply(namespaces, &mut renamed);
        assert_eq!(renamed["metadata"]["labels"], json!({"kubernetes.io/metadata.name": "dev"}));
        assert_eq!(renamed["status"]["phase"], "Terminating");
        let mut unnamed = json!({"metadata": {"generateName": "dev-"}});
        apply(namespaces, &mut unnamed);
        assert!(unnamed["metadata"].get("labels").is_none());
    }

    #[test]
    fn secrets_take_string_data_into_data() {
        let secrets = find("", "v1", "secrets").unwrap();
        let mut secret =
            json!({"data": {"a": "b2xk", "keep": "eA=="}, "stringData": {"a": "new", "b": "two"}});
        apply(secrets, &mut secret);
        assert_eq!(
            secret,
            json!({"data": {"a": "bmV3", "keep": "eA==", "b": "dHdv"}, "type": "Opaque"}),
            "stringData wins over data for a key, and is not kept"
        );
        let mut typed = json!({"type": "kubernetes.io/tls", "stringData": {"tls.crt": "c"}});
        apply(secrets, &mut typed);
        assert_eq!(typed, json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "Yw=="}}));
    }

    #[test]
    fn pods() {
        let pods = find("", "v1", "pods").unwrap();
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "image": "busybox"},
            {"name": "b", "image": "registry:5000/busybox:1.36", "ports": [{"containerPort": 80}],
             "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]},
            {"name": "c", "image": "busybox@sha256:abc"}
        ], "restartPolicy": "Never"}});
        apply(pods, &mut pod);
        let spec = &pod["spec"];
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(
            (spec["dnsPolicy"].as_str(), spec["schedulerName"].as_str()),
            (Some("ClusterFirst"), Some("default-scheduler"))
        );
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        let pulls: Vec<&str> = spec["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["imagePullPolicy"].as_str().unwrap())
            .collect();
        assert_eq!(pulls, ["Always", "IfNotPresent", "IfNotPresent"]);
        assert_eq!(spec["containers"][1]["ports"][0]["protocol"], "TCP");
        assert_eq!(spec["containers"][1]["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(spec["containers"][0]["terminationMessagePolicy"], "File");
        // A limit without a request is the request too (a Pod's, not a template's).
        let mut pod = json!({"spec": {"initContainers": [{"name": "i", "image": "i:1",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}}],
            "containers": [{"name": "c", "image": "i:1", "resources": {"limits": {"memory": "64Mi"}}}]}});
        apply(pods, &mut pod);
        assert_eq!(
            pod["spec"]["initContainers"][0]["resources"]["requests"],
            json!({"cpu": "500m", "memory": "1Gi"})
        );
        assert_eq!(pod["spec"]["containers"][0]["resources"]["requests"], json!({"memory": "64Mi"}));
        let deployments = find("apps", "v1", "deployments").unwrap();
        let mut deployment = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "i:1", "resources": {"limits": {"memory": "64Mi"}}}]}}}});
        apply(deployments, &mut deployment);
        assert!(
            deployment["spec"]["template"]["spec"]["containers"][0]["resources"].get("requests").is_none()
        );
    }

    #[test]
    fn pod_volumes_as_upstream_defaults_them() {
        let pods = find("", "v1", "pods").unwrap();
        let mut pod = json!({"spec": {"containers": [{"name": "a", "image": "busybox"}], "volumes": [
            {"name": "bare"},
            {"name": "cm", "configMap": {"name": "settings"}},
            {"name": "s", "secret": {"secretName": "db", "defaultMode": 0o400}},
            {"name": "d", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "metadata.name"}}]}},
            {"name": "p", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
        ]}});
        apply(pods, &mut pod);
        let volumes = &pod["spec"]["volumes"];
        assert_eq!(volumes[0], json!({"name": "bare", "emptyDir": {}}));
        assert_eq!(volumes[1]["configMap"], json!({"name": "settings", "defaultMode": 420}));
        assert_eq!(volumes[2]["secret"]["defaultMode"], 0o400);
        assert_eq!(volumes[3]["downwardAPI"]["defaultMode"], 420);
        assert_eq!(volumes[3]["downwardAPI"]["items"][0]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(volumes[4]["projected"]["defaultMode"], 420);
        assert_eq!(volumes[4]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"], 3600);
    }

    #[test]
    fn replication_controllers() {
        let rcs = find("", "v1", "replicationcontrollers").unwrap();
        let mut rc = json!({"metadata": {"name": "rc"}, "spec": {"template": {
            "metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "a", "image": "x:1"}]}}}});
        apply(rcs, &mut rc);
        assert_eq!(
            (&rc["spec"]["selector"], &rc["metadata"]["labels"], &rc["spec"]["replicas"]),
            (&json!({"app": "web"}), &json!({"app": "web"}), &json!(1))
        );
        assert_eq!(rc["spec"]["template"]["spec"]["restartPolicy"], "Always");
        let mut own = json!({"metadata": {"labels": {"mine": "1"}}, "spec": {"replicas": 0, "selector": {"app": "web"},
            "template": {"metadata": {"labels": {"app": "web", "v": "2"}}}}});
        apply(rcs, &mut own);
        assert_eq!(
            (&own["spec"]["selector"], &own["metadata"]["labels"], &own["spec"]["replicas"]),
            (&json!({"app": "web"}), &json!({"mine": "1"}), &json!(0)),
            "what is given stays"
        );
    }

    #[test]
    fn persistent_volumes_and_claims() {
        let volumes = find("", "v1", "persistentvolumes").unwrap();
        let mut volume = json!({"spec": {"hostPath": {"path": "/srv"}}});
        apply(volumes, &mut volume);
        assert_eq!(
            volume,
            json!({"spec": {"hostPath": {"path": "/srv"}, "persistentVolumeReclaimPolicy": "Retain",
                            "volumeMode": "Filesystem"},
                   "status": {"phase": "Pending"}})
        );
        let claims = find("", "v1", "persistentvolumeclaims").unwrap();
        let mut claim = json!({"spec": {"volumeMode": "Block"}, "status": {"phase": "Bound"}});
        apply(claims, &mut claim);
        assert_eq!(claim, json!({"spec": {"volumeMode": "Block"}, "status": {"phase": "Bound"}}));
        let mut claim = json!({"spec": {}});
        apply(claims, &mut claim);
        assert_eq!(claim, json!({"spec": {"volumeMode": "Filesystem"}, "status": {"phase": "Pending"}}));
    }

    #[test]
    fn storage_and_resource_claims() {
        let classes = find("storage.k8s.io", "v1", "storageclasses").unwrap();
        let mut class = json!({"provisioner": "p"});
        apply(classes, &mut class);
        assert_eq!(
            class,
            json!({"provisioner": "p", "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"})
        );
        let drivers = find("storage.k8s.io", "v1", "csidrivers").unwrap();
        let mut driver = json!({"spec": {"attachRequired": false}});
        apply(drivers, &mut driver);
        assert_eq!(
            driver["spec"],
            json!({"attachRequired": false, "podInfoOnMount": false, "storageCapacity": false,
                   "fsGroupPolicy": "ReadWriteOnceWithFSType", "volumeLifecycleModes": ["Persistent"],
                   "requiresRepublish": false, "seLinuxMount": false})
        );
        let claims = find("resource.k8s.io", "v1", "resourceclaims").unwrap();
        let mut claim = json!({"spec": {"devices": {"requests": [
            {"name": "a", "exactly": {"deviceClassName": "gpu", "tolerations": [{"key": "k"}]}},
            {"name": "b", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}},
            {"name": "c", "firstAvailable": [{"name": "big", "deviceClassName": "gpu", "count": 2}]}
        ]}}});
        apply(claims, &mut claim);
        let requests = &claim["spec"]["devices"]["requests"];
        assert_eq!(
            requests[0]["exactly"],
            json!({"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1,
                   "tolerations": [{"key": "k", "operator": "Equal"}]})
        );
        assert_eq!(requests[1]["exactly"], json!({"deviceClassName": "gpu", "allocationMode": "All"}));
        assert_eq!(
            requests[2]["firstAvailable"][0],
            json!({"name": "big", "deviceClassName": "gpu", "count": 2, "allocationMode": "ExactCount"})
        );
    }

    #[test]
    fn services_and_workloads() {
        let services = find("", "v1", "services").unwrap();
        let mut svc =
            json!({"spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}});
        apply(services, &mut svc);
        assert_eq!(svc["spec"]["type"], "ClusterIP");
        assert_eq!(svc["spec"]["ports"][0], json!({"port": 80, "protocol": "TCP", "targetPort": 80}));
        assert_eq!(svc["spec"]["ports"][1]["targetPort"], "dns");
        let deployments = find("apps", "v1", "deployments").unwrap();
        let mut d = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "x:1"}]}}}});
        apply(deployments, &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
    }
}
