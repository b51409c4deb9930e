//! The "bad input" group: invalid image references are InvalidArgument, missing images and unknown ids
//! NotFound, and nothing is left behind by a refused request. A mount of a missing host path is answered
//! as containerd answers it (the reference): the directory is created. critest has no case for any of
//! these (its error cases are of security options, readonly mounts and a pull's deadline).

use super::image::pull;
use super::support::{
    container_config, create_container, create_container_raw, exec_until_ok, expect_code, list_containers,
    new_pod, start_container,
};
use super::{CaseResult, CriClient, Env, api, case, ensure};

const GROUP: &str = "bad input";
const INVALID: &str = "Invalid_Reference:!!";

/// Runs every case of the group (one pod).
pub async fn run(client: &mut CriClient, env: &Env) -> Vec<CaseResult> {
    let (pod_id, pod) = match new_pod(client, env, "bad-input").await {
        Ok(pod) => pod,
        Err(e) => return vec![case(GROUP, "setup: a pod for the group", Err(e))],
    };
    vec![
        case(
            GROUP,
            "pulling an invalid image reference: InvalidArgument",
            expect_code(
                "PullImage of an invalid reference",
                pull(client, INVALID).await,
                tonic::Code::InvalidArgument,
            ),
        ),
        case(
            GROUP,
            "pulling a missing image: NotFound",
            expect_code(
                "PullImage of a missing image",
                pull(client, &env.missing_image).await,
                tonic::Code::NotFound,
            ),
        ),
        case(
            GROUP,
            "creating a container of a missing image: NotFound",
            missing_image(client, env, &pod_id, &pod).await,
        ),
        case(
            GROUP,
            "creating a container of an invalid image reference: InvalidArgument",
            invalid_image(client, env, &pod_id, &pod).await,
        ),
        case(GROUP, "creating a container in an unknown pod: NotFound", unknown_pod(client, env, &pod).await),
        case(
            GROUP,
            "starting an unknown container: NotFound",
            expect_code(
                "StartContainer of an unknown id",
                start_container(client, &"d".repeat(64)).await,
                tonic::Code::NotFound,
            ),
        ),
        case(
            GROUP,
            "mounting a missing host path: created as a directory",
            missing_host_path(client, env, &pod_id, &pod).await,
        ),
    ]
}

async fn nothing_in(client: &mut CriClient, pod_id: &str) -> Result<(), String> {
    let filter = api::ContainerFilter { pod_sandbox_id: pod_id.to_owned(), ..Default::default() };
    let left = list_containers(client, Some(filter)).await?;
    ensure(left.is_empty(), || format!("a refused CreateContainer left {left:?}"))
}

async fn missing_image(
    client: &mut CriClient,
    env: &Env,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
) -> Result<(), String> {
    let mut config = container_config(env, "missing-image", &["true"]);
    config.image = Some(api::ImageSpec { image: env.missing_image.clone(), ..Default::default() });
    expect_code(
        "CreateContainer of a missing image",
        create_container_raw(client, pod_id, pod, &config).await,
        tonic::Code::NotFound,
    )?;
    nothing_in(client, pod_id).await
}

async fn invalid_image(
    client: &mut CriClient,
    env: &Env,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
) -> Result<(), String> {
    let mut config = container_config(env, "invalid-image", &["true"]);
    config.image = Some(api::ImageSpec { image: INVALID.to_owned(), ..Default::default() });
    expect_code(
        "CreateContainer of an invalid reference",
        create_container_raw(client, pod_id, pod, &config).await,
        tonic::Code::InvalidArgument,
    )?;
    nothing_in(client, pod_id).await
}

async fn unknown_pod(client: &mut CriClient, env: &Env, pod: &api::PodSandboxConfig) -> Result<(), String> {
    let config = container_config(env, "unknown-pod", &["true"]);
    let unknown = "c".repeat(64);
    expect_code(
        "CreateContainer in an unknown pod",
        create_container_raw(client, &unknown, pod, &config).await,
        tonic::Code::NotFound,
    )?;
    nothing_in(client, &unknown).await
}

/// containerd (like dockershim before it) creates a missing host path as a directory and mounts it.
async fn missing_host_path(
    client: &mut CriClient,
    env: &Env,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
) -> Result<(), String> {
    let host_path = env.scratch.join(super::support::unique("missing-host-path"));
    let mut config = container_config(env, "missing-host-path", &["sleep", "1000"]);
    config.mounts.push(api::Mount {
        container_path: "/mnt/host".to_owned(),
        host_path: host_path.to_string_lossy().into_owned(),
        ..Default::default()
    });
    let id = create_container(client, pod_id, pod, &config).await?;
    start_container(client, &id).await.map_err(|s| super::support::rpc("StartContainer", &s))?;
    ensure(host_path.is_dir(), || format!("{} was not created", host_path.display()))?;
    std::fs::write(host_path.join("flag"), "from the host").map_err(|e| format!("writing the flag: {e}"))?;
    let seen = exec_until_ok(client, &id, &["cat", "/mnt/host/flag"]).await?;
    ensure(seen == "from the host", || format!("the container reads {seen:?} from the mount"))
}
