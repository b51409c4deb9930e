//! The official Python `kubernetes` client (PyPI, installed by `cargo xtask deps`) against
//! keel-apiserver: CRUD, label and field selectors, pagination, a watch resumed from a
//! resourceVersion, JSON, merge and strategic merge patches, and errors as ApiExceptions — on the
//! embedded store and on etcd.

mod common;

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
