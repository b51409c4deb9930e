//! The conformance suite on the embedded store, and what only the embedded store does: reopening,
//! refusing bad data directories, catching up slow watches, scheduled compaction.

use crate::conformance;

use std::sync::Arc;

use anyhow::Result;
use keel_store::Store;
use keel_store::embedded::{EmbeddedStore, Options};

struct Embedded {
    store: Arc<EmbeddedStore>,
    _dir: tempfile::TempDir,
}

impl conformance::Fixture for Embedded {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    fn disrupt(&self) -> Result<()> {
        Ok(())
    }
}

async fn open() -> Result<Embedded> {
    let dir = tempfile::tempdir()?;
    let store = EmbeddedStore::open(Options::new(dir.path().join("data")))?;
    Ok(Embedded { store: Arc::new(store), _dir: dir })
}

conformance_tests!(open());

fn options(dir: &std::path::Path) -> Options {
    Options::new(dir.join("data"))
}

fn b(value: &str) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(value.as_bytes())
}

fn refusal(result: keel_store::Result<EmbeddedStore>) -> String {
    match result {
        Err(error @ keel_store::StoreError::DataDir { .. }) => error.to_string(),
        Err(other) => panic!("refused with the wrong error: {other}"),
        Ok(_) => panic!("a bad data directory was opened"),
    }
}

#[tokio::test]
async fn reopen_keeps_everything() -> Result<()> {
    use keel_store::{RangeRequest, StoreError};
    let dir = tempfile::tempdir()?;
    let (lease, compacted_at, current, before) = {
        let store = EmbeddedStore::open(options(dir.path()))?;
        let first = store.put("/r/a", b("1")).await?;
        store.put("/r/a", b("2")).await?;
        store.put("/r/b", b("3")).await?;
        let lease = store.grant_lease(std::time::Duration::from_secs(600)).await?;
        store.create("/r/leased", b("l"), lease.id).await?;
        let compacted_at = store.put("/r/c", b("4")).await?;
        store.delete("/r/b", None).await?;
        store.compact(compacted_at).await?;
        let current = store.put("/r/a", b("5")).await?;
        let before = store.range(RangeRequest::prefix("/r/")).await?;
        assert!(first < compacted_at);
        (lease, compacted_at, current, before)
    };
    let store = EmbeddedStore::open(options(dir.path()))?;
    assert_eq!(store.current_revision().await?, current);
    assert_eq!(store.range(RangeRequest::prefix("/r/")).await?, before);
    let old = store.range(RangeRequest::prefix("/r/").at(compacted_at - 1)).await;
    assert!(matches!(old, Err(StoreError::Compacted { .. })), "{old:?}");
    let at = store.range(RangeRequest::prefix("/r/").at(compacted_at)).await?;
    assert_eq!(
        at.kvs.iter().map(|kv| kv.key.as_str()).collect::<Vec<_>>(),
        ["/r/a", "/r/b", "/r/c", "/r/leased"]
    );
    // The lease came back with its key; revoking it deletes the key.
    assert_eq!(store.keep_alive(lease.id).await?, lease.ttl);
    store.revoke_lease(lease.id).await?;
    assert!(store.get("/r/leased").await?.is_none());
    // Revisions go on from where they were.
    assert_eq!(store.put("/r/d", b("6")).await?, current + 2);
    Ok(())
}

#[test]
fn refuses_a_directory_it_does_not_own() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    std::fs::create_dir(&data)?;
    std::fs::write(data.join("member"), "etcd's, not ours")?;
    let message = refusal(EmbeddedStore::open(Options::new(&data)));
    assert!(message.contains("not a keel-store data directory"), "{message}");
    assert_eq!(std::fs::read_to_string(data.join("member"))?, "etcd's, not ours");
    assert_eq!(std::fs::read_dir(&data)?.count(), 1, "the refusal wrote into the directory");

    let file = dir.path().join("a-file");
    std::fs::write(&file, "x")?;
    let message = refusal(EmbeddedStore::open(Options::new(&file)));
    assert!(message.contains("not a directory"), "{message}");
    Ok(())
}

#[test]
fn refuses_foreign_files() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    std::fs::create_dir(&data)?;
    let db = data.join("keel-store.redb");
    let foreign = b"SQLite format 3\0 this is somebody else's database".repeat(200);
    std::fs::write(&db, &foreign)?;
    let message = refusal(EmbeddedStore::open(Options::new(&data)));
    assert!(message.contains("keel-store.redb"), "{message}");
    assert_eq!(std::fs::read(&db)?, foreign, "the refused file was changed");

    // A redb database, but not a keel-store one.
    std::fs::remove_file(&db)?;
    {
        let other = redb::Database::create(&db)?;
        let txn = other.begin_write()?;
        txn.open_table(redb::TableDefinition::<&str, &str>::new("theirs"))?.insert("k", "v")?;
        txn.commit()?;
    }
    let message = refusal(EmbeddedStore::open(Options::new(&data)));
    assert!(message.contains("foreign redb file"), "{message}");
    Ok(())
}

#[tokio::test]
async fn refuses_a_second_opener() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store = EmbeddedStore::open(options(dir.path()))?;
    store.put("/x", b("1")).await?;
    let message = refusal(EmbeddedStore::open(options(dir.path())));
    assert!(message.contains("in use by another keel-store"), "{message}");
    // The first one is unharmed.
    assert_eq!(store.put("/x", b("2")).await?, 2);
    drop(store);
    let store = EmbeddedStore::open(options(dir.path()))?;
    assert_eq!(store.get("/x").await?.map(|kv| kv.value), Some(b("2")));
    Ok(())
}

#[tokio::test]
async fn refuses_a_corrupted_file() -> Result<()> {
    let dir = tempfile::tempdir()?;
    {
        let store = EmbeddedStore::open(options(dir.path()))?;
        for i in 0..200 {
            store.put(&format!("/c/{i}"), b(&format!("CORRUPT-ME-{i:04}-{}", "v".repeat(200)))).await?;
        }
    }
    let db = dir.path().join("data").join("keel-store.redb");
    let mut bytes = std::fs::read(&db)?;
    let needle = b"CORRUPT-ME-0100";
    let mut hits = 0;
    for at in 0..bytes.len() - needle.len() {
        if &bytes[at..at + needle.len()] == needle {
            bytes[at + 11] ^= 0x55;
            hits += 1;
        }
    }
    assert!(hits > 0, "the value is not in the file");
    std::fs::write(&db, &bytes)?;
    let message = refusal(EmbeddedStore::open(options(dir.path())));
    assert!(message.contains("corrupted"), "{message}");
    assert_eq!(std::fs::read(&db)?, bytes, "the refused file was changed");
    Ok(())
}

#[tokio::test]
async fn a_slow_watch_catches_up_from_disk() -> Result<()> {
    use futures::StreamExt;
    let fixture = open().await?;
    let store = fixture.store.clone();
    let start = store.current_revision().await? + 1;
    let mut watch = store.watch("/slow/", None).await?;
    // One writer, so one commit per write: far more commits than the in-memory fan-out holds (1024),
    // while the watch is not read.
    const WRITES: i64 = 2500;
    for i in 0..WRITES {
        store.put(&format!("/slow/{}", i % 10), b(&i.to_string())).await?;
    }
    for expected in start..start + WRITES {
        let event = watch.next().await.expect("the watch ended")?;
        assert_eq!(event.revision(), expected);
    }
    Ok(())
}

#[tokio::test]
async fn scheduled_compaction() -> Result<()> {
    use keel_store::{RangeRequest, StoreError};
    let dir = tempfile::tempdir()?;
    let mut options = options(dir.path());
    options.compaction_interval = Some(std::time::Duration::from_millis(100));
    let store = EmbeddedStore::open(options)?;
    let first = store.put("/s/a", b("1")).await?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        store.put("/s/a", b("more")).await?;
        match store.range(RangeRequest::key("/s/a").at(first)).await {
            Err(StoreError::Compacted { .. }) => break,
            Ok(_) => assert!(std::time::Instant::now() < deadline, "no compaction ran"),
            Err(other) => return Err(other.into()),
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(store.get("/s/a").await?.map(|kv| kv.value), Some(b("more")));
    Ok(())
}

#[tokio::test]
async fn storeutl_check_reports_and_refuses() -> Result<()> {
    let dir = tempfile::tempdir()?;
    {
        let store = EmbeddedStore::open(options(dir.path()))?;
        store.put("/u/a", b("1")).await?;
        store.put("/u/b", b("2")).await?;
        store.delete("/u/a", None).await?;
    }
    let check = |path: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_keel-storeutl")).arg("check").arg(path).output()
    };
    let output = check(&dir.path().join("data"))?;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains("revision 3, 1 keys"), "{output:?}");
    std::fs::write(dir.path().join("data").join("stray"), "x")?;
    let output = check(&dir.path().join("data"))?;
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("not a keel-store data directory"),
        "{output:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_the_future_that_falls_behind_starts_where_asked() -> Result<()> {
    use futures::StreamExt;
    let fixture = open().await?;
    let store = fixture.store.clone();
    let mut watch = store.watch("/f/", Some(1200)).await?;
    // More commits than the broadcast holds, all before the start revision.
    for i in 0..1100 {
        store.put(&format!("/f/{}", i % 10), b("early")).await?;
    }
    assert!(tokio::time::timeout(std::time::Duration::from_millis(500), watch.next()).await.is_err());
    for i in 1100..1250 {
        store.put(&format!("/f/{}", i % 10), b("late")).await?;
    }
    let first = watch.next().await.expect("the watch ended")?;
    assert_eq!(first.revision(), 1200);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_watches_catch_up_under_concurrent_writers() -> Result<()> {
    use futures::StreamExt;
    let fixture = open().await?;
    let store = fixture.store.clone();
    let start = store.current_revision().await? + 1;
    let mut watch = store.watch("/busy/", None).await?;
    // 64 writers: group commits of many revisions each, far more of them than the broadcast holds.
    let mut tasks = Vec::new();
    for w in 0..64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..60 {
                store.put(&format!("/busy/{w}"), b(&i.to_string())).await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let end = store.current_revision().await?;
    for expected in start..=end {
        let event = watch.next().await.expect("the watch ended")?;
        assert_eq!(event.revision(), expected);
    }
    Ok(())
}

#[tokio::test]
async fn debug_output_holds_no_values() -> Result<()> {
    let fixture = open().await?;
    fixture.store.put("/registry/secrets/default/db", b("hunter2-password")).await?;
    let shown = format!("{:?}", fixture.store);
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("revision: 1"), "{shown}");
    Ok(())
}

#[tokio::test]
async fn leases_outlive_a_restart_then_expire() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let lease = {
        let store = EmbeddedStore::open(options(dir.path()))?;
        let lease = store.grant_lease(std::time::Duration::from_secs(2)).await?;
        store.create("/events/e", b("x"), lease.id).await?;
        lease
    };
    let store = EmbeddedStore::open(options(dir.path()))?;
    // Restarted leases get their whole TTL again, as etcd does.
    assert!(store.get("/events/e").await?.is_some_and(|kv| kv.lease == lease.id));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while store.get("/events/e").await?.is_some() {
        assert!(std::time::Instant::now() < deadline, "the restored lease never expired");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(matches!(store.keep_alive(lease.id).await, Err(keel_store::StoreError::LeaseNotFound { .. })));
    Ok(())
}

#[test]
fn private_files_and_a_volume_root() -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("a").join("b").join("data");
    drop(EmbeddedStore::open(Options::new(&data))?);
    assert_eq!(std::fs::metadata(&data)?.permissions().mode() & 0o777, 0o700);
    assert_eq!(std::fs::metadata(data.join("keel-store.redb"))?.permissions().mode() & 0o777, 0o600);
    // A data directory at the root of its own ext4 volume holds lost+found.
    let volume = dir.path().join("volume");
    std::fs::create_dir_all(volume.join("lost+found"))?;
    drop(EmbeddedStore::open(Options::new(&volume))?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_share_commits() -> Result<()> {
    let fixture = open().await?;
    let store = fixture.store.clone();
    store.put("/g/first", b("x")).await?;
    assert_eq!(store.commit_stats().commits, 1);
    let mut tasks = Vec::new();
    for w in 0..64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                store.put(&format!("/g/{w}"), b(&i.to_string())).await?;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let stats = store.commit_stats();
    assert_eq!(stats.transactions, 1 + 64 * 20);
    // Group commit: many acknowledged writes per fsync.
    assert!(stats.commits * 4 < stats.transactions, "{stats:?}: writers did not share commits");
    eprintln!("{stats:?}");
    Ok(())
}
