//! The watch cache through kube-rs, on both store backends: consistent lists that read every
//! acknowledged write (also of other resources) and equal the store's own list at their revision,
//! watch-lists (sendInitialEvents) ending with their bookmark, bookmarks before a watch's timeout,
//! watches from a resourceVersion replayed from memory, and 410 Expired for one older than both the
//! cache and the store's compaction.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::Server;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use keel_store::Store;
use keel_store::embedded::{EmbeddedStore, Options};
use keel_store::etcd::{EtcdOptions, EtcdStore};
use keel_testbed::etcd::EtcdCluster;
use kube::api::{Api, DeleteParams, ListParams, PostParams, VersionMatch, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// A server on one backend, and what keeps that backend alive.
struct Cluster {
    server: Server,
    client: kube::Client,
    _etcd: Option<EtcdCluster>,
}

async fn open(etcd: bool) -> Result<(Arc<dyn Store>, Option<EtcdCluster>, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    if etcd {
        let cluster = EtcdCluster::start(1)?;
        let store = EtcdStore::connect(EtcdOptions::new(cluster.client_urls()).prefix("/keel")).await?;
        Ok((Arc::new(store), Some(cluster), dir))
    } else {
        Ok((Arc::new(EmbeddedStore::open(Options::new(dir.path().join("data")))?), None, dir))
    }
}

async fn serve(store: Arc<dyn Store>, etcd: Option<EtcdCluster>, dir: tempfile::TempDir) -> Result<Cluster> {
    let server = Server::start_on(store, dir).await?;
    let kubeconfig = server.pki.admin_kubeconfig(&format!("https://{}", server.address));
    let kubeconfig = Kubeconfig::from_yaml(&kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Cluster { server, client: kube::Client::try_from(config)?, _etcd: etcd })
}

async fn start(etcd: bool) -> Result<Cluster> {
    let (store, etcd, dir) = open(etcd).await?;
    serve(store, etcd, dir).await
}

fn config_map(name: &str, data: &str) -> Result<ConfigMap> {
    Ok(serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "data": {"k": data}}))?)
}

fn revision(object: &impl kube::Resource) -> Result<i64> {
    Ok(object.meta().resource_version.as_deref().context("no resourceVersion")?.parse()?)
}

/// The next event of `watch`, within 20 s.
async fn next<K>(
    watch: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
) -> Result<WatchEvent<K>> {
    tokio::time::timeout(Duration::from_secs(20), watch.try_next())
        .await
        .context("no watch event within 20 s")??
        .context("the watch ended")
}

async fn consistent_reads(etcd: bool) -> Result<()> {
    let cluster = start(etcd).await?;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), "default");
    for round in 0..30 {
        let name = format!("m{}", round % 7);
        let written = match maps.get_opt(&name).await? {
            None => revision(&maps.create(&PostParams::default(), &config_map(&name, "1")?).await?)?,
            Some(_) if round % 3 == 0 => {
                maps.delete(&name, &DeleteParams::default()).await?;
                // The deletion's revision: the store's revision now, read through a list.
                let list = maps.list(&ListParams::default()).await?;
                ensure!(
                    list.items.iter().all(|m| m.metadata.name.as_deref() != Some(&name)),
                    "{name} is still listed"
                );
                continue;
            }
            Some(mut map) => {
                map.data = Some([("k".to_owned(), round.to_string())].into());
                revision(&maps.replace(&name, &PostParams::default(), &map).await?)?
            }
        };
        // A consistent list of another resource is at least as new as the write: the cache followed
        // the store's revision without an event of its own (or, on etcd, the list went to etcd).
        let other = secrets.list(&ListParams::default()).await?;
        let other_at: i64 =
            other.metadata.resource_version.as_deref().context("no list revision")?.parse()?;
        ensure!(other_at >= written, "a consistent list at {other_at} after a write at {written}");
        // The list of the written resource holds the write, and equals the store's list at its revision.
        let cached = maps.list(&ListParams::default()).await?;
        let at = cached.metadata.resource_version.clone().context("no list revision")?;
        ensure!(
            cached
                .items
                .iter()
                .any(|m| m.metadata.name.as_deref() == Some(&name) && revision(m).ok() == Some(written)),
            "round {round}: the list at {at} lacks {name} at {written}"
        );
        let exact = maps.list(&ListParams::default().at(&at).matching(VersionMatch::Exact)).await?;
        let names = |list: &kube::core::ObjectList<ConfigMap>| -> Vec<(Option<String>, Option<String>)> {
            list.items
                .iter()
                .map(|m| (m.metadata.name.clone(), m.metadata.resource_version.clone()))
                .collect()
        };
        ensure!(
            names(&cached) == names(&exact),
            "round {round}: cache {:?} vs store {:?}",
            names(&cached),
            names(&exact)
        );
    }
    Ok(())
}

async fn watch_list_and_bookmarks(etcd: bool) -> Result<()> {
    let cluster = start(etcd).await?;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    let mut last = 0;
    for name in ["a", "b", "c"] {
        last = revision(&maps.create(&PostParams::default(), &config_map(name, name)?).await?)?;
    }
    // resourceVersion 0 without initial events starts from about now — where the cache is, which on
    // etcd follows the store a little behind: once a list from the cache shows the objects, no
    // history comes.
    for _ in 0..100 {
        let any = maps.list(&ListParams::default().match_any()).await?;
        if any.items.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let path = "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=false\
                &resourceVersionMatch=NotOlderThan&resourceVersion=0&timeoutSeconds=1";
    let (status, _, body) = cluster.server.request("GET", path, &[], b"").await?;
    ensure!(status == 200 && !body.contains("\"type\""), "{status} {body}");
    // A watch-list: the objects as ADDED, then the bookmark ending them, then what changes.
    let mut watch = maps.watch(&WatchParams::default().initial_events(), "").await?.boxed();
    let mut names = Vec::new();
    let end = loop {
        match next(&mut watch).await? {
            WatchEvent::Added(map) => names.push(map.metadata.name.unwrap_or_default()),
            WatchEvent::Bookmark(bookmark) => break bookmark,
            other => anyhow::bail!("unexpected {other:?} among the initial events"),
        }
    };
    names.sort();
    ensure!(names == ["a", "b", "c"], "initial events {names:?}");
    ensure!(
        end.metadata.annotations.get("k8s.io/initial-events-end").map(String::as_str) == Some("true"),
        "the last initial bookmark has annotations {:?}",
        end.metadata.annotations
    );
    let end_at: i64 = end.metadata.resource_version.parse()?;
    ensure!(end_at >= last, "the initial events end at {end_at}, before the last write at {last}");
    let d = revision(&maps.create(&PostParams::default(), &config_map("d", "d")?).await?)?;
    match next(&mut watch).await? {
        WatchEvent::Added(map) if map.metadata.name.as_deref() == Some("d") && revision(&map)? == d => {}
        other => anyhow::bail!("expected d ADDED, got {other:?}"),
    }
    maps.delete("a", &DeleteParams::default()).await?;
    match next(&mut watch).await? {
        WatchEvent::Deleted(map) if map.metadata.name.as_deref() == Some("a") => {}
        other => anyhow::bail!("expected a DELETED, got {other:?}"),
    }

    // From a resourceVersion: the changes after it, in order.
    let mut from_b = maps.watch(&WatchParams::default(), &(last - 1).to_string()).await?.boxed();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match next(&mut from_b).await? {
            WatchEvent::Added(map) => seen.push(format!("+{}", map.metadata.name.unwrap_or_default())),
            WatchEvent::Deleted(map) => seen.push(format!("-{}", map.metadata.name.unwrap_or_default())),
            WatchEvent::Bookmark(_) => {}
            other => anyhow::bail!("unexpected {other:?}"),
        }
    }
    ensure!(seen == ["+c", "+d", "-a"], "{seen:?}");

    // A bookmark comes 2 s before a watch's timeout, then the watch ends.
    let mut short = maps.watch(&WatchParams::default().timeout(3), &d.to_string()).await?.boxed();
    match next(&mut short).await? {
        WatchEvent::Deleted(map) if map.metadata.name.as_deref() == Some("a") => {}
        other => anyhow::bail!("expected a DELETED, got {other:?}"),
    }
    match next(&mut short).await? {
        WatchEvent::Bookmark(bookmark) => {
            let at: i64 = bookmark.metadata.resource_version.parse()?;
            ensure!(at > d, "the bookmark is at {at}, before the deletion after {d}");
        }
        other => anyhow::bail!("expected a bookmark, got {other:?}"),
    }
    ensure!(
        tokio::time::timeout(Duration::from_secs(10), short.next()).await?.is_none(),
        "the watch went on"
    );
    Ok(())
}

async fn expired(etcd: bool) -> Result<()> {
    // History written and compacted before the server starts: its cache begins after it.
    let (store, etcd, dir) = open(etcd).await?;
    let mut first = 0;
    for round in 0..5 {
        let key = format!("/registry/configmaps/default/old{round}");
        let value = format!(
            r#"{{"metadata":{{"name":"old{round}","namespace":"default"}},"apiVersion":"v1","kind":"ConfigMap"}}"#
        );
        let written = store.put(&key, value.into()).await?;
        if round == 0 {
            first = written;
        }
    }
    let current = store.current_revision().await?;
    store.compact(current).await?;
    let cluster = serve(store, etcd, dir).await?;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    let mut watch = maps.watch(&WatchParams::default(), &first.to_string()).await?.boxed();
    match next(&mut watch).await? {
        WatchEvent::Error(error) => ensure!(error.code == 410 && error.reason == "Expired", "{error:?}"),
        other => anyhow::bail!("expected 410 Expired, got {other:?}"),
    }
    // The current objects are all there, and a watch from now works.
    let listed = maps.list(&ListParams::default()).await?;
    ensure!(listed.items.len() == 5, "{}", listed.items.len());
    let (status, _, _) = cluster.server.request("GET", "/readyz", &[], b"").await?;
    ensure!(status == 200);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_reads_embedded() -> Result<()> {
    consistent_reads(false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_reads_etcd() -> Result<()> {
    consistent_reads(true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_list_and_bookmarks_embedded() -> Result<()> {
    watch_list_and_bookmarks(false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_list_and_bookmarks_etcd() -> Result<()> {
    watch_list_and_bookmarks(true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_embedded() -> Result<()> {
    expired(false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_etcd() -> Result<()> {
    expired(true).await
}

/// Metadata-only reads (PartialObjectMetadata), as kube-rs' and client-go's metadata clients make
/// them: get, list and watch.
async fn metadata_only(etcd: bool) -> Result<()> {
    let cluster = start(etcd).await?;
    let maps: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), "default");
    maps.create(&PostParams::default(), &config_map("m", "big")?).await?;
    let one = maps.get_metadata("m").await?;
    ensure!(
        one.metadata.name.as_deref() == Some("m")
            && one.types.as_ref().is_some_and(|t| t.kind == "PartialObjectMetadata"),
        "{one:?}"
    );
    let listed = maps.list_metadata(&ListParams::default()).await?;
    ensure!(listed.items.iter().any(|m| m.metadata.name.as_deref() == Some("m")), "{listed:?}");
    let at = listed.metadata.resource_version.clone().unwrap_or_default();
    let mut watch = maps.watch_metadata(&WatchParams::default(), &at).await?.boxed();
    maps.create(&PostParams::default(), &config_map("n", "x")?).await?;
    match next(&mut watch).await? {
        WatchEvent::Added(meta) if meta.metadata.name.as_deref() == Some("n") => {}
        other => anyhow::bail!("expected n ADDED, got {other:?}"),
    }
    // Only metadata crosses the wire.
    let (_, _, raw) = cluster
        .server
        .request(
            "GET",
            "/api/v1/namespaces/default/configmaps",
            &[("Accept", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")],
            b"",
        )
        .await?;
    ensure!(raw.contains("PartialObjectMetadataList") && !raw.contains("\"data\""), "{raw}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_embedded() -> Result<()> {
    metadata_only(false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_etcd() -> Result<()> {
    metadata_only(true).await
}
