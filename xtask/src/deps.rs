//! `cargo xtask deps`: what Keel needs to build, test and run, from Debian's packages.
//!
//! Idempotent and fast when everything is present (one `dpkg-query`). As root on Debian/Ubuntu it
//! installs what is missing; elsewhere it prints the exact command. cargo-nextest, which no Debian
//! package has, is built from crates.io at a pinned version when it is missing. Tools that come with the
//! machine image (kubectl 1.27–1.33, Node.js 20, clippy, rustfmt) are checked, never installed, and named
//! when missing. Later issues add their needs to the lists below.
//!
//! xtask itself must build before any of this is installed (a fresh machine has only the toolchains), so
//! nothing in its dependency tree may need a system package at build time: `tests/bootstrap.rs` checks
//! it. The upstream peers come last but one: `cargo xtask peers` builds them with the machine's Go.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::util;

/// Debian packages, each with why Keel needs it.
pub const PACKAGES: &[(&str, &str)] = &[
    ("protobuf-compiler", "protoc, for etcd-client and k8s-cri at build time"),
    ("libprotobuf-dev", "the well-known .proto files protoc imports (google/protobuf/descriptor.proto)"),
    ("gcc", "C compiler for crates that build C (bundled SQLite in the power-loss tests)"),
    ("libc6-dev", "C library headers for the same"),
    ("iproute2", "ip: tests read the machine's network state with it"),
    ("nftables", "nft: keel-proxy and keel-cni program the kernel's nftables"),
    ("util-linux", "nsenter, mount; ipcs and ipcmk for critest (its busybox image holds the machine's ipcs)"),
    ("procps", "pgrep for critest's busybox image"),
    ("runc", "the OCI runtime keel-shim drives"),
    ("crun", "the second OCI runtime keel-shim drives"),
    ("etcd-server", "etcd: the store backend for multi-node control planes, and a test peer"),
    ("etcd-client", "etcdctl: tests talk to etcd with it"),
    ("openssl", "the openssl CLI: tests make the certificates of a TLS etcd with it"),
    ("containernetworking-plugins", "the reference CNI plugins, peers of keel-cni"),
    (
        "iptables",
        "the reference bridge and portmap plugins run it for ipMasq and hostPorts (keel-cni's peers)",
    ),
    ("containerd", "the CRI runtime keel-kubelet must drive, a peer of keel-shim"),
    ("docker-registry", "a local OCI registry: no test needs the internet"),
    ("umoci", "builds the test images as OCI layouts"),
    ("skopeo", "copies test images into the local registry"),
    ("busybox-static", "the contents of the test images"),
    ("python3-venv", "a virtualenv for the Python kubernetes client tests"),
];

/// cargo subcommands built from crates.io when missing: (crate, pinned version, the `cargo` subcommand,
/// `cargo install` feature arguments). nextest 0.9.151 builds on rustc 1.91+; its self-update feature is
/// left out (updates come from this pin).
pub const CARGO_TOOLS: &[(&str, &str, &str, &[&str])] =
    &[("cargo-nextest", "0.9.151", "nextest", &["--no-default-features", "--features", "default-no-update"])];

/// kubectl versions that must be present (from the machine image, not Debian).
pub const KUBECTL_MINORS: std::ops::RangeInclusive<u32> = 27..=33;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only check; never install.
    #[arg(long)]
    pub check: bool,
}

pub fn run(args: &Args) -> Result<()> {
    ensure(args.check, Peers::Needed)
}

/// Whether the upstream peers are needed: by the tests and benchmarks, not to bring Keel up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peers {
    Needed,
    NotNeeded,
}

/// Installs (or with `check_only`, verifies) every prerequisite; fails naming what is missing.
pub fn ensure(check_only: bool, peers: Peers) -> Result<()> {
    let missing = missing_packages()?;
    if !missing.is_empty() {
        let command = format!(
            "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {}",
            missing.join(" ")
        );
        if check_only || !util::is_root() || !Path::new("/usr/bin/apt-get").exists() {
            bail!("missing Debian packages: {}\ninstall them with:\n  {command}", missing.join(" "));
        }
        eprintln!("deps: installing {}", missing.join(" "));
        install(&missing)?;
        let still = missing_packages()?;
        if !still.is_empty() {
            bail!("still missing after apt-get install: {}", still.join(" "));
        }
    }
    for (krate, version, subcommand, features) in CARGO_TOOLS {
        let found = util::cargo().args([subcommand, "--version"]).output();
        let current = found
            .is_ok_and(|out| out.status.success() && String::from_utf8_lossy(&out.stdout).contains(version));
        if current {
            continue;
        }
        if check_only {
            bail!(
                "missing {krate} {version}: install it with `cargo install --locked {krate} --version {version}`"
            );
        }
        eprintln!("deps: building {krate} {version} from crates.io");
        util::run(
            util::cargo()
                .args(["install", "--locked", "--quiet", krate, "--version", version])
                .args(*features),
        )?;
    }
    let mut problems = Vec::new();
    let kubectls: Vec<u32> = keel_testbed::kubectl::installed().iter().map(|k| k.minor).collect();
    for minor in KUBECTL_MINORS.filter(|minor| !kubectls.contains(minor)) {
        problems.push(format!(
            "kubectl 1.{minor} (no kubectl.1.{minor} in {}; it comes with the machine image)",
            keel_testbed::kubectl::dir().display()
        ));
    }
    match Command::new("node").arg("--version").output() {
        Ok(out) if String::from_utf8_lossy(&out.stdout).trim_start_matches('v').starts_with("20.") => {}
        Ok(out) => problems.push(format!(
            "Node.js 20 (found {}; it comes with the machine image)",
            String::from_utf8_lossy(&out.stdout).trim()
        )),
        Err(_) => problems.push("Node.js 20 (no `node` on PATH; it comes with the machine image)".into()),
    }
    for (tool, args) in [("clippy", &["clippy", "--version"]), ("rustfmt", &["fmt", "--version"])] {
        let ok = util::cargo().args(args).output().is_ok_and(|out| out.status.success());
        if !ok {
            problems.push(format!("{tool} (a cargo subcommand of the machine's Rust toolchain)"));
        }
    }
    if !problems.is_empty() {
        bail!("missing prerequisites that Debian does not provide:\n  {}", problems.join("\n  "));
    }
    // The Debian packages the critest images are made of: downloaded, never installed here.
    image_debs(check_only)?;
    // The upstream peers (Kubernetes v1.34, cri-tools, etcd 3.6, kwok), built from the Go module proxy
    // into /var/cache/keel/peers when missing: tests run Keel beside them.
    match (peers, check_only) {
        (Peers::NotNeeded, _) => {}
        (Peers::Needed, true) => crate::peers::check(&|_| true)?,
        (Peers::Needed, false) => crate::peers::ensure(&|_| true)?,
    }
    // The Python client the API tests drive, from PyPI into a virtualenv of the workspace's.
    let python = if check_only { keel_testbed::python::python()? } else { keel_testbed::python::ensure()? };
    // The JavaScript client, from the npm registry at the versions the committed lock file pins.
    let node = if check_only { keel_testbed::node::client()? } else { keel_testbed::node::ensure()? };
    eprintln!(
        "deps: all {} Debian packages,{} cargo-nextest, kubectl 1.27–1.33, Node.js 20, clippy and rustfmt, the Python kubernetes \
         client {} and grpcio {} ({}) and @kubernetes/client-node {} ({}) present",
        PACKAGES.len(),
        if peers == Peers::Needed { " the upstream peers," } else { "" },
        keel_testbed::python::KUBERNETES_CLIENT,
        keel_testbed::python::GRPCIO,
        python.display(),
        keel_testbed::node::CLIENT_NODE,
        node.display()
    );
    Ok(())
}

/// Downloads each of keel-testbed's [`e2e_images::DEB_PACKAGES`] missing from its directory with
/// `apt-get download` (the machine's own apt sources; nothing is installed).
///
/// [`e2e_images::DEB_PACKAGES`]: keel_testbed::e2e_images::DEB_PACKAGES
fn image_debs(check_only: bool) -> Result<()> {
    use keel_testbed::e2e_images::{DEB_PACKAGES, deb, debs_dir};
    let missing: Vec<&str> =
        DEB_PACKAGES.iter().map(|(name, _)| *name).filter(|name| deb(name).is_err()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let dir = debs_dir();
    if check_only || !Path::new("/usr/bin/apt-get").exists() {
        bail!(
            "missing the image packages {} in {}: download them with\n  cd {} && apt-get download {}",
            missing.join(" "),
            dir.display(),
            dir.display(),
            missing.join(" ")
        );
    }
    eprintln!("deps: downloading {} into {}", missing.join(" "), dir.display());
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // apt drops to its _apt user for downloads, which cannot write a root-owned directory; it then
    // downloads as root and says so: the -o keeps that warning out of the log.
    let download = || {
        util::run(
            Command::new("apt-get")
                .current_dir(&dir)
                .args(["-q", "-o", "APT::Sandbox::User=root", "download"])
                .args(&missing),
        )
    };
    if download().is_err() {
        // Package lists older than the mirror name versions it no longer has (404): refresh, retry.
        eprintln!("deps: apt-get download failed; updating the package lists and retrying");
        util::run(Command::new("apt-get").args(["update", "-q"]))?;
        download()?;
    }
    for name in &missing {
        deb(name)?;
    }
    Ok(())
}

fn missing_packages() -> Result<Vec<&'static str>> {
    if !Path::new("/usr/bin/dpkg-query").exists() {
        // Not Debian: say what to get, in Debian's names.
        return Ok(PACKAGES.iter().map(|(name, _)| *name).collect());
    }
    let output = Command::new("dpkg-query")
        .args(["-W", "-f=${Package} ${db:Status-Abbrev}\n"])
        .args(PACKAGES.iter().map(|(name, _)| *name))
        .output()
        .context("run dpkg-query")?;
    // dpkg-query exits 1 when a package is unknown; the installed ones are still listed.
    let installed: Vec<&str> = std::str::from_utf8(&output.stdout)
        .context("dpkg-query output")?
        .lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(_, status)| status.starts_with("ii"))
        .map(|(name, _)| name.split(':').next().unwrap_or(name))
        .collect();
    Ok(PACKAGES.iter().map(|(name, _)| *name).filter(|name| !installed.contains(name)).collect())
}

fn install(packages: &[&str]) -> Result<()> {
    util::run(Command::new("apt-get").args(["update", "-q"]))?;
    util::run(
        Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(packages),
    )
}
