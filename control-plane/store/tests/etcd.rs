//! The conformance suite on etcd: a one-member cluster per test, started on loopback by the testbed, on
//! Debian's etcd 3.4.23 and on the current release line (3.6, `cargo xtask peers`).

use crate::conformance;

use std::sync::Arc;

use anyhow::Result;
use keel_store::Store;
use keel_store::etcd::{EtcdOptions, EtcdStore};
use keel_testbed::etcd::{EtcdCluster, EtcdConfig, EtcdRelease};

struct Etcd {
    store: Arc<EtcdStore>,
    _cluster: EtcdCluster,
}

impl conformance::Fixture for Etcd {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    fn disrupt(&self) -> Result<()> {
        Ok(())
    }
}

async fn open(release: EtcdRelease) -> Result<Etcd> {
    let cluster = EtcdCluster::start_with(EtcdConfig::new(1).release(release))?;
    // A prefix, as Keel runs it: the suite's keys must not depend on sitting at etcd's root.
    let options = EtcdOptions::new(cluster.client_urls()).prefix("/keel-conformance");
    let store = EtcdStore::connect(options).await?;
    Ok(Etcd { store: Arc::new(store), _cluster: cluster })
}

conformance_tests!(open(EtcdRelease::Debian));

mod etcd_3_6 {
    use super::{EtcdRelease, conformance, open};

    conformance_tests!(open(EtcdRelease::Current));
}
