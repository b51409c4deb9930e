//! Test hosts: network namespaces joined by a bridge fabric that lives in a namespace of its own.
//!
//! ```text
//!   fabric namespace:   fabric0 (bridge, 198.18.0.1/16) ── veth1 ── veth2 ── ...
//!                                                            │         │
//!   host namespaces:                                     eth0 .0.2  eth0 .0.3   (default route via .0.1)
//! ```
//!
//! Each fabric is its own layer-2 segment: fabrics of tests running in parallel never see each other,
//! so they all use the same subnet, 198.18.0.0/16 (from RFC 2544's range for test networks).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;

use anyhow::{Context, Result, bail};

use crate::netlink;
use crate::netns::{NetNs, NetNsFd};
use crate::process::{Daemon, Readiness};

/// The bridge in the fabric namespace.
pub const BRIDGE: &str = "fabric0";
/// The interface of a host on the fabric.
pub const HOST_LINK: &str = "eth0";
/// Prefix length of the fabric subnet.
pub const PREFIX_LEN: u8 = 16;
/// The fabric's own address (on its bridge), the hosts' default gateway.
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

/// A bridge fabric in a namespace of its own; hosts are added to it. Removed on drop.
#[derive(Debug)]
pub struct Fabric {
    prefix: String,
    ns: NetNs,
    bridge_index: u32,
    /// Index of the next host; a host's address and link names derive from it.
    next_host: Mutex<u32>,
}

impl Fabric {
    /// A fabric with names unique to this test: `keel-t<pid>-<n>-…`.
    pub fn new() -> Result<Fabric> {
        Fabric::with_prefix(&crate::unique_prefix())
    }

    /// A fabric whose namespaces are named `<prefix>-fabric` and `<prefix>-<host label>`.
    pub fn with_prefix(prefix: &str) -> Result<Fabric> {
        let ns = NetNs::create(&format!("{prefix}-fabric"))?;
        let bridge_index = ns
            .block_on(|| async {
                let handle = netlink::connect()?;
                netlink::set_up(&handle, "lo").await?;
                let index = netlink::add_bridge(&handle, BRIDGE).await?;
                netlink::add_address(&handle, BRIDGE, IpAddr::V4(GATEWAY), PREFIX_LEN).await?;
                anyhow::Ok(index)
            })?
            .with_context(|| format!("set up the fabric namespace {}", ns.name()))?;
        Ok(Fabric { prefix: prefix.to_owned(), ns, bridge_index, next_host: Mutex::new(1) })
    }

    /// The prefix of every namespace name of this fabric.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The fabric's own namespace (holding the bridge and the gateway address).
    pub fn ns(&self) -> &NetNs {
        &self.ns
    }

    pub fn gateway(&self) -> Ipv4Addr {
        GATEWAY
    }

    /// Adds a host named `<prefix>-<label>`: a namespace with loopback up and `eth0` on the fabric, an
    /// address of its own and a default route via the fabric's gateway.
    pub fn add_host(&self, label: &str) -> Result<Host> {
        if label.is_empty() || !label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            bail!("invalid host label {label:?}: use letters, digits and '-'");
        }
        let index = {
            let mut next = self.next_host.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let index = *next;
            *next += 1;
            index
        };
        // Hosts start at .0.2; 65533 hosts fit in the /16.
        let Some(address) = host_address(index) else {
            bail!("the fabric {} is full", self.prefix);
        };
        let ns = NetNs::create(&format!("{}-{label}", self.prefix))?;
        let fabric_link = format!("veth{index}");
        self.ns
            .block_on(|| async {
                let handle = netlink::connect()?;
                netlink::add_veth_to_bridge(&handle, &fabric_link, HOST_LINK, self.bridge_index, ns.fd())
                    .await
            })?
            .with_context(|| format!("wire host {} to the fabric", ns.name()))?;
        ns.block_on(|| async {
            let handle = netlink::connect()?;
            netlink::set_up(&handle, "lo").await?;
            netlink::set_up(&handle, HOST_LINK).await?;
            netlink::add_address(&handle, HOST_LINK, IpAddr::V4(address), PREFIX_LEN).await?;
            netlink::add_default_route(&handle, GATEWAY).await
        })?
        .with_context(|| format!("configure host {}", ns.name()))?;
        Ok(Host { ns, address })
    }
}

fn host_address(index: u32) -> Option<Ipv4Addr> {
    let offset = index.checked_add(1)?;
    if offset >= (1 << (32 - u32::from(PREFIX_LEN))) - 1 {
        return None;
    }
    Some(Ipv4Addr::from(u32::from(GATEWAY) - 1 + offset))
}

/// A test host: a network namespace on a fabric. Its namespace is removed on drop; stop what runs in it
/// first.
#[derive(Debug)]
pub struct Host {
    ns: NetNs,
    address: Ipv4Addr,
}

impl Host {
    /// The namespace name, e.g. `keel-t1234-0-node1`.
    pub fn name(&self) -> &str {
        self.ns.name()
    }

    /// The host's address on the fabric.
    pub fn address(&self) -> Ipv4Addr {
        self.address
    }

    pub fn ns(&self) -> &NetNs {
        &self.ns
    }

    pub fn fd(&self) -> &NetNsFd {
        self.ns.fd()
    }

    /// Runs `f` on a thread inside this host.
    pub fn run<T: Send, F: FnOnce() -> T + Send>(&self, f: F) -> Result<T> {
        self.ns.run(f)
    }

    /// Runs an async block inside this host on a current-thread runtime.
    pub fn block_on<T, Fut, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce() -> Fut + Send,
        Fut: std::future::Future<Output = T>,
        T: Send,
    {
        self.ns.block_on(f)
    }

    /// A command that runs inside this host's network namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
        self.ns.command(program)
    }

    /// Starts a long-running process inside this host and waits until `ready` holds, probed from inside
    /// the host (where its addresses are). Stop it (drop the [`Daemon`]) before the host.
    pub fn start_daemon(
        &self,
        name: &str,
        mut command: std::process::Command,
        ready: Readiness,
        timeout: std::time::Duration,
    ) -> Result<Daemon> {
        self.fd().enter_on_spawn(&mut command);
        let ready = match ready {
            Readiness::None => Readiness::None,
            probe => Readiness::InNetNs(self.fd().clone(), Box::new(probe)),
        };
        Daemon::start(name, command, ready, timeout)
            .with_context(|| format!("start {name} in {}", self.name()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_addresses_follow_the_gateway_and_stop_at_the_broadcast_address() {
        assert_eq!(host_address(1), Some(Ipv4Addr::new(198, 18, 0, 2)));
        assert_eq!(host_address(254), Some(Ipv4Addr::new(198, 18, 0, 255)));
        assert_eq!(host_address(255), Some(Ipv4Addr::new(198, 18, 1, 0)));
        assert_eq!(host_address(65533), Some(Ipv4Addr::new(198, 18, 255, 254)));
        assert_eq!(host_address(65534), None);
    }
}
