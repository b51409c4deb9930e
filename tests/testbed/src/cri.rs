//! A CRI v1 client over a runtime's unix socket (containerd's, or keel-shim's): the generated tonic
//! clients of k8s-cri on a channel whose connector dials the socket, and the pod sandbox config a
//! kubelet would send for a plain pod.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use hyper_util::rt::TokioIo;
pub use k8s_cri::v1 as api;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::{Channel, Endpoint, Uri};

/// The runtime and image services of one CRI endpoint.
#[derive(Debug, Clone)]
pub struct CriClient {
    pub runtime: RuntimeServiceClient<Channel>,
    pub image: ImageServiceClient<Channel>,
}

impl CriClient {
    /// Connects to the CRI endpoint at the unix socket `socket` and checks it answers `Version`.
    pub async fn connect(socket: &Path) -> Result<CriClient> {
        let path: PathBuf = socket.to_owned();
        // The URI is required by the builder but unused: every connection dials the socket.
        let channel =
            Endpoint::from_static("http://[::]:50051")
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
                    }
                }))
                .await
                .with_context(|| format!("connecting to the CRI socket {}", socket.display()))?;
        let mut client = CriClient {
            runtime: RuntimeServiceClient::new(channel.clone()),
            image: ImageServiceClient::new(channel),
        };
        client
            .runtime
            .version(api::VersionRequest { version: "v1".into() })
            .await
            .with_context(|| format!("CRI Version on {}", socket.display()))?;
        Ok(client)
    }

    /// RunPodSandbox; returns the sandbox id.
    pub async fn run_pod_sandbox(&mut self, config: &api::PodSandboxConfig) -> Result<String> {
        let request =
            api::RunPodSandboxRequest { config: Some(config.clone()), runtime_handler: String::new() };
        let name = config.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default();
        let response = self
            .runtime
            .run_pod_sandbox(request)
            .await
            .with_context(|| format!("CRI RunPodSandbox of pod {name}"))?;
        Ok(response.into_inner().pod_sandbox_id)
    }

    /// PodSandboxStatus (not verbose).
    pub async fn pod_sandbox_status(&mut self, id: &str) -> Result<api::PodSandboxStatus> {
        let request = api::PodSandboxStatusRequest { pod_sandbox_id: id.to_owned(), verbose: false };
        let response = self
            .runtime
            .pod_sandbox_status(request)
            .await
            .with_context(|| format!("CRI PodSandboxStatus of {id}"))?;
        response.into_inner().status.with_context(|| format!("PodSandboxStatus of {id} has no status"))
    }

    /// StopPodSandbox.
    pub async fn stop_pod_sandbox(&mut self, id: &str) -> Result<()> {
        let request = api::StopPodSandboxRequest { pod_sandbox_id: id.to_owned() };
        self.runtime
            .stop_pod_sandbox(request)
            .await
            .with_context(|| format!("CRI StopPodSandbox of {id}"))?;
        Ok(())
    }

    /// RemovePodSandbox.
    pub async fn remove_pod_sandbox(&mut self, id: &str) -> Result<()> {
        let request = api::RemovePodSandboxRequest { pod_sandbox_id: id.to_owned() };
        self.runtime
            .remove_pod_sandbox(request)
            .await
            .with_context(|| format!("CRI RemovePodSandbox of {id}"))?;
        Ok(())
    }

    /// The ids of every pod sandbox the runtime knows.
    pub async fn list_pod_sandbox_ids(&mut self) -> Result<Vec<String>> {
        let request = api::ListPodSandboxRequest { filter: None };
        let response = self.runtime.list_pod_sandbox(request).await.context("CRI ListPodSandbox")?;
        Ok(response.into_inner().items.into_iter().map(|sandbox| sandbox.id).collect())
    }
}

/// The sandbox config kubelet sends for a plain pod `namespace/name` (pod network, no host
/// namespaces, no port mappings), logging under `log_dir`.
pub fn pod_sandbox_config(namespace: &str, name: &str, uid: &str, log_dir: &Path) -> api::PodSandboxConfig {
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: name.to_owned(),
            uid: uid.to_owned(),
            namespace: namespace.to_owned(),
            attempt: 0,
        }),
        hostname: name.to_owned(),
        log_directory: log_dir.to_string_lossy().into_owned(),
        labels: HashMap::from([
            ("io.kubernetes.pod.name".to_owned(), name.to_owned()),
            ("io.kubernetes.pod.namespace".to_owned(), namespace.to_owned()),
            ("io.kubernetes.pod.uid".to_owned(), uid.to_owned()),
        ]),
        linux: Some(api::LinuxPodSandboxConfig {
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(api::NamespaceOption {
                    network: api::NamespaceMode::Pod.into(),
                    pid: api::NamespaceMode::Pod.into(),
                    ipc: api::NamespaceMode::Pod.into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}
