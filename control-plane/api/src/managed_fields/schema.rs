//! The schema view server-side apply walks objects with, as structured-merge-diff's `schema`
//! package models a type: a scalar, a struct (named fields), a map (granular or atomic), or a list
//! — associative by key fields (`x-kubernetes-list-type: map` + `list-map-keys`), a set of
//! scalars (`set`), or atomic. Where the list type is not given, upstream's schema conversion reads
//! the patch strategy: `merge` with a merge key is an associative list, `merge` without one a set.
//!
//! Built-in types come from the generated patch metadata (`generated/patch_meta.json`, `cargo xtask
//! codegen`). Values of no known type are *deduced*, as upstream treats untyped objects: maps are
//! granular, lists atomic. A [`TypeDef`] is plain data, so a CustomResourceDefinition's structural
//! schema (`x-kubernetes-list-type`, `x-kubernetes-map-type`...) can be turned into one directly.

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::Value;

/// What a schema says of a value's type.
#[derive(Clone, Debug, PartialEq)]
pub enum TypeDef {
    /// Read from the value itself: objects are granular maps of deduced values, lists atomic.
    Deduced,
    /// A leaf.
    Scalar,
    /// A definition of the [`Schema`], by name (lets recursive types refer to themselves).
    Named(String),
    /// An object with named fields; fields it does not declare are deduced.
    Struct(StructType),
    /// An object whose keys are data (labels, a ConfigMap's data, resource limits).
    Map {
        values: Box<TypeDef>,
        atomic: bool,
    },
    List {
        items: Box<TypeDef>,
        list: ListType,
    },
}

/// An object with named fields.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StructType {
    pub fields: BTreeMap<String, TypeDef>,
    /// `x-kubernetes-map-type: atomic`: owned and replaced as a whole.
    pub atomic: bool,
}

/// How a list's items are told apart.
#[derive(Clone, Debug, PartialEq)]
pub enum ListType {
    /// The list is one value.
    Atomic,
    /// Items are scalars, each its own identity.
    Set,
    /// Items are objects identified by these fields; a field left out takes its default, if any.
    Map { keys: Vec<String>, defaults: BTreeMap<String, Value> },
}

/// A value's shape, as a walk meets it.
#[derive(Debug)]
pub(crate) enum Shape<'s> {
    /// A leaf: a scalar, an atomic map or list, a value of the wrong type for its schema.
    Leaf,
    Struct(&'s StructType),
    Map(&'s TypeDef),
    List(&'s TypeDef, &'s ListType),
}

static DEDUCED: TypeDef = TypeDef::Deduced;

/// Named definitions a [`TypeDef`] may refer to.
#[derive(Debug, Default)]
pub struct Schema {
    pub definitions: HashMap<String, TypeDef>,
}

impl Schema {
    /// The schema of the built-in types (Kubernetes 1.34).
    pub fn builtin() -> &'static Schema {
        &BUILTIN.schema
    }

    /// The type of objects of this apiVersion and kind among the built-in types; deduced for
    /// kinds it does not know.
    pub fn builtin_root(api_version: &str, kind: &str) -> TypeDef {
        BUILTIN
            .kinds
            .get(&format!("{api_version}/{kind}"))
            .map_or(TypeDef::Deduced, |definition| TypeDef::Named(definition.clone()))
    }

    /// Follows names; a name the schema lacks is a struct of deduced fields.
    fn resolve<'s>(&'s self, ty: &'s TypeDef) -> &'s TypeDef {
        let mut ty = ty;
        for _ in 0..8 {
            match ty {
                TypeDef::Named(name) => match self.definitions.get(name) {
                    Some(definition) => ty = definition,
                    None => return &DEDUCED_STRUCT,
                },
                other => return other,
            }
        }
        &DEDUCED
    }

    /// The shape of `value` (absent or null: the shape its type gives) under `ty`.
    pub(crate) fn shape<'s>(&'s self, ty: &'s TypeDef, value: Option<&Value>) -> Shape<'s> {
        let value = value.filter(|v| !v.is_null());
        match self.resolve(ty) {
            TypeDef::Scalar => Shape::Leaf,
            TypeDef::Deduced => match value {
                Some(Value::Object(_)) => Shape::Map(&DEDUCED),
                _ => Shape::Leaf,
            },
            TypeDef::Struct(def) => match value {
                None | Some(Value::Object(_)) if !def.atomic => Shape::Struct(def),
                _ => Shape::Leaf,
            },
            TypeDef::Map { values, atomic } => match value {
                None | Some(Value::Object(_)) if !atomic => Shape::Map(values),
                _ => Shape::Leaf,
            },
            TypeDef::List { items, list } => match value {
                None | Some(Value::Array(_)) if *list != ListType::Atomic => Shape::List(items, list),
                _ => Shape::Leaf,
            },
            TypeDef::Named(_) => Shape::Leaf,
        }
    }

    /// The type of a struct's field.
    pub(crate) fn field<'s>(def: &'s StructType, name: &str) -> &'s TypeDef {
        def.fields.get(name).unwrap_or(&DEDUCED)
    }

    /// Whether a set node of type `ty` is a struct (its field children are named fields).
    pub(crate) fn struct_of<'s>(&'s self, ty: &'s TypeDef) -> Option<&'s StructType> {
        match self.resolve(ty) {
            TypeDef::Struct(def) => Some(def),
            _ => None,
        }
    }

    /// The type of a child of a node of type `ty` (a field, a map value or a list item).
    pub(crate) fn child<'s>(&'s self, ty: &'s TypeDef, field: Option<&str>) -> &'s TypeDef {
        match (self.resolve(ty), field) {
            (TypeDef::Struct(def), Some(name)) => Self::field(def, name),
            (TypeDef::Map { values, .. }, _) => values,
            (TypeDef::List { items, .. }, _) => items,
            _ => &DEDUCED,
        }
    }
}

/// The ObjectMeta every object's `metadata` is, whatever a CRD's schema says of it.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

impl TypeDef {
    /// The type of a custom resource from its CustomResourceDefinition's structural schema, as
    /// upstream's schema conversion reads one: `x-kubernetes-list-type` (`map` keyed by
    /// `x-kubernetes-list-map-keys`, whose `default`s fill keys left out; `set`; atomic when not
    /// given) and `x-kubernetes-map-type`; `metadata` is ObjectMeta (resolved in
    /// [`Schema::builtin`]). Fields the schema does not declare (preserved unknown fields) are
    /// deduced.
    pub fn from_structural(root: &crate::crd::schema::Schema) -> TypeDef {
        let mut ty = structural(root);
        if let TypeDef::Struct(def) = &mut ty {
            def.fields.insert("metadata".into(), TypeDef::Named(OBJECT_META.into()));
            def.fields.insert("apiVersion".into(), TypeDef::Scalar);
            def.fields.insert("kind".into(), TypeDef::Scalar);
        }
        ty
    }
}

/// One node of a structural schema as a [`TypeDef`] (depth bounded by the CRD's JSON, which the
/// decoder's nesting limit bounds).
fn structural(s: &crate::crd::schema::Schema) -> TypeDef {
    use crate::crd::schema::Additional;
    if s.int_or_string {
        return TypeDef::Scalar;
    }
    match s.kind.as_str() {
        // An untyped node (preserving unknown fields) with properties is read as an object.
        "object" | "" => {
            let atomic = s.map_type.as_deref() == Some("atomic");
            if let Some(Additional::Schema(values)) = &s.additional_properties {
                return TypeDef::Map { values: Box::new(structural(values)), atomic };
            }
            let fields = s.properties.iter().map(|(name, p)| (name.clone(), structural(p))).collect();
            TypeDef::Struct(StructType { fields, atomic })
        }
        "array" => {
            let items = s.items.as_deref();
            let list = match s.list_type.as_deref() {
                Some("map") => {
                    let defaults = s
                        .list_map_keys
                        .iter()
                        .filter_map(|k| {
                            let default = items?.properties.get(k)?.default.clone()?;
                            Some((k.clone(), default))
                        })
                        .collect();
                    ListType::Map { keys: s.list_map_keys.clone(), defaults }
                }
                Some("set") => ListType::Set,
                _ => ListType::Atomic,
            };
            TypeDef::List { items: Box::new(items.map_or(TypeDef::Deduced, structural)), list }
        }
        _ => TypeDef::Scalar,
    }
}

static DEDUCED_STRUCT: TypeDef = TypeDef::Struct(StructType { fields: BTreeMap::new(), atomic: false });

/// The generated patch metadata, as far as apply reads it.
#[derive(Debug, Default, Deserialize)]
struct PatchMeta {
    kinds: HashMap<String, String>,
    types: HashMap<String, HashMap<String, FieldMeta>>,
    #[serde(default)]
    atomic: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct FieldMeta {
    #[serde(rename = "ref")]
    object: Option<String>,
    items: Option<String>,
    values: Option<String>,
    strategy: Option<String>,
    key: Option<String>,
    list_type: Option<String>,
    map_keys: Option<Vec<String>>,
    map_type: Option<String>,
}

struct Builtin {
    kinds: HashMap<String, String>,
    schema: Schema,
}

/// Defaults of list key fields. The kubernetes-validate schema leaves out the `default` upstream's
/// generated OpenAPI carries for these (`+default="TCP"`), and without it a port applied without
/// its protocol would have no identity.
const KEY_DEFAULTS: &[(&str, &str, &str)] = &[
    ("io.k8s.api.core.v1.ContainerPort", "protocol", "TCP"),
    ("io.k8s.api.core.v1.ServicePort", "protocol", "TCP"),
];

static BUILTIN: LazyLock<Builtin> = LazyLock::new(|| {
    let meta: PatchMeta =
        serde_json::from_str(include_str!("../generated/patch_meta.json")).unwrap_or_default();
    let mut definitions: HashMap<String, TypeDef> = HashMap::new();
    for (name, fields) in &meta.types {
        let fields = fields.iter().map(|(field, m)| (field.clone(), field_type(m))).collect();
        let atomic = meta.atomic.contains(name);
        definitions.insert(name.clone(), TypeDef::Struct(StructType { fields, atomic }));
    }
    for name in &meta.atomic {
        definitions
            .entry(name.clone())
            .or_insert_with(|| TypeDef::Struct(StructType { fields: BTreeMap::new(), atomic: true }));
    }
    Builtin { kinds: meta.kinds, schema: Schema { definitions } }
});

/// A property's type from its patch metadata (upstream's schemaconv rules).
fn field_type(meta: &FieldMeta) -> TypeDef {
    let named = |name: &Option<String>| name.clone().map_or(TypeDef::Deduced, TypeDef::Named);
    if meta.items.is_some() || meta.list_type.is_some() {
        let merging = meta.strategy.as_deref().is_some_and(|s| s.split(',').any(|s| s == "merge"));
        let list = match (meta.list_type.as_deref(), &meta.map_keys, &meta.key) {
            (Some("map"), Some(keys), _) => keyed(keys.clone(), meta.items.as_deref()),
            (Some("set"), _, _) => ListType::Set,
            (Some(_), _, _) => ListType::Atomic,
            (None, _, Some(key)) if merging => keyed(vec![key.clone()], meta.items.as_deref()),
            (None, _, None) if merging => ListType::Set,
            _ => ListType::Atomic,
        };
        return TypeDef::List { items: Box::new(named(&meta.items)), list };
    }
    if meta.object.is_some() {
        // A property can make its struct granular or atomic itself.
        return match meta.map_type.as_deref() {
            Some("atomic") => TypeDef::Map { values: Box::new(TypeDef::Deduced), atomic: true },
            _ => named(&meta.object),
        };
    }
    if meta.values.is_some() || meta.map_type.is_some() {
        return TypeDef::Map {
            values: Box::new(named(&meta.values)),
            atomic: meta.map_type.as_deref() == Some("atomic"),
        };
    }
    TypeDef::Deduced
}

fn keyed(keys: Vec<String>, items: Option<&str>) -> ListType {
    let defaults = KEY_DEFAULTS
        .iter()
        .filter(|(definition, field, _)| Some(*definition) == items && keys.iter().any(|k| k == field))
        .map(|(_, field, value)| ((*field).to_owned(), Value::String((*value).to_owned())))
        .collect();
    ListType::Map { keys, defaults }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_types() {
        let schema = Schema::builtin();
        let pod = Schema::builtin_root("v1", "Pod");
        let Shape::Struct(pod_def) = schema.shape(&pod, None) else { panic!("a Pod is a struct") };
        let spec = Schema::field(pod_def, "spec");
        let Shape::Struct(spec_def) = schema.shape(spec, None) else { panic!("PodSpec is a struct") };
        let containers = Schema::field(spec_def, "containers");
        assert!(matches!(
            schema.shape(containers, None),
            Shape::List(_, ListType::Map { keys, .. }) if keys == &["name"]
        ));
        let Shape::Struct(container) = schema.shape(schema.child(containers, None), None) else { panic!() };
        let Shape::List(_, ListType::Map { keys, defaults }) =
            schema.shape(Schema::field(container, "ports"), None)
        else {
            panic!("ports are keyed")
        };
        assert_eq!(keys, &["containerPort", "protocol"]);
        assert_eq!(defaults["protocol"], "TCP");
        assert!(matches!(schema.shape(Schema::field(container, "args"), None), Shape::Leaf));
        assert!(
            matches!(schema.shape(Schema::field(spec_def, "nodeSelector"), None), Shape::Leaf),
            "atomic map"
        );
        let deployment = Schema::builtin_root("apps/v1", "Deployment");
        let Shape::Struct(d) = schema.shape(&deployment, None) else { panic!() };
        let Shape::Struct(dspec) = schema.shape(Schema::field(d, "spec"), None) else { panic!() };
        assert!(
            matches!(schema.shape(Schema::field(dspec, "selector"), None), Shape::Leaf),
            "LabelSelector is atomic"
        );
        assert_eq!(Schema::builtin_root("example.com/v1", "Widget"), TypeDef::Deduced);
    }
}
