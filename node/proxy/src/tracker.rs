//! The change tracker: what the informers said since the last sync, as kube-proxy's
//! ServiceChangeTracker and EndpointsChangeTracker keep it — per Service name, the `{previous,
//! current}` pair, where `previous` is what the last sync saw. A name whose object went back to what
//! was synced drops out. [`ChangeTracker::checkout`] folds the pending changes into the
//! [`ProxyState`] and yields the [`ServicePortName`]s whose port or endpoints changed.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::model::{self, Endpoint, NamespacedName, Protocol, ServicePortInfo, ServicePortName};

/// The ports of the Services, keyed by port name.
pub type ServicePortMap = BTreeMap<ServicePortName, ServicePortInfo>;
/// The endpoints of the Service ports.
pub type EndpointsMap = BTreeMap<ServicePortName, BTreeSet<Endpoint>>;

/// What every render reads: the Service ports and their endpoints as of the last checkout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyState {
    /// Every handled Service port.
    pub services: ServicePortMap,
    /// Every Service port's endpoints (also of ports no Service has yet: the slice came first).
    pub endpoints: EndpointsMap,
}

impl ProxyState {
    /// The endpoints of a Service port (none when unknown).
    pub fn endpoints_of(&self, name: &ServicePortName) -> &BTreeSet<Endpoint> {
        static NONE: BTreeSet<Endpoint> = BTreeSet::new();
        self.endpoints.get(name).unwrap_or(&NONE)
    }
}

/// The outcome of a checkout: which Service ports changed, and whether only a full sync will do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// The Service ports whose port info or endpoints differ from the last checkout.
    pub ports: BTreeSet<ServicePortName>,
    /// Something every Service depends on changed (this node's object).
    pub full: bool,
}

impl Changes {
    /// Nothing to sync.
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty() && !self.full
    }
}

/// The tracker's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrackerConfig {
    /// This node's name (`--hostname-override`): endpoints on it are local.
    pub node_name: String,
    /// This proxy's `service.kubernetes.io/service-proxy-name` (None: unlabelled Services only).
    pub proxy_name: Option<String>,
}

/// Informer events in, changed Service ports out.
#[derive(Debug, Default)]
pub struct ChangeTracker {
    config: TrackerConfig,
    /// The informers' current view, per Service.
    services: BTreeMap<NamespacedName, ServicePortMap>,
    /// The informers' current view, per Service, per EndpointSlice name.
    slices: BTreeMap<NamespacedName, BTreeMap<String, EndpointsMap>>,
    /// Which Service each known slice (namespace, name) belongs to, so a deletion finds it.
    slice_owner: BTreeMap<(String, String), NamespacedName>,
    /// Services changed since the last checkout: their ports as that checkout saw them.
    previous_services: BTreeMap<NamespacedName, ServicePortMap>,
    /// Endpoints changed since the last checkout, per Service: as that checkout saw them.
    previous_endpoints: BTreeMap<NamespacedName, EndpointsMap>,
    /// This node's labels as last seen.
    node_labels: Option<BTreeMap<String, String>>,
    full: bool,
    state: ProxyState,
}

impl ChangeTracker {
    /// An empty tracker.
    pub fn new(config: TrackerConfig) -> ChangeTracker {
        ChangeTracker { config, ..ChangeTracker::default() }
    }

    /// The state as of the last checkout.
    pub fn state(&self) -> &ProxyState {
        &self.state
    }

    /// Whether anything waits for a sync.
    pub fn has_pending(&self) -> bool {
        self.full || !self.previous_services.is_empty() || !self.previous_endpoints.is_empty()
    }

    /// A Service was added or changed. One the proxy does not handle (another proxy's, headless,
    /// ExternalName) counts as having no ports.
    pub fn update_service(&mut self, service: &Service) {
        let Some(name) = object_name(&service.metadata) else { return };
        let ports: ServicePortMap = if model::handled_by(service, self.config.proxy_name.as_deref()) {
            model::service_ports(service).into_iter().collect()
        } else {
            ServicePortMap::new()
        };
        self.set_service(name, ports);
    }

    /// A Service was deleted.
    pub fn delete_service(&mut self, service: &Service) {
        if let Some(name) = object_name(&service.metadata) {
            self.set_service(name, ServicePortMap::new());
        }
    }

    fn set_service(&mut self, name: NamespacedName, ports: ServicePortMap) {
        let current = self.services.get(&name).cloned().unwrap_or_default();
        let previous = self.previous_services.entry(name.clone()).or_insert(current);
        let unchanged = *previous == ports;
        if unchanged {
            self.previous_services.remove(&name);
        }
        if ports.is_empty() {
            self.services.remove(&name);
        } else {
            self.services.insert(name, ports);
        }
    }

    /// An EndpointSlice was added or changed.
    pub fn update_slice(&mut self, slice: &EndpointSlice) {
        let Some(slice_key) = slice_key(slice) else { return };
        let Some(service) = model::slice_service(slice) else {
            // No longer (or never) a proxied Service's slice.
            self.remove_slice(&slice_key);
            return;
        };
        if self.slice_owner.get(&slice_key).is_some_and(|owner| *owner != service) {
            self.remove_slice(&slice_key);
        }
        let mut endpoints = EndpointsMap::new();
        for ((port, protocol), endpoint) in model::slice_endpoints(slice, &self.config.node_name) {
            let key = port_name(&service, &port, protocol);
            endpoints.entry(key).or_default().insert(endpoint);
        }
        self.remember_endpoints(&service);
        self.slice_owner.insert(slice_key.clone(), service.clone());
        self.slices.entry(service.clone()).or_default().insert(slice_key.1, endpoints);
        self.forget_unchanged_endpoints(&service);
    }

    /// An EndpointSlice was deleted.
    pub fn delete_slice(&mut self, slice: &EndpointSlice) {
        if let Some(slice_key) = slice_key(slice) {
            self.remove_slice(&slice_key);
        }
    }

    fn remove_slice(&mut self, slice_key: &(String, String)) {
        let Some(service) = self.slice_owner.remove(slice_key) else { return };
        self.remember_endpoints(&service);
        if let Some(slices) = self.slices.get_mut(&service) {
            slices.remove(&slice_key.1);
            if slices.is_empty() {
                self.slices.remove(&service);
            }
        }
        self.forget_unchanged_endpoints(&service);
    }

    /// This node's object was added or changed: a change of its labels calls for a full sync.
    pub fn update_node(&mut self, node: &Node) {
        if node.metadata.name.as_deref() != Some(self.config.node_name.as_str()) {
            return;
        }
        let labels = node.metadata.labels.clone().unwrap_or_default();
        if self.node_labels.as_ref() != Some(&labels) {
            self.full |= self.node_labels.is_some();
            self.node_labels = Some(labels);
        }
    }

    /// Asks for a full sync at the next checkout (after a failed sync).
    pub fn request_full(&mut self) {
        self.full = true;
    }

    fn merged_endpoints(&self, service: &NamespacedName) -> EndpointsMap {
        let mut merged = EndpointsMap::new();
        for endpoints in self.slices.get(service).into_iter().flat_map(BTreeMap::values) {
            for (port, set) in endpoints {
                merged.entry(port.clone()).or_default().extend(set.iter().cloned());
            }
        }
        merged
    }

    fn remember_endpoints(&mut self, service: &NamespacedName) {
        if !self.previous_endpoints.contains_key(service) {
            let current = self.merged_endpoints(service);
            self.previous_endpoints.insert(service.clone(), current);
        }
    }

    fn forget_unchanged_endpoints(&mut self, service: &NamespacedName) {
        if self.previous_endpoints.get(service) == Some(&self.merged_endpoints(service)) {
            self.previous_endpoints.remove(service);
        }
    }

    /// Folds the pending changes into the state and says which Service ports changed.
    pub fn checkout(&mut self) -> Changes {
        let mut changes = Changes { ports: BTreeSet::new(), full: std::mem::take(&mut self.full) };
        for (name, previous) in std::mem::take(&mut self.previous_services) {
            let current = self.services.get(&name).cloned().unwrap_or_default();
            for port in previous.keys().chain(current.keys()) {
                if previous.get(port) != current.get(port) {
                    changes.ports.insert(port.clone());
                }
            }
            for port in previous.keys() {
                self.state.services.remove(port);
            }
            self.state.services.extend(current);
        }
        for (name, previous) in std::mem::take(&mut self.previous_endpoints) {
            let current = self.merged_endpoints(&name);
            for port in previous.keys().chain(current.keys()) {
                if previous.get(port) != current.get(port) {
                    changes.ports.insert(port.clone());
                }
            }
            for port in previous.keys() {
                self.state.endpoints.remove(port);
            }
            self.state.endpoints.extend(current);
        }
        changes
    }
}

fn port_name(service: &NamespacedName, port: &str, protocol: Protocol) -> ServicePortName {
    ServicePortName { service: service.clone(), port: port.to_owned(), protocol }
}

fn object_name(
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<NamespacedName> {
    Some(NamespacedName::new(metadata.namespace.as_deref()?, metadata.name.as_deref()?))
}

fn slice_key(slice: &EndpointSlice) -> Option<(String, String)> {
    Some((slice.metadata.namespace.clone()?, slice.metadata.name.clone()?))
}

#[cfg(test)]
#[path = "tracker_tests.rs"]
mod tests;
