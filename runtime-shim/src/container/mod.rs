//! Containers: their records (`DIR/containers/<id>/container.json`), their lifecycle through an OCI
//! runtime and a [`crate::monitor`] per container, and what the CRI asks of them (status, list, exec,
//! attach, log reopening, resource updates, events).
//!
//! Each container's directory holds its record, `bundle/config.json` (the OCI spec, whose root is the
//! rootfs the caller mounted), the monitor's sockets, its log (`monitor.log`) and, once the container
//! exited, its exit file (`exit.json`). A container's exit is seen through its monitor: keel-shim waits
//! for the monitor (its child; or, after a restart, through a pidfd, which works for any process) and
//! then reads the exit file. [`Containers::open`] reloads the records and re-adopts every container
//! whose monitor still runs.

mod stream;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use k8s_cri::v1 as api;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::sync::{broadcast, watch};
use tonic::Status;

use crate::config::DEFAULT_HANDLER;
use crate::monitor::{self, ExitRecord};
use crate::oci::runtime::{ExecOptions, OciRuntime};

pub use stream::{Streams, TerminalSize};

/// What [`Containers::create`] needs (the CRI's CreateContainer, resolved by the caller: the image
/// looked up, the rootfs mounted, the OCI spec built).
#[derive(Debug, Clone)]
pub struct CreateRequest {
    /// The container id (64 hex digits, chosen by the caller).
    pub id: String,
    /// The pod sandbox's id.
    pub sandbox_id: String,
    /// The CRI metadata (name, attempt).
    pub metadata: api::ContainerMetadata,
    /// The image as ContainerStatus reports it (containerd 1.6: the image's first repo tag, else
    /// ContainerConfig.image as the kubelet sent it).
    pub image: api::ImageSpec,
    /// The image reference ContainerStatus reports (containerd 1.6: the first repo digest, else the id).
    pub image_ref: String,
    /// The image id (`sha256:<config digest>`).
    pub image_id: String,
    /// The container's labels.
    pub labels: HashMap<String, String>,
    /// The container's annotations.
    pub annotations: HashMap<String, String>,
    /// The CRI log file (pod log directory + ContainerConfig.log_path), if any.
    pub log_path: Option<PathBuf>,
    /// The OCI spec; its root path is replaced by `rootfs_mounted_at`.
    pub spec: oci_spec::runtime::Spec,
    /// The runtime handler (empty: the default).
    pub handler: String,
    /// Give the container a terminal.
    pub tty: bool,
    /// Keep the container's stdin open.
    pub stdin: bool,
    /// Close stdin after the first attach ends.
    pub stdin_once: bool,
    /// Where the caller mounted the rootfs (`DIR/containers/<id>/bundle/rootfs` by convention).
    pub rootfs_mounted_at: PathBuf,
    /// The CRI mounts, reported back by ContainerStatus.
    pub mounts: Vec<api::Mount>,
    /// The image's StopSignal (`SIGQUIT`, `QUIT`, `3`), if any.
    pub stop_signal: Option<String>,
}

/// A container's state, as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum State {
    Created,
    Running,
    Exited,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct MountRecord {
    container_path: String,
    host_path: String,
    readonly: bool,
    selinux_relabel: bool,
    propagation: i32,
}

/// The small monitor-only binary (`src/bin/keel-shim-monitor.rs`) keel-shim runs when it is installed
/// beside it.
pub const MONITOR_BINARY: &str = "keel-shim-monitor";

/// The record of `container.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    id: String,
    sandbox_id: String,
    name: String,
    attempt: u32,
    image: String,
    image_annotations: HashMap<String, String>,
    image_ref: String,
    image_id: String,
    labels: HashMap<String, String>,
    annotations: HashMap<String, String>,
    log_path: Option<PathBuf>,
    handler: String,
    runtime: PathBuf,
    tty: bool,
    stdin: bool,
    stdin_once: bool,
    rootfs: PathBuf,
    mounts: Vec<MountRecord>,
    stop_signal: Option<String>,
    state: State,
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    exit_code: i32,
    reason: String,
    message: String,
    monitor_pid: i32,
    pid: i32,
    /// The container shares a PID namespace (the pod's or the host's): a stop signals every process
    /// of its cgroup (`kill --all`), not only its init. In a PID namespace of its own, the init's
    /// death kills the rest (containerd's shim decides the same way). True for records written
    /// before the field existed.
    #[serde(default = "shared_pid_default")]
    shared_pid: bool,
}

fn shared_pid_default() -> bool {
    true
}

/// Whether `spec` puts its process in a PID namespace it does not create (none listed: the host's;
/// one with a path: the pod's).
fn shares_pid_namespace(spec: &oci_spec::runtime::Spec) -> bool {
    let namespaces = spec.linux().as_ref().and_then(|linux| linux.namespaces().clone()).unwrap_or_default();
    namespaces
        .iter()
        .find(|ns| ns.typ() == oci_spec::runtime::LinuxNamespaceType::Pid)
        .is_none_or(|ns| ns.path().is_some())
}

struct Entry {
    record: Mutex<Record>,
    /// Serializes create/start/remove of one container.
    op: tokio::sync::Mutex<()>,
    exited: watch::Sender<bool>,
}

impl Entry {
    fn record(&self) -> Record {
        self.record.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

struct Inner {
    dir: PathBuf,
    runtime_root: PathBuf,
    runtimes: BTreeMap<String, PathBuf>,
    monitor: PathBuf,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
    events: broadcast::Sender<api::ContainerEventResponse>,
    unmount: Mutex<Option<RootfsHook>>,
    sandbox_status: Mutex<Option<SandboxStatusHook>>,
}

/// Called by [`Containers::remove`] with the rootfs path before the container's directory goes.
pub type RootfsHook = Arc<dyn Fn(&Path) -> io::Result<()> + Send + Sync>;

/// Gives the status of a pod sandbox (by id) for container events.
pub type SandboxStatusHook = Arc<dyn Fn(&str) -> Option<api::PodSandboxStatus> + Send + Sync>;

/// The containers of one keel-shim (Clone: a handle).
#[derive(Clone)]
pub struct Containers {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Containers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Containers").field("dir", &self.inner.dir).finish_non_exhaustive()
    }
}

static EXEC_COUNTER: AtomicU64 = AtomicU64::new(0);

fn internal(context: &str, e: impl std::fmt::Display) -> Status {
    Status::internal(format!("{context}: {e}"))
}

fn save(dir: &Path, record: &Record) -> io::Result<()> {
    let path = dir.join("container.json");
    let tmp = dir.join("container.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(record).map_err(io::Error::other)?)?;
    std::fs::rename(tmp, path)
}

/// Parses a stop signal as an image's StopSignal spells it (`SIGTERM`, `TERM`, `15`).
pub fn parse_signal(name: &str) -> Option<i32> {
    let name = name.trim();
    if let Ok(n) = name.parse::<i32>() {
        return (1..=64).contains(&n).then_some(n);
    }
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
    full.parse::<nix::sys::signal::Signal>().ok().map(|s| s as i32)
}

fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open with integer arguments; the returned descriptor is ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(io::Error::other)?;
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether `pid` is the monitor of container `id` (and not a process that reused its pid).
fn is_monitor_of(pid: i32, id: &str) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
    args.contains(&&b"monitor"[..]) && args.contains(&id.as_bytes())
}

/// Whether `path` is a mount point (listed in this process's mountinfo).
fn is_mount_point(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let target = path.to_string_lossy();
    info.lines().any(|line| line.split(' ').nth(4).is_some_and(|mnt| mnt == target))
}

impl Containers {
    /// Opens the containers under `root` (`root/containers`, the runtimes' state in
    /// `root/runtime/<handler>`). The monitor is [`MONITOR_BINARY`] beside this executable when it is
    /// installed (one process per container: a small binary keeps its memory small), else this binary
    /// re-executed (`/proc/self/exe monitor ...`). Call it inside a tokio runtime: it watches the
    /// re-adopted containers' monitors.
    pub fn open(root: &Path, runtimes: &BTreeMap<String, PathBuf>) -> io::Result<Containers> {
        let sibling = std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|dir| dir.join(MONITOR_BINARY)))
            .filter(|path| path.is_file());
        let monitor = sibling.unwrap_or_else(|| PathBuf::from("/proc/self/exe"));
        Containers::open_with_monitor(root, runtimes, &monitor)
    }

    /// [`Containers::open`] with another keel-shim binary as the monitor (tests run from a test binary).
    pub fn open_with_monitor(
        root: &Path,
        runtimes: &BTreeMap<String, PathBuf>,
        monitor: &Path,
    ) -> io::Result<Containers> {
        // The monitor works in the container's directory: every path it is given must be absolute.
        let root = std::path::absolute(root)?;
        let runtimes = runtimes
            .iter()
            .map(|(handler, binary)| Ok((handler.clone(), std::path::absolute(binary)?)))
            .collect::<io::Result<BTreeMap<String, PathBuf>>>()?;
        let dir = root.join("containers");
        std::fs::create_dir_all(&dir)?;
        let runtime_root = root.join("runtime");
        std::fs::create_dir_all(&runtime_root)?;
        let (events, _) = broadcast::channel(1024);
        let containers = Containers {
            inner: Arc::new(Inner {
                dir: dir.clone(),
                runtime_root,
                runtimes,
                monitor: std::path::absolute(monitor)?,
                entries: Mutex::new(HashMap::new()),
                events,
                unmount: Mutex::new(None),
                sandbox_status: Mutex::new(None),
            }),
        };
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path().join("container.json");
            let record: Record = match std::fs::read(&path).map(|bytes| serde_json::from_slice(&bytes)) {
                Ok(Ok(record)) => record,
                Ok(Err(e)) => {
                    tracing::warn!("skipping {}: {e}", path.display());
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    containers.clean_up_interrupted_create(&entry.path());
                    continue;
                }
                Err(e) => return Err(e),
            };
            containers.adopt(record);
        }
        Ok(containers)
    }

    /// A container directory without a record is a create that keel-shim did not finish (it died
    /// meanwhile): the runtimes forget the container (its init dies, and its monitor with it) and the
    /// directory goes, unless a rootfs is still mounted in it (the image store's to unmount first).
    fn clean_up_interrupted_create(&self, dir: &Path) {
        let Some(id) = dir.file_name().and_then(|name| name.to_str()) else { return };
        for (handler, binary) in &self.inner.runtimes {
            if let Ok(runtime) = OciRuntime::new(binary, &self.inner.runtime_root.join(handler)) {
                let _ = runtime.delete(id, true);
            }
        }
        let rootfs = dir.join("bundle/rootfs");
        if is_mount_point(&rootfs) {
            tracing::warn!("{}: an unfinished container whose rootfs is still mounted; left", dir.display());
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(dir) {
            tracing::warn!("removing the unfinished container {}: {e}", dir.display());
        }
    }

    /// Sets what [`Containers::remove`] calls with the rootfs mount point (the image store's unmount).
    pub fn set_rootfs_unmounter(&self, hook: RootfsHook) {
        *self.inner.unmount.lock().unwrap_or_else(PoisonError::into_inner) = Some(hook);
    }

    /// Sets where container events get their pod's status (the sandbox store).
    pub fn set_sandbox_status(&self, hook: SandboxStatusHook) {
        *self.inner.sandbox_status.lock().unwrap_or_else(PoisonError::into_inner) = Some(hook);
    }

    fn adopt(&self, record: Record) {
        let id = record.id.clone();
        let live = record.state != State::Exited;
        let monitor_pid = record.monitor_pid;
        let (exited, _) = watch::channel(!live);
        let entry = Arc::new(Entry { record: Mutex::new(record), op: tokio::sync::Mutex::new(()), exited });
        self.inner
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.clone(), Arc::clone(&entry));
        if !live {
            return;
        }
        let pidfd = if is_monitor_of(monitor_pid, &id) { pidfd_open(monitor_pid).ok() } else { None };
        match pidfd {
            Some(pidfd) => self.watch(entry, Watch::Pidfd(pidfd)),
            None => on_monitor_exit(&self.inner, &entry),
        }
    }

    fn watch(&self, entry: Arc<Entry>, watch: Watch) {
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            match watch {
                Watch::Child(mut child) => {
                    let _ = child.wait().await;
                }
                Watch::Pidfd(pidfd) => {
                    // SAFETY: the AsyncFd owns the pidfd, so it stays open while registered.
                    let registered = unsafe {
                        tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE)
                    };
                    if let Ok(fd) = registered {
                        let _ = fd.readable().await;
                    }
                }
            }
            if let Some(inner) = Weak::upgrade(&inner) {
                on_monitor_exit(&inner, &entry);
            }
        });
    }

    fn runtime(&self, handler: &str) -> Result<OciRuntime, Status> {
        let handler = if handler.is_empty() { DEFAULT_HANDLER } else { handler };
        let binary = self
            .inner
            .runtimes
            .get(handler)
            .ok_or_else(|| Status::invalid_argument(format!("no runtime for handler {handler:?}")))?;
        OciRuntime::new(binary, &self.inner.runtime_root.join(handler))
            .map_err(|e| internal("preparing the runtime's state directory", e))
    }

    /// The runtime of an existing container: its handler's, or the binary it was created with when the
    /// handler is no longer configured (so that it can still be stopped and removed).
    fn runtime_of(&self, record: &Record) -> Result<OciRuntime, Status> {
        let handler = if record.handler.is_empty() { DEFAULT_HANDLER } else { &record.handler };
        let binary = self.inner.runtimes.get(handler).unwrap_or(&record.runtime);
        OciRuntime::new(binary, &self.inner.runtime_root.join(handler))
            .map_err(|e| internal("preparing the runtime's state directory", e))
    }

    fn entry(&self, id: &str) -> Result<Arc<Entry>, Status> {
        let entries = self.inner.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = entries.get(id) {
            return Ok(Arc::clone(entry));
        }
        let mut found = entries.iter().filter(|(key, _)| !id.is_empty() && key.starts_with(id));
        match (found.next(), found.next()) {
            (Some((_, entry)), None) => Ok(Arc::clone(entry)),
            (Some(_), Some(_)) => Err(Status::invalid_argument(format!("container id {id:?} is ambiguous"))),
            _ => Err(Status::not_found(format!("container {id:?} not found"))),
        }
    }

    fn emit(&self, kind: api::ContainerEventType, record: &Record) {
        emit(&self.inner, kind, record);
    }

    /// Subscribes to container events (created, started, stopped, deleted).
    pub fn events(&self) -> broadcast::Receiver<api::ContainerEventResponse> {
        self.inner.events.subscribe()
    }

    /// Creates a container: writes its bundle, starts its monitor (which runs `<runtime> create`) and
    /// records it as CREATED. On error nothing is left behind.
    pub async fn create(&self, request: CreateRequest) -> Result<api::ContainerStatus, Status> {
        let id = request.id.clone();
        if id.is_empty() || id.contains('/') || id.starts_with('.') {
            return Err(Status::invalid_argument(format!("invalid container id {id:?}")));
        }
        if self.inner.entries.lock().unwrap_or_else(PoisonError::into_inner).contains_key(&id) {
            return Err(Status::already_exists(format!("container {id} already exists")));
        }
        let runtime = self.runtime(&request.handler)?;
        let dir = self.inner.dir.join(&id);
        if let Err(e) = std::fs::create_dir(&dir) {
            return Err(if e.kind() == io::ErrorKind::AlreadyExists {
                Status::already_exists(format!("container {id} already exists"))
            } else {
                internal("creating the container directory", e)
            });
        }
        match self.create_in(&dir, &runtime, request).await {
            Ok(status) => Ok(status),
            Err(e) => {
                let _ = runtime.delete(&id, true);
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    async fn create_in(
        &self,
        dir: &Path,
        runtime: &OciRuntime,
        request: CreateRequest,
    ) -> Result<api::ContainerStatus, Status> {
        let bundle = dir.join("bundle");
        std::fs::create_dir_all(&bundle).map_err(|e| internal("creating the bundle", e))?;
        let mut request = request;
        let absolute = |path: &Path| std::path::absolute(path).map_err(|e| internal("resolving a path", e));
        request.rootfs_mounted_at = absolute(&request.rootfs_mounted_at)?;
        if let Some(log) = &request.log_path {
            request.log_path = Some(absolute(log)?);
        }
        let mut spec = request.spec;
        let shared_pid = shares_pid_namespace(&spec);
        let mut root = spec.root().clone().unwrap_or_default();
        root.set_path(request.rootfs_mounted_at.clone());
        spec.set_root(Some(root));
        if let Some(process) = spec.process_mut() {
            process.set_terminal(Some(request.tty));
        }
        spec.save(bundle.join("config.json")).map_err(|e| internal("writing config.json", e))?;
        if let Some(parent) = request.log_path.as_ref().and_then(|path| path.parent()) {
            std::fs::create_dir_all(parent).map_err(|e| internal("creating the log directory", e))?;
        }

        let exit_file = dir.join("exit.json");
        let mut command = tokio::process::Command::new(&self.inner.monitor);
        command
            .arg("monitor")
            .arg("--id")
            .arg(&request.id)
            .arg("--bundle")
            .arg(&bundle)
            .arg("--runtime")
            .arg(runtime.binary())
            .arg("--runtime-root")
            .arg(runtime.root())
            .arg("--exit-file")
            .arg(&exit_file);
        if let Some(log) = &request.log_path {
            command.arg("--log-path").arg(log);
        }
        for (flag, on) in
            [("--tty", request.tty), ("--stdin", request.stdin), ("--stdin-once", request.stdin_once)]
        {
            if on {
                command.arg(flag);
            }
        }
        let monitor_log = std::fs::File::create(dir.join("monitor.log"))
            .map_err(|e| internal("creating the monitor's log", e))?;
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(monitor_log)
            .kill_on_drop(false);
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(|e| internal("starting the monitor", e))?;
        let monitor_pid = child.id().and_then(|pid| i32::try_from(pid).ok()).unwrap_or_default();
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = BufReader::new(stdout).read_line(&mut line).await;
        }
        let pid = match line.trim().split_once(' ') {
            Some(("created", pid)) => pid.parse::<i32>().unwrap_or_default(),
            other => {
                let _ = child.wait().await;
                let message = match other {
                    Some(("error", message)) => message.to_owned(),
                    _ => std::fs::read_to_string(dir.join("monitor.log")).unwrap_or_default(),
                };
                return Err(Status::internal(format!("creating container {}: {message}", request.id)));
            }
        };
        let created_at = monitor::now().1;
        let record = Record {
            id: request.id.clone(),
            sandbox_id: request.sandbox_id,
            name: request.metadata.name,
            attempt: request.metadata.attempt,
            image: request.image.image,
            image_annotations: request.image.annotations,
            image_ref: request.image_ref,
            image_id: request.image_id,
            labels: request.labels,
            annotations: request.annotations,
            log_path: request.log_path,
            handler: request.handler,
            runtime: runtime.binary().to_owned(),
            tty: request.tty,
            stdin: request.stdin,
            stdin_once: request.stdin_once,
            rootfs: request.rootfs_mounted_at,
            mounts: request
                .mounts
                .iter()
                .map(|m| MountRecord {
                    container_path: m.container_path.clone(),
                    host_path: m.host_path.clone(),
                    readonly: m.readonly,
                    selinux_relabel: m.selinux_relabel,
                    propagation: m.propagation,
                })
                .collect(),
            stop_signal: request.stop_signal,
            state: State::Created,
            created_at,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            monitor_pid,
            pid,
            shared_pid,
        };
        if let Err(e) = save(dir, &record) {
            let _ = runtime.delete(&record.id, true);
            let _ = child.wait().await;
            return Err(internal("writing the container record", e));
        }
        let (exited, _) = watch::channel(false);
        let entry =
            Arc::new(Entry { record: Mutex::new(record.clone()), op: tokio::sync::Mutex::new(()), exited });
        self.inner
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(record.id.clone(), Arc::clone(&entry));
        self.watch(entry, Watch::Child(child));
        self.emit(api::ContainerEventType::ContainerCreatedEvent, &record);
        Ok(status_of(&record))
    }

    /// Starts a CREATED container.
    pub async fn start(&self, id: &str) -> Result<(), Status> {
        let entry = self.entry(id)?;
        let _op = entry.op.lock().await;
        let record = entry.record();
        if record.state != State::Created {
            return Err(Status::failed_precondition(format!(
                "container {} is {:?}, not created",
                record.id, record.state
            )));
        }
        let runtime = self.runtime_of(&record)?;
        let cid = record.id.clone();
        let rt = runtime.clone();
        if let Err(e) = blocking(move || rt.start(&cid)).await {
            // As containerd: a container that failed to start is exited (StartError, 128), and its
            // init (still waiting in the runtime) goes.
            let record = {
                let mut current = entry.record.lock().unwrap_or_else(PoisonError::into_inner);
                current.state = State::Exited;
                current.finished_at = monitor::now().1;
                current.exit_code = 128;
                current.reason = "StartError".to_owned();
                current.message = e.message().to_owned();
                let _ = save(&self.inner.dir.join(&current.id), &current);
                current.clone()
            };
            let cid = record.id.clone();
            let _ = blocking(move || runtime.delete(&cid, true)).await;
            self.emit(api::ContainerEventType::ContainerStoppedEvent, &record);
            return Err(e);
        }
        let record = {
            let mut current = entry.record.lock().unwrap_or_else(PoisonError::into_inner);
            current.started_at = monitor::now().1;
            if current.state == State::Created {
                current.state = State::Running;
            }
            let _ = save(&self.inner.dir.join(&current.id), &current);
            current.clone()
        };
        self.emit(api::ContainerEventType::ContainerStartedEvent, &record);
        Ok(())
    }

    /// Stops a running container: its stop signal (SIGTERM unless the image names another), then
    /// SIGKILL after `timeout` (at once for 0), and waits for it to exit. A container that is not
    /// running is left as it is, and an unknown one succeeds (the CRI's idempotence, as critest v1.34
    /// checks it).
    pub async fn stop(&self, id: &str, timeout: Duration) -> Result<(), Status> {
        let entry = match self.entry(id) {
            Ok(entry) => entry,
            Err(e) if e.code() == tonic::Code::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let record = entry.record();
        if record.state != State::Running {
            return Ok(());
        }
        let runtime = self.runtime_of(&record)?;
        let mut exited = entry.exited.subscribe();
        if !timeout.is_zero() {
            let signal = record.stop_signal.as_deref().and_then(parse_signal).unwrap_or(nix::libc::SIGTERM);
            let (rt, cid) = (runtime.clone(), record.id.clone());
            let _ = blocking(move || rt.kill(&cid, signal, false)).await;
            if tokio::time::timeout(timeout, exited.wait_for(|done| *done)).await.is_ok() {
                return Ok(());
            }
        }
        let (cid, all) = (record.id.clone(), record.shared_pid);
        let _ = blocking(move || runtime.kill(&cid, libc::SIGKILL, all)).await;
        let _ = exited.wait_for(|done| *done).await;
        Ok(())
    }

    /// Removes a container: stops it at once if running, deletes it from the runtime, calls the rootfs
    /// hook, removes its directory. Removing an unknown container succeeds (as containerd).
    pub async fn remove(&self, id: &str) -> Result<(), Status> {
        let entry = match self.entry(id) {
            Ok(entry) => entry,
            Err(e) if e.code() == tonic::Code::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let _op = entry.op.lock().await;
        let record = entry.record();
        let runtime = self.runtime_of(&record)?;
        if record.state == State::Running {
            self.stop(&record.id, Duration::ZERO).await?;
        }
        let cid = record.id.clone();
        let rt = runtime.clone();
        blocking(move || rt.delete(&cid, true)).await?;
        // A created container's init dies with the delete; its monitor then writes its exit.
        let _ = entry.exited.subscribe().wait_for(|done| *done).await;
        let dir = self.inner.dir.join(&record.id);
        let hook = self.inner.unmount.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(hook) = hook {
            hook(&record.rootfs).map_err(|e| internal("unmounting the rootfs", e))?;
        }
        if record.rootfs.starts_with(&dir) && is_mount_point(&record.rootfs) {
            return Err(Status::failed_precondition(format!(
                "the rootfs {} of container {} is still mounted",
                record.rootfs.display(),
                record.id
            )));
        }
        let record = entry.record();
        std::fs::remove_dir_all(&dir)
            .or_else(|e| if e.kind() == io::ErrorKind::NotFound { Ok(()) } else { Err(e) })
            .map_err(|e| internal("removing the container directory", e))?;
        self.inner.entries.lock().unwrap_or_else(PoisonError::into_inner).remove(&record.id);
        self.emit(api::ContainerEventType::ContainerDeletedEvent, &record);
        Ok(())
    }

    /// The container's CRI status.
    pub fn status(&self, id: &str) -> Result<api::ContainerStatus, Status> {
        Ok(status_of(&self.entry(id)?.record()))
    }

    /// The rootfs mount point of a container (for the caller to unmount after [`Containers::remove`]).
    pub fn rootfs(&self, id: &str) -> Result<PathBuf, Status> {
        Ok(self.entry(id)?.record().rootfs)
    }

    /// The containers matching `filter` (id prefix, state, sandbox id prefix, every label).
    pub fn list(&self, filter: Option<&api::ContainerFilter>) -> Vec<api::Container> {
        let entries: Vec<Arc<Entry>> =
            self.inner.entries.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect();
        let mut out: Vec<api::Container> = entries
            .iter()
            .map(|entry| entry.record())
            .filter(|record| {
                let Some(filter) = filter else { return true };
                (filter.id.is_empty() || record.id.starts_with(&filter.id))
                    && filter.state.as_ref().is_none_or(|s| s.state == cri_state(record.state) as i32)
                    && (filter.pod_sandbox_id.is_empty()
                        || record.sandbox_id.starts_with(&filter.pod_sandbox_id))
                    && filter.label_selector.iter().all(|(k, v)| record.labels.get(k) == Some(v))
            })
            .map(|record| api::Container {
                id: record.id.clone(),
                pod_sandbox_id: record.sandbox_id.clone(),
                metadata: Some(api::ContainerMetadata { name: record.name.clone(), attempt: record.attempt }),
                image: Some(image_spec(&record)),
                image_ref: record.image_ref.clone(),
                state: cri_state(record.state) as i32,
                created_at: record.created_at,
                labels: record.labels.clone(),
                annotations: record.annotations.clone(),
                image_id: record.image_id.clone(),
            })
            .collect();
        out.sort_by_key(|c| c.created_at);
        out
    }

    fn running(&self, id: &str) -> Result<(Arc<Entry>, Record), Status> {
        let entry = self.entry(id)?;
        let record = entry.record();
        if record.state != State::Running {
            return Err(Status::failed_precondition(format!(
                "container {} is not running ({:?})",
                record.id, record.state
            )));
        }
        Ok((entry, record))
    }

    /// Writes a process.json for an exec of `cmd` (the container's process with other args).
    fn exec_process(&self, record: &Record, cmd: &[String], tty: bool) -> Result<PathBuf, Status> {
        if cmd.is_empty() {
            return Err(Status::invalid_argument("the command to exec is empty"));
        }
        let dir = self.inner.dir.join(&record.id);
        let spec = oci_spec::runtime::Spec::load(dir.join("bundle/config.json"))
            .map_err(|e| internal("reading config.json", e))?;
        let mut process = spec.process().clone().unwrap_or_default();
        process.set_args(Some(cmd.to_vec()));
        process.set_terminal(Some(tty));
        process.set_console_size(None);
        let n = EXEC_COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("exec-{}-{n}.json", std::process::id()));
        std::fs::write(
            &path,
            serde_json::to_vec(&process).map_err(|e| internal("encoding process.json", e))?,
        )
        .map_err(|e| internal("writing process.json", e))?;
        Ok(path)
    }

    /// Runs `cmd` in a running container and returns its stdout, stderr and exit code. With a
    /// non-zero `timeout`, a command still running then is killed and the answer is DeadlineExceeded
    /// (as containerd answers; the kubelet reads it as a probe timeout).
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<(Vec<u8>, Vec<u8>, i32), Status> {
        let (_, record) = self.running(id)?;
        let runtime = self.runtime_of(&record)?;
        let process = self.exec_process(&record, cmd, false)?;
        let pid_file = process.with_extension("pid");
        let options =
            ExecOptions { process: &process, pid_file: Some(&pid_file), console_socket: None, detach: false };
        let (command, log) = runtime.exec_command(&record.id, &options);
        let mut command = tokio::process::Command::from(command);
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let result = async {
            let mut child = command.spawn().map_err(|e| internal("running the runtime's exec", e))?;
            let mut stdout = child.stdout.take();
            let mut stderr = child.stderr.take();
            let run = async {
                let (mut out, mut err) = (Vec::new(), Vec::new());
                let read_out = async {
                    if let Some(s) = stdout.as_mut() {
                        let _ = s.read_to_end(&mut out).await;
                    }
                };
                let read_err = async {
                    if let Some(s) = stderr.as_mut() {
                        let _ = s.read_to_end(&mut err).await;
                    }
                };
                let ((), (), status) = tokio::join!(read_out, read_err, child.wait());
                (out, err, status)
            };
            let finished = if timeout.is_zero() {
                Some(run.await)
            } else {
                tokio::time::timeout(timeout, run).await.ok()
            };
            match finished {
                Some((out, err, status)) => {
                    let status = status.map_err(|e| internal("waiting for the runtime's exec", e))?;
                    let logged = std::fs::read_to_string(&log).unwrap_or_default();
                    let code = exit_code(status);
                    // The runtime itself failed (no such container, bad process): not the command's exit.
                    if !status.success() && !std::fs::exists(&pid_file).unwrap_or(false) {
                        let message = crate::oci::runtime::log_errors(&logged);
                        return Err(Status::internal(format!("exec in container {}: {message}", record.id)));
                    }
                    Ok((out, err, code))
                }
                None => {
                    // Kill the process itself (killing the runtime would orphan it); a runtime still
                    // starting it writes its pid soon, or fails.
                    let read_pid = || -> Option<i32> {
                        std::fs::read_to_string(&pid_file).ok().and_then(|p| p.trim().parse().ok())
                    };
                    let mut pid = read_pid();
                    for _ in 0..500 {
                        if pid.is_some() || matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        pid = read_pid();
                    }
                    if let Some(pid) = pid {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                    // The runtime reaps the killed process and exits: wait for it. Killing the runtime
                    // first would leave the process a zombie whose parent is gone; if it was the last
                    // but the init of a PID namespace, that namespace's init could then never exit
                    // (the kernel waits for every task of the namespace to be reaped).
                    if pid.is_none()
                        || tokio::time::timeout(Duration::from_secs(5), child.wait()).await.is_err()
                    {
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                    }
                    Err(Status::deadline_exceeded(format!(
                        "command {cmd:?} in container {} timed out after {timeout:?}",
                        record.id
                    )))
                }
            }
        }
        .await;
        let _ = std::fs::remove_file(&log);
        let _ = std::fs::remove_file(&pid_file);
        let _ = std::fs::remove_file(&process);
        result
    }

    /// Asks the container's monitor to reopen its log file (after the kubelet renamed it).
    pub async fn reopen_log(&self, id: &str) -> Result<(), Status> {
        let (_, record) = self.running(id)?;
        let dir =
            monitor::open_dir(&self.inner.dir.join(&record.id)).map_err(|e| internal("reopening", e))?;
        let mut stream = tokio::net::UnixStream::connect(monitor::socket_path(&dir, monitor::CONTROL_SOCKET))
            .await
            .map_err(|e| internal("reaching the container's monitor", e))?;
        use tokio::io::AsyncWriteExt;
        stream.write_all(b"reopen\n").await.map_err(|e| internal("asking the monitor", e))?;
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer).await.map_err(|e| internal("asking the monitor", e))?;
        match answer.trim() {
            "ok" => Ok(()),
            other => Err(Status::internal(format!("reopening the log of {}: {other}", record.id))),
        }
    }

    /// Updates the resources of a created or running container (the runtime's `update`, and the
    /// bundle's config.json).
    pub async fn update_resources(
        &self,
        id: &str,
        resources: oci_spec::runtime::LinuxResources,
    ) -> Result<(), Status> {
        let entry = self.entry(id)?;
        let record = entry.record();
        if record.state == State::Exited {
            return Err(Status::failed_precondition(format!("container {} is not running", record.id)));
        }
        let runtime = self.runtime_of(&record)?;
        let (cid, res) = (record.id.clone(), resources.clone());
        blocking(move || runtime.update(&cid, &res)).await?;
        let config = self.inner.dir.join(&record.id).join("bundle/config.json");
        if let Ok(mut spec) = oci_spec::runtime::Spec::load(&config) {
            if let Some(linux) = spec.linux_mut() {
                linux.set_resources(Some(resources));
            }
            let _ = spec.save(&config);
        }
        Ok(())
    }

    /// Attaches `io` to a running container's stdio through its monitor, until the container's output
    /// ends or the client's output goes away.
    pub async fn attach(&self, id: &str, io: Streams) -> Result<(), Status> {
        let (_, record) = self.running(id)?;
        let dir =
            monitor::open_dir(&self.inner.dir.join(&record.id)).map_err(|e| internal("attaching", e))?;
        let socket = tokio::net::UnixStream::connect(monitor::socket_path(&dir, monitor::ATTACH_SOCKET))
            .await
            .map_err(|e| internal("reaching the container's monitor", e))?;
        stream::attach(socket, io).await.map_err(|e| internal("attach", e))
    }

    /// Runs `cmd` in a running container with `io` as its stdio (a terminal when `tty`), returning its
    /// exit code.
    pub async fn exec(&self, id: &str, cmd: &[String], tty: bool, io: Streams) -> Result<i32, Status> {
        let (_, record) = self.running(id)?;
        let runtime = self.runtime_of(&record)?;
        let process = self.exec_process(&record, cmd, tty)?;
        let dir = self.inner.dir.join(&record.id);
        let result = stream::exec(&runtime, &record.id, &dir, &process, tty, io).await;
        let _ = std::fs::remove_file(&process);
        result
    }
}

enum Watch {
    Child(tokio::process::Child),
    Pidfd(OwnedFd),
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(-1)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, crate::oci::runtime::RuntimeError> + Send + 'static,
) -> Result<T, Status> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(Status::from),
        Err(e) => Err(internal("runtime call", e)),
    }
}

/// The monitor is gone: the exit file says how the container ended (or nothing does: Unknown).
fn on_monitor_exit(inner: &Inner, entry: &Entry) {
    let record = {
        let mut record = entry.record.lock().unwrap_or_else(PoisonError::into_inner);
        if record.state == State::Exited {
            entry.exited.send_replace(true);
            return;
        }
        let dir = inner.dir.join(&record.id);
        let exit: Option<ExitRecord> =
            std::fs::read(dir.join("exit.json")).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok());
        match exit {
            Some(exit) => {
                record.exit_code = exit.exit_code;
                record.finished_at = exit.finished_at_ns;
                record.reason = exit.reason;
            }
            None => {
                record.exit_code = 255;
                record.finished_at = monitor::now().1;
                record.reason = "Unknown".to_owned();
                record.message =
                    "the container's monitor exited without recording the container's exit".into();
            }
        }
        record.state = State::Exited;
        let _ = save(&dir, &record);
        record.clone()
    };
    // The event first: whoever waited for the exit finds it sent.
    emit(inner, api::ContainerEventType::ContainerStoppedEvent, &record);
    entry.exited.send_replace(true);
}

/// Sends an event as containerd 1.7 does for the evented PLEG: the statuses of every container of
/// the pod (the deleted one no longer among them), the event's container first, and the pod's status
/// from the sandbox hook.
fn emit(inner: &Inner, kind: api::ContainerEventType, record: &Record) {
    if inner.events.receiver_count() == 0 {
        return;
    }
    let entries: Vec<Arc<Entry>> =
        inner.entries.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect();
    let mut statuses = Vec::new();
    if kind != api::ContainerEventType::ContainerDeletedEvent {
        statuses.push(status_of(record));
    }
    for entry in entries {
        let other = entry.record();
        if other.sandbox_id == record.sandbox_id && other.id != record.id {
            statuses.push(status_of(&other));
        }
    }
    let hook = inner.sandbox_status.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let _ = inner.events.send(api::ContainerEventResponse {
        container_id: record.id.clone(),
        container_event_type: kind as i32,
        created_at: monitor::now().1,
        pod_sandbox_status: hook.and_then(|hook| hook(&record.sandbox_id)),
        containers_statuses: statuses,
    });
}

fn cri_state(state: State) -> api::ContainerState {
    match state {
        State::Created => api::ContainerState::ContainerCreated,
        State::Running => api::ContainerState::ContainerRunning,
        State::Exited => api::ContainerState::ContainerExited,
    }
}

fn image_spec(record: &Record) -> api::ImageSpec {
    api::ImageSpec {
        image: record.image.clone(),
        annotations: record.image_annotations.clone(),
        ..Default::default()
    }
}

fn status_of(record: &Record) -> api::ContainerStatus {
    api::ContainerStatus {
        id: record.id.clone(),
        metadata: Some(api::ContainerMetadata { name: record.name.clone(), attempt: record.attempt }),
        state: cri_state(record.state) as i32,
        created_at: record.created_at,
        started_at: record.started_at,
        finished_at: record.finished_at,
        exit_code: record.exit_code,
        image: Some(image_spec(record)),
        image_ref: record.image_ref.clone(),
        reason: record.reason.clone(),
        message: record.message.clone(),
        labels: record.labels.clone(),
        annotations: record.annotations.clone(),
        mounts: record
            .mounts
            .iter()
            .map(|m| api::Mount {
                container_path: m.container_path.clone(),
                host_path: m.host_path.clone(),
                readonly: m.readonly,
                selinux_relabel: m.selinux_relabel,
                propagation: m.propagation,
                ..Default::default()
            })
            .collect(),
        log_path: record.log_path.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        image_id: record.image_id.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_signals_parse_as_images_spell_them() {
        assert_eq!(parse_signal("SIGQUIT"), Some(libc::SIGQUIT));
        assert_eq!(parse_signal("quit"), Some(libc::SIGQUIT));
        assert_eq!(parse_signal("9"), Some(9));
        assert_eq!(parse_signal("NOPE"), None);
    }
}
