//! Tests of the `Daemon` process fixture and `sweep_orphans`.

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use common::assert_gone;
use keel_testbed::loopback::free_local_addr;
use keel_testbed::process::{Daemon, OWNER_ENV, OWNER_START_ENV, Readiness, sweep_orphans};

fn sh(script: &str) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(script);
    cmd
}

/// Whether the daemon printed `line` as a line of its own: its log also holds the command line (the
/// header a start writes), where the words of an `echo` appear before the script has run at all.
fn printed(text: &str, line: &str) -> bool {
    text.lines().any(|l| l == line)
}

fn read_pid(path: &std::path::Path) -> Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return Ok(pid);
        }
        anyhow::ensure!(Instant::now() < deadline, "no pid in {}", path.display());
        sleep(Duration::from_millis(10));
    }
}

/// Waits up to 5 s for `child` to exit; `None` if it is still running.
fn wait_for(child: &mut std::process::Child) -> Result<Option<std::process::ExitStatus>> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        sleep(Duration::from_millis(10));
    }
}

#[test]
fn readiness_timeout_reports_the_log_and_reaps() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pid_file = dir.path().join("pid");
    let script = format!("echo $$ > {}; echo hello-from-slow-daemon; exec sleep 60", pid_file.display());
    let addr = free_local_addr()?;
    let error = Daemon::start("slow", sh(&script), Readiness::Tcp(addr), Duration::from_millis(300))
        .err()
        .context("a daemon that never listens must not be ready")?;
    let message = format!("{error:#}");
    assert!(message.contains("not ready after"), "{message}");
    assert!(message.contains("hello-from-slow-daemon"), "{message}");
    assert_gone(read_pid(&pid_file)?, "the daemon that was never ready");
    Ok(())
}

#[test]
fn crash_before_ready_reports_status_and_log() -> Result<()> {
    let mut cmd = sh("echo boom-on-stderr >&2; exit 3");
    cmd.env("UNRELATED", "1");
    let addr = free_local_addr()?;
    let error = Daemon::start("crasher", cmd, Readiness::Tcp(addr), Duration::from_secs(10))
        .err()
        .context("a crashing daemon must fail to start")?;
    let message = format!("{error:#}");
    assert!(message.contains("exited with exit status: 3 before it was ready"), "{message}");
    assert!(message.contains("boom-on-stderr"), "{message}");
    Ok(())
}

#[test]
fn drop_stops_and_reaps_the_group() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let bg_file = dir.path().join("bg");
    // "started" is printed before the pid file is written, which readiness waits for.
    let script = format!("sleep 60 & bg=$!; echo started; echo $bg > {}; wait", bg_file.display());
    let ready = Readiness::Command(sh(&format!("test -s {}", bg_file.display())));
    let daemon = Daemon::start("group", sh(&script), ready, Duration::from_secs(10))?;
    let pid = daemon.pid();
    let bg = read_pid(&bg_file)?;
    assert!(daemon.is_running());
    assert!(printed(&daemon.log(), "started"));
    let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
    let marker = format!("{OWNER_ENV}={}", std::process::id());
    assert!(environ.split(|&b| b == 0).any(|var| var == marker.as_bytes()), "no owner marker");
    drop(daemon);
    assert_gone(pid, "the dropped daemon");
    // Killed with the group, and reaped by this (subreaper) process rather than left a zombie.
    assert_gone(bg, "the daemon's background child");
    Ok(())
}

#[test]
fn kill_then_restart_reuses_command_and_readiness() -> Result<()> {
    let addr = free_local_addr()?;
    let script = format!("echo serving; exec busybox httpd -f -p {addr} -h /");
    let mut daemon = Daemon::start("nc", sh(&script), Readiness::Tcp(addr), Duration::from_secs(10))?;
    let first = daemon.pid();
    daemon.kill();
    assert!(!daemon.is_running());
    assert_gone(first, "the killed daemon");
    let status = daemon.stop()?;
    assert_eq!(status.signal(), Some(9), "{status}");
    daemon.restart()?;
    std::net::TcpStream::connect(addr).context("the restarted daemon listens again")?;
    let second = daemon.pid();
    assert_ne!(first, second);
    assert!(daemon.is_running());
    assert_eq!(daemon.log().matches("===== keel-testbed: starting nc").count(), 2);
    daemon.stop()?;
    assert_gone(second, "the restarted daemon");
    Ok(())
}

#[test]
fn a_failing_test_shows_the_log_of_its_daemons() -> Result<()> {
    const CHILD: &str = "KEEL_TESTBED_DAEMON_LOG_CHILD";
    // libtest names a test by its path in the binary, without the crate's name.
    const TEST: &str = concat!(module_path!(), "::a_failing_test_shows_the_log_of_its_daemons");
    let test = TEST.split_once("::").map_or(TEST, |(_, path)| path);
    if std::env::var_os(CHILD).is_some() {
        // The child run: a test that fails by returning an error while its daemon is alive.
        let daemon = Daemon::start(
            "talker",
            sh("echo words-of-the-daemon; exec sleep 60"),
            Readiness::None,
            Duration::from_secs(5),
        )?;
        while !printed(&daemon.log(), "words-of-the-daemon") {
            sleep(Duration::from_millis(10));
        }
        anyhow::bail!("simulated test failure");
    }
    // Run this test binary again on this test alone, as the failing child; read what it printed.
    let out = Command::new(std::env::current_exe()?)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the child test was meant to fail");
    assert!(stderr.contains("keel-testbed: daemon talker"), "{stderr}");
    assert!(printed(&stderr, "words-of-the-daemon"), "the daemon's log was not shown:\n{stderr}");
    Ok(())
}

#[test]
fn panicking_test_still_reaps_its_daemon() -> Result<()> {
    static PID: AtomicU32 = AtomicU32::new(0);
    let result = catch_unwind(AssertUnwindSafe(|| {
        let daemon = Daemon::start(
            "doomed",
            sh("echo last-words; exec sleep 60"),
            Readiness::None,
            Duration::from_secs(5),
        )
        .expect("sleep starts");
        PID.store(daemon.pid(), Ordering::SeqCst);
        while !printed(&daemon.log(), "last-words") {
            sleep(Duration::from_millis(10));
        }
        panic!("simulated test failure");
    }));
    assert!(result.is_err());
    let pid = PID.load(Ordering::SeqCst);
    assert_ne!(pid, 0);
    assert_gone(pid, "the daemon of a panicking test");
    Ok(())
}

#[test]
fn sweep_kills_orphans_of_dead_owners_only() -> Result<()> {
    let mut gone = Command::new("true").spawn()?;
    let dead_owner = gone.id();
    gone.wait()?;
    let spawn = |owner: String, start: Option<&str>| -> Result<std::process::Child> {
        let mut cmd = Command::new("sleep");
        cmd.arg("60").env(OWNER_ENV, owner).stdin(Stdio::null());
        if let Some(start) = start {
            cmd.env(OWNER_START_ENV, start);
        }
        Ok(cmd.spawn()?)
    };
    let me = std::process::id().to_string();
    let mut live_owner = Command::new("sleep").arg("60").stdin(Stdio::null()).spawn()?;
    let mut orphan = spawn(dead_owner.to_string(), None)?;
    // A live pid, but with another start time: the owner's pid was reused.
    let mut reused = spawn(live_owner.id().to_string(), Some("1"))?;
    let mut kept = spawn(me, None)?;
    let swept = sweep_orphans();
    let orphan_status = wait_for(&mut orphan)?;
    let reused_status = wait_for(&mut reused)?;
    let kept_alive = kept.try_wait()?.is_none();
    for child in [&mut kept, &mut live_owner, &mut orphan, &mut reused] {
        let _ = child.kill();
        child.wait()?;
    }
    // Another test process may sweep at the same time and kill the orphans first: assert the effect.
    eprintln!("this sweep signalled {swept} process(es)");
    assert_eq!(orphan_status.and_then(|s| s.signal()), Some(9), "orphan of a dead owner");
    assert_eq!(reused_status.and_then(|s| s.signal()), Some(9), "orphan of a reused owner pid");
    assert!(kept_alive, "sweep_orphans killed a process of a live owner");
    Ok(())
}

#[test]
fn stop_kills_descendants_that_left_the_group_and_cleared_their_environment() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pid_file = dir.path().join("escaped");
    // Its own session and no KEEL_TESTBED_* marker: what a container under a runtime's shim looks like.
    let script = format!("setsid env -i /bin/sleep 60 & echo $! > {}; exec sleep 60", pid_file.display());
    let mut daemon = Daemon::start("escaper", sh(&script), Readiness::None, Duration::from_secs(5))?;
    let escaped = read_pid(&pid_file)?;
    // setsid and env exec in turn: wait until the process is sleep, with env's cleared environment.
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(format!("/proc/{escaped}/comm"))?.trim() != "sleep" {
        anyhow::ensure!(Instant::now() < deadline, "pid {escaped} never became sleep");
        sleep(Duration::from_millis(5));
    }
    let environ = std::fs::read(format!("/proc/{escaped}/environ"))?;
    assert!(!String::from_utf8_lossy(&environ).contains("KEEL_TESTBED"), "the marker was not cleared");
    daemon.stop()?;
    assert_gone(escaped, "a descendant in another session without the marker");
    Ok(())
}

#[test]
fn stop_kills_descendants_outside_the_group() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let pid_file = dir.path().join("escaped");
    // `setsid` moves the grandchild into its own session and group, out of reach of killpg.
    let script = format!("setsid sleep 60 & echo $! > {}; exec sleep 60", pid_file.display());
    let mut daemon = Daemon::start("escaper", sh(&script), Readiness::None, Duration::from_secs(5))?;
    let escaped = read_pid(&pid_file)?;
    let leader = daemon.pid();
    daemon.stop()?;
    assert_gone(leader, "the daemon");
    assert_gone(escaped, "a descendant in another session");
    Ok(())
}

#[test]
fn stop_falls_back_to_sigkill() -> Result<()> {
    let ready = Readiness::Command(sh("true"));
    let mut daemon = Daemon::start(
        "stubborn",
        sh("trap '' TERM; echo ignoring; while :; do sleep 1; done"),
        ready,
        Duration::from_secs(5),
    )?;
    // Only once the shell has printed this has it set the trap.
    while !printed(&daemon.log(), "ignoring") {
        sleep(Duration::from_millis(10));
    }
    daemon.set_stop_grace(Duration::from_millis(300));
    let pid = daemon.pid();
    let status = daemon.stop()?;
    // Killed by SIGKILL after the grace, since it ignored SIGTERM.
    assert_eq!(status.signal(), Some(9), "{status}");
    assert_gone(pid, "the daemon that ignored SIGTERM");
    Ok(())
}

#[test]
fn unix_socket_readiness() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("d.sock");
    let script = format!(
        "import socket, time\ns = socket.socket(socket.AF_UNIX)\ntime.sleep(0.2)\ns.bind({:?})\ns.listen()\ntime.sleep(60)",
        socket.display().to_string()
    );
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(script);
    let daemon = Daemon::start("unix", cmd, Readiness::UnixSocket(socket.clone()), Duration::from_secs(10))?;
    std::os::unix::net::UnixStream::connect(&socket)?;
    let pid = daemon.pid();
    drop(daemon);
    assert_gone(pid, "the unix socket daemon");
    Ok(())
}
