//! cgroup stats and removal against this machine's real cgroup v1 hierarchies (root): a cgroup made as
//! runc makes one (a directory per controller), a process moved into it that writes 16 MiB and burns
//! some CPU, its usage read through `cgroup::stats`, then `cgroup::remove` after the process is gone.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use keel_shim::cgroup::{self, CgroupError, Layout, Mode};

const CONTROLLERS: &[&str] = &["memory", "cpuacct", "pids"];

/// The test's cgroup and process; both are removed on drop, also when the test fails.
struct TestCgroup {
    layout: Layout,
    path: String,
    child: Option<Child>,
}

impl TestCgroup {
    fn dirs(&self) -> Vec<PathBuf> {
        CONTROLLERS
            .iter()
            .filter_map(|c| self.layout.v1_mount(c))
            .map(|mount| mount.join(self.path.trim_start_matches('/')))
            .collect()
    }

    fn stop_child(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        self.stop_child();
        let _ = cgroup::remove(&self.layout, &self.path);
    }
}

#[test]
fn stats_of_a_real_v1_cgroup_then_removal() {
    keel_testbed::require_root().unwrap();
    let layout = Layout::host().unwrap();
    assert_ne!(layout.mode(), Mode::Unified, "this test reads v1 controllers (the machine is hybrid)");
    let path = format!("/{}", keel_testbed::unique_prefix());
    let mut cg = TestCgroup { layout, path, child: None };
    for dir in cg.dirs() {
        std::fs::create_dir(&dir).unwrap();
    }
    let memory_dir = cg.layout.v1_mount("memory").unwrap().join(cg.path.trim_start_matches('/'));
    std::fs::write(memory_dir.join("memory.limit_in_bytes"), "268435456").unwrap();

    let scratch = tempfile::tempdir().unwrap();
    let marker = scratch.path().join("ready");
    let procs: Vec<PathBuf> = cg.dirs().iter().map(|d| d.join("cgroup.procs")).collect();
    let script = format!(
        "for f in \"$@\"; do echo $$ > \"$f\"; done; \
         dd if=/dev/zero of={data} bs=1M count=16 2>/dev/null; \
         i=0; while [ $i -lt 50000 ]; do i=$((i+1)); done; \
         echo ready > {marker}; exec sleep 600",
        data = scratch.path().join("data").display(),
        marker = marker.display(),
    );
    cg.child = Some(Command::new("sh").arg("-c").arg(&script).arg("sh").args(&procs).spawn().unwrap());
    wait_for(&marker);

    let stats = cgroup::stats(&cg.layout, &cg.path).unwrap();
    let usage = stats.memory_usage.unwrap();
    assert!(usage >= 16 << 20, "the 16 MiB written are charged: {stats:?}");
    assert!(stats.working_set().unwrap() <= usage);
    assert_eq!(stats.memory_limit, Some(256 << 20));
    assert!(stats.cpu_usage_ns.unwrap() > 0, "{stats:?}");
    assert_eq!(stats.pids, Some(1), "sleep alone is left: {stats:?}");
    let memory = stats.memory_usage();
    assert_eq!(memory.available_bytes.unwrap().value, (256 << 20) - stats.working_set().unwrap());

    // A cgroup with a process in it cannot be removed; once the process is gone it can.
    assert!(matches!(cgroup::remove(&cg.layout, &cg.path), Err(CgroupError::Io { .. })));
    cg.stop_child();
    cgroup::remove(&cg.layout, &cg.path).unwrap();
    for dir in cg.dirs() {
        assert!(!dir.exists(), "{} is left", dir.display());
    }
    assert!(matches!(cgroup::stats(&cg.layout, &cg.path), Err(CgroupError::NotFound(_))));
    cgroup::remove(&cg.layout, &cg.path).unwrap();
}

/// Waits for the child's marker file (it appears once the child's work is done).
fn wait_for(marker: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the child never wrote {}", marker.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}
