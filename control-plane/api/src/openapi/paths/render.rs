//! The neutral paths and operations rendered as OpenAPI v3 path items (parameters with a `schema`,
//! `requestBody`, responses by media type) and as v2 (Swagger) ones (typed parameters, a `body`
//! parameter, `consumes`/`produces`, `schemes`).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use super::{Body, DELETE_OPTIONS, Operation, PATCH, Param, PathItem};
use crate::openapi::{V2_REF, V3_REF};

const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];
const PRODUCES: &[&str] = &["application/json", "application/yaml", "application/vnd.kubernetes.protobuf"];
const PRODUCES_WATCH: &[&str] =
    &["application/json;stream=watch", "application/vnd.kubernetes.protobuf;stream=watch"];

fn sorted(params: &[Param]) -> Vec<&Param> {
    let mut sorted: Vec<&Param> = params.iter().collect();
    sorted.sort_by_key(|p| p.name);
    sorted
}

fn gvk_json((group, version, kind): &(String, String, String)) -> Value {
    json!({"group": group, "kind": kind, "version": version})
}

impl Param {
    fn v3(&self) -> Value {
        let mut param = json!({
            "description": self.description,
            "in": if self.path { "path" } else { "query" },
            "name": self.name,
            "schema": {"type": self.kind, "uniqueItems": true},
        });
        if self.path {
            param["required"] = Value::Bool(true);
        }
        param
    }

    fn v2(&self) -> Value {
        let mut param = json!({
            "description": self.description,
            "in": if self.path { "path" } else { "query" },
            "name": self.name,
            "type": self.kind,
            "uniqueItems": true,
        });
        if self.path {
            param["required"] = Value::Bool(true);
        }
        param
    }
}

impl Operation {
    fn v3(&self) -> Value {
        let reference = |name: &str| json!({"$ref": format!("{V3_REF}{name}")});
        let mut out = Map::new();
        out.insert("description".into(), self.description.clone().into());
        out.insert("operationId".into(), self.id.clone().into());
        if !self.params.is_empty() {
            out.insert("parameters".into(), sorted(&self.params).iter().map(|p| p.v3()).collect());
        }
        let content = |types: &[&str], schema: &Value| -> Value {
            types.iter().map(|t| ((*t).to_owned(), json!({"schema": schema}))).collect::<Map<_, _>>().into()
        };
        match &self.body {
            Body::None => {}
            Body::Object(name) => {
                out.insert(
                    "requestBody".into(),
                    json!({"content": content(&["*/*"], &reference(name)), "required": true}),
                );
            }
            Body::Patch => {
                out.insert(
                    "requestBody".into(),
                    json!({"content": content(PATCH_TYPES, &reference(PATCH)), "required": true}),
                );
            }
            Body::DeleteOptions => {
                out.insert(
                    "requestBody".into(),
                    json!({"content": content(&["*/*"], &reference(DELETE_OPTIONS))}),
                );
            }
        }
        let mut types: Vec<&str> = PRODUCES.to_vec();
        if self.list {
            types.extend(PRODUCES_WATCH);
        }
        let mut responses = Map::new();
        for (code, description) in self.codes {
            let body =
                json!({"content": content(&types, &reference(&self.response)), "description": description});
            responses.insert(code.to_string(), body);
        }
        responses.insert("401".into(), json!({"description": "Unauthorized"}));
        out.insert("responses".into(), Value::Object(responses));
        out.insert("tags".into(), json!([self.tag]));
        out.insert("x-kubernetes-action".into(), self.action.into());
        out.insert("x-kubernetes-group-version-kind".into(), gvk_json(&self.gvk));
        Value::Object(out)
    }

    fn v2(&self) -> Value {
        let reference = |name: &str| json!({"$ref": format!("{V2_REF}{name}")});
        let mut out = Map::new();
        let consumes: &[&str] = if matches!(self.body, Body::Patch) { PATCH_TYPES } else { &["*/*"] };
        out.insert("consumes".into(), json!(consumes));
        out.insert("description".into(), self.description.clone().into());
        out.insert("operationId".into(), self.id.clone().into());
        let mut params: Vec<Value> = Vec::new();
        match &self.body {
            Body::None => {}
            Body::Object(name) => params
                .push(json!({"in": "body", "name": "body", "required": true, "schema": reference(name)})),
            Body::Patch => params
                .push(json!({"in": "body", "name": "body", "required": true, "schema": reference(PATCH)})),
            Body::DeleteOptions => {
                params.push(json!({"in": "body", "name": "body", "schema": reference(DELETE_OPTIONS)}));
            }
        }
        params.extend(sorted(&self.params).iter().map(|p| p.v2()));
        if !params.is_empty() {
            out.insert("parameters".into(), Value::Array(params));
        }
        let mut produces: Vec<&str> = PRODUCES.to_vec();
        if self.list {
            produces.extend(PRODUCES_WATCH);
        }
        out.insert("produces".into(), json!(produces));
        let mut responses = Map::new();
        for (code, description) in self.codes {
            responses.insert(
                code.to_string(),
                json!({"description": description, "schema": reference(&self.response)}),
            );
        }
        responses.insert("401".into(), json!({"description": "Unauthorized"}));
        out.insert("responses".into(), Value::Object(responses));
        out.insert("schemes".into(), json!(["https"]));
        out.insert("tags".into(), json!([self.tag]));
        out.insert("x-kubernetes-action".into(), self.action.into());
        out.insert("x-kubernetes-group-version-kind".into(), gvk_json(&self.gvk));
        Value::Object(out)
    }
}

impl PathItem {
    /// Adds the definitions this path's operations name.
    pub fn referenced(&self, into: &mut BTreeSet<String>) {
        for op in &self.operations {
            into.insert(op.response.clone());
            match &op.body {
                Body::Object(name) => {
                    into.insert(name.clone());
                }
                Body::Patch => {
                    into.insert(PATCH.into());
                }
                Body::DeleteOptions => {
                    into.insert(DELETE_OPTIONS.into());
                }
                Body::None => {}
            }
        }
    }

    /// The v3 path item.
    pub fn v3(&self) -> Value {
        let mut out = Map::new();
        for op in &self.operations {
            out.insert(op.method.into(), op.v3());
        }
        if !self.params.is_empty() {
            out.insert("parameters".into(), sorted(&self.params).iter().map(|p| p.v3()).collect());
        }
        Value::Object(out)
    }

    /// The v2 path item.
    pub fn v2(&self) -> Value {
        let mut out = Map::new();
        for op in &self.operations {
            out.insert(op.method.into(), op.v2());
        }
        if !self.params.is_empty() {
            out.insert("parameters".into(), sorted(&self.params).iter().map(|p| p.v2()).collect());
        }
        Value::Object(out)
    }
}
