//! keel-kubelet's node loop against a real API server, both ways: keel-apiserver (in process, on
//! its embedded store) and kube-apiserver 1.34 (the upstream peer), each as `system:node:n1` in
//! `system:nodes` with a client certificate from the cluster's CA — so the Node authorizer and
//! NodeRestriction decide every write. The kubelet registers n1, renews its Lease and reports its
//! status; the Node each server stores must be the same once the fields a server assigns (uid,
//! resourceVersion, times) are set aside. No runtime answers on the CRI socket given, so Ready
//! is False with upstream's message.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use keel_kubelet::agent::{Agent, Timings};
use keel_kubelet::machine::MachineInfo;
use keel_kubelet::node::NodeConfig;
use keel_kubelet::runtime::Runtime;
use keel_testbed::kube_apiserver::{self, KubeApiServer, KubeApiServerOptions};

use crate::support::{client, keel};
use kube::Api;
use serde_json::Value;

fn config() -> NodeConfig {
    NodeConfig {
        labels: BTreeMap::from([("topology.kubernetes.io/zone".to_owned(), "zone-a".to_owned())]),
        taints: keel_kubelet::cli::taints("dedicated=infra:NoSchedule")
            .map_err(anyhow::Error::msg)
            .expect("taints"),
        ..crate::support::n1_config()
    }
}

/// Runs the kubelet as n1 on `client` until n1 is Ready-reported and its Lease renewed twice;
/// returns the Node as stored (server-assigned fields set aside) and the Lease.
async fn run_kubelet(node_client: kube::Client, machine: &MachineInfo) -> Result<(Value, Lease)> {
    let timings = Timings {
        status_update_frequency: Duration::from_millis(500),
        status_report_frequency: Duration::from_secs(300),
        lease_duration_seconds: 4,
    };
    let missing = tempfile::tempdir()?;
    let runtime = Runtime::new(&format!("unix://{}", missing.path().join("no-runtime.sock").display()));
    let agent = Agent::new(node_client.clone(), config(), machine.clone(), runtime, timings);
    let running = tokio::spawn(agent.run());
    let nodes: Api<Node> = Api::all(node_client.clone());
    let leases: Api<Lease> = Api::namespaced(node_client, "kube-node-lease");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut renewals = Vec::new();
    let lease = loop {
        ensure!(Instant::now() < deadline, "the lease of n1 was not renewed twice: {renewals:?}");
        if let Some(lease) = leases.get_opt("n1").await? {
            let renewed = lease.spec.as_ref().and_then(|s| s.renew_time.clone());
            if renewals.last() != Some(&renewed) {
                renewals.push(renewed);
            }
            if renewals.len() >= 3 {
                break lease;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let node = nodes.get("n1").await?;
    running.abort();
    let mut node = serde_json::to_value(node)?;
    let metadata = node["metadata"].as_object_mut().context("metadata")?;
    for assigned in ["uid", "resourceVersion", "creationTimestamp", "managedFields"] {
        metadata.remove(assigned);
    }
    for condition in node["status"]["conditions"].as_array_mut().into_iter().flatten() {
        let condition = condition.as_object_mut().context("a condition")?;
        condition.remove("lastHeartbeatTime");
        condition.remove("lastTransitionTime");
    }
    Ok((node, lease))
}

#[tokio::test]
async fn registers_and_heartbeats_on_keel_and_kube_apiserver() -> Result<()> {
    let machine = MachineInfo::read(std::path::Path::new("/"))?;
    let keel = keel().await?;
    let keel_n1 = kube_apiserver::client_cert_signed_by(
        &keel.pki.ca_pem,
        &keel.pki.ca_key_pem,
        "system:node:n1",
        &["system:nodes"],
    )?;
    let on_keel = run_kubelet(
        client(&kube_apiserver::kubeconfig_for(&keel.url, &keel.pki.ca_pem, &keel_n1)).await?,
        &machine,
    )
    .await?;

    let options = KubeApiServerOptions::new().arg("--enable-admission-plugins=NodeRestriction");
    let upstream = tokio::task::spawn_blocking(move || KubeApiServer::start_with(&options)).await??;
    let upstream_n1 = upstream.client_cert("system:node:n1", &["system:nodes"])?;
    let on_kube = run_kubelet(client(&upstream.kubeconfig(&upstream_n1)).await?, &machine).await?;

    for (server, (node, lease)) in [("keel-apiserver", &on_keel), ("kube-apiserver", &on_kube)] {
        ensure!(node["metadata"]["labels"]["kubernetes.io/hostname"] == "n1", "{server}: {node}");
        ensure!(node["spec"]["taints"][0]["key"] == "dedicated", "{server}: {node}");
        let ready =
            node["status"]["conditions"].as_array().and_then(|c| c.last()).cloned().unwrap_or_default();
        ensure!(
            ready["type"] == "Ready"
                && ready["status"] == "False"
                && ready["reason"] == "KubeletNotReady"
                && ready["message"] == "container runtime status check may not have completed yet",
            "{server}: {ready}"
        );
        ensure!(node["status"]["capacity"]["pods"] == "110", "{server}: {node}");
        let owner = &lease.metadata.owner_references.as_ref().context("the lease's owner")?[0];
        ensure!(owner.kind == "Node" && owner.name == "n1", "{server}: {owner:?}");
    }
    ensure!(
        on_keel.0 == on_kube.0,
        "the Node differs:\nkeel-apiserver {}\nkube-apiserver {}",
        on_keel.0,
        on_kube.0
    );
    Ok(())
}
