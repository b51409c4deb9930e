//! Core printers: namespaces, nodes, services, endpoints, configmaps, secrets, serviceaccounts and
//! resourcequotas (upstream's `printNamespace`, `printNode`, `printService`, `printEndpoints`,
//! `printConfigMap`, `printSecret`, `printServiceAccount`, `printResourceQuota`).

use std::collections::BTreeSet;

use jiff::Timestamp;
use serde_json::{Value, json};

use super::quantity::quantity_string;
use super::value::{age, array_at, at, bool_at, format_labels, int_at, map_len, name, str_at, string_map};
use super::{AGE, Column, NAME, Row};

pub(super) const NAMESPACE_COLUMNS: &[Column] =
    &[NAME, Column::string("Status", "The status of the namespace"), AGE];

pub(super) fn namespace(object: &Value, now: Timestamp) -> Row {
    // Decoding defaults an unset phase to Active.
    let phase = match str_at(object, &["status", "phase"]) {
        "" => "Active",
        phase => phase,
    };
    Row::new(vec![json!(name(object)), json!(phase), json!(age(object, now))])
}

const ADDRESSES_DOC: &str = "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).";

pub(super) const NODE_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Status", "The status of the node"),
    Column::string("Roles", "The roles of the node"),
    AGE,
    Column::string("Version", "Kubelet Version reported by the node."),
    Column::string("Internal-IP", ADDRESSES_DOC).wide(),
    Column::string("External-IP", ADDRESSES_DOC).wide(),
    Column::string(
        "OS-Image",
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
    )
    .wide(),
    Column::string(
        "Kernel-Version",
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
    )
    .wide(),
    Column::string(
        "Container-Runtime",
        "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
    )
    .wide(),
];

pub(super) fn node(object: &Value, now: Timestamp) -> Row {
    // Only the Ready condition is shown; the last one of that type wins, as in upstream's map.
    let ready = array_at(object, &["status", "conditions"]).iter().rfind(|c| str_at(c, &["type"]) == "Ready");
    let mut status = vec![match ready {
        Some(c) if str_at(c, &["status"]) == "True" => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }];
    if bool_at(object, &["spec", "unschedulable"]) {
        status.push("SchedulingDisabled");
    }

    let roles: BTreeSet<&str> = string_map(object, &["metadata", "labels"])
        .into_iter()
        .filter_map(|(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
            Some(role) if !role.is_empty() => Some(role),
            Some(_) => None,
            None => (key == "kubernetes.io/role" && !value.is_empty()).then_some(value),
        })
        .collect();
    let roles =
        if roles.is_empty() { "<none>".to_owned() } else { roles.into_iter().collect::<Vec<_>>().join(",") };

    let address = |kind: &str| {
        array_at(object, &["status", "addresses"])
            .iter()
            .find(|a| str_at(a, &["type"]) == kind)
            .map_or_else(|| "<none>".to_owned(), |a| str_at(a, &["address"]).to_owned())
    };
    let info = |key: &str| match str_at(object, &["status", "nodeInfo", key]) {
        "" => "<unknown>".to_owned(),
        value => value.to_owned(),
    };
    Row::new(vec![
        json!(name(object)),
        json!(status.join(",")),
        json!(roles),
        json!(age(object, now)),
        json!(str_at(object, &["status", "nodeInfo", "kubeletVersion"])),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ])
}

pub(super) const SERVICE_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Type",
        "type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, and LoadBalancer. \"ClusterIP\" allocates a cluster-internal IP address for load-balancing to endpoints. Endpoints are determined by the selector or if that is not specified, by manual construction of an Endpoints object or EndpointSlice objects. If clusterIP is \"None\", no virtual IP is allocated and the endpoints are published as a set of endpoints rather than a virtual IP. \"NodePort\" builds on ClusterIP and allocates a port on every node which routes to the same endpoints as the clusterIP. \"LoadBalancer\" builds on NodePort and creates an external load-balancer (if supported in the current cloud) which routes to the same endpoints as the clusterIP. \"ExternalName\" aliases this service to the specified externalName. Several other fields do not apply to ExternalName services. More info: https://kubernetes.io/docs/concepts/services-networking/service/#publishing-services-service-types",
    ),
    Column::string(
        "Cluster-IP",
        "clusterIP is the IP address of the service and is usually assigned randomly. If an address is specified manually, is in-range (as per system configuration), and is not in use, it will be allocated to the service; otherwise creation of the service will fail. This field may not be changed through updates unless the type field is also being changed to ExternalName (which requires this field to be blank) or the type field is being changed from ExternalName (in which case this field may optionally be specified, as describe above).  Valid values are \"None\", empty string (\"\"), or a valid IP address. Setting this to \"None\" makes a \"headless service\" (no virtual IP), which is useful when direct endpoint connections are preferred and proxying is not required.  Only applies to types ClusterIP, NodePort, and LoadBalancer. If this field is specified when creating a Service of type ExternalName, creation will fail. This field will be wiped when updating a Service to type ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies",
    ),
    Column::string(
        "External-IP",
        "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.  These IPs are not managed by Kubernetes.  The user is responsible for ensuring that traffic arrives at a node with this IP.  A common example is external load-balancers that are not part of the Kubernetes system.",
    ),
    Column::string(
        "Port(s)",
        "The list of ports that are exposed by this service. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies",
    ),
    AGE,
    Column::string(
        "Selector",
        "Route service traffic to pods with label keys and values matching this selector. If empty or not present, the service is assumed to have an external process managing its endpoints, which Kubernetes will not modify. Only applies to types ClusterIP, NodePort, and LoadBalancer. Ignored if type is ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/",
    )
    .wide(),
];

/// Upstream's `loadBalancerStatusStringer` (wide, so unclipped): the ingress IPs, or hostnames
/// when there is no IP, sorted and deduplicated, joined by `,`.
fn load_balancer_addresses(service: &Value) -> String {
    let addresses: BTreeSet<&str> = array_at(service, &["status", "loadBalancer", "ingress"])
        .iter()
        .filter_map(|ingress| match (str_at(ingress, &["ip"]), str_at(ingress, &["hostname"])) {
            ("", "") => None,
            ("", hostname) => Some(hostname),
            (ip, _) => Some(ip),
        })
        .collect();
    addresses.into_iter().collect::<Vec<_>>().join(",")
}

/// Upstream's `getServiceExternalIP`.
fn external_ip(service: &Value, kind: &str) -> String {
    let external: Vec<&str> =
        array_at(service, &["spec", "externalIPs"]).iter().filter_map(Value::as_str).collect();
    match kind {
        "ClusterIP" | "NodePort" if external.is_empty() => "<none>".to_owned(),
        "ClusterIP" | "NodePort" => external.join(","),
        "LoadBalancer" => {
            let lb = load_balancer_addresses(service);
            if !external.is_empty() {
                let mut all: Vec<&str> = if lb.is_empty() { Vec::new() } else { lb.split(',').collect() };
                all.extend(external);
                all.join(",")
            } else if !lb.is_empty() {
                lb
            } else {
                "<pending>".to_owned()
            }
        }
        "ExternalName" => str_at(service, &["spec", "externalName"]).to_owned(),
        _ => "<unknown>".to_owned(),
    }
}

pub(super) fn service(object: &Value, now: Timestamp) -> Row {
    // Decoding defaults the type to ClusterIP and each port's protocol to TCP.
    let kind = match str_at(object, &["spec", "type"]) {
        "" => "ClusterIP",
        kind => kind,
    };
    // clusterIPs[0]; stored Services always carry clusterIPs along with clusterIP.
    let cluster_ip = array_at(object, &["spec", "clusterIPs"])
        .first()
        .and_then(Value::as_str)
        .or_else(|| Some(str_at(object, &["spec", "clusterIP"])).filter(|ip| !ip.is_empty()))
        .unwrap_or("<none>");
    let ports: Vec<String> = array_at(object, &["spec", "ports"])
        .iter()
        .map(|p| {
            let protocol = match str_at(p, &["protocol"]) {
                "" => "TCP",
                protocol => protocol,
            };
            let node_port = int_at(p, &["nodePort"]);
            if node_port > 0 {
                format!("{}:{node_port}/{protocol}", int_at(p, &["port"]))
            } else {
                format!("{}/{protocol}", int_at(p, &["port"]))
            }
        })
        .collect();
    let ports = if ports.is_empty() { "<none>".to_owned() } else { ports.join(",") };
    Row::new(vec![
        json!(name(object)),
        json!(kind),
        json!(cluster_ip),
        json!(external_ip(object, kind)),
        json!(ports),
        json!(age(object, now)),
        json!(format_labels(object, &["spec", "selector"])),
    ])
}

pub(super) const ENDPOINTS_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Endpoints",
        "The set of all endpoints is the union of all subsets. Addresses are placed into subsets according to the IPs they share. A single address with multiple ports, some of which are ready and some of which are not (because they come from different containers) will result in the address being displayed in different subsets for the different ports. No address will appear in both Addresses and NotReadyAddresses in the same subset. Sets of addresses and ports that comprise a service.",
    ),
    AGE,
];

/// Go's `net.JoinHostPort`: IPv6 hosts in brackets.
fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

/// Upstream's `formatEndpoints` for all ports: at most three `ip:port` (or bare IPs for a subset
/// without ports), then ` + N more...`; `<none>` without subsets (only ready addresses count).
fn format_endpoints(object: &Value) -> String {
    const MAX: usize = 3;
    let subsets = array_at(object, &["subsets"]);
    if subsets.is_empty() {
        return "<none>".to_owned();
    }
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0usize;
    for subset in subsets {
        let addresses = array_at(subset, &["addresses"]);
        let ports = array_at(subset, &["ports"]);
        if ports.is_empty() {
            count += addresses.len();
            for address in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(str_at(address, &["ip"]).to_owned());
            }
            continue;
        }
        for port in ports {
            count += addresses.len();
            for address in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(join_host_port(str_at(address, &["ip"]), int_at(port, &["port"])));
            }
        }
    }
    let joined = list.join(",");
    if more { format!("{joined} + {} more...", count.saturating_sub(MAX)) } else { joined }
}

pub(super) fn endpoints(object: &Value, now: Timestamp) -> Row {
    Row::new(vec![json!(name(object)), json!(format_endpoints(object)), json!(age(object, now))])
}

pub(super) const CONFIG_MAP_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Data",
        "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.",
    ),
    AGE,
];

pub(super) fn config_map(object: &Value, now: Timestamp) -> Row {
    let data = map_len(object, &["data"]) + map_len(object, &["binaryData"]);
    Row::new(vec![json!(name(object)), json!(data), json!(age(object, now))])
}

pub(super) const SECRET_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Type",
        "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types",
    ),
    Column::string(
        "Data",
        "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4",
    ),
    AGE,
];

pub(super) fn secret(object: &Value, now: Timestamp) -> Row {
    // Decoding defaults the type to Opaque and merges stringData into data.
    let kind = match str_at(object, &["type"]) {
        "" => "Opaque",
        kind => kind,
    };
    let keys: BTreeSet<&str> = ["data", "stringData"]
        .into_iter()
        .filter_map(|field| at(object, &[field]).and_then(Value::as_object))
        .flat_map(|map| map.keys().map(String::as_str))
        .collect();
    Row::new(vec![json!(name(object)), json!(kind), json!(keys.len()), json!(age(object, now))])
}

pub(super) const SERVICE_ACCOUNT_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Secrets",
        "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use. Pods are only limited to this list if this service account has a \"kubernetes.io/enforce-mountable-secrets\" annotation set to \"true\". The \"kubernetes.io/enforce-mountable-secrets\" annotation is deprecated since v1.32. Prefer separate namespaces to isolate access to mounted secrets. This field should not be used to find auto-generated service account token secrets for use outside of pods. Instead, tokens can be requested directly using the TokenRequest API, or service account token secrets can be manually created. More info: https://kubernetes.io/docs/concepts/configuration/secret",
    ),
    AGE,
];

pub(super) fn service_account(object: &Value, now: Timestamp) -> Row {
    Row::new(vec![json!(name(object)), json!(array_at(object, &["secrets"]).len()), json!(age(object, now))])
}

pub(super) const RESOURCE_QUOTA_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Request",
        "Request represents a minimum amount of cpu/memory that a container may consume.",
    ),
    Column::string(
        "Limit",
        "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node.",
    ),
    AGE,
];

/// Upstream's `printResourceQuota`: `name: used/hard` for each hard limit, sorted by name;
/// `limits.*` in LIMIT, everything else in REQUEST.
pub(super) fn resource_quota(object: &Value, now: Timestamp) -> Row {
    let mut requests = Vec::new();
    let mut limits = Vec::new();
    if let Some(hard) = at(object, &["status", "hard"]).and_then(Value::as_object) {
        let mut hard: Vec<(&String, &Value)> = hard.iter().collect();
        hard.sort_unstable_by(|a, b| a.0.cmp(b.0));
        for (resource, hard_quantity) in hard {
            let used = quantity_string(at(object, &["status", "used", resource.as_str()]));
            let entry = format!("{resource}: {used}/{}", quantity_string(Some(hard_quantity)));
            let mut pieces = resource.split('.');
            if pieces.next() == Some("limits") && pieces.next().is_some() {
                limits.push(entry);
            } else {
                requests.push(entry);
            }
        }
    }
    Row::new(vec![
        json!(name(object)),
        json!(requests.join(", ")),
        json!(limits.join(", ")),
        json!(age(object, now)),
    ])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{cells, headers};

    fn meta(name: &str) -> serde_json::Value {
        json!({"name": name, "creationTimestamp": "2025-05-30T09:00:00Z", "uid": "x", "resourceVersion": "1"})
    }

    #[test]
    fn namespaces() {
        assert_eq!(headers("", "namespaces"), ["NAME", "STATUS", "AGE"]);
        let ns = json!({"metadata": meta("kube-system"), "status": {"phase": "Active"}});
        assert_eq!(cells("", "namespaces", &ns), [json!("kube-system"), json!("Active"), json!("2d3h")]);
        let going = json!({"metadata": meta("old"), "status": {"phase": "Terminating"}});
        assert_eq!(cells("", "namespaces", &going)[1], "Terminating");
        assert_eq!(cells("", "namespaces", &json!({"metadata": meta("new")}))[1], "Active");
    }

    #[test]
    fn nodes() {
        assert_eq!(
            headers("", "nodes"),
            [
                "NAME",
                "STATUS",
                "ROLES",
                "AGE",
                "VERSION",
                "INTERNAL-IP",
                "EXTERNAL-IP",
                "OS-IMAGE",
                "KERNEL-VERSION",
                "CONTAINER-RUNTIME"
            ]
        );
        let mut node = json!({
            "metadata": {"name": "cp-1", "creationTimestamp": "2025-04-01T12:00:00Z",
                         "labels": {"node-role.kubernetes.io/control-plane": "", "node-role.kubernetes.io/": "x",
                                    "kubernetes.io/role": "master", "kubernetes.io/hostname": "cp-1"}},
            "spec": {"unschedulable": true},
            "status": {
                "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "192.168.1.10"}, {"type": "Hostname", "address": "cp-1"}],
                "nodeInfo": {"kubeletVersion": "v1.34.1", "osImage": "Debian GNU/Linux 12 (bookworm)",
                             "kernelVersion": "6.1.0-25-amd64", "containerRuntimeVersion": "containerd://1.7.22"}
            }
        });
        assert_eq!(
            cells("", "nodes", &node),
            [
                json!("cp-1"),
                json!("Ready,SchedulingDisabled"),
                json!("control-plane,master"),
                json!("61d"),
                json!("v1.34.1"),
                json!("192.168.1.10"),
                json!("<none>"),
                json!("Debian GNU/Linux 12 (bookworm)"),
                json!("6.1.0-25-amd64"),
                json!("containerd://1.7.22")
            ]
        );
        node["status"]["conditions"][1]["status"] = json!("Unknown");
        node["spec"] = json!({});
        assert_eq!(cells("", "nodes", &node)[1], "NotReady");
        let bare = json!({"metadata": {"name": "n"}});
        assert_eq!(
            cells("", "nodes", &bare),
            [
                json!("n"),
                json!("Unknown"),
                json!("<none>"),
                json!("<unknown>"),
                json!(""),
                json!("<none>"),
                json!("<none>"),
                json!("<unknown>"),
                json!("<unknown>"),
                json!("<unknown>")
            ]
        );
    }

    #[test]
    fn services() {
        assert_eq!(
            headers("", "services"),
            ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE", "SELECTOR"]
        );
        let kubernetes = json!({
            "metadata": meta("kubernetes"),
            "spec": {"type": "ClusterIP", "clusterIP": "10.96.0.1", "clusterIPs": ["10.96.0.1"],
                     "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]}
        });
        assert_eq!(
            cells("", "services", &kubernetes),
            [
                json!("kubernetes"),
                json!("ClusterIP"),
                json!("10.96.0.1"),
                json!("<none>"),
                json!("443/TCP"),
                json!("2d3h"),
                json!("<none>")
            ]
        );
        let node_port = json!({
            "metadata": meta("web"),
            "spec": {"type": "NodePort", "clusterIPs": ["10.96.10.20", "fd00::20"], "externalIPs": ["1.2.3.4"],
                     "selector": {"app": "web", "tier": "fe"},
                     "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}
        });
        assert_eq!(
            cells("", "services", &node_port),
            [
                json!("web"),
                json!("NodePort"),
                json!("10.96.10.20"),
                json!("1.2.3.4"),
                json!("80:30080/TCP,53/UDP"),
                json!("2d3h"),
                json!("app=web,tier=fe")
            ]
        );
        let lb = |status: serde_json::Value, external: serde_json::Value| {
            json!({"metadata": meta("lb"), "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.9",
                   "externalIPs": external, "ports": [{"port": 80, "nodePort": 31000}]},
                   "status": {"loadBalancer": status}})
        };
        let pending = cells("", "services", &lb(json!({}), json!([])));
        assert_eq!(
            (pending[2].clone(), pending[3].clone(), pending[4].clone()),
            (json!("10.0.0.9"), json!("<pending>"), json!("80:31000/TCP"))
        );
        let ingress = json!({"ingress": [{"ip": "203.0.113.9"}, {"hostname": "lb.example.com"}, {"ip": "203.0.113.1"}]});
        assert_eq!(
            cells("", "services", &lb(ingress.clone(), json!([])))[3],
            "203.0.113.1,203.0.113.9,lb.example.com"
        );
        assert_eq!(
            cells("", "services", &lb(ingress, json!(["5.6.7.8"])))[3],
            "203.0.113.1,203.0.113.9,lb.example.com,5.6.7.8"
        );
        let external_name = json!({"metadata": meta("ext"), "spec": {"type": "ExternalName", "externalName": "db.example.com"}});
        assert_eq!(
            cells("", "services", &external_name),
            [
                json!("ext"),
                json!("ExternalName"),
                json!("<none>"),
                json!("db.example.com"),
                json!("<none>"),
                json!("2d3h"),
                json!("<none>")
            ]
        );
        let odd = json!({"metadata": meta("odd"), "spec": {"type": "Weird"}});
        assert_eq!(cells("", "services", &odd)[3], "<unknown>");
        // Decoding defaults: type ClusterIP, protocol TCP.
        let bare = json!({"metadata": meta("bare"), "spec": {"ports": [{"port": 8080}]}});
        assert_eq!(
            cells("", "services", &bare)[1..5],
            [json!("ClusterIP"), json!("<none>"), json!("<none>"), json!("8080/TCP")]
        );
    }

    #[test]
    fn endpoints() {
        assert_eq!(headers("", "endpoints"), ["NAME", "ENDPOINTS", "AGE"]);
        let ep = json!({"metadata": meta("web"), "subsets": [
            {"addresses": [{"ip": "10.244.0.5"}, {"ip": "10.244.1.6"}], "notReadyAddresses": [{"ip": "10.244.2.7"}],
             "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "metrics", "port": 9090}]},
            {"addresses": [{"ip": "fd00::9"}], "ports": [{"port": 443}]}]});
        assert_eq!(
            cells("", "endpoints", &ep),
            [
                json!("web"),
                json!("10.244.0.5:8080,10.244.1.6:8080,10.244.0.5:9090 + 2 more..."),
                json!("2d3h")
            ]
        );
        let headless = json!({"metadata": meta("h"), "subsets": [{"addresses": [{"ip": "fd00::1"}, {"ip": "10.0.0.2"}]}]});
        assert_eq!(cells("", "endpoints", &headless)[1], "fd00::1,10.0.0.2");
        let v6 = json!({"metadata": meta("v6"), "subsets": [{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 80}]}]});
        assert_eq!(cells("", "endpoints", &v6)[1], "[fd00::1]:80");
        assert_eq!(cells("", "endpoints", &json!({"metadata": meta("none")}))[1], "<none>");
        let only_not_ready = json!({"metadata": meta("nr"), "subsets": [{"notReadyAddresses": [{"ip": "10.0.0.1"}], "ports": [{"port": 80}]}]});
        assert_eq!(cells("", "endpoints", &only_not_ready)[1], "");
    }

    #[test]
    fn config_maps_secrets_service_accounts() {
        assert_eq!(headers("", "configmaps"), ["NAME", "DATA", "AGE"]);
        let cm = json!({"metadata": meta("kube-root-ca.crt"), "data": {"ca.crt": "..."}, "binaryData": {"blob": "AAE="}});
        assert_eq!(cells("", "configmaps", &cm), [json!("kube-root-ca.crt"), json!(2), json!("2d3h")]);
        assert_eq!(cells("", "configmaps", &json!({"metadata": meta("e")}))[1], 0);

        assert_eq!(headers("", "secrets"), ["NAME", "TYPE", "DATA", "AGE"]);
        let tls = json!({"metadata": meta("tls"), "type": "kubernetes.io/tls", "data": {"tls.crt": "x", "tls.key": "y"}});
        assert_eq!(
            cells("", "secrets", &tls),
            [json!("tls"), json!("kubernetes.io/tls"), json!(2), json!("2d3h")]
        );
        let plain = json!({"metadata": meta("s"), "data": {"a": "eA=="}, "stringData": {"a": "x", "b": "y"}});
        assert_eq!(cells("", "secrets", &plain)[1..3], [json!("Opaque"), json!(2)]);

        assert_eq!(headers("", "serviceaccounts"), ["NAME", "SECRETS", "AGE"]);
        let sa = json!({"metadata": meta("default")});
        assert_eq!(cells("", "serviceaccounts", &sa), [json!("default"), json!(0), json!("2d3h")]);
        let with = json!({"metadata": meta("builder"), "secrets": [{"name": "builder-token"}]});
        assert_eq!(cells("", "serviceaccounts", &with)[1], 1);
    }

    #[test]
    fn resource_quotas() {
        assert_eq!(headers("", "resourcequotas"), ["NAME", "REQUEST", "LIMIT", "AGE"]);
        let quota = json!({"metadata": meta("compute"), "spec": {"hard": {}},
            "status": {"hard": {"requests.cpu": "1", "requests.memory": "1Gi", "limits.cpu": "2", "limits.memory": "2Gi",
                                "pods": "10", "count/deployments.apps": "5"},
                       "used": {"requests.cpu": "500m", "requests.memory": "512Mi", "limits.cpu": "1", "pods": "3"}}});
        assert_eq!(
            cells("", "resourcequotas", &quota),
            [
                json!("compute"),
                json!(
                    "count/deployments.apps: 0/5, pods: 3/10, requests.cpu: 500m/1, requests.memory: 512Mi/1Gi"
                ),
                json!("limits.cpu: 1/2, limits.memory: 0/2Gi"),
                json!("2d3h")
            ]
        );
        assert_eq!(
            cells("", "resourcequotas", &json!({"metadata": meta("q")}))[1..3],
            [json!(""), json!("")]
        );
    }
}
