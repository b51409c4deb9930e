//! keel-cgroups: cgroups with the cgroupfs driver, shared by keel-shim and keel-kubelet.
//!
//! - [`layout`]: where the hierarchies are ([`Layout`], from a mountinfo text: cgroup v1, v2, or
//!   the hybrid of both), cgroup paths, and the removal of a leaf cgroup runc left behind.
//! - [`manager`]: cgroups an agent creates and limits itself (the kubelet's node, QoS and pod
//!   cgroups): created in every hierarchy with their limits, listed, destroyed.
//! - [`examples`]: mount tables of the layouts this crate knows, for its users' tests.
//!
//! Every function that touches files takes the root of the tree as a parameter (a [`Layout`]
//! holds absolute mount points under it), so the v1, v2 and hybrid cases are tested on fake trees.

pub mod examples;
pub mod layout;
pub mod manager;

pub use layout::{
    CgroupError, Layout, Mode, cgroup_dir, check_path, detect, parse_mountinfo, remove, unescape_mountinfo,
};
pub use manager::{Resources, cpu_weight};
