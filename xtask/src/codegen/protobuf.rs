//! The protobuf table: every message of k8s-pb (Kubernetes' `generated.proto` files compiled by
//! prost) with its fields, and every group/version/kind with its message, for `keel_api::protobuf`'s
//! codec. Written to `control-plane/api/src/generated/protobuf.json`.
//!
//! Where the facts come from:
//! - the messages and their fields (tag, scalar type or message, optional / repeated / map) from
//!   k8s-pb's generated sources, parsed with `syn` (located with `cargo metadata`, so the version in
//!   Cargo.lock is the one read);
//! - the JSON name of each field from the kubernetes-validate definition of the same type: a proto
//!   field is named as the JSON field upstream (go-to-protobuf takes the json tag), prost snake-cases
//!   it (`volumeID` → `volume_id`), so the definition's property that compares equal ignoring case and
//!   punctuation is the name (`$ref` → `ref`, `x-kubernetes-list-type` → `x_kubernetes_list_type`);
//!   messages without a definition (runtime.Unknown, meta.k8s.io PartialObjectMetadata, ...) take
//!   the lowerCamelCase of the snake_case name, which is what prost started from;
//! - the kinds from the definitions' `x-kubernetes-group-version-kind`, plus meta.k8s.io's
//!   PartialObjectMetadata(List), which the definitions leave out.
//!
//! Messages whose JSON form upstream writes by hand (a `MarshalJSON` of their own) are marked
//! `special` with the name the codec dispatches on; [`SPECIAL`] lists them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

/// Messages with their own JSON form upstream (lower-cased proto name → the codec's name for it).
const SPECIAL: &[(&str, &str)] = &[
    ("k8s.io.apimachinery.pkg.apis.meta.v1.time", "Time"),
    ("k8s.io.apimachinery.pkg.apis.meta.v1.microtime", "MicroTime"),
    ("k8s.io.apimachinery.pkg.apis.meta.v1.duration", "Duration"),
    ("k8s.io.apimachinery.pkg.apis.meta.v1.fieldsv1", "FieldsV1"),
    ("k8s.io.apimachinery.pkg.util.intstr.intorstring", "IntOrString"),
    ("k8s.io.apimachinery.pkg.api.resource.quantity", "Quantity"),
    ("k8s.io.apimachinery.pkg.runtime.rawextension", "RawExtension"),
    ("k8s.io.apiextensions-apiserver.pkg.apis.apiextensions.v1.json", "JSON"),
    ("k8s.io.apiextensions-apiserver.pkg.apis.apiextensions.v1beta1.json", "JSON"),
    (
        "k8s.io.apiextensions-apiserver.pkg.apis.apiextensions.v1.jsonschemapropsorarray",
        "JSONSchemaPropsOrArray",
    ),
    (
        "k8s.io.apiextensions-apiserver.pkg.apis.apiextensions.v1beta1.jsonschemapropsorarray",
        "JSONSchemaPropsOrArray",
    ),
    (
        "k8s.io.apiextensions-apiserver.pkg.apis.apiextensions.v1.jsonschemapropsorbool",
        "JSONSchemaPropsOrBool",
    ),
    (
        "k8s.io.apiextensions-apiserver.pkg.apis.apiextensions.v1beta1.jsonschemapropsorbool",
        "JSONSchemaPropsOrBool",
    ),
    (
        "k8s.io.apiextensions-apiserver.pkg.apis.apiextensions.v1.jsonschemapropsorstringarray",
        "JSONSchemaPropsOrStringArray",
    ),
    (
        "k8s.io.apiextensions-apiserver.pkg.apis.apiextensions.v1beta1.jsonschemapropsorstringarray",
        "JSONSchemaPropsOrStringArray",
    ),
];

/// One field of a message as parsed from prost's attributes.
#[derive(Debug)]
struct Field {
    tag: u32,
    /// prost's snake_case name (without `r#`).
    name: String,
    /// `string`, `bytes`, `int32`, `int64`, `bool`, `double`, or the full name of a message.
    kind: String,
    /// `optional`, `repeated` or `map` (string keys).
    label: &'static str,
}

/// Every message of k8s-pb: full proto name (prost's spelling) → fields.
type Messages = BTreeMap<String, Vec<Field>>;

/// Builds the table from k8s-pb's sources and the kubernetes-validate definitions.
pub fn table(definitions: &Map<String, Value>, source: &str) -> Result<Value> {
    let (k8s_pb, version) = k8s_pb_sources()?;
    let mut messages = Messages::new();
    read_dir(&k8s_pb, &k8s_pb, &mut messages)?;
    // Definitions by lower-cased proto name: prost re-cases message names (AWSElastic… →
    // AwsElastic…), the definitions keep upstream's.
    let by_lower: BTreeMap<String, &String> =
        definitions.keys().filter_map(|name| Some((proto_name(name)?.to_lowercase(), name))).collect();
    let lookup = |message: &str| by_lower.get(&message.to_lowercase()).copied();
    // Upstream's spelling of each message name where a definition has it.
    let spelled =
        |message: &str| lookup(message).and_then(|d| proto_name(d)).unwrap_or_else(|| message.into());
    let properties_of = |message: &str| {
        lookup(message)
            .and_then(|name| definitions.get(name))
            .and_then(|d| d.get("properties"))
            .and_then(Value::as_object)
    };
    let squashed = |properties: &Map<String, Value>| properties.keys().map(|k| squash(k)).collect::<Vec<_>>();
    // A Go struct embedded with `json:",inline"` (a Volume's VolumeSource, a Probe's ProbeHandler)
    // is a field of its own in protobuf and its fields are the parent's in JSON. OpenAPI has no
    // definition of most of them: such a message takes its JSON names from its parent's.
    let mut inline: BTreeMap<(String, u32), ()> = BTreeMap::new();
    let mut inherited: BTreeMap<String, &Map<String, Value>> = BTreeMap::new();
    for (message, fields) in &messages {
        let Some(parent) = properties_of(message) else { continue };
        let parent_names = squashed(parent);
        for field in
            fields.iter().filter(|f| f.kind.contains('.') && !parent_names.contains(&squash(&f.name)))
        {
            let child_names = match properties_of(&field.kind) {
                Some(child) => squashed(child),
                None => messages
                    .get(&field.kind)
                    .map_or_else(Vec::new, |c| c.iter().map(|f| squash(&f.name)).collect()),
            };
            if !child_names.is_empty() && child_names.iter().all(|n| parent_names.contains(n)) {
                inline.insert((message.clone(), field.tag), ());
                if properties_of(&field.kind).is_none() {
                    inherited.insert(field.kind.clone(), parent);
                }
            }
        }
    }
    let mut out = Map::new();
    for (message, fields) in &messages {
        let definition = lookup(message).and_then(|name| definitions.get(name));
        let properties = properties_of(message).or_else(|| inherited.get(message).copied());
        let required: Vec<&str> = definition
            .and_then(|d| d.get("required"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let mut rows = Vec::new();
        for field in fields {
            let json_name = properties
                .and_then(|p| p.keys().find(|k| squash(k) == squash(&field.name)))
                .cloned()
                .unwrap_or_else(|| lower_camel(&field.name));
            let kind = if field.kind.contains('.') { spelled(&field.kind) } else { field.kind.clone() };
            // [tag, JSON name, type, flags...]: `repeated`, `map` (optional is the default),
            // `required` (upstream's JSON writes the field even when empty), `inline`.
            let mut row = vec![json!(field.tag), json!(json_name), json!(kind)];
            if field.label != "optional" {
                row.push(json!(field.label));
            }
            if required.contains(&json_name.as_str()) {
                row.push(json!("required"));
            }
            if inline.contains_key(&(message.clone(), field.tag)) {
                row.push(json!("inline"));
            }
            rows.push(Value::Array(row));
        }
        let mut entry = Map::new();
        entry.insert("fields".into(), Value::Array(rows));
        if let Some((_, special)) = SPECIAL.iter().find(|(name, _)| *name == message.to_lowercase()) {
            entry.insert("special".into(), json!(special));
        } else if definition.is_none() && is_string_list(fields) {
            // Named string slices (authentication's ExtraValue, meta's Verbs): a JSON array upstream.
            entry.insert("special".into(), json!("StringList"));
        }
        out.insert(spelled(message), Value::Object(entry));
    }
    let mut kinds = BTreeMap::new();
    for (name, definition) in definitions {
        let Some(message) = proto_name(name).filter(|m| out.contains_key(m)) else { continue };
        for gvk in
            definition.get("x-kubernetes-group-version-kind").and_then(Value::as_array).into_iter().flatten()
        {
            let field = |f: &str| gvk.get(f).and_then(Value::as_str).unwrap_or_default();
            kinds.insert(gvk_key(field("group"), field("version"), field("kind")), message.clone());
        }
    }
    // Metadata-only reads (not in the definitions): v1beta1 lists share v1's item type.
    let meta = "k8s.io.apimachinery.pkg.apis.meta";
    for (version, kind) in [
        ("v1", "PartialObjectMetadata"),
        ("v1", "PartialObjectMetadataList"),
        ("v1beta1", "PartialObjectMetadataList"),
    ] {
        kinds.insert(gvk_key("meta.k8s.io", version, kind), format!("{meta}.{version}.{kind}"));
    }
    kinds.insert(
        gvk_key("meta.k8s.io", "v1beta1", "PartialObjectMetadata"),
        format!("{meta}.v1.PartialObjectMetadata"),
    );
    // Options clients send as meta.k8s.io/v1 (client-go's metadata and dynamic clients).
    kinds.insert(gvk_key("meta.k8s.io", "v1", "DeleteOptions"), format!("{meta}.v1.DeleteOptions"));
    for message in kinds.values() {
        if !out.contains_key(message) {
            bail!("kind message {message} is not in k8s-pb");
        }
    }
    Ok(json!({"source": format!("k8s-pb {version}, {source}"), "kinds": kinds, "messages": out}))
}

fn gvk_key(group: &str, version: &str, kind: &str) -> String {
    if group.is_empty() { format!("{version}/{kind}") } else { format!("{group}/{version}/{kind}") }
}

/// A definition's name as a proto message name: `io.k8s.api.core.v1.Pod` → `k8s.io.api.core.v1.Pod`.
fn proto_name(definition: &str) -> Option<String> {
    definition.strip_prefix("io.k8s.").map(|rest| format!("k8s.io.{rest}"))
}

/// A name with case and punctuation ignored, to compare a JSON name with prost's snake_case.
fn squash(name: &str) -> String {
    name.chars().filter(char::is_ascii_alphanumeric).map(|c| c.to_ascii_lowercase()).collect()
}

/// `foo_bar` → `fooBar`, as the proto name prost snake-cased.
fn lower_camel(name: &str) -> String {
    let mut out = String::new();
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn is_string_list(fields: &[Field]) -> bool {
    matches!(fields, [f] if f.name == "items" && f.kind == "string" && f.label == "repeated")
}

/// k8s-pb's `src` directory and version, from `cargo metadata` (it is keel-api's dev-dependency).
fn k8s_pb_sources() -> Result<(PathBuf, String)> {
    let output = crate::util::cargo()
        .args(["metadata", "--format-version", "1", "--locked"])
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!("cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let metadata: Value = serde_json::from_slice(&output.stdout).context("reading cargo metadata")?;
    let package = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "k8s-pb")
        .context("k8s-pb is not in the workspace's dependencies")?;
    let manifest = PathBuf::from(package["manifest_path"].as_str().context("no manifest_path")?);
    let version = package["version"].as_str().unwrap_or_default().to_owned();
    Ok((manifest.parent().context("manifest without a directory")?.join("src"), version))
}

/// Reads every `mod.rs` under `dir` (each is one proto package).
fn read_dir(root: &Path, dir: &Path, messages: &mut Messages) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<std::io::Result<_>>()?;
    entries.sort_by_key(std::fs::DirEntry::path);
    for entry in entries {
        let path = entry.path();
        if path.is_dir() {
            read_dir(root, &path, messages)?;
        } else if path.file_name().is_some_and(|n| n == "mod.rs") {
            let module: Vec<String> = path
                .parent()
                .and_then(|p| p.strip_prefix(root).ok())
                .context("a module outside k8s-pb")?
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            let text = std::fs::read_to_string(&path)?;
            let file = syn::parse_file(&text).with_context(|| format!("parsing {}", path.display()))?;
            read_file(&module, &file, messages).with_context(|| format!("reading {}", path.display()))?;
        }
    }
    Ok(())
}

/// A module path of k8s-pb as a proto package: `api/core/v1` → `k8s.io.api.core.v1`; the first
/// segment names the upstream repository (`apiextensions_apiserver` → `apiextensions-apiserver`).
fn package(module: &[String]) -> String {
    let mut parts = vec!["k8s.io".to_owned()];
    for (i, part) in module.iter().enumerate() {
        parts.push(if i == 0 { part.replace('_', "-") } else { part.clone() });
    }
    parts.join(".")
}

fn read_file(module: &[String], file: &syn::File, messages: &mut Messages) -> Result<()> {
    for item in &file.items {
        let syn::Item::Struct(item) = item else { continue };
        let is_message = item.attrs.iter().any(|a| {
            a.path().is_ident("derive")
                && a.meta.require_list().is_ok_and(|l| l.tokens.to_string().contains("Message"))
        });
        if !is_message {
            continue;
        }
        let mut fields = Vec::new();
        for field in &item.fields {
            let Some(attr) = field.attrs.iter().find(|a| a.path().is_ident("prost")) else { continue };
            let name = field.ident.as_ref().context("a tuple field")?.to_string();
            let name = name.trim_start_matches("r#").to_owned();
            let mut tag = None;
            let mut kind = None;
            let mut label = "optional";
            attr.parse_nested_meta(|meta| {
                let ident = meta.path.get_ident().map(ToString::to_string).unwrap_or_default();
                match ident.as_str() {
                    "tag" => tag = Some(meta.value()?.parse::<syn::LitStr>()?.value().parse().unwrap_or(0)),
                    "optional" | "boxed" => {}
                    "repeated" => label = "repeated",
                    "packed" => {
                        meta.value()?.parse::<syn::LitStr>()?;
                    }
                    "btree_map" | "map" | "hash_map" => {
                        let spec = meta.value()?.parse::<syn::LitStr>()?.value();
                        label = "map";
                        // The codec keeps map keys as JSON object keys, read and written as strings.
                        let key = spec.split(',').next().unwrap_or_default().trim();
                        if key != "string" {
                            return Err(
                                meta.error(format!("a map with {key} keys (only string keys are read)"))
                            );
                        }
                        let value = spec.split(',').nth(1).unwrap_or_default().trim().to_owned();
                        kind = Some(value);
                    }
                    "bytes" => {
                        meta.value()?.parse::<syn::LitStr>()?;
                        kind = Some("bytes".into());
                    }
                    other => kind = Some(other.to_owned()),
                }
                Ok(())
            })?;
            let mut kind = kind.with_context(|| format!("{}.{name}: no type", item.ident))?;
            if kind == "message" {
                kind = message_type(module, &field.ty)
                    .with_context(|| format!("{}.{name}: no message type", item.ident))?;
            }
            if !matches!(kind.as_str(), "string" | "bytes" | "int32" | "int64" | "bool" | "double")
                && !kind.contains('.')
            {
                bail!("{}.{name}: unexpected type {kind}", item.ident);
            }
            fields.push(Field { tag: tag.context("no tag")?, name, kind, label });
        }
        fields.sort_by_key(|f| f.tag);
        messages.insert(format!("{}.{}", package(module), item.ident), fields);
    }
    Ok(())
}

/// The message a field holds: the innermost path type of `Option<…>`, `Vec<…>`, `Box<…>` or a
/// map's value, resolved against the module (`super::` climbs one package segment).
fn message_type(module: &[String], ty: &syn::Type) -> Option<String> {
    let syn::Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if let syn::PathArguments::AngleBracketed(args) = &last.arguments {
        // The last type argument: Option<T>, Vec<T>, Box<T>, BTreeMap<K, V>.
        let inner = args.args.iter().rev().find_map(|a| match a {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        })?;
        return message_type(module, inner);
    }
    let mut base: Vec<String> = module.to_vec();
    let mut names = Vec::new();
    for segment in &path.path.segments {
        let ident = segment.ident.to_string();
        if ident == "super" {
            base.pop();
        } else {
            names.push(ident);
        }
    }
    let message = names.pop()?;
    base.extend(names);
    Some(format!("{}.{message}", package(&base)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_are_read_with_string_keys_only() {
        let source = |key: &str| {
            syn::parse_str::<syn::File>(&format!(
                "#[derive(Clone, PartialEq, ::prost::Message)]
                 pub struct Thing {{
                     #[prost(btree_map = \"{key}, string\", tag = \"1\")]
                     pub labels: ::std::collections::BTreeMap<{rust}, ::prost::alloc::string::String>,
                 }}",
                rust = if key == "string" { "String" } else { "i32" },
            ))
            .unwrap()
        };
        let mut messages = Messages::default();
        read_file(&["api".into(), "core".into(), "v1".into()], &source("string"), &mut messages).unwrap();
        assert_eq!(messages["k8s.io.api.core.v1.Thing"][0].label, "map");
        let error = read_file(&["api".into()], &source("int32"), &mut Messages::default()).unwrap_err();
        assert!(format!("{error:#}").contains("int32 keys"), "{error:#}");
    }
}
