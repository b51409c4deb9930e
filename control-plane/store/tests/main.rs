//! The store's integration tests: one conformance suite over the embedded store and etcd.
//!
//! One test binary per crate: each links the crate once, and nextest still runs every test in
//! its own process.

#[macro_use]
mod conformance;

mod crash;
mod embedded;
mod etcd;
mod etcd_cluster;
mod etcd_options;
