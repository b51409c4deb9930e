//! Conversion between a resource's served form and its stored form, for resources that share their
//! storage with another API version. events.k8s.io/v1 Events are stored as core v1 Events (upstream's
//! cohabiting resources: one object, served through both APIs), with upstream's field mapping
//! (kubernetes pkg/apis/events/v1/conversion.go): regarding ↔ involvedObject, note ↔ message,
//! reportingController ↔ reportingComponent, deprecatedSource ↔ source, deprecatedFirstTimestamp ↔
//! firstTimestamp, deprecatedLastTimestamp ↔ lastTimestamp, deprecatedCount ↔ count; the other
//! fields have the same names in both. events.k8s.io's field selectors name its own fields
//! (`regarding.name`, `reportingController`), read from the stored core Event, as upstream's field
//! label conversion maps them.

use serde_json::{Map, Value};

use crate::resources::Resource;

/// events.k8s.io/v1 name → core v1 name, for the fields whose names differ.
const EVENT_FIELDS: [(&str, &str); 7] = [
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn is_events_api(resource: &Resource) -> bool {
    resource.group == "events.k8s.io" && resource.plural == "events"
}

/// Whether objects of `resource` are served in another form than they are stored in.
pub fn converts(resource: &Resource) -> bool {
    is_events_api(resource) || resource.custom
}

/// Custom resources' conversion None: stored with the storage version's apiVersion, served with
/// the requested version's, and defaulted from the schema when read (as upstream defaults what it
/// reads from etcd).
fn custom_to_storage(resource: &Resource, mut object: Value) -> Value {
    if let (Some(version), Value::Object(map)) = (crate::custom::version_of(resource), &mut object) {
        map.insert("apiVersion".into(), Value::String(version.storage_api_version()));
    }
    object
}

fn custom_from_storage(resource: &Resource, mut object: Value) -> Value {
    if let Value::Object(map) = &mut object {
        map.insert("apiVersion".into(), Value::String(resource.api_version()));
    }
    if let Some(version) = crate::custom::version_of(resource) {
        version.schema.apply_defaults(&mut object);
    }
    object
}

/// Renames the top-level fields of `object` by `pairs` (from the first name to the second) and sets
/// its apiVersion. Fields already under their new name stay.
fn rename(
    object: Value,
    pairs: impl Iterator<Item = (&'static str, &'static str)>,
    api_version: &str,
) -> Value {
    let Value::Object(mut map) = object else { return object };
    for (from, to) in pairs {
        if let Some(value) = map.remove(from)
            && !map.contains_key(to)
        {
            map.insert(to.to_owned(), value);
        }
    }
    let mut out = Map::with_capacity(map.len());
    // apiVersion and kind first, as served objects have them.
    out.insert("apiVersion".into(), Value::String(api_version.to_owned()));
    out.insert("kind".into(), map.remove("kind").unwrap_or_else(|| Value::String("Event".into())));
    map.remove("apiVersion");
    out.extend(map);
    Value::Object(out)
}

/// The stored form of an object written through `resource`.
pub fn to_storage(resource: &Resource, object: Value) -> Value {
    if resource.custom {
        return custom_to_storage(resource, object);
    }
    if is_events_api(resource) && object.get("apiVersion").and_then(Value::as_str) != Some("v1") {
        return rename(object, EVENT_FIELDS.into_iter(), "v1");
    }
    object
}

/// A stored object as `resource` serves it.
pub fn from_storage(resource: &Resource, object: Value) -> Value {
    if resource.custom {
        return custom_from_storage(resource, object);
    }
    if is_events_api(resource) && object.get("apiVersion").and_then(Value::as_str) != Some("events.k8s.io/v1")
    {
        return rename(object, EVENT_FIELDS.into_iter().map(|(api, core)| (core, api)), "events.k8s.io/v1");
    }
    object
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::resources::find;

    #[test]
    fn events_round_trip_between_the_two_apis() {
        let events = find("events.k8s.io", "v1", "events").unwrap();
        let core_events = find("", "v1", "events").unwrap();
        let served = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "d"},
            "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "keel.dev/kubelet",
            "reportingInstance": "n1", "action": "Pulling", "reason": "Pulling", "type": "Normal",
            "regarding": {"kind": "Pod", "name": "p", "namespace": "d"}, "note": "pulling busybox",
            "deprecatedCount": 2, "series": {"count": 3, "lastObservedTime": "2026-01-01T00:00:01.000000Z"}
        });
        let stored = to_storage(events, served.clone());
        assert_eq!(stored["apiVersion"], "v1");
        assert_eq!(stored["involvedObject"]["name"], "p");
        assert_eq!(
            (&stored["message"], &stored["reportingComponent"], &stored["count"]),
            (&json!("pulling busybox"), &json!("keel.dev/kubelet"), &json!(2))
        );
        assert_eq!(stored["series"]["count"], 3);
        assert!(stored.get("regarding").is_none() && stored.get("note").is_none());
        assert_eq!(from_storage(events, stored.clone()), served);
        // Core readers see the stored form; core writes are stored as they are.
        assert_eq!(from_storage(core_events, stored.clone()), stored);
        assert_eq!(to_storage(core_events, stored.clone()), stored);
        // Something already in the target form is left as it is.
        assert_eq!(to_storage(events, stored.clone()), stored);
        assert_eq!(from_storage(events, served.clone()), served);
        assert!(converts(events) && !converts(core_events));
    }
}
