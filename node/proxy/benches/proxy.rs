//! What keel-proxy's nftables syncs cost at scale, in testbed node namespaces (as root):
//!
//! - render: the full transaction of N Services × 2 endpoints computed from the tracker's state;
//! - full_sync: that transaction committed over netlink (encoding included) vs the same text
//!   through `nft -f` (one process, which also parses it), each in a namespace of its own, the table
//!   already holding the previous round's ruleset (a full sync replaces it);
//! - endpoint_change: one Service's endpoint replaced at N Services, from the tracker seeing the
//!   new EndpointSlice to the partial transaction committed, vs `nft -f` of the same partial
//!   transaction's text.
//!
//! CPU time (user + system of this process, which includes the kernel's work inside sendmsg, and of
//! waited-for children for `nft`) is given beside wall time.
//!
//! Then the data path (proxy/datapath.rs): connections to a ClusterIP vs to a pod IP, and the first
//! connection at N vs 10 Services; and keel-proxy beside the upstream kube-proxy v1.34, both fed by
//! keel-apiserver (proxy/upstream.rs): full sync and endpoint change as seen through the kernel, CPU
//! and RSS.
//!
//! Usage: `cargo xtask bench proxy` or `cargo bench -p keel-proxy --bench proxy
//! [-- SERVICES ROUNDS [DATAPATH_ROUNDS CONNECTIONS [UPSTREAM_CHANGES]]]` (10000 Services, 5 sync
//! rounds, 20 data-path rounds of 2000 connections, 10 endpoint changes against kube-proxy by default;
//! a count of 0 skips that part). The kube-proxy part needs keel-apiserver's release binary
//! (`KEEL_APISERVER_BIN`, which `cargo xtask bench proxy` builds).

#[path = "proxy/datapath.rs"]
mod datapath;
#[path = "proxy/upstream.rs"]
mod upstream;

use std::io::Write;
use std::process::Stdio;

use keel_proxy::fixtures::{ready, service, slice};
use keel_proxy::nft::netlink::NftNetlink;
use keel_proxy::nft::{Apply, Family, RenderConfig, Renderer, Transaction};
use keel_proxy::tracker::{ChangeTracker, TrackerConfig};
use keel_testbed::bench::{self, Report, Samples};
use keel_testbed::{Fabric, Host};

fn main() {
    keel_testbed::require_root().expect("benchmarks need root");
    let mut args = std::env::args().skip(1).filter_map(|a| a.parse::<usize>().ok());
    let services = args.next().unwrap_or(10_000);
    let rounds = args.next().unwrap_or(5);
    let datapath_rounds = args.next().unwrap_or(20);
    let connections = args.next().unwrap_or(2000);
    let upstream_changes = args.next().unwrap_or(10);
    let fabric = Fabric::new().expect("fabric");
    let (netlink_node, nft_node) =
        (fabric.add_host("netlink").expect("host"), fabric.add_host("nft").expect("host"));
    let mut report = Report::new("proxy");
    report.figure("services", "Services (2 endpoints each)", &services.to_string());

    let mut tracker = ChangeTracker::new(TrackerConfig { node_name: "node-a".into(), proxy_name: None });
    for index in 0..services {
        let name = format!("svc{index}");
        tracker.update_service(&service(&name, &cluster_ip(index), &[("http", "TCP", 80, None)]));
        tracker.update_slice(&endpoints(&name, index, 0));
    }
    tracker.checkout();
    let config =
        RenderConfig { cluster_cidrs: vec!["10.244.0.0/16".parse().unwrap()], nodeport_addresses: vec![] };
    let mut renderer = Renderer::new(Family::Ip, config.clone());

    // Render alone.
    let mut render = Samples::default();
    let mut render_cpu = Samples::default();
    let mut full = Transaction::default();
    for _ in 0..rounds {
        let cpu = bench::cpu_time();
        let (transaction, wall) = bench::time(|| {
            let mut transaction = Transaction::default();
            renderer.full(tracker.state(), &mut transaction);
            transaction
        });
        render_cpu.push(bench::cpu_time() - cpu);
        render.push(wall);
        full = transaction;
    }
    report.figure("render_ms", "render of the full transaction", &bench::ms(render.median()));
    report.figure("render_cpu_ms", "  cpu", &bench::ms(render_cpu.median()));
    report.figure("ops", "  operations", &full.ops.len().to_string());
    let script = full.to_string();

    // Full sync: netlink vs nft -f, interleaved.
    let mut edge = NftNetlink::new();
    let (mut netlink_cpu, mut nft_cpu) = (Samples::default(), Samples::default());
    let (netlink_wall, nft_wall) = bench::interleaved(
        rounds,
        |_| {
            let cpu = bench::cpu_time();
            netlink_node.run(|| edge.apply(&full)).expect("enter").expect("full sync over netlink");
            netlink_cpu.push(bench::cpu_time() - cpu);
        },
        |_| {
            let cpu = bench::cpu_time();
            nft_file(&nft_node, &script);
            nft_cpu.push(bench::cpu_time() - cpu);
        },
    );
    report.compare("full_sync", "full sync (netlink vs nft -f)", &netlink_wall, "nft", &nft_wall);
    report.figure("full_sync_cpu_ms", "  cpu, netlink", &bench::ms(netlink_cpu.median()));
    report.figure("full_sync_nft_cpu_ms", "  cpu, nft -f", &bench::ms(nft_cpu.median()));

    // One endpoint change: tracker → render → commit, vs nft -f of the same partial transaction.
    let (mut change, mut change_cpu, mut nft_change) =
        (Samples::default(), Samples::default(), Samples::default());
    let (mut change_render, mut change_commit) = (Samples::default(), Samples::default());
    for round in 0..rounds * 4 {
        let index = (round * 7919) % services;
        let name = format!("svc{index}");
        let cpu = bench::cpu_time();
        let (partial, wall) = bench::time(|| {
            let (partial, render) = bench::time(|| {
                tracker.update_slice(&endpoints(&name, index, round + 1));
                let changes = tracker.checkout();
                let mut partial = Transaction::default();
                renderer.partial(tracker.state(), &changes.ports, &mut partial);
                partial
            });
            change_render.push(render);
            // The commit alone, timed inside the namespace's thread.
            let commit = netlink_node.run(|| bench::time(|| edge.apply(&partial))).expect("enter");
            commit.0.expect("partial sync over netlink");
            change_commit.push(commit.1);
            partial
        });
        change_cpu.push(bench::cpu_time() - cpu);
        change.push(wall);
        // The peer applies the same change to its copy of the ruleset.
        let text = partial.to_string();
        nft_change.push(bench::time(|| nft_file(&nft_node, &text)).1);
    }
    report.compare("endpoint_change", "one endpoint change (tracker to commit)", &change, "nft", &nft_change);
    report.figure("endpoint_change_cpu_ms", "  cpu, keel", &bench::ms(change_cpu.median()));
    report.figure(
        "endpoint_change_render_ms",
        "  of which tracker and render",
        &bench::ms(change_render.median()),
    );
    report.figure(
        "endpoint_change_commit_ms",
        "  of which the netlink commit",
        &bench::ms(change_commit.median()),
    );
    if datapath_rounds > 0 {
        datapath::measure(services, datapath_rounds, connections, &mut report);
    }
    if upstream_changes > 0 {
        upstream::measure(services, upstream_changes, &mut report);
    }
    report.print();
}

/// 10.96.0.0/16 onward: one ClusterIP per Service.
fn cluster_ip(index: usize) -> String {
    format!("10.{}.{}.{}", 96 + index / 65536, (index / 256) % 256, index % 256)
}

/// The EndpointSlice of Service `name`: two endpoints, the second changing with `generation`.
fn endpoints(name: &str, index: usize, generation: usize) -> k8s_openapi::api::discovery::v1::EndpointSlice {
    let pod = |n: usize| format!("10.{}.{}.{}", 244 + n / 65536 % 8, (n / 256) % 256, n % 256);
    slice(
        &format!("{name}-1"),
        name,
        &[("http", "TCP", 8080)],
        vec![ready(&pod(index * 2), "node-a"), ready(&pod(index * 2 + 1 + generation * 100_003), "node-b")],
    )
}

/// `nft -f -` inside `host` with `script` on stdin.
fn nft_file(host: &Host, script: &str) {
    let mut child: std::process::Child = host
        .command("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn nft");
    child.stdin.take().expect("stdin").write_all(script.as_bytes()).expect("write the script");
    let output = child.wait_with_output().expect("wait for nft");
    assert!(output.status.success(), "nft -f: {}", String::from_utf8_lossy(&output.stderr));
}
