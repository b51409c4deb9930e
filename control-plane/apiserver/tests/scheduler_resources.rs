//! The resources kube-scheduler's informers list beyond the workloads: core/v1
//! ReplicationControllers (scale and status), storage.k8s.io/v1 CSIDrivers, CSINodes,
//! CSIStorageCapacities and VolumeAttachments (status), resource.k8s.io/v1 DeviceClasses,
//! ResourceClaims (status) and ResourceSlices — created, defaulted, validated, updated through
//! their subresources, selected by field, printed as upstream's tables and discovered, with
//! kubectl 1.33 and plain requests.

use crate::common;

use anyhow::{Context, Result, ensure};
use common::{Admin, Server};
use serde_json::{Value, json};

struct Cluster {
    server: Server,
    admin: Admin,
}

impl Cluster {
    async fn start() -> Result<Cluster> {
        let server = Server::start().await?;
        let admin = Admin::of(&server)?;
        Ok(Cluster { server, admin })
    }

    /// A JSON request as the admin (a PATCH is a merge patch): status and body.
    async fn request(&self, method: &str, path: &str, body: &Value) -> Result<(u16, Value)> {
        self.server.json_request(method, path, body).await
    }
}

/// The rows kubectl prints, each split on runs of spaces.
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .map(|line| line.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(str::to_owned).collect())
        .collect()
}

fn names(list: &Value) -> Vec<&str> {
    list["items"].as_array().into_iter().flatten().filter_map(|i| i["metadata"]["name"].as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_controllers_scale_status_selectors_and_tables() -> Result<()> {
    let c = Cluster::start().await?;
    let rc = json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "web"},
        "spec": {"template": {"metadata": {"labels": {"app": "web"}},
                 "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}}});
    let created = c.admin.create(&rc).await?;
    // Defaulted as upstream: one replica, the template's labels as selector and labels; a
    // generation; no status.
    ensure!(
        created["spec"]["replicas"] == 1
            && created["spec"]["selector"] == json!({"app": "web"})
            && created["metadata"]["labels"] == json!({"app": "web"})
            && created["metadata"]["generation"] == 1
            && created.get("status").is_none()
            && created["spec"]["template"]["spec"]["restartPolicy"] == "Always",
        "{created}"
    );

    // kubectl scale goes through replicationcontrollers/scale (autoscaling/v1 Scale).
    c.admin.ok(&["scale", "rc", "web", "--replicas=3"]).await?;
    let path = "/api/v1/namespaces/default/replicationcontrollers/web";
    let (status, scale) = c.request("GET", &format!("{path}/scale"), &Value::Null).await?;
    ensure!(
        status == 200
            && scale["kind"] == "Scale"
            && scale["apiVersion"] == "autoscaling/v1"
            && scale["spec"]["replicas"] == 3
            && scale["status"]["selector"] == "app=web",
        "{scale}"
    );
    let mut smaller = scale.clone();
    smaller["spec"]["replicas"] = json!(2);
    let (status, answer) = c.request("PUT", &format!("{path}/scale"), &smaller).await?;
    ensure!(status == 200 && answer["spec"]["replicas"] == 2, "{status} {answer}");
    let (status, answer) =
        c.request("PATCH", &format!("{path}/scale"), &json!({"spec": {"replicas": -1}})).await?;
    ensure!(
        status == 422
            && answer["message"]
                == "Scale.autoscaling \"web\" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0",
        "a negative scale: {status} {answer}"
    );
    let rc = c.admin.json(&["get", "rc", "web"]).await?;
    ensure!(rc["spec"]["replicas"] == 2 && rc["metadata"]["generation"] == 3, "{rc}");

    // Through /status only the status changes, and the generation stays.
    let mut body = rc.clone();
    body["status"] =
        json!({"replicas": 2, "readyReplicas": 1, "availableReplicas": 1, "observedGeneration": 3});
    body["spec"]["replicas"] = json!(9);
    let (status, answer) = c.request("PUT", &format!("{path}/status"), &body).await?;
    ensure!(status == 200, "{status} {answer}");
    let rc = c.admin.json(&["get", "rc", "web"]).await?;
    ensure!(
        rc["spec"]["replicas"] == 2
            && rc["status"]["readyReplicas"] == 1
            && rc["metadata"]["generation"] == 3,
        "{rc}"
    );
    // ...and through the main resource everything but the status.
    let mut body = rc.clone();
    body["status"]["readyReplicas"] = json!(0);
    body["metadata"]["labels"]["team"] = json!("a");
    let (status, answer) = c.request("PUT", path, &body).await?;
    ensure!(status == 200 && answer["status"]["readyReplicas"] == 1, "{status} {answer}");

    // Upstream's printer, its wide columns, the short name and the `all` category.
    let table = rows(&c.admin.ok(&["get", "rc"]).await?);
    ensure!(table[0] == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"], "{table:?}");
    ensure!(table[1][..4] == ["web", "2", "2", "1"], "{table:?}");
    let wide = rows(&c.admin.ok(&["get", "replicationcontrollers", "-o", "wide"]).await?);
    ensure!(wide[0][5..] == ["CONTAINERS", "IMAGES", "SELECTOR"], "{wide:?}");
    ensure!(wide[1][5..] == ["nginx", "nginx:1.27", "app=web"], "{wide:?}");
    let all = c.admin.ok(&["get", "all", "-o", "name"]).await?;
    ensure!(all.lines().any(|l| l == "replicationcontroller/web"), "{all}");

    // status.replicas is a field label, as upstream's conversion has it; others are refused.
    ensure!(names(&c.admin.json(&["get", "rc", "--field-selector", "status.replicas=2"]).await?) == ["web"]);
    ensure!(names(&c.admin.json(&["get", "rc", "--field-selector", "status.replicas!=2"]).await?).is_empty());
    let err = c.admin.refused(&["get", "rc", "--field-selector", "spec.replicas=2"]).await?;
    ensure!(err.contains("field label not supported: spec.replicas"), "{err}");

    // Validation: a template its selector does not match.
    let bad = json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "bad"},
        "spec": {"selector": {"app": "other"}, "template": {"metadata": {"labels": {"app": "web"}},
                 "spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    let file = c.admin.file(&bad)?;
    let err = c.admin.refused(&["create", "-f", file.to_str().context("path")?]).await?;
    ensure!(err.contains("`selector` does not match template `labels`"), "{err}");
    Ok(())
}

/// A VolumeAttachment of persistent volume `pv` to `node`.
fn attachment(name: &str, pv: &str, node: &str) -> Value {
    json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": name},
           "spec": {"attacher": "csi.example.com", "nodeName": node, "source": {"persistentVolumeName": pv}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_objects_status_validation_and_tables() -> Result<()> {
    let c = Cluster::start().await?;
    let driver = c
        .admin.create(&json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": "csi.example.com"},
                        "spec": {"podInfoOnMount": true, "tokenRequests": [{"audience": "vault"}]}}))
        .await?;
    ensure!(
        driver["spec"]["attachRequired"] == true
            && driver["spec"]["volumeLifecycleModes"] == json!(["Persistent"])
            && driver["spec"]["fsGroupPolicy"] == "ReadWriteOnceWithFSType"
            && driver["metadata"].get("generation").is_none(),
        "{driver}"
    );
    // attachRequired is immutable; a spec change starts the generation at 1.
    let err = c
        .admin
        .refused(&["patch", "csidriver", "csi.example.com", "-p", r#"{"spec":{"attachRequired":false}}"#])
        .await?;
    ensure!(err.contains("spec.attachedRequired: Invalid value: false: field is immutable"), "{err}");
    c.admin
        .ok(&["patch", "csidriver", "csi.example.com", "-p", r#"{"spec":{"storageCapacity":true}}"#])
        .await?;
    ensure!(c.admin.json(&["get", "csidriver", "csi.example.com"]).await?["metadata"]["generation"] == 1);

    c.admin.create(&json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "node-1"},
        "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "node-1", "topologyKeys": ["topology.example.com/zone"],
                              "allocatable": {"count": 16}}]}}))
        .await?;
    let err = c
        .admin
        .refused(&[
            "patch",
            "csinode",
            "node-1",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/drivers/0/nodeID","value":"other"}]"#,
        ])
        .await?;
    ensure!(err.contains("spec.drivers: Invalid value") && err.contains("field is immutable"), "{err}");
    c.admin.create(&json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
        "metadata": {"name": "zone-a", "namespace": "kube-system"}, "storageClassName": "fast", "capacity": "2048Mi",
        "nodeTopology": {"matchLabels": {"topology.example.com/zone": "a"}}}))
        .await?;

    // A VolumeAttachment starts without status; the attacher reports through /status.
    let created = c.admin.create(&attachment("va-1", "pv-1", "node-1")).await?;
    ensure!(created.get("status").is_none() && created["metadata"].get("generation").is_none(), "{created}");
    c.admin.ok(&["patch", "volumeattachment", "va-1", "--subresource=status", "--type=merge", "-p",
           r#"{"status":{"attached":true,"attachmentMetadata":{"devicePath":"/dev/xvdb"}},"spec":{"nodeName":"node-2"}}"#])
        .await?;
    let va = c.admin.json(&["get", "volumeattachment", "va-1"]).await?;
    ensure!(va["status"]["attached"] == true && va["spec"]["nodeName"] == "node-1", "{va}");
    c.admin
        .ok(&[
            "patch",
            "volumeattachment",
            "va-1",
            "--type=merge",
            "-p",
            r#"{"status":{"attached":false},"metadata":{"labels":{"a":"b"}}}"#,
        ])
        .await?;
    let va = c.admin.json(&["get", "volumeattachment", "va-1"]).await?;
    ensure!(va["status"]["attached"] == true && va["metadata"]["labels"]["a"] == "b", "{va}");
    // The spec is read-only, and exactly one source is needed.
    let err = c
        .admin
        .refused(&["patch", "volumeattachment", "va-1", "-p", r#"{"spec":{"nodeName":"node-2"}}"#])
        .await?;
    ensure!(err.contains("spec: Invalid value") && err.contains("field is immutable"), "{err}");
    let mut sourceless = attachment("va-2", "pv-2", "node-1");
    sourceless["spec"]["source"] = json!({});
    let file = c.admin.file(&sourceless)?;
    let err = c.admin.refused(&["create", "-f", file.to_str().context("path")?]).await?;
    ensure!(err.contains("spec.source: Required value: must specify exactly one of inlineVolumeSpec and persistentVolumeName"), "{err}");

    // Upstream's printers.
    let table = rows(&c.admin.ok(&["get", "csidrivers"]).await?);
    ensure!(
        table[0]
            == [
                "NAME",
                "ATTACHREQUIRED",
                "PODINFOONMOUNT",
                "STORAGECAPACITY",
                "TOKENREQUESTS",
                "REQUIRESREPUBLISH",
                "MODES",
                "AGE"
            ],
        "{table:?}"
    );
    ensure!(
        table[1][..7] == ["csi.example.com", "true", "true", "true", "vault", "false", "Persistent"],
        "{table:?}"
    );
    let table = rows(&c.admin.ok(&["get", "csinodes"]).await?);
    ensure!(table[0] == ["NAME", "DRIVERS", "AGE"] && table[1][..2] == ["node-1", "1"], "{table:?}");
    let table = rows(&c.admin.ok(&["get", "csistoragecapacities", "-n", "kube-system"]).await?);
    ensure!(
        table == [vec!["NAME", "STORAGECLASSNAME", "CAPACITY"], vec!["zone-a", "fast", "2Gi"]],
        "{table:?}"
    );
    let table = rows(&c.admin.ok(&["get", "volumeattachments"]).await?);
    ensure!(table[0] == ["NAME", "ATTACHER", "PV", "NODE", "ATTACHED", "AGE"], "{table:?}");
    ensure!(table[1][..5] == ["va-1", "csi.example.com", "pv-1", "node-1", "true"], "{table:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dra_objects_status_field_selectors_and_tables() -> Result<()> {
    let c = Cluster::start().await?;
    let class = c
        .admin.create(&json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.example.com"},
                        "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]}}))
        .await?;
    ensure!(class["metadata"]["generation"] == 1, "{class}");
    for node in ["node-1", "node-2"] {
        let slice = c
            .admin.create(&json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": format!("{node}-gpu")},
                "spec": {"driver": "gpu.example.com", "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                         "devices": [{"name": "gpu-0", "attributes": {"model": {"string": "t4"}}}]}}))
            .await?;
        ensure!(slice["metadata"]["generation"] == 1, "{slice}");
    }
    c.admin.create(&json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": "shared"},
        "spec": {"driver": "net.example.com", "allNodes": true, "pool": {"name": "fabric", "resourceSliceCount": 1}}}))
        .await?;
    // The kubelet's and the scheduler's field selectors.
    let on_node_1 =
        c.admin.json(&["get", "resourceslices", "--field-selector", "spec.nodeName=node-1"]).await?;
    ensure!(names(&on_node_1) == ["node-1-gpu"], "{on_node_1}");
    let gpus =
        c.admin.json(&["get", "resourceslices", "--field-selector", "spec.driver=gpu.example.com"]).await?;
    ensure!(names(&gpus) == ["node-1-gpu", "node-2-gpu"], "{gpus}");
    let unset = c.admin.json(&["get", "resourceslices", "--field-selector", "spec.nodeName="]).await?;
    ensure!(names(&unset) == ["shared"], "{unset}");
    // The pool name is immutable.
    let err = c
        .admin
        .refused(&[
            "patch",
            "resourceslice",
            "shared",
            "--type=merge",
            "-p",
            r#"{"spec":{"pool":{"name":"other"}}}"#,
        ])
        .await?;
    ensure!(err.contains("spec.pool.name: Invalid value: \"other\": field is immutable"), "{err}");

    let claim = c
        .admin.create(&json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "gpu"},
            "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
            "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}}))
        .await?;
    ensure!(
        claim.get("status").is_none()
            && claim["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] == "ExactCount"
            && claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1
            && claim["metadata"].get("generation").is_none(),
        "{claim}"
    );
    let table = rows(&c.admin.ok(&["get", "resourceclaims"]).await?);
    ensure!(table[0] == ["NAME", "STATE", "AGE"] && table[1][..2] == ["gpu", "pending"], "{table:?}");
    // The scheduler allocates and reserves through /status.
    let status = r#"{"status": {"allocation": {"devices": {"results": [{"request": "g", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "u-1"}]}}"#;
    c.admin
        .ok(&["patch", "resourceclaim", "gpu", "--subresource=status", "--type=merge", "-p", status])
        .await?;
    let table = rows(&c.admin.ok(&["get", "resourceclaim", "gpu"]).await?);
    ensure!(table[1][..2] == ["gpu", "allocated,reserved"], "{table:?}");
    // The main resource keeps the status; the spec is immutable.
    c.admin
        .ok(&[
            "patch",
            "resourceclaim",
            "gpu",
            "--type=merge",
            "-p",
            r#"{"status":null,"metadata":{"labels":{"a":"b"}}}"#,
        ])
        .await?;
    let claim = c.admin.json(&["get", "resourceclaim", "gpu"]).await?;
    ensure!(
        claim["status"]["reservedFor"][0]["uid"] == "u-1" && claim["metadata"]["labels"]["a"] == "b",
        "{claim}"
    );
    let err = c
        .admin
        .refused(&[
            "patch",
            "resourceclaim",
            "gpu",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/devices/requests/0/exactly/count","value":2}]"#,
        ])
        .await?;
    ensure!(err.contains("spec: Invalid value") && err.contains("field is immutable"), "{err}");

    let table = rows(&c.admin.ok(&["get", "deviceclasses"]).await?);
    ensure!(table[0] == ["NAME", "AGE"] && table[1][0] == "gpu.example.com", "{table:?}");
    let table = rows(&c.admin.ok(&["get", "resourceslices"]).await?);
    ensure!(table[0] == ["NAME", "NODE", "DRIVER", "POOL", "AGE"], "{table:?}");
    ensure!(table[1][..4] == ["node-1-gpu", "node-1", "gpu.example.com", "node-1"], "{table:?}");
    ensure!(table[3][..3] == ["shared", "net.example.com", "fabric"], "no node: an empty cell: {table:?}");
    Ok(())
}

/// kubectl api-resources and both discovery forms list the new resources as kube-apiserver does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_of_the_scheduler_resources() -> Result<()> {
    let c = Cluster::start().await?;
    let listed = |text: &str| -> Vec<Vec<String>> { rows(text).into_iter().skip(1).collect() };
    let dra = listed(&c.admin.ok(&["api-resources", "--api-group=resource.k8s.io"]).await?);
    ensure!(
        dra == [
            vec!["deviceclasses", "resource.k8s.io/v1", "false", "DeviceClass"],
            vec!["resourceclaims", "resource.k8s.io/v1", "true", "ResourceClaim"],
            vec!["resourceslices", "resource.k8s.io/v1", "false", "ResourceSlice"],
        ],
        "{dra:?}"
    );
    let storage = listed(&c.admin.ok(&["api-resources", "--api-group=storage.k8s.io"]).await?);
    let storage: Vec<&str> = storage.iter().map(|r| r[0].as_str()).collect();
    ensure!(
        storage == ["csidrivers", "csinodes", "csistoragecapacities", "storageclasses", "volumeattachments"],
        "{storage:?}"
    );
    let core = c.admin.ok(&["api-resources", "--categories=all"]).await?;
    ensure!(
        core.lines().any(|l| l.split_whitespace().eq([
            "replicationcontrollers",
            "rc",
            "v1",
            "true",
            "ReplicationController"
        ])),
        "{core}"
    );

    let (status, groups) = c.request("GET", "/apis", &Value::Null).await?;
    let last = groups["groups"].as_array().and_then(|g| g.last()).cloned().unwrap_or_default();
    ensure!(status == 200 && last["name"] == "resource.k8s.io", "{groups}");
    ensure!(last["preferredVersion"]["groupVersion"] == "resource.k8s.io/v1", "{last}");
    let (status, list) = c.request("GET", "/apis/resource.k8s.io/v1", &Value::Null).await?;
    let names: Vec<&str> =
        list["resources"].as_array().into_iter().flatten().filter_map(|r| r["name"].as_str()).collect();
    ensure!(
        status == 200
            && names == ["deviceclasses", "resourceclaims", "resourceclaims/status", "resourceslices"],
        "{list}"
    );
    let (_, core) = c.request("GET", "/api/v1", &Value::Null).await?;
    let scale = core["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["name"] == "replicationcontrollers/scale");
    ensure!(
        scale.is_some_and(|s| s["kind"] == "Scale" && s["group"] == "autoscaling" && s["version"] == "v1"),
        "{core}"
    );
    // The OpenAPI document of the new group, which kubectl explain reads.
    let explained =
        c.admin.ok(&["explain", "resourceclaims.spec.devices.requests.exactly.allocationMode"]).await?;
    ensure!(explained.contains("ExactCount"), "{explained}");
    let explained = c.admin.ok(&["explain", "rc.spec.selector"]).await?;
    ensure!(explained.contains("map[string]string"), "{explained}");
    Ok(())
}
