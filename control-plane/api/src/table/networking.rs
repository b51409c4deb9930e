//! networking.k8s.io/v1 printers: servicecidrs and ipaddresses (upstream's `printServiceCIDR`,
//! `printIPAddress`).

use jiff::Timestamp;
use serde_json::{Value, json};

use super::value::{age, array_at, at, name, str_at};
use super::{AGE, Column, NAME, Row};

pub(super) const SERVICE_CIDR_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "CIDRs",
        "CIDRs defines the IP blocks in CIDR notation (e.g. \"192.168.0.0/24\" or \"2001:db8::/64\") from which to assign service cluster IPs. Max of two CIDRs is allowed, one of each IP family. This field is immutable.",
    ),
    AGE,
];

pub(super) fn service_cidr(object: &Value, now: Timestamp) -> Row {
    let cidrs: Vec<&str> = array_at(object, &["spec", "cidrs"]).iter().filter_map(Value::as_str).collect();
    Row::new(vec![json!(name(object)), json!(cidrs.join(",")), json!(age(object, now))])
}

pub(super) const IP_ADDRESS_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "ParentRef",
        "ParentRef references the resource that an IPAddress is attached to. An IPAddress must reference a parent object.",
    ),
];

/// `resource[.group][/namespace]/name`, lower-cased (a GroupResource's String()), or `<none>`.
fn parent_ref(object: &Value) -> String {
    let Some(parent) = at(object, &["spec", "parentRef"]).filter(|p| p.is_object()) else {
        return "<none>".to_owned();
    };
    let (group, resource) = (str_at(parent, &["group"]), str_at(parent, &["resource"]));
    let mut shown =
        if group.is_empty() { resource.to_lowercase() } else { format!("{resource}.{group}").to_lowercase() };
    let namespace = str_at(parent, &["namespace"]);
    if !namespace.is_empty() {
        shown.push('/');
        shown.push_str(namespace);
    }
    shown.push('/');
    shown.push_str(str_at(parent, &["name"]));
    shown
}

/// Upstream's printer appends the age as a third cell although it declares two columns (kubectl
/// prints only as many cells as there are columns); the rows are served as upstream serves them.
pub(super) fn ip_address(object: &Value, now: Timestamp) -> Row {
    Row::new(vec![json!(name(object)), json!(parent_ref(object)), json!(age(object, now))])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{headers, now, resource};

    #[test]
    fn service_cidrs() {
        assert_eq!(headers("networking.k8s.io", "servicecidrs"), ["NAME", "CIDRS", "AGE"]);
        let cidr = json!({"metadata": {"name": "kubernetes", "creationTimestamp": "2025-06-01T11:00:00Z"},
                          "spec": {"cidrs": ["10.96.0.0/16", "fd00:10:96::/112"]}});
        let cells = super::super::test_support::cells("networking.k8s.io", "servicecidrs", &cidr);
        assert_eq!(cells, [json!("kubernetes"), json!("10.96.0.0/16,fd00:10:96::/112"), json!("60m")]);
    }

    #[test]
    fn ip_addresses() {
        assert_eq!(headers("networking.k8s.io", "ipaddresses"), ["NAME", "PARENTREF"]);
        let cells = |object: serde_json::Value| {
            super::super::cells(resource("networking.k8s.io", "ipaddresses"), &object, now())
        };
        let ip = json!({"metadata": {"name": "10.96.0.10", "creationTimestamp": "2025-06-01T11:59:00Z"},
                        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": "kube-system", "name": "kube-dns"}}});
        assert_eq!(cells(ip), [json!("10.96.0.10"), json!("services/kube-system/kube-dns"), json!("60s")]);
        let gateway = json!({"metadata": {"name": "2001:db8::1"},
                             "spec": {"parentRef": {"group": "Gateway.Networking.K8s.IO", "resource": "Gateways", "name": "gw"}}});
        assert_eq!(cells(gateway)[1], "gateways.gateway.networking.k8s.io/gw");
        assert_eq!(cells(json!({"metadata": {"name": "10.0.0.1"}, "spec": {}}))[1], "<none>");
    }
}
