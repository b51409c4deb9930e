//! `cargo xtask bench cni [-- ROUNDS]`: keel-cni against the reference chain (containernetworking-plugins'
//! `bridge` with `host-local`) on the same configuration, side by side in one run.
//!
//! Each side has a node namespace of its own; its plugin is executed from a thread that entered that
//! namespace (no nsenter, no pre_exec hook: the spawn is what a runtime's is). Pod namespaces are made
//! before the timed region. Rounds alternate which side goes first.
//!
//! - add / del: one ADD, one DEL, medians; CPU time per operation (the plugin process's, from
//!   rusage of waited-for children). With `ipMasq` false and true (the reference then runs iptables;
//!   keel-cni programs its nftables table over netlink).
//! - del_gone: from the DEL's start until the pod's host veth is really gone from the node: keel-cni's
//!   DEL may leave the veth's destruction (15–26 ms of the kernel's) to a detached child;
//!   del_detached_done: until that child has exited too. The bench is a subreaper, so the detached
//!   child's CPU time is counted in the DEL's.
//! - concurrent_add: 100 ADDs started together (100 processes spawned, then all stdins written): the
//!   wall time until all have answered, and the median of each ADD's own time.
//!
//! The target is keel-cni ≤ 0.2× the reference (ratios ≥ 5 in the table, `*_vs_reference`
//! ≤ 0.20 in the headline).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use keel_testbed::bench::{self, Report, Samples};
use keel_testbed::{NetNs, NetNsFd, unique_prefix};
use serde_json::{Value, json};

/// The binary measured: `KEEL_CNI_BIN` (`cargo xtask bench cni` sets the static release build, as it
/// ships), else the bench profile's build.
fn keel_cni() -> String {
    std::env::var("KEEL_CNI_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_keel-cni").to_owned())
}
const REFERENCE_BRIDGE: &str = "/usr/lib/cni/bridge";
const CNI_PATH: &str = "/usr/lib/cni";
const NETWORK: &str = "bench";
const CONCURRENT: usize = 100;
/// How long a DEL's veth may take to disappear before the bench gives up on it.
const GONE_TIMEOUT: Duration = Duration::from_secs(10);

/// A thread inside a node namespace that runs the jobs it is sent.
struct NodeThread {
    jobs: Option<mpsc::Sender<Box<dyn FnOnce() + Send>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl NodeThread {
    fn new(ns: NetNsFd) -> NodeThread {
        let (jobs, receiver) = mpsc::channel::<Box<dyn FnOnce() + Send>>();
        let thread = std::thread::spawn(move || {
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).expect("enter the node");
            for job in receiver {
                job();
            }
        });
        NodeThread { jobs: Some(jobs), thread: Some(thread) }
    }

    fn call<R: Send + 'static>(&self, f: impl FnOnce() -> R + Send + 'static) -> R {
        let (sender, result) = mpsc::channel();
        let job = Box::new(move || {
            let _ = sender.send(f());
        });
        self.jobs.as_ref().expect("running").send(job).expect("the node thread runs");
        result.recv().expect("the node thread answered")
    }
}

impl Drop for NodeThread {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One side of the comparison: a plugin, its configuration, its node.
struct Side {
    name: &'static str,
    plugin: PathBuf,
    conf: Value,
    thread: NodeThread,
    _node: NetNs,
    _data_dir: tempfile::TempDir,
}

impl Side {
    fn new(name: &'static str, plugin: &str, ip_masq: bool) -> Side {
        let node = NetNs::create(&format!("{}-{name}", unique_prefix())).expect("node namespace");
        let data_dir = tempfile::tempdir().expect("data dir");
        let mut ipam = json!({"subnet": "10.40.0.0/16", "dataDir": data_dir.path()});
        if plugin == REFERENCE_BRIDGE {
            ipam["type"] = json!("host-local");
        }
        let conf = json!({
            "cniVersion": "1.0.0", "name": NETWORK, "type": Path::new(plugin).file_name().unwrap().to_str(),
            "bridge": "cni0", "isGateway": true, "isDefaultGateway": true, "hairpinMode": true,
            "ipMasq": ip_masq, "ipam": ipam,
        });
        let thread = NodeThread::new(node.fd().clone());
        Side { name, plugin: PathBuf::from(plugin), conf, thread, _node: node, _data_dir: data_dir }
    }

    /// Runs one command from the node thread; returns its result, its wall time and its CPU time.
    fn invoke(&self, command: &'static str, id: &str, pod: &Path) -> (Value, Duration, Duration) {
        let (plugin, conf, id, pod) =
            (self.plugin.clone(), self.conf.to_string(), id.to_owned(), pod.to_owned());
        self.thread.call(move || {
            let cpu = bench::cpu_time();
            let start = Instant::now();
            let child = spawn(&plugin, command, &id, &pod);
            let result = answer(child, &conf, command, &id);
            (result, start.elapsed(), bench::cpu_time() - cpu)
        })
    }

    /// The host veth's interface index in the node (looked up outside any timed region).
    fn ifindex(&self, veth: &str) -> u32 {
        let name = std::ffi::CString::new(veth).expect("a link name");
        // SAFETY: if_nametoindex reads the NUL-terminated name we own; 0 means no such link.
        let index = self.thread.call(move || unsafe { libc::if_nametoindex(name.as_ptr()) });
        assert_ne!(index, 0, "no host veth {veth} in the node");
        index
    }

    /// The DEL's time; the time until the link with index `host_index` (the host veth) is gone from
    /// the node (by index, not name: a DEL that renames the veth before destroying it is not done
    /// until the link is); the time until every process the DEL left behind has exited; and the CPU
    /// time of the DEL with those processes (they come to this subreaper and are reaped here).
    fn del_until_gone(&self, id: &str, pod: &Path, host_index: u32) -> DelFigures {
        let (plugin, conf, id, pod) =
            (self.plugin.clone(), self.conf.to_string(), id.to_owned(), pod.to_owned());
        self.thread.call(move || {
            let cpu = bench::cpu_time();
            let start = Instant::now();
            let child = spawn(&plugin, "DEL", &id, &pod);
            answer(child, &conf, "DEL", &id);
            let del = start.elapsed();
            let mut name = [0 as libc::c_char; libc::IF_NAMESIZE];
            // SAFETY: if_indextoname writes at most IF_NAMESIZE bytes into the buffer we own; it
            // returns NULL when no link has that index.
            while !unsafe { libc::if_indextoname(host_index, name.as_mut_ptr()) }.is_null() {
                assert!(start.elapsed() < GONE_TIMEOUT, "the host veth of {id} is still there");
                std::thread::sleep(Duration::from_micros(200));
            }
            let gone = start.elapsed();
            reap_orphans();
            DelFigures { del, gone, detached_done: start.elapsed(), cpu: bench::cpu_time() - cpu }
        })
    }
}

/// What one DEL cost (see [`Side::del_until_gone`]).
struct DelFigures {
    del: Duration,
    gone: Duration,
    detached_done: Duration,
    cpu: Duration,
}

/// Waits for every child of this process: the plugin's detached processes, which came to this
/// subreaper when the plugin exited. Only called when no plugin this bench waits for is running.
fn reap_orphans() {
    loop {
        match nix::sys::wait::waitpid(None, None) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::ECHILD) => return,
            Err(err) => panic!("waitpid: {err}"),
        }
    }
}

fn spawn(plugin: &Path, command: &str, id: &str, pod: &Path) -> Child {
    Command::new(plugin)
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", id)
        .env("CNI_NETNS", pod)
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", CNI_PATH)
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| panic!("spawn {}: {err}", plugin.display()))
}

fn answer(mut child: Child, conf: &str, command: &str, id: &str) -> Value {
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(conf.as_bytes()).expect("write the configuration");
    }
    let output = child.wait_with_output().expect("wait for the plugin");
    assert!(
        output.status.success(),
        "{command} {id} failed: {} {}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or(Value::Null)
}

fn host_veth(result: &Value) -> String {
    // interfaces: [bridge, host veth, pod interface] for both plugins.
    result["interfaces"][1]["name"].as_str().expect("a host veth in the result").to_owned()
}

fn pods(prefix: &str, count: usize) -> Vec<NetNs> {
    (0..count).map(|i| NetNs::create(&format!("{prefix}-{i}")).expect("pod namespace")).collect()
}

struct Figures {
    add: Samples,
    del: Samples,
    gone: Samples,
    detached_done: Samples,
    add_cpu: Duration,
    del_cpu: Duration,
}

/// ADD then DEL (timed until the host veth is gone) on one fresh pod per round, for both sides.
fn run_pair(keel: &Side, reference: &Side, rounds: usize) -> (Figures, Figures) {
    let mut figures = [keel, reference].map(|_| Figures {
        add: Samples::default(),
        del: Samples::default(),
        gone: Samples::default(),
        detached_done: Samples::default(),
        add_cpu: Duration::ZERO,
        del_cpu: Duration::ZERO,
    });
    let keel_pods = pods(&format!("{}-kp", unique_prefix()), rounds);
    let reference_pods = pods(&format!("{}-rp", unique_prefix()), rounds);
    for round in 0..rounds {
        let order: [usize; 2] = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for index in order {
            let (side, pod) =
                if index == 0 { (keel, &keel_pods[round]) } else { (reference, &reference_pods[round]) };
            let id = format!("bench-{round}");
            let (result, add, add_cpu) = side.invoke("ADD", &id, pod.path());
            let host_index = side.ifindex(&host_veth(&result));
            let del = side.del_until_gone(&id, pod.path(), host_index);
            let f = &mut figures[index];
            f.add.push(add);
            f.del.push(del.del);
            f.gone.push(del.gone);
            f.detached_done.push(del.detached_done);
            f.add_cpu += add_cpu;
            f.del_cpu += del.cpu;
        }
    }
    let [k, r] = figures;
    (k, r)
}

/// 100 ADDs at once: (wall time until all answered, each ADD's own time), then 100 DELs at once.
fn concurrent_adds(side: &Side) -> (Duration, Samples) {
    let pods = pods(&format!("{}-c{}", unique_prefix(), side.name), CONCURRENT);
    let paths: Vec<PathBuf> = pods.iter().map(|pod| pod.path().to_owned()).collect();
    let (plugin, conf) = (side.plugin.clone(), side.conf.to_string());
    let run_all = move |command: &'static str, paths: Vec<PathBuf>, plugin: PathBuf, conf: String| {
        // Spawned from the node thread (the children start in the node), released together.
        let children: Vec<Child> = paths
            .iter()
            .enumerate()
            .map(|(i, pod)| spawn(&plugin, command, &format!("concurrent-{i}"), pod))
            .collect();
        let barrier = Arc::new(Barrier::new(children.len() + 1));
        let waiters: Vec<_> = children
            .into_iter()
            .enumerate()
            .map(|(i, child)| {
                let (barrier, conf) = (Arc::clone(&barrier), conf.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    let start = Instant::now();
                    answer(child, &conf, command, &format!("concurrent-{i}"));
                    start.elapsed()
                })
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        let mut each = Samples::default();
        for waiter in waiters {
            each.push(waiter.join().expect("a waiter thread"));
        }
        (start.elapsed(), each)
    };
    let (p, c, pl) = (paths.clone(), conf.clone(), plugin.clone());
    let (wall, each) = side.thread.call(move || run_all("ADD", p, pl, c));
    side.thread.call(move || {
        run_all("DEL", paths, plugin, conf);
        reap_orphans();
    });
    drop(pods);
    (wall, each)
}

fn main() {
    keel_testbed::require_root().expect("benchmarks need root");
    // What a DEL leaves running (keel-cni's detached destruction of the veth pair) comes to us, so its
    // CPU time is counted and its end is seen.
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) only changes this process's own attribute.
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }, 0, "become a subreaper");
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(30);
    println!("keel-cni: {}", keel_cni());
    let mut report = Report::new("cni");
    for ip_masq in [false, true] {
        let keel = Side::new("keel", &keel_cni(), ip_masq);
        let reference = Side::new("ref", REFERENCE_BRIDGE, ip_masq);
        // One warm-up round each: the bridge (and masquerade) is set up once per node, not per pod.
        run_pair(&keel, &reference, 1);
        let (k, r) = run_pair(&keel, &reference, rounds);
        let masq = if ip_masq { "_masq" } else { "" };
        let label = if ip_masq { " (ipMasq)" } else { "" };
        report.compare(&format!("add{masq}"), &format!("ADD{label}"), &k.add, "reference", &r.add);
        report.compare(&format!("del{masq}"), &format!("DEL{label}"), &k.del, "reference", &r.del);
        report.compare(
            &format!("del_gone{masq}"),
            &format!("DEL until the host veth is gone{label}"),
            &k.gone,
            "reference",
            &r.gone,
        );
        report.compare(
            &format!("del_detached_done{masq}"),
            &format!("DEL until its detached work exits{label}"),
            &k.detached_done,
            "reference",
            &r.detached_done,
        );
        let fraction = |keel: &Samples, reference: &Samples| {
            format!("{:.2}", keel.median().as_secs_f64() / reference.median().as_secs_f64().max(f64::EPSILON))
        };
        report.figure(
            &format!("add{masq}_vs_reference"),
            "ADD: keel-cni / reference (target ≤ 0.20)",
            &fraction(&k.add, &r.add),
        );
        report.figure(
            &format!("del{masq}_vs_reference"),
            "DEL: keel-cni / reference (target ≤ 0.20)",
            &fraction(&k.del, &r.del),
        );
        let per_op = |total: Duration| bench::ms(total / u32::try_from(rounds).unwrap_or(1));
        report.figure(&format!("add{masq}_cpu_ms"), "ADD: keel-cni CPU ms per op", &per_op(k.add_cpu));
        report.figure(
            &format!("add{masq}_reference_cpu_ms"),
            "ADD: reference CPU ms per op",
            &per_op(r.add_cpu),
        );
        report.figure(
            &format!("del{masq}_cpu_ms"),
            "DEL: keel-cni CPU ms per op (with detached)",
            &per_op(k.del_cpu),
        );
        report.figure(
            &format!("del{masq}_reference_cpu_ms"),
            "DEL: reference CPU ms per op",
            &per_op(r.del_cpu),
        );
        if !ip_masq {
            let (keel_wall, keel_each) = concurrent_adds(&keel);
            let (reference_wall, reference_each) = concurrent_adds(&reference);
            report.figure(
                "concurrent_add_wall_ms",
                "100 concurrent ADDs: keel-cni wall ms",
                &bench::ms(keel_wall),
            );
            report.figure(
                "concurrent_add_reference_wall_ms",
                "100 concurrent ADDs: reference wall ms",
                &bench::ms(reference_wall),
            );
            report.compare(
                "concurrent_add_each",
                "100 concurrent ADDs: each ADD",
                &keel_each,
                "reference",
                &reference_each,
            );
        }
    }
    report.print();
}
