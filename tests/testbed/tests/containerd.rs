//! Tests of the containerd fixture.

use crate::common;

use std::time::Instant;

use anyhow::Result;
use common::assert_gone;
use keel_testbed::containerd::{Containerd, ContainerdOptions};

#[test]
fn starts_with_cri_ok_and_stops_clean() -> Result<()> {
    let started = Instant::now();
    let mut containerd = Containerd::start(&ContainerdOptions::default())?;
    eprintln!("containerd ready in {:?}", started.elapsed());
    containerd.check_cri()?;
    let pid = containerd.daemon().pid();
    let socket = containerd.socket().to_owned();
    assert!(socket.exists());
    drop(containerd);
    assert_gone(pid, "containerd");
    assert!(!socket.exists(), "the socket dir was not removed");
    Ok(())
}

#[test]
fn runs_inside_a_test_host() -> Result<()> {
    keel_testbed::require_root()?;
    let fabric = keel_testbed::Fabric::new()?;
    let node = fabric.add_host("node1")?;
    let opts = ContainerdOptions { netns: Some(node.fd().clone()), ..ContainerdOptions::default() };
    let mut containerd = Containerd::start(&opts)?;
    containerd.check_cri()?;
    let pid = containerd.daemon().pid();
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net"))?;
    let node_ns = node.run(|| std::fs::read_link("/proc/thread-self/ns/net"))??;
    assert_eq!(theirs, node_ns, "containerd does not run in the host's network namespace");
    drop(containerd);
    assert_gone(pid, "containerd");
    Ok(())
}

/// The CRI client, the pause image from a plain-HTTP registry on the node's loopback, and containerd's
/// CRI running a pod sandbox with the reference bridge plugin: the whole path keel-cni's containerd
/// test takes, with the peer's plugin.
#[test]
fn runs_a_pod_sandbox_with_the_pause_image_and_the_reference_bridge() -> Result<()> {
    use keel_testbed::containerd::{PAUSE_REGISTRY, pause_registry_in};
    use keel_testbed::cri::{CriClient, api, pod_sandbox_config};

    keel_testbed::require_root()?;
    let fabric = keel_testbed::Fabric::new()?;
    let node = fabric.add_host("node1")?;
    let (_registry, pause) = pause_registry_in(node.fd())?;
    let dir = tempfile::tempdir()?;
    let conf_dir = dir.path().join("net.d");
    std::fs::create_dir(&conf_dir)?;
    let conflist = serde_json::json!({
        "cniVersion": "1.0.0", "name": "ref",
        "plugins": [{"type": "bridge", "bridge": "cni0", "isGateway": true,
                     "ipam": {"type": "host-local", "subnet": "10.88.0.0/24",
                              "dataDir": dir.path().join("ipam")}}],
    });
    std::fs::write(conf_dir.join("10-ref.conflist"), conflist.to_string())?;
    let opts = ContainerdOptions {
        netns: Some(node.fd().clone()),
        cni_conf_dir: Some(conf_dir),
        sandbox_image: Some(pause),
        plain_http_registries: vec![PAUSE_REGISTRY.to_owned()],
        ..ContainerdOptions::default()
    };
    let containerd = Containerd::start(&opts)?;
    let logs = dir.path().join("logs");
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let mut cri = CriClient::connect(containerd.socket()).await?;
        let config = pod_sandbox_config("default", "pod1", "uid-pod1", &logs);
        let id = cri.run_pod_sandbox(&config).await?;
        let status = cri.pod_sandbox_status(&id).await?;
        assert_eq!(status.state(), api::PodSandboxState::SandboxReady);
        let ip = status.network.map(|network| network.ip).unwrap_or_default();
        assert!(ip.starts_with("10.88.0."), "pod IP {ip:?}");
        cri.stop_pod_sandbox(&id).await?;
        cri.remove_pod_sandbox(&id).await?;
        assert!(cri.list_pod_sandbox_ids().await?.is_empty());
        anyhow::Ok(())
    })?;
    Ok(())
}
