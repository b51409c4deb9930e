//! Service account issuer discovery (upstream's openidmetadata): `/.well-known/openid-configuration`
//! and `/openid/v1/jwks`, built once at start from the first issuer and the verification keys,
//! served only when that issuer is an `https` URL without query or fragment (as upstream
//! installs them), to whoever may `get` them (the default policy's
//! system:service-account-issuer-discovery binds all service accounts).

use bytes::Bytes;
use serde_json::Value;

use super::service_account::ServiceAccounts;

pub const CONFIG_PATH: &str = "/.well-known/openid-configuration";
pub const JWKS_PATH: &str = "/openid/v1/jwks";
/// upstream's static keys' GetCacheAgeMaxSeconds.
const MAX_AGE_SECONDS: u32 = 3600;

/// The two documents.
#[derive(Debug, Clone)]
pub struct Discovery {
    config: Bytes,
    keys: Bytes,
}

/// A served answer: status, content type, cache control (none for a refusal), body.
pub type Document = (u16, &'static str, Option<String>, Bytes);

/// go-restful's Accept check of a route producing `produces`: some media range of `accept` (no
/// header: `*/*`) is `*/*` or exactly `produces` — `application/*` is not enough.
fn accepts(accept: Option<&str>, produces: &str) -> bool {
    let accept = accept.filter(|a| !a.is_empty()).unwrap_or("*/*");
    accept.split(',').any(|range| {
        let media = range.split(';').next().unwrap_or_default().trim();
        media == "*/*" || media == produces
    })
}

impl Discovery {
    /// The documents, or `None` when the issuer is no https URL; the JWKS URI is
    /// `--service-account-jwks-uri` or `https://<external address>/openid/v1/jwks`.
    pub fn build(service_accounts: &ServiceAccounts, external_address: &str) -> Option<Discovery> {
        let issuer = service_accounts.issuer();
        let after_scheme = issuer.strip_prefix("https://")?;
        if after_scheme.is_empty() || issuer.contains(['?', '#']) {
            return None;
        }
        let jwks_uri = service_accounts
            .jwks_uri
            .clone()
            .unwrap_or_else(|| format!("https://{external_address}{JWKS_PATH}"));
        let mut algorithms: Vec<&str> =
            service_accounts.verification_keys.iter().map(|k| k.algorithm.name()).collect();
        algorithms.sort_unstable();
        algorithms.dedup();
        // Members in the order upstream's struct declares them.
        let config = format!(
            "{{\"issuer\":{},\"jwks_uri\":{},\"response_types_supported\":[\"id_token\"],\"subject_types_supported\":[\"public\"],\"id_token_signing_alg_values_supported\":{}}}",
            Value::from(issuer),
            Value::from(jwks_uri),
            Value::from(algorithms),
        );
        let keys: Vec<String> =
            service_accounts.verification_keys.iter().map(super::keys::PublicKey::jwk_json).collect();
        let keys = format!("{{\"keys\":[{}]}}", keys.join(","));
        Some(Discovery { config: Bytes::from(config), keys: Bytes::from(keys) })
    }

    /// The answer for `path` when it is one of the two documents: the document, or go-restful's
    /// 406 when `accept` does not take its media type (as kube-apiserver answers).
    pub fn serve(&self, path: &str, accept: Option<&str>) -> Option<Document> {
        let (produces, body) = match path {
            CONFIG_PATH => ("application/json", &self.config),
            JWKS_PATH => ("application/jwk-set+json", &self.keys),
            _ => return None,
        };
        if !accepts(accept, produces) {
            let error = keel_api::status::ApiError::NotAcceptable(format!(
                "406: Not Acceptable\n\nAvailable representations: {produces}"
            ));
            let mut status = error.to_json();
            status["details"] = serde_json::json!({});
            return Some((406, "application/json", None, Bytes::from(status.to_string())));
        }
        Some((200, produces, Some(format!("public, max-age={MAX_AGE_SECONDS}")), body.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokens::ServiceAccountConfig;

    #[test]
    fn documents_of_an_https_issuer() {
        let accounts = ServiceAccounts::new(ServiceAccountConfig::default()).unwrap();
        let discovery = Discovery::build(&accounts, "10.0.0.1:6443").unwrap();
        let (code, kind, cache, body) = discovery.serve(CONFIG_PATH, None).unwrap();
        assert_eq!((code, kind, cache.as_deref()), (200, "application/json", Some("public, max-age=3600")));
        let config: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(config["issuer"], "https://kubernetes.default.svc.cluster.local");
        assert_eq!(config["jwks_uri"], "https://10.0.0.1:6443/openid/v1/jwks");
        assert_eq!(config["id_token_signing_alg_values_supported"], serde_json::json!(["ES256"]));
        let (_, kind, _, body) =
            discovery.serve(JWKS_PATH, Some("application/jwk-set+json;q=1, */*;q=0.1")).unwrap();
        assert_eq!(kind, "application/jwk-set+json");
        assert_eq!(discovery.serve(JWKS_PATH, Some("application/json")).unwrap().0, 406);
        assert_eq!(discovery.serve(JWKS_PATH, Some("application/*")).unwrap().0, 406);
        assert_eq!(discovery.serve(CONFIG_PATH, Some("application/json, text/plain")).unwrap().0, 200);
        let keys: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(keys["keys"][0]["kid"], accounts.signing_key.public().kid.as_str());
        assert!(discovery.serve("/openid/v1", None).is_none());
        let legacy =
            ServiceAccountConfig { issuers: vec!["kubernetes/serviceaccount".into()], ..Default::default() };
        assert!(Discovery::build(&ServiceAccounts::new(legacy).unwrap(), "a:1").is_none());
    }
}
