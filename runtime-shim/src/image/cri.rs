//! The CRI ImageService over the [`ImageStore`], answering as containerd's CRI plugin does: an unknown
//! image has an empty ImageStatus (no error) and removing one succeeds; RemoveImage removes every
//! name of the image; PullImage answers the image id.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use k8s_cri::v1 as api;
use serde_json::json;
use tonic::Status;

use super::store::ImageStore;
use super::{Image, ImageError};

/// The CRI image of `image`. The image's user gives `uid` when numeric, `username` otherwise (its group
/// dropped), as containerd reports them.
fn cri_image(image: &Image) -> api::Image {
    let user = image.config.config().as_ref().and_then(|c| c.user().clone()).unwrap_or_default();
    let user = user.split(':').next().unwrap_or_default();
    let (uid, username) = match user.parse::<i64>() {
        Ok(uid) => (Some(api::Int64Value { value: uid }), String::new()),
        Err(_) => (None, user.to_owned()),
    };
    api::Image {
        id: image.id.clone(),
        repo_tags: image.repo_tags.clone(),
        repo_digests: image.repo_digests.clone(),
        size: image.size,
        uid,
        username,
        spec: Some(api::ImageSpec { image: image.id.clone(), ..Default::default() }),
        pinned: false,
    }
}

fn image_name(spec: Option<&api::ImageSpec>) -> &str {
    spec.map_or("", |s| s.image.as_str())
}

impl ImageStore {
    /// ListImages: every image, or with a filter naming an image, just that one.
    #[must_use]
    pub fn list_images(&self, request: &api::ListImagesRequest) -> api::ListImagesResponse {
        let filter = request.filter.as_ref().map(|f| image_name(f.image.as_ref())).unwrap_or_default();
        let images = if filter.is_empty() {
            self.list().iter().map(cri_image).collect()
        } else {
            self.get(filter).map(|image| vec![cri_image(&image)]).unwrap_or_default()
        };
        api::ListImagesResponse { images }
    }

    /// ImageStatus: the image, or no image (and no error) when there is none; verbose adds
    /// `info["info"]`, the image config and chain id as JSON.
    ///
    /// # Errors
    /// Store errors other than NotFound.
    pub fn image_status(
        &self,
        request: &api::ImageStatusRequest,
    ) -> Result<api::ImageStatusResponse, Status> {
        let name = image_name(request.image.as_ref());
        let image = match self.get(name) {
            Ok(image) => image,
            Err(ImageError::NotFound(_)) => return Ok(api::ImageStatusResponse::default()),
            Err(e) => return Err(e.into()),
        };
        let mut info = std::collections::HashMap::new();
        if request.verbose {
            let record = self.record(&image.id)?;
            let verbose = json!({
                "chainID": record.chain_ids.last(),
                "manifestDigest": record.manifest_digest,
                "imageSpec": image.config,
                "snapshots": image.layers,
            });
            info.insert("info".to_owned(), verbose.to_string());
        }
        Ok(api::ImageStatusResponse { image: Some(cri_image(&image)), info })
    }

    /// PullImage: pulls and answers the image id.
    ///
    /// # Errors
    /// InvalidArgument for a malformed reference; NotFound for an unknown image; registry errors.
    pub async fn pull_image(
        &self,
        request: &api::PullImageRequest,
    ) -> Result<api::PullImageResponse, Status> {
        let name = image_name(request.image.as_ref());
        let image = self.pull(name, request.auth.as_ref()).await?;
        tracing::info!(image = name, id = %image.id, "pulled");
        Ok(api::PullImageResponse { image_ref: image.id })
    }

    /// RemoveImage: removes the image with all its names; an unknown image is not an error.
    ///
    /// # Errors
    /// Store errors.
    pub async fn remove_image(
        &self,
        request: &api::RemoveImageRequest,
    ) -> Result<api::RemoveImageResponse, Status> {
        self.remove(image_name(request.image.as_ref())).await?;
        Ok(api::RemoveImageResponse {})
    }

    /// ImageFsInfo: the bytes and inodes used under `DIR/snapshots`.
    ///
    /// # Errors
    /// Internal if the snapshots directory cannot be walked.
    pub async fn image_fs_info(&self) -> Result<api::ImageFsInfoResponse, Status> {
        let dir = self.snapshots_dir();
        let walked = dir.clone();
        let (bytes, inodes) = tokio::task::spawn_blocking(move || usage(&walked))
            .await
            .map_err(|e| Status::internal(format!("measuring the image filesystem: {e}")))?
            .map_err(|e| Status::internal(format!("measuring {}: {e}", dir.display())))?;
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        Ok(api::ImageFsInfoResponse {
            image_filesystems: vec![api::FilesystemUsage {
                timestamp,
                fs_id: Some(api::FilesystemIdentifier { mountpoint: dir.display().to_string() }),
                used_bytes: Some(api::UInt64Value { value: bytes }),
                inodes_used: Some(api::UInt64Value { value: inodes }),
            }],
            container_filesystems: Vec::new(),
        })
    }
}

/// The disk usage (allocated blocks) and inode count under `dir`, hard links counted once, not
/// following symlinks, as `du` measures.
fn usage(dir: &Path) -> std::io::Result<(u64, u64)> {
    let mut seen = HashSet::new();
    let mut bytes = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            // Removed meanwhile (a collection or a failed unpack).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        if !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        bytes += meta.blocks() * 512;
        if meta.is_dir() {
            match std::fs::read_dir(&path) {
                Ok(entries) => stack.extend(entries.flatten().map(|e| e.path())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok((bytes, seen.len() as u64))
}
