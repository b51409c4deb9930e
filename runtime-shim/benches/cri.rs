//! `cargo xtask bench cri [-- ROUNDS [PODS]]`: a pod with one container started and stopped through CRI
//! by containerd 1.6 (Debian's, `disable_cgroup = true`: it fails here otherwise) and by keel-shim,
//! against the floor — the same work done by hand — side by side in one run, rounds interleaved.
//!
//! Every side runs in one node (a keel-testbed host: containerd and keel-shim run inside its network
//! namespace only), with the same image (keel-testbed's busybox, from a registry on the node's
//! loopback, pulled before the timed rounds), the same runc and the same CNI plugin (the reference
//! `bridge` with `host-local`; each side its own bridge and subnet):
//! - start: RunPodSandbox + CreateContainer + StartContainer of `sleep 1000`; the floor: a network
//!   namespace created + the bridge plugin's ADD (executed with the CNI spec's environment) +
//!   `runc create` + `runc start` of one unpacked bundle of the same image.
//! - stop: StopContainer (timeout 0: SIGKILL) + RemoveContainer + StopPodSandbox + RemovePodSandbox;
//!   the floor: `runc kill KILL` + waiting for the container's process + `runc delete` + the bridge
//!   plugin's DEL + removing the namespace.
//! - rss/pss: the runtime's memory with PODS pods of one running container each (containerd: its
//!   daemon plus its containerd-shim processes; keel-shim: its daemon plus its monitors), and idle;
//!   RSS and PSS from `/proc/PID/smaps_rollup` (PSS shares a page among the processes mapping it: the
//!   text all monitors map counts once in their sum).
//! - cpu: CPU time per pod (start + stop): the daemon's utime + stime and its waited-for children's
//!   (runc, CNI plugins, keel-shim's monitors) from `/proc/PID/stat`, plus the children this process
//!   reaps in the side's turn (containerd's shims are orphans that come to this subreaper; the floor's
//!   runc, plugin and container). The bench's own client CPU is not counted on any side.
//! - per RPC: the median of each CRI call on both runtimes.
//!
//! Every pod is an ordinary pod as the kubelet asks for it: namespace options network POD, ipc POD,
//! pid CONTAINER (with pid POD keel-shim would start a pause process to hold the pod's PID namespace).
//!
//! The floor does less than a CRI runtime must: no pause container, no snapshot per container, no
//! loopback plugin (containerd runs it for every pod), no log files; the runtimes' figures above it are
//! what they spend on those and on themselves. runc by hand puts the container in a cgroup (containerd
//! here does not: `disable_cgroup`); keel-shim does that cgroup work too.
//!
//! The keel-shim column appears when a keel-shim binary is found (`KEEL_SHIM_BIN`, else the workspace's
//! target/release or target/debug build) and it runs a pod in a warm-up round; otherwise the bench says
//! why and measures containerd and the floor alone.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use keel_testbed::bench::{self, Report, Samples};
use keel_testbed::containerd::{Containerd, ContainerdOptions, PAUSE_REGISTRY, pause_registry_in};
use keel_testbed::cri::{CriClient, api, pod_sandbox_config};
use keel_testbed::{Daemon, Fabric, Forwarder, Host, NetNs, NetNsFd, Readiness, unique_prefix};
use serde_json::{Value, json};

const CNI_BIN: &str = "/usr/lib/cni";
const RUNC: &str = "runc";
const IMAGE_REPO: &str = "keel/busybox";
const COMMAND: &[&str] = &["sleep", "1000"];

type Result<T> = std::result::Result<T, String>;

/// The bridge plugin's config for one side (as libcni hands it to the first plugin of a list).
fn bridge_conf(bridge: &str, subnet: &str, data_dir: &Path) -> Value {
    json!({
        "cniVersion": "1.0.0", "name": format!("bench-{bridge}"), "type": "bridge", "bridge": bridge,
        "isGateway": true, "ipMasq": false,
        "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]], "dataDir": data_dir},
    })
}

/// A conf dir holding the bridge network as a conflist.
fn conf_dir(conf: &Value) -> Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix("keel-bench-netd-").tempdir().map_err(|e| e.to_string())?;
    let mut plugin = conf.clone();
    let name = plugin["name"].clone();
    if let Some(object) = plugin.as_object_mut() {
        object.remove("cniVersion");
        object.remove("name");
    }
    let list = json!({"cniVersion": "1.0.0", "name": name, "plugins": [plugin]});
    std::fs::write(dir.path().join("10-bench.conflist"), list.to_string()).map_err(|e| e.to_string())?;
    Ok(dir)
}

/// A CRI runtime under test.
struct CriSide {
    name: &'static str,
    client: CriClient,
    log_dir: PathBuf,
    image: String,
    next: usize,
    /// RunPodSandbox, CreateContainer, StartContainer, StopContainer, RemoveContainer, StopPodSandbox,
    /// RemovePodSandbox.
    phases: [Samples; 7],
}

impl CriSide {
    async fn connect(name: &'static str, socket: &Path, image: &str, log_dir: &Path) -> Result<CriSide> {
        let mut client = CriClient::connect(socket).await.map_err(|e| format!("{name}: {e:#}"))?;
        let request = api::PullImageRequest {
            image: Some(api::ImageSpec { image: image.to_owned(), ..Default::default() }),
            auth: None,
            sandbox_config: None,
        };
        client.image.pull_image(request).await.map_err(|s| format!("{name}: PullImage: {s}"))?;
        Ok(CriSide {
            name,
            client,
            log_dir: log_dir.to_owned(),
            image: image.to_owned(),
            next: 0,
            phases: Default::default(),
        })
    }

    /// RunPodSandbox + CreateContainer + StartContainer: (pod id, container id).
    async fn start(&mut self) -> Result<(String, String)> {
        self.next += 1;
        let pod_name = format!("bench-{}-{}", self.name, self.next);
        let pod = kubelet_pod_config(&pod_name, &self.log_dir);
        let request = api::RunPodSandboxRequest { config: Some(pod.clone()), runtime_handler: String::new() };
        let t0 = Instant::now();
        let pod_id =
            self.client.runtime.run_pod_sandbox(request).await.map_err(|s| format!("RunPodSandbox: {s}"))?;
        let t1 = Instant::now();
        let pod_id = pod_id.into_inner().pod_sandbox_id;
        let config = api::ContainerConfig {
            metadata: Some(api::ContainerMetadata { name: "sleep".to_owned(), attempt: 0 }),
            image: Some(api::ImageSpec { image: self.image.clone(), ..Default::default() }),
            command: COMMAND.iter().map(|&s| s.to_owned()).collect(),
            log_path: format!("{pod_name}.log"),
            linux: Some(api::LinuxContainerConfig::default()),
            ..Default::default()
        };
        let request = api::CreateContainerRequest {
            pod_sandbox_id: pod_id.clone(),
            config: Some(config),
            sandbox_config: Some(pod),
        };
        let id = self
            .client
            .runtime
            .create_container(request)
            .await
            .map_err(|s| format!("CreateContainer: {s}"))?;
        let t2 = Instant::now();
        let id = id.into_inner().container_id;
        let request = api::StartContainerRequest { container_id: id.clone() };
        self.client.runtime.start_container(request).await.map_err(|s| format!("StartContainer: {s}"))?;
        let t3 = Instant::now();
        for (samples, d) in self.phases.iter_mut().zip([t1 - t0, t2 - t1, t3 - t2]) {
            samples.push(d);
        }
        Ok((pod_id, id))
    }

    /// StopContainer (SIGKILL) + RemoveContainer + StopPodSandbox + RemovePodSandbox.
    async fn stop(&mut self, pod_id: &str, id: &str) -> Result<()> {
        let runtime = &mut self.client.runtime;
        let t0 = Instant::now();
        let request = api::StopContainerRequest { container_id: id.to_owned(), timeout: 0 };
        runtime.stop_container(request).await.map_err(|s| format!("StopContainer: {s}"))?;
        let t1 = Instant::now();
        let request = api::RemoveContainerRequest { container_id: id.to_owned() };
        runtime.remove_container(request).await.map_err(|s| format!("RemoveContainer: {s}"))?;
        let t2 = Instant::now();
        let request = api::StopPodSandboxRequest { pod_sandbox_id: pod_id.to_owned() };
        runtime.stop_pod_sandbox(request).await.map_err(|s| format!("StopPodSandbox: {s}"))?;
        let t3 = Instant::now();
        let request = api::RemovePodSandboxRequest { pod_sandbox_id: pod_id.to_owned() };
        runtime.remove_pod_sandbox(request).await.map_err(|s| format!("RemovePodSandbox: {s}"))?;
        let t4 = Instant::now();
        for (samples, d) in self.phases[3..].iter_mut().zip([t1 - t0, t2 - t1, t3 - t2, t4 - t3]) {
            samples.push(d);
        }
        Ok(())
    }
}

/// A pod as the kubelet asks for an ordinary one: network and IPC shared by the pod, a PID namespace
/// per container (`shareProcessNamespace` unset). With pid POD keel-shim would start a pause process
/// to hold the pod's PID namespace.
fn kubelet_pod_config(name: &str, log_dir: &Path) -> api::PodSandboxConfig {
    let mut pod = pod_sandbox_config("bench", name, &format!("uid-{name}"), log_dir);
    let options = api::NamespaceOption {
        network: api::NamespaceMode::Pod.into(),
        pid: api::NamespaceMode::Container.into(),
        ipc: api::NamespaceMode::Pod.into(),
        ..Default::default()
    };
    let linux = pod.linux.get_or_insert_with(Default::default);
    linux.security_context.get_or_insert_with(Default::default).namespace_options = Some(options);
    pod
}

/// The same work by hand: one bundle, runc, the bridge plugin.
struct Floor {
    node: NetNsFd,
    bundle: PathBuf,
    runc_root: PathBuf,
    conf: String,
    next: usize,
    /// netns, CNI ADD, runc create, runc start.
    phases: [Samples; 4],
    _dir: tempfile::TempDir,
}

/// A pod started by hand.
struct FloorPod {
    id: String,
    netns: NetNs,
    pid: i32,
}

impl Floor {
    fn new(node: &NetNsFd, image: &keel_testbed::images::OciImage) -> Result<Floor> {
        let dir =
            tempfile::Builder::new().prefix("keel-bench-floor-").tempdir().map_err(|e| e.to_string())?;
        let bundle = dir.path().join("bundle");
        let reference = format!("{}:{}", image.layout.display(), image.tag);
        let output = Command::new("umoci")
            .args(["unpack", "--image", &reference])
            .arg(&bundle)
            .output()
            .map_err(|e| format!("umoci: {e}"))?;
        if !output.status.success() {
            return Err(format!("umoci unpack: {}", String::from_utf8_lossy(&output.stderr)));
        }
        let data_dir = dir.path().join("ipam");
        let conf = bridge_conf("floor0", "10.97.0.0/24", &data_dir).to_string();
        let runc_root = dir.path().join("runc");
        std::fs::create_dir(&runc_root).map_err(|e| format!("creating {}: {e}", runc_root.display()))?;
        Ok(Floor {
            node: node.clone(),
            bundle,
            runc_root,
            conf,
            next: 0,
            phases: Default::default(),
            _dir: dir,
        })
    }

    /// Points the bundle's network namespace at `netns` and its process at [`COMMAND`].
    fn configure(&self, netns: &Path) -> Result<()> {
        let path = self.bundle.join("config.json");
        let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
        let mut spec: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        spec["process"]["args"] = json!(COMMAND);
        spec["process"]["terminal"] = json!(false);
        let namespaces = spec["linux"]["namespaces"].as_array_mut().ok_or("no namespaces in the bundle")?;
        namespaces.retain(|ns| ns["type"] != "network");
        namespaces.push(json!({"type": "network", "path": netns}));
        std::fs::write(&path, spec.to_string()).map_err(|e| e.to_string())
    }

    /// `runc --root ROOT` with no stdio: the container inherits `runc create`'s, and a pipe it held
    /// would never close. runc's errors go to its log file.
    fn runc(&self) -> Command {
        let mut command = Command::new(RUNC);
        command.arg("--root").arg(&self.runc_root).arg("--log").arg(self.runc_root.join("runc.log"));
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        command
    }

    fn cni(&self, command: &str, id: &str, netns: &Path) -> Result<()> {
        let mut child = Command::new(Path::new(CNI_BIN).join("bridge"))
            .env_clear()
            .env("CNI_COMMAND", command)
            .env("CNI_CONTAINERID", id)
            .env("CNI_NETNS", netns)
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", CNI_BIN)
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("bridge: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(self.conf.as_bytes()).map_err(|e| e.to_string())?;
        }
        let output = child.wait_with_output().map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!("bridge {command}: {}", String::from_utf8_lossy(&output.stdout)))
        }
    }

    fn run(&self, command: &mut Command, what: &str) -> Result<()> {
        let status = command.status().map_err(|e| format!("{what}: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            let log = keel_testbed::process::tail(&self.runc_root.join("runc.log"), 5);
            Err(format!("{what}: {status}; runc's log:\n{log}"))
        }
    }

    /// Netns + CNI ADD + runc create + runc start, each phase timed, from a thread inside the node.
    fn start(&mut self) -> Result<FloorPod> {
        self.next += 1;
        let id = format!("{}-floor-{}", unique_prefix(), self.next);
        let this = &*self;
        let (pod, phases) = self
            .node
            .run(|| -> Result<(FloorPod, [Duration; 4])> {
                let t0 = Instant::now();
                let netns = NetNs::create(&id).map_err(|e| format!("{e:#}"))?;
                let t1 = Instant::now();
                this.cni("ADD", &id, netns.path())?;
                let t2 = Instant::now();
                // Untimed: the bundle's spec names this pod's namespace (a runtime writes a spec per container).
                this.configure(netns.path())?;
                let t2b = Instant::now();
                let pid_file = this.runc_root.join(format!("{id}.pid"));
                let mut create = this.runc();
                create
                    .arg("create")
                    .arg("--bundle")
                    .arg(&this.bundle)
                    .arg("--pid-file")
                    .arg(&pid_file)
                    .arg(&id);
                this.run(&mut create, "runc create")?;
                let t3 = Instant::now();
                this.run(this.runc().args(["start", &id]), "runc start")?;
                let t4 = Instant::now();
                let pid = std::fs::read_to_string(&pid_file).map_err(|e| e.to_string())?;
                let pid: i32 = pid.trim().parse().map_err(|e| format!("pid file {pid:?}: {e}"))?;
                Ok((FloorPod { id, netns, pid }, [t1 - t0, t2 - t1, t3 - t2b, t4 - t3]))
            })
            .map_err(|e| format!("{e:#}"))??;
        for (samples, d) in self.phases.iter_mut().zip(phases) {
            samples.push(d);
        }
        Ok(pod)
    }

    /// runc kill + wait + runc delete + CNI DEL + netns removal.
    fn stop(&self, pod: FloorPod) -> Result<()> {
        self.node
            .run(|| -> Result<()> {
                self.run(self.runc().args(["kill", &pod.id, "KILL"]), "runc kill")?;
                // The container's process came to this subreaper when `runc create` exited.
                let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pod.pid), None);
                self.run(self.runc().args(["delete", &pod.id]), "runc delete")?;
                self.cni("DEL", &pod.id, pod.netns.path())?;
                drop(pod.netns);
                Ok(())
            })
            .map_err(|e| format!("{e:#}"))?
    }
}

/// The keel-shim binary to measure, if any.
fn keel_shim_bin() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("KEEL_SHIM_BIN") {
        return Some(PathBuf::from(bin));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.to_owned();
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    ["release", "debug"].iter().map(|profile| target.join(profile).join("keel-shim")).find(|p| p.is_file())
}

/// Resident and proportional set sizes of a process in KiB (`/proc/PID/smaps_rollup`: PSS counts a
/// page shared by N processes as 1/N in each, so the monitors' common text counts once in their sum).
fn memory_kib(pid: u32) -> Mem {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        rollup
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Mem { rss: field("Rss:"), pss: field("Pss:") }
}

/// Memory in KiB.
#[derive(Debug, Default, Clone, Copy)]
struct Mem {
    rss: u64,
    pss: u64,
}

impl std::ops::Add for Mem {
    type Output = Mem;
    fn add(self, other: Mem) -> Mem {
        Mem { rss: self.rss + other.rss, pss: self.pss + other.pss }
    }
}

/// CPU time of a process from `/proc/PID/stat`: (its own utime + stime, its waited-for children's
/// cutime + cstime).
fn proc_cpu(pid: u32) -> (Duration, Duration) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<u64> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect())
        .unwrap_or_default();
    let ticks = |i: usize| fields.get(i).copied().unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap_or(100).max(1);
    let d = |t: u64| Duration::from_micros(t * 1_000_000 / hz);
    // After the command's `)`: state is field 3, utime 14, stime 15, cutime 16, cstime 17.
    (d(ticks(11) + ticks(12)), d(ticks(13) + ticks(14)))
}

/// CPU time (user + system) of this process's waited-for children, after reaping every zombie it has
/// (orphans come to it: it is a subreaper — containerd's shims, the floor's containers).
fn reaped_children_cpu() -> Duration {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
    // SAFETY: getrusage writes into the zeroed struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `ru` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &raw mut ru) };
    let tv = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Processes whose command line satisfies `matches` (arguments split at NUL).
fn processes(matches: impl Fn(u32, &[String]) -> bool) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let args: Vec<String> = raw
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if matches(pid, &args) {
            found.push(pid);
        }
    }
    found
}

/// containerd's shims (found by their `-address`).
fn containerd_shims(socket: &Path) -> Vec<u32> {
    let socket = socket.to_string_lossy().into_owned();
    processes(|_, args| args.first().is_some_and(|a| a.contains("containerd-shim")) && args.contains(&socket))
}

/// keel-shim's monitors (and pause processes): the same executable other than the daemon, or the
/// `keel-shim-monitor` beside it.
fn keel_shim_monitors(daemon: u32, bin: &Path) -> Vec<u32> {
    let exe = std::fs::canonicalize(bin).unwrap_or_else(|_| bin.to_owned());
    let monitor = exe.with_file_name("keel-shim-monitor");
    processes(|pid, _| {
        pid != daemon
            && std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == exe || e == monitor)
    })
}

/// A runtime's memory: (daemon, helpers, helper count).
type Rss = (Mem, Mem, usize);

fn helpers_memory(daemon: u32, helpers: &[u32]) -> Rss {
    (
        memory_kib(daemon),
        helpers.iter().map(|&p| memory_kib(p)).fold(Mem::default(), |a, b| a + b),
        helpers.len(),
    )
}

/// Waits (untimed, up to 2 s) until `helpers` lists none: a side's processes that outlive its last
/// RPC are counted in its CPU time, not the next side's.
fn settle(helpers: impl Fn() -> Vec<u32>) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !helpers().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// A keel-shim daemon in the node, and its conf dir.
struct Shim {
    daemon: Daemon,
    socket: PathBuf,
    bin: PathBuf,
    _net_d: tempfile::TempDir,
    _dir: tempfile::TempDir,
}

fn start_keel_shim(node: &Host, bin: &Path, ipam: &Path) -> Result<Shim> {
    let dir = tempfile::Builder::new().prefix("keel-bench-shim-").tempdir().map_err(|e| e.to_string())?;
    let net_d = conf_dir(&bridge_conf("shim0", "10.96.0.0/24", ipam))?;
    let socket = dir.path().join("cri.sock");
    let mut command = Command::new(bin);
    command.arg("--socket").arg(&socket).arg("--root").arg(dir.path().join("root"));
    command.arg("--cni-conf-dir").arg(net_d.path()).arg("--cni-bin-dir").arg(CNI_BIN);
    command.args(["--insecure-registry", PAUSE_REGISTRY]);
    let ready = Readiness::UnixSocket(socket.clone());
    let daemon = node
        .start_daemon("keel-shim", command, ready, Duration::from_secs(20))
        .map_err(|e| format!("{e:#}"))?;
    Ok(Shim { daemon, socket, bin: bin.to_owned(), _net_d: net_d, _dir: dir })
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench cri: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    keel_testbed::require_root().map_err(|e| format!("{e:#}"))?;
    // The floor's container processes come to this process when `runc create` exits.
    nix::sys::prctl::set_child_subreaper(true).map_err(|e| format!("PR_SET_CHILD_SUBREAPER: {e}"))?;
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with('-'));
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let pods: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let e = |e: anyhow::Error| format!("{e:#}");

    let fabric = Fabric::new().map_err(e)?;
    let node = fabric.add_host("node").map_err(e)?;
    let (_registry, pause) = pause_registry_in(node.fd()).map_err(e)?;
    let busybox = keel_testbed::images::busybox_image().map_err(e)?;
    {
        let forwarder =
            Forwarder::start(node.fd(), PAUSE_REGISTRY.parse().map_err(|e| format!("{e}"))?).map_err(e)?;
        keel_testbed::registry::push_oci_layout_to(
            &forwarder.local_addr().to_string(),
            &busybox.layout,
            &busybox.tag,
            IMAGE_REPO,
            "latest",
        )
        .map_err(e)?;
    }
    let image = format!("{PAUSE_REGISTRY}/{IMAGE_REPO}:latest");
    let scratch = tempfile::Builder::new().prefix("keel-bench-cri-").tempdir().map_err(|e| e.to_string())?;
    let logs = scratch.path().join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| e.to_string())?;

    let ctd_net_d = conf_dir(&bridge_conf("cri0", "10.98.0.0/24", &scratch.path().join("ipam-containerd")))?;
    let opts = ContainerdOptions {
        cni_conf_dir: Some(ctd_net_d.path().to_owned()),
        netns: Some(node.fd().clone()),
        sandbox_image: Some(pause),
        plain_http_registries: vec![PAUSE_REGISTRY.to_owned()],
        ..ContainerdOptions::default()
    };
    let mut containerd = Containerd::start(&opts).map_err(e)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let mut ctd = rt.block_on(CriSide::connect("containerd", containerd.socket(), &image, &logs))?;
    let mut floor = Floor::new(node.fd(), busybox)?;

    let shim_bin = keel_shim_bin();
    let mut shim = None;
    match &shim_bin {
        None => println!("keel-shim: no binary (set KEEL_SHIM_BIN or build keel-shim): not measured"),
        Some(bin) => {
            let started = start_keel_shim(&node, bin, &scratch.path().join("ipam-keel-shim")).and_then(|s| {
                let side = rt.block_on(CriSide::connect("keel-shim", &s.socket, &image, &logs))?;
                Ok((s, side))
            });
            match started.and_then(|(s, mut side)| {
                let tried = rt.block_on(async {
                    let (pod, id) = side.start().await?;
                    side.stop(&pod, &id).await
                });
                match tried {
                    Ok(()) => Ok((s, side)),
                    Err(err) => {
                        // The client first: keel-shim waits for open connections when it stops.
                        drop(side);
                        drop(s);
                        Err(err)
                    }
                }
            }) {
                Ok(pair) => {
                    println!("keel-shim: {}", bin.display());
                    shim = Some(pair);
                }
                Err(err) => {
                    println!("keel-shim: {} cannot run a pod yet ({err}): not measured", bin.display());
                }
            }
        }
    }

    // One warm-up round each: the bridge, the image's snapshot, the daemons' caches.
    let (pod, id) = rt.block_on(ctd.start())?;
    rt.block_on(ctd.stop(&pod, &id))?;
    let warm = floor.start()?;
    floor.stop(warm)?;
    floor.phases = Default::default();
    ctd.phases = Default::default();
    if let Some((_, side)) = shim.as_mut() {
        side.phases = Default::default();
    }
    let ctd_pid = containerd.daemon().pid();
    let ctd_socket = containerd.socket().to_owned();
    let shim_ids = shim.as_ref().map(|(s, _)| (s.daemon.pid(), s.bin.clone()));
    settle(|| containerd_shims(&ctd_socket));
    let _ = reaped_children_cpu();

    // CPU per pod (start + stop): the daemon's own and its reaped children's (runc, CNI plugins,
    // keel-shim's monitors) from /proc, plus what this process reaps in the turn (containerd's shims
    // are orphans that come to this subreaper; the floor's runc, plugins and containers).
    let (mut ctd_cpu, mut floor_cpu, mut shim_cpu) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    let daemon_cpu = |pid: u32| {
        let (own, children) = proc_cpu(pid);
        own + children
    };
    let (mut ctd_start, mut ctd_stop) = (Samples::default(), Samples::default());
    let (mut floor_start, mut floor_stop) = (Samples::default(), Samples::default());
    let (mut shim_start, mut shim_stop) = (Samples::default(), Samples::default());
    for round in 0..rounds {
        let sides = if shim.is_some() { 3 } else { 2 };
        for turn in 0..sides {
            match (round + turn) % sides {
                0 => {
                    let before = daemon_cpu(ctd_pid) + reaped_children_cpu();
                    let (started, d) = bench::time(|| rt.block_on(ctd.start()));
                    let (pod, id) = started?;
                    ctd_start.push(d);
                    let (r, d) = bench::time(|| rt.block_on(ctd.stop(&pod, &id)));
                    r?;
                    ctd_stop.push(d);
                    settle(|| containerd_shims(&ctd_socket));
                    ctd_cpu += (daemon_cpu(ctd_pid) + reaped_children_cpu()).saturating_sub(before);
                }
                1 => {
                    let before = reaped_children_cpu();
                    let (pod, d) = bench::time(|| floor.start());
                    floor_start.push(d);
                    let (r, d) = bench::time(|| floor.stop(pod?));
                    r?;
                    floor_stop.push(d);
                    floor_cpu += reaped_children_cpu().saturating_sub(before);
                }
                _ => {
                    if let (Some((_, side)), Some((pid, bin))) = (shim.as_mut(), shim_ids.as_ref()) {
                        let before = daemon_cpu(*pid) + reaped_children_cpu();
                        let (started, d) = bench::time(|| rt.block_on(side.start()));
                        let (pod, id) = started?;
                        shim_start.push(d);
                        let (r, d) = bench::time(|| rt.block_on(side.stop(&pod, &id)));
                        r?;
                        shim_stop.push(d);
                        settle(|| keel_shim_monitors(*pid, bin));
                        shim_cpu += (daemon_cpu(*pid) + reaped_children_cpu()).saturating_sub(before);
                    }
                }
            }
        }
    }
    let per_round = |d: Duration| bench::ms(d / u32::try_from(rounds.max(1)).unwrap_or(1));

    println!(
        "pods as the kubelet asks for ordinary ones (namespace options: network POD, ipc POD, pid CONTAINER) \
         on every side; keel-shim does the cgroup work containerd skips here (containerd runs with \
         disable_cgroup = true: its containers stay in its shim's cgroup; keel-shim's get one each, as by \
         runc by hand in the floor)"
    );
    let mut report = Report::new("cri");
    let row = |report: &mut Report, key: &str, what: &str, s: &Samples| {
        report.figure(key, what, &bench::ms(s.median()));
    };
    row(&mut report, "start_containerd_ms", "start: containerd median ms", &ctd_start);
    row(&mut report, "start_floor_ms", "start: floor median ms", &floor_start);
    row(&mut report, "stop_containerd_ms", "stop: containerd median ms", &ctd_stop);
    row(&mut report, "stop_floor_ms", "stop: floor median ms", &floor_stop);
    for (key, what, s) in [
        ("floor_netns_ms", "floor: netns create median ms", &floor.phases[0]),
        ("floor_cni_add_ms", "floor: CNI ADD (bridge) median ms", &floor.phases[1]),
        ("floor_runc_create_ms", "floor: runc create median ms", &floor.phases[2]),
        ("floor_runc_start_ms", "floor: runc start median ms", &floor.phases[3]),
    ] {
        row(&mut report, key, what, s);
    }
    const RPCS: [(&str, &str); 7] = [
        ("run_pod", "RunPodSandbox"),
        ("create", "CreateContainer"),
        ("start", "StartContainer"),
        ("stop_ctr", "StopContainer"),
        ("remove_ctr", "RemoveContainer"),
        ("stop_pod", "StopPodSandbox"),
        ("remove_pod", "RemovePodSandbox"),
    ];
    let rpc_rows = |report: &mut Report, prefix: &str, side: &CriSide| {
        for ((key, rpc), s) in RPCS.iter().zip(&side.phases) {
            row(report, &format!("{prefix}_{key}_ms"), &format!("{}: {rpc} median ms", side.name), s);
        }
    };
    rpc_rows(&mut report, "containerd", &ctd);
    let over = |a: &Samples, b: &Samples| bench::ms(a.median().saturating_sub(b.median()));
    report.figure(
        "start_containerd_over_floor_ms",
        "start: containerd − floor ms",
        &over(&ctd_start, &floor_start),
    );
    report.figure(
        "stop_containerd_over_floor_ms",
        "stop: containerd − floor ms",
        &over(&ctd_stop, &floor_stop),
    );
    report.figure(
        "cpu_containerd_ms",
        "CPU ms per pod (start + stop): containerd + shims",
        &per_round(ctd_cpu),
    );
    report.figure(
        "cpu_floor_ms",
        "CPU ms per pod (start + stop): floor (runc, bridge)",
        &per_round(floor_cpu),
    );
    if let Some((_, side)) = shim.as_ref() {
        rpc_rows(&mut report, "keel_shim", side);
        report.compare("start", "start (keel-shim vs containerd)", &shim_start, "containerd", &ctd_start);
        report.compare("stop", "stop (keel-shim vs containerd)", &shim_stop, "containerd", &ctd_stop);
        let fraction = |k: &Samples, c: &Samples| {
            format!("{:.2}", k.median().as_secs_f64() / c.median().as_secs_f64().max(f64::EPSILON))
        };
        report.figure(
            "start_vs_containerd",
            "start: keel-shim / containerd (target ≤ 0.6)",
            &fraction(&shim_start, &ctd_start),
        );
        report.figure(
            "stop_vs_containerd",
            "stop: keel-shim / containerd (target ≤ 0.6)",
            &fraction(&shim_stop, &ctd_stop),
        );
        report.figure(
            "start_over_floor_ms",
            "start: keel-shim − floor ms (target ≤ 10)",
            &over(&shim_start, &floor_start),
        );
        report.figure(
            "stop_over_floor_ms",
            "stop: keel-shim − floor ms (target ≤ 10)",
            &over(&shim_stop, &floor_stop),
        );
        report.figure(
            "cpu_keel_shim_ms",
            "CPU ms per pod (start + stop): keel-shim + monitors, with the cgroup work",
            &per_round(shim_cpu),
        );
    }

    // Memory: idle (no pod), then with `pods` pods of one running container each.
    let memory =
        |report: &mut Report, name: &str, side: &mut CriSide, measure: &dyn Fn() -> Rss| -> Result<()> {
            let (idle, _, _) = measure();
            let mut running = Vec::new();
            for _ in 0..pods {
                running.push(rt.block_on(side.start())?);
            }
            let (daemon, helpers, count) = measure();
            for (pod, id) in &running {
                rt.block_on(side.stop(pod, id))?;
            }
            let n = u64::try_from(pods.max(1)).unwrap_or(1);
            let per_rss = (daemon.rss + helpers.rss).saturating_sub(idle.rss) / n;
            let per_pss = (daemon.pss + helpers.pss).saturating_sub(idle.pss) / n;
            let each = u64::try_from(count.max(1)).unwrap_or(1);
            report.figure(
                &format!("{name}_idle_rss_mib"),
                &format!("{name}: daemon RSS MiB, idle"),
                &mib(idle.rss),
            );
            report.figure(
                &format!("{name}_rss_mib"),
                &format!("{name}: daemon RSS MiB with {pods} pods"),
                &mib(daemon.rss),
            );
            report.figure(
                &format!("{name}_pss_mib"),
                &format!("{name}: daemon PSS MiB with {pods} pods"),
                &mib(daemon.pss),
            );
            report.figure(
                &format!("{name}_helper_rss_mib"),
                &format!("{name}: RSS MiB of each of its {count} shims/monitors"),
                &mib(helpers.rss / each),
            );
            report.figure(
                &format!("{name}_helper_pss_mib"),
                &format!("{name}: PSS MiB of each of its {count} shims/monitors"),
                &mib(helpers.pss / each),
            );
            report.figure(
                &format!("{name}_per_pod_rss_mib"),
                &format!("{name}: RSS MiB per running pod (daemon growth + helpers)"),
                &mib(per_rss),
            );
            report.figure(
                &format!("{name}_per_pod_pss_mib"),
                &format!("{name}: PSS MiB per running pod (daemon growth + helpers)"),
                &mib(per_pss),
            );
            Ok(())
        };
    memory(&mut report, "containerd", &mut ctd, &|| helpers_memory(ctd_pid, &containerd_shims(&ctd_socket)))?;
    if let (Some((_, side)), Some((pid, bin))) = (shim.as_mut(), shim_ids.as_ref()) {
        memory(&mut report, "keel_shim", side, &|| helpers_memory(*pid, &keel_shim_monitors(*pid, bin)))?;
    }
    report.figure("rounds", "rounds", &rounds.to_string());
    report.print();
    // The client first: keel-shim waits for open connections when it stops.
    if let Some((daemon, side)) = shim {
        drop(side);
        drop(daemon);
    }
    Ok(())
}
