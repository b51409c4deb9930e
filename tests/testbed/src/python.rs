//! The official Python `kubernetes` client and grpcio (PyPI), in a virtualenv `cargo xtask deps` makes
//! under the workspace's target directory, for tests that drive Keel's API and its CRI server with
//! them (grpcio is grpc's C core, the gRPC stack of Python, Ruby and C++ tooling).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The client version tests are written against.
pub const KUBERNETES_CLIENT: &str = "37.0.2";
/// grpcio, for a CRI client on grpc's C core.
pub const GRPCIO: &str = "1.85.3";

/// Where the virtualenv lives: `$KEEL_PYTHON_VENV`, else `<workspace>/target/keel-python`.
pub fn venv_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KEEL_PYTHON_VENV") {
        return PathBuf::from(dir);
    }
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = manifest.ancestors().nth(2).unwrap_or(manifest);
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), PathBuf::from);
    target.join("keel-python")
}

fn interpreter() -> PathBuf {
    venv_dir().join("bin").join("python")
}

fn has_client() -> bool {
    Command::new(interpreter())
        .args([
            "-c",
            &format!(
                "import grpc, kubernetes, sys; \
                 sys.exit(kubernetes.__version__ != {KUBERNETES_CLIENT:?} or grpc.__version__ != {GRPCIO:?})"
            ),
        ])
        .output()
        .is_ok_and(|out| out.status.success())
}

/// The virtualenv's python with the client in it; an error naming the fix when it is missing.
pub fn python() -> Result<PathBuf> {
    if !has_client() {
        bail!(
            "the Python kubernetes client {KUBERNETES_CLIENT} or grpcio {GRPCIO} is not in {} (run `cargo xtask deps`)",
            venv_dir().display()
        );
    }
    Ok(interpreter())
}

/// Makes the virtualenv and installs the client from PyPI when missing; returns its python.
pub fn ensure() -> Result<PathBuf> {
    if has_client() {
        return Ok(interpreter());
    }
    let dir = venv_dir();
    let status = Command::new("python3")
        .arg("-m")
        .arg("venv")
        .arg("--clear")
        .arg(&dir)
        .status()
        .context("running python3 -m venv")?;
    if !status.success() {
        bail!("python3 -m venv {} failed: {status}", dir.display());
    }
    let status = Command::new(interpreter())
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &format!("kubernetes=={KUBERNETES_CLIENT}"),
            &format!("grpcio=={GRPCIO}"),
        ])
        .status()
        .context("running pip")?;
    if !status.success() {
        bail!("pip install kubernetes=={KUBERNETES_CLIENT} grpcio=={GRPCIO} failed: {status}");
    }
    python()
}
