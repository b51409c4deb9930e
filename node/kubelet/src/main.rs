//! keel-kubelet: the node agent, flags and KubeletConfiguration as upstream's kubelet reads them
//! ([`keel_kubelet::cli`]). It registers the Node, heartbeats its Lease and status, and runs the
//! Pods bound to it through the CRI runtime.

use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Parser;
use keel_kubelet::agent::{Agent, Timings};
use keel_kubelet::bootstrap::{self, RotatingClient, ServingCertificate};
use keel_kubelet::cli::Flags;
use keel_kubelet::machine::MachineInfo;
use keel_kubelet::node::NodeConfig;
use keel_kubelet::node_status::{self, Reservations};
use keel_kubelet::pod_cgroups::PodCgroups;
use keel_kubelet::pod_config::{PodEnvironment, Resolv};
use keel_kubelet::pods::{self, Kubelet};
use keel_kubelet::runtime::Runtime;
use keel_kubelet::server::{self, ServerConfigFlags};

#[tokio::main]
async fn main() -> Result<()> {
    let flags = Flags::parse();
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(flags.log_filter()).with_ansi(ansi).init();
    let config = match flags.configuration() {
        Ok(config) => config,
        Err(error) => {
            tracing::error!(err = %error, "command failed");
            std::process::exit(1);
        }
    };
    let labels = keel_kubelet::cli::node_labels(&flags.node_labels).map_err(anyhow::Error::msg)?;
    let reservations =
        Reservations::from_config(&config.system_reserved, &config.kube_reserved, &config.eviction_hard)
            .map_err(anyhow::Error::msg)?;
    let hostname = match &flags.hostname_override {
        Some(name) => name.clone(),
        None => nix::unistd::gethostname().context("the host's name")?.to_string_lossy().into_owned(),
    }
    .trim()
    .to_lowercase();
    std::fs::create_dir_all(&flags.root_dir)
        .with_context(|| format!("creating {}", flags.root_dir.display()))?;
    let mut machine = MachineInfo::read(&flags.root_dir)?;
    if let Some(capacity) = &flags.test_node_capacity {
        machine.declare_capacity(capacity).map_err(anyhow::Error::msg).context("--test-node-capacity")?;
    }
    let cert_dir = flags.cert_dir.clone().unwrap_or_else(|| flags.root_dir.join("pki"));
    if let Some(bootstrap) = &flags.bootstrap_kubeconfig {
        bootstrap::load_client_cert(&flags.kubeconfig, bootstrap, &cert_dir, &hostname).await?;
    }
    let (client, rotating) = match config.rotate_certificates {
        true => {
            let (client, rotating) = RotatingClient::new(&flags.kubeconfig, &cert_dir).await?;
            (client, Some(rotating))
        }
        false => (kube::Client::try_from(bootstrap::kube_config(&flags.kubeconfig).await?)?, None),
    };
    if let Some(rotating) = rotating {
        tokio::spawn(bootstrap::rotate_client(client.clone(), rotating, hostname.clone()));
    }
    let serving_certificate = config.server_tls_bootstrap.then(Arc::<ServingCertificate>::default);
    if let Some(serving) = &serving_certificate {
        let mut hosts = vec![hostname.clone()];
        hosts.extend(flags.node_ip.iter().map(ToString::to_string));
        let renewal = bootstrap::rotate_serving(
            client.clone(),
            serving.clone(),
            cert_dir.clone(),
            hostname.clone(),
            hosts,
        );
        tokio::spawn(renewal);
    }
    let node = NodeConfig {
        node_name: hostname.clone(),
        hostname,
        node_ip: flags.node_ip,
        labels,
        taints: config.register_with_taints.clone(),
        max_pods: config.max_pods,
        reservations,
        port: config.port,
        max_images: config.node_status_max_images,
        provider_id: config.provider_id.clone(),
    };
    let timings = Timings {
        status_update_frequency: config.node_status_update_frequency,
        status_report_frequency: config.node_status_report_frequency,
        lease_duration_seconds: config.node_lease_duration_seconds,
    };
    let runtime = Runtime::new(&config.container_runtime_endpoint);
    let host_ips = flags.node_ip.iter().map(ToString::to_string).collect();
    let host_resolv = match config.resolv_conf.as_os_str().is_empty() {
        true => Resolv::default(),
        false => Resolv::parse(&std::fs::read_to_string(&config.resolv_conf).unwrap_or_default()),
    };
    let env = PodEnvironment {
        cluster_dns: config.cluster_dns.iter().map(ToString::to_string).collect(),
        cluster_domain: config.cluster_domain.clone(),
        host_resolv,
        pod_logs_dir: config.pod_logs_dir.display().to_string(),
        node_name: node.node_name.clone(),
        swap: keel_kubelet::machine::swap_control(),
        allocatable: node_status::allocatable(
            &node_status::capacity(&machine, node.max_pods),
            &node.reservations,
        ),
    };
    // upstream's container manager start: kubepods and the QoS cgroups before any pod.
    let cgroups = match config.cgroups_per_qos {
        true => {
            let layout = keel_cgroups::Layout::host().context("reading the cgroup mounts")?;
            let root =
                if config.cgroup_root.is_empty() { "/".to_owned() } else { config.cgroup_root.clone() };
            let cgroups = PodCgroups {
                layout,
                root,
                huge_page_sizes_kib: machine.huge_pages.iter().map(|(size, _)| *size).collect(),
                pod_pids_limit: config.pod_pids_limit,
            };
            let limits = node_status::pods_cgroup_limits(
                &node_status::capacity(&machine, node.max_pods),
                &node.reservations,
            );
            let enforced = config.enforce_node_allocatable.iter().any(|e| e == "pods");
            cgroups
                .set_up(enforced.then_some(&limits))
                .map_err(anyhow::Error::msg)
                .context("failed to start the container manager")?;
            Some(cgroups)
        }
        false => None,
    };
    let serving = ServerConfigFlags {
        address: std::net::SocketAddr::new(config.address, u16::try_from(config.port)?),
        tls: config.tls_cert_file.clone().zip(config.tls_private_key_file.clone()),
        serving: serving_certificate,
        cert_dir,
        client_ca_file: config.client_ca_file.clone(),
        anonymous: config.anonymous_auth,
        token_webhook: config.webhook_authentication,
        authorization: config.authorization_mode,
        token_cache_ttl: config.webhook_authentication_cache_ttl,
        authorized_ttl: config.authorized_ttl,
        unauthorized_ttl: config.unauthorized_ttl,
        node_name: node.node_name.clone(),
        hostname: node.hostname.clone(),
    };
    let healthz = match u16::try_from(config.healthz_port)? {
        0 => None,
        port => Some(std::net::SocketAddr::new(config.healthz_bind_address, port)),
    };
    let pods = {
        let (client, runtime, node_name, root_dir) =
            (client.clone(), runtime.clone(), node.node_name.clone(), flags.root_dir.clone());
        let (enable_server, resync) = (config.enable_server, config.sync_frequency);
        let (static_pod_path, file_check_frequency) =
            (config.static_pod_path.clone(), config.file_check_frequency);
        async move {
            let (cri, runtime_name) = runtime.wait_for_cri().await;
            let mut kubelet = Kubelet::new(client, node_name, host_ips, root_dir, env, cri, runtime_name)
                .with_sync_frequency(resync);
            if let Some(path) = static_pod_path {
                kubelet = kubelet.with_static_pods(path, file_check_frequency);
            }
            if let Some(cgroups) = cgroups {
                kubelet = kubelet.with_pod_cgroups(cgroups);
            }
            let kubelet = Arc::new(kubelet);
            let serving = async {
                match enable_server {
                    true => server::serve(kubelet.clone(), serving).await,
                    false => std::future::pending().await,
                }
            };
            tokio::select! {
                () = pods::run(kubelet.clone()) => Ok(()),
                served = serving => served,
            }
        }
    };
    let healthz = async {
        match healthz {
            Some(address) => server::serve_healthz(address).await,
            None => std::future::pending().await,
        }
    };
    let agent = Agent::new(client, node, machine, runtime, timings);
    tokio::select! {
        () = agent.run() => Ok(()),
        result = pods => result,
        result = healthz => result,
        signal = tokio::signal::ctrl_c() => signal.context("waiting for a signal"),
    }
}
