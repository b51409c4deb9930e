//! The spec versions keel-cni speaks.

use std::fmt;

use crate::spec::error::{self, Error};

/// A CNI spec version a configuration or result may carry. Versions before 0.3.0 (the `ip4`/`ip6`
/// result shape) are not supported, as containerd and CRI-O no longer send them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    V0_3_0,
    V0_3_1,
    V0_4_0,
    V1_0_0,
    V1_1_0,
}

impl Version {
    /// Every version keel-cni accepts, oldest first (the VERSION command's `supportedVersions`).
    pub const ALL: [Version; 5] =
        [Version::V0_3_0, Version::V0_3_1, Version::V0_4_0, Version::V1_0_0, Version::V1_1_0];

    /// The newest version, used when a caller names none.
    pub const LATEST: Version = Version::V1_1_0;

    pub fn as_str(self) -> &'static str {
        match self {
            Version::V0_3_0 => "0.3.0",
            Version::V0_3_1 => "0.3.1",
            Version::V0_4_0 => "0.4.0",
            Version::V1_0_0 => "1.0.0",
            Version::V1_1_0 => "1.1.0",
        }
    }

    /// Parses a `cniVersion`; an unknown one is the spec's error 1 (incompatible CNI version).
    pub fn parse(text: &str) -> Result<Version, Error> {
        Version::ALL.into_iter().find(|version| version.as_str() == text).ok_or_else(|| {
            Error::new(error::INCOMPATIBLE_VERSION, format!("incompatible CNI version {text:?}"))
                .with_details(format!("keel-cni supports {}", Version::ALL.map(Version::as_str).join(", ")))
        })
    }

    /// Whether CHECK exists in this version (0.4.0 and later).
    pub fn has_check(self) -> bool {
        self >= Version::V0_4_0
    }

    /// Whether STATUS and GC exist in this version (1.1.0).
    pub fn has_status_and_gc(self) -> bool {
        self >= Version::V1_1_0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_supported_version_and_refuses_others() {
        for version in Version::ALL {
            assert_eq!(Version::parse(version.as_str()).unwrap(), version);
        }
        for text in ["0.2.0", "0.1.0", "1.2.0", "", "1.0"] {
            assert_eq!(Version::parse(text).unwrap_err().code, error::INCOMPATIBLE_VERSION, "{text}");
        }
        assert!(Version::V0_4_0.has_check() && !Version::V0_3_1.has_check());
        assert!(Version::V1_1_0.has_status_and_gc() && !Version::V1_0_0.has_status_and_gc());
    }
}
