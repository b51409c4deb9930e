//! What keel-cni's nftables edge costs per CNI invocation (each one opens its own netlink socket, as the
//! binary does), in a testbed node namespace:
//!
//! - masq_setup: `ensure_masquerade` for a new bridge (a chain lookup, a rule dump, one transaction);
//! - masq_present: `ensure_masquerade` when in place (one chain lookup) — the cost on every ADD;
//! - hostport_add: `add_port_mappings` of one TCP mapping (one transaction: DNAT + hairpin rules), vs
//!   `nft add rule` of the DNAT rule alone (what running the CLI would cost, one process);
//! - hostport_remove: `remove_port_mappings` (a rule dump of the table and one transaction), the table
//!   holding the other attachments' rules (100 at first); hostport_remove_none: nothing to remove.
//!
//! "with the socket's close": closing an nftables netlink socket makes the kernel finish releasing
//! what the last transactions deleted, after an RCU grace period (nf_tables_trans_destroy_flush_work
//! on NETLINK_URELEASE); a CNI process pays it at exit.
//!
//! Usage: `cargo bench -p keel-cni --bench nft [-- ROUNDS]` (as root; 100 rounds by default).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use ipnet::IpNet;
use keel_cni::nft::NftFirewall;
use keel_cni::plugin::Firewall;
use keel_cni::spec::{Attachment, PortMapping};
use keel_testbed::bench::{self, Report, Samples};
use keel_testbed::{Fabric, Host};

fn main() {
    keel_testbed::require_root().expect("benchmarks need root");
    let rounds: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(100);
    let fabric = Fabric::new().expect("fabric");
    let node = fabric.add_host("node").expect("node");
    let mut report = Report::new("cni_nft");
    let sources: Vec<IpNet> = vec!["10.244.1.0/24".parse().unwrap()];
    let cluster: Vec<IpNet> = vec!["10.244.0.0/16".parse().unwrap()];

    // New bridges on a node of their own, so the hostPort figures below see a table with one bridge.
    let other_node = fabric.add_host("other").expect("other node");
    let setup = in_node(&other_node, rounds, |firewall, round| {
        let bridge = format!("br{round}");
        firewall.ensure_masquerade(&bridge, &sources, &cluster).expect("ensure_masquerade (setup)");
    });
    figure(&mut report, "masq_setup", "ensure_masquerade, new bridge", &setup);

    let present = in_node(&node, rounds, |firewall, _| {
        firewall.ensure_masquerade("br0", &sources, &cluster).expect("ensure_masquerade (present)");
    });
    figure(&mut report, "masq_present", "ensure_masquerade, in place", &present);

    let owner =
        |round: usize| Attachment { container_id: format!("bench{round}"), ifname: "eth0".to_owned() };
    let pod_ip = |round: usize| IpAddr::V4(Ipv4Addr::new(10, 244, 1, (round % 250) as u8 + 2));
    let mapping = |round: usize| PortMapping {
        host_port: 20000 + round as u16,
        container_port: 80,
        protocol: "tcp".to_owned(),
        host_ip: None,
    };
    let add = in_node(&node, rounds, |firewall, round| {
        firewall
            .add_port_mappings(&owner(round), "cni0", &[pod_ip(round)], &[mapping(round)])
            .expect("add_port_mappings");
    });
    figure(&mut report, "hostport_add", "add_port_mappings, one TCP mapping", &add);

    let remove = in_node(&node, rounds, |firewall, round| {
        firewall.remove_port_mappings(&owner(round)).expect("remove_port_mappings");
    });
    figure(&mut report, "hostport_remove", "remove_port_mappings", &remove);
    let nothing = in_node(&node, rounds, |firewall, round| {
        firewall.remove_port_mappings(&owner(round)).expect("remove_port_mappings");
    });
    figure(&mut report, "hostport_remove_none", "remove_port_mappings, none to remove", &nothing);
    let cpu_before = bench::cpu_time();
    let mut cli = Samples::default();
    for round in 0..rounds {
        let rule = format!(
            "add rule inet keel-cni hostports meta nfproto ipv4 tcp dport {} dnat ip to {}:80 comment \"cli{round}\"",
            30000 + round,
            pod_ip(round)
        );
        let (status, took) = bench::time(|| node.command("nft").arg(&rule).status().expect("run nft"));
        assert!(status.success(), "{rule}");
        cli.push(took);
    }
    let cli_cpu = (bench::cpu_time() - cpu_before) / rounds as u32;
    report.compare("hostport_add_vs_cli", "add_port_mappings vs `nft add rule`", &add.1, "nft_cli", &cli);
    report.figure("nft_cli_cpu_us", "  nft CLI CPU µs per call (with its process)", &us(cli_cpu));

    report.print();
}

/// Runs `op` for `rounds` rounds on a thread inside the node, each with a new firewall (a new socket,
/// as each CNI process has); the samples of the call alone and of the call and the socket's close,
/// and the CPU time per call.
fn in_node(
    node: &Host,
    rounds: usize,
    op: impl Fn(&mut NftFirewall, usize) + Send + Sync,
) -> (Samples, Samples, Duration) {
    node.run(|| {
        let cpu_before = bench::cpu_time();
        let (mut call, mut with_close) = (Samples::default(), Samples::default());
        for round in 0..rounds {
            let start = std::time::Instant::now();
            let mut firewall = NftFirewall::new();
            op(&mut firewall, round);
            call.push(start.elapsed());
            drop(firewall);
            with_close.push(start.elapsed());
        }
        (call, with_close, (bench::cpu_time() - cpu_before) / rounds as u32)
    })
    .expect("enter the node")
}

fn figure(
    report: &mut Report,
    key: &str,
    what: &str,
    (call, with_close, cpu): &(Samples, Samples, Duration),
) {
    report.figure(&format!("{key}_us"), &format!("{what} (median µs)"), &us(call.median()));
    report.figure(&format!("{key}_p90_us"), "  p90 µs", &us(call.percentile(90.0)));
    report.figure(
        &format!("{key}_close_us"),
        "  with the socket's close (median µs)",
        &us(with_close.median()),
    );
    report.figure(&format!("{key}_cpu_us"), "  CPU µs per call", &us(*cpu));
}

fn us(d: Duration) -> String {
    format!("{:.0}", d.as_secs_f64() * 1e6)
}
