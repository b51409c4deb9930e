//! The "streaming" group: Exec, Attach and PortForward answer a URL of the runtime's streaming server
//! that the kubelet hands to clients. Each URL is served (an HTTP answer other than 404 to a request
//! without an upgrade) and single-use (the same URL again: 404); and real sessions run through fresh
//! URLs with the Python `kubernetes` client (websocket, `v4.channel.k8s.io`, which containerd 1.6's
//! streaming server speaks too): exec with its output and exit code, attach to a container's output,
//! and port-forward of an HTTP server in the pod.
//!
//! critest's "Streaming" cases run exec, attach and port-forward over SPDY (its default transport) and
//! check only output: exec of `echo` without and with a tty, attach echoing stdin, port-forward of nginx
//! (also in the host network). The cases here add the websocket transport (`v4.channel.k8s.io`), exec's
//! exit codes and stderr, single-use URLs and NotFound for an unknown container.

use std::net::{SocketAddr, ToSocketAddrs};

use super::support::{expect_code, http_get, http_server, in_node, new_pod, rpc, run_container};
use super::{CaseResult, CriClient, Env, api, case, ensure};

const GROUP: &str = "streaming";

/// Runs every case of the group (one pod, one running container).
pub async fn run(client: &mut CriClient, env: &Env) -> Vec<CaseResult> {
    let setup = async {
        let (pod_id, pod) = new_pod(client, env, "streaming").await?;
        let server = http_server("8080", SERVED);
        let server: Vec<&str> = server.iter().map(String::as_str).collect();
        let id = run_container(client, env, &pod_id, &pod, "streaming", &server).await?;
        let ticker = ["sh", "-c", "while true; do echo tick; sleep 0.2; done"];
        let ticker = run_container(client, env, &pod_id, &pod, "ticker", &ticker).await?;
        Ok::<_, String>((pod_id, id, ticker))
    };
    let (pod_id, id, ticker) = match setup.await {
        Ok(ids) => ids,
        Err(e) => return vec![case(GROUP, "setup: a running container", Err(e))],
    };
    let exec = api::ExecRequest {
        container_id: id.clone(),
        cmd: vec!["echo".to_owned(), "hello".to_owned()],
        stdout: true,
        ..Default::default()
    };
    let attach =
        api::AttachRequest { container_id: id.clone(), stdout: true, stderr: true, ..Default::default() };
    let forward = api::PortForwardRequest { pod_sandbox_id: pod_id.clone(), port: vec![8080] };
    let exec_url = client.runtime.exec(exec.clone()).await.map(|r| r.into_inner().url);
    let attach_url = client.runtime.attach(attach).await.map(|r| r.into_inner().url);
    let forward_url = client.runtime.port_forward(forward).await.map(|r| r.into_inner().url);
    let unknown = api::ExecRequest { container_id: "f".repeat(64), ..exec };
    let exec_session = exec_session(client, env, &id).await;
    let forward_session = forward_session(client, env, &pod_id).await;
    let attach_session = attach_session(client, env, &ticker).await;
    vec![
        case(GROUP, "runtime should support exec: a served URL", served(env, "Exec", exec_url)),
        case(GROUP, "runtime should support exec: output and exit code over websocket", exec_session),
        case(GROUP, "runtime should support portforward: HTTP through the forward", forward_session),
        case(GROUP, "runtime should support attach: the container's output over websocket", attach_session),
        case(GROUP, "runtime should support attach: a served URL", served(env, "Attach", attach_url)),
        case(
            GROUP,
            "runtime should support portforward: a served URL",
            served(env, "PortForward", forward_url),
        ),
        case(
            GROUP,
            "exec in an unknown container: NotFound",
            expect_code(
                "Exec of an unknown container",
                client.runtime.exec(unknown).await,
                tonic::Code::NotFound,
            ),
        ),
    ]
}

/// `http://HOST:PORT/PATH` → the address and the path.
fn split_url(url: &str) -> Result<(SocketAddr, String), String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| format!("URL {url:?} is not http://"))?;
    let (authority, path) =
        rest.split_once('/').map_or((rest, "/".to_owned()), |(a, p)| (a, format!("/{p}")));
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| format!("URL {url:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("URL {url:?} names no address"))?;
    Ok((addr, path))
}

fn served(env: &Env, rpc_name: &str, url: Result<String, tonic::Status>) -> Result<(), String> {
    let url = url.map_err(|s| rpc(rpc_name, &s))?;
    let (addr, path) = split_url(&url)?;
    let (first, _) = http_get(env, addr, &path)?;
    ensure(first != 404, || format!("{rpc_name} URL {url} answered 404"))?;
    let (second, _) = http_get(env, addr, &path)?;
    ensure(second == 404, || format!("{rpc_name} URL {url} answered {second} when used again, expected 404"))
}

/// What the group's container serves on port 8080.
const SERVED: &str = "served-through-the-port-forward";

/// The Python client's exec over websocket: `url`, then the JSON of stdout, stderr and return code.
const PY_EXEC: &str = r#"
import json, sys
from kubernetes.client import Configuration
from kubernetes.stream.ws_client import WSClient
url = sys.argv[1]
ws = WSClient(Configuration(), "ws" + url[4:], {"sec-websocket-protocol": "v4.channel.k8s.io"}, capture_all=True)
ws.run_forever(timeout=30)
print(json.dumps({"stdout": ws.read_channel(1), "stderr": ws.read_channel(2), "returncode": ws.returncode}))
"#;

/// The Python client's port-forward: an HTTP/1.0 GET of `/` through `url` to `port`, the answer.
const PY_FORWARD: &str = r#"
import json, sys
from kubernetes.client import Configuration
from kubernetes.stream.ws_client import portforward_call
url, port = sys.argv[1], int(sys.argv[2])
pf = portforward_call(Configuration(), "GET", "%s?ports=%d" % (url, port))
s = pf.socket(port)
s.setblocking(True)
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
got = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    got += chunk
print(json.dumps({"answer": got.decode(errors="replace"), "error": pf.error(port)}))
"#;

/// The Python client's attach: `url`, then the JSON of what it read on stdout until a `tick` line.
const PY_ATTACH: &str = r#"
import json, sys
from kubernetes.client import Configuration
from kubernetes.stream.ws_client import WSClient
url = sys.argv[1]
ws = WSClient(Configuration(), "ws" + url[4:], {"sec-websocket-protocol": "v4.channel.k8s.io"}, capture_all=True)
got = ""
for _ in range(50):
    got += ws.read_stdout(timeout=1) or ""
    if "tick\n" in got:
        break
ws.close()
print(json.dumps({"stdout": got}))
"#;

/// Runs `script` with `args` in the venv's Python inside the node (where the streaming server
/// listens) and parses the JSON it prints.
fn python_in_node(env: &Env, script: &'static str, args: Vec<String>) -> Result<serde_json::Value, String> {
    let python = keel_testbed::python::python().map_err(|e| format!("{e:#}"))?;
    let output =
        in_node(env, move || std::process::Command::new(python).arg("-c").arg(script).args(args).output())?
            .map_err(|e| format!("running python: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    ensure(output.status.success(), || {
        format!("python failed: {stdout}\n{}", String::from_utf8_lossy(&output.stderr))
    })?;
    serde_json::from_str(stdout.trim()).map_err(|e| format!("python printed {stdout:?}: {e}"))
}

/// Exec of `echo` and of a command exiting 3, each through its own URL.
async fn exec_session(client: &mut CriClient, env: &Env, id: &str) -> Result<(), String> {
    for (cmd, stdout, code) in [
        (vec!["echo", "hello", "stream"], "hello stream\n", 0),
        (vec!["sh", "-c", "echo out; echo err >&2; exit 3"], "out\n", 3),
    ] {
        let request = api::ExecRequest {
            container_id: id.to_owned(),
            cmd: cmd.iter().map(|s| (*s).to_owned()).collect(),
            stdout: true,
            stderr: true,
            ..Default::default()
        };
        let url = client.runtime.exec(request).await.map_err(|s| rpc("Exec", &s))?.into_inner().url;
        let out = python_in_node(env, PY_EXEC, vec![url])?;
        ensure(out["stdout"] == stdout && out["returncode"] == code, || {
            format!("exec {cmd:?}: expected stdout {stdout:?} and exit code {code}, got {out}")
        })?;
        if code != 0 {
            ensure(out["stderr"] == "err\n", || format!("exec {cmd:?}: stderr {}", out["stderr"]))?;
        }
    }
    Ok(())
}

/// Port-forward to the container's HTTP server on 8080 (it may still be starting: retried).
async fn forward_session(client: &mut CriClient, env: &Env, pod_id: &str) -> Result<(), String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let request = api::PortForwardRequest { pod_sandbox_id: pod_id.to_owned(), port: vec![8080] };
        let url =
            client.runtime.port_forward(request).await.map_err(|s| rpc("PortForward", &s))?.into_inner().url;
        let out = python_in_node(env, PY_FORWARD, vec![url, "8080".to_owned()])?;
        let answer = out["answer"].as_str().unwrap_or_default();
        if answer.contains(SERVED) {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!("no answer from the pod's port 8080 through the forward: {out}"));
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// Attach to a container printing `tick` five times a second: its output reaches the client.
async fn attach_session(client: &mut CriClient, env: &Env, id: &str) -> Result<(), String> {
    let request = api::AttachRequest { container_id: id.to_owned(), stdout: true, ..Default::default() };
    let url = client.runtime.attach(request).await.map_err(|s| rpc("Attach", &s))?.into_inner().url;
    let out = python_in_node(env, PY_ATTACH, vec![url])?;
    ensure(out["stdout"].as_str().is_some_and(|s| s.contains("tick\n")), || {
        format!("attach read no tick from the container: {out}")
    })
}
