//! OCI: the runtime binary's driver ([`runtime`]).

pub mod runtime;
