//! `cargo xtask bench testbed`: what the fixtures every root test uses cost, against iproute2 doing the
//! same work. Tests make many hosts and run many commands in them, so this is the testbed's overhead.
//!
//! - host_add: a new host on a fabric (namespace, veth into the bridge with its peer made in the host,
//!   lo and eth0 up, address, default route) through the testbed's netlink, vs the same steps as the
//!   fewest `ip` commands.
//! - exec: run `true` inside a host: the testbed's pre_exec setns vs `ip netns exec` vs
//!   `nsenter --net=`.
//! - netns_create: creating a named namespace alone, the part of host_add that is the kernel's.
//! - enter: run a closure inside a host (thread + setns); no peer runs a closure, so its CPU time per
//!   operation is reported beside it.

use std::process::Command;

use keel_testbed::bench::{self, Report, Samples};
use keel_testbed::{Fabric, fabric};

fn main() {
    keel_testbed::require_root().expect("benchmarks need root");
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(30);
    let fabric = Fabric::new().expect("fabric");
    let mut report = Report::new("testbed");

    // host_add: keep the hosts until the end, so both sides add to a fabric of the same size.
    let mut hosts = Vec::new();
    let mut peer_hosts = Vec::new();
    let (keel, peer) = bench::interleaved(
        rounds,
        |round| hosts.push(fabric.add_host(&format!("k{round}")).expect("add host")),
        |round| peer_hosts.push(add_host_with_ip(&fabric, round)),
    );
    report.compare("host_add", "add a host to the fabric", &keel, "iproute2", &peer);
    for name in &peer_hosts {
        keel_testbed::netns::remove_named(name);
    }

    // How much of host_add is creating the namespace alone (the kernel's work; no netlink, no process).
    let mut create = Samples::default();
    for round in 0..rounds {
        let name = format!("{}-n{round}", fabric.prefix());
        let (ns, took) = bench::time(|| keel_testbed::NetNs::create(&name).expect("create netns"));
        create.push(took);
        drop(ns);
    }
    report.figure(
        "netns_create_ms",
        "create a named network namespace: median ms",
        &bench::ms(create.median()),
    );

    let host = &hosts[0];
    let nsenter_arg = format!("--net={}", host.ns().path().display());
    let (keel, ip_netns) = bench::interleaved(
        rounds,
        |_| run(&mut host.command("true")),
        |_| run(Command::new("ip").args(["netns", "exec", host.name(), "true"])),
    );
    let (_, nsenter) =
        bench::interleaved(rounds, |_| {}, |_| run(Command::new("nsenter").args([&nsenter_arg, "true"])));
    report.compare("exec", "run `true` in a host", &keel, "ip_netns_exec", &ip_netns);
    report.compare("exec_vs_nsenter", "run `true` in a host", &keel, "nsenter", &nsenter);

    let cpu_before = bench::cpu_time();
    let mut enter = Samples::default();
    for _ in 0..rounds * 10 {
        enter.push(bench::time(|| host.run(|| std::hint::black_box(1)).expect("enter")).1);
    }
    let cpu_per_op = (bench::cpu_time() - cpu_before) / u32::try_from(rounds * 10).unwrap_or(1);
    report.figure("enter_ms", "run a closure in a host: median ms", &bench::ms(enter.median()));
    report.figure("enter_cpu_ms", "run a closure in a host: CPU ms per op", &bench::ms(cpu_per_op));

    drop(hosts);
    report.print();
}

fn run(command: &mut Command) {
    let status = command.status().expect("spawn");
    assert!(status.success(), "{command:?} failed");
}

/// The same host as `Fabric::add_host`, made with the fewest `ip` commands (the veth's peer created in
/// place, attached and up in one call, as the testbed does); returns its namespace name.
fn add_host_with_ip(fabric: &Fabric, round: usize) -> String {
    let name = format!("{}-p{round}", fabric.prefix());
    let fab = fabric.ns().name();
    let veth = format!("pv{round}");
    // Addresses from the top of the /16, away from the testbed's own hosts.
    let address = format!("198.18.{}.{}/16", 200 + round / 250, 1 + round % 250);
    let gateway = fabric::GATEWAY.to_string();
    let steps: Vec<Vec<&str>> = vec![
        vec!["netns", "add", &name],
        vec![
            "-n",
            fab,
            "link",
            "add",
            &veth,
            "master",
            fabric::BRIDGE,
            "up",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &name,
        ],
        vec!["-n", &name, "link", "set", "lo", "up"],
        vec!["-n", &name, "link", "set", "eth0", "up"],
        vec!["-n", &name, "address", "add", &address, "dev", "eth0"],
        vec!["-n", &name, "route", "add", "default", "via", &gateway],
    ];
    for step in steps {
        run(Command::new("ip").args(step));
    }
    name
}
