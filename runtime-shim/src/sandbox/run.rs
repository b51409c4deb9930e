//! RunPodSandbox: checks the request, reserves the name, then makes the pod step by step (files,
//! namespaces, CNI ADD, hosts file, /dev/shm, pause process), writing the record after each step;
//! any failure undoes everything made so far.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_cri::v1 as api;
use serde_json::{Map, Value, json};

use super::record::{Network, Record, State};
use super::{
    Entry, Error, Sandboxes, files, namespace_options, namespaces, now_nanos, pause, poisoned, sandbox_name,
};
use crate::cni::{self, Attachment, NetworkList};
use crate::config::DEFAULT_HANDLER;
use crate::oci::spec::{PodFiles, PodNamespaces};

/// 64 random hex characters.
/// (Sandbox and container ids alike: the CRI leaves their form to the runtime; containerd uses the same.)
pub fn new_id() -> Result<String, Error> {
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
            return Err(Error::Io { context: "getrandom", source: e });
        }
        filled += usize::try_from(n).unwrap_or(0);
    }
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
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
) -> Result<Vec<(String, String)>, Error> {
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
            return Err(Error::Sysctl { name: name.clone(), value: value.clone() });
        }
    }
    Ok(sysctls)
}

impl Sandboxes {
    /// RunPodSandbox: returns the new sandbox's id. Runs to completion (or cleanup) on a task of its
    /// own, even when the caller goes away mid-way (a cancelled RPC must not leave half a pod).
    pub async fn run(&self, request: api::RunPodSandboxRequest) -> Result<String, Error> {
        let this = self.clone();
        tokio::spawn(async move { this.run_to_end(request).await })
            .await
            .map_err(Error::task("RunPodSandbox"))?
    }

    async fn run_to_end(&self, request: api::RunPodSandboxRequest) -> Result<String, Error> {
        let config = request.config.ok_or(Error::NoConfig)?;
        let metadata = config.metadata.clone().ok_or(Error::NoMetadata)?;
        if metadata.name.is_empty() || metadata.namespace.is_empty() || metadata.uid.is_empty() {
            return Err(Error::IncompleteMetadata);
        }
        let handler = if request.runtime_handler.is_empty() {
            DEFAULT_HANDLER.to_owned()
        } else {
            request.runtime_handler.clone()
        };
        if !self.inner.runtimes.contains_key(&handler) {
            return Err(Error::UnknownHandler {
                handler,
                handlers: self.inner.runtimes.keys().cloned().collect(),
            });
        }
        let options = namespace_options(&config);
        let host_network = options.network() == api::NamespaceMode::Node;
        let wanted = namespaces::Wanted {
            net: !host_network,
            ipc: options.ipc() != api::NamespaceMode::Node,
            uts: !host_network,
        };
        pod_sysctls(&config, wanted)?;
        let resolv = files::resolv_conf(config.dns_config.as_ref()).map_err(Error::DnsConfig)?;
        if !config.hostname.is_empty() && !files::valid_hostname(&config.hostname) {
            return Err(Error::Hostname(config.hostname));
        }
        let id = new_id()?;
        let name = sandbox_name(&metadata);
        {
            let mut names = self.inner.names.lock().map_err(poisoned)?;
            if let Some(holder) = names.get(&name) {
                return Err(Error::NameReserved { name, holder: holder.clone() });
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
                self.inner.entries.lock().map_err(poisoned)?.insert(id.clone(), Arc::clone(&entry));
                Ok(id)
            }
            Err(e) => {
                if let Err(cleanup) = self.tear_down(&entry, &dir).await {
                    tracing::warn!(%id, "cleaning up a failed RunPodSandbox: {cleanup}");
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

    async fn set_up(&self, entry: &Entry, dir: &Path, resolv: Option<String>) -> Result<(), Error> {
        std::fs::create_dir_all(&self.inner.root).map_err(Error::io("creating the sandboxes directory"))?;
        std::fs::create_dir(dir).map_err(Error::io("creating the sandbox directory"))?;
        let record = Self::update(entry, dir, |_| {})?;
        let config = &record.config;
        let options = namespace_options(config);
        let host_network = options.network() == api::NamespaceMode::Node;
        let host_ipc = options.ipc() == api::NamespaceMode::Node;

        // Files: hostname and resolv.conf now, hosts once the IPs are known.
        let hostname = files::hostname(config).map_err(Error::io("reading the node's hostname"))?;
        let file = |name: &str| dir.join(name);
        files::write(&file("hostname"), format!("{hostname}\n").as_bytes())
            .map_err(Error::io("writing the hostname file"))?;
        let resolv_text = match resolv {
            Some(text) => text,
            None => std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default(),
        };
        files::write(&file("resolv.conf"), resolv_text.as_bytes())
            .map_err(Error::io("writing resolv.conf"))?;

        // Namespaces.
        let wanted = namespaces::Wanted { net: !host_network, ipc: !host_ipc, uts: !host_network };
        let sysctls = pod_sysctls(config, wanted)?;
        let ns = namespaces::create(&dir.join("ns"), wanted, &hostname, &sysctls)
            .map_err(Error::io("creating the pod's namespaces"))?;
        let record = Self::update(entry, dir, |r| r.namespaces = ns.clone())?;

        // Network.
        let mut ips = Vec::new();
        if let Some(netns) = &record.namespaces.net {
            let network_error = Error::network("set up", &record.id);
            let list = NetworkList::load(&self.inner.cni_conf_dir).map_err(network_error)?;
            Self::update(entry, dir, |r| {
                r.network = Some(Network { list: list.to_value(), result: None, attached: true });
            })?;
            let attachment = self.attachment(&record, netns);
            let result = cni::add(&list, &self.inner.cni_bin_dir, &attachment, cni::PLUGIN_TIMEOUT)
                .await
                .map_err(network_error)?;
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
        files::write(&file("hosts"), hosts.as_bytes()).map_err(Error::io("writing the hosts file"))?;
        let pod_files = PodFiles {
            hostname: Some(file("hostname")),
            hosts: Some(file("hosts")),
            resolv_conf: Some(file("resolv.conf")),
            shm: None,
        };
        Self::update(entry, dir, |r| r.files = pod_files)?;

        // The pod's /dev/shm, as containerd mounts it for a pod with its own IPC namespace.
        if record.namespaces.ipc.is_some() {
            let shm = file("shm");
            mount_shm(&shm).map_err(Error::io("mounting the pod's /dev/shm"))?;
            Self::update(entry, dir, |r| r.shm = Some(shm))?;
        }

        // The pause process, only for a shared PID namespace.
        if options.pid() == api::NamespaceMode::Pod {
            let namespaces = record.namespaces.clone();
            let pause = tokio::task::spawn_blocking(move || pause::start(&namespaces))
                .await
                .map_err(Error::task("starting the pause process"))?
                .map_err(Error::io("starting the pause process"))?;
            Self::update(entry, dir, |r| {
                r.pause = Some(pause);
                r.namespaces.pid = Some(PathBuf::from(format!("/proc/{}/ns/pid", pause.pid)));
            })?;
        }
        Self::update(entry, dir, |r| r.state = State::Ready)?;
        Ok(())
    }

    pub(super) fn attachment(&self, record: &Record, netns: &Path) -> Attachment {
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
pub(super) fn unmount_shm(path: &Path) -> std::io::Result<()> {
    match nix::mount::umount2(path, nix::mount::MntFlags::MNT_DETACH) {
        Ok(()) | Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => {}
        Err(e) => return Err(e.into()),
    }
    match std::fs::remove_dir(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
