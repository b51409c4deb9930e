//! The CustomResourceDefinition controllers apiextensions-apiserver runs inside the apiserver
//! process, as one level-triggered loop over every CRD: the naming controller (names accepted
//! unless another CRD of the group holds them: NamesAccepted, `status.acceptedNames`), the
//! establishing controller (Established once the names are accepted), serving (what an
//! established CRD defines goes into keel-api's live registry, [`keel_api::custom`], so routing,
//! discovery and validation see it at once) and the finalizing controller (a deleted CRD,
//! held by `customresourcecleanup.apiextensions.k8s.io`, is Terminating: its custom resources are
//! deleted, then the finalizer is removed and serving stops).
//!
//! The loop lists the CRDs, reconciles them all, then follows a store watch of their prefix and
//! reconciles all again after each batch of changes (CRDs are few; a full pass is cheap and keeps
//! conflicts between CRDs decided in one place). A failed watch is listed again.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use keel_api::crd;
use keel_api::custom;
use keel_api::openapi::Schemas;
use keel_api::resources::{self, Resource};
use keel_api::status::ApiError;
use keel_store::RangeRequest;
use serde_json::{Value, json};

use crate::handlers::{Handlers, store_error};
use crate::objects;
use crate::openapi::OpenApi;
use crate::request::{ResourceRequest, Verb};
use crate::writes::DeleteOptions;

/// The CRD controllers' task, stopped when dropped.
#[derive(Debug)]
pub struct CrdControllers {
    task: tokio::task::JoinHandle<()>,
    served: Served,
}

impl CrdControllers {
    /// Starts the loop over `handlers`' store, after a first pass (so the CRDs established before a
    /// restart are served from the first request on, as upstream waits for its CRD informer);
    /// `openapi` is rebuilt whenever what is served changes.
    pub async fn start(handlers: Handlers, openapi: Arc<OpenApi>) -> CrdControllers {
        let mut documents = Documents { openapi, built: custom::generation() };
        if let Err(error) = reconcile_all(&handlers).await {
            tracing::warn!(%error, "CustomResourceDefinition controllers: the first pass failed");
        }
        documents.refresh().await;
        let served = handlers.crds_served.clone();
        CrdControllers { task: tokio::spawn(run(handlers, documents)), served }
    }
}

impl Drop for CrdControllers {
    /// Stops the loop and what it served: the registry is process-wide, and a server's custom
    /// resources must not outlive it (a server started after it, as after a restart, serves what
    /// its own controllers find).
    fn drop(&mut self) {
        self.task.abort();
        for served in std::mem::take(&mut *lock(&self.served)) {
            custom::stop(&served);
        }
    }
}

fn crds() -> Result<&'static Resource, ApiError> {
    resources::find("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .ok_or_else(|| ApiError::Internal("no customresourcedefinitions".into()))
}

/// The OpenAPI documents and the registry generation they were built at.
struct Documents {
    openapi: Arc<OpenApi>,
    built: u64,
}

impl Documents {
    /// Rebuilds the documents (built-in and custom resources) if what is served changed since.
    async fn refresh(&mut self) {
        let generation = custom::generation();
        if generation == self.built {
            return;
        }
        let openapi = self.openapi.clone();
        // Building every document is CPU work of some milliseconds: off the async workers.
        let built = tokio::task::spawn_blocking(move || {
            let (resources, schemas) = crd::openapi::served(Schemas::builtin());
            openapi.rebuild(&resources, &schemas)
        })
        .await;
        match built {
            Ok(Ok(())) => self.built = generation,
            Ok(Err(error)) => tracing::warn!(%error, "rebuilding the OpenAPI documents"),
            Err(error) => tracing::warn!(%error, "rebuilding the OpenAPI documents"),
        }
    }
}

async fn run(handlers: Handlers, mut documents: Documents) {
    let mut pause = Duration::from_millis(100);
    loop {
        match follow(&handlers, &mut documents).await {
            Ok(()) => pause = Duration::from_millis(100),
            Err(error) => {
                tracing::warn!(%error, "CustomResourceDefinition controllers: listing again");
                pause = (pause * 2).min(Duration::from_secs(5));
            }
        }
        tokio::time::sleep(pause).await;
    }
}

/// One list and the watch that follows it, until the watch fails.
async fn follow(handlers: &Handlers, documents: &mut Documents) -> Result<(), ApiError> {
    let prefix = crds()?.key_prefix();
    let listed = handlers.store.range(RangeRequest::prefix(prefix.clone())).await.map_err(store_error)?;
    let mut watch = handlers.store.watch(&prefix, Some(listed.revision + 1)).await.map_err(store_error)?;
    // Reconciling can leave work (objects still held by finalizers): a retry tick covers it.
    let mut pending = reconcile_all(handlers).await?;
    documents.refresh().await;
    loop {
        let tick =
            tokio::time::sleep(if pending { Duration::from_millis(500) } else { Duration::from_secs(30) });
        tokio::select! {
            event = watch.next() => match event {
                Some(Ok(_)) => {
                    // Take whatever else is already there, then reconcile once.
                    while let Some(Some(Ok(_))) = futures::FutureExt::now_or_never(watch.next()) {}
                }
                Some(Err(error)) => return Err(store_error(error)),
                None => return Ok(()),
            },
            () = tick => {}
        }
        pending = reconcile_all(handlers).await?;
        documents.refresh().await;
    }
}

/// Every CRD as stored.
async fn list(handlers: &Handlers) -> Result<Vec<Value>, ApiError> {
    let resource = crds()?;
    let listed =
        handlers.store.range(RangeRequest::prefix(resource.key_prefix())).await.map_err(store_error)?;
    listed.kvs.iter().map(|kv| objects::served(resource, &kv.value, kv.mod_revision)).collect()
}

/// One pass over every CRD; true when some work is left for later.
async fn reconcile_all(handlers: &Handlers) -> Result<bool, ApiError> {
    let all = list(handlers).await?;
    let names: Vec<String> = all.iter().map(|c| objects::name(c).to_owned()).collect();
    let served: Vec<String> = lock(&handlers.crds_served).iter().cloned().collect();
    for served in served {
        if !names.contains(&served) {
            stop_serving(handlers, &served);
        }
    }
    let mut pending = false;
    // Oldest first, so the CRD that had a name first keeps it.
    let mut ordered = all.clone();
    ordered.sort_by(|a, b| {
        let created =
            |c: &Value| c.pointer("/metadata/creationTimestamp").and_then(Value::as_str).map(str::to_owned);
        created(a).cmp(&created(b)).then_with(|| objects::name(a).cmp(objects::name(b)))
    });
    let mut decided: Vec<Value> = Vec::new();
    for crd in ordered {
        let name = objects::name(&crd).to_owned();
        let result = if crd.pointer("/metadata/deletionTimestamp").is_some() {
            finalize(handlers, &crd).await.map(|done| {
                pending |= !done;
                crd.clone()
            })
        } else {
            establish(handlers, &crd, &decided).await
        };
        match result {
            Ok(crd) => decided.push(crd),
            Err(error) => {
                tracing::warn!(crd = %name, %error, "reconciling a CustomResourceDefinition");
                pending = true;
                decided.push(crd);
            }
        }
    }
    Ok(pending)
}

/// upstream's metav1 condition shape for CRDs, keeping the transition time while the status stays.
fn condition(old: &[Value], kind: &str, status: &str, reason: &str, message: &str) -> Value {
    let kept = old
        .iter()
        .find(|c| c["type"] == kind && c["status"] == status)
        .and_then(|c| c.get("lastTransitionTime"));
    let time = kept
        .cloned()
        .unwrap_or_else(|| jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string().into());
    json!({"type": kind, "status": status, "lastTransitionTime": time, "reason": reason, "message": message})
}

/// Names and conditions for a live CRD, written when they change; then served when established.
async fn establish(handlers: &Handlers, crd: &Value, decided: &[Value]) -> Result<Value, ApiError> {
    let name = objects::name(crd).to_owned();
    let (accepted, conflict) = crd::accepted_names(crd, decided);
    let old: Vec<Value> =
        crd.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut conditions = Vec::new();
    let was_established = crd::condition_true(crd, "Established");
    let names_accepted = match &conflict {
        None => condition(&old, "NamesAccepted", "True", "NoConflicts", "no conflicts found"),
        Some((reason, message)) => condition(&old, "NamesAccepted", "False", reason, message),
    };
    conditions.push(names_accepted);
    // Established once names were accepted; it stays established through later conflicts (upstream
    // serves the names accepted before).
    let established = was_established || conflict.is_none();
    conditions.push(if established {
        condition(&old, "Established", "True", "InitialNamesAccepted", "the initial names have been accepted")
    } else {
        condition(&old, "Established", "False", "NotAccepted", "not all names are accepted")
    });
    let mut wanted = crd.clone();
    wanted["status"]["acceptedNames"] = accepted;
    wanted["status"]["conditions"] = Value::Array(conditions);
    // Served before Established is written, so a client that saw the condition finds the resource.
    let serve = |crd: &Value| {
        custom::serve(&name, crd::definitions(crd));
        lock(&handlers.crds_served).insert(name.clone());
        if let Some(resource) = custom::resource_of(&name) {
            handlers.cache.start_custom(resource);
        }
    };
    let current = if wanted.get("status") == crd.get("status") {
        crd.clone()
    } else {
        if established {
            serve(&wanted);
        }
        write_status(handlers, &name, &wanted).await?
    };
    if established {
        custom::serve(&name, crd::definitions(&current));
        lock(&handlers.crds_served).insert(name.clone());
        if let Some(resource) = custom::resource_of(&name) {
            handlers.cache.start_custom(resource);
        }
    }
    Ok(current)
}

/// Stops serving the CRD `name`: its resources leave the registry, its watch cache stops.
fn stop_serving(handlers: &Handlers, name: &str) {
    if let Some(resource) = custom::resource_of(name) {
        handlers.cache.stop_custom(&resource.key_prefix());
    }
    custom::stop(name);
    lock(&handlers.crds_served).remove(name);
}

/// The names of the CRDs one server serves: the registry is process-wide, and a server (a test's,
/// among several in one process) stops serving only what it served itself.
pub type Served = std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>;

fn lock(served: &Served) -> std::sync::MutexGuard<'_, std::collections::BTreeSet<String>> {
    served.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes `wanted`'s status through the status subresource.
async fn write_status(handlers: &Handlers, name: &str, wanted: &Value) -> Result<Value, ApiError> {
    let request = ResourceRequest {
        resource: crds()?,
        namespace: None,
        name: Some(name.to_owned()),
        subresource: Some("status".into()),
        verb: Verb::Update,
    };
    let status = wanted["status"].clone();
    handlers
        .guarded_update(&request, name, false, |existing| {
            let mut new = existing.clone();
            new["status"] = status.clone();
            Ok((new, None))
        })
        .await
}

/// A deleting CRD: Terminating, its custom resources deleted, then its finalizer removed. True
/// once done (or not ours to do).
async fn finalize(handlers: &Handlers, crd: &Value) -> Result<bool, ApiError> {
    let name = objects::name(crd).to_owned();
    let holds = crd
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|f| f == crd::CLEANUP_FINALIZER));
    if !holds {
        return Ok(true);
    }
    // A terminating CRD is still served (reads, updates and deletes of its objects; creates are
    // refused), as upstream's: after a restart it is served again, so its objects are deleted
    // through it and their own finalizers are waited for.
    if crd::condition_true(crd, "Established") && custom::resource_of(&name).is_none() {
        custom::serve(&name, crd::definitions(crd));
        lock(&handlers.crds_served).insert(name.clone());
        if let Some(resource) = custom::resource_of(&name) {
            handlers.cache.start_custom(resource);
        }
    }
    if !crd::condition_true(crd, "Terminating") {
        let mut wanted = crd.clone();
        let old: Vec<Value> =
            crd.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut conditions: Vec<Value> = old.iter().filter(|c| c["type"] != "Terminating").cloned().collect();
        conditions.push(condition(
            &old,
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        ));
        wanted["status"]["conditions"] = Value::Array(conditions);
        write_status(handlers, &name, &wanted).await?;
    }
    // Every object under the CRD's prefix, whatever version it was written through.
    let group = crd.pointer("/spec/group").and_then(Value::as_str).unwrap_or_default();
    let plural = crd.pointer("/status/acceptedNames/plural").and_then(Value::as_str).unwrap_or_default();
    let mut left = 0;
    if !plural.is_empty() {
        let prefix = format!("/registry/{group}/{plural}/");
        let listed = handlers.store.range(RangeRequest::prefix(prefix)).await.map_err(store_error)?;
        let served = custom::resource_of(&name);
        for kv in listed.kvs {
            let Some(resource) = served else {
                // Never established, so never served: the objects go as they are.
                handlers.store.delete(&kv.key, Some(kv.mod_revision)).await.map_err(store_error)?;
                continue;
            };
            let object = objects::from_storage(&kv.value, kv.mod_revision)?;
            let request = ResourceRequest {
                resource,
                namespace: object.pointer("/metadata/namespace").and_then(Value::as_str).map(str::to_owned),
                name: Some(objects::name(&object).to_owned()),
                subresource: None,
                verb: Verb::Delete,
            };
            match handlers.delete(&request, objects::name(&object), &DeleteOptions::default()).await {
                Ok(_) | Err(ApiError::NotFound { .. }) => {}
                Err(error) => return Err(error),
            }
            if handlers.store.get(&kv.key).await.map_err(store_error)?.is_some() {
                left += 1;
            }
        }
    }
    if left > 0 {
        return Ok(false);
    }
    stop_serving(handlers, &name);
    let request = ResourceRequest {
        resource: crds()?,
        namespace: None,
        name: Some(name.clone()),
        subresource: None,
        verb: Verb::Update,
    };
    let result = handlers
        .guarded_update(&request, &name, false, |existing| {
            let mut new = existing.clone();
            if let Some(finalizers) = new.pointer_mut("/metadata/finalizers").and_then(Value::as_array_mut) {
                finalizers.retain(|f| f != crd::CLEANUP_FINALIZER);
            }
            Ok((new, None))
        })
        .await;
    match result {
        Ok(_) | Err(ApiError::NotFound { .. }) => Ok(true),
        Err(error) => Err(error),
    }
}

/// Whether creates of `resource` are refused because its CRD is being deleted (upstream: "create
/// not allowed while custom resource definition is terminating").
pub async fn check_create(handlers: &Handlers, resource: &Resource) -> Result<(), ApiError> {
    let Some(version) = custom::version_of(resource) else { return Ok(()) };
    let key = objects::key(crds()?, None, &version.crd);
    if let Some(kv) = handlers.store.get(&key).await.map_err(store_error)? {
        let crd = objects::from_storage(&kv.value, kv.mod_revision)?;
        if crd.pointer("/metadata/deletionTimestamp").is_some() {
            // upstream: 405 MethodNotSupported, worded "create not allowed while custom resource
            // definition is terminating"; Keel's MethodNotAllowed carries its standard message.
            return Err(ApiError::MethodNotAllowed);
        }
    }
    Ok(())
}

/// Strategic merge patch is not served for custom resources (they have no patch metadata): 415, as
/// upstream answers it.
pub fn check_patch(resource: &Resource, strategic: bool) -> Result<(), ApiError> {
    if resource.custom && strategic {
        return Err(ApiError::UnsupportedMediaType(
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
        ));
    }
    Ok(())
}
