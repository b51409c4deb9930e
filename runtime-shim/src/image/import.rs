//! `keel-shim import`: images from an OCI image layout directory or an OCI or Docker archive, for
//! nodes without a registry.
