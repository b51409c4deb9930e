//! Where the cgroup hierarchies are ([`Layout`], from a mountinfo text: cgroup v1, v2, or the
//! hybrid of both), cgroup paths, and the removal of a leaf cgroup ([`remove`]).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// What went wrong with a cgroup operation (each names the file or input).
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// Reading the mount table failed.
    #[error("reading {path}: {source}")]
    Mountinfo {
        /// The mountinfo file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// No cgroup hierarchy is mounted.
    #[error("no cgroup hierarchy is mounted (mountinfo has no cgroup or cgroup2 mount)")]
    NoHierarchy,
    /// A cgroup parent or path is not an absolute path without `..`.
    #[error("invalid cgroup path {0:?}: it must be absolute, without `..` components")]
    InvalidPath(String),
    /// The container's cgroup exists in no hierarchy (the container is gone, or never started).
    #[error("cgroup {0} exists in no hierarchy")]
    NotFound(String),
    /// Reading or removing a cgroup file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

/// The cgroup v1 controllers recognized in a v1 mount's super options.
const V1_CONTROLLERS: &[&str] = &[
    "blkio",
    "cpu",
    "cpuacct",
    "cpuset",
    "devices",
    "freezer",
    "hugetlb",
    "memory",
    "misc",
    "net_cls",
    "net_prio",
    "perf_event",
    "pids",
    "rdma",
];

/// Which cgroup versions a host mounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Only v1 hierarchies.
    V1,
    /// Only the v2 unified hierarchy (every controller in it).
    Unified,
    /// v1 controllers plus a v2 hierarchy (as systemd's hybrid mode: here it holds only hugetlb).
    Hybrid,
}

/// Where the cgroup hierarchies are mounted (absolute paths under the root the layout was read for).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Layout {
    /// v1 controller (or `name=...` hierarchy) → its mount point. Co-mounted controllers
    /// (`cpu,cpuacct`) map to the same mount point.
    pub v1: BTreeMap<String, PathBuf>,
    /// The cgroup2 mount, if any.
    pub unified: Option<PathBuf>,
}

impl Layout {
    /// The layout of this host (`/proc/self/mountinfo`, paths as they are).
    pub fn host() -> Result<Layout, CgroupError> {
        detect(Path::new("/"))
    }

    /// v1, v2 or hybrid.
    pub fn mode(&self) -> Mode {
        match (self.v1.is_empty(), self.unified.is_some()) {
            (true, _) => Mode::Unified,
            (false, false) => Mode::V1,
            (false, true) => Mode::Hybrid,
        }
    }

    /// The mount point holding `controller` in v1, if it is a v1 controller here.
    pub fn v1_mount(&self, controller: &str) -> Option<&Path> {
        self.v1.get(controller).map(PathBuf::as_path)
    }

    /// Whether the OCI runtime can set hugepage limits here: a v1 `hugetlb` hierarchy (runc uses v1
    /// for every controller on a v1 or hybrid host, so the hybrid unified mount's hugetlb does not
    /// count), or `hugetlb` among a unified host's root `cgroup.controllers`. containerd makes the
    /// same check (`isHugetlbControllerPresent`).
    pub fn hugetlb(&self) -> bool {
        match self.mode() {
            Mode::V1 | Mode::Hybrid => self.v1.contains_key("hugetlb"),
            Mode::Unified => self.unified.as_ref().is_some_and(|root| {
                std::fs::read_to_string(root.join("cgroup.controllers"))
                    .is_ok_and(|list| list.split_whitespace().any(|c| c == "hugetlb"))
            }),
        }
    }

    /// Every distinct hierarchy mount point (v1 ones, then the unified one).
    pub fn mount_points(&self) -> Vec<&Path> {
        let mut points: Vec<&Path> = Vec::new();
        for point in self.v1.values().map(PathBuf::as_path).chain(self.unified.as_deref()) {
            if !points.contains(&point) {
                points.push(point);
            }
        }
        points
    }
}

/// The layout under `root`: reads `root/proc/self/mountinfo` and places every mount point under
/// `root` (tests pass a temporary directory holding a fake tree; the host passes `/`).
pub fn detect(root: &Path) -> Result<Layout, CgroupError> {
    let path = root.join("proc/self/mountinfo");
    let text = std::fs::read_to_string(&path).map_err(|source| CgroupError::Mountinfo { path, source })?;
    parse_mountinfo(&text, root)
}

/// The layout a mountinfo text describes, mount points placed under `root`. The first mount of a
/// hierarchy wins (later ones are bind mounts of it, e.g. inside containers).
pub fn parse_mountinfo(text: &str, root: &Path) -> Result<Layout, CgroupError> {
    let mut layout = Layout::default();
    for line in text.lines() {
        // id parent major:minor root mount-point options [optional...] - fstype source super-options
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let Some(mount_point) = left.split(' ').nth(4) else { continue };
        let mut right = right.split(' ');
        let (Some(fstype), Some(_source), Some(super_options)) = (right.next(), right.next(), right.next())
        else {
            continue;
        };
        let mount_point = under_root(root, &unescape_mountinfo(mount_point));
        match fstype {
            "cgroup2" => {
                layout.unified.get_or_insert(mount_point);
            }
            "cgroup" => {
                for option in super_options.split(',') {
                    if V1_CONTROLLERS.contains(&option) || option.starts_with("name=") {
                        layout.v1.entry(option.to_owned()).or_insert_with(|| mount_point.clone());
                    }
                }
            }
            _ => {}
        }
    }
    if layout.v1.is_empty() && layout.unified.is_none() {
        return Err(CgroupError::NoHierarchy);
    }
    Ok(layout)
}

/// A mountinfo field with its escapes undone: mountinfo writes space, tab, newline and backslash
/// as `\ooo`.
pub fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && bytes.get(i + 1..i + 4).is_some_and(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)))
        {
            let value = bytes[i + 1..i + 4].iter().fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
            out.push(u8::try_from(value).unwrap_or(b'?'));
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path` (absolute in the tree) placed under `root`.
fn under_root(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// Checks that a cgroup path is absolute and has no `..`, `.` or empty components.
pub fn check_path(path: &str) -> Result<(), CgroupError> {
    let ok = path == "/"
        || (path.starts_with('/') && !path.split('/').skip(1).any(|part| matches!(part, "" | "." | "..")));
    if ok { Ok(()) } else { Err(CgroupError::InvalidPath(path.to_owned())) }
}

/// The directory of `cgroups_path` in the hierarchy mounted at `mount`.
pub fn cgroup_dir(mount: &Path, cgroups_path: &str) -> PathBuf {
    mount.join(cgroups_path.trim_start_matches('/'))
}

/// Removes a container's cgroup (the leaf directory `cgroups_path`) from every hierarchy; one that is
/// already gone is fine. A cgroup that still holds processes cannot be removed (EBUSY): the first
/// such error is returned after every hierarchy was tried.
pub fn remove(layout: &Layout, cgroups_path: &str) -> Result<(), CgroupError> {
    check_path(cgroups_path)?;
    if cgroups_path == "/" {
        return Err(CgroupError::InvalidPath(cgroups_path.to_owned()));
    }
    let mut first_error = None;
    for mount in layout.mount_points() {
        let dir = cgroup_dir(mount, cgroups_path);
        match std::fs::remove_dir(&dir) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                first_error.get_or_insert(CgroupError::Io { path: dir, source });
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::examples::{HYBRID, UNIFIED, V1};

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape_mountinfo("/var/lib/my\\040root/pods"), "/var/lib/my root/pods");
        assert_eq!(unescape_mountinfo("/a\\134b\\011c"), "/a\\b\tc");
        assert_eq!(unescape_mountinfo("/plain\\09"), "/plain\\09");
    }

    #[test]
    fn hugetlb_is_present_only_where_runc_can_use_it() {
        // This machine: hugetlb only in the hybrid cgroup2 mount, which runc does not use.
        assert!(!parse_mountinfo(HYBRID, Path::new("/")).unwrap().hugetlb());
        assert!(!parse_mountinfo(V1, Path::new("/")).unwrap().hugetlb());
        let v1 = format!(
            "{V1}32 25 0:28 / /sys/fs/cgroup/hugetlb rw,relatime shared:14 - cgroup cgroup rw,hugetlb\n"
        );
        assert!(parse_mountinfo(&v1, Path::new("/")).unwrap().hugetlb());
        let root = tempfile::tempdir().unwrap();
        let unified = parse_mountinfo(UNIFIED, root.path()).unwrap();
        std::fs::create_dir_all(root.path().join("sys/fs/cgroup")).unwrap();
        std::fs::write(root.path().join("sys/fs/cgroup/cgroup.controllers"), "cpu memory pids\n").unwrap();
        assert!(!unified.hugetlb());
        std::fs::write(root.path().join("sys/fs/cgroup/cgroup.controllers"), "cpu hugetlb memory\n").unwrap();
        assert!(unified.hugetlb());
    }

    #[test]
    fn hybrid_layout_is_read_as_this_machine_mounts_it() {
        let layout = parse_mountinfo(HYBRID, Path::new("/")).unwrap();
        assert_eq!(layout.mode(), Mode::Hybrid);
        assert_eq!(layout.v1_mount("memory"), Some(Path::new("/sys/fs/cgroup/memory")));
        assert_eq!(layout.v1_mount("cpuacct"), Some(Path::new("/sys/fs/cgroup/cpuacct")));
        assert_eq!(layout.v1_mount("name=systemd"), Some(Path::new("/sys/fs/cgroup/systemd")));
        assert_eq!(layout.unified.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        assert_eq!(layout.v1_mount("tmpfs"), None);
    }

    #[test]
    fn v1_layout_maps_co_mounted_controllers_to_one_mount() {
        let layout = parse_mountinfo(V1, Path::new("/fake")).unwrap();
        assert_eq!(layout.mode(), Mode::V1);
        assert_eq!(layout.v1_mount("cpu"), Some(Path::new("/fake/sys/fs/cgroup/cpu,cpuacct")));
        assert_eq!(layout.v1_mount("cpuacct"), layout.v1_mount("cpu"));
        assert_eq!(layout.mount_points().len(), 3);
        assert_eq!(layout.unified, None);
    }

    #[test]
    fn unified_layout_has_no_v1_controllers() {
        let layout = parse_mountinfo(UNIFIED, Path::new("/root")).unwrap();
        assert_eq!(layout.mode(), Mode::Unified);
        assert_eq!(layout.unified.as_deref(), Some(Path::new("/root/sys/fs/cgroup")));
        assert!(layout.v1.is_empty());
    }

    #[test]
    fn first_mount_of_a_hierarchy_wins_and_escapes_are_decoded() {
        let text = "\
1 0 0:1 / /a\\040b rw - cgroup2 cgroup2 rw
2 0 0:1 / /later rw - cgroup2 cgroup2 rw
3 0 0:2 / /m rw - cgroup cgroup rw,memory
4 0 0:2 /sub /m2 rw - cgroup cgroup rw,memory
garbage line
";
        let layout = parse_mountinfo(text, Path::new("/")).unwrap();
        assert_eq!(layout.unified.as_deref(), Some(Path::new("/a b")));
        assert_eq!(layout.v1_mount("memory"), Some(Path::new("/m")));
    }

    #[test]
    fn no_cgroup_mount_is_an_error() {
        let err = parse_mountinfo("22 1 0:21 / /proc rw - proc proc rw\n", Path::new("/")).unwrap_err();
        assert!(matches!(err, CgroupError::NoHierarchy), "{err}");
    }

    #[test]
    fn detect_reads_the_mountinfo_under_the_root() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc/self")).unwrap();
        std::fs::write(dir.path().join("proc/self/mountinfo"), V1).unwrap();
        let layout = detect(dir.path()).unwrap();
        assert_eq!(layout.v1_mount("memory"), Some(dir.path().join("sys/fs/cgroup/memory").as_path()));
        let missing = detect(&dir.path().join("nothing")).unwrap_err();
        assert!(matches!(missing, CgroupError::Mountinfo { .. }), "{missing}");
    }

    #[test]
    fn remove_deletes_the_leaf_in_every_hierarchy_and_tolerates_absent_ones() {
        let dir = tempfile::tempdir().unwrap();
        let layout = parse_mountinfo(HYBRID, dir.path()).unwrap();
        // The leaf exists in memory and unified only; the other hierarchies never had it.
        for mount in ["sys/fs/cgroup/memory", "sys/fs/cgroup/unified"] {
            std::fs::create_dir_all(dir.path().join(mount).join("kubepods/pod1/c1")).unwrap();
        }
        remove(&layout, "/kubepods/pod1/c1").unwrap();
        for mount in ["sys/fs/cgroup/memory", "sys/fs/cgroup/unified"] {
            assert!(!dir.path().join(mount).join("kubepods/pod1/c1").exists());
            assert!(dir.path().join(mount).join("kubepods/pod1").exists(), "only the leaf goes");
        }
        // Twice is fine.
        remove(&layout, "/kubepods/pod1/c1").unwrap();
        assert!(matches!(remove(&layout, "/"), Err(CgroupError::InvalidPath(_))));
        assert!(matches!(remove(&layout, "/a/../b"), Err(CgroupError::InvalidPath(_))));
    }

    #[test]
    fn remove_reports_a_cgroup_that_cannot_be_removed() {
        let dir = tempfile::tempdir().unwrap();
        let layout = parse_mountinfo(V1, dir.path()).unwrap();
        // A non-empty directory stands for a busy cgroup (rmdir fails).
        let busy = dir.path().join("sys/fs/cgroup/memory/pod/c1");
        std::fs::create_dir_all(&busy).unwrap();
        std::fs::write(busy.join("tasks"), "1\n").unwrap();
        let gone = dir.path().join("sys/fs/cgroup/pids/pod/c1");
        std::fs::create_dir_all(&gone).unwrap();
        let err = remove(&layout, "/pod/c1").unwrap_err();
        assert!(matches!(&err, CgroupError::Io { path, .. } if path == &busy), "{err}");
        assert!(!gone.exists(), "the other hierarchies are still cleaned");
    }
}
