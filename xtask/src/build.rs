//! `cargo xtask build cni` / `cargo xtask build shim`: the release binaries Keel installs on nodes, built as
//! they ship.
//!
//! keel-cni is linked statically (static-pie, glibc's crt-static): a CNI plugin is copied onto hosts
//! whose C library the DaemonSet does not know (upstream's plugins ship static for the same reason),
//! and a runtime starts one process per ADD and DEL, where dynamic loading alone costs ≈0.25–0.3 ms of
//! the ≈1 ms a start takes here (VERSION: 0.98 vs 1.30 ms, 300 interleaved rounds). `crt-static` needs
//! an explicit `--target` (without one, RUSTFLAGS would reach proc-macro crates, which cannot be
//! static), and the artifacts go to their own target directory so the workspace's build is untouched.
//! The release profile is tightened for it too (fat LTO, one codegen unit, panic=abort: a smaller
//! binary, ≈0.05 ms less per start; a panic in a plugin is a bug either way, and the runtime sees the
//! non-zero exit).

use std::path::PathBuf;

use anyhow::{Context, Result, bail};

use crate::util;

/// The host triple the static build names explicitly.
const TARGET: &str = "x86_64-unknown-linux-gnu";

#[derive(Debug, clap::Args)]
pub struct Args {
    /// What to build: `cni` (the keel-cni plugin, static) or `shim` (keel-shim and its static monitor).
    pub what: String,
}

pub fn run(args: &Args) -> Result<()> {
    match args.what.as_str() {
        "cni" => {
            let path = static_cni()?;
            println!("{}", path.display());
            Ok(())
        }
        "shim" => {
            let path = release_shim()?;
            println!("{}", path.display());
            Ok(())
        }
        other => bail!("nothing to build named {other}; try `cni` or `shim`"),
    }
}

/// Builds keel-cni in release mode as a static-pie executable and returns its path.
pub fn static_cni() -> Result<PathBuf> {
    let target_dir = util::workspace_root().join("target/static");
    static_binary("keel-cni", "keel-cni", &target_dir, &[], "")?;
    Ok(target_dir.join(TARGET).join("release/keel-cni"))
}

/// `cargo build --release` of `package`'s `bin` for [`TARGET`] into `target_dir`, statically linked
/// (crt-static, plus `extra_rustflags`), fat LTO, one codegen unit, panic=abort, with `profile` (extra
/// `CARGO_PROFILE_RELEASE_*` settings). The binary lands in `<target_dir>/<TARGET>/release/<bin>`.
fn static_binary(
    package: &str,
    bin: &str,
    target_dir: &std::path::Path,
    profile: &[(&str, &str)],
    extra_rustflags: &str,
) -> Result<()> {
    let mut command = util::cargo();
    command
        .args(["build", "--locked", "--release", "--package", package, "--bin", bin, "--target", TARGET])
        .env("CARGO_TARGET_DIR", target_dir)
        .env("CARGO_PROFILE_RELEASE_LTO", "fat")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort")
        .env(
            format!("CARGO_TARGET_{}_RUSTFLAGS", TARGET.to_uppercase().replace('-', "_")),
            format!("-C target-feature=+crt-static {extra_rustflags}").trim_end(),
        );
    for (key, value) in profile {
        command.env(format!("CARGO_PROFILE_RELEASE_{key}"), value);
    }
    util::run(&mut command)
}

/// Builds keel-shim as it ships and returns its path: keel-shim in release mode (the workspace's
/// release profile) and, beside it, `keel-shim-monitor` — one of which runs per container, so it is
/// built for memory: static and non-PIE (no shared libraries to map, no relocations to write at
/// start-up), opt-level s, fat LTO, one codegen unit, panic=abort (a monitor that panics is a bug
/// either way; keel-shim sees the container's exit as Unknown). Both are copied into
/// `<target>/shim/`, where keel-shim finds its monitor.
pub fn release_shim() -> Result<PathBuf> {
    let mut command = util::cargo();
    command.args(["build", "--locked", "--release", "--package", "keel-shim", "--bin", "keel-shim"]);
    util::run(&mut command)?;
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| util::workspace_root().join("target"), PathBuf::from);
    let static_dir = target_dir.join("static-shim");
    static_binary(
        "keel-shim",
        "keel-shim-monitor",
        &static_dir,
        &[("OPT_LEVEL", "s")],
        "-C relocation-model=static",
    )?;
    let dist = target_dir.join("shim");
    std::fs::create_dir_all(&dist).with_context(|| format!("create {}", dist.display()))?;
    for (from, name) in [
        (target_dir.join("release/keel-shim"), "keel-shim"),
        (static_dir.join(TARGET).join("release/keel-shim-monitor"), "keel-shim-monitor"),
    ] {
        let to = dist.join(name);
        // A new file, not the old one rewritten: a running monitor keeps executing the old text.
        let _ = std::fs::remove_file(&to);
        std::fs::copy(&from, &to).with_context(|| format!("copy {} to {}", from.display(), to.display()))?;
    }
    Ok(dist.join("keel-shim"))
}
