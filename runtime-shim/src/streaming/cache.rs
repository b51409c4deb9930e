//! The single-use tokens of the streaming URLs, as the kubelet's `requestCache`
//! (pkg/kubelet/cri/streaming/request_cache.go): a random token per Exec/Attach/PortForward request,
//! valid for one minute and for one use, at most [`MAX_IN_FLIGHT`] waiting at a time.

use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_cri::v1 as api;
use tonic::Status;

/// How long a token stays valid (the kubelet's `cacheTTL`).
pub const TOKEN_TTL: Duration = Duration::from_secs(60);
/// How many tokens may wait at once (the kubelet's `maxInFlight`).
pub const MAX_IN_FLIGHT: usize = 1000;
/// Random bytes per token (the kubelet's `tokenLen`), base64url-encoded without padding.
const TOKEN_BYTES: usize = 8;

/// A request a token stands for.
#[derive(Debug, Clone)]
pub enum Cached {
    /// An ExecRequest.
    Exec(api::ExecRequest),
    /// An AttachRequest.
    Attach(api::AttachRequest),
    /// A PortForwardRequest.
    PortForward(api::PortForwardRequest),
}

/// The tokens waiting for their request, with their deadlines.
#[derive(Debug, Default)]
pub struct RequestCache {
    /// Token → (request, expiry); locked briefly by the RPCs and the HTTP handlers.
    entries: Mutex<HashMap<String, (Cached, Instant)>>,
}

impl RequestCache {
    /// Stores `request` under a fresh random token; ResourceExhausted when [`MAX_IN_FLIGHT`]
    /// unexpired tokens wait already.
    pub fn insert(&self, request: Cached) -> Result<String, Status> {
        let now = Instant::now();
        let mut entries =
            self.entries.lock().map_err(|_| Status::internal("streaming token cache poisoned"))?;
        entries.retain(|_, (_, expiry)| *expiry > now);
        if entries.len() >= MAX_IN_FLIGHT {
            return Err(Status::resource_exhausted("maximum number of in-flight requests exceeded"));
        }
        loop {
            let token =
                random_token().map_err(|err| Status::internal(format!("reading random bytes: {err}")))?;
            if !entries.contains_key(&token) {
                entries.insert(token.clone(), (request, now + TOKEN_TTL));
                return Ok(token);
            }
        }
    }

    /// Takes the request of `token` out of the cache: None when unknown, used or expired.
    pub fn consume(&self, token: &str) -> Option<Cached> {
        let mut entries = self.entries.lock().ok()?;
        let (request, expiry) = entries.remove(token)?;
        (expiry > Instant::now()).then_some(request)
    }

    /// Makes every waiting token expire now (tests of expiry use it instead of waiting a minute).
    pub fn expire_all(&self) {
        if let Ok(mut entries) = self.entries.lock() {
            let now = Instant::now();
            for (_, expiry) in entries.values_mut() {
                *expiry = now;
            }
        }
    }
}

fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec() -> Cached {
        Cached::Exec(api::ExecRequest { container_id: "c".into(), ..Default::default() })
    }

    #[test]
    fn tokens_are_single_use_and_expire() {
        let cache = RequestCache::default();
        let first = cache.insert(exec()).unwrap();
        let second = cache.insert(exec()).unwrap();
        assert_ne!(first, second);
        assert_eq!(first.len(), 11);
        assert!(cache.consume(&first).is_some());
        assert!(cache.consume(&first).is_none());
        cache.expire_all();
        assert!(cache.consume(&second).is_none());
        assert!(cache.consume("unknown").is_none());
    }

    #[test]
    fn in_flight_tokens_are_bounded() {
        let cache = RequestCache::default();
        for _ in 0..MAX_IN_FLIGHT {
            cache.insert(exec()).unwrap();
        }
        let err = cache.insert(exec()).unwrap_err();
        assert_eq!(err.code(), tonic::Code::ResourceExhausted);
        cache.expire_all();
        cache.insert(exec()).unwrap();
    }
}
