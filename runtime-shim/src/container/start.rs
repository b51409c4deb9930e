//! StartContainer: `<runtime> start` of a CREATED container.

use std::sync::{Arc, PoisonError};

use k8s_cri::v1 as api;

use super::{Containers, Error, State, blocking, save};
use crate::monitor;

impl Containers {
    /// Starts a CREATED container.
    pub async fn start(&self, id: &str) -> Result<(), Error> {
        let entry = self.entry(id)?;
        let _op = entry.op.lock().await;
        let record = entry.record();
        if record.state != State::Created {
            return Err(Error::NotCreated { id: record.id, state: record.state });
        }
        let runtime = self.runtime_of(&record)?;
        let cid = record.id.clone();
        let rt = Arc::clone(&runtime);
        if let Err(e) = blocking(move || rt.start(&cid)).await {
            // As containerd: a container that failed to start is exited (StartError, 128), and its
            // init (still waiting in the runtime) goes.
            let record = {
                let mut current = entry.record.lock().unwrap_or_else(PoisonError::into_inner);
                current.state = State::Exited;
                current.finished_at = monitor::now().1;
                current.exit_code = 128;
                current.reason = "StartError".to_owned();
                current.message = e.to_string();
                let _ = save(&self.inner.dir.join(&current.id), &current);
                current.clone()
            };
            let cid = record.id.clone();
            let _ = blocking(move || runtime.delete(&cid, true)).await;
            self.emit(api::ContainerEventType::ContainerStoppedEvent, &record);
            return Err(e);
        }
        let record = {
            let mut current = entry.record.lock().unwrap_or_else(PoisonError::into_inner);
            current.started_at = monitor::now().1;
            if current.state == State::Created {
                current.state = State::Running;
            }
            let _ = save(&self.inner.dir.join(&current.id), &current);
            current.clone()
        };
        self.emit(api::ContainerEventType::ContainerStartedEvent, &record);
        Ok(())
    }
}
