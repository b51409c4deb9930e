//! The audit policy (audit.k8s.io/v1 Policy) as kube-apiserver reads and applies it
//! (k8s.io/apiserver/pkg/audit/policy): [`Policy::parse`] decodes a YAML or JSON file — strictly,
//! else leniently with a warning, as upstream's reader falls back —, checks its apiVersion and kind
//! and validates it with upstream's messages; [`Policy::evaluate`] is upstream's policy checker: the
//! first rule that matches a request decides its level, the stages left out and whether managed
//! fields are logged; no rule matching is level None. No IO.

use std::fmt;

use keel_api::status::FieldError;
use serde_json::{Map, Value, json};

use crate::auth::User;
use crate::request::RequestInfo;

/// How much of a request is recorded (ordered: None < Metadata < Request < RequestResponse).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Level {
    /// Not recorded.
    #[default]
    None,
    /// User, verb, resource, timestamps, response status: no bodies.
    Metadata,
    /// Metadata and the request body.
    Request,
    /// Request and the response body.
    RequestResponse,
}

impl Level {
    pub const ALL: [Level; 4] = [Level::None, Level::Metadata, Level::Request, Level::RequestResponse];

    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }

    fn parse(text: &str) -> Option<Level> {
        Level::ALL.into_iter().find(|l| l.as_str() == text)
    }
}

/// When in a request's life an event is recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// As soon as the request is authenticated, before anything else is done with it.
    RequestReceived,
    /// Once the response headers are sent, before the body (long-running requests only).
    ResponseStarted,
    /// Once the response is complete.
    ResponseComplete,
    /// When the handler panicked.
    Panic,
}

impl Stage {
    pub const ALL: [Stage; 4] =
        [Stage::RequestReceived, Stage::ResponseStarted, Stage::ResponseComplete, Stage::Panic];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }

    fn parse(text: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One group's resources a rule names (`resources: [{group: "", resources: ["pods", "pods/log"]}]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupResources {
    pub group: String,
    /// `pods`, `pods/log`, `*`, `*/scale`, `deployments/*`; none is every resource of the group.
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
}

/// One rule of a policy; an empty list matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyRule {
    pub level: Level,
    pub users: Vec<String>,
    pub user_groups: Vec<String>,
    pub verbs: Vec<String>,
    pub resources: Vec<GroupResources>,
    /// `""` is cluster-scoped resources.
    pub namespaces: Vec<String>,
    /// `/healthz`, `/apis*`, `*`.
    pub non_resource_urls: Vec<String>,
    /// The rule's own stages and the policy's (as upstream's evaluator unites them).
    pub omit_stages: Vec<Stage>,
    /// `None`: the policy's `omitManagedFields`.
    pub omit_managed_fields: Option<bool>,
}

/// An audit policy, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub rules: Vec<PolicyRule>,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

/// What the policy decides for one request (upstream's RequestAuditConfig).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestAuditConfig {
    pub level: Level,
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: bool,
}

/// A policy file read: the policy and the strict decoding's complaint, if the policy was read
/// leniently (upstream logs it as a warning and goes on).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loaded {
    pub policy: Policy,
    pub warning: Option<String>,
}

/// The registered version of the audit group.
const API_VERSION: &str = "audit.k8s.io/v1";
/// What apimachinery's scheme names itself in a "no kind is registered" error.
const SCHEME: &str = "pkg/runtime/scheme.go:110";

impl Policy {
    /// Reads `path` as upstream's LoadPolicyFromFile; errors as upstream words them (the caller
    /// prefixes `loading audit policy file: `).
    pub fn load(path: &std::path::Path) -> Result<Loaded, String> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path)
            .map_err(|e| format!("failed to read file path {shown:?}: open {shown}: {}", io_error(&e)))?;
        Policy::parse(&bytes).map_err(|e| format!("{e}: from file {}", path.display()))
    }

    /// A policy from YAML or JSON bytes (upstream's LoadPolicyFromBytes).
    pub fn parse(bytes: &[u8]) -> Result<Loaded, String> {
        let document: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
            Value::Null
        } else {
            serde_yaml_ng::from_slice(bytes).map_err(|e| format!("failed decoding: yaml: {e}"))?
        };
        let document = match document {
            Value::Null => Value::Object(Map::new()),
            Value::Object(map) => Value::Object(map),
            other => {
                return Err(format!(
                    "failed decoding: couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go value of type struct {{ APIVersion string \"json:\\\"apiVersion,omitempty\\\"\"; Kind string \"json:\\\"kind,omitempty\\\"\" }}",
                    json_type(&other)
                ));
            }
        };
        let text = |key: &str| document.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
        let (api_version, kind) = (text("apiVersion"), text("kind"));
        if api_version == API_VERSION && matches!(kind.as_str(), "Event" | "EventList" | "PolicyList") {
            return Err(format!(
                "failed decoding: converting (v1.{kind}) to (audit.Policy): unknown conversion"
            ));
        }
        if !api_version.is_empty() && (api_version != API_VERSION || !matches!(kind.as_str(), "" | "Policy"))
        {
            let kind = if kind.is_empty() { "Policy" } else { kind.as_str() };
            return Err(format!(
                "failed decoding: no kind {kind:?} is registered for version {api_version:?} in scheme {SCHEME:?}"
            ));
        }
        let mut decoder = Decoder::default();
        let decoded = decoder.policy(&document)?;
        if api_version.is_empty() {
            return Err("unknown group version field audit.k8s.io/__internal, Kind=Policy in policy".into());
        }
        let errors = validate(&decoded);
        match errors.as_slice() {
            [] => {}
            [one] => return Err(one.to_string()),
            many => {
                let all: Vec<String> = many.iter().map(ToString::to_string).collect();
                return Err(format!("[{}]", all.join(", ")));
            }
        }
        if decoded.policy.rules.is_empty() {
            return Err("loaded illegal policy with 0 rules".into());
        }
        let warning = (!decoder.unknown.is_empty()).then(|| {
            let fields: Vec<String> =
                decoder.unknown.iter().map(|f| format!("unknown field {f:?}")).collect();
            format!("strict decoding error: {}", fields.join(", "))
        });
        Ok(Loaded { policy: decoded.policy.united(), warning })
    }

    /// Each rule's stages with the policy's (upstream's NewPolicyRuleEvaluator).
    fn united(mut self) -> Policy {
        for rule in &mut self.rules {
            for stage in &self.omit_stages {
                if !rule.omit_stages.contains(stage) {
                    rule.omit_stages.push(*stage);
                }
            }
            rule.omit_stages.sort();
            rule.omit_stages.dedup();
        }
        self
    }

    /// The first matching rule's decision; level None when none matches. `user` is who
    /// authenticated (before impersonation, as upstream evaluates); `None` when authentication
    /// failed.
    pub fn evaluate(&self, user: Option<&User>, info: &RequestInfo) -> RequestAuditConfig {
        match self.rules.iter().find(|rule| rule.matches(user, info)) {
            Some(rule) => RequestAuditConfig {
                level: rule.level,
                omit_stages: rule.omit_stages.clone(),
                omit_managed_fields: rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
            },
            None => RequestAuditConfig {
                level: Level::None,
                omit_stages: self.omit_stages.clone(),
                omit_managed_fields: self.omit_managed_fields,
            },
        }
    }
}

/// Go's words for an IO error (`open /x: no such file or directory`).
pub(crate) fn io_error(error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => error.to_string(),
    }
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == value)
}

impl PolicyRule {
    /// upstream's ruleMatches.
    fn matches(&self, user: Option<&User>, info: &RequestInfo) -> bool {
        if !self.users.is_empty() && !user.is_some_and(|u| has(&self.users, &u.name)) {
            return false;
        }
        if !self.user_groups.is_empty()
            && !user.is_some_and(|u| u.groups.iter().any(|g| has(&self.user_groups, g)))
        {
            return false;
        }
        if !self.verbs.is_empty() && !has(&self.verbs, &info.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(info);
        }
        if !self.non_resource_urls.is_empty() {
            return !info.is_resource_request
                && self.non_resource_urls.iter().any(|s| path_matches(&info.path, s));
        }
        true
    }

    /// The namespaces and group resources of a resource request.
    fn matches_resource(&self, info: &RequestInfo) -> bool {
        if !info.is_resource_request {
            return false;
        }
        if !self.namespaces.is_empty() && !has(&self.namespaces, &info.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let (resource, subresource) = (info.resource.as_str(), info.subresource.as_str());
        let combined =
            if subresource.is_empty() { resource.to_owned() } else { format!("{resource}/{subresource}") };
        self.resources.iter().filter(|gr| gr.group == info.api_group).any(|gr| {
            if gr.resources.is_empty() {
                return true;
            }
            if !gr.resource_names.is_empty() && !has(&gr.resource_names, &info.name) {
                return false;
            }
            gr.resources.iter().any(|r| {
                r == "*"
                    || *r == combined
                    || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
                    || r.strip_suffix("/*") == Some(resource)
            })
        })
    }
}

/// A non-resource URL rule: `*`, the exact path, or a prefix ending in `*`.
fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec.strip_suffix('*').is_some_and(|_| path.starts_with(spec.trim_end_matches('*')))
}

/// upstream's ValidatePolicy.
fn validate(policy: &Decoded) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_stages(&policy.omit_stages_text, "omitStages", &mut errors);
    for (i, rule) in policy.rules_text.iter().enumerate() {
        let path = format!("rules[{i}]");
        match rule.level.as_str() {
            "" => errors.push(FieldError::required(&format!("{path}.level"), "")),
            level if Level::parse(level).is_none() => errors.push(FieldError::not_supported(
                &format!("{path}.level"),
                &json!(level),
                &Level::ALL.map(Level::as_str),
            )),
            _ => {}
        }
        for (j, url) in rule.non_resource_urls.iter().enumerate() {
            if url == "*" {
                continue;
            }
            let field = format!("{path}.nonResourceURLs[{j}]");
            if !url.starts_with('/') {
                errors.push(FieldError::invalid(
                    &field,
                    &json!(url),
                    "non-resource URL rules must begin with a '/' character",
                ));
            }
            if url.len() > 1 && url[..url.len() - 1].contains('*') {
                errors.push(FieldError::invalid(
                    &field,
                    &json!(url),
                    "non-resource URL wildcards '*' must be the final character of the rule",
                ));
            }
        }
        // As upstream: the group resources' fields are named without their index.
        for resources in &rule.resources {
            if !resources.group.is_empty() {
                let problems = keel_api::validation::dns1123_subdomain(&resources.group);
                if !problems.is_empty() {
                    errors.push(FieldError::invalid(
                        &format!("{path}.resources.group"),
                        &json!(resources.group),
                        &problems.join(","),
                    ));
                }
            }
            if !resources.resource_names.is_empty() && resources.resources.is_empty() {
                errors.push(FieldError::invalid(
                    &format!("{path}.resources.resourceNames"),
                    &json!(resources.resource_names),
                    "using resourceNames requires at least one resource",
                ));
            }
        }
        validate_stages(&rule.omit_stages, &format!("{path}.omitStages"), &mut errors);
        if !rule.non_resource_urls.is_empty() && (!rule.resources.is_empty() || !rule.namespaces.is_empty()) {
            errors.push(FieldError::invalid(
                &format!("{path}.nonResourceURLs"),
                &json!(rule.non_resource_urls),
                "rules cannot apply to both regular resources and non-resource URLs",
            ));
        }
    }
    errors
}

fn validate_stages(stages: &[String], path: &str, errors: &mut Vec<FieldError>) {
    let allowed = Stage::ALL.map(Stage::as_str).join(",");
    for (i, stage) in stages.iter().enumerate() {
        if Stage::parse(stage).is_none() {
            errors.push(FieldError::invalid(
                &format!("{path}[{i}]"),
                &json!(stage),
                &format!("allowed stages are {allowed}"),
            ));
        }
    }
}

/// The JSON type of a value, as Go's decoder names it in its errors.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A rule as written, before its level and stages are known to be valid.
#[derive(Debug, Default)]
struct RuleText {
    level: String,
    non_resource_urls: Vec<String>,
    resources: Vec<GroupResources>,
    namespaces: Vec<String>,
    omit_stages: Vec<String>,
}

/// The decoded policy with the texts validation reads.
#[derive(Debug, Default)]
struct Decoded {
    policy: Policy,
    omit_stages_text: Vec<String>,
    rules_text: Vec<RuleText>,
}

/// A hand-rolled decoder of the Policy's JSON form, so that a wrong type is refused in Go's words
/// (`json: cannot unmarshal number into Go struct field PolicyRule.rules.level of type v1.Level`)
/// and fields the type lacks are collected for the strict decoding's warning. Field names match
/// case-insensitively, as Go's lenient decoder matches them (the strict one calls that unknown).
#[derive(Debug, Default)]
struct Decoder {
    /// Paths of the fields strict decoding refuses (`rules[0].bogus`).
    unknown: Vec<String>,
}

/// Where a value sits, for Go's error: the innermost struct and the dotted JSON path to it.
struct At<'a> {
    strukt: &'a str,
    path: &'a str,
}

impl Decoder {
    fn policy(&mut self, document: &Value) -> Result<Decoded, String> {
        let mut decoded = Decoded::default();
        let fields = ["apiVersion", "kind", "metadata", "rules", "omitStages", "omitManagedFields"];
        for (key, value) in self.fields(document, &fields, "") {
            match key {
                "rules" => {
                    let at = At { strukt: "Policy", path: "rules" };
                    for (i, rule) in self.array(value, &at, "[]v1.PolicyRule")?.iter().enumerate() {
                        let (policy_rule, text) = self.rule(rule, i)?;
                        decoded.policy.rules.push(policy_rule);
                        decoded.rules_text.push(text);
                    }
                }
                "omitStages" => {
                    let at = At { strukt: "Policy", path: "omitStages" };
                    decoded.omit_stages_text = self.strings(value, &at, "[]v1.Stage", "v1.Stage")?;
                    decoded.policy.omit_stages =
                        decoded.omit_stages_text.iter().filter_map(|s| Stage::parse(s)).collect();
                }
                "omitManagedFields" => {
                    let at = At { strukt: "Policy", path: "omitManagedFields" };
                    decoded.policy.omit_managed_fields = self.boolean(value, &at, "bool")?.unwrap_or(false);
                }
                "apiVersion" | "kind" => {
                    let at = At { strukt: "Policy", path: key };
                    self.string(value, &at, "string")?;
                }
                "metadata" if !value.is_null() && !value.is_object() => {
                    return Err(unmarshal(
                        value,
                        &At { strukt: "Policy", path: "metadata" },
                        "v1.ObjectMeta",
                    ));
                }
                _ => {}
            }
        }
        Ok(decoded)
    }

    fn rule(&mut self, value: &Value, index: usize) -> Result<(PolicyRule, RuleText), String> {
        let mut rule = PolicyRule::default();
        let mut text = RuleText::default();
        if value.is_null() {
            return Ok((rule, text));
        }
        if !value.is_object() {
            return Err(unmarshal(value, &At { strukt: "Policy", path: "rules" }, "v1.PolicyRule"));
        }
        let fields = [
            "level",
            "users",
            "userGroups",
            "verbs",
            "resources",
            "namespaces",
            "nonResourceURLs",
            "omitStages",
            "omitManagedFields",
        ];
        let prefix = format!("rules[{index}]");
        for (key, value) in self.fields(value, &fields, &prefix) {
            let path = format!("rules.{key}");
            let at = At { strukt: "PolicyRule", path: &path };
            let list = |this: &mut Decoder| this.strings(value, &at, "[]string", "string");
            match key {
                "level" => {
                    text.level = self.string(value, &at, "v1.Level")?.unwrap_or_default();
                    rule.level = Level::parse(&text.level).unwrap_or_default();
                }
                "users" => rule.users = list(self)?,
                "userGroups" => rule.user_groups = list(self)?,
                "verbs" => rule.verbs = list(self)?,
                "namespaces" => rule.namespaces = list(self)?,
                "nonResourceURLs" => rule.non_resource_urls = list(self)?,
                "omitStages" => {
                    text.omit_stages = self.strings(value, &at, "[]v1.Stage", "v1.Stage")?;
                    rule.omit_stages = text.omit_stages.iter().filter_map(|s| Stage::parse(s)).collect();
                }
                "omitManagedFields" => rule.omit_managed_fields = self.boolean(value, &at, "*bool")?,
                "resources" => {
                    for (j, item) in self.array(value, &at, "[]v1.GroupResources")?.iter().enumerate() {
                        rule.resources.push(self.group_resources(item, &format!("{prefix}.resources[{j}]"))?);
                    }
                }
                _ => {}
            }
        }
        text.non_resource_urls = rule.non_resource_urls.clone();
        text.resources = rule.resources.clone();
        text.namespaces = rule.namespaces.clone();
        Ok((rule, text))
    }

    fn group_resources(&mut self, value: &Value, prefix: &str) -> Result<GroupResources, String> {
        let mut out = GroupResources::default();
        if value.is_null() {
            return Ok(out);
        }
        if !value.is_object() {
            return Err(unmarshal(
                value,
                &At { strukt: "PolicyRule", path: "rules.resources" },
                "v1.GroupResources",
            ));
        }
        for (key, value) in self.fields(value, &["group", "resources", "resourceNames"], prefix) {
            let path = format!("rules.resources.{key}");
            let at = At { strukt: "GroupResources", path: &path };
            match key {
                "group" => out.group = self.string(value, &at, "string")?.unwrap_or_default(),
                "resources" => out.resources = self.strings(value, &at, "[]string", "string")?,
                "resourceNames" => out.resource_names = self.strings(value, &at, "[]string", "string")?,
                _ => {}
            }
        }
        Ok(out)
    }

    /// The object's known fields (by their declared names, matched case-insensitively as Go's
    /// decoder does, the last of duplicates winning); the rest recorded as unknown.
    fn fields<'v>(
        &mut self,
        object: &'v Value,
        known: &[&'static str],
        prefix: &str,
    ) -> Vec<(&'static str, &'v Value)> {
        let mut out: Vec<(&'static str, &'v Value)> = Vec::new();
        for (key, value) in object.as_object().into_iter().flatten() {
            let exact = known.iter().find(|k| **k == key);
            let folded = exact.or_else(|| known.iter().find(|k| k.eq_ignore_ascii_case(key)));
            if exact.is_none() {
                self.unknown.push(if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") });
            }
            if let Some(name) = folded {
                out.retain(|(k, _)| k != name);
                out.push((name, value));
            }
        }
        out
    }

    fn string(&mut self, value: &Value, at: &At<'_>, go_type: &str) -> Result<Option<String>, String> {
        match value {
            Value::Null => Ok(None),
            Value::String(s) => Ok(Some(s.clone())),
            other => Err(unmarshal(other, at, go_type)),
        }
    }

    fn boolean(&mut self, value: &Value, at: &At<'_>, go_type: &str) -> Result<Option<bool>, String> {
        match value {
            Value::Null => Ok(None),
            Value::Bool(b) => Ok(Some(*b)),
            other => Err(unmarshal(other, at, go_type)),
        }
    }

    fn array<'v>(&mut self, value: &'v Value, at: &At<'_>, go_type: &str) -> Result<&'v [Value], String> {
        match value {
            Value::Null => Ok(&[]),
            Value::Array(items) => Ok(items),
            other => Err(unmarshal(other, at, go_type)),
        }
    }

    fn strings(
        &mut self,
        value: &Value,
        at: &At<'_>,
        go_type: &str,
        item: &str,
    ) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        for value in self.array(value, at, go_type)? {
            // Go decodes a null element of a string list as "".
            out.push(self.string(value, at, item)?.unwrap_or_default());
        }
        Ok(out)
    }
}

/// Go's UnmarshalTypeError, as the decoder reports it.
fn unmarshal(value: &Value, at: &At<'_>, go_type: &str) -> String {
    format!(
        "failed decoding: json: cannot unmarshal {} into Go struct field {}.{} of type {go_type}",
        json_type(value),
        at.strukt,
        at.path
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Policy, String> {
        Policy::parse(text.as_bytes()).map(|loaded| loaded.policy)
    }

    fn info(method: &str, path: &str) -> RequestInfo {
        crate::request::info(&method.parse().unwrap(), path, None)
    }

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-proxy"]
  verbs: ["watch"]
- level: None
  userGroups: ["system:nodes"]
  resources: [{group: "", resources: ["events"]}]
- level: RequestResponse
  resources: [{group: "", resources: ["configmaps"], resourceNames: ["watched"]}]
  omitManagedFields: false
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets", "configmaps/*"]
  - group: apps
    resources: ["*/scale"]
  omitStages: [ResponseStarted]
- level: Request
  namespaces: ["kube-system"]
- level: Metadata
  nonResourceURLs: ["/healthz*", "/version"]
- level: RequestResponse
  resources: [{group: "", resources: ["pods/log", "pods/status"]}]
- level: Request
  resources: [{group: "batch"}]
omitManagedFields: true
"#;

    #[test]
    fn first_matching_rule_decides() {
        let policy = parse(POLICY).unwrap();
        let user = |name: &str, groups: &[&str]| User::named(name, groups);
        let admin = user("admin", &["system:masters"]);
        let level =
            |u: Option<&User>, method: &str, path: &str| policy.evaluate(u, &info(method, path)).level;
        let proxy = user("system:kube-proxy", &[]);
        assert_eq!(level(Some(&proxy), "GET", "/api/v1/services?watch=true"), Level::None);
        assert_eq!(level(Some(&proxy), "GET", "/api/v1/namespaces/kube-system/services"), Level::Request);
        let node = user("system:node:n1", &["system:nodes"]);
        assert_eq!(level(Some(&node), "POST", "/api/v1/namespaces/default/events"), Level::None);
        assert_eq!(level(Some(&admin), "POST", "/api/v1/namespaces/default/events"), Level::None);
        assert_eq!(level(Some(&admin), "GET", "/api/v1/namespaces/default/secrets/s"), Level::Metadata);
        // configmaps/* is configmaps and each of its subresources (upstream compares the resource only).
        assert_eq!(level(Some(&admin), "GET", "/api/v1/namespaces/default/configmaps/c/x"), Level::Metadata);
        assert_eq!(level(Some(&admin), "GET", "/api/v1/namespaces/default/configmaps/c"), Level::Metadata);
        assert_eq!(level(Some(&admin), "GET", "/api/v1/namespaces/default/secrets/s/x"), Level::None);
        assert_eq!(
            level(Some(&admin), "GET", "/api/v1/namespaces/default/configmaps/watched"),
            Level::RequestResponse
        );
        assert_eq!(
            level(Some(&admin), "GET", "/apis/apps/v1/namespaces/a/deployments/d/scale"),
            Level::Metadata
        );
        assert_eq!(level(Some(&admin), "GET", "/apis/apps/v1/namespaces/a/deployments/d"), Level::None);
        assert_eq!(level(None, "GET", "/healthz/etcd"), Level::Metadata);
        assert_eq!(level(None, "GET", "/version"), Level::Metadata);
        assert_eq!(level(None, "GET", "/versions"), Level::None);
        assert_eq!(level(Some(&admin), "GET", "/api/v1/namespaces/a/pods/p/log"), Level::RequestResponse);
        assert_eq!(level(Some(&admin), "GET", "/api/v1/namespaces/a/pods/p"), Level::None);
        assert_eq!(level(Some(&admin), "DELETE", "/apis/batch/v1/namespaces/a/jobs/j"), Level::Request);
        // Users and groups need a user: a request that failed authentication has none.
        assert_eq!(level(None, "GET", "/api/v1/services?watch=true"), Level::None);
    }

    #[test]
    fn stages_and_managed_fields_united_with_the_policy() {
        let policy = parse(POLICY).unwrap();
        let admin = User::named("admin", &["system:masters"]);
        let secrets = policy.evaluate(Some(&admin), &info("GET", "/api/v1/namespaces/d/secrets"));
        assert_eq!(secrets.omit_stages, [Stage::RequestReceived, Stage::ResponseStarted]);
        assert!(secrets.omit_managed_fields, "the policy's omitManagedFields");
        let watched = policy.evaluate(Some(&admin), &info("GET", "/api/v1/namespaces/d/configmaps/watched"));
        assert_eq!(watched.omit_stages, [Stage::RequestReceived]);
        assert!(!watched.omit_managed_fields, "the rule's own omitManagedFields");
        let none = policy.evaluate(Some(&admin), &info("GET", "/metrics"));
        assert_eq!(
            none,
            RequestAuditConfig {
                level: Level::None,
                omit_stages: vec![Stage::RequestReceived],
                omit_managed_fields: true
            }
        );
    }

    #[test]
    fn wildcards_and_empty_lists() {
        let everything =
            parse("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n").unwrap();
        assert_eq!(everything.evaluate(None, &info("GET", "/anything")).level, Level::Metadata);
        let all = parse(
            "apiVersion: audit.k8s.io/v1\nrules:\n- level: Request\n  resources: [{group: '', resources: ['*']}]\n- level: Metadata\n  nonResourceURLs: ['*']\n",
        )
        .unwrap();
        assert_eq!(
            all.evaluate(None, &info("GET", "/api/v1/namespaces/a/pods/p/status")).level,
            Level::Request
        );
        assert_eq!(all.evaluate(None, &info("GET", "/apis/apps/v1/deployments")).level, Level::None);
        assert_eq!(all.evaluate(None, &info("GET", "/openapi/v2")).level, Level::Metadata);
        // Cluster-scoped resources are the namespace "".
        let cluster =
            parse("apiVersion: audit.k8s.io/v1\nrules:\n- level: Request\n  namespaces: ['']\n").unwrap();
        assert_eq!(cluster.evaluate(None, &info("GET", "/api/v1/nodes/n")).level, Level::Request);
        assert_eq!(cluster.evaluate(None, &info("GET", "/api/v1/namespaces/a/pods")).level, Level::None);
        assert_eq!(cluster.evaluate(None, &info("GET", "/healthz")).level, Level::None, "not a resource");
        // JSON is YAML, and a kind may be left out.
        let json = parse(
            r#"{"apiVersion":"audit.k8s.io/v1","rules":[{"level":"RequestResponse","verbs":["get"]}]}"#,
        )
        .unwrap();
        assert_eq!(json.evaluate(None, &info("GET", "/version")).level, Level::RequestResponse);
        assert_eq!(json.evaluate(None, &info("POST", "/version")).level, Level::None);
    }

    #[test]
    fn refusals_in_upstreams_words() {
        let header = "apiVersion: audit.k8s.io/v1\nkind: Policy\n";
        let refused = |body: &str| parse(&format!("{header}{body}")).unwrap_err();
        assert_eq!(
            refused("rules:\n- level: Foo\n"),
            r#"rules[0].level: Unsupported value: "Foo": supported values: "None", "Metadata", "Request", "RequestResponse""#
        );
        assert_eq!(refused("rules:\n- level: Metadata\n- {}\n"), "rules[1].level: Required value");
        assert_eq!(
            refused(
                "omitStages: [Bogus]\nrules:\n- level: Metadata\n  omitStages: [RequestReceived, Nope]\n"
            ),
            "[omitStages[0]: Invalid value: \"Bogus\": allowed stages are RequestReceived,ResponseStarted,ResponseComplete,Panic, rules[0].omitStages[1]: Invalid value: \"Nope\": allowed stages are RequestReceived,ResponseStarted,ResponseComplete,Panic]"
        );
        assert_eq!(refused("rules: []\n"), "loaded illegal policy with 0 rules");
        assert_eq!(
            refused(
                "rules:\n- level: Metadata\n  nonResourceURLs: [healthz, '/a*b']\n  resources: [{group: Bad_Group}, {resourceNames: [x]}]\n"
            ),
            "[rules[0].nonResourceURLs[0]: Invalid value: \"healthz\": non-resource URL rules must begin with a '/' character, \
             rules[0].nonResourceURLs[1]: Invalid value: \"/a*b\": non-resource URL wildcards '*' must be the final character of the rule, \
             rules[0].resources.group: Invalid value: \"Bad_Group\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*'), \
             rules[0].resources.resourceNames: Invalid value: [\"x\"]: using resourceNames requires at least one resource, \
             rules[0].nonResourceURLs: Invalid value: [\"healthz\",\"/a*b\"]: rules cannot apply to both regular resources and non-resource URLs]"
        );
        assert_eq!(
            refused("rules:\n- level: 5\n"),
            "failed decoding: json: cannot unmarshal number into Go struct field PolicyRule.rules.level of type v1.Level"
        );
        assert_eq!(
            refused("rules:\n- level: Metadata\n  resources: [{group: [x]}]\n"),
            "failed decoding: json: cannot unmarshal array into Go struct field GroupResources.rules.resources.group of type string"
        );
        assert_eq!(
            parse("apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules:\n- level: Metadata\n").unwrap_err(),
            r#"failed decoding: no kind "Policy" is registered for version "audit.k8s.io/v1beta1" in scheme "pkg/runtime/scheme.go:110""#
        );
        assert_eq!(
            parse("apiVersion: v1\nkind: ConfigMap\n").unwrap_err(),
            r#"failed decoding: no kind "ConfigMap" is registered for version "v1" in scheme "pkg/runtime/scheme.go:110""#
        );
        for no_version in ["", "kind: Policy\nrules:\n- level: Metadata\n"] {
            assert_eq!(
                parse(no_version).unwrap_err(),
                "unknown group version field audit.k8s.io/__internal, Kind=Policy in policy"
            );
        }
        assert!(parse("rules:\n- level: [x\n").unwrap_err().starts_with("failed decoding: yaml: "));
        assert_eq!(
            parse("apiVersion: audit.k8s.io/v1\nkind: Event\n").unwrap_err(),
            "failed decoding: converting (v1.Event) to (audit.Policy): unknown conversion"
        );
        assert!(parse("- a\n").unwrap_err().starts_with(
            "failed decoding: couldn't get version/kind; json parse error: json: cannot unmarshal array into Go value of type struct"
        ));
        assert_eq!(
            refused("omitManagedFields: \"yes\"\nrules:\n- level: Metadata\n"),
            "failed decoding: json: cannot unmarshal string into Go struct field Policy.omitManagedFields of type bool"
        );
        assert_eq!(
            refused("rules:\n- level: Metadata\n  omitStages: [3]\n"),
            "failed decoding: json: cannot unmarshal number into Go struct field PolicyRule.rules.omitStages of type v1.Stage"
        );
    }

    #[test]
    fn unknown_fields_are_a_warning() {
        let loaded = Policy::parse(
            b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  bogus: 1\n- Level: Request\n",
        )
        .unwrap();
        assert_eq!(
            loaded.warning.as_deref(),
            Some(r#"strict decoding error: unknown field "rules[0].bogus", unknown field "rules[1].Level""#)
        );
        assert_eq!(loaded.policy.rules[1].level, Level::Request, "matched case-insensitively, as Go does");
        assert_eq!(Policy::parse(POLICY.as_bytes()).unwrap().warning, None);
    }

    #[test]
    fn files_name_themselves_in_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        let shown = path.display().to_string();
        assert_eq!(
            Policy::load(&path).unwrap_err(),
            format!("failed to read file path {shown:?}: open {shown}: no such file or directory")
        );
        std::fs::write(&path, "apiVersion: audit.k8s.io/v1\nrules: []\n").unwrap();
        assert_eq!(
            Policy::load(&path).unwrap_err(),
            format!("loaded illegal policy with 0 rules: from file {}", path.display())
        );
    }
}
