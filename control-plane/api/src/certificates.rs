//! certificates.k8s.io/v1 CertificateSigningRequests as kube-apiserver 1.34 and its controllers read
//! them: the PKCS#10 request inside (upstream's `ParseCSR` and `CheckSignature`), the built-in
//! signers' rules for what they sign (`ValidateKubeletClientCSR`, `ValidateKubeletServingCSR`, the
//! kube-apiserver-client signer's usages), the approval conditions, and the writes of the strategy
//! (the requestor set on create; `/status` and `/approval` each changing only their part). No IO.

use std::collections::BTreeSet;
use std::io::Cursor;
use std::net::IpAddr;

use base64::Engine as _;
use serde_json::{Map, Value, json};
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::pem::Pem;
use x509_parser::prelude::FromDer;

/// Signs client certificates kube-apiserver honours (any subject but system:masters).
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
/// Signs kubelets' client certificates (`system:node:<name>` in `system:nodes`).
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// Signs kubelets' serving certificates.
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
/// certificates.k8s.io/v1beta1's default signer, refused by v1.
pub const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";

/// Every usage a request may name (upstream's `allValidUsages`), sorted as its error lists them.
pub const USAGES: &[&str] = &[
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// What the signers and the approver read of a PKCS#10 request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The DER of the whole request, for signing.
    pub der: Vec<u8>,
    /// The subject's common name (the last one, as Go's pkix.Name keeps it).
    pub common_name: String,
    /// The subject's organizations, in order.
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub email_addresses: Vec<String>,
    pub uris: Vec<String>,
}

/// The raw bytes of `spec.request` (base64 in JSON); empty when absent or not base64.
pub fn request_bytes(object: &Value) -> Vec<u8> {
    let text = object.pointer("/spec/request").and_then(Value::as_str).unwrap_or_default();
    base64::engine::general_purpose::STANDARD.decode(text).unwrap_or_default()
}

/// upstream's `ParseCSR`: the first PEM block must be a `CERTIFICATE REQUEST` holding a PKCS#10
/// request. The signature is not checked here ([`check_signature`]).
pub fn parse(pem: &[u8]) -> Result<Request, String> {
    let block = Pem::read(Cursor::new(pem)).ok().map(|(block, _)| block);
    let Some(block) = block.filter(|b| b.label == "CERTIFICATE REQUEST") else {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    };
    let (rest, request) = X509CertificationRequest::from_der(&block.contents)
        .map_err(|e| format!("x509: malformed certificate request: {e}"))?;
    if !rest.is_empty() {
        return Err("x509: trailing data".into());
    }
    let info = &request.certification_request_info;
    let text = |value: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        value.as_str().map(str::to_owned).unwrap_or_default()
    };
    let mut parsed = Request {
        der: block.contents.clone(),
        common_name: info.subject.iter_common_name().last().map(text).unwrap_or_default(),
        organizations: info.subject.iter_organization().map(text).collect(),
        dns_names: Vec::new(),
        ip_addresses: Vec::new(),
        email_addresses: Vec::new(),
        uris: Vec::new(),
    };
    for extension in request.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(names) = extension else { continue };
        for name in &names.general_names {
            match name {
                GeneralName::DNSName(dns) => parsed.dns_names.push((*dns).to_owned()),
                GeneralName::RFC822Name(email) => parsed.email_addresses.push((*email).to_owned()),
                GeneralName::URI(uri) => parsed.uris.push((*uri).to_owned()),
                GeneralName::IPAddress(bytes) => {
                    if let Ok(v4) = <[u8; 4]>::try_from(*bytes) {
                        parsed.ip_addresses.push(IpAddr::from(v4));
                    } else if let Ok(v6) = <[u8; 16]>::try_from(*bytes) {
                        parsed.ip_addresses.push(IpAddr::from(v6));
                    }
                }
                _ => {}
            }
        }
    }
    Ok(parsed)
}

/// `CheckSignature`: the request is signed by the key it carries. Failures are worded as Go's
/// crypto packages word them.
pub fn check_signature(request: &Request) -> Result<(), String> {
    let (_, parsed) =
        X509CertificationRequest::from_der(&request.der).map_err(|e| format!("x509: malformed: {e}"))?;
    if parsed.verify_signature().is_ok() {
        return Ok(());
    }
    let algorithm = parsed.certification_request_info.subject_pki.algorithm.algorithm.to_id_string();
    Err(match algorithm.as_str() {
        // id-ecPublicKey
        "1.2.840.10045.2.1" => "x509: ECDSA verification failure",
        // rsaEncryption
        "1.2.840.113549.1.1.1" => "crypto/rsa: verification error",
        // id-Ed25519
        "1.3.101.112" => "x509: Ed25519 verification failure",
        _ => "x509: cannot verify signature: algorithm unimplemented",
    }
    .to_owned())
}

/// `spec.usages` in order.
pub fn usage_list(object: &Value) -> Vec<String> {
    object
        .pointer("/spec/usages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// `spec.usages` as a set.
pub fn usages(object: &Value) -> BTreeSet<String> {
    usage_list(object).into_iter().collect()
}

fn is(usages: &BTreeSet<String>, expected: &[&str]) -> bool {
    usages.len() == expected.len() && expected.iter().all(|u| usages.contains(*u))
}

/// upstream's `ValidateKubeletClientCSR`: `system:node:<name>` in `system:nodes` only, no subject
/// alternative names, usages client auth and digital signature (and key encipherment for RSA).
pub fn validate_kubelet_client(request: &Request, usages: &BTreeSet<String>) -> Result<(), String> {
    if request.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if !request.dns_names.is_empty() {
        return Err("DNS subjectAltNames are not allowed".into());
    }
    if !request.email_addresses.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !request.ip_addresses.is_empty() {
        return Err("IP subjectAltNames are not allowed".into());
    }
    if !request.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    if !request.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    if !is(usages, &["client auth", "digital signature", "key encipherment"])
        && !is(usages, &["client auth", "digital signature"])
    {
        return Err("usages did not match [client auth digital signature key encipherment]".into());
    }
    Ok(())
}

/// upstream's `ValidateKubeletServingCSR`: `system:node:<name>` in `system:nodes`, at least one DNS
/// or IP name and no other, usages server auth and digital signature (and key encipherment).
pub fn validate_kubelet_serving(request: &Request, usages: &BTreeSet<String>) -> Result<(), String> {
    if request.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    if request.dns_names.is_empty() && request.ip_addresses.is_empty() {
        return Err("DNS or IP subjectAltName is required".into());
    }
    if !request.email_addresses.is_empty() {
        return Err("Email subjectAltNames are not allowed".into());
    }
    if !request.uris.is_empty() {
        return Err("URI subjectAltNames are not allowed".into());
    }
    if !is(usages, &["digital signature", "key encipherment", "server auth"])
        && !is(usages, &["digital signature", "server auth"])
    {
        return Err("usages did not match [digital signature key encipherment server auth]".into());
    }
    if !request.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    Ok(())
}

/// The kube-apiserver-client signer's rule (`validAPIServerClientUsages`): client auth, with
/// digital signature and key encipherment allowed beside it.
pub fn validate_apiserver_client_usages(usages: &[String]) -> Result<(), String> {
    let mut client_auth = false;
    for usage in usages {
        match usage.as_str() {
            "digital signature" | "key encipherment" => {}
            "client auth" => client_auth = true,
            other => return Err(format!("invalid usage for client certificate: {other}")),
        }
    }
    if client_auth {
        Ok(())
    } else {
        Err("missing required usage for client certificate: client auth".into())
    }
}

fn conditions(object: &Value) -> &[Value] {
    object.pointer("/status/conditions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// Whether a condition of `kind` is there with status True (`HasTrueCondition`).
pub fn has_true_condition(object: &Value, kind: &str) -> bool {
    conditions(object).iter().any(|c| c["type"] == kind && c["status"] == "True")
}

/// `IsCertificateRequestApproved`: approved and not denied.
pub fn is_approved(object: &Value) -> bool {
    has_true_condition(object, "Approved") && !has_true_condition(object, "Denied")
}

/// `GetCertApprovalCondition`: whether an Approved and whether a Denied condition is there,
/// whatever their status.
pub fn approval(object: &Value) -> (bool, bool) {
    let has = |kind: &str| conditions(object).iter().any(|c| c["type"] == kind);
    (has("Approved"), has("Denied"))
}

/// Whether a certificate was issued.
pub fn is_issued(object: &Value) -> bool {
    object.pointer("/status/certificate").and_then(Value::as_str).is_some_and(|c| !c.is_empty())
}

/// PrepareForCreate: the requestor is who created it (never what the body says), and the status
/// starts empty.
pub fn prepare_for_create(
    object: &mut Value,
    username: &str,
    uid: &str,
    groups: &[String],
    extra: &Map<String, Value>,
) {
    let Value::Object(map) = object else { return };
    let spec = map.entry("spec").or_insert_with(|| json!({}));
    if let Value::Object(spec) = spec {
        for field in ["username", "uid", "groups", "extra"] {
            spec.remove(field);
        }
        if !username.is_empty() {
            spec.insert("username".into(), username.into());
        }
        if !uid.is_empty() {
            spec.insert("uid".into(), uid.into());
        }
        if !groups.is_empty() {
            spec.insert("groups".into(), json!(groups));
        }
        if !extra.is_empty() {
            spec.insert("extra".into(), Value::Object(extra.clone()));
        }
    }
    map.insert("status".into(), json!({}));
}

/// A main-resource update changes metadata only: spec and status stay as they are.
pub fn prepare_for_update(old: &Value, new: &mut Value) {
    let Value::Object(map) = new else { return };
    for part in ["spec", "status"] {
        match old.get(part) {
            Some(value) => map.insert(part.into(), value.clone()),
            None => map.remove(part),
        };
    }
}

/// `populateConditionTimestamps`: a condition without lastUpdateTime gets `now`; one without
/// lastTransitionTime keeps the old one of a condition of the same type and status, else `now`.
fn populate_timestamps(old: &Value, conditions: &mut [Value], now: &str) {
    for condition in conditions.iter_mut() {
        let Value::Object(fields) = condition else { continue };
        let unset = |fields: &Map<String, Value>, key: &str| {
            fields.get(key).and_then(Value::as_str).is_none_or(str::is_empty)
        };
        if unset(fields, "lastUpdateTime") {
            fields.insert("lastUpdateTime".into(), now.into());
        }
        if unset(fields, "lastTransitionTime") {
            let earlier = self::conditions(old).iter().find_map(|o| {
                (o["type"] == fields["type"] && o["status"] == fields["status"])
                    .then(|| o.get("lastTransitionTime").and_then(Value::as_str))
                    .flatten()
                    .filter(|t| !t.is_empty())
            });
            fields.insert("lastTransitionTime".into(), earlier.unwrap_or(now).into());
        }
    }
}

/// An update through `/status` (csrStatusStrategy): the spec stays, each Approved and Denied
/// condition stays as it was when their number did not change, timestamps are filled in.
pub fn status_update(old: &Value, new: &Value, now: &str) -> Value {
    let mut merged = old.clone();
    let mut status = new.get("status").cloned().unwrap_or_else(|| json!({}));
    if let Some(Value::Array(conditions)) = status.get_mut("conditions") {
        for kind in ["Approved", "Denied"] {
            let before: Vec<&Value> = self::conditions(old).iter().filter(|c| c["type"] == kind).collect();
            let at: Vec<usize> = (0..conditions.len()).filter(|&i| conditions[i]["type"] == kind).collect();
            if before.len() == at.len() {
                for (i, previous) in at.into_iter().zip(before) {
                    conditions[i] = previous.clone();
                }
            }
        }
        populate_timestamps(old, conditions, now);
    }
    merged["status"] = status;
    merged
}

/// An update through `/approval` (csrApprovalStrategy): only the conditions change (timestamps
/// filled in); the spec and the certificate stay.
pub fn approval_update(old: &Value, new: &Value, now: &str) -> Value {
    let mut merged = old.clone();
    let mut conditions = new.pointer("/status/conditions").cloned().unwrap_or(Value::Null);
    if let Value::Array(list) = &mut conditions {
        populate_timestamps(old, list, now);
    }
    if !merged.get("status").is_some_and(Value::is_object) {
        merged["status"] = json!({});
    }
    match conditions {
        Value::Null => merged["status"].as_object_mut().map(|s| s.remove("conditions")),
        conditions => merged["status"].as_object_mut().map(|s| s.insert("conditions".into(), conditions)),
    };
    merged
}

#[cfg(test)]
mod tests;
