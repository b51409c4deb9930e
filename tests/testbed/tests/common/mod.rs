//! Helpers shared by the fixture tests.

use std::path::Path;

/// Asserts that `pid` no longer exists at all (it was reaped, not left as a zombie).
pub fn assert_gone(pid: u32, what: &str) {
    let proc_dir = format!("/proc/{pid}");
    let state = std::fs::read_to_string(format!("{proc_dir}/stat")).unwrap_or_default();
    assert!(!Path::new(&proc_dir).exists(), "{what} (pid {pid}) is still there: {state}");
}
