//! The custom resources served now: what the established CustomResourceDefinitions define, one
//! [`CustomVersion`] per served version, changed at run time by the apiserver's CRD controller
//! ([`serve`], [`stop`]) and read by routing, discovery, validation, tables and strategies.
//!
//! Every other part of keel-api and keel-apiserver takes a `&'static Resource`. Custom resources
//! keep that: each distinct [`Resource`] (names, scope, verbs, subresources) is interned once and
//! leaked, so its memory is bounded by the number of distinct definitions ever served by the
//! process — a CRD served, changed and served again as before reuses its interned value — while
//! the parts that change freely (schemas, printer columns) live in reference-counted
//! [`CustomVersion`]s that are dropped when replaced. Owned strings throughout would have meant a
//! lifetime or an `Arc` in every request, table and cache path for the sake of a handful of values.
//!
//! The registry is process-wide: one process serves one cluster's API (a second server started in
//! the same process on the same store rebuilds the same registry from the CRDs it reads).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, LazyLock, RwLock};

use crate::crd::schema::Schema;
use crate::resources::{Resource, Subresource};

/// One additionalPrinterColumn of a served version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: String,
    /// integer, number, string, boolean, date.
    pub kind: String,
    pub format: String,
    pub description: String,
    pub priority: i32,
    /// A simple JSON path (`.spec.replicas`).
    pub json_path: String,
}

/// The scale subresource's paths (`.spec.replicas`...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// One served version of a custom resource.
#[derive(Debug)]
pub struct CustomVersion {
    pub resource: &'static Resource,
    /// The CustomResourceDefinition's name (`<plural>.<group>`).
    pub crd: String,
    pub list_kind: String,
    /// The version objects are stored in (conversion None: only apiVersion differs).
    pub storage_version: String,
    pub schema: Schema,
    /// The schema as server-side apply reads it (list types, map types), converted once.
    pub apply_type: crate::managed_fields::schema::TypeDef,
    /// The version's `openAPIV3Schema` as the CRD has it, for the OpenAPI documents (/openapi/v2
    /// and /openapi/v3 publish custom resources' schemas from it; [`generation`] tells when they
    /// changed).
    pub openapi_schema: serde_json::Value,
    pub columns: Vec<PrinterColumn>,
    pub status: bool,
    pub scale: Option<ScalePaths>,
    /// The version's selectableFields (their JSON paths without the leading dot), interned.
    pub selectable_fields: &'static [&'static str],
}

impl CustomVersion {
    /// `<group>/<storage version>`.
    pub fn storage_api_version(&self) -> String {
        format!("{}/{}", self.resource.group, self.storage_version)
    }
}

#[derive(Debug, Default)]
struct Registry {
    /// By (group, version, plural).
    versions: BTreeMap<(String, String, String), Arc<CustomVersion>>,
    /// Discovery's order: by group, then version, then plural, as `versions` iterates.
    served: Vec<&'static Resource>,
    interned: HashSet<&'static Resource>,
    strings: HashSet<&'static str>,
    lists: HashSet<&'static [&'static str]>,
    subresource_lists: HashSet<&'static [Subresource]>,
}

static REGISTRY: LazyLock<RwLock<Registry>> = LazyLock::new(RwLock::default);

/// Moves on every change of what is served (for caches of documents built from it: OpenAPI).
static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many times what is served changed: documents derived from the registry are stale when it
/// moved since they were built.
pub fn generation() -> u64 {
    GENERATION.load(std::sync::atomic::Ordering::Acquire)
}

/// Whether `resource` may be served as protobuf: custom resources have no protobuf form (upstream
/// answers them in JSON or YAML only, 406 when only protobuf is acceptable).
pub fn supports_protobuf(resource: &Resource) -> bool {
    !resource.custom
}

fn read() -> std::sync::RwLockReadGuard<'static, Registry> {
    REGISTRY.read().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write() -> std::sync::RwLockWriteGuard<'static, Registry> {
    REGISTRY.write().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What a served version is made of before it is interned.
#[derive(Debug, Clone)]
pub struct Definition {
    pub group: String,
    pub version: String,
    pub kind: String,
    pub list_kind: String,
    pub storage_version: String,
    pub plural: String,
    pub openapi_schema: serde_json::Value,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub schema: Schema,
    pub columns: Vec<PrinterColumn>,
    pub status: bool,
    pub scale: Option<ScalePaths>,
    /// selectableFields' JSON paths without the leading dot (`spec.color`).
    pub selectable_fields: Vec<String>,
}

const VERBS: &[&str] = &["delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"];
const SUBRESOURCE_VERBS: &[&str] = &["get", "patch", "update"];

impl Registry {
    fn string(&mut self, s: &str) -> &'static str {
        if let Some(interned) = self.strings.get(s) {
            return interned;
        }
        let leaked: &'static str = Box::leak(s.to_owned().into_boxed_str());
        self.strings.insert(leaked);
        leaked
    }

    fn list(&mut self, items: &[String]) -> &'static [&'static str] {
        let items: Vec<&'static str> = items.iter().map(|s| self.string(s)).collect();
        if let Some(interned) = self.lists.get(items.as_slice()) {
            return interned;
        }
        let leaked: &'static [&'static str] = Box::leak(items.into_boxed_slice());
        self.lists.insert(leaked);
        leaked
    }

    fn intern(&mut self, d: &Definition) -> &'static Resource {
        let kind = self.string(&d.kind);
        // Status first, then scale, as apiextensions-apiserver's discovery lists them.
        let mut subresources = Vec::new();
        if d.status {
            subresources.push(Subresource {
                name: "status",
                kind,
                group: "",
                version: "",
                verbs: SUBRESOURCE_VERBS,
            });
        }
        if d.scale.is_some() {
            subresources.push(Subresource {
                name: "scale",
                kind: "Scale",
                group: "autoscaling",
                version: "v1",
                verbs: SUBRESOURCE_VERBS,
            });
        }
        let subresources: &'static [Subresource] = match self.subresource_lists.get(subresources.as_slice()) {
            Some(interned) => interned,
            None => {
                let leaked: &'static [Subresource] = Box::leak(subresources.into_boxed_slice());
                self.subresource_lists.insert(leaked);
                leaked
            }
        };
        let resource = Resource {
            group: self.string(&d.group),
            version: self.string(&d.version),
            kind,
            plural: self.string(&d.plural),
            singular: self.string(&d.singular),
            namespaced: d.namespaced,
            short_names: self.list(&d.short_names),
            categories: self.list(&d.categories),
            verbs: VERBS,
            subresources,
            custom: true,
        };
        if let Some(interned) = self.interned.get(&resource) {
            return interned;
        }
        let leaked: &'static Resource = Box::leak(Box::new(resource));
        self.interned.insert(leaked);
        leaked
    }

    fn reindex(&mut self) {
        self.served = self.versions.values().map(|v| v.resource).collect();
    }

    /// What documents derived from the registry depend on: resources and schemas.
    fn fingerprint(&self) -> Vec<(&'static Resource, serde_json::Value)> {
        self.versions.values().map(|v| (v.resource, v.openapi_schema.clone())).collect()
    }
}

/// Serves `versions` for the CustomResourceDefinition `crd`, replacing what it served before.
pub fn serve(crd: &str, versions: Vec<Definition>) {
    let mut registry = write();
    let before = registry.fingerprint();
    registry.versions.retain(|_, v| v.crd != crd);
    for d in versions {
        let resource = registry.intern(&d);
        let selectable_fields = registry.list(&d.selectable_fields);
        let key = (d.group.clone(), d.version.clone(), d.plural.clone());
        let version = CustomVersion {
            resource,
            crd: crd.to_owned(),
            list_kind: d.list_kind,
            storage_version: d.storage_version,
            openapi_schema: d.openapi_schema,
            apply_type: crate::managed_fields::schema::TypeDef::from_structural(&d.schema),
            schema: d.schema,
            columns: d.columns,
            status: d.status,
            scale: d.scale,
            selectable_fields,
        };
        registry.versions.insert(key, Arc::new(version));
    }
    registry.reindex();
    if registry.fingerprint() != before {
        GENERATION.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Stops serving what the CustomResourceDefinition `crd` served.
pub fn stop(crd: &str) {
    let mut registry = write();
    let before = registry.versions.len();
    registry.versions.retain(|_, v| v.crd != crd);
    registry.reindex();
    if registry.versions.len() != before {
        GENERATION.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The names of the CustomResourceDefinitions served now.
pub fn served_definitions() -> Vec<String> {
    let mut names: Vec<String> = read().versions.values().map(|v| v.crd.clone()).collect();
    names.dedup();
    names
}

/// A resource served for the CustomResourceDefinition `crd` (its storage version when served).
pub fn resource_of(crd: &str) -> Option<&'static Resource> {
    let registry = read();
    let mut served = registry.versions.values().filter(|v| v.crd == crd);
    let all: Vec<&Arc<CustomVersion>> = served.by_ref().collect();
    all.iter().find(|v| v.resource.version == v.storage_version).or_else(|| all.first()).map(|v| v.resource)
}

/// The custom resource served at `/apis/<group>/<version>/.../<plural>`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    read().versions.get(&(group.to_owned(), version.to_owned(), plural.to_owned())).map(|v| v.resource)
}

/// The served version behind a custom `resource` (`None` for built-ins, or when no longer served).
pub fn version_of(resource: &Resource) -> Option<Arc<CustomVersion>> {
    if !resource.custom {
        return None;
    }
    read()
        .versions
        .get(&(resource.group.to_owned(), resource.version.to_owned(), resource.plural.to_owned()))
        .cloned()
}

/// The fields a fieldSelector may name on a custom resource beyond metadata.name and
/// metadata.namespace (its version's selectableFields).
pub fn selectable_fields(resource: &Resource) -> &'static [&'static str] {
    version_of(resource).map_or(&[], |v| v.selectable_fields)
}

/// Every custom resource served now, ordered by group, version and plural.
pub fn resources() -> std::vec::IntoIter<&'static Resource> {
    read().served.clone().into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn definition(version: &str) -> Definition {
        Definition {
            group: "test.keel.dev".into(),
            version: version.into(),
            kind: "Widget".into(),
            list_kind: "WidgetList".into(),
            storage_version: "v1".into(),
            openapi_schema: serde_json::Value::Null,
            plural: "widgets".into(),
            singular: "widget".into(),
            namespaced: true,
            short_names: vec!["wd".into()],
            categories: vec![],
            schema: Schema::default(),
            columns: vec![],
            status: true,
            scale: None,
            selectable_fields: vec!["spec.color".into()],
        }
    }

    #[test]
    fn served_and_interned() {
        serve("widgets.test.keel.dev", vec![definition("v1"), definition("v2")]);
        let v1 = find("test.keel.dev", "v1", "widgets").unwrap();
        assert_eq!(v1.key_prefix(), "/registry/test.keel.dev/widgets/");
        assert_eq!(v1.subresource("status").unwrap().kind, "Widget");
        assert!(crate::resources::find("test.keel.dev", "v2", "widgets").is_some());
        assert!(crate::resources::groups().contains(&"test.keel.dev"));
        // Served again as it was: the same interned resource.
        serve("widgets.test.keel.dev", vec![definition("v1")]);
        assert!(std::ptr::eq(v1, find("test.keel.dev", "v1", "widgets").unwrap()));
        assert!(find("test.keel.dev", "v2", "widgets").is_none());
        assert_eq!(version_of(v1).unwrap().list_kind, "WidgetList");
        assert!(v1.is_selectable("spec.color") && !v1.is_selectable("spec.size"));
        stop("widgets.test.keel.dev");
        assert!(find("test.keel.dev", "v1", "widgets").is_none());
        assert!(version_of(v1).is_none());
    }
}
