//! A TCP forwarder into a network namespace, so that tools on the machine (kubectl, curl, a client
//! library) reach a server living in the fabric without any route, address or firewall rule being added
//! to the machine's own namespace.
//!
//! It accepts on a listener of the caller's namespace (normally the machine's loopback) and, for each
//! connection, connects from a socket created on a thread inside the target namespace: a socket keeps
//! the namespace it was created in, so the connection then leaves from there.

use std::net::{SocketAddr, TcpListener};
use std::thread::JoinHandle;

use anyhow::{Context, Result};
use socket2::{Domain, Socket, Type};
use tokio::sync::oneshot;

use crate::netns::NetNsFd;

/// Forwards connections from a local listener to `target` inside a namespace. Stops on drop (open
/// connections are closed).
#[derive(Debug)]
pub struct Forwarder {
    local: SocketAddr,
    target: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Forwarder {
    /// Listens on an ephemeral port of 127.0.0.1 in the caller's namespace.
    pub fn start(target_ns: &NetNsFd, target: SocketAddr) -> Result<Forwarder> {
        Forwarder::start_on(SocketAddr::from(([127, 0, 0, 1], 0)), target_ns, target)
    }

    /// Listens on `listen` in the caller's namespace.
    pub fn start_on(listen: SocketAddr, target_ns: &NetNsFd, target: SocketAddr) -> Result<Forwarder> {
        let listener = TcpListener::bind(listen).with_context(|| format!("forwarder: listen on {listen}"))?;
        listener.set_nonblocking(true).context("forwarder: set the listener non-blocking")?;
        let local = listener.local_addr().context("forwarder: local address")?;
        let (shutdown, stopped) = oneshot::channel();
        let target_ns = target_ns.clone();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("forwarder: build its runtime")?;
        let thread = std::thread::Builder::new()
            .name(format!("forward-{local}"))
            .spawn(move || runtime.block_on(serve(listener, target_ns, target, stopped)))
            .context("forwarder: start its thread")?;
        Ok(Forwarder { local, target, shutdown: Some(shutdown), thread: Some(thread) })
    }

    /// The address to connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Where connections go, inside the target namespace.
    pub fn target(&self) -> SocketAddr {
        self.target
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn serve(
    listener: TcpListener,
    target_ns: NetNsFd,
    target: SocketAddr,
    mut stopped: oneshot::Receiver<()>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("keel-testbed forwarder: register the listener: {err}");
            return;
        }
    };
    // Connections are tasks of this runtime: returning drops the runtime and closes them all.
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    let target_ns = target_ns.clone();
                    tokio::spawn(async move {
                        if let Err(err) = relay(client, &target_ns, target).await {
                            eprintln!("keel-testbed forwarder to {target}: {err:#}");
                        }
                    });
                }
                Err(err) => {
                    eprintln!("keel-testbed forwarder: accept: {err}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            },
        }
    }
}

async fn relay(mut client: tokio::net::TcpStream, target_ns: &NetNsFd, target: SocketAddr) -> Result<()> {
    // Made on a short-lived thread inside the namespace; this blocks the forwarder's runtime for the
    // tens of microseconds a thread takes to start, which a test's connection rate never notices.
    let socket = target_ns
        .run(|| Socket::new(Domain::for_address(target), Type::STREAM, None))?
        .context("make the upstream socket inside the namespace")?;
    socket.set_nonblocking(true).context("set the upstream socket non-blocking")?;
    let upstream = tokio::net::TcpSocket::from_std_stream(socket.into());
    let mut upstream = upstream.connect(target).await.with_context(|| format!("connect to {target}"))?;
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await.context("relay")?;
    Ok(())
}
