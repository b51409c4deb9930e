//! The default RBAC policy: the ClusterRoles, ClusterRoleBindings, Roles and RoleBindings that
//! kube-apiserver v1.34 creates at start with its default feature gates, as Keel data.
//!
//! Every object carries the label `kubernetes.io/bootstrapping: rbac-defaults` and the annotation
//! `rbac.authorization.kubernetes.io/autoupdate: "true"` (the server may reconcile it back to this
//! policy). Rules are written as upstream orders them; within a rule, verbs, API groups, resources,
//! resource names and URLs are sorted, as upstream's rule builder sorts them, so the objects equal the
//! peer's field for field (`tests/rbac_bootstrap.rs` holds them against a running kube-apiserver).
//!
//! Rules that upstream adds only behind a feature gate are here exactly when the gate is on by default
//! in v1.34: DynamicResourceAllocation, MultiCIDRServiceAllocator, KubeletFineGrainedAuthz,
//! KubeletServiceAccountTokenForCredentialProviders, StatefulSetAutoDeletePVC, VolumeAttributesClass
//! and SELinuxChangePolicy are on; ClusterTrustBundle, PodCertificateRequest, DRADeviceTaints,
//! DRAExtendedResource, ComponentFlagz, ComponentStatusz, StorageVersionAPI and
//! StorageVersionMigrator are off, so their roles and rules are absent.

mod cluster_roles;
mod controller_roles;

use serde_json::{Map, Value, json};

/// The API group of every object here, and of the subjects that are users and groups.
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
const API_VERSION: &str = "rbac.authorization.k8s.io/v1";
/// The label every bootstrap object carries, with the value `rbac-defaults`.
pub const BOOTSTRAPPING_LABEL: &str = "kubernetes.io/bootstrapping";
/// The annotation that lets the server reconcile a bootstrap object, with the value `"true"`.
pub const AUTOUPDATE_ANNOTATION: &str = "rbac.authorization.kubernetes.io/autoupdate";
/// The prefix of the controllers' roles; the rest of the name is the controller's ServiceAccount.
const CONTROLLER_PREFIX: &str = "system:controller:";

const KUBE_SYSTEM: &str = "kube-system";
const KUBE_PUBLIC: &str = "kube-public";

// API groups, by the name upstream's policy gives them.
const CORE: &str = "";
const APPS: &str = "apps";
const AUTHENTICATION: &str = "authentication.k8s.io";
const AUTHORIZATION: &str = "authorization.k8s.io";
const AUTOSCALING: &str = "autoscaling";
const BATCH: &str = "batch";
const CERTIFICATES: &str = "certificates.k8s.io";
const COORDINATION: &str = "coordination.k8s.io";
const DISCOVERY: &str = "discovery.k8s.io";
const EVENTS: &str = "events.k8s.io";
const EXTENSIONS: &str = "extensions";
const NETWORKING: &str = "networking.k8s.io";
const POLICY: &str = "policy";
const RBAC: &str = RBAC_GROUP;
const RESOURCE: &str = "resource.k8s.io";
const STORAGE: &str = "storage.k8s.io";

// Verb sets shared by many rules.
const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];
const READ_WRITE: &[&str] =
    &["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];
const READ_UPDATE: &[&str] = &["get", "list", "watch", "update", "patch"];

/// One PolicyRule: `rule(&["get"]).groups(&[CORE]).resources(&["pods"])`.
#[derive(Debug, Clone, Default)]
struct Rule {
    verbs: Vec<&'static str>,
    api_groups: Vec<&'static str>,
    resources: Vec<&'static str>,
    resource_names: Vec<&'static str>,
    non_resource_urls: Vec<&'static str>,
}

/// A rule allowing `verbs`; say on what with [`Rule::groups`] and [`Rule::resources`], or
/// [`Rule::urls`].
fn rule(verbs: &[&'static str]) -> Rule {
    Rule { verbs: verbs.to_vec(), ..Rule::default() }
}

impl Rule {
    fn groups(mut self, groups: &[&'static str]) -> Rule {
        self.api_groups.extend_from_slice(groups);
        self
    }

    fn resources(mut self, resources: &[&'static str]) -> Rule {
        self.resources.extend_from_slice(resources);
        self
    }

    fn names(mut self, names: &[&'static str]) -> Rule {
        self.resource_names.extend_from_slice(names);
        self
    }

    fn urls(mut self, urls: &[&'static str]) -> Rule {
        self.non_resource_urls.extend_from_slice(urls);
        self
    }

    /// The rule as JSON: empty lists left out, every list sorted.
    fn to_json(&self) -> Value {
        let mut rule = Map::new();
        let fields = [
            ("verbs", &self.verbs),
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ];
        for (field, values) in fields {
            if !values.is_empty() || field == "verbs" {
                let mut sorted = values.clone();
                sorted.sort_unstable();
                rule.insert(field.to_owned(), json!(sorted));
            }
        }
        Value::Object(rule)
    }
}

/// What most controllers and components need to report what they did: write events, in the core
/// group and in events.k8s.io.
fn events() -> Rule {
    rule(&["create", "update", "patch"]).groups(&[CORE, EVENTS]).resources(&["events"])
}

/// A ClusterRole or Role before it is rendered.
#[derive(Debug)]
struct Role {
    name: &'static str,
    /// Labels beyond the bootstrapping one, each with the value `"true"` (the aggregation labels).
    labels: Vec<&'static str>,
    rules: Vec<Rule>,
    /// For an aggregated ClusterRole, the label (`: "true"`) of the ClusterRoles whose rules the
    /// clusterrole-aggregation controller gathers into it; its own rules stay null until then.
    aggregates: Option<&'static str>,
}

impl Role {
    fn new(name: &'static str, rules: Vec<Rule>) -> Role {
        Role { name, labels: Vec::new(), rules, aggregates: None }
    }

    /// A ClusterRole whose rules are those of every ClusterRole labelled `label: "true"`.
    fn aggregated(name: &'static str, label: &'static str) -> Role {
        Role { name, labels: Vec::new(), rules: Vec::new(), aggregates: Some(label) }
    }

    /// Adds the label `label: "true"`, so the role is gathered into the role aggregating it.
    fn labelled(mut self, label: &'static str) -> Role {
        self.labels.push(label);
        self
    }

    fn to_json(&self, kind: &str, namespace: Option<&str>) -> Value {
        let mut role = object(kind, self.name, namespace, &self.labels);
        match self.aggregates {
            Some(label) => {
                role.insert("rules".to_owned(), Value::Null);
                let selector = json!({ "matchLabels": { label: "true" } });
                role.insert("aggregationRule".to_owned(), json!({ "clusterRoleSelectors": [selector] }));
            }
            None => {
                role.insert("rules".to_owned(), self.rules.iter().map(Rule::to_json).collect());
            }
        }
        Value::Object(role)
    }
}

/// Who a binding grants its role to.
#[derive(Debug, Clone, Copy)]
enum Subject {
    User(&'static str),
    Group(&'static str),
    /// (namespace, name)
    ServiceAccount(&'static str, &'static str),
}

impl Subject {
    fn to_json(self) -> Value {
        match self {
            Subject::User(name) => json!({ "kind": "User", "apiGroup": RBAC_GROUP, "name": name }),
            Subject::Group(name) => json!({ "kind": "Group", "apiGroup": RBAC_GROUP, "name": name }),
            Subject::ServiceAccount(namespace, name) => {
                json!({ "kind": "ServiceAccount", "namespace": namespace, "name": name })
            }
        }
    }
}

/// A ClusterRoleBinding or RoleBinding before it is rendered.
#[derive(Debug)]
struct Binding {
    name: &'static str,
    role: &'static str,
    subjects: Vec<Subject>,
}

/// A binding named after the role it grants.
fn bind(role: &'static str, subjects: &[Subject]) -> Binding {
    Binding { name: role, role, subjects: subjects.to_vec() }
}

impl Binding {
    fn to_json(&self, kind: &str, role_kind: &str, namespace: Option<&str>) -> Value {
        let mut binding = object(kind, self.name, namespace, &[]);
        binding.insert(
            "roleRef".to_owned(),
            json!({ "apiGroup": RBAC_GROUP, "kind": role_kind, "name": self.role }),
        );
        if !self.subjects.is_empty() {
            binding.insert("subjects".to_owned(), self.subjects.iter().map(|s| s.to_json()).collect());
        }
        Value::Object(binding)
    }
}

/// apiVersion, kind and metadata (name, namespace, labels, annotation) of a bootstrap object.
fn object(kind: &str, name: &str, namespace: Option<&str>, labels: &[&str]) -> Map<String, Value> {
    let mut label_map = Map::new();
    label_map.insert(BOOTSTRAPPING_LABEL.to_owned(), json!("rbac-defaults"));
    for label in labels {
        label_map.insert((*label).to_owned(), json!("true"));
    }
    let mut metadata = Map::new();
    metadata.insert("name".to_owned(), json!(name));
    if let Some(namespace) = namespace {
        metadata.insert("namespace".to_owned(), json!(namespace));
    }
    metadata.insert("labels".to_owned(), Value::Object(label_map));
    metadata.insert("annotations".to_owned(), json!({ AUTOUPDATE_ANNOTATION: "true" }));
    let mut object = Map::new();
    object.insert("apiVersion".to_owned(), json!(API_VERSION));
    object.insert("kind".to_owned(), json!(kind));
    object.insert("metadata".to_owned(), Value::Object(metadata));
    object
}

/// Every bootstrap ClusterRole, in upstream's order: the cluster-wide roles, then one role per
/// controller of kube-controller-manager (`system:controller:<name>`).
pub fn cluster_roles() -> Vec<Value> {
    cluster_roles::all()
        .iter()
        .chain(&controller_roles::all())
        .map(|role| role.to_json("ClusterRole", None))
        .collect()
}

/// Every bootstrap ClusterRoleBinding: the components' and groups' bindings, then each controller's
/// role bound to its ServiceAccount in kube-system.
pub fn cluster_role_bindings() -> Vec<Value> {
    let controllers = controller_roles::all();
    let controller_bindings = controllers.iter().map(|role| {
        let account = role.name.strip_prefix(CONTROLLER_PREFIX).unwrap_or(role.name);
        Binding {
            name: role.name,
            role: role.name,
            subjects: vec![Subject::ServiceAccount(KUBE_SYSTEM, account)],
        }
    });
    component_bindings()
        .into_iter()
        .chain(controller_bindings)
        .map(|binding| binding.to_json("ClusterRoleBinding", "ClusterRole", None))
        .collect()
}

/// Who the cluster-wide roles are granted to.
fn component_bindings() -> Vec<Binding> {
    use Subject::{Group, ServiceAccount, User};
    vec![
        bind("cluster-admin", &[Group("system:masters")]),
        bind("system:monitoring", &[Group("system:monitoring")]),
        bind("system:discovery", &[Group("system:authenticated")]),
        bind("system:basic-user", &[Group("system:authenticated")]),
        bind("system:public-info-viewer", &[Group("system:authenticated"), Group("system:unauthenticated")]),
        bind("system:node-proxier", &[User("system:kube-proxy")]),
        bind("system:kube-controller-manager", &[User("system:kube-controller-manager")]),
        bind("system:kube-dns", &[ServiceAccount(KUBE_SYSTEM, "kube-dns")]),
        bind("system:kube-scheduler", &[User("system:kube-scheduler")]),
        bind("system:volume-scheduler", &[User("system:kube-scheduler")]),
        // Nodes are authorized by the Node authorizer since 1.7; the binding stays, without subjects,
        // so that reconciling an older cluster removes the system:nodes group from it.
        bind("system:node", &[]),
        bind("system:service-account-issuer-discovery", &[Group("system:serviceaccounts")]),
    ]
}

/// Every bootstrap Role (namespaced), kube-system's then kube-public's.
pub fn roles() -> Vec<Value> {
    namespaced_roles().iter().map(|(namespace, role)| role.to_json("Role", Some(namespace))).collect()
}

/// Every bootstrap RoleBinding (namespaced), kube-system's then kube-public's.
pub fn role_bindings() -> Vec<Value> {
    namespaced_bindings()
        .iter()
        .map(|(namespace, binding)| binding.to_json("RoleBinding", "Role", Some(namespace)))
        .collect()
}

fn namespaced_roles() -> Vec<(&'static str, Role)> {
    vec![
        // Lets an extension API server read the configmap in which kube-apiserver publishes how it
        // authenticates clients (client CA, request-header settings).
        (
            KUBE_SYSTEM,
            Role::new(
                "extension-apiserver-authentication-reader",
                vec![
                    rule(READ)
                        .groups(&[CORE])
                        .resources(&["configmaps"])
                        .names(&["extension-apiserver-authentication"]),
                ],
            ),
        ),
        // The bootstrap signer reads the bootstrap token secrets in kube-system.
        (
            KUBE_SYSTEM,
            Role::new(
                "system:controller:bootstrap-signer",
                vec![rule(READ).groups(&[CORE]).resources(&["secrets"])],
            ),
        ),
        // Cloud providers keep their configmaps in kube-system (deprecated since 1.10, still created).
        (
            KUBE_SYSTEM,
            Role::new(
                "system:controller:cloud-provider",
                vec![rule(&["create", "get", "list", "watch"]).groups(&[CORE]).resources(&["configmaps"])],
            ),
        ),
        // The token cleaner deletes expired bootstrap token secrets, only in kube-system.
        (
            KUBE_SYSTEM,
            Role::new(
                "system:controller:token-cleaner",
                vec![
                    rule(&["get", "list", "watch", "delete"]).groups(&[CORE]).resources(&["secrets"]),
                    events(),
                ],
            ),
        ),
        // kube-controller-manager's leader election: its configmap lock of old and its leases.
        (
            KUBE_SYSTEM,
            leader_locking("system::leader-locking-kube-controller-manager", "kube-controller-manager"),
        ),
        // kube-scheduler's leader election, likewise.
        (KUBE_SYSTEM, leader_locking("system::leader-locking-kube-scheduler", "kube-scheduler")),
        // The bootstrap signer signs the cluster-info configmap in kube-public.
        (
            KUBE_PUBLIC,
            Role::new(
                "system:controller:bootstrap-signer",
                vec![
                    rule(READ).groups(&[CORE]).resources(&["configmaps"]),
                    rule(&["update"]).groups(&[CORE]).resources(&["configmaps"]).names(&["cluster-info"]),
                    events(),
                ],
            ),
        ),
    ]
}

/// The leader-election role of a component that locks the configmap `lock` and leases.
fn leader_locking(name: &'static str, lock: &'static str) -> Role {
    let lease_verbs = &["get", "watch", "list", "create", "update"];
    Role::new(
        name,
        vec![
            rule(&["watch"]).groups(&[CORE]).resources(&["configmaps"]),
            rule(&["get", "update"]).groups(&[CORE]).resources(&["configmaps"]).names(&[lock]),
            rule(lease_verbs).groups(&[COORDINATION]).resources(&["leases"]),
            rule(lease_verbs).groups(&[COORDINATION]).resources(&["leasecandidates"]),
        ],
    )
}

fn namespaced_bindings() -> Vec<(&'static str, Binding)> {
    use Subject::{ServiceAccount, User};
    let account = |name| ServiceAccount(KUBE_SYSTEM, name);
    vec![
        (
            KUBE_SYSTEM,
            Binding {
                name: "system::extension-apiserver-authentication-reader",
                role: "extension-apiserver-authentication-reader",
                subjects: vec![User("system:kube-controller-manager"), User("system:kube-scheduler")],
            },
        ),
        (
            KUBE_SYSTEM,
            bind(
                "system::leader-locking-kube-controller-manager",
                &[
                    User("system:kube-controller-manager"),
                    account("kube-controller-manager"),
                    account("leader-election-controller"),
                ],
            ),
        ),
        (
            KUBE_SYSTEM,
            bind(
                "system::leader-locking-kube-scheduler",
                &[User("system:kube-scheduler"), account("kube-scheduler")],
            ),
        ),
        (KUBE_SYSTEM, bind("system:controller:bootstrap-signer", &[account("bootstrap-signer")])),
        (KUBE_SYSTEM, bind("system:controller:cloud-provider", &[account("cloud-provider")])),
        (KUBE_SYSTEM, bind("system:controller:token-cleaner", &[account("token-cleaner")])),
        (KUBE_PUBLIC, bind("system:controller:bootstrap-signer", &[account("bootstrap-signer")])),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn key(object: &Value) -> (String, String) {
        let meta = &object["metadata"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        (text(&meta["namespace"]), text(&meta["name"]))
    }

    #[test]
    fn names_are_unique_and_every_binding_names_a_role_that_exists() {
        let cluster: BTreeSet<_> = cluster_roles().iter().map(key).collect();
        assert_eq!(cluster.len(), cluster_roles().len(), "a ClusterRole name is used twice");
        for binding in cluster_role_bindings() {
            let role = binding["roleRef"]["name"].as_str().unwrap_or_default().to_owned();
            assert!(
                cluster.contains(&(String::new(), role.clone())),
                "{} binds missing {role}",
                key(&binding).1
            );
        }
        let namespaced: BTreeSet<_> = roles().iter().map(key).collect();
        assert_eq!(namespaced.len(), roles().len(), "a Role name is used twice in a namespace");
        for binding in role_bindings() {
            let (namespace, name) = key(&binding);
            let role = binding["roleRef"]["name"].as_str().unwrap_or_default().to_owned();
            assert!(
                namespaced.contains(&(namespace.clone(), role.clone())),
                "{namespace}/{name} binds missing {role}"
            );
        }
    }

    #[test]
    fn every_object_is_labelled_and_annotated() {
        let all = [cluster_roles(), cluster_role_bindings(), roles(), role_bindings()].concat();
        for object in &all {
            assert_eq!(object["apiVersion"], API_VERSION);
            assert_eq!(
                object["metadata"]["labels"][BOOTSTRAPPING_LABEL],
                "rbac-defaults",
                "{}",
                key(object).1
            );
            assert_eq!(object["metadata"]["annotations"][AUTOUPDATE_ANNOTATION], "true", "{}", key(object).1);
        }
    }

    #[test]
    fn rules_render_sorted_without_empty_lists() {
        let rendered = rule(WRITE).groups(&[APPS, CORE]).resources(&["pods", "deployments"]).to_json();
        assert_eq!(
            rendered,
            json!({
                "verbs": ["create", "delete", "deletecollection", "patch", "update"],
                "apiGroups": ["", "apps"],
                "resources": ["deployments", "pods"],
            })
        );
        assert_eq!(
            rule(&["get"]).urls(&["/version", "/api"]).to_json(),
            json!({ "verbs": ["get"], "nonResourceURLs": ["/api", "/version"] })
        );
    }

    #[test]
    fn aggregated_roles_select_by_label_and_have_null_rules() {
        let roles = cluster_roles();
        let admin = roles.iter().find(|r| r["metadata"]["name"] == "admin").expect("admin");
        assert_eq!(admin["rules"], Value::Null);
        assert_eq!(
            admin["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"]["rbac.authorization.k8s.io/aggregate-to-admin"],
            "true"
        );
        let edit = roles.iter().find(|r| r["metadata"]["name"] == "edit").expect("edit");
        assert_eq!(edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"], "true");
    }

    #[test]
    fn controllers_are_bound_to_their_service_accounts() {
        let bindings = cluster_role_bindings();
        let job = bindings
            .iter()
            .find(|b| b["metadata"]["name"] == "system:controller:job-controller")
            .expect("job-controller binding");
        assert_eq!(
            job["subjects"],
            json!([{ "kind": "ServiceAccount", "namespace": "kube-system", "name": "job-controller" }])
        );
        let node =
            bindings.iter().find(|b| b["metadata"]["name"] == "system:node").expect("system:node binding");
        assert!(node.get("subjects").is_none(), "system:node is bound to nobody: {node}");
    }
}
