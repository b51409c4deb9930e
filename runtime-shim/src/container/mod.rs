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
//!
//! One file per lifecycle verb, each an `impl Containers` block: [`create`](Containers::create),
//! [`start`](Containers::start), [`stop`](Containers::stop), [`remove`](Containers::remove),
//! `status` (status, list), `exec` (exec_sync, exec, attach) and `update` (update_resources,
//! reopen_log); `stream` joins a client's stdio to attach and exec. This file holds the records, the
//! shared state and the helpers the verbs share.

mod create;
mod error;
mod exec;
mod remove;
mod start;
mod status;
mod stop;
mod stream;
mod update;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use k8s_cri::v1 as api;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, watch};

use crate::config::DEFAULT_HANDLER;
use crate::monitor::{self, ExitRecord};
use crate::oci::runtime::{self, Runtime, RuntimeFactory};

pub use error::Error;
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

/// A container's state, as recorded (the CRI's CONTAINER_CREATED, CONTAINER_RUNNING, CONTAINER_EXITED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum State {
    /// Created by the runtime, its process not started.
    Created,
    /// Started.
    Running,
    /// Its process exited (or it failed to start).
    Exited,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct MountRecord {
    container_path: String,
    host_path: String,
    readonly: bool,
    /// False for records written before the field existed (when no mount could be one).
    #[serde(default)]
    recursive_read_only: bool,
    selinux_relabel: bool,
    propagation: i32,
}

impl From<&api::Mount> for MountRecord {
    fn from(m: &api::Mount) -> MountRecord {
        MountRecord {
            container_path: m.container_path.clone(),
            host_path: m.host_path.clone(),
            readonly: m.readonly,
            recursive_read_only: m.recursive_read_only,
            selinux_relabel: m.selinux_relabel,
            propagation: m.propagation,
        }
    }
}

impl From<&MountRecord> for api::Mount {
    fn from(m: &MountRecord) -> api::Mount {
        api::Mount {
            container_path: m.container_path.clone(),
            host_path: m.host_path.clone(),
            readonly: m.readonly,
            recursive_read_only: m.recursive_read_only,
            selinux_relabel: m.selinux_relabel,
            propagation: m.propagation,
            ..Default::default()
        }
    }
}

/// The identity the container's process starts with: the spec's `process.user` (after the
/// security context, the image's user, /etc/group and the supplemental-groups policy were applied),
/// which ContainerStatus reports as `user`, as containerd does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct UserRecord {
    uid: u32,
    gid: u32,
    supplemental_groups: Vec<u32>,
}

impl UserRecord {
    fn of(spec: &oci_spec::runtime::Spec) -> Option<UserRecord> {
        let user = spec.process().as_ref()?.user();
        Some(UserRecord {
            uid: user.uid(),
            gid: user.gid(),
            supplemental_groups: user.additional_gids().clone().unwrap_or_default(),
        })
    }

    fn cri(&self) -> api::ContainerUser {
        api::ContainerUser {
            linux: Some(api::LinuxContainerUser {
                uid: i64::from(self.uid),
                gid: i64::from(self.gid),
                supplemental_groups: self.supplemental_groups.iter().map(|&g| i64::from(g)).collect(),
            }),
        }
    }
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
    /// None for records written before the field existed (ContainerStatus then reports no user).
    #[serde(default)]
    user: Option<UserRecord>,
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
    /// Makes the runtime of a handler (the binaries' driver; a fake in unit tests).
    make_runtime: RuntimeFactory,
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
        Containers::open_with_runtime(root, runtimes, monitor, runtime::oci_runtimes())
    }

    /// [`Containers::open_with_monitor`] with the runtimes made by `make_runtime` (from a handler's
    /// binary and state directory) instead of [`runtime::OciRuntime`]s.
    pub fn open_with_runtime(
        root: &Path,
        runtimes: &BTreeMap<String, PathBuf>,
        monitor: &Path,
        make_runtime: RuntimeFactory,
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
                make_runtime,
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
            if let Ok(runtime) = (self.inner.make_runtime)(binary, &self.inner.runtime_root.join(handler)) {
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

    fn runtime(&self, handler: &str) -> Result<Arc<dyn Runtime>, Error> {
        let handler = if handler.is_empty() { DEFAULT_HANDLER } else { handler };
        let binary =
            self.inner.runtimes.get(handler).ok_or_else(|| Error::UnknownHandler(handler.to_owned()))?;
        (self.inner.make_runtime)(binary, &self.inner.runtime_root.join(handler))
            .map_err(Error::io("preparing the runtime's state directory"))
    }

    /// The runtime of an existing container: its handler's, or the binary it was created with when the
    /// handler is no longer configured (so that it can still be stopped and removed).
    fn runtime_of(&self, record: &Record) -> Result<Arc<dyn Runtime>, Error> {
        let handler = if record.handler.is_empty() { DEFAULT_HANDLER } else { &record.handler };
        let binary = self.inner.runtimes.get(handler).unwrap_or(&record.runtime);
        (self.inner.make_runtime)(binary, &self.inner.runtime_root.join(handler))
            .map_err(Error::io("preparing the runtime's state directory"))
    }

    fn entry(&self, id: &str) -> Result<Arc<Entry>, Error> {
        let entries = self.inner.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = entries.get(id) {
            return Ok(Arc::clone(entry));
        }
        let mut found = entries.iter().filter(|(key, _)| !id.is_empty() && key.starts_with(id));
        match (found.next(), found.next()) {
            (Some((_, entry)), None) => Ok(Arc::clone(entry)),
            (Some(_), Some(_)) => Err(Error::AmbiguousId(id.to_owned())),
            _ => Err(Error::NotFound(id.to_owned())),
        }
    }

    fn emit(&self, kind: api::ContainerEventType, record: &Record) {
        emit(&self.inner, kind, record);
    }

    /// Subscribes to container events (created, started, stopped, deleted).
    pub fn events(&self) -> broadcast::Receiver<api::ContainerEventResponse> {
        self.inner.events.subscribe()
    }

    fn running(&self, id: &str) -> Result<(Arc<Entry>, Record), Error> {
        let entry = self.entry(id)?;
        let record = entry.record();
        if record.state != State::Running {
            return Err(Error::NotRunning { id: record.id, state: record.state });
        }
        Ok((entry, record))
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
    f: impl FnOnce() -> Result<T, runtime::RuntimeError> + Send + 'static,
) -> Result<T, Error> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(Error::Runtime),
        Err(e) => Err(Error::Task(e)),
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
        mounts: record.mounts.iter().map(api::Mount::from).collect(),
        log_path: record.log_path.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        image_id: record.image_id.clone(),
        user: record.user.as_ref().map(UserRecord::cri),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
