//! Server-side printing: the `meta.k8s.io/v1` `Table` kube-apiserver 1.34 answers with when a
//! client (kubectl) asks for `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`.
//!
//! Every resource in [`RESOURCES`](crate::resources::RESOURCES) is printed with upstream's columns
//! and cell logic (`pkg/printers/internalversion/printers.go`: the `TableColumnDefinition`s of
//! `AddHandlers` and each `printX` function). The server always prints "wide": every column, those
//! of priority 1 (kubectl's `-o wide`) included, is in `columnDefinitions` and in each row. Resources
//! without a printer (limitranges, roles, clusterroles) get upstream's `DefaultTableConvertor`:
//! `Name` and `Created At`.
//!
//! Objects are the JSON kube-apiserver serves. Printers read them as upstream's decoded internal
//! objects: an absent field is Go's zero value (`<none>`, `<unknown>`, `0` where upstream prints
//! those), and the defaults upstream's decoding applies to every stored object are applied to the
//! fields printed (`replicas` 1, a Service's `ClusterIP` type and `TCP` ports, a Secret's `Opaque`
//! type, a Namespace's `Active` phase, PV/PVC `Pending` phase and `Filesystem` mode, a PV's `Retain`
//! policy, a CronJob's `suspend: false`, a PriorityClass's `PreemptLowerPriority`), so an object
//! stored without them prints as upstream shows it. Nothing here panics, whatever the input.
//!
//! Rows carry what `includeObject` asks for ([`IncludeObject`]); a watch sends one Table per event,
//! with column definitions in the first only ([`WatchTables`]). Ages are computed against the
//! `now` passed in, which keeps everything pure.

mod apps;
mod batch;
mod certificates;
mod cluster;
mod core;
mod csi;
mod custom;
mod dra;
mod duration;
mod event;
mod networking;
mod pod;
mod quantity;
mod storage;
mod value;

use jiff::Timestamp;
use serde_json::{Map, Value, json};

pub use self::duration::human_duration;
use crate::resources::Resource;
use crate::status::{ApiError, FieldError};

/// What each row's `object` carries: the `includeObject` query parameter (upstream's
/// `metav1.IncludeObjectPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// `object: null`.
    None,
    /// A `PartialObjectMetadata` with the object's whole `metadata` (the default).
    #[default]
    Metadata,
    /// The object itself, as served.
    Object,
}

impl IncludeObject {
    /// Parses the `includeObject` query value; absent or empty means [`IncludeObject::Metadata`].
    ///
    /// # Errors
    /// Upstream's 400 for any other value: `Unable to convert to Table as requested: includeObject:
    /// Invalid value: "x": must be 'Metadata', 'Object', 'None', or empty`.
    pub fn from_query(value: Option<&str>) -> Result<Self, ApiError> {
        match value.unwrap_or("") {
            "" | "Metadata" => Ok(Self::Metadata),
            "None" => Ok(Self::None),
            "Object" => Ok(Self::Object),
            other => Err(ApiError::BadRequest(format!(
                "Unable to convert to Table as requested: {}",
                FieldError::invalid(
                    "includeObject",
                    &json!(other),
                    "must be 'Metadata', 'Object', 'None', or empty"
                )
            ))),
        }
    }
}

/// The group version of the Table (and of the rows' `PartialObjectMetadata`): kubectl asks for
/// `meta.k8s.io/v1`, falling back to `v1beta1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TableVersion {
    /// `meta.k8s.io/v1`.
    #[default]
    V1,
    /// `meta.k8s.io/v1beta1` (the same shape).
    V1Beta1,
}

impl TableVersion {
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
    #[must_use]
    pub const fn api_version(self) -> &'static str {
        match self {
            Self::V1 => "meta.k8s.io/v1",
            Self::V1Beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// How a Table is rendered (upstream's `metav1.TableOptions` plus the negotiated version).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableOptions {
    /// What rows carry as `object`.
    pub include: IncludeObject,
    /// The Table's group version.
    pub version: TableVersion,
    /// Leave `columnDefinitions` out (`null`), as upstream does for every watch event but the first.
    pub no_headers: bool,
}

impl TableOptions {
    /// `meta.k8s.io/v1`, with headers, rows carrying `include`.
    #[must_use]
    pub fn new(include: IncludeObject) -> Self {
        Self { include, ..Self::default() }
    }
}

/// One column of a printer (upstream's `metav1.TableColumnDefinition`).
#[derive(Debug, Clone, Copy)]
struct Column {
    name: &'static str,
    kind: &'static str,
    format: &'static str,
    description: &'static str,
    priority: i32,
}

impl Column {
    /// A priority-0 column of this type.
    const fn new(name: &'static str, kind: &'static str, description: &'static str) -> Self {
        Self { name, kind, format: "", description, priority: 0 }
    }

    /// A priority-0 string column.
    const fn string(name: &'static str, description: &'static str) -> Self {
        Self::new(name, "string", description)
    }

    /// The same column at priority 1 (shown by `kubectl get -o wide`).
    const fn wide(mut self) -> Self {
        self.priority = 1;
        self
    }

    fn to_json(self) -> Value {
        json!({
            "name": self.name,
            "type": self.kind,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

/// `metav1.ObjectMeta{}.SwaggerDoc()["name"]`.
const NAME_DOC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
/// `metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]`.
const CREATION_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const CONTAINERS_DOC: &str = "Names of each container in the template.";
const IMAGES_DOC: &str = "Images referenced by each container in the template.";

/// The NAME column every printer starts with (format `name`).
const NAME: Column =
    Column { name: "Name", kind: "string", format: "name", description: NAME_DOC, priority: 0 };
/// The AGE column.
const AGE: Column = Column::string("Age", CREATION_DOC);
/// The wide CONTAINERS column of workload printers.
const CONTAINERS: Column = Column::string("Containers", CONTAINERS_DOC).wide();
/// The wide IMAGES column of workload printers.
const IMAGES: Column = Column::string("Images", IMAGES_DOC).wide();

/// `DefaultTableConvertor`'s columns.
const DEFAULT_COLUMNS: &[Column] =
    &[NAME, Column { name: "Created At", kind: "date", format: "", description: CREATION_DOC, priority: 0 }];

/// A printed row: its cells and upstream's row conditions (only pods have some).
#[derive(Debug, Default)]
struct Row {
    cells: Vec<Value>,
    conditions: Vec<Value>,
}

impl Row {
    fn new(cells: Vec<Value>) -> Self {
        Self { cells, conditions: Vec::new() }
    }
}

/// Which printer a resource has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Printer {
    Namespace,
    Pod,
    Node,
    Service,
    Endpoints,
    ConfigMap,
    Secret,
    ServiceAccount,
    /// Core events and events.k8s.io events share one printer (upstream prints the internal core
    /// Event both convert to); the flag tells which field names the served JSON uses by default.
    Event {
        events_api: bool,
    },
    PersistentVolume,
    PersistentVolumeClaim,
    ResourceQuota,
    ReplicationController,
    DaemonSet,
    Deployment,
    ReplicaSet,
    StatefulSet,
    CronJob,
    Job,
    CertificateSigningRequest,
    ServiceCidr,
    IpAddress,
    PodDisruptionBudget,
    ClusterRoleBinding,
    RoleBinding,
    StorageClass,
    CsiDriver,
    CsiNode,
    CsiStorageCapacity,
    VolumeAttachment,
    PriorityClass,
    Lease,
    RuntimeClass,
    EndpointSlice,
    DeviceClass,
    ResourceClaim,
    ResourceSlice,
    /// `rest.NewDefaultTableConvertor`: limitranges, roles, clusterroles, customresourcedefinitions
    /// (and anything unknown).
    Default,
}

impl Printer {
    fn of(resource: &Resource) -> Self {
        match (resource.group, resource.plural) {
            ("", "namespaces") => Self::Namespace,
            ("", "pods") => Self::Pod,
            ("", "nodes") => Self::Node,
            ("", "services") => Self::Service,
            ("", "endpoints") => Self::Endpoints,
            ("", "configmaps") => Self::ConfigMap,
            ("", "secrets") => Self::Secret,
            ("", "serviceaccounts") => Self::ServiceAccount,
            ("", "events") => Self::Event { events_api: false },
            ("events.k8s.io", "events") => Self::Event { events_api: true },
            ("", "persistentvolumes") => Self::PersistentVolume,
            ("", "persistentvolumeclaims") => Self::PersistentVolumeClaim,
            ("", "resourcequotas") => Self::ResourceQuota,
            ("", "replicationcontrollers") => Self::ReplicationController,
            ("apps", "daemonsets") => Self::DaemonSet,
            ("apps", "deployments") => Self::Deployment,
            ("apps", "replicasets") => Self::ReplicaSet,
            ("apps", "statefulsets") => Self::StatefulSet,
            ("batch", "cronjobs") => Self::CronJob,
            ("batch", "jobs") => Self::Job,
            ("certificates.k8s.io", "certificatesigningrequests") => Self::CertificateSigningRequest,
            ("networking.k8s.io", "servicecidrs") => Self::ServiceCidr,
            ("networking.k8s.io", "ipaddresses") => Self::IpAddress,
            ("policy", "poddisruptionbudgets") => Self::PodDisruptionBudget,
            ("rbac.authorization.k8s.io", "clusterrolebindings") => Self::ClusterRoleBinding,
            ("rbac.authorization.k8s.io", "rolebindings") => Self::RoleBinding,
            ("storage.k8s.io", "storageclasses") => Self::StorageClass,
            ("storage.k8s.io", "csidrivers") => Self::CsiDriver,
            ("storage.k8s.io", "csinodes") => Self::CsiNode,
            ("storage.k8s.io", "csistoragecapacities") => Self::CsiStorageCapacity,
            ("storage.k8s.io", "volumeattachments") => Self::VolumeAttachment,
            ("scheduling.k8s.io", "priorityclasses") => Self::PriorityClass,
            ("coordination.k8s.io", "leases") => Self::Lease,
            ("node.k8s.io", "runtimeclasses") => Self::RuntimeClass,
            ("discovery.k8s.io", "endpointslices") => Self::EndpointSlice,
            ("resource.k8s.io", "deviceclasses") => Self::DeviceClass,
            ("resource.k8s.io", "resourceclaims") => Self::ResourceClaim,
            ("resource.k8s.io", "resourceslices") => Self::ResourceSlice,
            _ => Self::Default,
        }
    }

    fn columns(self) -> &'static [Column] {
        match self {
            Self::Namespace => core::NAMESPACE_COLUMNS,
            Self::Pod => pod::COLUMNS,
            Self::Node => core::NODE_COLUMNS,
            Self::Service => core::SERVICE_COLUMNS,
            Self::Endpoints => core::ENDPOINTS_COLUMNS,
            Self::ConfigMap => core::CONFIG_MAP_COLUMNS,
            Self::Secret => core::SECRET_COLUMNS,
            Self::ServiceAccount => core::SERVICE_ACCOUNT_COLUMNS,
            Self::Event { .. } => event::COLUMNS,
            Self::PersistentVolume => storage::PERSISTENT_VOLUME_COLUMNS,
            Self::PersistentVolumeClaim => storage::PERSISTENT_VOLUME_CLAIM_COLUMNS,
            Self::ResourceQuota => core::RESOURCE_QUOTA_COLUMNS,
            Self::ReplicationController => apps::REPLICATION_CONTROLLER_COLUMNS,
            Self::DaemonSet => apps::DAEMON_SET_COLUMNS,
            Self::Deployment => apps::DEPLOYMENT_COLUMNS,
            Self::ReplicaSet => apps::REPLICA_SET_COLUMNS,
            Self::StatefulSet => apps::STATEFUL_SET_COLUMNS,
            Self::CronJob => batch::CRON_JOB_COLUMNS,
            Self::Job => batch::JOB_COLUMNS,
            Self::CertificateSigningRequest => certificates::CERTIFICATE_SIGNING_REQUEST_COLUMNS,
            Self::ServiceCidr => networking::SERVICE_CIDR_COLUMNS,
            Self::IpAddress => networking::IP_ADDRESS_COLUMNS,
            Self::PodDisruptionBudget => cluster::POD_DISRUPTION_BUDGET_COLUMNS,
            Self::ClusterRoleBinding => cluster::CLUSTER_ROLE_BINDING_COLUMNS,
            Self::RoleBinding => cluster::ROLE_BINDING_COLUMNS,
            Self::StorageClass => storage::STORAGE_CLASS_COLUMNS,
            Self::CsiDriver => csi::CSI_DRIVER_COLUMNS,
            Self::CsiNode => csi::CSI_NODE_COLUMNS,
            Self::CsiStorageCapacity => csi::CSI_STORAGE_CAPACITY_COLUMNS,
            Self::VolumeAttachment => csi::VOLUME_ATTACHMENT_COLUMNS,
            Self::PriorityClass => cluster::PRIORITY_CLASS_COLUMNS,
            Self::Lease => cluster::LEASE_COLUMNS,
            Self::RuntimeClass => cluster::RUNTIME_CLASS_COLUMNS,
            Self::EndpointSlice => cluster::ENDPOINT_SLICE_COLUMNS,
            Self::DeviceClass => dra::DEVICE_CLASS_COLUMNS,
            Self::ResourceClaim => dra::RESOURCE_CLAIM_COLUMNS,
            Self::ResourceSlice => dra::RESOURCE_SLICE_COLUMNS,
            Self::Default => DEFAULT_COLUMNS,
        }
    }

    fn print(self, object: &Value, now: Timestamp) -> Row {
        match self {
            Self::Namespace => core::namespace(object, now),
            Self::Pod => pod::print(object, now),
            Self::Node => core::node(object, now),
            Self::Service => core::service(object, now),
            Self::Endpoints => core::endpoints(object, now),
            Self::ConfigMap => core::config_map(object, now),
            Self::Secret => core::secret(object, now),
            Self::ServiceAccount => core::service_account(object, now),
            Self::Event { events_api } => event::print(object, events_api, now),
            Self::PersistentVolume => storage::persistent_volume(object, now),
            Self::PersistentVolumeClaim => storage::persistent_volume_claim(object, now),
            Self::ResourceQuota => core::resource_quota(object, now),
            Self::ReplicationController => apps::replication_controller(object, now),
            Self::DaemonSet => apps::daemon_set(object, now),
            Self::Deployment => apps::deployment(object, now),
            Self::ReplicaSet => apps::replica_set(object, now),
            Self::StatefulSet => apps::stateful_set(object, now),
            Self::CronJob => batch::cron_job(object, now),
            Self::Job => batch::job(object, now),
            Self::CertificateSigningRequest => certificates::certificate_signing_request(object, now),
            Self::ServiceCidr => networking::service_cidr(object, now),
            Self::IpAddress => networking::ip_address(object, now),
            Self::PodDisruptionBudget => cluster::pod_disruption_budget(object, now),
            Self::ClusterRoleBinding | Self::RoleBinding => cluster::role_binding(object, now),
            Self::StorageClass => storage::storage_class(object, now),
            Self::CsiDriver => csi::csi_driver(object, now),
            Self::CsiNode => csi::csi_node(object, now),
            Self::CsiStorageCapacity => csi::csi_storage_capacity(object, now),
            Self::VolumeAttachment => csi::volume_attachment(object, now),
            Self::PriorityClass => cluster::priority_class(object, now),
            Self::Lease => cluster::lease(object, now),
            Self::RuntimeClass => cluster::runtime_class(object, now),
            Self::EndpointSlice => cluster::endpoint_slice(object, now),
            Self::DeviceClass => dra::device_class(object, now),
            Self::ResourceClaim => dra::resource_claim(object, now),
            Self::ResourceSlice => dra::resource_slice(object, now),
            Self::Default => default_row(object),
        }
    }
}

/// `DefaultTableConvertor`'s row: the name and the creation time in RFC 3339 (UTC, seconds), the
/// zero time (`0001-01-01T00:00:00Z`) when there is none.
fn default_row(object: &Value) -> Row {
    let created = value::time_at(object, &["metadata", "creationTimestamp"])
        .map_or_else(|| "0001-01-01T00:00:00Z".to_owned(), |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    Row::new(vec![json!(value::name(object)), json!(created)])
}

/// The `columnDefinitions` of a resource's Tables: every column (wide ones included, with priority
/// 1), each `{name, type, format, description, priority}`.
#[must_use]
pub fn column_definitions(resource: &Resource) -> Vec<Value> {
    if let Some(version) = crate::custom::version_of(resource) {
        return custom::columns(&version);
    }
    Printer::of(resource).columns().iter().map(|c| c.to_json()).collect()
}

/// A row of `resource`'s printer, custom resources' included.
fn print(resource: &Resource, object: &Value, now: Timestamp) -> Row {
    match crate::custom::version_of(resource) {
        Some(version) => custom::row(&version, object, now),
        None => Printer::of(resource).print(object, now),
    }
}

/// The cells of one object's row, one per column of [`column_definitions`].
#[must_use]
pub fn cells(resource: &Resource, object: &Value, now: Timestamp) -> Vec<Value> {
    print(resource, object, now).cells
}

/// One row: `{"cells": [...], "conditions"?: [...], "object": ...}`, `object` as `include` asks
/// (see [`row_object`]).
#[must_use]
pub fn row(
    resource: &Resource,
    object: &Value,
    include: IncludeObject,
    version: TableVersion,
    now: Timestamp,
) -> Value {
    let Row { cells, conditions } = print(resource, object, now);
    let mut row = Map::new();
    row.insert("cells".to_owned(), Value::Array(cells));
    if !conditions.is_empty() {
        row.insert("conditions".to_owned(), Value::Array(conditions));
    }
    row.insert("object".to_owned(), row_object(resource, object, include, version));
    Value::Object(row)
}

/// What a row carries as `object` (upstream's `asTable`):
/// - [`IncludeObject::Object`]: the object as served (its `kind`/`apiVersion` filled in from the
///   resource when missing);
/// - [`IncludeObject::Metadata`]: `{"kind": "PartialObjectMetadata", "apiVersion": <the Table's>,
///   "metadata": <the whole metadata>}`, `creationTimestamp` `null` when unset as Go encodes it;
/// - [`IncludeObject::None`]: `null`, except for the bookmark that ends a watch's initial events
///   (annotation `k8s.io/initial-events-end: "true"`), which keeps its metadata so that clients see it.
#[must_use]
pub fn row_object(
    resource: &Resource,
    object: &Value,
    include: IncludeObject,
    version: TableVersion,
) -> Value {
    let initial_events_end = value::annotation(object, "k8s.io/initial-events-end") == Some("true");
    match include {
        IncludeObject::Object => {
            let mut object = object.clone();
            if let Value::Object(map) = &mut object {
                if !map.get("kind").is_some_and(Value::is_string) {
                    map.insert("kind".to_owned(), json!(resource.kind));
                }
                if !map.get("apiVersion").is_some_and(Value::is_string) {
                    map.insert("apiVersion".to_owned(), json!(resource.api_version()));
                }
            }
            object
        }
        IncludeObject::None if !initial_events_end => Value::Null,
        IncludeObject::Metadata | IncludeObject::None => {
            let mut metadata = match object.get("metadata") {
                Some(Value::Object(map)) => map.clone(),
                _ => Map::new(),
            };
            metadata.entry("creationTimestamp").or_insert(Value::Null);
            json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": version.api_version(),
                "metadata": metadata,
            })
        }
    }
}

/// A Table of the items of a list (`GET` of a collection), the common case: `meta.k8s.io/v1`,
/// headers, rows carrying `include`. `list_metadata` is the list's `metadata`, whose
/// `resourceVersion`, `continue` and `remainingItemCount` the Table keeps.
#[must_use]
pub fn table(
    resource: &Resource,
    objects: &[Value],
    list_metadata: Value,
    include: IncludeObject,
    now: Timestamp,
) -> Value {
    table_with(resource, objects, list_metadata, TableOptions::new(include), now)
}

/// [`table`] with every option:
/// `{"kind": "Table", "apiVersion", "metadata", "columnDefinitions", "rows"}`.
///
/// As upstream, `columnDefinitions` is `null` with [`TableOptions::no_headers`], and `rows` is `[]`
/// for an empty list except with the default convertor (limitranges, roles, clusterroles), whose
/// empty list upstream encodes as `rows: null`.
#[must_use]
pub fn table_with(
    resource: &Resource,
    objects: &[Value],
    list_metadata: Value,
    options: TableOptions,
    now: Timestamp,
) -> Value {
    let mut metadata = Map::new();
    if let Value::Object(mut list) = list_metadata {
        for key in ["resourceVersion", "continue"] {
            if let Some(value) = list.remove(key).filter(|v| v.as_str().is_some_and(|s| !s.is_empty())) {
                metadata.insert(key.to_owned(), value);
            }
        }
        if let Some(count) = list.remove("remainingItemCount").filter(Value::is_number) {
            metadata.insert("remainingItemCount".to_owned(), count);
        }
    }
    let printer = Printer::of(resource);
    // Custom resources' tableconvertor, like the default one, leaves an empty list's rows null.
    let rows = if objects.is_empty() && (printer == Printer::Default || resource.custom) {
        Value::Null
    } else {
        objects.iter().map(|o| row(resource, o, options.include, options.version, now)).collect()
    };
    assemble(resource, metadata, rows, options)
}

/// A Table of one object (`GET` of one object, and each watch event): one row, and the object's
/// `resourceVersion` as the Table's.
#[must_use]
pub fn object_table(resource: &Resource, object: &Value, options: TableOptions, now: Timestamp) -> Value {
    let mut metadata = Map::new();
    let resource_version = value::str_at(object, &["metadata", "resourceVersion"]);
    if !resource_version.is_empty() {
        metadata.insert("resourceVersion".to_owned(), json!(resource_version));
    }
    let rows = Value::Array(vec![row(resource, object, options.include, options.version, now)]);
    assemble(resource, metadata, rows, options)
}

fn assemble(resource: &Resource, metadata: Map<String, Value>, rows: Value, options: TableOptions) -> Value {
    let columns = if options.no_headers { Value::Null } else { Value::Array(column_definitions(resource)) };
    let mut table = Map::new();
    table.insert("kind".to_owned(), json!("Table"));
    table.insert("apiVersion".to_owned(), json!(options.version.api_version()));
    table.insert("metadata".to_owned(), Value::Object(metadata));
    table.insert("columnDefinitions".to_owned(), columns);
    table.insert("rows".to_owned(), rows);
    Value::Object(table)
}

/// The objects of a watch served as Tables (`?watch=true` with a Table `Accept`): each event's
/// `object` is a one-row Table ([`object_table`]), and only the first event carries
/// `columnDefinitions`; later ones have `columnDefinitions: null` (upstream's watch encoder sets
/// `NoHeaders` once it has encoded an event). `ERROR` events' `Status` objects pass through
/// unchanged, and still count as the first event. Bookmarks are printed like any object (a row of
/// mostly empty cells), and keep their metadata even with `includeObject=None` when they end the
/// initial events.
#[derive(Debug, Clone)]
pub struct WatchTables {
    options: TableOptions,
}

impl WatchTables {
    /// A watch whose first event will carry the column definitions, unless `options.no_headers`.
    #[must_use]
    pub fn new(options: TableOptions) -> Self {
        Self { options }
    }

    /// The `object` of the next watch event.
    pub fn event_object(&mut self, resource: &Resource, object: &Value, now: Timestamp) -> Value {
        let is_status = object.get("kind").and_then(Value::as_str) == Some("Status")
            && object.get("apiVersion").and_then(Value::as_str) == Some("v1");
        let result =
            if is_status { object.clone() } else { object_table(resource, object, self.options, now) };
        self.options.no_headers = true;
        result
    }
}

#[cfg(test)]
mod test_support {
    use jiff::Timestamp;
    use serde_json::Value;

    use crate::resources::{RESOURCES, Resource};

    /// The instant every test computes ages against.
    pub(super) fn now() -> Timestamp {
        "2025-06-01T12:00:00Z".parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    /// The served resource `group`/`plural`.
    pub(super) fn resource(group: &str, plural: &str) -> &'static Resource {
        RESOURCES.iter().find(|r| r.group == group && r.plural == plural).expect("a served resource")
    }

    /// The cells of `object` printed as `group`/`plural`, checked against the column count.
    pub(super) fn cells(group: &str, plural: &str, object: &Value) -> Vec<Value> {
        let resource = resource(group, plural);
        let cells = super::cells(resource, object, now());
        assert_eq!(cells.len(), super::column_definitions(resource).len(), "one cell per column");
        cells
    }

    /// The column names of `group`/`plural`, upper-cased as kubectl prints them, wide ones last as
    /// declared.
    pub(super) fn headers(group: &str, plural: &str) -> Vec<String> {
        super::column_definitions(resource(group, plural))
            .iter()
            .map(|c| c["name"].as_str().unwrap_or_default().to_uppercase())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::test_support::{now, resource};
    use super::*;
    use crate::resources::RESOURCES;

    fn pod() -> Value {
        json!({
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "web", "namespace": "default", "resourceVersion": "42", "uid": "u1",
                         "labels": {"app": "web"}, "creationTimestamp": "2025-06-01T11:55:00Z"},
            "spec": {"containers": [{"name": "c", "image": "nginx"}], "nodeName": "n1"},
            "status": {"phase": "Succeeded", "podIP": "10.0.0.5",
                       "containerStatuses": [{"name": "c", "ready": false, "restartCount": 0,
                           "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}
        })
    }

    #[test]
    fn include_object_values() {
        assert_eq!(IncludeObject::from_query(None), Ok(IncludeObject::Metadata));
        assert_eq!(IncludeObject::from_query(Some("")), Ok(IncludeObject::Metadata));
        assert_eq!(IncludeObject::from_query(Some("None")), Ok(IncludeObject::None));
        assert_eq!(IncludeObject::from_query(Some("Object")), Ok(IncludeObject::Object));
        let error = IncludeObject::from_query(Some("object")).unwrap_err();
        assert_eq!(error.code(), 400);
        assert_eq!(
            error.to_string(),
            "Unable to convert to Table as requested: includeObject: Invalid value: \"object\": must be 'Metadata', 'Object', 'None', or empty"
        );
    }

    #[test]
    fn every_resource_has_its_printer() {
        let defaults: Vec<&str> =
            RESOURCES.iter().filter(|r| Printer::of(r) == Printer::Default).map(|r| r.plural).collect();
        assert_eq!(
            defaults,
            [
                "limitranges",
                "selfsubjectreviews",
                "tokenreviews",
                "localsubjectaccessreviews",
                "selfsubjectaccessreviews",
                "selfsubjectrulesreviews",
                "subjectaccessreviews",
                "clusterroles",
                "roles",
                "customresourcedefinitions"
            ],
            "no printer upstream"
        );
    }

    #[test]
    fn every_resource_has_its_name_columns_and_prints_any_input() {
        for r in RESOURCES {
            let columns = column_definitions(r);
            let name_columns: Vec<&Value> = columns.iter().filter(|c| c["format"] == "name").collect();
            // Upstream declares a VolumeAttachment's attacher a `name` column too.
            let expected = if r.plural == "volumeattachments" { 2 } else { 1 };
            assert_eq!(name_columns.len(), expected, "{}", r.plural);
            for c in &columns {
                assert!(c["description"].is_string() && c["type"].is_string() && c["priority"].is_number());
            }
            // Nothing to read: no panic, one cell per column (upstream's IPAddress printer adds
            // an age cell it declares no column for).
            let expected = if r.plural == "ipaddresses" { columns.len() + 1 } else { columns.len() };
            for object in [json!({}), json!(null), json!([1, 2]), json!({"metadata": 5, "spec": "x"})] {
                assert_eq!(cells(r, &object, now()).len(), expected, "{}", r.plural);
            }
        }
    }

    #[test]
    fn list_table_with_metadata_rows() {
        let pods = resource("", "pods");
        let list_meta = json!({"resourceVersion": "77", "continue": "tok", "remainingItemCount": 3,
                               "selfLink": "/x"});
        let table = table(pods, &[pod()], list_meta, IncludeObject::Metadata, now());
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
        assert_eq!(
            table["metadata"],
            json!({"resourceVersion": "77", "continue": "tok", "remainingItemCount": 3})
        );
        assert_eq!(table["columnDefinitions"].as_array().map(Vec::len), Some(9));
        assert_eq!(
            table["columnDefinitions"][0],
            json!({"name": "Name", "type": "string", "format": "name", "description": NAME_DOC, "priority": 0})
        );
        assert_eq!(table["columnDefinitions"][5]["priority"], 1);
        let row = &table["rows"][0];
        assert_eq!(
            row["cells"],
            json!(["web", "0/1", "Completed", "0", "5m", "10.0.0.5", "n1", "<none>", "<none>"])
        );
        assert_eq!(
            row["conditions"],
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded",
                    "message": "The pod has completed successfully."}])
        );
        assert_eq!(
            row["object"],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": pod()["metadata"]})
        );
    }

    #[test]
    fn include_object_shapes() {
        let pods = resource("", "pods");
        let mut bare = pod();
        if let Some(map) = bare.as_object_mut() {
            map.remove("kind");
            map.remove("apiVersion");
        }
        let full = row(pods, &bare, IncludeObject::Object, TableVersion::V1, now());
        assert_eq!(full["object"], pod(), "the object, kind and apiVersion filled in");
        let none = row(pods, &pod(), IncludeObject::None, TableVersion::V1, now());
        assert_eq!(none["object"], Value::Null);
        assert!(none.as_object().is_some_and(|m| m.contains_key("object")), "object: null, not absent");
        let no_meta = row(pods, &json!({}), IncludeObject::Metadata, TableVersion::V1Beta1, now());
        assert_eq!(
            no_meta["object"],
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1beta1",
                   "metadata": {"creationTimestamp": null}})
        );
        let running = json!({"metadata": {"name": "p"}, "status": {"phase": "Running"}});
        assert!(
            row(pods, &running, IncludeObject::None, TableVersion::V1, now()).get("conditions").is_none()
        );
    }

    #[test]
    fn empty_lists() {
        let pods = resource("", "pods");
        let roles = resource("rbac.authorization.k8s.io", "roles");
        let t = table(pods, &[], json!({"resourceVersion": "5"}), IncludeObject::Metadata, now());
        assert_eq!(t["rows"], json!([]));
        let t = table(roles, &[], Value::Null, IncludeObject::Metadata, now());
        assert_eq!(t["rows"], Value::Null, "the default convertor appends to a nil slice");
        assert_eq!(t["metadata"], json!({}));
        assert_eq!(t["columnDefinitions"].as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn single_object_table() {
        let options = TableOptions { include: IncludeObject::None, ..TableOptions::default() };
        let t = object_table(resource("", "pods"), &pod(), options, now());
        assert_eq!(t["metadata"], json!({"resourceVersion": "42"}));
        assert_eq!(t["rows"].as_array().map(Vec::len), Some(1));
        let headless = TableOptions { no_headers: true, ..options };
        assert_eq!(
            object_table(resource("", "pods"), &pod(), headless, now())["columnDefinitions"],
            Value::Null
        );
    }

    #[test]
    fn watch_sends_headers_once() {
        let pods = resource("", "pods");
        let mut watch = WatchTables::new(TableOptions::new(IncludeObject::Metadata));
        let first = watch.event_object(pods, &pod(), now());
        assert_eq!(first["columnDefinitions"].as_array().map(Vec::len), Some(9));
        let second = watch.event_object(pods, &pod(), now());
        assert_eq!(second["columnDefinitions"], Value::Null);
        assert_eq!(second["rows"][0]["cells"][0], "web");

        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410});
        let mut watch = WatchTables::new(TableOptions::new(IncludeObject::None));
        assert_eq!(watch.event_object(pods, &status, now()), status);
        let bookmark = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"resourceVersion": "99", "annotations": {"k8s.io/initial-events-end": "true"}}});
        let event = watch.event_object(pods, &bookmark, now());
        assert_eq!(event["columnDefinitions"], Value::Null, "the Status event was the first");
        assert_eq!(event["metadata"], json!({"resourceVersion": "99"}));
        assert_eq!(
            event["rows"][0]["cells"],
            json!(["", "0/0", "", "0", "<unknown>", "<none>", "<none>", "<none>", "<none>"])
        );
        assert_eq!(event["rows"][0]["object"]["metadata"]["resourceVersion"], "99");
    }

    #[test]
    fn default_convertor_rows() {
        let role = json!({"metadata": {"name": "reader", "creationTimestamp": "2024-02-29T08:09:10Z"}});
        let r = resource("rbac.authorization.k8s.io", "roles");
        assert_eq!(cells(r, &role, now()), vec![json!("reader"), json!("2024-02-29T08:09:10Z")]);
        assert_eq!(cells(r, &json!({}), now()), vec![json!(""), json!("0001-01-01T00:00:00Z")]);
        let offset = json!({"metadata": {"name": "x", "creationTimestamp": "2024-02-29T10:09:10.5+02:00"}});
        assert_eq!(cells(r, &offset, now())[1], "2024-02-29T08:09:10Z");
        let columns = column_definitions(resource("", "limitranges"));
        assert_eq!(
            columns[1],
            json!({"name": "Created At", "type": "date", "format": "", "description": CREATION_DOC, "priority": 0})
        );
        assert_eq!(column_definitions(resource("rbac.authorization.k8s.io", "clusterroles")).len(), 2);
    }
}
