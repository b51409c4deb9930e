//! CertificateSigningRequests end to end, the same scenario on the keel-apiserver binary (its CSR
//! controllers run inside it) and on kube-apiserver 1.34 with kube-controller-manager's csrapproving
//! and csrsigning controllers (the peers), outcomes compared: a node joins with only a bootstrap
//! token (its client CSR auto-approved after a SubjectAccessReview, issued by the cluster CA, and
//! the certificate authenticating as `system:node:<name>`), renews with its own certificate
//! (selfnodeclient), a user's kube-apiserver-client CSR waits for `kubectl certificate approve`,
//! `kubectl get csr` prints upstream's columns, a kubelet-serving CSR without names fails the
//! signer's checks, and bad input is refused as upstream refuses it: malformed requests 422 with
//! causes, system:masters through the client signer, approving or signing without the signer's
//! verbs 403, Approved with Denied 422 — nothing stored for any refusal.

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use keel_testbed::kube_apiserver::{KubeApiServer, KubeApiServerOptions};
use keel_testbed::process::Daemon;
use rcgen::{CertificateParams, DnType, KeyPair};
use serde_json::{Value, json};
use x509_parser::extensions::ParsedExtension;

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const CLIENT: &str = "kubernetes.io/kube-apiserver-client";
const SERVING: &str = "kubernetes.io/kubelet-serving";
const BOOTSTRAP_TOKEN: &str = "abcdef.0123456789abcdef";

/// Who sends a request.
#[derive(Clone, Copy)]
enum Who<'a> {
    Admin,
    Cert(&'a str, &'a str),
    Token(&'a str),
}

/// One server as the scenario drives it.
struct Side {
    name: &'static str,
    address: SocketAddr,
    ca: String,
    ca_key: String,
    admin: (String, String),
    kubeconfig: PathBuf,
}

impl Side {
    async fn call(&self, who: Who<'_>, method: &str, path: &str, body: &Value) -> Result<(u16, Value)> {
        let content_type =
            if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
        let mut headers = vec![
            ("Accept".to_owned(), "application/json".to_owned()),
            ("Content-Type".to_owned(), content_type.to_owned()),
        ];
        let client = match who {
            Who::Admin => Some((self.admin.0.clone(), self.admin.1.clone())),
            Who::Cert(cert, key) => Some((cert.to_owned(), key.to_owned())),
            Who::Token(token) => {
                headers.push(("Authorization".to_owned(), format!("Bearer {token}")));
                None
            }
        };
        let (address, ca, method, path) = (self.address, self.ca.clone(), method.to_owned(), path.to_owned());
        let bytes = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
        let (status, head, answer) = tokio::task::spawn_blocking(move || {
            let client = client.as_ref().map(|(c, k)| (c.as_str(), k.as_str()));
            common::raw_request(address, &ca, client, &method, &path, &headers, &bytes)
        })
        .await??;
        let answer = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            dechunk(&answer)
        } else {
            answer
        };
        Ok((
            status,
            serde_json::from_str(&answer).with_context(|| format!("{} {status} {answer}", self.name))?,
        ))
    }

    /// A call that must answer `expected`.
    async fn ok(&self, who: Who<'_>, method: &str, path: &str, body: &Value, expected: u16) -> Result<Value> {
        let (status, answer) = self.call(who, method, path, body).await?;
        ensure!(status == expected, "{}: {method} {path}: {status} {answer}", self.name);
        Ok(answer)
    }

    /// Creates a CSR as `who`, allowed by a binding just written: RBAC follows bindings as they
    /// are written, as upstream's informers do, so `who` may be refused for a moment.
    async fn create_once_bound(&self, who: Who<'_>, body: &Value) -> Result<Value> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            match self.call(who, "POST", CSRS, body).await? {
                (201, created) => return Ok(created),
                (403, _) if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                (status, answer) => {
                    bail!("{}: POST {CSRS} {}: {status} {answer}", self.name, body["metadata"]["name"])
                }
            }
        }
    }

    /// A client certificate for `user` in `group`, signed by this cluster's CA.
    fn client_cert(&self, user: &str, group: &str) -> Result<(String, String)> {
        let issuer = rcgen::Issuer::from_ca_cert_pem(&self.ca, KeyPair::from_pem(&self.ca_key)?)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        params.distinguished_name.push(DnType::OrganizationName, group);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        Ok((params.signed_by(&key, &issuer)?.pem(), key.serialize_pem()))
    }

    /// The CSR once `done` holds of it (the controllers are asynchronous), at most 60 s.
    async fn wait_for(&self, name: &str, done: impl Fn(&Value) -> bool) -> Result<Value> {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let csr = self.ok(Who::Admin, "GET", &format!("{CSRS}/{name}"), &Value::Null, 200).await?;
            if done(&csr) {
                return Ok(csr);
            }
            if std::time::Instant::now() > deadline {
                bail!("{}: CSR {name} never got there: {csr}", self.name);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn kubectl(&self, args: &[&str]) -> Result<String> {
        let kubectl = keel_testbed::kubectl::minor(33)?;
        let output = kubectl.command().arg("--kubeconfig").arg(&self.kubeconfig).args(args).output()?;
        ensure!(
            output.status.success(),
            "{}: kubectl {args:?}: {}",
            self.name,
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}

/// A PEM CSR and its key.
fn request(cn: &str, organization: Option<&str>, dns: &[&str]) -> Result<(String, String)> {
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(dns.iter().map(|d| (*d).to_owned()).collect::<Vec<_>>())?;
    params.distinguished_name.push(DnType::CommonName, cn);
    if let Some(o) = organization {
        params.distinguished_name.push(DnType::OrganizationName, o);
    }
    Ok((params.serialize_request(&key)?.pem()?, key.serialize_pem()))
}

fn csr(name: &str, pem: &str, signer: &str, usages: &[&str]) -> Value {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest", "metadata": {"name": name},
           "spec": {"request": STANDARD.encode(pem), "signerName": signer, "usages": usages,
                    "expirationSeconds": 86400}})
}

fn issued(csr: &Value) -> bool {
    csr.pointer("/status/certificate").and_then(Value::as_str).is_some_and(|c| !c.is_empty())
}

fn failed(csr: &Value) -> bool {
    csr.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Failed")
}

/// What the scenario compares of a CSR's conditions: type, status, reason, message.
fn conditions(csr: &Value) -> Value {
    let list = csr.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    Value::Array(
        list.iter()
            .map(|c| json!({"type": c["type"], "status": c["status"], "reason": c["reason"], "message": c["message"]}))
            .collect(),
    )
}

/// What is compared of an issued certificate: subject, whether the cluster CA issued it, validity
/// length, key usages, extended key usages, CA flag.
fn certificate(csr: &Value, ca: &str) -> Result<Value> {
    let pem = STANDARD
        .decode(csr.pointer("/status/certificate").and_then(Value::as_str).context("no certificate")?)?;
    let (_, block) = x509_parser::pem::parse_x509_pem(&pem)?;
    let cert = block.parse_x509()?;
    let (_, ca_block) = x509_parser::pem::parse_x509_pem(ca.as_bytes())?;
    let ca = ca_block.parse_x509()?;
    let (mut usages, mut extended, mut is_ca) = (Vec::new(), Vec::new(), None);
    for extension in cert.extensions() {
        match extension.parsed_extension() {
            ParsedExtension::KeyUsage(k) => usages.push(k.to_string()),
            ParsedExtension::ExtendedKeyUsage(e) => {
                extended = [("serverAuth", e.server_auth), ("clientAuth", e.client_auth)]
                    .into_iter()
                    .filter_map(|(n, on)| on.then_some(n))
                    .collect();
            }
            ParsedExtension::BasicConstraints(b) => is_ca = Some(b.ca),
            _ => {}
        }
    }
    Ok(json!({
        "subject": cert.subject().to_string(),
        "issuedByClusterCA": cert.issuer() == ca.subject() && cert.verify_signature(Some(ca.public_key())).is_ok(),
        "validSeconds": cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp(),
        "keyUsage": usages,
        "extendedKeyUsage": extended,
        "ca": is_ca,
    }))
}

/// A SelfSubjectReview's user, the credential id checked against the certificate (each side's
/// differ) and then masked.
fn user_info(review: &Value, cert_pem: &str) -> Result<Value> {
    let mut info = review["status"]["userInfo"].clone();
    let (_, block) = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())?;
    let digest = ring::digest::digest(&ring::digest::SHA256, &block.contents);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let id = &mut info["extra"]["authentication.kubernetes.io/credential-id"];
    ensure!(*id == json!([format!("X509SHA256={hex}")]), "credential id {id} is not the certificate's");
    *id = json!(["X509SHA256=<digest>"]);
    Ok(info)
}

/// A refusal as compared: code, reason, message and causes.
fn refusal(status: u16, answer: &Value) -> Value {
    json!({"code": status, "reason": answer["reason"], "message": answer["message"], "causes": common::causes(answer)})
}

/// Runs the scenario on one side; what it saw, step by step.
async fn scenario(side: &Side) -> Result<Vec<(String, Value)>> {
    let mut seen: Vec<(String, Value)> = Vec::new();
    // A bootstrap token and kubeadm's three bindings: bootstrappers may create CSRs and have node
    // client CSRs approved; nodes have their renewals approved.
    let (id, secret) = BOOTSTRAP_TOKEN.split_once('.').context("token")?;
    side.ok(
        Who::Admin,
        "POST",
        "/api/v1/namespaces/kube-system/secrets",
        &json!({
        "apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": format!("bootstrap-token-{id}"), "namespace": "kube-system"},
        "stringData": {"token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true",
                       "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"}}),
        201,
    )
    .await?;
    for (name, role, kind, subject) in [
        (
            "kubeadm:kubelet-bootstrap",
            "system:node-bootstrapper",
            "Group",
            "system:bootstrappers:kubeadm:default-node-token",
        ),
        (
            "kubeadm:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            "Group",
            "system:bootstrappers:kubeadm:default-node-token",
        ),
        (
            "kubeadm:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "Group",
            "system:nodes",
        ),
    ] {
        side.ok(Who::Admin, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": subject}]}), 201).await?;
    }

    // A node joins with only the bootstrap token.
    let (pem, key) = request("system:node:n1", Some("system:nodes"), &[])?;
    let body = csr("node-csr-n1", &pem, CLIENT_KUBELET, &["digital signature", "client auth"]);
    let created = side.create_once_bound(Who::Token(BOOTSTRAP_TOKEN), &body).await?;
    seen.push(("created by the bootstrap token".into(), json!({
        "username": created["spec"]["username"], "groups": created["spec"]["groups"], "status": created["status"]})));
    let done = side.wait_for("node-csr-n1", issued).await?;
    seen.push(("bootstrap CSR conditions".into(), conditions(&done)));
    seen.push(("bootstrap CSR certificate".into(), certificate(&done, &side.ca)?));
    let cert =
        String::from_utf8(STANDARD.decode(done["status"]["certificate"].as_str().unwrap_or_default())?)?;
    let me = side
        .ok(
            Who::Cert(&cert, &key),
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
            201,
        )
        .await?;
    seen.push(("the node's certificate authenticates".into(), user_info(&me, &cert)?));

    // The node renews with its own certificate.
    let (pem, _) = request("system:node:n1", Some("system:nodes"), &[])?;
    let body = csr(
        "node-csr-n1-renewal",
        &pem,
        CLIENT_KUBELET,
        &["digital signature", "key encipherment", "client auth"],
    );
    side.ok(Who::Cert(&cert, &key), "POST", CSRS, &body, 201).await?;
    let renewed = side.wait_for("node-csr-n1-renewal", issued).await?;
    seen.push(("renewal conditions".into(), conditions(&renewed)));

    // A kubelet-serving CSR without names, approved by the admin, fails the signer's checks.
    let (pem, _) = request("system:node:n1", Some("system:nodes"), &[])?;
    let body = csr("serving-n1", &pem, SERVING, &["digital signature", "server auth"]);
    side.ok(Who::Cert(&cert, &key), "POST", CSRS, &body, 201).await?;
    side.kubectl(&["certificate", "approve", "serving-n1"])?;
    let serving = side.wait_for("serving-n1", failed).await?;
    seen.push(("serving CSR without names".into(), conditions(&serving)));

    // alice may write CSRs and their subresources, but is no signer or approver.
    side.ok(Who::Admin, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "csr-writer"},
        "rules": [{"apiGroups": ["certificates.k8s.io"], "verbs": ["*"],
                   "resources": ["certificatesigningrequests", "certificatesigningrequests/approval",
                                 "certificatesigningrequests/status"]}]}), 201).await?;
    side.ok(Who::Admin, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", &json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "csr-writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "csr-writer"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}]}), 201).await?;
    let (alice_cert, alice_key) = side.client_cert("alice", "devs")?;
    let alice = Who::Cert(&alice_cert, &alice_key);
    let (pem, new_key) = request("alice", Some("devs"), &[])?;
    let body = csr("alice", &pem, CLIENT, &["client auth"]);
    let pending = side.create_once_bound(alice, &body).await?;
    seen.push((
        "alice's CSR".into(),
        json!({"username": pending["spec"]["username"], "groups": pending["spec"]["groups"]}),
    ));
    let mut approve = pending.clone();
    approve["status"]["conditions"] = json!([{"type": "Approved", "status": "True", "reason": "Mine"}]);
    let (status, answer) = side.call(alice, "PUT", &format!("{CSRS}/alice/approval"), &approve).await?;
    seen.push(("alice approves her own".into(), refusal(status, &answer)));
    let mut sign = pending.clone();
    sign["status"]["certificate"] = STANDARD.encode(&alice_cert).into();
    let (status, answer) = side.call(alice, "PUT", &format!("{CSRS}/alice/status"), &sign).await?;
    seen.push(("alice signs her own".into(), refusal(status, &answer)));
    let mut both = pending.clone();
    both["status"]["conditions"] = json!([{"type": "Approved", "status": "True", "reason": "A"}, {"type": "Denied", "status": "True", "reason": "D"}]);
    let (status, answer) = side.call(Who::Admin, "PUT", &format!("{CSRS}/alice/approval"), &both).await?;
    seen.push(("approved and denied".into(), refusal(status, &answer)));
    let still = side.ok(Who::Admin, "GET", &format!("{CSRS}/alice"), &Value::Null, 200).await?;
    seen.push((
        "alice's CSR after the refusals".into(),
        json!({"conditions": conditions(&still), "issued": issued(&still)}),
    ));
    // `kubectl get csr`: upstream's columns (AGE left out).
    let table = side.kubectl(&["get", "csr", "alice", "node-csr-n1", "serving-n1"])?;
    let rows: Vec<String> = table
        .lines()
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            cells.iter().enumerate().filter(|(i, _)| *i != 1).map(|(_, c)| *c).collect::<Vec<_>>().join(" ")
        })
        .collect();
    seen.push(("kubectl get csr".into(), json!(rows)));
    side.kubectl(&["certificate", "approve", "alice"])?;
    let approved = side.wait_for("alice", issued).await?;
    seen.push(("alice's CSR approved".into(), conditions(&approved)));
    seen.push(("alice's certificate".into(), certificate(&approved, &side.ca)?));
    let new_cert =
        String::from_utf8(STANDARD.decode(approved["status"]["certificate"].as_str().unwrap_or_default())?)?;
    let me = side
        .ok(
            Who::Cert(&new_cert, &new_key),
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
            201,
        )
        .await?;
    seen.push(("alice's new certificate authenticates".into(), user_info(&me, &new_cert)?));

    // Bad input: each refused, nothing stored.
    let (good, _) = request("bob", Some("devs"), &[])?;
    let (_, block) = x509_parser::pem::parse_x509_pem(good.as_bytes())?;
    let mut der = block.contents.clone();
    let last = der.len() - 1;
    der[last] ^= 1;
    let forged = pem_block("CERTIFICATE REQUEST", &der);
    let (masters, _) = request("root", Some("system:masters"), &[])?;
    let mut short = csr("bad-short", &good, CLIENT, &["client auth"]);
    short["spec"]["expirationSeconds"] = 60.into();
    let mut no_signer = csr("bad-no-signer", &good, "", &[]);
    no_signer["spec"]["signerName"] = "".into();
    let bad = [
        ("not a PEM request", csr("bad-pem", "junk", CLIENT, &["client auth"])),
        ("a forged signature", csr("bad-signature", &forged, CLIENT, &["client auth"])),
        ("no signer, no usages", no_signer),
        (
            "unknown and repeated usages",
            csr("bad-usages", &good, CLIENT, &["client auth", "client auth", "flying"]),
        ),
        ("the legacy signer", csr("bad-legacy", &good, "kubernetes.io/legacy-unknown", &["client auth"])),
        ("a signer without a path", csr("bad-signer", &good, "example.com", &["client auth"])),
        ("a minute", short),
        ("system:masters through the client signer", csr("bad-masters", &masters, CLIENT, &["client auth"])),
    ];
    for (what, body) in bad {
        let name = body["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        let (status, answer) = side.call(Who::Admin, "POST", CSRS, &body).await?;
        // Each side made its own keys: the request shown in the message is masked.
        let request = body["spec"]["request"].as_str().unwrap_or_default().to_owned();
        let masked = refusal(status, &answer).to_string().replace(&request, "<request>");
        seen.push((format!("refused: {what}"), serde_json::from_str(&masked)?));
        let (status, _) = side.call(Who::Admin, "GET", &format!("{CSRS}/{name}"), &Value::Null).await?;
        ensure!(status == 404, "{}: {what}: stored anyway ({status})", side.name);
    }
    Ok(seen)
}

/// An HTTP/1.1 chunked body's data (Go's server chunks larger responses).
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { break };
        if size == 0 || tail.len() < size {
            break;
        }
        out.push_str(&tail[..size]);
        rest = tail[size..].trim_start_matches("\r\n");
    }
    out
}

fn pem_block(label: &str, der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let lines: Vec<&str> =
        body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap_or_default()).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n"))
}

/// kube-controller-manager with the CSR approving and signing controllers only.
fn csr_controllers(upstream: &KubeApiServer, kubeconfig: &Path) -> Result<Daemon> {
    let signing = [
        format!("--cluster-signing-cert-file={}", upstream.pki_file("ca.crt").display()),
        format!("--cluster-signing-key-file={}", upstream.pki_file("ca.key").display()),
    ];
    keel_testbed::kube_apiserver::kube_controller_manager(kubeconfig, "csrapproving,csrsigning", &signing)
}

#[tokio::test]
async fn certificate_signing_requests_as_kube_apiserver_with_its_controllers() -> Result<()> {
    let options = KubeApiServerOptions::new().arg("--enable-bootstrap-token-auth=true");
    let upstream = tokio::task::spawn_blocking(move || KubeApiServer::start_with(&options)).await??;
    let upstream_kubeconfig = upstream.dir().join("admin.kubeconfig");
    upstream.write_kubeconfig(&upstream_kubeconfig, upstream.admin())?;
    let _controllers = csr_controllers(&upstream, &upstream_kubeconfig)?;

    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let binary = common::keel_binary(&data, &[])?;
    let read =
        |name: &str| std::fs::read_to_string(data.join("pki").join(name)).with_context(|| name.to_owned());

    let keel = Side {
        name: "keel-apiserver",
        address: binary.address,
        ca: read("ca.crt")?,
        ca_key: read("ca.key")?,
        admin: (read("admin.crt")?, read("admin.key")?),
        kubeconfig: data.join("admin.kubeconfig"),
    };
    let kube = Side {
        name: "kube-apiserver",
        address: upstream.address(),
        ca: upstream.ca_pem().to_owned(),
        ca_key: std::fs::read_to_string(upstream.pki_file("ca.key"))?,
        admin: (upstream.admin().cert_pem.clone(), upstream.admin().key_pem.clone()),
        kubeconfig: upstream_kubeconfig,
    };
    let theirs = scenario(&kube).await?;
    let ours = scenario(&keel).await?;
    let mut differences = Vec::new();
    for ((step, expected), (_, actual)) in theirs.iter().zip(&ours) {
        if expected != actual {
            differences.push(format!("{step}:\n  kube-apiserver: {expected}\n  keel-apiserver: {actual}"));
        }
    }
    ensure!(theirs.len() == ours.len(), "steps: {} upstream, {} keel", theirs.len(), ours.len());
    ensure!(differences.is_empty(), "{} differences:\n{}", differences.len(), differences.join("\n"));
    Ok(())
}

/// A kubelet client CSR no SubjectAccessReview allows yet is looked at again, as upstream's
/// approver requeues it: the RBAC policy follows bindings as they are written, so a binding written
/// just before a CSR can reach the approver after the CSR does. Here the binding comes a second
/// after the CSR, which nothing changes in between.
#[tokio::test]
async fn a_csr_refused_for_want_of_a_binding_is_approved_once_bound() -> Result<()> {
    let server = common::Server::start().await?;
    let json_headers = [("Accept", "application/json"), ("Content-Type", "application/json")];
    let node = [
        json_headers[0],
        json_headers[1],
        ("Impersonate-User", "system:node:n1"),
        ("Impersonate-Group", "system:nodes"),
    ];
    let (pem, _) = request("system:node:n1", Some("system:nodes"), &[])?;
    let body = csr("node-csr-n1", &pem, CLIENT_KUBELET, &["digital signature", "client auth"]);
    let (status, _, answer) =
        server.request_with_headers("POST", CSRS, &node, body.to_string().as_bytes()).await?;
    ensure!(status == 201, "the node's CSR: {status} {answer}");
    let get = || async {
        let (status, _, answer) =
            server.request_with_headers("GET", &format!("{CSRS}/node-csr-n1"), &json_headers, b"").await?;
        ensure!(status == 200, "GET the CSR: {status} {answer}");
        Ok::<Value, anyhow::Error>(serde_json::from_str(&answer)?)
    };
    let approved =
        |csr: &Value| conditions(csr).as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Approved"));
    // Looked at and refused: nothing lets system:nodes have their own client certificates yet.
    tokio::time::sleep(Duration::from_secs(1)).await;
    ensure!(!approved(&get().await?), "approved before any binding allowed it");
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "kubeadm:node-autoapprove-certificate-rotation"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]});
    let (status, _, answer) = server
        .request_with_headers(
            "POST",
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            &json_headers,
            binding.to_string().as_bytes(),
        )
        .await?;
    ensure!(status == 201, "the binding: {status} {answer}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let csr = get().await?;
        if approved(&csr) {
            ensure!(
                conditions(&csr)[0]["message"]
                    == "Auto approving self kubelet client certificate after SubjectAccessReview.",
                "{csr}"
            );
            return Ok(());
        }
        ensure!(std::time::Instant::now() < deadline, "never approved once bound: {csr}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
