//! RBAC, as upstream's RBACAuthorizer: Roles, ClusterRoles and their bindings, read into a
//! [`Policy`] indexed by subject so a decision is a few hash lookups and rule scans (the rules of a
//! binding's role are resolved when the policy is built, not per request). The [`Rbac`] authorizer
//! follows the watch cache's RBAC objects and swaps in a new policy when they change; the default
//! policy upstream's apiserver creates is [`bootstrap`], reconciled at start ([`reconcile`]);
//! privilege escalation through role and binding writes is refused ([`escalation`]).

pub mod bootstrap;
pub mod escalation;
pub mod reconcile;
pub mod rules;
pub mod writer;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde_json::Value;

use crate::auth::User;
use crate::cache::{Cache, Change, Entry};
use crate::follow::{self, Following, Retries};
use crate::handlers::Handlers;
use crate::request::RequestInfo;
use keel_api::status::ApiError;
use keel_store::Revision;
pub use rules::PolicyRule;

/// What one binding grants one subject: its role's rules (or why none: the role is missing), and
/// how upstream describes the grant when it allows a request.
#[derive(Debug, Clone)]
struct Grant {
    rules: Result<Arc<[PolicyRule]>, String>,
    /// `ClusterRoleBinding "b" of ClusterRole "r" to User "alice"`.
    description: Arc<str>,
}

/// Bindings by the subject they name.
#[derive(Debug, Default)]
struct Subjects {
    users: HashMap<String, Vec<Grant>>,
    groups: HashMap<String, Vec<Grant>>,
}

impl Subjects {
    /// Adds `binding`'s grant of `rules` to `subject`.
    fn add(&mut self, subject: &Value, binding: &Value, rules: &Result<Arc<[PolicyRule]>, String>) {
        let name = subject["name"].as_str().unwrap_or_default();
        let kind = subject["kind"].as_str().unwrap_or_default();
        let binding_namespace = binding["metadata"]["namespace"].as_str().unwrap_or_default();
        let binding_name = binding["metadata"]["name"].as_str().unwrap_or_default();
        let (role_kind, role) = (
            binding["roleRef"]["kind"].as_str().unwrap_or_default(),
            binding["roleRef"]["name"].as_str().unwrap_or_default(),
        );
        let described_subject = match (kind, subject["namespace"].as_str().filter(|n| !n.is_empty())) {
            ("ServiceAccount", Some(namespace)) => format!("{kind} {:?}", format!("{name}/{namespace}")),
            ("ServiceAccount", None) => format!("{kind} {:?}", format!("{name}/{binding_namespace}")),
            _ => format!("{kind} {name:?}"),
        };
        let description = if binding_namespace.is_empty() {
            format!("ClusterRoleBinding {binding_name:?} of {role_kind} {role:?} to {described_subject}")
        } else {
            let qualified = format!("{binding_name}/{binding_namespace}");
            format!("RoleBinding {qualified:?} of {role_kind} {role:?} to {described_subject}")
        };
        let grant = Grant { rules: rules.clone(), description: description.into() };
        match kind {
            "User" => self.users.entry(name.to_owned()).or_default().push(grant),
            "Group" => self.groups.entry(name.to_owned()).or_default().push(grant),
            // A service account is the user it authenticates as; without a namespace of its own it
            // is in the binding's (upstream's appliesToUser).
            "ServiceAccount" => {
                let namespace =
                    subject["namespace"].as_str().filter(|n| !n.is_empty()).unwrap_or(binding_namespace);
                if !namespace.is_empty() && !name.is_empty() {
                    let user = format!("system:serviceaccount:{namespace}:{name}");
                    self.users.entry(user).or_default().push(grant);
                }
            }
            _ => {}
        }
    }

    /// Every grant that applies to `user`: its name's, then each group's.
    fn for_user<'a>(&'a self, user: &'a User) -> impl Iterator<Item = &'a Grant> {
        let by_name = self.users.get(&user.name).into_iter().flatten();
        let by_group = user.groups.iter().filter_map(|g| self.groups.get(g)).flatten();
        by_name.chain(by_group)
    }
}

/// The RBAC objects of a moment, indexed for decisions.
#[derive(Debug, Default)]
pub struct Policy {
    cluster_roles: HashMap<String, Arc<[PolicyRule]>>,
    roles: HashMap<(String, String), Arc<[PolicyRule]>>,
    cluster: Subjects,
    namespaces: HashMap<String, Subjects>,
    /// How many bindings it holds (for the log).
    bindings: usize,
}

/// What an authorizer decided, with the reason upstream would give.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow(String),
    Deny(String),
    NoOpinion(String),
}

/// The rules that apply to a user in a namespace (SelfSubjectRulesReview).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UserRules {
    pub resource_rules: Vec<PolicyRule>,
    pub non_resource_rules: Vec<PolicyRule>,
    /// Errors met resolving them (a binding to a missing role): the list may be incomplete.
    pub errors: Vec<String>,
}

impl Policy {
    /// Reads the four kinds of objects (as served: JSON with metadata).
    pub fn build(
        roles: &[Value],
        cluster_roles: &[Value],
        role_bindings: &[Value],
        cluster_role_bindings: &[Value],
    ) -> Policy {
        let rules_of = |role: &Value| -> Arc<[PolicyRule]> {
            role["rules"].as_array().into_iter().flatten().map(PolicyRule::from_json).collect()
        };
        let text = |value: &Value| value.as_str().unwrap_or_default().to_owned();
        let mut policy = Policy {
            cluster_roles: cluster_roles
                .iter()
                .map(|r| (text(&r["metadata"]["name"]), rules_of(r)))
                .collect(),
            roles: roles
                .iter()
                .map(|r| ((text(&r["metadata"]["namespace"]), text(&r["metadata"]["name"])), rules_of(r)))
                .collect(),
            ..Policy::default()
        };
        let cluster_rules = policy.cluster_roles.clone();
        for binding in cluster_role_bindings {
            let role = binding["roleRef"]["name"].as_str().unwrap_or_default();
            let rules = match (binding["roleRef"]["kind"].as_str(), cluster_rules.get(role)) {
                (Some("ClusterRole"), Some(rules)) => Ok(rules.clone()),
                _ => Err(format!("clusterrole.rbac.authorization.k8s.io {role:?} not found")),
            };
            for subject in binding["subjects"].as_array().into_iter().flatten() {
                policy.cluster.add(subject, binding, &rules);
            }
            policy.bindings += 1;
        }
        for binding in role_bindings {
            let namespace = binding["metadata"]["namespace"].as_str().unwrap_or_default();
            let role = binding["roleRef"]["name"].as_str().unwrap_or_default();
            let rules = match binding["roleRef"]["kind"].as_str() {
                Some("ClusterRole") => cluster_rules
                    .get(role)
                    .cloned()
                    .ok_or_else(|| format!("clusterrole.rbac.authorization.k8s.io {role:?} not found")),
                _ => policy
                    .roles
                    .get(&(namespace.to_owned(), role.to_owned()))
                    .cloned()
                    .ok_or_else(|| format!("role.rbac.authorization.k8s.io {role:?} not found")),
            };
            let subjects = policy.namespaces.entry(namespace.to_owned()).or_default();
            for subject in binding["subjects"].as_array().into_iter().flatten() {
                subjects.add(subject, binding, &rules);
            }
            policy.bindings += 1;
        }
        policy
    }

    /// The rules of the role a binding in `namespace` refers to (`kind` Role or ClusterRole).
    pub fn role_rules(&self, kind: &str, namespace: &str, name: &str) -> Option<Arc<[PolicyRule]>> {
        match kind {
            "ClusterRole" => self.cluster_roles.get(name).cloned(),
            "Role" => self.roles.get(&(namespace.to_owned(), name.to_owned())).cloned(),
            _ => None,
        }
    }

    /// The grants that apply to `user` for a request in `namespace` (`""`: cluster-wide only), in
    /// upstream's order: cluster role bindings, then the namespace's role bindings.
    fn grants<'a>(&'a self, user: &'a User, namespace: &str) -> impl Iterator<Item = &'a Grant> {
        let local = (!namespace.is_empty()).then(|| self.namespaces.get(namespace)).flatten();
        self.cluster.for_user(user).chain(local.into_iter().flat_map(|s| s.for_user(user)))
    }

    /// upstream's RBACAuthorizer.Authorize.
    pub fn authorize(&self, user: &User, info: &RequestInfo) -> Decision {
        let mut errors = Vec::new();
        for grant in self.grants(user, &info.namespace) {
            match &grant.rules {
                Ok(rules) if rules.iter().any(|rule| rule.allows(info)) => {
                    return Decision::Allow(format!("RBAC: allowed by {}", grant.description));
                }
                Ok(_) => {}
                Err(error) => errors.push(error.as_str()),
            }
        }
        let reason = if errors.is_empty() { String::new() } else { format!("RBAC: {}", errors.join(", ")) };
        Decision::NoOpinion(reason)
    }

    /// upstream's RulesFor: every rule that applies to `user` in `namespace`.
    pub fn rules_for(&self, user: &User, namespace: &str) -> UserRules {
        let mut rules = UserRules::default();
        for grant in self.grants(user, namespace) {
            match &grant.rules {
                Ok(granted) => {
                    for rule in granted.iter() {
                        if rule.non_resource_urls.is_empty() {
                            rules.resource_rules.push(rule.clone());
                        } else {
                            rules.non_resource_rules.push(rule.clone());
                        }
                    }
                }
                Err(error) => rules.errors.push(error.clone()),
            }
        }
        rules
    }
}

/// The RBAC authorizer: the current [`Policy`], replaced as the objects change.
#[derive(Debug, Default)]
pub struct Rbac {
    policy: RwLock<Arc<Policy>>,
}

impl Rbac {
    pub fn policy(&self) -> Arc<Policy> {
        self.policy.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub fn replace(&self, policy: Policy) {
        *self.policy.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(policy);
    }
}

/// The four RBAC collections, in [`Policy::build`]'s order.
const KINDS: [&str; 4] = ["roles", "clusterroles", "rolebindings", "clusterrolebindings"];

/// Follows the RBAC objects in the watch cache and rebuilds the policy after each burst of
/// changes (upstream's RBAC authorizer reads its informers' listers the same way: eventually
/// current); the aggregated ClusterRoles are kept current through the handlers (upstream's
/// clusterrole-aggregation controller), a failed pass tried again after a pause that doubles, as
/// upstream requeues it rate-limited (5 ms up to 1000 s), not only at the next RBAC change.
struct PolicyFollower {
    handlers: Handlers,
    rbac: Arc<Rbac>,
    /// The objects of each of [`KINDS`] by key.
    objects: [BTreeMap<String, Value>; 4],
    /// Whether the objects changed since the policy was last built.
    changed: bool,
    /// The aggregation pass, when the last one failed.
    aggregation: Retries<()>,
}

/// The first pause before a failed aggregation pass is tried again, and the longest (upstream's
/// `DefaultControllerRateLimiter`, which its clusterrole-aggregation controller uses).
const AGGREGATION_RETRY_BASE: Duration = Duration::from_millis(5);
const AGGREGATION_RETRY_MAX: Duration = Duration::from_secs(1000);

/// Starts following; returns once the first policy, holding every RBAC object written up to store
/// revision `after`, is in place. Stops when dropped.
pub async fn follow(handlers: Handlers, rbac: Arc<Rbac>, after: Revision) -> Following {
    let caches: Vec<Arc<Cache>> = KINDS
        .iter()
        .filter_map(|plural| keel_api::resources::find("rbac.authorization.k8s.io", "v1", plural))
        .filter_map(|resource| handlers.cache.of(resource))
        .collect();
    let follower = PolicyFollower {
        handlers,
        rbac,
        objects: Default::default(),
        changed: false,
        aggregation: Retries::new(AGGREGATION_RETRY_BASE, AGGREGATION_RETRY_MAX),
    };
    Following::start(caches, after, follower).await
}

impl follow::Follower for PolicyFollower {
    fn reset(&mut self, cache: usize, snapshot: &[Arc<Entry>]) {
        if let Some(objects) = self.objects.get_mut(cache) {
            *objects = snapshot.iter().filter_map(|e| parse(e).map(|v| (e.key.clone(), v))).collect();
        }
        self.changed = true;
    }

    fn change(&mut self, cache: usize, change: &Change) {
        if let Some(objects) = self.objects.get_mut(cache) {
            apply(objects, change);
        }
        self.changed = true;
    }

    async fn settled(&mut self) {
        if std::mem::take(&mut self.changed) {
            rebuild(&self.rbac, &self.objects);
        }
        // Every pass aggregates (what it writes comes back as changes); a due retry is this pass.
        let _due = self.aggregation.due(tokio::time::Instant::now());
        match aggregate(&self.handlers, &self.objects).await {
            Ok(()) => self.aggregation.forget(&()),
            Err(error) => {
                let pause = self.aggregation.failed((), tokio::time::Instant::now());
                tracing::warn!(%error, ?pause, "aggregating ClusterRoles: tried again later");
            }
        }
    }

    fn retry_at(&self) -> Option<tokio::time::Instant> {
        self.aggregation.next()
    }
}

/// The aggregation controller's pass over the ClusterRoles; what it writes comes back as changes.
async fn aggregate(handlers: &Handlers, objects: &[BTreeMap<String, Value>]) -> Result<(), ApiError> {
    let cluster_roles: Vec<Value> = objects.get(1).map(|m| m.values().cloned().collect()).unwrap_or_default();
    handlers.aggregate_cluster_roles(&cluster_roles).await
}

fn parse(entry: &Entry) -> Option<Value> {
    serde_json::from_slice(&entry.value).ok()
}

fn apply(objects: &mut BTreeMap<String, Value>, change: &Change) {
    match change.new.as_deref().and_then(parse) {
        Some(object) => {
            objects.insert(change.key.clone(), object);
        }
        None => {
            objects.remove(&change.key);
        }
    }
}

fn rebuild(rbac: &Rbac, objects: &[BTreeMap<String, Value>]) {
    let list = |i: usize| objects.get(i).map(|m| m.values().cloned().collect::<Vec<_>>()).unwrap_or_default();
    let policy = Policy::build(&list(0), &list(1), &list(2), &list(3));
    tracing::debug!(bindings = policy.bindings, "RBAC policy rebuilt");
    rbac.replace(policy);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::request::info;

    fn role(kind: &str, namespace: &str, name: &str, rules: &Value) -> Value {
        json!({"kind": kind, "metadata": {"name": name, "namespace": namespace}, "rules": rules})
    }

    fn binding(namespace: &str, role_kind: &str, role: &str, subjects: &Value) -> Value {
        json!({"metadata": {"name": format!("{role}-binding"), "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
               "subjects": subjects})
    }

    fn allowed(policy: &Policy, user: &User, method: &http::Method, path: &str) -> bool {
        matches!(policy.authorize(user, &info(method, path, None)), Decision::Allow(_))
    }

    #[test]
    fn bindings_grant_their_roles_rules() {
        let cluster_roles = [
            role(
                "ClusterRole",
                "",
                "pod-reader",
                &json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "pods/log"]}]),
            ),
            role(
                "ClusterRole",
                "",
                "health",
                &json!([{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/api/*"]}]),
            ),
        ];
        let roles = [role(
            "Role",
            "dev",
            "deployer",
            &json!([{"verbs": ["*"], "apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"]}]),
        )];
        let role_bindings = [
            binding("dev", "Role", "deployer", &json!([{"kind": "User", "name": "alice"}])),
            binding("dev", "ClusterRole", "pod-reader", &json!([{"kind": "ServiceAccount", "name": "ci"}])),
            binding("dev", "Role", "missing", &json!([{"kind": "Group", "name": "ops"}])),
        ];
        let cluster_role_bindings = [binding(
            "",
            "ClusterRole",
            "health",
            &json!([{"kind": "Group", "name": "system:authenticated"}]),
        )];
        let policy = Policy::build(&roles, &cluster_roles, &role_bindings, &cluster_role_bindings);
        let alice = User::named("alice", &["system:authenticated"]);
        let ci = User::named("system:serviceaccount:dev:ci", &["system:serviceaccounts"]);
        use http::Method;
        assert!(allowed(&policy, &alice, &Method::PATCH, "/apis/apps/v1/namespaces/dev/deployments/web"));
        assert!(!allowed(&policy, &alice, &Method::PATCH, "/apis/apps/v1/namespaces/dev/deployments/api"));
        assert!(!allowed(&policy, &alice, &Method::PATCH, "/apis/apps/v1/namespaces/prod/deployments/web"));
        assert!(
            !allowed(&policy, &alice, &Method::GET, "/apis/apps/v1/namespaces/dev/deployments"),
            "a list has no name"
        );
        assert!(allowed(&policy, &alice, &Method::GET, "/healthz"));
        assert!(allowed(&policy, &alice, &Method::GET, "/api/v1"));
        assert!(!allowed(&policy, &alice, &Method::GET, "/apis"));
        assert!(allowed(&policy, &ci, &Method::GET, "/api/v1/namespaces/dev/pods/p/log"));
        assert!(!allowed(&policy, &ci, &Method::GET, "/api/v1/namespaces/dev/pods/p/exec"));
        assert!(
            !allowed(&policy, &ci, &Method::GET, "/api/v1/pods"),
            "a namespaced grant is not cluster-wide"
        );
        let ops = User::named("bob", &["ops"]);
        assert_eq!(
            policy.authorize(&ops, &info(&Method::GET, "/api/v1/namespaces/dev/pods", None)),
            Decision::NoOpinion("RBAC: role.rbac.authorization.k8s.io \"missing\" not found".into())
        );
        let rules = policy.rules_for(&alice, "dev");
        assert_eq!((rules.resource_rules.len(), rules.non_resource_rules.len()), (1, 1));
        assert_eq!(policy.rules_for(&ops, "dev").errors.len(), 1);
    }
}
