//! Custom resources in the OpenAPI documents, as apiextensions-apiserver's OpenAPI builder adds
//! them: each served version's kind and list kind as definitions named by the reversed group
//! (`dev.keel.test.v1.Widget`), the schema as the CRD has it with apiVersion, kind and metadata
//! (an ObjectMeta reference) filled in and its group-version-kind; the list with its items.

use serde_json::{Value, json};

use crate::custom;
use crate::openapi::Schemas;
use crate::resources::{RESOURCES, Resource};

const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DOC: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const LIST_METADATA_DOC: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const META: &str = "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.";

/// `<reversed group>.<version>.<Kind>` (upstream's ToRESTFriendlyName of `group/version/Kind`).
pub fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// Every resource served now and the schemas of their kinds: the built-in ones and the custom
/// resources' (for `OpenApi::rebuild` whenever [`custom::generation`] moves).
pub fn served(builtin: &Schemas) -> (Vec<Resource>, Schemas) {
    let mut resources: Vec<Resource> = RESOURCES.to_vec();
    let mut schemas = builtin.clone();
    for resource in custom::resources() {
        let Some(version) = custom::version_of(resource) else { continue };
        let (group, v, kind) = (resource.group, resource.version, resource.kind);
        let name = definition_name(group, v, kind);
        let mut schema = match &version.openapi_schema {
            Value::Object(_) => version.openapi_schema.clone(),
            _ => json!({"type": "object"}),
        };
        if let Value::Object(map) = &mut schema {
            let properties = map.entry("properties").or_insert_with(|| json!({}));
            properties["apiVersion"] = json!({"type": "string", "description": API_VERSION_DOC});
            properties["kind"] = json!({"type": "string", "description": KIND_DOC});
            properties["metadata"] =
                json!({"allOf": [{"$ref": format!("{META}ObjectMeta")}], "description": METADATA_DOC});
            map.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": group, "kind": kind, "version": v}]),
            );
        }
        schemas.insert(&name, schema, Some((group, v, kind)));
        let list_kind =
            if version.list_kind.is_empty() { format!("{kind}List") } else { version.list_kind.clone() };
        let list = json!({
            "description": format!("{list_kind} is a list of {kind}"),
            "type": "object",
            "required": ["items"],
            "properties": {
                "apiVersion": {"type": "string", "description": API_VERSION_DOC},
                "items": {
                    "type": "array",
                    "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", resource.plural),
                    "items": {"$ref": format!("#/components/schemas/{name}")},
                },
                "kind": {"type": "string", "description": KIND_DOC},
                "metadata": {"allOf": [{"$ref": format!("{META}ListMeta")}], "description": LIST_METADATA_DOC},
            },
            "x-kubernetes-group-version-kind": [{"group": group, "kind": list_kind, "version": v}],
        });
        // The documents ask for `<Kind>List`; listKind names it in the CRD.
        schemas.insert(&definition_name(group, v, &list_kind), list.clone(), Some((group, v, &list_kind)));
        if list_kind != format!("{kind}List") {
            schemas.insert(
                &definition_name(group, v, &format!("{kind}List")),
                list,
                Some((group, v, &format!("{kind}List"))),
            );
        }
        resources.push(*resource);
    }
    (resources, schemas)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(definition_name("test.keel.dev", "v1", "Widget"), "dev.keel.test.v1.Widget");
    }
}
