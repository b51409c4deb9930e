//! The usage of a cgroup, read from cgroup v1 controllers or the v2 unified hierarchy, turned into the
//! CRI's `ContainerStats` and `PodSandboxStats`.
//!
//! Each controller is read where the layout mounts it: a v1 hierarchy when there is one for it, the
//! unified hierarchy otherwise (so hybrid hosts read v1, as runc writes the limits there). The working
//! set is usage − inactive file pages, floored at 0, as cadvisor (and so the kubelet's eviction)
//! computes it.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use k8s_cri::v1 as api;

use super::{CgroupError, Layout, cgroup_dir, check_path};

/// A v1 memory limit at or above this is "no limit" (the kernel reports PAGE_COUNTER_MAX pages).
const V1_UNLIMITED: u64 = 1 << 62;

/// One sample of a cgroup's usage. Fields the tree does not have are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupStats {
    /// When the sample was taken (nanoseconds since the Unix epoch).
    pub timestamp: i64,
    /// Cumulative CPU time (ns): v1 `cpuacct.usage`, v2 `cpu.stat` usage_usec × 1000.
    pub cpu_usage_ns: Option<u64>,
    /// CFS periods throttled and the time throttled (ns), from `cpu.stat`.
    pub cpu_throttled_periods: Option<u64>,
    /// Total time throttled (ns): v1 `throttled_time`, v2 `throttled_usec` × 1000.
    pub cpu_throttled_ns: Option<u64>,
    /// Memory usage: v1 `memory.usage_in_bytes`, v2 `memory.current`.
    pub memory_usage: Option<u64>,
    /// Inactive file pages: v1 `total_inactive_file`, v2 `inactive_file` of `memory.stat`.
    pub memory_inactive_file: Option<u64>,
    /// Anonymous memory: v1 `total_rss`, v2 `anon`.
    pub memory_rss: Option<u64>,
    /// Page faults: v1 `total_pgfault`, v2 `pgfault`.
    pub page_faults: Option<u64>,
    /// Major page faults: v1 `total_pgmajfault`, v2 `pgmajfault`.
    pub major_page_faults: Option<u64>,
    /// The memory limit; `None` when unlimited (v2 `max`, v1 ≥ 2^62).
    pub memory_limit: Option<u64>,
    /// Processes (and threads) in the cgroup: `pids.current`.
    pub pids: Option<u64>,
}

impl CgroupStats {
    /// usage − inactive_file, floored at 0 (cadvisor's working set).
    pub fn working_set(&self) -> Option<u64> {
        let usage = self.memory_usage?;
        Some(usage.saturating_sub(self.memory_inactive_file.unwrap_or(0)))
    }

    /// The CRI CPU usage. `usage_nano_cores` needs an earlier sample (see [`nano_cores`]); without one
    /// it is left out and the kubelet computes it from its own cache.
    pub fn cpu_usage(&self, previous: Option<&CgroupStats>) -> api::CpuUsage {
        api::CpuUsage {
            timestamp: self.timestamp,
            usage_core_nano_seconds: self.cpu_usage_ns.map(|value| api::UInt64Value { value }),
            usage_nano_cores: previous
                .and_then(|previous| nano_cores(previous, self))
                .map(|value| api::UInt64Value { value }),
        }
    }

    /// The CRI memory usage: working set, available (limit − working set, when limited), usage, rss,
    /// page faults.
    pub fn memory_usage(&self) -> api::MemoryUsage {
        let working_set = self.working_set();
        let available = match (self.memory_limit, working_set) {
            (Some(limit), Some(working_set)) => Some(limit.saturating_sub(working_set)),
            _ => None,
        };
        let wrap = |value: Option<u64>| value.map(|value| api::UInt64Value { value });
        api::MemoryUsage {
            timestamp: self.timestamp,
            working_set_bytes: wrap(working_set),
            available_bytes: wrap(available),
            usage_bytes: wrap(self.memory_usage),
            rss_bytes: wrap(self.memory_rss),
            page_faults: wrap(self.page_faults),
            major_page_faults: wrap(self.major_page_faults),
        }
    }
}

/// CPU use between two samples in nanocores (ns of CPU per s), as containerd computes
/// `usage_nano_cores`; `None` when either lacks CPU usage or time did not advance.
pub fn nano_cores(previous: &CgroupStats, current: &CgroupStats) -> Option<u64> {
    let used = current.cpu_usage_ns?.checked_sub(previous.cpu_usage_ns?)?;
    let elapsed = u64::try_from(current.timestamp.checked_sub(previous.timestamp)?).ok()?;
    if elapsed == 0 {
        return None;
    }
    Some(u64::try_from(u128::from(used) * 1_000_000_000 / u128::from(elapsed)).unwrap_or(u64::MAX))
}

/// The CRI stats of a container from one sample (the writable layer is the image store's to add).
pub fn container_stats(
    attributes: api::ContainerAttributes,
    sample: &CgroupStats,
    previous: Option<&CgroupStats>,
) -> api::ContainerStats {
    api::ContainerStats {
        attributes: Some(attributes),
        cpu: Some(sample.cpu_usage(previous)),
        memory: Some(sample.memory_usage()),
        writable_layer: None,
        swap: None,
    }
}

/// The CRI stats of a pod sandbox from a sample of its cgroup (the pod's cgroup parent) and its
/// containers' stats. Process count comes from `pids.current`; network usage is the sandbox's to add.
pub fn pod_sandbox_stats(
    attributes: api::PodSandboxAttributes,
    sample: &CgroupStats,
    previous: Option<&CgroupStats>,
    containers: Vec<api::ContainerStats>,
) -> api::PodSandboxStats {
    api::PodSandboxStats {
        attributes: Some(attributes),
        linux: Some(api::LinuxPodSandboxStats {
            cpu: Some(sample.cpu_usage(previous)),
            memory: Some(sample.memory_usage()),
            network: None,
            process: sample.pids.map(|value| api::ProcessUsage {
                timestamp: sample.timestamp,
                process_count: Some(api::UInt64Value { value }),
            }),
            containers,
        }),
        windows: None,
    }
}

/// Where one controller of `cgroups_path` lives: its v1 hierarchy, else the unified one.
fn controller_dir(layout: &Layout, controller: &str, cgroups_path: &str) -> Option<(PathBuf, bool)> {
    if let Some(mount) = layout.v1_mount(controller) {
        return Some((cgroup_dir(mount, cgroups_path), true));
    }
    layout.unified.as_deref().map(|mount| (cgroup_dir(mount, cgroups_path), false))
}

/// Reads the usage of `cgroups_path` (CPU, memory, pids) now. [`CgroupError::NotFound`] when the
/// cgroup exists in none of the hierarchies it would be read from; a file missing from an existing
/// cgroup (a controller not enabled there) leaves its fields `None`.
pub fn stats(layout: &Layout, cgroups_path: &str) -> Result<CgroupStats, CgroupError> {
    check_path(cgroups_path)?;
    let mut out = CgroupStats { timestamp: now_ns(), ..CgroupStats::default() };
    let mut found = false;

    if let Some((dir, v1)) = controller_dir(layout, "cpuacct", cgroups_path)
        && dir.is_dir()
    {
        found = true;
        if v1 {
            out.cpu_usage_ns = read_u64(&dir.join("cpuacct.usage"))?;
        } else {
            let stat = read_flat(&dir.join("cpu.stat"))?;
            out.cpu_usage_ns = lookup(&stat, "usage_usec").map(|us| us.saturating_mul(1000));
            out.cpu_throttled_periods = lookup(&stat, "nr_throttled");
            out.cpu_throttled_ns = lookup(&stat, "throttled_usec").map(|us| us.saturating_mul(1000));
        }
    }
    if let Some((dir, true)) = controller_dir(layout, "cpu", cgroups_path)
        && dir.is_dir()
    {
        found = true;
        let stat = read_flat(&dir.join("cpu.stat"))?;
        out.cpu_throttled_periods = lookup(&stat, "nr_throttled");
        out.cpu_throttled_ns = lookup(&stat, "throttled_time");
    }
    if let Some((dir, v1)) = controller_dir(layout, "memory", cgroups_path)
        && dir.is_dir()
    {
        found = true;
        let prefix = if v1 { "total_" } else { "" };
        let stat = read_flat(&dir.join("memory.stat"))?;
        let field = |name: &str| lookup(&stat, &format!("{prefix}{name}"));
        out.memory_inactive_file = field("inactive_file");
        out.memory_rss = if v1 { field("rss") } else { field("anon") };
        out.page_faults = field("pgfault");
        out.major_page_faults = field("pgmajfault");
        if v1 {
            out.memory_usage = read_u64(&dir.join("memory.usage_in_bytes"))?;
            out.memory_limit = read_u64(&dir.join("memory.limit_in_bytes"))?.filter(|l| *l < V1_UNLIMITED);
        } else {
            out.memory_usage = read_u64(&dir.join("memory.current"))?;
            out.memory_limit = read_u64(&dir.join("memory.max"))?;
        }
    }
    if let Some((dir, _)) = controller_dir(layout, "pids", cgroups_path)
        && dir.is_dir()
    {
        found = true;
        out.pids = read_u64(&dir.join("pids.current"))?;
    }
    if found { Ok(out) } else { Err(CgroupError::NotFound(cgroups_path.to_owned())) }
}

/// Nanoseconds since the epoch (the timestamps of stats).
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| i64::try_from(elapsed.as_nanos()).unwrap_or(i64::MAX))
}

/// The file's text, `None` when it does not exist.
fn read_optional(path: &Path) -> Result<Option<String>, CgroupError> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CgroupError::Io { path: path.to_owned(), source }),
    }
}

/// A single-number file; `max` (v2's unlimited) and unparsable text read as `None`.
fn read_u64(path: &Path) -> Result<Option<u64>, CgroupError> {
    Ok(read_optional(path)?.and_then(|text| text.trim().parse().ok()))
}

/// A flat keyed file (`key value` per line), as `cpu.stat` and `memory.stat`.
fn read_flat(path: &Path) -> Result<Vec<(String, u64)>, CgroupError> {
    let Some(text) = read_optional(path)? else { return Ok(Vec::new()) };
    Ok(text
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(' ')?;
            Some((key.to_owned(), value.trim().parse().ok()?))
        })
        .collect())
}

fn lookup(pairs: &[(String, u64)], key: &str) -> Option<u64> {
    pairs.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
}

#[cfg(test)]
mod tests {
    use super::super::parse_mountinfo;
    use super::*;
    use keel_cgroups::examples::{HYBRID, UNIFIED, V1};

    fn write(root: &Path, dir: &str, files: &[(&str, &str)]) {
        let dir = root.join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join(name), text).unwrap();
        }
    }

    const V1_MEMORY_STAT: &str = "cache 100\nrss 5\ntotal_cache 4096\ntotal_rss 8192\n\
        total_inactive_file 3000\ntotal_pgfault 77\ntotal_pgmajfault 3\n";

    #[test]
    fn v1_tree_is_read_from_each_controller() {
        let dir = tempfile::tempdir().unwrap();
        let layout = parse_mountinfo(V1, dir.path()).unwrap();
        let c = "sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/c1";
        write(
            dir.path(),
            c,
            &[
                ("cpuacct.usage", "123456789\n"),
                ("cpu.stat", "nr_periods 10\nnr_throttled 2\nthrottled_time 5000\n"),
            ],
        );
        write(
            dir.path(),
            "sys/fs/cgroup/memory/kubepods/pod1/c1",
            &[
                ("memory.usage_in_bytes", "10000\n"),
                ("memory.limit_in_bytes", "65536\n"),
                ("memory.stat", V1_MEMORY_STAT),
            ],
        );
        write(dir.path(), "sys/fs/cgroup/pids/kubepods/pod1/c1", &[("pids.current", "3\n")]);
        let got = stats(&layout, "/kubepods/pod1/c1").unwrap();
        assert!(got.timestamp > 0);
        assert_eq!(
            got,
            CgroupStats {
                timestamp: got.timestamp,
                cpu_usage_ns: Some(123_456_789),
                cpu_throttled_periods: Some(2),
                cpu_throttled_ns: Some(5000),
                memory_usage: Some(10_000),
                memory_inactive_file: Some(3000),
                memory_rss: Some(8192),
                page_faults: Some(77),
                major_page_faults: Some(3),
                memory_limit: Some(65536),
                pids: Some(3),
            }
        );
        assert_eq!(got.working_set(), Some(7000));
        let memory = got.memory_usage();
        assert_eq!(memory.available_bytes, Some(api::UInt64Value { value: 65536 - 7000 }));
        assert_eq!(memory.usage_bytes, Some(api::UInt64Value { value: 10_000 }));
    }

    #[test]
    fn v1_unlimited_memory_has_no_limit_and_no_available_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let layout = parse_mountinfo(V1, dir.path()).unwrap();
        write(
            dir.path(),
            "sys/fs/cgroup/memory/c",
            &[
                ("memory.usage_in_bytes", "100\n"),
                ("memory.limit_in_bytes", "9223372036854771712\n"),
                ("memory.stat", "total_inactive_file 400\n"),
            ],
        );
        let got = stats(&layout, "/c").unwrap();
        assert_eq!(got.memory_limit, None);
        assert_eq!(got.working_set(), Some(0), "floored at 0 when inactive_file exceeds usage");
        assert_eq!(got.memory_usage().available_bytes, None);
        assert_eq!(got.cpu_usage_ns, None, "no cpuacct cgroup: no CPU figures");
    }

    #[test]
    fn v2_tree_is_read_from_the_unified_hierarchy() {
        let dir = tempfile::tempdir().unwrap();
        let layout = parse_mountinfo(UNIFIED, dir.path()).unwrap();
        write(
            dir.path(),
            "sys/fs/cgroup/kubepods/pod1/c1",
            &[
                (
                    "cpu.stat",
                    "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\nnr_throttled 1\nthrottled_usec 7\n",
                ),
                ("memory.current", "8192\n"),
                ("memory.max", "max\n"),
                ("memory.stat", "anon 4096\nfile 4096\ninactive_file 1024\npgfault 12\npgmajfault 1\n"),
                ("pids.current", "2\n"),
            ],
        );
        let got = stats(&layout, "/kubepods/pod1/c1").unwrap();
        assert_eq!(got.cpu_usage_ns, Some(2_500_000));
        assert_eq!(got.cpu_throttled_periods, Some(1));
        assert_eq!(got.cpu_throttled_ns, Some(7000));
        assert_eq!(got.memory_usage, Some(8192));
        assert_eq!(got.memory_limit, None, "max is unlimited");
        assert_eq!(got.working_set(), Some(8192 - 1024));
        assert_eq!(got.memory_rss, Some(4096));
        assert_eq!(got.page_faults, Some(12));
        assert_eq!(got.pids, Some(2));

        write(dir.path(), "sys/fs/cgroup/kubepods/pod1/c1", &[("memory.max", "16384\n")]);
        let limited = stats(&layout, "/kubepods/pod1/c1").unwrap();
        assert_eq!(limited.memory_usage().available_bytes, Some(api::UInt64Value { value: 16384 - 7168 }));
    }

    #[test]
    fn hybrid_tree_reads_v1_controllers_not_the_unified_one() {
        let dir = tempfile::tempdir().unwrap();
        let layout = parse_mountinfo(HYBRID, dir.path()).unwrap();
        write(dir.path(), "sys/fs/cgroup/cpuacct/p/c", &[("cpuacct.usage", "42\n")]);
        write(
            dir.path(),
            "sys/fs/cgroup/memory/p/c",
            &[
                ("memory.usage_in_bytes", "5000\n"),
                ("memory.limit_in_bytes", "9223372036854771712\n"),
                ("memory.stat", V1_MEMORY_STAT),
            ],
        );
        // The unified hierarchy holds only hugetlb here; a decoy memory.current must not be read.
        write(dir.path(), "sys/fs/cgroup/unified/p/c", &[("memory.current", "1\n")]);
        let got = stats(&layout, "/p/c").unwrap();
        assert_eq!(got.cpu_usage_ns, Some(42));
        assert_eq!(got.memory_usage, Some(5000));
        assert_eq!(got.working_set(), Some(2000));
        assert_eq!(got.pids, None, "no pids cgroup was made");
    }

    #[test]
    fn a_missing_cgroup_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        for text in [V1, UNIFIED, HYBRID] {
            let layout = parse_mountinfo(text, dir.path()).unwrap();
            let err = stats(&layout, "/kubepods/gone").unwrap_err();
            assert!(matches!(err, CgroupError::NotFound(_)), "{err}");
        }
        let layout = parse_mountinfo(V1, dir.path()).unwrap();
        assert!(matches!(stats(&layout, "../x"), Err(CgroupError::InvalidPath(_))));
    }

    #[test]
    fn nano_cores_come_from_two_samples() {
        let first = CgroupStats { timestamp: 1_000_000_000, cpu_usage_ns: Some(0), ..Default::default() };
        let second =
            CgroupStats { timestamp: 3_000_000_000, cpu_usage_ns: Some(1_000_000_000), ..Default::default() };
        assert_eq!(nano_cores(&first, &second), Some(500_000_000));
        assert_eq!(nano_cores(&second, &first), None, "time went backwards");
        assert_eq!(nano_cores(&first, &first), None, "no time elapsed");
        let usage = second.cpu_usage(Some(&first));
        assert_eq!(usage.usage_nano_cores, Some(api::UInt64Value { value: 500_000_000 }));
        assert_eq!(usage.usage_core_nano_seconds, Some(api::UInt64Value { value: 1_000_000_000 }));
        assert_eq!(second.cpu_usage(None).usage_nano_cores, None);
    }

    #[test]
    fn container_and_pod_stats_carry_attributes_and_samples() {
        let sample = CgroupStats {
            timestamp: 5,
            cpu_usage_ns: Some(10),
            memory_usage: Some(100),
            memory_inactive_file: Some(40),
            pids: Some(4),
            ..Default::default()
        };
        let attributes = api::ContainerAttributes { id: "c1".into(), ..Default::default() };
        let container = container_stats(attributes, &sample, None);
        assert_eq!(container.attributes.as_ref().map(|a| a.id.as_str()), Some("c1"));
        assert_eq!(container.memory.as_ref().and_then(|m| m.working_set_bytes).map(|v| v.value), Some(60));
        assert_eq!(container.cpu.as_ref().map(|c| c.timestamp), Some(5));

        let pod_attributes = api::PodSandboxAttributes { id: "p1".into(), ..Default::default() };
        let pod = pod_sandbox_stats(pod_attributes, &sample, None, vec![container.clone()]);
        let linux = pod.linux.unwrap();
        assert_eq!(linux.containers, vec![container]);
        assert_eq!(linux.process.and_then(|p| p.process_count).map(|v| v.value), Some(4));
        assert_eq!(linux.memory.and_then(|m| m.usage_bytes).map(|v| v.value), Some(100));
    }
}
