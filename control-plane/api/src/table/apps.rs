//! Workload printers: apps/v1 daemonsets, deployments, replicasets, statefulsets and core/v1
//! replicationcontrollers (upstream's `printDaemonSet`, `printDeployment`, `printReplicaSet`,
//! `printStatefulSet`, `printReplicationController`).

use jiff::Timestamp;
use serde_json::{Value, json};

use super::value::{
    age, array_at, at, format_label_selector, format_labels, int_at, layout_containers, name, opt_int,
    selector_string,
};
use super::{AGE, CONTAINERS, Column, IMAGES, NAME, Row};

/// `spec.replicas`, which decoding defaults to 1.
fn replicas(object: &Value) -> i64 {
    opt_int(object, &["spec", "replicas"]).unwrap_or(1)
}

/// The pod template's containers' names and images.
fn template_containers(object: &Value) -> (String, String) {
    layout_containers(array_at(object, &["spec", "template", "spec", "containers"]))
}

pub(super) const DAEMON_SET_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Desired",
        "integer",
        "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod). More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/",
    ),
    Column::new(
        "Current",
        "integer",
        "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod. More info: https://kubernetes.io/docs/concepts/workloads/controllers/daemonset/",
    ),
    Column::new(
        "Ready",
        "integer",
        "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
    ),
    Column::new("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod"),
    Column::new(
        "Available",
        "integer",
        "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)",
    ),
    Column::string(
        "Node Selector",
        "NodeSelector is a selector which must be true for the pod to fit on a node. Selector which must match a node's labels for the pod to be scheduled on that node. More info: https://kubernetes.io/docs/concepts/configuration/assign-pod-node/",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string(
        "Selector",
        "A label query over pods that are managed by the daemon set. Must match in order to be controlled. If empty, defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors",
    )
    .wide(),
];

pub(super) fn daemon_set(object: &Value, now: Timestamp) -> Row {
    let status = |field: &str| json!(int_at(object, &["status", field]));
    let (names, images) = template_containers(object);
    Row::new(vec![
        json!(name(object)),
        status("desiredNumberScheduled"),
        status("currentNumberScheduled"),
        status("numberReady"),
        status("updatedNumberScheduled"),
        status("numberAvailable"),
        json!(format_labels(object, &["spec", "template", "spec", "nodeSelector"])),
        json!(age(object, now)),
        json!(names),
        json!(images),
        json!(format_label_selector(object, &["spec", "selector"])),
    ])
}

pub(super) const DEPLOYMENT_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Ready", "Number of the pod with ready state"),
    Column::string(
        "Up-to-date",
        "Total number of non-terminating pods targeted by this deployment that have the desired template spec.",
    ),
    Column::string(
        "Available",
        "Total number of available non-terminating pods (ready for at least minReadySeconds) targeted by this deployment.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string(
        "Selector",
        "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
    )
    .wide(),
];

pub(super) fn deployment(object: &Value, now: Timestamp) -> Row {
    let (names, images) = template_containers(object);
    // The selector's plain String(): empty (not `<none>`) without requirements, `<invalid>` on error.
    let selector = selector_string(object, &["spec", "selector"]).unwrap_or_else(|()| "<invalid>".to_owned());
    Row::new(vec![
        json!(name(object)),
        json!(format!("{}/{}", int_at(object, &["status", "readyReplicas"]), replicas(object))),
        json!(int_at(object, &["status", "updatedReplicas"])),
        json!(int_at(object, &["status", "availableReplicas"])),
        json!(age(object, now)),
        json!(names),
        json!(images),
        json!(selector),
    ])
}

pub(super) const REPLICA_SET_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Desired",
        "integer",
        "Replicas is the number of desired pods. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset",
    ),
    Column::new(
        "Current",
        "integer",
        "Replicas is the most recently observed number of non-terminating pods. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset",
    ),
    Column::new("Ready", "integer", "The number of non-terminating pods targeted by this ReplicaSet with a Ready Condition."),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string(
        "Selector",
        "Selector is a label query over pods that should match the replica count. If the selector is empty, it is defaulted to the labels present on the pod template. Label keys and values that must match in order to be controlled by this replica set. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors",
    )
    .wide(),
];

pub(super) fn replica_set(object: &Value, now: Timestamp) -> Row {
    replicas_row(object, now, &format_label_selector(object, &["spec", "selector"]))
}

/// A ReplicaSet's or ReplicationController's row: the same columns, with its selector as given.
fn replicas_row(object: &Value, now: Timestamp, selector: &str) -> Row {
    let (names, images) = template_containers(object);
    Row::new(vec![
        json!(name(object)),
        json!(replicas(object)),
        json!(int_at(object, &["status", "replicas"])),
        json!(int_at(object, &["status", "readyReplicas"])),
        json!(age(object, now)),
        json!(names),
        json!(images),
        json!(selector),
    ])
}

pub(super) const REPLICATION_CONTROLLER_COLUMNS: &[Column] = &[
    NAME,
    Column::new(
        "Desired",
        "integer",
        "Replicas is the number of desired replicas. This is a pointer to distinguish between explicit zero and unspecified. Defaults to 1. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller",
    ),
    Column::new(
        "Current",
        "integer",
        "Replicas is the most recently observed number of replicas. More info: https://kubernetes.io/docs/concepts/workloads/controllers/replicationcontroller#what-is-a-replicationcontroller",
    ),
    Column::new("Ready", "integer", "The number of ready replicas for this replication controller."),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string(
        "Selector",
        "Selector is a label query over pods that should match the Replicas count. If Selector is empty, it is defaulted to the labels present on the Pod template. Label keys and values that must match in order to be controlled by this replication controller, if empty defaulted to labels on Pod template. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors",
    )
    .wide(),
];

/// A ReplicationController's row. Its selector is a plain label map, printed as `FormatLabels`
/// does; decoding defaults an empty one to the template's labels (and the replicas to 1).
pub(super) fn replication_controller(object: &Value, now: Timestamp) -> Row {
    let given = format_labels(object, &["spec", "selector"]);
    let selector = if given == "<none>" && at(object, &["spec", "template", "metadata", "labels"]).is_some() {
        format_labels(object, &["spec", "template", "metadata", "labels"])
    } else {
        given
    };
    replicas_row(object, now, &selector)
}

pub(super) const STATEFUL_SET_COLUMNS: &[Column] =
    &[NAME, Column::string("Ready", "Number of the pod with ready state"), AGE, CONTAINERS, IMAGES];

pub(super) fn stateful_set(object: &Value, now: Timestamp) -> Row {
    let (names, images) = template_containers(object);
    Row::new(vec![
        json!(name(object)),
        json!(format!("{}/{}", int_at(object, &["status", "readyReplicas"]), replicas(object))),
        json!(age(object, now)),
        json!(names),
        json!(images),
    ])
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::super::test_support::{cells, headers};

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "web"}},
               "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}, {"name": "sidecar", "image": "busybox"}]}})
    }

    #[test]
    fn deployments() {
        assert_eq!(
            headers("apps", "deployments"),
            ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
        );
        let d = json!({
            "metadata": {"name": "web", "creationTimestamp": "2025-06-01T11:56:40Z", "generation": 2},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"},
                     "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}, "template": template()},
            "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}
        });
        assert_eq!(
            cells("apps", "deployments", &d),
            [
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("3m20s"),
                json!("nginx,sidecar"),
                json!("nginx:1.27,busybox"),
                json!("app=web,env notin (dev)")
            ]
        );
        // A fresh deployment: no status, replicas defaulted, empty selector prints empty.
        let fresh = json!({"metadata": {"name": "new"}, "spec": {"selector": {}, "template": {"spec": {"containers": []}}}});
        assert_eq!(
            cells("apps", "deployments", &fresh),
            [
                json!("new"),
                json!("0/1"),
                json!(0),
                json!(0),
                json!("<unknown>"),
                json!(""),
                json!(""),
                json!("")
            ]
        );
        let bad = json!({"metadata": {"name": "bad"}, "spec": {"selector": {"matchLabels": {"a b": "c"}}}});
        assert_eq!(cells("apps", "deployments", &bad)[7], "<invalid>");
    }

    #[test]
    fn replica_sets() {
        assert_eq!(
            headers("apps", "replicasets"),
            ["NAME", "DESIRED", "CURRENT", "READY", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
        );
        let rs = json!({
            "metadata": {"name": "web-5d8f7c9b6", "creationTimestamp": "2025-06-01T09:30:00Z"},
            "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "5d8f7c9b6"}}, "template": template()},
            "status": {"replicas": 3, "readyReplicas": 3, "availableReplicas": 3}
        });
        assert_eq!(
            cells("apps", "replicasets", &rs),
            [
                json!("web-5d8f7c9b6"),
                json!(3),
                json!(3),
                json!(3),
                json!("150m"),
                json!("nginx,sidecar"),
                json!("nginx:1.27,busybox"),
                json!("app=web,pod-template-hash=5d8f7c9b6")
            ]
        );
        let old =
            json!({"metadata": {"name": "web-old"}, "spec": {"replicas": 0}, "status": {"replicas": 0}});
        assert_eq!(cells("apps", "replicasets", &old)[1..4], [json!(0), json!(0), json!(0)]);
        assert_eq!(cells("apps", "replicasets", &old)[7], "<none>");
    }

    #[test]
    fn replication_controllers() {
        assert_eq!(
            headers("", "replicationcontrollers"),
            ["NAME", "DESIRED", "CURRENT", "READY", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
        );
        let rc = json!({
            "metadata": {"name": "frontend", "namespace": "default", "creationTimestamp": "2025-06-01T11:00:00Z"},
            "spec": {"replicas": 3, "selector": {"tier": "fe", "app": "web"}, "template": template()},
            "status": {"replicas": 2, "readyReplicas": 1, "availableReplicas": 1}
        });
        assert_eq!(
            cells("", "replicationcontrollers", &rc),
            [
                json!("frontend"),
                json!(3),
                json!(2),
                json!(1),
                json!("60m"),
                json!("nginx,sidecar"),
                json!("nginx:1.27,busybox"),
                json!("app=web,tier=fe")
            ]
        );
        // Decoding's defaults: one replica, the template's labels as the selector.
        let bare = json!({"metadata": {"name": "bare"}, "spec": {"template": template()}});
        let printed = cells("", "replicationcontrollers", &bare);
        assert_eq!((&printed[1], &printed[2], &printed[7]), (&json!(1), &json!(0), &json!("app=web")));
        let empty =
            cells("", "replicationcontrollers", &json!({"metadata": {"name": "e"}, "spec": {"replicas": 0}}));
        assert_eq!((&empty[1], &empty[5], &empty[7]), (&json!(0), &json!(""), &json!("<none>")));
    }

    #[test]
    fn daemon_sets() {
        assert_eq!(
            headers("apps", "daemonsets"),
            [
                "NAME",
                "DESIRED",
                "CURRENT",
                "READY",
                "UP-TO-DATE",
                "AVAILABLE",
                "NODE SELECTOR",
                "AGE",
                "CONTAINERS",
                "IMAGES",
                "SELECTOR"
            ]
        );
        let mut t = template();
        t["spec"]["nodeSelector"] = json!({"kubernetes.io/os": "linux"});
        let ds = json!({
            "metadata": {"name": "kube-proxy", "namespace": "kube-system", "creationTimestamp": "2025-05-25T12:00:00Z"},
            "spec": {"selector": {"matchLabels": {"k8s-app": "kube-proxy"}}, "template": t},
            "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2,
                       "updatedNumberScheduled": 3, "numberAvailable": 2}
        });
        assert_eq!(
            cells("apps", "daemonsets", &ds),
            [
                json!("kube-proxy"),
                json!(3),
                json!(3),
                json!(2),
                json!(3),
                json!(2),
                json!("kubernetes.io/os=linux"),
                json!("7d"),
                json!("nginx,sidecar"),
                json!("nginx:1.27,busybox"),
                json!("k8s-app=kube-proxy")
            ]
        );
        let bare = cells("apps", "daemonsets", &json!({"metadata": {"name": "d"}}));
        assert_eq!(bare[6], "<none>");
        assert_eq!(bare[10], "<none>");
    }

    #[test]
    fn stateful_sets() {
        assert_eq!(headers("apps", "statefulsets"), ["NAME", "READY", "AGE", "CONTAINERS", "IMAGES"]);
        let sts = json!({
            "metadata": {"name": "db", "creationTimestamp": "2025-06-01T04:00:00Z"},
            "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": template()},
            "status": {"replicas": 3, "readyReplicas": 1}
        });
        assert_eq!(
            cells("apps", "statefulsets", &sts),
            [json!("db"), json!("1/3"), json!("8h"), json!("nginx,sidecar"), json!("nginx:1.27,busybox")]
        );
    }
}
