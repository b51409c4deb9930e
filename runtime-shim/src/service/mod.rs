//! The CRI v1 RuntimeService and ImageService of keel-shim: each RPC delegates to the part that owns
//! it — the image store ([`crate::image`]), the pod sandboxes ([`Sandboxes`]), the containers
//! ([`Containers`]), the streaming server ([`streaming::Server`]) — and [`pods`] serves the RPCs that
//! cross them (CreateContainer, the stats). CheckpointContainer, ListMetricDescriptors and
//! ListPodSandboxMetrics answer `Unimplemented` (the kubelet treats that as "not supported").

mod errors;
mod pods;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use k8s_cri::v1 as api;
use k8s_cri::v1::image_service_server::ImageService;
use k8s_cri::v1::runtime_service_server::RuntimeService;
use serde_json::json;
use tonic::{Request, Response, Status};

use crate::cgroup;
use crate::config::{Config, DEFAULT_HANDLER};
use crate::container::Containers;
use crate::image::ImageStore;
use crate::network;
use crate::oci::features;
use crate::sandbox::Sandboxes;
use crate::streaming;
use pods::{Parts, StreamBackend};

/// The runtime name Version reports.
pub const RUNTIME_NAME: &str = "keel-shim";
/// The CRI API version served.
pub const RUNTIME_API_VERSION: &str = "v1";
/// The kubelet runtime API version VersionResponse.version carries: "0.1.0", whatever the request
/// asks (containerd and CRI-O answer the same; kubelet and critest send "0.1.0").
pub const KUBE_API_VERSION: &str = "0.1.0";

/// The CRI services over one shared state; cheap to clone (one per tonic service).
#[derive(Debug, Clone)]
pub struct Shim {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Config,
    /// The images, sandboxes and containers, and the cgroup layout.
    parts: Parts,
    /// The server of the URLs Exec, Attach and PortForward answer.
    streaming: streaming::Server,
    /// The pod CIDRs kubelet last sent in UpdateRuntimeConfig (comma-separated, as sent).
    pod_cidr: Mutex<String>,
}

/// What keeps keel-shim from serving.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The image store cannot be opened.
    #[error("opening the image store: {0}")]
    Images(#[from] crate::image::ImageError),
    /// The containers cannot be restored, or the streaming server cannot listen.
    #[error("{0}: {1}")]
    Io(&'static str, std::io::Error),
}

impl Shim {
    /// The services for `config`: opens the image store, restores the sandboxes and containers under
    /// its root (re-adopting running containers through their monitors), connects them, and starts
    /// the streaming server. Call it inside a tokio runtime.
    ///
    /// # Errors
    /// The image store cannot be opened, the containers cannot be restored, or the streaming server
    /// cannot listen.
    pub async fn new(config: Config) -> Result<Shim, StartError> {
        let images = ImageStore::open_with_mirrors(
            &config.root,
            &config.insecure_registries,
            &config.registry_mirrors,
        )?;
        let sandboxes = Sandboxes::open(&config);
        let containers = Containers::open(&config.root, &config.runtimes)
            .map_err(|e| StartError::Io("restoring the containers", e))?;
        let root = std::path::absolute(&config.root).map_err(|e| StartError::Io("resolving --root", e))?;
        pods::connect(&root, &sandboxes, &containers);
        let cgroups = cgroup::Layout::host().inspect_err(|e| tracing::warn!("no cgroup stats: {e}")).ok();
        let backend = StreamBackend { containers: containers.clone(), sandboxes: sandboxes.clone() };
        let streaming = streaming::Server::start(config.stream_address, backend)
            .await
            .map_err(|e| StartError::Io("starting the streaming server", e))?;
        let handlers = features::probe_handlers(&config.runtimes).await;
        let parts = Parts { root, images, sandboxes, containers, cgroups, handlers };
        Ok(Shim { inner: Arc::new(Inner { config, parts, streaming, pod_cidr: Mutex::new(String::new()) }) })
    }

    /// The image store.
    pub fn images(&self) -> &ImageStore {
        &self.inner.parts.images
    }

    /// The pod sandboxes.
    pub fn sandboxes(&self) -> &Sandboxes {
        &self.inner.parts.sandboxes
    }

    /// The containers.
    pub fn containers(&self) -> &Containers {
        &self.inner.parts.containers
    }

    /// The streaming server's address.
    pub fn streaming_addr(&self) -> std::net::SocketAddr {
        self.inner.streaming.addr()
    }

    /// The pod CIDRs recorded by UpdateRuntimeConfig (empty until one is sent).
    pub fn pod_cidr(&self) -> String {
        self.inner.pod_cidr.lock().map(|cidr| cidr.clone()).unwrap_or_default()
    }
}

impl Shim {
    /// Fails unless container `id` exists and runs (NotFound, FailedPrecondition).
    fn running(&self, id: &str) -> Result<(), Status> {
        let status = self.inner.parts.containers.status(id)?;
        if status.state != api::ContainerState::ContainerRunning as i32 {
            return Err(Status::failed_precondition(format!("container {} is not running", status.id)));
        }
        Ok(())
    }
}

/// The status of an RPC not served.
fn unimplemented(service: &str, rpc: &str) -> Status {
    Status::unimplemented(format!("keel-shim does not implement runtime.v1.{service}/{rpc}"))
}

fn condition(kind: &str, ready: Result<(), String>) -> api::RuntimeCondition {
    match ready {
        Ok(()) => api::RuntimeCondition { r#type: kind.to_owned(), status: true, ..Default::default() },
        Err(message) => api::RuntimeCondition {
            r#type: kind.to_owned(),
            status: false,
            reason: "NetworkPluginNotReady".to_owned(),
            message: format!("Network plugin returns error: {message}"),
        },
    }
}

#[tonic::async_trait]
impl RuntimeService for Shim {
    type GetContainerEventsStream = BoxStream<'static, Result<api::ContainerEventResponse, Status>>;

    async fn version(
        &self,
        _request: Request<api::VersionRequest>,
    ) -> Result<Response<api::VersionResponse>, Status> {
        Ok(Response::new(api::VersionResponse {
            version: KUBE_API_VERSION.to_owned(),
            runtime_name: RUNTIME_NAME.to_owned(),
            runtime_version: env!("CARGO_PKG_VERSION").to_owned(),
            runtime_api_version: RUNTIME_API_VERSION.to_owned(),
        }))
    }

    async fn status(
        &self,
        request: Request<api::StatusRequest>,
    ) -> Result<Response<api::StatusResponse>, Status> {
        let config = &self.inner.config;
        let loaded = network::load(&config.cni_conf_dir);
        let conditions = vec![
            api::RuntimeCondition { r#type: "RuntimeReady".to_owned(), status: true, ..Default::default() },
            condition("NetworkReady", loaded.as_ref().map(|_| ()).map_err(Clone::clone)),
        ];
        let mut info = HashMap::new();
        if request.get_ref().verbose {
            let runtimes: HashMap<&String, String> =
                config.runtimes.iter().map(|(name, path)| (name, path.display().to_string())).collect();
            let config_json = json!({
                "socket": config.socket.display().to_string(),
                "root": config.root.display().to_string(),
                "cniConfDir": config.cni_conf_dir.display().to_string(),
                "cniBinDir": config.cni_bin_dir.display().to_string(),
                "runtimes": runtimes,
                "defaultRuntimeName": DEFAULT_HANDLER,
                "insecureRegistries": config.insecure_registries,
                // As containerd's registry.mirrors: registry → endpoints, in the order tried.
                "registryMirrors": config.registry_mirrors.iter().fold(
                    serde_json::Map::new(),
                    |mut mirrors, m| {
                        let scheme = if m.plain_http { "http" } else { "https" };
                        let endpoints = mirrors.entry(m.registry.clone()).or_insert_with(|| json!([]));
                        if let Some(list) = endpoints.as_array_mut() {
                            list.push(json!(format!("{scheme}://{}", m.host)));
                        }
                        mirrors
                    }
                ),
                "cgroupDriver": "cgroupfs",
            });
            info.insert("config".to_owned(), config_json.to_string());
            let (cni, load_status) = match &loaded {
                Ok(net) => (
                    json!({ "file": net.file.display().to_string(), "name": net.name, "plugins": net.plugins }),
                    "OK".to_owned(),
                ),
                Err(message) => (serde_json::Value::Null, message.clone()),
            };
            info.insert("cniconfig".to_owned(), cni.to_string());
            info.insert("lastCNILoadStatus".to_owned(), load_status);
            info.insert("podCIDR".to_owned(), self.pod_cidr());
        }
        Ok(Response::new(api::StatusResponse {
            status: Some(api::RuntimeStatus { conditions }),
            info,
            runtime_handlers: features::runtime_handlers(&self.inner.parts.handlers),
            // SupplementalGroupsPolicy (Merge and Strict) is applied, and ContainerStatus.user says
            // which identity the container's first process got.
            features: Some(api::RuntimeFeatures { supplemental_groups_policy: true }),
        }))
    }

    async fn runtime_config(
        &self,
        _request: Request<api::RuntimeConfigRequest>,
    ) -> Result<Response<api::RuntimeConfigResponse>, Status> {
        Ok(Response::new(api::RuntimeConfigResponse {
            linux: Some(api::LinuxRuntimeConfiguration { cgroup_driver: api::CgroupDriver::Cgroupfs.into() }),
        }))
    }

    async fn update_runtime_config(
        &self,
        request: Request<api::UpdateRuntimeConfigRequest>,
    ) -> Result<Response<api::UpdateRuntimeConfigResponse>, Status> {
        let cidr = request
            .into_inner()
            .runtime_config
            .and_then(|c| c.network_config)
            .map(|n| n.pod_cidr)
            .unwrap_or_default();
        // An empty CIDR changes nothing, as in containerd.
        if cidr.is_empty() {
            return Ok(Response::new(api::UpdateRuntimeConfigResponse {}));
        }
        for part in cidr.split(',') {
            if part.trim().parse::<ipnet::IpNet>().is_err() {
                return Err(Status::invalid_argument(format!(
                    "UpdateRuntimeConfig: pod CIDR {part:?} of {cidr:?} is not an IP prefix"
                )));
            }
        }
        tracing::info!(pod_cidr = %cidr, "pod CIDR updated");
        *self.inner.pod_cidr.lock().map_err(|_| Status::internal("the pod CIDR lock is poisoned"))? = cidr;
        Ok(Response::new(api::UpdateRuntimeConfigResponse {}))
    }

    async fn get_container_events(
        &self,
        request: Request<api::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        let events = self.inner.parts.containers.events();
        let stream = futures::stream::unfold(events, |mut events| async move {
            loop {
                match events.recv().await {
                    Ok(event) => return Some((Ok(event), events)),
                    // A subscriber too slow for the channel misses events, as with containerd's
                    // bounded event queue; the PLEG relists on its own period.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!("a container event subscriber missed {n} events");
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        let _ = request;
        Ok(Response::new(Box::pin(stream)))
    }

    async fn run_pod_sandbox(
        &self,
        request: Request<api::RunPodSandboxRequest>,
    ) -> Result<Response<api::RunPodSandboxResponse>, Status> {
        let id = self.inner.parts.sandboxes.run(request.into_inner()).await?;
        Ok(Response::new(api::RunPodSandboxResponse { pod_sandbox_id: id }))
    }

    async fn stop_pod_sandbox(
        &self,
        request: Request<api::StopPodSandboxRequest>,
    ) -> Result<Response<api::StopPodSandboxResponse>, Status> {
        self.inner.parts.sandboxes.stop(&request.into_inner().pod_sandbox_id).await?;
        Ok(Response::new(api::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        request: Request<api::RemovePodSandboxRequest>,
    ) -> Result<Response<api::RemovePodSandboxResponse>, Status> {
        self.inner.parts.sandboxes.remove(&request.into_inner().pod_sandbox_id).await?;
        Ok(Response::new(api::RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        request: Request<api::PodSandboxStatusRequest>,
    ) -> Result<Response<api::PodSandboxStatusResponse>, Status> {
        let request = request.into_inner();
        let (status, info) = self.inner.parts.sandboxes.status(&request.pod_sandbox_id, request.verbose)?;
        Ok(Response::new(api::PodSandboxStatusResponse { status: Some(status), info, ..Default::default() }))
    }

    async fn list_pod_sandbox(
        &self,
        request: Request<api::ListPodSandboxRequest>,
    ) -> Result<Response<api::ListPodSandboxResponse>, Status> {
        let items = self.inner.parts.sandboxes.list(request.into_inner().filter.as_ref())?;
        Ok(Response::new(api::ListPodSandboxResponse { items }))
    }

    async fn create_container(
        &self,
        request: Request<api::CreateContainerRequest>,
    ) -> Result<Response<api::CreateContainerResponse>, Status> {
        let id = self.inner.parts.create_container(request.into_inner()).await?;
        Ok(Response::new(api::CreateContainerResponse { container_id: id }))
    }

    async fn start_container(
        &self,
        request: Request<api::StartContainerRequest>,
    ) -> Result<Response<api::StartContainerResponse>, Status> {
        self.inner.parts.containers.start(&request.into_inner().container_id).await?;
        Ok(Response::new(api::StartContainerResponse {}))
    }

    async fn stop_container(
        &self,
        request: Request<api::StopContainerRequest>,
    ) -> Result<Response<api::StopContainerResponse>, Status> {
        let request = request.into_inner();
        let timeout = std::time::Duration::from_secs(u64::try_from(request.timeout).unwrap_or(0));
        self.inner.parts.containers.stop(&request.container_id, timeout).await?;
        Ok(Response::new(api::StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        request: Request<api::RemoveContainerRequest>,
    ) -> Result<Response<api::RemoveContainerResponse>, Status> {
        self.inner.parts.containers.remove(&request.into_inner().container_id).await?;
        Ok(Response::new(api::RemoveContainerResponse {}))
    }

    async fn list_containers(
        &self,
        request: Request<api::ListContainersRequest>,
    ) -> Result<Response<api::ListContainersResponse>, Status> {
        let containers = self.inner.parts.containers.list(request.into_inner().filter.as_ref());
        Ok(Response::new(api::ListContainersResponse { containers }))
    }

    async fn container_status(
        &self,
        request: Request<api::ContainerStatusRequest>,
    ) -> Result<Response<api::ContainerStatusResponse>, Status> {
        let status = self.inner.parts.containers.status(&request.into_inner().container_id)?;
        Ok(Response::new(api::ContainerStatusResponse { status: Some(status), ..Default::default() }))
    }

    async fn update_container_resources(
        &self,
        request: Request<api::UpdateContainerResourcesRequest>,
    ) -> Result<Response<api::UpdateContainerResourcesResponse>, Status> {
        let request = request.into_inner();
        let hugetlb = self.inner.parts.cgroups.as_ref().is_some_and(cgroup::Layout::hugetlb);
        let resources = request.linux.as_ref().map(|r| cgroup::resources(r, hugetlb)).unwrap_or_default();
        self.inner.parts.containers.update_resources(&request.container_id, resources).await?;
        Ok(Response::new(api::UpdateContainerResourcesResponse {}))
    }

    async fn reopen_container_log(
        &self,
        request: Request<api::ReopenContainerLogRequest>,
    ) -> Result<Response<api::ReopenContainerLogResponse>, Status> {
        self.inner.parts.containers.reopen_log(&request.into_inner().container_id).await?;
        Ok(Response::new(api::ReopenContainerLogResponse {}))
    }

    async fn exec_sync(
        &self,
        request: Request<api::ExecSyncRequest>,
    ) -> Result<Response<api::ExecSyncResponse>, Status> {
        let request = request.into_inner();
        let timeout = std::time::Duration::from_secs(u64::try_from(request.timeout).unwrap_or(0));
        let (stdout, stderr, exit_code) =
            self.inner.parts.containers.exec_sync(&request.container_id, &request.cmd, timeout).await?;
        Ok(Response::new(api::ExecSyncResponse { stdout, stderr, exit_code }))
    }

    async fn exec(&self, request: Request<api::ExecRequest>) -> Result<Response<api::ExecResponse>, Status> {
        let request = request.into_inner();
        // As the kubelet's runtime side: the container must exist and run before a URL is handed out.
        self.running(&request.container_id)?;
        Ok(Response::new(self.inner.streaming.get_exec(&request)?))
    }

    async fn attach(
        &self,
        request: Request<api::AttachRequest>,
    ) -> Result<Response<api::AttachResponse>, Status> {
        let request = request.into_inner();
        self.running(&request.container_id)?;
        Ok(Response::new(self.inner.streaming.get_attach(&request)?))
    }

    async fn port_forward(
        &self,
        request: Request<api::PortForwardRequest>,
    ) -> Result<Response<api::PortForwardResponse>, Status> {
        let request = request.into_inner();
        self.inner.parts.sandboxes.get(&request.pod_sandbox_id)?;
        Ok(Response::new(self.inner.streaming.get_port_forward(&request)?))
    }

    async fn container_stats(
        &self,
        request: Request<api::ContainerStatsRequest>,
    ) -> Result<Response<api::ContainerStatsResponse>, Status> {
        let stats = self.inner.parts.container_stats(&request.into_inner().container_id).await?;
        Ok(Response::new(api::ContainerStatsResponse { stats: Some(stats) }))
    }

    async fn list_container_stats(
        &self,
        request: Request<api::ListContainerStatsRequest>,
    ) -> Result<Response<api::ListContainerStatsResponse>, Status> {
        let stats = self.inner.parts.list_container_stats(request.into_inner().filter.as_ref()).await?;
        Ok(Response::new(api::ListContainerStatsResponse { stats }))
    }

    async fn pod_sandbox_stats(
        &self,
        request: Request<api::PodSandboxStatsRequest>,
    ) -> Result<Response<api::PodSandboxStatsResponse>, Status> {
        let stats = self.inner.parts.pod_sandbox_stats(&request.into_inner().pod_sandbox_id).await?;
        Ok(Response::new(api::PodSandboxStatsResponse { stats: Some(stats) }))
    }

    async fn list_pod_sandbox_stats(
        &self,
        request: Request<api::ListPodSandboxStatsRequest>,
    ) -> Result<Response<api::ListPodSandboxStatsResponse>, Status> {
        let filter = request.into_inner().filter;
        let filter =
            filter.map(|f| api::PodSandboxFilter { id: f.id, label_selector: f.label_selector, state: None });
        let mut stats = Vec::new();
        for sandbox in self.inner.parts.sandboxes.list(filter.as_ref())? {
            // A pod removed meanwhile is left out.
            if let Ok(s) = self.inner.parts.pod_sandbox_stats(&sandbox.id).await {
                stats.push(s);
            }
        }
        Ok(Response::new(api::ListPodSandboxStatsResponse { stats }))
    }

    async fn checkpoint_container(
        &self,
        _request: Request<api::CheckpointContainerRequest>,
    ) -> Result<Response<api::CheckpointContainerResponse>, Status> {
        Err(unimplemented("RuntimeService", "CheckpointContainer"))
    }

    async fn list_metric_descriptors(
        &self,
        _request: Request<api::ListMetricDescriptorsRequest>,
    ) -> Result<Response<api::ListMetricDescriptorsResponse>, Status> {
        Err(unimplemented("RuntimeService", "ListMetricDescriptors"))
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _request: Request<api::ListPodSandboxMetricsRequest>,
    ) -> Result<Response<api::ListPodSandboxMetricsResponse>, Status> {
        Err(unimplemented("RuntimeService", "ListPodSandboxMetrics"))
    }
}

#[tonic::async_trait]
impl ImageService for Shim {
    async fn list_images(
        &self,
        request: Request<api::ListImagesRequest>,
    ) -> Result<Response<api::ListImagesResponse>, Status> {
        Ok(Response::new(self.inner.parts.images.list_images(request.get_ref())))
    }

    async fn image_status(
        &self,
        request: Request<api::ImageStatusRequest>,
    ) -> Result<Response<api::ImageStatusResponse>, Status> {
        self.inner.parts.images.image_status(request.get_ref()).map(Response::new)
    }

    async fn pull_image(
        &self,
        request: Request<api::PullImageRequest>,
    ) -> Result<Response<api::PullImageResponse>, Status> {
        self.inner.parts.images.pull_image(request.get_ref()).await.map(Response::new)
    }

    async fn remove_image(
        &self,
        request: Request<api::RemoveImageRequest>,
    ) -> Result<Response<api::RemoveImageResponse>, Status> {
        self.inner.parts.images.remove_image(request.get_ref()).await.map(Response::new)
    }

    async fn image_fs_info(
        &self,
        _request: Request<api::ImageFsInfoRequest>,
    ) -> Result<Response<api::ImageFsInfoResponse>, Status> {
        self.inner.parts.images.image_fs_info().await.map(Response::new)
    }
}
