//! Kubernetes protobuf at the HTTP edge: request bodies in `application/vnd.kubernetes.protobuf`
//! read into the JSON the handlers work on, and replies (objects, lists, Status errors, watch
//! streams) written in it. The conversion itself is `keel_api::protobuf`.

use std::convert::Infallible;

use bytes::Bytes;
use futures::StreamExt;
use http::{Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use keel_api::protobuf::envelope::{self, CONTENT_TYPE, DecodeError};
use keel_api::resources::Resource;
use keel_api::status::ApiError;
use serde_json::Value;

use crate::Body;
use crate::handlers::Reply;

/// A protobuf request body as JSON with its apiVersion and kind. Refusals are upstream's
/// (the create handler's transformDecodeError): `Pod in version "v1" cannot be handled as a Pod:
/// ...` once the envelope names a kind, `the object provided is unrecognized (must be of type
/// Pod): ... (<the first 30 bytes in hex>)` before.
pub fn decode_body(body: &[u8], expected: Option<&Resource>) -> Result<Value, ApiError> {
    envelope::decode_object_typed(body).map_err(|DecodeError { type_meta, error }| {
        let expected_kind =
            expected.map_or_else(|| type_meta.as_ref().map(|t| t.kind.clone()), |r| Some(r.kind.to_owned()));
        match (type_meta, expected_kind) {
            (Some(type_meta), Some(expected)) => {
                let version = type_meta.api_version.rsplit('/').next().unwrap_or_default();
                ApiError::BadRequest(format!(
                    "{} in version {version:?} cannot be handled as a {expected}: {error}",
                    type_meta.kind
                ))
            }
            (_, expected) => {
                let summary = if body.is_empty() {
                    "<empty>".to_owned()
                } else if body.len() > 30 {
                    format!("{} ...", hex(&body[..30]))
                } else {
                    hex(body)
                };
                let of_type = expected.map(|kind| format!(" (must be of type {kind})")).unwrap_or_default();
                ApiError::BadRequest(format!(
                    "the object provided is unrecognized{of_type}: {error} ({summary})"
                ))
            }
        }
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A reply (or an error's Status) in protobuf.
pub fn respond(result: Result<Reply, ApiError>) -> Response<Body> {
    match result {
        Ok(Reply::Json(code, value)) => object(code, &value),
        // Stored bytes spliced into a reply: transcoded without parsing them into a value.
        Ok(Reply::Raw(code, bytes)) => match envelope::encode_object_json(&bytes) {
            Ok(encoded) => protobuf_response(code, encoded),
            Err(e) => error(&ApiError::Internal(format!("encoding a response in protobuf: {e}"))),
        },
        Ok(Reply::Watch(lines)) => {
            let frames = lines.map(|line| Ok::<_, Infallible>(Frame::data(watch_frame(&line))));
            Response::builder()
                .status(StatusCode::OK)
                .header(header::CONTENT_TYPE, format!("{CONTENT_TYPE};stream=watch"))
                .header(header::TRANSFER_ENCODING, "chunked")
                .body(BodyExt::boxed_unsync(StreamBody::new(frames)))
                .unwrap_or_else(|_| error(&ApiError::Internal("building a response".into())))
        }
        Err(e) => error(&e),
    }
}

fn protobuf_response(code: u16, bytes: Vec<u8>) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, CONTENT_TYPE)
        .body(BodyExt::boxed_unsync(Full::new(Bytes::from(bytes))))
        .unwrap_or_else(|_| crate::json_response(500, &Value::Null))
}

fn object(code: u16, value: &Value) -> Response<Body> {
    match envelope::encode_object(value) {
        Ok(bytes) => protobuf_response(code, bytes),
        // Not one of ours to encode (cannot happen for the kinds served): a 500 in JSON, whose
        // Status is certain to encode.
        Err(e) => {
            let error = ApiError::Internal(format!("encoding a response in protobuf: {e}"));
            crate::json_response(error.code(), &error.to_json())
        }
    }
}

fn error(error: &ApiError) -> Response<Body> {
    object(error.code(), &error.to_json())
}

/// A watch line's two members, the object as its bytes.
#[derive(serde::Deserialize)]
struct Event<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    object: &'a serde_json::value::RawValue,
}

/// A JSON watch line (`{"type":..,"object":..}`) as a protobuf watch frame, the object transcoded
/// from its bytes.
fn watch_frame(line: &Bytes) -> Bytes {
    let encoded = serde_json::from_slice::<Event<'_>>(line).map_err(|e| e.to_string()).and_then(|event| {
        let object =
            envelope::encode_object_json(event.object.get().as_bytes()).map_err(|e| e.to_string())?;
        Ok(envelope::watch_frame(&event.kind, &object))
    });
    match encoded {
        Ok(frame) => Bytes::from(frame),
        Err(e) => {
            let status = ApiError::Internal(format!("encoding a watch event in protobuf: {e}")).to_json();
            let object = envelope::encode_object(&status).unwrap_or_default();
            Bytes::from(envelope::watch_frame("ERROR", &object))
        }
    }
}
