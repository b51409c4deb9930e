//! Watches of the etcd store, resumed across lost connections.
//!
//! A watch remembers the first revision it has not received. When its etcd stream fails or ends
//! without being cancelled (a member killed or restarted, a member that lost its leader), it opens a
//! new one from that revision, over whichever member answers, pausing between attempts; every event of
//! a revision comes in one etcd response, so the consumer sees no gap and no duplicate. It gives up
//! with [`StoreError::Unavailable`] after `watch_resume_timeout` (default [`RESUME_TIMEOUT`]) without a
//! working stream. etcd cancelling
//! it because the revision was compacted ends it with [`StoreError::Compacted`].
//!
//! Watches ask for etcd's progress notifications (sent to a watch that is up to date, every
//! `--experimental-watch-progress-notify-interval`, 10 minutes by default) and pass them on as
//! [`WatchItem::Progress`].
//!
//! The stream is a plain state machine polled by the consumer (no task of its own): dropping it drops
//! the etcd stream, which cancels the watch on the member.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use etcd_client as ec;
use futures::StreamExt;
use tokio::time::Instant;

use super::Inner;
use super::call::{FIRST_BACKOFF, Failure, Kind, MAX_BACKOFF, Retry};
use crate::error::{Result, StoreError};
use crate::types::{Event, EventKind, Revision};
use crate::validate;
use crate::{ProgressStream, WatchItem};

/// How long a watch keeps trying to resume before it ends with [`StoreError::Unavailable`], unless
/// the options say otherwise.
pub const RESUME_TIMEOUT: Duration = Duration::from_secs(30);

struct Watch {
    inner: Arc<Inner>,
    /// The prefix as the caller gave it, for messages.
    prefix: String,
    key: Vec<u8>,
    range_end: Vec<u8>,
    /// The first revision not received yet (0 until etcd said where "now" is).
    next: Revision,
    stream: Option<Box<ec::WatchStream>>,
    /// When the stream was lost, if it was.
    lost_at: Option<Instant>,
    last_error: String,
    queue: VecDeque<Result<WatchItem>>,
    done: bool,
}

/// What opening an etcd watch stream gave.
enum Opened {
    Stream(Box<ec::WatchStream>),
    Compacted(Revision),
    Failed(Failure),
}

/// Opens the watch before returning, so a change made after this returns is seen even without a start
/// revision, and an unreachable etcd fails the call.
pub(super) async fn watch(
    inner: Arc<Inner>,
    prefix: &str,
    start: Option<Revision>,
) -> Result<ProgressStream> {
    let key = inner.full_key(prefix);
    let range_end = validate::prefix_end(&key);
    let mut watch = Watch {
        inner,
        prefix: prefix.to_owned(),
        key,
        range_end,
        next: start.unwrap_or(0),
        stream: None,
        lost_at: None,
        last_error: String::new(),
        queue: VecDeque::new(),
        done: false,
    };
    match watch.open().await {
        Opened::Stream(stream) => watch.stream = Some(stream),
        Opened::Compacted(compacted) => watch.compacted(compacted),
        Opened::Failed(failure) => {
            return Err(watch.inner.error(failure, super::About::default()).await);
        }
    }
    Ok(futures::stream::unfold(watch, |mut watch| async move {
        loop {
            if let Some(item) = watch.queue.pop_front() {
                return Some((item, watch));
            }
            if watch.done {
                return None;
            }
            watch.step().await;
        }
    })
    .boxed())
}

impl Watch {
    fn fail(&mut self, error: StoreError) {
        self.queue.push_back(Err(error));
        self.stream = None;
        self.done = true;
    }

    fn compacted(&mut self, compacted: Revision) {
        self.fail(StoreError::Compacted { requested: self.next, compacted });
    }

    /// Opens an etcd watch from `next` and waits for etcd to confirm it.
    async fn open(&mut self) -> Opened {
        let mut options =
            ec::WatchOptions::new().with_range(self.range_end.clone()).with_prev_key().with_progress_notify();
        if self.next > 0 {
            options = options.with_start_revision(self.next);
        }
        let what = format!("etcd watch of {:?} from revision {}", self.prefix, self.next);
        let (key, inner) = (&self.key, &self.inner);
        let created = inner
            .call(&what, Retry::Always, || async {
                let mut stream = inner.watch.clone().watch(key.clone(), Some(options.clone())).await?;
                match stream.message().await? {
                    Some(first) => Ok((stream, first)),
                    None => {
                        Err(ec::Error::WatchError("the stream ended before the watch was created".into()))
                    }
                }
            })
            .await;
        let (stream, first) = match created {
            Ok(created) => created,
            Err(failure) => return Opened::Failed(failure),
        };
        if first.compact_revision() > 0 {
            return Opened::Compacted(first.compact_revision());
        }
        if first.canceled() || !first.created() {
            let reason = first.cancel_reason();
            return Opened::Failed(Failure::new(
                Kind::Invalid,
                format!("{what}: etcd refused the watch: {reason}"),
            ));
        }
        if self.next == 0 {
            // Everything after the revision etcd created the watch at.
            self.next = super::header_revision(first.header()) + 1;
        }
        Opened::Stream(Box::new(stream))
    }

    /// Fills the queue, resumes the watch or ends it.
    async fn step(&mut self) {
        let Some(stream) = &mut self.stream else {
            return self.resume().await;
        };
        let response = match stream.message().await {
            Ok(Some(response)) => response,
            Ok(None) => return self.lost("the etcd watch stream ended".into()),
            Err(error) => {
                let failure = super::call::classify("etcd watch stream", &error);
                if failure.kind == Kind::Unavailable {
                    return self.lost(failure.message);
                }
                let error = self.inner.error(failure, super::About::default()).await;
                return self.fail(error);
            }
        };
        if response.compact_revision() > 0 {
            return self.compacted(response.compact_revision());
        }
        if response.canceled() {
            // A member without a leader cancels its watches ("etcdserver: no leader"): resume elsewhere.
            return self.lost(format!("etcd cancelled the watch: {}", response.cancel_reason()));
        }
        if response.events().is_empty() {
            // A progress notification: nothing more up to the header's revision.
            let revision = super::header_revision(response.header());
            if revision >= self.next {
                self.next = revision + 1;
                self.queue.push_back(Ok(WatchItem::Progress(revision)));
            }
            return;
        }
        let first_new = self.next;
        for event in response.events() {
            match self.event(event) {
                // Defensive: a resumed stream never repeats a revision already received. (The events
                // of one revision all come in one response.)
                Ok(event) if event.revision() < first_new => {}
                Ok(event) => {
                    self.next = self.next.max(event.revision() + 1);
                    self.queue.push_back(Ok(WatchItem::Event(event)));
                }
                Err(error) => return self.fail(error),
            }
        }
    }

    fn lost(&mut self, reason: String) {
        tracing::warn!(prefix = %self.prefix, next = self.next, %reason, "etcd watch lost; resuming");
        self.stream = None;
        self.last_error = reason;
        self.lost_at.get_or_insert_with(Instant::now);
    }

    /// Opens the watch again from `next`, pausing between attempts, for up to the resume timeout.
    async fn resume(&mut self) {
        let timeout = self.inner.watch_resume_timeout;
        let deadline = *self.lost_at.get_or_insert_with(Instant::now) + timeout;
        let mut backoff = FIRST_BACKOFF;
        loop {
            match self.open().await {
                Opened::Stream(stream) => {
                    tracing::info!(prefix = %self.prefix, next = self.next, "etcd watch resumed");
                    self.stream = Some(stream);
                    self.lost_at = None;
                    return;
                }
                Opened::Compacted(compacted) => return self.compacted(compacted),
                Opened::Failed(failure) if failure.kind == Kind::Unavailable => {
                    self.last_error = failure.message;
                }
                Opened::Failed(failure) => {
                    let error = self.inner.error(failure, super::About::default()).await;
                    return self.fail(error);
                }
            }
            if Instant::now() + backoff >= deadline {
                return self.fail(StoreError::Unavailable(format!(
                    "etcd watch of {:?} could not be resumed at revision {} within {timeout:?}: {}",
                    self.prefix, self.next, self.last_error
                )));
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    fn event(&self, event: &ec::Event) -> Result<Event> {
        let kind = match event.event_type() {
            ec::EventType::Put => EventKind::Put,
            ec::EventType::Delete => EventKind::Delete,
        };
        let kv =
            event.kv().ok_or_else(|| StoreError::Engine("etcd sent a watch event without a key".into()))?;
        let kv = self.inner.key_value(kv)?;
        let prev_kv = event.prev_kv().map(|kv| self.inner.key_value(kv)).transpose()?;
        Ok(Event { kind, kv, prev_kv })
    }
}
