//! /healthz and /metrics, as kube-proxy serves them: [`SyncStatus`] is what the sync loop records;
//! [`metrics`] and [`healthz`] render it (pure); [`serve`] answers HTTP/1 on a listener (hyper).

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};

use crate::backend::SyncStats;

/// The sync duration histogram's bucket bounds, in seconds (kube-proxy's exponential buckets).
const BUCKETS: [f64; 12] =
    [0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048];

/// How long a change may wait for a sync before /healthz answers 503: kube-proxy's health timeout,
/// twice its default `--sync-period` of 30 s.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(60);

/// What the sync loop records.
#[derive(Debug, Clone, Default)]
pub struct SyncStatus {
    /// Syncs per bucket (cumulative counts are computed when rendered).
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
    failures: u64,
    /// The last successful sync: when, and what it wrote.
    last: Option<(SystemTime, SyncStats)>,
    /// When the oldest change not yet synced came in (kube-proxy's oldestPendingQueued).
    pending_since: Option<SystemTime>,
}

impl SyncStatus {
    /// Records a successful sync of `duration` ending `at`.
    pub fn record(&mut self, at: SystemTime, duration: Duration, stats: SyncStats) {
        let seconds = duration.as_secs_f64();
        if let Some(index) = BUCKETS.iter().position(|bound| seconds <= *bound) {
            self.buckets[index] += 1;
        }
        self.count += 1;
        self.sum += seconds;
        self.last = Some((at, stats));
        self.pending_since = None;
    }

    /// Records a sync that found nothing to do (changes undone before it ran): nothing waits.
    pub fn up_to_date(&mut self) {
        self.pending_since = None;
    }

    /// Records a change (an informer event) at `at`, for the next sync to apply.
    pub fn queued(&mut self, at: SystemTime) {
        self.pending_since.get_or_insert(at);
    }

    /// What /healthz says at `now`: healthy once a sync succeeded, unless a change has waited for
    /// one longer than [`HEALTH_TIMEOUT`] (syncs failing or stalled), as kube-proxy.
    pub fn healthy(&self, now: SystemTime) -> bool {
        let waited = |since: SystemTime| now.duration_since(since).unwrap_or_default();
        self.last.is_some() && self.pending_since.is_none_or(|since| waited(since) <= HEALTH_TIMEOUT)
    }

    /// Records a failed sync.
    pub fn failed(&mut self) {
        self.failures += 1;
    }
}

/// The Prometheus text of the status.
pub fn metrics(status: &SyncStatus) -> String {
    let mut text = String::new();
    let name = "kubeproxy_sync_proxy_rules_duration_seconds";
    let _ = writeln!(text, "# HELP {name} SyncProxyRules latency in seconds");
    let _ = writeln!(text, "# TYPE {name} histogram");
    let mut cumulative = 0;
    for (bound, count) in BUCKETS.iter().zip(status.buckets) {
        cumulative += count;
        let _ = writeln!(text, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
    }
    let _ = writeln!(text, "{name}_bucket{{le=\"+Inf\"}} {}", status.count);
    let _ = writeln!(text, "{name}_sum {}", status.sum);
    let _ = writeln!(text, "{name}_count {}", status.count);
    let (last, rules, elements, full) = match status.last {
        Some((at, stats)) => (seconds_since_epoch(at), stats.rules, stats.elements, u8::from(stats.full)),
        None => (0.0, 0, 0, 0),
    };
    let gauges = [
        ("kubeproxy_sync_proxy_rules_last_timestamp_seconds", "The last time proxy rules were synced", last),
        ("keel_proxy_sync_rules", "Rules written by the last sync", rules as f64),
        ("keel_proxy_sync_elements", "Map and set elements written by the last sync", elements as f64),
        ("keel_proxy_sync_full", "Whether the last sync was a full one", f64::from(full)),
        ("keel_proxy_sync_failures_total", "Syncs that failed", status.failures as f64),
    ];
    for (name, help, value) in gauges {
        let kind = if name.ends_with("_total") { "counter" } else { "gauge" };
        let _ = writeln!(text, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}");
    }
    text
}

/// kube-proxy's /healthz answer: 200 while [`SyncStatus::healthy`], 503 otherwise; the JSON body
/// says when the last sync was.
pub fn healthz(status: &SyncStatus, now: SystemTime) -> (StatusCode, String) {
    let current = seconds_since_epoch(now);
    let code = if status.healthy(now) { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    match status.last {
        Some((at, _)) => {
            (code, format!("{{\"lastUpdated\": {}, \"currentTime\": {current}}}", seconds_since_epoch(at)))
        }
        None => (code, format!("{{\"lastUpdated\": null, \"currentTime\": {current}}}")),
    }
}

fn seconds_since_epoch(at: SystemTime) -> f64 {
    at.duration_since(UNIX_EPOCH).map_or(0.0, |since| since.as_secs_f64())
}

/// Answers /healthz and /metrics (anything else: 404) on `listener` until the task is dropped.
pub async fn serve(listener: tokio::net::TcpListener, status: Arc<Mutex<SyncStatus>>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        let status = Arc::clone(&status);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<hyper::body::Incoming>| {
                let status = Arc::clone(&status);
                async move { Ok::<_, Infallible>(answer(request.uri().path(), &status)) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, service).await;
        });
    }
}

fn answer(path: &str, status: &Mutex<SyncStatus>) -> Response<Full<Bytes>> {
    let snapshot = status.lock().map(|status| status.clone()).unwrap_or_default();
    let (code, body, kind) = match path {
        "/metrics" => (StatusCode::OK, metrics(&snapshot), "text/plain; version=0.0.4"),
        "/healthz" | "/livez" => {
            let (code, body) = healthz(&snapshot, SystemTime::now());
            (code, body, "application/json")
        }
        _ => (StatusCode::NOT_FOUND, "not found\n".to_owned(), "text/plain"),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = code;
    if let Ok(value) = hyper::header::HeaderValue::from_str(kind) {
        response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn the_histogram_is_cumulative_and_the_gauges_follow_the_last_sync() {
        let mut status = SyncStatus::default();
        let at = UNIX_EPOCH + Duration::from_secs(1_000);
        status.record(at, Duration::from_micros(1500), SyncStats { rules: 7, elements: 3, full: true });
        status.record(at, Duration::from_millis(100), SyncStats { rules: 2, elements: 1, full: false });
        status.failed();
        let text = metrics(&status);
        assert!(text.contains("kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.001\"} 0\n"));
        assert!(text.contains("kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.002\"} 1\n"));
        assert!(text.contains("kubeproxy_sync_proxy_rules_duration_seconds_bucket{le=\"0.128\"} 2\n"));
        assert!(text.contains("kubeproxy_sync_proxy_rules_duration_seconds_count 2\n"));
        assert!(text.contains("kubeproxy_sync_proxy_rules_last_timestamp_seconds 1000\n"));
        assert!(
            text.contains("keel_proxy_sync_rules 2\n") && text.contains("keel_proxy_sync_failures_total 1\n")
        );
        assert_eq!(healthz(&SyncStatus::default(), at).0, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(healthz(&status, at).0, StatusCode::OK);
    }

    #[test]
    fn a_change_waiting_longer_than_the_health_timeout_makes_healthz_fail() {
        let start = UNIX_EPOCH + Duration::from_secs(1_000);
        let mut status = SyncStatus::default();
        status.queued(start);
        assert!(!status.healthy(start), "no sync yet");
        status.record(start, Duration::from_millis(3), SyncStats::default());
        assert!(status.healthy(start + HEALTH_TIMEOUT * 10), "nothing pending: healthy however long");
        // A change comes and no sync follows (syncs failing): healthy until the timeout, then not.
        let change = start + Duration::from_secs(5);
        status.queued(change);
        status.queued(change + Duration::from_secs(30)); // the oldest change counts
        status.failed();
        assert!(status.healthy(change + HEALTH_TIMEOUT));
        let late = change + HEALTH_TIMEOUT + Duration::from_secs(1);
        assert!(!status.healthy(late));
        assert_eq!(healthz(&status, late).0, StatusCode::SERVICE_UNAVAILABLE);
        // A sync brings it back.
        status.record(late, Duration::from_millis(3), SyncStats::default());
        assert_eq!(healthz(&status, late).0, StatusCode::OK);
        // So does a sync with nothing to do (the change was undone before it ran).
        status.queued(late);
        status.up_to_date();
        assert!(status.healthy(late + HEALTH_TIMEOUT * 2));
    }

    #[tokio::test]
    async fn serves_healthz_and_metrics_over_http() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let status = Arc::new(Mutex::new(SyncStatus::default()));
        let server = tokio::spawn(serve(listener, Arc::clone(&status)));
        let get = |path: &'static str| async move {
            let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
            let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            stream.write_all(request.as_bytes()).await.unwrap();
            let mut response = String::new();
            stream.read_to_string(&mut response).await.unwrap();
            response
        };
        assert!(get("/healthz").await.starts_with("HTTP/1.1 503"));
        status.lock().unwrap().record(SystemTime::now(), Duration::from_millis(3), SyncStats::default());
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
        let metrics = get("/metrics").await;
        assert!(metrics.starts_with("HTTP/1.1 200") && metrics.contains("_count 1"), "{metrics}");
        assert!(get("/nothing").await.starts_with("HTTP/1.1 404"));
        server.abort();
    }
}
