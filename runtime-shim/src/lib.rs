//! keel-shim: Keel's CRI runtime. A kubelet drives it over CRI v1 on a unix socket; it runs OCI
//! containers through an OCI runtime binary per runtime handler (runc by default).
//!
//! - [`config`]: the command line and its validation.
//! - [`server`]: the socket (stale and live sockets, mode, removal on shutdown) and the tonic server.
//! - [`service`]: the RuntimeService and ImageService (Version, Status, RuntimeConfig and
//!   UpdateRuntimeConfig, the pod sandbox RPCs; every other RPC answers `Unimplemented`).
//! - [`network`]: whether the pod network is ready (the CNI network config as libcni picks it).
//! - [`image`]: images (so far: references parsed and normalized as containerd does).
//! - [`sandbox`]: pod sandboxes (namespaces, files, pause process); [`cni`]: CNI network lists run as
//!   libcni runs them; [`oci`]: what a container's spec takes from its pod (namespaces, files).

pub mod cni;
pub mod config;
pub mod image;
pub mod network;
pub mod oci;
pub mod sandbox;
pub mod server;
pub mod service;
