//! keel-cni's nftables edge against the kernel (root): a "node" host on a testbed fabric with a bridge
//! and pod namespaces on it, the firewall driven from inside the node namespace, traffic between real
//! sockets, and the ruleset read back with `nft -j list table inet keel-cni`.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use ipnet::IpNet;
use keel_cni::nft::NftFirewall;
use keel_cni::plugin::Firewall;
use keel_cni::spec::{Attachment, Error, PortMapping};
use keel_testbed::{Fabric, Host, NetNs};
use serde_json::Value;

const BRIDGE: &str = "cni0";
const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 244, 1, 1);
const TIMEOUT: Duration = Duration::from_secs(5);

/// A node with bridge cni0 (10.244.1.1/24) and IPv4 forwarding on, inside its own namespace.
struct Node {
    fabric: Fabric,
    host: Host,
    pods: Vec<Pod>,
}

struct Pod {
    ns: NetNs,
    address: Ipv4Addr,
    /// The bridge port (node side of the veth).
    port: String,
}

impl Node {
    fn new() -> Result<Node> {
        keel_testbed::require_root()?;
        let fabric = Fabric::new()?;
        let host = keel_testbed::bridge::node(&fabric, BRIDGE, GATEWAY, 24)?;
        Ok(Node { fabric, host, pods: Vec::new() })
    }

    /// Adds a pod at 10.244.1.<n> on the bridge, default route via the bridge; returns its index.
    fn add_pod(&mut self, n: u8) -> Result<usize> {
        let address = Ipv4Addr::new(10, 244, 1, n);
        let (ns, port) =
            keel_testbed::bridge::pod(&self.fabric, &self.host, BRIDGE, GATEWAY, address, 24, n)?;
        self.pods.push(Pod { ns, address, port });
        Ok(self.pods.len() - 1)
    }

    /// Runs `f` with a fresh firewall inside the node namespace (as each CNI invocation would).
    fn firewall<T: Send>(&self, f: impl FnOnce(&mut NftFirewall) -> T + Send) -> Result<T> {
        self.host.run(|| f(&mut NftFirewall::new()))
    }

    /// The rules of keel-cni's table: (chain, comment, the rule as JSON).
    fn rules(&self) -> Result<Vec<(String, String, Value)>> {
        let table = self.table()?;
        let mut rules = Vec::new();
        for item in table["nftables"].as_array().into_iter().flatten() {
            if let Some(rule) = item.get("rule") {
                let chain = rule["chain"].as_str().unwrap_or_default().to_owned();
                let comment = rule["comment"].as_str().unwrap_or_default().to_owned();
                rules.push((chain, comment, rule.clone()));
            }
        }
        Ok(rules)
    }

    fn chains(&self) -> Result<Vec<String>> {
        let table = self.table()?;
        Ok(table["nftables"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|item| item.get("chain").and_then(|c| c["name"].as_str()).map(str::to_owned))
            .collect())
    }

    fn table(&self) -> Result<Value> {
        let output = run(self.host.command("nft").args(["-j", "list", "table", "inet", "keel-cni"]))?;
        serde_json::from_str(&output).context("parse nft -j output")
    }

    fn comments(&self) -> Result<Vec<String>> {
        Ok(self.rules()?.into_iter().map(|(_, comment, _)| comment).filter(|c| !c.is_empty()).collect())
    }
}

fn run(command: &mut std::process::Command) -> Result<String> {
    let output = command.output().with_context(|| format!("run {command:?}"))?;
    if !output.status.success() {
        bail!("{command:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn net(text: &str) -> IpNet {
    text.parse().unwrap()
}

fn owner(id: &str) -> Attachment {
    Attachment { container_id: id.to_owned(), ifname: "eth0".to_owned() }
}

fn mapping(protocol: &str, host_port: u16, container_port: u16, host_ip: Option<IpAddr>) -> PortMapping {
    PortMapping { host_port, container_port, protocol: protocol.to_owned(), host_ip }
}

/// A server that answers every TCP connection and UDP datagram with the source address it saw, until
/// dropped.
struct EchoSource {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl EchoSource {
    /// Listens on `port` (TCP and UDP) inside `ns`.
    fn start(ns: &NetNs, port: u16) -> Result<EchoSource> {
        let (tcp, udp) = ns.run(|| -> Result<(TcpListener, UdpSocket)> {
            Ok((TcpListener::bind(("0.0.0.0", port))?, UdpSocket::bind(("0.0.0.0", port))?))
        })??;
        tcp.set_nonblocking(true)?;
        udp.set_read_timeout(Some(Duration::from_millis(50)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let tcp_stop = Arc::clone(&stop);
        let tcp_thread = std::thread::spawn(move || {
            while !tcp_stop.load(Ordering::Relaxed) {
                match tcp.accept() {
                    Ok((mut stream, peer)) => {
                        let _ = stream.write_all(peer.ip().to_string().as_bytes());
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        let udp_stop = Arc::clone(&stop);
        let udp_thread = std::thread::spawn(move || {
            let mut buffer = [0u8; 64];
            while !udp_stop.load(Ordering::Relaxed) {
                if let Ok((_, peer)) = udp.recv_from(&mut buffer) {
                    let _ = udp.send_to(peer.ip().to_string().as_bytes(), peer);
                }
            }
        });
        Ok(EchoSource { stop, threads: vec![tcp_thread, udp_thread] })
    }
}

impl Drop for EchoSource {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Connects over TCP from inside `ns` and returns the source address the server saw.
fn tcp_source_seen(ns: &NetNs, target: SocketAddr) -> Result<String> {
    ns.run(|| -> Result<String> {
        let mut stream =
            TcpStream::connect_timeout(&target, TIMEOUT).with_context(|| format!("connect {target}"))?;
        stream.set_read_timeout(Some(TIMEOUT))?;
        let mut seen = String::new();
        stream.read_to_string(&mut seen).with_context(|| format!("read from {target}"))?;
        Ok(seen)
    })?
}

/// Sends a UDP datagram from inside `ns` and returns the source address the server saw.
fn udp_source_seen(ns: &NetNs, target: SocketAddr) -> Result<String> {
    ns.run(|| -> Result<String> {
        let socket = UdpSocket::bind("0.0.0.0:0")?;
        socket.set_read_timeout(Some(Duration::from_millis(500)))?;
        let mut buffer = [0u8; 64];
        // Retried: the first datagram may race the neighbour resolution.
        for _ in 0..6 {
            socket.send_to(b"who am i", target)?;
            if let Ok((len, _)) = socket.recv_from(&mut buffer) {
                return Ok(String::from_utf8_lossy(&buffer[..len]).into_owned());
            }
        }
        bail!("no UDP answer from {target}")
    })?
}

fn ns_of(host: &Host) -> &NetNs {
    host.ns()
}

#[test]
fn masquerade_hides_pods_behind_the_node_except_towards_excluded_cidrs() -> Result<()> {
    let mut node = Node::new()?;
    let pod = node.add_pod(2)?;
    let server = node.fabric.add_host("server")?;
    let _echo = EchoSource::start(ns_of(&server), 9000)?;
    let target = SocketAddr::new(IpAddr::V4(server.address()), 9000);
    let node_address = node.host.address().to_string();

    let sources = [net("10.244.1.0/24")];
    let cluster = [net("10.244.0.0/16")];
    node.firewall(|fw| fw.ensure_masquerade(BRIDGE, &sources, &cluster))??;
    // The server has no route to the pod subnet: the pod reaches it only as the node.
    assert_eq!(tcp_source_seen(&node.pods[pod].ns, target)?, node_address);

    // In place: a second call adds nothing.
    let before = node.rules()?;
    node.firewall(|fw| fw.ensure_masquerade(BRIDGE, &sources, &cluster))??;
    assert_eq!(node.rules()?, before);
    let masquerades = |node: &Node| -> Result<Vec<(String, String, Value)>> {
        Ok(node.rules()?.into_iter().filter(|(_, comment, _)| comment.contains("masquerade")).collect())
    };
    assert_eq!(masquerades(&node)?.len(), 1, "{before:#?}");
    let rule = &before
        .iter()
        .find(|(chain, ..)| chain.starts_with("masquerade-cni0-"))
        .context("masquerade rule")?
        .2;
    let text = rule.to_string();
    for expected in
        [r#""addr":"10.244.1.0","len":24"#, r#""op":"!=""#, r#""right":"cni0""#, r#""masquerade""#]
    {
        assert!(text.contains(expected), "{expected} in {text}");
    }

    // A new configuration (the fabric excluded too) replaces the old one atomically: the server, given
    // a route back, now sees the pod itself.
    run(server.command("ip").args(["route", "add", "10.244.1.0/24", "via", &node_address]))?;
    let wider = [net("10.244.0.0/16"), net("198.18.0.0/16")];
    node.firewall(|fw| fw.ensure_masquerade(BRIDGE, &sources, &wider))??;
    assert_eq!(masquerades(&node)?.len(), 1);
    assert_eq!(node.chains()?.iter().filter(|c| c.starts_with("masquerade-")).count(), 1);
    assert_eq!(tcp_source_seen(&node.pods[pod].ns, target)?, node.pods[pod].address.to_string());

    // Another bridge has rules of its own; this bridge's stay.
    node.firewall(|fw| fw.ensure_masquerade("cni1", &[net("10.245.0.0/24")], &[net("10.245.0.0/16")]))??;
    assert_eq!(masquerades(&node)?.len(), 2);
    Ok(())
}

#[test]
fn hostports_reach_the_pod_from_another_host_and_from_the_pod_itself() -> Result<()> {
    let mut node = Node::new()?;
    let pod = node.add_pod(2)?;
    let client = node.fabric.add_host("client")?;
    let _echo = EchoSource::start(&node.pods[pod].ns, 80)?;
    let pod_ip = IpAddr::V4(node.pods[pod].address);
    let node_ip = IpAddr::V4(node.host.address());
    let mappings = [
        mapping("tcp", 8080, 80, None),
        mapping("udp", 8080, 80, None),
        mapping("tcp", 8081, 80, Some(node_ip)),
        mapping("tcp", 8082, 80, Some(IpAddr::V4(GATEWAY))),
    ];
    node.firewall(|fw| fw.ensure_masquerade(BRIDGE, &[net("10.244.1.0/24")], &[net("10.244.0.0/16")]))??;
    node.firewall(|fw| fw.add_port_mappings(&owner("pod2"), BRIDGE, &[pod_ip], &mappings))??;

    // From another host: TCP and UDP reach the pod; the pod sees the client (no source NAT).
    let client_address = client.address().to_string();
    let client_ns = ns_of(&client);
    assert_eq!(tcp_source_seen(client_ns, SocketAddr::new(node_ip, 8080))?, client_address);
    assert_eq!(udp_source_seen(client_ns, SocketAddr::new(node_ip, 8080))?, client_address);
    // hostIP: 8081 is bound to the node's fabric address, 8082 to the bridge address only.
    assert_eq!(tcp_source_seen(client_ns, SocketAddr::new(node_ip, 8081))?, client_address);
    let refused = tcp_source_seen(client_ns, SocketAddr::new(node_ip, 8082));
    assert!(refused.is_err(), "8082 is for 10.244.1.1 only: {refused:?}");
    // From the node itself (the output chain).
    let node_ns = ns_of(&node.host);
    assert!(tcp_source_seen(node_ns, SocketAddr::new(node_ip, 8080)).is_ok());

    // Hairpin: the pod reaches itself through the node's address, masqueraded to the bridge's, once
    // its bridge port reflects frames back to it.
    run(node.host.command("ip").args([
        "link",
        "set",
        "dev",
        &node.pods[pod].port,
        "type",
        "bridge_slave",
        "hairpin",
        "on",
    ]))?;
    let pod_ns = &node.pods[pod].ns;
    assert_eq!(tcp_source_seen(pod_ns, SocketAddr::new(node_ip, 8080))?, GATEWAY.to_string());
    assert_eq!(udp_source_seen(pod_ns, SocketAddr::new(node_ip, 8080))?, GATEWAY.to_string());

    node.firewall(|fw| fw.check_port_mappings(&owner("pod2"), &mappings))??;
    node.firewall(|fw| fw.remove_port_mappings(&owner("pod2")))??;
    assert!(tcp_source_seen(client_ns, SocketAddr::new(node_ip, 8080)).is_err(), "removed");
    Ok(())
}

#[test]
fn rules_belong_to_their_owner_for_remove_check_and_gc() -> Result<()> {
    let node = Node::new()?;
    let ip = |n: u8| IpAddr::V4(Ipv4Addr::new(10, 244, 1, n));
    let web = [mapping("tcp", 8080, 80, None), mapping("sctp", 9000, 9000, None)];
    let dns = [
        mapping("udp", 53, 5353, Some("198.18.0.9".parse()?)),
        mapping("udp", 54, 5354, Some("fd00::1".parse()?)),
    ];
    for (id, n, mappings) in [("a", 2, &web[..]), ("b", 3, &dns[..]), ("c", 4, &web[..1])] {
        node.firewall(|fw| fw.add_port_mappings(&owner(id), BRIDGE, &[ip(n)], mappings))??;
    }
    let owned = |node: &Node, id: &str| -> Result<usize> {
        let prefix = format!("keel-cni hostport {id}/eth0 ");
        let hairpin = format!("keel-cni hairpin {id}/eth0");
        Ok(node.comments()?.iter().filter(|c| c.starts_with(&prefix) || **c == hairpin).count())
    };
    // a: two DNAT rules and a hairpin; b: one (its IPv6 hostIP does not apply to an IPv4 pod) and a
    // hairpin; c: one and a hairpin.
    assert_eq!((owned(&node, "a")?, owned(&node, "b")?, owned(&node, "c")?), (3, 2, 2));
    // The table's jumps from prerouting and output are made once.
    let jumps =
        node.rules()?.into_iter().filter(|(chain, ..)| chain == "prerouting" || chain == "output").count();
    assert_eq!(jumps, 2);

    node.firewall(|fw| fw.check_port_mappings(&owner("a"), &web))??;
    node.firewall(|fw| fw.check_port_mappings(&owner("b"), &dns[..1]))??;
    node.firewall(|fw| fw.remove_port_mappings(&owner("a")))??;
    node.firewall(|fw| fw.remove_port_mappings(&owner("a")))??; // twice is fine
    assert_eq!((owned(&node, "a")?, owned(&node, "b")?, owned(&node, "c")?), (0, 2, 2));
    let drift: Error = node.firewall(|fw| fw.check_port_mappings(&owner("a"), &web))?.unwrap_err();
    assert_eq!(drift.code, 101, "{drift}");

    node.firewall(|fw| fw.gc(&[owner("c"), owner("gone")]))??;
    assert_eq!((owned(&node, "b")?, owned(&node, "c")?), (0, 2));
    let chains = node.chains()?;
    for chain in ["postrouting", "prerouting", "output", "hostports"] {
        assert!(chains.iter().any(|c| c == chain), "{chain} in {chains:?}");
    }

    // Bad input is the spec's error and changes nothing.
    let before = node.rules()?;
    let bad = node
        .firewall(|fw| fw.add_port_mappings(&owner("d"), BRIDGE, &[ip(5)], &[mapping("icmp", 1, 1, None)]))?;
    assert_eq!(bad.unwrap_err().code, 7);
    let bad =
        node.firewall(|fw| fw.ensure_masquerade("a-bridge-name-too-long", &[net("10.0.0.0/8")], &[]))?;
    assert_eq!(bad.unwrap_err().code, 7);
    assert_eq!(node.rules()?, before);
    Ok(())
}

#[test]
fn a_kernel_refusal_is_error_104_with_the_errno_text_and_changes_nothing() -> Result<()> {
    let node = Node::new()?;
    // Someone else's table of the same name with a filter base chain called hostports: a DNAT rule
    // there is refused by the kernel (nat expressions need a nat chain).
    run(node.host.command("nft").args(["add table inet keel-cni"]))?;
    run(node
        .host
        .command("nft")
        .args(["add chain inet keel-cni postrouting { type nat hook postrouting priority 100; }"]))?;
    run(node
        .host
        .command("nft")
        .args(["add chain inet keel-cni hostports { type filter hook forward priority 0; }"]))?;
    let err = node
        .firewall(|fw| {
            fw.add_port_mappings(
                &owner("x"),
                BRIDGE,
                &["10.244.1.9".parse().unwrap()],
                &[mapping("tcp", 1, 2, None)],
            )
        })?
        .unwrap_err();
    assert_eq!(err.code, 104, "{err}");
    assert!(err.msg.starts_with("nftables: add rule to hostports"), "{err}");
    assert!(err.msg.ends_with("Operation not supported (os error 95)"), "{err}");
    assert!(node.rules()?.is_empty(), "the failed transaction left nothing");
    Ok(())
}

#[test]
fn concurrent_first_uses_set_the_table_up_once() -> Result<()> {
    let node = Node::new()?;
    let sources = [net("10.244.1.0/24")];
    let cluster = [net("10.244.0.0/16")];
    let web = [mapping("tcp", 8080, 80, None)];
    // Eight CNI invocations at once on a fresh node, each with its own socket.
    let results: Vec<Result<(), Error>> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..8u8)
            .map(|n| {
                let (node, sources, cluster, web) = (&node, &sources, &cluster, &web);
                scope.spawn(move || {
                    node.firewall(|fw| {
                        fw.ensure_masquerade(BRIDGE, sources, cluster)?;
                        let pod_ip = IpAddr::V4(Ipv4Addr::new(10, 244, 1, 10 + n));
                        fw.add_port_mappings(&owner(&format!("pod{n}")), BRIDGE, &[pod_ip], web)
                    })
                    .map_err(|err| Error::new(5, err.to_string()))?
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for result in results {
        result?;
    }
    let rules = node.rules()?;
    let count = |chain: &str| rules.iter().filter(|(c, ..)| c == chain).count();
    assert_eq!((count("prerouting"), count("output"), count("hostports")), (1, 1, 8), "{rules:#?}");
    let masquerade_jumps =
        rules.iter().filter(|(_, comment, _)| comment.starts_with("keel-cni masquerade")).count();
    assert_eq!(masquerade_jumps, 1);
    assert_eq!(node.chains()?.iter().filter(|c| c.starts_with("masquerade-")).count(), 1);
    Ok(())
}

#[test]
fn dual_stack_rules_are_what_nft_would_write() -> Result<()> {
    let node = Node::new()?;
    let sources = [net("10.244.1.0/24"), net("fd00:10:244:1::/64")];
    let cluster = [net("10.244.0.0/16"), net("fd00:10:244::/48")];
    node.firewall(|fw| fw.ensure_masquerade(BRIDGE, &sources, &cluster))??;
    let pod_ips: [IpAddr; 2] = ["10.244.1.5".parse()?, "fd00:10:244:1::5".parse()?];
    let mappings =
        [mapping("tcp", 8080, 80, None), mapping("udp", 5353, 53, Some("fd00:10:244:1::1".parse()?))];
    node.firewall(|fw| fw.add_port_mappings(&owner("dual"), BRIDGE, &pod_ips, &mappings))??;
    node.firewall(|fw| fw.check_port_mappings(&owner("dual"), &mappings))??;

    // nft reads back what keel-cni wrote as its own syntax.
    let listing = run(node.host.command("nft").args(["list", "table", "inet", "keel-cni"]))?;
    for expected in [
        r#"ip saddr 10.244.1.0/24 ip daddr != 10.244.0.0/16 oifname != "cni0" masquerade"#,
        r#"ip6 saddr fd00:10:244:1::/64 ip6 daddr != fd00:10:244::/48 oifname != "cni0" masquerade"#,
        "meta nfproto ipv4 tcp dport 8080 dnat ip to 10.244.1.5:80",
        "meta nfproto ipv6 tcp dport 8080 dnat ip6 to [fd00:10:244:1::5]:80",
        "ip6 daddr fd00:10:244:1::1 udp dport 5353 dnat ip6 to [fd00:10:244:1::5]:53",
        "ip6 saddr fd00:10:244:1::5 ip6 daddr fd00:10:244:1::5 masquerade",
        "fib daddr type local jump hostports",
    ] {
        assert!(listing.contains(expected), "{expected:?} in\n{listing}");
    }
    // The IPv6-only hostIP made no IPv4 rule.
    assert!(!listing.contains("udp dport 5353 dnat ip to"), "{listing}");
    node.firewall(|fw| fw.remove_port_mappings(&owner("dual")))??;
    assert_eq!(node.comments()?.iter().filter(|c| c.contains("dual/eth0")).count(), 0);
    Ok(())
}

#[test]
fn gc_of_hundreds_of_attachments_is_one_transaction() -> Result<()> {
    let node = Node::new()?;
    let web = [mapping("tcp", 8080, 80, None), mapping("udp", 8080, 80, None)];
    node.firewall(|fw| -> Result<(), Error> {
        for n in 0..300u16 {
            let pod_ip = IpAddr::V4(Ipv4Addr::new(10, 244, (n / 250) as u8, (n % 250) as u8 + 2));
            fw.add_port_mappings(&owner(&format!("p{n}")), BRIDGE, &[pod_ip], &web)?;
        }
        Ok(())
    })??;
    assert_eq!(node.comments()?.len(), 900);
    // 897 deletions in one transaction, of which only the last is acknowledged.
    node.firewall(|fw| fw.gc(&[owner("p7")]))??;
    let comments = node.comments()?;
    assert_eq!(comments.len(), 3, "{comments:?}");
    assert!(comments.iter().all(|c| c.contains(" p7/eth0")), "{comments:?}");
    Ok(())
}

/// A runtime's container ID is 64 hex digits; with a full IPv6 hostIP the rule's comment exceeds nft's
/// 127 bytes and is stored cut: CHECK must still find the rule.
#[test]
fn check_finds_hostport_rules_whose_comment_was_cut_to_nfts_length() -> Result<()> {
    let node = Node::new()?;
    let id = "0123456789abcdef".repeat(4);
    let pod_ips: [IpAddr; 2] = ["10.244.1.5".parse()?, "fd00:10:244:1::5".parse()?];
    let host: IpAddr = "fd00:1234:5678:9abc:def0:1234:5678:9abc".parse()?;
    let mappings = [mapping("tcp", 8080, 80, Some(host)), mapping("udp", 5353, 53, None)];
    node.firewall(|fw| fw.add_port_mappings(&owner(&id), BRIDGE, &pod_ips, &mappings))??;
    node.firewall(|fw| fw.check_port_mappings(&owner(&id), &mappings))??;
    // Another hostIP is still drift.
    let other = [mapping("tcp", 8080, 80, Some("fd00::1".parse()?))];
    let drift: Error = node.firewall(|fw| fw.check_port_mappings(&owner(&id), &other))?.unwrap_err();
    assert_eq!(drift.code, 101, "{drift}");
    node.firewall(|fw| fw.remove_port_mappings(&owner(&id)))??;
    assert_eq!(node.comments()?.iter().filter(|c| c.contains(&id)).count(), 0);
    Ok(())
}

/// The table is the node's, shared by every network keel-cni serves, but a runtime GCs one network at a
/// time with that network's attachments (containerd: every live sandbox with the network's ifname): the
/// GC of the network on eth0 must not delete the hostPorts of a live pod's second network (net1).
#[test]
fn gc_of_one_network_keeps_the_hostports_of_a_live_pods_other_network() -> Result<()> {
    let node = Node::new()?;
    let web = [mapping("tcp", 8080, 80, None)];
    let net1 = |id: &str| Attachment { container_id: id.to_owned(), ifname: "net1".to_owned() };
    let dns = [mapping("udp", 5353, 53, None)];
    node.firewall(|fw| -> Result<(), Error> {
        fw.add_port_mappings(&owner("live"), BRIDGE, &["10.244.1.2".parse().unwrap()], &web)?;
        fw.add_port_mappings(&net1("live"), BRIDGE, &["10.244.2.2".parse().unwrap()], &dns)?;
        fw.add_port_mappings(&owner("gone"), BRIDGE, &["10.244.1.3".parse().unwrap()], &web)?;
        fw.add_port_mappings(&net1("gone"), BRIDGE, &["10.244.2.3".parse().unwrap()], &dns)?;
        Ok(())
    })??;
    // The eth0 network's GC: only "live" is valid.
    node.firewall(|fw| fw.gc(&[owner("live")]))??;
    node.firewall(|fw| fw.check_port_mappings(&owner("live"), &web))??;
    node.firewall(|fw| fw.check_port_mappings(&net1("live"), &dns))??;
    let comments = node.comments()?;
    assert!(!comments.iter().any(|c| c.contains(" gone/")), "{comments:?}");
    Ok(())
}
