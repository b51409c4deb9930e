//! xtask's tests: bootstrap and `up`/`down`.
//!
//! One test binary per crate: each links the crate once, and nextest still runs every test in
//! its own process.

mod bootstrap;
mod up_down;
