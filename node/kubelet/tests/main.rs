//! keel-kubelet's integration tests, one binary: TLS bootstrap and rotation, its configuration
//! beside the upstream kubelet's,
//! the node loop against keel-apiserver and kube-apiserver, and pods through keel-shim and
//! containerd.

mod bootstrap;
mod config;
mod node_registration;
mod pods;
mod support;
