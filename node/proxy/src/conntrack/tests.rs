use std::collections::BTreeSet;

use super::*;
use crate::fixtures::{endpoint, local_load_balancer, node_port, ready, service, slice};
use crate::tracker::{ChangeTracker, TrackerConfig};

const UDP: u8 = 17;
const TCP: u8 = 6;

fn address(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

/// A flow from `client` to `frontend`, DNATed to `endpoint` (no DNAT: `endpoint` == `frontend`).
fn flow(protocol: u8, client: &str, frontend: &str, endpoint: &str) -> Flow {
    let (client, frontend, endpoint) = (address(client), address(frontend), address(endpoint));
    Flow {
        protocol,
        original: FlowTuple { source: client, destination: frontend },
        reply: FlowTuple { source: endpoint, destination: client },
        zone: 0,
    }
}

/// dns (UDP 53 → 5353, endpoint 10.244.1.7 ready, .8 terminating but serving, .9 not serving),
/// web (TCP 80, endpoint 10.244.1.5), empty (UDP, no endpoints), np (UDP node port 30053),
/// lb (UDP LoadBalancer 192.0.2.40 with external IP 192.0.2.41), dns6 (UDP over IPv6).
fn state() -> ProxyState {
    let mut tracker = ChangeTracker::new(TrackerConfig { node_name: "node-a".into(), proxy_name: None });
    tracker.update_service(&service("dns", "10.96.0.53", &[("dns", "UDP", 53, None)]));
    tracker.update_slice(&slice(
        "dns-1",
        "dns",
        &[("dns", "UDP", 5353)],
        vec![
            ready("10.244.1.7", "node-a"),
            endpoint("10.244.1.8", "node-b", (false, true, true)),
            endpoint("10.244.1.9", "node-b", (false, false, true)),
        ],
    ));
    tracker.update_service(&service("web", "10.96.0.10", &[("", "TCP", 80, None)]));
    tracker.update_slice(&slice("web-1", "web", &[("", "TCP", 8080)], vec![ready("10.244.1.5", "node-a")]));
    tracker.update_service(&service("empty", "10.96.0.20", &[("", "UDP", 53, None)]));
    tracker.update_service(&node_port(service("np", "10.96.0.30", &[("", "UDP", 53, Some(30053))])));
    tracker.update_slice(&slice("np-1", "np", &[("", "UDP", 5353)], vec![ready("10.244.1.30", "node-a")]));
    tracker.update_service(&local_load_balancer(
        service("lb", "10.96.0.40", &[("", "UDP", 53, Some(30054))]),
        "192.0.2.40",
        "192.0.2.41",
    ));
    tracker.update_slice(&slice("lb-1", "lb", &[("", "UDP", 5353)], vec![ready("10.244.1.40", "node-b")]));
    tracker.update_service(&service("dns6", "fd00:96::53", &[("", "UDP", 53, None)]));
    let mut dns6 = slice("dns6-1", "dns6", &[("", "UDP", 5353)], vec![ready("fd00:10:244::7", "node-a")]);
    dns6.address_type = "IPv6".into();
    tracker.update_slice(&dns6);
    tracker.checkout();
    tracker.state().clone()
}

fn stale(flows: &[Flow]) -> BTreeSet<Flow> {
    stale_flows(&state(), flows).into_iter().copied().collect()
}

#[test]
fn a_cluster_ip_flow_to_a_gone_endpoint_is_stale_and_one_to_a_serving_endpoint_is_not() {
    let gone = flow(UDP, "10.0.0.1:40000", "10.96.0.53:53", "10.244.1.2:5353");
    let live = flow(UDP, "10.0.0.1:40001", "10.96.0.53:53", "10.244.1.7:5353");
    let terminating = flow(UDP, "10.0.0.1:40002", "10.96.0.53:53", "10.244.1.8:5353");
    let not_serving = flow(UDP, "10.0.0.1:40003", "10.96.0.53:53", "10.244.1.9:5353");
    assert_eq!(stale(&[gone, live, terminating, not_serving]), [gone, not_serving].into());
}

#[test]
fn flows_of_a_port_that_had_no_endpoints_are_stale() {
    // Rejected while the port had no endpoints: no DNAT, the reply comes from the frontend itself.
    let rejected = flow(UDP, "10.0.0.1:40000", "10.96.0.20:53", "10.96.0.20:53");
    assert_eq!(stale(&[rejected]), [rejected].into());
}

#[test]
fn tcp_flows_and_flows_to_other_destinations_are_left_alone() {
    let tcp = flow(TCP, "10.0.0.1:40000", "10.96.0.10:80", "10.244.1.2:8080");
    let other_port = flow(UDP, "10.0.0.1:40000", "10.96.0.53:54", "10.244.1.2:54");
    let elsewhere = flow(UDP, "10.0.0.1:40000", "192.0.2.99:53", "192.0.2.99:53");
    // A TCP port of the same number as a UDP node port is not that node port.
    let tcp_node_port = flow(TCP, "10.0.0.1:40000", "172.18.0.2:30053", "10.244.1.2:5353");
    assert!(stale(&[tcp, other_port, elsewhere, tcp_node_port]).is_empty());
}

#[test]
fn node_port_flows_are_matched_on_any_address() {
    let gone = flow(UDP, "172.18.0.9:40000", "172.18.0.2:30053", "10.244.1.2:5353");
    let gone_other_address = flow(UDP, "172.18.0.9:40001", "127.0.0.1:30053", "10.244.1.3:5353");
    let live = flow(UDP, "172.18.0.9:40002", "172.18.0.2:30053", "10.244.1.30:5353");
    assert_eq!(stale(&[gone, gone_other_address, live]), [gone, gone_other_address].into());
}

#[test]
fn load_balancer_and_external_ips_are_frontends_whatever_the_traffic_policy() {
    // externalTrafficPolicy Local with the only endpoint elsewhere: the flow still stands, as upstream.
    let live = flow(UDP, "198.51.100.1:40000", "192.0.2.40:53", "10.244.1.40:5353");
    let gone_lb = flow(UDP, "198.51.100.1:40001", "192.0.2.40:53", "10.244.1.2:5353");
    let gone_external = flow(UDP, "198.51.100.1:40002", "192.0.2.41:53", "10.244.1.2:5353");
    let gone_node_port = flow(UDP, "198.51.100.1:40003", "172.18.0.2:30054", "10.244.1.2:5353");
    assert_eq!(
        stale(&[live, gone_lb, gone_external, gone_node_port]),
        [gone_lb, gone_external, gone_node_port].into()
    );
}

#[test]
fn ipv6_flows_are_matched_too() {
    let gone = flow(UDP, "[fd00::1]:40000", "[fd00:96::53]:53", "[fd00:10:244::2]:5353");
    let live = flow(UDP, "[fd00::1]:40001", "[fd00:96::53]:53", "[fd00:10:244::7]:5353");
    assert_eq!(stale(&[gone, live]), [gone].into());
}

/// A table in memory: deletes what it holds, refuses what it is told to.
#[derive(Debug, Default)]
struct FakeTable {
    flows: Vec<Flow>,
    refuse: Vec<Flow>,
    deleted: Vec<Flow>,
}

#[derive(Debug, thiserror::Error)]
#[error("refused")]
struct Refused;

impl ConntrackTable for FakeTable {
    type Error = Refused;
    fn udp_flows(&mut self) -> Result<Vec<Flow>, Refused> {
        Ok(self.flows.clone())
    }
    fn delete(&mut self, flow: &Flow) -> Result<bool, Refused> {
        if self.refuse.contains(flow) {
            return Err(Refused);
        }
        self.deleted.push(*flow);
        let before = self.flows.len();
        self.flows.retain(|held| held.original != flow.original);
        Ok(self.flows.len() < before)
    }
}

#[test]
fn the_cleanup_deletes_only_stale_flows_and_tries_all_of_them() {
    let gone = flow(UDP, "10.0.0.1:40000", "10.96.0.53:53", "10.244.1.2:5353");
    let also_gone = flow(UDP, "10.0.0.1:40001", "10.96.0.53:53", "10.244.1.3:5353");
    let live = flow(UDP, "10.0.0.1:40002", "10.96.0.53:53", "10.244.1.7:5353");
    let tcp = flow(TCP, "10.0.0.1:40003", "10.96.0.10:80", "10.244.1.2:8080");
    let mut table = FakeTable { flows: vec![gone, also_gone, live, tcp], ..FakeTable::default() };
    let stats = clean_stale_flows(&mut table, &state()).unwrap();
    assert_eq!(stats, CleanupStats { listed: 3, stale: 2, deleted: 2 });
    assert_eq!(table.flows, vec![live, tcp]);

    // A refusal does not stop the others; it is reported.
    let mut table =
        FakeTable { flows: vec![gone, also_gone, live], refuse: vec![gone], ..FakeTable::default() };
    assert!(clean_stale_flows(&mut table, &state()).is_err());
    assert_eq!(table.deleted, vec![also_gone]);
}
