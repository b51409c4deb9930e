//! /openapi/v2 and /openapi/v3 as kube-apiserver serves them (kube-openapi's handlers): the
//! documents of keel-api's [`keel_api::openapi`], built at start and swapped whole when rebuilt
//! (CustomResourceDefinitions add their schemas and call [`OpenApi::rebuild`]).
//!
//! - `GET /openapi/v2`: JSON, or gnostic's protobuf when asked for
//!   `application/com.github.proto-openapi.spec.v2@v1.0+protobuf` (client-go's `OpenAPISchema()`,
//!   kubectl 1.27/1.28); ETag (SHA-512 of the JSON), 304 on a matching If-None-Match.
//! - `GET /openapi/v3`: the index naming each group version's document by its hash.
//! - `GET /openapi/v3/<api/v1 | apis/group/version>[?hash=H]`: JSON; with the current hash it may be
//!   cached for good (`Cache-Control: public, immutable`, Expires a year on), with an old one it
//!   is a 301 to the current URL, without one `no-cache, private` (upstream's default for every
//!   response) so clients revalidate by ETag.

use std::sync::{Arc, RwLock};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use keel_api::openapi::{self, BuildError, Documents, SchemaSource};
use keel_api::resources::Resource;

const PROTOBUF_V2: &str = "com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// The name client-go asks for (kube-openapi answers it with [`PROTOBUF_V2`]).
const PROTOBUF_V2_DEPRECATED: &str = "com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The served documents, replaced whole on rebuild: a request holds the `Arc` it started with.
#[derive(Debug)]
pub struct OpenApi {
    documents: RwLock<Arc<Documents>>,
}

impl OpenApi {
    /// Builds the documents of `resources` from `schemas`.
    pub fn build(resources: &[Resource], schemas: &dyn SchemaSource) -> Result<OpenApi, BuildError> {
        Ok(OpenApi { documents: RwLock::new(Arc::new(build(resources, schemas)?)) })
    }

    /// Builds the documents anew (after a CustomResourceDefinition changed) and serves them from
    /// now on; on error the current ones stay.
    pub fn rebuild(&self, resources: &[Resource], schemas: &dyn SchemaSource) -> Result<(), BuildError> {
        let documents = Arc::new(build(resources, schemas)?);
        *self.documents.write().unwrap_or_else(std::sync::PoisonError::into_inner) = documents;
        Ok(())
    }

    /// The documents being served.
    pub fn documents(&self) -> Arc<Documents> {
        self.documents.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Answers a request for `/openapi/...`; `None` for other paths.
    pub fn serve(
        &self,
        method: &Method,
        path: &str,
        query: Option<&str>,
        headers: &HeaderMap,
    ) -> Option<Response<Bytes>> {
        let path = path.trim_end_matches('/');
        let rest = path.strip_prefix("/openapi/")?;
        if !matches!(rest.split('/').next(), Some("v2" | "v3")) {
            return None;
        }
        if *method != Method::GET && *method != Method::HEAD {
            return Some(plain(StatusCode::METHOD_NOT_ALLOWED, "405: Method Not Allowed"));
        }
        let documents = self.documents();
        let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("*/*");
        let if_none_match = headers.get(header::IF_NONE_MATCH).and_then(|v| v.to_str().ok());
        let response = match rest {
            "v2" => match negotiate(accept, &["json", PROTOBUF_V2, PROTOBUF_V2_DEPRECATED]) {
                Some(0) => {
                    document(&documents.v2.json, "application/json", &documents.v2.hash, if_none_match)
                }
                Some(_) => document(
                    &documents.v2_protobuf,
                    &format!("application/{PROTOBUF_V2}"),
                    &documents.v2.hash,
                    if_none_match,
                ),
                None => plain(StatusCode::NOT_ACCEPTABLE, ""),
            },
            "v3" => {
                let hash = openapi::hash(&documents.v3_index);
                document(&documents.v3_index, "application/json", &hash, if_none_match)
            }
            group_version => {
                let gv = group_version.trim_start_matches("v3/");
                let Some(served) = documents.v3.get(gv) else {
                    return Some(plain(StatusCode::NOT_FOUND, "404 page not found"));
                };
                if negotiate(accept, &["json"]).is_none() {
                    return Some(plain(StatusCode::NOT_ACCEPTABLE, ""));
                }
                let asked = query_param(query, "hash");
                match asked {
                    Some(hash) if hash != served.hash => {
                        let location = format!("/openapi/v3/{gv}?hash={}", served.hash);
                        let mut response = plain(StatusCode::MOVED_PERMANENTLY, "");
                        insert(&mut response, header::LOCATION, &location);
                        return Some(response);
                    }
                    _ => {}
                }
                let mut response = document(&served.json, "application/json", &served.hash, if_none_match);
                if asked.is_some() {
                    insert(&mut response, header::CACHE_CONTROL, "public, immutable");
                    let year = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24 * 365);
                    let expires = jiff::fmt::rfc2822::DateTimePrinter::new()
                        .timestamp_to_rfc9110_string(&year)
                        .unwrap_or_default();
                    insert(&mut response, header::EXPIRES, &expires);
                }
                response
            }
        };
        let mut response = response;
        if *method == Method::HEAD {
            *response.body_mut() = Bytes::new();
        }
        Some(response)
    }
}

fn build(resources: &[Resource], schemas: &dyn SchemaSource) -> Result<Documents, BuildError> {
    let (major, minor) = crate::KUBERNETES_VERSION;
    let started = std::time::Instant::now();
    let documents = openapi::build(resources, schemas, &format!("v{major}.{minor}.0"))?;
    tracing::info!(
        elapsed = ?started.elapsed(),
        v2_bytes = documents.v2.json.len(),
        v2_protobuf_bytes = documents.v2_protobuf.len(),
        v3_bytes = documents.v3.values().map(|d| d.json.len()).sum::<usize>(),
        "OpenAPI documents built"
    );
    for skipped in &documents.skipped {
        tracing::warn!(%skipped, "left out of the OpenAPI documents (run `cargo xtask codegen`?)");
    }
    Ok(documents)
}

/// The index (into `offered`, application/<subtype>) of the first subtype the Accept header takes,
/// its entries in upstream's order ([`crate::negotiate::accept_entries`]), wildcards matching
/// anything; `None` if none is acceptable.
fn negotiate(accept: &str, offered: &[&str]) -> Option<usize> {
    crate::negotiate::accept_entries(accept).into_iter().filter(|(q, _, _)| *q > 0.0).find_map(
        |(_, media, _)| {
            let (kind, subtype) = media.split_once('/').unwrap_or((media.as_str(), ""));
            if kind != "application" && kind != "*" {
                return None;
            }
            offered.iter().position(|offer| subtype == "*" || subtype.eq_ignore_ascii_case(offer))
        },
    )
}

fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?.split('&').find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

fn insert(response: &mut Response<Bytes>, name: header::HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().insert(name, value);
    }
}

fn plain(status: StatusCode, text: &str) -> Response<Bytes> {
    let mut response = Response::new(Bytes::from(text.to_owned()));
    *response.status_mut() = status;
    insert(&mut response, header::CONTENT_TYPE, "text/plain; charset=utf-8");
    response
}

/// A document with its ETag (`"HASH"`), or 304 when the client holds it already.
fn document(body: &Bytes, content_type: &str, hash: &str, if_none_match: Option<&str>) -> Response<Bytes> {
    let etag = format!("\"{hash}\"");
    let held = if_none_match.is_some_and(|tags| tags.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut response = if held {
        let mut response = Response::new(Bytes::new());
        *response.status_mut() = StatusCode::NOT_MODIFIED;
        response
    } else {
        let mut response = Response::new(body.clone());
        insert(&mut response, header::CONTENT_TYPE, content_type);
        response
    };
    insert(&mut response, header::ETAG, &etag);
    insert(&mut response, header::VARY, "Accept");
    insert(&mut response, header::CACHE_CONTROL, "no-cache, private");
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_clauses() {
        let client_go = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
        let offered = ["json", PROTOBUF_V2, PROTOBUF_V2_DEPRECATED];
        assert_eq!(negotiate(client_go, &offered), Some(2));
        assert_eq!(negotiate("application/json, */*", &offered), Some(0));
        assert_eq!(negotiate("*/*", &offered), Some(0));
        assert_eq!(negotiate("text/html", &offered), None);
        assert_eq!(
            negotiate(
                "application/json;q=0.5, application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                &offered
            ),
            Some(1)
        );
        // Equal q: a concrete type before a wildcard, as goautoneg sorts them.
        assert_eq!(negotiate(&format!("*/*, {client_go}"), &offered), Some(2));
    }
}
