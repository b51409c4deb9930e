//! The official JavaScript client, @kubernetes/client-node 1.4 (npm, installed by `cargo xtask
//! deps`) on Node.js 20, against keel-apiserver: list with selectors and pages, a watch resumed from a
//! resourceVersion, an informer, JSON, merge and strategic merge patches, and errors — on the
//! embedded store and on etcd.

use crate::common;

use anyhow::{Context, Result, ensure};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_node_list_watch_patch() -> Result<()> {
    run(common::Server::start().await?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_node_on_etcd() -> Result<()> {
    let etcd = keel_testbed::etcd::EtcdCluster::start(1)?;
    let options = keel_store::etcd::EtcdOptions::new(etcd.client_urls()).prefix("/keel");
    let store = std::sync::Arc::new(keel_store::etcd::EtcdStore::connect(options).await?);
    run(common::Server::start_on(store, tempfile::tempdir()?).await?).await
}

async fn run(server: common::Server) -> Result<()> {
    let client = keel_testbed::node::client()?;
    let kubeconfig = server.dir.path().join("admin.kubeconfig");
    std::fs::write(&kubeconfig, server.pki.admin_kubeconfig(&format!("https://{}", server.address)))?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/node/client.mjs");
    let output = tokio::process::Command::new("node")
        .arg(script)
        .arg(&client)
        .arg(&kubeconfig)
        .kill_on_drop(true)
        .output()
        .await?;
    ensure!(output.status.success(), "client.mjs failed: {}", String::from_utf8_lossy(&output.stderr));
    let results: Value = serde_json::from_slice(&output.stdout).context("client.mjs output")?;
    ensure!(results["even"] == json!(["cm-0", "cm-2", "cm-4"]), "{results}");
    ensure!(results["byName"] == json!(["cm-3"]), "{results}");
    ensure!(results["paged"] == json!(["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]), "{results}");
    ensure!(
        results["watch"] == json!([["DELETED", "cm-0"], ["ADDED", "cm-late"], ["MODIFIED", "cm-late"]]),
        "{results}"
    );
    ensure!(results["informerListed"] == json!(["cm-1", "cm-2", "cm-3", "cm-4", "cm-late"]), "{results}");
    ensure!(results["patched"] == json!({"i": "1", "j": "json", "m": "merge"}), "{results}");
    ensure!(results["strategic"] == json!([["a", "busybox:1"], ["b", "busybox:2"]]), "{results}");
    ensure!(results["missing"] == json!([404, "NotFound"]), "{results}");
    ensure!(results["duplicate"] == json!([409, "AlreadyExists"]), "{results}");
    Ok(())
}
