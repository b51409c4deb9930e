//! The kubelet's configuration: a KubeletConfiguration file (`--config`, kubelet.config.k8s.io/v1beta1)
//! decoded as upstream's kubelet decodes it, then the command-line flags over it (upstream's flag
//! precedence), then validated with upstream's messages. Pure apart from [`load`], which reads the
//! file.
//!
//! Decoding follows upstream's DecodeKubeletConfiguration: a field no v1beta1 KubeletConfiguration
//! has is a strict decoding error, logged as a warning while the rest is decoded leniently; a value
//! of the wrong type fails. Defaults are v1beta1's (SetDefaults_KubeletConfiguration), which differ
//! from the flags' own: with a file, the kubelet API is authenticated (anonymous off, token webhook
//! on) and authorized by Webhook; without one, anonymous requests are allowed (the flags' legacy
//! defaults). Relative paths in the file are taken from its directory.
//!
//! The fields keel-kubelet honours are [`HONOURED`]; any other field of upstream's set in the file
//! is warned about by name and has no effect.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Taint;
use serde_json::{Map, Value};

use crate::server::Authorization;

pub const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
pub const KIND: &str = "KubeletConfiguration";

/// The fields of a KubeletConfiguration file that keel-kubelet honours.
pub const HONOURED: &[&str] = &[
    "enableServer",
    "staticPodPath",
    "fileCheckFrequency",
    "podLogsDir",
    "syncFrequency",
    "address",
    "port",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "rotateCertificates",
    "serverTLSBootstrap",
    "authentication",
    "authorization",
    "healthzPort",
    "healthzBindAddress",
    "clusterDomain",
    "clusterDNS",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
    "nodeLeaseDurationSeconds",
    "maxPods",
    "resolvConf",
    "nodeStatusMaxImages",
    "evictionHard",
    "mergeDefaultEvictionSettings",
    "systemReserved",
    "kubeReserved",
    "registerWithTaints",
    "providerID",
    "containerRuntimeEndpoint",
    "cgroupsPerQOS",
    "cgroupRoot",
    "cgroupDriver",
    "enforceNodeAllocatable",
    "podPidsLimit",
];

/// Every field of upstream's v1beta1 KubeletConfiguration (k8s.io/kubelet v0.34), besides
/// apiVersion and kind: what is not here is unknown to any kubelet.
pub const UPSTREAM_FIELDS: &[&str] = &[
    "enableServer",
    "staticPodPath",
    "podLogsDir",
    "syncFrequency",
    "fileCheckFrequency",
    "httpCheckFrequency",
    "staticPodURL",
    "staticPodURLHeader",
    "address",
    "port",
    "readOnlyPort",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "tlsCipherSuites",
    "tlsMinVersion",
    "rotateCertificates",
    "serverTLSBootstrap",
    "authentication",
    "authorization",
    "registryPullQPS",
    "registryBurst",
    "imagePullCredentialsVerificationPolicy",
    "preloadedImagesVerificationAllowlist",
    "eventRecordQPS",
    "eventBurst",
    "enableDebuggingHandlers",
    "enableContentionProfiling",
    "healthzPort",
    "healthzBindAddress",
    "oomScoreAdj",
    "clusterDomain",
    "clusterDNS",
    "streamingConnectionIdleTimeout",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
    "nodeLeaseDurationSeconds",
    "imageMinimumGCAge",
    "imageMaximumGCAge",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "volumeStatsAggPeriod",
    "kubeletCgroups",
    "systemCgroups",
    "cgroupRoot",
    "cgroupsPerQOS",
    "cgroupDriver",
    "cpuManagerPolicy",
    "singleProcessOOMKill",
    "cpuManagerPolicyOptions",
    "cpuManagerReconcilePeriod",
    "memoryManagerPolicy",
    "topologyManagerPolicy",
    "topologyManagerScope",
    "topologyManagerPolicyOptions",
    "qosReserved",
    "runtimeRequestTimeout",
    "hairpinMode",
    "maxPods",
    "podCIDR",
    "podPidsLimit",
    "resolvConf",
    "runOnce",
    "cpuCFSQuota",
    "cpuCFSQuotaPeriod",
    "nodeStatusMaxImages",
    "maxOpenFiles",
    "contentType",
    "kubeAPIQPS",
    "kubeAPIBurst",
    "serializeImagePulls",
    "maxParallelImagePulls",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionPressureTransitionPeriod",
    "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim",
    "mergeDefaultEvictionSettings",
    "podsPerCore",
    "enableControllerAttachDetach",
    "protectKernelDefaults",
    "makeIPTablesUtilChains",
    "iptablesMasqueradeBit",
    "iptablesDropBit",
    "featureGates",
    "failSwapOn",
    "memorySwap",
    "containerLogMaxSize",
    "containerLogMaxFiles",
    "containerLogMaxWorkers",
    "containerLogMonitorInterval",
    "configMapAndSecretChangeDetectionStrategy",
    "systemReserved",
    "kubeReserved",
    "reservedSystemCPUs",
    "showHiddenMetricsForVersion",
    "systemReservedCgroup",
    "kubeReservedCgroup",
    "enforceNodeAllocatable",
    "allowedUnsafeSysctls",
    "volumePluginDir",
    "providerID",
    "kernelMemcgNotification",
    "logging",
    "enableSystemLogHandler",
    "enableSystemLogQuery",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "shutdownGracePeriodByPodPriority",
    "crashLoopBackOff",
    "reservedMemory",
    "enableProfilingHandler",
    "enableDebugFlagsHandler",
    "seccompDefault",
    "memoryThrottlingFactor",
    "registerWithTaints",
    "registerNode",
    "tracing",
    "localStorageCapacityIsolation",
    "containerRuntimeEndpoint",
    "imageServiceEndpoint",
    "failCgroupV1",
    "userNamespaces",
];

/// The nested objects whose fields are checked too: (path, its fields).
const NESTED: &[(&str, &[&str])] = &[
    ("authentication", &["x509", "webhook", "anonymous"]),
    ("authentication.x509", &["clientCAFile"]),
    ("authentication.webhook", &["enabled", "cacheTTL"]),
    ("authentication.anonymous", &["enabled"]),
    ("authorization", &["mode", "webhook"]),
    ("authorization.webhook", &["cacheAuthorizedTTL", "cacheUnauthorizedTTL"]),
];

/// upstream's DefaultEvictionHard (Linux).
const DEFAULT_EVICTION_HARD: &[(&str, &str)] = &[
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
    ("imagefs.inodesFree", "5%"),
];

/// The kubelet's effective configuration (what it runs with), in KubeletConfiguration's terms.
#[derive(Debug, Clone, PartialEq)]
pub struct KubeletConfiguration {
    /// Whether the kubelet API (`address:port`) is served.
    pub enable_server: bool,
    /// A directory of static pod manifests, or one manifest (none: no static pods).
    pub static_pod_path: Option<PathBuf>,
    /// How often it is read.
    pub file_check_frequency: Duration,
    /// Where the pods' log directories are (`<podLogsDir>/<ns>_<name>_<uid>`).
    pub pod_logs_dir: PathBuf,
    /// How often a pod is synced with nothing to wake it.
    pub sync_frequency: Duration,
    pub address: IpAddr,
    pub port: i32,
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// Whether the client certificate is renewed before it expires.
    pub rotate_certificates: bool,
    /// Whether the kubelet API's certificate is requested from the kubelet-serving signer.
    pub server_tls_bootstrap: bool,
    /// authentication.x509.clientCAFile.
    pub client_ca_file: Option<PathBuf>,
    /// authentication.anonymous.enabled.
    pub anonymous_auth: bool,
    /// authentication.webhook.enabled and cacheTTL.
    pub webhook_authentication: bool,
    pub webhook_authentication_cache_ttl: Duration,
    /// authorization.mode and the webhook's cacheAuthorizedTTL and cacheUnauthorizedTTL.
    pub authorization_mode: Authorization,
    pub authorized_ttl: Duration,
    pub unauthorized_ttl: Duration,
    /// The plain-HTTP `/healthz` (0: not served).
    pub healthz_port: i32,
    pub healthz_bind_address: IpAddr,
    pub cluster_domain: String,
    pub cluster_dns: Vec<IpAddr>,
    pub node_status_update_frequency: Duration,
    pub node_status_report_frequency: Duration,
    pub node_lease_duration_seconds: i32,
    pub max_pods: i64,
    /// The resolv.conf `Default` pods get (empty: none).
    pub resolv_conf: PathBuf,
    /// The most images the Node's status lists (-1: all).
    pub node_status_max_images: i32,
    /// Hard eviction thresholds by signal (`memory.available` → `100Mi`).
    pub eviction_hard: BTreeMap<String, String>,
    pub system_reserved: BTreeMap<String, String>,
    pub kube_reserved: BTreeMap<String, String>,
    pub register_with_taints: Vec<Taint>,
    pub provider_id: String,
    pub container_runtime_endpoint: String,
    /// Pod cgroups under kubepods by QoS class (cgroupsPerQOS; true).
    pub cgroups_per_qos: bool,
    /// The cgroup kubepods goes under (cgroupRoot; "" is `/`).
    pub cgroup_root: String,
    /// cgroupfs only (cgroupDriver).
    pub cgroup_driver: String,
    /// `pods` (kubepods limited to the allocatable) or `none` (enforceNodeAllocatable; [pods]).
    pub enforce_node_allocatable: Vec<String>,
    /// The most processes a pod's cgroup may hold; -1 is no limit (podPidsLimit).
    pub pod_pids_limit: i64,
}

impl Default for KubeletConfiguration {
    /// v1beta1's defaults (SetDefaults_KubeletConfiguration and DefaultEvictionHard).
    fn default() -> KubeletConfiguration {
        KubeletConfiguration {
            enable_server: true,
            static_pod_path: None,
            file_check_frequency: Duration::from_secs(20),
            pod_logs_dir: "/var/log/pods".into(),
            sync_frequency: Duration::from_secs(60),
            address: IpAddr::from([0, 0, 0, 0]),
            port: 10250,
            tls_cert_file: None,
            tls_private_key_file: None,
            rotate_certificates: false,
            server_tls_bootstrap: false,
            client_ca_file: None,
            anonymous_auth: false,
            webhook_authentication: true,
            webhook_authentication_cache_ttl: Duration::from_secs(120),
            authorization_mode: Authorization::Webhook,
            authorized_ttl: Duration::from_secs(300),
            unauthorized_ttl: Duration::from_secs(30),
            healthz_port: 10248,
            healthz_bind_address: IpAddr::from([127, 0, 0, 1]),
            cluster_domain: String::new(),
            cluster_dns: Vec::new(),
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_secs(300),
            node_lease_duration_seconds: 40,
            max_pods: 110,
            resolv_conf: "/etc/resolv.conf".into(),
            node_status_max_images: 50,
            eviction_hard: DEFAULT_EVICTION_HARD
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            cgroups_per_qos: true,
            cgroup_root: String::new(),
            cgroup_driver: "cgroupfs".into(),
            enforce_node_allocatable: vec!["pods".into()],
            pod_pids_limit: -1,
            system_reserved: BTreeMap::new(),
            kube_reserved: BTreeMap::new(),
            register_with_taints: Vec::new(),
            provider_id: String::new(),
            container_runtime_endpoint: "unix:///run/containerd/containerd.sock".into(),
        }
    }
}

impl KubeletConfiguration {
    /// What the kubelet runs with when no file is given: v1beta1's defaults with the flags' legacy
    /// ones over them (upstream's applyLegacyDefaults): anonymous requests allowed, no token
    /// webhook, AlwaysAllow.
    pub fn flag_defaults() -> KubeletConfiguration {
        KubeletConfiguration {
            anonymous_auth: true,
            webhook_authentication: false,
            authorization_mode: Authorization::AlwaysAllow,
            ..KubeletConfiguration::default()
        }
    }
}

/// A decoded file: the configuration, and what was warned about.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    pub config: KubeletConfiguration,
    pub warnings: Vec<String>,
}

/// A file that cannot be used, in upstream's words.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "failed to load kubelet config file, path: {path}, error: failed to load Kubelet config file {path}, error {reason}"
    )]
    Load { path: String, reason: String },
    #[error("failed to validate kubelet configuration, error: {0}")]
    Invalid(String),
}

/// Reads and decodes the file at `path` (the IO edge of [`decode`]).
pub fn load(path: &Path) -> Result<Decoded, ConfigError> {
    let shown = path.display().to_string();
    let failed = |reason: String| ConfigError::Load { path: shown.clone(), reason };
    let absolute = std::path::absolute(path).map_err(|e| failed(e.to_string()))?;
    let bytes = std::fs::read(&absolute).map_err(|e| {
        failed(format!("failed to read kubelet config file {:?}, error: {e}", absolute.display()))
    })?;
    if bytes.is_empty() {
        return Err(failed(format!("kubelet config file {:?} was empty", absolute.display())));
    }
    let text = String::from_utf8_lossy(&bytes);
    decode(&text, absolute.parent().unwrap_or(Path::new("/"))).map_err(failed)
}

/// Decodes a KubeletConfiguration (YAML or JSON) over v1beta1's defaults; relative paths are taken
/// from `dir`. The error is upstream's reason.
pub fn decode(text: &str, dir: &Path) -> Result<Decoded, String> {
    let value: Value = serde_yaml_ng::from_str(text).map_err(|e| format!("failed to decode: {e}"))?;
    let Value::Object(object) = value else {
        return Err("failed to decode: the file does not hold an object".into());
    };
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    if kind.is_empty() {
        return Err(format!("failed to decode: Object 'Kind' is missing in '{text}'"));
    }
    if api_version != API_VERSION || kind != KIND {
        return Err(format!("failed to decode: no kind {kind:?} is registered for version {api_version:?}"));
    }
    let mut warnings = Vec::new();
    let unknown = unknown_fields(&object);
    if !unknown.is_empty() {
        let fields: Vec<String> = unknown.iter().map(|f| format!("unknown field {f:?}")).collect();
        warnings.push(format!(
            "Using lenient decoding as strict decoding failed: strict decoding error: {}",
            fields.join(", ")
        ));
    }
    let ignored: Vec<&str> = object
        .keys()
        .map(String::as_str)
        .filter(|k| UPSTREAM_FIELDS.contains(k) && !HONOURED.contains(k))
        .collect();
    if !ignored.is_empty() {
        warnings.push(format!(
            "keel-kubelet does not implement these fields, which have no effect: {}",
            ignored.join(", ")
        ));
    }
    let mut config = KubeletConfiguration::default();
    let file = Fields { object: &object };
    file.bool("enableServer", &mut config.enable_server)?;
    config.static_pod_path =
        file.string("staticPodPath")?.filter(|p| !p.is_empty()).map(|p| resolve(dir, &p));
    file.duration("fileCheckFrequency", &mut config.file_check_frequency)?;
    if let Some(dir_text) = file.string("podLogsDir")? {
        config.pod_logs_dir = resolve(dir, &dir_text);
    }
    file.duration("syncFrequency", &mut config.sync_frequency)?;
    if let Some(address) = file.string("address")? {
        config.address = parse_ip("address", &address)?;
    }
    file.int("port", &mut config.port)?;
    config.tls_cert_file = file.string("tlsCertFile")?.map(|p| resolve(dir, &p));
    config.tls_private_key_file = file.string("tlsPrivateKeyFile")?.map(|p| resolve(dir, &p));
    file.bool("rotateCertificates", &mut config.rotate_certificates)?;
    file.bool("serverTLSBootstrap", &mut config.server_tls_bootstrap)?;
    let authn = file.object("authentication")?;
    if let Some(x509) = authn.object("x509")?.present() {
        config.client_ca_file = x509.string("clientCAFile")?.map(|p| resolve(dir, &p));
    }
    let webhook = authn.object("webhook")?;
    webhook.bool("enabled", &mut config.webhook_authentication)?;
    webhook.duration("cacheTTL", &mut config.webhook_authentication_cache_ttl)?;
    authn.object("anonymous")?.bool("enabled", &mut config.anonymous_auth)?;
    let authz = file.object("authorization")?;
    if let Some(mode) = authz.string("mode")? {
        config.authorization_mode = mode.parse().map_err(|_| {
            format!("failed to decode: authorization mode {mode:?} is not AlwaysAllow or Webhook")
        })?;
    }
    let authz_webhook = authz.object("webhook")?;
    authz_webhook.duration("cacheAuthorizedTTL", &mut config.authorized_ttl)?;
    authz_webhook.duration("cacheUnauthorizedTTL", &mut config.unauthorized_ttl)?;
    file.int("healthzPort", &mut config.healthz_port)?;
    if let Some(address) = file.string("healthzBindAddress")? {
        config.healthz_bind_address = parse_ip("healthzBindAddress", &address)?;
    }
    if let Some(domain) = file.string("clusterDomain")? {
        config.cluster_domain = domain;
    }
    for (index, server) in file.strings("clusterDNS")?.into_iter().enumerate() {
        config.cluster_dns.push(parse_ip(&format!("clusterDNS[{index}]"), &server)?);
    }
    let update_set = file.object.contains_key("nodeStatusUpdateFrequency");
    file.duration("nodeStatusUpdateFrequency", &mut config.node_status_update_frequency)?;
    // upstream: the report frequency follows a given update frequency unless it is given too.
    if update_set && !config.node_status_update_frequency.is_zero() {
        config.node_status_report_frequency = config.node_status_update_frequency;
    }
    file.duration("nodeStatusReportFrequency", &mut config.node_status_report_frequency)?;
    file.int("nodeLeaseDurationSeconds", &mut config.node_lease_duration_seconds)?;
    file.int("maxPods", &mut config.max_pods)?;
    if let Some(resolv) = file.string("resolvConf")? {
        config.resolv_conf = if resolv.is_empty() { PathBuf::new() } else { resolve(dir, &resolv) };
    }
    file.int("nodeStatusMaxImages", &mut config.node_status_max_images)?;
    if let Some(hard) = file.string_map("evictionHard")? {
        let mut merge = false;
        file.bool("mergeDefaultEvictionSettings", &mut merge)?;
        if merge {
            config.eviction_hard.extend(hard);
        } else {
            config.eviction_hard = hard;
        }
    }
    config.system_reserved = file.string_map("systemReserved")?.unwrap_or_default();
    config.kube_reserved = file.string_map("kubeReserved")?.unwrap_or_default();
    if let Some(taints) = file.object.get("registerWithTaints").filter(|v| !v.is_null()) {
        config.register_with_taints = serde_json::from_value(taints.clone()).map_err(|e| {
            format!("failed to decode: json: cannot unmarshal registerWithTaints into []v1.Taint: {e}")
        })?;
    }
    if let Some(id) = file.string("providerID")? {
        config.provider_id = id;
    }
    if let Some(endpoint) = file.string("containerRuntimeEndpoint")? {
        config.container_runtime_endpoint = endpoint;
    }
    file.bool("cgroupsPerQOS", &mut config.cgroups_per_qos)?;
    if let Some(root) = file.string("cgroupRoot")? {
        config.cgroup_root = root;
    }
    if let Some(driver) = file.string("cgroupDriver")?.filter(|d| !d.is_empty()) {
        config.cgroup_driver = driver;
    }
    // v1beta1: a list given (even empty) replaces the default; null is unset.
    if file.object.get("enforceNodeAllocatable").is_some_and(|v| !v.is_null()) {
        config.enforce_node_allocatable = file.strings("enforceNodeAllocatable")?;
    }
    file.int("podPidsLimit", &mut config.pod_pids_limit)?;
    if config.pod_pids_limit < 0 {
        config.pod_pids_limit = -1;
    }
    // v1beta1's defaulting: a zero duration or count is the default (a zero written is unset).
    let defaults = KubeletConfiguration::default();
    for (value, default) in [
        (&mut config.sync_frequency, defaults.sync_frequency),
        (&mut config.file_check_frequency, defaults.file_check_frequency),
        (&mut config.node_status_update_frequency, defaults.node_status_update_frequency),
        (&mut config.webhook_authentication_cache_ttl, defaults.webhook_authentication_cache_ttl),
        (&mut config.authorized_ttl, defaults.authorized_ttl),
        (&mut config.unauthorized_ttl, defaults.unauthorized_ttl),
    ] {
        if value.is_zero() {
            *value = default;
        }
    }
    if config.node_status_report_frequency.is_zero() {
        config.node_status_report_frequency = defaults.node_status_report_frequency;
    }
    if config.port == 0 {
        config.port = defaults.port;
    }
    if config.node_lease_duration_seconds == 0 {
        config.node_lease_duration_seconds = defaults.node_lease_duration_seconds;
    }
    if config.max_pods == 0 {
        config.max_pods = defaults.max_pods;
    }
    if config.container_runtime_endpoint.is_empty() {
        config.container_runtime_endpoint = defaults.container_runtime_endpoint;
    }
    if config.pod_logs_dir.as_os_str().is_empty() {
        config.pod_logs_dir = defaults.pod_logs_dir;
    }
    Ok(Decoded { config, warnings })
}

/// The fields of `object` no v1beta1 KubeletConfiguration has, as strict decoding names them
/// (`authentication.x509.bogus`), sorted as upstream lists them.
fn unknown_fields(object: &Map<String, Value>) -> Vec<String> {
    let mut unknown = Vec::new();
    for key in object.keys() {
        if key != "apiVersion" && key != "kind" && !UPSTREAM_FIELDS.contains(&key.as_str()) {
            unknown.push(key.clone());
        }
    }
    for (path, fields) in NESTED {
        let mut at = Some(object);
        for part in path.split('.') {
            at = at.and_then(|o| o.get(part)).and_then(Value::as_object);
        }
        for key in at.into_iter().flat_map(Map::keys) {
            if !fields.contains(&key.as_str()) {
                unknown.push(format!("{path}.{key}"));
            }
        }
    }
    unknown.sort_unstable();
    unknown
}

/// `path` from the file, absolute (upstream's resolveRelativePaths).
fn resolve(dir: &Path, path: &str) -> PathBuf {
    if path.is_empty() || Path::new(path).is_absolute() { PathBuf::from(path) } else { dir.join(path) }
}

fn parse_ip(field: &str, text: &str) -> Result<IpAddr, String> {
    text.parse().map_err(|_| format!("failed to decode: {field}: {text:?} is not an IP address"))
}

/// A JSON object's fields read as Go's json decoder reads them into the typed struct: a missing or
/// null field leaves the value as it was; a value of another type is Go's unmarshal error.
struct Fields<'a> {
    object: &'a Map<String, Value>,
}

static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

impl<'a> Fields<'a> {
    fn get(&self, field: &str) -> Option<&'a Value> {
        self.object.get(field).filter(|v| !v.is_null())
    }

    fn mismatch(field: &str, value: &Value, go_type: &str) -> String {
        let found = match value {
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
            Value::Null => "null",
        };
        format!(
            "failed to decode: json: cannot unmarshal {found} into Go struct field .{field} of type {go_type}"
        )
    }

    fn present(self) -> Option<Fields<'a>> {
        (!self.object.is_empty()).then_some(self)
    }

    fn object(&self, field: &str) -> Result<Fields<'a>, String> {
        match self.get(field) {
            None => Ok(Fields { object: &EMPTY }),
            Some(Value::Object(object)) => Ok(Fields { object }),
            Some(other) => Err(Fields::mismatch(field, other, "struct")),
        }
    }

    fn bool(&self, field: &str, into: &mut bool) -> Result<(), String> {
        match self.get(field) {
            None => Ok(()),
            Some(Value::Bool(value)) => {
                *into = *value;
                Ok(())
            }
            Some(other) => Err(Fields::mismatch(field, other, "bool")),
        }
    }

    fn int<T: TryFrom<i64>>(&self, field: &str, into: &mut T) -> Result<(), String> {
        match self.get(field) {
            None => Ok(()),
            Some(value) => {
                let number = value.as_i64().and_then(|n| T::try_from(n).ok());
                *into = number.ok_or_else(|| Fields::mismatch(field, value, "int32"))?;
                Ok(())
            }
        }
    }

    fn string(&self, field: &str) -> Result<Option<String>, String> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(other) => Err(Fields::mismatch(field, other, "string")),
        }
    }

    fn strings(&self, field: &str) -> Result<Vec<String>, String> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str().map(str::to_owned).ok_or_else(|| Fields::mismatch(field, item, "string"))
                })
                .collect(),
            Some(other) => Err(Fields::mismatch(field, other, "[]string")),
        }
    }

    fn string_map(&self, field: &str) -> Result<Option<BTreeMap<String, String>>, String> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Object(map)) => map
                .iter()
                .map(|(k, v)| match v.as_str() {
                    Some(text) => Ok((k.clone(), text.to_owned())),
                    None => Err(Fields::mismatch(field, v, "string")),
                })
                .collect::<Result<_, _>>()
                .map(Some),
            Some(other) => Err(Fields::mismatch(field, other, "map[string]string")),
        }
    }

    /// A metav1.Duration (`10s`, `1m30s`); a negative one is an error.
    fn duration(&self, field: &str, into: &mut Duration) -> Result<(), String> {
        let Some(text) = self.string(field)? else { return Ok(()) };
        let nanos = keel_api::duration::parse(&text).map_err(|e| format!("failed to decode: {e}"))?;
        *into = Duration::from_nanos(
            u64::try_from(nanos).map_err(|_| format!("failed to decode: {field} is negative"))?,
        );
        Ok(())
    }
}

/// upstream's ValidateKubeletConfiguration, for the fields keel-kubelet honours: the messages
/// joined as apimachinery's aggregate (`[a, b]` for more than one).
pub fn validate(config: &KubeletConfiguration) -> Result<(), ConfigError> {
    let mut errors = Vec::new();
    if config.node_lease_duration_seconds <= 0 {
        errors.push("invalid configuration: nodeLeaseDurationSeconds must be greater than 0".to_owned());
    }
    if config.healthz_port != 0 && !(1..=65535).contains(&config.healthz_port) {
        errors.push(format!(
            "invalid configuration: healthzPort (--healthz-port) {} must be between 1 and 65535, inclusive",
            config.healthz_port
        ));
    }
    if config.node_status_max_images < -1 {
        errors.push(format!(
            "invalid configuration: nodeStatusMaxImages (--node-status-max-images) {} must be -1 or greater",
            config.node_status_max_images
        ));
    }
    if config.max_pods < 0 {
        errors.push(format!(
            "invalid configuration: maxPods (--max-pods) {} must not be a negative number",
            config.max_pods
        ));
    }
    if !(1..=65535).contains(&config.port) {
        errors.push(format!(
            "invalid configuration: port (--port) {} must be between 1 and 65535, inclusive",
            config.port
        ));
    }
    // upstream's enforceNodeAllocatable checks, for the two values keel-kubelet enforces (pods,
    // none); system-reserved and kube-reserved need cgroups of their own it does not manage.
    let mut seen = std::collections::BTreeSet::new();
    for value in &config.enforce_node_allocatable {
        if !seen.insert(value) {
            errors.push(format!(
                "invalid configuration: duplicated enforcements {value:?} in enforceNodeAllocatable (--enforce-node-allocatable)"
            ));
            continue;
        }
        match value.as_str() {
            "pods" => {}
            "none" => {
                if config.enforce_node_allocatable.len() > 1 {
                    errors.push("invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional enforcements when \"none\" is specified".to_owned());
                }
                continue;
            }
            "system-reserved"
            | "system-reserved-compressible"
            | "kube-reserved"
            | "kube-reserved-compressible" => {
                errors.push(format!(
                    "invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) {value:?} is not supported by keel-kubelet (only \"pods\" and \"none\")"
                ));
                continue;
            }
            other => {
                errors.push(format!(
                    "invalid configuration: option {other:?} specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are \"pods\", \"system-reserved\", \"system-reserved-compressible\", \"kube-reserved\", \"kube-reserved-compressible\" or \"none\""
                ));
                continue;
            }
        }
        if !config.cgroups_per_qos {
            errors.push(format!(
                "invalid configuration: cgroupsPerQOS (--cgroups-per-qos) must be set to true when {value:?} contained in enforceNodeAllocatable (--enforce-node-allocatable)"
            ));
        }
    }
    if config.cgroup_driver != "cgroupfs" {
        errors.push(format!(
            "invalid configuration: cgroupDriver (--cgroup-driver) {:?} is not supported by keel-kubelet (only \"cgroupfs\")",
            config.cgroup_driver
        ));
    }
    for taint in &config.register_with_taints {
        if crate::cli::taints(&taint_spec(taint)).is_err() || taint.key.is_empty() {
            errors.push(format!("invalid taint: {}", taint_spec(taint)));
        }
        if taint.time_added.is_some() {
            errors.push("invalid configuration: taint.TimeAdded is not nil".to_owned());
        }
    }
    if config.container_runtime_endpoint.is_empty() {
        errors.push(
            "invalid configuration: the containerRuntimeEndpoint was not specified or empty".to_owned(),
        );
    }
    let logs = config.pod_logs_dir.to_string_lossy();
    if logs.is_empty() {
        errors.push("invalid configuration: podLogsDir was not specified".to_owned());
    }
    if !config.pod_logs_dir.is_absolute() {
        errors.push(format!("invalid configuration: pod logs path {logs:?} must be absolute path"));
    }
    if !is_clean(&logs) {
        errors.push(format!("invalid configuration: pod logs path {logs:?} must be normalized"));
    }
    if !logs.is_ascii() {
        errors.push(format!(
            "invalid configuration: pod logs path {logs:?} mut contains ASCII characters only"
        ));
    }
    match errors.len() {
        0 => Ok(()),
        1 => Err(ConfigError::Invalid(errors.remove(0))),
        _ => Err(ConfigError::Invalid(format!("[{}]", errors.join(", ")))),
    }
}

/// A taint as `--register-with-taints` writes it.
fn taint_spec(taint: &Taint) -> String {
    match &taint.value {
        Some(value) => format!("{}={value}:{}", taint.key, taint.effect),
        None => format!("{}:{}", taint.key, taint.effect),
    }
}

/// Whether `path` is what Go's filepath.Clean makes of it (no `.`, `..` after a name, `//`, or
/// trailing `/`).
fn is_clean(path: &str) -> bool {
    if path.is_empty() || path == "/" {
        return !path.is_empty();
    }
    let rebuilt: PathBuf = Path::new(path).components().collect();
    let dotted = Path::new(path).components().any(|c| matches!(c, Component::CurDir | Component::ParentDir));
    rebuilt.to_string_lossy() == path && !dotted
}

#[cfg(test)]
mod tests;
