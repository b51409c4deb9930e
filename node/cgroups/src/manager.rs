//! Cgroups a node agent creates and limits itself (the kubelet's node, QoS and pod cgroups), as
//! upstream's cgroupfs manager does through libcontainer: [`Layout::apply`] creates a cgroup in
//! every hierarchy and writes its limits (v1 files, or their v2 equivalents in the unified
//! hierarchy with the controllers enabled down the path), [`Layout::children`] lists a cgroup's
//! children and [`Layout::destroy`] kills what is left in a cgroup and removes it with its
//! descendants.
//!
//! Hand-written rather than through cgroups-rs or youki's libcgroups: the few files a pod cgroup
//! needs are written here in a page, while those crates would bring a second model of the mount
//! table this crate already reads for keel-shim.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use crate::layout::{CgroupError, Layout, Mode, cgroup_dir, check_path};

/// The limits of a cgroup (upstream's ResourceConfig); what is `None` is left as the kernel has it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    /// CPU shares (v1 `cpu.shares`; v2 `cpu.weight`, converted as runc converts them).
    pub cpu_shares: Option<u64>,
    /// CFS quota in microseconds per period; -1 is no limit.
    pub cpu_quota: Option<i64>,
    /// CFS period in microseconds.
    pub cpu_period: Option<u64>,
    /// Memory limit in bytes.
    pub memory: Option<i64>,
    /// Process limit; -1 is no limit.
    pub pids: Option<i64>,
    /// Huge page limits in bytes by page size as the kernel names it (`2MB`, `1GB`); `u64::MAX` is
    /// no limit.
    pub hugetlb: BTreeMap<String, u64>,
}

/// The v2 controllers enabled for the children of every cgroup on a managed path.
const V2_CONTROLLERS: [&str; 6] = ["cpuset", "cpu", "io", "memory", "hugetlb", "pids"];

/// runc's conversion of v1 CPU shares [2, 262144] to a v2 weight [1, 10000].
pub fn cpu_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    1 + ((shares.clamp(2, 262_144) - 2) * 9999) / 262_142
}

fn io_error(path: PathBuf) -> impl FnOnce(io::Error) -> CgroupError {
    move |source| CgroupError::Io { path, source }
}

fn write(dir: &Path, file: &str, value: &str) -> Result<(), CgroupError> {
    let path = dir.join(file);
    std::fs::write(&path, value).map_err(io_error(path))
}

impl Layout {
    /// The hierarchies a managed cgroup lives in: every v1 mount on a v1 or hybrid host (runc uses
    /// v1 for every controller there), the unified one on a unified host.
    fn managed_mounts(&self) -> Vec<&Path> {
        match self.mode() {
            Mode::Unified => self.unified.as_deref().into_iter().collect(),
            Mode::V1 | Mode::Hybrid => {
                let mut mounts: Vec<&Path> = Vec::new();
                for mount in self.v1.values() {
                    if !mounts.contains(&mount.as_path()) {
                        mounts.push(mount);
                    }
                }
                mounts
            }
        }
    }

    /// Creates `path` (and its missing ancestors) in every hierarchy and writes `resources` to it.
    /// Idempotent: applying again rewrites the limits.
    pub fn apply(&self, path: &str, resources: &Resources) -> Result<(), CgroupError> {
        check_path(path)?;
        match self.mode() {
            Mode::Unified => self.apply_v2(path, resources),
            Mode::V1 | Mode::Hybrid => self.apply_v1(path, resources),
        }
    }

    fn apply_v1(&self, path: &str, resources: &Resources) -> Result<(), CgroupError> {
        for mount in self.managed_mounts() {
            let dir = cgroup_dir(mount, path);
            std::fs::create_dir_all(&dir).map_err(io_error(dir.clone()))?;
        }
        // A new cpuset cgroup has no CPUs or memory nodes: each level takes its parent's, as
        // libcontainer's cpuset ensureParent does.
        if let Some(mount) = self.v1_mount("cpuset") {
            let mut dir = mount.to_path_buf();
            for part in path.split('/').filter(|p| !p.is_empty()) {
                let parent = dir.clone();
                dir.push(part);
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    let own = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
                    if own.trim().is_empty() {
                        let inherited = std::fs::read_to_string(parent.join(file)).unwrap_or_default();
                        write(&dir, file, inherited.trim())?;
                    }
                }
            }
        }
        if let Some(mount) = self.v1_mount("cpu") {
            let dir = cgroup_dir(mount, path);
            if let Some(shares) = resources.cpu_shares {
                write(&dir, "cpu.shares", &shares.to_string())?;
            }
            // The period before the quota: a quota is checked against the period in force.
            if let Some(period) = resources.cpu_period {
                write(&dir, "cpu.cfs_period_us", &period.to_string())?;
            }
            if let Some(quota) = resources.cpu_quota {
                write(&dir, "cpu.cfs_quota_us", &quota.to_string())?;
            }
        }
        if let (Some(mount), Some(memory)) = (self.v1_mount("memory"), resources.memory) {
            write(&cgroup_dir(mount, path), "memory.limit_in_bytes", &memory.to_string())?;
        }
        if let (Some(mount), Some(pids)) = (self.v1_mount("pids"), resources.pids) {
            let value = if pids < 0 { "max".to_owned() } else { pids.to_string() };
            write(&cgroup_dir(mount, path), "pids.max", &value)?;
        }
        if let Some(mount) = self.v1_mount("hugetlb") {
            let dir = cgroup_dir(mount, path);
            for (size, limit) in &resources.hugetlb {
                // v1 has no "max": the largest page-aligned value stands for no limit.
                let value = if *limit == u64::MAX { "-1".to_owned() } else { limit.to_string() };
                write(&dir, &format!("hugetlb.{size}.limit_in_bytes"), &value)?;
            }
        }
        Ok(())
    }

    fn apply_v2(&self, path: &str, resources: &Resources) -> Result<(), CgroupError> {
        let Some(root) = self.unified.as_deref() else { return Err(CgroupError::NoHierarchy) };
        // Each level down the path enables, for its children, the controllers it has.
        let mut dir = root.to_path_buf();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            let available = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
            let wanted: Vec<String> = V2_CONTROLLERS
                .iter()
                .filter(|c| available.split_whitespace().any(|a| a == **c))
                .map(|c| format!("+{c}"))
                .collect();
            if !wanted.is_empty() {
                write(&dir, "cgroup.subtree_control", &wanted.join(" "))?;
            }
            dir.push(part);
            match std::fs::create_dir(&dir) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
                Err(source) => return Err(CgroupError::Io { path: dir, source }),
            }
        }
        if let Some(shares) = resources.cpu_shares {
            write(&dir, "cpu.weight", &cpu_weight(shares).to_string())?;
        }
        if resources.cpu_quota.is_some() || resources.cpu_period.is_some() {
            let quota = match resources.cpu_quota {
                Some(quota) if quota > 0 => quota.to_string(),
                _ => "max".to_owned(),
            };
            let period = resources.cpu_period.unwrap_or(100_000);
            write(&dir, "cpu.max", &format!("{quota} {period}"))?;
        }
        if let Some(memory) = resources.memory {
            write(&dir, "memory.max", &memory.to_string())?;
        }
        if let Some(pids) = resources.pids {
            let value = if pids < 0 { "max".to_owned() } else { pids.to_string() };
            write(&dir, "pids.max", &value)?;
        }
        for (size, limit) in &resources.hugetlb {
            let value = if *limit == u64::MAX { "max".to_owned() } else { limit.to_string() };
            write(&dir, &format!("hugetlb.{size}.max"), &value)?;
        }
        Ok(())
    }

    /// Whether `path` exists (in the memory hierarchy, or the unified one).
    pub fn exists(&self, path: &str) -> bool {
        check_path(path).is_ok()
            && self.managed_mounts().first().is_some_and(|mount| cgroup_dir(mount, path).is_dir())
    }

    /// The names of `path`'s child cgroups in any managed hierarchy, sorted; none when `path` does
    /// not exist.
    pub fn children(&self, path: &str) -> Vec<String> {
        if check_path(path).is_err() {
            return Vec::new();
        }
        let mut names = std::collections::BTreeSet::new();
        for mount in self.managed_mounts() {
            let Ok(entries) = std::fs::read_dir(cgroup_dir(mount, path)) else { continue };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    names.insert(entry.file_name().to_string_lossy().into_owned());
                }
            }
        }
        names.into_iter().collect()
    }

    /// Kills every process left in `path` and its descendants (SIGKILL) and removes them all from
    /// every hierarchy, deepest first; one already gone is fine. A cgroup still busy after its
    /// processes were killed (they take a moment to exit) is an error: the caller tries again.
    pub fn destroy(&self, path: &str) -> Result<(), CgroupError> {
        check_path(path)?;
        if path == "/" {
            return Err(CgroupError::InvalidPath(path.to_owned()));
        }
        let mut first_error = None;
        for mount in self.managed_mounts() {
            if let Err(error) = destroy_tree(&cgroup_dir(mount, path)) {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

fn destroy_tree(dir: &Path) -> Result<(), CgroupError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(CgroupError::Io { path: dir.to_owned(), source }),
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            destroy_tree(&entry.path())?;
        }
    }
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()).filter(|&p| p > 0) {
        // SAFETY: kill(2) with a PID read from the cgroup and a valid signal has no memory effects.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let mut tries = 0;
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
            // Killed processes leave the cgroup as they exit: a few short waits.
            Err(source) if source.raw_os_error() == Some(libc::EBUSY) && tries < 10 && !procs.is_empty() => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(source) => return Err(CgroupError::Io { path: dir.to_owned(), source }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::examples::{HYBRID, UNIFIED, V1};
    use crate::parse_mountinfo;

    fn read(path: impl AsRef<Path>) -> String {
        let path = path.as_ref();
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn v1_cgroups_are_made_in_every_hierarchy_with_their_limits() {
        let root = tempfile::tempdir().unwrap();
        let layout = parse_mountinfo(
            &format!(
                "{V1}32 25 0:28 / /sys/fs/cgroup/hugetlb rw - cgroup cgroup rw,hugetlb\n\
                 33 25 0:29 / /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
            ),
            root.path(),
        )
        .unwrap();
        let cpuset = root.path().join("sys/fs/cgroup/cpuset");
        std::fs::create_dir_all(&cpuset).unwrap();
        std::fs::write(cpuset.join("cpuset.cpus"), "0-1\n").unwrap();
        std::fs::write(cpuset.join("cpuset.mems"), "0\n").unwrap();
        let resources = Resources {
            cpu_shares: Some(512),
            cpu_quota: Some(50_000),
            cpu_period: Some(100_000),
            memory: Some(64 << 20),
            pids: Some(-1),
            hugetlb: BTreeMap::from([("2MB".to_owned(), 0), ("1GB".to_owned(), u64::MAX)]),
        };
        layout.apply("/kubepods/burstable/pod1", &resources).unwrap();
        let at = |mount: &str, file: &str| {
            read(root.path().join("sys/fs/cgroup").join(mount).join("kubepods/burstable/pod1").join(file))
        };
        assert_eq!(at("cpu,cpuacct", "cpu.shares"), "512");
        assert_eq!(at("cpu,cpuacct", "cpu.cfs_quota_us"), "50000");
        assert_eq!(at("cpu,cpuacct", "cpu.cfs_period_us"), "100000");
        assert_eq!(at("memory", "memory.limit_in_bytes"), (64 << 20).to_string());
        assert_eq!(at("pids", "pids.max"), "max");
        assert_eq!(at("hugetlb", "hugetlb.2MB.limit_in_bytes"), "0");
        assert_eq!(at("hugetlb", "hugetlb.1GB.limit_in_bytes"), "-1");
        // Every level of the cpuset path took its parent's CPUs and nodes.
        assert_eq!(read(cpuset.join("kubepods/cpuset.cpus")), "0-1");
        assert_eq!(at("cpuset", "cpuset.mems"), "0");
        assert!(layout.exists("/kubepods/burstable/pod1"));
        assert_eq!(layout.children("/kubepods/burstable"), ["pod1"]);
        assert_eq!(layout.children("/kubepods/nothing"), Vec::<String>::new());
        // Only what is set is written.
        layout
            .apply("/kubepods/besteffort", &Resources { cpu_shares: Some(2), ..Resources::default() })
            .unwrap();
        let besteffort = root.path().join("sys/fs/cgroup/memory/kubepods/besteffort");
        assert!(besteffort.is_dir() && !besteffort.join("memory.limit_in_bytes").exists());
        assert!(matches!(layout.apply("/a/../b", &resources), Err(CgroupError::InvalidPath(_))));
    }

    #[test]
    fn hybrid_hosts_use_their_v1_hierarchies_only() {
        let root = tempfile::tempdir().unwrap();
        let layout = parse_mountinfo(HYBRID, root.path()).unwrap();
        layout.apply("/kubepods/pod1", &Resources { memory: Some(1 << 20), ..Resources::default() }).unwrap();
        assert!(root.path().join("sys/fs/cgroup/memory/kubepods/pod1/memory.limit_in_bytes").exists());
        assert!(root.path().join("sys/fs/cgroup/systemd/kubepods/pod1").is_dir());
        assert!(!root.path().join("sys/fs/cgroup/unified/kubepods").exists());
    }

    #[test]
    fn v2_cgroups_enable_their_controllers_down_the_path() {
        let root = tempfile::tempdir().unwrap();
        let layout = parse_mountinfo(UNIFIED, root.path()).unwrap();
        let top = root.path().join("sys/fs/cgroup");
        std::fs::create_dir_all(&top).unwrap();
        std::fs::write(top.join("cgroup.controllers"), "cpuset cpu io memory pids\n").unwrap();
        // A fake tree has no kernel to fill the new cgroups' controller lists: kubepods offers
        // cpu and memory only.
        std::fs::create_dir_all(top.join("kubepods")).unwrap();
        std::fs::write(top.join("kubepods/cgroup.controllers"), "cpu memory\n").unwrap();
        let resources = Resources {
            cpu_shares: Some(1024),
            cpu_quota: Some(-1),
            cpu_period: Some(100_000),
            memory: Some(1 << 30),
            pids: Some(100),
            hugetlb: BTreeMap::from([("2MB".to_owned(), u64::MAX)]),
        };
        layout.apply("/kubepods/pod1", &resources).unwrap();
        assert_eq!(read(top.join("cgroup.subtree_control")), "+cpuset +cpu +io +memory +pids");
        assert_eq!(read(top.join("kubepods/cgroup.subtree_control")), "+cpu +memory");
        let pod = top.join("kubepods/pod1");
        assert_eq!(read(pod.join("cpu.weight")), "39");
        assert_eq!(read(pod.join("cpu.max")), "max 100000");
        assert_eq!(read(pod.join("memory.max")), (1u64 << 30).to_string());
        assert_eq!(read(pod.join("pids.max")), "100");
        assert_eq!(read(pod.join("hugetlb.2MB.max")), "max");
    }

    #[test]
    fn cpu_weights_as_runc_converts_shares() {
        assert_eq!(cpu_weight(0), 0);
        assert_eq!(cpu_weight(2), 1);
        assert_eq!(cpu_weight(1024), 39);
        assert_eq!(cpu_weight(262_144), 10_000);
        assert_eq!(cpu_weight(1 << 20), 10_000);
    }

    #[test]
    fn destroy_removes_the_tree_deepest_first() {
        let root = tempfile::tempdir().unwrap();
        let layout = parse_mountinfo(V1, root.path()).unwrap();
        for mount in ["cpu,cpuacct", "memory"] {
            let leaf = root.path().join("sys/fs/cgroup").join(mount).join("kubepods/pod1/c1");
            std::fs::create_dir_all(&leaf).unwrap();
        }
        layout.destroy("/kubepods/pod1").unwrap();
        for mount in ["cpu,cpuacct", "memory"] {
            let kubepods = root.path().join("sys/fs/cgroup").join(mount).join("kubepods");
            assert!(kubepods.is_dir() && !kubepods.join("pod1").exists());
        }
        // Gone already is fine; the root never goes.
        layout.destroy("/kubepods/pod1").unwrap();
        assert!(matches!(layout.destroy("/"), Err(CgroupError::InvalidPath(_))));
        // A directory with a file stands for a cgroup that cannot be removed.
        let busy = root.path().join("sys/fs/cgroup/pids/kubepods/pod2");
        std::fs::create_dir_all(&busy).unwrap();
        std::fs::write(busy.join("notes"), "").unwrap();
        assert!(matches!(layout.destroy("/kubepods/pod2"), Err(CgroupError::Io { .. })));
    }
}
