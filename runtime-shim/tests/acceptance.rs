//! Issue 7's acceptance, over CRI against the keel-shim binary (root), on the suite's node
//! ([`SuiteNode`]: a testbed host, a registry with busybox, the reference CNI plugins):
//! - the CRI conformance suite ([`cri_suite::run_all`]) passes with crun as the pods' runtime handler;
//! - containers keep running across a keel-shim restart (SIGTERM to keel-shim alone, as a service
//!   manager stops it) and are re-adopted: same ids, states and statuses, ExecSync works, an exit while
//!   keel-shim was away and one after the restart are both reported with their exit codes;
//! - after RemovePodSandbox nothing of the pod is left: no file under `--root`, no mount, no process
//!   (monitor, init, pause) and no process inside the pod's or its containers' namespaces, no cgroup
//!   of its containers in any hierarchy, no runtime state, no IP allocation — under runc and crun, for
//!   a plain pod and for one sharing a PID namespace;
//! - bad input gets its gRPC code and leaves no directory, mount or runtime state behind.

use crate::cri_suite;

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use cri_suite::node::{Shim, SuiteNode};
use cri_suite::support::{
    self, container_config, container_status, create_container, create_container_raw, exec_sync, expect_code,
    list_containers, list_pods, pod_config, pod_status, remove_container, remove_pod, run_pod,
    start_container, stop_container, stop_pod, wait_state,
};
use cri_suite::{CriClient, Env, api, check};
use keel_shim::sandbox::check::{leftovers, namespace_holders, namespace_inodes};
use keel_testbed::containerd::PAUSE_REGISTRY;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tonic::Code;

const CRUN: &str = "crun=/usr/bin/crun";

/// How long a test waits for a state keel-shim or a container reaches by itself (a bound on failure,
/// never an assertion on time).
const WAIT: Duration = Duration::from_secs(20);

/// Not a current-thread runtime: a connection's tasks must run (and close it) between calls too, or
/// keel-shim's graceful shutdown waits for a client that never answers its GOAWAY.
fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?)
}

/// `Err(String)` of the suite's helpers as an anyhow error.
fn s<T>(result: Result<T, String>) -> Result<T> {
    result.map_err(|e| anyhow!(e))
}

fn rpc<T>(what: &str, result: Result<T, tonic::Status>) -> Result<T> {
    result.map_err(|status| anyhow!(support::rpc(what, &status)))
}

// ---------------------------------------------------------------------------------------------------
// 1. The suite under crun.

#[test]
fn keel_shim_suite_under_crun() -> Result<()> {
    let mut bed = SuiteNode::new()?;
    bed.env.runtime_handler = "crun".to_owned();
    let shim = Shim::start_with(Some(&bed.node), bed.net_d.path(), &[PAUSE_REGISTRY], &[CRUN])?;
    let results = runtime()?.block_on(async {
        let mut client = CriClient::connect(&shim.socket()).await?;
        anyhow::Ok(cri_suite::run_all(&mut client, &bed.env).await)
    })?;
    check("keel-shim with crun", &results, &[])
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("keel-shim log:\n{}", shim.daemon.log_tail(40)))?;
    // Every pod was removed: keel-shim has no child left (pause process or monitor).
    let children = children_of(i32::try_from(shim.daemon.pid())?);
    ensure!(children.is_empty(), "keel-shim's children after the suite: {children:?}");
    // Every container ran under crun: runc was never asked for anything.
    let runtimes = shim.root().join("runtime");
    ensure!(runtimes.join("crun").is_dir(), "no crun state directory under {}", runtimes.display());
    ensure!(!runtimes.join("runc").exists(), "runc was used: {} exists", runtimes.join("runc").display());
    Ok(())
}

// ---------------------------------------------------------------------------------------------------
// 2. A restart.

/// keel-shim as a service manager runs it: a process of its own, stopped by a SIGTERM to it alone. (A
/// testbed `Daemon` kills every descendant when it stops — the containers' monitors too, which must
/// outlive keel-shim.) Dropping it kills keel-shim if it still runs.
struct ServiceShim {
    child: Child,
    log: PathBuf,
}

impl ServiceShim {
    /// keel-shim in the node's network namespace with its socket and root in `dir`, ready once its
    /// socket accepts.
    fn start(bed: &SuiteNode, dir: &Path) -> Result<ServiceShim> {
        let mut cmd = Shim::command(dir, bed.net_d.path(), &[PAUSE_REGISTRY], &[]);
        bed.node.fd().enter_on_spawn(&mut cmd);
        let log = dir.join("keel-shim.log");
        let file = OpenOptions::new().create(true).append(true).open(&log)?;
        cmd.stdin(Stdio::null()).stdout(file.try_clone()?).stderr(file).process_group(0);
        cmd.env("RUST_LOG", "info");
        let child = cmd.spawn().context("starting keel-shim")?;
        let mut shim = ServiceShim { child, log };
        let socket = Shim::socket_in(dir);
        let deadline = Instant::now() + WAIT;
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if let Some(status) = shim.child.try_wait()? {
                bail!("keel-shim exited with {status} before it was ready:\n{}", shim.log_tail());
            }
            ensure!(Instant::now() < deadline, "keel-shim is not ready after {WAIT:?}:\n{}", shim.log_tail());
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(shim)
    }

    /// SIGTERM to keel-shim alone; its exit status once it exited.
    fn terminate(&mut self) -> Result<ExitStatus> {
        kill(Pid::from_raw(i32::try_from(self.child.id())?), Signal::SIGTERM)?;
        Ok(self.child.wait()?)
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for ServiceShim {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What a test that runs keel-shim outside a testbed `Daemon` must clean up if it fails: the monitors
/// of containers under `root` (found by their command line), the runtimes' containers, and mounts
/// under `dir`.
struct RootGuard {
    dir: PathBuf,
    root: PathBuf,
}

impl Drop for RootGuard {
    fn drop(&mut self) {
        let mut monitors = monitors_under(&self.root);
        for &pid in &monitors {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        // The pods' pause processes (setsid'd too), as their records name them.
        for entry in std::fs::read_dir(self.root.join("sandboxes")).into_iter().flatten().flatten() {
            let record = std::fs::read(entry.path().join("sandbox.json")).unwrap_or_default();
            let Ok(record) = serde_json::from_slice::<serde_json::Value>(&record) else { continue };
            let pid = record["pause"]["pid"].as_i64().and_then(|pid| i32::try_from(pid).ok());
            if let Some(pid) = pid
                && u32::try_from(pid).ok().and_then(keel_testbed::process_start_time)
                    == record["pause"]["start_time"].as_u64()
            {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                monitors.push(pid);
            }
        }
        for handler in ["runc", "crun"] {
            let state = self.root.join("runtime").join(handler);
            for id in runtime_containers(&state) {
                let _ =
                    Command::new(handler).arg("--root").arg(&state).args(["delete", "--force", &id]).output();
            }
        }
        reap(&monitors);
        unmount_under(&self.dir);
    }
}

/// Pids of keel-shim monitors whose command line names a path under `root`.
fn monitors_under(root: &Path) -> Vec<i32> {
    let root = root.to_string_lossy().into_owned();
    processes(|args| args.iter().any(|a| a == "monitor") && args.iter().any(|a| a.starts_with(&root)))
}

/// The pid of the monitor of container `id`, if one runs.
fn monitor_of(id: &str) -> Option<i32> {
    processes(|args| args.iter().any(|a| a == "monitor") && args.iter().any(|a| a == id)).first().copied()
}

/// The children of `parent` (zombies too), with their command lines.
fn children_of(parent: i32) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok());
        if ppid == Some(parent) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

/// Pids (not this process) whose command line satisfies `matches`.
fn processes(matches: impl Fn(&[String]) -> bool) -> Vec<i32> {
    let me = i32::try_from(std::process::id()).unwrap_or_default();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let args: Vec<String> =
            raw.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if pid != me && matches(&args) {
            found.push(pid);
        }
    }
    found
}

/// Reaps those of `pids` that are (or become, as orphans of keel-shim) children of this process (a
/// subreaper: the testbed made it one), for up to a few seconds.
fn reap(pids: &[i32]) {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut pending = pids.to_vec();
    while !pending.is_empty() && Instant::now() < deadline {
        pending.retain(|&pid| {
            matches!(waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)), Ok(WaitStatus::StillAlive))
        });
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The containers an OCI runtime keeps in its state directory `state` (one directory each).
fn runtime_containers(state: &Path) -> Vec<String> {
    std::fs::read_dir(state)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect()
}

/// Mount points of this process's mount namespace under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| *point == prefix || point.starts_with(&format!("{prefix}/")))
        .map(str::to_owned)
        .collect()
}

fn unmount_under(dir: &Path) {
    let mut points = mounts_under(dir);
    points.sort();
    for point in points.iter().rev() {
        let _ = nix::mount::umount2(point.as_str(), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// The containers `<handler> --root DIR/runtime/<handler> list -q` reports (none when it has no state
/// directory yet).
fn listed_by_runtime(handler: &str, root: &Path) -> Result<Vec<String>> {
    let state = root.join("runtime").join(handler);
    if !state.exists() {
        return Ok(Vec::new());
    }
    let mut cmd = Command::new(format!("/usr/bin/{handler}"));
    cmd.arg("--root").arg(&state).args(["list", "-q"]);
    if handler == "crun" {
        hide_cgroup2(&mut cmd);
    }
    let output = cmd.output()?;
    ensure!(output.status.success(), "{handler} list: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect())
}

/// The init pid of container `id` as `<runtime> state` reports it (0 when it does not run).
fn init_pid(handler: &str, root: &Path, id: &str) -> Result<i32> {
    let mut cmd = Command::new(format!("/usr/bin/{handler}"));
    cmd.arg("--root").arg(root.join("runtime").join(handler)).args(["state", id]);
    if handler == "crun" {
        hide_cgroup2(&mut cmd);
    }
    let output = cmd.output()?;
    ensure!(output.status.success(), "{handler} state {id}: {}", String::from_utf8_lossy(&output.stderr));
    let state: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    Ok(i32::try_from(state["pid"].as_i64().unwrap_or_default())?)
}

/// crun refuses this machine's hybrid cgroups unless the cgroup2 mount is out of its sight.
fn hide_cgroup2(cmd: &mut Command) {
    // SAFETY: only raw syscalls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let none = std::ptr::null();
            libc::mount(c"none".as_ptr(), c"/".as_ptr(), none, libc::MS_REC | libc::MS_SLAVE, none.cast());
            libc::umount2(c"/sys/fs/cgroup/unified".as_ptr(), libc::MNT_DETACH);
            Ok(())
        });
    }
}

/// Whether `pid` still is the process that started at `start` (and has not exited).
fn alive(pid: i32, start: u64) -> bool {
    let Ok(pid) = u32::try_from(pid) else { return false };
    if keel_testbed::process_start_time(pid) != Some(start) {
        return false;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The state after the command's closing parenthesis: a zombie has exited.
    !stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
}

fn start_of(pid: i32) -> Result<u64> {
    keel_testbed::process_start_time(u32::try_from(pid)?).with_context(|| format!("process {pid} is gone"))
}

/// Polls `f` until it holds (bounded by [`WAIT`]).
fn eventually(what: &str, mut f: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + WAIT;
    while !f() {
        ensure!(Instant::now() < deadline, "{what}: not after {WAIT:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// A pod config as the kubelet sends it for a pod without `shareProcessNamespace` (each container its
/// own PID namespace; keel-testbed's config shares one).
fn plain_pod(env: &Env, base: &str) -> Result<api::PodSandboxConfig> {
    let mut pod = s(pod_config(env, base))?;
    set_pid_mode(&mut pod, api::NamespaceMode::Container);
    Ok(pod)
}

fn set_pid_mode(pod: &mut api::PodSandboxConfig, mode: api::NamespaceMode) {
    let linux = pod.linux.get_or_insert_with(Default::default);
    let security = linux.security_context.get_or_insert_with(Default::default);
    security.namespace_options.get_or_insert_with(Default::default).pid = mode as i32;
}

async fn connect(dir: &Path) -> Result<CriClient> {
    CriClient::connect(&Shim::socket_in(dir)).await
}

/// A busybox container that says hello, then exits 7 on SIGTERM after saying bye.
const TERM_SEVEN: &[&str] =
    &["sh", "-c", "trap 'echo bye; exit 7' TERM; echo hello; while true; do sleep 1; done"];
/// A busybox container that exits 5 once `/tmp/go` exists.
const GO_FIVE: &[&str] = &["sh", "-c", "until [ -e /tmp/go ]; do sleep 1; done; exit 5"];

#[test]
fn containers_keep_running_across_a_sigterm_restart_and_are_readopted() -> Result<()> {
    containers_survive_a_restart(Signal::SIGTERM)
}

#[test]
fn containers_keep_running_across_a_crash_and_are_readopted() -> Result<()> {
    containers_survive_a_restart(Signal::SIGKILL)
}

/// A pod with a running container (a), one that exits while keel-shim is away (b) and one only created
/// (c); keel-shim stopped by `signal`, then started again on the same root.
fn containers_survive_a_restart(signal: Signal) -> Result<()> {
    let bed = SuiteNode::new()?;
    let dir = tempfile::Builder::new().prefix("keel-shim-").tempdir()?;
    let root = Shim::root_in(dir.path());
    let _guard = RootGuard { dir: dir.path().to_owned(), root: root.clone() };
    let rt = runtime()?;
    let env = &bed.env;

    let mut first = ServiceShim::start(&bed, dir.path())?;
    let (pod_id, [a, b, c], pod_before, a_before, c_before) = rt
        .block_on(async {
            let mut client = connect(dir.path()).await?;
            rpc("PullImage", cri_suite::image::pull(&mut client, &env.image).await)?;
            let pod = plain_pod(env, "restart")?;
            let pod_id = s(run_pod(&mut client, env, &pod).await)?;
            let a =
                s(support::run_container(&mut client, env, &pod_id, &pod, "readopted", TERM_SEVEN).await)?;
            let b = s(support::run_container(&mut client, env, &pod_id, &pod, "exits-away", GO_FIVE).await)?;
            let c_config = container_config(env, "created", &["sh", "-c", "exit 3"]);
            let c = s(create_container(&mut client, &pod_id, &pod, &c_config).await)?;
            let a_before = rpc("ContainerStatus", container_status(&mut client, &a).await)?;
            let c_before = rpc("ContainerStatus", container_status(&mut client, &c).await)?;
            let pod_before = rpc("PodSandboxStatus", pod_status(&mut client, &pod_id).await)?;
            anyhow::Ok((pod_id, [a, b, c], pod_before, a_before, c_before))
        })
        .with_context(|| first.log_tail())?;
    ensure!(a_before.state() == api::ContainerState::ContainerRunning, "{a} is {:?}", a_before.state());
    ensure!(c_before.state() == api::ContainerState::ContainerCreated, "{c} is {:?}", c_before.state());
    let ids = [&a, &b, &c];
    let mut monitors = Vec::new();
    for id in ids {
        let pid = monitor_of(id).with_context(|| format!("no monitor of {id}"))?;
        monitors.push((pid, start_of(pid)?));
    }
    let mut held = Vec::new();
    let pod_inodes = pod_namespaces(&root, &pod_id, &mut held);

    if signal == Signal::SIGTERM {
        let status = first.terminate()?;
        ensure!(status.success(), "keel-shim exited with {status} on SIGTERM:\n{}", first.log_tail());
    } else {
        kill(Pid::from_raw(i32::try_from(first.child.id())?), signal)?;
        first.child.wait()?;
    }
    for (pid, start) in &monitors {
        ensure!(alive(*pid, *start), "monitor {pid} died with keel-shim");
    }
    // While keel-shim is away, b exits: its monitor records the exit and goes.
    std::fs::write(root.join("rootfs").join(&b).join("merged/tmp/go"), "")?;
    eventually("b's monitor exits", || !alive(monitors[1].0, monitors[1].1))?;
    reap(&[monitors[1].0]);

    let second = ServiceShim::start(&bed, dir.path())?;
    rt.block_on(async {
        let mut client = connect(dir.path()).await?;
        let pods = s(list_pods(&mut client, None).await)?;
        ensure!(pods.iter().map(|p| &p.id).eq([&pod_id]), "pods after the restart: {pods:?}");
        let pod_after = rpc("PodSandboxStatus", pod_status(&mut client, &pod_id).await)?;
        ensure!(pod_after == pod_before, "the pod's status changed: {pod_before:?} → {pod_after:?}");
        let containers = s(list_containers(&mut client, None).await)?;
        let states: BTreeSet<(String, api::ContainerState)> =
            containers.iter().map(|c| (c.id.clone(), c.state())).collect();
        let expected = BTreeSet::from([
            (a.clone(), api::ContainerState::ContainerRunning),
            (b.clone(), api::ContainerState::ContainerExited),
            (c.clone(), api::ContainerState::ContainerCreated),
        ]);
        ensure!(states == expected, "containers after the restart: {states:?}, expected {expected:?}");
        let a_after = rpc("ContainerStatus", container_status(&mut client, &a).await)?;
        ensure!(a_after == a_before, "a's status changed: {a_before:?} → {a_after:?}");
        let c_after = rpc("ContainerStatus", container_status(&mut client, &c).await)?;
        ensure!(c_after == c_before, "c's status changed: {c_before:?} → {c_after:?}");
        let b_after = rpc("ContainerStatus", container_status(&mut client, &b).await)?;
        ensure!(
            b_after.exit_code == 5 && b_after.reason == "Error" && b_after.finished_at > b_after.started_at,
            "b exited while keel-shim was away: {b_after:?}"
        );

        let echoed = rpc("ExecSync", exec_sync(&mut client, &a, &["echo", "still here"], 10).await)?;
        ensure!(
            echoed.exit_code == 0 && echoed.stdout == b"still here\n",
            "ExecSync in the re-adopted container: {echoed:?}"
        );
        // The monitor still serves its control socket: the log is reopened after a rotation.
        let log = PathBuf::from(&a_after.log_path);
        let rotated = log.with_extension("log.1");
        std::fs::rename(&log, &rotated)?;
        let request = api::ReopenContainerLogRequest { container_id: a.clone() };
        rpc("ReopenContainerLog", client.runtime.reopen_container_log(request).await)?;
        let killed = rpc("ExecSync", exec_sync(&mut client, &a, &["sh", "-c", "kill 1"], 10).await)?;
        ensure!(killed.exit_code == 0, "kill 1: {killed:?}");
        let exited = s(wait_state(&mut client, &a, api::ContainerState::ContainerExited).await)?;
        ensure!(exited.exit_code == 7 && exited.reason == "Error", "a's exit: {exited:?}");
        let (before, after) = (std::fs::read_to_string(&rotated)?, std::fs::read_to_string(&log)?);
        ensure!(
            before.lines().any(|l| l.ends_with(" stdout F hello"))
                && after.lines().any(|l| l.ends_with(" stdout F bye")),
            "a's log before the rotation {before:?}, after {after:?}"
        );

        // The created container starts under the new keel-shim and its exit is seen.
        rpc("StartContainer", start_container(&mut client, &c).await)?;
        let c_exited = s(wait_state(&mut client, &c, api::ContainerState::ContainerExited).await)?;
        ensure!(c_exited.exit_code == 3, "c's exit: {c_exited:?}");

        for id in ids {
            rpc("StopContainer", stop_container(&mut client, id, 0).await)?;
            rpc("RemoveContainer", remove_container(&mut client, id).await)?;
        }
        rpc("StopPodSandbox", stop_pod(&mut client, &pod_id).await)?;
        rpc("RemovePodSandbox", remove_pod(&mut client, &pod_id).await)?;
        let left = s(list_containers(&mut client, None).await)?;
        ensure!(left.is_empty(), "containers left: {left:?}");
        anyhow::Ok(())
    })
    .with_context(|| format!("second keel-shim's log:\n{}", second.log_tail()))?;
    // The monitors of the first keel-shim are this process's orphans now (it is a subreaper).
    let pids: Vec<i32> = monitors.iter().map(|(pid, _)| *pid).collect();
    reap(&pids);
    let mut left = leftovers(&root, &pod_id, None);
    left.extend(namespace_holders(&pod_inodes));
    for (pid, start) in &monitors {
        if u32::try_from(*pid).ok().and_then(keel_testbed::process_start_time) == Some(*start) {
            left.push(format!("monitor {pid}"));
        }
    }
    for id in ids {
        for dir in [root.join("containers").join(id), root.join("rootfs").join(id)] {
            if dir.exists() {
                left.push(dir.display().to_string());
            }
        }
    }
    left.extend(listed_by_runtime("runc", &root)?);
    left.extend(mounts_under(&root));
    ensure!(left.is_empty(), "left after the removal: {left:#?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------------------
// 3. Nothing left after RemovePodSandbox.

/// The cgroup hierarchies mounted here (v1 controllers and the v2 one).
fn cgroup_mounts() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fstype = after.split(' ').next()?;
            let point = before.split(' ').nth(4)?;
            matches!(fstype, "cgroup" | "cgroup2").then(|| PathBuf::from(point))
        })
        .collect()
}

/// Removes the pod cgroup parent `parent` from every hierarchy when the test ends (the kubelet's job:
/// it made it). Its children were asserted gone; a leftover one is removed first.
struct CgroupParent(String);

impl Drop for CgroupParent {
    fn drop(&mut self) {
        for mount in cgroup_mounts() {
            let dir = mount.join(self.0.trim_start_matches('/'));
            for child in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if child.path().is_dir() {
                    let _ = std::fs::remove_dir(child.path());
                }
            }
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

/// The namespaces of `pid` (as `kind:inode`) that are not this test process's own, each held open in
/// `held`: a namespace freed meanwhile could otherwise give its inode number to a new one (another
/// test's) and make the check see that one's processes.
fn private_namespaces(pid: i32, held: &mut Vec<std::fs::File>) -> BTreeSet<(String, u64)> {
    let mut found = BTreeSet::new();
    for kind in ["net", "ipc", "uts", "pid", "mnt", "cgroup"] {
        let own = std::fs::metadata(format!("/proc/self/ns/{kind}")).map(|m| m.ino()).ok();
        if let Ok(file) = std::fs::File::open(format!("/proc/{pid}/ns/{kind}"))
            && let Ok(meta) = file.metadata()
            && Some(meta.ino()) != own
        {
            found.insert((kind.to_owned(), meta.ino()));
            held.push(file);
        }
    }
    found
}

/// The pod's namespaces (`sandbox::check::namespace_inodes`), held open for the same reason.
fn pod_namespaces(root: &Path, id: &str, held: &mut Vec<std::fs::File>) -> Vec<u64> {
    let dir = root.join("sandboxes").join(id).join("ns");
    held.extend(["net", "ipc", "uts"].iter().filter_map(|kind| std::fs::File::open(dir.join(kind)).ok()));
    namespace_inodes(root, id)
}

/// Every process inside one of `namespaces`.
fn inside(namespaces: &BTreeSet<(String, u64)>) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        for (kind, ino) in namespaces {
            if std::fs::metadata(format!("/proc/{pid}/ns/{kind}")).is_ok_and(|m| m.ino() == *ino) {
                found.push(format!("{pid} in {kind}:[{ino}]"));
            }
        }
    }
    found
}

/// The pause process of a pod from its verbose status (pid, start time), if it has one.
async fn pause_of(client: &mut CriClient, id: &str) -> Result<Option<(i32, u64)>> {
    let request = api::PodSandboxStatusRequest { pod_sandbox_id: id.to_owned(), verbose: true };
    let info = rpc("PodSandboxStatus", client.runtime.pod_sandbox_status(request).await)?.into_inner().info;
    let doc: serde_json::Value = serde_json::from_str(info.get("info").context("no verbose info")?)?;
    let pid = i32::try_from(doc["pid"].as_i64().unwrap_or_default())?;
    Ok(if pid == 0 { None } else { Some((pid, start_of(pid)?)) })
}

/// Runs a pod (sharing a PID namespace when `shared_pid`) with two containers under `handler`, removes
/// it with RemovePodSandbox (after StopPodSandbox unless `stop_first` is false), and asserts that
/// nothing of it is left.
async fn remove_leaves_nothing(
    client: &mut CriClient,
    env: &Env,
    root: &Path,
    handler: &str,
    shared_pid: bool,
    stop_first: bool,
    parents: &mut Vec<CgroupParent>,
) -> Result<()> {
    let mut pod = s(pod_config(env, if shared_pid { "shared-pid" } else { "plain" }))?;
    let parent = format!("/keel-accept-{}", keel_testbed::unique_prefix());
    parents.push(CgroupParent(parent.clone()));
    let linux = pod.linux.get_or_insert_with(Default::default);
    linux.cgroup_parent.clone_from(&parent);
    set_pid_mode(&mut pod, if shared_pid { api::NamespaceMode::Pod } else { api::NamespaceMode::Container });
    let pod_id = s(run_pod(client, env, &pod).await)?;
    let mut ids = Vec::new();
    for base in ["first", "second"] {
        ids.push(s(support::run_container(client, env, &pod_id, &pod, base, &["sleep", "1000"]).await)?);
    }
    let pause = pause_of(client, &pod_id).await?;
    ensure!(
        pause.is_some() == shared_pid,
        "pause process {pause:?} of a pod sharing its PID namespace: {shared_pid}"
    );
    let mut held = Vec::new();
    let pod_inodes = pod_namespaces(root, &pod_id, &mut held);
    ensure!(pod_inodes.len() == 3, "the pod's namespaces: {pod_inodes:?}");
    let mut processes: Vec<(String, i32, u64)> = Vec::new();
    let mut namespaces = BTreeSet::new();
    for id in &ids {
        let init = init_pid(handler, root, id)?;
        let monitor = monitor_of(id).with_context(|| format!("no monitor of {id}"))?;
        for (what, pid) in [(format!("init of {id}"), init), (format!("monitor of {id}"), monitor)] {
            processes.push((what, pid, start_of(pid)?));
        }
        namespaces.extend(private_namespaces(init, &mut held));
        let cgroup = format!("{parent}/{id}");
        ensure!(
            cgroup_mounts().iter().any(|m| m.join(cgroup.trim_start_matches('/')).is_dir()),
            "container {id} has no cgroup {cgroup}"
        );
    }
    if let Some((pid, start)) = pause {
        processes.push(("pause".to_owned(), pid, start));
        namespaces.extend(private_namespaces(pid, &mut held));
    }

    if stop_first {
        rpc("StopPodSandbox", stop_pod(client, &pod_id).await)?;
    }
    rpc("RemovePodSandbox", remove_pod(client, &pod_id).await)?;

    let mut left = leftovers(root, &pod_id, pause);
    left.extend(namespace_holders(&pod_inodes).into_iter().map(|h| format!("process {h} in the pod")));
    left.extend(inside(&namespaces));
    for (what, pid, start) in &processes {
        // A zombie is left too: nothing here reaps for keel-shim (PID 1 reaps nothing).
        if u32::try_from(*pid).ok().and_then(keel_testbed::process_start_time) == Some(*start) {
            let state = if alive(*pid, *start) { "runs" } else { "is a zombie" };
            left.push(format!("{what} ({pid}) {state}"));
        }
    }
    let mut names = vec![pod_id.clone()];
    names.extend(ids.iter().cloned());
    for point in mounts_under(root) {
        if names.iter().any(|n| point.contains(n.as_str())) {
            left.push(format!("mount {point}"));
        }
    }
    for id in &ids {
        for dir in [root.join("containers").join(id), root.join("rootfs").join(id)] {
            if dir.exists() {
                left.push(format!("{}", dir.display()));
            }
        }
        for mount in cgroup_mounts() {
            let dir = mount.join(parent.trim_start_matches('/')).join(id);
            if dir.exists() {
                left.push(format!("cgroup {}", dir.display()));
            }
        }
        if listed_by_runtime(handler, root)?.contains(id) {
            left.push(format!("{handler} lists {id}"));
        }
    }
    for mount in cgroup_mounts() {
        let dir = mount.join(parent.trim_start_matches('/'));
        for child in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if child.path().is_dir() {
                left.push(format!("cgroup {}", child.path().display()));
            }
        }
    }
    let held = env.ipam_dir.as_deref().map(support::allocations).unwrap_or_default();
    left.extend(held.iter().filter(|(_, owner)| *owner == pod_id).map(|(ip, _)| format!("address {ip}")));
    let listed = s(list_pods(client, None).await)?;
    if listed.iter().any(|p| p.id == pod_id) {
        left.push("still listed".to_owned());
    }
    ensure!(left.is_empty(), "pod {pod_id} ({handler}, shared PID: {shared_pid}) left {left:#?}");
    Ok(())
}

fn removed_pods_leave_nothing(handler: &str) -> Result<()> {
    // Removed once keel-shim (and what it forked) is gone: declared before it.
    let mut parents = Vec::new();
    let mut bed = SuiteNode::new()?;
    bed.env.runtime_handler = handler.to_owned();
    let shim = Shim::start_with(Some(&bed.node), bed.net_d.path(), &[PAUSE_REGISTRY], &[CRUN])?;
    let root = shim.root();
    runtime()?
        .block_on(async {
            let mut client = CriClient::connect(&shim.socket()).await?;
            rpc("PullImage", cri_suite::image::pull(&mut client, &bed.env.image).await)?;
            remove_leaves_nothing(&mut client, &bed.env, &root, handler, false, true, &mut parents).await?;
            remove_leaves_nothing(&mut client, &bed.env, &root, handler, true, false, &mut parents).await?;
            remove_leaves_nothing(&mut client, &bed.env, &root, handler, true, true, &mut parents).await?;
            let mounts = mounts_under(&root);
            ensure!(mounts.is_empty(), "mounts left under the root: {mounts:?}");
            anyhow::Ok(())
        })
        .with_context(|| format!("keel-shim log:\n{}", shim.daemon.log_tail(40)))
}

#[test]
fn removed_pods_leave_nothing_under_runc() -> Result<()> {
    removed_pods_leave_nothing("runc")
}

#[test]
fn removed_pods_leave_nothing_under_crun() -> Result<()> {
    removed_pods_leave_nothing("crun")
}

// ---------------------------------------------------------------------------------------------------
// 4. Bad input.

/// What a refused request must not change: the container and rootfs directories, the mounts under the
/// root, the runtime's containers.
#[derive(Debug, PartialEq, Eq)]
struct Traces {
    containers: BTreeSet<String>,
    rootfs: BTreeSet<String>,
    mounts: BTreeSet<String>,
    runtime: BTreeSet<String>,
    runtime_logs: BTreeSet<String>,
}

impl Traces {
    fn of(root: &Path) -> Traces {
        let names = |dir: PathBuf| -> BTreeSet<String> {
            std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .collect()
        };
        Traces {
            containers: names(root.join("containers")),
            rootfs: names(root.join("rootfs")),
            mounts: mounts_under(root).into_iter().collect(),
            runtime: listed_by_runtime("runc", root)
                .unwrap_or_else(|e| vec![e.to_string()])
                .into_iter()
                .collect(),
            runtime_logs: names(root.join("runtime/runc.logs")),
        }
    }
}

/// Records a problem unless `result` is Ok and `now` equals `expected`.
fn judge(
    problems: &mut Vec<String>,
    expected: &Traces,
    what: &str,
    result: Result<(), String>,
    now: &Traces,
) {
    if let Err(e) = result {
        problems.push(format!("{what}: {e}"));
    }
    if now != expected {
        problems.push(format!("{what} left traces: {now:?}, before {expected:?}"));
    }
}

#[test]
fn bad_input_gets_its_code_and_leaves_nothing() -> Result<()> {
    let bed = SuiteNode::new()?;
    let shim = Shim::start_in(Some(&bed.node), bed.net_d.path(), &[PAUSE_REGISTRY])?;
    let root = shim.root();
    let env = &bed.env;
    runtime()?
        .block_on(async {
            let mut client = CriClient::connect(&shim.socket()).await?;
            rpc("PullImage", cri_suite::image::pull(&mut client, &env.image).await)?;
            let pod = plain_pod(env, "bad")?;
            let pod_id = s(run_pod(&mut client, env, &pod).await)?;
            // A running container, so that the traces are not trivially empty.
            let running =
                s(support::run_container(&mut client, env, &pod_id, &pod, "ok", &["sleep", "1000"]).await)?;
            let before = Traces::of(&root);
            ensure!(before.containers.contains(&running) && !before.mounts.is_empty(), "{before:?}");
            let unknown = "e".repeat(64);
            let file = env.scratch.join(support::unique("a-file"));
            std::fs::write(&file, "not a directory")?;

            let mut problems = Vec::new();
            let mut config = container_config(env, "invalid", &["true"]);
            config.image =
                Some(api::ImageSpec { image: "Invalid_Reference:!!".to_owned(), ..Default::default() });
            let result = create_container_raw(&mut client, &pod_id, &pod, &config).await;
            judge(
                &mut problems,
                &before,
                "an invalid image reference",
                expect_code("CreateContainer", result, Code::InvalidArgument),
                &Traces::of(&root),
            );

            let mut config = container_config(env, "missing", &["true"]);
            config.image = Some(api::ImageSpec { image: env.missing_image.clone(), ..Default::default() });
            let result = create_container_raw(&mut client, &pod_id, &pod, &config).await;
            judge(
                &mut problems,
                &before,
                "a missing image",
                expect_code("CreateContainer", result, Code::NotFound),
                &Traces::of(&root),
            );

            let config = container_config(env, "unknown-pod", &["true"]);
            let result = create_container_raw(&mut client, &unknown, &pod, &config).await;
            judge(
                &mut problems,
                &before,
                "an unknown pod",
                expect_code("CreateContainer", result, Code::NotFound),
                &Traces::of(&root),
            );

            let mut config = container_config(env, "under-a-file", &["true"]);
            config.mounts.push(api::Mount {
                container_path: "/mnt/host".to_owned(),
                host_path: file.join("sub").to_string_lossy().into_owned(),
                ..Default::default()
            });
            let result = create_container_raw(&mut client, &pod_id, &pod, &config).await;
            judge(
                &mut problems,
                &before,
                "a host path that cannot be created",
                expect_code("CreateContainer", result, Code::FailedPrecondition),
                &Traces::of(&root),
            );

            let mut config = container_config(env, "relative", &["true"]);
            config.mounts.push(api::Mount {
                container_path: "relative".to_owned(),
                host_path: env.scratch.to_string_lossy().into_owned(),
                ..Default::default()
            });
            let result = create_container_raw(&mut client, &pod_id, &pod, &config).await;
            judge(
                &mut problems,
                &before,
                "a relative container path",
                expect_code("CreateContainer", result, Code::InvalidArgument),
                &Traces::of(&root),
            );

            let mut config = container_config(env, "twice", &["true"]);
            config.metadata = Some(api::ContainerMetadata { name: "ok-taken".to_owned(), attempt: 0 });
            let first = s(create_container(&mut client, &pod_id, &pod, &config).await)?;
            let taken = Traces::of(&root);
            let result = create_container_raw(&mut client, &pod_id, &pod, &config).await;
            let code = expect_code("CreateContainer", result, Code::AlreadyExists);
            judge(&mut problems, &taken, "the name of an existing container", code, &Traces::of(&root));
            rpc("RemoveContainer", remove_container(&mut client, &first).await)?;
            judge(&mut problems, &before, "a created container removed", Ok(()), &Traces::of(&root));

            let result = start_container(&mut client, &unknown).await;
            judge(
                &mut problems,
                &before,
                "StartContainer of an unknown id",
                expect_code("StartContainer", result, Code::NotFound),
                &Traces::of(&root),
            );
            // Idempotent, as the CRI says and critest v1.34 checks: success, and nothing made.
            let result = stop_container(&mut client, &unknown, 0).await;
            judge(
                &mut problems,
                &before,
                "StopContainer of an unknown id",
                result.map(|_| ()).map_err(|s| format!("StopContainer: {s:?}")),
                &Traces::of(&root),
            );
            let result = container_status(&mut client, &unknown).await;
            judge(
                &mut problems,
                &before,
                "ContainerStatus of an unknown id",
                expect_code("ContainerStatus", result, Code::NotFound),
                &Traces::of(&root),
            );
            let result = exec_sync(&mut client, &unknown, &["true"], 5).await;
            judge(
                &mut problems,
                &before,
                "ExecSync in an unknown id",
                expect_code("ExecSync", result, Code::NotFound),
                &Traces::of(&root),
            );

            // A command the image lacks: refused at create or at start; either way, once removed,
            // nothing of it is left.
            let config = container_config(env, "no-such-command", &["/no/such/command"]);
            match create_container_raw(&mut client, &pod_id, &pod, &config).await {
                Err(_) => {
                    judge(&mut problems, &before, "a missing command (create)", Ok(()), &Traces::of(&root));
                }
                Ok(id) => {
                    let started = start_container(&mut client, &id).await;
                    let status = container_status(&mut client, &id).await;
                    let removed = remove_container(&mut client, &id).await;
                    let result = match (started, status, removed) {
                        (Ok(()), _, _) => Err("StartContainer of a missing command succeeded".to_owned()),
                        (Err(_), Ok(status), Ok(()))
                            if status.state() == api::ContainerState::ContainerExited =>
                        {
                            Ok(())
                        }
                        (_, status, removed) => Err(format!("status {status:?}, removal {removed:?}")),
                    };
                    judge(
                        &mut problems,
                        &before,
                        "a missing command (start, then removal)",
                        result,
                        &Traces::of(&root),
                    );
                }
            }
            ensure!(problems.is_empty(), "{problems:#?}");
            s(support::remove_everything(&mut client).await)?;
            let mounts = mounts_under(&root);
            ensure!(mounts.is_empty(), "mounts left under the root: {mounts:?}");
            anyhow::Ok(())
        })
        .with_context(|| format!("keel-shim log:\n{}", shim.daemon.log_tail(40)))
}
