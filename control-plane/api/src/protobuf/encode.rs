//! JSON → protobuf wire form, walking the table.

use base64::Engine;
use prost::encoding::{WireType, encode_key, encode_varint};
use serde_json::{Map, Value};

use super::{Field, Label, MAX_DEPTH, MessageType, ProtobufError, Special, TABLE, Type, forms};

/// The wire form of `value` (a JSON object of message `message`), without an envelope.
/// JSON members the message does not have are left out, as Go's JSON decoding would.
pub fn encode(value: &Value, message: MessageType) -> Result<Vec<u8>, ProtobufError> {
    let mut out = Vec::with_capacity(256);
    message_body(value, message.0, &mut out, 0)?;
    Ok(out)
}

fn wrong(field: &str, expected: &str, value: &Value) -> ProtobufError {
    let found = match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    ProtobufError(format!("{field}: expected {expected}, found {found}"))
}

/// Writes a length-delimited field: its key, then the body written by `body` behind its length.
pub(super) fn delimited(
    tag: u32,
    out: &mut Vec<u8>,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), ProtobufError>,
) -> Result<(), ProtobufError> {
    let start = begin(tag, out);
    body(out)?;
    finish(out, start);
    Ok(())
}

/// Starts a length-delimited field: its key and one byte kept for the length, which [`finish`]
/// writes once the body is written (a body of 128 bytes or more moves up for a longer varint).
pub(super) fn begin(tag: u32, out: &mut Vec<u8>) -> usize {
    encode_key(tag, WireType::LengthDelimited, out);
    out.push(0);
    out.len()
}

pub(super) fn finish(out: &mut Vec<u8>, start: usize) {
    let len = out.len() - start;
    if len < 0x80 {
        out[start - 1] = len as u8;
        return;
    }
    let mut prefix = [0u8; 10];
    let mut slice = &mut prefix[..];
    encode_varint(len as u64, &mut slice);
    let written = 10 - slice.len();
    out[start - 1] = prefix[0];
    out.splice(start..start, prefix[1..written].iter().copied());
}

pub(super) fn bytes_field(tag: u32, bytes: &[u8], out: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

pub(super) fn varint_field(tag: u32, value: u64, out: &mut Vec<u8>) {
    encode_key(tag, WireType::Varint, out);
    encode_varint(value, out);
}

/// A message's fields (no key or length of its own).
pub(super) fn message_body(
    value: &Value,
    message: usize,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ProtobufError("object nested too deeply".into()));
    }
    let message = &TABLE.messages[message];
    if let Some(special) = message.special {
        return special_body(special, message, value, out, depth);
    }
    let object = match value {
        Value::Object(object) => object,
        Value::Null => return Ok(()),
        other => return Err(wrong(&message.name, "an object", other)),
    };
    fields(object, message.fields.as_slice(), out, depth)
}

fn fields(
    object: &Map<String, Value>,
    fields: &[Field],
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), ProtobufError> {
    for field in fields {
        if field.inline {
            let Type::Message(child) = field.ty else { continue };
            let child_fields = &TABLE.messages[child].fields;
            delimited(field.tag, out, |out| fields_inline(object, child_fields, out, depth + 1))?;
            continue;
        }
        let Some(value) = object.get(&field.json) else { continue };
        if value.is_null() {
            continue;
        }
        match field.label {
            Label::Optional => single(field.tag, field.ty, &field.json, value, out, depth)?,
            Label::Repeated => {
                let Value::Array(items) = value else { return Err(wrong(&field.json, "an array", value)) };
                for item in items {
                    single(field.tag, field.ty, &field.json, item, out, depth)?;
                }
            }
            Label::Map => {
                let Value::Object(entries) = value else {
                    return Err(wrong(&field.json, "an object", value));
                };
                // Go writes map entries sorted by key (serde_json's map is sorted unless told to
                // keep the order, so sorted here too, not relied on).
                let mut keys: Vec<&String> = entries.keys().collect();
                keys.sort();
                for key in keys {
                    let entry_value = &entries[key];
                    delimited(field.tag, out, |out| {
                        bytes_field(1, key.as_bytes(), out);
                        if !entry_value.is_null() {
                            single(2, field.ty, &field.json, entry_value, out, depth)?;
                        }
                        Ok(())
                    })?;
                }
            }
        }
    }
    Ok(())
}

fn fields_inline(
    object: &Map<String, Value>,
    child: &[Field],
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), ProtobufError> {
    if depth > MAX_DEPTH {
        return Err(ProtobufError("object nested too deeply".into()));
    }
    fields(object, child, out, depth)
}

/// One value of a field (an optional field's, a repeated field's element, a map entry's value).
fn single(
    tag: u32,
    ty: Type,
    name: &str,
    value: &Value,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), ProtobufError> {
    match ty {
        Type::String => match value {
            Value::String(s) => bytes_field(tag, s.as_bytes(), out),
            other => return Err(wrong(name, "a string", other)),
        },
        Type::Bytes => match value {
            Value::String(s) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map_err(|e| ProtobufError(format!("{name}: illegal base64 data: {e}")))?;
                bytes_field(tag, &bytes, out);
            }
            other => return Err(wrong(name, "a base64 string", other)),
        },
        Type::Int32 | Type::Int64 => {
            let n = integer(value).ok_or_else(|| wrong(name, "an integer", value))?;
            if ty == Type::Int32 && i32::try_from(n).is_err() {
                return Err(ProtobufError(format!("{name}: {n} does not fit in 32 bits")));
            }
            // Negative int32 and int64 both go as their 64-bit two's complement, as protobuf says.
            varint_field(tag, n as u64, out);
        }
        Type::Bool => match value {
            Value::Bool(b) => varint_field(tag, u64::from(*b), out),
            other => return Err(wrong(name, "a boolean", other)),
        },
        Type::Double => {
            let f = value.as_f64().ok_or_else(|| wrong(name, "a number", value))?;
            encode_key(tag, WireType::SixtyFourBit, out);
            out.extend_from_slice(&f.to_le_bytes());
        }
        Type::Message(message) => delimited(tag, out, |out| message_body(value, message, out, depth + 1))?,
    }
    Ok(())
}

/// A JSON number that is an integer (also written as `1.0`).
pub(super) fn integer(value: &Value) -> Option<i64> {
    let number = value.as_number()?;
    number.as_i64().or_else(|| {
        let f = number.as_f64()?;
        (f.fract() == 0.0 && f >= i64::MIN as f64 && f <= i64::MAX as f64).then_some(f as i64)
    })
}

fn special_body(
    special: Special,
    message: &super::Message,
    value: &Value,
    out: &mut Vec<u8>,
    depth: usize,
) -> Result<(), ProtobufError> {
    let schema = |tag: u32| match message.field(tag).map(|f| f.ty) {
        Some(Type::Message(m)) => Ok(m),
        _ => Err(ProtobufError(format!("{}: no field {tag}", message.name))),
    };
    match (special, value) {
        (_, Value::Null) => {}
        (Special::Time | Special::MicroTime, Value::String(text)) => {
            let (seconds, nanos) = forms::parse_time(text, special == Special::MicroTime)
                .map_err(|e| ProtobufError(format!("{}: {e}", message.name)))?;
            // As Go's Timestamp, both fields always written.
            varint_field(1, seconds as u64, out);
            varint_field(2, i64::from(nanos) as u64, out);
        }
        (Special::Duration, Value::String(text)) => {
            let nanos =
                forms::parse_duration(text).map_err(|e| ProtobufError(format!("{}: {e}", message.name)))?;
            varint_field(1, nanos as u64, out);
        }
        (Special::IntOrString, Value::String(s)) => {
            varint_field(1, 1, out);
            varint_field(2, 0, out);
            bytes_field(3, s.as_bytes(), out);
        }
        (Special::IntOrString, number @ Value::Number(_)) => {
            let n = integer(number)
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| wrong("IntOrString", "a 32-bit integer", number))?;
            varint_field(1, 0, out);
            varint_field(2, i64::from(n) as u64, out);
            bytes_field(3, b"", out);
        }
        (Special::Quantity, Value::String(s)) => bytes_field(1, s.as_bytes(), out),
        (Special::Quantity, Value::Number(n)) => bytes_field(1, n.to_string().as_bytes(), out),
        (Special::RawExtension | Special::FieldsV1 | Special::Json, value) => {
            let raw = serde_json::to_vec(value).map_err(|e| ProtobufError(e.to_string()))?;
            bytes_field(1, &raw, out);
        }
        (Special::PropsOrArray, Value::Array(items)) => {
            let props = schema(2)?;
            for item in items {
                delimited(2, out, |out| message_body(item, props, out, depth + 1))?;
            }
        }
        (Special::PropsOrArray | Special::PropsOrStringArray, object @ Value::Object(_)) => {
            let props = schema(1)?;
            delimited(1, out, |out| message_body(object, props, out, depth + 1))?;
        }
        (Special::PropsOrBool, Value::Bool(allows)) => varint_field(1, u64::from(*allows), out),
        (Special::PropsOrBool, object @ Value::Object(_)) => {
            varint_field(1, 1, out);
            let props = schema(2)?;
            delimited(2, out, |out| message_body(object, props, out, depth + 1))?;
        }
        (Special::PropsOrStringArray | Special::StringList, Value::Array(items)) => {
            let tag = if special == Special::StringList { 1 } else { 2 };
            for item in items {
                let Value::String(s) = item else { return Err(wrong(&message.name, "strings", item)) };
                bytes_field(tag, s.as_bytes(), out);
            }
        }
        (_, other) => return Err(wrong(&message.name, "its JSON form", other)),
    }
    Ok(())
}
