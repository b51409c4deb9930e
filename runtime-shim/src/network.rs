//! Whether the pod network is ready: the CNI network config keel-shim would use, picked as libcni
//! and containerd's go-cni pick it — the files of the conf dir ending in `.conflist`, `.conf` or
//! `.json`, sorted by name, the first one loaded. A first file that does not load leaves the network
//! not ready (go-cni fails the same way rather than trying the next file).

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The extensions libcni's `ConfFiles` lists, in the CRI plugins' call.
const EXTENSIONS: [&str; 3] = ["conflist", "conf", "json"];

/// The network config that was loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Network {
    /// The file it was read from.
    pub file: PathBuf,
    /// The network's name.
    pub name: String,
    /// The plugin types of its chain, in order.
    pub plugins: Vec<String>,
}

/// Loads the network config of `conf_dir`; the error says why the network is not ready.
pub fn load(conf_dir: &Path) -> Result<Network, String> {
    let entries = std::fs::read_dir(conf_dir)
        .map_err(|e| format!("cni config load failed: reading {}: {e}", conf_dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_ok_and(|t| !t.is_dir()))
        .map(|entry| entry.path())
        .filter(|path| path.extension().and_then(|e| e.to_str()).is_some_and(|e| EXTENSIONS.contains(&e)))
        .collect();
    files.sort();
    let Some(file) = files.into_iter().next() else {
        return Err(format!("cni config load failed: no network config found in {}", conf_dir.display()));
    };
    let text = std::fs::read(&file)
        .map_err(|e| format!("cni config load failed: reading {}: {e}", file.display()))?;
    let value: Value = serde_json::from_slice(&text)
        .map_err(|e| format!("cni config load failed: {} is not JSON: {e}", file.display()))?;
    let is_list = file.extension().is_some_and(|e| e == "conflist");
    parse(&value, is_list)
        .map(|(name, plugins)| Network { file: file.clone(), name, plugins })
        .map_err(|reason| format!("cni config load failed: {}: {reason}", file.display()))
}

/// The name and plugin types of a conflist (`is_list`) or a single-plugin conf.
fn parse(value: &Value, is_list: bool) -> Result<(String, Vec<String>), String> {
    let object = value.as_object().ok_or("not a JSON object")?;
    let name = object.get("name").and_then(Value::as_str).unwrap_or_default().to_owned();
    let plugin_type = |plugin: &Value| -> Result<String, String> {
        match plugin.get("type").and_then(Value::as_str) {
            Some(t) if !t.is_empty() => Ok(t.to_owned()),
            _ => Err("a plugin has no \"type\"".to_owned()),
        }
    };
    if is_list {
        if name.is_empty() {
            return Err("the network list has no \"name\"".to_owned());
        }
        let plugins = object
            .get("plugins")
            .and_then(Value::as_array)
            .ok_or("the network list has no \"plugins\" array")?;
        if plugins.is_empty() {
            return Err("the network list has no plugins".to_owned());
        }
        let types = plugins.iter().map(plugin_type).collect::<Result<Vec<_>, _>>()?;
        Ok((name, types))
    } else {
        Ok((name, vec![plugin_type(value)?]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BRIDGE: &str =
        r#"{"cniVersion":"1.0.0","name":"pods","plugins":[{"type":"bridge"},{"type":"portmap"}]}"#;

    #[test]
    fn picks_the_first_file_by_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("20-b.conflist"), BRIDGE.replace("pods", "second")).unwrap();
        std::fs::write(dir.path().join("10-a.conflist"), BRIDGE).unwrap();
        std::fs::write(dir.path().join("00-ignored.txt"), "not a config").unwrap();
        let network = load(dir.path()).unwrap();
        assert_eq!(network.name, "pods");
        assert_eq!(network.plugins, ["bridge", "portmap"]);
        assert_eq!(network.file, dir.path().join("10-a.conflist"));
    }

    #[test]
    fn single_conf() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("10.conf"), r#"{"cniVersion":"0.4.0","name":"n","type":"ptp"}"#)
            .unwrap();
        assert_eq!(load(dir.path()).unwrap().plugins, ["ptp"]);
    }

    #[test]
    fn not_ready() {
        let dir = tempfile::tempdir().unwrap();
        let err = load(dir.path()).unwrap_err();
        assert!(err.contains("no network config found"), "{err}");
        for (file, text, expect) in [
            ("1.conflist", "{", "not JSON"),
            ("1.conflist", r#"{"name":"n"}"#, "plugins"),
            ("1.conflist", r#"{"name":"n","plugins":[]}"#, "no plugins"),
            ("1.conflist", r#"{"plugins":[{"type":"bridge"}]}"#, "name"),
            ("1.conflist", r#"{"name":"n","plugins":[{}]}"#, "type"),
            ("1.conf", r#"{"name":"n"}"#, "type"),
            ("1.json", "[]", "object"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join(file), text).unwrap();
            // A valid config after the broken one is not used.
            std::fs::write(dir.path().join("2.conflist"), BRIDGE).unwrap();
            let err = load(dir.path()).unwrap_err();
            assert!(err.contains(expect), "{file} {text}: {err}");
        }
        let missing = load(Path::new("/nonexistent/net.d")).unwrap_err();
        assert!(missing.contains("/nonexistent/net.d"), "{missing}");
    }
}
