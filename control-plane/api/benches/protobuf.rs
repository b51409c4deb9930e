//! `cargo xtask bench protobuf`: the cost per Pod of keel-api's protobuf codec (JSON value ↔
//! envelope, and JSON bytes → envelope in one pass) beside serde_json's (bytes ↔ JSON value, what the server does for JSON) and beside
//! prost on k8s-pb's generated structs (the peer: what typed code costs), interleaved rounds,
//! medians. Prints `bench protobuf: ...` last.

use std::hint::black_box;
use std::time::Instant;

use keel_api::protobuf::envelope;
use prost::Message;
use serde_json::{Value, json};

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web-7d4b9c8f6-x2k9p", "namespace": "default", "uid": "0b8d3f5e-1b1e-4c1c-9e7a-2f4f5f6a7b8c",
                     "resourceVersion": "123456", "creationTimestamp": "2026-11-30T10:00:00Z",
                     "labels": {"app": "web", "pod-template-hash": "7d4b9c8f6"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c8f6",
                                          "uid": "a1b2", "controller": true, "blockOwnerDeletion": true}]},
        "spec": {
            "containers": [{"name": "app", "image": "registry.example/web:1.2.3", "imagePullPolicy": "IfNotPresent",
                            "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
                            "env": [{"name": "MODE", "value": "prod"}, {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}}],
                            "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}},
                            "readinessProbe": {"httpGet": {"path": "/ready", "port": "http", "scheme": "HTTP"}, "periodSeconds": 5,
                                               "timeoutSeconds": 1, "successThreshold": 1, "failureThreshold": 3},
                            "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
                            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default", "nodeName": "node-1", "schedulerName": "default-scheduler",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "priority": 0, "enableServiceLinks": true, "preemptionPolicy": "PreemptLowerPriority"
        },
        "status": {"phase": "Running", "qosClass": "Burstable", "hostIP": "10.0.0.1", "podIP": "10.244.1.5",
                   "podIPs": [{"ip": "10.244.1.5"}], "startTime": "2026-11-30T10:00:01Z",
                   "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T10:00:05Z"},
                                  {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-30T10:00:00Z"}],
                   "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "registry.example/web:1.2.3",
                                          "imageID": "sha256:abc", "containerID": "containerd://def", "started": true,
                                          "state": {"running": {"startedAt": "2026-11-30T10:00:02Z"}}}]}
    })
}

/// Nanoseconds per call of `f`, over `n` calls.
fn per_call(n: u32, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    start.elapsed().as_nanos() as f64 / f64::from(n)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[expect(clippy::unwrap_used, reason = "a benchmark program: a failure is a bug to see")]
fn main() {
    let object = pod();
    let json_bytes = serde_json::to_vec(&object).unwrap();
    let protobuf = envelope::encode_object(&object).unwrap();
    let raw = envelope::unwrap(&protobuf).unwrap().1.to_vec();
    let typed = k8s_pb::api::core::v1::Pod::decode(raw.as_slice()).unwrap();
    assert_eq!(envelope::decode_object(&protobuf).unwrap(), object, "the sample round-trips");
    let n = 2000;
    let rounds = 9;
    let mut figures: [Vec<f64>; 7] = Default::default();
    for _ in 0..rounds {
        figures[0].push(per_call(n, || drop(black_box(serde_json::to_vec(black_box(&object)).unwrap()))));
        figures[1].push(per_call(n, || {
            drop(black_box(serde_json::from_slice::<Value>(black_box(&json_bytes)).unwrap()));
        }));
        figures[2]
            .push(per_call(n, || drop(black_box(envelope::encode_object(black_box(&object)).unwrap()))));
        figures[3]
            .push(per_call(n, || drop(black_box(envelope::decode_object(black_box(&protobuf)).unwrap()))));
        figures[4].push(per_call(n, || drop(black_box(black_box(&typed).encode_to_vec()))));
        figures[5].push(per_call(n, || {
            drop(black_box(k8s_pb::api::core::v1::Pod::decode(black_box(raw.as_slice())).unwrap()));
        }));
        figures[6].push(per_call(n, || {
            drop(black_box(envelope::encode_object_json(black_box(&json_bytes)).unwrap()));
        }));
    }
    let [json_encode, json_decode, pb_encode, pb_decode, prost_encode, prost_decode, pb_from_bytes] =
        figures.map(median);
    println!(
        "one Pod: {} bytes of JSON, {} bytes of protobuf (envelope included)",
        json_bytes.len(),
        protobuf.len()
    );
    println!("{:<44}{:>10}", "per Pod (median of 9 rounds of 2000)", "µs");
    for (name, ns) in [
        ("JSON value → JSON bytes (serde_json)", json_encode),
        ("JSON bytes → JSON value (serde_json)", json_decode),
        ("JSON value → protobuf (keel-api)", pb_encode),
        ("protobuf → JSON value (keel-api)", pb_decode),
        ("k8s-pb struct → protobuf (prost)", prost_encode),
        ("protobuf → k8s-pb struct (prost)", prost_decode),
        ("JSON bytes → protobuf, one pass (keel-api)", pb_from_bytes),
    ] {
        println!("{name:<44}{:>10.2}", ns / 1000.0);
    }
    println!(
        "bench protobuf: json_encode_us={:.2} json_decode_us={:.2} pb_encode_us={:.2} pb_decode_us={:.2} pb_from_json_bytes_us={:.2} prost_encode_us={:.2} prost_decode_us={:.2} pb_vs_json_encode={:.2} pb_vs_json_decode={:.2} json_bytes={} pb_bytes={}",
        json_encode / 1000.0,
        json_decode / 1000.0,
        pb_encode / 1000.0,
        pb_decode / 1000.0,
        pb_from_bytes / 1000.0,
        prost_encode / 1000.0,
        prost_decode / 1000.0,
        pb_encode / json_encode,
        pb_decode / json_decode,
        json_bytes.len(),
        protobuf.len()
    );
}
