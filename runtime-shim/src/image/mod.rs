//! The image store: references, and (in later slices) pulling into a content-addressed store.
//!
//! Only [`reference`] is in this slice; the pull path (`store`, on oci-client) and layer unpacking
//! into snapshots come next.

pub mod reference;

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
