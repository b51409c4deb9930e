//! The image store: content-addressed blobs, one record per image, lookups by id or name as
//! containerd's CRI plugin resolves them, pulls coalesced per reference, removal and garbage collection.
//!
//! Garbage collection runs after every removal: blobs and snapshots that no image record references
//! are deleted, except snapshots an overlay mount still uses as a lower directory (read from
//! `/proc/self/mountinfo`, so a container's mounted root filesystem keeps its layers whatever
//! happened to the image, as containerd's snapshot leases do, and also across a keel-shim restart)
//! and snapshots the container module declares in use ([`ImageStore::in_use`]: containers whose root
//! filesystem is not mounted, e.g. created or exited ones).
//! Pulls and imports hold the store's collection lock shared while they write, a collection holds it
//! exclusively, so a collection never deletes what a pull has written but not yet recorded.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use futures::FutureExt as _;
use futures::future::{BoxFuture, Shared};
use k8s_cri::v1 as api;
use oci_spec::image::ImageConfiguration;
use serde::{Deserialize, Serialize};

use super::pull::RegistryMirror;
use super::reference::Reference;
use super::{ImageError, pull, sha256_digest, sha256_hex};

/// One image's record, `DIR/images/<config hex>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// `sha256:<config digest hex>`.
    pub id: String,
    /// Normalized `name:tag` references.
    pub repo_tags: Vec<String>,
    /// Normalized `name@sha256:<hex>` references (the digest of the manifest or index pulled).
    pub repo_digests: Vec<String>,
    /// The digest of the platform's image manifest.
    pub manifest_digest: String,
    /// The digest of the index the manifest was selected from, if any.
    #[serde(default)]
    pub index_digest: Option<String>,
    /// The digest of the image config.
    pub config_digest: String,
    /// The digests of the layer blobs, bottom first.
    pub layer_digests: Vec<String>,
    /// The digests of the uncompressed layers (the config's `rootfs.diff_ids`), bottom first.
    pub diff_ids: Vec<String>,
    /// The chain ids of the layers, bottom first (each names a snapshot).
    pub chain_ids: Vec<String>,
    /// The size of the image's blobs (manifest, config and layers, as stored).
    pub size: u64,
}

/// An image as the rest of keel-shim uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    /// `sha256:<config digest hex>`.
    pub id: String,
    /// Normalized `name:tag` references.
    pub repo_tags: Vec<String>,
    /// Normalized `name@sha256:<hex>` references.
    pub repo_digests: Vec<String>,
    /// The size of the image's blobs.
    pub size: u64,
    /// The image config.
    pub config: ImageConfiguration,
    /// The snapshot directories of the layers (`DIR/snapshots/<chain id hex>/fs`), bottom first.
    pub layers: Vec<PathBuf>,
}

/// The image store; cheap to clone.
#[derive(Clone)]
pub struct ImageStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ImageStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageStore").field("root", &self.inner.root).finish_non_exhaustive()
    }
}

type PullFuture = Shared<BoxFuture<'static, Result<Image, ImageError>>>;

struct Inner {
    root: PathBuf,
    insecure: Vec<String>,
    mirrors: Vec<RegistryMirror>,
    images: RwLock<BTreeMap<String, Entry>>,
    pulls: Mutex<HashMap<String, PullFuture>>,
    gc: tokio::sync::RwLock<()>,
    /// Snapshot directories containers use, as [`ImageStore::in_use`] last set them.
    held: Mutex<HashSet<PathBuf>>,
}

#[derive(Clone)]
struct Entry {
    record: Record,
    config: ImageConfiguration,
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name for a temporary file or directory unique in this process and among processes.
pub(crate) fn temp_name() -> String {
    format!(".tmp-{}-{}", std::process::id(), TEMP_COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Writes `bytes` to `path` through a temporary file beside it and a rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ImageError> {
    let dir = path.parent().ok_or_else(|| ImageError::Io(format!("{} has no parent", path.display())))?;
    let temp = dir.join(temp_name());
    let written = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(ImageError::io(format!("writing {}", path.display()), e));
    }
    Ok(())
}

impl ImageStore {
    /// Opens (creating its directories) the store under `root` (keel-shim's `--root`), reloading the
    /// image records and removing leftovers of interrupted writes. `insecure` lists the registries
    /// (`host:port`) pulled from over plain HTTP.
    ///
    /// # Errors
    /// [`ImageError::Io`] when the directories cannot be made or read.
    pub fn open(root: &Path, insecure: &[String]) -> Result<ImageStore, ImageError> {
        ImageStore::open_with_mirrors(root, insecure, &[])
    }

    /// [`ImageStore::open`], pulling the images of each mirrored registry from its mirrors first.
    ///
    /// # Errors
    /// As [`ImageStore::open`].
    pub fn open_with_mirrors(
        root: &Path,
        insecure: &[String],
        mirrors: &[RegistryMirror],
    ) -> Result<ImageStore, ImageError> {
        let store = ImageStore {
            inner: Arc::new(Inner {
                root: root.to_owned(),
                insecure: insecure.to_vec(),
                mirrors: mirrors.to_vec(),
                images: RwLock::new(BTreeMap::new()),
                pulls: Mutex::new(HashMap::new()),
                gc: tokio::sync::RwLock::new(()),
                held: Mutex::new(HashSet::new()),
            }),
        };
        for dir in [store.blobs_dir(), store.records_dir(), store.snapshots_dir()] {
            std::fs::create_dir_all(&dir)
                .map_err(|e| ImageError::io(format!("creating {}", dir.display()), e))?;
            remove_temps(&dir);
        }
        let mut images = BTreeMap::new();
        let dir = store.records_dir();
        let entries =
            std::fs::read_dir(&dir).map_err(|e| ImageError::io(format!("reading {}", dir.display()), e))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            match store.load_record(&path) {
                Ok(loaded) => {
                    images.insert(loaded.record.id.clone(), loaded);
                }
                // A record whose content is gone cannot be served; it is skipped, not fatal.
                Err(e) => {
                    tracing::warn!(record = %path.display(), error = %e, "skipping an unusable image record");
                }
            }
        }
        *store.inner.images.write().map_err(|_| poisoned())? = images;
        Ok(store)
    }

    fn load_record(&self, path: &Path) -> Result<Entry, ImageError> {
        let bytes =
            std::fs::read(path).map_err(|e| ImageError::io(format!("reading {}", path.display()), e))?;
        let record: Record = serde_json::from_slice(&bytes)
            .map_err(|e| ImageError::Invalid(format!("{}: {e}", path.display())))?;
        let config = self.read_config(&record.config_digest)?;
        Ok(Entry { record, config })
    }

    /// keel-shim's root directory.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The registries pulled from over plain HTTP.
    pub(crate) fn insecure(&self) -> &[String] {
        &self.inner.insecure
    }

    pub(crate) fn mirrors(&self) -> &[RegistryMirror] {
        &self.inner.mirrors
    }

    /// `DIR/content/blobs/sha256`.
    pub(crate) fn blobs_dir(&self) -> PathBuf {
        self.inner.root.join("content/blobs/sha256")
    }

    fn records_dir(&self) -> PathBuf {
        self.inner.root.join("images")
    }

    /// `DIR/snapshots`.
    #[must_use]
    pub fn snapshots_dir(&self) -> PathBuf {
        self.inner.root.join("snapshots")
    }

    /// The path of the blob `digest`.
    pub(crate) fn blob_path(&self, digest: &str) -> Result<PathBuf, ImageError> {
        Ok(self.blobs_dir().join(sha256_hex(digest)?))
    }

    /// Whether the blob `digest` is stored.
    pub(crate) fn has_blob(&self, digest: &str) -> bool {
        self.blob_path(digest).is_ok_and(|p| p.is_file())
    }

    /// A fresh temporary path in the blobs directory (renamed into place by [`Self::commit_blob`]).
    pub(crate) fn blob_temp(&self) -> PathBuf {
        self.blobs_dir().join(temp_name())
    }

    /// Moves the verified temporary file `temp` into place as blob `digest`.
    pub(crate) fn commit_blob(&self, temp: &Path, digest: &str) -> Result<(), ImageError> {
        let path = self.blob_path(digest)?;
        std::fs::rename(temp, &path).map_err(|e| {
            let _ = std::fs::remove_file(temp);
            ImageError::io(format!("storing blob {digest}"), e)
        })
    }

    /// Stores `bytes` as blob `digest` after checking the digest.
    pub(crate) fn write_blob(&self, digest: &str, bytes: &[u8], what: &str) -> Result<(), ImageError> {
        let actual = sha256_digest(bytes);
        if actual != digest {
            return Err(ImageError::Digest { what: what.to_owned(), expected: digest.to_owned(), actual });
        }
        let path = self.blob_path(digest)?;
        if path.is_file() {
            return Ok(());
        }
        write_atomic(&path, bytes)
    }

    /// The blob `digest`.
    pub(crate) fn read_blob(&self, digest: &str) -> Result<Vec<u8>, ImageError> {
        let path = self.blob_path(digest)?;
        std::fs::read(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                ImageError::NotFound(format!("blob {digest} is not in the store"))
            }
            _ => ImageError::io(format!("reading blob {digest}"), e),
        })
    }

    fn read_config(&self, digest: &str) -> Result<ImageConfiguration, ImageError> {
        let bytes = self.read_blob(digest)?;
        serde_json::from_slice(&bytes).map_err(|e| ImageError::Invalid(format!("image config {digest}: {e}")))
    }

    /// `DIR/snapshots/<chain id hex>`.
    pub(crate) fn snapshot_dir(&self, chain_id: &str) -> Result<PathBuf, ImageError> {
        Ok(self.snapshots_dir().join(sha256_hex(chain_id)?))
    }

    fn image(&self, entry: &Entry) -> Image {
        let layers = entry
            .record
            .chain_ids
            .iter()
            .filter_map(|c| self.snapshot_dir(c).ok())
            .map(|d| d.join("fs"))
            .collect();
        Image {
            id: entry.record.id.clone(),
            repo_tags: entry.record.repo_tags.clone(),
            repo_digests: entry.record.repo_digests.clone(),
            size: entry.record.size,
            config: entry.config.clone(),
            layers,
        }
    }

    /// Pulls `image` (a reference; normalized as containerd does) from its registry, unless a pull of
    /// the same reference is under way: then it waits for that one's result. Returns the image.
    ///
    /// # Errors
    /// [`ImageError::Reference`] for a malformed reference; registry, digest and store errors.
    pub async fn pull(&self, image: &str, auth: Option<&api::AuthConfig>) -> Result<Image, ImageError> {
        let reference = Reference::parse(image)?;
        let key = reference.to_string();
        let pulling = {
            let mut pulls = self.inner.pulls.lock().map_err(|_| poisoned())?;
            match pulls.get(&key) {
                Some(pulling) => pulling.clone(),
                None => {
                    let store = self.clone();
                    let auth = auth.cloned();
                    let task_key = key.clone();
                    // A task, so that a caller that gives up does not cancel the pull others wait for.
                    let task = tokio::spawn(async move {
                        let result = {
                            let _writing = store.inner.gc.read().await;
                            pull::pull(&store, &reference, auth.as_ref()).await
                        };
                        if result.is_err() {
                            // What the failed pull stored is referenced by no record: collect it.
                            let _collecting = store.inner.gc.write().await;
                            if let Err(e) = store.collect() {
                                tracing::warn!(error = %e, "collecting after a failed pull");
                            }
                        }
                        if let Ok(mut pulls) = store.inner.pulls.lock() {
                            pulls.remove(&task_key);
                        }
                        result
                    });
                    let pulling = async move {
                        task.await
                            .unwrap_or_else(|e| Err(ImageError::Io(format!("the pull task failed: {e}"))))
                    }
                    .boxed()
                    .shared();
                    pulls.insert(key, pulling.clone());
                    pulling
                }
            }
        };
        pulling.await
    }

    /// Holds the collection lock shared while an import writes.
    pub(crate) async fn writing(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.inner.gc.read().await
    }

    /// Records an image whose blobs and snapshots are all in place under `names` (normalized repo tags
    /// and digests). Tags move from any other image; an image left with no name is removed.
    pub(crate) fn commit(&self, mut record: Record, names: &[String]) -> Result<Image, ImageError> {
        let config = self.read_config(&record.config_digest)?;
        let mut images = self.inner.images.write().map_err(|_| poisoned())?;
        if let Some(old) = images.get(&record.id) {
            record.repo_tags = old.record.repo_tags.clone();
            record.repo_digests = old.record.repo_digests.clone();
        }
        for name in names {
            let list = if name.contains('@') { &mut record.repo_digests } else { &mut record.repo_tags };
            if !list.contains(name) {
                list.push(name.clone());
            }
        }
        let mut orphaned = Vec::new();
        for (id, other) in images.iter_mut() {
            if *id == record.id {
                continue;
            }
            let before = other.record.repo_tags.len() + other.record.repo_digests.len();
            other.record.repo_tags.retain(|t| !names.contains(t));
            other.record.repo_digests.retain(|d| !names.contains(d));
            let after = other.record.repo_tags.len() + other.record.repo_digests.len();
            if after == 0 {
                orphaned.push(id.clone());
            } else if after != before {
                self.write_record(&other.record)?;
            }
        }
        self.write_record(&record)?;
        for id in &orphaned {
            images.remove(id);
            self.remove_record(id)?;
        }
        let entry = Entry { record, config };
        let image = self.image(&entry);
        images.insert(entry.record.id.clone(), entry);
        Ok(image)
    }

    fn record_path(&self, id: &str) -> Result<PathBuf, ImageError> {
        Ok(self.records_dir().join(format!("{}.json", sha256_hex(id)?)))
    }

    fn write_record(&self, record: &Record) -> Result<(), ImageError> {
        let bytes = serde_json::to_vec_pretty(record)
            .map_err(|e| ImageError::Invalid(format!("encoding the record of {}: {e}", record.id)))?;
        write_atomic(&self.record_path(&record.id)?, &bytes)
    }

    fn remove_record(&self, id: &str) -> Result<(), ImageError> {
        let path = self.record_path(id)?;
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(ImageError::io(format!("removing {}", path.display()), e))
            }
            _ => Ok(()),
        }
    }

    /// The image `image` names: its id (`sha256:<hex>`), a unique prefix of the id's hex (with or without
    /// `sha256:`), a repo tag or a repo digest (normalized as containerd does: `busybox` is
    /// `docker.io/library/busybox:latest`).
    ///
    /// # Errors
    /// [`ImageError::NotFound`] when no image has that name.
    pub fn get(&self, image: &str) -> Result<Image, ImageError> {
        let found = {
            let images = self.inner.images.read().map_err(|_| poisoned())?;
            self.resolve(&images, image).map(|entry| self.image(entry))
        };
        match found {
            Err(ImageError::NotFound(_)) if self.load_new() => {
                let images = self.inner.images.read().map_err(|_| poisoned())?;
                self.resolve(&images, image).map(|entry| self.image(entry))
            }
            found => found,
        }
    }

    /// Loads the records written by another process (`keel-shim import`) since the store was
    /// opened; whether there were any.
    fn load_new(&self) -> bool {
        let Ok(entries) = std::fs::read_dir(self.records_dir()) else { return false };
        let Ok(mut images) = self.inner.images.write() else { return false };
        let mut loaded = false;
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else { continue };
            if path.extension().is_none_or(|e| e != "json") || images.contains_key(&format!("sha256:{stem}"))
            {
                continue;
            }
            if let Ok(new) = self.load_record(&path) {
                images.insert(new.record.id.clone(), new);
                loaded = true;
            }
        }
        loaded
    }

    /// The full record of `image` (resolved as [`Self::get`]).
    ///
    /// # Errors
    /// [`ImageError::NotFound`] when no image has that name.
    pub fn record(&self, image: &str) -> Result<Record, ImageError> {
        let images = self.inner.images.read().map_err(|_| poisoned())?;
        self.resolve(&images, image).map(|entry| entry.record.clone())
    }

    fn resolve<'a>(&self, images: &'a BTreeMap<String, Entry>, name: &str) -> Result<&'a Entry, ImageError> {
        let not_found = || ImageError::NotFound(format!("image {name:?} not found"));
        if name.is_empty() {
            return Err(not_found());
        }
        if let Some(entry) = images.get(name) {
            return Ok(entry);
        }
        if let Ok(mut reference) = Reference::parse(name) {
            if reference.digest.is_some() {
                reference.tag = None;
            }
            let normalized = reference.to_string();
            if let Some(entry) = images.values().find(|e| {
                e.record.repo_tags.contains(&normalized) || e.record.repo_digests.contains(&normalized)
            }) {
                return Ok(entry);
            }
        }
        // An id prefix, as containerd's digest set looks ids up.
        let hex = name.strip_prefix("sha256:").unwrap_or(name);
        if hex.is_empty() || hex.len() > 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(not_found());
        }
        let mut found = images.values().filter(|e| e.record.id["sha256:".len()..].starts_with(hex));
        match (found.next(), found.next()) {
            (Some(entry), None) => Ok(entry),
            (Some(_), Some(_)) => Err(ImageError::NotFound(format!("image id prefix {name:?} is ambiguous"))),
            _ => Err(not_found()),
        }
    }

    /// Every image, by id.
    #[must_use]
    pub fn list(&self) -> Vec<Image> {
        self.load_new();
        match self.inner.images.read() {
            Ok(images) => images.values().map(|e| self.image(e)).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Removes the image `image` names (all its names, as containerd's CRI RemoveImage does), then
    /// collects the blobs and snapshots no image references any more. Removing an image that does not
    /// exist succeeds.
    ///
    /// # Errors
    /// Store errors.
    pub async fn remove(&self, image: &str) -> Result<(), ImageError> {
        let _collecting = self.inner.gc.write().await;
        {
            let mut images = self.inner.images.write().map_err(|_| poisoned())?;
            let id = match self.resolve(&images, image) {
                Ok(entry) => entry.record.id.clone(),
                Err(ImageError::NotFound(_)) => return Ok(()),
                Err(e) => return Err(e),
            };
            self.remove_record(&id)?;
            images.remove(&id);
        }
        self.collect()
    }

    /// Sets the snapshot directories (`Image::layers` entries) containers use, mounted or not: the
    /// container module calls it with all of them whenever the set changes (after creating or removing
    /// a container, and once its records are restored). Collections keep these whatever happens to
    /// their images; snapshots the new set releases are collected at once unless a pull is writing
    /// (then at the next removal).
    pub fn in_use(&self, snapshots: HashSet<PathBuf>) {
        let released = match self.inner.held.lock() {
            Ok(mut held) => {
                let released = held.iter().any(|s| !snapshots.contains(s));
                *held = snapshots;
                released
            }
            Err(_) => return,
        };
        // `_collecting` holds the lock through the collection.
        if released
            && let Ok(_collecting) = self.inner.gc.try_write()
            && let Err(e) = self.collect()
        {
            tracing::warn!(error = %e, "collecting released snapshots");
        }
    }

    /// Deletes blobs and snapshots no record references and no overlay mount uses. The caller holds
    /// the collection lock exclusively.
    fn collect(&self) -> Result<(), ImageError> {
        let (blobs, snapshots) = {
            let images = self.inner.images.read().map_err(|_| poisoned())?;
            let mut blobs = HashSet::new();
            let mut snapshots = HashSet::new();
            for entry in images.values() {
                let r = &entry.record;
                for digest in r
                    .index_digest
                    .iter()
                    .chain([&r.manifest_digest, &r.config_digest])
                    .chain(&r.layer_digests)
                {
                    if let Ok(hex) = sha256_hex(digest) {
                        blobs.insert(hex.to_owned());
                    }
                }
                for chain in &r.chain_ids {
                    if let Ok(hex) = sha256_hex(chain) {
                        snapshots.insert(hex.to_owned());
                    }
                }
            }
            (blobs, snapshots)
        };
        let mut in_use = mounted_lowerdirs();
        in_use.extend(self.inner.held.lock().map_err(|_| poisoned())?.iter().cloned());
        let sweep = |dir: PathBuf, keep: &HashSet<String>, is_snapshot: bool| -> Result<(), ImageError> {
            let entries = std::fs::read_dir(&dir)
                .map_err(|e| ImageError::io(format!("reading {}", dir.display()), e))?;
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if keep.contains(&name) {
                    continue;
                }
                let path = entry.path();
                if is_snapshot && in_use.contains(&path.join("fs")) {
                    continue;
                }
                let removed = if is_snapshot && path.is_dir() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                };
                match removed {
                    Ok(()) => tracing::debug!(path = %path.display(), "collected"),
                    Err(e) => tracing::warn!(path = %path.display(), error = %e, "collecting"),
                }
            }
            Ok(())
        };
        sweep(self.blobs_dir(), &blobs, false)?;
        sweep(self.snapshots_dir(), &snapshots, true)
    }
}

/// The lower directories of the overlay mounts in this mount namespace.
fn mounted_lowerdirs() -> HashSet<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo").map(|m| lowerdirs_in(&m)).unwrap_or_default()
}

/// The lower directories of the overlay mounts in `mountinfo` (`/proc/self/mountinfo`'s text): from
/// `lowerdir=a:b` (mount(2)) and `lowerdir+=a` options (the new mount API's, one per layer).
fn lowerdirs_in(mountinfo: &str) -> HashSet<PathBuf> {
    let mut dirs = HashSet::new();
    for line in mountinfo.lines() {
        let Some((_, after)) = line.split_once(" - ") else { continue };
        let mut fields = after.split(' ');
        if fields.next() != Some("overlay") {
            continue;
        }
        let Some(options) = fields.nth(1) else { continue };
        for option in options.split(',') {
            if let Some(lower) = option.strip_prefix("lowerdir=") {
                dirs.extend(
                    lower.split(':').filter(|d| !d.is_empty()).map(|d| PathBuf::from(unescape_mountinfo(d))),
                );
            } else if let Some(lower) = option.strip_prefix("lowerdir+=") {
                dirs.insert(PathBuf::from(unescape_mountinfo(lower)));
            }
        }
    }
    dirs
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape_mountinfo(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(Ok(v)) = bytes
                .get(i + 1..i + 4)
                .and_then(|o| std::str::from_utf8(o).ok())
                .map(|o| u8::from_str_radix(o, 8))
        {
            out.push(v);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Removes leftovers of interrupted writes (`.tmp-*`) in `dir`.
fn remove_temps(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(".tmp-") {
            let path = entry.path();
            let _ = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        }
    }
}

fn poisoned() -> ImageError {
    ImageError::Io("the image store's lock is poisoned".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_directories_of_overlay_mounts() {
        let mountinfo = "\
22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
90 22 0:40 / /c1/rootfs rw,relatime - overlay overlay rw,lowerdir=/s/2/fs:/s/1/fs,upperdir=/c1/upper,workdir=/c1/work
91 22 0:41 / /c2/rootfs rw,relatime - overlay none rw,lowerdir+=/s/3/fs,lowerdir+=/s/a\\040b/fs,upperdir=/u,workdir=/w
92 22 0:42 / /other rw - tmpfs tmpfs rw,lowerdir=/not/overlay
";
        let dirs = lowerdirs_in(mountinfo);
        let expected: HashSet<PathBuf> =
            ["/s/2/fs", "/s/1/fs", "/s/3/fs", "/s/a b/fs"].into_iter().map(PathBuf::from).collect();
        assert_eq!(dirs, expected);
    }
}
