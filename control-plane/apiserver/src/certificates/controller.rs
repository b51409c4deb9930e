//! kube-controller-manager's csrapproving and csrsigning controllers, run inside keel-apiserver
//! over its CSR watch cache (a [`Follower`]): each CSR that changed is looked at once the burst of
//! changes has settled. The approver approves a kubelet client CSR (`system:node:<name>` in
//! `system:nodes`, client usages, the kube-apiserver-client-kubelet signer) when a
//! SubjectAccessReview lets its requestor `create certificatesigningrequests/selfnodeclient` (a
//! node renewing its own certificate) or `/nodeclient` (a bootstrap token, through the binding the
//! deployer makes, as kubeadm's `kubeadm:node-autoapprove-bootstrap`); the signer issues approved
//! CSRs of the three built-in signers with the cluster CA, or marks them Failed. What they write
//! comes back as changes; a CSR already decided is left alone.
//!
//! A CSR the controllers could not finish with is looked at again after a pause that doubles with
//! each try, as upstream requeues it rate-limited (200 ms up to 1000 s), changed or not: a write
//! that failed, or a kubelet client CSR no SubjectAccessReview allowed yet — the RBAC policy
//! follows bindings as they are written, so a binding written just before the CSR may not be in it
//! yet (upstream's authorizer lags the same way, and its approver returns an ignorable error to be
//! retried).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use keel_api::certificates::{self as csr, KUBE_APISERVER_CLIENT_KUBELET};
use keel_store::Revision;
use serde_json::{Value, json};

use super::signer::{Decision, Signer};
use crate::auth::User;
use crate::cache::{Change, Entry};
use crate::context::Context;
use crate::follow::{Follower, Following, Retries};
use crate::handlers::Handlers;
use crate::request::{RequestInfo, ResourceRequest, Verb};
use crate::writes::SubresourceBody;

/// The field manager of the controllers' writes (upstream's run in kube-controller-manager).
const MANAGER: &str = "kube-controller-manager";

/// The approver's recognizers, in upstream's order: the subresource its requestor must be allowed
/// to create, and the condition's message.
const RECOGNIZERS: &[(&str, bool, &str)] = &[
    ("selfnodeclient", true, "Auto approving self kubelet client certificate after SubjectAccessReview."),
    ("nodeclient", false, "Auto approving kubelet client certificate after SubjectAccessReview."),
];

/// The first pause before a CSR is looked at again, and the longest (upstream's certificate
/// controllers' `ItemExponentialFailureRateLimiter`).
const RETRY_BASE: Duration = Duration::from_millis(200);
const RETRY_MAX: Duration = Duration::from_secs(1000);

struct Controllers {
    handlers: Handlers,
    signer: Option<Signer>,
    /// The CSRs as the cache holds them, by key.
    objects: BTreeMap<String, Value>,
    /// The keys changed since the last pass.
    changed: BTreeSet<String>,
    /// The keys to look at again: their last pass did not finish.
    retries: Retries<String>,
}

/// Why a pass over a CSR did not finish: it is looked at again later.
#[derive(Debug)]
enum Unfinished {
    /// Recognized as a kubelet client CSR of these kinds, but no SubjectAccessReview allowed its
    /// requestor (yet): upstream's ignorable error, logged only at debug.
    NotAuthorized(Vec<&'static str>),
    /// The approval or status write failed.
    Write(keel_api::status::ApiError),
}

/// What the approver makes of a CSR.
#[derive(Debug)]
enum Approval {
    /// Approved: the CSR with its Approved condition, to write.
    Approve(Value),
    /// Recognized as these kinds, but the requestor is not allowed them.
    NotAuthorized(Vec<&'static str>),
    /// Not the approver's to decide (decided already, another signer, not a kubelet client CSR).
    NotMine,
}

/// Starts the controllers on the CSR cache, once it holds every write up to `after`; `signer` is
/// the cluster CA (none: CSRs are approved but never issued, as with csrsigning off).
pub async fn start(handlers: Handlers, signer: Option<Signer>, after: Revision) -> Option<Following> {
    let resource = keel_api::resources::find("certificates.k8s.io", "v1", "certificatesigningrequests")?;
    let cache = handlers.cache.of(resource)?;
    let controllers = Controllers {
        handlers,
        signer,
        objects: BTreeMap::new(),
        changed: BTreeSet::new(),
        retries: Retries::new(RETRY_BASE, RETRY_MAX),
    };
    Some(Following::start(vec![cache], after, controllers).await)
}

fn parse(entry: &Entry) -> Option<Value> {
    serde_json::from_slice(&entry.value).ok()
}

impl Follower for Controllers {
    fn reset(&mut self, _cache: usize, snapshot: &[Arc<Entry>]) {
        self.objects = snapshot.iter().filter_map(|e| parse(e).map(|v| (e.key.clone(), v))).collect();
        self.changed = self.objects.keys().cloned().collect();
    }

    fn change(&mut self, _cache: usize, change: &Change) {
        match change.new.as_deref().and_then(parse) {
            Some(object) => {
                self.objects.insert(change.key.clone(), object);
                self.changed.insert(change.key.clone());
            }
            None => {
                self.objects.remove(&change.key);
                self.changed.remove(&change.key);
                self.retries.forget(&change.key);
            }
        }
    }

    async fn settled(&mut self) {
        let mut keys = std::mem::take(&mut self.changed);
        keys.extend(self.retries.due(tokio::time::Instant::now()));
        for key in keys {
            let Some(object) = self.objects.get(&key) else {
                self.retries.forget(&key);
                continue;
            };
            match self.handle(object).await {
                Ok(()) => self.retries.forget(&key),
                Err(unfinished) => {
                    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
                    let pause = self.retries.failed(key, tokio::time::Instant::now());
                    match unfinished {
                        Unfinished::NotAuthorized(tried) => tracing::debug!(
                            csr = name,
                            ?tried,
                            ?pause,
                            "recognized, but the SubjectAccessReview was not approved: looked at again"
                        ),
                        Unfinished::Write(error) => {
                            tracing::warn!(csr = name, %error, ?pause, "certificate controllers: looked at again");
                        }
                    }
                }
            }
        }
    }

    fn retry_at(&self) -> Option<tokio::time::Instant> {
        self.retries.next()
    }
}

impl Controllers {
    /// One pass over a CSR: approved if due, else signed (or failed) if due.
    async fn handle(&self, object: &Value) -> Result<(), Unfinished> {
        match self.approve(object) {
            Approval::Approve(approved) => {
                return self.write(object, "approval", approved).await.map_err(Unfinished::Write);
            }
            Approval::NotAuthorized(tried) => return Err(Unfinished::NotAuthorized(tried)),
            Approval::NotMine => {}
        }
        let Some(signer) = &self.signer else { return Ok(()) };
        let mut updated = object.clone();
        match signer.decide(object, jiff::Timestamp::now()) {
            Decision::Skip => return Ok(()),
            Decision::Issue(pem) => {
                use base64::Engine as _;
                updated["status"]["certificate"] =
                    base64::engine::general_purpose::STANDARD.encode(pem).into();
            }
            Decision::Fail(reason) => {
                let failed = json!({"type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                                    "message": reason});
                push_condition(&mut updated, failed);
            }
        }
        self.write(object, "status", updated).await.map_err(Unfinished::Write)
    }

    /// csrapproving's `handle`: the CSR with its Approved condition, when one is due.
    fn approve(&self, object: &Value) -> Approval {
        let (approved, denied) = csr::approval(object);
        if csr::is_issued(object) || approved || denied {
            return Approval::NotMine;
        }
        if object.pointer("/spec/signerName").and_then(Value::as_str) != Some(KUBE_APISERVER_CLIENT_KUBELET) {
            return Approval::NotMine;
        }
        let Ok(request) = csr::parse(&csr::request_bytes(object)) else { return Approval::NotMine };
        if csr::validate_kubelet_client(&request, &csr::usages(object)).is_err() {
            return Approval::NotMine;
        }
        let user = User::from_spec(&object["spec"], "username");
        let mut tried = Vec::new();
        for (subresource, own, message) in RECOGNIZERS {
            if *own && user.name != request.common_name {
                continue;
            }
            tried.push(*subresource);
            let info = RequestInfo {
                is_resource_request: true,
                verb: "create".into(),
                api_group: "certificates.k8s.io".into(),
                api_version: "*".into(),
                resource: "certificatesigningrequests".into(),
                subresource: (*subresource).into(),
                ..RequestInfo::default()
            };
            if self.handlers.authorizer.allows(&user, &info) {
                let mut updated = object.clone();
                push_condition(
                    &mut updated,
                    json!({"type": "Approved", "status": "True", "reason": "AutoApproved", "message": message}),
                );
                return Approval::Approve(updated);
            }
        }
        if tried.is_empty() { Approval::NotMine } else { Approval::NotAuthorized(tried) }
    }

    async fn write(
        &self,
        object: &Value,
        subresource: &str,
        updated: Value,
    ) -> Result<(), keel_api::status::ApiError> {
        let Some(resource) =
            keel_api::resources::find("certificates.k8s.io", "v1", "certificatesigningrequests")
        else {
            return Ok(());
        };
        let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
        let request = ResourceRequest {
            resource,
            namespace: None,
            name: Some(name.to_owned()),
            subresource: Some(subresource.to_owned()),
            verb: Verb::Update,
        };
        let ctx = Context::internal(MANAGER);
        self.handlers
            .subresource(&ctx, &request, name, SubresourceBody::Replace(updated), false)
            .await
            .map(|_| ())
    }
}

fn push_condition(object: &mut Value, condition: Value) {
    if !object.get("status").is_some_and(Value::is_object) {
        object["status"] = json!({});
    }
    match object["status"].get_mut("conditions") {
        Some(Value::Array(conditions)) => conditions.push(condition),
        _ => object["status"]["conditions"] = json!([condition]),
    }
}
