//! `cargo xtask bench service_account_tokens`: what service account tokens cost.
//!
//! In process (release build, mimalloc as the binary), CPU time per operation:
//! - warm: a pod-bound token authenticated again (a cache hit: the HMAC of the token, the
//!   ServiceAccount and Pod looked up in the live objects and found at the revision checked);
//! - cold: a token seen for the first time (JWS parse, ES256 verify, claims, both objects read
//!   and checked, the result cached);
//! - issue: the claims of a pod-bound token built and signed (ES256).
//!
//! Over HTTPS, keel-apiserver (embedded store) beside kube-apiserver v1.34 (etcd 3.6, an ES256 key
//! too), one HTTP/2 connection as the admin, server CPU per request from /proc (kube-apiserver's
//! etcd included): TokenRequest, TokenReview of one token again and again (both servers cache it),
//! TokenReview of a new token each time, and a SelfSubjectReview as the baseline of a request that
//! verifies no token.
//!
//! `-- ROUNDS` (default 2000 in process; a quarter of it over HTTPS).

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Endpoint, Sender};
use futures::future::BoxFuture;
use keel_api::resources::Resource;
use keel_apiserver::cache::Entry;
use keel_apiserver::tokens::jwt::ObjectRef;
use keel_apiserver::tokens::service_account::{Bound, ServiceAccounts, TokenSpec};
use keel_apiserver::tokens::{LiveObjects, ServiceAccountConfig, TokenAuthenticator};
use keel_testbed::bench::{Report, Samples, cpu_time};
use keel_testbed::kube_apiserver::KubeApiServer;
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Live objects in a map, as the watch cache holds them.
#[derive(Debug, Default)]
struct Objects(HashMap<String, Arc<Entry>>);

impl LiveObjects for Objects {
    fn get<'a>(
        &'a self,
        _: &'static Resource,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<Entry>>, String>> {
        let found = self.0.get(key).cloned();
        Box::pin(async move { Ok(found) })
    }
}

fn pod_json() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "dev", "uid": "pod-uid",
        "labels": {"app": "web"}, "resourceVersion": "7", "creationTimestamp": "2026-12-01T00:00:00Z"},
        "spec": {"serviceAccountName": "robot", "nodeName": "n1", "containers": [{"name": "c", "image": "busybox",
        "resources": {}, "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "Always"}],
        "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler"},
        "status": {"phase": "Running", "qosClass": "BestEffort"}})
}

/// CPU time per call of `f` over `rounds` calls.
fn per_op(rounds: usize, mut f: impl FnMut(usize)) -> Duration {
    let before = cpu_time();
    for round in 0..rounds {
        f(round);
    }
    (cpu_time() - before) / rounds.max(1) as u32
}

/// Microseconds, two decimals (a headline value: no spaces).
fn micros(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1e6)
}

fn in_process(report: &mut Report, rounds: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let accounts = Arc::new(ServiceAccounts::new(ServiceAccountConfig::default()).expect("key"));
    let mut objects = Objects::default();
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot", "namespace": "dev", "uid": "sa-uid"}});
    for (key, object, revision) in
        [("/registry/serviceaccounts/dev/robot", sa, 5), ("/registry/pods/dev/web", pod_json(), 7)]
    {
        objects.0.insert(key.into(), Entry::new(key.into(), object.to_string().into(), revision));
    }
    let authenticator =
        TokenAuthenticator::new(Default::default(), accounts.clone(), true, Arc::new(objects));
    let audiences = accounts.api_audiences.clone();
    let now = keel_apiserver::tokens::now_ms() / 1000;
    let spec = |jti: String| TokenSpec {
        namespace: "dev",
        service_account: ObjectRef { name: "robot".into(), uid: "sa-uid".into() },
        bound: Bound {
            pod: Some(ObjectRef { name: "web".into(), uid: "pod-uid".into() }),
            node: Some(ObjectRef { name: "n1".into(), uid: "node-uid".into() }),
            secret: None,
        },
        audiences: &audiences,
        expiration_seconds: 3600,
        warn_after_seconds: 0,
        now,
        jti,
    };
    let issue = per_op(rounds, |i| {
        std::hint::black_box(accounts.issue(&spec(i.to_string())).expect("signs"));
    });
    let tokens: Vec<String> =
        (0..rounds).map(|i| accounts.issue(&spec(format!("t{i}"))).expect("signs")).collect();
    let cold = per_op(rounds, |i| {
        runtime.block_on(authenticator.authenticate(&tokens[i], None)).expect("authenticates");
    });
    let warm_rounds = rounds * 10;
    let warm = per_op(warm_rounds, |_| {
        runtime.block_on(authenticator.authenticate(&tokens[0], None)).expect("authenticates");
    });
    report.figure("issue_us", "issue: claims + ES256 signature (µs CPU/op)", &micros(issue));
    report.figure("cold_us", "authenticate cold: verify + live objects (µs CPU/op)", &micros(cold));
    report.figure("warm_us", "authenticate warm: cache hit + live objects (µs CPU/op)", &micros(warm));
    let met = |d: Duration, target: u64| if d <= Duration::from_micros(target) { "met" } else { "missed" };
    report.figure("warm_target_5us", "target: warm <= 5 µs", met(warm, 5));
    report.figure("cold_target_100us", "target: cold <= 100 µs", met(cold, 100));
}

/// POSTs `body` as JSON; the status and the answer.
async fn post(remote: &Endpoint, sender: &mut Sender, path: &str, body: &Value) -> (u16, Value) {
    let (status, bytes) = remote.send(sender, "POST", path, body.to_string().into_bytes()).await;
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

const TOKEN_PATH: &str = "/api/v1/namespaces/default/serviceaccounts/bench/token";
const REVIEW_PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

fn review(token: &str) -> Value {
    json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
}

/// Server CPU per request of `bodies` sent one after another; the latencies.
async fn measure(
    remote: &Endpoint,
    sender: &mut Sender,
    path: &str,
    bodies: &[Value],
) -> (Duration, Samples) {
    let mut samples = Samples::default();
    let before = remote.cpu();
    for body in bodies {
        let start = Instant::now();
        let (status, answer) = post(remote, sender, path, body).await;
        samples.push(start.elapsed());
        assert!(status == 201 && answer["status"]["error"].is_null(), "{path}: {status} {answer}");
    }
    ((remote.cpu() - before) / bodies.len().max(1) as u32, samples)
}

/// TokenRequest, warm and cold TokenReview and the baseline on one server: CPU per request each.
async fn over_https(remote: &Endpoint, rounds: usize) -> [Duration; 4] {
    let mut sender = remote.connect().await;
    let (status, answer) = post(
        remote,
        &mut sender,
        "/api/v1/namespaces/default/serviceaccounts",
        &json!({"metadata": {"name": "bench"}}),
    )
    .await;
    assert!([201, 409].contains(&status), "serviceaccount: {status} {answer}");
    let token_request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}});
    let (issue, _) = measure(remote, &mut sender, TOKEN_PATH, &vec![token_request.clone(); rounds]).await;
    let mut tokens = Vec::new();
    for _ in 0..rounds {
        let (_, answer) = post(remote, &mut sender, TOKEN_PATH, &token_request).await;
        tokens.push(review(answer["status"]["token"].as_str().expect("token")));
    }
    // Settle the watch cache (keel's live objects) and both servers' caches with one review first.
    post(remote, &mut sender, REVIEW_PATH, &tokens[0]).await;
    let (warm, _) = measure(remote, &mut sender, REVIEW_PATH, &vec![tokens[0].clone(); rounds]).await;
    let (cold, _) = measure(remote, &mut sender, REVIEW_PATH, &tokens[1..]).await;
    let whoami = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let (baseline, _) = measure(
        remote,
        &mut sender,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &vec![whoami; rounds],
    )
    .await;
    [issue, warm, cold, baseline]
}

fn main() {
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(2000);
    let mut report = Report::new("service_account_tokens");
    in_process(&mut report, rounds);

    let http_rounds = (rounds / 4).max(10);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let kube = KubeApiServer::start().expect("kube-apiserver (cargo xtask peers)");
    let kube_remote = common::kube_admin(&kube);
    let dir = tempfile::tempdir().expect("temp dir");
    let (keel, upstream) = runtime.block_on(async {
        let (_keel, keel_remote) = common::keel("keel-apiserver", &dir.path().join("data"), &[]).await;
        (over_https(&keel_remote, http_rounds).await, over_https(&kube_remote, http_rounds).await)
    });
    let names = ["token_request", "review_warm", "review_cold", "baseline_whoami"];
    let whats = [
        "TokenRequest over HTTPS (server CPU)",
        "TokenReview, same token (server CPU)",
        "TokenReview, new token each (server CPU)",
        "SelfSubjectReview, no token (server CPU)",
    ];
    for i in 0..4 {
        let ratio = upstream[i].as_secs_f64() / keel[i].as_secs_f64().max(1e-9);
        report.figure(
            &format!("{}_keel_cpu_us", names[i]),
            &format!("{} keel (µs)", whats[i]),
            &micros(keel[i]),
        );
        report.figure(
            &format!("{}_kube_apiserver_cpu_us", names[i]),
            &format!("{} kube-apiserver (µs)", whats[i]),
            &micros(upstream[i]),
        );
        report.figure(
            &format!("{}_ratio", names[i]),
            "  ratio (kube-apiserver / keel)",
            &format!("{ratio:.2}"),
        );
    }
    report.print();
}
