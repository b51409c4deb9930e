//! Small helpers shared by the subcommands.

use std::path::PathBuf;
use std::process::{Command, ExitStatus};

use anyhow::{Context, Result, bail};

/// The workspace root (xtask lives one level below it).
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// The cargo that runs us (so a toolchain override is honoured).
pub fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.current_dir(workspace_root());
    command
}

/// Describes a command for messages: program and arguments.
pub fn describe(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs a command with inherited stdio and returns its status.
pub fn status(command: &mut Command) -> Result<ExitStatus> {
    command.status().with_context(|| format!("run `{}`", describe(command)))
}

/// Runs a command with inherited stdio; fails unless it exits 0.
pub fn run(command: &mut Command) -> Result<()> {
    let status = status(command)?;
    if !status.success() {
        bail!("`{}` failed: {status}", describe(command));
    }
    Ok(())
}

/// Whether we run as root.
pub fn is_root() -> bool {
    nix::unistd::Uid::effective().is_root()
}

/// Whether this run is under CI (CI=true), where a missing prerequisite fails instead of being reported.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}
