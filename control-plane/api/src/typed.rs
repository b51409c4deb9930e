//! Objects checked against their Kubernetes types (k8s-openapi, 1.34): a body is read into the
//! resource's type and written back, which finds what upstream's strict decoding finds — fields of
//! the wrong type (an error) and fields the type does not have (unknown fields, reported or refused
//! per `fieldValidation`) — and duplicate fields, found while parsing.

use std::collections::BTreeSet;

use k8s_openapi::api::{
    apps, authentication, authorization, batch, certificates, coordination, core, discovery, events,
    networking, node, policy, rbac, resource, scheduling, storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use crate::resources::Resource;

fn round<T: serde::de::DeserializeOwned + serde::Serialize>(object: &Value) -> Result<Value, String> {
    let typed: T = serde_json::from_value(object.clone()).map_err(|e| e.to_string())?;
    serde_json::to_value(&typed).map_err(|e| e.to_string())
}

macro_rules! typed_resources {
    ($($group:literal $plural:literal => $ty:ty),* $(,)?) => {
        /// The object as its type reads and writes it, or why the type cannot read it. Resources
        /// without a type here come back as they are.
        pub fn round_trip(resource: &Resource, object: &Value) -> Result<Value, String> {
            if resource.custom {
                return custom_round_trip(resource, object);
            }
            let mut typed = match (resource.group, resource.plural) {
                $(($group, $plural) => round::<$ty>(object),)*
                _ => Ok(object.clone()),
            };
            if let Ok(typed) = &mut typed {
                keep_absent_pointers(resource, object, typed);
            }
            typed
        }

        /// Whether a built-in resource is read through a k8s-openapi type (every served one is).
        pub fn has_type(resource: &Resource) -> bool {
            matches!((resource.group, resource.plural), $(($group, $plural))|*)
        }
    };
}

/// Fields upstream's Go types hold as pointers that k8s-openapi types as required values: absent
/// from the body, they stay absent (nil) rather than becoming an empty object — an IPAddress's
/// `spec.parentRef`, which validation then reports missing, as upstream does.
fn keep_absent_pointers(resource: &Resource, object: &Value, typed: &mut Value) {
    if resource.group == "networking.k8s.io"
        && resource.plural == "ipaddresses"
        && object.pointer("/spec/parentRef").is_none_or(Value::is_null)
        && let Some(spec) = typed.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.remove("parentRef");
    }
}

typed_resources! {
    "" "namespaces" => core::v1::Namespace,
    "" "pods" => core::v1::Pod,
    "" "nodes" => core::v1::Node,
    "" "services" => core::v1::Service,
    "" "endpoints" => core::v1::Endpoints,
    "" "configmaps" => core::v1::ConfigMap,
    "" "secrets" => core::v1::Secret,
    "" "serviceaccounts" => core::v1::ServiceAccount,
    "" "events" => core::v1::Event,
    "" "persistentvolumes" => core::v1::PersistentVolume,
    "" "persistentvolumeclaims" => core::v1::PersistentVolumeClaim,
    "" "limitranges" => core::v1::LimitRange,
    "" "resourcequotas" => core::v1::ResourceQuota,
    "" "replicationcontrollers" => core::v1::ReplicationController,
    "apps" "daemonsets" => apps::v1::DaemonSet,
    "apps" "deployments" => apps::v1::Deployment,
    "apps" "replicasets" => apps::v1::ReplicaSet,
    "apps" "statefulsets" => apps::v1::StatefulSet,
    "events.k8s.io" "events" => events::v1::Event,
    "authentication.k8s.io" "selfsubjectreviews" => authentication::v1::SelfSubjectReview,
    "authentication.k8s.io" "tokenreviews" => authentication::v1::TokenReview,
    "authorization.k8s.io" "localsubjectaccessreviews" => authorization::v1::LocalSubjectAccessReview,
    "authorization.k8s.io" "selfsubjectaccessreviews" => authorization::v1::SelfSubjectAccessReview,
    "authorization.k8s.io" "selfsubjectrulesreviews" => authorization::v1::SelfSubjectRulesReview,
    "authorization.k8s.io" "subjectaccessreviews" => authorization::v1::SubjectAccessReview,
    "batch" "cronjobs" => batch::v1::CronJob,
    "batch" "jobs" => batch::v1::Job,
    "certificates.k8s.io" "certificatesigningrequests" => certificates::v1::CertificateSigningRequest,
    "networking.k8s.io" "ipaddresses" => networking::v1::IPAddress,
    "networking.k8s.io" "servicecidrs" => networking::v1::ServiceCIDR,
    "policy" "poddisruptionbudgets" => policy::v1::PodDisruptionBudget,
    "rbac.authorization.k8s.io" "clusterrolebindings" => rbac::v1::ClusterRoleBinding,
    "rbac.authorization.k8s.io" "clusterroles" => rbac::v1::ClusterRole,
    "rbac.authorization.k8s.io" "rolebindings" => rbac::v1::RoleBinding,
    "rbac.authorization.k8s.io" "roles" => rbac::v1::Role,
    "storage.k8s.io" "storageclasses" => storage::v1::StorageClass,
    "storage.k8s.io" "csidrivers" => storage::v1::CSIDriver,
    "storage.k8s.io" "csinodes" => storage::v1::CSINode,
    "storage.k8s.io" "csistoragecapacities" => storage::v1::CSIStorageCapacity,
    "storage.k8s.io" "volumeattachments" => storage::v1::VolumeAttachment,
    "scheduling.k8s.io" "priorityclasses" => scheduling::v1::PriorityClass,
    "coordination.k8s.io" "leases" => coordination::v1::Lease,
    "node.k8s.io" "runtimeclasses" => node::v1::RuntimeClass,
    "discovery.k8s.io" "endpointslices" => discovery::v1::EndpointSlice,
    "resource.k8s.io" "deviceclasses" => resource::v1::DeviceClass,
    "resource.k8s.io" "resourceclaims" => resource::v1::ResourceClaim,
    "resource.k8s.io" "resourceslices" => resource::v1::ResourceSlice,
    "apiextensions.k8s.io" "customresourcedefinitions" => CustomResourceDefinition,
}

/// A custom resource as its structural schema holds it (upstream's decoding of custom resources):
/// metadata read as an ObjectMeta, fields the schema does not specify pruned, then defaults from
/// the schema filled in. A resource no longer served comes back as it is.
fn custom_round_trip(resource: &Resource, object: &Value) -> Result<Value, String> {
    let Some(version) = crate::custom::version_of(resource) else { return Ok(object.clone()) };
    let mut object = object.clone();
    let Value::Object(map) = &mut object else { return Err("the object is not a JSON object".into()) };
    if let Some(metadata) = map.get_mut("metadata") {
        *metadata = round::<ObjectMeta>(metadata).map_err(|e| format!("metadata: {e}"))?;
    }
    version.schema.prune(&mut object, true);
    version.schema.apply_defaults(&mut object);
    Ok(object)
}

/// Paths (`spec.template.foo`, `spec.containers[0].bar`) present in `input` but not in what the type
/// wrote back. Nulls are not fields.
pub fn unknown_fields(input: &Value, typed: &Value) -> Vec<String> {
    let mut unknown = Vec::new();
    walk(input, Some(typed), "", &mut unknown);
    unknown
}

fn walk(input: &Value, typed: Option<&Value>, path: &str, unknown: &mut Vec<String>) {
    match input {
        Value::Object(map) => {
            for (key, value) in map {
                if value.is_null() {
                    continue;
                }
                let child = if path.is_empty() { key.clone() } else { format!("{path}.{key}") };
                match typed.and_then(|t| t.get(key)) {
                    Some(known) => walk(value, Some(known), &child, unknown),
                    None => unknown.push(child),
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                walk(item, typed.and_then(|t| t.get(i)), &format!("{path}[{i}]"), unknown);
            }
        }
        _ => {}
    }
}

/// Every key that appears twice in one JSON object of `body` (`metadata.name`, `spec.replicas`).
pub fn duplicate_fields(body: &[u8]) -> Vec<String> {
    let mut found = BTreeSet::new();
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    // A body that is not JSON is reported by the real parse; here it just has no duplicates.
    let _ = Scan { path: String::new(), found: &mut found }.deserialize(&mut deserializer);
    found.into_iter().collect()
}

struct Scan<'a> {
    path: String,
    found: &'a mut BTreeSet<String>,
}

impl<'de> DeserializeSeed<'de> for Scan<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scan<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = BTreeSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = if self.path.is_empty() { key.clone() } else { format!("{}.{key}", self.path) };
            if !seen.insert(key) {
                self.found.insert(path.clone());
            }
            map.next_value_seed(Scan { path, found: self.found })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while seq
            .next_element_seed(Scan { path: format!("{}[{i}]", self.path), found: self.found })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::resources::find;

    #[test]
    fn unknown_and_wrongly_typed_fields() {
        let deployments = find("apps", "v1", "deployments").unwrap();
        let body = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labels": {"free": "form"}},
            "spec": {"replicas": 2, "bogus": 1, "selector": {"matchLabels": {"a": "b"}},
                     "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i", "imagePolicy": "x"}]}}},
            "status": null});
        let typed = round_trip(deployments, &body).unwrap();
        assert_eq!(
            unknown_fields(&body, &typed),
            ["spec.bogus", "spec.template.spec.containers[0].imagePolicy"]
        );
        let wrong = json!({"metadata": {"name": "d"}, "spec": {"replicas": "two"}});
        assert!(round_trip(deployments, &wrong).unwrap_err().contains("invalid type"));
        let secrets = find("", "v1", "secrets").unwrap();
        assert!(
            round_trip(secrets, &json!({"metadata": {"name": "s"}, "data": {"a": "not base64!"}})).is_err()
        );
        assert!(
            unknown_fields(
                &json!({"data": {"a": "YQ=="}}),
                &round_trip(secrets, &json!({"data": {"a": "YQ=="}})).unwrap()
            )
            .is_empty()
        );
    }

    #[test]
    fn every_served_resource_has_its_type() {
        for r in crate::resources::RESOURCES {
            assert!(has_type(r), "{}/{} has no k8s-openapi type", r.group, r.plural);
        }
        let claims = find("resource.k8s.io", "v1", "resourceclaims").unwrap();
        let claim = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "gpu"},
            "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu", "count": 2, "typo": 1}}]}}});
        let typed = round_trip(claims, &claim).unwrap();
        assert_eq!(unknown_fields(&claim, &typed), ["spec.devices.requests[0].exactly.typo"]);
        let ips = find("networking.k8s.io", "v1", "ipaddresses").unwrap();
        let orphan = json!({"metadata": {"name": "10.0.0.1"}, "spec": {}});
        assert_eq!(round_trip(ips, &orphan).unwrap()["spec"], json!({}), "a nil parentRef stays nil");
        let parent = json!({"metadata": {"name": "10.0.0.1"}, "spec": {"parentRef": {}}});
        assert_eq!(
            round_trip(ips, &parent).unwrap()["spec"]["parentRef"],
            json!({"name": "", "resource": ""})
        );
        let rc = find("", "v1", "replicationcontrollers").unwrap();
        assert!(
            round_trip(rc, &json!({"spec": {"selector": {"app": 1}}})).unwrap_err().contains("invalid type")
        );
    }

    #[test]
    fn duplicates() {
        let body = br#"{"metadata": {"name": "a", "name": "b"}, "spec": {"containers": [{"image": "x", "image": "y"}]}, "kind": 1, "kind": 2}"#;
        assert_eq!(duplicate_fields(body), ["kind", "metadata.name", "spec.containers[0].image"]);
        assert!(duplicate_fields(br#"{"a": {"b": 1}, "c": {"b": 2}}"#).is_empty());
        assert!(duplicate_fields(b"not json").is_empty());
    }
}
