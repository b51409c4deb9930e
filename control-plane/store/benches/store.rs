//! `cargo xtask bench store`: the embedded store against etcd 3.6 (the release line Kubernetes 1.34
//! ships with, built by `cargo xtask peers`) and Debian's etcd 3.4.23 (one member each, same disk, all
//! durable), side by side in one run, over the same `Store` trait the API server uses.
//!
//! - writes_1 / writes_64: durable single-key puts from 1 and 64 concurrent writers: writes/s, the
//!   p50/p99 latency of each put and the CPU per put (this process, which is the client and for the
//!   embedded store the store, plus the etcd member); ratio = embedded/etcd throughput.
//! - range_10k: one range read of 10,000 keys of 1 KiB at the latest revision.
//! - watch: from the start of a put to its event reaching a watcher, one put at a time.
//!
//! Rounds alternate which store goes first. `-- ROUNDS` sets the round count (default 3).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use keel_store::embedded::{EmbeddedStore, Options};
use keel_store::etcd::{EtcdOptions, EtcdStore};
use keel_store::{RangeRequest, Store, Txn, TxnOp};
use keel_testbed::bench::{self, Report, Samples};
use keel_testbed::etcd::{EtcdCluster, EtcdConfig, EtcdRelease};

const WRITES_PER_ROUND: usize = 6400;
const RANGE_KEYS: usize = 10_000;

/// One write load's figures.
#[derive(Default)]
struct Load {
    latencies: Samples,
    writes: usize,
    elapsed: Duration,
}

impl Load {
    fn per_second(&self) -> f64 {
        self.writes as f64 / self.elapsed.as_secs_f64()
    }
}

async fn write_load(store: &Arc<dyn Store>, writers: usize, writes: usize, tag: &str) -> Load {
    let value = Bytes::from(vec![b'v'; 256]);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (store, value, tag) = (store.clone(), value.clone(), tag.to_owned());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Samples::default();
            for i in 0..writes / writers {
                let key = format!("/bench/{tag}/w{w}/{}", i % 100);
                let start = Instant::now();
                store.put(&key, value.clone()).await.expect("durable put");
                latencies.push(start.elapsed());
            }
            latencies
        }));
    }
    let mut load = Load::default();
    for task in tasks {
        let latencies = task.await.expect("writer task");
        load.writes += latencies.len();
        load.latencies.extend(&latencies);
    }
    load.elapsed = started.elapsed();
    load
}

async fn fill(store: &Arc<dyn Store>) {
    let value = Bytes::from(vec![b'r'; 1024]);
    for chunk in 0..RANGE_KEYS / 100 {
        let ops = (0..100).map(|i| TxnOp::put(format!("/range/key-{:05}", chunk * 100 + i), value.clone()));
        store.txn(Txn::new().and_then(ops)).await.expect("fill range keys");
    }
}

async fn range_10k(store: &Arc<dyn Store>) -> Duration {
    let start = Instant::now();
    let response = store.range(RangeRequest::prefix("/range/")).await.expect("range");
    let took = start.elapsed();
    assert_eq!(response.kvs.len(), RANGE_KEYS);
    took
}

async fn watch_latency(store: &Arc<dyn Store>, count: usize) -> Samples {
    let mut watch = store.watch("/watch/", None).await.expect("watch");
    let mut samples = Samples::default();
    for i in 0..count {
        let start = Instant::now();
        store.put("/watch/key", Bytes::from(i.to_string())).await.expect("put");
        let event = watch.next().await.expect("watch ended").expect("watch event");
        samples.push(start.elapsed());
        assert_eq!(event.kv.value, i.to_string().as_bytes());
    }
    samples
}

fn ms(d: Duration) -> String {
    bench::ms(d)
}

/// A store under test: the embedded one, or an etcd cluster (whose process's CPU counts too).
struct Candidate {
    name: String,
    store: Arc<dyn Store>,
    /// The etcd member's pid; the embedded store runs in this process.
    server: Option<u32>,
}

impl Candidate {
    /// CPU used so far by everything serving this store's requests: this process (client and, for the
    /// embedded store, the store) plus the etcd member.
    fn cpu(&self) -> Duration {
        bench::cpu_time() + self.server.map_or(Duration::ZERO, |pid| bench::process_usage(pid).0)
    }
}

fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(3);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let releases = [EtcdRelease::Current, EtcdRelease::Debian];
    let clusters: Vec<EtcdCluster> = releases
        .iter()
        .map(|&release| EtcdCluster::start_with(EtcdConfig::new(1).release(release)).expect("etcd"))
        .collect();
    runtime.block_on(async {
        let mut candidates = vec![Candidate {
            name: "embedded".into(),
            store: Arc::new(
                EmbeddedStore::open(Options::new(dir.path().join("data"))).expect("embedded store"),
            ),
            server: None,
        }];
        for (release, cluster) in releases.iter().zip(&clusters) {
            let store =
                EtcdStore::connect(EtcdOptions::new(cluster.client_urls())).await.expect("etcd store");
            candidates.push(Candidate {
                name: format!("etcd {}", release.version()),
                store: Arc::new(store),
                server: Some(cluster.pid(0).expect("etcd pid")),
            });
        }
        let mut report = Report::new("store");
        let key = |c: &Candidate| c.name.replace(|c: char| !c.is_ascii_alphanumeric(), "_");

        for writers in [1, 64] {
            let writes = if writers == 1 { WRITES_PER_ROUND / 8 } else { WRITES_PER_ROUND };
            let mut loads: Vec<Vec<Load>> = candidates.iter().map(|_| Vec::new()).collect();
            let mut cpu = vec![Duration::ZERO; candidates.len()];
            for round in 0..rounds {
                // Each round starts with another store, so none always runs on a cold or warm machine.
                for turn in 0..candidates.len() {
                    let which = (round + turn) % candidates.len();
                    let candidate = &candidates[which];
                    let before = candidate.cpu();
                    let tag = format!("{}-{writers}-{round}", key(candidate));
                    let load = write_load(&candidate.store, writers, writes, &tag).await;
                    cpu[which] += candidate.cpu() - before;
                    loads[which].push(load);
                }
            }
            let rate = |loads: &[Load]| {
                let mut rates: Vec<f64> = loads.iter().map(Load::per_second).collect();
                rates.sort_by(f64::total_cmp);
                rates[rates.len() / 2]
            };
            let keel_rate = rate(&loads[0]);
            for (i, candidate) in candidates.iter().enumerate() {
                let k = if i == 0 { String::new() } else { format!("_{}", key(candidate)) };
                let this_rate = rate(&loads[i]);
                report.figure(
                    &format!("writes_{writers}{k}_per_s"),
                    &format!("durable puts, {writers} writer(s): {} writes/s", candidate.name),
                    &format!("{this_rate:.0}"),
                );
                let mut all = Samples::default();
                for load in &loads[i] {
                    all.extend(&load.latencies);
                }
                for p in [50, 99] {
                    report.figure(
                        &format!("writes_{writers}{k}_p{p}_ms"),
                        &format!("  {} put latency p{p} ms", candidate.name),
                        &ms(all.percentile(f64::from(p))),
                    );
                }
                let count: usize = loads[i].iter().map(|l| l.writes).sum();
                report.figure(
                    &format!("writes_{writers}{k}_cpu_us"),
                    &format!("  {} CPU per put µs (client + store)", candidate.name),
                    &format!("{:.1}", cpu[i].as_secs_f64() * 1e6 / count as f64),
                );
                if i > 0 {
                    report.figure(
                        &format!("writes_{writers}_ratio{k}"),
                        &format!("  ratio embedded/{} writes/s", candidate.name),
                        &format!("{:.2}", keel_rate / this_rate),
                    );
                }
            }
        }

        for candidate in &candidates {
            fill(&candidate.store).await;
        }
        let mut ranges: Vec<Samples> = candidates.iter().map(|_| Samples::default()).collect();
        let mut watches: Vec<Samples> = candidates.iter().map(|_| Samples::default()).collect();
        for round in 0..rounds * 5 {
            for turn in 0..candidates.len() {
                let which = (round + turn) % candidates.len();
                ranges[which].push(range_10k(&candidates[which].store).await);
            }
        }
        for round in 0..rounds {
            for turn in 0..candidates.len() {
                let which = (round + turn) % candidates.len();
                watches[which].extend(&watch_latency(&candidates[which].store, 100).await);
            }
        }
        for (what, label, samples) in [
            ("range_10k", "range of 10k keys of 1 KiB", &ranges),
            ("watch", "put start to its watch event", &watches),
        ] {
            for (i, candidate) in candidates.iter().enumerate() {
                let k = if i == 0 { String::new() } else { format!("_{}", key(candidate)) };
                report.figure(
                    &format!("{what}{k}_ms"),
                    &format!("{label}: {} median / p99 ms", candidate.name),
                    &ms(samples[i].median()),
                );
                report.figure(&format!("{what}{k}_p99_ms"), "  p99 ms", &ms(samples[i].percentile(99.0)));
                if i > 0 {
                    report.figure(
                        &format!("{what}_ratio{k}"),
                        &format!("  ratio {}/embedded", candidate.name),
                        &bench::ratio(&samples[0], &samples[i]),
                    );
                }
            }
        }
        report.print();
    });
}
