//! The proxy's view of the cluster, read from k8s-openapi objects: a Service becomes one
//! [`ServicePortInfo`] per port, keyed by [`ServicePortName`]; an EndpointSlice becomes
//! [`Endpoint`]s of the ports it names. Nothing here does IO; every conversion tolerates any input
//! (an unparsable address or port is skipped, never a panic).

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label naming the proxy that should handle a Service (`service.kubernetes.io/service-proxy-name`).
pub const SERVICE_PROXY_NAME_LABEL: &str = "service.kubernetes.io/service-proxy-name";
/// The label of an EndpointSlice naming its Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label marking a Service headless on its EndpointSlices (`service.kubernetes.io/headless`).
pub const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// kube-proxy's default affinity timeout (3 hours), used when `timeoutSeconds` is unset.
pub const DEFAULT_AFFINITY_SECONDS: u32 = 10_800;

/// A transport protocol a Service port can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Protocol {
    /// TCP (the default when a port names none).
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// The protocol of an API object's `protocol` field; `None` for an unknown one.
    pub fn parse(protocol: Option<&str>) -> Option<Protocol> {
        match protocol.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// The lower-case name nft and chain names use.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }

    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => 6,
            Protocol::Udp => 17,
            Protocol::Sctp => 132,
        }
    }
}

/// A namespace and name (a Service's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NamespacedName {
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
}

impl NamespacedName {
    /// A name from its parts.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> NamespacedName {
        NamespacedName { namespace: namespace.into(), name: name.into() }
    }
}

impl fmt::Display for NamespacedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// One port of one Service, as kube-proxy keys everything: namespace, name, port name, protocol.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServicePortName {
    /// The Service.
    pub service: NamespacedName,
    /// The port's name (empty for the single unnamed port).
    pub port: String,
    /// The port's protocol.
    pub protocol: Protocol,
}

impl ServicePortName {
    /// A key from its parts.
    pub fn new(namespace: &str, name: &str, port: &str, protocol: Protocol) -> ServicePortName {
        ServicePortName { service: NamespacedName::new(namespace, name), port: port.to_owned(), protocol }
    }
}

impl fmt::Display for ServicePortName {
    /// `namespace/name/protocol/port`, the form kube-proxy's chain names carry.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.service, self.protocol.name(), self.port)
    }
}

/// What the proxy programs for one Service port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePortInfo {
    /// The cluster IPs (one per family; dual-stack Services have two).
    pub cluster_ips: Vec<IpAddr>,
    /// The Service port.
    pub port: u16,
    /// The protocol.
    pub protocol: Protocol,
    /// The node port, when the Service is NodePort or LoadBalancer and one is allocated.
    pub node_port: Option<u16>,
    /// `spec.externalIPs`.
    pub external_ips: Vec<IpAddr>,
    /// `status.loadBalancer.ingress[].ip`.
    pub load_balancer_ips: Vec<IpAddr>,
    /// `sessionAffinity: ClientIP` with its timeout in seconds.
    pub affinity_seconds: Option<u32>,
    /// `externalTrafficPolicy: Local` (only meaningful with external addresses or a node port).
    pub external_policy_local: bool,
    /// `internalTrafficPolicy: Local`.
    pub internal_policy_local: bool,
    /// `healthCheckNodePort` (externalTrafficPolicy Local on a LoadBalancer Service).
    pub health_check_node_port: Option<u16>,
}

impl ServicePortInfo {
    /// Whether traffic reaches this port from outside the cluster (node port, external or LB IPs).
    pub fn has_external(&self) -> bool {
        self.node_port.is_some() || !self.external_ips.is_empty() || !self.load_balancer_ips.is_empty()
    }
}

/// Which Services this proxy handles (`service.kubernetes.io/service-proxy-name`): a Service
/// labelled with a name is left to the proxy of that name; an unlabelled one is ours unless we run
/// under a name ourselves.
pub fn handled_by(service: &Service, proxy_name: Option<&str>) -> bool {
    let label = service.metadata.labels.as_ref().and_then(|labels| labels.get(SERVICE_PROXY_NAME_LABEL));
    label.map(String::as_str) == proxy_name
}

/// The ports of a Service the proxy programs; empty for headless (`clusterIP: None`) and
/// ExternalName Services, and for ports it cannot parse.
pub fn service_ports(service: &Service) -> Vec<(ServicePortName, ServicePortInfo)> {
    let (Some(namespace), Some(name), Some(spec)) =
        (service.metadata.namespace.as_deref(), service.metadata.name.as_deref(), service.spec.as_ref())
    else {
        return Vec::new();
    };
    if spec.type_.as_deref() == Some("ExternalName") {
        return Vec::new();
    }
    let mut cluster_ips: Vec<IpAddr> =
        spec.cluster_ips.iter().flatten().filter_map(|ip| ip.parse().ok()).collect();
    if cluster_ips.is_empty()
        && let Some(ip) = spec.cluster_ip.as_deref().and_then(|ip| ip.parse().ok())
    {
        cluster_ips.push(ip);
    }
    if cluster_ips.is_empty() {
        // Headless ("None") or not yet allocated: nothing to program.
        return Vec::new();
    }
    let external_ips: Vec<IpAddr> =
        spec.external_ips.iter().flatten().filter_map(|ip| ip.parse().ok()).collect();
    let load_balancer_ips: Vec<IpAddr> = service
        .status
        .as_ref()
        .and_then(|status| status.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|ingress| ingress.ip.as_deref()?.parse().ok())
        .collect();
    let affinity_seconds = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|config| config.client_ip.as_ref())
            .and_then(|client_ip| client_ip.timeout_seconds)
            .and_then(|seconds| u32::try_from(seconds).ok())
            .filter(|seconds| *seconds > 0)
            .unwrap_or(DEFAULT_AFFINITY_SECONDS)
    });
    let node_port_type = matches!(spec.type_.as_deref(), Some("NodePort" | "LoadBalancer"));
    let external_policy_local = spec.external_traffic_policy.as_deref() == Some("Local");
    let internal_policy_local = spec.internal_traffic_policy.as_deref() == Some("Local");
    let health_check_node_port = if external_policy_local && spec.type_.as_deref() == Some("LoadBalancer") {
        spec.health_check_node_port.and_then(|port| u16::try_from(port).ok()).filter(|port| *port > 0)
    } else {
        None
    };
    let mut ports = Vec::new();
    for port in spec.ports.iter().flatten() {
        let Some(info) = port_info(
            port,
            node_port_type,
            &cluster_ips,
            &external_ips,
            &load_balancer_ips,
            affinity_seconds,
            (external_policy_local, internal_policy_local, health_check_node_port),
        ) else {
            continue;
        };
        let key = ServicePortName::new(namespace, name, port.name.as_deref().unwrap_or(""), info.protocol);
        ports.push((key, info));
    }
    ports
}

fn port_info(
    port: &ServicePort,
    node_port_type: bool,
    cluster_ips: &[IpAddr],
    external_ips: &[IpAddr],
    load_balancer_ips: &[IpAddr],
    affinity_seconds: Option<u32>,
    (external_policy_local, internal_policy_local, health_check_node_port): (bool, bool, Option<u16>),
) -> Option<ServicePortInfo> {
    let protocol = Protocol::parse(port.protocol.as_deref())?;
    let number = u16::try_from(port.port).ok().filter(|port| *port > 0)?;
    let node_port = if node_port_type {
        port.node_port.and_then(|port| u16::try_from(port).ok()).filter(|port| *port > 0)
    } else {
        None
    };
    Some(ServicePortInfo {
        cluster_ips: cluster_ips.to_vec(),
        port: number,
        protocol,
        node_port,
        external_ips: external_ips.to_vec(),
        load_balancer_ips: load_balancer_ips.to_vec(),
        affinity_seconds,
        external_policy_local,
        internal_policy_local,
        health_check_node_port,
    })
}

/// One endpoint of one Service port: an address and the port number its EndpointSlice gives (a
/// named target port resolves per slice, so endpoints of one Service port may differ in port).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    /// The endpoint's address.
    pub ip: IpAddr,
    /// The target port.
    pub port: u16,
    /// `conditions.ready` (unset means ready).
    pub ready: bool,
    /// `conditions.serving` (unset means as ready).
    pub serving: bool,
    /// `conditions.terminating` (unset means not terminating).
    pub terminating: bool,
    /// Whether the endpoint runs on this node (`nodeName` is ours).
    pub local: bool,
}

/// The Service an EndpointSlice belongs to (its `kubernetes.io/service-name` label), unless it is
/// a headless Service's.
pub fn slice_service(slice: &EndpointSlice) -> Option<NamespacedName> {
    let labels = slice.metadata.labels.as_ref()?;
    if labels.contains_key(HEADLESS_LABEL) {
        return None;
    }
    let service = labels.get(SERVICE_NAME_LABEL)?;
    Some(NamespacedName::new(slice.metadata.namespace.as_deref()?, service.as_str()))
}

/// An EndpointSlice's endpoints per (port name, protocol), `node_name` telling which are local.
/// Only the slice's own address family is read (an address of the other family is skipped).
pub fn slice_endpoints(slice: &EndpointSlice, node_name: &str) -> Vec<((String, Protocol), Endpoint)> {
    let family_v4 = match slice.address_type.as_str() {
        "IPv4" => true,
        "IPv6" => false,
        _ => return Vec::new(), // FQDN slices are not proxied.
    };
    let mut endpoints = Vec::new();
    for port in slice.ports.iter().flatten() {
        let Some(protocol) = Protocol::parse(port.protocol.as_deref()) else { continue };
        let Some(number) = port.port.and_then(|port| u16::try_from(port).ok()).filter(|port| *port > 0)
        else {
            continue;
        };
        let key = (port.name.clone().unwrap_or_default(), protocol);
        for endpoint in &slice.endpoints {
            let conditions = endpoint.conditions.as_ref();
            let ready = conditions.and_then(|c| c.ready).unwrap_or(true);
            let serving = conditions.and_then(|c| c.serving).unwrap_or(ready);
            let terminating = conditions.and_then(|c| c.terminating).unwrap_or(false);
            let local = endpoint.node_name.as_deref() == Some(node_name);
            // kube-proxy programs the first address of an endpoint.
            let Some(ip) = endpoint.addresses.first().and_then(|ip| ip.parse::<IpAddr>().ok()) else {
                continue;
            };
            if ip.is_ipv4() != family_v4 {
                continue;
            }
            endpoints.push((key.clone(), Endpoint { ip, port: number, ready, serving, terminating, local }));
        }
    }
    endpoints
}

/// The endpoints traffic may go to, as kube-proxy's CategorizeEndpoints picks them: ready ones, or
/// when none is ready, serving terminating ones.
pub fn usable(endpoints: &BTreeSet<Endpoint>, local_only: bool) -> Vec<Endpoint> {
    let candidates = || endpoints.iter().filter(move |endpoint| !local_only || endpoint.local);
    let ready: Vec<Endpoint> = candidates().filter(|endpoint| endpoint.ready).cloned().collect();
    if !ready.is_empty() {
        return ready;
    }
    candidates().filter(|endpoint| endpoint.serving && endpoint.terminating).cloned().collect()
}

/// The endpoints a Service port's cluster traffic (ClusterIP) goes to: every usable endpoint, or the
/// local ones under internalTrafficPolicy Local.
pub fn cluster_endpoints(service: &ServicePortInfo, endpoints: &BTreeSet<Endpoint>) -> Vec<Endpoint> {
    usable(endpoints, service.internal_policy_local)
}

/// The endpoints a Service port's external traffic (node port, external and LB IPs) goes to: the
/// usable local ones under externalTrafficPolicy Local, else as cluster traffic without the internal
/// policy.
pub fn external_endpoints(service: &ServicePortInfo, endpoints: &BTreeSet<Endpoint>) -> Vec<Endpoint> {
    usable(endpoints, service.external_policy_local)
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
