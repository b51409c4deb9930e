//! keel-kubelet's KubeletConfiguration beside the upstream kubelet v1.34's (`cargo xtask peers`):
//! the same bad files through both binaries give the same error, and the unknown-field warning
//! names the same fields. Only files the kubelets refuse are run: a kubelet given a good one would
//! start. keel-kubelet's list of upstream's fields is also checked against upstream's source.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, ensure};

/// A config file's body after apiVersion and kind, and the error both kubelets must give.
const REFUSED: &[(&str, &str)] = &[
    ("maxPods: -1\n", "invalid configuration: maxPods (--max-pods) -1 must not be a negative number"),
    (
        "port: 70000\nnodeLeaseDurationSeconds: -5\n",
        "[invalid configuration: nodeLeaseDurationSeconds must be greater than 0, invalid configuration: \
         port (--port) 70000 must be between 1 and 65535, inclusive]",
    ),
    (
        "podLogsDir: /var/log/../pods\n",
        "invalid configuration: pod logs path \"/var/log/../pods\" must be normalized",
    ),
    (
        "healthzPort: 70000\nnodeStatusMaxImages: -2\n",
        "[invalid configuration: healthzPort (--healthz-port) 70000 must be between 1 and 65535, inclusive, \
         invalid configuration: nodeStatusMaxImages (--node-status-max-images) -2 must be -1 or greater]",
    ),
    (
        "bogus: 1\nauthentication: {anonymous: {enabled: true, extra: 2}}\nmaxPods: -1\n",
        "invalid configuration: maxPods (--max-pods) -1 must not be a negative number",
    ),
    // Node allocatable is enforced on kubepods, which only QoS cgroups have.
    (
        "cgroupsPerQOS: false\n",
        "invalid configuration: cgroupsPerQOS (--cgroups-per-qos) must be set to true when \"pods\" contained in \
         enforceNodeAllocatable (--enforce-node-allocatable)",
    ),
    (
        "enforceNodeAllocatable: [pods, everything]\n",
        "invalid configuration: option \"everything\" specified for enforceNodeAllocatable (--enforce-node-allocatable). \
         Valid options are \"pods\", \"system-reserved\", \"system-reserved-compressible\", \"kube-reserved\", \
         \"kube-reserved-compressible\" or \"none\"",
    ),
    (
        "enforceNodeAllocatable: [none, pods]\n",
        "invalid configuration: enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional \
         enforcements when \"none\" is specified",
    ),
];

/// What a kubelet binary printed when it refused `file`: its whole output.
fn refusal(binary: &Path, file: &Path) -> Result<String> {
    let output = Command::new(binary)
        .arg("--config")
        .arg(file)
        .args(["--kubeconfig", "/nonexistent/kubeconfig", "--v=1"])
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    ensure!(!output.status.success(), "{} accepted {}: {text}", binary.display(), file.display());
    // klog quotes the error as a Go string.
    Ok(text.replace("\\\"", "\""))
}

#[test]
fn bad_files_are_refused_as_the_upstream_kubelet_refuses_them() -> Result<()> {
    let upstream = keel_testbed::peers::path("kubelet")?;
    let keel = Path::new(env!("CARGO_BIN_EXE_keel-kubelet"));
    let dir = tempfile::tempdir()?;
    for (index, (body, error)) in REFUSED.iter().enumerate() {
        let file = dir.path().join(format!("{index}.yaml"));
        std::fs::write(
            &file,
            format!("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{body}"),
        )?;
        let wanted = format!("failed to validate kubelet configuration, error: {error}");
        for binary in [upstream.as_path(), keel] {
            let printed = refusal(binary, &file)?;
            ensure!(
                printed.contains(&wanted),
                "{}: wanted {wanted:?}, printed:\n{printed}",
                binary.display()
            );
            if body.contains("bogus") {
                let warning = "strict decoding error: unknown field \"authentication.anonymous.extra\", \
                               unknown field \"bogus\"";
                ensure!(printed.contains(warning), "{}: no {warning:?} in:\n{printed}", binary.display());
            }
        }
    }
    // A file of another version is refused by both before anything is read of it.
    let file = dir.path().join("v1.yaml");
    std::fs::write(&file, "apiVersion: kubelet.config.k8s.io/v1\nkind: KubeletConfiguration\n")?;
    let wanted = format!(
        "failed to load kubelet config file, path: {0}, error: failed to load Kubelet config file {0}, error \
         failed to decode: no kind \"KubeletConfiguration\" is registered for version \"kubelet.config.k8s.io/v1\"",
        file.display()
    );
    for binary in [upstream.as_path(), keel] {
        let printed = refusal(binary, &file)?;
        ensure!(printed.contains(&wanted), "{}: wanted {wanted:?}, printed:\n{printed}", binary.display());
    }
    Ok(())
}

/// keel-kubelet's list of upstream's fields is upstream's: the json names of k8s.io/kubelet's
/// v1beta1 KubeletConfiguration, read from the module `cargo xtask peers` downloaded.
#[test]
fn upstream_fields_are_upstreams() -> Result<()> {
    let (project, _) = keel_testbed::peers::find("kubelet").context("the kubelet peer")?;
    let module = project.version.replacen("v1.", "v0.", 1);
    let types = keel_testbed::peers::cache_dir()
        .join("go/mod/k8s.io")
        .join(format!("kubelet@{module}"))
        .join("config/v1beta1/types.go");
    let source = std::fs::read_to_string(&types)
        .with_context(|| format!("reading {} (cargo xtask peers downloads it)", types.display()))?;
    let body = source
        .split("type KubeletConfiguration struct {")
        .nth(1)
        .and_then(|rest| rest.split("\n}\n").next())
        .context("no KubeletConfiguration struct")?;
    let mut fields: Vec<&str> = body
        .split("json:\"")
        .skip(1)
        .filter_map(|tag| tag.split([',', '"']).next())
        .filter(|name| !name.is_empty())
        .collect();
    let mut ours = keel_kubelet::config::UPSTREAM_FIELDS.to_vec();
    fields.sort_unstable();
    ours.sort_unstable();
    ensure!(fields == ours, "upstream's fields: {fields:?}\nkeel-kubelet's: {ours:?}");
    for honoured in keel_kubelet::config::HONOURED {
        ensure!(ours.contains(honoured), "{honoured} is not upstream's");
    }
    Ok(())
}
