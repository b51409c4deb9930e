//! NodeRestriction, differentially: keel-apiserver and kube-apiserver 1.34
//! (`--enable-admission-plugins=NodeRestriction`, Node,RBAC) hold the same objects and
//! `system:node:n1` (by impersonation) asks both the same things; every status code and message
//! must be equal.
//!
//! - TokenRequests: pods on n1 each use a token audience a different way — an inline CSI volume, a
//!   claim bound to a CSI volume, a claim bound to an in-tree volume CSI migration hands to a
//!   driver, an inline in-tree volume, a generic ephemeral volume's claim — plus a pod whose volumes
//!   point at things that are not there, and an RBAC grant of
//!   `request-serviceaccounts-token-audience` on one audience. For every pod × requested audiences,
//!   n1 asks for a token bound to the pod.
//! - DeleteCollection (n1 granted `deletecollection` on pods by RBAC): upstream admits each item
//!   with the collection's attributes, which carry no name, so NodeRestriction's lookup of the pod
//!   finds none and every item's delete fails NotFound, which DeleteCollection passes over: n1
//!   deletes nothing, not even its own pods, and gets 200 with the items listed. The admin's
//!   delete of the same collection (with a `null` body, which upstream reads as no options) does
//!   delete them. Both servers must leave every pod in the same state.

use crate::common;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use http_body_util::BodyExt;
use keel_testbed::kube_apiserver::{KubeApiServer, KubeApiServerOptions};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

/// The pods on n1 a token is asked for.
const PODS: &[&str] = &["inline", "claimed", "migrated", "inline-migrated", "ephemeral", "broken"];

/// The audiences asked for, each list one TokenRequest.
const AUDIENCES: &[&[&str]] = &[
    &[],
    &["vault"],
    &["store"],
    &["gcp"],
    &["aws"],
    &["projected"],
    &["granted"],
    &["nobody"],
    &["vault", "store"],
];

/// One server, as its admin.
struct Side {
    name: &'static str,
    client: kube::Client,
}

impl Side {
    async fn new(name: &'static str, kubeconfig: &std::path::Path) -> Result<Side> {
        let config = kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(kubeconfig)?,
            &KubeConfigOptions::default(),
        )
        .await?;
        Ok(Side { name, client: kube::Client::try_from(config)? })
    }

    /// The status code and body of one request; `as_n1` impersonates the kubelet of n1.
    async fn send(&self, method: &str, path: &str, body: &Value, as_n1: bool) -> Result<(u16, Value)> {
        let mut request =
            http::Request::builder().method(method).uri(path).header("content-type", "application/json");
        if as_n1 {
            request = request
                .header("impersonate-user", "system:node:n1")
                .header("impersonate-group", "system:nodes");
        }
        // Null is no body, but for a DELETE: upstream reads a `null` DeleteOptions as none.
        let empty = body.is_null() && method != "DELETE";
        let request = request.body(if empty { Vec::new() } else { serde_json::to_vec(body)? })?;
        let response = self
            .client
            .send(request.map(kube::client::Body::from))
            .await
            .with_context(|| format!("{}: {method} {path}", self.name))?;
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await?.to_bytes();
        Ok((status, serde_json::from_slice(&bytes).unwrap_or(Value::Null)))
    }

    async fn create(&self, path: &str, object: Value) -> Result<()> {
        let (status, answer) = self.send("POST", path, &object, false).await?;
        ensure!(status == 201, "{}: POST {path}: {status} {answer}", self.name);
        Ok(())
    }

    async fn set_up(&self) -> Result<()> {
        let driver = |name: &str, audience: &str| {
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver", "metadata": {"name": name},
                   "spec": {"tokenRequests": [{"audience": audience}]}})
        };
        for (name, audience) in [
            ("vault.csi.example.com", "vault"),
            ("store.csi.example.com", "store"),
            ("pd.csi.storage.gke.io", "gcp"),
            ("ebs.csi.aws.com", "aws"),
        ] {
            self.create("/apis/storage.k8s.io/v1/csidrivers", driver(name, audience)).await?;
        }
        let volume = |name: &str, claim: &str, (kind, source): (&str, Value)| {
            let mut spec = json!({"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                                  "claimRef": {"namespace": "dev", "name": claim}});
            spec[kind] = source;
            json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec})
        };
        for pv in [
            volume(
                "pv-store",
                "data",
                ("csi", json!({"driver": "store.csi.example.com", "volumeHandle": "h1"})),
            ),
            volume("pv-gce", "disk", ("gcePersistentDisk", json!({"pdName": "disk-1"}))),
            volume(
                "pv-ephemeral",
                "ephemeral-scratch",
                ("csi", json!({"driver": "store.csi.example.com", "volumeHandle": "h2"})),
            ),
        ] {
            self.create("/api/v1/persistentvolumes", pv).await?;
        }
        self.create(
            "/api/v1/namespaces",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dev"}}),
        )
        .await?;
        self.create(
            "/api/v1/namespaces/dev/serviceaccounts",
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "runner"}}),
        )
        .await?;
        let claim = |name: &str, volume: &str| {
            let mut spec = json!({"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                                  "storageClassName": ""});
            if !volume.is_empty() {
                spec["volumeName"] = volume.into();
            }
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec})
        };
        for pvc in [
            claim("data", "pv-store"),
            claim("disk", "pv-gce"),
            claim("ephemeral-scratch", "pv-ephemeral"),
            claim("unbound", ""),
        ] {
            self.create("/api/v1/namespaces/dev/persistentvolumeclaims", pvc).await?;
        }
        let template = json!({"spec": {"accessModes": ["ReadWriteOnce"],
                                       "resources": {"requests": {"storage": "1Gi"}}}});
        let pods = [
            ("inline", json!([{"name": "v", "csi": {"driver": "vault.csi.example.com"}}])),
            ("claimed", json!([{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}])),
            ("migrated", json!([{"name": "v", "persistentVolumeClaim": {"claimName": "disk"}}])),
            ("inline-migrated", json!([{"name": "v", "awsElasticBlockStore": {"volumeID": "vol-1"}}])),
            ("ephemeral", json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": template}}])),
            (
                "broken",
                json!([
                    {"name": "a", "persistentVolumeClaim": {"claimName": "missing"}},
                    {"name": "b", "csi": {"driver": "absent.csi.example.com"}},
                    {"name": "c", "persistentVolumeClaim": {"claimName": "unbound"}},
                    {"name": "d", "persistentVolumeClaim": {"claimName": "missing"}},
                    {"name": "e", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "audience": "projected"}}]}},
                ]),
            ),
        ];
        for (name, volumes) in pods {
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
                "nodeName": "n1", "serviceAccountName": "runner",
                "containers": [{"name": "c", "image": "busybox"}], "volumes": volumes}});
            self.create("/api/v1/namespaces/dev/pods", pod).await?;
        }
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "n1-audience"},
            "rules": [{"apiGroups": [""], "resources": ["granted"], "verbs": ["request-serviceaccounts-token-audience"]}]});
        self.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", role).await?;
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "n1-audience"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "n1-audience"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:node:n1"}]});
        self.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding).await
    }

    /// n1 asks for a token of `runner` bound to `pod`, for `audiences`: the status and message.
    async fn token(&self, pod: &str, audiences: &[&str]) -> Result<(u16, String)> {
        let (_, found) =
            self.send("GET", &format!("/api/v1/namespaces/dev/pods/{pod}"), &Value::Null, false).await?;
        let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {
            "audiences": audiences,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": found["metadata"]["uid"]}}});
        let path = "/api/v1/namespaces/dev/serviceaccounts/runner/token";
        let (status, answer) = self.send("POST", path, &request, true).await?;
        if status == 201 {
            ensure!(
                answer["status"]["token"].is_string(),
                "{}: a token without a token: {answer}",
                self.name
            );
            return Ok((status, String::new()));
        }
        Ok((status, answer["message"].as_str().unwrap_or_default().to_owned()))
    }

    /// Pods labelled for two collections — `set=mixed` with one on n2, `set=own` all on n1 —
    /// and an RBAC grant of `deletecollection` on pods to n1, in force.
    async fn set_up_collection(&self) -> Result<()> {
        for (name, node, set) in [
            ("own-a", "n1", "own"),
            ("own-b", "n1", "own"),
            ("mine", "n1", "mixed"),
            ("theirs", "n2", "mixed"),
        ] {
            let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"set": set}},
                "spec": {"nodeName": node, "serviceAccountName": "runner", "containers": [{"name": "c", "image": "busybox"}]}});
            self.create("/api/v1/namespaces/dev/pods", pod).await?;
        }
        let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "n1-collections"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["deletecollection"]}]});
        self.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", role).await?;
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "n1-collections"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "n1-collections"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:node:n1"}]});
        self.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding).await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
            "user": "system:node:n1", "groups": ["system:nodes"],
            "resourceAttributes": {"verb": "deletecollection", "resource": "pods", "namespace": "dev"}}});
        loop {
            let path = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
            let (_, answer) = self.send("POST", path, &review, false).await?;
            if answer["status"]["allowed"] == true {
                return Ok(());
            }
            ensure!(Instant::now() < deadline, "{}: n1 may still not deletecollection pods", self.name);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A delete of a collection (by n1 or the admin): the status, the message, and the names deleted (sorted).
    async fn delete_collection(&self, path: &str, as_n1: bool) -> Result<(u16, String, Vec<String>)> {
        let (status, answer) = self.send("DELETE", path, &Value::Null, as_n1).await?;
        let items = answer["items"].as_array().into_iter().flatten();
        let mut names: Vec<String> =
            items.filter_map(|i| i["metadata"]["name"].as_str()).map(str::to_owned).collect();
        names.sort();
        Ok((status, answer["message"].as_str().unwrap_or_default().to_owned(), names))
    }

    /// Until the Node authorizer's graph and kube-apiserver's informers hold the objects: the
    /// last pod written may have its token, and the last binding is in force.
    async fn wait_until_current(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        for (pod, audience) in [("broken", "projected"), ("ephemeral", "store"), ("inline", "granted")] {
            loop {
                let (status, message) = self.token(pod, &[audience]).await?;
                if status == 201 {
                    break;
                }
                ensure!(Instant::now() < deadline, "{}: {pod} for {audience}: {status} {message}", self.name);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }
}

#[tokio::test]
async fn node_restriction_equals_kube_apiserver() -> Result<()> {
    let options = KubeApiServerOptions::new().arg("--enable-admission-plugins=NodeRestriction");
    let upstream = tokio::task::spawn_blocking(move || KubeApiServer::start_with(&options)).await??;
    let upstream_kubeconfig = upstream.dir().join("admin.kubeconfig");
    upstream.write_kubeconfig(&upstream_kubeconfig, upstream.admin())?;
    let dir = tempfile::tempdir()?;
    let keel = common::keel_binary(&dir.path().join("data"), &[])?;

    let sides = [
        Side::new("keel", &keel.kubeconfig).await?,
        Side::new("kube-apiserver", &upstream_kubeconfig).await?,
    ];
    for side in &sides {
        side.set_up().await?;
    }
    for side in &sides {
        side.wait_until_current().await?;
    }
    let (mut differences, mut granted) = (Vec::new(), 0);
    for pod in PODS {
        for audiences in AUDIENCES {
            let keel = sides[0].token(pod, audiences).await?;
            let theirs = sides[1].token(pod, audiences).await?;
            granted += usize::from(theirs.0 == 201);
            if keel != theirs {
                differences.push(format!("{pod} {audiences:?}: keel {keel:?}, kube-apiserver {theirs:?}"));
            }
        }
    }
    ensure!(differences.is_empty(), "{} differences:\n{}", differences.len(), differences.join("\n"));
    // The matrix is only worth something if both outcomes occur.
    let asked = PODS.len() * AUDIENCES.len();
    ensure!(granted > PODS.len() && granted < asked, "{granted} of {asked} granted");

    for side in &sides {
        side.set_up_collection().await?;
    }
    // n1's pod deletes, admitted without a name, find no pod: nothing is deleted, every item is
    // listed. Then the admin's delete of n1's own pods does delete them (marks them: bound pods
    // are deleted gracefully).
    for (selector, as_n1) in [("set=mixed", true), ("set=own", true), ("set=own", false)] {
        let path = format!("/api/v1/namespaces/dev/pods?labelSelector={selector}");
        let keel = sides[0].delete_collection(&path, as_n1).await?;
        let theirs = sides[1].delete_collection(&path, as_n1).await?;
        ensure!(keel == theirs, "deletecollection {selector}: keel {keel:?}, kube-apiserver {theirs:?}");
    }
    // What each pod is now: there or not, and marked for deletion or not.
    for pod in ["own-a", "own-b", "mine", "theirs"] {
        let path = format!("/api/v1/namespaces/dev/pods/{pod}");
        let (keel, found) = sides[0].send("GET", &path, &Value::Null, false).await?;
        let (theirs, their_pod) = sides[1].send("GET", &path, &Value::Null, false).await?;
        let marked = |pod: &Value| pod["metadata"]["deletionTimestamp"].is_string();
        ensure!(
            (keel, marked(&found)) == (theirs, marked(&their_pod)),
            "pod {pod}: keel {keel} marked {}, kube-apiserver {theirs} marked {}",
            marked(&found),
            marked(&their_pod)
        );
    }
    Ok(())
}
