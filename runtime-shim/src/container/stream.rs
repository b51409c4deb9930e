//! The streams of attach and exec: a client's stdio ([`Streams`], the streaming server's) joined to a container's attach
//! socket (the monitor's frames) or to a `<runtime> exec` process (pipes, or a pty received over a
//! console socket).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::Error;
use crate::monitor::frame;
use crate::oci::runtime::{ExecOptions, Flavor, Runtime};

pub use crate::streaming::{Streams, TerminalSize};

/// Joins `io` to the monitor's attach socket until the container's output ends (the monitor closes
/// the socket) or the client's output fails.
pub(super) async fn attach(socket: tokio::net::UnixStream, io: Streams) -> io::Result<()> {
    let (mut read, mut write) = socket.into_split();
    let Streams { stdin, mut stdout, mut stderr, resize } = io;
    let (frames, mut outgoing) = mpsc::channel::<Vec<u8>>(16);
    if let Some(mut stdin) = stdin {
        let frames = frames.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 32 * 1024];
            loop {
                match stdin.read(&mut buf).await {
                    Ok(0) | Err(_) => {
                        let _ = frames.send(frame::encode(frame::STDIN_CLOSE, &[])).await;
                        break;
                    }
                    Ok(n) => {
                        if frames.send(frame::encode(frame::STDIN, &buf[..n])).await.is_err() {
                            break;
                        }
                    }
                }
            }
        });
    }
    if let Some(mut resize) = resize {
        let frames = frames.clone();
        tokio::spawn(async move {
            while let Some(size) = resize.recv().await {
                let mut payload = size.width.to_be_bytes().to_vec();
                payload.extend_from_slice(&size.height.to_be_bytes());
                if frames.send(frame::encode(frame::RESIZE, &payload)).await.is_err() {
                    break;
                }
            }
        });
    }
    drop(frames);
    let writer = tokio::spawn(async move {
        while let Some(bytes) = outgoing.recv().await {
            if write.write_all(&bytes).await.is_err() {
                break;
            }
        }
    });
    let result = async {
        loop {
            let mut header = [0u8; 5];
            match read.read_exact(&mut header).await {
                Ok(_) => {}
                // A monitor that exits with our last input unread resets the connection; what it
                // sent before is read first all the same (the reset is reported on an empty queue).
                Err(e)
                    if matches!(e.kind(), io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset) =>
                {
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
            let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
            let mut payload = vec![0u8; len];
            match read.read_exact(&mut payload).await {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(()),
                Err(e) => return Err(e),
            }
            let sink = match header[0] {
                frame::STDOUT => stdout.as_mut(),
                frame::STDERR => stderr.as_mut(),
                _ => None,
            };
            if let Some(sink) = sink {
                sink.write_all(&payload).await?;
                sink.flush().await?;
            }
        }
    }
    .await;
    writer.abort();
    result
}

/// Copies `from` into `to` until EOF, then shuts `to` down.
async fn pump(mut from: impl AsyncRead + Unpin, mut to: impl AsyncWrite + Unpin) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).await.is_err() || to.flush().await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown().await;
}

/// Runs `<runtime> exec` of `process` in container `id` with `io` as its stdio.
pub(super) async fn exec(
    runtime: &dyn Runtime,
    id: &str,
    dir: &Path,
    process: &Path,
    tty: bool,
    io: Streams,
) -> Result<i32, Error> {
    let Streams { stdin, stdout, stderr, resize } = io;
    if !tty {
        let options = ExecOptions { process, pid_file: None, console_socket: None, detach: false };
        let (command, log) = runtime.exec_command(id, &options);
        let mut command = tokio::process::Command::from(command);
        let piped = std::process::Stdio::piped;
        command
            .stdin(if stdin.is_some() { piped() } else { std::process::Stdio::null() })
            .stdout(piped())
            .stderr(piped())
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(Error::io("running the runtime's exec"))?;
        if let (Some(from), Some(to)) = (stdin, child.stdin.take()) {
            tokio::spawn(pump(from, to));
        }
        let out = child.stdout.take().map(|from| (from, stdout));
        let err = child.stderr.take().map(|from| (from, stderr));
        let copy_out = async {
            if let Some((from, Some(to))) = out {
                pump(from, to).await;
            }
        };
        let copy_err = async {
            if let Some((from, Some(to))) = err {
                pump(from, to).await;
            }
        };
        let ((), (), status) = tokio::join!(copy_out, copy_err, child.wait());
        let _ = std::fs::remove_file(&log);
        let status = status.map_err(Error::io("waiting for the runtime's exec"))?;
        return Ok(super::exit_code(status));
    }

    if runtime.flavor() == Flavor::Runc {
        return exec_behind_a_terminal(runtime, id, process, Streams { stdin, stdout, stderr, resize }).await;
    }

    // A terminal: the runtime sends the pty master over a console socket in the container directory
    // (bound through /proc/self/fd, reached by the runtime relative to its working directory).
    let name = format!(
        "exec-{}-{}.sock",
        std::process::id(),
        super::EXEC_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let dir_fd = crate::monitor::open_dir(dir).map_err(Error::io("exec"))?;
    let listener = tokio::net::UnixListener::bind(crate::monitor::socket_path(&dir_fd, &name))
        .map_err(Error::io("binding the console socket"))?;
    let options =
        ExecOptions { process, pid_file: None, console_socket: Some(Path::new(&name)), detach: false };
    let (command, log) = runtime.exec_command(id, &options);
    let mut command = tokio::process::Command::from(command);
    command
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let spawned = command.spawn();
    let cleanup = |log: &Path| {
        let _ = std::fs::remove_file(dir.join(&name));
        let _ = std::fs::remove_file(log);
    };
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            cleanup(&log);
            return Err(Error::Io { context: "running the runtime's exec", source: e });
        }
    };
    let master = tokio::select! {
        biased;
        accepted = listener.accept() => match accepted {
            Ok((stream, _)) => receive_fd(stream).await,
            Err(e) => Err(e),
        },
        status = child.wait() => {
            // A short process: the runtime may have sent the terminal and exited already, its
            // connection waiting in the backlog.
            match tokio::time::timeout(std::time::Duration::from_millis(200), listener.accept()).await {
                Ok(Ok((stream, _))) => receive_fd(stream).await,
                _ => Err(io::Error::other(format!(
                    "the runtime exited ({status:?}) before sending a terminal: {}",
                    crate::oci::runtime::log_errors(&std::fs::read_to_string(&log).unwrap_or_default())
                ))),
            }
        }
    };
    let _ = std::fs::remove_file(dir.join(&name));
    let master = match master {
        Ok(master) => master,
        Err(e) => {
            cleanup(&log);
            return Err(Error::Io { context: "receiving the exec's terminal", source: e });
        }
    };
    let file = terminal_io(master, resize, stdin)?;
    let copy_out = async {
        if let Some(to) = stdout {
            pump(tokio::fs::File::from_std(file), to).await;
        }
    };
    let ((), status) = tokio::join!(copy_out, child.wait());
    cleanup(&log);
    let status = status.map_err(Error::io("waiting for the runtime's exec"))?;
    Ok(super::exit_code(status))
}

/// A pty pair (master, slave).
fn openpty() -> io::Result<(OwnedFd, OwnedFd)> {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors into the given integers; the other arguments may be null.
    let rc = unsafe {
        libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null())
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors owned by nothing else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    for fd in [&master, &slave] {
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
    Ok((master, slave))
}

/// A terminal exec through runc, which hands a console socket's pty only to a detached process (whose
/// exit nobody could then wait for): runc runs attached, in a session of its own whose controlling
/// terminal is a pty of ours. runc puts that terminal in raw mode, copies between it and the
/// container's pty, and follows its size (SIGWINCH when we resize it); its exit status is the
/// process's.
async fn exec_behind_a_terminal(
    runtime: &dyn Runtime,
    id: &str,
    process: &Path,
    io: Streams,
) -> Result<i32, Error> {
    use std::os::unix::process::CommandExt;
    let Streams { stdin, stdout, stderr: _, resize } = io;
    let (master, slave) = openpty().map_err(Error::io("opening a terminal"))?;
    let options = ExecOptions { process, pid_file: None, console_socket: None, detach: false };
    let (mut command, log) = runtime.exec_command(id, &options);
    let clone = |fd: &OwnedFd| fd.try_clone().map_err(Error::io("exec"));
    command.stdin(clone(&slave)?).stdout(clone(&slave)?).stderr(slave);
    // SAFETY: setsid and ioctl are async-signal-safe; fd 0 is the pty slave set above.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(true);
    let spawned = command.spawn();
    drop(command);
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let _ = std::fs::remove_file(&log);
            return Err(Error::Io { context: "running the runtime's exec", source: e });
        }
    };
    let file = terminal_io(master, resize, stdin)?;
    let copy_out = async {
        match stdout {
            Some(to) => pump(tokio::fs::File::from_std(file), to).await,
            None => pump(tokio::fs::File::from_std(file), tokio::io::sink()).await,
        }
    };
    let ((), status) = tokio::join!(copy_out, child.wait());
    let _ = std::fs::remove_file(&log);
    let status = status.map_err(Error::io("waiting for the runtime's exec"))?;
    Ok(super::exit_code(status))
}

async fn receive_fd(stream: tokio::net::UnixStream) -> io::Result<OwnedFd> {
    let stream = stream.into_std()?;
    stream.set_nonblocking(false)?;
    tokio::task::spawn_blocking(move || {
        use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
        let mut buf = [0u8; 4096];
        let mut iov = [io::IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
        let message =
            recvmsg::<()>(stream.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
                .map_err(io::Error::from)?;
        for cmsg in message.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmRights(fds) = cmsg
                && let Some(&fd) = fds.first()
            {
                // SAFETY: the kernel just gave us this descriptor.
                return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
        Err(io::Error::other("no terminal received"))
    })
    .await
    .map_err(io::Error::other)?
}

/// Starts following `resize` on the terminal `master` and copying `stdin` into it; the terminal's
/// output is read from the returned file.
fn terminal_io(
    master: OwnedFd,
    resize: Option<mpsc::Receiver<TerminalSize>>,
    stdin: Option<Box<dyn AsyncRead + Send + Unpin>>,
) -> Result<std::fs::File, Error> {
    let raw = master.as_raw_fd();
    if let Some(mut resize) = resize {
        tokio::spawn(async move {
            while let Some(size) = resize.recv().await {
                let ws =
                    libc::winsize { ws_col: size.width, ws_row: size.height, ws_xpixel: 0, ws_ypixel: 0 };
                // SAFETY: TIOCSWINSZ reads the winsize; a stale descriptor only makes the ioctl fail.
                unsafe {
                    libc::ioctl(raw, libc::TIOCSWINSZ, &ws);
                }
            }
        });
    }
    let file = std::fs::File::from(master);
    let writer = file.try_clone().map_err(Error::io("exec"))?;
    if let Some(from) = stdin {
        tokio::spawn(pump(from, tokio::fs::File::from_std(writer)));
    }
    Ok(file)
}
