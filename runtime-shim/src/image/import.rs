//! `keel-shim import`: images from an OCI image layout directory, or from an archive (a tar) holding
//! an OCI image layout (`skopeo copy ... oci-archive:`) or a Docker image (`docker save`), for nodes
//! without a registry.
//!
//! Names: an OCI layout's manifests are named by their `io.containerd.image.name` annotation, else by
//! `org.opencontainers.image.ref.name` when that is a full reference (`registry/repo:tag`), else (a
//! bare tag, as skopeo writes) `<base name>:<tag>` when a base name is given; a Docker archive's by
//! its `RepoTags`. Each image also gets the repo digest `<name>@<manifest or index digest>`, as
//! containerd reports for imported images. Every blob is copied into the content store with its
//! digest verified; layers are unpacked as pulled ones are.
//!
//! The store of a running keel-shim sees imported images on its next lookup miss or list; run
//! imports while no RemoveImage is collecting (a collection in the server does not know of an
//! import in another process).

use std::io::{Read, Write as _};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sha2::Digest as _;

use super::pull::{is_index, select_platform};
use super::reference::Reference;
use super::store::{ImageStore, temp_name};
use super::{Image, ImageError, hex, sha256_hex, unpack};

const REF_NAME: &str = "org.opencontainers.image.ref.name";
const CONTAINERD_NAME: &str = "io.containerd.image.name";

impl ImageStore {
    /// Imports the images of the OCI layout directory or archive at `path`; `base_name` names images
    /// whose layout gives only a tag. Returns the images imported.
    ///
    /// # Errors
    /// [`ImageError::Invalid`] for something that is neither; digest and store errors.
    pub async fn import(&self, path: &Path, base_name: Option<&str>) -> Result<Vec<Image>, ImageError> {
        let _writing = self.writing().await;
        let store = self.clone();
        let path = path.to_owned();
        let base_name = base_name.map(str::to_owned);
        tokio::task::spawn_blocking(move || import_blocking(&store, &path, base_name.as_deref()))
            .await
            .map_err(|e| ImageError::Io(format!("the import task failed: {e}")))?
    }
}

fn import_blocking(
    store: &ImageStore,
    path: &Path,
    base_name: Option<&str>,
) -> Result<Vec<Image>, ImageError> {
    let meta = std::fs::metadata(path).map_err(|e| ImageError::io(format!("{}", path.display()), e))?;
    if meta.is_dir() {
        return import_dir(store, path, base_name);
    }
    let scratch = store.root().join("content").join(temp_name());
    let result = (|| {
        std::fs::create_dir_all(&scratch)
            .map_err(|e| ImageError::io(format!("creating {}", scratch.display()), e))?;
        let file = std::fs::File::open(path)
            .map_err(|e| ImageError::io(format!("opening {}", path.display()), e))?;
        let mut archive = tar::Archive::new(file);
        archive
            .unpack(&scratch)
            .map_err(|e| ImageError::Invalid(format!("{}: not a tar archive: {e}", path.display())))?;
        import_dir(store, &scratch, base_name)
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

fn import_dir(store: &ImageStore, dir: &Path, base_name: Option<&str>) -> Result<Vec<Image>, ImageError> {
    if dir.join("index.json").is_file() {
        import_layout(store, dir, base_name)
    } else if dir.join("manifest.json").is_file() {
        import_docker(store, dir)
    } else {
        Err(ImageError::Invalid(format!(
            "{}: neither an OCI image layout (index.json) nor a Docker archive (manifest.json)",
            dir.display()
        )))
    }
}

fn read_json(path: &Path) -> Result<Value, ImageError> {
    let bytes = std::fs::read(path).map_err(|e| ImageError::io(format!("reading {}", path.display()), e))?;
    serde_json::from_slice(&bytes).map_err(|e| ImageError::Invalid(format!("{}: {e}", path.display())))
}

/// Copies the file `src` into the store as blob `digest` (if missing), verifying the digest.
fn copy_blob(store: &ImageStore, src: &Path, digest: &str) -> Result<(), ImageError> {
    sha256_hex(digest)?;
    if store.has_blob(digest) {
        return Ok(());
    }
    let temp = store.blob_temp();
    let result = (|| {
        let actual = copy_hashing(src, &temp)?;
        if actual != digest {
            return Err(ImageError::Digest {
                what: format!("{}", src.display()),
                expected: digest.to_owned(),
                actual,
            });
        }
        store.commit_blob(&temp, digest)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// Copies `src` to `dest`, returning the digest of the bytes copied.
fn copy_hashing(src: &Path, dest: &Path) -> Result<String, ImageError> {
    let mut input =
        std::fs::File::open(src).map_err(|e| ImageError::io(format!("opening {}", src.display()), e))?;
    let mut output =
        std::fs::File::create(dest).map_err(|e| ImageError::io(format!("creating {}", dest.display()), e))?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = input.read(&mut buf).map_err(|e| ImageError::io(format!("reading {}", src.display()), e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        output.write_all(&buf[..n]).map_err(|e| ImageError::io(format!("writing {}", dest.display()), e))?;
    }
    output.sync_all().map_err(|e| ImageError::io(format!("writing {}", dest.display()), e))?;
    Ok(format!("sha256:{}", hex(&hasher.finalize())))
}

fn layout_blob(dir: &Path, digest: &str) -> Result<PathBuf, ImageError> {
    Ok(dir.join("blobs/sha256").join(sha256_hex(digest)?))
}

/// The names of an OCI layout's manifest descriptor `desc`.
fn layout_name(desc: &Value, base_name: Option<&str>) -> Result<Option<String>, ImageError> {
    let annotation = |key: &str| desc["annotations"][key].as_str().filter(|s| !s.is_empty());
    let full = match (annotation(CONTAINERD_NAME), annotation(REF_NAME)) {
        (Some(name), _) => name.to_owned(),
        (None, Some(name)) if name.contains('/') => name.to_owned(),
        (None, Some(tag)) => match base_name {
            Some(base) => format!("{base}:{tag}"),
            None => return Ok(None),
        },
        (None, None) => return Ok(None),
    };
    let reference = Reference::parse(&full)?;
    Ok(Some(reference.to_string()))
}

fn import_layout(store: &ImageStore, dir: &Path, base_name: Option<&str>) -> Result<Vec<Image>, ImageError> {
    let index = read_json(&dir.join("index.json"))?;
    let mut images = Vec::new();
    for desc in index["manifests"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let top = desc["digest"]
            .as_str()
            .ok_or_else(|| ImageError::Invalid("a descriptor without a digest".to_owned()))?;
        copy_blob(store, &layout_blob(dir, top)?, top)?;
        let bytes = store.read_blob(top)?;
        let (index_digest, manifest_digest) = if is_index(&bytes)? {
            let chosen = select_platform(&bytes)?;
            copy_blob(store, &layout_blob(dir, &chosen)?, &chosen)?;
            (Some(top.to_owned()), chosen)
        } else {
            (None, top.to_owned())
        };
        let manifest = unpack::parse_manifest(&store.read_blob(&manifest_digest)?, &manifest_digest)?;
        let config = manifest.config().digest().to_string();
        copy_blob(store, &layout_blob(dir, &config)?, &config)?;
        for layer in manifest.layers() {
            let digest = layer.digest().to_string();
            copy_blob(store, &layout_blob(dir, &digest)?, &digest)?;
        }
        let mut names = Vec::new();
        if let Some(name) = layout_name(desc, base_name)? {
            let repo = Reference::parse(&name)?.name();
            names.push(name);
            names.push(format!("{repo}@{top}"));
        }
        images.push(unpack::build_image(store, index_digest, &manifest_digest, &names)?);
    }
    Ok(images)
}

/// A file named inside a Docker archive, refused if it leads out of it.
fn inside(dir: &Path, name: &str) -> Result<PathBuf, ImageError> {
    if Path::new(name).components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
        return Err(ImageError::Invalid(format!("{name:?} is not a path inside the archive")));
    }
    Ok(dir.join(name))
}

fn import_docker(store: &ImageStore, dir: &Path) -> Result<Vec<Image>, ImageError> {
    let manifest = read_json(&dir.join("manifest.json"))?;
    let mut images = Vec::new();
    for entry in manifest.as_array().map(Vec::as_slice).unwrap_or_default() {
        let config_file = entry["Config"]
            .as_str()
            .ok_or_else(|| ImageError::Invalid("manifest.json: an entry without Config".to_owned()))?;
        let config_path = inside(dir, config_file)?;
        let config_bytes = std::fs::read(&config_path)
            .map_err(|e| ImageError::io(format!("reading {}", config_path.display()), e))?;
        let config_digest = super::sha256_digest(&config_bytes);
        store.write_blob(&config_digest, &config_bytes, "the image config")?;
        let mut layers = Vec::new();
        for layer in entry["Layers"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let file = inside(dir, layer.as_str().unwrap_or_default())?;
            let temp = store.blob_temp();
            let digest = copy_hashing(&file, &temp)?;
            let mut magic = [0u8; 2];
            let gzip = std::fs::File::open(&temp).and_then(|mut f| f.read_exact(&mut magic)).is_ok()
                && magic == [0x1f, 0x8b];
            let size = std::fs::metadata(&temp).map(|m| m.len()).unwrap_or_default();
            store.commit_blob(&temp, &digest)?;
            let media_type = if gzip {
                "application/vnd.oci.image.layer.v1.tar+gzip"
            } else {
                "application/vnd.oci.image.layer.v1.tar"
            };
            layers.push(json!({ "mediaType": media_type, "digest": digest, "size": size }));
        }
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config_bytes.len(),
            },
            "layers": layers,
        });
        let manifest_bytes = manifest.to_string().into_bytes();
        let manifest_digest = super::sha256_digest(&manifest_bytes);
        store.write_blob(&manifest_digest, &manifest_bytes, "the manifest")?;
        let mut names = Vec::new();
        for tag in entry["RepoTags"].as_array().map(Vec::as_slice).unwrap_or_default() {
            if let Some(tag) = tag.as_str() {
                let reference = Reference::parse(tag)?;
                names.push(reference.to_string());
                names.push(format!("{}@{manifest_digest}", reference.name()));
            }
        }
        names.dedup();
        images.push(unpack::build_image(store, None, &manifest_digest, &names)?);
    }
    Ok(images)
}
