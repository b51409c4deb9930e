//! The keel-proxy binary: flags, the kube-rs watchers feeding the tracker, and the bounded sync
//! runner driving the nftables backend over netlink, with the stale UDP conntrack cleanup and the
//! health-check node ports after each successful sync. Wiring only; the logic is the library's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use keel_proxy::backend::Proxier;
use keel_proxy::cli::Flags;
use keel_proxy::conntrack::{self, netlink::ConntrackNetlink};
use keel_proxy::healthcheck::{self, HealthChecks, ServiceHealthServer};
use keel_proxy::nft::NftBackend;
use keel_proxy::nft::netlink::NftNetlink;
use keel_proxy::runner::{self, RunnerConfig, SyncTrigger};
use keel_proxy::serve::{self, SyncStatus};
use keel_proxy::tracker::{ChangeTracker, TrackerConfig};
use keel_proxy::watch::Feed;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};

/// The proxier and the feed, shared by the watcher tasks and the sync runner.
struct Shared {
    feed: Feed,
    proxier: Proxier<NftBackend<NftNetlink>>,
    /// The conntrack table, cleaned of stale UDP entries after each successful sync.
    conntrack: ConntrackNetlink,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let flags = Flags::parse();
    let node = flags.node_name()?;
    let status = Arc::new(Mutex::new(SyncStatus::default()));
    for (flag, address) in [
        ("--healthz-bind-address", &flags.healthz_bind_address),
        ("--metrics-bind-address", &flags.metrics_bind_address),
    ] {
        if let Some(address) = address {
            let listener = tokio::net::TcpListener::bind(address.as_str())
                .await
                .with_context(|| format!("{flag} {address}: bind"))?;
            tokio::spawn(serve::serve(listener, Arc::clone(&status)));
        }
    }
    let client = client(&flags).await?;
    let nodeport_addresses = if flags.nodeport_primary() {
        primary_prefixes(&client, &node).await
    } else {
        flags.nodeport_cidrs()
    };
    // The health-check node ports follow each successful sync (failed binds retried every 5 s).
    let (health_checks, desired_health_checks) = tokio::sync::watch::channel(HealthChecks::default());
    let health_server = ServiceHealthServer::new(healthcheck::bind_addresses(&nodeport_addresses));
    tokio::spawn(healthcheck::run(health_server, desired_health_checks, Duration::from_secs(5)));
    // Their `serviceProxyHealthy` follows /healthz between syncs too (stalled syncs turn it false).
    tokio::spawn(follow_proxy_health(Arc::clone(&status), health_checks.clone()));
    let tracker =
        ChangeTracker::new(TrackerConfig { node_name: node.clone(), proxy_name: flags.proxy_name.clone() });
    let backend = NftBackend::new(&flags.render_config(nodeport_addresses), NftNetlink::new());
    let shared = Arc::new(Mutex::new(Shared {
        feed: Feed::new(),
        proxier: Proxier::new(tracker, backend),
        conntrack: ConntrackNetlink::new(),
    }));
    let trigger = SyncTrigger::new();

    let services = watcher::watcher(Api::<Service>::all(client.clone()), watcher::Config::default());
    let slices = watcher::watcher(Api::<EndpointSlice>::all(client.clone()), watcher::Config::default());
    let nodes = watcher::watcher(
        Api::<Node>::all(client),
        watcher::Config::default().fields(&format!("metadata.name={node}")),
    );
    tokio::spawn(feed(services, Arc::clone(&shared), Arc::clone(&status), trigger.clone(), |s, event| {
        let Shared { feed, proxier, .. } = s;
        feed.service(&mut proxier.tracker, event);
    }));
    tokio::spawn(feed(slices, Arc::clone(&shared), Arc::clone(&status), trigger.clone(), |s, event| {
        let Shared { feed, proxier, .. } = s;
        feed.slice(&mut proxier.tracker, event);
    }));
    tokio::spawn(feed(nodes, Arc::clone(&shared), Arc::clone(&status), trigger.clone(), |s, event| {
        let Shared { feed, proxier, .. } = s;
        feed.node(&mut proxier.tracker, event);
    }));

    let config =
        RunnerConfig { min_interval: flags.min_sync_period, burst: 2, retry: Duration::from_secs(1) };
    tracing::info!(node, "keel-proxy: watching; syncs start once Services and EndpointSlices are listed");
    runner::run(&trigger, config, || {
        let mut shared = shared.lock().map_err(|_| ())?;
        if !shared.feed.ready() {
            return Ok(true);
        }
        let started = std::time::Instant::now();
        match shared.proxier.sync() {
            Ok(Some(stats)) => {
                let took = started.elapsed();
                let mut healthy = false;
                if let Ok(mut status) = status.lock() {
                    let now = std::time::SystemTime::now();
                    status.record(now, took, stats);
                    healthy = status.healthy(now);
                }
                tracing::info!(
                    full = stats.full,
                    rules = stats.rules,
                    elements = stats.elements,
                    ?took,
                    "synced"
                );
                after_sync(&mut shared, &health_checks, healthy);
                Ok(true)
            }
            Ok(None) => {
                if let Ok(mut status) = status.lock() {
                    status.up_to_date();
                }
                Ok(true)
            }
            Err(err) => {
                if let Ok(mut status) = status.lock() {
                    status.failed();
                }
                tracing::error!("sync failed (a full sync follows): {err}");
                Err(())
            }
        }
    })
    .await;
    Ok(())
}

/// What follows a successful sync: the health-check node ports get the new counts, and the UDP
/// conntrack entries pointing at gone endpoints go. A failed cleanup is logged (the next sync runs
/// it again).
fn after_sync(shared: &mut Shared, health_checks: &tokio::sync::watch::Sender<HealthChecks>, healthy: bool) {
    let Shared { proxier, conntrack: table, .. } = shared;
    let desired = healthcheck::health_checks(proxier.tracker.state(), healthy);
    health_checks.send_if_modified(|current| {
        let changed = *current != desired;
        *current = desired;
        changed
    });
    match conntrack::clean_stale_flows(table, proxier.tracker.state()) {
        Ok(cleaned) if cleaned.stale > 0 => tracing::info!(
            listed = cleaned.listed,
            stale = cleaned.stale,
            deleted = cleaned.deleted,
            "stale UDP conntrack entries removed"
        ),
        Ok(_) => {}
        Err(err) => tracing::warn!("conntrack cleanup failed (the next sync runs it again): {err}"),
    }
}

/// Every second, the proxy's health (as /healthz has it) into the health-check ports' answers.
async fn follow_proxy_health(
    status: Arc<Mutex<SyncStatus>>,
    health_checks: tokio::sync::watch::Sender<HealthChecks>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        let Ok(healthy) = status.lock().map(|status| status.healthy(std::time::SystemTime::now())) else {
            continue;
        };
        health_checks.send_if_modified(|current| {
            let changed = current.proxy_healthy != healthy;
            current.proxy_healthy = healthy;
            changed
        });
    }
}

/// The API client: from `--kubeconfig`, else in-cluster or ~/.kube/config.
/// How long keel-proxy waits for its Node's addresses at start, as kube-proxy does.
const NODE_IP_WAIT: Duration = Duration::from_secs(30);

/// `--nodeport-addresses primary`: the host prefixes of the Node's primary IPs, read once at start
/// (as kube-proxy), waiting up to [`NODE_IP_WAIT`] for a kubelet to report them; then loopback, with
/// kube-proxy's warning.
async fn primary_prefixes(client: &Client, node: &str) -> Vec<ipnet::IpNet> {
    let nodes: Api<Node> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + NODE_IP_WAIT;
    loop {
        match nodes.get_opt(node).await {
            Ok(Some(object)) => {
                let ips = keel_proxy::node_ips::primary_ips(&object);
                if !ips.is_empty() {
                    tracing::info!(?ips, "node ports on the Node's primary IPs");
                    return keel_proxy::node_ips::host_prefixes(&ips);
                }
            }
            Ok(None) => {}
            Err(err) => tracing::warn!("reading Node {node}: {err}"),
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tracing::warn!(
        "can't determine this node's IP, assuming loopback; set --nodeport-addresses if this is wrong"
    );
    keel_proxy::node_ips::host_prefixes(&[std::net::Ipv4Addr::LOCALHOST.into()])
}

async fn client(flags: &Flags) -> Result<Client> {
    match &flags.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("read --kubeconfig {}", path.display()))?;
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .with_context(|| format!("use --kubeconfig {}", path.display()))?;
            Client::try_from(config).context("make the API client")
        }
        None => Client::try_default().await.context("make the API client (no --kubeconfig)"),
    }
}

/// Applies a watcher's events to the shared state and asks for a sync after each.
async fn feed<K>(
    stream: impl Stream<Item = Result<Event<K>, watcher::Error>> + Send,
    shared: Arc<Mutex<Shared>>,
    status: Arc<Mutex<SyncStatus>>,
    trigger: SyncTrigger,
    apply: impl Fn(&mut Shared, Event<K>) + Send,
) where
    K: Send,
{
    let mut stream = std::pin::pin!(stream.default_backoff());
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                if let Ok(mut shared) = shared.lock() {
                    apply(&mut shared, event);
                    // A change waiting for a sync: /healthz fails if it waits too long.
                    if shared.proxier.has_pending()
                        && let Ok(mut status) = status.lock()
                    {
                        status.queued(std::time::SystemTime::now());
                    }
                }
                trigger.request();
            }
            Err(err) => tracing::warn!("watch: {err}"),
        }
    }
}
