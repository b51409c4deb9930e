//! The cluster-wide bootstrap ClusterRoles: users' roles (admin, edit, view and their parts), the
//! discovery and health roles, and the roles of the components and add-ons (nodes, kube-proxy,
//! kube-scheduler, kube-controller-manager, kube-dns, CSR approval).

use super::*;

/// Label of the roles gathered into `admin`.
const TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
/// Label of the roles gathered into `edit`.
const TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
/// Label of the roles gathered into `view`.
const TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

/// The built-in certificate signers, as CSRs name them.
const LEGACY_UNKNOWN_SIGNER: &str = "kubernetes.io/legacy-unknown";
const KUBELET_SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client";
const CLIENT_KUBELET_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// The cluster-wide roles, in upstream's order.
pub(super) fn all() -> Vec<Role> {
    vec![
        cluster_admin(),
        discovery(),
        monitoring(),
        basic_user(),
        public_info_viewer(),
        Role::aggregated("admin", TO_ADMIN),
        Role::aggregated("edit", TO_EDIT).labelled(TO_ADMIN),
        Role::aggregated("view", TO_VIEW).labelled(TO_EDIT),
        aggregate_to_admin(),
        aggregate_to_edit(),
        aggregate_to_view(),
        heapster(),
        node(),
        node_problem_detector(),
        node_bootstrapper(),
        auth_delegator(),
        kube_aggregator(),
        kube_controller_manager(),
        kube_dns(),
        persistent_volume_provisioner(),
        csr_nodeclient(),
        csr_selfnodeclient(),
        volume_scheduler(),
        approver("system:certificates.k8s.io:legacy-unknown-approver", LEGACY_UNKNOWN_SIGNER),
        approver("system:certificates.k8s.io:kubelet-serving-approver", KUBELET_SERVING_SIGNER),
        approver("system:certificates.k8s.io:kube-apiserver-client-approver", CLIENT_SIGNER),
        approver("system:certificates.k8s.io:kube-apiserver-client-kubelet-approver", CLIENT_KUBELET_SIGNER),
        service_account_issuer_discovery(),
        kubelet_api_admin(),
        node_proxier(),
        kube_scheduler(),
    ]
}

/// `cluster-admin`: the root role, anything on every resource and every non-resource URL
/// (bound to `system:masters`).
fn cluster_admin() -> Role {
    Role::new("cluster-admin", vec![rule(&["*"]).groups(&["*"]).resources(&["*"]), rule(&["*"]).urls(&["*"])])
}

/// `system:discovery`: enough to tell whether the server is up and to discover its API versions
/// for negotiation (bound to every authenticated user).
fn discovery() -> Role {
    let urls = &[
        "/livez",
        "/readyz",
        "/healthz",
        "/version",
        "/version/",
        "/openapi",
        "/openapi/*",
        "/api",
        "/api/*",
        "/apis",
        "/apis/*",
    ];
    Role::new("system:discovery", vec![rule(&["get"]).urls(urls)])
}

/// `system:monitoring`: the metrics and health endpoints, each health check on its own too (those
/// can say more about the cluster), and the kubelets' metrics.
fn monitoring() -> Role {
    let urls = &[
        "/metrics",
        "/metrics/slis",
        "/livez",
        "/readyz",
        "/healthz",
        "/livez/*",
        "/readyz/*",
        "/healthz/*",
    ];
    Role::new(
        "system:monitoring",
        vec![rule(&["get"]).urls(urls), rule(&["get"]).groups(&[CORE]).resources(&["nodes/metrics"])],
    )
}

/// `system:basic-user`: what any user may learn about themselves (who am I, what may I do).
fn basic_user() -> Role {
    Role::new(
        "system:basic-user",
        vec![
            rule(&["create"])
                .groups(&[AUTHORIZATION])
                .resources(&["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
            rule(&["create"]).groups(&[AUTHENTICATION]).resources(&["selfsubjectreviews"]),
        ],
    )
}

/// `system:public-info-viewer`: the insensitive cluster information, health and version (also for
/// unauthenticated clients).
fn public_info_viewer() -> Role {
    Role::new(
        "system:public-info-viewer",
        vec![rule(&["get"]).urls(&["/livez", "/readyz", "/healthz", "/version", "/version/"])],
    )
}

/// `system:aggregate-to-admin`: what `admin` has beyond `edit`: granting roles inside a namespace.
fn aggregate_to_admin() -> Role {
    Role::new(
        "system:aggregate-to-admin",
        vec![
            rule(&["create"]).groups(&[AUTHORIZATION]).resources(&["localsubjectaccessreviews"]),
            rule(READ_WRITE).groups(&[RBAC]).resources(&["roles", "rolebindings"]),
        ],
    )
    .labelled(TO_ADMIN)
}

/// `system:aggregate-to-edit`: what `edit` has beyond `view`: every user-level write in a namespace,
/// and reading the escalating resources (secrets, exec, attach, proxies); not `/status`, quotas or
/// limits, which are the system's.
fn aggregate_to_edit() -> Role {
    let mut rules = vec![
        rule(READ).groups(&[CORE]).resources(&[
            "pods/attach",
            "pods/proxy",
            "pods/exec",
            "pods/portforward",
            "secrets",
            "services/proxy",
        ]),
        rule(&["impersonate"]).groups(&[CORE]).resources(&["serviceaccounts"]),
        rule(WRITE).groups(&[CORE]).resources(&[
            "pods",
            "pods/attach",
            "pods/proxy",
            "pods/exec",
            "pods/portforward",
        ]),
        rule(&["create"]).groups(&[CORE]).resources(&["pods/eviction"]),
        rule(WRITE).groups(&[CORE]).resources(&[
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "serviceaccounts",
            "services",
            "services/proxy",
            "persistentvolumeclaims",
            "configmaps",
            "secrets",
            "events",
        ]),
        rule(&["create"]).groups(&[CORE]).resources(&["serviceaccounts/token"]),
        rule(WRITE).groups(&[APPS]).resources(&[
            "statefulsets",
            "statefulsets/scale",
            "daemonsets",
            "deployments",
            "deployments/scale",
            "deployments/rollback",
            "replicasets",
            "replicasets/scale",
        ]),
        rule(WRITE).groups(&[AUTOSCALING]).resources(&["horizontalpodautoscalers"]),
        rule(WRITE).groups(&[BATCH]).resources(&["jobs", "cronjobs"]),
        rule(WRITE).groups(&[EXTENSIONS]).resources(&[
            "daemonsets",
            "deployments",
            "deployments/scale",
            "deployments/rollback",
            "ingresses",
            "replicasets",
            "replicasets/scale",
            "replicationcontrollers/scale",
            "networkpolicies",
        ]),
        rule(WRITE).groups(&[POLICY]).resources(&["poddisruptionbudgets"]),
        rule(WRITE).groups(&[NETWORKING]).resources(&["networkpolicies", "ingresses"]),
        rule(READ_WRITE).groups(&[COORDINATION]).resources(&["leases"]),
    ];
    // DynamicResourceAllocation (GA, on).
    rules.push(rule(WRITE).groups(&[RESOURCE]).resources(&["resourceclaims", "resourceclaimtemplates"]));
    Role::new("system:aggregate-to-edit", rules).labelled(TO_EDIT)
}

/// `system:aggregate-to-view`: read-only access to the non-escalating resources of a namespace
/// (no secrets); reading `namespaces` at namespace scope shows a user which namespaces they see.
fn aggregate_to_view() -> Role {
    let mut rules = vec![
        rule(READ).groups(&[CORE]).resources(&[
            "pods",
            "replicationcontrollers",
            "replicationcontrollers/scale",
            "serviceaccounts",
            "services",
            "services/status",
            "endpoints",
            "persistentvolumeclaims",
            "persistentvolumeclaims/status",
            "configmaps",
        ]),
        rule(READ).groups(&[CORE]).resources(&[
            "limitranges",
            "resourcequotas",
            "bindings",
            "events",
            "pods/status",
            "resourcequotas/status",
            "namespaces/status",
            "replicationcontrollers/status",
            "pods/log",
        ]),
        rule(READ).groups(&[CORE]).resources(&["namespaces"]),
        rule(READ).groups(&[DISCOVERY]).resources(&["endpointslices"]),
        rule(READ).groups(&[APPS]).resources(&[
            "controllerrevisions",
            "statefulsets",
            "statefulsets/status",
            "statefulsets/scale",
            "daemonsets",
            "daemonsets/status",
            "deployments",
            "deployments/status",
            "deployments/scale",
            "replicasets",
            "replicasets/status",
            "replicasets/scale",
        ]),
        rule(READ)
            .groups(&[AUTOSCALING])
            .resources(&["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
        rule(READ).groups(&[BATCH]).resources(&["jobs", "cronjobs", "cronjobs/status", "jobs/status"]),
        rule(READ).groups(&[EXTENSIONS]).resources(&[
            "daemonsets",
            "daemonsets/status",
            "deployments",
            "deployments/scale",
            "deployments/status",
            "ingresses",
            "ingresses/status",
            "replicasets",
            "replicasets/scale",
            "replicasets/status",
            "replicationcontrollers/scale",
            "networkpolicies",
        ]),
        rule(READ).groups(&[POLICY]).resources(&["poddisruptionbudgets", "poddisruptionbudgets/status"]),
        rule(READ).groups(&[NETWORKING]).resources(&["networkpolicies", "ingresses", "ingresses/status"]),
    ];
    // DynamicResourceAllocation (GA, on).
    rules.push(rule(READ).groups(&[RESOURCE]).resources(&[
        "resourceclaims",
        "resourceclaims/status",
        "resourceclaimtemplates",
    ]));
    Role::new("system:aggregate-to-view", rules).labelled(TO_VIEW)
}

/// `system:heapster`: what the (retired) heapster add-on read back from the API server.
fn heapster() -> Role {
    Role::new(
        "system:heapster",
        vec![
            rule(READ).groups(&[CORE]).resources(&["events", "pods", "nodes", "namespaces"]),
            rule(READ).groups(&[EXTENSIONS]).resources(&["deployments"]),
        ],
    )
}

/// `system:node`: what a kubelet needs to run its pods. The Node authorizer, not this role, grants
/// it to nodes (the binding has no subjects), and the NodeRestriction admission plugin narrows the
/// writes to the node's own objects.
fn node() -> Role {
    let mut rules = vec![
        // Checking API access; these creates change nothing.
        rule(&["create"]).groups(&[AUTHENTICATION]).resources(&["tokenreviews"]),
        rule(&["create"])
            .groups(&[AUTHORIZATION])
            .resources(&["subjectaccessreviews", "localsubjectaccessreviews"]),
        // Service environment variables of pods.
        rule(READ).groups(&[CORE]).resources(&["services"]),
        // Registering its Node and reporting its status.
        rule(&["create", "get", "list", "watch"]).groups(&[CORE]).resources(&["nodes"]),
        rule(&["update", "patch"]).groups(&[CORE]).resources(&["nodes/status"]),
        rule(&["update", "patch"]).groups(&[CORE]).resources(&["nodes"]),
        rule(&["create", "update", "patch"]).groups(&[CORE]).resources(&["events"]),
        // Its pods, mirror pods, their status and evictions.
        rule(READ).groups(&[CORE]).resources(&["pods"]),
        rule(&["create", "delete"]).groups(&[CORE]).resources(&["pods"]),
        rule(&["update", "patch"]).groups(&[CORE]).resources(&["pods/status"]),
        rule(&["create"]).groups(&[CORE]).resources(&["pods/eviction"]),
        // What its pods mount and reference.
        rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["secrets", "configmaps"]),
        rule(&["get"]).groups(&[CORE]).resources(&["persistentvolumeclaims", "persistentvolumes"]),
        rule(&["get"]).groups(&[CORE]).resources(&["endpoints"]),
        // Rotating its own client certificate.
        rule(&["create", "get", "list", "watch"])
            .groups(&[CERTIFICATES])
            .resources(&["certificatesigningrequests"]),
        // Its heartbeat lease.
        rule(&["get", "create", "update", "patch", "delete"]).groups(&[COORDINATION]).resources(&["leases"]),
        rule(&["get"]).groups(&[STORAGE]).resources(&["volumeattachments"]),
        // Tokens of the service accounts its pods run as.
        rule(&["create"]).groups(&[CORE]).resources(&["serviceaccounts/token"]),
        rule(&["get", "update", "patch"]).groups(&[CORE]).resources(&["persistentvolumeclaims/status"]),
        // CSI drivers and its CSINode.
        rule(&["get", "watch", "list"]).groups(&[STORAGE]).resources(&["csidrivers"]),
        rule(&["get", "create", "update", "patch", "delete"]).groups(&[STORAGE]).resources(&["csinodes"]),
        rule(&["get", "list", "watch"]).groups(&["node.k8s.io"]).resources(&["runtimeclasses"]),
    ];
    // DynamicResourceAllocation (GA, on): its pods' claims, and cleaning up its resource slices.
    rules.push(rule(&["get"]).groups(&[RESOURCE]).resources(&["resourceclaims"]));
    rules.push(rule(&["deletecollection"]).groups(&[RESOURCE]).resources(&["resourceslices"]));
    // KubeletServiceAccountTokenForCredentialProviders (beta, on): service accounts of its pods, for
    // image credential providers.
    rules.push(rule(&["get"]).groups(&[CORE]).resources(&["serviceaccounts"]));
    Role::new("system:node", rules)
}

/// `system:node-problem-detector`: the node-problem-detector add-on reports node conditions and
/// events (not bound by default: where it runs varies).
fn node_problem_detector() -> Role {
    Role::new(
        "system:node-problem-detector",
        vec![
            rule(&["get"]).groups(&[CORE]).resources(&["nodes"]),
            rule(&["patch"]).groups(&[CORE]).resources(&["nodes/status"]),
            events(),
        ],
    )
}

/// `system:node-bootstrapper`: a joining kubelet requests its first client certificate and waits
/// for it to be signed.
fn node_bootstrapper() -> Role {
    Role::new(
        "system:node-bootstrapper",
        vec![
            rule(&["create", "get", "list", "watch"])
                .groups(&[CERTIFICATES])
                .resources(&["certificatesigningrequests"]),
        ],
    )
}

/// `system:auth-delegator`: delegating authentication and authorization to the API server
/// (TokenReview, SubjectAccessReview), as extension API servers and kubelets do.
fn auth_delegator() -> Role {
    Role::new(
        "system:auth-delegator",
        vec![
            rule(&["create"]).groups(&[AUTHENTICATION]).resources(&["tokenreviews"]),
            rule(&["create"]).groups(&[AUTHORIZATION]).resources(&["subjectaccessreviews"]),
        ],
    )
}

/// `system:kube-aggregator`: the aggregator sees every service and its endpoints, to know whether
/// the APIServices it proxies to exist.
fn kube_aggregator() -> Role {
    Role::new(
        "system:kube-aggregator",
        vec![rule(READ).groups(&[CORE]).resources(&["services", "endpoints"])],
    )
}

/// `system:kube-controller-manager`: kube-controller-manager itself, before its controllers run
/// with their own service accounts: leader election, the shared informers (list and watch of
/// everything), and the service accounts, tokens and secrets it makes for its controllers.
fn kube_controller_manager() -> Role {
    Role::new(
        "system:kube-controller-manager",
        vec![
            events(),
            rule(&["create"]).groups(&[COORDINATION]).resources(&["leases"]),
            rule(&["get", "update"])
                .groups(&[COORDINATION])
                .resources(&["leases"])
                .names(&["kube-controller-manager"]),
            rule(&["create"]).groups(&[CORE]).resources(&["secrets", "serviceaccounts"]),
            rule(&["delete"]).groups(&[CORE]).resources(&["secrets"]),
            rule(&["get"]).groups(&[CORE]).resources(&[
                "namespaces",
                "secrets",
                "serviceaccounts",
                "configmaps",
            ]),
            rule(&["update"]).groups(&[CORE]).resources(&["secrets", "serviceaccounts"]),
            rule(&["create"]).groups(&[AUTHENTICATION]).resources(&["tokenreviews"]),
            rule(&["create"]).groups(&[AUTHORIZATION]).resources(&["subjectaccessreviews"]),
            rule(&["list", "watch"]).groups(&["*"]).resources(&["*"]),
            rule(&["create"]).groups(&[CORE]).resources(&["serviceaccounts/token"]),
        ],
    )
}

/// `system:kube-dns`: the cluster DNS watches services and endpoints to answer queries.
fn kube_dns() -> Role {
    Role::new(
        "system:kube-dns",
        vec![rule(&["list", "watch"]).groups(&[CORE]).resources(&["endpoints", "services"])],
    )
}

/// `system:persistent-volume-provisioner`: an external provisioner makes and deletes volumes for
/// claims (update on claims sets its lock annotations) and watches the events of its work.
fn persistent_volume_provisioner() -> Role {
    Role::new(
        "system:persistent-volume-provisioner",
        vec![
            rule(&["get", "list", "watch", "create", "delete"])
                .groups(&[CORE])
                .resources(&["persistentvolumes"]),
            rule(&["get", "list", "watch", "update"]).groups(&[CORE]).resources(&["persistentvolumeclaims"]),
            rule(READ).groups(&[STORAGE]).resources(&["storageclasses"]),
            rule(&["watch"]).groups(&[CORE]).resources(&["events"]),
            events(),
        ],
    )
}

/// `system:certificates.k8s.io:certificatesigningrequests:nodeclient`: whoever holds it gets node
/// client CSRs auto-approved (bootstrap tokens).
fn csr_nodeclient() -> Role {
    Role::new(
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        vec![rule(&["create"]).groups(&[CERTIFICATES]).resources(&["certificatesigningrequests/nodeclient"])],
    )
}

/// `system:certificates.k8s.io:certificatesigningrequests:selfnodeclient`: a node's CSR renewing its
/// own client certificate is auto-approved.
fn csr_selfnodeclient() -> Role {
    Role::new(
        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        vec![
            rule(&["create"])
                .groups(&[CERTIFICATES])
                .resources(&["certificatesigningrequests/selfnodeclient"]),
        ],
    )
}

/// `system:volume-scheduler`: the scheduler's volume binding (claims to volumes, storage classes).
fn volume_scheduler() -> Role {
    Role::new(
        "system:volume-scheduler",
        vec![
            rule(READ_UPDATE).groups(&[CORE]).resources(&["persistentvolumes"]),
            rule(READ).groups(&[STORAGE]).resources(&["storageclasses"]),
            rule(READ_UPDATE).groups(&[CORE]).resources(&["persistentvolumeclaims"]),
        ],
    )
}

/// `system:certificates.k8s.io:<signer>-approver`: approving CSRs for one built-in signer.
fn approver(name: &'static str, signer: &'static str) -> Role {
    Role::new(name, vec![rule(&["approve"]).groups(&[CERTIFICATES]).resources(&["signers"]).names(&[signer])])
}

/// `system:service-account-issuer-discovery`: the OIDC discovery document and keys of the
/// service-account issuer (with trailing slashes too, for clients generated from older OpenAPI).
fn service_account_issuer_discovery() -> Role {
    let urls = &[
        "/.well-known/openid-configuration",
        "/.well-known/openid-configuration/",
        "/openid/v1/jwks",
        "/openid/v1/jwks/",
    ];
    Role::new("system:service-account-issuer-discovery", vec![rule(&["get"]).urls(urls)])
}

/// `system:kubelet-api-admin`: full access to the kubelet API (what kube-apiserver needs for logs,
/// exec and port-forward), and reading Nodes.
fn kubelet_api_admin() -> Role {
    let mut rules = vec![
        rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["nodes"]),
        rule(&["proxy"]).groups(&[CORE]).resources(&["nodes"]),
        rule(&["*"]).groups(&[CORE]).resources(&["nodes/proxy", "nodes/metrics", "nodes/stats", "nodes/log"]),
    ];
    // KubeletFineGrainedAuthz (beta, on): the kubelet's finer-grained subresources.
    rules.push(rule(&["*"]).groups(&[CORE]).resources(&["nodes/pods", "nodes/healthz", "nodes/configz"]));
    Role::new("system:kubelet-api-admin", rules)
}

/// `system:node-proxier`: kube-proxy watches services, endpoints, slices and service CIDRs, reads
/// Nodes, and reports events.
fn node_proxier() -> Role {
    let mut rules = vec![
        rule(&["list", "watch"]).groups(&[CORE]).resources(&["services", "endpoints"]),
        rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["nodes"]),
        events(),
    ];
    // MultiCIDRServiceAllocator (GA, on).
    rules.push(rule(&["list", "watch"]).groups(&[NETWORKING]).resources(&["servicecidrs"]));
    rules.push(rule(&["list", "watch"]).groups(&[DISCOVERY]).resources(&["endpointslices"]));
    Role::new("system:node-proxier", rules)
}

/// `system:kube-scheduler`: kube-scheduler's leader election, the objects it schedules by, binding
/// pods to nodes, preemption (pod delete, status), and dynamic resource allocation.
fn kube_scheduler() -> Role {
    let mut rules = vec![
        events(),
        rule(&["create"]).groups(&[COORDINATION]).resources(&["leases"]),
        rule(&["get", "update", "list", "watch"])
            .groups(&[COORDINATION])
            .resources(&["leases"])
            .names(&["kube-scheduler"]),
        rule(READ_WRITE).groups(&[COORDINATION]).resources(&["leasecandidates"]),
        rule(READ).groups(&[CORE]).resources(&["nodes"]),
        rule(&["get", "list", "watch", "delete"]).groups(&[CORE]).resources(&["pods"]),
        rule(&["create"]).groups(&[CORE]).resources(&["pods/binding", "bindings"]),
        rule(&["patch", "update"]).groups(&[CORE]).resources(&["pods/status"]),
        // What selects pods, for spreading.
        rule(READ).groups(&[CORE]).resources(&["services", "replicationcontrollers"]),
        rule(READ).groups(&[APPS, EXTENSIONS]).resources(&["replicasets"]),
        rule(READ).groups(&[APPS]).resources(&["statefulsets"]),
        // What pods use or what applies to them.
        rule(READ).groups(&[POLICY]).resources(&["poddisruptionbudgets"]),
        rule(READ).groups(&[CORE]).resources(&["persistentvolumeclaims", "persistentvolumes"]),
        rule(&["create"]).groups(&[AUTHENTICATION]).resources(&["tokenreviews"]),
        rule(&["create"]).groups(&[AUTHORIZATION]).resources(&["subjectaccessreviews"]),
        // Volume limits.
        rule(READ).groups(&[STORAGE]).resources(&["csinodes"]),
        rule(&["get", "list", "watch"]).groups(&[STORAGE]).resources(&["volumeattachments"]),
        // Namespace selectors of pod affinity.
        rule(READ).groups(&[CORE]).resources(&["namespaces"]),
        rule(READ).groups(&[STORAGE]).resources(&["csidrivers"]),
        rule(READ).groups(&[STORAGE]).resources(&["csistoragecapacities"]),
    ];
    // DynamicResourceAllocation (GA, on); DRAExtendedResource and DRADeviceTaints are off.
    rules.extend([
        rule(READ).groups(&[RESOURCE]).resources(&["deviceclasses"]),
        rule(READ_UPDATE).groups(&[RESOURCE]).resources(&["resourceclaims"]),
        rule(READ_UPDATE).groups(&[RESOURCE]).resources(&["resourceclaims/status"]),
        rule(&["update"]).groups(&[CORE]).resources(&["pods/finalizers"]),
        rule(READ).groups(&[RESOURCE]).resources(&["resourceslices"]),
    ]);
    Role::new("system:kube-scheduler", rules)
}
