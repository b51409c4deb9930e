//! The command line (`keel-shim --socket PATH --root DIR --cni-conf-dir D --cni-bin-dir D
//! [--runtime NAME=BINARY ...] [--insecure-registry HOST:PORT ...]`) and its validation into a
//! [`Config`]: every mistake is reported before anything is created on disk.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use clap::Parser;

/// The runtime handler used when a RunPodSandbox names none (the empty handler, as kubelet sends
/// for a pod without a RuntimeClass).
pub const DEFAULT_HANDLER: &str = "runc";

/// `sun_path` holds 108 bytes including the terminating NUL.
pub const MAX_SOCKET_PATH: usize = 107;

/// keel-shim's command line, as parsed by clap (not yet validated: see [`Config::from_args`]).
#[derive(Debug, Clone, Parser)]
#[command(
    name = "keel-shim",
    version,
    about = "A CRI runtime: CRI v1 over a unix socket, OCI containers through runc or crun"
)]
pub struct Args {
    /// The unix socket the CRI is served on (the kubelet's --container-runtime-endpoint).
    #[arg(long, value_name = "PATH")]
    pub socket: PathBuf,
    /// Where keel-shim keeps its state (images, sandboxes, containers); created if missing.
    #[arg(long, value_name = "DIR")]
    pub root: PathBuf,
    /// The CNI network configurations (the first *.conflist, *.conf or *.json by name is used).
    #[arg(long, value_name = "DIR")]
    pub cni_conf_dir: PathBuf,
    /// The CNI plugin binaries.
    #[arg(long, value_name = "DIR")]
    pub cni_bin_dir: PathBuf,
    /// A runtime handler and its OCI runtime binary (a path, or a name looked up in PATH); repeatable.
    /// `runc=runc` is added unless a `runc` handler is given.
    #[arg(long = "runtime", value_name = "NAME=BINARY")]
    pub runtimes: Vec<String>,
    /// A registry pulled from over plain HTTP; repeatable.
    #[arg(long = "insecure-registry", value_name = "HOST:PORT")]
    pub insecure_registries: Vec<String>,
    /// A mirror of a registry, tried before it (several for one registry are tried in order, then the
    /// registry itself), as containerd's registry mirrors: `registry.k8s.io=http://127.0.0.1:5000`;
    /// repeatable.
    #[arg(long = "registry-mirror", value_name = "REGISTRY=URL")]
    pub registry_mirrors: Vec<String>,
    /// Where the streaming server (the URLs Exec, Attach and PortForward answer) listens; port 0 picks
    /// a free one (containerd's stream_server_address and stream_server_port).
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:0")]
    pub stream_address: std::net::SocketAddr,
}

/// A command line that cannot be served.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The socket path does not fit a `sockaddr_un`.
    #[error(
        "--socket {path}: {len} bytes is too long for a unix socket path (at most {MAX_SOCKET_PATH}, the size of sun_path)"
    )]
    SocketPathTooLong { path: String, len: usize },
    /// A path argument is empty.
    #[error("--{flag} must not be empty")]
    EmptyPath { flag: &'static str },
    /// `--runtime` is not `NAME=BINARY`.
    #[error("--runtime {arg:?}: expected NAME=BINARY, such as runc=/usr/sbin/runc")]
    RuntimeSyntax { arg: String },
    /// The handler name is not a DNS label (what a RuntimeClass's handler must be).
    #[error(
        "--runtime {arg:?}: the handler name {name:?} must be a DNS label (lower-case letters, digits and '-', at most 63)"
    )]
    RuntimeName { arg: String, name: String },
    /// Two `--runtime` arguments name the same handler.
    #[error("--runtime: the handler {name:?} is given twice")]
    RuntimeDuplicate { name: String },
    /// The OCI runtime binary is not an executable file.
    #[error("runtime handler {name:?}: {reason}")]
    RuntimeBinary { name: String, reason: String },
    /// `--insecure-registry` is not `HOST:PORT`.
    #[error("--insecure-registry {arg:?}: expected HOST:PORT, such as 127.0.0.1:5000")]
    Registry { arg: String },
    /// `--registry-mirror` is not `REGISTRY=http(s)://HOST[:PORT]`.
    #[error(
        "--registry-mirror {arg:?}: expected REGISTRY=URL, such as registry.k8s.io=http://127.0.0.1:5000 \
         (the URL http:// or https:// and a host, no path)"
    )]
    Mirror { arg: String },
}

/// A validated command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The CRI socket.
    pub socket: PathBuf,
    /// The state directory.
    pub root: PathBuf,
    /// The CNI configuration directory.
    pub cni_conf_dir: PathBuf,
    /// The CNI plugin directory.
    pub cni_bin_dir: PathBuf,
    /// Runtime handlers by name: the OCI runtime binary each one executes (an absolute path or a path
    /// as given, checked executable).
    pub runtimes: BTreeMap<String, PathBuf>,
    /// Registries pulled from over plain HTTP (`HOST:PORT`).
    pub insecure_registries: Vec<String>,
    /// Registry mirrors, in the order given.
    pub registry_mirrors: Vec<crate::image::RegistryMirror>,
    /// The streaming server's address.
    pub stream_address: std::net::SocketAddr,
}

impl Config {
    /// Validates `args`; `path_env` is the `PATH` bare binary names are looked up in.
    pub fn from_args(args: Args, path_env: Option<&OsStr>) -> Result<Config, ConfigError> {
        for (flag, path) in [
            ("socket", &args.socket),
            ("root", &args.root),
            ("cni-conf-dir", &args.cni_conf_dir),
            ("cni-bin-dir", &args.cni_bin_dir),
        ] {
            if path.as_os_str().is_empty() {
                return Err(ConfigError::EmptyPath { flag });
            }
        }
        let len = args.socket.as_os_str().as_bytes().len();
        if len > MAX_SOCKET_PATH {
            return Err(ConfigError::SocketPathTooLong { path: args.socket.display().to_string(), len });
        }
        let mut given: Vec<(String, String)> = Vec::new();
        for arg in &args.runtimes {
            let Some((name, binary)) = arg.split_once('=') else {
                return Err(ConfigError::RuntimeSyntax { arg: arg.clone() });
            };
            if binary.is_empty() {
                return Err(ConfigError::RuntimeSyntax { arg: arg.clone() });
            }
            if !is_dns_label(name) {
                return Err(ConfigError::RuntimeName { arg: arg.clone(), name: name.to_owned() });
            }
            if given.iter().any(|(n, _)| n == name) {
                return Err(ConfigError::RuntimeDuplicate { name: name.to_owned() });
            }
            given.push((name.to_owned(), binary.to_owned()));
        }
        if !given.iter().any(|(n, _)| n == DEFAULT_HANDLER) {
            given.push((DEFAULT_HANDLER.to_owned(), "runc".to_owned()));
        }
        let mut runtimes = BTreeMap::new();
        for (name, binary) in given {
            let path = resolve_binary(&binary, path_env)
                .map_err(|reason| ConfigError::RuntimeBinary { name: name.clone(), reason })?;
            runtimes.insert(name, path);
        }
        for arg in &args.insecure_registries {
            if !is_host_port(arg) {
                return Err(ConfigError::Registry { arg: arg.clone() });
            }
        }
        let registry_mirrors = args
            .registry_mirrors
            .iter()
            .map(|arg| parse_mirror(arg).ok_or_else(|| ConfigError::Mirror { arg: arg.clone() }))
            .collect::<Result<_, _>>()?;
        Ok(Config {
            socket: args.socket,
            root: args.root,
            cni_conf_dir: args.cni_conf_dir,
            cni_bin_dir: args.cni_bin_dir,
            runtimes,
            insecure_registries: args.insecure_registries,
            registry_mirrors,
            stream_address: args.stream_address,
        })
    }
}

/// RFC 1123 label: what Kubernetes accepts as a RuntimeClass handler.
fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// `HOST:PORT` with a non-empty host (a name, an IPv4 address or a bracketed IPv6 address) and a
/// port 1..=65535.
/// `REGISTRY=http(s)://HOST[:PORT][/]`: the registry as image references name it, and the mirror.
fn parse_mirror(arg: &str) -> Option<crate::image::RegistryMirror> {
    let (registry, url) = arg.split_once('=')?;
    let (plain_http, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (true, rest)
    } else {
        (false, url.strip_prefix("https://")?)
    };
    let host = rest.strip_suffix('/').unwrap_or(rest);
    let valid = |name: &str| is_host_port(name) || is_host(name);
    (valid(registry) && valid(host)).then(|| crate::image::RegistryMirror {
        registry: registry.to_owned(),
        host: host.to_owned(),
        plain_http,
    })
}

/// A host name or IPv4 address alone (a registry such as `registry.k8s.io`).
fn is_host(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(['.', '-'])
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
}

fn is_host_port(arg: &str) -> bool {
    let Some((host, port)) = arg.rsplit_once(':') else {
        return false;
    };
    let port_ok = port.parse::<u16>().is_ok_and(|p| p != 0);
    let host_ok = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        inner.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && !host.contains(['/', '[', ']', ':'])
            && host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'_')
    };
    port_ok && host_ok
}

/// The executable `binary` names: a path when it holds a `/`, else the first match in `path_env`.
fn resolve_binary(binary: &str, path_env: Option<&OsStr>) -> Result<PathBuf, String> {
    if binary.contains('/') {
        let path = Path::new(binary);
        return check_executable(path).map(|()| path.to_owned());
    }
    let dirs = path_env.map(std::env::split_paths).into_iter().flatten();
    for dir in dirs {
        let candidate = dir.join(binary);
        if check_executable(&candidate).is_ok() {
            return Ok(candidate);
        }
    }
    Err(format!("{binary:?} is not an executable file in PATH"))
}

fn check_executable(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a file", path.display()));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(format!("{} is not executable", path.display()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(runtimes: &[&str], registries: &[&str]) -> Args {
        Args {
            socket: PathBuf::from("/run/keel-shim.sock"),
            root: PathBuf::from("/var/lib/keel-shim"),
            cni_conf_dir: PathBuf::from("/etc/cni/net.d"),
            cni_bin_dir: PathBuf::from("/opt/cni/bin"),
            runtimes: runtimes.iter().map(|s| (*s).to_owned()).collect(),
            insecure_registries: registries.iter().map(|s| (*s).to_owned()).collect(),
            registry_mirrors: Vec::new(),
            stream_address: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }

    /// A PATH holding a fake executable `runc` and `crun`, and a non-executable `plain`.
    fn fake_path() -> (tempfile::TempDir, std::ffi::OsString) {
        let dir = tempfile::tempdir().unwrap();
        for (name, mode) in [("runc", 0o755), ("crun", 0o755), ("plain", 0o644)] {
            let path = dir.path().join(name);
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let path_env = dir.path().as_os_str().to_owned();
        (dir, path_env)
    }

    #[test]
    fn runc_is_the_default_handler() {
        let (dir, path_env) = fake_path();
        let config = Config::from_args(args(&[], &[]), Some(&path_env)).unwrap();
        assert_eq!(config.runtimes.len(), 1);
        assert_eq!(config.runtimes[DEFAULT_HANDLER], dir.path().join("runc"));
    }

    #[test]
    fn runtimes_by_name_and_path() {
        let (dir, path_env) = fake_path();
        let crun = dir.path().join("crun");
        let arg = format!("crun={}", crun.display());
        let config = Config::from_args(args(&[&arg, "runc=crun"], &[]), Some(&path_env)).unwrap();
        assert_eq!(config.runtimes["crun"], crun);
        // A given `runc` handler replaces the default.
        assert_eq!(config.runtimes["runc"], crun);
    }

    #[test]
    fn bad_runtime_arguments() {
        let (_dir, path_env) = fake_path();
        let err = |runtimes: &[&str]| Config::from_args(args(runtimes, &[]), Some(&path_env)).unwrap_err();
        assert!(matches!(err(&["runc"]), ConfigError::RuntimeSyntax { .. }));
        assert!(matches!(err(&["runc="]), ConfigError::RuntimeSyntax { .. }));
        assert!(matches!(err(&["=runc"]), ConfigError::RuntimeName { .. }));
        assert!(matches!(err(&["Runc=runc"]), ConfigError::RuntimeName { .. }));
        assert!(matches!(err(&["a=runc", "a=crun"]), ConfigError::RuntimeDuplicate { .. }));
        assert!(matches!(err(&["x=missing"]), ConfigError::RuntimeBinary { .. }));
        assert!(matches!(err(&["x=/nonexistent/runc"]), ConfigError::RuntimeBinary { .. }));
        assert!(matches!(err(&["x=plain"]), ConfigError::RuntimeBinary { .. }));
        let message = err(&["kata=/nonexistent/kata"]).to_string();
        assert!(message.contains("kata") && message.contains("/nonexistent/kata"), "{message}");
        // No runc in PATH and none given: the default handler has no binary.
        let empty = tempfile::tempdir().unwrap();
        let e = Config::from_args(args(&[], &[]), Some(empty.path().as_os_str())).unwrap_err();
        assert!(matches!(e, ConfigError::RuntimeBinary { ref name, .. } if name == "runc"), "{e}");
    }

    #[test]
    fn socket_path_limit() {
        let (_dir, path_env) = fake_path();
        let mut a = args(&[], &[]);
        a.socket = PathBuf::from(format!("/{}", "s".repeat(MAX_SOCKET_PATH - 1)));
        assert!(Config::from_args(a.clone(), Some(&path_env)).is_ok());
        a.socket = PathBuf::from(format!("/{}", "s".repeat(MAX_SOCKET_PATH)));
        let e = Config::from_args(a, Some(&path_env)).unwrap_err();
        assert_eq!(e, ConfigError::SocketPathTooLong { path: format!("/{}", "s".repeat(107)), len: 108 });
        assert!(e.to_string().contains("sun_path"));
    }

    #[test]
    fn insecure_registries() {
        let (_dir, path_env) = fake_path();
        for good in ["127.0.0.1:5000", "registry.local:443", "[::1]:5000"] {
            assert!(Config::from_args(args(&[], &[good]), Some(&path_env)).is_ok(), "{good}");
        }
        for bad in ["127.0.0.1", ":5000", "host:0", "host:99999", "http://host:5000", "::1:5000", "h/x:1"] {
            let e = Config::from_args(args(&[], &[bad]), Some(&path_env)).unwrap_err();
            assert!(matches!(e, ConfigError::Registry { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn clap_parses_the_interface() {
        let a = Args::try_parse_from([
            "keel-shim",
            "--socket",
            "/s.sock",
            "--root",
            "/r",
            "--cni-conf-dir",
            "/c",
            "--cni-bin-dir",
            "/b",
            "--runtime",
            "crun=/usr/bin/crun",
            "--runtime",
            "runc=runc",
            "--insecure-registry",
            "127.0.0.1:5000",
        ])
        .unwrap();
        assert_eq!(a.runtimes, ["crun=/usr/bin/crun", "runc=runc"]);
        assert_eq!(a.insecure_registries, ["127.0.0.1:5000"]);
        assert!(Args::try_parse_from(["keel-shim", "--socket", "/s.sock"]).is_err());
    }

    #[test]
    fn registry_mirrors() {
        let (_dir, path_env) = fake_path();
        let mut a = args(&[], &[]);
        a.registry_mirrors = vec![
            "registry.k8s.io=http://127.0.0.1:5000".into(),
            "registry.k8s.io=https://mirror.example/".into(),
            "127.0.0.1:6000=http://[::1]:5001".into(),
        ];
        let config = Config::from_args(a, Some(&path_env)).unwrap();
        let got: Vec<(&str, &str, bool)> = config
            .registry_mirrors
            .iter()
            .map(|m| (m.registry.as_str(), m.host.as_str(), m.plain_http))
            .collect();
        assert_eq!(
            got,
            [
                ("registry.k8s.io", "127.0.0.1:5000", true),
                ("registry.k8s.io", "mirror.example", false),
                ("127.0.0.1:6000", "[::1]:5001", true)
            ]
        );
        for bad in [
            "registry.k8s.io",
            "registry.k8s.io=127.0.0.1:5000",
            "registry.k8s.io=ftp://127.0.0.1:5000",
            "registry.k8s.io=http://127.0.0.1:5000/path",
            "=http://127.0.0.1:5000",
            "http://registry.k8s.io=http://127.0.0.1:5000",
            "registry.k8s.io=http://",
        ] {
            let mut a = args(&[], &[]);
            a.registry_mirrors = vec![bad.into()];
            let err = Config::from_args(a, Some(&path_env)).unwrap_err();
            assert!(err.to_string().contains("--registry-mirror"), "{bad}: {err}");
        }
    }
}
