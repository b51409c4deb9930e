//! The keys that sign and verify service account tokens, read as kube-apiserver reads
//! `--service-account-signing-key-file` and `--service-account-key-file`: PEM files holding EC
//! (P-256, P-384) or RSA keys — private keys as PKCS#8 (`PRIVATE KEY`), SEC1 (`EC PRIVATE KEY`) or
//! PKCS#1 (`RSA PRIVATE KEY`), public keys as PKIX (`PUBLIC KEY`), PKCS#1 (`RSA PUBLIC KEY`) or
//! certificates. A key's id is upstream's: base64url (no padding) of the SHA-256 of its PKIX DER.
//!
//! ring does the cryptography (it is already the TLS provider, so no second crypto stack comes
//! in); the little DER this needs (PKIX and PKCS#8 wrappers) is written here. P-521 keys, which
//! upstream also accepts, are refused at start with a message: ring has no P-521.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair as _, RsaKeyPair, UnparsedPublicKey};
use rustls::pki_types::pem::SectionKind;
use serde_json::Value;
use x509_parser::prelude::FromDer as _;

/// A failure to read or make a key.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("writing {path}: {detail}")]
    Write { path: String, detail: String },
    #[error("{what}: {detail}")]
    Parse { what: String, detail: String },
}

fn parse_error(what: &str, detail: impl std::fmt::Display) -> KeyError {
    KeyError::Parse { what: what.to_owned(), detail: detail.to_string() }
}

/// A JWS signature algorithm Keel signs or verifies with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    Rs256,
    Es256,
    Es384,
}

impl Algorithm {
    /// The JWS `alg` name.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Rs256 => "RS256",
            Algorithm::Es256 => "ES256",
            Algorithm::Es384 => "ES384",
        }
    }
}

/// A public key that verifies tokens, with its key id and its JWK (for /openid/v1/jwks).
#[derive(Debug, Clone)]
pub struct PublicKey {
    pub kid: String,
    pub algorithm: Algorithm,
    /// The EC point (uncompressed) or the PKCS#1 RSAPublicKey DER: what ring verifies with.
    key: Vec<u8>,
    /// The JWK's members in go-jose's order.
    jwk: Vec<(&'static str, String)>,
}

impl PublicKey {
    /// Reads a PKIX SubjectPublicKeyInfo (DER).
    pub fn from_spki(der: &[u8]) -> Result<PublicKey, KeyError> {
        let what = "a public key";
        let (_, spki) =
            x509_parser::x509::SubjectPublicKeyInfo::from_der(der).map_err(|e| parse_error(what, e))?;
        let kid = URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, der));
        match spki.parsed().map_err(|e| parse_error(what, e))? {
            x509_parser::public_key::PublicKey::RSA(rsa) => {
                let (n, e) = (trim_zeros(rsa.modulus), trim_zeros(rsa.exponent));
                let jwk = vec![
                    ("use", "sig".to_owned()),
                    ("kty", "RSA".to_owned()),
                    ("kid", kid.clone()),
                    ("alg", "RS256".to_owned()),
                    ("n", URL_SAFE_NO_PAD.encode(n)),
                    ("e", URL_SAFE_NO_PAD.encode(e)),
                ];
                Ok(PublicKey {
                    kid,
                    algorithm: Algorithm::Rs256,
                    key: spki.subject_public_key.data.to_vec(),
                    jwk,
                })
            }
            x509_parser::public_key::PublicKey::EC(point) => {
                let point = point.data();
                let (algorithm, crv, size) = match point.len() {
                    65 => (Algorithm::Es256, "P-256", 32),
                    97 => (Algorithm::Es384, "P-384", 48),
                    133 => return Err(parse_error(what, "P-521 keys are not supported (ring has no P-521)")),
                    n => {
                        return Err(parse_error(
                            what,
                            format!("an EC point of {n} bytes is no P-256 or P-384 key"),
                        ));
                    }
                };
                if point[0] != 4 {
                    return Err(parse_error(what, "a compressed EC point"));
                }
                let (x, y) = point[1..].split_at(size);
                let jwk = vec![
                    ("use", "sig".to_owned()),
                    ("kty", "EC".to_owned()),
                    ("kid", kid.clone()),
                    ("crv", crv.to_owned()),
                    ("alg", algorithm.name().to_owned()),
                    ("x", URL_SAFE_NO_PAD.encode(x)),
                    ("y", URL_SAFE_NO_PAD.encode(y)),
                ];
                Ok(PublicKey { kid, algorithm, key: point.to_vec(), jwk })
            }
            _ => Err(parse_error(what, "only RSA and EC keys are supported")),
        }
    }

    /// Whether `signature` over `message` is this key's, with `algorithm` (a token's `alg`).
    pub fn verify(&self, algorithm: Algorithm, message: &[u8], signature: &[u8]) -> bool {
        if algorithm != self.algorithm {
            return false;
        }
        let verifier: &dyn signature::VerificationAlgorithm = match algorithm {
            Algorithm::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
            Algorithm::Es256 => &signature::ECDSA_P256_SHA256_FIXED,
            Algorithm::Es384 => &signature::ECDSA_P384_SHA384_FIXED,
        };
        UnparsedPublicKey::new(verifier, &self.key).verify(message, signature).is_ok()
    }

    /// The key as a JSON Web Key, members in go-jose's order.
    pub fn jwk_json(&self) -> String {
        let members: Vec<String> = self
            .jwk
            .iter()
            .map(|(name, value)| format!("{}:{}", Value::from(*name), Value::from(value.as_str())))
            .collect();
        format!("{{{}}}", members.join(","))
    }

    /// One member of the JWK.
    pub fn jwk_member(&self, name: &str) -> Option<&str> {
        self.jwk.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_str())
    }
}

fn trim_zeros(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len().saturating_sub(1));
    &bytes[start..]
}

enum Signer {
    Ecdsa(EcdsaKeyPair),
    Rsa(RsaKeyPair),
}

/// The private key that signs tokens.
pub struct SigningKey {
    signer: Signer,
    public: PublicKey,
    rng: SystemRandom,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("kid", &self.public.kid).finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A new P-256 key and its PKCS#8 PEM (what Keel makes when no key file is given: ring
    /// generates no RSA keys, and ES256 is what upstream signs with for an EC key).
    pub fn generate() -> Result<(SigningKey, String), KeyError> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|e| parse_error("generating a P-256 key", e))?;
        let key = SigningKey::from_pkcs8(pkcs8.as_ref(), "a generated key")?;
        Ok((key, pem("PRIVATE KEY", pkcs8.as_ref())))
    }

    /// The first private key in a PEM text.
    pub fn from_pem(text: &[u8], what: &str) -> Result<SigningKey, KeyError> {
        for (kind, der) in pem_sections(text, what)? {
            match kind {
                SectionKind::PrivateKey => return SigningKey::from_pkcs8(&der, what),
                SectionKind::EcPrivateKey => {
                    return SigningKey::from_pkcs8(&sec1_to_pkcs8(&der, what)?, what);
                }
                SectionKind::RsaPrivateKey => {
                    let pair = RsaKeyPair::from_der(&der).map_err(|e| parse_error(what, e))?;
                    return SigningKey::rsa(pair, what);
                }
                _ => {}
            }
        }
        Err(parse_error(what, "no private key (PRIVATE KEY, EC PRIVATE KEY or RSA PRIVATE KEY) in it"))
    }

    /// Reads `--service-account-signing-key-file`.
    pub fn from_file(path: &Path) -> Result<SigningKey, KeyError> {
        let text = std::fs::read(path)
            .map_err(|source| KeyError::Read { path: path.display().to_string(), source })?;
        SigningKey::from_pem(&text, &path.display().to_string())
    }

    fn from_pkcs8(der: &[u8], what: &str) -> Result<SigningKey, KeyError> {
        let rng = SystemRandom::new();
        for (algorithm, signing) in [
            (Algorithm::Es256, &signature::ECDSA_P256_SHA256_FIXED_SIGNING),
            (Algorithm::Es384, &signature::ECDSA_P384_SHA384_FIXED_SIGNING),
        ] {
            if let Ok(pair) = EcdsaKeyPair::from_pkcs8(signing, der, &rng) {
                let curve = if algorithm == Algorithm::Es256 { P256 } else { P384 };
                let spki = ec_spki(curve, pair.public_key().as_ref());
                let public = PublicKey::from_spki(&spki)?;
                return Ok(SigningKey { signer: Signer::Ecdsa(pair), public, rng });
            }
        }
        match RsaKeyPair::from_pkcs8(der) {
            Ok(pair) => SigningKey::rsa(pair, what),
            Err(e) => Err(parse_error(what, format!("not a P-256, P-384 or RSA key: {e}"))),
        }
    }

    fn rsa(pair: RsaKeyPair, what: &str) -> Result<SigningKey, KeyError> {
        if pair.public().modulus_len() < 256 {
            return Err(parse_error(what, "RSA keys shorter than 2048 bits are not supported"));
        }
        let spki = rsa_spki(pair.public().as_ref());
        let public = PublicKey::from_spki(&spki)?;
        Ok(SigningKey { signer: Signer::Rsa(pair), public, rng: SystemRandom::new() })
    }

    /// The key's public half.
    pub fn public(&self) -> &PublicKey {
        &self.public
    }

    /// A JWS signature of `message` (`alg` [`PublicKey::algorithm`]).
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, KeyError> {
        match &self.signer {
            Signer::Ecdsa(pair) => pair
                .sign(&self.rng, message)
                .map(|s| s.as_ref().to_vec())
                .map_err(|e| parse_error("signing a token", e)),
            Signer::Rsa(pair) => {
                let mut out = vec![0; pair.public().modulus_len()];
                pair.sign(&signature::RSA_PKCS1_SHA256, &self.rng, message, &mut out)
                    .map_err(|e| parse_error("signing a token", e))?;
                Ok(out)
            }
        }
    }
}

/// Every key a `--service-account-key-file` holds: public keys, certificates' keys, and the public
/// halves of private keys.
pub fn public_keys_from_pem(text: &[u8], what: &str) -> Result<Vec<PublicKey>, KeyError> {
    let mut keys = Vec::new();
    for (kind, der) in pem_sections(text, what)? {
        match kind {
            SectionKind::PublicKey => keys.push(PublicKey::from_spki(&der)?),
            SectionKind::Certificate => {
                let (_, cert) =
                    x509_parser::parse_x509_certificate(&der).map_err(|e| parse_error(what, e))?;
                keys.push(PublicKey::from_spki(cert.public_key().raw)?);
            }
            SectionKind::PrivateKey | SectionKind::EcPrivateKey | SectionKind::RsaPrivateKey => {
                let label = match kind {
                    SectionKind::PrivateKey => "PRIVATE KEY",
                    SectionKind::EcPrivateKey => "EC PRIVATE KEY",
                    _ => "RSA PRIVATE KEY",
                };
                keys.push(SigningKey::from_pem(pem(label, &der).as_bytes(), what)?.public);
            }
            _ => {}
        }
    }
    // rustls' PEM reader skips sections it does not know, PKCS#1 public keys among them.
    for der in other_sections(text, "RSA PUBLIC KEY") {
        keys.push(PublicKey::from_spki(&rsa_spki(&der))?);
    }
    if keys.is_empty() {
        return Err(parse_error(what, "no public key, certificate or private key in it"));
    }
    Ok(keys)
}

/// Reads one `--service-account-key-file`.
pub fn public_keys_from_file(path: &Path) -> Result<Vec<PublicKey>, KeyError> {
    let text =
        std::fs::read(path).map_err(|source| KeyError::Read { path: path.display().to_string(), source })?;
    public_keys_from_pem(&text, &path.display().to_string())
}

/// The signing key kept in `dir` (`sa.key`, with `sa.pub` beside it, as kubeadm names them), made
/// on first start: a restart keeps it, so tokens issued before still verify.
pub fn ensure(dir: &Path) -> Result<SigningKey, KeyError> {
    let path = dir.join("sa.key");
    if path.exists() {
        return SigningKey::from_file(&path);
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| KeyError::Write { path: dir.display().to_string(), detail: e.to_string() })?;
    let (key, pem_text) = SigningKey::generate()?;
    let public = pem("PUBLIC KEY", &ec_spki(P256, &key_point(&key)));
    let write = |path: &Path, text: &str, private| {
        crate::pki::write_file(path, text, private)
            .map_err(|e| KeyError::Write { path: path.display().to_string(), detail: e.to_string() })
    };
    // The public key first: a crash between the two leaves no key, and the next start makes one.
    write(&dir.join("sa.pub"), &public, false)?;
    write(&path, &pem_text, true)?;
    Ok(key)
}

fn key_point(key: &SigningKey) -> Vec<u8> {
    match &key.signer {
        Signer::Ecdsa(pair) => pair.public_key().as_ref().to_vec(),
        Signer::Rsa(_) => Vec::new(),
    }
}

fn pem_sections(text: &[u8], what: &str) -> Result<Vec<(SectionKind, Vec<u8>)>, KeyError> {
    let mut reader = std::io::BufReader::new(text);
    let mut sections = Vec::new();
    while let Some(section) =
        rustls::pki_types::pem::from_buf(&mut reader).map_err(|e| parse_error(what, format!("PEM: {e:?}")))?
    {
        sections.push(section);
    }
    Ok(sections)
}

/// The DER of every PEM section labelled `label` (for the kinds rustls' reader skips).
fn other_sections(text: &[u8], label: &str) -> Vec<Vec<u8>> {
    let text = String::from_utf8_lossy(text);
    let (begin, end) = (format!("-----BEGIN {label}-----"), format!("-----END {label}-----"));
    let mut out = Vec::new();
    let mut rest = text.as_ref();
    while let Some(start) = rest.find(&begin) {
        let after = &rest[start + begin.len()..];
        let Some(stop) = after.find(&end) else { break };
        let body: String = after[..stop].chars().filter(|c| !c.is_whitespace()).collect();
        if let Ok(der) = STANDARD.decode(body) {
            out.push(der);
        }
        rest = &after[stop + end.len()..];
    }
    out
}

/// `label` PEM of `der`, 64 columns.
pub fn pem(label: &str, der: &[u8]) -> String {
    let encoded = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in encoded.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

// DER, just what PKIX and PKCS#8 wrappers need.
const EC_PUBLIC_KEY: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
const P256: &[u8] = &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
const P384: &[u8] = &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22];
const RSA_ENCRYPTION: &[u8] = &[0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05, 0x00];

fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

fn bit_string(content: &[u8]) -> Vec<u8> {
    let mut bits = vec![0];
    bits.extend_from_slice(content);
    der(0x03, &bits)
}

/// The PKIX DER of an EC point, as Go's MarshalPKIXPublicKey writes it.
fn ec_spki(curve: &[u8], point: &[u8]) -> Vec<u8> {
    let algorithm = der(0x30, &[EC_PUBLIC_KEY, curve].concat());
    der(0x30, &[algorithm, bit_string(point)].concat())
}

/// The PKIX DER of a PKCS#1 RSAPublicKey (rsaEncryption with NULL parameters, as Go writes it).
fn rsa_spki(rsa_public_key: &[u8]) -> Vec<u8> {
    let algorithm = der(0x30, RSA_ENCRYPTION);
    der(0x30, &[algorithm, bit_string(rsa_public_key)].concat())
}

/// A SEC1 ECPrivateKey wrapped as PKCS#8, the curve told by the private key's length.
fn sec1_to_pkcs8(sec1: &[u8], what: &str) -> Result<Vec<u8>, KeyError> {
    // ECPrivateKey ::= SEQUENCE { version INTEGER (1), privateKey OCTET STRING, ... }
    let bad = || parse_error(what, "not a SEC1 EC private key");
    let body = sec1.get(2..).ok_or_else(bad)?;
    let body = if sec1.get(1).is_some_and(|b| *b & 0x80 != 0) {
        sec1.get(2 + usize::from(sec1[1] & 0x7f)..).ok_or_else(bad)?
    } else {
        body
    };
    let private_len = match body {
        [0x02, 0x01, 0x01, 0x04, len, ..] => usize::from(*len),
        _ => return Err(bad()),
    };
    let curve = match private_len {
        32 => P256,
        48 => P384,
        66 => return Err(parse_error(what, "P-521 keys are not supported (ring has no P-521)")),
        _ => return Err(bad()),
    };
    let algorithm = der(0x30, &[EC_PUBLIC_KEY, curve].concat());
    Ok(der(0x30, &[vec![0x02, 0x01, 0x00], algorithm, der(0x04, sec1)].concat()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_sign_and_verify_with_upstreams_key_id() {
        let (key, pem_text) = SigningKey::generate().unwrap();
        let again = SigningKey::from_pem(pem_text.as_bytes(), "pem").unwrap();
        assert_eq!(key.public().kid, again.public().kid);
        let signature = key.sign(b"payload").unwrap();
        assert!(again.public().verify(Algorithm::Es256, b"payload", &signature));
        assert!(!again.public().verify(Algorithm::Es256, b"other", &signature));
        assert!(!again.public().verify(Algorithm::Rs256, b"payload", &signature));
        assert_eq!(key.public().kid.len(), 43, "base64url of a SHA-256, unpadded");
        assert_eq!(key.public().jwk_member("crv"), Some("P-256"));
    }

    #[test]
    fn rcgen_keys_in_every_form() {
        // rcgen's P-256 key as PKCS#8, its public half as PKIX, both in one file.
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let private = SigningKey::from_pem(pair.serialize_pem().as_bytes(), "pkcs8").unwrap();
        let public = public_keys_from_pem(pair.public_key_pem().as_bytes(), "spki").unwrap();
        assert_eq!(public[0].kid, private.public().kid);
        // The kid is SHA-256 of exactly the PKIX DER the file holds.
        let spki = rustls::pki_types::pem::PemObject::from_pem_slice(pair.public_key_pem().as_bytes())
            .map(|der: rustls::pki_types::SubjectPublicKeyInfoDer<'_>| der.to_vec())
            .unwrap();
        assert_eq!(
            private.public().kid,
            URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, &spki))
        );
        let both = format!("{}{}", pair.public_key_pem(), pair.serialize_pem());
        assert_eq!(public_keys_from_pem(both.as_bytes(), "both").unwrap().len(), 2);
        // A certificate's key.
        let cert = rcgen::CertificateParams::new(vec!["x".into()]).unwrap().self_signed(&pair).unwrap();
        assert_eq!(public_keys_from_pem(cert.pem().as_bytes(), "cert").unwrap()[0].kid, private.public().kid);
        assert!(public_keys_from_pem(b"nothing", "empty").is_err());
        assert!(SigningKey::from_pem(pair.public_key_pem().as_bytes(), "public only").is_err());
    }

    #[test]
    fn rsa_keys_in_every_form() {
        // openssl-made fixtures; the kid is `openssl rsa -pubout -outform DER | sha256 | base64url`.
        const KID: &str = "zSmPfdIq9VB5GSyHf9fmGlbLRaEutQg4KcoYsaMsLPs";
        let pkcs8 = SigningKey::from_pem(include_bytes!("testdata/rsa-pkcs8.pem"), "pkcs8").unwrap();
        let pkcs1 = SigningKey::from_pem(include_bytes!("testdata/rsa-pkcs1.pem"), "pkcs1").unwrap();
        assert_eq!((pkcs8.public().kid.as_str(), pkcs1.public().kid.as_str()), (KID, KID));
        for file in
            [&include_bytes!("testdata/rsa-public.pem")[..], include_bytes!("testdata/rsa-public-pkcs1.pem")]
        {
            let keys = public_keys_from_pem(file, "public").unwrap();
            assert_eq!(keys[0].kid, KID);
            let signature = pkcs1.sign(b"payload").unwrap();
            assert!(keys[0].verify(Algorithm::Rs256, b"payload", &signature));
            assert!(!keys[0].verify(Algorithm::Es256, b"payload", &signature));
        }
        assert_eq!(pkcs8.public().jwk_member("e"), Some("AQAB"));
    }

    #[test]
    fn sec1_keys_read_like_pkcs8() {
        // The SEC1 form of a key (what `openssl ecparam -genkey` writes): the PKCS#8 document's
        // inner OCTET STRING.
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let pkcs8 = pair.serialize_der();
        let (_, info) = x509_parser::der_parser::parse_der(&pkcs8).unwrap();
        let items = info.as_sequence().unwrap();
        let sec1 = items[2].as_slice().unwrap();
        let key = SigningKey::from_pem(pem("EC PRIVATE KEY", sec1).as_bytes(), "sec1").unwrap();
        let from_pkcs8 = SigningKey::from_pem(pair.serialize_pem().as_bytes(), "pkcs8").unwrap();
        assert_eq!(key.public().kid, from_pkcs8.public().kid);
    }

    #[test]
    fn the_data_dir_key_is_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let first = ensure(dir.path()).unwrap();
        let second = ensure(dir.path()).unwrap();
        assert_eq!(first.public().kid, second.public().kid);
        let public = public_keys_from_file(&dir.path().join("sa.pub")).unwrap();
        assert_eq!(public[0].kid, first.public().kid);
    }
}
