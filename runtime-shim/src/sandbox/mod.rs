//! Pod sandboxes: RunPodSandbox, StopPodSandbox, RemovePodSandbox, PodSandboxStatus and
//! ListPodSandbox.
//!
//! A sandbox is a directory `DIR/sandboxes/<id>/` holding its record (`sandbox.json`), its `hostname`,
//! `hosts` and `resolv.conf` files ([`files`]), and `ns/{net,ipc,uts}`: bind mounts of the pod's own
//! namespaces, made without any process ([`namespaces`]). A pause process ([`pause`]) runs only for a
//! pod sharing one PID namespace. The pod network is the CNI network list of the conf dir, run as
//! libcni runs it ([`crate::cni`]). States follow containerd: Ready after RunPodSandbox; NotReady after
//! StopPodSandbox (network torn down, namespaces unmounted, pause stopped — idempotent) or when the
//! pause process died; RemovePodSandbox stops first and leaves nothing ([`check::leftovers`]).
//! Records are reloaded by [`Sandboxes::open`], so sandboxes survive a keel-shim restart.

pub mod check;
pub mod files;
pub mod namespaces;
pub mod pause;
pub mod record;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use futures::future::BoxFuture;
use k8s_cri::v1 as api;
use serde_json::{Map, Value, json};
use tonic::Status;

use crate::cni::{self, Attachment, NetworkList};
use crate::config::{Config, DEFAULT_HANDLER};
use crate::oci::spec::{PodFiles, PodNamespaces};
use record::{Network, Record, State};

/// Stops or removes the containers of a sandbox (given its id); set by whoever owns containers.
pub type PodHook = Arc<dyn Fn(&str) -> BoxFuture<'static, Result<(), Status>> + Send + Sync>;

/// A sandbox as the rest of keel-shim sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sandbox {
    /// 64 hex characters.
    pub id: String,
    /// The config RunPodSandbox was given.
    pub config: api::PodSandboxConfig,
    /// The namespaces its containers join.
    pub namespaces: PodNamespaces,
    /// The files its containers mount.
    pub files: PodFiles,
    /// The pod's cgroup parent (from the config; empty when none).
    pub cgroup_parent: String,
    /// Its IPs, the pod IP first (empty for a host-network pod and once stopped).
    pub ips: Vec<IpAddr>,
    /// Ready or NotReady.
    pub state: api::PodSandboxState,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
    /// The runtime handler its containers run with.
    pub runtime_handler: String,
    /// The pod's /dev/shm, shared by its containers (a tmpfs; `None` for `ipc: NODE`: the node's).
    pub shm: Option<PathBuf>,
}

/// One sandbox in memory.
struct Entry {
    /// Held across a whole operation (run, stop, remove) on this sandbox: one at a time.
    op: tokio::sync::Mutex<()>,
    /// The current record; locked briefly, for reads and for updates within an operation.
    record: Mutex<Record>,
}

/// The sandboxes of one keel-shim; cheap to clone.
#[derive(Clone)]
pub struct Sandboxes {
    inner: Arc<Inner>,
}

struct Inner {
    /// `DIR/sandboxes`.
    root: PathBuf,
    cni_conf_dir: PathBuf,
    cni_bin_dir: PathBuf,
    runtimes: BTreeMap<String, PathBuf>,
    /// Every sandbox by id.
    entries: Mutex<BTreeMap<String, Arc<Entry>>>,
    /// Sandbox names (name_namespace_uid_attempt) reserved, with the id holding each.
    names: Mutex<HashMap<String, String>>,
    /// Stops a pod's containers (StopPodSandbox, RemovePodSandbox).
    stop_containers: RwLock<Option<PodHook>>,
    /// Removes a pod's containers (RemovePodSandbox).
    remove_containers: RwLock<Option<PodHook>>,
}

impl std::fmt::Debug for Sandboxes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let count = self.inner.entries.lock().map(|e| e.len()).unwrap_or_default();
        f.debug_struct("Sandboxes").field("root", &self.inner.root).field("sandboxes", &count).finish()
    }
}

fn internal(what: &str, e: impl std::fmt::Display) -> Status {
    Status::internal(format!("{what}: {e}"))
}

fn poisoned() -> Status {
    Status::internal("a sandbox lock is poisoned")
}

/// The name containerd reserves for a sandbox: one sandbox per pod attempt.
fn sandbox_name(metadata: &api::PodSandboxMetadata) -> String {
    format!("{}_{}_{}_{}", metadata.name, metadata.namespace, metadata.uid, metadata.attempt)
}

/// 64 random hex characters.
fn new_id() -> Result<String, Status> {
    let mut bytes = [0u8; 32];
    let mut filled = 0;
    while filled < bytes.len() {
        let rest = &mut bytes[filled..];
        // SAFETY: getrandom(2) writes at most `rest.len()` bytes into the buffer we own.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(internal("getrandom", e));
        }
        filled += usize::try_from(n).unwrap_or(0);
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}

fn namespace_options(config: &api::PodSandboxConfig) -> api::NamespaceOption {
    config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default()
}

/// The CNI `portMappings` capability argument (mappings with a host port, as containerd sends them).
fn port_mappings(config: &api::PodSandboxConfig) -> Value {
    let mappings: Vec<Value> = config
        .port_mappings
        .iter()
        .filter(|m| m.host_port > 0)
        .map(|m| {
            let protocol = match api::Protocol::try_from(m.protocol) {
                Ok(api::Protocol::Udp) => "udp",
                Ok(api::Protocol::Sctp) => "sctp",
                _ => "tcp",
            };
            json!({"hostPort": m.host_port, "containerPort": m.container_port, "protocol": protocol, "hostIP": m.host_ip})
        })
        .collect();
    Value::Array(mappings)
}

/// The pod's sysctls, sorted; each must belong to a namespace the pod owns (InvalidArgument otherwise:
/// a node-wide sysctl, or a network sysctl of a host-network pod).
fn pod_sysctls(
    config: &api::PodSandboxConfig,
    wanted: namespaces::Wanted,
) -> Result<Vec<(String, String)>, Status> {
    let mut sysctls: Vec<(String, String)> = config
        .linux
        .as_ref()
        .map(|l| l.sysctls.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    sysctls.sort();
    for (name, value) in &sysctls {
        let owned = match namespaces::sysctl_namespace(name) {
            Some(namespaces::SysctlNamespace::Net) => wanted.net,
            Some(namespaces::SysctlNamespace::Ipc) => wanted.ipc,
            None => false,
        };
        if !owned || name.contains("..") || value.contains('\n') {
            return Err(Status::invalid_argument(format!(
                "RunPodSandbox: sysctl {name:?}={value:?} is not allowed: not a sysctl of a namespace the pod owns"
            )));
        }
    }
    Ok(sysctls)
}

impl Sandboxes {
    /// The sandboxes under `config.root`, reloaded from their records. A directory without a readable
    /// record (a crash during RunPodSandbox before its first record) is cleaned up.
    pub fn open(config: &Config) -> Sandboxes {
        let root = config.root.join("sandboxes");
        let mut entries = BTreeMap::new();
        let mut names = HashMap::new();
        if let Ok(dirs) = std::fs::read_dir(&root) {
            for dir in dirs.filter_map(Result::ok) {
                let path = dir.path();
                match Record::load(&path) {
                    Ok(record) if dir.file_name().to_str() == Some(record.id.as_str()) => {
                        if let Some(metadata) = &record.config.metadata {
                            names.insert(sandbox_name(metadata), record.id.clone());
                        }
                        let entry =
                            Entry { op: tokio::sync::Mutex::new(()), record: Mutex::new(record.clone()) };
                        entries.insert(record.id, Arc::new(entry));
                    }
                    _ => {
                        tracing::warn!(dir = %path.display(), "removing a sandbox directory without a record");
                        namespaces::remove(&path.join("ns"));
                        if let Err(e) = unmount_shm(&path.join("shm")) {
                            tracing::warn!(dir = %path.display(), "unmounting its shm: {e}");
                        }
                        if let Err(e) = std::fs::remove_dir_all(&path) {
                            tracing::warn!(dir = %path.display(), "removing it failed: {e}");
                        }
                    }
                }
            }
        }
        Sandboxes {
            inner: Arc::new(Inner {
                root,
                cni_conf_dir: config.cni_conf_dir.clone(),
                cni_bin_dir: config.cni_bin_dir.clone(),
                runtimes: config.runtimes.clone(),
                entries: Mutex::new(entries),
                names: Mutex::new(names),
                stop_containers: RwLock::new(None),
                remove_containers: RwLock::new(None),
            }),
        }
    }

    /// Sets the hook that stops a pod's containers (before StopPodSandbox tears the pod down).
    pub fn set_stop_containers(&self, hook: PodHook) {
        if let Ok(mut slot) = self.inner.stop_containers.write() {
            *slot = Some(hook);
        }
    }

    /// Sets the hook that removes a pod's containers (RemovePodSandbox, after they are stopped).
    pub fn set_remove_containers(&self, hook: PodHook) {
        if let Ok(mut slot) = self.inner.remove_containers.write() {
            *slot = Some(hook);
        }
    }

    /// The directory of sandbox `id`.
    pub fn dir(&self, id: &str) -> PathBuf {
        self.inner.root.join(id)
    }

    /// The entry of the sandbox whose id is `id_or_prefix` or starts with it (unique prefix).
    fn entry(&self, id_or_prefix: &str) -> Result<Option<(String, Arc<Entry>)>, Status> {
        if id_or_prefix.is_empty() {
            return Err(Status::invalid_argument("the pod sandbox id is empty"));
        }
        let entries = self.inner.entries.lock().map_err(|_| poisoned())?;
        if let Some(entry) = entries.get(id_or_prefix) {
            return Ok(Some((id_or_prefix.to_owned(), Arc::clone(entry))));
        }
        let mut matches =
            entries.range(id_or_prefix.to_owned()..).take_while(|(id, _)| id.starts_with(id_or_prefix));
        match (matches.next(), matches.next()) {
            (Some((id, entry)), None) => Ok(Some((id.clone(), Arc::clone(entry)))),
            (None, _) => Ok(None),
            (Some(_), Some(_)) => Err(Status::invalid_argument(format!(
                "the pod sandbox id prefix {id_or_prefix:?} is ambiguous"
            ))),
        }
    }

    fn found(&self, id_or_prefix: &str) -> Result<(String, Arc<Entry>), Status> {
        self.entry(id_or_prefix)?
            .ok_or_else(|| Status::not_found(format!("pod sandbox {id_or_prefix:?} not found")))
    }

    /// The sandbox `id_or_prefix` (a full id or a unique prefix); NotFound otherwise.
    pub fn get(&self, id_or_prefix: &str) -> Result<Sandbox, Status> {
        let (_, entry) = self.found(id_or_prefix)?;
        let record = entry.record.lock().map_err(|_| poisoned())?.clone();
        Ok(to_sandbox(&record))
    }

    /// RunPodSandbox: returns the new sandbox's id. Runs to completion (or cleanup) on a task of its
    /// own, even when the caller goes away mid-way (a cancelled RPC must not leave half a pod).
    pub async fn run(&self, request: api::RunPodSandboxRequest) -> Result<String, Status> {
        let this = self.clone();
        tokio::spawn(async move { this.run_to_end(request).await })
            .await
            .map_err(|e| internal("RunPodSandbox", e))?
    }

    async fn run_to_end(&self, request: api::RunPodSandboxRequest) -> Result<String, Status> {
        let config = request.config.ok_or_else(|| Status::invalid_argument("RunPodSandbox: no config"))?;
        let metadata = config
            .metadata
            .clone()
            .ok_or_else(|| Status::invalid_argument("RunPodSandbox: the config has no metadata"))?;
        if metadata.name.is_empty() || metadata.namespace.is_empty() || metadata.uid.is_empty() {
            return Err(Status::invalid_argument(
                "RunPodSandbox: the metadata needs a name, a namespace and a uid",
            ));
        }
        let handler = if request.runtime_handler.is_empty() {
            DEFAULT_HANDLER.to_owned()
        } else {
            request.runtime_handler.clone()
        };
        if !self.inner.runtimes.contains_key(&handler) {
            return Err(Status::invalid_argument(format!(
                "RunPodSandbox: no runtime for {handler:?} is configured (handlers: {})",
                self.inner.runtimes.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        let options = namespace_options(&config);
        let host_network = options.network() == api::NamespaceMode::Node;
        let wanted = namespaces::Wanted {
            net: !host_network,
            ipc: options.ipc() != api::NamespaceMode::Node,
            uts: !host_network,
        };
        pod_sysctls(&config, wanted)?;
        let resolv = files::resolv_conf(config.dns_config.as_ref())
            .map_err(|e| Status::invalid_argument(format!("RunPodSandbox: {e}")))?;
        if !config.hostname.is_empty() && !files::valid_hostname(&config.hostname) {
            return Err(Status::invalid_argument(format!(
                "RunPodSandbox: {:?} is not a valid hostname",
                config.hostname
            )));
        }
        let id = new_id()?;
        let name = sandbox_name(&metadata);
        {
            let mut names = self.inner.names.lock().map_err(|_| poisoned())?;
            if let Some(holder) = names.get(&name) {
                return Err(Status::already_exists(format!(
                    "RunPodSandbox: the sandbox name {name:?} is reserved for {holder}"
                )));
            }
            names.insert(name.clone(), id.clone());
        }
        let dir = self.dir(&id);
        let record = Record {
            id: id.clone(),
            config,
            runtime_handler: handler,
            created_at: now_nanos(),
            state: State::NotReady,
            namespaces: PodNamespaces::default(),
            files: PodFiles::default(),
            pause: None,
            ips: Vec::new(),
            network: None,
            shm: None,
        };
        let entry = Arc::new(Entry { op: tokio::sync::Mutex::new(()), record: Mutex::new(record) });
        let _op = entry.op.lock().await;
        match self.set_up(&entry, &dir, resolv).await {
            Ok(()) => {
                // Listed only once made, as containerd adds a sandbox to its store.
                self.inner.entries.lock().map_err(|_| poisoned())?.insert(id.clone(), Arc::clone(&entry));
                Ok(id)
            }
            Err(e) => {
                if let Err(cleanup) = self.tear_down(&entry, &dir).await {
                    tracing::warn!(%id, "cleaning up a failed RunPodSandbox: {}", cleanup.message());
                }
                if let Err(cleanup) = std::fs::remove_dir_all(&dir)
                    && cleanup.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!(%id, "removing the directory of a failed RunPodSandbox: {cleanup}");
                }
                self.forget(&id, &name);
                Err(e)
            }
        }
    }

    fn forget(&self, id: &str, name: &str) {
        if let Ok(mut entries) = self.inner.entries.lock() {
            entries.remove(id);
        }
        if let Ok(mut names) = self.inner.names.lock()
            && names.get(name).is_some_and(|holder| holder == id)
        {
            names.remove(name);
        }
    }

    /// Applies `change` to the entry's record and writes it.
    fn update(entry: &Entry, dir: &Path, change: impl FnOnce(&mut Record)) -> Result<Record, Status> {
        let mut record = entry.record.lock().map_err(|_| poisoned())?;
        change(&mut record);
        record.save(dir).map_err(|e| internal("writing the sandbox record", e))?;
        Ok(record.clone())
    }

    async fn set_up(&self, entry: &Entry, dir: &Path, resolv: Option<String>) -> Result<(), Status> {
        std::fs::create_dir_all(&self.inner.root)
            .map_err(|e| internal("creating the sandboxes directory", e))?;
        std::fs::create_dir(dir).map_err(|e| internal("creating the sandbox directory", e))?;
        let record = Self::update(entry, dir, |_| {})?;
        let config = &record.config;
        let options = namespace_options(config);
        let host_network = options.network() == api::NamespaceMode::Node;
        let host_ipc = options.ipc() == api::NamespaceMode::Node;

        // Files: hostname and resolv.conf now, hosts once the IPs are known.
        let hostname = files::hostname(config).map_err(|e| internal("reading the node's hostname", e))?;
        let file = |name: &str| dir.join(name);
        files::write(&file("hostname"), format!("{hostname}\n").as_bytes())
            .map_err(|e| internal("writing the hostname file", e))?;
        let resolv_text = match resolv {
            Some(text) => text,
            None => std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
        };
        files::write(&file("resolv.conf"), resolv_text.as_bytes())
            .map_err(|e| internal("writing resolv.conf", e))?;

        // Namespaces.
        let wanted = namespaces::Wanted { net: !host_network, ipc: !host_ipc, uts: !host_network };
        let sysctls = pod_sysctls(config, wanted)?;
        let ns = namespaces::create(&dir.join("ns"), wanted, &hostname, &sysctls)
            .map_err(|e| internal("creating the pod's namespaces", e))?;
        let record = Self::update(entry, dir, |r| r.namespaces = ns.clone())?;

        // Network.
        let mut ips = Vec::new();
        if let Some(netns) = &record.namespaces.net {
            let list = NetworkList::load(&self.inner.cni_conf_dir).map_err(|e| {
                Status::new(
                    e.grpc_code(),
                    format!("failed to set up the network of sandbox {}: {e}", record.id),
                )
            })?;
            Self::update(entry, dir, |r| {
                r.network = Some(Network { list: list.to_value(), result: None, attached: true });
            })?;
            let attachment = self.attachment(&record, netns);
            let result = cni::add(&list, &self.inner.cni_bin_dir, &attachment, cni::PLUGIN_TIMEOUT)
                .await
                .map_err(|e| {
                    Status::new(
                        e.grpc_code(),
                        format!("failed to set up the network of sandbox {}: {e}", record.id),
                    )
                })?;
            ips = cni::pod_ips(&result, cni::IFNAME);
            let found = ips.clone();
            Self::update(entry, dir, |r| {
                if let Some(network) = &mut r.network {
                    network.result = Some(result);
                }
                r.ips = found;
            })?;
        }
        let hosts = if host_network {
            files::host_network_hosts(&std::fs::read_to_string("/etc/hosts").unwrap_or_default())
        } else {
            files::managed_hosts(&ips, &hostname)
        };
        files::write(&file("hosts"), hosts.as_bytes()).map_err(|e| internal("writing the hosts file", e))?;
        let pod_files = PodFiles {
            hostname: Some(file("hostname")),
            hosts: Some(file("hosts")),
            resolv_conf: Some(file("resolv.conf")),
        };
        Self::update(entry, dir, |r| r.files = pod_files)?;

        // The pod's /dev/shm, as containerd mounts it for a pod with its own IPC namespace.
        if record.namespaces.ipc.is_some() {
            let shm = file("shm");
            mount_shm(&shm).map_err(|e| internal("mounting the pod's /dev/shm", e))?;
            Self::update(entry, dir, |r| r.shm = Some(shm))?;
        }

        // The pause process, only for a shared PID namespace.
        if options.pid() == api::NamespaceMode::Pod {
            let namespaces = record.namespaces.clone();
            let pause = tokio::task::spawn_blocking(move || pause::start(&namespaces))
                .await
                .map_err(|e| internal("starting the pause process", e))?
                .map_err(|e| internal("starting the pause process", e))?;
            Self::update(entry, dir, |r| {
                r.pause = Some(pause);
                r.namespaces.pid = Some(PathBuf::from(format!("/proc/{}/ns/pid", pause.pid)));
            })?;
        }
        Self::update(entry, dir, |r| r.state = State::Ready)?;
        Ok(())
    }

    fn attachment(&self, record: &Record, netns: &Path) -> Attachment {
        let metadata = record.config.metadata.clone().unwrap_or_default();
        let mut capability_args = Map::new();
        capability_args.insert("portMappings".to_owned(), port_mappings(&record.config));
        Attachment {
            container_id: record.id.clone(),
            netns: netns.to_owned(),
            ifname: cni::IFNAME.to_owned(),
            args: vec![
                ("IgnoreUnknown".to_owned(), "1".to_owned()),
                ("K8S_POD_NAMESPACE".to_owned(), metadata.namespace),
                ("K8S_POD_NAME".to_owned(), metadata.name),
                ("K8S_POD_INFRA_CONTAINER_ID".to_owned(), record.id.clone()),
                ("K8S_POD_UID".to_owned(), metadata.uid),
            ],
            capability_args,
        }
    }

    /// Stops the pause process, runs CNI DEL, unmounts the namespaces and marks the sandbox NotReady;
    /// each step is skipped when already done, so it can be repeated after a failure.
    async fn tear_down(&self, entry: &Entry, dir: &Path) -> Result<(), Status> {
        let record = entry.record.lock().map_err(|_| poisoned())?.clone();
        if let Some(pause) = record.pause {
            tokio::task::spawn_blocking(move || pause::stop(&pause))
                .await
                .map_err(|e| internal("stopping the pause process", e))?
                .map_err(|e| internal("stopping the pause process", e))?;
            Self::update(entry, dir, |r| {
                r.pause = None;
                r.namespaces.pid = None;
            })?;
        }
        if let Some(network) = record.network.as_ref().filter(|n| n.attached) {
            let list = NetworkList::from_value(&network.list)
                .map_err(|e| internal("the sandbox's recorded network list", e))?;
            // A namespace that is gone (after a reboot, the file is no longer a mount) is passed as an
            // empty CNI_NETNS: plugins then release what they hold outside it (the IPAM address).
            let netns =
                record.namespaces.net.clone().filter(|p| namespaces::is_mounted(p)).unwrap_or_default();
            let attachment = self.attachment(&record, &netns);
            cni::del(
                &list,
                &self.inner.cni_bin_dir,
                &attachment,
                network.result.as_ref(),
                cni::PLUGIN_TIMEOUT,
            )
            .await
            .map_err(|e| {
                Status::new(
                    e.grpc_code(),
                    format!("failed to tear down the network of sandbox {}: {e}", record.id),
                )
            })?;
            Self::update(entry, dir, |r| {
                if let Some(network) = &mut r.network {
                    network.attached = false;
                }
                r.ips.clear();
            })?;
        }
        namespaces::remove(&dir.join("ns"));
        // Also when the record does not name it (a crash right after the mount).
        unmount_shm(&dir.join("shm")).map_err(|e| internal("unmounting the pod's /dev/shm", e))?;
        Self::update(entry, dir, |r| {
            r.shm = None;
            r.namespaces = PodNamespaces::default();
            r.state = State::NotReady;
        })?;
        Ok(())
    }

    async fn call_hook(&self, hook: &RwLock<Option<PodHook>>, id: &str) -> Result<(), Status> {
        let hook = hook.read().map_err(|_| poisoned())?.clone();
        match hook {
            Some(hook) => hook(id).await,
            None => Ok(()),
        }
    }

    /// StopPodSandbox: stops the pod's containers, then tears the pod down. Idempotent; an unknown id
    /// is NotFound (as containerd answers).
    pub async fn stop(&self, id_or_prefix: &str) -> Result<(), Status> {
        let (this, id_or_prefix) = (self.clone(), id_or_prefix.to_owned());
        tokio::spawn(async move { this.stop_to_end(&id_or_prefix).await })
            .await
            .map_err(|e| internal("StopPodSandbox", e))?
    }

    async fn stop_to_end(&self, id_or_prefix: &str) -> Result<(), Status> {
        let (id, entry) = self.found(id_or_prefix)?;
        let _op = entry.op.lock().await;
        self.call_hook(&self.inner.stop_containers, &id).await?;
        self.tear_down(&entry, &self.dir(&id)).await
    }

    /// RemovePodSandbox: stops the pod (as containerd does for a Ready one), removes its containers
    /// and everything of the sandbox. An unknown id succeeds (the CRI asks for idempotence).
    pub async fn remove(&self, id_or_prefix: &str) -> Result<(), Status> {
        let (this, id_or_prefix) = (self.clone(), id_or_prefix.to_owned());
        tokio::spawn(async move { this.remove_to_end(&id_or_prefix).await })
            .await
            .map_err(|e| internal("RemovePodSandbox", e))?
    }

    async fn remove_to_end(&self, id_or_prefix: &str) -> Result<(), Status> {
        let Some((id, entry)) = self.entry(id_or_prefix)? else {
            return Ok(());
        };
        let _op = entry.op.lock().await;
        if !self.inner.entries.lock().map_err(|_| poisoned())?.contains_key(&id) {
            // Removed while we waited for the operation lock.
            return Ok(());
        }
        let dir = self.dir(&id);
        self.call_hook(&self.inner.stop_containers, &id).await?;
        self.tear_down(&entry, &dir).await?;
        self.call_hook(&self.inner.remove_containers, &id).await?;
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(internal("removing the sandbox directory", e)),
        }
        let name = entry.record.lock().map_err(|_| poisoned())?.config.metadata.as_ref().map(sandbox_name);
        self.forget(&id, &name.unwrap_or_default());
        Ok(())
    }

    /// PodSandboxStatus; `verbose` adds the `info` map (key `info`: a JSON document).
    pub fn status(
        &self,
        id_or_prefix: &str,
        verbose: bool,
    ) -> Result<(api::PodSandboxStatus, HashMap<String, String>), Status> {
        let (_, entry) = self.found(id_or_prefix)?;
        let record = entry.record.lock().map_err(|_| poisoned())?.clone();
        let sandbox = to_sandbox(&record);
        let options = namespace_options(&record.config);
        let network = sandbox.ips.split_first().map(|(ip, rest)| api::PodSandboxNetworkStatus {
            ip: ip.to_string(),
            additional_ips: rest.iter().map(|ip| api::PodIp { ip: ip.to_string() }).collect(),
        });
        let status = api::PodSandboxStatus {
            id: record.id.clone(),
            metadata: record.config.metadata.clone(),
            state: sandbox.state.into(),
            created_at: record.created_at,
            network: Some(network.unwrap_or_default()),
            linux: Some(api::LinuxPodSandboxStatus {
                namespaces: Some(api::Namespace { options: Some(options) }),
            }),
            labels: record.config.labels.clone(),
            annotations: record.config.annotations.clone(),
            runtime_handler: record.runtime_handler.clone(),
        };
        let mut info = HashMap::new();
        if verbose {
            let pause_running = record.pause.as_ref().is_some_and(pause::alive);
            let document = json!({
                "pid": record.pause.map(|p| p.pid).unwrap_or_default(),
                "processStatus": if record.pause.is_some() {
                    if pause_running { "running" } else { "stopped" }
                } else {
                    "none"
                },
                "netNamespaceClosed": record.namespaces.net.is_none(),
                "runtimeHandler": record.runtime_handler,
                "namespaces": record.namespaces,
                "files": record.files,
                "config": record.config,
                "cniNetwork": record.network.as_ref().map(|n| n.list.clone()),
                "cniResult": record.network.as_ref().and_then(|n| n.result.clone()),
            });
            info.insert("info".to_owned(), document.to_string());
        }
        Ok((status, info))
    }

    /// ListPodSandbox with the filter's id (full or a unique prefix), state and label selector.
    pub fn list(&self, filter: Option<&api::PodSandboxFilter>) -> Result<Vec<api::PodSandbox>, Status> {
        let wanted_id = match filter.map(|f| f.id.as_str()).filter(|id| !id.is_empty()) {
            Some(id) => match self.entry(id) {
                Ok(Some((full, _))) => Some(full),
                // Nothing matches an unknown or ambiguous prefix.
                Ok(None) | Err(_) => return Ok(Vec::new()),
            },
            None => None,
        };
        let entries: Vec<Arc<Entry>> =
            self.inner.entries.lock().map_err(|_| poisoned())?.values().cloned().collect();
        let mut items = Vec::new();
        for entry in entries {
            let record = entry.record.lock().map_err(|_| poisoned())?.clone();
            if wanted_id.as_ref().is_some_and(|id| *id != record.id) {
                continue;
            }
            let sandbox = to_sandbox(&record);
            if let Some(state) = filter.and_then(|f| f.state.as_ref())
                && state.state != i32::from(sandbox.state)
            {
                continue;
            }
            if let Some(filter) = filter
                && !filter.label_selector.iter().all(|(k, v)| record.config.labels.get(k) == Some(v))
            {
                continue;
            }
            items.push(api::PodSandbox {
                id: record.id.clone(),
                metadata: record.config.metadata.clone(),
                state: sandbox.state.into(),
                created_at: record.created_at,
                labels: record.config.labels.clone(),
                annotations: record.config.annotations.clone(),
                runtime_handler: record.runtime_handler.clone(),
            });
        }
        Ok(items)
    }
}

/// The sandbox a record describes; Ready only while its pause process (if any) runs and its network
/// namespace (if any) is still mounted (not after a reboot).
fn to_sandbox(record: &Record) -> Sandbox {
    let ready = record.state == State::Ready
        && record.pause.as_ref().is_none_or(pause::alive)
        && record.namespaces.net.as_deref().is_none_or(namespaces::is_mounted);
    Sandbox {
        id: record.id.clone(),
        config: record.config.clone(),
        namespaces: record.namespaces.clone(),
        files: record.files.clone(),
        cgroup_parent: record.config.linux.as_ref().map(|l| l.cgroup_parent.clone()).unwrap_or_default(),
        ips: if ready { record.ips.clone() } else { Vec::new() },
        state: if ready { api::PodSandboxState::SandboxReady } else { api::PodSandboxState::SandboxNotready },
        created_at: record.created_at,
        runtime_handler: record.runtime_handler.clone(),
        shm: record.shm.clone(),
    }
}

/// The size of a pod's /dev/shm (containerd's and Docker's default, 64 MiB).
const SHM_SIZE: &str = "65536k";

/// Mounts a tmpfs for the pod's /dev/shm at `path` (created).
fn mount_shm(path: &Path) -> std::io::Result<()> {
    use nix::mount::MsFlags;
    std::fs::create_dir_all(path)?;
    let flags = MsFlags::MS_NODEV | MsFlags::MS_NOEXEC | MsFlags::MS_NOSUID;
    let data = format!("mode=1777,size={SHM_SIZE}");
    nix::mount::mount(Some("shm"), path, Some("tmpfs"), flags, Some(data.as_str()))
        .map_err(std::io::Error::from)
}

/// Unmounts the pod's /dev/shm and removes its mount point; a missing one is fine.
fn unmount_shm(path: &Path) -> std::io::Result<()> {
    match nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => {}
        Err(e) => return Err(e.into()),
    }
    match std::fs::remove_dir(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sandboxes over `root` with one handler (`runc`, any executable) and an empty CNI conf dir.
    fn sandboxes(root: &Path) -> Sandboxes {
        let config = Config {
            socket: root.join("cri.sock"),
            root: root.to_owned(),
            cni_conf_dir: root.join("net.d"),
            cni_bin_dir: root.join("bin"),
            runtimes: BTreeMap::from([("runc".to_owned(), PathBuf::from("/bin/true"))]),
            insecure_registries: Vec::new(),
        };
        Sandboxes::open(&config)
    }

    /// A pod of the node's namespaces only (no namespace, no CNI, no pause: runs unprivileged).
    fn node_pod(name: &str) -> api::RunPodSandboxRequest {
        let options = api::NamespaceOption {
            network: api::NamespaceMode::Node.into(),
            pid: api::NamespaceMode::Node.into(),
            ipc: api::NamespaceMode::Node.into(),
            ..Default::default()
        };
        let config = api::PodSandboxConfig {
            metadata: Some(api::PodSandboxMetadata {
                name: name.to_owned(),
                namespace: "default".to_owned(),
                uid: format!("uid-{name}"),
                attempt: 0,
            }),
            hostname: name.to_owned(),
            linux: Some(api::LinuxPodSandboxConfig {
                security_context: Some(api::LinuxSandboxSecurityContext {
                    namespace_options: Some(options),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        api::RunPodSandboxRequest { config: Some(config), runtime_handler: String::new() }
    }

    fn recording_hook(calls: &Arc<Mutex<Vec<String>>>, what: &'static str, fail: bool) -> PodHook {
        let calls = Arc::clone(calls);
        Arc::new(move |id: &str| {
            let calls = Arc::clone(&calls);
            let id = id.to_owned();
            Box::pin(async move {
                calls.lock().unwrap().push(format!("{what} {id}"));
                if fail { Err(Status::unavailable("the containers did not stop")) } else { Ok(()) }
            })
        })
    }

    #[tokio::test]
    async fn stop_and_remove_go_through_the_container_hooks() {
        let dir = tempfile::tempdir().unwrap();
        let sandboxes = sandboxes(dir.path());
        let calls = Arc::new(Mutex::new(Vec::new()));
        let id = sandboxes.run(node_pod("hooked")).await.unwrap();
        // Unset hooks: nothing to do.
        sandboxes.stop(&id).await.unwrap();
        sandboxes.set_stop_containers(recording_hook(&calls, "stop", false));
        sandboxes.set_remove_containers(recording_hook(&calls, "remove", false));
        sandboxes.stop(&id).await.unwrap();
        sandboxes.remove(&id).await.unwrap();
        assert_eq!(
            *calls.lock().unwrap(),
            [format!("stop {id}"), format!("stop {id}"), format!("remove {id}")]
        );
        assert!(!dir.path().join("sandboxes").join(&id).exists());
        // A failing hook fails the call and keeps the sandbox.
        let id = sandboxes.run(node_pod("stuck")).await.unwrap();
        sandboxes.set_stop_containers(recording_hook(&calls, "stop", true));
        assert_eq!(sandboxes.remove(&id).await.unwrap_err().code(), tonic::Code::Unavailable);
        assert_eq!(sandboxes.get(&id).unwrap().state, api::PodSandboxState::SandboxReady);
    }

    #[tokio::test]
    async fn records_are_reloaded_and_prefixes_resolve() {
        let dir = tempfile::tempdir().unwrap();
        let first = sandboxes(dir.path());
        let id = first.run(node_pod("kept")).await.unwrap();
        let before = first.get(&id).unwrap();
        // A directory without a record (a crash mid-way) is cleaned up at open.
        std::fs::create_dir(dir.path().join("sandboxes").join("f".repeat(64))).unwrap();
        let second = sandboxes(dir.path());
        assert_eq!(second.get(&id[..8]).unwrap(), before);
        assert!(!dir.path().join("sandboxes").join("f".repeat(64)).exists());
        assert_eq!(second.get("").unwrap_err().code(), tonic::Code::InvalidArgument);
        assert_eq!(second.get("nope").unwrap_err().code(), tonic::Code::NotFound);
        assert_eq!(before.files.hostname.as_deref().map(std::fs::read_to_string).unwrap().unwrap(), "kept\n");
        assert_eq!(before.namespaces, PodNamespaces::default());
        assert_eq!(
            second.run(node_pod("kept")).await.unwrap_err().code(),
            tonic::Code::AlreadyExists,
            "the reloaded name is reserved"
        );
        second.remove(&id).await.unwrap();
        assert!(second.list(None).unwrap().is_empty());
    }
}
