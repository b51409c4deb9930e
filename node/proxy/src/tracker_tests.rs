use super::*;
use crate::fixtures::{self, ready, slice};

fn tracker() -> ChangeTracker {
    ChangeTracker::new(TrackerConfig { node_name: "node-a".into(), proxy_name: None })
}

fn names(changes: &Changes) -> Vec<String> {
    changes.ports.iter().map(ToString::to_string).collect()
}

#[test]
fn services_and_slices_yield_their_changed_ports() {
    let mut tracker = tracker();
    let web = fixtures::service("web", "10.96.0.10", &[("http", "TCP", 80, None), ("dns", "UDP", 53, None)]);
    tracker.update_service(&web);
    tracker.update_slice(&slice(
        "web-1",
        "web",
        &[("http", "TCP", 8080)],
        vec![ready("10.244.0.5", "node-a")],
    ));
    assert!(tracker.has_pending());
    let changes = tracker.checkout();
    assert_eq!(names(&changes), ["default/web/udp/dns", "default/web/tcp/http"]);
    assert!(!tracker.has_pending());
    let http = ServicePortName::new("default", "web", "http", Protocol::Tcp);
    assert_eq!(tracker.state().endpoints_of(&http).len(), 1);

    // A second slice changes only the port it names.
    tracker.update_slice(&slice(
        "web-2",
        "web",
        &[("http", "TCP", 9090)],
        vec![ready("10.244.1.5", "node-b")],
    ));
    assert_eq!(names(&tracker.checkout()), ["default/web/tcp/http"]);
    let endpoints: Vec<(String, u16, bool)> =
        tracker.state().endpoints_of(&http).iter().map(|e| (e.ip.to_string(), e.port, e.local)).collect();
    assert_eq!(endpoints, [("10.244.0.5".into(), 8080, true), ("10.244.1.5".into(), 9090, false)]);

    // Deleting the Service removes its ports; its endpoints stay known for when it comes back.
    tracker.delete_service(&web);
    assert_eq!(names(&tracker.checkout()), ["default/web/udp/dns", "default/web/tcp/http"]);
    assert!(tracker.state().services.is_empty());
    assert_eq!(tracker.state().endpoints_of(&http).len(), 2);
    tracker.delete_slice(&slice("web-1", "web", &[], vec![]));
    assert_eq!(names(&tracker.checkout()), ["default/web/tcp/http"]);
    assert_eq!(tracker.state().endpoints_of(&http).len(), 1);
}

#[test]
fn a_change_undone_before_the_sync_yields_nothing() {
    let mut tracker = tracker();
    let web = fixtures::service("web", "10.96.0.10", &[("", "TCP", 80, None)]);
    tracker.update_service(&web);
    tracker.checkout();
    let moved = fixtures::service("web", "10.96.0.11", &[("", "TCP", 80, None)]);
    tracker.update_service(&moved);
    tracker.update_service(&web);
    assert!(!tracker.has_pending());
    let endpoints = slice("web-1", "web", &[("", "TCP", 80)], vec![ready("10.244.0.5", "node-a")]);
    tracker.update_slice(&endpoints);
    tracker.delete_slice(&endpoints);
    assert!(tracker.checkout().is_empty());
}

#[test]
fn services_of_other_proxies_count_as_gone() {
    let mut tracker = tracker();
    let mut web = fixtures::service("web", "10.96.0.10", &[("", "TCP", 80, None)]);
    tracker.update_service(&web);
    tracker.checkout();
    web.metadata.labels =
        Some([(crate::model::SERVICE_PROXY_NAME_LABEL.to_owned(), "other".to_owned())].into_iter().collect());
    tracker.update_service(&web);
    assert_eq!(names(&tracker.checkout()), ["default/web/tcp/"]);
    assert!(tracker.state().services.is_empty());
}

#[test]
fn a_slice_moving_to_another_service_changes_both() {
    let mut tracker = tracker();
    let mut moving = slice("s-1", "a", &[("", "TCP", 80)], vec![ready("10.244.0.5", "node-a")]);
    tracker.update_slice(&moving);
    tracker.checkout();
    moving.metadata.labels.as_mut().unwrap().insert(crate::model::SERVICE_NAME_LABEL.into(), "b".into());
    tracker.update_slice(&moving);
    assert_eq!(names(&tracker.checkout()), ["default/a/tcp/", "default/b/tcp/"]);
}

#[test]
fn only_a_change_of_this_nodes_labels_asks_for_a_full_sync() {
    let mut tracker = tracker();
    let mut node = k8s_openapi::api::core::v1::Node::default();
    node.metadata.name = Some("node-a".into());
    tracker.update_node(&node);
    assert!(!tracker.checkout().full, "the first sight is no change");
    node.metadata.labels = Some([("zone".to_owned(), "z1".to_owned())].into_iter().collect());
    tracker.update_node(&node);
    assert!(tracker.checkout().full);
    node.metadata.name = Some("node-b".into());
    node.metadata.labels = None;
    tracker.update_node(&node);
    assert!(!tracker.has_pending());
}
