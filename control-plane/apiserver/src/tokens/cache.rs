//! The token cache, as upstream's cached token authenticator: results keyed by an HMAC-SHA256 of
//! the token and the audiences asked for (a random key per process, so the map holds no token),
//! successes kept [`SUCCESS_TTL`], refusals that cannot change [`FAILURE_TTL`], at most
//! [`CAPACITY`] entries.
//!
//! Unlike upstream's, a cached success does not vouch for the objects the token is bound to: it
//! lists them with the revision it checked ([`super::Dependency`]), and every hit looks them up
//! again in the watch cache. The same revision passes without parsing anything; a changed or
//! missing object sends the token through the whole check again — a deleted pod's token is
//! refused as soon as the watch cache has seen the deletion.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use ring::hmac;

use super::Authenticated;

/// How long a success is kept (kube-apiserver's `TokenSuccessCacheTTL`).
pub const SUCCESS_TTL_MS: i64 = 10_000;
/// How long a refusal is kept: only refusals no later moment changes (a bad signature, a foreign
/// key, a wrong audience) are cached; upstream caches none (`TokenFailureCacheTTL` 0).
pub const FAILURE_TTL_MS: i64 = 3_000;
/// At most this many tokens are remembered.
pub const CAPACITY: usize = 8192;

#[derive(Debug, Clone)]
enum Cached {
    Success { authenticated: Arc<Authenticated>, until_ms: i64 },
    Failure { reason: Arc<str>, until_ms: i64 },
}

/// What the cache knows of a token.
#[derive(Debug, Clone)]
pub enum Hit {
    Success(Arc<Authenticated>),
    Failure(Arc<str>),
}

/// The cache; cheap to share (one lock, held only to look up or insert).
#[derive(Debug)]
pub struct TokenCache {
    key: hmac::Key,
    entries: RwLock<HashMap<[u8; 32], Cached>>,
}

impl Default for TokenCache {
    fn default() -> TokenCache {
        let rng = ring::rand::SystemRandom::new();
        // A random key; generation failing leaves a fixed one, still keeping tokens out of the map.
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .unwrap_or_else(|_| hmac::Key::new(hmac::HMAC_SHA256, b"keel token cache"));
        TokenCache { key, entries: RwLock::new(HashMap::new()) }
    }
}

impl TokenCache {
    /// The key of `token` asked for `audiences`.
    pub fn key(&self, token: &str, audiences: &[String]) -> [u8; 32] {
        let mut context = hmac::Context::with_key(&self.key);
        for audience in audiences {
            context.update(&(audience.len() as u64).to_be_bytes());
            context.update(audience.as_bytes());
        }
        context.update(b"\0token\0");
        context.update(token.as_bytes());
        let mut out = [0; 32];
        out.copy_from_slice(context.sign().as_ref());
        out
    }

    /// A result still fresh at `now_ms`.
    pub fn get(&self, key: &[u8; 32], now_ms: i64) -> Option<Hit> {
        let entries = self.entries.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        match entries.get(key)? {
            Cached::Success { authenticated, until_ms } if *until_ms > now_ms => {
                Some(Hit::Success(authenticated.clone()))
            }
            Cached::Failure { reason, until_ms } if *until_ms > now_ms => Some(Hit::Failure(reason.clone())),
            _ => None,
        }
    }

    /// Keeps a success until [`SUCCESS_TTL_MS`] from now or the moment it stops being one
    /// (`authenticated.valid_until_ms`), whichever comes first.
    pub fn succeeded(&self, key: [u8; 32], authenticated: Arc<Authenticated>, now_ms: i64) {
        let until_ms = (now_ms + SUCCESS_TTL_MS).min(authenticated.valid_until_ms);
        if until_ms > now_ms {
            self.insert(key, Cached::Success { authenticated, until_ms }, now_ms);
        }
    }

    pub fn failed(&self, key: [u8; 32], reason: &str, now_ms: i64) {
        self.insert(
            key,
            Cached::Failure { reason: reason.into(), until_ms: now_ms + FAILURE_TTL_MS },
            now_ms,
        );
    }

    /// Forgets a result (a hit whose bound objects changed).
    pub fn forget(&self, key: &[u8; 32]) {
        self.entries.write().unwrap_or_else(std::sync::PoisonError::into_inner).remove(key);
    }

    fn insert(&self, key: [u8; 32], value: Cached, now_ms: i64) {
        let mut entries = self.entries.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if entries.len() >= CAPACITY && !entries.contains_key(&key) {
            entries.retain(|_, cached| match cached {
                Cached::Success { until_ms, .. } | Cached::Failure { until_ms, .. } => *until_ms > now_ms,
            });
            // Still full of fresh entries: drop an arbitrary tenth rather than grow.
            if entries.len() >= CAPACITY {
                let victims: Vec<[u8; 32]> = entries.keys().take(CAPACITY / 10 + 1).copied().collect();
                for victim in victims {
                    entries.remove(&victim);
                }
            }
        }
        entries.insert(key, value);
    }

    pub fn len(&self) -> usize {
        self.entries.read().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::User;

    fn authenticated(valid_until_ms: i64) -> Arc<Authenticated> {
        Arc::new(Authenticated {
            user: User::named("u", &[]),
            audiences: Vec::new(),
            depends_on: Vec::new(),
            valid_until_ms,
            annotations: Vec::new(),
        })
    }

    #[test]
    fn entries_expire_and_stay_bounded() {
        let cache = TokenCache::default();
        let (a, b) = (cache.key("t", &["x".into()]), cache.key("t", &["y".into()]));
        assert_ne!(a, b, "the audiences are part of the key");
        assert_ne!(cache.key("t", &["ab".into()]), cache.key("t", &["a".into(), "b".into()]));
        cache.succeeded(a, authenticated(i64::MAX), 0);
        assert!(matches!(cache.get(&a, SUCCESS_TTL_MS - 1), Some(Hit::Success(_))));
        assert!(cache.get(&a, SUCCESS_TTL_MS).is_none());
        // A token expiring sooner is kept only until then.
        cache.succeeded(b, authenticated(500), 0);
        assert!(cache.get(&b, 499).is_some() && cache.get(&b, 500).is_none());
        cache.failed(a, "bad", 0);
        assert!(matches!(cache.get(&a, FAILURE_TTL_MS - 1), Some(Hit::Failure(_))));
        assert!(cache.get(&a, FAILURE_TTL_MS).is_none());
        for i in 0..CAPACITY + 100 {
            cache.failed(cache.key(&i.to_string(), &[]), "bad", 1);
        }
        assert!(cache.len() <= CAPACITY);
    }
}
