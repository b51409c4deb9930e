//! PodSandboxStatus and ListPodSandbox: read-only views of the records.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_cri::v1 as api;
use serde_json::json;

use super::{Entry, Error, Sandboxes, namespace_options, pause, poisoned, to_sandbox};

impl Sandboxes {
    /// PodSandboxStatus; `verbose` adds the `info` map (key `info`: a JSON document).
    pub fn status(
        &self,
        id_or_prefix: &str,
        verbose: bool,
    ) -> Result<(api::PodSandboxStatus, HashMap<String, String>), Error> {
        let (_, entry) = self.found(id_or_prefix)?;
        let record = entry.record.lock().map_err(poisoned)?.clone();
        let sandbox = to_sandbox(&record);
        let options = namespace_options(&record.config);
        let network = sandbox.ips.split_first().map(|(ip, rest)| api::PodSandboxNetworkStatus {
            ip: ip.to_string(),
            additional_ips: rest.iter().map(|ip| api::PodIp { ip: ip.to_string() }).collect(),
        });
        let status = api::PodSandboxStatus {
            id: record.id.clone(),
            metadata: record.config.metadata.clone(),
            state: sandbox.state.into(),
            created_at: record.created_at,
            network: Some(network.unwrap_or_default()),
            linux: Some(api::LinuxPodSandboxStatus {
                namespaces: Some(api::Namespace { options: Some(options) }),
            }),
            labels: record.config.labels.clone(),
            annotations: record.config.annotations.clone(),
            runtime_handler: record.runtime_handler.clone(),
        };
        let mut info = HashMap::new();
        if verbose {
            let pause_running = record.pause.as_ref().is_some_and(pause::alive);
            let document = json!({
                "pid": record.pause.map(|p| p.pid).unwrap_or_default(),
                "processStatus": if record.pause.is_some() {
                    if pause_running { "running" } else { "stopped" }
                } else {
                    "none"
                },
                "netNamespaceClosed": record.namespaces.net.is_none(),
                "runtimeHandler": record.runtime_handler,
                "namespaces": record.namespaces,
                "files": record.files,
                "config": record.config,
                "cniNetwork": record.network.as_ref().map(|n| n.list.clone()),
                "cniResult": record.network.as_ref().and_then(|n| n.result.clone()),
            });
            info.insert("info".to_owned(), document.to_string());
        }
        Ok((status, info))
    }

    /// ListPodSandbox with the filter's id (full or a unique prefix), state and label selector.
    pub fn list(&self, filter: Option<&api::PodSandboxFilter>) -> Result<Vec<api::PodSandbox>, Error> {
        let wanted_id = match filter.map(|f| f.id.as_str()).filter(|id| !id.is_empty()) {
            Some(id) => match self.entry(id) {
                Ok(Some((full, _))) => Some(full),
                // Nothing matches an unknown or ambiguous prefix.
                Ok(None) | Err(_) => return Ok(Vec::new()),
            },
            None => None,
        };
        let entries: Vec<Arc<Entry>> =
            self.inner.entries.lock().map_err(poisoned)?.values().cloned().collect();
        let mut items = Vec::new();
        for entry in entries {
            let record = entry.record.lock().map_err(poisoned)?.clone();
            if wanted_id.as_ref().is_some_and(|id| *id != record.id) {
                continue;
            }
            let sandbox = to_sandbox(&record);
            if let Some(state) = filter.and_then(|f| f.state.as_ref())
                && state.state != i32::from(sandbox.state)
            {
                continue;
            }
            if let Some(filter) = filter
                && !filter.label_selector.iter().all(|(k, v)| record.config.labels.get(k) == Some(v))
            {
                continue;
            }
            items.push(api::PodSandbox {
                id: record.id.clone(),
                metadata: record.config.metadata.clone(),
                state: sandbox.state.into(),
                created_at: record.created_at,
                labels: record.config.labels.clone(),
                annotations: record.config.annotations.clone(),
                runtime_handler: record.runtime_handler.clone(),
            });
        }
        Ok(items)
    }
}
