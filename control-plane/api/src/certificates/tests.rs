use base64::Engine as _;
use rcgen::{CertificateParams, DnType, KeyPair, SanType};
use serde_json::{Value, json};

use super::*;
use crate::resources::find;
use crate::validation::{validate_create, validate_subresource_update, validate_update};

/// A PEM CSR for `cn` in `organizations` with `sans` (DNS names, or IPs when they parse).
fn csr_pem(cn: &str, organizations: &[&str], sans: &[&str]) -> String {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    for o in organizations {
        params.distinguished_name.push(DnType::OrganizationName, *o);
    }
    for san in sans {
        params.subject_alt_names.push(match san.parse() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName((*san).try_into().unwrap()),
        });
    }
    params.serialize_request(&key).unwrap().pem().unwrap()
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn csr(pem: &str, signer: &str, usages: &[&str]) -> Value {
    json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
           "metadata": {"name": "csr-1"},
           "spec": {"request": b64(pem.as_bytes()), "signerName": signer, "usages": usages}})
}

fn messages(errors: &[crate::status::FieldError]) -> Vec<String> {
    errors.iter().map(|e| format!("{}: {}", e.field, e.message())).collect()
}

#[test]
fn requests_parse_and_their_signatures_are_checked() {
    let pem = csr_pem("system:node:n1", &["system:nodes"], &["n1.example", "10.0.0.1"]);
    let request = parse(pem.as_bytes()).unwrap();
    assert_eq!(request.common_name, "system:node:n1");
    assert_eq!(request.organizations, ["system:nodes"]);
    assert_eq!(request.dns_names, ["n1.example"]);
    assert_eq!(request.ip_addresses, ["10.0.0.1".parse::<IpAddr>().unwrap()]);
    check_signature(&request).unwrap();
    // The last byte of a DER ECDSA signature changed: the signature no longer verifies.
    let mut forged = request.clone();
    let last = forged.der.len() - 1;
    forged.der[last] ^= 0x01;
    assert_eq!(check_signature(&forged).unwrap_err(), "x509: ECDSA verification failure");
    assert_eq!(parse(b"not pem").unwrap_err(), "PEM block type must be CERTIFICATE REQUEST");
    let certificate = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    assert_eq!(parse(certificate.as_bytes()).unwrap_err(), "PEM block type must be CERTIFICATE REQUEST");
    let garbage = "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n";
    assert!(parse(garbage.as_bytes()).unwrap_err().starts_with("x509: "));
}

#[test]
fn kubelet_signers_rules() {
    let set = |u: &[&str]| u.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<String>>();
    let client = set(&["digital signature", "client auth"]);
    let node = parse(csr_pem("system:node:n1", &["system:nodes"], &[]).as_bytes()).unwrap();
    validate_kubelet_client(&node, &client).unwrap();
    validate_kubelet_client(&node, &set(&["digital signature", "key encipherment", "client auth"])).unwrap();
    assert_eq!(
        validate_kubelet_client(&node, &set(&["client auth"])).unwrap_err(),
        "usages did not match [client auth digital signature key encipherment]"
    );
    let other = parse(csr_pem("alice", &["system:nodes"], &[]).as_bytes()).unwrap();
    assert_eq!(
        validate_kubelet_client(&other, &client).unwrap_err(),
        "subject common name does not begin with system:node:"
    );
    let masters = parse(csr_pem("system:node:n1", &["system:masters"], &[]).as_bytes()).unwrap();
    assert_eq!(
        validate_kubelet_client(&masters, &client).unwrap_err(),
        "subject organization is not system:nodes"
    );
    let named = parse(csr_pem("system:node:n1", &["system:nodes"], &["n1"]).as_bytes()).unwrap();
    assert_eq!(validate_kubelet_client(&named, &client).unwrap_err(), "DNS subjectAltNames are not allowed");
    let serving = set(&["digital signature", "server auth"]);
    validate_kubelet_serving(&named, &serving).unwrap();
    assert_eq!(
        validate_kubelet_serving(&node, &serving).unwrap_err(),
        "DNS or IP subjectAltName is required"
    );
    let owned = |u: &[&str]| u.iter().map(|s| (*s).to_owned()).collect::<Vec<String>>();
    validate_apiserver_client_usages(&owned(&["client auth", "digital signature"])).unwrap();
    assert_eq!(
        validate_apiserver_client_usages(&owned(&["server auth"])).unwrap_err(),
        "invalid usage for client certificate: server auth"
    );
    assert_eq!(
        validate_apiserver_client_usages(&owned(&["digital signature"])).unwrap_err(),
        "missing required usage for client certificate: client auth"
    );
}

#[test]
fn create_sets_the_requestor_and_an_empty_status() {
    let mut object = csr(&csr_pem("a", &[], &[]), KUBE_APISERVER_CLIENT, &["client auth"]);
    object["spec"]["username"] = "forged".into();
    object["spec"]["groups"] = json!(["system:masters"]);
    object["status"] = json!({"certificate": "LS0t"});
    let mut extra = Map::new();
    extra.insert("scopes".into(), json!(["a"]));
    prepare_for_create(
        &mut object,
        "bob",
        "uid-1",
        &["devs".to_owned(), "system:authenticated".to_owned()],
        &extra,
    );
    assert_eq!(object["spec"]["username"], "bob");
    assert_eq!(object["spec"]["uid"], "uid-1");
    assert_eq!(object["spec"]["groups"], json!(["devs", "system:authenticated"]));
    assert_eq!(object["spec"]["extra"], json!({"scopes": ["a"]}));
    assert_eq!(object["status"], json!({}));
}

#[test]
fn status_and_approval_change_only_their_part() {
    let old = json!({"spec": {"signerName": "a/b"},
                     "status": {"conditions": [{"type": "Approved", "status": "True", "reason": "R",
                                                "lastUpdateTime": "t0", "lastTransitionTime": "t0"}]}});
    // /status: spec kept, the Approved condition as it was, the certificate taken.
    let new = json!({"spec": {"signerName": "x/y"},
                     "status": {"certificate": "Q0VSVA==",
                                "conditions": [{"type": "Approved", "status": "True", "reason": "Changed"},
                                               {"type": "Failed", "status": "True"}]}});
    let merged = status_update(&old, &new, "t1");
    assert_eq!(merged["spec"]["signerName"], "a/b");
    assert_eq!(merged["status"]["certificate"], "Q0VSVA==");
    assert_eq!(merged["status"]["conditions"][0]["reason"], "R");
    assert_eq!(merged["status"]["conditions"][1]["lastUpdateTime"], "t1");
    assert_eq!(merged["status"]["conditions"][1]["lastTransitionTime"], "t1");
    // /approval: only the conditions, with timestamps.
    let pending = json!({"spec": {"signerName": "a/b"}, "status": {"certificate": "Q0VSVA=="}});
    let approve = json!({"spec": {"signerName": "x/y"},
                         "status": {"certificate": "", "conditions": [{"type": "Approved", "status": "True"}]}});
    let merged = approval_update(&pending, &approve, "t2");
    assert_eq!(merged["spec"]["signerName"], "a/b");
    assert_eq!(merged["status"]["certificate"], "Q0VSVA==");
    assert_eq!(merged["status"]["conditions"][0]["lastTransitionTime"], "t2");
    assert!(is_approved(&merged) && is_issued(&merged));
    assert_eq!(approval(&merged), (true, false));
}

#[test]
fn validation_as_upstream_words_it() {
    let resource = find("certificates.k8s.io", "v1", "certificatesigningrequests").unwrap();
    let pem = csr_pem("alice", &["devs"], &[]);
    let good = csr(&pem, KUBE_APISERVER_CLIENT, &["client auth"]);
    assert!(validate_create(resource, &good).is_empty(), "{:?}", messages(&validate_create(resource, &good)));

    let mut bad = csr("junk", "example", &["client auth", "client auth", "flying"]);
    bad["spec"]["expirationSeconds"] = 60.into();
    assert_eq!(
        messages(&validate_create(resource, &bad)),
        [
            format!("spec.request: Invalid value: \"{}\": PEM block type must be CERTIFICATE REQUEST", b64(b"junk")),
            "spec.usages[2]: Unsupported value: \"flying\": supported values: \"any\", \"cert sign\", \"client auth\", \
             \"code signing\", \"content commitment\", \"crl sign\", \"data encipherment\", \"decipher only\", \
             \"digital signature\", \"email protection\", \"encipher only\", \"ipsec end system\", \"ipsec tunnel\", \
             \"ipsec user\", \"key agreement\", \"key encipherment\", \"microsoft sgc\", \"netscape sgc\", \
             \"ocsp signing\", \"s/mime\", \"server auth\", \"signing\", \"timestamping\""
                .to_owned(),
            "spec.usages[1]: Duplicate value: \"client auth\"".to_owned(),
            "spec.signerName: Invalid value: \"example\": must be a fully qualified domain and path of the form \
             'example.com/signer-name'"
                .to_owned(),
            "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 600 seconds (10 minutes)"
                .to_owned(),
        ]
    );
    let mut empty = csr(&pem, "", &[]);
    empty["spec"]["signerName"] = "".into();
    assert_eq!(
        messages(&validate_create(resource, &empty)),
        ["spec.usages: Required value", "spec.signerName: Required value"]
    );
    let legacy = csr(&pem, LEGACY_UNKNOWN, &["client auth"]);
    assert_eq!(
        messages(&validate_create(resource, &legacy)),
        [
            "spec.signerName: Invalid value: \"kubernetes.io/legacy-unknown\": the legacy signerName is not allowed via this API version"
        ]
    );
    let one_label = csr(&pem, "example/signer", &["client auth"]);
    assert_eq!(
        messages(&validate_create(resource, &one_label)),
        [
            "spec.signerName: Invalid value: \"example\": should be a domain with at least two segments separated by dots"
        ]
    );

    // Approval: Approved and Denied exclusive, True only; /status may not approve; nobody removes.
    let mut both = good.clone();
    both["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "False"}]});
    assert_eq!(
        messages(&validate_subresource_update(resource, "approval", &good, &both)),
        [
            "status.conditions[1].status: Unsupported value: \"False\": supported values: \"True\"",
            "status.conditions: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive",
        ]
    );
    let mut approved = good.clone();
    approved["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});
    assert!(validate_subresource_update(resource, "approval", &good, &approved).is_empty());
    assert_eq!(
        messages(&validate_subresource_update(resource, "status", &good, &approved)),
        ["status.conditions: Forbidden: updates may not add a condition of type \"Approved\""]
    );
    assert_eq!(
        messages(&validate_subresource_update(resource, "approval", &approved, &good)),
        ["status.conditions: Forbidden: updates may not remove a condition of type \"Approved\""]
    );
    // The certificate: only through /status, once, and PEM certificates only.
    let mut issued = approved.clone();
    issued["status"]["certificate"] = b64(pem.as_bytes()).into();
    assert_eq!(
        messages(&validate_subresource_update(resource, "status", &approved, &issued)),
        [
            "status.certificate: Invalid value: \"<certificate data>\": only CERTIFICATE PEM blocks are allowed, found \"CERTIFICATE REQUEST\""
        ]
    );
    issued["status"]["certificate"] = b64(b"nothing").into();
    assert_eq!(
        messages(&validate_subresource_update(resource, "approval", &approved, &issued)),
        [
            "status.certificate: Invalid value: \"<certificate data>\": must contain at least one CERTIFICATE PEM block",
            "status.certificate: Forbidden: updates may not set certificate content"
        ]
    );
    assert!(validate_update(resource, &approved, &approved).is_empty());
    assert!(validate_subresource_update(find("", "v1", "pods").unwrap(), "status", &good, &both).is_empty());
}
