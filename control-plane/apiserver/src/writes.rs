//! Writes to existing objects: update (PUT), patch, the status / scale / finalize subresources, and
//! deletion with upstream's semantics — preconditions, dry runs, finalizers that hold an object
//! with a deletionTimestamp until they are removed, propagationPolicy recorded as the orphan /
//! foregroundDeletion finalizers (the garbage collector itself is the controller manager's), graceful
//! deletion of scheduled pods, namespaces Terminating until finalized — and deletecollection.

use keel_api::resources::Resource;
use keel_api::status::{ApiError, GroupResource};
use keel_api::strategy;
use keel_store::Outcome;
use serde_json::{Value, json};

use crate::context::Context;
use crate::filter::Filter;
use crate::handlers::{
    Handlers, PatchBody, Prior, Query, RETRIES, Reply, collection_prefix, parse_revision, store_error,
};
use crate::objects;
use crate::request::ResourceRequest;

/// What a delete asks (DeleteOptions from the body, or the query's parameters).
#[derive(Debug, Default, Clone)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub propagation_policy: Option<String>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    pub dry_run: bool,
}

impl DeleteOptions {
    /// The body's DeleteOptions (if any) over the query's parameters.
    pub fn from(body: Option<&Value>, query: &Query) -> DeleteOptions {
        let mut options = DeleteOptions {
            grace_period_seconds: query.grace_period_seconds,
            propagation_policy: query.propagation_policy.clone(),
            dry_run: query.dry_run,
            ..DeleteOptions::default()
        };
        if let Some(body) = body {
            if let Some(grace) = body.get("gracePeriodSeconds").and_then(Value::as_i64) {
                options.grace_period_seconds = Some(grace);
            }
            if let Some(policy) = body.get("propagationPolicy").and_then(Value::as_str) {
                options.propagation_policy = Some(policy.to_owned());
            }
            if body.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
                options.propagation_policy.get_or_insert_with(|| "Orphan".to_owned());
            }
            options.precondition_uid =
                body.pointer("/preconditions/uid").and_then(Value::as_str).map(str::to_owned);
            options.precondition_resource_version =
                body.pointer("/preconditions/resourceVersion").and_then(Value::as_str).map(str::to_owned);
            if body.get("dryRun").and_then(Value::as_array).is_some_and(|d| d.iter().any(|v| v == "All")) {
                options.dry_run = true;
            }
        }
        options
    }
}

fn is_csr(resource: &Resource) -> bool {
    resource.group == "certificates.k8s.io" && resource.plural == "certificatesigningrequests"
}

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn later(seconds: i64) -> String {
    let then = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .unwrap_or_else(|_| jiff::Timestamp::now());
    then.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn finalizers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Whether an object being deleted has nothing left holding it: no finalizer, and no grace period
/// still running (a graceful pod deletion ends with a delete of grace 0, the kubelet's).
fn ready_to_go(resource: &Resource, object: &Value) -> bool {
    if object.pointer("/metadata/deletionTimestamp").is_none() || !finalizers(object).is_empty() {
        return false;
    }
    if object.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0) > 0 {
        return false;
    }
    // A namespace also waits for its spec finalizers (the namespace controller empties it).
    !(resource.plural == "namespaces"
        && object.pointer("/spec/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty()))
}

/// The object of a namespaced resource is in the URL's namespace: filled in when left out, a
/// BadRequest when it names another.
fn check_namespace(object: &mut Value, namespace: Option<&str>, resource: &Resource) -> Result<(), ApiError> {
    if !resource.namespaced {
        return Ok(());
    }
    let Some(namespace) = namespace else { return Ok(()) };
    match object.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(given) if !given.is_empty() && given != namespace => Err(ApiError::BadRequest(
            "the namespace of the provided object does not match the namespace sent on the request".into(),
        )),
        _ => {
            if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                metadata.insert("namespace".into(), namespace.into());
            }
            Ok(())
        }
    }
}

/// Keeps what the server owns across an update: uid, creationTimestamp, deletionTimestamp,
/// generation (raised when the spec changed), apiVersion and kind.
fn carry_server_fields(existing: &Value, object: &mut Value, resource: &Resource) {
    for field in ["uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds"]
    {
        match existing.pointer(&format!("/metadata/{field}")) {
            Some(value) => object["metadata"][field] = value.clone(),
            None => {
                if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                    metadata.remove(field);
                }
            }
        }
    }
    if let Value::Object(map) = object {
        map.insert("apiVersion".into(), resource.api_version().into());
        map.insert("kind".into(), resource.kind.into());
    }
    if strategy::generation_moves(resource, existing, object) {
        let generation = existing.pointer("/metadata/generation").and_then(Value::as_i64);
        let generation = generation.or_else(|| strategy::generation_starts_on_update(resource).then_some(0));
        if let Some(generation) = generation {
            object["metadata"]["generation"] = (generation + 1).into();
        }
    }
}

impl Handlers {
    /// Reads the object, lets `change` compute its new state (and an optional resourceVersion
    /// precondition), writes it guarded by the revision read, retrying on a concurrent change when
    /// there is no precondition. An object being deleted whose last finalizer goes is deleted.
    pub(crate) async fn guarded_update(
        &self,
        request: &ResourceRequest,
        name: &str,
        dry_run: bool,
        mut change: impl FnMut(&Value) -> Result<(Value, Option<i64>), ApiError>,
    ) -> Result<Value, ApiError> {
        let resource = request.resource;
        let key = objects::key(resource, request.namespace.as_deref(), name);
        for _attempt in 0..RETRIES {
            let current = self.store.get(&key).await.map_err(store_error)?;
            let current =
                current.ok_or_else(|| ApiError::not_found(resource.group, resource.plural, name))?;
            let existing = objects::served(resource, &current.value, current.mod_revision)?;
            let (mut object, precondition) = change(&existing)?;
            if objects::name(&object) != name {
                return Err(ApiError::BadRequest(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    objects::name(&object)
                )));
            }
            if let Some(expected) = precondition
                && expected != current.mod_revision
            {
                return Err(ApiError::stale(resource.group, resource.plural, name));
            }
            check_namespace(&mut object, request.namespace.as_deref(), resource)?;
            carry_server_fields(&existing, &mut object, resource);
            // What is stored is what the type holds (the change may have come from a patch).
            let mut object = crate::validation::typed(resource, &object)?;
            // Writes of the main resource only: subresources (status...) have rules of their own;
            // a custom resource's status is checked against its schema as the rest of it is.
            let causes = match request.subresource.as_deref() {
                None => keel_api::validation::validate_update(resource, &existing, &object),
                Some(_) if resource.custom => {
                    keel_api::validation::validate_update(resource, &existing, &object)
                }
                Some(sub) => {
                    keel_api::validation::validate_subresource_update(resource, sub, &existing, &object)
                }
            };
            if !causes.is_empty() {
                return Err(ApiError::invalid(resource.group, resource.kind, name, causes));
            }
            let going = ready_to_go(resource, &object);
            let outcome = if !going && crate::services::is_services(resource) {
                // Allocation answers even a dry run: it shows the values it would take.
                let prior =
                    Prior { object: &existing, stored: &current.value, revision: current.mod_revision };
                match self.write_service(&key, Some(prior), &mut object, dry_run).await? {
                    Some(outcome) => outcome,
                    None => {
                        objects::set_resource_version(&mut object, current.mod_revision);
                        return Ok(object);
                    }
                }
            } else {
                let stored = objects::stored(resource, &object)?;
                // A dry run writes nothing, nor does an update that changes nothing (no new
                // revision, no event: upstream's GuaranteedUpdate).
                // A value read with an old encryption key is written again all the same.
                let unchanged = !going
                    && stored == current.value.as_ref()
                    && !self.store.is_stale(&key, current.mod_revision).await.map_err(store_error)?;
                if dry_run || unchanged {
                    objects::set_resource_version(&mut object, current.mod_revision);
                    return Ok(object);
                }
                if going {
                    // What the stored object holds is what its deletion gives back.
                    self.remove(resource, &key, &existing, current.mod_revision).await?
                } else {
                    self.store
                        .update(&key, stored.into(), current.mod_revision, 0)
                        .await
                        .map_err(store_error)?
                }
            };
            match outcome {
                Outcome::Written { revision, .. } => {
                    objects::set_resource_version(&mut object, revision);
                    return Ok(object);
                }
                Outcome::Conflict { current: None } => {
                    return Err(ApiError::not_found(resource.group, resource.plural, name));
                }
                Outcome::Conflict { current: Some(_) } if precondition.is_some() => {
                    return Err(ApiError::stale(resource.group, resource.plural, name));
                }
                Outcome::Conflict { .. } => {}
            }
        }
        Err(ApiError::stale(resource.group, resource.plural, name))
    }

    /// PUT of the main resource; a resourceVersion in the body is a precondition.
    pub async fn update(
        &self,
        ctx: &Context,
        request: &ResourceRequest,
        name: &str,
        object: Value,
        dry_run: bool,
    ) -> Result<Reply, ApiError> {
        let resource = request.resource;
        objects::check_type(&object, resource)?;
        if objects::name(&object) != name {
            return Err(ApiError::BadRequest(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                objects::name(&object)
            )));
        }
        let precondition = body_revision(&object)?;
        let updated = self
            .guarded_update(request, name, dry_run, |existing| {
                let mut new = object.clone();
                strategy::prepare_for_update(resource, existing, &mut new);
                check_update(resource, existing, &mut new)?;
                crate::field_manager::track(ctx, request, Some(existing), &mut new);
                self.validate_write(ctx, request, Some(existing), &new)?;
                Ok((new, precondition))
            })
            .await?;
        Ok(Reply::Json(200, updated))
    }

    /// JSON patch or merge patch on the main resource (a resourceVersion the patch sets is a
    /// precondition).
    pub async fn patch(
        &self,
        ctx: &Context,
        request: &ResourceRequest,
        name: &str,
        patch: &PatchBody,
        dry_run: bool,
    ) -> Result<Reply, ApiError> {
        let resource = request.resource;
        crate::crd::check_patch(resource, matches!(patch, PatchBody::Strategic(_)))?;
        let updated = self
            .guarded_update(request, name, dry_run, |existing| {
                let mut new = existing.clone();
                patch.apply(&mut new)?;
                objects::check_type(&new, resource)?;
                let mut new = crate::validation::check_patched(ctx, resource, &new)?;
                let precondition = changed_revision(existing, &new)?;
                strategy::prepare_for_update(resource, existing, &mut new);
                check_update(resource, existing, &mut new)?;
                crate::field_manager::track(ctx, request, Some(existing), &mut new);
                self.validate_write(ctx, request, Some(existing), &new)?;
                Ok((new, precondition))
            })
            .await?;
        Ok(Reply::Json(200, updated))
    }

    /// GET, PUT or PATCH of a subresource: status, scale, finalize.
    pub async fn subresource(
        &self,
        ctx: &Context,
        request: &ResourceRequest,
        name: &str,
        body: SubresourceBody,
        dry_run: bool,
    ) -> Result<Reply, ApiError> {
        let resource = request.resource;
        let sub = request.subresource.as_deref().unwrap_or_default();
        crate::crd::check_patch(resource, matches!(body, SubresourceBody::Patch(PatchBody::Strategic(_))))?;
        let key = objects::key(resource, request.namespace.as_deref(), name);
        match (sub, body) {
            ("status" | "finalize" | "approval" | "scale", SubresourceBody::None) => {
                let current = self.store.get(&key).await.map_err(store_error)?;
                let current =
                    current.ok_or_else(|| ApiError::not_found(resource.group, resource.plural, name))?;
                let object = objects::served(resource, &current.value, current.mod_revision)?;
                Ok(Reply::Json(
                    200,
                    if sub == "scale" { strategy::scale_of(resource, &object) } else { object },
                ))
            }
            ("status", body) => {
                let updated = self
                    .guarded_update(request, name, dry_run, |existing| {
                        let new = crate::validation::typed(resource, &body.resolve(existing)?)?;
                        let mut updated = if is_csr(resource) {
                            keel_api::certificates::status_update(existing, &new, &now())
                        } else {
                            strategy::status_update(existing, &new)
                        };
                        crate::field_manager::track(ctx, request, Some(existing), &mut updated);
                        self.validate_write(ctx, request, Some(existing), &updated)?;
                        Ok((updated, changed_revision(existing, &new)?))
                    })
                    .await?;
                Ok(Reply::Json(200, updated))
            }
            // A CSR's Approved and Denied conditions (csrApprovalStrategy).
            ("approval", body) if is_csr(resource) => {
                let updated = self
                    .guarded_update(request, name, dry_run, |existing| {
                        let new = crate::validation::typed(resource, &body.resolve(existing)?)?;
                        let mut updated = keel_api::certificates::approval_update(existing, &new, &now());
                        crate::field_manager::track(ctx, request, Some(existing), &mut updated);
                        self.validate_write(ctx, request, Some(existing), &updated)?;
                        Ok((updated, changed_revision(existing, &new)?))
                    })
                    .await?;
                Ok(Reply::Json(200, updated))
            }
            ("finalize", body) => {
                let updated = self
                    .guarded_update(request, name, dry_run, |existing| {
                        let new = crate::validation::typed(resource, &body.resolve(existing)?)?;
                        let mut merged = existing.clone();
                        merged["spec"]["finalizers"] =
                            new.pointer("/spec/finalizers").cloned().unwrap_or(json!([]));
                        crate::field_manager::track(ctx, request, Some(existing), &mut merged);
                        Ok((merged, changed_revision(existing, &new)?))
                    })
                    .await?;
                Ok(Reply::Json(200, updated))
            }
            ("scale", body) => {
                let updated = self
                    .guarded_update(request, name, dry_run, |existing| {
                        let scale = strategy::scale_of(resource, existing);
                        let new_scale = body.resolve(&scale)?;
                        if new_scale.get("kind").and_then(Value::as_str).is_some_and(|k| k != "Scale") {
                            return Err(ApiError::BadRequest("a scale subresource takes a Scale".into()));
                        }
                        let mut new = existing.clone();
                        strategy::apply_scale_to(resource, &mut new, &new_scale).map_err(|cause| {
                            ApiError::UnprocessableEntity(format!(
                                "Scale.autoscaling {name:?} is invalid: {cause}"
                            ))
                        })?;
                        crate::field_manager::track(ctx, request, Some(existing), &mut new);
                        Ok((new, changed_revision(&scale, &new_scale)?))
                    })
                    .await?;
                Ok(Reply::Json(200, strategy::scale_of(resource, &updated)))
            }
            _ => Err(ApiError::MethodNotAllowed),
        }
    }

    /// DELETE of one object: the object while something still holds it (finalizers, a grace
    /// period); once it is gone, the object for the resources whose upstream store returns it
    /// (`strategy::returns_deleted_object`), else upstream's Success Status naming it.
    pub async fn delete(
        &self,
        request: &ResourceRequest,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Reply, ApiError> {
        let resource = request.resource;
        let (object, gone) = self.delete_object(request, name, options).await?;
        if !gone || strategy::returns_deleted_object(resource) {
            return Ok(Reply::Json(200, object));
        }
        let mut details = json!({"name": name, "kind": resource.plural});
        if !resource.group.is_empty() {
            details["group"] = resource.group.into();
        }
        if let Some(uid) = object.pointer("/metadata/uid").filter(|u| u.is_string()) {
            details["uid"] = uid.clone();
        }
        Ok(Reply::Json(
            200,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}),
        ))
    }

    /// The deletion itself: the object as deleted, and whether it is gone (else held, marked).
    async fn delete_object(
        &self,
        request: &ResourceRequest,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<(Value, bool), ApiError> {
        let resource = request.resource;
        // NamespaceLifecycle: the namespaces the cluster itself needs stay.
        if resource.group.is_empty()
            && resource.plural == "namespaces"
            && matches!(name, "default" | "kube-system" | "kube-public")
        {
            return Err(ApiError::Forbidden {
                resource: GroupResource::new("", "namespaces"),
                name: name.to_owned(),
                detail: "this namespace may not be deleted".into(),
            });
        }
        let key = objects::key(resource, request.namespace.as_deref(), name);
        for _attempt in 0..RETRIES {
            let current = self.store.get(&key).await.map_err(store_error)?;
            let current =
                current.ok_or_else(|| ApiError::not_found(resource.group, resource.plural, name))?;
            let mut object = objects::served(resource, &current.value, current.mod_revision)?;
            check_preconditions(resource, name, &object, options)?;
            let mut held = finalizers(&object);
            match options.propagation_policy.as_deref() {
                Some("Orphan") if !held.iter().any(|f| f == "orphan") => held.push("orphan".into()),
                Some("Foreground") if !held.iter().any(|f| f == "foregroundDeletion") => {
                    held.push("foregroundDeletion".into());
                }
                Some("Orphan" | "Foreground" | "Background") | None => {}
                Some(other) => {
                    return Err(ApiError::BadRequest(format!(
                        "propagationPolicy {other:?} is not supported: Orphan, Foreground or Background"
                    )));
                }
            }
            if let Some(finalizer) = strategy::delete_finalizer(resource)
                && !held.iter().any(|f| f == finalizer)
            {
                held.push(finalizer.into());
            }
            let grace = self.grace_period(resource, &object, options);
            let running = object.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64);
            // Pods always delete through their graceful strategy (upstream's podStrategy): even at
            // grace 0 the object is written with its deletionTimestamp and a deletionGracePeriodSeconds
            // of 0 before it goes, so watchers (a kubelet) see how it was deleted.
            let pod = resource.group.is_empty() && resource.plural == "pods";
            let mut marked = false;
            if object.pointer("/metadata/deletionTimestamp").is_some() && running.is_some_and(|r| grace < r) {
                // A shorter grace period replaces a longer one; 0 ends it.
                object["metadata"]["deletionGracePeriodSeconds"] = grace.into();
                object["metadata"]["deletionTimestamp"] = if grace > 0 { later(grace) } else { now() }.into();
                marked = true;
            }
            let graceful = resource.plural == "namespaces" || grace > 0 || !held.is_empty() || pod;
            let mut revision_now = current.mod_revision;
            let revision = if graceful {
                if object.pointer("/metadata/deletionTimestamp").is_none() {
                    object["metadata"]["deletionTimestamp"] =
                        if grace > 0 { later(grace) } else { now() }.into();
                    object["metadata"]["deletionGracePeriodSeconds"] = grace.into();
                    if let Some(generation) = object.pointer("/metadata/generation").and_then(Value::as_i64)
                        && generation > 0
                    {
                        object["metadata"]["generation"] = (generation + 1).into();
                    }
                    marked = true;
                }
                if !held.is_empty() {
                    object["metadata"]["finalizers"] = json!(held);
                }
                if resource.plural == "namespaces" {
                    object["status"]["phase"] = "Terminating".into();
                }
                let go_now = ready_to_go(resource, &object);
                if go_now && !(pod && marked) {
                    // Graceful only in name (nothing holds it): gone now.
                    None
                } else if options.dry_run {
                    return Ok((object, go_now));
                } else {
                    let stored = objects::stored(resource, &object)?;
                    match self
                        .store
                        .update(&key, stored.into(), current.mod_revision, 0)
                        .await
                        .map_err(store_error)?
                    {
                        Outcome::Written { revision, .. } if go_now => {
                            revision_now = revision;
                            None
                        }
                        Outcome::Written { revision, .. } => Some(revision),
                        Outcome::Conflict { .. } => continue,
                    }
                }
            } else {
                None
            };
            if let Some(revision) = revision {
                objects::set_resource_version(&mut object, revision);
                return Ok((object, false));
            }
            if options.dry_run {
                return Ok((object, true));
            }
            match self.remove(resource, &key, &object, revision_now).await? {
                Outcome::Written { revision, .. } => {
                    objects::set_resource_version(&mut object, revision);
                    return Ok((object, true));
                }
                Outcome::Conflict { current: None } => {
                    return Err(ApiError::not_found(resource.group, resource.plural, name));
                }
                Outcome::Conflict { .. } => {}
            }
        }
        Err(ApiError::stale(resource.group, resource.plural, name))
    }

    /// The seconds a deletion waits: asked, else the pod's terminationGracePeriodSeconds (30 by
    /// default) for pods bound to a node; 0 for unscheduled or finished pods and everything else.
    fn grace_period(&self, resource: &Resource, object: &Value, options: &DeleteOptions) -> i64 {
        if resource.plural != "pods" || !resource.group.is_empty() {
            return 0;
        }
        if object.pointer("/spec/nodeName").and_then(Value::as_str).is_none_or(str::is_empty) {
            return 0;
        }
        // A pod that has finished has nothing left to stop.
        if matches!(object.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed")) {
            return 0;
        }
        let default =
            object.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(30);
        // A negative grace period is the shortest graceful one, as upstream.
        match options.grace_period_seconds.unwrap_or(default) {
            grace if grace < 0 => 1,
            grace => grace,
        }
    }

    /// DELETE of a collection: every object the selectors pick, each deleted as one DELETE would
    /// (upstream's Store.DeleteCollection). The answer lists the objects as listed, before their
    /// deletion; an object already gone is passed over, any other error fails the request (which
    /// of the others went first is not fixed: upstream deletes in parallel workers).
    pub async fn delete_collection(
        &self,
        ctx: &Context,
        request: &ResourceRequest,
        query: &Query,
        options: &DeleteOptions,
    ) -> Result<Reply, ApiError> {
        let resource = request.resource;
        let filter =
            Filter::parse(resource, query.label_selector.as_deref(), query.field_selector.as_deref())?;
        let prefix = collection_prefix(resource, request.namespace.as_deref());
        let listed = self.store.range(keel_store::RangeRequest::prefix(prefix)).await.map_err(store_error)?;
        let mut items = Vec::new();
        for kv in listed.kvs {
            let object = objects::from_storage(&kv.value, kv.mod_revision)?;
            if !filter.matches(&object) {
                continue;
            }
            let name = objects::name(&object).to_owned();
            let mut one = request.clone();
            one.namespace = object.pointer("/metadata/namespace").and_then(Value::as_str).map(str::to_owned);
            one.name = Some(name.clone());
            let deleted = match self.admit_collection_item(ctx, &one, &object) {
                Ok(()) => self.delete_object(&one, &name, options).await.map(drop),
                Err(refused) => Err(refused),
            };
            items.push(object);
            match deleted {
                Ok(()) | Err(ApiError::NotFound { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(Reply::Json(
            200,
            json!({
                "kind": format!("{}List", resource.kind),
                "apiVersion": resource.api_version(),
                "metadata": {"resourceVersion": listed.revision.to_string()},
                "items": items,
            }),
        ))
    }
}

/// What an update of a resource prepares and may not change: the new object is defaulted, as
/// upstream defaults every body it decodes (a Service's type-dependent defaults then follow a type
/// change); a Service keeps what was allocated for it, drops what its new type does not use, and
/// keeps its ClusterIP.
pub(crate) fn check_update(resource: &Resource, old: &Value, new: &mut Value) -> Result<(), ApiError> {
    keel_api::defaults::apply(resource, new);
    if crate::services::is_services(resource) {
        crate::services::prepare_for_update(old, new);
        crate::services::check_update(old, new)?;
    }
    Ok(())
}

/// The body of a subresource write, resolved against the current state.
#[derive(Debug, Clone)]
pub enum SubresourceBody {
    /// A GET.
    None,
    /// A PUT: the whole new object.
    Replace(Value),
    Patch(PatchBody),
}

impl SubresourceBody {
    fn resolve(&self, current: &Value) -> Result<Value, ApiError> {
        match self {
            SubresourceBody::None => Ok(current.clone()),
            SubresourceBody::Replace(object) => Ok(object.clone()),
            SubresourceBody::Patch(patch) => {
                let mut object = current.clone();
                patch.apply(&mut object)?;
                Ok(object)
            }
        }
    }
}

/// A resourceVersion set in a body is a precondition.
fn body_revision(object: &Value) -> Result<Option<i64>, ApiError> {
    match object.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
        Some(rv) if !rv.is_empty() => Ok(Some(parse_revision(rv)?)),
        _ => Ok(None),
    }
}

/// A resourceVersion a patch changed is a precondition (one it left as it was is not).
fn changed_revision(before: &Value, after: &Value) -> Result<Option<i64>, ApiError> {
    let rv = |v: &Value| v.pointer("/metadata/resourceVersion").and_then(Value::as_str).map(str::to_owned);
    match rv(after) {
        Some(new) if Some(&new) != rv(before).as_ref() && !new.is_empty() => Ok(Some(parse_revision(&new)?)),
        _ => Ok(None),
    }
}

fn check_preconditions(
    resource: &Resource,
    name: &str,
    object: &Value,
    options: &DeleteOptions,
) -> Result<(), ApiError> {
    let conflict = |detail: String| ApiError::Conflict {
        resource: GroupResource::new(resource.group, resource.plural),
        name: name.to_owned(),
        detail,
    };
    if let Some(uid) = &options.precondition_uid {
        let actual = object.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default();
        if uid != actual {
            return Err(conflict(format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
            )));
        }
    }
    if let Some(rv) = &options.precondition_resource_version {
        let actual = object.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or_default();
        if rv != actual {
            return Err(conflict(format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"
            )));
        }
    }
    Ok(())
}
