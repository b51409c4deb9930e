//! ContainerStatus and ListContainers: views of the records.

use std::path::PathBuf;
use std::sync::{Arc, PoisonError};

use k8s_cri::v1 as api;

use super::{Containers, Entry, Error, cri_state, image_spec, status_of};

impl Containers {
    /// The container's CRI status.
    pub fn status(&self, id: &str) -> Result<api::ContainerStatus, Error> {
        Ok(status_of(&self.entry(id)?.record()))
    }

    /// The rootfs mount point of a container (for the caller to unmount after [`Containers::remove`]).
    pub fn rootfs(&self, id: &str) -> Result<PathBuf, Error> {
        Ok(self.entry(id)?.record().rootfs)
    }

    /// The containers matching `filter` (id prefix, state, sandbox id prefix, every label).
    pub fn list(&self, filter: Option<&api::ContainerFilter>) -> Vec<api::Container> {
        let entries: Vec<Arc<Entry>> =
            self.inner.entries.lock().unwrap_or_else(PoisonError::into_inner).values().cloned().collect();
        let mut out: Vec<api::Container> = entries
            .iter()
            .map(|entry| entry.record())
            .filter(|record| {
                let Some(filter) = filter else { return true };
                (filter.id.is_empty() || record.id.starts_with(&filter.id))
                    && filter.state.as_ref().is_none_or(|s| s.state == cri_state(record.state) as i32)
                    && (filter.pod_sandbox_id.is_empty()
                        || record.sandbox_id.starts_with(&filter.pod_sandbox_id))
                    && filter.label_selector.iter().all(|(k, v)| record.labels.get(k) == Some(v))
            })
            .map(|record| api::Container {
                id: record.id.clone(),
                pod_sandbox_id: record.sandbox_id.clone(),
                metadata: Some(api::ContainerMetadata { name: record.name.clone(), attempt: record.attempt }),
                image: Some(image_spec(&record)),
                image_ref: record.image_ref.clone(),
                state: cri_state(record.state) as i32,
                created_at: record.created_at,
                labels: record.labels.clone(),
                annotations: record.annotations.clone(),
                image_id: record.image_id.clone(),
            })
            .collect();
        out.sort_by_key(|c| c.created_at);
        out
    }
}
