//! StopContainer: the stop signal, then SIGKILL after the timeout.

use std::sync::Arc;
use std::time::Duration;

use super::{Containers, Error, State, blocking, parse_signal};

impl Containers {
    /// Stops a running container: its stop signal (SIGTERM unless the image names another), then
    /// SIGKILL after `timeout` (at once for 0), and waits for it to exit. A container that is not
    /// running is left as it is, and an unknown one succeeds (the CRI's idempotence, as critest v1.34
    /// checks it).
    pub async fn stop(&self, id: &str, timeout: Duration) -> Result<(), Error> {
        let entry = match self.entry(id) {
            Ok(entry) => entry,
            Err(Error::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let record = entry.record();
        if record.state != State::Running {
            return Ok(());
        }
        let runtime = self.runtime_of(&record)?;
        let mut exited = entry.exited.subscribe();
        if !timeout.is_zero() {
            let signal = record.stop_signal.as_deref().and_then(parse_signal).unwrap_or(nix::libc::SIGTERM);
            let (rt, cid) = (Arc::clone(&runtime), record.id.clone());
            let _ = blocking(move || rt.kill(&cid, signal, false)).await;
            if tokio::time::timeout(timeout, exited.wait_for(|done| *done)).await.is_ok() {
                return Ok(());
            }
        }
        let (cid, all) = (record.id.clone(), record.shared_pid);
        let _ = blocking(move || runtime.kill(&cid, libc::SIGKILL, all)).await;
        let _ = exited.wait_for(|done| *done).await;
        Ok(())
    }
}
