//! The `Backend` trait — what programs the kernel (nftables now, eBPF maps later) — and the
//! [`Proxier`] that drives one from a [`ChangeTracker`]: a full sync first and after any failure,
//! partial syncs of the changed Service ports otherwise.

use std::collections::BTreeSet;

use crate::model::ServicePortName;
use crate::tracker::{ChangeTracker, ProxyState};

/// What a sync did, for logs and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncStats {
    /// Rules written.
    pub rules: usize,
    /// Map and set elements added or deleted.
    pub elements: usize,
    /// Whether it was a full sync.
    pub full: bool,
}

/// A data plane programmed from the proxy state. Both methods see the whole state; a partial sync
/// must leave every Service port outside `changed` as it is. A failed sync may leave anything
/// behind: the next call is then a full sync.
pub trait Backend {
    /// The backend's failure.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Programs everything from scratch, in one atomic step.
    fn full_sync(&mut self, state: &ProxyState) -> Result<SyncStats, Self::Error>;

    /// Programs the Service ports in `changed` (added, changed or gone), in one atomic step.
    fn partial_sync(
        &mut self,
        state: &ProxyState,
        changed: &BTreeSet<ServicePortName>,
    ) -> Result<SyncStats, Self::Error>;
}

/// A tracker and a backend: each [`Proxier::sync`] checks the tracker out and programs the result.
#[derive(Debug)]
pub struct Proxier<B> {
    /// Informer events go here between syncs.
    pub tracker: ChangeTracker,
    backend: B,
    /// No sync has succeeded since start or since the last failure.
    needs_full: bool,
}

impl<B: Backend> Proxier<B> {
    /// A proxier whose first sync is full.
    pub fn new(tracker: ChangeTracker, backend: B) -> Proxier<B> {
        Proxier { tracker, backend, needs_full: true }
    }

    /// The backend (for inspection).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Whether a sync has anything to do.
    pub fn has_pending(&self) -> bool {
        self.needs_full || self.tracker.has_pending()
    }

    /// One sync: full when none succeeded yet, after a failure or when the tracker asks; partial
    /// otherwise; nothing when nothing changed.
    pub fn sync(&mut self) -> Result<Option<SyncStats>, B::Error> {
        let changes = self.tracker.checkout();
        let result = if self.needs_full || changes.full {
            self.backend.full_sync(self.tracker.state())
        } else if changes.ports.is_empty() {
            return Ok(None);
        } else {
            self.backend.partial_sync(self.tracker.state(), &changes.ports)
        };
        self.needs_full = result.is_err();
        result.map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracker::TrackerConfig;
    use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};

    #[derive(Debug, Default)]
    struct Recorder {
        calls: Vec<(bool, Vec<String>)>,
        fail_next: bool,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("refused")]
    struct Refused;

    impl Backend for Recorder {
        type Error = Refused;
        fn full_sync(&mut self, state: &ProxyState) -> Result<SyncStats, Refused> {
            self.calls.push((true, state.services.keys().map(ToString::to_string).collect()));
            if std::mem::take(&mut self.fail_next) { Err(Refused) } else { Ok(SyncStats::default()) }
        }
        fn partial_sync(
            &mut self,
            _: &ProxyState,
            changed: &BTreeSet<ServicePortName>,
        ) -> Result<SyncStats, Refused> {
            self.calls.push((false, changed.iter().map(ToString::to_string).collect()));
            if std::mem::take(&mut self.fail_next) { Err(Refused) } else { Ok(SyncStats::default()) }
        }
    }

    fn service(name: &str, ip: &str) -> Service {
        Service {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                namespace: Some("default".into()),
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.into()),
                ports: Some(vec![ServicePort { port: 80, ..Default::default() }]),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn the_first_sync_is_full_then_partial_and_a_failure_brings_back_a_full_sync() {
        let mut proxier = Proxier::new(ChangeTracker::new(TrackerConfig::default()), Recorder::default());
        proxier.tracker.update_service(&service("a", "10.96.0.1"));
        assert!(proxier.sync().unwrap().is_some());
        assert_eq!(proxier.sync().unwrap(), None, "nothing changed");
        proxier.tracker.update_service(&service("b", "10.96.0.2"));
        proxier.backend.fail_next = true;
        assert!(proxier.sync().is_err());
        assert!(proxier.has_pending());
        proxier.sync().unwrap();
        proxier.tracker.update_service(&service("b", "10.96.0.3"));
        proxier.sync().unwrap();
        let calls: Vec<(bool, Vec<&str>)> = proxier
            .backend
            .calls
            .iter()
            .map(|(full, names)| (*full, names.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            calls,
            vec![
                (true, vec!["default/a/tcp/"]),
                (false, vec!["default/b/tcp/"]),
                (true, vec!["default/a/tcp/", "default/b/tcp/"]),
                (false, vec!["default/b/tcp/"]),
            ]
        );
    }
}
