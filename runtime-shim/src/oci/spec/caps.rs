//! Capabilities: containerd's default set, CRI add/drop (names with or without `CAP_`, any case,
//! `ALL`), and "all current capabilities" (the bounding set keel-shim itself runs with) for privileged
//! containers and `add: [ALL]`, as containerd's `WithAllCurrentCapabilities`.

use std::str::FromStr;

use k8s_cri::v1 as api;
use oci_spec::runtime::{Capabilities, Capability, LinuxCapabilities};

use super::SpecError;

/// Linux capability names (without `CAP_`) and their numbers (linux/capability.h).
const CAPABILITIES: &[(&str, u8)] = &[
    ("CHOWN", 0),
    ("DAC_OVERRIDE", 1),
    ("DAC_READ_SEARCH", 2),
    ("FOWNER", 3),
    ("FSETID", 4),
    ("KILL", 5),
    ("SETGID", 6),
    ("SETUID", 7),
    ("SETPCAP", 8),
    ("LINUX_IMMUTABLE", 9),
    ("NET_BIND_SERVICE", 10),
    ("NET_BROADCAST", 11),
    ("NET_ADMIN", 12),
    ("NET_RAW", 13),
    ("IPC_LOCK", 14),
    ("IPC_OWNER", 15),
    ("SYS_MODULE", 16),
    ("SYS_RAWIO", 17),
    ("SYS_CHROOT", 18),
    ("SYS_PTRACE", 19),
    ("SYS_PACCT", 20),
    ("SYS_ADMIN", 21),
    ("SYS_BOOT", 22),
    ("SYS_NICE", 23),
    ("SYS_RESOURCE", 24),
    ("SYS_TIME", 25),
    ("SYS_TTY_CONFIG", 26),
    ("MKNOD", 27),
    ("LEASE", 28),
    ("AUDIT_WRITE", 29),
    ("AUDIT_CONTROL", 30),
    ("SETFCAP", 31),
    ("MAC_OVERRIDE", 32),
    ("MAC_ADMIN", 33),
    ("SYSLOG", 34),
    ("WAKE_ALARM", 35),
    ("BLOCK_SUSPEND", 36),
    ("AUDIT_READ", 37),
    ("PERFMON", 38),
    ("BPF", 39),
    ("CHECKPOINT_RESTORE", 40),
];

/// containerd's default capabilities (`defaultUnixCaps`, Docker's set).
const DEFAULT: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "FSETID",
    "FOWNER",
    "MKNOD",
    "NET_RAW",
    "SETGID",
    "SETUID",
    "SETFCAP",
    "SETPCAP",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
    "KILL",
    "AUDIT_WRITE",
];

/// A capability name as the CRI carries it: `chown`, `CHOWN`, `CAP_CHOWN`.
pub(super) fn parse(name: &str) -> Result<Capability, SpecError> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    if !CAPABILITIES.iter().any(|(known, _)| *known == bare) {
        return Err(SpecError::UnknownCapability(name.to_owned()));
    }
    Capability::from_str(bare).map_err(|_| SpecError::UnknownCapability(name.to_owned()))
}

/// containerd's default set.
pub(super) fn default_set() -> Capabilities {
    DEFAULT.iter().filter_map(|name| Capability::from_str(name).ok()).collect()
}

/// The capabilities whose bits are set in a mask (as /proc/self/status `CapBnd` shows it).
pub(super) fn from_mask(mask: u64) -> Capabilities {
    CAPABILITIES
        .iter()
        .filter(|(_, bit)| mask & (1u64 << bit) != 0)
        .filter_map(|(name, _)| Capability::from_str(name).ok())
        .collect()
}

/// keel-shim's own bounding set (`CapBnd` of /proc/self/status); every known capability if it cannot
/// be read.
pub(super) fn current() -> Capabilities {
    let mask = std::fs::read_to_string("/proc/self/status").ok().and_then(|status| {
        status
            .lines()
            .find_map(|line| line.strip_prefix("CapBnd:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
    });
    from_mask(mask.unwrap_or(u64::MAX))
}

/// The capability set after the CRI's add/drop, as containerd's `WithCapabilities`: `add: [ALL]`
/// starts from every current capability, `drop: [ALL]` from none, then the named ones are added, then
/// the named ones dropped.
pub(super) fn apply(
    requested: Option<&api::Capability>,
    all: &Capabilities,
) -> Result<Capabilities, SpecError> {
    let mut set = default_set();
    let Some(requested) = requested else { return Ok(set) };
    let is_all = |name: &String| name.trim().eq_ignore_ascii_case("ALL");
    if requested.add_capabilities.iter().any(is_all) {
        set.clone_from(all);
    }
    if requested.drop_capabilities.iter().any(is_all) {
        set.clear();
    }
    for name in requested.add_capabilities.iter().filter(|n| !is_all(n)) {
        set.insert(parse(name)?);
    }
    for name in requested.drop_capabilities.iter().filter(|n| !is_all(n)) {
        set.remove(&parse(name)?);
    }
    Ok(set)
}

/// The process capabilities: bounding, effective and permitted are the set; inheritable and ambient
/// stay empty (containerd clears ambient ones; inheritable ones stopped being set after
/// CVE-2022-24769).
pub(super) fn linux_capabilities(set: Capabilities) -> LinuxCapabilities {
    let mut caps = LinuxCapabilities::default();
    caps.set_bounding(Some(set.clone()));
    caps.set_effective(Some(set.clone()));
    caps.set_permitted(Some(set));
    caps.set_inheritable(None);
    caps.set_ambient(None);
    caps
}

/// Every capability keel-shim knows (for tests and hosts whose bounding set cannot be read).
#[cfg(test)]
pub(super) fn known() -> Capabilities {
    from_mask(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> Capabilities {
        names.iter().map(|n| parse(n).unwrap()).collect()
    }

    #[test]
    fn names_parse_with_or_without_prefix_in_any_case() {
        for name in ["SYS_ADMIN", "sys_admin", "CAP_SYS_ADMIN", "cap_sys_admin", " Sys_Admin "] {
            assert_eq!(parse(name).unwrap(), Capability::SysAdmin, "{name}");
        }
        for name in ["", "CAP_", "SYS_ADMINS", "ALL", "CAP_CAP_CHOWN"] {
            assert!(matches!(parse(name), Err(SpecError::UnknownCapability(_))), "{name}");
        }
        assert_eq!(known().len(), CAPABILITIES.len(), "every table entry is an oci-spec capability");
    }

    #[test]
    fn add_and_drop_follow_containerd() {
        let all = known();
        let cap = |add: &[&str], drop: &[&str]| api::Capability {
            add_capabilities: add.iter().map(|s| (*s).to_owned()).collect(),
            drop_capabilities: drop.iter().map(|s| (*s).to_owned()).collect(),
            add_ambient_capabilities: Vec::new(),
        };
        assert_eq!(apply(None, &all).unwrap(), default_set());
        assert_eq!(default_set().len(), 14);

        let mut want = default_set();
        want.insert(Capability::NetAdmin);
        want.remove(&Capability::Kill);
        assert_eq!(apply(Some(&cap(&["NET_ADMIN"], &["CAP_KILL"])), &all).unwrap(), want);

        let mut everything_but_chown = all.clone();
        everything_but_chown.remove(&Capability::Chown);
        assert_eq!(apply(Some(&cap(&["ALL"], &["CHOWN"])), &all).unwrap(), everything_but_chown);
        assert_eq!(apply(Some(&cap(&["all"], &[])), &set(&["BPF"])).unwrap(), set(&["BPF"]), "ALL = current");

        assert_eq!(apply(Some(&cap(&["NET_RAW"], &["ALL"])), &all).unwrap(), set(&["NET_RAW"]));
        assert_eq!(apply(Some(&cap(&[], &["ALL"])), &all).unwrap(), Capabilities::new());
        // Added and dropped: dropped wins (drops apply last).
        assert!(
            !apply(Some(&cap(&["SYS_TIME"], &["SYS_TIME"])), &all).unwrap().contains(&Capability::SysTime)
        );

        assert!(
            matches!(apply(Some(&cap(&["NOPE"], &[])), &all), Err(SpecError::UnknownCapability(n)) if n == "NOPE")
        );
        assert!(matches!(apply(Some(&cap(&[], &["NOPE"])), &all), Err(SpecError::UnknownCapability(_))));
    }

    #[test]
    fn masks_select_capabilities_by_bit() {
        assert_eq!(from_mask(0), Capabilities::new());
        assert_eq!(from_mask(1 | (1 << 21)), set(&["CHOWN", "SYS_ADMIN"]));
        assert_eq!(from_mask(0x1ff_ffff_ffff), known(), "a 6.x kernel's CapBnd: 41 capabilities");
        assert!(current().contains(&Capability::Chown));
    }
}
