//! Markers on fixture processes: [`sweep_orphans`] kills the ones whose owner died, and
//! [`kill_descendants`] kills (and reaps, where it can) whatever a daemon left behind.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// Environment variable naming the pid of the test process that owns a fixture process.
pub const OWNER_ENV: &str = "KEEL_TESTBED_OWNER";
/// Environment variable with the owner's start time (field 22 of `/proc/PID/stat`), so a reused pid does
/// not keep an orphan alive. Processes marked without it are judged by the pid alone.
pub const OWNER_START_ENV: &str = "KEEL_TESTBED_OWNER_START";

/// Environment variable naming one [`crate::process::Daemon`]; its descendants inherit it (unless they
/// clear their environment), so they can be found after the daemon is gone.
pub const DAEMON_ENV: &str = "KEEL_TESTBED_DAEMON";

/// A marker unique to one daemon of this process.
pub(crate) fn new_daemon_marker() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let (pid, start) = owner_marker();
    format!("{pid}-{start}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// Makes this process the reaper of its orphaned descendants (instead of PID 1, which never reaps here),
/// so [`kill_descendants`] can reap what a daemon forked. Done once; failures only leave zombies behind.
pub(crate) fn become_subreaper() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let _ = nix::sys::prctl::set_child_subreaper(true);
    });
}

/// Every descendant of `leader` (zombies too), with its start time. Taken before a daemon is killed, so
/// the processes it forked can be killed and reaped afterwards, also those that left its process group
/// and cleared their environment (a container under a runtime's shim does both).
pub(crate) fn snapshot_descendants(leader: u32) -> Vec<(u32, u64)> {
    let stats: Vec<(u32, Stat)> = all_pids().filter_map(|pid| Some((pid, proc_stat(pid)?))).collect();
    let mut found: Vec<(u32, u64)> = Vec::new();
    let mut frontier = vec![leader];
    while let Some(parent) = frontier.pop() {
        for (pid, stat) in &stats {
            if stat.ppid == parent && !found.iter().any(|(p, _)| p == pid) {
                found.push((*pid, stat.start_time));
                frontier.push(*pid);
            }
        }
    }
    found
}

/// SIGKILLs the `earlier` snapshot of descendants that are still the same processes, and every process
/// still carrying `KEEL_TESTBED_DAEMON=marker`; then for up to a second reaps those that are (or become,
/// as orphans) children of this process.
pub(crate) fn kill_descendants(marker: &str, earlier: Vec<(u32, u64)>) {
    let mut pending = Vec::new();
    for (pid, start) in earlier {
        if owner_alive(pid, Some(start)) {
            signal(pid, Signal::SIGKILL);
        }
        pending.push(pid);
    }
    for pid in marked(marker) {
        signal(pid, Signal::SIGKILL);
        if !pending.contains(&pid) {
            pending.push(pid);
        }
    }
    let deadline = Instant::now() + Duration::from_secs(1);
    while !pending.is_empty() && Instant::now() < deadline {
        pending.retain(|&pid| {
            let Ok(raw) = i32::try_from(pid) else { return false };
            match waitpid(Pid::from_raw(raw), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => true,
                Ok(_) => false,
                // Not (yet) our child: wait while it may still be handed to us (PID 1 never hands one back).
                Err(Errno::ECHILD) => proc_stat(pid).is_some_and(|stat| stat.ppid != 1),
                Err(_) => false,
            }
        });
        if !pending.is_empty() {
            sleep(Duration::from_millis(10));
        }
    }
}

fn marked(marker: &str) -> Vec<u32> {
    let wanted = format!("{DAEMON_ENV}={marker}");
    marked_processes(|environ| environ.split(|&b| b == 0).any(|var| var == wanted.as_bytes()))
}

fn all_pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()))
}

/// Pids (other than this process) whose environ block satisfies `matches`.
fn marked_processes(mut matches: impl FnMut(&[u8]) -> bool) -> Vec<u32> {
    let me = std::process::id();
    all_pids()
        .filter(|&pid| pid != me)
        // Unreadable (exited meanwhile) or empty (kernel threads, zombies): not marked.
        .filter(|&pid| std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| matches(&environ)))
        .collect()
}

fn signal(pid: u32, signal: Signal) -> bool {
    i32::try_from(pid).is_ok_and(|raw| kill(Pid::from_raw(raw), signal).is_ok())
}

/// `(pid, start time)` of this process, as set on every child a fixture spawns.
pub(crate) fn owner_marker() -> (String, String) {
    static MARKER: OnceLock<(String, String)> = OnceLock::new();
    MARKER
        .get_or_init(|| {
            let pid = std::process::id();
            let start = proc_stat(pid).map(|stat| stat.start_time.to_string()).unwrap_or_default();
            (pid.to_string(), start)
        })
        .clone()
}

/// Sends SIGKILL to every process marked with `KEEL_TESTBED_OWNER=<pid>` whose owner is no longer alive
/// (gone, a zombie, or its pid reused by a process that started at another time). Returns how many
/// processes it signalled. Processes of live owners, and this process itself, are never touched.
///
/// The killed processes are not this process's children, so it cannot reap them: whoever their parent is
/// (often PID 1 here) has to.
pub fn sweep_orphans() -> usize {
    let orphans = marked_processes(|environ| {
        parse_owner(environ).is_some_and(|(owner, owner_start)| !owner_alive(owner, owner_start))
    });
    orphans.into_iter().filter(|&pid| signal(pid, Signal::SIGKILL)).count()
}

/// The owner pid and (if present and parseable) owner start time in a NUL-separated environ block.
fn parse_owner(environ: &[u8]) -> Option<(u32, Option<u64>)> {
    let mut owner = None;
    let mut start = None;
    for var in environ.split(|&b| b == 0) {
        let var = String::from_utf8_lossy(var);
        if let Some(value) = var.strip_prefix("KEEL_TESTBED_OWNER=") {
            owner = value.trim().parse::<u32>().ok();
        } else if let Some(value) = var.strip_prefix("KEEL_TESTBED_OWNER_START=") {
            start = value.trim().parse::<u64>().ok();
        }
    }
    owner.map(|owner| (owner, start))
}

/// Whether `pid` is a live process (not a zombie) that started at `start`, when that is known.
///
/// Anything but a clear "gone" counts as alive, so a sweep errs on the side of sparing a process. This is
/// the one liveness rule every sweep of the testbed uses.
pub(crate) fn owner_alive(pid: u32, start: Option<u64>) -> bool {
    if pid == std::process::id() {
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
        Err(_) => true,
        Ok(text) => match parse_stat(&text) {
            None => true,
            Some(stat) if matches!(stat.state, 'Z' | 'X' | 'x') => false,
            Some(stat) => start.is_none_or(|start| start == stat.start_time),
        },
    }
}

struct Stat {
    state: char,
    ppid: u32,
    start_time: u64,
}

/// The start time of `pid` (field 22 of `/proc/PID/stat`, in clock ticks since boot).
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    proc_stat(pid).map(|stat| stat.start_time)
}

fn proc_stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Parses `state` (field 3) and `starttime` (field 22) of `/proc/PID/stat`; `comm` may hold spaces and
/// parentheses, so fields are counted after the last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let after_comm = &text[text.rfind(')')? + 1..];
    let mut fields = after_comm.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let start_time = fields.nth(17)?.parse().ok()?;
    Some(Stat { state, ppid, start_time })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_markers_and_stat() {
        assert_eq!(
            parse_owner(b"A=1\0KEEL_TESTBED_OWNER=42\0KEEL_TESTBED_OWNER_START=7\0"),
            Some((42, Some(7)))
        );
        assert_eq!(parse_owner(b"KEEL_TESTBED_OWNER=42"), Some((42, None)));
        assert_eq!(parse_owner(b"KEEL_TESTBED_OWNER=x\0B=2"), None);
        assert_eq!(parse_owner(b""), None);
        let stat = parse_stat("12 (a) b) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 999 20")
            .map(|s| (s.state, s.ppid, s.start_time));
        assert_eq!(stat, Some(('S', 1, 999)));
        assert!(parse_stat("garbage").is_none());
        assert!(owner_alive(std::process::id(), None));
    }
}
