//! Server-side apply and field ownership (`metadata.managedFields`), with kube-apiserver 1.34's
//! semantics (apimachinery's `managedfields` package over structured-merge-diff):
//!
//! - [`apply`]: an `application/apply-patch+yaml` body merged into the live object under the
//!   type's schema, fields its manager stopped applying removed (when no one else owns them),
//!   conflicts with other managers refused unless forced;
//! - [`update`]: creates, updates and patches recorded as `Update` entries of their manager, who
//!   takes the fields it changed from the others.
//!
//! Entries are kept per manager, operation, apiVersion (updates only) and subresource; ordered
//! and time-stamped as upstream; updates past ten managers folded into `ancient-changes`. Objects
//! written before any tracking get a `before-first-apply` owner of what they hold on first apply.
//!
//! Submodules: [`fieldpath`] (paths, sets, `FieldsV1`), [`schema`] (the type view), [`typed`]
//! (field sets, comparison, merge, removal), [`updater`] (ownership of one write).

pub mod fieldpath;
pub mod schema;
pub mod typed;
pub mod updater;

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use self::fieldpath::{PathElement, Set};
use self::schema::{Schema, TypeDef};
use self::typed::Typed;
use self::updater::{Conflict, ManagedSets, UpdateError, Updater, VersionedSet};

/// `Apply` or `Update`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// Who owns a set of fields: an entry of managedFields without its fields and time (upstream's
/// manager identifier; appliers are one manager whatever apiVersion they apply).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ManagerId {
    pub manager: String,
    pub operation: Operation,
    /// Empty for appliers.
    pub api_version: String,
    pub subresource: String,
}

impl ManagerId {
    /// As upstream names a manager in conflict messages: `"kubectl" with subresource "scale"
    /// using apps/v1`.
    pub fn describe(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            out.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }
}

/// The decoded `metadata.managedFields` of an object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ManagedFields {
    pub sets: ManagedSets,
    /// Each manager's last change (RFC 3339, seconds), when known.
    pub times: BTreeMap<ManagerId, String>,
}

/// Upstream's maximum of Update entries before the oldest are folded together.
pub const MAX_UPDATE_MANAGERS: usize = 10;
/// Who the folded entries become.
pub const ANCIENT_CHANGES: &str = "ancient-changes";
/// Who owns what an object held before its first apply.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

impl ManagedFields {
    /// Reads `metadata.managedFields` (absent or null: none).
    pub fn decode(object: &Value) -> Result<ManagedFields, String> {
        let mut managed = ManagedFields::default();
        let Some(entries) = object.pointer("/metadata/managedFields").filter(|v| !v.is_null()) else {
            return Ok(managed);
        };
        let entries = entries.as_array().ok_or("managedFields must be a list")?;
        for (i, entry) in entries.iter().enumerate() {
            let text = |field: &str| entry.get(field).and_then(Value::as_str).unwrap_or_default().to_owned();
            let operation = match text("operation").as_str() {
                "Apply" => Operation::Apply,
                "Update" => Operation::Update,
                _ => return Err("operation must be `Apply` or `Update`".into()),
            };
            let api_version = text("apiVersion");
            if api_version.is_empty() {
                return Err("apiVersion must not be empty".into());
            }
            match text("fieldsType").as_str() {
                "FieldsV1" => {}
                "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
                other => return Err(format!("invalid fieldsType {other:?} in managed fields entry {i}")),
            }
            let set = Set::from_fields_v1(entry.get("fieldsV1").unwrap_or(&json!({})))
                .map_err(|e| format!("error decoding versioned set from managed fields entry {i}: {e}"))?;
            let id = ManagerId {
                manager: text("manager"),
                operation,
                api_version: if operation == Operation::Apply { String::new() } else { api_version.clone() },
                subresource: text("subresource"),
            };
            let time = text("time");
            if !time.is_empty() {
                managed.times.insert(id.clone(), time);
            }
            managed
                .sets
                .insert(id, VersionedSet { set, api_version, applied: operation == Operation::Apply });
        }
        Ok(managed)
    }

    /// The entries, ordered as upstream orders them: Apply before Update, then by time, manager,
    /// apiVersion and subresource.
    pub fn encode(&self) -> Vec<Value> {
        let mut entries: Vec<(&ManagerId, &VersionedSet, Option<&String>)> =
            self.sets.iter().map(|(id, set)| (id, set, self.times.get(id))).collect();
        entries.sort_by(|a, b| {
            (
                a.0.operation,
                a.2.map(|t| seconds(t)).unwrap_or(0),
                &a.0.manager,
                &a.1.api_version,
                &a.0.subresource,
            )
                .cmp(&(
                    b.0.operation,
                    b.2.map(|t| seconds(t)).unwrap_or(0),
                    &b.0.manager,
                    &b.1.api_version,
                    &b.0.subresource,
                ))
        });
        entries
            .into_iter()
            .map(|(id, versioned, time)| {
                let mut entry = Map::new();
                entry.insert("manager".into(), id.manager.clone().into());
                entry.insert("operation".into(), id.operation.as_str().into());
                entry.insert("apiVersion".into(), versioned.api_version.clone().into());
                if let Some(time) = time {
                    entry.insert("time".into(), time.clone().into());
                }
                entry.insert("fieldsType".into(), "FieldsV1".into());
                entry.insert("fieldsV1".into(), versioned.set.to_fields_v1());
                if !id.subresource.is_empty() {
                    entry.insert("subresource".into(), id.subresource.clone().into());
                }
                Value::Object(entry)
            })
            .collect()
    }

    /// Writes the entries into `object` (none: the field goes).
    pub fn write_to(&self, object: &mut Value) {
        let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) else { return };
        if self.sets.is_empty() {
            metadata.remove("managedFields");
        } else {
            metadata.insert("managedFields".into(), Value::Array(self.encode()));
        }
    }

    /// Folds the oldest Update entries into `ancient-changes` entries (one per apiVersion) until
    /// at most `max` Update entries are left (upstream's capManagersManager).
    fn cap_update_managers(&mut self, max: usize) {
        let mut updaters: Vec<ManagerId> =
            self.sets.iter().filter(|(_, s)| !s.applied).map(|(id, _)| id.clone()).collect();
        if updaters.len() <= max {
            return;
        }
        updaters.sort_by_key(|id| (self.times.get(id).map(|t| seconds(t)).unwrap_or(0), id.clone()));
        let mut length = updaters.len();
        let mut buckets: Vec<String> = Vec::new();
        for id in updaters {
            if length <= max {
                break;
            }
            let Some(owned) = self.sets.remove(&id) else { continue };
            let time = self.times.remove(&id);
            let bucket = ManagerId {
                manager: ANCIENT_CHANGES.into(),
                operation: Operation::Update,
                api_version: owned.api_version.clone(),
                subresource: String::new(),
            };
            if buckets.contains(&owned.api_version) {
                length -= 1;
            } else {
                buckets.push(owned.api_version.clone());
            }
            match self.sets.get_mut(&bucket) {
                Some(existing) => existing.set.union_with(&owned.set),
                None => {
                    self.sets.insert(bucket.clone(), owned);
                }
            }
            match time {
                Some(time) => self.times.insert(bucket, time),
                None => self.times.remove(&bucket),
            };
        }
    }
}

/// Seconds of an RFC 3339 time, for ordering (unreadable: 0).
fn seconds(time: &str) -> i64 {
    time.parse::<jiff::Timestamp>().map(jiff::Timestamp::as_second).unwrap_or(0)
}

/// Whether the managedFields a client sent ask for a reset: an empty list, or one empty entry.
fn is_reset(object: &Value) -> bool {
    match object.pointer("/metadata/managedFields") {
        Some(Value::Array(entries)) => {
            entries.is_empty() || (entries.len() == 1 && entries[0].as_object().is_some_and(Map::is_empty))
        }
        _ => false,
    }
}

/// The fields nobody owns: the object's identity and the server's metadata (upstream's
/// stripMetaManager).
fn strip_set() -> &'static Set {
    static SET: std::sync::LazyLock<Set> = std::sync::LazyLock::new(|| {
        let mut set = Set::new();
        let field = |name: &str| PathElement::Field(name.into());
        set.insert(&[field("apiVersion")]);
        set.insert(&[field("kind")]);
        set.insert(&[field("metadata")]);
        for name in [
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "clusterName",
            "generation",
            "managedFields",
            "resourceVersion",
        ] {
            set.insert(&[field("metadata"), field(name)]);
        }
        set
    });
    &SET
}

/// What one write is: the type's schema, the endpoint's apiVersion and subresource, the fields
/// nobody owns through it, and the time to stamp.
#[derive(Debug)]
pub struct Context<'s> {
    pub schema: &'s Schema,
    pub root: TypeDef,
    /// `apps/v1`
    pub api_version: String,
    pub kind: String,
    /// `status`, `scale`, or empty for the main resource.
    pub subresource: String,
    /// The strategy's reset fields (`status` on the main resource, `spec` on the status).
    pub ignored: Set,
    /// RFC 3339, seconds.
    pub now: String,
}

impl<'s> Context<'s> {
    /// A built-in type; `has_status` (the resource has a status subresource) decides what the
    /// main resource and the status subresource leave alone.
    pub fn builtin(
        api_version: &str,
        kind: &str,
        subresource: &str,
        has_status: bool,
        now: String,
    ) -> Context<'static> {
        let mut ignored = Set::new();
        let field = |name: &str| PathElement::Field(name.into());
        match subresource {
            "" | "scale" if has_status => ignored.insert(&[field("status")]),
            "status" => ignored.insert(&[field("spec")]),
            _ => {}
        }
        Context {
            schema: Schema::builtin(),
            root: Schema::builtin_root(api_version, kind),
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            subresource: subresource.to_owned(),
            ignored,
            now,
        }
    }

    /// A custom resource: a built-in type's context whose root is `root`, the type its
    /// CustomResourceDefinition's schema gives ([`TypeDef::from_structural`]).
    pub fn custom(
        api_version: &str,
        kind: &str,
        subresource: &str,
        has_status: bool,
        now: String,
        root: TypeDef,
    ) -> Context<'static> {
        Context { root, ..Context::builtin(api_version, kind, subresource, has_status, now) }
    }

    fn updater(&self) -> Updater<'_> {
        Updater { typed: Typed::new(self.schema), root: &self.root, ignored: &self.ignored }
    }

    fn id(&self, manager: &str, operation: Operation) -> ManagerId {
        ManagerId {
            manager: manager.to_owned(),
            operation,
            api_version: if operation == Operation::Update {
                self.api_version.clone()
            } else {
                String::new()
            },
            subresource: self.subresource.clone(),
        }
    }

    /// An Update by `manager` from `live` to `new` recorded in `managed` (upstream's
    /// managedFieldsUpdater over stripMetaManager over the structured merge): the fields it
    /// changed join what it owned before, stamped now.
    fn record_update(
        &self,
        live: &Value,
        new: &Value,
        managed: &mut ManagedFields,
        manager: &ManagerId,
    ) -> Result<(), UpdateError> {
        let current = ManagerId {
            manager: "current-operation".into(),
            operation: Operation::Update,
            api_version: String::new(),
            subresource: String::new(),
        };
        self.updater().update(live, new, &self.api_version, &mut managed.sets, &current)?;
        if let Some(mut changed) = managed.sets.remove(&current) {
            changed.set.remove_all(strip_set());
            if changed.set.is_empty() {
                return Ok(());
            }
            if let Some(previous) = managed.sets.remove(manager) {
                changed.set.merge(previous.set);
            }
            managed.sets.insert(manager.clone(), changed);
            managed.times.insert(manager.clone(), self.now.clone());
        }
        Ok(())
    }
}

/// The object without its managedFields (what the structured merge compares).
fn without_managed_fields(object: &Value) -> std::borrow::Cow<'_, Value> {
    if object.pointer("/metadata/managedFields").is_none() {
        return std::borrow::Cow::Borrowed(object);
    }
    let mut copy = object.clone();
    if let Some(metadata) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    std::borrow::Cow::Owned(copy)
}

/// Records a create (`live` is `None`), update or patch by `manager` in `new`'s managedFields,
/// as upstream's FieldManager.UpdateNoErrors: managedFields the client sent are taken when they
/// decode (an empty list resets them), else the live object's are kept; an object that had none
/// before an update stays untracked; a failure keeps the live object's entries.
pub fn update(ctx: &Context<'_>, live: Option<&Value>, new: &mut Value, manager: &str) {
    let empty = json!({});
    let live_object = live.unwrap_or(&empty);
    let live_managed = || ManagedFields::decode(live_object).unwrap_or_default();
    let mut managed = if !ctx.subresource.is_empty() {
        live_managed()
    } else if is_reset(new) {
        ManagedFields::default()
    } else {
        match ManagedFields::decode(new) {
            Ok(sent) if !sent.sets.is_empty() => sent,
            _ => live_managed(),
        }
    };
    if let Some(metadata) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    // Objects that were never tracked are not tracked from an update (upstream's skipNonApplied).
    let has_uid = live_object.pointer("/metadata/uid").and_then(Value::as_str).is_some_and(|u| !u.is_empty());
    if managed.sets.is_empty() && has_uid {
        return;
    }
    let id = ctx.id(manager, Operation::Update);
    match ctx.record_update(&without_managed_fields(live_object), new, &mut managed, &id) {
        Ok(()) => {
            managed.cap_update_managers(MAX_UPDATE_MANAGERS);
            managed.write_to(new);
        }
        Err(_) => {
            if let (Some(entries), Some(metadata)) = (
                live_object.pointer("/metadata/managedFields").cloned(),
                new.get_mut("metadata").and_then(Value::as_object_mut),
            ) {
                metadata.insert("managedFields".into(), entries);
            }
        }
    }
}

/// Why an apply was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum ApplyError {
    /// 400, with upstream's message.
    BadRequest(String),
    /// 409: fields other managers own.
    Conflicts(Vec<Conflict>),
    /// 500 (upstream wraps these as internal errors).
    Internal(String),
}

impl ApplyError {
    /// Upstream's message: `Apply failed with 1 conflict: conflict with "m" using v1: .spec.x`,
    /// or the conflicts grouped by manager.
    pub fn conflict_message(conflicts: &[Conflict]) -> String {
        if let [one] = conflicts {
            return format!(
                "Apply failed with 1 conflict: conflict with {}: {}",
                one.manager.describe(),
                one.path
            );
        }
        let mut by_manager: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for conflict in conflicts {
            by_manager.entry(conflict.manager.describe()).or_default().push(conflict.path.to_string());
        }
        let mut lines = Vec::new();
        for (manager, paths) in by_manager {
            lines.push(format!("conflicts with {manager}:"));
            lines.extend(paths.into_iter().map(|path| format!("- {path}")));
        }
        format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
    }

    /// The Status causes: one `FieldManagerConflict` per field, naming the manager.
    pub fn conflict_causes(conflicts: &[Conflict]) -> Vec<(String, String)> {
        conflicts
            .iter()
            .map(|c| (c.path.to_string(), format!("conflict with {}", c.manager.describe())))
            .collect()
    }
}

/// `manager` applies `applied` to `live` (an empty object when the apply creates it), forced or
/// not: the object to write, with its managedFields. Defaulting, the strategy and validation of
/// the result are the caller's, as upstream's are the registry's.
pub fn apply(
    ctx: &Context<'_>,
    live: &Value,
    applied: &Value,
    manager: &str,
    force: bool,
) -> Result<Value, ApplyError> {
    let mut managed = ManagedFields::decode(live)
        .map_err(|e| ApplyError::Internal(format!("failed to decode managed fields: {e}")))?;
    let api_version = applied.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = applied.get("kind").and_then(Value::as_str).unwrap_or_default();
    if api_version != ctx.api_version || kind != ctx.kind {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        return Err(ApplyError::BadRequest(format!("invalid object type: {group}/{version}, Kind={kind}")));
    }
    if applied.pointer("/metadata/managedFields").is_some_and(|m| !m.is_null()) {
        return Err(ApplyError::BadRequest("metadata.managedFields must be nil".into()));
    }
    let client_side = has_last_applied(live);
    let live = without_managed_fields(live).into_owned();
    // What the object held before its first apply gets an owner first.
    if managed.sets.is_empty() {
        let id = ctx.id(BEFORE_FIRST_APPLY, Operation::Update);
        ctx.record_update(&json!({}), &live, &mut managed, &id).map_err(|e| match e {
            UpdateError::Typed(e) => {
                ApplyError::Internal(format!("failed to create manager for existing fields: {e}"))
            }
            UpdateError::Conflicts(c) => ApplyError::Conflicts(c),
        })?;
    }
    let id = ctx.id(manager, Operation::Apply);
    let result = ctx
        .updater()
        .apply(&live, applied, &ctx.api_version, &mut managed.sets, &id, force)
        .map_err(|e| match e {
            UpdateError::Conflicts(conflicts) => ApplyError::Conflicts(conflicts),
            UpdateError::Typed(e) => ApplyError::Internal(format!(
                "failed to create typed patch object ({}; {}): {e}",
                object_name(applied),
                gvk(applied)
            )),
        })?;
    if let Some(owned) = managed.sets.get_mut(&id) {
        owned.set.remove_all(strip_set());
        if owned.set.is_empty() {
            managed.sets.remove(&id);
        }
    }
    let mut object = match result {
        Some(object) => {
            managed.times.insert(id, ctx.now.clone());
            object
        }
        None => live,
    };
    managed.times.retain(|id, _| managed.sets.contains_key(id));
    managed.write_to(&mut object);
    // kubectl's server-side apply keeps a client-side apply annotation it finds up to date, so a
    // later client-side apply starts from it (upstream's lastAppliedUpdater).
    if manager == "kubectl" && client_side {
        let mut last = applied.clone();
        if let Some(annotations) = last.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
            annotations.remove(LAST_APPLIED);
            if annotations.is_empty() {
                last["metadata"].as_object_mut().map(|m| m.remove("annotations"));
            }
        }
        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
            if let Some(annotations) = annotations.as_object_mut() {
                annotations.insert(LAST_APPLIED.into(), last.to_string().into());
            }
        }
    }
    Ok(object)
}

/// kubectl's client-side apply annotation.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn has_last_applied(object: &Value) -> bool {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(Value::as_str)
        .is_some_and(|a| !a.is_empty())
}

fn object_name(object: &Value) -> String {
    let text = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or_default().to_owned();
    format!("{}/{}", text("/metadata/namespace"), text("/metadata/name"))
}

fn gvk(object: &Value) -> String {
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    format!("{group}/{version}, Kind={kind}")
}

#[cfg(test)]
mod tests;
