//! The cluster's certificates, made on first start and kept in `DATA_DIR/pki`: a CA, the serving
//! certificate (re-issued at every start for the current addresses) and the admin's client
//! certificate (CN kubernetes-admin, O system:masters), which `admin.kubeconfig` carries.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};

/// A failure to make or read the certificates.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{what} {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("{what}: {detail}")]
    Certificate { what: &'static str, detail: String },
}

/// What serving needs, and what clients are given.
#[derive(Debug)]
pub struct Pki {
    pub ca_pem: String,
    /// The CA's key (PEM), which the built-in CSR signers sign with.
    pub ca_key_pem: String,
    pub serving_chain: Vec<CertificateDer<'static>>,
    pub serving_key: PrivateKeyDer<'static>,
    pub admin_cert_pem: String,
    pub admin_key_pem: String,
}

fn cert_error(what: &'static str) -> impl Fn(rcgen::Error) -> PkiError {
    move |e| PkiError::Certificate { what, detail: e.to_string() }
}

fn read(path: &Path, what: &'static str) -> Result<String, PkiError> {
    fs::read_to_string(path).map_err(|source| PkiError::Io { what, path: path.to_owned(), source })
}

/// Writes a file readable by its owner only (keys, kubeconfigs with credentials) or by all
/// (certificates), under a temporary name renamed into place once synced: a reader or a crash never
/// sees half of it, and a file left by an earlier run gets the mode again.
pub fn write_file(path: &Path, contents: &str, private: bool) -> Result<(), PkiError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |source| PkiError::Io { what: "writing", path: path.to_owned(), source };
    let mode = if private { 0o600 } else { 0o644 };
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&partial)
        .map_err(io)?;
    fs::set_permissions(&partial, fs::Permissions::from_mode(mode)).map_err(io)?;
    file.write_all(contents.as_bytes()).map_err(io)?;
    file.sync_all().map_err(io)?;
    fs::rename(&partial, path).map_err(io)
}

/// Loads the CA and admin certificate from `dir` (making them on first start) and issues a serving
/// certificate for `hosts` (DNS names and IP addresses).
pub fn ensure(dir: &Path, hosts: &[String]) -> Result<Pki, PkiError> {
    fs::create_dir_all(dir).map_err(|source| PkiError::Io {
        what: "creating",
        path: dir.to_owned(),
        source,
    })?;
    let (ca_path, ca_key_path) = (dir.join("ca.crt"), dir.join("ca.key"));
    if !ca_path.exists() {
        let key = KeyPair::generate().map_err(cert_error("generating the CA key"))?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(cert_error("CA parameters"))?;
        params.distinguished_name.push(DnType::CommonName, "keel-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.not_after = rcgen::date_time_ymd(2036, 1, 1);
        let cert = params.self_signed(&key).map_err(cert_error("signing the CA"))?;
        write_file(&ca_key_path, &key.serialize_pem(), true)?;
        write_file(&ca_path, &cert.pem(), false)?;
    }
    let ca_pem = read(&ca_path, "reading the CA certificate")?;
    let ca_key_pem = read(&ca_key_path, "reading the CA key")?;
    let ca_key = KeyPair::from_pem(&ca_key_pem).map_err(cert_error("the CA key"))?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).map_err(cert_error("the CA certificate"))?;

    let (admin_path, admin_key_path) = (dir.join("admin.crt"), dir.join("admin.key"));
    if !admin_path.exists() {
        let key = KeyPair::generate().map_err(cert_error("generating the admin key"))?;
        let mut params =
            CertificateParams::new(Vec::<String>::new()).map_err(cert_error("admin parameters"))?;
        params.distinguished_name.push(DnType::CommonName, "kubernetes-admin");
        params.distinguished_name.push(DnType::OrganizationName, "system:masters");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_after = rcgen::date_time_ymd(2036, 1, 1);
        let cert = params.signed_by(&key, &issuer).map_err(cert_error("signing the admin certificate"))?;
        write_file(&admin_key_path, &key.serialize_pem(), true)?;
        write_file(&admin_path, &cert.pem(), false)?;
    }

    let key = KeyPair::generate().map_err(cert_error("generating the serving key"))?;
    let mut params =
        CertificateParams::new(Vec::<String>::new()).map_err(cert_error("serving parameters"))?;
    params.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_after = rcgen::date_time_ymd(2036, 1, 1);
    let mut names: Vec<String> = [
        "localhost",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "127.0.0.1",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    names.extend(hosts.iter().cloned());
    names.sort();
    names.dedup();
    for name in names {
        let san = match name.parse() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(name.clone().try_into().map_err(cert_error("a serving name"))?),
        };
        params.subject_alt_names.push(san);
    }
    let cert = params.signed_by(&key, &issuer).map_err(cert_error("signing the serving certificate"))?;
    let serving_key = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes())
        .map_err(|e| PkiError::Certificate { what: "the serving key", detail: e.to_string() })?;
    let ca_der = CertificateDer::from_pem_slice(ca_pem.as_bytes())
        .map_err(|e| PkiError::Certificate { what: "the CA certificate", detail: e.to_string() })?;
    Ok(Pki {
        serving_chain: vec![cert.der().clone(), ca_der],
        serving_key,
        admin_cert_pem: read(&admin_path, "reading the admin certificate")?,
        admin_key_pem: read(&admin_key_path, "reading the admin key")?,
        ca_pem,
        ca_key_pem,
    })
}

impl Pki {
    /// A kubeconfig for the admin at `server` (`https://host:port`), everything inline.
    pub fn admin_kubeconfig(&self, server: &str) -> String {
        let data = |pem: &str| STANDARD.encode(pem);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: keel\n  cluster:\n    server: {server}\n    \
             certificate-authority-data: {}\ncontexts:\n- name: keel-admin\n  context:\n    cluster: keel\n    \
             user: kubernetes-admin\ncurrent-context: keel-admin\nusers:\n- name: kubernetes-admin\n  user:\n    \
             client-certificate-data: {}\n    client-key-data: {}\n",
            data(&self.ca_pem),
            data(&self.admin_cert_pem),
            data(&self.admin_key_pem)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let first = ensure(dir.path(), &["10.0.0.1".into(), "keel.example".into()]).unwrap();
        let second = ensure(dir.path(), &[]).unwrap();
        assert_eq!(first.ca_pem, second.ca_pem);
        assert_eq!(first.admin_cert_pem, second.admin_cert_pem);
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dir.path().join("ca.key")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let kubeconfig = first.admin_kubeconfig("https://127.0.0.1:6443");
        assert!(
            kubeconfig.contains("client-certificate-data: ")
                && kubeconfig.contains("server: https://127.0.0.1:6443")
        );
    }
}
