//! Server-side apply (PATCH with `application/apply-patch+yaml`) and the recording of every other
//! write's ownership in `metadata.managedFields`, over keel-api's [`keel_api::managed_fields`]:
//! the request's manager (`fieldManager`, else the User-Agent up to its first `/`, as upstream's
//! managerOrUserAgent), PatchOptions checked as upstream's ValidatePatchOptions, and the apply
//! handler — which creates the object when it is absent, as upstream's apply patches do.

use keel_api::custom::CustomVersion;
use keel_api::managed_fields::{self, ApplyError, Context};
use keel_api::resources::Resource;
use keel_api::status::{ApiError, FieldError, FieldErrorKind};
use keel_api::strategy;
use serde_json::{Value, json};

use crate::context::Context as RequestContext;
use crate::handlers::{Handlers, RETRIES, Reply, store_error};
use crate::objects;
use crate::request::ResourceRequest;

/// The media type of server-side apply patches.
pub const APPLY_PATCH: &str = "application/apply-patch+yaml";

/// Whether a request's Content-Type is an apply patch.
pub fn is_apply(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|c| c.split(';').next().unwrap_or(c).trim().eq_ignore_ascii_case(APPLY_PATCH))
}

fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The context of a write to `resource`: a built-in kind's type, or a custom resource's from the
/// served version (`custom`, which the context borrows).
fn context<'v>(
    resource: &Resource,
    custom: Option<&'v CustomVersion>,
    subresource: Option<&str>,
) -> Context<'v> {
    let (api_version, subresource) = (resource.api_version(), subresource.unwrap_or_default());
    let has_status = strategy::has_status(resource);
    match custom {
        Some(version) => {
            Context::custom(&version.apply_type, &api_version, resource.kind, subresource, has_status, now())
        }
        None => Context::builtin(&api_version, resource.kind, subresource, has_status, now()),
    }
}

/// Records a create (`live` `None`), update, patch or subresource write in `new`'s managedFields.
pub(crate) fn track(ctx: &RequestContext, request: &ResourceRequest, live: Option<&Value>, new: &mut Value) {
    let custom = keel_api::custom::version_of(request.resource);
    let write = context(request.resource, custom.as_deref(), request.subresource.as_deref());
    managed_fields::update(&write, live, new, ctx.manager());
}

/// upstream's ValidatePatchOptions: an apply needs a fieldManager, `force` is for applies only,
/// and a fieldManager is at most 128 printable characters (422, an invalid PatchOptions).
pub fn check_patch_options(query: Option<&str>, apply: bool) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    let field_manager = crate::query_param(query, "fieldManager").unwrap_or_default();
    if apply {
        if field_manager.is_empty() {
            causes.push(FieldError::required("fieldManager", "is required for apply patch"));
        }
    } else if crate::query_param(query, "force").is_some() {
        causes.push(FieldError::forbidden("force", "may not be specified for non-apply patch"));
    }
    causes.extend(field_manager_errors(&field_manager));
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid("meta.k8s.io", "PatchOptions", "", causes)) }
}

/// upstream's ValidateFieldManager.
fn field_manager_errors(manager: &str) -> Vec<FieldError> {
    let mut causes = Vec::new();
    if manager.chars().count() > 128 {
        causes.push(FieldError {
            field: "fieldManager".into(),
            kind: FieldErrorKind::TooLong,
            detail: "may not be more than 128 bytes".into(),
        });
    }
    for (i, c) in manager.chars().enumerate() {
        if c.is_control() {
            causes.push(FieldError::invalid(
                "fieldManager",
                &Value::String(manager.to_owned()),
                &format!("invalid characters at position {i}"),
            ));
        }
    }
    causes
}

fn apply_error(error: ApplyError) -> ApiError {
    match error {
        ApplyError::BadRequest(message) => ApiError::BadRequest(message),
        ApplyError::Conflicts(conflicts) => ApiError::ApplyConflict {
            message: ApplyError::conflict_message(&conflicts),
            causes: ApplyError::conflict_causes(&conflicts),
        },
        ApplyError::Internal(message) => ApiError::Unclassified(message),
    }
}

/// Fields of the merged object its type does not have come from the applied configuration:
/// upstream's typed conversion of the configuration refuses them (`field not declared in schema`,
/// a 500 without a reason, naming the configuration's namespace and name).
fn check_declared(resource: &Resource, merged: &Value, applied: &Value) -> Result<(), ApiError> {
    let Ok(typed) = keel_api::typed::round_trip(resource, merged) else { return Ok(()) };
    let unknown = keel_api::typed::unknown_fields(merged, &typed);
    if unknown.is_empty() {
        return Ok(());
    }
    let text = |p: &str| applied.pointer(p).and_then(Value::as_str).unwrap_or_default().to_owned();
    let api_version = resource.api_version();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
    let errors: Vec<String> =
        unknown.iter().map(|path| format!(".{path}: field not declared in schema")).collect();
    Err(ApiError::Unclassified(format!(
        "failed to create typed patch object ({}/{}; {group}/{version}, Kind={}): {}",
        text("/metadata/namespace"),
        text("/metadata/name"),
        resource.kind,
        errors.join("\n")
    )))
}

/// upstream's checkName: the applied object names the URL's object.
fn check_name(object: &Value, name: &str) -> Result<(), ApiError> {
    let given = objects::name(object);
    if given != name {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({given}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

impl Handlers {
    /// PATCH with an apply patch: merged into the live object by `fieldManager`, or creating it.
    pub async fn apply(
        &self,
        ctx: &RequestContext,
        request: &ResourceRequest,
        name: &str,
        body: &[u8],
        query: Option<&str>,
        dry_run: bool,
    ) -> Result<Reply, ApiError> {
        check_patch_options(query, true)?;
        let manager = crate::query_param(query, "fieldManager").unwrap_or_default();
        let force = crate::query_param(query, "force").is_some_and(|f| crate::request::query_bool(&f));
        let applied: Value = match serde_yaml_ng::from_slice(body) {
            Ok(Value::Null) => json!({}),
            Ok(object @ Value::Object(_)) => object,
            Ok(other) => {
                return Err(ApiError::BadRequest(format!(
                    "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                    json_kind(&other)
                )));
            }
            Err(error) => return Err(ApiError::BadRequest(format!("error decoding YAML: {error}"))),
        };
        let resource = request.resource;
        let subresource = request.subresource.as_deref();
        if subresource.is_some_and(|s| s != "status") {
            return Err(ApiError::UnsupportedMediaType(format!(
                "the {} subresource takes no apply patch yet: the main resource and status do",
                subresource.unwrap_or_default()
            )));
        }
        let key = objects::key(resource, request.namespace.as_deref(), name);
        let custom = keel_api::custom::version_of(resource);
        for _attempt in 0..RETRIES {
            if self.store.get(&key).await.map_err(store_error)?.is_none() && subresource.is_none() {
                let write = context(resource, custom.as_deref(), subresource);
                let object = managed_fields::apply(&write, &json!({}), &applied, &manager, force)
                    .map_err(apply_error)?;
                check_declared(resource, &object, &applied)?;
                check_name(&object, name)?;
                match self.create_with(ctx, request, object, dry_run, false).await {
                    Err(ApiError::AlreadyExists { .. }) => continue,
                    other => return other,
                }
            }
            let updated = self
                .guarded_update(request, name, dry_run, |existing| {
                    let write = context(resource, custom.as_deref(), subresource);
                    let mut object = managed_fields::apply(&write, existing, &applied, &manager, force)
                        .map_err(apply_error)?;
                    check_declared(resource, &object, &applied)?;
                    check_name(&object, name)?;
                    if subresource == Some("status") {
                        let entries = object.pointer("/metadata/managedFields").cloned();
                        object = strategy::status_update(existing, &object);
                        if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                            match entries {
                                Some(entries) => metadata.insert("managedFields".into(), entries),
                                None => metadata.remove("managedFields"),
                            };
                        }
                    } else {
                        strategy::prepare_for_update(resource, existing, &mut object);
                        crate::writes::check_update(resource, existing, &mut object)?;
                    }
                    // A resourceVersion the configuration names is a precondition, as upstream's
                    // update of the merged object makes it.
                    let precondition =
                        match applied.pointer("/metadata/resourceVersion").and_then(Value::as_str) {
                            Some(rv) if !rv.is_empty() => Some(crate::handlers::parse_revision(rv)?),
                            _ => None,
                        };
                    self.validate_write(ctx, request, Some(existing), &object)?;
                    Ok((object, precondition))
                })
                .await;
            match updated {
                Err(ApiError::NotFound { .. }) if subresource.is_none() => continue,
                other => return other.map(|object| Reply::Json(200, object)),
            }
        }
        Err(ApiError::stale(resource.group, resource.plural, name))
    }
}

/// The Go type name a decoded YAML value has, for upstream's decoding message.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "bool",
        Value::Null | Value::Object(_) => "object",
    }
}
