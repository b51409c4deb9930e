//! The built-in signers (upstream's csrsigning controller and its `PermissiveSigningPolicy`): which
//! requests each signs, and the certificate made for an approved one — its subject and subject
//! alternative names as requested, the key usages and extended key usages of `spec.usages`, no
//! other requested extension, not a CA, valid from five minutes ago for
//! `min(spec.expirationSeconds, --cluster-signing-duration)` (at least ten minutes), never past the
//! CA's own expiry.

use std::time::Duration;

use keel_api::certificates::{
    self as csr, KUBE_APISERVER_CLIENT, KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING, Request,
};
use rcgen::{
    CertificateParams, DistinguishedName, DnType, DnValue, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber, SubjectPublicKeyInfo,
};
use serde_json::Value;
use x509_parser::prelude::FromDer;

/// Backdating, as upstream's signer: certificates are valid from five minutes before signing.
const BACKDATE: Duration = Duration::from_secs(5 * 60);
/// Certificates shorter than this are not shortened by the backdating.
const SHORT: Duration = Duration::from_secs(8 * 3600);
/// The shortest certificate a request may ask for.
const MIN_DURATION: Duration = Duration::from_secs(600);

/// The cluster CA and the longest certificate it gives (`--cluster-signing-duration`).
#[derive(Clone)]
pub struct Signer {
    ca_pem: String,
    ca_key_pem: String,
    ca_not_after: jiff::Timestamp,
    duration: Duration,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").field("duration", &self.duration).finish_non_exhaustive()
    }
}

/// What became of a request a signer looked at.
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Not this signer's, not approved, or already done.
    Skip,
    /// The signer will not sign it: a Failed condition with reason SignerValidationFailure.
    Fail(String),
    /// The issued certificate, PEM.
    Issue(String),
}

impl Signer {
    /// The CA (certificate and key, PEM) and the longest duration.
    pub fn new(ca_pem: &str, ca_key_pem: &str, duration: Duration) -> Result<Signer, String> {
        let (_, block) =
            x509_parser::pem::parse_x509_pem(ca_pem.as_bytes()).map_err(|e| format!("the CA: {e}"))?;
        let certificate = block.parse_x509().map_err(|e| format!("the CA: {e}"))?;
        let seconds = certificate.validity().not_after.timestamp();
        let ca_not_after =
            jiff::Timestamp::from_second(seconds).map_err(|e| format!("the CA's expiry: {e}"))?;
        KeyPair::from_pem(ca_key_pem).map_err(|e| format!("the CA key: {e}"))?;
        Ok(Signer { ca_pem: ca_pem.to_owned(), ca_key_pem: ca_key_pem.to_owned(), ca_not_after, duration })
    }

    /// The signers' `handle`: an approved, not failed, not yet issued request for one of the
    /// built-in signers is checked against that signer's rules and signed.
    pub fn decide(&self, object: &Value, now: jiff::Timestamp) -> Decision {
        if !csr::is_approved(object) || csr::has_true_condition(object, "Failed") || csr::is_issued(object) {
            return Decision::Skip;
        }
        let signer = object.pointer("/spec/signerName").and_then(Value::as_str).unwrap_or_default();
        if ![KUBE_APISERVER_CLIENT, KUBE_APISERVER_CLIENT_KUBELET, KUBELET_SERVING].contains(&signer) {
            return Decision::Skip;
        }
        let Ok(request) = csr::parse(&csr::request_bytes(object)) else { return Decision::Skip };
        let usages = csr::usage_list(object);
        let set = csr::usages(object);
        let allowed = match signer {
            KUBE_APISERVER_CLIENT => csr::validate_apiserver_client_usages(&usages),
            KUBE_APISERVER_CLIENT_KUBELET => csr::validate_kubelet_client(&request, &set),
            _ => csr::validate_kubelet_serving(&request, &set),
        };
        if let Err(reason) = allowed {
            return Decision::Fail(reason);
        }
        let expiration = object.pointer("/spec/expirationSeconds").and_then(Value::as_u64);
        match self.sign(&request, &usages, expiration, now) {
            Ok(pem) => Decision::Issue(pem),
            Err(reason) => {
                tracing::warn!(%reason, "signing a certificate");
                Decision::Skip
            }
        }
    }

    /// How long a certificate for a request asking for `expiration_seconds` lasts.
    fn duration(&self, expiration_seconds: Option<u64>) -> Duration {
        match expiration_seconds.map(Duration::from_secs) {
            None => self.duration,
            Some(asked) if asked > self.duration => self.duration,
            Some(asked) => asked.max(MIN_DURATION),
        }
    }

    /// `CertificateAuthority.Sign` with the permissive policy.
    pub fn sign(
        &self,
        request: &Request,
        usages: &[String],
        expiration_seconds: Option<u64>,
        now: jiff::Timestamp,
    ) -> Result<String, String> {
        let (_, parsed) =
            x509_parser::certification_request::X509CertificationRequest::from_der(&request.der)
                .map_err(|e| format!("unable to parse certificate request: {e}"))?;
        parsed
            .verify_signature()
            .map_err(|e| format!("unable to verify certificate request signature: {e}"))?;
        let info = &parsed.certification_request_info;
        let public_key = SubjectPublicKeyInfo::from_der(info.subject_pki.raw).map_err(|e| e.to_string())?;

        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(&info.subject);
        for dns in &request.dns_names {
            params
                .subject_alt_names
                .push(SanType::DnsName(dns.clone().try_into().map_err(|e| format!("{e}"))?));
        }
        for ip in &request.ip_addresses {
            params.subject_alt_names.push(SanType::IpAddress(*ip));
        }
        for email in &request.email_addresses {
            params
                .subject_alt_names
                .push(SanType::Rfc822Name(email.clone().try_into().map_err(|e| format!("{e}"))?));
        }
        for uri in &request.uris {
            params.subject_alt_names.push(SanType::URI(uri.clone().try_into().map_err(|e| format!("{e}"))?));
        }
        let (key_usages, extended) = key_usages(usages)?;
        params.key_usages = key_usages;
        params.extended_key_usages = extended;
        params.is_ca = IsCa::ExplicitNoCa;
        params.use_authority_key_identifier_extension = true;
        let mut serial = *uuid::Uuid::new_v4().as_bytes();
        serial[0] &= 0x7f;
        params.serial_number = Some(SerialNumber::from_slice(&serial));

        let ttl = self.duration(expiration_seconds);
        let backdate = jiff::SignedDuration::try_from(BACKDATE).map_err(|e| e.to_string())?;
        let ttl_signed = jiff::SignedDuration::try_from(ttl).map_err(|e| e.to_string())?;
        let not_before = now.checked_sub(backdate).map_err(|e| e.to_string())?;
        let mut not_after =
            if ttl < SHORT { now.checked_add(ttl_signed) } else { now.checked_add(ttl_signed - backdate) }
                .map_err(|e| e.to_string())?;
        if not_after >= self.ca_not_after {
            not_after = self.ca_not_after;
        }
        if not_before >= self.ca_not_after {
            return Err(format!("the signer has expired: NotAfter={}", self.ca_not_after));
        }
        if now >= self.ca_not_after {
            return Err(format!(
                "refusing to sign a certificate that expired in the past: NotAfter={}",
                self.ca_not_after
            ));
        }
        params.not_before = offset(not_before)?;
        params.not_after = offset(not_after)?;

        let key = KeyPair::from_pem(&self.ca_key_pem).map_err(|e| format!("the CA key: {e}"))?;
        let issuer = Issuer::from_ca_cert_pem(&self.ca_pem, key).map_err(|e| format!("the CA: {e}"))?;
        let certificate =
            params.signed_by(&public_key, &issuer).map_err(|e| format!("failed to sign certificate: {e}"))?;
        Ok(certificate.pem())
    }
}

fn offset(time: jiff::Timestamp) -> Result<time::OffsetDateTime, String> {
    time::OffsetDateTime::from_unix_timestamp(time.as_second()).map_err(|e| e.to_string())
}

/// The subject as Go re-encodes the request's pkix.Name: country, province, locality, street,
/// postal code, organization, organizational unit, the (last) common name and serial number, in
/// that order; other attributes are dropped. rcgen keeps one value per attribute type, so second
/// values of a type go in under its OID spelled as a custom type.
fn distinguished_name(subject: &x509_parser::x509::X509Name<'_>) -> DistinguishedName {
    const ORDER: &[&[u64]] = &[
        &[2, 5, 4, 6],
        &[2, 5, 4, 8],
        &[2, 5, 4, 7],
        &[2, 5, 4, 9],
        &[2, 5, 4, 17],
        &[2, 5, 4, 10],
        &[2, 5, 4, 11],
        &[2, 5, 4, 3],
        &[2, 5, 4, 5],
    ];
    let values = |oid: &[u64]| -> Vec<String> {
        subject
            .iter_attributes()
            .filter(|a| a.attr_type().iter().is_some_and(|arcs| arcs.eq(oid.iter().copied())))
            .filter_map(|a| a.as_str().ok().map(str::to_owned))
            .collect()
    };
    let mut name = DistinguishedName::new();
    for oid in ORDER {
        let mut found = values(oid);
        if *oid == [2, 5, 4, 3] || *oid == [2, 5, 4, 5] {
            // Go keeps one common name and serial number: the last.
            found = found.pop().into_iter().collect();
        }
        for (i, value) in found.into_iter().enumerate() {
            let kind = match (*oid, i) {
                ([2, 5, 4, 3], 0) => DnType::CommonName,
                ([2, 5, 4, 10], 0) => DnType::OrganizationName,
                ([2, 5, 4, 11], 0) => DnType::OrganizationalUnitName,
                ([2, 5, 4, 6], 0) => DnType::CountryName,
                ([2, 5, 4, 7], 0) => DnType::LocalityName,
                ([2, 5, 4, 8], 0) => DnType::StateOrProvinceName,
                _ => DnType::CustomDnType(oid.to_vec()),
            };
            name.push(kind, DnValue::Utf8String(value));
        }
    }
    name
}

/// `keyUsagesFromStrings`: key usages and extended key usages (in Go's ExtKeyUsage order).
fn key_usages(usages: &[String]) -> Result<(Vec<KeyUsagePurpose>, Vec<ExtendedKeyUsagePurpose>), String> {
    let mut key = Vec::new();
    // Go's ExtKeyUsage numbering, to sort as upstream does.
    let mut extended: Vec<(u8, ExtendedKeyUsagePurpose)> = Vec::new();
    let mut unrecognized = Vec::new();
    for usage in usages {
        let k = match usage.as_str() {
            "signing" | "digital signature" => Some(KeyUsagePurpose::DigitalSignature),
            "content commitment" => Some(KeyUsagePurpose::ContentCommitment),
            "key encipherment" => Some(KeyUsagePurpose::KeyEncipherment),
            "key agreement" => Some(KeyUsagePurpose::KeyAgreement),
            "data encipherment" => Some(KeyUsagePurpose::DataEncipherment),
            "cert sign" => Some(KeyUsagePurpose::KeyCertSign),
            "crl sign" => Some(KeyUsagePurpose::CrlSign),
            "encipher only" => Some(KeyUsagePurpose::EncipherOnly),
            "decipher only" => Some(KeyUsagePurpose::DecipherOnly),
            _ => None,
        };
        if let Some(k) = k {
            if !key.contains(&k) {
                key.push(k);
            }
            continue;
        }
        let e = match usage.as_str() {
            "any" => (0, ExtendedKeyUsagePurpose::Any),
            "server auth" => (1, ExtendedKeyUsagePurpose::ServerAuth),
            "client auth" => (2, ExtendedKeyUsagePurpose::ClientAuth),
            "code signing" => (3, ExtendedKeyUsagePurpose::CodeSigning),
            "email protection" | "s/mime" => (4, ExtendedKeyUsagePurpose::EmailProtection),
            "ipsec end system" => (5, ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 5])),
            "ipsec tunnel" => (6, ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 6])),
            "ipsec user" => (7, ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 5, 5, 7, 3, 7])),
            "timestamping" => (8, ExtendedKeyUsagePurpose::TimeStamping),
            "ocsp signing" => (9, ExtendedKeyUsagePurpose::OcspSigning),
            "microsoft sgc" => (10, ExtendedKeyUsagePurpose::Other(vec![1, 3, 6, 1, 4, 1, 311, 10, 3, 3])),
            "netscape sgc" => (11, ExtendedKeyUsagePurpose::Other(vec![2, 16, 840, 1, 113_730, 4, 1])),
            other => {
                unrecognized.push(format!("{other:?}"));
                continue;
            }
        };
        if !extended.iter().any(|(n, _)| *n == e.0) {
            extended.push(e);
        }
    }
    if !unrecognized.is_empty() {
        return Err(format!("unrecognized usage values: [{}]", unrecognized.join(" ")));
    }
    extended.sort_by_key(|(n, _)| *n);
    Ok((key, extended.into_iter().map(|(_, e)| e).collect()))
}

#[cfg(test)]
mod tests {
    use rcgen::CertificateParams;
    use serde_json::json;
    use x509_parser::extensions::ParsedExtension;

    use super::*;

    fn ca() -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, "test-ca");
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.not_after = rcgen::date_time_ymd(2036, 1, 1);
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    fn request(cn: &str, organization: &str) -> String {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.distinguished_name.push(DnType::OrganizationName, organization);
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    fn csr_object(pem: &str, signer: &str, usages: &[&str], approved: bool) -> Value {
        use base64::Engine as _;
        let conditions = if approved { json!([{"type": "Approved", "status": "True"}]) } else { json!([]) };
        json!({"spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem), "signerName": signer,
                        "usages": usages, "expirationSeconds": 3600},
               "status": {"conditions": conditions}})
    }

    #[test]
    fn approved_kubelet_client_requests_are_signed_as_upstream_signs_them() {
        let (ca_pem, ca_key) = ca();
        let signer = Signer::new(&ca_pem, &ca_key, Duration::from_secs(365 * 86_400)).unwrap();
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let pem = request("system:node:n1", "system:nodes");
        let usages = ["digital signature", "client auth"];
        assert_eq!(
            signer.decide(&csr_object(&pem, KUBE_APISERVER_CLIENT_KUBELET, &usages, false), now),
            Decision::Skip
        );
        let Decision::Issue(issued) =
            signer.decide(&csr_object(&pem, KUBE_APISERVER_CLIENT_KUBELET, &usages, true), now)
        else {
            panic!("not issued")
        };
        let (_, block) = x509_parser::pem::parse_x509_pem(issued.as_bytes()).unwrap();
        let certificate = block.parse_x509().unwrap();
        assert_eq!(certificate.subject().to_string(), "O=system:nodes, CN=system:node:n1");
        assert_eq!(certificate.issuer().to_string(), "CN=test-ca");
        // An hour asked for, shorter than 8h: from 5 minutes before now to an hour after.
        assert_eq!(certificate.validity().not_before.timestamp(), 1_800_000_000 - 300);
        assert_eq!(certificate.validity().not_after.timestamp(), 1_800_000_000 + 3600);
        let mut client_auth = false;
        for extension in certificate.extensions() {
            match extension.parsed_extension() {
                ParsedExtension::KeyUsage(usage) => {
                    assert!(usage.digital_signature() && !usage.key_cert_sign());
                }
                ParsedExtension::ExtendedKeyUsage(eku) => client_auth = eku.client_auth && !eku.server_auth,
                ParsedExtension::BasicConstraints(bc) => assert!(!bc.ca),
                _ => {}
            }
        }
        assert!(client_auth);
        let mut issued_object = csr_object(&pem, KUBE_APISERVER_CLIENT_KUBELET, &usages, true);
        issued_object["status"]["certificate"] = "LS0t".into();
        assert_eq!(signer.decide(&issued_object, now), Decision::Skip);
    }

    #[test]
    fn requests_a_signer_refuses_fail() {
        let (ca_pem, ca_key) = ca();
        let signer = Signer::new(&ca_pem, &ca_key, Duration::from_secs(86_400)).unwrap();
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let alice = request("alice", "devs");
        assert_eq!(
            signer.decide(
                &csr_object(
                    &alice,
                    KUBE_APISERVER_CLIENT_KUBELET,
                    &["digital signature", "client auth"],
                    true
                ),
                now
            ),
            Decision::Fail("subject organization is not system:nodes".into())
        );
        assert_eq!(
            signer.decide(&csr_object(&alice, KUBE_APISERVER_CLIENT, &["server auth"], true), now),
            Decision::Fail("invalid usage for client certificate: server auth".into())
        );
        assert!(matches!(
            signer.decide(&csr_object(&alice, KUBE_APISERVER_CLIENT, &["client auth"], true), now),
            Decision::Issue(_)
        ));
        assert_eq!(
            signer.decide(&csr_object(&alice, "example.com/other", &["client auth"], true), now),
            Decision::Skip
        );
        // The duration: the request's, at most the flag's, at least ten minutes.
        assert_eq!(signer.duration(None), Duration::from_secs(86_400));
        assert_eq!(signer.duration(Some(10 * 86_400)), Duration::from_secs(86_400));
        assert_eq!(signer.duration(Some(60)), Duration::from_secs(600));
        assert_eq!(
            key_usages(&["client auth".into(), "server auth".into(), "bogus".into()]).unwrap_err(),
            "unrecognized usage values: [\"bogus\"]"
        );
    }
}
