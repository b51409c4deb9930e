//! What one sync of a pod must do (upstream's computePodActions): from the Pod and what the runtime
//! holds of it, whether to (re)create the sandbox, which init container runs next, which
//! containers start and which are killed, and whether the whole pod goes. Pure.
//!
//! Init containers run to completion, in order; restartable init containers (sidecars) start in
//! their turn, are kept running from then on, and do not keep a finished pod alive.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::pod_runtime::{PodRuntime, State};
use crate::probes::{self, Kind, ResultsByContainer};

/// upstream's podActions, without the parts keel-kubelet does not do yet (ephemeral containers,
/// resizes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodActions {
    /// Stop every container and the sandbox (before a new sandbox, or because nothing is left to run).
    pub kill_pod: bool,
    pub create_sandbox: bool,
    /// The sandbox to use (or the one being replaced).
    pub sandbox_id: String,
    /// The attempt of the sandbox to create.
    pub attempt: u32,
    /// Indexes into spec.initContainers: the next init container, and sidecars to (re)start.
    pub init_to_start: Vec<usize>,
    /// Indexes into spec.containers.
    pub containers_to_start: Vec<usize>,
    /// Containers to kill, each with why.
    pub containers_to_kill: Vec<Kill>,
}

/// A container to kill: its ID, the Killing event's message, and the probe that failed (whose
/// terminationGracePeriodSeconds then applies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    pub id: String,
    pub message: String,
    pub probe: Option<Kind>,
}

impl Kill {
    fn new(id: &str, message: String) -> Kill {
        Kill { id: id.to_owned(), message, probe: None }
    }
}

fn spec_of(pod: &Pod) -> (&[Container], &[Container], &str, bool) {
    match &pod.spec {
        Some(spec) => (
            spec.containers.as_slice(),
            spec.init_containers.as_deref().unwrap_or_default(),
            spec.restart_policy.as_deref().unwrap_or("Always"),
            spec.host_network.unwrap_or(false),
        ),
        None => (&[], &[], "Always", false),
    }
}

/// The hash the kubelet labels a container with: a changed spec means a restart. FNV-1a over its
/// JSON without resources (which an in-place resize changes) — stable across kubelet builds, as a
/// restarted kubelet must find the same hash on the containers it left running.
pub fn container_hash(container: &Container) -> String {
    let mut hashed = container.clone();
    hashed.resources = None;
    hashed.resize_policy = None;
    let bytes = serde_json::to_vec(&hashed).unwrap_or_default();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:x}")
}

/// Whether the sandbox must be (re)created, with the attempt and the sandbox to replace (upstream's
/// PodSandboxChanged).
fn sandbox_changed(host_network: bool, runtime: &PodRuntime) -> (bool, u32, String) {
    let Some(newest) = runtime.sandboxes.first() else { return (true, 0, String::new()) };
    let ready = runtime.sandboxes.iter().filter(|s| s.ready).count();
    if ready > 1 || !newest.ready {
        return (true, newest.attempt + 1, newest.id.clone());
    }
    if newest.host_network != host_network {
        return (true, newest.attempt + 1, String::new());
    }
    if !host_network && newest.ips.is_empty() {
        return (true, newest.attempt + 1, newest.id.clone());
    }
    (false, newest.attempt, newest.id.clone())
}

fn succeeded(name: &str, runtime: &PodRuntime) -> bool {
    runtime.container(name).is_some_and(|c| c.state == State::Exited && c.exit_code == 0)
}

/// upstream's ShouldContainerBeRestarted: whether a container that is not running starts (again).
pub fn should_restart(pod: &Pod, name: &str, runtime: &PodRuntime) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(status) = runtime.container(name) else { return true };
    match status.state {
        State::Running => false,
        State::Unknown | State::Created => true,
        State::Exited => match spec_of(pod).2 {
            "Never" => false,
            "OnFailure" => status.exit_code != 0,
            _ => true,
        },
    }
}

/// Whether `container` is a restartable init container (a sidecar): `restartPolicy: Always`.
pub fn is_sidecar(container: &Container) -> bool {
    container.restart_policy.as_deref() == Some("Always")
}

/// The init containers' actions (upstream's computeInitContainerActions): the first one not yet
/// run starts, sidecars that exited (or failed their startup or liveness probe, or changed) start
/// again, a failed regular one restarts or ends a pod that does not restart. Whether the pod is
/// initialized: every regular init container succeeded and every sidecar has started, or a
/// regular container ran already (after which only the sidecars are kept running).
fn init_actions(
    pod: &Pod,
    runtime: &PodRuntime,
    probes: &ResultsByContainer,
    actions: &mut PodActions,
) -> bool {
    let (containers, init, restart_policy, _) = spec_of(pod);
    if init.is_empty() {
        return true;
    }
    let mut initialized = containers.iter().any(|c| {
        runtime.container(&c.name).is_some_and(|s| matches!(s.state, State::Created | State::Running))
    });
    // Walked from the last: the newest init container that ran tells how far initialization got
    // (those before it may have been removed since); sidecars before it are kept running.
    let mut reached = initialized;
    let mut to_start = Vec::new();
    for (index, container) in init.iter().enumerate().rev() {
        let sidecar = is_sidecar(container);
        let Some(status) = runtime.container(&container.name) else {
            if reached && sidecar {
                to_start.push(index);
            }
            continue;
        };
        if reached && !sidecar {
            continue;
        }
        let last = index + 1 == init.len();
        let restart = |kill: Option<Kill>, to_start: &mut Vec<usize>, actions: &mut PodActions| {
            actions.containers_to_kill.extend(kill);
            to_start.push(index);
        };
        match status.state {
            State::Created => restart(None, &mut to_start, actions),
            State::Running if !sidecar => {}
            State::Running => {
                let results = probes.get(&status.id).copied().unwrap_or_default();
                if container.startup_probe.is_some() && results.startup != Some(probes::Outcome::Success) {
                    if results.startup == Some(probes::Outcome::Failure) {
                        let message = format!("Init container {} failed startup probe", container.name);
                        restart(
                            Some(Kill { id: status.id.clone(), message, probe: Some(Kind::Startup) }),
                            &mut to_start,
                            actions,
                        );
                    }
                } else {
                    if last {
                        initialized = true;
                    } else if !reached {
                        to_start.push(index + 1);
                    }
                    if status.hash != container_hash(container) {
                        let message = format!("Init container {} definition changed", container.name);
                        restart(Some(Kill::new(&status.id, message)), &mut to_start, actions);
                    } else if results.liveness == Some(probes::Outcome::Failure) {
                        let message = format!("Init container {} failed liveness probe", container.name);
                        restart(
                            Some(Kill { id: status.id.clone(), message, probe: Some(Kind::Liveness) }),
                            &mut to_start,
                            actions,
                        );
                    }
                }
            }
            State::Exited if sidecar => restart(None, &mut to_start, actions),
            State::Exited if status.exit_code != 0 => {
                if restart_policy == "Never" {
                    actions.kill_pod = true;
                    actions.init_to_start.clear();
                    return false;
                }
                restart(None, &mut to_start, actions);
            }
            State::Exited => {
                if last {
                    initialized = true;
                } else {
                    to_start.push(index + 1);
                }
            }
            State::Unknown => {
                if !sidecar && restart_policy == "Never" {
                    actions.kill_pod = true;
                    actions.init_to_start.clear();
                    return false;
                }
                let message =
                    "Init container is in \"unknown\" state, try killing it before restart".to_owned();
                restart(Some(Kill::new(&status.id, message)), &mut to_start, actions);
            }
        }
        reached = true;
    }
    if !reached {
        to_start.push(0);
    }
    to_start.reverse();
    to_start.dedup();
    actions.init_to_start = to_start;
    initialized
}

/// What to do for `pod`, given what the runtime holds of it and its containers' probe results.
pub fn compute(pod: &Pod, runtime: &PodRuntime, probes: &ResultsByContainer) -> PodActions {
    let (containers, init, restart_policy, host_network) = spec_of(pod);
    let (create, attempt, sandbox_id) = sandbox_changed(host_network, runtime);
    let mut actions =
        PodActions { kill_pod: create, create_sandbox: create, sandbox_id, attempt, ..PodActions::default() };
    if create {
        // A pod that does not restart, whose sandbox went after its containers ran, is done.
        if restart_policy == "Never" && attempt != 0 && !runtime.containers.is_empty() {
            actions.create_sandbox = false;
            return actions;
        }
        let to_start: Vec<usize> = containers
            .iter()
            .enumerate()
            .filter(|(_, c)| !(restart_policy == "OnFailure" && succeeded(&c.name, runtime)))
            .map(|(index, _)| index)
            .collect();
        if to_start.is_empty() && containers.iter().any(|c| runtime.container(&c.name).is_some()) {
            actions.create_sandbox = false;
            return actions;
        }
        if !init.is_empty() {
            actions.init_to_start = vec![0];
            return actions;
        }
        actions.containers_to_start = to_start;
        return actions;
    }
    if !init_actions(pod, runtime, probes, &mut actions) || actions.kill_pod {
        return actions;
    }
    let mut keep = 0;
    for (index, container) in containers.iter().enumerate() {
        let status = runtime.container(&container.name);
        match status {
            Some(status) if status.state == State::Running => {
                let failed = probes.get(&status.id).and_then(probes::Results::failed);
                if status.hash != container_hash(container) {
                    actions.containers_to_kill.push(Kill::new(
                        &status.id,
                        format!("Container {} definition changed, will be restarted", container.name),
                    ));
                    actions.containers_to_start.push(index);
                } else if let Some(kind) = failed {
                    let mut message =
                        format!("Container {} failed {} probe", container.name, kind.name().to_lowercase());
                    if restart_policy != "Never" {
                        message.push_str(", will be restarted");
                        actions.containers_to_start.push(index);
                    }
                    actions.containers_to_kill.push(Kill {
                        id: status.id.clone(),
                        message,
                        probe: Some(kind),
                    });
                } else {
                    keep += 1;
                }
            }
            _ => {
                if should_restart(pod, &container.name, runtime) {
                    actions.containers_to_start.push(index);
                    if let Some(status) = status.filter(|s| s.state == State::Unknown) {
                        actions.containers_to_kill.push(Kill::new(
                            &status.id,
                            "Container is in \"unknown\" state, try killing it before restart".to_owned(),
                        ));
                    }
                }
            }
        }
    }
    if keep == 0 && actions.containers_to_start.is_empty() {
        actions.kill_pod = true;
        // Sidecars do not keep a pod whose containers are done alive.
        actions.init_to_start.clear();
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_runtime::{Container as RuntimeContainer, Sandbox};
    use k8s_openapi::api::core::v1::PodSpec;

    fn pod(restart_policy: &str, init: &[&str], containers: &[&str]) -> Pod {
        let container = |name: &&str| Container {
            name: (*name).into(),
            image: Some("busybox".into()),
            ..Container::default()
        };
        Pod {
            spec: Some(PodSpec {
                restart_policy: Some(restart_policy.into()),
                init_containers: (!init.is_empty()).then(|| init.iter().map(container).collect()),
                containers: containers.iter().map(container).collect(),
                ..PodSpec::default()
            }),
            ..Pod::default()
        }
    }

    fn sandbox(ready: bool, attempt: u32) -> Sandbox {
        Sandbox {
            id: format!("s{attempt}"),
            attempt,
            ready,
            created_at: i64::from(attempt),
            ips: vec!["10.0.0.2".into()],
            host_network: false,
        }
    }

    fn ran(pod: &Pod, name: &str, state: State, exit_code: i32) -> RuntimeContainer {
        let spec = pod.spec.as_ref().unwrap();
        let all = spec.init_containers.iter().flatten().chain(&spec.containers);
        let hash = all.filter(|c| c.name == name).map(container_hash).next().unwrap();
        RuntimeContainer {
            id: format!("{name}-id"),
            name: name.into(),
            attempt: 0,
            state,
            created_at: 1,
            started_at: 1,
            finished_at: 2,
            exit_code,
            reason: String::new(),
            message: String::new(),
            image: "busybox".into(),
            image_ref: String::new(),
            hash,
            restart_count: 0,
        }
    }

    #[test]
    fn a_new_pod_gets_a_sandbox_then_its_first_init_container() {
        let plain = pod("Always", &[], &["a", "b"]);
        let actions = compute(&plain, &PodRuntime::default(), &ResultsByContainer::new());
        assert!(actions.create_sandbox && actions.kill_pod);
        assert_eq!((actions.attempt, actions.containers_to_start), (0, vec![0, 1]));
        let with_init = pod("Always", &["i0", "i1"], &["a"]);
        let actions = compute(&with_init, &PodRuntime::default(), &ResultsByContainer::new());
        assert_eq!((actions.init_to_start, actions.containers_to_start.len()), (vec![0], 0));
    }

    #[test]
    fn init_containers_run_in_order_and_a_failure_ends_a_never_pod() {
        let p = pod("Never", &["i0", "i1"], &["a"]);
        let mut runtime = PodRuntime { sandboxes: vec![sandbox(true, 0)], containers: vec![] };
        runtime.containers.push(ran(&p, "i0", State::Exited, 0));
        assert_eq!(compute(&p, &runtime, &ResultsByContainer::new()).init_to_start, [1]);
        runtime.containers.insert(0, ran(&p, "i1", State::Running, 0));
        assert_eq!(
            compute(&p, &runtime, &ResultsByContainer::new()),
            PodActions { sandbox_id: "s0".into(), ..PodActions::default() }
        );
        runtime.containers[0] = ran(&p, "i1", State::Exited, 1);
        assert!(compute(&p, &runtime, &ResultsByContainer::new()).kill_pod);
        runtime.containers[0] = ran(&p, "i1", State::Exited, 0);
        assert_eq!(compute(&p, &runtime, &ResultsByContainer::new()).containers_to_start, [0]);
    }

    #[test]
    fn exited_containers_restart_as_the_policy_says() {
        for (policy, exit_code, restarts) in [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 1, true),
            ("Never", 1, false),
        ] {
            let p = pod(policy, &[], &["a"]);
            let runtime = PodRuntime {
                sandboxes: vec![sandbox(true, 0)],
                containers: vec![ran(&p, "a", State::Exited, exit_code)],
            };
            let actions = compute(&p, &runtime, &ResultsByContainer::new());
            assert_eq!(actions.containers_to_start == [0], restarts, "{policy} exit {exit_code}");
            // Nothing left to run: the pod's sandbox goes.
            assert_eq!(actions.kill_pod, !restarts, "{policy} exit {exit_code}");
        }
    }

    #[test]
    fn a_changed_spec_restarts_the_container_and_a_lost_sandbox_is_recreated() {
        let p = pod("Always", &[], &["a"]);
        let mut running = ran(&p, "a", State::Running, 0);
        let runtime = PodRuntime { sandboxes: vec![sandbox(true, 0)], containers: vec![running.clone()] };
        assert_eq!(
            compute(&p, &runtime, &ResultsByContainer::new()),
            PodActions { sandbox_id: "s0".into(), ..PodActions::default() }
        );
        running.hash = "other".into();
        let changed = PodRuntime { sandboxes: vec![sandbox(true, 0)], containers: vec![running.clone()] };
        let actions = compute(&p, &changed, &ResultsByContainer::new());
        assert_eq!(
            actions.containers_to_kill,
            [Kill::new("a-id", "Container a definition changed, will be restarted".to_owned())]
        );
        assert_eq!(actions.containers_to_start, [0]);
        let lost = PodRuntime { sandboxes: vec![sandbox(false, 0)], containers: vec![running] };
        let actions = compute(&p, &lost, &ResultsByContainer::new());
        assert!(actions.create_sandbox && actions.kill_pod);
        assert_eq!((actions.attempt, actions.sandbox_id.as_str()), (1, "s0"));
        // A Never pod whose sandbox went after its containers ran is not started again.
        let never = pod("Never", &[], &["a"]);
        let gone = PodRuntime {
            sandboxes: vec![sandbox(false, 0)],
            containers: vec![ran(&never, "a", State::Exited, 0)],
        };
        let actions = compute(&never, &gone, &ResultsByContainer::new());
        assert!(actions.kill_pod && !actions.create_sandbox);
    }

    #[test]
    fn a_failed_liveness_or_startup_probe_kills_and_restarts_as_the_policy_says() {
        use crate::probes::{Outcome, Results};
        for (policy, kind, restarted) in [
            ("Always", Kind::Liveness, true),
            ("OnFailure", Kind::Startup, true),
            ("Never", Kind::Liveness, false),
        ] {
            let p = pod(policy, &[], &["a"]);
            let runtime = PodRuntime {
                sandboxes: vec![sandbox(true, 0)],
                containers: vec![ran(&p, "a", State::Running, 0)],
            };
            let mut results = Results::default();
            results.set(kind, Some(Outcome::Failure));
            let probes = ResultsByContainer::from([("a-id".to_owned(), results)]);
            let actions = compute(&p, &runtime, &probes);
            let mut message = format!("Container a failed {} probe", kind.name().to_lowercase());
            if restarted {
                message.push_str(", will be restarted");
            }
            assert_eq!(actions.containers_to_kill, [Kill { id: "a-id".into(), message, probe: Some(kind) }]);
            assert_eq!(actions.containers_to_start == [0], restarted, "{policy}");
            assert_eq!(actions.kill_pod, !restarted, "{policy}");
            // Readiness failures never kill.
            let mut unready = Results::default();
            unready.set(Kind::Readiness, Some(Outcome::Failure));
            let probes = ResultsByContainer::from([("a-id".to_owned(), unready)]);
            assert!(compute(&p, &runtime, &probes).containers_to_kill.is_empty());
        }
    }

    #[test]
    fn sidecars_start_in_turn_stay_running_and_do_not_keep_a_finished_pod() {
        use crate::probes::{Outcome, Results};
        let mut p = pod("Never", &["side", "i1"], &["a"]);
        let spec = p.spec.as_mut().unwrap();
        let side = &mut spec.init_containers.as_mut().unwrap()[0];
        side.restart_policy = Some("Always".into());
        side.startup_probe = Some(k8s_openapi::api::core::v1::Probe::default());
        let none = ResultsByContainer::new();
        let started = |outcome| {
            let mut results = Results::default();
            results.set(Kind::Startup, Some(outcome));
            ResultsByContainer::from([("side-id".to_owned(), results)])
        };
        let mut runtime = PodRuntime { sandboxes: vec![sandbox(true, 0)], containers: vec![] };
        assert_eq!(compute(&p, &runtime, &none).init_to_start, [0]);
        // The next init container waits for the sidecar's startup probe.
        runtime.containers.push(ran(&p, "side", State::Running, 0));
        assert_eq!(
            compute(&p, &runtime, &none),
            PodActions { sandbox_id: "s0".into(), ..PodActions::default() }
        );
        assert_eq!(compute(&p, &runtime, &started(Outcome::Success)).init_to_start, [1]);
        let failed = compute(&p, &runtime, &started(Outcome::Failure));
        assert_eq!(failed.init_to_start, [0]);
        assert_eq!(failed.containers_to_kill[0].message, "Init container side failed startup probe");
        // Initialized: the containers start, the sidecar is kept.
        runtime.containers.insert(0, ran(&p, "i1", State::Exited, 0));
        let actions = compute(&p, &runtime, &started(Outcome::Success));
        assert_eq!((actions.init_to_start.len(), actions.containers_to_start), (0, vec![0]));
        // A sidecar that exits is started again, whatever the pod's restartPolicy.
        runtime.containers.insert(0, ran(&p, "a", State::Running, 0));
        runtime.containers[2] = ran(&p, "side", State::Exited, 1);
        let actions = compute(&p, &runtime, &none);
        assert_eq!((actions.init_to_start, actions.kill_pod), (vec![0], false));
        // Even when the completed init containers were removed since.
        runtime.containers.remove(1);
        assert_eq!(compute(&p, &runtime, &none).init_to_start, [0]);
        // The pod's containers are done: the sidecar does not keep it.
        runtime.containers[0] = ran(&p, "a", State::Exited, 0);
        runtime.containers[1] = ran(&p, "side", State::Running, 0);
        runtime.containers.push(ran(&p, "i1", State::Exited, 0));
        let actions = compute(&p, &runtime, &started(Outcome::Success));
        assert!(
            actions.kill_pod && actions.init_to_start.is_empty() && actions.containers_to_start.is_empty()
        );
    }
}
