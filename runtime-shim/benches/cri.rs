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
//! - rss: the runtime's resident memory with PODS pods of one running container each (containerd: its
//!   daemon plus its containerd-shim processes; keel-shim: its daemon plus its monitors), and idle.
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
        Ok(CriSide { name, client, log_dir: log_dir.to_owned(), image: image.to_owned(), next: 0 })
    }

    /// RunPodSandbox + CreateContainer + StartContainer: (pod id, container id).
    async fn start(&mut self) -> Result<(String, String)> {
        self.next += 1;
        let pod_name = format!("bench-{}-{}", self.name, self.next);
        let pod = pod_sandbox_config("bench", &pod_name, &format!("uid-{pod_name}"), &self.log_dir);
        let request = api::RunPodSandboxRequest { config: Some(pod.clone()), runtime_handler: String::new() };
        let pod_id =
            self.client.runtime.run_pod_sandbox(request).await.map_err(|s| format!("RunPodSandbox: {s}"))?;
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
        let id = id.into_inner().container_id;
        let request = api::StartContainerRequest { container_id: id.clone() };
        self.client.runtime.start_container(request).await.map_err(|s| format!("StartContainer: {s}"))?;
        Ok((pod_id, id))
    }

    /// StopContainer (SIGKILL) + RemoveContainer + StopPodSandbox + RemovePodSandbox.
    async fn stop(&mut self, pod_id: &str, id: &str) -> Result<()> {
        let runtime = &mut self.client.runtime;
        let request = api::StopContainerRequest { container_id: id.to_owned(), timeout: 0 };
        runtime.stop_container(request).await.map_err(|s| format!("StopContainer: {s}"))?;
        let request = api::RemoveContainerRequest { container_id: id.to_owned() };
        runtime.remove_container(request).await.map_err(|s| format!("RemoveContainer: {s}"))?;
        let request = api::StopPodSandboxRequest { pod_sandbox_id: pod_id.to_owned() };
        runtime.stop_pod_sandbox(request).await.map_err(|s| format!("StopPodSandbox: {s}"))?;
        let request = api::RemovePodSandboxRequest { pod_sandbox_id: pod_id.to_owned() };
        runtime.remove_pod_sandbox(request).await.map_err(|s| format!("RemovePodSandbox: {s}"))?;
        Ok(())
    }
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

/// VmRSS of a process in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
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

/// A runtime's memory: (daemon KiB, helpers KiB, helper count).
type Rss = (u64, u64, usize);

fn containerd_rss(daemon: u32, socket: &Path) -> Rss {
    let socket = socket.to_string_lossy().into_owned();
    let shims = processes(|_, args| {
        args.first().is_some_and(|a| a.contains("containerd-shim")) && args.contains(&socket)
    });
    (rss_kib(daemon), shims.iter().map(|&p| rss_kib(p)).sum(), shims.len())
}

fn keel_shim_rss(daemon: u32, bin: &Path) -> Rss {
    let exe = std::fs::canonicalize(bin).unwrap_or_else(|_| bin.to_owned());
    let monitors = processes(|pid, _| {
        pid != daemon && std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e == exe)
    });
    (rss_kib(daemon), monitors.iter().map(|&p| rss_kib(p)).sum(), monitors.len())
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

    let (mut ctd_start, mut ctd_stop) = (Samples::default(), Samples::default());
    let (mut floor_start, mut floor_stop) = (Samples::default(), Samples::default());
    let (mut shim_start, mut shim_stop) = (Samples::default(), Samples::default());
    for round in 0..rounds {
        let sides = if shim.is_some() { 3 } else { 2 };
        for turn in 0..sides {
            match (round + turn) % sides {
                0 => {
                    let (started, d) = bench::time(|| rt.block_on(ctd.start()));
                    let (pod, id) = started?;
                    ctd_start.push(d);
                    let (r, d) = bench::time(|| rt.block_on(ctd.stop(&pod, &id)));
                    r?;
                    ctd_stop.push(d);
                }
                1 => {
                    let (pod, d) = bench::time(|| floor.start());
                    floor_start.push(d);
                    let (r, d) = bench::time(|| floor.stop(pod?));
                    r?;
                    floor_stop.push(d);
                }
                _ => {
                    if let Some((_, side)) = shim.as_mut() {
                        let (started, d) = bench::time(|| rt.block_on(side.start()));
                        let (pod, id) = started?;
                        shim_start.push(d);
                        let (r, d) = bench::time(|| rt.block_on(side.stop(&pod, &id)));
                        r?;
                        shim_stop.push(d);
                    }
                }
            }
        }
    }

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
    if shim.is_some() {
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
    }

    // Memory: idle (no pod), then with `pods` pods of one running container each.
    let ctd_pid = containerd.daemon().pid();
    let ctd_socket = containerd.socket().to_owned();
    let memory = |report: &mut Report,
                  name: &str,
                  side: &mut CriSide,
                  measure: &dyn Fn() -> Rss|
     -> Result<()> {
        let (idle, _, _) = measure();
        let mut running = Vec::new();
        for _ in 0..pods {
            running.push(rt.block_on(side.start())?);
        }
        let (daemon, helpers, count) = measure();
        for (pod, id) in &running {
            rt.block_on(side.stop(pod, id))?;
        }
        let per = (daemon + helpers).saturating_sub(idle) / u64::try_from(pods.max(1)).unwrap_or(1);
        report.figure(&format!("{name}_idle_rss_mib"), &format!("{name}: daemon RSS MiB, idle"), &mib(idle));
        report.figure(
            &format!("{name}_rss_mib"),
            &format!("{name}: daemon RSS MiB with {pods} pods"),
            &mib(daemon),
        );
        report.figure(
            &format!("{name}_helpers_rss_mib"),
            &format!("{name}: {count} shims/monitors RSS MiB with {pods} pods"),
            &mib(helpers),
        );
        report.figure(
            &format!("{name}_per_pod_rss_mib"),
            &format!("{name}: RSS MiB per running pod"),
            &mib(per),
        );
        Ok(())
    };
    memory(&mut report, "containerd", &mut ctd, &|| containerd_rss(ctd_pid, &ctd_socket))?;
    if let Some((s, side)) = shim.as_mut() {
        let (pid, bin) = (s.daemon.pid(), s.bin.clone());
        memory(&mut report, "keel_shim", side, &|| keel_shim_rss(pid, &bin))?;
    }
    report.figure("rounds", "rounds", &rounds.to_string());
    report.print();
    Ok(())
}
