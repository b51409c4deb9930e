//! The codec against k8s-pb's prost types (the peer), both ways, and over broken input.

use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use prost::Message as _;
use serde_json::{Value, json};

use super::envelope::{self, MAGIC};
use super::*;

fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "uid": "0b8d3f5e-1b1e-4c1c-9e7a-2f4f5f6a7b8c",
            "resourceVersion": "42",
            "generation": 3,
            "creationTimestamp": "2026-11-30T10:00:00Z",
            "labels": {"app": "web", "tier": "front"},
            "annotations": {"note": "ünïcödé"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                                 "uid": "u-1", "controller": true, "blockOwnerDeletion": true}],
            "finalizers": ["example.com/keep"],
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "v1",
                               "time": "2026-11-30T10:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}]
        },
        "spec": {
            "containers": [{
                "name": "app",
                "image": "busybox:1.36",
                "command": ["sh", "-c", "sleep 3600"],
                "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
                "env": [{"name": "A", "value": "1"},
                        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "b", "optional": false}}}],
                "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "250m"}},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
                                  "periodSeconds": 10, "failureThreshold": 3},
                "readinessProbe": {"tcpSocket": {"port": 8080}, "initialDelaySeconds": 0},
                "securityContext": {"allowPrivilegeEscalation": false, "runAsUser": 1000},
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}]
            }],
            "volumes": [
                {"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
                {"name": "cfg", "configMap": {"name": "cfg", "defaultMode": 420, "items": [{"key": "a", "path": "a.txt"}]}}
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0,
            "enableServiceLinks": false,
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}],
            "nodeSelector": {"disk": "ssd"}
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "startTime": "2026-11-30T10:00:01Z",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T10:00:05Z"}],
            "podIPs": [{"ip": "10.0.0.5"}]
        }
    })
}

#[test]
fn pod_round_trips_and_k8s_pb_reads_it() {
    let object = pod();
    let bytes = envelope::encode_object(&object).unwrap();
    assert!(bytes.starts_with(MAGIC));
    // The envelope, read by k8s-pb.
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(&bytes[4..]).unwrap();
    let type_meta = unknown.type_meta.unwrap();
    assert_eq!((type_meta.api_version.as_deref(), type_meta.kind.as_deref()), (Some("v1"), Some("Pod")));
    let pod = core::Pod::decode(unknown.raw.unwrap().as_slice()).unwrap();
    let metadata = pod.metadata.unwrap();
    assert_eq!(metadata.name.as_deref(), Some("web"));
    assert_eq!(metadata.generation, Some(3));
    assert_eq!(metadata.labels["tier"], "front");
    assert_eq!(metadata.annotations["note"], "ünïcödé");
    assert_eq!(metadata.creation_timestamp.unwrap().seconds, Some(1_796_032_800));
    assert_eq!(metadata.owner_references[0].controller, Some(true));
    let fields = metadata.managed_fields[0].fields_v1.clone().unwrap().raw.unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&fields).unwrap()["f:metadata"]["f:labels"]["f:app"],
        json!({})
    );
    let spec = pod.spec.unwrap();
    let container = &spec.containers[0];
    assert_eq!(container.command, ["sh", "-c", "sleep 3600"]);
    assert_eq!(container.ports[0].container_port, Some(8080));
    let limits = &container.resources.as_ref().unwrap().limits;
    assert_eq!(limits["memory"].string.as_deref(), Some("128Mi"));
    let probe = container.liveness_probe.as_ref().unwrap();
    let port = probe.handler.as_ref().unwrap().http_get.as_ref().unwrap().port.as_ref().unwrap();
    assert_eq!((port.r#type, port.str_val.as_deref()), (Some(1), Some("http")));
    let tcp =
        container.readiness_probe.as_ref().unwrap().handler.as_ref().unwrap().tcp_socket.as_ref().unwrap();
    assert_eq!(
        (tcp.port.as_ref().unwrap().r#type, tcp.port.as_ref().unwrap().int_val),
        (Some(0), Some(8080))
    );
    assert_eq!(container.security_context.as_ref().unwrap().allow_privilege_escalation, Some(false));
    let key_ref = container.env[1].value_from.as_ref().unwrap().config_map_key_ref.as_ref().unwrap();
    assert_eq!(
        key_ref.local_object_reference.as_ref().unwrap().name.as_deref(),
        Some("cfg"),
        "inline struct"
    );
    let volume = &spec.volumes[1];
    let config_map = volume.volume_source.as_ref().unwrap().config_map.as_ref().unwrap();
    assert_eq!(config_map.default_mode, Some(420));
    assert_eq!(spec.termination_grace_period_seconds, Some(0), "a zero is sent");
    assert_eq!(spec.enable_service_links, Some(false));
    assert_eq!(spec.tolerations[0].toleration_seconds, Some(300));
    let status = pod.status.unwrap();
    assert_eq!(status.conditions[0].last_transition_time.unwrap().seconds, Some(1_796_032_805));
    // And back to the same JSON.
    assert_eq!(envelope::decode_object(&bytes).unwrap(), object);
}

#[test]
fn k8s_pb_values_read_as_upstream_json() {
    let secret = core::Secret {
        metadata: Some(meta::ObjectMeta {
            name: Some("s".into()),
            // Go writes every non-pointer field: empty strings and zeros come along.
            namespace: Some(String::new()),
            generate_name: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(meta::Time::default()),
            ..Default::default()
        }),
        data: [("key".to_owned(), b"\x00\x01binary".to_vec())].into(),
        r#type: Some("Opaque".into()),
        ..Default::default()
    };
    let raw = secret.encode_to_vec();
    let json = decode(&raw, MessageType::of_kind("v1", "Secret").unwrap()).unwrap();
    assert_eq!(
        json,
        json!({"metadata": {"name": "s"}, "data": {"key": "AAFiaW5hcnk="}, "type": "Opaque"}),
        "empty strings, generation 0 and an empty time left out, base64 bytes"
    );
    // A Deployment with an int-or-string and a Go-style Time and MicroTime.
    let lease = k8s_pb::api::coordination::v1::Lease {
        spec: Some(k8s_pb::api::coordination::v1::LeaseSpec {
            holder_identity: Some("node-1".into()),
            lease_duration_seconds: Some(40),
            renew_time: Some(meta::MicroTime { seconds: Some(1_796_032_800), nanos: Some(123_456_000) }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let json =
        decode(&lease.encode_to_vec(), MessageType::of_kind("coordination.k8s.io/v1", "Lease").unwrap())
            .unwrap();
    assert_eq!(json["spec"]["renewTime"], "2026-11-30T10:00:00.123456Z");
    assert_eq!(json["spec"]["leaseDurationSeconds"], 40);
    let encoded = encode(&json, MessageType::of_kind("coordination.k8s.io/v1", "Lease").unwrap()).unwrap();
    let back = k8s_pb::api::coordination::v1::Lease::decode(encoded.as_slice()).unwrap();
    assert_eq!(back.spec.unwrap().renew_time.unwrap().nanos, Some(123_456_000));
}

/// The scheduler's informers read these in protobuf: a ResourceClaim's allocation (node selector,
/// device results) and a CSIStorageCapacity's quantities survive both ways.
#[test]
fn scheduler_objects_round_trip_through_k8s_pb() {
    use k8s_pb::api::resource::v1 as dra;
    let claim = json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": "default", "uid": "u-1", "resourceVersion": "7"},
        "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.example.com",
                 "allocationMode": "ExactCount", "count": 2, "selectors": [{"cel": {"expression": "device.driver == 'x'"}}]}}]}},
        "status": {"allocation": {"devices": {"results": [{"request": "g", "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}]},
                   "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}},
                   "reservedFor": [{"resource": "pods", "name": "p", "uid": "u-2"}]}
    });
    let bytes = envelope::encode_object(&claim).unwrap();
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(&bytes[4..]).unwrap();
    let typed = dra::ResourceClaim::decode(unknown.raw.unwrap().as_slice()).unwrap();
    let request = &typed.spec.unwrap().devices.unwrap().requests[0];
    assert_eq!(request.exactly.as_ref().and_then(|e| e.count), Some(2));
    let status = typed.status.unwrap();
    assert_eq!(status.allocation.unwrap().devices.unwrap().results[0].device.as_deref(), Some("gpu-0"));
    assert_eq!(status.reserved_for[0].uid.as_deref(), Some("u-2"));
    assert_eq!(envelope::decode_object(&bytes).unwrap(), claim);

    let capacity = json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
        "metadata": {"name": "c", "namespace": "kube-system"},
        "storageClassName": "fast", "capacity": "10Gi", "maximumVolumeSize": "1Gi",
        "nodeTopology": {"matchLabels": {"topology.example.com/zone": "a"}}
    });
    let bytes = envelope::encode_object(&capacity).unwrap();
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(&bytes[4..]).unwrap();
    let typed =
        k8s_pb::api::storage::v1::CSIStorageCapacity::decode(unknown.raw.unwrap().as_slice()).unwrap();
    assert_eq!(typed.capacity.and_then(|q| q.string).as_deref(), Some("10Gi"));
    assert_eq!(envelope::decode_object(&bytes).unwrap(), capacity);

    let rc = json!({"apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "rc", "namespace": "d"},
        "spec": {"replicas": 0, "selector": {"app": "web"}}, "status": {"replicas": 0}});
    let bytes = envelope::encode_object(&rc).unwrap();
    assert_eq!(envelope::decode_object(&bytes).unwrap(), rc, "replicas 0 is kept (a pointer)");
}

/// kube-proxy's ServiceCIDR informer reads these in protobuf: the CIDRs and the Ready condition
/// (a metav1.Condition with its Time) survive both ways, as does an IPAddress's parent.
#[test]
fn networking_objects_round_trip_through_k8s_pb() {
    use k8s_pb::api::networking::v1 as networking;
    let cidr = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
        "metadata": {"name": "kubernetes", "uid": "u-1", "resourceVersion": "3"},
        "spec": {"cidrs": ["10.96.0.0/16", "fd00:10:96::/112"]},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2025-06-01T12:00:00Z",
                                   "message": "Kubernetes default Service CIDR is ready", "reason": ""}]}
    });
    let bytes = envelope::encode_object(&cidr).unwrap();
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(&bytes[4..]).unwrap();
    let typed = networking::ServiceCIDR::decode(unknown.raw.unwrap().as_slice()).unwrap();
    assert_eq!(typed.spec.unwrap().cidrs, ["10.96.0.0/16", "fd00:10:96::/112"]);
    let condition = &typed.status.unwrap().conditions[0];
    assert_eq!((condition.r#type.as_deref(), condition.status.as_deref()), (Some("Ready"), Some("True")));
    // The empty reason is kept: metav1.Condition's reason is required (Go writes `"reason": ""`).
    assert_eq!(envelope::decode_object(&bytes).unwrap(), cidr);

    let ip = json!({"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress", "metadata": {"name": "10.96.0.10"},
        "spec": {"parentRef": {"resource": "services", "namespace": "kube-system", "name": "kube-dns"}}});
    let bytes = envelope::encode_object(&ip).unwrap();
    assert_eq!(envelope::decode_object(&bytes).unwrap(), ip);
}

#[test]
fn custom_resource_definitions_keep_their_schema_forms() {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object",
                                 "x-kubernetes-preserve-unknown-fields": true,
                                 "properties": {"size": {"type": "integer", "default": 3, "enum": [1, 3, 5]},
                                                "tags": {"type": "array", "items": {"type": "string"}},
                                                "extra": {"type": "object", "additionalProperties": {"type": "string"}},
                                                "open": {"type": "object", "additionalProperties": false}},
                                 "required": ["size"]}
                    }
                }}
            }]
        }
    });
    let bytes = envelope::encode_object(&crd).unwrap();
    let raw = envelope::unwrap(&bytes).unwrap().1;
    let typed =
        k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition::decode(raw)
            .unwrap();
    let schema = typed.spec.unwrap().versions[0].schema.clone().unwrap().open_apiv3_schema.unwrap();
    let spec = &schema.properties["spec"];
    assert_eq!(spec.x_kubernetes_preserve_unknown_fields, Some(true));
    assert_eq!(spec.properties["size"].default.clone().unwrap().raw.unwrap(), b"3");
    assert_eq!(spec.properties["open"].additional_properties.clone().unwrap().allows, Some(false));
    assert_eq!(envelope::decode_object(&bytes).unwrap(), crd);
}

#[test]
fn every_kind_has_its_message() {
    for (api_version, kind, message) in [
        ("v1", "Pod", "k8s.io.api.core.v1.Pod"),
        ("v1", "PodList", "k8s.io.api.core.v1.PodList"),
        ("apps/v1", "Deployment", "k8s.io.api.apps.v1.Deployment"),
        ("v1", "Status", "k8s.io.apimachinery.pkg.apis.meta.v1.Status"),
        ("apps/v1", "DeleteOptions", "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions"),
        (
            "meta.k8s.io/v1",
            "PartialObjectMetadataList",
            "k8s.io.apimachinery.pkg.apis.meta.v1.PartialObjectMetadataList",
        ),
        ("policy/v1", "Eviction", "k8s.io.api.policy.v1.Eviction"),
        ("v1", "ReplicationController", "k8s.io.api.core.v1.ReplicationController"),
        ("storage.k8s.io/v1", "CSINode", "k8s.io.api.storage.v1.CSINode"),
        ("storage.k8s.io/v1", "CSIDriverList", "k8s.io.api.storage.v1.CSIDriverList"),
        ("storage.k8s.io/v1", "CSIStorageCapacity", "k8s.io.api.storage.v1.CSIStorageCapacity"),
        ("storage.k8s.io/v1", "VolumeAttachment", "k8s.io.api.storage.v1.VolumeAttachment"),
        ("resource.k8s.io/v1", "DeviceClass", "k8s.io.api.resource.v1.DeviceClass"),
        ("resource.k8s.io/v1", "ResourceClaim", "k8s.io.api.resource.v1.ResourceClaim"),
        ("resource.k8s.io/v1", "ResourceSliceList", "k8s.io.api.resource.v1.ResourceSliceList"),
        ("networking.k8s.io/v1", "ServiceCIDR", "k8s.io.api.networking.v1.ServiceCIDR"),
        ("networking.k8s.io/v1", "ServiceCIDRList", "k8s.io.api.networking.v1.ServiceCIDRList"),
        ("networking.k8s.io/v1", "IPAddress", "k8s.io.api.networking.v1.IPAddress"),
    ] {
        assert_eq!(MessageType::of_kind(api_version, kind).map(MessageType::name), Some(message));
    }
    assert!(!has_protobuf("meta.k8s.io/v1", "Table"), "Table has no protobuf form upstream");
    assert!(!has_protobuf("example.com/v1", "Widget"));
}

#[test]
fn watch_frames_read_by_k8s_pb() {
    let object = envelope::encode_object(&pod()).unwrap();
    let frame = envelope::watch_frame("ADDED", &object);
    let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(len, frame.len() - 4);
    let event = meta::WatchEvent::decode(&frame[4..]).unwrap();
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    assert_eq!(event.object.unwrap().raw.unwrap(), object);
}

#[test]
fn times_and_durations_as_upstream_writes_them() {
    assert_eq!(forms::format_time(0, 999, false).unwrap(), "1970-01-01T00:00:00Z");
    assert_eq!(forms::format_time(1_796_032_800, 5_000, true).unwrap(), "2026-11-30T10:00:00.000005Z");
    assert_eq!(forms::parse_time("2026-11-30T11:00:00+01:00", false).unwrap(), (1_796_032_800, 0));
    // Before 1970 a fraction does not move the second (Go's Unix() counts down).
    assert_eq!(forms::parse_time("1969-12-31T23:59:59.5Z", false).unwrap(), (-1, 0));
    assert_eq!(forms::parse_time("1969-12-31T23:59:59.5Z", true).unwrap(), (-1, 500_000_000));
    assert_eq!(forms::format_time(-1, 500_000_000, true).unwrap(), "1969-12-31T23:59:59.500000Z");
    assert_eq!(forms::format_time(-1, 0, false).unwrap(), "1969-12-31T23:59:59Z");
    assert_eq!(
        forms::parse_time("2026-11-30T10:00:00.123456789Z", true).unwrap(),
        (1_796_032_800, 123_456_000)
    );
    for (nanos, text) in [
        (0, "0s"),
        (1_500, "1.5µs"),
        (300_000_000, "300ms"),
        (1_500_000_000, "1.5s"),
        (90_000_000_000, "1m30s"),
        (3_600_000_000_000, "1h0m0s"),
        (-5_000_000_000, "-5s"),
    ] {
        assert_eq!(forms::format_duration(nanos), text);
        assert_eq!(forms::parse_duration(text).unwrap(), nanos, "{text}");
    }
    assert!(forms::parse_duration("5").is_err());
    assert!(forms::parse_duration("1x").is_err());
}

#[test]
fn broken_envelopes_are_errors_not_panics() {
    let no_magic = envelope::decode_object_typed(b"{\"kind\":\"Pod\"}").unwrap_err();
    assert!(
        no_magic.error.0.starts_with("provided data does not appear to be a protobuf message"),
        "{no_magic}"
    );
    let no_kind = envelope::decode_object_typed(&envelope::wrap("v1", "", b"")).unwrap_err();
    assert_eq!(
        no_kind.error.0,
        "Object 'Kind' is missing in 'runtime.TypeMeta{APIVersion:\"v1\", Kind:\"\"}'"
    );
    let unknown = envelope::decode_object_typed(&envelope::wrap("v1", "Gadget", b"")).unwrap_err();
    assert!(unknown.error.0.starts_with("no kind \"Gadget\" is registered for version \"v1\""), "{unknown}");
    let garbage =
        envelope::decode_object_typed(&envelope::wrap("v1", "Pod", b"\x0a\xff\xff\xff")).unwrap_err();
    assert_eq!(garbage.type_meta.map(|t| t.kind).as_deref(), Some("Pod"));
    // Every truncation and many corruptions of a real envelope: an error or a value, never a panic.
    let valid = envelope::encode_object(&pod()).unwrap();
    for cut in 0..valid.len() {
        let _ = envelope::decode_object_typed(&valid[..cut]);
    }
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000 {
        let mut corrupted = valid.clone();
        for _ in 0..3 {
            // xorshift: reproducible positions and bytes.
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let at = 4 + (seed as usize) % (corrupted.len() - 4);
            corrupted[at] = (seed >> 32) as u8;
        }
        let _ = envelope::decode_object_typed(&corrupted);
    }
    // Deep nesting of a recursive message ends with an error, not a stack overflow.
    let props =
        MessageType::named("k8s.io.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps")
            .unwrap();
    let mut nested = Vec::new();
    for _ in 0..10_000 {
        // field `not` (a JSONSchemaProps) wrapping the previous bytes
        let mut outer = Vec::new();
        prost::encoding::encode_key(28, prost::encoding::WireType::LengthDelimited, &mut outer);
        prost::encoding::encode_varint(nested.len() as u64, &mut outer);
        outer.extend_from_slice(&nested);
        nested = outer;
    }
    assert!(decode(&nested, props).is_err());
    // Envelopes nested in RawExtensions (a ControllerRevision's data holding a ControllerRevision's
    // envelope, and so on) count as nesting too: an error, not a stack overflow.
    let mut revision = Vec::new();
    for _ in 0..20_000 {
        let inner = envelope::wrap("apps/v1", "ControllerRevision", &revision);
        let mut data = Vec::new();
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut data);
        prost::encoding::encode_varint(inner.len() as u64, &mut data);
        data.extend_from_slice(&inner);
        // field `data` (a RawExtension whose `raw` is the inner envelope)
        revision.clear();
        prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, &mut revision);
        prost::encoding::encode_varint(data.len() as u64, &mut revision);
        revision.extend_from_slice(&data);
    }
    let deep = envelope::decode_object_typed(&envelope::wrap("apps/v1", "ControllerRevision", &revision));
    assert_eq!(deep.unwrap_err().error.0, "object nested too deeply");
    // A few levels are fine.
    let shallow = envelope::wrap("apps/v1", "ControllerRevision", b"");
    let mut data = Vec::new();
    prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut data);
    prost::encoding::encode_varint(shallow.len() as u64, &mut data);
    data.extend_from_slice(&shallow);
    let mut outer = Vec::new();
    prost::encoding::encode_key(2, prost::encoding::WireType::LengthDelimited, &mut outer);
    prost::encoding::encode_varint(data.len() as u64, &mut outer);
    outer.extend_from_slice(&data);
    let object = envelope::decode_object(&envelope::wrap("apps/v1", "ControllerRevision", &outer)).unwrap();
    assert_eq!(object["data"]["kind"], "ControllerRevision");
}

#[test]
fn decoded_objects_read_back_as_json() {
    // A CRD's default (JSON carried in protobuf) nested deep enough that, inside the CRD, the
    // object's JSON is deeper than serde_json reads: refused, not stored unreadable.
    let crd = |depth: usize| {
        let mut default = json!(1);
        for _ in 0..depth {
            default = Value::Array(vec![default]);
        }
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "a.example.com"},
               "spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"type": "object",
                   "properties": {"x": {"default": default}}}}}]}})
    };
    let deep = envelope::encode_object(&crd(120)).unwrap();
    let refused = envelope::decode_object_typed(&deep).unwrap_err();
    assert_eq!(refused.error.0, "object nested too deeply");
    assert_eq!(refused.type_meta.map(|t| t.kind).as_deref(), Some("CustomResourceDefinition"));
    let message = MessageType::of_kind("apiextensions.k8s.io/v1", "CustomResourceDefinition").unwrap();
    assert!(decode(envelope::unwrap(&deep).unwrap().1, message).is_err());
    // Within the limit: decoded, and its JSON text parses again.
    let shallow = envelope::decode_object_typed(&envelope::encode_object(&crd(100)).unwrap()).unwrap();
    let default = |crd: &Value| {
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["x"]["default"].clone()
    };
    assert_eq!(default(&shallow), default(&crd(100)));
    serde_json::from_slice::<Value>(&serde_json::to_vec(&shallow).unwrap()).unwrap();
}

#[test]
fn json_bytes_transcode_as_values_encode() {
    let crd = {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "a.example.com"},
               "spec": {"versions": [{"name": "v1", "schema": {"openAPIV3Schema": {"type": "object",
                   "properties": {"x": {"type": "integer", "default": 1}}, "additionalProperties": true}}}]}})
    };
    let list = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "9"},
                      "items": [pod(), pod()]});
    for object in [
        pod(),
        crd,
        list,
        json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 404, "details": null}),
    ] {
        let bytes = serde_json::to_vec(&object).unwrap();
        let streamed = envelope::encode_object_json(&bytes).unwrap();
        assert_eq!(
            envelope::decode_object(&streamed).unwrap(),
            envelope::decode_object(&envelope::encode_object(&object).unwrap()).unwrap()
        );
    }
    // k8s-pb reads the one-pass form too, inline structs included.
    let streamed = envelope::encode_object_json(&serde_json::to_vec(&pod()).unwrap()).unwrap();
    let typed = core::Pod::decode(envelope::unwrap(&streamed).unwrap().1).unwrap();
    let spec = typed.spec.unwrap();
    let volume = spec.volumes[1].volume_source.as_ref().unwrap().config_map.as_ref().unwrap();
    assert_eq!(volume.local_object_reference.as_ref().unwrap().name.as_deref(), Some("cfg"));
    let probe = spec.containers[0].liveness_probe.as_ref().unwrap();
    assert_eq!(probe.handler.as_ref().unwrap().http_get.as_ref().unwrap().path.as_deref(), Some("/healthz"));
    assert_eq!(typed.metadata.unwrap().creation_timestamp.unwrap().seconds, Some(1_796_032_800));
    assert!(envelope::encode_object_json(b"{\"kind\":\"Pod\",\"apiVersion\":\"v1\",\"spec\":[1]}").is_err());
    assert!(envelope::encode_object_json(b"{\"kind\":\"Pod\"").is_err());
}
