//! OCI: the runtime spec built from the CRI configs ([`spec`]).

pub mod spec;
