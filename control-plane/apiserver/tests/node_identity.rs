//! A kubelet's identity on a real server: the Node authorizer's graph and the NodeRestriction
//! admission plugin, for `system:node:n1` (reached by impersonation from the admin, so the chain
//! authorizes and admits it as it would a kubelet's own certificate).

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use serde_json::{Value, json};

use crate::common::Server;

const AS_N1: &[(&str, &str)] =
    &[("impersonate-user", "system:node:n1"), ("impersonate-group", "system:nodes")];

async fn as_n1(server: &Server, method: &str, path: &str, body: &Value) -> Result<(u16, Value)> {
    let mut headers = AS_N1.to_vec();
    let content_type = if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
    headers.push(("content-type", content_type));
    let bytes = if body.is_null() { Vec::new() } else { serde_json::to_vec(body)? };
    let (status, _, text) = server.request(method, path, &headers, &bytes).await?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
}

async fn as_admin(server: &Server, method: &str, path: &str, body: &Value) -> Result<u16> {
    let bytes = if body.is_null() { Vec::new() } else { serde_json::to_vec(body)? };
    let (status, _, _) =
        server.request(method, path, &[("content-type", "application/json")], &bytes).await?;
    Ok(status)
}

async fn uid(server: &Server, pod: &str) -> Result<String> {
    let (_, _, text) =
        server.request("GET", &format!("/api/v1/namespaces/default/pods/{pod}"), &[], b"").await?;
    let pod: Value = serde_json::from_str(&text)?;
    Ok(pod["metadata"]["uid"].as_str().unwrap_or_default().to_owned())
}

fn pod(name: &str, node: &str, secret: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"nodeName": node,
        "containers": [{"name": "c", "image": "busybox"}],
        "volumes": [{"name": "s", "secret": {"secretName": secret}}]}})
}

#[tokio::test]
async fn a_node_reads_and_writes_only_its_own() -> Result<()> {
    let server = Server::start().await?;
    ensure!(
        as_admin(&server, "POST", "/api/v1/namespaces/default/pods", &pod("web", "n1", "creds")).await?
            == 201
    );
    ensure!(
        as_admin(&server, "POST", "/api/v1/namespaces/default/pods", &pod("other", "n2", "theirs")).await?
            == 201
    );

    // The graph follows the pods: the secret web uses becomes readable (404: it does not exist).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, _) =
            as_n1(&server, "GET", "/api/v1/namespaces/default/secrets/creds", &Value::Null).await?;
        if status == 404 {
            break;
        }
        ensure!(status == 403 && Instant::now() < deadline, "secret creds: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, refusal) =
        as_n1(&server, "GET", "/api/v1/namespaces/default/secrets/theirs", &Value::Null).await?;
    ensure!(status == 403, "{status} {refusal}");
    ensure!(
        refusal["message"]
            == "secrets \"theirs\" is forbidden: User \"system:node:n1\" cannot get resource \"secrets\" in API group \"\" in the namespace \"default\": no relationship found between node 'n1' and this object",
        "{refusal}"
    );

    // Its own Node only, and no taints of its own choosing.
    let node = |name: &str| json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}});
    let (status, created) = as_n1(&server, "POST", "/api/v1/nodes", &node("n1")).await?;
    ensure!(status == 201, "{status} {created}");
    // TaintNodesByCondition: a new Node is not-ready until the node lifecycle controller says so.
    ensure!(
        created["spec"]["taints"] == json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]),
        "{created}"
    );
    let (status, refusal) = as_n1(&server, "POST", "/api/v1/nodes", &node("n2")).await?;
    ensure!(status == 403, "{status} {refusal}");
    ensure!(
        refusal["message"] == "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\"",
        "{refusal}"
    );
    ensure!(as_admin(&server, "GET", "/api/v1/nodes/n2", &Value::Null).await? == 404, "n2 was stored");
    let taint = json!({"spec": {"taints": [{"key": "mine", "effect": "NoSchedule"}]}});
    let (status, refusal) = as_n1(&server, "PATCH", "/api/v1/nodes/n1", &taint).await?;
    ensure!(
        status == 403
            && refusal["message"].as_str().is_some_and(|m| m.ends_with("is not allowed to modify taints")),
        "{status} {refusal}"
    );
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    ensure!(as_n1(&server, "PATCH", "/api/v1/nodes/n1/status", &ready).await?.0 == 200);

    // Tokens: only bound to its own pod, for an audience that pod uses.
    let (web, other) = (uid(&server, "web").await?, uid(&server, "other").await?);
    let token = |pod: &str, uid: &str, audiences: Value| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": audiences,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}}})
    };
    let path = "/api/v1/namespaces/default/serviceaccounts/default/token";
    let (status, answer) = as_n1(&server, "POST", path, &token("web", &web, json!([]))).await?;
    ensure!(status == 201 && answer["status"]["token"].is_string(), "{status} {answer}");
    for (request, message) in [
        (
            token("other", &other, json!([])),
            "node requested token bound to a pod scheduled on a different node",
        ),
        (
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
            "node requested token not bound to a pod",
        ),
        (
            token("web", &web, json!(["vault"])),
            "audience \"vault\" not found in pod spec volume, system:node:n1 is not authorized to request tokens for this audience",
        ),
    ] {
        let (status, refusal) = as_n1(&server, "POST", path, &request).await?;
        ensure!(status == 403, "{status} {refusal}");
        ensure!(
            refusal["message"] == format!("serviceaccounts \"default\" is forbidden: {message}"),
            "{refusal}"
        );
    }

    // Pods: no ordinary pod of its own making; deletes of its own pods only.
    let (status, refusal) =
        as_n1(&server, "POST", "/api/v1/namespaces/default/pods", &pod("mine", "n1", "creds")).await?;
    ensure!(
        status == 403
            && refusal["message"].as_str().is_some_and(|m| m.contains("can only create mirror pods")),
        "{status} {refusal}"
    );
    let (status, refusal) =
        as_n1(&server, "DELETE", "/api/v1/namespaces/default/pods/other", &Value::Null).await?;
    ensure!(status == 403, "{status} {refusal}");
    ensure!(
        refusal["message"]
            == "pods \"other\" is forbidden: node \"n1\" can only delete pods with spec.nodeName set to itself",
        "{refusal}"
    );
    ensure!(as_admin(&server, "GET", "/api/v1/namespaces/default/pods/other", &Value::Null).await? == 200);
    ensure!(as_n1(&server, "DELETE", "/api/v1/namespaces/default/pods/web", &Value::Null).await?.0 == 200);

    // A mirror pod owned by the node must name this node's uid, not an earlier node's of its name.
    let (_, _, text) = server.request("GET", "/api/v1/nodes/n1", &[], b"").await?;
    let node_uid =
        serde_json::from_str::<Value>(&text)?["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
    let mirror = |name: &str, uid: &str| {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name,
            "annotations": {"kubernetes.io/config.mirror": "hash"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": uid, "controller": true}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}})
    };
    let pods = "/api/v1/namespaces/default/pods";
    let (status, refusal) = as_n1(&server, "POST", pods, &mirror("static-old", "an-earlier-node")).await?;
    ensure!(status == 403, "{status} {refusal}");
    ensure!(
        refusal["message"]
            == format!(
                "pods \"static-old\" is forbidden: node n1 UID mismatch: expected an-earlier-node got {node_uid}"
            ),
        "{refusal}"
    );
    let (status, created) = as_n1(&server, "POST", pods, &mirror("static-web", &node_uid)).await?;
    ensure!(status == 201, "{status} {created}");
    Ok(())
}
