//! RBAC decisions, differentially: the same policy on keel-apiserver and on kube-apiserver 1.34
//! (the upstream peer, on etcd 3.6, with kube-controller-manager's clusterrole-aggregation controller
//! so admin, edit and view hold their rules as they do in a cluster). The default policy plus the
//! same few bindings on both; then, for a matrix of subjects × verbs × resources (subresources and
//! non-resource URLs among them), a SubjectAccessReview must answer the same on both servers, a
//! SelfSubjectRulesReview must list the same rules, and `kubectl auth can-i` / `auth whoami` with
//! `--as` must print the same. Any difference fails the test unless it is listed in [`KNOWN`] with
//! upstream's reason.
//!
//! Both run `--authorization-mode Node,RBAC`: the nodes in the matrix (`system:node:n1`, which runs
//! a pod using a secret, a configmap, a claim bound to a volume with its own secret, and a service
//! account; and `system:node:n2`, which runs nothing) are decided by the Node authorizer's graph,
//! the same objects written to both servers.
//!
//! A service account with a real token (TokenRequest) asks `kubectl auth can-i` on both too.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use keel_testbed::kube_apiserver::KubeApiServer;
use keel_testbed::kubectl;
use keel_testbed::process::Daemon;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

/// Differences known and explained: (subject, question, upstream's reason).
const KNOWN: &[(&str, &str, &str)] = &[];

/// Who is asked about: a label, the user, its groups.
const SUBJECTS: &[(&str, &str, &[&str])] = &[
    ("a plain user", "carol", &["system:authenticated"]),
    ("alice (edit in dev)", "alice", &["system:authenticated"]),
    ("bob (view everywhere)", "bob", &["system:authenticated"]),
    ("ops group (admin in dev)", "dave", &["ops", "system:authenticated"]),
    ("the scheduler", "system:kube-scheduler", &["system:authenticated"]),
    ("the controller manager", "system:kube-controller-manager", &["system:authenticated"]),
    ("kube-proxy", "system:kube-proxy", &["system:authenticated"]),
    (
        "a service account without bindings",
        "system:serviceaccount:dev:default",
        &["system:serviceaccounts", "system:serviceaccounts:dev", "system:authenticated"],
    ),
    (
        "a service account bound to admin in dev",
        "system:serviceaccount:dev:deployer",
        &["system:serviceaccounts", "system:serviceaccounts:dev", "system:authenticated"],
    ),
    ("anonymous", "system:anonymous", &["system:unauthenticated"]),
    ("a bootstrap token", "system:bootstrap:abcdef", &["system:bootstrappers", "system:authenticated"]),
    ("the admin", "kubernetes-admin", &["system:masters", "system:authenticated"]),
    ("node n1 (runs web)", "system:node:n1", &["system:nodes", "system:authenticated"]),
    ("node n2 (runs nothing)", "system:node:n2", &["system:nodes", "system:authenticated"]),
    ("a node user outside system:nodes", "system:node:n1", &["system:authenticated"]),
];

/// What is asked: resource attributes (verb, group, resource, subresource, namespace, name) or a
/// non-resource request (verb, path).
#[derive(Debug, Clone, Copy)]
enum Ask {
    Resource(&'static str, &'static str, &'static str, &'static str, &'static str, &'static str),
    Path(&'static str, &'static str),
}

const ASKS: &[Ask] = &[
    Ask::Resource("get", "", "pods", "", "dev", "web"),
    Ask::Resource("list", "", "pods", "", "dev", ""),
    Ask::Resource("watch", "", "pods", "", "", ""),
    Ask::Resource("create", "", "pods", "", "dev", ""),
    Ask::Resource("delete", "", "pods", "", "dev", "web"),
    Ask::Resource("patch", "", "pods", "status", "dev", "web"),
    Ask::Resource("get", "", "pods", "log", "dev", "web"),
    Ask::Resource("create", "", "pods", "exec", "dev", "web"),
    Ask::Resource("create", "", "pods", "eviction", "dev", "web"),
    Ask::Resource("create", "", "pods", "binding", "dev", "web"),
    Ask::Resource("get", "", "secrets", "", "kube-system", "x"),
    Ask::Resource("list", "", "secrets", "", "dev", ""),
    Ask::Resource("list", "", "configmaps", "", "", ""),
    Ask::Resource("update", "", "configmaps", "", "kube-system", "extension-apiserver-authentication"),
    Ask::Resource("get", "", "nodes", "", "", "n1"),
    Ask::Resource("list", "", "nodes", "", "", ""),
    Ask::Resource("patch", "", "nodes", "status", "", "n1"),
    Ask::Resource("create", "", "events", "", "dev", ""),
    Ask::Resource("create", "events.k8s.io", "events", "", "dev", ""),
    Ask::Resource("get", "", "namespaces", "", "dev", "dev"),
    Ask::Resource("delete", "", "namespaces", "", "", "dev"),
    Ask::Resource("list", "", "services", "", "", ""),
    Ask::Resource("create", "", "serviceaccounts", "token", "dev", "default"),
    Ask::Resource("list", "", "persistentvolumes", "", "", ""),
    Ask::Resource("create", "apps", "deployments", "", "dev", ""),
    Ask::Resource("update", "apps", "deployments", "scale", "dev", "web"),
    Ask::Resource("deletecollection", "apps", "replicasets", "", "dev", ""),
    Ask::Resource("list", "discovery.k8s.io", "endpointslices", "", "", ""),
    Ask::Resource("create", "coordination.k8s.io", "leases", "", "kube-node-lease", ""),
    Ask::Resource("update", "coordination.k8s.io", "leases", "", "kube-system", "kube-scheduler"),
    Ask::Resource("create", "certificates.k8s.io", "certificatesigningrequests", "", "", ""),
    Ask::Resource("create", "certificates.k8s.io", "certificatesigningrequests", "nodeclient", "", ""),
    Ask::Resource("create", "rbac.authorization.k8s.io", "rolebindings", "", "dev", ""),
    Ask::Resource("escalate", "rbac.authorization.k8s.io", "clusterroles", "", "", "admin"),
    Ask::Resource("bind", "rbac.authorization.k8s.io", "clusterroles", "", "", "edit"),
    Ask::Resource("impersonate", "", "users", "", "", "alice"),
    Ask::Resource("create", "authentication.k8s.io", "tokenreviews", "", "", ""),
    Ask::Resource("create", "authorization.k8s.io", "subjectaccessreviews", "", "", ""),
    Ask::Resource("create", "authorization.k8s.io", "selfsubjectaccessreviews", "", "", ""),
    Ask::Resource("create", "authentication.k8s.io", "selfsubjectreviews", "", "", ""),
    Ask::Resource("get", "example.com", "widgets", "", "dev", "w"),
    // What the Node authorizer decides by its graph and its own rules.
    Ask::Resource("get", "", "secrets", "", "dev", "db-creds"),
    Ask::Resource("watch", "", "secrets", "", "dev", "db-creds"),
    Ask::Resource("get", "", "secrets", "", "dev", "other"),
    Ask::Resource("get", "", "secrets", "", "dev", "csi-creds"),
    Ask::Resource("update", "", "secrets", "", "dev", "db-creds"),
    Ask::Resource("get", "", "configmaps", "", "dev", "app-config"),
    Ask::Resource("get", "", "configmaps", "", "dev", "kube-root-ca.crt"),
    Ask::Resource("get", "", "configmaps", "", "dev", "other"),
    Ask::Resource("get", "", "persistentvolumeclaims", "", "dev", "data"),
    Ask::Resource("patch", "", "persistentvolumeclaims", "status", "dev", "data"),
    Ask::Resource("get", "", "persistentvolumes", "", "", "pv1"),
    Ask::Resource("get", "storage.k8s.io", "volumeattachments", "", "", "va1"),
    Ask::Resource("get", "", "serviceaccounts", "", "dev", "deployer"),
    Ask::Resource("create", "", "serviceaccounts", "token", "dev", "deployer"),
    Ask::Resource("get", "", "nodes", "", "", "n2"),
    Ask::Resource("update", "", "nodes", "", "", "n2"),
    Ask::Resource("delete", "", "nodes", "", "", "n1"),
    Ask::Resource("get", "", "pods", "", "dev", "other"),
    Ask::Resource("update", "coordination.k8s.io", "leases", "", "kube-node-lease", "n1"),
    Ask::Resource("update", "coordination.k8s.io", "leases", "", "kube-node-lease", "n2"),
    Ask::Resource("get", "storage.k8s.io", "csinodes", "", "", "n1"),
    Ask::Resource("create", "resource.k8s.io", "resourceslices", "", "", ""),
    Ask::Resource("list", "resource.k8s.io", "resourceslices", "", "", ""),
    Ask::Resource("get", "resource.k8s.io", "resourceclaims", "", "dev", "gpu"),
    Ask::Path("get", "/healthz"),
    Ask::Path("get", "/livez"),
    Ask::Path("get", "/readyz/ping"),
    Ask::Path("get", "/version"),
    Ask::Path("get", "/api"),
    Ask::Path("get", "/apis/apps/v1"),
    Ask::Path("get", "/openapi/v2"),
    Ask::Path("get", "/metrics"),
    Ask::Path("get", "/logs"),
    Ask::Path("post", "/healthz"),
];

fn describe(ask: &Ask) -> String {
    match ask {
        Ask::Resource(verb, group, resource, sub, namespace, name) => {
            let resource = if sub.is_empty() { (*resource).to_owned() } else { format!("{resource}/{sub}") };
            let group = if group.is_empty() { String::new() } else { format!(".{group}") };
            format!("{verb} {resource}{group} ns={namespace:?} name={name:?}")
        }
        Ask::Path(verb, path) => format!("{verb} {path}"),
    }
}

fn review(user: &str, groups: &[&str], ask: &Ask) -> Value {
    let attributes = match ask {
        Ask::Resource(verb, group, resource, subresource, namespace, name) => json!({"resourceAttributes": {
            "verb": verb, "group": group, "resource": resource, "subresource": subresource,
            "namespace": namespace, "name": name}}),
        Ask::Path(verb, path) => json!({"nonResourceAttributes": {"verb": verb, "path": path}}),
    };
    let mut spec = attributes;
    spec["user"] = user.into();
    spec["groups"] = json!(groups);
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec})
}

/// One server, as the admin.
struct Side {
    name: &'static str,
    client: kube::Client,
    kubeconfig: std::path::PathBuf,
}

impl Side {
    async fn new(name: &'static str, kubeconfig: &Path) -> Result<Side> {
        let config = kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(kubeconfig)?,
            &KubeConfigOptions::default(),
        )
        .await?;
        Ok(Side { name, client: kube::Client::try_from(config)?, kubeconfig: kubeconfig.to_owned() })
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Result<Value> {
        let mut request = http::Request::builder().method(method).uri(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let bytes = body.map(serde_json::to_vec).transpose()?.unwrap_or_default();
        let request = request.header("content-type", "application/json").body(bytes)?;
        let text = self
            .client
            .request_text(request)
            .await
            .with_context(|| format!("{}: {method} {path}", self.name))?;
        Ok(serde_json::from_str(&text)?)
    }

    async fn allowed(&self, user: &str, groups: &[&str], ask: &Ask) -> Result<bool> {
        let answer = self
            .send(
                "POST",
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                Some(&review(user, groups, ask)),
                &[],
            )
            .await?;
        Ok(answer["status"]["allowed"] == true)
    }

    /// The same few objects on both servers, beside the default policy.
    async fn set_up(&self) -> Result<()> {
        let binding = |kind: &str, namespace: Option<&str>, name: &str, role: &str, subject: Value| {
            let mut metadata = json!({"name": name});
            if let Some(namespace) = namespace {
                metadata["namespace"] = namespace.into();
            }
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata,
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                   "subjects": [subject]})
        };
        let user =
            |name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name});
        let writes = [
            (
                "/api/v1/namespaces",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "dev"}}),
            ),
            (
                "/apis/rbac.authorization.k8s.io/v1/namespaces/dev/rolebindings",
                binding("RoleBinding", Some("dev"), "alice-edit", "edit", user("alice")),
            ),
            (
                "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
                binding("ClusterRoleBinding", None, "bob-view", "view", user("bob")),
            ),
            (
                "/apis/rbac.authorization.k8s.io/v1/namespaces/dev/rolebindings",
                binding(
                    "RoleBinding",
                    Some("dev"),
                    "ops-admin",
                    "admin",
                    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "ops"}),
                ),
            ),
            (
                "/apis/rbac.authorization.k8s.io/v1/namespaces/dev/rolebindings",
                binding(
                    "RoleBinding",
                    Some("dev"),
                    "deployer-admin",
                    "admin",
                    json!({"kind": "ServiceAccount", "name": "deployer"}),
                ),
            ),
        ];
        for (path, object) in writes {
            self.send("POST", path, Some(&object), &[]).await?;
        }
        // What the Node authorizer's graph is made of: a pod on n1 and what it uses; a volume
        // bound to its claim, with a kubelet-visible secret; an attachment to n1.
        let graph = [
            (
                "/api/v1/namespaces/dev/serviceaccounts",
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "deployer"}}),
            ),
            (
                "/api/v1/namespaces/dev/pods",
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}, "spec": {
                    "nodeName": "n1",
                    "serviceAccountName": "deployer",
                    "containers": [{"name": "app", "image": "busybox",
                        "envFrom": [{"configMapRef": {"name": "app-config"}}],
                        "env": [{"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db-creds", "key": "password"}}}]}],
                    "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}),
            ),
            (
                "/api/v1/persistentvolumes",
                json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv1"}, "spec": {
                    "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                    "claimRef": {"namespace": "dev", "name": "data"},
                    "csi": {"driver": "csi.example.com", "volumeHandle": "h1",
                            "nodePublishSecretRef": {"namespace": "dev", "name": "csi-creds"}}}}),
            ),
            (
                "/apis/storage.k8s.io/v1/volumeattachments",
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": "va1"},
                       "spec": {"attacher": "csi.example.com", "nodeName": "n1", "source": {"persistentVolumeName": "pv1"}}}),
            ),
        ];
        for (path, object) in graph {
            self.send("POST", path, Some(&object), &[]).await?;
        }
        Ok(())
    }

    /// Until the bindings are in the authorizer and admin, edit and view are aggregated.
    async fn wait_until_current(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let sentinels = [
            ("alice", Ask::Resource("create", "apps", "deployments", "", "dev", "")),
            ("bob", Ask::Resource("list", "", "pods", "", "kube-system", "")),
            ("dave", Ask::Resource("create", "rbac.authorization.k8s.io", "rolebindings", "", "dev", "")),
            ("system:node:n1", Ask::Resource("get", "", "secrets", "", "dev", "csi-creds")),
            ("system:node:n1", Ask::Resource("get", "storage.k8s.io", "volumeattachments", "", "", "va1")),
        ];
        for (user, ask) in sentinels {
            while !self.allowed(user, &["ops", "system:nodes", "system:authenticated"], &ask).await? {
                ensure!(Instant::now() < deadline, "{}: {user} may still not {}", self.name, describe(&ask));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// The rules SelfSubjectRulesReview lists for `user` in `namespace`, as a set.
    async fn rules(&self, user: &str, groups: &[&str], namespace: &str) -> Result<BTreeSet<String>> {
        let mut headers = vec![("impersonate-user", user)];
        headers.extend(groups.iter().map(|g| ("impersonate-group", *g)));
        let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                          "spec": {"namespace": namespace}});
        let answer = self
            .send("POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", Some(&body), &headers)
            .await;
        // A subject may not be allowed to ask at all (anonymous): that is an answer too.
        let answer = match answer {
            Ok(answer) => answer,
            Err(error) => match error.downcast_ref::<kube::Error>() {
                Some(kube::Error::Api(status)) => {
                    return Ok(BTreeSet::from([format!("refused {}", status.code)]));
                }
                _ => return Err(error),
            },
        };
        let status = &answer["status"];
        let mut rules = BTreeSet::new();
        for (kind, list) in
            [("resource", &status["resourceRules"]), ("nonResource", &status["nonResourceRules"])]
        {
            for rule in list.as_array().into_iter().flatten() {
                rules.insert(format!("{kind} {rule}"));
            }
        }
        rules.insert(format!("incomplete={}", status["incomplete"]));
        Ok(rules)
    }
}

fn kubectl_output(kubectl: &Path, kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let output = Command::new(kubectl).arg("--kubeconfig").arg(kubeconfig).args(args).output()?;
    Ok(format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)))
}

/// kube-controller-manager with only the clusterrole-aggregation controller, on `kubeconfig`.
fn aggregation_controller(kubeconfig: &Path) -> Result<Daemon> {
    keel_testbed::kube_apiserver::kube_controller_manager(kubeconfig, "clusterrole-aggregation", &[])
}

#[tokio::test]
async fn decisions_and_rules_equal_kube_apiserver() -> Result<()> {
    let upstream = tokio::task::spawn_blocking(KubeApiServer::start).await??;
    let upstream_kubeconfig = upstream.dir().join("admin.kubeconfig");
    upstream.write_kubeconfig(&upstream_kubeconfig, upstream.admin())?;
    let _aggregation = aggregation_controller(&upstream_kubeconfig)?;

    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let _keel = common::keel_binary(&data, &[])?;

    let sides = [
        Side::new("keel", &data.join("admin.kubeconfig")).await?,
        Side::new("kube-apiserver", &upstream_kubeconfig).await?,
    ];
    for side in &sides {
        side.set_up().await?;
    }
    for side in &sides {
        side.wait_until_current().await?;
    }

    let mut differences = Vec::new();
    let mut asked = 0;
    let mut granted = 0;
    for (label, user, groups) in SUBJECTS {
        for ask in ASKS {
            let (keel, theirs) =
                (sides[0].allowed(user, groups, ask).await?, sides[1].allowed(user, groups, ask).await?);
            asked += 1;
            granted += usize::from(theirs);
            let question = describe(ask);
            let known = KNOWN.iter().any(|(s, q, _)| s == label && *q == question);
            if keel != theirs && !known {
                differences.push(format!("{label}: {question}: keel {keel}, kube-apiserver {theirs}"));
            }
            if keel == theirs && known {
                differences
                    .push(format!("{label}: {question}: listed as a difference but both answer {keel}"));
            }
        }
        for namespace in ["dev", "kube-system"] {
            let (keel, theirs) = (
                sides[0].rules(user, groups, namespace).await?,
                sides[1].rules(user, groups, namespace).await?,
            );
            if keel != theirs {
                let only =
                    |a: &BTreeSet<String>, b: &BTreeSet<String>| a.difference(b).cloned().collect::<Vec<_>>();
                differences.push(format!(
                    "{label}: SelfSubjectRulesReview in {namespace}: only keel {:?}; only kube-apiserver {:?}",
                    only(&keel, &theirs),
                    only(&theirs, &keel)
                ));
            }
        }
    }
    eprintln!(
        "{asked} SubjectAccessReviews per server ({granted} allowed), {} subjects' rules in two namespaces",
        SUBJECTS.len()
    );
    // The matrix asks both what is allowed and what is not.
    ensure!(granted > asked / 10 && granted < asked - asked / 10, "{granted} of {asked} allowed");

    // kubectl's own commands through impersonation, on both.
    let kubectl = kubectl::minor(33)?;
    let commands: &[&[&str]] = &[
        &["auth", "can-i", "create", "deployments", "-n", "dev", "--as=alice"],
        &["auth", "can-i", "delete", "nodes", "--as=alice"],
        &["auth", "can-i", "get", "pods", "-n", "kube-system", "--as=bob"],
        &["auth", "can-i", "update", "leases", "-n", "kube-system", "--as=system:kube-scheduler"],
        &["auth", "can-i", "list", "secrets", "-n", "dev", "--as=system:serviceaccount:dev:deployer"],
        &["auth", "can-i", "get", "/healthz", "--as=system:anonymous"],
        &["auth", "can-i", "--list", "-n", "dev", "--as=alice"],
        &["auth", "whoami", "--as=alice", "--as-group=dev"],
        &["auth", "whoami", "--as=system:serviceaccount:dev:default"],
        &[
            "auth",
            "can-i",
            "get",
            "secret/db-creds",
            "-n",
            "dev",
            "--as=system:node:n1",
            "--as-group=system:nodes",
        ],
        &[
            "auth",
            "can-i",
            "get",
            "secret/db-creds",
            "-n",
            "dev",
            "--as=system:node:n2",
            "--as-group=system:nodes",
        ],
        &["auth", "can-i", "--list", "-n", "dev", "--as=system:node:n1", "--as-group=system:nodes"],
    ];
    for args in commands {
        let keel = kubectl_output(&kubectl.path, &sides[0].kubeconfig, args)?;
        let theirs = kubectl_output(&kubectl.path, &sides[1].kubeconfig, args)?;
        if keel != theirs {
            differences
                .push(format!("kubectl {}:\nkeel:\n{keel}\nkube-apiserver:\n{theirs}", args.join(" ")));
        }
    }
    // A service account authenticated by a real token (TokenRequest), not impersonated.
    let token_commands: &[&[&str]] = &[
        &["auth", "can-i", "--list", "-n", "dev"],
        &["auth", "can-i", "create", "deployments", "-n", "dev"],
        &["auth", "can-i", "create", "serviceaccounts/token", "-n", "dev"],
        &["auth", "can-i", "get", "/.well-known/openid-configuration"],
        &["auth", "can-i", "list", "pods", "-n", "kube-system"],
    ];
    let mut token_kubeconfigs = Vec::new();
    // dev/deployer exists on both (set_up made it).
    for side in &sides {
        let token =
            kubectl_output(&kubectl.path, &side.kubeconfig, &["create", "token", "deployer", "-n", "dev"])?;
        token_kubeconfigs.push(token_kubeconfig(&side.kubeconfig, token.trim(), side.name)?);
    }
    for args in token_commands {
        let keel = kubectl_output(&kubectl.path, &token_kubeconfigs[0], args)?;
        let theirs = kubectl_output(&kubectl.path, &token_kubeconfigs[1], args)?;
        if keel != theirs {
            differences.push(format!(
                "kubectl {} with dev:deployer's token:\nkeel:\n{keel}\nkube-apiserver:\n{theirs}",
                args.join(" ")
            ));
        }
    }
    if !differences.is_empty() {
        bail!("{} differences from kube-apiserver:\n{}", differences.len(), differences.join("\n"));
    }
    Ok(())
}

/// A copy of `admin` (a kubeconfig) whose user has `token` instead of a client certificate.
fn token_kubeconfig(admin: &Path, token: &str, name: &str) -> Result<std::path::PathBuf> {
    let mut config = Kubeconfig::read_from(admin)?;
    for named in &mut config.auth_infos {
        named.auth_info =
            Some(kube::config::AuthInfo { token: Some(token.to_owned().into()), ..Default::default() });
    }
    let path = admin.with_file_name(format!("{name}-token.kubeconfig"));
    std::fs::write(&path, serde_yaml_ng::to_string(&config)?)?;
    Ok(path)
}
