//! The pause process, needed only by a pod that shares one PID namespace between its containers
//! (`namespace_options.pid == POD`): a PID namespace lives only as long as a process in it, and its
//! PID 1 must reap the orphans of the pod.
//!
//! `keel-shim pause` (a hidden subcommand of the same binary) blocks every signal and waits for
//! SIGTERM/SIGINT (exit) and SIGCHLD (reap every exited child); others stay pending, i.e. ignored.
//! keel-shim starts it from a dedicated thread that unshared its PID namespace for children
//! (`unshare(CLONE_NEWPID)` is per thread), so the child is PID 1 of a new PID namespace; between fork
//! and exec it joins the pod's net, ipc and uts namespaces and calls setsid, so it outlives keel-shim.
//! Its pid and start time are recorded; stopping it goes through a pidfd (no pid-reuse race).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use nix::sched::CloneFlags;
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::wait::{WaitPidFlag, WaitStatus};

use crate::oci::spec::PodNamespaces;
use crate::sandbox::record::Pause;

/// The hidden subcommand that runs the pause process.
pub const SUBCOMMAND: &str = "pause";

/// How long a pause process gets to exit after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);

/// The pause process's main: returns only on SIGTERM or SIGINT.
pub fn run() -> ExitCode {
    let all = SigSet::all();
    if nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&all), None).is_err() {
        return ExitCode::FAILURE;
    }
    let _ = std::env::set_current_dir("/");
    let mut wanted = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGCHLD] {
        wanted.add(signal);
    }
    loop {
        match wanted.wait() {
            Ok(Signal::SIGCHLD) => reap_all(),
            Ok(Signal::SIGTERM | Signal::SIGINT) => return ExitCode::SUCCESS,
            _ => {}
        }
    }
}

fn reap_all() {
    loop {
        match nix::sys::wait::waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Starts the pause process in the pod's `namespaces` (net, ipc, uts as recorded; the host's where
/// `None`), PID 1 of a new PID namespace.
pub fn start(namespaces: &PodNamespaces) -> io::Result<Pause> {
    // keel-shim's own binary, even if the file was replaced since (an upgrade): exec follows the
    // open executable, not the path.
    let exe = std::path::Path::new("/proc/self/exe");
    let mut joins: Vec<(OwnedFd, libc::c_int)> = Vec::new();
    for (path, flag) in [
        (&namespaces.net, libc::CLONE_NEWNET),
        (&namespaces.ipc, libc::CLONE_NEWIPC),
        (&namespaces.uts, libc::CLONE_NEWUTS),
    ] {
        if let Some(path) = path {
            let file = std::fs::File::open(path)
                .map_err(|e| io::Error::new(e.kind(), format!("opening {}: {e}", path.display())))?;
            joins.push((OwnedFd::from(file), flag));
        }
    }
    let pid = std::thread::scope(|scope| {
        scope
            .spawn(|| -> io::Result<u32> {
                nix::sched::unshare(CloneFlags::CLONE_NEWPID)
                    .map_err(|e| io::Error::other(format!("unshare(CLONE_NEWPID): {e}")))?;
                let raw: Vec<(libc::c_int, libc::c_int)> =
                    joins.iter().map(|(fd, flag)| (fd.as_raw_fd(), *flag)).collect();
                let mut command = Command::new(exe);
                command
                    .arg0("keel-shim")
                    .arg(SUBCOMMAND)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                // SAFETY: between fork and exec the hook calls only setns(2) and setsid(2), both
                // async-signal-safe; the descriptors stay open (owned by `joins`) until spawn returns.
                unsafe {
                    command.pre_exec(move || {
                        for (fd, flag) in &raw {
                            if libc::setns(*fd, *flag) != 0 {
                                return Err(io::Error::last_os_error());
                            }
                        }
                        if libc::setsid() < 0 {
                            return Err(io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
                let child = command
                    .spawn()
                    .map_err(|e| io::Error::new(e.kind(), format!("starting the pause process: {e}")))?;
                // The child is reaped when it is stopped (see `stop`); dropping the handle neither
                // kills nor waits.
                Ok(child.id())
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the pause-starting thread panicked")))
    })?;
    let pid = i32::try_from(pid).map_err(io::Error::other)?;
    let Some(start_time) = start_time(pid) else {
        return Err(io::Error::other(format!("the pause process {pid} exited right away")));
    };
    Ok(Pause { pid, start_time })
}

/// Field 22 (start time) of `/proc/<pid>/stat`, and whether the process is a zombie.
fn stat(pid: i32) -> Option<(u64, bool)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let zombie = fields.first().is_some_and(|state| *state == "Z" || *state == "X");
    Some((fields.get(19)?.parse().ok()?, zombie))
}

/// The start time of process `pid`, `None` if there is none.
pub fn start_time(pid: i32) -> Option<u64> {
    stat(pid).map(|(start, _)| start)
}

/// Whether the recorded pause process still runs (the same process, not a zombie).
pub fn alive(pause: &Pause) -> bool {
    stat(pause.pid).is_some_and(|(start, zombie)| start == pause.start_time && !zombie)
}

fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new descriptor or -1.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    let raw = libc::c_int::try_from(raw).map_err(io::Error::other)?;
    // SAFETY: the descriptor was just returned to us and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn pidfd_signal(fd: &OwnedFd, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: pidfd_send_signal(2) with a valid pidfd, no siginfo and no flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Waits until the pidfd's process has exited (readable), for at most `timeout`.
fn wait_exit(fd: &OwnedFd, timeout: Duration) -> io::Result<bool> {
    let mut pollfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let millis = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    loop {
        // SAFETY: poll(2) on one pollfd we own.
        let rc = unsafe { libc::poll(&mut pollfd, 1, millis) };
        if rc >= 0 {
            return Ok(rc > 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Stops the recorded pause process (SIGTERM, [`STOP_GRACE`], SIGKILL), waits until it is gone and
/// reaps it when it is keel-shim's child. A process that is already gone (or whose pid now belongs to
/// another process) is not an error. Blocking: call it off the async runtime.
pub fn stop(pause: &Pause) -> io::Result<()> {
    let fd = match pidfd_open(pause.pid) {
        Ok(fd) => fd,
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(()),
        Err(e) => return Err(e),
    };
    // Checked after the pidfd is open: from here on the pid cannot be reused under us.
    if start_time(pause.pid) != Some(pause.start_time) {
        return Ok(());
    }
    let _ = pidfd_signal(&fd, libc::SIGTERM);
    if !wait_exit(&fd, STOP_GRACE)? {
        let _ = pidfd_signal(&fd, libc::SIGKILL);
        if !wait_exit(&fd, STOP_GRACE)? {
            return Err(io::Error::other(format!("the pause process {} survived SIGKILL", pause.pid)));
        }
    }
    // Reap it if it is our child (ECHILD otherwise: its parent, or PID 1, reaps it).
    // SAFETY: waitid(2) with P_PIDFD on our pidfd and a zeroed siginfo we own.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(libc::P_PIDFD, fd.as_raw_fd() as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG);
    }
    Ok(())
}
