//! keel-shim as a process: its command-line errors, its socket (stale, live, mode, removal on
//! SIGTERM/SIGINT), the RPCs it serves beyond the suite's assertions, and `Unimplemented` for the rest.

use crate::cri_suite;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Result, ensure};
use cri_suite::{CriClient, api};
use keel_testbed::{Daemon, Readiness};
use tonic::Code;

const BIN: &str = env!("CARGO_BIN_EXE_keel-shim");

fn command(dir: &Path, socket: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("--socket").arg(socket);
    cmd.arg("--root").arg(dir.join("root"));
    cmd.arg("--cni-conf-dir").arg(dir.join("net.d"));
    cmd.arg("--cni-bin-dir").arg("/usr/lib/cni");
    cmd
}

fn start(dir: &Path, socket: &Path) -> Result<Daemon> {
    Daemon::start(
        "keel-shim",
        command(dir, socket),
        Readiness::UnixSocket(socket.to_owned()),
        Duration::from_secs(20),
    )
}

/// Runs keel-shim expecting it to fail; returns its stderr.
fn fails(mut cmd: Command) -> Result<String> {
    let output = cmd.output()?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    ensure!(!output.status.success(), "keel-shim succeeded: {stderr}");
    Ok(stderr)
}

#[test]
fn command_line_errors_are_reported_before_anything_is_made() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("cri.sock");
    for (extra, expect) in [
        (vec!["--runtime", "runc"], "expected NAME=BINARY"),
        (vec!["--runtime", "Bad_Name=runc"], "DNS label"),
        (vec!["--runtime", "kata=/nonexistent/kata-runtime"], "/nonexistent/kata-runtime"),
        (vec!["--runtime", "crun=no-such-runtime-binary"], "not an executable file in PATH"),
        (vec!["--insecure-registry", "localhost"], "expected HOST:PORT"),
        (vec!["--registry-mirror", "registry.k8s.io=127.0.0.1:5000"], "expected REGISTRY=URL"),
    ] {
        let mut cmd = command(dir.path(), &socket);
        cmd.args(&extra);
        let stderr = fails(cmd)?;
        ensure!(stderr.contains(expect), "{extra:?}: {stderr}");
    }
    let long = PathBuf::from(format!("{}/{}", dir.path().display(), "s".repeat(108)));
    let stderr = fails(command(dir.path(), &long))?;
    ensure!(stderr.contains("too long for a unix socket path"), "{stderr}");
    // A missing flag is clap's usage error.
    let stderr = fails({
        let mut cmd = Command::new(BIN);
        cmd.args(["--socket", "/tmp/x.sock"]);
        cmd
    })?;
    ensure!(stderr.contains("--root"), "{stderr}");
    ensure!(std::fs::read_dir(dir.path())?.next().is_none(), "a failed start left files behind");
    Ok(())
}

#[test]
fn socket_mode_stale_socket_and_a_live_one() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("cri.sock");
    // A stale socket (bound, nobody listening any more) is replaced.
    drop(std::os::unix::net::UnixListener::bind(&socket)?);
    ensure!(socket.exists());
    let mut shim = start(dir.path(), &socket)?;
    let meta = std::fs::symlink_metadata(&socket)?;
    ensure!(meta.file_type().is_socket());
    ensure!(meta.permissions().mode() & 0o777 == 0o660, "mode {:o}", meta.permissions().mode());
    // A second keel-shim on the same socket refuses, and leaves the first one serving.
    let stderr = fails(command(dir.path(), &socket))?;
    ensure!(stderr.contains("answers on"), "{stderr}");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(CriClient::connect(&socket))?;
    // SIGTERM: a clean exit and the socket removed, even though the client above still holds its
    // connection open and never answers the server's GOAWAY (its runtime is not running).
    let status = shim.stop()?;
    ensure!(status.success(), "keel-shim exited with {status}: {}", shim.log_tail(20));
    ensure!(!socket.exists(), "the socket is left after SIGTERM");
    Ok(())
}

#[test]
fn a_path_that_is_not_a_socket_is_never_replaced() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("cri.sock");
    std::fs::write(&socket, "precious")?;
    let stderr = fails(command(dir.path(), &socket))?;
    ensure!(stderr.contains("not a unix socket"), "{stderr}");
    ensure!(std::fs::read_to_string(&socket)? == "precious");
    Ok(())
}

#[test]
fn sigint_removes_the_socket() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("cri.sock");
    let mut child = command(dir.path(), &socket).stderr(std::process::Stdio::null()).spawn()?;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id())?);
    // Ready once the socket accepts (bounded: the child is killed on failure).
    let ready = (0..400).any(|_| {
        std::thread::sleep(Duration::from_millis(25));
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    if !ready {
        let _ = child.kill();
        let _ = child.wait();
        anyhow::bail!("keel-shim never answered on {}", socket.display());
    }
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT)?;
    let status = child.wait()?;
    ensure!(status.success(), "exit {status}");
    ensure!(!socket.exists());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keel_shim_specifics_and_unimplemented_rpcs() -> Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("net.d"))?;
    let socket = dir.path().join("cri.sock");
    let mut shim = start(dir.path(), &socket)?;
    let mut cri = CriClient::connect(&socket).await?;

    let v = cri.runtime.version(api::VersionRequest { version: "v1".into() }).await?.into_inner();
    ensure!(v.runtime_name == "keel-shim" && v.runtime_version == env!("CARGO_PKG_VERSION"), "{v:?}");

    let config = cri.runtime.runtime_config(api::RuntimeConfigRequest {}).await?.into_inner();
    ensure!(
        config.linux.map(|l| l.cgroup_driver) == Some(api::CgroupDriver::Cgroupfs.into()),
        "cgroup driver is not cgroupfs"
    );

    // The pod CIDR is recorded (shown in verbose Status); a bad one is InvalidArgument and changes nothing.
    let update = |cidr: &str| api::UpdateRuntimeConfigRequest {
        runtime_config: Some(api::RuntimeConfig {
            network_config: Some(api::NetworkConfig { pod_cidr: cidr.to_owned() }),
        }),
    };
    cri.runtime.update_runtime_config(update("10.244.1.0/24,fd00:10:244:1::/64")).await?;
    for bad in ["10.244.1.0/33", "not-a-cidr", "10.244.1.0/24,"] {
        let err = cri.runtime.update_runtime_config(update(bad)).await.unwrap_err();
        ensure!(err.code() == Code::InvalidArgument, "{bad}: {err:?}");
    }
    // An empty CIDR keeps the recorded one.
    cri.runtime.update_runtime_config(update("")).await?;
    let status = cri.runtime.status(api::StatusRequest { verbose: true }).await?.into_inner();
    ensure!(status.info.get("podCIDR").map(String::as_str) == Some("10.244.1.0/24,fd00:10:244:1::/64"));
    ensure!(status.info.get("lastCNILoadStatus").is_some_and(|s| s.contains("no network config found")));

    // The network becomes ready when a config appears (read at each Status).
    std::fs::write(
        dir.path().join("net.d/10-pods.conflist"),
        r#"{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge"}]}"#,
    )?;
    let status = cri.runtime.status(api::StatusRequest { verbose: false }).await?.into_inner();
    let conditions = status.status.map(|s| s.conditions).unwrap_or_default();
    ensure!(conditions.iter().any(|c| c.r#type == "NetworkReady" && c.status), "{conditions:?}");

    // Every RPC not built yet is Unimplemented, naming itself.
    let err = cri.runtime.checkpoint_container(api::CheckpointContainerRequest::default()).await.unwrap_err();
    ensure!(err.code() == Code::Unimplemented && err.message().contains("CheckpointContainer"), "{err:?}");
    // A RunPodSandbox without a config is bad input.
    let err = cri.runtime.run_pod_sandbox(api::RunPodSandboxRequest::default()).await.unwrap_err();
    ensure!(err.code() == Code::InvalidArgument, "{err:?}");
    // The image service is served: an empty store lists nothing.
    let images = cri.image.list_images(api::ListImagesRequest { filter: None }).await?.into_inner();
    ensure!(images.images.is_empty(), "{images:?}");
    // The container event stream opens (and has nothing to say yet).
    let mut events = cri.runtime.get_container_events(api::GetEventsRequest {}).await?.into_inner();
    let nothing = tokio::time::timeout(std::time::Duration::from_millis(100), events.message()).await;
    ensure!(nothing.is_err(), "an event from an empty runtime: {nothing:?}");
    // Bytes that are not HTTP/2 on a connection of their own are dropped with it.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut raw = tokio::net::UnixStream::connect(&socket).await?;
        raw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\x00\xff garbage").await?;
        let mut sink = Vec::new();
        let _ = raw.read_to_end(&mut sink).await;
    }
    // After all of it the server still answers.
    cri.runtime.version(api::VersionRequest { version: String::new() }).await?;
    // Stopped off the runtime, so the open client connection can answer the server's GOAWAY.
    let status = tokio::task::spawn_blocking(move || shim.stop()).await??;
    ensure!(status.success(), "keel-shim exited with {status}");
    Ok(())
}

/// A CRI client on grpc's C core (Python's grpcio, with its default channel options) is served: it sends
/// the percent-encoded socket path as `:authority`, which h2 alone resets with PROTOCOL_ERROR. Version
/// (unary), ListImages (a response with no items) and a NotFound status all reach the client as they
/// would from containerd.
/// A client's deadline (`grpc-timeout`) is answered DEADLINE_EXCEEDED with grpc-go's message, as
/// containerd answers it, not tonic's CANCELLED. The request is sent as raw HTTP/2 with the header and
/// no deadline of the client's own (tonic's and grpc's clients enforce theirs locally, so the answer
/// they report would not be the server's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_deadline_is_deadline_exceeded() -> Result<()> {
    use anyhow::Context as _;
    use http_body_util::BodyExt;
    use prost::Message;

    let dir = tempfile::tempdir()?;
    std::fs::create_dir(dir.path().join("net.d"))?;
    let socket = dir.path().join("cri.sock");
    let _shim = start(dir.path(), &socket)?;
    // A registry that accepts connections and never answers: the pull would wait forever.
    let silent = std::net::TcpListener::bind("127.0.0.1:0")?;
    let pull = api::PullImageRequest {
        image: Some(api::ImageSpec {
            image: format!("{}/keel/silent:v1", silent.local_addr()?),
            ..Default::default()
        }),
        ..Default::default()
    };
    let message = pull.encode_to_vec();
    let mut body = vec![0_u8];
    body.extend(u32::try_from(message.len())?.to_be_bytes());
    body.extend(message);

    let stream = tokio::net::UnixStream::connect(&socket).await?;
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io).await?;
    tokio::spawn(connection);
    let request = http::Request::post("http://localhost/runtime.v1.ImageService/PullImage")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", "200m")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))?;
    // Bounded, so a server that enforces no deadline fails the test instead of hanging it.
    let answer = tokio::time::timeout(std::time::Duration::from_secs(30), sender.send_request(request));
    let response = answer.await.context("no answer 30 s after a 200 ms deadline")??;
    let (parts, body) = response.into_parts();
    let trailers = body.collect().await?.trailers().cloned();
    // A trailers-only answer carries the status in its headers.
    let status = tonic::Status::from_header_map(&parts.headers)
        .or_else(|| trailers.as_ref().and_then(tonic::Status::from_header_map))
        .context("no grpc-status in the answer")?;
    ensure!(
        status.code() == Code::DeadlineExceeded && status.message() == "context deadline exceeded",
        "{status:?}"
    );
    Ok(())
}

#[test]
fn a_client_on_grpc_c_core_is_served() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("cri.sock");
    let _shim = start(dir.path(), &socket)?;
    let python = keel_testbed::python::python()?;
    let script = r#"
import sys, grpc
channel = grpc.insecure_channel("unix://" + sys.argv[1])
ident = lambda b: b
def call(method, request):
    return channel.unary_unary(method, request_serializer=ident, response_deserializer=ident)(request, timeout=10)
# VersionRequest{version: "v1"}; VersionResponse{version, runtime_name, runtime_version, runtime_api_version}.
for _ in range(3):
    print("version", call("/runtime.v1.RuntimeService/Version", b"\n\x02v1").hex())
print("images", call("/runtime.v1.ImageService/ListImages", b"").hex())
try:
    # ContainerStatusRequest{container_id: "missing"}.
    call("/runtime.v1.RuntimeService/ContainerStatus", b"\n\x07missing")
    print("status no error")
except grpc.RpcError as e:
    print("status", e.code().name)
"#;
    let out = Command::new(python).arg("-c").arg(script).arg(&socket).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(out.status.success(), "grpcio client failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    let name = "keel-shim".bytes().map(|b| format!("{b:02x}")).collect::<String>();
    let versions: Vec<&str> = stdout.lines().filter_map(|l| l.strip_prefix("version ")).collect();
    ensure!(versions.len() == 3 && versions.iter().all(|v| v.contains(&name)), "{stdout}");
    ensure!(stdout.lines().any(|l| l == "images "), "{stdout}");
    ensure!(stdout.lines().any(|l| l == "status NOT_FOUND"), "{stdout}");
    Ok(())
}
