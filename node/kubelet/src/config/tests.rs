use super::*;
use crate::cli::Flags;
use clap::Parser;

const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

fn decoded(body: &str) -> Decoded {
    decode(&format!("{HEAD}{body}"), Path::new("/etc/kubernetes")).unwrap()
}

#[test]
fn an_empty_file_is_v1beta1s_defaults() {
    let empty = decoded("");
    assert_eq!(empty.config, KubeletConfiguration::default());
    assert!(empty.warnings.is_empty());
    let config = empty.config;
    // The file's defaults authenticate and authorize the kubelet API; the flags' own do not.
    assert!(!config.anonymous_auth && config.webhook_authentication);
    assert_eq!(config.authorization_mode, Authorization::Webhook);
    let flags = KubeletConfiguration::flag_defaults();
    assert!(flags.anonymous_auth && !flags.webhook_authentication);
    assert_eq!(flags.authorization_mode, Authorization::AlwaysAllow);
    assert_eq!(config.eviction_hard.len(), 5);
    assert_eq!(config.eviction_hard["nodefs.available"], "10%");
    assert_eq!(config.node_status_report_frequency, Duration::from_secs(300));
    // JSON is YAML.
    let json = decode(
        r#"{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}"#,
        Path::new("/"),
    );
    assert_eq!(json.unwrap().config, KubeletConfiguration::default());
}

#[test]
fn honoured_fields_are_read_and_relative_paths_resolved() {
    let config = decoded(
        r#"
enableServer: false
podLogsDir: logs
syncFrequency: 1m30s
address: 10.0.0.5
port: 10260
tlsCertFile: pki/kubelet.crt
tlsPrivateKeyFile: /pki/kubelet.key
authentication:
  x509: {clientCAFile: ca.crt}
  webhook: {enabled: false, cacheTTL: 10s}
  anonymous: {enabled: true}
authorization:
  mode: AlwaysAllow
  webhook: {cacheAuthorizedTTL: 1m, cacheUnauthorizedTTL: 5s}
healthzPort: 0
healthzBindAddress: 0.0.0.0
clusterDomain: cluster.local
clusterDNS: [10.96.0.10, "fd00::a"]
nodeStatusUpdateFrequency: 4s
nodeLeaseDurationSeconds: 20
maxPods: 30
resolvConf: ""
nodeStatusMaxImages: -1
evictionHard: {memory.available: 200Mi}
systemReserved: {cpu: 100m}
kubeReserved: {memory: 100Mi}
registerWithTaints: [{key: dedicated, value: infra, effect: NoSchedule}]
providerID: keel://n1
containerRuntimeEndpoint: unix:///run/keel-shim.sock
"#,
    )
    .config;
    assert!(!config.enable_server);
    assert_eq!(config.pod_logs_dir, Path::new("/etc/kubernetes/logs"));
    assert_eq!(config.sync_frequency, Duration::from_secs(90));
    assert_eq!(config.address.to_string(), "10.0.0.5");
    assert_eq!(config.port, 10260);
    assert_eq!(config.tls_cert_file.as_deref(), Some(Path::new("/etc/kubernetes/pki/kubelet.crt")));
    assert_eq!(config.tls_private_key_file.as_deref(), Some(Path::new("/pki/kubelet.key")));
    assert_eq!(config.client_ca_file.as_deref(), Some(Path::new("/etc/kubernetes/ca.crt")));
    assert!(!config.webhook_authentication && config.anonymous_auth);
    assert_eq!(config.webhook_authentication_cache_ttl, Duration::from_secs(10));
    assert_eq!(config.authorization_mode, Authorization::AlwaysAllow);
    assert_eq!(
        (config.authorized_ttl, config.unauthorized_ttl),
        (Duration::from_secs(60), Duration::from_secs(5))
    );
    assert_eq!(config.healthz_port, 0);
    assert_eq!(config.cluster_dns.len(), 2);
    // The report frequency follows a given update frequency.
    assert_eq!(config.node_status_update_frequency, Duration::from_secs(4));
    assert_eq!(config.node_status_report_frequency, Duration::from_secs(4));
    assert_eq!((config.node_lease_duration_seconds, config.max_pods), (20, 30));
    assert_eq!(config.resolv_conf, PathBuf::new());
    assert_eq!(config.node_status_max_images, -1);
    // A given evictionHard replaces the defaults (mergeDefaultEvictionSettings is false).
    assert_eq!(config.eviction_hard, BTreeMap::from([("memory.available".into(), "200Mi".into())]));
    assert_eq!(config.system_reserved["cpu"], "100m");
    assert_eq!(config.register_with_taints[0].value.as_deref(), Some("infra"));
    assert_eq!(config.provider_id, "keel://n1");
    assert_eq!(config.container_runtime_endpoint, "unix:///run/keel-shim.sock");

    let merged = decoded("evictionHard: {memory.available: 200Mi}\nmergeDefaultEvictionSettings: true\n");
    assert_eq!(merged.config.eviction_hard.len(), 5);
    assert_eq!(merged.config.eviction_hard["memory.available"], "200Mi");
    let both = decoded("nodeStatusUpdateFrequency: 4s\nnodeStatusReportFrequency: 1m\n").config;
    assert_eq!(both.node_status_report_frequency, Duration::from_secs(60));
    // A zero written is the default, as Go's defaulting cannot tell it from unset.
    assert_eq!(decoded("maxPods: 0\nsyncFrequency: 0s\n").config, KubeletConfiguration::default());
}

#[test]
fn unknown_and_unimplemented_fields_are_warned_about() {
    let file = decoded(
        "bogus: 1\nauthentication: {x509: {clientCAFile: /ca, extra: true}}\ncpuManagerPolicy: static\nfailSwapOn: false\n",
    );
    assert_eq!(
        file.warnings,
        [
            "Using lenient decoding as strict decoding failed: strict decoding error: unknown field \
             \"authentication.x509.extra\", unknown field \"bogus\"",
            "keel-kubelet does not implement these fields, which have no effect: cpuManagerPolicy, failSwapOn",
        ]
    );
    // The rest of the file is decoded (lenient decoding).
    assert_eq!(file.config.client_ca_file.as_deref(), Some(Path::new("/ca")));
}

#[test]
fn undecodable_files_are_refused_in_upstreams_words() {
    let dir = Path::new("/");
    let wrong_version = decode("apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n", dir);
    assert_eq!(
        wrong_version.unwrap_err(),
        "failed to decode: no kind \"KubeletConfiguration\" is registered for version \"kubelet.config.k8s.io/v1\""
    );
    assert!(
        decode("apiVersion: kubelet.config.k8s.io/v1beta1\n", dir).unwrap_err().contains("'Kind' is missing")
    );
    let mistyped = decode(&format!("{HEAD}maxPods: many\n"), dir).unwrap_err();
    assert!(mistyped.contains("cannot unmarshal string into Go struct field .maxPods"), "{mistyped}");
    assert!(decode(&format!("{HEAD}syncFrequency: soon\n"), dir).unwrap_err().contains("invalid duration"));
    assert!(decode(&format!("{HEAD}address: here\n"), dir).unwrap_err().contains("not an IP address"));
    assert!(decode("[1, 2]", dir).is_err());
    assert!(decode("{", dir).is_err());
}

#[test]
fn validation_gives_upstreams_messages_aggregated() {
    let mut config = KubeletConfiguration { max_pods: -1, ..KubeletConfiguration::default() };
    assert_eq!(
        validate(&config).unwrap_err().to_string(),
        "failed to validate kubelet configuration, error: invalid configuration: maxPods (--max-pods) -1 must \
         not be a negative number"
    );
    config.port = 70000;
    config.node_lease_duration_seconds = -1;
    config.pod_logs_dir = "/var/log/../pods".into();
    assert_eq!(
        validate(&config).unwrap_err().to_string(),
        "failed to validate kubelet configuration, error: [invalid configuration: nodeLeaseDurationSeconds must \
         be greater than 0, invalid configuration: maxPods (--max-pods) -1 must not be a negative number, invalid \
         configuration: port (--port) 70000 must be between 1 and 65535, inclusive, invalid configuration: pod \
         logs path \"/var/log/../pods\" must be normalized]"
    );
    assert!(validate(&KubeletConfiguration::default()).is_ok());
    let relative = KubeletConfiguration { pod_logs_dir: "logs".into(), ..KubeletConfiguration::default() };
    assert!(validate(&relative).unwrap_err().to_string().contains("must be absolute path"));
}

#[test]
fn flags_given_win_over_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, format!("{HEAD}maxPods: 30\nclusterDomain: file.local\nport: 10260\n")).unwrap();
    let flags = Flags::try_parse_from([
        "keel-kubelet",
        "--kubeconfig=k",
        "--config",
        file.to_str().unwrap(),
        "--max-pods=50",
        "--eviction-hard=memory.available<1Gi",
        "--kube-reserved=cpu=100m,memory=1Gi",
        "--anonymous-auth=true",
    ])
    .unwrap();
    let config = flags.configuration().unwrap();
    assert_eq!(config.max_pods, 50);
    assert_eq!(config.cluster_domain, "file.local");
    assert_eq!(config.port, 10260);
    assert_eq!(config.eviction_hard, BTreeMap::from([("memory.available".into(), "1Gi".into())]));
    assert_eq!(config.kube_reserved["memory"], "1Gi");
    assert!(config.anonymous_auth && config.webhook_authentication);

    let bare =
        Flags::try_parse_from(["keel-kubelet", "--kubeconfig=k", "--authentication-token-webhook"]).unwrap();
    let config = bare.configuration().unwrap();
    assert_eq!(config.authorization_mode, Authorization::AlwaysAllow);
    assert!(config.anonymous_auth && config.webhook_authentication);

    let negative = Flags::try_parse_from(["keel-kubelet", "--kubeconfig=k", "--max-pods=-3"]).unwrap();
    assert!(negative.configuration().unwrap_err().to_string().contains("maxPods (--max-pods) -3"));
    let missing =
        Flags::try_parse_from(["keel-kubelet", "--kubeconfig=k", "--config=/nonexistent/kc.yaml"]).unwrap();
    let error = missing.configuration().unwrap_err().to_string();
    assert!(error.starts_with("failed to load kubelet config file, path: /nonexistent/kc.yaml"), "{error}");
    std::fs::write(&file, "").unwrap();
    let empty = Flags::try_parse_from(["keel-kubelet", "--kubeconfig=k", "--config", file.to_str().unwrap()])
        .unwrap();
    assert!(empty.configuration().unwrap_err().to_string().ends_with("was empty"));
}

#[test]
fn cgroup_settings_are_read_and_checked() {
    let defaults = KubeletConfiguration::default();
    assert!(defaults.cgroups_per_qos);
    assert_eq!((defaults.cgroup_root.as_str(), defaults.cgroup_driver.as_str()), ("", "cgroupfs"));
    assert_eq!(
        (defaults.enforce_node_allocatable.as_slice(), defaults.pod_pids_limit),
        (&["pods".to_owned()][..], -1)
    );
    let config = decoded(
        "cgroupsPerQOS: false\ncgroupRoot: /node1\nenforceNodeAllocatable: []\npodPidsLimit: -5\ncgroupDriver: cgroupfs\n",
    )
    .config;
    assert!(!config.cgroups_per_qos);
    assert_eq!(config.cgroup_root, "/node1");
    assert!(config.enforce_node_allocatable.is_empty());
    assert_eq!(config.pod_pids_limit, -1);
    assert!(validate(&config).is_ok());
    let systemd = decoded("cgroupDriver: systemd\n").config;
    assert!(
        validate(&systemd).unwrap_err().to_string().contains("cgroupDriver (--cgroup-driver) \"systemd\"")
    );
    let reserved = decoded("enforceNodeAllocatable: [pods, pods, kube-reserved]\n").config;
    let refused = validate(&reserved).unwrap_err().to_string();
    assert!(refused.contains("duplicated enforcements \"pods\""), "{refused}");
    assert!(refused.contains("\"kube-reserved\" is not supported by keel-kubelet"), "{refused}");
    let flags = Flags::try_parse_from([
        "keel-kubelet",
        "--kubeconfig=k",
        "--cgroups-per-qos=false",
        "--enforce-node-allocatable=",
        "--cgroup-root=/x",
        "--pod-max-pids=100",
    ])
    .unwrap();
    let config = flags.configuration().unwrap();
    assert!(!config.cgroups_per_qos && config.enforce_node_allocatable.is_empty());
    assert_eq!((config.cgroup_root.as_str(), config.pod_pids_limit), ("/x", 100));
}
