//! The kubelet's certificates as upstream keeps them (client-go's certificate FileStore and
//! manager, the kubelet's TLS bootstrap): what a certificate signing request holds, its name,
//! when a certificate is renewed, and the files under `--cert-dir`. No network: [`crate::bootstrap`]
//! sends the requests.
//!
//! - A pair lives in `<cert-dir>/<prefix>-<YYYY-MM-DD-HH-MM-SS>.pem` (the certificate chain, then
//!   the key) and `<prefix>-current.pem` is a symlink to the newest, swapped by a rename; the
//!   prefixes are `kubelet-client` and `kubelet-server`.
//! - Keys are ECDSA P-256, as upstream's keyutil makes them; a client request is for
//!   `system:node:<name>` in `system:nodes` with the usages digital signature and client auth,
//!   signer `kubernetes.io/kube-apiserver-client-kubelet`; a serving request adds the node's host
//!   names and addresses, usages digital signature and server auth, signer
//!   `kubernetes.io/kubelet-serving`.
//! - A certificate is renewed at a random point between 70 % and 90 % of its lifetime
//!   (upstream's nextRotationDeadline).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use base64::Engine;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestSpec};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use sha2::Digest;

pub const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
pub const CLIENT_USAGES: &[&str] = &["digital signature", "client auth"];
pub const SERVING_USAGES: &[&str] = &["digital signature", "server auth"];

/// A certificate and its key, as read from a store file or issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair {
    /// The certificate chain, PEM (the leaf first).
    pub certificates_pem: String,
    /// The private key, PEM.
    pub key_pem: String,
    /// The leaf's validity.
    pub not_before: Timestamp,
    pub not_after: Timestamp,
}

#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{0}")]
    Invalid(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CertificateError + '_ {
    move |source| CertificateError::Io { path: path.display().to_string(), source }
}

impl Pair {
    /// A pair from PEM: the certificates (the first is the leaf) and a private key, in any order
    /// (a store file holds both).
    pub fn parse(certificates_pem: &str, key_pem: &str) -> Result<Pair, CertificateError> {
        let invalid = |what: String| CertificateError::Invalid(what);
        let blocks = pem_blocks(certificates_pem);
        let certificates: Vec<&Vec<u8>> =
            blocks.iter().filter(|(label, _)| label == "CERTIFICATE").map(|(_, der)| der).collect();
        let leaf = certificates.first().ok_or_else(|| invalid("no certificate".into()))?;
        let (_, parsed) = x509_parser::parse_x509_certificate(leaf)
            .map_err(|e| invalid(format!("parsing the certificate: {e}")))?;
        let time = |t: x509_parser::time::ASN1Time| {
            Timestamp::from_second(t.timestamp()).map_err(|e| invalid(format!("a certificate time: {e}")))
        };
        let validity = parsed.validity();
        let (not_before, not_after) = (time(validity.not_before)?, time(validity.not_after)?);
        let key = pem_blocks(key_pem)
            .into_iter()
            .find(|(label, _)| label.ends_with("PRIVATE KEY"))
            .map(|(label, der)| pem_encode(&label, &der))
            .ok_or_else(|| invalid("no private key".into()))?;
        rcgen::KeyPair::from_pem(&key).map_err(|e| invalid(format!("parsing the private key: {e}")))?;
        let certificates_pem = certificates.iter().map(|der| pem_encode("CERTIFICATE", der)).collect();
        Ok(Pair { certificates_pem, key_pem: key, not_before, not_after })
    }

    /// Whether the leaf has expired at `now`.
    pub fn expired(&self, now: Timestamp) -> bool {
        now > self.not_after
    }
}

/// The PEM blocks of `text` (label, DER), whatever their labels (x509-parser's reader).
fn pem_blocks(text: &str) -> Vec<(String, Vec<u8>)> {
    x509_parser::pem::Pem::iter_from_buffer(text.as_bytes())
        .map_while(Result::ok)
        .map(|pem| (pem.label, pem.contents))
        .collect()
}

/// A PEM block of `der` labelled `label`.
fn pem_encode(label: &str, der: &[u8]) -> String {
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = body.as_bytes().chunks(64).filter_map(|c| std::str::from_utf8(c).ok()).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

/// When a certificate valid from `not_before` to `not_after` is renewed: `jitter` (0.0–1.0)
/// picks a point between 70 % and 90 % of its lifetime.
pub fn rotation_deadline(not_before: Timestamp, not_after: Timestamp, jitter: f64) -> Timestamp {
    let total = not_after.duration_since(not_before).as_secs_f64().max(0.0);
    let share = 0.7 + 0.2 * jitter.clamp(0.0, 1.0);
    let offset = SignedDuration::try_from_secs_f64(total * share).unwrap_or(SignedDuration::ZERO);
    not_before.checked_add(offset).unwrap_or(not_after)
}

/// A new ECDSA P-256 key, PEM.
pub fn new_key() -> Result<String, CertificateError> {
    rcgen::KeyPair::generate()
        .map(|key| key.serialize_pem())
        .map_err(|e| CertificateError::Invalid(format!("generating a key: {e}")))
}

/// A PKCS#10 request (PEM) for the node `node_name` with `key_pem`; `hosts` (names and addresses)
/// become its subject alternative names (a serving request).
pub fn request_pem(key_pem: &str, node_name: &str, hosts: &[String]) -> Result<String, CertificateError> {
    let failed = |e: rcgen::Error| CertificateError::Invalid(format!("making the request: {e}"));
    let key = rcgen::KeyPair::from_pem(key_pem).map_err(failed)?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params.distinguished_name.push(rcgen::DnType::OrganizationName, "system:nodes");
    params.distinguished_name.push(rcgen::DnType::CommonName, format!("system:node:{node_name}"));
    for host in hosts {
        let san = match host.parse::<IpAddr>() {
            Ok(ip) => rcgen::SanType::IpAddress(ip),
            Err(_) => rcgen::SanType::DnsName(host.clone().try_into().map_err(failed)?),
        };
        params.subject_alt_names.push(san);
    }
    params.serialize_request(&key).map_err(failed)?.pem().map_err(failed)
}

/// upstream's digestedName for a bootstrap request: `node-csr-` and the base64url SHA-512/256 of
/// the public key, the subject and the usages, so a kubelet retrying with the same key asks under
/// the same name.
pub fn digested_name(key_pem: &str, node_name: &str, usages: &[&str]) -> Result<String, CertificateError> {
    use rcgen::PublicKeyData;
    let key = rcgen::KeyPair::from_pem(key_pem)
        .map_err(|e| CertificateError::Invalid(format!("parsing the private key: {e}")))?;
    let encode = |data: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(data);
    let mut hash = sha2::Sha512_256::new();
    let mut write = |data: &[u8]| {
        hash.update(encode(data).as_bytes());
        hash.update(b"|");
    };
    write(&key.subject_public_key_info());
    write(format!("system:node:{node_name}").as_bytes());
    write(b"system:nodes");
    for usage in usages {
        write(usage.as_bytes());
    }
    Ok(format!("node-csr-{}", encode(&hash.finalize())))
}

/// The CertificateSigningRequest object: named (a bootstrap request) or generated (`csr-`).
pub fn csr_object(
    name: Option<&str>,
    request_pem: &str,
    signer: &str,
    usages: &[&str],
) -> CertificateSigningRequest {
    let mut csr = CertificateSigningRequest {
        spec: CertificateSigningRequestSpec {
            request: k8s_openapi::ByteString(request_pem.as_bytes().to_vec()),
            signer_name: signer.to_owned(),
            usages: Some(usages.iter().map(|u| (*u).to_owned()).collect()),
            ..CertificateSigningRequestSpec::default()
        },
        ..CertificateSigningRequest::default()
    };
    match name {
        Some(name) => csr.metadata.name = Some(name.to_owned()),
        None => csr.metadata.generate_name = Some("csr-".to_owned()),
    }
    csr
}

/// How a finished request ended: its certificate, a refusal, or nothing yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Issued(String),
    Denied(String),
    Failed(String),
    Pending,
}

/// What a CertificateSigningRequest's status says (client-go's WaitForCertificate).
pub fn outcome(csr: &CertificateSigningRequest) -> Outcome {
    let status = csr.status.as_ref();
    for condition in status.and_then(|s| s.conditions.as_ref()).into_iter().flatten() {
        let message = || {
            format!(
                "{}: {}",
                condition.reason.as_deref().unwrap_or_default(),
                condition.message.as_deref().unwrap_or_default()
            )
        };
        match condition.type_.as_str() {
            "Denied" => {
                return Outcome::Denied(format!(
                    "certificate signing request is denied, reason: {}",
                    message()
                ));
            }
            "Failed" => {
                return Outcome::Failed(format!("certificate signing request failed, reason: {}", message()));
            }
            _ => {}
        }
    }
    match status.and_then(|s| s.certificate.as_ref()).filter(|c| !c.0.is_empty()) {
        Some(certificate) => Outcome::Issued(String::from_utf8_lossy(&certificate.0).into_owned()),
        None => Outcome::Pending,
    }
}

/// upstream's FileStore: see the module docs.
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
    prefix: &'static str,
}

impl FileStore {
    pub fn client(dir: &Path) -> FileStore {
        FileStore { dir: dir.to_owned(), prefix: "kubelet-client" }
    }

    pub fn serving(dir: &Path) -> FileStore {
        FileStore { dir: dir.to_owned(), prefix: "kubelet-server" }
    }

    /// `<dir>/<prefix>-current.pem`, what a kubeconfig points at.
    pub fn current_path(&self) -> PathBuf {
        self.dir.join(format!("{}-current.pem", self.prefix))
    }

    /// The current pair, if there is a readable one.
    pub fn current(&self) -> Result<Option<Pair>, CertificateError> {
        let path = self.current_path();
        match std::fs::read_to_string(&path) {
            Ok(text) => Pair::parse(&text, &text).map(Some),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(io(&path)(error)),
        }
    }

    /// Writes `certificates_pem` and `key_pem` as a new pair (readable by the owner only) and
    /// makes it the current one.
    pub fn update(
        &self,
        certificates_pem: &str,
        key_pem: &str,
        now: Timestamp,
    ) -> Result<Pair, CertificateError> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let pair = Pair::parse(certificates_pem, key_pem)?;
        std::fs::create_dir_all(&self.dir).map_err(io(&self.dir))?;
        let stamp = now.strftime("%Y-%m-%d-%H-%M-%S");
        let file = self.dir.join(format!("{}-{stamp}.pem", self.prefix));
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&file)
            .map_err(io(&file))?;
        out.write_all(format!("{}{}", pair.certificates_pem, pair.key_pem).as_bytes()).map_err(io(&file))?;
        out.sync_all().map_err(io(&file))?;
        let link = self.dir.join(format!("{}-current.pem.updating", self.prefix));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&file, &link).map_err(io(&link))?;
        std::fs::rename(&link, self.current_path()).map_err(io(&link))?;
        Ok(pair)
    }
}

/// A kubeconfig for `server` with the cluster CA of the bootstrap kubeconfig (a file or its
/// data) and the client pair at `pem_path` (upstream's writeKubeconfigFromBootstrapping).
pub fn kubeconfig(
    server: &str,
    ca_file: Option<&str>,
    ca_data: Option<&str>,
    insecure: bool,
    pem_path: &Path,
) -> String {
    let mut cluster = serde_json::json!({"server": server});
    if let Some(file) = ca_file {
        cluster["certificate-authority"] = file.into();
    } else if let Some(data) = ca_data {
        cluster["certificate-authority-data"] = data.into();
    }
    if insecure {
        cluster["insecure-skip-tls-verify"] = true.into();
    }
    let pem = pem_path.display().to_string();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "default-cluster", "cluster": cluster}],
        "users": [{"name": "default-auth", "user": {"client-certificate": pem, "client-key": pem}}],
        "contexts": [{"name": "default-context",
                      "context": {"cluster": "default-cluster", "user": "default-auth", "namespace": "default"}}],
        "current-context": "default-context",
    })
    .to_string()
}

#[cfg(test)]
mod tests;
