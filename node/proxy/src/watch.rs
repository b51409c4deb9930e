//! The reflectors: kube-rs watchers over Services, EndpointSlices and this node's Node feed the
//! [`ChangeTracker`]. [`Feed`] is the pure part: it turns watcher events into tracker calls, with a
//! re-list (`Init` … `InitDone`) deleting what it no longer lists, and it tells when both the
//! Service and the EndpointSlice lists were complete once — nothing is synced before that.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::Event;

use crate::tracker::ChangeTracker;

/// One kind's objects as last listed and watched, for re-list deletions.
#[derive(Debug)]
struct Known<K> {
    objects: BTreeMap<(String, String), K>,
    /// Names listed since the current re-list began.
    relisting: Option<BTreeSet<(String, String)>>,
    /// A list completed once.
    synced: bool,
}

impl<K> Default for Known<K> {
    fn default() -> Self {
        Known { objects: BTreeMap::new(), relisting: None, synced: false }
    }
}

fn key(metadata: &kube::api::ObjectMeta) -> (String, String) {
    (metadata.namespace.clone().unwrap_or_default(), metadata.name.clone().unwrap_or_default())
}

impl<K: kube::Resource + Clone> Known<K> {
    /// Applies an event; calls `update` / `delete` for what the tracker must hear.
    fn handle(&mut self, event: Event<K>, mut update: impl FnMut(&K), mut delete: impl FnMut(&K)) {
        match event {
            Event::Apply(object) | Event::InitApply(object) => {
                let name = key(object.meta());
                if let Some(listed) = self.relisting.as_mut() {
                    listed.insert(name.clone());
                }
                update(&object);
                self.objects.insert(name, object);
            }
            Event::Delete(object) => {
                self.objects.remove(&key(object.meta()));
                delete(&object);
            }
            Event::Init => self.relisting = Some(BTreeSet::new()),
            Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                let gone: Vec<(String, String)> =
                    self.objects.keys().filter(|name| !listed.contains(*name)).cloned().collect();
                for name in gone {
                    if let Some(object) = self.objects.remove(&name) {
                        delete(&object);
                    }
                }
                self.synced = true;
            }
        }
    }
}

/// Watcher events in, tracker calls out.
#[derive(Debug, Default)]
pub struct Feed {
    services: Known<Service>,
    slices: Known<EndpointSlice>,
    nodes: Known<Node>,
}

impl Feed {
    /// A feed that has seen nothing.
    pub fn new() -> Feed {
        Feed::default()
    }

    /// A Service watcher event.
    pub fn service(&mut self, tracker: &mut ChangeTracker, event: Event<Service>) {
        let tracker = std::cell::RefCell::new(tracker);
        self.services.handle(
            event,
            |service| tracker.borrow_mut().update_service(service),
            |service| tracker.borrow_mut().delete_service(service),
        );
    }

    /// An EndpointSlice watcher event.
    pub fn slice(&mut self, tracker: &mut ChangeTracker, event: Event<EndpointSlice>) {
        let tracker = std::cell::RefCell::new(tracker);
        self.slices.handle(
            event,
            |slice| tracker.borrow_mut().update_slice(slice),
            |slice| tracker.borrow_mut().delete_slice(slice),
        );
    }

    /// A Node watcher event (the watcher selects this node by name).
    pub fn node(&mut self, tracker: &mut ChangeTracker, event: Event<Node>) {
        self.nodes.handle(event, |node| tracker.update_node(node), |_| {});
    }

    /// Both the Service and the EndpointSlice lists completed once: syncs may start.
    pub fn ready(&self) -> bool {
        self.services.synced && self.slices.synced
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{ready, service, slice};
    use crate::tracker::TrackerConfig;

    #[test]
    fn nothing_is_ready_before_both_lists_and_a_relist_deletes_what_it_no_longer_lists() {
        let mut tracker = ChangeTracker::new(TrackerConfig { node_name: "node-a".into(), proxy_name: None });
        let mut feed = Feed::new();
        let (a, b) = (
            service("a", "10.96.0.1", &[("", "TCP", 80, None)]),
            service("b", "10.96.0.2", &[("", "TCP", 80, None)]),
        );
        for event in [Event::Init, Event::InitApply(a.clone()), Event::InitApply(b.clone()), Event::InitDone]
        {
            feed.service(&mut tracker, event);
        }
        assert!(!feed.ready(), "the EndpointSlice list is not complete");
        feed.slice(&mut tracker, Event::Init);
        feed.slice(
            &mut tracker,
            Event::InitApply(slice("a-1", "a", &[("", "TCP", 80)], vec![ready("10.244.0.5", "node-a")])),
        );
        feed.slice(&mut tracker, Event::InitDone);
        assert!(feed.ready());
        tracker.checkout();
        assert_eq!(tracker.state().services.len(), 2);

        // The watch restarts and lists only b: a is deleted.
        for event in [Event::Init, Event::InitApply(b), Event::InitDone] {
            feed.service(&mut tracker, event);
        }
        let changes = tracker.checkout();
        assert_eq!(changes.ports.iter().map(ToString::to_string).collect::<Vec<_>>(), ["default/a/tcp/"]);
        assert_eq!(tracker.state().services.len(), 1);
        feed.service(&mut tracker, Event::Delete(service("b", "10.96.0.2", &[])));
        tracker.checkout();
        assert!(tracker.state().services.is_empty());
    }
}
