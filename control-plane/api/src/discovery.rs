//! The discovery documents kubectl and client libraries read first: `/api` (APIVersions), `/apis`
//! (APIGroupList), `/apis/<group>` (APIGroup) and `/api/v1`, `/apis/<group>/<version>`
//! (APIResourceList, subresources included as `pods/status`), built from [`crate::resources`]; and
//! the aggregated form (apidiscovery.k8s.io/v2 and v2beta1 APIGroupDiscoveryList) that clients ask
//! for first at `/api` and `/apis`: every group, version and resource in one document.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, APIVersions, GroupVersionForDiscovery,
    ServerAddressByClientCIDR,
};

use serde_json::{Value, json};

use crate::resources::{self, Resource};

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn optional(items: &[&str]) -> Option<Vec<String>> {
    (!items.is_empty()).then(|| strings(items))
}

/// `/api`: the core group's versions, reachable at `server_address` (`host:port`) from anywhere.
pub fn api_versions(server_address: &str) -> APIVersions {
    APIVersions {
        server_address_by_client_cidrs: vec![ServerAddressByClientCIDR {
            client_cidr: "0.0.0.0/0".to_owned(),
            server_address: server_address.to_owned(),
        }],
        versions: vec!["v1".to_owned()],
    }
}

/// The versions a group serves, the preferred first: built-in groups serve v1; custom resources'
/// groups their served versions in Kubernetes' version priority (GA, then beta, then alpha, higher
/// numbers first; others alphabetically last), as apiextensions-apiserver orders them.
pub fn group_versions(group: &str) -> Vec<&'static str> {
    let mut versions: Vec<&'static str> = Vec::new();
    for resource in resources::served().filter(|r| r.group == group) {
        if !versions.contains(&resource.version) {
            versions.push(resource.version);
        }
    }
    versions.sort_by_key(|v| version_priority(v));
    versions
}

/// A sort key: smaller is preferred (upstream's version.CompareKubeAwareVersionStrings).
fn version_priority(version: &str) -> (u8, std::cmp::Reverse<u64>, std::cmp::Reverse<u64>, String) {
    let parsed = version.strip_prefix('v').and_then(|rest| {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let major: u64 = rest[..digits].parse().ok()?;
        match &rest[digits..] {
            "" => Some((0, major, 0)),
            tail => {
                let (stage, number) = if let Some(n) = tail.strip_prefix("beta") {
                    (1, n)
                } else {
                    (2, tail.strip_prefix("alpha")?)
                };
                Some((stage, major, number.parse().ok()?))
            }
        }
    });
    match parsed {
        Some((stage, major, minor)) => {
            (stage, std::cmp::Reverse(major), std::cmp::Reverse(minor), String::new())
        }
        None => (3, std::cmp::Reverse(0), std::cmp::Reverse(0), version.to_owned()),
    }
}

/// `/apis/<group>`.
pub fn api_group(group: &str) -> APIGroup {
    let versions: Vec<GroupVersionForDiscovery> = group_versions(group)
        .into_iter()
        .map(|version| GroupVersionForDiscovery {
            group_version: format!("{group}/{version}"),
            version: version.to_owned(),
        })
        .collect();
    APIGroup {
        name: group.to_owned(),
        preferred_version: versions.first().cloned(),
        server_address_by_client_cidrs: None,
        versions,
    }
}

/// `/apis`.
pub fn api_group_list() -> APIGroupList {
    APIGroupList { groups: resources::groups().into_iter().map(api_group).collect() }
}

/// `/api/v1` or `/apis/<group>/<version>`; `None` for a group version Keel does not serve.
pub fn api_resource_list(group: &str, version: &str) -> Option<APIResourceList> {
    let mut list = Vec::new();
    for resource in resources::of_group_version(group, version) {
        list.push(api_resource(resource));
        for sub in resource.subresources {
            list.push(APIResource {
                name: format!("{}/{}", resource.plural, sub.name),
                singular_name: String::new(),
                namespaced: resource.namespaced,
                kind: sub.kind.to_owned(),
                group: (!sub.group.is_empty()).then(|| sub.group.to_owned()),
                version: (!sub.version.is_empty()).then(|| sub.version.to_owned()),
                verbs: strings(sub.verbs),
                ..APIResource::default()
            });
        }
    }
    if list.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() { version.to_owned() } else { format!("{group}/{version}") };
    Some(APIResourceList { group_version, resources: list })
}

fn api_resource(resource: &Resource) -> APIResource {
    APIResource {
        name: resource.plural.to_owned(),
        singular_name: resource.singular.to_owned(),
        namespaced: resource.namespaced,
        kind: resource.kind.to_owned(),
        verbs: strings(resource.verbs),
        short_names: optional(resource.short_names),
        categories: optional(resource.categories),
        ..APIResource::default()
    }
}

/// The aggregated discovery document of `/api` (`core`: the core group) or `/apis` (every other
/// group), as apidiscovery.k8s.io `version` (`v2` or `v2beta1`, which share one shape). k8s-openapi
/// has no apidiscovery types, so the document is written as upstream's JSON encoding of them
/// (`APIGroupDiscoveryList`: group metadata with a null creationTimestamp, `responseKind` with empty
/// group and version for a resource's own kind, freshness Current).
pub fn aggregated(core: bool, version: &str) -> Value {
    let groups: Vec<&str> = if core { vec![""] } else { resources::groups() };
    let items: Vec<Value> = groups
        .into_iter()
        .map(|group| {
            let versions: Vec<Value> = group_versions(group)
                .into_iter()
                .map(|version| {
                    let resources: Vec<Value> =
                        resources::of_group_version(group, version).map(resource_discovery).collect();
                    json!({"version": version, "resources": resources, "freshness": "Current"})
                })
                .collect();
            let mut metadata = json!({"creationTimestamp": null});
            if !group.is_empty() {
                metadata["name"] = group.into();
            }
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

fn resource_discovery(resource: &Resource) -> Value {
    // apiextensions-apiserver names custom resources' kinds with their group and version.
    let (group, version) = if resource.custom { (resource.group, resource.version) } else { ("", "") };
    let mut entry = json!({
        "resource": resource.plural,
        "responseKind": {"group": group, "version": version, "kind": resource.kind},
        "scope": if resource.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": resource.singular,
        "verbs": resource.verbs,
    });
    if !resource.short_names.is_empty() {
        entry["shortNames"] = json!(resource.short_names);
    }
    if !resource.categories.is_empty() {
        entry["categories"] = json!(resource.categories);
    }
    if !resource.subresources.is_empty() {
        entry["subresources"] = resource
            .subresources
            .iter()
            .map(|sub| {
                let (group, version) =
                    if sub.group.is_empty() { (group, version) } else { (sub.group, sub.version) };
                json!({
                    "subresource": sub.name,
                    "responseKind": {"group": group, "version": version, "kind": sub.kind},
                    "verbs": sub.verbs,
                })
            })
            .collect();
    }
    entry
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn aggregated_documents() {
        let core = aggregated(true, "v2");
        assert_eq!(
            (&core["kind"], &core["apiVersion"]),
            (&json!("APIGroupDiscoveryList"), &json!("apidiscovery.k8s.io/v2"))
        );
        let items = core["items"].as_array().unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0]["metadata"], json!({"creationTimestamp": null}));
        let v1 = &items[0]["versions"][0];
        assert_eq!((&v1["version"], &v1["freshness"]), (&json!("v1"), &json!("Current")));
        let pods = v1["resources"].as_array().unwrap().iter().find(|r| r["resource"] == "pods").unwrap();
        assert_eq!(pods["responseKind"], json!({"group": "", "version": "", "kind": "Pod"}));
        assert_eq!(
            (&pods["scope"], &pods["singularResource"], &pods["shortNames"]),
            (&json!("Namespaced"), &json!("pod"), &json!(["po"]))
        );
        let eviction =
            pods["subresources"].as_array().unwrap().iter().find(|s| s["subresource"] == "eviction").unwrap();
        assert_eq!(eviction["responseKind"], json!({"group": "policy", "version": "v1", "kind": "Eviction"}));
        let groups = aggregated(false, "v2beta1");
        assert_eq!(groups["apiVersion"], "apidiscovery.k8s.io/v2beta1");
        let apps =
            groups["items"].as_array().unwrap().iter().find(|g| g["metadata"]["name"] == "apps").unwrap();
        let deployments = apps["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "deployments")
            .unwrap();
        let scale = deployments["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["subresource"] == "scale")
            .unwrap();
        assert_eq!(scale["responseKind"], json!({"group": "autoscaling", "version": "v1", "kind": "Scale"}));
        assert!(
            groups["items"].as_array().unwrap().iter().all(|g| g["metadata"]["name"] != ""),
            "no core group in /apis"
        );
        let nodes = aggregated(true, "v2")["items"][0]["versions"][0]["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["resource"] == "nodes")
            .cloned()
            .unwrap();
        assert_eq!(nodes["scope"], "Cluster");
    }

    #[test]
    fn core_resource_list() {
        let list = api_resource_list("", "v1").unwrap();
        assert_eq!(list.group_version, "v1");
        let json = serde_json::to_value(&list).unwrap();
        assert_eq!(json["kind"], "APIResourceList");
        let pods = json["resources"].as_array().unwrap().iter().find(|r| r["name"] == "pods").unwrap();
        assert_eq!(
            pods,
            &json!({
                "name": "pods", "singularName": "pod", "namespaced": true, "kind": "Pod",
                "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
                "shortNames": ["po"], "categories": ["all"]
            })
        );
        let binding = list.resources.iter().find(|r| r.name == "pods/binding").unwrap();
        assert_eq!(
            (binding.kind.as_str(), binding.verbs.as_slice()),
            ("Binding", &["create".to_owned()][..])
        );
        assert!(api_resource_list("apps", "v2").is_none());
    }

    /// The resource lists in kube-apiserver 1.34's order (its api/discovery fixtures), less what
    /// Keel does not serve (bindings, componentstatuses, podtemplates, the services
    /// proxy, ephemeralcontainers and resize subresources, volumeattributesclasses,
    /// resourceclaimtemplates, ingresses, ingressclasses, networkpolicies, networking.k8s.io/v1beta1).
    #[test]
    fn resource_lists_in_upstreams_order() {
        let names = |group: &str| -> Vec<String> {
            api_resource_list(group, "v1").unwrap().resources.into_iter().map(|r| r.name).collect()
        };
        assert_eq!(
            names(""),
            [
                "configmaps",
                "endpoints",
                "events",
                "limitranges",
                "namespaces",
                "namespaces/finalize",
                "namespaces/status",
                "nodes",
                "nodes/proxy",
                "nodes/status",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "persistentvolumes",
                "persistentvolumes/status",
                "pods",
                "pods/attach",
                "pods/binding",
                "pods/eviction",
                "pods/exec",
                "pods/log",
                "pods/portforward",
                "pods/proxy",
                "pods/status",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
                "secrets",
                "serviceaccounts",
                "serviceaccounts/token",
                "services",
                "services/status",
            ]
        );
        assert_eq!(
            names("storage.k8s.io"),
            [
                "csidrivers",
                "csinodes",
                "csistoragecapacities",
                "storageclasses",
                "volumeattachments",
                "volumeattachments/status"
            ]
        );
        assert_eq!(
            names("resource.k8s.io"),
            ["deviceclasses", "resourceclaims", "resourceclaims/status", "resourceslices"]
        );
        let core = api_resource_list("", "v1").unwrap();
        let scale = core.resources.iter().find(|r| r.name == "replicationcontrollers/scale").unwrap();
        assert_eq!(
            (scale.kind.as_str(), scale.group.as_deref(), scale.version.as_deref(), scale.namespaced),
            ("Scale", Some("autoscaling"), Some("v1"), true)
        );
        let json = serde_json::to_value(api_resource_list("resource.k8s.io", "v1").unwrap()).unwrap();
        assert_eq!(
            json["resources"][0],
            json!({"name": "deviceclasses", "singularName": "deviceclass", "namespaced": false, "kind": "DeviceClass",
                   "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]})
        );
        assert_eq!(names("networking.k8s.io"), ["ipaddresses", "servicecidrs", "servicecidrs/status"]);
        let json = serde_json::to_value(api_resource_list("networking.k8s.io", "v1").unwrap()).unwrap();
        assert_eq!(
            json["resources"][0],
            json!({"name": "ipaddresses", "singularName": "ipaddress", "namespaced": false, "kind": "IPAddress",
                   "shortNames": ["ip"],
                   "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]})
        );
        let groups = api_group_list();
        assert_eq!(groups.groups.last().map(|g| g.name.as_str()), Some("resource.k8s.io"));
        // kube-apiserver lists certificates.k8s.io after batch, then networking.k8s.io, policy.
        let order: Vec<&str> = groups.groups.iter().map(|g| g.name.as_str()).collect();
        let at = order.iter().position(|g| *g == "networking.k8s.io").unwrap();
        assert_eq!(order[at - 2..=at + 1], ["batch", "certificates.k8s.io", "networking.k8s.io", "policy"]);
        assert_eq!(
            names("certificates.k8s.io"),
            [
                "certificatesigningrequests",
                "certificatesigningrequests/approval",
                "certificatesigningrequests/status"
            ]
        );
        assert_eq!(
            api_group("resource.k8s.io").preferred_version.map(|v| v.group_version),
            Some("resource.k8s.io/v1".to_owned())
        );
        let aggregated = aggregated(false, "v2");
        let networking = aggregated["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "networking.k8s.io")
            .unwrap();
        assert_eq!(
            networking["versions"][0]["resources"][1],
            json!({"resource": "servicecidrs", "responseKind": {"group": "", "version": "", "kind": "ServiceCIDR"},
                   "scope": "Cluster", "singularResource": "servicecidr",
                   "subresources": [{"subresource": "status", "responseKind": {"group": "", "version": "", "kind": "ServiceCIDR"},
                                     "verbs": ["get", "patch", "update"]}],
                   "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]})
        );
        let dra = aggregated["items"].as_array().unwrap().last().unwrap();
        assert_eq!(dra["metadata"]["name"], "resource.k8s.io");
        let claims = &dra["versions"][0]["resources"][1];
        assert_eq!(
            (&claims["resource"], &claims["scope"], &claims["subresources"]),
            (
                &json!("resourceclaims"),
                &json!("Namespaced"),
                &json!([{"subresource": "status", "responseKind": {"group": "", "version": "", "kind": "ResourceClaim"},
                         "verbs": ["get", "patch", "update"]}])
            )
        );
    }

    #[test]
    fn groups_and_versions() {
        let groups = serde_json::to_value(api_group_list()).unwrap();
        assert_eq!(groups["kind"], "APIGroupList");
        // k8s-openapi also writes kind and apiVersion into each group; clients ignore them.
        let apps = &groups["groups"][0];
        assert_eq!(apps["name"], "apps");
        assert_eq!(apps["versions"], json!([{"groupVersion": "apps/v1", "version": "v1"}]));
        assert_eq!(apps["preferredVersion"], json!({"groupVersion": "apps/v1", "version": "v1"}));
        let api = serde_json::to_value(api_versions("10.0.0.1:6443")).unwrap();
        assert_eq!(api["versions"], json!(["v1"]));
        assert_eq!(api["serverAddressByClientCIDRs"][0]["serverAddress"], "10.0.0.1:6443");
        let scale = api_resource_list("apps", "v1").unwrap();
        let scale = scale.resources.iter().find(|r| r.name == "deployments/scale").unwrap();
        assert_eq!((scale.kind.as_str(), scale.group.as_deref()), ("Scale", Some("autoscaling")));
    }
}
