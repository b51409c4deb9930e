//! keel-shim's integration tests: the CRI server, containers, images, streaming, and the CRI
//! suite against keel-shim and containerd.
//!
//! One test binary per crate: each links the crate once, and nextest still runs every test in
//! its own process.

mod cri_suite;

mod acceptance;
mod cgroup;
mod conformance;
mod containers;
mod critest;
mod image_reference;
mod images;
mod sandbox;
mod server;
mod spec_runc;
mod streaming;
