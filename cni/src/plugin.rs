//! The bridge plugin: ADD, DEL, CHECK, STATUS and GC over three edges, each behind a trait so the
//! orchestration (ordering, undo on failure, idempotent DEL) is unit-tested with fakes:
//! - [`Ipam`]: addresses (keel-cni's built-in store, or a delegated IPAM plugin);
//! - [`Firewall`]: masquerade and hostPorts in keel-cni's own nftables table;
//! - the dataplane: bridge, veth pair, addresses and routes over rtnetlink.

use std::net::IpAddr;

use ipnet::IpNet;

use crate::skel::CmdArgs;

mod bridge;
use crate::spec::{Attachment, CniResult, Error, NetConf, PortMapping};
pub use bridge::BridgePlugin;

/// Address management for one network.
pub trait Ipam {
    /// Allocates the attachment's addresses (one per range set; the requested ones from
    /// `runtimeConfig.ips`, `args.cni.ips` or `CNI_ARGS` `IP=` when given) and returns them as an IPAM
    /// result: `ips` without `interface`, `routes`, `dns`. Allocating again for the same attachment
    /// returns what it already holds.
    fn allocate(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<CniResult, Error>;
    /// Releases what the attachment holds; success when it holds nothing.
    fn release(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error>;
    /// Fails unless the attachment still holds `addresses`.
    fn check(&mut self, args: &CmdArgs, conf: &NetConf, addresses: &[IpAddr]) -> Result<(), Error>;
    /// Releases every allocation of the network whose attachment is not in `valid`.
    fn gc(&mut self, args: &CmdArgs, conf: &NetConf, valid: &[Attachment]) -> Result<(), Error>;
    /// Fails with code 50 when no ADD could succeed (no free address, the data directory unusable).
    fn status(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error>;
}

/// keel-cni's nftables table: masquerade per bridge and hostPort rules per attachment.
pub trait Firewall {
    /// Ensures traffic from `sources` (the bridge's pod subnets) to anything outside `exclude`
    /// (the cluster CIDRs) leaving through another interface is masqueraded. Set up once per bridge;
    /// cheap when already in place.
    fn ensure_masquerade(&mut self, bridge: &str, sources: &[IpNet], exclude: &[IpNet]) -> Result<(), Error>;
    /// Adds hostPort DNAT rules sending `mappings` to `pod_ips` (one per family), owned by the attachment.
    fn add_port_mappings(
        &mut self,
        owner: &Attachment,
        bridge: &str,
        pod_ips: &[IpAddr],
        mappings: &[PortMapping],
    ) -> Result<(), Error>;
    /// Removes the attachment's hostPort rules; success when it has none.
    fn remove_port_mappings(&mut self, owner: &Attachment) -> Result<(), Error>;
    /// Fails unless the attachment's hostPort rules for `mappings` are in place.
    fn check_port_mappings(&mut self, owner: &Attachment, mappings: &[PortMapping]) -> Result<(), Error>;
    /// Removes the hostPort rules of every attachment not in `valid`; a container `valid` lists keeps
    /// its rules of every interface (the rules are the node's, shared by the networks, and `valid` is
    /// one network's).
    fn gc(&mut self, valid: &[Attachment]) -> Result<(), Error>;
}
