//! The CRI server on its unix socket: a stale socket file is replaced, a live one (another keel-shim
//! answering) refused; the socket is made mode 0660 and removed again on shutdown. Every connection
//! passes through [`authority::AuthorityFix`], so clients on grpc's C core are served as grpc-go's are.

pub mod authority;
pub mod deadline;

use std::future::Future;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use anyhow::{Context, Result, bail};
use k8s_cri::v1::image_service_server::ImageServiceServer;
use k8s_cri::v1::runtime_service_server::RuntimeServiceServer;
use tokio::net::UnixListener;

use crate::config::Config;
use crate::service::Shim;

/// The socket's mode: the owner and its group (kubelet's) may connect.
pub const SOCKET_MODE: u32 = 0o660;

/// How long in-flight RPCs and open connections get to finish after the shutdown signal.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// A bound CRI socket; [`Listener::serve`] serves it.
#[derive(Debug)]
pub struct Listener {
    listener: UnixListener,
    /// (device, inode) of the socket file bound, so shutdown removes only its own file.
    identity: (u64, u64),
    config: Config,
}

impl Listener {
    /// Creates the root directory and binds the socket of `config`.
    pub fn bind(config: Config) -> Result<Listener> {
        std::fs::create_dir_all(&config.root)
            .with_context(|| format!("creating the root directory {}", config.root.display()))?;
        let socket = &config.socket;
        if let Some(parent) = socket.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating the socket's directory {}", parent.display()))?;
        }
        remove_stale_socket(socket)?;
        // Bound under a umask that already gives 0660, so no other user can connect in the moment before
        // the chmod. keel-shim binds while starting, before any other thread creates files.
        let umask = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o777 & !SOCKET_MODE));
        let bound = UnixListener::bind(socket);
        nix::sys::stat::umask(umask);
        let listener = bound.with_context(|| format!("binding the CRI socket {}", socket.display()))?;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(SOCKET_MODE))
            .with_context(|| format!("setting the mode of {}", socket.display()))?;
        let meta = std::fs::metadata(socket).with_context(|| format!("stat {}", socket.display()))?;
        Ok(Listener { listener, identity: (meta.dev(), meta.ino()), config })
    }

    /// Serves the CRI until `shutdown` completes, then removes the socket file.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send) -> Result<()> {
        let Listener { listener, identity, config } = self;
        let socket = config.socket.clone();
        let shim = Shim::new(config).await?;
        let incoming = futures::stream::unfold(listener, |listener| async move {
            let accepted = listener.accept().await.map(|(stream, _)| authority::AuthorityFix::new(stream));
            Some((accepted, listener))
        });
        tracing::info!(socket = %socket.display(), "serving CRI v1");
        let (stopping_tx, mut stopping) = tokio::sync::watch::channel(false);
        let graceful = async move {
            shutdown.await;
            let _ = stopping_tx.send(true);
        };
        let serve = tonic::transport::Server::builder()
            // Each RPC in a span named by its method, so debug logs (RUST_LOG=keel_shim=debug) say
            // which RPC they belong to, and a debug event as it arrives.
            .trace_fn(|request| {
                let method = request.uri().path().rsplit('/').next().unwrap_or_default().to_owned();
                tracing::debug!(rpc = %method, "request");
                tracing::debug_span!("rpc", method)
            })
            .layer(deadline::DeadlineLayer)
            .add_service(RuntimeServiceServer::new(shim.clone()))
            .add_service(ImageServiceServer::new(shim))
            .serve_with_incoming_shutdown(incoming, graceful);
        // Graceful shutdown waits for clients to close their connections; one that never does (hung,
        // or not reading the GOAWAY) must not keep keel-shim from exiting.
        let forced = async move {
            if stopping.wait_for(|stopping| *stopping).await.is_ok() {
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let served = tokio::select! {
            served = serve => served,
            () = forced => {
                tracing::warn!("connections still open {SHUTDOWN_GRACE:?} after the shutdown signal: closing them");
                Ok(())
            }
        };
        // Remove the socket only if it is still the one bound (not one a successor bound since).
        if std::fs::metadata(&socket).is_ok_and(|m| (m.dev(), m.ino()) == identity) {
            let _ = std::fs::remove_file(&socket);
        }
        tracing::info!("stopped");
        served.context("serving the CRI")
    }
}

/// Removes a socket file nobody answers on; fails if a process answers on it or the path is not a
/// socket (never removes a file that is not a socket).
fn remove_stale_socket(socket: &Path) -> Result<()> {
    let meta = match std::fs::symlink_metadata(socket) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("stat {}", socket.display())),
    };
    if !meta.file_type().is_socket() {
        bail!("{} exists and is not a unix socket; refusing to replace it", socket.display());
    }
    match std::os::unix::net::UnixStream::connect(socket) {
        Ok(_) => {
            bail!("another process (a running keel-shim?) answers on {}; refusing to start", socket.display())
        }
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            tracing::info!(socket = %socket.display(), "removing a stale socket");
            std::fs::remove_file(socket)
                .with_context(|| format!("removing the stale socket {}", socket.display()))
        }
        Err(e) => Err(e).with_context(|| format!("probing the existing socket {}", socket.display())),
    }
}

/// Binds the socket of `config` and serves the CRI until SIGTERM or SIGINT.
pub async fn run(config: Config) -> Result<()> {
    let listener = Listener::bind(config)?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let signals = tokio::spawn(async move {
        let result = shutdown_signal().await;
        // Also when installing a handler failed: keel-shim then stops rather than run unstoppable.
        let _ = stop_tx.send(());
        result
    });
    listener
        .serve(async {
            let _ = stop_rx.await;
        })
        .await?;
    signals.await.context("the signal task")?
}

/// Completes on the first SIGTERM or SIGINT.
pub async fn shutdown_signal() -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
    Ok(())
}
