//! keel-proxy's nftables backend against the kernel (root): a node namespace on a testbed fabric with
//! bridge cni0 and pods as namespaces on it running real TCP and UDP servers; the proxier syncs from
//! inside the node namespace over netlink, and clients in the node connect to Service IPs.

use std::collections::BTreeSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use keel_proxy::backend::Proxier;
use keel_proxy::fixtures::{self, ready, slice};
use keel_proxy::nft::command::NftCommand;
use keel_proxy::nft::netlink::NftNetlink;
use keel_proxy::nft::{Apply, NftBackend, RenderConfig, Transaction};
use keel_proxy::tracker::{ChangeTracker, TrackerConfig};
use keel_testbed::{Fabric, Host, NetNs};

const BRIDGE: &str = "cni0";
const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 244, 1, 1);
const TIMEOUT: Duration = Duration::from_secs(5);
const NODE: &str = "node-a";

/// A node with bridge cni0 (10.244.1.1/24), forwarding on, and pods with servers.
struct Node {
    fabric: Fabric,
    host: Host,
    pods: Vec<Pod>,
    stop: Arc<AtomicBool>,
}

/// A pod's namespace (its servers run until the node drops).
struct Pod {
    ns: NetNs,
}

impl Node {
    fn new() -> Result<Node> {
        keel_testbed::require_root()?;
        let fabric = Fabric::new()?;
        let host = keel_testbed::bridge::node(&fabric, BRIDGE, GATEWAY, 24)?;
        Ok(Node { fabric, host, pods: Vec::new(), stop: Arc::new(AtomicBool::new(false)) })
    }

    /// A pod at 10.244.1.<n> serving TCP 8080 (answers its name and the client's address) and UDP 5353
    /// (answers its name).
    fn add_pod(&mut self, n: u8) -> Result<Ipv4Addr> {
        let address = Ipv4Addr::new(10, 244, 1, n);
        let (ns, port) =
            keel_testbed::bridge::pod(&self.fabric, &self.host, BRIDGE, GATEWAY, address, 24, n)?;
        // Hairpin mode on the bridge port, as the CNI plugin sets it (`hairpinMode`): with
        // br_netfilter, a pod's packet DNATed back to the pod itself is bridged out of the port it
        // came in by.
        run(self.host.command("bridge").args(["link", "set", "dev", &port, "hairpin", "on"]))?;
        let (tcp, udp) = ns.run(|| -> Result<(TcpListener, UdpSocket)> {
            Ok((TcpListener::bind("0.0.0.0:8080")?, UdpSocket::bind("0.0.0.0:5353")?))
        })??;
        let name = format!("pod{n}");
        serve(tcp, udp, name, Arc::clone(&self.stop))?;
        self.pods.push(Pod { ns });
        Ok(address)
    }

    fn nft(&self, args: &[&str]) -> Result<String> {
        run(self.host.command("nft").args(args))
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Answers each TCP connection with `name` and the client address it sees, each UDP datagram with
/// `name`, until `stop`.
fn serve(tcp: TcpListener, udp: UdpSocket, name: String, stop: Arc<AtomicBool>) -> Result<()> {
    tcp.set_nonblocking(true)?;
    udp.set_read_timeout(Some(Duration::from_millis(50)))?;
    let tcp_name = name.clone();
    let tcp_stop = Arc::clone(&stop);
    std::thread::spawn(move || {
        while !tcp_stop.load(Ordering::Relaxed) {
            match tcp.accept() {
                Ok((mut stream, peer)) => {
                    let _ = stream.write_all(format!("{tcp_name} {}", peer.ip()).as_bytes());
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
    });
    std::thread::spawn(move || {
        let mut buffer = [0u8; 64];
        while !stop.load(Ordering::Relaxed) {
            if let Ok((_, peer)) = udp.recv_from(&mut buffer) {
                let _ = udp.send_to(name.as_bytes(), peer);
            }
        }
    });
    Ok(())
}

fn run(command: &mut std::process::Command) -> Result<String> {
    let output = command.output().with_context(|| format!("run {command:?}"))?;
    if !output.status.success() {
        bail!("{command:?}: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8(output.stdout)?)
}

/// Connects to `target` from inside `ns` and reads the server's name and the client address it saw.
fn fetch_in(ns: &NetNs, target: SocketAddr) -> Result<std::io::Result<(String, String)>> {
    ns.run(move || {
        let mut stream = TcpStream::connect_timeout(&target, TIMEOUT)?;
        stream.set_read_timeout(Some(TIMEOUT))?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        let (name, peer) = answer.split_once(' ').unwrap_or((answer.as_str(), ""));
        Ok((name.to_owned(), peer.to_owned()))
    })
}

/// Connects to `target` from inside `host` and reads the server's name.
fn fetch(host: &Host, target: SocketAddr) -> Result<std::io::Result<String>> {
    Ok(fetch_in(host.ns(), target)?.map(|(name, _)| name))
}

/// The names answering `count` connections to `target`.
fn names(host: &Host, target: SocketAddr, count: usize) -> Result<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for _ in 0..count {
        names.insert(fetch(host, target)?.with_context(|| format!("connect to {target}"))?);
    }
    Ok(names)
}

fn proxier<A: Apply>(edge: A) -> Proxier<NftBackend<A>> {
    let config =
        RenderConfig { cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap()], nodeport_addresses: vec![] };
    let tracker = ChangeTracker::new(TrackerConfig { node_name: NODE.into(), proxy_name: None });
    Proxier::new(tracker, NftBackend::new(&config, edge))
}

/// One sync from inside the node's namespace (the netlink socket opens there at first use).
fn sync<A: Apply + Send>(node: &Node, proxier: &mut Proxier<NftBackend<A>>) -> Result<()> {
    node.host.run(|| proxier.sync())?.context("sync")?;
    Ok(())
}

fn web_slice(addresses: &[Ipv4Addr]) -> EndpointSlice {
    let endpoints = addresses.iter().map(|a| ready(&a.to_string(), NODE)).collect();
    slice("web-1", "web", &[("http", "TCP", 8080)], endpoints)
}

fn target(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse().unwrap(), port)
}

#[test]
fn cluster_ip_reaches_every_endpoint_and_follows_endpoint_changes() -> Result<()> {
    let mut node = Node::new()?;
    let pods: Vec<Ipv4Addr> = (2..5).map(|n| node.add_pod(n)).collect::<Result<_>>()?;
    let mut proxier = proxier(NftNetlink::new());
    proxier.tracker.update_service(&fixtures::service("web", "10.96.0.10", &[("http", "TCP", 80, None)]));
    proxier.tracker.update_slice(&web_slice(&pods));
    sync(&node, &mut proxier)?;
    let web = target("10.96.0.10", 80);
    assert_eq!(names(&node.host, web, 60)?, ["pod2", "pod3", "pod4"].map(String::from).into());

    // pod4 leaves: the next sync (partial) stops sending it traffic.
    proxier.tracker.update_slice(&web_slice(&pods[..2]));
    sync(&node, &mut proxier)?;
    assert!(!proxier.backend().last().to_string().contains("add table"), "a partial sync");
    assert_eq!(names(&node.host, web, 40)?, ["pod2", "pod3"].map(String::from).into());

    // And comes back.
    proxier.tracker.update_slice(&web_slice(&pods));
    sync(&node, &mut proxier)?;
    assert_eq!(names(&node.host, web, 60)?, ["pod2", "pod3", "pod4"].map(String::from).into());
    Ok(())
}

#[test]
fn a_service_without_endpoints_refuses_at_once() -> Result<()> {
    let node = Node::new()?;
    let mut proxier = proxier(NftNetlink::new());
    proxier.tracker.update_service(&fixtures::service("empty", "10.96.0.20", &[("", "TCP", 80, None)]));
    sync(&node, &mut proxier)?;
    let outcome = fetch(&node.host, target("10.96.0.20", 80))?;
    match outcome {
        Err(err) => assert_eq!(err.kind(), ErrorKind::ConnectionRefused, "{err}"),
        Ok(name) => bail!("{name} answered a Service without endpoints"),
    }
    Ok(())
}

#[test]
fn udp_service_answers_from_its_endpoint() -> Result<()> {
    let mut node = Node::new()?;
    let pod = node.add_pod(2)?;
    let mut proxier = proxier(NftNetlink::new());
    proxier.tracker.update_service(&fixtures::service("dns", "10.96.0.53", &[("dns", "UDP", 53, None)]));
    proxier.tracker.update_slice(&slice(
        "dns-1",
        "dns",
        &[("dns", "UDP", 5353)],
        vec![ready(&pod.to_string(), NODE)],
    ));
    sync(&node, &mut proxier)?;
    let answer = node.host.run(|| -> std::io::Result<String> {
        let socket = UdpSocket::bind("0.0.0.0:0")?;
        socket.set_read_timeout(Some(TIMEOUT))?;
        socket.connect("10.96.0.53:53")?;
        socket.send(b"who")?;
        let mut buffer = [0u8; 64];
        let len = socket.recv(&mut buffer)?;
        Ok(String::from_utf8_lossy(&buffer[..len]).into_owned())
    })??;
    assert_eq!(answer, "pod2");
    Ok(())
}

#[test]
fn a_partial_sync_changes_only_its_service() -> Result<()> {
    let mut node = Node::new()?;
    let pods: Vec<Ipv4Addr> = (2..4).map(|n| node.add_pod(n)).collect::<Result<_>>()?;
    let mut proxier = proxier(NftNetlink::new());
    proxier.tracker.update_service(&fixtures::service("web", "10.96.0.10", &[("http", "TCP", 80, None)]));
    proxier.tracker.update_slice(&web_slice(&pods));
    proxier.tracker.update_service(&fixtures::service("other", "10.96.0.11", &[("", "TCP", 80, None)]));
    let other = slice("other-1", "other", &[("", "TCP", 8080)], vec![ready(&pods[0].to_string(), NODE)]);
    proxier.tracker.update_slice(&other);
    sync(&node, &mut proxier)?;
    // Everything of `other`, with rule handles: recreated rules would get new ones.
    let of_other = |node: &Node| -> Result<Vec<String>> {
        let listing = node.nft(&["-a", "list", "table", "ip", "keel-proxy"])?;
        let mut in_chain = false;
        Ok(listing
            .lines()
            .filter(|line| {
                if line.contains("chain service-") {
                    in_chain = line.contains("/other/");
                } else if line.trim() == "}" {
                    in_chain = false;
                }
                in_chain || line.contains("/other/") || line.contains("10.96.0.11")
            })
            .map(String::from)
            .collect())
    };
    let before = of_other(&node)?;
    assert!(before.len() >= 3 && before.iter().any(|line| line.contains("dnat ip to")), "{before:?}");

    proxier.tracker.update_slice(&web_slice(&pods[..1]));
    sync(&node, &mut proxier)?;
    assert_eq!(of_other(&node)?, before);
    assert_eq!(names(&node.host, target("10.96.0.10", 80), 20)?, ["pod2"].map(String::from).into());
    assert_eq!(names(&node.host, target("10.96.0.11", 80), 5)?, ["pod2"].map(String::from).into());
    Ok(())
}

/// The golden transactions through netlink and through `nft -f` give the same ruleset.
#[test]
fn netlink_and_nft_load_the_same_ruleset() -> Result<()> {
    keel_testbed::require_root()?;
    let fabric = Fabric::new()?;
    let (by_netlink, by_nft) = (fabric.add_host("netlink")?, fabric.add_host("nft")?);
    let golden = |name: &str| -> Result<String> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name);
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))
    };
    let (full, partial) = (golden("full.nft")?, golden("partial.nft")?);
    for script in [&full, &partial] {
        let mut child = by_nft
            .command("nft")
            .args(["-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        child.stdin.take().context("stdin")?.write_all(script.as_bytes())?;
        let output = child.wait_with_output()?;
        if !output.status.success() {
            bail!("nft -f: {}", String::from_utf8_lossy(&output.stderr));
        }
    }
    let transactions = keel_proxy::fixtures::golden_transactions();
    assert_eq!(transactions[0].to_string(), full, "the golden file is the render's output");
    assert_eq!(transactions[1].to_string(), partial);
    let mut edge = NftNetlink::new();
    by_netlink
        .run(|| transactions.iter().try_for_each(|transaction: &Transaction| edge.apply(transaction)))??;
    let list = |host: &Host| run(host.command("nft").args(["list", "ruleset"]));
    let (netlink_rules, nft_rules) = (list(&by_netlink)?, list(&by_nft)?);
    assert_eq!(netlink_rules, nft_rules);
    Ok(())
}

/// The `nft -f` edge drives the same data path (`nft` runs in the namespace of the syncing thread).
#[test]
fn the_nft_command_edge_serves_a_cluster_ip() -> Result<()> {
    let mut node = Node::new()?;
    let pod = node.add_pod(2)?;
    let mut proxier = proxier(NftCommand::default());
    proxier.tracker.update_service(&fixtures::service("web", "10.96.0.10", &[("http", "TCP", 80, None)]));
    proxier.tracker.update_slice(&web_slice(&[pod]));
    sync(&node, &mut proxier)?;
    assert_eq!(names(&node.host, target("10.96.0.10", 80), 3)?, ["pod2"].map(String::from).into());
    Ok(())
}

#[test]
fn node_ports_answer_another_host_and_external_policy_local_keeps_the_source() -> Result<()> {
    let mut node = Node::new()?;
    let pod = node.add_pod(2)?;
    let client = node.fabric.add_host("client")?;
    let mut proxier = proxier(NftNetlink::new());
    let cluster = fixtures::node_port(fixtures::service("np", "10.96.0.70", &[("", "TCP", 80, Some(30080))]));
    let mut local =
        fixtures::node_port(fixtures::service("npl", "10.96.0.71", &[("", "TCP", 80, Some(30081))]));
    local.spec.as_mut().unwrap().external_traffic_policy = Some("Local".into());
    proxier.tracker.update_service(&cluster);
    proxier.tracker.update_service(&local);
    for service in ["np", "npl"] {
        let endpoints = vec![ready(&pod.to_string(), NODE)];
        proxier.tracker.update_slice(&slice(
            &format!("{service}-1"),
            service,
            &[("", "TCP", 8080)],
            endpoints,
        ));
    }
    sync(&node, &mut proxier)?;
    let node_address = IpAddr::V4(node.host.address());
    // externalTrafficPolicy Cluster: masqueraded to the node's address on the pods' bridge.
    let (name, seen) = fetch_in(client.ns(), SocketAddr::new(node_address, 30080))??;
    assert_eq!((name.as_str(), seen.as_str()), ("pod2", GATEWAY.to_string().as_str()));
    // Local: the client's own address.
    let (name, seen) = fetch_in(client.ns(), SocketAddr::new(node_address, 30081))??;
    assert_eq!((name.as_str(), seen.as_str()), ("pod2", client.address().to_string().as_str()));
    Ok(())
}

#[test]
fn a_pod_reaches_itself_through_its_service() -> Result<()> {
    let mut node = Node::new()?;
    let pod = node.add_pod(2)?;
    let mut proxier = proxier(NftNetlink::new());
    proxier.tracker.update_service(&fixtures::service("self", "10.96.0.80", &[("", "TCP", 80, None)]));
    let endpoints = vec![ready(&pod.to_string(), NODE)];
    proxier.tracker.update_slice(&slice("self-1", "self", &[("", "TCP", 8080)], endpoints));
    sync(&node, &mut proxier)?;
    // Hairpin: masqueraded, so the reply comes back through the node to be translated.
    let (name, seen) = fetch_in(&node.pods[0].ns, target("10.96.0.80", 80))??;
    assert_eq!((name.as_str(), seen.as_str()), ("pod2", GATEWAY.to_string().as_str()));
    Ok(())
}

#[test]
fn client_ip_affinity_sticks_and_its_entry_expires() -> Result<()> {
    let mut node = Node::new()?;
    let pods: Vec<Ipv4Addr> = (2..5).map(|n| node.add_pod(n)).collect::<Result<_>>()?;
    let mut proxier = proxier(NftNetlink::new());
    // A 3 s timeout: each connection refreshes the entry, so it holds while the gaps between them stay
    // shorter (a loaded machine can stall a fetch for over a second).
    let service = fixtures::affinity(fixtures::service("sticky", "10.96.0.90", &[("", "TCP", 80, None)]), 3);
    proxier.tracker.update_service(&service);
    let endpoints = pods.iter().map(|a| ready(&a.to_string(), NODE)).collect();
    proxier.tracker.update_slice(&slice("sticky-1", "sticky", &[("", "TCP", 8080)], endpoints));
    sync(&node, &mut proxier)?;
    let sticky = target("10.96.0.90", 80);
    let first = fetch(&node.host, sticky)??;
    for _ in 0..20 {
        assert_eq!(fetch(&node.host, sticky)??, first, "affinity holds");
    }
    // The client's entry sits in the chosen endpoint's set, then expires after its timeout.
    let holders = |node: &Node| -> Result<usize> {
        let listing = node.nft(&["list", "table", "ip", "keel-proxy"])?;
        Ok(listing.lines().filter(|line| line.contains("elements = {") && line.contains("expires")).count())
    };
    assert_eq!(holders(&node)?, 1);
    let mut expired = false;
    for _ in 0..150 {
        std::thread::sleep(Duration::from_millis(100));
        if holders(&node)? == 0 {
            expired = true;
            break;
        }
    }
    assert!(expired, "the affinity entry outlived 15 s with a 3 s timeout");
    Ok(())
}

/// keel-apiserver's binary beside this test's (built with the workspace: `cargo build`).
fn apiserver_binary() -> Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().and_then(std::path::Path::parent).context("the test binary's directory")?;
    let binary = dir.join("keel-apiserver");
    if !binary.exists() {
        bail!("{} is missing: build it first (cargo build -p keel-apiserver)", binary.display());
    }
    Ok(binary)
}

/// Which kube-proxy [`api_scenario`] runs.
#[derive(Debug, Clone, Copy)]
enum Proxy {
    Keel,
    /// The upstream kube-proxy v1.34 in nftables mode (`cargo xtask peers`).
    Upstream,
}

/// The binary end to end: keel-apiserver and keel-proxy inside the node's namespace; a Service and
/// an EndpointSlice written through the API (no EndpointSlice controller yet) change the data path.
#[test]
fn services_and_slices_written_through_the_api_change_the_data_path() -> Result<()> {
    api_scenario(Proxy::Keel)
}

/// The same scenario with the upstream kube-proxy v1.34 (nftables mode) against keel-apiserver: the
/// interop half of the differential test (a failure here is a keel-apiserver compatibility bug).
#[test]
fn kube_proxy_v1_34_against_keel_apiserver_changes_the_data_path() -> Result<()> {
    api_scenario(Proxy::Upstream)
}

/// kube-proxy's command line: as keel-proxy's, with every conntrack sysctl left alone (the machine's
/// conntrack table size is global, not the test namespace's).
fn kube_proxy_command(kubeconfig: &std::path::Path) -> Result<std::process::Command> {
    let mut command = std::process::Command::new(keel_testbed::peers::path("kube-proxy")?);
    command.arg("--kubeconfig").arg(kubeconfig).args(fixtures::proxy_flags(true, NODE));
    Ok(command)
}

fn api_scenario(proxy: Proxy) -> Result<()> {
    use keel_testbed::process::Readiness;

    let mut node = Node::new()?;
    let pods: Vec<Ipv4Addr> = (2..4).map(|n| node.add_pod(n)).collect::<Result<_>>()?;
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let kubeconfig = data.join("admin.kubeconfig");
    let mut command = std::process::Command::new(apiserver_binary()?);
    command.arg("--data-dir").arg(&data).args([
        "--bind-address",
        "127.0.0.1",
        "--secure-port",
        "6443",
        "--service-cluster-ip-range",
        "10.96.0.0/16",
    ]);
    let mut probe = std::process::Command::new("test");
    probe.arg("-s").arg(&kubeconfig);
    let _apiserver = node.host.start_daemon(
        "keel-apiserver",
        command,
        Readiness::Command(probe),
        Duration::from_secs(60),
    )?;
    let command = match proxy {
        Proxy::Keel => {
            let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_keel-proxy"));
            command.arg("--kubeconfig").arg(&kubeconfig).args(fixtures::proxy_flags(false, NODE));
            command
        }
        Proxy::Upstream => kube_proxy_command(&kubeconfig)?,
    };

    // Objects go in through kubectl, as a user writes them (inside the node, where the API is).
    let kubectl = keel_testbed::kubectl::newest()?;
    let kubectl = |args: &[&str], stdin: Option<String>| -> Result<String> {
        let mut command = node.host.command(&kubectl.path);
        command.arg("--kubeconfig").arg(&kubeconfig).args(args);
        command.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
        command.stderr(std::process::Stdio::piped());
        let mut child = command.spawn().context("run kubectl")?;
        if let Some(text) = stdin {
            child.stdin.take().context("stdin")?.write_all(text.as_bytes())?;
        }
        drop(child.stdin.take());
        let output = child.wait_with_output()?;
        if !output.status.success() {
            bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let apply = |object: serde_json::Value| kubectl(&["apply", "-f", "-"], Some(object.to_string()));
    let typed = |kind: &str, api_version: &str, object: serde_json::Value| {
        let mut object = object;
        object["kind"] = kind.into();
        object["apiVersion"] = api_version.into();
        object
    };
    // This node's Node object, which both proxies watch (kube-proxy waits for it before its first sync).
    apply(serde_json::json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}}))?;
    // Its address, as a kubelet reports it (kube-proxy otherwise waits 30 s for one, then assumes
    // loopback).
    let addresses = serde_json::json!({"status": {"addresses": [{"type": "InternalIP", "address": GATEWAY.to_string()}]}});
    kubectl(
        &["patch", "node", NODE, "--subresource=status", "--type=merge", "-p", &addresses.to_string()],
        None,
    )?;
    let name = match proxy {
        Proxy::Keel => "keel-proxy",
        Proxy::Upstream => "kube-proxy",
    };
    let _proxy = node.host.start_daemon(name, command, Readiness::None, Duration::from_secs(10))?;
    let web = typed(
        "Service",
        "v1",
        serde_json::to_value(fixtures::service("web", "10.96.0.10", &[("http", "TCP", 80, None)]))?,
    );
    let create = |slice: EndpointSlice| -> Result<()> {
        apply(web.clone())?;
        apply(typed("EndpointSlice", "discovery.k8s.io/v1", serde_json::to_value(slice)?))?;
        Ok(())
    };
    create(web_slice(&pods))?;
    let target = target("10.96.0.10", 80);
    // Until the proxy has synced, the address answers nothing: retry for a while.
    let expect = |wanted: &[&str]| -> Result<()> {
        let wanted: BTreeSet<String> = wanted.iter().map(|name| (*name).to_owned()).collect();
        let mut last = BTreeSet::new();
        for _ in 0..100 {
            last = (0..30).filter_map(|_| fetch(&node.host, target).ok()?.ok()).collect();
            if last == wanted {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("the Service reached {last:?}, expected {wanted:?}")
    };
    expect(&["pod2", "pod3"])?;
    let get_at = |address: Ipv4Addr, port: u16, path: &str| -> Result<String> {
        let request = format!("GET {path} HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n");
        Ok(node.host.run(move || -> std::io::Result<String> {
            let mut stream = TcpStream::connect((address, port))?;
            stream.write_all(request.as_bytes())?;
            let mut response = String::new();
            stream.read_to_string(&mut response)?;
            Ok(response)
        })??)
    };
    let get = |port: u16, path: &str| get_at(Ipv4Addr::LOCALHOST, port, path);
    assert!(get(10256, "/healthz")?.starts_with("HTTP/1.1 200"));
    let metrics = get(10249, "/metrics")?;
    assert!(metrics.contains("kubeproxy_sync_proxy_rules_last_timestamp_seconds "), "{metrics}");
    assert!(!metrics.contains("kubeproxy_sync_proxy_rules_duration_seconds_count 0\n"), "{metrics}");
    // The slice loses pod3 (kubectl apply): the proxy's next sync stops sending it traffic.
    create(web_slice(&pods[..1]))?;
    expect(&["pod2"])?;

    // A LoadBalancer Service with externalTrafficPolicy Local: the API server allocates its
    // health-check node port, and keel-proxy answers there with the count of pod2 (on this node).
    let lb = fixtures::local_load_balancer(
        fixtures::service("lb", "10.96.0.40", &[("", "TCP", 443, None)]),
        "192.0.2.40",
        "192.0.2.41",
    );
    let lb_slice = slice("lb-1", "lb", &[("", "TCP", 8080)], vec![ready(&pods[0].to_string(), NODE)]);
    let mut lb = lb;
    lb.spec.as_mut().context("spec")?.health_check_node_port = None;
    apply(typed("Service", "v1", serde_json::to_value(lb)?))?;
    apply(typed("EndpointSlice", "discovery.k8s.io/v1", serde_json::to_value(lb_slice)?))?;
    let port = kubectl(&["get", "service", "lb", "-o", "jsonpath={.spec.healthCheckNodePort}"], None)?;
    let port: u16 = port.trim().parse().with_context(|| format!("healthCheckNodePort {port:?}"))?;
    // Deleted through kubectl: once the proxy has synced, nothing answers at its address.
    kubectl(&["delete", "service", "web"], None)?;
    let mut gone = false;
    for _ in 0..100 {
        let outcome =
            node.host.run(move || TcpStream::connect_timeout(&target, Duration::from_millis(300)))?;
        if outcome.is_err() {
            gone = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(gone, "the deleted Service's address still answered");
    // Asked at the node's address, where a load balancer's health checker reaches it.
    let mut answer = String::new();
    for _ in 0..100 {
        answer = get_at(GATEWAY, port, "/").unwrap_or_default();
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(answer.starts_with("HTTP/1.1 200") && answer.contains("\"localEndpoints\": 1"), "{answer}");
    // Both default --nodeport-addresses to `primary` (the Node's InternalIP; kube-proxy's nftables
    // mode, cmd/kube-proxy/app/server_linux.go): the health-check server listens there only.
    assert!(get(port, "/").is_err(), "{name}'s health check answered on 127.0.0.1");
    Ok(())
}
