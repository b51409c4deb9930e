//! UpdateContainerResources and ReopenContainerLog.

use tokio::io::{AsyncBufReadExt, BufReader};

use super::{Containers, Error, State, blocking};
use crate::monitor;

impl Containers {
    /// Asks the container's monitor to reopen its log file (after the kubelet renamed it).
    pub async fn reopen_log(&self, id: &str) -> Result<(), Error> {
        let (_, record) = self.running(id)?;
        let dir = monitor::open_dir(&self.inner.dir.join(&record.id)).map_err(Error::io("reopening"))?;
        let mut stream = tokio::net::UnixStream::connect(monitor::socket_path(&dir, monitor::CONTROL_SOCKET))
            .await
            .map_err(Error::io("reaching the container's monitor"))?;
        use tokio::io::AsyncWriteExt;
        stream.write_all(b"reopen\n").await.map_err(Error::io("asking the monitor"))?;
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer).await.map_err(Error::io("asking the monitor"))?;
        match answer.trim() {
            "ok" => Ok(()),
            other => Err(Error::ReopenRefused { id: record.id, answer: other.to_owned() }),
        }
    }

    /// Updates the resources of a created or running container (the runtime's `update`, and the
    /// bundle's config.json).
    pub async fn update_resources(
        &self,
        id: &str,
        resources: oci_spec::runtime::LinuxResources,
    ) -> Result<(), Error> {
        let entry = self.entry(id)?;
        let record = entry.record();
        if record.state == State::Exited {
            return Err(Error::Exited(record.id));
        }
        let runtime = self.runtime_of(&record)?;
        let (cid, res) = (record.id.clone(), resources.clone());
        blocking(move || runtime.update(&cid, &res)).await?;
        let config = self.inner.dir.join(&record.id).join("bundle/config.json");
        if let Ok(mut spec) = oci_spec::runtime::Spec::load(&config) {
            if let Some(linux) = spec.linux_mut() {
                linux.set_resources(Some(resources));
            }
            let _ = spec.save(&config);
        }
        Ok(())
    }
}
