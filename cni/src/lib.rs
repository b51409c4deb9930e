//! keel-cni: a CNI 1.1 plugin for Keel's nodes.
//!
//! A runtime (keel-shim, containerd, CRI-O) executes the `keel-cni` binary with the CNI environment and
//! a network configuration on stdin. keel-cni keeps a node bridge, gives each pod a veth pair, an
//! address from its built-in IPAM (or a delegated IPAM plugin) and routes, and programs masquerade and
//! hostPorts into nftables, all over netlink: nothing is executed on the ADD and DEL paths.
//!
//! - `spec`: the spec's versions, errors, configuration and results (pure).
//! - `skel`: the exec protocol (environment, dispatch, stdout).
//! - `plugin`: the bridge plugin's commands over its edges (IPAM, firewall, dataplane).
//! - `dataplane`: the bridge, veth pairs, addresses and routes (trait, kernel over `netlink`, fake).
//! - `netlink`: a synchronous route-netlink socket.
//! - `nft`: the firewall edge, keel-cni's nftables table over netlink (masquerade, hostPorts).
//! - `ipam`: the built-in IPAM (host-local's keys and on-disk layout) and delegation to IPAM plugins.
//! - `install`: `keel-cni install`, the binary and conflist put on a node.

pub mod dataplane;
pub mod install;
pub mod ipam;
pub mod netlink;
pub mod nft;
pub mod plugin;
pub mod skel;
pub mod spec;
