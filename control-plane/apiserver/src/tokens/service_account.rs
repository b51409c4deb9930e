//! Service account tokens: the claims a TokenRequest signs (pkg/serviceaccount's Claims in
//! 1.34, JTI and pod-node info on), and their verification as kube-apiserver's JWT authenticators
//! do it — the issuer first (a foreign issuer is not this authenticator's token), the signature
//! by any verification key (those of the header's `kid`), the audiences against the request's,
//! the times with a minute of leeway, then the live objects: the ServiceAccount by name and uid,
//! the bound Pod, Secret or Node by name and uid and not deleted more than the leeway ago. A
//! legacy token (issuer `kubernetes/serviceaccount`) must still be held by its Secret.

use std::sync::Arc;

use keel_api::resources::{self, Resource};
use serde_json::{Map, Value, json};

use super::jwt::{self, Claims, Jws, LEEWAY_SECONDS, ObjectRef};
use super::keys::{KeyError, PublicKey, SigningKey};
use super::{Authenticated, Dependency, LiveObject, LiveObjects, Refusal, Verdict};
use crate::auth::User;

/// The issuer of tokens kept in Secrets (the token controller's).
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";
/// The issuer kubeadm configures, Keel's default.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// The type of the Secrets that hold legacy tokens.
const SERVICE_ACCOUNT_TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
/// The day a legacy token was last used, on its Secret (upstream's LastUsedLabelKey).
pub const LAST_USED_LABEL: &str = "kubernetes.io/legacy-token-last-used";
/// A secret label that retires its legacy token (upstream's InvalidSinceLabelKey).
pub const INVALID_SINCE_LABEL: &str = "kubernetes.io/legacy-token-invalid-since";
/// upstream's WarnOnlyBoundTokenExpirationSeconds: a pod-bound token asked for this long is issued
/// for [`EXTENDED_EXPIRATION_SECONDS`] and warns after the time asked for.
pub const WARN_ONLY_EXPIRATION_SECONDS: i64 = 60 * 60 + 7;
pub const EXTENDED_EXPIRATION_SECONDS: i64 = 24 * 365 * 60 * 60;

pub const POD_NAME: &str = "authentication.kubernetes.io/pod-name";
pub const POD_UID: &str = "authentication.kubernetes.io/pod-uid";
pub const NODE_NAME: &str = "authentication.kubernetes.io/node-name";
pub const NODE_UID: &str = "authentication.kubernetes.io/node-uid";
pub const CREDENTIAL_ID: &str = crate::auth::CREDENTIAL_ID;

/// kube-apiserver's service account flags.
#[derive(Debug, Clone)]
pub struct ServiceAccountConfig {
    /// `--service-account-issuer`: the first issues, all are accepted.
    pub issuers: Vec<String>,
    /// `--api-audiences` (empty: the issuers).
    pub api_audiences: Vec<String>,
    /// `--service-account-signing-key-file`'s key (`None`: one made in memory when the server
    /// starts; the binary keeps one in its data dir instead).
    pub signing_key: Option<Arc<SigningKey>>,
    /// `--service-account-key-file`s' keys (empty: the signing key's public half).
    pub verification_keys: Vec<PublicKey>,
    /// `--service-account-max-token-expiration` in seconds (0: none).
    pub max_expiration_seconds: i64,
    /// `--service-account-extend-token-expiration`.
    pub extend_expiration: bool,
    /// `--service-account-jwks-uri` (default: `https://<advertised address>/openid/v1/jwks`).
    pub jwks_uri: Option<String>,
}

impl Default for ServiceAccountConfig {
    fn default() -> ServiceAccountConfig {
        ServiceAccountConfig {
            issuers: vec![DEFAULT_ISSUER.to_owned()],
            api_audiences: Vec::new(),
            signing_key: None,
            verification_keys: Vec::new(),
            max_expiration_seconds: 0,
            extend_expiration: true,
            jwks_uri: None,
        }
    }
}

/// The issuer and verifier of service account tokens, its configuration's defaults filled in.
#[derive(Debug)]
pub struct ServiceAccounts {
    pub issuers: Vec<String>,
    pub api_audiences: Vec<String>,
    pub signing_key: Arc<SigningKey>,
    pub verification_keys: Vec<PublicKey>,
    pub max_expiration_seconds: i64,
    pub extend_expiration: bool,
    pub jwks_uri: Option<String>,
}

/// What a token is bound to, as TokenRequest found it.
#[derive(Debug, Clone, Default)]
pub struct Bound {
    pub pod: Option<ObjectRef>,
    pub secret: Option<ObjectRef>,
    /// A pod's node (its uid unknown when the node is not found) or the node bound to.
    pub node: Option<ObjectRef>,
}

/// What to sign.
#[derive(Debug, Clone)]
pub struct TokenSpec<'a> {
    pub namespace: &'a str,
    pub service_account: ObjectRef,
    pub bound: Bound,
    pub audiences: &'a [String],
    pub expiration_seconds: i64,
    /// Seconds after which a token warns (0: never).
    pub warn_after_seconds: i64,
    pub now: i64,
    pub jti: String,
}

impl ServiceAccounts {
    /// The server's issuer: `config` with its defaults (a key made now when none is given).
    pub fn new(config: ServiceAccountConfig) -> Result<ServiceAccounts, KeyError> {
        let signing_key = match config.signing_key {
            Some(key) => key,
            None => Arc::new(SigningKey::generate()?.0),
        };
        let issuers =
            if config.issuers.is_empty() { vec![DEFAULT_ISSUER.to_owned()] } else { config.issuers };
        let api_audiences =
            if config.api_audiences.is_empty() { issuers.clone() } else { config.api_audiences };
        let verification_keys = if config.verification_keys.is_empty() {
            vec![signing_key.public().clone()]
        } else {
            config.verification_keys
        };
        Ok(ServiceAccounts {
            issuers,
            api_audiences,
            signing_key,
            verification_keys,
            max_expiration_seconds: config.max_expiration_seconds,
            extend_expiration: config.extend_expiration,
            jwks_uri: config.jwks_uri,
        })
    }

    /// The issuer tokens are signed as.
    pub fn issuer(&self) -> &str {
        self.issuers.first().map_or(DEFAULT_ISSUER, String::as_str)
    }

    /// The claims upstream signs, keys sorted as go-jose writes them.
    pub fn claims(&self, spec: &TokenSpec<'_>) -> Value {
        let mut kubernetes = Map::new();
        kubernetes.insert("namespace".into(), spec.namespace.into());
        kubernetes.insert(
            "serviceaccount".into(),
            jwt::reference(&spec.service_account.name, &spec.service_account.uid),
        );
        let reference = |r: &ObjectRef| jwt::reference(&r.name, &r.uid);
        if let Some(pod) = &spec.bound.pod {
            kubernetes.insert("pod".into(), reference(pod));
        }
        if let Some(secret) = &spec.bound.secret {
            kubernetes.insert("secret".into(), reference(secret));
        }
        if let Some(node) = &spec.bound.node {
            kubernetes.insert("node".into(), reference(node));
        }
        if spec.warn_after_seconds != 0 {
            kubernetes.insert("warnafter".into(), (spec.now + spec.warn_after_seconds).into());
        }
        let mut claims = json!({
            "aud": spec.audiences,
            "exp": spec.now + spec.expiration_seconds,
            "iat": spec.now,
            "iss": self.issuer(),
            "kubernetes.io": kubernetes,
            "nbf": spec.now,
            "sub": format!("system:serviceaccount:{}:{}", spec.namespace, spec.service_account.name),
        });
        if !spec.jti.is_empty() {
            claims["jti"] = spec.jti.clone().into();
        }
        claims
    }

    /// A signed token of `spec`.
    pub fn issue(&self, spec: &TokenSpec<'_>) -> Result<String, String> {
        jwt::sign(&self.signing_key, &self.claims(spec)).map_err(|e| format!("failed to generate token: {e}"))
    }

    /// A legacy token of a `kubernetes.io/service-account-token` Secret (as the token controller
    /// of kube-controller-manager signs them).
    pub fn issue_legacy(
        &self,
        namespace: &str,
        service_account: &ObjectRef,
        secret: &str,
    ) -> Result<String, String> {
        let claims = json!({
            "iss": LEGACY_ISSUER,
            "kubernetes.io/serviceaccount/namespace": namespace,
            "kubernetes.io/serviceaccount/secret.name": secret,
            "kubernetes.io/serviceaccount/service-account.name": service_account.name,
            "kubernetes.io/serviceaccount/service-account.uid": service_account.uid,
            "sub": format!("system:serviceaccount:{namespace}:{}", service_account.name),
        });
        jwt::sign(&self.signing_key, &claims).map_err(|e| format!("failed to generate token: {e}"))
    }

    /// Verifies a token asked for `requested` audiences at `now` (Unix seconds).
    pub async fn authenticate(
        &self,
        token: &str,
        requested: &[String],
        now: i64,
        objects: &dyn LiveObjects,
    ) -> Verdict {
        if token.trim_start().starts_with('{') {
            return Verdict::NotMine;
        }
        let Ok(jws) = Jws::parse(token) else { return Verdict::NotMine };
        let Ok(claims) = Claims::parse(&jws.payload) else { return Verdict::NotMine };
        let legacy = claims.iss == LEGACY_ISSUER;
        if !legacy && !self.issuers.contains(&claims.iss) {
            return Verdict::NotMine;
        }
        if let Err(reason) = jws.verify(&self.verification_keys) {
            return Verdict::Refused(Refusal::permanent(reason));
        }
        let api = &self.api_audiences;
        let token_audiences = if claims.aud.is_empty() { api } else { &claims.aud };
        let audiences: Vec<String> =
            token_audiences.iter().filter(|a| requested.contains(a)).cloned().collect();
        if audiences.is_empty() && !api.is_empty() {
            return Verdict::Refused(Refusal::permanent(format!(
                "token audiences {} is invalid for the target audiences {}",
                go_quoted(token_audiences),
                go_quoted(requested)
            )));
        }
        // upstream's audit annotations: a legacy token's subject and the kind of Secret holding
        // it; a pod-bound token used past its warnafter.
        let checked = if legacy {
            validate_legacy(token, &claims, now, objects).await.map(|(checked, secret_kind)| {
                let annotations = vec![
                    ("authentication.k8s.io/legacy-token".to_owned(), claims.sub.clone()),
                    (secret_kind.to_owned(), claims.legacy_secret_name.clone()),
                ];
                (checked, annotations)
            })
        } else {
            validate_bound(&claims, now, objects).await.map(|checked| (checked, stale(&claims, now)))
        };
        match checked {
            Ok(((user, depends_on, valid_until), annotations)) => {
                let expiry = claims.exp.map_or(i64::MAX / 2, |exp| exp + LEEWAY_SECONDS + 1);
                let valid_until_ms = valid_until.min(expiry).saturating_mul(1000);
                Verdict::Accepted(Authenticated { user, audiences, depends_on, valid_until_ms, annotations })
            }
            Err(refusal) => Verdict::Refused(refusal),
        }
    }
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn go_quoted(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

fn core(plural: &str) -> &'static Resource {
    // Every plural asked for here is a core resource of the table.
    resources::find("", "v1", plural).unwrap_or(&resources::RESOURCES[0])
}

/// A looked-up object: its entry (for the dependency) and the fields checked.
struct Found {
    dependency: Dependency,
    object: LiveObject,
}

async fn lookup(
    objects: &dyn LiveObjects,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Option<Found>, Refusal> {
    let resource = core(plural);
    let key = crate::objects::key(resource, namespace, name);
    let entry = objects.get(resource, &key).await.map_err(Refusal::new)?;
    let Some(entry) = entry else { return Ok(None) };
    let object = LiveObject::parse(&entry).map_err(Refusal::new)?;
    Ok(Some(Found { dependency: Dependency { resource, key, revision: entry.revision }, object }))
}

/// Until when an object deleted at `deleted_at` still vouches for a token, and whether that is past.
fn deletion(object: &LiveObject, now: i64) -> (i64, bool) {
    match object.deleted_at() {
        // upstream: invalid once deleted before now - leeway.
        Some(at) => (at.saturating_add(LEEWAY_SECONDS), at < now - LEEWAY_SECONDS),
        None => (i64::MAX / 2, false),
    }
}

type Checked = (User, Vec<Dependency>, i64);

/// upstream's `authentication.k8s.io/stale-token` annotation, for a token used after its warnafter.
fn stale(claims: &Claims, now: i64) -> Vec<(String, String)> {
    match claims.kubernetes.as_ref().and_then(|k| k.warnafter) {
        Some(warn_after) if warn_after != 0 && now > warn_after => vec![(
            "authentication.k8s.io/stale-token".to_owned(),
            format!("subject: {}, seconds after warning threshold: {}", claims.sub, now - warn_after),
        )],
        _ => Vec::new(),
    }
}

async fn validate_bound(claims: &Claims, now: i64, objects: &dyn LiveObjects) -> Result<Checked, Refusal> {
    claims.validate_times(now).map_err(Refusal::new)?;
    let private = claims.kubernetes.clone().unwrap_or_default();
    let namespace = private.namespace.as_str();
    let account = &private.serviceaccount;
    let invalidated = || Refusal::new("service account token has been invalidated");
    let mut depends_on = Vec::new();
    let mut valid_until = i64::MAX / 2;

    let found = lookup(objects, "serviceaccounts", Some(namespace), &account.name).await?;
    let Some(found) = found else {
        return Err(Refusal::new(format!("serviceaccounts {:?} not found", account.name)));
    };
    if found.object.metadata.uid != account.uid {
        return Err(Refusal::new(format!(
            "service account UID ({}) does not match claim ({})",
            found.object.metadata.uid, account.uid
        )));
    }
    let (until, deleted) = deletion(&found.object, now);
    if deleted {
        return Err(Refusal::new(format!("service account {namespace}/{} has been deleted", account.name)));
    }
    valid_until = valid_until.min(until);
    depends_on.push(found.dependency);

    for (plural, reference, label) in [("secrets", &private.secret, "secret"), ("pods", &private.pod, "pod")]
    {
        let Some(reference) = reference else { continue };
        let found =
            lookup(objects, plural, Some(namespace), &reference.name).await?.ok_or_else(invalidated)?;
        if found.object.metadata.uid != reference.uid {
            return Err(Refusal::new(format!(
                "{label} UID ({}) does not match service account {label} ref claim ({})",
                found.object.metadata.uid, reference.uid
            )));
        }
        let (until, deleted) = deletion(&found.object, now);
        if deleted {
            return Err(invalidated());
        }
        valid_until = valid_until.min(until);
        depends_on.push(found.dependency);
    }

    let mut user = user(namespace, &account.name, &account.uid);
    if let Some(pod) = &private.pod
        && !pod.name.is_empty()
        && !pod.uid.is_empty()
    {
        user.extra.insert(POD_NAME.into(), vec![pod.name.clone()]);
        user.extra.insert(POD_UID.into(), vec![pod.uid.clone()]);
    }
    if let Some(node) = &private.node {
        // A pod-bound token's node is information only; a node-bound token needs its node.
        if private.pod.is_none() {
            let found = lookup(objects, "nodes", None, &node.name).await?.ok_or_else(invalidated)?;
            if found.object.metadata.uid != node.uid {
                return Err(Refusal::new(format!(
                    "node UID ({}) does not match service account node ref claim ({})",
                    found.object.metadata.uid, node.uid
                )));
            }
            let (until, deleted) = deletion(&found.object, now);
            if deleted {
                return Err(invalidated());
            }
            valid_until = valid_until.min(until);
            depends_on.push(found.dependency);
        }
        if !node.name.is_empty() {
            user.extra.insert(NODE_NAME.into(), vec![node.name.clone()]);
            if !node.uid.is_empty() {
                user.extra.insert(NODE_UID.into(), vec![node.uid.clone()]);
            }
        }
    }
    if !claims.jti.is_empty() {
        user.extra.insert(CREDENTIAL_ID.into(), vec![format!("JTI={}", claims.jti)]);
    }
    Ok((user, depends_on, valid_until))
}

async fn validate_legacy(
    token: &str,
    claims: &Claims,
    now: i64,
    objects: &dyn LiveObjects,
) -> Result<(Checked, &'static str), Refusal> {
    let missing = |what: &str| Err(Refusal::permanent(format!("{what} claim is missing")));
    if claims.sub.is_empty() {
        return missing("sub");
    }
    let namespace = claims.legacy_namespace.as_str();
    let (secret_name, account, account_uid) = (
        claims.legacy_secret_name.as_str(),
        claims.legacy_service_account_name.as_str(),
        claims.legacy_service_account_uid.as_str(),
    );
    for (value, what) in [
        (namespace, "namespace"),
        (secret_name, "secretName"),
        (account, "serviceAccountName"),
        (account_uid, "serviceAccountUID"),
    ] {
        if value.is_empty() {
            return missing(what);
        }
    }
    if claims.sub != format!("system:serviceaccount:{namespace}:{account}") {
        return Err(Refusal::permanent("sub claim is invalid"));
    }
    let invalidated = || Refusal::new("Token has been invalidated");
    let secret = lookup(objects, "secrets", Some(namespace), secret_name).await?.ok_or_else(invalidated)?;
    if secret.object.deleted_at().is_some() {
        return Err(invalidated());
    }
    let held = secret.object.data("token").unwrap_or_default();
    if !constant_time_eq(&held, token.as_bytes()) {
        return Err(Refusal::new("Token does not match server's copy"));
    }
    let found = lookup(objects, "serviceaccounts", Some(namespace), account).await?;
    let Some(found) = found else {
        return Err(Refusal::new(format!("serviceaccounts {account:?} not found")));
    };
    if found.object.deleted_at().is_some() {
        return Err(Refusal::new(format!("ServiceAccount {namespace}/{account} has been deleted")));
    }
    if found.object.metadata.uid != account_uid {
        return Err(Refusal::new(format!(
            "ServiceAccount UID ({}) does not match claim ({account_uid})",
            found.object.metadata.uid
        )));
    }
    if secret.object.metadata.labels.get(INVALID_SINCE_LABEL).is_some_and(|v| !v.is_empty()) {
        return Err(Refusal::new(format!(
            "the token in secret {namespace}/{secret_name} for service account {namespace}/{account} has been marked invalid. Use tokens from the TokenRequest API or manually created secret-based tokens, or remove the '{INVALID_SINCE_LABEL}' label from the secret to temporarily allow use of this token"
        )));
    }
    // Made for the account (listed in its `secrets`, as the old token controller did) or by hand.
    let kind = if found.object.secrets.iter().any(|s| s.name == secret_name) {
        "authentication.k8s.io/legacy-token-autogenerated-secret"
    } else {
        "authentication.k8s.io/legacy-token-manual-secret"
    };
    // Once a day a use is recorded on the Secret (its next revision makes the cached result
    // checked again, which then finds today's label and writes nothing).
    let today =
        jiff::Timestamp::from_second(now).map(|t| t.strftime("%Y-%m-%d").to_string()).unwrap_or_default();
    if secret.object.secret_type == SERVICE_ACCOUNT_TOKEN_TYPE
        && !today.is_empty()
        && secret.object.metadata.labels.get(LAST_USED_LABEL) != Some(&today)
    {
        objects.legacy_token_used(namespace, secret_name, &today).await;
    }
    let checked =
        (user(namespace, account, account_uid), vec![secret.dependency, found.dependency], i64::MAX / 2);
    Ok((checked, kind))
}

/// A service account's user (`system:serviceaccount:<ns>:<name>` in its two groups).
pub fn user(namespace: &str, name: &str, uid: &str) -> User {
    User {
        name: format!("system:serviceaccount:{namespace}:{name}"),
        uid: uid.to_owned(),
        groups: vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{namespace}")],
        extra: Default::default(),
    }
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests;
