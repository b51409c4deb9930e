//! Bearer tokens beyond the token file: service account tokens (bound JWTs issued by TokenRequest,
//! and legacy ones kept in `kubernetes.io/service-account-token` Secrets) and bootstrap tokens —
//! upstream's token authenticators in their union order (token file, service accounts, bootstrap),
//! behind one cache ([`cache`]).
//!
//! - [`keys`]: signing and verification keys (`--service-account-signing-key-file`,
//!   `--service-account-key-file`, or a key made in the data dir).
//! - [`jwt`]: compact JWS and the claims.
//! - [`service_account`]: issuing (the claims TokenRequest puts in a token) and verifying
//!   (signature, issuer, audiences, times, then the live objects: the ServiceAccount and the
//!   Pod, Secret or Node the token is bound to, read from the watch cache).
//! - [`bootstrap`]: `<id>.<secret>` against `kube-system/bootstrap-token-<id>`.
//! - [`request`]: `serviceaccounts/<name>/token` (TokenRequest).
//! - [`oidc`]: `/.well-known/openid-configuration` and `/openid/v1/jwks`.

pub mod bootstrap;
pub mod cache;
pub mod jwt;
pub mod keys;
pub mod oidc;
pub mod request;
pub mod service_account;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use keel_api::resources::{self, Resource};
use serde::Deserialize;

use crate::auth::{Tokens, User};
use crate::cache::Entry;

pub use service_account::ServiceAccountConfig;

/// Where the authenticators read the objects tokens name: the watch cache, else the store (as
/// upstream's getter reads its informers, else the API).
pub trait LiveObjects: Send + Sync + std::fmt::Debug {
    /// The object stored at `key` (of `resource`), `None` when there is none.
    fn get<'a>(
        &'a self,
        resource: &'static Resource,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<Entry>>, String>>;

    /// Labels the `kubernetes.io/service-account-token` Secret `namespace/name` with the day
    /// (`YYYY-MM-DD`, UTC) its legacy token was used, as upstream's legacy token validator does
    /// when the label says another day. A failure is logged, not the request's.
    fn legacy_token_used<'a>(&'a self, namespace: &'a str, name: &'a str, day: &'a str) -> BoxFuture<'a, ()> {
        let _ = (namespace, name, day);
        Box::pin(async {})
    }
}

/// The server's objects: the watch cache's, else (not in the cache yet, or the cache not serving)
/// the store's.
impl LiveObjects for crate::handlers::Handlers {
    fn get<'a>(
        &'a self,
        resource: &'static Resource,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<Entry>>, String>> {
        Box::pin(async move {
            if let Some(Some(entry)) = self.cache.of(resource).and_then(|cache| cache.get(key)) {
                return Ok(Some(entry));
            }
            match self.store.get(key).await {
                Ok(Some(kv)) => Ok(Some(Entry::new(kv.key, kv.value, kv.mod_revision))),
                Ok(None) => Ok(None),
                Err(error) => Err(format!("reading {key}: {error}")),
            }
        })
    }

    fn legacy_token_used<'a>(&'a self, namespace: &'a str, name: &'a str, day: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(resource) = resources::find("", "v1", "secrets") else { return };
            let request = crate::request::ResourceRequest {
                resource,
                namespace: Some(namespace.to_owned()),
                name: Some(name.to_owned()),
                subresource: None,
                verb: crate::request::Verb::Patch,
            };
            // upstream writes through its loopback client: the manager is kube-apiserver.
            let ctx = crate::context::Context::internal("kube-apiserver");
            let patch = crate::handlers::PatchBody::Merge(
                serde_json::json!({"metadata": {"labels": {service_account::LAST_USED_LABEL: day}}}),
            );
            if let Err(error) = self.patch(&ctx, &request, name, &patch, false).await {
                tracing::error!(
                    "Failed to label legacy service account token secret with last-used date: {error}"
                );
            }
        })
    }
}

/// An object a successful authentication relied on, at the revision it was checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    pub resource: &'static Resource,
    pub key: String,
    pub revision: i64,
}

/// A token's user, the audiences it was accepted for, and what keeps it valid.
#[derive(Debug, Clone)]
pub struct Authenticated {
    pub user: User,
    /// The audiences the token was accepted for (TokenReview's `status.audiences`).
    pub audiences: Vec<String>,
    /// The objects that must stay as they were for the result to hold.
    pub depends_on: Vec<Dependency>,
    /// Until when (Unix milliseconds) the result holds even if nothing changes (the token's
    /// expiry, a bound object's deletion plus the leeway, a bootstrap token's expiration).
    pub valid_until_ms: i64,
    /// The audit annotations the authenticator adds (a legacy token's, a stale token's), kept with
    /// the cached result as upstream's cached authenticator keeps them.
    pub annotations: Vec<(String, String)>,
}

/// Why a token was refused; `permanent` when no later moment or change of objects could accept it
/// (what the cache may remember).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: String,
    pub permanent: bool,
}

impl Refusal {
    pub fn new(reason: impl Into<String>) -> Refusal {
        Refusal { reason: reason.into(), permanent: false }
    }

    pub fn permanent(reason: impl Into<String>) -> Refusal {
        Refusal { reason: reason.into(), permanent: true }
    }
}

/// What one authenticator says of a token: not its kind (the next one is asked), accepted, or
/// refused.
#[derive(Debug)]
pub enum Verdict {
    NotMine,
    Accepted(Authenticated),
    Refused(Refusal),
}

/// The fields of a live object the checks read.
#[derive(Debug, Default, Deserialize)]
pub struct LiveObject {
    #[serde(default)]
    pub metadata: LiveMeta,
    #[serde(default, rename = "type")]
    pub secret_type: String,
    /// A Secret's data (base64).
    #[serde(default)]
    pub data: BTreeMap<String, String>,
    /// A ServiceAccount's `secrets` (the legacy token Secrets made for it).
    #[serde(default)]
    pub secrets: Vec<NameRef>,
}

/// A reference by name (`{name: ...}`).
#[derive(Debug, Default, Deserialize)]
pub struct NameRef {
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveMeta {
    #[serde(default)]
    pub uid: String,
    pub deletion_timestamp: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

impl LiveObject {
    pub fn parse(entry: &Entry) -> Result<LiveObject, String> {
        serde_json::from_slice(&entry.value).map_err(|e| format!("reading {}: {e}", entry.key))
    }

    /// `metadata.deletionTimestamp` as Unix seconds.
    pub fn deleted_at(&self) -> Option<i64> {
        let text = self.metadata.deletion_timestamp.as_deref()?;
        // An unreadable timestamp counts as long past.
        Some(text.parse::<jiff::Timestamp>().map_or(i64::MIN, jiff::Timestamp::as_second))
    }

    /// One data value of a Secret, decoded.
    pub fn data(&self, key: &str) -> Option<Vec<u8>> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.decode(self.data.get(key)?).ok()
    }
}

/// Every bearer token authenticator of the server, in upstream's union order, with the cache.
#[derive(Debug)]
pub struct TokenAuthenticator {
    tokens: Tokens,
    service_accounts: Arc<service_account::ServiceAccounts>,
    /// `--enable-bootstrap-token-auth`.
    bootstrap: bool,
    objects: Arc<dyn LiveObjects>,
    cache: cache::TokenCache,
}

/// The current time in Unix milliseconds.
pub fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

impl TokenAuthenticator {
    pub fn new(
        tokens: Tokens,
        service_accounts: Arc<service_account::ServiceAccounts>,
        bootstrap: bool,
        objects: Arc<dyn LiveObjects>,
    ) -> TokenAuthenticator {
        TokenAuthenticator {
            tokens,
            service_accounts,
            bootstrap,
            objects,
            cache: cache::TokenCache::default(),
        }
    }

    /// With `tokens`, a key made in memory, no objects (unit tests).
    #[cfg(test)]
    pub fn for_tests(tokens: Tokens) -> TokenAuthenticator {
        let accounts = service_account::ServiceAccounts::new(ServiceAccountConfig::default()).unwrap();
        TokenAuthenticator::new(tokens, Arc::new(accounts), true, Arc::new(fake::Objects::default()))
    }

    /// The service account issuer and keys.
    pub fn service_accounts(&self) -> &Arc<service_account::ServiceAccounts> {
        &self.service_accounts
    }

    /// The user of a bearer token asked for `audiences` (`None`: the API's own audiences); the
    /// reason it is refused otherwise ("invalid bearer token" when no authenticator knows it).
    pub async fn authenticate(
        &self,
        token: &str,
        audiences: Option<&[String]>,
    ) -> Result<Authenticated, String> {
        self.authenticate_at(token, audiences, now_ms()).await
    }

    /// [`TokenAuthenticator::authenticate`] at a given time.
    pub async fn authenticate_at(
        &self,
        token: &str,
        audiences: Option<&[String]>,
        now_ms: i64,
    ) -> Result<Authenticated, String> {
        let api_audiences = &self.service_accounts.api_audiences;
        let requested = audiences.filter(|a| !a.is_empty()).unwrap_or(api_audiences);
        // The token file first: a hash lookup, cheaper than the cache.
        if let Some(user) = self.tokens.authenticate_token(token) {
            return agnostic(user, api_audiences, requested, now_ms).ok_or_else(invalid);
        }
        let key = self.cache.key(token, requested);
        match self.cache.get(&key, now_ms) {
            Some(cache::Hit::Failure(reason)) => return Err(reason.to_string()),
            Some(cache::Hit::Success(hit)) => {
                if self.still_holds(&hit).await {
                    return Ok((*hit).clone());
                }
                self.cache.forget(&key);
            }
            None => {}
        }
        match self.verdict(token, requested, now_ms).await {
            Verdict::Accepted(authenticated) => {
                let authenticated = Arc::new(authenticated);
                self.cache.succeeded(key, authenticated.clone(), now_ms);
                Ok(Arc::unwrap_or_clone(authenticated))
            }
            Verdict::Refused(refusal) => {
                if refusal.permanent {
                    self.cache.failed(key, &refusal.reason, now_ms);
                }
                Err(refusal.reason)
            }
            Verdict::NotMine => Err(invalid()),
        }
    }

    /// The authenticators in turn, without the cache.
    async fn verdict(&self, token: &str, requested: &[String], now_ms: i64) -> Verdict {
        let now = now_ms.div_euclid(1000);
        match self.service_accounts.authenticate(token, requested, now, self.objects.as_ref()).await {
            Verdict::NotMine => {}
            other => return other,
        }
        if self.bootstrap {
            let api_audiences = &self.service_accounts.api_audiences;
            match bootstrap::authenticate(token, now, self.objects.as_ref()).await {
                Verdict::Accepted(mut authenticated) => {
                    let Some(audiences) = agnostic_audiences(api_audiences, requested) else {
                        return Verdict::NotMine;
                    };
                    authenticated.audiences = audiences;
                    return Verdict::Accepted(authenticated);
                }
                Verdict::NotMine => {}
                refused => return refused,
            }
        }
        Verdict::NotMine
    }

    /// Whether every object a cached success relied on is still at the revision it was checked.
    async fn still_holds(&self, authenticated: &Authenticated) -> bool {
        for dependency in &authenticated.depends_on {
            match self.objects.get(dependency.resource, &dependency.key).await {
                Ok(Some(entry)) if entry.revision == dependency.revision => {}
                _ => return false,
            }
        }
        true
    }

    /// How many results the cache holds (for tests and benches).
    pub fn cached(&self) -> usize {
        self.cache.len()
    }
}

fn invalid() -> String {
    "invalid bearer token".into()
}

/// upstream's audience-agnostic wrapper: a token that names no audience holds for the API's own
/// audiences that were asked for (none asked for in common: not this authenticator's token).
fn agnostic_audiences(api_audiences: &[String], requested: &[String]) -> Option<Vec<String>> {
    if api_audiences.is_empty() {
        return Some(Vec::new());
    }
    let common: Vec<String> = api_audiences.iter().filter(|a| requested.contains(a)).cloned().collect();
    (!common.is_empty()).then_some(common)
}

fn agnostic(
    user: User,
    api_audiences: &[String],
    requested: &[String],
    now_ms: i64,
) -> Option<Authenticated> {
    let audiences = agnostic_audiences(api_audiences, requested)?;
    Some(Authenticated {
        user,
        audiences,
        depends_on: Vec::new(),
        valid_until_ms: now_ms.saturating_add(i64::MAX / 2),
        annotations: Vec::new(),
    })
}

#[cfg(test)]
pub(crate) mod fake {
    //! Live objects held in a map, for unit tests.

    use std::collections::HashMap;
    use std::sync::Mutex;

    use super::*;

    #[derive(Debug, Default)]
    pub struct Objects {
        entries: Mutex<HashMap<String, Arc<Entry>>>,
        revision: Mutex<i64>,
    }

    impl Objects {
        #[expect(clippy::needless_pass_by_value, reason = "tests write `json!` objects inline")]
        pub fn put(&self, key: &str, object: serde_json::Value) {
            let mut revision = self.revision.lock().unwrap();
            *revision += 1;
            let entry = Entry::new(key.to_owned(), object.to_string().into(), *revision);
            self.entries.lock().unwrap().insert(key.to_owned(), entry);
        }

        pub fn remove(&self, key: &str) {
            self.entries.lock().unwrap().remove(key);
        }
    }

    impl LiveObjects for Objects {
        fn get<'a>(
            &'a self,
            _resource: &'static Resource,
            key: &'a str,
        ) -> BoxFuture<'a, Result<Option<Arc<Entry>>, String>> {
            let found = self.entries.lock().unwrap().get(key).cloned();
            Box::pin(async move { Ok(found) })
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tokens::jwt::ObjectRef;
    use crate::tokens::service_account::{Bound, TokenSpec};

    const NOW: i64 = 1_800_000_000;

    #[tokio::test]
    async fn a_cached_token_still_needs_its_pod() {
        let objects = Arc::new(fake::Objects::default());
        objects.put("/registry/serviceaccounts/dev/robot", json!({"metadata": {"uid": "sa"}}));
        objects.put("/registry/pods/dev/web", json!({"metadata": {"uid": "pod"}}));
        let accounts =
            Arc::new(service_account::ServiceAccounts::new(ServiceAccountConfig::default()).unwrap());
        let authenticator =
            TokenAuthenticator::new(Tokens::default(), accounts.clone(), true, objects.clone());
        let audiences = accounts.api_audiences.clone();
        let token = accounts
            .issue(&TokenSpec {
                namespace: "dev",
                service_account: ObjectRef { name: "robot".into(), uid: "sa".into() },
                bound: Bound {
                    pod: Some(ObjectRef { name: "web".into(), uid: "pod".into() }),
                    ..Bound::default()
                },
                audiences: &audiences,
                expiration_seconds: 3600,
                warn_after_seconds: 0,
                now: NOW,
                jti: String::new(),
            })
            .unwrap();
        let now_ms = NOW * 1000;
        let first = authenticator.authenticate_at(&token, None, now_ms).await.unwrap();
        assert_eq!(first.audiences, audiences);
        assert_eq!(authenticator.cached(), 1);
        // A hit while nothing changed, then the pod changes (same uid: still accepted, checked again).
        assert!(authenticator.authenticate_at(&token, None, now_ms + 1).await.is_ok());
        objects.put("/registry/pods/dev/web", json!({"metadata": {"uid": "pod", "labels": {"a": "b"}}}));
        assert!(authenticator.authenticate_at(&token, None, now_ms + 2).await.is_ok());
        // Deleted: refused at once, within the cache's TTL.
        objects.remove("/registry/pods/dev/web");
        assert_eq!(
            authenticator.authenticate_at(&token, None, now_ms + 3).await.unwrap_err(),
            "service account token has been invalidated"
        );
        // A forged token's refusal is cached; a token file user is no cache entry.
        let forged = format!("{}x", &token[..token.len() - 1]);
        assert!(authenticator.authenticate_at(&forged, None, now_ms).await.is_err());
        assert!(authenticator.authenticate_at(&forged, None, now_ms + 1).await.is_err());
        assert_eq!(
            authenticator.authenticate_at("nobody", None, now_ms).await.unwrap_err(),
            "invalid bearer token"
        );
    }
}
