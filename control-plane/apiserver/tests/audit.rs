//! The audit log end to end: the keel-apiserver binary with `--audit-policy-file` and
//! `--audit-log-path`, driven by kubectl 1.33 and a plain HTTPS client, and its events held against
//! kube-apiserver 1.34's for the same policy and the same requests, field by field with what each
//! server chooses for itself masked (audit IDs, times, uids, resourceVersions, credential IDs).
//! Also: bad policy files refused with kube-apiserver's words, the legacy format and rotation.

use crate::common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use keel_testbed::kube_apiserver::{KubeApiServer, KubeApiServerOptions};
use keel_testbed::kubectl::{self, Kubectl};
use keel_testbed::loopback::free_port;
use keel_testbed::process::{Daemon, Readiness};
use serde_json::{Value, json};

/// Rules of each kind the brief names: a user not audited, Secrets at Metadata (at Request in one
/// namespace, to show the redaction), ConfigMaps at RequestResponse without RequestReceived and
/// with managed fields, non-resource URLs, namespaces at Request, TokenRequests at Metadata; managed
/// fields left out unless a rule keeps them.
const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitManagedFields: true
rules:
- level: None
  users: ["bob"]
- level: Request
  resources: [{group: "", resources: ["secrets"]}]
  namespaces: ["redacted"]
- level: Metadata
  resources: [{group: "", resources: ["secrets"]}]
- level: RequestResponse
  resources: [{group: "", resources: ["configmaps"]}]
  omitStages: ["RequestReceived"]
  omitManagedFields: false
- level: Metadata
  nonResourceURLs: ["/version", "/healthz*"]
- level: Request
  verbs: ["get", "create", "delete"]
  resources: [{group: "", resources: ["namespaces"]}]
- level: Metadata
  resources: [{group: "", resources: ["serviceaccounts/token"]}]
"#;

/// alice (in dev, granted nothing) and bob (not audited).
const TOKENS: &str = "alice-token,alice,alice-uid,\"dev\"\nbob-token,bob,bob-uid\n";

/// One API server as the plain client reaches it.
struct Api {
    address: SocketAddr,
    ca: String,
    admin: (String, String),
}

/// Who sends a request.
#[derive(Clone, Copy)]
enum As<'a> {
    Admin,
    Token(&'a str),
}

impl Api {
    /// A request labelled by its User-Agent (`audit-test/<label>`), so its events can be found;
    /// status, response headers and body.
    async fn send(
        &self,
        label: &str,
        who: As<'_>,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> Result<(u16, String, String)> {
        let mut all = vec![
            ("User-Agent".to_owned(), format!("audit-test/{label}")),
            ("Accept".to_owned(), "application/json".to_owned()),
        ];
        if !body.is_null() {
            let content_type =
                if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
            all.push(("Content-Type".to_owned(), content_type.to_owned()));
        }
        if let As::Token(token) = who {
            all.push(("Authorization".to_owned(), format!("Bearer {token}")));
        }
        all.extend(headers.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        let (address, ca) = (self.address, self.ca.clone());
        let admin = matches!(who, As::Admin).then(|| self.admin.clone());
        let (method, path) = (method.to_owned(), path.to_owned());
        let bytes = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
        tokio::task::spawn_blocking(move || {
            let client = admin.as_ref().map(|(c, k)| (c.as_str(), k.as_str()));
            common::raw_request(address, &ca, client, &method, &path, &all, &bytes)
        })
        .await?
    }
}

/// The request sequence both servers get; each step's label, and the Audit-Id header answered to
/// the request that sent its own.
async fn drive(api: &Api, kubectl: &Kubectl, kubeconfig: &Path) -> Result<Vec<String>> {
    let labels = std::cell::RefCell::new(Vec::new());
    let null = Value::Null;
    let step = async |label: &str,
                      who: As<'_>,
                      method: &str,
                      path: &str,
                      headers: &[(&str, &str)],
                      body: &Value,
                      want: u16|
           -> Result<String> {
        let (status, head, text) = api.send(label, who, method, path, headers, body).await?;
        ensure!(status == want, "{label}: {method} {path} answered {status}, not {want}: {text}");
        labels.borrow_mut().push(label.to_owned());
        Ok(head)
    };
    let cm = "/api/v1/namespaces/audited/configmaps";
    step("version", As::Admin, "GET", "/version", &[], &null, 200).await?;
    step("healthz", As::Admin, "GET", "/healthz", &[], &null, 200).await?;
    let head =
        step("audit-id", As::Admin, "GET", "/version", &[("Audit-ID", "chosen-by-the-client")], &null, 200)
            .await?;
    ensure!(
        head.to_ascii_lowercase().contains("\r\naudit-id: chosen-by-the-client"),
        "the Audit-ID given is echoed: {head}"
    );
    for ns in ["audited", "redacted"] {
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        step(
            &format!("create-namespace-{ns}"),
            As::Admin,
            "POST",
            "/api/v1/namespaces",
            &[],
            &namespace,
            201,
        )
        .await?;
    }
    step("get-namespace", As::Admin, "GET", "/api/v1/namespaces/audited", &[], &null, 200).await?;
    let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm1", "labels": {"app": "web"}}, "data": {"a": "b"}});
    step("create-configmap", As::Admin, "POST", cm, &[], &configmap, 201).await?;
    step("get-configmap", As::Admin, "GET", &format!("{cm}/cm1"), &[], &null, 200).await?;
    step("patch-configmap", As::Admin, "PATCH", &format!("{cm}/cm1"), &[], &json!({"data": {"c": "d"}}), 200)
        .await?;
    let replaced = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm1", "namespace": "audited"}, "data": {"z": "y"}});
    step("update-configmap", As::Admin, "PUT", &format!("{cm}/cm1"), &[], &replaced, 200).await?;
    step("list-configmaps", As::Admin, "GET", cm, &[], &null, 200).await?;
    step("watch-configmaps", As::Admin, "GET", &format!("{cm}?watch=true&timeoutSeconds=1"), &[], &null, 200)
        .await?;
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s1"},
        "data": {"token": "c2VjcmV0"}, "stringData": {"password": "hunter2"}});
    step(
        "create-secret-at-request",
        As::Admin,
        "POST",
        "/api/v1/namespaces/redacted/secrets",
        &[],
        &secret,
        201,
    )
    .await?;
    let patch = json!({"stringData": {"password": "hunter3"}});
    step(
        "patch-secret-at-request",
        As::Admin,
        "PATCH",
        "/api/v1/namespaces/redacted/secrets/s1",
        &[],
        &patch,
        200,
    )
    .await?;
    step(
        "create-secret-at-metadata",
        As::Admin,
        "POST",
        "/api/v1/namespaces/audited/secrets",
        &[],
        &secret,
        201,
    )
    .await?;
    step("get-missing-secret", As::Admin, "GET", "/api/v1/namespaces/audited/secrets/nope", &[], &null, 404)
        .await?;
    let account = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot"}});
    step(
        "create-serviceaccount",
        As::Admin,
        "POST",
        "/api/v1/namespaces/audited/serviceaccounts",
        &[],
        &account,
        201,
    )
    .await?;
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}});
    step(
        "token-request",
        As::Admin,
        "POST",
        "/api/v1/namespaces/audited/serviceaccounts/robot/token",
        &[],
        &request,
        201,
    )
    .await?;
    step("forbidden", As::Token("alice-token"), "GET", &format!("{cm}/cm1"), &[], &null, 403).await?;
    let impersonating = [("Impersonate-User", "alice"), ("Impersonate-Group", "dev")];
    step("impersonated", As::Admin, "GET", &format!("{cm}/cm1"), &impersonating, &null, 403).await?;
    step("not-audited", As::Token("bob-token"), "GET", &format!("{cm}/cm1"), &[], &null, 403).await?;
    step("bad-token", As::Token("forged"), "GET", cm, &[], &null, 401).await?;
    let options = json!({"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"});
    step("delete-configmap", As::Admin, "DELETE", &format!("{cm}/cm1"), &[], &options, 200).await?;
    step("get-deleted-configmap", As::Admin, "GET", &format!("{cm}/cm1"), &[], &null, 404).await?;
    // kubectl 1.33: a generator's create (a protobuf body) and a get (a Table).
    for (label, args) in [
        (
            "kubectl-create",
            &["create", "configmap", "from-kubectl", "--from-literal=k=v", "-n", "audited"][..],
        ),
        ("kubectl-get", &["get", "configmap", "from-kubectl", "-n", "audited"][..]),
    ] {
        common::kubectl_ok(kubectl, kubeconfig, args).await.with_context(|| label.to_owned())?;
        labels.borrow_mut().push(label.to_owned());
    }
    step("end", As::Admin, "GET", "/version", &[], &null, 200).await?;
    Ok(labels.into_inner())
}

/// The events of a log file, once the `end` request's last event is in it (the keel writer and
/// kube-apiserver's both write in order).
fn events_until_end(path: &Path) -> Result<Vec<Value>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let events: Vec<Value> = text
            .lines()
            .map(|l| {
                serde_json::from_str(l).with_context(|| format!("an audit line of {}: {l}", path.display()))
            })
            .collect::<Result<_>>()?;
        let ended = |e: &Value| e["userAgent"] == "audit-test/end" && e["stage"] == "ResponseComplete";
        let watched =
            |e: &Value| e["userAgent"] == "audit-test/watch-configmaps" && e["stage"] == "ResponseComplete";
        if events.iter().any(ended) && events.iter().any(watched) {
            return Ok(events);
        }
        ensure!(
            Instant::now() < deadline,
            "no event of the last request in {} after 30 s:\n{text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The events of each step, in order: raw requests by their User-Agent, kubectl's (the admin's,
/// in the `audited` namespace) in the order kubectl sent them.
fn by_step(events: &[Value], labels: &[String]) -> BTreeMap<String, Vec<Value>> {
    let mut steps: BTreeMap<String, Vec<Value>> = labels.iter().map(|l| (l.clone(), Vec::new())).collect();
    let mut kubectl: Vec<&Value> = events
        .iter()
        .filter(|e| e["userAgent"].as_str().is_some_and(|ua| ua.starts_with("kubectl")))
        .filter(|e| e["user"]["username"] == "kubernetes-admin")
        .collect();
    // kubectl-create's POST then kubectl-get's GET (each one event: RequestReceived is omitted).
    if let Some(first) = kubectl.first().copied() {
        steps.entry("kubectl-create".into()).or_default().push(first.clone());
        kubectl.remove(0);
    }
    steps.entry("kubectl-get".into()).or_default().extend(kubectl.into_iter().cloned());
    for event in events {
        if let Some(label) = event["userAgent"].as_str().and_then(|ua| ua.strip_prefix("audit-test/")) {
            steps.entry(label.to_owned()).or_default().push(event.clone());
        }
    }
    steps
}

const MASKED: &str = "<masked>";

/// What a server chooses for itself masked: IDs and times, uids and resourceVersions anywhere,
/// managed fields' times, credential IDs, Table ages.
fn mask(event: &Value) -> Value {
    let mut event = event.clone();
    let micro = |t: &Value| {
        let t = t.as_str().unwrap_or_default();
        t.len() == 27 && t.ends_with('Z') && t.as_bytes()[19] == b'.'
    };
    assert!(
        micro(&event["requestReceivedTimestamp"]) && micro(&event["stageTimestamp"]),
        "times are MicroTime: {event}"
    );
    for key in ["requestReceivedTimestamp", "stageTimestamp"] {
        event[key] = json!(MASKED);
    }
    if event["auditID"] != "chosen-by-the-client" {
        event["auditID"] = json!(MASKED);
    }
    if let Some(ids) = event.pointer_mut("/user/extra/authentication.kubernetes.io~1credential-id") {
        *ids = json!([MASKED]);
    }
    if let Some(id) = event.pointer_mut("/annotations/authentication.kubernetes.io~1issued-credential-id") {
        *id = json!(MASKED);
    }
    fn walk(value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (key, value) in map.iter_mut() {
                    match key.as_str() {
                        "uid" | "resourceVersion" | "creationTimestamp" | "time" if value.is_string() => {
                            *value = json!(MASKED);
                        }
                        _ => walk(value),
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut event);
    // A Table's Age column.
    if let Some(table) = event.get_mut("responseObject").filter(|o| o["kind"] == "Table") {
        let age =
            table["columnDefinitions"].as_array().and_then(|c| c.iter().position(|c| c["name"] == "Age"));
        if let (Some(age), Some(rows)) = (age, table["rows"].as_array_mut()) {
            for row in rows {
                row["cells"][age] = json!(MASKED);
            }
        }
    }
    event
}

/// Every leaf where `a` and `b` differ, as `path: a | b`.
fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<(String, String)>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                let (l, r) = (x.get(key).unwrap_or(&Value::Null), y.get(key).unwrap_or(&Value::Null));
                differences(&format!("{path}.{key}"), l, r, out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (l, r)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}[{i}]"), l, r, out);
            }
        }
        (l, r) if l != r => out.push((path.to_owned(), format!("kube-apiserver {l} | keel {r}"))),
        _ => {}
    }
}

/// The keel-apiserver binary with the audit flags (and `extra`), on the embedded store.
struct Keel {
    daemon: Daemon,
    address: SocketAddr,
    data: PathBuf,
    log: PathBuf,
}

impl Keel {
    fn start(dir: &Path, policy: &Path, extra: &[&str]) -> Result<Keel> {
        let data = dir.join("data");
        let tokens = dir.join("tokens.csv");
        std::fs::write(&tokens, TOKENS)?;
        let log = dir.join("logs").join("audit.log");
        let port = free_port()?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_keel-apiserver"));
        command
            .arg("--data-dir")
            .arg(&data)
            .args(["--bind-address", "127.0.0.1", "--secure-port", &port.to_string()])
            .arg("--token-auth-file")
            .arg(&tokens)
            .arg("--audit-policy-file")
            .arg(policy)
            .arg("--audit-log-path")
            .arg(&log)
            .args(extra);
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let daemon =
            Daemon::start("keel-apiserver", command, Readiness::Tcp(address), Duration::from_secs(30))?;
        let kubeconfig = data.join("admin.kubeconfig");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !kubeconfig.exists() {
            ensure!(Instant::now() < deadline, "no admin.kubeconfig after 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Keel { daemon, address, data, log })
    }

    fn api(&self) -> Result<Api> {
        let pki = self.data.join("pki");
        let read =
            |name: &str| std::fs::read_to_string(pki.join(name)).with_context(|| format!("reading {name}"));
        Ok(Api {
            address: self.address,
            ca: read("ca.crt")?,
            admin: (read("admin.crt")?, read("admin.key")?),
        })
    }

    fn kubeconfig(&self) -> PathBuf {
        self.data.join("admin.kubeconfig")
    }
}

fn write_policy(dir: &Path) -> Result<PathBuf> {
    let path = dir.join("policy.yaml");
    std::fs::write(&path, POLICY)?;
    Ok(path)
}

/// Differences between the servers that are not Keel bugs, each with its reason: (step, path,
/// reason). Each must still be seen, so the list stays true.
const EXPECTED: &[(&str, &str, &str)] = &[
    (
        "create-secret-at-request",
        ".requestObject.data.password",
        "issue 18: no Secret value in an audit event below RequestResponse (upstream logs the body whole)",
    ),
    ("create-secret-at-request", ".requestObject.data.token", "issue 18, as above"),
    ("patch-secret-at-request", ".requestObject.stringData.password", "issue 18, as above"),
    (
        "list-configmaps",
        ".responseObject.items[0].apiVersion",
        "Keel serves a list's items as stored, with their apiVersion and kind (objects::served_bytes, \
         so that a list is not parsed object by object); upstream's typed lists leave the items' \
         TypeMeta out. The same holds for the list served.",
    ),
    ("list-configmaps", ".responseObject.items[0].kind", "as above"),
];

#[tokio::test]
async fn events_match_kube_apiserver() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let policy = write_policy(dir.path())?;
    let kube_log = dir.path().join("kube").join("audit.log");
    std::fs::create_dir_all(kube_log.parent().context("parent")?)?;
    let tokens = dir.path().join("kube-tokens.csv");
    std::fs::write(&tokens, TOKENS)?;
    let options = KubeApiServerOptions::new()
        .arg(format!("--token-auth-file={}", tokens.display()))
        .arg(format!("--audit-policy-file={}", policy.display()))
        .arg(format!("--audit-log-path={}", kube_log.display()));
    let kube = tokio::task::spawn_blocking(move || KubeApiServer::start_with(&options)).await??;
    let kube_api = Api {
        address: kube.address(),
        ca: kube.ca_pem().to_owned(),
        admin: (kube.admin().cert_pem.clone(), kube.admin().key_pem.clone()),
    };
    let kube_kubeconfig = dir.path().join("kube.kubeconfig");
    kube.write_kubeconfig(&kube_kubeconfig, kube.admin())?;
    let keel_dir = dir.path().join("keel");
    std::fs::create_dir_all(&keel_dir)?;
    let keel = Keel::start(&keel_dir, &policy, &[])?;

    let kubectl = kubectl::minor(33)?;
    let labels = drive(&kube_api, &kubectl, &kube_kubeconfig).await?;
    drive(&keel.api()?, &kubectl, &keel.kubeconfig()).await?;
    let kube_steps = by_step(&events_until_end(&kube_log)?, &labels);
    let keel_steps = by_step(&events_until_end(&keel.log)?, &labels);

    let mut seen: Vec<(String, String)> = Vec::new();
    let mut unexpected = Vec::new();
    for label in &labels {
        let (kube_events, keel_events) = (&kube_steps[label], &keel_steps[label]);
        let stages = |events: &[Value]| {
            events.iter().map(|e| e["stage"].as_str().unwrap_or("?").to_owned()).collect::<Vec<_>>()
        };
        if stages(kube_events) != stages(keel_events) {
            unexpected.push(format!(
                "{label}: stages kube-apiserver {:?} | keel {:?}\n  kube: {kube_events:?}\n  keel: {keel_events:?}",
                stages(kube_events),
                stages(keel_events)
            ));
            continue;
        }
        for (kube_event, keel_event) in kube_events.iter().zip(keel_events) {
            let mut found = Vec::new();
            differences("", &mask(kube_event), &mask(keel_event), &mut found);
            for (path, detail) in found {
                if EXPECTED.iter().any(|(l, p, _)| l == label && *p == path) {
                    seen.push((label.clone(), path));
                } else {
                    unexpected.push(format!("{label} {}: {path}: {detail}", keel_event["stage"]));
                }
            }
        }
    }
    let unseen: Vec<_> = EXPECTED
        .iter()
        .filter(|(l, p, _)| !seen.iter().any(|(sl, sp)| sl == l && sp == p))
        .map(|(l, p, _)| format!("{l}: {p}"))
        .collect();
    ensure!(unexpected.is_empty(), "events differ from kube-apiserver's:\n{}", unexpected.join("\n"));
    ensure!(unseen.is_empty(), "expected differences no longer seen (drop them from EXPECTED): {unseen:?}");
    // What the steps show at all, so that the comparison cannot pass on nothing.
    let keel_all: Vec<&Value> = keel_steps.values().flatten().collect();
    ensure!(keel_steps["not-audited"].is_empty() && keel_steps["create-serviceaccount"].is_empty());
    ensure!(keel_steps["bad-token"].len() == 1 && keel_steps["watch-configmaps"].len() == 2);
    ensure!(keel_all.len() > 30, "{} events", keel_all.len());
    for value in ["hunter2", "hunter3", "c2VjcmV0", "aHVudGVyMg=="] {
        let text = std::fs::read_to_string(&keel.log)?;
        ensure!(!text.contains(value), "a Secret value ({value}) in keel's audit log");
    }
    drop(keel.daemon);
    Ok(())
}

/// The binary on its own: what the policy's rules record, driven by kubectl and a plain client,
/// asserted line by line.
#[tokio::test]
async fn binary_records_what_the_policy_says() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let policy = write_policy(dir.path())?;
    let keel = Keel::start(dir.path(), &policy, &[])?;
    use std::os::unix::fs::PermissionsExt;
    ensure!(std::fs::metadata(&keel.log)?.permissions().mode() & 0o777 == 0o600, "the log is 0600");
    let api = keel.api()?;
    let kubectl = kubectl::minor(33)?;
    let kubeconfig = keel.kubeconfig();
    let admin = |args: &'static [&'static str]| common::kubectl_ok(&kubectl, &kubeconfig, args);
    admin(&["create", "namespace", "audited"]).await?;
    admin(&["create", "secret", "generic", "s", "-n", "audited", "--from-literal=password=hunter2"]).await?;
    admin(&["create", "configmap", "c", "-n", "audited", "--from-literal=k=v"]).await?;
    admin(&["get", "configmap", "c", "-n", "audited", "-o", "json"]).await?;
    admin(&["delete", "configmap", "c", "-n", "audited"]).await?;
    // A Secret its type cannot read: the 400's message names no value (it is in the event).
    let broken = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}, "data": "hunter2"});
    let path = "/api/v1/namespaces/audited/secrets";
    let (status, _, body) = api.send("broken-secret", As::Admin, "POST", path, &[], &broken).await?;
    ensure!(status == 400 && !body.contains("hunter2"), "{status} {body}");
    let (status, _, _) = api.send("end", As::Admin, "GET", "/healthz", &[], &Value::Null).await?;
    ensure!(status == 200);
    let events = wait_for(&keel.log, |e| e["userAgent"] == "audit-test/end")?;
    let kubectl_events: Vec<&Value> =
        events.iter().filter(|e| e["userAgent"].as_str().is_some_and(|u| u.starts_with("kubectl"))).collect();
    let summary: Vec<String> = kubectl_events
        .iter()
        .map(|e| {
            let object = &e["objectRef"];
            format!(
                "{} {} {} {} {}/{}",
                e["level"].as_str().unwrap_or_default(),
                e["stage"].as_str().unwrap_or_default(),
                e["verb"].as_str().unwrap_or_default(),
                object["resource"].as_str().unwrap_or_default(),
                object["namespace"].as_str().unwrap_or_default(),
                object["name"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            "Request RequestReceived create namespaces /",
            "Request ResponseComplete create namespaces /audited",
            "Metadata RequestReceived create secrets audited/",
            "Metadata ResponseComplete create secrets audited/s",
            "RequestResponse ResponseComplete create configmaps audited/c",
            "RequestResponse ResponseComplete get configmaps audited/c",
            "RequestResponse ResponseComplete delete configmaps audited/c",
            // kubectl delete waits for the object to be gone.
            "RequestResponse ResponseComplete get configmaps audited/c",
        ],
        "{kubectl_events:#?}"
    );
    let find = |verb: &str, resource: &str| {
        kubectl_events
            .iter()
            .find(|e| {
                e["verb"] == verb
                    && e["objectRef"]["resource"] == resource
                    && e["stage"] == "ResponseComplete"
            })
            .copied()
            .context("event")
    };
    let namespace = find("create", "namespaces")?;
    ensure!(
        namespace["requestObject"]["metadata"]["name"] == "audited"
            && namespace.get("responseObject").is_none()
    );
    let secret = find("create", "secrets")?;
    ensure!(
        secret.get("requestObject").is_none()
            && secret["responseStatus"] == json!({"metadata": {}, "code": 201})
    );
    ensure!(
        secret["annotations"]
            == json!({"authorization.k8s.io/decision": "allow", "authorization.k8s.io/reason": ""})
    );
    let created = find("create", "configmaps")?;
    ensure!(created["requestObject"]["data"] == json!({"k": "v"}), "{created}");
    ensure!(
        created["responseObject"]["metadata"]["managedFields"][0]["manager"] == "kubectl-create",
        "{created}"
    );
    let got = find("get", "configmaps")?;
    ensure!(
        got["responseObject"]["kind"] == "ConfigMap" && got["responseObject"]["data"] == json!({"k": "v"}),
        "{got}"
    );
    let deleted = find("delete", "configmaps")?;
    ensure!(deleted["requestObject"]["apiVersion"] == "meta.k8s.io/__internal", "{deleted}");
    ensure!(
        deleted["user"]["username"] == "kubernetes-admin" && deleted["sourceIPs"] == json!(["127.0.0.1"])
    );
    let health =
        events.iter().find(|e| e["userAgent"] == "audit-test/end" && e["stage"] == "RequestReceived");
    ensure!(
        health
            .is_some_and(|e| e["level"] == "Metadata" && e["verb"] == "get" && e.get("objectRef").is_none())
    );
    let broken = events
        .iter()
        .find(|e| e["userAgent"] == "audit-test/broken-secret" && e["stage"] == "ResponseComplete");
    ensure!(
        broken.is_some_and(
            |e| e["responseStatus"]["code"] == 400 && e["responseStatus"]["reason"] == "BadRequest"
        )
    );
    let text = std::fs::read_to_string(&keel.log)?;
    ensure!(!text.contains("hunter2") && !text.contains("aHVudGVyMg=="), "a Secret value in the log");
    Ok(())
}

/// The events in `path` once one satisfies `done`.
fn wait_for(path: &Path, done: impl Fn(&Value) -> bool) -> Result<Vec<Value>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events: Vec<Value> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        if events.iter().any(&done) {
            return Ok(events);
        }
        ensure!(Instant::now() < deadline, "the awaited event is not in {} after 30 s", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bad_policy_files_refused_as_kube_apiserver_refuses_them() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let header = "apiVersion: audit.k8s.io/v1\nkind: Policy\n";
    let cases = [
        ("level", format!("{header}rules:\n- level: Foo\n")),
        ("required", format!("{header}rules:\n- level: Metadata\n- {{}}\n")),
        (
            "stages",
            format!(
                "{header}omitStages: [Bogus]\nrules:\n- level: Metadata\n  omitStages: [RequestReceived, Nope]\n"
            ),
        ),
        ("empty", format!("{header}rules: []\n")),
        (
            "fields",
            format!(
                "{header}rules:\n- level: Metadata\n  nonResourceURLs: [healthz, '/a*b']\n  resources: [{{group: Bad_Group}}, {{resourceNames: [x]}}]\n"
            ),
        ),
        ("type", format!("{header}rules:\n- level: 5\n")),
        ("rules-type", format!("{header}rules: 5\n")),
        ("bool", format!("{header}omitManagedFields: \"yes\"\nrules:\n- level: Metadata\n")),
        ("beta", "apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules:\n- level: Metadata\n".to_owned()),
        ("configmap", "apiVersion: v1\nkind: ConfigMap\n".to_owned()),
        ("event", "apiVersion: audit.k8s.io/v1\nkind: Event\n".to_owned()),
        ("no-version", "kind: Policy\nrules:\n- level: Metadata\n".to_owned()),
        ("nothing", String::new()),
        ("array", "- a\n- b\n".to_owned()),
    ];
    for (name, text) in &cases {
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, text)?;
        let upstream = common::kube_apiserver_refusing(
            dir.path(),
            &[
                format!("--audit-policy-file={}", file.display()),
                format!("--audit-log-path={}", dir.path().join("kube.log").display()),
            ],
        )?;
        let mut keel = Command::new(env!("CARGO_BIN_EXE_keel-apiserver"));
        keel.arg("--data-dir")
            .arg(dir.path().join("data"))
            .arg("--audit-policy-file")
            .arg(&file)
            .arg("--audit-log-path")
            .arg(dir.path().join("keel.log"));
        let (kube_error, keel_error) = (common::start_error(upstream)?, common::start_error(keel)?);
        // Both name the file as given.
        assert_eq!(keel_error, kube_error, "{name}: {text:?}");
    }
    ensure!(!dir.path().join("data").exists(), "nothing written before the flags are checked");
    let missing = dir.path().join("missing.yaml");
    let mut keel = Command::new(env!("CARGO_BIN_EXE_keel-apiserver"));
    keel.arg("--data-dir").arg(dir.path().join("data")).arg("--audit-policy-file").arg(&missing);
    assert_eq!(
        common::start_error(keel)?,
        format!(
            "loading audit policy file: failed to read file path {:?}: open {}: no such file or directory",
            missing.display().to_string(),
            missing.display()
        )
    );
    for (flags, error) in [
        (
            &["--audit-log-format", "xml"][..],
            "invalid audit log format xml, allowed formats are \"legacy,json\"",
        ),
        (&["--audit-log-maxage", "-1"][..], "--audit-log-maxage -1 can't be a negative number"),
        (
            &["--audit-log-mode", "sync"][..],
            "invalid audit log mode sync, allowed modes are \"batch,blocking,blocking-strict\"",
        ),
    ] {
        let mut keel = Command::new(env!("CARGO_BIN_EXE_keel-apiserver"));
        keel.arg("--data-dir").arg(dir.path().join("data")).arg("--audit-log-path").arg("-").args(flags);
        assert_eq!(common::start_error(keel)?, error, "{flags:?}");
    }
    Ok(())
}

/// `--audit-log-format legacy` and rotation: a small maxsize with one backup kept, gzipped.
#[tokio::test]
async fn legacy_lines_and_rotation() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  nonResourceURLs: ['/version']\n",
    )?;
    let keel = Keel::start(
        dir.path(),
        &policy,
        &[
            "--audit-log-format",
            "legacy",
            "--audit-log-maxsize",
            "1",
            "--audit-log-maxbackup",
            "1",
            "--audit-log-compress=true",
        ],
    )?;
    let api = keel.api()?;
    // Two megabytes of legacy lines: each a little over 1 kB with a long User-Agent (cut at 1024).
    let agent = "a".repeat(4000);
    let count = 1000;
    for i in 0..count {
        let label = format!("{i}-{agent}");
        let (status, _, _) = api.send(&label, As::Admin, "GET", "/version", &[], &Value::Null).await?;
        ensure!(status == 200);
    }
    let logs = keel.log.parent().context("log dir")?.to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut names: Vec<String> = std::fs::read_dir(&logs)?
            .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_>>()?;
        names.sort();
        let text = std::fs::read_to_string(&keel.log)?;
        let last = format!("audit-test/{}-", count - 1);
        if names.len() == 2
            && text.lines().any(|l| l.contains(&last) && l.contains("stage=\"ResponseComplete\""))
        {
            ensure!(names[0].starts_with("audit-") && names[0].ends_with(".log.gz"), "{names:?}");
            ensure!(std::fs::metadata(&keel.log)?.len() <= 1024 * 1024);
            let line = text.lines().next().context("a line")?;
            ensure!(line.contains(" AUDIT: id=\"") && line.contains(" method=\"get\" user=\"kubernetes-admin\" groups=\"\\\"system:masters\\\",\\\"system:authenticated\\\"\" as=\"<self>\" asgroups=\"<lookup>\""), "{}", &line[..300.min(line.len())]);
            ensure!(line.contains(" uri=\"/version\" "), "legacy line");
            break;
        }
        ensure!(Instant::now() < deadline, "no rotation: {names:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}
