//! The RPCs that cross keel-shim's parts: CreateContainer (an image's snapshots mounted as the rootfs,
//! the pod's namespaces, files and cgroup parent, the OCI spec, the container's monitor), the stats
//! (cgroups and the writable layer), and the streaming server's [`Backend`] over containers and pods.
//! The hooks that let sandboxes stop and remove their containers are set here too.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::FutureExt;
use k8s_cri::v1 as api;
use tokio::io::{AsyncWriteExt, DuplexStream};
use tonic::Status;

use crate::cgroup::{self, Layout};
use crate::config::DEFAULT_HANDLER;
use crate::container::{Containers, CreateRequest};
use crate::image::reference::Reference;
use crate::image::{ImageStore, rootfs};
use crate::oci::features::HandlerFeatures;
use crate::oci::spec::{self, SpecInput};
use crate::sandbox::Sandboxes;
use crate::streaming::{Backend, BackendError, Streams};

/// Where a container's rootfs lives: `DIR/rootfs/<id>/{upper,work,merged,volumes}` (apart from the
/// container's own directory, which the container module creates and removes).
pub(super) fn rootfs_dir(root: &Path, id: &str) -> PathBuf {
    root.join("rootfs").join(id)
}

/// Lets the parts reach each other: sandboxes stop and remove their containers, containers unmount
/// their rootfs and report their pod's status in events.
pub(super) fn connect(root: &Path, sandboxes: &Sandboxes, containers: &Containers) {
    let rootfs_root = root.join("rootfs");
    containers.set_rootfs_unmounter(Arc::new(move |merged: &Path| {
        rootfs::unmount(merged)?;
        // Only a directory of ours goes (a record from elsewhere keeps its files).
        if let Some(dir) = merged.parent().filter(|dir| dir.parent() == Some(rootfs_root.as_path())) {
            match std::fs::remove_dir_all(dir) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }));
    let weak = sandboxes.clone();
    containers.set_sandbox_status(Arc::new(move |id: &str| weak.status(id, false).ok().map(|(s, _)| s)));
    let stop = containers.clone();
    sandboxes.set_stop_containers(Arc::new(move |sandbox_id: &str| {
        let containers = stop.clone();
        let sandbox_id = sandbox_id.to_owned();
        async move {
            for id in ids_in(&containers, &sandbox_id) {
                // As containerd: the pod is going, its containers are killed at once (the kubelet has
                // already stopped them with their grace period).
                containers.stop(&id, std::time::Duration::ZERO).await?;
            }
            Ok(())
        }
        .boxed()
    }));
    let remove = containers.clone();
    sandboxes.set_remove_containers(Arc::new(move |sandbox_id: &str| {
        let containers = remove.clone();
        let sandbox_id = sandbox_id.to_owned();
        async move {
            for id in ids_in(&containers, &sandbox_id) {
                containers.remove(&id).await?;
            }
            Ok(())
        }
        .boxed()
    }));
}

/// The containers of a pod.
fn in_pod(containers: &Containers, sandbox_id: &str) -> Vec<api::Container> {
    let filter = api::ContainerFilter { pod_sandbox_id: sandbox_id.to_owned(), ..Default::default() };
    containers.list(Some(&filter))
}

fn ids_in(containers: &Containers, sandbox_id: &str) -> Vec<String> {
    in_pod(containers, sandbox_id).into_iter().map(|c| c.id).collect()
}

/// The parts CreateContainer and the stats read.
#[derive(Debug, Clone)]
pub(super) struct Parts {
    pub root: PathBuf,
    pub images: ImageStore,
    pub sandboxes: Sandboxes,
    pub containers: Containers,
    pub cgroups: Option<Layout>,
    /// What each configured runtime handler supports (probed once at startup).
    pub handlers: BTreeMap<String, HandlerFeatures>,
}

impl Parts {
    /// The features of a pod's runtime handler (empty: the default); an unknown one has none.
    pub fn handler_features(&self, handler: &str) -> HandlerFeatures {
        let handler = if handler.is_empty() { DEFAULT_HANDLER } else { handler };
        self.handlers.get(handler).copied().unwrap_or_default()
    }

    /// CreateContainer: checks the request, mounts the image's snapshots, builds the spec and creates
    /// the container; on any error nothing is left (no mount, no directory).
    pub async fn create_container(&self, request: api::CreateContainerRequest) -> Result<String, Status> {
        let mut config = request
            .config
            .ok_or_else(|| Status::invalid_argument("CreateContainerRequest.config is required"))?;
        let metadata = config
            .metadata
            .clone()
            .filter(|m| !m.name.is_empty())
            .ok_or_else(|| Status::invalid_argument("the container's metadata.name is required"))?;
        let image_spec = config
            .image
            .clone()
            .filter(|i| !i.image.is_empty())
            .ok_or_else(|| Status::invalid_argument("the container's image is required"))?;
        let sandbox = self.sandboxes.get(&request.pod_sandbox_id)?;
        if sandbox.state != api::PodSandboxState::SandboxReady {
            return Err(Status::failed_precondition(format!("pod sandbox {} is not ready", sandbox.id)));
        }
        let sandbox_config = request.sandbox_config.unwrap_or_else(|| sandbox.config.clone());
        let image =
            self.images.get(&image_spec.image).map_err(|e| match Reference::parse(&image_spec.image) {
                // Not an image keel-shim has, nor a reference one could pull: bad input (as critest
                // expects), rather than NotFound.
                Err(bad) => Status::invalid_argument(bad.to_string()),
                Ok(_) => Status::from(e),
            })?;
        if in_pod(&self.containers, &sandbox.id).iter().any(|c| c.metadata.as_ref() == Some(&metadata)) {
            return Err(Status::already_exists(format!(
                "a container named {:?} (attempt {}) already exists in pod sandbox {}",
                metadata.name, metadata.attempt, sandbox.id
            )));
        }

        let id = crate::sandbox::new_id()?;
        let dir = rootfs_dir(&self.root, &id);
        let merged = dir.join("merged");
        let prepared = self.prepare_rootfs(&dir, &image.layers).await;
        if let Err(e) = prepared {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(Status::internal(format!("mounting the image's layers: {e}")));
        }
        let mut files = sandbox.files.clone();
        files.shm.clone_from(&sandbox.shm);
        let created = async {
            config.mounts.extend(spec::image_volume_mounts(&image.config, &config, &dir.join("volumes")));
            let cgroups_path = cgroup::cgroups_path(&sandbox.cgroup_parent, &id)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            let mut oci = spec::build(&SpecInput {
                container: &config,
                sandbox: &sandbox_config,
                image: &image.config,
                rootfs: &merged,
                namespaces: &sandbox.namespaces,
                files: &files,
                cgroups_path: &cgroups_path,
                privileged_allowed: true,
                recursive_read_only_supported: self
                    .handler_features(&sandbox.runtime_handler)
                    .recursive_read_only_mounts,
            })?;
            spec::annotate(&mut oci, &sandbox.id, &image_spec.image);
            let log_path = (!config.log_path.is_empty() && !sandbox_config.log_directory.is_empty())
                .then(|| Path::new(&sandbox_config.log_directory).join(&config.log_path));
            let stop_signal = image.config.config().as_ref().and_then(|c| c.stop_signal().clone());
            self.containers
                .create(CreateRequest {
                    id: id.clone(),
                    sandbox_id: sandbox.id.clone(),
                    metadata,
                    image: image_spec,
                    // As containerd: the image's first repo digest, else its id.
                    image_ref: image.repo_digests.first().cloned().unwrap_or_else(|| image.id.clone()),
                    image_id: image.id.clone(),
                    labels: config.labels.clone(),
                    annotations: config.annotations.clone(),
                    log_path,
                    spec: oci,
                    handler: sandbox.runtime_handler.clone(),
                    tty: config.tty,
                    stdin: config.stdin,
                    stdin_once: config.stdin_once,
                    rootfs_mounted_at: merged.clone(),
                    mounts: config.mounts.clone(),
                    stop_signal,
                })
                .await
                .map_err(Status::from)
        }
        .await;
        match created {
            Ok(_) => Ok(id),
            Err(e) => {
                let _ = rootfs::unmount(&merged);
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    async fn prepare_rootfs(&self, dir: &Path, layers: &[PathBuf]) -> io::Result<()> {
        let (dir, layers) = (dir.to_owned(), layers.to_vec());
        tokio::task::spawn_blocking(move || {
            for sub in ["upper", "work", "merged"] {
                std::fs::create_dir_all(dir.join(sub))?;
            }
            rootfs::mount(&layers, &dir.join("upper"), &dir.join("work"), &dir.join("merged"))
        })
        .await
        .map_err(io::Error::other)?
    }

    /// The container's stats now: its cgroup's CPU and memory, and its writable layer.
    pub async fn container_stats(&self, id: &str) -> Result<api::ContainerStats, Status> {
        let status = self.containers.status(id)?;
        let container = self
            .containers
            .list(Some(&api::ContainerFilter { id: status.id.clone(), ..Default::default() }))
            .into_iter()
            .next()
            .ok_or_else(|| Status::not_found(format!("container {id:?} not found")))?;
        Ok(self.stats_of(&container).await)
    }

    /// The stats of every container `filter` selects (id, pod, labels), as ListContainerStats.
    pub async fn list_container_stats(
        &self,
        filter: Option<&api::ContainerStatsFilter>,
    ) -> Result<Vec<api::ContainerStats>, Status> {
        let filter = filter.map(|f| api::ContainerFilter {
            id: f.id.clone(),
            pod_sandbox_id: f.pod_sandbox_id.clone(),
            label_selector: f.label_selector.clone(),
            state: None,
        });
        let mut out = Vec::new();
        for container in self.containers.list(filter.as_ref()) {
            out.push(self.stats_of(&container).await);
        }
        Ok(out)
    }

    async fn stats_of(&self, container: &api::Container) -> api::ContainerStats {
        let attributes = api::ContainerAttributes {
            id: container.id.clone(),
            metadata: container.metadata.clone(),
            labels: container.labels.clone(),
            annotations: container.annotations.clone(),
        };
        let sample = self.sandboxes.get(&container.pod_sandbox_id).ok().and_then(|sandbox| {
            let path = cgroup::cgroups_path(&sandbox.cgroup_parent, &container.id).ok()?;
            cgroup::stats(self.cgroups.as_ref()?, &path).ok()
        });
        let mut stats = match &sample {
            Some(sample) => cgroup::container_stats(attributes, sample, None),
            None => api::ContainerStats { attributes: Some(attributes), ..Default::default() },
        };
        let upper = rootfs_dir(&self.root, &container.id).join("upper");
        let mount = self.root.join("rootfs");
        let timestamp = sample.map_or_else(cgroup::now_ns, |s| s.timestamp);
        stats.writable_layer = tokio::task::spawn_blocking(move || disk_usage(&upper))
            .await
            .ok()
            .flatten()
            .map(|(bytes, inodes)| api::FilesystemUsage {
                timestamp,
                fs_id: Some(api::FilesystemIdentifier { mountpoint: mount.to_string_lossy().into_owned() }),
                used_bytes: Some(api::UInt64Value { value: bytes }),
                inodes_used: Some(api::UInt64Value { value: inodes }),
            });
        stats
    }

    /// A pod's stats: its cgroup parent's usage (when it has one) and its containers'.
    pub async fn pod_sandbox_stats(&self, id: &str) -> Result<api::PodSandboxStats, Status> {
        let sandbox = self.sandboxes.get(id)?;
        let attributes = api::PodSandboxAttributes {
            id: sandbox.id.clone(),
            metadata: sandbox.config.metadata.clone(),
            labels: sandbox.config.labels.clone(),
            annotations: sandbox.config.annotations.clone(),
        };
        let mut containers = Vec::new();
        for container in in_pod(&self.containers, &sandbox.id) {
            containers.push(self.stats_of(&container).await);
        }
        let sample = (!sandbox.cgroup_parent.is_empty())
            .then(|| cgroup::stats(self.cgroups.as_ref()?, &sandbox.cgroup_parent).ok())
            .flatten();
        Ok(match sample {
            Some(sample) => cgroup::pod_sandbox_stats(attributes, &sample, None, containers),
            None => api::PodSandboxStats {
                attributes: Some(attributes),
                linux: Some(api::LinuxPodSandboxStats { containers, ..Default::default() }),
                windows: None,
            },
        })
    }
}

/// Bytes and inodes under `dir` (not following symlinks, not crossing into other file systems).
fn disk_usage(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let top = std::fs::symlink_metadata(dir).ok()?;
    let (mut bytes, mut inodes) = (0u64, 0u64);
    let mut stack = vec![dir.to_owned()];
    while let Some(path) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else { continue };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            bytes += meta.blocks() * 512;
            inodes += 1;
            if meta.is_dir() && meta.dev() == top.dev() {
                stack.push(entry.path());
            }
        }
    }
    Some((bytes, inodes))
}

/// The streaming server's runtime side: exec and attach through the container module, port-forward
/// into the pod's network namespace.
#[derive(Debug, Clone)]
pub(super) struct StreamBackend {
    pub containers: Containers,
    pub sandboxes: Sandboxes,
}

impl Backend for StreamBackend {
    async fn exec(
        &self,
        container_id: &str,
        cmd: &[String],
        tty: bool,
        streams: Streams,
    ) -> Result<i32, BackendError> {
        // As a Status: its text (code and message) is what the client reads on the error stream.
        Ok(self.containers.exec(container_id, cmd, tty, streams).await.map_err(Status::from)?)
    }

    async fn attach(&self, container_id: &str, _tty: bool, streams: Streams) -> Result<(), BackendError> {
        Ok(self.containers.attach(container_id, streams).await.map_err(Status::from)?)
    }

    async fn port_forward(
        &self,
        pod_sandbox_id: &str,
        port: u16,
        stream: DuplexStream,
    ) -> Result<(), BackendError> {
        let sandbox = self.sandboxes.get(pod_sandbox_id).map_err(Status::from)?;
        if sandbox.state != api::PodSandboxState::SandboxReady {
            return Err(format!("pod sandbox {} is not ready", sandbox.id).into());
        }
        let netns = sandbox.namespaces.net.clone();
        let socket = tokio::task::spawn_blocking(move || connect_in(netns.as_deref(), port)).await??;
        socket.set_nonblocking(true)?;
        let socket = tokio::net::TcpStream::from_std(socket)?;
        let (mut from_pod, mut to_pod) = socket.into_split();
        let (mut from_client, mut to_client) = tokio::io::split(stream);
        let upstream = tokio::spawn(async move {
            let _ = tokio::io::copy(&mut from_client, &mut to_pod).await;
            let _ = to_pod.shutdown().await;
        });
        // The forward ends when the pod's side does (as the kubelet's and containerd's do): a client
        // waiting for the answer to end sees the stream close then, whether or not it closed its side.
        let copied = tokio::io::copy(&mut from_pod, &mut to_client).await;
        let _ = to_client.shutdown().await;
        upstream.abort();
        copied?;
        Ok(())
    }
}

/// Connects to `port` on the loopback of the network namespace at `netns` (the caller's own when
/// `None`: a host-network pod), from a thread of its own that enters it (a socket stays in the
/// namespace it was made in).
fn connect_in(netns: Option<&Path>, port: u16) -> io::Result<std::net::TcpStream> {
    let Some(netns) = netns else {
        return std::net::TcpStream::connect(("127.0.0.1", port));
    };
    let file = std::fs::File::open(netns)?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
                std::net::TcpStream::connect(("127.0.0.1", port))
                    .or_else(|_| std::net::TcpStream::connect(("::1", port)))
            })
            .join()
            .map_err(|_| io::Error::other("the namespace thread panicked"))?
    })
}
