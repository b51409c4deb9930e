//! The evented PLEG (upstream's pleg/evented.go): the runtime's `GetContainerEvents` stream,
//! which wakes the worker of a pod the moment one of its containers stops or is removed, beside
//! the relist in [`crate::pods`] — every second while no stream is open (containerd 1.6 has
//! none: it answers Unimplemented), every [`EVENTED_RELIST_PERIOD`] as a safety net while one is.
//!
//! Only the events the kubelet does not cause itself wake a worker: a container's exit
//! (ContainerStoppedEvent) and its removal (ContainerDeletedEvent). Created and started containers
//! are the outcome of the worker's own CreateContainer and StartContainer, whose sync reads the
//! runtime after them (upstream's evented PLEG ignores created events for the same reason and
//! sends started ones, which cost a second sync here for nothing).
//!
//! Unlike upstream, which gives the stream up after five failed attempts, a stream that ends or
//! fails is opened again with a back-off for as long as the runtime offers one: a restarted runtime
//! gets its events back. Unimplemented ends the attempts (the runtime has no events to give).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_cri::v1 as cri;
use tokio::sync::mpsc;

use crate::pod_runtime::POD_UID_LABEL;
use crate::runtime::Cri;

/// How often the runtime is relisted while its event stream is open (upstream relists every
/// 300 s then; a sandbox that dies on its own sends no container event, so it is found sooner).
pub const EVENTED_RELIST_PERIOD: Duration = Duration::from_secs(10);
/// The back-off between attempts to open the stream: doubling from the first to the last.
const RETRY_INITIAL: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// upstream's evented_pleg_connection_latency_seconds buckets (Prometheus' default buckets).
pub const LATENCY_BUCKETS: [f64; 11] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The stream's state, for the relist and `/metrics`.
#[derive(Debug, Default)]
pub struct Pleg {
    /// Whether an event stream is open now.
    evented: AtomicBool,
    /// upstream's evented_pleg_connection_success_count and _error_count.
    connections: AtomicU64,
    errors: AtomicU64,
    /// upstream's evented_pleg_connection_latency_seconds: how long after the runtime created
    /// each event it was read, by bucket (not cumulative), and the sum in nanoseconds.
    latency_buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    latency_sum_nanos: AtomicU64,
}

/// The evented PLEG's figures as `/metrics` shows them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlegCounts {
    pub connections: u64,
    pub errors: u64,
    /// Events read, by [`LATENCY_BUCKETS`] bucket and beyond the last (not cumulative).
    pub latency_buckets: Vec<u64>,
    pub latency_sum_seconds: f64,
}

impl Pleg {
    /// Whether the runtime's events are arriving (the relist is then only a safety net).
    pub fn evented(&self) -> bool {
        self.evented.load(Ordering::Acquire)
    }

    /// `/metrics`' upstream figures: connections opened, attempts that failed or ended, and the
    /// events' latencies.
    pub fn counts(&self) -> PlegCounts {
        PlegCounts {
            connections: self.connections.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            latency_buckets: self.latency_buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect(),
            #[expect(clippy::cast_precision_loss, reason = "nanoseconds of latency, far below 2^53")]
            latency_sum_seconds: self.latency_sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }

    /// Counts an event read `latency` after the runtime created it.
    fn observe(&self, latency: Duration) {
        let seconds = latency.as_secs_f64();
        let bucket = LATENCY_BUCKETS.iter().position(|&le| seconds <= le).unwrap_or(LATENCY_BUCKETS.len());
        self.latency_buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.latency_sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

/// How long ago the runtime created an event, by its `created_at` (nanoseconds since the epoch);
/// zero for one from the future.
fn latency(created_at: i64) -> Duration {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let created = Duration::from_nanos(u64::try_from(created_at).unwrap_or(0));
    now.saturating_sub(created)
}

/// The UID of the pod whose worker `event` wakes, if it wakes one (see the module's notes).
pub fn woken_pod(event: &cri::ContainerEventResponse) -> Option<&str> {
    let wakes = matches!(
        cri::ContainerEventType::try_from(event.container_event_type),
        Ok(cri::ContainerEventType::ContainerStoppedEvent | cri::ContainerEventType::ContainerDeletedEvent)
    );
    if !wakes {
        return None;
    }
    // The sandbox's metadata names the pod (upstream reads nothing else); the containers' labels
    // do too, for a runtime that sends no sandbox status.
    let from_sandbox =
        event.pod_sandbox_status.as_ref().and_then(|s| s.metadata.as_ref()).map(|m| m.uid.as_str());
    let from_labels =
        || event.containers_statuses.iter().find_map(|c| c.labels.get(POD_UID_LABEL)).map(String::as_str);
    from_sandbox.filter(|uid| !uid.is_empty()).or_else(from_labels)
}

/// Reads the runtime's container events for as long as it offers them, sending the UID of every
/// pod an event wakes to `wake`. Returns when the runtime has no events (Unimplemented) or `wake`
/// closes.
pub async fn run(mut cri: Cri, pleg: &Pleg, wake: mpsc::UnboundedSender<String>) {
    let mut retry = RETRY_INITIAL;
    loop {
        let opened = cri.runtime.get_container_events(cri::GetEventsRequest {}).await;
        let mut events = match opened {
            Ok(events) => events.into_inner(),
            Err(status) if status.code() == tonic::Code::Unimplemented => {
                pleg.errors.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    error = %status.message(),
                    "the runtime has no container events: relisting it every second"
                );
                return;
            }
            Err(status) => {
                pleg.errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %status.message(), ?retry, "opening the runtime's container events");
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(RETRY_MAX);
                continue;
            }
        };
        pleg.connections.fetch_add(1, Ordering::Relaxed);
        pleg.evented.store(true, Ordering::Release);
        tracing::debug!("reading the runtime's container events");
        retry = RETRY_INITIAL;
        let ended = loop {
            match events.next().await {
                Some(Ok(event)) => {
                    pleg.observe(latency(event.created_at));
                    if let Some(uid) = woken_pod(&event) {
                        tracing::trace!(%uid, container = %event.container_id, "woken by a container event");
                        if wake.send(uid.to_owned()).is_err() {
                            pleg.evented.store(false, Ordering::Release);
                            return;
                        }
                    }
                }
                Some(Err(status)) => break status.message().to_owned(),
                None => break "the stream ended".to_owned(),
            }
        };
        // Until it is open again, the relist runs at its full rate.
        pleg.evented.store(false, Ordering::Release);
        pleg.errors.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(error = %ended, "the runtime's container events stopped; relisting every second");
        tokio::time::sleep(retry).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(
        kind: cri::ContainerEventType,
        sandbox_uid: Option<&str>,
        label_uid: Option<&str>,
    ) -> cri::ContainerEventResponse {
        cri::ContainerEventResponse {
            container_id: "c1".into(),
            container_event_type: kind as i32,
            created_at: 1,
            pod_sandbox_status: sandbox_uid.map(|uid| cri::PodSandboxStatus {
                metadata: Some(cri::PodSandboxMetadata { uid: uid.into(), ..Default::default() }),
                ..Default::default()
            }),
            containers_statuses: vec![cri::ContainerStatus {
                labels: label_uid
                    .map(|uid| [(POD_UID_LABEL.to_owned(), uid.to_owned())].into())
                    .unwrap_or_default(),
                ..Default::default()
            }],
        }
    }

    #[test]
    fn exits_and_removals_wake_the_pod() {
        use cri::ContainerEventType as E;
        assert_eq!(woken_pod(&event(E::ContainerStoppedEvent, Some("u1"), None)), Some("u1"));
        assert_eq!(woken_pod(&event(E::ContainerDeletedEvent, Some("u1"), Some("u2"))), Some("u1"));
        // The kubelet's own creates and starts wake nothing: its sync reads the runtime after them.
        assert_eq!(woken_pod(&event(E::ContainerCreatedEvent, Some("u1"), None)), None);
        assert_eq!(woken_pod(&event(E::ContainerStartedEvent, Some("u1"), None)), None);
    }

    #[test]
    fn latencies_fall_in_upstreams_buckets() {
        let pleg = Pleg::default();
        pleg.observe(Duration::from_millis(3));
        pleg.observe(Duration::from_millis(5));
        pleg.observe(Duration::from_millis(700));
        pleg.observe(Duration::from_secs(60));
        let counts = pleg.counts();
        assert_eq!(counts.latency_buckets, [2, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
        assert!((counts.latency_sum_seconds - 60.708).abs() < 1e-9, "{counts:?}");
        assert!(latency(i64::MAX) == Duration::ZERO && latency(0) > Duration::from_secs(1_000_000));
    }

    #[test]
    fn the_containers_labels_name_the_pod_without_a_sandbox_status() {
        use cri::ContainerEventType as E;
        assert_eq!(woken_pod(&event(E::ContainerStoppedEvent, None, Some("u2"))), Some("u2"));
        assert_eq!(woken_pod(&event(E::ContainerStoppedEvent, Some(""), Some("u2"))), Some("u2"));
        assert_eq!(woken_pod(&event(E::ContainerStoppedEvent, None, None)), None);
        // An unknown event type wakes nothing.
        let mut unknown = event(E::ContainerStoppedEvent, Some("u1"), None);
        unknown.container_event_type = 42;
        assert_eq!(woken_pod(&unknown), None);
    }
}
