//! Synthetic API objects and the golden transactions' cluster, for the unit tests, the root tests
//! (which load the golden transactions through netlink and `nft -f`) and the benchmarks.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ClientIPConfig, LoadBalancerIngress, LoadBalancerStatus, Service, ServicePort, ServiceSpec,
    ServiceStatus, SessionAffinityConfig,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::model::SERVICE_NAME_LABEL;
use crate::nft::{Family, RenderConfig, Renderer, Transaction};
use crate::tracker::{ChangeTracker, Changes, TrackerConfig};

fn meta(namespace: &str, name: &str, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        labels: (!labels.is_empty()).then(|| {
            labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect::<BTreeMap<_, _>>()
        }),
        ..ObjectMeta::default()
    }
}

/// A ClusterIP Service `default/<name>` with `ports` as (name, protocol, port, nodePort).
pub fn service(name: &str, cluster_ip: &str, ports: &[(&str, &str, i32, Option<i32>)]) -> Service {
    Service {
        metadata: meta("default", name, &[]),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some(cluster_ip.into()),
            cluster_ips: Some(vec![cluster_ip.into()]),
            ports: Some(
                ports
                    .iter()
                    .map(|(name, protocol, port, node_port)| ServicePort {
                        name: (!name.is_empty()).then(|| (*name).to_owned()),
                        protocol: Some((*protocol).to_owned()),
                        port: *port,
                        node_port: *node_port,
                        ..ServicePort::default()
                    })
                    .collect(),
            ),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// `service` as a NodePort Service.
pub fn node_port(mut service: Service) -> Service {
    if let Some(spec) = service.spec.as_mut() {
        spec.type_ = Some("NodePort".into());
    }
    service
}

/// `service` with ClientIP affinity of `seconds`.
pub fn affinity(mut service: Service, seconds: i32) -> Service {
    if let Some(spec) = service.spec.as_mut() {
        spec.session_affinity = Some("ClientIP".into());
        spec.session_affinity_config = Some(SessionAffinityConfig {
            client_ip: Some(ClientIPConfig { timeout_seconds: Some(seconds) }),
        });
    }
    service
}

/// `service` as a LoadBalancer with externalTrafficPolicy Local, an ingress IP and an external IP.
pub fn local_load_balancer(mut service: Service, ingress: &str, external: &str) -> Service {
    if let Some(spec) = service.spec.as_mut() {
        spec.type_ = Some("LoadBalancer".into());
        spec.external_traffic_policy = Some("Local".into());
        spec.external_ips = Some(vec![external.into()]);
        spec.health_check_node_port = Some(30999);
    }
    service.status = Some(ServiceStatus {
        load_balancer: Some(LoadBalancerStatus {
            ingress: Some(vec![LoadBalancerIngress { ip: Some(ingress.into()), ..Default::default() }]),
        }),
        ..ServiceStatus::default()
    });
    service
}

/// An endpoint of a slice: address, node, and (ready, serving, terminating).
pub fn endpoint(ip: &str, node: &str, (ready, serving, terminating): (bool, bool, bool)) -> Endpoint {
    Endpoint {
        addresses: vec![ip.into()],
        node_name: Some(node.into()),
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        ..Endpoint::default()
    }
}

/// A ready endpoint on `node`.
pub fn ready(ip: &str, node: &str) -> Endpoint {
    endpoint(ip, node, (true, true, false))
}

/// An IPv4 EndpointSlice `default/<name>` of Service `service` with `ports` as (name, protocol, port).
pub fn slice(
    name: &str,
    service: &str,
    ports: &[(&str, &str, i32)],
    endpoints: Vec<Endpoint>,
) -> EndpointSlice {
    EndpointSlice {
        metadata: meta("default", name, &[(SERVICE_NAME_LABEL, service)]),
        address_type: "IPv4".into(),
        endpoints,
        ports: Some(
            ports
                .iter()
                .map(|(name, protocol, port)| EndpointPort {
                    name: Some((*name).to_owned()),
                    protocol: Some((*protocol).to_owned()),
                    port: Some(*port),
                    ..EndpointPort::default()
                })
                .collect(),
        ),
    }
}

/// The render configuration of the golden transactions.
pub fn golden_config() -> RenderConfig {
    RenderConfig {
        cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap(), "fd00:10:244::/56".parse().unwrap()],
        nodeport_addresses: Vec::new(),
    }
}

/// The golden transactions' cluster: node `node-a` with one Service of each kind, checked out.
pub fn golden_cluster() -> ChangeTracker {
    let mut tracker = ChangeTracker::new(TrackerConfig { node_name: "node-a".into(), proxy_name: None });
    // Two endpoints whose named target port resolves differently (two slices).
    tracker.update_service(&service("web", "10.96.0.10", &[("http", "TCP", 80, None)]));
    tracker.update_slice(&slice(
        "web-1",
        "web",
        &[("http", "TCP", 8080)],
        vec![ready("10.244.0.5", "node-a")],
    ));
    tracker.update_slice(&slice(
        "web-2",
        "web",
        &[("http", "TCP", 9090)],
        vec![ready("10.244.1.5", "node-b")],
    ));
    tracker.update_service(&service("dns", "10.96.0.53", &[("dns", "UDP", 53, None)]));
    tracker.update_slice(&slice(
        "dns-1",
        "dns",
        &[("dns", "UDP", 5353)],
        vec![ready("10.244.1.7", "node-b")],
    ));
    // No endpoints at all.
    tracker.update_service(&node_port(service("empty", "10.96.0.20", &[("", "TCP", 80, Some(30020))])));
    // NodePort with ClientIP affinity.
    tracker.update_service(&affinity(
        node_port(service("sticky", "10.96.0.30", &[("", "TCP", 80, Some(30030))])),
        60,
    ));
    tracker.update_slice(&slice(
        "sticky-1",
        "sticky",
        &[("", "TCP", 80)],
        vec![ready("10.244.0.8", "node-a"), ready("10.244.1.8", "node-b")],
    ));
    // LoadBalancer, externalTrafficPolicy Local, one endpoint here and one elsewhere.
    tracker.update_service(&local_load_balancer(
        service("lb", "10.96.0.40", &[("", "TCP", 443, Some(30443))]),
        "192.0.2.40",
        "192.0.2.41",
    ));
    tracker.update_slice(&slice(
        "lb-1",
        "lb",
        &[("", "TCP", 8443)],
        vec![ready("10.244.0.9", "node-a"), ready("10.244.1.9", "node-b")],
    ));
    // Only terminating endpoints: the serving one is used, the other is not.
    tracker.update_service(&service("draining", "10.96.0.50", &[("", "TCP", 80, None)]));
    tracker.update_slice(&slice(
        "draining-1",
        "draining",
        &[("", "TCP", 80)],
        vec![
            endpoint("10.244.0.10", "node-a", (false, true, true)),
            endpoint("10.244.1.10", "node-b", (false, false, true)),
        ],
    ));
    // SCTP (the kernel here refuses SCTP sockets: checked at the ruleset level only).
    tracker.update_service(&service("sctp", "10.96.0.70", &[("", "SCTP", 9999, None)]));
    tracker.update_slice(&slice(
        "sctp-1",
        "sctp",
        &[("", "SCTP", 9999)],
        vec![ready("10.244.0.11", "node-a")],
    ));
    // More endpoints than rules choose among: a map of its own.
    tracker.update_service(&service("big", "10.96.0.60", &[("", "TCP", 80, None)]));
    let many = (0..17).map(|n| ready(&format!("10.244.3.{n}"), "node-c")).collect();
    tracker.update_slice(&slice("big-1", "big", &[("", "TCP", 80)], many));
    // IPv6.
    tracker.update_service(&service("web6", "fd00:96::10", &[("", "TCP", 80, None)]));
    let mut web6 = slice("web6-1", "web6", &[("", "TCP", 80)], vec![ready("fd00:10:244::5", "node-a")]);
    web6.address_type = "IPv6".into();
    tracker.update_slice(&web6);
    tracker.checkout();
    tracker
}

/// The golden partial sync's changes: web loses its remote endpoint, dns goes, sticky gets a third
/// endpoint.
pub fn golden_partial_changes(tracker: &mut ChangeTracker) -> Changes {
    tracker.update_slice(&slice("web-2", "web", &[("http", "TCP", 9090)], vec![]));
    tracker.delete_service(&service("dns", "10.96.0.53", &[("dns", "UDP", 53, None)]));
    tracker.update_slice(&slice(
        "sticky-1",
        "sticky",
        &[("", "TCP", 80)],
        vec![ready("10.244.0.8", "node-a"), ready("10.244.1.8", "node-b"), ready("10.244.2.8", "node-c")],
    ));
    tracker.checkout()
}

/// The golden transactions: the full sync of [`golden_cluster`], then the partial sync of
/// [`golden_partial_changes`] (tests/golden/full.nft and partial.nft hold their text).
pub fn golden_transactions() -> [Transaction; 2] {
    let mut tracker = golden_cluster();
    let mut renderers =
        [Renderer::new(Family::Ip, golden_config()), Renderer::new(Family::Ip6, golden_config())];
    let mut full = Transaction::default();
    for renderer in &mut renderers {
        renderer.full(tracker.state(), &mut full);
    }
    let changes = golden_partial_changes(&mut tracker);
    let mut partial = Transaction::default();
    for renderer in &mut renderers {
        renderer.partial(tracker.state(), &changes.ports, &mut partial);
    }
    [full, partial]
}

/// An HTTP/1 response as tests read it: the status code (0 when unreadable), the headers with
/// lower-cased names, and the body.
pub type HttpAnswer = (u16, BTreeMap<String, String>, String);

/// Reads a whole HTTP/1 response (as a `Connection: close` request gets it).
pub fn http_answer(response: &str) -> HttpAnswer {
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((response, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|line| line.split(' ').nth(1)).and_then(|code| code.parse().ok());
    let headers = lines
        .filter_map(|line| line.split_once(": "))
        .map(|(name, value)| (name.to_lowercase(), value.to_owned()))
        .collect();
    (status.unwrap_or(0), headers, body.to_owned())
}

/// The flags the root tests and the benchmarks run a proxy with, beside `--kubeconfig`: node `node`,
/// pods in 10.244.0.0/16, /healthz and /metrics on loopback, no minimum sync period. kube-proxy v1.34
/// (`kube_proxy`) in nftables mode takes that period from the iptables flag (cmd/kube-proxy/app/
/// options.go applies it to every mode but ipvs), and leaves every conntrack sysctl alone: the table
/// size is the machine's, not the namespace's.
pub fn proxy_flags(kube_proxy: bool, node: &str) -> Vec<String> {
    let mut flags = vec![
        "--hostname-override",
        node,
        "--cluster-cidr",
        "10.244.0.0/16",
        "--healthz-bind-address",
        "127.0.0.1:10256",
        "--metrics-bind-address",
        "127.0.0.1:10249",
    ];
    if kube_proxy {
        flags.extend(["--proxy-mode", "nftables", "--iptables-min-sync-period", "0s"]);
        for flag in [
            "--conntrack-max-per-core",
            "--conntrack-tcp-timeout-established",
            "--conntrack-tcp-timeout-close-wait",
            "--conntrack-udp-timeout",
            "--conntrack-udp-timeout-stream",
        ] {
            flags.extend([flag, "0"]);
        }
    } else {
        flags.extend(["--min-sync-period", "0s"]);
    }
    flags.into_iter().map(str::to_owned).collect()
}
