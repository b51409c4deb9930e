//! OCI runtime specs: [`spec`] builds a container's `config.json` from its CRI config and its image.

pub mod spec;
