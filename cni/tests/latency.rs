//! A measurement, not a test (ignored by default; the formal benchmark is `cargo xtask bench cni`):
//! ADD and DEL latency of the keel-cni binary beside the reference bridge + host-local plugins on the
//! same configuration (ipMasq false), each run as a runtime runs it — a process started inside a node
//! namespace — for pods in fresh namespaces, rounds interleaved; plus how long after keel-cni's DEL
//! returned the retired veth pair is gone from the kernel.
//!
//! `cargo nextest run -p keel-cni --test latency --run-ignored only --no-capture`; set `KEEL_CNI_BIN` to
//! measure another build of the binary (e.g. target/release/keel-cni).

mod common;

use std::time::{Duration, Instant};

use common::{cni, netns};
use keel_cni::dataplane::kernel::Kernel;
use keel_cni::dataplane::{Dataplane, TOMBSTONE_PREFIX, host_veth_name};
use keel_testbed::NetNs;
use serde_json::json;

const ROUNDS: usize = 20;

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1e3)
}

/// Runs `command` of `plugin` for `container` in `pod` and returns how long the caller waited.
fn timed(
    node: &NetNs,
    plugin: &str,
    command: &str,
    container: &str,
    pod: &NetNs,
    conf: &serde_json::Value,
) -> Duration {
    let netns = pod.path().to_str().unwrap();
    let vars = common::env(command, container, netns, "eth0");
    let start = Instant::now();
    let run = common::run_in(node, plugin, &vars, conf.to_string().as_bytes());
    let elapsed = start.elapsed();
    assert_eq!(run.code, 0, "{plugin} {command}: {}", run.stdout);
    elapsed
}

#[test]
#[ignore = "a measurement: run with --run-ignored only --no-capture"]
fn add_and_del_latency_beside_the_reference() {
    let bin = std::env::var("KEEL_CNI_BIN").unwrap_or_else(|_| common::BIN.to_owned());
    println!("keel-cni binary: {bin}");
    let data = tempfile::tempdir().unwrap();
    let keel_node = netns("keel");
    let reference_node = netns("ref");
    let keel_conf = json!({
        "cniVersion": "1.0.0", "name": "lat", "type": "keel-cni", "bridge": "cni0", "isGateway": true,
        "isDefaultGateway": true, "hairpinMode": true, "ipMasq": false,
        "ipam": {"subnet": "10.244.1.0/24", "dataDir": data.path().join("keel")},
    });
    let mut reference_conf = keel_conf.clone();
    reference_conf["type"] = json!("bridge");
    reference_conf["ipam"]["type"] = json!("host-local");
    reference_conf["ipam"]["dataDir"] = json!(data.path().join("reference"));
    let (mut keel_add, mut keel_del, mut keel_gone) = (Vec::new(), Vec::new(), Vec::new());
    let (mut reference_add, mut reference_del) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let container = format!("lat{round}");
        let pod = netns("pod");
        reference_add.push(timed(
            &reference_node,
            "/usr/lib/cni/bridge",
            "ADD",
            &container,
            &pod,
            &reference_conf,
        ));
        reference_del.push(timed(
            &reference_node,
            "/usr/lib/cni/bridge",
            "DEL",
            &container,
            &pod,
            &reference_conf,
        ));
        let pod = netns("pod");
        keel_add.push(timed(&keel_node, &bin, "ADD", &container, &pod, &keel_conf));
        let host = host_veth_name(&container, "eth0");
        let index = keel_node.run(|| Kernel::new().host_link(&host).unwrap().unwrap().index).unwrap();
        let tombstone = format!("{TOMBSTONE_PREFIX}{index:x}");
        keel_del.push(timed(&keel_node, &bin, "DEL", &container, &pod, &keel_conf));
        let start = Instant::now();
        keel_node
            .run(|| {
                let mut kernel = Kernel::new();
                while kernel.host_link(&tombstone).unwrap().is_some() {
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
            .unwrap();
        keel_gone.push(start.elapsed());
    }
    let _ = cni;
    let mut spawn = Vec::new();
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let run = common::run_in(&keel_node, "/bin/true", &[], b"");
        spawn.push(start.elapsed());
        assert_eq!(run.code, 0);
    }
    println!("baseline: starting /bin/true the same way: {} (median)", ms(median(&mut spawn)));
    let (ka, kd, ra, rd) = (
        median(&mut keel_add),
        median(&mut keel_del),
        median(&mut reference_add),
        median(&mut reference_del),
    );
    println!("rounds: {ROUNDS} (interleaved; each a process started inside a node namespace)");
    println!(
        "ADD median: keel-cni {} / reference {} = {:.2}x",
        ms(ka),
        ms(ra),
        ka.as_secs_f64() / ra.as_secs_f64()
    );
    println!(
        "DEL median: keel-cni {} / reference {} = {:.2}x",
        ms(kd),
        ms(rd),
        kd.as_secs_f64() / rd.as_secs_f64()
    );
    println!("keel-cni DEL: retired pair gone {} (median) after DEL returned", ms(median(&mut keel_gone)));
}

/// Why keel-cni's netlink is synchronous: the cost of getting a first answer (link `lo`) from a fresh
/// socket, synchronously versus through rtnetlink on a current-thread tokio runtime, in a fresh
/// namespace each time (what one plugin invocation pays).
#[test]
#[ignore = "a measurement: run with --run-ignored only --no-capture"]
fn first_netlink_answer_sync_versus_tokio() {
    use futures::TryStreamExt;
    use keel_cni::netlink::Socket;
    use netlink_packet_route::RouteNetlinkMessage;
    use netlink_packet_route::link::{LinkAttribute, LinkMessage};

    let node = netns("node");
    let (mut sync, mut tokio_runtime) = (Vec::new(), Vec::new());
    node.run(|| {
        for _ in 0..ROUNDS * 10 {
            let start = Instant::now();
            let mut socket = Socket::open().unwrap();
            let mut request = LinkMessage::default();
            request.attributes.push(LinkAttribute::IfName("lo".into()));
            let answers =
                socket.request(|| "get lo".into(), RouteNetlinkMessage::GetLink(request), 0).unwrap();
            assert_eq!(answers.len(), 1);
            sync.push(start.elapsed());

            let start = Instant::now();
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let (connection, handle, _) = rtnetlink::new_connection().unwrap();
                tokio::spawn(connection);
                let link =
                    handle.link().get().match_name("lo".to_owned()).execute().try_next().await.unwrap();
                assert!(link.is_some());
            });
            drop(runtime);
            tokio_runtime.push(start.elapsed());
        }
    })
    .unwrap();
    println!(
        "first answer from a fresh socket: synchronous {} / rtnetlink on a current-thread tokio runtime {} (medians of {})",
        ms(median(&mut sync)),
        ms(median(&mut tokio_runtime)),
        ROUNDS * 10
    );
}
