//! The CRI v1 RuntimeService and ImageService of keel-shim. Implemented so far: Version, Status,
//! RuntimeConfig, UpdateRuntimeConfig, the ImageService (delegated to [`crate::image`]) and the pod
//! sandbox RPCs (served by [`Sandboxes`]); every
//! other RPC answers `Unimplemented` with a message naming it (the server is built RPC by RPC).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use k8s_cri::v1 as api;
use k8s_cri::v1::image_service_server::ImageService;
use k8s_cri::v1::runtime_service_server::RuntimeService;
use serde_json::json;
use tonic::{Request, Response, Status};

use crate::config::{Config, DEFAULT_HANDLER};
use crate::image::ImageStore;
use crate::network;
use crate::sandbox::Sandboxes;

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
    /// The pod sandboxes.
    sandboxes: Sandboxes,
    /// The pod CIDRs kubelet last sent in UpdateRuntimeConfig (comma-separated, as sent).
    pod_cidr: Mutex<String>,
    /// The images under `DIR/content`, `DIR/images` and `DIR/snapshots`.
    images: ImageStore,
}

impl Shim {
    /// The services for `config`, opening the image store under its root.
    ///
    /// # Errors
    /// The image store cannot be opened.
    pub fn new(config: Config) -> Result<Shim, crate::image::ImageError> {
        let images = ImageStore::open(&config.root, &config.insecure_registries)?;
        let sandboxes = Sandboxes::open(&config);
        Ok(Shim { inner: Arc::new(Inner { config, sandboxes, pod_cidr: Mutex::new(String::new()), images }) })
    }

    /// The image store.
    pub fn images(&self) -> &ImageStore {
        &self.inner.images
    }

    /// The pod sandboxes.
    pub fn sandboxes(&self) -> &Sandboxes {
        &self.inner.sandboxes
    }

    /// The pod CIDRs recorded by UpdateRuntimeConfig (empty until one is sent).
    pub fn pod_cidr(&self) -> String {
        self.inner.pod_cidr.lock().map(|cidr| cidr.clone()).unwrap_or_default()
    }
}

/// The status of an RPC not served yet.
fn unimplemented(service: &str, rpc: &str) -> Status {
    Status::unimplemented(format!("keel-shim does not implement runtime.v1.{service}/{rpc} yet"))
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
            ..Default::default()
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
        _request: Request<api::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        Err(unimplemented("RuntimeService", "GetContainerEvents"))
    }

    async fn run_pod_sandbox(
        &self,
        request: Request<api::RunPodSandboxRequest>,
    ) -> Result<Response<api::RunPodSandboxResponse>, Status> {
        let id = self.inner.sandboxes.run(request.into_inner()).await?;
        Ok(Response::new(api::RunPodSandboxResponse { pod_sandbox_id: id }))
    }

    async fn stop_pod_sandbox(
        &self,
        request: Request<api::StopPodSandboxRequest>,
    ) -> Result<Response<api::StopPodSandboxResponse>, Status> {
        self.inner.sandboxes.stop(&request.into_inner().pod_sandbox_id).await?;
        Ok(Response::new(api::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        request: Request<api::RemovePodSandboxRequest>,
    ) -> Result<Response<api::RemovePodSandboxResponse>, Status> {
        self.inner.sandboxes.remove(&request.into_inner().pod_sandbox_id).await?;
        Ok(Response::new(api::RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        request: Request<api::PodSandboxStatusRequest>,
    ) -> Result<Response<api::PodSandboxStatusResponse>, Status> {
        let request = request.into_inner();
        let (status, info) = self.inner.sandboxes.status(&request.pod_sandbox_id, request.verbose)?;
        Ok(Response::new(api::PodSandboxStatusResponse { status: Some(status), info, ..Default::default() }))
    }

    async fn list_pod_sandbox(
        &self,
        request: Request<api::ListPodSandboxRequest>,
    ) -> Result<Response<api::ListPodSandboxResponse>, Status> {
        let items = self.inner.sandboxes.list(request.into_inner().filter.as_ref())?;
        Ok(Response::new(api::ListPodSandboxResponse { items }))
    }

    async fn create_container(
        &self,
        _request: Request<api::CreateContainerRequest>,
    ) -> Result<Response<api::CreateContainerResponse>, Status> {
        Err(unimplemented("RuntimeService", "CreateContainer"))
    }

    async fn start_container(
        &self,
        _request: Request<api::StartContainerRequest>,
    ) -> Result<Response<api::StartContainerResponse>, Status> {
        Err(unimplemented("RuntimeService", "StartContainer"))
    }

    async fn stop_container(
        &self,
        _request: Request<api::StopContainerRequest>,
    ) -> Result<Response<api::StopContainerResponse>, Status> {
        Err(unimplemented("RuntimeService", "StopContainer"))
    }

    async fn remove_container(
        &self,
        _request: Request<api::RemoveContainerRequest>,
    ) -> Result<Response<api::RemoveContainerResponse>, Status> {
        Err(unimplemented("RuntimeService", "RemoveContainer"))
    }

    async fn list_containers(
        &self,
        _request: Request<api::ListContainersRequest>,
    ) -> Result<Response<api::ListContainersResponse>, Status> {
        Err(unimplemented("RuntimeService", "ListContainers"))
    }

    async fn container_status(
        &self,
        _request: Request<api::ContainerStatusRequest>,
    ) -> Result<Response<api::ContainerStatusResponse>, Status> {
        Err(unimplemented("RuntimeService", "ContainerStatus"))
    }

    async fn update_container_resources(
        &self,
        _request: Request<api::UpdateContainerResourcesRequest>,
    ) -> Result<Response<api::UpdateContainerResourcesResponse>, Status> {
        Err(unimplemented("RuntimeService", "UpdateContainerResources"))
    }

    async fn reopen_container_log(
        &self,
        _request: Request<api::ReopenContainerLogRequest>,
    ) -> Result<Response<api::ReopenContainerLogResponse>, Status> {
        Err(unimplemented("RuntimeService", "ReopenContainerLog"))
    }

    async fn exec_sync(
        &self,
        _request: Request<api::ExecSyncRequest>,
    ) -> Result<Response<api::ExecSyncResponse>, Status> {
        Err(unimplemented("RuntimeService", "ExecSync"))
    }

    async fn exec(&self, _request: Request<api::ExecRequest>) -> Result<Response<api::ExecResponse>, Status> {
        Err(unimplemented("RuntimeService", "Exec"))
    }

    async fn attach(
        &self,
        _request: Request<api::AttachRequest>,
    ) -> Result<Response<api::AttachResponse>, Status> {
        Err(unimplemented("RuntimeService", "Attach"))
    }

    async fn port_forward(
        &self,
        _request: Request<api::PortForwardRequest>,
    ) -> Result<Response<api::PortForwardResponse>, Status> {
        Err(unimplemented("RuntimeService", "PortForward"))
    }

    async fn container_stats(
        &self,
        _request: Request<api::ContainerStatsRequest>,
    ) -> Result<Response<api::ContainerStatsResponse>, Status> {
        Err(unimplemented("RuntimeService", "ContainerStats"))
    }

    async fn list_container_stats(
        &self,
        _request: Request<api::ListContainerStatsRequest>,
    ) -> Result<Response<api::ListContainerStatsResponse>, Status> {
        Err(unimplemented("RuntimeService", "ListContainerStats"))
    }

    async fn pod_sandbox_stats(
        &self,
        _request: Request<api::PodSandboxStatsRequest>,
    ) -> Result<Response<api::PodSandboxStatsResponse>, Status> {
        Err(unimplemented("RuntimeService", "PodSandboxStats"))
    }

    async fn list_pod_sandbox_stats(
        &self,
        _request: Request<api::ListPodSandboxStatsRequest>,
    ) -> Result<Response<api::ListPodSandboxStatsResponse>, Status> {
        Err(unimplemented("RuntimeService", "ListPodSandboxStats"))
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
        Ok(Response::new(self.inner.images.list_images(request.get_ref())))
    }

    async fn image_status(
        &self,
        request: Request<api::ImageStatusRequest>,
    ) -> Result<Response<api::ImageStatusResponse>, Status> {
        self.inner.images.image_status(request.get_ref()).map(Response::new)
    }

    async fn pull_image(
        &self,
        request: Request<api::PullImageRequest>,
    ) -> Result<Response<api::PullImageResponse>, Status> {
        self.inner.images.pull_image(request.get_ref()).await.map(Response::new)
    }

    async fn remove_image(
        &self,
        request: Request<api::RemoveImageRequest>,
    ) -> Result<Response<api::RemoveImageResponse>, Status> {
        self.inner.images.remove_image(request.get_ref()).await.map(Response::new)
    }

    async fn image_fs_info(
        &self,
        _request: Request<api::ImageFsInfoRequest>,
    ) -> Result<Response<api::ImageFsInfoResponse>, Status> {
        self.inner.images.image_fs_info().await.map(Response::new)
    }
}
