//! JSON bytes → protobuf in one pass, without building a `serde_json::Value` (the server's stored
//! objects are JSON bytes; parsing them into a Value first costs twice the encoding itself). A
//! `DeserializeSeed` per message walks the table as serde_json reads the document, writing fields in
//! the JSON's order (protobuf readers take fields in any order). Subtrees that need the whole value
//! at once — the special forms and messages with inline structs — go through [`super::encode`]'s
//! Value path; they are small.

use std::borrow::Cow;
use std::fmt;

use base64::Engine;
use prost::encoding::{WireType, encode_key};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::encode::{bytes_field, message_body, varint_field};
use super::{Label, MAX_DEPTH, MessageType, ProtobufError, TABLE, Type};

/// The wire form of `json` (an object of message `message`), as [`super::encode`] of its parse.
pub fn encode_json(json: &[u8], message: MessageType) -> Result<Vec<u8>, ProtobufError> {
    let mut out = Vec::with_capacity(json.len() / 2);
    let mut deserializer = serde_json::Deserializer::from_slice(json);
    MessageSeed { message: message.0, out: &mut out, depth: 0 }
        .deserialize(&mut deserializer)
        .and_then(|()| deserializer.end())
        .map_err(|e| ProtobufError(e.to_string()))?;
    Ok(out)
}

use super::encode::{begin, finish};

/// A message's fields.
struct MessageSeed<'a> {
    message: usize,
    out: &'a mut Vec<u8>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for MessageSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        if self.depth > MAX_DEPTH {
            return Err(de::Error::custom("object nested too deeply"));
        }
        let message = &TABLE.messages[self.message];
        // Inline structs one level deep are routed field by field; deeper ones (admission rules)
        // and the special forms take the value path.
        let nested_inline = message.fields.iter().any(|f| {
            f.inline && matches!(f.ty, Type::Message(child) if TABLE.messages[child].fields.iter().any(|c| c.inline))
        });
        if message.special.is_some() || nested_inline {
            let value = <Value as serde::Deserialize>::deserialize(deserializer)?;
            return message_body(&value, self.message, self.out, self.depth).map_err(de::Error::custom);
        }
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for MessageSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "an object ({})", TABLE.messages[self.message].name)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let message = &TABLE.messages[self.message];
        // Each inline struct's fields gather in a buffer of their own, written as one field at the
        // end (Go writes an embedded struct even when empty).
        let inline: Vec<(u32, usize)> = message
            .fields
            .iter()
            .filter(|f| f.inline)
            .filter_map(|f| match f.ty {
                Type::Message(child) => Some((f.tag, child)),
                _ => None,
            })
            .collect();
        let mut inline_out: Vec<Vec<u8>> = vec![Vec::new(); inline.len()];
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let direct = message.fields.iter().find(|f| !f.inline && f.json == key).map(|f| (f, None));
            let routed = direct.or_else(|| {
                inline.iter().enumerate().find_map(|(i, (_, child))| {
                    TABLE.messages[*child].fields.iter().find(|f| f.json == key).map(|f| (f, Some(i)))
                })
            });
            match routed {
                Some((field, target)) => {
                    let out = match target {
                        Some(i) => &mut inline_out[i],
                        None => &mut *self.out,
                    };
                    map.next_value_seed(FieldSeed {
                        tag: field.tag,
                        ty: field.ty,
                        label: field.label,
                        out,
                        depth: self.depth,
                    })?;
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        for ((tag, _), body) in inline.iter().zip(inline_out) {
            bytes_field(*tag, &body, self.out);
        }
        Ok(())
    }
}

/// A field's value: one, a list or a map of them.
struct FieldSeed<'a> {
    tag: u32,
    ty: Type,
    label: Label,
    out: &'a mut Vec<u8>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for FieldSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        match self.label {
            Label::Optional => SingleSeed { tag: self.tag, ty: self.ty, out: self.out, depth: self.depth }
                .deserialize(deserializer),
            Label::Repeated | Label::Map => deserializer.deserialize_any(self),
        }
    }
}

impl<'de> Visitor<'de> for FieldSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.label == Label::Map { "an object" } else { "an array" })
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.label != Label::Repeated {
            return Err(de::Error::custom("expected an object, found an array"));
        }
        while seq
            .next_element_seed(SingleSeed {
                tag: self.tag,
                ty: self.ty,
                out: &mut *self.out,
                depth: self.depth,
            })?
            .is_some()
        {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        if self.label != Label::Map {
            return Err(de::Error::custom("expected an array, found an object"));
        }
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let start = begin(self.tag, self.out);
            bytes_field(1, key.as_bytes(), self.out);
            map.next_value_seed(SingleSeed { tag: 2, ty: self.ty, out: &mut *self.out, depth: self.depth })?;
            finish(self.out, start);
        }
        Ok(())
    }
}

/// One value of a field.
struct SingleSeed<'a> {
    tag: u32,
    ty: Type,
    out: &'a mut Vec<u8>,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for SingleSeed<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        match self.ty {
            Type::Message(message) => {
                let start = begin(self.tag, self.out);
                let written_before = self.out.len();
                let mut null = false;
                MessageSeed { message, out: &mut *self.out, depth: self.depth + 1 }
                    .deserialize(NullWatch { inner: deserializer, null: &mut null })?;
                if null && self.out.len() == written_before {
                    // A null message is left out, as the Value path does.
                    self.out.truncate(start - 1 - key_len(self.tag));
                } else {
                    finish(self.out, start);
                }
                Ok(())
            }
            _ => deserializer.deserialize_any(self),
        }
    }
}

/// The length of a field key.
fn key_len(tag: u32) -> usize {
    prost::encoding::key_len(tag)
}

impl<'de> Visitor<'de> for SingleSeed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {:?}", self.ty)
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        match self.ty {
            Type::String => bytes_field(self.tag, s.as_bytes(), self.out),
            Type::Bytes => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(s)
                    .map_err(|e| E::custom(format!("illegal base64 data: {e}")))?;
                bytes_field(self.tag, &bytes, self.out);
            }
            _ => return Err(E::invalid_type(de::Unexpected::Str(s), &self)),
        }
        Ok(())
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<(), E> {
        match self.ty {
            Type::Bool => varint_field(self.tag, u64::from(b), self.out),
            _ => return Err(E::invalid_type(de::Unexpected::Bool(b), &self)),
        }
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<(), E> {
        match self.ty {
            Type::Int32 if i32::try_from(n).is_err() => {
                return Err(E::custom(format!("{n} does not fit in 32 bits")));
            }
            Type::Int32 | Type::Int64 => varint_field(self.tag, n as u64, self.out),
            Type::Double => {
                encode_key(self.tag, WireType::SixtyFourBit, self.out);
                self.out.extend_from_slice(&(n as f64).to_le_bytes());
            }
            _ => return Err(E::invalid_type(de::Unexpected::Signed(n), &self)),
        }
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<(), E> {
        let signed = i64::try_from(n).map_err(|_| E::custom(format!("{n} does not fit in 64 bits")))?;
        self.visit_i64(signed)
    }

    fn visit_f64<E: de::Error>(self, f: f64) -> Result<(), E> {
        match self.ty {
            Type::Double => {
                encode_key(self.tag, WireType::SixtyFourBit, self.out);
                self.out.extend_from_slice(&f.to_le_bytes());
                Ok(())
            }
            Type::Int32 | Type::Int64 if f.fract() == 0.0 && f.abs() < 9.0e18 => self.visit_i64(f as i64),
            _ => Err(E::invalid_type(de::Unexpected::Float(f), &self)),
        }
    }
}

/// A deserializer that notes whether the value was null (so a null message can be left out).
struct NullWatch<'n, D> {
    inner: D,
    null: &'n mut bool,
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for NullWatch<'_, D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.inner.deserialize_any(NullVisitor { inner: visitor, null: self.null })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf option unit unit_struct newtype_struct seq tuple
        tuple_struct map struct enum identifier ignored_any
    }
}

struct NullVisitor<'n, V> {
    inner: V,
    null: &'n mut bool,
}

impl<'de, V: Visitor<'de>> Visitor<'de> for NullVisitor<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        *self.null = true;
        self.inner.visit_unit()
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<V::Value, E> {
        self.inner.visit_bool(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<V::Value, E> {
        self.inner.visit_i64(v)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<V::Value, E> {
        self.inner.visit_u64(v)
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<V::Value, E> {
        self.inner.visit_f64(v)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<V::Value, E> {
        self.inner.visit_str(v)
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<V::Value, E> {
        self.inner.visit_borrowed_str(v)
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<V::Value, E> {
        self.inner.visit_string(v)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(seq)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(map)
    }
}
