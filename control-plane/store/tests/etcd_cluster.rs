//! The conformance suite on a 3-member etcd cluster; the load tests kill one member half-way
//! (`disrupt`), and every guarantee must hold through the other two.

use crate::conformance;

use std::sync::{Arc, Mutex};

use anyhow::{Result, anyhow};
use keel_store::Store;
use keel_store::etcd::{EtcdOptions, EtcdStore};
use keel_testbed::etcd::EtcdCluster;

struct EtcdThree {
    store: Arc<EtcdStore>,
    cluster: Mutex<EtcdCluster>,
}

impl conformance::Fixture for EtcdThree {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// Kills member 1 (SIGKILL): the cluster keeps its quorum with members 0 and 2.
    fn disrupt(&self) -> Result<()> {
        let mut cluster = self.cluster.lock().map_err(|_| anyhow!("cluster lock poisoned"))?;
        cluster.member(1)?.kill();
        Ok(())
    }
}

async fn open() -> Result<EtcdThree> {
    let cluster = EtcdCluster::start(3)?;
    let options = EtcdOptions::new(cluster.client_urls()).prefix("/keel-conformance");
    let store = EtcdStore::connect(options).await?;
    Ok(EtcdThree { store: Arc::new(store), cluster: Mutex::new(cluster) })
}

conformance_tests!(open());
