//! `cargo xtask bench authorization`: what authorization costs, at the policy: the
//! bootstrap policy plus 100 namespaces, each with one Role and 10 RoleBindings of it (1,000
//! RoleBindings), and `bench-user` bound in `default` to the `bench-pod-writer` ClusterRole (not
//! `edit`: kube-apiserver leaves aggregated roles empty until kube-controller-manager's
//! clusterrole-aggregation controller fills them, and none runs here).
//!
//! - In process (release build, mimalloc as the binary): CPU time per decision of keel's
//!   authorizer (Node,RBAC as the server runs it) for a user allowed by a RoleBinding in the last
//!   namespace, for `bench-user` creating a pod, and for a user no binding names (every grant
//!   scanned, no opinion); and CPU time per pod write the Node authorizer's graph follows, for a
//!   pod without a node (every create) and one bound to a node.
//! - Over HTTPS, keel-apiserver (embedded store) beside kube-apiserver v1.34 (etcd 3.6), the
//!   same policy written to both through the API: a SubjectAccessReview of each of those
//!   decisions one after another (client latency p50, server CPU per review), and reviews from 64
//!   streams over 8 connections (reviews/s).
//! - Creates as `bench-user` (a `--token-auth-file` token, so the request is authorized: admin's
//!   system:masters would skip it): pod creates from 64 streams over 8 connections on keel with
//!   `--authorization-mode` Node,RBAC, RBAC and AlwaysAllow, and kube-apiserver with Node,RBAC
//!   and AlwaysAllow, all five running at once and measured in turn, round after round; the
//!   median creates/s and CPU per create of each, and the ratios with authorization on to off.
//!
//! `-- ROUNDS` (default 5 create rounds; the reviews scale with it); `-- in-process` stops after
//! the in-process figures.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Endpoint, Sender, median};
use keel_apiserver::auth::User;
use keel_apiserver::authorization::{Authorizer, Mode};
use keel_apiserver::node_authorizer::graph::{Graph, Source};
use keel_apiserver::rbac::{Decision, Policy, Rbac, bootstrap, reconcile};
use keel_apiserver::request::RequestInfo;
use keel_testbed::bench::{Report, Samples, cpu_time, ms};
use keel_testbed::kube_apiserver::{KubeApiServer, KubeApiServerOptions};
use keel_testbed::process::Daemon;
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NAMESPACES: usize = 100;
const BINDINGS_PER_NAMESPACE: usize = 10;
const CREATES: usize = 1600;
const TOKEN: &str = "bench-user-token";

fn namespace(i: usize) -> String {
    format!("bench-{i}")
}

/// The user the `j`th RoleBinding of namespace `i` names.
fn bound_user(i: usize, j: usize) -> String {
    format!("user-{i}-{j}")
}

fn role(i: usize) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "pod-reader", "namespace": namespace(i)},
        "rules": [{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "list", "watch"]}]})
}

fn role_binding(namespace: &str, name: &str, role_kind: &str, role: &str, user: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})
}

/// What `bench-user` may do in `default`.
fn pod_writer() -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "bench-pod-writer"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "watch", "delete"]}]})
}

/// The 1,000 RoleBindings and `bench-user`'s.
fn role_bindings() -> Vec<Value> {
    let mut bindings: Vec<Value> = (0..NAMESPACES)
        .flat_map(|i| {
            (0..BINDINGS_PER_NAMESPACE).map(move |j| {
                role_binding(&namespace(i), &format!("read-{j}"), "Role", "pod-reader", &bound_user(i, j))
            })
        })
        .collect();
    bindings.push(role_binding(
        "default",
        "bench-user-pods",
        "ClusterRole",
        "bench-pod-writer",
        "bench-user",
    ));
    bindings
}

/// An authenticated user, as the token file or a client certificate makes one.
fn user(name: &str) -> User {
    User { name: name.into(), groups: vec!["system:authenticated".into()], ..User::default() }
}

fn resource(verb: &str, namespace: &str, resource: &str, name: &str) -> RequestInfo {
    RequestInfo {
        is_resource_request: true,
        verb: verb.into(),
        api_prefix: "api".into(),
        api_version: "v1".into(),
        namespace: namespace.into(),
        resource: resource.into(),
        name: name.into(),
        path: format!("/api/v1/namespaces/{namespace}/{resource}/{name}"),
        ..RequestInfo::default()
    }
}

/// The three decisions measured: (name, user, request, allowed).
fn decisions() -> Vec<(&'static str, String, RequestInfo, bool)> {
    let last = NAMESPACES - 1;
    vec![
        (
            "role_binding_allow",
            bound_user(last, BINDINGS_PER_NAMESPACE - 1),
            resource("get", &namespace(last), "pods", "web"),
            true,
        ),
        ("cluster_role_create_allow", "bench-user".into(), resource("create", "default", "pods", ""), true),
        ("unbound_no_opinion", "stranger".into(), resource("delete", &namespace(last), "pods", "web"), false),
    ]
}

/// CPU time per decision of keel's authorizer over `rounds` of each decision.
fn in_process(report: &mut Report, rounds: usize) {
    let mut cluster_roles = bootstrap::cluster_roles();
    cluster_roles.push(pod_writer());
    for (name, rules) in reconcile::aggregate(&cluster_roles) {
        if let Some(role) = cluster_roles.iter_mut().find(|r| r["metadata"]["name"] == name.as_str()) {
            role["rules"] = Value::Array(rules);
        }
    }
    let mut roles = bootstrap::roles();
    roles.extend((0..NAMESPACES).map(role));
    let mut bindings = bootstrap::role_bindings();
    bindings.extend(role_bindings());
    let policy = Policy::build(&roles, &cluster_roles, &bindings, &bootstrap::cluster_role_bindings());
    let rbac = Arc::new(Rbac::default());
    rbac.replace(policy);
    let authorizer = Authorizer::new(vec![Mode::Node, Mode::Rbac], rbac);
    for (name, who, info, allowed) in decisions() {
        let user = user(&who);
        let decision = authorizer.authorize(&user, &info);
        assert_eq!(matches!(decision, Decision::Allow(_)), allowed, "{name}: {decision:?}");
        let before = cpu_time();
        for _ in 0..rounds {
            std::hint::black_box(authorizer.authorize(std::hint::black_box(&user), &info));
        }
        let per = (cpu_time() - before).as_secs_f64() * 1e6 / rounds as f64;
        report.figure(
            &format!("decision_{name}_us"),
            &format!("in process: {name} (µs CPU/decision)"),
            &format!("{per:.3}"),
        );
        if name == "role_binding_allow" {
            let met = if per <= 2.0 { "met" } else { "missed" };
            report.figure("decision_target_2us", "target: decision <= 2 µs at 1,000 RoleBindings", met);
        }
    }
}

/// A pod as keel-apiserver stores it after defaulting, bound to `node` or not.
fn stored_pod(name: &str, node: Option<&str>) -> Vec<u8> {
    let mut pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": "5c3f7a4e-2b1d-4f0e-9a8b-7c6d5e4f3a2b",
            "resourceVersion": "12", "creationTimestamp": "2026-12-03T00:00:00Z", "labels": {"app": "bench"},
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                "time": "2026-12-03T00:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}]},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "resources": {},
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
            "volumeMounts": [{"name": "kube-api-access-x", "readOnly": true,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]}],
            "volumes": [{"name": "kube-api-access-x", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "serviceAccount": "default", "securityContext": {},
            "schedulerName": "default-scheduler", "enableServiceLinks": true, "priority": 0,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]},
        "status": {"phase": "Pending", "qosClass": "BestEffort"}});
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
    }
    pod.to_string().into_bytes()
}

/// CPU time per pod write the Node authorizer's graph follows (what Node costs a create).
fn graph_writes(report: &mut Report, rounds: usize) {
    for (name, node) in [("unbound", None), ("bound", Some("n1"))] {
        let bytes = stored_pod("web", node);
        let mut graph = Graph::default();
        let before = cpu_time();
        for _ in 0..rounds {
            graph.apply(Source::Pods, "/registry/pods/default/web", Some(std::hint::black_box(&bytes)));
        }
        let per = (cpu_time() - before).as_secs_f64() * 1e6 / rounds as f64;
        report.figure(
            &format!("node_graph_{name}_pod_write_us"),
            &format!("in process: Node graph, one {name} pod's write (µs CPU)"),
            &format!("{per:.3}"),
        );
    }
}

/// Writes `objects` to their collections on `endpoint` from 16 streams; a conflict is fine
/// (bootstrap objects, a second run).
async fn create_all(endpoint: &Endpoint, objects: Vec<(String, Value)>) {
    let objects = Arc::new(objects);
    let mut tasks = Vec::new();
    let sender = endpoint.connect().await;
    for stream in 0..16 {
        let (endpoint, objects, mut sender) = (endpoint.clone(), objects.clone(), sender.clone());
        tasks.push(tokio::spawn(async move {
            for (path, object) in objects.iter().skip(stream).step_by(16) {
                let (status, body) =
                    endpoint.send(&mut sender, "POST", path, object.to_string().into_bytes()).await;
                assert!([201, 409].contains(&status), "{path}: {status} {}", String::from_utf8_lossy(&body));
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer");
    }
}

/// The policy, through the API.
async fn write_policy(endpoint: &Endpoint) {
    let namespaces = (0..NAMESPACES)
        .map(|i| ("/api/v1/namespaces".to_owned(), json!({"metadata": {"name": namespace(i)}})))
        .collect();
    create_all(endpoint, namespaces).await;
    let writer = ("/apis/rbac.authorization.k8s.io/v1/clusterroles".to_owned(), pod_writer());
    create_all(endpoint, vec![writer]).await;
    let rbac = |namespace: &str, plural: &str| {
        format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/{plural}")
    };
    let roles = (0..NAMESPACES).map(|i| (rbac(&namespace(i), "roles"), role(i))).collect();
    create_all(endpoint, roles).await;
    let bindings = role_bindings()
        .into_iter()
        .map(|b| (rbac(b["metadata"]["namespace"].as_str().expect("namespace"), "rolebindings"), b))
        .collect();
    create_all(endpoint, bindings).await;
}

fn review(user: &str, info: &RequestInfo) -> Vec<u8> {
    let mut attributes = json!({"namespace": info.namespace, "verb": info.verb, "resource": info.resource});
    if !info.name.is_empty() {
        attributes["name"] = json!(info.name);
    }
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": ["system:authenticated"], "resourceAttributes": attributes}})
    .to_string()
    .into_bytes()
}

const REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// One review; whether it was allowed.
async fn send_review(endpoint: &Endpoint, sender: &mut Sender, body: &[u8]) -> bool {
    let (status, answer) = endpoint.send(sender, "POST", REVIEWS, body.to_vec()).await;
    assert_eq!(status, 201, "review: {}", String::from_utf8_lossy(&answer));
    let answer: Value = serde_json::from_slice(&answer).expect("review JSON");
    answer["status"]["allowed"] == true
}

/// Reviews of each decision one after another, then from 64 streams: per decision (client p50,
/// server CPU per review), and reviews/s.
async fn reviews(endpoint: &Endpoint, rounds: usize) -> (Vec<(Samples, Duration)>, f64) {
    let mut sender = endpoint.connect().await;
    let bodies: Vec<(Vec<u8>, bool)> =
        decisions().iter().map(|(_, user, info, allowed)| (review(user, info), *allowed)).collect();
    // The policy is written; wait until the server's authorizer has it (an informer, a follower).
    let deadline = Instant::now() + Duration::from_secs(60);
    for (body, allowed) in &bodies {
        while send_review(endpoint, &mut sender, body).await != *allowed {
            let (_, answer) = endpoint.send(&mut sender, "POST", REVIEWS, body.clone()).await;
            assert!(
                Instant::now() < deadline,
                "the policy did not take effect in 60 s: {} answers {}",
                String::from_utf8_lossy(body),
                String::from_utf8_lossy(&answer)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let mut figures = Vec::new();
    for (body, allowed) in &bodies {
        let mut samples = Samples::default();
        let before = endpoint.cpu();
        for _ in 0..rounds {
            let start = Instant::now();
            assert_eq!(send_review(endpoint, &mut sender, body).await, *allowed);
            samples.push(start.elapsed());
        }
        figures.push((samples, (endpoint.cpu() - before) / rounds as u32));
    }
    let mut senders = Vec::new();
    for _ in 0..8 {
        senders.push(endpoint.connect().await);
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    let total = rounds * 4;
    for stream in 0..64 {
        let (endpoint, mut sender) = (endpoint.clone(), senders[stream % 8].clone());
        let body = bodies[0].0.clone();
        tasks.push(tokio::spawn(async move {
            for _ in (stream..total).step_by(64) {
                assert!(send_review(&endpoint, &mut sender, &body).await);
            }
        }));
    }
    for task in tasks {
        task.await.expect("reviewer");
    }
    (figures, total as f64 / started.elapsed().as_secs_f64())
}

/// One server of the create rounds: admin, `bench-user`, and what keeps it running.
struct Server {
    name: &'static str,
    admin: Endpoint,
    user: Endpoint,
    _keel: Option<Daemon>,
    _kube: Option<KubeApiServer>,
}

fn token_file(dir: &Path) -> String {
    let file = dir.join("tokens.csv");
    std::fs::write(&file, format!("{TOKEN},bench-user,bench-user-uid\n")).expect("token file");
    format!("--token-auth-file={}", file.display())
}

async fn keel(name: &'static str, dir: &Path, mode: &str) -> Server {
    let data = dir.join(name);
    let args = [token_file(dir), format!("--authorization-mode={mode}")];
    let (daemon, admin) = common::keel(name, &data, &args).await;
    let ca = std::fs::read(data.join("pki").join("ca.crt")).expect("ca");
    Server { name, user: admin.as_token_user(&ca, TOKEN), admin, _keel: Some(daemon), _kube: None }
}

fn kube(name: &'static str, dir: &Path, mode: &str) -> Server {
    let options =
        KubeApiServerOptions::new().arg(token_file(dir)).arg(format!("--authorization-mode={mode}"));
    let server = KubeApiServer::start_with(&options).expect("kube-apiserver (cargo xtask peers)");
    let admin = common::kube_admin(&server);
    Server {
        name,
        user: admin.as_token_user(server.ca_pem().as_bytes(), TOKEN),
        admin,
        _keel: None,
        _kube: Some(server),
    }
}

fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(5);
    let mut report = Report::new("authorization");
    in_process(&mut report, 200_000);
    graph_writes(&mut report, 20_000);
    if std::env::args().any(|a| a == "in-process") {
        report.print();
        return;
    }

    let dir = tempfile::tempdir().expect("temp dir");
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let servers = [
            keel("keel_node_rbac", dir.path(), "Node,RBAC").await,
            keel("keel_rbac", dir.path(), "RBAC").await,
            keel("keel_always_allow", dir.path(), "AlwaysAllow").await,
            kube("kube_apiserver_node_rbac", dir.path(), "Node,RBAC"),
            kube("kube_apiserver_always_allow", dir.path(), "AlwaysAllow"),
        ];
        for server in &servers {
            server.admin.prepare().await;
            write_policy(&server.admin).await;
        }

        // SubjectAccessReviews: keel and kube-apiserver with Node,RBAC.
        let review_rounds = rounds * 400;
        let (keel, kube) = (&servers[0], &servers[3]);
        let (keel_reviews, keel_rate) = reviews(&keel.admin, review_rounds).await;
        let (kube_reviews, kube_rate) = reviews(&kube.admin, review_rounds).await;
        for (i, (name, ..)) in decisions().iter().enumerate() {
            let (keel_samples, keel_cpu) = &keel_reviews[i];
            let (kube_samples, kube_cpu) = &kube_reviews[i];
            report.compare(
                &format!("review_{name}"),
                &format!("SubjectAccessReview {name}, client latency"),
                keel_samples,
                "kube_apiserver",
                kube_samples,
            );
            let (keel_us, kube_us) = (keel_cpu.as_secs_f64() * 1e6, kube_cpu.as_secs_f64() * 1e6);
            report.figure(
                &format!("review_{name}_keel_cpu_us"),
                &format!("SubjectAccessReview {name}: keel server CPU µs"),
                &format!("{keel_us:.1}"),
            );
            report.figure(
                &format!("review_{name}_kube_apiserver_cpu_us"),
                &format!("SubjectAccessReview {name}: kube-apiserver server CPU µs"),
                &format!("{kube_us:.1}"),
            );
        }
        report.figure(
            "reviews_per_s_keel",
            "SubjectAccessReviews/s, 64 streams: keel",
            &format!("{keel_rate:.0}"),
        );
        report.figure(
            "reviews_per_s_kube_apiserver",
            "SubjectAccessReviews/s, 64 streams: kube-apiserver",
            &format!("{kube_rate:.0}"),
        );
        report.figure(
            "reviews_per_s_ratio",
            "  ratio (keel / kube-apiserver)",
            &format!("{:.2}", keel_rate / kube_rate.max(1e-9)),
        );

        // Creates as bench-user, the five servers in turn, round after round.
        let mut rates = vec![Vec::new(); servers.len()];
        let mut cpus = vec![Vec::new(); servers.len()];
        let mut p50s = vec![Vec::new(); servers.len()];
        for round in 0..rounds {
            for (i, server) in servers.iter().enumerate() {
                let (samples, wall, cpu) = server.user.creates(&format!("r{round}"), CREATES).await;
                rates[i].push(CREATES as f64 / wall.as_secs_f64());
                cpus[i].push(cpu.as_secs_f64() * 1e3 / CREATES as f64);
                p50s[i].push(samples.median().as_secs_f64() * 1e3);
            }
        }
        let mut medians = Vec::new();
        for (i, server) in servers.iter().enumerate() {
            let (rate, cpu, p50) = (median(&mut rates[i]), median(&mut cpus[i]), median(&mut p50s[i]));
            let name = server.name;
            report.figure(
                &format!("{name}_creates_per_s"),
                &format!("{name}: bench-user pod creates/s"),
                &format!("{rate:.0}"),
            );
            report.figure(
                &format!("{name}_create_cpu_ms"),
                &format!("{name}: server CPU per create ms"),
                &format!("{cpu:.3}"),
            );
            report.figure(
                &format!("{name}_create_p50_ms"),
                &format!("{name}: create p50 ms"),
                &ms(Duration::from_secs_f64(p50 / 1e3)),
            );
            medians.push((rate, cpu));
        }
        for (key, what, on, off) in [
            ("keel_node_rbac", "keel Node,RBAC / AlwaysAllow", 0, 2),
            ("keel_rbac", "keel RBAC / AlwaysAllow", 1, 2),
            ("kube_apiserver_node_rbac", "kube-apiserver Node,RBAC / AlwaysAllow", 3, 4),
        ] {
            report.figure(
                &format!("{key}_creates_ratio"),
                &format!("{what}: creates/s"),
                &format!("{:.3}", medians[on].0 / medians[off].0),
            );
            report.figure(
                &format!("{key}_cpu_ratio"),
                &format!("{what}: CPU per create"),
                &format!("{:.3}", medians[on].1 / medians[off].1),
            );
        }
        let met = if medians[0].0 >= 0.95 * medians[2].0 { "met" } else { "missed" };
        report.figure(
            "creates_target_0_95",
            "target: keel creates/s with Node,RBAC >= 0.95x AlwaysAllow",
            met,
        );
    });
    report.print();
}
