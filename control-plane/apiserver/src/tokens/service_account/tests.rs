//! Issuing and verifying service account tokens against fake live objects.

use serde_json::json;

use super::*;
use crate::tokens::fake::Objects;

const NOW: i64 = 1_800_000_000;
const SA: &str = "/registry/serviceaccounts/dev/robot";
const POD: &str = "/registry/pods/dev/web";

fn accounts() -> ServiceAccounts {
    ServiceAccounts::new(ServiceAccountConfig::default()).unwrap()
}

fn spec(audiences: &[String], bound: Bound) -> TokenSpec<'_> {
    TokenSpec {
        namespace: "dev",
        service_account: ObjectRef { name: "robot".into(), uid: "sa-uid".into() },
        bound,
        audiences,
        expiration_seconds: 3600,
        warn_after_seconds: 0,
        now: NOW,
        jti: "the-jti".into(),
    }
}

fn objects() -> Objects {
    let objects = Objects::default();
    objects.put(SA, json!({"metadata": {"name": "robot", "namespace": "dev", "uid": "sa-uid"}}));
    objects.put(POD, json!({"metadata": {"name": "web", "namespace": "dev", "uid": "pod-uid"}}));
    objects
}

async fn check(
    accounts: &ServiceAccounts,
    token: &str,
    objects: &Objects,
    now: i64,
) -> Result<Authenticated, String> {
    match accounts.authenticate(token, &accounts.api_audiences, now, objects).await {
        Verdict::Accepted(a) => Ok(a),
        Verdict::Refused(r) => Err(r.reason),
        Verdict::NotMine => Err("not mine".into()),
    }
}

#[test]
fn claims_as_upstream_writes_them() {
    let accounts = accounts();
    let audiences = vec!["api".to_owned()];
    let bound = Bound {
        pod: Some(ObjectRef { name: "web".into(), uid: "pod-uid".into() }),
        node: Some(ObjectRef { name: "n1".into(), uid: String::new() }),
        secret: None,
    };
    let mut with_warning = spec(&audiences, bound);
    with_warning.warn_after_seconds = 3607;
    let claims = accounts.claims(&with_warning);
    let keys: Vec<&String> = claims.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["aud", "exp", "iat", "iss", "jti", "kubernetes.io", "nbf", "sub"]);
    assert_eq!(
        claims["kubernetes.io"],
        json!({"namespace": "dev", "node": {"name": "n1"}, "pod": {"name": "web", "uid": "pod-uid"},
               "serviceaccount": {"name": "robot", "uid": "sa-uid"}, "warnafter": NOW + 3607})
    );
    assert_eq!(
        (claims["exp"].as_i64(), claims["sub"].as_str()),
        (Some(NOW + 3600), Some("system:serviceaccount:dev:robot"))
    );
    assert_eq!(claims["aud"], json!(["api"]), "aud is always an array");
    assert_eq!(claims["iss"], DEFAULT_ISSUER);
}

#[tokio::test]
async fn bound_tokens_hold_while_their_objects_do() {
    let accounts = accounts();
    let objects = objects();
    let audiences = accounts.api_audiences.clone();
    let pod = Some(ObjectRef { name: "web".into(), uid: "pod-uid".into() });
    let node = Some(ObjectRef { name: "n1".into(), uid: "node-uid".into() });
    let token = accounts.issue(&spec(&audiences, Bound { pod, node, secret: None })).unwrap();
    let accepted = check(&accounts, &token, &objects, NOW).await.unwrap();
    assert_eq!(accepted.user.name, "system:serviceaccount:dev:robot");
    assert_eq!(accepted.user.uid, "sa-uid");
    assert_eq!(accepted.user.groups, ["system:serviceaccounts", "system:serviceaccounts:dev"]);
    let extra: Vec<(&str, &str)> =
        accepted.user.extra.iter().map(|(k, v)| (k.as_str(), v[0].as_str())).collect();
    assert_eq!(
        extra,
        [
            (CREDENTIAL_ID, "JTI=the-jti"),
            (NODE_NAME, "n1"),
            (NODE_UID, "node-uid"),
            (POD_NAME, "web"),
            (POD_UID, "pod-uid"),
        ]
    );
    assert_eq!(accepted.depends_on.len(), 2);
    assert_eq!(accepted.valid_until_ms, (NOW + 3600 + 61) * 1000);
    // Within the leeway after expiry, then not.
    assert!(check(&accounts, &token, &objects, NOW + 3660).await.is_ok());
    assert_eq!(
        check(&accounts, &token, &objects, NOW + 3661).await.unwrap_err(),
        "service account token has expired"
    );
    // A pod being deleted holds the token for a minute past its deletionTimestamp.
    let deleting = jiff::Timestamp::from_second(NOW).unwrap().to_string();
    objects.put(POD, json!({"metadata": {"uid": "pod-uid", "deletionTimestamp": deleting}}));
    assert!(check(&accounts, &token, &objects, NOW + 60).await.is_ok());
    assert_eq!(
        check(&accounts, &token, &objects, NOW + 61).await.unwrap_err(),
        "service account token has been invalidated"
    );
    // Recreated under another uid, then gone.
    objects.put(POD, json!({"metadata": {"uid": "other"}}));
    assert_eq!(
        check(&accounts, &token, &objects, NOW).await.unwrap_err(),
        "pod UID (other) does not match service account pod ref claim (pod-uid)"
    );
    objects.remove(POD);
    assert_eq!(
        check(&accounts, &token, &objects, NOW).await.unwrap_err(),
        "service account token has been invalidated"
    );
    objects.remove(SA);
    assert_eq!(
        check(&accounts, &token, &objects, NOW).await.unwrap_err(),
        "serviceaccounts \"robot\" not found"
    );
}

#[tokio::test]
async fn foreign_and_forged_tokens() {
    let accounts = accounts();
    let objects = objects();
    let other = ServiceAccounts::new(ServiceAccountConfig::default()).unwrap();
    let audiences = accounts.api_audiences.clone();
    let forged = other.issue(&spec(&audiences, Bound::default())).unwrap();
    assert_eq!(
        check(&accounts, &forged, &objects, NOW).await.unwrap_err(),
        "invalid signature, no keys found"
    );
    let elsewhere = vec!["https://vault".to_owned()];
    let token = accounts.issue(&spec(&elsewhere, Bound::default())).unwrap();
    assert_eq!(
        check(&accounts, &token, &objects, NOW).await.unwrap_err(),
        "token audiences [\"https://vault\"] is invalid for the target audiences [\"https://kubernetes.default.svc.cluster.local\"]"
    );
    // Asked for its own audience (a TokenReview with spec.audiences), it holds.
    assert!(matches!(accounts.authenticate(&token, &elsewhere, NOW, &objects).await, Verdict::Accepted(_)));
    let other_issuer = ServiceAccounts::new(ServiceAccountConfig {
        issuers: vec!["https://elsewhere".into()],
        signing_key: Some(accounts.signing_key.clone()),
        ..ServiceAccountConfig::default()
    })
    .unwrap();
    let foreign = other_issuer.issue(&spec(&audiences, Bound::default())).unwrap();
    assert_eq!(check(&accounts, &foreign, &objects, NOW).await.unwrap_err(), "not mine");
    assert_eq!(check(&accounts, "not-a-jwt", &objects, NOW).await.unwrap_err(), "not mine");
    assert!(
        check(&accounts, &accounts.issue(&spec(&audiences, Bound::default())).unwrap(), &objects, NOW)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn legacy_tokens_need_their_secret() {
    let accounts = accounts();
    let objects = objects();
    let account = ObjectRef { name: "robot".into(), uid: "sa-uid".into() };
    let token = accounts.issue_legacy("dev", &account, "robot-token").unwrap();
    const SECRET: &str = "/registry/secrets/dev/robot-token";
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD.encode(&token);
    assert_eq!(check(&accounts, &token, &objects, NOW).await.unwrap_err(), "Token has been invalidated");
    objects.put(SECRET, json!({"metadata": {"uid": "s"}, "type": "kubernetes.io/service-account-token", "data": {"token": "eA=="}}));
    assert_eq!(
        check(&accounts, &token, &objects, NOW).await.unwrap_err(),
        "Token does not match server's copy"
    );
    objects.put(SECRET, json!({"metadata": {"uid": "s"}, "type": "kubernetes.io/service-account-token", "data": {"token": data}}));
    let accepted = check(&accounts, &token, &objects, NOW).await.unwrap();
    assert_eq!(
        (accepted.user.name.as_str(), accepted.user.extra.len()),
        ("system:serviceaccount:dev:robot", 0)
    );
    let annotation = |key: &str, value: &str| (key.to_owned(), value.to_owned());
    assert_eq!(
        accepted.annotations,
        [
            annotation("authentication.k8s.io/legacy-token", "system:serviceaccount:dev:robot"),
            annotation("authentication.k8s.io/legacy-token-manual-secret", "robot-token"),
        ]
    );
    // A Secret the account lists was made for it (the old token controller's).
    objects.put(SA, json!({"metadata": {"uid": "sa-uid"}, "secrets": [{"name": "robot-token"}]}));
    let accepted = check(&accounts, &token, &objects, NOW).await.unwrap();
    assert_eq!(accepted.annotations[1].0, "authentication.k8s.io/legacy-token-autogenerated-secret");
    objects.put(
        SECRET,
        json!({"metadata": {"uid": "s", "labels": {INVALID_SINCE_LABEL: "2026-01-01"}}, "data": {"token": data}}),
    );
    assert!(check(&accounts, &token, &objects, NOW).await.unwrap_err().contains("has been marked invalid"));
}

#[tokio::test]
async fn tokens_past_their_warnafter_are_stale() {
    let accounts = accounts();
    let objects = objects();
    let audiences = accounts.api_audiences.clone();
    let mut warned = spec(&audiences, Bound::default());
    warned.warn_after_seconds = 100;
    let token = accounts.issue(&warned).unwrap();
    assert!(check(&accounts, &token, &objects, NOW + 100).await.unwrap().annotations.is_empty());
    assert_eq!(
        check(&accounts, &token, &objects, NOW + 250).await.unwrap().annotations,
        [(
            "authentication.k8s.io/stale-token".to_owned(),
            "subject: system:serviceaccount:dev:robot, seconds after warning threshold: 150".to_owned()
        )]
    );
}
