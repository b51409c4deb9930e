//! CertificateSigningRequests beyond their storage: upstream's three admission plugins for them
//! (CertificateApproval, CertificateSigning, CertificateSubjectRestriction), and the controllers
//! kube-controller-manager runs for them — csrapproving (kubelet client certificates approved after
//! a SubjectAccessReview of their requestor) and csrsigning (the built-in signers, with the cluster
//! CA: [`signer`]) — which run inside keel-apiserver until keel-controller-manager exists
//! ([`controller`]).

pub mod controller;
pub mod signer;

use keel_api::certificates::{self as csr, KUBE_APISERVER_CLIENT};
use keel_api::status::{ApiError, GroupResource};
use serde_json::Value;

use crate::auth::User;
use crate::authorization::Authorizer;
use crate::request::{RequestInfo, ResourceRequest};

fn is_csr(request: &ResourceRequest) -> bool {
    request.resource.group == "certificates.k8s.io" && request.resource.plural == "certificatesigningrequests"
}

/// `IsAuthorizedForSignerName`: `verb` on `signers` named for the signer, or for its domain's
/// wildcard (`example.com/*`).
pub fn authorized_for_signer(authorizer: &Authorizer, user: &User, verb: &str, signer: &str) -> bool {
    let attributes = |name: String| RequestInfo {
        is_resource_request: true,
        verb: verb.into(),
        api_group: "certificates.k8s.io".into(),
        api_version: "*".into(),
        resource: "signers".into(),
        name,
        ..RequestInfo::default()
    };
    let domain = signer.split('/').next().unwrap_or_default();
    authorizer.allows(user, &attributes(signer.to_owned()))
        || authorizer.allows(user, &attributes(format!("{domain}/*")))
}

/// The admission plugins, on a write of a CSR: `old` is `None` on create.
pub fn admit(
    authorizer: &Authorizer,
    user: &User,
    request: &ResourceRequest,
    old: Option<&Value>,
    new: &Value,
) -> Result<(), ApiError> {
    if !is_csr(request) {
        return Ok(());
    }
    let name = new.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
    let forbidden = |detail: String| ApiError::Forbidden {
        resource: GroupResource::new("certificates.k8s.io", "certificatesigningrequests"),
        name: name.to_owned(),
        detail,
    };
    let signer_of = |object: &Value| {
        object.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or_default().to_owned()
    };
    match (request.subresource.as_deref(), old) {
        // CertificateSubjectRestriction: no system:masters certificates from the client signer.
        (None, None) if signer_of(new) == KUBE_APISERVER_CLIENT => {
            let parsed = csr::parse(&csr::request_bytes(new))
                .map_err(|e| forbidden(format!("failed to parse CSR: {e}")))?;
            if parsed.organizations.iter().any(|o| o == crate::auth::SYSTEM_PRIVILEGED_GROUP) {
                return Err(forbidden(format!(
                    "use of {KUBE_APISERVER_CLIENT} signer with system:masters group is not allowed"
                )));
            }
            Ok(())
        }
        // CertificateApproval: approving or denying takes `approve` on the signer.
        (Some("approval"), Some(old)) => {
            let signer = signer_of(old);
            if authorized_for_signer(authorizer, user, "approve", &signer) {
                Ok(())
            } else {
                Err(forbidden(format!(
                    "user not permitted to approve requests with signerName {}",
                    keel_api::labels::go_quote(&signer)
                )))
            }
        }
        // CertificateSigning: a status write that changes the certificate or the conditions
        // takes `sign` on the signer.
        (Some("status"), Some(old)) => {
            let unchanged = |path: &str| old.pointer(path) == new.pointer(path);
            if unchanged("/status/certificate") && unchanged("/status/conditions") {
                return Ok(());
            }
            let signer = signer_of(old);
            if authorized_for_signer(authorizer, user, "sign", &signer) {
                Ok(())
            } else {
                Err(forbidden(format!(
                    "user not permitted to sign requests with signerName {}",
                    keel_api::labels::go_quote(&signer)
                )))
            }
        }
        _ => Ok(()),
    }
}
