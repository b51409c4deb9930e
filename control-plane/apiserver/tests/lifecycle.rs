//! Object lifecycles as kube-apiserver runs them: spec and status written through their own
//! endpoints with generation following the spec, the scale subresource (kubectl scale), dry runs,
//! deletion held by finalizers and propagation policies, graceful pod deletion, namespaces
//! Terminating until finalized, preconditions and deletecollection.

use crate::common;

use std::path::Path;

use anyhow::{Result, ensure};
use common::Server;
use keel_testbed::kubectl::{self, Kubectl};
use serde_json::{Value, json};

fn kubectl(kubectl: &Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<(bool, String, String)> {
    let output = kubectl.command().arg("--kubeconfig").arg(kubeconfig).args(args).output()?;
    Ok((
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into(),
        String::from_utf8_lossy(&output.stderr).into(),
    ))
}

fn ok(k: &Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let (success, out, err) = kubectl(k, kubeconfig, args)?;
    ensure!(success, "kubectl {args:?}: {err}");
    Ok(out)
}

fn get(k: &Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    Ok(serde_json::from_str(&ok(k, kubeconfig, &all)?)?)
}

async fn setup() -> Result<(Server, Kubectl, std::path::PathBuf)> {
    let server = Server::start().await?;
    let kubeconfig = server.dir.path().join("admin.kubeconfig");
    std::fs::write(&kubeconfig, server.pki.admin_kubeconfig(&format!("https://{}", server.address)))?;
    Ok((server, kubectl::minor(31)?, kubeconfig))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spec_status_generation_and_scale() -> Result<()> {
    let (server, k, kc) = setup().await?;
    ok(&k, &kc, &["create", "deployment", "web", "--image=busybox", "--replicas=2"])?;
    let d = get(&k, &kc, &["get", "deployment", "web"])?;
    ensure!(d["metadata"]["generation"] == 1 && d.get("status").is_none(), "{d}");

    ok(&k, &kc, &["scale", "deployment", "web", "--replicas=5"])?;
    let d = get(&k, &kc, &["get", "deployment", "web"])?;
    ensure!(d["spec"]["replicas"] == 5 && d["metadata"]["generation"] == 2, "{d}");
    let (status, _, scale) =
        server.request("GET", "/apis/apps/v1/namespaces/default/deployments/web/scale", &[], b"").await?;
    let scale: Value = serde_json::from_str(&scale)?;
    ensure!(status == 200 && scale["kind"] == "Scale" && scale["spec"]["replicas"] == 5, "{scale}");
    ensure!(scale["status"]["selector"] == "app=web", "{scale}");

    // Through /status only the status changes; through the main resource only the rest.
    let mut body = d.clone();
    body["status"] = json!({"replicas": 5, "readyReplicas": 5});
    body["spec"]["replicas"] = json!(9);
    let path = "/apis/apps/v1/namespaces/default/deployments/web";
    let json_type = [("Content-Type", "application/json")];
    let (status, _, answer) =
        server.request("PUT", &format!("{path}/status"), &json_type, body.to_string().as_bytes()).await?;
    ensure!(status == 200, "{answer}");
    let d = get(&k, &kc, &["get", "deployment", "web"])?;
    ensure!(
        d["spec"]["replicas"] == 5 && d["status"]["readyReplicas"] == 5 && d["metadata"]["generation"] == 2,
        "{d}"
    );
    let mut body = d.clone();
    body["status"]["readyReplicas"] = json!(0);
    body["metadata"]["labels"] = json!({"team": "a"});
    let (status, _, answer) = server.request("PUT", path, &json_type, body.to_string().as_bytes()).await?;
    ensure!(status == 200, "{answer}");
    let d = get(&k, &kc, &["get", "deployment", "web"])?;
    ensure!(d["status"]["readyReplicas"] == 5 && d["metadata"]["labels"]["team"] == "a", "{d}");
    ensure!(d["metadata"]["generation"] == 2, "a label change moved the generation: {d}");

    // Dry runs answer as if written and keep nothing.
    ok(&k, &kc, &["create", "configmap", "dry", "--dry-run=server"])?;
    let (exists, _, _) = kubectl(&k, &kc, &["get", "configmap", "dry"])?;
    ensure!(!exists, "a server dry run was stored");
    ok(&k, &kc, &["scale", "deployment", "web", "--replicas=1", "--dry-run=server"])?;
    ensure!(get(&k, &kc, &["get", "deployment", "web"])?["spec"]["replicas"] == 5);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_finalizers_propagation_and_grace() -> Result<()> {
    let (server, k, kc) = setup().await?;
    for name in ["orphaned", "foreground", "background"] {
        ok(&k, &kc, &["create", "deployment", name, "--image=busybox"])?;
    }
    // --cascade=orphan and =foreground record their finalizer and hold the object.
    ok(&k, &kc, &["delete", "deployment", "orphaned", "--cascade=orphan", "--wait=false"])?;
    let d = get(&k, &kc, &["get", "deployment", "orphaned"])?;
    ensure!(
        d["metadata"]["finalizers"] == json!(["orphan"]) && d["metadata"]["deletionTimestamp"].is_string(),
        "{d}"
    );
    ok(&k, &kc, &["delete", "deployment", "foreground", "--cascade=foreground", "--wait=false"])?;
    let d = get(&k, &kc, &["get", "deployment", "foreground"])?;
    ensure!(d["metadata"]["finalizers"] == json!(["foregroundDeletion"]), "{d}");
    ok(&k, &kc, &["delete", "deployment", "background", "--cascade=background"])?;
    let (exists, _, _) = kubectl(&k, &kc, &["get", "deployment", "background"])?;
    ensure!(!exists);
    // Removing the last finalizer completes the deletion.
    ok(
        &k,
        &kc,
        &[
            "patch",
            "deployment",
            "orphaned",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
    )?;
    let (exists, _, _) = kubectl(&k, &kc, &["get", "deployment", "orphaned"])?;
    ensure!(!exists, "the object outlived its last finalizer");

    // A pod bound to a node waits its grace period; one that is not is deleted at once.
    let pods = "/api/v1/namespaces/default/pods";
    let json_type = [("Content-Type", "application/json")];
    let pod = |name: &str, node: Option<&str>| {
        let mut pod =
            json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}});
        if let Some(node) = node {
            pod["spec"]["nodeName"] = node.into();
        }
        pod.to_string()
    };
    for (name, node) in [("bound", Some("node1")), ("pending", None)] {
        let (status, _, answer) =
            server.request("POST", pods, &json_type, pod(name, node).as_bytes()).await?;
        ensure!(status == 201, "{answer}");
    }
    ok(&k, &kc, &["delete", "pod", "bound", "--wait=false"])?;
    let p = get(&k, &kc, &["get", "pod", "bound"])?;
    ensure!(
        p["metadata"]["deletionGracePeriodSeconds"] == 30 && p["metadata"]["deletionTimestamp"].is_string(),
        "{p}"
    );
    ensure!(p["status"]["phase"] == "Pending", "{p}");
    // A second delete with a shorter grace period shortens it.
    ok(&k, &kc, &["delete", "pod", "bound", "--grace-period=10", "--wait=false"])?;
    let p = get(&k, &kc, &["get", "pod", "bound"])?;
    ensure!(p["metadata"]["deletionGracePeriodSeconds"] == 10, "{p}");
    ok(&k, &kc, &["delete", "pod", "pending", "--wait=false"])?;
    ensure!(!kubectl(&k, &kc, &["get", "pod", "pending"])?.0);
    // The kubelet's final delete (grace 0) removes it.
    ok(&k, &kc, &["delete", "pod", "bound", "--grace-period=0", "--force"])?;
    ensure!(!kubectl(&k, &kc, &["get", "pod", "bound"])?.0);

    // Preconditions.
    ok(&k, &kc, &["create", "configmap", "guarded"])?;
    let body = json!({"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": "not-its-uid"}})
        .to_string();
    let (status, _, answer) = server
        .request("DELETE", "/api/v1/namespaces/default/configmaps/guarded", &json_type, body.as_bytes())
        .await?;
    ensure!(
        status == 409 && answer.contains("Precondition failed: UID in precondition"),
        "{status} {answer}"
    );

    // deletecollection with a selector.
    for (name, tier) in [("a", "x"), ("b", "x"), ("c", "y")] {
        ok(&k, &kc, &["create", "configmap", name])?;
        ok(&k, &kc, &["label", "configmap", name, &format!("tier={tier}")])?;
    }
    let (status, _, answer) = server
        .request("DELETE", "/api/v1/namespaces/default/configmaps?labelSelector=tier%3Dx", &[], b"")
        .await?;
    ensure!(status == 200, "{answer}");
    let left = ok(&k, &kc, &["get", "configmaps", "-l", "tier", "-o", "name"])?;
    ensure!(left.trim() == "configmap/c", "{left}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_terminate_until_finalized() -> Result<()> {
    let (server, k, kc) = setup().await?;
    ok(&k, &kc, &["create", "namespace", "going"])?;
    let ns = get(&k, &kc, &["get", "namespace", "going"])?;
    ensure!(ns["spec"]["finalizers"] == json!(["kubernetes"]) && ns["status"]["phase"] == "Active", "{ns}");
    ok(&k, &kc, &["delete", "namespace", "going", "--wait=false"])?;
    let ns = get(&k, &kc, &["get", "namespace", "going"])?;
    ensure!(ns["status"]["phase"] == "Terminating", "{ns}");
    let (created, _, err) = kubectl(&k, &kc, &["create", "configmap", "late", "-n", "going"])?;
    ensure!(!created && err.contains("because it is being terminated"), "{err}");
    // The namespace controller's last step: empty spec.finalizers through /finalize.
    let mut body = ns.clone();
    body["spec"]["finalizers"] = json!([]);
    let (status, _, answer) = server
        .request(
            "PUT",
            "/api/v1/namespaces/going/finalize",
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
        )
        .await?;
    ensure!(status == 200, "{answer}");
    ensure!(!kubectl(&k, &kc, &["get", "namespace", "going"])?.0, "the finalized namespace is still there");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_and_list_resource_versions() -> Result<()> {
    let (server, k, kc) = setup().await?;
    let json_type = [("Content-Type", "application/json")];
    let pods = "/api/v1/namespaces/default/pods";
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
        .to_string();
    ensure!(server.request("POST", pods, &json_type, pod.as_bytes()).await?.0 == 201);
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "node1"}}).to_string();
    let (status, _, answer) =
        server.request("POST", &format!("{pods}/p/binding"), &json_type, binding.as_bytes()).await?;
    ensure!(status == 201 && answer.contains("Success"), "{status} {answer}");
    let bound = get(&k, &kc, &["get", "pod", "p"])?;
    ensure!(bound["spec"]["nodeName"] == "node1", "{bound}");
    ensure!(
        bound["status"]["conditions"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["type"] == "PodScheduled" && c["status"] == "True")),
        "the binding marks the pod scheduled: {bound}"
    );
    let (status, _, answer) =
        server.request("POST", &format!("{pods}/p/binding"), &json_type, binding.as_bytes()).await?;
    ensure!(
        status == 409 && answer.contains(r#"Operation cannot be fulfilled on pods/binding \"p\": pod p is already assigned to node \"node1\""#),
        "{status} {answer}"
    );
    let misnamed = binding.replace(r#""name":"p""#, r#""name":"q""#);
    let (status, _, answer) =
        server.request("POST", &format!("{pods}/p/binding"), &json_type, misnamed.as_bytes()).await?;
    ensure!(
        status == 400 && answer.contains("name in URL does not match name in Binding object"),
        "{status} {answer}"
    );

    // resourceVersion / resourceVersionMatch on lists, as kube-apiserver reads them.
    let cms = "/api/v1/namespaces/default/configmaps";
    let first = get(&k, &kc, &["create", "configmap", "v1"])?;
    let at = first["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_owned();
    ok(&k, &kc, &["create", "configmap", "v2"])?;
    let names = |body: &str| -> Result<Vec<String>> {
        let list: Value = serde_json::from_str(body)?;
        Ok(list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned))
            .collect())
    };
    let (_, _, exact) = server
        .request("GET", &format!("{cms}?resourceVersion={at}&resourceVersionMatch=Exact"), &[], b"")
        .await?;
    ensure!(names(&exact)? == ["v1"], "{exact}");
    let (_, _, newer) = server
        .request("GET", &format!("{cms}?resourceVersion={at}&resourceVersionMatch=NotOlderThan"), &[], b"")
        .await?;
    ensure!(names(&newer)? == ["v1", "v2"], "{newer}");
    let (_, _, legacy) = server.request("GET", &format!("{cms}?resourceVersion={at}"), &[], b"").await?;
    ensure!(names(&legacy)? == ["v1", "v2"], "{legacy}");
    let (status, _, answer) =
        server.request("GET", &format!("{cms}?resourceVersionMatch=Exact"), &[], b"").await?;
    ensure!(status == 422, "{status} {answer}");
    let (status, _, answer) = server
        .request("GET", &format!("{cms}?resourceVersion=999999&resourceVersionMatch=NotOlderThan"), &[], b"")
        .await?;
    ensure!(status == 504 && answer.contains("Too large resource version"), "{status} {answer}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategic_merge_patches_from_kubectl() -> Result<()> {
    let (_server, k, kc) = setup().await?;
    // kubectl patch's default type is strategic: containers merge by name.
    ok(&k, &kc, &["create", "deployment", "web", "--image=busybox:1", "--port=80"])?;
    let patch = r#"{"spec":{"template":{"spec":{"containers":[{"name":"busybox","image":"busybox:2"},{"name":"side","image":"pause"}]}}}}"#;
    ok(&k, &kc, &["patch", "deployment", "web", "-p", patch])?;
    let web = get(&k, &kc, &["get", "deployment", "web"])?;
    let containers = &web["spec"]["template"]["spec"]["containers"];
    ensure!(
        containers[0]["image"] == "busybox:2" && containers[0]["ports"][0]["containerPort"] == 80,
        "the container is merged, its ports kept: {containers}"
    );
    ensure!(containers[1]["name"] == "side", "a new container is added: {containers}");
    let (patched, _, err) =
        kubectl(&k, &kc, &["patch", "deployment", "web", "-p", r#"{"spec":{"$patch":"explode"}}"#])?;
    ensure!(!patched && err.contains("unknown patch type"), "a patch that does not apply: {err}");
    // Client-side apply, twice: the second sends a three-way strategic merge patch.
    let dir = tempfile::tempdir()?;
    let manifest = dir.path().join("cm.yaml");
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  labels: {a: '1', b: '2'}\ndata: {k: v}\n",
    )?;
    let file = manifest.to_str().unwrap_or_default();
    ok(&k, &kc, &["apply", "-f", file])?;
    std::fs::write(
        &manifest,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  labels: {a: '1'}\ndata: {k: w}\n",
    )?;
    ok(&k, &kc, &["apply", "-f", file])?;
    let applied = get(&k, &kc, &["get", "configmap", "applied"])?;
    ensure!(applied["data"]["k"] == "w" && applied["metadata"]["labels"] == json!({"a": "1"}), "{applied}");
    Ok(())
}
