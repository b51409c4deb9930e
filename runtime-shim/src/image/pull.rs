//! Pulls from registries through oci-client: the manifest (or index, then the manifest of this
//! platform, chosen as containerd does), the config and the layers into the content store, each blob's
//! digest verified before it is renamed into place; then the layers are unpacked into snapshots and
//! the image recorded.
//!
//! Registries are reached over HTTPS, except those given as `--insecure-registry`, over plain HTTP.
//! A registry with mirrors (`--registry-mirror REGISTRY=URL`) is tried at each mirror in order, then
//! at the registry itself, as containerd's registry mirrors are; each attempt is a whole pull, and the
//! last endpoint's error is the pull's. Mirrors get the request with `?ns=REGISTRY` (containerd's
//! convention) and no credentials: a pull's credentials are the registry's own.
//! Credentials come from the CRI's `AuthConfig`: `username`/`password`, `auth` (base64 of
//! `user:password`), or `registry_token` (a bearer token). An `identity_token` (an OAuth2 refresh token
//! that containerd exchanges at the registry's token endpoint) is refused: oci-client has no such
//! exchange.

use std::sync::Once;

use base64::Engine as _;
use futures::StreamExt as _;
use k8s_cri::v1 as api;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::manifest::{
    IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference as OciReference};
use sha2::Digest as _;
use tokio::io::AsyncWriteExt as _;

use super::reference::Reference;
use super::store::ImageStore;
use super::{Image, ImageError, hex, sha256_digest, unpack};

/// The manifest media types asked for.
const MANIFEST_TYPES: &[&str] = &[
    OCI_IMAGE_MEDIA_TYPE,
    OCI_IMAGE_INDEX_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE,
    IMAGE_MANIFEST_LIST_MEDIA_TYPE,
];

/// Installs rustls's ring provider as the process default, once (oci-client is built without one).
fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Fails only if another provider is installed already, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// The registry credentials of a CRI `AuthConfig`.
fn registry_auth(auth: Option<&api::AuthConfig>) -> Result<RegistryAuth, ImageError> {
    let Some(auth) = auth else { return Ok(RegistryAuth::Anonymous) };
    if !auth.username.is_empty() {
        return Ok(RegistryAuth::Basic(auth.username.clone(), auth.password.clone()));
    }
    if !auth.auth.is_empty() {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.auth.trim())
            .map_err(|e| ImageError::Invalid(format!("the auth field is not base64: {e}")))?;
        let decoded = String::from_utf8(decoded)
            .map_err(|_| ImageError::Invalid("the auth field is not UTF-8 user:password".to_owned()))?;
        let (user, password) = decoded
            .split_once(':')
            .ok_or_else(|| ImageError::Invalid("the auth field is not base64 of user:password".to_owned()))?;
        return Ok(RegistryAuth::Basic(user.to_owned(), password.to_owned()));
    }
    if !auth.registry_token.is_empty() {
        return Ok(RegistryAuth::Bearer(auth.registry_token.clone()));
    }
    if !auth.identity_token.is_empty() {
        return Err(ImageError::Invalid(
            "identity tokens (OAuth2 refresh tokens) are not supported; send username and password or a registry token"
                .to_owned(),
        ));
    }
    Ok(RegistryAuth::Anonymous)
}

/// A registry failure as an [`ImageError`]: NotFound for unknown manifests and blobs (as containerd
/// answers), Registry otherwise.
fn registry_error(what: &str, e: &OciDistributionError) -> ImageError {
    let not_found = match e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::ServerError { code, .. } => *code == 404,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|err| {
            let code = format!("{:?}", err.code);
            code.contains("Unknown") && !code.contains("NameUnknown")
        }),
        _ => false,
    };
    // oci-client's Display of a request error hides its cause (TLS, connection refused).
    let mut message = format!("{what}: {e}");
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    if not_found { ImageError::NotFound(message) } else { ImageError::Registry(message) }
}

/// The Go name of this machine's architecture (what image platforms name).
#[must_use]
pub(crate) fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        "loongarch64" => "loong64",
        other => other,
    }
}

/// Whether `manifest` (JSON) is an index (an OCI index or a Docker manifest list).
pub(crate) fn is_index(manifest: &[u8]) -> Result<bool, ImageError> {
    let value: serde_json::Value = serde_json::from_slice(manifest)
        .map_err(|e| ImageError::Invalid(format!("the manifest is not JSON: {e}")))?;
    let media_type = value.get("mediaType").and_then(|m| m.as_str()).unwrap_or_default();
    Ok(media_type == OCI_IMAGE_INDEX_MEDIA_TYPE
        || media_type == IMAGE_MANIFEST_LIST_MEDIA_TYPE
        || (value.get("manifests").is_some() && value.get("layers").is_none()))
}

/// The digest of the manifest for linux on this machine's architecture in the index `index` (JSON), as
/// containerd's default platform matcher picks: the first entry whose os is linux and whose
/// architecture is this machine's (for arm64, variant v8 or none).
pub(crate) fn select_platform(index: &[u8]) -> Result<String, ImageError> {
    let index: oci_spec::image::ImageIndex =
        serde_json::from_slice(index).map_err(|e| ImageError::Invalid(format!("the image index: {e}")))?;
    let arch = host_arch();
    index
        .manifests()
        .iter()
        .find(|m| {
            m.platform().as_ref().is_some_and(|p| {
                p.os().to_string() == "linux"
                    && p.architecture().to_string() == arch
                    && (arch != "arm64" || p.variant().as_deref().is_none_or(|v| v == "v8"))
            })
        })
        .map(|m| m.digest().to_string())
        .ok_or_else(|| {
            ImageError::NotFound(format!("no manifest for platform linux/{arch} in the image index"))
        })
}

/// A mirror of a registry (`--registry-mirror REGISTRY=URL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryMirror {
    /// The registry mirrored, as image references name it (`registry.k8s.io`, `127.0.0.1:5000`).
    pub registry: String,
    /// The mirror's `host[:port]`.
    pub host: String,
    /// Reached over plain HTTP (an `http://` URL).
    pub plain_http: bool,
}

/// Pulls `reference` into `store`: from each of its registry's mirrors in turn, then from the registry.
pub(super) async fn pull(
    store: &ImageStore,
    reference: &Reference,
    auth: Option<&api::AuthConfig>,
) -> Result<Image, ImageError> {
    install_crypto_provider();
    let auth = registry_auth(auth)?;
    let mut insecure = store.insecure().to_vec();
    let mirrors: Vec<&RegistryMirror> =
        store.mirrors().iter().filter(|m| m.registry == reference.registry).collect();
    insecure.extend(mirrors.iter().filter(|m| m.plain_http).map(|m| m.host.clone()));
    let client = Client::new(ClientConfig {
        protocol: ClientProtocol::HttpsExcept(insecure),
        platform_resolver: None,
        ..ClientConfig::default()
    });
    for mirror in &mirrors {
        match pull_from(store, &client, reference, Some(&mirror.host), &RegistryAuth::Anonymous).await {
            Ok(image) => return Ok(image),
            Err(e) => {
                tracing::info!(image = %reference, mirror = %mirror.host, error = %e, "mirror failed; trying the next endpoint");
            }
        }
    }
    pull_from(store, &client, reference, None, &auth).await
}

/// One pull of `reference` from `mirror`, or from its registry when `None`.
async fn pull_from(
    store: &ImageStore,
    client: &Client,
    reference: &Reference,
    mirror: Option<&str>,
    auth: &RegistryAuth,
) -> Result<Image, ImageError> {
    let mirrored = |mut r: OciReference| {
        if let Some(host) = mirror {
            r.set_mirror_registry(host.to_owned());
        }
        r
    };
    let at = |digest: &str| {
        mirrored(OciReference::with_digest(
            reference.registry.clone(),
            reference.repository.clone(),
            digest.to_owned(),
        ))
    };
    let top = match (&reference.digest, &reference.tag) {
        (Some(digest), _) => at(digest),
        (None, tag) => mirrored(OciReference::with_tag(
            reference.registry.clone(),
            reference.repository.clone(),
            tag.clone().unwrap_or_else(|| super::reference::DEFAULT_TAG.to_owned()),
        )),
    };
    let (bytes, _) = client
        .pull_manifest_raw(&top, auth, MANIFEST_TYPES)
        .await
        .map_err(|e| registry_error(&format!("fetching the manifest of {reference}"), &e))?;
    let top_digest = sha256_digest(&bytes);
    if let Some(expected) = &reference.digest
        && *expected != top_digest
    {
        return Err(ImageError::Digest {
            what: format!("the manifest of {reference}"),
            expected: expected.clone(),
            actual: top_digest,
        });
    }
    store.write_blob(&top_digest, &bytes, "manifest")?;
    let (index_digest, manifest_digest) = if is_index(&bytes)? {
        let chosen = select_platform(&bytes)?;
        if !store.has_blob(&chosen) {
            let (manifest, _) = client
                .pull_manifest_raw(&at(&chosen), auth, MANIFEST_TYPES)
                .await
                .map_err(|e| registry_error(&format!("fetching manifest {chosen} of {reference}"), &e))?;
            store.write_blob(&chosen, &manifest, &format!("manifest {chosen}"))?;
        }
        (Some(top_digest.clone()), chosen)
    } else {
        (None, top_digest.clone())
    };
    let manifest = unpack::parse_manifest(&store.read_blob(&manifest_digest)?, &manifest_digest)?;
    let config_digest = manifest.config().digest().to_string();
    fetch_blob(store, client, &at(&config_digest), &config_digest).await?;
    let layers = manifest.layers().iter().map(|l| {
        let digest = l.digest().to_string();
        let at = &at;
        async move { fetch_blob(store, client, &at(&digest), &digest).await }
    });
    futures::future::try_join_all(layers).await?;
    let mut names = Vec::new();
    let name = reference.name();
    if reference.digest.is_none()
        && let Some(tag) = &reference.tag
    {
        names.push(format!("{name}:{tag}"));
    }
    names.push(format!("{name}@{top_digest}"));
    let store = store.clone();
    tokio::task::spawn_blocking(move || unpack::build_image(&store, index_digest, &manifest_digest, &names))
        .await
        .map_err(|e| ImageError::Io(format!("the unpack task failed: {e}")))?
}

/// Downloads blob `digest` into the store unless it is there: into a temporary file, hashed on the way,
/// renamed into place only if the digest matches.
async fn fetch_blob(
    store: &ImageStore,
    client: &Client,
    reference: &OciReference,
    digest: &str,
) -> Result<(), ImageError> {
    if store.has_blob(digest) {
        return Ok(());
    }
    super::sha256_hex(digest)?;
    let temp = store.blob_temp();
    let result = async {
        let mut stream = client
            .pull_blob_stream(reference, digest)
            .await
            .map_err(|e| registry_error(&format!("fetching blob {digest}"), &e))?;
        let mut file = tokio::fs::File::create(&temp)
            .await
            .map_err(|e| ImageError::io(format!("creating {}", temp.display()), e))?;
        let mut hasher = sha2::Sha256::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                if e.to_string().contains("igest") {
                    ImageError::Digest {
                        what: format!("blob {digest}"),
                        expected: digest.to_owned(),
                        actual: e.to_string(),
                    }
                } else {
                    ImageError::Registry(format!("fetching blob {digest}: {e}"))
                }
            })?;
            hasher.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(|e| ImageError::io(format!("writing {}", temp.display()), e))?;
        }
        file.sync_all().await.map_err(|e| ImageError::io(format!("writing {}", temp.display()), e))?;
        let actual = format!("sha256:{}", hex(&hasher.finalize()));
        if actual != digest {
            return Err(ImageError::Digest {
                what: format!("blob {digest}"),
                expected: digest.to_owned(),
                actual,
            });
        }
        store.commit_blob(&temp, digest)
    }
    .await;
    if result.is_err() {
        let _ = tokio::fs::remove_file(&temp).await;
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_from_auth_config() {
        let auth = |a: api::AuthConfig| registry_auth(Some(&a));
        assert!(matches!(registry_auth(None), Ok(RegistryAuth::Anonymous)));
        let given = api::AuthConfig { username: "u".into(), password: "p".into(), ..Default::default() };
        assert!(matches!(auth(given), Ok(RegistryAuth::Basic(u, p)) if u == "u" && p == "p"));
        let encoded = api::AuthConfig { auth: "dTpwOmFzcw==".into(), ..Default::default() };
        assert!(matches!(auth(encoded), Ok(RegistryAuth::Basic(u, p)) if u == "u" && p == "p:ass"));
        let token = api::AuthConfig { registry_token: "t".into(), ..Default::default() };
        assert!(matches!(auth(token), Ok(RegistryAuth::Bearer(t)) if t == "t"));
        let bad = api::AuthConfig { auth: "not base64!".into(), ..Default::default() };
        assert!(matches!(auth(bad), Err(ImageError::Invalid(_))));
        let identity = api::AuthConfig { identity_token: "refresh".into(), ..Default::default() };
        assert!(matches!(auth(identity), Err(ImageError::Invalid(_))));
    }

    #[test]
    fn platform_selection() {
        let index = |entries: &[(&str, &str, Option<&str>)]| {
            let manifests: Vec<serde_json::Value> = entries
                .iter()
                .enumerate()
                .map(|(i, (os, arch, variant))| {
                    let mut platform = serde_json::json!({ "os": os, "architecture": arch });
                    if let Some(v) = variant {
                        platform["variant"] = serde_json::json!(v);
                    }
                    serde_json::json!({
                        "mediaType": OCI_IMAGE_MEDIA_TYPE,
                        "digest": format!("sha256:{}", format!("{i}").repeat(64)),
                        "size": 1,
                        "platform": platform,
                    })
                })
                .collect();
            serde_json::json!({ "schemaVersion": 2, "manifests": manifests }).to_string()
        };
        let arch = host_arch();
        let multi = index(&[("windows", arch, None), ("linux", "s390x", None), ("linux", arch, None)]);
        assert!(is_index(multi.as_bytes()).unwrap());
        assert_eq!(select_platform(multi.as_bytes()).unwrap(), format!("sha256:{}", "2".repeat(64)));
        let none = index(&[("linux", "s390x", None)]);
        assert!(matches!(select_platform(none.as_bytes()), Err(ImageError::NotFound(_))));
        assert!(!is_index(br#"{"schemaVersion":2,"config":{},"layers":[]}"#).unwrap());
    }
}
