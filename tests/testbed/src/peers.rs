//! The upstream components Keel is measured against and tested with, as `cargo xtask peers` builds them:
//! the pins (one version per Go project, the packages and the version stamps) and where each binary
//! lives. The Go wrapper modules that pin their dependencies are `xtask/peers/<project>/`; the binaries,
//! the Go module cache and the build cache live outside the clone under [`cache_dir`], so a second run
//! (and CI on the same machine) reuses them.

use std::path::PathBuf;

use anyhow::{Result, bail};

/// Overrides [`DEFAULT_CACHE`].
pub const CACHE_ENV: &str = "KEEL_PEERS_DIR";
/// Where the peers are built and kept.
pub const DEFAULT_CACHE: &str = "/var/cache/keel/peers";

/// One Go project and what is built from it.
#[derive(Debug)]
pub struct Project {
    /// The wrapper module's directory under xtask/peers, and the prefix of its binaries' directory.
    pub name: &'static str,
    /// The module the wrapper requires, at [`Project::version`].
    pub module: &'static str,
    pub version: &'static str,
    pub binaries: &'static [Binary],
    /// `-X` stamps: (variable, value); `{version}` in a value is the project's version.
    pub stamps: &'static [(&'static str, &'static str)],
}

/// A binary of a project.
#[derive(Debug)]
pub struct Binary {
    pub name: &'static str,
    pub package: &'static str,
    /// Built with `go test -c` (its main lives in a _test file: critest, e2e.test).
    pub test: bool,
}

const fn cmd(name: &'static str, package: &'static str) -> Binary {
    Binary { name, package, test: false }
}

const fn test(name: &'static str, package: &'static str) -> Binary {
    Binary { name, package, test: true }
}

/// Kubernetes v1.34: the API version keel-apiserver serves. Its staging modules are replaced with
/// their v0.34 releases of the same patch in the wrapper's go.mod.
pub const KUBERNETES: Project = Project {
    name: "kubernetes",
    module: "k8s.io/kubernetes",
    version: "v1.34.12",
    binaries: &[
        cmd("kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver"),
        cmd("kube-controller-manager", "k8s.io/kubernetes/cmd/kube-controller-manager"),
        cmd("kube-scheduler", "k8s.io/kubernetes/cmd/kube-scheduler"),
        cmd("kube-proxy", "k8s.io/kubernetes/cmd/kube-proxy"),
        cmd("kubelet", "k8s.io/kubernetes/cmd/kubelet"),
        // The e2e images' Swiss-army binary (netexec, serve-hostname, pause, ...).
        cmd("agnhost", "k8s.io/kubernetes/test/images/agnhost"),
        test("e2e.test", "k8s.io/kubernetes/test/e2e"),
    ],
    stamps: &[
        ("k8s.io/component-base/version.gitVersion", "{version}"),
        ("k8s.io/component-base/version.gitMajor", "1"),
        ("k8s.io/component-base/version.gitMinor", "34"),
        ("k8s.io/component-base/version.gitTreeState", "clean"),
        ("k8s.io/client-go/pkg/version.gitVersion", "{version}"),
        ("k8s.io/client-go/pkg/version.gitMajor", "1"),
        ("k8s.io/client-go/pkg/version.gitMinor", "34"),
        ("k8s.io/client-go/pkg/version.gitTreeState", "clean"),
    ],
};

/// cri-tools at the Kubernetes minor: critest (the CRI validation suite) and crictl.
pub const CRI_TOOLS: Project = Project {
    name: "cri-tools",
    module: "sigs.k8s.io/cri-tools",
    version: "v1.34.0",
    binaries: &[
        test("critest", "sigs.k8s.io/cri-tools/cmd/critest"),
        cmd("crictl", "sigs.k8s.io/cri-tools/cmd/crictl"),
    ],
    stamps: &[("sigs.k8s.io/cri-tools/pkg/version.Version", "{version}")],
};

/// etcd from the release line Kubernetes 1.34 ships with (Debian's 3.4.23 stays beside it).
pub const ETCD: Project = Project {
    name: "etcd",
    module: "go.etcd.io/etcd/server/v3",
    version: "v3.6.16",
    binaries: &[cmd("etcd", "go.etcd.io/etcd/server/v3"), cmd("etcdctl", "go.etcd.io/etcd/etcdctl/v3")],
    // The version is a constant of go.etcd.io/etcd/api/v3/version; GitSHA (a commit) stays unset.
    stamps: &[],
};

/// kwok, the node simulator for scale runs.
pub const KWOK: Project = Project {
    name: "kwok",
    module: "sigs.k8s.io/kwok",
    version: "v0.8.0",
    binaries: &[cmd("kwok", "sigs.k8s.io/kwok/cmd/kwok")],
    stamps: &[("sigs.k8s.io/kwok/pkg/consts.Version", "{version}")],
};

pub const PROJECTS: &[&Project] = &[&KUBERNETES, &CRI_TOOLS, &ETCD, &KWOK];

/// The cache: `$KEEL_PEERS_DIR`, else [`DEFAULT_CACHE`].
pub fn cache_dir() -> PathBuf {
    std::env::var_os(CACHE_ENV).map_or_else(|| PathBuf::from(DEFAULT_CACHE), PathBuf::from)
}

impl Project {
    /// Where this project's binaries are: `<cache>/bin/<name>-<version>`.
    pub fn bin_dir(&self) -> PathBuf {
        cache_dir().join("bin").join(format!("{}-{}", self.name, self.version))
    }

    /// The `-ldflags` value: stripped, and every stamp set.
    pub fn ldflags(&self) -> String {
        let mut flags = String::from("-s -w");
        for (var, value) in self.stamps {
            flags.push_str(&format!(" -X {var}={}", value.replace("{version}", self.version)));
        }
        flags
    }
}

/// The project and binary named `name` (`kube-apiserver`, `critest`, `etcd`, ...).
pub fn find(name: &str) -> Option<(&'static Project, &'static Binary)> {
    PROJECTS
        .iter()
        .find_map(|project| project.binaries.iter().find(|b| b.name == name).map(|b| (*project, b)))
}

/// The path of a built peer binary; fails naming the command that builds it when it is missing.
pub fn path(name: &str) -> Result<PathBuf> {
    let Some((project, _)) = find(name) else { bail!("{name} is not one of the upstream peers") };
    let path = project.bin_dir().join(name);
    if !path.is_file() {
        bail!(
            "upstream peer {name} {} is not built (no {}): run `cargo xtask peers`",
            project.version,
            path.display()
        );
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_binary_has_one_project() {
        let mut names: Vec<&str> = PROJECTS.iter().flat_map(|p| p.binaries.iter().map(|b| b.name)).collect();
        let all = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all, "a binary name is used twice");
        assert_eq!(find("critest").map(|(p, b)| (p.name, b.test)), Some(("cri-tools", true)));
        assert!(find("kubectl").is_none());
    }

    #[test]
    fn ldflags_stamp_the_version() {
        assert!(KUBERNETES.ldflags().contains("-X k8s.io/component-base/version.gitVersion=v1.34.12"));
        assert_eq!(ETCD.ldflags(), "-s -w", "etcd's version is a constant: nothing to stamp");
    }
}
