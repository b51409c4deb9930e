//! The network configuration on stdin: the reference bridge plugin's keys, host-local's `ipam` keys,
//! the runtime's capability arguments and, in a chain, the previous plugin's result.

use std::net::IpAddr;
use std::path::PathBuf;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::spec::error::{self, Error};
use crate::spec::result::{CniResult, Dns};
use crate::spec::version::Version;

/// The bridge a configuration names when it names none (the reference plugin's default).
pub const DEFAULT_BRIDGE: &str = "cni0";

/// Where allocations live when `ipam.dataDir` is not set (host-local's default).
pub const DEFAULT_DATA_DIR: &str = "/var/lib/cni/networks";

/// A network configuration, as one plugin of a list receives it.
#[derive(Debug, Clone)]
pub struct NetConf {
    pub cni_version: Version,
    pub name: String,
    pub plugin_type: String,
    pub bridge: BridgeConf,
    pub ipam: IpamConf,
    pub dns: Dns,
    pub runtime_config: RuntimeConfig,
    /// `args.cni.ips`: addresses the runtime asks for (as host-local reads them).
    pub args_ips: Vec<IpAddr>,
    /// The previous plugin's result in a chain (converted to the 1.1.0 shape).
    pub prev_result: Option<CniResult>,
    /// GC: the attachments still in use; every other allocation is released.
    pub valid_attachments: Option<Vec<Attachment>>,
    /// The configuration as received, for a delegated IPAM plugin.
    pub raw: Value,
}

/// The reference bridge plugin's keys keel-cni honours, plus `clusterCIDRs` (keel-cni's own).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BridgeConf {
    #[serde(default = "default_bridge")]
    pub bridge: String,
    #[serde(default)]
    pub is_gateway: bool,
    /// Implies `isGateway`; adds the default route through the bridge inside the pod.
    #[serde(default)]
    pub is_default_gateway: bool,
    #[serde(default)]
    pub force_address: bool,
    #[serde(default)]
    pub ip_masq: bool,
    /// The bridge's and the pod interface's MTU; the kernel's default (1500) when absent or 0.
    #[serde(default)]
    pub mtu: Option<u32>,
    #[serde(default)]
    pub hairpin_mode: bool,
    #[serde(default)]
    pub promisc_mode: bool,
    /// Destinations reached without masquerade when `ipMasq` is set: the cluster's pod network (and
    /// whatever else the operator lists). When absent, the pod's own subnets, as the reference bridge
    /// plugin does.
    #[serde(default, rename = "clusterCIDRs")]
    pub cluster_cidrs: Vec<IpNet>,
}

fn default_bridge() -> String {
    DEFAULT_BRIDGE.to_owned()
}

/// `ipam`: host-local's keys. `type` is optional: absent means keel-cni's built-in IPAM.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IpamConf {
    /// The IPAM plugin to delegate to, if any (`host-local`, `whereabouts`, ...).
    pub plugin_type: Option<String>,
    /// Range sets: one address is allocated from each set (one set per family for dual-stack).
    pub ranges: Vec<Vec<RangeConf>>,
    pub routes: Vec<RouteConf>,
    pub data_dir: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RangeConf {
    pub subnet: IpNet,
    #[serde(default)]
    pub range_start: Option<IpAddr>,
    #[serde(default)]
    pub range_end: Option<IpAddr>,
    #[serde(default)]
    pub gateway: Option<IpAddr>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RouteConf {
    pub dst: IpNet,
    #[serde(default)]
    pub gw: Option<IpAddr>,
}

/// `runtimeConfig`: the capability arguments a runtime passes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeConfig {
    #[serde(default)]
    pub port_mappings: Vec<PortMapping>,
    /// The `ips` capability: addresses to allocate (with or without a prefix length).
    #[serde(default, deserialize_with = "addresses")]
    pub ips: Vec<IpAddr>,
    /// The `mac` capability.
    #[serde(default)]
    pub mac: Option<String>,
    /// The `ipRanges` capability: range sets replacing the configured ones (the node's pod CIDR).
    #[serde(default)]
    pub ip_ranges: Vec<Vec<RangeConf>>,
}

/// A hostPort (the `portMappings` capability), as the portmap plugin receives it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortMapping {
    pub host_port: u16,
    pub container_port: u16,
    #[serde(default = "default_protocol")]
    pub protocol: String,
    #[serde(default, rename = "hostIP", deserialize_with = "optional_address")]
    pub host_ip: Option<IpAddr>,
}

fn default_protocol() -> String {
    "tcp".to_owned()
}

/// One `{containerID, ifname}` of `cni.dev/valid-attachments`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
pub struct Attachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

/// Reads an address written with or without a prefix length ("10.1.2.3" or "10.1.2.3/24").
pub fn parse_address(text: &str) -> Option<IpAddr> {
    text.split_once('/').map_or(text, |(address, _)| address).parse().ok()
}

fn addresses<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<IpAddr>, D::Error> {
    let texts = Vec::<String>::deserialize(deserializer)?;
    texts
        .iter()
        .map(|text| {
            parse_address(text).ok_or_else(|| serde::de::Error::custom(format!("invalid IP {text:?}")))
        })
        .collect()
}

fn optional_address<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<IpAddr>, D::Error> {
    match Option::<String>::deserialize(deserializer)? {
        None => Ok(None),
        Some(text) if text.is_empty() => Ok(None),
        Some(text) => parse_address(&text)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("invalid IP {text:?}"))),
    }
}

/// host-local's `ipam` object, before its legacy single-range keys are folded into `ranges`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawIpam {
    #[serde(default, rename = "type")]
    plugin_type: Option<String>,
    #[serde(default)]
    subnet: Option<IpNet>,
    #[serde(default)]
    range_start: Option<IpAddr>,
    #[serde(default)]
    range_end: Option<IpAddr>,
    #[serde(default)]
    gateway: Option<IpAddr>,
    #[serde(default)]
    ranges: Vec<Vec<RangeConf>>,
    #[serde(default)]
    routes: Vec<RouteConf>,
    #[serde(default)]
    data_dir: Option<PathBuf>,
}

fn invalid(field: &str, err: impl std::fmt::Display) -> Error {
    Error::config(format!("invalid network configuration: {field}")).with_details(err.to_string())
}

fn field<T: serde::de::DeserializeOwned + Default>(object: &Value, key: &str) -> Result<T, Error> {
    match object.get(key) {
        None | Some(Value::Null) => Ok(T::default()),
        Some(value) => serde_json::from_value(value.clone()).map_err(|err| invalid(key, err)),
    }
}

impl NetConf {
    /// Parses stdin. Malformed JSON is error 6, a missing or unsupported `cniVersion` error 1, a field
    /// of the wrong shape or an inconsistent range error 7.
    pub fn parse(stdin: &[u8]) -> Result<NetConf, Error> {
        let raw: Value = serde_json::from_slice(stdin).map_err(|err| {
            Error::new(error::DECODING_FAILURE, "failed to decode the network configuration")
                .with_details(err.to_string())
        })?;
        if !raw.is_object() {
            return Err(Error::new(
                error::DECODING_FAILURE,
                "the network configuration is not a JSON object",
            ));
        }
        let version = match raw.get("cniVersion") {
            Some(Value::String(text)) => Version::parse(text)?,
            Some(other) => return Err(invalid("cniVersion", format!("not a string: {other}"))),
            None => return Err(Error::config("the network configuration has no cniVersion")),
        };
        let name: String = field(&raw, "name")?;
        let plugin_type: String = field(&raw, "type")?;
        let bridge: BridgeConf =
            serde_json::from_value(raw.clone()).map_err(|err| invalid("bridge keys", err))?;
        let ipam = match raw.get("ipam") {
            None | Some(Value::Null) => IpamConf { data_dir: DEFAULT_DATA_DIR.into(), ..IpamConf::default() },
            Some(value) => {
                let raw_ipam: RawIpam =
                    serde_json::from_value(value.clone()).map_err(|err| invalid("ipam", err))?;
                let mut ranges = raw_ipam.ranges;
                if let Some(subnet) = raw_ipam.subnet {
                    ranges.insert(
                        0,
                        vec![RangeConf {
                            subnet,
                            range_start: raw_ipam.range_start,
                            range_end: raw_ipam.range_end,
                            gateway: raw_ipam.gateway,
                        }],
                    );
                }
                IpamConf {
                    plugin_type: raw_ipam.plugin_type.filter(|name| !name.is_empty()),
                    ranges,
                    routes: raw_ipam.routes,
                    data_dir: raw_ipam.data_dir.unwrap_or_else(|| DEFAULT_DATA_DIR.into()),
                }
            }
        };
        let runtime_config: RuntimeConfig = field(&raw, "runtimeConfig")?;
        let args_ips = match raw.pointer("/args/cni/ips") {
            None | Some(Value::Null) => Vec::new(),
            Some(value) => {
                let texts: Vec<String> =
                    serde_json::from_value(value.clone()).map_err(|err| invalid("args.cni.ips", err))?;
                texts
                    .iter()
                    .map(|text| {
                        parse_address(text)
                            .ok_or_else(|| invalid("args.cni.ips", format!("invalid IP {text:?}")))
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        let prev_result = match raw.get("prevResult") {
            None | Some(Value::Null) => None,
            Some(value) => Some(CniResult::from_json(value)?),
        };
        let valid_attachments = match raw.get("cni.dev/valid-attachments") {
            None | Some(Value::Null) => None,
            Some(value) => Some(
                serde_json::from_value(value.clone())
                    .map_err(|err| invalid("cni.dev/valid-attachments", err))?,
            ),
        };
        let conf = NetConf {
            cni_version: version,
            name,
            plugin_type,
            bridge,
            ipam,
            dns: field(&raw, "dns")?,
            runtime_config,
            args_ips,
            prev_result,
            valid_attachments,
            raw,
        };
        conf.validate()?;
        Ok(conf)
    }

    /// The range sets to allocate from: the runtime's `ipRanges` when given, else the configured ones.
    pub fn range_sets(&self) -> &[Vec<RangeConf>] {
        if self.runtime_config.ip_ranges.is_empty() {
            &self.ipam.ranges
        } else {
            &self.runtime_config.ip_ranges
        }
    }

    fn validate(&self) -> Result<(), Error> {
        if self.name.is_empty() {
            return Err(Error::config("the network configuration has no name"));
        }
        // The network name becomes a directory under dataDir (as host-local uses it).
        if self.name.contains('/') || self.name == "." || self.name == ".." {
            return Err(Error::config(format!("invalid network name {:?}", self.name)));
        }
        let bridge = &self.bridge.bridge;
        if bridge.is_empty() || bridge.len() > 15 || bridge.contains(['/', ' ', ':']) {
            return Err(Error::config(format!("invalid bridge name {bridge:?}")));
        }
        if let Some(mtu) = self.bridge.mtu
            && mtu != 0
            && !(68..=65535).contains(&mtu)
        {
            return Err(Error::config(format!("invalid mtu {mtu}: the kernel accepts 68 to 65535")));
        }
        for set in self.range_sets() {
            if set.is_empty() {
                return Err(Error::config("an ipam range set is empty"));
            }
            for range in set {
                range.validate()?;
            }
        }
        for mapping in &self.runtime_config.port_mappings {
            if mapping.host_port == 0 || mapping.container_port == 0 {
                return Err(Error::config(format!(
                    "invalid port mapping {mapping:?}: ports must be 1 to 65535"
                )));
            }
            if !matches!(mapping.protocol.to_ascii_lowercase().as_str(), "tcp" | "udp" | "sctp") {
                return Err(Error::config(format!("invalid port mapping protocol {:?}", mapping.protocol)));
            }
        }
        Ok(())
    }
}

impl RangeConf {
    /// A range must lie in its subnet, start before it ends, and leave room for at least one address.
    pub fn validate(&self) -> Result<(), Error> {
        let subnet = self.subnet.trunc();
        let family_matches = |address: &IpAddr| address.is_ipv4() == subnet.addr().is_ipv4();
        for (key, address) in
            [("rangeStart", self.range_start), ("rangeEnd", self.range_end), ("gateway", self.gateway)]
        {
            if let Some(address) = address
                && !(family_matches(&address) && subnet.contains(&address))
            {
                return Err(Error::config(format!("{key} {address} is not in subnet {subnet}")));
            }
        }
        if let (Some(start), Some(end)) = (self.range_start, self.range_end)
            && start > end
        {
            return Err(Error::config(format!("rangeStart {start} is after rangeEnd {end}")));
        }
        let host_bits = subnet.max_prefix_len() - subnet.prefix_len();
        if host_bits < 2 {
            return Err(Error::config(format!("subnet {subnet} is too small to allocate from")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(value: &Value) -> Result<NetConf, Error> {
        NetConf::parse(value.to_string().as_bytes())
    }

    #[test]
    fn reads_the_reference_bridge_and_host_local_keys() {
        let conf = parse(&json!({
            "cniVersion": "1.0.0", "name": "kube", "type": "keel-cni", "bridge": "cbr0", "isGateway": true,
            "ipMasq": true, "mtu": 1450, "hairpinMode": true,
            "ipam": {"type": "host-local", "subnet": "10.244.1.0/24", "rangeStart": "10.244.1.10",
                     "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "/tmp/ipam"},
            "runtimeConfig": {"portMappings": [{"hostPort": 8080, "containerPort": 80, "protocol": "tcp"}],
                              "ips": ["10.244.1.20/24"], "mac": "0a:58:0a:f4:01:14"},
            "args": {"cni": {"ips": ["10.244.1.21"]}},
        }))
        .unwrap();
        assert_eq!(conf.bridge.bridge, "cbr0");
        assert!(conf.bridge.is_gateway && conf.bridge.ip_masq && conf.bridge.hairpin_mode);
        assert_eq!(conf.bridge.mtu, Some(1450));
        assert_eq!(conf.ipam.plugin_type.as_deref(), Some("host-local"));
        assert_eq!(conf.ipam.ranges[0][0].subnet, "10.244.1.0/24".parse::<IpNet>().unwrap());
        assert_eq!(conf.ipam.ranges[0][0].range_start, Some("10.244.1.10".parse().unwrap()));
        assert_eq!(conf.ipam.data_dir, PathBuf::from("/tmp/ipam"));
        assert_eq!(conf.runtime_config.port_mappings[0].host_port, 8080);
        assert_eq!(conf.runtime_config.ips, vec!["10.244.1.20".parse::<IpAddr>().unwrap()]);
        assert_eq!(conf.args_ips, vec!["10.244.1.21".parse::<IpAddr>().unwrap()]);
    }

    #[test]
    fn ipam_type_is_optional_and_ip_ranges_replace_the_configured_ranges() {
        let conf = parse(&json!({
            "cniVersion": "1.1.0", "name": "kube", "type": "keel-cni",
            "ipam": {"ranges": [[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd00:1::/64"}]]},
            "runtimeConfig": {"ipRanges": [[{"subnet": "10.244.7.0/24"}]]},
        }))
        .unwrap();
        assert_eq!(conf.ipam.plugin_type, None);
        assert_eq!(conf.bridge.bridge, DEFAULT_BRIDGE);
        assert_eq!(conf.ipam.ranges.len(), 2);
        assert_eq!(conf.range_sets()[0][0].subnet, "10.244.7.0/24".parse::<IpNet>().unwrap());
        assert_eq!(conf.ipam.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
    }

    #[test]
    fn bad_configurations_get_the_specs_codes() {
        let cases = [
            (b"{not json".to_vec(), error::DECODING_FAILURE),
            (b"[1]".to_vec(), error::DECODING_FAILURE),
            (json!({"name": "n", "type": "keel-cni"}).to_string().into_bytes(), error::INVALID_NETWORK_CONFIG),
            (json!({"cniVersion": "0.2.0", "name": "n"}).to_string().into_bytes(), error::INCOMPATIBLE_VERSION),
            (json!({"cniVersion": "1.0.0"}).to_string().into_bytes(), error::INVALID_NETWORK_CONFIG),
            (json!({"cniVersion": "1.0.0", "name": "n", "mtu": "big"}).to_string().into_bytes(), error::INVALID_NETWORK_CONFIG),
            (
                json!({"cniVersion": "1.0.0", "name": "n", "ipam": {"subnet": "10.0.0.0/24", "rangeStart": "10.0.1.1"}})
                    .to_string()
                    .into_bytes(),
                error::INVALID_NETWORK_CONFIG,
            ),
            (
                json!({"cniVersion": "1.0.0", "name": "n", "ipam": {"subnet": "10.0.0.0/31"}}).to_string().into_bytes(),
                error::INVALID_NETWORK_CONFIG,
            ),
            (
                json!({"cniVersion": "1.0.0", "name": "n", "runtimeConfig": {"portMappings": [{"hostPort": 0, "containerPort": 1}]}})
                    .to_string()
                    .into_bytes(),
                error::INVALID_NETWORK_CONFIG,
            ),
            (
                json!({"cniVersion": "1.0.0", "name": "n", "prevResult": {"ips": [{"address": "x"}]}}).to_string().into_bytes(),
                error::DECODING_FAILURE,
            ),
        ];
        for (stdin, code) in cases {
            let err = NetConf::parse(&stdin).unwrap_err();
            assert_eq!(err.code, code, "{}: {err}", String::from_utf8_lossy(&stdin));
        }
    }
}
