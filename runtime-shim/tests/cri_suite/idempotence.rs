//! The "idempotence" group: what the kubelet retries must succeed again (a container stopped twice, a
//! pod removed twice), the status of what does not exist is NotFound, and RemovePodSandbox of a ready
//! pod takes its containers with it. critest's "Idempotence" covers the rest: StopPodSandbox of an
//! unknown id and of a stopped pod, RemovePodSandbox and StopContainer and RemoveContainer of an unknown
//! id, and a stopped container removed twice (its "StopContainer should not return an error if already
//! stopped" stops only once).

use super::support::{
    container_status, expect_code, new_pod, pod_status, remove_pod, rpc, run_container, stop_container,
    stop_pod,
};
use super::{CaseResult, CriClient, Env, case, ensure};

const GROUP: &str = "idempotence";

/// An id nothing has: 64 hex digits, as runtimes make them.
const UNKNOWN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Runs every case of the group.
pub async fn run(client: &mut CriClient, env: &Env) -> Vec<CaseResult> {
    vec![
        case(GROUP, "stopping a container twice", stop_container_twice(client, env).await),
        case(GROUP, "removing a pod twice", remove_pod_twice(client, env).await),
        case(GROUP, "status of an unknown container: NotFound", status_unknown_container(client).await),
        case(GROUP, "status of an unknown pod: NotFound", status_unknown_pod(client).await),
        case(GROUP, "removing a ready pod removes its containers", remove_ready_pod(client, env).await),
    ]
}

async fn stop_container_twice(client: &mut CriClient, env: &Env) -> Result<(), String> {
    let (pod_id, pod) = new_pod(client, env, "stop-twice").await?;
    let id = run_container(client, env, &pod_id, &pod, "stop-twice", &["sleep", "1000"]).await?;
    stop_container(client, &id, 0).await.map_err(|s| rpc("StopContainer", &s))?;
    stop_container(client, &id, 0).await.map_err(|s| rpc("second StopContainer", &s))
}

async fn remove_pod_twice(client: &mut CriClient, env: &Env) -> Result<(), String> {
    let (id, _) = new_pod(client, env, "pod-twice").await?;
    stop_pod(client, &id).await.map_err(|s| rpc("StopPodSandbox", &s))?;
    remove_pod(client, &id).await.map_err(|s| rpc("RemovePodSandbox", &s))?;
    remove_pod(client, &id).await.map_err(|s| rpc("second RemovePodSandbox", &s))
}

async fn status_unknown_container(client: &mut CriClient) -> Result<(), String> {
    expect_code(
        "ContainerStatus of an unknown id",
        container_status(client, UNKNOWN).await,
        tonic::Code::NotFound,
    )
}

async fn status_unknown_pod(client: &mut CriClient) -> Result<(), String> {
    expect_code("PodSandboxStatus of an unknown id", pod_status(client, UNKNOWN).await, tonic::Code::NotFound)
}

/// RemovePodSandbox of a pod that was not stopped: the CRI says its containers are forcibly stopped and
/// removed with it.
async fn remove_ready_pod(client: &mut CriClient, env: &Env) -> Result<(), String> {
    let (pod_id, pod) = new_pod(client, env, "remove-ready").await?;
    let id = run_container(client, env, &pod_id, &pod, "remove-ready", &["sleep", "1000"]).await?;
    remove_pod(client, &pod_id).await.map_err(|s| rpc("RemovePodSandbox of a ready pod", &s))?;
    expect_code(
        "PodSandboxStatus after RemovePodSandbox",
        pod_status(client, &pod_id).await,
        tonic::Code::NotFound,
    )?;
    let status = container_status(client, &id).await;
    ensure(matches!(&status, Err(s) if s.code() == tonic::Code::NotFound), || {
        format!("the pod's container after RemovePodSandbox: {status:?}")
    })
}
