//! kube-rs, the client Keel's own components use, against the keel-apiserver binary: typed CRUD, and
//! watcher-fed reflectors over pods (list-then-watch, and streaming lists) that go on through an
//! apiserver restart, on the embedded store and on etcd.

use crate::common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::{WatchStreamExt, reflector, watcher};

fn pod(name: &str) -> Result<Pod> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {"app": "kube-rs"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]}
    }))?)
}

/// Waits until the reflector's store holds exactly `names`.
async fn wait_for(store: &reflector::Store<Pod>, names: &[&str]) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut have: Vec<String> = store.state().iter().filter_map(|p| p.metadata.name.clone()).collect();
        have.sort();
        if have == names {
            return Ok(());
        }
        ensure!(tokio::time::Instant::now() < deadline, "the reflector holds {have:?}, expected {names:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_over_pods_survives_an_apiserver_restart() -> Result<()> {
    reflectors(None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_over_pods_survives_an_apiserver_restart_on_etcd() -> Result<()> {
    let etcd = keel_testbed::etcd::EtcdCluster::start(1)?;
    reflectors(Some(&etcd)).await
}

/// The apiserver binary on the embedded store, or on `etcd` (its data dir then holds only the PKI).
async fn reflectors(etcd: Option<&keel_testbed::etcd::EtcdCluster>) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let args: Vec<String> =
        etcd.map(|etcd| format!("--etcd-servers={}", etcd.client_urls().join(","))).into_iter().collect();
    let common::KeelBinary { daemon: mut server, kubeconfig: kubeconfig_path, .. } =
        tokio::task::block_in_place(|| common::keel_binary(&data, &args))?;

    let kubeconfig = Kubeconfig::read_from(&kubeconfig_path)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("a")?).await?;
    pods.create(&PostParams::default(), &pod("b")?).await?;
    let listed = pods.list(&ListParams::default().labels("app=kube-rs")).await?;
    ensure!(listed.items.len() == 2, "{:?}", listed.items.len());
    let fetched = pods.get("a").await?;
    ensure!(fetched.metadata.uid.is_some() && fetched.spec.is_some());

    let (store, writer) = reflector::store();
    let stream = reflector(writer, watcher(pods.clone(), watcher::Config::default())).applied_objects();
    let driver = tokio::spawn(stream.for_each(|_| std::future::ready(())));
    wait_for(&store, &["a", "b"]).await?;
    // A second one on streaming lists: one watch with sendInitialEvents=true, which needs the bookmark
    // ending the initial events to be ready.
    let (streamed, writer) = reflector::store();
    let config = watcher::Config::default().streaming_lists();
    let stream = reflector(writer, watcher(pods.clone(), config)).applied_objects();
    let streaming = tokio::spawn(stream.for_each(|_| std::future::ready(())));
    wait_for(&streamed, &["a", "b"]).await?;

    server.restart().context("restarting keel-apiserver")?;
    // After the restart the watch resumes (or relists) and sees what changes next.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match pods.create(&PostParams::default(), &pod("c")?).await {
            Ok(_) => break,
            Err(error) if tokio::time::Instant::now() < deadline => {
                eprintln!("apiserver not back yet: {error}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(error) => return Err(error.into()),
        }
    }
    wait_for(&store, &["a", "b", "c"]).await?;
    wait_for(&streamed, &["a", "b", "c"]).await?;
    pods.delete("a", &DeleteParams::default()).await?;
    wait_for(&store, &["b", "c"]).await?;
    wait_for(&streamed, &["b", "c"]).await?;
    driver.abort();
    streaming.abort();
    Ok(())
}
