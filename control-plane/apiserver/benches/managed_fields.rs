//! `cargo xtask bench managed_fields`: what field ownership costs per Pod write, in process (release
//! build), beside the peer every write already pays: reading the Pod through its k8s-openapi type
//! and writing it back (`validation::typed`, the server's per-write decode/encode).
//!
//! - create: the Update entry of a create (`managed_fields::update` from nothing);
//! - update: the Update entry of a label change by a second manager;
//! - apply_create: a server-side apply creating the Pod;
//! - apply_changed: a re-apply changing the image (merge, prune, conflicts, ownership);
//! - apply_noop: a re-apply changing nothing.
//!
//! `-- ROUNDS` (default 2000). The bench allocates with mimalloc, as the server binary does.

use keel_api::managed_fields::{self, Context};
use keel_testbed::bench::{Report, interleaved};
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn pod(image: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": "default",
        "labels": {"app": "web", "tier": "frontend"}, "annotations": {"team": "a"}},
      "spec": {"containers": [
        {"name": "main", "image": image, "args": ["--port=8080", "--verbose"],
         "ports": [{"containerPort": 8080, "name": "http"}, {"containerPort": 9090, "name": "metrics"}],
         "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
         "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}},
         "volumeMounts": [{"name": "data", "mountPath": "/data"}],
         "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}}},
        {"name": "sidecar", "image": "busybox", "command": ["sh", "-c", "sleep 1d"]}],
        "volumes": [{"name": "data", "emptyDir": {}}],
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "nodeSelector": {"disk": "ssd"}}})
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let resource = keel_api::resources::find("", "v1", "pods").expect("pods are served");
    let now = "2026-11-30T12:00:00Z".to_owned();
    let ctx = Context::builtin("v1", "Pod", "", true, now);
    let mut stored = pod("busybox:1");
    keel_api::defaults::apply(resource, &mut stored);
    stored["metadata"]["uid"] = json!("u");
    let peer = || {
        std::hint::black_box(keel_apiserver::validation::typed(resource, &stored).expect("a valid pod"));
    };
    let mut report = Report::new("managed_fields");

    let (keel, typed) = interleaved(
        rounds,
        |_| {
            let mut new = stored.clone();
            managed_fields::update(&ctx, None, &mut new, "kubectl-create");
            std::hint::black_box(new);
        },
        |_| peer(),
    );
    report.compare("create", "Update entry of a Pod create", &keel, "typed round trip", &typed);

    let mut created = stored.clone();
    managed_fields::update(&ctx, None, &mut created, "kubectl-create");
    let mut relabeled = created.clone();
    relabeled["metadata"]["labels"]["tier"] = json!("backend");
    let (keel, typed) = interleaved(
        rounds,
        |_| {
            let mut new = relabeled.clone();
            managed_fields::update(&ctx, Some(&created), &mut new, "kubectl-label");
            std::hint::black_box(new);
        },
        |_| peer(),
    );
    report.compare("update", "Update entry of a label change", &keel, "typed round trip", &typed);

    let applied = pod("busybox:1");
    let (keel, typed) = interleaved(
        rounds,
        |_| {
            std::hint::black_box(
                managed_fields::apply(&ctx, &json!({}), &applied, "mgr", false).expect("applies"),
            );
        },
        |_| peer(),
    );
    report.compare("apply_create", "apply creating a Pod", &keel, "typed round trip", &typed);

    let mut live = managed_fields::apply(&ctx, &json!({}), &applied, "mgr", false).expect("applies");
    keel_api::defaults::apply(resource, &mut live);
    let changed = pod("busybox:2");
    let (keel, typed) = interleaved(
        rounds,
        |_| {
            std::hint::black_box(
                managed_fields::apply(&ctx, &live, &changed, "mgr", false).expect("applies"),
            );
        },
        |_| peer(),
    );
    report.compare("apply_changed", "re-apply changing the image", &keel, "typed round trip", &typed);

    let (keel, typed) = interleaved(
        rounds,
        |_| {
            std::hint::black_box(
                managed_fields::apply(&ctx, &live, &applied, "mgr", false).expect("applies"),
            );
        },
        |_| peer(),
    );
    report.compare("apply_noop", "re-apply changing nothing", &keel, "typed round trip", &typed);
    report.print();
}
