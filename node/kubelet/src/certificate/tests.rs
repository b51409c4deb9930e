use super::*;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequestCondition, CertificateSigningRequestStatus,
};
use x509_parser::prelude::FromDer;

/// A self-signed certificate for `key_pem`, valid for `days` from now.
fn certificate(key_pem: &str, days: i64) -> String {
    let key = rcgen::KeyPair::from_pem(key_pem).unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["n1".to_owned()]).unwrap();
    let now = time::OffsetDateTime::now_utc();
    (params.not_before, params.not_after) = (now, now + time::Duration::days(days));
    params.self_signed(&key).unwrap().pem()
}

#[test]
fn rotation_falls_between_70_and_90_percent_of_the_lifetime() {
    let start = Timestamp::from_second(1_000_000).unwrap();
    let end = Timestamp::from_second(1_000_000 + 1000).unwrap();
    assert_eq!(rotation_deadline(start, end, 0.0).as_second(), 1_000_700);
    assert_eq!(rotation_deadline(start, end, 1.0).as_second(), 1_000_900);
    assert_eq!(rotation_deadline(start, end, 0.5).as_second(), 1_000_800);
    assert_eq!(rotation_deadline(start, end, 7.0).as_second(), 1_000_900);
    // A certificate that ends before it starts is renewed at once.
    assert_eq!(rotation_deadline(end, start, 0.5), end);
}

#[test]
fn requests_name_the_node_and_its_hosts() {
    let key = new_key().unwrap();
    let pem = request_pem(&key, "n1", &["n1".into(), "10.0.0.5".into()]).unwrap();
    let der = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap().1.contents;
    let (_, request) = x509_parser::certification_request::X509CertificationRequest::from_der(&der).unwrap();
    let subject = &request.certification_request_info.subject;
    assert_eq!(subject.iter_common_name().next().unwrap().as_str().unwrap(), "system:node:n1");
    assert_eq!(subject.iter_organization().next().unwrap().as_str().unwrap(), "system:nodes");
    let mut names = Vec::new();
    for extension in request.requested_extensions().into_iter().flatten() {
        if let x509_parser::extensions::ParsedExtension::SubjectAlternativeName(san) = extension {
            names.extend(san.general_names.iter().map(|name| format!("{name}")));
        }
    }
    assert_eq!(names, ["DNSName(n1)", "IPAddress(0a:00:00:05)"]);
    assert!(request_pem("not a key", "n1", &[]).is_err());

    // The bootstrap name is stable for one key and subject, and changes with the usages.
    let name = digested_name(&key, "n1", CLIENT_USAGES).unwrap();
    assert_eq!(name, digested_name(&key, "n1", CLIENT_USAGES).unwrap());
    assert!(name.starts_with("node-csr-") && name.len() == "node-csr-".len() + 43, "{name}");
    assert_ne!(name, digested_name(&key, "n1", SERVING_USAGES).unwrap());
    assert_ne!(name, digested_name(&new_key().unwrap(), "n1", CLIENT_USAGES).unwrap());

    let csr = csr_object(Some(&name), &pem, CLIENT_SIGNER, CLIENT_USAGES);
    assert_eq!(csr.metadata.name.as_deref(), Some(name.as_str()));
    assert_eq!(
        csr.spec.usages.as_deref(),
        Some(&["digital signature".to_owned(), "client auth".to_owned()][..])
    );
    let rotated = csr_object(None, &pem, SERVING_SIGNER, SERVING_USAGES);
    assert_eq!(rotated.metadata.generate_name.as_deref(), Some("csr-"));
}

#[test]
fn outcomes_read_the_status_as_client_go() {
    let mut csr = csr_object(None, "", CLIENT_SIGNER, CLIENT_USAGES);
    assert_eq!(outcome(&csr), Outcome::Pending);
    let condition = |kind: &str| CertificateSigningRequestCondition {
        type_: kind.into(),
        status: "True".into(),
        reason: Some("Because".into()),
        message: Some("said so".into()),
        ..CertificateSigningRequestCondition::default()
    };
    csr.status = Some(CertificateSigningRequestStatus {
        conditions: Some(vec![condition("Approved")]),
        ..CertificateSigningRequestStatus::default()
    });
    assert_eq!(outcome(&csr), Outcome::Pending);
    csr.status.as_mut().unwrap().certificate = Some(k8s_openapi::ByteString(b"PEM".to_vec()));
    assert_eq!(outcome(&csr), Outcome::Issued("PEM".into()));
    csr.status.as_mut().unwrap().conditions = Some(vec![condition("Denied")]);
    assert_eq!(
        outcome(&csr),
        Outcome::Denied("certificate signing request is denied, reason: Because: said so".into())
    );
    csr.status.as_mut().unwrap().conditions = Some(vec![condition("Failed")]);
    assert!(matches!(outcome(&csr), Outcome::Failed(_)));
}

#[test]
fn the_store_keeps_pairs_and_points_at_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::client(dir.path());
    assert_eq!(store.current().unwrap(), None);
    let key = new_key().unwrap();
    let first =
        store.update(&certificate(&key, 1), &key, Timestamp::from_second(1_700_000_000).unwrap()).unwrap();
    assert_eq!(store.current().unwrap().as_ref(), Some(&first));
    assert_eq!(
        std::fs::read_link(store.current_path()).unwrap(),
        dir.path().join("kubelet-client-2023-11-14-22-13-20.pem")
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(store.current_path()).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let key2 = new_key().unwrap();
    let second =
        store.update(&certificate(&key2, 2), &key2, Timestamp::from_second(1_700_000_100).unwrap()).unwrap();
    assert_ne!(first, second);
    assert_eq!(store.current().unwrap(), Some(second.clone()));
    assert!(second.not_after > first.not_after && !second.expired(Timestamp::now()));
    // A certificate with the wrong key is still parsed: the key is checked by the TLS stack.
    assert!(store.update("no certificate", &key, Timestamp::now()).is_err());
    assert!(store.update(&certificate(&key, 1), "no key", Timestamp::now()).is_err());
    assert_eq!(store.current().unwrap(), Some(second));
}

#[test]
fn bootstrapped_kubeconfigs_point_at_the_current_pair() {
    let text = kubeconfig(
        "https://10.0.0.1:6443",
        Some("/etc/ca.crt"),
        None,
        false,
        Path::new("/pki/kubelet-client-current.pem"),
    );
    let config: kube::config::Kubeconfig = serde_yaml_ng::from_str(&text).unwrap();
    let user = config.auth_infos[0].auth_info.as_ref().unwrap();
    assert_eq!(user.client_certificate.as_deref(), Some("/pki/kubelet-client-current.pem"));
    assert_eq!(user.client_key.as_deref(), Some("/pki/kubelet-client-current.pem"));
    let cluster = config.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(cluster.server.as_deref(), Some("https://10.0.0.1:6443"));
    assert_eq!(cluster.certificate_authority.as_deref(), Some("/etc/ca.crt"));
}
