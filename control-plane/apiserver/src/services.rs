//! Services' ClusterIPs and NodePorts, allocated as kube-apiserver's Service storage does
//! (pkg/registry/core/service/storage): from `--service-cluster-ip-range` and
//! `--service-node-port-range`, each address and port held by a key of its own
//! (`/registry/serviceips/<ip>`, `/registry/servicenodeports/<port>`, value = the Service's uid)
//! written in the same store transaction as the Service, so two Services never get one address,
//! also across restarts and concurrent writes.
//!
//! Create and update share one allocation ([`allocate`]). An update first keeps what was allocated
//! where old and new both need it and wipes what the new type does not use
//! ([`prepare_for_update`]: upstream's patchAllocatedValues and dropTypeDependentFields); then the
//! holds old and new share are kept, new ones taken (each compared `Absent`) and the unused ones
//! released, in one transaction guarded by the Service's revision ([`write_txn`]). Choosing does
//! not read every hold: a first attempt looks up only the values asked for by name
//! ([`asked_keys`]) and lets the transaction's compares catch a random pick another Service holds;
//! after such a collision the writer reads all of them ([`HOLD_PREFIXES`]), so a nearly full range
//! still finds its free values or answers that it is full. Deleting a Service releases what it
//! holds ([`held_keys`]) in its deleting transaction. The `kubernetes` Service (first address of
//! the range) and its Endpoints name the apiserver itself.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use keel_api::resources::Resource;
use keel_api::status::{ApiError, FieldError};
use keel_store::{Compare, Txn, TxnOp};
use serde_json::{Map, Value, json};

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

    /// `--service-cluster-ip-range` as a CIDR in canonical form (the default ServiceCIDR's).
    pub fn cidr(&self) -> String {
        format!("{}/{}", self.cluster_ip_base, self.cluster_ip_prefix)
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

/// The key prefixes of every hold, read whole when a write must know everything that is taken.
pub const HOLD_PREFIXES: [&str; 2] = ["/registry/serviceips/", "/registry/servicenodeports/"];

/// Whether `resource` is the core group's Services, the only resource holding addresses and ports.
pub fn is_services(resource: &Resource) -> bool {
    resource.group.is_empty() && resource.plural == "services"
}

fn invalid(service: &Value, causes: Vec<FieldError>) -> ApiError {
    ApiError::invalid(
        "",
        "Service",
        service.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default(),
        causes,
    )
}

fn spec<'a>(service: &'a Value, field: &str) -> Option<&'a Value> {
    service.get("spec").and_then(|spec| spec.get(field))
}

fn spec_str<'a>(service: &'a Value, field: &str) -> &'a str {
    spec(service, field).and_then(Value::as_str).unwrap_or_default()
}

/// A spec field as a comparison sees it: absent, null, "" and [] all mean unset, as in Go's types.
fn spec_value<'a>(service: &'a Value, field: &str) -> Option<&'a Value> {
    spec(service, field).filter(|value| match value {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        _ => true,
    })
}

fn same(old: &Value, new: &Value, field: &str) -> bool {
    spec_value(old, field) == spec_value(new, field)
}

/// The spec to write into, made when missing; `None` when the body's spec is not an object (the
/// type check answers that).
fn spec_mut(service: &mut Value) -> Option<&mut Map<String, Value>> {
    let spec = service.as_object_mut()?.entry("spec").or_insert_with(|| json!({}));
    if spec.is_null() {
        *spec = json!({});
    }
    spec.as_object_mut()
}

fn set_spec(service: &mut Value, field: &str, value: Value) {
    if let Some(spec) = spec_mut(service) {
        spec.insert(field.to_owned(), value);
    }
}

fn remove_spec(service: &mut Value, field: &str) {
    if let Some(spec) = service.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove(field);
    }
}

fn ports(service: &Value) -> &[Value] {
    spec(service, "ports").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn ports_mut(service: &mut Value) -> impl Iterator<Item = &mut Map<String, Value>> {
    service
        .pointer_mut("/spec/ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
}

/// A port's node port, `None` for none (0 means none, as in the API).
fn node_port(port: &Value) -> Option<i64> {
    port.get("nodePort").and_then(Value::as_i64).filter(|p| *p != 0)
}

fn protocol(port: &Value) -> &str {
    port.get("protocol").and_then(Value::as_str).unwrap_or("TCP")
}

/// The health-check node port a Service asks for or holds.
fn health_check_node_port(service: &Value) -> Option<i64> {
    spec(service, "healthCheckNodePort").and_then(Value::as_i64).filter(|p| *p != 0)
}

/// Every node port a Service holds: its ports' and its health check's.
fn node_ports(service: &Value) -> BTreeSet<i64> {
    ports(service).iter().filter_map(node_port).chain(health_check_node_port(service)).collect()
}

/// upstream's needsHCNodePort: a LoadBalancer keeping client addresses (`externalTrafficPolicy:
/// Local`) gets a node port its load balancer checks the node's endpoints on.
fn needs_health_check(service: &Value) -> bool {
    service_type(service) == "LoadBalancer" && spec_str(service, "externalTrafficPolicy") == "Local"
}

fn service_type(service: &Value) -> &str {
    spec(service, "type").and_then(Value::as_str).unwrap_or("ClusterIP")
}

/// upstream's needsClusterIP: every type but ExternalName has a clusterIP ("None" counts as one).
fn needs_cluster_ip(service: &Value) -> bool {
    service_type(service) != "ExternalName"
}

/// upstream's needsNodePort.
fn needs_node_ports(service: &Value) -> bool {
    matches!(service_type(service), "NodePort" | "LoadBalancer")
}

/// upstream's shouldAllocateNodePorts: a LoadBalancer may opt out of them
/// (`allocateLoadBalancerNodePorts: false`), keeping only those it asks for.
fn allocates_node_ports(service: &Value) -> bool {
    match service_type(service) {
        "NodePort" => true,
        "LoadBalancer" => {
            spec(service, "allocateLoadBalancerNodePorts").and_then(Value::as_bool) != Some(false)
        }
        _ => false,
    }
}

/// upstream's ExternallyAccessible: the types that take externalTrafficPolicy.
fn externally_accessible(service: &Value) -> bool {
    needs_node_ports(service)
        || (service_type(service) == "ClusterIP" && spec_value(service, "externalIPs").is_some())
}

fn headless(service: &Value) -> bool {
    spec_str(service, "clusterIP") == "None"
}

/// The address a Service holds: its clusterIP, unless unset or "None".
fn held_ip(service: &Value) -> Option<&str> {
    Some(spec_str(service, "clusterIP")).filter(|ip| !ip.is_empty() && *ip != "None")
}

/// The keys a stored Service holds, released when it is deleted.
pub fn held_keys(resource: &Resource, service: &Value) -> Vec<String> {
    if !is_services(resource) {
        return Vec::new();
    }
    held_ip(service)
        .map(ip_key)
        .into_iter()
        .chain(node_ports(service).into_iter().map(node_port_key))
        .collect()
}

/// What an update leaves out of a Service's allocations or no longer applies to its type, as
/// upstream's normalizeClusterIPs, patchAllocatedValues and dropTypeDependentFields decide it.
pub fn prepare_for_update(old: &Value, new: &mut Value) {
    normalize_cluster_ips(old, new);
    patch_allocated_values(old, new);
    drop_type_dependent_fields(old, new);
}

/// Clients that only know the singular clusterIP (or leave both out) keep clusterIPs in step.
fn normalize_cluster_ips(old: &Value, new: &mut Value) {
    let (old_ip, new_ip) = (spec_str(old, "clusterIP").to_owned(), spec_str(new, "clusterIP").to_owned());
    if let Some(old_ips) = spec_value(old, "clusterIPs")
        && spec_value(new, "clusterIPs").is_none()
        && old_ip == new_ip
    {
        set_spec(new, "clusterIPs", old_ips.clone());
    }
    if old_ip != new_ip && same(old, new, "clusterIPs") {
        if new_ip.is_empty() {
            remove_spec(new, "clusterIPs");
        } else {
            set_spec(new, "clusterIPs", json!([new_ip]));
        }
    }
}

/// A client resubmitting what it created (without what was allocated for it) keeps the allocated
/// values, where old and new both need them: the cluster IP fields, and each port's node port,
/// matched by port number and protocol, unless another port of the new Service already uses it.
fn patch_allocated_values(old: &Value, new: &mut Value) {
    if needs_cluster_ip(old) && needs_cluster_ip(new) {
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if spec_value(new, field).is_none()
                && let Some(value) = spec_value(old, field)
            {
                set_spec(new, field, value.clone());
            }
        }
    }
    if needs_health_check(old)
        && needs_health_check(new)
        && health_check_node_port(new).is_none()
        && let Some(port) = health_check_node_port(old)
    {
        set_spec(new, "healthCheckNodePort", port.into());
    }
    if needs_node_ports(old) && needs_node_ports(new) {
        let used: BTreeSet<i64> = node_ports(old).intersection(&node_ports(new)).copied().collect();
        let allocated: Vec<(i64, String, i64)> = ports(old)
            .iter()
            .filter_map(|p| Some((p.get("port")?.as_i64()?, protocol(p).to_owned(), node_port(p)?)))
            .filter(|(_, _, node_port)| !used.contains(node_port))
            .collect();
        for port in ports_mut(new) {
            let as_value = Value::Object(port.clone());
            if node_port(&as_value).is_some() {
                continue;
            }
            let number = as_value.get("port").and_then(Value::as_i64);
            if let Some((_, _, node_port)) = allocated
                .iter()
                .find(|(p, proto, _)| Some(*p) == number && proto.as_str() == protocol(&as_value))
            {
                port.insert("nodePort".into(), (*node_port).into());
            }
        }
    }
}

/// A type change wipes what the new type does not use, when the client left it as it was (a
/// changed value is the client's, and validation answers it): the cluster IP fields when leaving for
/// ExternalName, node ports when leaving NodePort/LoadBalancer (if none was added), and the
/// LoadBalancer- and externally-accessible-only fields.
fn drop_type_dependent_fields(old: &Value, new: &mut Value) {
    if needs_cluster_ip(old) && !needs_cluster_ip(new) {
        if same(old, new, "clusterIP") && same(old, new, "clusterIPs") {
            remove_spec(new, "clusterIP");
            remove_spec(new, "clusterIPs");
        }
        for field in ["ipFamilies", "ipFamilyPolicy"] {
            if same(old, new, field) {
                remove_spec(new, field);
            }
        }
    }
    if needs_node_ports(old) && !needs_node_ports(new) && node_ports(new).is_subset(&node_ports(old)) {
        for port in ports_mut(new) {
            port.remove("nodePort");
        }
    }
    if needs_health_check(old) && !needs_health_check(new) && same(old, new, "healthCheckNodePort") {
        remove_spec(new, "healthCheckNodePort");
    }
    if service_type(old) == "LoadBalancer" && service_type(new) != "LoadBalancer" {
        for field in ["allocateLoadBalancerNodePorts", "loadBalancerClass"] {
            if same(old, new, field) {
                remove_spec(new, field);
            }
        }
    }
    if externally_accessible(old) && !externally_accessible(new) && same(old, new, "externalTrafficPolicy") {
        remove_spec(new, "externalTrafficPolicy");
    }
    // Load balancers are deprovisioned asynchronously, but the API shows them gone at once.
    if service_type(new) != "LoadBalancer"
        && let Some(status) = new.get_mut("status").and_then(Value::as_object_mut)
        && status.contains_key("loadBalancer")
    {
        status.insert("loadBalancer".into(), json!({}));
    }
}

/// A ClusterIP cannot change once set (`spec.clusterIP: Invalid value: ...: field is immutable`),
/// except to or from ExternalName, which has none.
pub fn check_update(old: &Value, new: &Value) -> Result<(), ApiError> {
    if !needs_cluster_ip(old) || !needs_cluster_ip(new) {
        return Ok(());
    }
    let (before, after) = (spec_str(old, "clusterIP"), spec_str(new, "clusterIP"));
    if !before.is_empty() && !after.is_empty() && before != after {
        return Err(invalid(
            new,
            vec![FieldError::invalid("spec.clusterIP", &json!(after), "field is immutable")],
        ));
    }
    Ok(())
}

/// What the type forbids: node ports on a type without them, a clusterIP on ExternalName, a
/// headless NodePort or LoadBalancer.
fn type_errors(service: &Value) -> Vec<FieldError> {
    let kind = service_type(service);
    let mut causes = Vec::new();
    if !needs_node_ports(service) {
        for (i, _) in ports(service).iter().enumerate().filter(|(_, p)| node_port(p).is_some()) {
            causes.push(FieldError::forbidden(
                &format!("spec.ports[{i}].nodePort"),
                &format!("may not be used when `type` is '{kind}'"),
            ));
        }
    }
    if !needs_cluster_ip(service) {
        for field in ["clusterIP", "clusterIPs"] {
            if spec_value(service, field).is_some() {
                causes.push(FieldError::forbidden(
                    &format!("spec.{field}"),
                    "may not be set for ExternalName services",
                ));
            }
        }
    }
    if !needs_health_check(service) && health_check_node_port(service).is_some() {
        causes.push(FieldError::invalid(
            "spec.healthCheckNodePort",
            &json!(health_check_node_port(service)),
            "may only be set when `type` is 'LoadBalancer' and `externalTrafficPolicy` is 'Local'",
        ));
    }
    if needs_node_ports(service) && headless(service) {
        causes.push(FieldError::invalid(
            "spec.clusterIPs[0]",
            &json!("None"),
            &format!("may not be set to 'None' for {kind} services"),
        ));
    }
    causes
}

/// What a Service's write takes and gives back: the hold keys it creates (each absent until then)
/// and the old Service's hold keys no longer used.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Holds {
    pub take: Vec<String>,
    pub release: Vec<String>,
}

impl Holds {
    pub fn is_empty(&self) -> bool {
        self.take.is_empty() && self.release.is_empty()
    }
}

/// The hold keys of the values `service` asks for by name that `old` (the stored Service, if an
/// update) does not hold already: all a first attempt needs to look up, as random picks are checked
/// by the transaction itself.
pub fn asked_keys(old: Option<&Value>, service: &Value) -> Vec<String> {
    let old_ip = old.and_then(held_ip);
    let old_ports = old.map(node_ports).unwrap_or_default();
    let mut keys = Vec::new();
    if needs_cluster_ip(service)
        && let Some(ip) = held_ip(service).filter(|ip| Some(*ip) != old_ip)
        && let Ok(ip) = ip.parse::<Ipv4Addr>()
    {
        keys.push(ip_key(&ip.to_string()));
    }
    if needs_node_ports(service) {
        keys.extend(node_ports(service).difference(&old_ports).map(|p| node_port_key(*p)));
    }
    keys
}

/// The ClusterIP and NodePorts of a Service being created (`old` is `None`) or updated from `old`,
/// written into `service`, as upstream's allocateCreate / allocateUpdate choose them: what old and
/// new share is kept; a value asked for by name is checked against the range and `taken` (whether a
/// hold key exists); one left out is picked at random among those `taken` does not know; what old
/// holds and new does not is released.
pub fn allocate(
    ranges: &ServiceRanges,
    old: Option<&Value>,
    service: &mut Value,
    taken: &dyn Fn(&str) -> bool,
    random: u32,
) -> Result<Holds, ApiError> {
    let causes = type_errors(service);
    if !causes.is_empty() {
        return Err(invalid(service, causes));
    }
    // A client may give the address as clusterIPs alone (upstream's first family); both given must
    // agree (`spec.clusterIPs[0]: Invalid value: ...: must match `clusterIP` when set`).
    let first = spec_value(service, "clusterIPs")
        .and_then(|ips| ips.get(0))
        .and_then(Value::as_str)
        .filter(|ip| !ip.is_empty())
        .map(str::to_owned);
    if let Some(first) = first {
        let ip = spec_str(service, "clusterIP").to_owned();
        if ip.is_empty() {
            set_spec(service, "clusterIP", first.into());
        } else if ip != first {
            let cause =
                FieldError::invalid("spec.clusterIPs[0]", &json!(first), "must match `clusterIP` when set");
            return Err(invalid(service, vec![cause]));
        }
    }
    let mut holds = Holds::default();
    let old_ip = old.and_then(held_ip).map(str::to_owned);
    let ip = if needs_cluster_ip(service) && !headless(service) {
        Some(allocate_ip(ranges, old_ip.as_deref(), service, taken, random, &mut holds)?)
    } else {
        if headless(service) {
            set_spec(service, "clusterIPs", json!(["None"]));
        }
        None
    };
    if let Some(old_ip) = old_ip
        && ip.as_ref() != Some(&old_ip)
    {
        holds.release.push(ip_key(&old_ip));
    }
    let old_ports = old.map(node_ports).unwrap_or_default();
    allocate_node_ports(ranges, &old_ports, service, taken, random.rotate_left(16), &mut holds)?;
    Ok(holds)
}

fn allocate_ip(
    ranges: &ServiceRanges,
    old_ip: Option<&str>,
    service: &mut Value,
    taken: &dyn Fn(&str) -> bool,
    random: u32,
    holds: &mut Holds,
) -> Result<String, ApiError> {
    let ip = match held_ip(service).map(str::to_owned) {
        Some(ip) if Some(ip.as_str()) == old_ip => ip,
        Some(asked) => {
            let refuse = |detail: &str| {
                invalid(service, vec![FieldError::invalid("spec.clusterIP", &json!(asked), detail)])
            };
            let parsed: Ipv4Addr = asked.parse().map_err(|_| refuse("must be a valid IP address"))?;
            if !ranges.contains(parsed) {
                return Err(refuse(&format!(
                    "provided IP is not in the valid range. The range of valid IPs is {}/{}",
                    ranges.cluster_ip_base, ranges.cluster_ip_prefix
                )));
            }
            let ip = parsed.to_string();
            if taken(&ip_key(&ip)) {
                return Err(refuse("provided IP is already allocated"));
            }
            holds.take.push(ip_key(&ip));
            ip
        }
        None => {
            let ip = ranges
                .candidates(random)
                .map(|ip| ip.to_string())
                .find(|ip| Some(ip.as_str()) != old_ip && !taken(&ip_key(ip)))
                .ok_or_else(|| ApiError::Internal("failed to allocate a serviceIP: range is full".into()))?;
            holds.take.push(ip_key(&ip));
            ip
        }
    };
    set_spec(service, "clusterIP", ip.clone().into());
    set_spec(service, "clusterIPs", json!([ip]));
    set_spec(service, "ipFamilies", json!(["IPv4"]));
    set_spec(service, "ipFamilyPolicy", json!("SingleStack"));
    Ok(ip)
}

/// Node ports as upstream's updateNodePorts gives them: one number may serve two ports of different
/// protocols (one hold), never two of the same protocol.
fn allocate_node_ports(
    ranges: &ServiceRanges,
    old_ports: &BTreeSet<i64>,
    service: &mut Value,
    taken: &dyn Fn(&str) -> bool,
    random: u32,
    holds: &mut Holds,
) -> Result<(), ApiError> {
    let allocates = allocates_node_ports(service);
    // Asked numbers are never random picks, even for a port listed before the one asking.
    let asked = node_ports(service);
    let mut next = ranges.port_candidates(random);
    let mut used: Vec<(i64, String)> = Vec::new();
    // upstream's initNodePorts (a Service getting node ports for the first time): ports of one
    // number, e.g. DNS on TCP and UDP, share one node port — the one asked for by any of them.
    let first_time = old_ports.is_empty();
    let mut by_service_port: Vec<(i64, i64)> = Vec::new();
    for index in 0..ports(service).len() {
        let port = &ports(service)[index];
        let service_port = port.get("port").and_then(Value::as_i64);
        let shared = || {
            let number = service_port?;
            let allocated = by_service_port.iter().find(|(p, _)| *p == number).map(|(_, n)| *n);
            allocated.or_else(|| {
                ports(service)[index..]
                    .iter()
                    .filter(|p| p.get("port").and_then(Value::as_i64) == Some(number))
                    .find_map(node_port)
            })
        };
        let wanted = match node_port(port) {
            None if first_time && allocates => shared(),
            wanted => wanted,
        };
        let protocol = protocol(port).to_owned();
        let field = format!("spec.ports[{index}].nodePort");
        let number = match wanted {
            Some(number) => {
                if used.contains(&(number, protocol.clone())) {
                    return Err(invalid(service, vec![FieldError::duplicate(&field, &json!(number))]));
                }
                let held = old_ports.contains(&number) || used.iter().any(|(n, _)| *n == number);
                if !held {
                    take_asked(ranges, service, &field, number, taken, holds)?;
                }
                number
            }
            None if !allocates => continue,
            None => pick_free(&mut next, &asked, old_ports, &used, taken, holds)?,
        };
        if let Some(port) = ports_mut(service).nth(index) {
            port.insert("nodePort".into(), number.into());
        }
        if let Some(service_port) = service_port
            && !by_service_port.iter().any(|(p, _)| *p == service_port)
        {
            by_service_port.push((service_port, number));
        }
        used.push((number, protocol));
    }
    if needs_health_check(service) {
        // One more node port, of no protocol: shared with none of the ports'.
        let field = "spec.healthCheckNodePort";
        let number = match health_check_node_port(service) {
            Some(number) if old_ports.contains(&number) && !used.iter().any(|(n, _)| *n == number) => number,
            Some(number) => {
                // One of the Service's own ports counts as taken here.
                let taken_or_used =
                    |key: &str| taken(key) || used.iter().any(|(n, _)| node_port_key(*n) == key);
                take_asked(ranges, service, field, number, &taken_or_used, holds)?;
                number
            }
            None => pick_free(&mut next, &asked, old_ports, &used, taken, holds)?,
        };
        set_spec(service, "healthCheckNodePort", number.into());
        used.push((number, String::new()));
    }
    for number in old_ports {
        if !used.iter().any(|(n, _)| n == number) {
            holds.release.push(node_port_key(*number));
        }
    }
    Ok(())
}

/// A node port asked for at `field`: within the range and not held by another Service; held now.
fn take_asked(
    ranges: &ServiceRanges,
    service: &Value,
    field: &str,
    number: i64,
    taken: &dyn Fn(&str) -> bool,
    holds: &mut Holds,
) -> Result<(), ApiError> {
    let refuse = |detail: &str| invalid(service, vec![FieldError::invalid(field, &json!(number), detail)]);
    let (low, high) = ranges.node_ports;
    if number < i64::from(low) || number > i64::from(high) {
        return Err(refuse(&format!(
            "provided port is not in the valid range. The range of valid ports is {low}-{high}"
        )));
    }
    if taken(&node_port_key(number)) {
        return Err(refuse("provided port is already allocated"));
    }
    holds.take.push(node_port_key(number));
    Ok(())
}

/// A node port picked at random: none asked for, held before or used by the Service, nor held by
/// another; held now.
fn pick_free(
    candidates: &mut impl Iterator<Item = u16>,
    asked: &BTreeSet<i64>,
    old_ports: &BTreeSet<i64>,
    used: &[(i64, String)],
    taken: &dyn Fn(&str) -> bool,
    holds: &mut Holds,
) -> Result<i64, ApiError> {
    let number = candidates
        .map(i64::from)
        .find(|n| {
            !asked.contains(n)
                && !old_ports.contains(n)
                && !used.iter().any(|(u, _)| u == n)
                && !taken(&node_port_key(*n))
        })
        .ok_or_else(|| ApiError::Internal("failed to allocate a nodePort: range is full".into()))?;
    holds.take.push(node_port_key(number));
    Ok(number)
}

/// The transaction writing a Service at `key` with what it holds: `guard` on the Service's own key
/// (`Absent` to create, `ModRevision` to update), each new hold compared `Absent` and written with
/// the Service's uid, each released hold deleted if still at the revision it was read at. When a
/// compare fails it reads the Service back, so the writer can tell whose write came first.
pub fn write_txn(
    key: &str,
    guard: Compare,
    stored: Vec<u8>,
    owner: &str,
    take: &[String],
    release: &[(String, i64)],
) -> Txn {
    let mut compares = vec![guard];
    let mut ops = vec![TxnOp::put(key, stored)];
    for hold in take {
        compares.push(Compare::Absent(hold.clone()));
        ops.push(TxnOp::put(hold.clone(), owner.as_bytes().to_vec()));
    }
    for (hold, revision) in release {
        compares.push(Compare::ModRevision(hold.clone(), *revision));
        ops.push(TxnOp::delete(hold.clone()));
    }
    Txn::new().when(compares).and_then(ops).or_else([TxnOp::get(key)])
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

    fn small() -> ServiceRanges {
        ServiceRanges::parse("10.96.0.0/28", "30000-30002").unwrap()
    }

    fn create(service: &mut Value, taken: &HashSet<String>, random: u32) -> Result<Holds, ApiError> {
        allocate(&small(), None, service, &|k| taken.contains(k), random)
    }

    /// An update as the write path runs it: prepared, checked, allocated with nothing else taken.
    fn update(old: &Value, mut new: Value) -> Result<(Value, Holds), ApiError> {
        prepare_for_update(old, &mut new);
        check_update(old, &new)?;
        let holds = allocate(&small(), Some(old), &mut new, &|_| false, 0)?;
        Ok((new, holds))
    }

    fn keys(keys: &[&str]) -> Vec<String> {
        keys.iter().map(|k| (*k).to_owned()).collect()
    }

    fn node_port_service() -> Value {
        json!({"metadata": {"name": "s", "uid": "u"}, "spec": {
            "type": "NodePort", "clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack", "externalTrafficPolicy": "Cluster",
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30000}, {"port": 53, "protocol": "UDP", "nodePort": 30001}]
        }})
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
        let mut svc = json!({"metadata": {"name": "s", "uid": "u"}, "spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 81, "nodePort": 30000}]}});
        let holds = create(&mut svc, &taken, 0).unwrap();
        assert_eq!(svc["spec"]["clusterIP"], "10.96.0.3");
        // 30000 is asked for by the second port: the first one's random pick skips it.
        assert_eq!(svc["spec"]["ports"][0]["nodePort"], 30001);
        assert_eq!(svc["spec"]["ports"][1]["nodePort"], 30000);
        assert_eq!(
            holds,
            Holds {
                take: keys(&[&ip_key("10.96.0.3"), &node_port_key(30001), &node_port_key(30000)]),
                release: vec![]
            }
        );
        assert_eq!(held_keys(keel_api::resources::find("", "v1", "services").unwrap(), &svc).len(), 3);
        let txn = write_txn("/k", Compare::Absent("/k".into()), vec![], "u", &holds.take, &[]);
        assert_eq!((txn.compares.len(), txn.success.len()), (4, 4));
    }

    #[test]
    fn refuses_taken_or_foreign_requests() {
        let mut taken = HashSet::new();
        taken.insert(ip_key("10.96.0.5"));
        let mut svc = json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "10.96.0.5"}});
        assert_eq!(create(&mut svc, &taken, 0).unwrap_err().code(), 422);
        let mut svc = json!({"metadata": {"name": "s"}, "spec": {"clusterIP": "192.168.0.1"}});
        assert!(create(&mut svc, &taken, 0).unwrap_err().to_string().contains("not in the valid range"));
        let mut svc = json!({"metadata": {"name": "s"}, "spec": {"type": "NodePort", "ports": [{"port": 1, "nodePort": 40000}]}});
        assert_eq!(create(&mut svc, &taken, 0).unwrap_err().code(), 422);
        let mut svc = json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 1, "nodePort": 30000}]}});
        assert!(create(&mut svc, &taken, 0).unwrap_err().to_string().contains("may not be used when"));
        let mut svc =
            json!({"metadata": {"name": "s"}, "spec": {"type": "ExternalName", "clusterIP": "10.96.0.6"}});
        assert!(create(&mut svc, &taken, 0).unwrap_err().to_string().contains("ExternalName"));
        let mut svc = json!({"metadata": {"name": "s"}, "spec": {"type": "NodePort", "clusterIP": "None"}});
        assert!(create(&mut svc, &taken, 0).unwrap_err().to_string().contains("'None' for NodePort"));
        let mut headless = json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None"}});
        assert!(create(&mut headless, &taken, 0).unwrap().is_empty());
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
        let all: HashSet<String> = (2..15).map(|i| ip_key(&format!("10.96.0.{i}"))).collect();
        let mut full = json!({"metadata": {"name": "s"}, "spec": {}});
        assert_eq!(create(&mut full, &all, 7).unwrap_err().code(), 500);
    }

    #[test]
    fn one_node_port_per_number_and_protocol() {
        let mut svc = json!({"metadata": {"name": "s"}, "spec": {"type": "NodePort", "ports": [
            {"port": 53, "protocol": "TCP", "nodePort": 30002}, {"port": 53, "protocol": "UDP", "nodePort": 30002}
        ]}});
        let holds = create(&mut svc, &HashSet::new(), 0).unwrap();
        assert_eq!(holds.take, keys(&[&ip_key("10.96.0.2"), &node_port_key(30002)]));
        let mut svc = json!({"metadata": {"name": "s"}, "spec": {"type": "NodePort", "ports": [
            {"port": 80, "nodePort": 30002}, {"port": 81, "nodePort": 30002}
        ]}});
        assert!(create(&mut svc, &HashSet::new(), 0).unwrap_err().to_string().contains("Duplicate value"));
    }

    #[test]
    fn asked_keys_are_the_new_values_asked_for() {
        let old = node_port_service();
        let mut new = old.clone();
        new["spec"]["ports"][0]["nodePort"] = json!(30002);
        assert_eq!(asked_keys(Some(&old), &new), keys(&[&node_port_key(30002)]));
        assert_eq!(asked_keys(Some(&old), &old), Vec::<String>::new());
        assert_eq!(
            asked_keys(None, &old),
            keys(&[&ip_key("10.96.0.5"), &node_port_key(30000), &node_port_key(30001)])
        );
    }

    #[test]
    fn cluster_ip_is_immutable_but_for_external_name() {
        let old = json!({"spec": {"clusterIP": "10.0.0.5"}});
        assert!(check_update(&old, &json!({"spec": {"clusterIP": "10.0.0.6"}})).is_err());
        assert!(check_update(&old, &json!({"spec": {"clusterIP": "10.0.0.5"}})).is_ok());
        let external = json!({"spec": {"type": "ExternalName", "clusterIP": ""}});
        assert!(check_update(&external, &json!({"spec": {"clusterIP": "10.0.0.6"}})).is_ok());
    }

    #[test]
    fn resubmitted_services_keep_what_was_allocated() {
        let old = node_port_service();
        // Ports matched by number and protocol; 53/TCP is new, and 30000 is asked by 53/TCP.
        let new = json!({"metadata": {"name": "s"}, "spec": {"type": "NodePort", "ports": [
            {"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "TCP", "nodePort": 30001}
        ]}});
        let (new, holds) = update(&old, new).unwrap();
        assert_eq!(new["spec"]["clusterIP"], "10.96.0.5");
        assert_eq!(new["spec"]["clusterIPs"], json!(["10.96.0.5"]));
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30000);
        assert_eq!(new["spec"]["ports"][1]["nodePort"], 30001);
        assert!(holds.is_empty(), "{holds:?}");
        // A port's old node port, taken by another port of the new Service, is not carried.
        let new = json!({"metadata": {"name": "s"}, "spec": {"type": "NodePort", "ports": [
            {"port": 80, "protocol": "TCP"}, {"port": 81, "protocol": "TCP", "nodePort": 30000}
        ]}});
        let (new, holds) = update(&old, new).unwrap();
        assert_eq!(new["spec"]["ports"][0]["nodePort"], 30002);
        assert_eq!(
            holds,
            Holds { take: keys(&[&node_port_key(30002)]), release: keys(&[&node_port_key(30001)]) }
        );
    }

    #[test]
    fn type_changes_take_and_release() {
        let cluster_ip = json!({"metadata": {"name": "s"}, "spec": {
            "type": "ClusterIP", "clusterIP": "10.96.0.5", "clusterIPs": ["10.96.0.5"],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]
        }});
        let mut to_node_port = cluster_ip.clone();
        to_node_port["spec"]["type"] = json!("NodePort");
        let (new, holds) = update(&cluster_ip, to_node_port).unwrap();
        assert_eq!(
            (new["spec"]["ports"][0]["nodePort"].clone(), new["spec"]["ports"][1]["nodePort"].clone()),
            (json!(30000), json!(30001))
        );
        assert_eq!(
            holds,
            Holds { take: keys(&[&node_port_key(30000), &node_port_key(30001)]), release: vec![] }
        );

        // Back to ClusterIP with the node ports left as they were: wiped and released.
        let node_port = node_port_service();
        let mut back = node_port.clone();
        back["spec"]["type"] = json!("ClusterIP");
        let (new, holds) = update(&node_port, back.clone()).unwrap();
        assert!(node_ports(&new).is_empty() && new["spec"].get("externalTrafficPolicy").is_none(), "{new}");
        assert_eq!(
            holds,
            Holds { take: vec![], release: keys(&[&node_port_key(30000), &node_port_key(30001)]) }
        );
        // ... but a node port added on the way is the client's, and forbidden.
        back["spec"]["ports"][0]["nodePort"] = json!(30002);
        assert!(
            update(&node_port, back)
                .unwrap_err()
                .to_string()
                .contains("may not be used when `type` is 'ClusterIP'")
        );

        // One node port changed: the new one taken, the old one released.
        let mut moved = node_port.clone();
        moved["spec"]["ports"][1]["nodePort"] = json!(30002);
        let (_, holds) = update(&node_port, moved).unwrap();
        assert_eq!(
            holds,
            Holds { take: keys(&[&node_port_key(30002)]), release: keys(&[&node_port_key(30001)]) }
        );

        // To ExternalName: the address fields wiped, the address released.
        let mut external = cluster_ip.clone();
        external["spec"]["type"] = json!("ExternalName");
        external["spec"]["externalName"] = json!("example.com");
        let (new, holds) = update(&cluster_ip, external).unwrap();
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            assert!(new["spec"].get(field).is_none(), "{new}");
        }
        assert_eq!(holds, Holds { take: vec![], release: keys(&[&ip_key("10.96.0.5")]) });
        // ... unless the client set another address: then it is forbidden.
        let mut external = cluster_ip.clone();
        external["spec"]["type"] = json!("ExternalName");
        external["spec"]["clusterIP"] = json!("10.96.0.6");
        assert!(
            update(&cluster_ip, external)
                .unwrap_err()
                .to_string()
                .contains("may not be set for ExternalName")
        );

        // From ExternalName: an address allocated, or the one asked for.
        let external = json!({"metadata": {"name": "s"}, "spec": {"type": "ExternalName", "externalName": "example.com"}});
        let mut back = external.clone();
        back["spec"]["type"] = json!("ClusterIP");
        let (new, holds) = update(&external, back.clone()).unwrap();
        assert_eq!(
            (new["spec"]["clusterIP"].clone(), holds.take),
            (json!("10.96.0.2"), keys(&[&ip_key("10.96.0.2")]))
        );
        back["spec"]["clusterIP"] = json!("10.96.0.9");
        let (new, holds) = update(&external, back).unwrap();
        assert_eq!(
            (new["spec"]["clusterIPs"].clone(), holds.take),
            (json!(["10.96.0.9"]), keys(&[&ip_key("10.96.0.9")]))
        );
    }
}
