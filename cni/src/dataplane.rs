//! The dataplane edge: what the bridge plugin asks of the kernel (the node bridge, a veth pair per
//! attachment, addresses and routes inside the pod), behind a trait so the plugin's orchestration is
//! unit-tested with a fake ([`fake::FakeDataplane`]); the kernel's is [`kernel::Kernel`], over netlink.
//!
//! Names: the host end of a pod's veth pair is named from `(containerID, ifname)` alone
//! ([`host_veth_name`]), so DEL finds it in the caller's namespace without the pod's. DEL does not
//! destroy the pair while the runtime waits (deleting a veth costs the caller 15–26 ms in the kernel's
//! `rcu_barrier`): it retires it — both ends down, renamed to a tombstone ([`TOMBSTONE_PREFIX`]) and
//! off the bridge — and the pair is destroyed after the answer is written ([`Dataplane::finish`]).

pub mod kernel;

#[cfg(test)]
pub mod fake;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use ipnet::IpNet;

/// The prefix of a retired veth end's name (host end in the caller's namespace, pod end in the pod's):
/// `kdel-` and the host end's index in hex. GC deletes any such host end a crashed DEL left.
pub const TOMBSTONE_PREFIX: &str = "kdel-";

/// The bridge's addresses that a new gateway `address` conflicts with, as the reference bridge plugin
/// decides it: one IPv4 address per bridge; IPv6 ones only when their subnets overlap; link-local
/// addresses never conflict.
pub fn conflicting_addresses(existing: &[IpNet], address: IpNet) -> Vec<IpNet> {
    let v6 = address.addr().is_ipv6();
    existing
        .iter()
        .copied()
        .filter(|other| *other != address && other.addr().is_ipv6() == v6)
        .filter(|other| !matches!(other, IpNet::V6(net) if net.addr().is_unicast_link_local()))
        .filter(|other| !v6 || other.contains(&address.addr()) || address.contains(&other.addr()))
        .collect()
}

/// The host end of the veth pair of the attachment `(container_id, ifname)`: `veth` and 8 hex digits
/// of a stable hash (FNV-1a, 32 bits), as the reference names its host ends `veth` + 8 hex (random there).
pub fn host_veth_name(container_id: &str, ifname: &str) -> String {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in container_id.bytes().chain([0]).chain(ifname.bytes()) {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    format!("veth{hash:08x}")
}

/// A MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// Parses `aa:bb:cc:dd:ee:ff` (or with `-`); `None` for anything else, a multicast or a zero address.
    pub fn parse(text: &str) -> Option<Mac> {
        let mut bytes = [0u8; 6];
        let mut parts = text.split([':', '-']);
        for byte in &mut bytes {
            let part = parts.next()?;
            if part.len() != 2 {
                return None;
            }
            *byte = u8::from_str_radix(part, 16).ok()?;
        }
        let valid = parts.next().is_none() && bytes[0] & 1 == 0 && bytes != [0; 6];
        valid.then_some(Mac(bytes))
    }

    /// A random locally administered unicast address.
    pub fn random() -> Mac {
        let mut bytes = [0u8; 6];
        let mut filled = 0;
        while filled < bytes.len() {
            // SAFETY: the pointer and length describe the unfilled tail of `bytes`, which we own.
            let got =
                unsafe { libc::getrandom(bytes[filled..].as_mut_ptr().cast(), bytes.len() - filled, 0) };
            if got <= 0 {
                // getrandom only fails before the entropy pool is ready at boot; fall back to the time.
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |elapsed| elapsed.as_nanos());
                bytes.copy_from_slice(&nanos.to_le_bytes()[..6]);
                break;
            }
            filled += got.unsigned_abs();
        }
        bytes[0] = (bytes[0] & 0xfe) | 0x02;
        Mac(bytes)
    }

    /// The pod interface's address when the runtime asks for none: `0a:58` and the pod's IPv4
    /// address (or the last 4 bytes of its IPv6 address), as Kubernetes network plugins do, so a
    /// re-used IP keeps its MAC and neighbours' caches stay right.
    pub fn for_address(address: IpAddr) -> Mac {
        let tail = match address {
            IpAddr::V4(v4) => v4.octets(),
            IpAddr::V6(v6) => {
                let octets = v6.octets();
                [octets[12], octets[13], octets[14], octets[15]]
            }
        };
        Mac([0x0a, 0x58, tail[0], tail[1], tail[2], tail[3]])
    }
}

impl std::fmt::Display for Mac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// The node bridge as the configuration wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeSpec {
    pub name: String,
    pub mtu: Option<u32>,
    pub promisc: bool,
}

/// The node bridge as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bridge {
    pub name: String,
    pub index: u32,
    pub mac: Mac,
    pub mtu: u32,
}

/// A veth pair to create: the host end on the bridge, the pod end directly inside the pod's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VethSpec {
    pub host_name: String,
    pub host_mac: Mac,
    pub pod_netns: PathBuf,
    pub pod_ifname: String,
    pub pod_mac: Mac,
    pub mtu: Option<u32>,
    pub bridge_index: u32,
    pub hairpin: bool,
}

/// A veth pair as created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Veth {
    pub host_index: u32,
    pub pod_index: u32,
    pub mtu: u32,
}

/// A route inside the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PodRoute {
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
}

/// What the pod's interface carries once configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodConfig {
    pub netns: PathBuf,
    pub ifname: String,
    pub index: u32,
    /// Addresses with their prefix length (host bits kept).
    pub addresses: Vec<IpNet>,
    pub routes: Vec<PodRoute>,
}

/// A pod interface as the kernel has it (CHECK).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLink {
    pub index: u32,
    pub mac: Mac,
    pub up: bool,
    pub addresses: Vec<IpNet>,
    /// The main table's routes through this interface.
    pub routes: Vec<PodRoute>,
}

/// A host end as the kernel has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLink {
    pub index: u32,
    pub mac: Mac,
    /// The bridge it is a port of, if any.
    pub controller: Option<u32>,
}

/// A dataplane failure.
#[derive(Debug, thiserror::Error)]
pub enum DataplaneError {
    /// The pod's network namespace path does not exist.
    #[error("network namespace {0} does not exist")]
    NetnsMissing(PathBuf),
    /// The path exists but is not a network namespace, or is the caller's own.
    #[error("{0} is not a usable network namespace: {1}")]
    NetnsInvalid(PathBuf, String),
    /// The kernel state conflicts with the configuration (e.g. a link of the bridge's name that is not
    /// a bridge, an address on the bridge without forceAddress).
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Netlink(#[from] crate::netlink::NetlinkError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// What the bridge plugin needs from the kernel. Every operation acts in the caller's network
/// namespace unless it names the pod's.
pub trait Dataplane {
    /// The interface `ifname` inside the pod's namespace, if present (ADD refuses to replace it,
    /// CHECK inspects it). Fails when `netns` is not a network namespace.
    fn pod_link(&mut self, netns: &Path, ifname: &str) -> Result<Option<PodLink>, DataplaneError>;

    /// Creates the bridge or takes the existing one (a link of that name that is not a bridge is a
    /// conflict); sets it up, and promiscuous when asked.
    fn ensure_bridge(&mut self, spec: &BridgeSpec) -> Result<Bridge, DataplaneError>;

    /// The bridge named `name`, if present (CHECK: without creating it).
    fn bridge(&mut self, name: &str) -> Result<Option<Bridge>, DataplaneError>;

    /// Ensures the bridge carries `address` (a gateway, with the pod subnet's prefix length). Another
    /// IPv4 address, or an overlapping IPv6 one, is a conflict unless `force`, which replaces it.
    fn ensure_bridge_address(
        &mut self,
        bridge: &Bridge,
        address: IpNet,
        force: bool,
    ) -> Result<(), DataplaneError>;

    /// Turns on IP forwarding for the family in the caller's namespace, unless already on.
    fn enable_forwarding(&mut self, ipv6: bool) -> Result<(), DataplaneError>;

    /// Creates the veth pair: the host end up on the bridge (hairpin mode when asked), the pod end
    /// born inside the pod's namespace, down.
    fn add_veth(&mut self, spec: &VethSpec) -> Result<Veth, DataplaneError>;

    /// Inside the pod: addresses on the interface (IPv6 without duplicate address detection), the
    /// interface and loopback up, the routes.
    fn configure_pod(&mut self, config: &PodConfig) -> Result<(), DataplaneError>;

    /// Destroys a veth pair by its host end, now (undo of a failed ADD). Success when it is gone.
    fn delete_veth(&mut self, host_name: &str) -> Result<(), DataplaneError>;

    /// The host end named `host_name` in the caller's namespace, if present.
    fn host_link(&mut self, host_name: &str) -> Result<Option<HostLink>, DataplaneError>;

    /// DEL's cheap part: the pod end (when the namespace is still there) down and renamed to a
    /// tombstone so `ifname` is free at once, the host end down, off the bridge and renamed to a
    /// tombstone; the pair's destruction is left to [`Dataplane::finish`]. Success when the pair is
    /// already gone.
    fn retire_veth(
        &mut self,
        netns: Option<&Path>,
        ifname: &str,
        host_name: &str,
    ) -> Result<(), DataplaneError>;

    /// Destroys every tombstone in the caller's namespace now (GC).
    fn delete_tombstones(&mut self) -> Result<(), DataplaneError>;

    /// Called once the answer is written: destroys what `retire_veth` retired (and tombstones a
    /// crashed earlier DEL left) without holding the caller.
    fn finish(&mut self);
}

#[cfg(test)]
mod conflict_tests {
    use super::*;

    fn nets(texts: &[&str]) -> Vec<IpNet> {
        texts.iter().map(|text| text.parse().unwrap()).collect()
    }

    #[test]
    fn a_gateway_conflicts_as_the_reference_bridge_plugin_decides() {
        let existing = nets(&["10.244.1.1/24", "fd00:1::1/64", "fe80::1/64"]);
        // One IPv4 address per bridge.
        assert_eq!(
            conflicting_addresses(&existing, "10.244.2.1/24".parse().unwrap()),
            nets(&["10.244.1.1/24"])
        );
        // The same address is not a conflict.
        assert!(conflicting_addresses(&existing, "10.244.1.1/24".parse().unwrap()).is_empty());
        // IPv6: only overlapping subnets; link-local never.
        assert!(conflicting_addresses(&existing, "fd00:2::1/64".parse().unwrap()).is_empty());
        assert_eq!(
            conflicting_addresses(&existing, "fd00:1::2/64".parse().unwrap()),
            nets(&["fd00:1::1/64"])
        );
    }
}
