//! What only the etcd backend has: TLS, authentication, key prefixes shared on one etcd, watches that
//! outlive a member's restart, a 3-member cluster losing a member, and etcd's errors as the contract
//! names them. Every test runs real etcd members from the testbed.

use crate::conformance;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use bytes::Bytes;
use futures::StreamExt;
use keel_store::etcd::{EtcdOptions, EtcdStore, EtcdTls};
use keel_store::{Event, EventKind, MAX_REQUEST_BYTES, Outcome, RangeRequest, Revision, Store, StoreError};
use keel_testbed::etcd::{EtcdCluster, EtcdConfig};
use keel_testbed::loopback::http_get;

use self::conformance::take_events;

fn b(value: &str) -> Bytes {
    Bytes::copy_from_slice(value.as_bytes())
}

/// Options for every member of `cluster`, failing fast enough for tests.
fn options(cluster: &EtcdCluster) -> EtcdOptions {
    let mut options = EtcdOptions::new(cluster.client_urls());
    options.dial_timeout = Duration::from_secs(3);
    options.request_timeout = Duration::from_secs(10);
    options
}

/// The error a connect failed with.
async fn refused(options: EtcdOptions) -> Result<StoreError> {
    match EtcdStore::connect(options).await {
        Ok(store) => bail!("connected although it should not have: {store:?}"),
        Err(error) => Ok(error),
    }
}

async fn put_get(store: &EtcdStore, key: &str, value: &str) -> Result<()> {
    let revision = store.put(key, b(value)).await?;
    let kv = store.get(key).await?.with_context(|| format!("{key} missing after a put"))?;
    ensure!(kv.value == b(value) && kv.mod_revision == revision, "{kv:?}");
    Ok(())
}

#[tokio::test]
async fn tls_with_the_cluster_ca() -> Result<()> {
    let cluster = EtcdCluster::start_with(EtcdConfig::new(1).tls())?;
    let files = cluster.tls().context("a TLS cluster without certificates")?;
    ensure!(cluster.client_urls()[0].starts_with("https://"));
    let tls = EtcdTls { ca_cert: files.ca_cert.clone(), client_cert_and_key: None, domain: None };
    let store = EtcdStore::connect(options(&cluster).tls(tls.clone())).await?;
    put_get(&store, "/registry/tls/a", "over TLS").await?;

    // The certificate names 127.0.0.1 and localhost: verifying against "localhost" works too.
    let by_name = EtcdTls { domain: Some("localhost".into()), ..tls.clone() };
    put_get(&EtcdStore::connect(options(&cluster).tls(by_name)).await?, "/registry/tls/b", "by name").await?;

    // Without the CA, the member's certificate is not trusted.
    let mut untrusted = options(&cluster);
    untrusted.dial_timeout = Duration::from_secs(1);
    let error = refused(untrusted).await?;
    let message = error.to_string();
    eprintln!("without the CA: {message}");
    ensure!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    ensure!(message.contains("connecting to etcd at https://127.0.0.1:"), "{message}");
    ensure!(
        message.to_lowercase().contains("certificate"),
        "the error does not name the certificate: {message}"
    );

    // A missing CA file is named.
    let missing = EtcdTls { ca_cert: files.ca_cert.with_file_name("missing.crt"), ..tls };
    let error = refused(options(&cluster).tls(missing)).await?;
    ensure!(matches!(&error, StoreError::InvalidRequest(m) if m.contains("missing.crt")), "{error}");
    Ok(())
}

#[tokio::test]
async fn tls_with_a_client_certificate() -> Result<()> {
    let cluster = EtcdCluster::start_with(EtcdConfig::new(1).client_cert_auth())?;
    let files = cluster.tls().context("a TLS cluster without certificates")?.clone();
    let tls = EtcdTls {
        ca_cert: files.ca_cert.clone(),
        client_cert_and_key: Some((files.client_cert.clone(), files.client_key.clone())),
        domain: None,
    };
    let store = EtcdStore::connect(options(&cluster).tls(tls.clone())).await?;
    put_get(&store, "/registry/mtls/a", "with a client certificate").await?;

    // The member requires a client certificate: the CA alone is not enough.
    let mut anonymous = options(&cluster).tls(EtcdTls { client_cert_and_key: None, ..tls });
    anonymous.dial_timeout = Duration::from_secs(1);
    let error = refused(anonymous).await?;
    eprintln!("without a client certificate: {error}");
    ensure!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    ensure!(error.to_string().contains("connecting to etcd at https://127.0.0.1:"), "{error}");
    ensure!(error.to_string().contains("no client certificate"), "{error}");

    // etcdctl, with the same files, sees the key.
    let mut get = cluster.etcdctl();
    get.args(["get", "/registry/mtls/a", "--print-value-only"]);
    let output = get.output()?;
    ensure!(String::from_utf8_lossy(&output.stdout).trim() == "with a client certificate", "{output:?}");
    Ok(())
}

#[tokio::test]
async fn auth_with_user_and_password() -> Result<()> {
    let mut cluster = EtcdCluster::start(1)?;
    cluster.enable_auth("s3cret-pass")?;
    let store = EtcdStore::connect(options(&cluster).user("root", "s3cret-pass")).await?;
    put_get(&store, "/registry/auth/a", "authenticated").await?;
    let mut watch = store.watch("/registry/auth/", None).await?;
    let revision = store.put("/registry/auth/b", b("watched")).await?;
    let events = take_events(&mut watch, 1, Duration::from_secs(10)).await?;
    ensure!(events[0].revision() == revision && events[0].kv.key == "/registry/auth/b");

    let error = refused(options(&cluster).user("root", "wrong")).await?;
    eprintln!("wrong password: {error}");
    ensure!(matches!(error, StoreError::InvalidRequest(_)), "{error:?}");
    let message = error.to_string();
    ensure!(message.contains("as user \"root\"") && message.contains("authentication failed"), "{message}");

    let error = refused(options(&cluster)).await?;
    eprintln!("no user: {error}");
    ensure!(matches!(error, StoreError::InvalidRequest(_)), "{error:?}");
    Ok(())
}

#[tokio::test]
async fn prefixes_keep_clusters_apart() -> Result<()> {
    let cluster = EtcdCluster::start(1)?;
    // "/cluster-ab" starts with "/cluster-a": the prefixes must still not see each other.
    let a = EtcdStore::connect(options(&cluster).prefix("/cluster-a")).await?;
    let ab = EtcdStore::connect(options(&cluster).prefix("/cluster-ab")).await?;
    let bare = EtcdStore::connect(options(&cluster)).await?;
    ensure!(a.prefix() == "/cluster-a" && bare.prefix().is_empty());
    let mut watch_a = a.watch("/", None).await?;
    let mut watch_ab = ab.watch("/", None).await?;

    let key = "/registry/pods/default/x";
    let written = |outcome: Outcome| match outcome {
        Outcome::Written { revision, .. } => Ok(revision),
        Outcome::Conflict { current } => bail!("conflict with {current:?}"),
    };
    // The same key created in both: no conflict between them.
    let in_a = written(a.create(key, b("a"), 0).await?)?;
    let in_ab = written(ab.create(key, b("ab"), 0).await?)?;
    bare.put("/registry/pods/default/y", b("no prefix")).await?;

    for (store, value) in [(&a, "a"), (&ab, "ab")] {
        let all = store.range(RangeRequest::prefix("/")).await?;
        let keys: Vec<_> = all.kvs.iter().map(|kv| (kv.key.as_str(), kv.value.clone())).collect();
        ensure!(keys == [(key, b(value))], "{} sees {keys:?}", store.prefix());
        ensure!(all.count == 1);
    }
    let events = take_events(&mut watch_a, 1, Duration::from_secs(10)).await?;
    ensure!(events[0].kv.key == key && events[0].revision() == in_a, "{events:?}");
    let events = take_events(&mut watch_ab, 1, Duration::from_secs(10)).await?;
    ensure!(events[0].kv.key == key && events[0].revision() == in_ab, "{events:?}");
    for watch in [&mut watch_a, &mut watch_ab] {
        if let Ok(item) = tokio::time::timeout(Duration::from_millis(300), watch.next()).await {
            bail!("a watch saw another prefix's change: {item:?}");
        }
    }
    // Without a prefix, every key is seen as stored.
    let raw = bare.range(RangeRequest::prefix("/")).await?;
    let raw: Vec<_> = raw.kvs.iter().map(|kv| kv.key.as_str()).collect();
    ensure!(
        raw == [
            "/cluster-a/registry/pods/default/x",
            "/cluster-ab/registry/pods/default/x",
            "/registry/pods/default/y"
        ],
        "{raw:?}"
    );

    let mut etcdctl = cluster.etcdctl();
    etcdctl.args(["get", "/", "--prefix", "--keys-only"]);
    let output = etcdctl.output()?;
    ensure!(output.status.success(), "{output:?}");
    let listed: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    ensure!(listed == raw, "etcdctl lists {listed:?}");

    for bad in ["cluster-a", "/cluster-a/", "/a\nb"] {
        let error = refused(options(&cluster).prefix(bad)).await?;
        ensure!(matches!(error, StoreError::InvalidRequest(_)), "prefix {bad:?}: {error:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_after_a_member_restart() -> Result<()> {
    let mut cluster = EtcdCluster::start(1)?;
    let mut options = options(&cluster).prefix("/keel");
    options.request_timeout = Duration::from_secs(3);
    let store = EtcdStore::connect(options).await?;
    let mut watch = store.watch("/w/", None).await?;
    let mut revisions = Vec::new();
    for i in 0..3 {
        revisions.push(store.put(&format!("/w/before-{i}"), b("x")).await?);
    }
    // Two of the three events read before the member dies, the third after.
    let mut events = take_events(&mut watch, 2, Duration::from_secs(10)).await?;

    cluster.member(0)?.kill();
    events.extend(take_events(&mut watch, 1, Duration::from_secs(10)).await?);
    // While the member is down the watch keeps trying, and neither ends nor yields anything.
    let quiet = tokio::time::timeout(Duration::from_secs(2), watch.next()).await;
    ensure!(quiet.is_err(), "the watch yielded {quiet:?} while etcd was down");
    let down = store.get("/w/before-0").await;
    ensure!(matches!(down, Err(StoreError::Unavailable(_))), "a read with etcd down answered {down:?}");

    // Waits (blocking) until the member is healthy again.
    tokio::task::block_in_place(|| cluster.member(0)?.restart())?;
    for i in 0..3 {
        revisions.push(store.put(&format!("/w/after-{i}"), b("y")).await?);
    }
    events.extend(take_events(&mut watch, 3, Duration::from_secs(40)).await?);
    let seen: Vec<Revision> = events.iter().map(Event::revision).collect();
    ensure!(seen == revisions, "the watch saw revisions {seen:?}, written were {revisions:?}");
    let keys: Vec<&str> = events.iter().map(|e| e.kv.key.as_str()).collect();
    ensure!(keys[3] == "/w/after-0" && keys[2] == "/w/before-2", "{keys:?}");
    let extra = tokio::time::timeout(Duration::from_millis(500), watch.next()).await;
    ensure!(extra.is_err(), "a duplicate or stray item after the restart: {extra:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_members_keep_serving_without_one() -> Result<()> {
    const WRITERS: usize = 4;
    let mut cluster = EtcdCluster::start(3)?;
    let store = Arc::new(EtcdStore::connect(options(&cluster).prefix("/keel")).await?);
    let before = store.current_revision().await?;
    let mut watch = store.watch("/load/", None).await?;
    let killed = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let (store, killed) = (store.clone(), killed.clone());
        tasks.push(tokio::spawn(async move {
            let (mut acknowledged, mut ambiguous, mut after_kill) = (Vec::new(), Vec::new(), 0);
            while after_kill < 40 {
                match store.put(&format!("/load/{w}"), b("v")).await {
                    Ok(revision) => acknowledged.push(revision),
                    // A write in flight on the killed member may or may not have been applied.
                    Err(StoreError::Unavailable(message)) => ambiguous.push(message),
                    Err(other) => return Err(other.into()),
                }
                let current = store.current_revision().await?;
                ensure!(acknowledged.last().is_none_or(|&r| current >= r), "stale current revision");
                if killed.load(Ordering::Relaxed) {
                    after_kill += 1;
                }
            }
            anyhow::Ok((acknowledged, ambiguous))
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.member(0)?.kill();
    killed.store(true, Ordering::Relaxed);
    let mut acknowledged = BTreeSet::new();
    for task in tasks {
        let (mine, ambiguous) = task.await??;
        ensure!(ambiguous.len() <= 8, "{} writes failed: {ambiguous:?}", ambiguous.len());
        for message in ambiguous {
            eprintln!("write failed around the kill: {message}");
        }
        for revision in mine {
            ensure!(acknowledged.insert(revision), "revision {revision} acknowledged twice");
        }
    }
    let range = store.range(RangeRequest::prefix("/load/")).await?;
    ensure!(range.count == WRITERS);
    // Only this test writes, all under /load/: the watch sees every revision after it started, once.
    let last = store.current_revision().await?;
    let count = usize::try_from(last - before)?;
    let events = take_events(&mut watch, count, Duration::from_secs(40)).await?;
    let seen: Vec<Revision> = events.iter().map(Event::revision).collect();
    ensure!(seen == (before + 1..=last).collect::<Vec<_>>(), "the watch has a gap or a duplicate: {seen:?}");
    ensure!(acknowledged.iter().all(|r| seen.contains(r)));
    ensure!(events.iter().all(|e| e.kind == EventKind::Put && e.kv.key.starts_with("/load/")));

    // A store connecting while the member is down uses the other two.
    let late = EtcdStore::connect(options(&cluster).prefix("/keel")).await?;
    for i in 0..20 {
        put_get(&late, &format!("/late/{i}"), "v").await?;
    }
    // Once the member is back, both keep working.
    tokio::task::block_in_place(|| cluster.member(0)?.restart())?;
    for i in 0..20 {
        put_get(&late, &format!("/late/{i}"), "again").await?;
        ensure!(store.range(RangeRequest::prefix("/late/")).await?.count == 20);
    }
    Ok(())
}

#[tokio::test]
async fn watch_gives_up_when_etcd_stays_down() -> Result<()> {
    let mut cluster = EtcdCluster::start(1)?;
    let mut options = options(&cluster);
    options.request_timeout = Duration::from_secs(2);
    options.watch_resume_timeout = Duration::from_secs(4);
    let resume_timeout = options.watch_resume_timeout;
    let store = EtcdStore::connect(options).await?;
    let mut watch = store.watch("/gone/", None).await?;
    cluster.member(0)?.kill();
    let lost = tokio::time::Instant::now();
    let limit = resume_timeout + Duration::from_secs(15);
    let item =
        tokio::time::timeout(limit, watch.next()).await.context("the watch neither resumed nor gave up")?;
    let waited = lost.elapsed();
    match item {
        Some(Err(StoreError::Unavailable(message))) => {
            eprintln!("gave up after {waited:?}: {message}");
            ensure!(message.contains("could not be resumed"), "{message}");
        }
        other => bail!("the watch of a dead etcd answered {other:?}"),
    }
    ensure!(waited >= resume_timeout - Duration::from_secs(1), "gave up after {waited:?}");
    ensure!(watch.next().await.is_none(), "the watch went on after giving up");
    Ok(())
}

/// etcd's count of its watchers (a gauge on `/metrics`).
fn etcd_watchers(cluster: &EtcdCluster) -> Result<u64> {
    let response = http_get(cluster.info(0)?.health, "/metrics", Duration::from_secs(2))?;
    let line = response.body.lines().find(|l| l.starts_with("etcd_debugging_mvcc_watcher_total "));
    let value = line.and_then(|l| l.split_whitespace().nth(1)).context("no watcher gauge on /metrics")?;
    Ok(value.parse::<f64>()? as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_watch_cancels_it() -> Result<()> {
    let mut cluster = EtcdCluster::start(1)?;
    let mut options = options(&cluster);
    options.request_timeout = Duration::from_secs(2);
    let store = EtcdStore::connect(options).await?;
    let mut watches = Vec::new();
    for i in 0..4 {
        watches.push(store.watch(&format!("/drop/{i}/"), None).await?);
    }
    ensure!(etcd_watchers(&cluster)? >= 4, "{} watchers", etcd_watchers(&cluster)?);
    drop(watches);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while etcd_watchers(&cluster)? > 0 {
        ensure!(tokio::time::Instant::now() < deadline, "dropped watches still run in etcd");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A watch dropped while it waits to resume stops trying: it is polled by its consumer only.
    let mut watch = store.watch("/drop/", None).await?;
    cluster.member(0)?.kill();
    let waiting = tokio::time::timeout(Duration::from_millis(500), watch.next()).await;
    ensure!(waiting.is_err(), "the watch yielded {waiting:?} with etcd down");
    drop(watch);
    tokio::task::block_in_place(|| cluster.member(0)?.restart())?;
    store.put("/drop/x", b("x")).await?;
    ensure!(etcd_watchers(&cluster)? == 0, "a dropped watch came back");
    Ok(())
}

#[tokio::test]
async fn etcd_errors_as_the_contract_names_them() -> Result<()> {
    let cluster = EtcdCluster::start(1)?;
    let store = EtcdStore::connect(options(&cluster).prefix("/keel")).await?;
    let r1 = store.put("/e/a", b("1")).await?;
    let r2 = store.put("/e/a", b("2")).await?;
    let r3 = store.put("/e/a", b("3")).await?;
    store.compact(r2).await?;

    let old = store.range(RangeRequest::prefix("/e/").at(r1)).await;
    ensure!(
        matches!(old, Err(StoreError::Compacted { requested, compacted }) if requested == r1 && compacted == r2),
        "{old:?}"
    );
    let again = store.compact(r2).await;
    ensure!(
        matches!(again, Err(StoreError::Compacted { requested, compacted }) if requested == r2 && compacted == r2),
        "{again:?}"
    );
    let below = store.compact(r1).await;
    ensure!(matches!(below, Err(StoreError::Compacted { compacted, .. }) if compacted == r2), "{below:?}");
    let zero = store.compact(0).await;
    ensure!(
        matches!(zero, Err(StoreError::Compacted { requested: 0, compacted }) if compacted == r2),
        "{zero:?}"
    );
    let future = store.range(RangeRequest::key("/e/a").at(r3 + 5)).await;
    ensure!(
        matches!(future, Err(StoreError::FutureRevision { requested, current }) if requested == r3 + 5 && current == r3),
        "{future:?}"
    );
    let future = store.compact(r3 + 5).await;
    ensure!(matches!(future, Err(StoreError::FutureRevision { current, .. }) if current == r3), "{future:?}");
    let mut watch = store.watch("/e/", Some(r1)).await?;
    let first = tokio::time::timeout(Duration::from_secs(10), watch.next()).await?;
    ensure!(
        matches!(first, Some(Err(StoreError::Compacted { requested, compacted })) if requested == r1 && compacted == r2),
        "{first:?}"
    );
    ensure!(tokio::time::timeout(Duration::from_secs(10), watch.next()).await?.is_none());

    let lease = store.grant_lease(Duration::from_millis(1500)).await?;
    ensure!(lease.ttl >= Duration::from_secs(2), "{lease:?}");
    ensure!(store.keep_alive(lease.id).await? >= Duration::from_secs(2));
    store.revoke_lease(lease.id).await?;
    for result in [store.keep_alive(lease.id).await.map(drop), store.revoke_lease(lease.id).await] {
        ensure!(matches!(result, Err(StoreError::LeaseNotFound { id }) if id == lease.id), "{result:?}");
    }
    let orphan = store.create("/e/leased", b("x"), lease.id).await;
    ensure!(matches!(orphan, Err(StoreError::LeaseNotFound { id }) if id == lease.id), "{orphan:?}");

    // etcd refuses what is over its own limit with the contract's error...
    let raw = etcd_client::Client::connect(cluster.client_urls(), None).await?;
    let over = raw.kv_client().put("/raw/big", vec![b'x'; MAX_REQUEST_BYTES], None).await;
    ensure!(format!("{over:?}").contains("request is too large"), "{over:?}");
    // ...and the largest value the contract lets through fits etcd even under the longest prefix.
    let longest = format!("/{}", "p".repeat(keel_store::MAX_PREFIX_BYTES - 1));
    let prefixed = EtcdStore::connect(options(&cluster).prefix(longest)).await?;
    let key = "/e/big";
    let value = Bytes::from(vec![b'x'; keel_store::validate::max_value_bytes(key)]);
    prefixed.put(key, value).await?;
    let over =
        prefixed.put(key, Bytes::from(vec![b'x'; keel_store::validate::max_value_bytes(key) + 1])).await;
    ensure!(matches!(over, Err(StoreError::RequestTooLarge { .. })), "{over:?}");
    let too_long = EtcdStore::connect(options(&cluster).prefix(format!("{}p", "/p".repeat(128)))).await;
    ensure!(matches!(too_long, Err(StoreError::InvalidRequest(_))), "a prefix over 256 bytes: {too_long:?}");
    Ok(())
}
