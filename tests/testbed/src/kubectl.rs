//! The kubectl clients installed side by side (`kubectl.1.NN`, from the Google Cloud SDK packages).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Where the Google Cloud SDK packages install `kubectl.1.NN`.
pub const DEFAULT_DIR: &str = "/usr/lib/google-cloud-sdk/bin";
/// Overrides [`DEFAULT_DIR`].
pub const DIR_ENV: &str = "KEEL_KUBECTL_DIR";

/// One installed kubectl client of minor version `1.minor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kubectl {
    pub minor: u32,
    pub path: PathBuf,
}

/// The directory scanned: `$KEEL_KUBECTL_DIR` or [`DEFAULT_DIR`].
pub fn dir() -> PathBuf {
    match std::env::var_os(DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(DEFAULT_DIR),
    }
}

/// Every `kubectl.1.NN` in [`dir`], sorted by minor version; empty if the directory is missing.
pub fn installed() -> Vec<Kubectl> {
    installed_in(&dir())
}

/// Every `kubectl.1.NN` file in `dir`, sorted by minor version.
pub fn installed_in(dir: &Path) -> Vec<Kubectl> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<Kubectl> = entries
        .flatten()
        .filter_map(|entry| {
            let minor = parse_minor(entry.file_name().to_str()?)?;
            entry.path().is_file().then(|| Kubectl { minor, path: entry.path() })
        })
        .collect();
    found.sort_by_key(|k| k.minor);
    found
}

/// The installed kubectl with the highest minor version.
pub fn newest() -> Result<Kubectl> {
    installed().pop().with_context(|| format!("no kubectl.1.NN in {}", dir().display()))
}

/// The installed kubectl `1.minor`.
pub fn minor(minor: u32) -> Result<Kubectl> {
    installed()
        .into_iter()
        .find(|k| k.minor == minor)
        .with_context(|| format!("no kubectl.1.{minor} in {}", dir().display()))
}

fn parse_minor(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("kubectl.1.")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl Kubectl {
    /// A command running this kubectl, ready for arguments.
    pub fn command(&self) -> Command {
        Command::new(&self.path)
    }

    /// The client's `gitVersion` (e.g. `v1.27.16`) from `kubectl version --client -o json`.
    pub fn version_client(&self) -> Result<String> {
        let output = self
            .command()
            .args(["version", "--client", "-o", "json"])
            .output()
            .with_context(|| format!("running {} version --client", self.path.display()))?;
        if !output.status.success() {
            bail!(
                "{} version --client exited with {}: {}",
                self.path.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        parse_git_version(&output.stdout)
            .with_context(|| format!("reading the output of {} version --client", self.path.display()))
    }
}

fn parse_git_version(json: &[u8]) -> Result<String> {
    let value: serde_json::Value = serde_json::from_slice(json).context("parsing JSON")?;
    value["clientVersion"]["gitVersion"]
        .as_str()
        .map(str::to_owned)
        .context("no clientVersion.gitVersion in the JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_versions() -> Result<()> {
        assert_eq!(parse_minor("kubectl.1.27"), Some(27));
        assert_eq!(parse_minor("kubectl.1."), None);
        assert_eq!(parse_minor("kubectl.1.27.bak"), None);
        assert_eq!(parse_minor("kubectl"), None);
        assert_eq!(parse_git_version(br#"{"clientVersion":{"gitVersion":"v1.30.2"}}"#)?, "v1.30.2");
        assert!(parse_git_version(b"{}").is_err());
        assert!(parse_git_version(b"not json").is_err());
        Ok(())
    }
}
