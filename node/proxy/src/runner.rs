//! The bounded sync runner, as kube-proxy's BoundedFrequencyRunner: informer events ask for a sync
//! ([`SyncTrigger::request`]); syncs run one at a time, at most `burst` back to back and then at most
//! one per `min_interval` (a token bucket); a failed sync is retried after `retry`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// A token bucket: `burst` tokens, one more every `min_interval`.
#[derive(Debug, Clone)]
pub struct RateLimit {
    min_interval: Duration,
    burst: u32,
    /// Tokens available at `stamp` (fractional refill kept in `stamp`).
    tokens: u32,
    stamp: Instant,
}

impl RateLimit {
    /// A full bucket at `now`. A burst of 0 counts as 1.
    pub fn new(min_interval: Duration, burst: u32, now: Instant) -> RateLimit {
        let burst = burst.max(1);
        RateLimit { min_interval, burst, tokens: burst, stamp: now }
    }

    fn refill(&mut self, now: Instant) {
        if self.tokens >= self.burst {
            self.stamp = now;
            return;
        }
        if self.min_interval.is_zero() {
            self.tokens = self.burst;
            self.stamp = now;
            return;
        }
        let elapsed = now.saturating_duration_since(self.stamp);
        let earned = elapsed.as_nanos() / self.min_interval.as_nanos();
        if earned > 0 {
            let earned = u32::try_from(earned).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(earned).min(self.burst);
            self.stamp =
                if self.tokens >= self.burst { now } else { self.stamp + self.min_interval * earned };
        }
    }

    /// How long until a sync may run (zero: now).
    pub fn wait(&mut self, now: Instant) -> Duration {
        self.refill(now);
        if self.tokens > 0 {
            Duration::ZERO
        } else {
            (self.stamp + self.min_interval).saturating_duration_since(now)
        }
    }

    /// Takes a token for a sync starting at `now`; false when none is left.
    pub fn take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens == 0 {
            return false;
        }
        if self.tokens == self.burst {
            self.stamp = now;
        }
        self.tokens -= 1;
        true
    }
}

/// The handle informer handlers use to ask for a sync; requests made while one waits or runs
/// coalesce into the next one.
#[derive(Debug, Clone, Default)]
pub struct SyncTrigger {
    /// Set by a request, cleared when a sync starts: requests before that start are served by it.
    requested: Arc<AtomicBool>,
    /// Wakes the runner.
    notify: Arc<Notify>,
}

impl SyncTrigger {
    /// A trigger nobody waits on yet.
    pub fn new() -> SyncTrigger {
        SyncTrigger::default()
    }

    /// Asks for a sync.
    pub fn request(&self) {
        self.requested.store(true, Ordering::Release);
        self.notify.notify_one();
    }
}

/// The runner's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunnerConfig {
    /// At least this long between syncs once the burst is spent (`--min-sync-period`'s role).
    pub min_interval: Duration,
    /// Syncs allowed back to back.
    pub burst: u32,
    /// After a failed sync, the next one runs this much later even without a request.
    pub retry: Duration,
}

/// Runs `sync` whenever `trigger` asks, within `config`'s bounds, until `sync` says to stop.
/// `sync` returns `Ok(true)` to go on, `Ok(false)` to stop, and `Err` for a failure to retry.
pub async fn run<E>(trigger: &SyncTrigger, config: RunnerConfig, mut sync: impl FnMut() -> Result<bool, E>) {
    let mut limit = RateLimit::new(config.min_interval, config.burst, Instant::now());
    let mut retry_at: Option<Instant> = None;
    loop {
        match retry_at {
            Some(at) => {
                tokio::select! {
                    () = trigger.notify.notified() => {}
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            None => {
                trigger.notify.notified().await;
                // A wake-up left by a request that an earlier sync already served.
                if !trigger.requested.load(Ordering::Acquire) {
                    continue;
                }
            }
        }
        let wait = limit.wait(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        limit.take(Instant::now());
        trigger.requested.store(false, Ordering::Release);
        match sync() {
            Ok(true) => retry_at = None,
            Ok(false) => return,
            Err(_) => retry_at = Some(Instant::now() + config.retry),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn a_burst_then_one_per_interval() {
        let start = Instant::now();
        let second = Duration::from_secs(1);
        let mut limit = RateLimit::new(second, 2, start);
        assert!(limit.take(start));
        assert!(limit.take(start));
        assert!(!limit.take(start));
        assert_eq!(limit.wait(start), second);
        assert_eq!(limit.wait(start + second / 2), second / 2);
        assert!(limit.take(start + second));
        assert!(!limit.take(start + second));
        // A long quiet time refills the burst, never more.
        assert!(limit.take(start + second * 10));
        assert!(limit.take(start + second * 10));
        assert!(!limit.take(start + second * 10));
    }

    #[tokio::test(start_paused = true)]
    async fn requests_coalesce_and_syncs_respect_the_interval() {
        let trigger = SyncTrigger::new();
        let config =
            RunnerConfig { min_interval: Duration::from_secs(1), burst: 1, retry: Duration::from_secs(5) };
        let times = RefCell::new(Vec::new());
        let start = Instant::now();
        let requester = {
            let trigger = trigger.clone();
            async move {
                for _ in 0..5 {
                    trigger.request();
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                trigger.request();
                trigger.request();
                tokio::time::sleep(Duration::from_secs(3)).await;
                trigger.request();
            }
        };
        let runner = run(&trigger, config, || {
            let mut times = times.borrow_mut();
            times.push(start.elapsed());
            Ok::<_, ()>(times.len() < 3)
        });
        tokio::join!(requester, runner);
        let times = times.into_inner();
        // Five requests → one sync at once; two more → one sync a full interval after the first.
        assert_eq!(times[0], Duration::ZERO);
        assert_eq!(times[1], Duration::from_secs(1));
        assert_eq!(times[2], Duration::from_millis(3100));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_sync_is_retried_without_a_request() {
        let trigger = SyncTrigger::new();
        let config = RunnerConfig { min_interval: Duration::ZERO, burst: 1, retry: Duration::from_secs(5) };
        let start = Instant::now();
        let mut times = Vec::new();
        trigger.request();
        run(&trigger, config, || {
            times.push(start.elapsed());
            if times.len() == 1 { Err(()) } else { Ok(false) }
        })
        .await;
        assert_eq!(times, vec![Duration::ZERO, Duration::from_secs(5)]);
    }
}
