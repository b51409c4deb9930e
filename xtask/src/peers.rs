//! `cargo xtask peers`: builds the upstream reference components (keel_testbed::peers pins them) from
//! the Go module proxy into a cache outside the clone, each binary only when it is missing or its pins
//! changed.
//!
//! Each project is a wrapper module under xtask/peers/<project> (go.mod and go.sum committed, nothing
//! else of theirs). GOMODCACHE, GOCACHE and the binaries all live under the cache directory, so a second
//! run takes seconds. Binaries are built with CGO off (no C toolchain needed, as upstream's release
//! builds of these components), `-trimpath`, and their real version stamped with `-X`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use keel_testbed::peers::{self, Binary, PROJECTS, Project};

use crate::util;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only these binaries (e.g. `kube-apiserver critest`); default: all of them.
    pub only: Vec<String>,
    /// Only report what is built and what is missing.
    #[arg(long)]
    pub check: bool,
}

pub fn run(args: &Args) -> Result<()> {
    for name in &args.only {
        if peers::find(name).is_none() {
            bail!("{name} is not one of the upstream peers");
        }
    }
    let wanted = |binary: &Binary| args.only.is_empty() || args.only.iter().any(|n| n == binary.name);
    if args.check {
        check(&wanted)?;
        eprintln!("peers: all built under {}", peers::cache_dir().display());
        return Ok(());
    }
    ensure(&wanted)?;
    for project in PROJECTS {
        for binary in project.binaries.iter().filter(|b| wanted(b)) {
            println!("{}", project.bin_dir().join(binary.name).display());
        }
    }
    eprintln!(
        "peers: cache {} holds {}",
        peers::cache_dir().display(),
        human_size(dir_size(&peers::cache_dir()))
    );
    Ok(())
}

/// Builds every wanted binary that is missing or stale; fast (a few stats) when all are current.
pub fn ensure(wanted: &dyn Fn(&Binary) -> bool) -> Result<()> {
    let go = go_version()?;
    for project in PROJECTS {
        let stamp = stamp(project, &go)?;
        let dir = project.bin_dir();
        for binary in project.binaries.iter().filter(|b| wanted(b)) {
            let path = dir.join(binary.name);
            let stamp_path = dir.join(format!(".{}.stamp", binary.name));
            if path.is_file() && fs::read_to_string(&stamp_path).is_ok_and(|s| s == stamp) {
                continue;
            }
            fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
            eprintln!("peers: building {} {} ({})", binary.name, project.version, binary.package);
            let begun = Instant::now();
            build(project, binary, &path)?;
            fs::write(&stamp_path, &stamp).with_context(|| format!("write {}", stamp_path.display()))?;
            eprintln!("peers: built {} in {:.0?}", path.display(), begun.elapsed());
        }
    }
    Ok(())
}

/// Fails naming the wanted binaries that are not built.
pub fn check(wanted: &dyn Fn(&Binary) -> bool) -> Result<()> {
    let missing: Vec<&str> = PROJECTS
        .iter()
        .flat_map(|p| p.binaries.iter().filter(|b| wanted(b)).map(move |b| (p, b)))
        .filter(|(p, b)| !p.bin_dir().join(b.name).is_file())
        .map(|(_, b)| b.name)
        .collect();
    if !missing.is_empty() {
        bail!("upstream peers not built: {}; run `cargo xtask peers`", missing.join(", "));
    }
    Ok(())
}

/// The wrapper module of a project.
fn module_dir(project: &Project) -> PathBuf {
    util::workspace_root().join("xtask/peers").join(project.name)
}

/// What a binary was built from: the Go version, the flags and the wrapper's go.mod and go.sum. A
/// change to any of them rebuilds it.
fn stamp(project: &Project, go: &str) -> Result<String> {
    let dir = module_dir(project);
    let read = |file: &str| {
        let path = dir.join(file);
        fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))
    };
    Ok(format!("{go}\n{}\n{}\n{}", project.ldflags(), read("go.mod")?, read("go.sum")?))
}

/// The machine's Go: `go` on PATH, else where the machine image installs it (a shell that never read
/// the profile has no /usr/local/go/bin on its PATH).
fn go_binary() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("go").is_file()));
    if on_path { PathBuf::from("go") } else { PathBuf::from("/usr/local/go/bin/go") }
}

/// `go` with the cache's module and build caches, the machine's own toolchain, and CGO off.
fn go(project: &Project) -> Command {
    let cache = peers::cache_dir().join("go");
    let mut command = Command::new(go_binary());
    command
        .current_dir(module_dir(project))
        .env("GOMODCACHE", cache.join("mod"))
        .env("GOCACHE", cache.join("cache"))
        .env("GOPATH", cache.join("path"))
        // The machine's Go; a toolchain line in a dependency's go.mod must not fetch another one.
        .env("GOTOOLCHAIN", "local")
        // The module cache's files writable, so it can be removed like any directory.
        .env("GOFLAGS", "-modcacherw")
        .env("CGO_ENABLED", "0");
    command
}

fn build(project: &Project, binary: &Binary, out: &Path) -> Result<()> {
    let mut command = go(project);
    if binary.test {
        command.args(["test", "-c"]);
    } else {
        command.arg("build");
    }
    command.args(["-trimpath", "-ldflags", &project.ldflags(), "-o"]).arg(out).arg(binary.package);
    util::run(&mut command)
}

fn go_version() -> Result<String> {
    let out =
        Command::new(go_binary()).args(["env", "GOVERSION"]).env("GOTOOLCHAIN", "local").output().context(
            "run `go env GOVERSION`: the upstream peers are built with Go (1.26 on the machine image)",
        )?;
    if !out.status.success() {
        bail!("`go env GOVERSION` failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => dir_size(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

fn human_size(bytes: u64) -> String {
    #[expect(clippy::cast_precision_loss, reason = "a size for people to read")]
    let gib = bytes as f64 / (1u64 << 30) as f64;
    format!("{gib:.1} GiB")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Rust pins and the wrapper modules name the same versions: a go.mod bumped alone would build
    /// one version and stamp another.
    #[test]
    fn wrapper_modules_require_the_pinned_versions() {
        for project in PROJECTS {
            let go_mod = fs::read_to_string(module_dir(project).join("go.mod")).unwrap();
            let required = format!("{} {}", project.module, project.version);
            assert!(
                go_mod.lines().any(|l| l.trim().trim_start_matches("require ").trim() == required),
                "xtask/peers/{}/go.mod does not require {required}",
                project.name
            );
            assert!(fs::metadata(module_dir(project).join("go.sum")).is_ok_and(|m| m.len() > 0));
        }
        // Every staging module replaced with its release of the same patch.
        let go_mod = fs::read_to_string(module_dir(&peers::KUBERNETES).join("go.mod")).unwrap();
        let staging = peers::KUBERNETES.version.replacen("v1.", "v0.", 1);
        let replaces: Vec<&str> = go_mod.lines().filter(|l| l.contains(" => ")).collect();
        assert!(replaces.len() > 25, "{replaces:?}");
        for line in replaces {
            let (from, to) = line.trim().split_once(" => ").unwrap();
            assert_eq!(to, format!("{from} {staging}"), "{line}");
        }
    }
}
