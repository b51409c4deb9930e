//! The nftables backend: [`render`] computes one [`Transaction`] per sync for both families, an
//! [`Apply`] edge commits it atomically. The render's mirror is dropped when an apply fails, so the
//! next sync (full, as the [`crate::backend::Proxier`] asks) starts from nothing.

pub mod command;
pub mod netlink;
pub mod render;
pub mod transaction;

use std::collections::BTreeSet;

pub use self::render::{RenderConfig, Renderer};
pub use self::transaction::{Family, Transaction};
use crate::backend::{Backend, SyncStats};
use crate::model::ServicePortName;
use crate::tracker::ProxyState;

/// The kernel edge: commits a transaction, all of it or nothing.
pub trait Apply {
    /// Why a transaction was not committed.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Commits `transaction` as one atomic nftables transaction.
    fn apply(&mut self, transaction: &Transaction) -> Result<(), Self::Error>;
}

/// The nftables [`Backend`] over an [`Apply`] edge.
#[derive(Debug)]
pub struct NftBackend<A> {
    ipv4: Renderer,
    ipv6: Renderer,
    edge: A,
    /// The last transaction committed (kept for inspection and tests).
    last: Transaction,
}

impl<A: Apply> NftBackend<A> {
    /// A backend rendering both families with `config`.
    pub fn new(config: &RenderConfig, edge: A) -> NftBackend<A> {
        NftBackend {
            ipv4: Renderer::new(Family::Ip, config.clone()),
            ipv6: Renderer::new(Family::Ip6, config.clone()),
            edge,
            last: Transaction::default(),
        }
    }

    /// The edge (for inspection).
    pub fn edge(&self) -> &A {
        &self.edge
    }

    /// The last transaction committed.
    pub fn last(&self) -> &Transaction {
        &self.last
    }

    fn commit(&mut self, transaction: Transaction, full: bool) -> Result<SyncStats, A::Error> {
        if let Err(err) = self.edge.apply(&transaction) {
            self.ipv4.reset();
            self.ipv6.reset();
            return Err(err);
        }
        let stats = SyncStats { rules: transaction.rules(), elements: transaction.elements(), full };
        self.last = transaction;
        Ok(stats)
    }
}

impl<A: Apply> Backend for NftBackend<A> {
    type Error = A::Error;

    fn full_sync(&mut self, state: &ProxyState) -> Result<SyncStats, A::Error> {
        let mut transaction = Transaction::default();
        self.ipv4.full(state, &mut transaction);
        self.ipv6.full(state, &mut transaction);
        self.commit(transaction, true)
    }

    fn partial_sync(
        &mut self,
        state: &ProxyState,
        changed: &BTreeSet<ServicePortName>,
    ) -> Result<SyncStats, A::Error> {
        let mut transaction = Transaction::default();
        self.ipv4.partial(state, changed, &mut transaction);
        self.ipv6.partial(state, changed, &mut transaction);
        if transaction.ops.is_empty() {
            return Ok(SyncStats::default());
        }
        self.commit(transaction, false)
    }
}
