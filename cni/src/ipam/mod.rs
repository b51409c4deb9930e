//! Address management: keel-cni's built-in IPAM (host-local's configuration keys, semantics and
//! on-disk layout, without a process spawn).
//!
//! - `range`: range sets, requested addresses and the round-robin choice (pure).

pub mod range;
