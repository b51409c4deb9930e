//! Acceptance: the reference chain (containernetworking-plugins' `bridge` with `host-local` IPAM) and
//! keel-cni run side by side on the same configurations give the same CNI result fields. Each side
//! runs in a fresh node namespace of its own, with its own pod namespace and IPAM data dir; keel-cni
//! gets the reference configuration with `type` changed (and `ipam.type` dropped: its built-in IPAM).
//!
//! Values that are random on both sides (MACs, the reference's host veth names) are checked for form
//! and then compared as placeholders; differences keel-cni chooses are listed in
//! [`CHOSEN_DIFFERENCES`], each with its reason.
//!
//! A second test runs both on one node and one data dir, as a node moving from the reference chain to
//! keel-cni: each sees and releases the other's allocations.

use crate::runner;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use keel_testbed::{NetNs, unique_prefix};
use runner::{Invocation, KEEL_CNI, allocations, reference_bridge, run};
use serde_json::{Value, json};

/// When a chosen difference applies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum When {
    Always,
    /// Only when the field is an empty object or array on both sides (a real value is still compared).
    Empty,
}

/// Fields where keel-cni's result differs from the reference on purpose: (JSON pointer into the
/// result, when, reason). They are removed from both results before comparing.
const CHOSEN_DIFFERENCES: &[(&str, When, &str)] = &[
    (
        "/interfaces/1/name",
        When::Always,
        "the host end of the veth: the reference names it veth + 8 random hex digits; keel-cni derives the \
         same form from the container ID and ifname, so a repeated or interrupted ADD finds its own link",
    ),
    (
        "/dns",
        When::Empty,
        "the reference writes `\"dns\":{}` when the configuration has none; keel-cni leaves an empty dns \
         out (optional in every spec version; libcni reads both alike)",
    ),
];

fn is_empty(value: &Value) -> bool {
    value.as_object().is_some_and(serde_json::Map::is_empty) || value.as_array().is_some_and(Vec::is_empty)
}

/// `result` without the chosen differences.
fn without_chosen_differences(result: &Value) -> Value {
    let mut result = result.clone();
    for (pointer, when, _reason) in CHOSEN_DIFFERENCES {
        let (parent, key) = pointer.rsplit_once('/').expect("a pointer with a parent");
        let parent = if parent.is_empty() { Some(&mut result) } else { result.pointer_mut(parent) };
        if let Some(object) = parent.and_then(Value::as_object_mut)
            && (*when == When::Always || object.get(key).is_some_and(is_empty))
        {
            object.remove(key);
        }
    }
    result
}

const NETWORK: &str = "refnet";
const CONTAINER_ID: &str = "ctr-0123456789abcdef";

/// One configuration both plugins run, in the reference form.
struct Case {
    name: &'static str,
    conf: Value,
}

fn cases() -> Vec<Case> {
    let v4 = |version: &str| {
        json!({"cniVersion": version, "name": NETWORK, "type": "bridge", "bridge": "cni0", "isGateway": true,
               "ipam": {"type": "host-local", "subnet": "10.22.0.0/24"}})
    };
    vec![
        Case { name: "v4 single range, 1.0.0", conf: v4("1.0.0") },
        Case { name: "v4 single range, 0.4.0", conf: v4("0.4.0") },
        Case { name: "v4 single range, 0.3.1", conf: v4("0.3.1") },
        Case {
            name: "dual-stack, 1.0.0",
            conf: json!({"cniVersion": "1.0.0", "name": NETWORK, "type": "bridge", "bridge": "cni0",
                         "isGateway": true,
                         "ipam": {"type": "host-local",
                                  "ranges": [[{"subnet": "10.22.0.0/24"}], [{"subnet": "fd00:22::/64"}]]}}),
        },
        Case {
            name: "dual-stack isDefaultGateway, 0.3.1",
            conf: json!({"cniVersion": "0.3.1", "name": NETWORK, "type": "bridge", "bridge": "cni0",
                         "isDefaultGateway": true,
                         "ipam": {"type": "host-local",
                                  "ranges": [[{"subnet": "10.22.0.0/24"}], [{"subnet": "fd00:22::/64"}]]}}),
        },
        Case {
            name: "isDefaultGateway, 1.0.0",
            conf: json!({"cniVersion": "1.0.0", "name": NETWORK, "type": "bridge", "bridge": "kbr0",
                         "isDefaultGateway": true, "mtu": 1400,
                         "ipam": {"type": "host-local", "subnet": "10.22.0.0/24"}}),
        },
        Case {
            name: "ipam routes, range and gateway, 1.0.0",
            conf: json!({"cniVersion": "1.0.0", "name": NETWORK, "type": "bridge", "bridge": "cni0",
                         "isGateway": true,
                         "ipam": {"type": "host-local",
                                  "ranges": [[{"subnet": "10.22.0.0/24", "rangeStart": "10.22.0.100",
                                               "rangeEnd": "10.22.0.110", "gateway": "10.22.0.254"}]],
                                  "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.22.0.254"}]}}),
        },
        Case {
            name: "dns, 1.0.0",
            conf: json!({"cniVersion": "1.0.0", "name": NETWORK, "type": "bridge", "bridge": "cni0",
                         "isGateway": true, "dns": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"]},
                         "ipam": {"type": "host-local", "subnet": "10.22.0.0/24"}}),
        },
    ]
}

/// The same configuration for keel-cni: its type, its built-in IPAM.
fn keel_form(conf: &Value) -> Value {
    let mut conf = conf.clone();
    conf["type"] = json!("keel-cni");
    if let Some(ipam) = conf["ipam"].as_object_mut() {
        ipam.remove("type");
    }
    conf
}

fn with_data_dir(conf: &Value, data_dir: &Path) -> Value {
    let mut conf = conf.clone();
    conf["ipam"]["dataDir"] = json!(data_dir);
    conf
}

fn is_mac(text: &str) -> bool {
    let parts: Vec<&str> = text.split(':').collect();
    parts.len() == 6
        && parts.iter().all(|part| part.len() == 2 && part.chars().all(|c| c.is_ascii_hexdigit()))
}

fn is_link_name(text: &str) -> bool {
    !text.is_empty() && text.len() <= 15 && !text.contains(['/', ' ', ':'])
}

/// Checks the values that are random on both sides for form, then replaces them: MACs, the pod
/// namespace path (each side has its own), and the chosen differences.
fn comparable(side: &str, result: &Value, pod_netns: &Path) -> Value {
    let mut result = result.clone();
    if let Some(interfaces) = result.get_mut("interfaces").and_then(Value::as_array_mut) {
        for interface in interfaces {
            let name = interface["name"].as_str().unwrap_or_default().to_owned();
            assert!(is_link_name(&name), "{side}: interface name {name:?}");
            if let Some(mac) = interface.get("mac") {
                assert!(mac.as_str().is_some_and(is_mac), "{side}: {name} has MAC {mac}");
                interface["mac"] = json!("<mac>");
            }
            if let Some(sandbox) = interface.get("sandbox") {
                assert_eq!(sandbox.as_str().map(Path::new), Some(pod_netns), "{side}: {name}'s sandbox");
                interface["sandbox"] = json!("<pod netns>");
            }
        }
    }
    let mut result = without_chosen_differences(&result);
    // Routes are a set: the order routes are listed in carries no meaning.
    if let Some(routes) = result.get_mut("routes").and_then(Value::as_array_mut) {
        routes.sort_by_key(Value::to_string);
    }
    result
}

/// A fresh node namespace, a pod namespace, a data dir; one ADD there.
struct Side {
    node: NetNs,
    pod: NetNs,
    data_dir: tempfile::TempDir,
    plugin: PathBuf,
    conf: Value,
    result: Value,
}

impl Side {
    fn add(plugin: &Path, conf: &Value) -> Side {
        let prefix = unique_prefix();
        let node = NetNs::create(&format!("{prefix}-node")).expect("node namespace");
        let pod = NetNs::create(&format!("{prefix}-pod")).expect("pod namespace");
        let data_dir = tempfile::tempdir().expect("data dir");
        let conf = with_data_dir(conf, data_dir.path());
        let call = Invocation {
            command: "ADD",
            container_id: CONTAINER_ID,
            netns: Some(pod.path()),
            ifname: "eth0",
            conf: &conf,
        };
        let result = run(node.fd(), plugin, &call).ok(&format!("ADD by {}", plugin.display()));
        Side { node, pod, data_dir, plugin: plugin.to_owned(), conf, result }
    }

    fn del(&self) {
        let call = Invocation {
            command: "DEL",
            container_id: CONTAINER_ID,
            netns: Some(self.pod.path()),
            ifname: "eth0",
            conf: &self.conf,
        };
        run(self.node.fd(), &self.plugin, &call).ok(&format!("DEL by {}", self.plugin.display()));
        assert!(
            allocations(self.data_dir.path(), NETWORK).is_empty(),
            "{} left allocations",
            self.plugin.display()
        );
    }
}

#[test]
fn keel_cni_gives_the_reference_chains_result_fields() {
    keel_testbed::require_root().unwrap();
    let keel_cni = Path::new(KEEL_CNI);
    let mut mismatches = Vec::new();
    for case in cases() {
        let reference = Side::add(&reference_bridge(), &case.conf);
        let keel = Side::add(keel_cni, &keel_form(&case.conf));
        let ours = comparable("keel-cni", &keel.result, keel.pod.path());
        let theirs = comparable("reference", &reference.result, reference.pod.path());
        // The reference's host veth: "veth" and 8 hex digits (a random name).
        let veth = reference.result["interfaces"][1]["name"].as_str().unwrap_or_default();
        assert!(veth.len() == 12 && veth.starts_with("veth"), "{}: reference host veth {veth:?}", case.name);
        if ours != theirs {
            mismatches.push(format!(
                "{}:\n  keel-cni:  {ours}\n  reference: {theirs}\n  (raw keel-cni: {})",
                case.name, keel.result
            ));
        }
        // Each pod got the address its result names, on its interface.
        for side in [&reference, &keel] {
            let held: BTreeSet<IpAddr> = allocations(side.data_dir.path(), NETWORK).into_keys().collect();
            let reported: BTreeSet<IpAddr> = side.result["ips"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|ip| ip["address"].as_str()?.split('/').next()?.parse().ok())
                .collect();
            assert_eq!(held, reported, "{}: {} allocations vs result", case.name, side.plugin.display());
        }
        keel.del();
        reference.del();
    }
    assert!(mismatches.is_empty(), "results differ:\n{}", mismatches.join("\n"));
}

/// A node moving from the reference chain to keel-cni (and back): one bridge, one data dir. Each
/// plugin allocates around the other's addresses and releases the other's allocations on DEL.
#[test]
fn allocations_carry_over_between_host_local_and_keel_cni() {
    keel_testbed::require_root().unwrap();
    let prefix = unique_prefix();
    let node = NetNs::create(&format!("{prefix}-node")).unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    let conf = with_data_dir(&cases()[0].conf, data_dir.path());
    let keel_conf = keel_form(&conf);
    let reference = reference_bridge();
    let keel = PathBuf::from(KEEL_CNI);
    // (plugin that adds, plugin that deletes) per pod: each allocation is released by the other one.
    let plan: [(&Path, &Value, &Path, &Value); 4] = [
        (&reference, &conf, &keel, &keel_conf),
        (&keel, &keel_conf, &reference, &conf),
        (&reference, &conf, &keel, &keel_conf),
        (&keel, &keel_conf, &reference, &conf),
    ];
    let pods: Vec<NetNs> =
        (0..plan.len()).map(|i| NetNs::create(&format!("{prefix}-pod{i}")).unwrap()).collect();
    let ids: Vec<String> = (0..plan.len()).map(|i| format!("carry-over-{i}")).collect();
    let mut given = BTreeSet::new();
    for (i, (adder, adder_conf, _, _)) in plan.iter().enumerate() {
        let call = Invocation {
            command: "ADD",
            container_id: &ids[i],
            netns: Some(pods[i].path()),
            ifname: "eth0",
            conf: adder_conf,
        };
        let result = run(node.fd(), adder, &call).ok(&format!("ADD {} by {}", ids[i], adder.display()));
        let address: IpAddr =
            result["ips"][0]["address"].as_str().unwrap().split('/').next().unwrap().parse().unwrap();
        assert!(given.insert(address), "{address} given twice (to {} by {})", ids[i], adder.display());
        let held = allocations(data_dir.path(), NETWORK);
        assert_eq!(held.get(&address), Some(&ids[i]), "the allocation file of {address}: {held:?}");
        assert_eq!(held.len(), i + 1, "{held:?}");
    }
    for (i, (_, _, deleter, deleter_conf)) in plan.iter().enumerate() {
        let call = Invocation {
            command: "DEL",
            container_id: &ids[i],
            netns: Some(pods[i].path()),
            ifname: "eth0",
            conf: deleter_conf,
        };
        run(node.fd(), deleter, &call).ok(&format!("DEL {} by {}", ids[i], deleter.display()));
        let held = allocations(data_dir.path(), NETWORK);
        assert!(!held.values().any(|owner| *owner == ids[i]), "{} still holds {held:?}", ids[i]);
        assert_eq!(held.len(), plan.len() - i - 1, "{held:?}");
    }
}

/// keel-cni as the first plugin of a chain: the reference portmap plugin takes its result as
/// `prevResult`, programs the hostPort for the pod's address and passes the result on unchanged.
#[test]
fn the_reference_portmap_plugin_chains_after_keel_cni() {
    keel_testbed::require_root().unwrap();
    let prefix = unique_prefix();
    let node = NetNs::create(&format!("{prefix}-node")).unwrap();
    let pod = NetNs::create(&format!("{prefix}-pod")).unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    let conf = keel_form(&with_data_dir(&cases()[0].conf, data_dir.path()));
    let keel = Path::new(KEEL_CNI);
    let portmap = Path::new(runner::REFERENCE_DIR).join("portmap");
    let call = |command, conf| Invocation {
        command,
        container_id: CONTAINER_ID,
        netns: Some(pod.path()),
        ifname: "eth0",
        conf,
    };
    let result = run(node.fd(), keel, &call("ADD", &conf)).ok("keel-cni ADD");
    let portmap_conf = json!({
        "cniVersion": "1.0.0", "name": NETWORK, "type": "portmap", "capabilities": {"portMappings": true},
        "runtimeConfig": {"portMappings": [{"hostPort": 18080, "containerPort": 80, "protocol": "tcp"}]},
        "prevResult": result,
    });
    let passed_on = run(node.fd(), &portmap, &call("ADD", &portmap_conf)).ok("portmap ADD");
    assert_eq!(
        without_chosen_differences(&passed_on),
        without_chosen_differences(&result),
        "portmap passes keel-cni's result on"
    );
    let address = result["ips"][0]["address"].as_str().unwrap().split('/').next().unwrap().to_owned();
    let rules = node.command("iptables-save").args(["-t", "nat"]).output().unwrap();
    let rules = String::from_utf8_lossy(&rules.stdout);
    assert!(rules.contains(&format!("--to-destination {address}:80")), "no DNAT to {address}:80:\n{rules}");
    run(node.fd(), &portmap, &call("DEL", &portmap_conf)).ok("portmap DEL");
    run(node.fd(), keel, &call("DEL", &conf)).ok("keel-cni DEL");
    assert!(allocations(data_dir.path(), NETWORK).is_empty());
}
