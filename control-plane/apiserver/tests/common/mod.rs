//! A server on a loopback port for tests, and a plain HTTPS client that sends exactly what a test
//! says (kubectl would normalise bodies and headers).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context, Result};
use keel_apiserver::ApiServer;
use keel_apiserver::pki::Pki;
use keel_store::Store;
use keel_store::embedded::{EmbeddedStore, Options};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};

/// keel-apiserver on the embedded store in a temp dir.
pub struct Server {
    pub address: SocketAddr,
    pub pki: Pki,
    pub dir: tempfile::TempDir,
    _serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// A dropped server stops (dropping a JoinHandle alone would leave the task serving).
impl Drop for Server {
    fn drop(&mut self) {
        self._serving.abort();
    }
}

impl Server {
    pub async fn start() -> Result<Server> {
        let dir = tempfile::tempdir()?;
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(Options::new(dir.path().join("data")))?);
        Server::start_on(store, dir).await
    }

    pub async fn start_on(store: Arc<dyn Store>, dir: tempfile::TempDir) -> Result<Server> {
        Server::start_with(store, dir, |_| {}).await
    }

    /// On `store`, with the configuration changed by `configure`.
    pub async fn start_with(
        store: Arc<dyn Store>,
        dir: tempfile::TempDir,
        configure: impl FnOnce(&mut keel_apiserver::Config),
    ) -> Result<Server> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let pki = keel_apiserver::pki::ensure(&dir.path().join("pki"), &[])?;
        let tls = keel_apiserver::auth::server_config(&pki)?;
        let mut config = keel_apiserver::Config::new(address);
        configure(&mut config);
        let server = ApiServer::new(store, config).await?;
        let serving = tokio::spawn(server.serve(listener, tls));
        Ok(Server { address, pki, dir, _serving: serving })
    }

    /// One request as the admin; returns status, the response's header lines and body.
    pub async fn request_with_headers(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(u16, String, String)> {
        let (address, pki_ca, cert, key) = (
            self.address,
            self.pki.ca_pem.clone(),
            self.pki.admin_cert_pem.clone(),
            self.pki.admin_key_pem.clone(),
        );
        let (method, path, body) = (method.to_owned(), path.to_owned(), body.to_vec());
        let headers: Vec<(String, String)> =
            headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        tokio::task::spawn_blocking(move || {
            raw_request(address, &pki_ca, Some((&cert, &key)), &method, &path, &headers, &body)
        })
        .await?
    }

    /// One request as the admin; returns status, content type and body.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<(u16, String, String)> {
        let (status, head, body) = self.request_with_headers(method, path, headers, body).await?;
        let content_type = head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type: ").map(str::to_owned))
            .unwrap_or_default();
        Ok((status, content_type, body))
    }
}

/// A TLS connection to `address` trusting `ca`, with a client certificate and key (PEM) or none.
pub fn tls_stream(
    address: SocketAddr,
    ca: &str,
    client: Option<(&str, &str)>,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, std::net::TcpStream>> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.as_bytes())?)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => builder.with_client_auth_cert(
            vec![CertificateDer::from_pem_slice(cert.as_bytes())?],
            PrivateKeyDer::from_pem_slice(key.as_bytes())?,
        )?,
        None => builder.with_no_client_auth(),
    };
    let connection =
        rustls::ClientConnection::new(Arc::new(config), ServerName::try_from("127.0.0.1")?.to_owned())?;
    Ok(rustls::StreamOwned::new(connection, std::net::TcpStream::connect(address)?))
}

/// One HTTP/1.1 request over TLS trusting `ca`, with a client certificate and key (PEM) or none;
/// returns status, the response's header lines and body.
pub fn raw_request(
    address: SocketAddr,
    ca: &str,
    client: Option<(&str, &str)>,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<(u16, String, String)> {
    let mut tls = tls_stream(address, ca, client)?;
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    tls.write_all(request.as_bytes())?;
    tls.write_all(body)?;
    let mut response = Vec::new();
    match tls.read_to_end(&mut response) {
        Ok(_) => {}
        // The server may close without close_notify once the response is sent.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
        Err(e) => return Err(e.into()),
    }
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").context("no header end")?;
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).context("no status")?;
    Ok((status, head.to_owned(), body.to_owned()))
}

/// Runs `kubectl` against `kubeconfig`; returns (success, stdout, stderr).
pub async fn kubectl_run(
    kubectl: &keel_testbed::kubectl::Kubectl,
    kubeconfig: &std::path::Path,
    args: &[&str],
) -> Result<(bool, String, String)> {
    let mut command = tokio::process::Command::from(kubectl.command());
    command.arg("--kubeconfig").arg(kubeconfig).args(args);
    let output =
        command.output().await.with_context(|| format!("running kubectl 1.{} {args:?}", kubectl.minor))?;
    Ok((
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

/// Runs `kubectl`; its stdout, or an error with its stderr when it fails.
pub async fn kubectl_ok(
    kubectl: &keel_testbed::kubectl::Kubectl,
    kubeconfig: &std::path::Path,
    args: &[&str],
) -> Result<String> {
    let (success, out, err) = kubectl_run(kubectl, kubeconfig, args).await?;
    anyhow::ensure!(success, "kubectl 1.{} {args:?} failed: {err}", kubectl.minor);
    Ok(out)
}

/// kubectl 1.33 as the admin of a [`Server`] (its kubeconfig written beside the server's data), with
/// the JSON and file helpers the resource tests share.
pub struct Admin {
    pub kubectl: keel_testbed::kubectl::Kubectl,
    pub kubeconfig: std::path::PathBuf,
    dir: std::path::PathBuf,
}

impl Admin {
    pub fn of(server: &Server) -> Result<Admin> {
        let kubeconfig = server.dir.path().join("admin.kubeconfig");
        std::fs::write(&kubeconfig, server.pki.admin_kubeconfig(&format!("https://{}", server.address)))?;
        let kubectl = keel_testbed::kubectl::minor(33)?;
        Ok(Admin { kubectl, kubeconfig, dir: server.dir.path().to_owned() })
    }

    /// kubectl that must succeed; its stdout.
    pub async fn ok(&self, args: &[&str]) -> Result<String> {
        kubectl_ok(&self.kubectl, &self.kubeconfig, args).await
    }

    /// kubectl that must fail; its stderr.
    pub async fn refused(&self, args: &[&str]) -> Result<String> {
        let (success, out, err) = kubectl_run(&self.kubectl, &self.kubeconfig, args).await?;
        anyhow::ensure!(!success, "kubectl {args:?} succeeded: {out}");
        Ok(err)
    }

    /// kubectl with `-o json`, parsed.
    pub async fn json(&self, args: &[&str]) -> Result<serde_json::Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        Ok(serde_json::from_str(&self.ok(&all).await?)?)
    }

    /// `kubectl create -f` of `object`, written to a file first.
    pub async fn create(&self, object: &serde_json::Value) -> Result<serde_json::Value> {
        let file = self.file(object)?;
        self.json(&["create", "-f", file.to_str().context("path")?]).await
    }

    /// `object` written to a file of its kind and name; its path.
    pub fn file(&self, object: &serde_json::Value) -> Result<std::path::PathBuf> {
        let name = object.pointer("/metadata/name").and_then(serde_json::Value::as_str).unwrap_or("object");
        let path = self.dir.join(format!("{}-{name}.json", object["kind"].as_str().unwrap_or("x")));
        std::fs::write(&path, object.to_string())?;
        Ok(path)
    }
}

impl Server {
    /// A JSON request as the admin (a PATCH is a merge patch): status and parsed body.
    pub async fn json_request(
        &self,
        method: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> Result<(u16, serde_json::Value)> {
        let content_type =
            if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
        let headers = [("Content-Type", content_type), ("Accept", "application/json")];
        let bytes = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
        let (status, _, answer) = self.request(method, path, &headers, &bytes).await?;
        Ok((status, serde_json::from_str(&answer).with_context(|| format!("{status} {answer}"))?))
    }
}

/// A Status's `details.causes` as `field: message` lines.
pub fn causes(status: &serde_json::Value) -> Vec<String> {
    status["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{}: {}",
                c["field"].as_str().unwrap_or_default(),
                c["message"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

/// The error a binary exits with for `flags`: keel's `Error: ...` line, kube-apiserver's
/// `"command failed" err="..."` unquoted.
pub fn start_error(mut command: std::process::Command) -> Result<String> {
    let output = command.output()?;
    anyhow::ensure!(!output.status.success(), "{command:?} started");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if let Some(line) = stderr.lines().find_map(|l| l.strip_prefix("Error: ")) {
        return Ok(line.to_owned());
    }
    let Some(quoted) = stderr.lines().find_map(|l| l.split_once("\"command failed\" err=\"").map(|(_, q)| q))
    else {
        anyhow::bail!("no error in {stderr}");
    };
    let mut out = String::new();
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            '"' => break,
            c => out.push(c),
        }
    }
    Ok(out)
}

/// kube-apiserver with `args` and just enough else to get past flag checking (no etcd to reach),
/// for tests of what it refuses at start; `timeout` ends it should it start after all.
pub fn kube_apiserver_refusing(dir: &std::path::Path, args: &[String]) -> Result<std::process::Command> {
    let kube = keel_testbed::peers::path("kube-apiserver")?;
    let (sa, sa_key) = (dir.join("refusing-sa.pub"), dir.join("refusing-sa.key"));
    if !sa.exists() {
        let pki = keel_testbed::kube_apiserver::TestPki::new()?;
        std::fs::write(&sa, &pki.service_account_public_pem)?;
        std::fs::write(&sa_key, &pki.service_account_key_pem)?;
    }
    let mut command = std::process::Command::new("timeout");
    command
        .arg("60")
        .arg(&kube)
        .args(args)
        .args(["--etcd-servers=http://127.0.0.1:1", "--service-account-issuer=https://x"])
        .arg(format!("--secure-port={}", keel_testbed::loopback::free_port()?))
        .arg(format!("--service-account-key-file={}", sa.display()))
        .arg(format!("--service-account-signing-key-file={}", sa_key.display()))
        .arg(format!("--cert-dir={}", dir.join("refusing-certs").display()));
    Ok(command)
}

/// The keel-apiserver binary of this build, running.
pub struct KeelBinary {
    pub daemon: keel_testbed::process::Daemon,
    /// `127.0.0.1:PORT`.
    pub address: SocketAddr,
    /// The admin kubeconfig it wrote (`DATA/admin.kubeconfig`).
    pub kubeconfig: std::path::PathBuf,
}

/// keel-apiserver on `data` (the embedded store unless `args` name etcd) on a free loopback port
/// with `args`; started once its admin kubeconfig is written and `GET /readyz` answers 200 (it
/// binds its port before it has read its store).
pub fn keel_binary(data: &std::path::Path, args: &[String]) -> Result<KeelBinary> {
    let port = keel_testbed::loopback::free_port()?;
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_keel-apiserver"));
    command.arg("--data-dir").arg(data).args([
        "--bind-address",
        "127.0.0.1",
        "--secure-port",
        &port.to_string(),
    ]);
    command.args(args);
    let kubeconfig = data.join("admin.kubeconfig");
    let mut probe = std::process::Command::new("test");
    probe.arg("-s").arg(&kubeconfig);
    let ready = keel_testbed::process::Readiness::Command(probe);
    let daemon = keel_testbed::process::Daemon::start(
        "keel-apiserver",
        command,
        ready,
        std::time::Duration::from_secs(60),
    )?;
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let pki = |name: &str| data.join("pki").join(name);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let output = std::process::Command::new("curl")
            .args(["--silent", "--max-time", "2", "--output", "/dev/null", "--write-out", "%{http_code}"])
            .arg("--cacert")
            .arg(pki("ca.crt"))
            .arg("--cert")
            .arg(pki("admin.crt"))
            .arg("--key")
            .arg(pki("admin.key"))
            .arg(format!("https://{address}/readyz"))
            .output()
            .context("running curl")?;
        if output.stdout == b"200" {
            return Ok(KeelBinary { daemon, address, kubeconfig });
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline && daemon.is_running(),
            "keel-apiserver not ready after 60 s:\n{}",
            daemon.log_tail(50)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
