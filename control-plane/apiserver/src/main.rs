//! keel-apiserver: the Kubernetes API server on the embedded store (in `--data-dir`) or on etcd
//! (`--etcd-servers`). Flags keep kube-apiserver's names where the meaning is the same.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Parser;
use keel_apiserver::ApiServer;
use keel_apiserver::auth::{self, Tokens};
use keel_store::Store;
use keel_store::embedded::{EmbeddedStore, Options};
use keel_store::etcd::{EtcdOptions, EtcdStore, EtcdTls};

#[derive(Debug, Parser)]
#[command(name = "keel-apiserver", about = "Keel's Kubernetes API server")]
struct Flags {
    /// Where the embedded store, the certificates and admin.kubeconfig live.
    #[arg(long)]
    data_dir: PathBuf,
    /// etcd client URLs, comma-separated; without them the embedded store in --data-dir is used.
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// Prefix of every key in etcd (keys themselves start with /registry, as kube-apiserver's).
    #[arg(long, default_value = "")]
    etcd_prefix: String,
    #[arg(long)]
    etcd_cafile: Option<PathBuf>,
    #[arg(long)]
    etcd_certfile: Option<PathBuf>,
    #[arg(long)]
    etcd_keyfile: Option<PathBuf>,
    /// The HTTPS port.
    #[arg(long, default_value_t = 6443)]
    secure_port: u16,
    /// The address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    bind_address: IpAddr,
    /// The address clients are told to use (and the serving certificate names); the bind address
    /// when it is not 0.0.0.0, else 127.0.0.1.
    #[arg(long)]
    advertise_address: Option<IpAddr>,
    /// Static bearer tokens: `token,user,uid,"group1,group2"` per line.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// Requests without credentials are system:anonymous (group system:unauthenticated), authorized
    /// like any user; `false` refuses them (401).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    anonymous_auth: bool,
    /// The authorizers, in order (Node, RBAC, AlwaysAllow, AlwaysDeny); system:masters is always
    /// allowed.
    #[arg(long, default_value = "Node,RBAC")]
    authorization_mode: String,
    /// Where Services' ClusterIPs come from (IPv4, /12 to /28); its first address is the
    /// `kubernetes` Service's.
    #[arg(long, default_value = "10.0.0.0/24")]
    service_cluster_ip_range: String,
    /// Where NodePorts come from.
    #[arg(long, default_value = "30000-32767")]
    service_node_port_range: String,
    /// Reads served at once (watches not counted); beyond it 429. 0: no limit.
    #[arg(long, default_value_t = 400)]
    max_requests_inflight: usize,
    /// Writes served at once; beyond it 429. 0: no limit.
    #[arg(long, default_value_t = 200)]
    max_mutating_requests_inflight: usize,
    /// How long a request (not a watch) may take before it is answered 504, e.g. `60s`, `1m`.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    request_timeout: std::time::Duration,
    /// The private key (PEM: PKCS#8, SEC1 EC or PKCS#1 RSA) that signs service account tokens;
    /// without it, DATA_DIR/pki/sa.key (made on first start and kept).
    #[arg(long)]
    service_account_signing_key_file: Option<PathBuf>,
    /// Keys (public keys, certificates or private keys, PEM) that verify service account tokens;
    /// repeatable. Default: the signing key.
    #[arg(long)]
    service_account_key_file: Vec<PathBuf>,
    /// The issuer of service account tokens (`iss`); repeatable: the first issues, all are accepted.
    #[arg(long, default_values_t = [keel_apiserver::tokens::service_account::DEFAULT_ISSUER.to_owned()])]
    service_account_issuer: Vec<String>,
    /// The audiences a token must name one of to authenticate requests; default: the issuers.
    #[arg(long, value_delimiter = ',')]
    api_audiences: Vec<String>,
    /// The longest a TokenRequest's token lives (`1h`, `24h`); longer requests are shortened. Default: no limit.
    #[arg(long, value_parser = parse_duration)]
    service_account_max_token_expiration: Option<std::time::Duration>,
    /// Issue pod-bound tokens asked for 3607 s for a year, warning after the time asked for, as
    /// upstream does for the projected-token transition.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    service_account_extend_token_expiration: bool,
    /// The jwks_uri of /.well-known/openid-configuration; default https://<advertise address>/openid/v1/jwks.
    #[arg(long)]
    service_account_jwks_uri: Option<String>,
    /// Bootstrap tokens (`<id>.<secret>` against kube-system/bootstrap-token-<id> Secrets) authenticate.
    /// On by default in Keel (kube-apiserver's default is off; kubeadm turns it on, and Keel's
    /// single binary is set up as kubeadm sets up a control plane).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    enable_bootstrap_token_auth: bool,
    /// The longest certificate the built-in CSR signers issue (kube-controller-manager's flag; its
    /// signers run in keel-apiserver until keel-controller-manager does).
    #[arg(long, default_value = "8760h", value_parser = parse_duration)]
    cluster_signing_duration: std::time::Duration,
    /// The CA certificate (PEM) the built-in signers sign with; default: the cluster CA in DATA_DIR/pki.
    #[arg(long, requires = "cluster_signing_key_file")]
    cluster_signing_cert_file: Option<PathBuf>,
    /// The key of `--cluster-signing-cert-file`.
    #[arg(long, requires = "cluster_signing_cert_file")]
    cluster_signing_key_file: Option<PathBuf>,
    /// How resources are encrypted in the store (apiserver.config.k8s.io/v1 EncryptionConfiguration:
    /// aesgcm, aescbc, secretbox and identity providers); without it everything is stored as it is.
    #[arg(long)]
    encryption_provider_config: Option<PathBuf>,
    /// The client certificate presented to kubelets (pods/log).
    #[arg(long, requires = "kubelet_client_key")]
    kubelet_client_certificate: Option<PathBuf>,
    /// The key of `--kubelet-client-certificate`.
    #[arg(long, requires = "kubelet_client_certificate")]
    kubelet_client_key: Option<PathBuf>,
    /// The CA kubelets' serving certificates are verified against; without it they are not.
    #[arg(long)]
    kubelet_certificate_authority: Option<PathBuf>,
    /// The node address types tried, in order, to reach a kubelet.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "Hostname,InternalDNS,InternalIP,ExternalDNS,ExternalIP"
    )]
    kubelet_preferred_address_types: Vec<String>,
    /// The audit policy (audit.k8s.io/v1 Policy, YAML or JSON); without it nothing is audited.
    #[arg(long)]
    audit_policy_file: Option<PathBuf>,
    /// Where audit events are written, one per line; `-` is standard output. Without it there is no
    /// audit log.
    #[arg(long)]
    audit_log_path: Option<String>,
    /// `json` (audit.k8s.io/v1 Events) or `legacy` (one line of text each).
    #[arg(long, default_value = "json")]
    audit_log_format: String,
    /// The API group and version events are written in (only audit.k8s.io/v1).
    #[arg(long, default_value = "audit.k8s.io/v1")]
    audit_log_version: String,
    /// `blocking` (no event dropped: a request waits when the writer is a whole buffer behind),
    /// `blocking-strict` (also refuse a request whose first event cannot be queued) or `batch`
    /// (drop events when the buffer is full).
    #[arg(long, default_value = "blocking")]
    audit_log_mode: String,
    /// Events queued for the writer at most.
    #[arg(long, default_value_t = 10_000, allow_negative_numbers = true)]
    audit_log_batch_buffer_size: i64,
    /// Megabytes the log grows to before it is rotated (0: 100).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    audit_log_maxsize: i64,
    /// Rotated logs kept (0: all).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    audit_log_maxbackup: i64,
    /// Days a rotated log is kept (0: no limit).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    audit_log_maxage: i64,
    /// Gzip rotated logs.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    audit_log_compress: bool,
}

/// The audit flags checked, the policy read and the log opened, as kube-apiserver's audit
/// options do; `None` when there is no policy or no log (nothing is audited then).
fn audit(flags: &Flags) -> Result<Option<keel_apiserver::audit::Audit>> {
    use keel_apiserver::audit::log::{Destination, Format, LogBackend, LogOptions, Mode};
    use keel_apiserver::audit::rotate::Rotation;
    let path = flags.audit_log_path.as_deref().filter(|p| !p.is_empty());
    let mut format = Format::Json;
    let mut mode = Mode::Blocking;
    if path.is_some() {
        let mut errors = Vec::new();
        match Mode::parse(&flags.audit_log_mode) {
            Ok(parsed) => mode = parsed,
            Err(error) => errors.push(error),
        }
        if mode == Mode::Batch && flags.audit_log_batch_buffer_size <= 0 {
            errors.push(format!(
                "invalid audit batch log buffer size {}, must be a positive number",
                flags.audit_log_batch_buffer_size
            ));
        }
        if flags.audit_log_version != "audit.k8s.io/v1" {
            errors.push("invalid group version, allowed versions are \"[audit.k8s.io/v1]\"".to_owned());
        }
        match Format::parse(&flags.audit_log_format) {
            Ok(parsed) => format = parsed,
            Err(error) => errors.push(error),
        }
        for (flag, value) in [
            ("--audit-log-maxage", flags.audit_log_maxage),
            ("--audit-log-maxbackup", flags.audit_log_maxbackup),
            ("--audit-log-maxsize", flags.audit_log_maxsize),
        ] {
            if value < 0 {
                errors.push(format!("{flag} {value} can't be a negative number"));
            }
        }
        match errors.as_slice() {
            [] => {}
            [one] => anyhow::bail!("{one}"),
            many => anyhow::bail!("[{}]", many.join(", ")),
        }
    }
    let policy = match &flags.audit_policy_file {
        Some(file) => {
            let loaded = keel_apiserver::audit::Policy::load(file)
                .map_err(|e| anyhow::anyhow!("loading audit policy file: {e}"))?;
            if let Some(warning) = loaded.warning {
                eprintln!(
                    "warning: Audit policy contains errors, falling back to lenient decoding: {warning}"
                );
            }
            Some(loaded.policy)
        }
        None => None,
    };
    let (Some(policy), Some(path)) = (policy, path) else { return Ok(None) };
    let destination = if path == "-" { Destination::Stdout } else { Destination::File(PathBuf::from(path)) };
    let mut options = LogOptions::new(destination);
    options.format = format;
    options.mode = mode;
    options.buffer_size = usize::try_from(flags.audit_log_batch_buffer_size).unwrap_or(1).max(1);
    options.rotation = Rotation {
        max_size_mb: flags.audit_log_maxsize.unsigned_abs(),
        max_backups: usize::try_from(flags.audit_log_maxbackup).unwrap_or(0),
        max_age_days: flags.audit_log_maxage.unsigned_abs(),
        compress: flags.audit_log_compress,
    };
    let backend = LogBackend::start(options).with_context(|| format!("ensureLogFile: {path}"))?;
    Ok(Some(keel_apiserver::audit::Audit::new(policy, backend)))
}

/// The service account flags read, keys loaded (made in `pki_dir` when no signing key is given).
fn service_accounts(
    flags: &Flags,
    pki_dir: &std::path::Path,
) -> Result<keel_apiserver::tokens::ServiceAccountConfig> {
    use keel_apiserver::tokens::keys;
    let signing_key = match &flags.service_account_signing_key_file {
        Some(path) => keys::SigningKey::from_file(path)?,
        None => keys::ensure(pki_dir)?,
    };
    let mut verification_keys = Vec::new();
    for path in &flags.service_account_key_file {
        verification_keys.extend(keys::public_keys_from_file(path)?);
    }
    let mut seen = std::collections::HashSet::new();
    for issuer in &flags.service_account_issuer {
        anyhow::ensure!(!issuer.is_empty(), "service-account-issuer should not be an empty string");
        anyhow::ensure!(seen.insert(issuer), "service-account-issuer {issuer:?} is already specified");
    }
    if let Some(uri) = &flags.service_account_jwks_uri {
        anyhow::ensure!(
            uri.starts_with("https://"),
            "service-account-jwks-uri requires https scheme, parsed as: {uri}"
        );
    }
    let max_expiration_seconds = flags.service_account_max_token_expiration.map_or(0, |d| d.as_secs() as i64);
    if max_expiration_seconds > 0 {
        anyhow::ensure!(
            (3600..=1 << 32).contains(&max_expiration_seconds),
            "the service-account-max-token-expiration must be between 1 hour and 2^32 seconds"
        );
    }
    Ok(keel_apiserver::tokens::ServiceAccountConfig {
        issuers: flags.service_account_issuer.clone(),
        api_audiences: flags.api_audiences.clone(),
        signing_key: Some(std::sync::Arc::new(signing_key)),
        verification_keys,
        max_expiration_seconds,
        extend_expiration: flags.service_account_extend_token_expiration,
        jwks_uri: flags.service_account_jwks_uri.clone(),
    })
}

async fn open_store(flags: &Flags) -> Result<Arc<dyn Store>> {
    if flags.etcd_servers.is_empty() {
        let store = EmbeddedStore::open(Options::new(flags.data_dir.join("store")))?;
        return Ok(Arc::new(store));
    }
    let mut options = EtcdOptions::new(flags.etcd_servers.clone()).prefix(flags.etcd_prefix.clone());
    if let Some(ca_cert) = &flags.etcd_cafile {
        let client_cert_and_key = match (&flags.etcd_certfile, &flags.etcd_keyfile) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            _ => anyhow::bail!("--etcd-certfile and --etcd-keyfile go together"),
        };
        options = options.tls(EtcdTls { ca_cert: ca_cert.clone(), client_cert_and_key, domain: None });
    }
    Ok(Arc::new(EtcdStore::connect(options).await?))
}

/// mimalloc rather than glibc's malloc: a create allocates and frees many small values (JSON
/// maps, strings) across worker threads, where glibc's arenas spent a quarter of the server's CPU
/// (perf of `cargo xtask bench apiserver`). See docs/benchmarks.md for the side-by-side figures.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc keeps freed memory committed by default (eager arena commit, purges after 10 ms ×
/// 10): twice the resident memory of glibc for the same objects. Committing on demand and purging at
/// once costs nothing measurable here and keeps it near glibc's (docs/benchmarks.md). The numbers
/// are `mi_option_arena_eager_commit` and `mi_option_purge_delay` in mimalloc v3's `mi_option_e`
/// (c_src/mimalloc/v3/include/mimalloc.h of the libmimalloc-sys Cargo.lock pins; the crate names
/// only some options). The arena mimalloc reserved before `main` stays committed.
const MI_OPTION_ARENA_EAGER_COMMIT: std::ffi::c_int = 4;
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

fn give_memory_back() {
    // SAFETY: plain setters of mimalloc's global options, valid at any time.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    give_memory_back();
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let flags = Flags::parse();
    // Flags are checked before anything is written.
    let services = keel_apiserver::services::ServiceRanges::parse(
        &flags.service_cluster_ip_range,
        &flags.service_node_port_range,
    )
    .map_err(|e| anyhow::anyhow!("--service-cluster-ip-range / --service-node-port-range: {e}"))?;
    let authorization = keel_apiserver::authorization::Mode::parse_list(&flags.authorization_mode)
        .map_err(|e| anyhow::anyhow!("--authorization-mode: {e}"))?;
    let audit = audit(&flags)?;
    let encryption = match &flags.encryption_provider_config {
        Some(path) => {
            Some(keel_apiserver::encryption::Transformers::load(path).map_err(|e| anyhow::anyhow!(e))?)
        }
        None => None,
    };
    let audit_log = audit.as_ref().map(|a| a.backend().clone());
    std::fs::create_dir_all(&flags.data_dir)
        .with_context(|| format!("creating {}", flags.data_dir.display()))?;
    let advertise = flags.advertise_address.unwrap_or(if flags.bind_address.is_unspecified() {
        IpAddr::from([127, 0, 0, 1])
    } else {
        flags.bind_address
    });
    // In-cluster clients reach the apiserver at the kubernetes Service's address: the certificate names it.
    let mut hosts = vec![advertise.to_string(), services.first().to_string()];
    if !flags.bind_address.is_unspecified() {
        hosts.push(flags.bind_address.to_string());
    }
    let pki = keel_apiserver::pki::ensure(&flags.data_dir.join("pki"), &hosts)?;
    let service_accounts = service_accounts(&flags, &flags.data_dir.join("pki"))?;
    let tls = auth::server_config(&pki)?;
    let tokens = match &flags.token_auth_file {
        Some(path) => Tokens::from_file(path)?,
        None => Tokens::default(),
    };
    let mut store = open_store(&flags).await?;
    if let Some(transformers) = encryption {
        store = Arc::new(keel_apiserver::encryption::EncryptedStore::new(store, transformers));
    }
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(flags.bind_address, flags.secure_port))
        .await
        .with_context(|| format!("listening on {}:{}", flags.bind_address, flags.secure_port))?;
    let port = listener.local_addr()?.port();
    let address = SocketAddr::new(advertise, port).to_string();
    let kubeconfig = flags.data_dir.join("admin.kubeconfig");
    keel_apiserver::pki::write_file(&kubeconfig, &pki.admin_kubeconfig(&format!("https://{address}")), true)
        .with_context(|| format!("writing {}", kubeconfig.display()))?;
    let mut config = keel_apiserver::Config::new(SocketAddr::new(advertise, port));
    config.tokens = tokens;
    config.anonymous = flags.anonymous_auth;
    config.authorization = authorization;
    config.services = services;
    config.service_accounts = service_accounts;
    config.bootstrap_tokens = flags.enable_bootstrap_token_auth;
    let (ca, ca_key) = match (&flags.cluster_signing_cert_file, &flags.cluster_signing_key_file) {
        (Some(cert), Some(key)) => (
            std::fs::read_to_string(cert)
                .with_context(|| format!("--cluster-signing-cert-file {}", cert.display()))?,
            std::fs::read_to_string(key)
                .with_context(|| format!("--cluster-signing-key-file {}", key.display()))?,
        ),
        _ => (pki.ca_pem.clone(), pki.ca_key_pem.clone()),
    };
    config.signer = Some(
        keel_apiserver::certificates::signer::Signer::new(&ca, &ca_key, flags.cluster_signing_duration)
            .map_err(|e| anyhow::anyhow!("the CSR signers' CA: {e}"))?,
    );
    config.audit = audit;
    let read =
        |path: &PathBuf| std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()));
    config.kubelet = keel_apiserver::kubelet_client::KubeletClientConfig {
        client_cert: match (&flags.kubelet_client_certificate, &flags.kubelet_client_key) {
            (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
            _ => None,
        },
        ca: flags.kubelet_certificate_authority.as_ref().map(read).transpose()?,
        preferred_address_types: flags.kubelet_preferred_address_types.clone(),
    };
    config.limits = keel_apiserver::Limits {
        max_requests_inflight: flags.max_requests_inflight,
        max_mutating_requests_inflight: flags.max_mutating_requests_inflight,
        request_timeout: flags.request_timeout,
    };
    let server = ApiServer::new(store, config).await?;
    println!("keel-apiserver serving https://{address} (admin kubeconfig: {})", kubeconfig.display());
    tokio::select! {
        served = server.serve(listener, tls) => served.context("serving")?,
        _ = tokio::signal::ctrl_c() => {}
        _ = terminated() => {}
    }
    // As upstream's backend shutdown: what is queued is written before the process ends.
    if let Some(log) = audit_log {
        log.flush().await;
    }
    Ok(())
}

/// A Go-style duration of whole units: `90s`, `2m`, `1h`, `500ms`.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number.parse().map_err(|_| format!("{text:?} is not a duration like 60s"))?;
    let seconds = match unit {
        "ms" => return Ok(std::time::Duration::from_millis(number)),
        "s" => Some(number),
        "m" => number.checked_mul(60),
        "h" => number.checked_mul(3600),
        _ => return Err(format!("{text:?}: the unit must be ms, s, m or h")),
    };
    seconds.map(std::time::Duration::from_secs).ok_or_else(|| format!("{text:?} is too long"))
}

async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut signal) => {
            signal.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}
