//! Label selectors with Kubernetes' semantics (`k8s.io/apimachinery/pkg/labels`, release 1.34).
//!
//! A [`LabelSelector`] is a conjunction of [`Requirement`]s. It comes from the `labelSelector` query
//! parameter ([`LabelSelector::parse`]), from a `metav1.LabelSelector` in an object
//! ([`LabelSelector::from_k8s`], [`LabelSelector::from_k8s_option`]) or from a plain label set
//! ([`LabelSelector::from_set`]).
//!
//! Two selectors match no requirement at all and must not be confused:
//! - [`LabelSelector::everything`] (the empty string, an empty `metav1.LabelSelector`) matches every
//!   object;
//! - [`LabelSelector::nothing`] (an absent `metav1.LabelSelector`, e.g. a Service without selector)
//!   matches no object.
//!
//! Error messages are upstream's, word for word, including the field-path prefixes of its validation
//! errors (`<nil>: Invalid value: ...` for keys, `values[0][key]: Invalid value: ...` for values).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;

/// An invalid label or field selector; the message is upstream's (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SelectorError {
    message: String,
}

impl SelectorError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into() }
    }

    /// The message, as upstream words it.
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// How a [`Requirement`] relates a label's key to its values (upstream's `selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `key=value`: the label exists and has this value.
    Equals,
    /// `key==value`: the same as [`Operator::Equals`], kept apart only to print back as written.
    DoubleEquals,
    /// `key!=value`: the label is absent or has another value.
    NotEquals,
    /// `key in (a,b)`: the label exists and has one of the values.
    In,
    /// `key notin (a,b)`: the label is absent or has none of the values.
    NotIn,
    /// `key`: the label exists.
    Exists,
    /// `!key`: the label is absent.
    DoesNotExist,
    /// `key>n`: the label exists and is an integer greater than `n`.
    GreaterThan,
    /// `key<n`: the label exists and is an integer less than `n`.
    LessThan,
}

impl Operator {
    /// Upstream's name for the operator (`=`, `==`, `!=`, `in`, `notin`, `exists`, `!`, `gt`, `lt`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Equals => "=",
            Self::DoubleEquals => "==",
            Self::NotEquals => "!=",
            Self::In => "in",
            Self::NotIn => "notin",
            Self::Exists => "exists",
            Self::DoesNotExist => "!",
            Self::GreaterThan => "gt",
            Self::LessThan => "lt",
        }
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The binary operators, in the order upstream lists them in "expected: ..." messages.
const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

/// One condition on one label: a key, an operator and (for most operators) values.
///
/// Built by [`Requirement::new`], which validates it as upstream's `NewRequirement` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    /// As given: the parser hands them over sorted and deduplicated, `metav1.LabelSelector` as written.
    values: Vec<String>,
}

impl Requirement {
    /// Validates and builds a requirement (upstream's `NewRequirement`):
    /// - the key is a qualified name (`[prefix/]name`, see the module docs);
    /// - `In`/`NotIn` need at least one value, `Equals`/`DoubleEquals`/`NotEquals` exactly one,
    ///   `Exists`/`DoesNotExist` none, `GreaterThan`/`LessThan` exactly one that parses as an `i64`;
    /// - every value is a valid label value (empty is valid).
    ///
    /// # Errors
    /// Every rule broken, as upstream's aggregated field errors (`[a, b]` when more than one).
    pub fn new(
        key: impl Into<String>,
        operator: Operator,
        values: Vec<String>,
    ) -> Result<Self, SelectorError> {
        Self::validated(key.into(), operator, values, false)
    }

    /// `NewRequirement`; `nil_values` renders an empty value list as Go's nil slice (`null`), which
    /// is what `metav1.LabelSelectorAsSelector` passes for an expression without values.
    fn validated(
        key: String,
        operator: Operator,
        values: Vec<String>,
        nil_values: bool,
    ) -> Result<Self, SelectorError> {
        let mut errors = Vec::new();
        if let Err(detail) = validate_label_key(&key) {
            errors.push(invalid("key", &go_quote(&key), &detail));
        }
        let all_values = || go_json_strings(&values, nil_values);
        match operator {
            Operator::In | Operator::NotIn if values.is_empty() => errors.push(invalid(
                "values",
                &all_values(),
                "for 'in', 'notin' operators, values set can't be empty",
            )),
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals if values.len() != 1 => errors
                .push(invalid(
                    "values",
                    &all_values(),
                    "exact-match compatibility requires one single value",
                )),
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => errors.push(invalid(
                "values",
                &all_values(),
                "values set must be empty for exists and does not exist",
            )),
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errors.push(invalid(
                        "values",
                        &all_values(),
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    ));
                }
                for (i, value) in values.iter().enumerate() {
                    if value.parse::<i64>().is_err() {
                        errors.push(invalid(
                            &format!("values[{i}]"),
                            &go_quote(value),
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        ));
                    }
                }
            }
            _ => {}
        }
        for (i, value) in values.iter().enumerate() {
            if let Err(detail) = validate_label_value(value) {
                errors.push(invalid(&format!("values[{i}][{key}]"), &go_quote(value), &detail));
            }
        }
        if errors.is_empty() {
            Ok(Self { key, operator, values })
        } else {
            Err(SelectorError::new(aggregate(errors)))
        }
    }

    /// The label key.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The operator.
    #[must_use]
    pub fn operator(&self) -> Operator {
        self.operator
    }

    /// The values, in the order they were given (sorted and deduplicated when parsed from a string).
    #[must_use]
    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Whether a label set satisfies the requirement. `!=` and `notin` match a set WITHOUT the key
    /// (as upstream); `=`, `==`, `in`, `>` and `<` need the key; `>`/`<` need both the label and the
    /// requirement's value to parse as `i64`.
    #[must_use]
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let label = labels.get(&self.key);
        let has_value = |v: &String| self.values.contains(v);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => label.is_some_and(has_value),
            Operator::NotIn | Operator::NotEquals => !label.is_some_and(has_value),
            Operator::Exists => label.is_some(),
            Operator::DoesNotExist => label.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(Ok(actual)) = label.map(|l| l.parse::<i64>()) else { return false };
                let [bound] = self.values.as_slice() else { return false };
                let Ok(bound) = bound.parse::<i64>() else { return false };
                if self.operator == Operator::GreaterThan { actual > bound } else { actual < bound }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// Upstream's `Requirement.String()`: `!k`, `k`, `k=v`, `k==v`, `k!=v`, `k>n`, `k<n`,
    /// `k in (a,b)`, `k notin (a,b)`, with several values printed sorted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.operator {
            Operator::Exists => return f.write_str(&self.key),
            Operator::DoesNotExist => return write!(f, "!{}", self.key),
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
            Operator::In => " in (",
            Operator::NotIn => " notin (",
        };
        f.write_str(&self.key)?;
        f.write_str(op)?;
        let mut values: Vec<&str> = self.values.iter().map(String::as_str).collect();
        values.sort_unstable();
        f.write_str(&values.join(","))?;
        if matches!(self.operator, Operator::In | Operator::NotIn) {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// A label selector: all of its requirements must match (or, for [`LabelSelector::nothing`], no set
/// matches). `Default` is [`LabelSelector::everything`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    inner: Inner,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Inner {
    /// Requirements sorted by key (stable: equal keys keep their order).
    Requirements(Vec<Requirement>),
    /// Upstream's `labels.Nothing()`.
    Nothing,
}

impl Default for Inner {
    fn default() -> Self {
        Self::Requirements(Vec::new())
    }
}

impl LabelSelector {
    /// The selector that matches every label set (upstream's `labels.Everything()`; the empty string).
    #[must_use]
    pub fn everything() -> Self {
        Self::default()
    }

    /// The selector that matches no label set (upstream's `labels.Nothing()`; what an absent
    /// `metav1.LabelSelector` converts to). It prints as the empty string, like upstream's.
    #[must_use]
    pub fn nothing() -> Self {
        Self { inner: Inner::Nothing }
    }

    fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Self { inner: Inner::Requirements(requirements) }
    }

    /// Parses the `labelSelector` query-string syntax (upstream's `labels.Parse`):
    ///
    /// ```text
    /// <selector>    ::= "" | <requirement> { "," <requirement> }
    /// <requirement> ::= [ "!" ] KEY
    ///                 | KEY ( "=" | "==" | "!=" | ">" | "<" ) [ VALUE ]
    ///                 | KEY ( "in" | "notin" ) "(" [ VALUE { "," [ VALUE ] } ] ")"
    /// ```
    ///
    /// Blanks (space, tab, CR, LF) separate tokens and are otherwise ignored; a missing value is the
    /// empty string (`x=`, `x in ()`, `x in (a,)`); values of `in`/`notin` are kept sorted and
    /// deduplicated; `>`/`<` need an `i64` that is also a valid label value (so `x<-1` is an error,
    /// as upstream). Requirements are sorted by key.
    ///
    /// # Errors
    /// Upstream's message: a syntax error (`found ')', expected: ...`), or an invalid key or value
    /// (`unable to parse requirement: ...`).
    pub fn parse(selector: &str) -> Result<Self, SelectorError> {
        Parser::new(selector).parse().map(Self::from_requirements).map_err(SelectorError::new)
    }

    /// A selector matching exactly this label set (`key=value` for each entry; upstream's
    /// `ValidatedSelectorFromSet`). The empty set gives [`LabelSelector::everything`].
    ///
    /// # Errors
    /// The first invalid key or value, as [`Requirement::new`] reports it.
    pub fn from_set(labels: &BTreeMap<String, String>) -> Result<Self, SelectorError> {
        let requirements = labels
            .iter()
            .map(|(k, v)| Requirement::new(k.clone(), Operator::Equals, vec![v.clone()]))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::from_requirements(requirements))
    }

    /// Converts a `metav1.LabelSelector` (upstream's `metav1.LabelSelectorAsSelector` for a non-nil
    /// selector): `matchLabels` become `key=value`, `matchExpressions` use `In`/`NotIn` (values
    /// required) and `Exists`/`DoesNotExist` (values forbidden). With neither `matchLabels` nor
    /// `matchExpressions` the selector is [`LabelSelector::everything`]. An absent selector is a
    /// different thing: see [`LabelSelector::from_k8s_option`].
    ///
    /// # Errors
    /// `"Foo" is not a valid label selector operator`, or the first invalid requirement.
    pub fn from_k8s(selector: &metav1::LabelSelector) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::validated(
                key.clone(),
                Operator::Equals,
                vec![value.clone()],
                false,
            )?);
        }
        for expr in selector.match_expressions.iter().flatten() {
            let operator = match expr.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(SelectorError::new(format!(
                        "{} is not a valid label selector operator",
                        go_quote(other)
                    )));
                }
            };
            let values = expr.values.clone().unwrap_or_default();
            requirements.push(Requirement::validated(expr.key.clone(), operator, values, true)?);
        }
        Ok(Self::from_requirements(requirements))
    }

    /// [`LabelSelector::from_k8s`] for an optional field: `None` (Go's nil selector) gives
    /// [`LabelSelector::nothing`], which matches no object, whereas `Some` of an empty selector gives
    /// [`LabelSelector::everything`].
    ///
    /// # Errors
    /// As [`LabelSelector::from_k8s`].
    pub fn from_k8s_option(selector: Option<&metav1::LabelSelector>) -> Result<Self, SelectorError> {
        selector.map_or_else(|| Ok(Self::nothing()), Self::from_k8s)
    }

    /// This selector with one more requirement (upstream's `Add`); [`LabelSelector::nothing`] stays
    /// nothing.
    #[must_use]
    pub fn with_requirement(self, requirement: Requirement) -> Self {
        match self.inner {
            Inner::Nothing => self,
            Inner::Requirements(mut requirements) => {
                requirements.push(requirement);
                Self::from_requirements(requirements)
            }
        }
    }

    /// Whether the label set satisfies every requirement (always for [`LabelSelector::everything`],
    /// never for [`LabelSelector::nothing`]).
    #[must_use]
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match &self.inner {
            Inner::Nothing => false,
            Inner::Requirements(requirements) => requirements.iter().all(|r| r.matches(labels)),
        }
    }

    /// Whether the selector restricts nothing (upstream's `Empty()`): true for
    /// [`LabelSelector::everything`], false for [`LabelSelector::nothing`].
    #[must_use]
    pub fn is_empty(&self) -> bool {
        matches!(&self.inner, Inner::Requirements(r) if r.is_empty())
    }

    /// Whether this is [`LabelSelector::nothing`] (upstream's `MatchesNothing`). A selector whose
    /// requirements contradict each other (`a,!a`) is not.
    #[must_use]
    pub fn matches_nothing(&self) -> bool {
        matches!(self.inner, Inner::Nothing)
    }

    /// The requirements, sorted by key; `None` for [`LabelSelector::nothing`] (upstream's
    /// `selectable == false`).
    #[must_use]
    pub fn requirements(&self) -> Option<&[Requirement]> {
        match &self.inner {
            Inner::Nothing => None,
            Inner::Requirements(requirements) => Some(requirements),
        }
    }

    /// The single value the selector requires for `label` (upstream's `RequiresExactMatch`): looks at
    /// the first requirement on that key only, and answers for `=`, `==` and a one-value `in`.
    #[must_use]
    pub fn requires_exact_match(&self, label: &str) -> Option<&str> {
        let requirement = self.requirements()?.iter().find(|r| r.key == label)?;
        match (requirement.operator, requirement.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [value]) => Some(value),
            _ => None,
        }
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical string (upstream's `String()`): requirements sorted by key, joined by `,`.
    /// [`LabelSelector::nothing`] prints as the empty string, as upstream's does.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, requirement) in self.requirements().unwrap_or_default().iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

impl FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

// ---- Lexer: upstream's byte-wise lexer, NUL bytes included (they end a token, like its `read()`). ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Token> {
    Some(match s {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::DoesNotExist,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "in" => Token::In,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "notin" => Token::NotIn,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special_symbol(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

struct Lexer<'a> {
    s: &'a str,
    pos: usize,
}

impl<'a> Lexer<'a> {
    /// The next byte, or 0 at the end (a NUL byte in the input reads the same).
    fn read(&mut self) -> u8 {
        match self.s.as_bytes().get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                b
            }
            None => 0,
        }
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    /// Every token boundary is an ASCII byte, so slices between them are valid `str` slices.
    fn slice(&self, start: usize, end: usize) -> &'a str {
        self.s.get(start..end).unwrap_or_default()
    }

    fn lex(&mut self) -> (Token, String) {
        let mut ch = self.read();
        while is_whitespace(ch) {
            ch = self.read();
        }
        if ch == 0 {
            return (Token::EndOfString, String::new());
        }
        self.unread();
        if is_special_symbol(ch) { self.scan_special_symbol() } else { self.scan_id_or_keyword() }
    }

    fn scan_id_or_keyword(&mut self) -> (Token, String) {
        let start = self.pos;
        let mut end = start;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if is_special_symbol(ch) || is_whitespace(ch) {
                self.unread();
                break;
            }
            end = self.pos;
        }
        let literal = self.slice(start, end);
        (keyword(literal).unwrap_or(Token::Identifier), literal.to_owned())
    }

    /// The longest run of special symbols that is an operator (`!=` rather than `!`, `==` rather
    /// than `=`); a symbol that would not extend it is left for the next token.
    fn scan_special_symbol(&mut self) -> (Token, String) {
        let start = self.pos;
        let mut last: Option<(Token, &str)> = None;
        loop {
            let ch = self.read();
            if ch == 0 {
                break;
            }
            if !is_special_symbol(ch) {
                self.unread();
                break;
            }
            let buffer = self.slice(start, self.pos);
            if let Some(token) = keyword(buffer) {
                last = Some((token, buffer));
            } else if last.is_some() {
                self.unread();
                break;
            }
        }
        match last {
            Some((token, literal)) => (token, literal.to_owned()),
            None => {
                (Token::Error, format!("error expected: keyword found '{}'", self.slice(start, self.pos)))
            }
        }
    }
}

// ---- Parser: upstream's recursive descent over the scanned tokens. ----

/// In a `Values` context the keywords `in` and `notin` are plain identifiers (`in in (in)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    position: usize,
}

impl Parser {
    fn new(selector: &str) -> Self {
        let mut lexer = Lexer { s: selector, pos: 0 };
        let mut items = Vec::new();
        loop {
            let item = lexer.lex();
            let end = item.0 == Token::EndOfString;
            items.push(item);
            if end {
                break;
            }
        }
        Self { items, position: 0 }
    }

    fn lookahead(&self, context: Context) -> (Token, &str) {
        match self.items.get(self.position) {
            None => (Token::EndOfString, ""),
            Some((Token::In | Token::NotIn, literal)) if context == Context::Values => {
                (Token::Identifier, literal)
            }
            Some((token, literal)) => (*token, literal),
        }
    }

    fn consume(&mut self, context: Context) -> (Token, String) {
        let (token, literal) = self.lookahead(context);
        let item = (token, literal.to_owned());
        self.position += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (token, literal) = self.lookahead(Context::Values);
            match token {
                Token::Identifier | Token::DoesNotExist => {
                    let requirement =
                        self.parse_requirement().map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(requirement);
                    let (token, literal) = self.consume(Context::Values);
                    match token {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (next, literal) = self.lookahead(Context::Values);
                            if next != Token::Identifier && next != Token::DoesNotExist {
                                return Err(format!("found '{literal}', expected: identifier after ','"));
                            }
                        }
                        _ => return Err(format!("found '{literal}', expected: ',' or 'end of string'")),
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => return Err(format!("found '{literal}', expected: !, identifier, or 'end of string'")),
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, operator) = self.parse_key_and_infer_operator()?;
        if let Some(operator) = operator {
            return Requirement::validated(key, operator, Vec::new(), false).map_err(|e| e.message);
        }
        let operator = self.parse_operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::validated(key, operator, values.into_iter().collect(), false).map_err(|e| e.message)
    }

    /// The key, and `Exists`/`DoesNotExist` when no binary operator follows (a `!key` followed by
    /// something else is still `DoesNotExist`: the caller then fails on the unexpected token).
    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let (mut token, mut literal) = self.consume(Context::Values);
        let negated = token == Token::DoesNotExist;
        if negated {
            (token, literal) = self.consume(Context::Values);
        }
        if token != Token::Identifier {
            return Err(format!("found '{literal}', expected: identifier"));
        }
        if let Err(detail) = validate_label_key(&literal) {
            return Err(invalid("<nil>", &go_quote(&literal), &detail));
        }
        if negated {
            return Ok((literal, Some(Operator::DoesNotExist)));
        }
        let (next, _) = self.lookahead(Context::Values);
        let exists = matches!(next, Token::EndOfString | Token::Comma);
        Ok((literal, exists.then_some(Operator::Exists)))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (token, literal) = self.consume(Context::KeyAndOperator);
        Ok(match token {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => return Err(format!("found '{literal}', expected: {BINARY_OPERATORS}")),
        })
    }

    /// `( ... )` of `in`/`notin`: `()` is the one empty value.
    fn parse_values(&mut self) -> Result<BTreeSet<String>, String> {
        let (token, literal) = self.consume(Context::Values);
        if token != Token::OpenPar {
            return Err(format!("found '{literal}' expected: '('"));
        }
        let (token, literal) = self.lookahead(Context::Values);
        match token {
            Token::Identifier | Token::Comma => {
                let literal = literal.to_owned();
                let values = self.parse_identifiers_list()?;
                if self.consume(Context::Values).0 != Token::ClosedPar {
                    return Err(format!("found '{literal}', expected: ')'"));
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(BTreeSet::from([String::new()]))
            }
            _ => Err(format!("found '{literal}', expected: ',', ')' or identifier")),
        }
    }

    /// Comma-separated, possibly empty values, up to (not including) the `)`. Consecutive commas
    /// stand for the empty value: `(a,,)` is `{"", a}` (upstream fixed this in 1.35; 1.34 rejected
    /// `(a,,)` while accepting `(a,,,)`).
    fn parse_identifiers_list(&mut self) -> Result<BTreeSet<String>, String> {
        let mut values = BTreeSet::new();
        loop {
            let (token, literal) = self.consume(Context::Values);
            match token {
                Token::Identifier => {
                    values.insert(literal);
                    let (next, literal) = self.lookahead(Context::Values);
                    match next {
                        Token::Comma => {}
                        Token::ClosedPar => return Ok(values),
                        _ => return Err(format!("found '{literal}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.insert(String::new());
                    }
                    match self.lookahead(Context::Values).0 {
                        Token::ClosedPar => {
                            values.insert(String::new());
                            return Ok(values);
                        }
                        Token::Comma => {
                            values.insert(String::new());
                        }
                        _ => {}
                    }
                }
                _ => return Err(format!("found '{literal}', expected: ',', or identifier")),
            }
        }
    }

    /// The one value of `=`, `==`, `!=`, `>`, `<`: empty when the requirement ends right there.
    fn parse_exact_value(&mut self) -> Result<BTreeSet<String>, String> {
        let (token, _) = self.lookahead(Context::Values);
        if matches!(token, Token::EndOfString | Token::Comma) {
            return Ok(BTreeSet::from([String::new()]));
        }
        let (token, literal) = self.consume(Context::Values);
        if token == Token::Identifier {
            Ok(BTreeSet::from([literal]))
        } else {
            Err(format!("found '{literal}', expected: identifier"))
        }
    }
}

// ---- Validation: upstream's IsQualifiedName / IsValidLabelValue (crate::validation::names), with
// the problems `; `-joined as upstream's validateLabelKey / validateLabelValue join them. ----

/// A label key (`[prefix/]name`).
fn validate_label_key(key: &str) -> Result<(), String> {
    let errors = crate::validation::names::qualified_name(key);
    if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
}

/// A label value (empty, or at most 63 bytes shaped like a name part).
fn validate_label_value(value: &str) -> Result<(), String> {
    let errors = crate::validation::names::label_value(value);
    if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
}

/// Upstream's `field.Invalid(path, value, detail).Error()`; `bad_value` is already rendered.
fn invalid(path: &str, bad_value: &str, detail: &str) -> String {
    format!("{path}: Invalid value: {bad_value}: {detail}")
}

/// Upstream's aggregate error text: one error alone, else `[a, b]` without duplicates.
fn aggregate(errors: Vec<String>) -> String {
    let mut unique: Vec<String> = Vec::with_capacity(errors.len());
    for error in errors {
        if !unique.contains(&error) {
            unique.push(error);
        }
    }
    if unique.len() == 1 { unique.swap_remove(0) } else { format!("[{}]", unique.join(", ")) }
}

/// Go's `%q` of a string (`strconv.Quote`). Go's `unicode.IsPrint` is approximated: control
/// characters, blanks other than the space, and the common invisible format characters are escaped.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if is_go_printable(c) => out.push(c),
            c if u32::from(c) < 0x1_0000 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\U{:08x}", u32::from(c));
            }
        }
    }
    out.push('"');
    out
}

fn is_go_printable(c: char) -> bool {
    let invisible = matches!(
        c,
        '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{e000}'..='\u{f8ff}'
            | '\u{f0000}'..
    );
    c == ' ' || !(c.is_control() || c.is_whitespace() || invisible)
}

/// Go's `json.Marshal` of a `[]string` (`null` for a nil slice; `<`, `>`, `&`, U+2028 and U+2029
/// escaped as Go does).
fn go_json_strings(values: &[String], nil_if_empty: bool) -> String {
    if values.is_empty() && nil_if_empty {
        return "null".to_owned();
    }
    let mut out = String::from("[");
    for (i, value) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        for c in value.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if u32::from(c) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                    let _ = write!(out, "\\u{:04x}", u32::from(c));
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push(']');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    const NAME_PART_REGEX: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const VALUE_REGEX: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

    /// Label pairs.
    type Pairs<'a> = &'a [(&'a str, &'a str)];
    /// A `matchExpressions` entry: key, operator, values.
    type Expression<'a> = (&'a str, &'a str, Option<&'a [&'a str]>);

    fn set(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn req(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement::new(key, operator, values.iter().map(|v| (*v).to_owned()).collect())
            .unwrap_or_else(|e| panic!("requirement {key} {operator}: {e}"))
    }

    fn parse(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    fn parse_err(s: &str) -> String {
        match LabelSelector::parse(s) {
            Ok(sel) => panic!("{s:?} parsed as {sel:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn lex_all(s: &str) -> Vec<Token> {
        Parser::new(s).items.into_iter().map(|(t, _)| t).collect()
    }

    #[test]
    fn good_strings_print_back_without_blanks() {
        for s in ["x=a,y=b,z=c", "", "x!=a,y=b", "x=", "x= ", "x=,z= ", "x= ,z= ", "!x", "x>1", "x>1,z<5"] {
            assert_eq!(parse(s).to_string(), s.replace(' ', ""), "{s:?}");
        }
    }

    #[test]
    fn bad_strings_fail() {
        for s in ["x=a||y=b", "x==a==b", "!x=a", "x<a"] {
            assert!(LabelSelector::parse(s).is_err(), "{s:?}");
        }
    }

    #[test]
    fn parse_is_deterministic() {
        assert_eq!(parse("x=a,a=x"), parse("a=x,x=a"));
        assert_eq!(parse("x=a,a=x").to_string(), "a=x,x=a");
    }

    #[test]
    fn selector_matches_table() {
        let cases: &[(&str, Pairs<'_>, bool)] = &[
            ("", &[("x", "y")], true),
            ("x=y", &[("x", "y")], true),
            ("x=y,z=w", &[("x", "y"), ("z", "w")], true),
            ("x!=y,z!=w", &[("x", "z"), ("z", "a")], true),
            ("notin=in", &[("notin", "in")], true),
            ("x", &[("x", "z")], true),
            ("!x", &[("y", "z")], true),
            ("x>1", &[("x", "2")], true),
            ("x<1", &[("x", "0")], true),
            ("x=z", &[], false),
            ("x=y", &[("x", "z")], false),
            ("x=y,z=w", &[("x", "w"), ("z", "w")], false),
            ("x!=y,z!=w", &[("x", "z"), ("z", "w")], false),
            ("x", &[("y", "z")], false),
            ("!x", &[("x", "z")], false),
            ("x>1", &[("x", "0")], false),
            ("x<1", &[("x", "2")], false),
            ("foo=bar", &[("foo", "bar"), ("baz", "blah")], true),
            ("baz=blah", &[("foo", "bar"), ("baz", "blah")], true),
            ("foo=bar,baz=blah", &[("foo", "bar"), ("baz", "blah")], true),
            ("foo=blah", &[("foo", "bar"), ("baz", "blah")], false),
            ("baz=bar", &[("foo", "bar"), ("baz", "blah")], false),
            ("foo=bar,foobar=bar,baz=blah", &[("foo", "bar"), ("baz", "blah")], false),
            // != and notin match objects without the key; = and in need it.
            ("x!=a", &[], true),
            ("x notin (a,b)", &[], true),
            ("x notin (a,b)", &[("x", "a")], false),
            ("x notin (a,b)", &[("x", "c")], true),
            ("x in (a,b)", &[], false),
            ("x in (a,b)", &[("x", "b")], true),
            ("x=", &[], false),
            ("x=", &[("x", "")], true),
            ("x==y", &[("x", "y")], true),
            ("x!=", &[("x", "")], false),
            ("x!=", &[], true),
            ("x in ()", &[("x", "")], true),
            ("x in (a,)", &[("x", "")], true),
            ("x notin ()", &[("x", "")], false),
            // Gt/Lt: integers only, missing keys never match.
            ("x>1", &[], false),
            ("x<1", &[], false),
            ("x>1", &[("x", "v2")], false),
            ("x>1", &[("x", "+2")], true),
            ("x<0", &[("x", "-4")], true),
            ("x>9223372036854775806", &[("x", "9223372036854775807")], true),
            ("x<1", &[("x", "99999999999999999999")], false),
            ("x>1", &[("x", "1")], false),
            ("x<1", &[("x", "1")], false),
            ("a,!a", &[("a", "")], false),
            ("a,!a", &[], false),
            ("a=b,a!=b", &[("a", "b")], false),
        ];
        for (selector, labels, want) in cases {
            assert_eq!(parse(selector).matches(&set(labels)), *want, "{selector:?} vs {labels:?}");
        }
    }

    #[test]
    fn everything_and_nothing() {
        let everything = LabelSelector::everything();
        assert!(everything.matches(&set(&[("x", "y")])));
        assert!(everything.matches(&BTreeMap::new()));
        assert!(everything.is_empty());
        assert!(!everything.matches_nothing());
        assert_eq!(everything, LabelSelector::default());
        assert_eq!(everything, parse(""));
        assert_eq!(everything.requirements(), Some(&[][..]));

        let nothing = LabelSelector::nothing();
        assert!(!nothing.matches(&set(&[("x", "y")])));
        assert!(!nothing.matches(&BTreeMap::new()));
        assert!(!nothing.is_empty());
        assert!(nothing.matches_nothing());
        assert_eq!(nothing.to_string(), "");
        assert_eq!(nothing.requirements(), None);
        assert_eq!(nothing.requires_exact_match("x"), None);
        assert!(nothing.with_requirement(req("x", Operator::Exists, &[])).matches_nothing());
    }

    #[test]
    fn matches_nothing_only_for_nothing() {
        for s in [
            "",
            "a",
            "!a",
            "a=b",
            "a!=b",
            "a in (b)",
            "a notin (b)",
            "a,!a",
            "a=b,a!=b",
            "a in (b),a notin (b)",
        ] {
            assert!(!parse(s).matches_nothing(), "{s:?}");
        }
        assert!(!LabelSelector::from_set(&BTreeMap::new()).unwrap().matches_nothing());
        assert!(!LabelSelector::from_set(&set(&[("key", "value")])).unwrap().matches_nothing());
    }

    #[test]
    fn lexer_single_tokens() {
        let cases = [
            ("", Token::EndOfString),
            (",", Token::Comma),
            ("notin", Token::NotIn),
            ("in", Token::In),
            ("=", Token::Equals),
            ("==", Token::DoubleEquals),
            (">", Token::GreaterThan),
            ("<", Token::LessThan),
            ("!", Token::DoesNotExist),
            ("!=", Token::NotEquals),
            ("(", Token::OpenPar),
            (")", Token::ClosedPar),
            ("~", Token::Identifier),
            ("||", Token::Identifier),
        ];
        for (s, want) in cases {
            let (token, literal) = Lexer { s, pos: 0 }.lex();
            assert_eq!(token, want, "{s:?}");
            assert_eq!(literal, s, "{s:?}");
        }
    }

    #[test]
    fn lexer_sequences() {
        use Token::{
            ClosedPar as C, Comma as K, DoesNotExist as Not, DoubleEquals as DEq, EndOfString as End,
            Equals as Eq, GreaterThan as Gt, Identifier as Id, In, LessThan as Lt, NotEquals as Ne, NotIn,
            OpenPar as O,
        };
        let cases: &[(&str, &[Token])] = &[
            ("key in ( value )", &[Id, In, O, Id, C, End]),
            ("key notin ( value )", &[Id, NotIn, O, Id, C, End]),
            ("key in ( value1, value2 )", &[Id, In, O, Id, K, Id, C, End]),
            ("key", &[Id, End]),
            ("!key", &[Not, Id, End]),
            ("()", &[O, C, End]),
            ("", &[End]),
            ("x in (),y", &[Id, In, O, C, K, Id, End]),
            ("== != (), = notin", &[DEq, Ne, O, C, K, Eq, NotIn, End]),
            ("key>2", &[Id, Gt, Id, End]),
            ("key<1", &[Id, Lt, Id, End]),
            // Longest operator wins, the rest starts the next token.
            ("===", &[DEq, Eq, End]),
            ("!!=", &[Not, Ne, End]),
            (">=", &[Gt, Eq, End]),
            ("=!", &[Eq, Not, End]),
            ("((", &[O, O, End]),
            // A NUL byte ends the token it is in; at a token start it ends the input.
            ("ab\0cd", &[Id, Id, End]),
            ("x=\0y", &[Id, Eq, Id, End]),
            ("\0x", &[End]),
            ("\u{e9}t\u{e9}=\u{1f600}", &[Id, Eq, Id, End]),
        ];
        for (s, want) in cases {
            assert_eq!(lex_all(s), *want, "{s:?}");
        }
    }

    #[test]
    fn parse_operator_errors() {
        let expected = "in, notin, =, ==, !=, gt, lt";
        for (input, want) in [
            ("in", Ok(Operator::In)),
            ("=", Ok(Operator::Equals)),
            ("==", Ok(Operator::DoubleEquals)),
            (">", Ok(Operator::GreaterThan)),
            ("<", Ok(Operator::LessThan)),
            ("notin", Ok(Operator::NotIn)),
            ("!=", Ok(Operator::NotEquals)),
            ("!", Err(format!("found '!', expected: {expected}"))),
            ("exists", Err(format!("found 'exists', expected: {expected}"))),
            ("(", Err(format!("found '(', expected: {expected}"))),
        ] {
            assert_eq!(Parser::new(input).parse_operator(), want, "{input:?}");
        }
    }

    #[test]
    fn requirement_constructor() {
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        let long = "a".repeat(254);
        let cases: Vec<(&str, Operator, Vec<String>, Option<String>)> = vec![
            (
                "x1",
                Operator::In,
                s(&[]),
                Some("values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty".into()),
            ),
            (
                "x2",
                Operator::NotIn,
                s(&[]),
                Some("values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty".into()),
            ),
            ("x3", Operator::In, s(&["foo"]), None),
            ("x4", Operator::NotIn, s(&["foo"]), None),
            (
                "x5",
                Operator::Equals,
                s(&["bar", "foo"]),
                Some(r#"values: Invalid value: ["bar","foo"]: exact-match compatibility requires one single value"#.into()),
            ),
            ("x6", Operator::Exists, s(&[]), None),
            ("x7", Operator::DoesNotExist, s(&[]), None),
            (
                "x8",
                Operator::Exists,
                s(&["foo"]),
                Some(r#"values: Invalid value: ["foo"]: values set must be empty for exists and does not exist"#.into()),
            ),
            ("x9", Operator::In, s(&["bar"]), None),
            ("x11", Operator::GreaterThan, s(&["1"]), None),
            ("x12", Operator::LessThan, s(&["6"]), None),
            (
                "x13",
                Operator::GreaterThan,
                s(&[]),
                Some("values: Invalid value: []: for 'Gt', 'Lt' operators, exactly one value is required".into()),
            ),
            (
                "x14",
                Operator::GreaterThan,
                s(&["bar"]),
                Some(r#"values[0]: Invalid value: "bar": for 'Gt', 'Lt' operators, the value must be an integer"#.into()),
            ),
            (
                "x15",
                Operator::LessThan,
                s(&["bar"]),
                Some(r#"values[0]: Invalid value: "bar": for 'Gt', 'Lt' operators, the value must be an integer"#.into()),
            ),
            (
                &long,
                Operator::Exists,
                s(&[]),
                Some(format!(
                    "key: Invalid value: \"{long}\": name part must be no more than 63 characters"
                )),
            ),
            (
                "x16",
                Operator::Equals,
                vec![long.clone()],
                Some(format!("values[0][x16]: Invalid value: \"{long}\": must be no more than 63 characters")),
            ),
            (
                "x17",
                Operator::Equals,
                s(&["a b"]),
                Some(format!("values[0][x17]: Invalid value: \"a b\": {VALUE_REGEX}")),
            ),
            (
                "x18",
                Operator::GreaterThan,
                s(&["1", "2"]),
                Some(r#"values: Invalid value: ["1","2"]: for 'Gt', 'Lt' operators, exactly one value is required"#.into()),
            ),
            (
                "-bad",
                Operator::Equals,
                s(&["-1"]),
                Some(format!(
                    "[key: Invalid value: \"-bad\": {NAME_PART_REGEX}, values[0][-bad]: Invalid value: \"-1\": {VALUE_REGEX}]"
                )),
            ),
            (
                "x19",
                Operator::LessThan,
                s(&["a$"]),
                Some(format!(
                    "[values[0]: Invalid value: \"a$\": for 'Gt', 'Lt' operators, the value must be an integer, values[0][x19]: Invalid value: \"a$\": {VALUE_REGEX}]"
                )),
            ),
            (
                "x20",
                Operator::In,
                s(&["a", "", "a"]),
                None,
            ),
        ];
        for (key, op, values, want) in cases {
            let got = Requirement::new(key, op, values).map(|_| ()).map_err(|e| e.to_string());
            assert_eq!(got, want.map_or(Ok(()), Err), "{key} {op}");
        }
    }

    #[test]
    fn key_validation_messages() {
        let subdomain = r"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
        let ok = [
            "a",
            "A",
            "a.b_c-D",
            "example.com/name",
            "0.1.2.domain/99",
            "this-is-a-dns.domain.com/key-with-dash",
            &"a".repeat(63),
            &format!("{}/{}", "a".repeat(253), "b".repeat(63)),
        ];
        for key in ok {
            assert_eq!(validate_label_key(key), Ok(()), "{key}");
        }
        let cases = [
            ("", format!("name part must be non-empty; {NAME_PART_REGEX}")),
            ("-a", NAME_PART_REGEX.to_owned()),
            ("a-", NAME_PART_REGEX.to_owned()),
            ("a b", NAME_PART_REGEX.to_owned()),
            ("\u{e9}", NAME_PART_REGEX.to_owned()),
            ("/a", "prefix part must be non-empty".to_owned()),
            ("a/", format!("name part must be non-empty; {NAME_PART_REGEX}")),
            ("Example.com/a", format!("prefix part {subdomain}")),
            ("a..b/a", format!("prefix part {subdomain}")),
            (
                &format!("{}/a", "a".repeat(254)),
                "prefix part must be no more than 253 characters".to_owned(),
            ),
            (&"a".repeat(64), "name part must be no more than 63 characters".to_owned()),
            (
                "a/b/c",
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".to_owned(),
            ),
        ];
        for (key, want) in cases {
            assert_eq!(validate_label_key(key), Err(want), "{key}");
        }
    }

    #[test]
    fn value_validation() {
        for value in ["", "a", "A1", "a.b-c_d", &"z".repeat(63), "123", "-1x"[1..].as_ref()] {
            assert_eq!(validate_label_value(value), Ok(()), "{value}");
        }
        for value in ["-a", "a-", ".", "a b", "a/b", "\u{e9}", "-1", "+1"] {
            assert_eq!(validate_label_value(value), Err(VALUE_REGEX.to_owned()), "{value}");
        }
        assert_eq!(
            validate_label_value(&"a".repeat(64)),
            Err("must be no more than 63 characters".to_owned())
        );
        assert_eq!(
            validate_label_value(&format!("-{}", "a".repeat(64))),
            Err(format!("must be no more than 63 characters; {VALUE_REGEX}"))
        );
    }

    #[test]
    fn requirement_to_string() {
        let cases: Vec<(Vec<Requirement>, &str)> = vec![
            (
                vec![
                    req("x", Operator::In, &["abc", "def"]),
                    req("y", Operator::NotIn, &["jkl"]),
                    req("z", Operator::Exists, &[]),
                ],
                "x in (abc,def),y notin (jkl),z",
            ),
            (
                vec![
                    req("x", Operator::NotIn, &["abc", "def"]),
                    req("y", Operator::NotEquals, &["jkl"]),
                    req("z", Operator::DoesNotExist, &[]),
                ],
                "x notin (abc,def),y!=jkl,!z",
            ),
            (
                vec![
                    req("x", Operator::NotIn, &["abc"]),
                    req("y", Operator::In, &["jkl", "mno"]),
                    req("z", Operator::NotIn, &[""]),
                ],
                "x notin (abc),y in (jkl,mno),z notin ()",
            ),
            (
                vec![
                    req("x", Operator::Equals, &["abc"]),
                    req("y", Operator::DoubleEquals, &["jkl"]),
                    req("z", Operator::NotEquals, &["a"]),
                    req("z", Operator::Exists, &[]),
                ],
                "x=abc,y==jkl,z!=a,z",
            ),
            (
                vec![
                    req("x", Operator::GreaterThan, &["2"]),
                    req("y", Operator::LessThan, &["8"]),
                    req("z", Operator::Exists, &[]),
                ],
                "x>2,y<8,z",
            ),
            // Values print sorted without being deduplicated or reordered in memory.
            (vec![req("x", Operator::In, &["b", "a", "b"])], "x in (a,b,b)"),
        ];
        for (requirements, want) in cases {
            let sel =
                requirements.into_iter().fold(LabelSelector::everything(), LabelSelector::with_requirement);
            assert_eq!(sel.to_string(), want);
        }
        let unsorted = req("x", Operator::In, &["b", "a"]);
        assert_eq!(unsorted.values(), ["b", "a"]);
        assert_eq!(unsorted.to_string(), "x in (a,b)");
    }

    #[test]
    fn requirement_matching() {
        let cases: Vec<(Pairs<'_>, Vec<Requirement>, bool)> = vec![
            (
                &[("x", "foo"), ("y", "baz")],
                vec![req("x", Operator::In, &["foo"]), req("y", Operator::NotIn, &["alpha"])],
                true,
            ),
            (
                &[("x", "foo"), ("y", "baz")],
                vec![req("x", Operator::In, &["foo"]), req("y", Operator::In, &["alpha"])],
                false,
            ),
            (&[("y", "")], vec![req("x", Operator::NotIn, &[""]), req("y", Operator::Exists, &[])], true),
            (
                &[("y", "")],
                vec![req("x", Operator::DoesNotExist, &[]), req("y", Operator::Exists, &[])],
                true,
            ),
            (
                &[("y", "")],
                vec![req("x", Operator::NotIn, &[""]), req("y", Operator::DoesNotExist, &[])],
                false,
            ),
            (&[("y", "baz")], vec![req("x", Operator::In, &[""])], false),
            (&[("z", "2")], vec![req("z", Operator::GreaterThan, &["1"])], true),
            (&[("z", "v2")], vec![req("z", Operator::GreaterThan, &["1"])], false),
        ];
        for (labels, requirements, want) in cases {
            let sel =
                requirements.into_iter().fold(LabelSelector::everything(), LabelSelector::with_requirement);
            assert_eq!(sel.matches(&set(labels)), want, "{sel} vs {labels:?}");
        }
    }

    #[test]
    fn set_selector_parser() {
        use Operator::{DoesNotExist, Equals, Exists, GreaterThan, In, LessThan, NotEquals, NotIn};
        let ok: Vec<(&str, Vec<Requirement>)> = vec![
            ("", vec![]),
            ("\rx", vec![req("x", Exists, &[])]),
            (
                "this-is-a-dns.domain.com/key-with-dash",
                vec![req("this-is-a-dns.domain.com/key-with-dash", Exists, &[])],
            ),
            (
                "this-is-another-dns.domain.com/key-with-dash in (so,what)",
                vec![req("this-is-another-dns.domain.com/key-with-dash", In, &["so", "what"])],
            ),
            (
                "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
                vec![req("0.1.2.domain/99", NotIn, &["10.10.100.1", "tick.tack.clock"])],
            ),
            ("foo  in\t (abc)", vec![req("foo", In, &["abc"])]),
            ("x notin\n (abc)", vec![req("x", NotIn, &["abc"])]),
            ("x  notin\t\t\t(abc,def)", vec![req("x", NotIn, &["abc", "def"])]),
            ("x in (abc,def)", vec![req("x", In, &["abc", "def"])]),
            ("x in (def,abc)", vec![req("x", In, &["abc", "def"])]),
            ("x in (abc,)", vec![req("x", In, &["", "abc"])]),
            ("x in (abc,abc)", vec![req("x", In, &["abc"])]),
            ("x in ()", vec![req("x", In, &[""])]),
            ("x in (a,,)", vec![req("x", In, &["", "a"])]),
            ("x in (a,,,)", vec![req("x", In, &["", "a"])]),
            ("x in (a,,,,,,)", vec![req("x", In, &["", "a"])]),
            ("x in (a,,a,,a,,a,,)", vec![req("x", In, &["", "a"])]),
            ("x in (,,a)", vec![req("x", In, &["", "a"])]),
            ("x in (,)", vec![req("x", In, &[""])]),
            (
                "x notin (abc,,def),bar,z in (),w",
                vec![
                    req("bar", Exists, &[]),
                    req("w", Exists, &[]),
                    req("x", NotIn, &["", "abc", "def"]),
                    req("z", In, &[""]),
                ],
            ),
            ("x,y in (a)", vec![req("x", Exists, &[]), req("y", In, &["a"])]),
            ("x=a", vec![req("x", Equals, &["a"])]),
            ("x>1", vec![req("x", GreaterThan, &["1"])]),
            ("x<7", vec![req("x", LessThan, &["7"])]),
            ("x=a,y!=b", vec![req("x", Equals, &["a"]), req("y", NotEquals, &["b"])]),
            (
                "x=a,y!=b,z in (h,i,j)",
                vec![req("x", Equals, &["a"]), req("y", NotEquals, &["b"]), req("z", In, &["h", "i", "j"])],
            ),
            ("x notin ( )", vec![req("x", NotIn, &[""])]),
            ("x notin (, a)", vec![req("x", NotIn, &["", "a"])]),
            ("a ", vec![req("a", Exists, &[])]),
            ("a in (x,y,notin, z,in)", vec![req("a", In, &["in", "notin", "x", "y", "z"])]),
            ("in in (in)", vec![req("in", In, &["in"])]),
            ("notin notin (notin)", vec![req("notin", NotIn, &["notin"])]),
            ("!in", vec![req("in", DoesNotExist, &[])]),
            ("x,in", vec![req("in", Exists, &[]), req("x", Exists, &[])]),
            ("x=in", vec![req("x", Equals, &["in"])]),
            ("  x  ==  y  ", vec![req("x", Equals, &["y"]).with_op(Operator::DoubleEquals)]),
            ("x==", vec![req("x", Equals, &[""]).with_op(Operator::DoubleEquals)]),
            ("x=,y", vec![req("x", Equals, &[""]), req("y", Exists, &[])]),
            ("x!=,y", vec![req("x", NotEquals, &[""]), req("y", Exists, &[])]),
            ("x=a,x!=b", vec![req("x", Equals, &["a"]), req("x", NotEquals, &["b"])]),
            ("x!=b,x=a", vec![req("x", NotEquals, &["b"]), req("x", Equals, &["a"])]),
            // A NUL byte separates tokens (upstream's lexer reads it as its end-of-input byte).
            ("x=\0y", vec![req("x", Equals, &["y"])]),
            ("x\0", vec![req("x", Exists, &[])]),
            ("\0x=y", vec![]),
            ("x,\0y", vec![req("x", Exists, &[]), req("y", Exists, &[])]),
        ];
        for (input, want) in ok {
            assert_eq!(parse(input).requirements(), Some(&want[..]), "{input:?}");
        }
        for input in [
            "x=a||y=b",
            "x,,y",
            ",x,y",
            "x nott in (y)",
            "a in (xyz),",
            "a in (xyz)b notin ()",
            "a in (xyz abc)",
            "a notin(",
            "a (",
            "(",
            ")",
            ",",
            "!",
            "!!x",
            "x in",
            "x in (",
            "x in (a",
            "x in (a,",
            "x in a",
            "x in ((a))",
            "x in (a)(b)",
            "x=(",
            "x=)",
            "x=a=b",
            "x==a==b",
            "x>",
            "x<",
            "x>=1",
            "x>1.5",
            "x<-1",
            "x in (a b)",
            "x y",
            "x,",
            "x, ",
            "x,,",
            "x=a,",
            "x\0y",
            "x, \0y",
        ] {
            assert!(LabelSelector::parse(input).is_err(), "{input:?} should fail");
        }
    }

    impl Requirement {
        fn with_op(mut self, operator: Operator) -> Self {
            self.operator = operator;
            self
        }
    }

    #[test]
    fn parse_error_messages() {
        let cases = [
            ("x=a||y=b", format!("unable to parse requirement: values[0][x]: Invalid value: \"a||y\": {VALUE_REGEX}")),
            ("x,,y", "found ',', expected: identifier after ','".to_owned()),
            (",x,y", "found ',', expected: !, identifier, or 'end of string'".to_owned()),
            ("(", "found '(', expected: !, identifier, or 'end of string'".to_owned()),
            (")", "found ')', expected: !, identifier, or 'end of string'".to_owned()),
            ("x,", "found '', expected: identifier after ','".to_owned()),
            ("x nott in (y)", "unable to parse requirement: found 'nott', expected: in, notin, =, ==, !=, gt, lt".to_owned()),
            ("a (", "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt".to_owned()),
            ("a in (xyz),", "found '', expected: identifier after ','".to_owned()),
            ("a in (xyz)b notin ()", "found 'b', expected: ',' or 'end of string'".to_owned()),
            ("a in (xyz abc)", "unable to parse requirement: found 'abc', expected: ',' or ')'".to_owned()),
            ("a notin(", "unable to parse requirement: found '', expected: ',', ')' or identifier".to_owned()),
            ("a in x", "unable to parse requirement: found 'x' expected: '('".to_owned()),
            ("a in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier".to_owned()),
            ("a in (,=)", "unable to parse requirement: found '=', expected: ',', or identifier".to_owned()),
            ("a in (a,", "unable to parse requirement: found '', expected: ',', or identifier".to_owned()),
            ("!x=a", "found '=', expected: ',' or 'end of string'".to_owned()),
            ("!", "unable to parse requirement: found '', expected: identifier".to_owned()),
            ("!!x", "unable to parse requirement: found '!', expected: identifier".to_owned()),
            ("x==a==b", "found '==', expected: ',' or 'end of string'".to_owned()),
            ("x=(", "unable to parse requirement: found '(', expected: identifier".to_owned()),
            ("x<a", "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer".to_owned()),
            ("x>", "unable to parse requirement: values[0]: Invalid value: \"\": for 'Gt', 'Lt' operators, the value must be an integer".to_owned()),
            (
                "x<-1",
                format!("unable to parse requirement: values[0][x]: Invalid value: \"-1\": {VALUE_REGEX}"),
            ),
            ("-x", format!("unable to parse requirement: <nil>: Invalid value: \"-x\": {NAME_PART_REGEX}")),
            (
                "caf\u{e9}=\t1",
                format!("unable to parse requirement: <nil>: Invalid value: \"caf\u{e9}\": {NAME_PART_REGEX}"),
            ),
            (
                "a\u{200b}",
                format!("unable to parse requirement: <nil>: Invalid value: \"a\\u200b\": {NAME_PART_REGEX}"),
            ),
            (
                "x=\u{7f}",
                format!("unable to parse requirement: values[0][x]: Invalid value: \"\\x7f\": {VALUE_REGEX}"),
            ),
            (
                "x=a\"b",
                format!("unable to parse requirement: values[0][x]: Invalid value: \"a\\\"b\": {VALUE_REGEX}"),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse_err(input), want, "{input:?}");
        }
    }

    #[test]
    fn requires_exact_match() {
        let cases: Vec<(Vec<Requirement>, &str, Option<&str>)> = vec![
            (vec![req("key", Operator::In, &["value"])], "key", Some("value")),
            (vec![req("key", Operator::In, &["value", "value2"])], "key", None),
            (
                vec![req("key", Operator::In, &["value", "value1"]), req("key2", Operator::In, &["value2"])],
                "key2",
                Some("value2"),
            ),
            (vec![req("key", Operator::Equals, &["value"])], "key", Some("value")),
            (vec![req("key", Operator::DoubleEquals, &["value"])], "key", Some("value")),
            (vec![req("key", Operator::NotEquals, &["value"])], "key", None),
            (
                vec![req("key", Operator::In, &["value"]), req("key2", Operator::In, &["value2"])],
                "key",
                Some("value"),
            ),
            (vec![req("key", Operator::Exists, &[])], "key", None),
            (vec![req("key", Operator::Equals, &["value"])], "other", None),
            // Only the first requirement on the key counts.
            (vec![req("key", Operator::Exists, &[]), req("key", Operator::Equals, &["v"])], "key", None),
        ];
        for (requirements, label, want) in cases {
            let sel =
                requirements.into_iter().fold(LabelSelector::everything(), LabelSelector::with_requirement);
            assert_eq!(sel.requires_exact_match(label), want, "{sel} / {label}");
        }
        assert_eq!(parse("a=x,b in (y)").requires_exact_match("b"), Some("y"));
        assert_eq!(parse("a=").requires_exact_match("a"), Some(""));
    }

    #[test]
    fn with_requirement_sorts_by_key() {
        let sel = LabelSelector::everything().with_requirement(req("key", Operator::In, &["value"]));
        assert_eq!(sel.requirements(), Some(&[req("key", Operator::In, &["value"])][..]));
        let sel = sel.with_requirement(req("a", Operator::Equals, &["b"]));
        assert_eq!(sel.to_string(), "a=b,key in (value)");
    }

    #[test]
    fn from_set() {
        assert!(LabelSelector::from_set(&BTreeMap::new()).unwrap().is_empty());
        let sel = LabelSelector::from_set(&set(&[("key", "val"), ("app", "foo")])).unwrap();
        assert_eq!(sel.to_string(), "app=foo,key=val");
        assert_eq!(sel.requirements().unwrap()[1], req("key", Operator::Equals, &["val"]));
        assert!(sel.matches(&set(&[("key", "val"), ("app", "foo"), ("extra", "label")])));
        assert!(!sel.matches(&set(&[("key", "val")])));
        let long = "axahm2EJ8Phiephe2eixohbee9eGeiyees1thuozi1xoh0GiuH3diewi8iem7Nui";
        assert_eq!(
            LabelSelector::from_set(&set(&[("Key", long)])).unwrap_err().to_string(),
            format!("values[0][Key]: Invalid value: \"{long}\": must be no more than 63 characters")
        );
    }

    fn k8s(labels: Option<&[(&str, &str)]>, expressions: Option<&[Expression<'_>]>) -> metav1::LabelSelector {
        metav1::LabelSelector {
            match_labels: labels.map(set),
            match_expressions: expressions.map(|e| {
                e.iter()
                    .map(|(key, operator, values)| LabelSelectorRequirement {
                        key: (*key).to_owned(),
                        operator: (*operator).to_owned(),
                        values: values.map(|v| v.iter().map(|s| (*s).to_owned()).collect()),
                    })
                    .collect()
            }),
        }
    }

    #[test]
    fn from_k8s_nil_and_empty() {
        assert!(LabelSelector::from_k8s_option(None).unwrap().matches_nothing());
        let empty = metav1::LabelSelector::default();
        assert!(LabelSelector::from_k8s_option(Some(&empty)).unwrap().is_empty());
        assert!(LabelSelector::from_k8s(&empty).unwrap().matches(&BTreeMap::new()));
        let explicit_empty = k8s(Some(&[]), Some(&[]));
        assert_eq!(LabelSelector::from_k8s(&explicit_empty).unwrap(), LabelSelector::everything());
    }

    #[test]
    fn from_k8s_conversion() {
        let sel = k8s(
            Some(&[("z", "1"), ("app", "web")]),
            Some(&[
                ("tier", "In", Some(&["front", "back", "front"])),
                ("env", "NotIn", Some(&["dev"])),
                ("app", "Exists", None),
                ("legacy", "DoesNotExist", Some(&[])),
            ]),
        );
        let sel = LabelSelector::from_k8s(&sel).unwrap();
        assert_eq!(sel.to_string(), "app=web,app,env notin (dev),!legacy,tier in (back,front,front),z=1");
        let tier = sel.requirements().unwrap().iter().find(|r| r.key() == "tier").unwrap();
        assert_eq!(tier.values(), ["front", "back", "front"]);
        assert_eq!(tier.operator(), Operator::In);
        assert!(sel.matches(&set(&[("app", "web"), ("tier", "back"), ("z", "1")])));
        assert!(!sel.matches(&set(&[("app", "web"), ("tier", "back"), ("z", "1"), ("legacy", "")])));
        assert!(!sel.matches(&set(&[("app", "web"), ("tier", "back"), ("z", "1"), ("env", "dev")])));
        assert!(!sel.matches(&set(&[("app", "web"), ("z", "1")])));
        assert_eq!(sel.requires_exact_match("app"), Some("web"));
    }

    #[test]
    fn from_k8s_errors() {
        let cases: Vec<(metav1::LabelSelector, String)> = vec![
            (
                k8s(None, Some(&[("a", "Foo", None)])),
                "\"Foo\" is not a valid label selector operator".to_owned(),
            ),
            (
                k8s(None, Some(&[("a", "in", Some(&["x"]))])),
                "\"in\" is not a valid label selector operator".to_owned(),
            ),
            (
                k8s(None, Some(&[("a", "In", None)])),
                "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"
                    .to_owned(),
            ),
            (
                k8s(None, Some(&[("a", "NotIn", Some(&[]))])),
                "values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"
                    .to_owned(),
            ),
            (
                k8s(None, Some(&[("a", "Exists", Some(&["x"]))])),
                r#"values: Invalid value: ["x"]: values set must be empty for exists and does not exist"#
                    .to_owned(),
            ),
            (
                k8s(None, Some(&[("a", "DoesNotExist", Some(&["<&>"]))])),
                format!(
                    "[values: Invalid value: [\"\\u003c\\u0026\\u003e\"]: values set must be empty for exists and does not exist, values[0][a]: Invalid value: \"<&>\": {VALUE_REGEX}]"
                ),
            ),
            (k8s(Some(&[("-a", "b")]), None), format!("key: Invalid value: \"-a\": {NAME_PART_REGEX}")),
            (
                k8s(Some(&[("a", "b c")]), None),
                format!("values[0][a]: Invalid value: \"b c\": {VALUE_REGEX}"),
            ),
            (
                k8s(Some(&[("a", "b")]), Some(&[("c d", "In", Some(&["e"]))])),
                format!("key: Invalid value: \"c d\": {NAME_PART_REGEX}"),
            ),
        ];
        for (selector, want) in cases {
            assert_eq!(LabelSelector::from_k8s(&selector).unwrap_err().to_string(), want, "{selector:?}");
        }
    }

    #[test]
    fn go_quoting() {
        assert_eq!(go_quote("abc"), "\"abc\"");
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("\t\n\r\u{7}\u{8}\u{b}\u{c}\u{1}\u{7f}"), r#""\t\n\r\a\b\v\f\x01\x7f""#);
        assert_eq!(go_quote("caf\u{e9} \u{1f600}"), "\"caf\u{e9} \u{1f600}\"");
        assert_eq!(go_quote("\u{a0}\u{85}\u{feff}\u{f0000}"), r#""\u00a0\u0085\ufeff\U000f0000""#);
        assert_eq!(go_json_strings(&[], false), "[]");
        assert_eq!(go_json_strings(&[], true), "null");
        assert_eq!(
            go_json_strings(&["a\"\\\n\u{1}\u{8}\u{2028}".to_owned(), "\u{e9}".to_owned()], true),
            "[\"a\\\"\\\\\\n\\u0001\\b\\u2028\",\"\u{e9}\"]"
        );
    }

    #[test]
    fn from_str_and_display_round_trip() {
        let sel: LabelSelector = "b in (y,x),a,!c,d!=1,e>3".parse().unwrap();
        assert_eq!(sel.to_string(), "a,b in (x,y),!c,d!=1,e>3");
        assert_eq!(sel.to_string().parse::<LabelSelector>().unwrap(), sel);
        assert_eq!(Operator::NotIn.to_string(), "notin");
        assert_eq!(Operator::DoesNotExist.as_str(), "!");
        assert_eq!(Operator::GreaterThan.as_str(), "gt");
    }

    #[test]
    fn odd_inputs_never_panic() {
        let long_key = "k".repeat(100_000);
        let inputs = [
            "(((((((".to_owned(),
            ")))))))".to_owned(),
            "x in ((((".to_owned(),
            "x in (a,b".to_owned(),
            "x in a,b)".to_owned(),
            ",,,,,".to_owned(),
            "x,,,,".to_owned(),
            "!!!!!!".to_owned(),
            "=!=!=!=".to_owned(),
            "<><><>".to_owned(),
            "\u{1f600}\u{1f600}=\u{1f600}".to_owned(),
            "\u{0}\u{0}\u{0}".to_owned(),
            "x\u{0}".to_owned(),
            " \t\r\n ".to_owned(),
            "x in (\u{e9})".to_owned(),
            long_key.clone(),
            format!("x={long_key}"),
            format!("x in ({})", "a,".repeat(50_000)),
            "x=a,".repeat(20_000),
            "(".repeat(100_000),
            format!("{}=b", "a/".repeat(1000)),
        ];
        for input in &inputs {
            if let Ok(sel) = LabelSelector::parse(input) {
                assert_eq!(LabelSelector::parse(&sel.to_string()).as_ref(), Ok(&sel), "{input:?}");
            }
        }
        assert!(LabelSelector::parse(" \t\r\n ").unwrap().is_empty());
        assert!(LabelSelector::parse(&long_key).is_err());
        assert_eq!(
            LabelSelector::parse(&format!("x in ({})", "a,".repeat(50_000))).unwrap().to_string(),
            "x in (,a)"
        );
    }

    /// Deterministic pseudo-random inputs (xorshift): parsing never panics, and whatever parses
    /// prints to a string that parses back to the same selector.
    #[test]
    fn fuzz_parse_round_trips() {
        const ALPHABET: &[&str] = &[
            "a",
            "b",
            "x",
            "1",
            "-1",
            "0",
            "in",
            "notin",
            "=",
            "==",
            "!=",
            "!",
            "(",
            ")",
            ",",
            ">",
            "<",
            " ",
            "\t",
            "\n",
            "/",
            ".",
            "_",
            "-",
            "example.com/",
            "\u{e9}",
            "\u{0}",
            "\\",
            "A9",
            "",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut parsed = 0;
        for _ in 0..20_000 {
            let len = next() % 12;
            let input: String = (0..len)
                .map(|_| ALPHABET[usize::try_from(next() % ALPHABET.len() as u64).unwrap_or(0)])
                .collect();
            let Ok(sel) = LabelSelector::parse(&input) else { continue };
            parsed += 1;
            let printed = sel.to_string();
            assert_eq!(LabelSelector::parse(&printed).as_ref(), Ok(&sel), "{input:?} printed as {printed:?}");
            let labels = set(&[("a", "1"), ("b", ""), ("x", "-1")]);
            let _ = sel.matches(&labels);
        }
        assert!(parsed > 100, "only {parsed} inputs parsed");
    }
}
