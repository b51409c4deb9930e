//! keel-proxy's integration tests: nftables rules and conntrack in namespaces, health checks.
//!
//! One test binary per crate: each links the crate once, and nextest still runs every test in
//! its own process.

mod conntrack;
mod healthcheck;
mod nft;
