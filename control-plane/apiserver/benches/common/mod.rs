//! What the API server benches share: an HTTP/2 client over TLS as client-go talks to an API
//! server (one connection, many streams, TCP_NODELAY), the keel-apiserver binary started on its
//! embedded store, server CPU from /proc, and the pod-create load.

#![allow(dead_code, reason = "each bench uses its own subset")]

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use keel_testbed::loopback::free_port;
use keel_testbed::process::{Daemon, Readiness};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};

pub type Sender = SendRequest<Full<Bytes>>;

/// TLS trusting `ca`, presenting the client certificate `cert`/`key` if given, speaking h2.
pub fn client_tls(ca: &[u8], client: Option<(&[u8], &[u8])>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca).expect("ca")).expect("root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("tls versions")
        .with_root_certificates(roots);
    let mut tls = match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert).expect("cert")],
                PrivateKeyDer::from_pem_slice(key).expect("key"),
            )
            .expect("client auth"),
        None => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = vec![b"h2".to_vec()];
    Arc::new(tls)
}

/// One API server as one client reaches it, and the processes whose CPU it costs.
#[derive(Clone)]
pub struct Endpoint {
    pub address: SocketAddr,
    pub tls: Arc<rustls::ClientConfig>,
    /// `Authorization: Bearer` on every request (a client without a certificate).
    pub bearer: Option<String>,
    /// The server's process and its store's (the etcd member).
    pub pids: Vec<u32>,
}

impl Endpoint {
    /// The same server reached as the user of a bearer token, without a client certificate.
    pub fn as_token_user(&self, ca: &[u8], token: &str) -> Endpoint {
        Endpoint { tls: client_tls(ca, None), bearer: Some(token.to_owned()), ..self.clone() }
    }

    pub async fn connect(&self) -> Sender {
        let tcp = tokio::net::TcpStream::connect(self.address).await.expect("connect");
        // As client-go has it (Go's net package sets TCP_NODELAY): with Nagle on, a request written
        // in pieces waits for the server's delayed ACK, 40 ms, and that is what p99 would measure.
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

    /// CPU time of its processes so far.
    pub fn cpu(&self) -> Duration {
        self.pids.iter().map(|pid| keel_testbed::bench::process_usage(*pid).0).sum()
    }

    /// A JSON request to `path` on this server.
    pub fn request(&self, method: &str, path: &str, body: Vec<u8>) -> hyper::Request<Full<Bytes>> {
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(format!("https://127.0.0.1{path}"))
            .header("content-type", "application/json");
        if let Some(token) = &self.bearer {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        request.body(Full::new(Bytes::from(body))).expect("request")
    }

    /// Sends one request and reads the whole answer: status and body.
    pub async fn send(&self, sender: &mut Sender, method: &str, path: &str, body: Vec<u8>) -> (u16, Bytes) {
        sender.ready().await.expect("ready");
        let response = sender.send_request(self.request(method, path, body)).await.expect("response");
        let status = response.status().as_u16();
        (status, response.into_body().collect().await.expect("body").to_bytes())
    }

    /// Waits until `GET /readyz` answers 200 (keel binds its port before it has read its store,
    /// kube-apiserver before its post-start hooks are done).
    pub async fn ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut sender = self.connect().await;
            let (status, _) = self.send(&mut sender, "GET", "/readyz", Vec::new()).await;
            if status == 200 {
                return;
            }
            assert!(Instant::now() < deadline, "not ready after 60 s: {status}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The `default` ServiceAccount (kube-apiserver's ServiceAccount admission plugin refuses pods
    /// without it, and no controller makes it here).
    pub async fn prepare(&self) {
        let mut sender = self.connect().await;
        let body = br#"{"metadata":{"name":"default"}}"#.to_vec();
        let (status, _) =
            self.send(&mut sender, "POST", "/api/v1/namespaces/default/serviceaccounts", body).await;
        assert!([201, 409].contains(&status), "serviceaccount: {status}");
    }

    /// `count` pod creates in `default` from 64 streams over 8 connections (the load generator
    /// shares the cores): each create's latency, the wall time and the server CPU.
    pub async fn creates(
        &self,
        prefix: &str,
        count: usize,
    ) -> (keel_testbed::bench::Samples, Duration, Duration) {
        let mut senders = Vec::new();
        for _ in 0..8 {
            senders.push(self.connect().await);
        }
        let cpu = self.cpu();
        let started = Instant::now();
        let mut tasks = Vec::new();
        for stream in 0..64 {
            let mut sender = senders[stream % 8].clone();
            let (endpoint, prefix) = (self.clone(), prefix.to_owned());
            tasks.push(tokio::spawn(async move {
                let mut samples = keel_testbed::bench::Samples::default();
                for i in (stream..count).step_by(64) {
                    let start = Instant::now();
                    let (status, body) = endpoint
                        .send(
                            &mut sender,
                            "POST",
                            "/api/v1/namespaces/default/pods",
                            pod(&format!("{prefix}-{i}")),
                        )
                        .await;
                    assert_eq!(status, 201, "create: {}", String::from_utf8_lossy(&body));
                    samples.push(start.elapsed());
                }
                samples
            }));
        }
        let mut samples = keel_testbed::bench::Samples::default();
        for task in tasks {
            samples.extend(&task.await.expect("writer"));
        }
        (samples, started.elapsed(), self.cpu() - cpu)
    }
}

/// The pod every create bench writes.
pub fn pod(name: &str) -> Vec<u8> {
    format!(r#"{{"metadata":{{"name":"{name}","labels":{{"app":"bench"}}}},"spec":{{"containers":[{{"name":"c","image":"busybox:1.36"}}]}}}}"#)
        .into_bytes()
}

/// The keel-apiserver binary on its embedded store in `data` with `args`, and its admin (from
/// the PKI it makes on first start); ready once its admin kubeconfig is written and `/readyz`
/// answers.
pub async fn keel(name: &str, data: &Path, args: &[String]) -> (Daemon, Endpoint) {
    let port = free_port().expect("port");
    let mut command = Command::new(env!("CARGO_BIN_EXE_keel-apiserver"));
    command.arg("--data-dir").arg(data).args([
        "--bind-address",
        "127.0.0.1",
        "--secure-port",
        &port.to_string(),
    ]);
    command.args(args);
    let mut probe = Command::new("test");
    probe.arg("-s").arg(data.join("admin.kubeconfig"));
    let daemon =
        Daemon::start(name, command, Readiness::Command(probe), Duration::from_secs(60)).expect("start");
    let read = |file: &str| std::fs::read(data.join("pki").join(file)).expect("pki file");
    let endpoint = Endpoint {
        address: SocketAddr::from(([127, 0, 0, 1], port)),
        tls: client_tls(&read("ca.crt"), Some((&read("admin.crt"), &read("admin.key")))),
        bearer: None,
        pids: vec![daemon.pid()],
    };
    endpoint.ready().await;
    (daemon, endpoint)
}

/// A kube-apiserver fixture's admin.
pub fn kube_admin(server: &keel_testbed::kube_apiserver::KubeApiServer) -> Endpoint {
    let admin = server.admin();
    Endpoint {
        address: server.address(),
        tls: client_tls(
            server.ca_pem().as_bytes(),
            Some((admin.cert_pem.as_bytes(), admin.key_pem.as_bytes())),
        ),
        bearer: None,
        pids: vec![server.daemon().pid(), server.etcd().pid(0).expect("etcd pid")],
    }
}

/// The median of `values`.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
