//! keel-shim: Keel's CRI runtime (issue 7).

pub mod image;
