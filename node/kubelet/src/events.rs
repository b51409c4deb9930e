//! The kubelet's Events about its pods (core/v1, source component `kubelet`, as upstream's
//! recorder writes them). Sent in the background, in order, by one task: an Event that cannot be
//! written is logged, and never holds up a pod. A repeat of an Event (same object, field, type,
//! reason and message) within 10 minutes raises its count and lastTimestamp instead of writing a
//! new one, as upstream's EventCorrelator does — a pod backing off for an hour is one Event.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use tokio::sync::mpsc;

/// How long a repeated Event is counted on the one already written (upstream's
/// defaultAggregateIntervalInSeconds / the event cache's lifetime).
const REPEAT_WINDOW: Duration = Duration::from_secs(600);
/// Events waiting to be written before new ones are dropped (logged).
const QUEUE: usize = 1000;

/// Writes Events for one node.
#[derive(Clone)]
pub struct Recorder {
    node_name: String,
    queue: mpsc::Sender<Event>,
}

/// What makes two Events the same one (upstream's getEventKey, without the times).
fn key(event: &Event) -> String {
    let object = &event.involved_object;
    format!(
        "{}/{}/{}/{}/{}/{}",
        object.uid.as_deref().unwrap_or_default(),
        object.field_path.as_deref().unwrap_or_default(),
        event.type_.as_deref().unwrap_or_default(),
        event.reason.as_deref().unwrap_or_default(),
        event.message.as_deref().unwrap_or_default(),
        object.namespace.as_deref().unwrap_or_default(),
    )
}

/// The writer: creates an Event, or raises the count of the same one written within
/// [`REPEAT_WINDOW`].
async fn write(client: kube::Client, mut queue: mpsc::Receiver<Event>) {
    let mut written: HashMap<String, (String, i32, Instant)> = HashMap::new();
    while let Some(event) = queue.recv().await {
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let events: Api<Event> = Api::namespaced(client.clone(), &namespace);
        written.retain(|_, (_, _, at)| at.elapsed() < REPEAT_WINDOW);
        let key = key(&event);
        if let Some((name, count, _)) = written.get(&key).cloned() {
            let patch = serde_json::json!({"count": count + 1, "lastTimestamp": event.last_timestamp});
            match events.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {
                    written.insert(key, (name, count + 1, Instant::now()));
                    continue;
                }
                // Gone (its TTL, or deleted): written anew below.
                Err(error) => tracing::debug!(%error, "could not count a repeated event"),
            }
        }
        match events.create(&PostParams::default(), &event).await {
            Ok(created) => {
                written.insert(key, (created.metadata.name.unwrap_or_default(), 1, Instant::now()));
            }
            Err(error) => tracing::debug!(%error, "could not write an event"),
        }
    }
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
    /// A recorder and the task writing its Events (which ends with the last recorder).
    pub fn new(client: kube::Client, node_name: String) -> Recorder {
        let (queue, receiver) = mpsc::channel(QUEUE);
        tokio::spawn(write(client, receiver));
        Recorder { node_name, queue }
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
        // Whole seconds, as the API keeps times.
        let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now());
        let name = pod.metadata.name.clone().unwrap_or_default();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!("{name}.{:x}", Timestamp::now().as_nanosecond())),
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
        if self.queue.try_send(event).is_err() {
            tracing::warn!("the event queue is full; an event was dropped");
        }
    }
}
