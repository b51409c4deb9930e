//! Why a container operation failed. Each variant's text is the message a CRI client reads; which
//! gRPC code it answers with is decided at the edge (`crate::service`), not here.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use super::State;
use crate::oci::runtime::RuntimeError;

/// A container operation that failed, and with which input.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No container has this id, nor an id starting with it (NotFound).
    #[error("container {0:?} not found")]
    NotFound(String),
    /// More than one container's id starts with this prefix (InvalidArgument).
    #[error("container id {0:?} is ambiguous")]
    AmbiguousId(String),
    /// An id that cannot name the container's directory: empty, with a `/`, or starting with `.`
    /// (InvalidArgument).
    #[error("invalid container id {0:?}")]
    InvalidId(String),
    /// A container with this id exists already (AlreadyExists).
    #[error("container {0} already exists")]
    AlreadyExists(String),
    /// No runtime binary is configured for this runtime handler (InvalidArgument).
    #[error("no runtime for handler {0:?}")]
    UnknownHandler(String),
    /// An exec without a command (InvalidArgument).
    #[error("the command to exec is empty")]
    EmptyCommand,
    /// StartContainer of a container that is not CREATED (FailedPrecondition).
    #[error("container {id} is {state:?}, not created")]
    NotCreated {
        /// The container.
        id: String,
        /// Its state.
        state: State,
    },
    /// Exec, attach or a log reopening in a container that is not RUNNING (FailedPrecondition).
    #[error("container {id} is not running ({state:?})")]
    NotRunning {
        /// The container.
        id: String,
        /// Its state.
        state: State,
    },
    /// UpdateContainerResources of a container that exited (FailedPrecondition).
    #[error("container {0} is not running")]
    Exited(String),
    /// The rootfs is still mounted inside the container's directory after the unmount hook ran, so
    /// the directory cannot go (FailedPrecondition).
    #[error("the rootfs {} of container {id} is still mounted", rootfs.display())]
    RootfsStillMounted {
        /// The container.
        id: String,
        /// Its rootfs mount point.
        rootfs: PathBuf,
    },
    /// An ExecSync command still running at its timeout; it was killed (DeadlineExceeded).
    #[error("command {cmd:?} in container {id} timed out after {timeout:?}")]
    ExecTimeout {
        /// The container.
        id: String,
        /// The command.
        cmd: Vec<String>,
        /// The timeout it was given.
        timeout: Duration,
    },
    /// The OCI runtime failed (NotFound when it says the container does not exist, else Internal).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The monitor reported that the container could not be created (Internal).
    #[error("creating container {id}: {message}")]
    CreateFailed {
        /// The container.
        id: String,
        /// The monitor's report (the runtime's error), or its log.
        message: String,
    },
    /// `<runtime> exec` itself failed, before running the command (Internal).
    #[error("exec in container {id}: {message}")]
    ExecFailed {
        /// The container.
        id: String,
        /// The runtime's error messages.
        message: String,
    },
    /// The monitor did not reopen the container's log (Internal).
    #[error("reopening the log of {id}: {answer}")]
    ReopenRefused {
        /// The container.
        id: String,
        /// The monitor's answer.
        answer: String,
    },
    /// A file, a socket or a process of the container failed (Internal).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: &'static str,
        /// Why it failed.
        source: io::Error,
    },
    /// The bundle's config.json could not be read or written (Internal).
    #[error("{context}: {source}")]
    Spec {
        /// What was being done.
        context: &'static str,
        /// Why it failed.
        source: oci_spec::OciSpecError,
    },
    /// An exec's process.json could not be encoded (Internal).
    #[error("encoding process.json: {0}")]
    Encode(#[source] serde_json::Error),
    /// The blocking task of a runtime call failed (panicked or was cancelled) (Internal).
    #[error("runtime call: {0}")]
    Task(#[source] tokio::task::JoinError),
}

impl Error {
    /// The [`Error::Io`] of `context`, for `map_err`.
    pub(super) fn io(context: &'static str) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Io { context, source }
    }

    /// The [`Error::Spec`] of `context`, for `map_err`.
    pub(super) fn spec(context: &'static str) -> impl FnOnce(oci_spec::OciSpecError) -> Error {
        move |source| Error::Spec { context, source }
    }
}
