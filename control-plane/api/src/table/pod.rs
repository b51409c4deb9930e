//! Pods: upstream's `printPod` — READY as ready/total containers (sidecars counted), STATUS as the
//! reason kubectl shows (`Running`, `Completed`, `CrashLoopBackOff`, `Init:0/2`, `Init:Error`,
//! `Terminating`, `SchedulingGated`, ...), RESTARTS with the age of the last restart, and the wide
//! IP, NODE, NOMINATED NODE and READINESS GATES.

use std::collections::HashMap;

use jiff::Timestamp;
use serde_json::{Value, json};

use super::value::{
    age, array_at, at, bool_at, deleting, int_at, name, opt_bool, present, since, str_at, time_at,
};
use super::{AGE, Column, NAME, Row};

pub(super) const COLUMNS: &[Column] = &[
    NAME,
    Column::string("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    Column::string("Status", "The aggregate status of the containers in this pod."),
    Column::string(
        "Restarts",
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    Column::string("IP", "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.")
        .wide(),
    Column::string(
        "Node",
        "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
    )
    .wide(),
    Column::string(
        "Nominated Node",
        "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.",
    )
    .wide(),
    Column::string(
        "Readiness Gates",
        "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates",
    )
    .wide(),
];

/// Upstream's `podutil.IsRestartableInitContainer`: an init container with `restartPolicy: Always`
/// (a sidecar).
fn restartable(container: Option<&Value>) -> bool {
    container.is_some_and(|c| str_at(c, &["restartPolicy"]) == "Always")
}

/// The later of two restart dates (`lastRestartDate.Before(&terminatedDate)`).
fn later(current: Option<Timestamp>, candidate: Option<Timestamp>) -> Option<Timestamp> {
    match (current, candidate) {
        (Some(c), Some(t)) if c < t => Some(t),
        (None, Some(t)) => Some(t),
        (current, _) => current,
    }
}

/// The first condition of `kind` has status `True`.
fn condition_true(conditions: &[Value], kind: &str) -> bool {
    conditions.iter().find(|c| str_at(c, &["type"]) == kind).is_some_and(|c| str_at(c, &["status"]) == "True")
}

/// When the container last terminated (`lastState.terminated.finishedAt`), if it did.
fn last_termination(status: &Value) -> Option<Option<Timestamp>> {
    present(status, &["lastState", "terminated"])
        .then(|| time_at(status, &["lastState", "terminated", "finishedAt"]))
}

pub(super) fn print(pod: &Value, now: Timestamp) -> Row {
    let spec_containers = array_at(pod, &["spec", "containers"]);
    let spec_init = array_at(pod, &["spec", "initContainers"]);
    let conditions = array_at(pod, &["status", "conditions"]);
    let mut restarts = 0i64;
    let mut restartable_restarts = 0i64;
    let mut total = i64::try_from(spec_containers.len()).unwrap_or(i64::MAX);
    let mut ready = 0i64;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_restartable_restart: Option<Timestamp> = None;

    let phase = str_at(pod, &["status", "phase"]);
    let mut reason = phase.to_owned();
    let status_reason = str_at(pod, &["status", "reason"]);
    if !status_reason.is_empty() {
        reason = status_reason.to_owned();
    }
    for condition in conditions {
        if str_at(condition, &["type"]) == "PodScheduled"
            && str_at(condition, &["reason"]) == "SchedulingGated"
        {
            reason = "SchedulingGated".to_owned();
        }
    }

    let mut row_conditions = Vec::new();
    match phase {
        "Succeeded" => row_conditions
            .push(json!({"type": "Completed", "status": "True", "reason": "Succeeded",
                                                  "message": "The pod has completed successfully."})),
        "Failed" => row_conditions.push(json!({"type": "Completed", "status": "True", "reason": "Failed",
                                               "message": "The pod failed."})),
        _ => {}
    }

    // By name; a later declaration wins, as a Go map assignment does.
    let mut init_containers: HashMap<&str, &Value> = HashMap::new();
    for container in spec_init {
        init_containers.insert(str_at(container, &["name"]), container);
        if restartable(Some(container)) {
            total += 1;
        }
    }

    let mut initializing = false;
    for (i, status) in array_at(pod, &["status", "initContainerStatuses"]).iter().enumerate() {
        let restart_count = int_at(status, &["restartCount"]);
        restarts += restart_count;
        if let Some(finished) = last_termination(status) {
            last_restart = later(last_restart, finished);
        }
        let is_restartable = restartable(init_containers.get(str_at(status, &["name"])).copied());
        if is_restartable {
            restartable_restarts += restart_count;
            if let Some(finished) = last_termination(status) {
                last_restartable_restart = later(last_restartable_restart, finished);
            }
        }
        let terminated = at(status, &["state", "terminated"]);
        let waiting_reason = str_at(status, &["state", "waiting", "reason"]);
        if terminated.is_some_and(|t| int_at(t, &["exitCode"]) == 0) {
            continue;
        }
        if is_restartable && opt_bool(status, &["started"]) == Some(true) {
            if bool_at(status, &["ready"]) {
                ready += 1;
            }
            continue;
        }
        if let Some(terminated) = terminated {
            let terminated_reason = str_at(terminated, &["reason"]);
            reason = if !terminated_reason.is_empty() {
                format!("Init:{terminated_reason}")
            } else if int_at(terminated, &["signal"]) != 0 {
                format!("Init:Signal:{}", int_at(terminated, &["signal"]))
            } else {
                format!("Init:ExitCode:{}", int_at(terminated, &["exitCode"]))
            };
        } else if present(status, &["state", "waiting"])
            && !waiting_reason.is_empty()
            && waiting_reason != "PodInitializing"
        {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{i}/{}", spec_init.len());
        }
        initializing = true;
        break;
    }

    if !initializing || condition_true(conditions, "Initialized") {
        restarts = restartable_restarts;
        last_restart = last_restartable_restart;
        let mut has_running = false;
        for status in array_at(pod, &["status", "containerStatuses"]).iter().rev() {
            restarts += int_at(status, &["restartCount"]);
            if let Some(finished) = last_termination(status) {
                last_restart = later(last_restart, finished);
            }
            let waiting_reason = str_at(status, &["state", "waiting", "reason"]);
            let terminated = at(status, &["state", "terminated"]);
            if present(status, &["state", "waiting"]) && !waiting_reason.is_empty() {
                reason = waiting_reason.to_owned();
            } else if let Some(terminated) = terminated {
                let terminated_reason = str_at(terminated, &["reason"]);
                reason = if !terminated_reason.is_empty() {
                    terminated_reason.to_owned()
                } else if int_at(terminated, &["signal"]) != 0 {
                    format!("Signal:{}", int_at(terminated, &["signal"]))
                } else {
                    format!("ExitCode:{}", int_at(terminated, &["exitCode"]))
                };
            } else if bool_at(status, &["ready"]) && present(status, &["state", "running"]) {
                has_running = true;
                ready += 1;
            }
        }
        // Back to Running if a container still runs after another completed.
        if reason == "Completed" && has_running {
            reason =
                if condition_true_anywhere(conditions, "Ready") { "Running" } else { "NotReady" }.to_owned();
        }
    }

    if deleting(pod) && status_reason == "NodeLost" {
        reason = "Unknown".to_owned();
    } else if deleting(pod) && !matches!(phase, "Failed" | "Succeeded") {
        reason = "Terminating".to_owned();
    }

    let restarts_cell = match last_restart {
        Some(when) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(when), now)),
        _ => restarts.to_string(),
    };

    let or_none = |s: &str| if s.is_empty() { "<none>".to_owned() } else { s.to_owned() };
    // The internal PodStatus the printer reads takes podIP over podIPs when both are set.
    let pod_ip = match str_at(pod, &["status", "podIP"]) {
        "" => array_at(pod, &["status", "podIPs"]).first().map_or("", |ip| str_at(ip, &["ip"])),
        ip => ip,
    };
    let gates = array_at(pod, &["spec", "readinessGates"]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let true_conditions = gates
            .iter()
            .filter(|gate| {
                let kind = str_at(gate, &["conditionType"]);
                conditions
                    .iter()
                    .find(|c| str_at(c, &["type"]) == kind)
                    .is_some_and(|c| str_at(c, &["status"]) == "True")
            })
            .count();
        format!("{true_conditions}/{}", gates.len())
    };

    Row {
        cells: vec![
            json!(name(pod)),
            json!(format!("{ready}/{total}")),
            json!(reason),
            json!(restarts_cell),
            json!(age(pod, now)),
            json!(or_none(pod_ip)),
            json!(or_none(str_at(pod, &["spec", "nodeName"]))),
            json!(or_none(str_at(pod, &["status", "nominatedNodeName"]))),
            json!(readiness_gates),
        ],
        conditions: row_conditions,
    }
}

/// Upstream's `hasPodReadyCondition`: any condition of `kind` with status `True`.
fn condition_true_anywhere(conditions: &[Value], kind: &str) -> bool {
    conditions.iter().any(|c| str_at(c, &["type"]) == kind && str_at(c, &["status"]) == "True")
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::test_support::{cells, headers};

    /// A pod created 10 minutes before the tests' `now`, with `containers` names, and `status`.
    fn pod(containers: &[&str], status: Value) -> Value {
        let containers: Vec<Value> = containers.iter().map(|c| json!({"name": c, "image": "img"})).collect();
        let mut pod = json!({
            "metadata": {"name": "p", "namespace": "default", "creationTimestamp": "2025-06-01T11:50:00Z"},
            "spec": {"containers": containers},
        });
        pod["status"] = status;
        pod
    }

    fn running(name: &str, ready: bool, restarts: i64) -> Value {
        json!({"name": name, "ready": ready, "restartCount": restarts,
               "state": {"running": {"startedAt": "2025-06-01T11:51:00Z"}}})
    }

    fn status_of(pod: &Value) -> (String, String, String) {
        let c = cells("", "pods", pod);
        let s = |i: usize| c[i].as_str().unwrap_or_default().to_owned();
        (s(1), s(2), s(3))
    }

    #[test]
    fn columns() {
        assert_eq!(
            headers("", "pods"),
            ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE", "READINESS GATES"]
        );
    }

    #[test]
    fn running_pod_every_cell() {
        let mut p = pod(
            &["app", "proxy"],
            json!({"phase": "Running", "podIP": "10.244.1.7", "podIPs": [{"ip": "10.244.1.7"}, {"ip": "fd00::7"}],
                   "nominatedNodeName": "",
                   "conditions": [{"type": "Ready", "status": "True"}, {"type": "example.com/gate", "status": "True"}],
                   "containerStatuses": [
                       running("app", true, 0),
                       {"name": "proxy", "ready": true, "restartCount": 5,
                        "state": {"running": {"startedAt": "2025-06-01T11:55:00Z"}},
                        "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                                     "finishedAt": "2025-06-01T11:54:40Z"}}}]}),
        );
        p["spec"]["nodeName"] = json!("worker-1");
        p["spec"]["readinessGates"] =
            json!([{"conditionType": "example.com/gate"}, {"conditionType": "other"}]);
        assert_eq!(
            cells("", "pods", &p),
            [
                json!("p"),
                json!("2/2"),
                json!("Running"),
                json!("5 (5m20s ago)"),
                json!("10m"),
                json!("10.244.1.7"),
                json!("worker-1"),
                json!("<none>"),
                json!("1/2")
            ]
        );
    }

    #[test]
    fn pending_pods() {
        assert_eq!(
            status_of(&pod(&["c"], json!({"phase": "Pending"}))),
            ("0/1".into(), "Pending".into(), "0".into())
        );
        let creating = pod(
            &["c"],
            json!({"phase": "Pending", "containerStatuses": [{"name": "c", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        );
        assert_eq!(status_of(&creating).1, "ContainerCreating");
        let image = pod(
            &["c"],
            json!({"phase": "Pending", "containerStatuses": [{"name": "c", "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}}]}),
        );
        assert_eq!(status_of(&image).1, "ImagePullBackOff");
        let gated = pod(
            &["c"],
            json!({"phase": "Pending",
                   "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
        );
        assert_eq!(status_of(&gated).1, "SchedulingGated");
        let evicted = pod(&["c"], json!({"phase": "Failed", "reason": "Evicted"}));
        assert_eq!(status_of(&evicted).1, "Evicted");
    }

    #[test]
    fn crash_loop_with_restart_age() {
        let p = pod(
            &["c"],
            json!({"phase": "Running", "containerStatuses": [{"name": "c", "ready": false, "restartCount": 7,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 2, "reason": "Error", "finishedAt": "2025-06-01T11:58:00Z"}}}]}),
        );
        assert_eq!(status_of(&p), ("0/1".into(), "CrashLoopBackOff".into(), "7 (2m ago)".into()));
        // Restarts without a recorded termination carry no age.
        let p = pod(&["c"], json!({"phase": "Running", "containerStatuses": [running("c", true, 3)]}));
        assert_eq!(status_of(&p).2, "3");
    }

    #[test]
    fn terminated_containers() {
        let completed = pod(
            &["c"],
            json!({"phase": "Succeeded", "containerStatuses": [{"name": "c", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}),
        );
        assert_eq!(status_of(&completed), ("0/1".into(), "Completed".into(), "0".into()));
        let oom = pod(
            &["c"],
            json!({"phase": "Running", "containerStatuses": [{"name": "c", "restartCount": 0,
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}),
        );
        assert_eq!(status_of(&oom).1, "OOMKilled");
        let signal = pod(
            &["c"],
            json!({"phase": "Failed", "containerStatuses": [{"name": "c", "restartCount": 0,
                "state": {"terminated": {"exitCode": 137, "signal": 9}}}]}),
        );
        assert_eq!(status_of(&signal).1, "Signal:9");
        let exit = pod(
            &["c"],
            json!({"phase": "Failed", "containerStatuses": [{"name": "c", "restartCount": 0,
                "state": {"terminated": {"exitCode": 3}}}]}),
        );
        assert_eq!(status_of(&exit).1, "ExitCode:3");
    }

    #[test]
    fn completed_with_a_container_still_running() {
        // Statuses are read last to first: "a" completed is what remains as the reason.
        let status = |conditions: Value| {
            json!({"phase": "Running", "conditions": conditions, "containerStatuses": [
                {"name": "a", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                running("b", true, 0)]})
        };
        let ready = pod(&["a", "b"], status(json!([{"type": "Ready", "status": "True"}])));
        assert_eq!(status_of(&ready), ("1/2".into(), "Running".into(), "0".into()));
        let not_ready = pod(&["a", "b"], status(json!([{"type": "Ready", "status": "False"}])));
        assert_eq!(status_of(&not_ready).1, "NotReady");
    }

    #[test]
    fn init_containers() {
        let mut p = pod(
            &["app"],
            json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "init-a", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "init-b", "ready": false, "restartCount": 0, "state": {"running": {}}}],
              "containerStatuses": [{"name": "app", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}]}),
        );
        p["spec"]["initContainers"] = json!([{"name": "init-a"}, {"name": "init-b"}]);
        assert_eq!(status_of(&p), ("0/1".into(), "Init:1/2".into(), "0".into()));

        p["status"]["initContainerStatuses"][1]["state"] = json!({"waiting": {"reason": "PodInitializing"}});
        assert_eq!(status_of(&p).1, "Init:1/2", "PodInitializing is not a reason");
        p["status"]["initContainerStatuses"][1]["state"] = json!({"waiting": {"reason": "ImagePullBackOff"}});
        assert_eq!(status_of(&p).1, "Init:ImagePullBackOff");
        p["status"]["initContainerStatuses"][1]["state"] =
            json!({"terminated": {"exitCode": 1, "reason": "Error"}});
        p["status"]["initContainerStatuses"][1]["restartCount"] = json!(4);
        assert_eq!(
            status_of(&p),
            ("0/1".into(), "Init:Error".into(), "4".into()),
            "init restarts count while initializing"
        );
        p["status"]["initContainerStatuses"][1]["state"] = json!({"terminated": {"exitCode": 1}});
        assert_eq!(status_of(&p).1, "Init:ExitCode:1");
        p["status"]["initContainerStatuses"][1]["state"] =
            json!({"terminated": {"exitCode": 1, "signal": 15}});
        assert_eq!(status_of(&p).1, "Init:Signal:15");
        p["status"]["initContainerStatuses"][1]["state"] = json!({"waiting": {"reason": "CrashLoopBackOff"}});
        assert_eq!(status_of(&p).1, "Init:CrashLoopBackOff");
        // Once Initialized, the app containers decide (and the init restarts no longer count).
        p["status"]["conditions"] = json!([{"type": "Initialized", "status": "True"}]);
        assert_eq!(status_of(&p), ("0/1".into(), "PodInitializing".into(), "0".into()));
    }

    #[test]
    fn sidecars() {
        let mut p = pod(
            &["app"],
            json!({"phase": "Running", "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
              "initContainerStatuses": [
                {"name": "istio-init", "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
                {"name": "proxy", "ready": true, "started": true, "restartCount": 2,
                 "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2025-06-01T11:57:00Z"}}}],
              "containerStatuses": [running("app", true, 1)]}),
        );
        p["spec"]["initContainers"] =
            json!([{"name": "istio-init"}, {"name": "proxy", "restartPolicy": "Always"}]);
        // The sidecar counts towards READY and RESTARTS, the plain init container does not.
        assert_eq!(status_of(&p), ("2/2".into(), "Running".into(), "3 (3m ago)".into()));
        // A sidecar not started yet keeps the pod initializing.
        p["status"]["initContainerStatuses"][1]["started"] = json!(false);
        p["status"]["conditions"] = json!([]);
        assert_eq!(status_of(&p), ("0/2".into(), "Init:1/2".into(), "2 (3m ago)".into()));
    }

    #[test]
    fn terminating_and_unknown() {
        let mut p = pod(&["c"], json!({"phase": "Running", "containerStatuses": [running("c", true, 0)]}));
        p["metadata"]["deletionTimestamp"] = json!("2025-06-01T11:59:00Z");
        assert_eq!(status_of(&p), ("1/1".into(), "Terminating".into(), "0".into()));
        p["status"]["reason"] = json!("NodeLost");
        assert_eq!(status_of(&p).1, "Unknown");
        let mut done = pod(
            &["c"],
            json!({"phase": "Succeeded", "containerStatuses": [{"name": "c", "restartCount": 0,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}),
        );
        done["metadata"]["deletionTimestamp"] = json!("2025-06-01T11:59:00Z");
        assert_eq!(status_of(&done).1, "Completed", "a terminal pod is not Terminating");
    }

    #[test]
    fn ip_fallbacks() {
        let p = pod(&["c"], json!({"podIPs": [{"ip": "fd00::1"}]}));
        assert_eq!(cells("", "pods", &p)[5], "fd00::1");
        let p = pod(&["c"], json!({"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.2"}]}));
        assert_eq!(cells("", "pods", &p)[5], "10.0.0.1", "podIP is authoritative");
    }
}
