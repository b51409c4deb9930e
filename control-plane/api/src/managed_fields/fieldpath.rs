//! Field paths and sets of them, as structured-merge-diff's `fieldpath` package has them, and their
//! `FieldsV1` form (`{"f:spec":{"f:containers":{"k:{\"name\":\"a\"}":{".":{},"f:image":{}}}}}`).
//!
//! A path element is a struct or map field (`f:name`), an associative-list item by its key fields
//! (`k:{"name":"a"}`), a set-list item by its value (`v:"x"`), or a list index (`i:0`, never made
//! here: lists without keys are atomic). A [`Set`] is a tree: at each node the elements that are
//! members (the paths ending there) and the children (the paths going further).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use serde_json::{Map, Value};

/// One step of a field path. Values (of keys and set items) are kept as their JSON text, which
/// gives them the equality and order a set needs (serde_json's `Value` has neither `Ord` nor `Hash`).
/// Text is shared (`Arc`): sets copy elements often, and a copy should not allocate.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A field of a struct or a key of a map.
    Field(Arc<str>),
    /// An item of an associative list: its key fields, by name, with their values as JSON.
    Key(Arc<[(String, String)]>),
    /// An item of a set list: its value as JSON.
    Value(Arc<str>),
    /// A list index.
    Index(usize),
}

impl PathElement {
    /// The element's `FieldsV1` key (`f:name`, `k:{...}`, `v:...`, `i:N`).
    pub fn to_fields_v1(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let body: Vec<String> = fields
                    .iter()
                    .map(|(name, value)| format!("{}:{value}", Value::String(name.clone())))
                    .collect();
                format!("k:{{{}}}", body.join(","))
            }
            PathElement::Value(value) => format!("v:{value}"),
            PathElement::Index(index) => format!("i:{index}"),
        }
    }

    /// Reads a `FieldsV1` key back.
    pub fn from_fields_v1(text: &str) -> Result<PathElement, String> {
        let (kind, rest) =
            text.split_at_checked(2).ok_or_else(|| format!("key must be 2 characters long: {text}"))?;
        match kind {
            "f:" => Ok(PathElement::Field(rest.into())),
            "v:" => {
                let value: Value = serde_json::from_str(rest).map_err(|e| format!("{text}: {e}"))?;
                Ok(PathElement::Value(value.to_string().into()))
            }
            "k:" => {
                let value: Map<String, Value> =
                    serde_json::from_str(rest).map_err(|e| format!("{text}: {e}"))?;
                let mut fields: Vec<(String, String)> =
                    value.into_iter().map(|(name, value)| (name, value.to_string())).collect();
                fields.sort();
                Ok(PathElement::Key(fields.into()))
            }
            "i:" => rest.parse().map(PathElement::Index).map_err(|e| format!("{text}: {e}")),
            _ => Err(format!("unknown path element type: {text}")),
        }
    }
}

/// As upstream prints a path element in messages: `.name`, `[name="a",protocol="TCP"]`, `[="x"]`, `[0]`.
impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                let parts: Vec<String> =
                    fields.iter().map(|(name, value)| format!("{name}={value}")).collect();
                write!(f, "[{}]", parts.join(","))
            }
            PathElement::Value(value) => write!(f, "[={value}]"),
            PathElement::Index(index) => write!(f, "[{index}]"),
        }
    }
}

/// A path from the object's root.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Path(pub Vec<PathElement>);

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|element| write!(f, "{element}"))
    }
}

/// A set of field paths, as a tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Set {
    /// The elements whose paths end here.
    pub members: BTreeSet<PathElement>,
    /// The elements whose paths go further; never empty sets.
    pub children: BTreeMap<PathElement, Set>,
}

impl Set {
    pub fn new() -> Set {
        Set::default()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.is_empty()
    }

    /// Adds a path.
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// Adds `child` under `element` (nothing when it is empty).
    pub fn insert_child(&mut self, element: PathElement, child: Set) {
        if child.is_empty() {
            return;
        }
        match self.children.entry(element) {
            std::collections::btree_map::Entry::Vacant(vacant) => {
                vacant.insert(child);
            }
            std::collections::btree_map::Entry::Occupied(mut occupied) => occupied.get_mut().merge(child),
        }
    }

    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|child| child.has(rest)),
        }
    }

    /// The paths under `element`, relative to it.
    pub fn with_prefix(&self, element: &PathElement) -> Option<&Set> {
        self.children.get(element)
    }

    pub fn union(&self, other: &Set) -> Set {
        let mut out = self.clone();
        out.union_with(other);
        out
    }

    pub fn union_with(&mut self, other: &Set) {
        self.members.extend(other.members.iter().cloned());
        for (element, child) in &other.children {
            match self.children.get_mut(element) {
                Some(mine) => mine.union_with(child),
                None => {
                    self.children.insert(element.clone(), child.clone());
                }
            }
        }
    }

    /// Adds every path of `other`, taking its subtrees.
    pub fn merge(&mut self, other: Set) {
        self.members.extend(other.members);
        for (element, child) in other.children {
            match self.children.entry(element) {
                std::collections::btree_map::Entry::Vacant(vacant) => {
                    vacant.insert(child);
                }
                std::collections::btree_map::Entry::Occupied(mut occupied) => occupied.get_mut().merge(child),
            }
        }
    }

    /// Removes the paths of `other` (exact paths, as [`Set::difference`]) in place.
    pub fn remove_all(&mut self, other: &Set) {
        if other.is_empty() {
            return;
        }
        self.members.retain(|m| !other.members.contains(m));
        self.children.retain(|element, child| {
            if let Some(theirs) = other.children.get(element) {
                child.remove_all(theirs);
            }
            !child.is_empty()
        });
    }

    pub fn intersection(&self, other: &Set) -> Set {
        let members = self.members.intersection(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter_map(|(element, child)| {
                let both = child.intersection(other.children.get(element)?);
                (!both.is_empty()).then(|| (element.clone(), both))
            })
            .collect();
        Set { members, children }
    }

    /// The paths of `self` that are not in `other` (exact paths: a member of `other` does not
    /// take away what is below it).
    pub fn difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter_map(|(element, child)| {
                let left = match other.children.get(element) {
                    Some(theirs) => child.difference(theirs),
                    None => child.clone(),
                };
                (!left.is_empty()).then(|| (element.clone(), left))
            })
            .collect();
        Set { members, children }
    }

    /// The paths of `self` that are neither in `other` nor below one of its members.
    pub fn recursive_difference(&self, other: &Set) -> Set {
        let members = self.members.difference(&other.members).cloned().collect();
        let children = self
            .children
            .iter()
            .filter(|(element, _)| !other.members.contains(*element))
            .filter_map(|(element, child)| {
                let left = match other.children.get(element) {
                    Some(theirs) => child.recursive_difference(theirs),
                    None => child.clone(),
                };
                (!left.is_empty()).then(|| (element.clone(), left))
            })
            .collect();
        Set { members, children }
    }

    /// Every path of the set, in order (leaves of the tree and members with children alike).
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Path>) {
        // Members and children interleaved in element order, as upstream iterates.
        let mut members = self.members.iter().peekable();
        let mut children = self.children.iter().peekable();
        loop {
            let member_first = match (members.peek(), children.peek()) {
                (Some(m), Some((c, _))) => *m <= *c,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if member_first {
                let member = members.next().cloned().unwrap_or(PathElement::Index(0));
                prefix.push(member);
                out.push(Path(prefix.clone()));
                prefix.pop();
            } else if let Some((element, child)) = children.next() {
                prefix.push(element.clone());
                child.collect_paths(prefix, out);
                prefix.pop();
            }
        }
    }

    /// The set in `FieldsV1` form.
    pub fn to_fields_v1(&self) -> Value {
        Value::Object(self.fields_v1_contents(false))
    }

    fn fields_v1_contents(&self, include_self: bool) -> Map<String, Value> {
        let mut out = Map::new();
        if include_self {
            out.insert(".".into(), Value::Object(Map::new()));
        }
        // In element order, members and children interleaved, as upstream writes them (whatever
        // order the JSON map keeps).
        let mut elements: Vec<&PathElement> = self.members.iter().chain(self.children.keys()).collect();
        elements.sort();
        elements.dedup();
        for element in elements {
            let contents = match self.children.get(element) {
                Some(child) => child.fields_v1_contents(self.members.contains(element)),
                None => Map::new(),
            };
            out.insert(element.to_fields_v1(), Value::Object(contents));
        }
        out
    }

    /// Reads a `FieldsV1` value.
    pub fn from_fields_v1(value: &Value) -> Result<Set, String> {
        let Value::Object(map) = value else {
            return Err(format!("FieldsV1 must be an object, not {value}"));
        };
        let mut set = Set::new();
        for (key, child) in map {
            if key == "." {
                continue;
            }
            let element = PathElement::from_fields_v1(key)?;
            let Value::Object(contents) = child else {
                return Err(format!("FieldsV1 {key} must hold an object"));
            };
            if contents.is_empty() || contents.contains_key(".") {
                set.members.insert(element.clone());
            }
            let below = Set::from_fields_v1(child)?;
            if !below.is_empty() {
                set.children.insert(element, below);
            }
        }
        Ok(set)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn field(name: &str) -> PathElement {
        PathElement::Field(name.into())
    }

    #[test]
    fn fields_v1_round_trips() {
        let text = json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"a\"}": {".": {}, "f:image": {}, "f:name": {}}},
                       "f:finalizers": {"v:\"x\"": {}}}});
        let set = Set::from_fields_v1(&text).unwrap();
        assert!(set.has(&[field("metadata"), field("labels")]));
        assert!(set.has(&[field("metadata"), field("labels"), field("app")]));
        let key = PathElement::Key(vec![("name".into(), "\"a\"".into())].into());
        assert!(set.has(&[field("spec"), field("containers"), key.clone()]));
        assert!(!set.has(&[field("spec"), field("containers")]));
        assert_eq!(set.to_fields_v1(), text);
        let paths: Vec<String> = set.paths().iter().map(ToString::to_string).collect();
        assert_eq!(
            paths,
            [
                ".metadata.labels",
                ".metadata.labels.app",
                ".spec.containers[name=\"a\"]",
                ".spec.containers[name=\"a\"].image",
                ".spec.containers[name=\"a\"].name",
                ".spec.finalizers[=\"x\"]"
            ]
        );
        assert!(Set::from_fields_v1(&json!({"x:y": {}})).is_err());
        assert!(Set::from_fields_v1(&json!({"f:y": 1})).is_err());
    }

    #[test]
    fn set_algebra() {
        let mut a = Set::new();
        a.insert(&[field("spec"), field("replicas")]);
        a.insert(&[field("spec"), field("paused")]);
        let mut b = Set::new();
        b.insert(&[field("spec"), field("replicas")]);
        b.insert(&[field("status")]);
        assert_eq!(a.intersection(&b).paths(), vec![Path(vec![field("spec"), field("replicas")])]);
        assert_eq!(a.difference(&b).paths(), vec![Path(vec![field("spec"), field("paused")])]);
        assert_eq!(a.union(&b).paths().len(), 3);
        let mut spec = Set::new();
        spec.insert(&[field("spec")]);
        assert!(a.recursive_difference(&spec).is_empty());
        assert_eq!(a.difference(&spec), a);
    }
}
