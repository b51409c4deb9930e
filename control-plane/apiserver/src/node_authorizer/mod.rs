//! The Node authorizer (`--authorization-mode Node`, upstream's plugin/pkg/auth/authorizer/node,
//! 1.34 with its default feature gates): a kubelet — user `system:node:<name>` in group
//! `system:nodes` — reads only the secrets, configmaps, claims, volumes and service account tokens
//! its own pods lead it to ([`graph`]), reads only its own Node and the pods bound to it, and
//! otherwise gets what upstream's node rules (the `system:node` ClusterRole) allow. Anyone else, it
//! has no opinion about. Which writes a kubelet may make of what it is allowed is the
//! NodeRestriction admission plugin's business.

pub mod graph;

use std::sync::Arc;

use keel_store::Revision;

use crate::auth::User;
use crate::cache::Cache;
use crate::follow::Following;
use crate::handlers::Handlers;
use crate::rbac::{Decision, PolicyRule};
use crate::request::RequestInfo;
use graph::{Kind, Populator, SharedGraph, Source, Vertex};

/// upstream's node user prefix and group (`k8s.io/apiserver/pkg/authentication/user`).
pub const NODE_USER_PREFIX: &str = "system:node:";
pub const NODES_GROUP: &str = "system:nodes";
/// The namespace of the nodes' heartbeat leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// upstream's default NodeIdentifier: `Some(name)` for a node's user (the name may be empty: a
/// node user that names no node), `None` for anyone else.
pub fn node_identity(user: &User) -> Option<&str> {
    let name = user.name.strip_prefix(NODE_USER_PREFIX)?;
    user.groups.iter().any(|g| g == NODES_GROUP).then_some(name)
}

#[derive(Debug)]
pub struct NodeAuthorizer {
    graph: Arc<SharedGraph>,
    /// upstream's bootstrappolicy.NodeRules: the `system:node` ClusterRole's rules.
    rules: Vec<PolicyRule>,
}

impl Default for NodeAuthorizer {
    fn default() -> NodeAuthorizer {
        let role = crate::rbac::bootstrap::cluster_roles()
            .into_iter()
            .find(|role| role["metadata"]["name"] == "system:node")
            .unwrap_or_default();
        let rules = role["rules"].as_array().into_iter().flatten().map(PolicyRule::from_json).collect();
        NodeAuthorizer { graph: Arc::default(), rules }
    }
}

fn no_opinion(reason: impl Into<String>) -> Decision {
    Decision::NoOpinion(reason.into())
}

fn allow() -> Decision {
    Decision::Allow(String::new())
}

impl NodeAuthorizer {
    pub fn graph(&self) -> &Arc<SharedGraph> {
        &self.graph
    }

    /// Starts keeping the graph current from the watch cache; returns once it holds everything
    /// written up to store revision `after`. Stops when dropped.
    pub async fn follow(&self, handlers: &Handlers, after: Revision) -> Following {
        let mut caches: Vec<Arc<Cache>> = Vec::new();
        let mut sources = Vec::new();
        for source in Source::ALL {
            let (group, version, plural) = source.resource();
            let Some(resource) = keel_api::resources::find(group, version, plural) else { continue };
            if let Some(cache) = handlers.cache.of(resource) {
                caches.push(cache);
                sources.push((source, resource.key_prefix()));
            }
        }
        Following::start(caches, after, Populator { graph: self.graph.clone(), sources }).await
    }

    /// upstream's NodeAuthorizer.Authorize.
    pub fn authorize(&self, user: &User, info: &RequestInfo) -> Decision {
        let Some(node) = node_identity(user) else { return no_opinion("") };
        if node.is_empty() {
            return no_opinion(format!("unknown node for user {:?}", user.name));
        }
        if info.is_resource_request {
            let decided = match (info.api_group.as_str(), info.resource.as_str()) {
                ("", "secrets") => Some(self.read_namespaced(node, Kind::Secret, info)),
                ("", "configmaps") => Some(self.read_namespaced(node, Kind::ConfigMap, info)),
                ("", "persistentvolumeclaims") if info.subresource == "status" => {
                    Some(self.status_update(node, Kind::PersistentVolumeClaim, info))
                }
                ("", "persistentvolumeclaims") => Some(self.get(node, Kind::PersistentVolumeClaim, info)),
                ("", "persistentvolumes") => Some(self.get(node, Kind::PersistentVolume, info)),
                ("resource.k8s.io", "resourceclaims") => Some(self.get(node, Kind::ResourceClaim, info)),
                ("storage.k8s.io", "volumeattachments") => Some(self.get(node, Kind::VolumeAttachment, info)),
                ("", "serviceaccounts") => Some(self.service_account(node, info)),
                ("coordination.k8s.io", "leases") => Some(lease(node, info)),
                ("storage.k8s.io", "csinodes") => Some(csi_node(node, info)),
                ("resource.k8s.io", "resourceslices") => Some(self.resource_slice(node, info)),
                ("", "nodes") => Some(own_node(node, info)),
                ("", "pods") => Some(self.pod(node, info)),
                _ => None,
            };
            if let Some(decision) = decided {
                return decision;
            }
        }
        if self.rules.iter().any(|rule| rule.allows(info)) {
            return allow();
        }
        no_opinion("")
    }

    /// Whether `node` is led to the object the request names (upstream's authorize).
    fn related(&self, node: &str, kind: Kind, info: &RequestInfo) -> Decision {
        if info.name.is_empty() {
            return no_opinion("No Object name found");
        }
        if self.graph.has_path(node, &Vertex::new(kind, &info.namespace, &info.name)) {
            allow()
        } else {
            no_opinion(format!("no relationship found between node '{node}' and this object"))
        }
    }

    fn status_update(&self, node: &str, kind: Kind, info: &RequestInfo) -> Decision {
        if !matches!(info.verb.as_str(), "update" | "patch") {
            return no_opinion("can only get/update/patch this type");
        }
        if info.subresource != "status" {
            return no_opinion("can only update status subresource");
        }
        self.related(node, kind, info)
    }

    fn get(&self, node: &str, kind: Kind, info: &RequestInfo) -> Decision {
        if info.verb != "get" {
            return no_opinion("can only get individual resources of this type");
        }
        if !info.subresource.is_empty() {
            return no_opinion("cannot get subresource");
        }
        self.related(node, kind, info)
    }

    fn read_namespaced(&self, node: &str, kind: Kind, info: &RequestInfo) -> Decision {
        if !matches!(info.verb.as_str(), "get" | "list" | "watch") {
            return no_opinion("can only read resources of this type");
        }
        if !info.subresource.is_empty() {
            return no_opinion("cannot read subresource");
        }
        if info.namespace.is_empty() {
            return no_opinion("can only read namespaced object of this type");
        }
        self.related(node, kind, info)
    }

    /// A service account of its pods (KubeletServiceAccountTokenForCredentialProviders, on in
    /// 1.34), or a token for one.
    fn service_account(&self, node: &str, info: &RequestInfo) -> Decision {
        if info.verb == "get" && info.subresource.is_empty() {
            return self.read_namespaced(node, Kind::ServiceAccount, info);
        }
        if info.verb != "create" || info.name.is_empty() {
            return no_opinion("can only create tokens for individual service accounts");
        }
        if info.subresource != "token" {
            return no_opinion("can only create token subresource of serviceaccount");
        }
        self.related(node, Kind::ServiceAccount, info)
    }

    fn resource_slice(&self, node: &str, info: &RequestInfo) -> Decision {
        if !info.subresource.is_empty() {
            return no_opinion("cannot authorize ResourceSlice subresources");
        }
        match info.verb.as_str() {
            "create" => allow(),
            "get" | "update" | "patch" | "delete" => self.related(node, Kind::ResourceSlice, info),
            "watch" | "list" | "deletecollection" => {
                if info.field_equals("spec.nodeName").as_deref() == Some(node) {
                    allow()
                } else {
                    no_opinion(
                        "can only list/watch/deletecollection resourceslices with nodeName field selector",
                    )
                }
            }
            _ => no_opinion(
                "only the following verbs are allowed for a ResourceSlice: get, watch, list, create, update, patch, delete, deletecollection",
            ),
        }
    }

    /// Pods (AuthorizeNodeWithSelectors, GA in 1.34): its own, one by one or selected by
    /// `spec.nodeName`; creating and deleting (mirror pods, NodeRestriction narrows), their status
    /// and evictions.
    fn pod(&self, node: &str, info: &RequestInfo) -> Decision {
        match (info.subresource.as_str(), info.verb.as_str()) {
            ("", "get") => self.get(node, Kind::Pod, info),
            ("", "list" | "watch") => {
                if info.field_equals("spec.nodeName").as_deref() == Some(node) {
                    allow()
                } else if !info.name.is_empty() {
                    self.related(node, Kind::Pod, info)
                } else {
                    no_opinion("can only list/watch pods with spec.nodeName field selector")
                }
            }
            ("", "create" | "delete") | ("status", "update" | "patch") | ("eviction", "create") => allow(),
            _ => no_opinion(""),
        }
    }
}

fn lease(node: &str, info: &RequestInfo) -> Decision {
    if !matches!(info.verb.as_str(), "get" | "create" | "update" | "patch" | "delete") {
        return no_opinion("can only get, create, update, patch, or delete a node lease");
    }
    if info.namespace != NODE_LEASE_NAMESPACE {
        return no_opinion(format!(
            "can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"
        ));
    }
    if info.verb != "create" && info.name != node {
        return no_opinion("can only access node lease with the same name as the requesting node");
    }
    allow()
}

fn csi_node(node: &str, info: &RequestInfo) -> Decision {
    if !matches!(info.verb.as_str(), "get" | "create" | "update" | "patch" | "delete") {
        return no_opinion("can only get, create, update, patch, or delete a CSINode");
    }
    if !info.subresource.is_empty() {
        return no_opinion("cannot authorize CSINode subresources");
    }
    if info.verb != "create" && info.name != node {
        return no_opinion("can only access CSINode with the same name as the requesting node");
    }
    allow()
}

/// Its own Node (AuthorizeNodeWithSelectors): it may create and write Nodes (NodeRestriction keeps
/// it to its own) but read only its own.
fn own_node(node: &str, info: &RequestInfo) -> Decision {
    match (info.subresource.as_str(), info.verb.as_str()) {
        ("", "create" | "update" | "patch") | ("status", "update" | "patch") => allow(),
        ("", "get" | "list" | "watch") => match info.name.as_str() {
            name if name == node => allow(),
            "" => no_opinion(format!("node '{node}' cannot read all nodes, only its own Node object")),
            other => no_opinion(format!("node '{node}' cannot read '{other}', only its own Node object")),
        },
        _ => no_opinion(""),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::request::info;

    fn node_user(name: &str) -> User {
        User::named(&format!("{NODE_USER_PREFIX}{name}"), &[NODES_GROUP]).authenticated()
    }

    fn decide(
        authorizer: &NodeAuthorizer,
        user: &User,
        method: &http::Method,
        path: &str,
        query: Option<&str>,
    ) -> Decision {
        authorizer.authorize(user, &info(method, path, query))
    }

    fn allowed(authorizer: &NodeAuthorizer, user: &User, method: &http::Method, path: &str) -> bool {
        matches!(decide(authorizer, user, method, path, None), Decision::Allow(_))
    }

    fn with_pod_on_n1() -> NodeAuthorizer {
        let authorizer = NodeAuthorizer::default();
        let pod = json!({"metadata": {"name": "web", "namespace": "ns"}, "spec": {"nodeName": "n1",
            "containers": [{"name": "c", "image": "i"}],
            "serviceAccountName": "sa",
            "volumes": [{"name": "s", "secret": {"secretName": "creds"}}]}});
        authorizer.graph.write().apply(
            Source::Pods,
            "/registry/pods/ns/web",
            Some(&serde_json::to_vec(&pod).unwrap()),
        );
        authorizer
    }

    #[test]
    fn a_node_reads_only_the_secrets_its_pods_use() {
        let authorizer = with_pod_on_n1();
        let (n1, n2) = (node_user("n1"), node_user("n2"));
        assert!(allowed(&authorizer, &n1, &http::Method::GET, "/api/v1/namespaces/ns/secrets/creds"));
        assert!(!allowed(&authorizer, &n1, &http::Method::GET, "/api/v1/namespaces/ns/secrets/other"));
        assert!(!allowed(&authorizer, &n2, &http::Method::GET, "/api/v1/namespaces/ns/secrets/creds"));
        assert!(!allowed(&authorizer, &n1, &http::Method::GET, "/api/v1/namespaces/ns/secrets"), "a list");
        let watch_one = decide(
            &authorizer,
            &n1,
            &http::Method::GET,
            "/api/v1/namespaces/ns/secrets",
            Some("watch=true&fieldSelector=metadata.name%3Dcreds"),
        );
        assert!(matches!(watch_one, Decision::Allow(_)), "{watch_one:?}");
        assert!(!allowed(&authorizer, &n1, &http::Method::DELETE, "/api/v1/namespaces/ns/secrets/creds"));
        match decide(&authorizer, &n2, &http::Method::GET, "/api/v1/namespaces/ns/secrets/creds", None) {
            Decision::NoOpinion(reason) => {
                assert_eq!(reason, "no relationship found between node 'n2' and this object");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_node_gets_tokens_only_for_its_pods_service_accounts() {
        let authorizer = with_pod_on_n1();
        let n1 = node_user("n1");
        assert!(allowed(
            &authorizer,
            &n1,
            &http::Method::POST,
            "/api/v1/namespaces/ns/serviceaccounts/sa/token"
        ));
        assert!(!allowed(
            &authorizer,
            &n1,
            &http::Method::POST,
            "/api/v1/namespaces/ns/serviceaccounts/other/token"
        ));
        assert!(allowed(&authorizer, &n1, &http::Method::GET, "/api/v1/namespaces/ns/serviceaccounts/sa"));
    }

    #[test]
    fn a_node_reads_its_own_node_and_pods_and_writes_its_lease() {
        let authorizer = with_pod_on_n1();
        let n1 = node_user("n1");
        assert!(allowed(&authorizer, &n1, &http::Method::GET, "/api/v1/nodes/n1"));
        assert!(!allowed(&authorizer, &n1, &http::Method::GET, "/api/v1/nodes/n2"));
        assert!(!allowed(&authorizer, &n1, &http::Method::GET, "/api/v1/nodes"));
        assert!(allowed(&authorizer, &n1, &http::Method::PATCH, "/api/v1/nodes/n1/status"));
        let own_pods = decide(
            &authorizer,
            &n1,
            &http::Method::GET,
            "/api/v1/pods",
            Some("fieldSelector=spec.nodeName%3Dn1"),
        );
        assert!(matches!(own_pods, Decision::Allow(_)));
        let others = decide(
            &authorizer,
            &n1,
            &http::Method::GET,
            "/api/v1/pods",
            Some("fieldSelector=spec.nodeName%3Dn2"),
        );
        assert!(matches!(others, Decision::NoOpinion(_)));
        assert!(allowed(&authorizer, &n1, &http::Method::GET, "/api/v1/namespaces/ns/pods/web"));
        assert!(allowed(
            &authorizer,
            &n1,
            &http::Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"
        ));
        assert!(!allowed(
            &authorizer,
            &n1,
            &http::Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n2"
        ));
        // From the node rules: services, and events.
        assert!(allowed(&authorizer, &n1, &http::Method::GET, "/api/v1/services"));
        assert!(allowed(&authorizer, &n1, &http::Method::POST, "/api/v1/namespaces/ns/events"));
        assert!(!allowed(&authorizer, &n1, &http::Method::GET, "/api/v1/namespaces/ns/deployments"));
    }

    #[test]
    fn only_node_users_are_its_business() {
        let authorizer = with_pod_on_n1();
        let not_in_group = User::named("system:node:n1", &[]);
        assert_eq!(
            decide(
                &authorizer,
                &not_in_group,
                &http::Method::GET,
                "/api/v1/namespaces/ns/secrets/creds",
                None
            ),
            Decision::NoOpinion(String::new())
        );
        let nameless = User::named("system:node:", &[NODES_GROUP]);
        assert_eq!(
            decide(&authorizer, &nameless, &http::Method::GET, "/api/v1/services", None),
            Decision::NoOpinion("unknown node for user \"system:node:\"".into())
        );
    }
}
