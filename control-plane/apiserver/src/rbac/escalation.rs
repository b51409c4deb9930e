//! Privilege escalation prevention, as upstream's RBAC registry: a Role or ClusterRole is written
//! only by a user who holds every rule it grants (or may `escalate` it), a binding only by a user
//! who holds its role's rules (or may `bind` it); system:masters may do either.

use keel_api::status::{ApiError, GroupResource};
use serde_json::Value;

use super::rules::{self, PolicyRule};
use super::{Decision, Policy};
use crate::auth::{SYSTEM_PRIVILEGED_GROUP, User};
use crate::request::RequestInfo;

const GROUP: &str = "rbac.authorization.k8s.io";

/// Whether `resource` (a plural of rbac.authorization.k8s.io) is one this check guards.
pub fn guards(group: &str, plural: &str) -> bool {
    group == GROUP && matches!(plural, "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings")
}

/// What a write of `object` (a Role, ClusterRole, RoleBinding or ClusterRoleBinding in
/// `namespace`, `""` for the cluster-scoped ones) asks of its writer, checked against the policy:
/// `allowed` answers whether `user` may do `verb` on a role (the full authorizer, so `escalate`
/// and `bind` may come from any authorizer).
pub fn check(
    policy: &Policy,
    user: &User,
    plural: &str,
    namespace: &str,
    object: &Value,
    allowed: impl Fn(&RequestInfo) -> bool,
) -> Result<(), ApiError> {
    if user.groups.iter().any(|g| g == SYSTEM_PRIVILEGED_GROUP) {
        return Ok(());
    }
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let forbidden = |detail: String| ApiError::Forbidden {
        resource: GroupResource::new(GROUP, plural),
        name: name.to_owned(),
        detail,
    };
    let attempt = |verb: &str, role_plural: &str, role_name: &str| RequestInfo {
        is_resource_request: true,
        verb: verb.to_owned(),
        api_group: GROUP.to_owned(),
        api_version: "v1".to_owned(),
        namespace: namespace.to_owned(),
        resource: role_plural.to_owned(),
        name: role_name.to_owned(),
        ..RequestInfo::default()
    };
    let wanted: Vec<PolicyRule> = match plural {
        "roles" | "clusterroles" => {
            if allowed(&attempt("escalate", plural, name)) {
                return Ok(());
            }
            object["rules"].as_array().into_iter().flatten().map(PolicyRule::from_json).collect()
        }
        _ => {
            let role_ref = &object["roleRef"];
            let (kind, role) = (
                role_ref["kind"].as_str().unwrap_or_default(),
                role_ref["name"].as_str().unwrap_or_default(),
            );
            let role_plural = if kind == "ClusterRole" { "clusterroles" } else { "roles" };
            let mut bind = attempt("bind", role_plural, role);
            if kind == "ClusterRole" && plural == "clusterrolebindings" {
                bind.namespace.clear();
            }
            if allowed(&bind) {
                return Ok(());
            }
            match policy.role_rules(kind, namespace, role) {
                Some(rules) => rules.to_vec(),
                None => {
                    let what = if kind == "ClusterRole" { "clusterrole" } else { "role" };
                    return Err(ApiError::not_found(GROUP, &format!("{what}s"), role));
                }
            }
        }
    };
    let held = policy.rules_for(user, namespace);
    let owner: Vec<PolicyRule> = held.resource_rules.into_iter().chain(held.non_resource_rules).collect();
    let missing = rules::uncovered(&owner, &wanted);
    if missing.is_empty() {
        return Ok(());
    }
    let mut lines: Vec<String> = rules::compact(missing).iter().map(PolicyRule::compact_string).collect();
    lines.sort();
    lines.dedup();
    let groups: Vec<String> = user.groups.iter().map(|g| format!("{g:?}")).collect();
    let mut detail = format!(
        "user {:?} (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        groups.join(" "),
        lines.join("\n")
    );
    if !held.errors.is_empty() {
        detail.push_str(&format!("; resolution errors: [{}]", held.errors.join(" ")));
    }
    Err(forbidden(detail))
}

/// An authorizer's answer as a yes or no.
pub fn is_allowed(decision: &Decision) -> bool {
    matches!(decision, Decision::Allow(_))
}

impl crate::handlers::Handlers {
    /// The escalation check of a write of `object` to `request`'s resource, when it is one of
    /// RBAC's (run on the object as it will be stored: after defaulting, merging or patching).
    pub(crate) fn check_escalation(
        &self,
        ctx: &crate::context::Context,
        request: &crate::request::ResourceRequest,
        object: &Value,
    ) -> Result<(), ApiError> {
        let resource = request.resource;
        if !guards(resource.group, resource.plural) {
            return Ok(());
        }
        let namespace = request.namespace.as_deref().unwrap_or_default();
        let policy = self.authorizer.rbac().policy();
        check(&policy, &ctx.user, resource.plural, namespace, object, |info| {
            self.authorizer.allows(&ctx.user, info)
        })
    }
}
