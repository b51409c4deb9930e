//! OCI: the runtime spec of a container ([`spec`], built from its CRI config and its image) and the
//! OCI runtime binary's driver ([`runtime`], runc or crun).

pub mod runtime;
pub mod spec;
