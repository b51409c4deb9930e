//! Events through both APIs that serve them, as upstream does: one object stored as a core v1 Event,
//! served as events.k8s.io/v1 (regarding, note, reportingController...) or as core v1
//! (involvedObject, message, reportingComponent...) by the path it is read through — in gets,
//! lists, field selectors and watches — and `kubectl events` reading what a client wrote.

use crate::common;

use anyhow::{Result, ensure};
use common::Server;
use keel_testbed::kubectl;
use serde_json::{Value, json};

const CORE: &str = "/api/v1/namespaces/default/events";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";
const JSON: [(&str, &str); 1] = [("Content-Type", "application/json")];

async fn call(server: &Server, method: &str, path: &str, body: &Value) -> Result<(u16, Value)> {
    let bytes = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
    let (status, _, answer) = server.request(method, path, &JSON, &bytes).await?;
    Ok((status, serde_json::from_str(&answer).unwrap_or(Value::Null)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_event_two_apis() -> Result<()> {
    let server = Server::start().await?;
    let watch = {
        let (address, ca) = (server.address, server.pki.ca_pem.clone());
        let (cert, key) = (server.pki.admin_cert_pem.clone(), server.pki.admin_key_pem.clone());
        tokio::task::spawn_blocking(move || {
            let path = format!("{EVENTS}?watch=1&timeoutSeconds=3");
            common::raw_request(address, &ca, Some((&cert, &key)), "GET", &path, &[], b"")
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let written = json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "pulled"},
        "eventTime": "2026-11-30T10:00:00.000000Z", "reportingController": "keel.dev/kubelet",
        "reportingInstance": "n1", "action": "Pulling", "reason": "Pulled", "type": "Normal",
        "regarding": {"kind": "Pod", "name": "web", "namespace": "default", "apiVersion": "v1"},
        "note": "Successfully pulled image \"busybox\""
    });
    let (status, created) = call(&server, "POST", EVENTS, &written).await?;
    ensure!(
        status == 201 && created["note"] == written["note"] && created["regarding"]["name"] == "web",
        "{created}"
    );

    // Read through core v1: the core names.
    let (_, core) = call(&server, "GET", &format!("{CORE}/pulled"), &Value::Null).await?;
    ensure!(core["apiVersion"] == "v1" && core["involvedObject"]["name"] == "web", "{core}");
    ensure!(core["message"] == written["note"] && core["reportingComponent"] == "keel.dev/kubelet", "{core}");
    ensure!(core.get("regarding").is_none() && core.get("note").is_none(), "{core}");

    // A core write is read back through events.k8s.io in its names; each API selects by its own
    // field names (upstream's field label conversion), and not by the other's.
    let core_written = json!({
        "metadata": {"name": "started"}, "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"},
        "reason": "Started", "message": "Started container c", "type": "Normal", "source": {"component": "kubelet"},
        "count": 1, "firstTimestamp": "2026-11-30T10:00:01Z", "lastTimestamp": "2026-11-30T10:00:01Z"
    });
    ensure!(call(&server, "POST", CORE, &core_written).await?.0 == 201);
    let (_, started) = call(&server, "GET", &format!("{EVENTS}/started"), &Value::Null).await?;
    ensure!(
        started["apiVersion"] == "events.k8s.io/v1" && started["regarding"]["name"] == "web",
        "{started}"
    );
    ensure!(
        started["note"] == "Started container c"
            && started["deprecatedSource"]["component"] == "kubelet"
            && started["deprecatedCount"] == 1,
        "{started}"
    );
    for (path, selector) in [
        (CORE, "involvedObject.name%3Dweb,reason%3DPulled"),
        (EVENTS, "regarding.name%3Dweb,reason%3DPulled,reportingController%3Dkeel.dev/kubelet"),
    ] {
        let (status, list) =
            call(&server, "GET", &format!("{path}?fieldSelector={selector}"), &Value::Null).await?;
        let items = list["items"].as_array().cloned().unwrap_or_default();
        ensure!(status == 200 && items.len() == 1, "{path}: {list}");
        let named =
            if path == CORE { &items[0]["involvedObject"]["name"] } else { &items[0]["regarding"]["name"] };
        ensure!(named == "web", "{path}: {list}");
    }

    let path = format!("{EVENTS}?fieldSelector=involvedObject.name%3Dweb");
    let (status, _) = call(&server, "GET", &path, &Value::Null).await?;
    ensure!(status == 400, "events.k8s.io has no involvedObject field label: {status}");
    // Updates through events.k8s.io keep the stored form.
    let mut patched = created.clone();
    patched["note"] = json!("pulled again");
    ensure!(call(&server, "PUT", &format!("{EVENTS}/pulled"), &patched).await?.0 == 200);
    let (_, core) = call(&server, "GET", &format!("{CORE}/pulled"), &Value::Null).await?;
    ensure!(core["message"] == "pulled again", "{core}");

    // The events.k8s.io watch saw both events in its own form.
    let (status, _, events) = watch.await??;
    ensure!(status == 200, "{status}");
    let names: Vec<String> = events
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["object"]["apiVersion"] == "events.k8s.io/v1")
        .filter_map(|event| event["object"]["note"].as_str().map(str::to_owned))
        .collect();
    ensure!(names.iter().any(|n| n == "Started container c"), "{events}");

    // kubectl events reads them.
    let kubeconfig = server.dir.path().join("admin.kubeconfig");
    std::fs::write(&kubeconfig, server.pki.admin_kubeconfig(&format!("https://{}", server.address)))?;
    let output =
        kubectl::minor(31)?.command().arg("--kubeconfig").arg(&kubeconfig).args(["events"]).output()?;
    let out = String::from_utf8_lossy(&output.stdout);
    ensure!(
        output.status.success() && out.contains("pulled again") && out.contains("Started container c"),
        "{out}"
    );
    Ok(())
}
