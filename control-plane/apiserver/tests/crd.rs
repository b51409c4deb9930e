//! CustomResourceDefinitions against keel-apiserver, on the embedded store and on etcd: a CRD
//! refused for a non-structural schema (422 with upstream's causes, nothing stored), one applied
//! with kubectl and Established by the CRD controllers, its custom resources applied, listed with
//! their printer columns, scaled, their status written, refused when invalid, pruned and defaulted,
//! discovered (kubectl api-resources, aggregated and legacy discovery), used by the Python client's
//! dynamic client, and deleted with their CRD; a cluster-scoped CRD too.
//!
//! kubectl applies with its validation on (OpenAPI documents the custom resources as soon as they
//! are served), except for the object carrying a field its schema does not know: that one is sent
//! with `--validate=false`, as a client that does not validate would, to see the server prune it.

use crate::common;

use std::path::Path;

use anyhow::{Context, Result, ensure};
use common::{causes, kubectl_ok as ok, kubectl_run};
use keel_testbed::kubectl::{self, Kubectl};
use serde_json::{Value, json};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.keel.dev
spec:
  group: test.keel.dev
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
        labelSelectorPath: .status.selector
    selectableFields:
    - jsonPath: .spec.color
    additionalPrinterColumns:
    - name: Size
      type: integer
      jsonPath: .spec.size
    - name: Color
      type: string
      jsonPath: .spec.color
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
    - name: Age
      type: date
      jsonPath: .metadata.creationTimestamp
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size:
                type: integer
                minimum: 1
                maximum: 10
              color:
                type: string
                enum: [red, blue]
                default: red
              name:
                type: string
                pattern: '^[a-z]+$'
                maxLength: 8
              replicas:
                type: integer
                default: 1
              free:
                type: object
                x-kubernetes-preserve-unknown-fields: true
          status:
            type: object
            properties:
              replicas:
                type: integer
              selector:
                type: string
"#;

const WIDGET: &str = r#"
apiVersion: test.keel.dev/v1
kind: Widget
metadata:
  name: w1
  labels:
    tier: front
spec:
  size: 3
  name: first
  unknown: dropped
  free:
    anything: {kept: true}
"#;

/// The CRD as JSON, for raw requests.
fn crd_json() -> Result<Value> {
    Ok(serde_yaml_ng::from_str(CRD)?)
}

/// Applies `manifest` with kubectl from a file.
/// Every test here serves the same CRD, and the custom resource registry is process-wide (one
/// server per process in production): one test's delete of widgets.test.keel.dev would stop
/// another's. They take turns.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn apply(kubectl: &Kubectl, kubeconfig: &Path, dir: &Path, manifest: &str) -> Result<String> {
    apply_with(kubectl, kubeconfig, dir, manifest, true).await
}

/// [`apply`], with kubectl's validation on or off.
async fn apply_with(
    kubectl: &Kubectl,
    kubeconfig: &Path,
    dir: &Path,
    manifest: &str,
    validate: bool,
) -> Result<String> {
    let file = dir.join(format!("manifest-{}.yaml", rand_suffix()));
    std::fs::write(&file, manifest)?;
    let file = file.to_string_lossy().into_owned();
    let validate = if validate { "--validate=strict" } else { "--validate=false" };
    ok(kubectl, kubeconfig, &["apply", validate, "-f", &file]).await
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

async fn json_request(
    server: &common::Server,
    method: &str,
    path: &str,
    content_type: &str,
    body: &Value,
) -> Result<(u16, Value)> {
    let bytes = serde_json::to_vec(body)?;
    let (status, _, text) = server.request(method, path, &[("Content-Type", content_type)], &bytes).await?;
    let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok((status, value))
}

async fn get(server: &common::Server, path: &str) -> Result<(u16, Value)> {
    let (status, _, text) = server.request("GET", path, &[], b"").await?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
}

/// Waits until `check` holds for the JSON at `path` (the CRD controllers work asynchronously, as
/// upstream's do).
async fn eventually(
    server: &common::Server,
    path: &str,
    check: impl Fn(u16, &Value) -> bool,
) -> Result<Value> {
    for _ in 0..200 {
        let (status, value) = get(server, path).await?;
        if check(status, &value) {
            return Ok(value);
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    anyhow::bail!("{path} never reached the expected state")
}

const WIDGETS: &str = "/apis/test.keel.dev/v1/namespaces/default/widgets";
const CRD_PATH: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

async fn scenario(server: common::Server, minor: u32) -> Result<()> {
    let kubectl = kubectl::minor(minor)?;
    let kubeconfig = server.dir.path().join("admin.kubeconfig");
    std::fs::write(&kubeconfig, server.pki.admin_kubeconfig(&format!("https://{}", server.address)))?;
    let k = kubeconfig.as_path();
    let dir = server.dir.path().to_owned();

    // A schema that is not structural: 422 with upstream's causes, nothing stored.
    let mut bad = crd_json()?;
    bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["loose"] =
        json!({"properties": {"a": {"type": "string"}}});
    bad["spec"]["versions"][0]["storage"] = json!(false);
    let (status, body) = json_request(&server, "POST", CRD_PATH, "application/json", &bad).await?;
    ensure!(status == 422 && body["reason"] == "Invalid", "{status} {body}");
    let found = causes(&body);
    ensure!(
        found.contains(&"spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[loose].type: Required value: must not be empty for specified object fields".to_owned()),
        "{found:?}"
    );
    ensure!(
        found.iter().any(|c| c.ends_with("must have exactly one version marked as storage version")),
        "{found:?}"
    );
    ensure!(get(&server, &format!("{CRD_PATH}/widgets.test.keel.dev")).await?.0 == 404, "nothing stored");

    // kubectl applies the CRD; the controllers accept its names and establish it.
    apply(&kubectl, k, &dir, CRD).await?;
    ok(&kubectl, k, &["wait", "--for=condition=Established", "crd/widgets.test.keel.dev", "--timeout=30s"])
        .await?;
    let crd = get(&server, &format!("{CRD_PATH}/widgets.test.keel.dev")).await?.1;
    ensure!(crd["status"]["acceptedNames"]["kind"] == "Widget", "{crd}");
    ensure!(crd["status"]["storedVersions"] == json!(["v1"]), "{crd}");
    let conditions: Vec<(String, String)> = crd["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                c["type"].as_str().unwrap_or_default().to_owned(),
                c["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    ensure!(conditions.contains(&("NamesAccepted".into(), "True".into())), "{conditions:?}");
    let table = ok(&kubectl, k, &["get", "crd"]).await?;
    ensure!(table.contains("widgets.test.keel.dev"), "{table}");

    // Discovery: kubectl api-resources, the group and the resource list.
    let resources = ok(&kubectl, k, &["api-resources", "--api-group=test.keel.dev"]).await?;
    ensure!(
        resources.contains("widgets") && resources.contains("wd") && resources.contains("Widget"),
        "{resources}"
    );
    let list = get(&server, "/apis/test.keel.dev/v1").await?.1;
    let names: Vec<&str> =
        list["resources"].as_array().into_iter().flatten().filter_map(|r| r["name"].as_str()).collect();
    ensure!(names == ["widgets", "widgets/status", "widgets/scale"], "{list}");
    let group = get(&server, "/apis/test.keel.dev").await?.1;
    ensure!(group["preferredVersion"]["groupVersion"] == "test.keel.dev/v1", "{group}");
    let (_, _, aggregated) = server
        .request(
            "GET",
            "/apis",
            &[("Accept", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")],
            b"",
        )
        .await?;
    let aggregated: Value = serde_json::from_str(&aggregated)?;
    let ours = aggregated["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|g| g["metadata"]["name"] == "test.keel.dev")
        .context("test.keel.dev in aggregated discovery")?;
    let widgets = &ours["versions"][0]["resources"][0];
    ensure!(
        widgets["resource"] == "widgets"
            && widgets["responseKind"]
                == json!({"group": "test.keel.dev", "version": "v1", "kind": "Widget"})
            && widgets["scope"] == "Namespaced"
            && widgets["shortNames"] == json!(["wd"]),
        "{ours}"
    );

    // OpenAPI follows: the group version's document, kubectl explain, and apply with validation on.
    let mut explained = String::new();
    for _ in 0..100 {
        let (success, out, _) = kubectl_run(&kubectl, k, &["explain", "widgets.spec"]).await?;
        if success && out.contains("color") {
            explained = out;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    ensure!(explained.contains("size") && explained.contains("replicas"), "explain: {explained}");
    let index = get(&server, "/openapi/v3").await?.1;
    ensure!(index["paths"].get("apis/test.keel.dev/v1").is_some(), "{index}");
    let url =
        index["paths"]["apis/test.keel.dev/v1"]["serverRelativeURL"].as_str().unwrap_or_default().to_owned();
    let document = get(&server, &url).await?.1;
    let schema = &document["components"]["schemas"]["dev.keel.test.v1.Widget"];
    ensure!(
        schema["properties"]["spec"]["properties"]["color"]["enum"] == json!(["red", "blue"])
            && schema["x-kubernetes-group-version-kind"][0]["kind"] == "Widget",
        "{document}"
    );
    // With validation on, a field the schema does not know is refused (kubectl's own check or the
    // server's fieldValidation=Strict, depending on the version).
    let unknown = dir.join("unknown.yaml");
    std::fs::write(&unknown, WIDGET.replace("name: w1", "name: unknown"))?;
    let (success, _, err) =
        kubectl_run(&kubectl, k, &["apply", "--validate=strict", "-f", &unknown.to_string_lossy()]).await?;
    ensure!(!success && err.contains("unknown"), "{err}");
    ensure!(get(&server, &format!("{WIDGETS}/unknown")).await?.0 == 404, "nothing stored");
    let validated = dir.join("validated.yaml");
    std::fs::write(
        &validated,
        WIDGET.replace("name: w1", "name: validated").replace("  unknown: dropped\n", ""),
    )?;
    ok(&kubectl, k, &["apply", "-f", &validated.to_string_lossy()]).await?;
    ok(&kubectl, k, &["delete", "widget", "validated"]).await?;

    // A custom resource applied: unknown fields pruned, defaults filled in.
    apply_with(&kubectl, k, &dir, WIDGET, false).await?;
    let (status, w1) = get(&server, &format!("{WIDGETS}/w1")).await?;
    ensure!(status == 200, "{w1}");
    ensure!(w1["spec"].get("unknown").is_none(), "pruned: {w1}");
    ensure!(w1["spec"]["free"]["anything"]["kept"] == true, "preserved: {w1}");
    ensure!(w1["spec"]["color"] == "red" && w1["spec"]["replicas"] == 1, "defaulted: {w1}");
    ensure!(w1["apiVersion"] == "test.keel.dev/v1" && w1["metadata"]["generation"] == 1, "{w1}");
    // Applied again, changed: kubectl patches (merge patch for custom resources).
    apply_with(&kubectl, k, &dir, &WIDGET.replace("size: 3", "size: 4"), false).await?;
    ensure!(get(&server, &format!("{WIDGETS}/w1")).await?.1["spec"]["size"] == 4, "re-applied");

    // Printer columns in Table output.
    let table = ok(&kubectl, k, &["get", "widgets"]).await?;
    let header: Vec<&str> = table.lines().next().unwrap_or_default().split_whitespace().collect();
    ensure!(header == ["NAME", "SIZE", "COLOR", "REPLICAS", "AGE"], "{table}");
    let row: Vec<&str> = table.lines().nth(1).unwrap_or_default().split_whitespace().collect();
    ensure!(row[..4] == ["w1", "4", "red", "1"], "{table}");
    ensure!(
        ok(&kubectl, k, &["get", "wd", "-o", "name"]).await?.trim() == "widget.test.keel.dev/w1",
        "short name"
    );

    // kubectl scale through the scale subresource.
    ok(&kubectl, k, &["scale", "widget/w1", "--replicas=3"]).await?;
    let (_, scale) = get(&server, &format!("{WIDGETS}/w1/scale")).await?;
    ensure!(scale["kind"] == "Scale" && scale["spec"]["replicas"] == 3, "{scale}");
    // Status written through /status; the main resource keeps it, and /status keeps the spec.
    let mut with_status = get(&server, &format!("{WIDGETS}/w1")).await?.1;
    with_status["status"] = json!({"replicas": 3, "selector": "tier=front"});
    with_status["spec"]["size"] = json!(9);
    let (status, written) =
        json_request(&server, "PUT", &format!("{WIDGETS}/w1/status"), "application/json", &with_status)
            .await?;
    ensure!(status == 200 && written["status"]["replicas"] == 3 && written["spec"]["size"] == 4, "{written}");
    let (status, patched) = json_request(
        &server,
        "PATCH",
        &format!("{WIDGETS}/w1"),
        "application/merge-patch+json",
        &json!({"spec": {"size": 5}, "status": {"replicas": 0}}),
    )
    .await?;
    ensure!(status == 200 && patched["status"]["replicas"] == 3 && patched["spec"]["size"] == 5, "{patched}");
    ensure!(patched["metadata"]["generation"].as_i64() > Some(1), "{patched}");
    let (_, scale) = get(&server, &format!("{WIDGETS}/w1/scale")).await?;
    ensure!(scale["status"] == json!({"replicas": 3, "selector": "tier=front"}), "{scale}");
    let (status, patched) = json_request(
        &server,
        "PATCH",
        &format!("{WIDGETS}/w1"),
        "application/json-patch+json",
        &json!([{"op": "replace", "path": "/spec/name", "value": "second"}]),
    )
    .await?;
    ensure!(status == 200 && patched["spec"]["name"] == "second", "{patched}");
    // Strategic merge patch: 415 for custom resources, as upstream.
    let (status, body) = json_request(
        &server,
        "PATCH",
        &format!("{WIDGETS}/w1"),
        "application/strategic-merge-patch+json",
        &json!({"spec": {"size": 6}}),
    )
    .await?;
    ensure!(status == 415 && body["reason"] == "UnsupportedMediaType", "{status} {body}");

    // Invalid objects: 422 with upstream's field paths, nothing stored.
    let invalid = json!({"apiVersion": "test.keel.dev/v1", "kind": "Widget", "metadata": {"name": "bad"},
        "spec": {"size": 11, "color": "pink", "name": "UPPER", "replicas": "three"}});
    let (status, body) = json_request(&server, "POST", WIDGETS, "application/json", &invalid).await?;
    ensure!(status == 422 && body["reason"] == "Invalid", "{status} {body}");
    let found = causes(&body);
    for expected in [
        "spec.color: Unsupported value: \"pink\": supported values: \"red\", \"blue\"",
        "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10",
        "spec.name: Invalid value: \"UPPER\": spec.name in body should match '^[a-z]+$'",
        "spec.replicas: Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
    ] {
        ensure!(found.contains(&expected.to_owned()), "{expected} not in {found:?}");
    }
    ensure!(
        body["message"].as_str().is_some_and(|m| m.starts_with("Widget.test.keel.dev \"bad\" is invalid")),
        "{body}"
    );
    let (status, body) = json_request(
        &server,
        "POST",
        WIDGETS,
        "application/json",
        &json!({"apiVersion": "test.keel.dev/v1", "kind": "Widget", "metadata": {"name": "nosize"}, "spec": {}}),
    )
    .await?;
    ensure!(status == 422 && causes(&body) == ["spec.size: Required value"], "{body}");
    ensure!(get(&server, &format!("{WIDGETS}/bad")).await?.0 == 404, "nothing stored");
    // No protobuf for custom resources: JSON is answered to a client that also accepts it, a
    // protobuf body is 415.
    let (status, content_type, _) = server
        .request(
            "GET",
            &format!("{WIDGETS}/w1"),
            &[("Accept", "application/vnd.kubernetes.protobuf, application/json")],
            b"",
        )
        .await?;
    ensure!(status == 200 && content_type.starts_with("application/json"), "{status} {content_type}");
    let (status, _, body) = server
        .request("POST", WIDGETS, &[("Content-Type", "application/vnd.kubernetes.protobuf")], b"k8s\0\n")
        .await?;
    ensure!(status == 415 && body.contains("UnsupportedMediaType"), "{status} {body}");
    // An unknown version is not served.
    ensure!(get(&server, "/apis/test.keel.dev/v9/namespaces/default/widgets").await?.0 == 404, "v9");

    // Selectors, and a watch from a resourceVersion (served by the resource's watch cache).
    let before =
        get(&server, WIDGETS).await?.1["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned();
    let second = json!({"apiVersion": "test.keel.dev/v1", "kind": "Widget", "metadata": {"name": "w2"}, "spec": {"size": 1}});
    ensure!(json_request(&server, "POST", WIDGETS, "application/json", &second).await?.0 == 201, "w2");
    let labelled = ok(&kubectl, k, &["get", "widgets", "-l", "tier=front", "-o", "name"]).await?;
    ensure!(labelled.trim() == "widget.test.keel.dev/w1", "{labelled}");
    let by_name = get(&server, &format!("{WIDGETS}?fieldSelector=metadata.name%3Dw2")).await?.1;
    ensure!(
        by_name["kind"] == "WidgetList" && by_name["items"].as_array().map(Vec::len) == Some(1),
        "{by_name}"
    );
    ensure!(by_name["items"][0]["spec"]["color"] == "red", "defaults on read too: {by_name}");
    // selectableFields: spec.color may be selected on, spec.size may not.
    let red = get(&server, &format!("{WIDGETS}?fieldSelector=spec.color%3Dred")).await?.1;
    let names: Vec<&str> = red["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|w| w["metadata"]["name"].as_str())
        .collect();
    ensure!(names == ["w1", "w2"], "{red}");
    let blue =
        ok(&kubectl, k, &["get", "widgets", "--field-selector", "spec.color=blue", "-o", "name"]).await?;
    ensure!(blue.trim().is_empty(), "{blue}");
    let (status, body) = get(&server, &format!("{WIDGETS}?fieldSelector=spec.size%3D1")).await?;
    ensure!(status == 400 && body["reason"] == "BadRequest", "{status} {body}");
    let (status, _, events) = server
        .request("GET", &format!("{WIDGETS}?watch=true&resourceVersion={before}&timeoutSeconds=1"), &[], b"")
        .await?;
    let events: Vec<Value> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(Value::is_object)
        .collect();
    ensure!(status == 200 && events.len() == 1, "{events:?}");
    ensure!(events[0]["type"] == "ADDED" && events[0]["object"]["metadata"]["name"] == "w2", "{events:?}");

    // The Python client's dynamic client.
    let python = keel_testbed::python::python()?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/crd.py");
    let output = tokio::process::Command::new(python).arg(script).arg(&kubeconfig).output().await?;
    ensure!(output.status.success(), "crd.py failed: {}", String::from_utf8_lossy(&output.stderr));
    let results: Value = serde_json::from_slice(&output.stdout).context("crd.py output")?;
    ensure!(results["namespaced"] == true && results["short_names"] == json!(["wd"]), "{results}");
    ensure!(results["created"] == json!([2, "blue", 1, false]), "{results}");
    ensure!(results["patched"] == 5 && results["listed"] == json!(["py-widget"]), "{results}");
    ensure!(results["invalid"] == json!([422, "Invalid", ["spec.color"]]), "{results}");
    ensure!(results["deleted"] == 404, "{results}");

    // A cluster-scoped CRD.
    let mut gadgets = crd_json()?;
    gadgets["metadata"]["name"] = json!("gadgets.test.keel.dev");
    gadgets["spec"]["scope"] = json!("Cluster");
    gadgets["spec"]["names"] = json!({"plural": "gadgets", "kind": "Gadget"});
    // Two served versions, v1 stored: conversion None rewrites apiVersion only.
    let mut beta = gadgets["spec"]["versions"][0].clone();
    beta["name"] = json!("v1beta1");
    beta["storage"] = json!(false);
    beta["additionalPrinterColumns"] = json!([]);
    gadgets["spec"]["versions"].as_array_mut().context("versions")?.push(beta);
    let (status, body) = json_request(&server, "POST", CRD_PATH, "application/json", &gadgets).await?;
    ensure!(status == 201, "{body}");
    eventually(&server, &format!("{CRD_PATH}/gadgets.test.keel.dev"), |_, crd| {
        crd["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
    })
    .await?;
    let gadget = json!({"apiVersion": "test.keel.dev/v1", "kind": "Gadget", "metadata": {"name": "g1"}, "spec": {"size": 2}});
    let (status, body) =
        json_request(&server, "POST", "/apis/test.keel.dev/v1/gadgets", "application/json", &gadget).await?;
    ensure!(status == 201 && body["metadata"].get("namespace").is_none(), "{body}");
    ensure!(
        get(&server, "/apis/test.keel.dev/v1/namespaces/default/gadgets").await?.0 == 404,
        "cluster scope"
    );
    let table = ok(&kubectl, k, &["get", "gadgets"]).await?;
    ensure!(table.contains("g1"), "{table}");
    let (status, through_beta) = get(&server, "/apis/test.keel.dev/v1beta1/gadgets/g1").await?;
    ensure!(status == 200 && through_beta["apiVersion"] == "test.keel.dev/v1beta1", "{through_beta}");
    let g2 = json!({"apiVersion": "test.keel.dev/v1beta1", "kind": "Gadget", "metadata": {"name": "g2"}, "spec": {"size": 3}});
    let (status, body) =
        json_request(&server, "POST", "/apis/test.keel.dev/v1beta1/gadgets", "application/json", &g2).await?;
    ensure!(status == 201 && body["apiVersion"] == "test.keel.dev/v1beta1", "{body}");
    let (_, through_v1) = get(&server, "/apis/test.keel.dev/v1/gadgets/g2").await?;
    ensure!(
        through_v1["apiVersion"] == "test.keel.dev/v1" && through_v1["spec"]["size"] == 3,
        "{through_v1}"
    );
    // The v1beta1 version declares no columns: its Tables have Name and the default Age.
    let (_, table) = server
        .request(
            "GET",
            "/apis/test.keel.dev/v1beta1/gadgets",
            &[("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
            b"",
        )
        .await
        .map(|(s, _, b)| (s, serde_json::from_str::<Value>(&b).unwrap_or_default()))?;
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str())
        .collect();
    ensure!(columns == ["Name", "Age"] && table["rows"].as_array().map(Vec::len) == Some(2), "{table}");
    let group = get(&server, "/apis/test.keel.dev").await?.1;
    let versions: Vec<&str> =
        group["versions"].as_array().into_iter().flatten().filter_map(|v| v["version"].as_str()).collect();
    ensure!(versions == ["v1", "v1beta1"] && group["preferredVersion"]["version"] == "v1", "{group}");
    // A third CRD asking for a taken short name: NamesAccepted False, not established.
    let mut clash = crd_json()?;
    clash["metadata"]["name"] = json!("things.test.keel.dev");
    clash["spec"]["names"] = json!({"plural": "things", "kind": "Thing", "shortNames": ["wd"]});
    ensure!(json_request(&server, "POST", CRD_PATH, "application/json", &clash).await?.0 == 201, "clash");
    let clash = eventually(&server, &format!("{CRD_PATH}/things.test.keel.dev"), |_, crd| {
        crd["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "NamesAccepted" && c["status"] == "False")
    })
    .await?;
    ensure!(clash["status"]["conditions"].to_string().contains("ShortNamesConflict"), "{clash}");
    ensure!(get(&server, "/apis/test.keel.dev/v1/things").await?.0 == 404, "not served");
    // (Left alone, it would take the short name once the widgets' CRD is gone, as upstream's.)
    ok(&kubectl, k, &["delete", "crd", "things.test.keel.dev"]).await?;

    // The CRD changed: its printer columns follow at once; a change that breaks the rules is refused.
    let renamed = CRD.replace("name: Color", "name: Colour");
    apply(&kubectl, k, &dir, &renamed).await?;
    let mut header = String::new();
    for _ in 0..100 {
        header = ok(&kubectl, k, &["get", "widgets"]).await?.lines().next().unwrap_or_default().to_owned();
        if header.contains("COLOUR") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    ensure!(header.contains("COLOUR"), "{header}");
    let mut current = get(&server, &format!("{CRD_PATH}/widgets.test.keel.dev")).await?.1;
    current["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"]
        ["type"] = json!("");
    current["spec"]["scope"] = json!("Cluster");
    let (status, body) = json_request(
        &server,
        "PUT",
        &format!("{CRD_PATH}/widgets.test.keel.dev"),
        "application/json",
        &current,
    )
    .await?;
    let found = causes(&body);
    ensure!(status == 422, "{status} {body}");
    ensure!(
        found.contains(&"spec.scope: Invalid value: \"Cluster\": field is immutable".to_owned()),
        "{found:?}"
    );
    ensure!(
        found.iter().any(|c| c.starts_with(
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].type: Required value"
        )),
        "{found:?}"
    );

    // A custom resource held by a finalizer holds its CRD's deletion: the CRD is Terminating, creates
    // are refused, and once the finalizer goes the object, then the CRD go.
    let held = json!({"apiVersion": "test.keel.dev/v1", "kind": "Widget",
        "metadata": {"name": "held", "finalizers": ["test.keel.dev/hold"]}, "spec": {"size": 1}});
    ensure!(json_request(&server, "POST", WIDGETS, "application/json", &held).await?.0 == 201, "held");
    ok(&kubectl, k, &["delete", "crd", "widgets.test.keel.dev", "--wait=false"]).await?;
    let terminating = eventually(&server, &format!("{CRD_PATH}/widgets.test.keel.dev"), |_, crd| {
        crd["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Terminating" && c["status"] == "True")
    })
    .await?;
    ensure!(
        terminating["metadata"]["finalizers"] == json!(["customresourcecleanup.apiextensions.k8s.io"]),
        "{terminating}"
    );
    eventually(&server, &format!("{WIDGETS}/w1"), |status, _| status == 404).await?;
    let (status, held_now) = get(&server, &format!("{WIDGETS}/held")).await?;
    ensure!(status == 200 && held_now["metadata"]["deletionTimestamp"].is_string(), "{held_now}");
    let refused = json!({"apiVersion": "test.keel.dev/v1", "kind": "Widget", "metadata": {"name": "late"}, "spec": {"size": 1}});
    let (status, body) = json_request(&server, "POST", WIDGETS, "application/json", &refused).await?;
    ensure!(status == 405, "{status} {body}");
    let (status, _) = json_request(
        &server,
        "PATCH",
        &format!("{WIDGETS}/held"),
        "application/merge-patch+json",
        &json!({"metadata": {"finalizers": null}}),
    )
    .await?;
    ensure!(status == 200, "finalizer removed: {status}");

    // Then the CRD goes, and its resource with it.
    eventually(&server, &format!("{CRD_PATH}/widgets.test.keel.dev"), |status, _| status == 404).await?;
    ensure!(get(&server, WIDGETS).await?.0 == 404, "serving stopped");
    let resources = ok(&kubectl, k, &["api-resources", "--api-group=test.keel.dev"]).await?;
    ensure!(!resources.contains("widgets") && resources.contains("gadgets"), "{resources}");
    // The documents are rebuilt: the v1 document holds gadgets only.
    let mut widget_gone = false;
    for _ in 0..200 {
        let index = get(&server, "/openapi/v3").await?.1;
        let url = index["paths"]["apis/test.keel.dev/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let document = get(&server, &url).await?.1;
        let schemas = &document["components"]["schemas"];
        if schemas.get("dev.keel.test.v1.Gadget").is_some()
            && schemas.get("dev.keel.test.v1.Widget").is_none()
        {
            widget_gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    ensure!(widget_gone, "widgets left the OpenAPI documents");
    // Made again, it is empty: the objects went with it.
    apply(&kubectl, k, &dir, CRD).await?;
    ok(&kubectl, k, &["wait", "--for=condition=Established", "crd/widgets.test.keel.dev", "--timeout=30s"])
        .await?;
    let listed = eventually(&server, WIDGETS, |status, _| status == 200).await?;
    ensure!(listed["items"] == json!([]), "{listed}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_with_kubectl_1_27() -> Result<()> {
    let _turn = TURN.lock().await;
    scenario(common::Server::start().await?, 27).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_with_kubectl_1_30() -> Result<()> {
    let _turn = TURN.lock().await;
    scenario(common::Server::start().await?, 30).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_with_kubectl_1_33() -> Result<()> {
    let _turn = TURN.lock().await;
    scenario(common::Server::start().await?, 33).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_on_etcd() -> Result<()> {
    let _turn = TURN.lock().await;
    let etcd = keel_testbed::etcd::EtcdCluster::start(1)?;
    let options = keel_store::etcd::EtcdOptions::new(etcd.client_urls()).prefix("/keel");
    let store = std::sync::Arc::new(keel_store::etcd::EtcdStore::connect(options).await?);
    scenario(common::Server::start_on(store, tempfile::tempdir()?).await?, 31).await
}

/// A server on `etcd`.
async fn on_etcd(etcd: &keel_testbed::etcd::EtcdCluster) -> Result<common::Server> {
    let options = keel_store::etcd::EtcdOptions::new(etcd.client_urls()).prefix("/keel");
    let store = std::sync::Arc::new(keel_store::etcd::EtcdStore::connect(options).await?);
    common::Server::start_on(store, tempfile::tempdir()?).await
}

/// Stops `server` as a restart would. The registry is process-wide: a stopped server's custom
/// resources leave it (once its connections close), so a server started next serves what its own
/// controllers find.
async fn stop(server: common::Server) -> Result<()> {
    drop(server);
    for _ in 0..200 {
        if keel_api::custom::find("test.keel.dev", "v1", "widgets").is_none() {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    anyhow::bail!("a stopped server's custom resources are still served")
}

/// A second apiserver on the same etcd (as after a restart) serves the custom resources of the
/// CRDs it finds from its first request on: its controllers make their first pass before it serves,
/// and its own watch cache of the resource starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_served_after_a_restart_on_etcd() -> Result<()> {
    let _turn = TURN.lock().await;
    let etcd = keel_testbed::etcd::EtcdCluster::start(1)?;
    let first = on_etcd(&etcd).await?;
    let (status, body) = json_request(&first, "POST", CRD_PATH, "application/json", &crd_json()?).await?;
    ensure!(status == 201, "{body}");
    eventually(&first, WIDGETS, |status, _| status == 200).await?;
    let widget = json!({"apiVersion": "test.keel.dev/v1", "kind": "Widget", "metadata": {"name": "kept"}, "spec": {"size": 2}});
    ensure!(json_request(&first, "POST", WIDGETS, "application/json", &widget).await?.0 == 201, "created");
    stop(first).await?;
    let second = on_etcd(&etcd).await?;
    let (status, kept) = get(&second, &format!("{WIDGETS}/kept")).await?;
    ensure!(status == 200 && kept["spec"]["color"] == "red", "{kept}");
    let listed = get(&second, &format!("{WIDGETS}?resourceVersion=0")).await?.1;
    ensure!(listed["items"].as_array().map(Vec::len) == Some(1), "{listed}");
    let (status, _, table) = second
        .request("GET", WIDGETS, &[("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")], b"")
        .await?;
    let table: Value = serde_json::from_str(&table)?;
    ensure!(status == 200 && table["rows"][0]["cells"][1] == 2, "{table}");
    Ok(())
}

/// A CRD deleted while one of its objects is held by a finalizer stays Terminating across a
/// restart: the new server serves it again (the object can be read and released) instead of
/// dropping the object from the store past its finalizer; once released, the CRD goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminating_crd_after_a_restart_on_etcd() -> Result<()> {
    let _turn = TURN.lock().await;
    let etcd = keel_testbed::etcd::EtcdCluster::start(1)?;
    let first = on_etcd(&etcd).await?;
    let (status, body) = json_request(&first, "POST", CRD_PATH, "application/json", &crd_json()?).await?;
    ensure!(status == 201, "{body}");
    eventually(&first, WIDGETS, |status, _| status == 200).await?;
    let widget = json!({"apiVersion": "test.keel.dev/v1", "kind": "Widget",
        "metadata": {"name": "held", "finalizers": ["test.keel.dev/hold"]}, "spec": {"size": 2}});
    ensure!(json_request(&first, "POST", WIDGETS, "application/json", &widget).await?.0 == 201, "created");
    let crd_path = format!("{CRD_PATH}/widgets.test.keel.dev");
    ensure!(first.request("DELETE", &crd_path, &[], b"").await?.0 == 200, "CRD deleted");
    eventually(&first, &format!("{WIDGETS}/held"), |status, w| {
        status == 200 && w.pointer("/metadata/deletionTimestamp").is_some()
    })
    .await?;
    stop(first).await?;
    let second = on_etcd(&etcd).await?;
    let (status, held) = get(&second, &format!("{WIDGETS}/held")).await?;
    ensure!(status == 200 && held.pointer("/metadata/deletionTimestamp").is_some(), "{status} {held}");
    let (status, created) = json_request(
        &second,
        "POST",
        WIDGETS,
        "application/json",
        &json!({"apiVersion": "test.keel.dev/v1", "kind": "Widget", "metadata": {"name": "new"}, "spec": {"size": 1}}),
    )
    .await?;
    ensure!(status == 405, "no creates while terminating: {status} {created}");
    let release = json!({"metadata": {"finalizers": null}});
    let (status, body) =
        json_request(&second, "PATCH", &format!("{WIDGETS}/held"), "application/merge-patch+json", &release)
            .await?;
    ensure!(status == 200, "{body}");
    eventually(&second, &crd_path, |status, _| status == 404).await?;
    Ok(())
}
