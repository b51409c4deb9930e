//! ExecSync, Exec and Attach: processes run in a running container, and its stdio attached.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::{Containers, EXEC_COUNTER, Error, Record, Streams, exit_code, stream};
use crate::monitor;
use crate::oci::runtime::ExecOptions;

/// What an ExecSync leaves to undo however it ends: its files, and — when its client gave up on it
/// (the future dropped, as a kubelet cancelling a hanging postStart hook does) — the command
/// itself, killed by its pid so the runtime reaps it and exits. Killing the runtime instead would
/// orphan the command inside the container, and a container init waiting for it could not exit.
struct ExecCleanup {
    pid_file: PathBuf,
    files: [PathBuf; 2],
    /// The runtime's exec process: killed only when the command's pid was never written.
    runtime: Option<u32>,
    done: bool,
}

impl Drop for ExecCleanup {
    fn drop(&mut self) {
        if !self.done {
            let pid = std::fs::read_to_string(&self.pid_file).ok().and_then(|p| p.trim().parse::<i32>().ok());
            let target = pid.or_else(|| self.runtime.and_then(|p| i32::try_from(p).ok()));
            if let Some(pid) = target {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        let _ = std::fs::remove_file(&self.pid_file);
        for file in &self.files {
            let _ = std::fs::remove_file(file);
        }
    }
}

impl Containers {
    /// Writes a process.json for an exec of `cmd` (the container's process with other args).
    fn exec_process(&self, record: &Record, cmd: &[String], tty: bool) -> Result<PathBuf, Error> {
        if cmd.is_empty() {
            return Err(Error::EmptyCommand);
        }
        let dir = self.inner.dir.join(&record.id);
        let spec = oci_spec::runtime::Spec::load(dir.join("bundle/config.json"))
            .map_err(Error::spec("reading config.json"))?;
        let mut process = spec.process().clone().unwrap_or_default();
        process.set_args(Some(cmd.to_vec()));
        process.set_terminal(Some(tty));
        process.set_console_size(None);
        let n = EXEC_COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("exec-{}-{n}.json", std::process::id()));
        std::fs::write(&path, serde_json::to_vec(&process).map_err(Error::Encode)?)
            .map_err(Error::io("writing process.json"))?;
        Ok(path)
    }

    /// Runs `cmd` in a running container and returns its stdout, stderr and exit code. With a
    /// non-zero `timeout`, a command still running then is killed and the answer is DeadlineExceeded
    /// (as containerd answers; the kubelet reads it as a probe timeout).
    pub async fn exec_sync(
        &self,
        id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<(Vec<u8>, Vec<u8>, i32), Error> {
        let (_, record) = self.running(id)?;
        let runtime = self.runtime_of(&record)?;
        let process = self.exec_process(&record, cmd, false)?;
        let pid_file = process.with_extension("pid");
        let options =
            ExecOptions { process: &process, pid_file: Some(&pid_file), console_socket: None, detach: false };
        let (command, log) = runtime.exec_command(&record.id, &options);
        let mut command = tokio::process::Command::from(command);
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            // A call given up by its client (dropped) is ended by [`ExecCleanup`]: the command
            // killed, not the runtime (see there).
            .kill_on_drop(false);
        let mut cleanup = ExecCleanup {
            pid_file: pid_file.clone(),
            files: [log.clone(), process.clone()],
            runtime: None,
            done: false,
        };
        let result = async {
            let mut child = command.spawn().map_err(Error::io("running the runtime's exec"))?;
            cleanup.runtime = child.id();
            let mut stdout = child.stdout.take();
            let mut stderr = child.stderr.take();
            let run = async {
                let (mut out, mut err) = (Vec::new(), Vec::new());
                let read_out = async {
                    if let Some(s) = stdout.as_mut() {
                        let _ = s.read_to_end(&mut out).await;
                    }
                };
                let read_err = async {
                    if let Some(s) = stderr.as_mut() {
                        let _ = s.read_to_end(&mut err).await;
                    }
                };
                let ((), (), status) = tokio::join!(read_out, read_err, child.wait());
                (out, err, status)
            };
            let finished = if timeout.is_zero() {
                Some(run.await)
            } else {
                tokio::time::timeout(timeout, run).await.ok()
            };
            match finished {
                Some((out, err, status)) => {
                    let status = status.map_err(Error::io("waiting for the runtime's exec"))?;
                    let logged = std::fs::read_to_string(&log).unwrap_or_default();
                    let code = exit_code(status);
                    // The runtime itself failed (no such container, bad process): not the command's exit.
                    if !status.success() && !std::fs::exists(&pid_file).unwrap_or(false) {
                        let message = crate::oci::runtime::log_errors(&logged);
                        return Err(Error::ExecFailed { id: record.id.clone(), message });
                    }
                    Ok((out, err, code))
                }
                None => {
                    // Kill the process itself (killing the runtime would orphan it); a runtime still
                    // starting it writes its pid soon, or fails.
                    let read_pid = || -> Option<i32> {
                        std::fs::read_to_string(&pid_file).ok().and_then(|p| p.trim().parse().ok())
                    };
                    let mut pid = read_pid();
                    for _ in 0..500 {
                        if pid.is_some() || matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        pid = read_pid();
                    }
                    if let Some(pid) = pid {
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                    // The runtime reaps the killed process and exits: wait for it. Killing the runtime
                    // first would leave the process a zombie whose parent is gone; if it was the last
                    // but the init of a PID namespace, that namespace's init could then never exit
                    // (the kernel waits for every task of the namespace to be reaped).
                    if pid.is_none()
                        || tokio::time::timeout(Duration::from_secs(5), child.wait()).await.is_err()
                    {
                        let _ = child.start_kill();
                        let _ = child.wait().await;
                    }
                    Err(Error::ExecTimeout { id: record.id.clone(), cmd: cmd.to_vec(), timeout })
                }
            }
        }
        .await;
        cleanup.done = true;
        result
    }

    /// Attaches `io` to a running container's stdio through its monitor, until the container's output
    /// ends or the client's output goes away.
    pub async fn attach(&self, id: &str, io: Streams) -> Result<(), Error> {
        let (_, record) = self.running(id)?;
        let dir = monitor::open_dir(&self.inner.dir.join(&record.id)).map_err(Error::io("attaching"))?;
        let socket = tokio::net::UnixStream::connect(monitor::socket_path(&dir, monitor::ATTACH_SOCKET))
            .await
            .map_err(Error::io("reaching the container's monitor"))?;
        stream::attach(socket, io).await.map_err(Error::io("attach"))
    }

    /// Runs `cmd` in a running container with `io` as its stdio (a terminal when `tty`), returning its
    /// exit code.
    pub async fn exec(&self, id: &str, cmd: &[String], tty: bool, io: Streams) -> Result<i32, Error> {
        let (_, record) = self.running(id)?;
        let runtime = self.runtime_of(&record)?;
        let process = self.exec_process(&record, cmd, tty)?;
        let dir = self.inner.dir.join(&record.id);
        let result = stream::exec(runtime.as_ref(), &record.id, &dir, &process, tty, io).await;
        let _ = std::fs::remove_file(&process);
        result
    }
}
