//! The CRI streaming server: Exec, Attach and PortForward answer with a URL on this server, which the
//! client (kubectl through the apiserver and the kubelet, or any CRI client) then opens, as the
//! kubelet's `pkg/kubelet/cri/streaming` package serves it.
//!
//! - [`Server::get_exec`], [`Server::get_attach`], [`Server::get_port_forward`] validate the request as
//!   the kubelet does (InvalidArgument) and return `http://ADDR/{exec,attach,portforward}/TOKEN`; a
//!   token is random, single-use and expires after a minute ([`cache`]); an unknown, used or expired
//!   token answers 404.
//! - Each URL speaks SPDY/3.1 (`X-Stream-Protocol-Version` `v4.channel.k8s.io`, `v3`, `v2`,
//!   `channel.k8s.io` for exec and attach; `portforward.k8s.io` for port-forward; [`spdy`]) or a
//!   websocket (`v5.channel.k8s.io` with its close channel, `v4.channel.k8s.io`, the base64 and
//!   unversioned channel protocols; [`ws`]), as clients choose.
//! - The work itself is the [`Backend`]'s: the container module runs the command (runc exec) or
//!   attaches to the monitor; port-forward connects inside the pod's network namespace.

pub mod cache;
mod http;
mod idle;
mod portforward;
mod remotecommand;
pub mod spdy;
pub mod ws;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_cri::v1 as api;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tonic::Status;

use cache::{Cached, RequestCache};

/// The address the streaming server listens on unless configured: loopback, any free port (the
/// kubelet proxies streams to it, as it does for containerd's default).
pub const DEFAULT_ADDR: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// The server's timeouts (the kubelet's streaming `Config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamConfig {
    /// A connection with no frame either way for this long is closed (`StreamIdleTimeout`: 4 h).
    pub idle_timeout: Duration,
    /// How long a SPDY client has to open its streams (`StreamCreationTimeout`: 30 s).
    pub stream_creation_timeout: Duration,
}

impl Default for StreamConfig {
    fn default() -> StreamConfig {
        StreamConfig {
            idle_timeout: Duration::from_secs(4 * 3600),
            stream_creation_timeout: Duration::from_secs(30),
        }
    }
}

/// An error a [`Backend`] returns (any error, with its message).
pub type BackendError = Box<dyn std::error::Error + Send + Sync>;

/// A terminal size sent on the resize stream (`{"Width":..,"Height":..}`, client-go's TerminalSize).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSize {
    /// Columns.
    #[serde(rename = "Width")]
    pub width: u16,
    /// Rows.
    #[serde(rename = "Height")]
    pub height: u16,
}

/// The streams of an exec or attach session, as the client asked for them (the container module
/// joins them to a container's attach socket or to a `<runtime> exec` process).
#[derive(Default)]
pub struct Streams {
    /// The client's stdin (EOF when the client closes it), if asked for.
    pub stdin: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// Where the process's stdout goes, if asked for (drop or shut it down at the end).
    pub stdout: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    /// Where the process's stderr goes, if asked for (never with a tty).
    pub stderr: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    /// Terminal sizes, the first as the client starts, when the client sends them (tty sessions).
    pub resize: Option<mpsc::Receiver<TerminalSize>>,
}

impl std::fmt::Debug for Streams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streams")
            .field("stdin", &self.stdin.is_some())
            .field("stdout", &self.stdout.is_some())
            .field("stderr", &self.stderr.is_some())
            .field("resize", &self.resize.is_some())
            .finish()
    }
}

/// What the streaming server needs from the runtime (the kubelet's `streaming.Runtime`).
pub trait Backend: Send + Sync + 'static {
    /// Runs `cmd` in container `container_id` with `streams` (on a terminal when `tty`) and returns
    /// its exit code; an error when it could not run at all.
    fn exec(
        &self,
        container_id: &str,
        cmd: &[String],
        tty: bool,
        streams: Streams,
    ) -> impl Future<Output = Result<i32, BackendError>> + Send;

    /// Attaches `streams` to the running container's stdio until it exits or the client leaves.
    fn attach(
        &self,
        container_id: &str,
        tty: bool,
        streams: Streams,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;

    /// Connects `stream` to `port` on the pod's loopback (inside its network namespace) until both
    /// sides are done.
    fn port_forward(
        &self,
        pod_sandbox_id: &str,
        port: u16,
        stream: DuplexStream,
    ) -> impl Future<Output = Result<(), BackendError>> + Send;
}

/// [`Backend`] behind a pointer (its futures boxed), so the server is not generic.
trait DynBackend: Send + Sync {
    fn exec(
        self: Arc<Self>,
        id: String,
        cmd: Vec<String>,
        tty: bool,
        s: Streams,
    ) -> BoxFuture<'static, Result<i32, BackendError>>;
    fn attach(
        self: Arc<Self>,
        id: String,
        tty: bool,
        s: Streams,
    ) -> BoxFuture<'static, Result<(), BackendError>>;
    fn port_forward(
        self: Arc<Self>,
        id: String,
        port: u16,
        s: DuplexStream,
    ) -> BoxFuture<'static, Result<(), BackendError>>;
}

impl<B: Backend> DynBackend for B {
    fn exec(
        self: Arc<Self>,
        id: String,
        cmd: Vec<String>,
        tty: bool,
        s: Streams,
    ) -> BoxFuture<'static, Result<i32, BackendError>> {
        Box::pin(async move { Backend::exec(&*self, &id, &cmd, tty, s).await })
    }

    fn attach(
        self: Arc<Self>,
        id: String,
        tty: bool,
        s: Streams,
    ) -> BoxFuture<'static, Result<(), BackendError>> {
        Box::pin(async move { Backend::attach(&*self, &id, tty, s).await })
    }

    fn port_forward(
        self: Arc<Self>,
        id: String,
        port: u16,
        s: DuplexStream,
    ) -> BoxFuture<'static, Result<(), BackendError>> {
        Box::pin(async move { Backend::port_forward(&*self, &id, port, s).await })
    }
}

/// What the HTTP handlers share.
struct Shared {
    config: StreamConfig,
    cache: RequestCache,
    backend: Arc<dyn DynBackend>,
}

/// The streaming server: an HTTP/1.1 server on a TCP address; stops when dropped.
pub struct Server {
    shared: Arc<Shared>,
    addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish_non_exhaustive()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl Server {
    /// Listens on `addr` ([`DEFAULT_ADDR`]: loopback, a free port) and serves streams with `backend`
    /// and the kubelet's default timeouts.
    pub async fn start(addr: SocketAddr, backend: impl Backend) -> std::io::Result<Server> {
        Server::start_with(addr, StreamConfig::default(), backend).await
    }

    /// [`Server::start`] with other timeouts.
    pub async fn start_with(
        addr: SocketAddr,
        config: StreamConfig,
        backend: impl Backend,
    ) -> std::io::Result<Server> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared { config, cache: RequestCache::default(), backend: Arc::new(backend) });
        let accept = tokio::spawn(http::accept(listener, shared.clone()));
        Ok(Server { shared, addr, accept })
    }

    /// The address served (the actual port when started on port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn url(&self, kind: &str, token: &str) -> String {
        format!("http://{}/{kind}/{token}", self.addr)
    }

    /// The URL of an exec session: InvalidArgument without a container id or a command, with
    /// neither stdin, stdout nor stderr, or with both tty and stderr.
    pub fn get_exec(&self, req: &api::ExecRequest) -> Result<api::ExecResponse, Status> {
        validate_stdio(&req.container_id, req.tty, req.stdin, req.stdout, req.stderr)?;
        if req.cmd.is_empty() {
            return Err(Status::invalid_argument("missing required cmd"));
        }
        let token = self.shared.cache.insert(Cached::Exec(req.clone()))?;
        Ok(api::ExecResponse { url: self.url("exec", &token) })
    }

    /// The URL of an attach session, validated as exec's (without the command).
    pub fn get_attach(&self, req: &api::AttachRequest) -> Result<api::AttachResponse, Status> {
        validate_stdio(&req.container_id, req.tty, req.stdin, req.stdout, req.stderr)?;
        let token = self.shared.cache.insert(Cached::Attach(req.clone()))?;
        Ok(api::AttachResponse { url: self.url("attach", &token) })
    }

    /// The URL of a port-forward session: InvalidArgument without a sandbox id or with a port
    /// outside 1..=65535.
    pub fn get_port_forward(
        &self,
        req: &api::PortForwardRequest,
    ) -> Result<api::PortForwardResponse, Status> {
        if req.pod_sandbox_id.is_empty() {
            return Err(Status::invalid_argument("missing required pod_sandbox_id"));
        }
        if let Some(port) = req.port.iter().find(|port| !(1..=65535).contains(*port)) {
            return Err(Status::invalid_argument(format!("invalid port {port}: must be in 1-65535")));
        }
        let token = self.shared.cache.insert(Cached::PortForward(req.clone()))?;
        Ok(api::PortForwardResponse { url: self.url("portforward", &token) })
    }

    /// Makes every waiting token expire now, as a minute passing would (for tests).
    #[doc(hidden)]
    pub fn expire_tokens(&self) {
        self.shared.cache.expire_all();
    }
}

fn validate_stdio(
    container_id: &str,
    tty: bool,
    stdin: bool,
    stdout: bool,
    stderr: bool,
) -> Result<(), Status> {
    if container_id.is_empty() {
        return Err(Status::invalid_argument("missing required container_id"));
    }
    if tty && stderr {
        return Err(Status::invalid_argument("tty and stderr cannot both be true"));
    }
    if !stdin && !stdout && !stderr {
        return Err(Status::invalid_argument("one of stdin, stdout, or stderr must be set"));
    }
    Ok(())
}
