//! The default RBAC policy, differentially: kube-apiserver 1.34 (the upstream peer, on etcd 3.6)
//! creates its bootstrap ClusterRoles, ClusterRoleBindings, Roles and RoleBindings at start; every
//! object labelled `kubernetes.io/bootstrapping=rbac-defaults` it serves must equal the one
//! `keel_apiserver::rbac::bootstrap` describes, and the two sets of names must be the same.
//!
//! Objects are compared after dropping the metadata the server fills in (uid, resourceVersion,
//! creationTimestamp, managedFields); name, namespace, labels and annotations are kept, and every
//! rule, selector, roleRef and subject is compared exactly, in order. A difference is reported by
//! object and field path. A missing peer binary fails the test (`cargo xtask peers` builds it).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use keel_apiserver::rbac::bootstrap::{self, BOOTSTRAPPING_LABEL};
use keel_testbed::kube_apiserver::KubeApiServer;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Map, Value};

/// (kind, namespace, name): how objects are matched up.
type Key = (String, String, String);

/// What is compared of an object: apiVersion, kind, the kept metadata and everything else it has.
fn normalise(mut object: Value, kind: &str) -> Result<(Key, Value)> {
    let map = object.as_object_mut().context("an object that is not a JSON object")?;
    // Items of a list carry no apiVersion and kind of their own; the list's type says them.
    map.entry("apiVersion").or_insert_with(|| Value::from("rbac.authorization.k8s.io/v1"));
    map.entry("kind").or_insert_with(|| Value::from(kind));
    let metadata = map.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
    let kept: Map<String, Value> = ["name", "namespace", "labels", "annotations"]
        .into_iter()
        .filter_map(|field| metadata.get(field).map(|value| (field.to_owned(), value.clone())))
        .collect();
    let text = |field: &str| kept.get(field).and_then(Value::as_str).unwrap_or_default().to_owned();
    let key = (kind.to_owned(), text("namespace"), text("name"));
    map.insert("metadata".to_owned(), Value::Object(kept));
    Ok((key, object))
}

/// Field paths at which `keel` and `upstream` differ, with both values.
fn differences(path: &str, keel: &Value, upstream: &Value, out: &mut Vec<String>) {
    match (keel, upstream) {
        (Value::Object(k), Value::Object(u)) => {
            let fields: std::collections::BTreeSet<&String> = k.keys().chain(u.keys()).collect();
            for field in fields {
                let (kv, uv) = (k.get(field).unwrap_or(&Value::Null), u.get(field).unwrap_or(&Value::Null));
                let absent = |present: bool| if present { "" } else { " (absent)" };
                if k.contains_key(field) != u.contains_key(field) {
                    out.push(format!(
                        "{path}.{field}: keel {kv}{} vs upstream {uv}{}",
                        absent(k.contains_key(field)),
                        absent(u.contains_key(field))
                    ));
                } else {
                    differences(&format!("{path}.{field}"), kv, uv, out);
                }
            }
        }
        (Value::Array(k), Value::Array(u)) if k.len() == u.len() => {
            for (i, (kv, uv)) in k.iter().zip(u).enumerate() {
                differences(&format!("{path}[{i}]"), kv, uv, out);
            }
        }
        (Value::Array(k), Value::Array(u)) => {
            // Different lengths: the first position where they part, then what only one side has.
            let first = k.iter().zip(u).position(|(a, b)| a != b).unwrap_or(k.len().min(u.len()));
            out.push(format!(
                "{path}: keel has {} elements, upstream {}; they part at [{first}]",
                k.len(),
                u.len()
            ));
            for (side, (i, value)) in
                unmatched(k, u).map(|e| ("keel", e)).chain(unmatched(u, k).map(|e| ("upstream", e)))
            {
                out.push(format!("{path}[{i}]: only {side} has {value}"));
            }
        }
        _ if keel != upstream => out.push(format!("{path}: keel {keel} vs upstream {upstream}")),
        _ => {}
    }
}

/// The elements of `these` (with their index) that no element of `those` equals, each element of
/// `those` matching at most one.
fn unmatched<'a>(these: &'a [Value], those: &'a [Value]) -> impl Iterator<Item = (usize, &'a Value)> {
    let mut taken = vec![false; those.len()];
    these.iter().enumerate().filter(move |(_, value)| {
        match those.iter().enumerate().position(|(j, other)| !taken[j] && other == *value) {
            Some(j) => {
                taken[j] = true;
                false
            }
            None => true,
        }
    })
}

/// Lists `resource` (all namespaces) as the admin, keeping the bootstrap objects.
async fn upstream_objects(client: &kube::Client, resource: &str, kind: &str) -> Result<Vec<(Key, Value)>> {
    let path = format!(
        "/apis/rbac.authorization.k8s.io/v1/{resource}?labelSelector={BOOTSTRAPPING_LABEL}%3Drbac-defaults"
    );
    let request = http::Request::get(&path).body(Vec::new())?;
    let text = client.request_text(request).await.with_context(|| format!("GET {path}"))?;
    let list: Value = serde_json::from_str(&text).with_context(|| format!("parsing the {resource} list"))?;
    let items =
        list["items"].as_array().with_context(|| format!("{resource}: a list without items: {list}"))?;
    items
        .iter()
        .filter(|item| item["metadata"]["labels"][BOOTSTRAPPING_LABEL] == "rbac-defaults")
        .map(|item| normalise(item.clone(), kind))
        .collect()
}

fn keel_objects(objects: Vec<Value>, kind: &str) -> Result<Vec<(Key, Value)>> {
    objects.into_iter().map(|object| normalise(object, kind)).collect()
}

fn describe((kind, namespace, name): &Key) -> String {
    if namespace.is_empty() { format!("{kind} {name}") } else { format!("{kind} {namespace}/{name}") }
}

/// Every difference between the two sets, one paragraph per object; empty when they are equal.
fn report(keel: Vec<(Key, Value)>, upstream: Vec<(Key, Value)>) -> Result<String> {
    let mut report = String::new();
    let count = keel.len();
    let keel: BTreeMap<Key, Value> = keel.into_iter().collect();
    ensure!(keel.len() == count, "keel's bootstrap policy names an object twice");
    let upstream: BTreeMap<Key, Value> = upstream.into_iter().collect();
    for key in upstream.keys().filter(|key| !keel.contains_key(*key)) {
        writeln!(report, "- {} is created by kube-apiserver but missing from keel", describe(key))?;
    }
    for key in keel.keys().filter(|key| !upstream.contains_key(*key)) {
        writeln!(report, "- {} is in keel but kube-apiserver does not create it", describe(key))?;
    }
    for (key, ours) in &keel {
        let Some(theirs) = upstream.get(key) else { continue };
        let mut found = Vec::new();
        differences("", ours, theirs, &mut found);
        if !found.is_empty() {
            writeln!(report, "- {} differs:", describe(key))?;
            for line in found {
                writeln!(report, "    {line}")?;
            }
        }
    }
    Ok(report)
}

#[tokio::test]
async fn bootstrap_policy_equals_kube_apiserver() -> Result<()> {
    let started = Instant::now();
    let server = tokio::task::spawn_blocking(KubeApiServer::start).await??;
    eprintln!("kube-apiserver ready in {:?}", started.elapsed());
    let kubeconfig_path = server.dir().join("admin.kubeconfig");
    server.write_kubeconfig(&kubeconfig_path, server.admin())?;
    let kubeconfig = Kubeconfig::read_from(&kubeconfig_path)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;

    let sets = [
        ("clusterroles", "ClusterRole", bootstrap::cluster_roles()),
        ("clusterrolebindings", "ClusterRoleBinding", bootstrap::cluster_role_bindings()),
        ("roles", "Role", bootstrap::roles()),
        ("rolebindings", "RoleBinding", bootstrap::role_bindings()),
    ];
    let mut failures = String::new();
    for (resource, kind, ours) in sets {
        let theirs = upstream_objects(&client, resource, kind).await?;
        let ours = keel_objects(ours, kind)?;
        eprintln!("{resource}: keel {}, kube-apiserver {}", ours.len(), theirs.len());
        ensure!(
            !theirs.is_empty(),
            "kube-apiserver served no bootstrap {resource}: is the RBAC authorizer on?"
        );
        let found = report(ours, theirs)?;
        if !found.is_empty() {
            writeln!(failures, "{resource}:\n{found}")?;
        }
    }
    eprintln!("compared in {:?} in all", started.elapsed());
    ensure!(
        failures.is_empty(),
        "keel's RBAC bootstrap policy differs from kube-apiserver 1.34's:\n{failures}"
    );
    Ok(())
}

#[test]
fn differences_name_the_object_and_the_field() -> Result<()> {
    let role = |verbs: Value| {
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": { "name": "r", "uid": "dropped" },
            "rules": [{ "verbs": verbs, "apiGroups": [""], "resources": ["pods"] }],
        })
    };
    let ours = keel_objects(vec![role(serde_json::json!(["get"]))], "ClusterRole")?;
    let theirs = keel_objects(vec![role(serde_json::json!(["list"]))], "ClusterRole")?;
    let found = report(ours.clone(), theirs)?;
    assert!(
        found.contains("ClusterRole r differs")
            && found.contains(".rules[0].verbs[0]: keel \"get\" vs upstream \"list\""),
        "{found}"
    );
    assert!(report(ours.clone(), ours.clone())?.is_empty(), "uid is not compared");
    let found = report(ours, Vec::new())?;
    assert!(found.contains("ClusterRole r is in keel but kube-apiserver does not create it"), "{found}");
    Ok(())
}
