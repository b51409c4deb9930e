//! API errors as Kubernetes answers them: a `Status` object (kind Status, apiVersion v1) with its HTTP
//! code, a `reason` clients switch on, a message worded as upstream's (k8s.io/apimachinery
//! pkg/api/errors), and `details` naming the object and, for invalid ones, each bad field.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, Status, StatusCause, StatusDetails};
use serde_json::Value;

/// A resource as errors name it: `pods`, `deployments.apps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: &str, resource: &str) -> GroupResource {
        GroupResource { group: group.to_owned(), resource: resource.to_owned() }
    }
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// One invalid field (a `StatusCause`): upstream's field.Error types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The JSON path, e.g. `spec.containers[0].image`.
    pub field: String,
    pub kind: FieldErrorKind,
    /// What upstream appends after the kind's words (the bad value, the allowed ones...).
    pub detail: String,
}

/// Upstream's `field.ErrorType`s: the cause's `reason` and the words a message starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorKind {
    Required,
    Invalid,
    /// A value of the wrong type (structural schemas' type errors).
    TypeInvalid,
    Duplicate,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
    NotFound,
    Internal,
}

impl FieldErrorKind {
    /// The cause's `reason` (`FieldValueRequired`...).
    pub fn reason(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "FieldValueRequired",
            FieldErrorKind::Invalid => "FieldValueInvalid",
            FieldErrorKind::TypeInvalid => "FieldValueTypeInvalid",
            FieldErrorKind::Duplicate => "FieldValueDuplicate",
            FieldErrorKind::NotSupported => "FieldValueNotSupported",
            FieldErrorKind::Forbidden => "FieldValueForbidden",
            FieldErrorKind::TooLong => "FieldValueTooLong",
            FieldErrorKind::TooMany => "FieldValueTooMany",
            FieldErrorKind::NotFound => "FieldValueNotFound",
            FieldErrorKind::Internal => "InternalError",
        }
    }

    fn words(self) -> &'static str {
        match self {
            FieldErrorKind::Required => "Required value",
            FieldErrorKind::Invalid | FieldErrorKind::TypeInvalid => "Invalid value",
            FieldErrorKind::Duplicate => "Duplicate value",
            FieldErrorKind::NotSupported => "Unsupported value",
            FieldErrorKind::Forbidden => "Forbidden",
            FieldErrorKind::TooLong => "Too long",
            FieldErrorKind::TooMany => "Too many",
            FieldErrorKind::NotFound => "Not found",
            FieldErrorKind::Internal => "Internal error",
        }
    }
}

impl FieldError {
    pub fn required(field: &str, detail: &str) -> FieldError {
        FieldError { field: field.to_owned(), kind: FieldErrorKind::Required, detail: detail.to_owned() }
    }

    /// An invalid value: `value` is shown as upstream shows it (JSON, strings quoted).
    pub fn invalid(field: &str, value: &Value, detail: &str) -> FieldError {
        let shown = if detail.is_empty() { value.to_string() } else { format!("{value}: {detail}") };
        FieldError { field: field.to_owned(), kind: FieldErrorKind::Invalid, detail: shown }
    }

    pub fn forbidden(field: &str, detail: &str) -> FieldError {
        FieldError { field: field.to_owned(), kind: FieldErrorKind::Forbidden, detail: detail.to_owned() }
    }

    pub fn not_supported(field: &str, value: &Value, supported: &[&str]) -> FieldError {
        let supported: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        FieldError {
            field: field.to_owned(),
            kind: FieldErrorKind::NotSupported,
            detail: format!("{value}: supported values: {}", supported.join(", ")),
        }
    }

    pub fn duplicate(field: &str, value: &Value) -> FieldError {
        FieldError { field: field.to_owned(), kind: FieldErrorKind::Duplicate, detail: value.to_string() }
    }

    /// `Required value` / `Invalid value: "x": must be ...`, as the cause's message.
    pub fn message(&self) -> String {
        if self.detail.is_empty() {
            self.kind.words().to_owned()
        } else {
            format!("{}: {}", self.kind.words(), self.detail)
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message())
    }
}

/// A failed API request, one variant per `reason` Keel answers with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error("{resource} {name:?} not found")]
    NotFound { resource: GroupResource, name: String },
    /// A path or resource the server does not have.
    #[error("the server could not find the requested resource")]
    NotFoundPath(String),
    #[error("{resource} {name:?} already exists")]
    AlreadyExists { resource: GroupResource, name: String },
    /// An optimistic-concurrency or precondition failure.
    #[error("Operation cannot be fulfilled on {resource} {name:?}: {detail}")]
    Conflict { resource: GroupResource, name: String, detail: String },
    /// Validation failed; `kind` is qualified like `Deployment.apps`.
    #[error("{kind} {name:?} is invalid: {}", causes_text(causes))]
    Invalid { group: String, kind: String, name: String, causes: Vec<FieldError> },
    #[error("{0}")]
    BadRequest(String),
    /// 409 of a server-side apply: the fields other managers own, as (field, message) causes of
    /// type FieldManagerConflict (upstream's NewApplyConflict).
    #[error("{message}")]
    ApplyConflict { message: String, causes: Vec<(String, String)> },
    /// 422 without field causes (a patch that cannot be applied), reason Invalid as upstream.
    #[error("{0}")]
    UnprocessableEntity(String),
    /// A resourceVersion older than what is kept (410, reason Expired).
    #[error("{0}")]
    Expired(String),
    #[error("{0}")]
    Gone(String),
    #[error("Request entity too large: {0}")]
    RequestEntityTooLarge(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    NotAcceptable(String),
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    #[error("Unauthorized")]
    Unauthorized,
    /// upstream's NewForbidden: `pods "web" is forbidden: ...`, `pods is forbidden: ...` without a
    /// name, `forbidden: ...` without a resource (a non-resource path).
    #[error("{}", forbidden_text(resource, name, detail))]
    Forbidden { resource: GroupResource, name: String, detail: String },
    #[error("Internal error occurred: {0}")]
    Internal(String),
    /// A 500 without a reason, as upstream answers an error that is not a Status (its
    /// ErrorToAPIStatus fallback), e.g. an applied configuration that does not fit its schema.
    #[error("{0}")]
    Unclassified(String),
    #[error("{0}")]
    ServiceUnavailable(String),
    #[error("Timeout: {0}")]
    Timeout(String),
    /// Another server's answer passed on (upstream's NewGenericServerResponse): `reason` from
    /// its status code, the message naming what was asked of it.
    #[error("{message}")]
    ServerResponse { code: u16, reason: &'static str, message: String },
    /// 429: try again later (`retry_after_seconds`); `causes` are (reason, message) pairs, e.g. the
    /// DisruptionBudget cause of a refused eviction.
    #[error("{message}")]
    TooManyRequests { message: String, retry_after_seconds: i32, causes: Vec<(String, String)> },
}

fn forbidden_text(resource: &GroupResource, name: &str, detail: &str) -> String {
    match (resource.resource.is_empty(), name.is_empty()) {
        (true, _) => format!("forbidden: {detail}"),
        (false, true) => format!("{resource} is forbidden: {detail}"),
        (false, false) => format!("{resource} {name:?} is forbidden: {detail}"),
    }
}

/// Upstream's aggregate: one error as is, several as `[a, b]`.
fn causes_text(causes: &[FieldError]) -> String {
    match causes {
        [one] => one.to_string(),
        many => format!("[{}]", many.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")),
    }
}

impl ApiError {
    pub fn not_found(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError::NotFound { resource: GroupResource::new(group, resource), name: name.to_owned() }
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError::AlreadyExists { resource: GroupResource::new(group, resource), name: name.to_owned() }
    }

    /// The conflict of an update carrying a stale resourceVersion.
    pub fn stale(group: &str, resource: &str, name: &str) -> ApiError {
        ApiError::Conflict {
            resource: GroupResource::new(group, resource),
            name: name.to_owned(),
            detail:
                "the object has been modified; please apply your changes to the latest version and try again"
                    .to_owned(),
        }
    }

    /// An invalid query parameter (upstream answers these as an Invalid ListOptions).
    pub fn invalid_query(field: &str, detail: &str) -> ApiError {
        ApiError::invalid("meta.k8s.io", "ListOptions", "", vec![FieldError::forbidden(field, detail)])
    }

    /// An invalid object of `kind` (`Pod`) in `group` (`""` for core).
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<FieldError>) -> ApiError {
        let kind = if group.is_empty() { kind.to_owned() } else { format!("{kind}.{group}") };
        ApiError::Invalid { group: group.to_owned(), kind, name: name.to_owned(), causes }
    }

    /// upstream's NewGenericServerResponse for a `code` another server answered a request about
    /// `resource` (qualified, e.g. `pods/log`) `name` with, its body `said`; the verb is not known
    /// (as when the API server passes a kubelet's answer on), so it shows as empty.
    pub fn server_response(code: u16, resource: &str, name: &str, said: &str) -> ApiError {
        let (reason, message) = match code {
            409 => ("Conflict", "the server reported a conflict".to_owned()),
            404 => ("NotFound", "the server could not find the requested resource".to_owned()),
            400 => ("BadRequest", "the server rejected our request for an unknown reason".to_owned()),
            401 => ("Unauthorized", "the server has asked for the client to provide credentials".to_owned()),
            403 => ("Forbidden", said.to_owned()),
            406 if said.is_empty() || said == "unknown" => {
                ("NotAcceptable", "the server was unable to respond with a content type that the client supports".to_owned())
            }
            406 => ("NotAcceptable", said.to_owned()),
            415 => ("UnsupportedMediaType", said.to_owned()),
            405 => ("MethodNotAllowed", "the server does not allow this method on the requested resource".to_owned()),
            422 => ("Invalid", "the server rejected our request due to an error in our request".to_owned()),
            503 => ("ServiceUnavailable", "the server is currently unable to handle the request".to_owned()),
            504 => (
                "Timeout",
                "the server was unable to return a response in the time allotted, but may still be processing the request"
                    .to_owned(),
            ),
            429 => {
                ("TooManyRequests", "the server has received too many requests and has asked us to try again later".to_owned())
            }
            500.. => (
                "InternalError",
                format!("an error on the server ({said:?}) has prevented the request from succeeding"),
            ),
            _ => ("", format!("the server responded with the status code {code} but did not return more information")),
        };
        let message = match (resource.is_empty(), name.is_empty()) {
            (false, false) => format!("{message} ( {resource} {name})"),
            (false, true) => format!("{message} ( {resource})"),
            _ => message,
        };
        ApiError::ServerResponse { code, reason, message }
    }

    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::NotFound { .. } | ApiError::NotFoundPath(_) => 404,
            ApiError::AlreadyExists { .. } | ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } => {
                409
            }
            ApiError::Invalid { .. } | ApiError::UnprocessableEntity(_) => 422,
            ApiError::BadRequest(_) => 400,
            ApiError::Expired(_) | ApiError::Gone(_) => 410,
            ApiError::RequestEntityTooLarge(_) => 413,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::NotAcceptable(_) => 406,
            ApiError::MethodNotAllowed => 405,
            ApiError::Unauthorized => 401,
            ApiError::Forbidden { .. } => 403,
            ApiError::Internal(_) | ApiError::Unclassified(_) => 500,
            ApiError::ServiceUnavailable(_) => 503,
            ApiError::Timeout(_) => 504,
            ApiError::TooManyRequests { .. } => 429,
            ApiError::ServerResponse { code, .. } => *code,
        }
    }

    /// The `reason` clients switch on (`metav1.StatusReason`).
    pub fn reason(&self) -> &'static str {
        match self {
            ApiError::NotFound { .. } | ApiError::NotFoundPath(_) => "NotFound",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } => "Conflict",
            ApiError::Invalid { .. } | ApiError::UnprocessableEntity(_) => "Invalid",
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Expired(_) => "Expired",
            ApiError::Gone(_) => "Gone",
            ApiError::RequestEntityTooLarge(_) => "RequestEntityTooLarge",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::NotAcceptable(_) => "NotAcceptable",
            ApiError::MethodNotAllowed => "MethodNotAllowed",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::Forbidden { .. } => "Forbidden",
            ApiError::Internal(_) => "InternalError",
            ApiError::Unclassified(_) => "",
            ApiError::ServiceUnavailable(_) => "ServiceUnavailable",
            ApiError::Timeout(_) => "Timeout",
            ApiError::TooManyRequests { .. } => "TooManyRequests",
            ApiError::ServerResponse { reason, .. } => reason,
        }
    }

    /// The `Status` object to send.
    pub fn to_status(&self) -> Status {
        // Empty fields are left out, as upstream's JSON (omitempty) has them.
        let some = |text: &str| (!text.is_empty()).then(|| text.to_owned());
        let named = |resource: &GroupResource, name: &str| StatusDetails {
            group: some(&resource.group),
            kind: some(&resource.resource),
            name: some(name),
            ..StatusDetails::default()
        };
        let details = match self {
            ApiError::NotFound { resource, name }
            | ApiError::AlreadyExists { resource, name }
            | ApiError::Conflict { resource, name, .. }
            | ApiError::Forbidden { resource, name, .. } => Some(named(resource, name)),
            ApiError::NotFoundPath(_) => Some(StatusDetails::default()),
            ApiError::Invalid { group, kind, name, causes } => Some(StatusDetails {
                group: Some(group.clone()),
                // Upstream names the bare kind here, without the group.
                kind: Some(kind.split('.').next().unwrap_or(kind).to_owned()),
                name: some(name),
                causes: Some(
                    causes
                        .iter()
                        .map(|cause| StatusCause {
                            field: Some(cause.field.clone()),
                            message: Some(cause.message()),
                            reason: Some(cause.kind.reason().to_owned()),
                        })
                        .collect(),
                ),
                ..StatusDetails::default()
            }),
            // Upstream's NewTooLargeResourceVersionError, which client-go's reflector recognises by
            // its cause and answers by listing again.
            ApiError::Timeout(message) if message.starts_with("Too large resource version") => {
                Some(StatusDetails {
                    causes: Some(vec![StatusCause {
                        field: None,
                        message: Some("Too large resource version".to_owned()),
                        reason: Some("ResourceVersionTooLarge".to_owned()),
                    }]),
                    retry_after_seconds: Some(1),
                    ..StatusDetails::default()
                })
            }
            ApiError::ApplyConflict { causes, .. } => Some(StatusDetails {
                causes: Some(
                    causes
                        .iter()
                        .map(|(field, message)| StatusCause {
                            field: Some(field.clone()),
                            message: Some(message.clone()),
                            reason: Some("FieldManagerConflict".to_owned()),
                        })
                        .collect(),
                ),
                ..StatusDetails::default()
            }),
            ApiError::TooManyRequests { retry_after_seconds, causes, .. } => Some(StatusDetails {
                causes: Some(
                    causes
                        .iter()
                        .map(|(reason, message)| StatusCause {
                            field: None,
                            message: Some(message.clone()),
                            reason: Some(reason.clone()),
                        })
                        .collect(),
                )
                .filter(|causes: &Vec<StatusCause>| !causes.is_empty()),
                retry_after_seconds: Some(*retry_after_seconds).filter(|s| *s > 0),
                ..StatusDetails::default()
            }),
            _ => None,
        };
        Status {
            code: Some(i32::from(self.code())),
            details,
            message: Some(self.to_string()),
            metadata: ListMeta::default(),
            reason: Some(self.reason().to_owned()).filter(|reason| !reason.is_empty()),
            status: Some("Failure".to_owned()),
        }
    }

    /// The `Status` as the JSON body Kubernetes sends (k8s-openapi adds kind and apiVersion).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.to_status()).unwrap_or_else(|_| Value::Object(Default::default()))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn not_found_as_upstream() {
        let error = ApiError::not_found("apps", "deployments", "web");
        assert_eq!(error.to_string(), r#"deployments.apps "web" not found"#);
        assert_eq!(
            error.to_json(),
            json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "deployments.apps \"web\" not found", "reason": "NotFound",
                "details": {"name": "web", "group": "apps", "kind": "deployments"}, "code": 404
            })
        );
        assert_eq!(ApiError::not_found("", "pods", "x").to_string(), r#"pods "x" not found"#);
    }

    #[test]
    fn invalid_with_causes() {
        let error = ApiError::invalid(
            "",
            "Pod",
            "web",
            vec![
                FieldError::required("spec.containers", ""),
                FieldError::invalid(
                    "metadata.name",
                    &json!("Web"),
                    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters",
                ),
            ],
        );
        assert_eq!(error.code(), 422);
        assert_eq!(
            error.to_string(),
            "Pod \"web\" is invalid: [spec.containers: Required value, metadata.name: Invalid value: \"Web\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters]"
        );
        let status = error.to_status();
        let causes = status.details.and_then(|d| d.causes).unwrap();
        assert_eq!(causes[0].reason.as_deref(), Some("FieldValueRequired"));
        assert_eq!(causes[0].field.as_deref(), Some("spec.containers"));
        assert_eq!(
            causes[1].message.as_deref(),
            Some(
                "Invalid value: \"Web\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"
            )
        );
        let one =
            ApiError::invalid("apps", "Deployment", "d", vec![FieldError::required("spec.selector", "")]);
        assert_eq!(one.to_string(), r#"Deployment.apps "d" is invalid: spec.selector: Required value"#);
        assert_eq!(one.to_status().details.and_then(|d| d.kind).as_deref(), Some("Deployment"));
    }

    #[test]
    fn codes_and_reasons() {
        let stale = ApiError::stale("", "configmaps", "c");
        assert_eq!((stale.code(), stale.reason()), (409, "Conflict"));
        assert_eq!(
            stale.to_string(),
            "Operation cannot be fulfilled on configmaps \"c\": the object has been modified; please apply your changes to the latest version and try again"
        );
        let expired = ApiError::Expired("too old resource version: 5 (10)".into());
        assert_eq!((expired.code(), expired.reason()), (410, "Expired"));
        assert_eq!(ApiError::RequestEntityTooLarge("limit is 3145728".into()).code(), 413);
        assert_eq!(ApiError::UnsupportedMediaType("x".into()).code(), 415);
        assert_eq!(ApiError::already_exists("", "namespaces", "a").reason(), "AlreadyExists");
    }
}
