//! keel-kubelet's integration tests, one binary: the node loop against keel-apiserver and
//! kube-apiserver.

mod node_registration;
