//! A node with a Linux bridge and pods as namespaces on it, the layout a bridge CNI plugin makes: the
//! fixture of tests that program a node's kernel (keel-cni's nftables, keel-proxy).

use std::net::{IpAddr, Ipv4Addr};

use anyhow::{Context, Result, bail};

use crate::{Fabric, Host, NetNs, netlink};

/// A host of `fabric` (label `node`) with bridge `bridge` holding `gateway/prefix`, and IPv4
/// forwarding on in its namespace.
pub fn node(fabric: &Fabric, bridge: &str, gateway: Ipv4Addr, prefix: u8) -> Result<Host> {
    let host = fabric.add_host("node")?;
    host.block_on(|| async {
        let handle = netlink::connect()?;
        netlink::add_bridge(&handle, bridge).await?;
        netlink::add_address(&handle, bridge, IpAddr::V4(gateway), prefix).await
    })?
    .context("make the node's bridge")?;
    let output = host
        .command("sysctl")
        .args(["-q", "-w", "net.ipv4.ip_forward=1"])
        .output()
        .context("run sysctl in the node")?;
    if !output.status.success() {
        bail!("sysctl net.ipv4.ip_forward=1 in the node: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(host)
}

/// A pod on the node's bridge: a namespace `<fabric prefix>-pod<n>` whose `eth0` (the peer of the
/// node's `veth<n>`, a port of `bridge`) holds `address/prefix`, with `lo` up and a default route via
/// `gateway`. Returns the namespace and the bridge port's name.
pub fn pod(
    fabric: &Fabric,
    node: &Host,
    bridge: &str,
    gateway: Ipv4Addr,
    address: Ipv4Addr,
    prefix: u8,
    n: u8,
) -> Result<(NetNs, String)> {
    let ns = NetNs::create(&format!("{}-pod{n}", fabric.prefix()))?;
    let port = format!("veth{n}");
    node.block_on(|| async {
        let handle = netlink::connect()?;
        let bridge = netlink::link_index(&handle, bridge).await?;
        netlink::add_veth_to_bridge(&handle, &port, "eth0", bridge, ns.fd()).await
    })?
    .with_context(|| format!("make pod {n}'s veth pair"))?;
    ns.block_on(|| async {
        let handle = netlink::connect()?;
        for link in ["lo", "eth0"] {
            netlink::set_up(&handle, link).await?;
        }
        netlink::add_address(&handle, "eth0", IpAddr::V4(address), prefix).await?;
        netlink::add_default_route(&handle, gateway).await
    })?
    .with_context(|| format!("configure pod {n}"))?;
    Ok((ns, port))
}
