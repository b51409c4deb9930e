//! The CNI specification's data: versions, errors, network configuration and results.
//!
//! Everything here is pure: parsing and rendering JSON as the spec (1.1.0 and the earlier versions a
//! runtime may ask for) defines it. The plugin's work on the kernel lives elsewhere.

pub mod config;
pub mod error;
pub mod result;
pub mod version;

pub use config::{Attachment, NetConf, PortMapping};
pub use error::Error;
pub use result::{CniResult, Dns, Interface, IpConfig, Route};
pub use version::Version;
