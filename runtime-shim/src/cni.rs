//! Running a CNI network configuration list as libcni runs it: ADD calls each plugin in order, each
//! one getting the previous plugin's result as `prevResult`; DEL calls them in reverse order, each one
//! getting the ADD's final result (spec 0.4.0 and later). Each plugin gets its config with the list's
//! `name` and `cniVersion` injected and a `runtimeConfig` holding the capability arguments it declares
//! in `capabilities` (`portMappings`), and the spec's environment: `CNI_COMMAND`, `CNI_CONTAINERID`,
//! `CNI_NETNS`, `CNI_IFNAME`, `CNI_ARGS`, `CNI_PATH` (keel-shim's own environment passed on, as libcni
//! does). The list is the one [`crate::network::load`] picks; a `.conf` file is wrapped as a list of
//! one plugin. A plugin that fails answers a CNI error (`code`, `msg`, `details`) on stdout, turned
//! into a [`CniError`]; one that runs longer than [`PLUGIN_TIMEOUT`] is killed.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::AsyncWriteExt;

/// How long one plugin invocation may run before it is killed.
pub const PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);

/// The interface name given to the pod's network interface (as the kubelet's runtimes do).
pub const IFNAME: &str = "eth0";

/// A network configuration list, as loaded (the form stored with a sandbox for its DEL).
#[derive(Debug, Clone, PartialEq)]
pub struct NetworkList {
    /// The network's name.
    pub name: String,
    /// The list's CNI version.
    pub cni_version: String,
    /// The plugin configs, in ADD order.
    pub plugins: Vec<Value>,
}

/// A failed CNI operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CniError {
    /// No usable network configuration.
    #[error("{0}")]
    Config(String),
    /// The plugin binary is not in the bin dir.
    #[error("failed to find plugin {plugin:?} in path {dir}")]
    NotFound { plugin: String, dir: String },
    /// The plugin ran and failed (a CNI error on stdout, or only stderr).
    #[error("plugin type={plugin:?} failed ({command}): {}", describe(*.code, .msg, .details))]
    Plugin { plugin: String, command: String, code: Option<u64>, msg: String, details: String },
    /// The plugin could not be run, timed out, or answered something that is not a result.
    #[error("plugin type={plugin:?} ({command}): {reason}")]
    Exec { plugin: String, command: String, reason: String },
}

fn describe(code: Option<u64>, msg: &str, details: &str) -> String {
    let mut text = match code {
        Some(code) => format!("CNI error code {code}: {msg}"),
        None => msg.to_owned(),
    };
    if !details.is_empty() {
        text.push_str(&format!(" ({details})"));
    }
    text
}

impl CniError {
    /// The gRPC code a failed sandbox network answers: `Unavailable` for CNI's "try again later"
    /// (code 11), `Unknown` otherwise (containerd answers a plain error, i.e. `Unknown`).
    pub fn grpc_code(&self) -> tonic::Code {
        match self {
            CniError::Plugin { code: Some(11), .. } => tonic::Code::Unavailable,
            _ => tonic::Code::Unknown,
        }
    }
}

impl NetworkList {
    /// The network list of `conf_dir`, picked as [`crate::network::load`] picks it.
    pub fn load(conf_dir: &Path) -> Result<NetworkList, CniError> {
        let network = crate::network::load(conf_dir).map_err(CniError::Config)?;
        let text = std::fs::read(&network.file)
            .map_err(|e| CniError::Config(format!("reading {}: {e}", network.file.display())))?;
        let value: Value = serde_json::from_slice(&text)
            .map_err(|e| CniError::Config(format!("{} is not JSON: {e}", network.file.display())))?;
        let is_list = network.file.extension().is_some_and(|e| e == "conflist");
        let list = if is_list { value } else { NetworkList::wrap_conf(value) };
        NetworkList::from_value(&list)
            .map_err(|reason| CniError::Config(format!("{}: {reason}", network.file.display())))
    }

    /// A single-plugin `.conf` as a list (libcni's `ConfListFromConf`).
    fn wrap_conf(conf: Value) -> Value {
        let name = conf.get("name").cloned().unwrap_or(Value::Null);
        let version = conf.get("cniVersion").cloned().unwrap_or(Value::Null);
        let mut list = Map::new();
        list.insert("name".to_owned(), name);
        list.insert("cniVersion".to_owned(), version);
        list.insert("plugins".to_owned(), Value::Array(vec![conf]));
        Value::Object(list)
    }

    /// Parses a conflist object.
    pub fn from_value(value: &Value) -> Result<NetworkList, String> {
        let name = value.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
        if name.is_empty() {
            return Err("the network list has no \"name\"".to_owned());
        }
        let cni_version = value.get("cniVersion").and_then(Value::as_str).unwrap_or("0.1.0").to_owned();
        let plugins = value
            .get("plugins")
            .and_then(Value::as_array)
            .ok_or("the network list has no \"plugins\" array")?
            .clone();
        if plugins.is_empty() {
            return Err("the network list has no plugins".to_owned());
        }
        for plugin in &plugins {
            if plugin.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
                return Err("a plugin has no \"type\"".to_owned());
            }
        }
        Ok(NetworkList { name, cni_version, plugins })
    }

    /// The conflist object (what [`NetworkList::from_value`] reads back).
    pub fn to_value(&self) -> Value {
        json!({ "name": self.name, "cniVersion": self.cni_version, "plugins": self.plugins })
    }
}

/// One attachment of a pod to the network: the variables of the CNI environment and the capability
/// arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct Attachment {
    /// `CNI_CONTAINERID`: the sandbox id.
    pub container_id: String,
    /// `CNI_NETNS`: the pod's network namespace file.
    pub netns: PathBuf,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_ARGS`, in order.
    pub args: Vec<(String, String)>,
    /// Capability arguments by capability name (`portMappings`), given to the plugins declaring them.
    pub capability_args: Map<String, Value>,
}

/// The config one plugin gets on stdin (libcni's `buildOneConfig`).
pub fn plugin_config(
    list: &NetworkList,
    plugin: &Value,
    prev_result: Option<&Value>,
    attachment: &Attachment,
) -> Value {
    let mut conf = plugin.as_object().cloned().unwrap_or_default();
    conf.insert("name".to_owned(), Value::String(list.name.clone()));
    conf.insert("cniVersion".to_owned(), Value::String(list.cni_version.clone()));
    if let Some(prev) = prev_result {
        conf.insert("prevResult".to_owned(), prev.clone());
    }
    let mut runtime_config = Map::new();
    if let Some(capabilities) = plugin.get("capabilities").and_then(Value::as_object) {
        for (capability, supported) in capabilities {
            if supported.as_bool() == Some(true)
                && let Some(arg) = attachment.capability_args.get(capability)
            {
                runtime_config.insert(capability.clone(), arg.clone());
            }
        }
    }
    if !runtime_config.is_empty() {
        conf.insert("runtimeConfig".to_owned(), Value::Object(runtime_config));
    }
    Value::Object(conf)
}

/// Runs ADD of every plugin in order; returns the last plugin's result.
/// Each plugin is killed after `timeout` (see [`PLUGIN_TIMEOUT`]).
pub async fn add(
    list: &NetworkList,
    bin_dir: &Path,
    attachment: &Attachment,
    timeout: Duration,
) -> Result<Value, CniError> {
    let mut result: Option<Value> = None;
    for plugin in &list.plugins {
        let conf = plugin_config(list, plugin, result.as_ref(), attachment);
        let answer = invoke("ADD", &conf, bin_dir, attachment, timeout).await?;
        if answer.is_null() {
            return Err(CniError::Exec {
                plugin: plugin_type(plugin),
                command: "add".to_owned(),
                reason: "the plugin succeeded but printed no result".to_owned(),
            });
        }
        result = Some(answer);
    }
    result.ok_or_else(|| CniError::Config("the network list has no plugins".to_owned()))
}

/// Runs DEL of every plugin in reverse order, each one given `prev_result` (the ADD's result) when
/// the list's version is 0.4.0 or later, as libcni passes its cached result.
pub async fn del(
    list: &NetworkList,
    bin_dir: &Path,
    attachment: &Attachment,
    prev_result: Option<&Value>,
    timeout: Duration,
) -> Result<(), CniError> {
    let prev = if version_at_least(&list.cni_version, (0, 4, 0)) { prev_result } else { None };
    for plugin in list.plugins.iter().rev() {
        let conf = plugin_config(list, plugin, prev, attachment);
        invoke("DEL", &conf, bin_dir, attachment, timeout).await?;
    }
    Ok(())
}

fn plugin_type(plugin: &Value) -> String {
    plugin.get("type").and_then(Value::as_str).unwrap_or_default().to_owned()
}

/// Whether `version` (such as "0.4.0", "1.0.0") is at least `min`; an unparsable one is not.
pub fn version_at_least(version: &str, min: (u64, u64, u64)) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u64>().ok());
    match (parts.next().flatten(), parts.next().flatten(), parts.next().flatten().or(Some(0))) {
        (Some(major), Some(minor), Some(patch)) => (major, minor, patch) >= min,
        _ => false,
    }
}

/// Runs one plugin; returns its stdout as JSON (`Null` when empty).
async fn invoke(
    command: &str,
    conf: &Value,
    bin_dir: &Path,
    attachment: &Attachment,
    timeout: Duration,
) -> Result<Value, CniError> {
    let plugin = plugin_type(conf);
    let lower = command.to_ascii_lowercase();
    let exec_error =
        |reason: String| CniError::Exec { plugin: plugin.clone(), command: lower.clone(), reason };
    if plugin.contains('/') || plugin == "." || plugin == ".." {
        return Err(exec_error("a plugin type must be a file name".to_owned()));
    }
    let binary = bin_dir.join(&plugin);
    if !binary.is_file() {
        return Err(CniError::NotFound { plugin, dir: bin_dir.display().to_string() });
    }
    let cni_args: Vec<String> = attachment.args.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut cmd = tokio::process::Command::new(&binary);
    cmd.env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", &attachment.container_id)
        .env("CNI_NETNS", &attachment.netns)
        .env("CNI_IFNAME", &attachment.ifname)
        .env("CNI_ARGS", cni_args.join(";"))
        .env("CNI_PATH", bin_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| exec_error(format!("running {}: {e}", binary.display())))?;
    let input = serde_json::to_vec(conf).map_err(|e| exec_error(format!("encoding the config: {e}")))?;
    let run = async {
        if let Some(mut stdin) = child.stdin.take() {
            // A plugin that exits without reading its config closes the pipe: its exit status says more.
            let _ = stdin.write_all(&input).await;
        }
        child.wait_with_output().await
    };
    let output = match tokio::time::timeout(timeout, run).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Err(exec_error(format!("waiting for {}: {e}", binary.display()))),
        Err(_) => return Err(exec_error(format!("killed: still running after {timeout:?}"))),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        let error: Option<Value> = serde_json::from_str(stdout.trim()).ok();
        let field = |name: &str| {
            error.as_ref().and_then(|e| e.get(name)).and_then(Value::as_str).unwrap_or_default().to_owned()
        };
        let code = error.as_ref().and_then(|e| e.get("code")).and_then(Value::as_u64);
        let mut msg = field("msg");
        if msg.is_empty() {
            msg = if stderr.trim().is_empty() {
                format!("exited with {} and no error message", output.status)
            } else {
                stderr.trim().to_owned()
            };
        }
        return Err(CniError::Plugin { plugin, command: lower, code, msg, details: field("details") });
    }
    if stdout.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_json::from_str(stdout.trim()).map_err(|e| exec_error(format!("its output is not JSON: {e}")))
}

/// The pod's IPs in a CNI result: the addresses of the interface `ifname` inside the sandbox (or,
/// when the result names no interfaces, all of them), IPv4 first as containerd orders them (the
/// first is the pod IP).
pub fn pod_ips(result: &Value, ifname: &str) -> Vec<IpAddr> {
    let address = |v: &Value| -> Option<IpAddr> {
        let text = v.as_str()?;
        text.parse::<ipnet::IpNet>().map(|n| n.addr()).ok().or_else(|| text.parse().ok())
    };
    let mut ips: Vec<IpAddr> = Vec::new();
    if let Some(list) = result.get("ips").and_then(Value::as_array) {
        let interfaces = result.get("interfaces").and_then(Value::as_array);
        let ours = |ip: &Value| -> bool {
            let (Some(interfaces), Some(index)) = (interfaces, ip.get("interface").and_then(Value::as_u64))
            else {
                return false;
            };
            usize::try_from(index).ok().and_then(|i| interfaces.get(i)).is_some_and(|iface| {
                iface.get("name").and_then(Value::as_str) == Some(ifname)
                    && iface.get("sandbox").and_then(Value::as_str).is_some_and(|s| !s.is_empty())
            })
        };
        let matched: Vec<&Value> = list.iter().filter(|ip| ours(ip)).collect();
        let chosen: Vec<&Value> = if matched.is_empty() { list.iter().collect() } else { matched };
        ips.extend(chosen.into_iter().filter_map(|ip| ip.get("address")).filter_map(address));
    } else {
        for key in ["ip4", "ip6"] {
            if let Some(ip) = result.get(key).and_then(|v| v.get("ip")).and_then(address) {
                ips.push(ip);
            }
        }
    }
    // A stable partition: IPv4 addresses first, each family in the result's order.
    ips.sort_by_key(IpAddr::is_ipv6);
    ips
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attachment() -> Attachment {
        let mut caps = Map::new();
        caps.insert(
            "portMappings".to_owned(),
            json!([{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]),
        );
        Attachment {
            container_id: "abc".to_owned(),
            netns: PathBuf::from("/x/ns/net"),
            ifname: IFNAME.to_owned(),
            args: vec![("IgnoreUnknown".to_owned(), "1".to_owned())],
            capability_args: caps,
        }
    }

    #[test]
    fn one_plugin_config_as_libcni_builds_it() {
        let list = NetworkList::from_value(&json!({
            "name": "pods", "cniVersion": "1.0.0",
            "plugins": [{"type": "bridge"}, {"type": "portmap", "capabilities": {"portMappings": true, "bandwidth": true}}]
        }))
        .unwrap();
        let prev = json!({"cniVersion": "1.0.0", "ips": []});
        let first = plugin_config(&list, &list.plugins[0], None, &attachment());
        assert_eq!(first, json!({"type": "bridge", "name": "pods", "cniVersion": "1.0.0"}));
        let second = plugin_config(&list, &list.plugins[1], Some(&prev), &attachment());
        assert_eq!(second["prevResult"], prev);
        assert_eq!(
            second["runtimeConfig"],
            json!({"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}]})
        );
        // A capability declared false or not declared gets nothing.
        let off = json!({"type": "portmap", "capabilities": {"portMappings": false}});
        assert!(plugin_config(&list, &off, None, &attachment()).get("runtimeConfig").is_none());
    }

    #[test]
    fn conf_files_are_wrapped_as_lists() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("10.conf"), r#"{"cniVersion":"0.4.0","name":"n","type":"ptp"}"#)
            .unwrap();
        let list = NetworkList::load(dir.path()).unwrap();
        assert_eq!(list.name, "n");
        assert_eq!(list.cni_version, "0.4.0");
        assert_eq!(list.plugins, [json!({"cniVersion":"0.4.0","name":"n","type":"ptp"})]);
        assert_eq!(NetworkList::from_value(&list.to_value()).unwrap(), list);
    }

    #[test]
    fn versions() {
        assert!(version_at_least("0.4.0", (0, 4, 0)));
        assert!(version_at_least("1.0.0", (0, 4, 0)));
        assert!(!version_at_least("0.3.1", (0, 4, 0)));
        assert!(!version_at_least("bogus", (0, 4, 0)));
    }

    #[test]
    fn pod_ips_from_results() {
        let result = json!({
            "cniVersion": "1.0.0",
            "interfaces": [{"name": "cni0"}, {"name": "veth1"}, {"name": "eth0", "sandbox": "/x/ns/net"}],
            "ips": [
                {"address": "fd00::5/64", "interface": 2},
                {"address": "10.1.0.5/24", "interface": 2, "gateway": "10.1.0.1"},
                {"address": "10.9.9.9/24", "interface": 0}
            ]
        });
        assert_eq!(
            pod_ips(&result, "eth0"),
            ["10.1.0.5".parse::<IpAddr>().unwrap(), "fd00::5".parse().unwrap()]
        );
        let old = json!({"cniVersion": "0.2.0", "ip4": {"ip": "10.2.0.3/16"}});
        assert_eq!(pod_ips(&old, "eth0"), ["10.2.0.3".parse::<IpAddr>().unwrap()]);
        let bare = json!({"cniVersion": "1.0.0", "ips": [{"address": "10.3.0.3/16"}]});
        assert_eq!(pod_ips(&bare, "eth0"), ["10.3.0.3".parse::<IpAddr>().unwrap()]);
    }

    /// A bin dir of shell-script plugins: `one` and `two` log their command, environment and config to
    /// `log` and answer a result, `fail` answers a CNI error, `hang` never answers.
    fn script_plugins(dir: &Path) -> (PathBuf, PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let log = dir.join("log");
        let logger = |n: u8| {
            format!(
                "#!/bin/sh\nconf=$(cat)\necho \"$CNI_COMMAND $CNI_CONTAINERID $CNI_NETNS $CNI_IFNAME $CNI_ARGS $CNI_PATH\" >> {log}\n\
                 printf '%s\\n' \"$conf\" >> {log}\n\
                 echo '{{\"cniVersion\":\"1.0.0\",\"ips\":[{{\"address\":\"10.0.0.{n}/24\"}}]}}'\n",
                log = log.display()
            )
        };
        let scripts = [
            ("one", logger(1)),
            ("two", logger(2)),
            (
                "fail",
                "#!/bin/sh\ncat >/dev/null\necho '{\"code\":7,\"msg\":\"no\",\"details\":\"why\"}'\nexit 1\n"
                    .to_owned(),
            ),
            ("hang", "#!/bin/sh\nexec sleep 600\n".to_owned()),
        ];
        for (name, text) in scripts {
            let path = bin.join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        (bin, log)
    }

    fn list_of(types: &[&str]) -> NetworkList {
        let plugins: Vec<Value> = types.iter().map(|t| json!({"type": t})).collect();
        NetworkList::from_value(&json!({"name": "n", "cniVersion": "1.0.0", "plugins": plugins})).unwrap()
    }

    #[tokio::test]
    async fn add_chains_results_and_del_runs_in_reverse() {
        let dir = tempfile::tempdir().unwrap();
        let (bin, log) = script_plugins(dir.path());
        let list = list_of(&["one", "two"]);
        let result = add(&list, &bin, &attachment(), PLUGIN_TIMEOUT).await.unwrap();
        assert_eq!(pod_ips(&result, IFNAME), ["10.0.0.2".parse::<IpAddr>().unwrap()]);
        del(&list, &bin, &attachment(), Some(&result), PLUGIN_TIMEOUT).await.unwrap();
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 8, "{text}");
        let env = format!("abc /x/ns/net eth0 IgnoreUnknown=1 {}", bin.display());
        assert_eq!(lines[0], format!("ADD {env}"));
        assert_eq!(lines[4], format!("DEL {env}"));
        let configs: Vec<Value> =
            [1, 3, 5, 7].iter().map(|&i| serde_json::from_str(lines[i]).unwrap()).collect();
        assert!(configs[0].get("prevResult").is_none());
        assert_eq!(configs[1]["prevResult"]["ips"][0]["address"], "10.0.0.1/24");
        // DEL: `two` first, then `one`, both with the ADD's final result.
        assert_eq!(configs[2]["type"], "two");
        assert_eq!(configs[3]["type"], "one");
        assert_eq!(configs[3]["prevResult"], result);
    }

    #[tokio::test]
    async fn failures_missing_plugins_and_timeouts() {
        let dir = tempfile::tempdir().unwrap();
        let (bin, _) = script_plugins(dir.path());
        let err = add(&list_of(&["one", "fail"]), &bin, &attachment(), PLUGIN_TIMEOUT).await.unwrap_err();
        assert_eq!(
            err,
            CniError::Plugin {
                plugin: "fail".to_owned(),
                command: "add".to_owned(),
                code: Some(7),
                msg: "no".to_owned(),
                details: "why".to_owned()
            }
        );
        let err = add(&list_of(&["missing"]), &bin, &attachment(), PLUGIN_TIMEOUT).await.unwrap_err();
        assert!(matches!(err, CniError::NotFound { .. }), "{err}");
        let err =
            add(&list_of(&["hang"]), &bin, &attachment(), Duration::from_millis(200)).await.unwrap_err();
        assert!(matches!(&err, CniError::Exec { reason, .. } if reason.contains("killed")), "{err}");
    }

    #[test]
    fn error_messages() {
        let e = CniError::Plugin {
            plugin: "bridge".to_owned(),
            command: "add".to_owned(),
            code: Some(7),
            msg: "bad".to_owned(),
            details: "more".to_owned(),
        };
        assert_eq!(e.to_string(), "plugin type=\"bridge\" failed (add): CNI error code 7: bad (more)");
        assert_eq!(e.grpc_code(), tonic::Code::Unknown);
    }
}
