//! The components' own identities for `cargo xtask up`, as kubeadm gives them: a client
//! certificate signed by the cluster CA (keel-apiserver's `DATA_DIR/pki/ca.crt` and `ca.key`) for
//! each, with upstream's user and group — system:kube-scheduler, system:kube-controller-manager,
//! system:kube-proxy (bound to system:node-proxier by the default policy), and each node's kubelet
//! as system:node:<name> in system:nodes (the Node authorizer's subjects) — in a kubeconfig naming
//! the apiserver's cluster address. The admin stays kubernetes-admin in system:masters.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair, KeyUsagePurpose};

/// A component's name in `state.json` and its user and groups.
pub fn components(nodes: &[String]) -> Vec<(String, String, Vec<String>)> {
    let mut all = vec![
        ("kube-scheduler".to_owned(), "system:kube-scheduler".to_owned(), Vec::new()),
        ("kube-controller-manager".to_owned(), "system:kube-controller-manager".to_owned(), Vec::new()),
        ("kube-proxy".to_owned(), "system:kube-proxy".to_owned(), Vec::new()),
    ];
    for node in nodes {
        all.push((format!("kubelet-{node}"), format!("system:node:{node}"), vec!["system:nodes".to_owned()]));
    }
    all
}

/// Writes `<dir>/<component>.kubeconfig` (0600) for every component; returns component → path.
pub fn write_kubeconfigs(
    pki: &Path,
    server: &str,
    dir: &Path,
    nodes: &[String],
) -> Result<BTreeMap<String, PathBuf>> {
    let ca_pem = fs::read_to_string(pki.join("ca.crt")).context("read the cluster CA")?;
    let ca_key = KeyPair::from_pem(&fs::read_to_string(pki.join("ca.key")).context("read the CA key")?)
        .context("the cluster CA key")?;
    let issuer = Issuer::from_ca_cert_pem(&ca_pem, ca_key).context("the cluster CA")?;
    fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let mut written = BTreeMap::new();
    for (component, user, groups) in components(nodes) {
        let key = KeyPair::generate().context("a component key")?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user.as_str());
        // rcgen keeps one value per attribute type; every component here has at most one group.
        if let Some(group) = groups.first() {
            params.distinguished_name.push(DnType::OrganizationName, group.as_str());
        }
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        // kubeadm's one year, from an hour ago (clock skew).
        let now = SystemTime::now();
        params.not_before = (now - Duration::from_secs(3600)).into();
        params.not_after = (now + Duration::from_secs(365 * 86_400)).into();
        let cert = params.signed_by(&key, &issuer).with_context(|| format!("sign {user}'s certificate"))?;
        let kubeconfig = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: keel\n  cluster:\n    server: {server}\n    \
             certificate-authority-data: {}\ncontexts:\n- name: {component}\n  context:\n    cluster: keel\n    \
             user: {user}\ncurrent-context: {component}\nusers:\n- name: {user}\n  user:\n    \
             client-certificate-data: {}\n    client-key-data: {}\n",
            STANDARD.encode(&ca_pem),
            STANDARD.encode(cert.pem()),
            STANDARD.encode(key.serialize_pem()),
        );
        let path = dir.join(format!("{component}.kubeconfig"));
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("create {}", path.display()))?;
        std::io::Write::write_all(&mut file, kubeconfig.as_bytes())?;
        written.insert(component, path);
    }
    Ok(written)
}
