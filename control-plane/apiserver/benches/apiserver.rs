//! `cargo xtask bench apiserver`: the keel-apiserver binary on the embedded store and on etcd 3.6 (one
//! member), and the upstream kube-apiserver v1.34 on etcd 3.6 (`cargo xtask peers`), side by side in one
//! run, each with the same client (certificate auth as system:masters, the same HTTP/2 requests). CPU
//! and RSS count the server's own process plus its store's (the etcd member), from /proc.
//!
//! kube-apiserver runs with its default admission plugins and authorization (AlwaysAllow, as with no
//! `--authorization-mode`), serving a certificate of the same CA; there is no controller manager, so
//! the bench creates the `default` ServiceAccount its ServiceAccount admission plugin requires of a pod.
//!
//! - creates: pod creates from 64 concurrent HTTP/2 streams over 8 connections (the load generator
//!   shares the 2 cores): creates/s, p50/p99 latency, server CPU per create.
//! - list_10k: one LIST of 10,000 pods.
//! - watchers: 1,000 concurrent watches (20 connections × 50 streams); the time from a create to each
//!   watcher seeing its event, p99 over watchers and rounds.
//! - RSS of the server idle and holding 10,000 pods.
//!
//! `-- ROUNDS` (default 3) repeats the create and watch measurements.

mod common;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Endpoint;
use http_body_util::BodyExt;
use keel_testbed::bench::{Report, Samples, ms};
use keel_testbed::etcd::{EtcdCluster, EtcdConfig, EtcdRelease};
use keel_testbed::loopback::free_port;
use keel_testbed::process::{Daemon, Readiness};

/// What runs the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// keel-apiserver on its embedded store.
    KeelEmbedded,
    /// keel-apiserver on etcd 3.6.
    KeelEtcd,
    /// kube-apiserver v1.34 on etcd 3.6.
    Upstream,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::KeelEmbedded => "embedded",
            Kind::KeelEtcd => "etcd",
            Kind::Upstream => "kube_apiserver",
        }
    }
}

struct Server {
    daemon: Daemon,
    endpoint: Endpoint,
    etcd: Option<EtcdCluster>,
    _dir: tempfile::TempDir,
}

/// A PEM block of `der`.
fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let text = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> =
        text.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).expect("base64")).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

/// kube-apiserver on `etcd`, serving a certificate of keel's CA made in `pki` (so one client config
/// reaches every server); its service-account tokens are signed with the serving key.
fn kube_apiserver(pki: &std::path::Path, port: u16, etcd: &EtcdCluster) -> Command {
    let keys = keel_apiserver::pki::ensure(pki, &[]).expect("pki");
    let (cert, key) = (pki.join("serving.crt"), pki.join("serving.key"));
    std::fs::write(&cert, pem("CERTIFICATE", &keys.serving_chain[0])).expect("serving cert");
    let key_pem = pem("PRIVATE KEY", keys.serving_key.secret_der());
    std::fs::write(&key, &key_pem).expect("serving key");
    // The service-account token verifier wants the public half on its own.
    let public = pki.join("serving.pub");
    let pair = rcgen::KeyPair::from_pem(&key_pem).expect("serving key pair");
    std::fs::write(&public, pair.public_key_pem()).expect("public key");
    let mut command = Command::new(keel_testbed::peers::path("kube-apiserver").expect("kube-apiserver"));
    command
        .arg(format!("--etcd-servers={}", etcd.client_urls().join(",")))
        .args(["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", &format!("--secure-port={port}")])
        .arg(format!("--client-ca-file={}", pki.join("ca.crt").display()))
        .arg(format!("--tls-cert-file={}", cert.display()))
        .arg(format!("--tls-private-key-file={}", key.display()))
        .arg(format!("--service-account-key-file={}", public.display()))
        .arg(format!("--service-account-signing-key-file={}", key.display()))
        .args([
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/16",
        ])
        .arg(format!("--cert-dir={}", pki.display()));
    command
}

fn start(kind: Kind) -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let port = free_port().expect("port");
    let etcd = (kind != Kind::KeelEmbedded)
        .then(|| EtcdCluster::start_with(EtcdConfig::new(1).release(EtcdRelease::Current)).expect("etcd"));
    let pki = data.join("pki");
    let daemon = if let (Kind::Upstream, Some(etcd)) = (kind, &etcd) {
        let command = kube_apiserver(&pki, port, etcd);
        let ready = Readiness::Tcp(SocketAddr::from(([127, 0, 0, 1], port)));
        Daemon::start("kube-apiserver", command, ready, Duration::from_secs(60)).expect("start")
    } else {
        let mut command = Command::new(env!("CARGO_BIN_EXE_keel-apiserver"));
        command.arg("--data-dir").arg(&data).args([
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            &port.to_string(),
        ]);
        if let Some(cluster) = &etcd {
            command.arg("--etcd-servers").arg(cluster.client_urls().join(","));
        }
        let mut probe = Command::new("test");
        probe.arg("-s").arg(data.join("admin.kubeconfig"));
        Daemon::start("keel-apiserver", command, Readiness::Command(probe), Duration::from_secs(60))
            .expect("start")
    };
    let read = |name: &str| std::fs::read(pki.join(name)).expect("pki file");
    let endpoint = Endpoint {
        address: SocketAddr::from(([127, 0, 0, 1], port)),
        tls: common::client_tls(&read("ca.crt"), Some((&read("admin.crt"), &read("admin.key")))),
        bearer: None,
        pids: vec![],
    };
    Server { daemon, endpoint, etcd, _dir: dir }
}

impl Server {
    /// CPU time and resident memory of the server process plus its store's (the etcd member).
    fn usage(&self) -> (Duration, u64) {
        let (cpu, rss) = keel_testbed::bench::process_usage(self.daemon.pid());
        let (store_cpu, store_rss) = self.etcd.as_ref().map_or((Duration::ZERO, 0), |etcd| {
            keel_testbed::bench::process_usage(etcd.pid(0).expect("etcd pid"))
        });
        (cpu + store_cpu, rss + store_rss)
    }
}

async fn list_all(server: &Server) -> Duration {
    let mut sender = server.endpoint.connect().await;
    let start = Instant::now();
    let (_, body) =
        server.endpoint.send(&mut sender, "GET", "/api/v1/namespaces/default/pods", Vec::new()).await;
    let took = start.elapsed();
    assert!(body.len() > 1_000_000, "the list is too small: {} bytes", body.len());
    took
}

/// 1,000 watchers; the time from each create's start to every watcher seeing it.
async fn watchers(server: &Server, rounds: usize) -> Samples {
    let mut connections = Vec::new();
    for _ in 0..20 {
        connections.push(server.endpoint.connect().await);
    }
    let (events, mut seen) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    for w in 0..1000 {
        let mut sender = connections[w % 20].clone();
        let events = events.clone();
        sender.ready().await.expect("ready");
        let response = sender
            .send_request(server.endpoint.request(
                "GET",
                "/api/v1/namespaces/default/pods?watch=true&labelSelector=watched%3Dyes&resourceVersion=0",
                Vec::new(),
            ))
            .await
            .expect("watch");
        let mut body = response.into_body();
        tokio::spawn(async move {
            while let Some(Ok(frame)) = body.frame().await {
                if frame.data_ref().is_some_and(|d| !d.is_empty()) && events.send(Instant::now()).is_err() {
                    return;
                }
            }
        });
    }
    let mut sender = server.endpoint.connect().await;
    let mut samples = Samples::default();
    for round in 0..rounds {
        let body = format!(
            r#"{{"metadata":{{"name":"watched-{round}","labels":{{"watched":"yes"}}}},"spec":{{"containers":[{{"name":"c","image":"busybox"}}]}}}}"#
        );
        let start = Instant::now();
        let (status, _) = server
            .endpoint
            .send(&mut sender, "POST", "/api/v1/namespaces/default/pods", body.into_bytes())
            .await;
        assert_eq!(status, 201);
        for _ in 0..1000 {
            let at = tokio::time::timeout(Duration::from_secs(30), seen.recv())
                .await
                .expect("an event")
                .expect("channel");
            samples.push(at.duration_since(start));
        }
    }
    samples
}

fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(3);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let mut report = Report::new("apiserver");
    // Per kind: creates/s, CPU per create, LIST ms, watch p99 ms, idle RSS, RSS with 10k pods.
    let mut figures: Vec<(Kind, [f64; 6])> = Vec::new();
    runtime.block_on(async {
        for kind in [Kind::KeelEmbedded, Kind::KeelEtcd, Kind::Upstream] {
            let name = kind.name();
            let server = start(kind);
            server.endpoint.ready().await;
            server.endpoint.prepare().await;
            tokio::time::sleep(Duration::from_millis(500)).await;
            let (_, idle_rss) = server.usage();
            let mut rates = Vec::new();
            let mut latencies = Samples::default();
            let mut cpu_per_create = Vec::new();
            let mut created = 0;
            for round in 0..rounds {
                let (cpu_before, _) = server.usage();
                let (samples, wall, _) = server.endpoint.creates(&format!("r{round}"), 3200).await;
                let (cpu_after, _) = server.usage();
                created += samples.len();
                rates.push(samples.len() as f64 / wall.as_secs_f64());
                cpu_per_create.push((cpu_after - cpu_before).as_secs_f64() * 1000.0 / samples.len() as f64);
                latencies.extend(&samples);
            }
            server.endpoint.creates("fill", 10_000 - created.min(10_000)).await;
            rates.sort_by(f64::total_cmp);
            cpu_per_create.sort_by(f64::total_cmp);
            let key = |k: &str| format!("{name}_{k}");
            report.figure(
                &key("creates_per_s"),
                &format!("{name}: pod creates/s, 64 HTTP/2 streams"),
                &format!("{:.0}", rates[rates.len() / 2]),
            );
            report.figure(
                &key("create_p50_ms"),
                &format!("{name}: create latency p50 ms"),
                &ms(latencies.percentile(50.0)),
            );
            report.figure(
                &key("create_p99_ms"),
                &format!("{name}: create latency p99 ms"),
                &ms(latencies.percentile(99.0)),
            );
            report.figure(
                &key("create_cpu_ms"),
                &format!("{name}: server CPU per create ms"),
                &format!("{:.3}", cpu_per_create[cpu_per_create.len() / 2]),
            );
            let mut lists = Samples::default();
            let (cpu_before, _) = server.usage();
            for _ in 0..5 {
                lists.push(list_all(&server).await);
            }
            let (cpu_after, rss_10k) = server.usage();
            report.figure(
                &key("list_10k_ms"),
                &format!("{name}: LIST of 10k pods ms (median of 5)"),
                &ms(lists.median()),
            );
            report.figure(
                &key("list_10k_cpu_ms"),
                &format!("{name}: server CPU per LIST ms"),
                &format!("{:.1}", (cpu_after - cpu_before).as_secs_f64() * 1000.0 / 5.0),
            );
            let watch = watchers(&server, rounds).await;
            report.figure(
                &key("watch_p99_ms"),
                &format!("{name}: 1000 watchers see a create, p99 ms"),
                &ms(watch.percentile(99.0)),
            );
            report.figure(
                &key("watch_p50_ms"),
                &format!("{name}: 1000 watchers see a create, p50 ms"),
                &ms(watch.percentile(50.0)),
            );
            figures.push((
                kind,
                [
                    rates[rates.len() / 2],
                    cpu_per_create[cpu_per_create.len() / 2],
                    lists.median().as_secs_f64() * 1e3,
                    watch.percentile(99.0).as_secs_f64() * 1e3,
                    idle_rss as f64,
                    rss_10k as f64,
                ],
            ));
            report.figure(
                &key("idle_rss_mib"),
                &format!("{name}: server RSS idle MiB"),
                &format!("{:.1}", idle_rss as f64 / 1048576.0),
            );
            report.figure(
                &key("rss_10k_mib"),
                &format!("{name}: server RSS with 10k pods MiB"),
                &format!("{:.1}", rss_10k as f64 / 1048576.0),
            );
        }
    });
    // Keel against kube-apiserver: throughput as keel/upstream (higher is better), the rest as
    // keel/upstream of a cost (lower is better), as the targets are written.
    let upstream = figures.iter().find(|(k, _)| *k == Kind::Upstream).map(|(_, f)| *f);
    if let Some(upstream) = upstream {
        for (kind, f) in figures.iter().filter(|(k, _)| *k != Kind::Upstream) {
            let name = kind.name();
            for (i, what) in
                ["creates", "create_cpu", "list_10k", "watch_p99", "idle_rss", "rss_10k"].iter().enumerate()
            {
                report.figure(
                    &format!("{name}_{what}_ratio"),
                    &format!("{name}/kube-apiserver {what}"),
                    &format!("{:.2}", f[i] / upstream[i]),
                );
            }
        }
    }
    report.print();
}
