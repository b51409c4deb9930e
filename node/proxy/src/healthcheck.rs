//! Service health-check node ports, as kube-proxy's ServiceHealthServer: every LoadBalancer Service
//! with externalTrafficPolicy Local and a `spec.healthCheckNodePort` gets an HTTP listener on that
//! port, answering any request with the Service's count of ready endpoints on this node — 200 when
//! there is one and the proxy is healthy, 503 otherwise — so a load balancer sends traffic only to
//! nodes that keep it local.
//!
//! [`health_checks`] computes what the ports should answer from the [`ProxyState`] (pure);
//! [`ServiceHealthServer`] opens, closes and updates the listeners to match (hyper); [`run`] drives
//! it from a watch channel the sync loop writes after each sync.

use std::collections::{BTreeMap, BTreeSet, btree_map::Entry};
use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderName, HeaderValue, X_CONTENT_TYPE_OPTIONS};
use hyper::{Response, StatusCode};
use ipnet::IpNet;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::model::{NamespacedName, Protocol, ServicePortName};
use crate::tracker::ProxyState;

/// The header through which kube-proxy tells a load balancer how many local endpoints a node has.
pub const ENDPOINT_WEIGHT_HEADER: &str = "x-load-balancing-endpoint-weight";

/// What one health-check node port answers for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceHealth {
    /// The Service.
    pub service: NamespacedName,
    /// Its ready endpoints on this node, counted by address across all its ports.
    pub local_endpoints: usize,
}

/// The health-check node ports this node should serve.
pub type HealthCheckPorts = BTreeMap<u16, ServiceHealth>;

/// What the listeners should answer: kube-proxy's SyncServices and SyncEndpoints in one value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthChecks {
    /// Port → the Service it answers for.
    pub ports: HealthCheckPorts,
    /// The proxy's own health (what /healthz says): with `false`, every port answers 503.
    pub proxy_healthy: bool,
}

/// The health checks of `state`: one port per Service with externalTrafficPolicy Local and a
/// health-check node port (the model keeps one only for LoadBalancer Services). Two Services
/// claiming one port (the API server's allocator prevents it) — the first by name keeps it.
pub fn health_checks(state: &ProxyState, proxy_healthy: bool) -> HealthChecks {
    let mut ports = HealthCheckPorts::new();
    for (name, info) in &state.services {
        let Some(port) = info.health_check_node_port.filter(|_| info.external_policy_local) else {
            continue;
        };
        match ports.entry(port) {
            Entry::Occupied(taken) => {
                if taken.get().service != name.service {
                    tracing::warn!(
                        port,
                        service = %name.service,
                        holder = %taken.get().service,
                        "health-check node port claimed twice; the first Service keeps it"
                    );
                }
            }
            Entry::Vacant(slot) => {
                let local_endpoints = local_ready_endpoints(state, &name.service);
                slot.insert(ServiceHealth { service: name.service.clone(), local_endpoints });
            }
        }
    }
    HealthChecks { ports, proxy_healthy }
}

/// kube-proxy's LocalReadyEndpoints: the distinct addresses of ready endpoints on this node over
/// every port of `service` (10.0.0.1:80 and 10.0.0.1:443 are one endpoint). Terminating endpoints
/// are not ready, so a node left with only those fails its health check.
pub fn local_ready_endpoints(state: &ProxyState, service: &NamespacedName) -> usize {
    // The smallest key of the Service: its ports follow in order.
    let first = ServicePortName { service: service.clone(), port: String::new(), protocol: Protocol::Tcp };
    state
        .endpoints
        .range(first..)
        .take_while(|(name, _)| name.service == *service)
        .flat_map(|(_, endpoints)| endpoints)
        .filter(|endpoint| endpoint.ready && endpoint.local)
        .map(|endpoint| endpoint.ip)
        .collect::<BTreeSet<IpAddr>>()
        .len()
}

/// The addresses the listeners bind: every address (`[::]`, dual-stack) without
/// `--nodeport-addresses`, else this node's addresses inside those CIDRs (as kube-proxy; when none
/// can be read, every address again).
pub fn bind_addresses(nodeport_addresses: &[IpNet]) -> Vec<IpAddr> {
    let every = vec![IpAddr::V6(Ipv6Addr::UNSPECIFIED)];
    if nodeport_addresses.is_empty() {
        return every;
    }
    let interfaces = match nix::ifaddrs::getifaddrs() {
        Ok(interfaces) => interfaces,
        Err(err) => {
            tracing::error!(
                "read this node's addresses for --nodeport-addresses: {err}; health checks listen on all"
            );
            return every;
        }
    };
    let mut addresses = BTreeSet::new();
    for interface in interfaces {
        let Some(address) = interface.address else { continue };
        let ip = if let Some(v4) = address.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = address.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        if nodeport_addresses.iter().any(|cidr| cidr.contains(&ip)) {
            addresses.insert(ip);
        }
    }
    if addresses.is_empty() {
        tracing::error!("no address of this node is in --nodeport-addresses; health checks listen on all");
        return every;
    }
    addresses.into_iter().collect()
}

/// A health-check port that could not be opened on one address.
#[derive(Debug, thiserror::Error)]
#[error("health-check node port {address} for {service}: {source}")]
pub struct ListenError {
    /// The address and port.
    pub address: SocketAddr,
    /// The Service the port was for.
    pub service: NamespacedName,
    /// The socket call's failure.
    #[source]
    pub source: std::io::Error,
}

/// The listeners of the health-check node ports. Owned by one task ([`run`]); the answers are shared
/// with the connection tasks.
#[derive(Debug)]
pub struct ServiceHealthServer {
    /// Where each port listens (one listener per address).
    addresses: Vec<IpAddr>,
    /// What the listeners answer; written by [`ServiceHealthServer::update`], read per request.
    answers: Arc<RwLock<HealthChecks>>,
    /// The accept task of each open port, per address.
    listeners: BTreeMap<u16, Vec<JoinHandle<()>>>,
}

impl ServiceHealthServer {
    /// A server with no ports open, listening on `addresses` once ports are wanted.
    pub fn new(addresses: Vec<IpAddr>) -> ServiceHealthServer {
        ServiceHealthServer { addresses, answers: Arc::default(), listeners: BTreeMap::new() }
    }

    /// The ports open now.
    pub fn listening(&self) -> impl Iterator<Item = u16> + '_ {
        self.listeners.keys().copied()
    }

    /// Makes the listeners match `desired`: ports no longer wanted close (their sockets are gone when
    /// this returns), new ones open, and every open port answers with the new counts. A port that
    /// cannot be opened is left closed and returned; the next update tries it again.
    pub async fn update(&mut self, desired: HealthChecks) -> Vec<ListenError> {
        let closing: Vec<u16> =
            self.listeners.keys().copied().filter(|port| !desired.ports.contains_key(port)).collect();
        for port in closing {
            tracing::info!(port, "closing health-check node port");
            close(self.listeners.remove(&port).unwrap_or_default()).await;
        }
        let opening: Vec<(u16, NamespacedName)> = desired
            .ports
            .iter()
            .filter(|(port, _)| !self.listeners.contains_key(port))
            .map(|(port, health)| (*port, health.service.clone()))
            .collect();
        if let Ok(mut answers) = self.answers.write() {
            *answers = desired;
        }
        let mut failures = Vec::new();
        for (port, service) in opening {
            match self.open(port, &service).await {
                Ok(tasks) => {
                    tracing::info!(port, %service, "opened health-check node port");
                    self.listeners.insert(port, tasks);
                }
                Err(err) => failures.push(err),
            }
        }
        failures
    }

    /// Listens on `port` on every address, or on none.
    async fn open(&self, port: u16, service: &NamespacedName) -> Result<Vec<JoinHandle<()>>, ListenError> {
        let mut tasks = Vec::new();
        for ip in &self.addresses {
            let address = SocketAddr::new(*ip, port);
            match listen(address) {
                Ok(listener) => tasks.push(tokio::spawn(accept(listener, port, Arc::clone(&self.answers)))),
                Err(source) => {
                    close(tasks).await;
                    return Err(ListenError { address, service: service.clone(), source });
                }
            }
        }
        Ok(tasks)
    }
}

impl Drop for ServiceHealthServer {
    fn drop(&mut self) {
        for task in self.listeners.values().flatten() {
            task.abort();
        }
    }
}

/// Keeps `server` matching the latest value of `desired`, retrying ports that failed to open every
/// `retry` as well as on each change; closes every port and returns once the sender is gone.
pub async fn run(
    mut server: ServiceHealthServer,
    mut desired: watch::Receiver<HealthChecks>,
    retry: Duration,
) {
    loop {
        let wanted = desired.borrow_and_update().clone();
        let failures = server.update(wanted).await;
        for failure in &failures {
            tracing::error!("{failure} (retried on the next sync)");
        }
        let changed = if failures.is_empty() {
            desired.changed().await
        } else {
            tokio::select! {
                changed = desired.changed() => changed,
                () = tokio::time::sleep(retry) => Ok(()),
            }
        };
        if changed.is_err() {
            break;
        }
    }
    server.update(HealthChecks::default()).await;
}

/// Aborts accept tasks and waits until they are gone (their listening sockets with them).
async fn close(tasks: Vec<JoinHandle<()>>) {
    for task in &tasks {
        task.abort();
    }
    for task in tasks {
        let _ = task.await;
    }
}

/// A listening socket with Go's defaults, which kube-proxy's listeners have: SO_REUSEADDR (a port
/// closed and reopened binds again despite connections in TIME_WAIT) and `[::]` dual-stack. std and
/// tokio set neither per socket, hence socket2. Without IPv6, `[::]` falls back to `0.0.0.0`.
fn listen(address: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = match Socket::new(Domain::for_address(address), Type::STREAM, None) {
        Err(err) if address.ip() == IpAddr::V6(Ipv6Addr::UNSPECIFIED) => {
            tracing::debug!("no IPv6 socket ({err}): health checks listen on 0.0.0.0");
            return listen(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), address.port()));
        }
        other => other?,
    };
    socket.set_reuse_address(true)?;
    if address.is_ipv6() && address.ip().is_unspecified() {
        socket.set_only_v6(false)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&address.into())?;
    socket.listen(1024)?;
    tokio::net::TcpListener::from_std(socket.into())
}

/// Serves HTTP/1 on `listener`; the connections end with the task.
async fn accept(listener: tokio::net::TcpListener, port: u16, answers: Arc<RwLock<HealthChecks>>) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(err) => {
                // Out of descriptors and the like: wait rather than spin.
                tracing::warn!(port, "health-check node port accept: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let answers = Arc::clone(&answers);
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |_request| {
                let answer = answers.read().map(|checks| respond(&checks, port)).unwrap_or_else(|_| {
                    let mut response = Response::new(Full::new(Bytes::new()));
                    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                    response
                });
                async move { Ok::<_, Infallible>(answer) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
        });
    }
}

/// The JSON body, field for field as kube-proxy writes it.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Body<'a> {
    service: BodyService<'a>,
    local_endpoints: usize,
    service_proxy_healthy: bool,
}

#[derive(serde::Serialize)]
struct BodyService<'a> {
    namespace: &'a str,
    name: &'a str,
}

/// kube-proxy's answer on `port` to any request: 200 when the Service has local ready endpoints and
/// the proxy is healthy, else 503; JSON body; the count also in [`ENDPOINT_WEIGHT_HEADER`]. A port
/// no longer wanted (closing) answers 503 with no body.
pub fn respond(checks: &HealthChecks, port: u16) -> Response<Full<Bytes>> {
    let Some(health) = checks.ports.get(&port) else {
        let mut response = Response::new(Full::new(Bytes::new()));
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        return response;
    };
    let body = Body {
        service: BodyService { namespace: &health.service.namespace, name: &health.service.name },
        local_endpoints: health.local_endpoints,
        service_proxy_healthy: checks.proxy_healthy,
    };
    let text = serde_json::to_string_pretty(&body).unwrap_or_default();
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = if health.local_endpoints > 0 && checks.proxy_healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers
        .insert(HeaderName::from_static(ENDPOINT_WEIGHT_HEADER), HeaderValue::from(health.local_endpoints));
    response
}

#[cfg(test)]
#[path = "healthcheck_tests.rs"]
mod tests;
