//! [`KubeletNode`]: a fabric host made ready for a kubelet — a registry on its loopback holding the
//! pause image and busybox, a CNI config for the reference bridge and host-local plugins — and
//! [`NodeRuntime`], the CRI runtime inside it (keel-shim or containerd 1.6), and
//! [`KubeletNode::start_upstream_kubelet`], the upstream kubelet v1.34 run on it. The kubelet's tests
//! and `cargo xtask bench kubelet` share them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use serde_json::json;

use crate::containerd::{Containerd, ContainerdOptions, PAUSE_REGISTRY, pause_registry_in};
use crate::mount_ns::{MountNs, MountNsFd};
use crate::registry::Registry;
use crate::{Daemon, Fabric, Forwarder, Host, Readiness};

/// The pod subnet of the node's CNI config.
pub const POD_SUBNET: &str = "10.97.0.0/24";

/// The node: see the module docs.
#[derive(Debug)]
pub struct KubeletNode {
    net_d: tempfile::TempDir,
    _ipam: tempfile::TempDir,
    pause: String,
    _registry: Registry,
    host: Host,
    _fabric: Fabric,
}

impl KubeletNode {
    /// A new fabric with one host, `label`, set up as the module docs say.
    pub fn new(label: &str) -> Result<KubeletNode> {
        crate::require_root()?;
        let fabric = Fabric::new()?;
        let host = fabric.add_host(label)?;
        let (registry, pause) = pause_registry_in(host.fd())?;
        let forwarder = Forwarder::start(host.fd(), PAUSE_REGISTRY.parse()?)?;
        let busybox = crate::images::busybox_image()?;
        crate::registry::push_oci_layout_to(
            &forwarder.local_addr().to_string(),
            &busybox.layout,
            &busybox.tag,
            "keel/busybox",
            "1.0",
        )?;
        let ipam = tempfile::Builder::new().prefix("keel-kubelet-ipam-").tempdir()?;
        let net_d = tempfile::Builder::new().prefix("keel-kubelet-netd-").tempdir()?;
        let conflist = json!({
            "cniVersion": "1.0.0", "name": "keel-kubelet-test",
            "plugins": [{"type": "bridge", "bridge": "kbl0", "isGateway": true, "ipMasq": false,
                         "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET}]], "dataDir": ipam.path()}}]
        });
        std::fs::write(net_d.path().join("10-kubelet-test.conflist"), conflist.to_string())?;
        Ok(KubeletNode { net_d, _ipam: ipam, pause, _registry: registry, host, _fabric: fabric })
    }

    /// The fabric host (its network namespace, its address).
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The busybox image in the node's registry.
    pub fn busybox(&self) -> String {
        format!("{PAUSE_REGISTRY}/keel/busybox:1.0")
    }

    /// Starts keel-shim (`binary`) in the node, in `mount_ns` when given (the upstream kubelet's).
    pub fn start_shim(&self, binary: &Path, mount_ns: Option<MountNsFd>) -> Result<NodeRuntime> {
        let dir = tempfile::Builder::new().prefix("keel-kubelet-shim-").tempdir()?;
        let mut cmd = std::process::Command::new(binary);
        cmd.arg("--socket").arg(dir.path().join("cri.sock"));
        cmd.arg("--root").arg(dir.path().join("root"));
        cmd.arg("--cni-conf-dir").arg(self.net_d.path());
        cmd.arg("--cni-bin-dir").arg("/usr/lib/cni");
        cmd.arg("--insecure-registry").arg(PAUSE_REGISTRY);
        if let Some(ns) = mount_ns {
            ns.enter_on_spawn(&mut cmd);
        }
        let ready = Readiness::UnixSocket(dir.path().join("cri.sock"));
        let daemon = self.host.start_daemon("keel-shim", cmd, ready, Duration::from_secs(20))?;
        Ok(NodeRuntime::Shim { daemon: Box::new(daemon), dir })
    }

    /// Starts containerd in the node, in `mount_ns` when given (the upstream kubelet's), its
    /// containers in cgroups.
    pub fn start_containerd(&self, mount_ns: Option<MountNsFd>) -> Result<NodeRuntime> {
        let options = ContainerdOptions {
            cni_conf_dir: Some(self.net_d.path().to_owned()),
            netns: Some(self.host.fd().clone()),
            mount_ns,
            sandbox_image: Some(self.pause.clone()),
            plain_http_registries: vec![PAUSE_REGISTRY.to_owned()],
            // A node enforces its pods' resources (memory limits, OOM kills), as keel-shim does.
            cgroups: true,
            ..ContainerdOptions::default()
        };
        Ok(NodeRuntime::Containerd(Box::new(Containerd::start(&options)?)))
    }
}

/// How the upstream kubelet runs on a [`KubeletNode`].
#[derive(Debug)]
pub struct UpstreamKubelet<'a> {
    /// The Node's name (its kubeconfig's user is `system:node:<name>`).
    pub node_name: &'a str,
    pub kubeconfig: &'a Path,
    pub root_dir: &'a Path,
    /// The runtime's CRI endpoint (`unix://...`).
    pub endpoint: &'a str,
    /// Where the kubelet and its runtime run: see [`crate::mount_ns`].
    pub mount_ns: &'a MountNs,
    /// KubeletConfiguration fields over [`upstream_kubelet_config`]'s (authentication, say).
    pub config: serde_json::Value,
}

/// The KubeletConfiguration this machine needs for the upstream kubelet: no QoS cgroups and no
/// node allocatable enforcement unless the caller asks for them with a cgroupRoot of its own (the
/// default root is the machine's, shared by every test), the cgroupfs driver, swap tolerated, an
/// `oomScoreAdj` of 0 (the machine's root may not lower its own: no CAP_SYS_RESOURCE), no read-only
/// port, no certificate rotation, the cluster DNS keel-kubelet's tests use, and hard eviction
/// thresholds of 1 % of disk (the tests share the machine's disk: with upstream's defaults its
/// eviction manager evicts a scenario's pods once the disk is 85 % full, imagefs.available < 15 %;
/// keel-kubelet has no eviction manager).
pub fn upstream_kubelet_config(endpoint: &str) -> serde_json::Value {
    json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": endpoint,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": false,
        "enforceNodeAllocatable": [],
        "failSwapOn": false,
        "clusterDNS": ["10.96.0.10"],
        "clusterDomain": "cluster.local",
        "resolvConf": "/etc/resolv.conf",
        "oomScoreAdj": 0,
        "readOnlyPort": 0,
        "rotateCertificates": false,
        "serverTLSBootstrap": false,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "nodefs.inodesFree": "1%",
                         "imagefs.available": "1%", "imagefs.inodesFree": "1%"},
    })
}

impl KubeletNode {
    /// Starts the upstream kubelet (`cargo xtask peers`) in the node as `kubelet` says, its config
    /// written to `<root_dir>/../kubelet-config.json`. Its node IP is the host's fabric address
    /// (it refuses a loopback one).
    pub fn start_upstream_kubelet(&self, kubelet: &UpstreamKubelet<'_>) -> Result<Daemon> {
        let binary = crate::peers::path("kubelet")?;
        let mut config = upstream_kubelet_config(kubelet.endpoint);
        if let (Some(config), Some(extra)) = (config.as_object_mut(), kubelet.config.as_object()) {
            config.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let parent = kubelet.root_dir.parent().unwrap_or(kubelet.root_dir);
        let file = parent.join(format!("{}-kubelet-config.json", kubelet.node_name));
        std::fs::write(&file, config.to_string())?;
        let mut command = std::process::Command::new(binary);
        command.arg("--config").arg(&file).arg("--kubeconfig").arg(kubelet.kubeconfig);
        command.arg("--root-dir").arg(kubelet.root_dir);
        command.args(["--hostname-override", kubelet.node_name, "--v=1"]);
        command.arg("--node-ip").arg(self.host.address().to_string());
        kubelet.mount_ns.fd().enter_on_spawn(&mut command);
        self.host.start_daemon("kubelet", command, Readiness::None, Duration::from_secs(10))
    }
}

/// The runtime of a [`KubeletNode`]; drop it before the node.
#[derive(Debug)]
pub enum NodeRuntime {
    Shim { daemon: Box<Daemon>, dir: tempfile::TempDir },
    Containerd(Box<Containerd>),
}

impl NodeRuntime {
    /// The CRI socket.
    pub fn socket(&self) -> PathBuf {
        match self {
            NodeRuntime::Shim { dir, .. } => dir.path().join("cri.sock"),
            NodeRuntime::Containerd(containerd) => containerd.socket().to_owned(),
        }
    }

    /// The runtime's name as its CRI Version reports it.
    pub fn name(&self) -> &'static str {
        match self {
            NodeRuntime::Shim { .. } => "keel-shim",
            NodeRuntime::Containerd(_) => "containerd",
        }
    }

    /// The runtime's process, for its CPU time and memory.
    pub fn pid(&self) -> u32 {
        match self {
            NodeRuntime::Shim { daemon, .. } => daemon.pid(),
            NodeRuntime::Containerd(containerd) => containerd.pid(),
        }
    }
}
