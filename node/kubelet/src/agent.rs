//! The kubelet's node loop (upstream's registerWithAPIServer, syncNodeStatus, the node lease
//! controller and updateRuntimeUp): register the Node, retrying with backoff; then ask the
//! runtime every 5 s, renew the Lease every `lease_duration / 4`, and report the status every
//! `status_update_frequency` when it changed — else at least every `status_report_frequency` —
//! and hand the Node's pod CIDRs to the runtime when they change.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeStatus};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};

use crate::machine::MachineInfo;
use crate::node::{self, NODE_LEASE_NAMESPACE, NodeConfig};
use crate::runtime::{RUNTIME_CHECK_INTERVAL, Runtime, RuntimeState};

/// KubeletConfiguration's timings of the node loop.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    /// nodeStatusUpdateFrequency (10 s).
    pub status_update_frequency: Duration,
    /// nodeStatusReportFrequency (5 min): a status that did not change is reported this often.
    pub status_report_frequency: Duration,
    /// nodeLeaseDurationSeconds (40); the Lease is renewed every quarter of it.
    pub lease_duration_seconds: i32,
}

impl Default for Timings {
    fn default() -> Timings {
        Timings {
            status_update_frequency: Duration::from_secs(10),
            status_report_frequency: Duration::from_secs(300),
            lease_duration_seconds: 40,
        }
    }
}

/// The node side of one kubelet.
#[derive(Debug)]
pub struct Agent {
    nodes: Api<Node>,
    leases: Api<Lease>,
    config: NodeConfig,
    machine: MachineInfo,
    runtime: Runtime,
    state: RuntimeState,
    timings: Timings,
}

fn api_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

impl Agent {
    pub fn new(
        client: kube::Client,
        config: NodeConfig,
        machine: MachineInfo,
        runtime: Runtime,
        timings: Timings,
    ) -> Agent {
        Agent {
            nodes: Api::all(client.clone()),
            leases: Api::namespaced(client, NODE_LEASE_NAMESPACE),
            config,
            machine,
            runtime,
            state: RuntimeState::default(),
            timings,
        }
    }

    fn status(&self, previous: &NodeStatus) -> NodeStatus {
        let conditions = previous.conditions.clone().unwrap_or_default();
        let errors = self.state.errors(Instant::now());
        let runtime = (self.state.version.as_str(), self.state.images.as_slice());
        node::status(&self.config, &self.machine, runtime, &conditions, &errors, Timestamp::now())
    }

    /// Registers the Node (upstream's tryRegisterWithAPIServer): created, or — when one of its
    /// name exists — given back the default labels a kubelet owns if they drifted. Returns it.
    pub async fn register(&mut self) -> Result<Node, kube::Error> {
        if let Err(error) = self.runtime.check(&mut self.state).await {
            tracing::info!(%error, "the container runtime did not answer yet");
        }
        let status = self.status(&NodeStatus::default());
        let wanted = node::initial_node(&self.config, &self.machine, status);
        match self.nodes.create(&PostParams::default(), &wanted).await {
            Ok(created) => {
                tracing::info!(node = %self.config.node_name, "registered the node");
                Ok(created)
            }
            Err(error) if api_code(&error) == Some(409) => {
                let existing = self.nodes.get(&self.config.node_name).await?;
                let labels = wanted.metadata.labels.unwrap_or_default();
                let current = existing.metadata.labels.clone().unwrap_or_default();
                let drifted: std::collections::BTreeMap<&String, &String> = labels
                    .iter()
                    .filter(|(key, value)| {
                        key.contains("kubernetes.io/") && current.get(*key) != Some(*value)
                    })
                    .collect();
                if drifted.is_empty() {
                    return Ok(existing);
                }
                let patch = serde_json::json!({"metadata": {"labels": drifted}});
                self.nodes.patch(&self.config.node_name, &PatchParams::default(), &Patch::Merge(&patch)).await
            }
            Err(error) => Err(error),
        }
    }

    /// Renews (or first creates) the Lease of the node `uid`.
    pub async fn renew_lease(&self, uid: &str) -> Result<(), kube::Error> {
        let name = &self.config.node_name;
        let mut lease = node::lease(name, uid, self.timings.lease_duration_seconds, Timestamp::now());
        match self.leases.get_opt(name).await? {
            None => {
                self.leases.create(&PostParams::default(), &lease).await?;
            }
            Some(current) => {
                lease.metadata.resource_version = current.metadata.resource_version;
                self.leases.replace(name, &PostParams::default(), &lease).await?;
            }
        }
        Ok(())
    }

    /// Reports the status if it changed since `last` or `force`; returns what was reported.
    pub async fn report_status(
        &self,
        last: &NodeStatus,
        force: bool,
    ) -> Result<Option<NodeStatus>, kube::Error> {
        let status = self.status(last);
        if !force && !node::changed(last, &status) {
            return Ok(None);
        }
        let patch = serde_json::json!({"status": status});
        let patched = self
            .nodes
            .patch_status(&self.config.node_name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await?;
        Ok(Some(patched.status.unwrap_or(status)))
    }

    /// Hands the Node's pod CIDRs to the runtime when they changed since `applied` (upstream's
    /// updatePodCIDR, from the Node it reads on each status update).
    pub async fn sync_pod_cidr(&mut self, applied: &mut String) -> Result<(), String> {
        let node = self.nodes.get(&self.config.node_name).await.map_err(|e| e.to_string())?;
        let spec = node.spec.unwrap_or_default();
        let cidrs = match spec.pod_cidrs.filter(|c| !c.is_empty()) {
            Some(cidrs) => cidrs.join(","),
            None => spec.pod_cidr.unwrap_or_default(),
        };
        if cidrs.is_empty() || cidrs == *applied {
            return Ok(());
        }
        self.runtime.update_pod_cidr(&cidrs).await.map_err(|e| format!("failed to update pod CIDR: {e}"))?;
        tracing::info!(original = %applied, new = %cidrs, "updating pod CIDR");
        *applied = cidrs;
        Ok(())
    }

    /// Registers, then heartbeats until the task is dropped. Failures are logged and retried, as
    /// upstream's loops do.
    pub async fn run(mut self) {
        let mut backoff = Duration::from_millis(100);
        let node = loop {
            match self.register().await {
                Ok(node) => break node,
                Err(error) => {
                    tracing::warn!(%error, "unable to register the node; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(7));
                }
            }
        };
        let uid = node.metadata.uid.clone().unwrap_or_default();
        let mut last = node.status.unwrap_or_default();
        let mut reported = Instant::now();
        let quarter = u64::try_from(self.timings.lease_duration_seconds.max(1)).unwrap_or(40) * 250;
        let mut lease = tokio::time::interval(Duration::from_millis(quarter));
        let mut runtime = tokio::time::interval(RUNTIME_CHECK_INTERVAL);
        let mut status = tokio::time::interval(self.timings.status_update_frequency);
        let mut pod_cidr = String::new();
        loop {
            tokio::select! {
                _ = lease.tick() => {
                    if let Err(error) = self.renew_lease(&uid).await {
                        tracing::warn!(%error, "failed to renew the node lease");
                    }
                }
                _ = runtime.tick() => {
                    if let Err(error) = self.runtime.check(&mut self.state).await {
                        tracing::warn!(%error, "container runtime status check failed");
                    }
                }
                _ = status.tick() => {
                    let force = reported.elapsed() >= self.timings.status_report_frequency;
                    match self.report_status(&last, force).await {
                        Ok(Some(now)) => {
                            last = now;
                            reported = Instant::now();
                        }
                        Ok(None) => {}
                        Err(error) => tracing::warn!(%error, "error updating node status, will retry"),
                    }
                    if let Err(error) = self.sync_pod_cidr(&mut pod_cidr).await {
                        tracing::warn!(%error, "the pod CIDR was not handed to the runtime");
                    }
                }
            }
        }
    }
}
