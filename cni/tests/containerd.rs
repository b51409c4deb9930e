//! Acceptance: containerd (Debian's 1.6, started inside a testbed host's network namespace only) runs
//! pod sandboxes with keel-cni as its network — installed by `keel-cni install` — and reports the pod
//! IP keel-cni assigned; the pod answers from the node; StopPodSandbox and RemovePodSandbox release
//! the address.

use crate::runner;

use std::io::ErrorKind;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use keel_testbed::containerd::{Containerd, ContainerdOptions, PAUSE_REGISTRY, pause_registry_in};
use keel_testbed::cri::{CriClient, api, pod_sandbox_config};
use runner::{KEEL_CNI, REFERENCE_DIR, allocations};

const POD_CIDR_V4: &str = "10.244.9.0/24";
const POD_CIDR_V6: &str = "fd00:10:244:9::/64";
const NETWORK: &str = "keel";

/// A TCP connect to a closed port of `ip` from inside the node: refused (the pod's kernel answered
/// with a RST), not a timeout (no route, no ARP answer) — the pod is on the node's bridge.
fn answers_from_the_node(node: &keel_testbed::Host, ip: IpAddr) -> Result<()> {
    let outcome =
        node.run(move || TcpStream::connect_timeout(&SocketAddr::new(ip, 1), Duration::from_secs(5)))?;
    match outcome {
        Err(err) if err.kind() == ErrorKind::ConnectionRefused => Ok(()),
        Err(err) => anyhow::bail!("connect to {ip}:1 from the node: {err} (expected a refusal from the pod)"),
        Ok(_) => anyhow::bail!("connect to {ip}:1 succeeded: nothing listens there in the pause container"),
    }
}

fn install(bin_dir: &Path, conf_dir: &Path, data_dir: &Path) -> Result<()> {
    let output = Command::new(KEEL_CNI)
        .arg("install")
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--conf-dir")
        .arg(conf_dir)
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--pod-cidr", &format!("{POD_CIDR_V4},{POD_CIDR_V6}")])
        .args(["--cluster-cidr", "10.244.0.0/16,fd00:10:244::/48", "--network-name", NETWORK])
        .output()
        .context("running keel-cni install")?;
    ensure!(output.status.success(), "keel-cni install: {}", String::from_utf8_lossy(&output.stderr));
    // containerd's CRI brings the pod's loopback up with the loopback plugin, from the same bin dir.
    std::fs::copy(Path::new(REFERENCE_DIR).join("loopback"), bin_dir.join("loopback"))
        .context("copying the loopback plugin")?;
    Ok(())
}

#[test]
fn containerd_runs_pod_sandboxes_on_keel_cni() -> Result<()> {
    keel_testbed::require_root()?;
    let fabric = keel_testbed::Fabric::new()?;
    let node = fabric.add_host("node")?;
    let (_registry, pause) = pause_registry_in(node.fd())?;
    let dir = tempfile::tempdir()?;
    let (bin_dir, conf_dir, data_dir) =
        (dir.path().join("bin"), dir.path().join("net.d"), dir.path().join("ipam"));
    install(&bin_dir, &conf_dir, &data_dir)?;
    let opts = ContainerdOptions {
        cni_bin_dir: bin_dir,
        cni_conf_dir: Some(conf_dir),
        netns: Some(node.fd().clone()),
        sandbox_image: Some(pause),
        plain_http_registries: vec![PAUSE_REGISTRY.to_owned()],
        ..ContainerdOptions::default()
    };
    let containerd = Containerd::start(&opts)?;
    let logs = dir.path().join("logs");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let mut cri = runtime.block_on(CriClient::connect(containerd.socket()))?;

    let mut sandboxes = Vec::new();
    for pod in ["pod-a", "pod-b"] {
        let config = pod_sandbox_config("default", pod, &format!("uid-{pod}"), &logs);
        let id = runtime.block_on(cri.run_pod_sandbox(&config))?;
        let status = runtime.block_on(cri.pod_sandbox_status(&id))?;
        ensure!(status.state() == api::PodSandboxState::SandboxReady, "{pod} is {:?}", status.state());
        let network = status.network.context("PodSandboxStatus has no network")?;
        let ip: IpAddr = network.ip.parse().with_context(|| format!("pod IP {:?}", network.ip))?;
        let additional: Vec<IpAddr> =
            network.additional_ips.iter().filter_map(|extra| extra.ip.parse().ok()).collect();

        // What keel-cni's IPAM holds for this sandbox is what containerd reports.
        let held: Vec<IpAddr> = allocations(&data_dir, NETWORK)
            .into_iter()
            .filter(|(_, owner)| *owner == id)
            .map(|(address, _)| address)
            .collect();
        ensure!(held.len() == 2, "{pod} ({id}) holds {held:?}, expected one IPv4 and one IPv6 address");
        ensure!(held.contains(&ip) && ip.is_ipv4(), "containerd reports {ip}, keel-cni allocated {held:?}");
        ensure!(
            additional.len() == 1 && held.contains(&additional[0]),
            "additional IPs {additional:?}, held {held:?}"
        );
        ensure!(ip.to_string().starts_with("10.244.9."), "{ip} is not from {POD_CIDR_V4}");
        answers_from_the_node(&node, ip)?;
        sandboxes.push((id, ip));
    }
    ensure!(sandboxes[0].1 != sandboxes[1].1, "two pods got one address: {sandboxes:?}");

    for (id, ip) in &sandboxes {
        runtime.block_on(cri.stop_pod_sandbox(id))?;
        runtime.block_on(cri.remove_pod_sandbox(id))?;
        let left: Vec<_> =
            allocations(&data_dir, NETWORK).into_iter().filter(|(_, owner)| owner == id).collect();
        ensure!(
            left.is_empty(),
            "sandbox {id} ({ip}) still holds {left:?} after StopPodSandbox/RemovePodSandbox"
        );
    }
    ensure!(runtime.block_on(cri.list_pod_sandbox_ids())?.is_empty(), "sandboxes left");
    ensure!(
        allocations(&data_dir, NETWORK).is_empty(),
        "allocations left: {:?}",
        allocations(&data_dir, NETWORK)
    );
    Ok(())
}
