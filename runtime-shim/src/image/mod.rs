//! Images: references, the content store, pulls from registries, layer snapshots and the overlay root
//! filesystem of a container, and the CRI ImageService over them.
//!
//! On disk, under keel-shim's `--root DIR`:
//! - `DIR/content/blobs/sha256/<hex>`: content-addressed blobs (manifests, indexes, configs, layers as
//!   pulled), each written to a temporary file beside it and renamed into place once its digest is
//!   verified, so a blob present is a whole, verified one.
//! - `DIR/images/<config hex>.json`: one [`store::Record`] per image (its names, manifest, config and
//!   layer digests, chain ids and size), written the same way; [`ImageStore::open`] reloads them.
//! - `DIR/snapshots/<chain id hex>/fs`: each layer unpacked once, with OCI whiteouts turned into
//!   overlayfs ones, so a container's root filesystem is an overlay of these directories
//!   ([`rootfs::mount`]).
//!
//! Modules: [`reference`] (names normalized as containerd does), [`store`] (records, lookups, removal
//! and garbage collection), `pull` (registries, through oci-client), [`unpack`] (layers into snapshots),
//! [`rootfs`] (overlay mounts), [`import`] (OCI layouts and archives for offline nodes) and `cri` (the
//! ImageService RPCs).

mod cri;
pub mod import;
mod pull;
pub mod reference;
pub mod rootfs;
pub mod store;
pub mod unpack;

pub use pull::RegistryMirror;
pub use store::{Image, ImageStore};

use reference::ReferenceError;

/// The gRPC status code the CRI server returns for an image error (mapped to `tonic::Code` there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Malformed input (an invalid image reference).
    InvalidArgument,
    /// The image or one of its blobs does not exist.
    NotFound,
    /// The registry or the store failed.
    Internal,
}

/// Why an image operation failed. Cloneable, so one pull's result can answer every caller that
/// waited for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// The reference is malformed.
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    /// No such image (or no manifest for this platform).
    #[error("{0}")]
    NotFound(String),
    /// The registry refused or failed the request (including TLS and authentication failures).
    #[error("{0}")]
    Registry(String),
    /// Content whose digest is not the one its descriptor names.
    #[error("digest mismatch for {what}: expected {expected}, got {actual}")]
    Digest {
        /// What was checked (a blob, a layer's uncompressed content).
        what: String,
        /// The digest the descriptor names.
        expected: String,
        /// The digest of the content received.
        actual: String,
    },
    /// A manifest, config or layer that cannot be used (bad JSON, an unsupported media type, a layer
    /// that writes outside its directory).
    #[error("{0}")]
    Invalid(String),
    /// The store's files failed.
    #[error("{0}")]
    Io(String),
}

impl ImageError {
    /// The gRPC code of this error.
    #[must_use]
    pub fn code(&self) -> Code {
        match self {
            ImageError::Reference(_) => Code::InvalidArgument,
            ImageError::NotFound(_) => Code::NotFound,
            _ => Code::Internal,
        }
    }

    /// An IO error with what was being done.
    pub(crate) fn io(what: impl std::fmt::Display, error: impl std::fmt::Display) -> ImageError {
        ImageError::Io(format!("{what}: {error}"))
    }
}

impl From<ImageError> for tonic::Status {
    fn from(error: ImageError) -> tonic::Status {
        let message = error.to_string();
        match error.code() {
            Code::InvalidArgument => tonic::Status::invalid_argument(message),
            Code::NotFound => tonic::Status::not_found(message),
            Code::Internal => tonic::Status::internal(message),
        }
    }
}

/// The hex part of a `sha256:<hex>` digest, checked to be 64 lower-case hex digits (so it is safe as a
/// file name).
pub(crate) fn sha256_hex(digest: &str) -> Result<&str, ImageError> {
    match digest.strip_prefix("sha256:") {
        Some(hex) if hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) => {
            Ok(hex)
        }
        _ => Err(ImageError::Invalid(format!("unsupported or malformed digest {digest:?} (sha256 only)"))),
    }
}

/// `sha256:<hex>` of `bytes`.
pub(crate) fn sha256_digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex(&sha2::Sha256::digest(bytes)))
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
