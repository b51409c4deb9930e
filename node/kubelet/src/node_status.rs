//! The Node's status as upstream's kubelet computes it (pkg/kubelet/nodestatus/setters.go and the
//! container manager's node allocatable), with no IO: capacity from the [`MachineInfo`],
//! allocatable after system-reserved, kube-reserved and the hard eviction thresholds, and the
//! conditions MemoryPressure, DiskPressure, PIDPressure and Ready with upstream's reasons,
//! messages and transition times.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::NodeCondition;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use keel_api::validation::quantity::Quantity;

use crate::machine::MachineInfo;

/// A resource list as the kubelet keeps it: name → quantity.
pub type Resources = BTreeMap<String, Quantity>;

/// What a hard eviction threshold holds back from allocatable.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Threshold {
    /// An amount (`100Mi`).
    Quantity(Quantity),
    /// A share of capacity (`10%`), a float32 as upstream's.
    Percentage(f32),
}

/// The reservations that make allocatable smaller than capacity (KubeletConfiguration's
/// systemReserved, kubeReserved and evictionHard).
#[derive(Debug, Clone, Default)]
pub struct Reservations {
    pub system_reserved: Resources,
    pub kube_reserved: Resources,
    /// By signal; `memory.available` and `nodefs.available` reserve, the others are kept unused.
    pub eviction_hard: BTreeMap<String, Threshold>,
}

impl Reservations {
    /// KubeletConfiguration's defaults: no reservations, and evictionHard memory.available<100Mi,
    /// nodefs.available<10% (imagefs and inodes thresholds reserve nothing).
    pub fn defaults() -> Reservations {
        let mut eviction_hard = BTreeMap::new();
        eviction_hard.insert("memory.available".to_owned(), Threshold::Quantity(quantity("100Mi")));
        eviction_hard.insert("nodefs.available".to_owned(), Threshold::Percentage(0.1));
        Reservations { eviction_hard, ..Reservations::default() }
    }
}

/// The signals a hard eviction threshold may name (upstream's signalToResource keys).
const EVICTION_SIGNALS: &[&str] = &[
    "memory.available",
    "allocatableMemory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
];

impl Reservations {
    /// From KubeletConfiguration's systemReserved, kubeReserved and evictionHard; a bad quantity,
    /// threshold or signal is an error in upstream's words.
    pub fn from_config(
        system_reserved: &BTreeMap<String, String>,
        kube_reserved: &BTreeMap<String, String>,
        eviction_hard: &BTreeMap<String, String>,
    ) -> Result<Reservations, String> {
        let resources = |field: &str, list: &BTreeMap<String, String>| {
            list.iter()
                .map(|(name, value)| match Quantity::parse(value).filter(|q| !q.is_negative()) {
                    Some(quantity) => Ok((name.clone(), quantity)),
                    None => {
                        Err(format!("{field}: quantities must match the regular expression: {name}={value}"))
                    }
                })
                .collect::<Result<Resources, String>>()
        };
        let mut thresholds = BTreeMap::new();
        for (signal, value) in eviction_hard {
            if !EVICTION_SIGNALS.contains(&signal.as_str()) {
                return Err(format!("unsupported eviction signal {signal}"));
            }
            let threshold = parse_threshold(value)
                .ok_or_else(|| format!("invalid eviction threshold {signal}<{value}"))?;
            thresholds.insert(signal.clone(), threshold);
        }
        Ok(Reservations {
            system_reserved: resources("systemReserved", system_reserved)?,
            kube_reserved: resources("kubeReserved", kube_reserved)?,
            eviction_hard: thresholds,
        })
    }
}

fn quantity(text: &str) -> Quantity {
    Quantity::parse(text).unwrap_or_else(|| Quantity::from_count(0))
}

/// Parses an evictionHard value: a quantity or a percentage (`10%`), as upstream's
/// ParseThresholdConfig; `None` for anything else.
pub fn parse_threshold(value: &str) -> Option<Threshold> {
    match value.strip_suffix('%') {
        Some(percent) => {
            let percent: f32 = percent.parse().ok()?;
            (0.0..=100.0).contains(&percent).then_some(Threshold::Percentage(percent / 100.0))
        }
        None => Quantity::parse(value).filter(|q| !q.is_negative()).map(Threshold::Quantity),
    }
}

/// Capacity (cAdvisor's CapacityFromMachineInfo, the pods limit and the root filesystem):
/// `cpu`, `memory`, `hugepages-<size>`, `pods` and `ephemeral-storage`.
pub fn capacity(machine: &MachineInfo, max_pods: i64) -> Resources {
    let mut capacity = Resources::new();
    capacity.insert("cpu".into(), Quantity::from_count(machine.cpus));
    capacity.insert("memory".into(), Quantity::from_bytes(machine.memory_bytes));
    for (size_kib, pages) in &machine.huge_pages {
        let size_bytes = i64::try_from(*size_kib).unwrap_or(i64::MAX).saturating_mul(1024);
        let name = format!("hugepages-{}", Quantity::from_bytes(size_bytes).canonical());
        capacity.insert(name, Quantity::from_bytes(size_bytes.saturating_mul(*pages)));
    }
    capacity.insert("pods".into(), Quantity::from_count(max_pods));
    capacity.insert("ephemeral-storage".into(), Quantity::from_bytes(machine.root_fs_bytes));
    capacity
}

/// Allocatable: each capacity less its reservations (never below zero), and memory also less every
/// huge page pool (upstream's MachineInfo setter).
pub fn allocatable(capacity: &Resources, reservations: &Reservations) -> Resources {
    let threshold = |signal: &str, resource: &str| {
        reservations.eviction_hard.get(signal).map(|t| match t {
            Threshold::Quantity(q) => *q,
            Threshold::Percentage(share) => {
                let of = capacity.get(resource).map_or(0, Quantity::value);
                // upstream: int64(float64(capacity.Value()) * float64(percentage)).
                let held = (of as f64 * f64::from(*share)) as i64;
                Quantity::from_bytes(held)
            }
        })
    };
    let mut allocatable = Resources::new();
    for (name, total) in capacity {
        let mut value = *total;
        let eviction = match name.as_str() {
            "memory" => threshold("memory.available", "memory"),
            "ephemeral-storage" => threshold("nodefs.available", "ephemeral-storage"),
            _ => None,
        };
        let held = [
            reservations.system_reserved.get(name).copied(),
            reservations.kube_reserved.get(name).copied(),
            eviction,
        ];
        for reserved in held.into_iter().flatten() {
            value = value.checked_sub(&reserved).unwrap_or(value);
        }
        allocatable.insert(name.clone(), at_least_zero(value));
    }
    let huge: Vec<Quantity> =
        capacity.iter().filter(|(name, _)| name.starts_with("hugepages-")).map(|(_, q)| *q).collect();
    if let Some(memory) = allocatable.get_mut("memory") {
        for pool in huge {
            *memory = at_least_zero(memory.checked_sub(&pool).unwrap_or(*memory));
        }
    }
    allocatable
}

/// What kubepods is limited to (upstream's getNodeAllocatableAbsolute): each capacity less its
/// system and kube reservations, never below zero — not less the eviction thresholds or the huge
/// page pools, unlike the allocatable reported.
pub fn pods_cgroup_limits(capacity: &Resources, reservations: &Reservations) -> Resources {
    let mut limits = Resources::new();
    for (name, total) in capacity {
        let mut value = *total;
        for reserved in [reservations.system_reserved.get(name), reservations.kube_reserved.get(name)]
            .into_iter()
            .flatten()
        {
            value = value.checked_sub(reserved).unwrap_or(value);
        }
        limits.insert(name.clone(), at_least_zero(value));
    }
    limits
}

fn at_least_zero(value: Quantity) -> Quantity {
    if value.is_negative() { Quantity::from_count(0) } else { value }
}

/// A resource list in the API's form.
pub fn to_api(resources: &Resources) -> BTreeMap<String, ApiQuantity> {
    resources.iter().map(|(name, q)| (name.clone(), ApiQuantity(q.canonical()))).collect()
}

/// What the node is short of, as the eviction manager would say (all false until it exists).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    pub memory: bool,
    pub disk: bool,
    pub pid: bool,
}

/// The node's conditions after one status update at `now`, from the ones it had (`previous`):
/// MemoryPressure, DiskPressure and PIDPressure, then Ready, last, as upstream keeps it. Ready is
/// True unless `not_ready` names errors (the runtime's, the network's, missing capacity), which
/// become its message, joined as apimachinery's aggregate. A condition keeps its transition time
/// while its status stays; the others the node had are kept as they are.
pub fn conditions(
    previous: &[NodeCondition],
    now: Timestamp,
    pressure: Pressure,
    not_ready: &[String],
) -> Vec<NodeCondition> {
    let mut conditions: Vec<NodeCondition> = previous.to_vec();
    let pressures = [
        (
            "MemoryPressure",
            pressure.memory,
            ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
            ("KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ),
        (
            "DiskPressure",
            pressure.disk,
            ("KubeletHasDiskPressure", "kubelet has disk pressure"),
            ("KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ),
        (
            "PIDPressure",
            pressure.pid,
            ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
            ("KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ),
    ];
    for (kind, under, (yes_reason, yes_message), (no_reason, no_message)) in pressures {
        let (status, reason, message) =
            if under { ("True", yes_reason, yes_message) } else { ("False", no_reason, no_message) };
        set(&mut conditions, kind, status, reason, message.to_owned(), now);
    }
    let (status, reason, message) = match not_ready {
        [] => ("True", "KubeletReady", "kubelet is posting ready status".to_owned()),
        [one] => ("False", "KubeletNotReady", one.clone()),
        many => ("False", "KubeletNotReady", format!("[{}]", many.join(", "))),
    };
    set(&mut conditions, "Ready", status, reason, message, now);
    // Ready last (upstream: version-skewed components read the last condition).
    if let Some(at) = conditions.iter().position(|c| c.type_ == "Ready") {
        let ready = conditions.remove(at);
        conditions.push(ready);
    }
    conditions
}

fn set(
    conditions: &mut Vec<NodeCondition>,
    kind: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) {
    let current = conditions.iter_mut().find(|c| c.type_ == kind);
    let transition = match &current {
        Some(old) if old.status == status => old.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    let condition = NodeCondition {
        type_: kind.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: transition,
    };
    match current {
        Some(old) => *old = condition,
        None => conditions.push(condition),
    }
}

/// The labels a kubelet registers its Node with (upstream's initialNode): hostname, OS and
/// architecture, their beta forms, then `--node-labels`.
pub fn labels(
    hostname: &str,
    architecture: &str,
    extra: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), hostname.to_owned()),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), architecture.to_owned()),
        ("beta.kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("beta.kubernetes.io/arch".to_owned(), architecture.to_owned()),
    ]);
    labels.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    fn machine() -> MachineInfo {
        MachineInfo {
            cpus: 2,
            memory_bytes: 8_336_478_208,
            huge_pages: vec![(2048, 0), (1_048_576, 0)],
            root_fs_bytes: 105_088_212_992,
            architecture: "amd64",
            ..MachineInfo::default()
        }
    }

    fn shown(resources: &Resources) -> Vec<(String, String)> {
        resources.iter().map(|(k, v)| (k.clone(), v.canonical())).collect()
    }

    #[test]
    fn capacity_and_allocatable_as_a_default_kubelet_reports_them() {
        let capacity = capacity(&machine(), 110);
        let owned = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        assert_eq!(
            shown(&capacity),
            owned(&[
                ("cpu", "2"),
                ("ephemeral-storage", "102625208Ki"),
                ("hugepages-1Gi", "0"),
                ("hugepages-2Mi", "0"),
                ("memory", "8141092Ki"),
                ("pods", "110"),
            ])
        );
        // Less 100Mi of memory and 10% (as a float32) of the root filesystem.
        assert_eq!(
            shown(&allocatable(&capacity, &Reservations::defaults())),
            owned(&[
                ("cpu", "2"),
                ("ephemeral-storage", "94579391537"),
                ("hugepages-1Gi", "0"),
                ("hugepages-2Mi", "0"),
                ("memory", "8038692Ki"),
                ("pods", "110"),
            ])
        );
    }

    #[test]
    fn reservations_and_huge_pages_come_off_allocatable() {
        let mut machine = machine();
        machine.huge_pages = vec![(2048, 512)];
        let capacity = capacity(&machine, 110);
        assert_eq!(capacity["hugepages-2Mi"].canonical(), "1Gi");
        let mut reservations = Reservations::defaults();
        reservations.system_reserved.insert("cpu".into(), quantity("500m"));
        reservations.kube_reserved.insert("memory".into(), quantity("1Gi"));
        reservations.eviction_hard.insert("memory.available".into(), parse_threshold("1%").unwrap());
        let allocatable = allocatable(&capacity, &reservations);
        assert_eq!(allocatable["cpu"].canonical(), "1500m");
        // 8141092Ki less 1Gi (kube), 1% of capacity, and the 1Gi of huge pages.
        let one_percent = (8_336_478_208f64 * f64::from(0.01f32)) as i64;
        assert_eq!(allocatable["memory"].value(), 8_336_478_208 - 2 * 1_073_741_824 - one_percent);
        reservations.system_reserved.insert("pods".into(), quantity("200"));
        assert_eq!(super::allocatable(&capacity, &reservations)["pods"].canonical(), "0");
        assert_eq!(parse_threshold("101%"), None);
        assert_eq!(parse_threshold("-1Mi"), None);
    }

    #[test]
    fn conditions_keep_their_transitions_while_their_status_stays() {
        let start: Timestamp = "2026-12-03T12:00:00Z".parse().unwrap();
        let later: Timestamp = "2026-12-03T12:00:10Z".parse().unwrap();
        let first = conditions(&[], start, Pressure::default(), &["container runtime is down".into()]);
        let kinds: Vec<&str> = first.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(kinds, ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]);
        assert_eq!(first[3].reason.as_deref(), Some("KubeletNotReady"));
        assert_eq!(first[3].message.as_deref(), Some("container runtime is down"));
        assert_eq!(first[0].reason.as_deref(), Some("KubeletHasSufficientMemory"));

        let second = conditions(&first, later, Pressure { disk: true, ..Pressure::default() }, &[]);
        let ready = &second[3];
        assert_eq!((ready.status.as_str(), ready.reason.as_deref()), ("True", Some("KubeletReady")));
        assert_eq!(ready.last_transition_time, Some(Time(later)));
        assert_eq!(second[0].last_transition_time, Some(Time(start)), "memory stayed False");
        assert_eq!(second[0].last_heartbeat_time, Some(Time(later)));
        assert_eq!(second[1].message.as_deref(), Some("kubelet has disk pressure"));
        let two = conditions(&[], start, Pressure::default(), &["a".into(), "b".into()]);
        assert_eq!(two[3].message.as_deref(), Some("[a, b]"));
    }

    #[test]
    fn labels_name_the_host_os_and_arch() {
        let extra = BTreeMap::from([("zone".to_owned(), "a".to_owned())]);
        let labels = labels("worker-1", "arm64", &extra);
        assert_eq!(labels["kubernetes.io/hostname"], "worker-1");
        assert_eq!(labels["beta.kubernetes.io/arch"], "arm64");
        assert_eq!(labels["zone"], "a");
    }
}
