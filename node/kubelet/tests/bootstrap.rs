//! TLS bootstrap and certificate rotation against real API servers:
//!
//! - keel-apiserver (bootstrap tokens on, its own signer off): the test is the signer, issuing
//!   short certificates (20 s) as an external signer may, so that rotation comes within the test.
//!   A node joins with only a bootstrap token, its Lease is renewed with the issued certificate,
//!   the certificate is renewed before it expires, and after every connection is cut once the
//!   first certificate has expired, the Lease is still renewed: the kubelet reconnects with the
//!   new one. A second start finds the kubeconfig valid and asks for nothing. The serving
//!   certificate is refused to TLS clients until an administrator approves its request.
//! - kube-apiserver v1.34 with kube-controller-manager v1.34 approving and signing (as kubeadm
//!   sets them up): the same node joins with a bootstrap token.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use keel_kubelet::agent::{Agent, Timings};
use keel_kubelet::bootstrap::{self, RotatingClient, ServingCertificate};
use keel_kubelet::certificate::FileStore;
use keel_kubelet::machine::MachineInfo;
use keel_kubelet::runtime::Runtime;
use keel_testbed::kube_apiserver::{self, KubeApiServer, KubeApiServerOptions};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::client;

const TOKEN: &str = "abcdef.0123456789abcdef";
/// How long a state the test waits for may take (a bound on failure only).
const WAIT: Duration = Duration::from_secs(90);
/// How long the test signer's client certificates last.
const SHORT: Duration = Duration::from_secs(20);

/// The bootstrap token's Secret and kubeadm's three bindings: bootstrappers may create CSRs and
/// have node client CSRs approved; nodes have their renewals approved.
async fn bootstrap_objects(admin: &kube::Client) -> Result<()> {
    let (id, secret) = TOKEN.split_once('.').context("token")?;
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    let token: Secret = serde_json::from_value(json!({
        "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "stringData": {"token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true",
                       "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}}))?;
    secrets.create(&PostParams::default(), &token).await?;
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    for (name, role, group) in [
        (
            "kubeadm:kubelet-bootstrap",
            "system:node-bootstrapper",
            "system:bootstrappers:kubeadm:default-node-token",
        ),
        (
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            "system:bootstrappers:kubeadm:default-node-token",
        ),
        (
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "system:nodes",
        ),
    ] {
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]}))?;
        bindings.create(&PostParams::default(), &binding).await?;
    }
    // The authorizer sees the bindings through its watch: once it allows the bootstrap token's
    // CSR, the kubelet may start (a real one would be restarted until then).
    let reviews: Api<k8s_openapi::api::authorization::v1::SubjectAccessReview> = Api::all(admin.clone());
    let review: k8s_openapi::api::authorization::v1::SubjectAccessReview = serde_json::from_value(json!({
        "spec": {"user": format!("system:bootstrap:{id}"),
                 "groups": ["system:bootstrappers", "system:bootstrappers:kubeadm:default-node-token"],
                 "resourceAttributes": {"group": "certificates.k8s.io", "resource": "certificatesigningrequests",
                                        "verb": "create"}}}))?;
    for _ in 0..100 {
        let answer = reviews.create(&PostParams::default(), &review).await?;
        if answer.status.is_some_and(|s| s.allowed) {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    anyhow::bail!("the bootstrap token may not create CSRs 10 s after its bindings were made")
}

/// A kubeconfig that authenticates with the bootstrap token.
fn bootstrap_kubeconfig(url: &str, ca_file: &Path) -> String {
    json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url, "certificate-authority": ca_file}}],
        "users": [{"name": "tls-bootstrap-token-user", "user": {"token": TOKEN}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "tls-bootstrap-token-user"}}],
        "current-context": "c",
    })
    .to_string()
}

async fn wait_for<T>(what: &str, mut check: impl AsyncFnMut() -> Result<Option<T>>) -> Result<T> {
    let deadline = Instant::now() + WAIT;
    loop {
        let checked = tokio::time::timeout_at(deadline.into(), check()).await;
        if let Some(found) = checked.map_err(|_| anyhow::anyhow!("timed out checking {what}"))?? {
            return Ok(found);
        }
        ensure!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A TCP forwarder to `target` that can cut every connection it carries.
struct Cutter {
    address: SocketAddr,
    cut: tokio::sync::watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Cutter {
    async fn start(target: SocketAddr) -> Result<Cutter> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let (cut, cuts) = tokio::sync::watch::channel(0u64);
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let mut cuts = cuts.clone();
                cuts.mark_unchanged();
                tokio::spawn(async move {
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else { return };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                        _ = cuts.changed() => {}
                    }
                });
            }
        });
        Ok(Cutter { address, cut, task })
    }

    fn cut_all(&self) {
        self.cut.send_modify(|n| *n += 1);
    }
}

impl Drop for Cutter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The test's signer: issues every approved request of the kubelet signers (client ones for
/// `client_life`, serving ones for an hour), from the cluster CA, valid from a second ago.
async fn sign_approved(
    admin: kube::Client,
    ca_pem: String,
    ca_key_pem: String,
    client_life: Duration,
) -> Result<()> {
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_pem, rcgen::KeyPair::from_pem(&ca_key_pem)?)?;
    let csrs: Api<CertificateSigningRequest> = Api::all(admin);
    let watch = kube::runtime::watcher(csrs.clone(), Default::default());
    let mut events = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(watch));
    while let Some(event) = futures::StreamExt::next(&mut events).await {
        // A watch error is retried by the watcher (with its back-off); the signer goes on.
        let Ok(kube::runtime::watcher::Event::Apply(csr) | kube::runtime::watcher::Event::InitApply(csr)) =
            event
        else {
            continue;
        };
        let status = csr.status.clone().unwrap_or_default();
        let approved = status.conditions.iter().flatten().any(|c| c.type_ == "Approved");
        if !approved || status.certificate.is_some() {
            continue;
        }
        let request = String::from_utf8(csr.spec.request.0.clone())?;
        let mut params = rcgen::CertificateSigningRequestParams::from_pem(&request)?;
        let now = time::OffsetDateTime::now_utc();
        let (life, usage) = match csr.spec.signer_name.as_str() {
            "kubernetes.io/kube-apiserver-client-kubelet" => {
                (client_life, rcgen::ExtendedKeyUsagePurpose::ClientAuth)
            }
            "kubernetes.io/kubelet-serving" => {
                (Duration::from_secs(3600), rcgen::ExtendedKeyUsagePurpose::ServerAuth)
            }
            _ => continue,
        };
        params.params.not_before = now - time::Duration::seconds(1);
        params.params.not_after = now + time::Duration::try_from(life)?;
        params.params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.params.extended_key_usages = vec![usage];
        params.params.use_authority_key_identifier_extension = true;
        let issued = params.signed_by(&issuer)?.pem();
        let name = csr.metadata.name.clone().unwrap_or_default();
        let patch = json!({"status": {"certificate": base64_encode(issued.as_bytes())}});
        if let Err(error) = csrs.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            eprintln!("the test signer could not issue {name}: {error}");
        }
    }
    Ok(())
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The node's Lease renewTime, when it has one.
async fn renewed(admin: &kube::Client) -> Result<Option<k8s_openapi::jiff::Timestamp>> {
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-node-lease");
    Ok(leases.get_opt("n1").await?.and_then(|l| l.spec?.renew_time).map(|t| t.0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joins_with_a_bootstrap_token_and_rotates_its_certificates() -> Result<()> {
    crate::support::kubelet_log();
    let keel = crate::support::keel_configured(|config| {
        config.bootstrap_tokens = true;
        config.signer = None;
    })
    .await?;
    let (ca, ca_key) = (keel.pki.ca_pem.clone(), keel.pki.ca_key_pem.clone());
    let admin_cert = kube_apiserver::client_cert_signed_by(&ca, &ca_key, "admin", &["system:masters"])?;
    let admin = client(&kube_apiserver::kubeconfig_for(&keel.url, &ca, &admin_cert)).await?;
    bootstrap_objects(&admin).await?;
    let signer = tokio::spawn(sign_approved(admin.clone(), ca.clone(), ca_key.clone(), SHORT));

    // The kubelet reaches the API server through a forwarder that can cut its connections.
    let target: SocketAddr = keel.url.trim_start_matches("https://").parse()?;
    let cutter = Cutter::start(target).await?;
    let dir = tempfile::tempdir()?;
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, &ca)?;
    let bootstrap_file = dir.path().join("bootstrap-kubelet.conf");
    std::fs::write(&bootstrap_file, bootstrap_kubeconfig(&format!("https://{}", cutter.address), &ca_file))?;
    let (kubeconfig, cert_dir) = (dir.path().join("kubelet.conf"), dir.path().join("pki"));

    let joined = tokio::time::timeout(
        WAIT,
        bootstrap::load_client_cert(&kubeconfig, &bootstrap_file, &cert_dir, "n1"),
    );
    ensure!(joined.await.context("the bootstrap timed out")??, "no bootstrap");
    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let listed = csrs.list(&ListParams::default()).await?.items;
    ensure!(listed.len() == 1, "{} requests", listed.len());
    let first = &listed[0];
    ensure!(
        first.metadata.name.as_deref().is_some_and(|n| n.starts_with("node-csr-")),
        "{:?}",
        first.metadata.name
    );
    ensure!(first.spec.username.as_deref() == Some("system:bootstrap:abcdef"), "{:?}", first.spec.username);
    let reason =
        first.status.iter().flat_map(|s| s.conditions.iter().flatten()).find_map(|c| c.reason.clone());
    ensure!(reason.as_deref() == Some("AutoApproved"), "{reason:?}");
    let store = FileStore::client(&cert_dir);
    let issued = store.current()?.context("no current pair")?;

    // The kubelet as the issued certificate's user, renewing its certificate.
    let (n1, rotating) = RotatingClient::new(&kubeconfig, &cert_dir).await?;
    let rotation = tokio::spawn(bootstrap::rotate_client(n1.clone(), rotating, "n1".into()));
    let machine = MachineInfo::read(dir.path())?;
    let timings = Timings { lease_duration_seconds: 4, ..Timings::default() };
    let agent = Agent::new(
        n1.clone(),
        crate::support::n1_config(),
        machine,
        Runtime::new("unix:///nonexistent.sock"),
        timings,
    );
    let agent = tokio::spawn(agent.run());
    let nodes: Api<Node> = Api::all(admin.clone());
    wait_for("n1 registered", async || Ok(nodes.get_opt("n1").await?)).await?;
    wait_for("n1's Lease", async || renewed(&admin).await).await?;

    // Renewed before it expires, by the node itself.
    let rotated = wait_for("the client certificate renewed", async || {
        Ok(store.current()?.filter(|pair| pair.not_after > issued.not_after))
    })
    .await?;
    let renewal = csrs.list(&ListParams::default()).await?.items;
    let renewal = renewal.iter().find(|c| c.metadata.name.as_deref().is_some_and(|n| n.starts_with("csr-")));
    let renewal = renewal.context("no renewal request")?;
    ensure!(renewal.spec.username.as_deref() == Some("system:node:n1"), "{:?}", renewal.spec.username);
    ensure!(std::fs::read_link(store.current_path())?.exists(), "the current link is dangling");

    // Once the first certificate has expired, every connection is cut: the kubelet must come back
    // with the new one.
    let expired = issued.not_after.as_second() + 1;
    wait_for("the first certificate expired", async || {
        Ok((k8s_openapi::jiff::Timestamp::now().as_second() > expired).then_some(()))
    })
    .await?;
    cutter.cut_all();
    let cut_at = k8s_openapi::jiff::Timestamp::now();
    wait_for("a Lease renewal after the cut", async || {
        Ok(renewed(&admin).await?.filter(|at| *at > cut_at).map(|_| ()))
    })
    .await?;
    ensure!(!rotated.expired(k8s_openapi::jiff::Timestamp::now()), "the rotated certificate expired too");

    // A restarted kubelet finds its kubeconfig valid and asks for nothing.
    let before = csrs.list(&ListParams::default()).await?.items.len();
    ensure!(
        !bootstrap::load_client_cert(&kubeconfig, &bootstrap_file, &cert_dir, "n1").await?,
        "bootstrapped again"
    );
    ensure!(csrs.list(&ListParams::default()).await?.items.len() == before, "a request was made");

    serving_certificate(&admin, &n1, &ca, &cert_dir).await?;
    for task in [agent.abort_handle(), rotation.abort_handle(), signer.abort_handle()] {
        task.abort();
    }
    Ok(())
}

/// serverTLSBootstrap: no certificate is served until one is issued for the node's names; then a
/// client trusting the cluster CA connects to 127.0.0.1.
async fn serving_certificate(
    admin: &kube::Client,
    n1: &kube::Client,
    ca: &str,
    cert_dir: &Path,
) -> Result<()> {
    let serving = Arc::new(ServingCertificate::default());
    let hosts = vec!["n1".to_owned(), "127.0.0.1".to_owned()];
    let renewal = tokio::spawn(bootstrap::rotate_serving(
        n1.clone(),
        serving.clone(),
        cert_dir.to_owned(),
        "n1".into(),
        hosts,
    ));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(serving.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
    let accepting = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move { acceptor.accept(stream).await.map(drop) });
        }
    });
    let mut roots = rustls::RootCertStore::empty();
    use rustls::pki_types::pem::PemObject;
    for der in rustls::pki_types::CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(der?)?;
    }
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let handshake = async || {
        let stream = tokio::net::TcpStream::connect(address).await?;
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
        anyhow::Ok(connector.connect(name, stream).await?)
    };

    let csrs: Api<CertificateSigningRequest> = Api::all(admin.clone());
    let pending = wait_for("the serving request", async || {
        let all = csrs.list(&ListParams::default()).await?.items;
        Ok(all.into_iter().find(|c| c.spec.signer_name == "kubernetes.io/kubelet-serving"))
    })
    .await?;
    ensure!(handshake().await.is_err(), "a certificate was served before one was issued");
    ensure!(
        pending.spec.usages.as_deref()
            == Some(&["digital signature".to_owned(), "server auth".to_owned()][..]),
        "{:?}",
        pending.spec.usages
    );
    // An administrator approves it (nothing approves serving requests by itself).
    let name = pending.metadata.name.clone().unwrap_or_default();
    let approval = json!({"status": {"conditions": [{"type": "Approved", "status": "True",
        "reason": "KeelTest", "message": "approved by the test"}]}});
    csrs.patch_approval(&name, &PatchParams::default(), &Patch::Merge(&approval)).await?;
    let tls = wait_for("the serving certificate", async || Ok(handshake().await.ok())).await?;
    let served =
        tls.get_ref().1.peer_certificates().and_then(|c| c.first()).context("no certificate")?.clone();
    let (_, parsed) = x509_parser::parse_x509_certificate(&served)?;
    let cn = parsed.subject().iter_common_name().next().and_then(|c| c.as_str().ok()).map(str::to_owned);
    ensure!(cn.as_deref() == Some("system:node:n1"), "{cn:?}");
    ensure!(FileStore::serving(cert_dir).current()?.is_some(), "the serving pair is not stored");
    renewal.abort();
    accepting.abort();
    Ok(())
}

/// keel-kubelet's bootstrap against kube-apiserver v1.34, approved and signed by
/// kube-controller-manager v1.34's csrapproving and csrsigning controllers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_joins_kube_apiserver_with_a_bootstrap_token() -> Result<()> {
    crate::support::kubelet_log();
    let options = KubeApiServerOptions::new().arg("--enable-bootstrap-token-auth=true");
    let kube = tokio::task::spawn_blocking(move || KubeApiServer::start_with(&options)).await??;
    let admin_kubeconfig = kube.kubeconfig(&kube.client_cert("admin", &["system:masters"])?);
    let admin = client(&admin_kubeconfig).await?;
    bootstrap_objects(&admin).await?;
    let dir = tempfile::tempdir()?;
    let kcm_kubeconfig = dir.path().join("kcm.conf");
    kube.write_kubeconfig(&kcm_kubeconfig, kube.admin())?;
    let signing = [
        format!("--cluster-signing-cert-file={}", kube.pki_file("ca.crt").display()),
        format!("--cluster-signing-key-file={}", kube.pki_file("ca.key").display()),
    ];
    let _kcm = kube_apiserver::kube_controller_manager(&kcm_kubeconfig, "csrapproving,csrsigning", &signing)?;

    let bootstrap_file = dir.path().join("bootstrap-kubelet.conf");
    std::fs::write(&bootstrap_file, bootstrap_kubeconfig(&kube.url(), &kube.ca_file()))?;
    let (kubeconfig, cert_dir) = (dir.path().join("kubelet.conf"), dir.path().join("pki"));
    let joined = tokio::time::timeout(
        WAIT,
        bootstrap::load_client_cert(&kubeconfig, &bootstrap_file, &cert_dir, "n1"),
    );
    ensure!(joined.await.context("the bootstrap timed out")??, "no bootstrap");
    let n1 = kube::Client::try_from(bootstrap::kube_config(&kubeconfig).await?)?;
    let machine = MachineInfo::read(dir.path())?;
    let agent = Agent::new(
        n1,
        crate::support::n1_config(),
        machine,
        Runtime::new("unix:///nonexistent.sock"),
        Timings::default(),
    );
    let agent = tokio::spawn(agent.run());
    let nodes: Api<Node> = Api::all(admin.clone());
    wait_for("n1 registered", async || Ok(nodes.get_opt("n1").await?)).await?;
    wait_for("n1's Lease", async || renewed(&admin).await).await?;
    let csrs: Api<CertificateSigningRequest> = Api::all(admin);
    let listed = csrs.list(&ListParams::default()).await?.items;
    ensure!(
        listed.len() == 1 && listed[0].spec.username.as_deref() == Some("system:bootstrap:abcdef"),
        "{listed:?}"
    );
    agent.abort();
    Ok(())
}
