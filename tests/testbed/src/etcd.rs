//! [`EtcdCluster`]: one or more etcd members on 127.0.0.1, each a [`Daemon`] with its own data dir: Debian's
//! etcd 3.4.23 by default, or the current release line `cargo xtask peers` builds ([`EtcdRelease`]).
//!
//! [`EtcdCluster::start`] serves clients over plain HTTP. [`EtcdCluster::start_with`] can also serve them
//! over TLS, with a CA, a server and a client certificate made by the `openssl` CLI in the cluster's
//! directory ([`EtcdTlsFiles`]), optionally requiring client certificates; [`EtcdCluster::enable_auth`]
//! turns on etcd's user authentication. [`EtcdCluster::etcdctl`] always carries the flags they need.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use crate::loopback::{free_ports, http_get};
use crate::process::{Daemon, Readiness, run_tool};

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
    /// Where `GET /health` answers over plain HTTP: the client address, or for a TLS cluster a
    /// separate `--listen-metrics-urls` address.
    pub health: SocketAddr,
}

/// How to start a cluster with [`EtcdCluster::start_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EtcdConfig {
    /// How many members (at least one).
    pub members: usize,
    /// Serve clients over TLS only (`https://` client URLs), with certificates made in the cluster's dir.
    pub client_tls: bool,
    /// Also require clients to present a certificate signed by the cluster's CA (`--client-cert-auth`);
    /// implies `client_tls`.
    pub client_cert_auth: bool,
    /// Which etcd runs the members.
    pub release: EtcdRelease,
}

/// Which etcd a cluster runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EtcdRelease {
    /// Debian's etcd-server package (3.4.23), `etcd` on PATH.
    #[default]
    Debian,
    /// The release line Kubernetes 1.34 ships with ([`crate::peers::ETCD`], 3.6), built by `cargo xtask
    /// peers`.
    Current,
}

impl EtcdRelease {
    /// The etcd binary to run.
    pub fn binary(self) -> Result<PathBuf> {
        match self {
            EtcdRelease::Debian => Ok(PathBuf::from("etcd")),
            EtcdRelease::Current => crate::peers::path("etcd"),
        }
    }

    /// The version, as the peer tables print it.
    pub fn version(self) -> &'static str {
        match self {
            EtcdRelease::Debian => "3.4.23",
            EtcdRelease::Current => crate::peers::ETCD.version.trim_start_matches('v'),
        }
    }
}

impl EtcdConfig {
    /// `members` members serving plain HTTP: what [`EtcdCluster::start`] starts.
    pub fn new(members: usize) -> EtcdConfig {
        EtcdConfig { members, client_tls: false, client_cert_auth: false, release: EtcdRelease::Debian }
    }

    /// Run `release` instead of Debian's etcd.
    pub fn release(mut self, release: EtcdRelease) -> EtcdConfig {
        self.release = release;
        self
    }

    /// Serve clients over TLS.
    pub fn tls(mut self) -> EtcdConfig {
        self.client_tls = true;
        self
    }

    /// Serve clients over TLS and require a client certificate.
    pub fn client_cert_auth(mut self) -> EtcdConfig {
        self.client_tls = true;
        self.client_cert_auth = true;
        self
    }
}

/// The PEM files of a TLS cluster, made by `openssl` in the cluster's directory (removed with it).
#[derive(Debug, Clone)]
pub struct EtcdTlsFiles {
    /// The self-signed CA that signed both certificates below: what a client must trust.
    pub ca_cert: PathBuf,
    /// Every member's certificate, for `127.0.0.1` (IP SAN) and `localhost`.
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// A client certificate with common name `root` (etcd's user name for certificate auth).
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

/// A running etcd cluster; dropping it stops every member and removes the data dirs.
#[derive(Debug)]
pub struct EtcdCluster {
    // Declared before `_dir` so the daemons stop before their data dirs are removed.
    daemons: Vec<Daemon>,
    members: Vec<EtcdMember>,
    tls: Option<EtcdTlsFiles>,
    /// The root password once [`EtcdCluster::enable_auth`] ran.
    root_password: Option<String>,
    _dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts `members` members (at least one) with `--initial-cluster-state new` and a unique cluster
    /// token, and waits until every member's `GET /health` says `{"health":"true"}`.
    pub fn start(members: usize) -> Result<EtcdCluster> {
        EtcdCluster::start_with(EtcdConfig::new(members))
    }

    /// Like [`EtcdCluster::start`], with client TLS as `config` says.
    pub fn start_with(config: EtcdConfig) -> Result<EtcdCluster> {
        let members = config.members;
        if members == 0 {
            bail!("an etcd cluster needs at least one member");
        }
        let mut attempt = 1;
        loop {
            match EtcdCluster::try_start(config) {
                Err(error)
                    if attempt < PORT_RETRIES && format!("{error:#}").contains("address already in use") =>
                {
                    attempt += 1;
                }
                result => {
                    let tls = if config.client_tls { " TLS" } else { "" };
                    return result.with_context(|| format!("starting a {members}-member{tls} etcd cluster"));
                }
            }
        }
    }

    fn try_start(config: EtcdConfig) -> Result<EtcdCluster> {
        static CLUSTERS: AtomicU32 = AtomicU32::new(0);
        let count = config.members;
        let tls_on = config.client_tls || config.client_cert_auth;
        let dir =
            tempfile::Builder::new().prefix("keel-etcd-").tempdir().context("creating etcd data dirs")?;
        let nanos =
            SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or_default();
        let token =
            format!("keel-{}-{}-{nanos}", std::process::id(), CLUSTERS.fetch_add(1, Ordering::Relaxed));
        let binary = config.release.binary()?;
        let tls = if tls_on { Some(make_certificates(&dir.path().join("tls"))?) } else { None };
        // Client and peer ports, and for TLS a plain-HTTP metrics port that answers /health.
        let per_member = if tls_on { 3 } else { 2 };
        let ports = free_ports(per_member * count)?;
        let members: Vec<EtcdMember> = ports
            .chunks(per_member)
            .enumerate()
            .map(|(i, ports)| {
                let client = SocketAddr::from((Ipv4Addr::LOCALHOST, ports[0]));
                EtcdMember {
                    name: format!("m{i}"),
                    client,
                    peer: SocketAddr::from((Ipv4Addr::LOCALHOST, ports[1])),
                    data_dir: dir.path().join(format!("m{i}")),
                    health: ports
                        .get(2)
                        .map_or(client, |&port| SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
                }
            })
            .collect();
        let initial_cluster =
            members.iter().map(|m| format!("{}=http://{}", m.name, m.peer)).collect::<Vec<_>>().join(",");
        let mut daemons = Vec::with_capacity(count);
        for member in &members {
            let mut cmd = etcd_command(&binary, member, &initial_cluster, &token, tls.is_some());
            if let Some(tls) = &tls {
                cmd.arg(format!("--cert-file={}", path_str(&tls.server_cert)))
                    .arg(format!("--key-file={}", path_str(&tls.server_key)))
                    .arg(format!("--listen-metrics-urls=http://{}", member.health));
                if config.client_cert_auth {
                    // etcd 3.4 requires client certificates whenever it is given a trusted CA.
                    cmd.arg(format!("--trusted-ca-file={}", path_str(&tls.ca_cert)))
                        .arg("--client-cert-auth");
                }
            }
            let ready = Readiness::Http { addr: member.health, path: "/health".into() };
            let daemon = Daemon::spawn(&format!("etcd-{}", member.name), cmd, ready, START_TIMEOUT)?;
            daemons.push(daemon);
        }
        // Members only turn healthy once a quorum runs, so all are spawned before any is waited for.
        for (daemon, member) in daemons.iter_mut().zip(&members) {
            daemon.wait_ready()?;
            wait_health_true(member.health, START_TIMEOUT)
                .with_context(|| format!("waiting for etcd member {} to be healthy", member.name))?;
        }
        Ok(EtcdCluster { daemons, members, tls, root_password: None, _dir: dir })
    }

    /// How many members the cluster has.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false: a cluster has at least one member.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// `http://127.0.0.1:PORT` (`https://` for a TLS cluster) for each member, in member order.
    pub fn client_urls(&self) -> Vec<String> {
        self.members.iter().map(|m| format!("{}://{}", self.scheme(), m.client)).collect()
    }

    /// The client URL of member `i`.
    pub fn endpoint(&self, i: usize) -> Result<String> {
        Ok(format!("{}://{}", self.scheme(), self.info(i)?.client))
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// The certificates of a TLS cluster; `None` when it serves plain HTTP.
    pub fn tls(&self) -> Option<&EtcdTlsFiles> {
        self.tls.as_ref()
    }

    /// Turns on etcd's authentication with a `root` user of this password (`etcdctl user add`,
    /// `etcdctl auth enable`); [`EtcdCluster::etcdctl`] then logs in as root.
    pub fn enable_auth(&mut self, root_password: &str) -> Result<()> {
        if self.root_password.is_some() {
            bail!("etcd authentication is already enabled");
        }
        if root_password.is_empty() || root_password.contains(char::is_whitespace) {
            bail!("the etcd root password must be non-empty and without whitespace");
        }
        // The root role is granted here rather than left to `auth enable`, whose own
        // add-role-and-retry loop runs inside one command timeout and ran out of it on a loaded
        // machine ("root user does not have root role", then "context deadline exceeded").
        let steps: [(&[&str], &str); 4] = [
            (&["user", "add", &format!("root:{root_password}")], "adding etcd user root"),
            (&["role", "add", "root"], "adding etcd role root"),
            (&["user", "grant-role", "root", "root"], "granting etcd role root to root"),
            (&["auth", "enable"], "enabling etcd authentication"),
        ];
        for (args, what) in steps {
            let mut command = self.etcdctl();
            command.arg("--command-timeout=30s").args(args);
            run_etcdctl(command).context(what)?;
        }
        self.root_password = Some(root_password.to_owned());
        Ok(())
    }

    /// Names, addresses and data dir of member `i`.
    pub fn info(&self, i: usize) -> Result<&EtcdMember> {
        self.members.get(i).with_context(|| format!("etcd member {i} of {}", self.members.len()))
    }

    /// The pid of member `i`'s etcd process.
    pub fn pid(&self, i: usize) -> Result<u32> {
        self.daemons.get(i).map(Daemon::pid).with_context(|| format!("no etcd member {i}"))
    }

    /// The daemon of member `i`, to kill and restart it (a restart keeps its data dir and ports).
    pub fn member(&mut self, i: usize) -> Result<&mut Daemon> {
        let count = self.daemons.len();
        self.daemons.get_mut(i).with_context(|| format!("etcd member {i} of {count}"))
    }

    /// Whether member `i` answers `GET /health` with `"health":"true"`.
    pub fn healthy(&self, i: usize) -> Result<bool> {
        let response = http_get(self.info(i)?.health, "/health", Duration::from_secs(2))?;
        Ok(response.status == 200 && response.body.replace(' ', "").contains(r#""health":"true""#))
    }

    /// `etcdctl` (API v3) with `--endpoints` set to every member, ready for arguments; for a TLS
    /// cluster with the CA and the client certificate, once authentication is on as root.
    pub fn etcdctl(&self) -> Command {
        let mut cmd = etcdctl(&self.client_urls().join(","));
        if let Some(tls) = &self.tls {
            cmd.arg(format!("--cacert={}", path_str(&tls.ca_cert)))
                .arg(format!("--cert={}", path_str(&tls.client_cert)))
                .arg(format!("--key={}", path_str(&tls.client_key)));
        }
        if let Some(password) = &self.root_password {
            cmd.arg(format!("--user=root:{password}"));
        }
        cmd
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

fn etcd_command(
    binary: &Path,
    member: &EtcdMember,
    initial_cluster: &str,
    token: &str,
    tls: bool,
) -> Command {
    let scheme = if tls { "https" } else { "http" };
    let client = format!("{scheme}://{}", member.client);
    let peer = format!("http://{}", member.peer);
    let mut cmd = Command::new(binary);
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

fn run_etcdctl(mut cmd: Command) -> Result<String> {
    let output = cmd.output().with_context(|| format!("running {cmd:?} (is etcdctl installed?)"))?;
    if !output.status.success() {
        bail!("{cmd:?} exited with {}: {}", output.status, String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Makes a CA, a server certificate for 127.0.0.1 and localhost, and a client certificate for user
/// `root`, all P-256 and valid for a day, with the `openssl` CLI in `dir`.
fn make_certificates(dir: &Path) -> Result<EtcdTlsFiles> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let file = |name: &str| dir.join(name);
    let files = EtcdTlsFiles {
        ca_cert: file("ca.crt"),
        server_cert: file("server.crt"),
        server_key: file("server.key"),
        client_cert: file("client.crt"),
        client_key: file("client.key"),
    };
    let ca_key = path_str(&file("ca.key"));
    let ca_cert = path_str(&files.ca_cert);
    let openssl = |args: &[&str]| run_tool("openssl", args).map(drop);
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let mut args = vec!["req", "-x509"];
    args.extend(ec);
    args.extend([
        "-keyout",
        &ca_key,
        "-out",
        &ca_cert,
        "-days",
        "1",
        "-subj",
        "/CN=keel-testbed etcd CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(&args).context("making the etcd test CA")?;
    let leaves = [
        ("server", "etcd", &files.server_cert, &files.server_key, "serverAuth,clientAuth", true),
        ("client", "root", &files.client_cert, &files.client_key, "clientAuth", false),
    ];
    for (role, common_name, cert, key, usage, san) in leaves {
        let csr = path_str(&file(&format!("{role}.csr")));
        let ext_path = file(&format!("{role}.ext"));
        let mut ext = format!(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n\
             extendedKeyUsage={usage}\n"
        );
        if san {
            ext.push_str("subjectAltName=IP:127.0.0.1,DNS:localhost\n");
        }
        std::fs::write(&ext_path, ext).with_context(|| format!("writing {}", ext_path.display()))?;
        let (key, cert, ext_path) = (path_str(key), path_str(cert), path_str(&ext_path));
        let subject = format!("/CN={common_name}");
        let mut args = vec!["req"];
        args.extend(ec);
        args.extend(["-keyout", &key, "-out", &csr, "-subj", &subject]);
        openssl(&args).with_context(|| format!("making the etcd test {role} key"))?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_cert,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &cert,
            "-days",
            "1",
            "-extfile",
            &ext_path,
        ])
        .with_context(|| format!("signing the etcd test {role} certificate"))?;
    }
    Ok(files)
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
