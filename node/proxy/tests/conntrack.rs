//! Stale UDP conntrack entries against the kernel (root): a node namespace with bridge cni0 and pods
//! on it, the proxier syncing over netlink inside the node, clients in the node holding their sockets
//! across an endpoint's replacement, and the cleanup listing and deleting through ctnetlink.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use keel_proxy::backend::Proxier;
use keel_proxy::conntrack::netlink::ConntrackNetlink;
use keel_proxy::conntrack::{self, ConntrackTable, Flow};
use keel_proxy::fixtures::{self, ready, slice};
use keel_proxy::nft::netlink::NftNetlink;
use keel_proxy::nft::{NftBackend, RenderConfig};
use keel_proxy::tracker::{ChangeTracker, TrackerConfig};
use keel_testbed::{Fabric, Host, NetNs};

const BRIDGE: &str = "cni0";
const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 244, 1, 1);
const TIMEOUT: Duration = Duration::from_secs(5);
const NODE: &str = "node-a";
const DNS: &str = "10.96.0.53:53";
const ECHO: &str = "10.96.0.54:53";
const WEB: &str = "10.96.0.10:80";

/// A node with bridge cni0 (10.244.1.1/24) and pods on it.
struct Node {
    fabric: Fabric,
    host: Host,
    pods: Vec<(u8, Pod)>,
}

/// A pod's namespace and the servers running in it.
struct Pod {
    /// Held only: the namespace goes when the pod drops.
    _ns: NetNs,
    port: String,
    stop: Arc<AtomicBool>,
    servers: Vec<JoinHandle<()>>,
}

impl Pod {
    /// Stops the servers and waits until their sockets are closed.
    fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for server in self.servers.drain(..) {
            let _ = server.join();
        }
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Node {
    fn new() -> Result<Node> {
        keel_testbed::require_root()?;
        let fabric = Fabric::new()?;
        let host = keel_testbed::bridge::node(&fabric, BRIDGE, GATEWAY, 24)?;
        Ok(Node { fabric, host, pods: Vec::new() })
    }

    /// A pod at 10.244.1.<n> answering each UDP datagram on 5353 with `pod<n>`, and each TCP
    /// connection on 8080 with `pod<n>`, held open until the pod goes.
    fn add_pod(&mut self, n: u8) -> Result<Ipv4Addr> {
        let address = Ipv4Addr::new(10, 244, 1, n);
        let (ns, port) =
            keel_testbed::bridge::pod(&self.fabric, &self.host, BRIDGE, GATEWAY, address, 24, n)?;
        let (tcp, udp) = ns.run(|| -> Result<(TcpListener, UdpSocket)> {
            Ok((TcpListener::bind("0.0.0.0:8080")?, UdpSocket::bind("0.0.0.0:5353")?))
        })??;
        tcp.set_nonblocking(true)?;
        udp.set_read_timeout(Some(Duration::from_millis(50)))?;
        let name = format!("pod{n}");
        let stop = Arc::new(AtomicBool::new(false));
        let (tcp_name, tcp_stop) = (name.clone(), Arc::clone(&stop));
        let tcp_server = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !tcp_stop.load(Ordering::Relaxed) {
                match tcp.accept() {
                    Ok((mut stream, _)) => {
                        let _ = stream.write_all(tcp_name.as_bytes());
                        held.push(stream);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        let udp_stop = Arc::clone(&stop);
        let udp_server = std::thread::spawn(move || {
            let mut buffer = [0u8; 64];
            while !udp_stop.load(Ordering::Relaxed) {
                if let Ok((_, peer)) = udp.recv_from(&mut buffer) {
                    let _ = udp.send_to(name.as_bytes(), peer);
                }
            }
        });
        self.pods.push((n, Pod { _ns: ns, port, stop, servers: vec![tcp_server, udp_server] }));
        Ok(address)
    }

    /// Removes pod `n`: its servers stop, its veth pair and its namespace go.
    fn remove_pod(&mut self, n: u8) -> Result<()> {
        let at = self.pods.iter().position(|(m, _)| *m == n).context("no such pod")?;
        let (_, mut pod) = self.pods.remove(at);
        pod.stop();
        let output = self.host.command("ip").args(["link", "del", &pod.port]).output()?;
        if !output.status.success() {
            bail!("ip link del {}: {}", pod.port, String::from_utf8_lossy(&output.stderr));
        }
        // The namespace goes with the pod.
        drop(pod);
        Ok(())
    }
}

fn proxier() -> Proxier<NftBackend<NftNetlink>> {
    let config =
        RenderConfig { cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap()], nodeport_addresses: vec![] };
    let tracker = ChangeTracker::new(TrackerConfig { node_name: NODE.into(), proxy_name: None });
    Proxier::new(tracker, NftBackend::new(&config, NftNetlink::new()))
}

fn sync(node: &Node, proxier: &mut Proxier<NftBackend<NftNetlink>>) -> Result<()> {
    node.host.run(|| proxier.sync())?.context("sync")?;
    Ok(())
}

/// A slice of Service `service` with one endpoint on UDP 5353 (and TCP 8080 for `web`).
fn udp_slice(service: &str, endpoint: Ipv4Addr) -> EndpointSlice {
    slice(&format!("{service}-1"), service, &[("", "UDP", 5353)], vec![ready(&endpoint.to_string(), NODE)])
}

/// A UDP socket of the node connected to `target` (its source port stays for its lifetime).
fn udp_client(node: &Node, target: &str) -> Result<UdpSocket> {
    let target: SocketAddr = target.parse()?;
    Ok(node.host.run(move || -> std::io::Result<UdpSocket> {
        let socket = UdpSocket::bind("0.0.0.0:0")?;
        socket.connect(target)?;
        Ok(socket)
    })??)
}

/// Sends a datagram and reads the answer within `timeout`.
fn ask(socket: &UdpSocket, timeout: Duration) -> std::io::Result<String> {
    socket.set_read_timeout(Some(timeout))?;
    socket.send(b"who")?;
    let mut buffer = [0u8; 64];
    let len = socket.recv(&mut buffer)?;
    Ok(String::from_utf8_lossy(&buffer[..len]).into_owned())
}

/// Asks a few times: an ICMP error about an earlier datagram may still be pending on the socket.
fn ask_until_answered(socket: &UdpSocket) -> Result<String> {
    let mut last = None;
    for _ in 0..3 {
        match ask(socket, TIMEOUT) {
            Ok(answer) => return Ok(answer),
            Err(err) => last = Some(err),
        }
    }
    bail!("no answer from {:?}: {last:?}", socket.peer_addr())
}

/// Every conntrack entry of the node (both families, every protocol).
fn entries(node: &Node) -> Result<Vec<Flow>> {
    Ok(node.host.run(|| ConntrackNetlink::new().all_flows())??)
}

/// The entries of flows from `client` to `frontend`.
fn of(flows: &[Flow], client: SocketAddr, frontend: &str) -> Vec<Flow> {
    let frontend: SocketAddr = frontend.parse().unwrap();
    flows
        .iter()
        .filter(|flow| flow.original.source == client && flow.original.destination == frontend)
        .copied()
        .collect()
}

#[test]
fn a_udp_service_keeps_working_when_its_endpoint_pod_is_replaced() -> Result<()> {
    let mut node = Node::new()?;
    let old = node.add_pod(2)?;
    let other = node.add_pod(4)?;
    let mut proxier = proxier();
    proxier.tracker.update_service(&fixtures::service("dns", "10.96.0.53", &[("", "UDP", 53, None)]));
    proxier.tracker.update_slice(&udp_slice("dns", old));
    proxier.tracker.update_service(&fixtures::service("echo", "10.96.0.54", &[("", "UDP", 53, None)]));
    proxier.tracker.update_slice(&udp_slice("echo", other));
    proxier.tracker.update_service(&fixtures::service("web", "10.96.0.10", &[("", "TCP", 80, None)]));
    let web = slice("web-1", "web", &[("", "TCP", 8080)], vec![ready(&other.to_string(), NODE)]);
    proxier.tracker.update_slice(&web);
    sync(&node, &mut proxier)?;

    let client = udp_client(&node, DNS)?;
    let echo = udp_client(&node, ECHO)?;
    assert_eq!(ask(&client, TIMEOUT)?, "pod2");
    assert_eq!(ask(&echo, TIMEOUT)?, "pod4");
    // A TCP connection through a Service, held open across the cleanup.
    let web_target: SocketAddr = WEB.parse()?;
    let mut stream = node.host.run(move || TcpStream::connect_timeout(&web_target, TIMEOUT))??;
    stream.set_read_timeout(Some(TIMEOUT))?;
    let mut greeting = [0u8; 4];
    stream.read_exact(&mut greeting)?;
    assert_eq!(&greeting, b"pod4");
    let (client_address, echo_address, web_address) =
        (client.local_addr()?, echo.local_addr()?, stream.local_addr()?);

    // The endpoint pod is replaced: the old one goes, the slice names the new one, the proxy syncs.
    let new = node.add_pod(3)?;
    node.remove_pod(2)?;
    proxier.tracker.update_slice(&udp_slice("dns", new));
    sync(&node, &mut proxier)?;

    // Without the cleanup the client's flow still goes to the old pod, and nothing answers.
    let before = entries(&node)?;
    let stale = of(&before, client_address, DNS);
    assert_eq!(stale.len(), 1, "{before:?}");
    assert_eq!(stale[0].reply.source.ip(), old);
    let unanswered = ask(&client, Duration::from_secs(1));
    assert!(unanswered.is_err(), "answered before the cleanup: {unanswered:?}");
    assert_eq!(
        conntrack::stale_flows(proxier.tracker.state(), &before).into_iter().copied().collect::<Vec<_>>(),
        stale,
        "only the flow to the old pod is stale"
    );

    // The kernel lists only UDP entries to the cleanup (CTA_FILTER), the TCP one among them not.
    let listed = node.host.run(|| ConntrackNetlink::new().udp_flows())??;
    assert!(listed.iter().all(|flow| flow.protocol == 17), "{listed:?}");
    assert!(before.iter().any(|flow| flow.protocol == 6 && flow.original.source == web_address));

    let stats = node
        .host
        .run(|| conntrack::clean_stale_flows(&mut ConntrackNetlink::new(), proxier.tracker.state()))??;
    assert_eq!((stats.stale, stats.deleted), (1, 1), "{stats:?}");

    let after = entries(&node)?;
    assert!(of(&after, client_address, DNS).is_empty(), "{after:?}");
    assert_eq!(of(&after, echo_address, ECHO).len(), 1, "a flow to a serving endpoint stays: {after:?}");
    let web_flows = of(&after, web_address, WEB);
    assert_eq!(web_flows.len(), 1, "a TCP flow stays: {after:?}");
    assert_eq!(web_flows[0].protocol, 6);

    // The same socket (same source port) now reaches the new pod; the others still work.
    assert_eq!(ask_until_answered(&client)?, "pod3");
    assert_eq!(ask(&echo, TIMEOUT)?, "pod4");
    stream.write_all(b"still here")?;
    Ok(())
}

/// A Service port without endpoints rejects its UDP datagrams: rejected in the filter hook, they
/// leave no confirmed entry, so once the port has an endpoint the same socket is answered.
#[test]
fn a_udp_flow_to_a_service_without_endpoints_is_answered_once_it_has_one() -> Result<()> {
    let mut node = Node::new()?;
    let mut proxier = proxier();
    proxier.tracker.update_service(&fixtures::service("dns", "10.96.0.53", &[("", "UDP", 53, None)]));
    sync(&node, &mut proxier)?;
    let client = udp_client(&node, DNS)?;
    let refused = ask(&client, TIMEOUT);
    assert!(refused.is_err(), "a Service without endpoints answered: {refused:?}");
    let pod = node.add_pod(2)?;
    proxier.tracker.update_slice(&udp_slice("dns", pod));
    sync(&node, &mut proxier)?;
    let client_address = client.local_addr()?;
    let flows = entries(&node)?;
    assert!(of(&flows, client_address, DNS).is_empty(), "a rejected datagram left an entry: {flows:?}");
    let stats = node
        .host
        .run(|| conntrack::clean_stale_flows(&mut ConntrackNetlink::new(), proxier.tracker.state()))??;
    assert_eq!(stats.stale, 0, "{stats:?}");
    assert_eq!(ask_until_answered(&client)?, "pod2");
    Ok(())
}
