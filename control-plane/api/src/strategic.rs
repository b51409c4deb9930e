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
//! A merged list is ordered as upstream orders it (normalizeElementOrder and mergeSortedSlice): the
//! elements the patch names (or its `$setElementOrder` lists) in the patch's order, the server's
//! other elements in theirs, interleaved by their places in the original list — so an element the
//! patch adds comes before the ones it does not mention.

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
            // A map whose strategy is replace (a PodDisruptionBudget's selector) is taken whole.
            (Some(Value::Object(_)), new @ Value::Object(_))
                if meta
                    .and_then(|m| m.strategy.as_deref())
                    .is_some_and(|s| s.split(',').any(|s| s == "replace")) =>
            {
                strip(new)
            }
            (Some(Value::Object(old)), Value::Object(new)) => {
                let child = meta.and_then(|m| m.object.as_deref());
                Value::Object(merge_values_map(old, new, meta, child)?)
            }
            (Some(Value::Array(old)), Value::Array(new)) => {
                let order = set_element_order(patch, key)?;
                Value::Array(merge_list(&old, new, meta, order)?)
            }
            (_, new) => strip(new),
        };
        original.insert(key.clone(), merged);
    }
    // An order for a list the patch does not otherwise touch.
    for key in patch.keys() {
        if let Some(field_name) = key.strip_prefix(SET_ORDER)
            && !patch.contains_key(field_name)
            && let Some(Value::Array(list)) = original.remove(field_name)
        {
            let order = set_element_order(patch, field_name)?;
            let merged = merge_list(&list, &[], field(definition, field_name), order)?;
            original.insert(field_name.to_owned(), Value::Array(merged));
        }
    }
    Ok(original)
}

/// The `$setElementOrder/<field>` list of a patch, if it has one.
fn set_element_order<'a>(patch: &'a Map<String, Value>, field: &str) -> Result<Option<&'a [Value]>, String> {
    match patch.get(&format!("{SET_ORDER}{field}")) {
        None => Ok(None),
        Some(Value::Array(order)) => Ok(Some(order)),
        Some(_) => Err(format!("{SET_ORDER}{field} must be a list")),
    }
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

/// upstream's mergeSlice: replaced unless the list merges; merged (maps by their merge key, scalars
/// as a union); then ordered as upstream's normalizeElementOrder orders it: the elements named by the
/// patch (or by its `$setElementOrder`, `order`) in that order, the server's other elements in theirs,
/// interleaved by their places in the original list (mergeSortedSlice).
fn merge_list(
    original: &[Value],
    patch: &[Value],
    meta: Option<&Field>,
    order: Option<&[Value]>,
) -> Result<Vec<Value>, String> {
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
    let key = meta.and_then(|m| m.key.as_deref());
    let identity = |item: &Value| -> Option<Value> {
        match key {
            Some(key) => item.get(key).cloned(),
            None => Some(item.clone()),
        }
    };
    let mut merged = original.to_vec();
    match key {
        None => {
            for item in patch {
                if !merged.contains(item) {
                    merged.push(item.clone());
                }
            }
        }
        Some(key) => {
            let items = meta.and_then(|m| m.items.as_deref());
            for item in patch {
                let Value::Object(element) = item else {
                    return Err(format!("a list merged by {key:?} holds a non-object element: {item}"));
                };
                let Some(id) = element.get(key) else {
                    return Err(format!("map: {item} does not contain declared merge key: {key}"));
                };
                let position = merged.iter().position(|old| old.get(key) == Some(id));
                match element.get(PATCH) {
                    Some(Value::String(directive)) if directive == "delete" => {
                        merged.retain(|old| old.get(key) != Some(id));
                    }
                    Some(other) => return Err(format!("unknown patch type: {other} in map: {item}")),
                    None => match position {
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
        }
    }
    // The elements the patch names, by identity (a `$setElementOrder` names maps by their merge key
    // alone, as the patch does).
    let wanted: Vec<Option<Value>> =
        order.unwrap_or(patch).iter().filter(|item| item.get(PATCH).is_none()).map(identity).collect();
    let server: Vec<Option<Value>> = original.iter().map(identity).collect();
    let place = |list: &[Option<Value>], item: &Value| {
        let id = identity(item);
        list.iter().position(|candidate| id.is_some() && *candidate == id)
    };
    let (mut named, mut server_only): (Vec<Value>, Vec<Value>) =
        merged.into_iter().partition(|item| place(&wanted, item).is_some());
    named.sort_by_key(|item| place(&wanted, item));
    server_only.sort_by_key(|item| place(&server, item));
    // mergeSortedSlice: a server-only element goes before a named one that comes after it on the
    // server; otherwise the named one goes first.
    let mut out = Vec::with_capacity(named.len() + server_only.len());
    let (mut left, mut right) = (server_only.into_iter().peekable(), named.into_iter().peekable());
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (Some(l), Some(r)) => {
                matches!((place(&server, l), place(&server, r)), (Some(li), Some(ri)) if li < ri)
            }
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        out.extend(if take_left { left.next() } else { right.next() });
    }
    Ok(out)
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
        let names: Vec<&str> =
            containers.as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["a", "c", "b"],
            "b kept, c added: the patch's elements in its order, b where it was"
        );
        assert_eq!(containers[0]["image"], "busybox:2");
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}])
        );
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
        assert_eq!(finalizers["metadata"]["finalizers"], json!(["b", "a"]), "in the patch's order");
        let added = apply(&original, &json!({"metadata": {"finalizers": ["x"]}})).unwrap();
        assert_eq!(added["metadata"]["finalizers"], json!(["x", "a"]), "an added one first, as upstream");
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
        // A container added by kubectl patch goes first (kubectl logs/exec pick the first).
        let sidecar =
            apply(&original, &json!({"spec": {"containers": [{"name": "s", "image": "x"}]}})).unwrap();
        let names: Vec<&str> = sidecar["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["s", "a", "b"]);
        // Elements without their merge key, and unknown directives in a list, are refused.
        let no_key = apply(&original, &json!({"spec": {"containers": [{"image": "x"}]}})).unwrap_err();
        assert!(no_key.contains("does not contain declared merge key: name"), "{no_key}");
        assert!(
            apply(&original, &json!({"spec": {"containers": [{"name": "a", "$patch": "merge"}]}})).is_err()
        );
    }

    #[test]
    fn a_replace_strategy_map_is_taken_whole() {
        let budget = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "b"},
            "spec": {"selector": {"matchLabels": {"app": "a", "tier": "x"}}, "minAvailable": 1}});
        let patched = apply(&budget, &json!({"spec": {"selector": {"matchLabels": {"app": "a"}}}})).unwrap();
        assert_eq!(patched["spec"]["selector"], json!({"matchLabels": {"app": "a"}}));
        assert_eq!(patched["spec"]["minAvailable"], 1);
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
            json!([{"containerPort": 81}, {"containerPort": 80}]),
            "ports merge by containerPort; the one the patch adds comes first, as upstream orders it"
        );
        assert_eq!(patched["spec"]["template"]["spec"]["containers"][0]["image"], "a");
    }
}
