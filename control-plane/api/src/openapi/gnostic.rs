//! The OpenAPI v2 document in the protobuf form of gnostic's `openapi.v2` package
//! (google/gnostic-models `openapiv2/OpenAPIv2.proto`), what client-go's `OpenAPISchema()` asks for
//! with `Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf` and kubectl 1.27/1.28
//! read for explain, validation and client-side apply.
//!
//! No crate on crates.io publishes gnostic's messages, so the part of them the document uses is
//! declared here with prost's derive (field numbers as in the .proto; the rest of its messages —
//! headers, form parameters, OAuth, XML — are never produced). The conversion from the JSON
//! document follows gnostic's compiler: a map becomes its `Named*` pairs in key order, a
//! parameter is a body parameter or a query/path sub-schema, and a vendor extension is a `NamedAny`
//! whose `Any.yaml` holds the value (kube-openapi reads it back with a YAML parser; JSON text is
//! YAML, so it is written as JSON).

use serde_json::{Map, Value};

/// `openapi.v2.Document`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Document {
    #[prost(string, tag = "1")]
    pub swagger: String,
    #[prost(message, optional, tag = "2")]
    pub info: Option<Info>,
    #[prost(message, optional, tag = "8")]
    pub paths: Option<Paths>,
    #[prost(message, optional, tag = "9")]
    pub definitions: Option<Definitions>,
    #[prost(message, repeated, tag = "12")]
    pub security: Vec<SecurityRequirement>,
    #[prost(message, optional, tag = "13")]
    pub security_definitions: Option<SecurityDefinitions>,
}

/// `openapi.v2.Info`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Info {
    #[prost(string, tag = "1")]
    pub title: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `openapi.v2.Paths`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Paths {
    #[prost(message, repeated, tag = "2")]
    pub path: Vec<NamedPathItem>,
}

/// `openapi.v2.NamedPathItem`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NamedPathItem {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<PathItem>,
}

/// `openapi.v2.PathItem`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PathItem {
    #[prost(message, optional, tag = "2")]
    pub get: Option<Operation>,
    #[prost(message, optional, tag = "3")]
    pub put: Option<Operation>,
    #[prost(message, optional, tag = "4")]
    pub post: Option<Operation>,
    #[prost(message, optional, tag = "5")]
    pub delete: Option<Operation>,
    #[prost(message, optional, tag = "8")]
    pub patch: Option<Operation>,
    #[prost(message, repeated, tag = "9")]
    pub parameters: Vec<ParametersItem>,
}

/// `openapi.v2.Operation`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Operation {
    #[prost(string, repeated, tag = "1")]
    pub tags: Vec<String>,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "5")]
    pub operation_id: String,
    #[prost(string, repeated, tag = "6")]
    pub produces: Vec<String>,
    #[prost(string, repeated, tag = "7")]
    pub consumes: Vec<String>,
    #[prost(message, repeated, tag = "8")]
    pub parameters: Vec<ParametersItem>,
    #[prost(message, optional, tag = "9")]
    pub responses: Option<Responses>,
    #[prost(string, repeated, tag = "10")]
    pub schemes: Vec<String>,
    #[prost(message, repeated, tag = "13")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.ParametersItem` (only its `parameter` case is produced).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ParametersItem {
    #[prost(message, optional, tag = "1")]
    pub parameter: Option<Parameter>,
}

/// `openapi.v2.Parameter`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Parameter {
    #[prost(oneof = "parameter::Oneof", tags = "1, 2")]
    pub oneof: Option<parameter::Oneof>,
}

/// `openapi.v2.Parameter`'s oneof.
pub mod parameter {
    /// A body parameter or any other.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "1")]
        BodyParameter(Box<super::BodyParameter>),
        #[prost(message, tag = "2")]
        NonBodyParameter(super::NonBodyParameter),
    }
}

/// `openapi.v2.BodyParameter`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BodyParameter {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub r#in: String,
    #[prost(bool, tag = "4")]
    pub required: bool,
    #[prost(message, optional, tag = "5")]
    pub schema: Option<Schema>,
}

/// `openapi.v2.NonBodyParameter`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NonBodyParameter {
    #[prost(oneof = "non_body_parameter::Oneof", tags = "3, 4")]
    pub oneof: Option<non_body_parameter::Oneof>,
}

/// `openapi.v2.NonBodyParameter`'s oneof (query and path parameters).
pub mod non_body_parameter {
    /// Where the parameter goes.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "3")]
        QueryParameterSubSchema(super::QueryParameterSubSchema),
        #[prost(message, tag = "4")]
        PathParameterSubSchema(super::PathParameterSubSchema),
    }
}

/// `openapi.v2.QueryParameterSubSchema`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct QueryParameterSubSchema {
    #[prost(bool, tag = "1")]
    pub required: bool,
    #[prost(string, tag = "2")]
    pub r#in: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(string, tag = "6")]
    pub r#type: String,
    #[prost(bool, tag = "20")]
    pub unique_items: bool,
}

/// `openapi.v2.PathParameterSubSchema`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PathParameterSubSchema {
    #[prost(bool, tag = "1")]
    pub required: bool,
    #[prost(string, tag = "2")]
    pub r#in: String,
    #[prost(string, tag = "3")]
    pub description: String,
    #[prost(string, tag = "4")]
    pub name: String,
    #[prost(string, tag = "5")]
    pub r#type: String,
    #[prost(bool, tag = "19")]
    pub unique_items: bool,
}

/// `openapi.v2.Responses`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Responses {
    #[prost(message, repeated, tag = "1")]
    pub response_code: Vec<NamedResponseValue>,
}

/// `openapi.v2.NamedResponseValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NamedResponseValue {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<ResponseValue>,
}

/// `openapi.v2.ResponseValue` (only its `response` case is produced).
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseValue {
    #[prost(message, optional, tag = "1")]
    pub response: Option<Response>,
}

/// `openapi.v2.Response`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Response {
    #[prost(string, tag = "1")]
    pub description: String,
    #[prost(message, optional, tag = "2")]
    pub schema: Option<SchemaItem>,
}

/// `openapi.v2.SchemaItem` (only its `schema` case is produced).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SchemaItem {
    #[prost(message, optional, tag = "1")]
    pub schema: Option<Schema>,
}

/// `openapi.v2.Schema`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Schema {
    #[prost(string, tag = "1")]
    pub r#ref: String,
    #[prost(string, tag = "2")]
    pub format: String,
    #[prost(string, tag = "3")]
    pub title: String,
    #[prost(string, tag = "4")]
    pub description: String,
    #[prost(message, optional, tag = "5")]
    pub default: Option<Any>,
    #[prost(string, repeated, tag = "19")]
    pub required: Vec<String>,
    #[prost(message, repeated, tag = "20")]
    pub r#enum: Vec<Any>,
    #[prost(message, optional, boxed, tag = "21")]
    pub additional_properties: Option<Box<AdditionalPropertiesItem>>,
    #[prost(message, optional, tag = "22")]
    pub r#type: Option<TypeItem>,
    #[prost(message, optional, tag = "23")]
    pub items: Option<ItemsItem>,
    #[prost(message, repeated, tag = "24")]
    pub all_of: Vec<Schema>,
    #[prost(message, optional, tag = "25")]
    pub properties: Option<Properties>,
    #[prost(bool, tag = "27")]
    pub read_only: bool,
    #[prost(message, repeated, tag = "31")]
    pub vendor_extension: Vec<NamedAny>,
}

/// `openapi.v2.AdditionalPropertiesItem`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AdditionalPropertiesItem {
    #[prost(oneof = "additional_properties_item::Oneof", tags = "1, 2")]
    pub oneof: Option<additional_properties_item::Oneof>,
}

/// `openapi.v2.AdditionalPropertiesItem`'s oneof.
pub mod additional_properties_item {
    /// A schema for the values, or a boolean.
    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Oneof {
        #[prost(message, tag = "1")]
        Schema(Box<super::Schema>),
        #[prost(bool, tag = "2")]
        Boolean(bool),
    }
}

/// `openapi.v2.TypeItem`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeItem {
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

/// `openapi.v2.ItemsItem`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ItemsItem {
    #[prost(message, repeated, tag = "1")]
    pub schema: Vec<Schema>,
}

/// `openapi.v2.Properties`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Properties {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

/// `openapi.v2.NamedSchema`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NamedSchema {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Schema>,
}

/// `openapi.v2.Definitions`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Definitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSchema>,
}

/// `openapi.v2.Any` (the `google.protobuf.Any` case is never produced).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Any {
    #[prost(string, tag = "2")]
    pub yaml: String,
}

/// `openapi.v2.NamedAny`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NamedAny {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<Any>,
}

/// `openapi.v2.SecurityRequirement`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecurityRequirement {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedStringArray>,
}

/// `openapi.v2.NamedStringArray`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NamedStringArray {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<StringArray>,
}

/// `openapi.v2.StringArray`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StringArray {
    #[prost(string, repeated, tag = "1")]
    pub value: Vec<String>,
}

/// `openapi.v2.SecurityDefinitions`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecurityDefinitions {
    #[prost(message, repeated, tag = "1")]
    pub additional_properties: Vec<NamedSecurityDefinitionsItem>,
}

/// `openapi.v2.NamedSecurityDefinitionsItem`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NamedSecurityDefinitionsItem {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<SecurityDefinitionsItem>,
}

/// `openapi.v2.SecurityDefinitionsItem` (only its `api_key_security` case is produced).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SecurityDefinitionsItem {
    #[prost(message, optional, tag = "2")]
    pub api_key_security: Option<ApiKeySecurity>,
}

/// `openapi.v2.ApiKeySecurity`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ApiKeySecurity {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, tag = "3")]
    pub r#in: String,
    #[prost(string, tag = "4")]
    pub description: String,
}

fn text(value: &Value, key: &str) -> String {
    value.get(key).and_then(Value::as_str).unwrap_or_default().to_owned()
}

fn strings(value: &Value, key: &str) -> Vec<String> {
    value
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

fn entries(value: Option<&Value>) -> impl Iterator<Item = (&String, &Value)> {
    value.and_then(Value::as_object).into_iter().flatten()
}

/// The `x-` keys of a JSON object as gnostic's vendor extensions.
fn extensions(value: &Value) -> Vec<NamedAny> {
    entries(Some(value))
        .filter(|(k, _)| k.starts_with("x-"))
        .map(|(k, v)| NamedAny { name: k.clone(), value: Some(Any { yaml: v.to_string() }) })
        .collect()
}

/// A JSON schema object as a gnostic Schema.
pub fn schema(value: &Value) -> Schema {
    let types = match value.get("type") {
        Some(Value::String(t)) => Some(TypeItem { value: vec![t.clone()] }),
        Some(Value::Array(ts)) => {
            Some(TypeItem { value: ts.iter().filter_map(|t| t.as_str().map(str::to_owned)).collect() })
        }
        _ => None,
    };
    let additional_properties = value.get("additionalProperties").map(|ap| {
        let oneof = match ap {
            Value::Bool(b) => additional_properties_item::Oneof::Boolean(*b),
            other => additional_properties_item::Oneof::Schema(Box::new(schema(other))),
        };
        Box::new(AdditionalPropertiesItem { oneof: Some(oneof) })
    });
    let properties = value.get("properties").map(|p| Properties {
        additional_properties: entries(Some(p))
            .map(|(k, v)| NamedSchema { name: k.clone(), value: Some(schema(v)) })
            .collect(),
    });
    Schema {
        r#ref: text(value, "$ref"),
        format: text(value, "format"),
        title: text(value, "title"),
        description: text(value, "description"),
        default: value.get("default").map(|d| Any { yaml: d.to_string() }),
        required: strings(value, "required"),
        r#enum: value
            .get("enum")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|e| Any { yaml: e.to_string() })
            .collect(),
        additional_properties,
        r#type: types,
        items: value.get("items").map(|i| ItemsItem { schema: vec![schema(i)] }),
        all_of: value.get("allOf").and_then(Value::as_array).into_iter().flatten().map(schema).collect(),
        properties,
        read_only: value.get("readOnly").and_then(Value::as_bool).unwrap_or(false),
        vendor_extension: extensions(value),
    }
}

fn parameter(value: &Value) -> ParametersItem {
    let oneof = match value.get("in").and_then(Value::as_str) {
        Some("body") => parameter::Oneof::BodyParameter(Box::new(BodyParameter {
            description: text(value, "description"),
            name: text(value, "name"),
            r#in: "body".into(),
            required: value.get("required").and_then(Value::as_bool).unwrap_or(false),
            schema: value.get("schema").map(schema),
        })),
        Some("path") => parameter::Oneof::NonBodyParameter(NonBodyParameter {
            oneof: Some(non_body_parameter::Oneof::PathParameterSubSchema(PathParameterSubSchema {
                required: true,
                r#in: "path".into(),
                description: text(value, "description"),
                name: text(value, "name"),
                r#type: text(value, "type"),
                unique_items: value.get("uniqueItems").and_then(Value::as_bool).unwrap_or(false),
            })),
        }),
        _ => parameter::Oneof::NonBodyParameter(NonBodyParameter {
            oneof: Some(non_body_parameter::Oneof::QueryParameterSubSchema(QueryParameterSubSchema {
                required: value.get("required").and_then(Value::as_bool).unwrap_or(false),
                r#in: "query".into(),
                description: text(value, "description"),
                name: text(value, "name"),
                r#type: text(value, "type"),
                unique_items: value.get("uniqueItems").and_then(Value::as_bool).unwrap_or(false),
            })),
        }),
    };
    ParametersItem { parameter: Some(Parameter { oneof: Some(oneof) }) }
}

fn parameters(value: &Value) -> Vec<ParametersItem> {
    value.get("parameters").and_then(Value::as_array).into_iter().flatten().map(parameter).collect()
}

fn operation(value: &Value) -> Operation {
    let responses = Responses {
        response_code: entries(value.get("responses"))
            .map(|(code, response)| NamedResponseValue {
                name: code.clone(),
                value: Some(ResponseValue {
                    response: Some(Response {
                        description: text(response, "description"),
                        schema: response.get("schema").map(|s| SchemaItem { schema: Some(schema(s)) }),
                    }),
                }),
            })
            .collect(),
    };
    Operation {
        tags: strings(value, "tags"),
        description: text(value, "description"),
        operation_id: text(value, "operationId"),
        produces: strings(value, "produces"),
        consumes: strings(value, "consumes"),
        parameters: parameters(value),
        responses: Some(responses),
        schemes: strings(value, "schemes"),
        vendor_extension: extensions(value),
    }
}

/// The v2 JSON document in gnostic's protobuf encoding.
pub fn encode(document: &Value) -> Vec<u8> {
    use prost::Message;
    let paths = entries(document.get("paths"))
        .map(|(path, item)| NamedPathItem {
            name: path.clone(),
            value: Some(PathItem {
                get: item.get("get").map(operation),
                put: item.get("put").map(operation),
                post: item.get("post").map(operation),
                delete: item.get("delete").map(operation),
                patch: item.get("patch").map(operation),
                parameters: parameters(item),
            }),
        })
        .collect();
    let security = document
        .get("security")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|requirement| SecurityRequirement {
            additional_properties: entries(Some(requirement))
                .map(|(name, scopes)| NamedStringArray {
                    name: name.clone(),
                    value: Some(StringArray {
                        value: scopes
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|s| s.as_str().map(str::to_owned))
                            .collect(),
                    }),
                })
                .collect(),
        })
        .collect();
    let security_definitions = SecurityDefinitions {
        additional_properties: entries(document.get("securityDefinitions"))
            .map(|(name, definition)| NamedSecurityDefinitionsItem {
                name: name.clone(),
                value: Some(SecurityDefinitionsItem {
                    api_key_security: Some(ApiKeySecurity {
                        r#type: text(definition, "type"),
                        name: text(definition, "name"),
                        r#in: text(definition, "in"),
                        description: text(definition, "description"),
                    }),
                }),
            })
            .collect(),
    };
    let info = document.get("info").map(|i| Info { title: text(i, "title"), version: text(i, "version") });
    Document {
        swagger: text(document, "swagger"),
        info,
        paths: Some(Paths { path: paths }),
        definitions: Some(Definitions {
            additional_properties: entries(document.get("definitions"))
                .map(|(name, s)| NamedSchema { name: name.clone(), value: Some(schema(s)) })
                .collect(),
        }),
        security,
        security_definitions: Some(security_definitions),
    }
    .encode_to_vec()
}

/// A gnostic Schema back in its JSON form (what the encoding keeps of it): to compare a decoded
/// document with the JSON one.
pub fn schema_json(schema: &Schema) -> Value {
    let mut out = Map::new();
    let mut put = |key: &str, value: &str| {
        if !value.is_empty() {
            out.insert(key.into(), Value::String(value.into()));
        }
    };
    put("$ref", &schema.r#ref);
    put("format", &schema.format);
    put("title", &schema.title);
    put("description", &schema.description);
    let yaml = |any: &Any| serde_json::from_str(&any.yaml).unwrap_or(Value::Null);
    if let Some(default) = &schema.default {
        out.insert("default".into(), yaml(default));
    }
    if !schema.required.is_empty() {
        out.insert("required".into(), schema.required.clone().into());
    }
    if !schema.r#enum.is_empty() {
        out.insert("enum".into(), schema.r#enum.iter().map(yaml).collect());
    }
    if let Some(item) = schema.additional_properties.as_ref().and_then(|a| a.oneof.as_ref()) {
        let value = match item {
            additional_properties_item::Oneof::Schema(s) => schema_json(s),
            additional_properties_item::Oneof::Boolean(b) => Value::Bool(*b),
        };
        out.insert("additionalProperties".into(), value);
    }
    match schema.r#type.as_ref().map(|t| t.value.as_slice()) {
        Some([one]) => {
            out.insert("type".into(), Value::String(one.clone()));
        }
        Some([]) | None => {}
        Some(many) => {
            out.insert("type".into(), many.to_vec().into());
        }
    }
    if let Some(items) = schema.items.as_ref().and_then(|i| i.schema.first()) {
        out.insert("items".into(), schema_json(items));
    }
    if !schema.all_of.is_empty() {
        out.insert("allOf".into(), schema.all_of.iter().map(schema_json).collect());
    }
    if let Some(properties) = &schema.properties {
        let map: Map<String, Value> = properties
            .additional_properties
            .iter()
            .map(|p| (p.name.clone(), p.value.as_ref().map(schema_json).unwrap_or_default()))
            .collect();
        out.insert("properties".into(), Value::Object(map));
    }
    if schema.read_only {
        out.insert("readOnly".into(), Value::Bool(true));
    }
    for extension in &schema.vendor_extension {
        out.insert(extension.name.clone(), extension.value.as_ref().map(yaml).unwrap_or_default());
    }
    Value::Object(out)
}
