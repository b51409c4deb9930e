//! [`Registry`]: a Distribution 2.8 `docker-registry` on 127.0.0.1 with filesystem storage, without auth
//! or (`start_with_htpasswd`) with HTTP basic auth.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::loopback::free_local_addr;
use crate::netns::NetNsFd;
use crate::process::{Daemon, Readiness};

const START_TIMEOUT: Duration = Duration::from_secs(20);
const PORT_RETRIES: usize = 3;

/// A running registry; dropping it stops the daemon and removes its storage.
#[derive(Debug)]
pub struct Registry {
    // Declared before `_dir` so the daemon stops before its storage is removed.
    daemon: Daemon,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Registry {
    /// Starts a registry on 127.0.0.1 with a free port (retried if the port is taken meanwhile).
    pub fn start() -> Result<Registry> {
        let mut attempt = 1;
        loop {
            let addr = free_local_addr()?;
            match Registry::start_at(addr) {
                Err(error)
                    if attempt < PORT_RETRIES && format!("{error:#}").contains("address already in use") =>
                {
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    /// Starts a registry on 127.0.0.1 with a free port whose clients must log in with HTTP basic auth
    /// as a user of the htpasswd file `htpasswd` (bcrypt hashes), over plain HTTP.
    pub fn start_with_htpasswd(htpasswd: &Path) -> Result<Registry> {
        let addr = free_local_addr()?;
        Registry::start_config(None, addr, Some(htpasswd))
    }

    /// Starts a registry listening on `addr` (e.g. a fixed port for a long-running dev cluster), and waits
    /// until `GET /v2/` answers 200.
    pub fn start_at(addr: SocketAddr) -> Result<Registry> {
        Registry::start_in(None, addr)
    }

    /// Starts a registry inside the network namespace `ns` (the machine's own when `None`), listening on
    /// `addr` there.
    pub fn start_in(ns: Option<&NetNsFd>, addr: SocketAddr) -> Result<Registry> {
        Registry::start_config(ns, addr, None)
    }

    fn start_config(ns: Option<&NetNsFd>, addr: SocketAddr, htpasswd: Option<&Path>) -> Result<Registry> {
        let dir =
            tempfile::Builder::new().prefix("keel-registry-").tempdir().context("creating registry dir")?;
        let storage = dir.path().join("storage");
        std::fs::create_dir(&storage).with_context(|| format!("creating {}", storage.display()))?;
        let config = dir.path().join("config.yml");
        let mut yaml = config_yaml(&storage, addr);
        if let Some(htpasswd) = htpasswd {
            let path = serde_json::Value::String(htpasswd.to_string_lossy().into_owned());
            yaml.push_str(&format!("auth:\n  htpasswd:\n    realm: keel-testbed\n    path: {path}\n"));
        }
        std::fs::write(&config, yaml)
            .with_context(|| format!("writing registry config {}", config.display()))?;
        let mut cmd = Command::new("docker-registry");
        cmd.arg("serve").arg(&config);
        // With auth, `GET /v2/` answers 401 until a client logs in: a TCP connect is the probe.
        let mut ready = if htpasswd.is_some() {
            Readiness::Tcp(addr)
        } else {
            Readiness::Http { addr, path: "/v2/".into() }
        };
        if let Some(ns) = ns {
            ns.enter_on_spawn(&mut cmd);
            ready = Readiness::InNetNs(ns.clone(), Box::new(ready));
        }
        let daemon = Daemon::start(&format!("registry-{}", addr.port()), cmd, ready, START_TIMEOUT)
            .with_context(|| format!("starting docker-registry on {addr}"))?;
        Ok(Registry { daemon, addr, _dir: dir })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `127.0.0.1:PORT`, the host part of image references in this registry.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// The pid of the registry process.
    pub fn pid(&self) -> u32 {
        self.daemon.pid()
    }

    /// The registry's daemon (its log, or to kill it).
    pub fn daemon(&mut self) -> &mut Daemon {
        &mut self.daemon
    }

    /// Copies image `tag_in_layout` of the OCI layout at `layout_dir` to `repo:tag` in this registry with
    /// skopeo and returns the reference `127.0.0.1:PORT/repo:tag`.
    pub fn push_oci_layout(
        &self,
        layout_dir: &Path,
        tag_in_layout: &str,
        repo: &str,
        tag: &str,
    ) -> Result<String> {
        push_oci_layout_to(&self.host(), layout_dir, tag_in_layout, repo, tag)
    }
}

/// Copies image `tag_in_layout` of the OCI layout at `layout_dir` to `repo:tag` in the registry at
/// `host` (`ADDR:PORT`, plain HTTP) and returns the reference `host/repo:tag`. For a registry inside a
/// test host, `host` is the address of a forwarder to it.
pub fn push_oci_layout_to(
    host: &str,
    layout_dir: &Path,
    tag_in_layout: &str,
    repo: &str,
    tag: &str,
) -> Result<String> {
    let reference = format!("{host}/{repo}:{tag}");
    let source = format!("oci:{}:{tag_in_layout}", layout_dir.display());
    let dest = format!("docker://{reference}");
    skopeo(&["copy", "--dest-tls-verify=false", &source, &dest])
        .with_context(|| format!("pushing {source} to {reference}"))?;
    Ok(reference)
}

/// Runs `skopeo --insecure-policy ARGS` (no policy.json needed) and returns its stdout.
pub fn skopeo(args: &[&str]) -> Result<String> {
    let mut full = vec!["--insecure-policy"];
    full.extend_from_slice(args);
    crate::process::run_tool("skopeo", &full)
}

fn config_yaml(storage: &Path, addr: SocketAddr) -> String {
    // JSON strings are valid YAML scalars, which quotes any path safely.
    let storage = serde_json::Value::String(storage.to_string_lossy().into_owned());
    format!(
        "version: 0.1\n\
         log:\n  level: info\n  accesslog:\n    disabled: true\n\
         storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n\
         http:\n  addr: \"{addr}\"\n  secret: keel-testbed\n"
    )
}
