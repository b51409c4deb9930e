//! labelSelector and fieldSelector applied to objects, for lists and watches. A watch sees an object
//! that starts to match as ADDED and one that stops matching as DELETED, as kube-apiserver's cacher
//! sends them.

use std::collections::BTreeMap;

use keel_api::fields::FieldSelector;
use keel_api::labels::LabelSelector;
use keel_api::resources::Resource;
use keel_api::status::ApiError;
use serde_json::Value;

/// The selectors of one list or watch.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    labels: Option<LabelSelector>,
    fields: Option<FieldSelector>,
}

impl Filter {
    /// Parses both selectors; a field the resource cannot be selected by is a BadRequest, as upstream
    /// (`field label not supported: <key>`).
    pub fn parse(
        resource: &Resource,
        labels: Option<&str>,
        fields: Option<&str>,
    ) -> Result<Filter, ApiError> {
        let bad = |e: keel_api::labels::SelectorError| ApiError::BadRequest(e.to_string());
        let labels = labels.filter(|s| !s.is_empty()).map(LabelSelector::parse).transpose().map_err(bad)?;
        let fields = fields.filter(|s| !s.is_empty()).map(FieldSelector::parse).transpose().map_err(bad)?;
        if let Some(fields) = &fields {
            fields.check_fields(|field| resource.is_selectable(field)).map_err(bad)?;
        }
        Ok(Filter { labels: labels.filter(|l| !l.is_empty()), fields: fields.filter(|f| !f.is_empty()) })
    }

    /// Whether every object passes.
    pub fn is_everything(&self) -> bool {
        self.labels.is_none() && self.fields.is_none()
    }

    pub fn matches(&self, object: &Value) -> bool {
        let fields: Vec<&str> =
            self.fields.iter().flat_map(FieldSelector::requirements).map(|r| r.field.as_str()).collect();
        self.matches_attrs(&Attrs::of(object, &fields))
    }

    /// Whether an object with these labels and fields passes; `attrs` must hold every field the
    /// selector names (a field it lacks reads as empty).
    pub fn matches_attrs(&self, attrs: &Attrs<'_>) -> bool {
        if let Some(labels) = &self.labels
            && !labels.matches(&attrs.labels)
        {
            return false;
        }
        if let Some(fields) = &self.fields {
            return fields.matches_with(|field| {
                attrs.fields.iter().find(|(name, _)| *name == field).map(|(_, value)| value.as_str())
            });
        }
        true
    }
}

/// What selectors read of an object (upstream's GetAttrs): its labels and its selectable fields,
/// computed once per cached object version (the field names are the resource's, not copied).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attrs<'a> {
    labels: BTreeMap<String, String>,
    fields: Vec<(&'a str, String)>,
}

impl<'a> Attrs<'a> {
    /// The labels of `object` and the values of `fields`.
    pub fn of(object: &Value, fields: &[&'a str]) -> Attrs<'a> {
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .map(|map| map.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned()))).collect())
            .unwrap_or_default();
        let fields = fields.iter().map(|field| (*field, field_value(object, field))).collect();
        Attrs { labels, fields }
    }

    /// The same from stored JSON; bytes that are no JSON object have no labels and empty fields.
    pub fn of_bytes(bytes: &[u8], fields: &[&'a str]) -> Attrs<'a> {
        match serde_json::from_slice::<Value>(bytes) {
            Ok(object) => Attrs::of(&object, fields),
            Err(_) => Attrs::of(&Value::Null, fields),
        }
    }
}

/// A field's value as upstream's field sets hold it: strings as they are, booleans and numbers
/// printed, anything missing empty.
fn field_value(object: &Value, field: &str) -> String {
    // Upstream's field labels that name another path (GetAttrs / conversion funcs).
    let path = match field {
        "status.successful" => "status.succeeded",
        "source" => "source.component",
        // events.k8s.io's names for the stored core Event's fields.
        "reportingController" => "reportingComponent",
        other => other,
    };
    let regarding = path.strip_prefix("regarding.").map(|rest| format!("involvedObject.{rest}"));
    let path = regarding.as_deref().unwrap_or(path);
    let pointer = format!("/{}", path.replace('.', "/"));
    match object.pointer(&pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => n.to_string(),
        // status.podIPs selects on the first IP.
        Some(Value::Array(items)) => {
            items.first().and_then(|i| i.get("ip")).and_then(Value::as_str).unwrap_or("").to_owned()
        }
        // A missing field is its type's zero value, as in upstream's typed field sets.
        _ => match field {
            "spec.unschedulable" | "spec.hostNetwork" => "false".to_owned(),
            "status.replicas" | "status.successful" => "0".to_owned(),
            _ => String::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use keel_api::resources::find;
    use serde_json::json;

    use super::*;

    #[test]
    fn labels_and_fields() {
        let pods = find("", "v1", "pods").unwrap();
        let pod = json!({"metadata": {"name": "a", "namespace": "d", "labels": {"app": "web", "tier": "fe"}},
                         "spec": {"nodeName": "n1", "hostNetwork": true}, "status": {"phase": "Running"}});
        let check = |labels: Option<&str>, fields: Option<&str>| {
            Filter::parse(pods, labels, fields).unwrap().matches(&pod)
        };
        assert!(check(Some("app=web"), None));
        assert!(check(Some("app in (web,api),!missing"), Some("spec.nodeName=n1,status.phase!=Pending")));
        assert!(!check(Some("tier notin (fe)"), None));
        assert!(check(None, Some("metadata.name=a,metadata.namespace=d,spec.hostNetwork=true")));
        assert!(!check(None, Some("spec.nodeName=n2")));
        assert!(check(None, Some("spec.schedulerName=")), "a missing field is empty");
        let nodes = find("", "v1", "nodes").unwrap();
        let node = json!({"metadata": {"name": "n"}, "spec": {}});
        assert!(Filter::parse(nodes, None, Some("spec.unschedulable=false")).unwrap().matches(&node));
        let jobs = find("batch", "v1", "jobs").unwrap();
        let job = json!({"metadata": {"name": "j"}, "status": {"succeeded": 2}});
        assert!(Filter::parse(jobs, None, Some("status.successful=2")).unwrap().matches(&job));
        assert!(
            Filter::parse(jobs, None, Some("status.successful=0")).unwrap().matches(&json!({"metadata": {}}))
        );
        assert!(Filter::parse(pods, Some(""), Some("")).unwrap().is_everything());
    }

    #[test]
    fn unsupported_fields_and_bad_selectors() {
        let configmaps = find("", "v1", "configmaps").unwrap();
        let error = Filter::parse(configmaps, None, Some("data.a=b")).unwrap_err();
        assert_eq!(error.code(), 400);
        assert!(error.to_string().contains("field label not supported: data.a"), "{error}");
        assert_eq!(Filter::parse(configmaps, Some("a in (b"), None).unwrap_err().code(), 400);
    }
}
