//! The idle timeout of a streaming connection, as spdystream's idle-aware framer and wsstream's
//! deadlines apply the kubelet's `StreamIdleTimeout` (4 hours by default): a connection with no
//! frame read or written for that long is closed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One connection's activity clock.
#[derive(Debug)]
pub struct Idle {
    /// When a frame last went either way; touched by the reader and the writer task.
    last: Mutex<Instant>,
    /// Cancelled when the connection has been idle for the timeout: reader and writer stop.
    pub expired: CancellationToken,
    /// Cancelled when the connection ended otherwise: the watchdog stops.
    done: CancellationToken,
}

impl Idle {
    /// Starts the watchdog of a connection that may stay idle for `timeout`.
    pub fn start(timeout: Duration) -> Arc<Idle> {
        let idle = Arc::new(Idle {
            last: Mutex::new(Instant::now()),
            expired: CancellationToken::new(),
            done: CancellationToken::new(),
        });
        let watched = idle.clone();
        tokio::spawn(async move {
            loop {
                let deadline = watched.last() + timeout;
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {
                        if watched.last().elapsed() >= timeout {
                            watched.expired.cancel();
                            return;
                        }
                    }
                    () = watched.done.cancelled() => return,
                }
            }
        });
        idle
    }

    fn last(&self) -> Instant {
        self.last.lock().map_or_else(|_| Instant::now(), |last| *last)
    }

    /// A frame went one way or the other.
    pub fn touch(&self) {
        if let Ok(mut last) = self.last.lock() {
            *last = Instant::now();
        }
    }

    /// The connection is over: stops the watchdog.
    pub fn finish(&self) {
        self.done.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn expires_only_after_the_timeout_without_activity() {
        let idle = Idle::start(Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(6)).await;
        idle.touch();
        tokio::time::sleep(Duration::from_secs(6)).await;
        assert!(!idle.expired.is_cancelled());
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(idle.expired.is_cancelled());

        let finished = Idle::start(Duration::from_secs(10));
        finished.finish();
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert!(!finished.expired.is_cancelled());
    }
}
