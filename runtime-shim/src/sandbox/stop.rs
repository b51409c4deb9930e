//! StopPodSandbox and RemovePodSandbox: the containers' hooks, then the teardown (pause process, CNI
//! DEL, namespaces, /dev/shm), each step skipped once done so a failed call can be repeated.

use std::path::Path;

use super::record::State;
use super::run::unmount_shm;
use super::{Entry, Error, Sandboxes, namespaces, pause, poisoned, sandbox_name};
use crate::cni::{self, NetworkList};
use crate::oci::spec::PodNamespaces;

impl Sandboxes {
    /// Stops the pause process, runs CNI DEL, unmounts the namespaces and marks the sandbox NotReady;
    /// each step is skipped when already done, so it can be repeated after a failure.
    pub(super) async fn tear_down(&self, entry: &Entry, dir: &Path) -> Result<(), Error> {
        let record = entry.record.lock().map_err(poisoned)?.clone();
        if let Some(pause) = record.pause {
            tokio::task::spawn_blocking(move || pause::stop(&pause))
                .await
                .map_err(Error::task("stopping the pause process"))?
                .map_err(Error::io("stopping the pause process"))?;
            Self::update(entry, dir, |r| {
                r.pause = None;
                r.namespaces.pid = None;
            })?;
        }
        if let Some(network) = record.network.as_ref().filter(|n| n.attached) {
            let list = NetworkList::from_value(&network.list).map_err(Error::RecordedNetwork)?;
            // A namespace that is gone (after a reboot, the file is no longer a mount) is passed as an
            // empty CNI_NETNS: plugins then release what they hold outside it (the IPAM address).
            let netns =
                record.namespaces.net.clone().filter(|p| namespaces::is_mounted(p)).unwrap_or_default();
            let attachment = self.attachment(&record, &netns);
            cni::del(
                &list,
                &self.inner.cni_bin_dir,
                &attachment,
                network.result.as_ref(),
                cni::PLUGIN_TIMEOUT,
            )
            .await
            .map_err(Error::network("tear down", &record.id))?;
            Self::update(entry, dir, |r| {
                if let Some(network) = &mut r.network {
                    network.attached = false;
                }
                r.ips.clear();
            })?;
        }
        namespaces::remove(&dir.join("ns"));
        // Also when the record does not name it (a crash right after the mount).
        unmount_shm(&dir.join("shm")).map_err(Error::io("unmounting the pod's /dev/shm"))?;
        Self::update(entry, dir, |r| {
            r.shm = None;
            r.namespaces = PodNamespaces::default();
            r.state = State::NotReady;
        })?;
        Ok(())
    }

    /// StopPodSandbox: stops the pod's containers, then tears the pod down. Idempotent, and an unknown
    /// id succeeds: the CRI says the call "must not return an error if all relevant resources have
    /// already been reclaimed", and critest v1.34 checks it (containerd answers so since 1.6.35/1.7.21).
    pub async fn stop(&self, id_or_prefix: &str) -> Result<(), Error> {
        let (this, id_or_prefix) = (self.clone(), id_or_prefix.to_owned());
        tokio::spawn(async move { this.stop_to_end(&id_or_prefix).await })
            .await
            .map_err(Error::task("StopPodSandbox"))?
    }

    async fn stop_to_end(&self, id_or_prefix: &str) -> Result<(), Error> {
        let Some((id, entry)) = self.entry(id_or_prefix)? else {
            return Ok(());
        };
        let _op = entry.op.lock().await;
        self.call_hook(&self.inner.stop_containers, &id).await?;
        self.tear_down(&entry, &self.dir(&id)).await
    }

    /// RemovePodSandbox: stops the pod (as containerd does for a Ready one), removes its containers
    /// and everything of the sandbox. An unknown id succeeds (the CRI asks for idempotence).
    pub async fn remove(&self, id_or_prefix: &str) -> Result<(), Error> {
        let (this, id_or_prefix) = (self.clone(), id_or_prefix.to_owned());
        tokio::spawn(async move { this.remove_to_end(&id_or_prefix).await })
            .await
            .map_err(Error::task("RemovePodSandbox"))?
    }

    async fn remove_to_end(&self, id_or_prefix: &str) -> Result<(), Error> {
        let Some((id, entry)) = self.entry(id_or_prefix)? else {
            return Ok(());
        };
        let _op = entry.op.lock().await;
        if !self.inner.entries.lock().map_err(poisoned)?.contains_key(&id) {
            // Removed while we waited for the operation lock.
            return Ok(());
        }
        let dir = self.dir(&id);
        self.call_hook(&self.inner.stop_containers, &id).await?;
        self.tear_down(&entry, &dir).await?;
        self.call_hook(&self.inner.remove_containers, &id).await?;
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::Io { context: "removing the sandbox directory", source: e }),
        }
        let name = entry.record.lock().map_err(poisoned)?.config.metadata.as_ref().map(sandbox_name);
        self.forget(&id, &name.unwrap_or_default());
        Ok(())
    }
}
