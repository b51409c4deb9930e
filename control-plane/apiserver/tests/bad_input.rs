//! What a client sending something wrong gets: Kubernetes' status code and reason, and nothing kept
//! in the store — requests and patches that do not apply, on both stores. Also YAML bodies and
//! responses, and content negotiation.

use crate::common;

use anyhow::{Result, ensure};
use common::Server;
use serde_json::Value;

const CM: &str = "/api/v1/namespaces/default/configmaps";

fn reason(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["reason"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_kubernetes_answers_and_change_nothing() -> Result<()> {
    let server = Server::start().await?;
    let json = [("Content-Type", "application/json")];
    // (what, headers, body, expected code, expected reason)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a [u8], u16, &'a str);
    let cases: &[Case<'_>] = &[
        ("malformed JSON", &json, b"{\"metadata\": ", 400, "BadRequest"),
        (
            "a kind that does not match the URL",
            &json,
            br#"{"kind":"Secret","apiVersion":"v1","metadata":{"name":"a"}}"#,
            400,
            "BadRequest",
        ),
        (
            "an apiVersion that does not match",
            &json,
            br#"{"kind":"ConfigMap","apiVersion":"apps/v1","metadata":{"name":"a"}}"#,
            400,
            "BadRequest",
        ),
        ("an invalid name", &json, br#"{"metadata":{"name":"Not_Valid"}}"#, 422, "Invalid"),
        ("no name", &json, br#"{"metadata":{}}"#, 422, "Invalid"),
        (
            "another namespace in the body",
            &json,
            br#"{"metadata":{"name":"a","namespace":"kube-system"}}"#,
            400,
            "BadRequest",
        ),
        (
            "an empty protobuf envelope (tests/protobuf.rs has the rest)",
            &[("Content-Type", "application/vnd.kubernetes.protobuf")],
            b"k8s\0",
            400,
            "BadRequest",
        ),
        ("a media type not served", &[("Content-Type", "text/plain")], b"a", 415, "UnsupportedMediaType"),
        ("malformed YAML", &[("Content-Type", "application/yaml")], b"metadata: [", 400, "BadRequest"),
    ];
    for (what, headers, body, code, expected) in cases {
        let (status, _, answer) = server.request("POST", CM, headers, body).await?;
        ensure!(status == *code && reason(&answer) == *expected, "{what}: {status} {answer}");
    }
    let huge = vec![b' '; 3 * 1024 * 1024 + 1];
    let (status, _, answer) = server.request("POST", CM, &json, &huge).await?;
    ensure!(status == 413 && reason(&answer) == "RequestEntityTooLarge", "{status} {answer}");
    let (status, _, answer) = server.request("GET", CM, &[("Accept", "text/html")], b"").await?;
    ensure!(status == 406 && reason(&answer) == "NotAcceptable", "{status} {answer}");
    let (status, _, answer) = server.request("GET", "/api/v1/widgets", &[], b"").await?;
    ensure!(status == 404 && reason(&answer) == "NotFound", "{status} {answer}");
    let (status, _, answer) = server.request("GET", &format!("{CM}?limit=x"), &[], b"").await?;
    ensure!(status == 400, "{status} {answer}");
    let (status, _, answer) =
        server.request("GET", &format!("{CM}?labelSelector=a%20in%20(b"), &[], b"").await?;
    ensure!(status == 400 && answer.contains("unable to parse requirement"), "{status} {answer}");

    // Nothing of any of it was kept.
    let (status, _, list) = server.request("GET", CM, &[], b"").await?;
    let list: Value = serde_json::from_str(&list)?;
    ensure!(status == 200 && list["items"].as_array().is_some_and(Vec::is_empty), "{list}");

    // A stale resourceVersion on update: 409 Conflict, and the object keeps its value.
    let (status, _, created) =
        server.request("POST", CM, &json, br#"{"metadata":{"name":"c"},"data":{"v":"1"}}"#).await?;
    ensure!(status == 201, "{created}");
    let mut object: Value = serde_json::from_str(&created)?;
    object["data"]["v"] = "2".into();
    let (status, _, _) =
        server.request("PUT", &format!("{CM}/c"), &json, object.to_string().as_bytes()).await?;
    ensure!(status == 200);
    object["data"]["v"] = "3".into();
    let (status, _, answer) =
        server.request("PUT", &format!("{CM}/c"), &json, object.to_string().as_bytes()).await?;
    ensure!(status == 409 && reason(&answer) == "Conflict", "{status} {answer}");
    let (_, _, current) = server.request("GET", &format!("{CM}/c"), &[], b"").await?;
    ensure!(serde_json::from_str::<Value>(&current)?["data"]["v"] == "2", "{current}");
    let (status, _, answer) =
        server.request("PUT", &format!("{CM}/other"), &json, object.to_string().as_bytes()).await?;
    ensure!(status == 400 && answer.contains("does not match the name on the URL"), "{status} {answer}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_in_and_out() -> Result<()> {
    let server = Server::start().await?;
    let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-yaml\n  labels:\n    a: b\ndata:\n  key: value\n";
    let (status, content_type, body) = server
        .request("POST", CM, &[("Content-Type", "application/yaml"), ("Accept", "application/yaml")], yaml)
        .await?;
    ensure!(status == 201 && content_type.starts_with("application/yaml"), "{status} {content_type} {body}");
    let object: Value = serde_yaml_ng::from_str(&body)?;
    ensure!(object["data"]["key"] == "value" && object["metadata"]["uid"].is_string(), "{body}");
    let (status, content_type, body) = server.request("GET", &format!("{CM}/from-yaml"), &[], b"").await?;
    ensure!(status == 200 && content_type.starts_with("application/json"), "{content_type}");
    ensure!(serde_json::from_str::<Value>(&body)?["metadata"]["labels"]["a"] == "b", "{body}");
    let (status, _, body) =
        server.request("GET", &format!("{CM}?watch=true"), &[("Accept", "application/yaml")], b"").await?;
    ensure!(status == 406, "{status} {body}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_validation_strict_warn_ignore() -> Result<()> {
    let server = Server::start().await?;
    let json = [("Content-Type", "application/json")];
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let deployment = |name: &str, extra: &str| {
        format!(
            r#"{{"apiVersion":"apps/v1","kind":"Deployment","metadata":{{"name":"{name}"}},"spec":{{"selector":{{"matchLabels":{{"a":"b"}}}},{extra}"template":{{"metadata":{{"labels":{{"a":"b"}}}},"spec":{{"containers":[{{"name":"c","image":"busybox"}}]}}}}}}}}"#
        )
    };
    let (status, _, answer) = server
        .request(
            "POST",
            &format!("{deployments}?fieldValidation=Strict"),
            &json,
            deployment("strict", r#""bogus":1,"#).as_bytes(),
        )
        .await?;
    ensure!(
        status == 400 && answer.contains(r#"strict decoding error: unknown field \"spec.bogus\""#),
        "{status} {answer}"
    );
    let (status, _, answer) = server
        .request(
            "POST",
            &format!("{deployments}?fieldValidation=Strict"),
            &json,
            deployment("dup", r#""replicas":1,"replicas":2,"#).as_bytes(),
        )
        .await?;
    ensure!(status == 400 && answer.contains(r#"duplicate field \"spec.replicas\""#), "{status} {answer}");
    let (status, head, answer) = server
        .request_with_headers("POST", deployments, &json, deployment("warned", r#""bogus":1,"#).as_bytes())
        .await?;
    ensure!(status == 201, "{answer}");
    ensure!(
        head.lines().any(|l| l.eq_ignore_ascii_case(r#"warning: 299 - "unknown field \"spec.bogus\"""#)),
        "{head}"
    );
    let (status, head, _) = server
        .request_with_headers(
            "POST",
            &format!("{deployments}?fieldValidation=Ignore"),
            &json,
            deployment("ignored", r#""bogus":1,"#).as_bytes(),
        )
        .await?;
    ensure!(status == 201 && !head.to_ascii_lowercase().contains("warning:"), "{head}");
    let (status, _, answer) = server
        .request("POST", deployments, &json, deployment("typed", r#""replicas":"two","#).as_bytes())
        .await?;
    ensure!(status == 400 && answer.contains("cannot be handled as a Deployment"), "{status} {answer}");
    let (status, _, answer) =
        server.request("POST", &format!("{deployments}?fieldValidation=Loose"), &json, b"{}").await?;
    ensure!(status == 400 && answer.contains("fieldValidation must be one of"), "{status} {answer}");
    Ok(())
}

/// Patches that do not apply — each kind of patch, malformed or not fitting the object — get
/// Kubernetes' status and reason, and the object stays as it was (same resourceVersion).
async fn patches_that_do_not_apply(server: Server) -> Result<()> {
    let json = [("Content-Type", "application/json")];
    let deployment = br#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},
        "spec":{"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},
        "spec":{"containers":[{"name":"web","image":"busybox:1"}]}}}}"#;
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let (status, _, created) = server.request("POST", deployments, &json, deployment).await?;
    ensure!(status == 201, "{created}");
    let version = |text: &str| -> Result<Value> {
        Ok(serde_json::from_str::<Value>(text)?["metadata"]["resourceVersion"].clone())
    };
    let before = version(&created)?;
    const JSON_PATCH: &str = "application/json-patch+json";
    const MERGE: &str = "application/merge-patch+json";
    const STRATEGIC: &str = "application/strategic-merge-patch+json";
    // (what, content type, patch, expected code, expected reason)
    let cases: &[(&str, &str, &str, u16, &str)] = &[
        ("a JSON patch that is not JSON", JSON_PATCH, "[{", 400, "BadRequest"),
        (
            "a JSON patch whose test fails",
            JSON_PATCH,
            r#"[{"op":"test","path":"/spec/replicas","value":7}]"#,
            422,
            "Invalid",
        ),
        (
            "a JSON patch removing what is not there",
            JSON_PATCH,
            r#"[{"op":"remove","path":"/spec/nothing"}]"#,
            422,
            "Invalid",
        ),
        (
            "a JSON patch with an unknown op",
            JSON_PATCH,
            r#"[{"op":"frobnicate","path":"/spec"}]"#,
            422,
            "Invalid",
        ),
        ("a merge patch that is not JSON", MERGE, "{", 400, "BadRequest"),
        (
            "a merge patch giving a field the wrong type",
            MERGE,
            r#"{"spec":{"replicas":"many"}}"#,
            400,
            "BadRequest",
        ),
        (
            "a strategic patch without a container's merge key",
            STRATEGIC,
            r#"{"spec":{"template":{"spec":{"containers":[{"image":"busybox:2"}]}}}}"#,
            422,
            "Invalid",
        ),
        (
            "a strategic patch with an unknown directive",
            STRATEGIC,
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"web","$patch":"explode"}]}}}}"#,
            422,
            "Invalid",
        ),
        ("a patch making the object invalid", MERGE, r#"{"spec":{"replicas":-1}}"#, 422, "Invalid"),
        ("a patch of an unsupported type", "application/xml", "<spec/>", 415, "UnsupportedMediaType"),
    ];
    let path = format!("{deployments}/web");
    for (what, content_type, patch, code, expected) in cases {
        let headers = [("Content-Type", *content_type)];
        let (status, _, answer) = server.request("PATCH", &path, &headers, patch.as_bytes()).await?;
        ensure!(status == *code && reason(&answer) == *expected, "{what}: {status} {answer}");
    }
    let (status, _, current) = server.request("GET", &path, &[], b"").await?;
    ensure!(status == 200 && version(&current)? == before, "the deployment changed: {current}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_that_do_not_apply_change_nothing() -> Result<()> {
    patches_that_do_not_apply(Server::start().await?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_that_do_not_apply_change_nothing_on_etcd() -> Result<()> {
    let etcd = keel_testbed::etcd::EtcdCluster::start(1)?;
    let options = keel_store::etcd::EtcdOptions::new(etcd.client_urls()).prefix("/keel");
    let store = std::sync::Arc::new(keel_store::etcd::EtcdStore::connect(options).await?);
    patches_that_do_not_apply(Server::start_on(store, tempfile::tempdir()?).await?).await
}
