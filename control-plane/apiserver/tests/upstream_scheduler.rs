//! kube-scheduler 1.34 (the upstream peer) against the keel-apiserver binary: its informers list
//! and watch everything it needs (pods, nodes, volumes and claims, storage classes, CSI drivers,
//! nodes and capacities, volume attachments, replication controllers, replica and stateful sets,
//! services, namespaces, DRA device classes, claims and slices), so its caches sync and it
//! schedules: a pod that fits is bound to the node through pods/binding (nodeName, PodScheduled
//! True) with a `Scheduled` event, a pod whose nodeSelector matches no node is left unscheduled
//! with `PodScheduled=False, reason Unschedulable`. The scheduler's log must show no failed watch
//! or list of a resource the server does not serve.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use keel_testbed::kubectl::{self, Kubectl};
use keel_testbed::process::{Daemon, Readiness};
use serde_json::Value;

/// How long the scheduler may take to act (its informers sync first; CI machines are loaded).
const WAIT: Duration = Duration::from_secs(120);

struct Kube {
    kubectl: Kubectl,
    kubeconfig: PathBuf,
}

impl Kube {
    fn run(&self, args: &[&str], stdin: Option<&str>) -> Result<String> {
        let mut command = self.kubectl.command();
        command.arg("--kubeconfig").arg(&self.kubeconfig).args(args);
        command.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
        command.stderr(std::process::Stdio::piped());
        let mut child = command.spawn().with_context(|| format!("running kubectl {args:?}"))?;
        if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
            use std::io::Write as _;
            input.write_all(text.as_bytes())?;
        }
        let output = child.wait_with_output()?;
        ensure!(
            output.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    fn json(&self, args: &[&str]) -> Result<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        Ok(serde_json::from_str(&self.run(&all, None)?)?)
    }
}

/// Polls `check` until it answers `Some`, for at most [`WAIT`]; the error says what was awaited
/// and what was last seen.
fn wait_for<T>(what: &str, mut check: impl FnMut() -> Result<(Option<T>, String)>) -> Result<T> {
    let deadline = Instant::now() + WAIT;
    loop {
        let (found, seen) = check()?;
        if let Some(found) = found {
            return Ok(found);
        }
        if Instant::now() >= deadline {
            bail!("{what}: not after {WAIT:?}; last seen: {seen}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// keel-apiserver from this build, on a free loopback port, and its admin kubeconfig.
fn start_apiserver(data: &Path) -> Result<(Daemon, PathBuf)> {
    let binary = common::keel_binary(data, &[])?;
    Ok((binary.daemon, binary.kubeconfig))
}

const NODE: &str = r#"{"apiVersion": "v1", "kind": "Node",
  "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "node-1", "kubernetes.io/os": "linux"}}}"#;

/// What a kubelet reports: room for pods, and Ready.
const NODE_STATUS: &str = r#"{"status": {
  "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
  "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
  "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                  "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}"#;

const PODS: &str = r#"{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fits"},
   "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}}}]}},
  {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "nowhere"},
   "spec": {"nodeSelector": {"disk": "none-has-it"}, "containers": [{"name": "c", "image": "busybox"}]}}]}"#;

fn condition<'a>(pod: &'a Value, kind: &str) -> Option<&'a Value> {
    pod.pointer("/status/conditions")?.as_array()?.iter().find(|c| c["type"] == kind)
}

#[test]
fn kube_scheduler_syncs_and_schedules_against_keel_apiserver() -> Result<()> {
    let scheduler_binary = keel_testbed::peers::path("kube-scheduler")?;
    let dir = tempfile::tempdir()?;
    let (_server, admin) = start_apiserver(&dir.path().join("data"))?;
    let kube = Kube { kubectl: kubectl::minor(33)?, kubeconfig: admin.clone() };

    let mut command = Command::new(&scheduler_binary);
    // -v=2: the reflectors log each cache they populate.
    command.arg("--kubeconfig").arg(&admin).args(["--leader-elect=false", "--secure-port=0", "-v=2"]);
    let scheduler = Daemon::start("kube-scheduler", command, Readiness::None, Duration::from_secs(10))?;

    kube.run(&["create", "-f", "-"], Some(NODE))?;
    kube.run(&["patch", "node", "node-1", "--subresource=status", "--type=merge", "-p", NODE_STATUS], None)?;
    // The Node was created tainted not-ready (TaintNodesByCondition); the node lifecycle
    // controller would take the taint off once it is Ready. There is none here: the test does.
    kube.run(&["taint", "node", "node-1", "node.kubernetes.io/not-ready:NoSchedule-"], None)?;
    kube.run(&["create", "-f", "-"], Some(PODS))?;

    // The pod that fits is bound to the node by the scheduler, through pods/binding.
    let bound = wait_for("pod fits bound to node-1", || {
        let pod = kube.json(&["get", "pod", "fits"])?;
        let node = pod.pointer("/spec/nodeName").and_then(Value::as_str).map(str::to_owned);
        Ok((node.filter(|n| !n.is_empty()).map(|_| pod.clone()), pod.to_string()))
    })?;
    ensure!(bound["spec"]["nodeName"] == "node-1", "{bound}");
    let scheduled = condition(&bound, "PodScheduled").context("no PodScheduled condition")?;
    ensure!(scheduled["status"] == "True", "the binding marks the pod scheduled: {bound}");

    // ...and says so in an events.k8s.io/v1 Event (what the scheduler's recorder writes).
    let event = wait_for("a Scheduled event for pod fits", || {
        let events = kube.json(&[
            "get",
            "events.v1.events.k8s.io",
            "--field-selector",
            "regarding.name=fits,reason=Scheduled",
        ])?;
        let first = events["items"].as_array().and_then(|items| items.first()).cloned();
        Ok((first, events.to_string()))
    })?;
    ensure!(
        event["reportingController"] == "default-scheduler"
            && event["regarding"]["kind"] == "Pod"
            && event["note"]
                .as_str()
                .is_some_and(|n| n.contains("Successfully assigned default/fits to node-1")),
        "{event}"
    );
    // The same Event through the core API, as kubectl describe reads it.
    let core =
        kube.json(&["get", "events", "--field-selector", "involvedObject.name=fits,reason=Scheduled"])?;
    ensure!(core["items"].as_array().is_some_and(|items| items.len() == 1), "{core}");

    // The pod no node matches stays unscheduled, and the scheduler says why.
    let refused = wait_for("pod nowhere Unschedulable", || {
        let pod = kube.json(&["get", "pod", "nowhere"])?;
        let unschedulable = condition(&pod, "PodScheduled")
            .is_some_and(|c| c["status"] == "False" && c["reason"] == "Unschedulable");
        Ok((unschedulable.then(|| pod.clone()), pod.to_string()))
    })?;
    ensure!(refused.pointer("/spec/nodeName").is_none(), "{refused}");
    let message = condition(&refused, "PodScheduled").and_then(|c| c["message"].as_str()).unwrap_or_default();
    ensure!(message.contains("didn't match Pod's node affinity/selector"), "{refused}");

    // Every informer listed and watched what it asked for.
    let log = scheduler.log();
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Failed to watch") || l.contains("could not find the requested resource"))
        .collect();
    ensure!(failures.is_empty(), "the scheduler failed to list or watch:\n{}", failures.join("\n"));
    for kind in [
        "ReplicationController",
        "CSINode",
        "CSIDriver",
        "CSIStorageCapacity",
        "VolumeAttachment",
        "DeviceClass",
        "ResourceClaim",
        "ResourceSlice",
        "Pod",
        "Node",
    ] {
        let populated = format!("\"Caches populated\" type=\"*v1.{kind}\"");
        ensure!(log.contains(&populated), "no cache of {kind} populated:\n{}", scheduler.log_tail(80));
    }
    ensure!(scheduler.is_running(), "kube-scheduler exited:\n{}", scheduler.log_tail(50));
    Ok(())
}
