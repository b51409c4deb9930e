//! keel-cni's IPAM beside the reference host-local plugin (/usr/lib/cni/host-local, spec ≤ 1.0.0):
//! delegation to it (ADD, CHECK, DEL, its errors relayed) and one data directory shared by both, so
//! a node moving from bridge+host-local to keel-cni keeps its allocations.

use std::collections::BTreeMap;
use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use keel_cni::ipam::{self, Delegated, HostLocal};
use keel_cni::plugin::Ipam;
use keel_cni::skel::CmdArgs;
use keel_cni::spec::error;
use keel_cni::spec::{CniResult, NetConf};
use serde_json::json;

const REFERENCE_DIR: &str = "/usr/lib/cni";

fn reference_path() -> Vec<PathBuf> {
    let plugin = Path::new(REFERENCE_DIR).join("host-local");
    assert!(plugin.is_file(), "{} is missing: apt-get install containernetworking-plugins", plugin.display());
    vec![PathBuf::from("/nonexistent/cni/bin"), PathBuf::from(REFERENCE_DIR)]
}

fn conf(version: &str, data_dir: &Path, plugin: Option<&str>, subnet: &str) -> NetConf {
    let mut ipam = json!({"subnet": subnet, "dataDir": data_dir, "routes": [{"dst": "0.0.0.0/0"}]});
    if let Some(plugin) = plugin {
        ipam["type"] = json!(plugin);
    }
    let value = json!({"cniVersion": version, "name": "kube", "type": "keel-cni", "ipam": ipam});
    NetConf::parse(value.to_string().as_bytes()).unwrap()
}

fn args(container_id: &str) -> CmdArgs {
    CmdArgs {
        container_id: container_id.into(),
        netns: Some("/var/run/netns/pod".into()),
        ifname: "eth0".into(),
        args: vec![("IgnoreUnknown".into(), "1".into()), ("K8S_POD_NAME".into(), "web".into())],
        path: reference_path(),
    }
}

fn address(result: &CniResult) -> IpAddr {
    result.ips[0].address.addr()
}

/// The network directory: address files with their content (links and cursors left out).
fn allocations(data_dir: &Path) -> BTreeMap<String, String> {
    fs::read_dir(data_dir.join("kube"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.file_name().unwrap().to_str().unwrap().parse::<IpAddr>().is_ok())
        .map(|path| {
            (path.file_name().unwrap().to_str().unwrap().to_owned(), fs::read_to_string(&path).unwrap())
        })
        .collect()
}

#[test]
fn delegation_runs_host_local_for_add_check_and_del() {
    let dir = tempfile::tempdir().unwrap();
    let conf = conf("1.0.0", dir.path(), Some("host-local"), "10.244.1.0/24");
    let mut ipam = ipam::for_conf(&conf);
    let result = ipam.allocate(&args("c1"), &conf).unwrap();
    assert_eq!(
        result.to_json(conf.cni_version),
        json!({"cniVersion": "1.0.0", "ips": [{"address": "10.244.1.2/24", "gateway": "10.244.1.1"}],
               "routes": [{"dst": "0.0.0.0/0"}]})
    );
    assert_eq!(allocations(dir.path()), BTreeMap::from([("10.244.1.2".into(), "c1\r\neth0".into())]));
    ipam.check(&args("c1"), &conf, &[address(&result)]).unwrap();
    ipam.release(&args("c1"), &conf).unwrap();
    assert!(allocations(dir.path()).is_empty());
    ipam.release(&args("c1"), &conf).unwrap();

    // host-local's own error, relayed as it wrote it.
    let err = ipam.check(&args("c1"), &conf, &[]).unwrap_err();
    assert_eq!(err.msg, "host-local: Failed to find address added by container c1");
    assert_ne!(err.code, error::DELEGATE_FAILED);
}

#[test]
fn delegation_relays_host_locals_errors_and_a_missing_plugin_is_code_103() {
    let dir = tempfile::tempdir().unwrap();
    let conf = conf("1.0.0", dir.path(), Some("host-local"), "10.0.0.0/30");
    let mut ipam = Delegated::new("host-local");
    ipam.allocate(&args("c1"), &conf).unwrap();
    let err = ipam.allocate(&args("c2"), &conf).unwrap_err();
    assert_eq!(
        err.msg,
        "failed to allocate for range 0: no IP addresses available in range set: 10.0.0.1-10.0.0.2"
    );

    let err = Delegated::new("no-such-ipam").allocate(&args("c3"), &conf).unwrap_err();
    assert_eq!(err.code, error::DELEGATE_FAILED);
    assert_eq!(
        err.msg,
        r#"failed to find plugin "no-such-ipam" in path [/nonexistent/cni/bin /usr/lib/cni]"#
    );
    let err = Delegated::new("../host-local").allocate(&args("c3"), &conf).unwrap_err();
    assert_eq!(err.code, error::DELEGATE_FAILED);

    // GC and STATUS exist from 1.1.0 on: a no-op for older configurations, else the plugin runs
    // (host-local 1.1.1 does not know them and says so).
    let gc_args = CmdArgs { path: reference_path(), ..CmdArgs::default() };
    ipam.gc(&gc_args, &conf, &[]).unwrap();
    ipam.status(&gc_args, &conf).unwrap();
    let newer = self::conf("1.1.0", dir.path(), Some("host-local"), "10.0.0.0/30");
    let err = ipam.gc(&gc_args, &newer, &[]).unwrap_err();
    assert_ne!(err.code, error::DELEGATE_FAILED, "{err}");
    assert_eq!(allocations(dir.path()).len(), 1, "a failed GC released nothing");
}

#[test]
fn for_conf_picks_the_built_in_ipam_when_no_type_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let conf = conf("1.0.0", dir.path(), None, "10.244.1.0/24");
    let mut no_path = args("c1");
    no_path.path = Vec::new();
    // Nothing to execute: the built-in IPAM needs no CNI_PATH.
    assert_eq!(address(&ipam::for_conf(&conf).allocate(&no_path, &conf).unwrap()).to_string(), "10.244.1.2");
}

#[test]
fn host_local_and_the_built_in_ipam_share_one_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let delegated = conf("1.0.0", dir.path(), Some("host-local"), "10.244.1.0/24");
    let built_in = conf("1.0.0", dir.path(), None, "10.244.1.0/24");
    let mut reference = Delegated::new("host-local");

    // Each skips what the other allocated and continues its round robin.
    assert_eq!(address(&reference.allocate(&args("c1"), &delegated).unwrap()).to_string(), "10.244.1.2");
    assert_eq!(address(&HostLocal.allocate(&args("c2"), &built_in).unwrap()).to_string(), "10.244.1.3");
    assert_eq!(address(&HostLocal.allocate(&args("c3"), &built_in).unwrap()).to_string(), "10.244.1.4");
    assert_eq!(address(&reference.allocate(&args("c4"), &delegated).unwrap()).to_string(), "10.244.1.5");

    // host-local sees the built-in allocations as their containers' own.
    let err = reference.allocate(&args("c2"), &delegated).unwrap_err();
    assert!(err.msg.contains("10.244.1.3 has been allocated to c2"), "{}", err.msg);
    reference.check(&args("c3"), &delegated, &[]).unwrap();
    // ...and the built-in IPAM sees host-local's.
    HostLocal.check(&args("c1"), &built_in, &["10.244.1.2".parse().unwrap()]).unwrap();
    HostLocal.check(&args("c4"), &built_in, &["10.244.1.5".parse().unwrap()]).unwrap();

    // Either releases the other's.
    reference.release(&args("c3"), &delegated).unwrap();
    HostLocal.release(&args("c1"), &built_in).unwrap();
    assert_eq!(
        allocations(dir.path()),
        BTreeMap::from([
            ("10.244.1.3".into(), "c2\r\neth0".into()),
            ("10.244.1.5".into(), "c4\r\neth0".into())
        ])
    );
    let mut names: Vec<String> = fs::read_dir(dir.path().join("kube"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    // c1's address file became the spare; host-local's next allocation ignores it.
    assert_eq!(
        names,
        ["10.244.1.3", "10.244.1.5", "keel-cni.spare", "keel-cni:c2:eth0:0", "last_reserved_ip.0", "lock"]
    );
    assert_eq!(address(&reference.allocate(&args("c5"), &delegated).unwrap()).to_string(), "10.244.1.6");
    reference.release(&args("c5"), &delegated).unwrap();

    // GC through the built-in IPAM frees host-local's leaked allocation too.
    let valid = [keel_cni::spec::Attachment { container_id: "c2".into(), ifname: "eth0".into() }];
    HostLocal.gc(&CmdArgs::default(), &built_in, &valid).unwrap();
    assert_eq!(allocations(dir.path()), BTreeMap::from([("10.244.1.3".into(), "c2\r\neth0".into())]));
}

#[test]
fn host_local_processes_and_built_in_threads_allocating_at_once_never_share_an_address() {
    let dir = tempfile::tempdir().unwrap();
    let delegated = std::sync::Arc::new(conf("1.0.0", dir.path(), Some("host-local"), "10.244.1.0/24"));
    let built_in = std::sync::Arc::new(conf("1.0.0", dir.path(), None, "10.244.1.0/24"));
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(100));
    let threads: Vec<_> = (0..100)
        .map(|i| {
            let (delegated, built_in, barrier) = (delegated.clone(), built_in.clone(), barrier.clone());
            std::thread::spawn(move || {
                let id = format!("c{i}");
                barrier.wait();
                let result = if i % 2 == 0 {
                    Delegated::new("host-local").allocate(&args(&id), &delegated)
                } else {
                    HostLocal.allocate(&args(&id), &built_in)
                };
                (id, address(&result.unwrap()))
            })
        })
        .collect();
    let got: BTreeMap<String, IpAddr> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let distinct: std::collections::BTreeSet<IpAddr> = got.values().copied().collect();
    assert_eq!(distinct.len(), 100);
    let on_disk = allocations(dir.path());
    assert_eq!(on_disk.len(), 100);
    for (id, address) in &got {
        assert_eq!(on_disk[&address.to_string()], format!("{id}\r\neth0"));
    }
}
