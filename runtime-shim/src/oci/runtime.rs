//! The driver of an OCI runtime binary (runc by default; crun is supported): `create`, `start`,
//! `state`, `kill`, `delete`, `exec` and `update`, each run with `--root DIR/runtime/<handler>`.
//!
//! Errors carry the runtime's own message: every invocation writes its log as JSON (`--log FILE
//! --log-format json`, which runc and crun both support) into a file of its own, and the error-level
//! messages of that log (or else the runtime's stderr) become the error's text.
//!
//! crun 1.8 refuses a hybrid cgroup layout (v1 controllers plus a cgroup2 mount at
//! `/sys/fs/cgroup/unified`). Every crun invocation therefore runs in a mount namespace of its own
//! in which `/sys/fs/cgroup/unified` is unmounted, so crun sees a plain v1 layout: only the cgroup
//! tree there is a slave of the host's (the unmount must not reach the host); every other mount
//! keeps the host's propagation, so the containers crun creates see and make mount events as
//! runc's do (critest's rshared case).

use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

/// Which OCI runtime a binary is, by its file name (for the workarounds one of them needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// runc, or any runtime that needs nothing special.
    Runc,
    /// crun: run in a private mount namespace without the cgroup2 mount of a hybrid layout.
    Crun,
}

/// An OCI runtime binary and the state directory (`--root`) it keeps its containers in.
#[derive(Debug, Clone)]
pub struct OciRuntime {
    binary: PathBuf,
    root: PathBuf,
    logs: PathBuf,
    flavor: Flavor,
}

/// A runtime invocation that failed.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The binary could not be started (or its log read).
    #[error("running {binary}: {source}")]
    Io {
        /// The runtime binary.
        binary: String,
        /// Why.
        source: io::Error,
    },
    /// The runtime ran and reported an error.
    #[error("{binary} {command}: {message}")]
    Failed {
        /// The runtime binary.
        binary: String,
        /// The subcommand (`create`, `start`, ...).
        command: String,
        /// The runtime's error messages.
        message: String,
    },
}

impl RuntimeError {
    /// Whether the runtime said the container does not exist.
    pub fn is_not_found(&self) -> bool {
        match self {
            RuntimeError::Failed { message, .. } => {
                message.contains("does not exist") || message.contains("not exist")
            }
            RuntimeError::Io { .. } => false,
        }
    }
}

/// `<runtime> state ID`, as runc and crun print it.
#[derive(Debug, Clone, Deserialize)]
pub struct State {
    /// The container id.
    pub id: String,
    /// The init process's pid (0 once stopped, for some runtimes).
    #[serde(default)]
    pub pid: i32,
    /// `creating`, `created`, `running`, `paused` or `stopped`.
    pub status: String,
    /// The bundle directory.
    #[serde(default)]
    pub bundle: PathBuf,
}

/// Options of `<runtime> exec`.
#[derive(Debug, Clone)]
pub struct ExecOptions<'a> {
    /// The process.json describing the process.
    pub process: &'a Path,
    /// Where the runtime writes the exec process's pid.
    pub pid_file: Option<&'a Path>,
    /// A unix socket that receives the pty master (a tty exec).
    pub console_socket: Option<&'a Path>,
    /// Return once the process started (`--detach`).
    pub detach: bool,
}

static LOG_COUNTER: AtomicU64 = AtomicU64::new(0);

/// What the container module asks of an OCI runtime, as a seam (youki's `Syscall`): [`OciRuntime`]
/// runs the binary; tests put a recording fake in its place (`oci::fake`), so the lifecycle logic
/// above it is tested without runc and without root. `create` is not here: the container's monitor,
/// a process of its own, runs it (see [`crate::monitor`]).
pub trait Runtime: Send + Sync + std::fmt::Debug {
    /// The runtime binary (handed to the monitor, and recorded with the container).
    fn binary(&self) -> &Path;

    /// The runtime's `--root` (handed to the monitor).
    fn root(&self) -> &Path;

    /// Which runtime this is (a terminal exec differs between runc and crun).
    fn flavor(&self) -> Flavor;

    /// `<runtime> start ID`.
    fn start(&self, id: &str) -> Result<(), RuntimeError>;

    /// `<runtime> kill [--all] ID SIGNAL`.
    fn kill(&self, id: &str, signal: i32, all: bool) -> Result<(), RuntimeError>;

    /// `<runtime> delete [--force] ID`; a container the runtime does not know is already deleted.
    fn delete(&self, id: &str, force: bool) -> Result<(), RuntimeError>;

    /// `<runtime> update --resources FILE ID`.
    fn update(&self, id: &str, resources: &oci_spec::runtime::LinuxResources) -> Result<(), RuntimeError>;

    /// The command of `<runtime> exec` (spawned by the caller with its own stdio), and the log file it
    /// writes (the caller removes it).
    fn exec_command(&self, id: &str, options: &ExecOptions<'_>) -> (Command, PathBuf);
}

/// Makes the [`Runtime`] of a binary keeping its state under a root directory (created if missing).
pub type RuntimeFactory = Arc<dyn Fn(&Path, &Path) -> io::Result<Arc<dyn Runtime>> + Send + Sync>;

/// The [`RuntimeFactory`] of the real binaries: [`OciRuntime::new`].
pub fn oci_runtimes() -> RuntimeFactory {
    Arc::new(|binary, root| Ok(Arc::new(OciRuntime::new(binary, root)?) as Arc<dyn Runtime>))
}

impl Runtime for OciRuntime {
    fn binary(&self) -> &Path {
        OciRuntime::binary(self)
    }

    fn root(&self) -> &Path {
        OciRuntime::root(self)
    }

    fn flavor(&self) -> Flavor {
        OciRuntime::flavor(self)
    }

    fn start(&self, id: &str) -> Result<(), RuntimeError> {
        OciRuntime::start(self, id)
    }

    fn kill(&self, id: &str, signal: i32, all: bool) -> Result<(), RuntimeError> {
        OciRuntime::kill(self, id, signal, all)
    }

    fn delete(&self, id: &str, force: bool) -> Result<(), RuntimeError> {
        OciRuntime::delete(self, id, force)
    }

    fn update(&self, id: &str, resources: &oci_spec::runtime::LinuxResources) -> Result<(), RuntimeError> {
        OciRuntime::update(self, id, resources)
    }

    fn exec_command(&self, id: &str, options: &ExecOptions<'_>) -> (Command, PathBuf) {
        OciRuntime::exec_command(self, id, options)
    }
}

impl OciRuntime {
    /// A driver of `binary` keeping its state under `root` (created if missing, with a sibling
    /// `<root>.logs` directory for the invocations' logs).
    pub fn new(binary: &Path, root: &Path) -> io::Result<OciRuntime> {
        let name = binary.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        let flavor = if name.contains("crun") { Flavor::Crun } else { Flavor::Runc };
        let mut logs = root.as_os_str().to_owned();
        logs.push(".logs");
        let logs = PathBuf::from(logs);
        std::fs::create_dir_all(root)?;
        std::fs::create_dir_all(&logs)?;
        Ok(OciRuntime { binary: binary.to_owned(), root: root.to_owned(), logs, flavor })
    }

    /// The runtime binary.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The runtime's `--root`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Which runtime this is.
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    /// A command running `<runtime> --root R --log L --log-format json ARGS...` (in crun's private mount
    /// namespace for crun), and the log file it writes. The caller removes the log when done
    /// (see [`OciRuntime::finish`]).
    pub fn command<S: AsRef<OsStr>>(&self, args: &[S]) -> (Command, PathBuf) {
        let n = LOG_COUNTER.fetch_add(1, Ordering::Relaxed);
        let log = self.logs.join(format!("{}-{n}.json", std::process::id()));
        let mut command = Command::new(&self.binary);
        command.arg("--root").arg(&self.root).arg("--log").arg(&log).arg("--log-format").arg("json");
        command.args(args);
        if self.flavor == Flavor::Crun {
            private_cgroup_v1_view(&mut command);
        }
        (command, log)
    }

    /// Interprets a finished invocation: Ok with its output when it succeeded, else the runtime's
    /// messages. Removes the log file either way.
    pub fn finish(&self, subcommand: &str, log: &Path, output: Output) -> Result<Output, RuntimeError> {
        let logged = std::fs::read_to_string(log).unwrap_or_default();
        let _ = std::fs::remove_file(log);
        if output.status.success() {
            return Ok(output);
        }
        let mut message = log_errors(&logged);
        if message.is_empty() {
            message = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        }
        if message.is_empty() {
            message = format!("exited with {}", output.status);
        }
        Err(RuntimeError::Failed { binary: self.name(), command: subcommand.to_owned(), message })
    }

    fn name(&self) -> String {
        self.binary.display().to_string()
    }

    fn io_error(&self, source: io::Error) -> RuntimeError {
        RuntimeError::Io { binary: self.name(), source }
    }

    /// Runs `<runtime> ARGS` with stdin from /dev/null, capturing its output.
    fn run<S: AsRef<OsStr>>(&self, subcommand: &str, args: &[S]) -> Result<Output, RuntimeError> {
        let mut all: Vec<OsString> = vec![subcommand.into()];
        all.extend(args.iter().map(|arg| arg.as_ref().to_owned()));
        let (mut command, log) = self.command(&all);
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let output = command.output().map_err(|e| self.io_error(e));
        match output {
            Ok(output) => self.finish(subcommand, &log, output),
            Err(e) => {
                let _ = std::fs::remove_file(&log);
                Err(e)
            }
        }
    }

    /// `<runtime> create --bundle B --pid-file P [--console-socket S] ID` with the given stdio (which
    /// becomes the container's stdio unless it has a terminal).
    pub fn create(
        &self,
        id: &str,
        bundle: &Path,
        pid_file: &Path,
        console_socket: Option<&Path>,
        stdio: [Stdio; 3],
    ) -> Result<(), RuntimeError> {
        let mut args: Vec<OsString> = vec!["create".into(), "--bundle".into(), bundle.into()];
        args.extend(["--pid-file".into(), pid_file.into()]);
        if let Some(socket) = console_socket {
            args.extend(["--console-socket".into(), socket.into()]);
        }
        args.push(id.into());
        let (mut command, log) = self.command(&args);
        let [stdin, stdout, stderr] = stdio;
        command.stdin(stdin).stdout(stdout).stderr(stderr);
        let status = command.status().map_err(|e| self.io_error(e));
        let status = match status {
            Ok(status) => status,
            Err(e) => {
                let _ = std::fs::remove_file(&log);
                return Err(e);
            }
        };
        let output = Output { status, stdout: Vec::new(), stderr: Vec::new() };
        self.finish("create", &log, output).map(|_| ())
    }

    /// `<runtime> start ID`.
    pub fn start(&self, id: &str) -> Result<(), RuntimeError> {
        self.run("start", &[id]).map(|_| ())
    }

    /// `<runtime> state ID`.
    pub fn state(&self, id: &str) -> Result<State, RuntimeError> {
        let output = self.run("state", &[id])?;
        serde_json::from_slice(&output.stdout).map_err(|e| RuntimeError::Failed {
            binary: self.name(),
            command: "state".into(),
            message: format!("parsing its output: {e}"),
        })
    }

    /// `<runtime> kill [--all] ID SIGNAL`.
    pub fn kill(&self, id: &str, signal: i32, all: bool) -> Result<(), RuntimeError> {
        let signal = signal.to_string();
        if all {
            self.run("kill", &["--all", id, &signal]).map(|_| ())
        } else {
            self.run("kill", &[id, &signal]).map(|_| ())
        }
    }

    /// `<runtime> delete [--force] ID`; a container the runtime does not know is already deleted.
    pub fn delete(&self, id: &str, force: bool) -> Result<(), RuntimeError> {
        let result = if force { self.run("delete", &["--force", id]) } else { self.run("delete", &[id]) };
        match result {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `<runtime> update --resources FILE ID`, the resources written as JSON beside the runtime's logs.
    pub fn update(
        &self,
        id: &str,
        resources: &oci_spec::runtime::LinuxResources,
    ) -> Result<(), RuntimeError> {
        let n = LOG_COUNTER.fetch_add(1, Ordering::Relaxed);
        let file = self.logs.join(format!("{}-{n}-resources.json", std::process::id()));
        let json = serde_json::to_vec(resources).map_err(|e| self.io_error(io::Error::other(e)))?;
        std::fs::write(&file, json).map_err(|e| self.io_error(e))?;
        let result = self.run("update", &[OsStr::new("--resources"), file.as_os_str(), OsStr::new(id)]);
        let _ = std::fs::remove_file(&file);
        result.map(|_| ())
    }

    /// The command of `<runtime> exec` (to be spawned by the caller with its own stdio), and its log.
    pub fn exec_command(&self, id: &str, options: &ExecOptions<'_>) -> (Command, PathBuf) {
        let mut args: Vec<OsString> = vec!["exec".into(), "--process".into(), options.process.into()];
        if let Some(pid_file) = options.pid_file {
            args.extend(["--pid-file".into(), pid_file.into()]);
        }
        if let Some(socket) = options.console_socket {
            args.extend(["--tty".into(), "--console-socket".into(), socket.into()]);
        }
        if options.detach {
            args.push("--detach".into());
        }
        args.push(id.into());
        self.command(&args)
    }
}

/// The error-level messages of a runtime's JSON log (one JSON object a line), joined by "; "; lines
/// that are not JSON are taken as they are.
pub fn log_errors(log: &str) -> String {
    let mut messages = Vec::new();
    for line in log.lines().map(str::trim).filter(|line| !line.is_empty()) {
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(entry) => {
                let level = entry["level"].as_str().unwrap_or_default();
                if matches!(level, "error" | "fatal" | "panic")
                    && let Some(msg) = entry["msg"].as_str()
                {
                    messages.push(msg.to_owned());
                }
            }
            Err(_) => messages.push(line.to_owned()),
        }
    }
    messages.join("; ")
}

/// Makes `command` run in a mount namespace of its own without the cgroup2 mount of a hybrid layout,
/// which is what crun needs on such a host.
fn private_cgroup_v1_view(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec; it makes only raw syscalls (no allocation, no
    // locks) on static C strings.
    unsafe {
        command.pre_exec(|| {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                return Err(io::Error::last_os_error());
            }
            // Only the cgroup tree becomes a slave of the host's, so the unmount below stays in this
            // namespace; every other mount keeps its propagation, so a container's rshared
            // (Bidirectional) mounts still reach the host as they do under runc.
            let none = std::ptr::null();
            let cgroup = c"/sys/fs/cgroup".as_ptr();
            if libc::mount(c"none".as_ptr(), cgroup, none, libc::MS_REC | libc::MS_SLAVE, none.cast()) == 0 {
                // Absent on a pure v1 or a pure v2 host: nothing to hide then.
                libc::umount2(c"/sys/fs/cgroup/unified".as_ptr(), libc::MNT_DETACH);
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_errors_keeps_error_levels_and_plain_lines() {
        let log = concat!(
            r#"{"level":"info","msg":"starting","time":"x"}"#,
            "\n",
            r#"{"level":"error","msg":"container_linux.go: no such file","time":"x"}"#,
            "\n\nplain text\n"
        );
        assert_eq!(log_errors(log), "container_linux.go: no such file; plain text");
    }
}
