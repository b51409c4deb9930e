//! Services' ClusterIPs and NodePorts: allocated from `--service-cluster-ip-range` and
//! `--service-node-port-range`, each address and port held by a key of its own
//! (`/registry/serviceips/<ip>`, `/registry/servicenodeports/<port>`) written in the same store
//! transaction as the Service, so two Services never get one address, also across restarts and
//! concurrent creates; deleting the Service releases them in its deleting transaction. The
//! `kubernetes` Service (first address of the range) and its Endpoints name the apiserver itself.

use std::net::Ipv4Addr;

use keel_api::resources::Resource;
use keel_api::status::{ApiError, FieldError};
use keel_store::{Compare, Txn, TxnOp};
use serde_json::{Value, json};

/// Where Services' addresses and node ports come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceRanges {
    pub cluster_ip_base: Ipv4Addr,
    pub cluster_ip_prefix: u8,
    pub node_ports: (u16, u16),
}

impl Default for ServiceRanges {
    /// kube-apiserver's defaults: 10.0.0.0/24 and 30000-32767.
    fn default() -> ServiceRanges {
        ServiceRanges {
            cluster_ip_base: Ipv4Addr::new(10, 0, 0, 0),
            cluster_ip_prefix: 24,
            node_ports: (30000, 32767),
        }
    }
}

impl ServiceRanges {
    /// Parses `--service-cluster-ip-range` (an IPv4 CIDR, /12 to /28) and `--service-node-port-range`
    /// (`A-B`).
    pub fn parse(cidr: &str, ports: &str) -> Result<ServiceRanges, String> {
        let (base, prefix) = cidr.split_once('/').ok_or_else(|| format!("{cidr:?} is not a CIDR"))?;
        let base: Ipv4Addr = base.parse().map_err(|_| format!("{cidr:?}: not an IPv4 address"))?;
        let prefix: u8 = prefix.parse().map_err(|_| format!("{cidr:?}: bad prefix length"))?;
        if !(12..=28).contains(&prefix) {
            return Err(format!("{cidr:?}: the prefix length must be between /12 and /28"));
        }
        let mask = u32::MAX << (32 - u32::from(prefix));
        let base = Ipv4Addr::from(u32::from(base) & mask);
        let (low, high) = ports.split_once('-').ok_or_else(|| format!("{ports:?} is not a range A-B"))?;
        let low: u16 = low.trim().parse().map_err(|_| format!("{ports:?}: bad start"))?;
        let high: u16 = high.trim().parse().map_err(|_| format!("{ports:?}: bad end"))?;
        if low == 0 || low > high {
            return Err(format!("{ports:?}: the range is empty"));
        }
        Ok(ServiceRanges { cluster_ip_base: base, cluster_ip_prefix: prefix, node_ports: (low, high) })
    }

    fn size(&self) -> u32 {
        1u32 << (32 - u32::from(self.cluster_ip_prefix))
    }

    /// The `kubernetes` Service's address: the range's first usable address.
    pub fn first(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.cluster_ip_base) + 1)
    }

    /// Whether `ip` is an allocatable address of the range (not the network or broadcast address).
    fn contains(&self, ip: Ipv4Addr) -> bool {
        let offset = u32::from(ip).wrapping_sub(u32::from(self.cluster_ip_base));
        offset >= 1 && offset < self.size() - 1
    }

    /// Candidate addresses for a new Service, starting at a random offset (as upstream's bitmap
    /// allocator does), skipping the first (the `kubernetes` Service's).
    fn candidates(&self, random: u32) -> impl Iterator<Item = Ipv4Addr> + '_ {
        let usable = self.size() - 3;
        (0..usable).map(move |i| {
            Ipv4Addr::from(u32::from(self.cluster_ip_base) + 2 + (random.wrapping_add(i)) % usable)
        })
    }

    fn port_candidates(&self, random: u32) -> impl Iterator<Item = u16> + '_ {
        let (low, high) = self.node_ports;
        let count = u32::from(high - low) + 1;
        (0..count).map(move |i| low + ((random.wrapping_add(i)) % count) as u16)
    }
}

pub fn ip_key(ip: &str) -> String {
    format!("/registry/serviceips/{ip}")
}

pub fn node_port_key(port: i64) -> String {
    format!("/registry/servicenodeports/{port}")
}

fn invalid(service: &Value, causes: Vec<FieldError>) -> ApiError {
    ApiError::invalid(
        "",
        "Service",
        service.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default(),
        causes,
    )
}

/// What a Service needs allocated: whether it gets a ClusterIP, and which of its ports need a node
/// port (index, the port asked for if any).
fn needs(service: &Value) -> (bool, Vec<(usize, Option<i64>)>) {
    let kind = service.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP");
    let headless = service.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None");
    let cluster_ip = kind != "ExternalName" && !headless;
    let node_ports = if matches!(kind, "NodePort" | "LoadBalancer") {
        service
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, port)| (i, port.get("nodePort").and_then(Value::as_i64).filter(|p| *p != 0)))
            .collect()
    } else {
        Vec::new()
    };
    (cluster_ip, node_ports)
}

/// A Service's ClusterIP and NodePorts, chosen and written into `service`, and the transaction
/// that creates it at `key` together with the keys holding them. Returns `None` when a chosen
/// address or port is taken (try again with other random numbers).
pub fn create_txn(
    ranges: &ServiceRanges,
    service: &mut Value,
    key: &str,
    stored: impl Fn(&Value) -> Result<Vec<u8>, ApiError>,
    taken: &dyn Fn(&str) -> bool,
    random: u32,
) -> Result<Txn, ApiError> {
    let (wants_ip, ports) = needs(service);
    let kind = service.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP").to_owned();
    if ports.is_empty() {
        let ports = service.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
        if let Some(i) =
            ports.iter().position(|p| p.get("nodePort").and_then(Value::as_i64).is_some_and(|n| n != 0))
        {
            let detail = format!("may not be used when `type` is '{kind}'");
            return Err(invalid(
                service,
                vec![FieldError::forbidden(&format!("spec.ports[{i}].nodePort"), &detail)],
            ));
        }
    }
    if kind == "ExternalName"
        && service.pointer("/spec/clusterIP").and_then(Value::as_str).is_some_and(|ip| !ip.is_empty())
    {
        return Err(invalid(
            service,
            vec![FieldError::forbidden("spec.clusterIP", "may not be set for ExternalName services")],
        ));
    }
    let mut compares = vec![Compare::Absent(key.to_owned())];
    let mut holds = Vec::new();
    if wants_ip {
        let asked = service
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty())
            .map(str::to_owned);
        let ip = match asked {
            Some(ip) => {
                let parsed: Ipv4Addr = ip.parse().map_err(|_| {
                    invalid(
                        service,
                        vec![FieldError::invalid("spec.clusterIP", &json!(ip), "must be a valid IP address")],
                    )
                })?;
                if !ranges.contains(parsed) && parsed != ranges.first() {
                    let detail = format!(
                        "provided IP is not in the valid range. The range of valid IPs is {}/{}",
                        ranges.cluster_ip_base, ranges.cluster_ip_prefix
                    );
                    return Err(invalid(
                        service,
                        vec![FieldError::invalid("spec.clusterIP", &json!(ip), &detail)],
                    ));
                }
                if taken(&ip_key(&ip)) {
                    return Err(invalid(
                        service,
                        vec![FieldError::invalid(
                            "spec.clusterIP",
                            &json!(ip),
                            "provided IP is already allocated",
                        )],
                    ));
                }
                ip
            }
            None => {
                ranges.candidates(random).map(|ip| ip.to_string()).find(|ip| !taken(&ip_key(ip))).ok_or_else(
                    || ApiError::Internal("failed to allocate a serviceIP: range is full".into()),
                )?
            }
        };
        service["spec"]["clusterIP"] = ip.clone().into();
        service["spec"]["clusterIPs"] = json!([ip]);
        service["spec"]["ipFamilies"] = json!(["IPv4"]);
        service["spec"]["ipFamilyPolicy"] = json!("SingleStack");
        holds.push(ip_key(&ip));
    } else if service.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None") {
        service["spec"]["clusterIPs"] = json!(["None"]);
    }
    let mut next = ranges.port_candidates(random.rotate_left(16));
    for (index, asked) in ports {
        let port = match asked {
            Some(port) => {
                let (low, high) = ranges.node_ports;
                if port < i64::from(low) || port > i64::from(high) {
                    let detail = format!(
                        "provided port is not in the valid range. The range of valid ports is {low}-{high}"
                    );
                    return Err(invalid(
                        service,
                        vec![FieldError::invalid(
                            &format!("spec.ports[{index}].nodePort"),
                            &json!(port),
                            &detail,
                        )],
                    ));
                }
                if taken(&node_port_key(port)) || holds.contains(&node_port_key(port)) {
                    return Err(invalid(
                        service,
                        vec![FieldError::invalid(
                            &format!("spec.ports[{index}].nodePort"),
                            &json!(port),
                            "provided port is already allocated",
                        )],
                    ));
                }
                port
            }
            None => next
                .by_ref()
                .map(i64::from)
                .find(|port| !taken(&node_port_key(*port)) && !holds.contains(&node_port_key(*port)))
                .ok_or_else(|| ApiError::Internal("failed to allocate a nodePort: range is full".into()))?,
        };
        service["spec"]["ports"][index]["nodePort"] = port.into();
        holds.push(node_port_key(port));
    }
    let owner = service.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_owned();
    let mut ops = vec![TxnOp::put(key, stored(service)?)];
    for hold in &holds {
        compares.push(Compare::Absent(hold.clone()));
        ops.push(TxnOp::put(hold.clone(), owner.clone().into_bytes()));
    }
    Ok(Txn::new().when(compares).and_then(ops))
}

/// The keys a stored Service holds, released when it is deleted.
pub fn held_keys(resource: &Resource, service: &Value) -> Vec<String> {
    if resource.plural != "services" || !resource.group.is_empty() {
        return Vec::new();
    }
    let mut keys = Vec::new();
    if let Some(ip) = service
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty() && *ip != "None")
    {
        keys.push(ip_key(ip));
    }
    for port in service.pointer("/spec/ports").and_then(Value::as_array).into_iter().flatten() {
        if let Some(node_port) = port.get("nodePort").and_then(Value::as_i64).filter(|p| *p != 0) {
            keys.push(node_port_key(node_port));
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// What an update leaves out of a Service's allocations is kept (upstream's patchAllocatedValues):
/// the ClusterIP fields, and the node port of each port matched by port number and protocol.
pub fn carry_allocations(old: &Value, new: &mut Value) {
    for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
        let missing = new.pointer(&format!("/spec/{field}")).is_none_or(|v| v.as_str() == Some(""));
        if missing && let Some(value) = old.pointer(&format!("/spec/{field}")) {
            new["spec"][field] = value.clone();
        }
    }
    let old_ports: Vec<(i64, String, i64)> = old
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| {
            let protocol = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP").to_owned();
            Some((p.get("port")?.as_i64()?, protocol, p.get("nodePort")?.as_i64()?))
        })
        .collect();
    if let Some(ports) = new.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
        for port in ports.iter_mut() {
            if port.get("nodePort").and_then(Value::as_i64).is_some_and(|p| p != 0) {
                continue;
            }
            let number = port.get("port").and_then(Value::as_i64);
            let protocol = port.get("protocol").and_then(Value::as_str).unwrap_or("TCP").to_owned();
            if let Some((_, _, node_port)) =
                old_ports.iter().find(|(p, proto, _)| Some(*p) == number && *proto == protocol)
            {
                port["nodePort"] = (*node_port).into();
            }
        }
    }
}

/// A ClusterIP cannot change once set (`spec.clusterIP: Invalid value: ...: field is immutable`).
pub fn check_update(old: &Value, new: &Value) -> Result<(), ApiError> {
    let ip = |v: &Value| v.pointer("/spec/clusterIP").and_then(Value::as_str).map(str::to_owned);
    if let (Some(before), Some(after)) = (ip(old), ip(new))
        && before != after
        && !after.is_empty()
    {
        return Err(invalid(
            new,
            vec![FieldError::invalid("spec.clusterIP", &json!(after), "field is immutable")],
        ));
    }
    Ok(())
}

/// The `kubernetes` Service in `default`, at the range's first address, port 443 to the apiserver.
pub fn kubernetes_service(ranges: &ServiceRanges, secure_port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {
            "type": "ClusterIP", "clusterIP": ranges.first().to_string(), "sessionAffinity": "None",
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": secure_port}]
        }
    })
}

/// The Endpoints of the `kubernetes` Service: the apiserver's advertise address.
pub fn kubernetes_endpoints(address: &str, secure_port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": [{"ip": address}], "ports": [{"name": "https", "port": secure_port, "protocol": "TCP"}]}]
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn txn_for(service: &mut Value, taken: &HashSet<String>, random: u32) -> Result<Txn, ApiError> {
        let ranges = ServiceRanges::parse("10.96.0.0/28", "30000-30002").unwrap();
        create_txn(
            &ranges,
            service,
            "/registry/services/specs/d/s",
            |v| Ok(v.to_string().into_bytes()),
            &|k| taken.contains(k),
            random,
        )
    }

    #[test]
    fn ranges() {
        let r = ServiceRanges::parse("10.96.3.4/12", "30000-32767").unwrap();
        assert_eq!(
            (r.cluster_ip_base, r.first()),
            (Ipv4Addr::new(10, 96, 0, 0), Ipv4Addr::new(10, 96, 0, 1))
        );
        assert!(ServiceRanges::parse("10.0.0.0/8", "1-2").is_err());
        assert!(ServiceRanges::parse("10.0.0.0/24", "5-1").is_err());
        assert!(ServiceRanges::parse("nope", "1-2").is_err());
    }

    #[test]
    fn allocates_free_addresses_and_ports() {
        let mut taken = HashSet::new();
        taken.insert(ip_key("10.96.0.2"));
        let mut svc = json!({"metadata": {"name": "s", "uid": "u"}, "spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81, "nodePort": 30001}]}});
        let txn = txn_for(&mut svc, &taken, 0).unwrap();
        assert_eq!(svc["spec"]["clusterIP"], "10.96.0.3");
        assert_eq!(svc["spec"]["ports"][0]["nodePort"], 30000);
        assert_eq!(svc["spec"]["ports"][1]["nodePort"], 30001);
        assert_eq!(txn.compares.len(), 4);
        assert_eq!(held_keys(keel_api::resources::find("", "v1", "services").unwrap(), &svc).len(), 3);
    }

    #[test]
    fn refuses_taken_or_foreign_requests() {
        let mut taken = HashSet::new();
        taken.insert(ip_key("10.96.0.5"));
        let mut svc = json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "10.96.0.5"}});
        assert_eq!(txn_for(&mut svc, &taken, 0).unwrap_err().code(), 422);
        let mut svc = json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "192.168.0.1"}});
        assert!(txn_for(&mut svc, &taken, 0).unwrap_err().to_string().contains("not in the valid range"));
        let mut svc = json!({"metadata": {"name": "s"}, "spec": {"type": "NodePort", "ports": [{"port": 1, "nodePort": 40000}]}});
        assert_eq!(txn_for(&mut svc, &taken, 0).unwrap_err().code(), 422);
        let mut headless = json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None"}});
        let txn = txn_for(&mut headless, &taken, 0).unwrap();
        assert_eq!((txn.compares.len(), headless["spec"]["clusterIPs"].clone()), (1, json!(["None"])));
        let mut all = HashSet::new();
        for i in 2..15 {
            all.insert(ip_key(&format!("10.96.0.{i}")));
        }
        let mut full = json!({"metadata": {"name": "s"}, "spec": {}});
        assert_eq!(txn_for(&mut full, &all, 7).unwrap_err().code(), 500);
    }

    #[test]
    fn cluster_ip_is_immutable() {
        let old = json!({"spec": {"clusterIP": "10.0.0.5"}});
        assert!(check_update(&old, &json!({"spec": {"clusterIP": "10.0.0.6"}})).is_err());
        assert!(check_update(&old, &json!({"spec": {"clusterIP": "10.0.0.5"}})).is_ok());
    }
}
