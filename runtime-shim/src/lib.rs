//! keel-shim: Keel's CRI runtime. A kubelet drives it over CRI v1 on a unix socket; it runs OCI
//! containers through an OCI runtime binary per runtime handler (runc by default).
//!
//! - [`config`]: the command line and its validation.
//! - [`server`]: the socket (stale and live sockets, mode, removal on shutdown) and the tonic server.
//! - [`service`]: the RuntimeService and ImageService (Version, Status, RuntimeConfig and
//!   UpdateRuntimeConfig, and the ImageService; every other RPC answers `Unimplemented`).
//! - [`network`]: whether the pod network is ready (the CNI network config as libcni picks it).
//! - [`image`]: images: references, the content store, pulls, layer snapshots, overlay root filesystems.
//! - [`oci`]: OCI runtime specs built from CRI and image configs, and the runtime binary's driver.
//! - [`cgroup`]: cgroup v1/v2/hybrid layouts, cgroups paths, resources, usage stats, removal.
//! - [`streaming`]: the streaming server of Exec, Attach and PortForward (SPDY/3.1 and websocket).
//! - [`monitor`]: the per-container monitor process (`keel-shim monitor`).
//! - [`container`]: containers' records and lifecycle.
//! - [`sandbox`]: pod sandboxes (namespaces, files, the pause process of a shared PID namespace);
//!   [`cni`]: CNI network lists run as libcni runs them.

pub mod cgroup;
pub mod cni;
pub mod config;
pub mod container;
pub mod image;
pub mod monitor;
pub mod network;
pub mod oci;
pub mod sandbox;
pub mod server;
pub mod service;
pub mod streaming;
