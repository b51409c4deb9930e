//! OCI: the runtime spec of a container ([`spec`], built from its CRI config and its image), the
//! OCI runtime binary's driver ([`runtime`], runc or crun), behind the [`runtime::Runtime`] trait (a
//! recording fake in `fake` for unit tests), and what each runtime handler supports ([`features`]).

#[cfg(test)]
pub mod fake;
pub mod features;
pub mod runtime;
pub mod spec;
