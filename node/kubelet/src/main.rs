//! keel-kubelet: the node agent, flags as upstream's kubelet names them. It registers the Node,
//! heartbeats its Lease and status, and runs the Pods bound to it through the CRI runtime.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Parser;
use keel_kubelet::agent::{Agent, Timings};
use keel_kubelet::machine::MachineInfo;
use keel_kubelet::node::NodeConfig;
use keel_kubelet::node_status::Reservations;
use keel_kubelet::pod_config::{PodEnvironment, Resolv};
use keel_kubelet::pods::{self, Kubelet};
use keel_kubelet::runtime::Runtime;
use keel_kubelet::server::{self, Authorization, ServerConfigFlags};

#[derive(Debug, Parser)]
#[command(name = "keel-kubelet", about = "Keel's kubelet: registers the Node and heartbeats it")]
struct Flags {
    /// The kubeconfig the kubelet reaches the API server with.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// The Node's name, instead of the host's.
    #[arg(long)]
    hostname_override: Option<String>,
    /// The node's InternalIP address.
    #[arg(long)]
    node_ip: Option<IpAddr>,
    /// The CRI runtime's endpoint.
    #[arg(long, default_value = "unix:///run/containerd/containerd.sock")]
    container_runtime_endpoint: String,
    /// The kubelet's state directory; its filesystem is the node's ephemeral-storage.
    #[arg(long, default_value = "/var/lib/kubelet")]
    root_dir: PathBuf,
    /// The most pods this node runs.
    #[arg(long, default_value_t = 110)]
    max_pods: i64,
    /// Labels to register the Node with: key=value,...
    #[arg(long, default_value = "")]
    node_labels: String,
    /// Taints to register the Node with: key=value:Effect,...
    #[arg(long, default_value = "")]
    register_with_taints: String,
    /// How often the status is computed and, when it changed, reported (seconds).
    #[arg(long, default_value_t = 10)]
    node_status_update_frequency: u64,
    /// The cluster's DNS server addresses, for ClusterFirst pods: IP,...
    #[arg(long, value_delimiter = ',')]
    cluster_dns: Vec<IpAddr>,
    /// The cluster's DNS domain.
    #[arg(long, default_value = "cluster.local")]
    cluster_domain: String,
    /// The resolver configuration pods with dnsPolicy Default get.
    #[arg(long, default_value = "/etc/resolv.conf")]
    resolv_conf: PathBuf,
    /// The address the kubelet API is served on.
    #[arg(long, default_value = "0.0.0.0")]
    address: IpAddr,
    /// The port of the kubelet API (HTTPS).
    #[arg(long, default_value_t = 10250)]
    port: u16,
    /// The kubelet API's serving certificate (with its CA chain); without it, a self-signed one in
    /// --cert-dir.
    #[arg(long, requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    #[arg(long, requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    /// Where the self-signed serving certificate is kept (default <root-dir>/pki).
    #[arg(long)]
    cert_dir: Option<PathBuf>,
    /// The CA client certificates of kubelet API requests are verified against.
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
    /// Kubelet API requests no authenticator recognises are system:anonymous.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    anonymous_auth: bool,
    /// Bearer tokens of kubelet API requests are reviewed by the API server (TokenReview).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    authentication_token_webhook: bool,
    /// AlwaysAllow, or Webhook: kubelet API requests authorized by SubjectAccessReviews.
    #[arg(long, default_value = "AlwaysAllow")]
    authorization_mode: Authorization,
}

#[tokio::main]
async fn main() -> Result<()> {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let flags = Flags::parse();
    let labels = keel_kubelet::cli::node_labels(&flags.node_labels).map_err(anyhow::Error::msg)?;
    let taints = keel_kubelet::cli::taints(&flags.register_with_taints).map_err(anyhow::Error::msg)?;
    let hostname = match &flags.hostname_override {
        Some(name) => name.clone(),
        None => nix::unistd::gethostname().context("the host's name")?.to_string_lossy().into_owned(),
    }
    .trim()
    .to_lowercase();
    std::fs::create_dir_all(&flags.root_dir)
        .with_context(|| format!("creating {}", flags.root_dir.display()))?;
    let machine = MachineInfo::read(&flags.root_dir)?;
    let kubeconfig = kube::config::Kubeconfig::read_from(&flags.kubeconfig)
        .with_context(|| format!("reading {}", flags.kubeconfig.display()))?;
    let client =
        kube::Client::try_from(kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?)?;
    let config = NodeConfig {
        node_name: hostname.clone(),
        hostname,
        node_ip: flags.node_ip,
        labels,
        taints,
        max_pods: flags.max_pods,
        reservations: Reservations::defaults(),
        port: i32::from(flags.port),
    };
    let timings = Timings {
        status_update_frequency: Duration::from_secs(flags.node_status_update_frequency.max(1)),
        ..Timings::default()
    };
    let runtime = Runtime::new(&flags.container_runtime_endpoint);
    let host_ips = flags.node_ip.iter().map(ToString::to_string).collect();
    let env = PodEnvironment {
        cluster_dns: flags.cluster_dns.iter().map(ToString::to_string).collect(),
        cluster_domain: flags.cluster_domain.clone(),
        host_resolv: Resolv::parse(&std::fs::read_to_string(&flags.resolv_conf).unwrap_or_default()),
        pod_logs_dir: "/var/log/pods".into(),
        node_name: config.node_name.clone(),
    };
    let serving = ServerConfigFlags {
        address: std::net::SocketAddr::new(flags.address, flags.port),
        tls: flags.tls_cert_file.clone().zip(flags.tls_private_key_file.clone()),
        cert_dir: flags.cert_dir.clone().unwrap_or_else(|| flags.root_dir.join("pki")),
        client_ca_file: flags.client_ca_file.clone(),
        anonymous: flags.anonymous_auth,
        token_webhook: flags.authentication_token_webhook,
        authorization: flags.authorization_mode,
        node_name: config.node_name.clone(),
        hostname: config.hostname.clone(),
    };
    let pods = {
        let (client, runtime, node_name, root_dir) =
            (client.clone(), runtime.clone(), config.node_name.clone(), flags.root_dir.clone());
        async move {
            let (cri, runtime_name) = runtime.wait_for_cri().await;
            let kubelet =
                Arc::new(Kubelet::new(client, node_name, host_ips, root_dir, env, cri, runtime_name));
            tokio::select! {
                () = pods::run(kubelet.clone()) => Ok(()),
                served = server::serve(kubelet, serving) => served,
            }
        }
    };
    let agent = Agent::new(client, config, machine, runtime, timings);
    tokio::select! {
        () = agent.run() => Ok(()),
        result = pods => result,
        signal = tokio::signal::ctrl_c() => signal.context("waiting for a signal"),
    }
}
