//! Service account tokens and bootstrap tokens end to end: TokenRequest (`kubectl create token`),
//! requests and `kubectl auth whoami` as the token's service account, tokens bound to a pod that
//! stop working once the pod is gone (also while cached), forged, expired, wrong-audience and
//! unsigned tokens refused with a bare 401, legacy Secret tokens, bootstrap tokens, TokenReview,
//! issuer discovery, the signing key kept over a restart of the binary, and the shapes of it all
//! against kube-apiserver 1.34 (the peer).

use crate::common::{self, Server};

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use keel_apiserver::tokens::jwt::ObjectRef;
use keel_apiserver::tokens::keys::SigningKey;
use keel_apiserver::tokens::service_account::{Bound, ServiceAccounts, TokenSpec};
use keel_apiserver::tokens::{ServiceAccountConfig, now_ms};
use keel_testbed::kube_apiserver::KubeApiServer;
use serde_json::{Value, json};

/// One API server as a plain HTTPS client sees it: as the admin (client certificate) or with a
/// bearer token.
struct Api {
    address: SocketAddr,
    ca: String,
    admin: (String, String),
}

impl Api {
    fn keel(server: &Server) -> Api {
        Api {
            address: server.address,
            ca: server.pki.ca_pem.clone(),
            admin: (server.pki.admin_cert_pem.clone(), server.pki.admin_key_pem.clone()),
        }
    }

    fn kube(server: &KubeApiServer) -> Api {
        Api {
            address: server.address(),
            ca: server.ca_pem().to_owned(),
            admin: (server.admin().cert_pem.clone(), server.admin().key_pem.clone()),
        }
    }

    async fn send(
        &self,
        admin: bool,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: &Value,
    ) -> Result<(u16, String, String)> {
        self.send_accepting("application/json", admin, token, method, path, body).await
    }

    async fn send_accepting(
        &self,
        accept: &str,
        admin: bool,
        token: Option<&str>,
        method: &str,
        path: &str,
        body: &Value,
    ) -> Result<(u16, String, String)> {
        let (address, ca, cert) = (self.address, self.ca.clone(), admin.then(|| self.admin.clone()));
        let mut headers = vec![("Accept".to_owned(), accept.to_owned())];
        if !body.is_null() {
            headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
        }
        if let Some(token) = token {
            headers.push(("Authorization".to_owned(), format!("Bearer {token}")));
        }
        let (method, path) = (method.to_owned(), path.to_owned());
        let bytes = if body.is_null() { Vec::new() } else { body.to_string().into_bytes() };
        tokio::task::spawn_blocking(move || {
            let client = cert.as_ref().map(|(c, k)| (c.as_str(), k.as_str()));
            let (status, head, body) =
                common::raw_request(address, &ca, client, &method, &path, &headers, &bytes)?;
            let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
            Ok((status, head, if chunked { dechunk(&body) } else { body }))
        })
        .await?
    }

    /// As the admin: status and parsed body.
    async fn admin(&self, method: &str, path: &str, body: &Value) -> Result<(u16, Value)> {
        let (status, _, text) = self.send(true, None, method, path, body).await?;
        Ok((
            status,
            serde_json::from_str(&text).with_context(|| format!("{method} {path}: {status} {text}"))?,
        ))
    }

    /// With a bearer token: status and body text.
    async fn bearer(&self, token: &str, method: &str, path: &str, body: &Value) -> Result<(u16, String)> {
        let (status, _, text) = self.send(false, Some(token), method, path, body).await?;
        Ok((status, text))
    }

    async fn create(&self, path: &str, object: Value) -> Result<Value> {
        let (status, created) = self.admin("POST", path, &object).await?;
        ensure!(status == 201, "creating at {path}: {status} {created}");
        Ok(created)
    }

    /// A TokenRequest for `namespace/name`: status and answer.
    async fn token_request(&self, namespace: &str, name: &str, spec: Value) -> Result<(u16, Value)> {
        let path = format!("/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token");
        let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
        self.admin("POST", &path, &body).await
    }

    async fn token(&self, namespace: &str, name: &str, spec: Value) -> Result<String> {
        let (status, answer) = self.token_request(namespace, name, spec).await?;
        ensure!(status == 201, "a token for {namespace}/{name}: {status} {answer}");
        Ok(answer["status"]["token"].as_str().context("no token")?.to_owned())
    }

    /// `kubectl auth whoami`'s question (a SelfSubjectReview) asked with `token`.
    async fn whoami(&self, token: &str) -> Result<(u16, Value)> {
        let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
        let (status, text) =
            self.bearer(token, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", &review).await?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::String(text))))
    }

    async fn token_review(&self, token: &str, audiences: &[&str]) -> Result<Value> {
        let mut spec = json!({"token": token});
        if !audiences.is_empty() {
            spec["audiences"] = json!(audiences);
        }
        let review = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec});
        let (status, answer) =
            self.admin("POST", "/apis/authentication.k8s.io/v1/tokenreviews", &review).await?;
        ensure!(status == 201, "TokenReview: {status} {answer}");
        Ok(answer["status"].clone())
    }
}

/// A chunked HTTP/1.1 body's data.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { break };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

/// A token's claims, unverified.
fn claims(token: &str) -> Result<Value> {
    let payload = token.split('.').nth(1).context("no payload")?;
    Ok(serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload)?)?)
}

fn header(token: &str) -> Result<Value> {
    let header = token.split('.').next().context("no header")?;
    Ok(serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header)?)?)
}

/// A refused token's answer: 401 with a bare Unauthorized Status and nothing else.
fn unauthorized(status: u16, body: &str, what: &str) -> Result<()> {
    ensure!(status == 401, "{what}: {status} {body}");
    let status: Value = serde_json::from_str(body)?;
    ensure!(
        status
            == json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                         "message": "Unauthorized", "reason": "Unauthorized", "code": 401}),
        "{what}: {status}"
    );
    Ok(())
}

/// A server whose signing key the test holds (to make tokens the server never issued).
async fn server_with_key(issuer: Option<&str>) -> Result<(Server, Arc<SigningKey>)> {
    let (key, _) = SigningKey::generate()?;
    let key = Arc::new(key);
    let signing = key.clone();
    let issuer = issuer.map(str::to_owned);
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn keel_store::Store> = Arc::new(keel_store::embedded::EmbeddedStore::open(
        keel_store::embedded::Options::new(dir.path().join("data")),
    )?);
    let server = Server::start_with(store, dir, move |config| {
        config.service_accounts.signing_key = Some(signing);
        if let Some(issuer) = issuer {
            config.service_accounts.issuers = vec![issuer];
        }
    })
    .await?;
    Ok((server, key))
}

/// Tokens signed like the server's, with the test's choice of claims.
fn issuer_of(key: &Arc<SigningKey>, issuer: &str) -> Result<ServiceAccounts> {
    Ok(ServiceAccounts::new(ServiceAccountConfig {
        issuers: vec![issuer.to_owned()],
        signing_key: Some(key.clone()),
        ..ServiceAccountConfig::default()
    })?)
}

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Creates the ServiceAccount `dev/robot` (and the namespace); its uid.
async fn robot(api: &Api) -> Result<String> {
    api.create("/api/v1/namespaces", json!({"metadata": {"name": "dev"}})).await?;
    let account =
        api.create("/api/v1/namespaces/dev/serviceaccounts", json!({"metadata": {"name": "robot"}})).await?;
    Ok(account["metadata"]["uid"].as_str().context("no uid")?.to_owned())
}

/// Waits until the watch cache has every write so far: a consistent list is served from it once it
/// has caught up with the store (the embedded store reports progress promptly).
async fn cache_caught_up(api: &Api) -> Result<()> {
    let (status, _) = api.admin("GET", "/api/v1/pods", &Value::Null).await?;
    ensure!(status == 200);
    Ok(())
}

#[tokio::test]
async fn token_request_then_requests_as_the_service_account() -> Result<()> {
    let server = Server::start().await?;
    let api = Api::keel(&server);
    let uid = robot(&api).await?;

    let (status, answer) = api.token_request("dev", "robot", json!({})).await?;
    ensure!(status == 201, "{status} {answer}");
    ensure!(
        answer["kind"] == "TokenRequest" && answer["apiVersion"] == "authentication.k8s.io/v1",
        "{answer}"
    );
    ensure!(answer["metadata"]["name"] == "robot" && answer["metadata"]["uid"] == uid.as_str(), "{answer}");
    ensure!(
        answer["spec"] == json!({"audiences": [ISSUER], "expirationSeconds": 3600, "boundObjectRef": null}),
        "{answer}"
    );
    ensure!(answer["metadata"]["managedFields"][0]["subresource"] == "token", "{answer}");
    let token = answer["status"]["token"].as_str().context("token")?;
    let claimed = claims(token)?;
    ensure!(claimed["sub"] == "system:serviceaccount:dev:robot" && claimed["iss"] == ISSUER, "{claimed}");
    ensure!(claimed["exp"].as_i64().zip(claimed["iat"].as_i64()).is_some_and(|(e, i)| e - i == 3600));
    let expires: jiff::Timestamp =
        answer["status"]["expirationTimestamp"].as_str().context("expiry")?.parse()?;
    ensure!(expires.as_second() == claimed["exp"].as_i64().unwrap_or_default(), "{answer}");
    ensure!(header(token)?["alg"] == "ES256", "{}", header(token)?);

    // Authenticated as the service account: RBAC denies what it was not granted (403, not 401).
    let (status, body) = api.bearer(token, "GET", "/api/v1/namespaces/dev/pods", &Value::Null).await?;
    ensure!(
        status == 403
            && body.contains(r#"User \"system:serviceaccount:dev:robot\" cannot list resource \"pods\""#),
        "{status} {body}"
    );
    let (status, me) = api.whoami(token).await?;
    ensure!(status == 201, "{status} {me}");
    let info = &me["status"]["userInfo"];
    ensure!(info["username"] == "system:serviceaccount:dev:robot" && info["uid"] == uid.as_str(), "{me}");
    ensure!(
        info["groups"]
            == json!(["system:serviceaccounts", "system:serviceaccounts:dev", "system:authenticated"]),
        "{me}"
    );
    let jti = claimed["jti"].as_str().context("jti")?;
    ensure!(
        info["extra"] == json!({"authentication.kubernetes.io/credential-id": [format!("JTI={jti}")]}),
        "{me}"
    );

    // kubectl create token and kubectl auth whoami, as a user would.
    let admin = common::Admin::of(&server)?;
    let kubectl_token = admin.ok(&["create", "token", "robot", "-n", "dev", "--duration", "20m"]).await?;
    let kubectl_token = kubectl_token.trim();
    ensure!(
        claims(kubectl_token)?["exp"]
            .as_i64()
            .zip(claims(kubectl_token)?["iat"].as_i64())
            .is_some_and(|(e, i)| e - i == 1200)
    );
    let kubeconfig = server.dir.path().join("robot.kubeconfig");
    write_kubeconfig(&kubeconfig, &format!("https://{}", server.address), &server.pki.ca_pem, kubectl_token)?;
    let out = common::kubectl_ok(&admin.kubectl, &kubeconfig, &["auth", "whoami", "-o", "json"]).await?;
    let me: Value = serde_json::from_str(&out)?;
    ensure!(me["status"]["userInfo"]["username"] == "system:serviceaccount:dev:robot", "{me}");
    let (_, out, _) = common::kubectl_run(
        &admin.kubectl,
        &kubeconfig,
        &["auth", "can-i", "create", "serviceaccounts/token", "-n", "dev"],
    )
    .await?;
    ensure!(out.trim() == "no", "a service account may not make tokens by default: {out}");

    // What TokenRequest refuses, in upstream's words.
    let (status, error) = api.token_request("dev", "robot", json!({"expirationSeconds": 599})).await?;
    ensure!(status == 422 && error["reason"] == "Invalid", "{status} {error}");
    ensure!(
        common::causes(&error)
            == [
                "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
            ],
        "{error}"
    );
    ensure!(
        error["message"]
            == "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes",
        "{error}"
    );
    let (status, error) = api.token_request("dev", "nobody", json!({})).await?;
    ensure!(status == 404 && error["message"] == "serviceaccounts \"nobody\" not found", "{status} {error}");
    let renamed = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {"name": "other"}, "spec": {}});
    let (status, error) =
        api.admin("POST", "/api/v1/namespaces/dev/serviceaccounts/robot/token", &renamed).await?;
    ensure!(
        status == 422
            && common::causes(&error)
                == [
                    "metadata.name: Invalid value: \"other\": must match the service account name if specified"
                ],
        "{status} {error}"
    );
    let (status, error) = api
        .token_request(
            "dev",
            "robot",
            json!({"boundObjectRef": {"kind": "ConfigMap", "apiVersion": "v1", "name": "x"}}),
        )
        .await?;
    ensure!(
        status == 400 && error["message"] == "cannot bind token to object of type /v1, Kind=ConfigMap",
        "{status} {error}"
    );

    // A user without `create serviceaccounts/token` may not ask.
    let (status, body) = api
        .bearer(token, "POST", "/api/v1/namespaces/dev/serviceaccounts/robot/token", &json!({"spec": {}}))
        .await?;
    ensure!(
        status == 403 && body.contains(r#"cannot create resource \"serviceaccounts/token\""#),
        "{status} {body}"
    );

    // TokenReview: the same authenticator, the audiences asked for honoured.
    let review = api.token_review(token, &[]).await?;
    ensure!(review["authenticated"] == true && review["audiences"] == json!([ISSUER]), "{review}");
    let review = api.token_review(token, &["https://vault"]).await?;
    ensure!(
        review["authenticated"].is_null()
            && review["error"].as_str().is_some_and(|e| e.contains("token audiences")),
        "{review}"
    );
    let vault = api.token("dev", "robot", json!({"audiences": ["https://vault"]})).await?;
    let review = api.token_review(&vault, &["https://vault"]).await?;
    ensure!(review["authenticated"] == true && review["audiences"] == json!(["https://vault"]), "{review}");
    Ok(())
}

fn write_kubeconfig(path: &Path, server: &str, ca: &str, token: &str) -> Result<()> {
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    \
             certificate-authority-data: {}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n\
             current-context: c\nusers:\n- name: u\n  user:\n    token: {token}\n",
            STANDARD.encode(ca)
        ),
    )?;
    Ok(())
}

#[tokio::test]
async fn a_pod_bound_token_ends_with_its_pod() -> Result<()> {
    let server = Server::start().await?;
    let api = Api::keel(&server);
    robot(&api).await?;
    let node = api.create("/api/v1/nodes", json!({"metadata": {"name": "n1"}})).await?;
    let pod = json!({"metadata": {"name": "web"}, "spec": {"serviceAccountName": "robot", "nodeName": "n1",
                     "containers": [{"name": "c", "image": "busybox"}]}});
    let pod = api.create("/api/v1/namespaces/dev/pods", pod).await?;
    let pod_uid = pod["metadata"]["uid"].as_str().context("uid")?;
    let bound =
        |uid: &str| json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": uid}});
    let token = api.token("dev", "robot", bound(pod_uid)).await?;
    let claimed = claims(&token)?;
    ensure!(
        claimed["kubernetes.io"]["pod"] == json!({"name": "web", "uid": pod_uid})
            && claimed["kubernetes.io"]["node"] == json!({"name": "n1", "uid": node["metadata"]["uid"]}),
        "{claimed}"
    );
    let (status, me) = api.whoami(&token).await?;
    ensure!(status == 201, "{status} {me}");
    let extra = &me["status"]["userInfo"]["extra"];
    ensure!(
        extra["authentication.kubernetes.io/pod-name"] == json!(["web"])
            && extra["authentication.kubernetes.io/pod-uid"] == json!([pod_uid])
            && extra["authentication.kubernetes.io/node-name"] == json!(["n1"])
            && extra["authentication.kubernetes.io/node-uid"] == json!([node["metadata"]["uid"]]),
        "{me}"
    );
    // Asked again: the answer now comes from the token cache.
    ensure!(api.whoami(&token).await?.0 == 201);

    // What binding refuses.
    let (status, error) = api.token_request("dev", "robot", bound("not-the-uid")).await?;
    ensure!(
        status == 409
            && error["message"]
                == "Operation cannot be fulfilled on Pod \"web\": the UID in the bound object reference (not-the-uid) does not match the UID in record. The object might have been deleted and then recreated",
        "{status} {error}"
    );
    let (status, error) = api
        .token_request(
            "dev",
            "robot",
            json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "gone"}}),
        )
        .await?;
    ensure!(status == 404 && error["message"] == "pods \"gone\" not found", "{status} {error}");
    let (status, error) = api.token_request("dev", "default", bound(pod_uid)).await?;
    ensure!(
        status == 400
            && error["message"]
                == "cannot bind token for serviceaccount \"default\" to pod running with different serviceaccount name.",
        "{status} {error}"
    );

    // The pod deleted (at once: grace period 0): its token is refused, cached or not.
    let (status, deleted) =
        api.admin("DELETE", "/api/v1/namespaces/dev/pods/web?gracePeriodSeconds=0", &Value::Null).await?;
    ensure!(status == 200, "{status} {deleted}");
    cache_caught_up(&api).await?;
    let (status, body) = api.bearer(&token, "GET", "/api/v1/namespaces/dev/pods", &Value::Null).await?;
    unauthorized(status, &body, "a deleted pod's token")?;
    let review = api.token_review(&token, &[]).await?;
    ensure!(
        review["error"] == "[invalid bearer token, service account token has been invalidated]",
        "{review}"
    );

    // A token bound to a node lives as long as the node.
    let token = api
        .token("dev", "robot", json!({"boundObjectRef": {"kind": "Node", "apiVersion": "v1", "name": "n1"}}))
        .await?;
    ensure!(api.whoami(&token).await?.0 == 201);
    let (status, _) = api.admin("DELETE", "/api/v1/nodes/n1", &Value::Null).await?;
    ensure!(status == 200);
    cache_caught_up(&api).await?;
    let (status, body) = api.bearer(&token, "GET", "/version", &Value::Null).await?;
    unauthorized(status, &body, "a deleted node's token")?;
    // And one bound to a secret, as long as the secret.
    api.create("/api/v1/namespaces/dev/secrets", json!({"metadata": {"name": "s"}})).await?;
    let token = api
        .token("dev", "robot", json!({"boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": "s"}}))
        .await?;
    ensure!(api.whoami(&token).await?.0 == 201);
    api.admin("DELETE", "/api/v1/namespaces/dev/secrets/s", &Value::Null).await?;
    cache_caught_up(&api).await?;
    let (status, body) = api.bearer(&token, "GET", "/version", &Value::Null).await?;
    unauthorized(status, &body, "a deleted secret's token")?;
    // The service account deleted and made again (another uid): its old tokens are refused.
    let token = api.token("dev", "robot", json!({})).await?;
    ensure!(api.whoami(&token).await?.0 == 201);
    api.admin("DELETE", "/api/v1/namespaces/dev/serviceaccounts/robot", &Value::Null).await?;
    api.create("/api/v1/namespaces/dev/serviceaccounts", json!({"metadata": {"name": "robot"}})).await?;
    cache_caught_up(&api).await?;
    let (status, body) = api.bearer(&token, "GET", "/version", &Value::Null).await?;
    unauthorized(status, &body, "a recreated service account's old token")?;
    Ok(())
}

fn spec<'a>(uid: &str, audiences: &'a [String], now: i64, expiration_seconds: i64) -> TokenSpec<'a> {
    TokenSpec {
        namespace: "dev",
        service_account: ObjectRef { name: "robot".into(), uid: uid.to_owned() },
        bound: Bound::default(),
        audiences,
        expiration_seconds,
        warn_after_seconds: 0,
        now,
        jti: "j".into(),
    }
}

#[tokio::test]
async fn forged_expired_foreign_and_unsigned_tokens_are_refused() -> Result<()> {
    let (server, key) = server_with_key(None).await?;
    let api = Api::keel(&server);
    let uid = robot(&api).await?;
    let audiences = vec![ISSUER.to_owned()];
    let now = now_ms() / 1000;
    let ours = issuer_of(&key, ISSUER)?;
    // Made with the server's key: accepted (the check below would not prove much otherwise).
    let good = ours.issue(&spec(&uid, &audiences, now, 3600)).map_err(anyhow::Error::msg)?;
    ensure!(api.whoami(&good).await?.0 == 201);

    let (other, _) = SigningKey::generate()?;
    let forged = issuer_of(&Arc::new(other), ISSUER)?
        .issue(&spec(&uid, &audiences, now, 3600))
        .map_err(anyhow::Error::msg)?;
    // Expired two minutes ago (beyond the minute of leeway), issued two hours ago.
    let expired = ours.issue(&spec(&uid, &audiences, now - 7200, 7080)).map_err(anyhow::Error::msg)?;
    let not_yet = ours.issue(&spec(&uid, &audiences, now + 600, 3600)).map_err(anyhow::Error::msg)?;
    let elsewhere =
        ours.issue(&spec(&uid, &["https://vault".to_owned()], now, 3600)).map_err(anyhow::Error::msg)?;
    let foreign = issuer_of(&key, "https://elsewhere")?
        .issue(&spec(&uid, &audiences, now, 3600))
        .map_err(anyhow::Error::msg)?;
    let parts: Vec<&str> = good.split('.').collect();
    let none_header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#);
    let unsigned = format!("{none_header}.{}.", parts[1]);
    let unsigned_with_signature = format!("{none_header}.{}.{}", parts[1], parts[2]);
    let mut claims_changed = claims(&good)?;
    claims_changed["sub"] = "system:serviceaccount:kube-system:default".into();
    let tampered =
        format!("{}.{}.{}", parts[0], URL_SAFE_NO_PAD.encode(claims_changed.to_string()), parts[2]);
    for (what, token) in [
        ("signed by another key", forged.as_str()),
        ("expired", &expired),
        ("not valid yet", &not_yet),
        ("for another audience", &elsewhere),
        ("of another issuer", &foreign),
        ("alg none", &unsigned),
        ("alg none with a signature", &unsigned_with_signature),
        ("claims changed", &tampered),
        ("garbage", "a.b.c"),
    ] {
        for _ in 0..2 {
            let (status, body) = api.bearer(token, "GET", "/version", &Value::Null).await?;
            unauthorized(status, &body, what)?;
        }
        let review = api.token_review(token, &[]).await?;
        ensure!(review["authenticated"].is_null() && review["error"].is_string(), "{what}: {review}");
    }
    let review = api.token_review(&expired, &[]).await?;
    ensure!(review["error"] == "[invalid bearer token, service account token has expired]", "{review}");

    // A legacy token, kept in a Secret of the service account, authenticates while the Secret holds it.
    let legacy = ours
        .issue_legacy("dev", &ObjectRef { name: "robot".into(), uid: uid.clone() }, "robot-token")
        .map_err(anyhow::Error::msg)?;
    let (status, body) = api.bearer(&legacy, "GET", "/version", &Value::Null).await?;
    unauthorized(status, &body, "a legacy token without its Secret")?;
    api.create(
        "/api/v1/namespaces/dev/secrets",
        json!({"metadata": {"name": "robot-token", "annotations": {"kubernetes.io/service-account.name": "robot"}},
               "type": "kubernetes.io/service-account-token", "data": {"token": STANDARD.encode(&legacy)}}),
    )
    .await?;
    let (status, me) = api.whoami(&legacy).await?;
    ensure!(
        status == 201 && me["status"]["userInfo"]["username"] == "system:serviceaccount:dev:robot",
        "{status} {me}"
    );
    // The use is recorded on the Secret as upstream records it (the day, UTC), once a day: a
    // second use writes nothing.
    let secret_path = "/api/v1/namespaces/dev/secrets/robot-token";
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    let (_, secret) = api.admin("GET", secret_path, &Value::Null).await?;
    ensure!(
        secret["metadata"]["labels"]["kubernetes.io/legacy-token-last-used"] == today.as_str(),
        "{secret}"
    );
    ensure!(
        secret["metadata"]["managedFields"]
            .as_array()
            .is_some_and(|m| m.iter().any(|f| f["manager"] == "kube-apiserver")),
        "{secret}"
    );
    cache_caught_up(&api).await?;
    let (status, _) = api.whoami(&legacy).await?;
    ensure!(status == 201);
    let (_, again) = api.admin("GET", secret_path, &Value::Null).await?;
    ensure!(
        again["metadata"]["resourceVersion"] == secret["metadata"]["resourceVersion"],
        "a second use the same day relabelled the Secret: {again}"
    );
    api.admin("DELETE", "/api/v1/namespaces/dev/secrets/robot-token", &Value::Null).await?;
    cache_caught_up(&api).await?;
    let (status, body) = api.bearer(&legacy, "GET", "/version", &Value::Null).await?;
    unauthorized(status, &body, "a legacy token whose Secret is gone")?;
    Ok(())
}

#[tokio::test]
async fn bootstrap_tokens_authenticate_until_they_expire() -> Result<()> {
    let server = Server::start().await?;
    let api = Api::keel(&server);
    let secret = |id: &str, expiration: &str| {
        let mut data = json!({"token-id": id, "token-secret": "0123456789abcdef", "usage-bootstrap-authentication": "true",
                              "auth-extra-groups": "system:bootstrappers:kubeadm:default-node-token"});
        if !expiration.is_empty() {
            data["expiration"] = expiration.into();
        }
        json!({"metadata": {"name": format!("bootstrap-token-{id}")}, "type": "bootstrap.kubernetes.io/token", "stringData": data})
    };
    let later = jiff::Timestamp::now().checked_add(jiff::SignedDuration::from_hours(1))?.to_string();
    let earlier = jiff::Timestamp::now().checked_sub(jiff::SignedDuration::from_hours(1))?.to_string();
    api.create("/api/v1/namespaces/kube-system/secrets", secret("abcdef", &later)).await?;
    api.create("/api/v1/namespaces/kube-system/secrets", secret("ghijkl", &earlier)).await?;
    let (status, me) = api.whoami("abcdef.0123456789abcdef").await?;
    ensure!(status == 201, "{status} {me}");
    let info = &me["status"]["userInfo"];
    ensure!(
        info["username"] == "system:bootstrap:abcdef"
            && info["groups"]
                == json!([
                    "system:bootstrappers",
                    "system:bootstrappers:kubeadm:default-node-token",
                    "system:authenticated"
                ]),
        "{me}"
    );
    // The default policy lets bootstrappers create CertificateSigningRequests.
    let (status, body) = api
        .bearer(
            "abcdef.0123456789abcdef",
            "GET",
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            &Value::Null,
        )
        .await?;
    ensure!(status == 403, "bootstrappers may create, not list: {status} {body}");
    for (what, token) in [
        ("expired", "ghijkl.0123456789abcdef"),
        ("wrong secret", "abcdef.0123456789abcdee"),
        ("no secret", "zzzzzz.0123456789abcdef"),
    ] {
        let (status, body) = api.bearer(token, "GET", "/version", &Value::Null).await?;
        unauthorized(status, &body, what)?;
    }
    Ok(())
}

#[tokio::test]
async fn issuer_discovery_for_service_accounts() -> Result<()> {
    let server = Server::start().await?;
    let api = Api::keel(&server);
    robot(&api).await?;
    let token = api.token("dev", "robot", json!({})).await?;
    let (status, head, body) =
        api.send(false, Some(&token), "GET", "/.well-known/openid-configuration", &Value::Null).await?;
    ensure!(
        status == 200 && head.to_ascii_lowercase().contains("cache-control: public, max-age=3600"),
        "{status} {head}"
    );
    let config: Value = serde_json::from_str(&body)?;
    ensure!(
        config["issuer"] == ISSUER
            && config["jwks_uri"] == format!("https://{}/openid/v1/jwks", server.address),
        "{config}"
    );
    let (status, head, body) = api
        .send_accepting(
            "application/jwk-set+json",
            false,
            Some(&token),
            "GET",
            "/openid/v1/jwks",
            &Value::Null,
        )
        .await?;
    ensure!(
        status == 200 && head.to_ascii_lowercase().contains("content-type: application/jwk-set+json"),
        "{head}"
    );
    let keys: Value = serde_json::from_str(&body)?;
    ensure!(keys["keys"][0]["kid"] == header(&token)?["kid"], "{keys}");
    // Anonymous requests are not bound to the discovery role.
    let (status, _, body) = api.send(false, None, "GET", "/openid/v1/jwks", &Value::Null).await?;
    ensure!(status == 403, "{status} {body}");
    Ok(())
}

#[test]
fn the_binary_keeps_its_signing_key_over_a_restart() -> Result<()> {
    let kubectl = keel_testbed::kubectl::minor(33)?;
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let common::KeelBinary { daemon: mut server, address, kubeconfig: admin } =
        common::keel_binary(&data, &[])?;
    let run = |kubeconfig: &Path, args: &[&str]| -> Result<String> {
        let output = kubectl.command().arg("--kubeconfig").arg(kubeconfig).args(args).output()?;
        ensure!(output.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    run(&admin, &["create", "serviceaccount", "robot"])?;
    let token = run(&admin, &["create", "token", "robot"])?.trim().to_owned();
    use std::os::unix::fs::PermissionsExt;
    let key = data.join("pki").join("sa.key");
    ensure!(std::fs::metadata(&key)?.permissions().mode() & 0o077 == 0, "sa.key is readable by others");
    let robot = dir.path().join("robot.kubeconfig");
    let ca = std::fs::read_to_string(data.join("pki").join("ca.crt"))?;
    write_kubeconfig(&robot, &format!("https://{address}"), &ca, &token)?;
    let whoami = |kubeconfig: &Path| -> Result<String> {
        let me: Value = serde_json::from_str(&run(kubeconfig, &["auth", "whoami", "-o", "json"])?)?;
        Ok(me["status"]["userInfo"]["username"].as_str().unwrap_or_default().to_owned())
    };
    ensure!(whoami(&robot)? == "system:serviceaccount:default:robot");
    let before = std::fs::read(&key)?;
    server.restart().context("restarting keel-apiserver")?;
    ensure!(std::fs::read(&key)? == before, "the key was made again");
    ensure!(whoami(&robot)? == "system:serviceaccount:default:robot", "the old token after the restart");
    Ok(())
}

/// The keys of a JSON value, recursively, with each leaf's type: what two servers' answers must
/// share when their values differ (uids, times, signatures).
fn shape(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
        Value::String(_) => "string".into(),
        Value::Number(_) => "number".into(),
        Value::Bool(_) => "bool".into(),
        Value::Null => "null".into(),
    }
}

#[tokio::test]
async fn token_shapes_match_kube_apiserver() -> Result<()> {
    let kube = tokio::task::spawn_blocking(KubeApiServer::start).await??;
    // Keel with the fixture's issuer, so that the documents can be compared value for value.
    const FIXTURE_ISSUER: &str = "https://kubernetes.default.svc";
    let (keel, keel_key) = server_with_key(Some(FIXTURE_ISSUER)).await?;
    let kube_key =
        Arc::new(SigningKey::from_pem(kube.pki().service_account_key_pem.as_bytes(), "the fixture's key")?);
    let sides = [("kube-apiserver", Api::kube(&kube), kube_key), ("keel", Api::keel(&keel), keel_key)];
    let mut answers: Vec<Vec<(String, Value)>> = Vec::new();
    for (name, api, key) in &sides {
        let mut seen = Vec::new();
        let account_uid = robot(api).await?;
        // Tokens no TokenRequest would make, signed with each server's own key.
        let ours = issuer_of(key, FIXTURE_ISSUER)?;
        let audiences = vec![FIXTURE_ISSUER.to_owned()];
        let now = now_ms() / 1000;
        let (other, _) = SigningKey::generate()?;
        for (what, token) in [
            ("expired", ours.issue(&spec(&account_uid, &audiences, now - 7200, 7080))),
            ("not valid yet", ours.issue(&spec(&account_uid, &audiences, now + 600, 3600))),
            ("of another uid", ours.issue(&spec("not-the-uid", &audiences, now, 3600))),
            (
                "signed by another key",
                issuer_of(&Arc::new(other), FIXTURE_ISSUER)?.issue(&spec(
                    &account_uid,
                    &audiences,
                    now,
                    3600,
                )),
            ),
        ] {
            let token = token.map_err(anyhow::Error::msg)?;
            let review = api.token_review(&token, &[]).await?.to_string().replace(&account_uid, "<uid>");
            seen.push((format!("review, a token {what}"), Value::String(review)));
        }
        api.create("/api/v1/nodes", json!({"metadata": {"name": "n1"}})).await?;
        let pod = json!({"metadata": {"name": "web"}, "spec": {"serviceAccountName": "robot", "nodeName": "n1",
                         "containers": [{"name": "c", "image": "busybox"}]}});
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        // kube-apiserver's ServiceAccount admission waits for its informer to see the account.
        let pod = loop {
            let (status, created) = api.admin("POST", "/api/v1/namespaces/dev/pods", &pod).await?;
            if status == 201 {
                break created;
            }
            ensure!(std::time::Instant::now() < deadline, "{name}: creating the pod: {status} {created}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let uid = pod["metadata"]["uid"].as_str().context("uid")?;
        for (what, spec) in [
            ("plain", json!({})),
            ("audiences and expiry", json!({"audiences": ["a", "b"], "expirationSeconds": 7200})),
            (
                "bound to a pod",
                json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": uid}}),
            ),
            (
                "pod-bound, 3607 s",
                json!({"expirationSeconds": 3607, "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web"}}),
            ),
            (
                "bound to a node",
                json!({"boundObjectRef": {"kind": "Node", "apiVersion": "v1", "name": "n1"}}),
            ),
        ] {
            let (status, answer) = api.token_request("dev", "robot", spec).await?;
            ensure!(status == 201, "{name} {what}: {status} {answer}");
            let token = answer["status"]["token"].as_str().context("token")?;
            seen.push((format!("{what}: response"), shape(&answer)));
            seen.push((format!("{what}: header"), shape(&header(token)?)));
            let mut claimed = claims(token)?;
            // The lifetime, not the instant.
            let lifetime =
                claimed["exp"].as_i64().unwrap_or_default() - claimed["iat"].as_i64().unwrap_or_default();
            claimed["exp"] = lifetime.into();
            seen.push((format!("{what}: claims"), shape(&claimed)));
            seen.push((
                format!("{what}: lifetime, issuer, audiences"),
                json!([lifetime, claimed["iss"], claimed["aud"]]),
            ));
            // A token for other audiences is refused (401) by both.
            let (status, me) = api.whoami(token).await?;
            seen.push((format!("{what}: whoami status"), json!(status)));
            let mut info = me["status"]["userInfo"].clone();
            info["uid"] = Value::Null;
            if let Some(extra) = info["extra"].as_object_mut() {
                extra.retain(|k, _| !k.ends_with("-uid") && !k.ends_with("credential-id"));
            }
            seen.push((format!("{what}: whoami"), info));
            let review = api.token_review(token, &["a"]).await?;
            seen.push((
                format!("{what}: review for audience a"),
                json!([review["authenticated"], review["audiences"]]),
            ));
        }
        for (what, spec) in [
            ("too short", json!({"expirationSeconds": 599})),
            ("too long", json!({"expirationSeconds": 5_000_000_000_i64})),
            (
                "another kind",
                json!({"boundObjectRef": {"kind": "ConfigMap", "apiVersion": "v1", "name": "x"}}),
            ),
            ("a missing pod", json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "gone"}})),
            (
                "another uid",
                json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": "x"}}),
            ),
        ] {
            let (status, error) = api.token_request("dev", "robot", spec).await?;
            seen.push((format!("refused, {what}"), json!([status, error])));
        }
        let (status, error) = api.token_request("dev", "nobody", json!({})).await?;
        seen.push(("refused, no such account".into(), json!([status, error])));
        let elsewhere = api.token("dev", "robot", json!({"audiences": ["a"]})).await?;
        seen.push(("review, another audience".into(), api.token_review(&elsewhere, &[]).await?));
        seen.push(("review, an unknown token".into(), api.token_review("abc", &[]).await?));
        seen.push(("review, a JWT of no issuer known".into(), api.token_review("e30.e30.e30", &[]).await?));
        for (path, accept) in [
            ("/.well-known/openid-configuration", "application/json"),
            ("/openid/v1/jwks", "application/jwk-set+json"),
        ] {
            let (status, head, text) =
                api.send_accepting(accept, true, None, "GET", path, &Value::Null).await?;
            ensure!(status == 200, "{name} {path}: {status} {text}");
            let cache_control = head.lines().find(|l| l.to_ascii_lowercase().starts_with("cache-control:"));
            seen.push((format!("{path}: cache control"), json!(cache_control.map(str::to_ascii_lowercase))));
            let (status, _, refusal) =
                api.send_accepting("text/html", true, None, "GET", path, &Value::Null).await?;
            let refusal: Value = serde_json::from_str(&refusal).unwrap_or(Value::String(refusal));
            seen.push((format!("{path}: asked for HTML"), json!([status, refusal])));
            let mut document = shape(&serde_json::from_str(&text)?);
            if let Some(jwks_uri) = document.get_mut("jwks_uri") {
                *jwks_uri = "string".into();
            }
            seen.push((path.to_owned(), document));
        }
        answers.push(seen);
    }
    let mut differences = Vec::new();
    for ((what, kube), (_, keel)) in answers[0].iter().zip(&answers[1]) {
        if kube != keel {
            differences.push(format!("{what}:\n  kube-apiserver: {kube}\n  keel:           {keel}"));
        }
    }
    ensure!(differences.is_empty(), "{} differences:\n{}", differences.len(), differences.join("\n"));
    Ok(())
}
