//! `keel-cni install` as a DaemonSet's init container runs it: the real binary, into directories of a
//! temp dir; the conflist it writes is read back the way a runtime hands it to each plugin.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Output};

use keel_cni::spec::{NetConf, Version};
use serde_json::Value;

const KEEL_CNI: &str = env!("CARGO_BIN_EXE_keel-cni");

fn install(args: &[&str]) -> Output {
    Command::new(KEEL_CNI).arg("install").args(args).output().expect("run keel-cni install")
}

/// Each plugin of the list as a runtime (libcni) hands it over: the list's cniVersion and name set
/// in the plugin's object.
fn plugin_confs(list: &Value) -> Vec<NetConf> {
    let plugins = list["plugins"].as_array().expect("plugins");
    plugins
        .iter()
        .map(|plugin| {
            let mut object = plugin.as_object().expect("a plugin is an object").clone();
            object.insert("cniVersion".into(), list["cniVersion"].clone());
            object.insert("name".into(), list["name"].clone());
            NetConf::parse(Value::Object(object).to_string().as_bytes()).expect("keel-cni reads its conflist")
        })
        .collect()
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn install_copies_the_binary_and_writes_a_conflist_keel_cni_reads() {
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = dir.path().join("opt/cni/bin");
    let conf_dir = dir.path().join("etc/cni/net.d");
    let data_dir = dir.path().join("ipam");
    let output = install(&[
        "--bin-dir",
        bin_dir.to_str().unwrap(),
        "--conf-dir",
        conf_dir.to_str().unwrap(),
        "--pod-cidr",
        "10.244.3.0/24,fd00:10:244:3::/64",
        "--cluster-cidr",
        "10.244.0.0/16,fd00:10:244::/48",
        "--mtu",
        "1400",
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

    let binary = bin_dir.join("keel-cni");
    assert_eq!(std::fs::read(&binary).unwrap(), std::fs::read(KEEL_CNI).unwrap(), "the running binary");
    assert_eq!(std::fs::metadata(&binary).unwrap().mode() & 0o777, 0o755);
    assert_eq!(entries(&bin_dir), ["keel-cni"]);
    assert_eq!(entries(&conf_dir), ["10-keel.conflist"]);

    let list: Value =
        serde_json::from_slice(&std::fs::read(conf_dir.join("10-keel.conflist")).unwrap()).unwrap();
    assert_eq!(list["cniVersion"], "1.0.0", "containerd 1.6 reads up to 1.0.0");
    let confs = plugin_confs(&list);
    assert_eq!(confs.len(), 1);
    let conf = &confs[0];
    assert_eq!(
        (conf.cni_version, conf.name.as_str(), conf.plugin_type.as_str()),
        (Version::V1_0_0, "keel", "keel-cni")
    );
    assert!(conf.bridge.is_gateway && conf.bridge.is_default_gateway && conf.bridge.ip_masq);
    assert!(conf.bridge.hairpin_mode);
    assert_eq!((conf.bridge.bridge.as_str(), conf.bridge.mtu), ("cni0", Some(1400)));
    assert_eq!(conf.bridge.cluster_cidrs.len(), 2);
    let subnets: Vec<String> = conf.ipam.ranges.iter().map(|set| set[0].subnet.to_string()).collect();
    assert_eq!(subnets, ["10.244.3.0/24", "fd00:10:244:3::/64"]);
    assert_eq!(conf.ipam.data_dir, data_dir);
    assert_eq!(list["plugins"][0]["capabilities"]["portMappings"], true);

    // The installed binary is itself an installer: it copies itself (what a DaemonSet pod restarting
    // after an upgrade does), here with the 1.1.0 conflist.
    let output = Command::new(&binary)
        .args(["install", "--bin-dir", bin_dir.to_str().unwrap(), "--conf-dir", conf_dir.to_str().unwrap()])
        .args(["--pod-cidr", "10.244.3.0/24", "--cni-version", "1.1.0", "--bridge", "kbr0"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(std::fs::read(&binary).unwrap(), std::fs::read(KEEL_CNI).unwrap());
    assert_eq!(entries(&bin_dir), ["keel-cni"]);
    let list: Value =
        serde_json::from_slice(&std::fs::read(conf_dir.join("10-keel.conflist")).unwrap()).unwrap();
    let conf = &plugin_confs(&list)[0];
    assert_eq!((conf.cni_version, conf.bridge.bridge.as_str()), (Version::V1_1_0, "kbr0"));
}

#[test]
fn bad_input_is_a_clear_error_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bin_dir = dir.path().join("bin");
    let conf_dir = dir.path().join("net.d");
    let dirs = ["--bin-dir", bin_dir.to_str().unwrap(), "--conf-dir", conf_dir.to_str().unwrap()];
    let cases: [(&[&str], &str); 5] = [
        (&["--pod-cidr", "10.244.3.0/33"], "invalid --pod-cidr \"10.244.3.0/33\""),
        (&["--pod-cidr", "10.244.3.7/24"], "host bits are set"),
        (&["--pod-cidr", "10.244.3.0/24", "--cni-version", "0.3.1"], "invalid --cni-version"),
        (&["--pod-cidr", "10.244.3.0/24", "--cluster-cidr", "everything"], "invalid --cluster-cidr"),
        (&[], "--pod-cidr is required"),
    ];
    for (args, expected) in cases {
        let output = install(&[&dirs[..], args].concat());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!bin_dir.exists() && !conf_dir.exists(), "{args:?} wrote something");
    }
    let output = install(&["--help"]);
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("usage: keel-cni install"));
}
