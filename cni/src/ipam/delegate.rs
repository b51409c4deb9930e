//! A delegated IPAM plugin: `ipam.type` names a plugin (host-local, whereabouts, dhcp...) that is
//! executed from `CNI_PATH` as the reference bridge plugin executes it — the same `CNI_*`
//! environment with `CNI_COMMAND` set per call and the whole network configuration on stdin — and
//! whose result or error is relayed.

use std::io::{ErrorKind, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::plugin::Ipam;
use crate::skel::CmdArgs;
use crate::spec::error::{self, Error};
use crate::spec::{Attachment, CniResult, NetConf};

/// Executes the IPAM plugin `plugin` for every call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegated {
    plugin: String,
}

impl Delegated {
    /// Delegation to the plugin named `plugin` (looked up in `CNI_PATH` at each call).
    pub fn new(plugin: &str) -> Delegated {
        Delegated { plugin: plugin.to_owned() }
    }

    fn failed(&self, msg: String) -> Error {
        Error::new(error::DELEGATE_FAILED, msg)
    }

    /// The plugin's executable: the first `CNI_PATH` entry holding a file of its name.
    fn find(&self, args: &CmdArgs) -> Result<PathBuf, Error> {
        let not_found = || {
            let path: Vec<String> = args.path.iter().map(|dir| dir.display().to_string()).collect();
            self.failed(format!("failed to find plugin {:?} in path [{}]", self.plugin, path.join(" ")))
        };
        if self.plugin.contains('/') || self.plugin == "." || self.plugin == ".." {
            return Err(self.failed(format!("invalid IPAM plugin name {:?}", self.plugin)));
        }
        args.path.iter().map(|dir| dir.join(&self.plugin)).find(|path| path.is_file()).ok_or_else(not_found)
    }

    /// Runs the plugin with `command` and returns its stdout, or relays its error.
    fn exec(&self, command: &str, args: &CmdArgs, conf: &NetConf) -> Result<Vec<u8>, Error> {
        let executable = self.find(args)?;
        let io = |action: &str, err: &std::io::Error| {
            Error::io(format!("failed to {action} IPAM plugin {}", executable.display()), err)
        };
        let mut cmd = Command::new(&executable);
        cmd.env("CNI_COMMAND", command).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let set = |cmd: &mut Command, name: &str, value: String| {
            if value.is_empty() {
                cmd.env_remove(name);
            } else {
                cmd.env(name, value);
            }
        };
        set(&mut cmd, "CNI_CONTAINERID", args.container_id.clone());
        set(&mut cmd, "CNI_IFNAME", args.ifname.clone());
        set(&mut cmd, "CNI_NETNS", args.netns.as_ref().map(|p| p.display().to_string()).unwrap_or_default());
        let cni_args: Vec<String> = args.args.iter().map(|(key, value)| format!("{key}={value}")).collect();
        set(&mut cmd, "CNI_ARGS", cni_args.join(";"));
        let path = std::env::join_paths(&args.path)
            .map_err(|err| io("pass CNI_PATH to", &std::io::Error::other(err)))?;
        cmd.env("CNI_PATH", path);
        let stdin = serde_json::to_vec(&conf.raw)
            .map_err(|err| io("encode the configuration for", &std::io::Error::other(err)))?;
        let mut child = cmd.spawn().map_err(|err| match err.kind() {
            ErrorKind::NotFound => self.failed(format!("failed to find plugin {:?}: {err}", self.plugin)),
            _ => io("start", &err),
        })?;
        if let Some(mut pipe) = child.stdin.take() {
            // A plugin may exit without reading stdin (an early error): its answer is what counts.
            if let Err(err) = pipe.write_all(&stdin)
                && err.kind() != ErrorKind::BrokenPipe
            {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io("write the configuration to", &err));
            }
        }
        let output = child.wait_with_output().map_err(|err| io("wait for", &err))?;
        if output.status.success() {
            return Ok(output.stdout);
        }
        Err(self.relay(&output.stdout, &output.stderr, output.status))
    }

    /// The plugin's error as it wrote it (`code`, `msg`, `details`), or 103 when it wrote none.
    fn relay(&self, stdout: &[u8], stderr: &[u8], status: std::process::ExitStatus) -> Error {
        let written = serde_json::from_slice::<Value>(stdout).ok().and_then(|value| {
            let code = u32::try_from(value.get("code")?.as_u64()?).ok()?;
            let msg = value.get("msg").and_then(Value::as_str).unwrap_or_default().to_owned();
            let details = value.get("details").and_then(Value::as_str).unwrap_or_default().to_owned();
            Some(Error { code, msg, details })
        });
        written.unwrap_or_else(|| {
            let said = String::from_utf8_lossy(if stdout.is_empty() { stderr } else { stdout });
            self.failed(format!("IPAM plugin {:?} failed ({status})", self.plugin))
                .with_details(said.trim().to_owned())
        })
    }
}

impl Ipam for Delegated {
    fn allocate(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<CniResult, Error> {
        let stdout = self.exec("ADD", args, conf)?;
        let value: Value = serde_json::from_slice(&stdout).map_err(|err| {
            self.failed(format!("IPAM plugin {:?} wrote a result that is not JSON", self.plugin))
                .with_details(err.to_string())
        })?;
        CniResult::from_json(&value).map_err(|err| {
            self.failed(format!("IPAM plugin {:?} wrote an unreadable result: {}", self.plugin, err.msg))
                .with_details(err.details)
        })
    }

    fn release(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error> {
        self.exec("DEL", args, conf).map(drop)
    }

    fn check(&mut self, args: &CmdArgs, conf: &NetConf, _addresses: &[IpAddr]) -> Result<(), Error> {
        if !conf.cni_version.has_check() {
            return Ok(());
        }
        self.exec("CHECK", args, conf).map(drop)
    }

    /// The plugin reads the valid attachments from the configuration (`cni.dev/valid-attachments`).
    fn gc(&mut self, args: &CmdArgs, conf: &NetConf, _valid: &[Attachment]) -> Result<(), Error> {
        if !conf.cni_version.has_status_and_gc() {
            return Ok(());
        }
        self.exec("GC", args, conf).map(drop)
    }

    fn status(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error> {
        if !conf.cni_version.has_status_and_gc() {
            return Ok(());
        }
        self.exec("STATUS", args, conf).map(drop)
    }
}
