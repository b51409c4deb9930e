//! The CNI exec protocol: the environment variables, the command dispatch and what goes to stdout.
//!
//! `run` takes the environment as a lookup function and stdin as bytes, so every error path of the
//! protocol is unit-tested without starting a process.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::spec::error::{self, Error};
use crate::spec::{CniResult, NetConf, Version};

/// `CNI_COMMAND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Status,
    Gc,
    Version,
}

impl Command {
    pub fn parse(text: &str) -> Option<Command> {
        Some(match text {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "STATUS" => Command::Status,
            "GC" => Command::Gc,
            "VERSION" => Command::Version,
            _ => return None,
        })
    }
}

/// The environment of one invocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmdArgs {
    /// `CNI_CONTAINERID` (empty for STATUS and GC).
    pub container_id: String,
    /// `CNI_NETNS`: optional for DEL, absent for STATUS and GC.
    pub netns: Option<PathBuf>,
    /// `CNI_IFNAME` (empty for STATUS and GC).
    pub ifname: String,
    /// `CNI_ARGS`, as `KEY=VALUE` pairs in order.
    pub args: Vec<(String, String)>,
    /// `CNI_PATH`: where delegated plugins are looked up (required, as libcni's skel requires it, for
    /// every command but VERSION).
    pub path: Vec<PathBuf>,
}

impl CmdArgs {
    /// The value of `key` in `CNI_ARGS`.
    pub fn arg(&self, key: &str) -> Option<&str> {
        self.args.iter().find(|(name, _)| name == key).map(|(_, value)| value.as_str())
    }
}

/// A plugin's implementation of the commands; `run` does the protocol around it.
pub trait Plugin {
    fn add(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<CniResult, Error>;
    fn del(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error>;
    fn check(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error>;
    fn status(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error>;
    fn gc(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error>;
}

/// What the process writes to stdout and exits with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub stdout: Vec<u8>,
    pub exit_code: i32,
}

impl Outcome {
    fn success(value: Option<Value>) -> Outcome {
        let stdout = value.map(|value| value.to_string().into_bytes()).unwrap_or_default();
        Outcome { stdout, exit_code: 0 }
    }

    fn failure(err: &Error, version: Version) -> Outcome {
        Outcome { stdout: err.to_json(version).to_string().into_bytes(), exit_code: 1 }
    }
}

/// Runs one invocation: reads the environment through `env`, parses `stdin`, dispatches to `plugin`
/// and returns what to print. Errors are written in the configuration's version when it could be
/// read, else in the latest.
pub fn run(env: &dyn Fn(&str) -> Option<String>, stdin: &[u8], plugin: &mut dyn Plugin) -> Outcome {
    let command = match env("CNI_COMMAND") {
        None => return Outcome::failure(&missing("CNI_COMMAND"), Version::LATEST),
        Some(text) => match Command::parse(&text) {
            Some(command) => command,
            None => {
                let err = Error::new(error::INVALID_ENVIRONMENT, format!("unknown CNI_COMMAND {text:?}"));
                return Outcome::failure(&err, Version::LATEST);
            }
        },
    };
    if command == Command::Version {
        return version(stdin);
    }
    let conf = match NetConf::parse(stdin) {
        Ok(conf) => conf,
        Err(err) => return Outcome::failure(&err, requested_version(stdin)),
    };
    let version = conf.cni_version;
    let outcome = cmd_args(command, env).and_then(|args| dispatch(command, &args, &conf, plugin));
    match outcome {
        Ok(value) => Outcome::success(value),
        Err(err) => Outcome::failure(&err, version),
    }
}

fn dispatch(
    command: Command,
    args: &CmdArgs,
    conf: &NetConf,
    plugin: &mut dyn Plugin,
) -> Result<Option<Value>, Error> {
    let version = conf.cni_version;
    match command {
        Command::Add => plugin.add(args, conf).map(|result| Some(result.to_json(version))),
        Command::Del => plugin.del(args, conf).map(|()| None),
        Command::Check if version.has_check() => plugin.check(args, conf).map(|()| None),
        Command::Status if version.has_status_and_gc() => plugin.status(args, conf).map(|()| None),
        Command::Gc if version.has_status_and_gc() => plugin.gc(args, conf).map(|()| None),
        Command::Check | Command::Status | Command::Gc => Err(Error::new(
            error::INCOMPATIBLE_VERSION,
            format!("configuration version {version} does not allow {command:?}"),
        )),
        Command::Version => Ok(None),
    }
}

fn version(stdin: &[u8]) -> Outcome {
    // The caller's version (stdin may be empty) must be one we speak; the answer lists them all.
    if let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(stdin)
        && let Some(Value::String(text)) = object.get("cniVersion")
        && let Err(err) = Version::parse(text)
    {
        return Outcome::failure(&err, Version::LATEST);
    }
    Outcome::success(Some(json!({
        "cniVersion": Version::LATEST.as_str(),
        "supportedVersions": Version::ALL.map(Version::as_str),
    })))
}

/// The version to write an early error in: the configuration's, if it names a supported one.
fn requested_version(stdin: &[u8]) -> Version {
    serde_json::from_slice::<Value>(stdin)
        .ok()
        .and_then(|value| {
            value.get("cniVersion").and_then(Value::as_str).and_then(|text| Version::parse(text).ok())
        })
        .unwrap_or(Version::LATEST)
}

fn missing(name: &str) -> Error {
    Error::new(error::INVALID_ENVIRONMENT, format!("required environment variable {name} is missing"))
}

fn cmd_args(command: Command, env: &dyn Fn(&str) -> Option<String>) -> Result<CmdArgs, Error> {
    let get = |name: &str| env(name).filter(|value| !value.is_empty());
    let path = get("CNI_PATH").map(|text| std::env::split_paths(&text).collect()).unwrap_or_default();
    let args = match get("CNI_ARGS") {
        None => Vec::new(),
        Some(text) => parse_cni_args(&text)?,
    };
    let needs_container = matches!(command, Command::Add | Command::Del | Command::Check);
    if !needs_container {
        if get("CNI_PATH").is_none() {
            return Err(missing("CNI_PATH"));
        }
        return Ok(CmdArgs { path, args, ..CmdArgs::default() });
    }
    let container_id = get("CNI_CONTAINERID").ok_or_else(|| missing("CNI_CONTAINERID"))?;
    validate_container_id(&container_id)?;
    let ifname = get("CNI_IFNAME").ok_or_else(|| missing("CNI_IFNAME"))?;
    validate_ifname(&ifname)?;
    let netns = get("CNI_NETNS").map(PathBuf::from);
    if netns.is_none() && command != Command::Del {
        return Err(missing("CNI_NETNS"));
    }
    if get("CNI_PATH").is_none() {
        return Err(missing("CNI_PATH"));
    }
    Ok(CmdArgs { container_id, netns, ifname, args, path })
}

/// `CNI_ARGS`: `KEY=VALUE` pairs separated by `;`.
pub fn parse_cni_args(text: &str) -> Result<Vec<(String, String)>, Error> {
    text.split(';')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            pair.split_once('=').map(|(key, value)| (key.to_owned(), value.to_owned())).ok_or_else(|| {
                Error::new(
                    error::INVALID_ENVIRONMENT,
                    format!("invalid CNI_ARGS pair {pair:?}: expected KEY=VALUE"),
                )
            })
        })
        .collect()
}

/// A container ID starts with a letter or digit and holds only letters, digits, `_`, `.` and `-`.
fn validate_container_id(id: &str) -> Result<(), Error> {
    let mut chars = id.chars();
    let valid = chars.next().is_some_and(|first| first.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if valid {
        Ok(())
    } else {
        Err(Error::new(error::INVALID_ENVIRONMENT, format!("invalid CNI_CONTAINERID {id:?}")))
    }
}

/// An interface name is at most 15 bytes, not `.` or `..`, without `/`, `:` or whitespace.
fn validate_ifname(name: &str) -> Result<(), Error> {
    let valid = name.len() <= 15
        && name != "."
        && name != ".."
        && !name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace());
    if valid {
        Ok(())
    } else {
        Err(Error::new(error::INVALID_ENVIRONMENT, format!("invalid CNI_IFNAME {name:?}")))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// Records what it was called with and answers with a fixed result.
    #[derive(Default)]
    struct Recorder {
        calls: Vec<(String, CmdArgs)>,
    }

    impl Plugin for Recorder {
        fn add(&mut self, args: &CmdArgs, _: &NetConf) -> Result<CniResult, Error> {
            self.calls.push(("add".into(), args.clone()));
            Ok(CniResult::default())
        }
        fn del(&mut self, args: &CmdArgs, _: &NetConf) -> Result<(), Error> {
            self.calls.push(("del".into(), args.clone()));
            Ok(())
        }
        fn check(&mut self, args: &CmdArgs, _: &NetConf) -> Result<(), Error> {
            self.calls.push(("check".into(), args.clone()));
            Err(Error::new(error::DRIFT, "drifted"))
        }
        fn status(&mut self, args: &CmdArgs, _: &NetConf) -> Result<(), Error> {
            self.calls.push(("status".into(), args.clone()));
            Ok(())
        }
        fn gc(&mut self, args: &CmdArgs, _: &NetConf) -> Result<(), Error> {
            self.calls.push(("gc".into(), args.clone()));
            Ok(())
        }
    }

    const CONF: &str = r#"{"cniVersion":"1.0.0","name":"kube","type":"keel-cni"}"#;
    const CONF_110: &str = r#"{"cniVersion":"1.1.0","name":"kube","type":"keel-cni"}"#;

    fn invoke(vars: &[(&str, &str)], stdin: &str) -> (Outcome, Recorder) {
        let env: HashMap<String, String> =
            vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let mut plugin = Recorder::default();
        let outcome = run(&|name| env.get(name).cloned(), stdin.as_bytes(), &mut plugin);
        (outcome, plugin)
    }

    fn json(outcome: &Outcome) -> Value {
        serde_json::from_slice(&outcome.stdout).unwrap()
    }

    const ADD: [(&str, &str); 6] = [
        ("CNI_COMMAND", "ADD"),
        ("CNI_CONTAINERID", "abc-1.2_3"),
        ("CNI_NETNS", "/run/netns/pod"),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
        ("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=web;IP=10.0.0.5"),
    ];

    #[test]
    fn add_passes_the_environment_and_prints_the_result_in_the_configs_version() {
        let (outcome, plugin) = invoke(&ADD, CONF);
        assert_eq!(outcome.exit_code, 0, "{}", String::from_utf8_lossy(&outcome.stdout));
        assert_eq!(json(&outcome)["cniVersion"], "1.0.0");
        let args = &plugin.calls[0].1;
        assert_eq!(args.container_id, "abc-1.2_3");
        assert_eq!(args.netns, Some(PathBuf::from("/run/netns/pod")));
        assert_eq!(args.path, vec![PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")]);
        assert_eq!(args.arg("IP"), Some("10.0.0.5"));
        assert_eq!(args.arg("K8S_POD_NAME"), Some("web"));
    }

    #[test]
    fn missing_or_invalid_variables_are_error_4_and_reach_no_plugin() {
        for (drop, replace) in [
            ("CNI_COMMAND", None),
            ("CNI_CONTAINERID", None),
            ("CNI_NETNS", None),
            ("CNI_IFNAME", None),
            ("CNI_PATH", None),
            ("CNI_COMMAND", Some("FROB")),
            ("CNI_CONTAINERID", Some("-leading-dash")),
            ("CNI_CONTAINERID", Some("has/slash")),
            ("CNI_IFNAME", Some("a-name-longer-than-15")),
            ("CNI_IFNAME", Some("eth:0")),
            ("CNI_IFNAME", Some("..")),
            ("CNI_ARGS", Some("IP")),
        ] {
            let vars: Vec<(&str, &str)> = ADD
                .iter()
                .filter_map(|&(k, v)| if k == drop { replace.map(|r| (k, r)) } else { Some((k, v)) })
                .collect();
            let (outcome, plugin) = invoke(&vars, CONF);
            assert_eq!(outcome.exit_code, 1, "{drop}={replace:?}");
            assert_eq!(json(&outcome)["code"], error::INVALID_ENVIRONMENT, "{drop}={replace:?}");
            assert!(plugin.calls.is_empty());
        }
    }

    #[test]
    fn del_needs_no_netns_and_status_and_gc_need_only_cni_path() {
        let (outcome, plugin) = invoke(
            &[
                ("CNI_COMMAND", "DEL"),
                ("CNI_CONTAINERID", "c1"),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", "/opt/cni/bin"),
            ],
            CONF,
        );
        assert_eq!((outcome.exit_code, outcome.stdout.len()), (0, 0));
        assert_eq!(plugin.calls[0].1.netns, None);
        for command in ["STATUS", "GC"] {
            let (outcome, plugin) =
                invoke(&[("CNI_COMMAND", command), ("CNI_PATH", "/opt/cni/bin")], CONF_110);
            assert_eq!(outcome.exit_code, 0, "{command}");
            assert_eq!(plugin.calls.len(), 1);
            let (outcome, _) = invoke(&[("CNI_COMMAND", command)], CONF_110);
            assert_eq!(json(&outcome)["code"], error::INVALID_ENVIRONMENT);
        }
    }

    #[test]
    fn commands_newer_than_the_configs_version_are_error_1() {
        let (outcome, plugin) = invoke(&[("CNI_COMMAND", "GC"), ("CNI_PATH", "/opt/cni/bin")], CONF);
        assert_eq!(json(&outcome)["code"], error::INCOMPATIBLE_VERSION);
        assert!(plugin.calls.is_empty());
        let mut check = ADD;
        check[0] = ("CNI_COMMAND", "CHECK");
        let (outcome, _) = invoke(&check, r#"{"cniVersion":"0.3.1","name":"kube"}"#);
        assert_eq!(json(&outcome)["code"], error::INCOMPATIBLE_VERSION);
        assert_eq!(json(&outcome)["cniVersion"], "0.3.1");
        let (outcome, _) = invoke(&check, CONF);
        assert_eq!(json(&outcome), json!({"cniVersion": "1.0.0", "code": error::DRIFT, "msg": "drifted"}));
    }

    #[test]
    fn version_lists_the_supported_versions_and_bad_stdin_gets_decoding_errors() {
        let (outcome, _) = invoke(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"1.0.0"}"#);
        assert_eq!(
            json(&outcome),
            json!({"cniVersion": "1.1.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]})
        );
        let (outcome, _) = invoke(&[("CNI_COMMAND", "VERSION")], "");
        assert_eq!(outcome.exit_code, 0);
        let (outcome, _) = invoke(&[("CNI_COMMAND", "VERSION")], r#"{"cniVersion":"9.9.9"}"#);
        assert_eq!(json(&outcome)["code"], error::INCOMPATIBLE_VERSION);
        let (outcome, plugin) = invoke(&ADD, "{\"cniVersion\":");
        assert_eq!(json(&outcome)["code"], error::DECODING_FAILURE);
        assert!(plugin.calls.is_empty());
    }
}
