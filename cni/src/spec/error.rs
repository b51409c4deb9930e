//! The spec's error result: `{cniVersion, code, msg, details}` on stdout and a non-zero exit.

use std::fmt;

use serde_json::{Value, json};

use crate::spec::version::Version;

/// 1: the configuration's or the caller's CNI version is not supported.
pub const INCOMPATIBLE_VERSION: u32 = 1;
/// 2: a field of the network configuration is not supported.
pub const UNSUPPORTED_FIELD: u32 = 2;
/// 3: the container is unknown or does not exist (never returned by DEL).
pub const UNKNOWN_CONTAINER: u32 = 3;
/// 4: a required environment variable is missing or invalid.
pub const INVALID_ENVIRONMENT: u32 = 4;
/// 5: an I/O failure (reading stdin, the data directory, netlink...).
pub const IO_FAILURE: u32 = 5;
/// 6: the configuration or prevResult could not be decoded.
pub const DECODING_FAILURE: u32 = 6;
/// 7: the network configuration is invalid.
pub const INVALID_NETWORK_CONFIG: u32 = 7;
/// 8: CNI_NETNS does not name a usable network namespace, or names the plugin's own (libcni's
/// `ErrInvalidNetNS`; not in the spec's table, but what runtimes see from the reference plugins).
pub const INVALID_NETNS: u32 = 8;
/// 11: a transient condition; the runtime should try again later.
pub const TRY_AGAIN_LATER: u32 = 11;
/// 50: STATUS: the plugin cannot serve ADDs at all.
pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
/// 51: STATUS: the plugin can serve ADDs, but with limited connectivity.
pub const LIMITED_CONNECTIVITY: u32 = 51;

// Plugin-specific codes (the spec reserves 100 and above for them).
/// 100: the IP range has no free address.
pub const RANGE_EXHAUSTED: u32 = 100;
/// 101: CHECK found the pod's network different from what ADD made (a missing link, address or route).
pub const DRIFT: u32 = 101;
/// 102: the interface to create already exists in the pod's network namespace.
pub const INTERFACE_EXISTS: u32 = 102;
/// 103: a delegated IPAM plugin failed (its own error is in details).
pub const DELEGATE_FAILED: u32 = 103;
/// 104: the kernel refused a network change (netlink or nftables).
pub const KERNEL_REFUSED: u32 = 104;

/// A CNI error result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: u32,
    pub msg: String,
    pub details: String,
}

impl Error {
    pub fn new(code: u32, msg: impl Into<String>) -> Error {
        Error { code, msg: msg.into(), details: String::new() }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Error {
        self.details = details.into();
        self
    }

    /// An I/O failure (code 5) with the cause chain in details.
    pub fn io(msg: impl Into<String>, cause: &dyn fmt::Display) -> Error {
        Error::new(IO_FAILURE, msg).with_details(cause.to_string())
    }

    /// An invalid network configuration (code 7).
    pub fn config(msg: impl Into<String>) -> Error {
        Error::new(INVALID_NETWORK_CONFIG, msg)
    }

    /// The error as the spec writes it on stdout, in the caller's version (errors look the same in
    /// every version keel-cni supports).
    pub fn to_json(&self, version: Version) -> Value {
        let mut value = json!({"cniVersion": version.as_str(), "code": self.code, "msg": self.msg});
        if !self.details.is_empty() {
            value["details"] = Value::String(self.details.clone());
        }
        value
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CNI error {}: {}", self.code, self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}
