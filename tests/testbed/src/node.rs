//! The official JavaScript client `@kubernetes/client-node` (npm), installed by `cargo xtask deps`
//! from the committed `tests/testbed/node/package-lock.json` into the workspace's target directory,
//! for tests that drive Keel's API with it on the machine's Node.js 20 (client-node 2.x needs 22).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The client version tests are written against (pinned in the committed package.json).
pub const CLIENT_NODE: &str = "1.4.0";

fn manifest_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/node"))
}

/// Where the packages live: `$KEEL_NODE_DIR`, else `<workspace>/target/keel-node`.
pub fn dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KEEL_NODE_DIR") {
        return PathBuf::from(dir);
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.ancestors().nth(2).unwrap_or(manifest);
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    target.join("keel-node")
}

/// The client's ES module entry point, for a script's `await import(...)`.
fn entry() -> PathBuf {
    dir().join("node_modules/@kubernetes/client-node/dist/index.js")
}

fn installed_version() -> Option<String> {
    let text =
        std::fs::read_to_string(dir().join("node_modules/@kubernetes/client-node/package.json")).ok()?;
    let package: serde_json::Value = serde_json::from_str(&text).ok()?;
    package["version"].as_str().map(str::to_owned)
}

/// The client's entry point; an error naming the fix when it is missing.
pub fn client() -> Result<PathBuf> {
    if installed_version().as_deref() != Some(CLIENT_NODE) || !entry().exists() {
        bail!("@kubernetes/client-node {CLIENT_NODE} is not in {} (run `cargo xtask deps`)", dir().display());
    }
    Ok(entry())
}

/// Installs the locked packages with `npm ci` when missing; returns the client's entry point.
pub fn ensure() -> Result<PathBuf> {
    if let Ok(entry) = client() {
        return Ok(entry);
    }
    let dir = dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    for file in ["package.json", "package-lock.json"] {
        std::fs::copy(manifest_dir().join(file), dir.join(file))
            .with_context(|| format!("copying {file} to {}", dir.display()))?;
    }
    let status = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .status()
        .context("running npm ci")?;
    if !status.success() {
        bail!("npm ci in {} failed: {status}", dir.display());
    }
    client()
}
