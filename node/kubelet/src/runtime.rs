//! The container runtime as the Node's Ready condition sees it (upstream's runtimeState and
//! updateRuntimeUp): a CRI `Status` every few seconds; Ready is False until one has answered, while
//! the last answer is older than the threshold, or while it says RuntimeReady or NetworkReady is
//! not true — each with upstream's words. [`RuntimeState::errors`] is pure; [`Runtime`] is the IO
//! edge, a CRI client on the runtime's unix socket.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::{Channel, Endpoint, Uri};

use k8s_openapi::api::core::v1::ContainerImage;

use crate::pod_runtime::{POD_UID_LABEL, PodRuntime};

/// One CRI runtime condition as the kubelet keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub kind: String,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl Condition {
    /// upstream's RuntimeCondition.String().
    fn describe(&self) -> String {
        format!("{}={} reason:{} message:{}", self.kind, self.status, self.reason, self.message)
    }
}

/// What the kubelet knows of its runtime: when a Status last answered, and what it said.
#[derive(Debug, Clone, Default)]
pub struct RuntimeState {
    pub last_sync: Option<Instant>,
    pub conditions: Vec<Condition>,
    /// `<runtime name>://<runtime version>` from CRI Version (the Node's containerRuntimeVersion).
    pub version: String,
    /// The images the runtime holds, as the Node reports them.
    pub images: Vec<ContainerImage>,
}

/// How long after its last good answer the runtime counts as down (upstream's
/// maxWaitForContainerRuntime); it is asked every [`RUNTIME_CHECK_INTERVAL`].
pub const RUNTIME_SYNC_THRESHOLD: Duration = Duration::from_secs(30);
/// How often the runtime is asked (upstream's updateRuntimeUp period).
pub const RUNTIME_CHECK_INTERVAL: Duration = Duration::from_secs(5);

impl RuntimeState {
    /// The errors that make the node NotReady, in upstream's order and words (runtime errors,
    /// then network errors).
    pub fn errors(&self, now: Instant) -> Vec<String> {
        let mut errors = Vec::new();
        match self.last_sync {
            None => errors.push("container runtime status check may not have completed yet".to_owned()),
            Some(at) if now.saturating_duration_since(at) >= RUNTIME_SYNC_THRESHOLD => {
                errors.push("container runtime is down".to_owned());
            }
            Some(_) => {}
        }
        if self.last_sync.is_some() {
            let find = |kind: &str| self.conditions.iter().find(|c| c.kind == kind);
            match find("RuntimeReady") {
                Some(ready) if ready.status => {}
                Some(ready) => errors.push(format!("container runtime not ready: {}", ready.describe())),
                None => errors.push("container runtime not ready: <nil>".to_owned()),
            }
            match find("NetworkReady") {
                Some(ready) if ready.status => {}
                Some(ready) => {
                    errors.push(format!("container runtime network not ready: {}", ready.describe()));
                }
                None => errors.push("container runtime network not ready: <nil>".to_owned()),
            }
        }
        errors
    }
}

/// A channel to the CRI socket at `path`; it dials again after the runtime restarts.
async fn channel(path: &std::path::Path) -> Result<Channel, tonic::transport::Error> {
    let path = path.to_owned();
    // The URI is required by the builder but unused: every connection dials the socket.
    Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
        }))
        .await
}

/// The CRI services the pods are run through.
#[derive(Debug, Clone)]
pub struct Cri {
    pub runtime: RuntimeServiceClient<Channel>,
    pub image: ImageServiceClient<Channel>,
}

impl Cri {
    /// What the runtime holds of the pod `uid`: its sandboxes and containers with their statuses
    /// (one that goes between the list and its status is left out).
    pub async fn pod(&mut self, uid: &str) -> Result<PodRuntime, tonic::Status> {
        let labels = std::collections::HashMap::from([(POD_UID_LABEL.to_owned(), uid.to_owned())]);
        let sandboxes = self
            .runtime
            .list_pod_sandbox(cri::ListPodSandboxRequest {
                filter: Some(cri::PodSandboxFilter { label_selector: labels.clone(), ..Default::default() }),
            })
            .await?
            .into_inner()
            .items;
        let mut sandbox_statuses = Vec::new();
        for sandbox in sandboxes {
            let request = cri::PodSandboxStatusRequest { pod_sandbox_id: sandbox.id, verbose: false };
            match self.runtime.pod_sandbox_status(request).await {
                Ok(status) => sandbox_statuses.extend(status.into_inner().status),
                Err(status) if status.code() == tonic::Code::NotFound => {}
                Err(status) => return Err(status),
            }
        }
        let containers = self
            .runtime
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter { label_selector: labels, ..Default::default() }),
            })
            .await?
            .into_inner()
            .containers;
        let mut container_statuses = Vec::new();
        for container in containers {
            let request = cri::ContainerStatusRequest { container_id: container.id, verbose: false };
            match self.runtime.container_status(request).await {
                Ok(status) => container_statuses.extend(status.into_inner().status),
                Err(status) if status.code() == tonic::Code::NotFound => {}
                Err(status) => return Err(status),
            }
        }
        Ok(PodRuntime::new(sandbox_statuses, container_statuses))
    }

    /// Every pod the runtime holds, as `uid → (sandbox id and state, container id and state)`
    /// fingerprints: what the relist compares.
    pub async fn relist(
        &mut self,
    ) -> Result<std::collections::BTreeMap<String, Vec<(String, i32)>>, tonic::Status> {
        let mut pods: std::collections::BTreeMap<String, Vec<(String, i32)>> =
            std::collections::BTreeMap::new();
        let sandboxes = self.runtime.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }).await?;
        for sandbox in sandboxes.into_inner().items {
            if let Some(uid) = sandbox.labels.get(POD_UID_LABEL) {
                pods.entry(uid.clone()).or_default().push((sandbox.id, sandbox.state));
            }
        }
        let containers = self.runtime.list_containers(cri::ListContainersRequest { filter: None }).await?;
        for container in containers.into_inner().containers {
            if let Some(uid) = container.labels.get(POD_UID_LABEL) {
                pods.entry(uid.clone()).or_default().push((container.id, container.state));
            }
        }
        for entries in pods.values_mut() {
            entries.sort();
        }
        Ok(pods)
    }
}

/// A CRI runtime endpoint (`unix:///run/keel/shim.sock`, or a plain path).
#[derive(Debug, Clone)]
pub struct Runtime {
    socket: PathBuf,
    client: Option<Cri>,
}

impl Runtime {
    /// The runtime at `endpoint`; nothing is dialled until the first [`Runtime::check`].
    pub fn new(endpoint: &str) -> Runtime {
        let socket = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
        Runtime { socket: PathBuf::from(socket), client: None }
    }

    async fn client(&mut self) -> Result<&mut Cri, tonic::transport::Error> {
        if self.client.is_none() {
            self.client = Some(self.cri().await?);
        }
        Ok(self.client.as_mut().expect("set above"))
    }

    /// Hands the node's pod CIDRs (`,`-joined) to the runtime (upstream's updatePodCIDR through
    /// UpdateRuntimeConfig).
    pub async fn update_pod_cidr(&mut self, cidr: &str) -> Result<(), String> {
        let client = self.client().await.map_err(|e| e.to_string())?;
        let request = cri::UpdateRuntimeConfigRequest {
            runtime_config: Some(cri::RuntimeConfig {
                network_config: Some(cri::NetworkConfig { pod_cidr: cidr.to_owned() }),
            }),
        };
        client.runtime.update_runtime_config(request).await.map_err(|s| s.message().to_owned())?;
        Ok(())
    }

    /// The CRI services and the runtime's name, once the runtime answers (retried every second,
    /// as upstream's kubelet waits for its runtime).
    pub async fn wait_for_cri(&self) -> (Cri, String) {
        loop {
            match self.cri().await {
                Ok(mut cri) => {
                    match cri.runtime.version(cri::VersionRequest { version: "v1".into() }).await {
                        Ok(version) => return (cri, version.into_inner().runtime_name),
                        Err(status) => {
                            tracing::info!(error = %status.message(), "waiting for the container runtime");
                        }
                    }
                }
                Err(error) => tracing::info!(%error, "waiting for the container runtime"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// The runtime and image services, for the pods.
    pub async fn cri(&self) -> Result<Cri, tonic::transport::Error> {
        let channel = channel(&self.socket).await?;
        Ok(Cri {
            runtime: RuntimeServiceClient::new(channel.clone()),
            image: ImageServiceClient::new(channel),
        })
    }

    /// One CRI Version and Status: updates `state` when both answer (else it keeps its last
    /// answer, which goes stale), and returns why not.
    pub async fn check(&mut self, state: &mut RuntimeState) -> Result<(), String> {
        let socket = self.socket.display().to_string();
        let answered = match self.client().await {
            Ok(client) => {
                let version = client.runtime.version(cri::VersionRequest { version: "v1".into() }).await;
                let status = client.runtime.status(cri::StatusRequest { verbose: false }).await;
                let images = client.image.list_images(cri::ListImagesRequest { filter: None }).await;
                match (version, status, images) {
                    (Ok(version), Ok(status), Ok(images)) => {
                        Ok((version.into_inner(), status.into_inner(), images.into_inner().images))
                    }
                    (Err(error), _, _) | (_, Err(error), _) | (_, _, Err(error)) => {
                        Err(format!("CRI on {socket}: {}", error.message()))
                    }
                }
            }
            Err(error) => Err(format!("connecting to {socket}: {error}")),
        };
        let (version, status, images) = match answered {
            Ok(answer) => answer,
            Err(error) => {
                // Dialled again next time: the runtime may have been restarted.
                self.client = None;
                return Err(error);
            }
        };
        state.version = format!("{}://{}", version.runtime_name, version.runtime_version);
        state.conditions = status
            .status
            .map(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .map(|c| Condition { kind: c.r#type, status: c.status, reason: c.reason, message: c.message })
            .collect();
        state.images = node_images(images);
        state.last_sync = Some(Instant::now());
        Ok(())
    }
}

/// The images a Node reports (upstream's Images setter): largest first, each with its digests then
/// its tags, at most five names (the status keeps the first nodeStatusMaxImages of them).
pub fn node_images(mut images: Vec<cri::Image>) -> Vec<ContainerImage> {
    images.sort_by(|a, b| b.size.cmp(&a.size).then_with(|| a.id.cmp(&b.id)));
    images
        .into_iter()
        .map(|image| {
            let mut names = image.repo_digests;
            names.extend(image.repo_tags);
            names.truncate(5);
            ContainerImage { names: Some(names), size_bytes: i64::try_from(image.size).ok() }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(kind: &str, status: bool) -> Condition {
        Condition {
            kind: kind.into(),
            status,
            reason: if status { String::new() } else { "NetworkPluginNotReady".into() },
            message: if status { String::new() } else { "cni plugin not initialized".into() },
        }
    }

    #[test]
    fn ready_errors_in_upstreams_words() {
        let now = Instant::now();
        let mut state = RuntimeState::default();
        assert_eq!(state.errors(now), ["container runtime status check may not have completed yet"]);
        state.last_sync = Some(now);
        state.conditions = vec![condition("RuntimeReady", true), condition("NetworkReady", false)];
        assert_eq!(
            state.errors(now),
            [
                "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized"
            ]
        );
        state.conditions[1].status = true;
        assert!(state.errors(now).is_empty());
        let later = now + RUNTIME_SYNC_THRESHOLD;
        assert_eq!(state.errors(later), ["container runtime is down"]);
    }

    #[test]
    fn images_largest_first_digests_then_tags() {
        let image = |id: &str, size: u64, tags: &[&str]| cri::Image {
            id: id.into(),
            size,
            repo_tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            repo_digests: vec![format!("r@sha256:{id}")],
            ..cri::Image::default()
        };
        let tags = ["r:1", "r:2", "r:3", "r:4", "r:5"];
        let listed = node_images(vec![image("a", 10, &["a:1"]), image("b", 30, &tags)]);
        assert_eq!(listed[0].size_bytes, Some(30));
        let names = listed[0].names.clone().unwrap();
        assert_eq!(names, ["r@sha256:b", "r:1", "r:2", "r:3", "r:4"]);
        assert_eq!(listed[1].names.as_deref(), Some(&["r@sha256:a".to_owned(), "a:1".to_owned()][..]));
    }
}
