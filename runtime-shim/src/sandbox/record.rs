//! The sandbox record, `DIR/sandboxes/<id>/sandbox.json`: everything keel-shim needs to answer for a
//! sandbox and to tear it down after a restart. Written atomically (a temporary file renamed into
//! place), so a keel-shim crash never leaves half a record. Not fsynced: what a record describes
//! (namespaces held by mounts, a pause process) does not survive a power loss either, and an fsync
//! costs ≈7 ms here — several per RunPodSandbox.

use std::io::{self, Write};
use std::path::Path;

use k8s_cri::v1 as api;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::oci::spec::{PodFiles, PodNamespaces};

/// The record's file name in the sandbox directory.
pub const RECORD_FILE: &str = "sandbox.json";

/// A sandbox's state as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum State {
    /// Set up and running.
    Ready,
    /// Stopped (or being set up, until the first Ready write).
    NotReady,
}

/// The pause process of a pod with a shared PID namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pause {
    /// Its pid in keel-shim's PID namespace.
    pub pid: i32,
    /// Its start time (field 22 of `/proc/<pid>/stat`), so a reused pid is not taken for it.
    pub start_time: u64,
}

/// The pod's attachment to the CNI network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Network {
    /// The network list ADD ran (DEL runs the same one, even if the conf dir changed since).
    pub list: Value,
    /// The ADD's result (DEL's prevResult); `None` until ADD succeeded.
    pub result: Option<Value>,
    /// Whether DEL still has to run.
    pub attached: bool,
}

/// One sandbox on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// 64 hex characters.
    pub id: String,
    /// The config RunPodSandbox was given.
    pub config: api::PodSandboxConfig,
    /// The runtime handler (never empty: the default handler when none was asked).
    pub runtime_handler: String,
    /// Nanoseconds since the epoch.
    pub created_at: i64,
    /// Ready or NotReady.
    pub state: State,
    /// The namespaces the pod's containers join.
    pub namespaces: PodNamespaces,
    /// The files the pod's containers mount.
    pub files: PodFiles,
    /// The pause process, for a pod with a shared PID namespace.
    pub pause: Option<Pause>,
    /// The pod's IPs (the first is the pod IP).
    pub ips: Vec<std::net::IpAddr>,
    /// The CNI attachment (`None` for a host-network pod).
    pub network: Option<Network>,
    /// The pod's shared /dev/shm (a tmpfs mounted at `shm/`), for a pod with its own IPC namespace.
    #[serde(default)]
    pub shm: Option<std::path::PathBuf>,
}

/// Writes `content` to `path` atomically against crashes of keel-shim (a temporary file renamed into
/// place; mode 0644; not fsynced, see the module doc).
pub fn write_atomic(path: &Path, content: &[u8]) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| io::Error::other("a path without a parent directory"))?;
    let name = path.file_name().ok_or_else(|| io::Error::other("a path without a file name"))?;
    let tmp = dir.join(format!(".{}.tmp", name.to_string_lossy()));
    let result = (|| {
        let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
        file.write_all(content)?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

impl Record {
    /// Writes the record into `dir` (the sandbox's directory).
    pub fn save(&self, dir: &Path) -> io::Result<()> {
        let json = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        write_atomic(&dir.join(RECORD_FILE), &json)
    }

    /// Reads the record of the sandbox directory `dir`.
    pub fn load(dir: &Path) -> io::Result<Record> {
        let bytes = std::fs::read(dir.join(RECORD_FILE))?;
        serde_json::from_slice(&bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let record = Record {
            id: "a".repeat(64),
            config: api::PodSandboxConfig { hostname: "h".to_owned(), ..Default::default() },
            runtime_handler: "runc".to_owned(),
            created_at: 5,
            state: State::Ready,
            namespaces: PodNamespaces { net: Some(dir.path().join("ns/net")), ..Default::default() },
            files: PodFiles::default(),
            pause: Some(Pause { pid: 7, start_time: 9 }),
            ips: vec!["10.0.0.1".parse().unwrap()],
            network: None,
            shm: None,
        };
        record.save(dir.path()).unwrap();
        assert_eq!(Record::load(dir.path()).unwrap(), record);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "the temporary file is gone");
    }
}
