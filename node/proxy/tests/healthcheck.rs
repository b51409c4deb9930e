//! The health-check node ports against real sockets (root): a node namespace on a testbed fabric,
//! where the proxier syncs a LoadBalancer Service with externalTrafficPolicy Local over netlink and
//! the health-check server runs on the node's every address (its default); another host of the
//! fabric asks the node's address, as a cloud load balancer would.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use keel_proxy::backend::Proxier;
use keel_proxy::fixtures::{self, ready, slice};
use keel_proxy::healthcheck::{self, HealthChecks, ServiceHealthServer};
use keel_proxy::nft::netlink::NftNetlink;
use keel_proxy::nft::{NftBackend, RenderConfig};
use keel_proxy::tracker::{ChangeTracker, TrackerConfig};
use keel_testbed::{Fabric, Host};

const NODE: &str = "node-a";
const HEALTH_CHECK_PORT: u16 = 30999; // fixtures::local_load_balancer's.

/// An HTTP answer: status, headers (lower-cased names), body.
type Answer = fixtures::HttpAnswer;

/// GET / from inside `client` to `target`: the answer, or the connect/read error.
fn get(client: &Host, target: SocketAddr) -> Result<std::io::Result<Answer>> {
    client.run(move || -> std::io::Result<Answer> {
        let mut stream = TcpStream::connect_timeout(&target, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        Ok(fixtures::http_answer(&response))
    })
}

/// Asks until the answer satisfies `wanted` (the server applies a new value when its task next
/// runs); fails with the last answer after 100 tries.
fn until(
    client: &Host,
    target: SocketAddr,
    wanted: impl Fn(&std::io::Result<Answer>) -> bool,
) -> Result<std::io::Result<Answer>> {
    let mut last = None;
    for _ in 0..100 {
        let answer = get(client, target)?;
        if wanted(&answer) {
            return Ok(answer);
        }
        last = Some(answer);
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("{target} kept answering {last:?}")
}

fn lb_slice(endpoints: &[(&str, &str)]) -> EndpointSlice {
    let endpoints = endpoints.iter().map(|(ip, node)| ready(ip, node)).collect();
    slice("lb-1", "lb", &[("", "TCP", 8443)], endpoints)
}

#[test]
fn another_host_reads_the_local_endpoint_count_from_the_health_check_node_port() -> Result<()> {
    keel_testbed::require_root()?;
    let fabric = Fabric::new()?;
    let node = keel_testbed::bridge::node(&fabric, "cni0", Ipv4Addr::new(10, 244, 1, 1), 24)?;
    let client = fabric.add_host("client")?;
    let target = SocketAddr::new(IpAddr::V4(node.address()), HEALTH_CHECK_PORT);

    let config =
        RenderConfig { cluster_cidrs: vec!["10.244.0.0/16".parse()?], nodeport_addresses: Vec::new() };
    let tracker = ChangeTracker::new(TrackerConfig { node_name: NODE.into(), proxy_name: None });
    let mut proxier = Proxier::new(tracker, NftBackend::new(&config, NftNetlink::new()));
    let service: Service = fixtures::local_load_balancer(
        fixtures::service("lb", "10.96.0.40", &[("", "TCP", 443, Some(30443))]),
        "192.0.2.40",
        "192.0.2.41",
    );

    // With --nodeport-addresses, the node's own addresses inside them (here the bridge's).
    let cidrs = ["10.244.0.0/16".parse()?];
    let addresses = node.run(|| healthcheck::bind_addresses(&cidrs))?;
    assert_eq!(addresses, [IpAddr::V4(Ipv4Addr::new(10, 244, 1, 1))]);

    std::thread::scope(|scope| -> Result<()> {
        // Dropped on every way out of this closure: the server then closes its ports and ends.
        let (desired, receiver) = tokio::sync::watch::channel(HealthChecks::default());
        let server = scope.spawn(|| {
            // Every socket the server opens belongs to the node's namespace.
            let addresses = healthcheck::bind_addresses(&[]);
            node.block_on(|| {
                healthcheck::run(ServiceHealthServer::new(addresses), receiver, Duration::from_secs(1))
            })
        });
        // One sync in the node, then the health checks from its state, as keel-proxy's loop does.
        let mut sync = |change: &dyn Fn(&mut ChangeTracker)| -> Result<()> {
            change(&mut proxier.tracker);
            node.run(|| proxier.sync())?.context("sync")?;
            desired.send_replace(healthcheck::health_checks(proxier.tracker.state(), true));
            Ok(())
        };

        // Two endpoints here, one elsewhere.
        sync(&|tracker| {
            tracker.update_service(&service);
            tracker.update_slice(&lb_slice(&[
                ("10.244.1.2", NODE),
                ("10.244.1.3", NODE),
                ("10.244.2.2", "node-b"),
            ]));
        })?;
        let (status, headers, body) = until(&client, target, Result::is_ok)??;
        assert_eq!(status, 200, "{body}");
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(headers["x-load-balancing-endpoint-weight"], "2");
        let json: serde_json::Value = serde_json::from_str(&body)?;
        assert_eq!(
            json,
            serde_json::json!({
                "service": {"namespace": "default", "name": "lb"},
                "localEndpoints": 2,
                "serviceProxyHealthy": true
            })
        );

        // The local endpoints leave this node: the load balancer is told to stop sending here.
        sync(&|tracker| tracker.update_slice(&lb_slice(&[("10.244.2.2", "node-b")])))?;
        let (_, headers, body) = until(&client, target, |answer| matches!(answer, Ok((503, ..))))??;
        assert_eq!(headers["x-load-balancing-endpoint-weight"], "0");
        assert!(body.contains("\"localEndpoints\": 0"), "{body}");

        // The Service goes: so does its port (a request caught while it closes may be reset).
        sync(&|tracker| tracker.delete_service(&service))?;
        let refused = |answer: &std::io::Result<Answer>| matches!(answer, Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused);
        drop(until(&client, target, refused)?);

        drop(desired);
        match server.join() {
            Ok(result) => result.context("the health-check server's namespace thread"),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}
