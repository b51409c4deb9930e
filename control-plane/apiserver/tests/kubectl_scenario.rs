//! Issue 5's acceptance scenario, run by every installed kubectl (1.27 … 1.33) on both store backends:
//! create (protobuf bodies from 1.32's generators), apply of a multi-document manifest and again changed (strategic
//! merge with the last-applied annotation), server-side apply with a conflict then --force-conflicts,
//! explain, get as a Table, describe, api-resources, edit through KUBE_EDITOR, and a CRD whose custom
//! resources are created, listed with their printer columns and deleted.

use crate::common;

use std::path::PathBuf;

use anyhow::{Context, Result, ensure};
use keel_testbed::kubectl::{self, Kubectl};
use serde_json::Value;

struct Scenario {
    kubectl: Kubectl,
    kubeconfig: PathBuf,
    _server: common::Server,
    _etcd: Option<keel_testbed::etcd::EtcdCluster>,
}

fn manifest(name: &str) -> String {
    format!("{}/tests/scenario/{name}", env!("CARGO_MANIFEST_DIR"))
}

impl Scenario {
    async fn start(minor: u32, etcd: bool) -> Result<Scenario> {
        let kubectl = kubectl::minor(minor)?;
        let (server, etcd) = if etcd {
            let etcd = keel_testbed::etcd::EtcdCluster::start(1)?;
            let options = keel_store::etcd::EtcdOptions::new(etcd.client_urls()).prefix("/keel");
            let store = std::sync::Arc::new(keel_store::etcd::EtcdStore::connect(options).await?);
            (common::Server::start_on(store, tempfile::tempdir()?).await?, Some(etcd))
        } else {
            (common::Server::start().await?, None)
        };
        let kubeconfig = server.dir.path().join("admin.kubeconfig");
        std::fs::write(&kubeconfig, server.pki.admin_kubeconfig(&format!("https://{}", server.address)))?;
        Ok(Scenario { kubectl, kubeconfig, _server: server, _etcd: etcd })
    }

    /// Runs kubectl with `env`; returns (success, stdout, stderr).
    async fn run_with(&self, env: &[(&str, &str)], args: &[&str]) -> Result<(bool, String, String)> {
        let mut command = tokio::process::Command::from(self.kubectl.command());
        command.arg("--kubeconfig").arg(&self.kubeconfig).args(args).envs(env.iter().copied());
        let output = command
            .output()
            .await
            .with_context(|| format!("running kubectl 1.{} {args:?}", self.kubectl.minor))?;
        Ok((
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ))
    }

    async fn run(&self, args: &[&str]) -> Result<(bool, String, String)> {
        self.run_with(&[], args).await
    }

    async fn ok(&self, args: &[&str]) -> Result<String> {
        let (success, out, err) = self.run(args).await?;
        ensure!(success, "kubectl 1.{} {args:?} failed: {err}", self.kubectl.minor);
        Ok(out)
    }

    async fn json(&self, args: &[&str]) -> Result<Value> {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        Ok(serde_json::from_str(&self.ok(&args).await?)?)
    }
}

fn header(table: &str) -> Vec<&str> {
    table.lines().next().unwrap_or_default().split_whitespace().collect()
}

async fn scenario(minor: u32, etcd: bool) -> Result<()> {
    let s = Scenario::start(minor, etcd).await?;
    s.ok(&["create", "namespace", "scenario"]).await?;

    // create: `create -f` sends JSON; kubectl's typed generators send protobuf on 1.32+ (-v=8 shows
    // the request's Content-Type).
    s.ok(&["create", "-f", &manifest("pod.yaml")]).await?;
    let pod = s.json(&["get", "pod", "solo", "-n", "scenario"]).await?;
    ensure!(pod["spec"]["containers"][0]["ports"][0]["name"] == "http", "{pod}");
    let (success, _, log) =
        s.run(&["create", "configmap", "generated", "-n", "scenario", "--from-literal=k=v", "-v=8"]).await?;
    ensure!(success, "create configmap failed: {log}");
    if minor >= 32 {
        ensure!(
            log.contains("Content-Type: application/vnd.kubernetes.protobuf"),
            "no protobuf body:\n{log}"
        );
    }
    let value =
        s.ok(&["get", "configmap", "generated", "-n", "scenario", "-o", "jsonpath={.data.k}"]).await?;
    ensure!(value == "v", "{value}");

    // apply -f a multi-document manifest, then the same manifest changed (strategic merge patches
    // computed from the last-applied annotation).
    let applied = s.ok(&["apply", "-f", &manifest("app.yaml")]).await?;
    for line in ["configmap/settings created", "deployment.apps/web created", "service/web created"] {
        ensure!(applied.contains(line), "{applied}");
    }
    let applied = s.ok(&["apply", "-f", &manifest("app-changed.yaml")]).await?;
    for line in ["configmap/settings configured", "deployment.apps/web configured", "service/web unchanged"] {
        ensure!(applied.contains(line), "{applied}");
    }
    let web = s.json(&["get", "deployment", "web", "-n", "scenario"]).await?;
    let containers = &web["spec"]["template"]["spec"]["containers"];
    ensure!(containers.as_array().is_some_and(|c| c.len() == 1), "sidecar not removed: {web}");
    ensure!(containers[0]["image"] == "busybox:1.37", "{web}");
    ensure!(containers[0]["env"] == serde_json::json!([{"name": "MODE", "value": "test"}]), "{web}");
    ensure!(web["metadata"]["labels"]["tier"] == "front", "{web}");
    ensure!(
        web["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .is_some_and(|a| a.contains("busybox:1.37")),
        "{web}"
    );

    // apply --server-side: another manager's replicas conflict with client-side apply's, then win.
    let ssa = ["apply", "--server-side", "--field-manager=scenario-ssa", "-f", &manifest("web-ssa.yaml")];
    let (success, _, err) = s.run(&ssa).await?;
    ensure!(!success && err.contains("conflict") && err.contains(".spec.replicas"), "{err}");
    ensure!(err.contains("kubectl-client-side-apply"), "conflict does not name the manager: {err}");
    let mut forced = ssa.to_vec();
    forced.push("--force-conflicts");
    s.ok(&forced).await?;
    let web = s.json(&["get", "deployment", "web", "-n", "scenario", "--show-managed-fields"]).await?;
    ensure!(web["spec"]["replicas"] == 5, "{web}");
    let managers: Vec<&str> = web["metadata"]["managedFields"]
        .as_array()
        .map(|m| m.iter().filter_map(|e| e["manager"].as_str()).collect())
        .unwrap_or_default();
    ensure!(managers.contains(&"scenario-ssa"), "{managers:?}");

    // explain, from the served OpenAPI documents.
    let explained = s.ok(&["explain", "pod.spec.containers"]).await?;
    ensure!(explained.contains("containers") && explained.contains("image"), "{explained}");
    ensure!(explained.contains("DESCRIPTION"), "{explained}");

    // get: server-side printed Tables.
    let deployments = s.ok(&["get", "deployments", "-n", "scenario"]).await?;
    ensure!(header(&deployments) == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"], "{deployments}");
    ensure!(deployments.lines().nth(1).is_some_and(|l| l.starts_with("web ")), "{deployments}");
    let pods = s.ok(&["get", "pods", "-n", "scenario", "-o", "wide"]).await?;
    ensure!(header(&pods).starts_with(&["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP"]), "{pods}");

    // describe a pod and a deployment.
    let described = s.ok(&["describe", "pod", "solo", "-n", "scenario"]).await?;
    for part in ["Name:", "solo", "Containers:", "busybox:1.36", "8080/TCP"] {
        ensure!(described.contains(part), "describe pod lacks {part}:\n{described}");
    }
    let described = s.ok(&["describe", "deployment", "web", "-n", "scenario"]).await?;
    for part in ["Name:", "web", "Replicas:", "5 desired", "busybox:1.37"] {
        ensure!(described.contains(part), "describe deployment lacks {part}:\n{described}");
    }

    // edit: kubectl hands the object to KUBE_EDITOR and sends back what changed.
    let editor = manifest("edit.sh");
    let (success, _, err) = s
        .run_with(&[("KUBE_EDITOR", editor.as_str())], &["edit", "configmap", "settings", "-n", "scenario"])
        .await?;
    ensure!(success, "edit failed: {err}");
    let mode =
        s.ok(&["get", "configmap", "settings", "-n", "scenario", "-o", "jsonpath={.data.mode}"]).await?;
    ensure!(mode == "edited", "{mode}");

    // A CRD: applied, established, its custom resources created, listed with its printer columns,
    // deleted; api-resources lists it meanwhile.
    s.ok(&["apply", "-f", &manifest("crd.yaml")]).await?;
    s.ok(&["wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=30s"]).await?;
    let resources = s.ok(&["api-resources", "--no-headers"]).await?;
    for resource in ["pods", "deployments", "customresourcedefinitions", "widgets"] {
        ensure!(
            resources.lines().any(|l| l.starts_with(resource)),
            "api-resources lacks {resource}:\n{resources}"
        );
    }
    s.ok(&["apply", "-f", &manifest("widgets.yaml")]).await?;
    let widgets = s.ok(&["get", "widgets", "-n", "scenario"]).await?;
    ensure!(header(&widgets) == ["NAME", "SIZE", "COLOR", "AGE"], "{widgets}");
    ensure!(widgets.lines().any(|l| l.split_whitespace().take(3).eq(["large", "10", "red"])), "{widgets}");
    ensure!(widgets.lines().any(|l| l.split_whitespace().take(3).eq(["small", "1", "blue"])), "{widgets}");
    s.ok(&["delete", "wd", "small", "-n", "scenario"]).await?;
    let names = s.ok(&["get", "widgets", "-n", "scenario", "-o", "name"]).await?;
    ensure!(names.trim() == "widget.example.com/large", "{names}");
    s.ok(&["delete", "-f", &manifest("crd.yaml")]).await?;
    let (success, _, err) = s.run(&["get", "widgets", "-n", "scenario"]).await?;
    ensure!(!success, "widgets still served after the CRD was deleted: {err}");
    Ok(())
}

macro_rules! scenarios {
    ($($minor:literal => $embedded:ident, $etcd:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $embedded() -> Result<()> {
            scenario($minor, false).await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $etcd() -> Result<()> {
            scenario($minor, true).await
        }
    )*};
}

scenarios! {
    27 => kubectl_1_27_scenario, kubectl_1_27_scenario_on_etcd;
    28 => kubectl_1_28_scenario, kubectl_1_28_scenario_on_etcd;
    29 => kubectl_1_29_scenario, kubectl_1_29_scenario_on_etcd;
    30 => kubectl_1_30_scenario, kubectl_1_30_scenario_on_etcd;
    31 => kubectl_1_31_scenario, kubectl_1_31_scenario_on_etcd;
    32 => kubectl_1_32_scenario, kubectl_1_32_scenario_on_etcd;
    33 => kubectl_1_33_scenario, kubectl_1_33_scenario_on_etcd;
}
