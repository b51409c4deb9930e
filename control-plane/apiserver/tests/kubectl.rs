//! kubectl against keel-apiserver on the embedded store (and on etcd), over HTTPS as the admin, with JSON
//! bodies: kubectl 1.27 to 1.31 (1.32+ sends protobuf on create, which is issue 5's).

use crate::common;

use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use common::{kubectl_ok as ok, kubectl_run as run};
use keel_apiserver::ApiServer;
use keel_store::Store;
use keel_store::embedded::{EmbeddedStore, Options};
use keel_store::etcd::{EtcdOptions, EtcdStore};
use keel_testbed::etcd::EtcdCluster;
use keel_testbed::kubectl;
use serde_json::Value;

/// A server on a loopback port with its kubeconfig.
struct Cluster {
    kubeconfig: std::path::PathBuf,
    _server: tokio::task::JoinHandle<std::io::Result<()>>,
    _etcd: Option<EtcdCluster>,
    _dir: tempfile::TempDir,
}

/// Which store the server runs on.
#[derive(Debug, Clone, Copy)]
enum Backend {
    Embedded,
    Etcd,
}

async fn start() -> Result<Cluster> {
    start_on(Backend::Embedded).await
}

async fn start_on(backend: Backend) -> Result<Cluster> {
    let dir = tempfile::tempdir()?;
    let (store, etcd): (Arc<dyn Store>, _) = match backend {
        Backend::Embedded => (Arc::new(EmbeddedStore::open(Options::new(dir.path().join("data")))?), None),
        Backend::Etcd => {
            let etcd = EtcdCluster::start(1)?;
            let store = EtcdStore::connect(EtcdOptions::new(etcd.client_urls()).prefix("/keel")).await?;
            (Arc::new(store), Some(etcd))
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?.to_string();
    let pki = keel_apiserver::pki::ensure(&dir.path().join("pki"), &[])?;
    let tls = keel_apiserver::auth::server_config(&pki)?;
    let server = ApiServer::new(store, keel_apiserver::Config::new(address.parse()?)).await?;
    let serving = tokio::spawn(server.serve(listener, tls));
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, pki.admin_kubeconfig(&format!("https://{address}")))?;
    Ok(Cluster { kubeconfig, _server: serving, _etcd: etcd, _dir: dir })
}

async fn crud_with(minor: u32, backend: Backend) -> Result<()> {
    let kubectl = kubectl::minor(minor)?;
    let cluster = start_on(backend).await?;
    let k = cluster.kubeconfig.as_path();
    let version: Value = serde_json::from_str(&ok(&kubectl, k, &["version", "-o", "json"]).await?)?;
    ensure!(version["serverVersion"]["minor"] == "34", "{version}");

    let resources = ok(&kubectl, k, &["api-resources", "--no-headers"]).await?;
    for line in ["deployments", "pods", "configmaps", "leases", "storageclasses"] {
        ensure!(resources.lines().any(|l| l.starts_with(line)), "api-resources lacks {line}:\n{resources}");
    }
    ensure!(resources.lines().any(|l| l.split_whitespace().take(2).eq(["pods", "po"])), "{resources}");

    let namespaces =
        ok(&kubectl, k, &["get", "namespaces", "-o", "jsonpath={.items[*].metadata.name}"]).await?;
    ensure!(
        namespaces.split(' ').collect::<Vec<_>>()
            == ["default", "kube-node-lease", "kube-public", "kube-system"],
        "{namespaces}"
    );

    ok(&kubectl, k, &["create", "namespace", "team-a"]).await?;
    ok(&kubectl, k, &["create", "configmap", "cfg", "-n", "team-a", "--from-literal=a=b"]).await?;
    let value =
        ok(&kubectl, k, &["get", "configmap", "cfg", "-n", "team-a", "-o", "jsonpath={.data.a}"]).await?;
    ensure!(value == "b", "{value}");
    let object: Value =
        serde_json::from_str(&ok(&kubectl, k, &["get", "cm", "cfg", "-n", "team-a", "-o", "json"]).await?)?;
    ensure!(object["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36), "{object}");
    ensure!(
        object["metadata"]["resourceVersion"].as_str().is_some_and(|rv| rv.parse::<u64>().is_ok()),
        "{object}"
    );

    // label and annotate (merge patches), patch --type=merge and --type=json.
    ok(&kubectl, k, &["label", "configmap", "cfg", "-n", "team-a", "tier=web"]).await?;
    ok(&kubectl, k, &["annotate", "configmap", "cfg", "-n", "team-a", "note=hi"]).await?;
    ok(
        &kubectl,
        k,
        &["patch", "configmap", "cfg", "-n", "team-a", "--type=merge", "-p", r#"{"data":{"c":"d"}}"#],
    )
    .await?;
    let json_patch =
        r#"[{"op":"test","path":"/data/a","value":"b"},{"op":"replace","path":"/data/a","value":"z"}]"#;
    ok(&kubectl, k, &["patch", "configmap", "cfg", "-n", "team-a", "--type=json", "-p", json_patch]).await?;
    let object: Value =
        serde_json::from_str(&ok(&kubectl, k, &["get", "cm", "cfg", "-n", "team-a", "-o", "json"]).await?)?;
    ensure!(
        object["metadata"]["labels"]["tier"] == "web" && object["metadata"]["annotations"]["note"] == "hi",
        "{object}"
    );
    ensure!(object["data"] == serde_json::json!({"a": "z", "c": "d"}), "{object}");
    // A failing test op changes nothing and says why (422).
    let (success, _, err) =
        run(&kubectl, k, &["patch", "configmap", "cfg", "-n", "team-a", "--type=json", "-p", json_patch])
            .await?;
    ensure!(!success && err.contains("could not be applied"), "{err}");
    let stale = r#"{"metadata":{"resourceVersion":"1"},"data":{"x":"y"}}"#;
    let (success, _, err) =
        run(&kubectl, k, &["patch", "configmap", "cfg", "-n", "team-a", "--type=merge", "-p", stale]).await?;
    ensure!(!success && err.contains("the object has been modified"), "{err}");

    // Selectors, also with chunks (pages are read until enough objects match).
    ok(&kubectl, k, &["create", "configmap", "other", "-n", "team-a"]).await?;
    let selected = ok(&kubectl, k, &["get", "cm", "-n", "team-a", "-l", "tier=web", "-o", "name"]).await?;
    ensure!(selected.trim() == "configmap/cfg", "{selected}");
    let selected =
        ok(&kubectl, k, &["get", "cm", "-n", "team-a", "-l", "tier!=web", "--chunk-size=1", "-o", "name"])
            .await?;
    ensure!(selected.trim() == "configmap/other", "{selected}");
    let selected =
        ok(&kubectl, k, &["get", "cm", "-A", "--field-selector", "metadata.name=other", "-o", "name"])
            .await?;
    ensure!(selected.trim() == "configmap/other", "{selected}");
    let (success, _, err) = run(&kubectl, k, &["get", "cm", "--field-selector", "data.a=b"]).await?;
    ensure!(!success && err.contains("field label not supported: data.a"), "{err}");

    let printed = ok(&kubectl, k, &["get", "cm", "cfg", "-n", "team-a", "-o", "yaml"]).await?;
    ensure!(printed.contains("tier: web"), "{printed}");

    // Pagination: kubectl lists in chunks of one, following continue tokens.
    let chunked = ok(&kubectl, k, &["get", "namespaces", "--chunk-size=1", "-o", "name"]).await?;
    ensure!(chunked.lines().count() == 5, "{chunked}");
    // Server-side printing: upstream's columns.
    let table = ok(&kubectl, k, &["get", "configmaps", "-n", "team-a"]).await?;
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    ensure!(header == ["NAME", "DATA", "AGE"], "{table}");
    ensure!(table.lines().any(|l| l.split_whitespace().take(2).eq(["cfg", "2"])), "{table}");
    let services = ok(&kubectl, k, &["get", "services"]).await?;
    let header: Vec<&str> = services.lines().next().unwrap_or_default().split_whitespace().collect();
    ensure!(header == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"], "{services}");
    ensure!(
        services.lines().any(|l| l.split_whitespace().take(5).eq([
            "kubernetes",
            "ClusterIP",
            "10.0.0.1",
            "<none>",
            "443/TCP"
        ])),
        "{services}"
    );
    let namespaces = ok(&kubectl, k, &["get", "namespace", "team-a"]).await?;
    ensure!(
        namespaces.lines().nth(1).is_some_and(|l| l.split_whitespace().take(2).eq(["team-a", "Active"])),
        "{namespaces}"
    );
    ok(&kubectl, k, &["create", "deployment", "web", "-n", "team-a", "--image=busybox:1.36", "--replicas=3"])
        .await?;
    let wide = ok(&kubectl, k, &["get", "deployments", "-n", "team-a", "-o", "wide"]).await?;
    let header: Vec<&str> = wide.lines().next().unwrap_or_default().split_whitespace().collect();
    ensure!(
        header == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"],
        "{wide}"
    );
    ensure!(
        wide.lines()
            .nth(1)
            .is_some_and(|l| l.contains("0/3") && l.contains("busybox:1.36") && l.contains("app=web")),
        "{wide}"
    );

    // Already exists, missing namespace: Kubernetes' answers, which kubectl prints.
    let (success, _, err) = run(&kubectl, k, &["create", "configmap", "cfg", "-n", "team-a"]).await?;
    ensure!(!success && err.contains(r#"configmaps "cfg" already exists"#), "{err}");
    let (success, _, err) = run(&kubectl, k, &["create", "configmap", "x", "-n", "missing"]).await?;
    ensure!(!success && err.contains(r#"namespaces "missing" not found"#), "{err}");

    ok(&kubectl, k, &["delete", "configmap", "cfg", "-n", "team-a"]).await?;
    let (success, _, err) = run(&kubectl, k, &["get", "configmap", "cfg", "-n", "team-a"]).await?;
    ensure!(!success && err.contains(r#"configmaps "cfg" not found"#), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_31_crud() -> Result<()> {
    crud_with(31, Backend::Embedded).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_31_crud_on_etcd() -> Result<()> {
    crud_with(31, Backend::Etcd).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_27_crud() -> Result<()> {
    crud_with(27, Backend::Embedded).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_28_crud() -> Result<()> {
    crud_with(28, Backend::Embedded).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_29_crud() -> Result<()> {
    crud_with(29, Backend::Embedded).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_30_crud() -> Result<()> {
    crud_with(30, Backend::Embedded).await
}

/// Reads kubectl's `-o json --output-watch-events` output until `count` events came.
async fn read_events(
    stdout: &mut tokio::process::ChildStdout,
    seen: &mut String,
    count: usize,
) -> Result<Vec<Value>> {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut buffer = [0u8; 4096];
    loop {
        let events: Vec<Value> =
            serde_json::Deserializer::from_str(seen).into_iter().filter_map(Result::ok).collect();
        if events.len() >= count {
            return Ok(events);
        }
        let read =
            tokio::time::timeout_at(deadline, stdout.read(&mut buffer)).await.context("watch events")??;
        ensure!(read > 0, "kubectl's watch ended: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buffer[..read]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watch_sees_create_replace_delete() -> Result<()> {
    let kubectl = kubectl::minor(31)?;
    let cluster = start().await?;
    let k = cluster.kubeconfig.as_path();
    ok(&kubectl, k, &["create", "configmap", "marker"]).await?;
    let mut watch = tokio::process::Command::from(kubectl.command());
    watch
        .arg("--kubeconfig")
        .arg(k)
        .args(["get", "configmaps", "-n", "default", "--watch", "-o", "json", "--output-watch-events"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut watch = watch.spawn()?;
    let mut stdout = watch.stdout.take().context("watch stdout")?;
    let mut seen = String::new();
    // The list kubectl starts with shows the marker; everything after it comes through the watch.
    let listed = read_events(&mut stdout, &mut seen, 1).await?;
    ensure!(listed[0]["object"]["metadata"]["name"] == "marker", "{listed:?}");

    ok(&kubectl, k, &["create", "configmap", "w", "--from-literal=v=1"]).await?;
    let mut object: Value = serde_json::from_str(&ok(&kubectl, k, &["get", "cm", "w", "-o", "json"]).await?)?;
    object["data"]["v"] = "2".into();
    let file = cluster._dir.path().join("w.json");
    std::fs::write(&file, object.to_string())?;
    let file = file.to_str().context("path")?;
    ok(&kubectl, k, &["replace", "-f", file]).await?;
    // The same resourceVersion again is stale: Kubernetes' conflict.
    let (success, _, err) = run(&kubectl, k, &["replace", "-f", file]).await?;
    ensure!(!success && err.contains("the object has been modified"), "{err}");
    ok(&kubectl, k, &["delete", "configmap", "w"]).await?;

    let events = read_events(&mut stdout, &mut seen, 4).await?;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    ensure!(kinds == ["ADDED", "ADDED", "MODIFIED", "DELETED"], "{kinds:?}");
    ensure!(events[2]["object"]["data"]["v"] == "2");
    ensure!(events[3]["object"]["metadata"]["name"] == "w");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_watch_prints_table_rows() -> Result<()> {
    use tokio::io::AsyncBufReadExt;
    let kubectl = kubectl::minor(31)?;
    let cluster = start().await?;
    let k = cluster.kubeconfig.as_path();
    ok(&kubectl, k, &["create", "configmap", "first", "--from-literal=a=b"]).await?;
    let mut watch = tokio::process::Command::from(kubectl.command());
    watch
        .arg("--kubeconfig")
        .arg(k)
        .args(["get", "configmaps", "--watch"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut watch = watch.spawn()?;
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().context("stdout")?).lines();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut next = async || -> Result<String> {
        tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .context("watch output")??
            .context("watch ended")
    };
    let header = next().await?;
    ensure!(header.split_whitespace().collect::<Vec<_>>() == ["NAME", "DATA", "AGE"], "{header}");
    let mut row = next().await?;
    while !row.starts_with("first") {
        row = next().await?;
    }
    ensure!(row.split_whitespace().take(2).eq(["first", "1"]), "{row}");
    // A change made now arrives as a row of the same table (no second header).
    ok(&kubectl, k, &["create", "configmap", "second"]).await?;
    let mut row = next().await?;
    while !row.starts_with("second") {
        ensure!(!row.starts_with("NAME"), "a second header: {row}");
        row = next().await?;
    }
    ensure!(row.split_whitespace().take(2).eq(["second", "0"]), "{row}");
    Ok(())
}
