//! Acceptance: 100 concurrent ADDs (separate keel-cni processes) give 100 distinct addresses; 100
//! concurrent DELs release them all; GC releases the allocations of attachments that are gone.
//!
//! The processes are started first and then released together: each waits for its configuration on
//! stdin, which is written to all of them only once all are running.

use crate::runner;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::IpAddr;
use std::path::Path;

use keel_testbed::{NetNs, unique_prefix};
use runner::{Invocation, KEEL_CNI, allocations, finish, run, spawn};
use serde_json::{Value, json};

const PODS: usize = 100;
const NETWORK: &str = "concurrent";

fn conf(version: &str, data_dir: &Path) -> Value {
    json!({"cniVersion": version, "name": NETWORK, "type": "keel-cni", "bridge": "cni0", "isGateway": true,
           "ipam": {"subnet": "10.33.0.0/24", "dataDir": data_dir}})
}

/// Runs `command` for every pod at once: all processes spawned (each blocks reading stdin), then every
/// stdin written and closed, then all answers collected.
fn all_at_once(node: &NetNs, command: &str, pods: &[NetNs], ids: &[String], conf: &Value) -> Vec<Value> {
    let mut children: Vec<_> = pods
        .iter()
        .zip(ids)
        .map(|(pod, id)| {
            let call =
                Invocation { command, container_id: id, netns: Some(pod.path()), ifname: "eth0", conf };
            spawn(node.fd(), Path::new(KEEL_CNI), &call)
        })
        .collect();
    let text = conf.to_string();
    for child in &mut children {
        let mut stdin = child.stdin.take().expect("piped stdin");
        stdin.write_all(text.as_bytes()).expect("write the configuration");
    }
    children
        .into_iter()
        .zip(ids)
        .map(|(child, id)| finish(child, conf).ok(&format!("{command} {id}")))
        .collect()
}

fn first_address(result: &Value) -> IpAddr {
    let text = result["ips"][0]["address"].as_str().unwrap_or_else(|| panic!("no address in {result}"));
    text.split('/').next().unwrap().parse().unwrap()
}

#[test]
fn a_hundred_concurrent_adds_get_distinct_addresses_and_dels_release_them() {
    keel_testbed::require_root().unwrap();
    let prefix = unique_prefix();
    let node = NetNs::create(&format!("{prefix}-node")).unwrap();
    let pods: Vec<NetNs> = (0..PODS).map(|i| NetNs::create(&format!("{prefix}-p{i}")).unwrap()).collect();
    let ids: Vec<String> = (0..PODS).map(|i| format!("concurrent-{i:03}")).collect();
    let data_dir = tempfile::tempdir().unwrap();
    let conf = conf("1.0.0", data_dir.path());

    let results = all_at_once(&node, "ADD", &pods, &ids, &conf);
    let addresses: BTreeSet<IpAddr> = results.iter().map(first_address).collect();
    assert_eq!(addresses.len(), PODS, "{PODS} ADDs gave {} distinct addresses", addresses.len());
    let held = allocations(data_dir.path(), NETWORK);
    let expected: BTreeMap<IpAddr, String> =
        results.iter().map(first_address).zip(ids.iter().cloned()).collect();
    assert_eq!(held, expected, "the data dir holds what the results name, one owner each");
    // Each pod has its address on eth0 (the kernel's view, not only the IPAM's).
    for (pod, result) in pods.iter().zip(&results).take(3) {
        let address = first_address(result);
        let output = pod.command("ip").args(["-o", "addr", "show", "dev", "eth0"]).output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.contains(&format!("inet {address}/24")), "{address} not on eth0: {text}");
    }

    all_at_once(&node, "DEL", &pods, &ids, &conf);
    let left = allocations(data_dir.path(), NETWORK);
    assert!(left.is_empty(), "{} allocations left after {PODS} DELs: {left:?}", left.len());
}

#[test]
fn gc_releases_the_allocations_of_attachments_that_are_gone() {
    keel_testbed::require_root().unwrap();
    let prefix = unique_prefix();
    let node = NetNs::create(&format!("{prefix}-node")).unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    let conf = conf("1.1.0", data_dir.path());
    let ids: Vec<String> = (0..4).map(|i| format!("gc-{i}")).collect();
    let mut pods: Vec<Option<NetNs>> = Vec::new();
    for id in &ids {
        let pod = NetNs::create(&format!("{prefix}-{id}")).unwrap();
        let call = Invocation {
            command: "ADD",
            container_id: id,
            netns: Some(pod.path()),
            ifname: "eth0",
            conf: &conf,
        };
        run(node.fd(), Path::new(KEEL_CNI), &call).ok(&format!("ADD {id}"));
        pods.push(Some(pod));
    }
    // Two pods vanish without a DEL (a runtime crashed): their namespaces go, their allocations leak.
    pods[1] = None;
    pods[3] = None;
    assert_eq!(allocations(data_dir.path(), NETWORK).len(), 4);

    let mut gc_conf = conf.clone();
    gc_conf["cni.dev/valid-attachments"] =
        json!([{"containerID": ids[0], "ifname": "eth0"}, {"containerID": ids[2], "ifname": "eth0"}]);
    let call = Invocation { command: "GC", container_id: "", netns: None, ifname: "", conf: &gc_conf };
    run(node.fd(), Path::new(KEEL_CNI), &call).ok("GC");
    let owners: BTreeSet<String> = allocations(data_dir.path(), NETWORK).into_values().collect();
    assert_eq!(
        owners,
        BTreeSet::from([ids[0].clone(), ids[2].clone()]),
        "GC kept exactly the valid attachments"
    );

    // GC with no valid attachment releases everything.
    gc_conf["cni.dev/valid-attachments"] = json!([]);
    let call = Invocation { command: "GC", container_id: "", netns: None, ifname: "", conf: &gc_conf };
    run(node.fd(), Path::new(KEEL_CNI), &call).ok("GC of everything");
    assert!(allocations(data_dir.path(), NETWORK).is_empty());
}
