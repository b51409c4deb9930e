//! certificates.k8s.io/v1's printer: certificatesigningrequests (upstream's
//! `printCertificateSigningRequest` and `extractCSRStatus`).

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::duration::human_duration;
use super::value::{age, array_at, name, opt_int, str_at};
use super::{AGE, Column, NAME, Row};

const SIGNER_NAME: &str = "Requested signer for the request. It is a qualified name in the form: `scope-hostname.io/name`. If empty, it will be defaulted:\n 1. If it's a kubelet client certificate, it is assigned\n    \"kubernetes.io/kube-apiserver-client-kubelet\".\n 2. If it's a kubelet serving certificate, it is assigned\n    \"kubernetes.io/kubelet-serving\".\n 3. Otherwise, it is assigned \"kubernetes.io/legacy-unknown\".\nDistribution of trust for signers happens out of band. You can select on this field using `spec.signerName`.";
const REQUEST: &str = "Base64-encoded PKCS#10 CSR data";
const EXPIRATION_SECONDS: &str = "expirationSeconds is the requested duration of validity of the issued certificate. The certificate signer may issue a certificate with a different validity duration so a client must check the delta between the notBefore and and notAfter fields in the issued certificate to determine the actual duration.\n\nThe v1.22+ in-tree implementations of the well-known Kubernetes signers will honor this field as long as the requested duration is not greater than the maximum duration they will honor per the --cluster-signing-duration CLI flag to the Kubernetes controller manager.\n\nCertificate signers may not honor this field for various reasons:\n\n  1. Old signer that is unaware of the field (such as the in-tree\n     implementations prior to v1.22)\n  2. Signer whose configured maximum is shorter than the requested duration\n  3. Signer whose configured minimum is longer than the requested duration\n\nThe minimum valid value for expirationSeconds is 600, i.e. 10 minutes.";
const CONDITIONS: &str = "Conditions applied to the request, such as approval or denial.";

/// Upstream documents these columns with the v1beta1 types' field docs.
pub(super) const CERTIFICATE_SIGNING_REQUEST_COLUMNS: &[Column] = &[
    NAME,
    AGE,
    Column::string("SignerName", SIGNER_NAME),
    Column::string("Requestor", REQUEST),
    Column::string("RequestedDuration", EXPIRATION_SECONDS),
    Column::string("Condition", CONDITIONS),
];

/// A CSR's row: signer (`<none>` when empty), requestor, requested duration (`<none>` when
/// unset) and the condition summary.
pub(super) fn certificate_signing_request(object: &Value, now: Timestamp) -> Row {
    let signer = match str_at(object, &["spec", "signerName"]) {
        "" => "<none>",
        signer => signer,
    };
    let duration = opt_int(object, &["spec", "expirationSeconds"])
        .map_or_else(|| "<none>".to_owned(), |s| human_duration(SignedDuration::from_secs(s)));
    Row::new(vec![
        json!(name(object)),
        json!(age(object, now)),
        json!(signer),
        json!(str_at(object, &["spec", "username"])),
        json!(duration),
        json!(condition(object)),
    ])
}

/// `extractCSRStatus`: Denied over Approved over Pending, then `,Failed` and `,Issued`.
pub fn condition(object: &Value) -> String {
    let has =
        |kind: &str| array_at(object, &["status", "conditions"]).iter().any(|c| str_at(c, &["type"]) == kind);
    let mut status = if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    }
    .to_owned();
    if has("Failed") {
        status.push_str(",Failed");
    }
    if !str_at(object, &["status", "certificate"]).is_empty() {
        status.push_str(",Issued");
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_as_upstream_prints_them() {
        let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let csr = json!({"metadata": {"name": "node-csr-1", "creationTimestamp": "2026-01-01T00:00:00Z"},
                         "spec": {"signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                                  "username": "system:bootstrap:abcdef", "expirationSeconds": 86400}});
        assert_eq!(
            certificate_signing_request(&csr, now).cells,
            [
                json!("node-csr-1"),
                json!("60m"),
                json!("kubernetes.io/kube-apiserver-client-kubelet"),
                json!("system:bootstrap:abcdef"),
                json!("24h"),
                json!("Pending")
            ]
        );
        let bare = json!({"metadata": {"name": "x"}});
        let cells = certificate_signing_request(&bare, now).cells;
        assert_eq!((&cells[2], &cells[4]), (&json!("<none>"), &json!("<none>")));
        let issued = json!({"status": {"certificate": "LS0t", "conditions": [
            {"type": "Approved", "status": "True"}, {"type": "Failed", "status": "True"}]}});
        assert_eq!(condition(&issued), "Approved,Failed,Issued");
        let both = json!({"status": {"conditions": [{"type": "Approved"}, {"type": "Denied"}]}});
        assert_eq!(condition(&both), "Denied");
    }
}
