//! Events, core (`v1`) and `events.k8s.io/v1` alike: upstream serves both from one storage and
//! prints the internal core Event both convert to (`printEvent`). The `events.k8s.io` names map onto
//! the core ones as upstream's conversion does: `regarding` → `involvedObject`, `note` → `message`,
//! `deprecatedSource`/`deprecatedFirstTimestamp`/`deprecatedLastTimestamp`/`deprecatedCount` → the
//! fields without the prefix, `reportingController` → `reportingComponent`.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::value::{at, int_at, name, present, since, str_at, time_at};
use super::{Column, NAME, Row};

pub(super) const COLUMNS: &[Column] = &[
    Column::string("Last Seen", "The time at which the most recent occurrence of this event was recorded."),
    Column::string("Type", "Type of this event (Normal, Warning), new types could be added in the future"),
    Column::string(
        "Reason",
        "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
    ),
    Column::string("Object", "The object that this event is about."),
    Column::string(
        "Subobject",
        "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.",
    )
    .wide(),
    Column::string("Source", "The component reporting this event. Should be a short machine understandable string.")
        .wide(),
    Column::string("Message", "A human-readable description of the status of this operation."),
    Column::string("First Seen", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)")
        .wide(),
    Column::string("Count", "The number of times this event has occurred.").wide(),
    NAME.wide(),
];

/// The field names of one API version.
struct Names {
    involved_object: &'static str,
    message: &'static str,
    source: &'static str,
    first_timestamp: &'static str,
    last_timestamp: &'static str,
    count: &'static str,
    reporting_controller: &'static str,
}

const CORE: Names = Names {
    involved_object: "involvedObject",
    message: "message",
    source: "source",
    first_timestamp: "firstTimestamp",
    last_timestamp: "lastTimestamp",
    count: "count",
    reporting_controller: "reportingComponent",
};

const EVENTS_API: Names = Names {
    involved_object: "regarding",
    message: "note",
    source: "deprecatedSource",
    first_timestamp: "deprecatedFirstTimestamp",
    last_timestamp: "deprecatedLastTimestamp",
    count: "deprecatedCount",
    reporting_controller: "reportingController",
};

/// Upstream's `formatEventSource`: the component (or reporting controller), then `, host` (or
/// reporting instance) when there is one.
fn source(event: &Value, names: &Names) -> String {
    let first_non_empty = |a: &'static str, b: &'static str| {
        Some(str_at(event, &[names.source, a]))
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| str_at(event, &[b]))
    };
    let component = first_non_empty("component", names.reporting_controller);
    let instance = first_non_empty("host", "reportingInstance");
    if instance.is_empty() { component.to_owned() } else { format!("{component}, {instance}") }
}

/// Prints an event; `events_api` says which field names the object uses when its `apiVersion` does
/// not tell (`events.k8s.io/...` or `v1`).
pub(super) fn print(event: &Value, events_api: bool, now: Timestamp) -> Row {
    let names = match str_at(event, &["apiVersion"]) {
        v if v.starts_with("events.k8s.io/") => &EVENTS_API,
        "v1" => &CORE,
        _ if events_api => &EVENTS_API,
        _ => &CORE,
    };
    let first = match time_at(event, &[names.first_timestamp]) {
        Some(first) => since(Some(first), now),
        None => since(time_at(event, &["eventTime"]), now),
    };
    let mut last = match time_at(event, &[names.last_timestamp]) {
        Some(last) => since(Some(last), now),
        None => first.clone(),
    };
    let mut count = int_at(event, &[names.count]);
    if present(event, &["series"]) {
        last = since(time_at(event, &["series", "lastObservedTime"]), now);
        count = int_at(event, &["series", "count"]);
    } else if count == 0 {
        // Singleton events of the new API have no count.
        count = 1;
    }
    let involved = at(event, &[names.involved_object]);
    let kind = involved.map_or("", |o| str_at(o, &["kind"])).to_lowercase();
    let target = match involved.map_or("", |o| str_at(o, &["name"])) {
        "" => kind,
        object => format!("{kind}/{object}"),
    };
    Row::new(vec![
        json!(last),
        json!(str_at(event, &["type"])),
        json!(str_at(event, &["reason"])),
        json!(target),
        json!(involved.map_or("", |o| str_at(o, &["fieldPath"]))),
        json!(source(event, names)),
        json!(str_at(event, &[names.message]).trim()),
        json!(first),
        json!(count),
        json!(name(event)),
    ])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{cells, headers};

    #[test]
    fn columns() {
        let expected = [
            "LAST SEEN",
            "TYPE",
            "REASON",
            "OBJECT",
            "SUBOBJECT",
            "SOURCE",
            "MESSAGE",
            "FIRST SEEN",
            "COUNT",
            "NAME",
        ];
        assert_eq!(headers("", "events"), expected);
        assert_eq!(headers("events.k8s.io", "events"), expected);
    }

    #[test]
    fn core_event() {
        let event = json!({
            "kind": "Event", "apiVersion": "v1",
            "metadata": {"name": "web-7d4b9.17f0a1b2c3d4e5f6", "namespace": "default", "creationTimestamp": "2025-06-01T11:00:00Z"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-7d4b9", "fieldPath": "spec.containers{app}"},
            "reason": "BackOff", "message": "Back-off restarting failed container app\n", "type": "Warning",
            "source": {"component": "kubelet", "host": "worker-1"},
            "firstTimestamp": "2025-06-01T11:00:00Z", "lastTimestamp": "2025-06-01T11:58:30Z", "count": 12
        });
        assert_eq!(
            cells("", "events", &event),
            [
                json!("90s"),
                json!("Warning"),
                json!("BackOff"),
                json!("pod/web-7d4b9"),
                json!("spec.containers{app}"),
                json!("kubelet, worker-1"),
                json!("Back-off restarting failed container app"),
                json!("60m"),
                json!(12),
                json!("web-7d4b9.17f0a1b2c3d4e5f6")
            ]
        );
    }

    #[test]
    fn new_style_events_through_either_resource() {
        // Written by an events.k8s.io client, read back through core v1: eventTime, series, no count.
        let core = json!({
            "apiVersion": "v1", "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Node", "name": "worker-1"},
            "reason": "Starting", "message": "Starting kubelet.", "type": "Normal",
            "eventTime": "2025-06-01T11:59:00.000000Z", "reportingComponent": "kubelet", "reportingInstance": "worker-1",
            "source": {}
        });
        assert_eq!(
            cells("", "events", &core),
            [
                json!("60s"),
                json!("Normal"),
                json!("Starting"),
                json!("node/worker-1"),
                json!(""),
                json!("kubelet, worker-1"),
                json!("Starting kubelet."),
                json!("60s"),
                json!(1),
                json!("e1")
            ]
        );
        let events_api = json!({
            "apiVersion": "events.k8s.io/v1", "metadata": {"name": "e2"},
            "regarding": {"kind": "Deployment", "name": "web"}, "note": "Scaled up replica set web-1 to 3",
            "reason": "ScalingReplicaSet", "type": "Normal", "eventTime": null,
            "deprecatedFirstTimestamp": "2025-06-01T10:00:00Z", "deprecatedLastTimestamp": "2025-06-01T11:00:00Z",
            "deprecatedCount": 4, "deprecatedSource": {"component": "deployment-controller"},
            "series": {"count": 6, "lastObservedTime": "2025-06-01T11:59:30.000000Z"}
        });
        assert_eq!(
            cells("events.k8s.io", "events", &events_api),
            [
                json!("30s"),
                json!("Normal"),
                json!("ScalingReplicaSet"),
                json!("deployment/web"),
                json!(""),
                json!("deployment-controller"),
                json!("Scaled up replica set web-1 to 3"),
                json!("120m"),
                json!(6),
                json!("e2")
            ]
        );
        // Without apiVersion, the resource decides which names are read.
        let mut unversioned = events_api.clone();
        unversioned.as_object_mut().map(|m| m.remove("apiVersion"));
        assert_eq!(cells("events.k8s.io", "events", &unversioned)[3], "deployment/web");
        assert_eq!(cells("", "events", &unversioned)[3], "");
    }

    #[test]
    fn empty_event() {
        let cells = cells("", "events", &json!({}));
        assert_eq!(
            cells,
            [
                json!("<unknown>"),
                json!(""),
                json!(""),
                json!(""),
                json!(""),
                json!(""),
                json!(""),
                json!("<unknown>"),
                json!(1),
                json!("")
            ]
        );
    }
}
