//! keel-kubelet: the node agent (issue 19). It registers its Node, heartbeats its Lease and
//! NodeStatus, and runs the Pods bound to it through a CRI runtime (keel-shim or
//! containerd).
//!
//! - [`machine`]: what the kubelet reports of its machine (CPUs, memory, huge pages, IDs, kernel,
//!   OS image, the root dir's filesystem), as upstream reads it through cAdvisor. The IO edge.
//! - [`node_status`]: capacity, allocatable after reservations and hard eviction thresholds, the
//!   conditions with upstream's reasons and transitions, the registration labels. Pure.
//! - [`node`]: the Node to register, the status to report and the Lease to renew. Pure.
//! - [`runtime`]: the CRI runtime's health as the Ready condition reads it, and the client.
//! - [`agent`]: registration, the Lease, runtime checks and status reports against the API.
//! - [`config`]: the KubeletConfiguration file, decoded, defaulted and validated as upstream's.
//! - [`cli`]: the flags, over the file (upstream's flag precedence), and the list flags' forms.
//! - [`pod_runtime`]: a pod as the runtime holds it (sandboxes, containers). Pure.
//! - [`pod_actions`]: what one sync of a pod does (computePodActions). Pure.
//! - [`pod_cgroups`]: the QoS and pod cgroups (ResourceConfigForPod pure, the files the IO edge).
//! - [`pod_config`]: the CRI sandbox and container configs of a pod. Pure.
//! - [`pod_status`]: the Pod status reported (phase, conditions, container statuses). Pure.
//! - [`probes`]: what a probe or hook reaches, and the probe worker's thresholds and gates. Pure.
//! - [`prober`]: runs them (ExecSync, HTTP GET, TCP connect, gRPC health, sleep).
//! - [`pods`]: the watch of the node's pods, one worker per pod, the relist, the syncs, the
//!   status writes and the final deletion.
//! - [`pleg`]: the runtime's container events (the evented PLEG) that wake the pods' workers.
//! - [`static_pods`]: pods from manifest files and their mirror pods in the API.
//! - [`events`]: the Events about pods.
//! - [`volumes`]: the files of configMap, secret, downwardAPI and projected volumes. Pure.
//! - [`claims`]: persistentVolumeClaim volumes resolved to their bound hostPath or local
//!   PersistentVolume, or upstream's error; the node affinity the kubelet checks. Pure.
//! - [`atomic_writer`]: writes them as upstream's AtomicWriter (`..data` swapped by a rename).
//! - [`container_logs`]: PodLogOptions, the CRI log format, tails and limits. Pure.
//! - [`certificate`]: certificate requests, their names and renewal times, the `--cert-dir` store.
//! - [`bootstrap`]: TLS bootstrap from `--bootstrap-kubeconfig`, and the rotation of the client and
//!   serving certificates.
//! - [`server`]: the kubelet API on :10250 (authn/authz, `/healthz`, `/pods`, `/containerLogs`,
//!   `/exec`, `/attach`, `/portForward`, `/run`, `/stats/summary`, `/metrics/resource`).
//! - [`streaming`]: the streaming requests' options, and the upgrade proxied to the runtime.
//! - [`stats`]: `/stats/summary` and `/metrics/resource` from /proc and CRI container stats. Pure.

pub mod agent;
pub mod atomic_writer;
pub mod bootstrap;
pub mod certificate;
pub mod claims;
pub mod cli;
pub mod config;
pub mod container_logs;
pub mod events;
pub mod machine;
pub mod node;
pub mod node_status;
pub mod pleg;
pub mod pod_actions;
pub mod pod_cgroups;
pub mod pod_config;
pub mod pod_runtime;
pub mod pod_status;
pub mod pods;
pub mod prober;
pub mod probes;
pub mod runtime;
pub mod server;
pub mod static_pods;
pub mod stats;
pub mod streaming;
pub mod volumes;
