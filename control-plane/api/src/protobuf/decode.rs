//! Protobuf wire form → JSON, walking the table.

use base64::Engine;
use prost::bytes::Buf;
use prost::encoding::{DecodeContext, WireType, check_wire_type, decode_key, decode_varint, skip_field};
use serde_json::{Map, Value};

use super::{Label, MAX_DEPTH, Message, MessageType, ProtobufError, Special, TABLE, Type, envelope, forms};

/// The JSON form of `bytes`, the wire form of message `message` (without an envelope). Fields the
/// table does not know are skipped, as Go's generated code does.
pub fn decode(bytes: &[u8], message: MessageType) -> Result<Value, ProtobufError> {
    readable(decode_at(bytes, message, 0)?)
}

/// How many arrays and objects serde_json reads nested in each other (its recursion limit is 128).
const MAX_JSON_DEPTH: usize = 127;

/// `value` if its JSON text can be read back, which the server does with every object it stores;
/// an error if it nests deeper than serde_json reads. Messages alone stay within that (a map or
/// list adds a level to its message's), but JSON carried in a message (a CRD's `default`, a
/// RawExtension) is parsed on its own and adds its depth to the field's.
pub(super) fn readable(value: Value) -> Result<Value, ProtobufError> {
    let mut deepest = 0;
    let mut pending = vec![(&value, 1)];
    while let Some((value, depth)) = pending.pop() {
        match value {
            Value::Object(map) => {
                deepest = deepest.max(depth);
                pending.extend(map.values().map(|v| (v, depth + 1)));
            }
            Value::Array(items) => {
                deepest = deepest.max(depth);
                pending.extend(items.iter().map(|v| (v, depth + 1)));
            }
            _ => {}
        }
    }
    if deepest > MAX_JSON_DEPTH {
        return Err(ProtobufError("object nested too deeply".into()));
    }
    Ok(value)
}

/// [`decode`] of a message nested `depth` deep (an envelope inside a RawExtension counts on from
/// the message holding it, so envelopes nested in each other cannot exhaust the stack).
pub(super) fn decode_at(bytes: &[u8], message: MessageType, depth: usize) -> Result<Value, ProtobufError> {
    Ok(message_value(bytes, message.0, depth)?.unwrap_or_else(|| Value::Object(Map::new())))
}

/// A message's JSON value; `None` where upstream's JSON is null (an empty Time, RawExtension).
fn message_value(bytes: &[u8], message: usize, depth: usize) -> Result<Option<Value>, ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ProtobufError("object nested too deeply".into()));
    }
    let message = &TABLE.messages[message];
    if let Some(special) = message.special {
        return special_value(special, message, bytes, depth);
    }
    let mut object = Map::new();
    read_fields(bytes, message, &mut object, depth)?;
    // Go writes ObjectMeta's generation always; 0 is "not set" (the server owns it).
    if message.name == "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        && object.get("generation") == Some(&Value::from(0))
    {
        object.remove("generation");
    }
    // Go's JSON writes a required (non-omitempty) field even when it holds the zero value.
    for field in message.fields.iter().filter(|f| f.required && f.label == Label::Optional && !f.inline) {
        if !object.contains_key(&field.json) {
            let zero = match field.ty {
                Type::String => Value::String(String::new()),
                Type::Int32 | Type::Int64 => Value::from(0),
                Type::Double => Value::from(0.0),
                Type::Bool => Value::Bool(false),
                Type::Bytes | Type::Message(_) => continue,
            };
            object.insert(field.json.clone(), zero);
        }
    }
    Ok(Some(Value::Object(object)))
}

/// The payload of a length-delimited field.
pub(super) fn length_delimited<'a>(wire: WireType, buf: &mut &'a [u8]) -> Result<&'a [u8], ProtobufError> {
    check_wire_type(WireType::LengthDelimited, wire)?;
    let len = decode_varint(buf)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&len| len <= buf.len())
        .ok_or_else(|| ProtobufError("unexpected EOF".into()))?;
    let (payload, rest) = buf.split_at(len);
    *buf = rest;
    Ok(payload)
}

fn read_fields(
    bytes: &[u8],
    message: &Message,
    object: &mut Map<String, Value>,
    depth: usize,
) -> Result<(), ProtobufError> {
    let mut buf = bytes;
    while buf.has_remaining() {
        let (tag, wire) = decode_key(&mut buf)?;
        let Some(field) = message.field(tag) else {
            skip_field(wire, tag, &mut buf, DecodeContext::default())?;
            continue;
        };
        if field.inline {
            let payload = length_delimited(wire, &mut buf)?;
            let Type::Message(child) = field.ty else { continue };
            if depth + 1 > MAX_DEPTH {
                return Err(ProtobufError("object nested too deeply".into()));
            }
            read_fields(payload, &TABLE.messages[child], object, depth + 1)?;
            continue;
        }
        match field.label {
            Label::Optional => match value(field.ty, wire, &mut buf, depth)? {
                // Go writes empty strings of non-pointer fields; their JSON leaves them out.
                Some(Value::String(s)) if s.is_empty() && !field.required => {
                    object.remove(&field.json);
                }
                Some(v) => {
                    object.insert(field.json.clone(), v);
                }
                None => {
                    object.remove(&field.json);
                }
            },
            Label::Repeated => {
                let mut items = Vec::new();
                let packable = matches!(field.ty, Type::Int32 | Type::Int64 | Type::Bool | Type::Double);
                if packable && wire == WireType::LengthDelimited {
                    // A packed run of scalars (proto2 parsers take both forms).
                    let mut packed = length_delimited(wire, &mut buf)?;
                    let element_wire =
                        if field.ty == Type::Double { WireType::SixtyFourBit } else { WireType::Varint };
                    while packed.has_remaining() {
                        items.extend(value(field.ty, element_wire, &mut packed, depth)?);
                    }
                } else {
                    // An element that is null in JSON (an empty Time) stays null, keeping positions.
                    items.push(value(field.ty, wire, &mut buf, depth)?.unwrap_or(Value::Null));
                }
                let entry = object.entry(field.json.clone()).or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(array) = entry {
                    array.extend(items);
                }
            }
            Label::Map => {
                let mut entry = length_delimited(wire, &mut buf)?;
                let mut key = String::new();
                let mut entry_value = None;
                while entry.has_remaining() {
                    let (entry_tag, entry_wire) = decode_key(&mut entry)?;
                    match entry_tag {
                        1 => {
                            key = String::from_utf8_lossy(length_delimited(entry_wire, &mut entry)?)
                                .into_owned();
                        }
                        2 => entry_value = value(field.ty, entry_wire, &mut entry, depth)?,
                        _ => skip_field(entry_wire, entry_tag, &mut entry, DecodeContext::default())?,
                    }
                }
                // An entry without a value holds the type's zero value.
                let entry_value = entry_value.unwrap_or_else(|| match field.ty {
                    Type::String | Type::Bytes => Value::String(String::new()),
                    Type::Int32 | Type::Int64 => Value::from(0),
                    Type::Double => Value::from(0.0),
                    Type::Bool => Value::Bool(false),
                    Type::Message(_) => Value::Object(Map::new()),
                });
                let map = object.entry(field.json.clone()).or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(map) = map {
                    map.insert(key, entry_value);
                }
            }
        }
    }
    Ok(())
}

/// One value of type `ty` sent with wire type `wire`.
fn value(ty: Type, wire: WireType, buf: &mut &[u8], depth: usize) -> Result<Option<Value>, ProtobufError> {
    Ok(Some(match ty {
        Type::String => Value::String(String::from_utf8_lossy(length_delimited(wire, buf)?).into_owned()),
        Type::Bytes => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(length_delimited(wire, buf)?))
        }
        Type::Int32 => {
            check_wire_type(WireType::Varint, wire)?;
            // As Go's generated code: the varint's low 32 bits.
            Value::from(decode_varint(buf)? as i32)
        }
        Type::Int64 => {
            check_wire_type(WireType::Varint, wire)?;
            Value::from(decode_varint(buf)? as i64)
        }
        Type::Bool => {
            check_wire_type(WireType::Varint, wire)?;
            Value::Bool(decode_varint(buf)? != 0)
        }
        Type::Double => {
            check_wire_type(WireType::SixtyFourBit, wire)?;
            if buf.remaining() < 8 {
                return Err(ProtobufError("unexpected EOF".into()));
            }
            let f = buf.get_f64_le();
            Value::Number(
                serde_json::Number::from_f64(f)
                    .ok_or_else(|| ProtobufError(format!("unsupported value: {f}")))?,
            )
        }
        Type::Message(message) => return message_value(length_delimited(wire, buf)?, message, depth + 1),
    }))
}

/// A field of a special message, as sent.
enum Raw<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// Every field of `bytes` (tag, value), for the special messages' few fields.
fn raw_fields(bytes: &[u8]) -> Result<Vec<(u32, Raw<'_>)>, ProtobufError> {
    let mut buf = bytes;
    let mut fields = Vec::new();
    while buf.has_remaining() {
        let (tag, wire) = decode_key(&mut buf)?;
        match wire {
            WireType::Varint => fields.push((tag, Raw::Varint(decode_varint(&mut buf)?))),
            WireType::LengthDelimited => fields.push((tag, Raw::Bytes(length_delimited(wire, &mut buf)?))),
            _ => skip_field(wire, tag, &mut buf, DecodeContext::default())?,
        }
    }
    Ok(fields)
}

fn special_value(
    special: Special,
    message: &Message,
    bytes: &[u8],
    depth: usize,
) -> Result<Option<Value>, ProtobufError> {
    let fields = raw_fields(bytes)?;
    let varint = |tag: u32| {
        fields.iter().rev().find_map(|(t, v)| match v {
            Raw::Varint(n) if *t == tag => Some(*n),
            _ => None,
        })
    };
    let all_bytes = |tag: u32| {
        fields.iter().filter_map(move |(t, v)| match v {
            Raw::Bytes(b) if *t == tag => Some(*b),
            _ => None,
        })
    };
    let last_bytes = |tag: u32| all_bytes(tag).next_back();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let nested = |tag: u32| match message.field(tag).map(|f| f.ty) {
        Some(Type::Message(m)) => Ok(m),
        _ => Err(ProtobufError(format!("{}: no field {tag}", message.name))),
    };
    let embedded_json = |raw: &[u8]| -> Result<Option<Value>, ProtobufError> {
        if raw.is_empty() {
            return Ok(None);
        }
        if raw.starts_with(envelope::MAGIC) {
            return envelope::decode_object_at(raw, depth + 1).map(Some);
        }
        serde_json::from_slice(raw)
            .map(Some)
            .map_err(|e| ProtobufError(format!("{}: the raw data is not JSON: {e}", message.name)))
    };
    Ok(match special {
        Special::Time | Special::MicroTime => {
            if bytes.is_empty() {
                return Ok(None);
            }
            let seconds = varint(1).unwrap_or(0) as i64;
            let nanos = varint(2).unwrap_or(0) as i32;
            Some(Value::String(forms::format_time(seconds, nanos, special == Special::MicroTime)?))
        }
        Special::Duration => Some(Value::String(forms::format_duration(varint(1).unwrap_or(0) as i64))),
        Special::IntOrString => {
            if varint(1) == Some(1) {
                Some(Value::String(last_bytes(3).map(text).unwrap_or_default()))
            } else {
                Some(Value::from(varint(2).unwrap_or(0) as i32))
            }
        }
        Special::Quantity => Some(Value::String(last_bytes(1).map_or_else(|| "0".to_owned(), text))),
        Special::RawExtension | Special::FieldsV1 | Special::Json => {
            embedded_json(last_bytes(1).unwrap_or_default())?
        }
        Special::PropsOrArray => {
            let items: Vec<&[u8]> = all_bytes(2).collect();
            if items.is_empty() {
                match last_bytes(1) {
                    Some(schema) => message_value(schema, nested(1)?, depth + 1)?,
                    None => None,
                }
            } else {
                let props = nested(2)?;
                let mut array = Vec::new();
                for item in items {
                    array.push(message_value(item, props, depth + 1)?.unwrap_or(Value::Null));
                }
                Some(Value::Array(array))
            }
        }
        Special::PropsOrBool => match last_bytes(2) {
            Some(schema) => message_value(schema, nested(2)?, depth + 1)?,
            None => Some(Value::Bool(varint(1).unwrap_or(0) != 0)),
        },
        Special::PropsOrStringArray => {
            let property: Vec<Value> = all_bytes(2).map(|b| Value::String(text(b))).collect();
            match last_bytes(1) {
                Some(schema) if property.is_empty() => message_value(schema, nested(1)?, depth + 1)?,
                _ => Some(Value::Array(property)),
            }
        }
        Special::StringList => Some(Value::Array(all_bytes(1).map(|b| Value::String(text(b))).collect())),
    })
}
