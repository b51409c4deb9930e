//! A recording [`Runtime`] for unit tests (youki's `TestHelperSyscall`): it records every call, answers
//! what the test scripted (success unless told otherwise), and runs a test's shell script where
//! `<runtime> exec` would run a process in the container. No runc, no root.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use oci_spec::runtime::LinuxResources;

use super::runtime::{ExecOptions, Flavor, Runtime, RuntimeError, RuntimeFactory};

/// A call the fake received, with its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `start ID`.
    Start {
        /// The container.
        id: String,
    },
    /// `kill [--all] ID SIGNAL`.
    Kill {
        /// The container.
        id: String,
        /// The signal.
        signal: i32,
        /// `--all`: every process of the container's cgroup.
        all: bool,
    },
    /// `delete [--force] ID`.
    Delete {
        /// The container.
        id: String,
        /// `--force`.
        force: bool,
    },
    /// `update --resources FILE ID`.
    Update {
        /// The container.
        id: String,
        /// The resources (boxed: the largest of these arguments).
        resources: Box<LinuxResources>,
    },
    /// `exec --process FILE ID`.
    Exec {
        /// The container.
        id: String,
        /// The process.json.
        process: PathBuf,
        /// With a console socket (a terminal).
        tty: bool,
    },
}

/// Which operation a scripted failure is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// [`Runtime::start`].
    Start,
    /// [`Runtime::kill`].
    Kill,
    /// [`Runtime::delete`].
    Delete,
    /// [`Runtime::update`].
    Update,
}

impl Op {
    fn subcommand(self) -> &'static str {
        match self {
            Op::Start => "start",
            Op::Kill => "kill",
            Op::Delete => "delete",
            Op::Update => "update",
        }
    }
}

/// What a test does when a call arrives (before it is recorded and answered): make the container's
/// processes die where the real runtime would, say.
pub type CallHook = Arc<dyn Fn(&Call) + Send + Sync>;

/// The fake's state, shared by every runtime its factory made.
#[derive(Default)]
pub struct RecordingRuntime {
    /// Every call, in order.
    calls: Mutex<Vec<Call>>,
    /// Scripted failures: the next call of the operation fails with the message.
    failures: Mutex<VecDeque<(Op, String)>>,
    /// Called on every call.
    hook: Mutex<Option<CallHook>>,
    /// The `sh -c` script an exec runs (`$PID_FILE` and `$LOG` name the pid file and the runtime's
    /// log, as `<runtime> exec` writes them).
    exec_script: Mutex<String>,
    /// What [`Runtime::flavor`] answers.
    crun: Mutex<bool>,
}

impl std::fmt::Debug for RecordingRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingRuntime").field("calls", &self.calls()).finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl RecordingRuntime {
    /// A fake whose calls all succeed and whose exec runs `true`.
    pub fn new() -> Arc<RecordingRuntime> {
        let fake = RecordingRuntime::default();
        *lock(&fake.exec_script) = "true".to_owned();
        Arc::new(fake)
    }

    /// A [`RuntimeFactory`] making runtimes of this fake (one per binary and root asked for, as
    /// `OciRuntime::new`; the root is created).
    pub fn factory(self: &Arc<Self>) -> RuntimeFactory {
        let shared = Arc::clone(self);
        Arc::new(move |binary: &Path, root: &Path| {
            std::fs::create_dir_all(root)?;
            Ok(Arc::new(FakeRuntime {
                shared: Arc::clone(&shared),
                binary: binary.to_owned(),
                root: root.to_owned(),
            }) as Arc<dyn Runtime>)
        })
    }

    /// The calls so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        lock(&self.calls).clone()
    }

    /// Makes the next call of `op` fail with `message` (the runtime's error text).
    pub fn fail_next(&self, op: Op, message: &str) {
        lock(&self.failures).push_back((op, message.to_owned()));
    }

    /// Calls `hook` on every call from now on.
    pub fn on_call(&self, hook: impl Fn(&Call) + Send + Sync + 'static) {
        *lock(&self.hook) = Some(Arc::new(hook));
    }

    /// Runs `script` (`sh -c`) for every exec from now on.
    pub fn set_exec_script(&self, script: &str) {
        script.clone_into(&mut lock(&self.exec_script));
    }

    /// Answers [`Flavor::Crun`] (else [`Flavor::Runc`]).
    pub fn set_crun(&self, crun: bool) {
        *lock(&self.crun) = crun;
    }

    /// Runs the hook, records `call`, and answers the failure scripted for `op`, if any.
    fn answer(&self, binary: &Path, op: Option<Op>, call: Call) -> Result<(), RuntimeError> {
        let hook = lock(&self.hook).clone();
        if let Some(hook) = hook {
            hook(&call);
        }
        lock(&self.calls).push(call);
        let Some(op) = op else { return Ok(()) };
        let mut failures = lock(&self.failures);
        let Some(at) = failures.iter().position(|(failing, _)| *failing == op) else { return Ok(()) };
        let (_, message) = failures.remove(at).unwrap_or((op, String::new()));
        Err(RuntimeError::Failed {
            binary: binary.display().to_string(),
            command: op.subcommand().to_owned(),
            message,
        })
    }
}

/// One runtime made by [`RecordingRuntime::factory`].
#[derive(Debug)]
struct FakeRuntime {
    shared: Arc<RecordingRuntime>,
    binary: PathBuf,
    root: PathBuf,
}

static EXEC_LOGS: AtomicU64 = AtomicU64::new(0);

impl Runtime for FakeRuntime {
    fn binary(&self) -> &Path {
        &self.binary
    }

    fn root(&self) -> &Path {
        &self.root
    }

    fn flavor(&self) -> Flavor {
        if *lock(&self.shared.crun) { Flavor::Crun } else { Flavor::Runc }
    }

    fn start(&self, id: &str) -> Result<(), RuntimeError> {
        self.shared.answer(&self.binary, Some(Op::Start), Call::Start { id: id.to_owned() })
    }

    fn kill(&self, id: &str, signal: i32, all: bool) -> Result<(), RuntimeError> {
        self.shared.answer(&self.binary, Some(Op::Kill), Call::Kill { id: id.to_owned(), signal, all })
    }

    fn delete(&self, id: &str, force: bool) -> Result<(), RuntimeError> {
        self.shared.answer(&self.binary, Some(Op::Delete), Call::Delete { id: id.to_owned(), force })
    }

    fn update(&self, id: &str, resources: &LinuxResources) -> Result<(), RuntimeError> {
        let call = Call::Update { id: id.to_owned(), resources: Box::new(resources.clone()) };
        self.shared.answer(&self.binary, Some(Op::Update), call)
    }

    fn exec_command(&self, id: &str, options: &ExecOptions<'_>) -> (Command, PathBuf) {
        let call = Call::Exec {
            id: id.to_owned(),
            process: options.process.to_owned(),
            tty: options.console_socket.is_some(),
        };
        // An exec is not answered with an error: its process runs, or fails, as the script says.
        let _ = self.shared.answer(&self.binary, None, call);
        let n = EXEC_LOGS.fetch_add(1, Ordering::Relaxed);
        let log = self.root.join(format!("exec-{}-{n}.log", std::process::id()));
        let mut command = Command::new("/bin/sh");
        command.arg("-c").arg(lock(&self.shared.exec_script).as_str()).env("LOG", &log);
        if let Some(pid_file) = options.pid_file {
            command.env("PID_FILE", pid_file);
        }
        (command, log)
    }
}

/// Whether `pid` names a live process (or a zombie not yet reaped).
pub fn alive(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok()
}
