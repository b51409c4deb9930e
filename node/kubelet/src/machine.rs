//! What the kubelet reports of its machine (upstream reads it through cAdvisor's MachineInfo and
//! the container manager's root filesystem stats): online CPUs, memory, huge pages, the IDs, the
//! kernel and OS image, and the capacity of the filesystem under `--root-dir`. The parsers are pure;
//! [`MachineInfo::read`] is the IO edge.

use std::path::Path;

/// The machine as the kubelet sees it at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MachineInfo {
    /// Online CPUs (cAdvisor's NumCores: `/sys/devices/system/cpu/online`).
    pub cpus: i64,
    /// MemTotal of /proc/meminfo, in bytes.
    pub memory_bytes: i64,
    /// Huge pages by size in KiB (`hugepages-2048kB`): the pages the kernel holds of that size.
    pub huge_pages: Vec<(u64, i64)>,
    /// `/etc/machine-id`.
    pub machine_id: String,
    /// `/sys/class/dmi/id/product_uuid` where it can be read (it is root's only).
    pub system_uuid: String,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
    /// `uname -r`.
    pub kernel_version: String,
    /// PRETTY_NAME of /etc/os-release.
    pub os_image: String,
    /// The Go name of the architecture (`amd64`, `arm64`), as the Node's labels and nodeInfo say it.
    pub architecture: &'static str,
    /// The size of the filesystem holding the root dir, in bytes (ephemeral-storage capacity).
    pub root_fs_bytes: i64,
}

/// A file the kubelet must read that is not there or not what it should be.
#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    #[error("reading {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {reason}")]
    Parse { path: String, reason: String },
    #[error("statfs of {path}: {source}")]
    Statfs { path: String, source: nix::Error },
}

impl MachineInfo {
    /// `--test-node-capacity cpu=8,memory=32Gi[,ephemeral-storage=100Gi]`: the capacity declared
    /// instead of the machine's, so that many nodes of chosen sizes can run on one machine (scale
    /// and placement tests; nothing limits the pods to it). CPUs are whole.
    pub fn declare_capacity(&mut self, text: &str) -> Result<(), String> {
        use keel_api::validation::quantity::Quantity;
        for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) =
                pair.split_once('=').ok_or_else(|| format!("{pair:?}: expected name=quantity"))?;
            let quantity = Quantity::parse(value)
                .filter(|q| !q.is_negative())
                .ok_or_else(|| format!("{pair:?}: {value:?} is not a quantity"))?;
            match name {
                "cpu" if quantity.canonical() == quantity.value().to_string() => self.cpus = quantity.value(),
                "cpu" => return Err(format!("{pair:?}: the declared CPUs must be whole")),
                "memory" => self.memory_bytes = quantity.value(),
                "ephemeral-storage" => self.root_fs_bytes = quantity.value(),
                other => {
                    return Err(format!("{other:?} cannot be declared: cpu, memory or ephemeral-storage"));
                }
            }
        }
        Ok(())
    }

    /// Reads this machine, with `root_dir` (the kubelet's `--root-dir`) for its filesystem.
    pub fn read(root_dir: &Path) -> Result<MachineInfo, MachineError> {
        let read = |path: &str| {
            std::fs::read_to_string(path).map_err(|source| MachineError::Read { path: path.into(), source })
        };
        let parse =
            |path: &str, reason: &str| MachineError::Parse { path: path.into(), reason: reason.into() };
        let online = "/sys/devices/system/cpu/online";
        let cpus = cpu_count(&read(online)?).ok_or_else(|| parse(online, "not a CPU list"))?;
        let meminfo = "/proc/meminfo";
        let memory_bytes = mem_total(&read(meminfo)?).ok_or_else(|| parse(meminfo, "no MemTotal"))?;
        let machine_id = read("/etc/machine-id").or_else(|_| read("/var/lib/dbus/machine-id"));
        let statvfs = nix::sys::statvfs::statvfs(root_dir)
            .map_err(|source| MachineError::Statfs { path: root_dir.display().to_string(), source })?;
        let blocks = i64::try_from(statvfs.blocks()).unwrap_or(i64::MAX);
        let fragment = i64::try_from(statvfs.fragment_size()).unwrap_or(i64::MAX);
        Ok(MachineInfo {
            cpus,
            memory_bytes,
            huge_pages: huge_pages(Path::new("/sys/kernel/mm/hugepages")),
            machine_id: machine_id.map(|id| id.trim().to_owned()).unwrap_or_default(),
            system_uuid: read("/sys/class/dmi/id/product_uuid")
                .map(|u| u.trim().to_owned())
                .unwrap_or_default(),
            boot_id: read("/proc/sys/kernel/random/boot_id")?.trim().to_owned(),
            kernel_version: nix::sys::utsname::uname()
                .map(|u| u.release().to_string_lossy().into_owned())
                .unwrap_or_default(),
            os_image: read("/etc/os-release").map(|text| os_image(&text)).unwrap_or_else(|_| "Linux".into()),
            architecture: go_architecture(std::env::consts::ARCH),
            root_fs_bytes: blocks.saturating_mul(fragment),
        })
    }
}

/// The number of CPUs in a kernel CPU list (`0-3,8,10-11`).
pub fn cpu_count(list: &str) -> Option<i64> {
    let mut count = 0;
    for range in list.trim().split(',').filter(|r| !r.is_empty()) {
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        let (first, last): (i64, i64) = (first.parse().ok()?, last.parse().ok()?);
        if last < first {
            return None;
        }
        count += last - first + 1;
    }
    (count > 0).then_some(count)
}

/// MemTotal of /proc/meminfo, in bytes.
pub fn mem_total(meminfo: &str) -> Option<i64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line.split_whitespace().skip(1);
    let kib: i64 = words.next()?.parse().ok()?;
    (words.next() == Some("kB")).then(|| kib.saturating_mul(1024))
}

/// PRETTY_NAME of an os-release file, unquoted; "Linux" without one (as cAdvisor).
pub fn os_image(os_release: &str) -> String {
    os_release
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim().trim_matches('"').to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "Linux".into())
}

/// Go's GOARCH for a Rust target architecture.
pub fn go_architecture(arch: &str) -> &'static str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        "riscv64" => "riscv64",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        _ => "unknown",
    }
}

/// The huge page pools under `/sys/kernel/mm/hugepages`: (page size in KiB, pages).
fn huge_pages(dir: &Path) -> Vec<(u64, i64)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut pools: Vec<(u64, i64)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let size = name.strip_prefix("hugepages-")?.strip_suffix("kB")?.parse().ok()?;
            let pages =
                std::fs::read_to_string(entry.path().join("nr_hugepages")).ok()?.trim().parse().ok()?;
            Some((size, pages))
        })
        .collect();
    pools.sort_unstable();
    pools
}

/// The swap control this node's cgroups offer: v2's memory.swap.max in the kubelet's own cgroup,
/// or v1's memsw files in the memory controller (upstream's getSwapControllerAvailable).
pub fn swap_control() -> crate::pod_config::SwapControl {
    use crate::pod_config::SwapControl;
    let exists = |path: &str| Path::new(path).exists();
    if exists("/sys/fs/cgroup/cgroup.controllers") {
        // The root has no memory.swap.max of its own: the kubelet's own cgroup tells.
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let own = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("/").to_owned();
        let file = Path::new("/sys/fs/cgroup").join(own.trim_start_matches('/')).join("memory.swap.max");
        return if file.exists() { SwapControl::SwapMaxV2 } else { SwapControl::None };
    }
    if exists("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes") {
        return SwapControl::MemswV1;
    }
    SwapControl::None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernels_files() {
        assert_eq!(cpu_count("0-1\n"), Some(2));
        assert_eq!(cpu_count("0-3,8,10-11"), Some(7));
        assert_eq!(cpu_count("3-1"), None);
        assert_eq!(cpu_count(""), None);
        let meminfo = "MemTotal:        8141092 kB\nMemFree:          123 kB\n";
        assert_eq!(mem_total(meminfo), Some(8_336_478_208));
        assert_eq!(mem_total("MemFree: 1 kB"), None);
        assert_eq!(
            os_image("NAME=Debian\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n"),
            "Debian GNU/Linux 12 (bookworm)"
        );
        assert_eq!(os_image("NAME=x"), "Linux");
        assert_eq!(go_architecture("x86_64"), "amd64");
    }

    #[test]
    fn reads_this_machine() {
        let machine = MachineInfo::read(Path::new("/")).unwrap();
        let online = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap();
        assert_eq!(Some(machine.cpus), cpu_count(&online));
        assert!(machine.memory_bytes > 0 && machine.root_fs_bytes > 0, "{machine:?}");
        assert_eq!(machine.boot_id.len(), 36, "{machine:?}");
        assert!(!machine.kernel_version.is_empty());
    }

    #[test]
    fn declared_capacity_replaces_the_machines() {
        let mut machine =
            MachineInfo { cpus: 2, memory_bytes: 1 << 30, root_fs_bytes: 1 << 40, ..MachineInfo::default() };
        machine.declare_capacity("cpu=8, memory=32Gi").unwrap();
        assert_eq!((machine.cpus, machine.memory_bytes, machine.root_fs_bytes), (8, 32 << 30, 1 << 40));
        machine.declare_capacity("ephemeral-storage=100Gi").unwrap();
        assert_eq!(machine.root_fs_bytes, 100 << 30);
        assert!(machine.declare_capacity("cpu=500m").unwrap_err().contains("whole"));
        assert!(machine.declare_capacity("gpu=1").unwrap_err().contains("cannot be declared"));
        assert!(machine.declare_capacity("memory").unwrap_err().contains("name=quantity"));
        assert!(machine.declare_capacity("memory=lots").unwrap_err().contains("not a quantity"));
    }
}
