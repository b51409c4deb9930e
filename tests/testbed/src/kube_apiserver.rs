//! [`KubeApiServer`]: the upstream kube-apiserver v1.34 peer on 127.0.0.1, on a one-member etcd 3.6
//! cluster of its own, with a PKI made here ([`TestPki`]): a CA, a serving certificate for 127.0.0.1,
//! an admin client certificate (`kubernetes-admin` in `system:masters`), an ECDSA P-256
//! service-account signing key, and client certificates minted on demand for any user in up to two
//! groups, so a test can act as `system:kube-scheduler`, `system:node:n1` in `system:nodes`, and so on.
//!
//! Authorization is `Node,RBAC` unless the caller passes its own `--authorization-mode`. The server is
//! ready once `GET /readyz` (as the admin, through `curl`) answers 200: kube-apiserver binds its port
//! before its post-start hooks (among them the RBAC bootstrap policy) are done.

use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType,
};

use crate::etcd::{EtcdCluster, EtcdConfig, EtcdRelease};
use crate::loopback::free_port;
use crate::process::{Daemon, Readiness};

/// How long kube-apiserver may take from spawn to `/readyz` answering 200.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How often `/readyz` is polled once the port accepts connections.
const READY_POLL: Duration = Duration::from_millis(250);
/// How many times a start is retried when the picked port was taken meanwhile.
const PORT_RETRIES: usize = 3;
/// The authorization chain unless the caller gives its own `--authorization-mode`.
pub const DEFAULT_AUTHORIZATION_MODE: &str = "Node,RBAC";
/// organizationName (2.5.4.10): where kube-apiserver's x509 authenticator reads groups from.
const ORGANIZATION_OID: [u64; 4] = [2, 5, 4, 10];

/// A client certificate and its key (PEM), signed by a [`TestPki`]'s CA.
#[derive(Debug, Clone)]
pub struct ClientCert {
    /// The user name (the certificate's common name).
    pub user: String,
    /// The groups (the certificate's organizations).
    pub groups: Vec<String>,
    pub cert_pem: String,
    pub key_pem: String,
}

/// The certificates and keys of one test cluster, made with rcgen in memory.
#[derive(Debug)]
pub struct TestPki {
    /// The self-signed CA: kube-apiserver's `--client-ca-file` and what clients trust.
    pub ca_pem: String,
    ca_key_pem: String,
    /// kube-apiserver's serving certificate and key, for 127.0.0.1 and localhost.
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
    /// `kubernetes-admin` in `system:masters`.
    pub admin: ClientCert,
    /// The ECDSA P-256 key that signs service-account tokens (PKCS#8) and its public half.
    pub service_account_key_pem: String,
    pub service_account_public_pem: String,
}

fn cert_error(what: &str) -> impl Fn(rcgen::Error) -> anyhow::Error + '_ {
    move |error| anyhow::anyhow!("{what}: {error}")
}

fn new_key(what: &str) -> Result<KeyPair> {
    KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(cert_error(what))
}

/// Parameters with a validity of a day on both sides of now (clock skew between the test and the
/// server's view is then never a question).
fn params(common_name: &str) -> Result<CertificateParams> {
    let mut params =
        CertificateParams::new(Vec::<String>::new()).map_err(cert_error("certificate parameters"))?;
    params.distinguished_name.push(DnType::CommonName, common_name);
    let now = std::time::SystemTime::now();
    let day = Duration::from_secs(24 * 3600);
    params.not_before = (now - day).into();
    params.not_after = (now + 7 * day).into();
    Ok(params)
}

impl TestPki {
    /// Makes a CA, a serving certificate for 127.0.0.1, the admin client certificate and the
    /// service-account key.
    pub fn new() -> Result<TestPki> {
        let ca_key = new_key("generating the CA key")?;
        let mut ca = params("keel-testbed kube-apiserver CA")?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let ca_pem = ca.self_signed(&ca_key).map_err(cert_error("signing the CA"))?.pem();
        let ca_key_pem = ca_key.serialize_pem();

        let serving_key = new_key("generating the serving key")?;
        let mut serving = params("kube-apiserver")?;
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        serving.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        serving.subject_alt_names = vec![
            SanType::IpAddress(Ipv4Addr::LOCALHOST.into()),
            SanType::DnsName("localhost".try_into().map_err(cert_error("the name localhost"))?),
        ];
        let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(cert_error("reading the CA back"))?;
        let serving_cert_pem = serving
            .signed_by(&serving_key, &issuer)
            .map_err(cert_error("signing the serving certificate"))?
            .pem();

        let sa_key = new_key("generating the service-account key")?;
        let mut pki = TestPki {
            ca_pem,
            ca_key_pem,
            serving_cert_pem,
            serving_key_pem: serving_key.serialize_pem(),
            admin: ClientCert {
                user: String::new(),
                groups: Vec::new(),
                cert_pem: String::new(),
                key_pem: String::new(),
            },
            service_account_key_pem: sa_key.serialize_pem(),
            service_account_public_pem: sa_key.public_key_pem(),
        };
        pki.admin = pki.client_cert("kubernetes-admin", &["system:masters"])?;
        Ok(pki)
    }

    /// A client certificate for `user` in `groups` (common name and organizations, as kube-apiserver's
    /// x509 authenticator reads them), signed by the CA. At most two groups: a user with more is better
    /// given by `--token-auth-file`.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> Result<ClientCert> {
        client_cert_signed_by(&self.ca_pem, &self.ca_key_pem, user, groups)
    }
}

/// How to start a [`KubeApiServer`].
#[derive(Debug, Clone, Default)]
pub struct KubeApiServerOptions {
    /// Flags added after the fixture's own (`--token-auth-file=...`, `--anonymous-auth=false`, ...).
    /// A flag given here replaces the fixture's flag of the same name (kube-apiserver would append
    /// repeated list flags such as `--authorization-mode` instead of replacing them).
    pub args: Vec<String>,
    /// Started once `/livez` answers 200 rather than `/readyz`: for a server that is expected
    /// not to become ready (a stored object its configuration cannot read keeps that resource's
    /// cache, and so `/readyz`, from ever succeeding).
    pub live_only: bool,
}

impl KubeApiServerOptions {
    /// No extra flags: `--authorization-mode=Node,RBAC` and the fixture's defaults.
    pub fn new() -> KubeApiServerOptions {
        KubeApiServerOptions::default()
    }

    /// Adds one flag, `--name=value` or `--name`.
    pub fn arg(mut self, arg: impl Into<String>) -> KubeApiServerOptions {
        self.args.push(arg.into());
        self
    }

    /// Waits for `/livez` instead of `/readyz` (see [`KubeApiServerOptions::live_only`]).
    pub fn live_only(mut self) -> KubeApiServerOptions {
        self.live_only = true;
        self
    }
}

/// A running kube-apiserver; dropping it stops kube-apiserver, then its etcd, then removes the files.
#[derive(Debug)]
pub struct KubeApiServer {
    // Declared first: the server stops before its store and its files go.
    daemon: Daemon,
    etcd: EtcdCluster,
    address: SocketAddr,
    pki: TestPki,
    dir: tempfile::TempDir,
}

impl KubeApiServer {
    /// With `--authorization-mode=Node,RBAC` and no other extra flags.
    pub fn start() -> Result<KubeApiServer> {
        KubeApiServer::start_with(&KubeApiServerOptions::new())
    }

    /// Starts etcd 3.6 and kube-apiserver, and waits until `/readyz` answers 200 (at most 60 s).
    pub fn start_with(options: &KubeApiServerOptions) -> Result<KubeApiServer> {
        let binary = crate::peers::path("kube-apiserver")?;
        let dir = tempfile::Builder::new()
            .prefix("keel-kube-apiserver-")
            .tempdir()
            .context("creating the kube-apiserver fixture's directory")?;
        let pki = TestPki::new().context("making the kube-apiserver test PKI")?;
        write_pki(dir.path(), &pki)?;
        let etcd = EtcdCluster::start_with(EtcdConfig::new(1).release(EtcdRelease::Current))
            .context("starting etcd for kube-apiserver")?;
        let mut attempt = 1;
        let (daemon, address) = loop {
            let port = free_port()?;
            let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            let command = command(&binary, dir.path(), &etcd, port, &options.args);
            match start_daemon(command, address, dir.path(), probe(options)) {
                Err(error)
                    if attempt < PORT_RETRIES && format!("{error:#}").contains("address already in use") =>
                {
                    attempt += 1;
                }
                Err(error) => return Err(error.context("starting kube-apiserver")),
                Ok(daemon) => break (daemon, address),
            }
        };
        Ok(KubeApiServer { daemon, etcd, address, pki, dir })
    }

    /// Stops kube-apiserver and starts it again with `options` on the same etcd, PKI and port
    /// (what is stored stays; a changed flag such as `--encryption-provider-config` takes effect).
    pub fn restart_with(&mut self, options: &KubeApiServerOptions) -> Result<()> {
        self.daemon.stop().context("stopping kube-apiserver")?;
        let binary = crate::peers::path("kube-apiserver")?;
        let command = command(&binary, self.dir.path(), &self.etcd, self.address.port(), &options.args);
        self.daemon = start_daemon(command, self.address, self.dir.path(), probe(options))
            .context("restarting kube-apiserver")?;
        Ok(())
    }

    /// A file of the PKI written for it (`ca.crt`, `ca.key`, `admin.crt`, ...).
    pub fn pki_file(&self, name: &str) -> PathBuf {
        pki_file(self.dir.path(), name)
    }

    /// `127.0.0.1:PORT`, where it serves HTTPS.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }

    /// The CA's certificate (PEM): what a client must trust, and what signs client certificates.
    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_pem
    }

    /// The file holding [`KubeApiServer::ca_pem`] (for `certificate-authority:` or `--cacert`).
    pub fn ca_file(&self) -> PathBuf {
        pki_file(self.dir.path(), "ca.crt")
    }

    /// `kubernetes-admin` in `system:masters`.
    pub fn admin(&self) -> &ClientCert {
        &self.pki.admin
    }

    /// The whole PKI (the service-account key among it).
    pub fn pki(&self) -> &TestPki {
        &self.pki
    }

    /// A client certificate for `user` in `groups`, signed by the CA the server trusts.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> Result<ClientCert> {
        self.pki.client_cert(user, groups)
    }

    /// The fixture's directory (PKI files, kubeconfigs); removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The kube-apiserver daemon (its log, its pid).
    pub fn daemon(&self) -> &Daemon {
        &self.daemon
    }

    /// The etcd cluster under it.
    pub fn etcd(&self) -> &EtcdCluster {
        &self.etcd
    }

    /// A kubeconfig (certificates embedded) that reaches this server as `client`.
    pub fn kubeconfig(&self, client: &ClientCert) -> String {
        kubeconfig_for(&self.url(), &self.pki.ca_pem, client)
    }

    /// Writes [`KubeApiServer::kubeconfig`] for `client` to `path` (for kubectl, kube-rs, client-go).
    pub fn write_kubeconfig(&self, path: &Path, client: &ClientCert) -> Result<()> {
        std::fs::write(path, self.kubeconfig(client))
            .with_context(|| format!("writing a kubeconfig for {} to {}", client.user, path.display()))
    }
}

/// A client certificate for `user` in `groups` signed by the CA `ca_pem` / `ca_key_pem` (any
/// cluster's: keel-apiserver's `DATA_DIR/pki/ca.crt` and `ca.key` too), as [`TestPki::client_cert`].
pub fn client_cert_signed_by(
    ca_pem: &str,
    ca_key_pem: &str,
    user: &str,
    groups: &[&str],
) -> Result<ClientCert> {
    let what = format!("the client certificate of {user} {groups:?}");
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(cert_error("reading the CA key"))?;
    let issuer = Issuer::from_ca_cert_pem(ca_pem, ca_key).map_err(cert_error("reading the CA"))?;
    let key = new_key("generating a client key")?;
    let mut params = params(user)?;
    // rcgen keeps one value per attribute type, so a second group goes in under organizationName's
    // OID spelled as a custom type: two O attributes in the subject, as kube-apiserver reads them.
    match groups {
        [] => {}
        [group] => params.distinguished_name.push(DnType::OrganizationName, *group),
        [first, second] => {
            params.distinguished_name.push(DnType::OrganizationName, *first);
            params.distinguished_name.push(DnType::CustomDnType(ORGANIZATION_OID.to_vec()), *second);
        }
        _ => bail!("{what}: at most two groups fit a test certificate (rcgen keeps one value per attribute)"),
    }
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let cert = params.signed_by(&key, &issuer).map_err(cert_error(&what))?;
    Ok(ClientCert {
        user: user.to_owned(),
        groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// A kubeconfig (certificates embedded) that reaches the server at `url`, trusting `ca_pem`, as
/// `client`.
pub fn kubeconfig_for(url: &str, ca_pem: &str, client: &ClientCert) -> String {
    let data = |pem: &str| STANDARD.encode(pem);
    let mut text = String::new();
    let _ = write!(
        text,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-apiserver\n  cluster:\n    server: {}\n    \
         certificate-authority-data: {}\ncontexts:\n- name: test\n  context:\n    cluster: kube-apiserver\n    \
         user: test-user\ncurrent-context: test\nusers:\n- name: test-user\n  user:\n    \
         client-certificate-data: {}\n    client-key-data: {}\n",
        url,
        data(ca_pem),
        data(&client.cert_pem),
        data(&client.key_pem),
    );
    text
}

/// Where the PKI files are inside the fixture's directory.
fn pki_file(dir: &Path, name: &str) -> PathBuf {
    dir.join("pki").join(name)
}

fn write_pki(dir: &Path, pki: &TestPki) -> Result<()> {
    let pki_dir = dir.join("pki");
    std::fs::create_dir_all(&pki_dir).with_context(|| format!("creating {}", pki_dir.display()))?;
    for (name, contents) in [
        ("ca.crt", &pki.ca_pem),
        // For kube-controller-manager's `--cluster-signing-key-file` (tests of the CSR signers).
        ("ca.key", &pki.ca_key_pem),
        ("serving.crt", &pki.serving_cert_pem),
        ("serving.key", &pki.serving_key_pem),
        ("admin.crt", &pki.admin.cert_pem),
        ("admin.key", &pki.admin.key_pem),
        ("sa.key", &pki.service_account_key_pem),
        ("sa.pub", &pki.service_account_public_pem),
    ] {
        let path = pki_file(dir, name);
        std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The flag name of `--name=value` or `--name`.
fn flag_name(arg: &str) -> &str {
    arg.split_once('=').map_or(arg, |(name, _)| name)
}

fn command(binary: &Path, dir: &Path, etcd: &EtcdCluster, port: u16, extra: &[String]) -> Command {
    let file = |name: &str| pki_file(dir, name).display().to_string();
    let defaults = vec![
        format!("--etcd-servers={}", etcd.client_urls().join(",")),
        "--bind-address=127.0.0.1".to_owned(),
        "--advertise-address=127.0.0.1".to_owned(),
        format!("--secure-port={port}"),
        format!("--authorization-mode={DEFAULT_AUTHORIZATION_MODE}"),
        format!("--client-ca-file={}", file("ca.crt")),
        format!("--tls-cert-file={}", file("serving.crt")),
        format!("--tls-private-key-file={}", file("serving.key")),
        format!("--service-account-key-file={}", file("sa.pub")),
        format!("--service-account-signing-key-file={}", file("sa.key")),
        "--service-account-issuer=https://kubernetes.default.svc".to_owned(),
        "--service-cluster-ip-range=10.96.0.0/16".to_owned(),
        format!("--cert-dir={}", dir.join("cert-dir").display()),
    ];
    let mut command = Command::new(binary);
    command.args(merge_args(defaults, extra));
    command
}

/// `defaults` without the flags `extra` names, then `extra`.
fn merge_args(defaults: Vec<String>, extra: &[String]) -> Vec<String> {
    let overridden = |arg: &String| extra.iter().any(|e| flag_name(e) == flag_name(arg));
    defaults.into_iter().filter(|arg| !overridden(arg)).chain(extra.iter().cloned()).collect()
}

/// The health path a start waits for: `/readyz`, or `/livez` for [`KubeApiServerOptions::live_only`].
fn probe(options: &KubeApiServerOptions) -> &'static str {
    if options.live_only { "/livez" } else { "/readyz" }
}

/// Spawns kube-apiserver, waits for its port, then for `probe` (`/readyz`) to answer 200.
fn start_daemon(command: Command, address: SocketAddr, dir: &Path, probe: &str) -> Result<Daemon> {
    let started = Instant::now();
    let daemon = Daemon::start("kube-apiserver", command, Readiness::Tcp(address), READY_TIMEOUT)?;
    let deadline = started + READY_TIMEOUT;
    let mut last = String::from("no answer yet");
    loop {
        if !daemon.is_running() {
            bail!(
                "kube-apiserver exited before {probe} answered 200 (last: {last}); last log lines of {}:\n{}",
                daemon.log_path().display(),
                daemon.log_tail(200)
            );
        }
        match health(address, dir, probe) {
            Ok((200, _)) => return Ok(daemon),
            Ok((status, body)) => last = format!("{status}: {}", body.trim()),
            Err(error) => last = format!("{error:#}"),
        }
        if Instant::now() >= deadline {
            bail!(
                "kube-apiserver on {address} did not answer GET {probe} with 200 within {READY_TIMEOUT:?} \
                 (last: {last}); last log lines of {}:\n{}",
                daemon.log_path().display(),
                daemon.log_tail(200)
            );
        }
        sleep(READY_POLL);
    }
}

/// `GET probe` (`/readyz`, `/livez`) as the admin through curl; the status and body.
fn health(address: SocketAddr, dir: &Path, probe: &str) -> Result<(u16, String)> {
    let output = Command::new("curl")
        .args(["--silent", "--show-error", "--max-time", "2", "--write-out", "\n%{http_code}"])
        .arg("--cacert")
        .arg(pki_file(dir, "ca.crt"))
        .arg("--cert")
        .arg(pki_file(dir, "admin.crt"))
        .arg("--key")
        .arg(pki_file(dir, "admin.key"))
        .arg(format!("https://{address}{probe}"))
        .output()
        .context("running curl (is curl installed?)")?;
    if !output.status.success() {
        bail!(
            "curl GET {probe} exited with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    let status = code.trim().parse().with_context(|| format!("curl printed no status code: {text:?}"))?;
    Ok((status, body.to_owned()))
}

/// kube-controller-manager 1.34 on `kubeconfig` running only `controllers` (`--controllers`), with
/// `extra` flags; started once its secure port accepts connections.
pub fn kube_controller_manager(kubeconfig: &Path, controllers: &str, extra: &[String]) -> Result<Daemon> {
    let kcm = crate::peers::path("kube-controller-manager")?;
    let port = free_port()?;
    let mut command = std::process::Command::new(kcm);
    command
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--controllers={controllers}"))
        .args(["--leader-elect=false", "--bind-address=127.0.0.1"])
        .arg(format!("--secure-port={port}"))
        .args(extra);
    let ready = Readiness::Tcp(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    Daemon::start("kube-controller-manager", command, ready, std::time::Duration::from_secs(30))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caller_flags_replace_defaults_of_the_same_name() {
        let defaults = vec!["--authorization-mode=Node,RBAC".to_owned(), "--secure-port=1".to_owned()];
        let extra = ["--authorization-mode=AlwaysAllow".to_owned(), "--anonymous-auth".to_owned()];
        assert_eq!(
            merge_args(defaults, &extra),
            ["--secure-port=1", "--authorization-mode=AlwaysAllow", "--anonymous-auth"]
        );
    }

    #[test]
    fn client_certificates_carry_user_and_groups() {
        let pki = TestPki::new().expect("pki");
        let node = pki.client_cert("system:node:n1", &["system:nodes", "extra"]).expect("node cert");
        assert_eq!(
            (node.user.as_str(), node.groups.as_slice()),
            ("system:node:n1", &["system:nodes".to_owned(), "extra".to_owned()][..])
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("node.crt");
        std::fs::write(&path, &node.cert_pem).expect("write the node cert");
        let path = path.display().to_string();
        let subject = crate::process::run_tool(
            "openssl",
            &["x509", "-noout", "-subject", "-nameopt", "RFC2253", "-in", &path],
        )
        .expect("openssl reads the node cert");
        assert_eq!(subject.trim(), "subject=O=extra,O=system:nodes,CN=system:node:n1");
        assert!(pki.client_cert("u", &["a", "b", "c"]).is_err(), "three groups do not fit");
        assert_eq!(pki.admin.user, "kubernetes-admin");
        assert_eq!(pki.admin.groups, ["system:masters"]);
        assert!(pki.service_account_key_pem.contains("BEGIN PRIVATE KEY"));
        assert!(pki.service_account_public_pem.contains("BEGIN PUBLIC KEY"));
    }
}
