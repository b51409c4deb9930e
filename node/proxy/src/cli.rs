//! The binary's flags, kube-proxy's names: `keel-proxy --kubeconfig F --hostname-override NODE
//! --proxy-mode nftables --cluster-cidr CIDRS [--nodeport-addresses primary|CIDRS]
//! [--healthz-bind-address ADDR] [--metrics-bind-address ADDR] [--min-sync-period D]`.

use std::path::PathBuf;
use std::time::Duration;

use ipnet::IpNet;

use crate::nft::RenderConfig;

/// The command line.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "keel-proxy", about = "Keel's kube-proxy: Services to nftables")]
pub struct Flags {
    /// The kubeconfig to reach the API server with (default: in-cluster, then ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// This node's name (default: the host name).
    #[arg(long)]
    pub hostname_override: Option<String>,
    /// The proxy mode; only `nftables` exists.
    #[arg(long, default_value = "nftables")]
    pub proxy_mode: String,
    /// The pods' CIDRs, comma-separated (one per family): traffic to a ClusterIP from outside them is
    /// masqueraded.
    #[arg(long, value_delimiter = ',')]
    pub cluster_cidr: Vec<IpNet>,
    /// Node ports answer only on these CIDRs, or with `primary` (the default, as kube-proxy's
    /// nftables mode) on this Node's primary IPs.
    #[arg(long, value_delimiter = ',', default_value = "primary", value_parser = parse_nodeport_address)]
    pub nodeport_addresses: Vec<NodePortAddress>,
    /// Where /healthz is served, e.g. `0.0.0.0:10256` (default: not served).
    #[arg(long)]
    pub healthz_bind_address: Option<String>,
    /// Where /metrics is served, e.g. `127.0.0.1:10249` (default: not served).
    #[arg(long)]
    pub metrics_bind_address: Option<String>,
    /// At least this long between syncs after a burst of two, e.g. `1s`, `250ms`.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub min_sync_period: Duration,
    /// This proxy's `service.kubernetes.io/service-proxy-name` (default: unlabelled Services).
    #[arg(long)]
    pub proxy_name: Option<String>,
}

/// Why the flags cannot run.
#[derive(Debug, thiserror::Error)]
pub enum FlagError {
    /// A mode keel-proxy does not have.
    #[error("--proxy-mode {0}: only nftables is supported")]
    ProxyMode(String),
    /// `primary` beside CIDRs.
    #[error("--nodeport-addresses: \"primary\" cannot be combined with CIDRs")]
    PrimaryWithCidrs,
    /// No node name.
    #[error("--hostname-override is empty and the host name could not be read")]
    NoNodeName,
}

/// One value of `--nodeport-addresses`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodePortAddress {
    /// This Node's primary IPs ([`crate::node_ips::primary_ips`]).
    Primary,
    Cidr(IpNet),
}

fn parse_nodeport_address(text: &str) -> Result<NodePortAddress, String> {
    match text.trim() {
        "primary" => Ok(NodePortAddress::Primary),
        cidr => cidr
            .parse()
            .map(NodePortAddress::Cidr)
            .map_err(|_| format!("{cidr:?} is neither a CIDR nor \"primary\"")),
    }
}

impl Flags {
    /// Whether node ports follow the Node's primary IPs (`--nodeport-addresses primary`).
    pub fn nodeport_primary(&self) -> bool {
        self.nodeport_addresses.contains(&NodePortAddress::Primary)
    }

    /// The CIDRs given to `--nodeport-addresses` (none with `primary`).
    pub fn nodeport_cidrs(&self) -> Vec<IpNet> {
        let cidr = |a: &NodePortAddress| match a {
            NodePortAddress::Cidr(cidr) => Some(*cidr),
            NodePortAddress::Primary => None,
        };
        self.nodeport_addresses.iter().filter_map(cidr).collect()
    }

    /// The render's configuration, node ports on `nodeport_addresses` (the given CIDRs, or the
    /// primary IPs' host prefixes).
    pub fn render_config(&self, nodeport_addresses: Vec<IpNet>) -> RenderConfig {
        RenderConfig { cluster_cidrs: self.cluster_cidr.clone(), nodeport_addresses }
    }

    /// Checks what clap cannot, and resolves the node name.
    pub fn node_name(&self) -> Result<String, FlagError> {
        if self.proxy_mode != "nftables" {
            return Err(FlagError::ProxyMode(self.proxy_mode.clone()));
        }
        if self.nodeport_primary() && self.nodeport_addresses.len() > 1 {
            return Err(FlagError::PrimaryWithCidrs);
        }
        let name = match &self.hostname_override {
            Some(name) => name.trim().to_owned(),
            None => {
                nix::unistd::gethostname().ok().and_then(|name| name.into_string().ok()).unwrap_or_default()
            }
        };
        if name.is_empty() { Err(FlagError::NoNodeName) } else { Ok(name.to_lowercase()) }
    }
}

/// `1s`, `250ms`, `2m`, or a number of seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) =
        text.find(|c: char| c.is_ascii_alphabetic()).map_or((text, "s"), |at| text.split_at(at));
    let value: f64 = number.parse().map_err(|_| format!("{text:?} is not a duration (e.g. 1s, 250ms)"))?;
    let seconds = match unit {
        "ms" => value / 1000.0,
        "s" => value,
        "m" => value * 60.0,
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (ms, s, m)")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|err| format!("{text:?}: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn kube_proxy_flag_names() {
        let flags = Flags::try_parse_from([
            "keel-proxy",
            "--kubeconfig",
            "/etc/kubeconfig",
            "--hostname-override",
            "Node-A",
            "--proxy-mode",
            "nftables",
            "--cluster-cidr",
            "10.244.0.0/16,fd00:10:244::/56",
            "--nodeport-addresses",
            "198.18.0.0/16",
            "--min-sync-period",
            "250ms",
        ])
        .unwrap();
        assert_eq!(flags.node_name().unwrap(), "node-a");
        assert_eq!(flags.render_config(flags.nodeport_cidrs()).cluster_cidrs.len(), 2);
        assert!(!flags.nodeport_primary());
        assert_eq!(flags.nodeport_cidrs(), ["198.18.0.0/16".parse::<IpNet>().unwrap()]);
        let default = Flags::try_parse_from(["keel-proxy"]).unwrap();
        assert!(default.nodeport_primary(), "kube-proxy's nftables default");
        let mixed =
            Flags::try_parse_from(["keel-proxy", "--nodeport-addresses", "primary,10.0.0.0/8"]).unwrap();
        assert!(matches!(mixed.node_name(), Err(FlagError::PrimaryWithCidrs)));
        assert!(Flags::try_parse_from(["keel-proxy", "--nodeport-addresses", "nope"]).is_err());
        assert_eq!(flags.min_sync_period, Duration::from_millis(250));
        let iptables = Flags::try_parse_from(["keel-proxy", "--proxy-mode", "iptables"]).unwrap();
        assert!(matches!(iptables.node_name(), Err(FlagError::ProxyMode(_))));
        assert!(Flags::try_parse_from(["keel-proxy", "--cluster-cidr", "nonsense"]).is_err());
        assert!(Flags::try_parse_from(["keel-proxy", "--min-sync-period", "3h"]).is_err());
    }
}
