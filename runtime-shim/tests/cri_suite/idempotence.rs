//! The "idempotence" group: what the kubelet retries must succeed again (stop or remove twice, stop or
//! remove what is already gone), and the status of what does not exist is NotFound.

use super::support::{
    container_config, container_status, create_container, expect_code, new_pod, pod_status, remove_container,
    remove_pod, rpc, run_container, stop_container, stop_pod,
};
use super::{CaseResult, CriClient, Env, case, ensure};

const GROUP: &str = "idempotence";

/// An id nothing has: 64 hex digits, as runtimes make them.
const UNKNOWN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// Runs every case of the group.
pub async fn run(client: &mut CriClient, env: &Env) -> Vec<CaseResult> {
    vec![
        case(GROUP, "stopping a container twice", stop_container_twice(client, env).await),
        case(GROUP, "removing a container twice", remove_container_twice(client, env).await),
        case(GROUP, "removing an unknown container", remove_unknown_container(client).await),
        case(GROUP, "stopping an unknown container", stop_unknown_container(client).await),
        case(GROUP, "stopping and removing a pod twice", pod_twice(client, env).await),
        case(GROUP, "removing an unknown pod", remove_unknown_pod(client).await),
        case(GROUP, "stopping an unknown pod", stop_unknown_pod(client).await),
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

async fn remove_container_twice(client: &mut CriClient, env: &Env) -> Result<(), String> {
    let (pod_id, pod) = new_pod(client, env, "remove-twice").await?;
    let id =
        create_container(client, &pod_id, &pod, &container_config(env, "remove-twice", &["true"])).await?;
    remove_container(client, &id).await.map_err(|s| rpc("RemoveContainer", &s))?;
    remove_container(client, &id).await.map_err(|s| rpc("second RemoveContainer", &s))
}

async fn remove_unknown_container(client: &mut CriClient) -> Result<(), String> {
    remove_container(client, UNKNOWN).await.map_err(|s| rpc("RemoveContainer of an unknown id", &s))
}

async fn stop_unknown_container(client: &mut CriClient) -> Result<(), String> {
    stop_container(client, UNKNOWN, 0).await.map_err(|s| rpc("StopContainer of an unknown id", &s))
}

async fn stop_unknown_pod(client: &mut CriClient) -> Result<(), String> {
    stop_pod(client, UNKNOWN).await.map_err(|s| rpc("StopPodSandbox of an unknown id", &s))
}

async fn pod_twice(client: &mut CriClient, env: &Env) -> Result<(), String> {
    let (id, _) = new_pod(client, env, "pod-twice").await?;
    stop_pod(client, &id).await.map_err(|s| rpc("StopPodSandbox", &s))?;
    stop_pod(client, &id).await.map_err(|s| rpc("second StopPodSandbox", &s))?;
    remove_pod(client, &id).await.map_err(|s| rpc("RemovePodSandbox", &s))?;
    remove_pod(client, &id).await.map_err(|s| rpc("second RemovePodSandbox", &s))
}

async fn remove_unknown_pod(client: &mut CriClient) -> Result<(), String> {
    remove_pod(client, UNKNOWN).await.map_err(|s| rpc("RemovePodSandbox of an unknown id", &s))
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
