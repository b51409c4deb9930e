//! A snapshot of the machine's own network namespace — links, addresses, routes, rules and the nftables
//! ruleset — so tests (and `cargo xtask test` around the whole run) can assert that nothing Keel's tests
//! do changes it. Read through `ip` and `nft`: independent tools checking our netlink work.

use std::process::Command;

use anyhow::{Context, Result, bail};

/// What the machine's network namespace looked like, as text (one section per view).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostNetState {
    pub sections: Vec<(String, String)>,
}

const VIEWS: &[&[&str]] = &[
    &["ip", "-o", "link", "show"],
    &["ip", "-o", "address", "show"],
    &["ip", "route", "show", "table", "all"],
    &["ip", "-6", "route", "show", "table", "all"],
    &["ip", "rule", "show"],
    &["nft", "list", "ruleset"],
];

impl HostNetState {
    /// Reads the namespace of the calling thread (call it from the machine's own namespace).
    pub fn capture() -> Result<HostNetState> {
        let mut sections = Vec::new();
        for view in VIEWS {
            let output = Command::new(view[0])
                .args(&view[1..])
                .output()
                .with_context(|| format!("run `{}`", view.join(" ")))?;
            if !output.status.success() {
                bail!("`{}` failed: {}", view.join(" "), String::from_utf8_lossy(&output.stderr));
            }
            let text = normalize(&String::from_utf8_lossy(&output.stdout));
            sections.push((view.join(" "), text));
        }
        Ok(HostNetState { sections })
    }

    /// A readable list of what differs from `before`, or None when nothing does.
    pub fn diff(&self, before: &HostNetState) -> Option<String> {
        let mut out = String::new();
        for ((view, now), (_, then)) in self.sections.iter().zip(&before.sections) {
            if now != then {
                out.push_str(&format!("`{view}` changed:\n--- before\n{then}\n+++ after\n{now}\n"));
            }
        }
        (!out.is_empty()).then_some(out)
    }
}

/// Drops what changes without anyone changing the configuration: address lifetimes and route expiry
/// timers counting down, and nftables rule counters.
fn normalize(text: &str) -> String {
    text.lines()
        .map(|line| {
            line.split_whitespace()
                .scan(false, |skip_next, word| {
                    if *skip_next {
                        *skip_next = false;
                        return Some(None);
                    }
                    if matches!(word, "valid_lft" | "preferred_lft" | "expires" | "packets" | "bytes") {
                        *skip_next = true;
                        return Some(None);
                    }
                    Some(Some(word))
                })
                .flatten()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_lifetimes_are_ignored() {
        assert_eq!(
            normalize("2: eth0 inet 10.0.0.2/24 valid_lft 3599sec preferred_lft 3599sec\n"),
            "2: eth0 inet 10.0.0.2/24"
        );
        assert_eq!(
            normalize("default via fe80::1 dev eth0 proto ra metric 1024 expires 1799sec pref medium"),
            "default via fe80::1 dev eth0 proto ra metric 1024 pref medium"
        );
        assert_eq!(
            normalize("ip saddr 1.2.3.4 counter packets 12 bytes 3456 drop"),
            "ip saddr 1.2.3.4 counter drop"
        );
    }

    #[test]
    fn a_changed_section_is_named_in_the_diff() {
        let before = HostNetState { sections: vec![("ip route".into(), "a".into())] };
        let after = HostNetState { sections: vec![("ip route".into(), "b".into())] };
        assert!(after.diff(&before).is_some_and(|d| d.contains("`ip route` changed")));
        assert_eq!(before.diff(&before), None);
    }
}
