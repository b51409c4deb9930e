//! The other groups' printers: poddisruptionbudgets (policy), rolebindings and
//! clusterrolebindings (rbac), priorityclasses (scheduling), leases (coordination), runtimeclasses
//! (node) and endpointslices (discovery). Upstream's `printPodDisruptionBudget`,
//! `printRoleBinding`/`printClusterRoleBinding`, `printPriorityClass`, `printLease`,
//! `printRuntimeClass`, `printEndpointSlice`.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::value::{
    age, array_at, at, bool_at, int_at, int_or_string, list_with_more, name, opt_int, opt_str, str_at,
};
use super::{AGE, Column, NAME, Row};

pub(super) const POD_DISRUPTION_BUDGET_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Min Available", "The minimum number of pods that must be available."),
    Column::string("Max Unavailable", "The maximum number of pods that may be unavailable."),
    Column::new(
        "Allowed Disruptions",
        "integer",
        "Calculated number of pods that may be disrupted at this time.",
    ),
    AGE,
];

pub(super) fn pod_disruption_budget(object: &Value, now: Timestamp) -> Row {
    let bound = |field: &str| at(object, &["spec", field]).map_or_else(|| "N/A".to_owned(), int_or_string);
    Row::new(vec![
        json!(name(object)),
        json!(bound("minAvailable")),
        json!(bound("maxUnavailable")),
        json!(int_at(object, &["status", "disruptionsAllowed"])),
        json!(age(object, now)),
    ])
}

pub(super) const ROLE_BINDING_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Role",
        "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.",
    ),
    AGE,
    Column::string("Users", "Users in the roleBinding").wide(),
    Column::string("Groups", "Groups in the roleBinding").wide(),
    Column::string("ServiceAccounts", "ServiceAccounts in the roleBinding").wide(),
];

pub(super) const CLUSTER_ROLE_BINDING_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Role",
        "RoleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error.",
    ),
    AGE,
    Column::string("Users", "Users in the clusterRoleBinding").wide(),
    Column::string("Groups", "Groups in the clusterRoleBinding").wide(),
    Column::string("ServiceAccounts", "ServiceAccounts in the clusterRoleBinding").wide(),
];

/// A RoleBinding or ClusterRoleBinding: `Kind/name` of the role, then the subjects by kind
/// (upstream's `rbac.SubjectsStrings`, service accounts as `namespace/name`), joined by `, `.
pub(super) fn role_binding(object: &Value, now: Timestamp) -> Row {
    let role = format!("{}/{}", str_at(object, &["roleRef", "kind"]), str_at(object, &["roleRef", "name"]));
    let (mut users, mut groups, mut service_accounts) = (Vec::new(), Vec::new(), Vec::new());
    for subject in array_at(object, &["subjects"]) {
        let subject_name = str_at(subject, &["name"]);
        match str_at(subject, &["kind"]) {
            "ServiceAccount" => {
                service_accounts.push(format!("{}/{subject_name}", str_at(subject, &["namespace"])));
            }
            "User" => users.push(subject_name.to_owned()),
            "Group" => groups.push(subject_name.to_owned()),
            _ => {}
        }
    }
    Row::new(vec![
        json!(name(object)),
        json!(role),
        json!(age(object, now)),
        json!(users.join(", ")),
        json!(groups.join(", ")),
        json!(service_accounts.join(", ")),
    ])
}

pub(super) const PRIORITY_CLASS_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Value",
        "integer",
        "value represents the integer value of this priority class. This is the actual priority that pods receive when they have the name of this class in their pod spec.",
    ),
    Column::new(
        "Global-Default",
        "boolean",
        "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class. Only one PriorityClass can be marked as `globalDefault`. However, if more than one PriorityClasses exists with their `globalDefault` field set to true, the smallest value of such global default PriorityClasses will be used as the default priority.",
    ),
    AGE,
    // Upstream prints it only "wide", but declares it at priority 0.
    Column::string(
        "PreemptionPolicy",
        "preemptionPolicy is the Policy for preempting pods with lower priority. One of Never, PreemptLowerPriority. Defaults to PreemptLowerPriority if unset.",
    ),
];

pub(super) fn priority_class(object: &Value, now: Timestamp) -> Row {
    Row::new(vec![
        json!(name(object)),
        json!(int_at(object, &["value"])),
        json!(bool_at(object, &["globalDefault"])),
        json!(age(object, now)),
        // Decoding defaults the policy to PreemptLowerPriority.
        json!(opt_str(object, &["preemptionPolicy"]).unwrap_or("PreemptLowerPriority")),
    ])
}

pub(super) const LEASE_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "Holder",
        "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field.",
    ),
    AGE,
];

pub(super) fn lease(object: &Value, now: Timestamp) -> Row {
    Row::new(vec![
        json!(name(object)),
        json!(str_at(object, &["spec", "holderIdentity"])),
        json!(age(object, now)),
    ])
}

/// Upstream describes the column with `metav1.ObjectMeta{}.SwaggerDoc()["handler"]`, a key
/// ObjectMeta does not have: the description is empty.
pub(super) const RUNTIME_CLASS_COLUMNS: &[Column] = &[NAME, Column::string("Handler", ""), AGE];

pub(super) fn runtime_class(object: &Value, now: Timestamp) -> Row {
    Row::new(vec![json!(name(object)), json!(str_at(object, &["handler"])), json!(age(object, now))])
}

pub(super) const ENDPOINT_SLICE_COLUMNS: &[Column] = &[
    NAME,
    Column::string(
        "AddressType",
        "addressType specifies the type of address carried by this EndpointSlice. All addresses in this slice must be the same type. This field is immutable after creation. The following address types are currently supported: * IPv4: Represents an IPv4 Address. * IPv6: Represents an IPv6 Address. * FQDN: Represents a Fully Qualified Domain Name.",
    ),
    Column::string(
        "Ports",
        "ports specifies the list of network ports exposed by each endpoint in this slice. Each port must have a unique name. When ports is empty, it indicates that there are no defined ports. When a port is defined with a nil port value, it indicates \"all ports\". Each slice may include a maximum of 100 ports.",
    ),
    Column::string(
        "Endpoints",
        "endpoints is a list of unique endpoints in this slice. Each slice may include a maximum of 1000 endpoints.",
    ),
    AGE,
];

pub(super) fn endpoint_slice(object: &Value, now: Timestamp) -> Row {
    // Upstream's formatDiscoveryPorts: the port number, else its name, else `*`.
    let ports = array_at(object, &["ports"]).iter().map(|port| match opt_int(port, &["port"]) {
        Some(number) => number.to_string(),
        None => opt_str(port, &["name"]).unwrap_or("*").to_owned(),
    });
    let addresses = array_at(object, &["endpoints"])
        .iter()
        .flat_map(|endpoint| array_at(endpoint, &["addresses"]))
        .map(|address| address.as_str().unwrap_or_default().to_owned());
    Row::new(vec![
        json!(name(object)),
        json!(str_at(object, &["addressType"])),
        json!(list_with_more(ports, 3)),
        json!(list_with_more(addresses, 3)),
        json!(age(object, now)),
    ])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{cells, headers};

    #[test]
    fn pod_disruption_budgets() {
        assert_eq!(
            headers("policy", "poddisruptionbudgets"),
            ["NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS", "AGE"]
        );
        let pdb = json!({"metadata": {"name": "web", "creationTimestamp": "2025-06-01T11:00:00Z"},
                         "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
                         "status": {"disruptionsAllowed": 1, "currentHealthy": 3, "desiredHealthy": 2, "expectedPods": 3}});
        assert_eq!(
            cells("policy", "poddisruptionbudgets", &pdb),
            [json!("web"), json!("2"), json!("N/A"), json!(1), json!("60m")]
        );
        let pct = json!({"metadata": {"name": "db"}, "spec": {"maxUnavailable": "25%"}});
        assert_eq!(
            cells("policy", "poddisruptionbudgets", &pct)[1..4],
            [json!("N/A"), json!("25%"), json!(0)]
        );
    }

    #[test]
    fn role_bindings() {
        let expected = ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"];
        assert_eq!(headers("rbac.authorization.k8s.io", "rolebindings"), expected);
        assert_eq!(headers("rbac.authorization.k8s.io", "clusterrolebindings"), expected);
        let rb = json!({
            "metadata": {"name": "read-pods", "namespace": "dev", "creationTimestamp": "2025-06-01T10:00:00Z"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "User", "name": "jane"}, {"kind": "Group", "name": "devs"},
                         {"kind": "ServiceAccount", "namespace": "dev", "name": "ci"}, {"kind": "User", "name": "joe"},
                         {"kind": "Robot", "name": "r2"}]
        });
        assert_eq!(
            cells("rbac.authorization.k8s.io", "rolebindings", &rb),
            [
                json!("read-pods"),
                json!("Role/pod-reader"),
                json!("120m"),
                json!("jane, joe"),
                json!("devs"),
                json!("dev/ci")
            ]
        );
        let crb = json!({
            "metadata": {"name": "cluster-admin", "creationTimestamp": "2025-01-01T00:00:00Z"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}]
        });
        assert_eq!(
            cells("rbac.authorization.k8s.io", "clusterrolebindings", &crb),
            [
                json!("cluster-admin"),
                json!("ClusterRole/cluster-admin"),
                json!("151d"),
                json!(""),
                json!("system:masters"),
                json!("")
            ]
        );
    }

    #[test]
    fn roles_and_limit_ranges_use_the_default_table() {
        for (group, plural) in [
            ("rbac.authorization.k8s.io", "roles"),
            ("rbac.authorization.k8s.io", "clusterroles"),
            ("", "limitranges"),
        ] {
            assert_eq!(headers(group, plural), ["NAME", "CREATED AT"]);
        }
        let role =
            json!({"metadata": {"name": "admin", "creationTimestamp": "2025-01-01T00:00:00Z"}, "rules": []});
        assert_eq!(
            cells("rbac.authorization.k8s.io", "clusterroles", &role),
            [json!("admin"), json!("2025-01-01T00:00:00Z")]
        );
        let limits = json!({"metadata": {"name": "mem-limit-range", "creationTimestamp": "2025-03-04T05:06:07Z"},
                            "spec": {"limits": [{"default": {"memory": "512Mi"}, "type": "Container"}]}});
        assert_eq!(
            cells("", "limitranges", &limits),
            [json!("mem-limit-range"), json!("2025-03-04T05:06:07Z")]
        );
    }

    #[test]
    fn priority_classes() {
        assert_eq!(
            headers("scheduling.k8s.io", "priorityclasses"),
            ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
        );
        let pc = json!({"metadata": {"name": "system-cluster-critical", "creationTimestamp": "2025-05-01T12:00:00Z"},
                        "value": 2_000_000_000, "globalDefault": false, "preemptionPolicy": "PreemptLowerPriority",
                        "description": "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary."});
        assert_eq!(
            cells("scheduling.k8s.io", "priorityclasses", &pc),
            [
                json!("system-cluster-critical"),
                json!(2_000_000_000),
                json!(false),
                json!("31d"),
                json!("PreemptLowerPriority")
            ]
        );
        let never = json!({"metadata": {"name": "batch"}, "value": -10, "globalDefault": true, "preemptionPolicy": "Never"});
        assert_eq!(
            cells("scheduling.k8s.io", "priorityclasses", &never)[1..5],
            [json!(-10), json!(true), json!("<unknown>"), json!("Never")]
        );
        assert_eq!(cells("scheduling.k8s.io", "priorityclasses", &json!({}))[4], "PreemptLowerPriority");
    }

    #[test]
    fn leases_and_runtime_classes() {
        assert_eq!(headers("coordination.k8s.io", "leases"), ["NAME", "HOLDER", "AGE"]);
        let lease = json!({"metadata": {"name": "kube-scheduler", "namespace": "kube-system", "creationTimestamp": "2025-06-01T11:59:58Z"},
                           "spec": {"holderIdentity": "cp-1_1b2c3d", "leaseDurationSeconds": 15}});
        assert_eq!(
            cells("coordination.k8s.io", "leases", &lease),
            [json!("kube-scheduler"), json!("cp-1_1b2c3d"), json!("2s")]
        );
        assert_eq!(
            cells("coordination.k8s.io", "leases", &json!({"metadata": {"name": "free"}, "spec": {}}))[1],
            ""
        );

        assert_eq!(headers("node.k8s.io", "runtimeclasses"), ["NAME", "HANDLER", "AGE"]);
        let rc = json!({"metadata": {"name": "gvisor", "creationTimestamp": "2025-06-01T06:00:00Z"}, "handler": "runsc"});
        assert_eq!(
            cells("node.k8s.io", "runtimeclasses", &rc),
            [json!("gvisor"), json!("runsc"), json!("6h")]
        );
    }

    #[test]
    fn endpoint_slices() {
        assert_eq!(
            headers("discovery.k8s.io", "endpointslices"),
            ["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"]
        );
        let slice = json!({
            "metadata": {"name": "web-abc12", "creationTimestamp": "2025-06-01T11:00:00Z",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "named"}, {"port": null}, {"port": 9090}],
            "endpoints": [{"addresses": ["10.244.0.5"], "conditions": {"ready": true}},
                          {"addresses": ["10.244.1.6", "10.244.1.7"], "conditions": {"ready": false}},
                          {"addresses": ["10.244.2.8"]}]
        });
        assert_eq!(
            cells("discovery.k8s.io", "endpointslices", &slice),
            [
                json!("web-abc12"),
                json!("IPv4"),
                json!("8080,named,* + 1 more..."),
                json!("10.244.0.5,10.244.1.6,10.244.1.7 + 1 more..."),
                json!("60m")
            ]
        );
        let empty = json!({"metadata": {"name": "empty"}, "addressType": "IPv6", "endpoints": null});
        assert_eq!(
            cells("discovery.k8s.io", "endpointslices", &empty)[2..4],
            [json!("<unset>"), json!("<unset>")]
        );
    }
}
