//! Strategic merge patch (`application/strategic-merge-patch+json`), as apimachinery's
//! `strategicpatch.StrategicMergePatch` applies it on the server: a JSON merge patch in which lists
//! with `patchStrategy: merge` are merged element by element — objects matched by their
//! `patchMergeKey` (containers by `name`, ports by `containerPort`...), scalars (finalizers) as a
//! union — and the directives `$patch: replace|delete|merge`, `$retainKeys`,
//! `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>` are honoured.
//!
//! The patch metadata comes from the Kubernetes 1.34 OpenAPI definitions (`generated/
//! patch_meta.json`, made by `cargo xtask codegen` from the kubernetes-validate package); the type
//! of the patched object is read from its apiVersion and kind. Where a list has no merge strategy,
//! or the type is unknown, a list is replaced as in a JSON merge patch.
//!
//! `$setElementOrder` puts the listed elements first, in its order, and keeps the others after them
//! in their order; upstream interleaves server-only elements by their old positions, which differs
//! only when the server holds elements the patch's author did not know.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::{Map, Value};

/// One property's patch metadata.
#[derive(Debug, Default, Deserialize)]
struct Field {
    /// The definition of the property's object value.
    #[serde(rename = "ref")]
    object: Option<String>,
    /// The definition of a list property's elements.
    items: Option<String>,
    /// The definition of a map property's values.
    values: Option<String>,
    strategy: Option<String>,
    key: Option<String>,
}

#[derive(Debug, Deserialize)]
struct PatchMeta {
    kinds: HashMap<String, String>,
    types: HashMap<String, HashMap<String, Field>>,
}

static META: LazyLock<PatchMeta> = LazyLock::new(|| {
    serde_json::from_str(include_str!("generated/patch_meta.json"))
        .unwrap_or_else(|_| PatchMeta { kinds: HashMap::new(), types: HashMap::new() })
});

/// The definition of the object with this apiVersion and kind (`apps/v1`, `Deployment`).
fn definition_of(object: &Value) -> Option<&'static str> {
    let api_version = object.get("apiVersion")?.as_str()?;
    let kind = object.get("kind")?.as_str()?;
    META.kinds.get(&format!("{api_version}/{kind}")).map(String::as_str)
}

fn field(definition: Option<&str>, name: &str) -> Option<&'static Field> {
    META.types.get(definition?)?.get(name)
}

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";
const SET_ORDER: &str = "$setElementOrder/";

/// Applies `patch` to `original`; an error names what in the patch cannot be applied.
pub fn apply(original: &Value, patch: &Value) -> Result<Value, String> {
    let Value::Object(patch) = patch else {
        return Err("a strategic merge patch must be a JSON object".into());
    };
    let Value::Object(original_map) = original else {
        return Err("the object to patch is not a JSON object".into());
    };
    let definition = definition_of(original);
    Ok(Value::Object(merge_map(original_map.clone(), patch, definition)?))
}

fn merge_map(
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
    definition: Option<&str>,
) -> Result<Map<String, Value>, String> {
    // upstream's handleDirectiveInMergeMap: a map is replaced by the patch or emptied, nothing else.
    match patch.get(PATCH) {
        None => {}
        Some(Value::String(directive)) if directive == "replace" => return Ok(strip_map(patch)),
        Some(Value::String(directive)) if directive == "delete" => return Ok(Map::new()),
        Some(other) => return Err(format!("unknown patch type: {other} in map")),
    }
    if let Some(retained) = patch.get(RETAIN_KEYS) {
        let keys: Vec<&str> = retained
            .as_array()
            .ok_or("$retainKeys must be a list")?
            .iter()
            .map(|k| k.as_str().ok_or("$retainKeys must list strings"))
            .collect::<Result<_, _>>()?;
        original.retain(|key, _| keys.contains(&key.as_str()));
    }
    for (key, value) in patch {
        if let Some(field_name) = key.strip_prefix(DELETE_FROM) {
            let gone = value.as_array().ok_or_else(|| format!("{key} must be a list"))?;
            if let Some(Value::Array(list)) = original.get_mut(field_name) {
                list.retain(|item| !gone.contains(item));
            }
        }
    }
    for (key, patch_value) in patch {
        if key.starts_with('$') {
            continue;
        }
        let meta = field(definition, key);
        if patch_value.is_null() {
            original.remove(key);
            continue;
        }
        let merged = match (original.remove(key), patch_value) {
            (Some(Value::Object(old)), Value::Object(new)) => {
                let child = meta.and_then(|m| m.object.as_deref());
                Value::Object(merge_values_map(old, new, meta, child)?)
            }
            (Some(Value::Array(old)), Value::Array(new)) => Value::Array(merge_list(old, new, meta)?),
            (_, new) => strip(new),
        };
        original.insert(key.clone(), merged);
    }
    for (key, order) in patch {
        if let Some(field_name) = key.strip_prefix(SET_ORDER) {
            let order = order.as_array().ok_or_else(|| format!("{key} must be a list"))?;
            let merge_key = field(definition, field_name).and_then(|m| m.key.as_deref());
            if let Some(Value::Array(list)) = original.get_mut(field_name) {
                reorder(list, order, merge_key);
            }
        }
    }
    Ok(original)
}

/// A map-valued property: an object of a known definition is merged by its own metadata; a map of
/// objects (e.g. `resources.limits` holds scalars, `data` strings) merges each entry, objects
/// recursively with the values' definition.
fn merge_values_map(
    old: Map<String, Value>,
    new: &Map<String, Value>,
    meta: Option<&Field>,
    child: Option<&str>,
) -> Result<Map<String, Value>, String> {
    if child.is_some() || meta.and_then(|m| m.values.as_deref()).is_none() {
        return merge_map(old, new, child);
    }
    // A map whose values are objects of one definition (e.g. a map of volumes by name).
    let values = meta.and_then(|m| m.values.as_deref());
    let mut merged = old;
    if new.get(PATCH).and_then(Value::as_str) == Some("replace") {
        return Ok(strip_map(new));
    }
    for (key, value) in new {
        if key.starts_with('$') {
            continue;
        }
        match (merged.remove(key), value) {
            (_, Value::Null) => {}
            (Some(Value::Object(old)), Value::Object(patch)) => {
                merged.insert(key.clone(), Value::Object(merge_map(old, patch, values)?));
            }
            (_, value) => {
                merged.insert(key.clone(), strip(value));
            }
        }
    }
    Ok(merged)
}

fn merge_list(original: Vec<Value>, patch: &[Value], meta: Option<&Field>) -> Result<Vec<Value>, String> {
    let merging =
        meta.and_then(|m| m.strategy.as_deref()).is_some_and(|s| s.split(',').any(|s| s == "merge"));
    let replace = patch.iter().any(|item| item.get(PATCH).and_then(Value::as_str) == Some("replace"));
    if !merging || replace {
        return Ok(patch
            .iter()
            .filter(|item| item.get(PATCH).and_then(Value::as_str) != Some("replace"))
            .map(strip)
            .collect());
    }
    let Some(key) = meta.and_then(|m| m.key.as_deref()) else {
        // Scalars: a union, the original's order first.
        let mut merged = original;
        for item in patch {
            if !merged.contains(item) {
                merged.push(item.clone());
            }
        }
        return Ok(merged);
    };
    let items = meta.and_then(|m| m.items.as_deref());
    let mut merged = original;
    for item in patch {
        let Value::Object(element) = item else {
            return Err(format!("a list merged by {key:?} holds a non-object element: {item}"));
        };
        let id = element.get(key);
        let position = merged.iter().position(|old| old.get(key) == id && id.is_some());
        match element.get(PATCH).and_then(Value::as_str) {
            Some("delete") => {
                merged.retain(|old| id.is_none() || old.get(key) != id);
            }
            Some("replace") => {}
            _ => match position {
                Some(at) => {
                    let Value::Object(old) = merged[at].take() else {
                        merged[at] = strip(item);
                        continue;
                    };
                    merged[at] = Value::Object(merge_map(old, element, items)?);
                }
                None => merged.push(strip(item)),
            },
        }
    }
    Ok(merged)
}

/// Puts the elements named by `order` first, in its order (objects named by their merge key).
fn reorder(list: &mut Vec<Value>, order: &[Value], merge_key: Option<&str>) {
    let identity = |item: &Value| match merge_key {
        Some(key) => item.get(key).cloned(),
        None => Some(item.clone()),
    };
    let mut rest = std::mem::take(list);
    for wanted in order {
        let wanted = match merge_key {
            Some(key) => wanted.get(key).cloned(),
            None => Some(wanted.clone()),
        };
        if let Some(at) = rest.iter().position(|item| wanted.is_some() && identity(item) == wanted) {
            list.push(rest.remove(at));
        }
    }
    list.extend(rest);
}

/// A patch value without its directives, as it is stored when there was nothing to merge into.
fn strip(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(strip_map(map)),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(|item| item.get(PATCH).is_none() || item.as_object().is_some_and(|m| m.len() > 1))
                .map(strip)
                .collect(),
        ),
        other => other.clone(),
    }
}

fn strip_map(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter()
        .filter(|(key, value)| !key.starts_with('$') && !value.is_null())
        .map(|(key, value)| (key.clone(), strip(value)))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: &Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "finalizers": ["a"], "labels": {"x": "1"}}, "spec": spec})
    }

    #[test]
    fn containers_merge_by_name() {
        let original = pod(&json!({"containers": [
            {"name": "a", "image": "busybox", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]},
            {"name": "b", "image": "nginx"}
        ]}));
        let patch = json!({"spec": {"containers": [
            {"name": "a", "image": "busybox:2", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]},
            {"name": "c", "image": "redis"}
        ]}});
        let patched = apply(&original, &patch).unwrap();
        let containers = &patched["spec"]["containers"];
        assert_eq!(containers.as_array().unwrap().len(), 3, "b kept, c added");
        assert_eq!(containers[0]["image"], "busybox:2");
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}])
        );
        assert_eq!(containers[1]["name"], "b");
        // A JSON merge patch would have replaced the list.
    }

    #[test]
    fn directives() {
        let original = pod(&json!({"containers": [{"name": "a", "image": "i"}, {"name": "b", "image": "j"}],
                                  "tolerations": [{"key": "k", "operator": "Exists"}]}));
        let deleted =
            apply(&original, &json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}]}})).unwrap();
        assert_eq!(deleted["spec"]["containers"], json!([{"name": "b", "image": "j"}]));
        let replaced = apply(
            &original,
            &json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "k"}]}}),
        )
        .unwrap();
        assert_eq!(replaced["spec"]["containers"], json!([{"name": "z", "image": "k"}]));
        let whole = apply(
            &original,
            &json!({"spec": {"$patch": "replace", "containers": [{"name": "y", "image": "y"}]}}),
        )
        .unwrap();
        assert_eq!(whole["spec"], json!({"containers": [{"name": "y", "image": "y"}]}));
        // Finalizers merge as a set; $deleteFromPrimitiveList removes.
        let finalizers = apply(&original, &json!({"metadata": {"finalizers": ["b", "a"]}})).unwrap();
        assert_eq!(finalizers["metadata"]["finalizers"], json!(["a", "b"]));
        let removed =
            apply(&finalizers, &json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})).unwrap();
        assert_eq!(removed["metadata"]["finalizers"], json!(["b"]));
        // Tolerations have no merge strategy: replaced.
        let tolerations = apply(&original, &json!({"spec": {"tolerations": [{"key": "t"}]}})).unwrap();
        assert_eq!(tolerations["spec"]["tolerations"], json!([{"key": "t"}]));
        // null deletes; labels merge as a map.
        let labels = apply(&original, &json!({"metadata": {"labels": {"x": null, "y": "2"}}})).unwrap();
        assert_eq!(labels["metadata"]["labels"], json!({"y": "2"}));
        let ordered = apply(
            &original,
            &json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}], "containers": [{"name": "a", "image": "i2"}]}}),
        )
        .unwrap();
        assert_eq!(
            ordered["spec"]["containers"],
            json!([{"name": "b", "image": "j"}, {"name": "a", "image": "i2"}])
        );
        assert!(
            apply(&original, &json!({"spec": {"$patch": "explode"}}))
                .unwrap_err()
                .contains("unknown patch type")
        );
        assert_eq!(apply(&original, &json!({"spec": {"$patch": "delete"}})).unwrap()["spec"], json!({}));
        assert!(apply(&original, &json!([1])).is_err());
    }

    #[test]
    fn workloads_and_retain_keys() {
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
                     "template": {"spec": {"containers": [{"name": "c", "image": "a", "ports": [{"containerPort": 80}]}]}}}});
        let patch = json!({"spec": {
            "strategy": {"$retainKeys": ["type"], "type": "Recreate"},
            "template": {"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 81}]}]}}
        }});
        let patched = apply(&deployment, &patch).unwrap();
        assert_eq!(patched["spec"]["strategy"], json!({"type": "Recreate"}));
        assert_eq!(
            patched["spec"]["template"]["spec"]["containers"][0]["ports"],
            json!([{"containerPort": 80}, {"containerPort": 81}]),
            "ports merge by containerPort"
        );
        assert_eq!(patched["spec"]["template"]["spec"]["containers"][0]["image"], "a");
    }
}
