//! This node's primary IPs, as kube-proxy finds them (`utilnode.GetNodeHostIPs`): the first
//! InternalIP of each family, else the first ExternalIP, the family of the first address found first.
//! kube-proxy's nftables mode accepts node ports only there by default (`--nodeport-addresses
//! primary`), and so does keel-proxy.

use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::Node;

/// The node's primary IPs (at most one per family), or none when its status has no usable address.
pub fn primary_ips(node: &Node) -> Vec<IpAddr> {
    let addresses = node.status.as_ref().and_then(|s| s.addresses.as_deref()).unwrap_or_default();
    let of_type = |typ: &str| -> Vec<IpAddr> {
        addresses.iter().filter(|a| a.type_ == typ).filter_map(|a| a.address.trim().parse().ok()).collect()
    };
    let (internal, external) = (of_type("InternalIP"), of_type("ExternalIP"));
    let mut ips: Vec<IpAddr> = Vec::new();
    for candidates in [&internal, &external] {
        for ip in candidates {
            if !ips.iter().any(|have| have.is_ipv4() == ip.is_ipv4()) {
                ips.push(*ip);
            }
        }
        // ExternalIPs stand in only for a family with no InternalIP.
    }
    ips
}

/// Each address as a host prefix (/32, /128): what `--nodeport-addresses primary` restricts to.
pub fn host_prefixes(ips: &[IpAddr]) -> Vec<IpNet> {
    ips.iter().map(|ip| IpNet::from(*ip)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};

    fn node(addresses: &[(&str, &str)]) -> Node {
        Node {
            status: Some(NodeStatus {
                addresses: Some(
                    addresses
                        .iter()
                        .map(|(t, a)| NodeAddress { type_: (*t).into(), address: (*a).into() })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn internal_ips_first_one_per_family_external_ips_fill_in() {
        let n = node(&[
            ("Hostname", "node-a"),
            ("ExternalIP", "203.0.113.7"),
            ("InternalIP", "10.0.0.5"),
            ("InternalIP", "10.0.0.6"),
            ("ExternalIP", "2001:db8::7"),
        ]);
        let ips: Vec<String> = primary_ips(&n).iter().map(ToString::to_string).collect();
        assert_eq!(ips, ["10.0.0.5", "2001:db8::7"]);
        assert!(primary_ips(&node(&[("Hostname", "node-a"), ("InternalIP", "nonsense")])).is_empty());
        assert!(primary_ips(&Node::default()).is_empty());
        let prefixes: Vec<String> = host_prefixes(&primary_ips(&n)).iter().map(ToString::to_string).collect();
        assert_eq!(prefixes, ["10.0.0.5/32", "2001:db8::7/128"]);
    }
}
