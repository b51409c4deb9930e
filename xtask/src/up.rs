//! `cargo xtask up` / `down`: bring what exists of Keel up on this machine, and remove all of it.
//!
//! `up` builds the workspace, then leaves a supervisor process running (`xtask supervise`, in a session
//! of its own) that holds everything up made as testbed fixtures: the cluster network (a fabric namespace
//! and one namespace per node, as `kind` has containers) and what runs in it. The supervisor is the
//! children's subreaper, so nothing it starts is left unreaped. `down` asks it to stop (SIGTERM): it drops
//! its fixtures, which remove their processes, namespaces, mounts and files. Whatever a crashed
//! supervisor left is swept by name (`keel-up-*`). The supervisor starts keel-apiserver (embedded store)
//! on the fabric; later issues add the scheduler, controllers, keel-kubelet, keel-shim and keel-proxy.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use keel_testbed::process::{Daemon, Readiness};
use keel_testbed::registry::{self, Registry};
use keel_testbed::{Fabric, Forwarder, images, netns};
use nix::sys::signal::{SigSet, Signal};
use serde_json::json;

use crate::{deps, util};

/// The default instance name: namespaces `keel-up-*`, state in /run/keel-up.
pub const DEFAULT_NAME: &str = "keel-up";

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Number of nodes (each a network namespace on the cluster fabric).
    #[arg(long, default_value_t = 1)]
    pub nodes: u32,
    #[command(flatten)]
    pub instance: Instance,
    /// Do not build the workspace first.
    #[arg(long)]
    pub no_build: bool,
    /// Port on the machine's loopback forwarded to the cluster's image registry (0: any free port).
    #[arg(long, default_value_t = 5000)]
    pub registry_port: u16,
    /// Port on the machine's loopback forwarded to keel-apiserver (0: any free port).
    #[arg(long, default_value_t = 6443)]
    pub apiserver_port: u16,
}

#[derive(Debug, clap::Args)]
pub struct Instance {
    /// Instance name: prefix of every namespace, and state in /run/NAME (several can coexist).
    #[arg(long, default_value = DEFAULT_NAME)]
    pub name: String,
}

#[derive(Debug, clap::Args)]
pub struct SuperviseArgs {
    #[arg(long)]
    pub nodes: u32,
    #[arg(long)]
    pub registry_port: u16,
    #[arg(long)]
    pub apiserver_port: u16,
    #[command(flatten)]
    pub instance: Instance,
}

impl Instance {
    /// Where `up` keeps its state: the supervisor's pid, its log and what it started.
    fn state_dir(&self) -> PathBuf {
        PathBuf::from(keel_testbed::UP_STATE_DIR).join(&self.name)
    }

    /// The namespaces of this instance that exist: `<name>-fabric` and `<name>-node<N>`, exactly (another
    /// instance's name may start with this one's).
    fn namespaces(&self) -> Result<Vec<String>> {
        let prefix = format!("{}-", self.name);
        Ok(netns::list_named()?
            .into_iter()
            .filter(|ns| {
                ns.strip_prefix(&prefix).is_some_and(|rest| {
                    rest == "fabric"
                        || rest
                            .strip_prefix("node")
                            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                })
            })
            .collect())
    }

    fn check(&self) -> Result<()> {
        if self.name.is_empty() || !self.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
            bail!("invalid instance name {:?}: use letters, digits and '-'", self.name);
        }
        Ok(())
    }
}

/// The supervisor's pid, if that process is still the supervisor: the file holds "PID START" (its start
/// time), so a pid reused after a reboot or a crash is not taken for it.
fn running_supervisor(dir: &Path) -> Option<u32> {
    let text = fs::read_to_string(dir.join("supervisor.pid")).ok()?;
    let mut fields = text.split_whitespace();
    let pid = fields.next()?.parse().ok()?;
    let start = fields.next()?.parse().ok()?;
    keel_testbed::process_alive(pid, Some(start)).then_some(pid)
}

pub fn up(args: &UpArgs) -> Result<()> {
    if !util::is_root() {
        bail!("cargo xtask up needs root (it creates network namespaces)");
    }
    if !(1..=32).contains(&args.nodes) {
        bail!("--nodes must be between 1 and 32");
    }
    let instance = &args.instance;
    instance.check()?;
    let dir = instance.state_dir();
    if let Some(pid) = running_supervisor(&dir) {
        bail!("Keel is already up (supervisor pid {pid}); run `cargo xtask down` first");
    }
    if dir.exists() || !instance.namespaces()?.is_empty() {
        eprintln!("up: removing what an earlier `up` left");
        down(instance)?;
    }
    // Keel itself needs no upstream peer: they are the tests' and benchmarks'.
    deps::ensure(false, deps::Peers::NotNeeded)?;

    if !args.no_build {
        eprintln!("up: building the workspace");
        // Not xtask itself: it is running, and a rebuild (feature unification differs from `cargo run
        // -p xtask`) would replace the binary the supervisor is started from.
        util::run(util::cargo().args(["build", "--workspace", "--bins", "--locked", "--exclude", "xtask"]))?;
    }

    fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let log_path = dir.join("supervisor.log");
    let log = fs::File::create(&log_path).with_context(|| format!("create {}", log_path.display()))?;
    let exe = std::env::current_exe().context("locate the xtask binary")?;
    let mut command = Command::new(exe);
    command
        .args(["supervise", "--nodes", &args.nodes.to_string(), "--name", &instance.name])
        .args(["--registry-port", &args.registry_port.to_string()])
        .args(["--apiserver-port", &args.apiserver_port.to_string()])
        // Images `up` builds live with its state, so `down` removes them too.
        .env("KEEL_TESTBED_CACHE", dir.join("image-cache"))
        .current_dir(util::workspace_root())
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("duplicate the log file")?)
        .stderr(log);
    // SAFETY: setsid(2) is async-signal-safe; it detaches the supervisor from our terminal and session.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().context("start the supervisor")?;
    let start = keel_testbed::process_start_time(child.id()).unwrap_or_default();
    fs::write(dir.join("supervisor.pid"), format!("{} {start}\n", child.id()))
        .context("write the supervisor pid")?;

    let state_path = dir.join("state.json");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !state_path.exists() {
        if let Some(status) = child.try_wait().context("watch the supervisor")? {
            let log = fs::read_to_string(&log_path).unwrap_or_default();
            let _ = down(instance);
            bail!("the supervisor exited ({status}) before Keel was up; its log:\n{log}");
        }
        if Instant::now() > deadline {
            let _ = down(instance);
            bail!("Keel was not up after 120 s; see {}", log_path.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let state: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&state_path).context("read the state file")?)
            .context("parse the state file")?;
    print_state(&state, &log_path, instance);
    Ok(())
}

fn print_state(state: &serde_json::Value, log_path: &Path, instance: &Instance) {
    let text = |value: &serde_json::Value| value.as_str().unwrap_or_default().to_owned();
    println!("Keel is up (supervisor pid {}).", state["supervisor"]);
    println!("  cluster network: fabric namespace {} (bridge 198.18.0.1/16)", text(&state["fabric"]));
    for node in state["nodes"].as_array().into_iter().flatten() {
        println!(
            "  {}: network namespace {}, address {}",
            text(&node["name"]),
            text(&node["netns"]),
            text(&node["address"])
        );
    }
    let registry = &state["registry"];
    let (cluster, local) = (text(&registry["cluster_address"]), text(&registry["local_address"]));
    let image = text(&registry["images"][0]);
    println!("  image registry: {cluster} on the fabric ({local} from this machine), holding {image}");
    let apiserver = &state["apiserver"];
    println!(
        "  keel-apiserver (embedded store): https://{} on the fabric (https://{} from this machine)",
        text(&apiserver["cluster_address"]),
        text(&apiserver["local_address"])
    );
    let kubeconfig = text(&apiserver["kubeconfig"]);
    println!("  kubeconfig: {kubeconfig} (kubernetes-admin, system:masters)");
    if let Some(identities) = state["kubeconfigs"].as_object() {
        println!("  component identities (cluster address, for what runs on the fabric):");
        for (component, path) in identities {
            println!("    {component}: {}", text(path));
        }
    }
    println!(
        "Node agents (kubelet, runtime, proxy, CNI) are not started yet: later issues add them to `up`."
    );
    println!("Try:");
    println!("  kubectl --kubeconfig {kubeconfig} get namespaces");
    if let Some(node) = state["nodes"].get(0) {
        println!("  nsenter --net=/run/netns/{} ip address show eth0", text(&node["netns"]));
    }
    println!("  skopeo inspect --tls-verify=false docker://{}", image.replacen(&cluster, &local, 1));
    println!("Log: {}", log_path.display());
    if instance.name == DEFAULT_NAME {
        println!("Stop and remove everything: cargo xtask down");
    } else {
        println!("Stop and remove everything: cargo xtask down --name {}", instance.name);
    }
}

/// The supervisor: holds the fixtures until SIGTERM/SIGINT/SIGHUP, then drops them.
pub fn supervise(args: &SuperviseArgs) -> Result<()> {
    // Block the stop signals before any thread exists, so every thread inherits the mask and the
    // signal is taken only by `wait` below.
    let mut signals = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        signals.add(signal);
    }
    signals.thread_block().context("block the stop signals")?;
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) only changes this process's own attribute.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error()).context("become a child subreaper");
    }

    args.instance.check()?;
    let fabric = Fabric::with_prefix(&args.instance.name)?;
    let mut nodes = Vec::new();
    for i in 1..=args.nodes {
        nodes.push(fabric.add_host(&format!("node{i}"))?);
    }
    // The cluster's image registry lives on the fabric, where every node reaches it; the machine
    // reaches it through a forwarder on its loopback.
    let registry_addr = SocketAddr::from((fabric.gateway(), 5000));
    let registry = Registry::start_in(Some(fabric.ns().fd()), registry_addr)?;
    let forwarder = Forwarder::start_on(
        SocketAddr::from((Ipv4Addr::LOCALHOST, args.registry_port)),
        fabric.ns().fd(),
        registry_addr,
    )
    .context("forward the registry to the machine's loopback (is the port free? see --registry-port)")?;
    // keel-apiserver on the embedded store, on the fabric where every node reaches it; the machine's
    // kubectl reaches it through a forwarder on its loopback, with a kubeconfig naming that address.
    let dir = args.instance.state_dir();
    let apiserver_addr = SocketAddr::from((fabric.gateway(), 6443));
    let apiserver_data = dir.join("apiserver");
    let binary = built_binary("keel-apiserver")?;
    let mut command = fabric.ns().command(&binary);
    command.arg("--data-dir").arg(&apiserver_data).args([
        "--bind-address",
        &fabric.gateway().to_string(),
        "--secure-port",
        "6443",
    ]);
    let ready = Readiness::InNetNs(fabric.ns().fd().clone(), Box::new(Readiness::Tcp(apiserver_addr)));
    let apiserver = Daemon::start("keel-apiserver", command, ready, Duration::from_secs(60))?;
    let api_forwarder = Forwarder::start_on(
        SocketAddr::from((Ipv4Addr::LOCALHOST, args.apiserver_port)),
        fabric.ns().fd(),
        apiserver_addr,
    )
    .context("forward keel-apiserver to the machine's loopback (is the port free? see --apiserver-port)")?;
    let kubeconfig = dir.join("kubeconfig");
    write_local_kubeconfig(
        &apiserver_data.join("admin.kubeconfig"),
        &kubeconfig,
        apiserver_addr,
        api_forwarder.local_addr(),
    )?;
    // Each component's own identity (kubeconfigs naming the cluster address the nodes reach).
    let node_names: Vec<String> = (1..=nodes.len()).map(|i| format!("node{i}")).collect();
    let identities = crate::identities::write_kubeconfigs(
        &apiserver_data.join("pki"),
        &format!("https://{apiserver_addr}"),
        &dir.join("kubeconfigs"),
        &node_names,
    )?;
    let busybox = images::busybox_image()?;
    registry::push_oci_layout_to(
        &forwarder.local_addr().to_string(),
        &busybox.layout,
        &busybox.tag,
        "busybox",
        "latest",
    )?;
    let state = json!({
        "supervisor": std::process::id(),
        "fabric": fabric.ns().name(),
        "registry": {
            "cluster_address": registry_addr.to_string(),
            "local_address": forwarder.local_addr().to_string(),
            "images": [format!("{registry_addr}/busybox:latest")],
            "busybox_digest": busybox.manifest_digest()?,
            "pid": registry.pid(),
        },
        "apiserver": {
            "cluster_address": apiserver_addr.to_string(),
            "local_address": api_forwarder.local_addr().to_string(),
            "kubeconfig": kubeconfig.display().to_string(),
            "pid": apiserver.pid(),
        },
        "kubeconfigs": identities.iter().map(|(c, p)| (c.clone(), json!(p.display().to_string()))).collect::<serde_json::Map<_, _>>(),
        "nodes": nodes.iter().enumerate().map(|(i, node)| json!({
            "name": format!("node{}", i + 1),
            "netns": node.name(),
            "address": node.address().to_string(),
        })).collect::<Vec<_>>(),
    });
    let tmp = dir.join("state.json.tmp");
    fs::write(&tmp, serde_json::to_vec_pretty(&state)?).context("write the state file")?;
    fs::rename(&tmp, dir.join("state.json")).context("publish the state file")?;
    eprintln!("supervisor: up: {state}");

    let signal = signals.wait().context("wait for a stop signal")?;
    eprintln!("supervisor: {signal:?}: stopping");
    drop(forwarder);
    drop(registry);
    drop(api_forwarder);
    drop(apiserver);
    drop(nodes);
    drop(fabric);
    let _ = fs::remove_file(dir.join("state.json"));
    eprintln!("supervisor: stopped");
    Ok(())
}

/// A workspace binary `up` built (`cargo build --bins`), in the target directory cargo uses.
fn built_binary(name: &str) -> Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| util::workspace_root().join("target"), PathBuf::from);
    let path = target.join("debug").join(name);
    if !path.exists() {
        bail!(
            "{} is not built: run `cargo build --workspace --bins` (or `cargo xtask up` without --no-build)",
            path.display()
        );
    }
    Ok(path)
}

/// The apiserver's admin kubeconfig with the machine's forwarded address instead of the fabric's
/// (the serving certificate names 127.0.0.1 too). It waits for the apiserver to have written it.
fn write_local_kubeconfig(
    admin: &Path,
    local: &Path,
    cluster: SocketAddr,
    forwarded: SocketAddr,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        match fs::read_to_string(admin) {
            Ok(text) => break text,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(error) => return Err(error).with_context(|| format!("read {}", admin.display())),
        }
    };
    let text = text.replace(&format!("https://{cluster}"), &format!("https://{forwarded}"));
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(local)
        .with_context(|| format!("create {}", local.display()))?;
    file.write_all(text.as_bytes()).with_context(|| format!("write {}", local.display()))
}

pub fn down(instance: &Instance) -> Result<()> {
    if !util::is_root() {
        bail!("cargo xtask down needs root");
    }
    instance.check()?;
    let dir = instance.state_dir();
    let mut removed = Vec::new();
    if let Some(pid) = running_supervisor(&dir) {
        let target = nix::unistd::Pid::from_raw(i32::try_from(pid).context("supervisor pid")?);
        let _ = nix::sys::signal::kill(target, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while keel_testbed::pid_alive(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if keel_testbed::pid_alive(pid) {
            eprintln!("down: the supervisor did not stop in 30 s: killing it");
            let _ = nix::sys::signal::kill(target, Signal::SIGKILL);
        }
        removed.push(format!("supervisor (pid {pid})"));
    }
    // What a crashed (or killed) supervisor could not remove: the processes it started carry it as their
    // owner, and it is gone now; then its namespaces.
    let orphans = keel_testbed::sweep_orphans();
    if orphans > 0 {
        removed.push(format!("{orphans} process(es) the supervisor left"));
    }
    for name in instance.namespaces()? {
        netns::remove_named(&name);
        removed.push(format!("netns {name}"));
    }
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("remove {}", dir.display()))?;
        removed.push(dir.display().to_string());
    }
    // The parent, once no instance is left in it.
    let _ = fs::remove_dir(keel_testbed::UP_STATE_DIR);
    if removed.is_empty() {
        println!("Keel was not up: nothing to remove.");
    } else {
        println!("removed: {}", removed.join(", "));
    }
    Ok(())
}
