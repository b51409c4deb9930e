//! The Pod status the kubelet reports (upstream's generateAPIPodStatus, convertToAPIContainerStatuses
//! and getPhase): phase, conditions, container and init-container statuses, IPs, QoS class and
//! start time, from what the runtime holds and the reasons the last sync left. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, HostIP, Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use keel_api::validation::quantity::Quantity;

use crate::pod_runtime::{Container as RuntimeContainer, PodRuntime, State};
use crate::probes::ResultsByContainer;

/// Why a container is not running, as the last sync found (upstream's reasonCache): ErrImagePull,
/// ImagePullBackOff, CrashLoopBackOff, CreateContainerConfigError, RunContainerError...
pub type Reasons = BTreeMap<String, (String, String)>;

/// The conditions the kubelet owns; others (PodScheduled, readiness gates, DisruptionTarget) it
/// keeps as the API has them.
pub const KUBELET_CONDITIONS: [&str; 4] =
    ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"];

/// What the status is made from, beside the Pod.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub runtime: &'a PodRuntime,
    pub reasons: &'a Reasons,
    /// The node's addresses, the primary first.
    pub host_ips: &'a [String],
    /// `<runtime name>` of `<runtime name>://<id>` container IDs (containerd, keel-shim).
    pub runtime_name: &'a str,
    /// The pod is being torn down and its containers will not run again.
    pub terminal: bool,
    /// Whole seconds, as the API keeps times (else every comparison with it differs).
    pub now: Timestamp,
    /// The containers' probe results, by container ID.
    pub probes: &'a ResultsByContainer,
    /// The pod ran past its activeDeadlineSeconds (upstream's activeDeadlineHandler evicts it).
    pub deadline_exceeded: bool,
}

/// The reason and message of a pod failed by its activeDeadlineSeconds, as upstream's.
pub const DEADLINE_EXCEEDED: (&str, &str) =
    ("DeadlineExceeded", "Pod was active on the node longer than the specified deadline");

/// The seconds left at `now` before the pod's activeDeadlineSeconds, counted from its startTime;
/// none without a deadline or a start (upstream's pastActiveDeadline: past it when <= 0).
pub fn deadline_left(pod: &Pod, start: Option<Timestamp>, now: Timestamp) -> Option<i64> {
    let deadline = pod.spec.as_ref()?.active_deadline_seconds?;
    Some(deadline - (now.as_second() - start?.as_second()))
}

/// A CRI time (nanoseconds) as the API keeps times: whole seconds.
fn time(nanos: i64) -> Option<Time> {
    (nanos > 0).then(|| Timestamp::from_second(nanos / 1_000_000_000).ok().map(Time)).flatten()
}

/// upstream's GetPodQOS: Guaranteed when every container limits cpu and memory and requests
/// (defaulted to the limits) equal them, BestEffort when none requests or limits anything.
pub fn qos_class(pod: &Pod) -> &'static str {
    let Some(spec) = &pod.spec else { return "BestEffort" };
    let all: Vec<&Container> = spec.init_containers.iter().flatten().chain(&spec.containers).collect();
    let mut any = false;
    let mut guaranteed = true;
    for container in &all {
        let resources = container.resources.clone().unwrap_or_default();
        let limits = resources.limits.unwrap_or_default();
        let requests = resources.requests.unwrap_or_default();
        let named = |map: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
                     name: &str| {
            map.get(name).and_then(|q| Quantity::parse(&q.0)).filter(|q| !q.is_zero())
        };
        for name in ["cpu", "memory"] {
            let limit = named(&limits, name);
            let request = named(&requests, name).or(limit);
            if limit.is_some() || request.is_some() {
                any = true;
            }
            match (request, limit) {
                (Some(request), Some(limit)) if request == limit => {}
                _ => guaranteed = false,
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

fn waiting(reason: &str, message: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.to_owned()),
            message: (!message.is_empty()).then(|| message.to_owned()),
        }),
        ..ContainerState::default()
    }
}

fn terminated(container: &RuntimeContainer, runtime_name: &str) -> ContainerState {
    let reason = if !container.reason.is_empty() {
        container.reason.clone()
    } else if container.exit_code == 0 {
        "Completed".to_owned()
    } else {
        "Error".to_owned()
    };
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: container.exit_code,
            reason: Some(reason),
            message: (!container.message.is_empty()).then(|| container.message.clone()),
            started_at: time(container.started_at),
            finished_at: time(container.finished_at),
            container_id: Some(format!("{runtime_name}://{}", container.id)),
            ..ContainerStateTerminated::default()
        }),
        ..ContainerState::default()
    }
}

fn container_status(
    spec: &Container,
    inputs: &Inputs<'_>,
    default_waiting: &str,
    previous: Option<&ContainerStatus>,
) -> ContainerStatus {
    let mut attempts = inputs.runtime.containers.iter().filter(|c| c.name == spec.name);
    let newest = attempts.next();
    let older = attempts.next();
    let reason = inputs.reasons.get(&spec.name);
    let mut status = ContainerStatus {
        name: spec.name.clone(),
        image: spec.image.clone().unwrap_or_default(),
        image_id: String::new(),
        ready: false,
        restart_count: 0,
        started: Some(false),
        ..ContainerStatus::default()
    };
    let Some(newest) = newest else {
        let (reason, message) =
            reason.cloned().unwrap_or_else(|| (default_waiting.to_owned(), String::new()));
        status.state = Some(waiting(&reason, &message));
        // A container removed with its sandbox keeps the count and last state it had.
        if let Some(previous) = previous {
            status.restart_count = previous.restart_count;
            status.last_state = previous.last_state.clone();
        }
        return status;
    };
    status.restart_count = newest.restart_count;
    status.container_id = Some(format!("{}://{}", inputs.runtime_name, newest.id));
    status.image_id = newest.image_ref.clone();
    status.last_state = older.map(|o| terminated(o, inputs.runtime_name));
    match newest.state {
        State::Running => {
            status.state = Some(ContainerState {
                running: Some(ContainerStateRunning { started_at: time(newest.started_at) }),
                ..ContainerState::default()
            });
            let results = inputs.probes.get(&newest.id).copied().unwrap_or_default();
            status.started = Some(results.started(spec));
            status.ready = results.ready(spec);
        }
        State::Exited => match reason {
            // To be started again, after a back-off: waiting, with the run that ended as lastState.
            Some((reason, message)) if !inputs.terminal => {
                status.state = Some(waiting(reason, message));
                status.last_state = Some(terminated(newest, inputs.runtime_name));
            }
            _ => status.state = Some(terminated(newest, inputs.runtime_name)),
        },
        State::Created | State::Unknown => {
            let (reason, message) =
                reason.cloned().unwrap_or_else(|| (default_waiting.to_owned(), String::new()));
            status.state = Some(waiting(&reason, &message));
        }
    }
    status
}

fn is_restartable(container: &Container) -> bool {
    crate::pod_actions::is_sidecar(container)
}

/// Whether a container of `spec.containers` ran (upstream's HasAnyRegularContainerStarted):
/// the pod was initialized then, whatever its sidecars do now.
fn has_any_container_started(containers: &[ContainerStatus]) -> bool {
    containers
        .iter()
        .any(|s| s.state.as_ref().is_some_and(|st| st.running.is_some() || st.terminated.is_some()))
}

/// upstream's getPhase (the ContainerRestartRules gate off, as in 1.34 by default).
pub fn phase(
    pod: &Pod,
    init: &[ContainerStatus],
    containers: &[ContainerStatus],
    terminal: bool,
) -> &'static str {
    let Some(spec) = &pod.spec else { return "Pending" };
    let restart_policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let state = |s: &ContainerStatus| s.state.clone().unwrap_or_default();
    let mut pending_init = 0;
    let mut failed_init = 0;
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    let mut pending_sidecars = 0;
    for (container, status) in spec.init_containers.iter().flatten().zip(init) {
        if is_restartable(container) {
            // A sidecar counts while it runs (pending until started); once it stopped, not at all.
            let state = state(status);
            if state.running.is_some() {
                running += 1;
                if status.started != Some(true) {
                    pending_sidecars += 1;
                }
            } else if state.terminated.is_none()
                && status.last_state.as_ref().is_none_or(|l| l.terminated.is_none())
            {
                pending_sidecars += 1;
                waiting += 1;
            }
            continue;
        }
        let state = state(status);
        if let Some(done) = state.terminated {
            if done.exit_code != 0 {
                failed_init += 1;
            }
        } else if state.waiting.is_some()
            && let Some(done) = status.last_state.as_ref().and_then(|l| l.terminated.as_ref())
        {
            if done.exit_code != 0 {
                failed_init += 1;
            }
        } else {
            pending_init += 1;
        }
    }
    for status in containers {
        let state = state(status);
        if state.running.is_some() {
            running += 1;
        } else if let Some(done) = state.terminated {
            stopped += 1;
            if done.exit_code == 0 {
                succeeded += 1;
            }
        } else if state.waiting.is_some()
            && status.last_state.as_ref().is_some_and(|l| l.terminated.is_some())
        {
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    if failed_init > 0 && restart_policy == "Never" {
        return "Failed";
    }
    // Sidecars restarting after the containers ran do not make the pod Pending again.
    let initialized = has_any_container_started(containers);
    if pending_init > 0 || (pending_sidecars > 0 && !initialized) || waiting > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped > 0 {
        if terminal {
            return if stopped == succeeded { "Succeeded" } else { "Failed" };
        }
        return match restart_policy {
            "Always" => "Running",
            _ if stopped == succeeded => "Succeeded",
            "Never" => "Failed",
            _ => "Running",
        };
    }
    "Pending"
}

fn condition(kind: &str, ok: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: kind.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.map(str::to_owned),
        message,
        ..PodCondition::default()
    }
}

fn names(statuses: &[&ContainerStatus]) -> String {
    let names: Vec<&str> = statuses.iter().map(|s| s.name.as_str()).collect();
    format!("[{}]", names.join(" "))
}

/// The whole status of `pod` now; `previous` is the status the API holds (conditions keep their
/// transition times, PodScheduled and startTime are kept).
pub fn status(pod: &Pod, inputs: &Inputs<'_>) -> PodStatus {
    let previous = pod.status.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let find = |list: &Option<Vec<ContainerStatus>>, name: &str| {
        list.iter().flatten().find(|s| s.name == name).cloned()
    };
    let init: Vec<ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| {
            container_status(
                c,
                inputs,
                "PodInitializing",
                find(&previous.init_container_statuses, &c.name).as_ref(),
            )
        })
        .collect();
    let initialized = spec.init_containers.iter().flatten().zip(&init).all(|(c, s)| {
        is_restartable(c)
            || s.state.as_ref().and_then(|st| st.terminated.as_ref()).is_some_and(|t| t.exit_code == 0)
    });
    let default_waiting = if initialized { "ContainerCreating" } else { "PodInitializing" };
    let containers: Vec<ContainerStatus> = spec
        .containers
        .iter()
        .map(|c| {
            container_status(c, inputs, default_waiting, find(&previous.container_statuses, &c.name).as_ref())
        })
        .collect();
    let mut phase = phase(pod, &init, &containers, inputs.terminal);
    let (mut reason, mut message) = (previous.reason.clone(), previous.message.clone());
    if inputs.deadline_exceeded {
        phase = "Failed";
        (reason, message) = (Some(DEADLINE_EXCEEDED.0.to_owned()), Some(DEADLINE_EXCEEDED.1.to_owned()));
    }
    // A terminal phase is never left (upstream's status manager refuses it).
    if let Some(old @ ("Succeeded" | "Failed")) = previous.phase.as_deref() {
        phase = if old == "Succeeded" { "Succeeded" } else { "Failed" };
    }
    let completed = matches!(phase, "Succeeded" | "Failed");
    let sandbox_ready =
        inputs.runtime.sandboxes.first().is_some_and(|s| s.ready && (!s.ips.is_empty() || s.host_network));
    let mut conditions =
        vec![condition("PodReadyToStartContainers", sandbox_ready && !completed, None, None)];
    let pending_init: Vec<&ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .zip(&init)
        .filter(|(c, s)| {
            if is_restartable(c) {
                s.started != Some(true)
            } else {
                s.state.as_ref().and_then(|st| st.terminated.as_ref()).is_none_or(|t| t.exit_code != 0)
            }
        })
        .map(|(_, s)| s)
        .collect();
    conditions.push(
        if pending_init.is_empty()
            || completed && phase == "Succeeded"
            || has_any_container_started(&containers)
        {
            condition("Initialized", true, None, None)
        } else {
            condition(
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(format!("containers with incomplete status: {}", names(&pending_init))),
            )
        },
    );
    let sidecars = spec.init_containers.iter().flatten().zip(&init).filter(|(c, _)| is_restartable(c));
    let unready: Vec<&ContainerStatus> =
        sidecars.map(|(_, s)| s).chain(&containers).filter(|s| !s.ready).collect();
    let ready = |kind: &str| {
        if completed {
            condition(kind, false, Some("PodCompleted"), None)
        } else if unready.is_empty() {
            condition(kind, true, None, None)
        } else {
            condition(
                kind,
                false,
                Some("ContainersNotReady"),
                Some(format!("containers with unready status: {}", names(&unready))),
            )
        }
    };
    conditions.push(ready("Ready"));
    conditions.push(ready("ContainersReady"));
    let mut known = previous.conditions.clone().unwrap_or_default();
    for new in &mut conditions {
        let old = known.iter().find(|c| c.type_ == new.type_);
        new.last_transition_time = match old {
            Some(old) if old.status == new.status => old.last_transition_time.clone(),
            _ => Some(Time(inputs.now)),
        };
    }
    // Conditions others own (PodScheduled, readiness gates, DisruptionTarget) stay as they are.
    known.retain(|c| !conditions.iter().any(|n| n.type_ == c.type_));
    conditions.extend(known);
    let host_network = spec.host_network.unwrap_or(false);
    let pod_ips: Vec<String> =
        if host_network { inputs.host_ips.to_vec() } else { inputs.runtime.ips().to_vec() };
    PodStatus {
        phase: Some(phase.to_owned()),
        conditions: Some(conditions),
        host_ip: inputs.host_ips.first().cloned(),
        host_ips: (!inputs.host_ips.is_empty())
            .then(|| inputs.host_ips.iter().map(|ip| HostIP { ip: ip.clone() }).collect()),
        pod_ip: pod_ips.first().cloned(),
        pod_ips: (!pod_ips.is_empty()).then(|| pod_ips.iter().map(|ip| PodIP { ip: ip.clone() }).collect()),
        init_container_statuses: (!init.is_empty()).then_some(init),
        container_statuses: Some(containers),
        qos_class: Some(qos_class(pod).to_owned()),
        start_time: previous.start_time.or(Some(Time(inputs.now))),
        reason,
        message,
        ..previous
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_runtime::Sandbox;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

    fn pod(restart_policy: &str) -> Pod {
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(restart_policy.into()),
                containers: vec![Container {
                    name: "a".into(),
                    image: Some("busybox".into()),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    fn runtime(state: Option<(State, i32)>) -> PodRuntime {
        PodRuntime {
            sandboxes: vec![Sandbox {
                id: "s".into(),
                attempt: 0,
                ready: true,
                created_at: 1,
                ips: vec!["10.244.0.9".into()],
                host_network: false,
            }],
            containers: state
                .map(|(state, exit_code)| RuntimeContainer {
                    id: "c1".into(),
                    name: "a".into(),
                    attempt: 0,
                    state,
                    created_at: 1,
                    started_at: 1_700_000_000_000_000_000,
                    finished_at: 1_700_000_001_000_000_000,
                    exit_code,
                    reason: String::new(),
                    message: String::new(),
                    image: "busybox".into(),
                    image_ref: "sha256:1".into(),
                    hash: String::new(),
                    restart_count: 0,
                })
                .into_iter()
                .collect(),
        }
    }

    fn inputs<'a>(runtime: &'a PodRuntime, reasons: &'a Reasons, terminal: bool) -> Inputs<'a> {
        Inputs {
            runtime,
            reasons,
            host_ips: &[],
            runtime_name: "keel-shim",
            terminal,
            now: "2026-12-03T12:00:00Z".parse().unwrap(),
            probes: &NO_PROBES,
            deadline_exceeded: false,
        }
    }

    static NO_PROBES: ResultsByContainer = ResultsByContainer::new();

    fn conditions(status: &PodStatus) -> Vec<(String, String, Option<String>)> {
        status
            .conditions
            .iter()
            .flatten()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect()
    }

    #[test]
    fn creating_then_running_and_ready() {
        let none = Reasons::new();
        let empty = runtime(None);
        let status = status(&pod("Always"), &inputs(&empty, &none, false));
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        let state = status.container_statuses.as_ref().unwrap()[0].state.clone().unwrap();
        assert_eq!(state.waiting.unwrap().reason.as_deref(), Some("ContainerCreating"));
        assert_eq!(
            conditions(&status)[2],
            ("Ready".into(), "False".into(), Some("ContainersNotReady".into()))
        );
        let running = runtime(Some((State::Running, 0)));
        let status = super::status(&pod("Always"), &inputs(&running, &none, false));
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.pod_ip.as_deref(), Some("10.244.0.9"));
        let container = &status.container_statuses.as_ref().unwrap()[0];
        assert!(container.ready && container.started == Some(true));
        assert_eq!(container.container_id.as_deref(), Some("keel-shim://c1"));
        assert!(conditions(&status).iter().all(|(_, s, _)| s == "True"));
        assert_eq!(status.qos_class.as_deref(), Some("BestEffort"));
    }

    #[test]
    fn exits_end_in_the_phase_upstream_gives() {
        let none = Reasons::new();
        for (policy, exit_code, terminal, phase) in [
            ("Never", 0, false, "Succeeded"),
            ("Never", 1, false, "Failed"),
            ("OnFailure", 1, false, "Running"),
            ("Always", 0, false, "Running"),
            ("Always", 137, true, "Failed"),
            ("Always", 0, true, "Succeeded"),
        ] {
            let exited = runtime(Some((State::Exited, exit_code)));
            let status = status(&pod(policy), &inputs(&exited, &none, terminal));
            assert_eq!(status.phase.as_deref(), Some(phase), "{policy} {exit_code} {terminal}");
        }
        let exited = runtime(Some((State::Exited, 1)));
        let backoff =
            Reasons::from([("a".to_owned(), ("CrashLoopBackOff".to_owned(), "back-off 10s".to_owned()))]);
        let status = status(&pod("Always"), &inputs(&exited, &backoff, false));
        let container = &status.container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            container.state.as_ref().unwrap().waiting.as_ref().unwrap().reason.as_deref(),
            Some("CrashLoopBackOff")
        );
        assert_eq!(container.last_state.as_ref().unwrap().terminated.as_ref().unwrap().exit_code, 1);
        assert_eq!(status.phase.as_deref(), Some("Running"));
    }

    #[test]
    fn past_its_active_deadline_a_pod_fails_as_upstream_says() {
        let mut p = pod("Always");
        let at = |t: &str| t.parse::<Timestamp>().unwrap();
        let start = Some(at("2026-12-03T12:00:00Z"));
        assert_eq!(deadline_left(&p, start, at("2026-12-03T12:00:05Z")), None);
        p.spec.as_mut().unwrap().active_deadline_seconds = Some(10);
        assert_eq!(deadline_left(&p, start, at("2026-12-03T12:00:04Z")), Some(6));
        assert_eq!(deadline_left(&p, start, at("2026-12-03T12:00:10Z")), Some(0));
        assert_eq!(deadline_left(&p, None, at("2026-12-03T12:00:10Z")), None);
        let none = Reasons::new();
        let running = runtime(Some((State::Running, 0)));
        let status = status(&p, &Inputs { deadline_exceeded: true, ..inputs(&running, &none, true) });
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        assert_eq!(
            (status.reason.as_deref(), status.message.as_deref()),
            (Some(DEADLINE_EXCEEDED.0), Some(DEADLINE_EXCEEDED.1))
        );
    }

    #[test]
    fn qos_classes() {
        let mut p = pod("Always");
        assert_eq!(qos_class(&p), "BestEffort");
        let both = BTreeMap::from([
            ("cpu".to_owned(), ApiQuantity("1".into())),
            ("memory".to_owned(), ApiQuantity("1Gi".into())),
        ]);
        p.spec.as_mut().unwrap().containers[0].resources =
            Some(ResourceRequirements { limits: Some(both.clone()), ..ResourceRequirements::default() });
        assert_eq!(qos_class(&p), "Guaranteed");
        let mut requests = both;
        requests.insert("cpu".into(), ApiQuantity("500m".into()));
        p.spec.as_mut().unwrap().containers[0].resources.as_mut().unwrap().requests = Some(requests);
        assert_eq!(qos_class(&p), "Burstable");
    }

    #[test]
    fn sidecars_count_while_they_run_and_are_ready_with_the_containers() {
        let mut p = pod("Never");
        let side = Container {
            name: "side".into(),
            image: Some("busybox".into()),
            restart_policy: Some("Always".into()),
            ..Container::default()
        };
        p.spec.as_mut().unwrap().init_containers = Some(vec![side]);
        let none = Reasons::new();
        let with = |side: State, main: Option<State>| {
            let mut r = runtime(main.map(|state| (state, 0)));
            let mut sidecar = runtime(Some((side, 0))).containers.remove(0);
            (sidecar.id, sidecar.name) = ("c0".into(), "side".into());
            r.containers.push(sidecar);
            r
        };
        // The sidecar runs, the container is being created: Pending, initialized.
        let r = with(State::Running, None);
        let status = status(&p, &inputs(&r, &none, false));
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        let init = &status.init_container_statuses.as_ref().unwrap()[0];
        assert_eq!((init.started, init.ready), (Some(true), true));
        assert_eq!(conditions(&status)[1], ("Initialized".into(), "True".into(), None));
        // Both run: Running and Ready.
        let r = with(State::Running, Some(State::Running));
        let status = super::status(&p, &inputs(&r, &none, false));
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(conditions(&status)[2], ("Ready".into(), "True".into(), None));
        // The sidecar exited and waits to restart: still Running (the pod was initialized), not
        // Ready, naming it.
        let r = with(State::Exited, Some(State::Running));
        let restarting = Reasons::from([("side".to_owned(), ("CrashLoopBackOff".to_owned(), String::new()))]);
        let status = super::status(&p, &inputs(&r, &restarting, false));
        assert_eq!(status.phase.as_deref(), Some("Running"));
        let ready =
            status.conditions.as_ref().unwrap().iter().find(|c| c.type_ == "ContainersReady").unwrap();
        assert_eq!(ready.message.as_deref(), Some("containers with unready status: [side]"));
        // The container is done and the sidecar was stopped: the pod succeeded.
        let r = with(State::Exited, Some(State::Exited));
        let status = super::status(&p, &inputs(&r, &none, true));
        assert_eq!(status.phase.as_deref(), Some("Succeeded"));
    }
}
