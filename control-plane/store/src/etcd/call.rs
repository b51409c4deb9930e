//! Requests to etcd: each bounded by the request timeout, retried where that is safe, and its errors
//! sorted into what the contract can say about them, completed with what etcd's messages leave out.

use std::future::Future;
use std::time::Duration;

use etcd_client::{self as ec, Error as EtcdError};
use tokio::time::Instant;

use super::Inner;
use crate::error::StoreError;
use crate::types::{LeaseId, MAX_REQUEST_BYTES, Revision};

/// gRPC status codes (fixed by the gRPC spec), read as numbers: etcd-client exposes tonic's `Status`
/// but not its `Code` type.
mod code {
    pub(super) const CANCELLED: i32 = 1;
    pub(super) const UNKNOWN: i32 = 2;
    pub(super) const INVALID_ARGUMENT: i32 = 3;
    pub(super) const DEADLINE_EXCEEDED: i32 = 4;
    pub(super) const NOT_FOUND: i32 = 5;
    pub(super) const ALREADY_EXISTS: i32 = 6;
    pub(super) const PERMISSION_DENIED: i32 = 7;
    pub(super) const RESOURCE_EXHAUSTED: i32 = 8;
    pub(super) const FAILED_PRECONDITION: i32 = 9;
    pub(super) const ABORTED: i32 = 10;
    pub(super) const OUT_OF_RANGE: i32 = 11;
    pub(super) const UNAVAILABLE: i32 = 14;
    pub(super) const UNAUTHENTICATED: i32 = 16;
}

/// The first pause before a retry; it doubles up to [`MAX_BACKOFF`].
pub(super) const FIRST_BACKOFF: Duration = Duration::from_millis(50);
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What a failure means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Compacted,
    FutureRevision,
    LeaseNotFound,
    TooLarge,
    /// etcd cannot be reached, has no leader or did not answer in time.
    Unavailable,
    /// etcd refused the request as such (bad argument, credentials, permissions).
    Invalid,
    Other,
}

/// A failed etcd request.
#[derive(Debug, Clone)]
pub(super) struct Failure {
    pub kind: Kind,
    /// What failed and etcd's words for it.
    pub message: String,
    /// The request certainly did not reach etcd's state machine (no connection, refused before a
    /// proposal), so sending it again cannot apply it twice.
    pub unsent: bool,
}

impl Failure {
    pub(super) fn new(kind: Kind, message: String) -> Failure {
        Failure { kind, message, unsent: false }
    }
}

/// Which failures a request may be sent again after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Retry {
    /// Reads and other requests that can be repeated: after any unavailability.
    Always,
    /// Writes: only when the request certainly did not reach etcd.
    IfUnsent,
}

impl Retry {
    fn allows(self, failure: &Failure) -> bool {
        failure.kind == Kind::Unavailable && (self == Retry::Always || failure.unsent)
    }
}

/// Runs `attempt` until it succeeds, fails in a way `retry` does not allow again, or `timeout` passes
/// (each attempt is cut off at the deadline). `what` names the request in error messages.
pub(super) async fn with_retries<T, F, Fut>(
    what: &str,
    timeout: Duration,
    retry: Retry,
    mut attempt: F,
) -> Result<T, Failure>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, EtcdError>>,
{
    let deadline = Instant::now() + timeout;
    let mut backoff = FIRST_BACKOFF;
    let mut last: Option<Failure> = None;
    loop {
        let failure = match tokio::time::timeout_at(deadline, attempt()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(error)) => classify(what, &error),
            Err(_elapsed) => {
                let last = last.map(|f| format!(" (last error: {})", f.message)).unwrap_or_default();
                let message = format!("{what}: etcd did not answer within {timeout:?}{last}");
                return Err(Failure::new(Kind::Unavailable, message));
            }
        };
        if !retry.allows(&failure) || Instant::now() + backoff >= deadline {
            return Err(failure);
        }
        tracing::debug!(error = %failure.message, ?backoff, "retrying an etcd request");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        last = Some(failure);
    }
}

/// Sorts an etcd-client error by etcd's error messages (stable across etcd versions) and gRPC codes.
pub(super) fn classify(what: &str, error: &EtcdError) -> Failure {
    let (kind, unsent, text) = match error {
        EtcdError::GRpcStatus(status) => {
            // Transport failures carry their cause (a refused connection, a TLS alert) as the source.
            let message = with_causes(status.message(), std::error::Error::source(status));
            let (kind, unsent) = classify_status(status.code() as i32, &message);
            (kind, unsent, format!("{message} ({:?})", status.code()))
        }
        // Endpoint set-up and connection errors: nothing was sent.
        EtcdError::TransportError(e) => (
            Kind::Unavailable,
            true,
            with_causes(&format!("transport error: {e}"), std::error::Error::source(e)),
        ),
        EtcdError::IoError(e) => (Kind::Unavailable, false, format!("io error: {e}")),
        EtcdError::WatchError(e) => (Kind::Unavailable, false, format!("watch stream: {e}")),
        EtcdError::LeaseKeepAliveError(e) if e.contains("lease not found") => {
            (Kind::LeaseNotFound, false, e.clone())
        }
        EtcdError::LeaseKeepAliveError(e) => (Kind::Unavailable, false, format!("lease keep-alive: {e}")),
        EtcdError::InvalidArgs(_)
        | EtcdError::InvalidUri(_)
        | EtcdError::InvalidMetadataValue(_)
        | EtcdError::EndpointError(_) => (Kind::Invalid, true, error.to_string()),
        other => (Kind::Other, false, other.to_string()),
    };
    Failure { kind, message: format!("{what}: {text}"), unsent }
}

/// `message`, then each cause in `source`'s chain that does not repeat what was said already.
fn with_causes(message: &str, mut source: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut text = message.to_owned();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

fn classify_status(code: i32, message: &str) -> (Kind, bool) {
    let unsent_markers = [
        // The connection to the member could not be made.
        "error trying to connect",
        "tcp connect error",
        "Connection refused",
        "connection refused",
        // Refused by etcd before a proposal: requests carry the require-leader flag.
        "etcdserver: no leader",
        "etcdserver: too many requests",
        "etcdserver: not capable",
    ];
    let unsent = unsent_markers.iter().any(|marker| message.contains(marker));
    if message.contains("required revision has been compacted") {
        return (Kind::Compacted, false);
    }
    if message.contains("required revision is a future revision") {
        return (Kind::FutureRevision, false);
    }
    if message.contains("requested lease not found") {
        return (Kind::LeaseNotFound, false);
    }
    if message.contains("request is too large") || message.contains("message larger than max") {
        return (Kind::TooLarge, false);
    }
    let kind = match code {
        // Transport failures surface as Unknown or Unavailable.
        code::UNAVAILABLE | code::DEADLINE_EXCEEDED | code::CANCELLED | code::UNKNOWN | code::ABORTED => {
            Kind::Unavailable
        }
        code::RESOURCE_EXHAUSTED if unsent => Kind::Unavailable,
        code::INVALID_ARGUMENT
        | code::FAILED_PRECONDITION
        | code::OUT_OF_RANGE
        | code::PERMISSION_DENIED
        | code::UNAUTHENTICATED
        | code::NOT_FOUND
        | code::ALREADY_EXISTS => Kind::Invalid,
        _ => Kind::Other,
    };
    (kind, unsent)
}

/// What a request was about, to fill in the errors etcd's messages leave out.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct About {
    /// The revision asked for.
    pub revision: Revision,
    pub lease: LeaseId,
    pub size: usize,
}

impl Inner {
    /// The [`StoreError`] for a failure, asking etcd for what its message leaves out.
    pub(super) async fn error(&self, failure: Failure, about: About) -> StoreError {
        match failure.kind {
            Kind::Compacted => {
                let compacted = self.compacted_after(about.revision).await.unwrap_or(about.revision + 1);
                StoreError::Compacted { requested: about.revision, compacted }
            }
            Kind::FutureRevision => {
                let current = self.get_revision("reading the current revision", self.request_timeout).await;
                StoreError::FutureRevision { requested: about.revision, current: current.unwrap_or(0) }
            }
            Kind::LeaseNotFound => StoreError::LeaseNotFound { id: about.lease },
            Kind::TooLarge => StoreError::RequestTooLarge { size: about.size, limit: MAX_REQUEST_BYTES },
            Kind::Unavailable => StoreError::Unavailable(failure.message),
            Kind::Invalid => StoreError::InvalidRequest(failure.message),
            Kind::Other => StoreError::Engine(failure.message),
        }
    }

    /// etcd's compacted revision when `revision` was compacted away (so it is above `revision`);
    /// `None` when `revision` can still be read, or the answer did not come.
    ///
    /// etcd names no compacted revision in a range's error, but a watch from a compacted revision is
    /// cancelled with it.
    pub(super) async fn compacted_after(&self, revision: Revision) -> Option<Revision> {
        let revision = revision.max(1);
        let key = self.full_key("/");
        let probe = async {
            let options = ec::GetOptions::new().with_count_only().with_revision(revision);
            let read = self.kv.clone().get(key.clone(), Some(options)).await;
            if !matches!(&read, Err(e) if classify("", e).kind == Kind::Compacted) {
                return None;
            }
            let options = ec::WatchOptions::new().with_start_revision(revision);
            let mut stream = self.watch.clone().watch(key.clone(), Some(options)).await.ok()?;
            while let Some(response) = stream.message().await.ok()? {
                if response.compact_revision() > 0 {
                    return Some(response.compact_revision());
                }
                if response.canceled() {
                    return None;
                }
            }
            None
        };
        tokio::time::timeout(self.request_timeout, probe).await.ok().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: i32, message: &str) -> Failure {
        let (kind, unsent) = classify_status(code, message);
        Failure { kind, message: format!("op: {message}"), unsent }
    }

    #[test]
    fn etcd_errors_are_sorted() {
        let compacted = status(code::OUT_OF_RANGE, "etcdserver: mvcc: required revision has been compacted");
        assert_eq!(compacted.kind, Kind::Compacted);
        let future = status(code::OUT_OF_RANGE, "etcdserver: mvcc: required revision is a future revision");
        assert_eq!(future.kind, Kind::FutureRevision);
        assert_eq!(
            status(code::NOT_FOUND, "etcdserver: requested lease not found").kind,
            Kind::LeaseNotFound
        );
        assert_eq!(status(code::INVALID_ARGUMENT, "etcdserver: request is too large").kind, Kind::TooLarge);
        let refused = status(code::UNAVAILABLE, "tcp connect error: Connection refused (os error 111)");
        assert!(refused.kind == Kind::Unavailable && refused.unsent);
        let lost = status(code::UNAVAILABLE, "etcdserver: leader changed");
        assert!(lost.kind == Kind::Unavailable && !lost.unsent);
        assert!(Retry::Always.allows(&lost) && !Retry::IfUnsent.allows(&lost));
        assert!(Retry::IfUnsent.allows(&refused));
        let auth =
            status(code::INVALID_ARGUMENT, "etcdserver: authentication failed, invalid user ID or password");
        assert_eq!(auth.kind, Kind::Invalid);
        assert!(auth.message.starts_with("op: etcdserver: authentication failed"));
    }
}
