//! The official Python `kubernetes` client (PyPI, installed by `cargo xtask deps`) against
//! keel-apiserver: CRUD, label and field selectors, pagination, a watch resumed from a
//! resourceVersion, JSON, merge and strategic merge patches, errors as ApiExceptions, the dynamic
//! client and `utils.create_from_yaml` — on the embedded store and on etcd.

use crate::common;

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_crud_selectors_pagination_watch_patch() -> Result<()> {
    run(common::Server::start().await?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_on_etcd() -> Result<()> {
    let etcd = keel_testbed::etcd::EtcdCluster::start(1)?;
    let options = keel_store::etcd::EtcdOptions::new(etcd.client_urls()).prefix("/keel");
    let store = std::sync::Arc::new(keel_store::etcd::EtcdStore::connect(options).await?);
    run(common::Server::start_on(store, tempfile::tempdir()?).await?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_dynamic_client_and_create_from_yaml() -> Result<()> {
    dynamic(common::Server::start().await?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_dynamic_client_on_etcd() -> Result<()> {
    let etcd = keel_testbed::etcd::EtcdCluster::start(1)?;
    let options = keel_store::etcd::EtcdOptions::new(etcd.client_urls()).prefix("/keel");
    let store = std::sync::Arc::new(keel_store::etcd::EtcdStore::connect(options).await?);
    dynamic(common::Server::start_on(store, tempfile::tempdir()?).await?).await
}

/// `dynamic.py`: create_from_yaml of a four-document manifest, then the dynamic client's discovery,
/// get, list, strategic merge patch, replace and delete.
async fn dynamic(server: common::Server) -> Result<()> {
    let python = keel_testbed::python::python()?;
    let kubeconfig = server.dir.path().join("admin.kubeconfig");
    std::fs::write(&kubeconfig, server.pki.admin_kubeconfig(&format!("https://{}", server.address)))?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/dynamic.py");
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/manifest.yaml");
    let output =
        tokio::process::Command::new(python).arg(script).arg(&kubeconfig).arg(manifest).output().await?;
    ensure!(output.status.success(), "dynamic.py failed: {}", String::from_utf8_lossy(&output.stderr));
    let results: Value = serde_json::from_slice(&output.stdout).context("dynamic.py output")?;
    ensure!(
        results["created"] == json!(["ConfigMap/settings", "Deployment/web", "Namespace/dyn", "Service/web"]),
        "{results}"
    );
    ensure!(results["deployment_namespaced"] == json!(true), "{results}");
    ensure!(results["listed"] == json!(["web"]), "{results}");
    ensure!(results["replicas"] == json!(2), "{results}");
    ensure!(results["patched"] == json!([["web", "busybox:2"], ["sidecar", "busybox:1"]]), "{results}");
    ensure!(results["replaced"] == json!({"a": "2"}), "{results}");
    ensure!(results["deleted"] == json!(404), "{results}");
    ensure!(results["service_ports"] == json!([80]), "{results}");
    Ok(())
}

async fn run(server: common::Server) -> Result<()> {
    let python = keel_testbed::python::python()?;
    let kubeconfig = server.dir.path().join("admin.kubeconfig");
    std::fs::write(&kubeconfig, server.pki.admin_kubeconfig(&format!("https://{}", server.address)))?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/client.py");
    let output = tokio::process::Command::new(python).arg(script).arg(&kubeconfig).output().await?;
    ensure!(output.status.success(), "client.py failed: {}", String::from_utf8_lossy(&output.stderr));
    let results: Value = serde_json::from_slice(&output.stdout).context("client.py output")?;
    ensure!(results["even"] == json!(["cm-0", "cm-2", "cm-4"]), "{results}");
    ensure!(results["by_name"] == json!(["cm-3"]), "{results}");
    ensure!(results["paged"] == json!(["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]), "{results}");
    ensure!(results["watch"] == json!([["DELETED", "cm-0"], ["ADDED", "cm-late"]]), "{results}");
    ensure!(results["patched"] == json!({"i": "1", "j": "json", "m": "merge"}), "{results}");
    ensure!(results["strategic"] == json!([{"p": "s"}, [["a", "busybox:2"]]]), "{results}");
    ensure!(results["missing"] == json!([404, "NotFound"]), "{results}");
    ensure!(results["duplicate"] == json!([409, "AlreadyExists"]), "{results}");
    Ok(())
}
