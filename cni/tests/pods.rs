//! keel-cni as a runtime runs it: the binary executed inside a test node namespace for pods in their
//! own namespaces. Traffic between pods and the node, every error path (the spec's error or success,
//! and nothing left behind: links, addresses, routes, allocations, nft rules), DEL twice, CHECK drift.

use crate::common;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use common::{BIN, addresses, cni, env, eventually, link, links, netns, reach, routes, run_in};
use keel_cni::dataplane::{TOMBSTONE_PREFIX, host_veth_name};
use keel_cni::spec::error;
use keel_testbed::NetNs;
use serde_json::{Value, json};

/// A node namespace, its IPAM data directory, and the configuration's network name.
struct Node {
    ns: NetNs,
    data: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        Node { ns: netns("node"), data: tempfile::tempdir().unwrap() }
    }

    /// The network configuration: bridge `cni0`, gateway and default route, hairpin, `subnet`.
    fn conf(&self, version: &str, ipam: Value) -> Value {
        let mut ipam = ipam;
        ipam["dataDir"] = json!(self.data.path());
        json!({
            "cniVersion": version, "name": "kube", "type": "keel-cni", "bridge": "cni0",
            "isGateway": true, "isDefaultGateway": true, "hairpinMode": true, "ipam": ipam,
        })
    }

    fn v4(&self) -> Value {
        self.conf("1.1.0", json!({"subnet": "10.244.1.0/24"}))
    }

    /// Every file under the data directory holding an allocation (named after an address).
    fn allocations(&self) -> Vec<String> {
        let mut found = Vec::new();
        let mut stack = vec![self.data.path().to_owned()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_dir() {
                    stack.push(entry.path());
                } else if entry.file_name().to_str().and_then(|name| name.parse::<IpAddr>().ok()).is_some() {
                    found.push(entry.file_name().to_string_lossy().into_owned());
                }
            }
        }
        found.sort();
        found
    }

    /// What must be the same before and after an operation that leaves nothing behind.
    fn state(&self, pod: &NetNs) -> Value {
        json!({
            "node_links": links(&self.ns).into_iter().filter(|l| !l.starts_with(TOMBSTONE_PREFIX)).collect::<Vec<_>>(),
            "node_routes": routes(&self.ns),
            "bridge_addresses": addresses(&self.ns, "cni0"),
            "pod_links": links(pod).into_iter().filter(|l| !l.starts_with(TOMBSTONE_PREFIX)).collect::<Vec<_>>(),
            "pod_addresses": addresses(pod, "eth0"),
            "pod_routes": routes(pod),
            "allocations": self.allocations(),
            "nft": nft_ruleset(&self.ns),
        })
    }

    fn tombstones_gone(&self) -> bool {
        !links(&self.ns).iter().any(|name| name.starts_with(TOMBSTONE_PREFIX))
    }
}

/// The node's whole nftables ruleset (keel-cni's table included), as `nft -j` lists it.
fn nft_ruleset(ns: &NetNs) -> Value {
    let output = ns.command("nft").args(["-j", "list", "ruleset"]).output().unwrap();
    assert!(output.status.success(), "nft: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn pod_ip(result: &Value, index: usize) -> IpAddr {
    let address = result["ips"][index]["address"].as_str().unwrap();
    address.split('/').next().unwrap().parse().unwrap()
}

fn path(ns: &NetNs) -> &Path {
    ns.path()
}

#[test]
fn two_pods_reach_each_other_and_the_node_over_tcp_and_udp() {
    let node = Node::new();
    let (pod1, pod2) = (netns("pod1"), netns("pod2"));
    let conf = node.v4();
    let first = cni(&node.ns, "ADD", "c1", path(&pod1), &conf).ok().json();
    let second = cni(&node.ns, "ADD", "c2", path(&pod2), &conf).ok().json();

    // The reference bridge plugin's result shape.
    let host = host_veth_name("c1", "eth0");
    assert_eq!(first["cniVersion"], "1.1.0");
    assert_eq!(first["interfaces"][0]["name"], "cni0");
    assert_eq!(first["interfaces"][0]["mac"], link(&node.ns, "cni0").unwrap()["address"]);
    assert_eq!(first["interfaces"][1]["name"], host.as_str());
    assert_eq!(first["interfaces"][1]["mac"], link(&node.ns, &host).unwrap()["address"]);
    assert_eq!(first["interfaces"][2]["name"], "eth0");
    assert_eq!(first["interfaces"][2]["sandbox"], pod1.path().to_str().unwrap());
    assert_eq!(first["interfaces"][2]["mac"], link(&pod1, "eth0").unwrap()["address"]);
    assert_eq!(first["interfaces"][2]["mtu"], 1500);
    assert_eq!(first["ips"][0]["interface"], 2);
    assert_eq!(first["ips"][0]["gateway"], "10.244.1.1");
    assert!(first["routes"].as_array().unwrap().contains(&json!({"dst": "0.0.0.0/0", "gw": "10.244.1.1"})));
    // Hairpin mode on both bridge ports.
    for container in ["c1", "c2"] {
        let port = link(&node.ns, &host_veth_name(container, "eth0")).unwrap();
        assert_eq!(port["master"], "cni0");
        assert_eq!(port["linkinfo"]["info_slave_data"]["hairpin"], true, "{container}");
    }

    let (ip1, ip2) = (pod_ip(&first, 0), pod_ip(&second, 0));
    assert_ne!(ip1, ip2);
    reach(&pod1, &pod2, ip2);
    reach(&pod2, &pod1, ip1);
    reach(&pod1, &node.ns, "10.244.1.1".parse().unwrap());
    reach(&pod2, &node.ns, "10.244.1.1".parse().unwrap());

    for (container, pod) in [("c1", &pod1), ("c2", &pod2)] {
        cni(&node.ns, "DEL", container, path(pod), &conf).ok();
    }
    eventually("the retired veth pairs are destroyed", || node.tombstones_gone());
    assert_eq!(links(&node.ns), vec!["cni0", "lo"]);
    assert!(node.allocations().is_empty());
}

#[test]
fn dual_stack_add_gives_an_address_and_a_default_route_per_family() {
    let node = Node::new();
    let pod = netns("pod");
    let conf =
        node.conf("1.1.0", json!({"ranges": [[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd00:1::/64"}]]}));
    let result = cni(&node.ns, "ADD", "c1", path(&pod), &conf).ok().json();
    assert_eq!(result["ips"].as_array().unwrap().len(), 2);
    assert_eq!(result["ips"][1]["gateway"], "fd00:1::1");
    let pod_routes = routes(&pod);
    assert!(pod_routes.contains(&"default via 10.244.1.1 dev eth0".to_owned()), "{pod_routes:?}");
    assert!(pod_routes.contains(&"default via fd00:1::1 dev eth0".to_owned()), "{pod_routes:?}");
    assert_eq!(addresses(&node.ns, "cni0"), vec!["10.244.1.1/24", "fd00:1::1/64"]);
    reach(&pod, &node.ns, "fd00:1::1".parse().unwrap());
    reach(&pod, &node.ns, "10.244.1.1".parse().unwrap());
    cni(&node.ns, "DEL", "c1", path(&pod), &conf).ok();
    assert!(node.allocations().is_empty());
}

#[test]
fn a_second_interface_in_the_pod_routes_the_same_destinations() {
    let node = Node::new();
    let pod = netns("pod");
    let conf = node.conf("1.1.0", json!({"subnet": "10.244.1.0/24", "routes": [{"dst": "10.96.0.0/12"}]}));
    cni(&node.ns, "ADD", "c1", path(&pod), &conf).ok();
    let pod_path = pod.path().to_str().unwrap().to_owned();
    run_in(&node.ns, BIN, &env("ADD", "c1", &pod_path, "net1"), conf.to_string().as_bytes()).ok();
    let pod_routes = routes(&pod);
    for dev in ["eth0", "net1"] {
        let route = format!("10.96.0.0/12 via 10.244.1.1 dev {dev}");
        assert!(pod_routes.contains(&route), "{route} in {pod_routes:?}");
    }
    run_in(&node.ns, BIN, &env("DEL", "c1", &pod_path, "net1"), conf.to_string().as_bytes()).ok();
    assert!(link(&pod, "eth0").is_some() && link(&pod, "net1").is_none());
    reach(&pod, &node.ns, "10.244.1.1".parse().unwrap());
}

#[test]
fn bad_invocations_get_the_specs_errors_and_leave_nothing_behind() {
    let node = Node::new();
    let pod = netns("pod");
    let conf = node.v4();
    let stdin = conf.to_string();
    let pod_path = pod.path().to_str().unwrap().to_owned();
    // The bridge exists (as on any node with pods) so that "nothing behind" compares like with like.
    let other = netns("other");
    cni(&node.ns, "ADD", "other", path(&other), &conf).ok();
    let before = node.state(&pod);

    let full = env("ADD", "c1", &pod_path, "eth0");
    for missing in ["CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"] {
        let vars: Vec<(&str, &str)> = full.iter().copied().filter(|(name, _)| *name != missing).collect();
        let run = run_in(&node.ns, BIN, &vars, stdin.as_bytes());
        assert_eq!(
            run.error_code(),
            u64::from(error::INVALID_ENVIRONMENT),
            "without {missing}: {}",
            run.stdout
        );
    }
    let run = run_in(&node.ns, BIN, &full, b"{\"cniVersion\": ");
    assert_eq!(run.error_code(), u64::from(error::DECODING_FAILURE));
    let mut old = conf.clone();
    old["cniVersion"] = json!("0.2.0");
    let run = run_in(&node.ns, BIN, &full, old.to_string().as_bytes());
    assert_eq!(run.error_code(), u64::from(error::INCOMPATIBLE_VERSION));
    let run = cni(&node.ns, "ADD", "c1", Path::new("/run/netns/keel-no-such-namespace"), &conf);
    assert_eq!(run.error_code(), u64::from(error::INVALID_NETNS), "{}", run.stdout);
    let run = cni(&node.ns, "ADD", "c1", Path::new("/etc/hostname"), &conf);
    assert_eq!(run.error_code(), u64::from(error::INVALID_NETNS), "{}", run.stdout);
    assert_eq!(node.state(&pod), before);

    // An interface of that name already in the pod.
    let existing = pod.command("ip").args(["link", "add", "eth0", "type", "bridge"]).status().unwrap();
    assert!(existing.success());
    let before = node.state(&pod);
    let run = cni(&node.ns, "ADD", "c1", path(&pod), &conf);
    assert_eq!(run.error_code(), u64::from(error::INTERFACE_EXISTS), "{}", run.stdout);
    assert_eq!(node.state(&pod), before);
}

#[test]
fn an_exhausted_range_is_a_clear_error_and_leaves_nothing_behind() {
    let node = Node::new();
    let (pod1, pod2) = (netns("pod1"), netns("pod2"));
    // A /30: the gateway and one pod.
    let conf = node.conf("1.1.0", json!({"subnet": "10.244.9.0/30"}));
    cni(&node.ns, "ADD", "c1", path(&pod1), &conf).ok();
    let before = node.state(&pod2);
    let run = cni(&node.ns, "ADD", "c2", path(&pod2), &conf);
    assert_eq!(run.error_code(), u64::from(error::RANGE_EXHAUSTED), "{}", run.stdout);
    assert_eq!(node.state(&pod2), before);
}

#[test]
fn an_add_failing_part_way_undoes_everything_it_did() {
    let node = Node::new();
    let pod = netns("pod");
    // The route's gateway is not reachable from the pod: the kernel refuses it after the veth pair
    // and the addresses are in place.
    let good = node.v4();
    let other = netns("other");
    cni(&node.ns, "ADD", "other", path(&other), &good).ok();
    let before = node.state(&pod);
    let conf = node.conf(
        "1.1.0",
        json!({"subnet": "10.244.1.0/24", "routes": [{"dst": "192.168.0.0/16", "gw": "172.16.0.1"}]}),
    );
    let run = cni(&node.ns, "ADD", "c1", path(&pod), &conf);
    assert_eq!(run.error_code(), u64::from(error::KERNEL_REFUSED), "{}", run.stdout);
    assert_eq!(node.state(&pod), before);
    assert!(link(&node.ns, &host_veth_name("c1", "eth0")).is_none());

    // A link of the bridge's name that is not a bridge: refused after the allocation, released again.
    let node = Node::new();
    let made = node
        .ns
        .command("ip")
        .args(["link", "add", "cni0", "type", "veth", "peer", "cni0p"])
        .status()
        .unwrap();
    assert!(made.success());
    let before = node.state(&pod);
    let run = cni(&node.ns, "ADD", "c1", path(&pod), &node.v4());
    assert_eq!(run.error_code(), u64::from(error::INVALID_NETWORK_CONFIG), "{}", run.stdout);
    assert_eq!(node.state(&pod), before);
}

#[test]
fn a_host_port_the_kernel_refuses_undoes_the_pods_wiring_and_its_allocation() {
    let node = Node::new();
    let pod = netns("pod");
    let mut conf = node.v4();
    // Someone else's table of keel-cni's name whose `hostports` is a filter base chain: the DNAT rule,
    // the last step of ADD, is refused by the kernel after the pair, addresses and routes are in place.
    for rule in [
        "add table inet keel-cni",
        "add chain inet keel-cni postrouting { type nat hook postrouting priority 100; }",
        "add chain inet keel-cni hostports { type filter hook forward priority 0; }",
    ] {
        assert!(node.ns.command("nft").arg(rule).status().unwrap().success(), "{rule}");
    }
    let other = netns("other");
    cni(&node.ns, "ADD", "other", path(&other), &conf).ok();
    let before = node.state(&pod);
    conf["runtimeConfig"] =
        json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]});
    let run = cni(&node.ns, "ADD", "c1", path(&pod), &conf);
    assert_eq!(run.error_code(), u64::from(error::KERNEL_REFUSED), "{}", run.stdout);
    assert_eq!(node.state(&pod), before);
    assert!(link(&node.ns, &host_veth_name("c1", "eth0")).is_none());
}

#[test]
fn del_succeeds_twice_and_without_the_namespace_and_frees_eth0_at_once() {
    let node = Node::new();
    let pod = netns("pod");
    let conf = node.v4();
    cni(&node.ns, "ADD", "c1", path(&pod), &conf).ok();
    cni(&node.ns, "DEL", "c1", path(&pod), &conf).ok();
    // eth0 is free for a new ADD at once, before the old pair is destroyed.
    assert!(link(&pod, "eth0").is_none());
    cni(&node.ns, "DEL", "c1", path(&pod), &conf).ok();
    let again = cni(&node.ns, "ADD", "c1", path(&pod), &conf).ok().json();
    reach(&pod, &node.ns, "10.244.1.1".parse().unwrap());
    assert_eq!(again["interfaces"][2]["name"], "eth0");
    // DEL without CNI_NETNS, and DEL once the namespace is gone.
    let mut vars = env("DEL", "c1", "", "eth0");
    vars.retain(|(name, _)| *name != "CNI_NETNS");
    run_in(&node.ns, BIN, &vars, conf.to_string().as_bytes()).ok();
    let pod_path: PathBuf = pod.path().to_owned();
    drop(pod);
    cni(&node.ns, "DEL", "c1", &pod_path, &conf).ok();
    eventually("the retired veth pairs are destroyed", || node.tombstones_gone());
    assert_eq!(links(&node.ns), vec!["cni0", "lo"]);
    assert!(node.allocations().is_empty());
}

#[test]
fn del_with_another_pods_namespace_leaves_that_pod_alone() {
    let node = Node::new();
    let (pod1, pod2) = (netns("pod1"), netns("pod2"));
    let conf = node.v4();
    cni(&node.ns, "ADD", "c1", path(&pod1), &conf).ok();
    let second = cni(&node.ns, "ADD", "c2", path(&pod2), &conf).ok().json();
    // The interface indexes are alike in both pods: only the peer check tells them apart.
    assert_eq!(link(&pod1, "eth0").unwrap()["ifindex"], link(&pod2, "eth0").unwrap()["ifindex"]);
    cni(&node.ns, "DEL", "c1", path(&pod2), &conf).ok();
    assert_eq!(link(&pod2, "eth0").unwrap()["operstate"], "UP");
    reach(&pod2, &node.ns, "10.244.1.1".parse().unwrap());
    assert_eq!(addresses(&pod2, "eth0"), vec![second["ips"][0]["address"].as_str().unwrap()]);
    eventually("c1's pair is destroyed", || link(&pod1, "eth0").is_none() && node.tombstones_gone());
}

#[test]
fn check_reports_a_missing_route_address_or_link_as_drift() {
    let node = Node::new();
    let conf = node.conf("1.0.0", json!({"subnet": "10.244.1.0/24"}));
    let sabotage: [(&str, &[&str]); 3] = [
        ("route", &["route", "del", "default"]),
        ("address", &["address", "flush", "dev", "eth0"]),
        ("link", &["link", "del", "eth0"]),
    ];
    for (index, (what, command)) in sabotage.into_iter().enumerate() {
        let pod = netns("pod");
        let container = format!("c{index}");
        let result = cni(&node.ns, "ADD", &container, path(&pod), &conf).ok().json();
        let mut checked = conf.clone();
        checked["prevResult"] = result;
        cni(&node.ns, "CHECK", &container, path(&pod), &checked).ok();
        let status = pod.command("ip").args(command).status().unwrap();
        assert!(status.success(), "{what}");
        let run = cni(&node.ns, "CHECK", &container, path(&pod), &checked);
        assert_eq!(run.error_code(), u64::from(error::DRIFT), "{what}: {}", run.stdout);
        cni(&node.ns, "DEL", &container, path(&pod), &conf).ok();
    }
    // A host end taken off the bridge.
    let pod = netns("pod");
    let result = cni(&node.ns, "ADD", "c9", path(&pod), &conf).ok().json();
    let mut checked = conf.clone();
    checked["prevResult"] = result;
    let host = host_veth_name("c9", "eth0");
    assert!(node.ns.command("ip").args(["link", "set", &host, "nomaster"]).status().unwrap().success());
    let run = cni(&node.ns, "CHECK", "c9", path(&pod), &checked);
    assert_eq!(run.error_code(), u64::from(error::DRIFT), "{}", run.stdout);
}

/// keel-cni wires its firewall edge: with ipMasq a pod reaches another host as the node, and a
/// hostPort of the pod is reached from another host; DEL takes the hostPort away.
#[test]
fn masquerade_and_host_ports_work_across_the_fabric() {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener, TcpStream};

    keel_testbed::require_root().unwrap();
    let fabric = keel_testbed::Fabric::new().unwrap();
    let node = fabric.add_host("node").unwrap();
    let other = fabric.add_host("other").unwrap();
    let pod = netns("pod");
    let data = tempfile::tempdir().unwrap();
    let conf = json!({
        "cniVersion": "1.1.0", "name": "kube", "type": "keel-cni", "bridge": "cni0", "isGateway": true,
        "isDefaultGateway": true, "hairpinMode": true, "ipMasq": true, "clusterCIDRs": ["10.244.0.0/16"],
        "ipam": {"subnet": "10.244.1.0/24", "dataDir": data.path()},
        "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]},
    });
    let result = cni(node.ns(), "ADD", "c1", path(&pod), &conf).ok().json();
    let pod_address = pod_ip(&result, 0);

    // Pod → other host: seen as coming from the node.
    let listener = other.run(|| TcpListener::bind((other.address(), 0))).unwrap().unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::scope(|scope| {
        let accepted = scope.spawn(|| listener.accept().unwrap().1);
        pod.run(|| TcpStream::connect((other.address(), port)).unwrap()).unwrap();
        let peer: SocketAddr = accepted.join().unwrap();
        assert_eq!(peer.ip(), IpAddr::V4(node.address()));
    });

    // Other host → node:8080 → pod:80.
    let server = pod.run(|| TcpListener::bind((pod_address, 80))).unwrap().unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let (mut stream, _) = server.accept().unwrap();
            stream.write_all(b"from the pod").unwrap();
        });
        let mut answer = String::new();
        other
            .run(|| TcpStream::connect((node.address(), 8080)).unwrap().read_to_string(&mut answer).unwrap())
            .unwrap();
        assert_eq!(answer, "from the pod");
    });

    cni(node.ns(), "DEL", "c1", path(&pod), &conf).ok();
    let refused = other.run(|| {
        TcpStream::connect_timeout(
            &SocketAddr::from((node.address(), 8080)),
            std::time::Duration::from_secs(2),
        )
    });
    assert!(refused.unwrap().is_err(), "the hostPort still answers after DEL");
}

#[test]
fn gc_releases_what_is_not_valid_and_destroys_tombstones_and_status_answers() {
    let node = Node::new();
    let (pod1, pod2) = (netns("pod1"), netns("pod2"));
    let conf = node.v4();
    let first = cni(&node.ns, "ADD", "c1", path(&pod1), &conf).ok().json();
    cni(&node.ns, "ADD", "c2", path(&pod2), &conf).ok();
    // A tombstone a crashed DEL left behind.
    let mut made = node.ns.command("ip");
    made.args(["link", "add", "kdel-ffff", "type", "veth", "peer", "kdel-fffe"]);
    assert!(made.status().unwrap().success());
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] = json!([{"containerID": "c1", "ifname": "eth0"}]);
    let vars = [("CNI_COMMAND", "GC"), ("CNI_PATH", "/usr/lib/cni")];
    run_in(&node.ns, BIN, &vars, gc.to_string().as_bytes()).ok();
    let kept = first["ips"][0]["address"].as_str().unwrap().split('/').next().unwrap().to_owned();
    assert_eq!(node.allocations(), vec![kept]);
    assert!(node.tombstones_gone());
    let vars = [("CNI_COMMAND", "STATUS"), ("CNI_PATH", "/usr/lib/cni")];
    run_in(&node.ns, BIN, &vars, conf.to_string().as_bytes()).ok();
}
