//! Keeping the default policy and the aggregated ClusterRoles current, as pure computations over
//! objects:
//! - [`role`] and [`binding`]: upstream's RBAC reconciliation at start (the rbac/bootstrap-roles
//!   post-start hook): a default role or binding that is missing is created; one that exists with
//!   `rbac.authorization.kubernetes.io/autoupdate` not `"false"` gets the rules, subjects, labels
//!   and annotations it lacks (what an operator added stays); a binding whose roleRef changed is
//!   recreated.
//! - [`aggregate`]: upstream's clusterrole-aggregation controller: a ClusterRole with an
//!   aggregationRule holds the rules of every other ClusterRole its selectors match, in name order,
//!   each rule once.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;
use keel_api::labels::LabelSelector;
use serde_json::{Value, json};

use super::rules::{self, PolicyRule};

/// The annotation that lets reconciliation update an object.
pub const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

/// What reconciliation does with one default object.
#[derive(Debug, Clone, PartialEq)]
pub enum Reconciled {
    Unchanged,
    Update(Value),
    /// Delete and create again (a binding's roleRef cannot be changed).
    Recreate(Value),
}

fn autoupdate(existing: &Value) -> bool {
    existing["metadata"]["annotations"][AUTOUPDATE].as_str() != Some("false")
}

/// Labels and annotations of `expected` the existing object lacks, added.
fn merge_metadata(existing: &Value, expected: &Value, into: &mut Value) {
    for field in ["labels", "annotations"] {
        if let Some(wanted) = expected["metadata"][field].as_object() {
            let map = into["metadata"].as_object_mut().map(|m| m.entry(field).or_insert_with(|| json!({})));
            if let Some(Value::Object(map)) = map {
                for (key, value) in wanted {
                    map.entry(key.clone()).or_insert_with(|| value.clone());
                }
            }
        }
    }
    let _ = existing;
}

/// A default Role or ClusterRole against what is stored.
pub fn role(existing: &Value, expected: &Value) -> Reconciled {
    if !autoupdate(existing) {
        return Reconciled::Unchanged;
    }
    let mut updated = existing.clone();
    merge_metadata(existing, expected, &mut updated);
    let held: Vec<PolicyRule> =
        existing["rules"].as_array().into_iter().flatten().map(PolicyRule::from_json).collect();
    let wanted: Vec<PolicyRule> =
        expected["rules"].as_array().into_iter().flatten().map(PolicyRule::from_json).collect();
    // An aggregated role's rules are the aggregation's: only its selectors are reconciled.
    if expected.get("aggregationRule").is_some() {
        let mut selectors: Vec<Value> =
            existing["aggregationRule"]["clusterRoleSelectors"].as_array().cloned().unwrap_or_default();
        for selector in expected["aggregationRule"]["clusterRoleSelectors"].as_array().into_iter().flatten() {
            if !selectors.contains(selector) {
                selectors.push(selector.clone());
            }
        }
        updated["aggregationRule"] = json!({"clusterRoleSelectors": selectors});
    } else if !rules::uncovered(&held, &wanted).is_empty() {
        let mut all = existing["rules"].as_array().cloned().unwrap_or_default();
        for (rule, value) in wanted.iter().zip(expected["rules"].as_array().into_iter().flatten()) {
            if !rules::uncovered(&held, std::slice::from_ref(rule)).is_empty() {
                all.push(value.clone());
            }
        }
        updated["rules"] = Value::Array(all);
    }
    if updated == *existing { Reconciled::Unchanged } else { Reconciled::Update(updated) }
}

/// A default RoleBinding or ClusterRoleBinding against what is stored.
pub fn binding(existing: &Value, expected: &Value) -> Reconciled {
    if !autoupdate(existing) {
        return Reconciled::Unchanged;
    }
    if existing["roleRef"] != expected["roleRef"] {
        return Reconciled::Recreate(expected.clone());
    }
    let mut updated = existing.clone();
    merge_metadata(existing, expected, &mut updated);
    let mut subjects = existing["subjects"].as_array().cloned().unwrap_or_default();
    for subject in expected["subjects"].as_array().into_iter().flatten() {
        if !subjects.contains(subject) {
            subjects.push(subject.clone());
        }
    }
    if !subjects.is_empty() {
        updated["subjects"] = Value::Array(subjects);
    }
    if updated == *existing { Reconciled::Unchanged } else { Reconciled::Update(updated) }
}

fn labels(role: &Value) -> BTreeMap<String, String> {
    role["metadata"]["labels"]
        .as_object()
        .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
        .unwrap_or_default()
}

/// The rules each aggregated ClusterRole should hold, for those whose rules differ: (name, rules).
/// Aggregated roles may aggregate each other (admin holds edit's rules, edit view's): passes are
/// repeated until nothing changes, so one round of writes leaves every role final.
pub fn aggregate(cluster_roles: &[Value]) -> Vec<(String, Vec<Value>)> {
    let mut roles = cluster_roles.to_vec();
    let mut changed: Vec<String> = Vec::new();
    // Each pass settles at least one more level of nesting; the bound only guards a cycle.
    for _pass in 0..cluster_roles.len().max(1) {
        let updates = aggregate_once(&roles);
        if updates.is_empty() {
            break;
        }
        for (name, rules) in updates {
            if let Some(role) = roles.iter_mut().find(|r| r["metadata"]["name"].as_str() == Some(&name)) {
                role["rules"] = Value::Array(rules);
            }
            if !changed.contains(&name) {
                changed.push(name);
            }
        }
    }
    changed
        .into_iter()
        .filter_map(|name| {
            let role = roles.iter().find(|r| r["metadata"]["name"].as_str() == Some(&name))?;
            Some((name, role["rules"].as_array().cloned().unwrap_or_default()))
        })
        .collect()
}

fn aggregate_once(cluster_roles: &[Value]) -> Vec<(String, Vec<Value>)> {
    let mut sorted: Vec<&Value> = cluster_roles.iter().collect();
    sorted.sort_by(|a, b| a["metadata"]["name"].as_str().cmp(&b["metadata"]["name"].as_str()));
    let mut updates = Vec::new();
    for role in &sorted {
        let Some(selectors) = role["aggregationRule"]["clusterRoleSelectors"].as_array() else { continue };
        let selectors: Vec<LabelSelector> = selectors
            .iter()
            .filter_map(|s| serde_json::from_value::<metav1::LabelSelector>(s.clone()).ok())
            .filter_map(|s| LabelSelector::from_k8s(&s).ok())
            .collect();
        let name = role["metadata"]["name"].as_str().unwrap_or_default();
        let mut aggregated: Vec<Value> = Vec::new();
        for other in &sorted {
            if other["metadata"]["name"].as_str() == Some(name) {
                continue;
            }
            let other_labels = labels(other);
            if !selectors.iter().any(|s| s.matches(&other_labels)) {
                continue;
            }
            for rule in other["rules"].as_array().into_iter().flatten() {
                if !aggregated.iter().any(|held| PolicyRule::from_json(held) == PolicyRule::from_json(rule)) {
                    aggregated.push(rule.clone());
                }
            }
        }
        let current = role["rules"].as_array().cloned().unwrap_or_default();
        let same = current.len() == aggregated.len()
            && current
                .iter()
                .zip(&aggregated)
                .all(|(a, b)| PolicyRule::from_json(a) == PolicyRule::from_json(b));
        if !same {
            updates.push((name.to_owned(), aggregated));
        }
    }
    updates
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_get_what_they_lack_and_keep_what_they_have() {
        let expected = json!({"metadata": {"name": "r", "labels": {"a": "1"}, "annotations": {AUTOUPDATE: "true"}},
                              "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]},
                                        {"verbs": ["list"], "apiGroups": [""], "resources": ["pods"]}]});
        let existing = json!({"metadata": {"name": "r", "labels": {"mine": "x"}},
                              "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]},
                                        {"verbs": ["delete"], "apiGroups": [""], "resources": ["secrets"]}]});
        let Reconciled::Update(updated) = role(&existing, &expected) else { panic!("an update") };
        assert_eq!(updated["rules"].as_array().unwrap().len(), 3);
        assert_eq!(updated["metadata"]["labels"], json!({"mine": "x", "a": "1"}));
        assert_eq!(role(&updated, &expected), Reconciled::Unchanged);
        let mut frozen = existing.clone();
        frozen["metadata"]["annotations"] = json!({AUTOUPDATE: "false"});
        assert_eq!(role(&frozen, &expected), Reconciled::Unchanged);
    }

    #[test]
    fn bindings_gain_subjects_and_are_recreated_for_a_new_role() {
        let expected = json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "r"},
                              "subjects": [{"kind": "Group", "name": "g"}]});
        let existing = json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "r"},
                              "subjects": [{"kind": "User", "name": "u"}]});
        let Reconciled::Update(updated) = binding(&existing, &expected) else { panic!("an update") };
        assert_eq!(updated["subjects"].as_array().unwrap().len(), 2);
        let moved = json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "old"}});
        assert_eq!(binding(&moved, &expected), Reconciled::Recreate(expected.clone()));
    }

    #[test]
    fn aggregation_collects_matching_roles_in_name_order() {
        let roles = [
            json!({"metadata": {"name": "view"}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "view"}}]}}),
            json!({"metadata": {"name": "b", "labels": {"agg": "view"}}, "rules": [{"verbs": ["get"], "resources": ["b"]}]}),
            json!({"metadata": {"name": "a", "labels": {"agg": "view"}}, "rules": [{"verbs": ["get"], "resources": ["a"]}, {"verbs": ["get"], "resources": ["b"]}]}),
            json!({"metadata": {"name": "c"}, "rules": [{"verbs": ["get"], "resources": ["c"]}]}),
        ];
        let updates = aggregate(&roles);
        assert_eq!(
            updates,
            [(
                "view".to_owned(),
                vec![
                    json!({"verbs": ["get"], "resources": ["a"]}),
                    json!({"verbs": ["get"], "resources": ["b"]})
                ]
            )]
        );
        let mut done = roles.to_vec();
        done[0]["rules"] = json!(updates[0].1);
        assert!(aggregate(&done).is_empty());
        // Nested: "outer" aggregates "view", which aggregates a and b: one call settles both.
        let mut nested = roles.to_vec();
        nested[0]["metadata"]["labels"] = json!({"agg": "outer"});
        nested.push(json!({"metadata": {"name": "outer"}, "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "outer"}}]}}));
        let updates = aggregate(&nested);
        assert_eq!(updates.len(), 2, "{updates:?}");
        assert!(updates.iter().all(|(_, rules)| rules.len() == 2), "{updates:?}");
    }
}
