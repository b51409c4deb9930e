//! Server-side apply and managedFields, on both store backends: kubectl `apply --server-side`
//! (1.27, 1.30, 1.33) creating, re-applying changed manifests, removing fields dropped from them,
//! conflicting with `kubectl scale` and a second field manager and winning with
//! `--force-conflicts`; managedFields of creates, updates and patches as `get --show-managed-fields`
//! shows them; kube-rs `Patch::Apply` with and without force; bad input answered with upstream's
//! status and nothing stored.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use common::{Server, kubectl_ok as ok, kubectl_run as run};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use keel_store::Store;
use keel_store::embedded::{EmbeddedStore, Options};
use keel_store::etcd::{EtcdOptions, EtcdStore};
use keel_testbed::etcd::EtcdCluster;
use keel_testbed::kubectl::{self, Kubectl};
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

/// A server on one backend, its kubeconfig, and what keeps the backend alive.
struct Cluster {
    server: Server,
    kubeconfig: std::path::PathBuf,
    _etcd: Option<EtcdCluster>,
}

async fn start(etcd: bool) -> Result<Cluster> {
    let dir = tempfile::tempdir()?;
    let (store, cluster): (Arc<dyn Store>, _) = if etcd {
        let cluster = EtcdCluster::start(1)?;
        let store = EtcdStore::connect(EtcdOptions::new(cluster.client_urls()).prefix("/keel")).await?;
        (Arc::new(store), Some(cluster))
    } else {
        (Arc::new(EmbeddedStore::open(Options::new(dir.path().join("data")))?), None)
    };
    let server = Server::start_on(store, dir).await?;
    let kubeconfig = server.dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.pki.admin_kubeconfig(&format!("https://{}", server.address)))?;
    Ok(Cluster { server, kubeconfig, _etcd: cluster })
}

impl Cluster {
    async fn client(&self) -> Result<kube::Client> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }
}

const MANIFEST: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: main
        image: busybox:1
        ports:
        - containerPort: 80
        env:
        - {name: A, value: a}
        - {name: B, value: b}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  a: '1'
  b: '2'
";

fn entries(object: &Value) -> Vec<(String, String, String)> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    let text = |f: &str| e[f].as_str().unwrap_or_default().to_owned();
                    (text("manager"), text("operation"), text("subresource"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn entry<'a>(object: &'a Value, manager: &str, operation: &str) -> Option<&'a Value> {
    object["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
}

async fn get(kubectl: &Kubectl, k: &Path, what: &str) -> Result<Value> {
    Ok(serde_json::from_str(&ok(kubectl, k, &["get", what, "-o", "json", "--show-managed-fields"]).await?)?)
}

async fn kubectl_scenario(minor: u32, etcd: bool) -> Result<()> {
    let kubectl = kubectl::minor(minor)?;
    let cluster = start(etcd).await?;
    let k = cluster.kubeconfig.as_path();
    let dir = tempfile::tempdir()?;
    let manifest = dir.path().join("manifest.yaml");
    let file = manifest.to_str().context("path")?;
    std::fs::write(&manifest, MANIFEST)?;

    // Create through apply.
    let out = ok(&kubectl, k, &["apply", "--server-side", "-f", file]).await?;
    ensure!(out.contains("deployment.apps/web serverside-applied"), "{out}");
    ensure!(out.contains("configmap/settings serverside-applied"), "{out}");
    let web = get(&kubectl, k, "deployment/web").await?;
    ensure!(entries(&web) == [("kubectl".into(), "Apply".into(), String::new())], "{:?}", entries(&web));
    let applied = entry(&web, "kubectl", "Apply").context("no kubectl entry")?;
    ensure!(applied["apiVersion"] == "apps/v1" && applied["fieldsType"] == "FieldsV1", "{applied}");
    let fields = &applied["fieldsV1"];
    ensure!(fields["f:spec"]["f:replicas"] == json!({}), "{fields}");
    ensure!(fields["f:spec"]["f:selector"] == json!({}), "the selector is atomic: {fields}");
    let container = &fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"main\"}"];
    ensure!(container["."] == json!({}) && container["f:image"] == json!({}), "{fields}");
    ensure!(
        container["f:ports"]["k:{\"containerPort\":80,\"protocol\":\"TCP\"}"]["f:containerPort"] == json!({}),
        "{fields}"
    );
    ensure!(
        web["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent",
        "defaulted"
    );
    // Without --show-managed-fields kubectl hides them.
    let plain: Value =
        serde_json::from_str(&ok(&kubectl, k, &["get", "deployment/web", "-o", "json"]).await?)?;
    ensure!(plain["metadata"].get("managedFields").is_none(), "{plain}");

    // Re-applied changed: the image changes, env B and data.b, dropped from the manifest, go.
    let changed = MANIFEST.replace("busybox:1", "busybox:2").replace("        - {name: B, value: b}\n", "");
    let changed = changed.replace("  b: '2'\n", "");
    std::fs::write(&manifest, &changed)?;
    ok(&kubectl, k, &["apply", "--server-side", "-f", file]).await?;
    let web = get(&kubectl, k, "deployment/web").await?;
    let main = &web["spec"]["template"]["spec"]["containers"][0];
    ensure!(main["image"] == "busybox:2", "{main}");
    ensure!(main["env"] == json!([{"name": "A", "value": "a"}]), "{main}");
    let settings = get(&kubectl, k, "configmap/settings").await?;
    ensure!(settings["data"] == json!({"a": "1"}), "{settings}");

    // kubectl scale takes .spec.replicas through the scale subresource.
    ok(&kubectl, k, &["scale", "deployment/web", "--replicas=5"]).await?;
    let web = get(&kubectl, k, "deployment/web").await?;
    ensure!(web["spec"]["replicas"] == 5, "{web}");
    let scaler = web["metadata"]["managedFields"]
        .as_array()
        .and_then(|entries| entries.iter().find(|e| e["subresource"] == "scale"))
        .context("no scale entry")?
        .clone();
    ensure!(
        scaler["operation"] == "Update" && scaler["fieldsV1"] == json!({"f:spec": {"f:replicas": {}}}),
        "{scaler}"
    );
    let scaler_name = scaler["manager"].as_str().context("manager")?.to_owned();
    ensure!(scaler_name.starts_with("kubectl"), "the user agent's program: {scaler_name}");

    // Applying replicas: 2 again conflicts.
    let (success, _, err) = run(&kubectl, k, &["apply", "--server-side", "-f", file]).await?;
    ensure!(!success, "the apply should conflict");
    let expected = format!(
        "Apply failed with 1 conflict: conflict with \"{scaler_name}\" with subresource \"scale\" using apps/v1: .spec.replicas"
    );
    ensure!(err.contains(&expected), "{err}");
    ensure!(get(&kubectl, k, "deployment/web").await?["spec"]["replicas"] == 5, "nothing written");

    // --force-conflicts wins; the scaler, left with nothing, goes.
    ok(&kubectl, k, &["apply", "--server-side", "--force-conflicts", "-f", file]).await?;
    let web = get(&kubectl, k, "deployment/web").await?;
    ensure!(web["spec"]["replicas"] == 2, "{web}");
    ensure!(!entries(&web).iter().any(|(_, _, sub)| sub == "scale"), "{:?}", entries(&web));

    // A second field manager changing the image conflicts with kubectl's ownership.
    let other = dir.path().join("other.yaml");
    std::fs::write(
        &other,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    spec:\n      containers:\n      - {name: main, image: busybox:3}\n",
    )?;
    let other = other.to_str().context("path")?;
    let args = ["apply", "--server-side", "--field-manager=other", "-f", other];
    let (success, _, err) = run(&kubectl, k, &args).await?;
    ensure!(!success, "should conflict");
    ensure!(
        err.contains("conflict with \"kubectl\": .spec.template.spec.containers[name=\"main\"].image"),
        "{err}"
    );
    let forced = ["apply", "--server-side", "--field-manager=other", "--force-conflicts", "-f", other];
    ok(&kubectl, k, &forced).await?;
    let web = get(&kubectl, k, "deployment/web").await?;
    ensure!(web["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:3", "{web}");
    let names: Vec<String> = entries(&web).into_iter().map(|(m, o, _)| format!("{m}/{o}")).collect();
    ensure!(names == ["kubectl/Apply", "other/Apply"], "{names:?}");

    // Updates are recorded: a label through kubectl label (a merge patch).
    ok(&kubectl, k, &["label", "configmap", "settings", "tier=web"]).await?;
    let settings = get(&kubectl, k, "configmap/settings").await?;
    let labeler = settings["metadata"]["managedFields"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["operation"] == "Update"))
        .context("no Update entry")?;
    ensure!(labeler["fieldsV1"] == json!({"f:metadata": {"f:labels": {".": {}, "f:tier": {}}}}), "{labeler}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_27_server_side_apply() -> Result<()> {
    kubectl_scenario(27, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_30_server_side_apply() -> Result<()> {
    kubectl_scenario(30, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_33_server_side_apply() -> Result<()> {
    kubectl_scenario(33, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_30_server_side_apply_on_etcd() -> Result<()> {
    kubectl_scenario(30, true).await
}

const GATEWAY_CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gateways.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gateways, singular: gateway, kind: Gateway}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              listeners:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    port: {type: integer}
              hosts:
                type: array
                x-kubernetes-list-type: set
                items: {type: string}
              tags:
                type: array
                items: {type: string}
";

fn gateway(listener: &str, port: u16, host: &str, tag: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Gateway\nmetadata: {{name: gw}}\nspec:\n  listeners:\n  - {{name: {listener}, port: {port}}}\n  hosts: [{host}]\n  tags: [{tag}]\n"
    )
}

/// Server-side apply on a custom resource reads its CRD's list types: two managers' listeners
/// (`x-kubernetes-list-type: map`) and hosts (`set`) merge item by item, while an untyped list is
/// atomic and conflicts; a manager dropping its listener removes only its own.
async fn custom_resource_lists(etcd: bool) -> Result<()> {
    let kubectl = kubectl::minor(33)?;
    let cluster = start(etcd).await?;
    let k = cluster.kubeconfig.as_path();
    let dir = tempfile::tempdir()?;
    let write = |name: &str, text: &str| -> Result<String> {
        let path = dir.path().join(name);
        std::fs::write(&path, text)?;
        Ok(path.to_str().context("path")?.to_owned())
    };
    ok(&kubectl, k, &["apply", "--server-side", "-f", &write("crd.yaml", GATEWAY_CRD)?]).await?;
    ok(&kubectl, k, &["wait", "--for=condition=Established", "crd/gateways.example.com"]).await?;
    let a = write("a.yaml", &gateway("http", 80, "a.example", "t"))?;
    ok(&kubectl, k, &["apply", "--server-side", "--field-manager=a", "-f", &a]).await?;
    // b's listener and host join a's; its tags (an atomic list) conflict with a's.
    let b = write("b.yaml", &gateway("https", 443, "b.example", "u"))?;
    let (success, _, err) =
        run(&kubectl, k, &["apply", "--server-side", "--field-manager=b", "-f", &b]).await?;
    ensure!(!success && err.contains(r#"conflict with "a""#) && err.contains(".spec.tags"), "{err}");
    ensure!(!err.contains(".spec.listeners") && !err.contains(".spec.hosts"), "{err}");
    let same_tag = write("b2.yaml", &gateway("https", 443, "b.example", "t"))?;
    ok(&kubectl, k, &["apply", "--server-side", "--field-manager=b", "-f", &same_tag]).await?;
    let gw = get(&kubectl, k, "gateway/gw").await?;
    ensure!(
        gw["spec"]["listeners"] == json!([{"name": "http", "port": 80}, {"name": "https", "port": 443}]),
        "{gw}"
    );
    ensure!(gw["spec"]["hosts"] == json!(["a.example", "b.example"]), "{gw}");
    let owned = &entry(&gw, "b", "Apply").context("no entry of b")?["fieldsV1"]["f:spec"];
    ensure!(owned["f:listeners"].get(r#"k:{"name":"https"}"#).is_some(), "{owned}");
    ensure!(owned["f:hosts"].get(r#"v:"b.example""#).is_some(), "{owned}");
    // a stops applying its listener and host: they go, b's stay.
    let a_only_tags = write(
        "a2.yaml",
        "apiVersion: example.com/v1\nkind: Gateway\nmetadata: {name: gw}\nspec:\n  tags: [t]\n",
    )?;
    ok(&kubectl, k, &["apply", "--server-side", "--field-manager=a", "-f", &a_only_tags]).await?;
    let gw = get(&kubectl, k, "gateway/gw").await?;
    ensure!(gw["spec"]["listeners"] == json!([{"name": "https", "port": 443}]), "{gw}");
    ensure!(gw["spec"]["hosts"] == json!(["b.example"]), "{gw}");
    ensure!(gw["spec"]["tags"] == json!(["t"]), "{gw}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resource_lists_merge_by_their_crd_list_types() -> Result<()> {
    custom_resource_lists(false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resource_lists_merge_by_their_crd_list_types_on_etcd() -> Result<()> {
    custom_resource_lists(true).await
}

/// Creates and updates by kubectl (client-side apply, edit-like replace) record Update entries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_are_tracked() -> Result<()> {
    let kubectl = kubectl::minor(31)?;
    let cluster = start(false).await?;
    let k = cluster.kubeconfig.as_path();
    let dir = tempfile::tempdir()?;
    let manifest = dir.path().join("cm.yaml");
    std::fs::write(&manifest, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '1'}\n")?;
    let file = manifest.to_str().context("path")?;
    ok(&kubectl, k, &["apply", "-f", file]).await?;
    let created = get(&kubectl, k, "configmap/c").await?;
    let client_side =
        entry(&created, "kubectl-client-side-apply", "Update").context("no client-side apply entry")?;
    ensure!(
        client_side["apiVersion"] == "v1" && client_side["time"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{client_side}"
    );
    ensure!(client_side["fieldsV1"]["f:data"] == json!({".": {}, "f:a": {}}), "{client_side}");
    ensure!(
        client_side["fieldsV1"]["f:metadata"]["f:annotations"]["f:kubectl.kubernetes.io/last-applied-configuration"]
            == json!({}),
        "{client_side}"
    );
    // What the server makes is the server's.
    let class = get(&kubectl, k, "priorityclass/system-node-critical").await?;
    ensure!(entry(&class, "kube-apiserver", "Update").is_some(), "{:?}", entries(&class));
    // A server-side apply now conflicts with the client-side applier's value.
    std::fs::write(&manifest, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: '2'}\n")?;
    let (success, _, err) = run(&kubectl, k, &["apply", "--server-side", "-f", file]).await?;
    ensure!(!success);
    ensure!(
        err.contains(
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using v1: .data.a"
        ),
        "{err}"
    );
    Ok(())
}

fn deployment(image: &str, replicas: i32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "rs"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "rs"}},
                 "template": {"metadata": {"labels": {"app": "rs"}},
                              "spec": {"containers": [{"name": "main", "image": image}]}}}})
}

async fn kube_rs_apply(etcd: bool) -> Result<()> {
    let cluster = start(etcd).await?;
    let client = cluster.client().await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let params = PatchParams::apply("mgr");
    let created = deployments.patch("rs", &params, &Patch::Apply(deployment("busybox:1", 1))).await?;
    let managed = created.metadata.managed_fields.clone().unwrap_or_default();
    ensure!(managed.len() == 1, "{managed:?}");
    ensure!(managed[0].manager.as_deref() == Some("mgr") && managed[0].operation.as_deref() == Some("Apply"));
    // Another manager with another image conflicts (409, reason Conflict, a FieldManagerConflict cause).
    let err = deployments
        .patch("rs", &PatchParams::apply("second"), &Patch::Apply(deployment("busybox:2", 1)))
        .await
        .expect_err("conflict");
    let kube::Error::Api(status) = err else { anyhow::bail!("{err}") };
    ensure!(status.code == 409 && status.reason == "Conflict", "{status:?}");
    ensure!(
        status.message
            == "Apply failed with 1 conflict: conflict with \"mgr\": .spec.template.spec.containers[name=\"main\"].image",
        "{}",
        status.message
    );
    // Forced: taken.
    let forced = deployments
        .patch("rs", &PatchParams::apply("second").force(), &Patch::Apply(deployment("busybox:2", 1)))
        .await?;
    ensure!(
        forced.spec.as_ref().and_then(|s| s.template.spec.as_ref()).map(|s| s.containers[0].image.clone())
            == Some(Some("busybox:2".into()))
    );
    // The status subresource applies status alone and records its own entry.
    let status_config = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "rs"},
        "spec": {"replicas": 9}, "status": {"observedGeneration": 1, "replicas": 3}});
    let with_status = deployments
        .patch_status("rs", &PatchParams::apply("status-mgr"), &Patch::Apply(status_config))
        .await?;
    ensure!(with_status.status.as_ref().and_then(|s| s.replicas) == Some(3));
    ensure!(with_status.spec.as_ref().and_then(|s| s.replicas) == Some(1), "spec untouched through status");
    let entry = with_status
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.manager.as_deref() == Some("status-mgr"))
        .context("no status entry")?;
    ensure!(entry.subresource.as_deref() == Some("status"), "{entry:?}");
    ensure!(
        entry.fields_v1.map(|f| f.0)
            == Some(json!({"f:status": {"f:observedGeneration": {}, "f:replicas": {}}})),
        "status fields only"
    );

    // A dry run writes nothing.
    let dry = PatchParams { dry_run: true, ..PatchParams::apply("mgr").force() };
    let preview = deployments.patch("rs", &dry, &Patch::Apply(deployment("busybox:1", 7))).await?;
    ensure!(preview.spec.as_ref().and_then(|s| s.replicas) == Some(7));
    ensure!(deployments.get("rs").await?.spec.and_then(|s| s.replicas) == Some(1), "dry run stored nothing");

    // The raw Status of a conflict, as kubectl and client-go read it.
    let body = serde_json::to_vec(&deployment("busybox:9", 1))?;
    let (code, _, text) = cluster
        .server
        .request(
            "PATCH",
            "/apis/apps/v1/namespaces/default/deployments/rs?fieldManager=third",
            &[("Content-Type", "application/apply-patch+yaml")],
            &body,
        )
        .await?;
    let status: Value = serde_json::from_str(&text)?;
    ensure!(code == 409 && status["reason"] == "Conflict", "{text}");
    ensure!(
        status["details"]["causes"]
            == json!([{"reason": "FieldManagerConflict", "message": "conflict with \"second\"",
                       "field": ".spec.template.spec.containers[name=\"main\"].image"}]),
        "{text}"
    );

    // A stale resourceVersion in the configuration is a precondition that fails.
    let mut stale = deployment("busybox:2", 1);
    stale["metadata"]["resourceVersion"] = json!("1");
    let err = deployments
        .patch("rs", &PatchParams::apply("second"), &Patch::Apply(stale))
        .await
        .expect_err("stale");
    let kube::Error::Api(status) = err else { anyhow::bail!("{err}") };
    ensure!(status.code == 409 && status.message.contains("the object has been modified"), "{status:?}");

    // managedFields a client writes: undecodable ones are replaced by the live object's, `[{}]` clears them.
    let bogus = json!({"metadata": {"managedFields": [{"manager": "x", "operation": "Bogus"}]}});
    let kept = deployments.patch("rs", &PatchParams::default(), &Patch::Merge(bogus)).await?;
    let managers: Vec<Option<String>> =
        kept.metadata.managed_fields.unwrap_or_default().into_iter().map(|e| e.manager).collect();
    ensure!(
        managers.contains(&Some("second".into())) && !managers.contains(&Some("x".into())),
        "{managers:?}"
    );
    let reset = json!({"metadata": {"managedFields": [{}]}});
    let cleared = deployments.patch("rs", &PatchParams::default(), &Patch::Merge(reset)).await?;
    ensure!(cleared.metadata.managed_fields.is_none(), "{:?}", cleared.metadata.managed_fields);

    // Config maps applied by two managers keep both managers' keys; one manager dropping its key removes it.
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "m"}, "data": data});
    maps.patch("m", &PatchParams::apply("a"), &Patch::Apply(cm(json!({"x": "1", "y": "1"})))).await?;
    maps.patch("m", &PatchParams::apply("b"), &Patch::Apply(cm(json!({"z": "1"})))).await?;
    let m = maps.patch("m", &PatchParams::apply("a"), &Patch::Apply(cm(json!({"x": "1"})))).await?;
    let keys: Vec<String> = m.data.unwrap_or_default().into_keys().collect();
    ensure!(keys == ["x", "z"], "{keys:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_patch_apply() -> Result<()> {
    kube_rs_apply(false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_patch_apply_on_etcd() -> Result<()> {
    kube_rs_apply(true).await
}

/// Custom resources are applied under their CRD's schema: entries of an `x-kubernetes-list-type:
/// map` list and of a `set` are owned one by one (two managers' entries merged), lists without a
/// list type are atomic (another manager's value conflicts as a whole).
async fn custom_resources_on(etcd: bool) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let cluster = start(etcd).await?;
    let client = cluster.client().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gateways.ssa.keel.dev"},
        "spec": {"group": "ssa.keel.dev", "scope": "Namespaced",
                 "names": {"plural": "gateways", "singular": "gateway", "kind": "Gateway"},
                 "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                     "type": "object", "properties": {"spec": {"type": "object", "properties": {
                         "listeners": {"type": "array", "x-kubernetes-list-type": "map",
                                       "x-kubernetes-list-map-keys": ["name"],
                                       "items": {"type": "object", "required": ["name"], "properties": {
                                           "name": {"type": "string"}, "port": {"type": "integer"}}}},
                         "hosts": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                         "notes": {"type": "array", "items": {"type": "string"}}}}}}}}]}}))?;
    crds.patch("gateways.ssa.keel.dev", &PatchParams::apply("test"), &Patch::Apply(&crd)).await?;
    let mut established = false;
    for _ in 0..200 {
        let crd = crds.get("gateways.ssa.keel.dev").await?;
        let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        if conditions.iter().any(|c| c.type_ == "Established" && c.status == "True") {
            established = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    ensure!(established, "the CRD was never Established");
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ssa.keel.dev", "v1", "Gateway"),
        "gateways",
    );
    let gateways: Api<DynamicObject> = Api::namespaced_with(client, "default", &resource);
    let gateway = |spec: Value| json!({"apiVersion": "ssa.keel.dev/v1", "kind": "Gateway", "metadata": {"name": "g"}, "spec": spec});
    gateways
        .patch(
            "g",
            &PatchParams::apply("one"),
            &Patch::Apply(gateway(
                json!({"listeners": [{"name": "a", "port": 1}], "hosts": ["x"], "notes": ["n"]}),
            )),
        )
        .await?;
    let merged = gateways
        .patch(
            "g",
            &PatchParams::apply("two"),
            &Patch::Apply(gateway(json!({"listeners": [{"name": "b", "port": 2}], "hosts": ["y"]}))),
        )
        .await?;
    ensure!(
        merged.data["spec"]["listeners"] == json!([{"name": "a", "port": 1}, {"name": "b", "port": 2}]),
        "{}",
        merged.data
    );
    ensure!(merged.data["spec"]["hosts"] == json!(["x", "y"]), "{}", merged.data);
    let err = gateways
        .patch("g", &PatchParams::apply("two"), &Patch::Apply(gateway(json!({"notes": ["m"]}))))
        .await
        .expect_err("conflict");
    let kube::Error::Api(status) = err else { anyhow::bail!("{err}") };
    ensure!(
        status.code == 409
            && status.message == "Apply failed with 1 conflict: conflict with \"one\": .spec.notes",
        "{status:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_follow_their_schema() -> Result<()> {
    custom_resources_on(false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_resources_follow_their_schema_on_etcd() -> Result<()> {
    custom_resources_on(true).await
}

async fn bad_input_on(etcd: bool) -> Result<()> {
    let cluster = start(etcd).await?;
    let server = &cluster.server;
    let path = "/apis/apps/v1/namespaces/default/deployments/bad";
    let apply = [("Content-Type", "application/apply-patch+yaml")];
    let body = serde_json::to_vec(
        &json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bad"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
    )?;
    let cases: Vec<(String, Vec<u8>, u16, &str, &str)> = vec![
        (
            path.to_owned(),
            body.clone(),
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ),
        (
            format!("{path}?fieldManager=m"),
            String::from_utf8(body.clone())?.replace("apps/v1", "apps/v2").into_bytes(),
            400,
            "BadRequest",
            "invalid object type: apps/v2, Kind=Deployment",
        ),
        (
            format!("{path}?fieldManager=m"),
            b"kind: Deployment\n  bad: [".to_vec(),
            400,
            "BadRequest",
            "error decoding YAML: ",
        ),
        (
            format!("{path}?fieldManager=m"),
            String::from_utf8(body.clone())?.replace("\"bad\"", "\"other\"").into_bytes(),
            400,
            "BadRequest",
            "the name of the object (other) does not match the name on the URL (bad)",
        ),
        (
            format!("{path}?fieldManager=m"),
            String::from_utf8(body.clone())?.replace("Deployment", "ReplicaSet").into_bytes(),
            400,
            "BadRequest",
            "invalid object type: apps/v1, Kind=ReplicaSet",
        ),
    ];
    let mut cases = cases;
    // A field the type does not declare: upstream's 500 without a reason.
    let mut bogus: Value = serde_json::from_slice(&body)?;
    bogus["spec"]["bogus"] = json!(1);
    cases.push((
        format!("{path}?fieldManager=m"),
        serde_json::to_vec(&bogus)?,
        500,
        "",
        "failed to create typed patch object (/bad; apps/v1, Kind=Deployment): .spec.bogus: field not declared in schema",
    ));
    for (url, body, code, reason, message) in cases {
        let (status, _, text) = server.request("PATCH", &url, &apply, &body).await?;
        let parsed: Value = serde_json::from_str(&text).with_context(|| text.clone())?;
        let got_reason = parsed["reason"].as_str().unwrap_or_default();
        ensure!(status == code && got_reason == reason, "{url}: {status} {text}");
        ensure!(parsed["message"].as_str().is_some_and(|m| m.starts_with(message)), "{url}: {text}");
    }
    // force on a merge patch is refused.
    let (status, _, text) = server
        .request(
            "PATCH",
            &format!("{path}?force=true"),
            &[("Content-Type", "application/merge-patch+json")],
            b"{}",
        )
        .await?;
    ensure!(
        status == 422 && text.contains("force: Forbidden: may not be specified for non-apply patch"),
        "{text}"
    );
    // Nothing was stored.
    let (status, _, text) = server.request("GET", path, &[], b"").await?;
    ensure!(status == 404, "{text}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_applies_store_nothing() -> Result<()> {
    bad_input_on(false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_applies_store_nothing_on_etcd() -> Result<()> {
    bad_input_on(true).await
}
