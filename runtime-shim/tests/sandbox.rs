//! Pod sandboxes end to end (root): keel-shim runs inside a testbed node's network namespace (only
//! that namespace entered) with the reference bridge + host-local (+ portmap) plugins, or keel-cni; pods
//! get an IP the node reaches, their hostname, hosts and resolv.conf files, a pause process only for a
//! shared PID namespace; Stop and Remove are idempotent, Remove leaves nothing behind (no mount, file,
//! process or IP allocation), a failing CNI plugin leaves nothing either, and sandboxes survive a
//! keel-shim restart.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use keel_shim::sandbox::check::{leftovers, namespace_holders, namespace_inodes};
use keel_testbed::cri::{CriClient, api, pod_sandbox_config};
use keel_testbed::{Daemon, Fabric, Host, NetNsFd, Readiness};
use serde_json::{Value, json};
use tonic::Code;

const BIN: &str = env!("CARGO_BIN_EXE_keel-shim");
const REFERENCE_DIR: &str = "/usr/lib/cni";
const NETWORK: &str = "pods";
const SUBNET: &str = "10.88.0.0/16";

/// keel-cni, built by `cargo build -p keel-cni` next to keel-shim.
fn keel_cni() -> Result<PathBuf> {
    let path = Path::new(BIN).with_file_name("keel-cni");
    ensure!(path.is_file(), "{} is missing: run `cargo build -p keel-cni` first", path.display());
    Ok(path)
}

/// A node running keel-shim, its directories, and a CRI client.
struct Node {
    // Dropped in this order: the client, keel-shim (and what it forked), the mounts, the host.
    runtime: tokio::runtime::Runtime,
    /// `None` only while keel-shim restarts (an open connection would hold its shutdown up).
    cri: Option<CriClient>,
    shim: Daemon,
    _mounts: MountGuard,
    dir: tempfile::TempDir,
    host: Host,
    _fabric: Fabric,
}

/// Unmounts whatever is left mounted under a test directory (a failed test), so it can be removed.
struct MountGuard(PathBuf);

impl Drop for MountGuard {
    fn drop(&mut self) {
        let prefix = self.0.to_string_lossy().into_owned();
        let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else { return };
        for point in mountinfo.lines().filter_map(|l| l.split(' ').nth(4)) {
            if point.starts_with(&prefix) {
                let _ = nix::mount::umount2(point, nix::mount::MntFlags::MNT_DETACH);
            }
        }
    }
}

/// Which CNI network the node's conf dir holds.
#[derive(Debug, Clone, Copy)]
enum Net {
    /// bridge + host-local, then portmap.
    Reference,
    /// bridge + host-local, then a plugin that fails ADD with a CNI error.
    Failing,
    /// keel-cni, as `keel-cni install` sets it up.
    KeelCni,
}

const FAILING_PLUGIN: &str = r#"#!/bin/sh
cat >/dev/null
if [ "$CNI_COMMAND" = ADD ]; then
  echo '{"cniVersion":"1.0.0","code":100,"msg":"refused by the test","details":"on purpose"}'
  exit 1
fi
exit 0
"#;

impl Node {
    fn start(net: Net) -> Result<Node> {
        keel_testbed::require_root()?;
        let fabric = Fabric::new()?;
        let host = fabric.add_host("node")?;
        let dir = tempfile::tempdir()?;
        let mounts = MountGuard(dir.path().to_owned());
        let (bin, conf) = (dir.path().join("bin"), dir.path().join("net.d"));
        std::fs::create_dir_all(&bin)?;
        std::fs::create_dir_all(&conf)?;
        for plugin in ["bridge", "host-local", "portmap", "loopback"] {
            std::fs::copy(Path::new(REFERENCE_DIR).join(plugin), bin.join(plugin))?;
        }
        let ipam = json!({"type": "host-local", "ranges": [[{"subnet": SUBNET}]],
            "dataDir": dir.path().join("ipam"), "routes": [{"dst": "0.0.0.0/0"}]});
        let bridge =
            json!({"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "ipam": ipam});
        match net {
            Net::Reference | Net::Failing => {
                let last = if matches!(net, Net::Reference) {
                    json!({"type": "portmap", "capabilities": {"portMappings": true}})
                } else {
                    let fail = bin.join("fail");
                    std::fs::write(&fail, FAILING_PLUGIN)?;
                    std::fs::set_permissions(&fail, std::fs::Permissions::from_mode(0o755))?;
                    json!({"type": "fail"})
                };
                let list = json!({"cniVersion": "1.0.0", "name": NETWORK, "plugins": [bridge, last]});
                std::fs::write(conf.join("10-pods.conflist"), list.to_string())?;
            }
            Net::KeelCni => {
                let output = Command::new(keel_cni()?)
                    .arg("install")
                    .arg("--bin-dir")
                    .arg(&bin)
                    .arg("--conf-dir")
                    .arg(&conf)
                    .arg("--data-dir")
                    .arg(dir.path().join("ipam"))
                    .args([
                        "--pod-cidr",
                        "10.89.0.0/24",
                        "--cluster-cidr",
                        "10.89.0.0/16",
                        "--network-name",
                        NETWORK,
                    ])
                    .output()
                    .context("running keel-cni install")?;
                ensure!(
                    output.status.success(),
                    "keel-cni install: {}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
        }
        let socket = dir.path().join("cri.sock");
        let mut cmd = Command::new(BIN);
        cmd.arg("--socket").arg(&socket).arg("--root").arg(dir.path().join("root"));
        cmd.arg("--cni-conf-dir").arg(&conf).arg("--cni-bin-dir").arg(&bin);
        cmd.env("RUST_LOG", "info");
        let shim = host.start_daemon(
            "keel-shim",
            cmd,
            Readiness::UnixSocket(socket.clone()),
            Duration::from_secs(20),
        )?;
        // Not a current-thread runtime: the connection's tasks must run (and close) between calls too.
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
        let cri = runtime.block_on(CriClient::connect(&socket))?;
        Ok(Node { runtime, cri: Some(cri), shim, _mounts: mounts, dir, host, _fabric: fabric })
    }

    /// A handle on the CRI connection (a clone shares the connection).
    fn client(&self) -> Result<CriClient, tonic::Status> {
        self.cri.clone().ok_or_else(|| tonic::Status::unavailable("no CRI connection"))
    }

    /// Restarts keel-shim (SIGTERM; whatever it forked is killed by the testbed) and reconnects.
    fn restart(&mut self) -> Result<()> {
        self.cri = None;
        self.shim.restart()?;
        self.cri = Some(self.runtime.block_on(CriClient::connect(&self.dir.path().join("cri.sock")))?);
        Ok(())
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.root().join("sandboxes").join(id)
    }

    /// The IP allocations host-local / keel-cni hold (files named by address in the data dir).
    fn allocations(&self) -> BTreeMap<IpAddr, String> {
        let Ok(entries) = std::fs::read_dir(self.dir.path().join("ipam").join(NETWORK)) else {
            return BTreeMap::new();
        };
        entries
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let address: IpAddr = entry.file_name().to_str()?.parse().ok()?;
                let owner = std::fs::read_to_string(entry.path()).ok()?;
                Some((address, owner.lines().next().unwrap_or_default().trim().to_owned()))
            })
            .collect()
    }

    fn run(&mut self, config: &api::PodSandboxConfig, handler: &str) -> Result<String, tonic::Status> {
        let request =
            api::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: handler.to_owned() };
        let response = self.runtime.block_on(self.client()?.runtime.run_pod_sandbox(request))?;
        Ok(response.into_inner().pod_sandbox_id)
    }

    fn status(&mut self, id: &str, verbose: bool) -> Result<api::PodSandboxStatusResponse, tonic::Status> {
        let request = api::PodSandboxStatusRequest { pod_sandbox_id: id.to_owned(), verbose };
        Ok(self.runtime.block_on(self.client()?.runtime.pod_sandbox_status(request))?.into_inner())
    }

    fn stop(&mut self, id: &str) -> Result<(), tonic::Status> {
        let request = api::StopPodSandboxRequest { pod_sandbox_id: id.to_owned() };
        self.runtime.block_on(self.client()?.runtime.stop_pod_sandbox(request)).map(drop)
    }

    fn remove(&mut self, id: &str) -> Result<(), tonic::Status> {
        let request = api::RemovePodSandboxRequest { pod_sandbox_id: id.to_owned() };
        self.runtime.block_on(self.client()?.runtime.remove_pod_sandbox(request)).map(drop)
    }

    fn list(&mut self, filter: Option<api::PodSandboxFilter>) -> Result<Vec<String>> {
        let request = api::ListPodSandboxRequest { filter };
        let items =
            self.runtime.block_on(self.client()?.runtime.list_pod_sandbox(request))?.into_inner().items;
        let mut ids: Vec<String> = items.into_iter().map(|s| s.id).collect();
        ids.sort();
        Ok(ids)
    }

    /// The pause process of `id` from the verbose status (pid, start time), if it has one.
    fn pause_of(&mut self, id: &str) -> Result<Option<(i32, u64)>> {
        let info = self.status(id, true)?.info;
        let doc: Value = serde_json::from_str(info.get("info").context("no verbose info")?)?;
        let pid = i32::try_from(doc["pid"].as_i64().unwrap_or_default())?;
        if pid == 0 {
            return Ok(None);
        }
        let start =
            keel_testbed::process_start_time(u32::try_from(pid)?).context("the pause process is gone")?;
        Ok(Some((pid, start)))
    }

    /// Removes `id` and checks nothing of it is left: no mount, directory or pause process, no IP
    /// allocation, and it is no longer listed.
    fn remove_and_check(&mut self, id: &str) -> Result<()> {
        let pause = self.pause_of(id)?;
        // Held open through the check: a freed namespace's inode number is soon reused by another
        // test's namespace, which would read as a process left in this pod's.
        let ns = self.root().join("sandboxes").join(id).join("ns");
        let _held: Vec<std::fs::File> =
            ["net", "ipc", "uts"].iter().filter_map(|kind| std::fs::File::open(ns.join(kind)).ok()).collect();
        let inodes = namespace_inodes(&self.root(), id);
        self.remove(id)?;
        let left = leftovers(&self.root(), id, pause);
        ensure!(left.is_empty(), "sandbox {id} left {left:?}");
        let holders = namespace_holders(&inodes);
        ensure!(holders.is_empty(), "processes are still in the namespaces of {id}: {holders:?}");
        let held: Vec<_> = self.allocations().into_iter().filter(|(_, owner)| owner == id).collect();
        ensure!(held.is_empty(), "sandbox {id} still holds {held:?}");
        ensure!(!self.list(None)?.contains(&id.to_owned()), "sandbox {id} is still listed");
        Ok(())
    }
}

/// A plain pod as the kubelet sends it (no shared PID namespace).
fn pod(name: &str) -> api::PodSandboxConfig {
    let mut config = pod_sandbox_config("default", name, &format!("uid-{name}"), Path::new("/tmp"));
    set_namespaces(&mut config, api::NamespaceMode::Pod, api::NamespaceMode::Container);
    config
}

fn set_namespaces(config: &mut api::PodSandboxConfig, network: api::NamespaceMode, pid: api::NamespaceMode) {
    if let Some(options) = config
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .and_then(|s| s.namespace_options.as_mut())
    {
        options.network = network.into();
        options.pid = pid.into();
    }
}

fn pod_ip(status: &api::PodSandboxStatus) -> Result<IpAddr> {
    let ip = status.network.as_ref().map(|n| n.ip.clone()).unwrap_or_default();
    ip.parse().with_context(|| format!("pod IP {ip:?}"))
}

/// A TCP exchange from the node to a listener the test opens inside the pod's network namespace.
fn reachable_from_the_node(node: &Node, id: &str, ip: IpAddr) -> Result<()> {
    exchange(node, id, 0, |port| SocketAddr::new(ip, port))
}

/// A listener on `port` (0: any) inside pod `id`; the node connects to `target(listening port)` and
/// reads what the pod sends.
fn exchange(node: &Node, id: &str, port: u16, target: impl FnOnce(u16) -> SocketAddr + Send) -> Result<()> {
    let pod_ns = NetNsFd::open(&node.sandbox_dir(id).join("ns/net"))?;
    let listener = pod_ns.run(|| TcpListener::bind(("0.0.0.0", port)))??;
    let port = listener.local_addr()?.port();
    let server = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut stream, _) = listener.accept()?;
        stream.write_all(b"pod")
    });
    let target = target(port);
    let answer = node.host.run(move || -> std::io::Result<String> {
        let mut stream = TcpStream::connect_timeout(&target, Duration::from_secs(10))?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        Ok(text)
    })??;
    server.join().map_err(|_| anyhow::anyhow!("the pod's listener panicked"))??;
    ensure!(answer == "pod", "the pod answered {answer:?} through {target}");
    Ok(())
}

#[test]
fn a_pod_gets_an_ip_the_node_reaches_its_files_and_leaves_nothing() -> Result<()> {
    let mut node = Node::start(Net::Reference)?;
    let mut config = pod("web");
    config.hostname = "web-0".to_owned();
    config.dns_config = Some(api::DnsConfig {
        servers: vec!["10.96.0.10".to_owned()],
        searches: vec!["default.svc.cluster.local".to_owned(), "svc.cluster.local".to_owned()],
        options: vec!["ndots:5".to_owned()],
    });
    config.port_mappings = vec![api::PortMapping {
        protocol: api::Protocol::Tcp.into(),
        container_port: 80,
        host_port: 18080,
        host_ip: String::new(),
    }];
    if let Some(linux) = config.linux.as_mut() {
        linux.sysctls.insert("net.ipv4.ip_unprivileged_port_start".to_owned(), "0".to_owned());
        linux.sysctls.insert("kernel/shm_rmid_forced".to_owned(), "1".to_owned());
    }
    let id = node.run(&config, "")?;
    ensure!(id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()), "id {id}");
    let response = node.status(&id, true)?;
    let status = response.status.context("no status")?;
    ensure!(status.state() == api::PodSandboxState::SandboxReady, "{:?}", status.state());
    ensure!(status.runtime_handler == "runc", "handler {:?}", status.runtime_handler);
    ensure!(status.metadata == config.metadata && status.labels == config.labels);
    let options = status
        .linux
        .clone()
        .and_then(|l| l.namespaces)
        .and_then(|n| n.options)
        .context("no namespace options")?;
    ensure!(options.network() == api::NamespaceMode::Pod);
    let ip = pod_ip(&status)?;
    ensure!(ip.to_string().starts_with("10.88."), "{ip} is not from {SUBNET}");
    ensure!(node.allocations().get(&ip) == Some(&id), "allocations {:?}", node.allocations());
    let info: Value = serde_json::from_str(response.info.get("info").context("no info")?)?;
    ensure!(info["cniResult"]["ips"].is_array() && info["netNamespaceClosed"] == false, "{info}");
    reachable_from_the_node(&node, &id, ip)?;
    // The port mapping reached portmap (runtimeConfig.portMappings): the node's port 18080 is the pod's 80.
    let node_address = node.host.address();
    exchange(&node, &id, 80, |_| SocketAddr::new(IpAddr::V4(node_address), 18080))?;

    // The files, and the hostname inside the pod's UTS namespace.
    let dir = node.sandbox_dir(&id);
    ensure!(std::fs::read_to_string(dir.join("hostname"))? == "web-0\n");
    ensure!(
        std::fs::read_to_string(dir.join("resolv.conf"))?
            == "search default.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"
    );
    let hosts = std::fs::read_to_string(dir.join("hosts"))?;
    ensure!(hosts.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"), "{hosts}");
    ensure!(hosts.ends_with(&format!("{ip}\tweb-0\n")), "{hosts}");
    let uts = dir.join("ns/uts");
    let output = Command::new("nsenter").arg(format!("--uts={}", uts.display())).arg("hostname").output()?;
    ensure!(String::from_utf8_lossy(&output.stdout).trim() == "web-0", "{output:?}");
    // The sysctls hold in the pod's namespaces (and not on the node).
    let read_in = |ns: PathBuf, flag: nix::sched::CloneFlags, path: &'static str| -> Result<String> {
        std::thread::spawn(move || -> Result<String> {
            nix::sched::setns(std::fs::File::open(&ns)?, flag)?;
            Ok(std::fs::read_to_string(path)?.trim().to_owned())
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the reading thread panicked"))?
    };
    let port_start = "/proc/sys/net/ipv4/ip_unprivileged_port_start";
    ensure!(read_in(dir.join("ns/net"), nix::sched::CloneFlags::CLONE_NEWNET, port_start)? == "0");
    ensure!(
        node.host.run(|| std::fs::read_to_string(port_start))??.trim() != "0",
        "the node's sysctl changed"
    );
    let rmid = "/proc/sys/kernel/shm_rmid_forced";
    ensure!(read_in(dir.join("ns/ipc"), nix::sched::CloneFlags::CLONE_NEWIPC, rmid)? == "1");
    // The pod's /dev/shm: a tmpfs of its own.
    let shm = nix::sys::statfs::statfs(&dir.join("shm"))?;
    ensure!(shm.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC, "the pod's shm is not a tmpfs");
    // The loopback is up in the pod.
    let pod_ns = NetNsFd::open(&dir.join("ns/net"))?;
    pod_ns.run(|| TcpListener::bind("127.0.0.1:0").map(drop))??;

    // Stop twice: NotReady, no IP, the address released; then remove twice.
    node.stop(&id)?;
    node.stop(&id)?;
    let status = node.status(&id, false)?.status.context("no status")?;
    ensure!(status.state() == api::PodSandboxState::SandboxNotready);
    ensure!(status.network.map(|n| n.ip).unwrap_or_default().is_empty(), "a stopped pod has an IP");
    ensure!(node.allocations().is_empty(), "stop left {:?}", node.allocations());
    node.remove_and_check(&id)?;
    node.remove(&id)?;
    // The pod's veth is gone from the node (only lo, eth0 and the bridge remain).
    let links = node.host.command("ip").args(["-o", "link", "show"]).output()?;
    let links = String::from_utf8_lossy(&links.stdout).into_owned();
    ensure!(!links.contains("veth"), "a veth is left on the node: {links}");
    // Unknown ids: Remove and Stop succeed (the CRI's idempotence), Status is NotFound.
    node.remove(&"0".repeat(64))?;
    ensure!(node.status(&id, false).unwrap_err().code() == Code::NotFound);
    node.stop(&id)?;
    ensure!(node.shim.is_running(), "{}", node.shim.log_tail(50));
    Ok(())
}

#[test]
fn remove_of_a_ready_pod_stops_it_first() -> Result<()> {
    let mut node = Node::start(Net::Reference)?;
    let id = node.run(&pod("ready"), "")?;
    ensure!(!node.allocations().is_empty());
    node.remove_and_check(&id)?;
    ensure!(node.allocations().is_empty(), "{:?}", node.allocations());
    Ok(())
}

#[test]
fn a_host_network_pod_uses_the_node() -> Result<()> {
    let mut node = Node::start(Net::Reference)?;
    let mut config = pod("hostnet");
    config.hostname = "the-node".to_owned();
    set_namespaces(&mut config, api::NamespaceMode::Node, api::NamespaceMode::Container);
    let id = node.run(&config, "")?;
    let status = node.status(&id, false)?.status.context("no status")?;
    ensure!(status.state() == api::PodSandboxState::SandboxReady);
    ensure!(status.network.map(|n| n.ip).unwrap_or_default().is_empty(), "a host-network pod got a pod IP");
    let dir = node.sandbox_dir(&id);
    ensure!(
        !dir.join("ns/net").exists() && !dir.join("ns/uts").exists(),
        "host-network pods get no net/uts namespace"
    );
    ensure!(dir.join("ns/ipc").exists(), "the pod's IPC namespace is its own");
    ensure!(node.allocations().is_empty(), "CNI ran for a host-network pod");
    let hosts = std::fs::read_to_string(dir.join("hosts"))?;
    ensure!(hosts.starts_with("# Kubernetes-managed hosts file (host network).\n"), "{hosts}");
    ensure!(std::fs::read_to_string(dir.join("hostname"))? == "the-node\n");
    // No DNS config: the node's resolv.conf.
    ensure!(
        std::fs::read_to_string(dir.join("resolv.conf"))? == std::fs::read_to_string("/etc/resolv.conf")?
    );
    node.remove_and_check(&id)
}

#[test]
fn a_shared_pid_namespace_gets_a_pause_process_as_pid_1() -> Result<()> {
    let mut node = Node::start(Net::Reference)?;
    let mut config = pod("shared");
    set_namespaces(&mut config, api::NamespaceMode::Pod, api::NamespaceMode::Pod);
    let id = node.run(&config, "")?;
    let (pid, start) = node.pause_of(&id)?.context("no pause process")?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).context("no NSpid")?;
    ensure!(
        nspid.split_whitespace().last() == Some("1"),
        "the pause process is not PID 1 in its namespace: {nspid}"
    );
    // It is in the pod's network and UTS namespaces, not the node's.
    let dir = node.sandbox_dir(&id);
    for kind in ["net", "uts", "ipc"] {
        let theirs = std::fs::metadata(format!("/proc/{pid}/ns/{kind}"))?;
        let pods = std::fs::metadata(dir.join("ns").join(kind))?;
        ensure!(
            std::os::unix::fs::MetadataExt::ino(&theirs) == std::os::unix::fs::MetadataExt::ino(&pods),
            "the pause process is not in the pod's {kind} namespace"
        );
    }
    // Unrelated signals are ignored.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGHUP)?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGUSR1)?;
    ensure!(
        keel_testbed::process_alive(u32::try_from(pid)?, Some(start)),
        "the pause process died of a signal it ignores"
    );
    let inodes = namespace_inodes(&node.root(), &id);
    ensure!(!namespace_holders(&inodes).is_empty(), "the pause process is not seen in the pod's namespaces");
    node.stop(&id)?;
    ensure!(namespace_holders(&inodes).is_empty(), "{:?}", namespace_holders(&inodes));
    ensure!(
        !keel_testbed::process_alive(u32::try_from(pid)?, Some(start)),
        "the pause process outlived Stop"
    );
    node.remove(&id)?;
    let left = leftovers(&node.root(), &id, Some((pid, start)));
    ensure!(left.is_empty(), "{left:?}");
    Ok(())
}

#[test]
fn list_filters() -> Result<()> {
    let mut node = Node::start(Net::Reference)?;
    let mut ids = BTreeMap::new();
    for (name, tier) in [("a", "front"), ("b", "front"), ("c", "back")] {
        let mut config = pod(name);
        config.labels.insert("tier".to_owned(), tier.to_owned());
        ids.insert(name, node.run(&config, "")?);
    }
    let mut all: Vec<String> = ids.values().cloned().collect();
    all.sort();
    ensure!(node.list(None)? == all);
    let by_id = |id: &str| api::PodSandboxFilter { id: id.to_owned(), ..Default::default() };
    ensure!(node.list(Some(by_id(&ids["a"])))? == [ids["a"].clone()]);
    ensure!(node.list(Some(by_id(&ids["b"][..12])))? == [ids["b"].clone()], "a unique prefix selects");
    ensure!(node.list(Some(by_id("nothing")))?.is_empty());
    node.stop(&ids["c"])?;
    let state = |s: api::PodSandboxState| api::PodSandboxFilter {
        state: Some(api::PodSandboxStateValue { state: s.into() }),
        ..Default::default()
    };
    ensure!(node.list(Some(state(api::PodSandboxState::SandboxNotready)))? == [ids["c"].clone()]);
    ensure!(node.list(Some(state(api::PodSandboxState::SandboxReady)))?.len() == 2);
    let labels = |pairs: &[(&str, &str)]| api::PodSandboxFilter {
        label_selector: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<HashMap<_, _>>(),
        ..Default::default()
    };
    let mut front = vec![ids["a"].clone(), ids["b"].clone()];
    front.sort();
    ensure!(node.list(Some(labels(&[("tier", "front")])))? == front);
    ensure!(
        node.list(Some(labels(&[("tier", "front"), ("io.kubernetes.pod.name", "b")])))? == [ids["b"].clone()]
    );
    ensure!(node.list(Some(labels(&[("tier", "middle")])))?.is_empty());
    for id in ids.values() {
        node.remove_and_check(id)?;
    }
    Ok(())
}

#[test]
fn bad_requests_get_their_codes_and_leave_nothing() -> Result<()> {
    let mut node = Node::start(Net::Reference)?;
    let err = node.run(&pod("kata"), "kata").unwrap_err();
    ensure!(err.code() == Code::InvalidArgument && err.message().contains("kata"), "{err:?}");
    let mut no_metadata = pod("anon");
    no_metadata.metadata = None;
    ensure!(node.run(&no_metadata, "").unwrap_err().code() == Code::InvalidArgument);
    let mut many = pod("dns");
    many.dns_config = Some(api::DnsConfig {
        searches: (0..7).map(|i| format!("d{i}.example")).collect(),
        ..Default::default()
    });
    ensure!(node.run(&many, "").unwrap_err().code() == Code::InvalidArgument);
    let mut bad_hostname = pod("hostname");
    bad_hostname.hostname = "two words".to_owned();
    ensure!(node.run(&bad_hostname, "").unwrap_err().code() == Code::InvalidArgument);
    // Sysctls outside the pod's namespaces: node-wide, or the network of a host-network pod.
    let mut node_wide = pod("sysctl");
    if let Some(linux) = node_wide.linux.as_mut() {
        linux.sysctls.insert("kernel.panic".to_owned(), "10".to_owned());
    }
    ensure!(node.run(&node_wide, "").unwrap_err().code() == Code::InvalidArgument);
    let mut host_net = pod("sysctl-host");
    set_namespaces(&mut host_net, api::NamespaceMode::Node, api::NamespaceMode::Container);
    if let Some(linux) = host_net.linux.as_mut() {
        linux.sysctls.insert("net.ipv4.ip_forward".to_owned(), "1".to_owned());
    }
    ensure!(node.run(&host_net, "").unwrap_err().code() == Code::InvalidArgument);
    // The same pod attempt twice: the name is taken.
    let id = node.run(&pod("twice"), "")?;
    let err = node.run(&pod("twice"), "").unwrap_err();
    ensure!(err.code() == Code::AlreadyExists && err.message().contains(&id), "{err:?}");
    ensure!(node.list(None)? == std::slice::from_ref(&id));
    node.remove_and_check(&id)?;
    // Its name is free again.
    let again = node.run(&pod("twice"), "")?;
    node.remove_and_check(&again)?;
    ensure!(std::fs::read_dir(node.root().join("sandboxes"))?.next().is_none(), "sandbox directories left");
    Ok(())
}

#[test]
fn a_failing_cni_plugin_fails_the_pod_and_leaves_nothing() -> Result<()> {
    let mut node = Node::start(Net::Failing)?;
    let err = node.run(&pod("doomed"), "").unwrap_err();
    ensure!(
        err.message().contains("refused by the test")
            && err.message().contains("on purpose")
            && err.message().contains("100"),
        "{err:?}"
    );
    ensure!(node.list(None)?.is_empty(), "a failed pod is listed");
    // DEL ran: the bridge plugin's address is released.
    ensure!(node.allocations().is_empty(), "{:?}", node.allocations());
    let sandboxes = node.root().join("sandboxes");
    let entries: Vec<_> = std::fs::read_dir(&sandboxes)?.filter_map(Result::ok).map(|e| e.path()).collect();
    ensure!(entries.is_empty(), "left {entries:?}");
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")?;
    ensure!(
        !mountinfo.contains(&*sandboxes.to_string_lossy()),
        "a mount is left under {}",
        sandboxes.display()
    );
    // The same pod may be tried again (its name was released).
    let err = node.run(&pod("doomed"), "").unwrap_err();
    ensure!(err.code() != Code::AlreadyExists, "{err:?}");
    Ok(())
}

#[test]
fn sandboxes_survive_a_restart() -> Result<()> {
    let mut node = Node::start(Net::Reference)?;
    let plain = node.run(&pod("kept"), "")?;
    let ip = pod_ip(&node.status(&plain, false)?.status.context("no status")?)?;
    let stopped = node.run(&pod("stopped"), "")?;
    node.stop(&stopped)?;
    let mut config = pod("shared");
    set_namespaces(&mut config, api::NamespaceMode::Pod, api::NamespaceMode::Pod);
    let shared = node.run(&config, "")?;
    let (pid, start) = node.pause_of(&shared)?.context("no pause process")?;
    node.restart()?;
    let mut all = vec![plain.clone(), stopped.clone(), shared.clone()];
    all.sort();
    ensure!(node.list(None)? == all, "{:?}", node.list(None)?);
    let status = node.status(&plain, false)?.status.context("no status")?;
    ensure!(status.state() == api::PodSandboxState::SandboxReady && pod_ip(&status)? == ip, "{status:?}");
    reachable_from_the_node(&node, &plain, ip)?;
    let status = node.status(&stopped, false)?.status.context("no status")?;
    ensure!(status.state() == api::PodSandboxState::SandboxNotready);
    // The testbed's restart killed everything keel-shim forked: the pause process is gone, so the pod
    // is NotReady (a pause process dying makes its pod NotReady), and it is still removable.
    ensure!(!keel_testbed::process_alive(u32::try_from(pid)?, Some(start)), "the pause process survived");
    let status = node.status(&shared, false)?.status.context("no status")?;
    ensure!(status.state() == api::PodSandboxState::SandboxNotready, "{status:?}");
    node.remove(&shared)?;
    ensure!(
        leftovers(&node.root(), &shared, None).is_empty(),
        "{:?}",
        leftovers(&node.root(), &shared, None)
    );
    // The restarted keel-shim still knows the names.
    ensure!(node.run(&pod("kept"), "").unwrap_err().code() == Code::AlreadyExists);
    node.remove_and_check(&plain)?;
    node.remove_and_check(&stopped)?;
    ensure!(node.allocations().is_empty(), "{:?}", node.allocations());
    // After a reboot the records remain but the namespaces are gone: NotReady, and still removable
    // (CNI DEL with a missing network namespace releases the address).
    let rebooted = node.run(&pod("rebooted"), "")?;
    for kind in ["net", "ipc", "uts"] {
        nix::mount::umount2(
            &node.sandbox_dir(&rebooted).join("ns").join(kind),
            nix::mount::MntFlags::MNT_DETACH,
        )?;
    }
    let status = node.status(&rebooted, false)?.status.context("no status")?;
    ensure!(status.state() == api::PodSandboxState::SandboxNotready, "{status:?}");
    node.remove_and_check(&rebooted)?;
    ensure!(node.allocations().is_empty(), "{:?}", node.allocations());
    Ok(())
}

#[test]
fn keel_cni_networks_pods() -> Result<()> {
    let mut node = Node::start(Net::KeelCni)?;
    let id = node.run(&pod("keel"), "")?;
    let ip = pod_ip(&node.status(&id, false)?.status.context("no status")?)?;
    ensure!(ip.to_string().starts_with("10.89.0."), "{ip}");
    ensure!(node.allocations().get(&ip) == Some(&id), "{:?}", node.allocations());
    reachable_from_the_node(&node, &id, ip)?;
    node.remove_and_check(&id)?;
    ensure!(node.allocations().is_empty(), "{:?}", node.allocations());
    Ok(())
}

#[test]
fn no_cni_config_fails_the_pod_network_only() -> Result<()> {
    let mut node = Node::start(Net::Reference)?;
    std::fs::remove_file(node.dir.path().join("net.d/10-pods.conflist"))?;
    let err = node.run(&pod("nonet"), "").unwrap_err();
    ensure!(err.message().contains("no network config"), "{err:?}");
    // A host-network pod needs no CNI.
    let mut config = pod("hostnet");
    set_namespaces(&mut config, api::NamespaceMode::Node, api::NamespaceMode::Container);
    let id = node.run(&config, "")?;
    node.remove_and_check(&id)?;
    if !node.list(None)?.is_empty() {
        bail!("sandboxes left");
    }
    Ok(())
}
