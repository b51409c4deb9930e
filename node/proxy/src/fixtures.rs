//! Synthetic API objects for the unit tests (and the golden render tests).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ClientIPConfig, LoadBalancerIngress, LoadBalancerStatus, Service, ServicePort, ServiceSpec,
    ServiceStatus, SessionAffinityConfig,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::model::SERVICE_NAME_LABEL;

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
