//! Stale UDP conntrack entries, as kube-proxy (1.31+) clears them after each sync: a UDP flow to a
//! Service frontend keeps its DNAT for as long as the client keeps sending, so when its endpoint goes
//! the client talks to nothing until the entry is deleted. After each successful sync the table is
//! listed once ([`ConntrackTable::udp_flows`]) and [`stale_flows`] picks the UDP flows whose original
//! destination is a Service frontend — a ClusterIP, external IP or LoadBalancer IP with the Service
//! port, or a node port on any address — and whose reply source (the DNAT target) is not a serving
//! endpoint of that Service port. That covers flows to a port that had no endpoints too, which
//! upstream names apart: an entry made while nothing DNATed them has the frontend itself as its reply
//! source, never an endpoint. (Keel's rules reject such datagrams in the filter hook, before the entry
//! is confirmed, so none is left behind — the root tests show it — but an entry from before the
//! rules were loaded would be.)
//!
//! [`stale_flows`] is pure; [`netlink::ConntrackNetlink`] is the kernel edge (ctnetlink).

pub mod netlink;

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr};

use crate::model::Protocol;
use crate::tracker::ProxyState;

/// One direction of a conntrack entry: where the packets of that direction come from and go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FlowTuple {
    /// The source address and port.
    pub source: SocketAddr,
    /// The destination address and port.
    pub destination: SocketAddr,
}

/// A conntrack entry, as far as the cleanup reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Flow {
    /// The IP protocol number (17 for UDP).
    pub protocol: u8,
    /// The original direction (as the client sent it: destination is the Service frontend).
    pub original: FlowTuple,
    /// The reply direction (after DNAT its source is the endpoint).
    pub reply: FlowTuple,
    /// The conntrack zone (0 for the default zone).
    pub zone: u16,
}

/// The kernel's conntrack table, as the cleanup needs it.
pub trait ConntrackTable {
    /// Why the table could not be read or an entry not deleted.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The UDP entries of both address families (an implementation may return others too: they are
    /// ignored).
    fn udp_flows(&mut self) -> Result<Vec<Flow>, Self::Error>;

    /// Deletes the entry with `flow`'s original tuple; `false` when it was already gone.
    fn delete(&mut self, flow: &Flow) -> Result<bool, Self::Error>;
}

/// What a cleanup did, for logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanupStats {
    /// UDP entries listed.
    pub listed: usize,
    /// Entries found stale.
    pub stale: usize,
    /// Stale entries deleted (the rest had gone by themselves).
    pub deleted: usize,
}

/// The flows of `flows` that point a Service frontend at something that is no longer a serving
/// endpoint of it. As upstream, endpoints are compared by address only, and every serving endpoint
/// counts whatever the traffic policies say (a flow to a Service behaves as a TCP connection would:
/// only a gone endpoint ends it). Unlike upstream, a ClusterIP, external or LoadBalancer IP frontend
/// is matched with its Service port, so flows to another UDP port of the same address are left alone.
pub fn stale_flows<'a>(state: &ProxyState, flows: &'a [Flow]) -> Vec<&'a Flow> {
    let mut frontends: HashMap<(IpAddr, u16), BTreeSet<IpAddr>> = HashMap::new();
    let mut node_ports: HashMap<u16, BTreeSet<IpAddr>> = HashMap::new();
    for (name, service) in &state.services {
        if service.protocol != Protocol::Udp {
            continue;
        }
        let serving: BTreeSet<IpAddr> = state
            .endpoints_of(name)
            .iter()
            .filter(|endpoint| endpoint.serving)
            .map(|endpoint| endpoint.ip)
            .collect();
        let addresses =
            service.cluster_ips.iter().chain(&service.external_ips).chain(&service.load_balancer_ips);
        for ip in addresses {
            frontends.entry((*ip, service.port)).or_default().extend(serving.iter().copied());
        }
        if let Some(node_port) = service.node_port {
            node_ports.entry(node_port).or_default().extend(serving.iter().copied());
        }
    }
    let udp = Protocol::Udp.number();
    flows
        .iter()
        .filter(|flow| flow.protocol == udp)
        .filter(|flow| {
            let destination = flow.original.destination;
            let endpoint = flow.reply.source.ip();
            let stale_for = |serving: &BTreeSet<IpAddr>| !serving.contains(&endpoint);
            frontends.get(&(destination.ip(), destination.port())).is_some_and(stale_for)
                || node_ports.get(&destination.port()).is_some_and(stale_for)
        })
        .collect()
}

/// Lists `table` once and deletes its stale UDP entries. Every stale entry is tried; the first
/// failure is returned after the others were.
pub fn clean_stale_flows<T: ConntrackTable>(
    table: &mut T,
    state: &ProxyState,
) -> Result<CleanupStats, T::Error> {
    let flows = table.udp_flows()?;
    let udp = Protocol::Udp.number();
    let stale = stale_flows(state, &flows);
    let mut stats = CleanupStats {
        listed: flows.iter().filter(|flow| flow.protocol == udp).count(),
        stale: stale.len(),
        deleted: 0,
    };
    let mut first_error = None;
    for flow in stale {
        match table.delete(flow) {
            Ok(true) => stats.deleted += 1,
            Ok(false) => {}
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    match first_error {
        Some(err) => Err(err),
        None => Ok(stats),
    }
}

#[cfg(test)]
mod tests;
