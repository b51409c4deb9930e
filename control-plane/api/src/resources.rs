//! The resources Keel serves, declared once: group, version, kind, names, scope, verbs, categories
//! and subresources as Kubernetes 1.34's kube-apiserver has them. Discovery, routing and kubectl's
//! short names all read this table; adding a resource is one declaration here plus its strategy.

/// Every verb of a collection-backed resource.
pub const ALL_VERBS: &[&str] =
    &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
/// Namespaces cannot be deleted as a collection.
const NO_COLLECTION: &[&str] = &["create", "delete", "get", "list", "patch", "update", "watch"];
const GET_PATCH_UPDATE: &[&str] = &["get", "patch", "update"];
const CREATE: &[&str] = &["create"];

/// A subresource (`pods/status`) and the object it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Subresource {
    pub name: &'static str,
    pub kind: &'static str,
    /// The group and version of `kind` when they differ from the resource's (`Scale` is
    /// autoscaling/v1, `Eviction` policy/v1); empty otherwise.
    pub group: &'static str,
    pub version: &'static str,
    pub verbs: &'static [&'static str],
}

impl Subresource {
    /// A connect subresource (pods' exec, attach, portforward and proxy, nodes' proxy): a stream
    /// or request relayed to the kubelet or the pod, whose kind names only its options, as
    /// upstream's `rest.Connecter` storages.
    pub fn is_connect(&self) -> bool {
        matches!(
            self.kind,
            "PodAttachOptions"
                | "PodExecOptions"
                | "PodPortForwardOptions"
                | "PodProxyOptions"
                | "NodeProxyOptions"
        )
    }
}

/// The verbs of a proxy subresource: every method it relays, as HTTP verbs map to API verbs.
const PROXY_VERBS: &[&str] = &["create", "delete", "get", "patch", "update"];

/// A connect subresource of pods, `create` (POST) and `get` (GET) as upstream serves them.
const fn connect(name: &'static str, kind: &'static str) -> Subresource {
    Subresource { name, kind, group: "", version: "", verbs: &["create", "get"] }
}

const fn status(kind: &'static str) -> Subresource {
    Subresource { name: "status", kind, group: "", version: "", verbs: GET_PATCH_UPDATE }
}

const SCALE: Subresource = Subresource {
    name: "scale",
    kind: "Scale",
    group: "autoscaling",
    version: "v1",
    verbs: GET_PATCH_UPDATE,
};

/// One served resource: a built-in one of [`RESOURCES`], or a custom resource a
/// CustomResourceDefinition serves ([`crate::custom`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Resource {
    /// `""` for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    /// The URL segment, and what errors name (`pods`).
    pub plural: &'static str,
    pub singular: &'static str,
    pub namespaced: bool,
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub verbs: &'static [&'static str],
    pub subresources: &'static [Subresource],
    /// Served for a CustomResourceDefinition ([`crate::custom`]): stored under its group.
    pub custom: bool,
}

impl Resource {
    /// `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The store key prefix of every object of this resource, as kube-apiserver lays out etcd:
    /// `/registry/<plural>/` with no group for built-in resources, and upstream's historical names for
    /// services, endpoints, nodes and replication controllers (`controllers`). events.k8s.io events
    /// share core events' keys, as upstream's do (one object, two API versions).
    pub fn key_prefix(&self) -> String {
        // Custom resources: `/registry/<group>/<plural>/`, as apiextensions-apiserver lays them out.
        if self.custom {
            return format!("/registry/{}/{}/", self.group, self.plural);
        }
        let plural = match (self.group, self.plural) {
            ("", "services") => "services/specs",
            ("", "endpoints") => "services/endpoints",
            ("", "nodes") => "minions",
            ("", "replicationcontrollers") => "controllers",
            ("apiextensions.k8s.io", "customresourcedefinitions") => {
                "apiextensions.k8s.io/customresourcedefinitions"
            }
            (_, plural) => plural,
        };
        format!("/registry/{plural}/")
    }

    /// The fields a fieldSelector may name for this resource, beyond `metadata.name` and
    /// `metadata.namespace` (upstream's per-resource GetAttrs / field label conversion funcs).
    pub fn selectable_fields(&self) -> &'static [&'static str] {
        if self.custom {
            return crate::custom::selectable_fields(self);
        }
        match (self.group, self.plural) {
            ("", "pods") => &[
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.podIPs",
                "status.nominatedNodeName",
            ],
            ("", "secrets") => &["type"],
            // upstream's field label conversion of events.k8s.io/v1 (its names, read from the
            // stored core Event: regarding.* is involvedObject.*, reportingController is
            // reportingComponent).
            ("events.k8s.io", "events") => &[
                "regarding.kind",
                "regarding.namespace",
                "regarding.name",
                "regarding.uid",
                "regarding.apiVersion",
                "regarding.resourceVersion",
                "regarding.fieldPath",
                "reason",
                "reportingController",
                "source",
                "type",
            ],
            ("", "events") => &[
                "involvedObject.kind",
                "involvedObject.namespace",
                "involvedObject.name",
                "involvedObject.uid",
                "involvedObject.apiVersion",
                "involvedObject.resourceVersion",
                "involvedObject.fieldPath",
                "reason",
                "reportingComponent",
                "source",
                "type",
            ],
            ("", "namespaces") => &["status.phase"],
            ("", "nodes") => &["spec.unschedulable"],
            ("", "persistentvolumeclaims") => &["spec.volumeName"],
            ("", "replicationcontrollers") => &["status.replicas"],
            ("", "services") => &["spec.clusterIP", "spec.type"],
            ("apps", "replicasets") => &["status.replicas"],
            ("batch", "jobs") => &["status.successful"],
            ("certificates.k8s.io", "certificatesigningrequests") => &["spec.signerName"],
            ("resource.k8s.io", "resourceslices") => &["spec.nodeName", "spec.driver"],
            _ => &[],
        }
    }

    /// Whether a fieldSelector may name `field` on this resource.
    pub fn is_selectable(&self, field: &str) -> bool {
        matches!(field, "metadata.name" | "metadata.namespace") || self.selectable_fields().contains(&field)
    }

    /// The subresource called `name`, if this resource has it.
    pub fn subresource(&self, name: &str) -> Option<&'static Subresource> {
        self.subresources.iter().find(|s| s.name == name)
    }
}

/// A declaration, with upstream's defaults: every verb, no short name, no category, no subresource.
const fn resource(
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    singular: &'static str,
) -> Resource {
    Resource {
        group,
        version: "v1",
        kind,
        plural,
        singular,
        namespaced: true,
        short_names: &[],
        categories: &[],
        verbs: ALL_VERBS,
        subresources: &[],
        custom: false,
    }
}

const fn cluster(mut r: Resource) -> Resource {
    r.namespaced = false;
    r
}

const fn short(mut r: Resource, names: &'static [&'static str]) -> Resource {
    r.short_names = names;
    r
}

const fn all(mut r: Resource) -> Resource {
    r.categories = &["all"];
    r
}

/// A review: only created, answered in the response.
const fn review(mut r: Resource) -> Resource {
    r.verbs = CREATE;
    r
}

const fn sub(mut r: Resource, subresources: &'static [Subresource]) -> Resource {
    r.subresources = subresources;
    r
}

/// Everything served, in kube-apiserver's discovery order: core first, then the groups as upstream
/// lists them; within a group version, resources by name (upstream's installer sorts them).
pub const RESOURCES: &[Resource] = &[
    // core/v1, in upstream's order: kube-apiserver sorts a group version's resources by name.
    short(resource("", "ConfigMap", "configmaps", "configmap"), &["cm"]),
    short(resource("", "Endpoints", "endpoints", "endpoints"), &["ep"]),
    short(resource("", "Event", "events", "event"), &["ev"]),
    short(resource("", "LimitRange", "limitranges", "limitrange"), &["limits"]),
    sub(
        short(
            cluster(Resource {
                verbs: NO_COLLECTION,
                ..resource("", "Namespace", "namespaces", "namespace")
            }),
            &["ns"],
        ),
        &[
            Subresource { name: "finalize", kind: "Namespace", group: "", version: "", verbs: &["update"] },
            status("Namespace"),
        ],
    ),
    sub(
        short(cluster(resource("", "Node", "nodes", "node")), &["no"]),
        &[
            Subresource {
                name: "proxy",
                kind: "NodeProxyOptions",
                group: "",
                version: "",
                verbs: PROXY_VERBS,
            },
            status("Node"),
        ],
    ),
    sub(
        short(
            resource("", "PersistentVolumeClaim", "persistentvolumeclaims", "persistentvolumeclaim"),
            &["pvc"],
        ),
        &[status("PersistentVolumeClaim")],
    ),
    sub(
        short(cluster(resource("", "PersistentVolume", "persistentvolumes", "persistentvolume")), &["pv"]),
        &[status("PersistentVolume")],
    ),
    sub(
        all(short(resource("", "Pod", "pods", "pod"), &["po"])),
        &[
            connect("attach", "PodAttachOptions"),
            Subresource { name: "binding", kind: "Binding", group: "", version: "", verbs: CREATE },
            Subresource { name: "eviction", kind: "Eviction", group: "policy", version: "v1", verbs: CREATE },
            connect("exec", "PodExecOptions"),
            Subresource { name: "log", kind: "Pod", group: "", version: "", verbs: &["get"] },
            connect("portforward", "PodPortForwardOptions"),
            Subresource {
                name: "proxy",
                kind: "PodProxyOptions",
                group: "",
                version: "",
                verbs: PROXY_VERBS,
            },
            status("Pod"),
        ],
    ),
    sub(
        all(short(
            resource("", "ReplicationController", "replicationcontrollers", "replicationcontroller"),
            &["rc"],
        )),
        &[SCALE, status("ReplicationController")],
    ),
    sub(
        short(resource("", "ResourceQuota", "resourcequotas", "resourcequota"), &["quota"]),
        &[status("ResourceQuota")],
    ),
    resource("", "Secret", "secrets", "secret"),
    sub(
        short(resource("", "ServiceAccount", "serviceaccounts", "serviceaccount"), &["sa"]),
        &[Subresource {
            name: "token",
            kind: "TokenRequest",
            group: "authentication.k8s.io",
            version: "v1",
            verbs: CREATE,
        }],
    ),
    sub(all(short(resource("", "Service", "services", "service"), &["svc"])), &[status("Service")]),
    // apps/v1
    sub(
        all(short(resource("apps", "DaemonSet", "daemonsets", "daemonset"), &["ds"])),
        &[status("DaemonSet")],
    ),
    sub(
        all(short(resource("apps", "Deployment", "deployments", "deployment"), &["deploy"])),
        &[SCALE, status("Deployment")],
    ),
    sub(
        all(short(resource("apps", "ReplicaSet", "replicasets", "replicaset"), &["rs"])),
        &[SCALE, status("ReplicaSet")],
    ),
    sub(
        all(short(resource("apps", "StatefulSet", "statefulsets", "statefulset"), &["sts"])),
        &[SCALE, status("StatefulSet")],
    ),
    // events.k8s.io/v1
    short(resource("events.k8s.io", "Event", "events", "event"), &["ev"]),
    // authentication.k8s.io/v1 and authorization.k8s.io/v1: reviews, created and answered, never
    // stored.
    review(cluster(resource(
        "authentication.k8s.io",
        "SelfSubjectReview",
        "selfsubjectreviews",
        "selfsubjectreview",
    ))),
    review(cluster(resource("authentication.k8s.io", "TokenReview", "tokenreviews", "tokenreview"))),
    review(resource(
        "authorization.k8s.io",
        "LocalSubjectAccessReview",
        "localsubjectaccessreviews",
        "localsubjectaccessreview",
    )),
    review(cluster(resource(
        "authorization.k8s.io",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        "selfsubjectaccessreview",
    ))),
    review(cluster(resource(
        "authorization.k8s.io",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        "selfsubjectrulesreview",
    ))),
    review(cluster(resource(
        "authorization.k8s.io",
        "SubjectAccessReview",
        "subjectaccessreviews",
        "subjectaccessreview",
    ))),
    // batch/v1
    sub(all(short(resource("batch", "CronJob", "cronjobs", "cronjob"), &["cj"])), &[status("CronJob")]),
    sub(all(resource("batch", "Job", "jobs", "job")), &[status("Job")]),
    // certificates.k8s.io/v1: the approval subresource carries only the Approved/Denied
    // conditions, status the certificate (upstream's csrApprovalStrategy and csrStatusStrategy).
    sub(
        short(
            cluster(resource(
                "certificates.k8s.io",
                "CertificateSigningRequest",
                "certificatesigningrequests",
                "certificatesigningrequest",
            )),
            &["csr"],
        ),
        &[
            Subresource {
                name: "approval",
                kind: "CertificateSigningRequest",
                group: "",
                version: "",
                verbs: GET_PATCH_UPDATE,
            },
            status("CertificateSigningRequest"),
        ],
    ),
    // networking.k8s.io/v1: the multi-CIDR Service allocator's objects (GA in 1.33), which
    // kube-proxy's informers list; served as data (keel-apiserver allocates from its own holds).
    short(cluster(resource("networking.k8s.io", "IPAddress", "ipaddresses", "ipaddress")), &["ip"]),
    sub(
        cluster(resource("networking.k8s.io", "ServiceCIDR", "servicecidrs", "servicecidr")),
        &[status("ServiceCIDR")],
    ),
    // policy/v1
    sub(
        short(
            resource("policy", "PodDisruptionBudget", "poddisruptionbudgets", "poddisruptionbudget"),
            &["pdb"],
        ),
        &[status("PodDisruptionBudget")],
    ),
    // rbac.authorization.k8s.io/v1
    cluster(resource(
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        "clusterrolebindings",
        "clusterrolebinding",
    )),
    cluster(resource("rbac.authorization.k8s.io", "ClusterRole", "clusterroles", "clusterrole")),
    resource("rbac.authorization.k8s.io", "RoleBinding", "rolebindings", "rolebinding"),
    resource("rbac.authorization.k8s.io", "Role", "roles", "role"),
    // storage.k8s.io/v1
    cluster(resource("storage.k8s.io", "CSIDriver", "csidrivers", "csidriver")),
    cluster(resource("storage.k8s.io", "CSINode", "csinodes", "csinode")),
    resource("storage.k8s.io", "CSIStorageCapacity", "csistoragecapacities", "csistoragecapacity"),
    short(cluster(resource("storage.k8s.io", "StorageClass", "storageclasses", "storageclass")), &["sc"]),
    sub(
        cluster(resource("storage.k8s.io", "VolumeAttachment", "volumeattachments", "volumeattachment")),
        &[status("VolumeAttachment")],
    ),
    // apiextensions.k8s.io/v1
    sub(
        Resource {
            categories: &["api-extensions"],
            ..short(
                cluster(resource(
                    "apiextensions.k8s.io",
                    "CustomResourceDefinition",
                    "customresourcedefinitions",
                    "customresourcedefinition",
                )),
                &["crd", "crds"],
            )
        },
        &[status("CustomResourceDefinition")],
    ),
    // scheduling.k8s.io/v1
    short(
        cluster(resource("scheduling.k8s.io", "PriorityClass", "priorityclasses", "priorityclass")),
        &["pc"],
    ),
    // coordination.k8s.io/v1
    resource("coordination.k8s.io", "Lease", "leases", "lease"),
    // node.k8s.io/v1
    cluster(resource("node.k8s.io", "RuntimeClass", "runtimeclasses", "runtimeclass")),
    // discovery.k8s.io/v1
    resource("discovery.k8s.io", "EndpointSlice", "endpointslices", "endpointslice"),
    // resource.k8s.io/v1 (dynamic resource allocation, GA in 1.34)
    cluster(resource("resource.k8s.io", "DeviceClass", "deviceclasses", "deviceclass")),
    sub(
        resource("resource.k8s.io", "ResourceClaim", "resourceclaims", "resourceclaim"),
        &[status("ResourceClaim")],
    ),
    cluster(resource("resource.k8s.io", "ResourceSlice", "resourceslices", "resourceslice")),
];

/// The groups served under /apis, in upstream's order (every built-in one at v1), then the groups
/// of custom resources.
pub fn groups() -> Vec<&'static str> {
    let mut groups: Vec<&'static str> = Vec::new();
    for resource in RESOURCES.iter().chain(crate::custom::resources()) {
        if !resource.group.is_empty() && !groups.contains(&resource.group) {
            groups.push(resource.group);
        }
    }
    groups
}

impl Resource {
    /// Whether this is one of the review APIs (TokenReview, SubjectAccessReview, ...): created to
    /// get an answer, never stored.
    pub fn is_review(&self) -> bool {
        matches!(self.group, "authentication.k8s.io" | "authorization.k8s.io")
    }
}

/// The resource served at `/api(s)/<group>/<version>/.../<plural>`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
        .or_else(|| crate::custom::find(group, version, plural))
}

/// The resources of one group version, in declaration order.
pub fn of_group_version<'a>(
    group: &'a str,
    version: &'a str,
) -> impl Iterator<Item = &'static Resource> + use<'a> {
    RESOURCES
        .iter()
        .chain(crate::custom::resources())
        .filter(move |r| r.group == group && r.version == version)
}

/// Every resource served now: the built-in ones, then the custom ones.
pub fn served() -> impl Iterator<Item = &'static Resource> {
    RESOURCES.iter().chain(crate::custom::resources())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn names_are_unique_per_group_version() {
        let mut seen = HashSet::new();
        for r in RESOURCES {
            assert!(seen.insert((r.group, r.version, r.plural)), "{} declared twice", r.plural);
            assert_eq!(r.plural.to_lowercase(), r.plural);
            assert!(r.singular.chars().all(|c| c.is_ascii_lowercase()), "{}", r.singular);
        }
    }

    #[test]
    fn lookups_and_keys() {
        let pods = find("", "v1", "pods").unwrap();
        assert_eq!((pods.kind, pods.namespaced, pods.short_names), ("Pod", true, &["po"][..]));
        assert_eq!(pods.key_prefix(), "/registry/pods/");
        assert_eq!(pods.subresource("binding").map(|s| s.kind), Some("Binding"));
        assert_eq!(pods.subresource("exec").map(|s| s.kind), Some("PodExecOptions"));
        assert!(pods.subresource("exec").is_some_and(Subresource::is_connect));
        assert!(!pods.subresource("log").is_some_and(Subresource::is_connect));
        assert!(pods.subresource("proxy").is_some_and(Subresource::is_connect));
        assert!(pods.subresource("ephemeralcontainers").is_none(), "only what Keel serves is declared");
        let deployments = find("apps", "v1", "deployments").unwrap();
        assert_eq!(deployments.api_version(), "apps/v1");
        assert_eq!(deployments.key_prefix(), "/registry/deployments/");
        assert_eq!(find("", "v1", "services").unwrap().key_prefix(), "/registry/services/specs/");
        assert_eq!(find("", "v1", "nodes").unwrap().key_prefix(), "/registry/minions/");
        assert_eq!(
            find("storage.k8s.io", "v1", "storageclasses").unwrap().key_prefix(),
            "/registry/storageclasses/"
        );
        assert_eq!(find("events.k8s.io", "v1", "events").unwrap().key_prefix(), "/registry/events/");
        assert!(find("", "v1", "deployments").is_none());
        assert_eq!(find("", "v1", "namespaces").unwrap().verbs, NO_COLLECTION);
    }

    #[test]
    fn group_order() {
        assert_eq!(
            groups(),
            [
                "apps",
                "events.k8s.io",
                "authentication.k8s.io",
                "authorization.k8s.io",
                "batch",
                "certificates.k8s.io",
                "networking.k8s.io",
                "policy",
                "rbac.authorization.k8s.io",
                "storage.k8s.io",
                "apiextensions.k8s.io",
                "scheduling.k8s.io",
                "coordination.k8s.io",
                "node.k8s.io",
                "discovery.k8s.io",
                "resource.k8s.io"
            ]
        );
        assert_eq!(of_group_version("apps", "v1").count(), 4);
    }

    #[test]
    fn each_group_version_is_sorted_by_name() {
        for group in std::iter::once("").chain(groups()) {
            let names: Vec<&str> = of_group_version(group, "v1").map(|r| r.plural).collect();
            let mut sorted = names.clone();
            sorted.sort_unstable();
            assert_eq!(names, sorted, "{group:?}");
        }
    }

    /// What kube-apiserver 1.34's discovery says of the resources the scheduler's informers list
    /// (api/discovery/*.json of k8s.io/kubernetes v1.34.12).
    #[test]
    fn scheduler_resources_as_upstream_declares_them() {
        let rc = find("", "v1", "replicationcontrollers").unwrap();
        assert_eq!(
            (rc.kind, rc.singular, rc.namespaced),
            ("ReplicationController", "replicationcontroller", true)
        );
        assert_eq!((rc.short_names, rc.categories, rc.verbs), (&["rc"][..], &["all"][..], ALL_VERBS));
        let subs: Vec<(&str, &str, &str)> =
            rc.subresources.iter().map(|s| (s.name, s.kind, s.group)).collect();
        assert_eq!(subs, [("scale", "Scale", "autoscaling"), ("status", "ReplicationController", "")]);
        assert_eq!(rc.key_prefix(), "/registry/controllers/");
        assert!(rc.is_selectable("status.replicas"));
        let storage: Vec<(&str, bool, Vec<&str>)> = of_group_version("storage.k8s.io", "v1")
            .map(|r| (r.plural, r.namespaced, r.subresources.iter().map(|s| s.name).collect()))
            .collect();
        assert_eq!(
            storage,
            [
                ("csidrivers", false, vec![]),
                ("csinodes", false, vec![]),
                ("csistoragecapacities", true, vec![]),
                ("storageclasses", false, vec![]),
                ("volumeattachments", false, vec!["status"]),
            ]
        );
        let dra: Vec<(&str, &str, bool, Vec<&str>)> = of_group_version("resource.k8s.io", "v1")
            .map(|r| (r.plural, r.singular, r.namespaced, r.subresources.iter().map(|s| s.name).collect()))
            .collect();
        assert_eq!(
            dra,
            [
                ("deviceclasses", "deviceclass", false, vec![]),
                ("resourceclaims", "resourceclaim", true, vec!["status"]),
                ("resourceslices", "resourceslice", false, vec![]),
            ]
        );
        for r in of_group_version("storage.k8s.io", "v1").chain(of_group_version("resource.k8s.io", "v1")) {
            assert_eq!(r.verbs, ALL_VERBS, "{}", r.plural);
            assert!(r.categories.is_empty(), "{}", r.plural);
            assert_eq!(r.key_prefix(), format!("/registry/{}/", r.plural));
        }
        let slices = find("resource.k8s.io", "v1", "resourceslices").unwrap();
        assert!(slices.is_selectable("spec.nodeName") && slices.is_selectable("spec.driver"));
        assert!(!find("resource.k8s.io", "v1", "resourceclaims").unwrap().is_selectable("spec.devices"));
    }

    /// networking.k8s.io/v1 as kube-apiserver 1.34 declares the two resources kube-proxy's
    /// ServiceCIDR informer and the allocator use (ingresses, ingressclasses and network policies
    /// are not served).
    #[test]
    fn networking_resources_as_upstream_declares_them() {
        let networking: Vec<String> = of_group_version("networking.k8s.io", "v1")
            .map(|r| {
                let subresources: Vec<&str> = r.subresources.iter().map(|s| s.name).collect();
                format!(
                    "{} {} {} {} {:?} {subresources:?}",
                    r.plural, r.singular, r.kind, r.namespaced, r.short_names
                )
            })
            .collect();
        assert_eq!(
            networking,
            [
                r#"ipaddresses ipaddress IPAddress false ["ip"] []"#,
                r#"servicecidrs servicecidr ServiceCIDR false [] ["status"]"#,
            ]
        );
        for r in of_group_version("networking.k8s.io", "v1") {
            assert_eq!((r.verbs, r.categories), (ALL_VERBS, &[][..]), "{}", r.plural);
            assert_eq!(r.key_prefix(), format!("/registry/{}/", r.plural));
        }
    }
}
