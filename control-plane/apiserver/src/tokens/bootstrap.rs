//! Bootstrap tokens (upstream's plugin/pkg/auth/authenticator/token/bootstrap): a bearer token
//! `<id>.<secret>` (6 and 16 of `[a-z0-9]`) is `system:bootstrap:<id>` in `system:bootstrappers`
//! and the Secret's `auth-extra-groups`, when `kube-system/bootstrap-token-<id>` is of type
//! `bootstrap.kubernetes.io/token`, holds that `token-id` and `token-secret`, says
//! `usage-bootstrap-authentication: "true"`, is not deleted and its `expiration` (RFC 3339; an
//! unreadable one is expired) has not passed. Like upstream, a token failing any check is no one's
//! ("invalid bearer token"), not a distinct error.

use std::collections::BTreeSet;

use super::{Authenticated, Dependency, LiveObject, LiveObjects, Verdict};
use crate::auth::User;

pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
pub const SECRET_PREFIX: &str = "bootstrap-token-";
pub const USER_PREFIX: &str = "system:bootstrap:";
pub const DEFAULT_GROUP: &str = "system:bootstrappers";

/// `<id>.<secret>` of a bootstrap token.
pub fn parse(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let fits = |part: &str, len| {
        part.len() == len && part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (fits(id, 6) && fits(secret, 16)).then_some((id, secret))
}

/// upstream's BootstrapGroupPattern: `system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]`.
pub fn valid_group(group: &str) -> bool {
    let Some(rest) = group.strip_prefix("system:bootstrappers:") else { return false };
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match rest.as_bytes().split_last() {
        Some((last, body)) => {
            allowed(*last)
                && body.len() <= 255
                && body.iter().all(|b| allowed(*b) || *b == b':' || *b == b'-')
        }
        None => false,
    }
}

/// Authenticates a bootstrap token at `now` (Unix seconds).
pub async fn authenticate(token: &str, now: i64, objects: &dyn LiveObjects) -> Verdict {
    let Some((id, secret)) = parse(token) else { return Verdict::NotMine };
    let Some(resource) = keel_api::resources::find("", "v1", "secrets") else { return Verdict::NotMine };
    let key = crate::objects::key(resource, Some("kube-system"), &format!("{SECRET_PREFIX}{id}"));
    let entry = match objects.get(resource, &key).await {
        Ok(Some(entry)) => entry,
        Ok(None) => return Verdict::NotMine,
        Err(reason) => return Verdict::Refused(super::Refusal::new(reason)),
    };
    let Ok(object) = LiveObject::parse(&entry) else { return Verdict::NotMine };
    match check(&object, id, secret, now) {
        Some((groups, valid_until)) => Verdict::Accepted(Authenticated {
            user: User { name: format!("{USER_PREFIX}{id}"), groups, ..User::default() },
            audiences: Vec::new(),
            depends_on: vec![Dependency { resource, key, revision: entry.revision }],
            valid_until_ms: valid_until.saturating_mul(1000),
            annotations: Vec::new(),
        }),
        None => Verdict::NotMine,
    }
}

/// The groups of a token the Secret vouches for, and until when (Unix seconds).
fn check(object: &LiveObject, id: &str, secret: &str, now: i64) -> Option<(Vec<String>, i64)> {
    if object.deleted_at().is_some() || object.secret_type != SECRET_TYPE || object.data.is_empty() {
        return None;
    }
    let text =
        |key: &str| object.data(key).map(|v| String::from_utf8_lossy(&v).into_owned()).unwrap_or_default();
    if !super::service_account::constant_time_eq(text("token-secret").as_bytes(), secret.as_bytes())
        || text("token-id") != id
    {
        return None;
    }
    let expiration = text("expiration");
    let valid_until = if expiration.is_empty() {
        i64::MAX / 2000
    } else {
        let at = expiration.parse::<jiff::Timestamp>().ok()?.as_second();
        if at <= now {
            return None;
        }
        at
    };
    if text("usage-bootstrap-authentication") != "true" {
        return None;
    }
    let mut groups = BTreeSet::from([DEFAULT_GROUP.to_owned()]);
    let extra = text("auth-extra-groups");
    if !extra.is_empty() {
        for group in extra.split(',') {
            if !valid_group(group) {
                return None;
            }
            groups.insert(group.to_owned());
        }
    }
    Some((groups.into_iter().collect(), valid_until))
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde_json::json;

    use super::*;
    use crate::tokens::fake::Objects;

    fn secret(data: &[(&str, &str)]) -> serde_json::Value {
        let data: serde_json::Map<String, serde_json::Value> =
            data.iter().map(|(k, v)| ((*k).to_owned(), STANDARD.encode(v).into())).collect();
        json!({"metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system", "uid": "u"},
               "type": SECRET_TYPE, "data": data})
    }

    const KEY: &str = "/registry/secrets/kube-system/bootstrap-token-abcdef";
    const TOKEN: &str = "abcdef.0123456789abcdef";

    async fn user(objects: &Objects, now: i64) -> Option<User> {
        match authenticate(TOKEN, now, objects).await {
            Verdict::Accepted(a) => Some(a.user),
            _ => None,
        }
    }

    #[tokio::test]
    async fn tokens_the_secret_vouches_for() {
        let objects = Objects::default();
        let base = [
            ("token-id", "abcdef"),
            ("token-secret", "0123456789abcdef"),
            ("usage-bootstrap-authentication", "true"),
        ];
        assert!(user(&objects, 0).await.is_none(), "no secret");
        objects.put(KEY, secret(&base));
        let found = user(&objects, 0).await.unwrap();
        assert_eq!(
            (found.name.as_str(), found.groups.as_slice()),
            ("system:bootstrap:abcdef", &["system:bootstrappers".to_owned()][..])
        );
        let mut extra = base.to_vec();
        extra.push((
            "auth-extra-groups",
            "system:bootstrappers:kubeadm:default-node-token,system:bootstrappers:a",
        ));
        extra.push(("expiration", "2030-01-01T00:00:00Z"));
        objects.put(KEY, secret(&extra));
        let found = user(&objects, 0).await.unwrap();
        assert_eq!(
            found.groups,
            [
                "system:bootstrappers",
                "system:bootstrappers:a",
                "system:bootstrappers:kubeadm:default-node-token"
            ]
        );
        let expiry = "2030-01-01T00:00:00Z".parse::<jiff::Timestamp>().unwrap().as_second();
        assert!(user(&objects, expiry).await.is_none(), "expired");
        for (key, value) in [
            ("expiration", "soon"),
            ("auth-extra-groups", "system:masters"),
            ("usage-bootstrap-authentication", "false"),
            ("token-secret", "0123456789abcdee"),
            ("token-id", "abcdeg"),
        ] {
            let mut data: Vec<(&str, &str)> = base.iter().filter(|(k, _)| *k != key).copied().collect();
            data.push((key, value));
            objects.put(KEY, secret(&data));
            assert!(user(&objects, 0).await.is_none(), "{key}={value}");
        }
        let mut wrong_type = secret(&base);
        wrong_type["type"] = "Opaque".into();
        objects.put(KEY, wrong_type);
        assert!(user(&objects, 0).await.is_none());
        for malformed in [
            "abcdef.0123456789abcde",
            "ABCDEF.0123456789abcdef",
            "abcdef0123456789abcdef",
            "abcdef.0123456789abcdef.",
        ] {
            assert!(parse(malformed).is_none(), "{malformed}");
        }
        assert!(
            valid_group("system:bootstrappers:x")
                && !valid_group("system:bootstrappers:")
                && !valid_group("system:bootstrappers:x-")
        );
    }
}
