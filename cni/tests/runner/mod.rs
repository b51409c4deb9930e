//! Running CNI plugin binaries as a runtime does — inside a test node's namespace, several at once —
//! and reading IPAM allocations in host-local's on-disk layout (the peers tests' helpers).

use std::collections::BTreeMap;
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use keel_testbed::NetNsFd;
use serde_json::Value;

/// The binary under test.
pub const KEEL_CNI: &str = env!("CARGO_BIN_EXE_keel-cni");
/// Where containernetworking-plugins installs the reference plugins.
pub const REFERENCE_DIR: &str = "/usr/lib/cni";

/// The reference bridge plugin.
pub fn reference_bridge() -> PathBuf {
    Path::new(REFERENCE_DIR).join("bridge")
}

/// One invocation of a plugin: the CNI environment and the configuration on stdin.
#[derive(Debug, Clone)]
pub struct Invocation<'a> {
    pub command: &'a str,
    pub container_id: &'a str,
    pub netns: Option<&'a Path>,
    pub ifname: &'a str,
    pub conf: &'a Value,
}

/// What a plugin answered: its exit code and stdout as JSON (`Null` when empty).
#[derive(Debug, Clone)]
pub struct Answer {
    pub code: Option<i32>,
    pub stdout: Value,
    pub stderr: String,
}

impl Answer {
    /// The result of a successful command; panics with the plugin's error otherwise.
    pub fn ok(self, what: &str) -> Value {
        assert_eq!(self.code, Some(0), "{what} failed: {} {}", self.stdout, self.stderr);
        self.stdout
    }
}

/// The command for `plugin`, entering the node's network namespace only, with the CNI variables set
/// (CNI_PATH: the reference plugins' directory, so a delegated `host-local` is found).
pub fn plugin_command(node: &NetNsFd, plugin: &Path, call: &Invocation<'_>) -> Command {
    let mut command = node.command(plugin);
    command
        .env_clear()
        .env("CNI_COMMAND", call.command)
        .env("CNI_PATH", REFERENCE_DIR)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Unset when empty, as libcni leaves them for STATUS and GC.
    if !call.container_id.is_empty() {
        command.env("CNI_CONTAINERID", call.container_id);
    }
    if !call.ifname.is_empty() {
        command.env("CNI_IFNAME", call.ifname);
    }
    if let Some(netns) = call.netns {
        command.env("CNI_NETNS", netns);
    }
    command
}

/// Starts the plugin; its stdin is still open (write the configuration with [`finish`]).
pub fn spawn(node: &NetNsFd, plugin: &Path, call: &Invocation<'_>) -> Child {
    plugin_command(node, plugin, call)
        .spawn()
        .unwrap_or_else(|err| panic!("spawn {}: {err}", plugin.display()))
}

/// Writes the configuration to a spawned plugin's stdin (unless already written and closed), closes it
/// and waits for the answer.
pub fn finish(mut child: Child, conf: &Value) -> Answer {
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(conf.to_string().as_bytes()).expect("write the configuration");
    }
    let output = child.wait_with_output().expect("wait for the plugin");
    let stdout = if output.stdout.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
            panic!("plugin stdout is not JSON ({err}): {}", String::from_utf8_lossy(&output.stdout))
        })
    };
    Answer {
        code: output.status.code(),
        stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs `plugin` once inside the node's namespace.
pub fn run(node: &NetNsFd, plugin: &Path, call: &Invocation<'_>) -> Answer {
    finish(spawn(node, plugin, call), call.conf)
}

/// The allocations of `network` under `data_dir` in host-local's layout: one file per address, named
/// by the address, holding the container ID (and, since host-local 0.8, the interface name on a
/// second line). Other files (`lock`, `last_reserved_ip.N`) are not allocations.
pub fn allocations(data_dir: &Path, network: &str) -> BTreeMap<IpAddr, String> {
    let dir = data_dir.join(network);
    let Ok(entries) = std::fs::read_dir(&dir) else { return BTreeMap::new() };
    entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let address: IpAddr = entry.file_name().to_str()?.parse().ok()?;
            let content = std::fs::read_to_string(entry.path()).ok()?;
            let owner = content.lines().next().unwrap_or_default().trim().to_owned();
            Some((address, owner))
        })
        .collect()
}
