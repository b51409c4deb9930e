//! What the kubelet's tests share: keel-apiserver in process, clients from kubeconfigs.

use std::sync::Arc;

use anyhow::Result;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// keel-apiserver in process on its embedded store, as the apiserver's own tests start it.
pub struct Keel {
    pub url: String,
    pub pki: keel_apiserver::pki::Pki,
    _dir: tempfile::TempDir,
    serving: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Drop for Keel {
    fn drop(&mut self) {
        self.serving.abort();
    }
}

/// The kubelet's own log (info and up) on standard error, shown with a failing test's output.
pub fn kubelet_log() {
    // RUST_LOG (keel_kubelet=debug, say) to investigate; the kubelet's info lines otherwise.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("keel_kubelet=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .try_init();
}

pub async fn keel() -> Result<Keel> {
    keel_with(keel_apiserver::kubelet_client::KubeletClientConfig::default()).await
}

/// keel-apiserver reaching kubelets as `kubelet` says.
pub async fn keel_with(kubelet: keel_apiserver::kubelet_client::KubeletClientConfig) -> Result<Keel> {
    keel_configured(|config| config.kubelet = kubelet).await
}

/// keel-apiserver with its configuration changed by `configure`.
pub async fn keel_configured(configure: impl FnOnce(&mut keel_apiserver::Config)) -> Result<Keel> {
    let dir = tempfile::tempdir()?;
    let options = keel_store::embedded::Options::new(dir.path().join("data"));
    let store: Arc<dyn keel_store::Store> = Arc::new(keel_store::embedded::EmbeddedStore::open(options)?);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let pki = keel_apiserver::pki::ensure(&dir.path().join("pki"), &[])?;
    let tls = keel_apiserver::auth::server_config(&pki)?;
    let mut config = keel_apiserver::Config::new(address);
    configure(&mut config);
    let server = keel_apiserver::ApiServer::new(store, config).await?;
    let serving = tokio::spawn(server.serve(listener, tls));
    Ok(Keel { url: format!("https://{address}"), pki, _dir: dir, serving })
}

pub async fn client(kubeconfig: &str) -> Result<kube::Client> {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::from_yaml(kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

/// The Node config of `n1` at 127.0.0.1 with upstream's defaults.
pub fn n1_config() -> keel_kubelet::node::NodeConfig {
    keel_kubelet::node::NodeConfig {
        node_name: "n1".into(),
        hostname: "n1".into(),
        node_ip: Some(std::net::IpAddr::from([127, 0, 0, 1])),
        labels: Default::default(),
        taints: vec![],
        max_pods: 110,
        reservations: keel_kubelet::node_status::Reservations::defaults(),
        port: 10250,
        max_images: 50,
        provider_id: String::new(),
    }
}
