//! Structural schemas (apiextensions-apiserver's `pkg/apiserver/schema`): a CRD version's
//! `openAPIV3Schema` read into a tree of [`Schema`]s, checked for structurality with upstream's
//! messages ([`structural_errors`]), and used on custom resources: validation of values
//! ([`Schema::validate`], upstream's kube-openapi schema validator with its field paths and
//! messages), pruning of unknown fields ([`Schema::prune`]) and defaulting ([`Schema::apply_defaults`]).
//!
//! Server-side apply reads `list_type`, `list_map_keys` and `map_type` of the tree (the
//! `x-kubernetes-list-type`, `x-kubernetes-list-map-keys` and `x-kubernetes-map-type` extensions)
//! through [`crate::custom::version_of`]'s `schema`.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::status::{FieldError, FieldErrorKind};
use crate::validation::{child, index, invalid, key};

/// One node of a structural schema; nested value validations (allOf, anyOf, oneOf, not) are
/// nodes too, holding only validations.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    /// `type`: object, array, string, integer, number, boolean, or empty.
    pub kind: String,
    pub format: String,
    pub properties: BTreeMap<String, Schema>,
    /// `additionalProperties`: a schema (a map's values), or a boolean.
    pub additional_properties: Option<Additional>,
    pub items: Option<Box<Schema>>,
    pub required: Vec<String>,
    pub enumeration: Option<Vec<Value>>,
    pub pattern: Option<(String, regex::Regex)>,
    pub minimum: Option<f64>,
    pub exclusive_minimum: bool,
    pub maximum: Option<f64>,
    pub exclusive_maximum: bool,
    pub multiple_of: Option<f64>,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub min_items: Option<u64>,
    pub max_items: Option<u64>,
    pub min_properties: Option<u64>,
    pub max_properties: Option<u64>,
    pub nullable: bool,
    pub default: Option<Value>,
    /// `x-kubernetes-preserve-unknown-fields`
    pub preserve_unknown_fields: bool,
    /// `x-kubernetes-embedded-resource`
    pub embedded_resource: bool,
    /// `x-kubernetes-int-or-string`
    pub int_or_string: bool,
    /// `x-kubernetes-list-type` (atomic, set, map), for server-side apply.
    pub list_type: Option<String>,
    /// `x-kubernetes-list-map-keys`, for server-side apply.
    pub list_map_keys: Vec<String>,
    /// `x-kubernetes-map-type` (granular, atomic), for server-side apply.
    pub map_type: Option<String>,
    pub all_of: Vec<Schema>,
    pub any_of: Vec<Schema>,
    pub one_of: Vec<Schema>,
    pub not: Option<Box<Schema>>,
    /// What the JSON held, for the structural checks (which look at what was written, not parsed).
    raw: Map<String, Value>,
}

/// `additionalProperties`.
#[derive(Debug, Clone)]
pub enum Additional {
    Allows(bool),
    Schema(Box<Schema>),
}

/// A problem reading a schema (an invalid pattern): the field path and the message.
pub type SchemaError = FieldError;

impl Schema {
    /// Reads a JSONSchemaProps JSON object; `path` names it in errors (`spec.versions[0].schema.openAPIV3Schema`).
    pub fn parse(value: &Value, path: &str) -> Result<Schema, Vec<SchemaError>> {
        let mut errors = Vec::new();
        let schema = Self::read(value, path, &mut errors);
        if errors.is_empty() { Ok(schema) } else { Err(errors) }
    }

    fn read(value: &Value, path: &str, errors: &mut Vec<SchemaError>) -> Schema {
        let Some(map) = value.as_object() else { return Schema::default() };
        let text = |k: &str| map.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
        let flag = |k: &str| map.get(k).and_then(Value::as_bool).unwrap_or(false);
        let number = |k: &str| map.get(k).and_then(Value::as_f64);
        let count = |k: &str| map.get(k).and_then(Value::as_u64);
        let list = |k: &str, errors: &mut Vec<SchemaError>| -> Vec<Schema> {
            map.get(k)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(i, v)| Self::read(v, &index(&child(path, k), i), errors))
                .collect()
        };
        let pattern = match map.get("pattern").and_then(Value::as_str) {
            Some(p) if !p.is_empty() => match regex::Regex::new(p) {
                Ok(re) => Some((p.to_owned(), re)),
                Err(e) => {
                    errors.push(invalid(
                        &child(path, "pattern"),
                        &Value::String(p.to_owned()),
                        &format!("must be a valid regular expression, but isn't: {e}"),
                    ));
                    None
                }
            },
            _ => None,
        };
        let properties = map
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.clone(), Self::read(v, &key(&child(path, "properties"), k), errors)))
            .collect();
        let additional_properties = match map.get("additionalProperties") {
            Some(Value::Bool(b)) => Some(Additional::Allows(*b)),
            Some(v @ Value::Object(_)) => Some(Additional::Schema(Box::new(Self::read(
                v,
                &child(path, "additionalProperties"),
                errors,
            )))),
            _ => None,
        };
        Schema {
            kind: text("type"),
            format: text("format"),
            properties,
            additional_properties,
            items: map
                .get("items")
                .filter(|v| v.is_object())
                .map(|v| Box::new(Self::read(v, &child(path, "items"), errors))),
            required: map
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            enumeration: map.get("enum").and_then(Value::as_array).cloned(),
            pattern,
            minimum: number("minimum"),
            exclusive_minimum: flag("exclusiveMinimum"),
            maximum: number("maximum"),
            exclusive_maximum: flag("exclusiveMaximum"),
            multiple_of: number("multipleOf"),
            min_length: count("minLength"),
            max_length: count("maxLength"),
            min_items: count("minItems"),
            max_items: count("maxItems"),
            min_properties: count("minProperties"),
            max_properties: count("maxProperties"),
            nullable: flag("nullable"),
            default: map.get("default").cloned(),
            preserve_unknown_fields: flag("x-kubernetes-preserve-unknown-fields"),
            embedded_resource: flag("x-kubernetes-embedded-resource"),
            int_or_string: flag("x-kubernetes-int-or-string"),
            list_type: map.get("x-kubernetes-list-type").and_then(Value::as_str).map(str::to_owned),
            list_map_keys: map
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            map_type: map.get("x-kubernetes-map-type").and_then(Value::as_str).map(str::to_owned),
            all_of: list("allOf", errors),
            any_of: list("anyOf", errors),
            one_of: list("oneOf", errors),
            not: map
                .get("not")
                .filter(|v| v.is_object())
                .map(|v| Box::new(Self::read(v, &child(path, "not"), errors))),
            raw: map.clone(),
        }
    }

    /// The schema of a map's values, when `additionalProperties` is a schema.
    fn additional_schema(&self) -> Option<&Schema> {
        match &self.additional_properties {
            Some(Additional::Schema(schema)) => Some(schema),
            _ => None,
        }
    }
}

// ---- Structurality (upstream's ValidateStructural). ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

/// The reasons `schema` (at `path`) is not structural, in upstream's order (sorted by message).
pub fn structural_errors(schema: &Schema, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    invariants(schema, Level::Root, path, &mut errors);
    errors.sort_by_key(ToString::to_string);
    errors
}

fn invariants(s: &Schema, level: Level, path: &str, errors: &mut Vec<FieldError>) {
    if s.kind == "array" && s.items.is_none() {
        errors.push(FieldError::required(&child(path, "items"), "must be specified"));
    }
    if let Some(items) = &s.items {
        invariants(items, Level::Item, &child(path, "items"), errors);
    }
    for (name, property) in &s.properties {
        invariants(property, Level::Field, &key(&child(path, "properties"), name), errors);
    }
    if s.additional_properties.is_some() {
        if level == Level::Root {
            errors.push(FieldError::forbidden(
                &child(path, "additionalProperties"),
                "must not be used at the root",
            ));
        }
        if let Some(values) = s.additional_schema() {
            invariants(values, Level::Field, &child(path, "additionalProperties"), errors);
        }
        if !s.properties.is_empty() && !matches!(s.additional_properties, Some(Additional::Allows(true))) {
            errors.push(FieldError::forbidden(
                &child(path, "additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
    }
    if s.int_or_string && s.preserve_unknown_fields {
        errors.push(FieldError::invalid(
            &child(path, "x-kubernetes-preserve-unknown-fields"),
            &Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if s.int_or_string && s.embedded_resource {
        errors.push(FieldError::invalid(
            &child(path, "x-kubernetes-embedded-resource"),
            &Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    let int_or_string_any_of = is_int_or_string_pair(&s.any_of);
    let int_or_string_all_of = s.all_of.first().is_some_and(|first| is_int_or_string_pair(&first.any_of));
    value_validation(s, int_or_string_any_of, int_or_string_all_of, path, errors);
    if s.embedded_resource && s.kind != "object" {
        if s.kind.is_empty() {
            errors.push(FieldError::required(
                &child(path, "type"),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        } else {
            errors.push(invalid(
                &child(path, "type"),
                &Value::String(s.kind.clone()),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        }
    } else if s.kind.is_empty() && !s.int_or_string && !s.preserve_unknown_fields {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errors.push(FieldError::required(&child(path, "type"), detail));
    }
    if s.embedded_resource && s.additional_properties.is_some() {
        errors.push(FieldError::forbidden(
            &child(path, "additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if level == Level::Root && !s.kind.is_empty() && s.kind != "object" {
        errors.push(invalid(
            &child(path, "type"),
            &Value::String(s.kind.clone()),
            "must be object at the root",
        ));
    }
    let check_metadata = level == Level::Root || s.embedded_resource;
    for field in ["kind", "apiVersion"] {
        if let Some(p) = s.properties.get(field)
            && check_metadata
            && p.kind != "string"
        {
            errors.push(invalid(
                &child(&key(&child(path, "properties"), field), "type"),
                &Value::String(p.kind.clone()),
                "must be string",
            ));
        }
    }
    if let Some(metadata) = s.properties.get("metadata") {
        let at = key(&child(path, "properties"), "metadata");
        if check_metadata && metadata.kind != "object" {
            errors.push(invalid(
                &child(&at, "type"),
                &Value::String(metadata.kind.clone()),
                "must be object",
            ));
        }
        if level == Level::Root {
            // Only name and generateName may be restricted, by value validations of their own.
            let others = metadata.raw.keys().any(|k| !matches!(k.as_str(), "type" | "properties"))
                || metadata.properties.keys().any(|k| k != "name" && k != "generateName");
            if others {
                errors.push(FieldError::forbidden(
                    &at,
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                ));
            }
        }
    }
    if s.embedded_resource && !s.preserve_unknown_fields && s.properties.is_empty() {
        errors.push(FieldError::required(
            &child(path, "properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
    for (field, detail) in
        [("uniqueItems", "uniqueItems cannot be set to true since the runtime complexity becomes quadratic")]
    {
        if s.raw.get(field) == Some(&Value::Bool(true)) {
            errors.push(FieldError::forbidden(&child(path, field), detail));
        }
    }
    for (field, detail) in [
        ("$ref", "$ref is not supported"),
        ("id", "id is not supported"),
        ("additionalItems", "additionalItems is not supported"),
        ("patternProperties", "patternProperties is not supported"),
        ("definitions", "definitions is not supported"),
        ("dependencies", "dependencies is not supported"),
    ] {
        if s.raw.contains_key(field) {
            errors.push(FieldError::forbidden(&child(path, field), detail));
        }
    }
    if s.kind == "null" {
        errors.push(FieldError::forbidden(&child(path, "type"), "type cannot be set to null"));
    }
    if s.raw.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        errors.push(FieldError::invalid(
            &child(path, "x-kubernetes-preserve-unknown-fields"),
            &Value::Bool(false),
            "must be true or undefined",
        ));
    }
    list_and_map_types(s, path, errors);
}

/// The extensions server-side apply reads: x-kubernetes-list-type (atomic, set, map — map with its
/// keys), x-kubernetes-list-map-keys and x-kubernetes-map-type (granular, atomic).
fn list_and_map_types(s: &Schema, path: &str, errors: &mut Vec<FieldError>) {
    if let Some(list_type) = &s.list_type {
        let at = child(path, "x-kubernetes-list-type");
        if !matches!(list_type.as_str(), "atomic" | "set" | "map") {
            errors.push(FieldError::not_supported(
                &at,
                &list_type.as_str().into(),
                &["atomic", "set", "map"],
            ));
        } else if s.kind != "array" {
            errors.push(invalid(&at, &list_type.as_str().into(), "must only be used on type array"));
        } else if list_type == "map" && s.list_map_keys.is_empty() {
            errors.push(FieldError::required(
                &child(path, "x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
    }
    if !s.list_map_keys.is_empty() && s.list_type.as_deref() != Some("map") {
        errors.push(FieldError::forbidden(
            &child(path, "x-kubernetes-list-map-keys"),
            "must not be set if x-kubernetes-list-type is not map",
        ));
    }
    if let Some(map_type) = &s.map_type {
        let at = child(path, "x-kubernetes-map-type");
        if !matches!(map_type.as_str(), "granular" | "atomic") {
            errors.push(FieldError::not_supported(&at, &map_type.as_str().into(), &["granular", "atomic"]));
        } else if s.kind != "object" {
            errors.push(invalid(&at, &map_type.as_str().into(), "must only be used on type object"));
        }
    }
}

fn is_int_or_string_pair(any_of: &[Schema]) -> bool {
    any_of.len() == 2
        && any_of[0].kind == "integer"
        && any_of[1].kind == "string"
        && any_of.iter().all(|s| s.raw.len() == 1)
}

fn value_validation(
    s: &Schema,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    path: &str,
    errors: &mut Vec<FieldError>,
) {
    if !skip_any_of {
        for (i, nested) in s.any_of.iter().enumerate() {
            nested_validation(nested, false, &index(&child(path, "anyOf"), i), errors);
        }
    }
    for (i, nested) in s.all_of.iter().enumerate() {
        nested_validation(
            nested,
            skip_first_all_of_any_of && i == 0,
            &index(&child(path, "allOf"), i),
            errors,
        );
    }
    for (i, nested) in s.one_of.iter().enumerate() {
        nested_validation(nested, false, &index(&child(path, "oneOf"), i), errors);
    }
    if let Some(not) = &s.not {
        nested_validation(not, false, &child(path, "not"), errors);
    }
}

/// upstream's validateNestedValueValidation: inside allOf/anyOf/oneOf/not, only value validations.
fn nested_validation(s: &Schema, skip_any_of: bool, path: &str, errors: &mut Vec<FieldError>) {
    value_validation(s, skip_any_of, false, path, errors);
    if let Some(items) = &s.items {
        nested_validation(items, false, &child(path, "items"), errors);
    }
    for (name, property) in &s.properties {
        nested_validation(property, false, &key(&child(path, "properties"), name), errors);
    }
    let forbidden = |field: &str, detail: &str| FieldError::forbidden(&child(path, field), detail);
    if !s.kind.is_empty() {
        errors.push(forbidden("type", "must be empty to be structural"));
    }
    if s.additional_properties.is_some() {
        errors.push(forbidden("additionalProperties", "must be undefined to be structural"));
    }
    for (field, detail) in [
        ("default", "must be undefined to be structural"),
        ("title", "must be empty to be structural"),
        ("description", "must be empty to be structural"),
        ("externalDocs", "must be undefined to be structural"),
        ("x-kubernetes-list-map-keys", "must be empty to be structural"),
        ("x-kubernetes-list-type", "must be undefined to be structural"),
        ("x-kubernetes-map-type", "must be undefined to be structural"),
        ("x-kubernetes-validations", "must be empty to be structural"),
    ] {
        if s.raw.contains_key(field) {
            errors.push(forbidden(field, detail));
        }
    }
    for (field, set, detail) in [
        ("nullable", s.nullable, "must be false to be structural"),
        ("x-kubernetes-preserve-unknown-fields", s.preserve_unknown_fields, "must be false to be structural"),
        ("x-kubernetes-embedded-resource", s.embedded_resource, "must be false to be structural"),
        ("x-kubernetes-int-or-string", s.int_or_string, "must be false to be structural"),
    ] {
        if set {
            errors.push(forbidden(field, detail));
        }
    }
    if s.properties.contains_key("metadata") {
        errors.push(FieldError::forbidden(
            &key(&child(path, "properties"), "metadata"),
            "must not be specified in a nested context",
        ));
    }
}

// ---- Values. ----

/// The type name kube-openapi reports for a value.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(kind: &str, value: &Value) -> bool {
    match kind {
        "" => true,
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "integer" => {
            value.as_i64().is_some()
                || value.as_u64().is_some()
                || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        "number" => value.is_number(),
        _ => false,
    }
}

/// `spec.x` as kube-openapi names it in its messages (`spec.x in body ...`).
fn in_body(path: &str) -> String {
    format!("{} in body", if path.is_empty() { "body" } else { path })
}

fn type_invalid(path: &str, kind: &str, value: &Value) -> FieldError {
    let actual = type_name(value);
    FieldError {
        field: path.to_owned(),
        kind: FieldErrorKind::TypeInvalid,
        detail: format!("{actual:?}: {} must be of type {kind}: {actual:?}", in_body(path)),
    }
}

fn number_text(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 { format!("{}", n as i64) } else { n.to_string() }
}

impl Schema {
    /// The field errors of `value` at `path` (empty at the root of an object).
    pub fn validate(&self, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
        if value.is_null() {
            if !self.nullable && !self.kind.is_empty() {
                errors.push(type_invalid(path, &self.kind, value));
            }
            return;
        }
        if self.int_or_string {
            if !(type_matches("integer", value) || value.is_string()) {
                errors.push(type_invalid(path, "integer,string", value));
                return;
            }
        } else if !type_matches(&self.kind, value) {
            errors.push(type_invalid(path, &self.kind, value));
            return;
        }
        self.validate_value(value, path, errors);
        match value {
            Value::Object(map) => {
                for name in &self.required {
                    if !map.contains_key(name) {
                        errors.push(FieldError::required(&child(path, name), ""));
                    }
                }
                for (name, field) in map {
                    let at = child(path, name);
                    if let Some(property) = self.properties.get(name) {
                        property.validate(field, &at, errors);
                    } else if let Some(values) = self.additional_schema() {
                        values.validate(field, &key(path, name), errors);
                    }
                }
                if self.embedded_resource {
                    embedded(map, path, errors);
                }
            }
            Value::Array(items) => {
                if let Some(schema) = &self.items {
                    for (i, item) in items.iter().enumerate() {
                        schema.validate(item, &index(path, i), errors);
                    }
                }
            }
            _ => {}
        }
    }

    /// The value validations of this node (and its nested allOf/anyOf/oneOf/not), not its type.
    fn validate_value(&self, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
        let body = in_body(path);
        if let Some(allowed) = &self.enumeration
            && !allowed.contains(value)
        {
            let shown: Vec<String> = allowed.iter().map(Value::to_string).collect();
            errors.push(FieldError {
                field: path.to_owned(),
                kind: FieldErrorKind::NotSupported,
                detail: format!("{value}: supported values: {}", shown.join(", ")),
            });
        }
        match value {
            Value::String(text) => {
                let length = text.chars().count() as u64;
                if let Some(max) = self.max_length
                    && length > max
                {
                    errors.push(FieldError {
                        field: path.to_owned(),
                        kind: FieldErrorKind::TooLong,
                        detail: format!("may not be more than {max} bytes"),
                    });
                }
                if let Some(min) = self.min_length
                    && length < min
                {
                    errors.push(invalid(path, value, &format!("{body} should be at least {min} chars long")));
                }
                if let Some((pattern, re)) = &self.pattern
                    && !re.is_match(text)
                {
                    errors.push(invalid(path, value, &format!("{body} should match '{pattern}'")));
                }
                if let Some(problem) = format_problem(&self.format, text) {
                    errors.push(invalid(path, value, &format!("{body} must be of type {problem}: {value}")));
                }
            }
            Value::Number(number) => {
                let n = number.as_f64().unwrap_or_default();
                if let Some(max) = self.maximum {
                    if self.exclusive_maximum && n >= max {
                        errors.push(invalid(
                            path,
                            value,
                            &format!("{body} should be less than {}", number_text(max)),
                        ));
                    } else if n > max {
                        errors.push(invalid(
                            path,
                            value,
                            &format!("{body} should be less than or equal to {}", number_text(max)),
                        ));
                    }
                }
                if let Some(min) = self.minimum {
                    if self.exclusive_minimum && n <= min {
                        errors.push(invalid(
                            path,
                            value,
                            &format!("{body} should be greater than {}", number_text(min)),
                        ));
                    } else if n < min {
                        errors.push(invalid(
                            path,
                            value,
                            &format!("{body} should be greater than or equal to {}", number_text(min)),
                        ));
                    }
                }
                if let Some(factor) = self.multiple_of
                    && factor != 0.0
                    && (n / factor).fract() != 0.0
                {
                    errors.push(invalid(
                        path,
                        value,
                        &format!("{body} should be a multiple of {}", number_text(factor)),
                    ));
                }
            }
            Value::Array(items) => {
                let count = items.len() as u64;
                if let Some(max) = self.max_items
                    && count > max
                {
                    errors.push(FieldError {
                        field: path.to_owned(),
                        kind: FieldErrorKind::TooMany,
                        detail: format!("{count}: must have at most {max} items"),
                    });
                }
                if let Some(min) = self.min_items
                    && count < min
                {
                    errors.push(invalid(path, value, &format!("{body} should have at least {min} items")));
                }
            }
            Value::Object(map) => {
                let count = map.len() as u64;
                if let Some(max) = self.max_properties
                    && count > max
                {
                    errors.push(FieldError {
                        field: path.to_owned(),
                        kind: FieldErrorKind::TooMany,
                        detail: format!("{count}: must have at most {max} items"),
                    });
                }
                if let Some(min) = self.min_properties
                    && count < min
                {
                    errors.push(invalid(
                        path,
                        value,
                        &format!("{body} should have at least {min} properties"),
                    ));
                }
            }
            _ => {}
        }
        // Nested value validations: their own properties' and items' validations apply too.
        let nested_ok = |schema: &Schema| {
            let mut found = Vec::new();
            schema.validate_nested(value, path, &mut found);
            found.is_empty()
        };
        for nested in &self.all_of {
            nested.validate_nested(value, path, errors);
        }
        if !self.any_of.is_empty() && !self.any_of.iter().any(nested_ok) {
            errors.push(invalid(path, value, &format!("{body} must validate at least one schema (anyOf)")));
        }
        if !self.one_of.is_empty() && self.one_of.iter().filter(|s| nested_ok(s)).count() != 1 {
            errors.push(invalid(
                path,
                value,
                &format!("{body} must validate one and only one schema (oneOf)"),
            ));
        }
        if let Some(not) = &self.not
            && nested_ok(not)
        {
            errors.push(invalid(path, value, &format!("{body} must not validate the schema (not)")));
        }
    }

    /// A nested value validation on `value`: its type (only the int-or-string pair has one), its
    /// validations, and those of its properties and items.
    fn validate_nested(&self, value: &Value, path: &str, errors: &mut Vec<FieldError>) {
        if !self.kind.is_empty() && !type_matches(&self.kind, value) {
            errors.push(type_invalid(path, &self.kind, value));
            return;
        }
        self.validate_value(value, path, errors);
        match value {
            Value::Object(map) => {
                for name in &self.required {
                    if !map.contains_key(name) {
                        errors.push(FieldError::required(&child(path, name), ""));
                    }
                }
                for (name, property) in &self.properties {
                    if let Some(field) = map.get(name) {
                        property.validate_nested(field, &child(path, name), errors);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(schema) = &self.items {
                    for (i, item) in items.iter().enumerate() {
                        schema.validate_nested(item, &index(path, i), errors);
                    }
                }
            }
            _ => {}
        }
    }

    /// Drops the fields the schema does not specify (upstream's structural pruning): everything
    /// under `x-kubernetes-preserve-unknown-fields: true` is kept, and at an embedded resource (as
    /// at the root) apiVersion, kind and metadata are kept. `root` is true at an object's root.
    pub fn prune(&self, value: &mut Value, root: bool) {
        match value {
            Value::Object(map) => {
                let keep_meta = root || self.embedded_resource;
                if !self.preserve_unknown_fields {
                    let values = self.additional_schema();
                    let allows_any = matches!(self.additional_properties, Some(Additional::Allows(true)));
                    map.retain(|name, _| {
                        self.properties.contains_key(name)
                            || values.is_some()
                            || allows_any
                            || (keep_meta && matches!(name.as_str(), "apiVersion" | "kind" | "metadata"))
                    });
                }
                for (name, field) in map.iter_mut() {
                    if keep_meta && name == "metadata" {
                        continue;
                    }
                    if let Some(property) = self.properties.get(name) {
                        property.prune(field, false);
                    } else if let Some(values) = self.additional_schema() {
                        values.prune(field, false);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(schema) = &self.items {
                    for item in items {
                        schema.prune(item, false);
                    }
                }
            }
            _ => {}
        }
    }

    /// Fills defaults (upstream's structural defaulting): a missing field (or a null one that is
    /// not nullable) with a default gets it, then the defaults of what is inside are applied.
    pub fn apply_defaults(&self, value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (name, property) in &self.properties {
                    let missing = match map.get(name) {
                        None => true,
                        Some(Value::Null) => !property.nullable,
                        Some(_) => false,
                    };
                    if missing && let Some(default) = &property.default {
                        map.insert(name.clone(), default.clone());
                    }
                }
                for (name, field) in map.iter_mut() {
                    if let Some(property) = self.properties.get(name) {
                        property.apply_defaults(field);
                    } else if let Some(values) = self.additional_schema() {
                        values.apply_defaults(field);
                    }
                }
            }
            Value::Array(items) => {
                if let Some(schema) = &self.items {
                    for item in items.iter_mut() {
                        if item.is_null()
                            && !schema.nullable
                            && let Some(default) = &schema.default
                        {
                            *item = default.clone();
                        }
                        schema.apply_defaults(item);
                    }
                }
            }
            _ => {}
        }
    }

    /// The node at a simple JSON path (`.spec.replicas`), following properties.
    pub fn at_path(&self, path: &str) -> Option<&Schema> {
        let mut node = self;
        for part in path.trim_start_matches('.').split('.').filter(|p| !p.is_empty()) {
            node = node.properties.get(part)?;
        }
        Some(node)
    }
}

/// An embedded resource's apiVersion and kind (upstream's validateEmbeddedResource: both required
/// unless the object is empty).
fn embedded(map: &Map<String, Value>, path: &str, errors: &mut Vec<FieldError>) {
    if map.is_empty() {
        return;
    }
    for field in ["apiVersion", "kind"] {
        match map.get(field) {
            None => errors.push(FieldError::required(&child(path, field), "must not be empty")),
            Some(Value::String(s)) if s.is_empty() => {
                errors.push(FieldError::required(&child(path, field), "must not be empty"));
            }
            _ => {}
        }
    }
}

/// The format names kube-openapi checks that are simple to check here; `None` when the value is
/// fine or the format is one not checked.
fn format_problem(format: &str, text: &str) -> Option<&'static str> {
    let ok = match format {
        "int32" | "int64" => return None,
        "byte" => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.decode(text).is_ok()
        }
        "date-time" | "datetime" => text.parse::<jiff::Timestamp>().is_ok(),
        "date" => text.parse::<jiff::civil::Date>().is_ok(),
        "uuid" => {
            let b = text.as_bytes();
            b.len() == 36
                && b.iter().enumerate().all(|(i, c)| {
                    if matches!(i, 8 | 13 | 18 | 23) { *c == b'-' } else { c.is_ascii_hexdigit() }
                })
        }
        "ipv4" => text.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => text.parse::<std::net::Ipv6Addr>().is_ok(),
        _ => return None,
    };
    if ok {
        None
    } else {
        Some(match format {
            "byte" => "byte",
            "date-time" | "datetime" => "date-time",
            "date" => "date",
            "uuid" => "uuid",
            "ipv4" => "ipv4",
            _ => "ipv6",
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema(value: &Value) -> Schema {
        Schema::parse(value, "s").unwrap()
    }

    #[test]
    fn structurality() {
        let s = schema(
            &json!({"type": "object", "properties": {"spec": {"properties": {"a": {"type": "string"}}}}}),
        );
        let errors: Vec<String> = structural_errors(&s, "s").iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            ["s.properties[spec].type: Required value: must not be empty for specified object fields"]
        );
        let s = schema(&json!({"properties": {"a": {"type": "array"}}}));
        let errors: Vec<String> = structural_errors(&s, "s").iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "s.properties[a].items: Required value: must be specified",
                "s.type: Required value: must not be empty at the root"
            ]
        );
        let s = schema(&json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true,
            "properties": {"q": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                           "n": {"type": "object", "anyOf": [{"type": "string"}]}}}));
        let errors: Vec<String> = structural_errors(&s, "s").iter().map(ToString::to_string).collect();
        assert_eq!(errors, ["s.properties[n].anyOf[0].type: Forbidden: must be empty to be structural"]);
        assert!(Schema::parse(&json!({"pattern": "("}), "s").is_err());
        let s = schema(&json!({"type": "object", "properties": {
            "l": {"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object"}},
            "m": {"type": "string", "x-kubernetes-map-type": "atomic"},
            "p": {"type": "string", "x-kubernetes-preserve-unknown-fields": false}}}));
        let errors: Vec<String> = structural_errors(&s, "s").iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "s.properties[l].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map",
                "s.properties[m].x-kubernetes-map-type: Invalid value: \"atomic\": must only be used on type object",
                "s.properties[p].x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined",
            ]
        );
    }

    #[test]
    fn values() {
        let s =
            schema(&json!({"type": "object", "required": ["spec"], "properties": {"spec": {"type": "object",
            "required": ["size"], "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "color": {"type": "string", "enum": ["red", "blue"]},
                "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
                "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                "port": {"x-kubernetes-int-or-string": true},
                "note": {"type": "string", "nullable": true}}}}}));
        let mut errors = Vec::new();
        s.validate(
            &json!({"spec": {"size": 11, "color": "pink", "name": "ABCDEFG", "tags": ["a", "b", 3], "port": true, "note": null}}),
            "",
            &mut errors,
        );
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "spec.color: Unsupported value: \"pink\": supported values: \"red\", \"blue\"",
                "spec.name: Too long: may not be more than 5 bytes",
                "spec.name: Invalid value: \"ABCDEFG\": spec.name in body should match '^[a-z]+$'",
                "spec.port: Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\"",
                "spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10",
                "spec.tags: Too many: 3: must have at most 2 items",
                "spec.tags[2]: Invalid value: \"integer\": spec.tags[2] in body must be of type string: \"integer\"",
            ]
        );
        let mut errors = Vec::new();
        let when = schema(&json!({"type": "string", "format": "date-time"}));
        when.validate(&json!("yesterday"), "spec.when", &mut errors);
        assert_eq!(
            errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\""
            ]
        );
        let mut errors = Vec::new();
        s.validate(&json!({"spec": {}}), "", &mut errors);
        assert_eq!(errors.iter().map(ToString::to_string).collect::<Vec<_>>(), ["spec.size: Required value"]);
    }

    #[test]
    fn embedded_resources() {
        let s = schema(&json!({"type": "object", "properties": {"template": {"type": "object",
            "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object",
                "properties": {"a": {"type": "string"}}}}}}}));
        assert!(structural_errors(&s, "s").is_empty());
        let mut object = json!({"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"a": "x", "b": "pruned"}, "other": 1}});
        s.prune(&mut object, true);
        assert_eq!(
            object,
            json!({"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"a": "x"}}})
        );
        let mut errors = Vec::new();
        s.validate(&json!({"template": {"spec": {"a": "x"}}}), "", &mut errors);
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "template.apiVersion: Required value: must not be empty",
                "template.kind: Required value: must not be empty"
            ]
        );
        let bad =
            schema(&json!({"type": "object", "properties": {"e": {"x-kubernetes-embedded-resource": true}}}));
        let errors: Vec<String> = structural_errors(&bad, "s").iter().map(ToString::to_string).collect();
        assert!(errors.contains(&"s.properties[e].type: Required value: must be object if x-kubernetes-embedded-resource is true".to_owned()), "{errors:?}");
    }

    #[test]
    fn pruning_and_defaults() {
        let s = schema(&json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "replicas": {"type": "integer", "default": 1},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "mode": {"type": "string", "default": "fast"}}}}}));
        let mut object = json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "x": 1},
            "spec": {"unknown": 1, "free": {"any": {"thing": 1}}, "labels": {"a": "b"}, "mode": null}, "extra": true});
        s.prune(&mut object, true);
        s.apply_defaults(&mut object);
        assert_eq!(
            object,
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "a", "x": 1},
                "spec": {"free": {"any": {"thing": 1}}, "labels": {"a": "b"}, "mode": "fast", "replicas": 1}})
        );
    }
}
