//! The OpenAPI documents kube-apiserver serves, built from the served resources and their schemas:
//! one OpenAPI v3 document per group version (`/openapi/v3/api/v1`, `/openapi/v3/apis/apps/v1`)
//! with the index that names each by its hash (`/openapi/v3`), and the single OpenAPI v2 (Swagger)
//! document of `/openapi/v2` in JSON and in gnostic's protobuf form ([`gnostic`]).
//!
//! The schemas come from `generated/openapi_schemas.json` (`cargo xtask codegen`, from the
//! kubernetes-validate package's 1.34 definitions, in the OpenAPI v3 form with every
//! x-kubernetes extension); the paths and operations ([`paths`]) from the resource table, as
//! kube-apiserver's route builder lays them out. [`build`] takes the resources and a
//! [`SchemaSource`], so CustomResourceDefinitions can add their kinds' schemas and rebuild.

pub mod gnostic;
pub mod paths;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::LazyLock;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::resources::Resource;

/// Where v3 schema references point.
pub const V3_REF: &str = "#/components/schemas/";
/// Where v2 schema references point.
pub const V2_REF: &str = "#/definitions/";

/// The schemas the documents are built from.
pub trait SchemaSource {
    /// The OpenAPI v3 schema of a definition (references as `#/components/schemas/<name>`).
    fn schema(&self, name: &str) -> Option<&Value>;
    /// The definition of a kind (`io.k8s.api.apps.v1.Deployment` for apps/v1 Deployment).
    fn definition_of(&self, group: &str, version: &str, kind: &str) -> Option<&str>;
}

/// Definitions and the kinds naming them: the built-in ones ([`Schemas::builtin`]), to which
/// custom resources' schemas can be added.
#[derive(Debug, Clone, Deserialize)]
pub struct Schemas {
    /// `group/version/Kind` (`version/Kind` for core) → definition.
    kinds: HashMap<String, String>,
    schemas: HashMap<String, Value>,
}

fn kind_key(group: &str, version: &str, kind: &str) -> String {
    if group.is_empty() { format!("{version}/{kind}") } else { format!("{group}/{version}/{kind}") }
}

static BUILTIN: LazyLock<Schemas> = LazyLock::new(|| {
    serde_json::from_str(include_str!("generated/openapi_schemas.json"))
        .unwrap_or_else(|_| Schemas { kinds: HashMap::new(), schemas: HashMap::new() })
});

impl Schemas {
    /// The Kubernetes 1.34 definitions of what Keel serves.
    pub fn builtin() -> &'static Schemas {
        &BUILTIN
    }

    /// Adds (or replaces) a definition, and names it as the schema of a kind when one is given.
    pub fn insert(&mut self, name: &str, schema: Value, kind: Option<(&str, &str, &str)>) {
        if let Some((group, version, kind)) = kind {
            self.kinds.insert(kind_key(group, version, kind), name.to_owned());
        }
        self.schemas.insert(name.to_owned(), schema);
    }

    /// How many definitions there are.
    pub fn len(&self) -> usize {
        self.schemas.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.schemas.is_empty()
    }
}

impl SchemaSource for Schemas {
    fn schema(&self, name: &str) -> Option<&Value> {
        self.schemas.get(name)
    }

    fn definition_of(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        self.kinds.get(&kind_key(group, version, kind)).map(String::as_str)
    }
}

/// A served document and its hash (uppercase hex SHA-512 of the JSON, as kube-openapi's ETags).
#[derive(Debug, Clone)]
pub struct Served {
    pub json: Bytes,
    pub hash: String,
}

impl Served {
    fn new(document: &Value) -> Served {
        let json = Bytes::from(serde_json::to_vec(document).unwrap_or_default());
        Served { hash: hash(&json), json }
    }
}

/// Uppercase hex SHA-512, kube-openapi's `computeETag`.
pub fn hash(data: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA512, data);
    digest.as_ref().iter().map(|b| format!("{b:02X}")).collect()
}

/// Everything served under /openapi.
#[derive(Debug, Clone)]
pub struct Documents {
    /// `api/v1`, `apis/apps/v1` → that group version's v3 document.
    pub v3: BTreeMap<String, Served>,
    /// The /openapi/v3 index: `{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=…"}}}`.
    pub v3_index: Bytes,
    /// The v2 document (JSON) and its hash.
    pub v2: Served,
    /// The v2 document in gnostic's protobuf form (what kubectl 1.27/1.28 read).
    pub v2_protobuf: Bytes,
    /// Resources left out for want of a schema (served, but not documented).
    pub skipped: Vec<String>,
}

/// Why documents could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("no schema for {0}")]
    MissingSchema(String),
}

/// The group version path of a resource: `api/v1` or `apis/<group>/<version>`.
pub fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

/// Builds every document for `resources` from `schemas`; `version` is the v2 document's
/// `info.version` (`v1.34.0`). A resource whose kind has no schema is left out (and named in
/// [`Documents::skipped`]); a schema referring to a missing one is an error.
pub fn build(
    resources: &[Resource],
    schemas: &dyn SchemaSource,
    version: &str,
) -> Result<Documents, BuildError> {
    let mut by_group_version: BTreeMap<String, Vec<&Resource>> = BTreeMap::new();
    for resource in resources {
        by_group_version
            .entry(group_version_path(resource.group, resource.version))
            .or_default()
            .push(resource);
    }
    let mut v3 = BTreeMap::new();
    let mut v2_paths = Map::new();
    let mut v2_definitions = BTreeSet::new();
    let mut skipped = Vec::new();
    for (gv, resources) in &by_group_version {
        let mut items = Vec::new();
        for resource in resources {
            match paths::resource_paths(resource, schemas) {
                Ok(more) => items.extend(more),
                Err(BuildError::MissingSchema(what)) => {
                    skipped.push(format!("{} ({gv}): no schema for {what}", resource.plural));
                }
            }
        }
        if items.is_empty() {
            continue;
        }
        let mut referenced = BTreeSet::new();
        let mut v3_paths = Map::new();
        for item in &items {
            item.referenced(&mut referenced);
            v3_paths.insert(item.path.clone(), item.v3());
            v2_paths.insert(item.path.clone(), item.v2());
        }
        let closure = closure(referenced, schemas)?;
        let components: Map<String, Value> =
            closure.iter().filter_map(|name| Some((name.clone(), schemas.schema(name)?.clone()))).collect();
        v2_definitions.extend(closure);
        let document = json!({
            "components": {"schemas": components, "securitySchemes": security_definitions()},
            "info": {"title": "Kubernetes", "version": "unversioned"},
            "openapi": "3.0.0",
            "paths": v3_paths,
        });
        v3.insert(gv.clone(), Served::new(&document));
    }
    let index: Map<String, Value> = v3
        .iter()
        .map(|(gv, served)| {
            let url = format!("/openapi/v3/{gv}?hash={}", served.hash);
            (gv.clone(), json!({"serverRelativeURL": url}))
        })
        .collect();
    let v3_index = Bytes::from(serde_json::to_vec(&json!({"paths": index})).unwrap_or_default());
    let definitions: Map<String, Value> =
        v2_definitions.iter().filter_map(|name| Some((name.clone(), to_v2(schemas.schema(name)?)))).collect();
    let v2_document = json!({
        "definitions": definitions,
        "info": {"title": "Kubernetes", "version": version},
        "paths": v2_paths,
        "security": [{"BearerToken": []}],
        "securityDefinitions": security_definitions(),
        "swagger": "2.0",
    });
    let v2_protobuf = Bytes::from(gnostic::encode(&v2_document));
    Ok(Documents { v3, v3_index, v2: Served::new(&v2_document), v2_protobuf, skipped })
}

fn security_definitions() -> Value {
    json!({"BearerToken": {
        "description": "Bearer Token authentication",
        "in": "header",
        "name": "authorization",
        "type": "apiKey",
    }})
}

/// `names` and every definition their schemas refer to.
fn closure(names: BTreeSet<String>, schemas: &dyn SchemaSource) -> Result<BTreeSet<String>, BuildError> {
    let mut seen = BTreeSet::new();
    let mut pending: Vec<String> = names.into_iter().collect();
    while let Some(name) = pending.pop() {
        if seen.contains(&name) {
            continue;
        }
        let schema = schemas.schema(&name).ok_or_else(|| BuildError::MissingSchema(name.clone()))?;
        references(schema, &mut pending);
        seen.insert(name);
    }
    Ok(seen)
}

/// The definitions a v3 schema refers to.
fn references(schema: &Value, into: &mut Vec<String>) {
    match schema {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("$ref", Value::String(target)) => {
                        if let Some(name) = target.strip_prefix(V3_REF) {
                            into.push(name.to_owned());
                        }
                    }
                    _ => references(value, into),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| references(item, into)),
        _ => {}
    }
}

/// A v3 schema in the v2 (Swagger) form upstream serves: references to `#/definitions/`, a lone
/// `allOf` reference unwrapped to a `$ref` beside its description, a `oneOf` of types (IntOrString,
/// Quantity) as `type: string` (Swagger 2.0 has no `oneOf`), no `nullable`.
pub fn to_v2(schema: &Value) -> Value {
    let Value::Object(map) = schema else { return schema.clone() };
    let mut out = Map::new();
    for (key, value) in map {
        match key.as_str() {
            "$ref" => {
                let target = value.as_str().unwrap_or_default().replacen(V3_REF, V2_REF, 1);
                out.insert(key.clone(), Value::String(target));
            }
            "allOf" => match value.as_array().map(Vec::as_slice) {
                Some([only]) if only.get("$ref").is_some() && !map.contains_key("$ref") => {
                    if let Some(reference) = to_v2(only).get("$ref") {
                        out.insert("$ref".into(), reference.clone());
                    }
                }
                _ => {
                    out.insert(
                        key.clone(),
                        Value::Array(value.as_array().into_iter().flatten().map(to_v2).collect()),
                    );
                }
            },
            // Only a oneOf of bare types (IntOrString, Quantity); any other is kept as it is.
            "oneOf" if !map.contains_key("type") && is_type_union(value) => {
                out.insert("type".into(), Value::String("string".into()));
            }
            "nullable" => {}
            "properties" => {
                let properties: Map<String, Value> =
                    value.as_object().into_iter().flatten().map(|(k, v)| (k.clone(), to_v2(v))).collect();
                out.insert(key.clone(), Value::Object(properties));
            }
            "items" | "additionalProperties" | "not" => {
                out.insert(key.clone(), to_v2(value));
            }
            _ => {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

/// Whether a `oneOf` lists bare types only (`[{"type": "integer"}, {"type": "string"}]`).
fn is_type_union(one_of: &Value) -> bool {
    one_of.as_array().is_some_and(|branches| {
        !branches.is_empty()
            && branches.iter().all(|b| b.as_object().is_some_and(|o| o.len() == 1 && o.contains_key("type")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::RESOURCES;

    #[test]
    fn builtin_schemas_cover_every_served_kind() {
        let schemas = Schemas::builtin();
        assert!(schemas.len() > 300, "{}", schemas.len());
        for r in RESOURCES {
            assert!(schemas.definition_of(r.group, r.version, r.kind).is_some(), "{}", r.kind);
        }
        let documents = build(RESOURCES, schemas, "v1.34.0").unwrap();
        assert!(documents.skipped.is_empty(), "{:?}", documents.skipped);
        assert!(documents.v3.contains_key("api/v1") && documents.v3.contains_key("apis/apps/v1"));
        assert_eq!(documents.v3.len(), crate::resources::groups().len() + 1);
        // A kind without a schema (a custom resource whose schema was not added) is left out.
        let mut resources = RESOURCES.to_vec();
        resources.push(Resource { group: "example.org", kind: "Widget", plural: "widgets", ..RESOURCES[0] });
        let documents = build(&resources, schemas, "v1.34.0").unwrap();
        assert_eq!(documents.skipped.len(), 1, "{:?}", documents.skipped);
        assert!(!documents.v3.contains_key("apis/example.org/v1"));
    }

    #[test]
    fn v2_forms() {
        let property = json!({"allOf": [{"$ref": "#/components/schemas/a.B"}], "description": "d"});
        assert_eq!(to_v2(&property), json!({"$ref": "#/definitions/a.B", "description": "d"}));
        let int_or_string =
            json!({"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]});
        assert_eq!(to_v2(&int_or_string), json!({"format": "int-or-string", "type": "string"}));
        let validation = json!({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]});
        assert_eq!(to_v2(&validation), validation, "a custom resource's oneOf is not a type union");
        let list = json!({"type": "array", "items": {"$ref": "#/components/schemas/a.C"}});
        assert_eq!(to_v2(&list), json!({"type": "array", "items": {"$ref": "#/definitions/a.C"}}));
    }

    #[test]
    fn hashes_are_upstreams_form() {
        let h = hash(b"");
        assert_eq!(h.len(), 128);
        assert!(h.starts_with("CF83E1357EEFB8BD"), "{h}");
    }
}
