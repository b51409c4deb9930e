//! The gRPC edge of the domain errors: which status code each error of the container and sandbox
//! modules (and of the OCI runtime's driver) answers with. Every message is the error's text,
//! unchanged.

use tonic::Status;

use crate::container;
use crate::oci::runtime::RuntimeError;
use crate::sandbox;

impl From<RuntimeError> for Status {
    fn from(error: RuntimeError) -> Status {
        if error.is_not_found() {
            Status::not_found(error.to_string())
        } else {
            Status::internal(error.to_string())
        }
    }
}

impl From<container::Error> for Status {
    fn from(error: container::Error) -> Status {
        use container::Error as E;
        let message = error.to_string();
        match error {
            E::Runtime(runtime) => Status::from(runtime),
            E::NotFound(_) => Status::not_found(message),
            E::AmbiguousId(_) | E::InvalidId(_) | E::UnknownHandler(_) | E::EmptyCommand => {
                Status::invalid_argument(message)
            }
            E::AlreadyExists(_) => Status::already_exists(message),
            E::NotCreated { .. } | E::NotRunning { .. } | E::Exited(_) | E::RootfsStillMounted { .. } => {
                Status::failed_precondition(message)
            }
            E::ExecTimeout { .. } => Status::deadline_exceeded(message),
            E::CreateFailed { .. }
            | E::ExecFailed { .. }
            | E::ReopenRefused { .. }
            | E::Io { .. }
            | E::Spec { .. }
            | E::Encode(_)
            | E::Task(_) => Status::internal(message),
        }
    }
}

impl From<sandbox::Error> for Status {
    fn from(error: sandbox::Error) -> Status {
        use sandbox::Error as E;
        let message = error.to_string();
        match error {
            E::Containers(containers) => Status::from(containers),
            E::Network { source, .. } => Status::new(source.grpc_code(), message),
            E::NotFound(_) => Status::not_found(message),
            E::EmptyId
            | E::AmbiguousId(_)
            | E::NoConfig
            | E::NoMetadata
            | E::IncompleteMetadata
            | E::UnknownHandler { .. }
            | E::Sysctl { .. }
            | E::DnsConfig(_)
            | E::Hostname(_) => Status::invalid_argument(message),
            E::NameReserved { .. } => Status::already_exists(message),
            E::RecordedNetwork(_) | E::Io { .. } | E::Task { .. } | E::Poisoned => Status::internal(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tonic::Code;

    use super::*;
    use crate::container::{Error, State};

    #[test]
    fn container_errors_keep_their_codes_and_messages() {
        let runtime_failed = |message: &str| RuntimeError::Failed {
            binary: "/usr/sbin/runc".to_owned(),
            command: "kill".to_owned(),
            message: message.to_owned(),
        };
        let cases = [
            (Error::NotFound("abc".to_owned()), Code::NotFound, r#"container "abc" not found"#),
            (Error::AmbiguousId("a".to_owned()), Code::InvalidArgument, r#"container id "a" is ambiguous"#),
            (Error::EmptyCommand, Code::InvalidArgument, "the command to exec is empty"),
            (Error::AlreadyExists("abc".to_owned()), Code::AlreadyExists, "container abc already exists"),
            (
                Error::NotRunning { id: "abc".to_owned(), state: State::Exited },
                Code::FailedPrecondition,
                "container abc is not running (Exited)",
            ),
            (
                Error::NotCreated { id: "abc".to_owned(), state: State::Running },
                Code::FailedPrecondition,
                "container abc is Running, not created",
            ),
            (Error::Exited("abc".to_owned()), Code::FailedPrecondition, "container abc is not running"),
            (
                Error::ExecTimeout {
                    id: "abc".to_owned(),
                    cmd: vec!["sleep".to_owned(), "9".to_owned()],
                    timeout: Duration::from_millis(300),
                },
                Code::DeadlineExceeded,
                r#"command ["sleep", "9"] in container abc timed out after 300ms"#,
            ),
            (
                Error::Runtime(runtime_failed("container does not exist")),
                Code::NotFound,
                "/usr/sbin/runc kill: container does not exist",
            ),
            (Error::Runtime(runtime_failed("boom")), Code::Internal, "/usr/sbin/runc kill: boom"),
            (
                Error::Io { context: "creating the bundle", source: std::io::Error::other("full") },
                Code::Internal,
                "creating the bundle: full",
            ),
        ];
        for (error, code, message) in cases {
            let status = Status::from(error);
            assert_eq!((status.code(), status.message()), (code, message));
        }
    }

    #[test]
    fn sandbox_errors_keep_their_codes_and_messages() {
        use crate::sandbox::Error;
        let cni = |code| crate::cni::CniError::Plugin {
            plugin: "bridge".to_owned(),
            command: "add".to_owned(),
            code,
            msg: "no".to_owned(),
            details: String::new(),
        };
        let cases = [
            (Error::EmptyId, Code::InvalidArgument, "the pod sandbox id is empty"),
            (Error::NotFound("ab".to_owned()), Code::NotFound, r#"pod sandbox "ab" not found"#),
            (
                Error::UnknownHandler {
                    handler: "kata".to_owned(),
                    handlers: vec!["crun".to_owned(), "runc".to_owned()],
                },
                Code::InvalidArgument,
                r#"RunPodSandbox: no runtime for "kata" is configured (handlers: crun, runc)"#,
            ),
            (
                Error::NameReserved { name: "p_default_u_0".to_owned(), holder: "ab".to_owned() },
                Code::AlreadyExists,
                r#"RunPodSandbox: the sandbox name "p_default_u_0" is reserved for ab"#,
            ),
            (
                Error::network("set up", "ab")(cni(Some(11))),
                Code::Unavailable,
                r#"failed to set up the network of sandbox ab: plugin type="bridge" failed (add): CNI error code 11: no"#,
            ),
            (
                Error::network("tear down", "ab")(cni(None)),
                Code::Unknown,
                r#"failed to tear down the network of sandbox ab: plugin type="bridge" failed (add): no"#,
            ),
            (Error::Poisoned, Code::Internal, "a sandbox lock is poisoned"),
            (
                Error::Containers(container::Error::Exited("cd".to_owned())),
                Code::FailedPrecondition,
                "container cd is not running",
            ),
        ];
        for (error, code, message) in cases {
            let status = Status::from(error);
            assert_eq!((status.code(), status.message()), (code, message));
        }
    }
}
