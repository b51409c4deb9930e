//! Field validation of request bodies (`fieldValidation=Strict|Warn|Ignore`, Warn by default as in
//! kube-apiserver 1.27+): fields of the wrong type are always a BadRequest; unknown and duplicate
//! fields are refused (Strict), answered with `Warning` headers (Warn), or let through (Ignore).
//! Warnings are gathered per request and sent as `Warning: 299 - "..."` headers.

use std::cell::RefCell;

use keel_api::resources::Resource;
use keel_api::status::ApiError;
use keel_api::typed;
use serde_json::Value;

tokio::task_local! {
    /// The warnings of the request being served.
    pub static WARNINGS: RefCell<Vec<String>>;
}

tokio::task_local! {
    /// What a patch request asked for unknown fields (its `fieldValidation`); read where the
    /// patched object is typed, so retries on conflict see it too.
    pub static PATCH_FIELDS: FieldValidation;
}

/// A patched object as its type holds it, its unknown fields handled as the patch request asked
/// (upstream checks the patched object, so unknown fields the patch brings are found; duplicate
/// keys are the patch body's and not looked for here).
pub fn check_patched(resource: &Resource, patched: &Value) -> Result<Value, ApiError> {
    let mode = PATCH_FIELDS.try_with(|mode| *mode).unwrap_or_default();
    check(resource, b"", patched, mode)
}

/// Adds a warning to the current request's response (nothing outside a request), once.
pub fn warn(message: String) {
    // Once per text, as upstream's warning recorder (a patch retried on conflict checks again).
    let _outside_a_request = WARNINGS.try_with(|warnings| {
        let mut warnings = warnings.borrow_mut();
        if !warnings.contains(&message) {
            warnings.push(message);
        }
    });
}

/// What the client asked for unknown and duplicate fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Strict,
    #[default]
    Warn,
    Ignore,
}

impl FieldValidation {
    pub fn parse(value: Option<&str>) -> Result<FieldValidation, ApiError> {
        match value {
            None | Some("" | "Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(other) => Err(ApiError::BadRequest(format!(
                "fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\", got {other:?}"
            ))),
        }
    }
}

/// The object as its type holds it (unknown fields dropped, values in the type's form), or a
/// BadRequest naming what the type could not read.
pub fn typed(resource: &Resource, object: &Value) -> Result<Value, ApiError> {
    typed::round_trip(resource, object).map_err(|error| {
        ApiError::BadRequest(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {error}",
            kind = resource.kind,
            version = resource.version
        ))
    })
}

/// Checks a body (`raw` as sent, `object` as parsed) against the resource's type; returns the
/// object as the type holds it, which is what gets stored.
pub fn check(
    resource: &Resource,
    raw: &[u8],
    object: &Value,
    mode: FieldValidation,
) -> Result<Value, ApiError> {
    let typed = typed(resource, object)?;
    if mode == FieldValidation::Ignore {
        return Ok(typed);
    }
    let mut problems: Vec<String> =
        typed::unknown_fields(object, &typed).into_iter().map(|f| format!("unknown field {f:?}")).collect();
    problems.extend(typed::duplicate_fields(raw).into_iter().map(|f| format!("duplicate field {f:?}")));
    if problems.is_empty() {
        return Ok(typed);
    }
    match mode {
        FieldValidation::Strict => {
            Err(ApiError::BadRequest(format!("strict decoding error: {}", problems.join(", "))))
        }
        _ => {
            for problem in problems {
                warn(problem);
            }
            Ok(typed)
        }
    }
}
