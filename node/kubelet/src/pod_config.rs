//! The CRI configs of a pod's sandbox and containers (upstream's generatePodSandboxConfig and
//! generateContainerConfig): metadata and the labels the kubelet finds them by, hostname, DNS,
//! port mappings, namespaces, security context, resources, environment (with `$(VAR)` expansion
//! and downward-API values) and mounts. Pure: what is mounted comes prepared from the caller.

use std::collections::{BTreeMap, HashMap};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{
    Container, EnvVar, Pod, PodSpec, ResourceFieldSelector, SecurityContext, Service,
};
use keel_api::validation::quantity::Quantity;

use crate::pod_actions::container_hash;
use crate::pod_runtime::{
    CONTAINER_HASH_ANNOTATION, CONTAINER_NAME_LABEL, POD_NAME_LABEL, POD_NAMESPACE_LABEL, POD_UID_LABEL,
    RESTART_COUNT_ANNOTATION, TERMINATION_GRACE_ANNOTATION,
};
use crate::volumes::Sources;

/// What the kubelet knows that goes into every pod: its DNS settings and the host's resolver.
#[derive(Debug, Clone, Default)]
pub struct PodEnvironment {
    /// `--cluster-dns`.
    pub cluster_dns: Vec<String>,
    /// `--cluster-domain`.
    pub cluster_domain: String,
    /// The host's resolv.conf (the `Default` dnsPolicy).
    pub host_resolv: Resolv,
    /// KubeletConfiguration podLogsDir (/var/log/pods).
    pub pod_logs_dir: String,
    /// The node's name, the hostname of host-network pods.
    pub node_name: String,
    /// The node's allocatable resources (what a resourceFieldRef limit defaults to).
    pub allocatable: BTreeMap<String, Quantity>,
    /// How the node's cgroups limit swap (see [`no_swap`]).
    pub swap: SwapControl,
}

/// The swap control the node's cgroups offer (upstream's getSwapControllerAvailable).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SwapControl {
    /// None: the containers' memory limits are all there is.
    #[default]
    None,
    /// cgroup v1's memory.memsw.limit_in_bytes.
    MemswV1,
    /// cgroup v2's memory.swap.max.
    SwapMaxV2,
}

/// upstream's NoSwap behaviour (the default swapBehavior): a container does not swap past its
/// memory limit — on cgroup v1 its memory+swap limit is its memory limit, on v2 its swap.max is 0.
pub fn no_swap(resources: &mut cri::LinuxContainerResources, swap: SwapControl) {
    match swap {
        SwapControl::None => {}
        SwapControl::MemswV1 => resources.memory_swap_limit_in_bytes = resources.memory_limit_in_bytes,
        SwapControl::SwapMaxV2 => {
            resources.unified.insert("memory.swap.max".into(), "0".into());
        }
    }
}

/// The parts of a resolv.conf the kubelet passes on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolv {
    pub servers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

impl Resolv {
    /// Parses a resolv.conf as upstream's parseResolvConf does (the last `search` wins).
    pub fn parse(text: &str) -> Resolv {
        let mut resolv = Resolv::default();
        for line in text.lines() {
            let line = line.split(['#', ';']).next().unwrap_or_default();
            let mut fields = line.split_whitespace();
            match fields.next() {
                Some("nameserver") => resolv.servers.extend(fields.next().map(str::to_owned)),
                Some("search") => resolv.searches = fields.map(str::to_owned).collect(),
                Some("options") => resolv.options.extend(fields.map(str::to_owned)),
                _ => {}
            }
        }
        resolv
    }
}

fn spec(pod: &Pod) -> PodSpec {
    pod.spec.clone().unwrap_or_default()
}

/// `<namespace>_<name>_<uid>` under podLogsDir: the pod's log directory.
pub fn log_directory(pod: &Pod, env: &PodEnvironment) -> String {
    let meta = &pod.metadata;
    format!(
        "{}/{}_{}_{}",
        env.pod_logs_dir.trim_end_matches('/'),
        meta.namespace.as_deref().unwrap_or("default"),
        meta.name.as_deref().unwrap_or_default(),
        meta.uid.as_deref().unwrap_or_default()
    )
}

/// The labels on the sandbox: the pod's own and the kubelet's.
pub fn pod_labels(pod: &Pod) -> HashMap<String, String> {
    let meta = &pod.metadata;
    let mut labels: HashMap<String, String> = meta.labels.clone().unwrap_or_default().into_iter().collect();
    labels.insert(POD_NAME_LABEL.into(), meta.name.clone().unwrap_or_default());
    labels.insert(POD_NAMESPACE_LABEL.into(), meta.namespace.clone().unwrap_or_default());
    labels.insert(POD_UID_LABEL.into(), meta.uid.clone().unwrap_or_default());
    labels
}

/// The pod's DNS (upstream's GetPodDNS): ClusterFirst uses the cluster's DNS when one is
/// configured (else the host's, as upstream falls back), Default the host's, None only dnsConfig;
/// dnsConfig's servers, searches and options are added last.
pub fn dns_config(pod: &Pod, env: &PodEnvironment) -> cri::DnsConfig {
    let spec = spec(pod);
    let host_network = spec.host_network.unwrap_or(false);
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let cluster = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_network,
        _ => false,
    } && !env.cluster_dns.is_empty();
    let mut dns = cri::DnsConfig::default();
    if policy != "None" {
        if cluster {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
            let domain = &env.cluster_domain;
            dns.servers = env.cluster_dns.clone();
            // generateSearchesForDNSClusterFirst: no cluster searches without a cluster domain;
            // the host's follow, duplicates left out.
            if !domain.is_empty() {
                dns.searches =
                    vec![format!("{namespace}.svc.{domain}"), format!("svc.{domain}"), domain.clone()];
            }
            for search in &env.host_resolv.searches {
                if !dns.searches.contains(search) {
                    dns.searches.push(search.clone());
                }
            }
            dns.options = vec!["ndots:5".into()];
        } else {
            dns.servers = env.host_resolv.servers.clone();
            dns.searches = env.host_resolv.searches.clone();
            dns.options = env.host_resolv.options.clone();
        }
    }
    if let Some(config) = spec.dns_config {
        dns.servers.extend(config.nameservers.unwrap_or_default());
        for search in config.searches.unwrap_or_default() {
            if !dns.searches.contains(&search) {
                dns.searches.push(search);
            }
        }
        for option in config.options.unwrap_or_default() {
            let name = option.name.unwrap_or_default();
            let text = match option.value {
                Some(value) => format!("{name}:{value}"),
                None => name.clone(),
            };
            dns.options.retain(|o| o.split(':').next() != Some(name.as_str()));
            dns.options.push(text);
        }
    }
    dns
}

fn protocol(name: Option<&str>) -> i32 {
    match name {
        Some("UDP") => cri::Protocol::Udp as i32,
        Some("SCTP") => cri::Protocol::Sctp as i32,
        _ => cri::Protocol::Tcp as i32,
    }
}

fn namespace_options(spec: &PodSpec) -> cri::NamespaceOption {
    let mode = |node: Option<bool>, otherwise: cri::NamespaceMode| {
        if node.unwrap_or(false) { cri::NamespaceMode::Node as i32 } else { otherwise as i32 }
    };
    let pid_otherwise = if spec.share_process_namespace.unwrap_or(false) {
        cri::NamespaceMode::Pod
    } else {
        cri::NamespaceMode::Container
    };
    cri::NamespaceOption {
        network: mode(spec.host_network, cri::NamespaceMode::Pod),
        pid: mode(spec.host_pid, pid_otherwise),
        ipc: mode(spec.host_ipc, cri::NamespaceMode::Pod),
        ..cri::NamespaceOption::default()
    }
}

/// The pod's hostname (upstream's GeneratePodHostNameAndDomain): spec.hostname, else the pod's
/// name up to 63 characters without a trailing `-` or `.`; the node's for host-network pods.
pub fn hostname(pod: &Pod, env: &PodEnvironment) -> String {
    let spec = spec(pod);
    if spec.host_network.unwrap_or(false) {
        return env.node_name.clone();
    }
    let name = spec.hostname.unwrap_or_else(|| pod.metadata.name.clone().unwrap_or_default());
    let mut name: String = name.chars().take(63).collect();
    while name.ends_with(['-', '.']) {
        name.pop();
    }
    name
}

/// The pod's /etc/hosts (upstream's managedHostsFileContent): localhost and the IPv6 names, each
/// pod IP with the pod's hostname (and its FQDN under a subdomain), then its hostAliases. A
/// host-network pod gets the node's file (`node_hosts`) under the host-network header instead.
pub fn hosts_file(pod: &Pod, pod_ips: &[String], env: &PodEnvironment, node_hosts: &str) -> String {
    let spec = spec(pod);
    let mut out = String::new();
    if spec.host_network.unwrap_or(false) {
        out.push_str("# Kubernetes-managed hosts file (host network).\n");
        out.push_str(node_hosts);
    } else {
        out.push_str("# Kubernetes-managed hosts file.\n");
        out.push_str("127.0.0.1\tlocalhost\n");
        out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
        out.push_str("fe00::0\tip6-localnet\n");
        out.push_str("fe00::0\tip6-mcastprefix\n");
        out.push_str("fe00::1\tip6-allnodes\n");
        out.push_str("fe00::2\tip6-allrouters\n");
        let name = hostname(pod, env);
        let subdomain = spec.subdomain.clone().unwrap_or_default();
        for ip in pod_ips {
            if subdomain.is_empty() {
                out.push_str(&format!("{ip}\t{name}\n"));
            } else {
                let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
                let domain = format!("{subdomain}.{namespace}.svc.{}", env.cluster_domain);
                out.push_str(&format!("{ip}\t{name}.{domain}\t{name}\n"));
            }
        }
    }
    let aliases = spec.host_aliases.unwrap_or_default();
    if !aliases.is_empty() {
        out.push_str("\n# Entries added by HostAliases.\n");
        for alias in aliases {
            out.push_str(&format!("{}\t{}\n", alias.ip, alias.hostnames.unwrap_or_default().join("\t")));
        }
    }
    out
}

/// RunPodSandbox's config for `pod`, attempt `attempt`.
pub fn sandbox_config(pod: &Pod, attempt: u32, env: &PodEnvironment) -> cri::PodSandboxConfig {
    let spec = spec(pod);
    let meta = &pod.metadata;
    let port_mappings = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h != 0))
        .map(|p| cri::PortMapping {
            protocol: protocol(p.protocol.as_deref()),
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or_default(),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect();
    let pod_security = spec.security_context.clone().unwrap_or_default();
    let privileged = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .any(|c| c.security_context.as_ref().and_then(|s| s.privileged).unwrap_or(false));
    let sysctls = pod_security.sysctls.iter().flatten().map(|s| (s.name.clone(), s.value.clone())).collect();
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            namespace: meta.namespace.clone().unwrap_or_default(),
            attempt,
        }),
        hostname: hostname(pod, env),
        log_directory: log_directory(pod, env),
        dns_config: Some(dns_config(pod, env)),
        port_mappings,
        labels: pod_labels(pod),
        annotations: meta.annotations.clone().unwrap_or_default().into_iter().collect(),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(&spec)),
                run_as_user: pod_security.run_as_user.map(|value| cri::Int64Value { value }),
                run_as_group: pod_security.run_as_group.map(|value| cri::Int64Value { value }),
                supplemental_groups: pod_security.supplemental_groups.clone().unwrap_or_default(),
                privileged,
                ..cri::LinuxSandboxSecurityContext::default()
            }),
            sysctls,
            ..cri::LinuxPodSandboxConfig::default()
        }),
        ..cri::PodSandboxConfig::default()
    }
}

/// upstream's `$(VAR)` expansion (third_party/forked/golang/expansion): a defined variable is
/// replaced, an undefined one kept as written, `$$` is a literal `$`.
pub fn expand(input: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(open) = after.strip_prefix('(') {
            match open.find(')') {
                Some(close) => {
                    let name = &open[..close];
                    match vars.get(name) {
                        Some(value) => out.push_str(value),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &open[close + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = open;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// What the downward API reads of the pod at container start.
#[derive(Debug, Clone, Default)]
pub struct PodFacts {
    pub host_ips: Vec<String>,
    pub pod_ips: Vec<String>,
    /// The node's allocatable resources: the limits a resourceFieldRef reads when unset.
    pub allocatable: BTreeMap<String, Quantity>,
    /// Whether the pod is a static pod (it needs no Services read).
    pub static_pod: bool,
}

/// A `fieldRef` value (upstream's podFieldSelectorRuntimeValue and ExtractFieldPathAsString).
pub fn field_value(pod: &Pod, facts: &PodFacts, path: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = spec(pod);
    let keyed = |prefix: &str, map: &Option<BTreeMap<String, String>>| {
        path.strip_prefix(prefix)
            .and_then(|k| k.strip_prefix("['").and_then(|k| k.strip_suffix("']")))
            .map(|key| map.as_ref().and_then(|m| m.get(key)).cloned().unwrap_or_default())
    };
    if let Some(value) = keyed("metadata.labels", &meta.labels) {
        return Ok(value);
    }
    if let Some(value) = keyed("metadata.annotations", &meta.annotations) {
        return Ok(value);
    }
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.node_name.unwrap_or_default(),
        "spec.serviceAccountName" => spec.service_account_name.unwrap_or_default(),
        "status.hostIP" => facts.host_ips.first().cloned().unwrap_or_default(),
        "status.hostIPs" => facts.host_ips.join(","),
        "status.podIP" => facts.pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => facts.pod_ips.join(","),
        other => return Err(format!("unsupported fieldPath: {other}")),
    })
}

/// The Service environment variables of a pod in `namespace` (upstream's getServiceEnvVarMap and
/// envvars.FromServices): with `enable_service_links`, every Service of the namespace with a
/// cluster IP, and always the `kubernetes` Service of `default` unless the namespace has one of
/// that name: `<NAME>_SERVICE_HOST`, `_SERVICE_PORT` (the first port) and `_SERVICE_PORT_<PORT>`
/// per named port, and Docker's link variables (`<NAME>_PORT=tcp://ip:port`,
/// `<NAME>_PORT_<port>_<PROTO>` with `_PROTO`, `_PORT`, `_ADDR`).
pub fn service_environment<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    namespace: &str,
    enable_service_links: bool,
) -> BTreeMap<String, String> {
    let mut chosen: BTreeMap<String, &Service> = BTreeMap::new();
    let mut master = None;
    for service in services {
        let ip = service.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()).unwrap_or_default();
        if ip.is_empty() || ip == "None" {
            continue;
        }
        let name = service.metadata.name.clone().unwrap_or_default();
        let in_namespace = service.metadata.namespace.as_deref().unwrap_or("default");
        if in_namespace == "default" && name == "kubernetes" {
            master = Some(service);
        }
        if in_namespace == namespace && enable_service_links {
            chosen.insert(name, service);
        }
    }
    if let Some(master) = master {
        chosen.entry("kubernetes".into()).or_insert(master);
    }
    let mut env = BTreeMap::new();
    for (name, service) in chosen {
        let spec = service.spec.clone().unwrap_or_default();
        let ip = spec.cluster_ip.clone().unwrap_or_default();
        let ports = spec.ports.unwrap_or_default();
        let Some(first) = ports.first() else { continue };
        let prefix = name.replace('-', "_").to_uppercase();
        env.insert(format!("{prefix}_SERVICE_HOST"), ip.clone());
        env.insert(format!("{prefix}_SERVICE_PORT"), first.port.to_string());
        for port in &ports {
            if let Some(port_name) = port.name.as_deref().filter(|n| !n.is_empty()) {
                let key = format!("{prefix}_SERVICE_PORT_{}", port_name.replace('-', "_").to_uppercase());
                env.insert(key, port.port.to_string());
            }
        }
        let host = |port: i32| match ip.contains(':') {
            true => format!("[{ip}]:{port}"),
            false => format!("{ip}:{port}"),
        };
        for (index, port) in ports.iter().enumerate() {
            let protocol = port.protocol.clone().unwrap_or_else(|| "TCP".into());
            let lower = protocol.to_lowercase();
            if index == 0 {
                env.insert(format!("{prefix}_PORT"), format!("{lower}://{}", host(port.port)));
            }
            let port_prefix = format!("{prefix}_PORT_{}_{}", port.port, protocol.to_uppercase());
            env.insert(port_prefix.clone(), format!("{lower}://{}", host(port.port)));
            env.insert(format!("{port_prefix}_PROTO"), lower);
            env.insert(format!("{port_prefix}_PORT"), port.port.to_string());
            env.insert(format!("{port_prefix}_ADDR"), ip.clone());
        }
    }
    env
}

/// A `resourceFieldRef` value (upstream's ExtractContainerResourceValue): the container's request
/// or limit divided by the divisor and rounded up; a limit the container does not set is the
/// node's allocatable (upstream's defaultPodLimitsForDownwardAPI).
pub fn resource_field_value(
    pod: &Pod,
    container: &Container,
    field: &ResourceFieldSelector,
    allocatable: &BTreeMap<String, Quantity>,
) -> Result<String, String> {
    let named = field.container_name.as_deref().filter(|n| !n.is_empty());
    let spec = spec(pod);
    let target = match named {
        Some(name) => {
            let mut all = spec.containers.iter().chain(spec.init_containers.iter().flatten());
            all.find(|c| c.name == name).ok_or_else(|| format!("container {name} not found"))?
        }
        None => container,
    };
    let (which, resource) = field
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported container resource : {}", field.resource))?;
    let value = match which {
        "limits" => quantity(target, "limits", resource).or_else(|| allocatable.get(resource).copied()),
        "requests" => quantity(target, "requests", resource),
        _ => return Err(format!("unsupported container resource : {}", field.resource)),
    };
    let divisor =
        field.divisor.as_ref().and_then(|d| Quantity::parse(&d.0)).unwrap_or_else(|| Quantity::from_count(1));
    let value = value.unwrap_or_else(|| Quantity::from_count(0));
    let ceil = |numerator: i64, denominator: i64| {
        if denominator == 0 { 0 } else { (numerator as f64 / denominator as f64).ceil() as i64 }
    };
    match resource {
        "cpu" => Ok(ceil(value.milli_value(), divisor.milli_value()).to_string()),
        "memory" | "ephemeral-storage" => Ok(ceil(value.value(), divisor.value()).to_string()),
        huge if huge.starts_with("hugepages-") => Ok(ceil(value.value(), divisor.value()).to_string()),
        _ => Err(format!("unsupported container resource : {}", field.resource)),
    }
}

/// The container's environment (upstream's makeEnvironmentVariables): envFrom first, then env,
/// which overrides it; each `value` expanded against what came before and the Service variables;
/// downward-API fieldRefs and resourceFieldRefs, ConfigMap and Secret keys from `sources` (what
/// the kubelet read for the pod; optional ones may be missing); last, the Service variables no
/// other one named. An error is the container's CreateContainerConfigError message, in
/// upstream's words.
pub fn environment(
    pod: &Pod,
    container: &Container,
    facts: &PodFacts,
    sources: &Sources,
) -> Result<Vec<(String, String)>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let service_env = match &sources.service_env {
        Some(env) => env.clone(),
        None if facts.static_pod => BTreeMap::new(),
        None => return Err("services have not yet been read at least once, cannot construct envvars".into()),
    };
    // `$(VAR)` sees the Service variables under the declared ones.
    let mut vars = service_env.clone();
    let mut out: Vec<(String, String)> = Vec::new();
    let set = |out: &mut Vec<(String, String)>,
               vars: &mut BTreeMap<String, String>,
               name: String,
               value: String| {
        vars.insert(name.clone(), value.clone());
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some(existing) => existing.1 = value,
            None => out.push((name, value)),
        }
    };
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let entries: Vec<(String, String)> = if let Some(reference) = &from.config_map_ref {
            match sources.config_map(&reference.name) {
                Some(map) => map.data.clone().unwrap_or_default().into_iter().collect(),
                None if reference.optional == Some(true) => continue,
                None => return Err(format!("configmap {:?} not found", reference.name)),
            }
        } else if let Some(reference) = &from.secret_ref {
            match sources.secret(&reference.name) {
                Some(secret) => secret
                    .data
                    .clone()
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                    .collect(),
                None if reference.optional == Some(true) => continue,
                None => return Err(format!("secret {:?} not found", reference.name)),
            }
        } else {
            continue;
        };
        for (key, value) in entries {
            set(&mut out, &mut vars, format!("{prefix}{key}"), value);
        }
    }
    for EnvVar { name, value, value_from } in container.env.iter().flatten() {
        let value = match (value, value_from) {
            (_, Some(from)) => {
                if let Some(field) = &from.field_ref {
                    field_value(pod, facts, &field.field_path)?
                } else if let Some(key) = &from.config_map_key_ref {
                    let optional = key.optional == Some(true);
                    let found = match sources.config_map(&key.name) {
                        Some(map) => map.data.as_ref().and_then(|d| d.get(&key.key)).cloned(),
                        None if optional => continue,
                        None => return Err(format!("configmap {:?} not found", key.name)),
                    };
                    match found {
                        Some(value) => value,
                        None if optional => continue,
                        None => {
                            return Err(format!(
                                "couldn't find key {} in ConfigMap {namespace}/{}",
                                key.key, key.name
                            ));
                        }
                    }
                } else if let Some(key) = &from.secret_key_ref {
                    let optional = key.optional == Some(true);
                    let found = match sources.secret(&key.name) {
                        Some(secret) => secret
                            .data
                            .as_ref()
                            .and_then(|d| d.get(&key.key))
                            .map(|v| String::from_utf8_lossy(&v.0).into_owned()),
                        None if optional => continue,
                        None => return Err(format!("secret {:?} not found", key.name)),
                    };
                    match found {
                        Some(value) => value,
                        None if optional => continue,
                        None => {
                            return Err(format!(
                                "couldn't find key {} in Secret {namespace}/{}",
                                key.key, key.name
                            ));
                        }
                    }
                } else if let Some(field) = &from.resource_field_ref {
                    resource_field_value(pod, container, field, &facts.allocatable)?
                } else {
                    String::new()
                }
            }
            (Some(value), None) => expand(value, &vars),
            (None, None) => String::new(),
        };
        set(&mut out, &mut vars, name.clone(), value);
    }
    for (name, value) in service_env {
        if !out.iter().any(|(declared, _)| *declared == name) {
            out.push((name, value));
        }
    }
    Ok(out)
}

/// upstream's default masked and read-only /proc paths (securitycontext.defaultMaskedPaths and
/// defaultReadonlyPaths), given to every unprivileged container.
const MASKED_PATHS: [&str; 9] = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
];
const READONLY_PATHS: [&str; 6] =
    ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger", "/sys/firmware"];

/// CPU shares from millicores (upstream's MilliCPUToShares: at least 2).
pub fn cpu_shares(milli: i64) -> i64 {
    if milli == 0 { 2 } else { (milli * 1024 / 1000).max(2) }
}

fn quantity(container: &Container, which: &str, resource: &str) -> Option<Quantity> {
    let resources = container.resources.as_ref()?;
    let map = if which == "limits" { resources.limits.as_ref()? } else { resources.requests.as_ref()? };
    map.get(resource).and_then(|q| Quantity::parse(&q.0))
}

fn linux_resources(container: &Container) -> cri::LinuxContainerResources {
    let milli = |q: Option<Quantity>| q.map(|q| q.milli_value());
    let cpu_request =
        milli(quantity(container, "requests", "cpu")).or(milli(quantity(container, "limits", "cpu")));
    let cpu_limit = milli(quantity(container, "limits", "cpu"));
    let memory_limit = quantity(container, "limits", "memory").map(|q| q.value());
    let period = 100_000;
    cri::LinuxContainerResources {
        cpu_shares: cpu_shares(cpu_request.unwrap_or(0)),
        cpu_period: if cpu_limit.is_some() { period } else { 0 },
        cpu_quota: cpu_limit.map_or(0, |milli| (milli * period / 1000).max(1000)),
        memory_limit_in_bytes: memory_limit.unwrap_or(0),
        ..cri::LinuxContainerResources::default()
    }
}

fn security_context(spec: &PodSpec, security: &SecurityContext) -> cri::LinuxContainerSecurityContext {
    let pod = spec.security_context.clone().unwrap_or_default();
    let privileged = security.privileged.unwrap_or(false);
    let capabilities = security.capabilities.as_ref().map(|c| cri::Capability {
        add_capabilities: c.add.clone().unwrap_or_default(),
        drop_capabilities: c.drop.clone().unwrap_or_default(),
        ..cri::Capability::default()
    });
    let unmasked = security.proc_mount.as_deref() == Some("Unmasked");
    cri::LinuxContainerSecurityContext {
        capabilities,
        privileged,
        namespace_options: Some(namespace_options(spec)),
        run_as_user: security.run_as_user.or(pod.run_as_user).map(|value| cri::Int64Value { value }),
        run_as_group: security.run_as_group.or(pod.run_as_group).map(|value| cri::Int64Value { value }),
        readonly_rootfs: security.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: pod.supplemental_groups.unwrap_or_default(),
        no_new_privs: security.allow_privilege_escalation == Some(false),
        masked_paths: if privileged || unmasked { vec![] } else { MASKED_PATHS.map(str::to_owned).to_vec() },
        readonly_paths: if privileged || unmasked {
            vec![]
        } else {
            READONLY_PATHS.map(str::to_owned).to_vec()
        },
        ..cri::LinuxContainerSecurityContext::default()
    }
}

/// CreateContainer's config for `container` of `pod`, its `restart_count`th run, with the image
/// the runtime resolved (`image_ref`), its environment and its mounts.
pub fn container_config(
    pod: &Pod,
    container: &Container,
    restart_count: u32,
    image_ref: &str,
    env: Vec<(String, String)>,
    mounts: Vec<cri::Mount>,
) -> cri::ContainerConfig {
    let spec = spec(pod);
    let vars: BTreeMap<String, String> = env.iter().cloned().collect();
    let meta = &pod.metadata;
    let labels = HashMap::from([
        (CONTAINER_NAME_LABEL.to_owned(), container.name.clone()),
        (POD_NAME_LABEL.to_owned(), meta.name.clone().unwrap_or_default()),
        (POD_NAMESPACE_LABEL.to_owned(), meta.namespace.clone().unwrap_or_default()),
        (POD_UID_LABEL.to_owned(), meta.uid.clone().unwrap_or_default()),
    ]);
    let annotations = HashMap::from([
        (CONTAINER_HASH_ANNOTATION.to_owned(), container_hash(container)),
        (RESTART_COUNT_ANNOTATION.to_owned(), restart_count.to_string()),
        (
            "io.kubernetes.container.terminationMessagePath".to_owned(),
            container.termination_message_path.clone().unwrap_or_else(|| "/dev/termination-log".into()),
        ),
        (
            "io.kubernetes.container.terminationMessagePolicy".to_owned(),
            container.termination_message_policy.clone().unwrap_or_else(|| "File".into()),
        ),
        (
            TERMINATION_GRACE_ANNOTATION.to_owned(),
            spec.termination_grace_period_seconds.unwrap_or(30).to_string(),
        ),
    ]);
    let security = container.security_context.clone().unwrap_or_default();
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata { name: container.name.clone(), attempt: restart_count }),
        image: Some(cri::ImageSpec {
            image: image_ref.to_owned(),
            user_specified_image: container.image.clone().unwrap_or_default(),
            ..cri::ImageSpec::default()
        }),
        command: container.command.iter().flatten().map(|c| expand(c, &vars)).collect(),
        args: container.args.iter().flatten().map(|a| expand(a, &vars)).collect(),
        working_dir: container.working_dir.clone().unwrap_or_default(),
        envs: env.into_iter().map(|(key, value)| cri::KeyValue { key, value }).collect(),
        mounts,
        labels,
        annotations,
        log_path: format!("{}/{restart_count}.log", container.name),
        stdin: container.stdin.unwrap_or(false),
        stdin_once: container.stdin_once.unwrap_or(false),
        tty: container.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(linux_resources(container)),
            security_context: Some(security_context(&spec, &security)),
        }),
        ..cri::ContainerConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EnvVarSource, ObjectFieldSelector};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("shop".into()),
                uid: Some("u1".into()),
                labels: Some(BTreeMap::from([("app".to_owned(), "web".to_owned())])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec { node_name: Some("n1".into()), ..PodSpec::default() }),
            ..Pod::default()
        }
    }

    #[test]
    fn no_swap_past_the_memory_limit() {
        let limited = cri::LinuxContainerResources { memory_limit_in_bytes: 1 << 20, ..Default::default() };
        let mut v1 = limited.clone();
        no_swap(&mut v1, SwapControl::MemswV1);
        assert_eq!(v1.memory_swap_limit_in_bytes, 1 << 20);
        let mut v2 = limited.clone();
        no_swap(&mut v2, SwapControl::SwapMaxV2);
        assert_eq!(v2.unified.get("memory.swap.max").map(String::as_str), Some("0"));
        let mut none = limited.clone();
        no_swap(&mut none, SwapControl::None);
        assert_eq!(none, limited);
    }

    fn env() -> PodEnvironment {
        PodEnvironment {
            cluster_dns: vec!["10.96.0.10".into()],
            cluster_domain: "cluster.local".into(),
            host_resolv: Resolv::parse("nameserver 1.1.1.1\nsearch corp.example # comment\noptions edns0\n"),
            pod_logs_dir: "/var/log/pods/".into(),
            node_name: "n1".into(),
            swap: SwapControl::None,
            allocatable: BTreeMap::new(),
        }
    }

    #[test]
    fn hosts_files_as_upstream_writes_them() {
        let mut pod = pod();
        let spec = pod.spec.get_or_insert_with(PodSpec::default);
        spec.host_aliases = Some(vec![k8s_openapi::api::core::v1::HostAlias {
            ip: "10.1.2.3".into(),
            hostnames: Some(vec!["foo.local".into(), "bar.local".into()]),
        }]);
        let ips = ["10.244.0.7".to_owned()];
        assert_eq!(
            hosts_file(&pod, &ips, &env(), ""),
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
             10.244.0.7\tweb-0\n\n# Entries added by HostAliases.\n10.1.2.3\tfoo.local\tbar.local\n"
        );
        let spec = pod.spec.get_or_insert_with(PodSpec::default);
        (spec.subdomain, spec.host_aliases) = (Some("db".into()), None);
        let with_domain = hosts_file(&pod, &ips, &env(), "");
        let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        assert!(
            with_domain.ends_with(&format!("10.244.0.7\tweb-0.db.{namespace}.svc.cluster.local\tweb-0\n")),
            "{with_domain}"
        );
        pod.spec.get_or_insert_with(PodSpec::default).host_network = Some(true);
        assert_eq!(
            hosts_file(&pod, &[], &env(), "127.0.0.1 localhost\n"),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n"
        );
    }

    #[test]
    fn dns_as_upstream_builds_it() {
        // Without a cluster domain (upstream's default) a ClusterFirst pod gets the host's searches.
        let no_domain = PodEnvironment { cluster_domain: String::new(), ..env() };
        assert_eq!(dns_config(&pod(), &no_domain).searches, ["corp.example"]);
        let dns = dns_config(&pod(), &env());
        assert_eq!(dns.servers, ["10.96.0.10"]);
        assert_eq!(
            dns.searches,
            ["shop.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"]
        );
        assert_eq!(dns.options, ["ndots:5"]);
        let mut host = pod();
        host.spec.as_mut().unwrap().host_network = Some(true);
        let dns = dns_config(&host, &env());
        assert_eq!((dns.servers, dns.options), (vec!["1.1.1.1".to_owned()], vec!["edns0".to_owned()]));
        assert_eq!(hostname(&host, &env()), "n1");
        assert_eq!(log_directory(&pod(), &env()), "/var/log/pods/shop_web-0_u1");
    }

    #[test]
    fn variables_expand_as_upstream() {
        let vars = BTreeMap::from([("A".to_owned(), "x".to_owned())]);
        assert_eq!(expand("$(A)-$(B)-$$(A)-$-$(", &vars), "x-$(B)-$(A)-$-$(");
    }

    #[test]
    fn environment_in_order_with_the_downward_api() {
        let field = |path: &str| EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        };
        let container = Container {
            name: "c".into(),
            env: Some(vec![
                EnvVar { name: "POD".into(), value_from: Some(field("metadata.name")), ..EnvVar::default() },
                EnvVar { name: "IP".into(), value_from: Some(field("status.podIP")), ..EnvVar::default() },
                EnvVar {
                    name: "APP".into(),
                    value_from: Some(field("metadata.labels['app']")),
                    ..EnvVar::default()
                },
                EnvVar { name: "URL".into(), value: Some("http://$(IP)/$(POD)".into()), ..EnvVar::default() },
            ]),
            ..Container::default()
        };
        let facts = PodFacts {
            host_ips: vec!["10.0.0.5".into()],
            pod_ips: vec!["10.244.0.7".into()],
            ..PodFacts::default()
        };
        let read = Sources { service_env: Some(BTreeMap::new()), ..Sources::default() };
        let env = environment(&pod(), &container, &facts, &read).unwrap();
        assert_eq!(env[2], ("APP".to_owned(), "web".to_owned()));
        assert_eq!(env[3], ("URL".to_owned(), "http://10.244.0.7/web-0".to_owned()));
        let mut bad = container.clone();
        bad.env = Some(vec![EnvVar {
            name: "X".into(),
            value_from: Some(field("spec.nope")),
            ..EnvVar::default()
        }]);
        assert_eq!(environment(&pod(), &bad, &facts, &read).unwrap_err(), "unsupported fieldPath: spec.nope");
        // Until the Services are read, no environment is made (but for a static pod's).
        assert_eq!(
            environment(&pod(), &container, &facts, &Sources::default()).unwrap_err(),
            "services have not yet been read at least once, cannot construct envvars"
        );
        let static_facts = PodFacts { static_pod: true, ..facts.clone() };
        assert!(environment(&pod(), &container, &static_facts, &Sources::default()).is_ok());
    }

    #[test]
    fn service_variables_as_upstream_names_them() {
        use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
        let service =
            |namespace: &str, name: &str, ip: &str, ports: &[(Option<&str>, i32, Option<&str>)]| Service {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some(namespace.into()),
                    ..ObjectMeta::default()
                },
                spec: Some(ServiceSpec {
                    cluster_ip: Some(ip.into()),
                    ports: Some(
                        ports
                            .iter()
                            .map(|(name, port, protocol)| ServicePort {
                                name: name.map(Into::into),
                                port: *port,
                                protocol: protocol.map(Into::into),
                                ..ServicePort::default()
                            })
                            .collect(),
                    ),
                    ..ServiceSpec::default()
                }),
                ..Service::default()
            };
        let services = [
            service("default", "kubernetes", "10.96.0.1", &[(Some("https"), 443, Some("TCP"))]),
            service(
                "web",
                "redis-master",
                "10.96.0.11",
                &[(None, 6379, None), (Some("metrics"), 9121, Some("UDP"))],
            ),
            service("web", "headless", "None", &[(None, 80, None)]),
            service("other", "elsewhere", "10.96.0.12", &[(None, 80, None)]),
            service("web", "v6", "fd00::5", &[(None, 80, None)]),
        ];
        let env = service_environment(&services, "web", true);
        assert_eq!(env["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
        assert_eq!(env["KUBERNETES_SERVICE_PORT"], "443");
        assert_eq!(env["KUBERNETES_SERVICE_PORT_HTTPS"], "443");
        assert_eq!(env["KUBERNETES_PORT"], "tcp://10.96.0.1:443");
        assert_eq!(env["KUBERNETES_PORT_443_TCP_ADDR"], "10.96.0.1");
        assert_eq!(env["REDIS_MASTER_SERVICE_HOST"], "10.96.0.11");
        assert_eq!(env["REDIS_MASTER_SERVICE_PORT"], "6379");
        assert_eq!(env["REDIS_MASTER_SERVICE_PORT_METRICS"], "9121");
        assert_eq!(env["REDIS_MASTER_PORT"], "tcp://10.96.0.11:6379");
        assert_eq!(env["REDIS_MASTER_PORT_9121_UDP"], "udp://10.96.0.11:9121");
        assert_eq!(env["REDIS_MASTER_PORT_9121_UDP_PROTO"], "udp");
        assert_eq!(env["REDIS_MASTER_PORT_9121_UDP_PORT"], "9121");
        assert_eq!(env["V6_PORT"], "tcp://[fd00::5]:80");
        assert!(!env.keys().any(|k| k.starts_with("HEADLESS") || k.starts_with("ELSEWHERE")));
        // Without service links only the master Service is given.
        let bare = service_environment(&services, "web", false);
        assert!(bare.keys().all(|k| k.starts_with("KUBERNETES_")), "{bare:?}");
        // A namespace's own `kubernetes` Service wins over the master one.
        let own = [services[0].clone(), service("web", "kubernetes", "10.96.0.99", &[(None, 443, None)])];
        assert_eq!(service_environment(&own, "web", true)["KUBERNETES_SERVICE_HOST"], "10.96.0.99");

        // The container's own variables win; the Service ones come last and expand.
        let container = Container {
            name: "c".into(),
            env: Some(vec![
                EnvVar {
                    name: "REDIS_MASTER_SERVICE_PORT".into(),
                    value: Some("1".into()),
                    ..EnvVar::default()
                },
                EnvVar {
                    name: "URL".into(),
                    value: Some("redis://$(REDIS_MASTER_SERVICE_HOST)".into()),
                    ..EnvVar::default()
                },
            ]),
            ..Container::default()
        };
        let read = Sources { service_env: Some(env), ..Sources::default() };
        let out = environment(&pod(), &container, &PodFacts::default(), &read).unwrap();
        assert_eq!(out[0], ("REDIS_MASTER_SERVICE_PORT".to_owned(), "1".to_owned()));
        assert_eq!(out[1], ("URL".to_owned(), "redis://10.96.0.11".to_owned()));
        assert_eq!(out.iter().filter(|(n, _)| n == "REDIS_MASTER_SERVICE_PORT").count(), 1);
        assert!(out.iter().any(|(n, v)| n == "KUBERNETES_SERVICE_HOST" && v == "10.96.0.1"));
    }

    #[test]
    fn resource_fields_divided_and_rounded_up() {
        use k8s_openapi::api::core::v1::{ResourceFieldSelector, ResourceRequirements};
        use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
        let container = Container {
            name: "c".into(),
            resources: Some(ResourceRequirements {
                requests: Some(BTreeMap::from([
                    ("cpu".to_owned(), ApiQuantity("250m".into())),
                    ("memory".to_owned(), ApiQuantity("64Mi".into())),
                ])),
                limits: Some(BTreeMap::from([("cpu".to_owned(), ApiQuantity("1500m".into()))])),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        };
        let allocatable = BTreeMap::from([("memory".to_owned(), Quantity::parse("2Gi").unwrap())]);
        let field = |resource: &str, divisor: Option<&str>| ResourceFieldSelector {
            resource: resource.into(),
            divisor: divisor.map(|d| ApiQuantity(d.into())),
            container_name: None,
        };
        let value = |resource: &str, divisor: Option<&str>| {
            resource_field_value(&pod(), &container, &field(resource, divisor), &allocatable)
        };
        assert_eq!(value("requests.cpu", None).unwrap(), "1");
        assert_eq!(value("requests.cpu", Some("1m")).unwrap(), "250");
        assert_eq!(value("limits.cpu", None).unwrap(), "2");
        assert_eq!(value("requests.memory", Some("1Mi")).unwrap(), "64");
        // An unset limit is the node's allocatable.
        assert_eq!(value("limits.memory", Some("1Mi")).unwrap(), "2048");
        assert_eq!(value("requests.ephemeral-storage", None).unwrap(), "0");
        assert!(value("limits.gpu", None).unwrap_err().contains("unsupported container resource"));
        let elsewhere =
            ResourceFieldSelector { container_name: Some("other".into()), ..field("limits.cpu", None) };
        assert!(resource_field_value(&pod(), &container, &elsewhere, &allocatable).is_err());
    }

    #[test]
    fn environment_from_config_maps_and_secrets() {
        use k8s_openapi::api::core::v1::{
            ConfigMap, ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, Secret, SecretKeySelector,
        };
        let sources = Sources {
            config_maps: BTreeMap::from([
                (
                    "app".to_owned(),
                    Some(ConfigMap {
                        data: Some(BTreeMap::from([("MODE".to_owned(), "fast".to_owned())])),
                        ..ConfigMap::default()
                    }),
                ),
                ("gone".to_owned(), None),
            ]),
            secrets: BTreeMap::from([(
                "db".to_owned(),
                Some(Secret {
                    data: Some(BTreeMap::from([("pw".to_owned(), k8s_openapi::ByteString(b"s3".to_vec()))])),
                    ..Secret::default()
                }),
            )]),
            service_env: Some(BTreeMap::new()),
            ..Sources::default()
        };
        let key = |name: &str, key: &str, optional: Option<bool>| EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector { name: name.into(), key: key.into(), optional }),
            ..EnvVarSource::default()
        };
        let container = Container {
            name: "c".into(),
            env_from: Some(vec![EnvFromSource {
                prefix: Some("APP_".into()),
                config_map_ref: Some(ConfigMapEnvSource { name: "app".into(), optional: None }),
                ..EnvFromSource::default()
            }]),
            env: Some(vec![
                EnvVar { name: "APP_MODE".into(), value: Some("slow".into()), ..EnvVar::default() },
                EnvVar {
                    name: "PW".into(),
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "db".into(),
                            key: "pw".into(),
                            optional: None,
                        }),
                        ..EnvVarSource::default()
                    }),
                    ..EnvVar::default()
                },
                EnvVar {
                    name: "SKIPPED".into(),
                    value_from: Some(key("gone", "x", Some(true))),
                    ..EnvVar::default()
                },
            ]),
            ..Container::default()
        };
        let env = environment(&pod(), &container, &PodFacts::default(), &sources).unwrap();
        assert_eq!(env, [("APP_MODE".to_owned(), "slow".to_owned()), ("PW".to_owned(), "s3".to_owned())]);
        let mut missing = container.clone();
        missing.env = Some(vec![EnvVar {
            name: "X".into(),
            value_from: Some(key("app", "nope", None)),
            ..EnvVar::default()
        }]);
        assert_eq!(
            environment(&pod(), &missing, &PodFacts::default(), &sources).unwrap_err(),
            "couldn't find key nope in ConfigMap shop/app"
        );
        missing.env = Some(vec![EnvVar {
            name: "X".into(),
            value_from: Some(key("gone", "k", None)),
            ..EnvVar::default()
        }]);
        assert_eq!(
            environment(&pod(), &missing, &PodFacts::default(), &sources).unwrap_err(),
            "configmap \"gone\" not found"
        );
    }

    #[test]
    fn the_sandbox_and_container_configs() {
        let mut p = pod();
        let container = Container {
            name: "web".into(),
            image: Some("busybox".into()),
            command: Some(vec!["sh".into(), "-c".into(), "echo $(GREETING)".into()]),
            ports: Some(vec![k8s_openapi::api::core::v1::ContainerPort {
                container_port: 80,
                host_port: Some(8080),
                ..Default::default()
            }]),
            ..Container::default()
        };
        p.spec.as_mut().unwrap().containers = vec![container.clone()];
        let sandbox = sandbox_config(&p, 1, &env());
        assert_eq!(sandbox.metadata.as_ref().unwrap().attempt, 1);
        assert_eq!(sandbox.labels[POD_UID_LABEL], "u1");
        assert_eq!(sandbox.labels["app"], "web");
        assert_eq!(sandbox.port_mappings[0].host_port, 8080);
        let ns = sandbox.linux.unwrap().security_context.unwrap().namespace_options.unwrap();
        assert_eq!(
            (ns.network, ns.pid),
            (cri::NamespaceMode::Pod as i32, cri::NamespaceMode::Container as i32)
        );
        let config =
            container_config(&p, &container, 2, "sha256:abc", vec![("GREETING".into(), "hi".into())], vec![]);
        assert_eq!(config.command[2], "echo hi");
        assert_eq!(config.log_path, "web/2.log");
        assert_eq!(config.annotations[RESTART_COUNT_ANNOTATION], "2");
        assert_eq!(config.image.unwrap().image, "sha256:abc");
        let resources = config.linux.unwrap().resources.unwrap();
        assert_eq!(resources.cpu_shares, 2);
    }
}
