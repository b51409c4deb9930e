//! keel-kubelet beside the upstream kubelet v1.34, each on keel-shim and on containerd 1.6 (the
//! 2×2 matrix), on one testbed node (root) against the same keel-apiserver, the image present:
//!
//! - start: a Pod created with `spec.nodeName` set, until a watch sees it Ready=True (one at a
//!   time; p50 and p99);
//! - delete: the Pod deleted with a 1 s grace period (its container exits on SIGTERM), until a
//!   watch sees the object removed;
//! - batch: BATCH pods created at once, until all are Ready, and then deleted, until all are gone;
//! - the kubelet's RSS idle and with the batch running, and its CPU over STEADY seconds with the
//!   batch running; the CPU time of the kubelet and of the runtime per pod started.
//!
//! Each kubelet and its runtime run in the node's network namespace and in a mount namespace of
//! the testbed's ([`keel_testbed::mount_ns`]): the upstream kubelet sets global sysctls and writes
//! /var/log/containers, which the machine's must not see. Both kubelets get the same settings: QoS
//! and pod cgroups under a cgroup root of the cell's own, anonymous kubelet API, the pods'
//! kube-api-access volume as every pod has it.
//!
//! Usage: `cargo xtask bench kubelet [-- SINGLE BATCH STEADY]` (30 pods one at a time, a batch of
//! 100, 10 s steady), or `cargo bench -p keel-kubelet --bench kubelet` with `KEEL_KUBELET_BIN`,
//! `KEEL_SHIM_BIN` and `KEEL_APISERVER_BIN` naming release builds (`cargo xtask bench kubelet`
//! builds them). To investigate one kubelet and runtime, `KEEL_KUBELET_BENCH_CELL=<kubelet>-<runtime>`
//! runs that cell alone and prints it raw, and `KEEL_KUBELET_BENCH_LOG=N` prints the kubelet's last
//! N log lines (with `RUST_LOG=keel_kubelet=debug`, each sync's steps and their times).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, ServiceAccount};
use keel_testbed::bench::{self, Report, Samples};
use keel_testbed::kubelet_node::{KubeletNode, NodeRuntime, UpstreamKubelet};
use keel_testbed::mount_ns::{MountNs, kubelet_overlays};
use keel_testbed::{Daemon, Readiness};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

/// How long anything is waited for (a bound on failure only).
const WAIT: Duration = Duration::from_secs(180);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kubelet {
    Keel,
    Upstream,
}

impl Kubelet {
    fn name(self) -> &'static str {
        match self {
            Kubelet::Keel => "keel-kubelet",
            Kubelet::Upstream => "kubelet",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runtime {
    Shim,
    Containerd,
}

/// One cell's figures.
#[derive(Debug, Default)]
struct Cell {
    start: Samples,
    delete: Samples,
    batch_ready: Duration,
    batch_gone: Duration,
    idle_rss: u64,
    batch_rss: u64,
    /// The kubelet's CPU over the steady window.
    steady_cpu: Duration,
    /// CPU time per pod started and deleted one at a time: the kubelet's, the runtime's.
    kubelet_cpu_per_pod: Duration,
    runtime_cpu_per_pod: Duration,
}

struct Settings {
    single: usize,
    batch: usize,
    steady: Duration,
}

fn main() {
    keel_testbed::require_root().expect("benchmarks need root");
    let mut args = std::env::args().skip(1).filter_map(|a| a.parse::<u64>().ok());
    let settings = Settings {
        single: usize::try_from(args.next().unwrap_or(30)).unwrap_or(30),
        batch: usize::try_from(args.next().unwrap_or(100)).unwrap_or(100),
        steady: Duration::from_secs(args.next().unwrap_or(10)),
    };
    let keel_kubelet = release_binary("KEEL_KUBELET_BIN", "keel-kubelet");
    let shim = release_binary("KEEL_SHIM_BIN", "keel-shim");
    let apiserver = release_binary("KEEL_APISERVER_BIN", "keel-apiserver");
    let upstream = keel_testbed::peers::path("kubelet").expect("the kubelet (cargo xtask peers)");
    let node = KubeletNode::new("bench").expect("the node");
    let dir = tempfile::Builder::new().prefix("keel-kubelet-bench-").tempdir().expect("temp dir");
    let data = dir.path().join("apiserver");
    let kubeconfig = data.join("admin.kubeconfig");
    let mut command = Command::new(&apiserver);
    command.arg("--data-dir").arg(&data).args(["--bind-address", "127.0.0.1", "--secure-port", "6443"]);
    let mut probe = Command::new("test");
    probe.arg("-s").arg(&kubeconfig);
    let _apiserver = node
        .host()
        .start_daemon("keel-apiserver", command, Readiness::Command(probe), Duration::from_secs(60))
        .expect("keel-apiserver");
    let threads = || tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build();
    node.host()
        .run(|| threads().expect("tokio").block_on(prepare(&kubeconfig)))
        .expect("enter the node")
        .expect("the namespace's objects");

    let mut report = Report::new("kubelet");
    report.figure("pods_single", "pods one at a time", &settings.single.to_string());
    report.figure("pods_batch", "pods in the batch", &settings.batch.to_string());
    // KEEL_KUBELET_BENCH_CELL=kubelet-containerd runs that one cell and prints its figures raw
    // (to investigate one kubelet and runtime).
    let only = std::env::var("KEEL_KUBELET_BENCH_CELL").ok();
    let mut cells = Vec::new();
    for kubelet in [Kubelet::Keel, Kubelet::Upstream] {
        for runtime in [Runtime::Shim, Runtime::Containerd] {
            let name = format!("{}-{}", kubelet.name(), runtime_name(runtime));
            if only.as_ref().is_some_and(|only| *only != name) {
                continue;
            }
            let binary = if kubelet == Kubelet::Keel { &keel_kubelet } else { &upstream };
            let cell = run_cell(&node, dir.path(), &data, kubelet, binary, runtime, &shim, &settings);
            cells.push(((kubelet, runtime), cell));
        }
    }
    if only.is_some() {
        println!("{cells:#?}");
        return;
    }
    let cell = |kubelet, runtime| &cells.iter().find(|(key, _)| *key == (kubelet, runtime)).expect("cell").1;
    for runtime in [Runtime::Shim, Runtime::Containerd] {
        let suffix = runtime_name(runtime).replace('-', "_");
        let (keel, peer) = (cell(Kubelet::Keel, runtime), cell(Kubelet::Upstream, runtime));
        report.compare(
            &format!("start_{suffix}"),
            &format!("start→Ready on {}", runtime_name(runtime)),
            &keel.start,
            "kubelet",
            &peer.start,
        );
        report.compare(
            &format!("delete_{suffix}"),
            &format!("delete→gone on {}", runtime_name(runtime)),
            &keel.delete,
            "kubelet",
            &peer.delete,
        );
    }
    for ((kubelet, runtime), cell) in &cells {
        let key = format!("{}_{}", kubelet.name(), runtime_name(*runtime)).replace('-', "_");
        let what = format!("{} × {}", kubelet.name(), runtime_name(*runtime));
        let figures = [
            ("start_p50_ms", "start→Ready p50 ms", bench::ms(cell.start.median())),
            ("start_p99_ms", "start→Ready p99 ms", bench::ms(cell.start.percentile(99.0))),
            ("delete_p50_ms", "delete→gone p50 ms", bench::ms(cell.delete.median())),
            ("delete_p99_ms", "delete→gone p99 ms", bench::ms(cell.delete.percentile(99.0))),
            ("batch_ready_ms", "batch all Ready ms", bench::ms(cell.batch_ready)),
            ("batch_gone_ms", "batch all gone ms", bench::ms(cell.batch_gone)),
            ("idle_rss_mib", "kubelet RSS idle MiB", format!("{:.1}", mib(cell.idle_rss))),
            ("batch_rss_mib", "kubelet RSS with the batch MiB", format!("{:.1}", mib(cell.batch_rss))),
        ];
        for (name, label, value) in figures {
            report.figure(&format!("{key}_{name}"), &format!("{what}: {label}"), &value);
        }
        report.figure(
            &format!("{key}_steady_cpu_pct"),
            &format!("{what}: kubelet CPU, batch steady (% of a core)"),
            &format!("{:.2}", 100.0 * cell.steady_cpu.as_secs_f64() / settings.steady.as_secs_f64()),
        );
        report.figure(
            &format!("{key}_kubelet_cpu_per_pod_ms"),
            &format!("{what}: kubelet CPU per pod ms"),
            &bench::ms(cell.kubelet_cpu_per_pod),
        );
        report.figure(
            &format!("{key}_runtime_cpu_per_pod_ms"),
            &format!("{what}: runtime CPU per pod ms"),
            &bench::ms(cell.runtime_cpu_per_pod),
        );
    }
    let ratio = |keel: Duration, peer: Duration| format!("{:.3}", keel.as_secs_f64() / peer.as_secs_f64());
    let (keel_shim, upstream_containerd) =
        (cell(Kubelet::Keel, Runtime::Shim), cell(Kubelet::Upstream, Runtime::Containerd));
    report.figure(
        "start_p50_vs_upstream",
        "start p50: keel-kubelet×keel-shim ÷ kubelet×containerd",
        &ratio(keel_shim.start.median(), upstream_containerd.start.median()),
    );
    report.figure(
        "batch_vs_upstream",
        "batch Ready: keel-kubelet×keel-shim ÷ kubelet×containerd",
        &ratio(keel_shim.batch_ready, upstream_containerd.batch_ready),
    );
    report.print();
}

fn runtime_name(runtime: Runtime) -> &'static str {
    match runtime {
        Runtime::Shim => "keel-shim",
        Runtime::Containerd => "containerd",
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// A release binary: `$VAR`, else beside the bench's own.
fn release_binary(var: &str, name: &str) -> PathBuf {
    let path = std::env::var_os(var).map_or_else(
        || {
            let exe = std::env::current_exe().expect("the bench's path");
            exe.parent().and_then(Path::parent).expect("target/release").join(name)
        },
        PathBuf::from,
    );
    assert!(path.is_file(), "{} is missing (cargo xtask bench kubelet builds it)", path.display());
    path
}

async fn admin(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

/// What a controller manager would have made: the default ServiceAccount and kube-root-ca.crt.
async fn prepare(kubeconfig: &Path) -> anyhow::Result<()> {
    let client = admin(kubeconfig).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    if accounts.get_opt("default").await?.is_none() {
        accounts
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "default"}}))?,
            )
            .await?;
    }
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let ca: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": "the cluster CA"}}),
    )?;
    maps.create(&PostParams::default(), &ca).await?;
    Ok(())
}

#[expect(
    clippy::too_many_arguments,
    reason = "one cell of the matrix: its node, dirs, kubelet, runtime and settings"
)]
fn run_cell(
    node: &KubeletNode,
    dir: &Path,
    data: &Path,
    kubelet: Kubelet,
    binary: &Path,
    runtime: Runtime,
    shim: &Path,
    settings: &Settings,
) -> Cell {
    let node_name = format!("{}-{}", kubelet.name(), runtime_name(runtime));
    let cell_dir = dir.join(&node_name);
    std::fs::create_dir_all(&cell_dir).expect("the cell's dir");
    let mount_ns = MountNs::new(&kubelet_overlays()).expect("the mount namespace");
    let node_runtime = match runtime {
        Runtime::Shim => node.start_shim(shim, Some(mount_ns.fd().clone())),
        Runtime::Containerd => node.start_containerd(Some(mount_ns.fd().clone())),
    }
    .expect("the runtime");
    let kubeconfig = cell_dir.join("kubelet.kubeconfig");
    let read = |name: &str| std::fs::read_to_string(data.join("pki").join(name)).expect("the cluster CA");
    let (ca, ca_key) = (read("ca.crt"), read("ca.key"));
    let user = format!("system:node:{node_name}");
    let cert = keel_testbed::kube_apiserver::client_cert_signed_by(&ca, &ca_key, &user, &["system:nodes"])
        .expect("the node's certificate");
    std::fs::write(
        &kubeconfig,
        keel_testbed::kube_apiserver::kubeconfig_for("https://127.0.0.1:6443", &ca, &cert),
    )
    .expect("the kubelet's kubeconfig");
    let endpoint = format!("unix://{}", node_runtime.socket().display());
    let root = cell_dir.join("root");
    // Both kubelets make QoS and pod cgroups (their default), each under a cgroup root of the
    // cell's own, removed after it.
    let cgroups = keel_cgroups::Layout::host().expect("the cgroup mounts");
    let cgroup_root = format!("/keel-kubelet-bench-{node_name}-{}", std::process::id());
    cgroups.apply(&cgroup_root, &keel_cgroups::Resources::default()).expect("the cell's cgroup root");
    let daemon = match kubelet {
        Kubelet::Keel => {
            let mut command = Command::new(binary);
            command.arg("--kubeconfig").arg(&kubeconfig).arg("--root-dir").arg(&root);
            command.args(["--hostname-override", &node_name]);
            command.arg("--node-ip").arg(node.host().address().to_string());
            command.args(["--container-runtime-endpoint", &endpoint, "--cluster-dns", "10.96.0.10"]);
            command.args(["--cluster-domain", "cluster.local", "--cgroup-root", &cgroup_root]);
            mount_ns.fd().enter_on_spawn(&mut command);
            node.host().start_daemon(kubelet.name(), command, Readiness::None, Duration::from_secs(10))
        }
        Kubelet::Upstream => node.start_upstream_kubelet(&UpstreamKubelet {
            node_name: &node_name,
            kubeconfig: &kubeconfig,
            root_dir: &root,
            endpoint: &endpoint,
            mount_ns: &mount_ns,
            // keel-kubelet's defaults: an anonymous kubelet API, every request allowed.
            config: json!({
                "authentication": {"anonymous": {"enabled": true}, "webhook": {"enabled": false}},
                "authorization": {"mode": "AlwaysAllow"},
                "cgroupsPerQOS": true,
                "cgroupRoot": cgroup_root,
                "enforceNodeAllocatable": ["pods"],
            }),
        }),
    }
    .expect("the kubelet");
    let admin_kubeconfig = data.join("admin.kubeconfig");
    // The runtime's threads are made inside the node, where 127.0.0.1:6443 is the API server.
    let cell = node
        .host()
        .run(|| {
            let threads =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            threads.block_on(measure(&admin_kubeconfig, &node_name, node, &daemon, &node_runtime, settings))
        })
        .expect("enter the node");
    match cell {
        Ok(cell) => {
            // KEEL_KUBELET_BENCH_LOG=N: the kubelet's last N log lines (with RUST_LOG, its syncs' steps).
            if let Some(lines) = std::env::var("KEEL_KUBELET_BENCH_LOG").ok().and_then(|n| n.parse().ok()) {
                eprintln!("{} log:\n{}", kubelet.name(), daemon.log_tail(lines));
            }
            drop(daemon);
            drop(node_runtime);
            drop(mount_ns);
            if let Err(error) = cgroups.destroy(&cgroup_root) {
                eprintln!("removing {cgroup_root}: {error}");
            }
            cell
        }
        Err(error) => {
            eprintln!("{} log:\n{}", kubelet.name(), daemon.log_tail(60));
            let _ = node.host().run(|| {
                let threads = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                threads.block_on(print_pods(&admin_kubeconfig))
            });
            panic!("{node_name}: {error:#}");
        }
    }
}

/// What the failing cell left: each pod's status and the namespace's events.
async fn print_pods(admin_kubeconfig: &Path) -> anyhow::Result<()> {
    let client = admin(admin_kubeconfig).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for pod in pods.list(&ListParams::default()).await?.items.iter().take(5) {
        eprintln!("pod {:?}: {}", pod.metadata.name, serde_json::to_string(&pod.status)?);
    }
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client, "default");
    for event in events.list(&ListParams::default()).await?.items.iter().rev().take(30) {
        eprintln!("event {:?} {:?}: {:?}", event.reason, event.involved_object.name, event.message);
    }
    Ok(())
}

async fn measure(
    admin_kubeconfig: &Path,
    node_name: &str,
    node: &KubeletNode,
    kubelet: &Daemon,
    runtime: &NodeRuntime,
    settings: &Settings,
) -> anyhow::Result<Cell> {
    let client = admin(admin_kubeconfig).await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deadline = Instant::now() + WAIT;
    loop {
        let ready = nodes
            .get_opt(node_name)
            .await?
            .and_then(|n| n.status?.conditions)
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if ready {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "{node_name} never turned Ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let image = node.busybox();
    let group = node_name.replace(|c: char| !c.is_ascii_alphanumeric(), "");
    // The image pulled, and a first pod's costs out of the way.
    start_one(&pods, &pod(&format!("{group}-warm"), node_name, &image, &group)).await?;
    delete_one(&pods, &format!("{group}-warm")).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut cell = Cell { idle_rss: bench::process_usage(kubelet.pid()).1, ..Cell::default() };

    let (kubelet_cpu, runtime_cpu) =
        (bench::process_usage(kubelet.pid()).0, bench::process_usage(runtime.pid()).0);
    for index in 0..settings.single {
        let name = format!("{group}-{index}");
        cell.start.push(start_one(&pods, &pod(&name, node_name, &image, &group)).await?);
        cell.delete.push(delete_one(&pods, &name).await?);
    }
    let pods_run = u32::try_from(settings.single.max(1)).unwrap_or(1);
    cell.kubelet_cpu_per_pod = (bench::process_usage(kubelet.pid()).0.saturating_sub(kubelet_cpu)) / pods_run;
    cell.runtime_cpu_per_pod = (bench::process_usage(runtime.pid()).0.saturating_sub(runtime_cpu)) / pods_run;

    let batch: Vec<Pod> = (0..settings.batch)
        .map(|index| pod(&format!("{group}-b{index}"), node_name, &image, &group))
        .collect();
    let selector = format!("bench={group}");
    let watch = WatchParams::default().labels(&selector).timeout(290);
    let list = pods.list(&ListParams::default().labels(&selector)).await?;
    let version = list.metadata.resource_version.unwrap_or_default();
    let mut events = pods.watch(&watch, &version).await?.boxed();
    let started = Instant::now();
    let post = PostParams::default();
    futures::future::try_join_all(batch.iter().map(|pod| pods.create(&post, pod))).await?;
    let mut ready = BTreeSet::new();
    while ready.len() < settings.batch {
        let event = tokio::time::timeout_at((started + WAIT).into(), events.try_next())
            .await
            .map_err(|_| anyhow::anyhow!("{} of {} pods Ready", ready.len(), settings.batch))??;
        match event {
            Some(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) if is_ready(&pod) => {
                ready.insert(pod.metadata.name.unwrap_or_default());
            }
            Some(WatchEvent::Error(error)) => anyhow::bail!("watch: {error:?}"),
            Some(_) => {}
            None => anyhow::bail!("the watch ended"),
        }
    }
    cell.batch_ready = started.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu = bench::process_usage(kubelet.pid()).0;
    tokio::time::sleep(settings.steady).await;
    let (cpu_after, rss) = bench::process_usage(kubelet.pid());
    cell.steady_cpu = cpu_after.saturating_sub(cpu);
    cell.batch_rss = rss;

    let started = Instant::now();
    let grace = DeleteParams { grace_period_seconds: Some(1), ..DeleteParams::default() };
    futures::future::try_join_all(
        batch.iter().map(|pod| pods.delete(pod.metadata.name.as_deref().unwrap_or(""), &grace)),
    )
    .await?;
    loop {
        let left = pods.list(&ListParams::default().labels(&selector)).await?.items.len();
        if left == 0 {
            break;
        }
        anyhow::ensure!(started.elapsed() < WAIT, "{left} batch pods are left");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cell.batch_gone = started.elapsed();
    Ok(cell)
}

fn pod(name: &str, node_name: &str, image: &str, group: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "labels": {"bench": group}},
        "spec": {
            "nodeName": node_name,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": image, "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"]}]
        }
    }))
    .expect("a pod")
}

fn is_ready(pod: &Pod) -> bool {
    let conditions = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Creates `pod` and waits for a watch to see it Ready; the time from the create call.
async fn start_one(pods: &Api<Pod>, pod: &Pod) -> anyhow::Result<Duration> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let watch = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(290);
    let version = pods.list(&ListParams::default().fields(&format!("metadata.name={name}"))).await?;
    let mut events =
        pods.watch(&watch, &version.metadata.resource_version.unwrap_or_default()).await?.boxed();
    let started = Instant::now();
    pods.create(&PostParams::default(), pod).await?;
    loop {
        let event = tokio::time::timeout_at((started + WAIT).into(), events.try_next())
            .await
            .map_err(|_| anyhow::anyhow!("{name} never turned Ready"))??;
        match event {
            Some(WatchEvent::Added(pod) | WatchEvent::Modified(pod)) if is_ready(&pod) => {
                return Ok(started.elapsed());
            }
            Some(WatchEvent::Error(error)) => anyhow::bail!("watch: {error:?}"),
            Some(_) => {}
            None => anyhow::bail!("the watch of {name} ended"),
        }
    }
}

/// Deletes the pod `name` with a 1 s grace period and waits for a watch to see it removed.
async fn delete_one(pods: &Api<Pod>, name: &str) -> anyhow::Result<Duration> {
    let watch = WatchParams::default().fields(&format!("metadata.name={name}")).timeout(290);
    let version = pods.list(&ListParams::default().fields(&format!("metadata.name={name}"))).await?;
    let mut events =
        pods.watch(&watch, &version.metadata.resource_version.unwrap_or_default()).await?.boxed();
    let started = Instant::now();
    pods.delete(name, &DeleteParams { grace_period_seconds: Some(1), ..DeleteParams::default() }).await?;
    loop {
        let event = tokio::time::timeout_at((started + WAIT).into(), events.try_next())
            .await
            .map_err(|_| anyhow::anyhow!("{name} was never removed"))??;
        match event {
            Some(WatchEvent::Deleted(_)) => return Ok(started.elapsed()),
            Some(WatchEvent::Error(error)) => anyhow::bail!("watch: {error:?}"),
            Some(_) => {}
            None => anyhow::bail!("the watch of {name} ended"),
        }
    }
}
