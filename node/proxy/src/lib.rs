//! keel-proxy: Keel's kube-proxy. Services, EndpointSlices and this node's Node object come in
//! through a [`tracker::ChangeTracker`] (kube-proxy's {previous, current} per name); a
//! [`backend::Backend`] programs the kernel from the [`tracker::ProxyState`] — in full, or only the
//! changed Service ports — and the [`runner`] bounds how often. The nftables backend ([`nft`])
//! renders one transaction per sync with a pure function ([`nft::render`]); after each successful
//! sync, [`conntrack`] deletes the UDP conntrack entries that still point at gone endpoints, and
//! [`healthcheck`] serves the health-check node ports of externalTrafficPolicy Local Services.

pub mod backend;
pub mod cli;
pub mod conntrack;
pub mod fixtures;
pub mod healthcheck;
pub mod model;
pub mod nft;
pub mod node_ips;
pub mod runner;
pub mod serve;
pub mod tracker;
pub mod watch;
