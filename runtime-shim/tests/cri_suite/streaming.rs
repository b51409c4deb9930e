//! The "streaming" group: Exec, Attach and PortForward answer a URL of the runtime's streaming server
//! that the kubelet hands to clients. For now each URL is checked to be served (an HTTP answer other
//! than 404 to a request without an upgrade) and single-use (the same URL again: 404); the SPDY and
//! websocket v5 sessions come with keel-shim's streaming client.

use std::net::{SocketAddr, ToSocketAddrs};

use super::support::{expect_code, http_get, new_pod, rpc, run_container};
use super::{CaseResult, CriClient, Env, api, case, ensure};

const GROUP: &str = "streaming";

/// Runs every case of the group (one pod, one running container).
pub async fn run(client: &mut CriClient, env: &Env) -> Vec<CaseResult> {
    let setup = async {
        let (pod_id, pod) = new_pod(client, env, "streaming").await?;
        let id = run_container(client, env, &pod_id, &pod, "streaming", &["sleep", "1000"]).await?;
        Ok::<_, String>((pod_id, id))
    };
    let (pod_id, id) = match setup.await {
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
    vec![
        case(GROUP, "runtime should support exec: a served URL", served(env, "Exec", exec_url)),
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
