//! kube-controller-manager's csrapproving and csrsigning controllers, run inside keel-apiserver
//! over its CSR watch cache (a [`Follower`]): each CSR that changed is looked at once the burst of
//! changes has settled. The approver approves a kubelet client CSR (`system:node:<name>` in
//! `system:nodes`, client usages, the kube-apiserver-client-kubelet signer) when a
//! SubjectAccessReview lets its requestor `create certificatesigningrequests/selfnodeclient` (a
//! node renewing its own certificate) or `/nodeclient` (a bootstrap token, through the binding the
//! deployer makes, as kubeadm's `kubeadm:node-autoapprove-bootstrap`); the signer issues approved
//! CSRs of the three built-in signers with the cluster CA, or marks them Failed. What they write
//! comes back as changes; a CSR already decided is left alone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use keel_api::certificates::{self as csr, KUBE_APISERVER_CLIENT_KUBELET};
use keel_store::Revision;
use serde_json::{Value, json};

use super::signer::{Decision, Signer};
use crate::auth::User;
use crate::cache::{Change, Entry};
use crate::context::Context;
use crate::follow::{Follower, Following};
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

struct Controllers {
    handlers: Handlers,
    signer: Option<Signer>,
    objects: BTreeMap<String, Value>,
    changed: BTreeSet<String>,
}

/// Starts the controllers on the CSR cache, once it holds every write up to `after`; `signer` is
/// the cluster CA (none: CSRs are approved but never issued, as with csrsigning off).
pub async fn start(handlers: Handlers, signer: Option<Signer>, after: Revision) -> Option<Following> {
    let resource = keel_api::resources::find("certificates.k8s.io", "v1", "certificatesigningrequests")?;
    let cache = handlers.cache.of(resource)?;
    let controllers = Controllers { handlers, signer, objects: BTreeMap::new(), changed: BTreeSet::new() };
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
            }
        }
    }

    async fn settled(&mut self) {
        for key in std::mem::take(&mut self.changed) {
            let Some(object) = self.objects.get(&key) else { continue };
            if let Err(error) = self.handle(object).await {
                let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
                tracing::warn!(csr = name, %error, "certificate controllers");
            }
        }
    }
}

impl Controllers {
    async fn handle(&self, object: &Value) -> Result<(), keel_api::status::ApiError> {
        if let Some(approved) = self.approve(object) {
            return self.write(object, "approval", approved).await;
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
        self.write(object, "status", updated).await
    }

    /// csrapproving's `handle`: the CSR with its Approved condition, when one is due.
    fn approve(&self, object: &Value) -> Option<Value> {
        let (approved, denied) = csr::approval(object);
        if csr::is_issued(object) || approved || denied {
            return None;
        }
        if object.pointer("/spec/signerName").and_then(Value::as_str) != Some(KUBE_APISERVER_CLIENT_KUBELET) {
            return None;
        }
        let request = csr::parse(&csr::request_bytes(object)).ok()?;
        csr::validate_kubelet_client(&request, &csr::usages(object)).ok()?;
        let user = User::from_spec(&object["spec"], "username");
        for (subresource, own, message) in RECOGNIZERS {
            if *own && user.name != request.common_name {
                continue;
            }
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
                return Some(updated);
            }
        }
        None
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
