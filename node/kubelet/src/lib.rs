//! keel-kubelet: the node agent (issue 19). It registers its Node, heartbeats its Lease and
//! NodeStatus, and (next) runs the Pods bound to it through a CRI runtime (keel-shim or
//! containerd).
//!
//! - [`machine`]: what the kubelet reports of its machine (CPUs, memory, huge pages, IDs, kernel,
//!   OS image, the root dir's filesystem), as upstream reads it through cAdvisor. The IO edge.
//! - [`node_status`]: capacity, allocatable after reservations and hard eviction thresholds, the
//!   conditions with upstream's reasons and transitions, the registration labels. Pure.
//! - [`node`]: the Node to register, the status to report and the Lease to renew. Pure.
//! - [`runtime`]: the CRI runtime's health as the Ready condition reads it, and the client.
//! - [`agent`]: registration, the Lease, runtime checks and status reports against the API.
//! - [`cli`]: `--node-labels` and `--register-with-taints`.

pub mod agent;
pub mod cli;
pub mod machine;
pub mod node;
pub mod node_status;
pub mod runtime;
