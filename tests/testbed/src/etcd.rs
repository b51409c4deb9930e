//! [`EtcdCluster`]: one or more etcd 3.4 members on 127.0.0.1, each a [`Daemon`] with its own data dir.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use crate::loopback::{free_ports, http_get};
use crate::process::{Daemon, Readiness};

/// How long a member may take to report healthy (a 3-member cluster must also elect a leader).
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How many times a cluster start is retried when a picked port was taken meanwhile.
const PORT_RETRIES: usize = 3;

/// Addresses and directories of one member; they stay the same across restarts.
#[derive(Debug, Clone)]
pub struct EtcdMember {
    pub name: String,
    pub client: SocketAddr,
    pub peer: SocketAddr,
    pub data_dir: PathBuf,
}

/// A running etcd cluster; dropping it stops every member and removes the data dirs.
#[derive(Debug)]
pub struct EtcdCluster {
    // Declared before `_dir` so the daemons stop before their data dirs are removed.
    daemons: Vec<Daemon>,
    members: Vec<EtcdMember>,
    _dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `members` members (at least one) with `--initial-cluster-state new` and a unique cluster
    /// token, and waits until every member's `GET /health` says `{"health":"true"}`.
    pub fn start(members: usize) -> Result<EtcdCluster> {
        if members == 0 {
            bail!("an etcd cluster needs at least one member");
        }
        let mut attempt = 1;
        loop {
            match EtcdCluster::try_start(members) {
                Err(error)
                    if attempt < PORT_RETRIES && format!("{error:#}").contains("address already in use") =>
                {
                    attempt += 1;
                }
                result => {
                    return result.with_context(|| format!("starting a {members}-member etcd cluster"));
                }
            }
        }
    }

    fn try_start(count: usize) -> Result<EtcdCluster> {
        static CLUSTERS: AtomicU32 = AtomicU32::new(0);
        let dir =
            tempfile::Builder::new().prefix("keel-etcd-").tempdir().context("creating etcd data dirs")?;
        let nanos =
            SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or_default();
        let token =
            format!("keel-{}-{}-{nanos}", std::process::id(), CLUSTERS.fetch_add(1, Ordering::Relaxed));
        let ports = free_ports(2 * count)?;
        let members: Vec<EtcdMember> = ports
            .chunks(2)
            .enumerate()
            .map(|(i, pair)| EtcdMember {
                name: format!("m{i}"),
                client: SocketAddr::from((Ipv4Addr::LOCALHOST, pair[0])),
                peer: SocketAddr::from((Ipv4Addr::LOCALHOST, pair[1])),
                data_dir: dir.path().join(format!("m{i}")),
            })
            .collect();
        let initial_cluster =
            members.iter().map(|m| format!("{}=http://{}", m.name, m.peer)).collect::<Vec<_>>().join(",");
        let mut daemons = Vec::with_capacity(count);
        for member in &members {
            let cmd = etcd_command(member, &initial_cluster, &token);
            let ready = Readiness::Http { addr: member.client, path: "/health".into() };
            let daemon = Daemon::spawn(&format!("etcd-{}", member.name), cmd, ready, START_TIMEOUT)?;
            daemons.push(daemon);
        }
        // Members only turn healthy once a quorum runs, so all are spawned before any is waited for.
        for (daemon, member) in daemons.iter_mut().zip(&members) {
            daemon.wait_ready()?;
            wait_health_true(member.client, START_TIMEOUT)
                .with_context(|| format!("waiting for etcd member {} to be healthy", member.name))?;
        }
        Ok(EtcdCluster { daemons, members, _dir: dir })
    }

    /// How many members the cluster has.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: a cluster has at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// `http://127.0.0.1:PORT` for each member, in member order.
    pub fn client_urls(&self) -> Vec<String> {
        self.members.iter().map(|m| format!("http://{}", m.client)).collect()
    }

    /// The client URL of member `i`.
    pub fn endpoint(&self, i: usize) -> Result<String> {
        Ok(format!("http://{}", self.info(i)?.client))
    }

    /// Names, addresses and data dir of member `i`.
    pub fn info(&self, i: usize) -> Result<&EtcdMember> {
        self.members.get(i).with_context(|| format!("etcd member {i} of {}", self.members.len()))
    }

    /// The daemon of member `i`, to kill and restart it (a restart keeps its data dir and ports).
    pub fn member(&mut self, i: usize) -> Result<&mut Daemon> {
        let count = self.daemons.len();
        self.daemons.get_mut(i).with_context(|| format!("etcd member {i} of {count}"))
    }

    /// Whether member `i` answers `GET /health` with `"health":"true"`.
    pub fn healthy(&self, i: usize) -> Result<bool> {
        let response = http_get(self.info(i)?.client, "/health", Duration::from_secs(2))?;
        Ok(response.status == 200 && response.body.replace(' ', "").contains(r#""health":"true""#))
    }

    /// `etcdctl` (API v3) with `--endpoints` set to every member, ready for arguments.
    pub fn etcdctl(&self) -> Command {
        etcdctl(&self.client_urls().join(","))
    }
}

impl Drop for EtcdCluster {
    /// SIGKILLs every member at once: the data is thrown away, and a graceful stop of a cluster (leader
    /// transfer, members losing quorum one by one) took ~7 s here instead of milliseconds.
    fn drop(&mut self) {
        for daemon in &mut self.daemons {
            daemon.kill();
        }
    }
}

/// `etcdctl` (API v3) with `--endpoints` set, ready for arguments.
pub fn etcdctl(endpoints: &str) -> Command {
    let mut cmd = Command::new("etcdctl");
    cmd.env("ETCDCTL_API", "3").arg(format!("--endpoints={endpoints}")).arg("--dial-timeout=3s");
    cmd
}

fn etcd_command(member: &EtcdMember, initial_cluster: &str, token: &str) -> Command {
    let client = format!("http://{}", member.client);
    let peer = format!("http://{}", member.peer);
    let mut cmd = Command::new("etcd");
    cmd.arg(format!("--name={}", member.name))
        .arg(format!("--data-dir={}", path_str(&member.data_dir)))
        .arg(format!("--listen-client-urls={client}"))
        .arg(format!("--advertise-client-urls={client}"))
        .arg(format!("--listen-peer-urls={peer}"))
        .arg(format!("--initial-advertise-peer-urls={peer}"))
        .arg(format!("--initial-cluster={initial_cluster}"))
        .arg("--initial-cluster-state=new")
        .arg(format!("--initial-cluster-token={token}"))
        .args(["--logger=zap", "--log-outputs=stderr"]);
    cmd
}

fn path_str(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

fn wait_health_true(addr: SocketAddr, timeout: Duration) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match http_get(addr, "/health", Duration::from_secs(2)) {
            Ok(response) if response.body.replace(' ', "").contains(r#""health":"true""#) => return Ok(()),
            Ok(response) => format!("{} {}", response.status, response.body.trim()),
            Err(error) => format!("{error:#}"),
        };
        if Instant::now() >= deadline {
            bail!("GET http://{addr}/health did not say healthy within {timeout:?}; last answer: {last}");
        }
        sleep(Duration::from_millis(20));
    }
}
