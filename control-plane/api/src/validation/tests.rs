//! Each rule, valid and invalid, with upstream's field path and message.

use serde_json::{Value, json};

use super::{validate_create, validate_update};
use crate::resources::find;

fn resource(plural: &str) -> &'static crate::resources::Resource {
    let group = match plural {
        "deployments" | "replicasets" | "statefulsets" | "daemonsets" => "apps",
        "jobs" | "cronjobs" => "batch",
        _ => "",
    };
    find(group, "v1", plural).unwrap()
}

/// The create errors of `object`, as `field: message`.
fn create(plural: &str, object: &Value) -> Vec<String> {
    validate_create(resource(plural), object).iter().map(ToString::to_string).collect()
}

fn update(plural: &str, old: &Value, new: &Value) -> Vec<String> {
    validate_update(resource(plural), old, new).iter().map(ToString::to_string).collect()
}

fn pod(spec: Value) -> Value {
    let mut pod = json!({"metadata": {"name": "p", "namespace": "d"}});
    pod["spec"] = spec;
    pod
}

fn one_container() -> Value {
    pod(json!({"containers": [{"name": "c", "image": "busybox"}]}))
}

fn deployment(selector: Value, labels: Value) -> Value {
    let mut object = json!({"metadata": {"name": "d"}, "spec": {
        "template": {"metadata": {}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}});
    object["spec"]["selector"] = selector;
    object["spec"]["template"]["metadata"]["labels"] = labels;
    object
}

const LABEL_VALUE_REGEX: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

#[test]
fn metadata_labels_annotations_finalizers() {
    let long = "v".repeat(100);
    let object = json!({"metadata": {"name": "c", "labels": {"app": long, "ok": "fine", "bad key!": "x"}}});
    assert_eq!(
        create("configmaps", &object),
        [
            format!("metadata.labels: Invalid value: \"{long}\": must be no more than 63 characters"),
            "metadata.labels: Invalid value: \"bad key!\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
                .to_owned(),
        ]
    );
    assert_eq!(
        create("configmaps", &json!({"metadata": {"name": "c", "labels": {"a": "-x"}}})),
        [format!("metadata.labels: Invalid value: \"-x\": {LABEL_VALUE_REGEX}")]
    );
    let prefixed = format!("{}.com/x", "a".repeat(250));
    assert_eq!(
        create("configmaps", &json!({"metadata": {"name": "c", "labels": {prefixed.clone(): "y"}}})),
        [format!(
            "metadata.labels: Invalid value: \"{prefixed}\": prefix part must be no more than 253 characters"
        )]
    );
    assert!(
        create(
            "configmaps",
            &json!({"metadata": {"name": "c", "labels": {"example.com/app": "web-1", "e": ""}}})
        )
        .is_empty()
    );

    let big = "x".repeat(256 * 1024);
    assert_eq!(
        create("configmaps", &json!({"metadata": {"name": "c", "annotations": {"a": big}}})),
        ["metadata.annotations: Too long: may not be more than 262144 bytes"]
    );
    assert!(
        create(
            "configmaps",
            &json!({"metadata": {"name": "c", "annotations": {"Example.COM/Note": "anything at all"}}})
        )
        .is_empty()
    );

    assert_eq!(
        create(
            "configmaps",
            &json!({"metadata": {"name": "c", "finalizers": ["kubernetes", "cleanup", "example.com/x"]}})
        ),
        [
            "metadata.finalizers[1]: Invalid value: \"cleanup\": name is neither a standard finalizer name nor is it fully qualified"
        ]
    );
    assert_eq!(
        create(
            "configmaps",
            &json!({"metadata": {"name": "c", "finalizers": ["orphan", "foregroundDeletion"]}})
        ),
        [
            "metadata.finalizers: Invalid value: [\"orphan\",\"foregroundDeletion\"]: finalizer orphan and foregroundDeletion cannot be both set"
        ]
    );
    let deleting = json!({"metadata": {"name": "c", "deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["example.com/a"]}});
    let mut more = deleting.clone();
    more["metadata"]["finalizers"] = json!(["example.com/a", "example.com/b"]);
    assert_eq!(
        update("configmaps", &deleting, &more),
        [
            "metadata.finalizers: Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{\"example.com/b\"}"
        ]
    );
    let mut fewer = deleting.clone();
    fewer["metadata"]["finalizers"] = json!([]);
    assert!(update("configmaps", &deleting, &fewer).is_empty());
    assert_eq!(
        create(
            "configmaps",
            &json!({"metadata": {"name": "c", "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p"}]}})
        ),
        ["metadata.ownerReferences[0].uid: Required value: must not be empty"]
    );
}

#[test]
fn pods_need_containers_with_unique_names_and_images() {
    assert!(create("pods", &one_container()).is_empty());
    assert_eq!(create("pods", &pod(json!({}))), ["spec.containers: Required value"]);
    assert_eq!(
        create(
            "pods",
            &pod(json!({"containers": [{"name": "c", "image": "a"}, {"name": "c", "image": "b"}]}))
        ),
        ["spec.containers[1].name: Duplicate value: \"c\""]
    );
    assert_eq!(
        create(
            "pods",
            &pod(
                json!({"containers": [{"name": "c", "image": "a"}], "initContainers": [{"name": "c", "image": "b"}]})
            )
        ),
        ["spec.initContainers[0].name: Duplicate value: \"c\""]
    );
    assert_eq!(
        create("pods", &pod(json!({"containers": [{"name": "C_1"}]}))),
        [
            "spec.containers[0].name: Invalid value: \"C_1\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            "spec.containers[0].image: Required value",
        ]
    );
    assert_eq!(
        create("pods", &pod(json!({"containers": [{"image": "a"}]}))),
        ["spec.containers[0].name: Required value"]
    );
    assert_eq!(
        create("pods", &pod(json!({"containers": [{"name": "c", "image": " busybox"}]}))),
        [
            "spec.containers[0].image: Invalid value: \" busybox\": must not have leading or trailing whitespace"
        ]
    );
    assert_eq!(
        create("pods", &pod(json!({"containers": [{"name": "c", "image": "a", "restartPolicy": "Always"}]}))),
        ["spec.containers[0].restartPolicy: Forbidden: may not be set for non-init containers"]
    );
    assert_eq!(
        create(
            "pods",
            &pod(
                json!({"containers": [{"name": "c", "image": "a"}], "initContainers": [{"name": "i", "image": "a", "restartPolicy": "Never", "livenessProbe": {"exec": {"command": ["x"]}}}]})
            )
        ),
        [
            "spec.initContainers[0].restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
            "spec.initContainers[0].livenessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
        ]
    );
}

#[test]
fn container_ports() {
    let with_ports = |ports: Value| pod(json!({"containers": [{"name": "c", "image": "a", "ports": ports}]}));
    assert!(
        create(
            "pods",
            &with_ports(
                json!([{"containerPort": 80, "name": "http"}, {"containerPort": 53, "protocol": "UDP"}])
            )
        )
        .is_empty()
    );
    assert_eq!(
        create("pods", &with_ports(json!([{"containerPort": 70000}]))),
        [
            "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"
        ]
    );
    assert_eq!(
        create("pods", &with_ports(json!([{"name": "web"}]))),
        ["spec.containers[0].ports[0].containerPort: Required value"]
    );
    assert_eq!(
        create("pods", &with_ports(json!([{"containerPort": 80, "protocol": "HTTP"}]))),
        [
            "spec.containers[0].ports[0].protocol: Unsupported value: \"HTTP\": supported values: \"SCTP\", \"TCP\", \"UDP\""
        ]
    );
    assert_eq!(
        create("pods", &with_ports(json!([{"containerPort": 80, "name": "averyveryverylongname"}]))),
        [
            "spec.containers[0].ports[0].name: Invalid value: \"averyveryverylongname\": must be no more than 15 characters"
        ]
    );
    assert_eq!(
        create(
            "pods",
            &with_ports(json!([{"containerPort": 80, "name": "web"}, {"containerPort": 81, "name": "web"}]))
        ),
        ["spec.containers[0].ports[1].name: Duplicate value: \"web\""]
    );
    assert_eq!(
        create(
            "pods",
            &with_ports(
                json!([{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81, "hostPort": 8080}])
            )
        ),
        ["spec.containers[0].ports[1].hostPort: Duplicate value: \"TCP//8080\""]
    );
}

#[test]
fn env_volumes_and_mounts() {
    // The volume "none" names no source: defaulting makes it an emptyDir, as upstream's does.
    let spec = json!({"containers": [{"name": "c", "image": "a",
        "env": [{"name": "OK", "value": "1"}, {"name": ""}, {"name": "A=B"}, {"name": "X", "valueFrom": {}}],
        "volumeMounts": [{"name": "data", "mountPath": "/d"}, {"name": "missing", "mountPath": "/d"}]}],
        "volumes": [{"name": "data", "emptyDir": {}}, {"name": "data", "emptyDir": {}}, {"name": "none"}]});
    assert_eq!(
        create("pods", &pod(spec)),
        [
            "spec.volumes[1].name: Duplicate value: \"data\"",
            "spec.containers[0].env[1].name: Required value",
            "spec.containers[0].env[2].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
            "spec.containers[0].env[3].valueFrom: Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            "spec.containers[0].volumeMounts[1].name: Not found: \"missing\"",
            "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/d\": must be unique",
        ]
    );
    let two_sources = json!({"containers": [{"name": "c", "image": "a"}],
        "volumes": [{"name": "v", "emptyDir": {}, "configMap": {"name": "x"}}, {"name": "s", "secret": {}}]});
    assert_eq!(
        create("pods", &pod(two_sources)),
        [
            "spec.volumes[0].configMap: Forbidden: may not specify more than 1 volume type",
            "spec.volumes[1].secret.secretName: Required value",
        ]
    );
    let fine = json!({"containers": [{"name": "c", "image": "a", "env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}],
        "volumeMounts": [{"name": "cfg", "mountPath": "/etc/c"}]}], "volumes": [{"name": "cfg", "configMap": {"name": "cm"}}]});
    assert!(create("pods", &pod(fine)).is_empty());
}

#[test]
fn pod_enums_and_resources() {
    let spec = json!({"containers": [{"name": "c", "image": "a", "imagePullPolicy": "Sometimes"}],
        "restartPolicy": "Sometimes", "dnsPolicy": "Maybe", "activeDeadlineSeconds": 0});
    assert_eq!(
        create("pods", &pod(spec)),
        [
            "spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            "spec.dnsPolicy: Unsupported value: \"Maybe\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"",
            "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive",
        ]
    );
    let with =
        |resources: Value| pod(json!({"containers": [{"name": "c", "image": "a", "resources": resources}]}));
    assert!(create("pods", &with(json!({"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1024Mi"}}))).is_empty());
    assert_eq!(
        create("pods", &with(json!({"requests": {"cpu": "1500m"}, "limits": {"cpu": "1"}}))),
        [
            "spec.containers[0].resources.requests: Invalid value: \"1500m\": must be less than or equal to cpu limit of 1"
        ]
    );
    assert_eq!(
        create("pods", &with(json!({"requests": {"memory": "-1Mi"}}))),
        [
            "spec.containers[0].resources.requests[memory]: Invalid value: \"-1Mi\": must be greater than or equal to 0"
        ]
    );
    assert_eq!(
        create("pods", &with(json!({"requests": {"example.com/gpu": "1"}}))),
        [
            "spec.containers[0].resources.limits: Required value: Limit must be set for non overcommitable resources"
        ]
    );
    assert_eq!(
        create(
            "pods",
            &with(json!({"requests": {"example.com/gpu": "1"}, "limits": {"example.com/gpu": "2"}}))
        ),
        [
            "spec.containers[0].resources.requests: Invalid value: \"1\": must be equal to example.com/gpu limit of 2"
        ]
    );
    let toleration = pod(
        json!({"containers": [{"name": "c", "image": "a"}], "tolerations": [{"operator": "Equal", "value": "x"}]}),
    );
    assert_eq!(
        create("pods", &toleration),
        [
            "spec.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\""
        ]
    );
}

#[test]
fn pod_updates() {
    // As stored: defaulted on create.
    let mut old = one_container();
    crate::defaults::apply(resource("pods"), &mut old);
    let mut image = old.clone();
    image["spec"]["containers"][0]["image"] = "busybox:1.36".into();
    image["metadata"]["labels"] = json!({"a": "b"});
    assert_eq!(update("pods", &old, &image), Vec::<String>::new());
    let mut added = old.clone();
    added["spec"]["containers"] = json!([{"name": "c", "image": "a"}, {"name": "d", "image": "a"}]);
    assert_eq!(
        update("pods", &old, &added),
        ["spec.containers: Forbidden: pod updates may not add or remove containers"]
    );
    let mut env = old.clone();
    env["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}]);
    let errors = update("pods", &old, &env);
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].starts_with("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n"),
        "{errors:?}"
    );
    assert!(errors[0].contains("containers[0].env"), "{errors:?}");
    // A PUT without the defaulted fields changes nothing.
    assert!(update("pods", &old, &one_container()).is_empty());
    let mut tolerated = old.clone();
    tolerated["spec"]["tolerations"] = json!([{"key": "k", "operator": "Exists"}]);
    assert!(update("pods", &old, &tolerated).is_empty());
    assert_eq!(
        update("pods", &tolerated, &old),
        ["spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"]
    );
    let mut deadline = old.clone();
    deadline["spec"]["activeDeadlineSeconds"] = 10.into();
    let mut later = old.clone();
    later["spec"]["activeDeadlineSeconds"] = 20.into();
    assert!(update("pods", &old, &deadline).is_empty());
    assert_eq!(
        update("pods", &deadline, &later),
        ["spec.activeDeadlineSeconds: Invalid value: 20: must be less than or equal to previous value"]
    );
    let mut negative = old.clone();
    negative["spec"]["terminationGracePeriodSeconds"] = (-5).into();
    let mut one = old.clone();
    one["spec"]["terminationGracePeriodSeconds"] = 1.into();
    assert!(update("pods", &negative, &one).is_empty());
}

#[test]
fn deployments_and_replica_sets() {
    let app = json!({"matchLabels": {"app": "web"}});
    assert!(create("deployments", &deployment(app.clone(), json!({"app": "web", "tier": "x"}))).is_empty());
    assert_eq!(
        create("deployments", &deployment(app.clone(), json!({"app": "x"}))),
        [
            "spec.template.metadata.labels: Invalid value: {\"app\":\"x\"}: `selector` does not match template `labels`"
        ]
    );
    assert_eq!(
        create("deployments", &deployment(Value::Null, json!({"app": "x"}))),
        [
            "spec.selector: Required value",
            "spec.template.metadata.labels: Invalid value: {\"app\":\"x\"}: `selector` does not match template `labels`",
        ]
    );
    assert_eq!(
        create("deployments", &deployment(json!({"matchLabels": {}}), json!({"app": "x"}))),
        ["spec.selector: Invalid value: {}: empty selector is invalid for deployment"]
    );
    let mut negative = deployment(app.clone(), json!({"app": "web"}));
    negative["spec"]["replicas"] = (-1).into();
    negative["spec"]["template"]["spec"]["containers"] = json!([]);
    negative["spec"]["template"]["spec"]["restartPolicy"] = "Never".into();
    assert_eq!(
        create("deployments", &negative),
        [
            "spec.replicas: Invalid value: -1: must be greater than or equal to 0",
            "spec.template.spec.containers: Required value",
            "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
        ]
    );
    let expressions = json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}, {"key": "tier", "operator": "Exists", "values": ["x"]}]});
    assert_eq!(
        create("deployments", &deployment(expressions, json!({"app": "web"}))),
        [
            "spec.selector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
        ]
    );
    let old = deployment(app.clone(), json!({"app": "web", "v": "2"}));
    let mut scaled = old.clone();
    scaled["spec"]["replicas"] = 5.into();
    assert!(update("deployments", &old, &scaled).is_empty());
    let changed =
        deployment(json!({"matchLabels": {"app": "web", "v": "2"}}), json!({"app": "web", "v": "2"}));
    assert_eq!(
        update("deployments", &old, &changed),
        ["spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"web\",\"v\":\"2\"}}: field is immutable"]
    );
    let mut rs = deployment(app, json!({"app": "other"}));
    rs["spec"]["template"]["spec"]["activeDeadlineSeconds"] = 5.into();
    assert_eq!(
        create("replicasets", &rs),
        [
            "spec.template.metadata.labels: Invalid value: {\"app\":\"other\"}: `selector` does not match template `labels`",
            "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicaSet is not Supported",
        ]
    );
}

#[test]
fn replication_controllers() {
    let rc = |selector: Value, labels: Value| {
        let mut object = deployment(Value::Null, labels);
        object["spec"]["selector"] = selector;
        object
    };
    // Defaults first: the template's labels select, one replica.
    assert!(create("replicationcontrollers", &rc(Value::Null, json!({"app": "web"}))).is_empty());
    assert_eq!(
        create("replicationcontrollers", &rc(json!({"app": "web"}), json!({"app": "x"}))),
        [
            "spec.template.metadata.labels: Invalid value: {\"app\":\"x\"}: `selector` does not match template `labels`"
        ]
    );
    let mut bare = json!({"metadata": {"name": "rc"}, "spec": {"replicas": -2}});
    assert_eq!(
        create("replicationcontrollers", &bare),
        [
            "spec.selector: Required value",
            "spec.replicas: Invalid value: -2: must be greater than or equal to 0",
            "spec.template: Required value",
        ]
    );
    bare["spec"] = json!({"selector": {"app": "web"}, "replicas": 1, "template": {"metadata": {"labels": {"app": "web"}},
        "spec": {"restartPolicy": "OnFailure", "activeDeadlineSeconds": 3, "containers": [{"name": "c", "image": "i"}]}}});
    assert_eq!(
        create("replicationcontrollers", &bare),
        [
            "spec.template.spec.restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\"",
            "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in ReplicationController is not Supported",
        ]
    );
    // Unlike apps/v1 selectors, a ReplicationController's may change.
    let old = rc(json!({"app": "web"}), json!({"app": "web", "v": "2"}));
    let new = rc(json!({"app": "web", "v": "2"}), json!({"app": "web", "v": "2"}));
    assert!(update("replicationcontrollers", &old, &new).is_empty());
}

#[test]
fn stateful_and_daemon_sets() {
    let set = deployment(json!({"matchLabels": {"app": "db"}}), json!({"app": "db"}));
    assert!(create("statefulsets", &set).is_empty());
    // StatefulSet templates are not validated as pod specs upstream (claims make up their volumes).
    let mut claims = set.clone();
    claims["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] =
        json!([{"name": "data", "mountPath": "/d"}]);
    assert!(create("statefulsets", &claims).is_empty());
    let mut scaled = set.clone();
    scaled["spec"]["replicas"] = 3.into();
    scaled["spec"]["template"]["spec"]["containers"][0]["image"] = "db:2".into();
    assert!(update("statefulsets", &set, &scaled).is_empty());
    let mut service = set.clone();
    service["spec"]["serviceName"] = "other".into();
    assert_eq!(
        update("statefulsets", &set, &service),
        [
            "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"
        ]
    );
    assert_eq!(
        create("statefulsets", &deployment(json!({"matchLabels": {}}), json!({"app": "db"}))),
        ["spec.selector: Invalid value: {}: empty selector is invalid for statefulset"]
    );
    let daemons = deployment(json!({"matchLabels": {"app": "agent"}}), json!({"app": "agent"}));
    assert!(create("daemonsets", &daemons).is_empty());
    assert_eq!(
        create("daemonsets", &deployment(json!({"matchLabels": {"app": "agent"}}), json!({"app": "x"}))),
        [
            "spec.template.metadata.labels: Invalid value: {\"app\":\"x\"}: `selector` does not match template `labels`"
        ]
    );
    let moved = deployment(json!({"matchLabels": {"app": "agent2"}}), json!({"app": "agent2"}));
    assert_eq!(
        update("daemonsets", &daemons, &moved),
        ["spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"agent2\"}}: field is immutable"]
    );
}

#[test]
fn jobs_and_cron_jobs() {
    let job = json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "a"}], "restartPolicy": "Never"}}}});
    assert!(create("jobs", &job).is_empty());
    let mut always = job.clone();
    always["spec"]["template"]["spec"].as_object_mut().unwrap().remove("restartPolicy");
    always["spec"]["backoffLimit"] = (-1).into();
    assert_eq!(
        create("jobs", &always),
        [
            "spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0",
            "spec.template.spec.restartPolicy: Unsupported value: \"Always\": supported values: \"OnFailure\", \"Never\"",
        ]
    );
    let mut manual = job.clone();
    manual["spec"]["manualSelector"] = true.into();
    assert_eq!(create("jobs", &manual), ["spec.selector: Required value"]);
    let mut changed = job.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = "b".into();
    let errors = update("jobs", &job, &changed);
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].starts_with("spec.template: Invalid value: {")
            && errors[0].ends_with("}: field is immutable"),
        "{errors:?}"
    );
    let mut suspended = job.clone();
    suspended["spec"]["suspend"] = true.into();
    assert!(update("jobs", &job, &suspended).is_empty());

    let cron = json!({"metadata": {"name": "c"}, "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": job["spec"].clone()}}});
    assert!(create("cronjobs", &cron).is_empty());
    let mut bad = cron.clone();
    bad["spec"]["schedule"] = "".into();
    bad["spec"]["concurrencyPolicy"] = "Sometimes".into();
    bad["spec"]["jobTemplate"]["spec"]["selector"] = json!({"matchLabels": {"a": "b"}});
    assert_eq!(
        create("cronjobs", &bad),
        [
            "spec.schedule: Required value",
            "spec.concurrencyPolicy: Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\"",
            "spec.jobTemplate.spec.selector: Invalid value: {\"matchLabels\":{\"a\":\"b\"}}: `selector` will be auto-generated",
        ]
    );
    let mut fields = cron.clone();
    fields["spec"]["schedule"] = "* * *".into();
    assert_eq!(
        create("cronjobs", &fields),
        ["spec.schedule: Invalid value: \"* * *\": expected exactly 5 fields, found 3: [* * *]"]
    );
    fields["spec"]["schedule"] = "@hourly".into();
    assert!(create("cronjobs", &fields).is_empty());
}

#[test]
fn services() {
    let svc = |spec: Value| json!({"metadata": {"name": "s"}, "spec": spec});
    assert!(
        create("services", &svc(json!({"ports": [{"port": 80}], "selector": {"app": "web"}}))).is_empty()
    );
    assert_eq!(create("services", &svc(json!({}))), ["spec.ports: Required value"]);
    assert!(create("services", &svc(json!({"clusterIP": "None"}))).is_empty());
    assert!(
        create("services", &svc(json!({"type": "ExternalName", "externalName": "db.example.com."})))
            .is_empty()
    );
    assert_eq!(
        create("services", &svc(json!({"type": "ExternalName"}))),
        ["spec.externalName: Required value"]
    );
    assert_eq!(
        create("services", &svc(json!({"ports": [{"port": 70000}]}))),
        [
            "spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
            // targetPort defaults to the port.
            "spec.ports[0].targetPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
        ]
    );
    assert_eq!(
        create("services", &svc(json!({"ports": [{"port": 80, "name": "http"}, {"port": 443}]}))),
        ["spec.ports[1].name: Required value"]
    );
    assert_eq!(
        create(
            "services",
            &svc(
                json!({"ports": [{"port": 80, "name": "a", "targetPort": "http--x"}, {"port": 80, "name": "a", "targetPort": 70000, "protocol": "ICMP"}]})
            )
        ),
        [
            "spec.ports[0].targetPort: Invalid value: \"http--x\": must not contain consecutive hyphens",
            "spec.ports[1].name: Duplicate value: \"a\"",
            "spec.ports[1].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            "spec.ports[1].targetPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
        ]
    );
    assert_eq!(
        create("services", &svc(json!({"ports": [{"port": 80, "name": "a"}, {"port": 80, "name": "b"}]}))),
        [
            "spec.ports[1]: Duplicate value: {\"Name\":\"\",\"Protocol\":\"TCP\",\"AppProtocol\":null,\"Port\":80,\"TargetPort\":0,\"NodePort\":0}"
        ]
    );
    assert_eq!(
        create(
            "services",
            &svc(json!({"ports": [{"port": 80}], "type": "Internal", "sessionAffinity": "Sticky"}))
        ),
        [
            "spec.sessionAffinity: Unsupported value: \"Sticky\": supported values: \"ClientIP\", \"None\"",
            "spec.type: Unsupported value: \"Internal\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\"",
        ]
    );
    assert_eq!(
        create("services", &svc(json!({"ports": [{"port": 80, "nodePort": 30080}]}))),
        ["spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"]
    );
}

#[test]
fn config_maps_and_secrets() {
    let cm = |extra: Value| {
        let mut object = json!({"metadata": {"name": "c"}});
        object.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        object
    };
    assert!(
        create("configmaps", &cm(json!({"data": {"a.b": "1", "C_D": "2"}, "binaryData": {"bin": "AAE="}})))
            .is_empty()
    );
    assert_eq!(
        create("configmaps", &cm(json!({"data": {"a b": "1", "x": "2"}, "binaryData": {"x": "AA=="}}))),
        [
            "data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            "data[x]: Invalid value: \"x\": duplicate of key present in binaryData",
        ]
    );
    let big = "x".repeat(1024 * 1024 + 1);
    assert_eq!(
        create("configmaps", &cm(json!({"data": {"a": big}}))),
        ["[]: Too long: may not be more than 1048576 bytes"]
    );
    let locked = cm(json!({"data": {"a": "1"}, "immutable": true}));
    assert!(update("configmaps", &locked, &locked).is_empty());
    assert_eq!(
        update("configmaps", &locked, &cm(json!({"data": {"a": "2"}}))),
        [
            "immutable: Forbidden: field is immutable when `immutable` is set",
            "data: Forbidden: field is immutable when `immutable` is set",
        ]
    );
    let mut relabelled = locked.clone();
    relabelled["metadata"]["labels"] = json!({"a": "b"});
    assert!(update("configmaps", &locked, &relabelled).is_empty());

    assert!(create("secrets", &cm(json!({"data": {"k": "dg=="}, "stringData": {"s": "v"}}))).is_empty());
    assert_eq!(
        create(
            "secrets",
            &cm(
                json!({"type": "kubernetes.io/tls", "data": {"tls.crt": "dg=="}, "stringData": {"bad/key": "v"}})
            )
        ),
        [
            "data[bad/key]: Invalid value: \"bad/key\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
            "data[tls.key]: Required value",
        ]
    );
    let secret = cm(json!({"data": {"k": "dg=="}, "immutable": true}));
    assert_eq!(
        update("secrets", &secret, &cm(json!({"data": {"k": "dw=="}, "immutable": true, "type": "Other"}))),
        [
            "type: Invalid value: \"Other\": field is immutable",
            "data: Forbidden: field is immutable when `immutable` is set",
        ]
    );
}

#[test]
fn other_resources_only_their_metadata() {
    let namespaces = find("", "v1", "namespaces").unwrap();
    assert!(validate_create(namespaces, &json!({"metadata": {"name": "n"}})).is_empty());
    let errors = validate_create(namespaces, &json!({"metadata": {"name": "n", "labels": {"a": "b c"}}}));
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].field, "metadata.labels");
}
