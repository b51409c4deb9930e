//! The CRI configs of a pod's sandbox and containers (upstream's generatePodSandboxConfig and
//! generateContainerConfig): metadata and the labels the kubelet finds them by, hostname, DNS,
//! port mappings, namespaces, security context, resources, environment (with `$(VAR)` expansion
//! and downward-API values) and mounts. Pure: what is mounted comes prepared from the caller.

use std::collections::{BTreeMap, HashMap};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, PodSpec, SecurityContext};
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
            dns.searches = vec![format!("{namespace}.svc.{domain}"), format!("svc.{domain}"), domain.clone()];
            dns.searches.extend(env.host_resolv.searches.iter().cloned());
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

/// The container's environment (upstream's makeEnvironmentVariables): envFrom first, then env,
/// which overrides it; each `value` expanded against what came before; downward-API fieldRefs,
/// ConfigMap and Secret keys from `sources` (what the kubelet read for the pod; optional ones may
/// be missing). resourceFieldRef is not handled yet. An error is the container's
/// CreateContainerConfigError message, in upstream's words.
pub fn environment(
    pod: &Pod,
    container: &Container,
    facts: &PodFacts,
    sources: &Sources,
) -> Result<Vec<(String, String)>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let mut vars = BTreeMap::new();
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
                } else {
                    return Err(format!("{name}: resourceFieldRef is not supported by keel-kubelet yet"));
                }
            }
            (Some(value), None) => expand(value, &vars),
            (None, None) => String::new(),
        };
        set(&mut out, &mut vars, name.clone(), value);
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

    fn env() -> PodEnvironment {
        PodEnvironment {
            cluster_dns: vec!["10.96.0.10".into()],
            cluster_domain: "cluster.local".into(),
            host_resolv: Resolv::parse("nameserver 1.1.1.1\nsearch corp.example # comment\noptions edns0\n"),
            pod_logs_dir: "/var/log/pods/".into(),
            node_name: "n1".into(),
        }
    }

    #[test]
    fn dns_as_upstream_builds_it() {
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
        let facts = PodFacts { host_ips: vec!["10.0.0.5".into()], pod_ips: vec!["10.244.0.7".into()] };
        let env = environment(&pod(), &container, &facts, &Sources::default()).unwrap();
        assert_eq!(env[2], ("APP".to_owned(), "web".to_owned()));
        assert_eq!(env[3], ("URL".to_owned(), "http://10.244.0.7/web-0".to_owned()));
        let mut bad = container.clone();
        bad.env = Some(vec![EnvVar {
            name: "X".into(),
            value_from: Some(field("spec.nope")),
            ..EnvVar::default()
        }]);
        assert_eq!(
            environment(&pod(), &bad, &facts, &Sources::default()).unwrap_err(),
            "unsupported fieldPath: spec.nope"
        );
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
