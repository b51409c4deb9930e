//! `cargo xtask bench store`: the embedded store against etcd (one member, same disk, both durable),
//! side by side in one run, over the same `Store` trait the API server uses.
//!
//! - writes_1 / writes_64: durable single-key puts from 1 and 64 concurrent writers: writes/s and the
//!   p50/p99 latency of each put; ratio = embedded/etcd throughput.
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
use keel_testbed::etcd::EtcdCluster;

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

fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(3);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let cluster = EtcdCluster::start(1).expect("etcd");
    runtime.block_on(async {
        let embedded: Arc<dyn Store> =
            Arc::new(EmbeddedStore::open(Options::new(dir.path().join("data"))).expect("embedded store"));
        let etcd: Arc<dyn Store> =
            Arc::new(EtcdStore::connect(EtcdOptions::new(cluster.client_urls())).await.expect("etcd store"));
        let stores = [("embedded", &embedded), ("etcd", &etcd)];
        let mut report = Report::new("store");

        for writers in [1, 64] {
            let writes = if writers == 1 { WRITES_PER_ROUND / 8 } else { WRITES_PER_ROUND };
            let mut loads: [Vec<Load>; 2] = [Vec::new(), Vec::new()];
            for round in 0..rounds {
                for turn in 0..2 {
                    let which = (round + turn) % 2;
                    let (name, store) = stores[which];
                    let load = write_load(store, writers, writes, &format!("{name}-{writers}-{round}")).await;
                    loads[which].push(load);
                }
            }
            let rate = |loads: &[Load]| {
                let mut rates: Vec<f64> = loads.iter().map(Load::per_second).collect();
                rates.sort_by(f64::total_cmp);
                rates[rates.len() / 2]
            };
            let latencies = |loads: &[Load]| {
                let mut all = Samples::default();
                for load in loads {
                    all.extend(&load.latencies);
                }
                all
            };
            let (keel_rate, etcd_rate) = (rate(&loads[0]), rate(&loads[1]));
            let (keel_lat, etcd_lat) = (latencies(&loads[0]), latencies(&loads[1]));
            report.figure(
                &format!("writes_{writers}_per_s"),
                &format!("durable puts, {writers} writer(s): embedded writes/s"),
                &format!("{keel_rate:.0}"),
            );
            report.figure(
                &format!("writes_{writers}_etcd_per_s"),
                "  etcd writes/s",
                &format!("{etcd_rate:.0}"),
            );
            report.figure(
                &format!("writes_{writers}_ratio"),
                "  ratio embedded/etcd",
                &format!("{:.2}", keel_rate / etcd_rate),
            );
            for (key, samples) in [("", &keel_lat), ("_etcd", &etcd_lat)] {
                report.figure(
                    &format!("writes_{writers}{key}_p50_ms"),
                    &format!("  {} put latency p50 ms", if key.is_empty() { "embedded" } else { "etcd" }),
                    &ms(samples.percentile(50.0)),
                );
                report.figure(
                    &format!("writes_{writers}{key}_p99_ms"),
                    &format!("  {} put latency p99 ms", if key.is_empty() { "embedded" } else { "etcd" }),
                    &ms(samples.percentile(99.0)),
                );
            }
        }

        fill(&embedded).await;
        fill(&etcd).await;
        let (mut keel, mut peer) = (Samples::default(), Samples::default());
        for round in 0..rounds * 5 {
            if round % 2 == 0 {
                keel.push(range_10k(&embedded).await);
                peer.push(range_10k(&etcd).await);
            } else {
                peer.push(range_10k(&etcd).await);
                keel.push(range_10k(&embedded).await);
            }
        }
        report.compare("range_10k", "range of 10k keys of 1 KiB", &keel, "etcd", &peer);

        let (mut keel, mut peer) = (Samples::default(), Samples::default());
        for _ in 0..rounds {
            keel.extend(&watch_latency(&embedded, 100).await);
            peer.extend(&watch_latency(&etcd, 100).await);
        }
        report.compare("watch", "put start to watch event (median)", &keel, "etcd", &peer);
        report.figure("watch_p99_ms", "  embedded watch latency p99 ms", &ms(keel.percentile(99.0)));
        report.figure("watch_etcd_p99_ms", "  etcd watch latency p99 ms", &ms(peer.percentile(99.0)));
        report.print();
    });
}
