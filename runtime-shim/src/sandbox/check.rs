//! What a removed sandbox must not leave behind, as checks tests share: no mount under its
//! directory, no directory, no pause process ([`leftovers`]), and no process still inside its
//! namespaces ([`namespace_inodes`] before the removal, [`namespace_holders`] after).

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

/// The inodes of the namespaces sandbox `id` holds under `root` (take them before removing it, and
/// hold the namespace files open until [`namespace_holders`] has looked: the kernel soon reuses a
/// freed namespace's inode number for another namespace).
pub fn namespace_inodes(root: &Path, id: &str) -> Vec<u64> {
    use std::os::unix::fs::MetadataExt;
    let ns = root.join("sandboxes").join(id).join("ns");
    ["net", "ipc", "uts"]
        .iter()
        .filter_map(|kind| std::fs::metadata(ns.join(kind)).ok())
        .map(|m| m.ino())
        .collect()
}

/// Processes still inside any of the namespaces `inodes` (as `pid kind`); a namespace nobody is in
/// and nothing mounts is freed by the kernel.
pub fn namespace_holders(inodes: &[u64]) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let mut holders = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return holders };
    for entry in procs.filter_map(Result::ok) {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        for kind in ["net", "ipc", "uts"] {
            if let Ok(meta) = std::fs::metadata(format!("/proc/{pid}/ns/{kind}"))
                && inodes.contains(&meta.ino())
            {
                holders.push(format!("{pid} {kind}"));
            }
        }
    }
    holders
}
