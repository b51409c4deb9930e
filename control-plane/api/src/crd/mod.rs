//! CustomResourceDefinitions (apiextensions.k8s.io/v1), as apiextensions-apiserver 1.34 has them,
//! on CRDs as JSON values: defaulting ([`default`]), validation of a create and an update with
//! upstream's field paths and messages ([`validate`], [`validate_update`]; schemas must be
//! structural, [`schema`]), the names controller's decision ([`accepted_names`]) and what an
//! established CRD serves ([`definitions`], fed to [`crate::custom::serve`]). No IO.

pub mod openapi;
pub mod schema;

use serde_json::{Value, json};

use self::schema::{Schema, structural_errors};
use crate::custom::{Definition, PrinterColumn, ScalePaths};
use crate::status::FieldError;
use crate::validation::names::{dns1035_label, dns1123_subdomain};
use crate::validation::{child, immutable, index, invalid, invalid_str};

/// The finalizer a deleting CRD carries until its custom resources are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// `metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]`, the default Age column's description.
const CREATION_DOC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn strings(value: &Value, pointer: &str) -> Vec<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

fn versions(crd: &Value) -> &[Value] {
    crd.pointer("/spec/versions").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// upstream's SetDefaults for v1 CRDs: singular from the kind, listKind `<Kind>List`, conversion
/// None, and in each version's schema nothing (schemas are taken as written).
pub fn default(crd: &mut Value) {
    let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut) else { return };
    let names = spec.entry("names").or_insert_with(|| json!({}));
    let kind = names.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned();
    if !kind.is_empty() {
        if names.get("singular").and_then(Value::as_str).is_none_or(str::is_empty) {
            names["singular"] = kind.to_lowercase().into();
        }
        if names.get("listKind").and_then(Value::as_str).is_none_or(str::is_empty) {
            names["listKind"] = format!("{kind}List").into();
        }
    }
    if spec.get("conversion").is_none_or(Value::is_null) {
        spec.insert("conversion".into(), json!({"strategy": "None"}));
    }
}

/// The field errors of a CRD as created (after [`default`]).
pub fn validate(crd: &Value) -> Vec<FieldError> {
    let mut errors = crate::validation::meta::object_meta(crd);
    let name = text(crd, "/metadata/name");
    let (group, plural) = (text(crd, "/spec/group"), text(crd, "/spec/names/plural"));
    if name != format!("{plural}.{group}") {
        errors.push(invalid_str("metadata.name", name, "must be spec.names.plural+\".\"+spec.group"));
    }
    errors.extend(spec(crd));
    errors
}

/// The field errors of an update from `old` to `new`: [`validate`], and group and plural (always)
/// and scope and kind (once established) immutable.
pub fn validate_update(old: &Value, new: &Value) -> Vec<FieldError> {
    let mut errors = crate::validation::meta::object_meta_update(old, new);
    let name = text(new, "/metadata/name");
    let (group, plural) = (text(new, "/spec/group"), text(new, "/spec/names/plural"));
    if name != format!("{plural}.{group}") {
        errors.push(invalid_str("metadata.name", name, "must be spec.names.plural+\".\"+spec.group"));
    }
    errors.extend(spec(new));
    if condition_true(old, "Established") {
        errors.extend(immutable(new.pointer("/spec/scope"), old.pointer("/spec/scope"), "spec.scope"));
        errors.extend(immutable(
            new.pointer("/spec/names/kind"),
            old.pointer("/spec/names/kind"),
            "spec.names.kind",
        ));
    }
    // Objects stored in a version can only be read while it is listed (upstream's
    // ValidateCustomResourceDefinitionStoredVersions).
    let listed: Vec<&str> = versions(new).iter().map(|v| text(v, "/name")).collect();
    for (i, stored) in strings(new, "/status/storedVersions").iter().enumerate() {
        if !listed.contains(&stored.as_str()) {
            errors.push(invalid_str(
                &index("status.storedVersions", i),
                stored,
                "must appear in spec.versions",
            ));
        }
    }
    errors.extend(immutable(new.pointer("/spec/group"), old.pointer("/spec/group"), "spec.group"));
    errors.extend(immutable(
        new.pointer("/spec/names/plural"),
        old.pointer("/spec/names/plural"),
        "spec.names.plural",
    ));
    errors
}

/// Whether the CRD's condition `kind` is True.
pub fn condition_true(crd: &Value, kind: &str) -> bool {
    crd.pointer("/status/conditions").and_then(Value::as_array).into_iter().flatten().any(|c| {
        c.get("type").and_then(Value::as_str) == Some(kind)
            && c.get("status").and_then(Value::as_str) == Some("True")
    })
}

fn spec(crd: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let group = text(crd, "/spec/group");
    let group_problems = dns1123_subdomain(group);
    if group.is_empty() {
        errors.push(FieldError::required("spec.group", ""));
    } else if !group_problems.is_empty() {
        errors.push(invalid_str("spec.group", group, &group_problems.join(",")));
    } else if !group.contains('.') {
        errors.push(invalid_str("spec.group", group, "should be a domain with at least one dot"));
    }
    match text(crd, "/spec/scope") {
        "" => errors.push(FieldError::required("spec.scope", "")),
        "Cluster" | "Namespaced" => {}
        other => {
            errors.push(FieldError::not_supported("spec.scope", &other.into(), &["Cluster", "Namespaced"]));
        }
    }
    let versions = versions(crd);
    let shown = Value::Array(versions.to_vec());
    let mut storage = 0;
    let mut seen = Vec::new();
    let mut unique = true;
    for (i, version) in versions.iter().enumerate() {
        let path = index("spec.versions", i);
        let name = text(version, "/name");
        if version.get("storage").and_then(Value::as_bool) == Some(true) {
            storage += 1;
        }
        if seen.contains(&name) {
            unique = false;
        }
        seen.push(name);
        let problems = dns1035_label(name);
        if !problems.is_empty() {
            errors.push(invalid_str(&child(&path, "name"), name, &problems.join(",")));
        }
        errors.extend(version_errors(version, &path));
    }
    if !unique {
        errors.push(FieldError::invalid("spec.versions", &shown, "must contain unique version names"));
    }
    if storage != 1 {
        errors.push(FieldError::invalid(
            "spec.versions",
            &shown,
            "must have exactly one version marked as storage version",
        ));
    }
    for (field, value) in [
        ("plural", text(crd, "/spec/names/plural")),
        ("singular", text(crd, "/spec/names/singular")),
        ("kind", text(crd, "/spec/names/kind")),
        ("listKind", text(crd, "/spec/names/listKind")),
    ] {
        if value.is_empty() {
            errors.push(FieldError::required(&format!("spec.names.{field}"), ""));
        }
    }
    errors.extend(names(crd.pointer("/spec/names").unwrap_or(&Value::Null), "spec.names"));
    if crd.pointer("/spec/preserveUnknownFields") == Some(&Value::Bool(true)) {
        errors.push(FieldError::invalid(
            "spec.preserveUnknownFields",
            &Value::Bool(true),
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        ));
    }
    match text(crd, "/spec/conversion/strategy") {
        "" => errors.push(FieldError::required("spec.conversion.strategy", "")),
        "None" => {}
        "Webhook" => errors.push(FieldError::forbidden(
            "spec.conversion.strategy",
            "Webhook conversion is not supported by this server",
        )),
        other => errors.push(FieldError::not_supported(
            "spec.conversion.strategy",
            &other.into(),
            &["None", "Webhook"],
        )),
    }
    errors
}

/// upstream's ValidateCustomResourceDefinitionNames (of the spec, or of status.acceptedNames).
fn names(names: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for field in ["plural", "singular"] {
        let value = text(names, &format!("/{field}"));
        let problems = dns1035_label(value);
        if !value.is_empty() && !problems.is_empty() {
            errors.push(invalid_str(&child(path, field), value, &problems.join(",")));
        }
    }
    for field in ["kind", "listKind"] {
        let value = text(names, &format!("/{field}"));
        let problems = dns1035_label(&value.to_lowercase());
        if !value.is_empty() && !problems.is_empty() {
            errors.push(invalid_str(
                &child(path, field),
                value,
                &format!("may have mixed case, but should otherwise match: {}", problems.join(",")),
            ));
        }
    }
    for (i, short) in strings(names, "/shortNames").iter().enumerate() {
        let problems = dns1035_label(short);
        if !problems.is_empty() {
            errors.push(invalid_str(&index(&child(path, "shortNames"), i), short, &problems.join(",")));
        }
    }
    let kind = text(names, "/kind");
    if !kind.is_empty() && kind == text(names, "/listKind") {
        errors.push(invalid_str(&child(path, "listKind"), kind, "kind and listKind may not be the same"));
    }
    for (i, category) in strings(names, "/categories").iter().enumerate() {
        let problems = dns1035_label(category);
        if !problems.is_empty() {
            errors.push(invalid_str(&index(&child(path, "categories"), i), category, &problems.join(",")));
        }
    }
    errors
}

/// One version: its schema (required in v1, structural), subresources and printer columns.
fn version_errors(version: &Value, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let schema_path = child(&child(path, "schema"), "openAPIV3Schema");
    match version.pointer("/schema/openAPIV3Schema").filter(|s| s.is_object()) {
        None => errors.push(FieldError::required(&schema_path, "schemas are required")),
        Some(raw) => match Schema::parse(raw, &schema_path) {
            Err(problems) => errors.extend(problems),
            Ok(schema) => {
                errors.extend(structural_errors(&schema, &schema_path));
                errors.extend(defaults_errors(&schema, &schema_path));
            }
        },
    }
    if let Some(scale) = version.pointer("/subresources/scale").filter(|s| s.is_object()) {
        let scale_path = child(&child(path, "subresources"), "scale");
        let spec_path = text(scale, "/specReplicasPath");
        if spec_path.is_empty() {
            errors.push(FieldError::required(&child(&scale_path, "specReplicasPath"), ""));
        } else if !is_simple_path(spec_path) || !spec_path.starts_with(".spec.") {
            errors.push(invalid_str(
                &child(&scale_path, "specReplicasPath"),
                spec_path,
                "should be a json path under .spec",
            ));
        }
        let status_path = text(scale, "/statusReplicasPath");
        if status_path.is_empty() {
            errors.push(FieldError::required(&child(&scale_path, "statusReplicasPath"), ""));
        } else if !is_simple_path(status_path) || !status_path.starts_with(".status.") {
            errors.push(invalid_str(
                &child(&scale_path, "statusReplicasPath"),
                status_path,
                "should be a json path under .status",
            ));
        }
        let selector = text(scale, "/labelSelectorPath");
        if !selector.is_empty()
            && (!is_simple_path(selector)
                || !(selector.starts_with(".spec.") || selector.starts_with(".status.")))
        {
            errors.push(invalid_str(
                &child(&scale_path, "labelSelectorPath"),
                selector,
                "should be a json path under either .spec or .status",
            ));
        }
    }
    let schema = version.pointer("/schema/openAPIV3Schema").and_then(|raw| Schema::parse(raw, "").ok());
    let selectable =
        version.get("selectableFields").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if selectable.len() > 8 {
        errors.push(FieldError {
            field: child(path, "selectableFields"),
            kind: crate::status::FieldErrorKind::TooMany,
            detail: format!("{}: must have at most 8 items", selectable.len()),
        });
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, field) in selectable.iter().enumerate() {
        let at = child(&index(&child(path, "selectableFields"), i), "jsonPath");
        let json_path = text(field, "/jsonPath");
        if json_path.is_empty() {
            errors.push(FieldError::required(&at, ""));
            continue;
        }
        if !is_simple_path(json_path) {
            errors.push(invalid_str(&at, json_path, "must be a simple json path starting with ."));
            continue;
        }
        if seen.contains(&json_path) {
            errors.push(FieldError::duplicate(&at, &json_path.into()));
        }
        seen.push(json_path);
        match schema.as_ref().and_then(|s| s.at_path(json_path)) {
            None => errors.push(invalid_str(
                &at,
                json_path,
                "is an invalid path: does not refer to a field in the schema",
            )),
            Some(node) if !matches!(node.kind.as_str(), "string" | "integer" | "boolean") => errors.push(
                invalid_str(&at, json_path, "must point to a field of type string, boolean or integer"),
            ),
            Some(_) => {}
        }
    }
    let columns = version.get("additionalPrinterColumns").and_then(Value::as_array).into_iter().flatten();
    for (i, column) in columns.enumerate() {
        let at = index(&child(path, "additionalPrinterColumns"), i);
        if text(column, "/name").is_empty() {
            errors.push(FieldError::required(&child(&at, "name"), ""));
        }
        match text(column, "/type") {
            "" => errors.push(FieldError::required(&child(&at, "type"), "")),
            "integer" | "number" | "string" | "boolean" | "date" => {}
            other => errors.push(FieldError::not_supported(
                &child(&at, "type"),
                &other.into(),
                &["integer", "number", "string", "boolean", "date"],
            )),
        }
        let format = text(column, "/format");
        if !format.is_empty()
            && !matches!(
                format,
                "int32" | "int64" | "float" | "double" | "byte" | "date" | "date-time" | "password"
            )
        {
            errors.push(FieldError::not_supported(
                &child(&at, "format"),
                &format.into(),
                &["int32", "int64", "float", "double", "byte", "date", "date-time", "password"],
            ));
        }
        let json_path = text(column, "/jsonPath");
        if json_path.is_empty() {
            errors.push(FieldError::required(&child(&at, "JSONPath"), ""));
        } else if !is_simple_path(json_path) {
            errors.push(invalid_str(
                &child(&at, "JSONPath"),
                json_path,
                "must be a simple json path starting with .",
            ));
        }
    }
    errors
}

/// A default must be valid against its own schema (upstream validates defaults, pruned, as values).
fn defaults_errors(schema: &Schema, path: &str) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (name, property) in &schema.properties {
        let at = crate::validation::key(&child(path, "properties"), name);
        if let Some(default) = &property.default {
            let mut found = Vec::new();
            property.validate(default, "", &mut found);
            for error in found {
                errors.push(invalid(&child(&at, "default"), default, &error.message()));
            }
        }
        errors.extend(defaults_errors(property, &at));
    }
    if let Some(items) = &schema.items {
        errors.extend(defaults_errors(items, &child(path, "items")));
    }
    errors
}

/// A simple JSON path: `.a.b.c` (upstream's validateSimpleJSONPath allows bracketed keys too;
/// those are not taken here).
fn is_simple_path(path: &str) -> bool {
    path.starts_with('.')
        && path[1..].split('.').all(|part| {
            !part.is_empty()
                && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '$'))
        })
}

/// The names a CRD asks for (`spec.names`) and what other CRDs of its group have accepted:
/// upstream's naming controller. Each name asked for is accepted unless another CRD of the group
/// holds it (plural, singular and short names among resources; kind and listKind among kinds); a
/// name held elsewhere keeps the value accepted before, and the first conflict is the
/// NamesAccepted False condition's reason and message.
pub fn accepted_names(crd: &Value, others: &[Value]) -> (Value, Option<(&'static str, String)>) {
    let group = text(crd, "/spec/group");
    let asked = crd.pointer("/spec/names").cloned().unwrap_or_else(|| json!({}));
    let mut accepted = crd.pointer("/status/acceptedNames").cloned().unwrap_or_else(|| json!({}));
    let (mut resources, mut kinds) = (Vec::new(), Vec::new());
    for other in others.iter().filter(|o| {
        text(o, "/spec/group") == group && text(o, "/metadata/name") != text(crd, "/metadata/name")
    }) {
        let names = other.pointer("/status/acceptedNames").unwrap_or(&Value::Null);
        resources.extend(
            [text(names, "/plural"), text(names, "/singular")]
                .into_iter()
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
        );
        resources.extend(strings(names, "/shortNames"));
        kinds.extend(
            [text(names, "/kind"), text(names, "/listKind")]
                .into_iter()
                .filter(|n| !n.is_empty())
                .map(str::to_owned),
        );
    }
    let mut conflict = None;
    for (field, reason, taken) in [
        ("plural", "PluralConflict", &resources),
        ("singular", "SingularConflict", &resources),
        ("kind", "KindConflict", &kinds),
        ("listKind", "ListKindConflict", &kinds),
    ] {
        let name = text(&asked, &format!("/{field}"));
        if taken.iter().any(|t| t == name) {
            conflict.get_or_insert((reason, format!("{name:?} is already in use")));
        } else {
            accepted[field] = name.into();
        }
    }
    let shorts = strings(&asked, "/shortNames");
    match shorts.iter().find(|s| resources.contains(s)) {
        Some(short) => {
            conflict.get_or_insert(("ShortNamesConflict", format!("{short:?} is already in use")));
        }
        None => accepted["shortNames"] = json!(shorts),
    }
    // Categories are never in conflict.
    accepted["categories"] = json!(strings(&asked, "/categories"));
    if let Value::Object(map) = &mut accepted {
        map.retain(|_, v| !(v.as_array().is_some_and(Vec::is_empty)));
    }
    (accepted, conflict)
}

/// What an established CRD serves: one definition per served version, named by
/// `status.acceptedNames` (as upstream serves the accepted names, not the asked ones).
pub fn definitions(crd: &Value) -> Vec<Definition> {
    let group = text(crd, "/spec/group").to_owned();
    let names = crd.pointer("/status/acceptedNames").unwrap_or(&Value::Null);
    let namespaced = text(crd, "/spec/scope") == "Namespaced";
    let mut out = Vec::new();
    for version in versions(crd).iter().filter(|v| v.get("served").and_then(Value::as_bool) == Some(true)) {
        let name = text(version, "/name").to_owned();
        let schema = version
            .pointer("/schema/openAPIV3Schema")
            .and_then(|raw| Schema::parse(raw, "").ok())
            .unwrap_or_default();
        let mut columns: Vec<PrinterColumn> = version
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| PrinterColumn {
                name: text(c, "/name").to_owned(),
                kind: text(c, "/type").to_owned(),
                format: text(c, "/format").to_owned(),
                description: text(c, "/description").to_owned(),
                priority: c
                    .get("priority")
                    .and_then(Value::as_i64)
                    .and_then(|p| i32::try_from(p).ok())
                    .unwrap_or(0),
                json_path: text(c, "/jsonPath").to_owned(),
            })
            .collect();
        // upstream's serveDefaultColumnsIfEmpty: an Age column when none is declared.
        if columns.is_empty() {
            columns.push(PrinterColumn {
                name: "Age".into(),
                kind: "date".into(),
                format: String::new(),
                description: CREATION_DOC.into(),
                priority: 0,
                json_path: ".metadata.creationTimestamp".into(),
            });
        }
        let scale = version.pointer("/subresources/scale").filter(|s| s.is_object()).map(|s| ScalePaths {
            spec_replicas: text(s, "/specReplicasPath").to_owned(),
            status_replicas: text(s, "/statusReplicasPath").to_owned(),
            label_selector: Some(text(s, "/labelSelectorPath").to_owned()).filter(|p| !p.is_empty()),
        });
        out.push(Definition {
            group: group.clone(),
            version: name,
            kind: text(names, "/kind").to_owned(),
            list_kind: text(names, "/listKind").to_owned(),
            storage_version: storage_version(crd).unwrap_or_default().to_owned(),
            openapi_schema: version.pointer("/schema/openAPIV3Schema").cloned().unwrap_or(Value::Null),
            plural: text(names, "/plural").to_owned(),
            singular: text(names, "/singular").to_owned(),
            namespaced,
            short_names: strings(names, "/shortNames"),
            categories: strings(names, "/categories"),
            schema,
            columns,
            status: version.pointer("/subresources/status").is_some_and(Value::is_object),
            scale,
            selectable_fields: version
                .get("selectableFields")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|f| text(f, "/jsonPath").trim_start_matches('.').to_owned())
                .collect(),
        });
    }
    out
}

/// The storage version's name.
pub fn storage_version(crd: &Value) -> Option<&str> {
    versions(crd)
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name").and_then(Value::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        let mut crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.test.keel.dev"},
            "spec": {"group": "test.keel.dev", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
                        "properties": {"size": {"type": "integer", "default": 1}}}}}},
                    "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}}}]}
        });
        default(&mut crd);
        crd
    }

    fn messages(errors: &[FieldError]) -> Vec<String> {
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_valid_crd() {
        let crd = crd();
        assert_eq!(crd["spec"]["names"]["singular"], "widget");
        assert_eq!(crd["spec"]["names"]["listKind"], "WidgetList");
        assert!(validate(&crd).is_empty(), "{:?}", messages(&validate(&crd)));
    }

    #[test]
    fn invalid_crds() {
        let mut bad = crd();
        bad["metadata"]["name"] = "other.test.keel.dev".into();
        bad["spec"]["versions"][0]["storage"] = false.into();
        bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["x"] =
            json!({"properties": {"a": {"type": "string"}}});
        bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"]
            ["default"] = "one".into();
        bad["spec"]["group"] = "nodot".into();
        let found = messages(&validate(&bad));
        assert!(found.contains(&"metadata.name: Invalid value: \"other.test.keel.dev\": must be spec.names.plural+\".\"+spec.group".to_owned()), "{found:?}");
        assert!(found.contains(
            &"spec.group: Invalid value: \"nodot\": should be a domain with at least one dot".to_owned()
        ));
        assert!(found.contains(&"spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[x].type: Required value: must not be empty for specified object fields".to_owned()), "{found:?}");
        assert!(found.iter().any(|m| m.ends_with("must have exactly one version marked as storage version")));
        assert!(found.iter().any(|m| m.starts_with("spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[size].default: Invalid value: \"one\"")), "{found:?}");
    }

    #[test]
    fn updates() {
        let mut old = crd();
        old["status"] =
            json!({"storedVersions": ["v1"], "conditions": [{"type": "Established", "status": "True"}]});
        let mut new = old.clone();
        new["spec"]["versions"][0]["name"] = "v2".into();
        new["spec"]["scope"] = "Cluster".into();
        let found = messages(&validate_update(&old, &new));
        assert!(
            found.contains(
                &"status.storedVersions[0]: Invalid value: \"v1\": must appear in spec.versions".to_owned()
            ),
            "{found:?}"
        );
        assert!(
            found.contains(&"spec.scope: Invalid value: \"Cluster\": field is immutable".to_owned()),
            "{found:?}"
        );
        assert!(validate_update(&old, &old).is_empty());
    }

    #[test]
    fn names_and_definitions() {
        let mut crd = crd();
        let (names, conflict) = accepted_names(&crd, &[]);
        assert!(conflict.is_none());
        crd["status"] = json!({"acceptedNames": names});
        let mut other = crd.clone();
        other["metadata"]["name"] = "gadgets.test.keel.dev".into();
        other["spec"]["names"] = json!({"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList", "shortNames": ["wd"]});
        other["status"] = json!({});
        let (_, conflict) = accepted_names(&other, &[crd.clone()]);
        assert_eq!(conflict, Some(("ShortNamesConflict", "\"wd\" is already in use".to_owned())));
        let served = definitions(&crd);
        assert_eq!(served.len(), 1);
        assert_eq!(
            (served[0].plural.as_str(), served[0].status, served[0].columns[0].name.as_str()),
            ("widgets", true, "Age")
        );
        assert_eq!(served[0].scale.as_ref().unwrap().spec_replicas, ".spec.size");
    }
}
