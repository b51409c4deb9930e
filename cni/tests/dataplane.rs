//! The kernel dataplane on its own (no IPAM, no binary), in a node namespace and a pod namespace: what
//! each operation leaves in the kernel, read back with `ip -j`, and traffic over it.

use crate::common;

use std::path::Path;

use common::{addresses, link, links, netns, reach, routes};
use keel_cni::dataplane::kernel::Kernel;
use keel_cni::dataplane::{
    BridgeSpec, Dataplane, DataplaneError, Mac, PodConfig, PodRoute, TOMBSTONE_PREFIX, VethSpec,
    host_veth_name,
};

fn veth(pod: &Path, bridge_index: u32) -> VethSpec {
    VethSpec {
        host_name: host_veth_name("c1", "eth0"),
        host_mac: Mac::random(),
        pod_netns: pod.to_owned(),
        pod_ifname: "eth0".into(),
        pod_mac: Mac([0x0a, 0x58, 10, 244, 1, 2]),
        mtu: Some(1450),
        bridge_index,
        hairpin: true,
    }
}

#[test]
fn kernel_dataplane_wires_a_dual_stack_pod_and_retires_it() {
    let node = netns("node");
    let pod = netns("pod");
    let pod_path = pod.path().to_owned();
    let host = host_veth_name("c1", "eth0");
    let path = pod_path.clone();
    let host_name = host.clone();
    let retired = node
        .run(move || {
            let mut kernel = Kernel::new();
            let spec = BridgeSpec { name: "cni0".into(), mtu: Some(1450), promisc: false };
            let bridge = kernel.ensure_bridge(&spec).unwrap();
            // Taken again as it is.
            assert_eq!(kernel.ensure_bridge(&spec).unwrap(), bridge);
            kernel.ensure_bridge_address(&bridge, "10.244.1.1/24".parse().unwrap(), false).unwrap();
            kernel.ensure_bridge_address(&bridge, "10.244.1.1/24".parse().unwrap(), false).unwrap();
            kernel.ensure_bridge_address(&bridge, "fd00:1::1/64".parse().unwrap(), false).unwrap();
            kernel.enable_forwarding(false).unwrap();
            kernel.enable_forwarding(true).unwrap();
            assert!(kernel.pod_link(&path, "eth0").unwrap().is_none());
            let veth = kernel.add_veth(&veth(&path, bridge.index)).unwrap();
            assert_eq!(veth.mtu, 1450);
            let gw4 = "10.244.1.1".parse().ok();
            let gw6 = "fd00:1::1".parse().ok();
            kernel
                .configure_pod(&PodConfig {
                    netns: path.clone(),
                    ifname: "eth0".into(),
                    index: veth.pod_index,
                    addresses: vec!["10.244.1.2/24".parse().unwrap(), "fd00:1::2/64".parse().unwrap()],
                    routes: vec![
                        PodRoute { dst: "0.0.0.0/0".parse().unwrap(), gw: gw4 },
                        PodRoute { dst: "::/0".parse().unwrap(), gw: gw6 },
                    ],
                })
                .unwrap();
            let pod_link = kernel.pod_link(&path, "eth0").unwrap().unwrap();
            assert_eq!(pod_link.index, veth.pod_index);
            assert!(pod_link.up);
            assert!(pod_link.addresses.contains(&"fd00:1::2/64".parse().unwrap()));
            assert!(pod_link.routes.contains(&PodRoute { dst: "0.0.0.0/0".parse().unwrap(), gw: gw4 }));
            let host_link = kernel.host_link(&host_name).unwrap().unwrap();
            assert_eq!(host_link.controller, Some(bridge.index));
            // Another IPv4 address on the bridge is refused without forceAddress, replaces it with.
            let other = "10.244.2.1/24".parse().unwrap();
            assert!(matches!(
                kernel.ensure_bridge_address(&bridge, other, false),
                Err(DataplaneError::Conflict(_))
            ));
            (bridge, veth)
        })
        .unwrap();
    let (bridge, _) = retired;

    // The node: a bridge with a fixed MAC, up, its gateway addresses; the host end on it in hairpin mode.
    let cni0 = link(&node, "cni0").unwrap();
    assert_eq!(cni0["mtu"], 1450);
    assert_eq!(cni0["address"], bridge.mac.to_string());
    assert!(cni0["flags"].as_array().unwrap().iter().any(|flag| flag == "UP"));
    assert_eq!(addresses(&node, "cni0"), vec!["10.244.1.1/24", "fd00:1::1/64"]);
    let host_end = link(&node, &host).unwrap();
    assert_eq!(host_end["master"], "cni0");
    assert_eq!(host_end["linkinfo"]["info_slave_data"]["hairpin"], true);
    // The pod: eth0 with its MAC, MTU, addresses (IPv6 usable at once) and routes; loopback up.
    let eth0 = link(&pod, "eth0").unwrap();
    assert_eq!(eth0["address"], "0a:58:0a:f4:01:02");
    assert_eq!(eth0["mtu"], 1450);
    assert_eq!(addresses(&pod, "eth0"), vec!["10.244.1.2/24", "fd00:1::2/64"]);
    assert!(!ip_has_flag(&pod, "fd00:1::2", "tentative"));
    assert_eq!(
        routes(&pod),
        vec![
            "10.244.1.0/24 dev eth0",
            "default via fd00:1::1 dev eth0",
            "default via 10.244.1.1 dev eth0",
            "fd00:1::/64 dev eth0",
        ]
        .into_iter()
        .map(String::from)
        .collect::<Vec<_>>()
        .tap_sort()
    );
    assert!(link(&pod, "lo").unwrap()["flags"].as_array().unwrap().iter().any(|flag| flag == "UP"));
    reach(&pod, &node, "10.244.1.1".parse().unwrap());
    reach(&pod, &node, "fd00:1::1".parse().unwrap());

    // forceAddress replaces the bridge's IPv4 address; its IPv6 one (not overlapping) stays.
    let replaced = bridge.clone();
    node.run(move || {
        Kernel::new().ensure_bridge_address(&replaced, "10.244.2.1/24".parse().unwrap(), true).unwrap();
    })
    .unwrap();
    assert_eq!(addresses(&node, "cni0"), vec!["10.244.2.1/24", "fd00:1::1/64"]);

    // Retired: eth0 is free at once, the host end is off the bridge, both are tombstones until deleted.
    let path = pod_path.clone();
    let host_name = host.clone();
    node.run(move || Kernel::new().retire_veth(Some(&path), "eth0", &host_name).unwrap()).unwrap();
    assert!(link(&pod, "eth0").is_none());
    let tombstones: Vec<String> =
        links(&node).into_iter().filter(|name| name.starts_with(TOMBSTONE_PREFIX)).collect();
    assert_eq!(tombstones.len(), 1);
    assert!(link(&node, &tombstones[0]).unwrap().get("master").is_none());
    assert!(links(&pod).iter().any(|name| name == &tombstones[0]));
    // Retiring again (DEL twice) is a success; GC destroys the tombstones.
    let path = pod_path.clone();
    node.run(move || {
        let mut kernel = Kernel::new();
        kernel.retire_veth(Some(&path), "eth0", &host_veth_name("c1", "eth0")).unwrap();
        kernel.delete_tombstones().unwrap();
    })
    .unwrap();
    assert_eq!(links(&node), vec!["cni0", "lo"]);
    assert_eq!(links(&pod), vec!["lo"]);
}

#[test]
fn kernel_dataplane_keeps_a_promiscuous_bridge_and_refuses_a_non_bridge_of_its_name() {
    let node = netns("node");
    node.run(|| {
        let mut kernel = Kernel::new();
        let spec = BridgeSpec { name: "cni1".into(), mtu: None, promisc: true };
        kernel.ensure_bridge(&spec).unwrap();
        kernel.ensure_bridge(&spec).unwrap();
    })
    .unwrap();
    let cni1 = link(&node, "cni1").unwrap();
    assert_eq!(cni1["promiscuity"], 1);
    assert!(cni1["flags"].as_array().unwrap().iter().any(|flag| flag == "PROMISC"));
    let made = node.command("ip").args(["link", "add", "cni2", "type", "veth", "peer", "cni2p"]).status();
    assert!(made.unwrap().success());
    node.run(|| {
        let spec = BridgeSpec { name: "cni2".into(), mtu: None, promisc: false };
        assert!(matches!(Kernel::new().ensure_bridge(&spec), Err(DataplaneError::Conflict(_))));
    })
    .unwrap();
}

#[test]
fn kernel_dataplane_refuses_a_missing_or_unusable_namespace() {
    let node = netns("node");
    node.run(|| {
        let mut kernel = Kernel::new();
        assert!(matches!(
            kernel.pod_link(Path::new("/run/netns/keel-does-not-exist"), "eth0"),
            Err(DataplaneError::NetnsMissing(_))
        ));
        assert!(matches!(
            kernel.pod_link(Path::new("/etc/hostname"), "eth0"),
            Err(DataplaneError::NetnsInvalid(..))
        ));
        assert!(matches!(
            kernel.pod_link(Path::new("/proc/thread-self/ns/net"), "eth0"),
            Err(DataplaneError::NetnsInvalid(..))
        ));
    })
    .unwrap();
}

fn ip_has_flag(ns: &keel_testbed::NetNs, address: &str, flag: &str) -> bool {
    common::ip(ns, &["address", "show"])
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|link| link["addr_info"].as_array().cloned().unwrap_or_default())
        .any(|info| info["local"] == address && info.get(flag).is_some())
}

trait TapSort {
    fn tap_sort(self) -> Self;
}

impl TapSort for Vec<String> {
    fn tap_sort(mut self) -> Self {
        self.sort();
        self
    }
}
