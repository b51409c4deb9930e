//! The bridge plugin's orchestration against fakes of its three edges.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use serde_json::{Value, json};

use super::*;
use crate::dataplane::fake::FakeDataplane;
use crate::spec::{PortMapping, Version};

/// Allocates 10.244.1.N/24 (gateway .1) and, when `dual`, fd00:1::N/64, per attachment.
#[derive(Debug, Default)]
struct FakeIpam {
    dual: bool,
    held: BTreeMap<(String, String), Vec<IpConfig>>,
    next: u8,
    fail: Option<&'static str>,
    gc_valid: Option<Vec<Attachment>>,
}

fn key(args: &CmdArgs) -> (String, String) {
    (args.container_id.clone(), args.ifname.clone())
}

impl Ipam for FakeIpam {
    fn allocate(&mut self, args: &CmdArgs, _: &NetConf) -> Result<CniResult, Error> {
        if self.fail == Some("allocate") {
            return Err(Error::new(error::RANGE_EXHAUSTED, "no free address"));
        }
        if !self.held.contains_key(&key(args)) {
            self.next += 1;
            let n = self.next + 1;
            let mut ips = vec![IpConfig {
                address: format!("10.244.1.{n}/24").parse().unwrap(),
                gateway: Some("10.244.1.1".parse().unwrap()),
                interface: None,
            }];
            if self.dual {
                ips.push(IpConfig {
                    address: format!("fd00:1::{n:x}/64").parse().unwrap(),
                    gateway: None,
                    interface: None,
                });
            }
            self.held.insert(key(args), ips);
        }
        Ok(CniResult {
            ips: self.held[&key(args)].clone(),
            routes: vec![Route::new("10.96.0.0/12".parse().unwrap(), None)],
            ..CniResult::default()
        })
    }
    fn release(&mut self, args: &CmdArgs, _: &NetConf) -> Result<(), Error> {
        self.held.remove(&key(args));
        Ok(())
    }
    fn check(&mut self, args: &CmdArgs, _: &NetConf, addresses: &[IpAddr]) -> Result<(), Error> {
        let held: Vec<IpAddr> =
            self.held.get(&key(args)).into_iter().flatten().map(|ip| ip.address.addr()).collect();
        if addresses.iter().all(|address| held.contains(address)) {
            Ok(())
        } else {
            Err(Error::new(error::DRIFT, "allocation not held"))
        }
    }
    fn gc(&mut self, _: &CmdArgs, _: &NetConf, valid: &[Attachment]) -> Result<(), Error> {
        self.gc_valid = Some(valid.to_vec());
        Ok(())
    }
    fn status(&mut self, _: &CmdArgs, _: &NetConf) -> Result<(), Error> {
        Err(Error::new(error::PLUGIN_NOT_AVAILABLE, "full"))
    }
}

#[derive(Debug, Default)]
struct FakeFirewall {
    masquerade: Vec<(String, Vec<IpNet>, Vec<IpNet>)>,
    mappings: BTreeMap<(String, String), Vec<PortMapping>>,
    fail: Option<&'static str>,
    gc_calls: usize,
}

impl Firewall for FakeFirewall {
    fn ensure_masquerade(&mut self, bridge: &str, sources: &[IpNet], exclude: &[IpNet]) -> Result<(), Error> {
        if self.fail == Some("masquerade") {
            return Err(Error::new(error::KERNEL_REFUSED, "nft"));
        }
        self.masquerade.push((bridge.to_owned(), sources.to_vec(), exclude.to_vec()));
        Ok(())
    }
    fn add_port_mappings(
        &mut self,
        owner: &Attachment,
        _: &str,
        _: &[IpAddr],
        mappings: &[PortMapping],
    ) -> Result<(), Error> {
        // Fails after adding, as a partly applied change would.
        self.mappings.insert((owner.container_id.clone(), owner.ifname.clone()), mappings.to_vec());
        if self.fail == Some("ports") {
            return Err(Error::new(error::KERNEL_REFUSED, "nft"));
        }
        Ok(())
    }
    fn remove_port_mappings(&mut self, owner: &Attachment) -> Result<(), Error> {
        self.mappings.remove(&(owner.container_id.clone(), owner.ifname.clone()));
        Ok(())
    }
    fn check_port_mappings(&mut self, owner: &Attachment, _: &[PortMapping]) -> Result<(), Error> {
        if self.mappings.contains_key(&(owner.container_id.clone(), owner.ifname.clone())) {
            Ok(())
        } else {
            Err(Error::new(error::DRIFT, "hostPort rules missing"))
        }
    }
    fn gc(&mut self, _: &[Attachment]) -> Result<(), Error> {
        self.gc_calls += 1;
        Ok(())
    }
}

type Fake = BridgePlugin<FakeIpam, FakeFirewall, FakeDataplane>;

fn plugin() -> Fake {
    BridgePlugin::new(FakeIpam::default(), FakeFirewall::default(), FakeDataplane::new())
}

fn args(container: &str) -> CmdArgs {
    CmdArgs {
        container_id: container.into(),
        netns: Some(PathBuf::from("/run/netns/pod")),
        ifname: "eth0".into(),
        args: Vec::new(),
        path: vec![PathBuf::from("/opt/cni/bin")],
    }
}

fn conf(extra: Value) -> NetConf {
    let mut value = json!({
        "cniVersion": "1.1.0", "name": "kube", "type": "keel-cni", "bridge": "cni0",
        "isDefaultGateway": true, "hairpinMode": true, "mtu": 1450,
        "ipam": {"subnet": "10.244.1.0/24"},
    });
    if let (Value::Object(value), Value::Object(extra)) = (&mut value, extra) {
        value.extend(extra);
    }
    NetConf::parse(value.to_string().as_bytes()).unwrap()
}

fn with_prev(conf: &NetConf, result: &CniResult) -> NetConf {
    let mut raw = conf.raw.clone();
    raw["prevResult"] = result.to_json(conf.cni_version);
    NetConf::parse(raw.to_string().as_bytes()).unwrap()
}

#[test]
fn add_wires_the_pod_and_answers_as_the_reference_bridge_does() {
    let mut plugin = plugin();
    let result = plugin.add(&args("c1"), &conf(json!({}))).unwrap();
    let json = result.to_json(Version::V1_1_0);
    let host = dataplane::host_veth_name("c1", "eth0");
    assert_eq!(json["interfaces"][0]["name"], "cni0");
    assert_eq!(json["interfaces"][1]["name"], host.as_str());
    assert_eq!(json["interfaces"][2]["name"], "eth0");
    assert_eq!(json["interfaces"][2]["sandbox"], "/run/netns/pod");
    assert_eq!(json["interfaces"][2]["mac"], "0a:58:0a:f4:01:02");
    assert_eq!(json["interfaces"][2]["mtu"], 1450);
    assert_eq!(json["ips"], json!([{"address": "10.244.1.2/24", "gateway": "10.244.1.1", "interface": 2}]));
    assert_eq!(json["routes"], json!([{"dst": "10.96.0.0/12"}, {"dst": "0.0.0.0/0", "gw": "10.244.1.1"}]));
    assert!(result.to_json(Version::V1_0_0)["interfaces"][2].get("mtu").is_none());

    let fake = &plugin.dataplane;
    assert_eq!(fake.bridges["cni0"].1, vec!["10.244.1.1/24".parse::<IpNet>().unwrap()]);
    assert_eq!(fake.forwarding, (true, false));
    let veth = &fake.veths[0];
    assert!(veth.hairpin && veth.up);
    assert_eq!(veth.controller, Some(fake.bridges["cni0"].0.index));
    assert_eq!(veth.addresses, vec!["10.244.1.2/24".parse::<IpNet>().unwrap()]);
    let gw = Some("10.244.1.1".parse().unwrap());
    assert_eq!(
        veth.routes,
        vec![
            PodRoute { dst: "10.96.0.0/12".parse().unwrap(), gw },
            PodRoute { dst: "0.0.0.0/0".parse().unwrap(), gw }
        ]
    );
}

#[test]
fn dual_stack_gets_a_gateway_and_a_default_route_per_family() {
    let mut plugin = plugin();
    plugin.ipam.dual = true;
    let result = plugin.add(&args("c1"), &conf(json!({}))).unwrap();
    assert_eq!(result.ips[1].gateway, Some("fd00:1::1".parse().unwrap()));
    assert!(result.routes.iter().any(|route| route.dst.to_string() == "::/0"));
    assert_eq!(plugin.dataplane.forwarding, (true, true));
    assert!(plugin.dataplane.bridges["cni0"].1.contains(&"fd00:1::1/64".parse().unwrap()));
}

#[test]
fn prev_result_entries_are_kept_and_our_interface_index_follows_them() {
    let mut plugin = plugin();
    let prev = CniResult {
        interfaces: vec![Interface {
            name: "lo".into(),
            sandbox: "/run/netns/pod".into(),
            ..Interface::default()
        }],
        ips: vec![IpConfig { address: "127.0.0.1/8".parse().unwrap(), gateway: None, interface: Some(0) }],
        ..CniResult::default()
    };
    let result = plugin.add(&args("c1"), &with_prev(&conf(json!({})), &prev)).unwrap();
    assert_eq!(result.interfaces.len(), 4);
    assert_eq!(result.ips[0], prev.ips[0]);
    assert_eq!(result.ips[1].interface, Some(3));
}

#[test]
fn mac_comes_from_runtime_config_or_cni_args_and_a_bad_one_allocates_nothing() {
    let mut plugin = plugin();
    let mut with_arg = args("c1");
    with_arg.args.push(("MAC".into(), "02:00:00:00:00:aa".into()));
    let result = plugin.add(&with_arg, &conf(json!({}))).unwrap();
    assert_eq!(result.interfaces[2].mac, "02:00:00:00:00:aa");
    let mut eth1 = args("c2");
    eth1.ifname = "eth1".into();
    let result = plugin.add(&eth1, &conf(json!({"runtimeConfig": {"mac": "02:00:00:00:00:bb"}}))).unwrap();
    assert_eq!(result.interfaces[2].mac, "02:00:00:00:00:bb");

    let mut bad = args("c3");
    bad.args.push(("MAC".into(), "not-a-mac".into()));
    let err = plugin.add(&bad, &conf(json!({}))).unwrap_err();
    assert_eq!(err.code, error::INVALID_ENVIRONMENT);
    assert!(!plugin.ipam.held.contains_key(&key(&bad)));
}

#[test]
fn an_interface_already_present_is_error_102_and_changes_nothing() {
    let mut plugin = plugin();
    plugin.add(&args("c1"), &conf(json!({}))).unwrap();
    let before = (plugin.dataplane.pod_state(), plugin.ipam.held.clone());
    // Same attachment again, and another container in the same namespace with the same ifname.
    for container in ["c1", "c2"] {
        let err = plugin.add(&args(container), &conf(json!({}))).unwrap_err();
        assert_eq!(err.code, error::INTERFACE_EXISTS, "{err}");
        assert_eq!((plugin.dataplane.pod_state(), plugin.ipam.held.clone()), before);
    }
}

#[test]
fn a_missing_netns_is_error_8_and_allocates_nothing() {
    let mut plugin = plugin();
    let mut missing = args("c1");
    missing.netns = Some(PathBuf::from("/run/netns/gone"));
    let err = plugin.add(&missing, &conf(json!({}))).unwrap_err();
    assert_eq!(err.code, error::INVALID_NETNS);
    assert!(plugin.ipam.held.is_empty());
    assert!(plugin.dataplane.veths.is_empty());
}

#[test]
fn an_add_failing_at_any_step_undoes_every_step_it_did() {
    let steps: [(&str, &str); 8] = [
        ("ipam", "allocate"),
        ("dataplane", "ensure_bridge"),
        ("dataplane", "ensure_bridge_address"),
        ("dataplane", "enable_forwarding"),
        ("dataplane", "add_veth"),
        ("dataplane", "configure_pod"),
        ("firewall", "masquerade"),
        ("firewall", "ports"),
    ];
    let conf = conf(json!({
        "ipMasq": true,
        "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
    }));
    for (edge, step) in steps {
        let mut plugin = plugin();
        // Another pod, which must stay as it is.
        plugin.add(&args("other"), &conf).unwrap();
        plugin.dataplane.namespaces.insert(PathBuf::from("/run/netns/pod2"));
        let mut pod = args("c1");
        pod.netns = Some(PathBuf::from("/run/netns/pod2"));
        let before =
            (plugin.dataplane.pod_state(), plugin.ipam.held.clone(), plugin.firewall.mappings.clone());
        match edge {
            "ipam" => plugin.ipam.fail = Some(step),
            "firewall" => plugin.firewall.fail = Some(step),
            _ => plugin.dataplane.fail = Some(step),
        }
        let err = plugin.add(&pod, &conf).unwrap_err();
        assert_ne!(err.code, 0, "{step}");
        let after =
            (plugin.dataplane.pod_state(), plugin.ipam.held.clone(), plugin.firewall.mappings.clone());
        assert_eq!(after, before, "{step} failed: {err}");
        // The undo ran newest first: the veth before the allocation.
        if matches!(step, "configure_pod" | "masquerade" | "ports") {
            assert!(
                plugin.dataplane.calls.ends_with(&["delete_veth"]),
                "{step}: {:?}",
                plugin.dataplane.calls
            );
        }
    }
}

#[test]
fn a_host_end_left_by_a_killed_add_is_replaced() {
    let mut plugin = plugin();
    plugin.add(&args("c1"), &conf(json!({}))).unwrap();
    // The pod's namespace went away with its interface; the host end stayed.
    plugin.dataplane.veths[0].netns = PathBuf::from("/run/netns/old");
    plugin.ipam.held.clear();
    let result = plugin.add(&args("c1"), &conf(json!({}))).unwrap();
    assert_eq!(result.interfaces[1].name, dataplane::host_veth_name("c1", "eth0"));
    assert_eq!(plugin.dataplane.veths.len(), 1);
    assert_eq!(plugin.dataplane.veths[0].netns, PathBuf::from("/run/netns/pod"));
}

#[test]
fn del_retires_the_pair_releases_the_address_and_succeeds_twice() {
    let mut plugin = plugin();
    let conf = conf(json!({"runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80}]}}));
    plugin.add(&args("c1"), &conf).unwrap();
    plugin.del(&args("c1"), &conf).unwrap();
    assert!(plugin.ipam.held.is_empty() && plugin.firewall.mappings.is_empty());
    // eth0 is free at once for a new ADD in the same namespace; the pair is gone after finish.
    assert!(plugin.dataplane.veths.iter().all(|veth| veth.pod_ifname != "eth0" && veth.controller.is_none()));
    plugin.add(&args("c2"), &conf).unwrap();
    plugin.del(&args("c1"), &conf).unwrap();
    plugin.finish();
    assert_eq!(plugin.dataplane.veths.len(), 1);
    assert_eq!(plugin.dataplane.veths[0].host_name, dataplane::host_veth_name("c2", "eth0"));
    // Without a namespace, and with one that is gone.
    let mut no_netns = args("c2");
    no_netns.netns = None;
    plugin.del(&no_netns, &conf).unwrap();
    let mut gone = args("c2");
    gone.netns = Some(PathBuf::from("/run/netns/gone"));
    plugin.del(&gone, &conf).unwrap();
    plugin.finish();
    assert!(plugin.dataplane.veths.is_empty() && plugin.ipam.held.is_empty());
}

#[test]
fn check_reports_each_drift_with_code_101() {
    let conf = conf(json!({"cniVersion": "1.0.0"}));
    let fresh = || {
        let mut plugin = plugin();
        let result = plugin.add(&args("c1"), &conf).unwrap();
        let checked = with_prev(&conf, &result);
        plugin.check(&args("c1"), &checked).unwrap();
        (plugin, checked)
    };
    type Drift = fn(&mut Fake);
    let drifts: [(&str, Drift); 6] = [
        ("missing", |p| p.dataplane.veths.clear()),
        ("address", |p| p.dataplane.veths[0].addresses.clear()),
        ("route", |p| p.dataplane.veths[0].routes.pop().map(drop).unwrap_or(())),
        ("not a port", |p| p.dataplane.veths[0].controller = None),
        ("allocation", |p| p.ipam.held.clear()),
        ("down", |p| p.dataplane.veths[0].up = false),
    ];
    for (what, drift) in drifts {
        let (mut plugin, checked) = fresh();
        drift(&mut plugin);
        let err = plugin.check(&args("c1"), &checked).unwrap_err();
        assert_eq!(err.code, error::DRIFT, "{what}: {err}");
    }
    let (mut plugin, _) = fresh();
    assert_eq!(plugin.check(&args("c1"), &conf).unwrap_err().code, error::INVALID_NETWORK_CONFIG);
}

#[test]
fn gc_collects_allocations_rules_and_tombstones_and_status_is_the_ipams() {
    let mut plugin = plugin();
    let conf = conf(json!({"cni.dev/valid-attachments": [{"containerID": "c1", "ifname": "eth0"}]}));
    plugin.add(&args("c1"), &conf).unwrap();
    plugin.dataplane.namespaces.insert(PathBuf::from("/run/netns/pod2"));
    let mut c2 = args("c2");
    c2.netns = Some(PathBuf::from("/run/netns/pod2"));
    plugin.add(&c2, &conf).unwrap();
    // A DEL whose destruction never ran (a crashed child) left a tombstone.
    plugin.dataplane.retire_veth(None, "eth0", &dataplane::host_veth_name("c2", "eth0")).unwrap();
    plugin.gc(&args(""), &conf).unwrap();
    assert_eq!(plugin.ipam.gc_valid.as_ref().unwrap()[0].container_id, "c1");
    assert_eq!(plugin.firewall.gc_calls, 1);
    assert_eq!(plugin.dataplane.veths.len(), 1);
    let without = self::conf(json!({}));
    assert_eq!(plugin.gc(&args(""), &without).unwrap_err().code, error::INVALID_NETWORK_CONFIG);
    assert_eq!(plugin.status(&args(""), &conf).unwrap_err().code, error::PLUGIN_NOT_AVAILABLE);
}

#[test]
fn masquerade_covers_the_pod_subnets_and_excludes_the_cluster_cidrs() {
    let mut plugin = plugin();
    plugin.add(&args("c1"), &conf(json!({"ipMasq": true, "clusterCIDRs": ["10.244.0.0/16"]}))).unwrap();
    let (bridge, sources, exclude) = &plugin.firewall.masquerade[0];
    assert_eq!(bridge, "cni0");
    assert_eq!(sources, &vec!["10.244.1.0/24".parse::<IpNet>().unwrap()]);
    assert_eq!(exclude, &vec!["10.244.0.0/16".parse::<IpNet>().unwrap()]);
}

#[test]
fn host_veth_names_are_stable_and_fit_ifnamsiz() {
    let name = dataplane::host_veth_name("abc", "eth0");
    assert_eq!(name, dataplane::host_veth_name("abc", "eth0"));
    assert_ne!(name, dataplane::host_veth_name("abc", "eth1"));
    assert_ne!(name, dataplane::host_veth_name("abce", "th0"));
    assert_eq!(name.len(), 12);
    assert_eq!(Mac::parse("0A:58:0a:f4:01:02").unwrap().to_string(), "0a:58:0a:f4:01:02");
    assert!(Mac::parse("01:00:00:00:00:00").is_none() && Mac::parse("0a:58:0a:f4:01").is_none());
    assert_eq!(Mac::random().0[0] & 3, 2);
}
