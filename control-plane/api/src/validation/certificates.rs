//! certificates.k8s.io/v1 CertificateSigningRequests (upstream's `pkg/apis/certificates/validation`,
//! 1.34): the request parses and is signed by its own key, usages are given, known and unique, the
//! signer name is a domain and a path, conditions are well formed, an issued certificate is PEM
//! certificates; updates never remove an Approved, Denied or Failed condition, only `/approval`
//! adds or changes Approved and Denied, and only `/status` sets the certificate, once.

use std::collections::BTreeSet;

use serde_json::Value;
use x509_parser::pem::Pem;

use super::{
    FieldError, duplicate, forbidden, index, invalid, invalid_str, list, names, not_supported, required,
    too_long,
};
use crate::certificates::{self, LEGACY_UNKNOWN, USAGES};

/// Which write of a CSR is validated: each may change a different part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// The main resource: metadata only.
    Update,
    /// `/status`: the certificate (and conditions other than Approved and Denied).
    Status,
    /// `/approval`: the Approved and Denied conditions.
    Approval,
}

/// What upstream relaxes for data stored before a rule existed (`getValidationOptions`).
#[derive(Debug, Default, Clone, Copy)]
struct Options {
    both_approved_and_denied: bool,
    legacy_signer: bool,
    duplicate_condition_types: bool,
    empty_condition_type: bool,
    arbitrary_certificate: bool,
    unknown_usages: bool,
    duplicate_usages: bool,
}

fn conditions(object: &Value) -> &[Value] {
    object.pointer("/status/conditions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

fn condition_type(condition: &Value) -> &str {
    condition.get("type").and_then(Value::as_str).unwrap_or_default()
}

fn certificate(object: &Value) -> &str {
    object.pointer("/status/certificate").and_then(Value::as_str).unwrap_or_default()
}

fn usages(object: &Value) -> Vec<&str> {
    list(object.get("spec").unwrap_or(&Value::Null), "usages")
        .iter()
        .map(|u| u.as_str().unwrap_or_default())
        .collect()
}

fn options(new: &Value, old: Option<&Value>) -> Options {
    let Some(old) = old else { return Options::default() };
    let types: Vec<&str> = conditions(old).iter().map(condition_type).collect();
    let (mut seen, mut seen_usages) = (BTreeSet::new(), BTreeSet::new());
    Options {
        both_approved_and_denied: types.contains(&"Approved") && types.contains(&"Denied"),
        legacy_signer: old.pointer("/spec/signerName").and_then(Value::as_str) == Some(LEGACY_UNKNOWN),
        duplicate_condition_types: !types.iter().all(|t| seen.insert(*t)),
        empty_condition_type: types.contains(&""),
        arbitrary_certificate: certificate(new) == certificate(old)
            || validate_certificate(certificate(old)).is_err(),
        unknown_usages: usages(old).iter().any(|u| !USAGES.contains(u)),
        duplicate_usages: !usages(old).iter().all(|u| seen_usages.insert(*u)),
    }
}

/// `validateCertificate`: empty, or PEM `CERTIFICATE` blocks only (no headers), each a
/// certificate.
fn validate_certificate(base64: &str) -> Result<(), String> {
    use base64::Engine as _;
    let pem = base64::engine::general_purpose::STANDARD.decode(base64).unwrap_or_default();
    if pem.is_empty() {
        return Ok(());
    }
    let mut blocks = 0;
    for block in Pem::iter_from_buffer(&pem) {
        let Ok(block) = block else { break };
        if block.label != "CERTIFICATE" {
            return Err(format!(
                "only CERTIFICATE PEM blocks are allowed, found {}",
                crate::labels::go_quote(&block.label)
            ));
        }
        blocks += 1;
        if let Err(e) = x509_parser::parse_x509_certificate(&block.contents) {
            return Err(format!("x509: malformed certificate: {e}"));
        }
    }
    if blocks == 0 {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    Ok(())
}

/// upstream's `ValidateSignerName`.
fn signer_name(path: &str, signer: &str) -> Vec<FieldError> {
    if signer.is_empty() {
        return vec![required(path, "")];
    }
    let segments: Vec<&str> = signer.split('/').collect();
    let [domain, signer_path] = segments[..] else {
        return vec![invalid_str(
            path,
            signer,
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        )];
    };
    let mut errors = Vec::new();
    if domain.len() > 253 {
        errors.push(too_long(path, 253));
    }
    let labels: Vec<&str> = domain.split('.').collect();
    if let Some((label, messages)) =
        labels.iter().map(|l| (l, names::dns1123_label(l))).find(|(_, m)| !m.is_empty())
    {
        for message in messages {
            errors.push(invalid_str(
                path,
                domain,
                &format!("validating label {}: {message}", crate::labels::go_quote(label)),
            ));
        }
    }
    if labels.len() < 2 {
        errors.push(invalid_str(
            path,
            domain,
            "should be a domain with at least two segments separated by dots",
        ));
    }
    let parts = signer_path.split('.');
    if let Some((label, messages)) =
        parts.map(|l| (l, names::dns1123_subdomain(l))).find(|(_, m)| !m.is_empty())
    {
        for message in messages {
            errors.push(invalid_str(
                path,
                signer_path,
                &format!("validating label {}: {message}", crate::labels::go_quote(label)),
            ));
        }
    }
    if signer.len() > 253 + 253 + 63 + 1 + 1 {
        errors.push(too_long(path, 253 + 253 + 63 + 1 + 1));
    }
    errors
}

fn validate_conditions(object: &Value, options: Options) -> Vec<FieldError> {
    let path = "status.conditions";
    let mut errors = Vec::new();
    let mut seen = BTreeSet::new();
    let (mut approved, mut denied) = (false, false);
    for (i, condition) in conditions(object).iter().enumerate() {
        let kind = condition_type(condition);
        let at = index(path, i);
        if !options.empty_condition_type && kind.is_empty() {
            errors.push(required(&format!("{at}.type"), ""));
        }
        let allowed: &[&str] = if matches!(kind, "Approved" | "Denied" | "Failed") {
            &["True"]
        } else {
            &["False", "True", "Unknown"]
        };
        match condition.get("status").and_then(Value::as_str).unwrap_or_default() {
            "" => errors.push(required(&format!("{at}.status"), "")),
            status if !allowed.contains(&status) => {
                errors.push(not_supported(&format!("{at}.status"), status, allowed));
            }
            _ => {}
        }
        if !options.both_approved_and_denied {
            let exclusive = "Approved and Denied conditions are mutually exclusive";
            match kind {
                "Approved" => {
                    approved = true;
                    if denied {
                        errors.push(invalid_str(path, kind, exclusive));
                    }
                }
                "Denied" => {
                    denied = true;
                    if approved {
                        errors.push(invalid_str(path, kind, exclusive));
                    }
                }
                _ => {}
            }
        }
        if !options.duplicate_condition_types && !seen.insert(kind) {
            errors.push(duplicate(&format!("{at}.type"), kind));
        }
    }
    errors
}

fn validate(object: &Value, options: Options) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = object.get("spec").unwrap_or(&Value::Null);
    let request = certificates::request_bytes(object);
    if let Err(message) = certificates::parse(&request).and_then(|r| certificates::check_signature(&r)) {
        let shown = spec.get("request").cloned().unwrap_or(Value::String(String::new()));
        errors.push(invalid("spec.request", &shown, &message));
    }
    let usages = usages(object);
    if usages.is_empty() {
        errors.push(required("spec.usages", ""));
    }
    if !options.unknown_usages {
        for (i, usage) in usages.iter().enumerate() {
            if !USAGES.contains(usage) {
                errors.push(not_supported(&index("spec.usages", i), usage, USAGES));
            }
        }
    }
    if !options.duplicate_usages {
        let mut seen = BTreeSet::new();
        for (i, usage) in usages.iter().enumerate() {
            if !seen.insert(*usage) {
                errors.push(duplicate(&index("spec.usages", i), usage));
            }
        }
    }
    let signer = spec.get("signerName").and_then(Value::as_str).unwrap_or_default();
    if !options.legacy_signer && signer == LEGACY_UNKNOWN {
        errors.push(invalid_str(
            "spec.signerName",
            signer,
            "the legacy signerName is not allowed via this API version",
        ));
    } else {
        errors.extend(signer_name("spec.signerName", signer));
    }
    if let Some(seconds) = spec.get("expirationSeconds").and_then(Value::as_i64)
        && seconds < 600
    {
        errors.push(invalid(
            "spec.expirationSeconds",
            &seconds.into(),
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    errors.extend(validate_conditions(object, options));
    if !options.arbitrary_certificate
        && let Err(message) = validate_certificate(certificate(object))
    {
        errors.push(invalid_str("status.certificate", "<certificate data>", &message));
    }
    errors
}

/// `ValidateCertificateSigningRequestCreate`.
pub(super) fn certificate_signing_request(object: &Value) -> Vec<FieldError> {
    validate(object, options(object, None))
}

/// `ValidateCertificateSigningRequest{,Status,Approval}Update` less ObjectMeta's update rules
/// (which the caller adds).
pub fn certificate_signing_request_update(old: &Value, new: &Value, write: Write) -> Vec<FieldError> {
    let mut errors = validate(new, options(new, Some(old)));
    let of = |object: &'_ Value, kind: &str| -> Vec<Value> {
        conditions(object).iter().filter(|c| condition_type(c) == kind).cloned().collect()
    };
    for kind in ["Approved", "Denied", "Failed"] {
        if of(new, kind).len() < of(old, kind).len() {
            errors.push(forbidden(
                "status.conditions",
                &format!("updates may not remove a condition of type {}", crate::labels::go_quote(kind)),
            ));
        }
    }
    if write != Write::Approval {
        for kind in ["Approved", "Denied"] {
            let (before, after) = (of(old, kind), of(new, kind));
            let quoted = crate::labels::go_quote(kind);
            if after.len() > before.len() {
                errors.push(forbidden(
                    "status.conditions",
                    &format!("updates may not add a condition of type {quoted}"),
                ));
            } else if after.len() == before.len() && before != after {
                errors.push(forbidden(
                    "status.conditions",
                    &format!("updates may not modify a condition of type {quoted}\n{}", Value::Array(after)),
                ));
            }
        }
    }
    if certificate(new) != certificate(old) {
        if write != Write::Status {
            errors.push(forbidden("status.certificate", "updates may not set certificate content"));
        } else if !certificate(old).is_empty() {
            errors
                .push(forbidden("status.certificate", "updates may not modify existing certificate content"));
        }
    }
    errors
}
