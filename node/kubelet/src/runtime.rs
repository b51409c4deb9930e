//! The container runtime as the Node's Ready condition sees it (upstream's runtimeState and
//! updateRuntimeUp): a CRI `Status` every few seconds; Ready is False until one has answered, while
//! the last answer is older than the threshold, or while it says RuntimeReady or NetworkReady is
//! not true — each with upstream's words. [`RuntimeState::errors`] is pure; [`Runtime`] is the IO
//! edge, a CRI client on the runtime's unix socket.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::{Channel, Endpoint, Uri};

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

/// A CRI runtime endpoint (`unix:///run/keel/shim.sock`, or a plain path).
#[derive(Debug, Clone)]
pub struct Runtime {
    socket: PathBuf,
    client: Option<RuntimeServiceClient<Channel>>,
}

impl Runtime {
    /// The runtime at `endpoint`; nothing is dialled until the first [`Runtime::check`].
    pub fn new(endpoint: &str) -> Runtime {
        let socket = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
        Runtime { socket: PathBuf::from(socket), client: None }
    }

    async fn client(&mut self) -> Result<&mut RuntimeServiceClient<Channel>, tonic::transport::Error> {
        if self.client.is_none() {
            let path = self.socket.clone();
            // The URI is required by the builder but unused: every connection dials the socket.
            let channel = Endpoint::from_static("http://[::]:50051")
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
                    }
                }))
                .await?;
            self.client = Some(RuntimeServiceClient::new(channel));
        }
        Ok(self.client.as_mut().expect("set above"))
    }

    /// One CRI Version and Status: updates `state` when both answer (else it keeps its last
    /// answer, which goes stale), and returns why not.
    pub async fn check(&mut self, state: &mut RuntimeState) -> Result<(), String> {
        let socket = self.socket.display().to_string();
        let answered = match self.client().await {
            Ok(client) => {
                let version = client.version(cri::VersionRequest { version: "v1".into() }).await;
                let status = client.status(cri::StatusRequest { verbose: false }).await;
                match (version, status) {
                    (Ok(version), Ok(status)) => Ok((version.into_inner(), status.into_inner())),
                    (Err(error), _) | (_, Err(error)) => Err(format!("CRI on {socket}: {}", error.message())),
                }
            }
            Err(error) => Err(format!("connecting to {socket}: {error}")),
        };
        let (version, status) = match answered {
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
        state.last_sync = Some(Instant::now());
        Ok(())
    }
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
}
