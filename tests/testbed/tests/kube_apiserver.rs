//! Tests of the kube-apiserver fixture: the peer starts on its own etcd, authenticates the client
//! certificates the fixture mints (user and groups, as `kubectl auth whoami` reports them), takes
//! extra flags, authorizes with Node,RBAC, and leaves no process behind.

use crate::common;

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use common::assert_gone;
use keel_testbed::kube_apiserver::{KubeApiServer, KubeApiServerOptions};
use serde_json::Value;

/// Runs kubectl with `kubeconfig`; (success, stdout, stderr).
fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> Result<(bool, String, String)> {
    let kubectl = keel_testbed::kubectl::newest()?;
    let mut command: Command = kubectl.command();
    command.arg("--kubeconfig").arg(kubeconfig).args(args);
    let output = command.output().with_context(|| format!("running kubectl {args:?}"))?;
    Ok((
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

fn whoami(
    server: &KubeApiServer,
    name: &str,
    client: &keel_testbed::kube_apiserver::ClientCert,
) -> Result<Value> {
    let kubeconfig = server.dir().join(format!("{name}.kubeconfig"));
    server.write_kubeconfig(&kubeconfig, client)?;
    let (ok, out, err) = kubectl(&kubeconfig, &["auth", "whoami", "-o", "json"])?;
    ensure!(ok, "kubectl auth whoami as {name} failed: {err}");
    let review: Value = serde_json::from_str(&out).context("parsing the SelfSubjectReview")?;
    Ok(review["status"]["userInfo"].clone())
}

#[test]
fn minted_certificates_authenticate_and_node_rbac_authorizes() -> Result<()> {
    let started = Instant::now();
    let server = KubeApiServer::start()?;
    eprintln!("kube-apiserver ready in {:?} at {}", started.elapsed(), server.url());
    let (apiserver, etcd) = (server.daemon().pid(), server.etcd().pid(0)?);

    let admin = whoami(&server, "admin", server.admin())?;
    assert_eq!(admin["username"], "kubernetes-admin");
    let groups = admin["groups"].as_array().context("admin groups")?;
    assert!(groups.contains(&Value::from("system:masters")), "{admin}");

    let node = server.client_cert("system:node:n1", &["system:nodes", "keel:extra"])?;
    let info = whoami(&server, "node", &node)?;
    assert_eq!(info["username"], "system:node:n1");
    let groups: Vec<&str> =
        info["groups"].as_array().context("node groups")?.iter().filter_map(Value::as_str).collect();
    assert_eq!(groups, ["system:nodes", "keel:extra", "system:authenticated"]);

    // RBAC is on: a user without bindings may not list namespaces, the admin may.
    let nobody = server.client_cert("nobody", &[])?;
    let kubeconfig = server.dir().join("nobody.kubeconfig");
    server.write_kubeconfig(&kubeconfig, &nobody)?;
    let (ok, _, err) = kubectl(&kubeconfig, &["get", "namespaces"])?;
    assert!(!ok && err.contains("forbidden"), "nobody listed namespaces: {err}");

    drop(server);
    assert_gone(apiserver, "kube-apiserver");
    assert_gone(etcd, "etcd under kube-apiserver");
    Ok(())
}

#[test]
fn extra_flags_replace_the_defaults() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "keel-token,token-user,uid-1,\"group-a,group-b\"\n")?;
    let options = KubeApiServerOptions::new()
        .arg(format!("--token-auth-file={}", tokens.display()))
        .arg("--authorization-mode=AlwaysAllow")
        .arg("--anonymous-auth=false");
    let server = KubeApiServer::start_with(&options)?;
    let kubeconfig = server.dir().join("token.kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    \
         certificate-authority: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
         current-context: c\nusers:\n- name: u\n  user:\n    token: keel-token\n",
        server.url(),
        server.ca_file().display()
    );
    std::fs::write(&kubeconfig, text)?;
    let (ok, out, err) = kubectl(&kubeconfig, &["auth", "whoami", "-o", "json"])?;
    ensure!(ok, "kubectl auth whoami with a token failed: {err}");
    let review: Value = serde_json::from_str(&out)?;
    assert_eq!(review["status"]["userInfo"]["username"], "token-user");
    // AlwaysAllow replaced Node,RBAC instead of joining it: a user without bindings may list.
    let (ok, _, err) = kubectl(&kubeconfig, &["get", "namespaces"])?;
    assert!(ok, "AlwaysAllow should let token-user list namespaces: {err}");
    Ok(())
}
