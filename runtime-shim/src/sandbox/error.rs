//! Why a pod sandbox operation failed. Each variant's text is the message a CRI client reads; which
//! gRPC code it answers with is decided at the edge (`crate::service`), not here.

use std::io;

use crate::cni::CniError;

/// A pod sandbox operation that failed, and with which input.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An empty sandbox id (InvalidArgument).
    #[error("the pod sandbox id is empty")]
    EmptyId,
    /// More than one sandbox's id starts with this prefix (InvalidArgument).
    #[error("the pod sandbox id prefix {0:?} is ambiguous")]
    AmbiguousId(String),
    /// No sandbox has this id, nor an id starting with it (NotFound).
    #[error("pod sandbox {0:?} not found")]
    NotFound(String),
    /// RunPodSandbox without a config (InvalidArgument).
    #[error("RunPodSandbox: no config")]
    NoConfig,
    /// RunPodSandbox with a config without metadata (InvalidArgument).
    #[error("RunPodSandbox: the config has no metadata")]
    NoMetadata,
    /// RunPodSandbox with metadata lacking a name, a namespace or a uid (InvalidArgument).
    #[error("RunPodSandbox: the metadata needs a name, a namespace and a uid")]
    IncompleteMetadata,
    /// RunPodSandbox with a runtime handler that has no runtime configured (InvalidArgument).
    #[error("RunPodSandbox: no runtime for {handler:?} is configured (handlers: {})", handlers.join(", "))]
    UnknownHandler {
        /// The handler asked for.
        handler: String,
        /// The handlers configured.
        handlers: Vec<String>,
    },
    /// A sysctl of no namespace the pod owns (a node-wide one, or a network sysctl of a host-network
    /// pod), or a malformed one (InvalidArgument).
    #[error(
        "RunPodSandbox: sysctl {name:?}={value:?} is not allowed: not a sysctl of a namespace the pod owns"
    )]
    Sysctl {
        /// The sysctl's name.
        name: String,
        /// Its value.
        value: String,
    },
    /// A DNS config that cannot be written as a resolv.conf (InvalidArgument).
    #[error("RunPodSandbox: {0}")]
    DnsConfig(String),
    /// A hostname that is not a valid one (InvalidArgument).
    #[error("RunPodSandbox: {0:?} is not a valid hostname")]
    Hostname(String),
    /// Another sandbox holds this pod attempt's name (AlreadyExists).
    #[error("RunPodSandbox: the sandbox name {name:?} is reserved for {holder}")]
    NameReserved {
        /// The sandbox name (name_namespace_uid_attempt).
        name: String,
        /// The id of the sandbox holding it.
        holder: String,
    },
    /// The CNI network could not be set up or torn down (the CNI error's code: Unavailable for
    /// "try again later", else Unknown).
    #[error("failed to {action} the network of sandbox {id}: {source}")]
    Network {
        /// `set up` or `tear down`.
        action: &'static str,
        /// The sandbox.
        id: String,
        /// The CNI failure (boxed: it is the largest of these errors).
        source: Box<CniError>,
    },
    /// The network list a sandbox's record holds cannot be read back (Internal).
    #[error("the sandbox's recorded network list: {0}")]
    RecordedNetwork(String),
    /// A file, a mount, a namespace or the pause process failed (Internal).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// Why it failed.
        source: io::Error,
    },
    /// The task running an operation to its end failed (panicked or was cancelled) (Internal).
    #[error("{context}: {source}")]
    Task {
        /// What the task did.
        context: &'static str,
        /// Why it failed.
        source: tokio::task::JoinError,
    },
    /// A sandbox lock is poisoned (Internal).
    #[error("a sandbox lock is poisoned")]
    Poisoned,
    /// Stopping or removing the pod's containers failed (the container error's code).
    #[error(transparent)]
    Containers(#[from] crate::container::Error),
}

impl Error {
    /// The [`Error::Io`] of `context`, for `map_err`.
    pub(super) fn io(context: &'static str) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Io { context, source }
    }

    /// The [`Error::Network`] of sandbox `id` failing to `action` (`set up`, `tear down`).
    pub(crate) fn network(action: &'static str, id: &str) -> impl Fn(CniError) -> Error + Copy {
        move |source| Error::Network { action, id: id.to_owned(), source: Box::new(source) }
    }

    /// The [`Error::Task`] of `context`, for `map_err`.
    pub(super) fn task(context: &'static str) -> impl FnOnce(tokio::task::JoinError) -> Error {
        move |source| Error::Task { context, source }
    }
}
