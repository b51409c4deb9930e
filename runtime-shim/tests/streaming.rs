//! The CRI streaming server against real clients: the Python `kubernetes` client's websocket
//! (`WSClient`, v4 and v5 channel protocols) and kubectl 1.27's SPDY/3.1 (client-go remotecommand and
//! portforward over moby/spdystream) — kubectl reaches the token URLs through `ApiFront`, a few
//! canned apiserver answers (discovery, the pod) whose exec/portforward POSTs are forwarded byte for
//! byte to the next streaming URL, as the apiserver and kubelet proxy them.
//!
//! The backend runs real processes on the host (pipes, or a pty for tty sessions) and connects to
//! 127.0.0.1 for port-forward: it stands in for the container module at this seam only.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_cri::v1 as api;
use keel_shim::streaming::{
    Backend, BackendError, DEFAULT_ADDR, Server, StreamConfig, Streams, TerminalSize,
};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::net::{TcpListener, TcpStream};

/// Runs commands on the host; port-forward connects to 127.0.0.1.
struct HostBackend;

impl Backend for HostBackend {
    async fn exec(
        &self,
        _container: &str,
        cmd: &[String],
        tty: bool,
        streams: Streams,
    ) -> Result<i32, BackendError> {
        if tty { exec_tty(cmd, streams).await } else { exec_pipes(cmd, streams).await }
    }

    /// "Attaching" to a container whose process is `cat`: stdin comes back on stdout.
    async fn attach(&self, _container: &str, _tty: bool, mut streams: Streams) -> Result<(), BackendError> {
        if let (Some(mut stdin), Some(mut stdout)) = (streams.stdin.take(), streams.stdout.take()) {
            tokio::io::copy(&mut stdin, &mut stdout).await?;
            stdout.shutdown().await?;
        }
        Ok(())
    }

    async fn port_forward(
        &self,
        _sandbox: &str,
        port: u16,
        mut stream: DuplexStream,
    ) -> Result<(), BackendError> {
        let mut tcp = TcpStream::connect(("127.0.0.1", port)).await?;
        tokio::io::copy_bidirectional(&mut tcp, &mut stream).await?;
        Ok(())
    }
}

async fn exec_pipes(cmd: &[String], streams: Streams) -> Result<i32, BackendError> {
    let (program, args) = cmd.split_first().ok_or("empty command")?;
    let piped = |wanted: bool| if wanted { Stdio::piped() } else { Stdio::null() };
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(piped(streams.stdin.is_some()))
        .stdout(piped(streams.stdout.is_some()))
        .stderr(piped(streams.stderr.is_some()))
        .kill_on_drop(true)
        .spawn()?;
    let stdin_task = match (streams.stdin, child.stdin.take()) {
        (Some(mut from), Some(mut to)) => Some(tokio::spawn(async move {
            let _ = tokio::io::copy(&mut from, &mut to).await;
        })),
        _ => None,
    };
    let mut copies = Vec::new();
    if let (Some(mut to), Some(mut from)) = (streams.stdout, child.stdout.take()) {
        copies.push(tokio::spawn(async move {
            let _ = tokio::io::copy(&mut from, &mut to).await;
            let _ = to.shutdown().await;
        }));
    }
    if let (Some(mut to), Some(mut from)) = (streams.stderr, child.stderr.take()) {
        copies.push(tokio::spawn(async move {
            let _ = tokio::io::copy(&mut from, &mut to).await;
            let _ = to.shutdown().await;
        }));
    }
    let status = child.wait().await?;
    for copy in copies {
        copy.await?;
    }
    if let Some(task) = stdin_task {
        task.abort();
    }
    Ok(status.code().unwrap_or(128))
}

fn set_size(fd: &OwnedFd, size: TerminalSize) {
    let winsize = libc::winsize { ws_row: size.height, ws_col: size.width, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads a winsize from a valid pointer; fd is an open pty master.
    unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &winsize) };
}

/// Kills the tty session's process if the session is dropped before it exited (a failed test).
struct KillOnDrop(Option<u32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(|pid| i32::try_from(pid).ok()) {
            // SAFETY: kill has no memory effects; the pid is our unreaped child's.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

async fn exec_tty(cmd: &[String], streams: Streams) -> Result<i32, BackendError> {
    use std::os::unix::process::CommandExt;
    let (program, args) = cmd.split_first().ok_or("empty command")?;
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors into the given pointers; the rest may be null.
    let rc = unsafe {
        libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), std::ptr::null())
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: openpty just returned these two open descriptors, owned by nobody else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let master = Arc::new(master);
    let mut command = std::process::Command::new(program);
    command.args(args).stdin(slave.try_clone()?).stdout(slave.try_clone()?).stderr(slave.try_clone()?);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            libc::ioctl(0, libc::TIOCSCTTY, 0);
            Ok(())
        });
    }
    let mut child = command.spawn()?;
    let mut guard = KillOnDrop(Some(child.id()));
    drop(command);
    drop(slave);
    if let Some(mut resize) = streams.resize {
        let master = master.clone();
        tokio::spawn(async move {
            while let Some(size) = resize.recv().await {
                set_size(&master, size);
            }
        });
    }
    if let Some(mut stdin) = streams.stdin {
        let mut to = std::fs::File::from(master.try_clone()?);
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stdin.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let chunk = buf[..n].to_vec();
                let result = tokio::task::block_in_place(|| std::io::Write::write_all(&mut to, &chunk));
                if result.is_err() {
                    break;
                }
            }
        });
    }
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let mut from = std::fs::File::from(master.try_clone()?);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        // EIO once the child and its descendants closed the slave.
        while let Ok(n) = std::io::Read::read(&mut from, &mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let output = tokio::spawn(async move {
        let Some(mut stdout) = streams.stdout else { return };
        while let Some(chunk) = rx.recv().await {
            if stdout.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = stdout.shutdown().await;
    });
    let status = tokio::task::spawn_blocking(move || child.wait()).await??;
    guard.0 = None;
    output.await?;
    Ok(status.code().unwrap_or(128))
}

async fn server() -> Server {
    Server::start(DEFAULT_ADDR, HostBackend).await.unwrap()
}

fn exec_request(cmd: &[&str], stdin: bool, tty: bool) -> api::ExecRequest {
    api::ExecRequest {
        container_id: "c1".into(),
        cmd: cmd.iter().map(|s| (*s).to_owned()).collect(),
        tty,
        stdin,
        stdout: true,
        stderr: !tty,
    }
}

/// Sends `head` (a request without body) and returns the status code and the whole response head.
async fn raw_request(server: &Server, head: &str) -> (u16, String) {
    let mut tcp = TcpStream::connect(server.addr()).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut reader = tokio::io::BufReader::new(tcp);
    let mut response = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await.unwrap() == 0 || line == "\r\n" {
            break;
        }
        response.push_str(&line);
    }
    let code = response.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, response)
}

fn path_of(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap();
    rest[rest.find('/').unwrap()..].to_owned()
}

#[tokio::test]
async fn requests_are_validated_as_the_kubelet_does() {
    let server = server().await;
    let code = |r: Result<api::ExecResponse, tonic::Status>| r.unwrap_err().code();
    assert_eq!(code(server.get_exec(&exec_request(&[], true, false))), tonic::Code::InvalidArgument);
    let mut no_id = exec_request(&["true"], true, false);
    no_id.container_id.clear();
    assert_eq!(code(server.get_exec(&no_id)), tonic::Code::InvalidArgument);
    let mut tty_stderr = exec_request(&["true"], true, true);
    tty_stderr.stderr = true;
    assert_eq!(code(server.get_exec(&tty_stderr)), tonic::Code::InvalidArgument);
    let none = api::ExecRequest { container_id: "c".into(), cmd: vec!["true".into()], ..Default::default() };
    assert_eq!(code(server.get_exec(&none)), tonic::Code::InvalidArgument);
    let attach = api::AttachRequest { container_id: "c".into(), ..Default::default() };
    assert_eq!(server.get_attach(&attach).unwrap_err().code(), tonic::Code::InvalidArgument);
    let pf = api::PortForwardRequest { pod_sandbox_id: String::new(), port: vec![80] };
    assert_eq!(server.get_port_forward(&pf).unwrap_err().code(), tonic::Code::InvalidArgument);
    let pf = api::PortForwardRequest { pod_sandbox_id: "p".into(), port: vec![70000] };
    assert_eq!(server.get_port_forward(&pf).unwrap_err().code(), tonic::Code::InvalidArgument);

    let url = server.get_exec(&exec_request(&["true"], false, false)).unwrap().url;
    assert!(url.starts_with(&format!("http://{}/exec/", server.addr())), "{url}");
    let pf = server
        .get_port_forward(&api::PortForwardRequest { pod_sandbox_id: "p".into(), port: vec![] })
        .unwrap();
    assert!(pf.url.contains("/portforward/"));
}

#[tokio::test]
async fn tokens_are_single_use_and_expire_and_bad_upgrades_get_the_kubelets_status() {
    let server = server().await;
    let get = |path: &str, headers: &str| format!("GET {path} HTTP/1.1\r\nHost: x\r\n{headers}\r\n");
    let spdy = "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n";

    // Unknown token, unknown route.
    assert_eq!(raw_request(&server, &get("/exec/nope", "")).await.0, 404);
    assert_eq!(raw_request(&server, &get("/other/x", "")).await.0, 404);

    // No X-Stream-Protocol-Version: 400; the token is used up: 404 the second time.
    let path = path_of(&server.get_exec(&exec_request(&["true"], false, false)).unwrap().url);
    assert_eq!(raw_request(&server, &get(&path, spdy)).await.0, 400);
    assert_eq!(raw_request(&server, &get(&path, spdy)).await.0, 404);

    // No shared version: 403 naming the server's.
    let path = path_of(&server.get_exec(&exec_request(&["true"], false, false)).unwrap().url);
    let (code, head) =
        raw_request(&server, &get(&path, &format!("{spdy}X-Stream-Protocol-Version: v9\r\n"))).await;
    assert_eq!(code, 403);
    assert!(
        head.to_ascii_lowercase().contains("x-accepted-stream-protocol-versions: v4.channel.k8s.io"),
        "{head}"
    );

    // A version but no upgrade headers: 400.
    let path = path_of(&server.get_exec(&exec_request(&["true"], false, false)).unwrap().url);
    assert_eq!(
        raw_request(&server, &get(&path, "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n")).await.0,
        400
    );

    // A token of one kind on another kind's path: 404.
    let path = path_of(&server.get_exec(&exec_request(&["true"], false, false)).unwrap().url);
    assert_eq!(raw_request(&server, &get(&path.replace("/exec/", "/attach/"), spdy)).await.0, 404);

    // Expired: 404.
    let path = path_of(&server.get_exec(&exec_request(&["true"], false, false)).unwrap().url);
    server.expire_tokens();
    assert_eq!(raw_request(&server, &get(&path, spdy)).await.0, 404);

    // Websocket with a subprotocol nobody serves: 403; port-forward over websocket without ports: 400.
    let ws = "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let path = path_of(&server.get_exec(&exec_request(&["true"], false, false)).unwrap().url);
    assert_eq!(
        raw_request(&server, &get(&path, &format!("{ws}Sec-WebSocket-Protocol: v9.channel.k8s.io\r\n")))
            .await
            .0,
        403
    );
    let pf = api::PortForwardRequest { pod_sandbox_id: "p".into(), port: vec![] };
    let path = path_of(&server.get_port_forward(&pf).unwrap().url);
    assert_eq!(raw_request(&server, &get(&path, ws)).await.0, 400);

    // A successful websocket upgrade answers 101 with the chosen subprotocol.
    let path = path_of(&server.get_exec(&exec_request(&["true"], false, false)).unwrap().url);
    let (code, head) =
        raw_request(&server, &get(&path, &format!("{ws}Sec-WebSocket-Protocol: v4.channel.k8s.io\r\n")))
            .await;
    assert_eq!(code, 101);
    assert!(head.to_ascii_lowercase().contains("sec-websocket-protocol: v4.channel.k8s.io"), "{head}");
    assert!(head.contains("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "{head}");
}

// ---- The Python client's websocket ----

const PY_EXEC: &str = r#"
import json, sys
from kubernetes.client import Configuration
from kubernetes.stream.ws_client import WSClient, RESIZE_CHANNEL
url, protocol, mode = sys.argv[1], sys.argv[2], sys.argv[3]
ws = WSClient(Configuration(), "ws" + url[4:], {"sec-websocket-protocol": protocol}, capture_all=True)
out = {"subprotocol": ws.subprotocol}
if mode == "idle":
    ws.run_forever(timeout=120)
    print(json.dumps({"open": ws.is_open()}))
    sys.exit(0)
if mode == "stdio":
    # Nothing is written before stdin arrives but the empty "open" message: a ping gets its pong.
    from websocket import ABNF
    ws.sock.ping(b"keel")
    for _ in range(5):
        op, frame = ws.sock.recv_data_frame(True)
        if op == ABNF.OPCODE_PONG:
            out["pong"] = frame.data.decode()
            break
    ws.write_stdin("hello\n")
elif mode == "close":
    ws.write_stdin("first\nsecond\n")
    ws.close_channel(0)
elif mode == "resize":
    def size_line():
        for _ in range(20):
            parts = ws.readline_stdout(timeout=10).strip().split()
            if len(parts) == 2 and all(p.isdigit() for p in parts):
                return " ".join(parts)
        return None
    seen = []
    for width, height in [(100, 30), (120, 40)]:
        ws.write_channel(RESIZE_CHANNEL, json.dumps({"Width": width, "Height": height}))
        want = "%d %d" % (height, width)
        for _ in range(200):
            ws.write_stdin("s\n")
            if size_line() == want:
                seen.append(want)
                break
    out["seen"] = seen
    ws.write_stdin("q\n")
ws.run_forever(timeout=30)
out["stdout"] = ws.read_channel(1)
out["stderr"] = ws.read_channel(2)
out["returncode"] = ws.returncode
print(json.dumps(out))
"#;

async fn python(script: &str, args: &[&str]) -> Value {
    let python = keel_testbed::python::python().unwrap();
    let output =
        tokio::process::Command::new(python).arg("-c").arg(script).args(args).output().await.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "python failed: {stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_str(stdout.trim()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn python_websocket_exec_v4_and_v5_and_attach() {
    let server = server().await;
    let script = ["sh", "-c", "read line; echo out:$line; echo err:$line >&2; exit 3"];
    for protocol in ["v4.channel.k8s.io", "v5.channel.k8s.io"] {
        let url = server.get_exec(&exec_request(&script, true, false)).unwrap().url;
        let out = python(PY_EXEC, &[&url, protocol, "stdio"]).await;
        assert_eq!(out["subprotocol"], protocol);
        assert_eq!(out["pong"], "keel");
        assert_eq!(out["stdout"], "out:hello\n");
        assert_eq!(out["stderr"], "err:hello\n");
        assert_eq!(out["returncode"], 3, "{out}");
    }
    // v5's close channel ends stdin: cat sees EOF and exits 0.
    let url = server.get_exec(&exec_request(&["cat"], true, false)).unwrap().url;
    let out = python(PY_EXEC, &[&url, "v5.channel.k8s.io", "close"]).await;
    assert_eq!(out["stdout"], "first\nsecond\n");
    assert_eq!(out["returncode"], 0, "{out}");

    // Attach the same way (the test backend's container echoes stdin until it closes).
    let attach =
        api::AttachRequest { container_id: "c1".into(), stdin: true, stdout: true, ..Default::default() };
    let url = server.get_attach(&attach).unwrap().url;
    let out = python(PY_EXEC, &[&url, "v5.channel.k8s.io", "close"]).await;
    assert_eq!(out["stdout"], "first\nsecond\n");
    assert_eq!(out["returncode"], 0, "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn python_websocket_tty_resize() {
    let server = server().await;
    let script = ["sh", "-c", "while read a; do [ \"$a\" = q ] && exit 0; stty size; done"];
    let url = server.get_exec(&exec_request(&script, true, true)).unwrap().url;
    let out = python(PY_EXEC, &[&url, "v5.channel.k8s.io", "resize"]).await;
    assert_eq!(out["seen"], serde_json::json!(["30 100", "40 120"]), "{out}");
    assert_eq!(out["returncode"], 0, "{out}");
}

// ---- kubectl 1.27 over SPDY/3.1 ----

/// Canned apiserver answers for kubectl; exec/attach/portforward POSTs go to the next queued URL.
struct ApiFront {
    addr: std::net::SocketAddr,
    urls: Arc<Mutex<VecDeque<String>>>,
    /// The `Upgrade` header of each forwarded request, in order.
    upgrades: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

const POD: &str = r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"default","uid":"u1"},
"spec":{"containers":[{"name":"c","image":"busybox"}]},
"status":{"phase":"Running","containerStatuses":[{"name":"c","ready":true,"restartCount":0,"image":"busybox","imageID":"","state":{"running":{}}}]}}"#;
const API_RESOURCES: &str = r#"{"kind":"APIResourceList","groupVersion":"v1","resources":[
{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["get","list"],"shortNames":["po"]},
{"name":"pods/exec","singularName":"","namespaced":true,"kind":"PodExecOptions","verbs":["create","get"]},
{"name":"pods/attach","singularName":"","namespaced":true,"kind":"PodAttachOptions","verbs":["create","get"]},
{"name":"pods/portforward","singularName":"","namespaced":true,"kind":"PodPortForwardOptions","verbs":["create","get"]}]}"#;

impl ApiFront {
    async fn start() -> ApiFront {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let urls: Arc<Mutex<VecDeque<String>>> = Arc::default();
        let upgrades: Arc<Mutex<Vec<String>>> = Arc::default();
        let (queue, seen) = (urls.clone(), upgrades.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(front_connection(tcp, queue.clone(), seen.clone()));
            }
        });
        ApiFront { addr, urls, upgrades, task }
    }

    fn push(&self, url: String) {
        self.urls.lock().unwrap().push_back(url);
    }
}

async fn front_connection(
    tcp: TcpStream,
    urls: Arc<Mutex<VecDeque<String>>>,
    upgrades: Arc<Mutex<Vec<String>>>,
) {
    let mut reader = tokio::io::BufReader::new(tcp);
    loop {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                return;
            }
            head.push_str(&line);
            if line == "\r\n" {
                break;
            }
        }
        let path = head.split_whitespace().nth(1).unwrap_or_default().to_owned();
        let route = path.split('?').next().unwrap_or_default();
        if route.ends_with("/exec") || route.ends_with("/attach") || route.ends_with("/portforward") {
            let Some(url) = urls.lock().unwrap().pop_front() else { return };
            let upgrade = head.lines().find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("upgrade").then(|| value.trim().to_owned())
            });
            upgrades.lock().unwrap().push(upgrade.unwrap_or_default());
            let url_path = path_of(&url);
            let target = url.strip_prefix("http://").unwrap().split('/').next().unwrap().to_owned();
            let head = head.replacen(&path, &url_path, 1);
            let mut upstream = TcpStream::connect(target).await.unwrap();
            upstream.write_all(head.as_bytes()).await.unwrap();
            let buffered = reader.buffer().to_vec();
            upstream.write_all(&buffered).await.unwrap();
            let mut client = reader.into_inner();
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            return;
        }
        let (status, body) = match route {
            "/api" => {
                ("200 OK", r#"{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[]}"#)
            }
            "/apis" => ("200 OK", r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#),
            "/api/v1" => ("200 OK", API_RESOURCES),
            "/api/v1/namespaces/default/pods/p" => ("200 OK", POD),
            _ => (
                "404 Not Found",
                r#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}"#,
            ),
        };
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if reader.get_mut().write_all(response.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// kubectl 1.27 (SPDY only: websockets came in 1.29 behind a gate) aimed at `front`.
fn kubectl(front: &ApiFront, dir: &tempfile::TempDir) -> tokio::process::Command {
    kubectl_minor(27, front, dir)
}

/// kubectl 1.`minor` aimed at `front`.
fn kubectl_minor(minor: u32, front: &ApiFront, dir: &tempfile::TempDir) -> tokio::process::Command {
    let kubectl = keel_testbed::kubectl::installed()
        .into_iter()
        .find(|k| k.minor == minor)
        .map(|k| k.path)
        .unwrap_or_else(|| PathBuf::from(format!("/usr/lib/google-cloud-sdk/bin/kubectl.1.{minor}")));
    let mut command = tokio::process::Command::new(kubectl);
    command
        .env("KUBECONFIG", dir.path().join("kubeconfig"))
        .env("HOME", dir.path())
        .arg(format!("--server=http://{}", front.addr))
        .arg(format!("--cache-dir={}", dir.path().join("cache").display()))
        .arg("--namespace=default")
        .kill_on_drop(true);
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_spdy_exec_attach_and_exit_codes() {
    let server = server().await;
    let front = ApiFront::start().await;
    let dir = tempfile::tempdir().unwrap();
    let script = "read line; echo out:$line; echo err:$line >&2; exit 3";

    front.push(server.get_exec(&exec_request(&["sh", "-c", script], true, false)).unwrap().url);
    let mut child = kubectl(&front, &dir)
        .args(["exec", "-i", "p", "-c", "c", "--", "sh", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").await.unwrap();
    let output = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(String::from_utf8_lossy(&output.stdout), "out:hello\n", "{stderr}");
    assert!(stderr.contains("err:hello\n"), "{stderr}");
    assert!(stderr.contains("command terminated with exit code 3"), "{stderr}");
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(front.upgrades.lock().unwrap()[0], "SPDY/3.1");

    front.push(server.get_exec(&exec_request(&["sh", "-c", "echo fine"], false, false)).unwrap().url);
    let output =
        kubectl(&front, &dir).args(["exec", "p", "--", "sh", "-c", "echo fine"]).output().await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "fine\n",
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(0));

    let attach =
        api::AttachRequest { container_id: "c1".into(), stdin: true, stdout: true, ..Default::default() };
    front.push(server.get_attach(&attach).unwrap().url);
    let mut child = kubectl(&front, &dir)
        .args(["attach", "-i", "p", "-c", "c", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"attached\n").await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(String::from_utf8_lossy(&output.stdout).contains("attached\n"), "{stderr}");
}

const PY_PTY: &str = r#"
import fcntl, json, os, pty, struct, sys, termios, time
argv = sys.argv[1:]
pid, fd = pty.fork()
if pid == 0:
    os.execv(argv[0], argv)
def resize(rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
buf = b""
seen = []
for rows, cols in [(30, 100), (40, 120)]:
    resize(rows, cols)
    want = ("%d %d" % (rows, cols)).encode()
    for _ in range(300):
        os.write(fd, b"s\n")
        time.sleep(0.05)
        try:
            buf += os.read(fd, 65536)
        except OSError:
            break
        if want in buf:
            seen.append(want.decode())
            buf = b""
            break
os.write(fd, b"q\n")
while True:
    try:
        if not os.read(fd, 65536):
            break
    except OSError:
        break
_, status = os.waitpid(pid, 0)
print(json.dumps({"seen": seen, "exit": os.waitstatus_to_exitcode(status)}))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_spdy_tty_resize() {
    let server = server().await;
    let front = ApiFront::start().await;
    let dir = tempfile::tempdir().unwrap();
    let script = "while read a; do [ \"$a\" = q ] && exit 0; stty size; done";
    front.push(server.get_exec(&exec_request(&["sh", "-c", script], true, true)).unwrap().url);
    let command = kubectl(&front, &dir);
    let std = command.as_std();
    let mut argv = vec![std.get_program().to_string_lossy().into_owned()];
    argv.extend(std.get_args().map(|a| a.to_string_lossy().into_owned()));
    argv.extend(["exec", "-it", "p", "-c", "c", "--", "sh", "-c", script].map(str::to_owned));
    let mut env = Vec::new();
    for (key, value) in std.get_envs() {
        if let Some(value) = value {
            env.push((key.to_owned(), value.to_owned()));
        }
    }
    let python = keel_testbed::python::python().unwrap();
    let output = tokio::process::Command::new(python)
        .arg("-c")
        .arg(PY_PTY)
        .args(&argv)
        .envs(env)
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let out: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(out["seen"], serde_json::json!(["30 100", "40 120"]), "{out}");
    assert_eq!(out["exit"], 0, "{out}");
}

async fn echo_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = tcp.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    port
}

/// A port nothing listens on (bound then released).
async fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_spdy_port_forward_two_ports_and_errors() {
    let server = server().await;
    let front = ApiFront::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (first, second, closed) = (echo_server().await, echo_server().await, closed_port().await);
    let pf = api::PortForwardRequest { pod_sandbox_id: "sandbox1".into(), port: vec![] };
    front.push(server.get_port_forward(&pf).unwrap().url);
    let stderr_path = dir.path().join("stderr");
    let mut child = kubectl(&front, &dir)
        .args(["port-forward", "pod/p", &format!(":{first}"), &format!(":{second}"), &format!(":{closed}")])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut local = std::collections::HashMap::new();
    while local.len() < 3 {
        let line = lines.next_line().await.unwrap().expect("kubectl port-forward ended early");
        // "Forwarding from 127.0.0.1:LOCAL -> REMOTE"
        if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
            let (from, to) = rest.split_once(" -> ").unwrap();
            local.insert(to.parse::<u16>().unwrap(), from.parse::<u16>().unwrap());
        }
    }
    for (remote, payload) in [(first, &b"to the first port"[..]), (second, &b"and the second"[..])] {
        for round in 0..2 {
            let mut tcp = TcpStream::connect(("127.0.0.1", local[&remote])).await.unwrap();
            let message = [payload, format!(" #{round}").as_bytes()].concat();
            tcp.write_all(&message).await.unwrap();
            let mut echoed = vec![0u8; message.len()];
            tcp.read_exact(&mut echoed).await.unwrap();
            assert_eq!(echoed, message);
        }
    }
    // Two forwarded connections at once on one port.
    let mut a = TcpStream::connect(("127.0.0.1", local[&first])).await.unwrap();
    let mut b = TcpStream::connect(("127.0.0.1", local[&first])).await.unwrap();
    a.write_all(b"aaa").await.unwrap();
    b.write_all(b"bbb").await.unwrap();
    let mut got = [0u8; 3];
    b.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"bbb");
    a.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"aaa");

    // Nothing listens on `closed`: the error stream carries the backend's error, kubectl prints it.
    let mut tcp = TcpStream::connect(("127.0.0.1", local[&closed])).await.unwrap();
    let mut rest = Vec::new();
    let _ = tcp.read_to_end(&mut rest).await;
    assert!(rest.is_empty());
    let wanted = format!("error forwarding port {closed} to pod sandbox1");
    let mut stderr = String::new();
    for _ in 0..200 {
        stderr = std::fs::read_to_string(&stderr_path).unwrap();
        if stderr.contains(&wanted) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(stderr.contains(&wanted), "{stderr}");
    child.kill().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_133_exec_over_websocket_v5() {
    let server = server().await;
    let front = ApiFront::start().await;
    let dir = tempfile::tempdir().unwrap();
    // cat ends at stdin's EOF, which only v5's close channel carries over a websocket.
    let script = "cat; echo done >&2; exit 4";
    front.push(server.get_exec(&exec_request(&["sh", "-c", script], true, false)).unwrap().url);
    let mut child = kubectl_minor(33, &front, &dir)
        .args(["exec", "-i", "p", "-c", "c", "--", "sh", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"one\ntwo\n").await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(String::from_utf8_lossy(&output.stdout), "one\ntwo\n", "{stderr}");
    assert!(stderr.contains("done\n"), "{stderr}");
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    assert_eq!(front.upgrades.lock().unwrap()[0].to_ascii_lowercase(), "websocket");
}

const PY_PORT_FORWARD: &str = r#"
import json, sys
from kubernetes.client import Configuration
from kubernetes.stream.ws_client import portforward_call
url, echo, closed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
pf = portforward_call(Configuration(), "GET", "%s?ports=%d,%d" % (url, echo, closed))
out = {}
s = pf.socket(echo)
s.setblocking(True)
s.sendall(b"over the websocket")
got = b""
while len(got) < 18:
    chunk = s.recv(1024)
    if not chunk:
        break
    got += chunk
out["echo"] = got.decode()
c = pf.socket(closed)
c.setblocking(True)
while c.recv(1024):
    pass
out["error"] = pf.error(closed)
print(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn python_websocket_port_forward() {
    let server = server().await;
    let (echo, closed) = (echo_server().await, closed_port().await);
    let pf =
        api::PortForwardRequest { pod_sandbox_id: "sandbox1".into(), port: vec![echo.into(), closed.into()] };
    let url = server.get_port_forward(&pf).unwrap().url;
    let out = python(PY_PORT_FORWARD, &[&url, &echo.to_string(), &closed.to_string()]).await;
    assert_eq!(out["echo"], "over the websocket");
    let error = out["error"].as_str().unwrap_or_default();
    assert!(error.starts_with(&format!("error forwarding port {closed} to pod sandbox1")), "{out}");
}

/// Megabytes both ways through `cat`: nothing waits for a window (SPDY) or loses a frame.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_large_transfers_over_spdy_and_websocket() {
    let server = server().await;
    let front = ApiFront::start().await;
    let dir = tempfile::tempdir().unwrap();
    let payload: Vec<u8> = (0..4u32 << 20).map(|i| (i % 251) as u8).collect();
    for minor in [27, 33] {
        front.push(server.get_exec(&exec_request(&["cat"], true, false)).unwrap().url);
        let mut child = kubectl_minor(minor, &front, &dir)
            .args(["exec", "-i", "p", "--", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let sent = payload.clone();
        let writer = tokio::spawn(async move {
            stdin.write_all(&sent).await.unwrap();
        });
        let output = child.wait_with_output().await.unwrap();
        writer.await.unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        assert_eq!(output.stdout.len(), payload.len(), "kubectl 1.{minor}");
        assert!(output.stdout == payload, "kubectl 1.{minor}: the bytes differ");
    }
}

/// A session nobody writes to is closed after the idle timeout (1 s here, 4 h by default); the
/// command's stdin then ends.
#[tokio::test(flavor = "multi_thread")]
async fn idle_websocket_sessions_are_closed() {
    let config = StreamConfig { idle_timeout: Duration::from_secs(1), ..StreamConfig::default() };
    let server = Server::start_with(DEFAULT_ADDR, config, HostBackend).await.unwrap();
    let url = server.get_exec(&exec_request(&["cat"], true, false)).unwrap().url;
    let out = python(PY_EXEC, &[&url, "v5.channel.k8s.io", "idle"]).await;
    assert_eq!(out["open"], false);
}
