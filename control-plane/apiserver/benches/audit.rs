//! `cargo xtask bench audit`: what the audit log costs a create. keel-apiserver (embedded store)
//! and kube-apiserver v1.34 (etcd 3.6, one member) each run twice in the same run, without an
//! audit policy and with one recording every request at Metadata level to a file
//! (`--audit-policy-file` + `--audit-log-path`; keel's log in its default `blocking` mode,
//! kube-apiserver's too, which writes each line on the request's goroutine). The four servers are
//! measured in turn, round after round: pod creates from 64 HTTP/2 streams over 8 connections,
//! creates/s and the server's CPU per create (its process plus its etcd, from /proc).
//!
//! `-- ROUNDS` (default 3).

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use keel_testbed::bench::Report;
use keel_testbed::kube_apiserver::{KubeApiServer, KubeApiServerOptions};
use keel_testbed::loopback::free_port;
use keel_testbed::process::{Daemon, Readiness};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};

const POLICY: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n";
const CREATES: usize = 3200;

/// One server under test.
struct Server {
    name: &'static str,
    address: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    pid: u32,
    etcd_pid: Option<u32>,
    log: Option<std::path::PathBuf>,
    _keel: Option<Daemon>,
    _kube: Option<KubeApiServer>,
}

fn client_tls(ca: &[u8], cert: &[u8], key: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca).expect("ca")).expect("root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("tls versions")
        .with_root_certificates(roots)
        .with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(cert).expect("cert")],
            PrivateKeyDer::from_pem_slice(key).expect("key"),
        )
        .expect("client auth");
    tls.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(tls)
}

fn keel(name: &'static str, dir: &Path, audited: bool) -> Server {
    let data = dir.join(name);
    let port = free_port().expect("port");
    let mut command = Command::new(env!("CARGO_BIN_EXE_keel-apiserver"));
    command.arg("--data-dir").arg(&data).args([
        "--bind-address",
        "127.0.0.1",
        "--secure-port",
        &port.to_string(),
    ]);
    let log = audited.then(|| {
        let policy = dir.join("policy.yaml");
        std::fs::write(&policy, POLICY).expect("policy");
        let log = dir.join(format!("{name}.log"));
        command.arg("--audit-policy-file").arg(&policy).arg("--audit-log-path").arg(&log);
        log
    });
    let mut probe = Command::new("test");
    probe.arg("-s").arg(data.join("admin.kubeconfig"));
    let daemon =
        Daemon::start(name, command, Readiness::Command(probe), Duration::from_secs(60)).expect("start");
    let read = |file: &str| std::fs::read(data.join("pki").join(file)).expect("pki file");
    Server {
        name,
        address: SocketAddr::from(([127, 0, 0, 1], port)),
        tls: client_tls(&read("ca.crt"), &read("admin.crt"), &read("admin.key")),
        pid: daemon.pid(),
        etcd_pid: None,
        log,
        _keel: Some(daemon),
        _kube: None,
    }
}

fn kube(name: &'static str, dir: &Path, audited: bool) -> Server {
    let mut options = KubeApiServerOptions::new();
    let log = audited.then(|| {
        let policy = dir.join("policy.yaml");
        std::fs::write(&policy, POLICY).expect("policy");
        let log = dir.join(format!("{name}.log"));
        options = options.clone().arg(format!("--audit-policy-file={}", policy.display()));
        options = options.clone().arg(format!("--audit-log-path={}", log.display()));
        log
    });
    let server = KubeApiServer::start_with(&options).expect("kube-apiserver");
    let admin = server.admin();
    Server {
        name,
        address: server.address(),
        tls: client_tls(server.ca_pem().as_bytes(), admin.cert_pem.as_bytes(), admin.key_pem.as_bytes()),
        pid: server.daemon().pid(),
        etcd_pid: server.etcd().pid(0).ok(),
        log,
        _keel: None,
        _kube: Some(server),
    }
}

impl Server {
    async fn connect(&self) -> SendRequest<Full<Bytes>> {
        let tcp = tokio::net::TcpStream::connect(self.address).await.expect("connect");
        tcp.set_nodelay(true).expect("TCP_NODELAY");
        let tls = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(ServerName::try_from("127.0.0.1").expect("name").to_owned(), tcp)
            .await
            .expect("tls");
        let (sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await.expect("h2");
        tokio::spawn(connection);
        sender
    }

    fn cpu(&self) -> Duration {
        let (cpu, _) = keel_testbed::bench::process_usage(self.pid);
        cpu + self.etcd_pid.map_or(Duration::ZERO, |pid| keel_testbed::bench::process_usage(pid).0)
    }

    /// The `default` ServiceAccount (no controller makes it for kube-apiserver here).
    async fn prepare(&self) {
        let mut sender = self.connect().await;
        let body = br#"{"metadata":{"name":"default"}}"#.to_vec();
        let response = sender
            .send_request(request("POST", "/api/v1/namespaces/default/serviceaccounts", body))
            .await
            .expect("serviceaccount");
        assert!([201, 409].contains(&response.status().as_u16()), "serviceaccount: {}", response.status());
    }

    /// `count` pod creates from 64 streams over 8 connections: creates/s and CPU per create (ms).
    async fn creates(&self, prefix: &str, count: usize) -> (f64, f64) {
        let mut senders = Vec::new();
        for _ in 0..8 {
            senders.push(self.connect().await);
        }
        let cpu = self.cpu();
        let started = Instant::now();
        let mut tasks = Vec::new();
        for stream in 0..64 {
            let mut sender = senders[stream % 8].clone();
            let prefix = prefix.to_owned();
            tasks.push(tokio::spawn(async move {
                for i in (stream..count).step_by(64) {
                    sender.ready().await.expect("ready");
                    let name = format!("{prefix}-{i}");
                    let body = format!(
                        r#"{{"metadata":{{"name":"{name}","labels":{{"app":"bench"}}}},"spec":{{"containers":[{{"name":"c","image":"busybox:1.36"}}]}}}}"#
                    );
                    let response = sender
                        .send_request(request("POST", "/api/v1/namespaces/default/pods", body.into_bytes()))
                        .await
                        .expect("create");
                    assert_eq!(response.status(), 201);
                    let _ = response.into_body().collect().await;
                }
            }));
        }
        for task in tasks {
            task.await.expect("writer");
        }
        let wall = started.elapsed();
        let cpu = self.cpu() - cpu;
        (count as f64 / wall.as_secs_f64(), cpu.as_secs_f64() * 1000.0 / count as f64)
    }
}

fn request(method: &str, path: &str, body: Vec<u8>) -> hyper::Request<Full<Bytes>> {
    hyper::Request::builder()
        .method(method)
        .uri(format!("https://127.0.0.1{path}"))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("request")
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(3);
    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let servers = [
        keel("keel", dir.path(), false),
        keel("keel_audited", dir.path(), true),
        kube("kube_apiserver", dir.path(), false),
        kube("kube_apiserver_audited", dir.path(), true),
    ];
    let mut report = Report::new("audit");
    let mut figures: Vec<(f64, f64)> = Vec::new();
    runtime.block_on(async {
        for server in &servers {
            server.prepare().await;
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
