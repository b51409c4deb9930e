//! Field validation of request bodies (`fieldValidation=Strict|Warn|Ignore`, Warn by default as in
//! kube-apiserver 1.27+): fields of the wrong type are always a BadRequest; unknown and duplicate
//! fields are refused (Strict), answered with `Warning` headers (Warn), or let through (Ignore).
//! Warnings are gathered in the request's [`Context`] and sent as `Warning: 299 - "..."` headers.

use keel_api::resources::Resource;
use keel_api::status::ApiError;
use keel_api::typed;
use serde_json::Value;

use crate::context::Context;

/// A patched object as its type holds it, its unknown fields handled as the patch request asked
/// (upstream checks the patched object, so unknown fields the patch brings are found; duplicate
/// keys are the patch body's and not looked for here).
pub fn check_patched(ctx: &Context, resource: &Resource, patched: &Value) -> Result<Value, ApiError> {
    check(ctx, resource, b"", patched, ctx.field_validation)
}

/// What the client asked for unknown and duplicate fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Strict,
    #[default]
    Warn,
    Ignore,
}

impl FieldValidation {
    pub fn parse(value: Option<&str>) -> Result<FieldValidation, ApiError> {
        match value {
            None | Some("" | "Warn") => Ok(FieldValidation::Warn),
            Some("Strict") => Ok(FieldValidation::Strict),
            Some("Ignore") => Ok(FieldValidation::Ignore),
            Some(other) => Err(ApiError::BadRequest(format!(
                "fieldValidation must be one of \"Ignore\", \"Warn\", or \"Strict\", got {other:?}"
            ))),
        }
    }
}

/// The object as its type holds it (unknown fields dropped, values in the type's form), or a
/// BadRequest naming what the type could not read. For a Secret the strings the decoder quotes are
/// left out of the message (`invalid type: string, expected a map`), as upstream's decoder never
/// shows them: the message reaches audit events at Metadata level, and no Secret value may.
pub fn typed(resource: &Resource, object: &Value) -> Result<Value, ApiError> {
    typed::round_trip(resource, object).map_err(|error| {
        let mut error = error.to_string();
        if resource.group.is_empty() && resource.plural == "secrets" {
            error = without_quoted_strings(&error);
        }
        ApiError::BadRequest(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {error}",
            kind = resource.kind,
            version = resource.version
        ))
    })
}

/// `invalid type: string "x", expected ...` as `invalid type: string, expected ...`: each
/// `string "..."` serde writes (Debug-quoted, so an inner quote is escaped) without its value.
fn without_quoted_strings(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("string \"") {
        out.push_str(&rest[..at + "string".len()]);
        let quoted = &rest[at + "string \"".len()..];
        let mut escaped = false;
        let end = quoted.char_indices().find_map(|(i, c)| {
            let closes = c == '"' && !escaped;
            escaped = c == '\\' && !escaped;
            closes.then_some(i)
        });
        match end {
            Some(end) => rest = &quoted[end + 1..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// Checks a body (`raw` as sent, `object` as parsed) against the resource's type; returns the
/// object as the type holds it, which is what gets stored.
pub fn check(
    ctx: &Context,
    resource: &Resource,
    raw: &[u8],
    object: &Value,
    mode: FieldValidation,
) -> Result<Value, ApiError> {
    let typed = typed(resource, object)?;
    if mode == FieldValidation::Ignore {
        return Ok(typed);
    }
    let mut problems: Vec<String> =
        typed::unknown_fields(object, &typed).into_iter().map(|f| format!("unknown field {f:?}")).collect();
    problems.extend(typed::duplicate_fields(raw).into_iter().map(|f| format!("duplicate field {f:?}")));
    if problems.is_empty() {
        return Ok(typed);
    }
    match mode {
        FieldValidation::Strict => {
            Err(ApiError::BadRequest(format!("strict decoding error: {}", problems.join(", "))))
        }
        _ => {
            for problem in problems {
                ctx.warn(problem);
            }
            Ok(typed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_decoding_errors_show_no_value() {
        let secrets = keel_api::resources::find("", "v1", "secrets").unwrap();
        let error = typed(secrets, &serde_json::json!({"data": "hunter2"})).unwrap_err();
        assert_eq!(
            error.to_string(),
            "Secret in version \"v1\" cannot be handled as a Secret: invalid type: string, expected a map"
        );
        assert_eq!(
            without_quoted_strings(r#"a string "x\"y" and string "z", then"#),
            "a string and string, then"
        );
        assert_eq!(without_quoted_strings(r#"cut string "open"#), "cut string");
        let config_maps = keel_api::resources::find("", "v1", "configmaps").unwrap();
        let error = typed(config_maps, &serde_json::json!({"data": "plain"})).unwrap_err();
        assert!(error.to_string().contains("string \"plain\""), "{error}");
    }
}
