//! Objects that break upstream's validation are refused with 422 Invalid, each bad field a cause
//! with its path, reason and message, and nothing is stored; valid objects and valid updates pass.

use crate::common;

use anyhow::{Result, ensure};
use common::Server;
use serde_json::{Value, json};

const JSON: [(&str, &str); 1] = [("Content-Type", "application/json")];

/// Sends `body` and expects 422 Invalid naming `kind` and exactly these `(field, reason, message)`
/// causes.
async fn refused(
    server: &Server,
    method: &str,
    path: &str,
    body: &Value,
    kind: &str,
    causes: &[(&str, &str, &str)],
) -> Result<()> {
    let (status, _, answer) = server.request(method, path, &JSON, body.to_string().as_bytes()).await?;
    let answer: Value = serde_json::from_str(&answer)?;
    ensure!(status == 422 && answer["reason"] == "Invalid", "{method} {path}: {status} {answer}");
    ensure!(answer["details"]["kind"] == kind, "{answer}");
    let got: Vec<(String, String, String)> = answer["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (text("field"), text("reason"), text("message"))
        })
        .collect();
    let want: Vec<(String, String, String)> =
        causes.iter().map(|(f, r, m)| ((*f).to_owned(), (*r).to_owned(), (*m).to_owned())).collect();
    ensure!(got == want, "{method} {path}: causes {got:#?}\nwanted {want:#?}");
    Ok(())
}

async fn created(server: &Server, path: &str, body: &Value) -> Result<Value> {
    let (status, _, answer) = server.request("POST", path, &JSON, body.to_string().as_bytes()).await?;
    ensure!(status == 201, "POST {path}: {status} {answer}");
    Ok(serde_json::from_str(&answer)?)
}

async fn count(server: &Server, path: &str) -> Result<usize> {
    let (status, _, list) = server.request("GET", path, &[], b"").await?;
    ensure!(status == 200, "GET {path}: {status} {list}");
    Ok(serde_json::from_str::<Value>(&list)?["items"].as_array().map_or(0, Vec::len))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods() -> Result<()> {
    let server = Server::start().await?;
    let pods = "/api/v1/namespaces/default/pods";
    refused(
        &server,
        "POST",
        pods,
        &json!({"metadata": {"name": "none"}, "spec": {}}),
        "Pod",
        &[("spec.containers", "FieldValueRequired", "Required value")],
    )
    .await?;
    let twins = json!({"metadata": {"name": "twins"}, "spec": {"containers": [
        {"name": "c", "image": "busybox"},
        {"name": "c", "image": "busybox", "ports": [{"containerPort": 70000, "protocol": "ICMP"}]}]}});
    refused(
        &server,
        "POST",
        pods,
        &twins,
        "Pod",
        &[
            (
                "spec.containers[1].ports[0].containerPort",
                "FieldValueInvalid",
                "Invalid value: 70000: must be between 1 and 65535, inclusive",
            ),
            (
                "spec.containers[1].ports[0].protocol",
                "FieldValueNotSupported",
                "Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            ),
            ("spec.containers[1].name", "FieldValueDuplicate", "Duplicate value: \"c\""),
        ],
    )
    .await?;
    let mount = json!({"metadata": {"name": "mount"}, "spec": {"containers": [
        {"name": "c", "image": "busybox", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}]}});
    refused(
        &server,
        "POST",
        pods,
        &mount,
        "Pod",
        &[("spec.containers[0].volumeMounts[0].name", "FieldValueNotFound", "Not found: \"data\"")],
    )
    .await?;
    // A dry run is refused too, and nothing was stored.
    refused(
        &server,
        "POST",
        &format!("{pods}?dryRun=All"),
        &twins,
        "Pod",
        &[
            (
                "spec.containers[1].ports[0].containerPort",
                "FieldValueInvalid",
                "Invalid value: 70000: must be between 1 and 65535, inclusive",
            ),
            (
                "spec.containers[1].ports[0].protocol",
                "FieldValueNotSupported",
                "Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            ),
            ("spec.containers[1].name", "FieldValueDuplicate", "Duplicate value: \"c\""),
        ],
    )
    .await?;
    ensure!(count(&server, pods).await? == 0);

    // The minimal pod is valid; its image may change, nothing else of its spec.
    let pod = created(
        &server,
        pods,
        &json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
    )
    .await?;
    let mut image = pod.clone();
    image["spec"]["containers"][0]["image"] = "busybox:1.36".into();
    let (status, _, answer) =
        server.request("PUT", &format!("{pods}/p"), &JSON, image.to_string().as_bytes()).await?;
    ensure!(status == 200, "{status} {answer}");
    let patch = [("Content-Type", "application/merge-patch+json")];
    let (status, _, answer) = server
        .request("PATCH", &format!("{pods}/p"), &patch, br#"{"spec":{"restartPolicy":"Never"}}"#)
        .await?;
    let answer: Value = serde_json::from_str(&answer)?;
    let message = answer["details"]["causes"][0]["message"].as_str().unwrap_or_default();
    ensure!(
        status == 422
            && answer["details"]["causes"][0]["field"] == "spec"
            && message.starts_with(
                "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
            ),
        "{status} {answer}"
    );
    let (_, _, current) = server.request("GET", &format!("{pods}/p"), &[], b"").await?;
    let current: Value = serde_json::from_str(&current)?;
    ensure!(
        current["spec"]["restartPolicy"] == "Always"
            && current["spec"]["containers"][0]["image"] == "busybox:1.36"
    );
    // Status writes are not held to the spec's rules.
    let (status, _, answer) = server
        .request("PATCH", &format!("{pods}/p/status"), &patch, br#"{"status":{"phase":"Running"}}"#)
        .await?;
    ensure!(status == 200, "{status} {answer}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata() -> Result<()> {
    let server = Server::start().await?;
    let cms = "/api/v1/namespaces/default/configmaps";
    let long = "v".repeat(100);
    refused(
        &server,
        "POST",
        cms,
        &json!({"metadata": {"name": "c", "labels": {"app": long}, "finalizers": ["cleanup"]}}),
        "ConfigMap",
        &[
            (
                "metadata.labels",
                "FieldValueInvalid",
                &format!("Invalid value: \"{long}\": must be no more than 63 characters"),
            ),
            (
                "metadata.finalizers[0]",
                "FieldValueInvalid",
                "Invalid value: \"cleanup\": name is neither a standard finalizer name nor is it fully qualified",
            ),
        ],
    )
    .await?;
    let big = "x".repeat(256 * 1024);
    refused(
        &server,
        "POST",
        cms,
        &json!({"metadata": {"name": "c", "annotations": {"a": big}}}),
        "ConfigMap",
        &[("metadata.annotations", "FieldValueTooLong", "Too long: may not be more than 262144 bytes")],
    )
    .await?;
    ensure!(count(&server, cms).await? == 0);
    // Labels are checked on update too.
    let cm = created(&server, cms, &json!({"metadata": {"name": "c", "labels": {"a": "b"}}})).await?;
    let mut bad = cm.clone();
    bad["metadata"]["labels"]["a"] = "-b".into();
    let (status, _, answer) =
        server.request("PUT", &format!("{cms}/c"), &JSON, bad.to_string().as_bytes()).await?;
    ensure!(status == 422 && answer.contains("metadata.labels"), "{status} {answer}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads() -> Result<()> {
    let server = Server::start().await?;
    let deployments = "/apis/apps/v1/namespaces/default/deployments";
    let deployment = |selector: Value, labels: Value| {
        let mut d = json!({"metadata": {"name": "web"}, "spec": {
            "template": {"metadata": {}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}});
        d["spec"]["selector"] = selector;
        d["spec"]["template"]["metadata"]["labels"] = labels;
        d
    };
    refused(
        &server,
        "POST",
        deployments,
        &deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "x"})),
        "Deployment",
        &[(
            "spec.template.metadata.labels",
            "FieldValueInvalid",
            "Invalid value: {\"app\":\"x\"}: `selector` does not match template `labels`",
        )],
    )
    .await?;
    refused(
        &server,
        "POST",
        deployments,
        &deployment(Value::Null, json!({"app": "x"})),
        "Deployment",
        &[
            ("spec.selector", "FieldValueRequired", "Required value"),
            (
                "spec.template.metadata.labels",
                "FieldValueInvalid",
                "Invalid value: {\"app\":\"x\"}: `selector` does not match template `labels`",
            ),
        ],
    )
    .await?;
    let mut negative = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}));
    negative["spec"]["replicas"] = (-1).into();
    negative["spec"]["template"]["spec"]["containers"][0]["name"] = "".into();
    refused(
        &server,
        "POST",
        deployments,
        &negative,
        "Deployment",
        &[
            ("spec.replicas", "FieldValueInvalid", "Invalid value: -1: must be greater than or equal to 0"),
            ("spec.template.spec.containers[0].name", "FieldValueRequired", "Required value"),
        ],
    )
    .await?;
    ensure!(count(&server, deployments).await? == 0);
    let web = created(
        &server,
        deployments,
        &deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"})),
    )
    .await?;
    let mut moved = web.clone();
    moved["spec"]["selector"]["matchLabels"]["app"] = "api".into();
    moved["spec"]["template"]["metadata"]["labels"]["app"] = "api".into();
    refused(
        &server,
        "PUT",
        &format!("{deployments}/web"),
        &moved,
        "Deployment",
        &[(
            "spec.selector",
            "FieldValueInvalid",
            "Invalid value: {\"matchLabels\":{\"app\":\"api\"}}: field is immutable",
        )],
    )
    .await?;
    // Scaling is fine.
    let patch = [("Content-Type", "application/merge-patch+json")];
    let (status, _, answer) =
        server.request("PATCH", &format!("{deployments}/web"), &patch, br#"{"spec":{"replicas":3}}"#).await?;
    ensure!(status == 200, "{status} {answer}");

    let sets = "/apis/apps/v1/namespaces/default/statefulsets";
    let mut set = deployment(json!({"matchLabels": {"app": "db"}}), json!({"app": "db"}));
    set["metadata"]["name"] = "db".into();
    set["spec"]["serviceName"] = "db".into();
    created(&server, sets, &set).await?;
    let (status, _, answer) = server
        .request("PATCH", &format!("{sets}/db"), &patch, br#"{"spec":{"serviceName":"other"}}"#)
        .await?;
    ensure!(
        status == 422
            && answer.contains("updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"),
        "{status} {answer}"
    );

    let jobs = "/apis/batch/v1/namespaces/default/jobs";
    let job = json!({"metadata": {"name": "once"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}});
    refused(
        &server,
        "POST",
        jobs,
        &job,
        "Job",
        &[(
            "spec.template.spec.restartPolicy",
            "FieldValueNotSupported",
            "Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"",
        )],
    )
    .await?;
    let cronjobs = "/apis/batch/v1/namespaces/default/cronjobs";
    let cron = json!({"metadata": {"name": "tick"}, "spec": {"schedule": "", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}}});
    refused(
        &server,
        "POST",
        cronjobs,
        &cron,
        "CronJob",
        &[("spec.schedule", "FieldValueRequired", "Required value")],
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_and_config() -> Result<()> {
    let server = Server::start().await?;
    let services = "/api/v1/namespaces/default/services";
    refused(
        &server,
        "POST",
        services,
        &json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80, "targetPort": 70000}]}}),
        "Service",
        &[(
            "spec.ports[0].targetPort",
            "FieldValueInvalid",
            "Invalid value: 70000: must be between 1 and 65535, inclusive",
        )],
    )
    .await?;
    refused(
        &server,
        "POST",
        services,
        &json!({"metadata": {"name": "s"}, "spec": {"type": "ExternalName"}}),
        "Service",
        &[("spec.externalName", "FieldValueRequired", "Required value")],
    )
    .await?;
    refused(
        &server,
        "POST",
        services,
        &json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}, {"port": 81, "name": "b"}]}}),
        "Service",
        &[("spec.ports[0].name", "FieldValueRequired", "Required value")],
    )
    .await?;
    // Only the kubernetes Service is there; a valid one is accepted.
    ensure!(count(&server, services).await? == 1);
    created(
        &server,
        services,
        &json!({"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80, "targetPort": "http"}]}}),
    )
    .await?;

    let cms = "/api/v1/namespaces/default/configmaps";
    refused(
        &server,
        "POST",
        cms,
        &json!({"metadata": {"name": "c"}, "data": {"a/b": "1", "x": "1"}, "binaryData": {"x": "AA=="}}),
        "ConfigMap",
        &[
            (
                "data[a/b]",
                "FieldValueInvalid",
                "Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            ),
            ("data[x]", "FieldValueInvalid", "Invalid value: \"x\": duplicate of key present in binaryData"),
        ],
    )
    .await?;
    let big = "x".repeat(1024 * 1024 + 1);
    refused(
        &server,
        "POST",
        cms,
        &json!({"metadata": {"name": "c"}, "data": {"a": big}}),
        "ConfigMap",
        &[("[]", "FieldValueTooLong", "Too long: may not be more than 1048576 bytes")],
    )
    .await?;
    let locked = created(
        &server,
        cms,
        &json!({"metadata": {"name": "locked"}, "data": {"a": "1"}, "immutable": true}),
    )
    .await?;
    let mut changed = locked.clone();
    changed["data"]["a"] = "2".into();
    changed["immutable"] = false.into();
    refused(
        &server,
        "PUT",
        &format!("{cms}/locked"),
        &changed,
        "ConfigMap",
        &[
            ("immutable", "FieldValueForbidden", "Forbidden: field is immutable when `immutable` is set"),
            ("data", "FieldValueForbidden", "Forbidden: field is immutable when `immutable` is set"),
        ],
    )
    .await?;
    let (_, _, current) = server.request("GET", &format!("{cms}/locked"), &[], b"").await?;
    ensure!(serde_json::from_str::<Value>(&current)?["data"]["a"] == "1", "{current}");

    let secrets = "/api/v1/namespaces/default/secrets";
    refused(
        &server,
        "POST",
        secrets,
        &json!({"metadata": {"name": "tls"}, "type": "kubernetes.io/tls", "data": {"tls.crt": "eA=="}}),
        "Secret",
        &[("data[tls.key]", "FieldValueRequired", "Required value")],
    )
    .await?;
    ensure!(count(&server, secrets).await? == 0);
    Ok(())
}
