//! Pod deletion as watchers see it, compared with kube-apiserver v1.34: for each way a pod is
//! deleted (force with grace 0, a bare delete of an unscheduled pod, a bare delete of a finished
//! one, a graceful delete and then a forced one), the watch events of the pod — their types, and
//! the deletionTimestamp, deletionGracePeriodSeconds and generation of each object — must be the
//! same on keel-apiserver and on kube-apiserver. A kubelet reads the grace period of a force
//! delete from these (keel-kubelet's pod test found keel-apiserver deleting grace-0 pods without
//! writing either field first).

use crate::common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use keel_testbed::kube_apiserver::KubeApiServer;
use kube::api::{Api, DeleteParams, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

async fn client(kubeconfig: &std::path::Path) -> Result<kube::Client> {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

fn pod(name: &str, node: Option<&str>) -> Result<Pod> {
    let mut spec =
        json!({"containers": [{"name": "c", "image": "busybox"}], "automountServiceAccountToken": false});
    if let Some(node) = node {
        spec["nodeName"] = node.into();
    }
    Ok(serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec}))?)
}

/// What a watcher sees of one object: the event type and the deletion fields.
fn seen(kind: &str, pod: &Pod) -> Value {
    json!({
        "type": kind,
        "deletionTimestamp": pod.metadata.deletion_timestamp.is_some(),
        "deletionGracePeriodSeconds": pod.metadata.deletion_grace_period_seconds,
        "generation": pod.metadata.generation,
    })
}

/// The events of `name` from its creation until it is gone, while `delete` runs.
async fn watch_deletion(
    pods: &Api<Pod>,
    name: &str,
    deletes: &[DeleteParams],
    finished: bool,
) -> Result<Vec<Value>> {
    let created = pods
        .create(&PostParams::default(), &pod(name, if name == "pending" { None } else { Some("n1") })?)
        .await?;
    let mut version = created.metadata.resource_version.clone().context("resourceVersion")?;
    if finished {
        let patch = json!({"status": {"phase": "Succeeded"}});
        let patched = pods.patch_status(name, &Default::default(), &kube::api::Patch::Merge(&patch)).await?;
        version = patched.metadata.resource_version.context("resourceVersion")?;
    }
    let params = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(30);
    let mut stream = pods.watch(&params, &version).await?.boxed();
    for delete in deletes {
        pods.delete(name, delete).await?;
    }
    let mut events = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(20), stream.try_next()).await?? {
        match event {
            WatchEvent::Modified(pod) => events.push(seen("MODIFIED", &pod)),
            WatchEvent::Deleted(pod) => {
                events.push(seen("DELETED", &pod));
                break;
            }
            WatchEvent::Added(pod) => events.push(seen("ADDED", &pod)),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(error) => anyhow::bail!("watch error: {error:?}"),
        }
    }
    Ok(events)
}

async fn deletions(client: kube::Client) -> Result<Value> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    if accounts.get_opt("default").await?.is_none() {
        let account: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "default"}}))?;
        accounts.create(&PostParams::default(), &account).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let force = DeleteParams { grace_period_seconds: Some(0), ..DeleteParams::default() };
    let graceful = DeleteParams { grace_period_seconds: Some(20), ..DeleteParams::default() };
    Ok(json!({
        "force": watch_deletion(&pods, "forced", std::slice::from_ref(&force), false).await?,
        "unscheduled": watch_deletion(&pods, "pending", &[DeleteParams::default()], false).await?,
        "finished": watch_deletion(&pods, "finished", &[DeleteParams::default()], true).await?,
        "graceful then forced": watch_deletion(&pods, "shortened", &[graceful, force], false).await?,
    }))
}

#[tokio::test]
async fn pod_deletions_are_watched_as_on_kube_apiserver() -> Result<()> {
    let upstream = tokio::task::spawn_blocking(KubeApiServer::start).await??;
    let upstream_kubeconfig = upstream.dir().join("admin.kubeconfig");
    upstream.write_kubeconfig(&upstream_kubeconfig, upstream.admin())?;
    let dir = tempfile::tempdir()?;
    let keel = common::keel_binary(&dir.path().join("data"), &[])?;
    let on_keel = deletions(client(&keel.kubeconfig).await?).await?;
    let on_kube = deletions(client(&upstream_kubeconfig).await?).await?;
    ensure!(on_keel == on_kube, "keel-apiserver:\n{on_keel:#}\nkube-apiserver:\n{on_kube:#}");
    // Not agreement on nothing: a force delete is seen as a write of grace 0, then the deletion.
    ensure!(on_kube["force"].as_array().map(Vec::len) == Some(2), "{on_kube:#}");
    Ok(())
}
