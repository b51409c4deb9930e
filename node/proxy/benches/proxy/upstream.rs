//! keel-proxy beside the upstream kube-proxy v1.34 (nftables mode, `cargo xtask peers`), each in a fresh
//! testbed node with keel-apiserver inside it and fed the same objects through the API: N Services × 2
//! endpoints written as fast as the API takes them (64 at a time), then one EndpointSlice changed at a
//! time. Both run with `--min-sync-period 0s`: at their default (1 s, kube-proxy's and so keel-proxy's)
//! each change waits up to a second for the rate limiter, which measures the limiter, not the proxy.
//!
//! Everything is measured from outside the proxy, through the kernel: a Service is "programmed" when a
//! connection from the node to its ClusterIP reaches a pod, and an endpoint change is in when the
//! Service's answers come from the new pod. Both proxies apply a sync in one nftables transaction, so
//! the last Service written answering means every Service is in.
//!
//! - full_sync: from the last object's write acknowledged to the last Service answering;
//! - endpoint_change: from one EndpointSlice's write acknowledged to its Service answering from the new
//!   endpoint (median over the changes);
//! - the proxy's CPU time over the whole run and its RSS at the end, from /proc.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use keel_proxy::fixtures::{ready, service, slice};
use keel_testbed::bench::{self, Report, Samples};
use keel_testbed::process::{Daemon, Readiness};
use keel_testbed::{Fabric, Host, NetNs};
use kube::api::{Api, PostParams};

const BRIDGE: &str = "cni0";
const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 244, 1, 1);
const NODE: &str = "node-a";
const SERVICE_PORT: u16 = 80;
const TARGET_PORT: u16 = 8080;
/// The pods every Service's two endpoints start on, and the one a change moves an endpoint set to.
const PODS: [u8; 3] = [2, 3, 4];
/// How long a proxy may take to program everything.
const PROGRAMMED: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proxy {
    Keel,
    Upstream,
}

impl Proxy {
    fn name(self) -> &'static str {
        match self {
            Proxy::Keel => "keel-proxy",
            Proxy::Upstream => "kube-proxy",
        }
    }
}

/// One proxy's figures.
struct Run {
    full_sync: Duration,
    endpoint_change: Samples,
    cpu: Duration,
    rss: u64,
}

pub fn measure(services: usize, changes: usize, report: &mut Report) {
    let apiserver = apiserver_binary();
    let keel_proxy = PathBuf::from(env!("CARGO_BIN_EXE_keel-proxy"));
    let kube_proxy = keel_testbed::peers::path("kube-proxy").expect("kube-proxy (cargo xtask peers)");
    let mut runs = Vec::new();
    for proxy in [Proxy::Upstream, Proxy::Keel] {
        let binary = if proxy == Proxy::Keel { &keel_proxy } else { &kube_proxy };
        runs.push((proxy, run(proxy, binary, &apiserver, services, changes)));
    }
    let (keel, upstream) = (&runs[1].1, &runs[0].1);
    for (proxy, run) in &runs {
        let key = proxy.name().replace('-', "_");
        report.figure(
            &format!("{key}_full_sync_ms"),
            &format!("{}: last write to all {services} Services answering, ms", proxy.name()),
            &bench::ms(run.full_sync),
        );
        report.figure(
            &format!("{key}_endpoint_change_ms"),
            &format!("{}: EndpointSlice write to the new endpoint answering, median ms", proxy.name()),
            &bench::ms(run.endpoint_change.median()),
        );
        report.figure(
            &format!("{key}_endpoint_change_max_ms"),
            "  max ms",
            &bench::ms(run.endpoint_change.max()),
        );
        report.figure(
            &format!("{key}_cpu_s"),
            &format!("{}: CPU over the run, s", proxy.name()),
            &format!("{:.2}", run.cpu.as_secs_f64()),
        );
        report.figure(
            &format!("{key}_rss_mib"),
            &format!("{}: RSS at the end, MiB", proxy.name()),
            &format!("{:.1}", run.rss as f64 / 1_048_576.0),
        );
    }
    report.figure(
        "upstream_full_sync_ratio",
        "keel-proxy/kube-proxy full sync",
        &format!("{:.3}", keel.full_sync.as_secs_f64() / upstream.full_sync.as_secs_f64()),
    );
    report.figure(
        "upstream_endpoint_change_ratio",
        "keel-proxy/kube-proxy endpoint change (median)",
        &format!(
            "{:.5}",
            keel.endpoint_change.median().as_secs_f64() / upstream.endpoint_change.median().as_secs_f64()
        ),
    );
    report.figure(
        "upstream_cpu_ratio",
        "keel-proxy/kube-proxy CPU",
        &format!("{:.3}", keel.cpu.as_secs_f64() / upstream.cpu.as_secs_f64()),
    );
    report.figure(
        "upstream_rss_ratio",
        "keel-proxy/kube-proxy RSS",
        &format!("{:.3}", keel.rss as f64 / upstream.rss as f64),
    );
}

/// A binary of this workspace beside the bench's own (target/release).
fn sibling(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the bench's path");
    exe.parent().and_then(Path::parent).expect("target/release").join(name)
}

fn apiserver_binary() -> PathBuf {
    let path =
        std::env::var_os("KEEL_APISERVER_BIN").map_or_else(|| sibling("keel-apiserver"), PathBuf::from);
    assert!(path.is_file(), "{} is missing (cargo xtask bench proxy builds it)", path.display());
    path
}

fn run(proxy: Proxy, binary: &Path, apiserver: &Path, services: usize, changes: usize) -> Run {
    let fabric = Fabric::new().expect("fabric");
    let host = keel_testbed::bridge::node(&fabric, BRIDGE, GATEWAY, 24).expect("node");
    let pods: Vec<NetNs> = PODS
        .iter()
        .map(|&n| {
            let address = pod_address(n);
            let (ns, _) =
                keel_testbed::bridge::pod(&fabric, &host, BRIDGE, GATEWAY, address, 24, n).expect("pod");
            let listener = ns
                .run(|| TcpListener::bind((Ipv4Addr::UNSPECIFIED, TARGET_PORT)))
                .expect("enter the pod")
                .expect("listen in the pod");
            std::thread::spawn(move || serve(&listener, n));
            ns
        })
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let kubeconfig = data.join("admin.kubeconfig");
    let mut command = Command::new(apiserver);
    command.arg("--data-dir").arg(&data).args([
        "--bind-address",
        "127.0.0.1",
        "--secure-port",
        "6443",
        "--service-cluster-ip-range",
        "10.96.0.0/12",
    ]);
    let mut probe = Command::new("test");
    probe.arg("-s").arg(&kubeconfig);
    let _apiserver = host
        .start_daemon("keel-apiserver", command, Readiness::Command(probe), Duration::from_secs(60))
        .expect("keel-apiserver");
    in_node(&host, node_object(&kubeconfig));

    let daemon = start_proxy(&host, proxy, binary, &kubeconfig);
    wait_healthy(&host, SocketAddr::from(([127, 0, 0, 1], 10256)));

    let written = in_node(&host, write_objects(kubeconfig.clone(), services));
    let last = SocketAddr::from((cluster_ip(services - 1), SERVICE_PORT));
    let full_sync = host
        .run(|| until_answer(last, |_| true, PROGRAMMED))
        .expect("enter the node")
        .unwrap_or_else(|| panic!("{}: the last Service never answered", proxy.name()))
        .duration_since(written);
    // A sample of the others answer too.
    for index in (0..services).step_by((services / 7).max(1)) {
        let target = SocketAddr::from((cluster_ip(index), SERVICE_PORT));
        host.run(|| until_answer(target, |_| true, Duration::from_secs(10)))
            .expect("enter the node")
            .unwrap_or_else(|| panic!("{}: Service {index} does not answer", proxy.name()));
    }

    let mut endpoint_change = Samples::default();
    for change in 0..changes {
        let index = (change * 7919 + services / 2) % services;
        let target = SocketAddr::from((cluster_ip(index), SERVICE_PORT));
        let moved = PODS[2];
        let acked = in_node(&host, set_endpoints(kubeconfig.clone(), index, vec![moved]));
        let answered = host
            .run(|| until_answer(target, |pod| pod == moved, Duration::from_secs(30)))
            .expect("enter the node")
            .unwrap_or_else(|| panic!("{}: Service {index} never answered from pod {moved}", proxy.name()));
        endpoint_change.push(answered.duration_since(acked));
        // Back where it was, so every change moves a Service that is on the first two pods.
        in_node(&host, set_endpoints(kubeconfig.clone(), index, PODS[..2].to_vec()));
        host.run(|| until_answer(target, |pod| pod != moved, Duration::from_secs(30)))
            .expect("enter the node")
            .unwrap_or_else(|| panic!("{}: Service {index} never moved back", proxy.name()));
    }
    let (cpu, rss) = bench::process_usage(daemon.pid());
    drop(pods);
    Run { full_sync, endpoint_change, cpu, rss }
}

fn start_proxy(host: &Host, proxy: Proxy, binary: &Path, kubeconfig: &Path) -> Daemon {
    let mut command = Command::new(binary);
    command.arg("--kubeconfig").arg(kubeconfig);
    command.args(keel_proxy::fixtures::proxy_flags(proxy == Proxy::Upstream, NODE));
    host.start_daemon(proxy.name(), command, Readiness::None, Duration::from_secs(10)).expect("the proxy")
}

/// Waits for the proxy's `/healthz` at `addr` to answer 200: its first sync is done.
fn wait_healthy(host: &Host, addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = host
            .run(|| -> std::io::Result<String> {
                let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
                stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")?;
                let mut response = String::new();
                stream.read_to_string(&mut response)?;
                Ok(response)
            })
            .expect("enter the node");
        if answer.is_ok_and(|a| a.starts_with("HTTP/1.1 200")) {
            return;
        }
        assert!(Instant::now() < deadline, "the proxy's /healthz never answered 200");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `future` to its end on a runtime inside the node's network namespace (where the API is).
fn in_node<T: Send>(host: &Host, future: impl std::future::Future<Output = T> + Send) -> T {
    host.run(|| {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(future)
    })
    .expect("enter the node")
}

async fn client(kubeconfig: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.expect("config");
    kube::Client::try_from(config).expect("client")
}

/// The node's Node object with its InternalIP, as a kubelet reports it (kube-proxy waits for one).
async fn node_object(kubeconfig: &Path) {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client(kubeconfig).await);
    let node = serde_json::from_value(serde_json::json!({"metadata": {"name": NODE}})).expect("node");
    nodes.create(&PostParams::default(), &node).await.expect("create the Node");
    let status = serde_json::json!({"status": {"addresses": [{"type": "InternalIP", "address": GATEWAY.to_string()}]}});
    nodes
        .patch_status(NODE, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(status))
        .await
        .expect("the Node's address");
}

/// Writes `services` Services and their EndpointSlices, 64 requests at a time; returns when the last
/// write was acknowledged.
async fn write_objects(kubeconfig: PathBuf, services: usize) -> Instant {
    let client = client(&kubeconfig).await;
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let slices: Api<EndpointSlice> = Api::namespaced(client, "default");
    let creates = (0..services).map(|index| {
        let (svcs, slices) = (svcs.clone(), slices.clone());
        async move {
            let name = format!("svc{index}");
            let object = service(
                &name,
                &cluster_ip(index).to_string(),
                &[("http", "TCP", i32::from(SERVICE_PORT), None)],
            );
            svcs.create(&PostParams::default(), &object).await.expect("create a Service");
            slices
                .create(&PostParams::default(), &endpoints(&name, &PODS[..2]))
                .await
                .expect("create a slice");
        }
    });
    futures::stream::iter(creates).buffer_unordered(64).collect::<Vec<()>>().await;
    Instant::now()
}

/// Sets Service `index`'s endpoints to `pods`; returns when the write was acknowledged.
async fn set_endpoints(kubeconfig: PathBuf, index: usize, pods: Vec<u8>) -> Instant {
    let slices: Api<EndpointSlice> = Api::namespaced(client(&kubeconfig).await, "default");
    let name = format!("svc{index}");
    let mut current = slices.get(&format!("{name}-1")).await.expect("get the slice");
    current.endpoints = endpoints(&name, &pods).endpoints;
    slices.replace(&format!("{name}-1"), &PostParams::default(), &current).await.expect("replace the slice");
    Instant::now()
}

fn endpoints(name: &str, pods: &[u8]) -> EndpointSlice {
    slice(
        &format!("{name}-1"),
        name,
        &[("http", "TCP", i32::from(TARGET_PORT))],
        pods.iter().map(|&n| ready(&pod_address(n).to_string(), NODE)).collect(),
    )
}

/// Connects to `target` every millisecond until a pod for which `wanted` holds answers (a pod answers
/// with its number); the instant it did, or `None` after `timeout`.
fn until_answer(target: SocketAddr, wanted: impl Fn(u8) -> bool, timeout: Duration) -> Option<Instant> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Some(pod) = ask(target)
            && wanted(pod)
        {
            return Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

fn ask(target: SocketAddr) -> Option<u8> {
    let mut stream = TcpStream::connect_timeout(&target, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    let mut byte = [0u8; 1];
    stream.read_exact(&mut byte).ok()?;
    Some(byte[0])
}

/// Answers every connection with the pod's number, then closes it.
fn serve(listener: &TcpListener, pod: u8) {
    for mut stream in listener.incoming().flatten() {
        let _ = stream.write_all(&[pod]);
    }
}

fn pod_address(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, 1, n)
}

/// 10.96.0.0/12 onward: one ClusterIP per Service.
fn cluster_ip(index: usize) -> Ipv4Addr {
    let index = u32::try_from(index).expect("a Service index");
    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 0, 10)) + index)
}
