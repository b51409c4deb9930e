//! The few rtnetlink operations the fabric needs, each on a connection opened inside one namespace
//! (a netlink socket acts on the namespace it was created in).

use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;

use anyhow::{Context, Result, anyhow};
use futures::TryStreamExt;
use rtnetlink::{Handle, LinkBridge, LinkUnspec, LinkVeth, RouteMessageBuilder};

use crate::netns::NetNsFd;

/// Opens a route-netlink connection in the namespace of the calling thread and drives it on the current
/// tokio runtime.
pub(crate) fn connect() -> Result<Handle> {
    let (connection, handle, _) = rtnetlink::new_connection().context("open a route netlink socket")?;
    tokio::spawn(connection);
    Ok(handle)
}

pub(crate) async fn link_index(handle: &Handle, name: &str) -> Result<u32> {
    let link = handle
        .link()
        .get()
        .match_name(name.to_owned())
        .execute()
        .try_next()
        .await
        .with_context(|| format!("look up link {name}"))?
        .ok_or_else(|| anyhow!("link {name} not found"))?;
    Ok(link.header.index)
}

pub(crate) async fn set_up(handle: &Handle, name: &str) -> Result<()> {
    let index = link_index(handle, name).await?;
    handle
        .link()
        .set(LinkUnspec::new_with_index(index).up().build())
        .execute()
        .await
        .with_context(|| format!("set link {name} up"))
}

pub(crate) async fn add_bridge(handle: &Handle, name: &str) -> Result<u32> {
    handle
        .link()
        .add(LinkBridge::new(name).build())
        .execute()
        .await
        .with_context(|| format!("create bridge {name}"))?;
    set_up(handle, name).await?;
    link_index(handle, name).await
}

/// Creates a veth pair `name`/`peer`, attaches `name` to the bridge `bridge_index` and sets it up, and
/// moves `peer` into the namespace `peer_ns`.
pub(crate) async fn add_veth_to_bridge(
    handle: &Handle,
    name: &str,
    peer: &str,
    bridge_index: u32,
    peer_ns: &NetNsFd,
) -> Result<()> {
    handle
        .link()
        .add(LinkVeth::new(name, peer).build())
        .execute()
        .await
        .with_context(|| format!("create veth pair {name}/{peer}"))?;
    let index = link_index(handle, name).await?;
    handle
        .link()
        .set(LinkUnspec::new_with_index(index).controller(bridge_index).up().build())
        .execute()
        .await
        .with_context(|| format!("attach {name} to the bridge"))?;
    let peer_index = link_index(handle, peer).await?;
    handle
        .link()
        .set(LinkUnspec::new_with_index(peer_index).setns_by_fd(peer_ns.as_fd().as_raw_fd()).build())
        .execute()
        .await
        .with_context(|| format!("move {peer} into the host namespace"))
}

pub(crate) async fn rename_and_up(handle: &Handle, from: &str, to: &str) -> Result<()> {
    let index = link_index(handle, from).await?;
    handle
        .link()
        .set(LinkUnspec::new_with_index(index).name(to.to_owned()).up().build())
        .execute()
        .await
        .with_context(|| format!("rename link {from} to {to}"))
}

pub(crate) async fn add_address(handle: &Handle, link: &str, address: IpAddr, prefix_len: u8) -> Result<()> {
    let index = link_index(handle, link).await?;
    handle
        .address()
        .add(index, address, prefix_len)
        .execute()
        .await
        .with_context(|| format!("add address {address}/{prefix_len} to {link}"))
}

pub(crate) async fn add_default_route(handle: &Handle, gateway: Ipv4Addr) -> Result<()> {
    let route = RouteMessageBuilder::<Ipv4Addr>::new().gateway(gateway).build();
    handle.route().add(route).execute().await.with_context(|| format!("add default route via {gateway}"))
}
