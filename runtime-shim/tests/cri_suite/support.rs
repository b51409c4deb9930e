//! What every group shares: the calls a case makes through a [`CriClient`] with errors as the strings a
//! [`super::CaseResult`] carries, unique pod and container names, waits bounded by a deadline, and HTTP
//! from inside the node.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::{CriClient, Env, api};

/// How long a case waits for a state a runtime reaches by itself (a container exits, a server listens).
pub const WAIT: Duration = Duration::from_secs(15);
/// How often it looks.
pub const POLL: Duration = Duration::from_millis(50);
/// The namespace of every pod the suite runs.
pub const NAMESPACE: &str = "keel-suite";

/// `what: Code: message`, for a failed call.
pub fn rpc(what: &str, status: &tonic::Status) -> String {
    format!("{what}: {:?}: {}", status.code(), status.message())
}

/// Fails unless `result` is an error with `code`.
pub fn expect_code<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, tonic::Status>,
    code: tonic::Code,
) -> Result<(), String> {
    match result {
        Err(status) if status.code() == code => Ok(()),
        Err(status) => Err(format!("{what}: {:?} ({}), expected {code:?}", status.code(), status.message())),
        Ok(value) => Err(format!("{what} succeeded ({value:?}), expected {code:?}")),
    }
}

/// A name unique within this process: `<base>-<n>`.
pub fn unique(base: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!("{base}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// A plain pod's config (keel-testbed's, as the kubelet sends it) named `<base>-<n>`, its log directory
/// made under the suite's scratch directory.
pub fn pod_config(env: &Env, base: &str) -> Result<api::PodSandboxConfig, String> {
    let name = unique(base);
    let log_dir = env.scratch.join("logs").join(&name);
    std::fs::create_dir_all(&log_dir).map_err(|e| format!("creating {}: {e}", log_dir.display()))?;
    Ok(keel_testbed::cri::pod_sandbox_config(NAMESPACE, &name, &format!("uid-{name}"), &log_dir))
}

/// RunPodSandbox with the suite's runtime handler.
pub async fn run_pod(
    client: &mut CriClient,
    env: &Env,
    config: &api::PodSandboxConfig,
) -> Result<String, String> {
    client
        .runtime
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: env.runtime_handler.clone(),
        })
        .await
        .map(|r| r.into_inner().pod_sandbox_id)
        .map_err(|s| rpc("RunPodSandbox", &s))
}

/// A plain pod named after `base`, running: its id and config.
pub async fn new_pod(
    client: &mut CriClient,
    env: &Env,
    base: &str,
) -> Result<(String, api::PodSandboxConfig), String> {
    let config = pod_config(env, base)?;
    let id = run_pod(client, env, &config).await?;
    Ok((id, config))
}

pub async fn pod_status(client: &mut CriClient, id: &str) -> Result<api::PodSandboxStatus, tonic::Status> {
    let response = client
        .runtime
        .pod_sandbox_status(api::PodSandboxStatusRequest { pod_sandbox_id: id.to_owned(), verbose: false })
        .await?;
    response.into_inner().status.ok_or_else(|| tonic::Status::internal("PodSandboxStatus has no status"))
}

pub async fn stop_pod(client: &mut CriClient, id: &str) -> Result<(), tonic::Status> {
    client.runtime.stop_pod_sandbox(api::StopPodSandboxRequest { pod_sandbox_id: id.to_owned() }).await?;
    Ok(())
}

pub async fn remove_pod(client: &mut CriClient, id: &str) -> Result<(), tonic::Status> {
    client.runtime.remove_pod_sandbox(api::RemovePodSandboxRequest { pod_sandbox_id: id.to_owned() }).await?;
    Ok(())
}

pub async fn list_pods(
    client: &mut CriClient,
    filter: Option<api::PodSandboxFilter>,
) -> Result<Vec<api::PodSandbox>, String> {
    client
        .runtime
        .list_pod_sandbox(api::ListPodSandboxRequest { filter })
        .await
        .map(|r| r.into_inner().items)
        .map_err(|s| rpc("ListPodSandbox", &s))
}

/// A container of the suite's image named `<base>-<n>` running `command`, logging to `<name>.log`.
pub fn container_config(env: &Env, base: &str, command: &[&str]) -> api::ContainerConfig {
    let name = unique(base);
    api::ContainerConfig {
        metadata: Some(api::ContainerMetadata { name: name.clone(), attempt: 0 }),
        image: Some(api::ImageSpec { image: env.image.clone(), ..Default::default() }),
        command: command.iter().map(|&part| part.to_owned()).collect(),
        log_path: format!("{name}.log"),
        labels: HashMap::from([("io.kubernetes.container.name".to_owned(), name.clone())]),
        linux: Some(api::LinuxContainerConfig::default()),
        ..Default::default()
    }
}

pub async fn create_container_raw(
    client: &mut CriClient,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
    config: &api::ContainerConfig,
) -> Result<String, tonic::Status> {
    let request = api::CreateContainerRequest {
        pod_sandbox_id: pod_id.to_owned(),
        config: Some(config.clone()),
        sandbox_config: Some(pod.clone()),
    };
    Ok(client.runtime.create_container(request).await?.into_inner().container_id)
}

pub async fn create_container(
    client: &mut CriClient,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
    config: &api::ContainerConfig,
) -> Result<String, String> {
    create_container_raw(client, pod_id, pod, config).await.map_err(|s| rpc("CreateContainer", &s))
}

pub async fn start_container(client: &mut CriClient, id: &str) -> Result<(), tonic::Status> {
    client.runtime.start_container(api::StartContainerRequest { container_id: id.to_owned() }).await?;
    Ok(())
}

/// A container created and started in `pod_id` running `command`: its id.
pub async fn run_container(
    client: &mut CriClient,
    env: &Env,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
    base: &str,
    command: &[&str],
) -> Result<String, String> {
    let config = container_config(env, base, command);
    let id = create_container(client, pod_id, pod, &config).await?;
    start_container(client, &id).await.map_err(|s| rpc("StartContainer", &s))?;
    Ok(id)
}

pub async fn stop_container(client: &mut CriClient, id: &str, timeout: i64) -> Result<(), tonic::Status> {
    client.runtime.stop_container(api::StopContainerRequest { container_id: id.to_owned(), timeout }).await?;
    Ok(())
}

pub async fn remove_container(client: &mut CriClient, id: &str) -> Result<(), tonic::Status> {
    client.runtime.remove_container(api::RemoveContainerRequest { container_id: id.to_owned() }).await?;
    Ok(())
}

pub async fn container_status(
    client: &mut CriClient,
    id: &str,
) -> Result<api::ContainerStatus, tonic::Status> {
    let request = api::ContainerStatusRequest { container_id: id.to_owned(), verbose: false };
    let response = client.runtime.container_status(request).await?;
    response.into_inner().status.ok_or_else(|| tonic::Status::internal("ContainerStatus has no status"))
}

pub async fn list_containers(
    client: &mut CriClient,
    filter: Option<api::ContainerFilter>,
) -> Result<Vec<api::Container>, String> {
    client
        .runtime
        .list_containers(api::ListContainersRequest { filter })
        .await
        .map(|r| r.into_inner().containers)
        .map_err(|s| rpc("ListContainers", &s))
}

/// Waits until the container is in `state`; its status then.
pub async fn wait_state(
    client: &mut CriClient,
    id: &str,
    state: api::ContainerState,
) -> Result<api::ContainerStatus, String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let status = container_status(client, id).await.map_err(|s| rpc("ContainerStatus", &s))?;
        if status.state() == state {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            return Err(format!("container {id} is {:?} after {WAIT:?}, expected {state:?}", status.state()));
        }
        tokio::time::sleep(POLL).await;
    }
}

pub async fn exec_sync(
    client: &mut CriClient,
    id: &str,
    cmd: &[&str],
    timeout: i64,
) -> Result<api::ExecSyncResponse, tonic::Status> {
    let request = api::ExecSyncRequest {
        container_id: id.to_owned(),
        cmd: cmd.iter().map(|&part| part.to_owned()).collect(),
        timeout,
    };
    Ok(client.runtime.exec_sync(request).await?.into_inner())
}

/// ExecSync of `cmd` until it exits 0 (a server in the container may not listen yet): its stdout.
pub async fn exec_until_ok(client: &mut CriClient, id: &str, cmd: &[&str]) -> Result<String, String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let last = match exec_sync(client, id, cmd, 10).await {
            Ok(r) if r.exit_code == 0 => return Ok(String::from_utf8_lossy(&r.stdout).into_owned()),
            Ok(r) => format!("exit code {}, stderr {:?}", r.exit_code, String::from_utf8_lossy(&r.stderr)),
            Err(s) => rpc("ExecSync", &s),
        };
        if Instant::now() >= deadline {
            return Err(format!("ExecSync {cmd:?} in {id}: {last}"));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Runs `f` where the runtime's pods and servers are reachable: in the node's network namespace.
pub fn in_node<T: Send>(env: &Env, f: impl FnOnce() -> T + Send) -> Result<T, String> {
    match &env.node {
        Some(node) => node.run(f).map_err(|e| format!("entering the node: {e:#}")),
        None => Ok(f()),
    }
}

/// A plain HTTP/1.0 GET from the node: the status code and the body.
pub fn http_get(env: &Env, addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let path = path.to_owned();
    in_node(env, move || -> Result<(u16, String), String> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")
            .map_err(|e| format!("send to {addr}: {e}"))?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).map_err(|e| format!("read from {addr}: {e}"))?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let code = text
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| format!("{addr}{path} answered no HTTP status: {text:?}"))?;
        let body = text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
        Ok((code, body))
    })?
}

/// [`http_get`] until it answers (a server may not listen yet).
pub async fn http_get_until_ok(env: &Env, addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let deadline = Instant::now() + WAIT;
    loop {
        match http_get(env, addr, path) {
            Ok(answer) => return Ok(answer),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}

/// A shell command serving `body` at `/` over HTTP on `listen` (`PORT` or `ADDR:PORT`) with busybox
/// httpd in the foreground.
pub fn http_server(listen: &str, body: &str) -> Vec<String> {
    vec![
        "sh".to_owned(),
        "-c".to_owned(),
        format!(
            "mkdir -p /tmp/www && echo {body} > /tmp/www/index.html && exec httpd -f -p {listen} -h /tmp/www"
        ),
    ]
}

/// Stops and removes every container and pod the runtime lists (the runtime serves the suite alone).
pub async fn remove_everything(client: &mut CriClient) -> Result<(), String> {
    for container in list_containers(client, None).await? {
        let _ = stop_container(client, &container.id, 0).await;
        remove_container(client, &container.id).await.map_err(|s| rpc("RemoveContainer", &s))?;
    }
    for pod in list_pods(client, None).await? {
        stop_pod(client, &pod.id).await.map_err(|s| rpc("StopPodSandbox", &s))?;
        remove_pod(client, &pod.id).await.map_err(|s| rpc("RemovePodSandbox", &s))?;
    }
    Ok(())
}

/// host-local's allocations in `dir`: (address, owner's container id), from its files named by address
/// whose first line is the id.
pub fn allocations(dir: &std::path::Path) -> Vec<(std::net::IpAddr, String)> {
    let mut held = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Some(ip) = entry.file_name().to_str().and_then(|name| name.parse().ok()) else { continue };
        let owner = std::fs::read_to_string(entry.path()).unwrap_or_default();
        held.push((ip, owner.lines().next().unwrap_or_default().trim().to_owned()));
    }
    held
}
