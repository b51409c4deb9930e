//! Content negotiation as kube-apiserver does it: which media type a request body is in
//! (Content-Type) and which one the response is wanted in (Accept, in the client's order), including
//! the Table form `application/json;as=Table;v=v1;g=meta.k8s.io` that `kubectl get` asks for, and
//! Kubernetes protobuf (`application/vnd.kubernetes.protobuf`) where the endpoint [`Offer`]s it.

use keel_api::status::ApiError;
use keel_api::table::TableVersion;

/// A response form the server can produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Yaml,
    /// A meta.k8s.io Table (JSON), v1 or v1beta1.
    Table(TableVersion),
    /// The aggregated discovery document (apidiscovery.k8s.io `v2` or `v2beta1`).
    AggregatedDiscovery(&'static str),
    /// Objects reduced to their metadata (meta.k8s.io `v1` or `v1beta1` PartialObjectMetadata and
    /// PartialObjectMetadataList), what metadata-only informers ask for.
    Metadata(&'static str),
    /// Kubernetes protobuf (the `k8s\0` envelope, `keel_api::protobuf`).
    Protobuf,
    /// [`Format::Metadata`] in protobuf: upstream serves it wherever it serves the metadata form,
    /// also for resources with no protobuf of their own (custom resources).
    MetadataProtobuf(&'static str),
}

impl Format {
    /// Whether the response is written in protobuf.
    pub fn is_protobuf(self) -> bool {
        matches!(self, Format::Protobuf | Format::MetadataProtobuf(_))
    }

    /// The JSON form of the same content (what the handlers produce before it is encoded).
    pub fn json_form(self) -> Format {
        match self {
            Format::Protobuf => Format::Json,
            Format::MetadataProtobuf(version) => Format::Metadata(version),
            other => other,
        }
    }
}

/// What an endpoint can answer in, besides JSON and YAML.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offer {
    /// Tables and metadata-only forms (reads of resources; upstream serves no Table for
    /// single-object subresources or discovery).
    pub table: bool,
    /// The aggregated discovery list (`/api` and `/apis`).
    pub aggregated: bool,
    /// Protobuf: built-in resources (a custom resource's handler says no).
    pub protobuf: bool,
}

/// The media types request bodies may be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyType {
    Json,
    Yaml,
    Protobuf,
}

fn media(value: &str) -> (String, Vec<(String, String)>) {
    let mut parts = value.split(';');
    let media = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
    let params = parts
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().trim_matches('"').to_owned()))
        .collect();
    (media, params)
}

/// The type of a request body; no Content-Type is JSON (the Python client sends none).
pub fn body_type(content_type: Option<&str>) -> Result<BodyType, ApiError> {
    let Some(content_type) = content_type else { return Ok(BodyType::Json) };
    match media(content_type).0.as_str() {
        "application/json" | "" | "*/*" => Ok(BodyType::Json),
        "application/yaml" => Ok(BodyType::Yaml),
        "application/vnd.kubernetes.protobuf" => Ok(BodyType::Protobuf),
        other => Err(ApiError::UnsupportedMediaType(format!(
            "the body of the request was in an unknown format ({other}) - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf"
        ))),
    }
}

/// An Accept header entry: its q, media type and parameters.
pub(crate) type Entry = (f32, String, Vec<(String, String)>);

/// The Accept header's entries in the order upstream tries them (goautoneg's `ParseAccept`):
/// by descending q (1 when not given), a concrete type or subtype before a wildcard, otherwise
/// as written. Sorted as Go's `sort.Sort` sorts so short a list (an insertion sort, which keeps
/// equal entries in order) with goautoneg's comparison, so ties break as upstream's do.
pub(crate) fn accept_entries(accept: &str) -> Vec<Entry> {
    let mut entries: Vec<Entry> = accept
        .split(',')
        .map(|entry| {
            let (media, params) = media(entry);
            let q = params.iter().find(|(k, _)| k == "q").map_or(1.0, |(_, q)| q.parse().unwrap_or(0.0));
            (q, media, params)
        })
        .collect();
    let wildcard = |media: &str| {
        let (kind, subtype) = media.split_once('/').unwrap_or((media, "*"));
        (kind == "*", subtype == "*")
    };
    let less = |a: &Entry, b: &Entry| {
        let ((a_any_type, a_any_subtype), (b_any_type, b_any_subtype)) = (wildcard(&a.1), wildcard(&b.1));
        a.0 > b.0 || (!a_any_type && b_any_type) || (!a_any_subtype && b_any_subtype)
    };
    for i in 1..entries.len() {
        let mut j = i;
        while j > 0 && less(&entries[j], &entries[j - 1]) {
            entries.swap(j, j - 1);
            j -= 1;
        }
    }
    entries
}

/// The response form for `accept`: the first entry (in upstream's order, [`accept_entries`]; q=0
/// excluded) the endpoint [`Offer`]s. As upstream, a Table is JSON or YAML only
/// (`application/vnd.kubernetes.protobuf; as=Table` is passed over for the next entry), the
/// metadata-only forms come in protobuf too.
pub fn response_format(accept: Option<&str>, offer: Offer) -> Result<Format, ApiError> {
    let (table_allowed, aggregated_allowed) = (offer.table, offer.aggregated);
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else { return Ok(Format::Json) };
    for (q, media, params) in accept_entries(accept) {
        let param = |name: &str| params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        if q <= 0.0 {
            continue;
        }
        let format = match media.as_str() {
            "application/json" => match param("as") {
                None => Some(Format::Json),
                Some("Table") if table_allowed && param("g") == Some("meta.k8s.io") => match param("v") {
                    Some("v1") => Some(Format::Table(TableVersion::V1)),
                    Some("v1beta1") => Some(Format::Table(TableVersion::V1Beta1)),
                    _ => None,
                },
                Some("APIGroupDiscoveryList")
                    if aggregated_allowed && param("g") == Some("apidiscovery.k8s.io") =>
                {
                    match param("v") {
                        Some("v2") => Some(Format::AggregatedDiscovery("v2")),
                        Some("v2beta1") => Some(Format::AggregatedDiscovery("v2beta1")),
                        _ => None,
                    }
                }
                Some("PartialObjectMetadata" | "PartialObjectMetadataList")
                    if table_allowed && param("g") == Some("meta.k8s.io") =>
                {
                    match param("v") {
                        Some("v1") => Some(Format::Metadata("v1")),
                        Some("v1beta1") => Some(Format::Metadata("v1beta1")),
                        _ => None,
                    }
                }
                Some(_) => None,
            },
            "application/yaml" => Some(Format::Yaml),
            "application/vnd.kubernetes.protobuf" => match param("as") {
                None if offer.protobuf => Some(Format::Protobuf),
                Some("PartialObjectMetadata" | "PartialObjectMetadataList")
                    if table_allowed && param("g") == Some("meta.k8s.io") =>
                {
                    match param("v") {
                        Some("v1") => Some(Format::MetadataProtobuf("v1")),
                        Some("v1beta1") => Some(Format::MetadataProtobuf("v1beta1")),
                        _ => None,
                    }
                }
                _ => None,
            },
            "*/*" | "application/*" => Some(Format::Json),
            _ => None,
        };
        if let Some(format) = format {
            return Ok(format);
        }
    }
    Err(ApiError::NotAcceptable(format!(
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf (asked for {accept})"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offer(table: bool, aggregated: bool) -> Offer {
        Offer { table, aggregated, protobuf: false }
    }

    #[test]
    fn protobuf_where_offered() {
        let resource = Offer { table: true, aggregated: false, protobuf: true };
        let kubectl = "application/vnd.kubernetes.protobuf, */*";
        assert_eq!(response_format(Some(kubectl), resource).unwrap(), Format::Protobuf);
        assert_eq!(
            response_format(Some(kubectl), Offer { protobuf: false, ..resource }).unwrap(),
            Format::Json,
            "a custom resource: the next entry"
        );
        assert_eq!(
            response_format(Some("application/vnd.kubernetes.protobuf"), Offer::default())
                .unwrap_err()
                .code(),
            406
        );
        let metadata = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(response_format(Some(metadata), resource).unwrap(), Format::MetadataProtobuf("v1"));
        assert_eq!(
            response_format(Some(metadata), Offer { protobuf: false, ..resource }).unwrap(),
            Format::MetadataProtobuf("v1"),
            "metadata in protobuf for custom resources too, as upstream"
        );
        let table = "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io,application/json";
        assert_eq!(response_format(Some(table), resource).unwrap(), Format::Json, "no Table in protobuf");
        assert_eq!(
            response_format(
                Some("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io"),
                resource
            )
            .unwrap_err()
            .code(),
            406
        );
    }

    #[test]
    fn metadata_only() {
        let list = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(response_format(Some(list), offer(true, false)).unwrap(), Format::Metadata("v1"));
        let one = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1beta1";
        assert_eq!(response_format(Some(one), offer(true, false)).unwrap(), Format::Metadata("v1beta1"));
        assert_eq!(response_format(Some(list), offer(false, false)).unwrap(), Format::Json);
    }

    #[test]
    fn discovery_is_aggregated_where_asked_and_served() {
        let client_go = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(
            response_format(Some(client_go), offer(false, true)).unwrap(),
            Format::AggregatedDiscovery("v2")
        );
        let beta =
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(
            response_format(Some(beta), offer(false, true)).unwrap(),
            Format::AggregatedDiscovery("v2beta1")
        );
        assert_eq!(
            response_format(Some(client_go), offer(false, false)).unwrap(),
            Format::Json,
            "elsewhere: the next type"
        );
    }

    #[test]
    fn kubectl_get_asks_for_a_table_first() {
        let accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(
            response_format(Some(accept), offer(true, false)).unwrap(),
            Format::Table(TableVersion::V1)
        );
        let beta = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";
        assert_eq!(
            response_format(Some(beta), offer(true, false)).unwrap(),
            Format::Table(TableVersion::V1Beta1)
        );
        assert_eq!(response_format(Some(accept), offer(false, false)).unwrap(), Format::Json);
        assert_eq!(response_format(None, offer(true, false)).unwrap(), Format::Json);
        assert_eq!(response_format(Some("application/yaml"), offer(true, false)).unwrap(), Format::Yaml);
        assert_eq!(response_format(Some("text/html, */*;q=0.8"), offer(true, false)).unwrap(), Format::Json);
        assert_eq!(
            response_format(Some("application/yaml;q=0, application/json"), offer(true, false)).unwrap(),
            Format::Json
        );
        assert_eq!(response_format(Some("text/html"), offer(true, false)).unwrap_err().code(), 406);
        // Protobuf where not offered: the next acceptable entry.
        assert_eq!(
            response_format(
                Some("application/vnd.kubernetes.protobuf, application/json"),
                offer(true, false)
            )
            .unwrap(),
            Format::Json
        );
    }

    #[test]
    fn entries_by_quality_then_order() {
        let resource = Offer { table: true, aggregated: false, protobuf: true };
        // A preferred type later in the list wins, as goautoneg sorts by q.
        assert_eq!(
            response_format(Some("application/json;q=0.5, application/vnd.kubernetes.protobuf"), resource)
                .unwrap(),
            Format::Protobuf
        );
        assert_eq!(
            response_format(Some("application/yaml;q=0.9, application/json;q=0.95"), resource).unwrap(),
            Format::Json
        );
        let table = "application/json;q=0.8, application/json;as=Table;v=v1;g=meta.k8s.io";
        assert_eq!(response_format(Some(table), resource).unwrap(), Format::Table(TableVersion::V1));
        // Equal q: as written; a concrete type before a wildcard.
        assert_eq!(
            response_format(Some("application/yaml, application/json"), resource).unwrap(),
            Format::Yaml
        );
        assert_eq!(response_format(Some("*/*, application/yaml"), resource).unwrap(), Format::Yaml);
        // An unreadable q is 0, as Go's ParseFloat error leaves it.
        assert_eq!(
            response_format(Some("application/yaml;q=high, application/json"), resource).unwrap(),
            Format::Json
        );
    }

    #[test]
    fn bodies() {
        assert_eq!(body_type(None).unwrap(), BodyType::Json);
        assert_eq!(body_type(Some("application/yaml; charset=utf-8")).unwrap(), BodyType::Yaml);
        assert_eq!(body_type(Some("application/vnd.kubernetes.protobuf")).unwrap(), BodyType::Protobuf);
        assert_eq!(body_type(Some("text/plain")).unwrap_err().code(), 415);
    }
}
