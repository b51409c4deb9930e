//! Clients through RBAC as a user would drive them: kubectl 1.33 creates a Role, a RoleBinding, a
//! ClusterRole and a ClusterRoleBinding with its generators, answers `auth can-i` for them (also
//! with `--as`), and `kubectl get --as` shows upstream's Forbidden message; then the bound user, with
//! a client certificate of its own, reads what it may and is refused the rest through kube-rs and
//! the official Python client.

use crate::common::{self, Admin, Server};

use anyhow::{Context, Result, ensure};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};
use serde_json::{Value, json};

/// A kubeconfig for `user` in `group`, with a client certificate signed by the server's CA.
fn user_kubeconfig(server: &Server, user: &str, group: &str) -> Result<String> {
    let issuer = Issuer::from_ca_cert_pem(&server.pki.ca_pem, KeyPair::from_pem(&server.pki.ca_key_pem)?)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.distinguished_name.push(DnType::CommonName, user);
    params.distinguished_name.push(DnType::OrganizationName, group);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, &issuer)?;
    Ok(format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: keel\n  cluster:\n    server: https://{}\n    \
         certificate-authority-data: {}\ncontexts:\n- name: {user}\n  context:\n    cluster: keel\n    user: {user}\n\
         current-context: {user}\nusers:\n- name: {user}\n  user:\n    client-certificate-data: {}\n    \
         client-key-data: {}\n",
        server.address,
        STANDARD.encode(&server.pki.ca_pem),
        STANDARD.encode(cert.pem()),
        STANDARD.encode(key.serialize_pem())
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_kube_rs_and_python_through_rbac() -> Result<()> {
    let server = Server::start().await?;
    let admin = Admin::of(&server)?;
    admin.ok(&["create", "namespace", "team"]).await?;
    admin.ok(&["run", "web", "-n", "team", "--image=busybox", "--restart=Never"]).await?;
    admin
        .ok(&["create", "role", "pod-reader", "-n", "team", "--verb=get,list,watch", "--resource=pods"])
        .await?;
    admin
        .ok(&["create", "rolebinding", "alice-reads", "-n", "team", "--role=pod-reader", "--user=alice"])
        .await?;
    admin
        .ok(&["create", "clusterrole", "namespace-viewer", "--verb=get,list", "--resource=namespaces"])
        .await?;
    admin
        .ok(&[
            "create",
            "clusterrolebinding",
            "devs-view-namespaces",
            "--clusterrole=namespace-viewer",
            "--group=devs",
        ])
        .await?;
    let role = admin.json(&["get", "role", "pod-reader", "-n", "team"]).await?;
    ensure!(
        role["rules"]
            == json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]),
        "{role}"
    );
    let binding = admin.json(&["get", "clusterrolebinding", "devs-view-namespaces"]).await?;
    ensure!(
        binding["subjects"]
            == json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "devs"}]),
        "{binding}"
    );

    // The policy follows the bindings as they are written; wait until it holds them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (_, out, _) = common::kubectl_run(
            &admin.kubectl,
            &admin.kubeconfig,
            &["auth", "can-i", "list", "pods", "-n", "team", "--as", "alice"],
        )
        .await?;
        if out.trim() == "yes" {
            break;
        }
        ensure!(std::time::Instant::now() < deadline, "alice never got to list pods: {out}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for (args, expected) in [
        (&["create", "pods", "-n", "team", "--as", "alice"][..], "no"),
        (&["list", "pods", "-n", "default", "--as", "alice"][..], "no"),
        (&["list", "namespaces", "--as", "alice", "--as-group", "devs"][..], "yes"),
        (&["list", "namespaces", "--as", "alice"][..], "no"),
    ] {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        let (_, out, _) = common::kubectl_run(&admin.kubectl, &admin.kubeconfig, &all).await?;
        ensure!(out.trim() == expected, "can-i {args:?}: {out}");
    }
    let refused = admin.refused(&["get", "pods", "-n", "default", "--as", "alice"]).await?;
    ensure!(
        refused.contains(
            r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default""#
        ),
        "{refused}"
    );
    let listed = admin.ok(&["get", "pods", "-n", "team", "--as", "alice", "-o", "name"]).await?;
    ensure!(listed.trim() == "pod/web", "{listed}");

    // alice herself, with a certificate: kube-rs.
    let kubeconfig_text = user_kubeconfig(&server, "alice", "devs")?;
    let kubeconfig = Kubeconfig::from_yaml(&kubeconfig_text)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;
    let team: Api<Pod> = Api::namespaced(client.clone(), "team");
    let names: Vec<String> =
        team.list(&ListParams::default()).await?.items.into_iter().filter_map(|p| p.metadata.name).collect();
    ensure!(names == ["web"], "{names:?}");
    let default: Api<Pod> = Api::namespaced(client.clone(), "default");
    match default.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => {
            ensure!(status.code == 403 && status.reason == "Forbidden", "{status:?}");
        }
        other => anyhow::bail!("alice listed pods in default: {other:?}"),
    }
    let configmaps: Api<ConfigMap> = Api::namespaced(client, "team");
    let refused = configmaps
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "x"}}))?)
        .await;
    ensure!(matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403), "{refused:?}");

    // The Python client.
    let path = server.dir.path().join("alice.kubeconfig");
    std::fs::write(&path, &kubeconfig_text)?;
    let python = keel_testbed::python::python()?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/rbac.py");
    let output = tokio::process::Command::new(python).arg(script).arg(&path).output().await?;
    ensure!(output.status.success(), "rbac.py failed: {}", String::from_utf8_lossy(&output.stderr));
    let results: Value = serde_json::from_slice(&output.stdout).context("rbac.py output")?;
    ensure!(results["team"] == json!(["web"]), "{results}");
    ensure!(
        results["default"]
            == json!({"status": 403, "reason": "Forbidden",
                      "message": "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""}),
        "{results}"
    );
    ensure!(
        results["create"]
            == json!({"status": 403, "reason": "Forbidden",
                      "message": "configmaps is forbidden: User \"alice\" cannot create resource \"configmaps\" in API group \"\" in the namespace \"team\""}),
        "{results}"
    );
    Ok(())
}
