//! The conformance suite on the embedded store, and what only the embedded store does: reopening,
//! refusing bad data directories, catching up slow watches, scheduled compaction.

mod conformance;

use std::sync::Arc;

use anyhow::Result;
use keel_store::Store;
use keel_store::embedded::{EmbeddedStore, Options};

struct Embedded {
    store: Arc<EmbeddedStore>,
    _dir: tempfile::TempDir,
}

impl conformance::Fixture for Embedded {
    fn store(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    fn disrupt(&self) -> Result<()> {
        Ok(())
    }
}

async fn open() -> Result<Embedded> {
    let dir = tempfile::tempdir()?;
    let store = EmbeddedStore::open(Options::new(dir.path().join("data")))?;
    Ok(Embedded { store: Arc::new(store), _dir: dir })
}

conformance_tests!(open());
