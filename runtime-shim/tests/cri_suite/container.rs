//! The "container" group (beside critest's "Container"): CreateContainer, StartContainer, StopContainer
//! (grace, then SIGKILL), RemoveContainer, ContainerStatus (state, times, exit code, reason, log path)
//! and ListContainers with its filters. critest checks only the state after each step and that
//! ListContainers by id finds a created container and not a removed one (created, running or stopped);
//! the cases here add the status's fields and times, exit codes and reasons, NotFound for the status of
//! a removed container, and filters by state, pod and labels.

use std::collections::HashMap;
use std::path::Path;

use super::support::{
    container_config, container_status, create_container, exec_until_ok, expect_code, list_containers,
    new_pod, remove_container, rpc, start_container, stop_container, wait_state,
};
use super::{CaseResult, CriClient, Env, api, case, ensure};

const GROUP: &str = "container";

/// Runs every case of the group (one pod for all of them).
pub async fn run(client: &mut CriClient, env: &Env) -> Vec<CaseResult> {
    let pod = match new_pod(client, env, "container").await {
        Ok(pod) => pod,
        Err(e) => return vec![case(GROUP, "setup: a pod for the group", Err(e))],
    };
    let (id, config) = (&pod.0, &pod.1);
    vec![
        case(GROUP, "runtime should support creating container", creating(client, env, id, config).await),
        case(GROUP, "runtime should support starting container", starting(client, env, id, config).await),
        case(GROUP, "runtime should support stopping container", stopping(client, env, id, config).await),
        case(
            GROUP,
            "stopping container: SIGKILL after the grace period",
            stopping_with_kill(client, env, id, config).await,
        ),
        case(GROUP, "runtime should support removing container", removing(client, env, id, config).await),
        case(GROUP, "container exit code, reason and times", exit_codes(client, env, id, config).await),
        case(GROUP, "runtime should support listing containers with filters", filters(client, env).await),
    ]
}

/// A created container is CREATED with a creation time, no start or finish time, the config's metadata,
/// image, labels and annotations, and the log path the pod's log directory joined with the config's.
async fn creating(
    client: &mut CriClient,
    env: &Env,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
) -> Result<(), String> {
    let mut config = container_config(env, "create", &["sleep", "1000"]);
    config.annotations.insert("keel.suite/annotation".to_owned(), "value".to_owned());
    let id = create_container(client, pod_id, pod, &config).await?;
    let status = container_status(client, &id).await.map_err(|s| rpc("ContainerStatus", &s))?;
    ensure(status.id == id, || format!("status of {id} has id {}", status.id))?;
    ensure(status.state() == api::ContainerState::ContainerCreated, || {
        format!("state {:?}", status.state())
    })?;
    ensure(status.created_at > 0, || format!("created_at {}", status.created_at))?;
    ensure(status.started_at == 0 && status.finished_at == 0, || {
        format!("started_at {} finished_at {} before StartContainer", status.started_at, status.finished_at)
    })?;
    ensure(status.metadata == config.metadata, || format!("metadata {:?}", status.metadata))?;
    ensure(status.labels == config.labels, || format!("labels {:?}", status.labels))?;
    ensure(status.annotations == config.annotations, || format!("annotations {:?}", status.annotations))?;
    let image = status.image.as_ref().map(|i| i.image.as_str()).unwrap_or_default();
    ensure(!image.is_empty() && !status.image_ref.is_empty(), || {
        format!("image {:?} image_ref {:?}", status.image, status.image_ref)
    })?;
    let log_path = Path::new(&pod.log_directory).join(&config.log_path);
    ensure(Path::new(&status.log_path) == log_path, || {
        format!("log_path {:?}, expected {}", status.log_path, log_path.display())
    })?;
    let listed =
        list_containers(client, Some(api::ContainerFilter { id: id.clone(), ..Default::default() })).await?;
    ensure(listed.len() == 1 && listed[0].id == id && listed[0].pod_sandbox_id == pod_id, || {
        format!("ListContainers by id: {listed:?}")
    })
}

/// A started container is RUNNING with a start time not before its creation time.
async fn starting(
    client: &mut CriClient,
    env: &Env,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
) -> Result<(), String> {
    let config = container_config(env, "start", &["sleep", "1000"]);
    let id = create_container(client, pod_id, pod, &config).await?;
    start_container(client, &id).await.map_err(|s| rpc("StartContainer", &s))?;
    let status = wait_state(client, &id, api::ContainerState::ContainerRunning).await?;
    ensure(status.started_at >= status.created_at && status.started_at > 0, || {
        format!("created_at {} started_at {}", status.created_at, status.started_at)
    })?;
    ensure(status.finished_at == 0, || format!("finished_at {} while running", status.finished_at))
}

/// The rest of a script that set its SIGTERM trap: it says so, then waits.
const TRAP_SET: &str = "mkdir -p /tmp && : > /tmp/trap-set; sleep 1000 & wait";

/// Waits until the container's shell has set its trap: RUNNING only says its process started, and a
/// SIGTERM before the `trap` ran would kill the shell (exit 143) whatever the test meant.
async fn wait_trap_set(client: &mut CriClient, id: &str) -> Result<(), String> {
    exec_until_ok(client, id, &["sh", "-c", "test -e /tmp/trap-set"]).await.map(drop)
}

/// A container that exits on SIGTERM is EXITED after StopContainer, with a finish time.
async fn stopping(
    client: &mut CriClient,
    env: &Env,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
) -> Result<(), String> {
    let script = format!("trap 'exit 0' TERM; {TRAP_SET}");
    let config = container_config(env, "stop", &["sh", "-c", &script]);
    let id = create_container(client, pod_id, pod, &config).await?;
    start_container(client, &id).await.map_err(|s| rpc("StartContainer", &s))?;
    wait_state(client, &id, api::ContainerState::ContainerRunning).await?;
    wait_trap_set(client, &id).await?;
    stop_container(client, &id, 30).await.map_err(|s| rpc("StopContainer", &s))?;
    let status = container_status(client, &id).await.map_err(|s| rpc("ContainerStatus", &s))?;
    ensure(status.state() == api::ContainerState::ContainerExited, || {
        format!("state {:?} after StopContainer", status.state())
    })?;
    ensure(status.finished_at >= status.started_at && status.finished_at > 0, || {
        format!("started_at {} finished_at {}", status.started_at, status.finished_at)
    })?;
    ensure(status.exit_code == 0, || {
        format!("exit code {}, the container exits 0 on SIGTERM", status.exit_code)
    })
}

/// A container that ignores SIGTERM is killed when the grace period ends: EXITED with 137 (128 +
/// SIGKILL).
async fn stopping_with_kill(
    client: &mut CriClient,
    env: &Env,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
) -> Result<(), String> {
    let script = format!("trap '' TERM; {TRAP_SET}");
    let config = container_config(env, "kill", &["sh", "-c", &script]);
    let id = create_container(client, pod_id, pod, &config).await?;
    start_container(client, &id).await.map_err(|s| rpc("StartContainer", &s))?;
    wait_state(client, &id, api::ContainerState::ContainerRunning).await?;
    wait_trap_set(client, &id).await?;
    stop_container(client, &id, 1).await.map_err(|s| rpc("StopContainer", &s))?;
    let status = container_status(client, &id).await.map_err(|s| rpc("ContainerStatus", &s))?;
    ensure(status.state() == api::ContainerState::ContainerExited, || {
        format!("state {:?} after StopContainer", status.state())
    })?;
    ensure(status.exit_code == 137, || format!("exit code {}, expected 137", status.exit_code))
}

/// A removed container is neither listed nor has a status (NotFound).
async fn removing(
    client: &mut CriClient,
    env: &Env,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
) -> Result<(), String> {
    let config = container_config(env, "remove", &["sleep", "1000"]);
    let id = create_container(client, pod_id, pod, &config).await?;
    remove_container(client, &id).await.map_err(|s| rpc("RemoveContainer", &s))?;
    let listed =
        list_containers(client, Some(api::ContainerFilter { id: id.clone(), ..Default::default() })).await?;
    ensure(listed.is_empty(), || format!("removed container {id} is listed: {listed:?}"))?;
    expect_code(
        "ContainerStatus of a removed container",
        container_status(client, &id).await,
        tonic::Code::NotFound,
    )
}

/// Containers that exit by themselves a moment after starting: 3 → EXITED, exit code 3, reason "Error";
/// 0 → "Completed"; created ≤ started ≤ finished.
async fn exit_codes(
    client: &mut CriClient,
    env: &Env,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
) -> Result<(), String> {
    for (command, code, reason) in [("sleep 0.2; exit 3", 3, "Error"), ("sleep 0.2", 0, "Completed")] {
        let config = container_config(env, "exit", &["sh", "-c", command]);
        let id = create_container(client, pod_id, pod, &config).await?;
        start_container(client, &id).await.map_err(|s| rpc("StartContainer", &s))?;
        let status = wait_state(client, &id, api::ContainerState::ContainerExited).await?;
        ensure(status.exit_code == code, || {
            format!("`{command}`: exit code {}, expected {code}", status.exit_code)
        })?;
        ensure(status.reason == reason, || {
            format!("`{command}`: reason {:?}, expected {reason:?}", status.reason)
        })?;
        ensure(
            0 < status.created_at
                && status.created_at <= status.started_at
                && status.started_at <= status.finished_at,
            || {
                format!(
                    "`{command}`: created {} started {} finished {}",
                    status.created_at, status.started_at, status.finished_at
                )
            },
        )?;
    }
    Ok(())
}

fn ids(containers: &[api::Container]) -> Vec<&str> {
    let mut ids: Vec<&str> = containers.iter().map(|c| c.id.as_str()).collect();
    ids.sort_unstable();
    ids
}

/// Filters by id, state, pod sandbox id and label selector, alone and together (all must hold).
async fn filters(client: &mut CriClient, env: &Env) -> Result<(), String> {
    let (pod_id, pod) = new_pod(client, env, "container-filters").await?;
    let mut running = container_config(env, "filter-running", &["sleep", "1000"]);
    running.labels.insert("keel.suite/label".to_owned(), "x".to_owned());
    let mut created = container_config(env, "filter-created", &["sleep", "1000"]);
    created.labels.insert("keel.suite/label".to_owned(), "y".to_owned());
    let r = create_container(client, &pod_id, &pod, &running).await?;
    start_container(client, &r).await.map_err(|s| rpc("StartContainer", &s))?;
    let c = create_container(client, &pod_id, &pod, &created).await?;
    let (r, c) = (r.as_str(), c.as_str());
    let state = |s: api::ContainerState| Some(api::ContainerStateValue { state: s.into() });
    let in_pod = |f: api::ContainerFilter| api::ContainerFilter { pod_sandbox_id: pod_id.clone(), ..f };
    let label = |v: &str| HashMap::from([("keel.suite/label".to_owned(), v.to_owned())]);
    let cases: Vec<(&str, api::ContainerFilter, Vec<&str>)> = vec![
        ("pod", in_pod(Default::default()), vec![r, c]),
        ("id", api::ContainerFilter { id: c.to_owned(), ..Default::default() }, vec![c]),
        (
            "state RUNNING",
            in_pod(api::ContainerFilter {
                state: state(api::ContainerState::ContainerRunning),
                ..Default::default()
            }),
            vec![r],
        ),
        (
            "state CREATED",
            in_pod(api::ContainerFilter {
                state: state(api::ContainerState::ContainerCreated),
                ..Default::default()
            }),
            vec![c],
        ),
        (
            "label y",
            in_pod(api::ContainerFilter { label_selector: label("y"), ..Default::default() }),
            vec![c],
        ),
        (
            "label x and state CREATED",
            in_pod(api::ContainerFilter {
                label_selector: label("x"),
                state: state(api::ContainerState::ContainerCreated),
                ..Default::default()
            }),
            vec![],
        ),
        (
            "unknown pod",
            api::ContainerFilter { pod_sandbox_id: "f".repeat(64), ..Default::default() },
            vec![],
        ),
        ("unknown id", api::ContainerFilter { id: "e".repeat(64), ..Default::default() }, vec![]),
    ];
    for (what, filter, mut expected) in cases {
        let listed = list_containers(client, Some(filter)).await?;
        expected.sort_unstable();
        ensure(ids(&listed) == expected, || {
            format!("filter by {what}: listed {:?}, expected {expected:?}", ids(&listed))
        })?;
    }
    Ok(())
}
