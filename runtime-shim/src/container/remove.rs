//! RemoveContainer: stopped at once, deleted from the runtime, the rootfs unmounted, the directory
//! removed.

use std::io;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use k8s_cri::v1 as api;

use super::{Containers, Error, State, blocking, is_mount_point};

impl Containers {
    /// Removes a container: stops it at once if running, deletes it from the runtime, calls the rootfs
    /// hook, removes its directory. Removing an unknown container succeeds (as containerd).
    pub async fn remove(&self, id: &str) -> Result<(), Error> {
        let entry = match self.entry(id) {
            Ok(entry) => entry,
            Err(Error::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let _op = entry.op.lock().await;
        let record = entry.record();
        let runtime = self.runtime_of(&record)?;
        if record.state == State::Running {
            self.stop(&record.id, Duration::ZERO).await?;
        }
        let cid = record.id.clone();
        let rt = Arc::clone(&runtime);
        blocking(move || rt.delete(&cid, true)).await?;
        // A created container's init dies with the delete; its monitor then writes its exit.
        let _ = entry.exited.subscribe().wait_for(|done| *done).await;
        let dir = self.inner.dir.join(&record.id);
        let hook = self.inner.unmount.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(hook) = hook {
            hook(&record.rootfs).map_err(Error::io("unmounting the rootfs"))?;
        }
        if record.rootfs.starts_with(&dir) && is_mount_point(&record.rootfs) {
            return Err(Error::RootfsStillMounted { id: record.id, rootfs: record.rootfs });
        }
        let record = entry.record();
        std::fs::remove_dir_all(&dir)
            .or_else(|e| if e.kind() == io::ErrorKind::NotFound { Ok(()) } else { Err(e) })
            .map_err(Error::io("removing the container directory"))?;
        self.inner.entries.lock().unwrap_or_else(PoisonError::into_inner).remove(&record.id);
        self.emit(api::ContainerEventType::ContainerDeletedEvent, &record);
        Ok(())
    }
}
