//! Container probes and lifecycle hooks, the pure half (upstream's prober worker and the request
//! building of pkg/probe): what a probe or hook reaches (`Target`), and the worker's state machine
//! that turns single probe results into the result a container is known by — thresholds, initial
//! delay, the startup probe gating the others, the hold after a liveness failure. The IO that runs
//! a target is [`crate::prober`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ExecAction, GRPCAction, HTTPGetAction, Probe, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::pod_config;

/// The three probes, in upstream's words ("Liveness probe failed: ...").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Startup,
    Liveness,
    Readiness,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Startup, Kind::Liveness, Kind::Readiness];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
        }
    }

    pub fn of(self, container: &Container) -> Option<&Probe> {
        match self {
            Kind::Startup => container.startup_probe.as_ref(),
            Kind::Liveness => container.liveness_probe.as_ref(),
            Kind::Readiness => container.readiness_probe.as_ref(),
        }
    }

    /// What a container is known by before its first probe (upstream's initialValue): not ready,
    /// alive, not yet started (unknown).
    fn initial(self) -> Option<Outcome> {
        match self {
            Kind::Readiness => Some(Outcome::Failure),
            Kind::Liveness => Some(Outcome::Success),
            Kind::Startup => None,
        }
    }
}

/// A container's result for one probe (upstream's results.Result; Unknown is no entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
}

/// The results of one container (by container ID), as its workers set them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Results {
    pub startup: Option<Outcome>,
    pub liveness: Option<Outcome>,
    pub readiness: Option<Outcome>,
}

impl Results {
    pub fn get(&self, kind: Kind) -> Option<Outcome> {
        match kind {
            Kind::Startup => self.startup,
            Kind::Liveness => self.liveness,
            Kind::Readiness => self.readiness,
        }
    }

    pub fn set(&mut self, kind: Kind, outcome: Option<Outcome>) {
        match kind {
            Kind::Startup => self.startup = outcome,
            Kind::Liveness => self.liveness = outcome,
            Kind::Readiness => self.readiness = outcome,
        }
    }

    /// upstream's status manager: started once the startup probe succeeded (at once without one).
    pub fn started(&self, container: &Container) -> bool {
        container.startup_probe.is_none() || self.startup == Some(Outcome::Success)
    }

    /// Ready once started and the readiness probe succeeded (at once without one).
    pub fn ready(&self, container: &Container) -> bool {
        self.started(container)
            && (container.readiness_probe.is_none() || self.readiness == Some(Outcome::Success))
    }

    /// The probe whose failure means the running container is killed (upstream's computePodActions
    /// asks liveness, then startup).
    pub fn failed(&self) -> Option<Kind> {
        if self.liveness == Some(Outcome::Failure) {
            Some(Kind::Liveness)
        } else if self.startup == Some(Outcome::Failure) {
            Some(Kind::Startup)
        } else {
            None
        }
    }
}

/// Results by container ID (the bare ID, without `<runtime>://`).
pub type ResultsByContainer = BTreeMap<String, Results>;

/// What one run of a probe said (upstream's probe.Result with its output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probed {
    Success,
    /// A success worth an event (a redirect off the pod's host).
    Warning(String),
    Failure(String),
    /// The probe could not be run (a port that does not resolve, the runtime not answering).
    Error(String),
}

/// What a probe or a hook reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Exec { command: Vec<String> },
    Http { scheme: String, host: String, port: u16, path: String, headers: Vec<(String, String)> },
    Tcp { host: String, port: u16 },
    Grpc { host: String, port: u16, service: String },
    Sleep { seconds: i64 },
}

/// upstream's probe.ResolveContainerPort: a number, or the name of one of the container's ports
/// (or a number written as a string).
pub fn probe_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    let number = match port {
        IntOrString::Int(number) => i64::from(*number),
        IntOrString::String(name) => match named_port(container, name) {
            Some(number) => number,
            None => name.parse::<i64>().map_err(|_| format!("port {name} not found"))?,
        },
    };
    u16::try_from(number).ok().filter(|p| *p > 0).ok_or_else(|| format!("invalid port number: {number}"))
}

/// upstream's lifecycle resolvePort: a number first, then a named port.
fn hook_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    let number = match port {
        IntOrString::Int(number) => i64::from(*number),
        IntOrString::String(name) => match name.parse::<i64>() {
            Ok(number) => number,
            Err(_) => named_port(container, name)
                .ok_or_else(|| format!("couldn't find port: {name} in container {}", container.name))?,
        },
    };
    u16::try_from(number).ok().filter(|p| *p > 0).ok_or_else(|| format!("invalid port number: {number}"))
}

fn named_port(container: &Container, name: &str) -> Option<i64> {
    container
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some(name))
        .map(|p| i64::from(p.container_port))
}

/// The handlers a probe and a lifecycle hook share.
#[derive(Debug, Clone, Copy, Default)]
pub struct Handler<'a> {
    pub exec: Option<&'a ExecAction>,
    pub http_get: Option<&'a HTTPGetAction>,
    pub tcp_socket: Option<&'a TCPSocketAction>,
    pub grpc: Option<&'a GRPCAction>,
    pub sleep: Option<i64>,
}

impl<'a> Handler<'a> {
    pub fn of_probe(probe: &'a Probe) -> Handler<'a> {
        Handler {
            exec: probe.exec.as_ref(),
            http_get: probe.http_get.as_ref(),
            tcp_socket: probe.tcp_socket.as_ref(),
            grpc: probe.grpc.as_ref(),
            sleep: None,
        }
    }

    pub fn of_hook(hook: &'a k8s_openapi::api::core::v1::LifecycleHandler) -> Handler<'a> {
        Handler {
            exec: hook.exec.as_ref(),
            http_get: hook.http_get.as_ref(),
            tcp_socket: hook.tcp_socket.as_ref(),
            grpc: None,
            sleep: hook.sleep.as_ref().map(|s| s.seconds),
        }
    }
}

/// What `handler` reaches for `container` of a pod at `pod_ip`. A probe's exec command has the
/// container's literal env values expanded (upstream's ExpandContainerCommandOnlyStatic); a hook's
/// command runs as written.
pub fn target(
    handler: Handler<'_>,
    container: &Container,
    pod_ip: &str,
    probe: bool,
) -> Result<Target, String> {
    if let Some(exec) = handler.exec {
        let command = exec.command.clone().unwrap_or_default();
        if !probe {
            return Ok(Target::Exec { command });
        }
        let vars: BTreeMap<String, String> = container
            .env
            .iter()
            .flatten()
            .filter(|e| e.value_from.is_none())
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect();
        return Ok(Target::Exec { command: command.iter().map(|c| pod_config::expand(c, &vars)).collect() });
    }
    let resolve =
        |port: &IntOrString| if probe { probe_port(port, container) } else { hook_port(port, container) };
    let host_or_pod =
        |host: Option<&String>| host.filter(|h| !h.is_empty()).cloned().unwrap_or_else(|| pod_ip.to_owned());
    if let Some(http) = handler.http_get {
        let path = http.path.clone().unwrap_or_default();
        return Ok(Target::Http {
            scheme: http.scheme.as_deref().unwrap_or("HTTP").to_ascii_lowercase(),
            host: host_or_pod(http.host.as_ref()),
            port: resolve(&http.port)?,
            path: if path.starts_with('/') { path } else { format!("/{path}") },
            headers: http.http_headers.iter().flatten().map(|h| (h.name.clone(), h.value.clone())).collect(),
        });
    }
    if let Some(tcp) = handler.tcp_socket {
        return Ok(Target::Tcp { host: host_or_pod(tcp.host.as_ref()), port: resolve(&tcp.port)? });
    }
    if let Some(grpc) = handler.grpc {
        let port = u16::try_from(grpc.port).ok().filter(|p| *p > 0);
        return Ok(Target::Grpc {
            host: pod_ip.to_owned(),
            port: port.ok_or_else(|| format!("invalid port number: {}", grpc.port))?,
            service: grpc.service.clone().unwrap_or_default(),
        });
    }
    if let Some(seconds) = handler.sleep {
        return Ok(Target::Sleep { seconds });
    }
    Err("missing probe handler".into())
}

/// A probe's timing with upstream's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub initial_delay_seconds: i64,
    pub period_seconds: u64,
    pub timeout_seconds: u64,
    pub success_threshold: u32,
    pub failure_threshold: u32,
}

impl Timing {
    pub fn of(probe: &Probe) -> Timing {
        let positive = |value: Option<i32>, default: u32| {
            value.and_then(|v| u32::try_from(v).ok()).filter(|v| *v > 0).unwrap_or(default)
        };
        Timing {
            initial_delay_seconds: i64::from(probe.initial_delay_seconds.unwrap_or(0)),
            period_seconds: u64::from(positive(probe.period_seconds, 10)),
            timeout_seconds: u64::from(positive(probe.timeout_seconds, 1)),
            success_threshold: positive(probe.success_threshold, 1),
            failure_threshold: positive(probe.failure_threshold, 3),
        }
    }
}

/// What a worker sees of its container on a tick (from the status the kubelet last computed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// The pod ended (Succeeded or Failed): the worker stops.
    pub finished: bool,
    /// The container's ID (bare), empty when it has none yet.
    pub container_id: String,
    /// Running, and for how many seconds.
    pub running_for: Option<i64>,
    /// The startup probe has succeeded (status.started).
    pub started: bool,
    /// The pod is being deleted.
    pub deleting: bool,
    /// The pod does not restart containers that exited (restartPolicy Never).
    pub never_restarts: bool,
    /// The container terminated.
    pub terminated: bool,
}

/// What the worker does on a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing to probe now.
    Wait,
    /// Probe the container now.
    Probe,
    /// The worker is done.
    Stop,
}

/// One tick of a worker: the results to record first (the initial one of a new container,
/// Failure for one not running, Success for a deleted pod's liveness), the container whose
/// results go (a replaced one), then what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    pub set: Option<(String, Option<Outcome>)>,
    pub forget: Option<String>,
    pub action: Action,
}

impl Tick {
    fn wait() -> Tick {
        Tick { set: None, forget: None, action: Action::Wait }
    }
}

/// One probe worker's state (upstream's worker): the container it follows, the run of equal
/// results, and whether it is on hold until the container is replaced.
#[derive(Debug, Clone)]
pub struct Worker {
    pub kind: Kind,
    pub timing: Timing,
    container_id: String,
    last: Option<Outcome>,
    run: u32,
    on_hold: bool,
}

impl Worker {
    pub fn new(kind: Kind, timing: Timing) -> Worker {
        Worker { kind, timing, container_id: String::new(), last: None, run: 0, on_hold: false }
    }

    /// upstream's doProbe, up to running the probe.
    pub fn step(&mut self, view: &View) -> Tick {
        let mut tick = Tick::wait();
        if view.finished {
            tick.action = Action::Stop;
            return tick;
        }
        if view.container_id.is_empty() {
            return tick;
        }
        if self.container_id != view.container_id {
            if !self.container_id.is_empty() {
                tick.forget = Some(std::mem::take(&mut self.container_id));
            }
            self.container_id = view.container_id.clone();
            tick.set = Some((self.container_id.clone(), self.kind.initial()));
            self.on_hold = false;
            self.last = None;
            self.run = 0;
        }
        if self.on_hold {
            return tick;
        }
        let Some(running_for) = view.running_for else {
            tick.set = Some((self.container_id.clone(), Some(Outcome::Failure)));
            if view.terminated && view.never_restarts {
                tick.action = Action::Stop;
            }
            return tick;
        };
        if view.deleting && matches!(self.kind, Kind::Liveness | Kind::Startup) {
            tick.set = Some((self.container_id.clone(), Some(Outcome::Success)));
            tick.action = Action::Stop;
            return tick;
        }
        // The startup probe runs until the container has started; the others only after.
        if running_for >= self.timing.initial_delay_seconds && view.started == (self.kind != Kind::Startup) {
            tick.action = Action::Probe;
        }
        tick
    }

    /// Counts a probe's outcome; the result to record once its threshold is reached.
    pub fn record(&mut self, outcome: Outcome) -> Option<(String, Outcome)> {
        if self.last == Some(outcome) {
            self.run += 1;
        } else {
            self.last = Some(outcome);
            self.run = 1;
        }
        let threshold = match outcome {
            Outcome::Failure => self.timing.failure_threshold,
            Outcome::Success => self.timing.success_threshold,
        };
        if self.run < threshold {
            return None;
        }
        if (self.kind == Kind::Liveness && outcome == Outcome::Failure) || self.kind == Kind::Startup {
            self.on_hold = true;
            self.run = 0;
        }
        Some((self.container_id.clone(), outcome))
    }

    /// The container it follows, to forget when the worker ends.
    pub fn container_id(&self) -> &str {
        &self.container_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;

    fn running(id: &str, seconds: i64, started: bool) -> View {
        View { container_id: id.into(), running_for: Some(seconds), started, ..View::default() }
    }

    fn timing(success: u32, failure: u32, delay: i64) -> Timing {
        Timing {
            initial_delay_seconds: delay,
            period_seconds: 1,
            timeout_seconds: 1,
            success_threshold: success,
            failure_threshold: failure,
        }
    }

    fn tick(set: Option<(&str, Option<Outcome>)>, forget: Option<&str>, action: Action) -> Tick {
        Tick { set: set.map(|(id, o)| (id.to_owned(), o)), forget: forget.map(str::to_owned), action }
    }

    #[test]
    fn a_new_container_starts_from_the_initial_result_and_waits_its_delay() {
        let mut readiness = Worker::new(Kind::Readiness, timing(1, 3, 5));
        assert_eq!(
            readiness.step(&running("a", 0, true)),
            tick(Some(("a", Some(Outcome::Failure))), None, Action::Wait)
        );
        assert_eq!(readiness.step(&running("a", 4, true)), Tick::wait());
        assert_eq!(readiness.step(&running("a", 5, true)), tick(None, None, Action::Probe));
        // Without a delay, a new container is probed on the tick that finds it.
        let mut liveness = Worker::new(Kind::Liveness, timing(1, 3, 0));
        assert_eq!(
            liveness.step(&running("a", 0, true)),
            tick(Some(("a", Some(Outcome::Success))), None, Action::Probe)
        );
        // A replaced container: the old one's result is forgotten, the new one starts over.
        assert_eq!(
            liveness.step(&running("b", 0, true)),
            tick(Some(("b", Some(Outcome::Success))), Some("a"), Action::Probe)
        );
    }

    #[test]
    fn thresholds_count_runs_of_equal_results() {
        let mut readiness = Worker::new(Kind::Readiness, timing(2, 3, 0));
        readiness.step(&running("a", 0, true));
        assert_eq!(readiness.record(Outcome::Success), None);
        assert_eq!(readiness.record(Outcome::Success), Some(("a".into(), Outcome::Success)));
        assert_eq!(readiness.record(Outcome::Failure), None);
        assert_eq!(readiness.record(Outcome::Failure), None);
        assert_eq!(readiness.record(Outcome::Success), None);
        assert_eq!(readiness.record(Outcome::Failure), None);
        assert_eq!(readiness.record(Outcome::Failure), None);
        assert_eq!(readiness.record(Outcome::Failure), Some(("a".into(), Outcome::Failure)));
        // Readiness keeps probing after a failure.
        assert_eq!(readiness.step(&running("a", 9, true)).action, Action::Probe);
    }

    #[test]
    fn a_liveness_failure_holds_until_the_container_is_replaced() {
        let mut liveness = Worker::new(Kind::Liveness, timing(1, 1, 0));
        liveness.step(&running("a", 0, true));
        assert_eq!(liveness.record(Outcome::Failure), Some(("a".into(), Outcome::Failure)));
        assert_eq!(liveness.step(&running("a", 3, true)), Tick::wait());
        assert_eq!(liveness.step(&running("b", 0, true)).action, Action::Probe);
    }

    #[test]
    fn the_startup_probe_gates_the_others_and_stops_once_it_succeeded() {
        let mut startup = Worker::new(Kind::Startup, timing(1, 3, 0));
        let mut liveness = Worker::new(Kind::Liveness, timing(1, 3, 0));
        assert_eq!(startup.step(&running("a", 0, false)).action, Action::Probe);
        assert_eq!(liveness.step(&running("a", 0, false)).action, Action::Wait);
        assert_eq!(startup.record(Outcome::Success), Some(("a".into(), Outcome::Success)));
        assert_eq!(startup.step(&running("a", 2, true)), Tick::wait());
        assert_eq!(liveness.step(&running("a", 2, true)).action, Action::Probe);
    }

    #[test]
    fn stopped_and_deleted_containers() {
        let mut readiness = Worker::new(Kind::Readiness, timing(1, 3, 0));
        readiness.step(&running("a", 0, true));
        let exited = View { container_id: "a".into(), terminated: true, ..View::default() };
        assert_eq!(readiness.step(&exited), tick(Some(("a", Some(Outcome::Failure))), None, Action::Wait));
        let done = View { never_restarts: true, ..exited };
        assert_eq!(readiness.step(&done).action, Action::Stop);
        let mut liveness = Worker::new(Kind::Liveness, timing(1, 3, 0));
        liveness.step(&running("a", 0, true));
        let deleting = View { deleting: true, ..running("a", 5, true) };
        assert_eq!(liveness.step(&deleting), tick(Some(("a", Some(Outcome::Success))), None, Action::Stop));
        assert_eq!(readiness.step(&View { finished: true, ..View::default() }).action, Action::Stop);
    }

    #[test]
    fn targets_resolve_ports_hosts_and_commands() {
        let container: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "ports": [{"name": "http", "containerPort": 8080}],
            "env": [{"name": "FILE", "value": "/tmp/ok"}, {"name": "FROM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
        }))
        .unwrap();
        let probe: Probe = serde_json::from_value(serde_json::json!({
            "httpGet": {"port": "http", "path": "healthz", "httpHeaders": [{"name": "X", "value": "1"}]}
        }))
        .unwrap();
        assert_eq!(
            target(Handler::of_probe(&probe), &container, "10.0.0.5", true),
            Ok(Target::Http {
                scheme: "http".into(),
                host: "10.0.0.5".into(),
                port: 8080,
                path: "/healthz".into(),
                headers: vec![("X".into(), "1".into())]
            })
        );
        let exec: Probe =
            serde_json::from_value(serde_json::json!({"exec": {"command": ["cat", "$(FILE)", "$(FROM)"]}}))
                .unwrap();
        assert_eq!(
            target(Handler::of_probe(&exec), &container, "", true),
            Ok(Target::Exec { command: vec!["cat".into(), "/tmp/ok".into(), "$(FROM)".into()] })
        );
        assert_eq!(probe_port(&IntOrString::String("9090".into()), &container), Ok(9090));
        assert_eq!(
            probe_port(&IntOrString::String("grpc".into()), &container),
            Err("port grpc not found".into())
        );
        assert_eq!(probe_port(&IntOrString::Int(0), &container), Err("invalid port number: 0".into()));
        let mut with_port = container.clone();
        with_port.ports =
            Some(vec![ContainerPort { name: Some("80".into()), container_port: 81, ..Default::default() }]);
        // A hook reads a number first, a probe a port name first.
        assert_eq!(hook_port(&IntOrString::String("80".into()), &with_port), Ok(80));
        assert_eq!(probe_port(&IntOrString::String("80".into()), &with_port), Ok(81));
        assert_eq!(
            Timing::of(&Probe::default()),
            Timing {
                initial_delay_seconds: 0,
                period_seconds: 10,
                timeout_seconds: 1,
                success_threshold: 1,
                failure_threshold: 3
            }
        );
    }

    #[test]
    fn readiness_and_start_from_results() {
        let plain = Container::default();
        assert!(Results::default().ready(&plain));
        let probed: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "startupProbe": {"exec": {"command": ["true"]}},
            "readinessProbe": {"exec": {"command": ["true"]}}
        }))
        .unwrap();
        let mut results = Results::default();
        assert!(!results.started(&probed) && !results.ready(&probed));
        results.set(Kind::Startup, Some(Outcome::Success));
        assert!(results.started(&probed) && !results.ready(&probed));
        results.set(Kind::Readiness, Some(Outcome::Success));
        assert!(results.ready(&probed));
        results.set(Kind::Liveness, Some(Outcome::Failure));
        assert_eq!(results.failed(), Some(Kind::Liveness));
    }
}
