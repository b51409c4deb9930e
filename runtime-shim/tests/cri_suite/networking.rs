//! The "networking" group (beside critest's "Networking"): the pod IP the CNI result gave is in the
//! network's subnet, the DNS config in the container's resolv.conf line by line (two search domains on
//! one line, in order), the pod's own HTTP server answering on its IP from the node, and a port mapping
//! reachable through the node's address on the CNI bridge (not loopback), each checked by the body it
//! serves. critest covers the pod's hostname ("runtime should support set hostname") and checks only the
//! status code of its port mapping cases (on 127.0.0.1 for the host port).

use std::net::{IpAddr, SocketAddr};

use super::support::{
    container_config, create_container, exec_until_ok, http_get_until_ok, http_server, pod_config,
    pod_status, rpc, run_pod, start_container,
};
use super::{CaseResult, CriClient, Env, api, case, ensure};

const GROUP: &str = "networking";
const CONTAINER_PORT: u16 = 8080;
const HOST_PORT: u16 = 30080;
const BODY: &str = "hello-from-the-pod";

/// Runs every case of the group (one pod with a DNS config and a port mapping, one web server in it).
pub async fn run(client: &mut CriClient, env: &Env) -> Vec<CaseResult> {
    let (pod_id, container_id) = match setup(client, env).await {
        Ok(ids) => ids,
        Err(e) => return vec![case(GROUP, "setup: a pod serving HTTP", Err(e))],
    };
    let ip = pod_ip(client, env, &pod_id).await;
    let ip_case = ip.as_ref().map(drop).map_err(Clone::clone);
    vec![
        case(GROUP, "runtime should support pod IP from the CNI result", ip_case),
        case(GROUP, "runtime should support DNS config", dns(client, &container_id).await),
        case(
            GROUP,
            "the pod answers on its IP from the node",
            match ip {
                Ok(ip) => answers(env, SocketAddr::new(ip, CONTAINER_PORT)).await,
                Err(e) => Err(format!("no pod IP: {e}")),
            },
        ),
        case(
            GROUP,
            "runtime should support port mapping with host port",
            answers(env, SocketAddr::new(env.host_ip, HOST_PORT)).await,
        ),
    ]
}

async fn setup(client: &mut CriClient, env: &Env) -> Result<(String, String), String> {
    let mut pod = pod_config(env, "net")?;
    pod.dns_config = Some(api::DnsConfig {
        servers: vec!["10.99.0.53".to_owned()],
        searches: vec!["suite.svc.cluster.local".to_owned(), "svc.cluster.local".to_owned()],
        options: vec!["ndots:5".to_owned()],
    });
    pod.port_mappings = vec![api::PortMapping {
        protocol: api::Protocol::Tcp.into(),
        container_port: CONTAINER_PORT.into(),
        host_port: HOST_PORT.into(),
        host_ip: String::new(),
    }];
    let pod_id = run_pod(client, env, &pod).await?;
    let mut config = container_config(env, "web", &[]);
    config.command = http_server(&CONTAINER_PORT.to_string(), BODY);
    let id = create_container(client, &pod_id, &pod, &config).await?;
    start_container(client, &id).await.map_err(|s| rpc("StartContainer", &s))?;
    Ok((pod_id, id))
}

/// The pod's IP is in the CNI network's subnet and, where the suite reads host-local's allocations,
/// the one allocated to its sandbox id.
async fn pod_ip(client: &mut CriClient, env: &Env, pod_id: &str) -> Result<IpAddr, String> {
    let status = pod_status(client, pod_id).await.map_err(|s| rpc("PodSandboxStatus", &s))?;
    let network = status.network.ok_or("PodSandboxStatus has no network")?;
    let ip: IpAddr = network.ip.parse().map_err(|e| format!("pod IP {:?}: {e}", network.ip))?;
    ensure(env.pod_subnet.contains(&ip), || {
        format!("pod IP {ip} is not in the CNI subnet {}", env.pod_subnet)
    })?;
    if let Some(dir) = &env.ipam_dir {
        let held = super::support::allocations(dir);
        ensure(held.iter().any(|(address, owner)| *address == ip && owner == pod_id), || {
            format!("pod IP {ip} is not the one host-local allocated to sandbox {pod_id}: {held:?}")
        })?;
    }
    Ok(ip)
}

/// resolv.conf holds the pod's DNS servers, searches and options.
async fn dns(client: &mut CriClient, id: &str) -> Result<(), String> {
    let text = exec_until_ok(client, id, &["cat", "/etc/resolv.conf"]).await?;
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    for expected in
        ["nameserver 10.99.0.53", "search suite.svc.cluster.local svc.cluster.local", "options ndots:5"]
    {
        ensure(lines.contains(&expected), || format!("resolv.conf lacks {expected:?}: {text:?}"))?;
    }
    Ok(())
}

async fn answers(env: &Env, addr: SocketAddr) -> Result<(), String> {
    let (code, body) = http_get_until_ok(env, addr, "/").await?;
    ensure(code == 200 && body.trim() == BODY, || format!("GET http://{addr}/ answered {code} {body:?}"))
}
