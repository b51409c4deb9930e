//! The Kubernetes protobuf envelope: the magic `k8s\0`, then a runtime.Unknown holding the
//! object's apiVersion and kind (`typeMeta`) and its message (`raw`); and the frames of a watch in
//! protobuf: a 4-byte big-endian length, then a metav1.WatchEvent with no envelope of its own
//! (upstream's stream serializer is the raw one) whose `object.raw` holds the object's envelope.

use prost::bytes::Buf;
use prost::encoding::{DecodeContext, decode_key, skip_field};
use serde_json::Value;

use super::decode::length_delimited;
use super::encode::{bytes_field, delimited};
use super::{MessageType, ProtobufError, decode, encode};

/// What every envelope starts with.
pub const MAGIC: &[u8] = b"k8s\0";

/// The media type.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// runtime.TypeMeta of an envelope.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TypeMeta {
    pub api_version: String,
    pub kind: String,
}

/// A body that is not an object in protobuf form; `type_meta` is set when the envelope named a
/// kind (upstream's messages differ by it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct DecodeError {
    pub type_meta: Option<TypeMeta>,
    pub error: ProtobufError,
}

impl DecodeError {
    fn bare(message: impl Into<String>) -> DecodeError {
        DecodeError { type_meta: None, error: ProtobufError(message.into()) }
    }
}

/// The envelope of `object`, a JSON object whose `apiVersion` and `kind` name a message.
pub fn encode_object(object: &Value) -> Result<Vec<u8>, ProtobufError> {
    let field = |name: &str| object.get(name).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    let message = MessageType::of_kind(api_version, kind)
        .ok_or_else(|| ProtobufError(format!("{kind} in version {api_version:?} has no protobuf form")))?;
    Ok(wrap(api_version, kind, &encode(object, message)?))
}

/// [`encode_object`] of JSON bytes, without parsing them into a value ([`super::encode_json`]).
pub fn encode_object_json(json: &[u8]) -> Result<Vec<u8>, ProtobufError> {
    /// The two members that name the message; serde skips the rest without keeping it.
    #[derive(serde::Deserialize)]
    struct Kind<'a> {
        #[serde(borrow, rename = "apiVersion", default)]
        api_version: std::borrow::Cow<'a, str>,
        #[serde(borrow, default)]
        kind: std::borrow::Cow<'a, str>,
    }
    let named: Kind<'_> = serde_json::from_slice(json).map_err(|e| ProtobufError(e.to_string()))?;
    let message = MessageType::of_kind(&named.api_version, &named.kind).ok_or_else(|| {
        ProtobufError(format!("{} in version {:?} has no protobuf form", named.kind, named.api_version))
    })?;
    Ok(wrap(&named.api_version, &named.kind, &super::encode_json(json, message)?))
}

/// `raw` (a message) in an envelope. As Go's runtime.Unknown, every field is written, the empty
/// contentEncoding and contentType too.
pub fn wrap(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + api_version.len() + kind.len() + 16);
    out.extend_from_slice(MAGIC);
    let type_meta = |out: &mut Vec<u8>| {
        bytes_field(1, api_version.as_bytes(), out);
        bytes_field(2, kind.as_bytes(), out);
        Ok(())
    };
    // Writing into a Vec cannot fail.
    let _ = delimited(1, &mut out, type_meta);
    bytes_field(2, raw, &mut out);
    bytes_field(3, b"", &mut out);
    bytes_field(4, b"", &mut out);
    out
}

/// The type and message of an envelope.
pub fn unwrap(bytes: &[u8]) -> Result<(TypeMeta, &[u8]), DecodeError> {
    let Some(mut buf) = bytes.strip_prefix(MAGIC) else {
        return Err(DecodeError::bare(
            "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]",
        ));
    };
    let mut type_meta = TypeMeta::default();
    let mut raw: &[u8] = &[];
    let mut content_encoding = String::new();
    let unknown = |e: ProtobufError| DecodeError::bare(e.0);
    while buf.has_remaining() {
        let (tag, wire) = decode_key(&mut buf).map_err(|e| unknown(e.into()))?;
        match tag {
            1 => {
                let mut inner = length_delimited(wire, &mut buf).map_err(unknown)?;
                while inner.has_remaining() {
                    let (tag, wire) = decode_key(&mut inner).map_err(|e| unknown(e.into()))?;
                    match tag {
                        1 | 2 => {
                            let text =
                                String::from_utf8_lossy(length_delimited(wire, &mut inner).map_err(unknown)?)
                                    .into_owned();
                            if tag == 1 { type_meta.api_version = text } else { type_meta.kind = text }
                        }
                        _ => skip_field(wire, tag, &mut inner, DecodeContext::default())
                            .map_err(|e| unknown(e.into()))?,
                    }
                }
            }
            2 => raw = length_delimited(wire, &mut buf).map_err(unknown)?,
            3 => {
                content_encoding =
                    String::from_utf8_lossy(length_delimited(wire, &mut buf).map_err(unknown)?).into_owned();
            }
            _ => skip_field(wire, tag, &mut buf, DecodeContext::default()).map_err(|e| unknown(e.into()))?,
        }
    }
    let described =
        format!("runtime.TypeMeta{{APIVersion:{:?}, Kind:{:?}}}", type_meta.api_version, type_meta.kind);
    if type_meta.kind.is_empty() {
        return Err(DecodeError::bare(format!("Object 'Kind' is missing in '{described}'")));
    }
    if type_meta.api_version.is_empty() {
        return Err(DecodeError::bare(format!("Object 'apiVersion' is missing in '{described}'")));
    }
    if !content_encoding.is_empty() {
        return Err(DecodeError {
            type_meta: Some(type_meta),
            error: ProtobufError(format!("unsupported content encoding {content_encoding:?}")),
        });
    }
    Ok((type_meta, raw))
}

/// The JSON form of an envelope's object, with its apiVersion and kind.
pub fn decode_object_typed(bytes: &[u8]) -> Result<Value, DecodeError> {
    decode_object_typed_at(bytes, 0)
}

/// An object whose JSON nests too deeply to be read back is refused ([`decode::readable`]).
fn readable(object: Value) -> Result<Value, DecodeError> {
    let type_meta = |object: &Value| TypeMeta {
        api_version: object["apiVersion"].as_str().unwrap_or_default().to_owned(),
        kind: object["kind"].as_str().unwrap_or_default().to_owned(),
    };
    let described = type_meta(&object);
    decode::readable(object).map_err(|error| DecodeError { type_meta: Some(described), error })
}

/// [`decode_object_typed`] of an envelope nested `depth` deep.
fn decode_object_typed_at(bytes: &[u8], depth: usize) -> Result<Value, DecodeError> {
    let (type_meta, raw) = unwrap(bytes)?;
    let Some(message) = MessageType::of_kind(&type_meta.api_version, &type_meta.kind) else {
        let (group_version, kind) = (&type_meta.api_version, &type_meta.kind);
        return Err(DecodeError {
            error: ProtobufError(format!(
                "no kind {kind:?} is registered for version {group_version:?} in scheme \"pkg/api/legacyscheme/scheme.go:30\""
            )),
            type_meta: Some(type_meta.clone()),
        });
    };
    let mut object = match decode::decode_at(raw, message, depth) {
        Ok(object) => object,
        Err(error) => return Err(DecodeError { type_meta: Some(type_meta), error }),
    };
    if let Value::Object(map) = &mut object {
        map.insert("apiVersion".into(), type_meta.api_version.into());
        map.insert("kind".into(), type_meta.kind.into());
    }
    if depth == 0 { readable(object) } else { Ok(object) }
}

/// [`decode_object_typed`] for nested objects (a RawExtension holding an envelope).
pub fn decode_object(bytes: &[u8]) -> Result<Value, ProtobufError> {
    decode_object_at(bytes, 0)
}

/// [`decode_object`] of an envelope nested `depth` deep (inside a RawExtension).
pub(super) fn decode_object_at(bytes: &[u8], depth: usize) -> Result<Value, ProtobufError> {
    decode_object_typed_at(bytes, depth).map_err(|e| e.error)
}

/// One watch frame: the length, then WatchEvent{type, object: RawExtension{raw: `object`}} where
/// `object` is an envelope ([`encode_object`]).
pub fn watch_frame(event_type: &str, object: &[u8]) -> Vec<u8> {
    let mut event = Vec::with_capacity(object.len() + event_type.len() + 16);
    bytes_field(1, event_type.as_bytes(), &mut event);
    // Writing into a Vec cannot fail.
    let _ = delimited(2, &mut event, |out| {
        bytes_field(1, object, out);
        Ok(())
    });
    let mut frame = Vec::with_capacity(event.len() + 4);
    frame.extend_from_slice(&u32::try_from(event.len()).unwrap_or(u32::MAX).to_be_bytes());
    frame.extend_from_slice(&event);
    frame
}
