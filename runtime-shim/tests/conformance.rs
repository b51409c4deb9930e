//! The CRI conformance suite ([`cri_suite`]) against keel-shim and against Debian's containerd 1.6
//! (the reference): the runtime info group with a valid, an empty and a broken-first CNI conf dir, and
//! every other group ([`cri_suite::run_all`]) on a node — a testbed host whose network namespace the
//! runtime runs in, with the reference CNI plugins (bridge, host-local, portmap, loopback) and a
//! registry on the node's loopback holding keel-testbed's images.

use crate::cri_suite;

use anyhow::{Context, Result};
use cri_suite::node::{Shim, SuiteNode};
use cri_suite::{CriClient, KnownDifference, check, runtime_info};
use keel_testbed::containerd::{Containerd, ContainerdOptions, PAUSE_REGISTRY};
use keel_testbed::{NetNs, unique_prefix};

/// Where containerd 1.6 answers otherwise than the suite asserts, and why.
const CONTAINERD_DIFFERENCES: &[KnownDifference] = &[
    KnownDifference {
        case: "runtime config: cgroup driver",
        reason: "containerd 1.6 predates the RuntimeConfig RPC (CRI v1 of Kubernetes 1.28): it answers \
                 Unimplemented, and kubelet falls back to its own --cgroup-driver",
    },
    KnownDifference {
        case: "status: runtime handlers and features",
        reason: "containerd 1.6 predates StatusResponse.runtime_handlers and features (CRI v1 of \
                 Kubernetes 1.30 and 1.31): it lists no handler and advertises no feature, so the \
                 kubelet and critest use neither recursive read-only mounts nor SupplementalGroupsPolicy",
    },
];

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
