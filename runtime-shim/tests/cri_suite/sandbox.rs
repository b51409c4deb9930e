//! The "sandbox" group (beside critest's "PodSandbox"): RunPodSandbox, StopPodSandbox, RemovePodSandbox,
//! PodSandboxStatus and ListPodSandbox with its filters. critest checks only the state (READY after
//! running, NOTREADY after stopping) and that ListPodSandbox by id finds a running pod and not a removed
//! one; the cases here add what it leaves out: the status echoing the config, a stopped pod still
//! listed, NotFound for the status of a removed pod, and filters by state and labels.

use std::collections::HashMap;

use super::support::{list_pods, new_pod, pod_config, pod_status, remove_pod, rpc, run_pod, stop_pod};
use super::{CaseResult, CriClient, Env, api, case, ensure};

const GROUP: &str = "sandbox";

/// Runs every case of the group.
pub async fn run(client: &mut CriClient, env: &Env) -> Vec<CaseResult> {
    vec![
        case(GROUP, "runtime should support running PodSandbox", running(client, env).await),
        case(GROUP, "runtime should support stopping PodSandbox", stopping(client, env).await),
        case(GROUP, "runtime should support removing PodSandbox", removing(client, env).await),
        case(GROUP, "runtime should support listing PodSandbox with filters", filters(client, env).await),
    ]
}

/// A running pod is READY, its status echoes the config (metadata, labels, annotations), has a creation
/// time, and ListPodSandbox shows it.
async fn running(client: &mut CriClient, env: &Env) -> Result<(), String> {
    let mut config = pod_config(env, "run")?;
    config.annotations.insert("keel.suite/annotation".to_owned(), "value".to_owned());
    let id = run_pod(client, env, &config).await?;
    let status = pod_status(client, &id).await.map_err(|s| rpc("PodSandboxStatus", &s))?;
    ensure(status.id == id, || format!("status of {id} has id {}", status.id))?;
    ensure(status.state() == api::PodSandboxState::SandboxReady, || format!("state {:?}", status.state()))?;
    ensure(status.metadata == config.metadata, || {
        format!("metadata {:?}, sent {:?}", status.metadata, config.metadata)
    })?;
    ensure(status.labels == config.labels, || {
        format!("labels {:?}, sent {:?}", status.labels, config.labels)
    })?;
    ensure(status.annotations == config.annotations, || {
        format!("annotations {:?}, sent {:?}", status.annotations, config.annotations)
    })?;
    ensure(status.created_at > 0, || format!("created_at {}", status.created_at))?;
    let listed = list_pods(client, None).await?;
    let item = listed.iter().find(|p| p.id == id).ok_or_else(|| format!("{id} is not listed"))?;
    ensure(item.state() == api::PodSandboxState::SandboxReady, || format!("listed as {:?}", item.state()))?;
    ensure(item.metadata == config.metadata, || format!("listed metadata {:?}", item.metadata))
}

/// A stopped pod is NOTREADY, and still listed.
async fn stopping(client: &mut CriClient, env: &Env) -> Result<(), String> {
    let (id, _) = new_pod(client, env, "stop").await?;
    stop_pod(client, &id).await.map_err(|s| rpc("StopPodSandbox", &s))?;
    let status = pod_status(client, &id).await.map_err(|s| rpc("PodSandboxStatus", &s))?;
    ensure(status.state() == api::PodSandboxState::SandboxNotready, || {
        format!("state {:?}", status.state())
    })?;
    let listed = list_pods(client, None).await?;
    ensure(listed.iter().any(|p| p.id == id), || format!("stopped pod {id} is not listed"))
}

/// A removed pod is neither listed nor has a status (NotFound).
async fn removing(client: &mut CriClient, env: &Env) -> Result<(), String> {
    let (id, _) = new_pod(client, env, "remove").await?;
    stop_pod(client, &id).await.map_err(|s| rpc("StopPodSandbox", &s))?;
    remove_pod(client, &id).await.map_err(|s| rpc("RemovePodSandbox", &s))?;
    let listed = list_pods(client, None).await?;
    ensure(!listed.iter().any(|p| p.id == id), || format!("removed pod {id} is still listed"))?;
    super::support::expect_code(
        "PodSandboxStatus of a removed pod",
        pod_status(client, &id).await,
        tonic::Code::NotFound,
    )
}

fn ids(pods: &[api::PodSandbox]) -> Vec<&str> {
    let mut ids: Vec<&str> = pods.iter().map(|p| p.id.as_str()).collect();
    ids.sort_unstable();
    ids
}

/// Filters by id, by state, by label selector, and by several at once (all must hold).
async fn filters(client: &mut CriClient, env: &Env) -> Result<(), String> {
    let group = super::support::unique("filters");
    let mut made = Vec::new();
    for (base, label, stop) in [("filter-a", "x", false), ("filter-b", "y", false), ("filter-c", "x", true)] {
        let mut config = pod_config(env, base)?;
        config.labels.insert("keel.suite/group".to_owned(), group.clone());
        config.labels.insert("keel.suite/label".to_owned(), label.to_owned());
        let id = run_pod(client, env, &config).await?;
        if stop {
            stop_pod(client, &id).await.map_err(|s| rpc("StopPodSandbox", &s))?;
        }
        made.push(id);
    }
    let (a, b, c) = (made[0].as_str(), made[1].as_str(), made[2].as_str());
    let selector = |label: Option<&str>| {
        let mut map = HashMap::from([("keel.suite/group".to_owned(), group.clone())]);
        if let Some(label) = label {
            map.insert("keel.suite/label".to_owned(), label.to_owned());
        }
        map
    };
    let state = |s: api::PodSandboxState| Some(api::PodSandboxStateValue { state: s.into() });
    let cases: Vec<(&str, api::PodSandboxFilter, Vec<&str>)> = vec![
        ("id", api::PodSandboxFilter { id: b.to_owned(), ..Default::default() }, vec![b]),
        (
            "unknown id",
            api::PodSandboxFilter { id: "0123456789abcdef".repeat(4), ..Default::default() },
            vec![],
        ),
        (
            "labels",
            api::PodSandboxFilter { label_selector: selector(None), ..Default::default() },
            vec![a, b, c],
        ),
        (
            "label x",
            api::PodSandboxFilter { label_selector: selector(Some("x")), ..Default::default() },
            vec![a, c],
        ),
        (
            "state NOTREADY and group",
            api::PodSandboxFilter {
                state: state(api::PodSandboxState::SandboxNotready),
                label_selector: selector(None),
                ..Default::default()
            },
            vec![c],
        ),
        (
            "state READY and label x",
            api::PodSandboxFilter {
                state: state(api::PodSandboxState::SandboxReady),
                label_selector: selector(Some("x")),
                ..Default::default()
            },
            vec![a],
        ),
        (
            "id and a state it is not in",
            api::PodSandboxFilter {
                id: a.to_owned(),
                state: state(api::PodSandboxState::SandboxNotready),
                ..Default::default()
            },
            vec![],
        ),
    ];
    for (what, filter, mut expected) in cases {
        let listed = list_pods(client, Some(filter)).await?;
        expected.sort_unstable();
        ensure(ids(&listed) == expected, || {
            format!("filter by {what}: listed {:?}, expected {expected:?}", ids(&listed))
        })?;
    }
    Ok(())
}
