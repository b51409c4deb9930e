//! The keel-apiserver binary as an operator runs it: certificates and admin.kubeconfig made on first
//! start, client-certificate and token authentication, RBAC, anonymous requests allowed only health,
//! and everything still there after a restart.

use crate::common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use keel_testbed::kubectl::{self, Kubectl};
use keel_testbed::loopback::free_port;
use keel_testbed::process::{Daemon, Readiness};

fn kubectl(kubectl: &Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<(bool, String, String)> {
    let output = kubectl.command().arg("--kubeconfig").arg(kubeconfig).args(args).output()?;
    Ok((
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    ))
}

/// A kubeconfig for `server` trusting the cluster CA, with a token.
fn kubeconfig(path: &Path, server: &str, ca: &Path, token: Option<&str>) -> Result<()> {
    let user = token.map_or_else(|| "{}".to_owned(), |t| format!("\n    token: {t}"));
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: keel\n  cluster:\n    server: {server}\n    \
             certificate-authority: {}\ncontexts:\n- name: c\n  context:\n    cluster: keel\n    user: u\n\
             current-context: c\nusers:\n- name: u\n  user: {user}\n",
            ca.display()
        ),
    )?;
    Ok(())
}

#[test]
fn serves_https_with_authentication_and_survives_a_restart() -> Result<()> {
    let kubectl_31 = kubectl::minor(31)?;
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "s3cret,alice,1001,\"dev,ops\"\n")?;
    let port = free_port()?;
    let mut command = Command::new(env!("CARGO_BIN_EXE_keel-apiserver"));
    command
        .arg("--data-dir")
        .arg(&data)
        .args(["--bind-address", "127.0.0.1", "--secure-port", &port.to_string()])
        .arg("--token-auth-file")
        .arg(&tokens);
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let mut server =
        Daemon::start("keel-apiserver", command, Readiness::Tcp(address), Duration::from_secs(30))?;

    // The kubeconfig is written just after the port is bound (it names the port bound).
    let admin = data.join("admin.kubeconfig");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !admin.exists() {
        ensure!(std::time::Instant::now() < deadline, "no admin.kubeconfig after 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    use std::os::unix::fs::PermissionsExt;
    ensure!(
        std::fs::metadata(&admin)?.permissions().mode() & 0o077 == 0,
        "admin.kubeconfig is readable by others"
    );
    let (ok, _, err) = kubectl(&kubectl_31, &admin, &["create", "namespace", "kept"])?;
    ensure!(ok, "creating as the admin: {err}");

    let server_url = format!("https://{address}");
    let ca = data.join("pki").join("ca.crt");
    let token = dir.path().join("token.kubeconfig");
    kubeconfig(&token, &server_url, &ca, Some("s3cret"))?;
    // RBAC: nothing until the admin grants it, then what the grant says.
    let (ok, _, err) = kubectl(&kubectl_31, &token, &["get", "namespaces", "-o", "name"])?;
    ensure!(
        !ok && err.contains(r#"namespaces is forbidden: User "alice" cannot list resource "namespaces" in API group "" at the cluster scope"#),
        "listing with a token before a grant: {err}"
    );
    for args in [
        &["create", "clusterrole", "namespace-reader", "--verb=get,list", "--resource=namespaces"][..],
        &[
            "create",
            "clusterrolebinding",
            "alice-reads-namespaces",
            "--clusterrole=namespace-reader",
            "--group=dev",
        ],
    ] {
        let (ok, _, err) = kubectl(&kubectl_31, &admin, args)?;
        ensure!(ok, "{args:?}: {err}");
    }
    // The authorizer follows the RBAC objects as they change: eventually current, as upstream's.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out, err) = kubectl(&kubectl_31, &token, &["get", "namespaces", "-o", "name"])?;
        if ok && out.contains("namespace/kept") {
            break;
        }
        ensure!(std::time::Instant::now() < deadline, "listing with a token after the grant: {out}{err}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ok, _, err) = kubectl(&kubectl_31, &token, &["delete", "namespace", "kept"])?;
    ensure!(!ok && err.contains("Forbidden"), "deleting is not granted: {err}");

    // Without credentials (kubectl would prompt for a password, so a plain TLS client asks).
    let ca_pem = std::fs::read_to_string(&ca)?;
    let anonymous_get = |path: &str| common::raw_request(address, &ca_pem, None, "GET", path, &[], b"");
    // Anonymous requests are system:anonymous, authorized like anyone: the default policy lets
    // them read health and version only.
    let (status, _, body) = anonymous_get("/api/v1/namespaces")?;
    ensure!(
        status == 403 && body.contains(r#"User \"system:anonymous\" cannot list resource \"namespaces\""#),
        "{status} {body}"
    );
    let (status, _, body) = anonymous_get("/version")?;
    ensure!(status == 200 && body.contains("gitVersion"), "{status} {body}");
    let (status, _, body) = anonymous_get("/healthz")?;
    ensure!(status == 200 && body == "ok", "{status} {body}");
    let wrong = dir.path().join("wrong.kubeconfig");
    kubeconfig(&wrong, &server_url, &ca, Some("guess"))?;
    let (ok, _, err) = kubectl(&kubectl_31, &wrong, &["get", "namespaces"])?;
    ensure!(!ok && err.contains("Unauthorized"), "a wrong token: {err}");

    // A restart keeps the store and the CA: the same kubeconfigs work and the namespace is there.
    server.restart().context("restarting keel-apiserver")?;
    let (ok, out, err) = kubectl(&kubectl_31, &admin, &["get", "namespace", "kept", "-o", "name"])?;
    ensure!(ok && out.trim() == "namespace/kept", "after the restart: {out}{err}");
    let (ok, _, err) = kubectl(&kubectl_31, &token, &["get", "namespaces"])?;
    ensure!(ok, "the token after the restart: {err}");
    Ok(())
}
