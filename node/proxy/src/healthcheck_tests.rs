use super::*;
use crate::fixtures::{self, endpoint, ready, slice};
use crate::tracker::{ChangeTracker, TrackerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn lb(name: &str, cluster_ip: &str, health_check_node_port: i32) -> k8s_openapi::api::core::v1::Service {
    let mut service = fixtures::local_load_balancer(
        fixtures::service(
            name,
            cluster_ip,
            &[("http", "TCP", 80, Some(30080)), ("https", "TCP", 443, Some(30443))],
        ),
        "192.0.2.10",
        "192.0.2.20",
    );
    service.spec.as_mut().unwrap().health_check_node_port = Some(health_check_node_port);
    service
}

fn tracker() -> ChangeTracker {
    ChangeTracker::new(TrackerConfig { node_name: "node-a".into(), proxy_name: None })
}

fn health(name: &str, local_endpoints: usize) -> ServiceHealth {
    ServiceHealth { service: NamespacedName::new("default", name), local_endpoints }
}

#[test]
fn counts_ready_local_endpoints_by_address_across_the_services_ports() {
    let mut tracker = tracker();
    tracker.update_service(&lb("web", "10.96.0.10", 31000));
    // 10.244.0.5 serves both ports (one endpoint); 10.244.0.6 only https; a remote one, a local
    // terminating one and a local not-ready one do not count.
    tracker.update_slice(&slice(
        "web-1",
        "web",
        &[("http", "TCP", 8080), ("https", "TCP", 8443)],
        vec![
            ready("10.244.0.5", "node-a"),
            ready("10.244.1.5", "node-b"),
            endpoint("10.244.0.7", "node-a", (false, true, true)),
            endpoint("10.244.0.8", "node-a", (false, false, false)),
        ],
    ));
    tracker.update_slice(&slice(
        "web-2",
        "web",
        &[("https", "TCP", 8443)],
        vec![ready("10.244.0.6", "node-a")],
    ));
    // Another Service's endpoints on this node are not web's.
    tracker.update_service(&fixtures::service("other", "10.96.0.11", &[("", "TCP", 80, None)]));
    tracker.update_slice(&slice("other-1", "other", &[("", "TCP", 80)], vec![ready("10.244.0.9", "node-a")]));
    tracker.checkout();
    let checks = health_checks(tracker.state(), true);
    assert_eq!(checks.ports, [(31000, health("web", 2))].into());
    assert!(checks.proxy_healthy);
}

#[test]
fn only_local_policy_load_balancers_with_a_port_get_one() {
    let mut tracker = tracker();
    // No endpoints at all: the port is served, answering 0.
    tracker.update_service(&lb("empty", "10.96.0.20", 31001));
    let mut cluster_policy = lb("cluster", "10.96.0.21", 31002);
    cluster_policy.spec.as_mut().unwrap().external_traffic_policy = Some("Cluster".into());
    tracker.update_service(&cluster_policy);
    let mut unset = lb("unset", "10.96.0.22", 31003);
    unset.spec.as_mut().unwrap().health_check_node_port = None;
    tracker.update_service(&unset);
    tracker.update_service(&fixtures::node_port(fixtures::service(
        "np",
        "10.96.0.23",
        &[("", "TCP", 80, Some(30023))],
    )));
    tracker.checkout();
    assert_eq!(health_checks(tracker.state(), false).ports, [(31001, health("empty", 0))].into());
}

#[test]
fn a_port_claimed_twice_stays_with_the_first_service_by_name() {
    let mut tracker = tracker();
    tracker.update_service(&lb("b", "10.96.0.31", 31010));
    tracker.update_service(&lb("a", "10.96.0.30", 31010));
    tracker.update_slice(&slice("b-1", "b", &[("http", "TCP", 80)], vec![ready("10.244.0.5", "node-a")]));
    tracker.checkout();
    assert_eq!(health_checks(tracker.state(), true).ports, [(31010, health("a", 0))].into());
}

#[test]
fn the_answer_follows_the_count_and_the_proxys_health() {
    let checks =
        |count, proxy_healthy| HealthChecks { ports: [(31000, health("web", count))].into(), proxy_healthy };
    assert_eq!(respond(&checks(2, true), 31000).status(), StatusCode::OK);
    assert_eq!(respond(&checks(0, true), 31000).status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(respond(&checks(2, false), 31000).status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(respond(&checks(2, true), 31001).status(), StatusCode::SERVICE_UNAVAILABLE, "not ours");
    let response = respond(&checks(3, true), 31000);
    assert_eq!(response.headers()[ENDPOINT_WEIGHT_HEADER], "3");
}

/// A port free on loopback now (bound to :0, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// GET / on loopback `port`: Ok((status, headers lower-cased, body)), or the connect error.
async fn get(port: u16) -> std::io::Result<fixtures::HttpAnswer> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream.write_all(b"GET /any/path HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n").await?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await?;
    Ok(fixtures::http_answer(&response))
}

#[tokio::test]
async fn listeners_open_answer_update_and_close_with_the_desired_ports() {
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut server = ServiceHealthServer::new(vec![loopback]);
    let (web, blocked) = (free_port(), free_port());
    let desired = |ports: &[(u16, &str, usize)], proxy_healthy| HealthChecks {
        ports: ports.iter().map(|(port, name, count)| (*port, health(name, *count))).collect(),
        proxy_healthy,
    };

    assert!(server.update(desired(&[(web, "web", 2)], true)).await.is_empty());
    let (status, headers, body) = get(web).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers[ENDPOINT_WEIGHT_HEADER], "2");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "service": {"namespace": "default", "name": "web"},
            "localEndpoints": 2,
            "serviceProxyHealthy": true
        })
    );

    // The count drops to 0: the same listener answers 503.
    assert!(server.update(desired(&[(web, "web", 0)], true)).await.is_empty());
    let (status, headers, body) = get(web).await.unwrap();
    assert_eq!((status, headers[ENDPOINT_WEIGHT_HEADER].as_str()), (503, "0"));
    assert!(body.contains("\"localEndpoints\": 0"), "{body}");
    assert!(server.update(desired(&[(web, "web", 1)], false)).await.is_empty());
    let (status, _, body) = get(web).await.unwrap();
    assert_eq!(status, 503, "an unhealthy proxy fails every health check");
    assert!(body.contains("\"serviceProxyHealthy\": false"), "{body}");

    // A port someone else holds: reported, left closed, opened by a later update once free.
    let holder = std::net::TcpListener::bind(("127.0.0.1", blocked)).unwrap();
    let failures = server.update(desired(&[(web, "web", 1), (blocked, "lb", 1)], true)).await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0].address.port(), blocked);
    assert_eq!(failures[0].source.kind(), std::io::ErrorKind::AddrInUse);
    assert_eq!(server.listening().collect::<Vec<_>>(), [web]);
    drop(holder);
    assert!(server.update(desired(&[(web, "web", 1), (blocked, "lb", 4)], true)).await.is_empty());
    let (status, headers, _) = get(blocked).await.unwrap();
    assert_eq!((status, headers[ENDPOINT_WEIGHT_HEADER].as_str()), (200, "4"));

    // web goes: its port refuses at once; lb's stays.
    assert!(server.update(desired(&[(blocked, "lb", 4)], true)).await.is_empty());
    let refused = get(web).await.unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(get(blocked).await.unwrap().0, 200);
    // And comes back on the same port (SO_REUSEADDR: its closed connections do not hold it).
    assert!(server.update(desired(&[(web, "web", 1), (blocked, "lb", 4)], true)).await.is_empty());
    assert_eq!(get(web).await.unwrap().0, 200);
}

#[tokio::test]
async fn run_follows_the_watch_channel_and_closes_everything_when_it_ends() {
    let port = free_port();
    let (sender, receiver) = watch::channel(HealthChecks::default());
    let server = ServiceHealthServer::new(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let task = tokio::spawn(run(server, receiver, Duration::from_secs(3600)));
    sender.send_replace(HealthChecks { ports: [(port, health("web", 1))].into(), proxy_healthy: true });
    // The runner picks the value up when it next runs: ask until it answers.
    let mut answered = None;
    for _ in 0..1000 {
        if let Ok(answer) = get(port).await {
            answered = Some(answer.0);
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(answered, Some(200));
    drop(sender);
    task.await.unwrap();
    assert_eq!(get(port).await.unwrap_err().kind(), std::io::ErrorKind::ConnectionRefused);
}
