//! The CRI conformance suite ([`cri_suite`]) against keel-shim and against Debian's containerd 1.6
//! (the reference): the runtime info group with a valid, an empty and a broken-first CNI conf dir, and
//! every other group ([`cri_suite::run_all`]) on a node — a testbed host whose network namespace the
//! runtime runs in, with the reference CNI plugins (bridge, host-local, portmap, loopback) and a
//! registry on the node's loopback holding keel-testbed's images.

mod cri_suite;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use cri_suite::{CriClient, Env, KnownDifference, check, runtime_info};
use keel_testbed::containerd::{Containerd, ContainerdOptions, PAUSE_REGISTRY, pause_registry_in};
use keel_testbed::registry::Registry;
use keel_testbed::{Daemon, Fabric, Forwarder, Host, NetNs, Readiness, unique_prefix};

/// Where containerd 1.6 answers otherwise than the suite asserts, and why.
const CONTAINERD_DIFFERENCES: &[KnownDifference] = &[KnownDifference {
    case: "runtime config: cgroup driver",
    reason: "containerd 1.6 predates the RuntimeConfig RPC (CRI v1 of Kubernetes 1.28): it answers \
             Unimplemented, and kubelet falls back to its own --cgroup-driver",
}];

/// Where containerd 1.6 answers otherwise than [`cri_suite::run_all`] asserts, and why.
const CONTAINERD_SUITE_DIFFERENCES: &[KnownDifference] = &[
    KnownDifference {
        case: "pulling an invalid image reference: InvalidArgument",
        reason: "containerd 1.6 returns the reference parser's error unwrapped (\"failed to parse image \
                 reference ...: invalid reference format\"), which gRPC carries as Unknown",
    },
    KnownDifference {
        case: "creating a container of an invalid image reference: InvalidArgument",
        reason: "containerd 1.6 looks the image up among its local images without parsing the reference \
                 first, and answers NotFound (\"failed to resolve image ...: not found\")",
    },
    KnownDifference {
        case: "listing images",
        reason: "containerd 1.6's ListImages ignores the filter and lists every image (a TODO in its CRI \
                 plugin: kubelet never sends one)",
    },
];

/// The pod network of the suite's node: the reference bridge with host-local (its state in `data_dir`)
/// and portmap.
fn suite_conflist(data_dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0", "name": "keel-suite",
        "plugins": [
            {"type": "bridge", "bridge": "suite0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": SUITE_SUBNET}]], "dataDir": data_dir}},
            {"type": "portmap", "capabilities": {"portMappings": true}},
        ]
    })
    .to_string()
}

const SUITE_SUBNET: &str = "10.99.0.0/24";
const SUITE_GATEWAY: &str = "10.99.0.1";

/// A node for [`cri_suite::run_all`]: a host on a fabric, a registry on its loopback (at
/// [`PAUSE_REGISTRY`]) holding the pause image, busybox and busybox again under the image group's name,
/// a CNI conf dir and the suite's scratch directory. Start the runtime inside `node`, drop it first.
#[derive(Debug)]
pub struct SuiteNode {
    pub env: Env,
    pub pause: String,
    pub net_d: tempfile::TempDir,
    pub scratch: tempfile::TempDir,
    _registry: Registry,
    pub node: Host,
    _fabric: Fabric,
}

impl SuiteNode {
    pub fn new() -> Result<SuiteNode> {
        keel_testbed::require_root()?;
        let fabric = Fabric::new()?;
        let node = fabric.add_host("node")?;
        let (registry, pause) = pause_registry_in(node.fd())?;
        let forwarder = Forwarder::start(node.fd(), PAUSE_REGISTRY.parse()?)?;
        let pushed = forwarder.local_addr().to_string();
        let busybox = keel_testbed::images::busybox_image()?;
        for (repo, tag) in [("keel/busybox", "latest"), ("keel/image-suite", "v1")] {
            keel_testbed::registry::push_oci_layout_to(&pushed, &busybox.layout, &busybox.tag, repo, tag)?;
        }
        let inspected = keel_testbed::registry::skopeo(&[
            "inspect",
            "--tls-verify=false",
            "--format",
            "{{.Digest}}",
            &format!("docker://{pushed}/keel/image-suite:v1"),
        ])?;
        let digest = inspected.trim();
        anyhow::ensure!(digest.starts_with("sha256:"), "skopeo inspect answered the digest {digest:?}");
        let scratch = tempfile::Builder::new().prefix("keel-suite-").tempdir()?;
        let net_d = tempfile::Builder::new().prefix("keel-suite-netd-").tempdir()?;
        std::fs::create_dir(scratch.path().join("ipam"))?;
        std::fs::write(
            net_d.path().join("10-keel-suite.conflist"),
            suite_conflist(&scratch.path().join("ipam")),
        )?;
        let env = Env {
            image: format!("{PAUSE_REGISTRY}/keel/busybox:latest"),
            scratch_image: format!("{PAUSE_REGISTRY}/keel/image-suite:v1"),
            scratch_image_by_digest: format!("{PAUSE_REGISTRY}/keel/image-suite@{digest}"),
            missing_image: format!("{PAUSE_REGISTRY}/keel/missing:v1"),
            node: Some(node.fd().clone()),
            pod_subnet: SUITE_SUBNET.parse()?,
            ipam_dir: Some(scratch.path().join("ipam").join("keel-suite")),
            host_ip: SUITE_GATEWAY.parse()?,
            scratch: scratch.path().to_owned(),
        };
        Ok(SuiteNode { env, pause, net_d, scratch, _registry: registry, node, _fabric: fabric })
    }
}

/// A bridge network config, loadable by libcni (never executed here: no pod is run).
const CONFLIST: &str = r#"{"cniVersion":"1.0.0","name":"keel-suite","plugins":[
  {"type":"bridge","bridge":"keel-suite0","isGateway":true,"ipMasq":false,
   "ipam":{"type":"host-local","ranges":[[{"subnet":"10.99.0.0/24"}]]}},
  {"type":"portmap","capabilities":{"portMappings":true}}]}"#;

/// The CNI conf dirs the runtime info group runs with.
#[derive(Debug, Clone, Copy)]
enum NetD {
    /// [`CONFLIST`] alone.
    Valid,
    /// Nothing.
    Empty,
    /// A conflist without `plugins` sorted before [`CONFLIST`].
    BrokenFirst,
}

impl NetD {
    fn make(self) -> Result<tempfile::TempDir> {
        let dir = tempfile::Builder::new().prefix("keel-shim-netd-").tempdir()?;
        if matches!(self, NetD::Valid | NetD::BrokenFirst) {
            std::fs::write(dir.path().join("10-keel-suite.conflist"), CONFLIST)?;
        }
        if matches!(self, NetD::BrokenFirst) {
            std::fs::write(
                dir.path().join("05-broken.conflist"),
                r#"{"cniVersion":"1.0.0","name":"broken"}"#,
            )?;
        }
        Ok(dir)
    }

    fn env(self) -> runtime_info::Env {
        runtime_info::Env { network_configured: matches!(self, NetD::Valid) }
    }
}

/// A keel-shim daemon on a socket in a temp dir, ready once its socket accepts.
#[derive(Debug)]
pub struct Shim {
    pub daemon: Daemon,
    pub dir: tempfile::TempDir,
}

impl Shim {
    pub fn start(cni_conf_dir: &Path) -> Result<Shim> {
        Shim::start_in(None, cni_conf_dir, &[])
    }

    /// keel-shim inside the network namespace of `node` (the machine's own when `None`), pulling from
    /// `insecure` registries over plain HTTP.
    pub fn start_in(node: Option<&Host>, cni_conf_dir: &Path, insecure: &[&str]) -> Result<Shim> {
        let dir = tempfile::Builder::new().prefix("keel-shim-").tempdir()?;
        let socket = dir.path().join("cri.sock");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_keel-shim"));
        cmd.arg("--socket").arg(&socket);
        cmd.arg("--root").arg(dir.path().join("root"));
        cmd.arg("--cni-conf-dir").arg(cni_conf_dir);
        cmd.arg("--cni-bin-dir").arg("/usr/lib/cni");
        for registry in insecure {
            cmd.arg("--insecure-registry").arg(registry);
        }
        let ready = Readiness::UnixSocket(socket);
        let timeout = Duration::from_secs(20);
        let daemon = match node {
            Some(node) => node.start_daemon("keel-shim", cmd, ready, timeout)?,
            None => Daemon::start("keel-shim", cmd, ready, timeout)?,
        };
        Ok(Shim { daemon, dir })
    }

    pub fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("cri.sock")
    }
}

fn runtime_info_against_keel_shim(net: NetD) -> Result<()> {
    let net_d = net.make()?;
    let shim = Shim::start(net_d.path())?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let results = rt.block_on(async {
        let mut client = CriClient::connect(&shim.socket()).await?;
        anyhow::Ok(runtime_info::run(&mut client, net.env()).await)
    })?;
    check("keel-shim", &results, &[])
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("keel-shim log:\n{}", shim.daemon.log_tail(30)))
}

fn runtime_info_against_containerd(net: NetD) -> Result<()> {
    let net_d = net.make()?;
    // containerd runs in a namespace of its own: nothing of it reaches the machine's network.
    let netns = NetNs::create(&unique_prefix())?;
    let opts = ContainerdOptions {
        cni_conf_dir: Some(net_d.path().to_owned()),
        netns: Some(netns.fd().clone()),
        ..ContainerdOptions::default()
    };
    let mut containerd = Containerd::start(&opts)?;
    containerd.check_cri()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let results = rt.block_on(async {
        let mut client = CriClient::connect(containerd.socket()).await?;
        anyhow::Ok(runtime_info::run(&mut client, net.env()).await)
    })?;
    check("containerd", &results, CONTAINERD_DIFFERENCES)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("containerd log:\n{}", containerd.daemon().log_tail(30)))
}

#[test]
fn keel_shim_runtime_info_with_a_network() -> Result<()> {
    runtime_info_against_keel_shim(NetD::Valid)
}

#[test]
fn keel_shim_runtime_info_without_a_network() -> Result<()> {
    runtime_info_against_keel_shim(NetD::Empty)
}

#[test]
fn keel_shim_runtime_info_with_a_broken_first_network_config() -> Result<()> {
    runtime_info_against_keel_shim(NetD::BrokenFirst)
}

#[test]
fn containerd_runtime_info_with_a_network() -> Result<()> {
    runtime_info_against_containerd(NetD::Valid)
}

#[test]
fn containerd_runtime_info_without_a_network() -> Result<()> {
    runtime_info_against_containerd(NetD::Empty)
}

#[test]
fn containerd_runtime_info_with_a_broken_first_network_config() -> Result<()> {
    runtime_info_against_containerd(NetD::BrokenFirst)
}

/// Where keel-shim answers otherwise than [`cri_suite::run_all`] asserts, and why (none is meant to stay).
const KEEL_SHIM_SUITE_DIFFERENCES: &[KnownDifference] = &[];

#[test]
fn keel_shim_suite() -> Result<()> {
    let bed = SuiteNode::new()?;
    let shim = Shim::start_in(Some(&bed.node), bed.net_d.path(), &[PAUSE_REGISTRY])?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let results = rt.block_on(async {
        let mut client = CriClient::connect(&shim.socket()).await?;
        anyhow::Ok(cri_suite::run_all(&mut client, &bed.env).await)
    })?;
    check("keel-shim", &results, KEEL_SHIM_SUITE_DIFFERENCES)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("keel-shim log:\n{}", shim.daemon.log_tail(40)))
}

#[test]
fn containerd_suite() -> Result<()> {
    let bed = SuiteNode::new()?;
    let opts = ContainerdOptions {
        cni_conf_dir: Some(bed.net_d.path().to_owned()),
        netns: Some(bed.node.fd().clone()),
        sandbox_image: Some(bed.pause.clone()),
        plain_http_registries: vec![PAUSE_REGISTRY.to_owned()],
        ..ContainerdOptions::default()
    };
    let mut containerd = Containerd::start(&opts)?;
    containerd.check_cri()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let results = rt.block_on(async {
        let mut client = CriClient::connect(containerd.socket()).await?;
        anyhow::Ok(cri_suite::run_all(&mut client, &bed.env).await)
    })?;
    check("containerd", &results, CONTAINERD_SUITE_DIFFERENCES)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("containerd log:\n{}", containerd.daemon().log_tail(40)))
}
