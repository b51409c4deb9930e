//! keel-apiserver's integration tests: the server on loopback, driven by raw HTTPS,
//! kubectl, client-go, kube-rs, the Python and Node clients, and upstream peers.
//!
//! One test binary per crate: each links the crate once, and nextest still runs every test in
//! its own process.

mod common;

mod admission;
mod audit;
mod bad_input;
mod binary;
mod certificates;
mod crd;
mod encryption;
mod events;
mod eviction;
mod invariants;
mod kube_rs;
mod kubectl;
mod kubectl_scenario;
mod lifecycle;
mod limits;
mod networking_resources;
mod node_client;
mod node_identity;
mod node_restriction_oracle;
mod openapi;
mod pod_deletion_oracle;
mod protobuf;
mod python_client;
mod rbac_bootstrap;
mod rbac_clients;
mod rbac_oracle;
mod scheduler_resources;
mod server_side_apply;
mod service_accounts;
mod services;
mod upstream_scheduler;
mod validation;
mod watch_cache;
