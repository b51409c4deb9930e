//! The transformers of one resource: its providers in the order configured, as upstream's
//! prefixTransformers (k8s.io/apiserver/pkg/storage/value). The first provider writes; a value is
//! read by the first provider whose prefix it carries, and is stale when that is not the first
//! provider or not its first key. The stored forms are upstream's byte for byte, so either server
//! reads what the other wrote:
//! - aesgcm: `k8s:enc:aesgcm:v1:<key name>:` + 12-byte random nonce + AES-GCM sealed data with the
//!   storage key as additional authenticated data;
//! - aescbc: `k8s:enc:aescbc:v1:<key name>:` + 16-byte IV + AES-CBC of the PKCS#7-padded data;
//! - secretbox: `k8s:enc:secretbox:v1:<key name>:` + 24-byte nonce + NaCl secretbox;
//! - identity: the data as it is (refusing to read anything that starts `k8s:enc:`).
//!
//! Errors carry upstream's words (Go's crypto packages' where the failure is theirs).

use aes_gcm::aead::consts::U12;
use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes128Gcm, Aes256Gcm, AesGcm};
use base64::Engine;
use bytes::Bytes;
use cbc::cipher::block_padding::NoPadding;
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use crypto_secretbox::XSalsa20Poly1305;
use ring::rand::{SecureRandom, SystemRandom};

use super::config::{KeysConfiguration, ProviderConfiguration};

type Aes192Gcm = AesGcm<aes::Aes192, U12>;

/// What every encrypted value starts with.
pub const ENCRYPTED_PREFIX: &[u8] = b"k8s:enc:";
const AESGCM_PREFIX: &str = "k8s:enc:aesgcm:v1:";
const AESCBC_PREFIX: &str = "k8s:enc:aescbc:v1:";
const SECRETBOX_PREFIX: &str = "k8s:enc:secretbox:v1:";
const GCM_NONCE: usize = 12;
const AES_BLOCK: usize = 16;
const SECRETBOX_NONCE: usize = 24;
const SECRETBOX_OVERHEAD: usize = 16;

/// The providers of one resource, first writes.
pub struct Transformer {
    providers: Vec<Provider>,
}

impl std::fmt::Debug for Transformer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.providers.iter().map(Provider::prefix).collect();
        f.debug_struct("Transformer").field("providers", &names).finish()
    }
}

enum Provider {
    Identity,
    AesGcm(Vec<(String, Gcm)>),
    AesCbc(Vec<(String, Cbc)>),
    Secretbox(Vec<(String, XSalsa20Poly1305)>),
}

enum Gcm {
    Aes128(Aes128Gcm),
    Aes192(Aes192Gcm),
    Aes256(Aes256Gcm),
}

#[derive(Clone)]
enum Cbc {
    Aes128([u8; 16]),
    Aes192([u8; 24]),
    Aes256([u8; 32]),
}

/// A value read from storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub data: Bytes,
    /// Read by a provider or key that no longer writes: rewriting the value moves it to the first.
    pub stale: bool,
}

impl Transformer {
    /// The providers of one resource list, keys decoded (the configuration was validated; a key
    /// that still cannot be used is an error, as upstream's transformer construction).
    pub fn new(providers: &[ProviderConfiguration]) -> Result<Transformer, String> {
        let providers = providers.iter().map(Provider::new).collect::<Result<Vec<_>, _>>()?;
        if providers.is_empty() {
            return Err("no providers".into());
        }
        Ok(Transformer { providers })
    }

    /// Several resource lists naming one resource: their providers in turn (upstream appends them).
    pub fn extend(&mut self, other: Transformer) {
        self.providers.extend(other.providers);
    }

    /// Whether the first provider stores values as they are.
    pub fn writes_plain(&self) -> bool {
        matches!(self.providers.first(), Some(Provider::Identity))
    }

    /// The stored form of `data` under `key` (the additional authenticated data of aesgcm).
    pub fn to_storage(&self, data: &Bytes, key: &str) -> Result<Bytes, String> {
        match &self.providers[0] {
            Provider::Identity => Ok(data.clone()),
            Provider::AesGcm(keys) => {
                let (name, cipher) = &keys[0];
                let mut out = header(AESGCM_PREFIX, name, GCM_NONCE + data.len() + 16);
                let nonce = random(GCM_NONCE)?;
                let sealed = cipher.seal(&nonce, data, key.as_bytes())?;
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
                Ok(out.into())
            }
            Provider::AesCbc(keys) => {
                let (name, cipher) = &keys[0];
                let iv = random(AES_BLOCK)?;
                let padding = AES_BLOCK - data.len() % AES_BLOCK;
                let mut plain = Vec::with_capacity(data.len() + padding);
                plain.extend_from_slice(data);
                plain.resize(data.len() + padding, padding as u8);
                let mut out = header(AESCBC_PREFIX, name, AES_BLOCK + plain.len());
                out.extend_from_slice(&iv);
                out.extend_from_slice(&cipher.encrypt(&iv, plain));
                Ok(out.into())
            }
            Provider::Secretbox(keys) => {
                let (name, cipher) = &keys[0];
                let nonce = random(SECRETBOX_NONCE)?;
                let sealed = cipher
                    .encrypt(nonce.as_slice().into(), data.as_ref())
                    .map_err(|_| "secretbox: sealing failed".to_owned())?;
                let mut out = header(SECRETBOX_PREFIX, name, SECRETBOX_NONCE + sealed.len());
                out.extend_from_slice(&nonce);
                out.extend_from_slice(&sealed);
                Ok(out.into())
            }
        }
    }

    /// The data a stored value holds (upstream's prefixTransformers.TransformFromStorage).
    pub fn from_storage(&self, value: &Bytes, key: &str) -> Result<Read, String> {
        let mut errors = Vec::new();
        for (i, provider) in self.providers.iter().enumerate() {
            let prefix = provider.prefix();
            if !value.starts_with(prefix.as_bytes()) {
                continue;
            }
            match provider.read(value, prefix.len(), key) {
                Ok(read) => return Ok(Read { data: read.data, stale: read.stale || i != 0 }),
                // An identity provider ahead of the encrypting ones (decrypting everything)
                // meets encrypted data: the next provider reads it.
                Err(_) if prefix.is_empty() => {}
                Err(error) => errors.push(error),
            }
        }
        if errors.is_empty() { Err("no matching prefix found".into()) } else { Err(reduce(errors)) }
    }
}

impl Provider {
    fn new(config: &ProviderConfiguration) -> Result<Provider, String> {
        if config.kms.is_some() {
            return Err(
                "kms providers are not supported by keel-apiserver (it has no KMS plugin client)".into()
            );
        }
        if let Some(keys) = &config.aesgcm {
            return Ok(Provider::AesGcm(named(keys, "aes", |secret| match secret.len() {
                16 => Aes128Gcm::new_from_slice(secret).map(Gcm::Aes128).ok(),
                24 => Aes192Gcm::new_from_slice(secret).map(Gcm::Aes192).ok(),
                32 => Aes256Gcm::new_from_slice(secret).map(Gcm::Aes256).ok(),
                _ => None,
            })?));
        }
        if let Some(keys) = &config.aescbc {
            return Ok(Provider::AesCbc(named(keys, "aes", |secret| match secret.len() {
                16 => secret.try_into().ok().map(Cbc::Aes128),
                24 => secret.try_into().ok().map(Cbc::Aes192),
                32 => secret.try_into().ok().map(Cbc::Aes256),
                _ => None,
            })?));
        }
        if let Some(keys) = &config.secretbox {
            return Ok(Provider::Secretbox(named(keys, "secretbox", |secret| {
                XSalsa20Poly1305::new_from_slice(secret).ok()
            })?));
        }
        if config.identity.is_some() {
            return Ok(Provider::Identity);
        }
        Err("provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity".into())
    }

    fn prefix(&self) -> &'static str {
        match self {
            Provider::Identity => "",
            Provider::AesGcm(_) => AESGCM_PREFIX,
            Provider::AesCbc(_) => AESCBC_PREFIX,
            Provider::Secretbox(_) => SECRETBOX_PREFIX,
        }
    }

    /// `value[skip..]` read by this provider: its keys tried in order by their `name:` prefixes.
    fn read(&self, value: &Bytes, skip: usize, key: &str) -> Result<Read, String> {
        let data = &value[skip..];
        let (result, what) = match self {
            Provider::Identity => {
                if data.starts_with(ENCRYPTED_PREFIX) {
                    return Err("identity transformer tried to read encrypted data".into());
                }
                return Ok(Read { data: value.slice(skip..), stale: false });
            }
            Provider::AesGcm(keys) => {
                (by_key(keys, data, |cipher, sealed| gcm_open(cipher, sealed, key)), "AES")
            }
            Provider::AesCbc(keys) => (by_key(keys, data, cbc_open), "AES"),
            Provider::Secretbox(keys) => (by_key(keys, data, secretbox_open), "Secretbox"),
        };
        result
            .unwrap_or_else(|| Err(format!("no matching key was found for the provided {what} transformer")))
    }
}

/// The keys of a provider, in order, each made by `make` from its decoded secret.
fn named<T>(
    config: &KeysConfiguration,
    provider: &str,
    make: impl Fn(&[u8]) -> Option<T>,
) -> Result<Vec<(String, T)>, String> {
    if config.keys.is_empty() {
        return Err(format!("{provider} provider has no valid keys"));
    }
    config
        .keys
        .iter()
        .map(|key| {
            let secret = base64::engine::general_purpose::STANDARD
                .decode(&key.secret)
                .map_err(|e| format!("could not obtain secret for named key {}: {e}", key.name))?;
            let made = make(&secret).ok_or_else(|| {
                format!(
                    "error while creating cipher for named key {}: invalid key size {}",
                    key.name,
                    secret.len()
                )
            })?;
            Ok((key.name.clone(), made))
        })
        .collect()
}

/// The first key whose `name:` prefixes `data` and opens it; `None` when no name matched.
fn by_key<T>(
    keys: &[(String, T)],
    data: &[u8],
    open: impl Fn(&T, &[u8]) -> Result<Vec<u8>, String>,
) -> Option<Result<Read, String>> {
    let mut errors = Vec::new();
    for (i, (name, cipher)) in keys.iter().enumerate() {
        let rest = data.strip_prefix(name.as_bytes()).and_then(|rest| rest.strip_prefix(b":"));
        let Some(rest) = rest else { continue };
        match open(cipher, rest) {
            Ok(plain) => return Some(Ok(Read { data: plain.into(), stale: i != 0 })),
            Err(error) => errors.push(error),
        }
    }
    (!errors.is_empty()).then(|| Err(reduce(errors)))
}

impl Gcm {
    fn seal(&self, nonce: &[u8], data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
        let payload = Payload { msg: data, aad };
        let sealed = match self {
            Gcm::Aes128(c) => c.encrypt(nonce.into(), payload),
            Gcm::Aes192(c) => c.encrypt(nonce.into(), payload),
            Gcm::Aes256(c) => c.encrypt(nonce.into(), payload),
        };
        sealed.map_err(|_| "cipher: sealing failed".to_owned())
    }
}

fn gcm_open(cipher: &Gcm, data: &[u8], key: &str) -> Result<Vec<u8>, String> {
    if data.len() < GCM_NONCE {
        return Err("the stored data was shorter than the required size".into());
    }
    let (nonce, sealed) = data.split_at(GCM_NONCE);
    let payload = Payload { msg: sealed, aad: key.as_bytes() };
    let opened = match cipher {
        Gcm::Aes128(c) => c.decrypt(nonce.into(), payload),
        Gcm::Aes192(c) => c.decrypt(nonce.into(), payload),
        Gcm::Aes256(c) => c.decrypt(nonce.into(), payload),
    };
    opened.map_err(|_| "cipher: message authentication failed".to_owned())
}

impl Cbc {
    fn encrypt(&self, iv: &[u8], mut plain: Vec<u8>) -> Vec<u8> {
        let len = plain.len();
        let done = match self {
            Cbc::Aes128(k) => cbc::Encryptor::<aes::Aes128>::new(k.into(), iv.into())
                .encrypt_padded_mut::<NoPadding>(&mut plain, len)
                .map(<[u8]>::len),
            Cbc::Aes192(k) => cbc::Encryptor::<aes::Aes192>::new(k.into(), iv.into())
                .encrypt_padded_mut::<NoPadding>(&mut plain, len)
                .map(<[u8]>::len),
            Cbc::Aes256(k) => cbc::Encryptor::<aes::Aes256>::new(k.into(), iv.into())
                .encrypt_padded_mut::<NoPadding>(&mut plain, len)
                .map(<[u8]>::len),
        };
        // The caller padded to whole blocks, so the cipher cannot refuse.
        debug_assert_eq!(done.ok(), Some(len));
        plain
    }
}

fn cbc_open(cipher: &Cbc, data: &[u8]) -> Result<Vec<u8>, String> {
    if data.len() < AES_BLOCK {
        return Err("the stored data was shorter than the required size".into());
    }
    let (iv, sealed) = data.split_at(AES_BLOCK);
    if !sealed.len().is_multiple_of(AES_BLOCK) {
        return Err("the stored data is not a multiple of the block size".into());
    }
    let mut plain = sealed.to_vec();
    let opened = match cipher {
        Cbc::Aes128(k) => cbc::Decryptor::<aes::Aes128>::new(k.into(), iv.into())
            .decrypt_padded_mut::<NoPadding>(&mut plain)
            .is_ok(),
        Cbc::Aes192(k) => cbc::Decryptor::<aes::Aes192>::new(k.into(), iv.into())
            .decrypt_padded_mut::<NoPadding>(&mut plain)
            .is_ok(),
        Cbc::Aes256(k) => cbc::Decryptor::<aes::Aes256>::new(k.into(), iv.into())
            .decrypt_padded_mut::<NoPadding>(&mut plain)
            .is_ok(),
    };
    let padding = plain.last().copied().unwrap_or(0);
    if !opened || padding == 0 || usize::from(padding) > plain.len() {
        return Err("invalid PKCS7 data (empty or not padded)".into());
    }
    let size = plain.len() - usize::from(padding);
    if plain[size..].iter().any(|&b| b != padding) {
        return Err("invalid padding on input".into());
    }
    plain.truncate(size);
    Ok(plain)
}

fn secretbox_open(cipher: &XSalsa20Poly1305, data: &[u8]) -> Result<Vec<u8>, String> {
    if data.len() < SECRETBOX_OVERHEAD + SECRETBOX_NONCE {
        return Err("the stored data was shorter than the required size".into());
    }
    let (nonce, sealed) = data.split_at(SECRETBOX_NONCE);
    // upstream's words for a box that does not open.
    cipher
        .decrypt(nonce.into(), sealed)
        .map_err(|_| "output array was not large enough for encryption".to_owned())
}

fn header(prefix: &str, name: &str, rest: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + name.len() + 1 + rest);
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(name.as_bytes());
    out.push(b':');
    out
}

fn random(len: usize) -> Result<Vec<u8>, String> {
    let mut bytes = vec![0; len];
    SystemRandom::new().fill(&mut bytes).map_err(|_| "unable to read sufficient random bytes".to_owned())?;
    Ok(bytes)
}

/// utilerrors.Reduce(NewAggregate(errors)).Error(): one error as itself, several as `[a, b]`.
fn reduce(mut errors: Vec<String>) -> String {
    if errors.len() == 1 { errors.remove(0) } else { format!("[{}]", errors.join(", ")) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encryption::config::EncryptionConfiguration;

    const K16: &str = "MTIzNDU2Nzg5MDEyMzQ1Ng=="; // "1234567890123456"
    const K24: &str = "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0"; // 24 bytes
    const K32: &str = "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTI="; // 32 bytes
    const OTHER32: &str = "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXphYmNkZWY=";

    fn transformer(providers: &str) -> Transformer {
        let yaml = format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n{providers}"
        );
        let config = EncryptionConfiguration::parse(yaml.as_bytes()).unwrap();
        assert!(config.validate().is_empty(), "{:?}", config.validate());
        Transformer::new(&config.resources[0].providers).unwrap()
    }

    const KEY: &str = "/registry/secrets/default/s";

    #[test]
    fn every_provider_round_trips_and_reads_what_it_wrote() {
        let data = Bytes::from_static(br#"{"kind":"Secret","data":{"a":"aHVudGVyMg=="}}"#);
        for (provider, prefix) in [
            (format!("  - aesgcm: {{keys: [{{name: k1, secret: {K16}}}]}}\n"), "k8s:enc:aesgcm:v1:k1:"),
            (format!("  - aesgcm: {{keys: [{{name: k1, secret: {K24}}}]}}\n"), "k8s:enc:aesgcm:v1:k1:"),
            (format!("  - aesgcm: {{keys: [{{name: k1, secret: {K32}}}]}}\n"), "k8s:enc:aesgcm:v1:k1:"),
            (format!("  - aescbc: {{keys: [{{name: c, secret: {K32}}}]}}\n"), "k8s:enc:aescbc:v1:c:"),
            (format!("  - secretbox: {{keys: [{{name: s, secret: {K32}}}]}}\n"), "k8s:enc:secretbox:v1:s:"),
            ("  - identity: {}\n".to_owned(), ""),
        ] {
            let t = transformer(&provider);
            let stored = t.to_storage(&data, KEY).unwrap();
            assert!(stored.starts_with(prefix.as_bytes()), "{provider}");
            if !prefix.is_empty() {
                assert!(!stored.windows(8).any(|w| w == b"aHVudGVy"), "{provider}: plaintext stored");
            }
            assert_eq!(t.from_storage(&stored, KEY).unwrap(), Read { data: data.clone(), stale: false });
        }
    }

    #[test]
    fn aesgcm_binds_the_value_to_its_key() {
        let t = transformer(&format!("  - aesgcm: {{keys: [{{name: k1, secret: {K32}}}]}}\n"));
        let stored = t.to_storage(&Bytes::from_static(b"{}"), KEY).unwrap();
        assert_eq!(
            t.from_storage(&stored, "/registry/secrets/default/other").unwrap_err(),
            "cipher: message authentication failed"
        );
    }

    #[test]
    fn rotation_reads_old_keys_as_stale() {
        let old = transformer(&format!("  - aesgcm: {{keys: [{{name: k1, secret: {K32}}}]}}\n"));
        let stored = old.to_storage(&Bytes::from_static(b"{}"), KEY).unwrap();
        let rotated = transformer(&format!(
            "  - aesgcm: {{keys: [{{name: k2, secret: {OTHER32}}}, {{name: k1, secret: {K32}}}]}}\n"
        ));
        assert!(rotated.from_storage(&stored, KEY).unwrap().stale);
        let rewritten = rotated.to_storage(&Bytes::from_static(b"{}"), KEY).unwrap();
        assert!(rewritten.starts_with(b"k8s:enc:aesgcm:v1:k2:"));
        assert!(!rotated.from_storage(&rewritten, KEY).unwrap().stale);
        // Plain data under an encrypting first provider is read by identity, stale.
        let migrating = transformer(&format!(
            "  - aesgcm: {{keys: [{{name: k1, secret: {K32}}}]}}\n  - identity: {{}}\n"
        ));
        assert_eq!(
            migrating.from_storage(&Bytes::from_static(b"{}"), KEY).unwrap(),
            Read { data: Bytes::from_static(b"{}"), stale: true }
        );
        // Decrypting everything: identity first reads plain data fresh and encrypted data stale.
        let decrypting = transformer(&format!(
            "  - identity: {{}}\n  - aesgcm: {{keys: [{{name: k1, secret: {K32}}}]}}\n"
        ));
        assert_eq!(
            decrypting.from_storage(&stored, KEY).unwrap(),
            Read { data: Bytes::from_static(b"{}"), stale: true }
        );
        assert!(!decrypting.from_storage(&Bytes::from_static(b"{}"), KEY).unwrap().stale);
    }

    #[test]
    fn unreadable_values_fail_with_upstreams_words() {
        let gcm = transformer(&format!("  - aesgcm: {{keys: [{{name: k1, secret: {K32}}}]}}\n"));
        assert_eq!(
            gcm.from_storage(&Bytes::from_static(b"{}"), KEY).unwrap_err(),
            "no matching prefix found"
        );
        assert_eq!(
            gcm.from_storage(&Bytes::from_static(b"k8s:enc:aesgcm:v1:k9:abc"), KEY).unwrap_err(),
            "no matching key was found for the provided AES transformer"
        );
        assert_eq!(
            gcm.from_storage(&Bytes::from_static(b"k8s:enc:aesgcm:v1:k1:abc"), KEY).unwrap_err(),
            "the stored data was shorter than the required size"
        );
        let identity = transformer("  - identity: {}\n");
        assert_eq!(
            identity.from_storage(&Bytes::from_static(b"k8s:enc:aesgcm:v1:k1:abc"), KEY).unwrap_err(),
            "no matching prefix found"
        );
        let sb = transformer(&format!("  - secretbox: {{keys: [{{name: s, secret: {K32}}}]}}\n"));
        let mut stored = sb.to_storage(&Bytes::from_static(b"{}"), KEY).unwrap().to_vec();
        *stored.last_mut().unwrap() ^= 1;
        assert_eq!(
            sb.from_storage(&stored.into(), KEY).unwrap_err(),
            "output array was not large enough for encryption"
        );
        let cbc = transformer(&format!("  - aescbc: {{keys: [{{name: c, secret: {K16}}}]}}\n"));
        assert_eq!(
            cbc.from_storage(&Bytes::from(format!("k8s:enc:aescbc:v1:c:{}", "x".repeat(20))), KEY)
                .unwrap_err(),
            "the stored data is not a multiple of the block size"
        );
    }

    #[test]
    fn a_secretbox_value_is_nacls() {
        // NaCl's secretbox: nonce, then the Poly1305 tag, then the XSalsa20 stream XOR the data.
        // The same key and nonce always give the same box; the tag comes first.
        let t = transformer(&format!("  - secretbox: {{keys: [{{name: s, secret: {K32}}}]}}\n"));
        let stored = t.to_storage(&Bytes::from_static(b"hello"), KEY).unwrap();
        let body = &stored[b"k8s:enc:secretbox:v1:s:".len()..];
        assert_eq!(body.len(), SECRETBOX_NONCE + SECRETBOX_OVERHEAD + 5);
    }
}
