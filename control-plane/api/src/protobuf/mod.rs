//! Kubernetes' protobuf form (`application/vnd.kubernetes.protobuf`) of every built-in type, read
//! from and written to the JSON form the server keeps objects in.
//!
//! Design: one generic codec walks a table instead of one type per message. The table
//! (`generated/protobuf.json`, made by `cargo xtask codegen` from k8s-pb's prost sources and the
//! kubernetes-validate definitions) lists each proto message's fields — tag, JSON name, scalar type
//! or message, optional / repeated / map, `required` (upstream's JSON writes it even when empty)
//! and `inline` (a Go struct embedded with `json:",inline"`, a field of its own in protobuf) — and
//! maps every group/version/kind to its message. k8s-pb's own prost structs are not used at run
//! time: they have no serde, and going JSON → struct → wire would need a hand-written conversion
//! per type; the wire format itself is written and read with prost's encoding helpers. k8s-pb is
//! the tests' peer: they decode this codec's output with its structs and the other way round.
//!
//! The messages with a JSON form of their own upstream (a `MarshalJSON` in Go) are named in the
//! table as `special` and converted here: metav1.Time (`{seconds, nanos}` ↔ RFC 3339 seconds, as
//! upstream drops the nanoseconds), MicroTime (RFC 3339 with microseconds), Duration (Go's duration
//! string), intstr.IntOrString (`{type, intVal, strVal}` ↔ a number or a string),
//! resource.Quantity (`{string}` ↔ a string), runtime.RawExtension, FieldsV1 and apiextensions'
//! JSON (raw bytes holding JSON ↔ the JSON itself; a RawExtension may hold a protobuf envelope
//! instead), apiextensions' JSONSchemaPropsOr{Array,Bool,StringArray} (either of two forms) and
//! named string slices (authentication's ExtraValue: `{items}` ↔ an array).
//!
//! Empty values: Go writes every non-pointer field, so a protobuf body from client-go carries
//! `""`, `0` and `false` for fields its JSON would leave out. Decoding keeps numbers and booleans
//! as sent (for a pointer field — `replicas: 0`, `enableServiceLinks: false` — the zero is the
//! value; for a plain one — `hostPort: 0`, `paused: false` — it is what upstream's JSON leaves
//! out, so such objects show these zeros) and leaves out empty strings unless the field is
//! required (which Go's JSON writes even empty), and ObjectMeta's generation 0 (the server owns
//! it): a pointer string set to `""` (a PVC's `storageClassName: ""`) is the one case this gets
//! wrong, as neither k8s-pb nor the definitions tell Go's pointers from values. Encoding writes
//! what the JSON holds.
//!
//! [`encode`] and [`decode`] work on `serde_json::Value`s; [`encode_json`] turns JSON bytes (the
//! server's stored objects) into protobuf in one pass without building a value.
//! [`envelope`] is the `k8s\0` + runtime.Unknown wrapping of whole objects and the watch frames.

mod decode;
mod encode;
pub mod envelope;
pub(crate) mod forms;
mod transcode;

use std::collections::HashMap;
use std::sync::LazyLock;

use serde_json::Value;

pub use decode::decode;
pub use encode::encode;
pub use transcode::encode_json;

/// What went wrong reading or writing the protobuf form; the text is what a client is told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProtobufError(pub String);

impl From<prost::DecodeError> for ProtobufError {
    /// prost's reasons in the words of upstream's generated (gogo) code, which clients see in
    /// kube-apiserver's refusals: `unexpected EOF`, `proto: integer overflow`, `proto: illegal
    /// wireType 7`, `proto: illegal tag 0`.
    fn from(error: prost::DecodeError) -> ProtobufError {
        let text = error.to_string();
        let reason = text.strip_prefix("failed to decode Protobuf message: ").unwrap_or(&text);
        let said = if reason.contains("buffer underflow") || reason.contains("delimited length exceeded") {
            "unexpected EOF".to_owned()
        } else if reason.contains("invalid varint") {
            "proto: integer overflow".to_owned()
        } else if let Some(value) = reason.strip_prefix("invalid wire type value: ") {
            format!("proto: illegal wireType {value}")
        } else if let Some(key) = reason.strip_prefix("invalid key value: ") {
            format!("proto: illegal tag {}", key.parse::<u64>().map_or(0, |k| k >> 3))
        } else {
            format!("proto: {reason}")
        };
        ProtobufError(said)
    }
}

/// How deep messages may nest (prost's own recursion limit).
const MAX_DEPTH: usize = 100;

/// A field's value type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    String,
    Bytes,
    Int32,
    Int64,
    Bool,
    Double,
    Message(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Label {
    Optional,
    Repeated,
    /// A map with string keys (every map of the Kubernetes API).
    Map,
}

#[derive(Debug)]
struct Field {
    tag: u32,
    json: String,
    ty: Type,
    label: Label,
    required: bool,
    inline: bool,
}

/// A message whose JSON form upstream writes by hand ([`forms`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Special {
    Time,
    MicroTime,
    Duration,
    FieldsV1,
    IntOrString,
    Quantity,
    RawExtension,
    Json,
    PropsOrArray,
    PropsOrBool,
    PropsOrStringArray,
    StringList,
}

#[derive(Debug)]
struct Message {
    name: String,
    /// In tag order.
    fields: Vec<Field>,
    /// Field index by tag.
    by_tag: Vec<Option<usize>>,
    special: Option<Special>,
}

impl Message {
    fn field(&self, tag: u32) -> Option<&Field> {
        let index = (*self.by_tag.get(usize::try_from(tag).ok()?)?)?;
        self.fields.get(index)
    }
}

/// The generated table, indexed.
#[derive(Debug)]
struct Table {
    messages: Vec<Message>,
    by_name: HashMap<String, usize>,
    /// `group/version/Kind` (`v1/Pod` for core) → message.
    kinds: HashMap<String, usize>,
}

static TABLE: LazyLock<Table> = LazyLock::new(|| load(include_str!("../generated/protobuf.json")));

/// Reads the table; it is generated and committed, so a malformed one is a build defect.
#[expect(clippy::expect_used, reason = "the table is generated data compiled into the binary")]
fn load(text: &str) -> Table {
    let raw: Value = serde_json::from_str(text).expect("generated/protobuf.json is JSON");
    let messages = raw["messages"].as_object().expect("generated/protobuf.json has messages");
    let by_name: HashMap<String, usize> = messages.keys().enumerate().map(|(i, n)| (n.clone(), i)).collect();
    let special = |name: &str| match name {
        "Time" => Some(Special::Time),
        "MicroTime" => Some(Special::MicroTime),
        "Duration" => Some(Special::Duration),
        "FieldsV1" => Some(Special::FieldsV1),
        "IntOrString" => Some(Special::IntOrString),
        "Quantity" => Some(Special::Quantity),
        "RawExtension" => Some(Special::RawExtension),
        "JSON" => Some(Special::Json),
        "JSONSchemaPropsOrArray" => Some(Special::PropsOrArray),
        "JSONSchemaPropsOrBool" => Some(Special::PropsOrBool),
        "JSONSchemaPropsOrStringArray" => Some(Special::PropsOrStringArray),
        "StringList" => Some(Special::StringList),
        _ => None,
    };
    let messages = messages
        .iter()
        .map(|(name, entry)| {
            let fields: Vec<Field> = entry["fields"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|row| {
                    let flags: Vec<&str> =
                        row.as_array().into_iter().flatten().skip(3).filter_map(Value::as_str).collect();
                    let ty = match row[2].as_str().unwrap_or_default() {
                        "string" => Type::String,
                        "bytes" => Type::Bytes,
                        "int32" => Type::Int32,
                        "int64" => Type::Int64,
                        "bool" => Type::Bool,
                        "double" => Type::Double,
                        other => Type::Message(*by_name.get(other).expect("field message in the table")),
                    };
                    Field {
                        tag: u32::try_from(row[0].as_u64().unwrap_or(0)).unwrap_or(0),
                        json: row[1].as_str().unwrap_or_default().to_owned(),
                        ty,
                        label: if flags.contains(&"repeated") {
                            Label::Repeated
                        } else if flags.contains(&"map") {
                            Label::Map
                        } else {
                            Label::Optional
                        },
                        required: flags.contains(&"required"),
                        inline: flags.contains(&"inline"),
                    }
                })
                .collect();
            let max = fields.iter().map(|f| f.tag as usize).max().unwrap_or(0);
            let mut by_tag = vec![None; max + 1];
            for (i, field) in fields.iter().enumerate() {
                by_tag[field.tag as usize] = Some(i);
            }
            Message {
                name: name.clone(),
                fields,
                by_tag,
                special: entry["special"].as_str().and_then(special),
            }
        })
        .collect();
    let kinds = raw["kinds"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(kind, message)| Some((kind.clone(), *by_name.get(message.as_str()?)?)))
        .collect();
    Table { messages, by_name, kinds }
}

/// A message of the table, by kind or by proto name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageType(usize);

impl MessageType {
    /// The message of `kind` in `api_version` (`v1`, `apps/v1`), if it has a protobuf form: every
    /// built-in kind, its list, Status, DeleteOptions, meta.k8s.io PartialObjectMetadata(List).
    pub fn of_kind(api_version: &str, kind: &str) -> Option<MessageType> {
        TABLE.kinds.get(&format!("{api_version}/{kind}")).copied().map(MessageType)
    }

    /// The message named `name` (`k8s.io.api.core.v1.Pod`).
    pub fn named(name: &str) -> Option<MessageType> {
        TABLE.by_name.get(name).copied().map(MessageType)
    }

    /// Its full proto name.
    pub fn name(self) -> &'static str {
        &TABLE.messages[self.0].name
    }
}

/// Whether `kind` of `api_version` has a protobuf form.
pub fn has_protobuf(api_version: &str, kind: &str) -> bool {
    MessageType::of_kind(api_version, kind).is_some()
}

#[cfg(test)]
mod tests;
