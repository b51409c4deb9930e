//! Authentication: who a request is. A client certificate signed by the cluster CA (CN the user,
//! O the groups) or a bearer token from `--token-auth-file`; a request with neither is
//! system:anonymous (when `--anonymous-auth` allows it), authorized like any other user.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use crate::pki::Pki;

/// An authenticated user (`user.Info`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    /// What an authenticator adds (a service account token's pod and node, an impersonator's
    /// `Impersonate-Extra-*`).
    pub extra: BTreeMap<String, Vec<String>>,
}

/// upstream's user and group names (`k8s.io/apiserver/pkg/authentication/user`).
pub const ANONYMOUS: &str = "system:anonymous";
pub const ALL_UNAUTHENTICATED: &str = "system:unauthenticated";
pub const ALL_AUTHENTICATED: &str = "system:authenticated";
pub const SYSTEM_PRIVILEGED_GROUP: &str = "system:masters";
pub const APISERVER_USER: &str = "system:apiserver";
/// The extra key naming the credential a user authenticated with (a certificate's digest).
pub const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

impl User {
    /// A user of `name` in `groups`, no uid or extra.
    pub fn named(name: &str, groups: &[&str]) -> User {
        User {
            name: name.to_owned(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..User::default()
        }
    }

    /// Who a request with no credentials is, when anonymous requests are allowed.
    pub fn anonymous() -> User {
        User::named(ANONYMOUS, &[ALL_UNAUTHENTICATED])
    }

    /// The server itself (upstream's loopback client).
    pub fn apiserver() -> User {
        User::named(APISERVER_USER, &[SYSTEM_PRIVILEGED_GROUP, ALL_AUTHENTICATED])
    }

    /// The user a SubjectAccessReview's or a CSR's spec names: `name_field` (`user`, `username`),
    /// `uid`, `groups` and `extra` of `spec`.
    pub fn from_spec(spec: &serde_json::Value, name_field: &str) -> User {
        let strings = |value: &serde_json::Value| -> Vec<String> {
            value
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(serde_json::Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        User {
            name: spec[name_field].as_str().unwrap_or_default().to_owned(),
            uid: spec["uid"].as_str().unwrap_or_default().to_owned(),
            groups: strings(&spec["groups"]),
            extra: spec["extra"]
                .as_object()
                .map(|extra| extra.iter().map(|(k, v)| (k.clone(), strings(v))).collect())
                .unwrap_or_default(),
        }
    }

    /// As upstream's authentication filter leaves every authenticated user: in
    /// `system:authenticated` (once), anonymous excepted.
    pub fn authenticated(mut self) -> User {
        let anonymous = self.name == ANONYMOUS || self.groups.iter().any(|g| g == ALL_UNAUTHENTICATED);
        if !anonymous && !self.groups.iter().any(|g| g == ALL_AUTHENTICATED) {
            self.groups.push(ALL_AUTHENTICATED.to_owned());
        }
        self
    }
}

/// A failure to set authentication up.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("reading the token file {path}: {source}")]
    TokenFile { path: String, source: std::io::Error },
    #[error("token file line {line}: {reason}")]
    TokenLine { line: usize, reason: &'static str },
    #[error("TLS setup: {0}")]
    Tls(String),
}

/// Bearer tokens from a static token file.
#[derive(Debug, Default, Clone)]
pub struct Tokens {
    users: HashMap<String, User>,
}

impl Tokens {
    /// Reads kube-apiserver's CSV format: `token,user,uid[,"group1,group2"]` per line.
    pub fn from_file(path: &Path) -> Result<Tokens, AuthError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| AuthError::TokenFile { path: path.display().to_string(), source })?;
        Tokens::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Tokens, AuthError> {
        let mut users = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason| AuthError::TokenLine { line: i + 1, reason };
            let mut fields = line.splitn(4, ',');
            let token = fields.next().filter(|t| !t.is_empty()).ok_or_else(|| bad("no token"))?;
            let name = fields.next().filter(|n| !n.is_empty()).ok_or_else(|| bad("no user name"))?;
            let uid = fields.next().ok_or_else(|| bad("no uid"))?;
            let groups = fields
                .next()
                .map(|g| {
                    g.trim_matches('"').split(',').filter(|g| !g.is_empty()).map(str::to_owned).collect()
                })
                .unwrap_or_default();
            users.insert(
                token.to_owned(),
                User { name: name.to_owned(), uid: uid.to_owned(), groups, extra: BTreeMap::new() },
            );
        }
        Ok(Tokens { users })
    }

    /// The user of an `Authorization: Bearer <token>` header.
    pub fn authenticate(&self, authorization: Option<&str>) -> Option<User> {
        self.authenticate_token(bearer_token(authorization?)?)
    }

    /// The user of a bearer token.
    pub fn authenticate_token(&self, token: &str) -> Option<User> {
        self.users.get(token).cloned()
    }
}

/// The token of an `Authorization: Bearer <token>` header; the scheme is case-insensitive (RFC
/// 7235), as upstream reads it. An empty token is none.
pub fn bearer_token(authorization: &str) -> Option<&str> {
    let (scheme, token) = authorization.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The user a verified client certificate names: CN the user, each O a group, and (as upstream's
/// x509 authenticator adds it) the certificate's credential ID `X509SHA256=<hex SHA-256 of the
/// DER>` in `authentication.kubernetes.io/credential-id`.
pub fn certificate_user(certificate: &CertificateDer<'_>) -> Option<User> {
    let (_, parsed) = x509_parser::parse_x509_certificate(certificate).ok()?;
    let subject = parsed.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_owned();
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok().map(str::to_owned)).collect();
    // upstream's x509 authenticator (1.34) names the credential: the certificate's SHA-256.
    let digest = ring::digest::digest(&ring::digest::SHA256, certificate);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let extra = BTreeMap::from([(CREDENTIAL_ID.to_owned(), vec![format!("X509SHA256={hex}")])]);
    Some(User { name, groups, extra, ..User::default() })
}

/// TLS for serving: the serving certificate, client certificates verified against the cluster CA
/// but not required (token users come without one), HTTP/2 and HTTP/1.1.
pub fn server_config(pki: &Pki) -> Result<Arc<ServerConfig>, AuthError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(pki.ca_pem.as_bytes()) {
        roots
            .add(ca.map_err(|e| AuthError::Tls(e.to_string()))?)
            .map_err(|e| AuthError::Tls(e.to_string()))?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| AuthError::Tls(e.to_string()))?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| AuthError::Tls(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(pki.serving_chain.clone(), pki.serving_key.clone_key())
        .map_err(|e| AuthError::Tls(e.to_string()))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file() {
        let tokens = Tokens::parse("# comment\nabc,alice,1001,\"dev,ops\"\nxyz,bob,1002\n").unwrap();
        let alice = tokens.authenticate(Some("Bearer abc")).unwrap();
        assert_eq!(
            (alice.name.as_str(), alice.groups.as_slice()),
            ("alice", &["dev".to_owned(), "ops".to_owned()][..])
        );
        assert!(tokens.authenticate(Some("Bearer xyz")).unwrap().groups.is_empty());
        assert!(tokens.authenticate(Some("Bearer nope")).is_none());
        assert!(tokens.authenticate(Some("Basic abc")).is_none());
        assert!(tokens.authenticate(Some("bearer abc")).is_some(), "the scheme is case-insensitive");
        assert!(Tokens::parse(",alice,1").is_err());
    }

    #[test]
    fn admin_certificate_names_its_user() {
        let dir = tempfile::tempdir().unwrap();
        let pki = crate::pki::ensure(dir.path(), &[]).unwrap();
        let der = CertificateDer::from_pem_slice(pki.admin_cert_pem.as_bytes()).unwrap();
        let user = certificate_user(&der).unwrap();
        assert_eq!(
            (user.name.as_str(), user.groups.as_slice()),
            ("kubernetes-admin", &["system:masters".to_owned()][..])
        );
        let id = &user.extra[CREDENTIAL_ID];
        assert!(id.len() == 1 && id[0].starts_with("X509SHA256=") && id[0].len() == 11 + 64, "{id:?}");
        assert!(server_config(&pki).is_ok());
    }
}
