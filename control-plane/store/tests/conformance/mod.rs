//! The store conformance suite: the same test functions for every backend. A backend's test file
//! defines how to open a fresh store and invokes `conformance_tests!` with it.
//!
//! `Fixture::disrupt` is called in the middle of the load tests; a backend that can lose a member
//! (the 3-member etcd cluster) kills one there, the others do nothing.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use futures::StreamExt;
use keel_store::{
    Compare, Event, EventKind, KeyValue, MAX_REQUEST_BYTES, OpResult, Outcome, RangeRequest, Revision, Store,
    StoreError, Txn, TxnOp, WatchItem, WatchStream,
};

/// A fresh store and whatever keeps it alive.
pub trait Fixture: Send + Sync {
    fn store(&self) -> Arc<dyn Store>;
    /// Kills a member of the backend if it has one to spare; a no-op otherwise.
    fn disrupt(&self) -> Result<()>;
}

/// Generates one `#[tokio::test]` per suite function, each on a fresh fixture from `$open`.
#[macro_export]
macro_rules! conformance_tests {
    ($open:expr) => {
        $crate::conformance_tests!(@each $open;
            create_update_delete, txn_branches_and_revisions, txn_bad_input_writes_nothing,
            range_pagination_at_fixed_revision, count_only_and_exact, conflicts_under_concurrent_writers,
            watch_order_no_gaps_under_load, watch_from_past_revision, delete_events_carry_prev_value,
            watch_prefix_isolation, compaction, lease_expiry, lease_revoke_and_keep_alive,
            current_revision_is_consistent, lease_put_racing_revoke, keep_alive_keeps_a_lease,
            watches_started_under_load, limits_of_leases_and_compares, watch_progress);
    };
    (@each $open:expr; $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() -> anyhow::Result<()> {
                let fixture = $open.await?;
                conformance::$name(&fixture).await
            }
        )*
    };
}

fn b(value: &str) -> Bytes {
    Bytes::copy_from_slice(value.as_bytes())
}

fn written(outcome: Outcome) -> Result<(Revision, Option<KeyValue>)> {
    match outcome {
        Outcome::Written { revision, prev } => Ok((revision, prev)),
        Outcome::Conflict { current } => anyhow::bail!("expected a write, got a conflict with {current:?}"),
    }
}

fn conflict(outcome: Outcome) -> Result<Option<KeyValue>> {
    match outcome {
        Outcome::Conflict { current } => Ok(current),
        Outcome::Written { revision, .. } => anyhow::bail!("expected a conflict, got a write at {revision}"),
    }
}

/// Runs `op` again while the backend answers [`StoreError::Unavailable`] (a member was killed under
/// it). Such a failure is ambiguous for a write, as with etcd itself: it may have been applied.
async fn retrying<T, F, Fut>(mut op: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = keel_store::Result<T>>,
{
    let mut attempts = 0;
    loop {
        match op().await {
            Err(StoreError::Unavailable(reason)) if attempts < 50 => {
                attempts += 1;
                eprintln!("retrying after: {reason}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            result => return Ok(result?),
        }
    }
}

/// The first version of `key` written after `revision`, read from its history by a watch.
async fn first_write_after(store: &dyn Store, key: &str, revision: Revision) -> Result<KeyValue> {
    let mut attempts = 0;
    loop {
        let outcome = async {
            let mut watch = store.watch(key, Some(revision + 1)).await?;
            match tokio::time::timeout(Duration::from_secs(10), watch.next()).await {
                Ok(Some(event)) => event,
                _ => Err(StoreError::Unavailable(format!("no write of {key} after {revision} arrived"))),
            }
        };
        match outcome.await {
            Ok(event) => return Ok(event.kv),
            Err(StoreError::Unavailable(reason)) if attempts < 50 => {
                attempts += 1;
                eprintln!("retrying after: {reason}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(other) => return Err(other.into()),
        }
    }
}

/// Reads `count` events from `watch`, failing after `timeout` without them.
pub async fn take_events(watch: &mut WatchStream, count: usize, timeout: Duration) -> Result<Vec<Event>> {
    let mut events = Vec::with_capacity(count);
    let deadline = tokio::time::Instant::now() + timeout;
    while events.len() < count {
        let next = tokio::time::timeout_at(deadline, watch.next())
            .await
            .with_context(|| format!("only {} of {count} events arrived", events.len()))?;
        events.push(next.context("the watch ended")??);
    }
    Ok(events)
}

/// Asserts nothing more arrives on `watch` for a moment.
async fn assert_quiet(watch: &mut WatchStream) -> Result<()> {
    match tokio::time::timeout(Duration::from_millis(300), watch.next()).await {
        Err(_elapsed) => Ok(()),
        Ok(item) => anyhow::bail!("unexpected watch item {item:?}"),
    }
}

pub async fn create_update_delete(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    let key = "/registry/pods/default/nginx";
    let (created, prev) = written(store.create(key, b("v1"), 0).await?)?;
    ensure!(prev.is_none());
    let kv = store.get(key).await?.context("created key missing")?;
    ensure!((kv.create_revision, kv.mod_revision, kv.version) == (created, created, 1), "{kv:?}");
    ensure!(kv.value == b("v1"));

    let existing = conflict(store.create(key, b("v2"), 0).await?)?;
    ensure!(existing.as_ref() == Some(&kv), "create over an existing key answered {existing:?}");

    let (updated, prev) = written(store.update(key, b("v2"), created, 0).await?)?;
    ensure!(updated > created);
    ensure!(prev.as_ref() == Some(&kv));
    let stale = conflict(store.update(key, b("v3"), created, 0).await?)?.context("key vanished")?;
    ensure!((stale.mod_revision, stale.version, stale.value.clone()) == (updated, 2, b("v2")), "{stale:?}");
    ensure!(stale.create_revision == created);

    let current = conflict(store.delete(key, Some(created)).await?)?;
    ensure!(current.map(|kv| kv.mod_revision) == Some(updated));
    let (deleted, prev) = written(store.delete(key, Some(updated)).await?)?;
    ensure!(deleted > updated && prev.map(|kv| kv.value) == Some(b("v2")));
    ensure!(store.get(key).await?.is_none());
    ensure!(conflict(store.delete(key, None).await?)?.is_none(), "deleting a missing key");
    ensure!(conflict(store.update(key, b("x"), updated, 0).await?)?.is_none(), "updating a deleted key");

    // Re-created: a new life, version 1 again.
    let (again, _) = written(store.create(key, b("v4"), 0).await?)?;
    let kv = store.get(key).await?.context("re-created key missing")?;
    ensure!((kv.create_revision, kv.version) == (again, 1), "{kv:?}");
    ensure!(store.current_revision().await? == again);
    Ok(())
}

pub async fn txn_branches_and_revisions(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    let base = store.put("/t/a", b("a")).await?;
    // Several writes: one revision, consecutive to the last.
    let txn = Txn::new()
        .when([
            Compare::Exists("/t/a".into()),
            Compare::Absent("/t/b".into()),
            Compare::ModRevision("/t/a".into(), base),
        ])
        .and_then([
            TxnOp::put("/t/b", b("b")),
            TxnOp::delete("/t/a"),
            TxnOp::get("/t/b"),
            TxnOp::put("/t/c", b("c")),
        ])
        .or_else([TxnOp::get("/t/a")]);
    let response = store.txn(txn.clone()).await?;
    ensure!(response.succeeded && response.revision == base + 1, "{response:?}");
    ensure!(matches!(&response.results[0], OpResult::Put { prev: None }));
    ensure!(matches!(&response.results[1], OpResult::Delete { prev: Some(kv) } if kv.value == b("a")));
    ensure!(matches!(&response.results[2], OpResult::Get(Some(kv)) if kv.mod_revision == base + 1));
    let range = store.range(RangeRequest::prefix("/t/")).await?;
    let keys: Vec<_> = range.kvs.iter().map(|kv| (kv.key.as_str(), kv.mod_revision)).collect();
    ensure!(keys == [("/t/b", base + 1), ("/t/c", base + 1)], "{keys:?}");

    // The same transaction again fails its compares and runs the failure branch, writing nothing.
    let response = store.txn(txn).await?;
    ensure!(!response.succeeded && response.revision == base + 1, "{response:?}");
    ensure!(response.results == [OpResult::Get(None)]);

    // Deleting a missing key changes nothing: no new revision.
    let response = store.txn(Txn::new().and_then([TxnOp::delete("/t/missing")])).await?;
    ensure!(response.revision == base + 1 && response.results == [OpResult::Delete { prev: None }]);
    ensure!(store.current_revision().await? == base + 1);
    Ok(())
}

pub async fn txn_bad_input_writes_nothing(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    store.put("/bad/ok", b("ok")).await?;
    // The largest value the contract accepts fits every backend; one byte more fits none.
    let largest = keel_store::validate::max_value_bytes("/bad/largest");
    let before = store.put("/bad/largest", Bytes::from(vec![b'l'; largest])).await?;
    let over = store.put("/bad/largest", Bytes::from(vec![b'l'; largest + 1])).await;
    ensure!(matches!(over, Err(StoreError::RequestTooLarge { .. })), "{over:?}");
    let too_big = Bytes::from(vec![b'x'; MAX_REQUEST_BYTES + 1]);
    let error = store.put("/bad/big", too_big.clone()).await.expect_err("an oversized value was accepted");
    ensure!(matches!(error, StoreError::RequestTooLarge { .. }), "{error}");
    // Several fine ops and one oversized: all refused.
    let txn = Txn::new().and_then([TxnOp::put("/bad/a", b("a")), TxnOp::put("/bad/b", too_big)]);
    ensure!(matches!(store.txn(txn).await, Err(StoreError::RequestTooLarge { .. })));
    for key in ["", "no-slash", "/with\0nul", "/with\nnewline"] {
        let error = store.put(key, b("v")).await.expect_err("a malformed key was accepted");
        ensure!(matches!(error, StoreError::InvalidKey { .. }), "{key:?}: {error}");
        ensure!(matches!(store.get(key).await, Err(StoreError::InvalidKey { .. })));
    }
    let txn = Txn::new().and_then([TxnOp::put("/bad/c", b("c")), TxnOp::put("bad", b("d"))]);
    ensure!(matches!(store.txn(txn).await, Err(StoreError::InvalidKey { .. })));
    let duplicate = Txn::new().and_then([TxnOp::put("/bad/d", b("1")), TxnOp::put("/bad/d", b("2"))]);
    ensure!(matches!(store.txn(duplicate).await, Err(StoreError::InvalidRequest(_))));
    let unknown_lease =
        Txn::new().and_then([TxnOp::put("/bad/e", b("e")), TxnOp::put_with_lease("/bad/f", b("f"), 12345)]);
    let error = store.txn(unknown_lease).await.expect_err("an unknown lease was accepted");
    ensure!(matches!(error, StoreError::LeaseNotFound { id: 12345 }), "{error}");

    let range = store.range(RangeRequest::prefix("/bad/")).await?;
    let keys: Vec<&str> = range.kvs.iter().map(|kv| kv.key.as_str()).collect();
    ensure!(keys == ["/bad/largest", "/bad/ok"], "partial writes: {keys:?}");
    ensure!(store.current_revision().await? == before, "a refused request moved the revision");
    let bad_from = store.range(RangeRequest::prefix("/bad/").from("/other")).await;
    ensure!(matches!(bad_from, Err(StoreError::InvalidRequest(_))), "{bad_from:?}");
    Ok(())
}

pub async fn range_pagination_at_fixed_revision(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    for i in 0..25 {
        store.put(&format!("/p/item-{i:02}"), b(&format!("v{i}"))).await?;
    }
    store.put("/p-other", b("outside the prefix")).await?;
    let snapshot = store.range(RangeRequest::prefix("/p/")).await?;
    ensure!(snapshot.kvs.len() == 25 && snapshot.count == 25 && !snapshot.more);
    let at = snapshot.revision;

    let mut pages = Vec::new();
    let mut from: Option<String> = None;
    loop {
        let mut request = RangeRequest::prefix("/p/").limit(10).at(at);
        if let Some(from) = &from {
            request = request.from(from.clone());
        }
        let page = store.range(request).await?;
        ensure!(page.revision == at, "page read at {} instead of {at}", page.revision);
        ensure!(page.count >= page.kvs.len());
        // Change the data between pages: the pages must not notice.
        let n = pages.len();
        store.put(&format!("/p/item-{n:02}"), b("changed")).await?;
        store.delete(&format!("/p/item-{:02}", 20 + n), None).await?;
        store.put(&format!("/p/new-{n}"), b("new")).await?;
        pages.extend(page.kvs.iter().cloned());
        match page.kvs.last() {
            Some(last) if page.more => from = Some(format!("{}\0", last.key)),
            _ => break,
        }
    }
    ensure!(pages == snapshot.kvs, "paged reads at revision {at} differ from the snapshot");
    let latest = store.range(RangeRequest::prefix("/p/")).await?;
    ensure!(latest.revision > at && latest.kvs != snapshot.kvs);
    let future = store.range(RangeRequest::prefix("/p/").at(latest.revision + 100)).await;
    ensure!(matches!(future, Err(StoreError::FutureRevision { .. })), "{future:?}");
    Ok(())
}

pub async fn count_only_and_exact(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    for key in ["/c/a", "/c/ab", "/c/b", "/ca"] {
        store.put(key, b(key)).await?;
    }
    let count = store.range(RangeRequest::prefix("/c/").count_only()).await?;
    ensure!(count.count == 3 && count.kvs.is_empty() && !count.more, "{count:?}");
    let limited = store.range(RangeRequest::prefix("/c/").limit(2)).await?;
    ensure!(limited.count == 3 && limited.kvs.len() == 2 && limited.more, "{limited:?}");
    let exact = store.range(RangeRequest::key("/c/a")).await?;
    ensure!(exact.kvs.len() == 1 && exact.kvs[0].key == "/c/a" && exact.count == 1, "{exact:?}");
    ensure!(store.range(RangeRequest::key("/c/")).await?.kvs.is_empty());
    Ok(())
}

pub async fn conflicts_under_concurrent_writers(fixture: &impl Fixture) -> Result<()> {
    const WRITERS: usize = 16;
    const INCREMENTS: usize = 25;
    let store = fixture.store();
    let key = "/counter";
    // The value is `count writer step`: a writer whose update failed ambiguously recognises its own.
    store.create(key, b("0 - -"), 0).await?;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let (mut revisions, mut conflicts) = (Vec::new(), 0usize);
            for step in 0..INCREMENTS {
                let mut current = retrying(|| store.get(key)).await?.context("counter missing")?;
                let mine = format!("{w} {step}");
                loop {
                    let text = std::str::from_utf8(&current.value)?.to_owned();
                    let n: u64 = text.split(' ').next().unwrap_or_default().parse()?;
                    let update = store.update(key, b(&format!("{} {mine}", n + 1)), current.mod_revision, 0);
                    match update.await {
                        Ok(Outcome::Written { revision, .. }) => {
                            revisions.push(revision);
                            break;
                        }
                        Ok(Outcome::Conflict { current: now }) => {
                            conflicts += 1;
                            current = now.context("counter deleted")?;
                        }
                        Err(StoreError::Unavailable(_)) => {
                            // The update was conditional on `expected`: it landed exactly when the
                            // key's first write after `expected` is this one. (The latest value is
                            // no answer: another writer may have written over it since.)
                            let expected = current.mod_revision;
                            current = retrying(|| store.get(key)).await?.context("counter missing")?;
                            if current.mod_revision != expected {
                                let next = first_write_after(&*store, key, expected).await?;
                                if next.value.ends_with(format!(" {mine}").as_bytes()) {
                                    revisions.push(next.mod_revision);
                                    break;
                                }
                            }
                        }
                        Err(other) => return Err(other.into()),
                    }
                }
            }
            anyhow::Ok((revisions, conflicts))
        }));
        if tasks.len() == WRITERS / 2 {
            fixture.disrupt()?;
        }
    }
    let mut revisions = HashSet::new();
    let mut conflicts = 0;
    for task in tasks {
        let (mine, seen) = task.await??;
        conflicts += seen;
        for revision in mine {
            ensure!(revisions.insert(revision), "two writers got revision {revision}");
        }
    }
    let kv = retrying(|| store.get(key)).await?.context("counter missing")?;
    let count: usize = std::str::from_utf8(&kv.value)?.split(' ').next().unwrap_or_default().parse()?;
    ensure!(count == WRITERS * INCREMENTS, "lost updates: {:?}", kv.value);
    ensure!(kv.version == (WRITERS * INCREMENTS + 1) as i64);
    ensure!(conflicts > 0, "{WRITERS} concurrent writers never conflicted");
    Ok(())
}

pub async fn watch_order_no_gaps_under_load(fixture: &impl Fixture) -> Result<()> {
    const WRITERS: usize = 8;
    const WRITES: usize = 100;
    let store = fixture.store();
    store.put("/outside", b("x")).await?;
    let mut watch = store.watch("/w/", None).await?;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            // The revisions of this writer's acknowledged changes under /w/ (a delete of a missing key
            // changes nothing).
            let mut changes = Vec::new();
            for i in 0..WRITES {
                let key = format!("/w/key-{}", (w * 7 + i) % 20);
                if i % 10 == 9 {
                    let delete = || store.txn(Txn::new().and_then([TxnOp::delete(key.clone())]));
                    let response = retrying(delete).await?;
                    if matches!(response.results[..], [OpResult::Delete { prev: Some(_) }]) {
                        changes.push(response.revision);
                    }
                } else {
                    changes.push(retrying(|| store.put(&key, b(&format!("w{w}-{i}")))).await?);
                }
                if i % 17 == 0 {
                    retrying(|| store.put("/outside", b("y"))).await?;
                }
            }
            anyhow::Ok(changes)
        }));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    fixture.disrupt()?;
    let mut changes = HashSet::new();
    for task in tasks {
        for revision in task.await?? {
            ensure!(changes.insert(revision), "two changes acknowledged at revision {revision}");
        }
    }
    // Every acknowledged change has its event; an ambiguous write that was applied has one too. The
    // end marker is the last event.
    let end = store.put("/w/end", b("end")).await?;
    let mut events = Vec::new();
    while events.last().is_none_or(|e: &Event| e.revision() < end) {
        events.extend(take_events(&mut watch, 1, Duration::from_secs(60)).await?);
    }
    assert_quiet(&mut watch).await?;
    let mut state: BTreeMap<String, KeyValue> = BTreeMap::new();
    let mut last = 0;
    for event in &events {
        ensure!(event.revision() > last, "event at {} after {last}", event.revision());
        last = event.revision();
        ensure!(event.kv.key.starts_with("/w/"), "foreign key {}", event.kv.key);
        let prev = state.get(&event.kv.key);
        ensure!(
            event.prev_kv.as_ref() == prev,
            "prev_kv of {:?} is {:?}, expected {prev:?}",
            event.kv,
            event.prev_kv
        );
        match event.kind {
            EventKind::Put => state.insert(event.kv.key.clone(), event.kv.clone()),
            EventKind::Delete => state.remove(&event.kv.key),
        };
    }
    let seen: HashSet<Revision> = events.iter().map(Event::revision).collect();
    let missing: Vec<&Revision> = changes.iter().filter(|r| !seen.contains(r)).collect();
    ensure!(missing.is_empty(), "acknowledged changes without an event: {missing:?}");
    let latest = store.range(RangeRequest::prefix("/w/")).await?;
    let expected: Vec<KeyValue> = state.into_values().collect();
    ensure!(latest.kvs == expected, "replaying the events does not give the store's contents");
    Ok(())
}

pub async fn watch_from_past_revision(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    let first = store.put("/h/a", b("1")).await?;
    store.put("/h/b", b("2")).await?;
    store.put("/h/a", b("3")).await?;
    store.delete("/h/b", None).await?;
    let mut watch = store.watch("/h/", Some(first + 1)).await?;
    let events = take_events(&mut watch, 3, Duration::from_secs(10)).await?;
    let summary: Vec<_> = events.iter().map(|e| (e.kind, e.kv.key.as_str(), e.revision())).collect();
    ensure!(
        summary
            == [
                (EventKind::Put, "/h/b", first + 1),
                (EventKind::Put, "/h/a", first + 2),
                (EventKind::Delete, "/h/b", first + 3)
            ],
        "{summary:?}"
    );
    ensure!(events[1].prev_kv.as_ref().map(|kv| kv.value.clone()) == Some(b("1")));
    ensure!(events[1].kv.version == 2 && events[1].kv.create_revision == first);
    let deleted = events[2].prev_kv.as_ref().context("a past delete event without its previous value")?;
    ensure!(deleted.value == b("2") && deleted.mod_revision == first + 1, "{deleted:?}");
    // Then live events follow the history with no gap.
    let live = store.put("/h/c", b("4")).await?;
    let next = take_events(&mut watch, 1, Duration::from_secs(10)).await?;
    ensure!(next[0].revision() == live && next[0].kv.key == "/h/c");
    Ok(())
}

pub async fn delete_events_carry_prev_value(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    let mut watch = store.watch("/d/", None).await?;
    let created = store.put("/d/x", b("first")).await?;
    store.put("/d/x", b("second")).await?;
    let (deleted, _) = written(store.delete("/d/x", None).await?)?;
    let events = take_events(&mut watch, 3, Duration::from_secs(10)).await?;
    let delete = &events[2];
    ensure!(delete.kind == EventKind::Delete, "{delete:?}");
    ensure!(delete.kv.key == "/d/x" && delete.kv.mod_revision == deleted && delete.kv.value.is_empty());
    ensure!((delete.kv.create_revision, delete.kv.version) == (0, 0));
    let prev = delete.prev_kv.as_ref().context("delete event without its previous value")?;
    ensure!(prev.value == b("second") && prev.create_revision == created && prev.version == 2, "{prev:?}");
    Ok(())
}

pub async fn watch_prefix_isolation(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    let mut watch = store.watch("/iso/a/", None).await?;
    store.put("/iso/ab", b("no")).await?;
    store.put("/iso/b/x", b("no")).await?;
    let yes = store.put("/iso/a/x", b("yes")).await?;
    let events = take_events(&mut watch, 1, Duration::from_secs(10)).await?;
    ensure!(events[0].revision() == yes);
    assert_quiet(&mut watch).await
}

pub async fn compaction(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    let r1 = store.put("/k/a", b("1")).await?;
    let r2 = store.put("/k/a", b("2")).await?;
    let r3 = store.put("/k/b", b("3")).await?;
    store.delete("/k/b", None).await?;
    let r5 = store.put("/k/a", b("5")).await?;
    store.compact(r3).await?;

    let old = store.range(RangeRequest::prefix("/k/").at(r2)).await;
    ensure!(matches!(old, Err(StoreError::Compacted { requested, .. }) if requested == r2), "{old:?}");
    let at = store.range(RangeRequest::prefix("/k/").at(r3)).await?;
    let values: Vec<_> = at.kvs.iter().map(|kv| (kv.key.as_str(), kv.value.clone())).collect();
    ensure!(values == [("/k/a", b("2")), ("/k/b", b("3"))], "{values:?}");

    let mut watch = store.watch("/k/", Some(r1)).await?;
    match tokio::time::timeout(Duration::from_secs(10), watch.next()).await? {
        Some(Err(StoreError::Compacted { compacted, .. })) => {
            ensure!(compacted == r3, "compacted at {compacted}");
        }
        other => anyhow::bail!("a watch from a compacted revision answered {other:?}"),
    }
    ensure!(
        tokio::time::timeout(Duration::from_secs(10), watch.next()).await?.is_none(),
        "the watch went on"
    );
    // From the compaction revision itself, history is still there.
    let mut watch = store.watch("/k/", Some(r3)).await?;
    let events = take_events(&mut watch, 3, Duration::from_secs(10)).await?;
    ensure!(events.iter().map(Event::revision).collect::<Vec<_>>() == [r3, r3 + 1, r5]);

    let again = store.compact(r2).await;
    ensure!(matches!(again, Err(StoreError::Compacted { .. })), "{again:?}");
    let future = store.compact(r5 + 10).await;
    ensure!(matches!(future, Err(StoreError::FutureRevision { .. })), "{future:?}");
    store.compact(r5).await?;
    let latest = store.range(RangeRequest::prefix("/k/")).await?;
    ensure!(latest.kvs.len() == 1 && latest.kvs[0].value == b("5") && latest.kvs[0].version == 3);
    Ok(())
}

pub async fn lease_expiry(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    let lease = store.grant_lease(Duration::from_secs(1)).await?;
    ensure!(lease.id != 0 && lease.ttl >= Duration::from_secs(1), "{lease:?}");
    let mut watch = store.watch("/events/", None).await?;
    store.create("/events/e1", b("event"), lease.id).await?;
    store.put("/events/keep", b("no lease")).await?;
    let kv = store.get("/events/e1").await?.context("leased key missing")?;
    ensure!(kv.lease == lease.id);
    let events = take_events(&mut watch, 3, lease.ttl + Duration::from_secs(30)).await?;
    let expired = &events[2];
    ensure!(expired.kind == EventKind::Delete && expired.kv.key == "/events/e1", "{expired:?}");
    ensure!(expired.prev_kv.as_ref().map(|kv| kv.lease) == Some(lease.id));
    ensure!(store.get("/events/e1").await?.is_none());
    ensure!(store.get("/events/keep").await?.is_some());
    let gone = store.keep_alive(lease.id).await;
    ensure!(matches!(gone, Err(StoreError::LeaseNotFound { .. })), "{gone:?}");
    Ok(())
}

pub async fn lease_revoke_and_keep_alive(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    let lease = store.grant_lease(Duration::from_secs(60)).await?;
    ensure!(store.keep_alive(lease.id).await? >= Duration::from_secs(60));
    let mut watch = store.watch("/l/", None).await?;
    let txn = Txn::new().and_then([
        TxnOp::put_with_lease("/l/a", b("a"), lease.id),
        TxnOp::put_with_lease("/l/b", b("b"), lease.id),
    ]);
    let written = store.txn(txn).await?.revision;
    // Re-putting a key without the lease detaches it.
    store.put("/l/b", b("b2")).await?;
    store.revoke_lease(lease.id).await?;
    let events = take_events(&mut watch, 4, Duration::from_secs(10)).await?;
    let revoked = &events[3];
    ensure!(
        revoked.kind == EventKind::Delete && revoked.kv.key == "/l/a" && revoked.revision() > written + 1
    );
    ensure!(store.get("/l/b").await?.is_some_and(|kv| kv.lease == 0));
    assert_quiet(&mut watch).await?;
    let again = store.revoke_lease(lease.id).await;
    ensure!(matches!(again, Err(StoreError::LeaseNotFound { .. })), "{again:?}");
    Ok(())
}

pub async fn current_revision_is_consistent(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for j in 0..20 {
                let revision = store.put(&format!("/cr/{i}"), b(&j.to_string())).await?;
                let current = store.current_revision().await?;
                ensure!(current >= revision, "current revision {current} before an acknowledged {revision}");
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

pub async fn lease_put_racing_revoke(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    for i in 0..20 {
        let lease = store.grant_lease(Duration::from_secs(60)).await?;
        let key = format!("/race/{i}");
        let put = store.txn(Txn::new().and_then([TxnOp::put_with_lease(key.clone(), b("v"), lease.id)]));
        let (put, revoke) = tokio::join!(put, store.revoke_lease(lease.id));
        revoke?;
        match put {
            Ok(_) | Err(StoreError::LeaseNotFound { .. }) => {}
            Err(other) => return Err(other.into()),
        }
        // Whichever came first, a revoked lease leaves none of its keys.
        ensure!(store.get(&key).await?.is_none(), "{key} outlived its revoked lease");
    }
    Ok(())
}

pub async fn keep_alive_keeps_a_lease(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    // etcd's shortest lease (2 s with its default election settings) on both backends.
    let lease = store.grant_lease(Duration::from_secs(2)).await?;
    store.create("/kept/a", b("a"), lease.id).await?;
    for _ in 0..10 {
        tokio::time::sleep(lease.ttl / 4).await;
        ensure!(store.keep_alive(lease.id).await? == lease.ttl);
    }
    // 2.5 TTLs later, still there.
    ensure!(store.get("/kept/a").await?.is_some(), "a kept-alive lease expired");
    let deadline = tokio::time::Instant::now() + lease.ttl + Duration::from_secs(30);
    while store.get("/kept/a").await?.is_some() {
        ensure!(tokio::time::Instant::now() < deadline, "the lease never expired once left alone");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

pub async fn watches_started_under_load(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    let start = store.put("/load/start", b("s")).await?;
    let mut tasks = Vec::new();
    for w in 0..4 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..150 {
                let key = format!("/load/{w}/{}", i % 5);
                let txn = Txn::new().and_then([
                    TxnOp::put(key.clone(), b(&i.to_string())),
                    TxnOp::put("/load/last", b(&key)),
                ]);
                retrying(|| store.txn(txn.clone())).await?;
            }
            anyhow::Ok(())
        }));
    }
    // Watches opened while the writers run: from now, and from the past.
    let mut watches = Vec::new();
    for i in 0..6 {
        tokio::time::sleep(Duration::from_millis(15)).await;
        let from = if i % 2 == 0 { None } else { Some(start + i) };
        watches.push(store.watch("/load/", from).await?);
    }
    for task in tasks {
        task.await??;
    }
    let end = store.put("/load/zz-end", b("end")).await?;
    let mut full = store.watch("/load/", Some(start)).await?;
    let history = until(&mut full, end).await?;
    for (i, watch) in watches.iter_mut().enumerate() {
        let events = until(watch, end).await?;
        let first = events.first().context("a watch saw nothing")?.revision();
        let expected: Vec<&Event> = history.iter().filter(|e| e.revision() >= first).collect();
        ensure!(events.iter().collect::<Vec<_>>() == expected, "watch {i} from {first} has gaps or extras");
        if i % 2 == 1 {
            ensure!(first == start + i as Revision, "watch {i} started at {first}");
        }
    }
    Ok(())
}

/// The events of `watch` up to and including revision `end`.
async fn until(watch: &mut WatchStream, end: Revision) -> Result<Vec<Event>> {
    let mut events: Vec<Event> = Vec::new();
    while events.last().is_none_or(|e| e.revision() < end) {
        events.extend(take_events(watch, 1, Duration::from_secs(60)).await?);
    }
    Ok(events)
}

pub async fn limits_of_leases_and_compares(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    let huge = store.grant_lease(Duration::from_secs(keel_store::MAX_LEASE_TTL_SECS as u64 + 1)).await;
    ensure!(matches!(huge, Err(StoreError::InvalidRequest(_))), "{huge:?}");
    ensure!(matches!(store.grant_lease(Duration::MAX).await, Err(StoreError::InvalidRequest(_))));
    let longest = store.grant_lease(Duration::from_secs(keel_store::MAX_LEASE_TTL_SECS as u64)).await?;
    store.revoke_lease(longest.id).await?;
    let compares = (0..=keel_store::MAX_TXN_OPS).map(|i| Compare::Absent(format!("/cmp/{i}")));
    let txn = Txn::new().when(compares).and_then([TxnOp::put("/cmp/x", b("x"))]);
    ensure!(matches!(store.txn(txn).await, Err(StoreError::InvalidRequest(_))));
    ensure!(store.get("/cmp/x").await?.is_none());
    Ok(())
}

/// A watch with progress yields its prefix's events and, where the backend reports progress
/// promptly, the news that a revision changing only other keys has passed — also at the end of a
/// catch-up from the past. Progress never goes back, nor below an event already delivered.
pub async fn watch_progress(fixture: &impl Fixture) -> Result<()> {
    let store = fixture.store();
    let mut live = store.watch_with_progress("/progress/a/", None).await?;
    let other = retrying(|| store.put("/progress/b/x", b("1"))).await?;
    let mine = retrying(|| store.put("/progress/a/y", b("2"))).await?;
    let mut from_past = store.watch_with_progress("/progress/none/", Some(1)).await?;
    let items = progress_until(&mut live, mine).await?;
    let mut seen = 0;
    for item in &items {
        let at = match item {
            WatchItem::Event(event) => {
                ensure!(event.kv.key == "/progress/a/y", "an event of another prefix: {event:?}");
                event.revision()
            }
            WatchItem::Progress(revision) => *revision,
        };
        ensure!(at >= seen, "progress went back: {items:?}");
        seen = at;
    }
    ensure!(matches!(items.last(), Some(WatchItem::Event(event)) if event.revision() == mine), "{items:?}");
    if store.prompt_progress() {
        ensure!(
            items.contains(&WatchItem::Progress(other)),
            "no progress for the other key's revision: {items:?}"
        );
        let items = progress_until(&mut from_past, mine).await?;
        ensure!(
            items == [WatchItem::Progress(mine)],
            "a catch-up over nothing reports where it got: {items:?}"
        );
    }
    Ok(())
}

/// The items of `watch` up to the first at or past revision `until`.
async fn progress_until(watch: &mut keel_store::ProgressStream, until: Revision) -> Result<Vec<WatchItem>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut items = Vec::new();
    loop {
        let item = tokio::time::timeout_at(deadline, watch.next())
            .await
            .with_context(|| format!("revision {until} not reached; items {items:?}"))?
            .context("the watch ended")??;
        let at = match &item {
            WatchItem::Event(event) => event.revision(),
            WatchItem::Progress(revision) => *revision,
        };
        items.push(item);
        if at >= until {
            return Ok(items);
        }
    }
}
