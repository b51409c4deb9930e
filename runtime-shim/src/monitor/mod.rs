//! The container monitor: `keel-shim monitor ...`, the same binary re-executed once per container,
//! detached from keel-shim (its own session) so that it outlives it.
//!
//! It is a child subreaper: it runs `<runtime> create` with the container's stdio (pipes, or a pty
//! whose master it receives over a console socket), reports `created <pid>` (or `error <message>`) on
//! its stdout — a pipe keel-shim reads only during startup — and then:
//! - copies the container's stdout and stderr into the CRI log file (`<RFC3339Nano> <stream> <P|F>
//!   <line>`, lines cut at 16 KiB as containerd does), reopening it on request;
//! - serves attach on `attach.sock` in the container directory ([`frame`] protocol): input to the
//!   container's stdin, terminal resizes, and copies of its output to every attached client;
//! - serves `reopen` on `control.sock` (the kubelet's log rotation);
//! - reaps the container's init (reparented to it) and every orphan, and writes the exit file
//!   ([`ExitRecord`], atomically) before exiting.
//!
//! The sockets live in the container directory, the monitor's working directory; clients reach them
//! through [`socket_path`] so that long state roots do not overflow `sun_path`.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::oci::runtime::OciRuntime;

/// The attach socket's name in the container directory.
pub const ATTACH_SOCKET: &str = "attach.sock";
/// The control socket's name in the container directory.
pub const CONTROL_SOCKET: &str = "control.sock";
/// The console socket's name (tty containers) in the bundle directory (the runtime dials it from there).
pub const CONSOLE_SOCKET: &str = "console.sock";
/// The longest log line written as one entry; longer lines are cut into partial (`P`) entries.
pub const MAX_LINE: usize = 16 * 1024;

/// `keel-shim monitor`'s arguments.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "keel-shim monitor", hide = true)]
pub struct MonitorArgs {
    /// The container id.
    #[arg(long)]
    pub id: String,
    /// The OCI bundle.
    #[arg(long)]
    pub bundle: PathBuf,
    /// The OCI runtime binary.
    #[arg(long)]
    pub runtime: PathBuf,
    /// The runtime's --root.
    #[arg(long)]
    pub runtime_root: PathBuf,
    /// The CRI log file (none: output is discarded).
    #[arg(long)]
    pub log_path: Option<PathBuf>,
    /// The exit file; its directory is the container directory (the sockets' place).
    #[arg(long)]
    pub exit_file: PathBuf,
    /// Give the container a terminal.
    #[arg(long)]
    pub tty: bool,
    /// Keep the container's stdin open (for attach).
    #[arg(long)]
    pub stdin: bool,
    /// Close the container's stdin when the first attach that wrote to it ends.
    #[arg(long)]
    pub stdin_once: bool,
}

/// How a container ended, as the monitor writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// The exit code (128 + the signal for a killed init, as containerd reports it).
    pub exit_code: i32,
    /// The signal that killed the init, if one did.
    pub signal: Option<i32>,
    /// When, RFC3339 with nanoseconds.
    pub finished_at: String,
    /// When, in nanoseconds since the epoch.
    pub finished_at_ns: i64,
    /// `Completed`, `Error`, `OOMKilled` (or `Unknown` when the monitor died without a word).
    pub reason: String,
}

/// Frame kinds of the attach protocol: each frame is a kind byte, a big-endian u32 length and the
/// payload.
pub mod frame {
    /// Client → monitor: bytes for the container's stdin.
    pub const STDIN: u8 = 0;
    /// Monitor → client: the container's stdout (or its terminal's output).
    pub const STDOUT: u8 = 1;
    /// Monitor → client: the container's stderr.
    pub const STDERR: u8 = 2;
    /// Client → monitor: the client's stdin ended.
    pub const STDIN_CLOSE: u8 = 3;
    /// Client → monitor: a terminal resize, width then height as big-endian u16.
    pub const RESIZE: u8 = 4;

    /// Encodes one frame.
    pub fn encode(kind: u8, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
        let mut out = Vec::with_capacity(5 + payload.len());
        out.push(kind);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&payload[..len as usize]);
        out
    }
}

/// The path by which this process reaches `name` inside the directory open as `dir`
/// (`/proc/self/fd/N/name`): short whatever the directory's own path.
pub fn socket_path(dir: &OwnedFd, name: &str) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}/{name}", dir.as_raw_fd()))
}

/// Opens `dir` as an `O_PATH` descriptor for [`socket_path`].
pub fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    let file =
        std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH | libc::O_DIRECTORY).open(dir)?;
    Ok(OwnedFd::from(file))
}

/// The current time as RFC3339 with nanoseconds (trailing zeros trimmed, as Go's RFC3339Nano) and as
/// nanoseconds since the epoch.
pub fn now() -> (String, i64) {
    let now = jiff::Timestamp::now();
    let ns = i64::try_from(now.as_nanosecond()).unwrap_or(i64::MAX);
    (now.to_string(), ns)
}

/// Runs the monitor; never returns before the container exited (or failed to be created).
pub fn run(args: &MonitorArgs) -> ExitCode {
    // SAFETY: prctl with integer arguments only.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
    match monitor(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keel-shim monitor {}: {e:#}", args.id);
            ExitCode::FAILURE
        }
    }
}

/// Where the container's output goes: the log file and the attached clients.
struct Sinks {
    log: Mutex<Option<CriLog>>,
    clients: Mutex<Vec<UnixStream>>,
}

impl Sinks {
    fn write(&self, stream: &str, tag: char, line: &[u8]) {
        if let Some(log) = self.log.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            log.write(stream, tag, line);
        }
    }

    fn broadcast(&self, kind: u8, data: &[u8]) {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        let encoded = frame::encode(kind, data);
        clients.retain_mut(|client| client.write_all(&encoded).is_ok());
    }
}

/// The CRI log file.
struct CriLog {
    path: PathBuf,
    file: File,
}

impl CriLog {
    fn open(path: &Path) -> io::Result<CriLog> {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(CriLog { path: path.to_owned(), file })
    }

    fn write(&mut self, stream: &str, tag: char, line: &[u8]) {
        let (stamp, _) = now();
        let mut entry = Vec::with_capacity(line.len() + 48);
        entry.extend_from_slice(stamp.as_bytes());
        entry.push(b' ');
        entry.extend_from_slice(stream.as_bytes());
        entry.push(b' ');
        entry.push(tag as u8);
        entry.push(b' ');
        entry.extend_from_slice(line);
        entry.push(b'\n');
        let _ = self.file.write_all(&entry);
    }

    fn reopen(&mut self) -> io::Result<()> {
        *self = CriLog::open(&self.path)?;
        Ok(())
    }
}

/// Cuts a stream into log entries: full lines (`F`, without their `\n` or `\r\n`), pieces of
/// [`MAX_LINE`] bytes of longer lines (`P`), and what is left at the end (`F`).
#[derive(Debug, Default)]
pub struct LineSplitter {
    buf: Vec<u8>,
}

impl LineSplitter {
    /// Feeds `data`, calling `emit(tag, line)` for every entry it completes.
    pub fn feed(&mut self, data: &[u8], emit: &mut dyn FnMut(char, &[u8])) {
        self.buf.extend_from_slice(data);
        let mut start = 0;
        loop {
            let rest = &self.buf[start..];
            match rest.iter().position(|&b| b == b'\n') {
                Some(pos) if pos <= MAX_LINE => {
                    let mut line = &rest[..pos];
                    if line.last() == Some(&b'\r') {
                        line = &line[..line.len() - 1];
                    }
                    emit('F', line);
                    start += pos + 1;
                }
                _ if rest.len() >= MAX_LINE => {
                    emit('P', &rest[..MAX_LINE]);
                    start += MAX_LINE;
                }
                _ => break,
            }
        }
        self.buf.drain(..start);
    }

    /// Ends the stream: what is left becomes a full entry.
    pub fn finish(&mut self, emit: &mut dyn FnMut(char, &[u8])) {
        if !self.buf.is_empty() {
            emit('F', &self.buf);
            self.buf.clear();
        }
    }
}

fn copy_output(mut source: File, stream: &'static str, kind: u8, sinks: &Sinks) {
    let mut splitter = LineSplitter::default();
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = match source.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // EIO: a terminal whose other side closed.
            Err(_) => break,
        };
        sinks.broadcast(kind, &buf[..n]);
        splitter.feed(&buf[..n], &mut |tag, line| sinks.write(stream, tag, line));
    }
    splitter.finish(&mut |tag, line| sinks.write(stream, tag, line));
}

/// The container's stdin (a pipe's write end, or the pty master) and its terminal, shared by the
/// attach clients.
struct Input {
    stdin: Mutex<Option<File>>,
    terminal: Option<File>,
    stdin_once: bool,
}

fn serve_attach(listener: &UnixListener, sinks: &Sinks, input: &Arc<Input>) {
    for client in listener.incoming() {
        let Ok(client) = client else { continue };
        let Ok(writer) = client.try_clone() else { continue };
        // A client that stops reading is dropped rather than holding the container's output back.
        let _ = writer.set_write_timeout(Some(std::time::Duration::from_secs(10)));
        sinks.clients.lock().unwrap_or_else(PoisonError::into_inner).push(writer);
        let input = Arc::clone(input);
        std::thread::spawn(move || attach_client(client, &input));
    }
}

fn attach_client(client: UnixStream, input: &Input) {
    let mut reader = BufReader::new(client);
    let mut wrote = false;
    loop {
        let mut header = [0u8; 5];
        if reader.read_exact(&mut header).is_err() {
            break;
        }
        let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        let mut payload = vec![0u8; len];
        if reader.read_exact(&mut payload).is_err() {
            break;
        }
        match header[0] {
            frame::STDIN => {
                wrote = true;
                if let Some(stdin) = input.stdin.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
                    let _ = stdin.write_all(&payload);
                }
            }
            frame::STDIN_CLOSE => {
                wrote = true;
                break;
            }
            frame::RESIZE if payload.len() == 4 => {
                if let Some(terminal) = &input.terminal {
                    let size = libc::winsize {
                        ws_col: u16::from_be_bytes([payload[0], payload[1]]),
                        ws_row: u16::from_be_bytes([payload[2], payload[3]]),
                        ws_xpixel: 0,
                        ws_ypixel: 0,
                    };
                    // SAFETY: TIOCSWINSZ reads a winsize from the pointer, valid for the call.
                    unsafe {
                        libc::ioctl(terminal.as_raw_fd(), libc::TIOCSWINSZ, &size);
                    }
                }
            }
            _ => {}
        }
    }
    if wrote && input.stdin_once {
        let stdin = input.stdin.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let (Some(_), Some(terminal)) = (stdin, &input.terminal) {
            // A terminal's stdin ends with EOF (^D) rather than by closing the master.
            let _ = (&*terminal).write_all(&[4]);
        }
    }
}

fn serve_control(listener: &UnixListener, sinks: &Sinks) {
    for client in listener.incoming() {
        let Ok(mut client) = client else { continue };
        let mut line = String::new();
        let Ok(reader) = client.try_clone() else { continue };
        if BufReader::new(reader).read_line(&mut line).is_err() {
            continue;
        }
        let answer = match line.trim() {
            "reopen" => {
                let mut log = sinks.log.lock().unwrap_or_else(PoisonError::into_inner);
                match log.as_mut().map(CriLog::reopen) {
                    Some(Err(e)) => format!("error {e}\n"),
                    _ => "ok\n".to_owned(),
                }
            }
            other => format!("error unknown request {other:?}\n"),
        };
        let _ = client.write_all(answer.as_bytes());
    }
}

fn pipe() -> io::Result<(File, File)> {
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    Ok((File::from(read), File::from(write)))
}

/// Receives the pty master the runtime sends over the console socket.
fn receive_master(listener: &UnixListener) -> io::Result<File> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let (stream, _) = listener.accept()?;
    let mut buf = [0u8; 4096];
    let mut iov = [io::IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let message = recvmsg::<()>(stream.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(io::Error::from)?;
    for cmsg in message.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg
            && let Some(&fd) = fds.first()
        {
            // SAFETY: the kernel just gave us this descriptor; nothing else owns it.
            return Ok(unsafe { File::from_raw_fd(fd) });
        }
    }
    Err(io::Error::other("the runtime sent no terminal over the console socket"))
}

/// The memory cgroup's OOM-kill counter file of `pid` and its current count.
fn oom_counter(pid: i32) -> Option<(PathBuf, u64)> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let mut file = None;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_start_matches('/');
        if controllers.split(',').any(|c| c == "memory") {
            file = Some(Path::new("/sys/fs/cgroup/memory").join(path).join("memory.oom_control"));
            break;
        }
        if controllers.is_empty() && file.is_none() {
            let v2 = Path::new("/sys/fs/cgroup").join(path).join("memory.events");
            if v2.exists() {
                file = Some(v2);
            }
        }
    }
    let file = file?;
    let count = read_oom_kills(&file)?;
    Some((file, count))
}

fn read_oom_kills(file: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines().find_map(|line| line.strip_prefix("oom_kill ")).and_then(|n| n.trim().parse().ok())
}

/// Whether the bundle's spec gives the container a PID namespace of its own (one without a path).
fn owns_pid_namespace(bundle: &Path) -> bool {
    let Ok(spec) = oci_spec::runtime::Spec::load(bundle.join("config.json")) else { return true };
    let namespaces = spec.linux().as_ref().and_then(|linux| linux.namespaces().clone()).unwrap_or_default();
    namespaces.iter().any(|ns| ns.typ() == oci_spec::runtime::LinuxNamespaceType::Pid && ns.path().is_none())
}

fn report(status: &mut Option<File>, line: &str) {
    if let Some(mut pipe) = status.take() {
        let _ = pipe.write_all(line.as_bytes());
    }
}

fn monitor(args: &MonitorArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    // Our stdout is keel-shim's status pipe; keep it aside and point fd 1 at /dev/null.
    let devnull = File::options().read(true).write(true).open("/dev/null")?;
    // SAFETY: dup of our own stdout.
    let status_fd = unsafe { libc::dup(1) };
    // SAFETY: a descriptor dup just made, owned by nothing else.
    let mut status = (status_fd >= 0).then(|| unsafe { File::from_raw_fd(status_fd) });
    // SAFETY: dup2 of descriptors we own.
    unsafe {
        libc::dup2(devnull.as_raw_fd(), 1);
        libc::fcntl(status_fd, libc::F_SETFD, libc::FD_CLOEXEC);
    }
    let result = start_container(args, &mut status);
    match result {
        Ok(()) => Ok(()),
        Err(e) => {
            report(&mut status, &format!("error {}\n", format!("{e:#}").replace('\n', " ")));
            Err(e).context("creating the container")
        }
    }
}

fn start_container(args: &MonitorArgs, status: &mut Option<File>) -> anyhow::Result<()> {
    use anyhow::Context;
    let dir = args.exit_file.parent().context("the exit file has no directory")?.to_owned();
    std::env::set_current_dir(&dir).with_context(|| format!("entering {}", dir.display()))?;
    let runtime = OciRuntime::new(&args.runtime, &args.runtime_root)?;
    let pid_file = dir.join("init.pid");
    let log = match &args.log_path {
        Some(path) => Some(CriLog::open(path).with_context(|| format!("opening {}", path.display()))?),
        None => None,
    };
    let sinks = Arc::new(Sinks { log: Mutex::new(log), clients: Mutex::new(Vec::new()) });
    let _ = std::fs::remove_file(ATTACH_SOCKET);
    let _ = std::fs::remove_file(CONTROL_SOCKET);
    let attach = UnixListener::bind(ATTACH_SOCKET).context("binding the attach socket")?;
    let control = UnixListener::bind(CONTROL_SOCKET).context("binding the control socket")?;

    let mut copiers = Vec::new();
    let input;
    if args.tty {
        // The runtime changes into the bundle before it dials the socket: bind it there, by a path
        // relative to ours (short whatever the state root), and name it relative to the bundle.
        let bundle = args.bundle.strip_prefix(&dir).unwrap_or(&args.bundle);
        let console_path = bundle.join(CONSOLE_SOCKET);
        let _ = std::fs::remove_file(&console_path);
        let console = UnixListener::bind(&console_path).context("binding the console socket")?;
        let stdio = [Stdio::null(), Stdio::null(), Stdio::null()];
        let created =
            runtime.create(&args.id, &args.bundle, &pid_file, Some(Path::new(CONSOLE_SOCKET)), stdio);
        let _ = std::fs::remove_file(&console_path);
        created?;
        let master = receive_master(&console).context("receiving the container's terminal")?;
        let output = master.try_clone()?;
        let stdin = args.stdin.then(|| master.try_clone()).transpose()?;
        input =
            Arc::new(Input { stdin: Mutex::new(stdin), terminal: Some(master), stdin_once: args.stdin_once });
        let sinks = Arc::clone(&sinks);
        copiers.push(std::thread::spawn(move || copy_output(output, "stdout", frame::STDOUT, &sinks)));
    } else {
        let (stdin_read, stdin_write) = if args.stdin {
            let (read, write) = pipe()?;
            (Stdio::from(read), Some(write))
        } else {
            (Stdio::null(), None)
        };
        let (out_read, out_write) = pipe()?;
        let (err_read, err_write) = pipe()?;
        runtime.create(
            &args.id,
            &args.bundle,
            &pid_file,
            None,
            [stdin_read, Stdio::from(out_write), Stdio::from(err_write)],
        )?;
        input =
            Arc::new(Input { stdin: Mutex::new(stdin_write), terminal: None, stdin_once: args.stdin_once });
        let out_sinks = Arc::clone(&sinks);
        copiers.push(std::thread::spawn(move || copy_output(out_read, "stdout", frame::STDOUT, &out_sinks)));
        let err_sinks = Arc::clone(&sinks);
        copiers.push(std::thread::spawn(move || copy_output(err_read, "stderr", frame::STDERR, &err_sinks)));
    }
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .with_context(|| format!("reading {}", pid_file.display()))?
        .trim()
        .parse()
        .context("parsing the init's pid file")?;
    let oom = oom_counter(pid);
    {
        let sinks = Arc::clone(&sinks);
        let input = Arc::clone(&input);
        std::thread::spawn(move || serve_attach(&attach, &sinks, &input));
    }
    {
        let sinks = Arc::clone(&sinks);
        std::thread::spawn(move || serve_control(&control, &sinks));
    }
    report(status, &format!("created {pid}\n"));

    // Reap everything until the init exits.
    let (exit_code, signal) = loop {
        use nix::sys::wait::{WaitStatus, waitpid};
        match waitpid(None, None) {
            Ok(WaitStatus::Exited(child, code)) if child.as_raw() == pid => break (code, None),
            Ok(WaitStatus::Signaled(child, sig, _)) if child.as_raw() == pid => {
                break (128 + sig as i32, Some(sig as i32));
            }
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => {
                // No children left without our init having been seen: it was not ours to reap.
                anyhow::bail!("waiting for the container's init {pid}: {e}");
            }
        }
    };
    let oom_killed =
        oom.is_some_and(|(file, before)| read_oom_kills(&file).is_some_and(|after| after > before));
    // Without a PID namespace of its own, the container's other processes outlive its init (and
    // would hold its output open): kill them, as containerd's shim does.
    if !owns_pid_namespace(&args.bundle) {
        let _ = runtime.kill(&args.id, libc::SIGKILL, true);
    }
    // The output ends when the last writer is gone; a writer that escaped the container (a process
    // that kept the pipe) does not hold the exit back for long.
    let (done, copied) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for copier in copiers {
            let _ = copier.join();
        }
        let _ = done.send(());
    });
    let _ = copied.recv_timeout(std::time::Duration::from_secs(5));
    let (finished_at, finished_at_ns) = now();
    let reason = if oom_killed {
        "OOMKilled"
    } else if exit_code == 0 {
        "Completed"
    } else {
        "Error"
    };
    let record = ExitRecord { exit_code, signal, finished_at, finished_at_ns, reason: reason.to_owned() };
    let tmp = dir.join("exit.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(&record)?)?;
    std::fs::rename(&tmp, &args.exit_file)?;
    let _ = std::fs::remove_file(ATTACH_SOCKET);
    let _ = std::fs::remove_file(CONTROL_SOCKET);
    // Orphans that exited meanwhile.
    while let Ok(status) = nix::sys::wait::waitpid(None, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
        if status == nix::sys::wait::WaitStatus::StillAlive {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]]) -> Vec<(char, Vec<u8>)> {
        let mut out = Vec::new();
        let mut splitter = LineSplitter::default();
        for chunk in chunks {
            splitter.feed(chunk, &mut |tag, line| out.push((tag, line.to_vec())));
        }
        splitter.finish(&mut |tag, line| out.push((tag, line.to_vec())));
        out
    }

    #[test]
    fn lines_are_full_partial_and_a_tail() {
        let long = vec![b'x'; MAX_LINE + 10];
        let mut input = b"a\r\nb".to_vec();
        input.extend_from_slice(b"c\n");
        input.extend_from_slice(&long);
        input.extend_from_slice(b"\nend");
        let out = split(&[&input[..3], &input[3..]]);
        assert_eq!(
            out,
            vec![
                ('F', b"a".to_vec()),
                ('F', b"bc".to_vec()),
                ('P', vec![b'x'; MAX_LINE]),
                ('F', vec![b'x'; 10]),
                ('F', b"end".to_vec()),
            ]
        );
    }

    #[test]
    fn frames_encode_kind_and_length() {
        assert_eq!(frame::encode(frame::STDOUT, b"hi"), vec![1, 0, 0, 0, 2, b'h', b'i']);
    }
}
