//! ObjectMeta (apimachinery's ValidateObjectMeta / ValidateObjectMetaUpdate with core's finalizer
//! rule), labels, annotations and label selectors.

use serde_json::Value;

use super::names;
use super::{FieldError, child, forbidden, index, invalid, invalid_str, list, map_at, required};

/// TotalAnnotationSizeLimitB.
const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

/// The finalizers Kubernetes itself uses without a domain.
const STANDARD_FINALIZERS: &[&str] = &["kubernetes", "orphan", "foregroundDeletion"];

/// What create checks of `metadata` beyond the name (which is checked when it is given out).
pub(crate) fn object_meta(object: &Value) -> Vec<FieldError> {
    let Some(meta) = object.get("metadata") else { return Vec::new() };
    let mut errors = labels(meta.get("labels"), "metadata.labels");
    errors.extend(annotations(meta.get("annotations"), "metadata.annotations"));
    errors.extend(owner_references(meta));
    errors.extend(finalizers(meta));
    errors
}

/// What an update checks of `metadata`: no new finalizer once deleting, and the create rules.
pub(crate) fn object_meta_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if old.pointer("/metadata/deletionTimestamp").is_some() {
        let names = |v: &Value| -> Vec<String> {
            list(v.get("metadata").unwrap_or(&Value::Null), "finalizers")
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        let before = names(old);
        let mut added: Vec<String> = names(new).into_iter().filter(|f| !before.contains(f)).collect();
        added.sort();
        added.dedup();
        if !added.is_empty() {
            let shown: Vec<String> = added.iter().map(|f| crate::labels::go_quote(f)).collect();
            errors.push(forbidden(
                "metadata.finalizers",
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    shown.join(", ")
                ),
            ));
        }
    }
    errors.extend(object_meta(new));
    errors
}

/// ValidateLabels: each key a qualified name, each value a label value.
pub(super) fn labels(labels: Option<&Value>, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (k, v) in labels.and_then(Value::as_object).into_iter().flatten() {
        errors.extend(label_key(k, path));
        let value = v.as_str().unwrap_or_default();
        errors.extend(names::label_value(value).iter().map(|m| invalid_str(path, value, m)));
    }
    errors
}

/// ValidateLabelName.
fn label_key(k: &str, path: &str) -> Vec<FieldError> {
    names::qualified_name(k).iter().map(|m| invalid_str(path, k, m)).collect()
}

/// ValidateAnnotations: keys qualified names (case aside), 256 KiB in all.
pub(super) fn annotations(annotations: Option<&Value>, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut size = 0;
    for (k, v) in annotations.and_then(Value::as_object).into_iter().flatten() {
        errors.extend(names::qualified_name(&k.to_lowercase()).iter().map(|m| invalid_str(path, k, m)));
        size += k.len() + v.as_str().map_or(0, str::len);
    }
    if size > MAX_ANNOTATIONS_BYTES {
        errors.push(super::too_long(path, MAX_ANNOTATIONS_BYTES));
    }
    errors
}

/// ValidateOwnerReferences: the fields a reference needs, one controller at most.
fn owner_references(meta: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let path = "metadata.ownerReferences";
    let mut controller: Option<String> = None;
    let references = list(meta, "ownerReferences");
    for (i, reference) in references.iter().enumerate() {
        let at = index(path, i);
        let field = |name: &str| reference.get(name).and_then(Value::as_str).unwrap_or_default();
        let api_version = field("apiVersion");
        if api_version.is_empty() {
            errors.push(required(&child(&at, "apiVersion"), "must not be empty"));
        } else {
            let version = api_version.rsplit('/').next().unwrap_or_default();
            if version.is_empty() || api_version.matches('/').count() > 1 {
                errors.push(invalid_str(
                    &child(&at, "apiVersion"),
                    api_version,
                    "must be <group>/<version> or <version>",
                ));
            }
        }
        for name in ["kind", "name", "uid"] {
            if field(name).is_empty() {
                errors.push(required(&child(&at, name), "must not be empty"));
            }
        }
        if reference.get("controller").and_then(Value::as_bool) == Some(true) {
            let current = format!("{}/{}", field("kind"), field("name"));
            match &controller {
                Some(first) => errors.push(invalid(
                    path,
                    &Value::Array(references.to_vec()),
                    &format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    ),
                )),
                None => controller = Some(current),
            }
        }
    }
    errors
}

/// ValidateFinalizers and core's validateKubeFinalizerName.
fn finalizers(meta: &Value) -> Vec<FieldError> {
    let path = "metadata.finalizers";
    let names: Vec<&str> = list(meta, "finalizers").iter().filter_map(Value::as_str).collect();
    let mut errors = Vec::new();
    for name in &names {
        errors.extend(names::qualified_name(name).iter().map(|m| invalid_str(path, name, m)));
    }
    if names.contains(&"orphan") && names.contains(&"foregroundDeletion") {
        errors.push(invalid(
            path,
            &Value::Array(names.iter().map(|n| Value::String((*n).to_owned())).collect()),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    for (i, name) in names.iter().enumerate() {
        if !name.contains('/') && !STANDARD_FINALIZERS.contains(name) {
            errors.push(invalid_str(
                &index(path, i),
                name,
                "name is neither a standard finalizer name nor is it fully qualified",
            ));
        }
    }
    errors
}

/// ValidateLabelSelector (invalid label values refused).
pub(super) fn label_selector(selector: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = labels(selector.get("matchLabels"), &child(path, "matchLabels"));
    for (i, expression) in list(selector, "matchExpressions").iter().enumerate() {
        let at = index(&child(path, "matchExpressions"), i);
        let values = list(expression, "values");
        let operator = expression.get("operator").and_then(Value::as_str).unwrap_or_default();
        match operator {
            "In" | "NotIn" if values.is_empty() => errors.push(required(
                &child(&at, "values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errors.push(forbidden(
                &child(&at, "values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => {
                errors.push(invalid_str(&child(&at, "operator"), other, "not a valid selector operator"));
            }
        }
        let k = expression.get("key").and_then(Value::as_str).unwrap_or_default();
        errors.extend(label_key(k, &child(&at, "key")));
        for (j, value) in values.iter().enumerate() {
            let value = value.as_str().unwrap_or_default();
            let at = index(&child(&at, "values"), j);
            errors.extend(names::label_value(value).iter().map(|m| invalid_str(&at, value, m)));
        }
    }
    errors
}

/// Whether a (valid) LabelSelector matches `labels`; `None` when it cannot be read as a selector.
pub(super) fn selector_matches(selector: &Value, labels: Option<&Value>) -> Option<bool> {
    let labels = labels.and_then(Value::as_object);
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    for (k, v) in map_at(selector, "matchLabels").into_iter().flatten() {
        if label(k) != v.as_str() {
            return Some(false);
        }
    }
    for expression in list(selector, "matchExpressions") {
        let k = expression.get("key").and_then(Value::as_str)?;
        let values: Vec<&str> = list(expression, "values").iter().filter_map(Value::as_str).collect();
        let matched = match expression.get("operator").and_then(Value::as_str)? {
            "In" | "NotIn" if values.is_empty() => return None,
            "Exists" | "DoesNotExist" if !values.is_empty() => return None,
            "In" => label(k).is_some_and(|v| values.contains(&v)),
            "NotIn" => label(k).is_none_or(|v| !values.contains(&v)),
            "Exists" => label(k).is_some(),
            "DoesNotExist" => label(k).is_none(),
            _ => return None,
        };
        if !matched {
            return Some(false);
        }
    }
    Some(true)
}

/// Whether a selector selects nothing in particular (no labels, no expressions).
pub(super) fn selector_is_empty(selector: &Value) -> bool {
    map_at(selector, "matchLabels").is_none_or(serde_json::Map::is_empty)
        && list(selector, "matchExpressions").is_empty()
}
