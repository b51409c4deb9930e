//! A pod as the runtime holds it (upstream's kubecontainer.PodStatus): its sandboxes and its
//! containers, newest first, read from CRI by the labels the kubelet put on them. Pure: built
//! from CRI messages the IO edge fetched.

use std::collections::HashMap;

use k8s_cri::v1 as cri;

/// The labels the kubelet puts on what it creates (upstream's kubetypes), by which it finds them.
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";
/// The annotation holding the hash of the container's spec (a changed spec restarts it).
pub const CONTAINER_HASH_ANNOTATION: &str = "io.kubernetes.container.hash";
pub const RESTART_COUNT_ANNOTATION: &str = "io.kubernetes.container.restartCount";
pub const TERMINATION_GRACE_ANNOTATION: &str = "io.kubernetes.pod.terminationGracePeriod";

/// One sandbox of the pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub id: String,
    pub attempt: u32,
    pub ready: bool,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
    /// The pod's IPs, the primary first; empty for host-network pods.
    pub ips: Vec<String>,
    /// The sandbox's network namespace is the node's.
    pub host_network: bool,
}

/// A container's state (CRI's ContainerState).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Created,
    Running,
    Exited,
    Unknown,
}

/// One container of the pod, any attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub id: String,
    pub name: String,
    pub attempt: u32,
    pub state: State,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    /// The image as the spec named it, and the runtime's reference to what it ran.
    pub image: String,
    pub image_ref: String,
    /// [`CONTAINER_HASH_ANNOTATION`] as it was created.
    pub hash: String,
    pub restart_count: i32,
}

/// The pod as the runtime holds it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodRuntime {
    /// Newest first.
    pub sandboxes: Vec<Sandbox>,
    /// Newest first.
    pub containers: Vec<Container>,
}

impl PodRuntime {
    /// From the CRI statuses of a pod's sandboxes and containers, in any order.
    pub fn new(sandboxes: Vec<cri::PodSandboxStatus>, containers: Vec<cri::ContainerStatus>) -> PodRuntime {
        let mut sandboxes: Vec<Sandbox> = sandboxes.into_iter().map(sandbox).collect();
        sandboxes.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.attempt.cmp(&a.attempt)));
        let mut containers: Vec<Container> = containers.into_iter().map(container).collect();
        containers.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.attempt.cmp(&a.attempt)));
        PodRuntime { sandboxes, containers }
    }

    /// The newest container named `name` (upstream's FindContainerStatusByName).
    pub fn container(&self, name: &str) -> Option<&Container> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// The containers that run or may run.
    pub fn running(&self) -> impl Iterator<Item = &Container> {
        self.containers.iter().filter(|c| matches!(c.state, State::Running | State::Unknown))
    }

    /// The IPs of the newest sandbox.
    pub fn ips(&self) -> &[String] {
        self.sandboxes.first().map(|s| s.ips.as_slice()).unwrap_or_default()
    }
}

fn sandbox(status: cri::PodSandboxStatus) -> Sandbox {
    let mut ips = Vec::new();
    if let Some(network) = &status.network {
        if !network.ip.is_empty() {
            ips.push(network.ip.clone());
        }
        ips.extend(network.additional_ips.iter().map(|ip| ip.ip.clone()).filter(|ip| !ip.is_empty()));
    }
    let host_network = status
        .linux
        .as_ref()
        .and_then(|l| l.namespaces.as_ref())
        .and_then(|n| n.options.as_ref())
        .is_some_and(|o| o.network == cri::NamespaceMode::Node as i32);
    Sandbox {
        attempt: status.metadata.as_ref().map_or(0, |m| m.attempt),
        ready: status.state == cri::PodSandboxState::SandboxReady as i32,
        created_at: status.created_at,
        ips,
        host_network,
        id: status.id,
    }
}

fn container(status: cri::ContainerStatus) -> Container {
    let state = match cri::ContainerState::try_from(status.state) {
        Ok(cri::ContainerState::ContainerCreated) => State::Created,
        Ok(cri::ContainerState::ContainerRunning) => State::Running,
        Ok(cri::ContainerState::ContainerExited) => State::Exited,
        _ => State::Unknown,
    };
    let annotation = |annotations: &HashMap<String, String>, key: &str| annotations.get(key).cloned();
    let restart_count = annotation(&status.annotations, RESTART_COUNT_ANNOTATION)
        .and_then(|count| count.parse().ok())
        .unwrap_or(0);
    Container {
        name: status
            .labels
            .get(CONTAINER_NAME_LABEL)
            .cloned()
            .or_else(|| status.metadata.as_ref().map(|m| m.name.clone()))
            .unwrap_or_default(),
        attempt: status.metadata.as_ref().map_or(0, |m| m.attempt),
        state,
        created_at: status.created_at,
        started_at: status.started_at,
        finished_at: status.finished_at,
        exit_code: status.exit_code,
        reason: status.reason,
        message: status.message,
        image: status
            .image
            .as_ref()
            .map(|i| {
                if i.user_specified_image.is_empty() {
                    i.image.clone()
                } else {
                    i.user_specified_image.clone()
                }
            })
            .unwrap_or_default(),
        image_ref: status.image_ref,
        hash: annotation(&status.annotations, CONTAINER_HASH_ANNOTATION).unwrap_or_default(),
        restart_count,
        id: status.id,
    }
}
