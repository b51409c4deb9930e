//! What must hold whatever a client sends (found by review, each once broken): writes of every kind
//! go through the resource's type, nothing reachable from a request panics, allocations are never
//! released by a Service that did not hold them, the cluster's namespaces stay, only declared verbs
//! are served, writes that change nothing write nothing, names follow upstream's per-resource rules,
//! and pagination honours `limit`.

use crate::common;

use anyhow::{Result, ensure};
use common::Server;
use serde_json::{Value, json};

const JSON: [(&str, &str); 1] = [("Content-Type", "application/json")];
const MERGE: [(&str, &str); 1] = [("Content-Type", "application/merge-patch+json")];
const JSONPATCH: [(&str, &str); 1] = [("Content-Type", "application/json-patch+json")];
const SVC: &str = "/api/v1/namespaces/default/services";
const CM: &str = "/api/v1/namespaces/default/configmaps";

async fn post(server: &Server, path: &str, body: &Value) -> Result<(u16, Value)> {
    let (status, _, body) = server.request("POST", path, &JSON, body.to_string().as_bytes()).await?;
    Ok((status, serde_json::from_str(&body).unwrap_or(Value::String(body))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_go_through_the_type() -> Result<()> {
    let server = Server::start().await?;
    let (status, _, body) =
        server.request("PATCH", &format!("{SVC}/kubernetes"), &MERGE, br#"{"spec":"x"}"#).await?;
    ensure!(status == 400, "{status} {body}");
    ensure!(post(&server, CM, &json!({"metadata": {"name": "c"}, "data": {"a": "b"}})).await?.0 == 201);
    let (status, _, body) =
        server.request("PATCH", &format!("{CM}/c"), &MERGE, br#"{"data":{"a":5}}"#).await?;
    ensure!(status == 400, "a wrongly typed patch was stored: {status} {body}");
    let (status, _, body) =
        server.request("PATCH", &format!("{CM}/c"), &MERGE, br#"{"junk":{"deep":1}}"#).await?;
    ensure!(status == 200 && !body.contains("junk"), "an unknown field was kept: {body}");
    let mut nested = json!(1);
    for _ in 0..100 {
        nested = json!({"a": nested});
    }
    let deep = json!([{"op": "add", "path": "/x", "value": nested}]).to_string();
    let (status, _, _) = server.request("PATCH", &format!("{CM}/c"), &JSONPATCH, deep.as_bytes()).await?;
    ensure!(status == 200);
    let (_, _, list) = server.request("GET", CM, &[], b"").await?;
    let typed: Result<k8s_openapi::List<k8s_openapi::api::core::v1::ConfigMap>, _> =
        serde_json::from_str(&list);
    ensure!(typed.is_ok(), "a typed client cannot read the list: {typed:?}");
    let (status, _, body) = server
        .request(
            "PATCH",
            "/apis/apps/v1/namespaces/default/deployments/none/scale",
            &MERGE,
            br#"{"spec":{"replicas":1}}"#,
        )
        .await?;
    ensure!(status == 404, "{status} {body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_keep_the_namespace_and_noops_write_nothing() -> Result<()> {
    let server = Server::start().await?;
    let (_, created) = post(&server, CM, &json!({"metadata": {"name": "c"}, "data": {"a": "b"}})).await?;
    let body =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}});
    let (status, _, answer) =
        server.request("PUT", &format!("{CM}/c"), &JSON, body.to_string().as_bytes()).await?;
    let answer: Value = serde_json::from_str(&answer)?;
    ensure!(status == 200 && answer["metadata"]["namespace"] == "default", "{answer}");
    ensure!(
        answer["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"],
        "a no-op PUT wrote: {answer}"
    );
    let elsewhere = json!({"metadata": {"name": "c", "namespace": "kube-system"}});
    let (status, _, _) =
        server.request("PUT", &format!("{CM}/c"), &JSON, elsewhere.to_string().as_bytes()).await?;
    ensure!(status == 400);
    let (_, _, patched) =
        server.request("PATCH", &format!("{CM}/c"), &MERGE, br#"{"data":{"a":"b"}}"#).await?;
    let patched: Value = serde_json::from_str(&patched)?;
    ensure!(
        patched["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"],
        "a no-op patch wrote"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_release_only_what_they_hold() -> Result<()> {
    let server = Server::start().await?;
    let node_port = |name: &str, kind: Option<&str>| {
        let mut s = json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 80, "nodePort": 30443}]}});
        if let Some(kind) = kind {
            s["spec"]["type"] = kind.into();
        }
        s
    };
    ensure!(post(&server, SVC, &node_port("owner", Some("NodePort"))).await?.0 == 201);
    let (status, answer) = post(&server, SVC, &node_port("squatter", None)).await?;
    ensure!(
        status == 422
            && answer["message"]
                .as_str()
                .is_some_and(|m| m.contains("may not be used when `type` is 'ClusterIP'")),
        "{answer}"
    );
    let (_, owner) =
        post(&server, SVC, &json!({"metadata": {"name": "ip-owner"}, "spec": {"ports": [{"port": 80}]}}))
            .await?;
    let ext = json!({"metadata": {"name": "ext"}, "spec": {"type": "ExternalName", "externalName": "example.com", "clusterIP": owner["spec"]["clusterIP"]}});
    ensure!(post(&server, SVC, &ext).await?.0 == 422);
    let twice = json!({"metadata": {"name": "twice"}, "spec": {"type": "NodePort", "ports": [{"name": "a", "port": 80, "nodePort": 30500}, {"name": "b", "port": 81, "nodePort": 30500}]}});
    ensure!(post(&server, SVC, &twice).await?.0 == 422);
    let (status, answer) = post(&server, SVC, &node_port("second", Some("NodePort"))).await?;
    ensure!(status == 422, "nodePort 30443 given twice: {answer}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_verbs_and_names() -> Result<()> {
    let server = Server::start().await?;
    for name in ["default", "kube-system", "kube-public"] {
        let (status, _, body) =
            server.request("DELETE", &format!("/api/v1/namespaces/{name}"), &[], b"").await?;
        ensure!(status == 403, "deleting {name}: {status} {body}");
    }
    ensure!(
        post(&server, "/api/v1/namespaces/kube-system/configmaps", &json!({"metadata": {"name": "keep"}}))
            .await?
            .0
            == 201
    );
    for (method, path) in
        [("DELETE", "/api/v1/configmaps"), ("DELETE", "/api/v1/namespaces"), ("POST", "/api/v1/configmaps")]
    {
        let (status, _, _) = server.request(method, path, &JSON, b"{}").await?;
        ensure!(status == 405, "{method} {path}: {status}");
    }
    ensure!(
        server.request("GET", "/api/v1/namespaces/kube-system/configmaps/keep", &[], b"").await?.0 == 200
    );
    let (status, answer) = post(
        &server,
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        &json!({"metadata": {"name": "system:custom-role"}, "rules": []}),
    )
    .await?;
    ensure!(status == 201, "{answer}");
    ensure!(post(&server, CM, &json!({"metadata": {"name": "a".repeat(70)}})).await?.0 == 201);
    ensure!(
        post(&server, SVC, &json!({"metadata": {"name": "1svc"}, "spec": {"ports": [{"port": 80}]}}))
            .await?
            .0
            == 422
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_and_pages() -> Result<()> {
    let server = Server::start().await?;
    let (status, _, _) = server
        .request("GET", &format!("{CM}?watch=true&resourceVersion=9223372036854775807"), &[], b"")
        .await?;
    ensure!(status == 400);
    let (status, _, body) = server
        .request(
            "GET",
            &format!("{CM}?watch=1&sendInitialEvents=true&resourceVersionMatch=Exact&resourceVersion=1"),
            &[],
            b"",
        )
        .await?;
    ensure!(
        status == 422 && body.contains("requires setting resourceVersionMatch to NotOlderThan"),
        "{status} {body}"
    );
    let (status, _, body) =
        server.request("GET", &format!("{CM}?sendInitialEvents=false&resourceVersion=0"), &[], b"").await?;
    ensure!(status == 422 && body.contains("sendInitialEvents is forbidden for list"), "{status} {body}");
    let (status, _, body) =
        server.request("GET", &format!("{CM}?watch=1&resourceVersion=99999"), &[], b"").await?;
    ensure!(status == 504 && body.contains("Too large resource version"), "{status} {body}");
    for (name, tier) in [("a", "x"), ("b", "y"), ("c", "x"), ("d", "x")] {
        ensure!(
            post(&server, CM, &json!({"metadata": {"name": name, "labels": {"tier": tier}}})).await?.0 == 201
        );
    }
    // Pages of one, with and without a selector: at most `limit` items, a token while more remain.
    for (selector, expected) in
        [("", vec!["a", "b", "c", "d"]), ("&labelSelector=tier%3Dx", vec!["a", "c", "d"])]
    {
        let (mut names, mut token) = (Vec::new(), String::new());
        for page in 0.. {
            ensure!(page < 10, "pagination does not end");
            let path = format!(
                "{CM}?limit=1{selector}{}",
                if token.is_empty() { String::new() } else { format!("&continue={token}") }
            );
            let (_, _, body) = server.request("GET", &path, &[], b"").await?;
            let list: Value = serde_json::from_str(&body)?;
            let items = list["items"].as_array().cloned().unwrap_or_default();
            ensure!(items.len() <= 1, "a page of {} with limit 1", items.len());
            names.extend(items.iter().filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned)));
            match list["metadata"]["continue"].as_str() {
                Some(next) if !next.is_empty() => token = next.to_owned(),
                _ => break,
            }
        }
        ensure!(names == expected, "{selector}: {names:?}");
    }
    let (_, _, first) = server.request("GET", &format!("{CM}?limit=1"), &[], b"").await?;
    let first: Value = serde_json::from_str(&first)?;
    ensure!(first["metadata"]["remainingItemCount"] == 3, "{first}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregated_discovery_when_asked() -> Result<()> {
    let server = Server::start().await?;
    let client_go = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
    for (path, group) in [("/api", None), ("/apis", Some("apps"))] {
        let (status, content_type, body) = server.request("GET", path, &[("Accept", client_go)], b"").await?;
        ensure!(status == 200, "{path}: {status} {body}");
        ensure!(
            content_type == "application/json;g=apidiscovery.k8s.io;v=v2;as=apigroupdiscoverylist",
            "{path}: {content_type}"
        );
        let list: Value = serde_json::from_str(&body)?;
        ensure!(
            list["kind"] == "APIGroupDiscoveryList" && list["apiVersion"] == "apidiscovery.k8s.io/v2",
            "{list}"
        );
        let items = list["items"].as_array().cloned().unwrap_or_default();
        let item =
            items.iter().find(|i| i["metadata"]["name"].as_str() == group).cloned().unwrap_or_default();
        let resources = item["versions"][0]["resources"].as_array().cloned().unwrap_or_default();
        ensure!(!resources.is_empty(), "{path}: {list}");
    }
    // Elsewhere the same Accept gets the legacy document (its last entry, JSON).
    let (status, content_type, body) =
        server.request("GET", "/api/v1", &[("Accept", client_go)], b"").await?;
    ensure!(
        status == 200 && content_type == "application/json" && body.contains("APIResourceList"),
        "{content_type} {body}"
    );
    let (_, content_type, body) = server.request("GET", "/apis", &[], b"").await?;
    ensure!(content_type == "application/json" && body.contains("\"APIGroupList\""), "{body}");
    Ok(())
}
