//! pods/eviction as kube-apiserver's EvictionREST answers it — PodDisruptionBudgets consulted and
//! decremented, 429 with a DisruptionBudget cause when none is left — and `kubectl drain` on top.

use crate::common;

use anyhow::{Result, ensure};
use common::Server;
use keel_testbed::kubectl;
use serde_json::{Value, json};

const PODS: &str = "/api/v1/namespaces/default/pods";
const PDBS: &str = "/apis/policy/v1/namespaces/default/poddisruptionbudgets";
const JSON: [(&str, &str); 1] = [("Content-Type", "application/json")];
const MERGE: [(&str, &str); 1] = [("Content-Type", "application/merge-patch+json")];

async fn call(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> Result<(u16, Value)> {
    let bytes = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
    let (status, _, answer) = server.request(method, path, headers, &bytes).await?;
    Ok((status, serde_json::from_str(&answer).unwrap_or(Value::Null)))
}

/// A running, ready pod labelled `app`, on `node`.
async fn pod(server: &Server, name: &str, app: &str, node: &str) -> Result<()> {
    let pod = json!({"metadata": {"name": name, "labels": {"app": app}},
                     "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}});
    let (status, body) = call(server, "POST", PODS, &JSON, &pod).await?;
    ensure!(status == 201, "{status} {body}");
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    let (code, body) = call(server, "PATCH", &format!("{PODS}/{name}/status"), &MERGE, &status).await?;
    ensure!(code == 200, "{code} {body}");
    Ok(())
}

/// A budget over `app` whose controller has observed it and allows `allowed` disruptions.
async fn budget(server: &Server, name: &str, app: &str, allowed: i64) -> Result<()> {
    let pdb = json!({"metadata": {"name": name}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}}});
    let (status, body) = call(server, "POST", PDBS, &JSON, &pdb).await?;
    ensure!(status == 201, "{status} {body}");
    let status = json!({"status": {"observedGeneration": 1, "disruptionsAllowed": allowed,
                                    "currentHealthy": 3, "desiredHealthy": 1, "expectedPods": 3}});
    let (code, body) = call(server, "PATCH", &format!("{PDBS}/{name}/status"), &MERGE, &status).await?;
    ensure!(code == 200, "{code} {body}");
    Ok(())
}

fn eviction(name: &str) -> Value {
    json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "default"}})
}

async fn evict(server: &Server, name: &str) -> Result<(u16, Value)> {
    call(server, "POST", &format!("{PODS}/{name}/eviction"), &JSON, &eviction(name)).await
}

async fn exists(server: &Server, path: &str) -> Result<bool> {
    Ok(call(server, "GET", path, &[], &Value::Null).await?.0 == 200)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_follow_disruption_budgets() -> Result<()> {
    let server = Server::start().await?;
    // Discovery lists the subresource as upstream does.
    let (_, resources) = call(&server, "GET", "/api/v1", &[], &Value::Null).await?;
    let listed =
        resources["resources"].as_array().into_iter().flatten().find(|r| r["name"] == "pods/eviction");
    ensure!(
        listed.is_some_and(|r| r["group"] == "policy" && r["version"] == "v1" && r["kind"] == "Eviction"),
        "{listed:?}"
    );

    // Without a budget: deleted (grace period 0 from the eviction's deleteOptions).
    pod(&server, "free", "none", "n1").await?;
    let mut body = eviction("free");
    body["deleteOptions"] = json!({"gracePeriodSeconds": 0});
    let (status, answer) = call(&server, "POST", &format!("{PODS}/free/eviction"), &JSON, &body).await?;
    ensure!(status == 201 && answer["status"] == "Success", "{status} {answer}");
    ensure!(!exists(&server, &format!("{PODS}/free")).await?);

    // Bad requests.
    let (status, answer) =
        call(&server, "POST", &format!("{PODS}/x/eviction"), &JSON, &eviction("y")).await?;
    ensure!(
        status == 400 && answer["message"] == "name in URL does not match name in Eviction object",
        "{answer}"
    );
    let (status, answer) = evict(&server, "missing").await?;
    ensure!(status == 404 && answer["reason"] == "NotFound", "{answer}");

    // A budget with one disruption left: the first eviction takes it, the second is refused.
    pod(&server, "web-1", "web", "n1").await?;
    pod(&server, "web-2", "web", "n1").await?;
    budget(&server, "web", "web", 1).await?;
    let (status, answer) =
        call(&server, "POST", &format!("{PODS}/web-1/eviction?dryRun=All"), &JSON, &eviction("web-1"))
            .await?;
    ensure!(status == 201, "dry run: {status} {answer}");
    let (_, pdb) = call(&server, "GET", &format!("{PDBS}/web"), &[], &Value::Null).await?;
    ensure!(pdb["status"]["disruptionsAllowed"] == 1, "a dry run changed the budget: {pdb}");
    ensure!(exists(&server, &format!("{PODS}/web-1")).await?);

    let (status, answer) = evict(&server, "web-1").await?;
    ensure!(status == 201, "{status} {answer}");
    let (_, pdb) = call(&server, "GET", &format!("{PDBS}/web"), &[], &Value::Null).await?;
    ensure!(pdb["status"]["disruptionsAllowed"] == 0, "{pdb}");
    ensure!(pdb["status"]["disruptedPods"]["web-1"].is_string(), "{pdb}");
    let condition = pdb["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "DisruptionAllowed");
    ensure!(condition.is_some_and(|c| c["status"] == "False" && c["reason"] == "InsufficientPods"), "{pdb}");
    let (_, web1) = call(&server, "GET", &format!("{PODS}/web-1"), &[], &Value::Null).await?;
    ensure!(web1["metadata"]["deletionTimestamp"].is_string(), "a bound pod is deleted gracefully: {web1}");
    let target = web1["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "DisruptionTarget");
    ensure!(
        target.is_some_and(|c| c["status"] == "True" && c["reason"] == "EvictionByEvictionAPI"),
        "an evicted pod is marked as a disruption target: {web1}"
    );

    let (status, answer) = evict(&server, "web-2").await?;
    ensure!(status == 429 && answer["reason"] == "TooManyRequests", "{status} {answer}");
    ensure!(
        answer["message"] == "Cannot evict pod as it would violate the pod's disruption budget.",
        "{answer}"
    );
    ensure!(
        answer["details"]["causes"][0]
            == json!({"reason": "DisruptionBudget", "message": "The disruption budget web needs 1 healthy pods and has 3 currently"}),
        "{answer}"
    );
    ensure!(exists(&server, &format!("{PODS}/web-2")).await?);

    // An unready pod under an AlwaysAllow budget goes without using the budget up; a finished pod
    // goes whatever the budget says.
    let (code, _) = call(
        &server,
        "PATCH",
        &format!("{PDBS}/web"),
        &MERGE,
        &json!({"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}}),
    )
    .await?;
    ensure!(code == 200);
    // The spec change bumped the generation past what the controller observed: still processing.
    let (status, answer) = evict(&server, "web-2").await?;
    ensure!(
        status == 429
            && answer["details"]["causes"][0]["message"]
                == "The disruption budget web is still being processed by the server.",
        "{status} {answer}"
    );
    let unready = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
    ensure!(call(&server, "PATCH", &format!("{PODS}/web-2/status"), &MERGE, &unready).await?.0 == 200);
    let (status, answer) = evict(&server, "web-2").await?;
    ensure!(status == 201, "{status} {answer}");
    pod(&server, "web-3", "web", "n1").await?;
    let done = json!({"status": {"phase": "Succeeded"}});
    ensure!(call(&server, "PATCH", &format!("{PODS}/web-3/status"), &MERGE, &done).await?.0 == 200);
    ensure!(evict(&server, "web-3").await?.0 == 201);

    // Two budgets over one pod: upstream refuses with an internal error.
    pod(&server, "both", "both", "n1").await?;
    budget(&server, "both-a", "both", 5).await?;
    budget(&server, "both-b", "both", 5).await?;
    let (status, answer) = evict(&server, "both").await?;
    ensure!(
        status == 500
            && answer["message"].as_str().is_some_and(|m| m.contains("more than one PodDisruptionBudget")),
        "{answer}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drain_evicts_through_budgets() -> Result<()> {
    let server = Server::start().await?;
    let kubeconfig = server.dir.path().join("admin.kubeconfig");
    std::fs::write(&kubeconfig, server.pki.admin_kubeconfig(&format!("https://{}", server.address)))?;
    let node = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}});
    ensure!(call(&server, "POST", "/api/v1/nodes", &JSON, &node).await?.0 == 201);
    pod(&server, "a", "web", "n1").await?;
    pod(&server, "b", "web", "n1").await?;
    pod(&server, "elsewhere", "web", "n2").await?;
    budget(&server, "web", "web", 2).await?;
    let k = kubectl::minor(31)?;
    let output = k
        .command()
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["drain", "n1", "--force", "--grace-period=0", "--timeout=60s"])
        .output()?;
    let (out, err) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    ensure!(output.status.success(), "kubectl drain: {out} {err}");
    ensure!(
        out.contains("pod/a evicted") && out.contains("pod/b evicted") && out.contains("node/n1 drained"),
        "{out}"
    );
    let (_, node) = call(&server, "GET", "/api/v1/nodes/n1", &[], &Value::Null).await?;
    ensure!(node["spec"]["unschedulable"] == true, "drain cordons (a strategic merge patch): {node}");
    ensure!(!exists(&server, &format!("{PODS}/a")).await? && !exists(&server, &format!("{PODS}/b")).await?);
    ensure!(exists(&server, &format!("{PODS}/elsewhere")).await?);
    let (_, pdb) = call(&server, "GET", &format!("{PDBS}/web"), &[], &Value::Null).await?;
    ensure!(pdb["status"]["disruptionsAllowed"] == 0, "{pdb}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_a_terminating_pod_rides_out_status_writes() -> Result<()> {
    let server = std::sync::Arc::new(Server::start().await?);
    pod(&server, "t", "web", "n1").await?;
    budget(&server, "web", "web", 0).await?;
    // Terminating (a bound pod's graceful deletion), while its kubelet keeps writing its status.
    ensure!(call(&server, "DELETE", &format!("{PODS}/t"), &[], &Value::Null).await?.0 == 200);
    let writer = {
        let server = server.clone();
        tokio::spawn(async move {
            for i in 0..200 {
                let status = json!({"status": {"message": format!("stopping {i}")}});
                let _ = call(&server, "PATCH", &format!("{PODS}/t/status"), &MERGE, &status).await;
            }
        })
    };
    let mut answers = Vec::new();
    for _ in 0..50 {
        answers.push(evict(&server, "t").await?.0);
    }
    writer.await?;
    ensure!(
        answers.iter().all(|status| *status == 201),
        "a terminating pod is evicted whatever its budget: {answers:?}"
    );
    Ok(())
}
