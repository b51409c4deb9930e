//! Crash tests of the embedded store: `keel-storeutl load` writes with 64 concurrent writers and
//! prints every acknowledged write; it is stopped mid-write, by SIGKILL or by a simulated power loss
//! on the testbed's FUSE filesystem (which drops everything not fsynced). After each round the store
//! must reopen cleanly with every acknowledged write in it, and each writer's transactions whole.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use keel_store::embedded::{EmbeddedStore, Options};
use keel_store::{RangeRequest, Store};
use keel_testbed::durable_fs::DurableFs;

const WRITERS: usize = 64;

/// A small deterministic generator: the seed is printed so a failing round can be replayed.
struct Rng(u64);

impl Rng {
    fn from_time() -> Rng {
        let seed = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1) | 1;
        eprintln!("crash rounds seed {seed}");
        Rng(seed)
    }

    /// Uniform-enough in `low..high` (xorshift64).
    fn between(&mut self, low: u64, high: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        low + self.0 % (high - low)
    }
}

/// One acknowledged write: writer, its write number, the revision.
type Ack = (usize, u64, i64);

/// One `keel-storeutl load` run and the thread collecting its acknowledgements.
struct Writer {
    child: Child,
    acks: Option<JoinHandle<Result<Vec<Ack>>>>,
    /// Told once the first write is acknowledged.
    first_ack: std::sync::mpsc::Receiver<()>,
}

impl Drop for Writer {
    /// A failed round leaves no writer behind.
    fn drop(&mut self) {
        let _already_gone = self.child.kill();
        let _reaped = self.child.wait();
    }
}

impl Writer {
    fn start(data_dir: &Path, prefix: &str) -> Result<Writer> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_keel-storeutl"))
            .arg("load")
            .arg(data_dir)
            .args(["--writers", &WRITERS.to_string(), "--prefix", prefix])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting keel-storeutl load")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (told, first_ack) = std::sync::mpsc::channel();
        let acks = std::thread::spawn(move || {
            let mut acks = Vec::new();
            for line in BufReader::new(stdout).lines() {
                let line = line?;
                let fields: Vec<&str> = line.split(' ').collect();
                match fields[..] {
                    ["ACK", w, n, revision] => acks.push((w.parse()?, n.parse()?, revision.parse()?)),
                    _ => bail!("unexpected output line {line:?}"),
                }
                if acks.len() == 1 {
                    let _test_gone = told.send(());
                }
            }
            Ok(acks)
        });
        Ok(Writer { child, acks: Some(acks), first_ack })
    }

    /// Waits until the writer has acknowledged a write (it is mid-write from then on).
    fn wait_started(&mut self) -> Result<()> {
        match self.first_ack.recv_timeout(Duration::from_secs(30)) {
            Ok(()) => Ok(()),
            Err(_) => match self.child.try_wait()? {
                Some(status) => bail!("keel-storeutl load exited before its first write with {status}"),
                None => bail!("keel-storeutl load acknowledged nothing in 30 s"),
            },
        }
    }

    fn kill(mut self) -> Result<Vec<Ack>> {
        // Already gone (a power loss makes its writes fail) is fine too.
        let _already_gone = self.child.kill();
        self.child.wait()?;
        let acks = self.acks.take().context("acks already collected")?;
        acks.join().map_err(|_| anyhow::anyhow!("the ack reader panicked"))?
    }
}

/// Opens the store and checks every acknowledged write of `prefix` is there, whole.
async fn verify(data_dir: &Path, prefix: &str, acks: &[Ack]) -> Result<usize> {
    let store = EmbeddedStore::open(Options::new(data_dir)).context("reopening after the crash")?;
    let written = store.range(RangeRequest::prefix(prefix)).await?;
    let by_key: BTreeMap<&str, _> = written.kvs.iter().map(|kv| (kv.key.as_str(), kv)).collect();
    for &(w, n, revision) in acks {
        let key = format!("{prefix}w{w}/{n}");
        let kv = by_key.get(key.as_str()).with_context(|| format!("acknowledged write {key} is lost"))?;
        ensure!(kv.mod_revision == revision, "{key} at {} instead of {revision}", kv.mod_revision);
        // The value keel-storeutl load writes (see its load_value).
        ensure!(kv.value == format!("writer {w} write {n} {}", "x".repeat(64)).as_bytes(), "{key} damaged");
    }
    // Atomicity: each writer's `last` key names a write that is present, with the same revision.
    for w in 0..WRITERS {
        let Some(last) = by_key.get(format!("{prefix}last/w{w}").as_str()) else { continue };
        let n = std::str::from_utf8(&last.value)?;
        let key = format!("{prefix}w{w}/{n}");
        let kv =
            by_key.get(key.as_str()).with_context(|| format!("{prefix}last/w{w} names missing {key}"))?;
        ensure!(kv.mod_revision == last.mod_revision, "{key} and its last marker differ in revision");
    }
    ensure!(store.current_revision().await? >= acks.iter().map(|a| a.2).max().unwrap_or(0));
    Ok(acks.len())
}

/// `rounds` rounds of: start `keel-storeutl load` on `data`, wait for its first acknowledged write,
/// let it write for a random 10–300 ms, `stop` it, then check every acknowledged write survived.
/// Returns how many writes were acknowledged in all.
async fn crash_rounds(
    data: &Path,
    rounds: usize,
    name: &str,
    mut stop: impl FnMut() -> Result<()>,
) -> Result<usize> {
    let mut rng = Rng::from_time();
    let mut total = 0;
    for round in 0..rounds {
        let prefix = format!("/{name}/{round}/");
        let mut writer = Writer::start(data, &prefix)?;
        writer.wait_started()?;
        std::thread::sleep(Duration::from_millis(rng.between(10, 300)));
        stop()?;
        let acks = writer.kill()?;
        total += verify(data, &prefix, &acks).await.with_context(|| format!("{name} round {round}"))?;
    }
    ensure!(total > 0, "no write was acknowledged in {rounds} rounds");
    eprintln!("{rounds} {name} rounds: {total} acknowledged writes, all present");
    Ok(total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // The writer is killed right after `stop`, with SIGKILL.
    crash_rounds(&dir.path().join("data"), 20, "sigkill", || Ok(())).await?;
    Ok(())
}

/// A power-loss filesystem mounted in a temp dir (root), and the data directory to use on it.
fn power_loss_fs() -> Result<(tempfile::TempDir, DurableFs, std::path::PathBuf)> {
    keel_testbed::require_root()?;
    let dir = tempfile::tempdir()?;
    let mountpoint = dir.path().join("mnt");
    std::fs::create_dir(&mountpoint)?;
    let fs = DurableFs::mount(&mountpoint)?;
    let data = fs.mountpoint().join("data");
    Ok((dir, fs, data))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_at_random_moments() -> Result<()> {
    let (_dir, mut fs, data) = power_loss_fs()?;
    // Power goes while the writer writes; everything it had not fsynced is gone.
    crash_rounds(&data, 10, "power", || Ok(fs.power_loss()?)).await?;
    Ok(())
}

/// CPU ticks (utime + stime) the store's committer thread has used so far.
fn committer_ticks() -> Result<u64> {
    for task in std::fs::read_dir("/proc/self/task")? {
        let task = task?.path();
        if std::fs::read_to_string(task.join("comm"))?.trim().starts_with("keel-store-com") {
            let stat = std::fs::read_to_string(task.join("stat"))?;
            let fields: Vec<&str> = stat.rsplit_once(") ").context("stat format")?.1.split(' ').collect();
            return Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?);
        }
    }
    bail!("no committer thread")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_failure_stops_writes_not_reads() -> Result<()> {
    use keel_store::StoreError;
    let (_dir, mut fs, data) = power_loss_fs()?;
    {
        let store = EmbeddedStore::open(Options::new(&data))?;
        let mut watch = store.watch("/f/", None).await?;
        let kept = store.put("/f/kept", bytes::Bytes::from_static(b"durable")).await?;
        let lease = store.grant_lease(Duration::from_secs(1)).await?;
        store.create("/f/leased", bytes::Bytes::from_static(b"x"), lease.id).await?;
        // The disk goes away under the store: its file now fails every write.
        fs.power_loss()?;
        let failed = store.put("/f/lost", bytes::Bytes::from_static(b"x")).await;
        ensure!(matches!(failed, Err(StoreError::Engine(_))), "{failed:?}");
        let after = store.put("/f/after", bytes::Bytes::from_static(b"x")).await;
        ensure!(matches!(after, Err(StoreError::Engine(_))), "{after:?}");
        // Watches end instead of waiting for events that cannot come.
        use futures::StreamExt;
        let mut items = Vec::new();
        while let Some(item) = tokio::time::timeout(Duration::from_secs(10), watch.next()).await? {
            items.push(item);
        }
        ensure!(matches!(items.last(), Some(Err(StoreError::Closed))), "{items:?}");
        let late = store.watch("/f/", None).await?.next().await;
        ensure!(matches!(late, Some(Err(StoreError::Closed))), "{late:?}");
        // What was committed before is still served.
        ensure!(store.get("/f/kept").await?.is_some_and(|kv| kv.mod_revision == kept));
        // Idle (with an expired lease it can no longer revoke), the committer waits instead of spinning.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let before = committer_ticks()?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let used = committer_ticks()? - before;
        ensure!(used < 20, "the failed committer used {used} CPU ticks in 1 s while idle");
    }
    // Remounted, the store opens with everything acknowledged.
    let store = EmbeddedStore::open(Options::new(&data))?;
    ensure!(store.get("/f/kept").await?.is_some());
    ensure!(store.get("/f/lost").await?.is_none());
    Ok(())
}
