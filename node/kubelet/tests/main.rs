//! keel-kubelet's integration tests, one binary: the node loop against keel-apiserver and
//! kube-apiserver, and pods through keel-shim and containerd.

mod node_registration;
mod pods;
mod support;
