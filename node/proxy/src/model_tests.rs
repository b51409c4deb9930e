use super::*;
use crate::fixtures::{self, endpoint, ready, slice};
use std::collections::BTreeSet;

#[test]
fn a_service_becomes_one_entry_per_port() {
    let service = fixtures::affinity(
        fixtures::node_port(fixtures::service(
            "web",
            "10.96.0.10",
            &[("http", "TCP", 80, Some(30080)), ("dns", "UDP", 53, None), ("bad", "ICMP", 1, None)],
        )),
        0,
    );
    let ports = service_ports(&service);
    assert_eq!(ports.len(), 2, "{ports:?}");
    let (name, info) = &ports[0];
    assert_eq!(name.to_string(), "default/web/tcp/http");
    assert_eq!(info.node_port, Some(30080));
    assert_eq!(info.affinity_seconds, Some(DEFAULT_AFFINITY_SECONDS), "0 means the default");
    assert_eq!(ports[1].0.protocol, Protocol::Udp);
    assert_eq!(ports[1].1.node_port, None);
}

#[test]
fn headless_external_name_and_unparsable_services_have_no_ports() {
    let mut headless = fixtures::service("h", "None", &[("", "TCP", 80, None)]);
    headless.spec.as_mut().unwrap().cluster_ips = Some(vec!["None".into()]);
    assert!(service_ports(&headless).is_empty());
    let mut external = fixtures::service("e", "10.96.0.1", &[("", "TCP", 80, None)]);
    external.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
    assert!(service_ports(&external).is_empty());
    let mut nameless = fixtures::service("n", "10.96.0.1", &[("", "TCP", 80, None)]);
    nameless.metadata.name = None;
    assert!(service_ports(&nameless).is_empty());
    let mut huge = fixtures::service("p", "10.96.0.1", &[("", "TCP", 70000, None)]);
    huge.spec.as_mut().unwrap().type_ = None;
    assert!(service_ports(&huge).is_empty());
}

#[test]
fn the_service_proxy_name_label_picks_the_proxy() {
    let mut service = fixtures::service("s", "10.96.0.1", &[("", "TCP", 80, None)]);
    assert!(handled_by(&service, None));
    assert!(!handled_by(&service, Some("keel")));
    service.metadata.labels =
        Some([(SERVICE_PROXY_NAME_LABEL.to_owned(), "other".to_owned())].into_iter().collect());
    assert!(!handled_by(&service, None));
    assert!(handled_by(&service, Some("other")));
}

#[test]
fn load_balancer_local_policy_and_health_check_port() {
    let service = fixtures::local_load_balancer(
        fixtures::service("lb", "10.96.0.5", &[("", "TCP", 80, Some(30001))]),
        "192.0.2.10",
        "192.0.2.20",
    );
    let (_, info) = &service_ports(&service)[0];
    assert!(info.external_policy_local && !info.internal_policy_local);
    assert_eq!(info.load_balancer_ips, vec!["192.0.2.10".parse::<IpAddr>().unwrap()]);
    assert_eq!(info.external_ips, vec!["192.0.2.20".parse::<IpAddr>().unwrap()]);
    assert_eq!(info.health_check_node_port, Some(30999));
    assert_eq!(info.node_port, Some(30001));
}

#[test]
fn slice_endpoints_read_conditions_ports_and_locality() {
    let mut unset = ready("10.244.0.9", "node-a");
    unset.conditions = None;
    let mut bad = ready("not-an-ip", "node-a");
    bad.node_name = None;
    let slice = slice(
        "web-abc",
        "web",
        &[("http", "TCP", 8080)],
        vec![
            ready("10.244.0.5", "node-a"),
            endpoint("10.244.1.5", "node-b", (false, true, true)),
            unset,
            bad,
        ],
    );
    assert_eq!(slice_service(&slice), Some(NamespacedName::new("default", "web")));
    let endpoints = slice_endpoints(&slice, "node-a");
    assert_eq!(endpoints.len(), 3);
    let (key, first) = &endpoints[0];
    assert_eq!(key, &("http".to_owned(), Protocol::Tcp));
    assert!(first.local && first.ready && first.port == 8080);
    assert!(!endpoints[1].1.local && !endpoints[1].1.ready && endpoints[1].1.terminating);
    assert!(endpoints[2].1.ready && endpoints[2].1.serving && !endpoints[2].1.terminating, "unset: ready");
}

#[test]
fn terminating_endpoints_only_when_no_ready_ones() {
    let endpoint = |ip: &str, ready: bool, serving: bool, terminating: bool, local: bool| Endpoint {
        ip: ip.parse().unwrap(),
        port: 80,
        ready,
        serving,
        terminating,
        local,
    };
    let mut set: BTreeSet<Endpoint> = [
        endpoint("10.0.0.1", true, true, false, false),
        endpoint("10.0.0.2", false, true, true, true),
        endpoint("10.0.0.3", false, false, true, true),
    ]
    .into();
    let ips = |endpoints: Vec<Endpoint>| endpoints.iter().map(|e| e.ip.to_string()).collect::<Vec<_>>();
    assert_eq!(ips(usable(&set, false)), ["10.0.0.1"]);
    assert_eq!(ips(usable(&set, true)), ["10.0.0.2"], "local: only a serving terminating one");
    set.retain(|e| !e.ready);
    assert_eq!(ips(usable(&set, false)), ["10.0.0.2"]);
}

#[test]
fn health_check_node_port_only_for_local_load_balancers_and_in_range() {
    let lb = |port: Option<i32>| {
        let mut service = fixtures::local_load_balancer(
            fixtures::service("lb", "10.96.0.5", &[("", "TCP", 80, Some(30001))]),
            "192.0.2.10",
            "192.0.2.20",
        );
        service.spec.as_mut().unwrap().health_check_node_port = port;
        service
    };
    let port = |service: &Service| service_ports(service)[0].1.health_check_node_port;
    assert_eq!(port(&lb(Some(32000))), Some(32000));
    for bad in [None, Some(0), Some(-1), Some(70_000)] {
        assert_eq!(port(&lb(bad)), None, "{bad:?}");
        assert_eq!(service_ports(&lb(bad)).len(), 1, "a bad health-check port leaves the Service be");
    }
    let mut cluster_policy = lb(Some(32000));
    cluster_policy.spec.as_mut().unwrap().external_traffic_policy = Some("Cluster".into());
    assert_eq!(port(&cluster_policy), None);
    let mut node_port = lb(Some(32000));
    node_port.spec.as_mut().unwrap().type_ = Some("NodePort".into());
    assert_eq!(port(&node_port), None, "kube-proxy's NeedsHealthCheck: LoadBalancer only");
}
