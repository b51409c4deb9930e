//! An in-memory dataplane for unit tests of the plugin's orchestration: it keeps bridges, veth pairs,
//! pod addresses and routes as plain data, records every call, and fails the operation it is told to.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

use ipnet::IpNet;

use crate::dataplane::{
    Bridge, BridgeSpec, Dataplane, DataplaneError, HostLink, Mac, PodConfig, PodLink, PodRoute,
    TOMBSTONE_PREFIX, Veth, VethSpec,
};
use crate::netlink::NetlinkError;

/// A veth pair in the fake kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeVeth {
    pub host_name: String,
    pub host_index: u32,
    pub host_mac: Mac,
    pub controller: Option<u32>,
    pub hairpin: bool,
    pub netns: PathBuf,
    pub pod_ifname: String,
    pub pod_index: u32,
    pub pod_mac: Mac,
    pub up: bool,
    pub addresses: Vec<IpNet>,
    pub routes: Vec<PodRoute>,
}

/// The fake kernel.
#[derive(Debug, Clone, Default)]
pub struct FakeDataplane {
    /// Bridges by name, with their addresses.
    pub bridges: BTreeMap<String, (Bridge, Vec<IpNet>)>,
    /// IP forwarding turned on: (IPv4, IPv6).
    pub forwarding: (bool, bool),
    /// The network namespaces that exist.
    pub namespaces: BTreeSet<PathBuf>,
    pub veths: Vec<FakeVeth>,
    /// Host ends retired by DEL and not destroyed yet.
    pub retired: Vec<String>,
    /// The operation (method name) that fails with EPERM, if any.
    pub fail: Option<&'static str>,
    /// Every call, by method name.
    pub calls: Vec<&'static str>,
    next_index: u32,
}

impl FakeDataplane {
    /// A fake kernel with one pod namespace, `/run/netns/pod`.
    pub fn new() -> FakeDataplane {
        FakeDataplane {
            namespaces: [PathBuf::from("/run/netns/pod")].into(),
            next_index: 10,
            ..Default::default()
        }
    }

    /// What a test compares before and after an operation that must leave nothing behind.
    pub fn pod_state(&self) -> (Vec<FakeVeth>, Vec<String>) {
        (self.veths.clone(), self.retired.clone())
    }

    fn enter(&mut self, call: &'static str) -> Result<(), DataplaneError> {
        self.calls.push(call);
        if self.fail == Some(call) {
            return Err(DataplaneError::Netlink(NetlinkError::new(
                format!("fake {call}"),
                io::Error::from_raw_os_error(libc::EPERM),
            )));
        }
        Ok(())
    }

    fn netns(&self, netns: &Path) -> Result<(), DataplaneError> {
        if self.namespaces.contains(netns) {
            Ok(())
        } else {
            Err(DataplaneError::NetnsMissing(netns.to_owned()))
        }
    }

    fn index(&mut self) -> u32 {
        self.next_index += 1;
        self.next_index
    }
}

impl Dataplane for FakeDataplane {
    fn pod_link(&mut self, netns: &Path, ifname: &str) -> Result<Option<PodLink>, DataplaneError> {
        self.enter("pod_link")?;
        self.netns(netns)?;
        Ok(self.veths.iter().find(|veth| veth.netns == netns && veth.pod_ifname == ifname).map(|veth| {
            PodLink {
                index: veth.pod_index,
                mac: veth.pod_mac,
                up: veth.up,
                addresses: veth.addresses.clone(),
                routes: veth.routes.clone(),
            }
        }))
    }

    fn ensure_bridge(&mut self, spec: &BridgeSpec) -> Result<Bridge, DataplaneError> {
        self.enter("ensure_bridge")?;
        if let Some((bridge, _)) = self.bridges.get(&spec.name) {
            return Ok(bridge.clone());
        }
        let bridge = Bridge {
            name: spec.name.clone(),
            index: self.index(),
            mac: Mac([2, 0, 0, 0, 0, 1]),
            mtu: spec.mtu.unwrap_or(1500),
        };
        self.bridges.insert(spec.name.clone(), (bridge.clone(), Vec::new()));
        Ok(bridge)
    }

    fn bridge(&mut self, name: &str) -> Result<Option<Bridge>, DataplaneError> {
        self.enter("bridge")?;
        Ok(self.bridges.get(name).map(|(bridge, _)| bridge.clone()))
    }

    fn ensure_bridge_address(
        &mut self,
        bridge: &Bridge,
        address: IpNet,
        force: bool,
    ) -> Result<(), DataplaneError> {
        self.enter("ensure_bridge_address")?;
        let Some((_, addresses)) = self.bridges.get_mut(&bridge.name) else {
            return Err(DataplaneError::Conflict(format!("no bridge {}", bridge.name)));
        };
        if addresses.contains(&address) {
            return Ok(());
        }
        let conflicting = crate::dataplane::conflicting_addresses(addresses, address);
        if !conflicting.is_empty() && !force {
            return Err(DataplaneError::Conflict(format!("bridge has {conflicting:?}")));
        }
        addresses.retain(|existing| !conflicting.contains(existing));
        addresses.push(address);
        Ok(())
    }

    fn enable_forwarding(&mut self, ipv6: bool) -> Result<(), DataplaneError> {
        self.enter("enable_forwarding")?;
        if ipv6 {
            self.forwarding.1 = true;
        } else {
            self.forwarding.0 = true;
        }
        Ok(())
    }

    fn add_veth(&mut self, spec: &VethSpec) -> Result<Veth, DataplaneError> {
        self.enter("add_veth")?;
        self.netns(&spec.pod_netns)?;
        let exists = self.veths.iter().any(|veth| {
            veth.host_name == spec.host_name
                || (veth.netns == spec.pod_netns && veth.pod_ifname == spec.pod_ifname)
        });
        if exists {
            return Err(DataplaneError::Netlink(NetlinkError::new(
                "fake add_veth",
                io::Error::from_raw_os_error(libc::EEXIST),
            )));
        }
        let veth = FakeVeth {
            host_name: spec.host_name.clone(),
            host_index: self.index(),
            host_mac: spec.host_mac,
            controller: Some(spec.bridge_index),
            hairpin: spec.hairpin,
            netns: spec.pod_netns.clone(),
            pod_ifname: spec.pod_ifname.clone(),
            pod_index: self.index(),
            pod_mac: spec.pod_mac,
            up: false,
            addresses: Vec::new(),
            routes: Vec::new(),
        };
        let created =
            Veth { host_index: veth.host_index, pod_index: veth.pod_index, mtu: spec.mtu.unwrap_or(1500) };
        self.veths.push(veth);
        Ok(created)
    }

    fn configure_pod(&mut self, config: &PodConfig) -> Result<(), DataplaneError> {
        self.enter("configure_pod")?;
        let Some(veth) =
            self.veths.iter_mut().find(|veth| veth.netns == config.netns && veth.pod_index == config.index)
        else {
            return Err(DataplaneError::Conflict("no such pod link".into()));
        };
        veth.addresses.extend(&config.addresses);
        veth.up = true;
        veth.routes.extend(&config.routes);
        Ok(())
    }

    fn delete_veth(&mut self, host_name: &str) -> Result<(), DataplaneError> {
        self.enter("delete_veth")?;
        self.veths.retain(|veth| veth.host_name != host_name);
        Ok(())
    }

    fn host_link(&mut self, host_name: &str) -> Result<Option<HostLink>, DataplaneError> {
        self.enter("host_link")?;
        Ok(self.veths.iter().find(|veth| veth.host_name == host_name).map(|veth| HostLink {
            index: veth.host_index,
            mac: veth.host_mac,
            controller: veth.controller,
        }))
    }

    fn retire_veth(
        &mut self,
        _netns: Option<&Path>,
        _ifname: &str,
        host_name: &str,
    ) -> Result<(), DataplaneError> {
        self.enter("retire_veth")?;
        if let Some(veth) = self.veths.iter_mut().find(|veth| veth.host_name == host_name) {
            let tombstone = format!("{TOMBSTONE_PREFIX}{:x}", veth.host_index);
            veth.host_name = tombstone.clone();
            veth.pod_ifname = tombstone.clone();
            veth.controller = None;
            veth.up = false;
            self.retired.push(tombstone);
        }
        Ok(())
    }

    fn delete_tombstones(&mut self) -> Result<(), DataplaneError> {
        self.enter("delete_tombstones")?;
        self.veths.retain(|veth| !veth.host_name.starts_with(TOMBSTONE_PREFIX));
        self.retired.clear();
        Ok(())
    }

    fn finish(&mut self) {
        self.calls.push("finish");
        let retired = std::mem::take(&mut self.retired);
        self.veths.retain(|veth| !retired.contains(&veth.host_name));
    }
}
