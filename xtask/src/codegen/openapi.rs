//! The schemas keel-apiserver serves at /openapi/v2 and /openapi/v3, written to
//! `control-plane/api/src/generated/openapi_schemas.json` (compact JSON, ≈0.5 MB: the definitions
//! reachable from what Keel serves, not all 730 of the package).
//!
//! kubernetes-validate holds the Kubernetes OpenAPI definitions as JSON schema (`$defs`); this turns
//! them back into the OpenAPI v3 form kube-apiserver serves in `components.schemas`:
//! - `#/$defs/X` → `#/components/schemas/X`; a reference with a description beside it is wrapped
//!   in `allOf` (OpenAPI 3.0 ignores a `$ref`'s siblings; kube-openapi wraps them the same way);
//! - `type: [X, "null"]` → `type: X` (the JSON-schema conversion adds `null` to every optional
//!   field; upstream marks no built-in field nullable);
//! - the `enum` the conversion adds to `apiVersion` and `kind` is dropped (upstream has none);
//! - IntOrString and Quantity get upstream's v3 forms (`format: int-or-string` with `oneOf`
//!   integer/string, and `oneOf` string/number): the conversion kept only a nullable `oneOf`;
//! - descriptions, `required`, `format` and every `x-kubernetes-*` extension are kept.
//!
//! Upstream's `default` values (zero values of non-pointer Go fields) and enum lists are not in
//! the package's data, so the served schemas have none.
//!
//! Written: `{"source", "kinds": {"group/version/Kind" (core: "version/Kind") → definition},
//! "schemas": {definition → schema}}`. The roots are the served resources' kinds, their lists, the
//! kinds their subresources take, and the meta.k8s.io types of every operation (Status,
//! DeleteOptions, Patch).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Result, bail};
use serde_json::{Map, Value, json};

/// The meta.k8s.io definitions every group version's operations name.
const OPERATION_TYPES: &[&str] = &[
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
];
const DEFS: &str = "#/$defs/";
const COMPONENTS: &str = "#/components/schemas/";
const INT_OR_STRING: &str = "io.k8s.apimachinery.pkg.util.intstr.IntOrString";
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";

/// `group/version/Kind` (`version/Kind` for the core group) → definition name.
fn kinds(definitions: &Map<String, Value>) -> BTreeMap<String, String> {
    let mut kinds = BTreeMap::new();
    for (name, definition) in definitions {
        for gvk in
            definition.get("x-kubernetes-group-version-kind").and_then(Value::as_array).into_iter().flatten()
        {
            let field = |f: &str| gvk.get(f).and_then(Value::as_str).unwrap_or_default();
            kinds.insert(gvk_key(field("group"), field("version"), field("kind")), name.clone());
        }
    }
    kinds
}

fn gvk_key(group: &str, version: &str, kind: &str) -> String {
    if group.is_empty() { format!("{version}/{kind}") } else { format!("{group}/{version}/{kind}") }
}

/// The generated document.
pub fn schemas(definitions: &Map<String, Value>, source: &str) -> Result<Value> {
    let all_kinds = kinds(definitions);
    let mut roots: Vec<String> = OPERATION_TYPES.iter().map(|s| (*s).to_owned()).collect();
    for resource in keel_api::resources::RESOURCES {
        let (group, version) = (resource.group, resource.version);
        let mut wanted = vec![gvk_key(group, version, resource.kind)];
        // Reviews are only created: they have no list.
        if resource.verbs.contains(&"list") {
            wanted.push(gvk_key(group, version, &format!("{}List", resource.kind)));
        }
        for sub in resource.subresources {
            let (g, v) = if sub.group.is_empty() { (group, version) } else { (sub.group, sub.version) };
            wanted.push(gvk_key(g, v, sub.kind));
        }
        for key in wanted {
            match all_kinds.get(&key) {
                Some(name) => roots.push(name.clone()),
                None => bail!("kubernetes-validate has no definition of {key}"),
            }
        }
    }
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut pending = roots;
    let mut schemas = BTreeMap::new();
    while let Some(name) = pending.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(definition) = definitions.get(&name) else { bail!("{name} is referred to but not defined") };
        collect_refs(definition, &mut pending);
        schemas.insert(name.clone(), definition_to_v3(&name, definition));
    }
    let kinds: BTreeMap<&String, &String> =
        all_kinds.iter().filter(|(_, name)| seen.contains(*name)).collect();
    Ok(json!({"source": source, "kinds": kinds, "schemas": schemas}))
}

fn collect_refs(schema: &Value, into: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("$ref", Value::String(target)) => {
                        into.push(target.trim_start_matches(DEFS).to_owned());
                    }
                    _ => collect_refs(value, into),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| collect_refs(item, into)),
        _ => {}
    }
}

fn definition_to_v3(name: &str, definition: &Value) -> Value {
    let description = definition.get("description").cloned();
    let mut converted = match name {
        INT_OR_STRING => {
            json!({"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]})
        }
        QUANTITY => json!({"oneOf": [{"type": "string"}, {"type": "number"}]}),
        _ => return schema_to_v3(definition, false),
    };
    if let (Some(description), Value::Object(map)) = (description, &mut converted) {
        map.insert("description".into(), description);
    }
    converted
}

/// One schema in OpenAPI v3 form; `drop_enum` for the schemas of `apiVersion` and `kind`.
fn schema_to_v3(schema: &Value, drop_enum: bool) -> Value {
    let Value::Object(map) = schema else { return schema.clone() };
    let mut out = Map::new();
    for (key, value) in map {
        let converted = match key.as_str() {
            "$ref" => Value::String(value.as_str().unwrap_or_default().replace(DEFS, COMPONENTS)),
            "type" => match value {
                Value::Array(types) => {
                    let mut real: Vec<&Value> = types.iter().filter(|t| t.as_str() != Some("null")).collect();
                    match real.len() {
                        1 => real.remove(0).clone(),
                        _ => Value::Array(real.into_iter().cloned().collect()),
                    }
                }
                other => other.clone(),
            },
            "enum" if drop_enum => continue,
            "properties" => Value::Object(
                value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .map(|(property, schema)| {
                        let typemeta = matches!(property.as_str(), "apiVersion" | "kind");
                        (property.clone(), schema_to_v3(schema, typemeta))
                    })
                    .collect(),
            ),
            "items" | "additionalProperties" | "not" => schema_to_v3(value, false),
            "oneOf" | "anyOf" | "allOf" => {
                Value::Array(value.as_array().into_iter().flatten().map(|s| schema_to_v3(s, false)).collect())
            }
            _ => value.clone(),
        };
        out.insert(key.clone(), converted);
    }
    // A reference with siblings (a property's description) is wrapped, as kube-openapi does.
    if out.len() > 1
        && let Some(reference) = out.remove("$ref")
    {
        out.insert("allOf".into(), json!([{"$ref": reference}]));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_schema_back_to_openapi_v3() {
        let property = json!({
            "description": "d",
            "$ref": "#/$defs/io.k8s.api.core.v1.PodSpec",
        });
        assert_eq!(
            schema_to_v3(&property, false),
            json!({"description": "d", "allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}]})
        );
        let list = json!({
            "type": ["array", "null"],
            "items": {"$ref": "#/$defs/io.k8s.api.core.v1.Container"},
            "x-kubernetes-list-type": "map",
        });
        assert_eq!(
            schema_to_v3(&list, false),
            json!({"type": "array", "items": {"$ref": "#/components/schemas/io.k8s.api.core.v1.Container"}, "x-kubernetes-list-type": "map"})
        );
        let object = json!({"type": ["object", "null"], "properties": {"kind": {"type": ["string", "null"], "enum": ["Pod"]}}});
        assert_eq!(
            schema_to_v3(&object, false),
            json!({"type": "object", "properties": {"kind": {"type": "string"}}})
        );
        let int_or_string = json!({"oneOf": [{"type": ["string", "null"]}, {"type": ["integer", "null"]}]});
        assert_eq!(
            definition_to_v3(INT_OR_STRING, &int_or_string),
            json!({"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]})
        );
    }
}
