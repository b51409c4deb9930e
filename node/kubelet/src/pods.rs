//! The kubelet's pods (upstream's pod config source, pod workers, SyncPod/SyncTerminatingPod, the
//! relisting PLEG and the status manager), the IO around the pure [`pod_actions`],
//! [`pod_config`] and [`pod_status`]:
//! - a watch of the Pods bound to this node; one worker per UID, which always syncs the latest
//!   version of its Pod;
//! - a relist of the runtime every second (every 10 s while the runtime's container events
//!   arrive, see [`pleg`]) that wakes the worker of every pod whose sandboxes or containers
//!   changed, and removes what the runtime holds of pods the API no longer has;
//! - a sync reads what the runtime holds of the pod, computes the actions and carries them out in
//!   upstream's order (kill, sandbox, init container, containers), then patches the status when it
//!   changed;
//! - a deleted pod's containers are stopped within its grace period, its sandbox stopped, its
//!   terminal status written, its volumes unmounted and its cgroup destroyed, and the Pod object
//!   deleted; its exited containers, sandbox and directory are removed once the API has dropped it.
//!
//! Volumes: emptyDir (disk or tmpfs), hostPath, configMap, secret, downwardAPI and projected
//! (the kube-api-access volume with its service account token), and persistentVolumeClaim bound
//! to a hostPath or local PersistentVolume (a local one bind-mounted under the pod's directory,
//! unmounted before the directory goes); any other type, a missing ConfigMap or Secret, or a
//! claim not bound, keeps the pod in ContainerCreating with a FailedMount event until it can be
//! set up. Volumes no container uses are not set up, as upstream.
//!
//! Probes (upstream's prober manager): one worker per container and probe, fed by the status the
//! kubelet last computed; a changed result wakes the pod's worker, whose sync reports readiness
//! and kills a container whose liveness or startup probe failed. Hooks: postStart after a
//! container starts (a failure kills it), preStop before it is stopped, within its grace period.

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_cri::v1 as cri;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Node, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service,
    ServiceAccount, Volume,
};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tokio::sync::{mpsc, watch};

use crate::atomic_writer;
use crate::claims;
use crate::events::{Kind, Recorder};
use crate::pleg::{self, Pleg};
use crate::pod_actions::{self, PodActions};
use crate::pod_cgroups::PodCgroups;
use crate::pod_config::{self, PodEnvironment, PodFacts};
use crate::pod_runtime::{PodRuntime, State};
use crate::pod_status::{self, Reasons};
use crate::prober;
use crate::probes::{self, Kind as ProbeKind, Outcome, Probed, ResultsByContainer};
use crate::runtime::Cri;
use crate::static_pods;
use crate::volumes::{self, HostPathCheck, Sources};

/// How often the runtime is relisted (upstream's relist period).
const RELIST_PERIOD: Duration = Duration::from_secs(1);
/// How often a pod is synced with nothing to wake it, by default (upstream's syncFrequency).
const RESYNC: Duration = Duration::from_secs(60);
/// Back-offs of restarts and image pulls (upstream's 10 s doubling to 5 min).
const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// The shortest time a container is given between SIGTERM and SIGKILL (upstream's
/// minimumGracePeriodInSeconds), whatever the pod's grace period.
const MINIMUM_GRACE_SECONDS: i64 = 2;

/// What a pod's sync needs of its kubelet.
pub struct Kubelet {
    pub node_name: String,
    /// The node's addresses (status.hostIPs).
    pub host_ips: Vec<String>,
    pub root_dir: PathBuf,
    pub env: PodEnvironment,
    pub cri: Cri,
    /// `<name>` of the runtime's `<name>://<id>` container IDs.
    pub runtime_name: String,
    pub client: kube::Client,
    pub recorder: Recorder,
    backoff: Mutex<HashMap<String, (Duration, Instant)>>,
    /// Service account tokens by pod, account, audience and lifetime, with when to renew them.
    tokens: Mutex<HashMap<String, (String, Instant)>>,
    /// The status last written for each pod, by UID.
    statuses: Mutex<HashMap<String, k8s_openapi::api::core::v1::PodStatus>>,
    /// The pods bound to this node as the API last gave them, by UID (upstream's pod manager).
    pods: Mutex<HashMap<String, Pod>>,
    /// The containers' probe results, by container ID.
    probe_results: Mutex<ResultsByContainer>,
    /// The UIDs of pods whose worker is to sync again (a probe result changed).
    wake: mpsc::UnboundedSender<String>,
    woken: Mutex<Option<mpsc::UnboundedReceiver<String>>>,
    started: Instant,
    /// syncFrequency: how often a pod is synced with nothing to wake it.
    resync: Duration,
    /// staticPodPath and fileCheckFrequency: where static pod manifests are read, how often.
    static_pods: Option<(PathBuf, Duration)>,
    /// The mirror pods the API holds for this node's static pods, by `namespace/name`.
    mirrors: Mutex<HashMap<String, Pod>>,
    /// When each static pod was first seen (its `kubernetes.io/config.seen`), by UID.
    static_seen: Mutex<HashMap<String, String>>,
    /// The Node's UID, the mirror pods' owner, once read.
    node_uid: Mutex<Option<String>>,
    /// Every Service, for the pods' Service environment variables (upstream's service lister),
    /// and its writer until [`run`] starts the reflector; whether it has listed once.
    services: reflector::Store<Service>,
    services_writer: Mutex<Option<reflector::store::Writer<Service>>>,
    services_synced: std::sync::atomic::AtomicBool,
    /// The runtime's container events (the evented PLEG), beside the relist.
    pub pleg: Pleg,
    /// The QoS and pod cgroups (cgroupsPerQOS), when the kubelet makes them.
    cgroups: Option<PodCgroups>,
}

impl std::fmt::Debug for Kubelet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kubelet").field("node_name", &self.node_name).finish_non_exhaustive()
    }
}

impl Kubelet {
    pub fn new(
        client: kube::Client,
        node_name: String,
        host_ips: Vec<String>,
        root_dir: PathBuf,
        env: PodEnvironment,
        cri: Cri,
        runtime_name: String,
    ) -> Kubelet {
        let (wake, woken) = mpsc::unbounded_channel();
        let (services, services_writer) = reflector::store();
        Kubelet {
            recorder: Recorder::new(client.clone(), node_name.clone()),
            node_name,
            host_ips,
            root_dir,
            env,
            cri,
            runtime_name,
            client,
            backoff: Mutex::new(HashMap::new()),
            tokens: Mutex::new(HashMap::new()),
            statuses: Mutex::new(HashMap::new()),
            pods: Mutex::new(HashMap::new()),
            probe_results: Mutex::new(ResultsByContainer::new()),
            wake,
            woken: Mutex::new(Some(woken)),
            started: Instant::now(),
            resync: RESYNC,
            static_pods: None,
            mirrors: Mutex::new(HashMap::new()),
            static_seen: Mutex::new(HashMap::new()),
            node_uid: Mutex::new(None),
            services,
            services_writer: Mutex::new(Some(services_writer)),
            services_synced: std::sync::atomic::AtomicBool::new(false),
            pleg: Pleg::default(),
            cgroups: None,
        }
    }

    /// The kubelet with the static pods of `path` (a directory of manifests or one file), read
    /// every `every` (staticPodPath, fileCheckFrequency).
    #[must_use]
    pub fn with_static_pods(mut self, path: PathBuf, every: Duration) -> Kubelet {
        self.static_pods = Some((path, every));
        self
    }

    /// The kubelet with a cgroup for each pod under its QoS class's (cgroupsPerQOS), kubepods
    /// already set up ([`PodCgroups::set_up`]).
    #[must_use]
    pub fn with_pod_cgroups(mut self, cgroups: PodCgroups) -> Kubelet {
        self.cgroups = Some(cgroups);
        self
    }

    /// The kubelet with pods synced every `every` when nothing wakes them (syncFrequency).
    #[must_use]
    pub fn with_sync_frequency(mut self, every: Duration) -> Kubelet {
        self.resync = every;
        self
    }

    /// What the downward API reads of `pod` on this node.
    fn facts(&self, pod: &Pod, pod_ips: Vec<String>) -> PodFacts {
        PodFacts {
            host_ips: self.host_ips.clone(),
            pod_ips,
            allocatable: self.env.allocatable.clone(),
            static_pod: is_static(pod),
        }
    }

    fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root_dir.join("pods").join(uid)
    }

    /// Whether `key` is still backing off since `since`; otherwise its back-off grows (upstream's
    /// flowcontrol.Backoff: reset once it was left alone for twice the maximum).
    fn backing_off(&self, key: &str, since: Instant) -> Option<Duration> {
        let mut entries = self.backoff.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        if let Some((duration, _)) = entries.get(key)
            && now.saturating_duration_since(since) < *duration
        {
            return Some(*duration);
        }
        let next = match entries.get(key) {
            Some((duration, at)) if now.saturating_duration_since(*at) < 2 * BACKOFF_MAX => {
                (*duration * 2).min(BACKOFF_MAX)
            }
            _ => BACKOFF_INITIAL,
        };
        entries.insert(key.to_owned(), (next, now));
        None
    }

    fn forget_backoff(&self, uid: &str) {
        let mut entries = self.backoff.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.retain(|key, _| !key.starts_with(uid));
        let mut tokens = self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        tokens.retain(|key, _| !key.starts_with(uid));
        self.statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(uid);
    }

    /// The pod `namespace/name` bound to this node, as the API last gave it.
    pub fn pod_by_name(&self, namespace: &str, name: &str) -> Option<Pod> {
        let pods = self.pods.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        pods.values()
            .find(|p| {
                p.metadata.name.as_deref() == Some(name)
                    && p.metadata.namespace.as_deref().unwrap_or("default") == namespace
            })
            .cloned()
    }

    /// The pods bound to this node, as the API last gave them, by namespace and name.
    pub fn pods(&self) -> Vec<Pod> {
        let pods = self.pods.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut all: Vec<Pod> = pods.values().cloned().collect();
        all.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        all
    }

    /// The status this kubelet last computed for pod `uid` (upstream's status manager cache).
    pub fn status_of(&self, uid: &str) -> Option<k8s_openapi::api::core::v1::PodStatus> {
        self.statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(uid).cloned()
    }

    /// The pods bound here that have not finished (upstream's GetActivePods): what the QoS
    /// cgroups are shared out by.
    fn active_pods(&self) -> Vec<Pod> {
        let pods = self.pods.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        pods.into_iter()
            .filter(|(uid, pod)| {
                let phase =
                    self.status_of(uid).and_then(|s| s.phase).or_else(|| pod.status.as_ref()?.phase.clone());
                !matches!(phase.as_deref(), Some("Succeeded" | "Failed"))
            })
            .map(|(_, pod)| pod)
            .collect()
    }

    fn probe_snapshot(&self) -> ResultsByContainer {
        self.probe_results.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Records a probe result of a container of pod `uid`; a change wakes the pod's worker.
    fn set_probe_result(&self, uid: &str, container_id: &str, kind: ProbeKind, outcome: Option<Outcome>) {
        let mut results = self.probe_results.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = results.entry(container_id.to_owned()).or_default();
        if entry.get(kind) == outcome {
            return;
        }
        entry.set(kind, outcome);
        if *entry == probes::Results::default() {
            results.remove(container_id);
        }
        drop(results);
        let _ = self.wake.send(uid.to_owned());
    }

    /// What a probe worker sees of its container: the status this kubelet last computed.
    fn probe_view(&self, uid: &str, name: &str) -> (probes::View, String) {
        let statuses = self.statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(status) = statuses.get(uid) else { return (probes::View::default(), String::new()) };
        let phase = status.phase.as_deref().unwrap_or_default();
        let all =
            status.container_statuses.iter().flatten().chain(status.init_container_statuses.iter().flatten());
        let mut view =
            probes::View { finished: phase == "Succeeded" || phase == "Failed", ..probes::View::default() };
        if let Some(container) = all.into_iter().find(|c| c.name == name) {
            let id = container.container_id.as_deref().unwrap_or_default();
            view.container_id = id.split_once("://").map_or(id, |(_, bare)| bare).to_owned();
            view.started = container.started == Some(true);
            let state = container.state.clone().unwrap_or_default();
            view.terminated = state.terminated.is_some();
            view.running_for = state
                .running
                .map(|r| r.started_at.map_or(0, |at| Timestamp::now().as_second() - at.0.as_second()));
        }
        (view, status.pod_ip.clone().unwrap_or_default())
    }
}

/// `namespace/name`, how a static pod finds its mirror.
fn full_name(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Whether `pod` came from a manifest file (a static pod).
fn is_static(pod: &Pod) -> bool {
    let annotations = pod.metadata.annotations.as_ref();
    annotations.and_then(|a| a.get(static_pods::CONFIG_SOURCE)).is_some_and(|s| s == "file")
}

fn pod_name(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

fn field_path(pod: &Pod, name: &str) -> String {
    let init = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|i| i.iter().any(|c| c.name == name));
    if init { format!("spec.initContainers{{{name}}}") } else { format!("spec.containers{{{name}}}") }
}

/// The spec of the pod's container (or init container) `name`.
fn container_spec<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers.iter().chain(spec.init_containers.iter().flatten()).find(|c| c.name == name)
}

fn rpc_message(status: &tonic::Status) -> String {
    format!("rpc error: code = {:?} desc = {}", status.code(), status.message())
}

/// What the API said of a read: its Status message (`persistentvolumeclaims "x" not found`, as
/// upstream's client error reads), else the error.
fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

/// The nanoseconds of a CRI time as an Instant-comparable age.
fn since(nanos: i64) -> Instant {
    let now_nanos = Timestamp::now().as_nanosecond();
    let age = u64::try_from(now_nanos - i128::from(nanos)).unwrap_or(0);
    Instant::now().checked_sub(Duration::from_nanos(age)).unwrap_or_else(Instant::now)
}

/// The volumes set up for a pod: each one's host directory, and whether it is mounted read-only
/// whatever the volumeMount says (the API data volumes).
type SetUp = BTreeMap<String, (PathBuf, bool)>;

/// Mounts a tmpfs on `dir` unless one is there (a mount point: its device differs from its
/// parent's), of at most `size` bytes.
fn ensure_tmpfs(dir: &Path, size: Option<i64>) -> nix::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let device = |path: &Path| std::fs::metadata(path).map(|m| m.dev()).ok();
    if let Some(parent) = dir.parent()
        && device(dir) != device(parent)
    {
        return Ok(());
    }
    let options = size.map(|bytes| format!("size={bytes}"));
    nix::mount::mount(Some("tmpfs"), dir, Some("tmpfs"), nix::mount::MsFlags::empty(), options.as_deref())
}

/// The mount points of this process's mount namespace (mountinfo's fifth field, its octal
/// escapes of spaces, tabs, newlines and backslashes undone).
fn mount_points() -> Vec<String> {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else { return Vec::new() };
    mountinfo.lines().filter_map(|l| l.split(' ').nth(4)).map(keel_cgroups::unescape_mountinfo).collect()
}

/// The mount points under `dir`.
fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = format!("{}/", dir.display());
    mount_points().into_iter().filter(|p| p.starts_with(&prefix)).collect()
}

/// Unmounts every mount under `dir`, deepest first (a pod's tmpfs volumes and local volumes'
/// bind mounts before its directory goes); whether nothing is mounted there any more.
fn unmount_under(dir: &Path) -> bool {
    let mut points = mounts_under(dir);
    points.sort_unstable();
    for point in points.iter().rev() {
        if let Err(error) = nix::mount::umount2(point.as_str(), nix::mount::MntFlags::MNT_DETACH) {
            tracing::warn!(point, %error, "unmounting a pod volume");
        }
    }
    mounts_under(dir).is_empty()
}

/// Bind-mounts `source` on `dir` (made if missing) unless something is mounted there already,
/// read-only when asked (upstream's local volume SetUpAt: `bind`, then `ro`).
fn bind_mount(source: &Path, dir: &Path, read_only: bool) -> Result<(), String> {
    use nix::mount::MsFlags;
    let shown = dir.display().to_string();
    if mount_points().contains(&shown) {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {shown}: {e}"))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o750))
        .map_err(|e| format!("{shown}: {e}"))?;
    nix::mount::mount(Some(source), dir, None::<&str>, MsFlags::MS_BIND, None::<&str>)
        .map_err(|e| format!("mount failed: bind {} on {shown}: {e}", source.display()))?;
    if read_only {
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
        if let Err(error) = nix::mount::mount(None::<&str>, dir, None::<&str>, flags, None::<&str>) {
            let _ = nix::mount::umount2(dir, nix::mount::MntFlags::MNT_DETACH);
            return Err(format!("mount failed: read-only remount of {shown}: {error}"));
        }
    }
    Ok(())
}

/// upstream's hostPath type checks (and creation for the *OrCreate types).
fn check_host_path(path: &Path, check: HostPathCheck) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let shown = path.display();
    let metadata = std::fs::metadata(path);
    let kind = metadata.as_ref().map(std::fs::Metadata::file_type);
    let is = |f: fn(&std::fs::FileType) -> bool| kind.as_ref().is_ok_and(f);
    match check {
        HostPathCheck::None => Ok(()),
        HostPathCheck::DirectoryOrCreate if metadata.is_err() => {
            std::fs::create_dir_all(path).map_err(|e| format!("creating {shown}: {e}"))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(|e| e.to_string())
        }
        HostPathCheck::FileOrCreate if metadata.is_err() => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map(drop)
            .map_err(|e| format!("creating {shown}: {e}")),
        HostPathCheck::Directory | HostPathCheck::DirectoryOrCreate if !is(std::fs::FileType::is_dir) => {
            Err(format!("hostPath type check failed: {shown} is not a directory"))
        }
        HostPathCheck::File | HostPathCheck::FileOrCreate if !is(std::fs::FileType::is_file) => {
            Err(format!("hostPath type check failed: {shown} is not a file"))
        }
        HostPathCheck::Socket if !is(FileTypeExt::is_socket) => {
            Err(format!("hostPath type check failed: {shown} is not a socket file"))
        }
        HostPathCheck::CharDevice if !is(FileTypeExt::is_char_device) => {
            Err(format!("hostPath type check failed: {shown} is not a character device"))
        }
        HostPathCheck::BlockDevice if !is(FileTypeExt::is_block_device) => {
            Err(format!("hostPath type check failed: {shown} is not a block device"))
        }
        _ => Ok(()),
    }
}

/// What a container is started into: the pod's sandbox, what the runtime holds, and what was
/// read and set up for the pod this sync.
#[derive(Debug, Clone, Copy)]
struct SandboxContext<'a> {
    runtime: &'a PodRuntime,
    sandbox_id: &'a str,
    sandbox_config: &'a cri::PodSandboxConfig,
    pod_ips: &'a [String],
    sources: &'a Sources,
    volumes: &'a SetUp,
}

/// The outcome of a sync: when to sync again at the latest.
struct Synced {
    again: Duration,
}

impl Kubelet {
    /// The image of `container`, pulled as its imagePullPolicy says; the runtime's reference to it.
    async fn ensure_image(&self, pod: &Pod, container: &Container) -> Result<String, (String, String)> {
        let image = container.image.clone().unwrap_or_default();
        let path = Some(field_path(pod, &container.name));
        let policy = container.image_pull_policy.clone().unwrap_or_else(|| {
            let tagged =
                image.rsplit('/').next().is_some_and(|last| last.contains(':') && !last.ends_with(":latest"));
            if tagged || image.contains('@') { "IfNotPresent".into() } else { "Always".into() }
        });
        let mut cri = self.cri.clone();
        let spec = cri::ImageSpec { image: image.clone(), ..cri::ImageSpec::default() };
        let present = cri
            .image
            .image_status(cri::ImageStatusRequest { image: Some(spec.clone()), verbose: false })
            .await
            .ok()
            .and_then(|r| r.into_inner().image);
        if let Some(found) = &present
            && policy != "Always"
        {
            self.recorder.pod_event(
                pod,
                path,
                Kind::Normal,
                "Pulled",
                format!("Container image {image:?} already present on machine"),
            );
            return Ok(found.id.clone());
        }
        if present.is_none() && policy == "Never" {
            let message = format!("Container image {image:?} is not present with pull policy of Never");
            self.recorder.pod_event(pod, path, Kind::Warning, "ErrImageNeverPull", message.clone());
            return Err(("ErrImageNeverPull".into(), message));
        }
        let key = format!("{}/pull/{image}", pod.metadata.uid.as_deref().unwrap_or_default());
        let failed_at =
            self.backoff.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key).map(|e| e.1);
        if let Some(at) = failed_at
            && self.backing_off(&key, at).is_some()
        {
            let message = format!("Back-off pulling image {image:?}");
            self.recorder.pod_event(pod, path, Kind::Normal, "BackOff", message.clone());
            return Err(("ImagePullBackOff".into(), message));
        }
        self.recorder.pod_event(
            pod,
            path.clone(),
            Kind::Normal,
            "Pulling",
            format!("Pulling image {image:?}"),
        );
        let started = Instant::now();
        match cri
            .image
            .pull_image(cri::PullImageRequest { image: Some(spec), auth: None, sandbox_config: None })
            .await
        {
            Ok(pulled) => {
                self.backoff.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&key);
                let took = started.elapsed();
                self.recorder.pod_event(
                    pod,
                    path,
                    Kind::Normal,
                    "Pulled",
                    format!(
                        "Successfully pulled image {image:?} in {took:.3?} ({took:.3?} including waiting)"
                    ),
                );
                Ok(pulled.into_inner().image_ref)
            }
            Err(status) => {
                self.backing_off(&key, Instant::now());
                let message = format!("Failed to pull image {image:?}: {}", rpc_message(&status));
                self.recorder.pod_event(pod, path.clone(), Kind::Warning, "Failed", message.clone());
                self.recorder.pod_event(pod, path, Kind::Warning, "Failed", "Error: ErrImagePull".into());
                Err(("ErrImagePull".into(), message))
            }
        }
    }

    /// The mounts of `container`: its volumeMounts onto the volumes set up (`volumes`), and the
    /// termination message file.
    fn mounts(
        &self,
        pod: &Pod,
        container: &Container,
        volumes: &SetUp,
        pod_ips: &[String],
    ) -> Result<Vec<cri::Mount>, String> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let mut mounts = Vec::new();
        for mount in container.volume_mounts.iter().flatten() {
            let (host, read_only) = volumes
                .get(&mount.name)
                .ok_or_else(|| format!("volume {:?} is not in the pod's volumes", mount.name))?;
            let host = match mount.sub_path.as_deref().filter(|p| !p.is_empty()) {
                Some(sub) if sub.split('/').any(|c| c == "..") || sub.starts_with('/') => {
                    return Err(format!("subPath {sub:?} must be a relative path inside the volume"));
                }
                Some(sub) => {
                    let sub = host.join(sub);
                    if std::fs::symlink_metadata(&sub).is_err() {
                        std::fs::create_dir_all(&sub)
                            .map_err(|e| format!("subPath {}: {e}", sub.display()))?;
                    }
                    sub
                }
                None => host.clone(),
            };
            mounts.push(cri::Mount {
                container_path: mount.mount_path.clone(),
                host_path: host.display().to_string(),
                readonly: mount.read_only.unwrap_or(false) || *read_only,
                ..cri::Mount::default()
            });
        }
        // The pod's /etc/hosts, unless the container mounts its own (upstream's makeHostsMount).
        let host_network = pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
        let own_hosts = container.volume_mounts.iter().flatten().any(|m| m.mount_path == "/etc/hosts");
        if (!pod_ips.is_empty() || host_network) && !own_hosts {
            let node_hosts = match host_network {
                true => {
                    std::fs::read_to_string("/etc/hosts").map_err(|e| format!("reading /etc/hosts: {e}"))?
                }
                false => String::new(),
            };
            let file = self.pod_dir(uid).join("etc-hosts");
            std::fs::create_dir_all(self.pod_dir(uid))
                .map_err(|e| format!("creating the pod's directory: {e}"))?;
            std::fs::write(&file, pod_config::hosts_file(pod, pod_ips, &self.env, &node_hosts))
                .map_err(|e| format!("writing {}: {e}", file.display()))?;
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))
                .map_err(|e| e.to_string())?;
            mounts.push(cri::Mount {
                container_path: "/etc/hosts".into(),
                host_path: file.display().to_string(),
                ..cri::Mount::default()
            });
        }
        // The termination message file (upstream's makeMounts: a file per container run).
        let path =
            container.termination_message_path.clone().unwrap_or_else(|| "/dev/termination-log".into());
        let dir = self.pod_dir(uid).join("containers").join(&container.name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let file = dir.join(format!("{:x}", Timestamp::now().as_nanosecond()));
        std::fs::write(&file, b"").map_err(|e| format!("creating {}: {e}", file.display()))?;
        mounts.push(cri::Mount {
            container_path: path,
            host_path: file.display().to_string(),
            ..cri::Mount::default()
        });
        Ok(mounts)
    }

    /// Reads what the pod refers to (upstream's configMap and secret managers, the token
    /// manager): its ConfigMaps and Secrets, and a token for each projection — cached, and
    /// requested again once 80 % of its lifetime has passed.
    async fn sources(&self, pod: &Pod) -> Result<Sources, String> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let (config_maps, secrets, tokens) = volumes::references(pod);
        let mut sources = Sources::default();
        let maps: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        for name in config_maps {
            let found = maps.get_opt(&name).await.map_err(|e| format!("configmap {name:?}: {e}"))?;
            sources.config_maps.insert(name, found);
        }
        let secret_api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        for name in secrets {
            let found = secret_api.get_opt(&name).await.map_err(|e| format!("secret {name:?}: {e}"))?;
            sources.secrets.insert(name, found);
        }
        // The claims of persistentVolumeClaim volumes, the PVs bound ones name (upstream's
        // populator reads both from the API each time it processes the pod), and the Node's
        // labels for a PV with node affinity.
        let claim_api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        let volume_api: Api<PersistentVolume> = Api::all(self.client.clone());
        for name in claims::claim_names(pod) {
            let claim = claim_api.get(&name).await.map_err(|e| api_message(&e));
            if let Ok(volume_name) = claims::bound_volume_name(&claim)
                && !sources.persistent_volumes.contains_key(&volume_name)
            {
                let volume = volume_api.get(&volume_name).await.map_err(|e| api_message(&e));
                sources.persistent_volumes.insert(volume_name, volume);
            }
            sources.claims.insert(name, claim);
        }
        let affinity = |pv: &PersistentVolume| {
            pv.spec.as_ref().and_then(|s| s.node_affinity.as_ref()).is_some_and(|a| a.required.is_some())
        };
        if sources.persistent_volumes.values().flatten().any(affinity) {
            let nodes: Api<Node> = Api::all(self.client.clone());
            let node = nodes.get(&self.node_name).await.map_err(|e| api_message(&e));
            sources.node_labels = Some(node.map(|n| n.metadata.labels.unwrap_or_default()));
        }
        if self.services_synced.load(std::sync::atomic::Ordering::Acquire) {
            let links = pod.spec.as_ref().and_then(|s| s.enable_service_links).unwrap_or(true);
            let services = self.services.state();
            sources.service_env =
                Some(pod_config::service_environment(services.iter().map(AsRef::as_ref), namespace, links));
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| "default".into());
        for projection in tokens {
            let key = volumes::token_key(&projection);
            let cache_key = format!("{uid}/{account}/{key}");
            let cached = {
                let cache = self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                cache
                    .get(&cache_key)
                    .filter(|(_, refresh_at)| Instant::now() < *refresh_at)
                    .map(|(t, _)| t.clone())
            };
            let token = match cached {
                Some(token) => token,
                None => {
                    let lifetime = projection.expiration_seconds.unwrap_or(3600);
                    let request = TokenRequest {
                        spec: TokenRequestSpec {
                            audiences: projection.audience.iter().cloned().collect(),
                            expiration_seconds: Some(lifetime),
                            bound_object_ref: Some(BoundObjectReference {
                                api_version: Some("v1".into()),
                                kind: Some("Pod".into()),
                                name: pod.metadata.name.clone(),
                                uid: Some(uid.clone()),
                            }),
                        },
                        ..TokenRequest::default()
                    };
                    let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), namespace);
                    let issued = accounts
                        .create_token_request(&account, &PostParams::default(), &request)
                        .await
                        .map_err(|e| format!("failed to fetch token: {e}"))?;
                    let token = issued.status.map(|s| s.token).unwrap_or_default();
                    let refresh = Duration::from_secs(u64::try_from(lifetime).unwrap_or(3600) * 8 / 10);
                    let mut cache = self.tokens.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    cache.insert(cache_key, (token.clone(), Instant::now() + refresh));
                    token
                }
            };
            sources.tokens.insert(key, token);
        }
        Ok(sources)
    }

    /// Sets up every volume the pod's containers use (upstream's volume manager; it skips the
    /// others): emptyDir (tmpfs for medium Memory), hostPath with its type checks, configMap,
    /// secret, downwardAPI and projected volumes written by the atomic writer (the last three on
    /// tmpfs, so secrets never reach the disk) and mounted read-only, and persistentVolumeClaim
    /// volumes of hostPath and local PersistentVolumes ([`claims`]). Called on every sync, so
    /// updates reach running pods. The errors are the FailedMount events' messages: one per volume
    /// that failed to set up, and upstream's "Unable to attach or mount volumes" when claims could
    /// not be resolved.
    fn set_up_volumes(&self, pod: &Pod, sources: &Sources) -> Result<SetUp, Vec<String>> {
        let facts = self.facts(pod, Vec::new());
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let Some(spec) = &pod.spec else { return Ok(SetUp::new()) };
        let (mounted, devices) = claims::used_volumes(spec);
        let mut set_up = SetUp::new();
        let mut failed = Vec::new();
        let mut not_processed = BTreeMap::new();
        for volume in spec.volumes.iter().flatten() {
            let (is_mounted, is_device) = (mounted.contains(&volume.name), devices.contains(&volume.name));
            if !is_mounted && !is_device {
                continue;
            }
            let outcome = match &volume.persistent_volume_claim {
                Some(claim) => {
                    let pod_volume = claims::PodVolume {
                        name: &volume.name,
                        namespace,
                        claim_name: &claim.claim_name,
                        read_only: claim.read_only.unwrap_or(false),
                        mounted: is_mounted,
                        device: is_device,
                    };
                    let not_read = Err("not read".to_owned());
                    let read = sources.claims.get(&claim.claim_name).unwrap_or(&not_read);
                    let bound = claims::bound_volume_name(read).ok();
                    let pv = bound.and_then(|name| sources.persistent_volumes.get(&name));
                    match claims::resolve(&pod_volume, read, pv) {
                        Ok(claimed) => self.set_up_claimed(pod, &claimed, sources),
                        Err(error) => {
                            not_processed.insert(volume.name.clone(), error);
                            continue;
                        }
                    }
                }
                None => self.set_up_volume(pod, volume, &facts, sources),
            };
            match outcome {
                Ok(entry) => {
                    set_up.insert(volume.name.clone(), entry);
                }
                Err(message) => failed.push(message),
            }
        }
        if !not_processed.is_empty() {
            let unmounted =
                mounted.union(&devices).filter(|name| !set_up.contains_key(*name)).cloned().collect();
            failed.push(claims::unable_to_mount(&unmounted, &not_processed));
        }
        if failed.is_empty() { Ok(set_up) } else { Err(failed) }
    }

    /// Sets up one volume that is not a claim: its host path and whether it is read-only.
    fn set_up_volume(
        &self,
        pod: &Pod,
        volume: &Volume,
        facts: &PodFacts,
        sources: &Sources,
    ) -> Result<(PathBuf, bool), String> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let failed =
            |message: String| format!("MountVolume.SetUp failed for volume {:?} : {message}", volume.name);
        let plugin_dir = |plugin: &str| self.pod_dir(uid).join("volumes").join(plugin).join(&volume.name);
        let create = |dir: &Path| {
            std::fs::create_dir_all(dir).map_err(|e| failed(format!("creating {}: {e}", dir.display())))
        };
        if let Some(empty) = &volume.empty_dir {
            let dir = plugin_dir("kubernetes.io~empty-dir");
            create(&dir)?;
            match empty.medium.as_deref().unwrap_or_default() {
                "" => {}
                "Memory" => {
                    let size = empty
                        .size_limit
                        .as_ref()
                        .and_then(|q| keel_api::validation::quantity::Quantity::parse(&q.0));
                    ensure_tmpfs(&dir, size.map(|q| q.value()))
                        .map_err(|e| failed(format!("mounting tmpfs: {e}")))?;
                }
                other => {
                    return Err(failed(format!("medium {other} is not supported by keel-kubelet yet")));
                }
            }
            return Ok((dir, false));
        }
        if let Some(host) = &volume.host_path {
            let check = volumes::host_path_check(host.type_.as_deref()).map_err(&failed)?;
            check_host_path(Path::new(&host.path), check).map_err(&failed)?;
            return Ok((PathBuf::from(&host.path), false));
        }
        let (plugin, memory) = if volume.config_map.is_some() {
            ("kubernetes.io~configmap", false)
        } else if volume.secret.is_some() {
            ("kubernetes.io~secret", true)
        } else if volume.downward_api.is_some() {
            ("kubernetes.io~downward-api", true)
        } else if volume.projected.is_some() {
            ("kubernetes.io~projected", true)
        } else {
            return Err(failed("this volume type is not supported by keel-kubelet yet".into()));
        };
        let payload = match volumes::payload(pod, volume, facts, sources) {
            Some(payload) => payload.map_err(&failed)?,
            None => return Err(failed("this volume type is not supported by keel-kubelet yet".into())),
        };
        let dir = plugin_dir(plugin);
        create(&dir)?;
        if memory {
            ensure_tmpfs(&dir, None).map_err(|e| failed(format!("mounting tmpfs: {e}")))?;
        }
        atomic_writer::write(&dir, &payload).map_err(|e| failed(format!("writing the volume: {e}")))?;
        Ok((dir, true))
    }

    /// Mounts a claim's PersistentVolume as upstream's operation generator and its hostPath and
    /// local plugins do: the node affinity checked against the Node's labels, a hostPath's type
    /// checked, a local directory bind-mounted under the pod's directory (read-only when the pod
    /// volume is). The error names the PV, in upstream's words.
    fn set_up_claimed(
        &self,
        pod: &Pod,
        claimed: &claims::ClaimedVolume,
        sources: &Sources,
    ) -> Result<(PathBuf, bool), String> {
        let failed =
            |step: &str, message: String| format!("{step} failed for volume {:?} : {message}", claimed.name);
        if claimed.node_affinity.as_ref().is_some_and(|a| a.required.is_some()) {
            let check = "MountVolume.NodeAffinity check";
            let labels = match &sources.node_labels {
                Some(Ok(labels)) => labels,
                Some(Err(error)) => return Err(failed(check, error.clone())),
                None => return Err(failed(check, "the Node was not read".into())),
            };
            claims::check_node_affinity(claimed.node_affinity.as_ref(), labels)
                .map_err(|e| failed(check, e))?;
        }
        let set_up = "MountVolume.SetUp";
        match &claimed.source {
            claims::Source::HostPath { path, kind } => {
                claims::no_backsteps(path)
                    .map_err(|e| failed(set_up, format!("invalid HostPath `{path}`: {e}")))?;
                let check = volumes::host_path_check(kind.as_deref()).map_err(|e| failed(set_up, e))?;
                check_host_path(Path::new(path), check).map_err(|e| failed(set_up, e))?;
                Ok((PathBuf::from(path), claimed.read_only))
            }
            claims::Source::Local { path } => {
                use std::os::unix::fs::FileTypeExt;
                // upstream's getGlobalLocalPath (in NewMounter): a directory, or a block device.
                let kind = match std::fs::metadata(path) {
                    Ok(metadata) => metadata.file_type(),
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                        let message = format!("path {path:?} does not exist");
                        return Err(failed("MountVolume.NewMounter initialization", message));
                    }
                    Err(error) => {
                        return Err(failed("MountVolume.NewMounter initialization", error.to_string()));
                    }
                };
                if kind.is_block_device() {
                    let message =
                        "local volumes on a block device are not supported by keel-kubelet yet".into();
                    return Err(failed("MountVolume.MountDevice", message));
                }
                if !kind.is_dir() {
                    let message = "only directory and block device are supported".into();
                    return Err(failed("MountVolume.NewMounter initialization", message));
                }
                claims::no_backsteps(path)
                    .map_err(|e| failed(set_up, format!("invalid path: {path} {e}")))?;
                let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                let dir =
                    self.pod_dir(uid).join("volumes").join(claims::LOCAL_PLUGIN_DIR).join(&claimed.name);
                bind_mount(Path::new(path), &dir, claimed.read_only).map_err(|e| failed(set_up, e))?;
                Ok((dir, claimed.read_only))
            }
            claims::Source::Unsupported => {
                let message = "this PersistentVolume source is not supported by keel-kubelet yet".into();
                Err(failed(set_up, message))
            }
        }
    }

    /// Starts one container (upstream's startContainer): back-off, image, config, create, start.
    async fn start_container(
        &self,
        pod: &Pod,
        container: &Container,
        sandbox: &SandboxContext<'_>,
    ) -> Result<(), (String, String)> {
        let SandboxContext { runtime, sandbox_id, sandbox_config, pod_ips, sources, volumes } = *sandbox;
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let path = Some(field_path(pod, &container.name));
        let previous = runtime.container(&container.name);
        let restart_count = previous.map_or(0, |p| p.restart_count + 1);
        if let Some(exited) = previous.filter(|p| p.state == State::Exited) {
            let key = format!("{uid}/{}/{}", container.name, pod_actions::container_hash(container));
            if let Some(duration) = self.backing_off(&key, since(exited.finished_at)) {
                self.recorder.pod_event(
                    pod,
                    path,
                    Kind::Warning,
                    "BackOff",
                    format!(
                        "Back-off restarting failed container {} in pod {}",
                        container.name,
                        pod_name(pod)
                    ),
                );
                return Err((
                    "CrashLoopBackOff".into(),
                    format!(
                        "back-off {duration:?} restarting failed container={} pod={}",
                        container.name,
                        pod_name(pod)
                    ),
                ));
            }
        }
        let mut steps = Steps::new();
        let image_ref = self.ensure_image(pod, container).await?;
        steps.done("image");
        let failed = |reason: &str, message: String| {
            self.recorder.pod_event(pod, path.clone(), Kind::Warning, "Failed", format!("Error: {message}"));
            Err((reason.to_owned(), message))
        };
        let facts = self.facts(pod, pod_ips.to_vec());
        let env = match pod_config::environment(pod, container, &facts, sources) {
            Ok(env) => env,
            Err(message) => return failed("CreateContainerConfigError", message),
        };
        let mounts = match self.mounts(pod, container, volumes, pod_ips) {
            Ok(mounts) => mounts,
            Err(message) => return failed("CreateContainerConfigError", message),
        };
        let restart_count = u32::try_from(restart_count).unwrap_or(0);
        let mut config = pod_config::container_config(pod, container, restart_count, &image_ref, env, mounts);
        if let Some(resources) = config.linux.as_mut().and_then(|l| l.resources.as_mut()) {
            pod_config::no_swap(resources, self.env.swap);
        }
        steps.done("config");
        let mut cri = self.cri.clone();
        let created = cri
            .runtime
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: sandbox_id.to_owned(),
                config: Some(config),
                sandbox_config: Some(sandbox_config.clone()),
            })
            .await;
        let id = match created {
            Ok(created) => created.into_inner().container_id,
            Err(status) => return failed("CreateContainerError", rpc_message(&status)),
        };
        steps.done("create");
        self.recorder.pod_event(
            pod,
            path.clone(),
            Kind::Normal,
            "Created",
            format!("Created container: {}", container.name),
        );
        if let Err(status) =
            cri.runtime.start_container(cri::StartContainerRequest { container_id: id.clone() }).await
        {
            return failed("RunContainerError", rpc_message(&status));
        }
        steps.done("start");
        tracing::debug!(pod = %pod_name(pod), container = %container.name, %steps, "started a container");
        self.recorder.pod_event(
            pod,
            path.clone(),
            Kind::Normal,
            "Started",
            format!("Started container {}", container.name),
        );
        // upstream's startContainer step 4: the postStart hook; a failure kills the container.
        if let Some(hook) = container.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            let pod_ip = pod_ips.first().map(String::as_str).unwrap_or_default();
            if let Err(message) = self.run_hook(pod, container, &id, hook, pod_ip).await {
                // The event does not carry the message, which could hold secrets (as upstream).
                self.recorder.pod_event(
                    pod,
                    path,
                    Kind::Warning,
                    "FailedPostStartHook",
                    "PostStartHook failed".into(),
                );
                let grace = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30);
                self.kill_container(pod, &id, &container.name, grace, "FailedPostStartHook").await;
                return Err(("PostStartHookError".into(), message));
            }
        }
        Ok(())
    }

    /// Runs a lifecycle hook of `container` (upstream's handlerRunner); the error is upstream's
    /// message for it.
    async fn run_hook(
        &self,
        pod: &Pod,
        container: &Container,
        container_id: &str,
        hook: &k8s_openapi::api::core::v1::LifecycleHandler,
        pod_ip: &str,
    ) -> Result<(), String> {
        let handler = probes::Handler::of_hook(hook);
        let target = probes::target(handler, container, pod_ip, false);
        let failed = |kind: &str, what: String, error: String| {
            format!(
                "{kind} lifecycle hook ({what}) for Container {:?} in Pod {:?} failed - error: {error}",
                container.name,
                pod_name(pod)
            )
        };
        let target = match target {
            Ok(target) => target,
            Err(error) => return Err(format!("Cannot run handler: {error}")),
        };
        let outcome = prober::hook(&self.cri, container_id, &target).await;
        outcome.map_err(|error| match &target {
            probes::Target::Exec { command } => failed("Exec", format!("{command:?}"), error),
            probes::Target::Http { path, .. } => failed("HTTP", path.clone(), error),
            probes::Target::Sleep { seconds } => failed("Sleep", seconds.to_string(), error),
            _ => failed("TCP", String::new(), error),
        })
    }

    /// Stops a container within `grace` seconds (upstream's killContainer): its preStop hook first,
    /// within the grace period, then SIGTERM with what is left of it — at least
    /// [`MINIMUM_GRACE_SECONDS`], as upstream.
    async fn kill_container(&self, pod: &Pod, id: &str, name: &str, grace: i64, message: &str) {
        self.recorder.pod_event(
            pod,
            Some(field_path(pod, name)),
            Kind::Normal,
            "Killing",
            message.to_owned(),
        );
        let mut grace = grace;
        let spec = container_spec(pod, name);
        if let Some((spec, hook)) = spec.and_then(|c| Some((c, c.lifecycle.as_ref()?.pre_stop.as_ref()?)))
            && grace > 0
        {
            let started = Instant::now();
            let pod_ip = self
                .statuses
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(pod.metadata.uid.as_deref().unwrap_or_default())
                .and_then(|s| s.pod_ip.clone())
                .unwrap_or_default();
            let within = Duration::from_secs(u64::try_from(grace).unwrap_or(0));
            match tokio::time::timeout(within, self.run_hook(pod, spec, id, hook, &pod_ip)).await {
                Ok(Err(message)) => {
                    tracing::info!(pod = %pod_name(pod), container = name, %message, "preStop hook failed");
                    self.recorder.pod_event(
                        pod,
                        Some(field_path(pod, name)),
                        Kind::Warning,
                        "FailedPreStopHook",
                        "PreStopHook failed".into(),
                    );
                }
                Ok(Ok(())) => {}
                Err(_) => {
                    tracing::info!(
                        pod = %pod_name(pod), container = name, grace,
                        "preStop hook not completed in the grace period"
                    );
                }
            }
            grace -= i64::try_from(started.elapsed().as_secs()).unwrap_or(grace);
        }
        let grace = grace.max(MINIMUM_GRACE_SECONDS);
        let mut cri = self.cri.clone();
        let request = cri::StopContainerRequest { container_id: id.to_owned(), timeout: grace };
        if let Err(status) = cri.runtime.stop_container(request).await
            && status.code() != tonic::Code::NotFound
        {
            tracing::warn!(pod = %pod_name(pod), container = name, error = %status.message(), "stopping a container");
        }
    }

    /// Stops every running container within `grace` and every sandbox (upstream's killPodWithSyncResult).
    async fn kill_pod(&self, pod: &Pod, runtime: &PodRuntime, grace: i64) -> Result<(), tonic::Status> {
        // The containers together, then the sidecars one by one, the last declared first
        // (upstream's termination ordering), within what is left of the grace period.
        let sidecars: Vec<&str> = (pod.spec.iter().flat_map(|s| s.init_containers.iter().flatten()))
            .filter(|c| pod_actions::is_sidecar(c))
            .map(|c| c.name.as_str())
            .collect();
        let (mut last, running): (Vec<_>, Vec<_>) =
            runtime.running().cloned().partition(|c| sidecars.contains(&c.name.as_str()));
        last.sort_by_key(|c| std::cmp::Reverse(sidecars.iter().position(|name| *name == c.name)));
        let begun = Instant::now();
        let messages: Vec<String> =
            running.iter().map(|c| format!("Stopping container {}", c.name)).collect();
        let kills = running
            .iter()
            .zip(&messages)
            .map(|(c, message)| self.kill_container(pod, &c.id, &c.name, grace, message));
        futures::future::join_all(kills).await;
        for sidecar in &last {
            let left =
                grace.saturating_sub(i64::try_from(begun.elapsed().as_secs()).unwrap_or(i64::MAX)).max(0);
            let message = format!("Stopping container {}", sidecar.name);
            self.kill_container(pod, &sidecar.id, &sidecar.name, left, &message).await;
        }
        let mut cri = self.cri.clone();
        for sandbox in &runtime.sandboxes {
            let request = cri::StopPodSandboxRequest { pod_sandbox_id: sandbox.id.clone() };
            match cri.runtime.stop_pod_sandbox(request).await {
                Err(status) if status.code() != tonic::Code::NotFound => return Err(status),
                _ => {}
            }
        }
        Ok(())
    }

    /// Removes every container and sandbox of the pod and its directory.
    async fn remove_pod(&self, uid: &str, runtime: &PodRuntime) -> Result<(), tonic::Status> {
        let mut cri = self.cri.clone();
        for container in &runtime.containers {
            let request = cri::RemoveContainerRequest { container_id: container.id.clone() };
            match cri.runtime.remove_container(request).await {
                Err(status) if status.code() != tonic::Code::NotFound => return Err(status),
                _ => {}
            }
        }
        for sandbox in &runtime.sandboxes {
            let request = cri::RemovePodSandboxRequest { pod_sandbox_id: sandbox.id.clone() };
            match cri.runtime.remove_pod_sandbox(request).await {
                Err(status) if status.code() != tonic::Code::NotFound => return Err(status),
                _ => {}
            }
        }
        {
            let mut results = self.probe_results.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for container in &runtime.containers {
                results.remove(&container.id);
            }
        }
        let dir = self.pod_dir(uid);
        // A pod directory with a volume still mounted in it is kept: removing it would remove what
        // the volume holds (a local volume's data).
        if !unmount_under(&dir) {
            tracing::warn!(dir = %dir.display(), "volumes still mounted: the pod's directory is kept");
        } else if let Err(error) = std::fs::remove_dir_all(&dir)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), %error, "removing the pod's directory");
        }
        self.forget_backoff(uid);
        Ok(())
    }

    /// The mirror pod of the static pod `pod`, as the API last gave it.
    fn mirror_of(&self, pod: &Pod) -> Option<Pod> {
        self.mirrors.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&full_name(pod)).cloned()
    }

    /// The Node's UID, read once it is registered.
    async fn node_uid(&self) -> Option<String> {
        let known = self.node_uid.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if known.is_some() {
            return known;
        }
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        let uid = nodes.get_opt(&self.node_name).await.ok().flatten()?.metadata.uid?;
        *self.node_uid.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(uid.clone());
        Some(uid)
    }

    /// Deletes the mirror pod `mirror` (grace 0, its uid as precondition); whether it went.
    async fn delete_mirror(&self, mirror: &Pod) -> bool {
        let namespace = mirror.metadata.namespace.as_deref().unwrap_or("default");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: mirror.metadata.uid.clone(), resource_version: None }),
            ..DeleteParams::default()
        };
        match pods.delete(mirror.metadata.name.as_deref().unwrap_or_default(), &params).await {
            Ok(_) => {
                self.mirrors
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .remove(&full_name(mirror));
                true
            }
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => false,
            Err(error) => {
                tracing::warn!(pod = %full_name(mirror), %error, "failed deleting a mirror pod");
                false
            }
        }
    }

    /// Keeps the static pod `pod` mirrored in the API (upstream's SyncPod): a mirror being deleted
    /// or mirroring another version of the manifest is deleted, and a missing one created, owned
    /// by the Node.
    async fn ensure_mirror(&self, pod: &Pod) {
        let mut missing = true;
        if let Some(mirror) = self.mirror_of(pod) {
            missing = false;
            if mirror.metadata.deletion_timestamp.is_some() || !static_pods::is_mirror_of(&mirror, pod) {
                tracing::info!(pod = %pod_name(pod), "deleting a mirror pod that does not mirror its static pod");
                missing = self.delete_mirror(&mirror).await;
            }
        }
        if !missing {
            return;
        }
        let Some(node_uid) = self.node_uid().await else {
            tracing::info!(pod = %pod_name(pod), "no mirror pod yet: the Node is not registered");
            return;
        };
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        match pods.create(&PostParams::default(), &static_pods::mirror(pod, &node_uid)).await {
            Ok(created) => {
                let mut mirrors = self.mirrors.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                mirrors.insert(full_name(&created), created);
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => tracing::warn!(pod = %pod_name(pod), %error, "failed creating a mirror pod"),
        }
    }

    /// Patches the pod's status when it differs from what the API holds (upstream's status
    /// manager); the uid in the patch makes it fail for another pod of the same name. A static
    /// pod's status goes to its mirror (none yet: not written).
    async fn write_status(&self, pod: &Pod, runtime: &PodRuntime, reasons: &Reasons, terminal: bool) {
        let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now());
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let inputs = pod_status::Inputs {
            runtime,
            reasons,
            host_ips: &self.host_ips,
            runtime_name: &self.runtime_name,
            terminal,
            now,
            probes: &self.probe_snapshot(),
            deadline_exceeded: self.deadline_left(pod, now).is_some_and(|left| left <= 0),
        };
        // The kubelet's own conditions and startTime as it last wrote them (upstream's status
        // manager cache): the Pod a sync holds may be older than that write, and must not move
        // their transition times.
        let written =
            self.statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(&uid).cloned();
        // The pod fails past its deadline with this write: said once, whichever sync writes it
        // (upstream's activeDeadlineHandler records it as it evicts).
        let was_terminal = written
            .as_ref()
            .and_then(|w| w.phase.as_deref())
            .is_some_and(|p| p == "Failed" || p == "Succeeded");
        if inputs.deadline_exceeded && !was_terminal {
            let (reason, message) = pod_status::DEADLINE_EXCEEDED;
            self.recorder.pod_event(pod, None, Kind::Normal, reason, message.to_owned());
        }
        // What the API holds of the pod: itself, or a static pod's mirror.
        let in_api = match is_static(pod) {
            true => match self.mirror_of(pod) {
                Some(mirror) => mirror,
                None => {
                    tracing::debug!(pod = %pod_name(pod), "static pod has no mirror pod yet; status not written");
                    return;
                }
            },
            false => pod.clone(),
        };
        let mut base = pod.clone();
        base.status.clone_from(&in_api.status);
        if let Some(written) = written {
            let status = base.status.get_or_insert_with(Default::default);
            let mut conditions = status.conditions.take().unwrap_or_default();
            for mine in written
                .conditions
                .iter()
                .flatten()
                .filter(|c| pod_status::KUBELET_CONDITIONS.contains(&c.type_.as_str()))
            {
                match conditions.iter_mut().find(|c| c.type_ == mine.type_) {
                    Some(existing) => *existing = mine.clone(),
                    None => conditions.push(mine.clone()),
                }
            }
            status.conditions = Some(conditions);
            status.start_time = written.start_time.or(status.start_time.take());
        }
        let status = pod_status::status(&base, &inputs);
        let current = serde_json::to_value(&in_api.status).unwrap_or_default();
        let wanted = serde_json::to_value(&status).unwrap_or_default();
        if current == wanted {
            // What the API holds is what this kubelet would write: its probe workers read it.
            self.statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(uid, status);
            return;
        }
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let patch = serde_json::json!({"metadata": {"uid": in_api.metadata.uid}, "status": wanted});
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        match pods.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
            Ok(_) => {
                self.statuses.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(uid, status);
            }
            Err(error) => tracing::warn!(pod = %pod_name(pod), %error, "failed to update the pod's status"),
        }
    }

    /// The seconds left before the pod's activeDeadlineSeconds, from the startTime this kubelet
    /// wrote (or the API's); none without a deadline.
    fn deadline_left(&self, pod: &Pod, now: Timestamp) -> Option<i64> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let start = self
            .status_of(uid)
            .and_then(|s| s.start_time)
            .or_else(|| pod.status.as_ref().and_then(|s| s.start_time.clone()))
            .map(|t| t.0);
        pod_status::deadline_left(pod, start, now)
    }

    /// One sync of a pod that is to run (upstream's SyncPod).
    async fn sync_pod(&self, pod: &Pod) -> Result<Synced, String> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if is_static(pod) {
            self.ensure_mirror(pod).await;
        }
        let mut cri = self.cri.clone();
        let mut steps = Steps::new();
        let runtime = cri.pod(uid).await.map_err(|s| rpc_message(&s))?;
        steps.done("runtime");
        let grace = pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30);
        // Past its activeDeadlineSeconds, or already in a terminal phase, a pod runs nothing
        // again: its containers are stopped and its status written terminal (upstream's
        // activeDeadlineHandler and the pod worker's terminating path).
        let left = self.deadline_left(pod, Timestamp::now());
        let phase = self.status_of(uid).and_then(|s| s.phase).or_else(|| pod.status.as_ref()?.phase.clone());
        let finished = matches!(phase.as_deref(), Some("Succeeded" | "Failed"));
        if left.is_some_and(|left| left <= 0) || finished {
            if runtime.running().next().is_some() {
                self.kill_pod(pod, &runtime, grace).await.map_err(|s| rpc_message(&s))?;
            }
            let stopped = cri.pod(uid).await.map_err(|s| rpc_message(&s))?;
            self.write_status(pod, &stopped, &Reasons::new(), true).await;
            // upstream's SyncTerminatedPod: a finished pod's cgroup goes with its last process.
            self.destroy_cgroup(uid).await?;
            return Ok(Synced { again: self.resync });
        }
        let actions: PodActions = pod_actions::compute(pod, &runtime, &self.probe_snapshot());
        let mut reasons = Reasons::new();
        // A pod with a deadline is synced again when it falls due (from now when it has not
        // started yet: this sync starts it).
        let left = left.or_else(|| pod.spec.as_ref()?.active_deadline_seconds);
        let mut again = match left {
            Some(left) => self.resync.min(Duration::from_secs(u64::try_from(left).unwrap_or(0))),
            None => self.resync,
        };
        if actions.kill_pod {
            self.kill_pod(pod, &runtime, grace).await.map_err(|s| rpc_message(&s))?;
        }
        for kill in &actions.containers_to_kill {
            let name = runtime
                .containers
                .iter()
                .find(|c| c.id == kill.id)
                .map(|c| c.name.clone())
                .unwrap_or_default();
            // A probe's own terminationGracePeriodSeconds wins for the kill it causes.
            let spec = container_spec(pod, &name);
            let probe_grace = kill
                .probe
                .zip(spec)
                .and_then(|(kind, spec)| kind.of(spec))
                .and_then(|probe| probe.termination_grace_period_seconds);
            self.kill_container(pod, &kill.id, &name, probe_grace.unwrap_or(grace), &kill.message).await;
        }
        let mut sandbox_id = actions.sandbox_id.clone();
        let mut sandbox_config = pod_config::sandbox_config(pod, actions.attempt, &self.env);
        if let Some(cgroups) = &self.cgroups
            && let Some(linux) = sandbox_config.linux.as_mut()
        {
            linux.cgroup_parent = crate::pod_cgroups::pod_cgroup(&cgroups.root, pod);
        }
        // Volumes before anything starts (upstream's WaitForAttachAndMount), and again on every
        // sync so that changed ConfigMaps, Secrets and tokens reach the running pod.
        let set_up = match self.sources(pod).await {
            Ok(sources) => {
                steps.done("sources");
                self.set_up_volumes(pod, &sources).map(|volumes| (sources, volumes))
            }
            Err(message) => Err(vec![message]),
        };
        steps.done("volumes");
        let starting = actions.create_sandbox
            || !actions.init_to_start.is_empty()
            || !actions.containers_to_start.is_empty();
        let (sources, volumes) = match set_up {
            Ok(set_up) => set_up,
            Err(messages) => {
                for message in &messages {
                    self.recorder.pod_event(pod, None, Kind::Warning, "FailedMount", message.clone());
                }
                let message = messages.join("; ");
                if starting {
                    let runtime = cri.pod(uid).await.map_err(|s| rpc_message(&s))?;
                    self.write_status(pod, &runtime, &reasons, false).await;
                    return Ok(Synced { again: Duration::from_secs(2) });
                }
                tracing::warn!(pod = %pod_name(pod), %message, "volumes not updated");
                (Sources::default(), SetUp::new())
            }
        };
        if actions.create_sandbox
            && let Some(cgroups) = &self.cgroups
        {
            // upstream's SyncPod: the QoS cgroups updated and the pod's cgroup made before its
            // sandbox, once (a cgroup that exists is left as it is).
            let exists =
                sandbox_config.linux.as_ref().is_some_and(|l| cgroups.layout.exists(&l.cgroup_parent));
            if !exists {
                if let Err(error) = cgroups.update_qos(&self.active_pods()) {
                    tracing::info!(pod = %pod_name(pod), %error, "failed to update the QoS cgroups while syncing pod");
                }
                if let Err(message) = cgroups.ensure(pod) {
                    let event = format!("unable to ensure pod container exists: {message}");
                    self.recorder.pod_event(pod, None, Kind::Warning, "FailedCreatePodContainer", event);
                    return Err(format!(
                        "failed to ensure that the pod: {uid} cgroups exist and are correctly applied: {message}"
                    ));
                }
                steps.done("cgroup");
            }
        }
        if actions.create_sandbox {
            let log_dir = pod_config::log_directory(pod, &self.env);
            std::fs::create_dir_all(&log_dir).map_err(|e| format!("creating {log_dir}: {e}"))?;
            let request = cri::RunPodSandboxRequest {
                config: Some(sandbox_config.clone()),
                runtime_handler: String::new(),
            };
            match cri.runtime.run_pod_sandbox(request).await {
                Ok(created) => {
                    sandbox_id = created.into_inner().pod_sandbox_id;
                    steps.done("sandbox");
                }
                Err(status) => {
                    let message = format!("Failed to create pod sandbox: {}", rpc_message(&status));
                    self.recorder.pod_event(
                        pod,
                        None,
                        Kind::Warning,
                        "FailedCreatePodSandBox",
                        message.clone(),
                    );
                    return Err(message);
                }
            }
        }
        let runtime = if actions.create_sandbox || actions.kill_pod {
            cri.pod(uid).await.map_err(|s| rpc_message(&s))?
        } else {
            runtime
        };
        let pod_ips = runtime.ips().to_vec();
        let spec = pod.spec.clone().unwrap_or_default();
        // upstream's SyncPod steps 6 and 8: the init containers (a regular one that does not start
        // ends the sync), then the containers.
        let init = spec.init_containers.as_deref().unwrap_or_default();
        let to_start = (actions.init_to_start.iter().filter_map(|&i| init.get(i)))
            .map(|c| (c, !pod_actions::is_sidecar(c)))
            .chain(
                actions
                    .containers_to_start
                    .iter()
                    .filter_map(|&i| spec.containers.get(i))
                    .map(|c| (c, false)),
            );
        if !sandbox_id.is_empty() && (actions.create_sandbox || !actions.kill_pod) {
            for (container, regular_init) in to_start {
                let context = SandboxContext {
                    runtime: &runtime,
                    sandbox_id: &sandbox_id,
                    sandbox_config: &sandbox_config,
                    pod_ips: &pod_ips,
                    sources: &sources,
                    volumes: &volumes,
                };
                if let Err((reason, message)) = self.start_container(pod, container, &context).await {
                    tracing::info!(pod = %pod_name(pod), container = %container.name, %reason, %message, "container not started");
                    reasons.insert(container.name.clone(), (reason, message));
                    again = Duration::from_secs(1);
                    if regular_init {
                        break;
                    }
                }
                steps.done("container");
            }
        }
        let runtime = cri.pod(uid).await.map_err(|s| rpc_message(&s))?;
        steps.done("runtime");
        self.write_status(pod, &runtime, &reasons, false).await;
        steps.done("status");
        tracing::debug!(pod = %pod_name(pod), steps = %steps, "synced");
        Ok(Synced { again })
    }

    /// Tears a deleted pod down (upstream's SyncTerminatingPod and SyncTerminatedPod), writes
    /// its terminal status and deletes the Pod object.
    async fn terminate_pod(&self, pod: &Pod, grace: i64) -> Result<(), String> {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let mut cri = self.cri.clone();
        let runtime = cri.pod(uid).await.map_err(|s| rpc_message(&s))?;
        self.kill_pod(pod, &runtime, grace).await.map_err(|s| rpc_message(&s))?;
        let stopped = cri.pod(uid).await.map_err(|s| rpc_message(&s))?;
        self.write_status(pod, &stopped, &Reasons::new(), true).await;
        // upstream's podResourcesAreReclaimed: nothing running, volumes unmounted and the pod
        // cgroup gone before the final deletion. The exited containers and sandbox are removed
        // after it, by clean_up once the API has dropped the pod (upstream leaves them to its
        // container GC), off the deletion's path.
        if !unmount_under(&self.pod_dir(uid)) {
            return Err("the pod's volumes are still mounted".to_owned());
        }
        self.destroy_cgroup(uid).await?;
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(uid.to_owned()), resource_version: None }),
            ..DeleteParams::default()
        };
        match pods.delete(pod.metadata.name.as_deref().unwrap_or_default(), &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
            Err(error) => Err(format!("deleting the pod: {error}")),
        }
    }

    /// Removes what the runtime holds of a pod the API no longer has (upstream's
    /// HandlePodCleanups), stopping its containers within `grace`.
    async fn clean_up(&self, uid: &str, pod: Option<&Pod>, grace: i64) -> Result<(), String> {
        let mut cri = self.cri.clone();
        let runtime = cri.pod(uid).await.map_err(|s| rpc_message(&s))?;
        let placeholder = Pod::default();
        self.kill_pod(pod.unwrap_or(&placeholder), &runtime, grace).await.map_err(|s| rpc_message(&s))?;
        self.remove_pod(uid, &runtime).await.map_err(|s| rpc_message(&s))?;
        self.destroy_cgroup(uid).await?;
        // A static pod whose manifest went takes its mirror with it.
        if let Some(mirror) = pod.filter(|p| is_static(p)).and_then(|p| self.mirror_of(p)) {
            self.delete_mirror(&mirror).await;
        }
        Ok(())
    }

    /// Destroys the pod cgroups of `uid`, if the kubelet makes them (none left is no error).
    async fn destroy_cgroup(&self, uid: &str) -> Result<(), String> {
        let Some(cgroups) = self.cgroups.clone() else { return Ok(()) };
        let uid = uid.to_owned();
        tokio::task::spawn_blocking(move || cgroups.destroy(&uid)).await.map_err(|e| e.to_string())?
    }

    /// The static pods of staticPodPath now, each with its first-seen time.
    fn scan_static_pods(&self) -> Vec<Pod> {
        let Some((path, _)) = &self.static_pods else { return Vec::new() };
        let seen = |uid: &str| {
            let mut seen = self.static_seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            seen.entry(uid.to_owned()).or_insert_with(|| Timestamp::now().to_string()).clone()
        };
        static_pods::scan(path, &self.node_name, &seen)
    }
}

/// The time a sync spent in each of its steps, for its debug log (`runtime=2.1ms sources=…`).
struct Steps {
    last: Instant,
    taken: Vec<(&'static str, Duration)>,
}

impl Steps {
    fn new() -> Steps {
        Steps { last: Instant::now(), taken: Vec::new() }
    }

    fn done(&mut self, step: &'static str) {
        let now = Instant::now();
        self.taken.push((step, now - self.last));
        self.last = now;
    }
}

impl std::fmt::Display for Steps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (index, (step, took)) in self.taken.iter().enumerate() {
            let separator = if index == 0 { "" } else { " " };
            write!(f, "{separator}{step}={took:.1?}")?;
        }
        Ok(())
    }
}

/// The grace period a deleted pod's containers get: the deletion's, else the spec's.
fn grace_period(pod: &Pod) -> i64 {
    pod.metadata
        .deletion_grace_period_seconds
        .or_else(|| pod.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
        .unwrap_or(30)
        .max(0)
}

/// The latest version of a worker's pod, or that it is gone from the API (as its last version
/// said, when the watch delivered it: a force delete's grace period 0).
#[derive(Debug, Clone)]
enum Latest {
    Pod(Pod),
    Removed(Option<Pod>),
}

/// One probe of one container (upstream's prober worker): every periodSeconds, what the kubelet
/// last computed of the container decides whether it is probed; results past their threshold are
/// recorded, and a change wakes the pod's worker. Ends with the pod (or once nothing can change).
async fn probe_worker(
    kubelet: Arc<Kubelet>,
    pod: Pod,
    container: Container,
    kind: ProbeKind,
    mut updates: watch::Receiver<Latest>,
) {
    let Some(probe) = kind.of(&container).cloned() else { return };
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    // A sidecar restarts whatever the pod's restartPolicy: its probes go on.
    let never_restarts = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) == Some("Never")
        && !pod_actions::is_sidecar(&container);
    let timing = probes::Timing::of(&probe);
    let period = Duration::from_secs(timing.period_seconds);
    // Right after the kubelet starts, the probes of the pods it finds are spread over a period.
    if kubelet.started.elapsed() < period {
        let nanos = u64::from(Timestamp::now().subsec_nanosecond().unsigned_abs());
        tokio::time::sleep(Duration::from_nanos(nanos % u64::try_from(period.as_nanos()).unwrap_or(1))).await;
    }
    let timeout = Duration::from_secs(timing.timeout_seconds);
    let path = Some(field_path(&pod, &container.name));
    let mut worker = probes::Worker::new(kind, timing);
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let state = |updates: &watch::Receiver<Latest>| match &*updates.borrow() {
        Latest::Removed(_) => None,
        Latest::Pod(pod) => Some(pod.metadata.deletion_timestamp.is_some()),
    };
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            changed = updates.changed() => {
                if changed.is_err() || state(&updates).is_none() {
                    break;
                }
                continue;
            }
        }
        let Some(deleting) = state(&updates) else { break };
        let (mut view, pod_ip) = kubelet.probe_view(&uid, &container.name);
        view.deleting = deleting;
        view.never_restarts = never_restarts;
        let tick = worker.step(&view);
        if let Some(old) = &tick.forget {
            kubelet.set_probe_result(&uid, old, kind, None);
        }
        if let Some((id, outcome)) = &tick.set {
            kubelet.set_probe_result(&uid, id, kind, *outcome);
        }
        match tick.action {
            probes::Action::Stop => break,
            probes::Action::Wait => continue,
            probes::Action::Probe => {}
        }
        let target = probes::target(probes::Handler::of_probe(&probe), &container, &pod_ip, true);
        let mut probed = Probed::Error(String::new());
        // upstream's runProbeWithRetries: a probe that could not run is tried three times.
        for _ in 0..3 {
            probed = match &target {
                Ok(target) => prober::probe(&kubelet.cri, &view.container_id, target, timeout).await,
                Err(error) => Probed::Error(error.clone()),
            };
            if !matches!(probed, Probed::Error(_)) {
                break;
            }
        }
        let name = kind.name();
        let outcome = match probed {
            Probed::Success => Outcome::Success,
            Probed::Warning(output) => {
                let message = format!("{name} probe warning: {output}");
                kubelet.recorder.pod_event(&pod, path.clone(), Kind::Warning, "ProbeWarning", message);
                Outcome::Success
            }
            Probed::Failure(output) => {
                let message = format!("{name} probe failed: {output}");
                kubelet.recorder.pod_event(&pod, path.clone(), Kind::Warning, "Unhealthy", message);
                Outcome::Failure
            }
            Probed::Error(error) => {
                // upstream's doProbe throws the result away: no count towards a threshold.
                let message = format!("{name} probe errored and resulted in unknown state: {error}");
                kubelet.recorder.pod_event(&pod, path.clone(), Kind::Warning, "Unhealthy", message);
                continue;
            }
        };
        if let Some((id, outcome)) = worker.record(outcome) {
            kubelet.set_probe_result(&uid, &id, kind, Some(outcome));
        }
    }
    if !worker.container_id().is_empty() {
        let mut results = kubelet.probe_results.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(entry) = results.get_mut(worker.container_id()) {
            entry.set(kind, None);
        }
    }
}

/// One pod's worker (upstream's podWorkerLoop): syncs the latest version of its pod whenever it
/// changes, the relist wakes it, or its resync is due; tears it down once deleted.
async fn pod_worker(kubelet: Arc<Kubelet>, uid: String, mut updates: watch::Receiver<Latest>) {
    let mut backoff = Duration::from_millis(500);
    let mut last: Option<Pod> = None;
    let mut probing = false;
    loop {
        let latest = updates.borrow_and_update().clone();
        // upstream's prober AddPod: a worker for each probe of each container (probes are
        // immutable, so the first version of the pod has them all).
        if let Latest::Pod(pod) = &latest
            && !probing
        {
            probing = true;
            let sidecars = pod.spec.iter().flat_map(|s| s.init_containers.iter().flatten());
            let probed = sidecars
                .filter(|c| pod_actions::is_sidecar(c))
                .chain(pod.spec.iter().flat_map(|s| &s.containers));
            for container in probed {
                for kind in ProbeKind::ALL {
                    if kind.of(container).is_some() {
                        let worker = probe_worker(
                            kubelet.clone(),
                            pod.clone(),
                            container.clone(),
                            kind,
                            updates.clone(),
                        );
                        tokio::spawn(worker);
                    }
                }
            }
        }
        let wait = match &latest {
            Latest::Pod(pod) if pod.metadata.deletion_timestamp.is_none() => {
                // upstream's pod worker cancels a sync in flight once the pod is to terminate (a
                // hanging postStart hook or image pull must not hold its deletion up).
                tokio::select! {
                    synced = kubelet.sync_pod(pod) => match synced {
                        Ok(synced) => {
                            backoff = Duration::from_millis(500);
                            synced.again
                        }
                        Err(error) => {
                            tracing::warn!(pod = %pod_name(pod), %error, "error syncing pod, skipping");
                            backoff = (backoff * 2).min(Duration::from_secs(10));
                            backoff
                        }
                    },
                    () = terminating(updates.clone()) => {
                        tracing::info!(pod = %pod_name(pod), "sync cancelled: the pod is terminating");
                        Duration::ZERO
                    }
                }
            }
            Latest::Pod(pod) => match kubelet.terminate_pod(pod, grace_period(pod)).await {
                Ok(()) => kubelet.resync,
                Err(error) => {
                    tracing::warn!(pod = %pod_name(pod), %error, "error terminating pod");
                    Duration::from_secs(1)
                }
            },
            Latest::Removed(removed) => {
                let pod = removed.as_ref().or(last.as_ref());
                let grace = pod.map_or(0, grace_period);
                match kubelet.clean_up(&uid, pod, grace).await {
                    Ok(()) => return,
                    Err(error) => {
                        tracing::warn!(%uid, %error, "error removing a deleted pod's containers");
                        Duration::from_secs(1)
                    }
                }
            }
        };
        if let Latest::Pod(pod) = latest {
            last = Some(pod);
        }
        tokio::select! {
            changed = updates.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Returns once the pod's latest version is a deletion or its removal; never if the worker's
/// channel closes first.
async fn terminating(mut updates: watch::Receiver<Latest>) {
    loop {
        if updates.changed().await.is_err() {
            return std::future::pending().await;
        }
        let ends = match &*updates.borrow() {
            Latest::Removed(_) => true,
            Latest::Pod(pod) => pod.metadata.deletion_timestamp.is_some(),
        };
        if ends {
            return;
        }
    }
}

/// The pods of one node: the watch, the workers and the relist. Runs until dropped.
pub async fn run(kubelet: impl Into<Arc<Kubelet>>) {
    let kubelet: Arc<Kubelet> = kubelet.into();
    let woken = kubelet.woken.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    let Some(mut woken) = woken else {
        tracing::error!("the kubelet's pods are already running");
        return;
    };
    // Every Service, read into the store the pods' environments come from.
    let writer = kubelet.services_writer.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some(writer) = writer {
        let services: Api<Service> = Api::all(kubelet.client.clone());
        let stream = reflector::reflector(writer, watcher::watcher(services, watcher::Config::default()));
        let synced = kubelet.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream.default_backoff());
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::InitDone) => {
                        synced.services_synced.store(true, std::sync::atomic::Ordering::Release);
                    }
                    Err(error) => tracing::warn!(%error, "watching the Services"),
                    Ok(_) => {}
                }
            }
        });
    }
    let mut workers: HashMap<String, watch::Sender<Latest>> = HashMap::new();
    let pods: Api<Pod> = Api::all(kubelet.client.clone());
    let config = watcher::Config::default().fields(&format!("spec.nodeName={}", kubelet.node_name));
    let mut events = std::pin::pin!(watcher::watcher(pods, config));
    // The runtime's container events wake the pods' workers as the relist does, sooner.
    let events_of = kubelet.clone();
    let wake = kubelet.wake.clone();
    tokio::spawn(async move { pleg::run(events_of.cri.clone(), &events_of.pleg, wake).await });
    let mut relist = tokio::time::interval(RELIST_PERIOD);
    // While the events arrive, the relist is a safety net run every EVENTED_RELIST_PERIOD; a
    // relist is due at once after the API's pods are listed.
    let mut last_relist: Option<Instant> = None;
    let mut listed = false;
    let mut seen_in_init: Vec<String> = Vec::new();
    let mut fingerprints: BTreeMap<String, Vec<(String, i32)>> = BTreeMap::new();
    // The static pods now, by UID, and the mirrors the API listed since its last Init.
    let mut statics: HashMap<String, Pod> = HashMap::new();
    let mut mirrors_in_init: HashMap<String, Pod> = HashMap::new();
    let mut static_check = tokio::time::interval(
        kubelet.static_pods.as_ref().map_or(Duration::from_secs(3600), |(_, every)| *every),
    );
    let update = |workers: &mut HashMap<String, watch::Sender<Latest>>, uid: String, pod: Latest| {
        {
            let mut known = kubelet.pods.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match &pod {
                Latest::Pod(pod) => known.insert(uid.clone(), pod.clone()),
                Latest::Removed(_) => known.remove(&uid),
            };
        }
        workers.retain(|_, sender| !sender.is_closed());
        match workers.get(&uid) {
            Some(sender) => {
                sender.send_replace(pod);
            }
            None if matches!(pod, Latest::Pod(_)) => {
                let (sender, receiver) = watch::channel(pod);
                tokio::spawn(pod_worker(kubelet.clone(), uid.clone(), receiver));
                workers.insert(uid, sender);
            }
            None => {}
        }
    };
    // The static pods first: a restarted kubelet must know them before it removes what no pod
    // owns.
    let check_static = |workers: &mut HashMap<String, watch::Sender<Latest>>,
                        statics: &mut HashMap<String, Pod>| {
        if kubelet.static_pods.is_none() {
            return;
        }
        let now: HashMap<String, Pod> = kubelet
            .scan_static_pods()
            .into_iter()
            .map(|pod| (pod.metadata.uid.clone().unwrap_or_default(), pod))
            .collect();
        for (uid, pod) in statics.iter().filter(|(uid, _)| !now.contains_key(*uid)) {
            tracing::info!(pod = %pod_name(pod), "static pod manifest removed");
            update(workers, uid.clone(), Latest::Removed(Some(pod.clone())));
        }
        for (uid, pod) in &now {
            if statics.get(uid) != Some(pod) {
                update(workers, uid.clone(), Latest::Pod(pod.clone()));
            }
        }
        *statics = now;
    };
    check_static(&mut workers, &mut statics);
    // A mirror pod is never run: it is kept for its static pod, whose worker a change wakes.
    let mirrored =
        |workers: &HashMap<String, watch::Sender<Latest>>, statics: &HashMap<String, Pod>, mirror: &Pod| {
            let name = full_name(mirror);
            if let Some((uid, _)) = statics.iter().find(|(_, pod)| full_name(pod) == name)
                && let Some(sender) = workers.get(uid)
            {
                sender.send_modify(|_| {});
            }
        };
    loop {
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else { return };
                match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) if static_pods::is_mirror(&pod) => {
                        mirrors_in_init.insert(full_name(&pod), pod.clone());
                        let mut mirrors = kubelet.mirrors.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        mirrors.insert(full_name(&pod), pod.clone());
                        drop(mirrors);
                        mirrored(&workers, &statics, &pod);
                    }
                    Ok(watcher::Event::Delete(pod)) if static_pods::is_mirror(&pod) => {
                        let mut mirrors = kubelet.mirrors.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        if mirrors.get(&full_name(&pod)).is_some_and(|m| m.metadata.uid == pod.metadata.uid) {
                            mirrors.remove(&full_name(&pod));
                        }
                        drop(mirrors);
                        mirrored(&workers, &statics, &pod);
                    }
                    Ok(watcher::Event::Apply(pod)) => {
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        update(&mut workers, uid, Latest::Pod(pod));
                    }
                    Ok(watcher::Event::Delete(pod)) => {
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        update(&mut workers, uid, Latest::Removed(Some(pod)));
                    }
                    Ok(watcher::Event::Init) => {
                        seen_in_init.clear();
                        mirrors_in_init.clear();
                    }
                    Ok(watcher::Event::InitApply(pod)) => {
                        let uid = pod.metadata.uid.clone().unwrap_or_default();
                        seen_in_init.push(uid.clone());
                        update(&mut workers, uid, Latest::Pod(pod));
                    }
                    Ok(watcher::Event::InitDone) => {
                        *kubelet.mirrors.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
                            std::mem::take(&mut mirrors_in_init);
                        let gone: Vec<String> = workers
                            .keys()
                            .filter(|uid| !seen_in_init.contains(uid) && !statics.contains_key(*uid))
                            .cloned()
                            .collect();
                        for uid in gone {
                            update(&mut workers, uid, Latest::Removed(None));
                        }
                        listed = true;
                        // Every pod the runtime holds is looked at again now that the API's are
                        // known: what a kubelet before this one left of deleted pods goes.
                        fingerprints.clear();
                        last_relist = None;
                        relist.reset_immediately();
                    }
                    Err(error) => {
                        tracing::warn!(%error, "watching the node's pods");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
            _ = static_check.tick(), if kubelet.static_pods.is_some() => {
                check_static(&mut workers, &mut statics);
            }
            Some(uid) = woken.recv() => {
                if let Some(sender) = workers.get(&uid) {
                    sender.send_modify(|_| {});
                }
            }
            _ = relist.tick() => {
                if kubelet.pleg.evented()
                    && last_relist.is_some_and(|at| at.elapsed() < pleg::EVENTED_RELIST_PERIOD)
                {
                    continue;
                }
                last_relist = Some(Instant::now());
                let mut cri = kubelet.cri.clone();
                let current = match cri.relist().await {
                    Ok(current) => current,
                    Err(status) => {
                        tracing::debug!(error = %status.message(), "relisting the runtime");
                        continue;
                    }
                };
                workers.retain(|_, sender| !sender.is_closed());
                for (uid, entries) in &current {
                    if fingerprints.get(uid) == Some(entries) {
                        continue;
                    }
                    match workers.get(uid) {
                        Some(sender) => sender.send_modify(|_| {}),
                        // Left by a pod the API no longer has (or by a kubelet before this one).
                        None if listed => {
                            let kubelet = kubelet.clone();
                            let uid = uid.clone();
                            tokio::spawn(async move {
                                if let Err(error) = kubelet.clean_up(&uid, None, 2).await {
                                    tracing::warn!(%uid, %error, "removing an orphaned pod");
                                }
                            });
                        }
                        None => {}
                    }
                }
                // upstream's cleanupOrphanedPodCgroups: the cgroup of a pod with no worker and
                // nothing in the runtime goes.
                if listed && let Some(cgroups) = kubelet.cgroups.clone() {
                    let orphans: Vec<String> = cgroups
                        .pods()
                        .into_iter()
                        .map(|(uid, _)| uid)
                        .filter(|uid| !workers.contains_key(uid) && !current.contains_key(uid))
                        .collect();
                    if !orphans.is_empty() {
                        tokio::task::spawn_blocking(move || {
                            for uid in orphans {
                                tracing::info!(%uid, "removing an orphaned pod cgroup");
                                if let Err(error) = cgroups.destroy(&uid) {
                                    tracing::warn!(%uid, %error, "removing an orphaned pod cgroup");
                                }
                            }
                        });
                    }
                }
                fingerprints = current;
            }
        }
    }
}
