//! Authorization, as kube-apiserver's union authorizer: system:masters may do anything, then each
//! `--authorization-mode` in order decides or passes (no opinion) to the next; a request no mode
//! allows is refused with upstream's Forbidden message and the reasons the modes gave.

use std::sync::Arc;

use keel_api::status::{ApiError, GroupResource};

use crate::auth::{SYSTEM_PRIVILEGED_GROUP, User};
use crate::node_authorizer::{NodeAuthorizer, node_identity};
use crate::rbac::{Decision, Rbac, UserRules};
use crate::request::RequestInfo;

/// One `--authorization-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    AlwaysAllow,
    AlwaysDeny,
    Node,
    Rbac,
}

impl Mode {
    /// kube-apiserver's `--authorization-mode` list (`Node`, `RBAC`, `AlwaysAllow`, `AlwaysDeny`).
    pub fn parse_list(text: &str) -> Result<Vec<Mode>, String> {
        let mut modes = Vec::new();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let mode = match name {
                "AlwaysAllow" => Mode::AlwaysAllow,
                "AlwaysDeny" => Mode::AlwaysDeny,
                "Node" => Mode::Node,
                "RBAC" => Mode::Rbac,
                other => {
                    return Err(format!(
                        "authorization-mode {other:?} is not supported: supported modes are AlwaysAllow, AlwaysDeny, Node, RBAC"
                    ));
                }
            };
            if modes.contains(&mode) {
                return Err(format!("authorization-mode {name:?} is given more than once"));
            }
            modes.push(mode);
        }
        if modes.is_empty() {
            return Err("at least one authorization-mode must be given".into());
        }
        Ok(modes)
    }
}

/// The authorizers of one server.
#[derive(Debug)]
pub struct Authorizer {
    modes: Vec<Mode>,
    rbac: Arc<Rbac>,
    node: NodeAuthorizer,
}

impl Authorizer {
    pub fn new(modes: Vec<Mode>, rbac: Arc<Rbac>) -> Authorizer {
        Authorizer { modes, rbac, node: NodeAuthorizer::default() }
    }

    /// The Node authorizer, when it is one of the modes (its graph then follows the cache).
    pub fn node(&self) -> Option<&NodeAuthorizer> {
        self.modes.contains(&Mode::Node).then_some(&self.node)
    }

    pub fn rbac(&self) -> &Arc<Rbac> {
        &self.rbac
    }

    /// Whether RBAC is one of the modes (its objects then matter to decisions).
    pub fn uses_rbac(&self) -> bool {
        self.modes.contains(&Mode::Rbac)
    }

    /// The union's decision; reasons of the modes that had no opinion, joined as upstream does.
    pub fn authorize(&self, user: &User, info: &RequestInfo) -> Decision {
        if user.groups.iter().any(|g| g == SYSTEM_PRIVILEGED_GROUP) {
            return Decision::Allow(String::new());
        }
        let mut reasons = Vec::new();
        for mode in &self.modes {
            let decision = match mode {
                Mode::AlwaysAllow => Decision::Allow(String::new()),
                Mode::AlwaysDeny => Decision::Deny("Everything is forbidden.".into()),
                Mode::Node => self.node.authorize(user, info),
                Mode::Rbac => self.rbac.policy().authorize(user, info),
            };
            match decision {
                Decision::NoOpinion(reason) => {
                    if !reason.is_empty() {
                        reasons.push(reason);
                    }
                }
                decided => return decided,
            }
        }
        Decision::NoOpinion(reasons.join("\n"))
    }

    pub fn allows(&self, user: &User, info: &RequestInfo) -> bool {
        matches!(self.authorize(user, info), Decision::Allow(_))
    }

    /// The union's RulesFor (SelfSubjectRulesReview): what each mode can list.
    pub fn rules_for(&self, user: &User, namespace: &str) -> (UserRules, bool) {
        let mut rules = UserRules::default();
        let mut incomplete = false;
        if user.groups.iter().any(|g| g == SYSTEM_PRIVILEGED_GROUP) {
            grant_everything(&mut rules);
        }
        for mode in &self.modes {
            match mode {
                Mode::Rbac => {
                    let found = self.rbac.policy().rules_for(user, namespace);
                    incomplete |= !found.errors.is_empty();
                    rules.resource_rules.extend(found.resource_rules);
                    rules.non_resource_rules.extend(found.non_resource_rules);
                    rules.errors.extend(found.errors);
                }
                Mode::AlwaysAllow => {
                    grant_everything(&mut rules);
                }
                Mode::AlwaysDeny => {}
                Mode::Node => {
                    if node_identity(user).is_some() {
                        incomplete = true;
                        rules.errors.push("node authorizer does not support user rule resolution".into());
                    }
                }
            }
        }
        (rules, incomplete)
    }

    /// The refusal of a request no mode allowed: upstream's responsewriters.Forbidden.
    pub fn forbidden(user: &User, info: &RequestInfo, reason: &str) -> ApiError {
        let mut detail = if !info.is_resource_request {
            format!("User {:?} cannot {} path {:?}", user.name, info.verb, info.path)
        } else {
            let resource = if info.subresource.is_empty() {
                info.resource.clone()
            } else {
                format!("{}/{}", info.resource, info.subresource)
            };
            if info.namespace.is_empty() {
                format!(
                    "User {:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
                    user.name, info.verb, info.api_group
                )
            } else {
                format!(
                    "User {:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
                    user.name, info.verb, info.api_group, info.namespace
                )
            }
        };
        if !reason.is_empty() {
            detail = format!("{detail}: {reason}");
        }
        ApiError::Forbidden {
            resource: GroupResource::new(&info.api_group, &info.resource),
            name: info.name.clone(),
            detail,
        }
    }
}

/// The rules of a subject allowed everything (system:masters, AlwaysAllow), as upstream lists them.
fn grant_everything(rules: &mut UserRules) {
    let all = || vec!["*".to_owned()];
    rules.resource_rules.push(crate::rbac::PolicyRule {
        verbs: all(),
        api_groups: all(),
        resources: all(),
        ..Default::default()
    });
    rules.non_resource_rules.push(crate::rbac::PolicyRule {
        verbs: all(),
        non_resource_urls: all(),
        ..Default::default()
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::info;

    #[test]
    fn modes_and_messages() {
        assert_eq!(Mode::parse_list("RBAC,AlwaysAllow").unwrap(), [Mode::Rbac, Mode::AlwaysAllow]);
        assert!(Mode::parse_list("RBAC,RBAC").is_err());
        assert!(Mode::parse_list("ABAC").unwrap_err().contains("not supported"));
        assert!(Mode::parse_list("").is_err());
        let authorizer = Authorizer::new(vec![Mode::Rbac], Arc::default());
        let alice = User::named("alice", &["system:authenticated"]);
        let list = info(&http::Method::GET, "/api/v1/namespaces/default/pods", None);
        assert!(!authorizer.allows(&alice, &list));
        assert!(authorizer.allows(&User::named("root", &["system:masters"]), &list));
        let error = Authorizer::forbidden(&alice, &list, "");
        assert_eq!(
            error.to_string(),
            r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "default""#
        );
        let get = info(&http::Method::GET, "/apis/apps/v1/namespaces/a/deployments/web/scale", None);
        assert_eq!(
            Authorizer::forbidden(&alice, &get, "").to_string(),
            r#"deployments.apps "web" is forbidden: User "alice" cannot get resource "deployments/scale" in API group "apps" in the namespace "a""#
        );
        let path = info(&http::Method::GET, "/api", None);
        assert_eq!(
            Authorizer::forbidden(&User::anonymous(), &path, "").to_string(),
            r#"forbidden: User "system:anonymous" cannot get path "/api""#
        );
        let nodes = info(&http::Method::GET, "/api/v1/nodes", None);
        assert_eq!(
            Authorizer::forbidden(&alice, &nodes, "").to_string(),
            r#"nodes is forbidden: User "alice" cannot list resource "nodes" in API group "" at the cluster scope"#
        );
    }
}
