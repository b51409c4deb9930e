//! `cargo xtask codegen`: what the API server needs of the Kubernetes OpenAPI definitions, generated
//! from the `kubernetes-validate` PyPI package (its JSON schema of each Kubernetes version carries
//! every x-kubernetes extension; k8s-openapi's schemas do not). Writes
//! `control-plane/api/src/generated/patch_meta.json`, committed with the command that made it:
//!
//! - `kinds`: `group/version/Kind` (`v1/Pod` for core) → the definition of that kind;
//! - `types`: for every definition reachable from a kind, its properties that lead to another
//!   definition (`ref`, list `items`, map `values`) or carry patch metadata (`strategy`, `key`,
//!   `listType`, `mapKeys`).
//!
//! `control-plane/api/src/generated/openapi_schemas.json`, the OpenAPI schemas the server serves
//! ([`openapi`]), and `control-plane/api/src/generated/protobuf.json`, the protobuf codec's table
//! ([`protobuf`]).

mod openapi;
mod protobuf;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Map, Value, json};

/// The package and the schema of the Kubernetes version Keel serves.
const PACKAGE: &str = "kubernetes-validate==1.37.0";
const SCHEMA: &str = "v1.34.0-local";

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: &Args) -> Result<()> {
    let root = crate::util::workspace_root();
    let definitions = definitions(&root)?;
    let source = format!("{PACKAGE} {SCHEMA}");
    write(&root, "patch_meta.json", &patch_meta(&definitions)?)?;
    write(&root, "openapi_schemas.json", &openapi::schemas(&definitions, &source)?)?;
    write(&root, "protobuf.json", &protobuf::table(&definitions, &source)?)?;
    Ok(())
}

/// Writes `value` as compact JSON to `control-plane/api/src/generated/<name>`.
fn write(root: &Path, name: &str, value: &Value) -> Result<()> {
    let out = root.join("control-plane/api/src/generated").join(name);
    std::fs::create_dir_all(out.parent().context("no parent")?)?;
    let mut text = serde_json::to_string(value)?;
    text.push('\n');
    std::fs::write(&out, text).with_context(|| format!("writing {}", out.display()))?;
    println!("wrote {} ({PACKAGE}, {SCHEMA})", out.display());
    Ok(())
}

/// The `$defs` of the schema, from the package installed into the project's Python virtualenv.
fn definitions(root: &Path) -> Result<Map<String, Value>> {
    let python = keel_testbed::python::ensure()?;
    let status = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", PACKAGE])
        .status()
        .context("running pip")?;
    if !status.success() {
        bail!("pip install {PACKAGE} failed: {status}");
    }
    let output = Command::new(&python)
        .args(["-c", "import kubernetes_validate, os; print(os.path.dirname(kubernetes_validate.__file__))"])
        .current_dir(root)
        .output()
        .context("locating kubernetes_validate")?;
    let package = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    let path = package.join("kubernetes-json-schema").join(SCHEMA).join("_definitions.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut schema: Value = serde_json::from_str(&text)?;
    match schema.get_mut("$defs").map(Value::take) {
        Some(Value::Object(definitions)) => Ok(definitions),
        _ => bail!("{} has no $defs", path.display()),
    }
}

/// The definition a schema refers to: `$ref`, or the one `allOf` entry holding it.
fn reference(schema: &Value) -> Option<String> {
    let direct = schema.get("$ref").and_then(Value::as_str);
    let wrapped = || schema.get("allOf")?.as_array()?.iter().find_map(|s| s.get("$ref")?.as_str());
    direct.or_else(wrapped).map(|r| r.trim_start_matches("#/$defs/").to_owned())
}

fn patch_meta(definitions: &Map<String, Value>) -> Result<Value> {
    let mut kinds = BTreeMap::new();
    for (name, definition) in definitions {
        for gvk in
            definition.get("x-kubernetes-group-version-kind").and_then(Value::as_array).into_iter().flatten()
        {
            let field = |f: &str| gvk.get(f).and_then(Value::as_str).unwrap_or_default();
            let (group, version, kind) = (field("group"), field("version"), field("kind"));
            let key = if group.is_empty() {
                format!("{version}/{kind}")
            } else {
                format!("{group}/{version}/{kind}")
            };
            kinds.insert(key, name.clone());
        }
    }
    // Every definition reachable from a kind.
    let mut types = BTreeMap::new();
    let mut pending: Vec<String> = kinds.values().cloned().collect();
    let mut seen: BTreeSet<String> = pending.iter().cloned().collect();
    while let Some(name) = pending.pop() {
        let Some(definition) = definitions.get(&name) else { continue };
        let mut fields = Map::new();
        for (property, schema) in
            definition.get("properties").and_then(Value::as_object).into_iter().flatten()
        {
            let mut entry = Map::new();
            if let Some(target) = reference(schema) {
                entry.insert("ref".into(), target.into());
            }
            if let Some(target) = schema.get("items").and_then(reference) {
                entry.insert("items".into(), target.into());
            }
            if let Some(target) = schema.get("additionalProperties").and_then(reference) {
                entry.insert("values".into(), target.into());
            }
            for (extension, short) in [
                ("x-kubernetes-patch-strategy", "strategy"),
                ("x-kubernetes-patch-merge-key", "key"),
                ("x-kubernetes-list-type", "listType"),
                ("x-kubernetes-list-map-keys", "mapKeys"),
            ] {
                if let Some(value) = schema.get(extension) {
                    entry.insert(short.into(), value.clone());
                }
            }
            for key in ["ref", "items", "values"] {
                if let Some(target) = entry.get(key).and_then(Value::as_str)
                    && seen.insert(target.to_owned())
                {
                    pending.push(target.to_owned());
                }
            }
            if !entry.is_empty() {
                fields.insert(property.clone(), Value::Object(entry));
            }
        }
        if !fields.is_empty() {
            types.insert(name, Value::Object(fields));
        }
    }
    Ok(json!({"source": format!("{PACKAGE} {SCHEMA}"), "kinds": kinds, "types": types}))
}
