//! The testbed's own tests: its daemons, peers and fabric.
//!
//! One test binary per crate: each links the crate once, and nextest still runs every test in
//! its own process.

mod common;

#[cfg(feature = "cri")]
mod containerd;
mod daemon;
mod durable_fs;
mod etcd;
mod fabric;
mod kube_apiserver;
mod kubectl;
mod registry_images;
mod sqlite;
