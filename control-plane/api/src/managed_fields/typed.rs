//! Walks of objects under a [`Schema`], as structured-merge-diff's `typed` package has them: the
//! set of fields an object holds, the comparison of two objects (fields added, modified, removed),
//! the merge of an applied configuration into a live object, and the removal of a set of fields.

use std::collections::{BTreeMap, HashMap};

use serde_json::{Map, Value};

use super::fieldpath::{Path, PathElement, Set};
use super::schema::{ListType, Schema, Shape, TypeDef};

/// An object that does not fit its schema (a list item without its key, duplicate items).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedError {
    pub path: Path,
    pub message: String,
}

impl std::fmt::Display for TypedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.0.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

fn at<T>(element: &PathElement, result: Result<T, TypedError>) -> Result<T, TypedError> {
    result.map_err(|mut e| {
        e.path.0.insert(0, element.clone());
        e
    })
}

fn error(message: String) -> TypedError {
    TypedError { path: Path::default(), message }
}

/// The fields two objects differ in.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Comparison {
    pub added: Set,
    pub modified: Set,
    pub removed: Set,
}

impl Comparison {
    /// Without `fields` and whatever is below them (upstream's ExcludeFields).
    pub fn exclude(&mut self, fields: &Set) {
        if fields.is_empty() {
            return;
        }
        self.added = self.added.recursive_difference(fields);
        self.modified = self.modified.recursive_difference(fields);
        self.removed = self.removed.recursive_difference(fields);
    }

    pub fn is_same(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }
}

/// How a node itself changed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mark {
    None,
    Added,
    Removed,
    Modified,
}

fn empty_object() -> &'static Map<String, Value> {
    static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);
    &EMPTY
}

/// The identity of a list item: its key fields (with their defaults) or, in a set, its value.
fn item_element(list: &ListType, item: &Value) -> Result<PathElement, TypedError> {
    match list {
        ListType::Map { keys, defaults } => {
            let Value::Object(fields) = item else {
                return Err(error(format!("expected map, got {item}")));
            };
            let mut key = Vec::with_capacity(keys.len());
            for name in keys {
                match fields.get(name).filter(|v| !v.is_null()).or_else(|| defaults.get(name)) {
                    Some(value) => key.push((name.clone(), value.to_string())),
                    None => {
                        return Err(error(format!(
                            "associative list with keys has an element that omits key field {name:?} (and doesn't have default value)"
                        )));
                    }
                }
            }
            key.sort();
            Ok(PathElement::Key(key.into()))
        }
        ListType::Set | ListType::Atomic => Ok(PathElement::Value(item.to_string().into())),
    }
}

/// The items of a list with their identities; `duplicates` allowed or an error.
fn index_items<'v>(
    list: &ListType,
    items: &'v [Value],
    duplicates_allowed: bool,
) -> Result<Vec<(PathElement, &'v Value)>, TypedError> {
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let element = item_element(list, item).map_err(|e| error(format!("element {i}: {}", e.message)))?;
        if !duplicates_allowed && out.iter().any(|(seen, _)| *seen == element) {
            return Err(error(format!("duplicate entries for key {element}")));
        }
        out.push((element, item));
    }
    Ok(out)
}

/// Walks under one schema.
#[derive(Clone, Copy, Debug)]
pub struct Typed<'s> {
    pub schema: &'s Schema,
}

impl<'s> Typed<'s> {
    pub fn new(schema: &'s Schema) -> Typed<'s> {
        Typed { schema }
    }

    /// Both shapes agree, or the values are leaves of each other (a scalar replaced by a map).
    fn shape_of(&self, ty: &'s TypeDef, lhs: Option<&Value>, rhs: Option<&Value>) -> Shape<'s> {
        let right = self.schema.shape(ty, rhs.or(lhs));
        if let (Some(l), Some(r)) = (lhs, rhs)
            && !l.is_null()
            && !r.is_null()
            && std::mem::discriminant(l) != std::mem::discriminant(r)
        {
            return Shape::Leaf;
        }
        right
    }

    /// The set of fields `value` holds (upstream's ToFieldSet).
    pub fn to_field_set(&self, ty: &'s TypeDef, value: &Value) -> Result<Set, TypedError> {
        Ok(self.field_set(ty, value)?.0)
    }

    /// The fields under a node, and whether the node is a leaf.
    fn field_set(&self, ty: &'s TypeDef, value: &Value) -> Result<(Set, bool), TypedError> {
        match self.schema.shape(ty, Some(value)) {
            Shape::Leaf => Ok((Set::new(), true)),
            Shape::Struct(def) => {
                let mut set = Set::new();
                for (key, child) in value.as_object().unwrap_or(empty_object()) {
                    let element = PathElement::Field(key.as_str().into());
                    let (below, leaf) = at(&element, self.field_set(Schema::field(def, key), child))?;
                    if leaf || child.is_null() || child.as_object().is_some_and(Map::is_empty) {
                        set.members.insert(element.clone());
                    }
                    set.insert_child(element, below);
                }
                Ok((set, false))
            }
            Shape::Map(values) => {
                let mut set = Set::new();
                for (key, child) in value.as_object().unwrap_or(empty_object()) {
                    let element = PathElement::Field(key.as_str().into());
                    let (below, _) = at(&element, self.field_set(values, child))?;
                    set.members.insert(element.clone());
                    set.insert_child(element, below);
                }
                Ok((set, false))
            }
            Shape::List(items_type, list) => {
                let items = value.as_array().map(Vec::as_slice).unwrap_or_default();
                let indexed = index_items(list, items, true)?;
                let mut counts: HashMap<&PathElement, usize> = HashMap::new();
                for (element, _) in &indexed {
                    *counts.entry(element).or_default() += 1;
                }
                let mut set = Set::new();
                for (element, item) in &indexed {
                    set.members.insert(element.clone());
                    if counts[element] > 1 {
                        continue;
                    }
                    let (below, _) = at(element, self.field_set(items_type, item))?;
                    set.insert_child(element.clone(), below);
                }
                Ok((set, false))
            }
        }
    }

    /// What changed from `lhs` to `rhs` (upstream's Compare).
    pub fn compare(&self, ty: &'s TypeDef, lhs: &Value, rhs: &Value) -> Result<Comparison, TypedError> {
        let mut out = Comparison::default();
        self.compare_node(ty, Some(lhs), Some(rhs), &mut out)?;
        Ok(out)
    }

    fn compare_node(
        &self,
        ty: &'s TypeDef,
        lhs: Option<&Value>,
        rhs: Option<&Value>,
        out: &mut Comparison,
    ) -> Result<Mark, TypedError> {
        let leaf = || match (lhs, rhs) {
            (None, None) => Mark::None,
            (None, Some(_)) => Mark::Added,
            (Some(_), None) => Mark::Removed,
            (Some(l), Some(r)) if l != r => Mark::Modified,
            _ => Mark::None,
        };
        let node = match (lhs, rhs) {
            (None, _) => Mark::Added,
            (_, None) => Mark::Removed,
            _ => Mark::None,
        };
        match self.shape_of(ty, lhs, rhs) {
            Shape::Leaf => Ok(leaf()),
            shape @ (Shape::Struct(_) | Shape::Map(_)) => {
                let l = lhs.and_then(Value::as_object).unwrap_or(empty_object());
                let r = rhs.and_then(Value::as_object).unwrap_or(empty_object());
                if l.is_empty() && r.is_empty() {
                    return Ok(leaf());
                }
                let child_type = |key: &str| match shape {
                    Shape::Struct(def) => Schema::field(def, key),
                    Shape::Map(values) => values,
                    _ => unreachable!("a map shape"),
                };
                let mut keys: Vec<&String> =
                    l.keys().chain(r.keys().filter(|k| !l.contains_key(*k))).collect();
                keys.sort();
                for key in keys {
                    let element = PathElement::Field(key.as_str().into());
                    let mut below = Comparison::default();
                    let mark =
                        at(&element, self.compare_node(child_type(key), l.get(key), r.get(key), &mut below))?;
                    fold(out, &element, mark, below);
                }
                Ok(node)
            }
            Shape::List(items_type, list) => {
                let l = lhs.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                let r = rhs.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                if l.is_empty() && r.is_empty() {
                    return Ok(leaf());
                }
                let left = group(index_items(list, l, true)?);
                let right = group(index_items(list, r, true)?);
                let mut order: Vec<&PathElement> = left.iter().map(|(e, _)| e).collect();
                order.extend(right.iter().map(|(e, _)| e).filter(|e| !left.iter().any(|(l, _)| l == *e)));
                for element in order {
                    let ls = left
                        .iter()
                        .find(|(e, _)| e == element)
                        .map(|(_, v)| v.as_slice())
                        .unwrap_or_default();
                    let rs = right
                        .iter()
                        .find(|(e, _)| e == element)
                        .map(|(_, v)| v.as_slice())
                        .unwrap_or_default();
                    let mut below = Comparison::default();
                    let mark = match (ls.len(), rs.len()) {
                        (0..=1, 0..=1) => at(
                            element,
                            self.compare_node(
                                items_type,
                                ls.first().copied(),
                                rs.first().copied(),
                                &mut below,
                            ),
                        )?,
                        (2.., 2..) if ls != rs => Mark::Modified,
                        (2.., 2..) => Mark::None,
                        (2.., _) => {
                            if let Some(r) = rs.first() {
                                at(element, self.compare_node(items_type, None, Some(r), &mut below))?;
                            }
                            Mark::Removed
                        }
                        (_, _) => {
                            if let Some(l) = ls.first() {
                                at(element, self.compare_node(items_type, Some(l), None, &mut below))?;
                            }
                            Mark::Added
                        }
                    };
                    fold(out, element, mark, below);
                }
                Ok(node)
            }
        }
    }

    /// `rhs` merged into `lhs`: the applied configuration wins where both have a field (upstream's
    /// Merge with its keep-the-right-hand-side rule). Items of the applied lists must be unique.
    pub fn merge(&self, ty: &'s TypeDef, lhs: &Value, rhs: &Value) -> Result<Value, TypedError> {
        Ok(self.merge_node(ty, Some(lhs), Some(rhs))?.unwrap_or_else(|| Value::Object(Map::new())))
    }

    fn merge_node(
        &self,
        ty: &'s TypeDef,
        lhs: Option<&Value>,
        rhs: Option<&Value>,
    ) -> Result<Option<Value>, TypedError> {
        let leaf = || Ok(rhs.or(lhs).cloned());
        match self.shape_of(ty, lhs, rhs) {
            Shape::Leaf => leaf(),
            shape @ (Shape::Struct(_) | Shape::Map(_)) => {
                let l = lhs.and_then(Value::as_object).unwrap_or(empty_object());
                let r = rhs.and_then(Value::as_object).unwrap_or(empty_object());
                if l.is_empty() && r.is_empty() {
                    return leaf();
                }
                let mut out = Map::new();
                for (key, value) in l.iter().chain(r.iter().filter(|(k, _)| !l.contains_key(*k))) {
                    let _ = value;
                    let child = match shape {
                        Shape::Struct(def) => Schema::field(def, key),
                        Shape::Map(values) => values,
                        _ => unreachable!("a map shape"),
                    };
                    let element = PathElement::Field(key.as_str().into());
                    if let Some(merged) = at(&element, self.merge_node(child, l.get(key), r.get(key)))? {
                        out.insert(key.clone(), merged);
                    }
                }
                Ok((!out.is_empty()).then_some(Value::Object(out)))
            }
            Shape::List(items_type, list) => {
                let l = lhs.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                let r = rhs.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
                if l.is_empty() && r.is_empty() {
                    return leaf();
                }
                let right = index_items(list, r, false)?;
                let left = index_items(list, l, true)?;
                let out = self.merge_items(items_type, &left, &right)?;
                Ok((!out.is_empty()).then_some(Value::Array(out)))
            }
        }
    }

    /// Upstream's order of a merged list: the live items in their order, the applied ones in
    /// theirs; an item both have is placed where the applied list has it relative to the other
    /// shared items, and a live-only item stays before the shared item that followed it.
    fn merge_items<'v>(
        &self,
        items_type: &'s TypeDef,
        left: &[(PathElement, &'v Value)],
        right: &[(PathElement, &'v Value)],
    ) -> Result<Vec<Value>, TypedError> {
        fn find<'v>(list: &[(PathElement, &'v Value)], element: &PathElement) -> (bool, Option<&'v Value>) {
            let mut hits = list.iter().filter(|(e, _)| e == element);
            let first = hits.next().map(|(_, v)| *v);
            // A live item listed twice merges as if absent (upstream keeps no value for it).
            if hits.next().is_some() { (true, None) } else { (first.is_some(), first) }
        }
        let mut shared: std::collections::VecDeque<&PathElement> =
            right.iter().map(|(e, _)| e).filter(|e| find(left, e).0).collect();
        let mut next_shared = shared.pop_front();
        let mut merged_right: Vec<&PathElement> = Vec::new();
        let mut out = Vec::with_capacity(left.len().max(right.len()));
        let (mut li, mut ri) = (0, 0);
        let push = |element: &PathElement, l: Option<&Value>, r: Option<&Value>, out: &mut Vec<Value>| {
            at(element, self.merge_node(items_type, l, r)).map(|merged| out.extend(merged))
        };
        while li < left.len() || ri < right.len() {
            if li < left.len() && ri < right.len() {
                let element = &left[li].0;
                if *element == right[ri].0 {
                    merged_right.push(element);
                    push(element, find(left, element).1, Some(right[ri].1), &mut out)?;
                    li += 1;
                    ri += 1;
                    next_shared = shared.pop_front();
                    continue;
                }
                if find(right, element).0 && next_shared.is_some_and(|n| n != element) {
                    li += 1;
                    continue;
                }
            }
            if li < left.len() {
                let element = &left[li].0;
                if !find(right, element).0 {
                    push(element, Some(left[li].1), None, &mut out)?;
                    li += 1;
                    continue;
                } else if merged_right.contains(&element) {
                    li += 1;
                }
            }
            if ri < right.len() {
                let element = &right[ri].0;
                merged_right.push(element);
                push(element, find(left, element).1, Some(right[ri].1), &mut out)?;
                ri += 1;
                if next_shared == Some(element) {
                    next_shared = shared.pop_front();
                }
            }
        }
        Ok(out)
    }

    /// `value` without the fields of `set` (upstream's RemoveItems); what is left empty goes too.
    pub fn remove(&self, ty: &'s TypeDef, value: &Value, set: &Set) -> Value {
        self.remove_node(ty, value, set).unwrap_or_else(|| Value::Object(Map::new()))
    }

    fn remove_node(&self, ty: &'s TypeDef, value: &Value, set: &Set) -> Option<Value> {
        match self.schema.shape(ty, Some(value)) {
            Shape::Leaf => Some(value.clone()),
            shape @ (Shape::Struct(_) | Shape::Map(_)) => {
                let map = value.as_object()?;
                let mut out = Map::new();
                for (key, child) in map {
                    let element = PathElement::Field(key.as_str().into());
                    if set.members.contains(&element) {
                        continue;
                    }
                    match set.with_prefix(&element) {
                        Some(below) => {
                            let child_type = match shape {
                                Shape::Struct(def) => Schema::field(def, key),
                                Shape::Map(values) => values,
                                _ => unreachable!("a map shape"),
                            };
                            if let Some(kept) = self.remove_node(child_type, child, below) {
                                out.insert(key.clone(), kept);
                            }
                        }
                        None => {
                            out.insert(key.clone(), child.clone());
                        }
                    }
                }
                (!out.is_empty()).then_some(Value::Object(out))
            }
            Shape::List(items_type, list) => {
                let items = value.as_array()?;
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    let Ok(element) = item_element(list, item) else {
                        out.push(item.clone());
                        continue;
                    };
                    if set.members.contains(&element) {
                        continue;
                    }
                    match set.with_prefix(&element) {
                        Some(below) => out.extend(self.remove_node(items_type, item, below)),
                        None => out.push(item.clone()),
                    }
                }
                (!out.is_empty()).then_some(Value::Array(out))
            }
        }
    }

    /// `set` with the struct fields its paths go through as members too (upstream's
    /// EnsureNamedFieldsAreMembers: owning `.spec.replicas` is owning `.spec`; map keys are not).
    pub fn ensure_named_fields_are_members(&self, ty: &'s TypeDef, set: &Set) -> Set {
        let structure = self.schema.struct_of(ty);
        let mut out = Set { members: set.members.clone(), children: BTreeMap::new() };
        for (element, child) in &set.children {
            let field = match element {
                PathElement::Field(name) => Some(&**name),
                _ => None,
            };
            if structure.is_some() && field.is_some() {
                out.members.insert(element.clone());
            }
            let child_type = self.schema.child(ty, field);
            out.children.insert(element.clone(), self.ensure_named_fields_are_members(child_type, child));
        }
        out
    }
}

/// Items grouped by identity, in first-seen order.
fn group(indexed: Vec<(PathElement, &Value)>) -> Vec<(PathElement, Vec<&Value>)> {
    let mut out: Vec<(PathElement, Vec<&Value>)> = Vec::new();
    for (element, value) in indexed {
        match out.iter_mut().find(|(e, _)| *e == element) {
            Some((_, values)) => values.push(value),
            None => out.push((element, vec![value])),
        }
    }
    out
}

/// Adds a child's comparison (and its own mark) under `element`.
fn fold(out: &mut Comparison, element: &PathElement, mark: Mark, below: Comparison) {
    match mark {
        Mark::Added => out.added.members.insert(element.clone()),
        Mark::Removed => out.removed.members.insert(element.clone()),
        Mark::Modified => out.modified.members.insert(element.clone()),
        Mark::None => false,
    };
    for (set, child) in [
        (&mut out.added, below.added),
        (&mut out.modified, below.modified),
        (&mut out.removed, below.removed),
    ] {
        if !child.is_empty() {
            set.insert_child(element.clone(), child);
        }
    }
}
