//! The data-path half of `cargo xtask bench proxy` (benches/proxy/datapath.rs, a module of benches/proxy.rs): what
//! keel-proxy's ruleset costs the traffic it steers, in testbed namespaces (as root). Each node is a
//! namespace of its own (its own fabric) with bridge cni0 (10.244.1.1/24) and four pods on it: the
//! client (.2), the two endpoints of the Service under test (.3, .4) and a pod reached directly (.5),
//! each server answering every connection with a few bytes. keel-proxy's rules are programmed through
//! the library (a `Proxier` over `NftBackend<NftNetlink>`, one full sync from inside the node) with
//! the cluster CIDR 10.244.0.0/16 covering the pods; each table holds N Services × 2 endpoints, the
//! one under test among them (the others' endpoints do not exist: no traffic goes to them).
//!
//! - connection rate, at N Services: K connect + request + response + close in a loop from the client
//!   to the ClusterIP vs directly to the pod IP, interleaved rounds; connections/s of the median round,
//!   their ratio (ClusterIP/pod IP: issue 8 asks ≥ 0.95) and CPU time per connection (this process's:
//!   client, servers, and the kernel's work done in their system calls, netfilter included).
//! - first-connection latency: `connect()` of a new socket to the ClusterIP until it returns
//!   (established: the SYN crossed the NAT rules and the SYN-ACK came back), at 10 Services and at N,
//!   each in its own node, interleaved rounds; median and p90 of every connection, and their ratio
//!   (N/10: issue 8 asks ≤ 1.1). The request, response and close follow outside the timed region.
//!
//! Ports and conntrack: the client closes first with SO_LINGER 0, so the connection ends in a RST —
//! no TIME_WAIT socket on either side, and the client's port is free at once; the server reads until
//! that reset. Conntrack keeps each ended connection (state CLOSE) for 10 s in the node's own table;
//! a port the kernel hands out again meanwhile reopens that entry (both paths alike). The directly
//! reached pod is not an endpoint of the Service, so the two paths never share a conntrack tuple.
//!
//! [`measure`] takes N, the rounds and the connections per round and path for the rate (a quarter
//! of that per round and node for the latency); benches/proxy.rs passes them (10000 Services, 20
//! rounds, 2000 connections by default).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use keel_proxy::backend::Proxier;
use keel_proxy::fixtures::{ready, service, slice};
use keel_proxy::nft::netlink::NftNetlink;
use keel_proxy::nft::{NftBackend, RenderConfig};
use keel_proxy::tracker::{ChangeTracker, TrackerConfig};
use keel_testbed::bench::{self, Report, Samples};
use keel_testbed::{Fabric, Host, NetNs};
use socket2::{Domain, Protocol, Socket, Type};

const BRIDGE: &str = "cni0";
const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 244, 1, 1);
const NODE_NAME: &str = "node-a";
const CLIENT: u8 = 2;
const ENDPOINTS: [u8; 2] = [3, 4];
const DIRECT: u8 = 5;
const SERVICE_PORT: u16 = 80;
const TARGET_PORT: u16 = 8080;
const REQUEST: &[u8] = b"ping\n";
const RESPONSE: &[u8] = b"pong\n";

/// Measures the data path with `services` Services in the large table and adds the figures to
/// `report`.
pub fn measure(services: usize, rounds: usize, connections: usize, report: &mut Report) {
    let (services, rounds, connections) = (services.max(1), rounds.max(1), connections.max(10));
    let small = Node::new(10);
    let large = Node::new(services);
    for node in [&large, &small] {
        node.warm_up();
    }

    // First-connection latency: 10 Services vs N, interleaved. First, while both nodes' conntrack
    // tables are alike: the rate's connections leave the large node's full of ended entries that its
    // client's ports come back to (a reopened entry costs more than a new one).
    let per_round = (connections / 4).max(1);
    let (mut at_large, mut at_small) = (Samples::default(), Samples::default());
    bench::interleaved(
        rounds,
        |_| at_large.extend(&large.first_connections(per_round)),
        |_| at_small.extend(&small.first_connections(per_round)),
    );
    report.figure("first_connect_us", "connect() to the ClusterIP, N Services (us)", &us(at_large.median()));
    report.figure("first_connect_p90_us", "  p90", &us(at_large.percentile(90.0)));
    report.figure(
        "first_connect_10_us",
        "connect() to the ClusterIP, 10 Services (us)",
        &us(at_small.median()),
    );
    report.figure("first_connect_10_p90_us", "  p90", &us(at_small.percentile(90.0)));
    report.figure(
        "first_connect_ratio",
        "  ratio N/10 Services (target <= 1.1)",
        &format!("{:.3}", at_large.median().as_secs_f64() / at_small.median().as_secs_f64()),
    );

    // Connection rate at N Services: ClusterIP vs the pod IP, interleaved.
    let (mut cluster, mut direct) = (Samples::default(), Samples::default());
    let (mut cluster_cpu, mut direct_cpu) = (Samples::default(), Samples::default());
    bench::interleaved(
        rounds,
        |_| {
            let (wall, cpu) = large.connections(large.service, connections);
            cluster.push(wall / count(connections));
            cluster_cpu.push(cpu / count(connections));
        },
        |_| {
            let (wall, cpu) = large.connections(large.direct, connections);
            direct.push(wall / count(connections));
            direct_cpu.push(cpu / count(connections));
        },
    );
    let per_s = |samples: &Samples| format!("{:.0}", 1.0 / samples.median().as_secs_f64());
    report.figure("cluster_ip_per_s", "connections/s to the ClusterIP", &per_s(&cluster));
    report.figure("pod_ip_per_s", "connections/s to the pod IP", &per_s(&direct));
    report.figure(
        "rate_ratio",
        "  ratio ClusterIP/pod IP (target >= 0.95)",
        &format!("{:.3}", direct.median().as_secs_f64() / cluster.median().as_secs_f64()),
    );
    report.figure("cluster_ip_cpu_us", "  cpu per connection, ClusterIP (us)", &us(cluster_cpu.median()));
    report.figure("pod_ip_cpu_us", "  cpu per connection, pod IP (us)", &us(direct_cpu.median()));
    report.figure(
        "conntrack_entries",
        "conntrack entries in the large node after",
        &large.conntrack_entries(),
    );
    report.figure("datapath_rounds", "data-path rounds", &rounds.to_string());
    report.figure("connections", "connections per round and path (rate)", &connections.to_string());
}

/// A node namespace with its bridge, pods with servers, and keel-proxy's table of `services`.
struct Node {
    client: NetNs,
    /// The Service under test's ClusterIP:port.
    service: SocketAddr,
    /// The directly reached pod's IP:port.
    direct: SocketAddr,
    _servers: Vec<NetNs>,
    host: Host,
    _fabric: Fabric,
}

impl Node {
    fn new(services: usize) -> Node {
        let fabric = Fabric::new().expect("fabric");
        let host = keel_testbed::bridge::node(&fabric, BRIDGE, GATEWAY, 24).expect("node");
        let pod = |n: u8| {
            let address = pod_address(n);
            let (ns, _) =
                keel_testbed::bridge::pod(&fabric, &host, BRIDGE, GATEWAY, address, 24, n).expect("pod");
            (ns, address)
        };
        let (client, _) = pod(CLIENT);
        let mut servers = Vec::new();
        for n in ENDPOINTS.into_iter().chain([DIRECT]) {
            let (ns, _) = pod(n);
            let listener = ns
                .run(|| TcpListener::bind((Ipv4Addr::UNSPECIFIED, TARGET_PORT)))
                .expect("enter the pod")
                .expect("listen in the pod");
            std::thread::spawn(move || serve(&listener));
            servers.push(ns);
        }

        let config = RenderConfig {
            cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap()],
            nodeport_addresses: vec![],
        };
        let tracker = ChangeTracker::new(TrackerConfig { node_name: NODE_NAME.into(), proxy_name: None });
        let mut proxier = Proxier::new(tracker, NftBackend::new(&config, NftNetlink::new()));
        let under_test = services / 2;
        for index in 0..services {
            let name = format!("svc{index}");
            proxier.tracker.update_service(&service(
                &name,
                &cluster_ip(index).to_string(),
                &[("http", "TCP", i32::from(SERVICE_PORT), None)],
            ));
            let endpoints: Vec<Ipv4Addr> = if index == under_test {
                ENDPOINTS.map(pod_address).to_vec()
            } else {
                vec![elsewhere(index * 2), elsewhere(index * 2 + 1)]
            };
            proxier.tracker.update_slice(&slice(
                &format!("{name}-1"),
                &name,
                &[("http", "TCP", i32::from(TARGET_PORT))],
                endpoints.iter().map(|a| ready(&a.to_string(), NODE_NAME)).collect(),
            ));
        }
        host.run(|| proxier.sync()).expect("enter the node").expect("sync the node's table");
        Node {
            client,
            service: SocketAddr::V4(SocketAddrV4::new(cluster_ip(under_test), SERVICE_PORT)),
            direct: SocketAddr::V4(SocketAddrV4::new(pod_address(DIRECT), TARGET_PORT)),
            _servers: servers,
            host,
            _fabric: fabric,
        }
    }

    /// A few connections on each path first: neighbour entries, caches, the servers' threads.
    fn warm_up(&self) {
        self.connections(self.service, 50);
        self.connections(self.direct, 50);
    }

    /// How many connections the node's conntrack table holds (most of them ended, in CLOSE).
    fn conntrack_entries(&self) -> String {
        self.host
            .run(|| std::fs::read_to_string("/proc/sys/net/netfilter/nf_conntrack_count"))
            .expect("enter the node")
            .map_or_else(|_| "unknown".to_owned(), |count| count.trim().to_owned())
    }

    /// `count` connections to `target` one after the other from the client pod: the wall time and
    /// this process's CPU time of them all, measured inside the client's thread.
    fn connections(&self, target: SocketAddr, count: usize) -> (Duration, Duration) {
        self.client
            .run(|| {
                let cpu = bench::cpu_time();
                let start = Instant::now();
                for _ in 0..count {
                    exchange(target).unwrap_or_else(|err| panic!("a connection to {target}: {err}"));
                }
                (start.elapsed(), bench::cpu_time() - cpu)
            })
            .expect("enter the client pod")
    }

    /// `count` new connections to the Service: how long each `connect()` took.
    fn first_connections(&self, count: usize) -> Samples {
        self.client
            .run(|| {
                let mut samples = Samples::default();
                for _ in 0..count {
                    let connect = exchange(self.service)
                        .unwrap_or_else(|err| panic!("a connection to the Service: {err}"));
                    samples.push(connect);
                }
                samples
            })
            .expect("enter the client pod")
    }
}

/// One connection: connect, send the request, read the response, close with a reset (SO_LINGER 0:
/// no TIME_WAIT, the port is free at once). Returns how long `connect()` took.
fn exchange(target: SocketAddr) -> std::io::Result<Duration> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_linger(Some(Duration::ZERO))?;
    let start = Instant::now();
    socket.connect(&target.into())?;
    let connect = start.elapsed();
    let mut stream = TcpStream::from(socket);
    stream.write_all(REQUEST)?;
    let mut response = [0u8; RESPONSE.len()];
    stream.read_exact(&mut response)?;
    if response != RESPONSE {
        return Err(std::io::Error::other(format!("unexpected answer {response:?}")));
    }
    Ok(connect)
}

/// Answers each connection's request, then waits for the client to close (its reset) so that the
/// server never holds a TIME_WAIT socket. Connections are served one at a time, as they come.
fn serve(listener: &TcpListener) {
    for stream in listener.incoming() {
        let Ok(mut stream) = stream else { continue };
        let mut buffer = [0u8; 64];
        if matches!(stream.read(&mut buffer), Ok(n) if n > 0) && stream.write_all(RESPONSE).is_ok() {
            // Until the client's reset (an error) or FIN (0).
            let _ = stream.read(&mut buffer);
        }
    }
}

fn pod_address(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, 1, n)
}

/// 10.96.0.0/16 onward: one ClusterIP per Service.
fn cluster_ip(index: usize) -> Ipv4Addr {
    let octet = |v: usize| u8::try_from(v % 256).expect("below 256");
    Ipv4Addr::new(10, octet(96 + index / 65536), octet(index / 256), octet(index))
}

/// Endpoints of the other Services: pods of 10.244.16.0/20 onward, which exist nowhere.
fn elsewhere(n: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 244, 16, 0)) + u32::try_from(n % 0xF0000).expect("fits"))
}

fn count(n: usize) -> u32 {
    u32::try_from(n).expect("connections fit in u32")
}

/// Microseconds with one decimal.
fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}
