//! The roles of kube-controller-manager's controllers, `system:controller:<name>`, each bound to the
//! ServiceAccount `kube-system/<name>` the controller runs as (with `--use-service-account-credentials`).

use super::*;

/// The controllers' roles, in upstream's order.
pub(super) fn all() -> Vec<Role> {
    vec![
        attachdetach(),
        clusterrole_aggregation(),
        cronjob(),
        daemon_set(),
        deployment(),
        disruption(),
        endpoint(),
        endpointslice(),
        endpointslicemirroring(),
        expand(),
        ephemeral_volume(),
        resource_claim(),
        generic_garbage_collector(),
        horizontal_pod_autoscaler(),
        job(),
        namespace(),
        node(),
        persistent_volume_binder(),
        pod_garbage_collector(),
        replicaset(),
        replication(),
        resourcequota(),
        route(),
        service_account(),
        service(),
        service_cidrs(),
        statefulset(),
        ttl(),
        certificate(),
        pvc_protection(),
        pv_protection(),
        volumeattributesclass_protection(),
        ttl_after_finished(),
        root_ca_cert_publisher(),
        validatingadmissionpolicy_status(),
        legacy_service_account_token_cleaner(),
        selinux_warning(),
    ]
}

/// attachdetach-controller: attaches and detaches the volumes of scheduled pods (VolumeAttachments
/// for CSI, `volumesAttached` in Node status).
fn attachdetach() -> Role {
    Role::new(
        "system:controller:attachdetach-controller",
        vec![
            rule(&["list", "watch"])
                .groups(&[CORE])
                .resources(&["persistentvolumes", "persistentvolumeclaims"]),
            rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["nodes"]),
            rule(&["patch", "update"]).groups(&[CORE]).resources(&["nodes/status"]),
            rule(&["list", "watch"]).groups(&[CORE]).resources(&["pods"]),
            events(),
            rule(&["get", "create", "delete", "list", "watch"])
                .groups(&[STORAGE])
                .resources(&["volumeattachments"]),
            rule(&["get", "watch", "list"]).groups(&[STORAGE]).resources(&["csidrivers"]),
            rule(&["get", "watch", "list"]).groups(&[STORAGE]).resources(&["csinodes"]),
        ],
    )
}

/// clusterrole-aggregation-controller: fills the rules of aggregated ClusterRoles (admin, edit,
/// view); it may escalate, since it copies any rule.
fn clusterrole_aggregation() -> Role {
    Role::new(
        "system:controller:clusterrole-aggregation-controller",
        vec![
            rule(&["escalate", "get", "list", "watch", "update", "patch"])
                .groups(&[RBAC])
                .resources(&["clusterroles"]),
        ],
    )
}

/// cronjob-controller: starts Jobs on schedule and cleans up finished ones.
fn cronjob() -> Role {
    Role::new(
        "system:controller:cronjob-controller",
        vec![
            rule(&["get", "list", "watch", "update"]).groups(&[BATCH]).resources(&["cronjobs"]),
            rule(&["get", "list", "watch", "create", "update", "delete", "patch"])
                .groups(&[BATCH])
                .resources(&["jobs"]),
            rule(&["update"]).groups(&[BATCH]).resources(&["cronjobs/status"]),
            rule(&["update"]).groups(&[BATCH]).resources(&["cronjobs/finalizers"]),
            rule(&["list", "watch", "delete"]).groups(&[CORE]).resources(&["pods"]),
            events(),
        ],
    )
}

/// daemon-set-controller: runs one pod per eligible node and keeps the history (ControllerRevisions).
fn daemon_set() -> Role {
    Role::new(
        "system:controller:daemon-set-controller",
        vec![
            rule(&["get", "list", "watch"]).groups(&[EXTENSIONS, APPS]).resources(&["daemonsets"]),
            rule(&["update"]).groups(&[EXTENSIONS, APPS]).resources(&["daemonsets/status"]),
            rule(&["update"]).groups(&[EXTENSIONS, APPS]).resources(&["daemonsets/finalizers"]),
            rule(&["list", "watch"]).groups(&[CORE]).resources(&["nodes"]),
            rule(&["list", "watch", "create", "delete", "patch"]).groups(&[CORE]).resources(&["pods"]),
            rule(&["create"]).groups(&[CORE]).resources(&["pods/binding"]),
            rule(&["get", "list", "watch", "create", "delete", "update", "patch"])
                .groups(&[APPS])
                .resources(&["controllerrevisions"]),
            events(),
        ],
    )
}

/// deployment-controller: rolls Deployments out through ReplicaSets.
fn deployment() -> Role {
    Role::new(
        "system:controller:deployment-controller",
        vec![
            rule(&["get", "list", "watch", "update"]).groups(&[EXTENSIONS, APPS]).resources(&["deployments"]),
            rule(&["update"]).groups(&[EXTENSIONS, APPS]).resources(&["deployments/status"]),
            rule(&["update"]).groups(&[EXTENSIONS, APPS]).resources(&["deployments/finalizers"]),
            rule(&["get", "list", "watch", "create", "update", "patch", "delete"])
                .groups(&[APPS, EXTENSIONS])
                .resources(&["replicasets"]),
            // update: kubernetes/kubernetes#36897.
            rule(&["get", "list", "watch", "update"]).groups(&[CORE]).resources(&["pods"]),
            events(),
        ],
    )
}

/// disruption-controller: keeps PodDisruptionBudget status (how many pods may go) from the pods'
/// owners and their scale.
fn disruption() -> Role {
    Role::new(
        "system:controller:disruption-controller",
        vec![
            rule(&["get", "list", "watch"]).groups(&[EXTENSIONS, APPS]).resources(&["deployments"]),
            rule(&["get", "list", "watch"]).groups(&[APPS, EXTENSIONS]).resources(&["replicasets"]),
            rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["replicationcontrollers"]),
            rule(&["get", "list", "watch"]).groups(&[POLICY]).resources(&["poddisruptionbudgets"]),
            rule(&["get", "list", "watch"]).groups(&[APPS]).resources(&["statefulsets"]),
            rule(&["update"]).groups(&[POLICY]).resources(&["poddisruptionbudgets/status"]),
            rule(&["patch", "update"]).groups(&[CORE]).resources(&["pods/status"]),
            rule(&["get"]).groups(&["*"]).resources(&["*/scale"]),
            events(),
        ],
    )
}

/// endpoint-controller: keeps the Endpoints of each selecting Service.
fn endpoint() -> Role {
    Role::new(
        "system:controller:endpoint-controller",
        vec![
            rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["services", "pods"]),
            rule(&["get", "list", "watch", "create", "update", "delete"])
                .groups(&[CORE])
                .resources(&["endpoints"]),
            rule(&["create"]).groups(&[CORE]).resources(&["endpoints/restricted"]),
            events(),
        ],
    )
}

/// endpointslice-controller: keeps the EndpointSlices of each selecting Service (owned by it, hence
/// the finalizers update).
fn endpointslice() -> Role {
    Role::new(
        "system:controller:endpointslice-controller",
        vec![
            rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["services", "pods", "nodes"]),
            rule(&["update"]).groups(&[CORE]).resources(&["services/finalizers"]),
            rule(&["get", "list", "watch", "create", "update", "delete"])
                .groups(&[DISCOVERY])
                .resources(&["endpointslices"]),
            events(),
        ],
    )
}

/// endpointslicemirroring-controller: mirrors hand-made Endpoints of selectorless Services into
/// EndpointSlices.
fn endpointslicemirroring() -> Role {
    Role::new(
        "system:controller:endpointslicemirroring-controller",
        vec![
            rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["services", "endpoints"]),
            rule(&["update"]).groups(&[CORE]).resources(&["services/finalizers"]),
            rule(&["update"]).groups(&[CORE]).resources(&["endpoints/finalizers"]),
            rule(&["get", "list", "watch", "create", "update", "delete"])
                .groups(&[DISCOVERY])
                .resources(&["endpointslices"]),
            events(),
        ],
    )
}

/// expand-controller: grows volumes when their claims ask for more (services: the portworx plugin).
fn expand() -> Role {
    Role::new(
        "system:controller:expand-controller",
        vec![
            rule(&["get", "list", "watch", "update", "patch"])
                .groups(&[CORE])
                .resources(&["persistentvolumes"]),
            rule(&["update", "patch"]).groups(&[CORE]).resources(&["persistentvolumeclaims/status"]),
            rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["persistentvolumeclaims"]),
            events(),
            rule(&["get"]).groups(&[CORE]).resources(&["services"]),
        ],
    )
}

/// ephemeral-volume-controller: makes the claims of pods' generic ephemeral volumes.
fn ephemeral_volume() -> Role {
    Role::new(
        "system:controller:ephemeral-volume-controller",
        vec![
            rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["pods"]),
            rule(&["update"]).groups(&[CORE]).resources(&["pods/finalizers"]),
            rule(&["get", "list", "watch", "create"]).groups(&[CORE]).resources(&["persistentvolumeclaims"]),
            events(),
        ],
    )
}

/// resource-claim-controller: makes ResourceClaims from pods' claim templates and releases them
/// (DynamicResourceAllocation, GA, on).
fn resource_claim() -> Role {
    Role::new(
        "system:controller:resource-claim-controller",
        vec![
            rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["pods"]),
            rule(&["update"]).groups(&[CORE]).resources(&["pods/finalizers"]),
            rule(&["get", "list", "watch", "create", "delete"])
                .groups(&[RESOURCE])
                .resources(&["resourceclaims"]),
            rule(&["update", "patch"])
                .groups(&[RESOURCE])
                .resources(&["resourceclaims", "resourceclaims/status"]),
            rule(&["update", "patch"]).groups(&[CORE]).resources(&["pods/status"]),
            events(),
        ],
    )
}

/// generic-garbage-collector: deletes dependents whose owners are gone, across every resource.
fn generic_garbage_collector() -> Role {
    Role::new(
        "system:controller:generic-garbage-collector",
        vec![
            rule(&["get", "list", "watch", "patch", "update", "delete"]).groups(&["*"]).resources(&["*"]),
            events(),
        ],
    )
}

/// horizontal-pod-autoscaler: scales targets from resource, custom and external metrics.
fn horizontal_pod_autoscaler() -> Role {
    Role::new(
        "system:controller:horizontal-pod-autoscaler",
        vec![
            rule(&["get", "list", "watch"]).groups(&[AUTOSCALING]).resources(&["horizontalpodautoscalers"]),
            rule(&["update"]).groups(&[AUTOSCALING]).resources(&["horizontalpodautoscalers/status"]),
            rule(&["get", "update"]).groups(&["*"]).resources(&["*/scale"]),
            rule(&["list", "watch"]).groups(&[CORE]).resources(&["pods"]),
            rule(&["list", "watch"]).groups(&["metrics.k8s.io"]).resources(&["pods"]),
            rule(&["get", "list", "watch"]).groups(&["custom.metrics.k8s.io"]).resources(&["*"]),
            rule(&["get", "list", "watch"]).groups(&["external.metrics.k8s.io"]).resources(&["*"]),
            events(),
        ],
    )
}

/// job-controller: runs Jobs' pods to completion and tracks them with finalizers.
fn job() -> Role {
    Role::new(
        "system:controller:job-controller",
        vec![
            rule(&["get", "list", "watch", "update", "patch"]).groups(&[BATCH]).resources(&["jobs"]),
            rule(&["update"]).groups(&[BATCH]).resources(&["jobs/status"]),
            rule(&["update"]).groups(&[BATCH]).resources(&["jobs/finalizers"]),
            rule(&["list", "watch", "create", "delete", "patch"]).groups(&[CORE]).resources(&["pods"]),
            events(),
        ],
    )
}

/// namespace-controller: empties a terminating namespace of every resource, then finalizes it.
fn namespace() -> Role {
    Role::new(
        "system:controller:namespace-controller",
        vec![
            rule(&["get", "list", "watch", "delete"]).groups(&[CORE]).resources(&["namespaces"]),
            rule(&["update"]).groups(&[CORE]).resources(&["namespaces/finalize", "namespaces/status"]),
            rule(&["get", "list", "watch", "delete", "deletecollection"]).groups(&["*"]).resources(&["*"]),
        ],
    )
}

/// node-controller (node lifecycle): marks unreachable nodes, taints them and evicts their pods.
fn node() -> Role {
    Role::new(
        "system:controller:node-controller",
        vec![
            rule(&["get", "list", "watch", "update", "delete", "patch"])
                .groups(&[CORE])
                .resources(&["nodes"]),
            rule(&["patch", "update"]).groups(&[CORE]).resources(&["nodes/status"]),
            rule(&["patch", "update"]).groups(&[CORE]).resources(&["pods/status"]),
            rule(&["list", "watch", "get", "delete"]).groups(&[CORE]).resources(&["pods"]),
            events(),
        ],
    )
}

/// persistent-volume-binder: binds claims to volumes, provisions and recycles volumes (recycler
/// pods, whose events it watches; services: the portworx plugin).
fn persistent_volume_binder() -> Role {
    Role::new(
        "system:controller:persistent-volume-binder",
        vec![
            rule(&["get", "list", "watch", "update", "create", "delete"])
                .groups(&[CORE])
                .resources(&["persistentvolumes"]),
            rule(&["update"]).groups(&[CORE]).resources(&["persistentvolumes/status"]),
            rule(&["get", "list", "watch", "update"]).groups(&[CORE]).resources(&["persistentvolumeclaims"]),
            rule(&["update"]).groups(&[CORE]).resources(&["persistentvolumeclaims/status"]),
            rule(&["list", "watch", "get", "create", "delete"]).groups(&[CORE]).resources(&["pods"]),
            rule(&["get", "list", "watch"]).groups(&[STORAGE]).resources(&["storageclasses"]),
            rule(&["list", "watch"]).groups(&[CORE]).resources(&["nodes"]),
            events(),
            rule(&["watch"]).groups(&[CORE]).resources(&["events"]),
            rule(&["get"]).groups(&[CORE]).resources(&["services"]),
        ],
    )
}

/// pod-garbage-collector: deletes terminated pods beyond the threshold and pods of vanished nodes.
fn pod_garbage_collector() -> Role {
    Role::new(
        "system:controller:pod-garbage-collector",
        vec![
            rule(&["list", "watch", "delete"]).groups(&[CORE]).resources(&["pods"]),
            rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["nodes"]),
            rule(&["patch"]).groups(&[CORE]).resources(&["pods/status"]),
        ],
    )
}

/// replicaset-controller: keeps the number of pods of each ReplicaSet.
fn replicaset() -> Role {
    Role::new(
        "system:controller:replicaset-controller",
        vec![
            rule(&["get", "list", "watch", "update"]).groups(&[APPS, EXTENSIONS]).resources(&["replicasets"]),
            rule(&["update"]).groups(&[APPS, EXTENSIONS]).resources(&["replicasets/status"]),
            rule(&["update"]).groups(&[APPS, EXTENSIONS]).resources(&["replicasets/finalizers"]),
            rule(&["list", "watch", "patch", "create", "delete"]).groups(&[CORE]).resources(&["pods"]),
            events(),
        ],
    )
}

/// replication-controller: keeps the number of pods of each ReplicationController (get and update
/// too, which 1.0 controllers needed).
fn replication() -> Role {
    Role::new(
        "system:controller:replication-controller",
        vec![
            rule(&["get", "list", "watch", "update"]).groups(&[CORE]).resources(&["replicationcontrollers"]),
            rule(&["update"]).groups(&[CORE]).resources(&["replicationcontrollers/status"]),
            rule(&["update"]).groups(&[CORE]).resources(&["replicationcontrollers/finalizers"]),
            rule(&["list", "watch", "patch", "create", "delete"]).groups(&[CORE]).resources(&["pods"]),
            events(),
        ],
    )
}

/// resourcequota-controller: counts usage of anything a quota may name.
fn resourcequota() -> Role {
    Role::new(
        "system:controller:resourcequota-controller",
        vec![
            rule(&["list", "watch"]).groups(&["*"]).resources(&["*"]),
            rule(&["update"]).groups(&[CORE]).resources(&["resourcequotas/status"]),
            events(),
        ],
    )
}

/// route-controller: sets up cloud routes for nodes' pod CIDRs.
fn route() -> Role {
    Role::new(
        "system:controller:route-controller",
        vec![
            rule(&["list", "watch"]).groups(&[CORE]).resources(&["nodes"]),
            rule(&["patch"]).groups(&[CORE]).resources(&["nodes/status"]),
            events(),
        ],
    )
}

/// service-account-controller: makes the `default` ServiceAccount of every namespace.
fn service_account() -> Role {
    Role::new(
        "system:controller:service-account-controller",
        vec![rule(&["create"]).groups(&[CORE]).resources(&["serviceaccounts"]), events()],
    )
}

/// service-controller: cloud load balancers for LoadBalancer Services.
fn service() -> Role {
    Role::new(
        "system:controller:service-controller",
        vec![
            rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["services"]),
            rule(&["patch", "update"]).groups(&[CORE]).resources(&["services/status"]),
            rule(&["list", "watch"]).groups(&[CORE]).resources(&["nodes"]),
            events(),
        ],
    )
}

/// service-cidrs-controller: keeps ServiceCIDRs' status and finalizers from the IPAddresses
/// allocated in them (MultiCIDRServiceAllocator, GA, on).
fn service_cidrs() -> Role {
    Role::new(
        "system:controller:service-cidrs-controller",
        vec![
            rule(&["get", "list", "watch", "patch", "update"])
                .groups(&[NETWORKING])
                .resources(&["servicecidrs"]),
            rule(&["patch", "update"]).groups(&[NETWORKING]).resources(&["servicecidrs/finalizers"]),
            rule(&["patch", "update"]).groups(&[NETWORKING]).resources(&["servicecidrs/status"]),
            rule(&["get", "list", "watch"]).groups(&[NETWORKING]).resources(&["ipaddresses"]),
            events(),
        ],
    )
}

/// statefulset-controller: ordered pods with stable identities, their claims and history; the last
/// two rules delete claims by the set's retention policy (StatefulSetAutoDeletePVC, GA, on).
fn statefulset() -> Role {
    Role::new(
        "system:controller:statefulset-controller",
        vec![
            rule(&["list", "watch"]).groups(&[CORE]).resources(&["pods"]),
            rule(&["get", "list", "watch"]).groups(&[APPS]).resources(&["statefulsets"]),
            rule(&["update"]).groups(&[APPS]).resources(&["statefulsets/status"]),
            rule(&["update"]).groups(&[APPS]).resources(&["statefulsets/finalizers"]),
            rule(&["get", "create", "delete", "update", "patch"]).groups(&[CORE]).resources(&["pods"]),
            rule(&["get", "create", "delete", "update", "patch", "list", "watch"])
                .groups(&[APPS])
                .resources(&["controllerrevisions"]),
            rule(&["get", "create", "list", "watch"]).groups(&[CORE]).resources(&["persistentvolumeclaims"]),
            events(),
            rule(&["update", "delete"]).groups(&[CORE]).resources(&["persistentvolumeclaims"]),
            rule(&["update"]).groups(&[CORE]).resources(&["pods/finalizers"]),
        ],
    )
}

/// ttl-controller: annotates nodes with how long kubelets may cache objects, by cluster size.
fn ttl() -> Role {
    Role::new(
        "system:controller:ttl-controller",
        vec![rule(&["update", "patch", "list", "watch"]).groups(&[CORE]).resources(&["nodes"]), events()],
    )
}

/// certificate-controller: approves kubelet client CSRs and signs CSRs for the built-in signers.
fn certificate() -> Role {
    Role::new(
        "system:controller:certificate-controller",
        vec![
            rule(&["get", "list", "watch", "delete"])
                .groups(&[CERTIFICATES])
                .resources(&["certificatesigningrequests"]),
            rule(&["update"])
                .groups(&[CERTIFICATES])
                .resources(&["certificatesigningrequests/status", "certificatesigningrequests/approval"]),
            rule(&["approve"])
                .groups(&[CERTIFICATES])
                .resources(&["signers"])
                .names(&["kubernetes.io/kube-apiserver-client-kubelet"]),
            rule(&["sign"]).groups(&[CERTIFICATES]).resources(&["signers"]).names(&[
                "kubernetes.io/legacy-unknown",
                "kubernetes.io/kube-apiserver-client",
                "kubernetes.io/kube-apiserver-client-kubelet",
                "kubernetes.io/kubelet-serving",
            ]),
            rule(&["create"]).groups(&[AUTHORIZATION]).resources(&["subjectaccessreviews"]),
            events(),
        ],
    )
}

/// pvc-protection-controller: removes a claim's protection finalizer once no pod uses it.
fn pvc_protection() -> Role {
    Role::new(
        "system:controller:pvc-protection-controller",
        vec![
            rule(&["get", "list", "watch", "update"]).groups(&[CORE]).resources(&["persistentvolumeclaims"]),
            rule(&["list", "watch", "get"]).groups(&[CORE]).resources(&["pods"]),
            events(),
        ],
    )
}

/// pv-protection-controller: removes a volume's protection finalizer once no claim is bound to it.
fn pv_protection() -> Role {
    Role::new(
        "system:controller:pv-protection-controller",
        vec![
            rule(&["get", "list", "watch", "update"]).groups(&[CORE]).resources(&["persistentvolumes"]),
            events(),
        ],
    )
}

/// volumeattributesclass-protection-controller: keeps a VolumeAttributesClass while claims or
/// volumes use it (VolumeAttributesClass, GA, on).
fn volumeattributesclass_protection() -> Role {
    Role::new(
        "system:controller:volumeattributesclass-protection-controller",
        vec![
            rule(&["list", "watch", "get"]).groups(&[CORE]).resources(&["persistentvolumeclaims"]),
            rule(&["list", "watch", "get"]).groups(&[CORE]).resources(&["persistentvolumes"]),
            rule(&["get", "list", "watch", "update"])
                .groups(&[STORAGE])
                .resources(&["volumeattributesclasses"]),
            events(),
        ],
    )
}

/// ttl-after-finished-controller: deletes finished Jobs after their `ttlSecondsAfterFinished`.
fn ttl_after_finished() -> Role {
    Role::new(
        "system:controller:ttl-after-finished-controller",
        vec![rule(&["get", "list", "watch", "delete"]).groups(&[BATCH]).resources(&["jobs"]), events()],
    )
}

/// root-ca-cert-publisher: publishes the `kube-root-ca.crt` configmap in every namespace.
fn root_ca_cert_publisher() -> Role {
    Role::new(
        "system:controller:root-ca-cert-publisher",
        vec![rule(&["create", "update"]).groups(&[CORE]).resources(&["configmaps"]), events()],
    )
}

/// validatingadmissionpolicy-status-controller: type-checks ValidatingAdmissionPolicies and writes
/// the result to their status.
fn validatingadmissionpolicy_status() -> Role {
    let group = "admissionregistration.k8s.io";
    Role::new(
        "system:controller:validatingadmissionpolicy-status-controller",
        vec![
            rule(&["get", "list", "watch"]).groups(&[group]).resources(&["validatingadmissionpolicies"]),
            rule(&["get", "patch", "update"])
                .groups(&[group])
                .resources(&["validatingadmissionpolicies/status"]),
            events(),
        ],
    )
}

/// legacy-service-account-token-cleaner: labels, then deletes, unused legacy token secrets, from the
/// date kube-apiserver began tracking them (its `kube-apiserver-legacy-service-account-token-tracking`
/// configmap).
fn legacy_service_account_token_cleaner() -> Role {
    Role::new(
        "system:controller:legacy-service-account-token-cleaner",
        vec![
            rule(&["get"])
                .groups(&[CORE])
                .resources(&["configmaps"])
                .names(&["kube-apiserver-legacy-service-account-token-tracking"]),
            rule(&["patch", "delete"]).groups(&[CORE]).resources(&["secrets"]),
        ],
    )
}

/// selinux-warning-controller: warns by events about pods whose SELinux labels conflict on a shared
/// volume (SELinuxChangePolicy, beta, on).
fn selinux_warning() -> Role {
    Role::new(
        "system:controller:selinux-warning-controller",
        vec![
            events(),
            rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["persistentvolumes"]),
            rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["persistentvolumeclaims"]),
            rule(&["get", "list", "watch"]).groups(&[CORE]).resources(&["pods"]),
            rule(&["get", "list", "watch"]).groups(&[STORAGE]).resources(&["csidrivers"]),
        ],
    )
}
