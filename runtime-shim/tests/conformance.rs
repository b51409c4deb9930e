//! The CRI conformance suite ([`cri_suite`]) against keel-shim and against Debian's containerd 1.6
//! (the reference), each with a valid and with an empty CNI conf dir.

mod cri_suite;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};
use cri_suite::{CriClient, KnownDifference, check, runtime_info};
use keel_testbed::containerd::{Containerd, ContainerdOptions};
use keel_testbed::{Daemon, NetNs, Readiness, unique_prefix};

/// Where containerd 1.6 answers otherwise than the suite asserts, and why.
const CONTAINERD_DIFFERENCES: &[KnownDifference] = &[KnownDifference {
    case: "runtime config: cgroup driver",
    reason: "containerd 1.6 predates the RuntimeConfig RPC (CRI v1 of Kubernetes 1.28): it answers \
             Unimplemented, and kubelet falls back to its own --cgroup-driver",
}];

/// A bridge network config, loadable by libcni (never executed here: no pod is run).
const CONFLIST: &str = r#"{"cniVersion":"1.0.0","name":"keel-suite","plugins":[
  {"type":"bridge","bridge":"keel-suite0","isGateway":true,"ipMasq":false,
   "ipam":{"type":"host-local","ranges":[[{"subnet":"10.99.0.0/24"}]]}},
  {"type":"portmap","capabilities":{"portMappings":true}}]}"#;

/// A CNI conf dir: with [`CONFLIST`] when `configured`, else empty.
fn conf_dir(configured: bool) -> Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix("keel-shim-netd-").tempdir()?;
    if configured {
        std::fs::write(dir.path().join("10-keel-suite.conflist"), CONFLIST)?;
    }
    Ok(dir)
}

/// A keel-shim daemon on a socket in a temp dir, ready once its socket accepts.
#[derive(Debug)]
pub struct Shim {
    pub daemon: Daemon,
    pub dir: tempfile::TempDir,
}

impl Shim {
    pub fn start(cni_conf_dir: &Path) -> Result<Shim> {
        let dir = tempfile::Builder::new().prefix("keel-shim-").tempdir()?;
        let socket = dir.path().join("cri.sock");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_keel-shim"));
        cmd.arg("--socket").arg(&socket);
        cmd.arg("--root").arg(dir.path().join("root"));
        cmd.arg("--cni-conf-dir").arg(cni_conf_dir);
        cmd.arg("--cni-bin-dir").arg("/usr/lib/cni");
        let daemon = Daemon::start("keel-shim", cmd, Readiness::UnixSocket(socket), Duration::from_secs(20))?;
        Ok(Shim { daemon, dir })
    }

    pub fn socket(&self) -> std::path::PathBuf {
        self.dir.path().join("cri.sock")
    }
}

fn runtime_info_against_keel_shim(network_configured: bool) -> Result<()> {
    let net_d = conf_dir(network_configured)?;
    let shim = Shim::start(net_d.path())?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let results = rt.block_on(async {
        let mut client = CriClient::connect(&shim.socket()).await?;
        anyhow::Ok(runtime_info::run(&mut client, runtime_info::Env { network_configured }).await)
    })?;
    check("keel-shim", &results, &[])
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("keel-shim log:\n{}", shim.daemon.log_tail(30)))
}

fn runtime_info_against_containerd(network_configured: bool) -> Result<()> {
    let net_d = conf_dir(network_configured)?;
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
        anyhow::Ok(runtime_info::run(&mut client, runtime_info::Env { network_configured }).await)
    })?;
    check("containerd", &results, CONTAINERD_DIFFERENCES)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("containerd log:\n{}", containerd.daemon().log_tail(30)))
}

#[test]
fn keel_shim_runtime_info_with_a_network() -> Result<()> {
    runtime_info_against_keel_shim(true)
}

#[test]
fn keel_shim_runtime_info_without_a_network() -> Result<()> {
    runtime_info_against_keel_shim(false)
}

#[test]
fn containerd_runtime_info_with_a_network() -> Result<()> {
    runtime_info_against_containerd(true)
}

#[test]
fn containerd_runtime_info_without_a_network() -> Result<()> {
    runtime_info_against_containerd(false)
}
