//! The files a sandbox keeps for its containers: `hostname`, `hosts` and `resolv.conf`.
//!
//! - hostname: the pod's hostname (the node's when the config names none, as containerd does).
//! - hosts: for a pod on the pod network, the kubelet's managed hosts file (localhost entries, then each
//!   pod IP with the hostname); for a host-network pod, the node's /etc/hosts under the kubelet's
//!   host-network header.
//! - resolv.conf: from the DNS config (`search`, `nameserver`s, `options`, as containerd writes it), or
//!   a copy of the node's /etc/resolv.conf when the DNS config is empty.

use std::io;
use std::net::IpAddr;
use std::path::Path;

use k8s_cri::v1 as api;

/// At most this many search domains (containerd's and glibc's limit).
pub const MAX_DNS_SEARCHES: usize = 6;

/// The kubelet's header of a managed hosts file.
const MANAGED_HEADER: &str = "# Kubernetes-managed hosts file.\n";
/// The kubelet's header of a host-network pod's hosts file.
const HOST_NETWORK_HEADER: &str = "# Kubernetes-managed hosts file (host network).\n";

/// The hostname file's content.
pub fn hostname(config: &api::PodSandboxConfig) -> io::Result<String> {
    let name = if config.hostname.is_empty() {
        nix::unistd::gethostname()
            .map_err(io::Error::from)?
            .into_string()
            .map_err(|_| io::Error::other("the node's hostname is not UTF-8"))?
    } else {
        config.hostname.clone()
    };
    Ok(name)
}

/// The resolv.conf content the DNS config asks for, `None` when it asks nothing (copy the node's).
/// More than [`MAX_DNS_SEARCHES`] search domains is an error.
pub fn resolv_conf(dns: Option<&api::DnsConfig>) -> Result<Option<String>, String> {
    let Some(dns) = dns else {
        return Ok(None);
    };
    let all = dns.servers.iter().chain(&dns.searches).chain(&dns.options);
    if let Some(bad) =
        all.into_iter().find(|v| v.is_empty() || v.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        return Err(format!("the DNS config entry {bad:?} is empty or holds whitespace"));
    }
    if dns.searches.len() > MAX_DNS_SEARCHES {
        return Err(format!(
            "DNSOption.Searches has {} domains, more than {MAX_DNS_SEARCHES}",
            dns.searches.len()
        ));
    }
    let mut text = String::new();
    if !dns.searches.is_empty() {
        text.push_str(&format!("search {}\n", dns.searches.join(" ")));
    }
    for server in &dns.servers {
        text.push_str(&format!("nameserver {server}\n"));
    }
    if !dns.options.is_empty() {
        text.push_str(&format!("options {}\n", dns.options.join(" ")));
    }
    Ok((!text.is_empty()).then_some(text))
}

/// Whether `hostname` can be a pod's hostname: 1 to 64 bytes (the kernel's limit), no whitespace or
/// control characters (it goes into the hosts file).
pub fn valid_hostname(hostname: &str) -> bool {
    !hostname.is_empty()
        && hostname.len() <= 64
        && !hostname.chars().any(|c| c.is_whitespace() || c.is_control() || c == '/')
}

/// The kubelet's managed hosts file for a pod with `ips` named `hostname`.
pub fn managed_hosts(ips: &[IpAddr], hostname: &str) -> String {
    let mut text = String::from(MANAGED_HEADER);
    text.push_str("127.0.0.1\tlocalhost\n");
    text.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    text.push_str("fe00::0\tip6-localnet\n");
    text.push_str("fe00::0\tip6-mcastprefix\n");
    text.push_str("fe00::1\tip6-allnodes\n");
    text.push_str("fe00::2\tip6-allrouters\n");
    for ip in ips {
        text.push_str(&format!("{ip}\t{hostname}\n"));
    }
    text
}

/// A host-network pod's hosts file: the node's `etc_hosts` content under the kubelet's header.
pub fn host_network_hosts(etc_hosts: &str) -> String {
    format!("{HOST_NETWORK_HEADER}{etc_hosts}")
}

/// Writes `content` to `path` (a temporary file renamed into place, mode 0644).
pub fn write(path: &Path, content: &[u8]) -> io::Result<()> {
    crate::sandbox::record::write_atomic(path, content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_as_containerd_writes_it() {
        let dns = api::DnsConfig {
            servers: vec!["10.96.0.10".to_owned(), "1.1.1.1".to_owned()],
            searches: vec!["ns.svc.cluster.local".to_owned(), "svc.cluster.local".to_owned()],
            options: vec!["ndots:5".to_owned(), "edns0".to_owned()],
        };
        assert_eq!(
            resolv_conf(Some(&dns)).unwrap().unwrap(),
            "search ns.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\nnameserver 1.1.1.1\noptions ndots:5 edns0\n"
        );
        assert_eq!(resolv_conf(None).unwrap(), None);
        assert_eq!(resolv_conf(Some(&api::DnsConfig::default())).unwrap(), None);
        let many =
            api::DnsConfig { searches: (0..7).map(|i| format!("d{i}")).collect(), ..Default::default() };
        assert!(resolv_conf(Some(&many)).unwrap_err().contains("more than 6"));
        let injected =
            api::DnsConfig { servers: vec!["1.1.1.1\nnameserver 6.6.6.6".to_owned()], ..Default::default() };
        assert!(resolv_conf(Some(&injected)).unwrap_err().contains("whitespace"));
        assert!(valid_hostname("web-0") && !valid_hostname("") && !valid_hostname("a b"));
        assert!(!valid_hostname(&"h".repeat(65)) && valid_hostname(&"h".repeat(64)));
    }

    #[test]
    fn hosts_files() {
        let ips: Vec<IpAddr> = vec!["10.1.0.5".parse().unwrap(), "fd00::5".parse().unwrap()];
        let hosts = managed_hosts(&ips, "web-0");
        assert!(hosts.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(hosts.ends_with("fe00::2\tip6-allrouters\n10.1.0.5\tweb-0\nfd00::5\tweb-0\n"), "{hosts}");
        assert_eq!(
            host_network_hosts("127.0.0.1 localhost\n"),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n"
        );
    }
}
