//! xtask builds on a machine that has only the toolchains: `cargo xtask deps` installs protoc and the
//! rest, so nothing `cargo xtask` itself compiles may need them. The set of packages is what cargo
//! resolves for xtask alone (`cargo tree -p xtask`, which resolves features for that selection as `cargo
//! run -p xtask` does); what each one needs at build time is read from `cargo metadata`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Build dependencies that mean "this build script needs a system package": protoc (the protobuf
/// generators), a C library found through pkg-config/vcpkg/system-deps, or a C toolchain beyond cc
/// (cmake, bindgen's libclang).
const NEEDS_SYSTEM: &[&str] = &[
    "prost-build",
    "tonic-build",
    "tonic-prost-build",
    "protobuf-codegen",
    "protobuf-parse",
    "pkg-config",
    "vcpkg",
    "system-deps",
    "cmake",
    "bindgen",
];

/// Packages allowed one of [`NEEDS_SYSTEM`] because their build script uses it only under a feature,
/// with that feature: the test fails if the feature is on.
const ONLY_UNDER_FEATURE: &[(&str, &str, &str)] = &[("fuser", "pkg-config", "libfuse")];

/// Packages with a `links` key that build no system library: (name, why).
const LINKS_WITHOUT_SYSTEM_LIBRARY: &[(&str, &str)] = &[
    ("ring", "its C and assembly are vendored in the crate and built with cc"),
    ("k8s-openapi", "the key only keeps two versions out of one build"),
];

fn cargo() -> Command {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    command
}

fn stdout(command: &mut Command) -> String {
    let out = command.output().expect("run cargo");
    assert!(out.status.success(), "{command:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("utf-8")
}

/// (name, version) of every package `cargo run -p ROOT` compiles, build dependencies included.
fn packages_of(root: &str) -> BTreeSet<(String, String)> {
    let tree = stdout(cargo().args([
        "tree",
        "--locked",
        "-p",
        root,
        "-e",
        "normal,build",
        "--prefix",
        "none",
        "--format",
        "{p}",
    ]));
    tree.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?;
            let version = words.next()?.strip_prefix('v')?;
            Some((name.to_owned(), version.to_owned()))
        })
        .collect()
}

/// What the packages `cargo run -p ROOT` compiles need of the system at build time, one line each.
fn system_needs(root: &str) -> Vec<String> {
    let packages = packages_of(root);
    assert!(packages.iter().any(|(name, _)| name == root), "cargo tree -p {root} listed {packages:?}");
    let metadata: Value =
        serde_json::from_str(&stdout(cargo().args(["metadata", "--locked", "--format-version", "1"])))
            .expect("cargo metadata is JSON");
    let names: BTreeSet<&str> = packages.iter().map(|(name, _)| name.as_str()).collect();
    // Features as resolved for the workspace: a superset of what xtask alone turns on.
    let features: BTreeMap<&str, Vec<&str>> = metadata["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| {
            let id = node["id"].as_str().unwrap();
            (id, node["features"].as_array().unwrap().iter().filter_map(Value::as_str).collect())
        })
        .collect();

    let mut problems = Vec::new();
    for package in metadata["packages"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap();
        let version = package["version"].as_str().unwrap();
        if !packages.contains(&(name.to_owned(), version.to_owned())) {
            continue;
        }
        let id = package["id"].as_str().unwrap();
        let has_build_script = package["targets"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "custom-build"));
        if has_build_script {
            for dep in package["dependencies"].as_array().unwrap() {
                let dep_name = dep["name"].as_str().unwrap();
                if dep["kind"] != "build" || !NEEDS_SYSTEM.contains(&dep_name) || !names.contains(dep_name) {
                    continue;
                }
                match ONLY_UNDER_FEATURE.iter().find(|(p, d, _)| *p == name && *d == dep_name) {
                    Some((_, _, feature)) if !features.get(id).is_some_and(|f| f.contains(feature)) => {}
                    _ => problems.push(format!("{name} {version}: its build script uses {dep_name}")),
                }
            }
        }
        if let Some(links) = package["links"].as_str()
            && !LINKS_WITHOUT_SYSTEM_LIBRARY.iter().any(|(p, _)| *p == name)
        {
            problems.push(format!("{name} {version}: links to {links}"));
        }
    }
    problems
}

#[test]
fn xtask_builds_without_system_packages() {
    let problems = system_needs("xtask");
    assert!(
        problems.is_empty(),
        "xtask must build on a machine with only the toolchains (`cargo xtask deps` installs the rest), \
         but these need a system package at build time:\n  {}",
        problems.join("\n  ")
    );
}

/// The check can fail: keel-shim's CRI server is generated from protobuf by k8s-cri's build script.
#[test]
fn the_check_finds_protoc_under_keel_shim() {
    let problems = system_needs("keel-shim");
    assert!(problems.iter().any(|p| p.starts_with("k8s-cri ")), "keel-shim's tree needs only {problems:?}");
}
