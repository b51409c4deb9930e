//! Defaulting and the admission chain on create: pod spec defaults, ServiceAccount,
//! DefaultTolerationSeconds, Priority, LimitRanger, DefaultStorageClass.

use crate::common;

use anyhow::{Result, ensure};
use common::Server;
use serde_json::{Value, json};

const JSON: [(&str, &str); 1] = [("Content-Type", "application/json")];

async fn create(server: &Server, path: &str, object: &Value) -> Result<(u16, Value)> {
    let (status, _, body) = server.request("POST", path, &JSON, object.to_string().as_bytes()).await?;
    Ok((status, serde_json::from_str(&body)?))
}

fn pod(name: &str) -> Value {
    json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_defaulted_and_admitted() -> Result<()> {
    let server = Server::start().await?;
    let pods = "/api/v1/namespaces/default/pods";
    let (status, p) = create(&server, pods, &pod("plain")).await?;
    ensure!(status == 201, "{p}");
    let spec = &p["spec"];
    ensure!(spec["serviceAccountName"] == "default" && spec["priority"] == 0, "{p}");
    ensure!(spec["dnsPolicy"] == "ClusterFirst" && spec["restartPolicy"] == "Always", "{p}");
    ensure!(spec["containers"][0]["imagePullPolicy"] == "IfNotPresent", "{p}");
    let keys: Vec<&str> =
        spec["tolerations"].as_array().into_iter().flatten().filter_map(|t| t["key"].as_str()).collect();
    ensure!(keys == ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"], "{keys:?}");
    ensure!(p["status"]["phase"] == "Pending" && p["status"]["qosClass"] == "BestEffort", "{p}");

    let mut missing = pod("missing-sa");
    missing["spec"]["serviceAccountName"] = "nobody".into();
    let (status, answer) = create(&server, pods, &missing).await?;
    ensure!(
        status == 403
            && answer["message"].as_str().is_some_and(|m| m.contains("serviceaccount \"nobody\" not found")),
        "{answer}"
    );

    let mut critical = pod("critical");
    critical["spec"]["priorityClassName"] = "system-node-critical".into();
    let (status, p) = create(&server, pods, &critical).await?;
    ensure!(status == 201 && p["spec"]["priority"] == 2_000_001_000, "{p}");
    let mut unknown = pod("unknown-class");
    unknown["spec"]["priorityClassName"] = "gold".into();
    let (status, answer) = create(&server, pods, &unknown).await?;
    ensure!(
        status == 403
            && answer["message"].as_str().is_some_and(|m| m.contains("no PriorityClass with name gold")),
        "{answer}"
    );

    let class = json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"}, "value": 1000, "globalDefault": true});
    ensure!(create(&server, "/apis/scheduling.k8s.io/v1/priorityclasses", &class).await?.0 == 201);
    let limits = json!({"metadata": {"name": "defaults"}, "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "100m", "memory": "64Mi"}}]}});
    ensure!(create(&server, "/api/v1/namespaces/default/limitranges", &limits).await?.0 == 201);
    let (status, p) = create(&server, pods, &pod("later")).await?;
    ensure!(
        status == 201 && p["spec"]["priority"] == 1000 && p["spec"]["priorityClassName"] == "high",
        "{p}"
    );
    let resources = &p["spec"]["containers"][0]["resources"];
    ensure!(
        resources == &json!({"limits": {"cpu": "500m"}, "requests": {"cpu": "100m", "memory": "64Mi"}}),
        "{resources}"
    );
    ensure!(p["status"]["qosClass"] == "Burstable", "{p}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_get_a_service_account_and_claims_a_storage_class() -> Result<()> {
    let server = Server::start().await?;
    ensure!(create(&server, "/api/v1/namespaces", &json!({"metadata": {"name": "team"}})).await?.0 == 201);
    let (status, _, sa) =
        server.request("GET", "/api/v1/namespaces/team/serviceaccounts/default", &[], b"").await?;
    ensure!(status == 200, "{sa}");
    for system in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let (status, _, _) = server
            .request("GET", &format!("/api/v1/namespaces/{system}/serviceaccounts/default"), &[], b"")
            .await?;
        ensure!(status == 200, "no default service account in {system}");
    }
    let class = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "keel.dev/none",
                       "metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}});
    ensure!(create(&server, "/apis/storage.k8s.io/v1/storageclasses", &class).await?.0 == 201);
    let claim = json!({"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}});
    let (status, claim) = create(&server, "/api/v1/namespaces/team/persistentvolumeclaims", &claim).await?;
    ensure!(status == 201 && claim["spec"]["storageClassName"] == "standard", "{claim}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_without_its_account_gets_it_at_start() -> Result<()> {
    // A namespace whose create stopped before its account was made (a timeout, a crash).
    let dir = tempfile::tempdir()?;
    let store: std::sync::Arc<dyn keel_store::Store> =
        std::sync::Arc::new(keel_store::embedded::EmbeddedStore::open(keel_store::embedded::Options::new(
            dir.path().join("data"),
        ))?);
    let namespace = r#"{"metadata":{"name":"orphan","uid":"u1"},"apiVersion":"v1","kind":"Namespace","spec":{"finalizers":["kubernetes"]},"status":{"phase":"Active"}}"#;
    store.put("/registry/namespaces/orphan", namespace.into()).await?;
    let server = Server::start_on(store, dir).await?;
    let (status, _, body) =
        server.request("GET", "/api/v1/namespaces/orphan/serviceaccounts/default", &[], b"").await?;
    ensure!(status == 200, "{status} {body}");
    Ok(())
}
