//! [`Daemon`]: a long-running child process that a test owns, logs to a file, waits for and always reaps.
//!
//! Every daemon runs in its own process group and carries `KEEL_TESTBED_OWNER=<pid of the test process>`
//! (and `KEEL_TESTBED_OWNER_START=<its start time>`) in its environment, so [`sweep_orphans`] can kill
//! what a crashed test run left behind, and `KEEL_TESTBED_DAEMON=<marker>`, so stopping a daemon also
//! kills what it forked into other process groups (e.g. containerd shims). The first daemon makes the test
//! process a child subreaper, so such orphans are reaped here instead of lingering as zombies under PID 1.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

pub use crate::orphans::{DAEMON_ENV, OWNER_ENV, OWNER_START_ENV, sweep_orphans};

/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(20);
/// How long [`Daemon::stop`] waits after SIGTERM before it sends SIGKILL, unless changed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How many log lines an error or a panicking test shows.
const TAIL_LINES: usize = 200;

/// When a started daemon counts as ready.
#[derive(Debug)]
pub enum Readiness {
    /// A TCP connect to this address succeeds.
    Tcp(SocketAddr),
    /// `GET path` on this address answers 200.
    Http { addr: SocketAddr, path: String },
    /// A connect to this unix socket succeeds.
    UnixSocket(PathBuf),
    /// This command exits 0 (each attempt is bounded by the remaining time, then killed and reaped).
    Command(Command),
    /// Ready as soon as it is spawned.
    None,
    /// The inner probe, made from inside a network namespace (for a daemon started in a test host:
    /// its addresses are reachable only from there).
    InNetNs(crate::netns::NetNsFd, Box<Readiness>),
}

/// A long-running process fixture; dropping it stops and reaps the process.
#[derive(Debug)]
pub struct Daemon {
    name: String,
    cmd: Command,
    ready: Readiness,
    timeout: Duration,
    stop_grace: Duration,
    child: Child,
    /// Value of `KEEL_TESTBED_DAEMON` for this daemon and its descendants.
    marker: String,
    /// `Some` once the current child has been reaped.
    status: Option<ExitStatus>,
    log_path: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl Daemon {
    /// Spawns `cmd` and waits until `ready` holds, for at most `timeout`.
    ///
    /// Fails, with the tail of the daemon's log, if it exits before it is ready or is not ready in time.
    pub fn start(name: &str, cmd: Command, ready: Readiness, timeout: Duration) -> Result<Daemon> {
        let mut daemon = Daemon::spawn(name, cmd, ready, timeout)?;
        daemon.wait_ready()?;
        Ok(daemon)
    }

    /// Spawns `cmd` without waiting for readiness; call [`Daemon::wait_ready`] next. Useful when several
    /// daemons only become ready together (an etcd cluster needs a quorum).
    ///
    /// `cmd` keeps whatever the caller set (args, env, `pre_exec` hooks such as a `setns`); this adds the
    /// marker variables and `process_group(0)`, sends stdout and stderr to the log and stdin to /dev/null.
    pub fn spawn(name: &str, mut cmd: Command, ready: Readiness, timeout: Duration) -> Result<Daemon> {
        let safe: String =
            name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        let log_dir = tempfile::Builder::new()
            .prefix(&format!("keel-{safe}-"))
            .tempdir()
            .with_context(|| format!("creating a log directory for daemon {name}"))?;
        let log_path = log_dir.path().join(format!("{safe}.log"));
        let (owner, owner_start) = crate::orphans::owner_marker();
        let marker = crate::orphans::new_daemon_marker();
        cmd.env(OWNER_ENV, &owner)
            .env(OWNER_START_ENV, &owner_start)
            .env(DAEMON_ENV, &marker)
            .process_group(0);
        crate::orphans::become_subreaper();
        let child = spawn_logged(name, &mut cmd, &log_path)?;
        Ok(Daemon {
            name: name.to_owned(),
            cmd,
            ready,
            timeout,
            stop_grace: STOP_GRACE,
            child,
            marker,
            status: None,
            log_path,
            _log_dir: log_dir,
        })
    }

    /// Polls readiness every ~20 ms until it holds, the process exits, or the timeout passes.
    pub fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(status) = self.exited()? {
                let descendants = self.descendants();
                let status = self.reap(descendants).unwrap_or(status);
                bail!(
                    "daemon {} exited with {status} before it was ready; last log lines of {}:\n{}",
                    self.name,
                    self.log_path.display(),
                    self.log_tail(TAIL_LINES)
                );
            }
            let Err(last_error) = check_ready(&mut self.ready, deadline) else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                bail!(
                    "daemon {} was not ready after {:?} (last check: {last_error:#}); last log lines of {}:\n{}",
                    self.name,
                    self.timeout,
                    self.log_path.display(),
                    self.log_tail(TAIL_LINES)
                );
            }
            sleep(POLL);
        }
    }

    /// The name given to [`Daemon::start`].
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pid of the current process (it changes on [`Daemon::restart`]).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log file that receives the daemon's stdout and stderr (appended to across restarts).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The whole log so far (lossy UTF-8; empty if it cannot be read).
    pub fn log(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|raw| String::from_utf8_lossy(&raw).into_owned())
            .unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_path, lines)
    }

    /// Whether the process has not exited yet.
    pub fn is_running(&self) -> bool {
        matches!(self.exited(), Ok(None))
    }

    /// Sends SIGKILL to the process group and reaps the process, like a crash.
    pub fn kill(&mut self) {
        if self.status.is_none() {
            let descendants = self.descendants();
            let _ = killpg(self.pgid(), Signal::SIGKILL);
            let _ = self.reap(descendants);
        }
    }

    /// Changes how long [`Daemon::stop`] (and drop) waits after SIGTERM before SIGKILL (10 s by default).
    pub fn set_stop_grace(&mut self, grace: Duration) {
        self.stop_grace = grace;
    }

    /// Sends SIGTERM to the process group, waits up to 10 s (see [`Daemon::set_stop_grace`]), then SIGKILL; the process is always reaped.
    /// Returns the exit status (again on later calls).
    pub fn stop(&mut self) -> Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let descendants = self.descendants();
        let _ = killpg(self.pgid(), Signal::SIGTERM);
        let deadline = Instant::now() + self.stop_grace;
        while Instant::now() < deadline {
            match self.exited() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) => sleep(POLL),
            }
        }
        self.reap(descendants)
    }

    /// Stops the process if it still runs, then starts the same command again and waits for readiness.
    pub fn restart(&mut self) -> Result<()> {
        self.stop().with_context(|| format!("stopping daemon {} before restarting it", self.name))?;
        self.child = spawn_logged(&self.name, &mut self.cmd, &self.log_path)?;
        self.status = None;
        self.wait_ready().with_context(|| format!("restarting daemon {}", self.name))
    }

    fn pgid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).unwrap_or(i32::MAX))
    }

    /// `Some(status)` if the child has exited (or was already reaped); it is left unreaped so that its pid
    /// (and so its process group id) cannot be reused while [`Daemon::reap`] cleans up the group.
    fn exited(&self) -> Result<Option<ExitStatus>> {
        if let Some(status) = self.status {
            return Ok(Some(status));
        }
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        match waitid(Id::Pid(self.pgid()), flags) {
            Ok(WaitStatus::StillAlive) => Ok(None),
            Ok(WaitStatus::Exited(_, code)) => {
                Ok(Some(std::os::unix::process::ExitStatusExt::from_raw(code << 8)))
            }
            Ok(WaitStatus::Signaled(_, signal, _)) => {
                Ok(Some(std::os::unix::process::ExitStatusExt::from_raw(signal as i32)))
            }
            Ok(other) => Err(anyhow!("unexpected wait status {other:?} of daemon {}", self.name)),
            Err(errno) => Err(anyhow!("waitid on daemon {} (pid {}): {errno}", self.name, self.pid())),
        }
    }

    /// Descendants of the daemon, taken before it is signalled so the orphans its death creates (which
    /// come to this subreaper process) can be reaped by [`Daemon::reap`].
    fn descendants(&self) -> Vec<(u32, u64)> {
        crate::orphans::snapshot_descendants(self.child.id())
    }

    /// SIGKILLs whatever is left in the process group, reaps the leader (blocking until it exits), then
    /// kills any other process that inherited the daemon's marker and reaps those and `descendants`.
    fn reap(&mut self, descendants: Vec<(u32, u64)>) -> Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let _ = killpg(self.pgid(), Signal::SIGKILL);
        let status = self.child.wait().with_context(|| format!("reaping daemon {}", self.name))?;
        self.status = Some(status);
        crate::orphans::kill_descendants(&self.marker, descendants);
        Ok(status)
    }
}

impl Drop for Daemon {
    /// Stops the daemon and prints the tail of its log. Test runners show a test's output only when it
    /// fails (by a panic or by returning an error), so the log is there exactly when it is needed.
    fn drop(&mut self) {
        let status = match self.stop() {
            Ok(status) => status.to_string(),
            Err(error) => format!("{error:#}"),
        };
        eprintln!(
            "===== keel-testbed: daemon {} (pid {}, {status}) — last {TAIL_LINES} lines of {} =====\n{}\n\
             ===== end of daemon {} log =====",
            self.name,
            self.child.id(),
            self.log_path.display(),
            self.log_tail(TAIL_LINES),
            self.name,
        );
    }
}

fn spawn_logged(name: &str, cmd: &mut Command, log_path: &Path) -> Result<Child> {
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .with_context(|| format!("opening log {} of daemon {name}", log_path.display()))?;
    writeln!(log, "===== keel-testbed: starting {name}: {cmd:?} =====")
        .with_context(|| format!("writing log {} of daemon {name}", log_path.display()))?;
    let stderr = log.try_clone().with_context(|| format!("duplicating the log handle of daemon {name}"))?;
    cmd.stdin(Stdio::null()).stdout(log).stderr(stderr);
    cmd.spawn().with_context(|| format!("spawning daemon {name}: {:?}", cmd.get_program()))
}

fn check_ready(ready: &mut Readiness, deadline: Instant) -> Result<()> {
    let attempt = deadline.saturating_duration_since(Instant::now()).clamp(POLL, Duration::from_secs(2));
    match ready {
        Readiness::None => Ok(()),
        Readiness::Tcp(addr) => {
            TcpStream::connect_timeout(addr, attempt).with_context(|| format!("connecting to {addr}"))?;
            Ok(())
        }
        Readiness::UnixSocket(path) => {
            UnixStream::connect(&*path).with_context(|| format!("connecting to {}", path.display()))?;
            Ok(())
        }
        Readiness::Http { addr, path } => {
            let response = crate::loopback::http_get(*addr, path, attempt)?;
            if response.status == 200 {
                Ok(())
            } else {
                Err(anyhow!("GET http://{addr}{path} answered {}: {}", response.status, response.body.trim()))
            }
        }
        Readiness::Command(cmd) => run_bounded(cmd, deadline),
        Readiness::InNetNs(ns, inner) => ns.run(|| check_ready(inner, deadline))?,
    }
}

/// Runs a readiness command to completion, killing and reaping it if it outlives `deadline`.
fn run_bounded(cmd: &mut Command, deadline: Instant) -> Result<()> {
    let (owner, owner_start) = crate::orphans::owner_marker();
    cmd.env(OWNER_ENV, owner).env(OWNER_START_ENV, owner_start);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning readiness check {:?}", cmd.get_program()))?;
    loop {
        if let Some(status) = child.try_wait().context("waiting for the readiness check")? {
            if status.success() {
                return Ok(());
            }
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                let _ = pipe.read_to_string(&mut stderr);
            }
            bail!("readiness check {:?} exited with {status}: {}", cmd.get_program(), stderr.trim());
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("readiness check {:?} did not finish in time", cmd.get_program());
        }
        sleep(Duration::from_millis(5));
    }
}

/// Runs a short-lived tool to completion and returns its stdout; fails with its stderr when it exits
/// non-zero (or naming the tool when it cannot be started).
pub fn run_tool(program: &str, args: &[&str]) -> Result<String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program} {} (is {program} installed?)", args.join(" ")))?;
    if !output.status.success() {
        bail!(
            "{program} {} exited with {}: {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The last `lines` lines of the file at `path` (reads at most its last 256 KiB).
pub fn tail(path: &Path, lines: usize) -> String {
    const MAX: u64 = 256 * 1024;
    let read = || -> std::io::Result<String> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(MAX)))?;
        let mut raw = Vec::new();
        file.read_to_end(&mut raw)?;
        Ok(String::from_utf8_lossy(&raw).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(error) => format!("(cannot read log {}: {error})", path.display()),
    }
}
