//! The kubelet's Events about its pods (core/v1, source component `kubelet`, as upstream's
//! recorder writes them). Sent in the background: an Event that cannot be written is logged, and
//! never holds up a pod.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;

/// Writes Events for one node.
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    node_name: String,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("node_name", &self.node_name).finish_non_exhaustive()
    }
}

/// upstream's event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Normal,
    Warning,
}

impl Recorder {
    pub fn new(client: kube::Client, node_name: String) -> Recorder {
        Recorder { client, node_name }
    }

    /// An Event about `pod` (its container `container` when given: the fieldPath
    /// `spec.containers{name}` or `spec.initContainers{name}`).
    pub fn pod_event(
        &self,
        pod: &Pod,
        field_path: Option<String>,
        kind: Kind,
        reason: &str,
        message: String,
    ) {
        let namespace = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let name = pod.metadata.name.clone().unwrap_or_default();
        let now = Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name),
                namespace: Some(namespace.clone()),
                uid: pod.metadata.uid.clone(),
                resource_version: pod.metadata.resource_version.clone(),
                field_path,
            },
            reason: Some(reason.to_owned()),
            message: Some(message),
            source: Some(EventSource {
                component: Some("kubelet".into()),
                host: Some(self.node_name.clone()),
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: None::<MicroTime>,
            count: Some(1),
            type_: Some(
                match kind {
                    Kind::Normal => "Normal",
                    Kind::Warning => "Warning",
                }
                .into(),
            ),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some(self.node_name.clone()),
            ..Event::default()
        };
        let events: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        tokio::spawn(async move {
            if let Err(error) = events.create(&PostParams::default(), &event).await {
                tracing::debug!(%error, "could not write an event");
            }
        });
    }
}
