//! What a removed sandbox must not leave behind, as a check tests share: no mount under its
//! directory, no directory, no pause process.

use std::path::Path;

/// Every trace of sandbox `id` under `root` (keel-shim's `--root`) that RemovePodSandbox should have
/// removed: mounts under `root/sandboxes/<id>`, the directory itself, and the pause process `pause`
/// (pid, start time) if it still runs. Empty when nothing is left.
pub fn leftovers(root: &Path, id: &str, pause: Option<(i32, u64)>) -> Vec<String> {
    let dir = root.join("sandboxes").join(id);
    let mut left = Vec::new();
    let prefix = dir.to_string_lossy().into_owned();
    if let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") {
        for line in mountinfo.lines() {
            if let Some(point) = line.split(' ').nth(4)
                && (point == prefix || point.starts_with(&format!("{prefix}/")))
            {
                left.push(format!("mount {point}"));
            }
        }
    }
    if dir.exists() {
        left.push(format!("directory {}", dir.display()));
    }
    if let Some((pid, start_time)) = pause {
        let pause = super::record::Pause { pid, start_time };
        if super::pause::start_time(pid) == Some(start_time) {
            let state = if super::pause::alive(&pause) { "running" } else { "a zombie" };
            left.push(format!("pause process {pid} ({state})"));
        }
    }
    left
}
