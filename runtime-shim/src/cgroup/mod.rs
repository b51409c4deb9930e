//! Cgroups for containers and pod sandboxes, with the cgroupfs driver (what RuntimeConfig reports):
//! where the hierarchies are ([`Layout`], from keel-cgroups, shared with keel-kubelet), which cgroup a container gets ([`cgroups_path`]), the OCI resources a CRI
//! request asks for ([`resources`]), the usage the kubelet reads ([`stats`]), and the removal of a
//! container's cgroup ([`remove`]).
//!
//! The OCI runtime (runc, crun) creates the cgroups and writes the limits; keel-shim only computes the
//! spec's part, reads the usage and removes the cgroups runc leaves behind. Every function that
//! touches files takes the root of the tree as a parameter (a [`Layout`] holds absolute mount points
//! under it), so the v1, v2 and hybrid cases are tested on fake trees.

mod resources;
mod stats;

pub use keel_cgroups::{CgroupError, Layout, Mode, cgroup_dir, check_path, detect, parse_mountinfo, remove};
pub use resources::resources;
pub use stats::{CgroupStats, container_stats, nano_cores, now_ns, pod_sandbox_stats, stats};

/// The cgroups path of a container (or a pod sandbox) with the cgroupfs driver: the sandbox's
/// `linux.cgroup_parent` (the kubelet passes `/kubepods/<qos>/pod<uid>`) joined with `leaf` (the
/// container's id: unique), as containerd's `getCgroupsPath` joins them. Without a parent the
/// container goes under `/keel-shim` (containerd uses `/k8s.io`, its namespace). systemd slices
/// (`*.slice`) are not special: keel-shim reports the cgroupfs driver, so the kubelet sends none.
pub fn cgroups_path(cgroup_parent: &str, leaf: &str) -> Result<String, CgroupError> {
    if leaf.is_empty() || leaf.contains('/') || leaf == "." || leaf == ".." {
        return Err(CgroupError::InvalidPath(leaf.to_owned()));
    }
    let parent = if cgroup_parent.is_empty() { "/keel-shim" } else { cgroup_parent.trim_end_matches('/') };
    let path = if parent.is_empty() { format!("/{leaf}") } else { format!("{parent}/{leaf}") };
    check_path(&path)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroups_paths_join_the_parent_and_the_leaf() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("/kubepods/burstable/pod123", "abc", Some("/kubepods/burstable/pod123/abc")),
            ("/kubepods/besteffort/pod1/", "abc", Some("/kubepods/besteffort/pod1/abc")),
            ("", "abc", Some("/keel-shim/abc")),
            ("/", "abc", Some("/abc")),
            ("kubepods", "abc", None),
            ("/kubepods/../etc", "abc", None),
            ("/kubepods", "a/b", None),
            ("/kubepods", "..", None),
            ("/kubepods", "", None),
            ("/kubepods//x", "abc", None),
        ];
        for (parent, leaf, want) in cases {
            let got = cgroups_path(parent, leaf).ok();
            assert_eq!(got.as_deref(), *want, "parent {parent:?} leaf {leaf:?}");
        }
    }
}
