//! keel-testbed: the fixtures every root integration test of Keel uses.
//!
//! - [`fabric`]: test hosts (network namespaces) joined by a bridge fabric in a namespace of its own;
//!   run closures, async blocks and commands inside a host.
//! - [`forward`]: reach a server inside the fabric from the machine's loopback without touching the
//!   machine's own network namespace.
//! - [`host_state`]: a snapshot of the machine's own network namespace, to assert nothing changed it.
//! - [`process`]: `Daemon`, a long-running process with a readiness probe, its log shown when a test
//!   fails, stopped and reaped (with whatever it forked) on drop.
//! - [`etcd`], [`registry`], [`containerd`]: real peers as daemons on loopback or in a host.
//! - [`cri`]: a CRI v1 client over a runtime's unix socket.
//! - [`images`]: small OCI images built from busybox-static (OCI layout, archive, pushed to a registry).
//! - [`e2e_images`]: the images critest pulls, built from Debian packages and served from a local
//!   registry under their original names.
//! - [`kube_apiserver`]: the upstream kube-apiserver peer on its own etcd, with a test PKI that mints
//!   client certificates for any user.
//! - [`kubectl`]: every installed kubectl version, for version-matrix tests.
//! - [`kubelet_node`]: a host with a registry, busybox and a CNI config, and the CRI runtime in it.
//! - [`mount_ns`]: a private mount namespace with paths bound to the fixture's files, so the
//!   upstream kubelet's global sysctls stay the machine's.
//! - [`peers`]: the upstream components (Kubernetes v1.34, cri-tools, etcd 3.6, kwok) `cargo xtask
//!   peers` builds, and where they are.
//! - [`python`], [`node`]: the official Python and JavaScript Kubernetes clients, installed by
//!   `cargo xtask deps` under the target directory.
//! - [`durable_fs`]: a FUSE filesystem that keeps what was not fsynced in memory and loses it on a
//!   simulated power loss, so storage tests prove acknowledged data was durable.
//! - [`bench`]: the harness of the benchmark programs.
//!
//! Every fixture removes what it made on drop, also while a test panics. Names of everything a test makes
//! start with `keel-t<pid>-`, where `<pid>` is the test process, and every process a fixture starts
//! carries its owner's pid and start time: [`sweep`] removes what crashed processes left (their owner no
//! longer alive) without disturbing tests running in parallel. `cargo xtask test` sweeps before the run
//! and fails if anything is left to sweep after it, so a leak is reported, never hidden.
//!
//! Fixtures report failures with `anyhow` errors carrying context: a test only prints them, no caller
//! branches on their kind.

pub mod bench;
pub mod bridge;
pub mod containerd;
#[cfg(feature = "cri")]
pub mod cri;
pub mod durable_fs;
pub mod e2e_images;
pub mod etcd;
pub mod fabric;
pub mod forward;
pub mod host_state;
pub mod images;
pub mod kube_apiserver;
pub mod kubectl;
pub mod kubelet_node;
pub mod loopback;
pub mod mount_ns;
pub mod netlink;
pub mod netns;
pub mod node;
mod orphans;
pub mod peers;
pub mod process;
pub mod python;
pub mod registry;

use std::sync::atomic::{AtomicU32, Ordering};

pub use fabric::{Fabric, Host};
pub use forward::Forwarder;
pub use netns::{NetNs, NetNsFd};
pub use orphans::sweep_orphans;
pub use process::{Daemon, Readiness};

/// The prefix of every name a test makes (namespaces, mounts): `keel-t<pid>-`.
pub const TEST_PREFIX: &str = "keel-t";

/// Where `cargo xtask up` keeps the state of each instance (`/run/keel/<name>`).
pub const UP_STATE_DIR: &str = "/run/keel";

/// A name prefix unique to this call in this process: `keel-t<pid>-<n>`.
pub fn unique_prefix() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{TEST_PREFIX}{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The pid of the test process that made `name`, if `name` is a test name.
pub fn owner_of(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(TEST_PREFIX)?;
    let (pid, _) = rest.split_once('-')?;
    pid.parse().ok()
}

/// Whether a process with this pid is alive (a zombie is not) and, when `start` is given, started at
/// that time (so a reused pid is not mistaken for the process that was meant).
pub fn process_alive(pid: u32, start: Option<u64>) -> bool {
    orphans::owner_alive(pid, start)
}

/// [`process_alive`] without a start time: what names carrying only a pid can be judged by.
pub fn pid_alive(pid: u32) -> bool {
    process_alive(pid, None)
}

/// The start time of a process (clock ticks since boot, from /proc/PID/stat), to record beside its pid.
pub fn process_start_time(pid: u32) -> Option<u64> {
    orphans::start_time(pid)
}

/// Which leftovers a sweep removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sweep {
    /// Only what processes that are no longer alive made: safe while other tests run.
    DeadOwners,
    /// Everything with the test prefix: only when no test runs (the start of `cargo xtask test`).
    All,
}

/// Removes leftovers of earlier test processes; returns what it removed, for the log.
pub fn sweep(scope: Sweep) -> Vec<String> {
    let mut removed = Vec::new();
    let me = std::process::id();
    let stale = |name: &str| match (owner_of(name), scope) {
        (None, _) => false,
        (Some(owner), Sweep::All) => owner != me,
        (Some(owner), Sweep::DeadOwners) => !pid_alive(owner),
    };
    let names = netns::list_named().unwrap_or_else(|err| {
        eprintln!("keel-testbed sweep: {err:#}");
        Vec::new()
    });
    for name in names {
        if stale(&name) {
            netns::remove_named(&name);
            removed.push(format!("netns {name}"));
        }
    }
    // State directories of `cargo xtask up --name keel-t<pid>-<n>` instances that tests start.
    for entry in std::fs::read_dir(UP_STATE_DIR).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if stale(&name) && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed.push(format!("{UP_STATE_DIR}/{name}"));
        }
    }
    // Power-loss filesystems of test processes that are gone.
    match durable_fs::sweep_stale_mounts() {
        Ok(0) => {}
        Ok(n) => removed.push(format!("{n} stale durable_fs mount(s)")),
        Err(err) => eprintln!("keel-testbed sweep: durable_fs mounts: {err}"),
    }
    // Processes started by fixtures of test processes that are gone.
    let killed = orphans::sweep_orphans();
    if killed > 0 {
        removed.push(format!("{killed} orphaned fixture process(es)"));
    }
    removed
}

/// Fails unless the process runs as root: fixtures need CAP_SYS_ADMIN and CAP_NET_ADMIN.
pub fn require_root() -> anyhow::Result<()> {
    if nix::unistd::Uid::effective().is_root() {
        Ok(())
    } else {
        anyhow::bail!("keel-testbed needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN): run the tests as root")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_read_from_test_names() {
        assert_eq!(owner_of("keel-t123-4-fabric"), Some(123));
        assert_eq!(owner_of("keel-t123-4"), Some(123));
        assert_eq!(owner_of("keel-up-fabric"), None);
        assert_eq!(owner_of("keel-tx-1"), None);
        assert_eq!(owner_of("other"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_free_pid_is_not() {
        assert!(pid_alive(std::process::id()));
        assert!(!pid_alive(u32::MAX));
    }
}
