//! /openapi/v2 and /openapi/v3: the served documents themselves (patch metadata, list types,
//! group-version-kinds, hashes, caching headers, the v2 protobuf form decoded with gnostic's
//! messages), their rebuild with an added kind, and kubectl 1.27 … 1.33 using them — explain, and
//! apply/create with client validation on (1.27/1.28 read /openapi/v2 in protobuf, 1.29+ /openapi/v3
//! and validate on the server through fieldValidation).

use crate::common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use keel_api::openapi::{SchemaSource, Schemas, gnostic};
use keel_api::resources::{ALL_VERBS, RESOURCES, Resource};
use keel_apiserver::ApiServer;
use keel_apiserver::pki::Pki;
use keel_store::Store;
use keel_store::embedded::{EmbeddedStore, Options};
use keel_store::etcd::{EtcdOptions, EtcdStore};
use keel_testbed::etcd::EtcdCluster;
use keel_testbed::kubectl::{self, Kubectl};
use serde_json::{Value, json};

/// A server with its kubeconfig, its state (to rebuild its documents) and its store's etcd.
struct Cluster {
    server: Arc<ApiServer>,
    address: std::net::SocketAddr,
    pki: Pki,
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
    _serving: tokio::task::JoinHandle<std::io::Result<()>>,
    _etcd: Option<EtcdCluster>,
}

async fn start(on_etcd: bool) -> Result<Cluster> {
    let dir = tempfile::tempdir()?;
    let (store, etcd): (Arc<dyn Store>, _) = if on_etcd {
        let etcd = EtcdCluster::start(1)?;
        let store = EtcdStore::connect(EtcdOptions::new(etcd.client_urls()).prefix("/keel")).await?;
        (Arc::new(store), Some(etcd))
    } else {
        (Arc::new(EmbeddedStore::open(Options::new(dir.path().join("data")))?), None)
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let pki = keel_apiserver::pki::ensure(&dir.path().join("pki"), &[])?;
    let tls = keel_apiserver::auth::server_config(&pki)?;
    let server = ApiServer::new(store, keel_apiserver::Config::new(address)).await?;
    let serving = tokio::spawn(server.clone().serve(listener, tls));
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, pki.admin_kubeconfig(&format!("https://{address}")))?;
    Ok(Cluster { server, address, pki, kubeconfig, dir, _serving: serving, _etcd: etcd })
}

/// A GET as the admin with these headers; status, header lines (lowercase names) and the raw body.
async fn get(cluster: &Cluster, path: &str, headers: &[(&str, &str)]) -> Result<(u16, String, Vec<u8>)> {
    let (address, ca, cert, key) = (
        cluster.address,
        cluster.pki.ca_pem.clone(),
        cluster.pki.admin_cert_pem.clone(),
        cluster.pki.admin_key_pem.clone(),
    );
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    tokio::task::spawn_blocking(move || {
        let mut tls = common::tls_stream(address, &ca, Some((&cert, &key)))?;
        tls.write_all(request.as_bytes())?;
        let mut response = Vec::new();
        match tls.read_to_end(&mut response) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
            Err(e) => return Err(e.into()),
        }
        let end = response.windows(4).position(|w| w == b"\r\n\r\n").context("no header end")?;
        let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).context("no status")?;
        let mut body = response[end + 4..].to_vec();
        if head.contains("transfer-encoding: chunked") {
            body = dechunk(&body)?;
        }
        Ok((status, head, body))
    })
    .await?
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n").context("chunk size")?;
        let size = usize::from_str_radix(std::str::from_utf8(&data[..line_end])?.trim(), 16)?;
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&data[line_end + 2..line_end + 2 + size]);
        data = &data[line_end + 4 + size..];
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")))
}

async fn get_json(cluster: &Cluster, path: &str) -> Result<Value> {
    let (status, _, body) = get(cluster, path, &[("Accept", "application/json")]).await?;
    ensure!(status == 200, "{path}: {status} {}", String::from_utf8_lossy(&body));
    Ok(serde_json::from_slice(&body)?)
}

/// The v3 document of a group version through the index, as kubectl finds it.
async fn v3_document(cluster: &Cluster, gv: &str) -> Result<Value> {
    let index = get_json(cluster, "/openapi/v3").await?;
    let url = index["paths"][gv]["serverRelativeURL"].as_str().with_context(|| format!("{gv} in {index}"))?;
    get_json(cluster, url).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_documents_carry_patch_metadata_list_types_and_kinds() -> Result<()> {
    let cluster = start(false).await?;
    let core = v3_document(&cluster, "api/v1").await?;
    ensure!(core["openapi"] == "3.0.0", "{}", core["openapi"]);
    let schemas = &core["components"]["schemas"];
    let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    ensure!(containers["x-kubernetes-patch-merge-key"] == "name", "{containers}");
    ensure!(containers["x-kubernetes-patch-strategy"] == "merge", "{containers}");
    ensure!(containers["x-kubernetes-list-type"] == "map", "{containers}");
    ensure!(containers["x-kubernetes-list-map-keys"] == json!(["name"]), "{containers}");
    ensure!(
        containers["items"]["$ref"] == "#/components/schemas/io.k8s.api.core.v1.Container",
        "{containers}"
    );
    let pod = &schemas["io.k8s.api.core.v1.Pod"];
    ensure!(
        pod["x-kubernetes-group-version-kind"] == json!([{"group": "", "kind": "Pod", "version": "v1"}]),
        "{pod}"
    );
    ensure!(pod["properties"]["kind"]["type"] == "string" && pod["properties"]["kind"].get("enum").is_none());
    let int_or_string = &schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"];
    ensure!(int_or_string["format"] == "int-or-string", "{int_or_string}");
    // Operations as upstream: the pods' patch takes fieldValidation (what kubectl 1.29+ checks
    // before validating on the server), and names its kind.
    let patch = &core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
    ensure!(patch["operationId"] == "patchCoreV1NamespacedPod", "{patch}");
    ensure!(patch["x-kubernetes-action"] == "patch");
    ensure!(patch["x-kubernetes-group-version-kind"] == json!({"group": "", "kind": "Pod", "version": "v1"}));
    let names: Vec<&str> =
        patch["parameters"].as_array().into_iter().flatten().filter_map(|p| p["name"].as_str()).collect();
    ensure!(names == ["dryRun", "fieldManager", "fieldValidation", "force"], "{names:?}");
    ensure!(patch["requestBody"]["content"].get("application/strategic-merge-patch+json").is_some());
    let list = &core["paths"]["/api/v1/namespaces/{namespace}/pods"]["get"];
    ensure!(
        list["operationId"] == "listCoreV1NamespacedPod" && list["x-kubernetes-action"] == "list",
        "{list}"
    );
    ensure!(core["paths"]["/api/v1/pods"]["get"]["operationId"] == "listCoreV1PodForAllNamespaces");
    let eviction = &core["paths"]["/api/v1/namespaces/{namespace}/pods/{name}/eviction"]["post"];
    ensure!(
        eviction["x-kubernetes-group-version-kind"]
            == json!({"group": "policy", "kind": "Eviction", "version": "v1"}),
        "{eviction}"
    );
    ensure!(
        core["paths"].get("/api/v1/namespaces/{namespace}/pods/{name}/exec").is_none(),
        "only what is served"
    );

    let apps = v3_document(&cluster, "apis/apps/v1").await?;
    let deployment = &apps["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
    ensure!(
        deployment["x-kubernetes-group-version-kind"]
            == json!([{"group": "apps", "kind": "Deployment", "version": "v1"}]),
        "{deployment}"
    );
    let spec = &deployment["properties"]["spec"];
    ensure!(spec["allOf"][0]["$ref"] == "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec", "{spec}");
    ensure!(
        apps["components"]["schemas"].get("io.k8s.api.core.v1.PodSpec").is_some(),
        "referenced schemas included"
    );
    ensure!(
        apps["components"]["schemas"].get("io.k8s.api.core.v1.Service").is_none(),
        "only what is referenced"
    );
    let scale = &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]["patch"];
    ensure!(scale["operationId"] == "patchAppsV1NamespacedDeploymentScale", "{scale}");
    ensure!(scale["x-kubernetes-group-version-kind"]["kind"] == "Scale");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v3_hashes_etags_and_caching() -> Result<()> {
    let cluster = start(false).await?;
    let index = get_json(&cluster, "/openapi/v3").await?;
    let url = index["paths"]["apis/batch/v1"]["serverRelativeURL"].as_str().context("batch")?.to_owned();
    let hash = url.split("hash=").nth(1).context("hash")?.to_owned();
    ensure!(hash.len() == 128, "{url}");
    for gv in ["api/v1", "apis/apps/v1", "apis/rbac.authorization.k8s.io/v1", "apis/discovery.k8s.io/v1"] {
        ensure!(index["paths"].get(gv).is_some(), "{gv} in {index}");
    }

    let (status, head, body) = get(&cluster, &url, &[]).await?;
    ensure!(status == 200 && !body.is_empty(), "{status}");
    ensure!(header(&head, "etag") == Some(format!("\"{hash}\"").to_lowercase().as_str()), "{head}");
    ensure!(header(&head, "cache-control") == Some("public, immutable"), "{head}");
    ensure!(
        header(&head, "expires").is_some() && header(&head, "content-type") == Some("application/json"),
        "{head}"
    );
    // The hash is the document's: the same bytes again.
    ensure!(keel_api::openapi::hash(&body) == hash, "hash of the body");

    let plain_url = "/openapi/v3/apis/batch/v1";
    let (status, head, _) = get(&cluster, plain_url, &[]).await?;
    ensure!(status == 200 && header(&head, "cache-control") == Some("no-cache, private"), "{head}");
    let etag = format!("\"{hash}\"");
    let (status, _, body) = get(&cluster, plain_url, &[("If-None-Match", &etag)]).await?;
    ensure!(status == 304 && body.is_empty(), "{status}");
    let (status, head, _) = get(&cluster, &format!("{plain_url}?hash=0BAD"), &[]).await?;
    ensure!(status == 301 && header(&head, "location") == Some(url.to_lowercase().as_str()), "{head}");
    let (status, _, _) = get(&cluster, "/openapi/v3/apis/nothing/v1", &[]).await?;
    ensure!(status == 404);
    let (status, _, _) = get(&cluster, plain_url, &[("Accept", "text/html")]).await?;
    ensure!(status == 406);
    // The index is stable while nothing changes.
    ensure!(get_json(&cluster, "/openapi/v3").await? == index);
    Ok(())
}

/// A custom kind as CustomResourceDefinitions will add them: its schema, then a rebuild.
const CRONTAB: Resource = Resource {
    group: "stable.example.com",
    version: "v1",
    kind: "CronTab",
    plural: "crontabs",
    singular: "crontab",
    namespaced: true,
    short_names: &[],
    categories: &[],
    verbs: ALL_VERBS,
    subresources: &[],
    custom: true,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuilt_documents_change_only_the_changed_hashes() -> Result<()> {
    let cluster = start(false).await?;
    let before = get_json(&cluster, "/openapi/v3").await?;
    let mut schemas = Schemas::builtin().clone();
    let meta = "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.";
    schemas.insert(
        "com.example.stable.v1.CronTab",
        json!({"type": "object", "properties": {
            "metadata": {"allOf": [{"$ref": format!("{meta}ObjectMeta")}]},
            "spec": {"type": "object", "properties": {"cronSpec": {"type": "string", "description": "when"}}},
        }, "x-kubernetes-group-version-kind": [{"group": "stable.example.com", "kind": "CronTab", "version": "v1"}]}),
        Some(("stable.example.com", "v1", "CronTab")),
    );
    schemas.insert(
        "com.example.stable.v1.CronTabList",
        json!({"type": "object", "properties": {
            "metadata": {"allOf": [{"$ref": format!("{meta}ListMeta")}]},
            "items": {"type": "array", "items": {"$ref": "#/components/schemas/com.example.stable.v1.CronTab"}},
        }}),
        Some(("stable.example.com", "v1", "CronTabList")),
    );
    let mut resources = RESOURCES.to_vec();
    resources.push(CRONTAB);
    cluster.server.openapi().rebuild(&resources, &schemas)?;
    let after = get_json(&cluster, "/openapi/v3").await?;
    for (gv, entry) in before["paths"].as_object().context("paths")? {
        ensure!(after["paths"][gv] == *entry, "{gv} unchanged");
    }
    let crontabs = v3_document(&cluster, "apis/stable.example.com/v1").await?;
    ensure!(
        crontabs["paths"]["/apis/stable.example.com/v1/namespaces/{namespace}/crontabs/{name}"]["patch"]["operationId"]
            == "patchStableExampleComV1NamespacedCronTab"
    );
    ensure!(
        crontabs["components"]["schemas"].get("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta").is_some()
    );

    // A changed schema changes the hash of the documents holding it, and only theirs.
    let mut pod = schemas.schema("io.k8s.api.core.v1.PodSpec").context("PodSpec")?.clone();
    pod["description"] = "changed".into();
    schemas.insert("io.k8s.api.core.v1.PodSpec", pod, None);
    cluster.server.openapi().rebuild(&resources, &schemas)?;
    let changed = get_json(&cluster, "/openapi/v3").await?;
    ensure!(changed["paths"]["api/v1"] != after["paths"]["api/v1"], "api/v1 holds PodSpec");
    ensure!(changed["paths"]["apis/apps/v1"] != after["paths"]["apis/apps/v1"], "apps/v1 holds PodSpec");
    ensure!(
        changed["paths"]["apis/rbac.authorization.k8s.io/v1"]
            == after["paths"]["apis/rbac.authorization.k8s.io/v1"]
    );
    let old = after["paths"]["api/v1"]["serverRelativeURL"].as_str().context("url")?;
    let (status, _, _) = get(&cluster, old, &[]).await?;
    ensure!(status == 301, "an old hash is redirected: {status}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_protobuf_decodes_to_the_json_definitions() -> Result<()> {
    use prost::Message;
    let cluster = start(false).await?;
    let (status, head, json_body) = get(&cluster, "/openapi/v2", &[("Accept", "application/json")]).await?;
    ensure!(status == 200 && header(&head, "content-type") == Some("application/json"), "{head}");
    let document: Value = serde_json::from_slice(&json_body)?;
    ensure!(document["swagger"] == "2.0");
    let definitions = document["definitions"].as_object().context("definitions")?;
    let containers = &definitions["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    ensure!(containers["items"]["$ref"] == "#/definitions/io.k8s.api.core.v1.Container", "{containers}");
    ensure!(
        containers["x-kubernetes-patch-merge-key"] == "name" && containers["x-kubernetes-list-type"] == "map"
    );
    let spec = &definitions["io.k8s.api.apps.v1.Deployment"]["properties"]["spec"];
    ensure!(
        spec["$ref"] == "#/definitions/io.k8s.api.apps.v1.DeploymentSpec" && spec.get("allOf").is_none(),
        "{spec}"
    );
    ensure!(definitions["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["type"] == "string");

    // What client-go's OpenAPISchema() sends.
    let accept = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
    let (status, head, proto_body) = get(&cluster, "/openapi/v2", &[("Accept", accept)]).await?;
    ensure!(status == 200, "{status}");
    ensure!(
        header(&head, "content-type") == Some("application/com.github.proto-openapi.spec.v2.v1.0+protobuf"),
        "{head}"
    );
    let etag = header(&head, "etag").context("etag")?.to_owned();
    let decoded = gnostic::Document::decode(proto_body.as_slice())?;
    ensure!(decoded.swagger == "2.0");
    let decoded_definitions = &decoded.definitions.context("definitions")?.additional_properties;
    ensure!(
        decoded_definitions.len() == definitions.len(),
        "{} vs {}",
        decoded_definitions.len(),
        definitions.len()
    );
    for named in decoded_definitions {
        let schema = gnostic::schema_json(named.value.as_ref().context("schema")?);
        ensure!(
            schema == definitions[&named.name],
            "{} differs:\n{schema}\n{}",
            named.name,
            definitions[&named.name]
        );
    }
    // Paths and operations too: the deployments' patch with its fieldValidation query parameter
    // and its kind, which kubectl 1.27/1.28 look for.
    let paths = decoded.paths.context("paths")?.path;
    let item = paths
        .iter()
        .find(|p| p.name == "/apis/apps/v1/namespaces/{namespace}/deployments/{name}")
        .and_then(|p| p.value.as_ref())
        .context("deployments path")?;
    let patch = item.patch.as_ref().context("patch")?;
    let gvk =
        patch.vendor_extension.iter().find(|e| e.name == "x-kubernetes-group-version-kind").context("gvk")?;
    let gvk: Value = serde_json::from_str(&gvk.value.as_ref().context("value")?.yaml)?;
    ensure!(gvk == json!({"group": "apps", "kind": "Deployment", "version": "v1"}), "{gvk}");
    ensure!(patch.parameters.iter().any(|p| {
        matches!(
            p.parameter.as_ref().and_then(|p| p.oneof.as_ref()),
            Some(gnostic::parameter::Oneof::NonBodyParameter(gnostic::NonBodyParameter {
                oneof: Some(gnostic::non_body_parameter::Oneof::QueryParameterSubSchema(q))
            })) if q.name == "fieldValidation"
        )
    }));

    // One ETag for both forms (the JSON's hash, as kube-openapi), and 304 when held.
    let (_, json_head, _) = get(&cluster, "/openapi/v2", &[]).await?;
    ensure!(header(&json_head, "etag") == Some(etag.as_str()), "{json_head}");
    let held = etag.to_uppercase().replace("\"", "");
    let (status, _, body) =
        get(&cluster, "/openapi/v2", &[("Accept", accept), ("If-None-Match", &format!("\"{held}\""))])
            .await?;
    ensure!(status == 304 && body.is_empty(), "{status}");
    Ok(())
}

/// Runs kubectl; (success, stdout, stderr).
fn kubectl(k: &Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<(bool, String, String)> {
    let output = k.command().arg("--kubeconfig").arg(kubeconfig).args(args).output()?;
    Ok((
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into(),
        String::from_utf8_lossy(&output.stderr).into(),
    ))
}

fn ok(k: &Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let (success, out, err) = kubectl(k, kubeconfig, args)?;
    ensure!(success, "kubectl 1.{} {args:?}: {err}", k.minor);
    Ok(out)
}

/// kubectl explain of a pod's containers (plain and recursive) and of deployments.
async fn explain(minor: u32) -> Result<()> {
    let k = kubectl::minor(minor)?;
    let cluster = start(false).await?;
    let kc = cluster.kubeconfig.as_path();
    let out = ok(&k, kc, &["explain", "pod.spec.containers"])?;
    for expected in
        ["KIND:", "Pod", "List of containers belonging to the pod", "FIELDS:", "image", "livenessProbe"]
    {
        ensure!(out.contains(expected), "kubectl 1.{minor} explain lacks {expected:?}:\n{out}");
    }
    let out = ok(&k, kc, &["explain", "pod.spec.containers", "--recursive"])?;
    ensure!(
        out.contains("httpGet") && out.contains("containerPort"),
        "kubectl 1.{minor} --recursive:\n{out}"
    );
    let out = ok(&k, kc, &["explain", "deployments"])?;
    ensure!(out.contains("Deployment enables declarative updates"), "kubectl 1.{minor}:\n{out}");
    ensure!(out.contains("apps"), "{out}");
    let out = ok(&k, kc, &["explain", "deployment.spec.strategy.rollingUpdate.maxSurge"])?;
    ensure!(out.contains("maxSurge"), "kubectl 1.{minor}:\n{out}");
    Ok(())
}

const MANIFEST: &str = "apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: fast
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 1
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: busybox:1
        ports:
        - containerPort: 80
      - name: side
        image: pause:1
";

/// kubectl apply (twice, the second a strategic merge) and create with validation on (no
/// --validate=false), and a manifest with an unknown field refused.
async fn apply_and_create(minor: u32, on_etcd: bool) -> Result<()> {
    let k = kubectl::minor(minor)?;
    let cluster = start(on_etcd).await?;
    let kc = cluster.kubeconfig.as_path();
    let file = cluster.dir.path().join("app.yaml");
    let path = file.to_str().context("path")?;
    std::fs::write(&file, MANIFEST)?;
    ok(&k, kc, &["apply", "-f", path])?;
    std::fs::write(&file, MANIFEST.replace("busybox:1", "busybox:2").replace("mode: fast", "mode: slow"))?;
    ok(&k, kc, &["apply", "-f", path])?;
    let web: Value = serde_json::from_str(&ok(&k, kc, &["get", "deployment", "web", "-o", "json"])?)?;
    let containers = &web["spec"]["template"]["spec"]["containers"];
    ensure!(containers[0]["image"] == "busybox:2" && containers[1]["name"] == "side", "{containers}");
    ensure!(containers[0]["ports"][0]["containerPort"] == 80, "{containers}");
    let mode = ok(&k, kc, &["get", "configmap", "settings", "-o", "jsonpath={.data.mode}"])?;
    ensure!(mode == "slow", "{mode}");

    let created = cluster.dir.path().join("created.yaml");
    std::fs::write(&created, "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: robot\n")?;
    ok(&k, kc, &["create", "-f", created.to_str().context("path")?])?;
    ok(&k, kc, &["get", "serviceaccount", "robot"])?;

    // Validation is on: an unknown field is refused (by the server for 1.27+, which finds
    // fieldValidation in the OpenAPI documents) and nothing is created.
    let bad = cluster.dir.path().join("bad.yaml");
    std::fs::write(&bad, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\nspec:\n  nope: 1\n")?;
    let (success, _, err) = kubectl(&k, kc, &["create", "-f", bad.to_str().context("path")?])?;
    ensure!(!success && err.contains("unknown field") && err.contains("spec"), "kubectl 1.{minor}: {err}");
    let (exists, _, _) = kubectl(&k, kc, &["get", "configmap", "bad"])?;
    ensure!(!exists, "nothing stored");
    // Also in the patch an apply of an existing object sends.
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata: {mode: odd}\nspec: {nope: 1}\n",
    )?;
    let (success, _, err) = kubectl(&k, kc, &["apply", "-f", path])?;
    ensure!(!success && err.contains("unknown field \"spec\""), "kubectl 1.{minor}: {err}");
    let mode = ok(&k, kc, &["get", "configmap", "settings", "-o", "jsonpath={.data.mode}"])?;
    ensure!(mode == "slow", "the refused patch changed nothing: {mode}");
    Ok(())
}

macro_rules! kubectl_tests {
    ($($explain:ident, $apply:ident, $minor:literal;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $explain() -> Result<()> {
            explain($minor).await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $apply() -> Result<()> {
            apply_and_create($minor, false).await
        }
    )*};
}

kubectl_tests! {
    kubectl_1_27_explain, kubectl_1_27_apply_and_create_validated, 27;
    kubectl_1_28_explain, kubectl_1_28_apply_and_create_validated, 28;
    kubectl_1_29_explain, kubectl_1_29_apply_and_create_validated, 29;
    kubectl_1_30_explain, kubectl_1_30_apply_and_create_validated, 30;
    kubectl_1_31_explain, kubectl_1_31_apply_and_create_validated, 31;
    kubectl_1_32_explain, kubectl_1_32_apply_and_create_validated, 32;
    kubectl_1_33_explain, kubectl_1_33_apply_and_create_validated, 33;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_28_apply_and_create_validated_on_etcd() -> Result<()> {
    apply_and_create(28, true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_33_apply_and_create_validated_on_etcd() -> Result<()> {
    apply_and_create(33, true).await
}

/// What kubectl's validation relies on for patches (client-side apply of an existing object):
/// fieldValidation=Strict refuses an unknown field the patch brings with upstream's message and
/// changes nothing; Warn (the default) applies the rest and answers a Warning header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patches_honour_field_validation() -> Result<()> {
    let server = common::Server::start().await?;
    let cms = "/api/v1/namespaces/default/configmaps";
    let json = [("Content-Type", "application/json")];
    let (status, _, body) =
        server.request("POST", cms, &json, br#"{"metadata":{"name":"c"},"data":{"a":"1"}}"#).await?;
    ensure!(status == 201, "{status} {body}");
    let merge = [("Content-Type", "application/merge-patch+json")];
    let patch = br#"{"data":{"a":"2"},"spec":{"x":1}}"#;
    let (status, _, body) =
        server.request("PATCH", &format!("{cms}/c?fieldValidation=Strict"), &merge, patch).await?;
    ensure!(
        status == 400 && body.contains(r#"strict decoding error: unknown field \"spec\""#),
        "{status} {body}"
    );
    let (_, _, current) = server.request("GET", &format!("{cms}/c"), &[], b"").await?;
    ensure!(serde_json::from_str::<Value>(&current)?["data"]["a"] == "1", "{current}");
    let (status, head, body) =
        server.request_with_headers("PATCH", &format!("{cms}/c"), &merge, patch).await?;
    ensure!(status == 200 && serde_json::from_str::<Value>(&body)?["data"]["a"] == "2", "{status} {body}");
    ensure!(head.to_ascii_lowercase().contains(r#"warning: 299 - "unknown field \"spec\"""#), "{head}");
    let (status, head, _) = server
        .request_with_headers("PATCH", &format!("{cms}/c?fieldValidation=Ignore"), &merge, patch)
        .await?;
    ensure!(status == 200 && !head.to_ascii_lowercase().contains("warning:"), "{head}");
    Ok(())
}
