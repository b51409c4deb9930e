//! The kubelet's command line, upstream's flags: [`Flags`], read over a KubeletConfiguration file
//! when `--config` names one ([`crate::config`]: a flag given on the command line wins over the
//! file, as upstream's flag precedence), and the list flags in upstream's forms
//! (`--node-labels k=v,k2=v2`, `--register-with-taints key=value:Effect,key:Effect`,
//! `--eviction-hard memory.available<100Mi`, `--kube-reserved cpu=100m`), refused with upstream's
//! words.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::core::v1::Taint;

use crate::config::{self, ConfigError, KubeletConfiguration};
use crate::server::Authorization;

/// keel-kubelet's command line. The flags that have a KubeletConfiguration field are options:
/// given, they win over the file; not given, the file's value (or its default) stands.
#[derive(Debug, Clone, Parser)]
#[command(name = "keel-kubelet", about = "Keel's kubelet: registers the Node and runs its Pods through CRI")]
pub struct Flags {
    /// A KubeletConfiguration file (kubelet.config.k8s.io/v1beta1); the flags given win over it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The kubeconfig the kubelet reaches the API server with; with --bootstrap-kubeconfig, written
    /// once a client certificate is issued.
    #[arg(long)]
    pub kubeconfig: PathBuf,
    /// A kubeconfig with bootstrap credentials (a bootstrap token), used to request a client
    /// certificate when --kubeconfig is missing or its certificate has expired.
    #[arg(long)]
    pub bootstrap_kubeconfig: Option<PathBuf>,
    /// The Node's name, instead of the host's.
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// The node's InternalIP address.
    #[arg(long)]
    pub node_ip: Option<IpAddr>,
    /// The kubelet's state directory; its filesystem is the node's ephemeral-storage.
    #[arg(long, default_value = "/var/lib/kubelet")]
    pub root_dir: PathBuf,
    /// Where the self-signed serving certificate is kept (default <root-dir>/pki).
    #[arg(long)]
    pub cert_dir: Option<PathBuf>,
    /// Labels to register the Node with: key=value,...
    #[arg(long, default_value = "")]
    pub node_labels: String,
    /// Log verbosity as upstream's klog levels: up to 2 info, 3–5 debug, 6 and over trace
    /// (RUST_LOG, when set, wins).
    #[arg(long = "v", short = 'v', default_value_t = 0)]
    pub verbosity: u8,
    /// Test only: the capacity the Node declares instead of the machine's, for placement and scale
    /// tests of many nodes on one machine: cpu=8,memory=32Gi[,ephemeral-storage=...]. Pods are not
    /// limited by it.
    #[arg(long)]
    pub test_node_capacity: Option<String>,

    /// A directory of static pod manifests, or one manifest (staticPodPath).
    #[arg(long)]
    pub pod_manifest_path: Option<PathBuf>,
    /// How often the static pod manifests are read (fileCheckFrequency; 20s).
    #[arg(long, value_parser = go_duration)]
    pub file_check_frequency: Option<Duration>,
    /// The CRI runtime's endpoint (containerRuntimeEndpoint; default
    /// unix:///run/containerd/containerd.sock).
    #[arg(long)]
    pub container_runtime_endpoint: Option<String>,
    /// The most pods this node runs (maxPods; 110).
    #[arg(long)]
    pub max_pods: Option<i64>,
    /// Taints to register the Node with: key=value:Effect,... (registerWithTaints).
    #[arg(long)]
    pub register_with_taints: Option<String>,
    /// How often the status is computed and, when it changed, reported (nodeStatusUpdateFrequency;
    /// 10s).
    #[arg(long, value_parser = go_duration)]
    pub node_status_update_frequency: Option<Duration>,
    /// The most images the Node's status lists, -1 for all (nodeStatusMaxImages; 50).
    #[arg(long)]
    pub node_status_max_images: Option<i32>,
    /// How often a pod is synced with nothing to wake it (syncFrequency; 1m).
    #[arg(long, value_parser = go_duration)]
    pub sync_frequency: Option<Duration>,
    /// The cluster's DNS server addresses, for ClusterFirst pods: IP,... (clusterDNS).
    #[arg(long, value_delimiter = ',')]
    pub cluster_dns: Option<Vec<IpAddr>>,
    /// The cluster's DNS domain (clusterDomain).
    #[arg(long)]
    pub cluster_domain: Option<String>,
    /// The resolver configuration pods with dnsPolicy Default get (resolvConf; /etc/resolv.conf).
    #[arg(long)]
    pub resolv_conf: Option<PathBuf>,
    /// Hard eviction thresholds: signal<quantity or percentage,... (evictionHard).
    #[arg(long)]
    pub eviction_hard: Option<String>,
    /// Resources held back for the system: name=quantity,... (systemReserved).
    #[arg(long)]
    pub system_reserved: Option<String>,
    /// Resources held back for Kubernetes' own daemons: name=quantity,... (kubeReserved).
    #[arg(long)]
    pub kube_reserved: Option<String>,
    /// The Node's spec.providerID (providerID).
    #[arg(long)]
    pub provider_id: Option<String>,
    /// Whether the kubelet API is served (enableServer; true).
    #[arg(long, action = clap::ArgAction::Set)]
    pub enable_server: Option<bool>,
    /// The address the kubelet API is served on (address; 0.0.0.0).
    #[arg(long)]
    pub address: Option<IpAddr>,
    /// The port of the kubelet API, HTTPS (port; 10250).
    #[arg(long)]
    pub port: Option<i32>,
    /// The kubelet API's serving certificate (with its CA chain); without it, a self-signed one in
    /// --cert-dir (tlsCertFile).
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// Its key (tlsPrivateKeyFile).
    #[arg(long)]
    pub tls_private_key_file: Option<PathBuf>,
    /// Renew the client certificate before it expires (rotateCertificates; false).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub rotate_certificates: Option<bool>,
    /// Request the kubelet API's certificate from the kubelet-serving signer and renew it
    /// (serverTLSBootstrap; false).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub rotate_server_certificates: Option<bool>,
    /// The CA client certificates of kubelet API requests are verified against
    /// (authentication.x509.clientCAFile).
    #[arg(long)]
    pub client_ca_file: Option<PathBuf>,
    /// Kubelet API requests no authenticator recognises are system:anonymous
    /// (authentication.anonymous.enabled; true without --config, false with it).
    #[arg(long, action = clap::ArgAction::Set)]
    pub anonymous_auth: Option<bool>,
    /// Bearer tokens of kubelet API requests are reviewed by the API server, TokenReview
    /// (authentication.webhook.enabled; false without --config, true with it).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub authentication_token_webhook: Option<bool>,
    /// How long a token review is cached (authentication.webhook.cacheTTL; 2m).
    #[arg(long, value_parser = go_duration)]
    pub authentication_token_webhook_cache_ttl: Option<Duration>,
    /// AlwaysAllow, or Webhook: kubelet API requests authorized by SubjectAccessReviews
    /// (authorization.mode; AlwaysAllow without --config, Webhook with it).
    #[arg(long)]
    pub authorization_mode: Option<Authorization>,
    /// How long an allowed review is cached (authorization.webhook.cacheAuthorizedTTL; 5m).
    #[arg(long, value_parser = go_duration)]
    pub authorization_webhook_cache_authorized_ttl: Option<Duration>,
    /// How long a denied review is cached (authorization.webhook.cacheUnauthorizedTTL; 30s).
    #[arg(long, value_parser = go_duration)]
    pub authorization_webhook_cache_unauthorized_ttl: Option<Duration>,
    /// The port of the plain-HTTP /healthz, 0 for none (healthzPort; 10248).
    #[arg(long)]
    pub healthz_port: Option<i32>,
    /// Its address (healthzBindAddress; 127.0.0.1).
    #[arg(long)]
    pub healthz_bind_address: Option<IpAddr>,
    /// Pod cgroups under kubepods by QoS class (cgroupsPerQOS; true).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub cgroups_per_qos: Option<bool>,
    /// The cgroup kubepods goes under (cgroupRoot; `/`).
    #[arg(long)]
    pub cgroup_root: Option<String>,
    /// cgroupfs, the only driver keel-kubelet has (cgroupDriver).
    #[arg(long)]
    pub cgroup_driver: Option<String>,
    /// `pods` or `none`, comma-separated; empty for none (enforceNodeAllocatable; pods).
    #[arg(long)]
    pub enforce_node_allocatable: Option<String>,
    /// The most processes a pod may run, -1 for no limit (podPidsLimit).
    #[arg(long)]
    pub pod_max_pids: Option<i64>,
}

impl Flags {
    /// The log filter `--v` asks for.
    pub fn log_filter(&self) -> tracing_subscriber::EnvFilter {
        if std::env::var_os("RUST_LOG").is_some() {
            return tracing_subscriber::EnvFilter::from_default_env();
        }
        let level = match self.verbosity {
            0..=2 => "info",
            3..=5 => "debug",
            _ => "trace",
        };
        tracing_subscriber::EnvFilter::new(format!("keel_kubelet={level},warn"))
    }
}

/// A Go duration (`10s`, `1m30s`), as upstream's duration flags take it.
fn go_duration(text: &str) -> Result<Duration, String> {
    let nanos = keel_api::duration::parse(text)?;
    u64::try_from(nanos).map(Duration::from_nanos).map_err(|_| format!("{text:?} is negative"))
}

impl Flags {
    /// The configuration the kubelet runs with: the file's (or the flags' defaults), the flags
    /// given over it, validated. What decoding the file warns about is logged, as upstream logs
    /// it, whether or not the configuration is then valid.
    pub fn configuration(&self) -> Result<KubeletConfiguration, ConfigError> {
        let mut config = match &self.config {
            Some(path) => {
                let decoded = config::load(path)?;
                for warning in &decoded.warnings {
                    tracing::warn!("{warning}");
                }
                decoded.config
            }
            None => KubeletConfiguration::flag_defaults(),
        };
        self.apply(&mut config).map_err(ConfigError::Invalid)?;
        config::validate(&config)?;
        Ok(config)
    }

    /// Sets every field whose flag was given.
    fn apply(&self, config: &mut KubeletConfiguration) -> Result<(), String> {
        fn set<T: Clone>(flag: Option<&T>, field: &mut T) {
            if let Some(value) = flag {
                *field = value.clone();
            }
        }
        if self.pod_manifest_path.is_some() {
            config.static_pod_path.clone_from(&self.pod_manifest_path);
        }
        set(self.file_check_frequency.as_ref(), &mut config.file_check_frequency);
        set(self.container_runtime_endpoint.as_ref(), &mut config.container_runtime_endpoint);
        set(self.max_pods.as_ref(), &mut config.max_pods);
        if let Some(text) = &self.register_with_taints {
            config.register_with_taints = taints(text)?;
        }
        set(self.node_status_update_frequency.as_ref(), &mut config.node_status_update_frequency);
        set(self.node_status_max_images.as_ref(), &mut config.node_status_max_images);
        set(self.sync_frequency.as_ref(), &mut config.sync_frequency);
        set(self.cluster_dns.as_ref(), &mut config.cluster_dns);
        set(self.cluster_domain.as_ref(), &mut config.cluster_domain);
        set(self.resolv_conf.as_ref(), &mut config.resolv_conf);
        if let Some(text) = &self.eviction_hard {
            config.eviction_hard = pairs(text, '<')?;
        }
        if let Some(text) = &self.system_reserved {
            config.system_reserved = pairs(text, '=')?;
        }
        if let Some(text) = &self.kube_reserved {
            config.kube_reserved = pairs(text, '=')?;
        }
        set(self.provider_id.as_ref(), &mut config.provider_id);
        set(self.enable_server.as_ref(), &mut config.enable_server);
        set(self.address.as_ref(), &mut config.address);
        set(self.port.as_ref(), &mut config.port);
        if self.tls_cert_file.is_some() {
            config.tls_cert_file.clone_from(&self.tls_cert_file);
        }
        if self.tls_private_key_file.is_some() {
            config.tls_private_key_file.clone_from(&self.tls_private_key_file);
        }
        set(self.rotate_certificates.as_ref(), &mut config.rotate_certificates);
        set(self.rotate_server_certificates.as_ref(), &mut config.server_tls_bootstrap);
        if self.client_ca_file.is_some() {
            config.client_ca_file.clone_from(&self.client_ca_file);
        }
        set(self.anonymous_auth.as_ref(), &mut config.anonymous_auth);
        set(self.authentication_token_webhook.as_ref(), &mut config.webhook_authentication);
        set(
            self.authentication_token_webhook_cache_ttl.as_ref(),
            &mut config.webhook_authentication_cache_ttl,
        );
        set(self.authorization_mode.as_ref(), &mut config.authorization_mode);
        set(self.authorization_webhook_cache_authorized_ttl.as_ref(), &mut config.authorized_ttl);
        set(self.authorization_webhook_cache_unauthorized_ttl.as_ref(), &mut config.unauthorized_ttl);
        set(self.healthz_port.as_ref(), &mut config.healthz_port);
        set(self.healthz_bind_address.as_ref(), &mut config.healthz_bind_address);
        set(self.cgroups_per_qos.as_ref(), &mut config.cgroups_per_qos);
        set(self.cgroup_root.as_ref(), &mut config.cgroup_root);
        set(self.cgroup_driver.as_ref(), &mut config.cgroup_driver);
        if let Some(list) = &self.enforce_node_allocatable {
            config.enforce_node_allocatable =
                list.split(',').map(str::trim).filter(|v| !v.is_empty()).map(str::to_owned).collect();
        }
        set(self.pod_max_pids.as_ref(), &mut config.pod_pids_limit);
        if config.tls_cert_file.is_some() != config.tls_private_key_file.is_some() {
            return Err("tlsCertFile and tlsPrivateKeyFile must be given together".into());
        }
        Ok(())
    }
}

/// `k<sep>v,...` as upstream's map flags read it (`--kube-reserved cpu=100m`, `--eviction-hard
/// memory.available<100Mi`).
fn pairs(text: &str, separator: char) -> Result<BTreeMap<String, String>, String> {
    let mut map = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once(separator) else {
            return Err(format!("malformed pair, expect string{separator}string: {pair:?}"));
        };
        map.insert(key.trim().to_owned(), value.trim().to_owned());
    }
    Ok(map)
}

/// `--node-labels`: `key=value` pairs, comma-separated.
pub fn node_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("invalid label {pair:?}: must be formatted as key=value"));
        };
        if key.is_empty() {
            return Err(format!("invalid label {pair:?}: the key must not be empty"));
        }
        labels.insert(key.to_owned(), value.to_owned());
    }
    Ok(labels)
}

/// `--register-with-taints`: `key=value:Effect` or `key:Effect`, comma-separated (upstream's
/// ParseTaints).
pub fn taints(text: &str) -> Result<Vec<Taint>, String> {
    let mut taints = Vec::new();
    for spec in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((key_value, effect)) = spec.rsplit_once(':') else {
            return Err(format!("invalid taint spec: {spec}"));
        };
        if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
            return Err(format!("invalid taint effect: {effect}, unsupported taint effect"));
        }
        let (key, value) = match key_value.split_once('=') {
            Some((key, value)) => (key, Some(value.to_owned())),
            None => (key_value, None),
        };
        if key.is_empty() {
            return Err(format!("invalid taint spec: {spec}"));
        }
        taints.push(Taint { key: key.to_owned(), value, effect: effect.to_owned(), ..Taint::default() });
    }
    Ok(taints)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_taints_parse_as_upstream_writes_them() {
        let labels = node_labels("a=1, zone=b,empty=").unwrap();
        assert_eq!(labels.len(), 3);
        assert_eq!(labels["empty"], "");
        assert!(node_labels("novalue").unwrap_err().contains("key=value"));
        let taints = taints("dedicated=infra:NoSchedule,gpu:NoExecute").unwrap();
        assert_eq!(taints[0].value.as_deref(), Some("infra"));
        assert_eq!((taints[1].key.as_str(), taints[1].value.as_deref()), ("gpu", None));
        assert_eq!(
            super::taints("a=b:Sometimes").unwrap_err(),
            "invalid taint effect: Sometimes, unsupported taint effect"
        );
        assert_eq!(super::taints("nothing").unwrap_err(), "invalid taint spec: nothing");
    }
}
