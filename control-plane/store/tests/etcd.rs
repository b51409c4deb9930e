//! The conformance suite on etcd: a one-member cluster per test, started on loopback by the testbed.

mod conformance;

use std::sync::Arc;

use anyhow::Result;
use keel_store::Store;
use keel_store::etcd::{EtcdOptions, EtcdStore};
use keel_testbed::etcd::EtcdCluster;

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

async fn open() -> Result<Etcd> {
    let cluster = EtcdCluster::start(1)?;
    // A prefix, as Keel runs it: the suite's keys must not depend on sitting at etcd's root.
    let options = EtcdOptions::new(cluster.client_urls()).prefix("/keel-conformance");
    let store = EtcdStore::connect(options).await?;
    Ok(Etcd { store: Arc::new(store), _cluster: cluster })
}

conformance_tests!(open());
