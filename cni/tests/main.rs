//! keel-cni's integration tests: the plugin binary in namespaces, against containerd and the
//! reference plugins.
//!
//! One test binary per crate: each links the crate once, and nextest still runs every test in
//! its own process.

mod common;
mod runner;

mod concurrency;
mod containerd;
mod dataplane;
mod install;
mod ipam_host_local;
mod nft;
mod pods;
mod reference;
