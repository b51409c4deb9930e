//! The bridge plugin's commands over its three edges.
//!
//! ADD: the pod's namespace is checked first (usable, and no `CNI_IFNAME` there yet: nothing is
//! allocated for an ADD that cannot succeed), then allocate → bridge (and its gateway addresses, IP
//! forwarding) → veth pair → addresses and routes inside the pod → masquerade and hostPorts. A failure
//! undoes, in reverse order, every per-pod step done (hostPort rules, the veth pair — its addresses
//! and routes go with it —, the allocation). The bridge, its gateway addresses, forwarding and the
//! masquerade rule are the node's, shared with concurrent ADDs, and stay, as the reference leaves them.
//!
//! DEL: hostPort rules removed, the veth pair retired (see [`crate::dataplane`]), the allocation
//! released; each step runs even when an earlier one failed, and a missing namespace, link or
//! allocation is success.

use std::net::IpAddr;
use std::path::Path;

use ipnet::IpNet;

use crate::dataplane::{self, BridgeSpec, Dataplane, DataplaneError, Mac, PodConfig, PodRoute, VethSpec};
use crate::plugin::{Firewall, Ipam};
use crate::skel::{CmdArgs, Plugin};
use crate::spec::error;
use crate::spec::{Attachment, CniResult, Error, Interface, IpConfig, NetConf, Route};

/// keel-cni's plugin: a node bridge and a veth pair per attachment.
#[derive(Debug)]
pub struct BridgePlugin<I, F, D> {
    pub ipam: I,
    pub firewall: F,
    pub dataplane: D,
}

/// A dataplane failure as the spec's error.
#[expect(clippy::needless_pass_by_value, reason = "used as map_err(dataplane_error)")]
fn dataplane_error(err: DataplaneError) -> Error {
    match &err {
        DataplaneError::NetnsMissing(_) | DataplaneError::NetnsInvalid(..) => {
            Error::new(error::INVALID_NETNS, err.to_string())
        }
        DataplaneError::Conflict(_) => Error::config(err.to_string()),
        DataplaneError::Netlink(netlink) => {
            Error::new(error::KERNEL_REFUSED, netlink.op.clone()).with_details(netlink.source.to_string())
        }
        DataplaneError::Io { what, source } => Error::io(what.clone(), source),
    }
}

/// The first address of `subnet` after its network address (the reference's default gateway).
fn first_host(subnet: IpNet) -> IpAddr {
    match subnet.network() {
        IpAddr::V4(v4) => IpAddr::V4((u32::from(v4).wrapping_add(1)).into()),
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6).wrapping_add(1)).into()),
    }
}

fn default_route(v6: bool) -> IpNet {
    if v6 { IpNet::V6(ipnet::Ipv6Net::default()) } else { IpNet::V4(ipnet::Ipv4Net::default()) }
}

/// The MAC the runtime asks for: `runtimeConfig.mac` (the `mac` capability) over `CNI_ARGS` `MAC=`.
fn requested_mac(args: &CmdArgs, conf: &NetConf) -> Result<Option<Mac>, Error> {
    if let Some(text) = conf.runtime_config.mac.as_deref().filter(|text| !text.is_empty()) {
        return Mac::parse(text)
            .map(Some)
            .ok_or_else(|| Error::config(format!("invalid runtimeConfig.mac {text:?}")));
    }
    match args.arg("MAC").filter(|text| !text.is_empty()) {
        None => Ok(None),
        Some(text) => Mac::parse(text)
            .map(Some)
            .ok_or_else(|| Error::new(error::INVALID_ENVIRONMENT, format!("invalid CNI_ARGS MAC {text:?}"))),
    }
}

fn attachment(args: &CmdArgs) -> Attachment {
    Attachment { container_id: args.container_id.clone(), ifname: args.ifname.clone() }
}

fn netns(args: &CmdArgs) -> Result<&Path, Error> {
    args.netns.as_deref().ok_or_else(|| {
        Error::new(error::INVALID_ENVIRONMENT, "required environment variable CNI_NETNS is missing")
    })
}

/// What an ADD has done so far, for its undo.
#[derive(Default)]
struct Done {
    allocated: bool,
    veth: Option<String>,
    port_mappings: bool,
}

impl<I: Ipam, F: Firewall, D: Dataplane> BridgePlugin<I, F, D> {
    pub fn new(ipam: I, firewall: F, dataplane: D) -> Self {
        BridgePlugin { ipam, firewall, dataplane }
    }

    /// Called once the answer is written (the binary does): lets the dataplane finish what it deferred.
    pub fn finish(&mut self) {
        self.dataplane.finish();
    }

    fn add_steps(
        &mut self,
        args: &CmdArgs,
        conf: &NetConf,
        netns: &Path,
        requested_mac: Option<Mac>,
        done: &mut Done,
    ) -> Result<CniResult, Error> {
        let bridge_conf = &conf.bridge;
        let is_gateway = bridge_conf.is_gateway || bridge_conf.is_default_gateway;

        let allocated = self.ipam.allocate(args, conf)?;
        done.allocated = true;
        if allocated.ips.is_empty() {
            return Err(Error::config("the IPAM returned no address"));
        }
        let mut ips: Vec<IpConfig> = allocated.ips.clone();
        for ip in &mut ips {
            if ip.gateway.is_none() && is_gateway {
                ip.gateway = Some(first_host(ip.address.trunc()));
            }
        }

        let bridge = self
            .dataplane
            .ensure_bridge(&BridgeSpec {
                name: bridge_conf.bridge.clone(),
                mtu: bridge_conf.mtu.filter(|mtu| *mtu != 0),
                promisc: bridge_conf.promisc_mode,
            })
            .map_err(dataplane_error)?;
        if is_gateway {
            let mut families = (false, false);
            for ip in &ips {
                let Some(gateway) = ip.gateway else { continue };
                let address = IpNet::new(gateway, ip.address.prefix_len())
                    .map_err(|err| Error::config(format!("gateway {gateway}: {err}")))?;
                self.dataplane
                    .ensure_bridge_address(&bridge, address, bridge_conf.force_address)
                    .map_err(dataplane_error)?;
                if gateway.is_ipv4() {
                    families.0 = true;
                } else {
                    families.1 = true;
                }
            }
            for (wanted, v6) in [(families.0, false), (families.1, true)] {
                if wanted {
                    self.dataplane.enable_forwarding(v6).map_err(dataplane_error)?;
                }
            }
        }

        // The routes of the result: the IPAM's, and a default route per family through the gateway
        // when isDefaultGateway (unless the IPAM already gives one).
        let mut routes: Vec<Route> = allocated.routes.clone();
        if bridge_conf.is_default_gateway {
            for ip in &ips {
                let v6 = ip.address.addr().is_ipv6();
                let has_default = routes
                    .iter()
                    .any(|route| route.dst.prefix_len() == 0 && route.dst.addr().is_ipv6() == v6);
                if let (false, Some(gateway)) = (has_default, ip.gateway) {
                    routes.push(Route::new(default_route(v6), Some(gateway)));
                }
            }
        }

        let host_name = dataplane::host_veth_name(&args.container_id, &args.ifname);
        let host_mac = Mac::random();
        let pod_mac = requested_mac.unwrap_or_else(|| Mac::for_address(ips[0].address.addr()));
        let spec = VethSpec {
            host_name: host_name.clone(),
            host_mac,
            pod_netns: netns.to_owned(),
            pod_ifname: args.ifname.clone(),
            pod_mac,
            mtu: bridge_conf.mtu.filter(|mtu| *mtu != 0),
            bridge_index: bridge.index,
            hairpin: bridge_conf.hairpin_mode,
        };
        let veth = match self.dataplane.add_veth(&spec) {
            // A host end of this attachment's name while its pod interface is absent (checked above) is
            // the leftover of an ADD killed before its undo: destroyed, then created again.
            Err(DataplaneError::Netlink(err))
                if err.is_exists() && matches!(self.dataplane.host_link(&host_name), Ok(Some(_))) =>
            {
                self.dataplane.delete_veth(&host_name).map_err(dataplane_error)?;
                self.dataplane.add_veth(&spec)
            }
            other => other,
        }
        .map_err(dataplane_error)?;
        done.veth = Some(host_name.clone());

        // A route without a gateway goes through the family's gateway, as the reference configures it.
        let family_gateway =
            |v6: bool| ips.iter().find(|ip| ip.address.addr().is_ipv6() == v6).and_then(|ip| ip.gateway);
        let pod_routes = routes
            .iter()
            .map(|route| PodRoute {
                dst: route.dst.trunc(),
                gw: route.gw.or_else(|| family_gateway(route.dst.addr().is_ipv6())),
            })
            .collect();
        self.dataplane
            .configure_pod(&PodConfig {
                netns: netns.to_owned(),
                ifname: args.ifname.clone(),
                index: veth.pod_index,
                addresses: ips.iter().map(|ip| ip.address).collect(),
                routes: pod_routes,
            })
            .map_err(dataplane_error)?;

        let pod_ips: Vec<IpAddr> = ips.iter().map(|ip| ip.address.addr()).collect();
        if bridge_conf.ip_masq {
            let mut sources: Vec<IpNet> = ips.iter().map(|ip| ip.address.trunc()).collect();
            sources.dedup();
            let exclude = if bridge_conf.cluster_cidrs.is_empty() {
                sources.clone()
            } else {
                bridge_conf.cluster_cidrs.clone()
            };
            self.firewall.ensure_masquerade(&bridge.name, &sources, &exclude)?;
        }
        let mappings = &conf.runtime_config.port_mappings;
        if !mappings.is_empty() {
            done.port_mappings = true;
            self.firewall.add_port_mappings(&attachment(args), &bridge.name, &pod_ips, mappings)?;
        }

        // The result: the previous plugin's entries, then ours.
        let mut result = conf.prev_result.clone().unwrap_or_default();
        let first = result.interfaces.len();
        result.interfaces.push(Interface {
            name: bridge.name.clone(),
            mac: bridge.mac.to_string(),
            mtu: Some(bridge.mtu),
            ..Interface::default()
        });
        result.interfaces.push(Interface {
            name: host_name,
            mac: host_mac.to_string(),
            mtu: Some(veth.mtu),
            ..Interface::default()
        });
        result.interfaces.push(Interface {
            name: args.ifname.clone(),
            mac: pod_mac.to_string(),
            mtu: Some(veth.mtu),
            sandbox: netns.display().to_string(),
            ..Interface::default()
        });
        result.ips.extend(ips.into_iter().map(|ip| IpConfig { interface: Some(first + 2), ..ip }));
        result.routes.extend(routes);
        if !conf.dns.is_empty() {
            result.dns = conf.dns.clone();
        } else if !allocated.dns.is_empty() {
            result.dns = allocated.dns;
        }
        Ok(result)
    }

    /// Undoes what a failed ADD did, newest first; an undo that fails is added to the error's details.
    fn undo(&mut self, args: &CmdArgs, conf: &NetConf, done: Done, mut err: Error) -> Error {
        let mut failures = Vec::new();
        if done.port_mappings
            && let Err(undo) = self.firewall.remove_port_mappings(&attachment(args))
        {
            failures.push(format!("remove hostPort rules: {undo}"));
        }
        if let Some(host_name) = done.veth
            && let Err(undo) = self.dataplane.delete_veth(&host_name)
        {
            failures.push(format!("delete veth {host_name}: {undo}"));
        }
        if done.allocated
            && let Err(undo) = self.ipam.release(args, conf)
        {
            failures.push(format!("release the allocation: {undo}"));
        }
        if !failures.is_empty() {
            let undo = format!("undo failed: {}", failures.join("; "));
            err.details = if err.details.is_empty() { undo } else { format!("{}; {undo}", err.details) };
        }
        err
    }
}

impl<I: Ipam, F: Firewall, D: Dataplane> Plugin for BridgePlugin<I, F, D> {
    fn add(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<CniResult, Error> {
        if conf.bridge.hairpin_mode && conf.bridge.promisc_mode {
            return Err(Error::config("hairpinMode and promiscMode cannot both be set"));
        }
        let requested_mac = requested_mac(args, conf)?;
        let netns = netns(args)?;
        match self.dataplane.pod_link(netns, &args.ifname).map_err(dataplane_error)? {
            None => {}
            Some(_) => {
                return Err(Error::new(
                    error::INTERFACE_EXISTS,
                    format!("interface {} already exists in {}", args.ifname, netns.display()),
                ));
            }
        }
        let mut done = Done::default();
        match self.add_steps(args, conf, netns, requested_mac, &mut done) {
            Ok(result) => Ok(result),
            Err(err) => Err(self.undo(args, conf, done, err)),
        }
    }

    fn del(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error> {
        let mut first: Option<Error> = None;
        if !conf.runtime_config.port_mappings.is_empty()
            && let Err(err) = self.firewall.remove_port_mappings(&attachment(args))
        {
            first.get_or_insert(err);
        }
        let host_name = dataplane::host_veth_name(&args.container_id, &args.ifname);
        if let Err(err) = self.dataplane.retire_veth(args.netns.as_deref(), &args.ifname, &host_name) {
            first.get_or_insert(dataplane_error(err));
        }
        if let Err(err) = self.ipam.release(args, conf) {
            first.get_or_insert(err);
        }
        first.map_or(Ok(()), Err)
    }

    fn check(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error> {
        let prev = conf
            .prev_result
            .as_ref()
            .ok_or_else(|| Error::config("CHECK needs the ADD's result as prevResult"))?;
        let netns = netns(args)?;
        let drift = |what: String| Error::new(error::DRIFT, what);
        let Some(pod) = self.dataplane.pod_link(netns, &args.ifname).map_err(dataplane_error)? else {
            return Err(drift(format!("pod interface {} is missing from {}", args.ifname, netns.display())));
        };
        // Our pod interface in the result: named CNI_IFNAME, in this sandbox.
        let pod_interface = prev
            .interfaces
            .iter()
            .position(|interface| interface.name == args.ifname && Path::new(&interface.sandbox) == netns);
        if let Some(expected) = pod_interface.and_then(|index| Mac::parse(&prev.interfaces[index].mac))
            && expected != pod.mac
        {
            return Err(drift(format!("pod interface {} has MAC {}, not {expected}", args.ifname, pod.mac)));
        }
        if !pod.up {
            return Err(drift(format!("pod interface {} is down", args.ifname)));
        }
        let ours: Vec<&IpConfig> = prev
            .ips
            .iter()
            .filter(|ip| pod_interface.is_none() || ip.interface.is_none() || ip.interface == pod_interface)
            .collect();
        for ip in &ours {
            if !pod.addresses.contains(&ip.address) {
                return Err(drift(format!(
                    "address {} is missing from pod interface {}",
                    ip.address, args.ifname
                )));
            }
        }
        let family_gateway =
            |v6: bool| ours.iter().find(|ip| ip.address.addr().is_ipv6() == v6).and_then(|ip| ip.gateway);
        for route in &prev.routes {
            let dst = route.dst.trunc();
            let gw = route.gw.or_else(|| family_gateway(dst.addr().is_ipv6()));
            if !pod.routes.iter().any(|present| present.dst == dst && (gw.is_none() || present.gw == gw)) {
                let via = gw.map(|gw| format!(" via {gw}")).unwrap_or_default();
                return Err(drift(format!("route {dst}{via} is missing from the pod")));
            }
        }
        let host_name = dataplane::host_veth_name(&args.container_id, &args.ifname);
        let Some(host) = self.dataplane.host_link(&host_name).map_err(dataplane_error)? else {
            return Err(drift(format!("host end {host_name} of the pod's veth pair is missing")));
        };
        let bridge = self.dataplane.bridge(&conf.bridge.bridge).map_err(dataplane_error)?;
        match bridge {
            None => return Err(drift(format!("bridge {} is missing", conf.bridge.bridge))),
            Some(bridge) if host.controller != Some(bridge.index) => {
                return Err(drift(format!("host end {host_name} is not a port of bridge {}", bridge.name)));
            }
            Some(_) => {}
        }
        let addresses: Vec<IpAddr> = ours.iter().map(|ip| ip.address.addr()).collect();
        self.ipam.check(args, conf, &addresses)?;
        let mappings = &conf.runtime_config.port_mappings;
        if !mappings.is_empty() {
            self.firewall.check_port_mappings(&attachment(args), mappings)?;
        }
        Ok(())
    }

    fn status(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error> {
        self.ipam.status(args, conf)
    }

    fn gc(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error> {
        let valid = conf
            .valid_attachments
            .as_deref()
            .ok_or_else(|| Error::config("GC needs cni.dev/valid-attachments"))?;
        let mut first: Option<Error> = None;
        if let Err(err) = self.ipam.gc(args, conf, valid) {
            first.get_or_insert(err);
        }
        if let Err(err) = self.firewall.gc(valid) {
            first.get_or_insert(err);
        }
        if let Err(err) = self.dataplane.delete_tombstones() {
            first.get_or_insert(dataplane_error(err));
        }
        first.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
#[path = "bridge_tests.rs"]
mod tests;
