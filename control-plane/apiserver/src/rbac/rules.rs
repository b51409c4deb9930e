//! One RBAC PolicyRule: whether it allows a request (upstream's RuleAllows), and whether a set of
//! rules covers another (upstream's validation.Covers, for escalation checks).

use serde_json::{Value, json};

use crate::request::RequestInfo;

const ALL: &str = "*";

/// rbac.authorization.k8s.io/v1 PolicyRule.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct PolicyRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_owned).collect()
}

fn has(set: &[String], value: &str) -> bool {
    set.iter().any(|s| s == value)
}

impl PolicyRule {
    pub fn from_json(rule: &Value) -> PolicyRule {
        PolicyRule {
            verbs: strings(&rule["verbs"]),
            api_groups: strings(&rule["apiGroups"]),
            resources: strings(&rule["resources"]),
            resource_names: strings(&rule["resourceNames"]),
            non_resource_urls: strings(&rule["nonResourceURLs"]),
        }
    }

    /// The rule as its API object holds it (empty lists left out).
    pub fn to_json(&self) -> Value {
        let mut rule = json!({"verbs": self.verbs});
        let mut put = |key: &str, values: &[String]| {
            if !values.is_empty() {
                rule[key] = json!(values);
            }
        };
        put("apiGroups", &self.api_groups);
        put("resources", &self.resources);
        put("resourceNames", &self.resource_names);
        put("nonResourceURLs", &self.non_resource_urls);
        rule
    }

    fn verb_matches(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == ALL || v == verb)
    }

    /// upstream's RuleAllows.
    pub fn allows(&self, info: &RequestInfo) -> bool {
        if !self.verb_matches(&info.verb) {
            return false;
        }
        if info.is_resource_request {
            let combined = if info.subresource.is_empty() {
                info.resource.clone()
            } else {
                format!("{}/{}", info.resource, info.subresource)
            };
            self.api_groups.iter().any(|g| g == ALL || *g == info.api_group)
                && self.resources.iter().any(|r| {
                    r == ALL
                        || *r == combined
                        || (!info.subresource.is_empty()
                            && r.strip_prefix("*/").is_some_and(|sub| sub == info.subresource))
                })
                && (self.resource_names.is_empty() || has(&self.resource_names, &info.name))
        } else {
            self.non_resource_urls.iter().any(|url| url_matches(url, &info.path))
        }
    }

    /// The rule as upstream's CompactString prints it: `{APIGroups:["apps"], Resources:["deployments"], Verbs:["get" "list"]}`.
    pub fn compact_string(&self) -> String {
        let quoted = |values: &[String]| {
            let items: Vec<String> = values.iter().map(|v| format!("{v:?}")).collect();
            format!("[{}]", items.join(" "))
        };
        let mut parts = Vec::new();
        for (label, values) in [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ] {
            if !values.is_empty() {
                parts.push(format!("{label}:{}", quoted(values)));
            }
        }
        format!("{{{}}}", parts.join(", "))
    }

    /// The rule broken into rules of one verb, group and resource (and the names, kept together),
    /// or one verb and URL: upstream's BreakdownRule.
    fn breakdown(&self) -> Vec<PolicyRule> {
        let mut atoms = Vec::new();
        for group in &self.api_groups {
            for resource in &self.resources {
                for verb in &self.verbs {
                    atoms.push(PolicyRule {
                        verbs: vec![verb.clone()],
                        api_groups: vec![group.clone()],
                        resources: vec![resource.clone()],
                        resource_names: self.resource_names.clone(),
                        non_resource_urls: Vec::new(),
                    });
                }
            }
        }
        for url in &self.non_resource_urls {
            for verb in &self.verbs {
                atoms.push(PolicyRule {
                    verbs: vec![verb.clone()],
                    non_resource_urls: vec![url.clone()],
                    ..PolicyRule::default()
                });
            }
        }
        atoms
    }

    /// upstream's ruleCovers: whether this (owner's) rule allows everything `wanted` does.
    fn covers(&self, wanted: &PolicyRule) -> bool {
        let all_in =
            |owner: &[String], wanted: &[String]| has(owner, ALL) || wanted.iter().all(|w| has(owner, w));
        let resources = has(&self.resources, ALL)
            || wanted.resources.iter().all(|resource| {
                has(&self.resources, resource)
                    || resource
                        .split_once('/')
                        .is_some_and(|(_, sub)| has(&self.resources, &format!("*/{sub}")))
            });
        let urls = wanted.non_resource_urls.iter().all(|wanted| {
            self.non_resource_urls.iter().any(|owner| {
                owner == ALL
                    || owner == wanted
                    || owner.strip_suffix('*').is_some_and(|p| wanted.starts_with(p))
            })
        });
        let names = self.resource_names.is_empty()
            || (!wanted.resource_names.is_empty() && all_in(&self.resource_names, &wanted.resource_names));
        all_in(&self.verbs, &wanted.verbs)
            && all_in(&self.api_groups, &wanted.api_groups)
            && resources
            && urls
            && names
    }
}

/// A non-resource URL rule: `*`, the path itself, or a prefix ending in `*`.
fn url_matches(rule: &str, path: &str) -> bool {
    rule == ALL || rule == path || rule.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix))
}

/// upstream's Covers: the parts of `wanted` that no rule of `owner` allows (empty: covered).
pub fn uncovered(owner: &[PolicyRule], wanted: &[PolicyRule]) -> Vec<PolicyRule> {
    wanted
        .iter()
        .flat_map(PolicyRule::breakdown)
        .filter(|atom| !owner.iter().any(|rule| rule.covers(atom)))
        .collect()
}

/// upstream's CompactRules: atoms of one group and one resource without names merged, their verbs
/// in the order met.
pub fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    for rule in rules {
        let simple = rule.api_groups.len() == 1
            && rule.resources.len() == 1
            && rule.resource_names.is_empty()
            && rule.non_resource_urls.is_empty();
        if simple
            && let Some(existing) = out.iter_mut().find(|r| {
                r.resource_names.is_empty()
                    && r.non_resource_urls.is_empty()
                    && r.api_groups == rule.api_groups
                    && r.resources == rule.resources
            })
        {
            for verb in rule.verbs {
                if !has(&existing.verbs, &verb) {
                    existing.verbs.push(verb);
                }
            }
            continue;
        }
        out.push(rule);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::info;

    fn rule(value: &Value) -> PolicyRule {
        PolicyRule::from_json(value)
    }

    #[test]
    fn allows_as_upstream() {
        let get = |path: &str| info(&http::Method::GET, path, None);
        let scale = rule(&json!({"verbs": ["get"], "apiGroups": ["*"], "resources": ["*/scale"]}));
        assert!(scale.allows(&get("/apis/apps/v1/namespaces/a/deployments/d/scale")));
        assert!(!scale.allows(&get("/apis/apps/v1/namespaces/a/deployments/d")));
        let pods = rule(&json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}));
        assert!(!pods.allows(&get("/api/v1/namespaces/a/pods/p/status")), "a subresource is its own");
        assert!(!pods.allows(&get("/apis/apps/v1/namespaces/a/pods/p")), "another group");
        let urls = rule(&json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/healthz/*"]}));
        assert!(urls.allows(&get("/healthz")) && urls.allows(&get("/healthz/etcd")));
        assert!(!urls.allows(&get("/livez")) && !urls.allows(&get("/api/v1/namespaces/a/pods/healthz")));
    }

    #[test]
    fn covers_and_compacts_as_upstream() {
        let owner = [
            rule(&json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "*/status"]})),
            rule(
                &json!({"verbs": ["*"], "apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"]}),
            ),
            rule(&json!({"verbs": ["get"], "nonResourceURLs": ["/api/*"]})),
        ];
        let wanted = [
            rule(&json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods", "services/status"]})),
            rule(&json!({"verbs": ["get"], "nonResourceURLs": ["/api/v1"]})),
            rule(
                &json!({"verbs": ["update"], "apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["web"]}),
            ),
        ];
        assert!(uncovered(&owner, &wanted).is_empty());
        let escalating = [
            rule(&json!({"verbs": ["get", "delete", "watch"], "apiGroups": [""], "resources": ["pods"]})),
            rule(&json!({"verbs": ["update"], "apiGroups": ["apps"], "resources": ["deployments"]})),
        ];
        let missing = compact(uncovered(&owner, &escalating));
        let text: Vec<String> = missing.iter().map(PolicyRule::compact_string).collect();
        assert_eq!(
            text,
            [
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["delete" "watch"]}"#,
                r#"{APIGroups:["apps"], Resources:["deployments"], Verbs:["update"]}"#,
            ]
        );
    }
}
