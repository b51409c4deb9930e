//! The node's pod cgroups (upstream's cgroupsPerQOS: the node allocatable, QoS and pod container
//! managers, with the cgroupfs driver): under `<cgroupRoot>/kubepods`, limited to the node's
//! capacity less its system and kube reservations, `burstable` and `besteffort`, and one
//! `pod<uid>` per pod — Guaranteed pods directly under kubepods, the others under their class's.
//! The pod's sandbox gets its pod cgroup as its cgroup parent, so the runtime puts the pause and
//! every container in it.
//!
//! Pure apart from [`PodCgroups`], the IO edge over [`keel_cgroups::Layout`]:
//! - [`pod_resources`] is upstream's ResourceConfigForPod: CPU shares from the pod's requests,
//!   a CFS quota and a memory limit when every container limits them (always for Guaranteed),
//!   2 shares for BestEffort; huge page limits for every page size the node has (0 unless
//!   requested);
//! - [`qos_resources`] is the QoS manager's: 2 shares for besteffort, the sum of the Burstable
//!   pods' CPU requests for burstable, huge pages unlimited in both;
//! - a pod's cgroup is created before its sandbox, and destroyed (its processes killed first)
//!   once the pod's containers and sandbox are gone; a pod cgroup of no pod the kubelet knows is
//!   removed by the sweep after each relist (upstream's cleanupOrphanedPodCgroups).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use keel_api::validation::quantity::Quantity;
use keel_cgroups::{Layout, Resources};

use crate::pod_actions::is_sidecar;
use crate::pod_status::qos_class;

/// upstream's QuotaPeriod (µs): CFS quotas are per 100 ms.
pub const CPU_PERIOD: u64 = 100_000;
/// upstream's MinShares and MaxShares.
const MIN_SHARES: u64 = 2;
const MAX_SHARES: u64 = 262_144;
/// The prefix of a pod cgroup's name (`pod<uid>`).
const POD_PREFIX: &str = "pod";

/// upstream's MilliCPUToShares: 2 for none, else 1024 per CPU within [2, 262144].
pub fn milli_cpu_to_shares(milli: i64) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    u64::try_from(milli.saturating_mul(1024) / 1000).unwrap_or(MAX_SHARES).clamp(MIN_SHARES, MAX_SHARES)
}

/// upstream's MilliCPUToQuota: a limit of `milli` CPUs per `period` µs, at least 1 ms; 0 for none.
pub fn milli_cpu_to_quota(milli: i64, period: u64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    let period = i64::try_from(period).unwrap_or(i64::MAX);
    (milli.saturating_mul(period) / 1000).max(1000)
}

/// The kernel's name of a huge page size given in KiB (`2MB`, `1GB`, `64KB`), as the hugetlb
/// controller's files name it.
pub fn hugetlb_size_name(size_kib: u64) -> String {
    match size_kib {
        kib if kib >= 1 << 20 && kib % (1 << 20) == 0 => format!("{}GB", kib >> 20),
        kib if kib >= 1 << 10 && kib % (1 << 10) == 0 => format!("{}MB", kib >> 10),
        kib => format!("{kib}KB"),
    }
}

/// The cgroup a pod's QoS class puts its pod cgroup under.
fn qos_parent(root: &str, qos: &str) -> String {
    let kubepods = kubepods(root);
    match qos {
        "Guaranteed" => kubepods,
        "Burstable" => format!("{kubepods}/burstable"),
        _ => format!("{kubepods}/besteffort"),
    }
}

/// `<cgroupRoot>/kubepods`.
pub fn kubepods(root: &str) -> String {
    format!("{}/kubepods", root.trim_end_matches('/'))
}

/// The pod's cgroup (upstream's GetPodContainerName with the cgroupfs driver).
pub fn pod_cgroup(root: &str, pod: &Pod) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    format!("{}/{POD_PREFIX}{uid}", qos_parent(root, qos_class(pod)))
}

/// A resource list as sums in milli-units (exact for cpu, memory and huge pages alike).
type Sums = BTreeMap<String, i128>;

fn milli_of(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Sums {
    list.into_iter()
        .flatten()
        .filter_map(|(name, q)| Some((name.clone(), i128::from(Quantity::parse(&q.0)?.milli_value()))))
        .collect()
}

fn add(to: &mut Sums, from: &Sums) {
    for (name, value) in from {
        *to.entry(name.clone()).or_default() += value;
    }
}

fn max_into(to: &mut Sums, from: &Sums) {
    for (name, value) in from {
        let entry = to.entry(name.clone()).or_default();
        *entry = (*entry).max(*value);
    }
}

/// upstream's AggregateContainerRequests / AggregateContainerLimits: the containers' sum, the
/// sidecars added, and at least what each init container needs with the sidecars before it
/// running. `each` sees every container's contribution (an init container's with the sidecars
/// before it), as upstream's ContainerFn.
fn aggregate(pod: &Pod, of: impl Fn(&Container) -> Sums, mut each: impl FnMut(&Sums)) -> Sums {
    let Some(spec) = &pod.spec else { return Sums::new() };
    let mut sums = Sums::new();
    for container in &spec.containers {
        let own = of(container);
        each(&own);
        add(&mut sums, &own);
    }
    let mut sidecars = Sums::new();
    let mut init = Sums::new();
    for container in spec.init_containers.iter().flatten() {
        let own = of(container);
        let needs = if is_sidecar(container) {
            add(&mut sums, &own);
            add(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut needs = own;
            add(&mut needs, &sidecars);
            needs
        };
        each(&needs);
        max_into(&mut init, &needs);
    }
    max_into(&mut sums, &init);
    sums
}

/// upstream's resource.PodRequests: the aggregate of the containers' requests plus the overhead.
pub fn pod_requests(pod: &Pod) -> Sums {
    let mut requests =
        aggregate(pod, |c| milli_of(c.resources.as_ref().and_then(|r| r.requests.as_ref())), |_| {});
    add(&mut requests, &milli_of(pod.spec.as_ref().and_then(|s| s.overhead.as_ref())));
    requests
}

/// upstream's ResourceConfigForPod for the pod's cgroup (CFS quota enforced, the node's huge page
/// sizes in KiB).
pub fn pod_resources(pod: &Pod, huge_page_sizes_kib: &[u64]) -> Resources {
    let requests = pod_requests(pod);
    let (mut cpu_limits_declared, mut memory_limits_declared) = (true, true);
    let mut limits = aggregate(
        pod,
        |c| milli_of(c.resources.as_ref().and_then(|r| r.limits.as_ref())),
        |limits| {
            cpu_limits_declared &= limits.get("cpu").is_some_and(|v| *v != 0);
            memory_limits_declared &= limits.get("memory").is_some_and(|v| *v != 0);
        },
    );
    // The overhead adds to the limits that are set.
    for (name, value) in milli_of(pod.spec.as_ref().and_then(|s| s.overhead.as_ref())) {
        if let Some(limit) = limits.get_mut(&name).filter(|l| **l != 0) {
            *limit += value;
        }
    }
    let milli =
        |sums: &Sums, name: &str| i64::try_from(sums.get(name).copied().unwrap_or(0)).unwrap_or(i64::MAX);
    let whole = |sums: &Sums, name: &str| {
        // A value from milli-units, rounded up as upstream's Quantity.Value().
        i64::try_from((sums.get(name).copied().unwrap_or(0) + 999).div_euclid(1000)).unwrap_or(i64::MAX)
    };
    let shares = milli_cpu_to_shares(milli(&requests, "cpu"));
    let quota = milli_cpu_to_quota(milli(&limits, "cpu"), CPU_PERIOD);
    let memory = whole(&limits, "memory");
    let mut resources = Resources::default();
    match qos_class(pod) {
        "Guaranteed" => {
            resources.cpu_shares = Some(shares);
            resources.cpu_quota = Some(quota);
            resources.cpu_period = Some(CPU_PERIOD);
            resources.memory = Some(memory);
        }
        "Burstable" => {
            resources.cpu_shares = Some(shares);
            if cpu_limits_declared {
                resources.cpu_quota = Some(quota);
                resources.cpu_period = Some(CPU_PERIOD);
            }
            if memory_limits_declared {
                resources.memory = Some(memory);
            }
        }
        _ => resources.cpu_shares = Some(MIN_SHARES),
    }
    // Every size the node has: what the pod requests of it, else none at all.
    for &size_kib in huge_page_sizes_kib {
        let bytes = i64::try_from(size_kib.saturating_mul(1024)).unwrap_or(i64::MAX);
        let name = format!("hugepages-{}", Quantity::from_bytes(bytes).canonical());
        let limit = u64::try_from(whole(&requests, &name)).unwrap_or(0);
        resources.hugetlb.insert(hugetlb_size_name(size_kib), limit);
    }
    resources
}

/// The QoS cgroups' limits (upstream's qosContainerManager setCPUCgroupConfig and
/// setHugePagesConfig): (burstable, besteffort).
pub fn qos_resources<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    huge_page_sizes_kib: &[u64],
) -> (Resources, Resources) {
    let burstable_milli: i128 = pods
        .into_iter()
        .filter(|pod| qos_class(pod) == "Burstable")
        .map(|pod| pod_requests(pod).get("cpu").copied().unwrap_or(0))
        .sum();
    let unlimited: BTreeMap<String, u64> =
        huge_page_sizes_kib.iter().map(|&kib| (hugetlb_size_name(kib), u64::MAX)).collect();
    let burstable = Resources {
        cpu_shares: Some(milli_cpu_to_shares(i64::try_from(burstable_milli).unwrap_or(i64::MAX))),
        hugetlb: unlimited.clone(),
        ..Resources::default()
    };
    let besteffort = Resources { cpu_shares: Some(MIN_SHARES), hugetlb: unlimited, ..Resources::default() };
    (burstable, besteffort)
}

/// kubepods' limits (upstream's enforceNodeAllocatable `pods`): the node's capacity less its
/// system and kube reservations (`allocatable`, by resource name), as CPU shares, memory and
/// huge pages.
pub fn kubepods_resources(
    allocatable: &BTreeMap<String, Quantity>,
    huge_page_sizes_kib: &[u64],
) -> Resources {
    let milli = |name: &str| allocatable.get(name).map(Quantity::milli_value);
    let value = |name: &str| allocatable.get(name).map(Quantity::value);
    let mut resources = Resources {
        cpu_shares: milli("cpu").map(milli_cpu_to_shares),
        memory: value("memory"),
        ..Resources::default()
    };
    for &size_kib in huge_page_sizes_kib {
        let bytes = i64::try_from(size_kib.saturating_mul(1024)).unwrap_or(i64::MAX);
        let name = format!("hugepages-{}", Quantity::from_bytes(bytes).canonical());
        let limit = value(&name).and_then(|v| u64::try_from(v).ok()).unwrap_or(0);
        resources.hugetlb.insert(hugetlb_size_name(size_kib), limit);
    }
    resources
}

/// The UID a pod cgroup's name holds (`pod<uid>`), if it is one.
pub fn pod_uid_of(name: &str) -> Option<&str> {
    name.strip_prefix(POD_PREFIX).filter(|uid| !uid.is_empty())
}

/// The node's pod cgroups: the IO edge.
#[derive(Debug, Clone)]
pub struct PodCgroups {
    pub layout: Layout,
    /// cgroupRoot (`/` by default).
    pub root: String,
    /// The node's huge page sizes in KiB.
    pub huge_page_sizes_kib: Vec<u64>,
    /// podPidsLimit: the most processes a pod cgroup holds, when positive.
    pub pod_pids_limit: i64,
}

impl PodCgroups {
    /// Creates kubepods, limited to `allocatable` when given (enforceNodeAllocatable `pods`), and
    /// the two QoS cgroups (upstream's container manager start: the cgroup root must exist).
    pub fn set_up(&self, allocatable: Option<&BTreeMap<String, Quantity>>) -> Result<(), String> {
        if !self.layout.exists(&self.root) {
            return Err(format!("invalid configuration: cgroup-root {:?} doesn't exist", self.root));
        }
        let kubepods = kubepods(&self.root);
        let limits =
            allocatable.map(|a| kubepods_resources(a, &self.huge_page_sizes_kib)).unwrap_or_default();
        self.layout.apply(&kubepods, &limits).map_err(|e| format!("creating {kubepods}: {e}"))?;
        self.update_qos(std::iter::empty())
    }

    /// Rewrites the QoS cgroups' limits for the pods now active.
    pub fn update_qos<'a>(&self, pods: impl IntoIterator<Item = &'a Pod>) -> Result<(), String> {
        let (burstable, besteffort) = qos_resources(pods, &self.huge_page_sizes_kib);
        for (qos, resources) in [("Burstable", burstable), ("BestEffort", besteffort)] {
            let path = qos_parent(&self.root, qos);
            self.layout.apply(&path, &resources).map_err(|e| format!("creating {path}: {e}"))?;
        }
        Ok(())
    }

    /// Creates the pod's cgroup with its limits (again on every sync: idempotent); returns its path.
    pub fn ensure(&self, pod: &Pod) -> Result<String, String> {
        let path = pod_cgroup(&self.root, pod);
        let mut resources = pod_resources(pod, &self.huge_page_sizes_kib);
        resources.pids = (self.pod_pids_limit > 0).then_some(self.pod_pids_limit);
        self.layout.apply(&path, &resources).map_err(|e| format!("creating the pod cgroup {path}: {e}"))?;
        Ok(path)
    }

    /// The UIDs of every pod cgroup there is, with their paths.
    pub fn pods(&self) -> Vec<(String, String)> {
        let kubepods = kubepods(&self.root);
        let mut found = Vec::new();
        for parent in [kubepods.clone(), format!("{kubepods}/burstable"), format!("{kubepods}/besteffort")] {
            for name in self.layout.children(&parent) {
                if let Some(uid) = pod_uid_of(&name) {
                    found.push((uid.to_owned(), format!("{parent}/{name}")));
                }
            }
        }
        found
    }

    /// Destroys every cgroup of the pod `uid` (whatever class it was created under).
    pub fn destroy(&self, uid: &str) -> Result<(), String> {
        for (_, path) in self.pods().into_iter().filter(|(found, _)| found == uid) {
            self.layout.destroy(&path).map_err(|e| format!("removing the pod cgroup {path}: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
