//! The ADD result (`prevResult` of the next plugin in a chain), held in the 1.1.0 shape and written in
//! whichever version the caller asked for.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::spec::error::{self, Error};
use crate::spec::version::Version;

/// A result: the interfaces made, the addresses given to them, routes and DNS.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CniResult {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    #[serde(default, skip_serializing_if = "Dns::is_empty")]
    pub dns: Dns,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// 1.1.0 and later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// The netns path for an interface inside a container; empty (omitted) on the host.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sandbox: String,
    /// 1.1.0 and later.
    #[serde(default, rename = "socketPath", skip_serializing_if = "String::is_empty")]
    pub socket_path: String,
    /// 1.1.0 and later.
    #[serde(default, rename = "pciID", skip_serializing_if = "String::is_empty")]
    pub pci_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// The address with its prefix length (host bits kept), e.g. `10.244.1.5/24`.
    pub address: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    /// Index into `interfaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Route {
    pub dst: IpNet,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<IpAddr>,
    /// 1.1.0 and later, like the four fields below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advmss: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<u8>,
}

impl Route {
    /// A route to `dst`, through `gw` when given.
    pub fn new(dst: IpNet, gw: Option<IpAddr>) -> Route {
        Route { dst, gw, mtu: None, advmss: None, priority: None, table: None, scope: None }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nameservers: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub search: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
}

impl Dns {
    pub fn is_empty(&self) -> bool {
        self.nameservers.is_empty()
            && self.domain.is_empty()
            && self.search.is_empty()
            && self.options.is_empty()
    }
}

impl CniResult {
    /// Reads a result (a `prevResult`, or a delegated IPAM plugin's output) of any supported version:
    /// 0.3.x/0.4.0 `ips[].version` is ignored, fields of later versions are taken when present.
    pub fn from_json(value: &Value) -> Result<CniResult, Error> {
        serde_json::from_value(value.clone()).map_err(|err| {
            Error::new(error::DECODING_FAILURE, "failed to decode the result").with_details(err.to_string())
        })
    }

    /// Writes the result as `version` defines it: 0.3.x and 0.4.0 carry `ips[].version`; fields
    /// introduced in 1.1.0 (interface mtu, socketPath, pciID; route mtu, advmss, priority, table,
    /// scope) are left out before 1.1.0.
    pub fn to_json(&self, version: Version) -> Value {
        let mut result = self.clone();
        if version < Version::V1_1_0 {
            for interface in &mut result.interfaces {
                interface.mtu = None;
                interface.socket_path.clear();
                interface.pci_id.clear();
            }
            for route in &mut result.routes {
                *route = Route::new(route.dst, route.gw);
            }
        }
        let mut value = serde_json::to_value(&result).unwrap_or_default();
        let object = value.as_object_mut().expect("a result serializes to an object");
        if version < Version::V1_0_0
            && let Some(Value::Array(ips)) = object.get_mut("ips")
        {
            for (ip, config) in ips.iter_mut().zip(&self.ips) {
                let family = if config.address.addr().is_ipv4() { "4" } else { "6" };
                if let Value::Object(ip) = ip {
                    let mut ordered = Map::new();
                    ordered.insert("version".into(), Value::String(family.into()));
                    ordered.extend(std::mem::take(ip));
                    *ip = ordered;
                }
            }
        }
        let mut ordered = Map::new();
        ordered.insert("cniVersion".into(), Value::String(version.as_str().into()));
        ordered.extend(std::mem::take(object));
        Value::Object(ordered)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sample() -> CniResult {
        CniResult {
            interfaces: vec![
                Interface {
                    name: "cni0".into(),
                    mac: "0a:58:0a:f4:01:01".into(),
                    mtu: Some(1500),
                    ..Default::default()
                },
                Interface {
                    name: "eth0".into(),
                    mac: "0a:58:0a:f4:01:05".into(),
                    mtu: Some(1500),
                    sandbox: "/run/netns/pod".into(),
                    ..Default::default()
                },
            ],
            ips: vec![
                IpConfig {
                    address: "10.244.1.5/24".parse().unwrap(),
                    gateway: Some("10.244.1.1".parse().unwrap()),
                    interface: Some(1),
                },
                IpConfig { address: "fd00:1::5/64".parse().unwrap(), gateway: None, interface: Some(1) },
            ],
            routes: vec![Route { priority: Some(10), ..Route::new("0.0.0.0/0".parse().unwrap(), None) }],
            dns: Dns::default(),
        }
    }

    #[test]
    fn writes_each_version_as_its_spec_defines_it() {
        let result = sample();
        let v110 = result.to_json(Version::V1_1_0);
        assert_eq!(v110["cniVersion"], "1.1.0");
        assert_eq!(v110["interfaces"][1]["mtu"], 1500);
        assert_eq!(v110["routes"][0]["priority"], 10);
        assert_eq!(
            v110["ips"][0],
            json!({"address": "10.244.1.5/24", "gateway": "10.244.1.1", "interface": 1})
        );
        assert!(v110.get("dns").is_none());

        let v100 = result.to_json(Version::V1_0_0);
        assert!(v100["interfaces"][1].get("mtu").is_none());
        assert_eq!(v100["routes"][0], json!({"dst": "0.0.0.0/0"}));
        assert!(v100["ips"][0].get("version").is_none());

        let v031 = result.to_json(Version::V0_3_1);
        assert_eq!(v031["cniVersion"], "0.3.1");
        assert_eq!(v031["ips"][0]["version"], "4");
        assert_eq!(v031["ips"][1]["version"], "6");
        assert_eq!(v031["ips"][1]["address"], "fd00:1::5/64");
    }

    #[test]
    fn reads_results_of_every_version_back() {
        let result = sample();
        for version in Version::ALL {
            let back = CniResult::from_json(&result.to_json(version)).unwrap();
            assert_eq!(back.ips, result.ips, "{version}");
            assert_eq!(back.interfaces.len(), 2);
        }
        let err = CniResult::from_json(&json!({"ips": [{"address": "not an address"}]})).unwrap_err();
        assert_eq!(err.code, error::DECODING_FAILURE);
    }
}
