//! Field selectors with Kubernetes' semantics (`k8s.io/apimachinery/pkg/fields`, release 1.34).
//!
//! A [`FieldSelector`] is a conjunction of `field=value` / `field!=value` terms, parsed from the
//! `fieldSelector` query parameter. Fields are matched as upstream's `fields.Set`: a missing field
//! reads as the empty string, so `a!=x` matches an object without `a` and `a=` matches one whose `a`
//! is missing or empty.
//!
//! Which fields a resource supports is the server's business: it checks [`FieldSelector::requirements`]
//! (or calls [`FieldSelector::check_fields`]) and answers upstream's `field label not supported: <key>`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

pub use crate::labels::SelectorError;

/// The field every resource supports: the object's name.
pub const METADATA_NAME: &str = "metadata.name";
/// The field every namespaced resource supports: the object's namespace.
pub const METADATA_NAMESPACE: &str = "metadata.namespace";

/// How a [`FieldRequirement`] compares its field (`=` and `==` are the same operator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    /// `field=value` or `field==value`.
    Equals,
    /// `field!=value`.
    NotEquals,
}

/// One term of a field selector: the field, the operator and the unescaped value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field's path as written, e.g. `metadata.name` (never validated or unescaped, as upstream).
    pub field: String,
    /// The comparison.
    pub operator: FieldOperator,
    /// The value, unescaped (may be empty).
    pub value: String,
}

impl FieldRequirement {
    /// Whether a field's value (`""` when the object lacks the field) satisfies the term.
    #[must_use]
    pub fn matches_value(&self, value: &str) -> bool {
        match self.operator {
            FieldOperator::Equals => value == self.value,
            FieldOperator::NotEquals => value != self.value,
        }
    }
}

impl fmt::Display for FieldRequirement {
    /// `field=value` or `field!=value`, the value escaped with [`escape_value`].
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.operator {
            FieldOperator::Equals => "=",
            FieldOperator::NotEquals => "!=",
        };
        write!(f, "{}{op}{}", self.field, escape_value(&self.value))
    }
}

/// A field selector. `Default` is [`FieldSelector::everything`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    /// In the order upstream keeps them: the raw terms sorted as strings.
    requirements: Vec<FieldRequirement>,
    /// Upstream's `fields.Nothing()`.
    nothing: bool,
}

impl FieldSelector {
    /// The selector that matches every object (the empty string).
    #[must_use]
    pub fn everything() -> Self {
        Self::default()
    }

    /// The selector that matches no object (upstream's `fields.Nothing()`); it prints as `""`.
    #[must_use]
    pub fn nothing() -> Self {
        Self { requirements: Vec::new(), nothing: true }
    }

    /// The selector `field=value` (upstream's `OneTermEqualSelector`).
    #[must_use]
    pub fn one_term_equal(field: impl Into<String>, value: impl Into<String>) -> Self {
        let requirement =
            FieldRequirement { field: field.into(), operator: FieldOperator::Equals, value: value.into() };
        Self { requirements: vec![requirement], nothing: false }
    }

    /// Parses the `fieldSelector` query-string syntax (upstream's `fields.ParseSelector`):
    ///
    /// - terms are separated by commas not escaped by a backslash; empty terms are skipped
    ///   (`a=b,` is fine), and terms are sorted as strings before anything else;
    /// - a term splits at the first `!=`, `==` or `=` (checked in that order at each position); the
    ///   field is everything before it, taken literally (no trimming, no unescaping);
    /// - the value is unescaped with [`unescape_value`]: `\\`, `\,` and `\=` are the only escapes, and
    ///   an unescaped `,` or `=` in it is an error;
    /// - a term whose field and value are both empty (`=`, `==`, `!=`) is dropped.
    ///
    /// # Errors
    /// Upstream's messages: `invalid selector: '<selector>'; can't understand '<term>'` for a term
    /// without operator, `invalid field selector: invalid escape sequence: \x`, or
    /// `invalid field selector: unescaped character in value: 61` (the code point, as upstream
    /// prints a Go rune).
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        let mut terms = split_terms(selector);
        terms.sort_unstable();
        let mut requirements = Vec::new();
        for term in terms.into_iter().filter(|t| !t.is_empty()) {
            let Some((field, operator, raw_value)) = split_term(term) else {
                return Err(SelectorError::new(format!(
                    "invalid selector: '{selector}'; can't understand '{term}'"
                )));
            };
            let value = unescape_value(raw_value)?;
            if field.is_empty() && value.is_empty() {
                continue;
            }
            requirements.push(FieldRequirement { field: field.to_owned(), operator, value });
        }
        Ok(Self { requirements, nothing: false })
    }

    /// Whether an object whose fields are these matches (a missing field reads as `""`).
    #[must_use]
    pub fn matches(&self, fields: &BTreeMap<String, String>) -> bool {
        self.matches_with(|field| fields.get(field).map(String::as_str))
    }

    /// [`FieldSelector::matches`] with the fields looked up on demand: `get` answers a field's value,
    /// `None` (read as `""`) when the object has no such field.
    #[must_use]
    pub fn matches_with<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches_value(get(&r.field).unwrap_or_default()))
    }

    /// Whether the selector restricts nothing (upstream's `Empty()`); false for
    /// [`FieldSelector::nothing`].
    #[must_use]
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// Whether this is [`FieldSelector::nothing`].
    #[must_use]
    pub fn matches_nothing(&self) -> bool {
        self.nothing
    }

    /// The terms, for the server to check each field against those the resource supports.
    #[must_use]
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// The value the selector requires `field` to equal (upstream's `RequiresExactMatch`): the first
    /// `=`/`==` term on that field; `!=` terms never answer.
    #[must_use]
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.operator == FieldOperator::Equals && r.field == field)
            .map(|r| r.value.as_str())
    }

    /// The name the selector pins (`metadata.name=<name>`), for the server to narrow its range.
    #[must_use]
    pub fn required_name(&self) -> Option<&str> {
        self.requires_exact_match(METADATA_NAME)
    }

    /// The namespace the selector pins (`metadata.namespace=<ns>`), for the server to narrow its range.
    #[must_use]
    pub fn required_namespace(&self) -> Option<&str> {
        self.requires_exact_match(METADATA_NAMESPACE)
    }

    /// Checks every term's field against those the resource supports.
    ///
    /// # Errors
    /// `field label not supported: <field>` for the first unsupported field, as upstream's
    /// field-label conversion functions answer.
    pub fn check_fields(&self, is_supported: impl Fn(&str) -> bool) -> Result<(), SelectorError> {
        match self.requirements.iter().find(|r| !is_supported(&r.field)) {
            Some(r) => Err(SelectorError::new(format!("field label not supported: {}", r.field))),
            None => Ok(()),
        }
    }

    /// Rewrites every term's field and value (upstream's `Transform`, used for field-label
    /// conversion between API versions); a term rewritten to an empty field and an empty value is
    /// dropped.
    ///
    /// # Errors
    /// The first error `f` returns.
    pub fn transform(
        &self,
        mut f: impl FnMut(&str, &str) -> Result<(String, String), SelectorError>,
    ) -> Result<Self, SelectorError> {
        let mut requirements = Vec::with_capacity(self.requirements.len());
        for r in &self.requirements {
            let (field, value) = f(&r.field, &r.value)?;
            if !(field.is_empty() && value.is_empty()) {
                requirements.push(FieldRequirement { field, operator: r.operator, value });
            }
        }
        Ok(Self { requirements, nothing: self.nothing })
    }
}

impl fmt::Display for FieldSelector {
    /// Upstream's `String()`: the terms in order, joined by `,`, values escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, requirement) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl FromStr for FieldSelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Escapes a literal value for a field selector: `\` → `\\`, `,` → `\,`, `=` → `\=`.
#[must_use]
pub fn escape_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Unescapes a field selector value (the inverse of [`escape_value`]).
///
/// # Errors
/// `invalid field selector: invalid escape sequence: \x` for a backslash before anything but `\`,
/// `,` or `=` (or at the end), and `invalid field selector: unescaped character in value: <code
/// point>` for a bare `,` or `=`.
pub fn unescape_value(value: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped @ ('\\' | ',' | '=')) => out.push(escaped),
                Some(other) => {
                    return Err(SelectorError::new(format!(
                        "invalid field selector: invalid escape sequence: \\{other}"
                    )));
                }
                None => {
                    return Err(SelectorError::new("invalid field selector: invalid escape sequence: \\"));
                }
            },
            ',' | '=' => {
                return Err(SelectorError::new(format!(
                    "invalid field selector: unescaped character in value: {}",
                    u32::from(c)
                )));
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// The comma-separated terms, escaped commas kept (backslash included) inside their term.
fn split_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in selector.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&selector[start..i]);
            start = i + 1;
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// Splits a term at the first position where `!=`, `==` or `=` starts: (field, operator, raw value).
/// Nothing in the field is escaped: `a\=b` is the field `a\` and the value `b`.
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        if let Some(value) = rest.strip_prefix("!=") {
            return Some((&term[..i], FieldOperator::NotEquals, value));
        }
        if let Some(value) = rest.strip_prefix("==") {
            return Some((&term[..i], FieldOperator::Equals, value));
        }
        if let Some(value) = rest.strip_prefix('=') {
            return Some((&term[..i], FieldOperator::Equals, value));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `split_term` answers: field, operator, raw value.
    type Split<'a> = (&'a str, FieldOperator, &'a str);
    /// A field-label conversion for `transform`.
    type Transform = dyn Fn(&str, &str) -> Result<(String, String), SelectorError>;

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn parse(s: &str) -> FieldSelector {
        FieldSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn term(field: &str, operator: FieldOperator, value: &str) -> FieldRequirement {
        FieldRequirement { field: field.to_owned(), operator, value: value.to_owned() }
    }

    #[test]
    fn split_terms_table() {
        let cases: &[(&str, &[&str])] = &[
            ("a", &["a"]),
            ("a=avalue", &["a=avalue"]),
            ("a=avalue,b=bvalue", &["a=avalue", "b=bvalue"]),
            ("a=avalue,b==bvalue,c!=cvalue", &["a=avalue", "b==bvalue", "c!=cvalue"]),
            ("", &[]),
            ("a=a,", &["a=a", ""]),
            (",a=a", &["", "a=a"]),
            (r"k=\,,k2=v2", &[r"k=\,", "k2=v2"]),
            (r"k=\\,k2=v2", &[r"k=\\", "k2=v2"]),
            (r"k=\\\,,k2=v2", &[r"k=\\\,", "k2=v2"]),
            (r"k=\a\b\", &[r"k=\a\b\"]),
            (r"k=\", &[r"k=\"]),
            ("함=수,목=록", &["함=수", "목=록"]),
            (r"k=\함,b", &[r"k=\함", "b"]),
        ];
        for (selector, want) in cases {
            assert_eq!(split_terms(selector), *want, "{selector:?}");
        }
    }

    #[test]
    fn split_term_table() {
        use FieldOperator::{Equals, NotEquals};
        let cases: &[(&str, Option<Split<'_>>)] = &[
            ("a=value", Some(("a", Equals, "value"))),
            ("b==value", Some(("b", Equals, "value"))),
            ("c!=value", Some(("c", NotEquals, "value"))),
            ("", None),
            ("a", None),
            ("a!", None),
            (r"k=\,", Some(("k", Equals, r"\,"))),
            (r"k=\=", Some(("k", Equals, r"\="))),
            (r"k=\\\a\b\=\,\", Some(("k", Equals, r"\\\a\b\=\,\"))),
            ("함=수", Some(("함", Equals, "수"))),
            ("a!b=c", Some(("a!b", Equals, "c"))),
            ("a=!b", Some(("a", Equals, "!b"))),
            ("a===b", Some(("a", Equals, "=b"))),
            ("a!==b", Some(("a", NotEquals, "=b"))),
            ("=", Some(("", Equals, ""))),
            ("!=", Some(("", NotEquals, ""))),
            (r"a\=b", Some((r"a\", Equals, "b"))),
            (" a = b ", Some((" a ", Equals, " b "))),
        ];
        for (input, want) in cases {
            assert_eq!(split_term(input), *want, "{input:?}");
        }
    }

    #[test]
    fn escape_and_unescape() {
        let cases =
            [("", ""), ("a", "a"), ("=", r"\="), (",", r"\,"), (r"\", r"\\"), (r"\=\,\", r"\\\=\\\,\\")];
        for (raw, escaped) in cases {
            assert_eq!(escape_value(raw), escaped);
            assert_eq!(unescape_value(escaped).as_deref(), Ok(raw));
        }
        assert_eq!(unescape_value("!x y\u{e9}").as_deref(), Ok("!x y\u{e9}"));
        let invalid = [
            (r"\", r"invalid field selector: invalid escape sequence: \"),
            (r"\\\", r"invalid field selector: invalid escape sequence: \"),
            (r"\a", r"invalid field selector: invalid escape sequence: \a"),
            (r"\!", r"invalid field selector: invalid escape sequence: \!"),
            ("\\\u{e9}", "invalid field selector: invalid escape sequence: \\\u{e9}"),
            ("a=b", "invalid field selector: unescaped character in value: 61"),
            ("a,b", "invalid field selector: unescaped character in value: 44"),
        ];
        for (input, want) in invalid {
            assert_eq!(unescape_value(input).unwrap_err().to_string(), want, "{input:?}");
        }
    }

    #[test]
    fn good_strings_print_back() {
        for s in ["x=a,y=b,z=c", "", "x!=a,y=b", r"x=a||y\=b", r"x=a\=\=b"] {
            assert_eq!(parse(s).to_string(), s, "{s:?}");
        }
        let normalised = [
            ("x==a", "x=a"),
            ("z=1,a=2", "a=2,z=1"),
            ("a=b,", "a=b"),
            (",,a=b,,", "a=b"),
            ("=,a=b", "a=b"),
            ("!=,==,=", ""),
            (r"k=\,\\", r"k=\,\\"),
            ("metadata.name=foo,metadata.namespace=bar", "metadata.name=foo,metadata.namespace=bar"),
        ];
        for (input, want) in normalised {
            assert_eq!(parse(input).to_string(), want, "{input:?}");
        }
    }

    #[test]
    fn bad_strings_fail() {
        let cases = [
            ("x=a||y=b", "invalid field selector: unescaped character in value: 61"),
            ("x==a==b", "invalid field selector: unescaped character in value: 61"),
            ("x=a,b", "invalid selector: 'x=a,b'; can't understand 'b'"),
            ("x in (a)", "invalid selector: 'x in (a)'; can't understand 'x in (a)'"),
            ("x in (a,b,c)", "invalid selector: 'x in (a,b,c)'; can't understand 'b'"),
            ("x", "invalid selector: 'x'; can't understand 'x'"),
            ("x!", "invalid selector: 'x!'; can't understand 'x!'"),
            (r"x=\", r"invalid field selector: invalid escape sequence: \"),
            (r"x=\n", r"invalid field selector: invalid escape sequence: \n"),
            // Terms are sorted first, so the first bad term in sorted order is reported.
            ("z,a", "invalid selector: 'z,a'; can't understand 'a'"),
            ("b=x=y,a=\\q", r"invalid field selector: invalid escape sequence: \q"),
        ];
        for (input, want) in cases {
            assert_eq!(FieldSelector::parse(input).unwrap_err().to_string(), want, "{input:?}");
        }
    }

    #[test]
    fn parse_is_deterministic() {
        assert_eq!(parse("x=a,a=x"), parse("a=x,x=a"));
        assert_eq!(parse("x=a,a=x").to_string(), "a=x,x=a");
    }

    #[test]
    fn parsed_requirements() {
        use FieldOperator::{Equals, NotEquals};
        let cases: &[(&str, &[FieldRequirement])] = &[
            ("", &[]),
            ("a=b", &[term("a", Equals, "b")]),
            ("a==b", &[term("a", Equals, "b")]),
            ("a!=b", &[term("a", NotEquals, "b")]),
            ("a=", &[term("a", Equals, "")]),
            ("a!=", &[term("a", NotEquals, "")]),
            ("=b", &[term("", Equals, "b")]),
            ("=", &[]),
            (r"a=\,\=\\", &[term("a", Equals, r",=\")]),
            (r"a\,b=c", &[term(r"a\,b", Equals, "c")]),
            (" a = b ", &[term(" a ", Equals, " b ")]),
            (
                "spec.nodeName=n1,status.phase!=Running",
                &[term("spec.nodeName", Equals, "n1"), term("status.phase", NotEquals, "Running")],
            ),
            ("b=1,a!=2,a=3", &[term("a", NotEquals, "2"), term("a", Equals, "3"), term("b", Equals, "1")]),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input).requirements(), *want, "{input:?}");
        }
    }

    #[test]
    fn matches_table() {
        let fieldset = set(&[("foo", "bar"), ("baz", "blah"), ("complex", r"=value\,\")]);
        let cases: &[(&str, &BTreeMap<String, String>, bool)] = &[
            ("", &set(&[("x", "y")]), true),
            ("x=y", &set(&[("x", "y")]), true),
            ("x=y,z=w", &set(&[("x", "y"), ("z", "w")]), true),
            ("x!=y,z!=w", &set(&[("x", "z"), ("z", "a")]), true),
            ("notin=in", &set(&[("notin", "in")]), true),
            ("x=y", &set(&[("x", "z")]), false),
            ("x=y,z=w", &set(&[("x", "w"), ("z", "w")]), false),
            ("x!=y,z!=w", &set(&[("x", "z"), ("z", "w")]), false),
            ("foo=bar", &fieldset, true),
            ("baz=blah", &fieldset, true),
            ("foo=bar,baz=blah", &fieldset, true),
            (r"foo=bar,baz=blah,complex=\=value\\\,\\", &fieldset, true),
            ("foo=blah", &fieldset, false),
            ("baz=bar", &fieldset, false),
            ("foo=bar,foobar=bar,baz=blah", &fieldset, false),
            // A missing field is the empty string.
            ("a!=x", &set(&[]), true),
            ("a=", &set(&[]), true),
            ("a=", &set(&[("a", "")]), true),
            ("a=", &set(&[("a", "x")]), false),
            ("a!=", &set(&[]), false),
            ("a!=", &set(&[("a", "x")]), true),
            ("a=x", &set(&[]), false),
        ];
        for (selector, fields, want) in cases {
            assert_eq!(parse(selector).matches(fields), *want, "{selector:?} vs {fields:?}");
        }
    }

    #[test]
    fn matches_with_lookup() {
        let name = String::from("web-1");
        let sel = parse("metadata.name=web-1,status.phase!=Failed");
        let lookup = |field: &str| match field {
            "metadata.name" => Some(name.as_str()),
            "status.phase" => Some("Running"),
            _ => None,
        };
        assert!(sel.matches_with(lookup));
        assert!(!parse("status.phase=Failed").matches_with(lookup));
        assert!(parse("spec.nodeName=").matches_with(lookup));
    }

    #[test]
    fn everything_and_nothing() {
        let everything = FieldSelector::everything();
        assert!(everything.is_empty());
        assert!(everything.matches(&set(&[("x", "y")])));
        assert_eq!(everything, parse(""));
        assert_eq!(everything, FieldSelector::default());
        assert!(!everything.matches_nothing());

        let nothing = FieldSelector::nothing();
        assert!(!nothing.is_empty());
        assert!(nothing.matches_nothing());
        assert!(!nothing.matches(&set(&[])));
        assert!(!nothing.matches(&set(&[("x", "y")])));
        assert_eq!(nothing.to_string(), "");
        assert!(nothing.requirements().is_empty());
        assert_eq!(nothing.requires_exact_match("x"), None);
        assert!(nothing.transform(|f, v| Ok((f.to_owned(), v.to_owned()))).unwrap().matches_nothing());
    }

    #[test]
    fn one_term_equal() {
        let sel = FieldSelector::one_term_equal("x", "y");
        assert!(sel.matches(&set(&[("x", "y")])));
        assert!(!sel.matches(&set(&[("x", "z")])));
        assert_eq!(sel.to_string(), "x=y");
        assert_eq!(FieldSelector::one_term_equal("x", "a,b=c").to_string(), r"x=a\,b\=c");
        assert!(!sel.is_empty());
    }

    #[test]
    fn requires_exact_match() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("", "test", None),
            ("a=b", "test", None),
            ("test=b", "test", Some("b")),
            ("test=", "test", Some("")),
            ("test==b", "test", Some("b")),
            ("test!=b", "test", None),
            ("test!=", "test", None),
            ("test!=a,test=b", "test", Some("b")),
            ("=x,test=b", "test", Some("b")),
            // The first matching term in sorted order.
            ("test=b,test=a", "test", Some("a")),
        ];
        for (input, field, want) in cases {
            assert_eq!(parse(input).requires_exact_match(field), *want, "{input:?}");
        }
        let sel = parse("metadata.namespace=ns1,metadata.name=pod-a,spec.nodeName=n");
        assert_eq!(sel.required_name(), Some("pod-a"));
        assert_eq!(sel.required_namespace(), Some("ns1"));
        assert_eq!(parse("metadata.name!=x").required_name(), None);
        assert_eq!(parse("metadata.name=a\\,b").required_name(), Some("a,b"));
        assert_eq!(FieldSelector::everything().required_namespace(), None);
    }

    #[test]
    fn check_fields() {
        let supported = |f: &str| matches!(f, METADATA_NAME | METADATA_NAMESPACE | "spec.nodeName");
        assert_eq!(parse("").check_fields(supported), Ok(()));
        assert_eq!(parse("metadata.name=a,spec.nodeName!=b").check_fields(supported), Ok(()));
        assert_eq!(
            parse("metadata.name=a,spec.host=b,zzz=c").check_fields(supported).unwrap_err().to_string(),
            "field label not supported: spec.host"
        );
        // Dropped empty terms are never checked.
        assert_eq!(parse("=,metadata.name=a").check_fields(supported), Ok(()));
        let sel = parse("b=1,a=2");
        let fields: Vec<&str> = sel.requirements().iter().map(|r| r.field.as_str()).collect();
        assert_eq!(fields, ["a", "b"]);
    }

    #[test]
    fn transform() {
        let identity = |f: &str, v: &str| Ok((f.to_owned(), v.to_owned()));
        let cases: Vec<(&str, Box<Transform>, &str, bool)> = vec![
            ("", Box::new(identity), "", true),
            ("a=b,c=d", Box::new(identity), "a=b,c=d", false),
            (
                "a=b,c=d",
                Box::new(|f, v| Ok(if f == "a" { ("e".into(), "f".into()) } else { (f.into(), v.into()) })),
                "e=f,c=d",
                false,
            ),
            ("a=b", Box::new(|_, _| Ok((String::new(), String::new()))), "", true),
            (
                "a=b,c=d,e=f",
                Box::new(|f, v| {
                    Ok(if f == "c" { (String::new(), String::new()) } else { (f.into(), v.into()) })
                }),
                "a=b,e=f",
                false,
            ),
            ("a!=b", Box::new(|_, v| Ok(("x".into(), v.into()))), "x!=b", false),
        ];
        for (input, f, want, empty) in cases {
            let got = parse(input).transform(f).unwrap();
            assert_eq!(got.to_string(), want, "{input:?}");
            assert_eq!(got.is_empty(), empty, "{input:?}");
        }
        let err = parse("a=b")
            .transform(|f, _| Err(SelectorError::new(format!("field label not supported: {f}"))))
            .unwrap_err();
        assert_eq!(err.message(), "field label not supported: a");
    }

    #[test]
    fn odd_inputs_never_panic() {
        let inputs = [
            ",,,,".to_owned(),
            "\\".to_owned(),
            "\\\\\\".to_owned(),
            "=\\".to_owned(),
            "!".to_owned(),
            "!!!==".to_owned(),
            "\u{0}=\u{0}".to_owned(),
            "\u{1f600}=\u{1f600},\u{1f600}!=\u{e9}".to_owned(),
            "a=\\\u{1f600}".to_owned(),
            "(((=)))".to_owned(),
            "k".repeat(100_000),
            format!("a={}", "\\,".repeat(50_000)),
            "a=b,".repeat(20_000),
            "=".repeat(10_001),
        ];
        for input in &inputs {
            if let Ok(sel) = FieldSelector::parse(input) {
                let reparsed = FieldSelector::parse(&sel.to_string()).unwrap();
                assert_eq!(sorted(&reparsed), sorted(&sel), "{input:?}");
            }
        }
        assert_eq!(parse(&format!("a={}", "\\,".repeat(50_000))).requirements()[0].value.len(), 50_000);
        assert_eq!(parse(&"a=b,".repeat(20_000)).requirements().len(), 20_000);
    }

    fn sorted(sel: &FieldSelector) -> Vec<(String, FieldOperator, String)> {
        let mut terms: Vec<_> =
            sel.requirements().iter().map(|r| (r.field.clone(), r.operator, r.value.clone())).collect();
        terms.sort_by(|a, b| {
            (&a.0, &a.2, a.1 == FieldOperator::Equals).cmp(&(&b.0, &b.2, b.1 == FieldOperator::Equals))
        });
        terms
    }

    /// Deterministic pseudo-random inputs (xorshift): parsing never panics, and whatever parses
    /// prints to a string that parses back to the same terms.
    #[test]
    fn fuzz_parse_round_trips() {
        const ALPHABET: &[&str] =
            &["a", "b", "=", "==", "!=", "!", ",", "\\", "\\,", "\\=", "\\\\", " ", "\u{e9}", "\u{0}", "."];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut parsed = 0;
        for _ in 0..20_000 {
            let len = next() % 10;
            let input: String = (0..len)
                .map(|_| ALPHABET[usize::try_from(next() % ALPHABET.len() as u64).unwrap_or(0)])
                .collect();
            let Ok(sel) = FieldSelector::parse(&input) else { continue };
            parsed += 1;
            let printed = sel.to_string();
            let reparsed = FieldSelector::parse(&printed)
                .unwrap_or_else(|e| panic!("{input:?} printed as {printed:?}: {e}"));
            assert_eq!(sorted(&reparsed), sorted(&sel), "{input:?} printed as {printed:?}");
            let fields = set(&[("a", "b"), ("b", "")]);
            assert_eq!(reparsed.matches(&fields), sel.matches(&fields), "{input:?}");
        }
        assert!(parsed > 100, "only {parsed} inputs parsed");
    }
}
