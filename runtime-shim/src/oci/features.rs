//! What each runtime handler supports, as StatusResponse advertises it in `runtime_handlers[]` (the
//! kubelet and critest read `features.recursive_read_only_mounts` there before they ask for a
//! recursive read-only mount).
//!
//! Recursive read-only mounts need mount_setattr(2) (Linux 5.12) and an OCI runtime that knows the
//! `rro` mount option. The runtime's `features` command lists its mount options (runc ≥ 1.1; the
//! CRI's own hint for runc-compatible runtimes); a crun without that command (crun 1.8, Debian
//! bookworm's) is judged by its version, since crun has known `rro` from 1.4. User namespaces are not
//! supported by keel-shim on any handler.
//!
//! The decision is computation on the runtime's output and the kernel release ([`HandlerFeatures::of`]),
//! unit-tested; [`probe`] runs the binary once at startup.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_cri::v1 as api;
use serde::Deserialize;

use crate::config::DEFAULT_HANDLER;

/// How long `<runtime> features` or `<runtime> --version` may take before the runtime is taken to
/// support nothing.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The first kernel with mount_setattr(2).
const MOUNT_SETATTR_KERNEL: (u32, u32) = (5, 12);

/// The first crun with the `rro` mount option.
const CRUN_RRO: (u32, u32) = (1, 4);

/// What a runtime binary said about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeProbe {
    /// The standard output of `<runtime> features` (the OCI features document), when it succeeded.
    pub features: Option<String>,
    /// The standard output of `<runtime> --version`, when it succeeded.
    pub version: Option<String>,
}

/// The features of one runtime handler.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandlerFeatures {
    /// Recursive read-only mounts (the OCI `rro` mount option) work: the kernel has mount_setattr and
    /// the runtime knows the option.
    pub recursive_read_only_mounts: bool,
}

/// The part of the OCI features document read here.
#[derive(Debug, Deserialize)]
struct FeaturesDocument {
    #[serde(default, rename = "mountOptions")]
    mount_options: Vec<String>,
}

/// `major.minor` at the start of `text` (`6.18.44-fc`, `5.12`, `1.8.1`).
fn major_minor(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.trim().split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Whether a kernel of this release (`/proc/sys/kernel/osrelease`) has mount_setattr(2).
pub fn kernel_has_mount_setattr(release: &str) -> bool {
    major_minor(release).is_some_and(|version| version >= MOUNT_SETATTR_KERNEL)
}

/// crun's version from its `--version` text (`crun version 1.8.1` on its first line), `None` for
/// another runtime.
fn crun_version(text: &str) -> Option<(u32, u32)> {
    let first = text.lines().next()?;
    major_minor(first.trim().strip_prefix("crun version ")?)
}

/// Whether the runtime knows the `rro` mount option: its features document lists it, or, without a
/// features document, it is a crun that has had it.
pub fn runtime_knows_rro(probe: &RuntimeProbe) -> bool {
    let listed = probe
        .features
        .as_deref()
        .and_then(|text| serde_json::from_str::<FeaturesDocument>(text).ok())
        .map(|doc| doc.mount_options.iter().any(|option| option == "rro"));
    match listed {
        Some(listed) => listed,
        None => probe.version.as_deref().and_then(crun_version).is_some_and(|version| version >= CRUN_RRO),
    }
}

impl HandlerFeatures {
    /// The features of a handler whose runtime answered `probe`, on a kernel of `kernel_release`.
    pub fn of(kernel_release: &str, probe: &RuntimeProbe) -> HandlerFeatures {
        HandlerFeatures {
            recursive_read_only_mounts: kernel_has_mount_setattr(kernel_release) && runtime_knows_rro(probe),
        }
    }
}

/// StatusResponse.runtime_handlers: the default handler (named "", as containerd and CRI-O list it,
/// with the features of [`DEFAULT_HANDLER`]) first, then every configured handler by name.
pub fn runtime_handlers(handlers: &BTreeMap<String, HandlerFeatures>) -> Vec<api::RuntimeHandler> {
    let entry = |name: &str, features: HandlerFeatures| api::RuntimeHandler {
        name: name.to_owned(),
        features: Some(api::RuntimeHandlerFeatures {
            recursive_read_only_mounts: features.recursive_read_only_mounts,
            user_namespaces: false,
        }),
    };
    let default = handlers.get(DEFAULT_HANDLER).copied().unwrap_or_default();
    std::iter::once(entry("", default))
        .chain(handlers.iter().map(|(name, features)| entry(name, *features)))
        .collect()
}

/// Runs `binary ARG` and gives its standard output when it exits 0 in time.
async fn output_of(binary: &Path, arg: &str) -> Option<String> {
    let mut command = tokio::process::Command::new(binary);
    command.arg(arg).stdin(std::process::Stdio::null()).kill_on_drop(true);
    match tokio::time::timeout(PROBE_TIMEOUT, command.output()).await {
        Ok(Ok(output)) if output.status.success() => {
            Some(String::from_utf8_lossy(&output.stdout).into_owned())
        }
        Ok(Ok(output)) => {
            tracing::debug!(binary = %binary.display(), arg, status = %output.status, "runtime probe failed");
            None
        }
        Ok(Err(e)) => {
            tracing::warn!(binary = %binary.display(), arg, "running the runtime: {e}");
            None
        }
        Err(_) => {
            tracing::warn!(binary = %binary.display(), arg, "the runtime did not answer in {PROBE_TIMEOUT:?}");
            None
        }
    }
}

/// Asks `binary` for its features document and its version.
pub async fn probe(binary: &Path) -> RuntimeProbe {
    RuntimeProbe {
        features: output_of(binary, "features").await,
        version: output_of(binary, "--version").await,
    }
}

/// The running kernel's release (empty when /proc cannot say).
pub fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|text| text.trim().to_owned())
        .unwrap_or_default()
}

/// The features of every configured handler, each runtime probed once.
pub async fn probe_handlers(runtimes: &BTreeMap<String, PathBuf>) -> BTreeMap<String, HandlerFeatures> {
    let release = kernel_release();
    let mut out = BTreeMap::new();
    for (handler, binary) in runtimes {
        let features = HandlerFeatures::of(&release, &probe(binary).await);
        tracing::info!(
            handler,
            recursive_read_only_mounts = features.recursive_read_only_mounts,
            "runtime handler"
        );
        out.insert(handler.clone(), features);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const RUNC_FEATURES: &str = r#"{"ociVersionMin":"1.0.0","mountOptions":["bind","ro","rro","rrw"]}"#;

    fn probe_of(features: Option<&str>, version: Option<&str>) -> RuntimeProbe {
        RuntimeProbe { features: features.map(str::to_owned), version: version.map(str::to_owned) }
    }

    #[test]
    fn mount_setattr_needs_linux_5_12() {
        for (release, want) in [
            ("6.18.44-fc-v1045", true),
            ("5.12.0", true),
            ("5.15.0-91-generic", true),
            ("5.11.22", false),
            ("4.19.0-26-amd64", false),
            ("", false),
            ("garbage", false),
        ] {
            assert_eq!(kernel_has_mount_setattr(release), want, "{release:?}");
        }
    }

    #[test]
    fn rro_comes_from_the_features_document_else_crun_s_version() {
        let runc_1_1 = probe_of(Some(RUNC_FEATURES), Some("runc version 1.1.5+ds1\ncommit: x\n"));
        assert!(runtime_knows_rro(&runc_1_1));
        // A features document without rro wins over the version.
        let without = probe_of(Some(r#"{"mountOptions":["ro"]}"#), Some("crun version 1.14\n"));
        assert!(!runtime_knows_rro(&without));
        // crun 1.8 has no features command: its version decides.
        assert!(runtime_knows_rro(&probe_of(None, Some("crun version 1.8.1\ncommit: f8a0\n"))));
        assert!(!runtime_knows_rro(&probe_of(None, Some("crun version 1.3\n"))));
        // runc 1.0 (no features command) and a runtime that answers nothing.
        assert!(!runtime_knows_rro(&probe_of(None, Some("runc version 1.0.3\n"))));
        assert!(!runtime_knows_rro(&probe_of(None, None)));
        // A features document that is not JSON counts as none.
        assert!(runtime_knows_rro(&probe_of(Some("unknown command"), Some("crun version 1.8.1"))));
    }

    #[test]
    fn handler_features_need_the_kernel_and_the_runtime() {
        let runc = probe_of(Some(RUNC_FEATURES), None);
        assert!(HandlerFeatures::of("6.1.0", &runc).recursive_read_only_mounts);
        assert!(!HandlerFeatures::of("5.10.0", &runc).recursive_read_only_mounts);
        assert!(!HandlerFeatures::of("6.1.0", &RuntimeProbe::default()).recursive_read_only_mounts);
    }

    #[test]
    fn runtime_handlers_list_the_default_first() {
        let rro = HandlerFeatures { recursive_read_only_mounts: true };
        let handlers =
            BTreeMap::from([("runc".to_owned(), rro), ("crun".to_owned(), HandlerFeatures::default())]);
        let listed = runtime_handlers(&handlers);
        let names: Vec<&str> = listed.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["", "crun", "runc"]);
        let features = |i: usize| listed[i].features.unwrap();
        assert!(features(0).recursive_read_only_mounts, "the default is runc's");
        assert!(!features(1).recursive_read_only_mounts);
        assert!(listed.iter().all(|h| !h.features.unwrap().user_namespaces));
        // No runc handler configured: the default supports nothing.
        let only_crun = BTreeMap::from([("crun".to_owned(), rro)]);
        assert!(!runtime_handlers(&only_crun)[0].features.unwrap().recursive_read_only_mounts);
    }

    #[tokio::test]
    async fn probe_runs_the_binary() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("fake-runtime");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\ncase \"$1\" in\n  features) echo '{RUNC_FEATURES}' ;;\n  \
                 --version) echo 'fake version 0.1' ;;\n  *) exit 1 ;;\nesac\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let probed = probe(&fake).await;
        assert!(runtime_knows_rro(&probed), "{probed:?}");
        assert_eq!(probed.version.as_deref(), Some("fake version 0.1\n"));

        let failing = dir.path().join("failing-runtime");
        std::fs::write(&failing, "#!/bin/sh\necho 'unknown command' >&2\nexit 1\n").unwrap();
        std::fs::set_permissions(&failing, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(probe(&failing).await, RuntimeProbe::default());
        assert_eq!(probe(&dir.path().join("missing")).await, RuntimeProbe::default());
    }
}
