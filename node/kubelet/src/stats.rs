//! The resource usage the kubelet reports: `/stats/summary` (upstream's stats/v1alpha1 Summary,
//! what metrics-server and `kubectl top` read) and `/metrics/resource` (its Prometheus form, the
//! stable `node_`, `pod_` and `container_` series). Pure: the node's figures come from
//! /proc/stat and /proc/meminfo as read by the caller, the containers' from CRI
//! ListContainerStats, the pods' are their containers' sums (keel-kubelet creates no pod cgroups
//! yet, so there is no pod cgroup to read as cAdvisor does).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

/// The node's cumulative CPU time and memory at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeSample {
    pub time: Timestamp,
    /// CPU time spent outside idle and iowait by all CPUs, in nanoseconds.
    pub cpu_core_nanos: u64,
    pub memory: MemInfo,
}

/// When the node booted: `btime` of /proc/stat.
pub fn boot_time(proc_stat: &str) -> Option<Timestamp> {
    let line = proc_stat.lines().find(|l| l.starts_with("btime "))?;
    Timestamp::from_second(line.split_whitespace().nth(1)?.parse().ok()?).ok()
}

/// What /proc/meminfo says, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemInfo {
    pub total: u64,
    pub free: u64,
    pub inactive_file: u64,
    /// AnonPages: the node's resident anonymous memory (cAdvisor's rss).
    pub anon: u64,
}

/// The busy CPU time of `/proc/stat`'s `cpu` line (user, nice, system, irq, softirq, steal), in
/// nanoseconds; `ticks_per_second` is USER_HZ.
pub fn cpu_core_nanos(proc_stat: &str, ticks_per_second: u64) -> Option<u64> {
    let line = proc_stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user and nice).
    let busy: u64 = [0, 1, 2, 5, 6, 7].iter().filter_map(|&i| fields.get(i)).sum();
    Some(busy.checked_mul(1_000_000_000)? / ticks_per_second.max(1))
}

/// The fields of /proc/meminfo the stats use.
pub fn meminfo(text: &str) -> MemInfo {
    let mut info = MemInfo::default();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else { continue };
        let kib: u64 = rest.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0);
        let bytes = kib * 1024;
        match key {
            "MemTotal" => info.total = bytes,
            "MemFree" => info.free = bytes,
            "Inactive(file)" => info.inactive_file = bytes,
            "AnonPages" => info.anon = bytes,
            _ => {}
        }
    }
    info
}

/// A time as the Summary gives it (RFC 3339, seconds).
fn rfc3339(time: Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn nanos_time(nanos: i64) -> Option<Timestamp> {
    Timestamp::from_nanosecond(i128::from(nanos)).ok().filter(|_| nanos > 0)
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_nano_cores: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_core_nano_seconds: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub working_set_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_faults: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major_page_faults: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FsStats {
    pub time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_free: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inodes_used: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStats {
    pub node_name: String,
    pub start_time: String,
    pub cpu: CpuStats,
    pub memory: MemoryStats,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fs: Option<FsStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PodReference {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStats {
    pub name: String,
    pub start_time: String,
    pub cpu: CpuStats,
    pub memory: MemoryStats,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rootfs: Option<FsStats>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStats {
    pub pod_ref: PodReference,
    pub start_time: String,
    pub containers: Vec<ContainerStats>,
    pub cpu: CpuStats,
    pub memory: MemoryStats,
}

/// upstream's stats/v1alpha1 Summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
}

/// What the summary is made from, beside the node's samples.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub node_name: &'a str,
    /// When the node booted.
    pub boot_time: Timestamp,
    /// The node's filesystem (the kubelet's root directory): capacity, available, inodes and
    /// free inodes.
    pub fs: Option<(u64, u64, u64, u64)>,
    /// The pods bound to the node.
    pub pods: &'a [Pod],
    /// CRI ListContainerStats.
    pub containers: &'a [cri::ContainerStats],
    /// When each container (by ID) started, from the runtime.
    pub started: &'a BTreeMap<String, i64>,
}

fn value(v: Option<&cri::UInt64Value>) -> Option<u64> {
    v.map(|v| v.value)
}

fn cpu_of(usage: Option<&cri::CpuUsage>, fallback: Timestamp) -> CpuStats {
    let time = usage.and_then(|u| nanos_time(u.timestamp)).unwrap_or(fallback);
    CpuStats {
        time: rfc3339(time),
        usage_nano_cores: usage.and_then(|u| value(u.usage_nano_cores.as_ref())),
        usage_core_nano_seconds: usage.and_then(|u| value(u.usage_core_nano_seconds.as_ref())),
    }
}

fn memory_of(usage: Option<&cri::MemoryUsage>, fallback: Timestamp) -> MemoryStats {
    let time = usage.and_then(|u| nanos_time(u.timestamp)).unwrap_or(fallback);
    let Some(usage) = usage else { return MemoryStats { time: rfc3339(time), ..MemoryStats::default() } };
    MemoryStats {
        time: rfc3339(time),
        available_bytes: value(usage.available_bytes.as_ref()),
        usage_bytes: value(usage.usage_bytes.as_ref()),
        working_set_bytes: value(usage.working_set_bytes.as_ref()),
        rss_bytes: value(usage.rss_bytes.as_ref()),
        page_faults: value(usage.page_faults.as_ref()),
        major_page_faults: value(usage.major_page_faults.as_ref()),
    }
}

fn sum(values: impl Iterator<Item = Option<u64>>) -> Option<u64> {
    values.fold(None, |total, v| match (total, v) {
        (None, v) => v,
        (Some(t), Some(v)) => Some(t.saturating_add(v)),
        (t, None) => t,
    })
}

/// The Summary at `now`: the node from `sample` (and `previous`, for the rate of its CPU use),
/// each pod bound here with its containers that the runtime has stats of.
pub fn summary(
    now: Timestamp,
    sample: &NodeSample,
    previous: Option<&NodeSample>,
    inputs: &Inputs<'_>,
) -> Summary {
    let usage_nano_cores = previous.and_then(|previous| {
        let nanos = u64::try_from(sample.time.duration_since(previous.time).as_nanos()).ok()?;
        let used = sample.cpu_core_nanos.checked_sub(previous.cpu_core_nanos)?;
        (nanos > 0)
            .then(|| u64::try_from(u128::from(used) * 1_000_000_000 / u128::from(nanos)).unwrap_or(u64::MAX))
    });
    let memory = sample.memory;
    let usage = memory.total.saturating_sub(memory.free);
    let working_set = usage.saturating_sub(memory.inactive_file);
    let node = NodeStats {
        node_name: inputs.node_name.to_owned(),
        start_time: rfc3339(inputs.boot_time),
        cpu: CpuStats {
            time: rfc3339(sample.time),
            usage_nano_cores,
            usage_core_nano_seconds: Some(sample.cpu_core_nanos),
        },
        memory: MemoryStats {
            time: rfc3339(sample.time),
            available_bytes: Some(memory.total.saturating_sub(working_set)),
            usage_bytes: Some(usage),
            working_set_bytes: Some(working_set),
            rss_bytes: Some(memory.anon),
            page_faults: None,
            major_page_faults: None,
        },
        fs: inputs.fs.map(|(capacity, available, inodes, inodes_free)| FsStats {
            time: rfc3339(sample.time),
            available_bytes: Some(available),
            capacity_bytes: Some(capacity),
            used_bytes: Some(capacity.saturating_sub(available)),
            inodes_free: Some(inodes_free),
            inodes: Some(inodes),
            inodes_used: Some(inodes.saturating_sub(inodes_free)),
        }),
    };
    let mut by_pod: BTreeMap<&str, Vec<&cri::ContainerStats>> = BTreeMap::new();
    for stats in inputs.containers {
        let labels = stats.attributes.as_ref().map(|a| &a.labels);
        if let Some(uid) = labels.and_then(|l| l.get("io.kubernetes.pod.uid")) {
            by_pod.entry(uid.as_str()).or_default().push(stats);
        }
    }
    let mut pods = Vec::new();
    for pod in inputs.pods {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let Some(containers) = by_pod.get(uid) else { continue };
        let start = pod.status.as_ref().and_then(|s| s.start_time.as_ref()).map_or(now, |t| t.0);
        let containers: Vec<ContainerStats> = containers
            .iter()
            .map(|stats| {
                let attributes = stats.attributes.clone().unwrap_or_default();
                let name = attributes.metadata.map(|m| m.name).unwrap_or_default();
                let started =
                    inputs.started.get(&attributes.id).and_then(|&n| nanos_time(n)).unwrap_or(start);
                ContainerStats {
                    name,
                    start_time: rfc3339(started),
                    cpu: cpu_of(stats.cpu.as_ref(), now),
                    memory: memory_of(stats.memory.as_ref(), now),
                    rootfs: stats.writable_layer.as_ref().map(|layer| FsStats {
                        time: rfc3339(nanos_time(layer.timestamp).unwrap_or(now)),
                        used_bytes: value(layer.used_bytes.as_ref()),
                        inodes_used: value(layer.inodes_used.as_ref()),
                        ..FsStats::default()
                    }),
                }
            })
            .collect();
        let cpu = CpuStats {
            time: rfc3339(now),
            usage_nano_cores: sum(containers.iter().map(|c| c.cpu.usage_nano_cores)),
            usage_core_nano_seconds: sum(containers.iter().map(|c| c.cpu.usage_core_nano_seconds)),
        };
        let memory = MemoryStats {
            time: rfc3339(now),
            usage_bytes: sum(containers.iter().map(|c| c.memory.usage_bytes)),
            working_set_bytes: sum(containers.iter().map(|c| c.memory.working_set_bytes)),
            rss_bytes: sum(containers.iter().map(|c| c.memory.rss_bytes)),
            page_faults: sum(containers.iter().map(|c| c.memory.page_faults)),
            major_page_faults: sum(containers.iter().map(|c| c.memory.major_page_faults)),
            available_bytes: None,
        };
        pods.push(PodStats {
            pod_ref: PodReference {
                name: pod.metadata.name.clone().unwrap_or_default(),
                namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
                uid: uid.to_owned(),
            },
            start_time: rfc3339(start),
            containers,
            cpu,
            memory,
        });
    }
    Summary { node, pods }
}

/// A Prometheus label value, escaped.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn millis(time: &str) -> i64 {
    time.parse::<Timestamp>().map_or(0, Timestamp::as_millisecond)
}

/// `/metrics/resource` in the Prometheus text format, as upstream's resource metrics collector
/// writes it: each series with the time of its sample.
pub fn resource_metrics(summary: &Summary) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, series: Vec<(String, f64, i64)>| {
        let _ = writeln!(out, "# HELP {name} [STABLE] {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value, time) in series {
            let _ = writeln!(out, "{name}{labels} {value} {time}");
        }
    };
    let seconds = |nanos: u64| nanos as f64 / 1e9;
    let container_labels = |pod: &PodStats, c: &ContainerStats| {
        format!(
            "{{container=\"{}\",namespace=\"{}\",pod=\"{}\"}}",
            label(&c.name),
            label(&pod.pod_ref.namespace),
            label(&pod.pod_ref.name)
        )
    };
    let pod_labels = |pod: &PodStats| {
        format!("{{namespace=\"{}\",pod=\"{}\"}}", label(&pod.pod_ref.namespace), label(&pod.pod_ref.name))
    };
    let containers = || summary.pods.iter().flat_map(|p| p.containers.iter().map(move |c| (p, c)));
    family(
        "container_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the container in core-seconds",
        containers()
            .filter_map(|(p, c)| {
                Some((container_labels(p, c), seconds(c.cpu.usage_core_nano_seconds?), millis(&c.cpu.time)))
            })
            .collect(),
    );
    family(
        "container_memory_working_set_bytes",
        "gauge",
        "Current working set of the container in bytes",
        containers()
            .filter_map(|(p, c)| {
                Some((container_labels(p, c), c.memory.working_set_bytes? as f64, millis(&c.memory.time)))
            })
            .collect(),
    );
    family(
        "container_start_time_seconds",
        "gauge",
        "Start time of the container since unix epoch in seconds",
        containers()
            .map(|(p, c)| (container_labels(p, c), millis(&c.start_time) as f64 / 1e3, millis(&c.cpu.time)))
            .collect(),
    );
    let node = &summary.node;
    family(
        "node_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the node in core-seconds",
        node.cpu
            .usage_core_nano_seconds
            .map(|n| (String::new(), seconds(n), millis(&node.cpu.time)))
            .into_iter()
            .collect(),
    );
    family(
        "node_memory_working_set_bytes",
        "gauge",
        "Current working set of the node in bytes",
        node.memory
            .working_set_bytes
            .map(|b| (String::new(), b as f64, millis(&node.memory.time)))
            .into_iter()
            .collect(),
    );
    family(
        "pod_cpu_usage_seconds_total",
        "counter",
        "Cumulative cpu time consumed by the pod in core-seconds",
        (summary.pods.iter())
            .filter_map(|p| {
                Some((pod_labels(p), seconds(p.cpu.usage_core_nano_seconds?), millis(&p.cpu.time)))
            })
            .collect(),
    );
    family(
        "pod_memory_working_set_bytes",
        "gauge",
        "Current working set of the pod in bytes",
        (summary.pods.iter())
            .filter_map(|p| Some((pod_labels(p), p.memory.working_set_bytes? as f64, millis(&p.memory.time))))
            .collect(),
    );
    let _ = writeln!(
        out,
        "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise"
    );
    let _ = writeln!(out, "# TYPE resource_scrape_error gauge");
    let _ = writeln!(out, "resource_scrape_error 0");
    out
}

/// What the runtime holds, for `/metrics`: ready sandboxes of pods the kubelet knows, and the
/// containers by CRI state name (`running`, `exited`, `created`, `unknown`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Running {
    pub pods: usize,
    pub containers: BTreeMap<&'static str, usize>,
    /// The evented PLEG's connections, failed or ended attempts and event latencies.
    pub pleg: crate::pleg::PlegCounts,
}

/// The CRI container state as upstream's kubelet_running_containers labels it.
pub fn container_state(state: i32) -> &'static str {
    match cri::ContainerState::try_from(state) {
        Ok(cri::ContainerState::ContainerCreated) => "created",
        Ok(cri::ContainerState::ContainerRunning) => "running",
        Ok(cri::ContainerState::ContainerExited) => "exited",
        _ => "unknown",
    }
}

/// `/metrics`: upstream's kubelet_node_name, kubelet_running_pods and kubelet_running_containers
/// gauges and its evented PLEG counters (only those yet), in the Prometheus text format.
pub fn kubelet_metrics(node_name: &str, running: &Running) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP kubelet_evented_pleg_connection_error_count [ALPHA] The number of errors encountered during the establishment of streaming connection with the CRI runtime."
    );
    let _ = writeln!(out, "# TYPE kubelet_evented_pleg_connection_error_count counter");
    let _ = writeln!(out, "kubelet_evented_pleg_connection_error_count {}", running.pleg.errors);
    let _ = writeln!(
        out,
        "# HELP kubelet_evented_pleg_connection_latency_seconds [ALPHA] The latency of streaming connection with the CRI runtime, measured in seconds."
    );
    let _ = writeln!(out, "# TYPE kubelet_evented_pleg_connection_latency_seconds histogram");
    let mut cumulative = 0;
    let bounds = crate::pleg::LATENCY_BUCKETS.iter().map(ToString::to_string).chain(["+Inf".to_owned()]);
    for (le, count) in bounds.zip(&running.pleg.latency_buckets) {
        cumulative += count;
        let _ = writeln!(
            out,
            "kubelet_evented_pleg_connection_latency_seconds_bucket{{le=\"{le}\"}} {cumulative}"
        );
    }
    let _ = writeln!(
        out,
        "kubelet_evented_pleg_connection_latency_seconds_sum {}",
        running.pleg.latency_sum_seconds
    );
    let _ = writeln!(out, "kubelet_evented_pleg_connection_latency_seconds_count {cumulative}");
    let _ = writeln!(
        out,
        "# HELP kubelet_evented_pleg_connection_success_count [ALPHA] The number of times a streaming client was obtained to receive CRI Events."
    );
    let _ = writeln!(out, "# TYPE kubelet_evented_pleg_connection_success_count counter");
    let _ = writeln!(out, "kubelet_evented_pleg_connection_success_count {}", running.pleg.connections);
    let _ = writeln!(out, "# HELP kubelet_node_name [ALPHA] The node's name. The count is always 1.");
    let _ = writeln!(out, "# TYPE kubelet_node_name gauge");
    let _ = writeln!(out, "kubelet_node_name{{node=\"{}\"}} 1", label(node_name));
    let _ = writeln!(out, "# HELP kubelet_running_containers [ALPHA] Number of containers currently running");
    let _ = writeln!(out, "# TYPE kubelet_running_containers gauge");
    for (state, count) in &running.containers {
        let _ = writeln!(out, "kubelet_running_containers{{container_state=\"{state}\"}} {count}");
    }
    let _ =
        writeln!(out, "# HELP kubelet_running_pods [ALPHA] Number of pods that have a running pod sandbox");
    let _ = writeln!(out, "# TYPE kubelet_running_pods gauge");
    let _ = writeln!(out, "kubelet_running_pods {}", running.pods);
    out
}

#[cfg(test)]
mod tests;
