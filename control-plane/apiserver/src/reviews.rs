//! The review APIs, answered and never stored (upstream's authentication.k8s.io and
//! authorization.k8s.io registries): SelfSubjectReview (`kubectl auth whoami`), TokenReview,
//! SubjectAccessReview, LocalSubjectAccessReview, SelfSubjectAccessReview (`kubectl auth can-i`)
//! and SelfSubjectRulesReview (`kubectl auth can-i --list`).

use keel_api::status::{ApiError, FieldError};
use serde_json::{Value, json};

use crate::auth::User;
use crate::authorization::Authorizer;
use crate::rbac::{Decision, PolicyRule};
use crate::request::{RequestInfo, ResourceRequest};

/// What answering a review needs of the server.
pub struct Reviewer<'a> {
    pub authorizer: &'a Authorizer,
    /// Authenticates a bearer token as the server does (TokenReview).
    pub tokens: &'a crate::tokens::TokenAuthenticator,
}

impl std::fmt::Debug for Reviewer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reviewer").field("authorizer", &self.authorizer).finish_non_exhaustive()
    }
}

impl Reviewer<'_> {
    /// The created review with its status; `user` made the request.
    pub async fn answer(
        &self,
        user: &User,
        request: &ResourceRequest,
        mut review: Value,
    ) -> Result<Value, ApiError> {
        let resource = request.resource;
        let spec = review.get("spec").cloned().unwrap_or(Value::Null);
        let kind = resource.kind;
        let status = match resource.plural {
            "selfsubjectreviews" => json!({"userInfo": user_info(user)}),
            "tokenreviews" => self.token_review(&spec, kind).await?,
            "selfsubjectrulesreviews" => {
                let namespace = spec["namespace"].as_str().unwrap_or_default();
                self.rules_review(user, namespace)
            }
            "selfsubjectaccessreviews" => {
                let info = attributes(&spec, kind, None)?;
                self.access(user, &info)
            }
            "subjectaccessreviews" | "localsubjectaccessreviews" => {
                let namespace = request.namespace.as_deref();
                let info = attributes(&spec, kind, namespace)?;
                let subject = subject(&spec, kind)?;
                self.access(&subject, &info)
            }
            _ => return Err(ApiError::MethodNotAllowed),
        };
        if let Some(map) = review.as_object_mut() {
            map.insert("status".into(), status);
            map.insert("apiVersion".into(), resource.api_version().into());
            map.insert("kind".into(), kind.into());
            let metadata = map.entry("metadata").or_insert_with(|| json!({}));
            if let Some(metadata) = metadata.as_object_mut() {
                metadata.entry("creationTimestamp").or_insert(Value::Null);
            }
        }
        Ok(review)
    }

    fn access(&self, user: &User, info: &RequestInfo) -> Value {
        match self.authorizer.authorize(user, info) {
            Decision::Allow(reason) => with_reason(json!({"allowed": true}), reason),
            Decision::Deny(reason) => with_reason(json!({"allowed": false, "denied": true}), reason),
            Decision::NoOpinion(reason) => with_reason(json!({"allowed": false}), reason),
        }
    }

    fn rules_review(&self, user: &User, namespace: &str) -> Value {
        let (rules, incomplete) = self.authorizer.rules_for(user, namespace);
        let resource_rules: Vec<Value> = rules.resource_rules.iter().map(resource_rule).collect();
        let non_resource_rules: Vec<Value> = rules.non_resource_rules.iter().map(non_resource_rule).collect();
        let mut status = json!({
            "resourceRules": resource_rules,
            "nonResourceRules": non_resource_rules,
            "incomplete": incomplete,
        });
        if !rules.errors.is_empty() {
            status["evaluationError"] = rules.errors.join(", ").into();
        }
        status
    }

    /// TokenReview: the token authenticated as a request's would be, for `spec.audiences` (the
    /// API's audiences when none are given); the audiences it holds for in `status.audiences`.
    async fn token_review(&self, spec: &Value, kind: &str) -> Result<Value, ApiError> {
        let token = spec["token"].as_str().unwrap_or_default();
        if token.is_empty() {
            return Err(ApiError::invalid(
                "authentication.k8s.io",
                kind,
                "",
                vec![FieldError::required("spec.token", "")],
            ));
        }
        let audiences: Vec<String> = spec["audiences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        Ok(match self.tokens.authenticate(token, Some(&audiences)).await {
            Ok(authenticated) => {
                let mut status =
                    json!({"authenticated": true, "user": user_info(&authenticated.user.authenticated())});
                if !authenticated.audiences.is_empty() {
                    status["audiences"] = json!(authenticated.audiences);
                }
                status
            }
            // As kube-apiserver words it: "invalid bearer token" when no authenticator knows the
            // token, else the refusal after it.
            Err(reason) if reason == "invalid bearer token" => json!({"user": {}, "error": reason}),
            Err(reason) => json!({"user": {}, "error": format!("[invalid bearer token, {reason}]")}),
        })
    }
}

fn with_reason(mut status: Value, reason: String) -> Value {
    if !reason.is_empty() {
        status["reason"] = reason.into();
    }
    status
}

/// authentication.k8s.io UserInfo (empty fields left out, as upstream's JSON has them).
fn user_info(user: &User) -> Value {
    let mut info = json!({"username": user.name});
    if !user.uid.is_empty() {
        info["uid"] = user.uid.clone().into();
    }
    if !user.groups.is_empty() {
        info["groups"] = json!(user.groups);
    }
    if !user.extra.is_empty() {
        info["extra"] = json!(user.extra);
    }
    info
}

fn resource_rule(rule: &PolicyRule) -> Value {
    let mut value = json!({"verbs": rule.verbs});
    if !rule.api_groups.is_empty() {
        value["apiGroups"] = json!(rule.api_groups);
    }
    if !rule.resources.is_empty() {
        value["resources"] = json!(rule.resources);
    }
    if !rule.resource_names.is_empty() {
        value["resourceNames"] = json!(rule.resource_names);
    }
    value
}

fn non_resource_rule(rule: &PolicyRule) -> Value {
    json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls})
}

fn invalid(kind: &str, causes: Vec<FieldError>) -> ApiError {
    ApiError::invalid("authorization.k8s.io", kind, "", causes)
}

/// The request a review asks about: `spec.resourceAttributes` or `spec.nonResourceAttributes`
/// (exactly one), validated as upstream's ValidateSubjectAccessReviewSpec; a LocalSubjectAccessReview
/// asks only about its own `namespace`.
fn attributes(spec: &Value, kind: &str, namespace: Option<&str>) -> Result<RequestInfo, ApiError> {
    let text = |value: &Value, field: &str| value[field].as_str().unwrap_or_default().to_owned();
    let (resource, non_resource) = (&spec["resourceAttributes"], &spec["nonResourceAttributes"]);
    match (resource.is_object(), non_resource.is_object()) {
        (true, true) => {
            return Err(invalid(
                kind,
                vec![FieldError::invalid(
                    "spec.nonResourceAttributes",
                    non_resource,
                    "cannot be specified in combination with resourceAttributes",
                )],
            ));
        }
        (false, false) => {
            return Err(invalid(
                kind,
                vec![FieldError::required(
                    "spec.resourceAttributes",
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                )],
            ));
        }
        (false, true) => {
            return Ok(RequestInfo {
                is_resource_request: false,
                path: text(non_resource, "path"),
                verb: text(non_resource, "verb"),
                ..RequestInfo::default()
            });
        }
        (true, false) => {}
    }
    let info = RequestInfo {
        is_resource_request: true,
        verb: text(resource, "verb"),
        api_group: text(resource, "group"),
        api_version: text(resource, "version"),
        namespace: text(resource, "namespace"),
        resource: text(resource, "resource"),
        subresource: text(resource, "subresource"),
        name: text(resource, "name"),
        field_selector: field_selector(&resource["fieldSelector"]),
        ..RequestInfo::default()
    };
    if let Some(namespace) = namespace
        && info.namespace != namespace
    {
        return Err(ApiError::BadRequest(format!(
            "spec.resourceAttributes.namespace must match namespace: {namespace}"
        )));
    }
    Ok(info)
}

/// A SubjectAccessReview's `resourceAttributes.fieldSelector` as a selector: its `rawSelector`, else
/// its `requirements` that ask a field to be one value (`In` with one value, upstream's Equals).
fn field_selector(selector: &Value) -> String {
    if let Some(raw) = selector["rawSelector"].as_str() {
        return raw.to_owned();
    }
    let requirements = selector["requirements"].as_array().into_iter().flatten();
    let equal = requirements.filter_map(|r| {
        let values = r["values"].as_array()?;
        match (r["operator"].as_str(), values.as_slice()) {
            (Some("In"), [value]) => Some(format!("{}={}", r["key"].as_str()?, value.as_str()?)),
            _ => None,
        }
    });
    equal.collect::<Vec<_>>().join(",")
}

/// Whom a SubjectAccessReview asks about: `spec.user`, `groups`, `uid`, `extra` (a user or a
/// group is required).
fn subject(spec: &Value, kind: &str) -> Result<User, ApiError> {
    let user = User::from_spec(spec, "user");
    if user.name.is_empty() && user.groups.is_empty() {
        return Err(invalid(
            kind,
            vec![FieldError::invalid(
                "spec.user",
                &json!(""),
                "at least one of user or group must be specified",
            )],
        ));
    }
    Ok(user)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::authorization::Mode;

    fn request(plural: &str, namespace: Option<&str>) -> ResourceRequest {
        let group = if plural.contains("access") || plural.contains("rules") {
            "authorization.k8s.io"
        } else {
            "authentication.k8s.io"
        };
        ResourceRequest {
            resource: keel_api::resources::find(group, "v1", plural).unwrap(),
            namespace: namespace.map(str::to_owned),
            name: None,
            subresource: None,
            verb: crate::request::Verb::Create,
        }
    }

    #[tokio::test]
    async fn reviews_answer_for_their_subject() {
        let authorizer = Authorizer::new(vec![Mode::Rbac], Arc::default());
        let tokens = crate::tokens::TokenAuthenticator::for_tests(crate::auth::Tokens::default());
        let reviewer = Reviewer { authorizer: &authorizer, tokens: &tokens };
        let admin = User::named("kubernetes-admin", &["system:masters", "system:authenticated"]);
        let alice = User::named("alice", &["system:authenticated"]);
        let whoami = reviewer.answer(&alice, &request("selfsubjectreviews", None), json!({})).await.unwrap();
        assert_eq!(
            whoami["status"]["userInfo"],
            json!({"username": "alice", "groups": ["system:authenticated"]})
        );
        let can_i =
            json!({"spec": {"resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "a"}}});
        let answer = async |user: &User, review: &Value| {
            reviewer.answer(user, &request("selfsubjectaccessreviews", None), review.clone()).await.unwrap()["status"]
                ["allowed"]
                .clone()
        };
        assert_eq!((answer(&admin, &can_i).await, answer(&alice, &can_i).await), (json!(true), json!(false)));
        let sar = json!({"spec": {"user": "kubernetes-admin", "groups": ["system:masters"],
                                  "nonResourceAttributes": {"verb": "get", "path": "/metrics"}}});
        let answered = reviewer.answer(&alice, &request("subjectaccessreviews", None), sar).await.unwrap();
        assert_eq!(answered["status"]["allowed"], true);
        let both = json!({"spec": {"user": "a", "resourceAttributes": {}, "nonResourceAttributes": {}}});
        assert_eq!(
            reviewer.answer(&alice, &request("subjectaccessreviews", None), both).await.unwrap_err().code(),
            422
        );
        let nobody = json!({"spec": {"resourceAttributes": {"verb": "get"}}});
        assert_eq!(
            reviewer.answer(&alice, &request("subjectaccessreviews", None), nobody).await.unwrap_err().code(),
            422
        );
        let elsewhere =
            json!({"spec": {"user": "a", "resourceAttributes": {"namespace": "b", "verb": "get"}}});
        let error = reviewer
            .answer(&alice, &request("localsubjectaccessreviews", Some("a")), elsewhere)
            .await
            .unwrap_err();
        assert_eq!(error.code(), 400);
        let rules = reviewer
            .answer(&admin, &request("selfsubjectrulesreviews", None), json!({"spec": {"namespace": "a"}}))
            .await
            .unwrap();
        assert_eq!(
            rules["status"]["resourceRules"][0],
            json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})
        );
        let error =
            reviewer.answer(&alice, &request("tokenreviews", None), json!({"spec": {}})).await.unwrap_err();
        assert_eq!(error.code(), 422);
    }
}
