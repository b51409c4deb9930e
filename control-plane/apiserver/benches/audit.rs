//! `cargo xtask bench audit`: what the audit log costs a create. keel-apiserver (embedded store)
//! and kube-apiserver v1.34 (etcd 3.6, one member) each run twice in the same run, without an
//! audit policy and with one recording every request at Metadata level to a file
//! (`--audit-policy-file` + `--audit-log-path`; keel's log in its default `blocking` mode,
//! kube-apiserver's too, which writes each line on the request's goroutine). The four servers are
//! measured in turn, round after round: pod creates from 64 HTTP/2 streams over 8 connections,
//! creates/s and the server's CPU per create (its process plus its etcd, from /proc).
//!
//! `-- ROUNDS` (default 3).

mod common;

use std::path::Path;

use common::{Endpoint, median};
use keel_testbed::bench::Report;
use keel_testbed::kube_apiserver::{KubeApiServer, KubeApiServerOptions};
use keel_testbed::process::Daemon;

const POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n";
const CREATES: usize = 3200;

/// One server under test.
struct Server {
    name: &'static str,
    endpoint: Endpoint,
    log: Option<std::path::PathBuf>,
    _keel: Option<Daemon>,
    _kube: Option<KubeApiServer>,
}

/// The audit flags for `name` under `dir` (`--audit-policy-file`, `--audit-log-path`) and its log.
fn audit_flags(name: &str, dir: &Path) -> (Vec<String>, std::path::PathBuf) {
    let policy = dir.join("policy.yaml");
    std::fs::write(&policy, POLICY).expect("policy");
    let log = dir.join(format!("{name}.log"));
    let flags = vec![
        format!("--audit-policy-file={}", policy.display()),
        format!("--audit-log-path={}", log.display()),
    ];
    (flags, log)
}

async fn keel(name: &'static str, dir: &Path, audited: bool) -> Server {
    let (flags, log) = if audited { Some(audit_flags(name, dir)) } else { None }.unzip();
    let (daemon, endpoint) = common::keel(name, &dir.join(name), &flags.unwrap_or_default()).await;
    Server { name, endpoint, log, _keel: Some(daemon), _kube: None }
}

fn kube(name: &'static str, dir: &Path, audited: bool) -> Server {
    let mut options = KubeApiServerOptions::new();
    let log = audited.then(|| {
        let (flags, log) = audit_flags(name, dir);
        options.args.extend(flags);
        log
    });
    let server = KubeApiServer::start_with(&options).expect("kube-apiserver");
    Server { name, endpoint: common::kube_admin(&server), log, _keel: None, _kube: Some(server) }
}

impl Server {
    /// `count` pod creates: creates/s and server CPU per create (ms).
    async fn creates(&self, prefix: &str, count: usize) -> (f64, f64) {
        let (_, wall, cpu) = self.endpoint.creates(prefix, count).await;
        (count as f64 / wall.as_secs_f64(), cpu.as_secs_f64() * 1000.0 / count as f64)
    }
}

fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let servers = runtime.block_on(async {
        [
            keel("keel", dir.path(), false).await,
            keel("keel_audited", dir.path(), true).await,
            kube("kube_apiserver", dir.path(), false),
            kube("kube_apiserver_audited", dir.path(), true),
        ]
    });
    let mut report = Report::new("audit");
    let mut figures: Vec<(f64, f64)> = Vec::new();
    runtime.block_on(async {
        for server in &servers {
            server.endpoint.prepare().await;
        }
        let mut rates = vec![Vec::new(); servers.len()];
        let mut cpus = vec![Vec::new(); servers.len()];
        for round in 0..rounds {
            for (i, server) in servers.iter().enumerate() {
                let (rate, cpu) = server.creates(&format!("r{round}"), CREATES).await;
                rates[i].push(rate);
                cpus[i].push(cpu);
            }
        }
        for (i, server) in servers.iter().enumerate() {
            let (rate, cpu) = (median(&mut rates[i]), median(&mut cpus[i]));
            report.figure(
                &format!("{}_creates_per_s", server.name),
                &format!("{}: pod creates/s", server.name),
                &format!("{rate:.0}"),
            );
            report.figure(
                &format!("{}_create_cpu_ms", server.name),
                &format!("{}: server CPU per create ms", server.name),
                &format!("{cpu:.3}"),
            );
            figures.push((rate, cpu));
        }
    });
    for server in &servers {
        if let Some(log) = &server.log {
            // Each create is two events (RequestReceived, ResponseComplete): the log holds them all.
            let lines = std::fs::read_to_string(log)
                .map(|t| {
                    t.lines().filter(|l| l.contains("\"verb\":\"create\"") && l.contains("\"pods\"")).count()
                })
                .unwrap_or(0);
            report.figure(
                &format!("{}_create_events", server.name),
                &format!("{}: pod create events logged", server.name),
                &lines.to_string(),
            );
        }
    }
    report.figure(
        "keel_audited_creates_ratio",
        "keel creates/s with a Metadata audit policy / without",
        &format!("{:.3}", figures[1].0 / figures[0].0),
    );
    report.figure(
        "keel_audited_cpu_ratio",
        "keel CPU per create with a Metadata audit policy / without",
        &format!("{:.3}", figures[1].1 / figures[0].1),
    );
    report.figure(
        "kube_apiserver_audited_creates_ratio",
        "kube-apiserver creates/s with a Metadata audit policy / without",
        &format!("{:.3}", figures[3].0 / figures[2].0),
    );
    report.figure(
        "kube_apiserver_audited_cpu_ratio",
        "kube-apiserver CPU per create with a Metadata audit policy / without",
        &format!("{:.3}", figures[3].1 / figures[2].1),
    );
    report.print();
}
