//! The request path as upstream's handler chain (DefaultBuildHandlerChain), one step per filter,
//! over one reading of the request ([`crate::request::info`]): authentication
//! (WithAuthentication: client certificate, bearer token, else anonymous), auditing (WithAudit:
//! [`crate::audit`], around everything after authentication), impersonation, the in-flight limits
//! (WithMaxInFlightLimit), authorization (WithAuthorization), and the timeout of the handler
//! (WithTimeoutForNonLongRunningRequests). Each step either passes the request on or answers it.

use std::sync::Arc;

use http::HeaderMap;
use keel_api::status::ApiError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::User;
use crate::authorization::Authorizer;
use crate::rbac::Decision;
use crate::request::RequestInfo;
use crate::tokens::TokenAuthenticator;

/// WithAuthentication: the certificate's user, else the bearer token's (the token file, service
/// account tokens, bootstrap tokens: [`TokenAuthenticator`]); a token that names no one is a 401
/// (as upstream's bearer authenticator fails rather than falls through); no credentials at all is
/// system:anonymous when anonymous requests are allowed, else a 401. With the user, the audit
/// annotations its authenticator added (a legacy service account token's).
pub async fn authenticate(
    headers: &HeaderMap,
    certificate_user: Option<User>,
    tokens: &TokenAuthenticator,
    anonymous: bool,
) -> Result<(User, Vec<(String, String)>), ApiError> {
    if let Some(user) = certificate_user {
        return Ok((user.authenticated(), Vec::new()));
    }
    let authorization = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if let Some(token) = authorization.and_then(crate::auth::bearer_token) {
        return match tokens.authenticate(token, None).await {
            Ok(authenticated) => Ok((authenticated.user.authenticated(), authenticated.annotations)),
            Err(reason) => {
                tracing::debug!(%reason, "bearer token refused");
                Err(ApiError::Unauthorized)
            }
        };
    }
    if anonymous { Ok((User::anonymous(), Vec::new())) } else { Err(ApiError::Unauthorized) }
}

/// One thing a request asks to act as, and the attributes authorizing it (`impersonate` on users,
/// groups, serviceaccounts, uids or userextras/<key>).
fn acting_as(resource: &str, name: &str, namespace: &str, subresource: &str) -> RequestInfo {
    let group = if matches!(resource, "uids" | "userextras") { "authentication.k8s.io" } else { "" };
    RequestInfo {
        is_resource_request: true,
        verb: "impersonate".into(),
        api_group: group.into(),
        api_version: if group.is_empty() { String::new() } else { "v1".into() },
        namespace: namespace.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        name: name.into(),
        ..RequestInfo::default()
    }
}

/// WithImpersonation: with `Impersonate-User` (and optionally `-Group`, `-Uid`, `-Extra-<key>`),
/// the request acts as that user, each part authorized for the requestor as upstream does;
/// without them it is the requestor's.
pub fn impersonate(headers: &HeaderMap, requestor: User, authorizer: &Authorizer) -> Result<User, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).map(str::to_owned).collect()
    };
    let user_header = values("impersonate-user").into_iter().next().filter(|u| !u.is_empty());
    let group_headers = values("impersonate-group");
    let uid = values("impersonate-uid").into_iter().next().filter(|u| !u.is_empty());
    let mut extras: Vec<(String, String)> = Vec::new();
    for name in headers.keys() {
        if let Some(key) = name.as_str().strip_prefix("impersonate-extra-") {
            let key = crate::handlers::percent_decode(key);
            extras.extend(values(name.as_str()).into_iter().map(|v| (key.clone(), v)));
        }
    }
    let Some(requested) = user_header else {
        if group_headers.is_empty() && uid.is_none() && extras.is_empty() {
            return Ok(requestor);
        }
        return Err(ApiError::Internal(
            "requested impersonation of groups, a uid or extra without impersonating a user".into(),
        ));
    };
    let mut checks = Vec::new();
    let mut user = User::default();
    let groups_given = !group_headers.is_empty();
    match requested.strip_prefix("system:serviceaccount:").and_then(|rest| rest.split_once(':')) {
        Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() && !name.contains(':') => {
            checks.push(acting_as("serviceaccounts", name, namespace, ""));
            if !groups_given {
                user.groups =
                    vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{namespace}")];
            }
        }
        _ => checks.push(acting_as("users", &requested, "", "")),
    }
    user.name = requested;
    for group in group_headers {
        checks.push(acting_as("groups", &group, "", ""));
        user.groups.push(group);
    }
    for (key, value) in extras {
        checks.push(acting_as("userextras", &value, "", &key));
        user.extra.entry(key).or_default().push(value);
    }
    if let Some(uid) = uid {
        checks.push(acting_as("uids", &uid, "", ""));
        user.uid = uid;
    }
    for check in &checks {
        authorize(authorizer, &requestor, check)?;
    }
    // As upstream: an impersonated user is in system:authenticated unless the groups say
    // otherwise; system:anonymous is in system:unauthenticated.
    let (anonymous, authenticated, unauthenticated) = (
        user.name == crate::auth::ANONYMOUS,
        crate::auth::ALL_AUTHENTICATED,
        crate::auth::ALL_UNAUTHENTICATED,
    );
    if !anonymous && !user.groups.iter().any(|g| g == authenticated || g == unauthenticated) {
        user.groups.push(authenticated.into());
    } else if anonymous && !user.groups.iter().any(|g| g == unauthenticated) {
        user.groups.push(unauthenticated.into());
    }
    Ok(user)
}

/// WithAuthorization: allowed, or Forbidden with upstream's message; the decision and the
/// authorizer's reason go into the request's audit event
/// (`authorization.k8s.io/decision: allow|forbid`, `authorization.k8s.io/reason`).
pub fn authorize_request(
    authorizer: &Authorizer,
    user: &User,
    info: &RequestInfo,
    audit: &crate::audit::Record,
) -> Result<(), ApiError> {
    let (decision, reason) = match authorizer.authorize(user, info) {
        Decision::Allow(reason) => ("allow", reason),
        Decision::Deny(reason) | Decision::NoOpinion(reason) => ("forbid", reason),
    };
    audit.annotate(crate::audit::DECISION_ANNOTATION, decision);
    audit.annotate(crate::audit::REASON_ANNOTATION, &reason);
    if decision == "allow" { Ok(()) } else { Err(Authorizer::forbidden(user, info, &reason)) }
}

/// One authorization check (impersonation's, for each part it asks to act as): allowed, or
/// Forbidden with upstream's message.
pub fn authorize(authorizer: &Authorizer, user: &User, info: &RequestInfo) -> Result<(), ApiError> {
    match authorizer.authorize(user, info) {
        Decision::Allow(_) => Ok(()),
        Decision::Deny(reason) | Decision::NoOpinion(reason) => {
            Err(Authorizer::forbidden(user, info, &reason))
        }
    }
}

/// The two in-flight limits (reads, writes): `None` is no limit.
#[derive(Debug)]
pub struct InFlight {
    reads: Option<Arc<Semaphore>>,
    writes: Option<Arc<Semaphore>>,
}

impl InFlight {
    pub fn new(limits: &crate::Limits) -> InFlight {
        let semaphore = |limit: usize| (limit > 0).then(|| Arc::new(Semaphore::new(limit)));
        InFlight {
            reads: semaphore(limits.max_requests_inflight),
            writes: semaphore(limits.max_mutating_requests_inflight),
        }
    }

    /// WithMaxInFlightLimit: a permit held while the request is served (long-running requests are
    /// not counted); none left is upstream's 429.
    pub fn admit(&self, info: &RequestInfo) -> Result<Option<OwnedSemaphorePermit>, ApiError> {
        if info.is_long_running() {
            return Ok(None);
        }
        let limit = if info.is_read_only() { &self.reads } else { &self.writes };
        match limit.as_ref().map(|s| s.clone().try_acquire_owned()) {
            None => Ok(None),
            Some(Ok(permit)) => Ok(Some(permit)),
            Some(Err(_)) => Err(ApiError::TooManyRequests {
                message: "Too many requests, please try again later.".into(),
                retry_after_seconds: 1,
                causes: Vec::new(),
            }),
        }
    }
}

/// WithTimeoutForNonLongRunningRequests: the handler's answer, or upstream's 504 when it takes
/// longer than `timeout` (long-running requests are not timed out).
pub async fn within_timeout<T>(
    info: &RequestInfo,
    timeout: std::time::Duration,
    handler: impl Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    if info.is_long_running() {
        return handler.await;
    }
    tokio::time::timeout(timeout, handler).await.unwrap_or_else(|_| {
        Err(ApiError::Timeout(
            "request did not complete within requested timeout - context deadline exceeded".into(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Tokens;

    #[test]
    fn impersonation_is_authorized_part_by_part() {
        let authorizer = Authorizer::new(vec![crate::authorization::Mode::Rbac], Arc::default());
        let admin = User::named("kubernetes-admin", &["system:masters", "system:authenticated"]);
        let alice = User::named("alice", &["system:authenticated"]);
        let mut headers = HeaderMap::new();
        assert_eq!(impersonate(&headers, alice.clone(), &authorizer).unwrap(), alice);
        headers.insert("impersonate-group", "dev".parse().unwrap());
        assert_eq!(
            impersonate(&headers, admin.clone(), &authorizer).unwrap_err().code(),
            500,
            "a group needs a user"
        );
        headers.insert("impersonate-user", "system:serviceaccount:ns:robot".parse().unwrap());
        headers.insert("impersonate-extra-scopes%2Fv1", "read".parse().unwrap());
        let robot = impersonate(&headers, admin, &authorizer).unwrap();
        assert_eq!(robot.name, "system:serviceaccount:ns:robot");
        assert_eq!(robot.groups, ["dev", "system:authenticated"]);
        assert_eq!(robot.extra["scopes/v1"], ["read"]);
        let error = impersonate(&headers, alice, &authorizer).unwrap_err();
        assert_eq!(
            error.to_string(),
            r#"serviceaccounts "robot" is forbidden: User "alice" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "ns""#
        );
        let mut anonymous = HeaderMap::new();
        anonymous.insert("impersonate-user", "system:anonymous".parse().unwrap());
        let root = User::named("root", &["system:masters"]);
        assert_eq!(impersonate(&anonymous, root, &authorizer).unwrap().groups, ["system:unauthenticated"]);
    }

    #[tokio::test]
    async fn authentication_steps() {
        let tokens = crate::tokens::TokenAuthenticator::for_tests(Tokens::parse("abc,alice,1\n").unwrap());
        let mut headers = HeaderMap::new();
        let (anonymous, _) = authenticate(&headers, None, &tokens, true).await.unwrap();
        assert_eq!(
            (anonymous.name.as_str(), anonymous.groups.as_slice()),
            ("system:anonymous", &["system:unauthenticated".to_owned()][..])
        );
        assert_eq!(authenticate(&headers, None, &tokens, false).await, Err(ApiError::Unauthorized));
        headers.insert(http::header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        let (alice, _) = authenticate(&headers, None, &tokens, true).await.unwrap();
        assert_eq!(alice.groups, ["system:authenticated"]);
        headers.insert(http::header::AUTHORIZATION, "Bearer nope".parse().unwrap());
        assert_eq!(
            authenticate(&headers, None, &tokens, true).await,
            Err(ApiError::Unauthorized),
            "a bad token is no anonymous request"
        );
        headers.insert(http::header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(authenticate(&headers, None, &tokens, true).await.unwrap().0.name, "system:anonymous");
        let admin = User::named("kubernetes-admin", &["system:masters"]);
        assert_eq!(
            authenticate(&headers, Some(admin), &tokens, true).await.unwrap().0.groups,
            ["system:masters", "system:authenticated"]
        );
    }
}
