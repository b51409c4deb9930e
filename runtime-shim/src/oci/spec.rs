//! What a container's OCI spec takes from its pod sandbox: the namespaces it joins and the files it
//! mounts (the hostname, /etc/hosts and /etc/resolv.conf the sandbox keeps).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The pod's namespaces a container joins. `None` for net/ipc/uts: the host's (the pod asked for
/// `NODE`); `None` for pid: a private one, unless the pod asked for `POD` (then the pause process's
/// PID namespace, `/proc/<pid>/ns/pid`) or `NODE`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodNamespaces {
    /// The pod's network namespace (a bind-mounted namespace file).
    pub net: Option<PathBuf>,
    /// The pod's IPC namespace.
    pub ipc: Option<PathBuf>,
    /// The pod's UTS namespace.
    pub uts: Option<PathBuf>,
    /// The pod's shared PID namespace.
    pub pid: Option<PathBuf>,
}

/// The files a sandbox keeps for its containers' /etc/hostname, /etc/hosts and /etc/resolv.conf.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodFiles {
    /// /etc/hostname.
    pub hostname: Option<PathBuf>,
    /// /etc/hosts.
    pub hosts: Option<PathBuf>,
    /// /etc/resolv.conf.
    pub resolv_conf: Option<PathBuf>,
}
