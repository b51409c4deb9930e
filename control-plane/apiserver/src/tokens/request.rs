//! `POST .../serviceaccounts/<name>/token`: a TokenRequest answered with a signed token, as
//! upstream's TokenREST — the body's name, namespace and uid checked against the URL and the
//! ServiceAccount, audiences defaulted to the API's, `expirationSeconds` defaulted to an hour and
//! validated (at least 10 minutes, at most 2^32 seconds), a bound Pod (its service account must be
//! the token's; its node named in the token), Secret or Node looked up and its uid checked,
//! `--service-account-max-token-expiration` applied with a warning, and a pod-bound token asked for
//! 3607 s extended to a year with `warnafter` (`--service-account-extend-token-expiration`).
//! Nothing is stored. The objects are read from the store, as upstream's registry reads them.

use keel_api::resources;
use keel_api::status::{ApiError, FieldError, GroupResource};
use serde_json::{Value, json};

use super::jwt::ObjectRef;
use super::service_account::{
    Bound, EXTENDED_EXPIRATION_SECONDS, ServiceAccounts, TokenSpec, WARN_ONLY_EXPIRATION_SECONDS,
};
use crate::context::Context;
use crate::handlers::{Handlers, store_error};

const GROUP: &str = "authentication.k8s.io";
const KIND: &str = "TokenRequest";
/// upstream's IssuedCredentialIDAuditAnnotationKey.
const ISSUED_CREDENTIAL_ID: &str = "authentication.kubernetes.io/issued-credential-id";
/// upstream's MinTokenAgeSec.
pub const MIN_EXPIRATION_SECONDS: i64 = 10 * 60;
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
const DEFAULT_EXPIRATION_SECONDS: i64 = 60 * 60;

/// A Unix time as metav1.Time writes it.
fn time(seconds: i64) -> String {
    jiff::Timestamp::from_second(seconds)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// upstream's ValidateTokenRequest.
pub fn validate(expiration_seconds: i64) -> Vec<FieldError> {
    let mut causes = Vec::new();
    if expiration_seconds < MIN_EXPIRATION_SECONDS {
        causes.push(FieldError::invalid(
            "spec.expirationSeconds",
            &json!(expiration_seconds),
            "may not specify a duration less than 10 minutes",
        ));
    }
    if expiration_seconds > MAX_EXPIRATION_SECONDS {
        causes.push(FieldError::invalid(
            "spec.expirationSeconds",
            &json!(expiration_seconds),
            "may not specify a duration larger than 2^32 seconds",
        ));
    }
    causes
}

impl Handlers {
    /// An object read from the store, `None` when there is none.
    async fn stored(
        &self,
        plural: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, ApiError> {
        let resource =
            resources::find("", "v1", plural).ok_or_else(|| ApiError::Internal(format!("no {plural}")))?;
        let key = crate::objects::key(resource, namespace, name);
        match self.store.get(&key).await.map_err(store_error)? {
            Some(kv) => Ok(Some(crate::objects::from_storage(&kv.value, kv.mod_revision)?)),
            None => Ok(None),
        }
    }

    async fn existing(&self, plural: &str, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        self.stored(plural, namespace, name).await?.ok_or_else(|| ApiError::not_found("", plural, name))
    }

    /// Answers a TokenRequest for `namespace/name` at `now` (Unix seconds).
    pub async fn request_token(
        &self,
        ctx: &Context,
        accounts: &ServiceAccounts,
        namespace: &str,
        name: &str,
        mut body: Value,
        now: i64,
    ) -> Result<Value, ApiError> {
        // The status is the server's to fill (clients send an empty one: protobuf has no null).
        if let Some(map) = body.as_object_mut() {
            map.remove("status");
        }
        // The body must be a TokenRequest (a wrong type is 400, as decoding refuses it upstream).
        serde_json::from_value::<k8s_openapi::api::authentication::v1::TokenRequest>(body.clone()).map_err(
            |e| {
                ApiError::BadRequest(format!(
                    "TokenRequest in version \"v1\" cannot be handled as a TokenRequest: {e}"
                ))
            },
        )?;
        // Ownership of what the request set (its defaults included), as upstream's create handler
        // records it before the REST handler fills the rest in.
        if body.pointer("/spec/expirationSeconds").is_none_or(Value::is_null) {
            let spec = body.as_object_mut().map(|map| map.entry("spec").or_insert_with(|| json!({})));
            if let Some(spec) = spec.and_then(Value::as_object_mut) {
                spec.insert("expirationSeconds".into(), DEFAULT_EXPIRATION_SECONDS.into());
            }
        }
        let managed_fields = {
            let mut recorded = body.clone();
            if let Some(map) = recorded.as_object_mut() {
                map.entry("metadata").or_insert_with(|| json!({}));
            }
            let write = keel_api::managed_fields::Context::builtin(
                &format!("{GROUP}/v1"),
                KIND,
                "token",
                false,
                time(now),
            );
            // The live object is Go's zero TokenRequest as JSON (its spec and status structs
            // present, the audiences and boundObjectRef null), so that only the fields under
            // them count as set, as upstream records a create.
            let zero =
                json!({"metadata": {}, "spec": {"audiences": null, "boundObjectRef": null}, "status": {}});
            keel_api::managed_fields::update(&write, Some(&zero), &mut recorded, ctx.manager());
            recorded.pointer("/metadata/managedFields").cloned()
        };
        let invalid = |field: &str, value: &str, detail: &str| {
            ApiError::invalid(GROUP, KIND, name, vec![FieldError::invalid(field, &json!(value), detail)])
        };
        let (given_name, given_namespace) =
            (text(&body, "/metadata/name"), text(&body, "/metadata/namespace"));
        if !given_name.is_empty() && given_name != name {
            return Err(invalid(
                "metadata.name",
                given_name,
                "must match the service account name if specified",
            ));
        }
        if !given_namespace.is_empty() && given_namespace != namespace {
            return Err(invalid(
                "metadata.namespace",
                given_namespace,
                "must match the service account namespace if specified",
            ));
        }
        let account = self.existing("serviceaccounts", Some(namespace), name).await?;
        let account_uid = text(&account, "/metadata/uid").to_owned();
        let given_uid = text(&body, "/metadata/uid");
        if !given_uid.is_empty() && given_uid != account_uid {
            return Err(ApiError::Conflict {
                resource: GroupResource::new(GROUP, KIND),
                name: name.to_owned(),
                detail: format!(
                    "the UID in the token request ({given_uid}) does not match the UID of the service account ({account_uid})"
                ),
            });
        }
        let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
        let mut audiences: Vec<String> = spec["audiences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        if audiences.is_empty() {
            audiences = accounts.api_audiences.clone();
        }
        let mut expiration = spec["expirationSeconds"].as_i64().unwrap_or(DEFAULT_EXPIRATION_SECONDS);
        let causes = validate(expiration);
        if !causes.is_empty() {
            return Err(ApiError::invalid(GROUP, KIND, "", causes));
        }

        let mut bound = Bound::default();
        let reference = spec.get("boundObjectRef").filter(|r| !r.is_null());
        if let Some(reference) = reference {
            let (kind, api_version) = (text(reference, "/kind"), text(reference, "/apiVersion"));
            let (ref_name, ref_uid) = (text(reference, "/name"), text(reference, "/uid"));
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let uid = match (group, kind) {
                ("", "Pod") => {
                    let pod = self.existing("pods", Some(namespace), ref_name).await?;
                    if text(&pod, "/spec/serviceAccountName") != name {
                        return Err(ApiError::BadRequest(format!(
                            "cannot bind token for serviceaccount {name:?} to pod running with different serviceaccount name."
                        )));
                    }
                    let node_name = text(&pod, "/spec/nodeName");
                    if !node_name.is_empty() {
                        // A node not found is named without a uid, as upstream does.
                        let node = self.stored("nodes", None, node_name).await?;
                        let uid =
                            node.as_ref().map(|n| text(n, "/metadata/uid").to_owned()).unwrap_or_default();
                        bound.node = Some(ObjectRef { name: node_name.to_owned(), uid });
                    }
                    let uid = text(&pod, "/metadata/uid").to_owned();
                    bound.pod = Some(ObjectRef { name: ref_name.to_owned(), uid: uid.clone() });
                    uid
                }
                ("", "Node") => {
                    let node = self.existing("nodes", None, ref_name).await?;
                    let uid = text(&node, "/metadata/uid").to_owned();
                    bound.node = Some(ObjectRef { name: ref_name.to_owned(), uid: uid.clone() });
                    uid
                }
                ("", "Secret") => {
                    let secret = self.existing("secrets", Some(namespace), ref_name).await?;
                    let uid = text(&secret, "/metadata/uid").to_owned();
                    bound.secret = Some(ObjectRef { name: ref_name.to_owned(), uid: uid.clone() });
                    uid
                }
                _ => {
                    return Err(ApiError::BadRequest(format!(
                        "cannot bind token to object of type {group}/{version}, Kind={kind}"
                    )));
                }
            };
            if !ref_uid.is_empty() && ref_uid != uid {
                return Err(ApiError::Conflict {
                    resource: GroupResource::new(group, kind),
                    name: ref_name.to_owned(),
                    detail: format!(
                        "the UID in the bound object reference ({ref_uid}) does not match the UID in record. The object might have been deleted and then recreated"
                    ),
                });
            }
        }

        let max = accounts.max_expiration_seconds;
        if max > 0 && expiration > max {
            ctx.warn(format!("requested expiration of {expiration} seconds shortened to {max} seconds"));
            expiration = max;
        }
        let mut signed_for = expiration;
        let mut warn_after = 0;
        let kube_audiences = audiences.iter().all(|a| accounts.api_audiences.contains(a));
        if accounts.extend_expiration
            && bound.pod.is_some()
            && expiration == WARN_ONLY_EXPIRATION_SECONDS
            && kube_audiences
        {
            warn_after = expiration;
            signed_for = EXTENDED_EXPIRATION_SECONDS;
        }
        let jti = uuid::Uuid::new_v4().to_string();
        let token = accounts
            .issue(&TokenSpec {
                namespace,
                service_account: ObjectRef { name: name.to_owned(), uid: account_uid.clone() },
                bound,
                audiences: &audiences,
                expiration_seconds: signed_for,
                warn_after_seconds: warn_after,
                now,
                jti: jti.clone(),
            })
            .map_err(ApiError::Internal)?;
        // As upstream's TokenREST: the token's credential ID in the request's audit event.
        ctx.audit.annotate(ISSUED_CREDENTIAL_ID, &format!("JTI={jti}"));

        let mut metadata = json!({
            "name": name, "namespace": namespace, "uid": account_uid, "creationTimestamp": time(now),
        });
        if let Some(managed_fields) = managed_fields {
            metadata["managedFields"] = managed_fields;
        }
        // No boundObjectRef is a null one, as upstream writes its pointer.
        let spec_out = json!({"audiences": audiences, "expirationSeconds": expiration,
                              "boundObjectRef": reference.cloned().unwrap_or(Value::Null)});
        if let Some(map) = body.as_object_mut() {
            map.insert("kind".into(), KIND.into());
            map.insert("apiVersion".into(), format!("{GROUP}/v1").into());
            map.insert("metadata".into(), metadata);
            map.insert("spec".into(), spec_out);
            map.insert(
                "status".into(),
                json!({"token": token, "expirationTimestamp": time(now + expiration)}),
            );
        }
        Ok(body)
    }
}
