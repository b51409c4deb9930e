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
mod error;
pub mod files;
pub mod namespaces;
pub mod pause;
pub mod record;
mod run;
pub use run::new_id;
mod status;
mod stop;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use futures::future::BoxFuture;
use k8s_cri::v1 as api;

use crate::config::Config;
use crate::oci::spec::{PodFiles, PodNamespaces};
pub use error::Error;
use record::{Record, State};
use run::unmount_shm;

/// Stops or removes the containers of a sandbox (given its id); set by whoever owns containers.
pub type PodHook = Arc<dyn Fn(&str) -> BoxFuture<'static, Result<(), crate::container::Error>> + Send + Sync>;

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

fn poisoned<T>(_: T) -> Error {
    Error::Poisoned
}

/// The name containerd reserves for a sandbox: one sandbox per pod attempt.
fn sandbox_name(metadata: &api::PodSandboxMetadata) -> String {
    format!("{}_{}_{}_{}", metadata.name, metadata.namespace, metadata.uid, metadata.attempt)
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
    fn entry(&self, id_or_prefix: &str) -> Result<Option<(String, Arc<Entry>)>, Error> {
        if id_or_prefix.is_empty() {
            return Err(Error::EmptyId);
        }
        let entries = self.inner.entries.lock().map_err(poisoned)?;
        if let Some(entry) = entries.get(id_or_prefix) {
            return Ok(Some((id_or_prefix.to_owned(), Arc::clone(entry))));
        }
        let mut matches =
            entries.range(id_or_prefix.to_owned()..).take_while(|(id, _)| id.starts_with(id_or_prefix));
        match (matches.next(), matches.next()) {
            (Some((id, entry)), None) => Ok(Some((id.clone(), Arc::clone(entry)))),
            (None, _) => Ok(None),
            (Some(_), Some(_)) => Err(Error::AmbiguousId(id_or_prefix.to_owned())),
        }
    }

    fn found(&self, id_or_prefix: &str) -> Result<(String, Arc<Entry>), Error> {
        self.entry(id_or_prefix)?.ok_or_else(|| Error::NotFound(id_or_prefix.to_owned()))
    }

    /// The sandbox `id_or_prefix` (a full id or a unique prefix); NotFound otherwise.
    pub fn get(&self, id_or_prefix: &str) -> Result<Sandbox, Error> {
        let (_, entry) = self.found(id_or_prefix)?;
        let record = entry.record.lock().map_err(poisoned)?.clone();
        Ok(to_sandbox(&record))
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
    fn update(entry: &Entry, dir: &Path, change: impl FnOnce(&mut Record)) -> Result<Record, Error> {
        let mut record = entry.record.lock().map_err(poisoned)?;
        change(&mut record);
        record.save(dir).map_err(Error::io("writing the sandbox record"))?;
        Ok(record.clone())
    }

    async fn call_hook(&self, hook: &RwLock<Option<PodHook>>, id: &str) -> Result<(), Error> {
        let hook = hook.read().map_err(poisoned)?.clone();
        match hook {
            Some(hook) => Ok(hook(id).await?),
            None => Ok(()),
        }
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
            registry_mirrors: Vec::new(),
            stream_address: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
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
                if fail {
                    Err(crate::oci::runtime::RuntimeError::Failed {
                        binary: "runc".to_owned(),
                        command: "kill".to_owned(),
                        message: "the containers did not stop".to_owned(),
                    }
                    .into())
                } else {
                    Ok(())
                }
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
        let error = sandboxes.remove(&id).await.unwrap_err();
        assert!(matches!(error, Error::Containers(_)), "{error:?}");
        assert_eq!(error.to_string(), "runc kill: the containers did not stop");
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
        assert!(matches!(second.get(""), Err(Error::EmptyId)));
        assert!(matches!(second.get("nope"), Err(Error::NotFound(id)) if id == "nope"));
        assert_eq!(before.files.hostname.as_deref().map(std::fs::read_to_string).unwrap().unwrap(), "kept\n");
        assert_eq!(before.namespaces, PodNamespaces::default());
        assert!(
            matches!(second.run(node_pod("kept")).await, Err(Error::NameReserved { holder, .. }) if holder == id),
            "the reloaded name is reserved"
        );
        second.remove(&id).await.unwrap();
        assert!(second.list(None).unwrap().is_empty());
    }
}
