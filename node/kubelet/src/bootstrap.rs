//! TLS bootstrap and certificate rotation, as upstream's kubelet does them (its
//! certificate/bootstrap package and client-go's certificate manager), over [`crate::certificate`]:
//!
//! - [`load_client_cert`]: with `--bootstrap-kubeconfig`, when the `--kubeconfig` file is missing
//!   or its certificate has expired, the kubelet asks for a client certificate with the bootstrap
//!   credentials (a CertificateSigningRequest named after its key, so a retry asks again under the
//!   same name), waits for it to be issued, keeps it in `<cert-dir>/kubelet-client-current.pem`
//!   and writes a kubeconfig that points there.
//! - [`RotatingClient`]: a `kube::Client` whose certificate is that file's; [`rotate_client`]
//!   asks for a new one (as the node itself) at 70–90 % of the current one's lifetime and swaps
//!   it in: requests after the swap go out on new connections with the new certificate, while a
//!   request already in flight finishes on its own.
//! - [`ServingCertificate`] and [`rotate_serving`] (`serverTLSBootstrap`): the kubelet API's
//!   certificate, requested from the `kubernetes.io/kubelet-serving` signer for the node's host
//!   name and addresses, renewed the same way; until one is issued, TLS handshakes are refused
//!   (upstream's "no serving certificate available for the kubelet").

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{PostParams, WatchEvent, WatchParams};
use rustls::sign::CertifiedKey;

use crate::certificate::{self, CertificateError, FileStore, Outcome, Pair};

/// The key kept while a bootstrap request is pending, so a restarted kubelet asks with the same.
const TMP_KEY: &str = "kubelet-client.key.tmp";
/// How long a bootstrap request is waited for (upstream: an hour).
const BOOTSTRAP_WAIT: Duration = Duration::from_secs(3600);

#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("unable to load kubeconfig {path}: {reason}")]
    Kubeconfig { path: String, reason: String },
    #[error(transparent)]
    Certificate(#[from] CertificateError),
    #[error("certificate signing request {name}: {reason}")]
    Request { name: String, reason: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> BootstrapError + '_ {
    move |source| BootstrapError::Io { path: path.display().to_string(), source }
}

/// The kubeconfig at `path` as kube reads it.
pub async fn kube_config(path: &Path) -> Result<kube::Config, BootstrapError> {
    let failed = |reason: String| BootstrapError::Kubeconfig { path: path.display().to_string(), reason };
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| failed(e.to_string()))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| failed(e.to_string()))
}

/// The client pair a kubeconfig's user holds (its files or data), if it has one.
fn kubeconfig_pair(config: &kube::Config) -> Option<Pair> {
    use base64::Engine;
    use secrecy::ExposeSecret;
    let auth = &config.auth_info;
    let read = |file: Option<&String>, data: Option<&str>| -> Option<String> {
        match (file, data) {
            (_, Some(data)) => {
                let bytes = base64::engine::general_purpose::STANDARD.decode(data).ok()?;
                String::from_utf8(bytes).ok()
            }
            (Some(file), None) => std::fs::read_to_string(file).ok(),
            (None, None) => None,
        }
    };
    let certificate = read(auth.client_certificate.as_ref(), auth.client_certificate_data.as_deref())?;
    let key = read(auth.client_key.as_ref(), auth.client_key_data.as_ref().map(ExposeSecret::expose_secret))?;
    Pair::parse(&certificate, &key).ok()
}

/// upstream's LoadClientCert: see the module docs. Returns whether it bootstrapped.
pub async fn load_client_cert(
    kubeconfig: &Path,
    bootstrap_kubeconfig: &Path,
    cert_dir: &Path,
    node_name: &str,
) -> Result<bool, BootstrapError> {
    if kubeconfig.exists()
        && let Ok(config) = kube_config(kubeconfig).await
        && kubeconfig_pair(&config).is_some_and(|pair| !pair.expired(Timestamp::now()))
    {
        tracing::info!(path = %kubeconfig.display(), "kubeconfig exists and is valid, skipping bootstrap");
        return Ok(false);
    }
    tracing::info!("using the bootstrap kubeconfig to request a client certificate");
    let bootstrap = kube_config(bootstrap_kubeconfig).await?;
    let client = kube::Client::try_from(bootstrap.clone()).map_err(|e| BootstrapError::Kubeconfig {
        path: bootstrap_kubeconfig.display().to_string(),
        reason: e.to_string(),
    })?;
    let store = FileStore::client(cert_dir);
    // The current pair's key, else the key of a request left pending, else a new one.
    let tmp_key = cert_dir.join(TMP_KEY);
    let key = match store.current().ok().flatten() {
        Some(pair) => pair.key_pem,
        None => match std::fs::read_to_string(&tmp_key) {
            Ok(key) if rcgen::KeyPair::from_pem(&key).is_ok() => key,
            _ => {
                let key = certificate::new_key()?;
                std::fs::create_dir_all(cert_dir).map_err(io_error(cert_dir))?;
                write_private(&tmp_key, &key)?;
                key
            }
        },
    };
    let name = certificate::digested_name(&key, node_name, certificate::CLIENT_USAGES)?;
    let request = certificate::request_pem(&key, node_name, &[])?;
    let csr = certificate::csr_object(
        Some(&name),
        &request,
        certificate::CLIENT_SIGNER,
        certificate::CLIENT_USAGES,
    );
    let issued = request_certificate(&client, csr, BOOTSTRAP_WAIT).await?;
    store.update(&issued, &key, Timestamp::now())?;
    if let Err(error) = std::fs::remove_file(&tmp_key)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        tracing::info!(path = %tmp_key.display(), %error, "failed cleaning up the private key file");
    }
    let cluster = bootstrap_cluster(bootstrap_kubeconfig)?;
    let text = certificate::kubeconfig(
        &bootstrap.cluster_url.to_string(),
        cluster.certificate_authority.as_deref(),
        cluster.certificate_authority_data.as_deref(),
        cluster.insecure_skip_tls_verify.unwrap_or(false),
        &store.current_path(),
    );
    if let Some(dir) = kubeconfig.parent() {
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    }
    write_private(kubeconfig, &text)?;
    tracing::info!(path = %kubeconfig.display(), "wrote the kubeconfig with the issued client certificate");
    Ok(true)
}

/// The bootstrap kubeconfig's current cluster (its CA as a path or data, as written).
fn bootstrap_cluster(path: &Path) -> Result<kube::config::Cluster, BootstrapError> {
    let failed = |reason: String| BootstrapError::Kubeconfig { path: path.display().to_string(), reason };
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| failed(e.to_string()))?;
    let context = kubeconfig
        .contexts
        .iter()
        .find(|c| Some(&c.name) == kubeconfig.current_context.as_ref())
        .or(kubeconfig.contexts.first())
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone());
    let named = kubeconfig
        .clusters
        .iter()
        .find(|c| Some(&c.name) == context.as_ref())
        .or(kubeconfig.clusters.first())
        .and_then(|c| c.cluster.clone())
        .ok_or_else(|| failed("no cluster".into()))?;
    // A relative CA path is the bootstrap kubeconfig's directory's, as client-go resolves it.
    let mut cluster = named;
    if let Some(ca) = cluster.certificate_authority.as_mut()
        && !Path::new(ca).is_absolute()
        && let Some(dir) = path.parent()
    {
        *ca = dir.join(&*ca).display().to_string();
    }
    Ok(cluster)
}

fn write_private(path: &Path, text: &str) -> Result<(), BootstrapError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io_error(path))?;
    file.write_all(text.as_bytes()).map_err(io_error(path))
}

/// Creates `csr` (or, for a named one that exists, takes it when it asks for the same key: a
/// restarted kubelet's) and waits up to `wait` for its certificate (client-go's
/// RequestCertificate and WaitForCertificate).
pub async fn request_certificate(
    client: &kube::Client,
    csr: CertificateSigningRequest,
    wait: Duration,
) -> Result<String, BootstrapError> {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let shown = csr.metadata.name.clone().unwrap_or_else(|| "csr-".into());
    let failed = |name: &str, reason: String| BootstrapError::Request { name: name.to_owned(), reason };
    let created = match api.create(&PostParams::default(), &csr).await {
        Ok(created) => created,
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let existing = api.get(&shown).await.map_err(|e| failed(&shown, e.to_string()))?;
            if existing.spec.request != csr.spec.request || existing.spec.signer_name != csr.spec.signer_name
            {
                return Err(failed(&shown, "an existing request of that name asks for another key".into()));
            }
            existing
        }
        Err(error) => {
            return Err(failed(&shown, format!("cannot create certificate signing request: {error}")));
        }
    };
    let name = created.metadata.name.clone().unwrap_or_default();
    tracing::info!(csr = %name, signer = %created.spec.signer_name, "waiting for the certificate to be issued");
    let wait_for = async {
        let mut version = created.metadata.resource_version.clone().unwrap_or_default();
        let mut latest = created;
        loop {
            match certificate::outcome(&latest) {
                Outcome::Issued(pem) => return Ok(pem),
                Outcome::Denied(reason) | Outcome::Failed(reason) => return Err(failed(&name, reason)),
                Outcome::Pending => {}
            }
            let params = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(290);
            let mut events = match api.watch(&params, &version).await {
                Ok(events) => events.boxed(),
                Err(error) => {
                    tracing::info!(csr = %name, %error, "watching the certificate signing request");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    latest = api.get(&name).await.map_err(|e| failed(&name, e.to_string()))?;
                    version = latest.metadata.resource_version.clone().unwrap_or_default();
                    continue;
                }
            };
            loop {
                match events.try_next().await {
                    Ok(Some(WatchEvent::Added(csr) | WatchEvent::Modified(csr))) => {
                        version = csr.metadata.resource_version.clone().unwrap_or_default();
                        latest = csr;
                        if certificate::outcome(&latest) != Outcome::Pending {
                            break;
                        }
                    }
                    Ok(Some(WatchEvent::Deleted(_))) => {
                        return Err(failed(&name, "the certificate signing request was deleted".into()));
                    }
                    Ok(Some(WatchEvent::Bookmark(_))) => {}
                    // An expired version or an ended watch: read it again and watch from there.
                    Ok(Some(WatchEvent::Error(_)) | None) | Err(_) => {
                        latest = api.get(&name).await.map_err(|e| failed(&name, e.to_string()))?;
                        version = latest.metadata.resource_version.clone().unwrap_or_default();
                        break;
                    }
                }
            }
        }
    };
    tokio::time::timeout(wait, wait_for)
        .await
        .map_err(|_| failed(&shown, format!("timed out waiting {wait:?} for the certificate")))?
}

/// A rustls key for a pair.
fn certified_key(pair: &Pair) -> Result<Arc<CertifiedKey>, CertificateError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let invalid = |e: String| CertificateError::Invalid(e);
    let chain = CertificateDer::pem_slice_iter(pair.certificates_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("the certificates: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(pair.key_pem.as_bytes())
        .map_err(|e| invalid(format!("the key: {e}")))?;
    let signing = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| invalid(e.to_string()))?;
    Ok(Arc::new(CertifiedKey::new(chain, signing)))
}

/// A `kube::Client` over the client certificate in a `--cert-dir` store (the kubeconfig's own
/// until the store holds one): see the module docs.
#[derive(Clone)]
pub struct RotatingClient {
    kubeconfig: PathBuf,
    store: FileStore,
    current: Arc<RwLock<kube::Client>>,
}

impl std::fmt::Debug for RotatingClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RotatingClient").field("kubeconfig", &self.kubeconfig).finish_non_exhaustive()
    }
}

/// The service under a [`RotatingClient`]'s `kube::Client`: each request goes through the
/// client built from the newest certificate.
#[derive(Clone)]
struct Swapped(Arc<RwLock<kube::Client>>);

impl tower::Service<http::Request<kube::client::Body>> for Swapped {
    type Response = http::Response<kube::client::Body>;
    type Error = kube::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, kube::Error>>;

    fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), kube::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<kube::client::Body>) -> Self::Future {
        let client = self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        Box::pin(async move { client.send(request).await })
    }
}

impl RotatingClient {
    /// The client of the kubeconfig at `path` with the current pair of the store in `cert_dir`
    /// when it holds a valid one, and the handle that swaps its certificate.
    pub async fn new(path: &Path, cert_dir: &Path) -> Result<(kube::Client, RotatingClient), BootstrapError> {
        let store = FileStore::client(cert_dir);
        let config = kube_config(path).await?;
        let namespace = config.default_namespace.clone();
        let rotating = RotatingClient {
            kubeconfig: path.to_owned(),
            store,
            current: Arc::new(RwLock::new(build_client(
                path,
                Self::with_current(&FileStore::client(cert_dir), config),
            )?)),
        };
        let client = kube::Client::new(Swapped(rotating.current.clone()), namespace);
        Ok((client, rotating))
    }

    /// `config` with the store's current pair as its identity, when it has a valid one.
    fn with_current(store: &FileStore, mut config: kube::Config) -> kube::Config {
        if store.current().ok().flatten().is_some_and(|pair| !pair.expired(Timestamp::now())) {
            let path = store.current_path().display().to_string();
            let auth = &mut config.auth_info;
            (auth.client_certificate, auth.client_key) = (Some(path.clone()), Some(path));
            (auth.client_certificate_data, auth.client_key_data) = (None, None);
        }
        config
    }

    /// The pair the client uses now: the store's, else the kubeconfig's.
    async fn pair(&self) -> Option<Pair> {
        match self.store.current().ok().flatten() {
            Some(pair) => Some(pair),
            None => kubeconfig_pair(&kube_config(&self.kubeconfig).await.ok()?),
        }
    }

    /// Builds the client again with the store's current pair.
    async fn reload(&self) -> Result<(), BootstrapError> {
        let config = Self::with_current(&self.store, kube_config(&self.kubeconfig).await?);
        let fresh = build_client(&self.kubeconfig, config)?;
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = fresh;
        Ok(())
    }
}

fn build_client(path: &Path, config: kube::Config) -> Result<kube::Client, BootstrapError> {
    kube::Client::try_from(config)
        .map_err(|e| BootstrapError::Kubeconfig { path: path.display().to_string(), reason: e.to_string() })
}

/// A jitter in [0, 1) for a renewal time.
fn jitter() -> f64 {
    use std::hash::BuildHasher;
    let random = std::collections::hash_map::RandomState::new().hash_one(Timestamp::now().as_nanosecond());
    (random % 1_000_000) as f64 / 1_000_000.0
}

/// Waits until `pair` is due for renewal.
async fn until_renewal(pair: &Pair) {
    let deadline = certificate::rotation_deadline(pair.not_before, pair.not_after, jitter());
    let wait = deadline.duration_since(Timestamp::now());
    tracing::info!(expiration = %pair.not_after, rotation_deadline = %deadline, "certificate rotation scheduled");
    if let Ok(wait) = Duration::try_from(wait) {
        tokio::time::sleep(wait).await;
    }
}

/// A new pair for `node_name` from `signer`, asked for by `client` (the node itself).
async fn renew(
    client: &kube::Client,
    node_name: &str,
    hosts: &[String],
    signer: &str,
    usages: &[&str],
) -> Result<(String, String), BootstrapError> {
    let key = certificate::new_key()?;
    let request = certificate::request_pem(&key, node_name, hosts)?;
    let csr = certificate::csr_object(None, &request, signer, usages);
    let issued = request_certificate(client, csr, Duration::from_secs(15 * 60)).await?;
    Ok((issued, key))
}

/// Renews the client certificate before it expires, for ever: a new key, a request as the node
/// (`selfnodeclient`), the pair stored in `rotating`'s `--cert-dir` and swapped in. A failure is
/// retried with a back-off from 2 s to 5 min.
pub async fn rotate_client(client: kube::Client, rotating: RotatingClient, node_name: String) {
    let mut backoff = Duration::from_secs(2);
    loop {
        let Some(current) = rotating.pair().await else {
            tracing::warn!(kubeconfig = %rotating.kubeconfig.display(), "no client certificate to rotate");
            return;
        };
        until_renewal(&current).await;
        let rotated = async {
            let (issued, key) =
                renew(&client, &node_name, &[], certificate::CLIENT_SIGNER, certificate::CLIENT_USAGES)
                    .await?;
            rotating.store.update(&issued, &key, Timestamp::now())?;
            rotating.reload().await
        };
        match rotated.await {
            Ok(()) => {
                tracing::info!("rotated the client certificate");
                backoff = Duration::from_secs(2);
            }
            Err(error) => {
                tracing::warn!(%error, "failed rotating the client certificate");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(300));
            }
        }
    }
}

/// The kubelet API's certificate under `serverTLSBootstrap`: a rustls resolver of whatever was
/// issued last (nothing until the first is).
#[derive(Debug, Default)]
pub struct ServingCertificate {
    current: RwLock<Option<Arc<CertifiedKey>>>,
}

impl rustls::server::ResolvesServerCert for ServingCertificate {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let current = self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if current.is_none() {
            tracing::info!("no serving certificate available for the kubelet");
        }
        current
    }
}

impl ServingCertificate {
    fn set(&self, pair: &Pair) -> Result<(), CertificateError> {
        let key = certified_key(pair)?;
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(key);
        Ok(())
    }
}

/// Keeps `serving` holding a certificate from the kubelet-serving signer for the node's `hosts`
/// (its host name and addresses): the stored one while it is valid and names the same hosts
/// (upstream checks the addresses too), else a new request; renewed before it expires. A failure
/// is retried with a back-off from 2 s to 5 min.
pub async fn rotate_serving(
    client: kube::Client,
    serving: Arc<ServingCertificate>,
    cert_dir: PathBuf,
    node_name: String,
    hosts: Vec<String>,
) {
    let store = FileStore::serving(&cert_dir);
    let mut backoff = Duration::from_secs(2);
    let mut current = store.current().ok().flatten().filter(|pair| !pair.expired(Timestamp::now()));
    loop {
        if let Some(pair) = &current {
            if let Err(error) = serving.set(pair) {
                tracing::warn!(%error, "the stored serving certificate cannot be used");
                current = None;
                continue;
            }
            until_renewal(pair).await;
        }
        let renewed = async {
            let (issued, key) =
                renew(&client, &node_name, &hosts, certificate::SERVING_SIGNER, certificate::SERVING_USAGES)
                    .await?;
            Ok::<Pair, BootstrapError>(store.update(&issued, &key, Timestamp::now())?)
        };
        match renewed.await {
            Ok(pair) => {
                tracing::info!(expiration = %pair.not_after, "obtained a serving certificate");
                current = Some(pair);
                backoff = Duration::from_secs(2);
            }
            Err(error) => {
                tracing::warn!(%error, "failed requesting a serving certificate");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(300));
            }
        }
    }
}
