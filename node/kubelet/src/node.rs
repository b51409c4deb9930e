//! The Node object a kubelet registers and the status it reports (upstream's initialNode and
//! setNodeStatus), from its configuration, its machine and its runtime; and the Lease it renews
//! in kube-node-lease. Pure: the agent does the IO.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerImage, DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec,
    NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;

use crate::machine::MachineInfo;
use crate::node_status::{self, Pressure, Reservations};

/// The version a keel-kubelet reports in nodeInfo: the Kubernetes API it implements, with Keel's
/// own in the build metadata (which version comparisons ignore).
pub const KUBELET_VERSION: &str = concat!("v1.34.0+keel-", env!("CARGO_PKG_VERSION"));
/// The namespace of the nodes' Leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// upstream's volumes.kubernetes.io/controller-managed-attach-detach, set as
/// enableControllerAttachDetach (default true) says.
const CONTROLLER_MANAGED_ATTACH: &str = "volumes.kubernetes.io/controller-managed-attach-detach";

/// What the kubelet was told about its node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The Node's name (`--hostname-override`, else the host's name, lowercased).
    pub node_name: String,
    /// The kubernetes.io/hostname label and the Hostname address.
    pub hostname: String,
    /// `--node-ip`: the InternalIP address.
    pub node_ip: Option<IpAddr>,
    /// `--node-labels`.
    pub labels: BTreeMap<String, String>,
    /// `--register-with-taints`.
    pub taints: Vec<Taint>,
    /// `--max-pods` (KubeletConfiguration maxPods, default 110).
    pub max_pods: i64,
    pub reservations: Reservations,
    /// The kubelet API's port (10250), in daemonEndpoints.
    pub port: i32,
    /// nodeStatusMaxImages: the most images the status lists (-1: all).
    pub max_images: i32,
    /// providerID: the Node's spec.providerID (none when empty).
    pub provider_id: String,
}

/// The Node to register: labels, taints, the attach/detach annotation and its first status.
pub fn initial_node(config: &NodeConfig, machine: &MachineInfo, status: NodeStatus) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(config.node_name.clone()),
            labels: Some(node_status::labels(&config.hostname, machine.architecture, &config.labels)),
            annotations: Some(BTreeMap::from([(CONTROLLER_MANAGED_ATTACH.to_owned(), "true".to_owned())])),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            taints: (!config.taints.is_empty()).then(|| config.taints.clone()),
            provider_id: (!config.provider_id.is_empty()).then(|| config.provider_id.clone()),
            ..NodeSpec::default()
        }),
        status: Some(status),
    }
}

/// One moment's status: addresses, capacity and allocatable, conditions (from `previous`, keeping
/// transition times), daemon endpoints and nodeInfo.
pub fn status(
    config: &NodeConfig,
    machine: &MachineInfo,
    (runtime_version, images): (&str, &[ContainerImage]),
    previous: &[NodeCondition],
    not_ready: &[String],
    now: Timestamp,
) -> NodeStatus {
    let capacity = node_status::capacity(machine, config.max_pods);
    let allocatable = node_status::allocatable(&capacity, &config.reservations);
    let mut addresses = Vec::new();
    if let Some(ip) = config.node_ip {
        addresses.push(NodeAddress { type_: "InternalIP".into(), address: ip.to_string() });
    }
    addresses.push(NodeAddress { type_: "Hostname".into(), address: config.hostname.clone() });
    NodeStatus {
        addresses: Some(addresses),
        capacity: Some(node_status::to_api(&capacity)),
        allocatable: Some(node_status::to_api(&allocatable)),
        conditions: Some(node_status::conditions(previous, now, Pressure::default(), not_ready)),
        // Left out when empty, as upstream's omitempty leaves it out.
        images: (!images.is_empty() && config.max_images != 0).then(|| {
            // nodeStatusMaxImages: -1 lists them all.
            let limit = usize::try_from(config.max_images).unwrap_or(usize::MAX);
            images.iter().take(limit).cloned().collect()
        }),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: config.port }),
        }),
        node_info: Some(NodeSystemInfo {
            machine_id: machine.machine_id.clone(),
            system_uuid: machine.system_uuid.clone(),
            boot_id: machine.boot_id.clone(),
            kernel_version: machine.kernel_version.clone(),
            os_image: machine.os_image.clone(),
            container_runtime_version: runtime_version.to_owned(),
            kubelet_version: KUBELET_VERSION.to_owned(),
            operating_system: "linux".into(),
            architecture: machine.architecture.to_owned(),
            ..NodeSystemInfo::default()
        }),
        ..NodeStatus::default()
    }
}

/// Whether a status differs from the last one reported in more than heartbeat times (upstream's
/// nodeStatusHasChanged): what decides an early report.
pub fn changed(old: &NodeStatus, new: &NodeStatus) -> bool {
    let without_heartbeats = |status: &NodeStatus| {
        let mut status = status.clone();
        for condition in status.conditions.iter_mut().flatten() {
            condition.last_heartbeat_time = None;
        }
        status
    };
    without_heartbeats(old) != without_heartbeats(new)
}

/// The node's Lease, renewed at `now`, owned by the Node (`node_uid`), for `duration_seconds`
/// (nodeLeaseDurationSeconds, default 40).
pub fn lease(node_name: &str, node_uid: &str, duration_seconds: i32, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(node_name.to_owned()),
            namespace: Some(NODE_LEASE_NAMESPACE.to_owned()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Node".into(),
                name: node_name.to_owned(),
                uid: node_uid.to_owned(),
                ..OwnerReference::default()
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(node_name.to_owned()),
            lease_duration_seconds: Some(duration_seconds),
            renew_time: Some(MicroTime(now)),
            ..LeaseSpec::default()
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> NodeConfig {
        NodeConfig {
            node_name: "worker-1".into(),
            hostname: "worker-1".into(),
            node_ip: Some("10.0.0.5".parse().unwrap()),
            labels: BTreeMap::from([("topology.kubernetes.io/zone".to_owned(), "a".to_owned())]),
            taints: vec![Taint {
                key: "dedicated".into(),
                value: Some("infra".into()),
                effect: "NoSchedule".into(),
                ..Taint::default()
            }],
            max_pods: 110,
            reservations: Reservations::defaults(),
            port: 10250,
            max_images: 50,
            provider_id: String::new(),
        }
    }

    fn machine() -> MachineInfo {
        MachineInfo {
            cpus: 4,
            memory_bytes: 16 << 30,
            root_fs_bytes: 100 << 30,
            architecture: "amd64",
            boot_id: "b".into(),
            ..MachineInfo::default()
        }
    }

    #[test]
    fn the_registered_node() {
        let now: Timestamp = "2026-12-03T12:00:00Z".parse().unwrap();
        let status = status(&config(), &machine(), ("keel-shim://0.1.0", &[]), &[], &[], now);
        let node = initial_node(&config(), &machine(), status);
        let labels = node.metadata.labels.as_ref().unwrap();
        assert_eq!(labels["kubernetes.io/hostname"], "worker-1");
        assert_eq!(labels["topology.kubernetes.io/zone"], "a");
        assert_eq!(node.metadata.annotations.as_ref().unwrap()[CONTROLLER_MANAGED_ATTACH], "true");
        assert_eq!(node.spec.as_ref().unwrap().taints.as_ref().unwrap()[0].key, "dedicated");
        let status = node.status.unwrap();
        let addresses: Vec<(&str, &str)> =
            status.addresses.iter().flatten().map(|a| (a.type_.as_str(), a.address.as_str())).collect();
        assert_eq!(addresses, [("InternalIP", "10.0.0.5"), ("Hostname", "worker-1")]);
        assert_eq!(status.capacity.as_ref().unwrap()["memory"].0, "16Gi");
        assert_eq!(status.allocatable.as_ref().unwrap()["memory"].0, "16284Mi");
        let info = status.node_info.unwrap();
        assert_eq!(
            (info.container_runtime_version.as_str(), info.kubelet_version.as_str()),
            ("keel-shim://0.1.0", KUBELET_VERSION)
        );
        assert_eq!(status.daemon_endpoints.unwrap().kubelet_endpoint.unwrap().port, 10250);
    }

    #[test]
    fn heartbeats_alone_are_no_change() {
        let start: Timestamp = "2026-12-03T12:00:00Z".parse().unwrap();
        let later: Timestamp = "2026-12-03T12:00:10Z".parse().unwrap();
        let first = status(&config(), &machine(), ("r://1", &[]), &[], &[], start);
        let conditions = first.conditions.clone().unwrap_or_default();
        let second = status(&config(), &machine(), ("r://1", &[]), &conditions, &[], later);
        assert!(!changed(&first, &second));
        let down = status(
            &config(),
            &machine(),
            ("r://1", &[]),
            &conditions,
            &["container runtime is down".into()],
            later,
        );
        assert!(changed(&first, &down));
    }

    #[test]
    fn the_lease_is_owned_by_its_node() {
        let now: Timestamp = "2026-12-03T12:00:00Z".parse().unwrap();
        let lease = lease("worker-1", "uid-1", 40, now);
        assert_eq!(lease.metadata.namespace.as_deref(), Some(NODE_LEASE_NAMESPACE));
        assert_eq!(lease.metadata.owner_references.as_ref().unwrap()[0].uid, "uid-1");
        let spec = lease.spec.unwrap();
        assert_eq!(
            (spec.holder_identity.as_deref(), spec.lease_duration_seconds),
            (Some("worker-1"), Some(40))
        );
    }
}
