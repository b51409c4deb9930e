//! Reading objects as Go's printers see them after decoding: an absent field (or a JSON `null`, or
//! a value of the wrong type, which upstream could never have stored) is the Go zero value — `""`,
//! `0`, `false`, an empty list, a nil pointer, the zero time.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::Value;

use super::duration::human_duration;

/// The value at `path` (object keys), `None` when absent or `null`.
pub(super) fn at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(key)).filter(|v| !v.is_null())
}

/// Whether `path` holds a non-null value (a non-nil Go pointer).
pub(super) fn present(value: &Value, path: &[&str]) -> bool {
    at(value, path).is_some()
}

/// The string at `path`, `""` otherwise.
pub(super) fn str_at<'a>(value: &'a Value, path: &[&str]) -> &'a str {
    at(value, path).and_then(Value::as_str).unwrap_or("")
}

/// The string at `path` if there is one (a Go `*string`).
pub(super) fn opt_str<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(value, path).and_then(Value::as_str)
}

/// An integer as Go decodes it into an `int32`/`int64` field; `0` otherwise.
pub(super) fn as_int(value: &Value) -> i64 {
    value
        .as_i64()
        .or_else(|| value.as_u64().map(|u| i64::try_from(u).unwrap_or(i64::MAX)))
        .or_else(|| {
            // Integral floats (`3.0`) decode into Go integers; the cast saturates.
            value.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64)
        })
        .unwrap_or(0)
}

/// The integer at `path`, `0` otherwise.
pub(super) fn int_at(value: &Value, path: &[&str]) -> i64 {
    at(value, path).map_or(0, as_int)
}

/// The integer at `path` if there is one (a Go `*int32`).
pub(super) fn opt_int(value: &Value, path: &[&str]) -> Option<i64> {
    at(value, path).filter(|v| v.is_number()).map(as_int)
}

/// The boolean at `path`, `false` otherwise.
pub(super) fn bool_at(value: &Value, path: &[&str]) -> bool {
    opt_bool(value, path).unwrap_or(false)
}

/// The boolean at `path` if there is one (a Go `*bool`).
pub(super) fn opt_bool(value: &Value, path: &[&str]) -> Option<bool> {
    at(value, path).and_then(Value::as_bool)
}

/// The list at `path`, empty otherwise.
pub(super) fn array_at<'a>(value: &'a Value, path: &[&str]) -> &'a [Value] {
    at(value, path).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// How many entries the map at `path` has (Go's `len` of a map).
pub(super) fn map_len(value: &Value, path: &[&str]) -> usize {
    at(value, path).and_then(Value::as_object).map_or(0, serde_json::Map::len)
}

/// The string map at `path` (labels, annotations, selectors), entries of other types skipped.
pub(super) fn string_map<'a>(value: &'a Value, path: &[&str]) -> BTreeMap<&'a str, &'a str> {
    at(value, path)
        .and_then(Value::as_object)
        .map(|map| map.iter().filter_map(|(k, v)| Some((k.as_str(), v.as_str()?))).collect())
        .unwrap_or_default()
}

/// `metadata.name`.
pub(super) fn name(object: &Value) -> &str {
    str_at(object, &["metadata", "name"])
}

/// `metadata.deletionTimestamp != nil`.
pub(super) fn deleting(object: &Value) -> bool {
    present(object, &["metadata", "deletionTimestamp"])
}

/// The annotation `key`, if set.
pub(super) fn annotation<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    at(object, &["metadata", "annotations", key]).and_then(Value::as_str)
}

/// Go's zero `time.Time` (January 1, year 1, UTC), which `metav1.Time.IsZero` tests for.
const ZERO_TIME_SECONDS: i64 = -62_135_596_800;

/// A `metav1.Time` or `metav1.MicroTime` (RFC 3339); `None` for the zero time, which is also what
/// `null`, an absent field or an unparsable string decode to here.
pub(super) fn time_at(value: &Value, path: &[&str]) -> Option<Timestamp> {
    at(value, path)
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<Timestamp>().ok())
        .filter(|t| t.as_second() != ZERO_TIME_SECONDS || t.subsec_nanosecond() != 0)
}

/// Upstream's `translateTimestampSince`: `<unknown>` for the zero time, otherwise the human
/// duration from `time` to `now`.
pub(super) fn since(time: Option<Timestamp>, now: Timestamp) -> String {
    time.map_or_else(|| "<unknown>".to_owned(), |t| human_duration(now.duration_since(t)))
}

/// The AGE cell: [`since`] the object's `creationTimestamp`.
pub(super) fn age(object: &Value, now: Timestamp) -> String {
    since(time_at(object, &["metadata", "creationTimestamp"]), now)
}

/// Upstream's `labels.FormatLabels`: `k=v` pairs sorted as strings, joined by `,`; `<none>` when
/// empty.
pub(super) fn format_labels(value: &Value, path: &[&str]) -> String {
    let mut pairs: Vec<String> = string_map(value, path).iter().map(|(k, v)| format!("{k}={v}")).collect();
    if pairs.is_empty() {
        return "<none>".to_owned();
    }
    pairs.sort_unstable();
    pairs.join(",")
}

/// Upstream's `metav1.LabelSelectorAsSelector(...).String()`: `Ok("")` for an absent selector
/// (`labels.Nothing()`) or an empty one (`labels.Everything()`), `Err` for one that does not convert
/// (a bad key, value or operator).
pub(super) fn selector_string(value: &Value, path: &[&str]) -> Result<String, ()> {
    let Some(selector) = at(value, path) else { return Ok(String::new()) };
    let selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector =
        serde_json::from_value(selector.clone()).map_err(|_| ())?;
    crate::labels::LabelSelector::from_k8s(&selector).map(|s| s.to_string()).map_err(|_| ())
}

/// Upstream's `metav1.FormatLabelSelector`: `<error>` when the selector does not convert, `<none>`
/// when it prints empty.
pub(super) fn format_label_selector(value: &Value, path: &[&str]) -> String {
    match selector_string(value, path) {
        Err(()) => "<error>".to_owned(),
        Ok(s) if s.is_empty() => "<none>".to_owned(),
        Ok(s) => s,
    }
}

/// Upstream's `layoutContainerCells`: the containers' names and their images, each joined by `,`.
pub(super) fn layout_containers(containers: &[Value]) -> (String, String) {
    let names: Vec<&str> = containers.iter().map(|c| str_at(c, &["name"])).collect();
    let images: Vec<&str> = containers.iter().map(|c| str_at(c, &["image"])).collect();
    (names.join(","), images.join(","))
}

/// An `intstr.IntOrString` printed by its `String()`: the integer in decimal, or the string.
pub(super) fn int_or_string(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => as_int(other).to_string(),
    }
}

/// Upstream's `printBoolPtr`: `True`, `False` or `<unset>`.
pub(super) fn bool_ptr(value: Option<bool>) -> String {
    match value {
        Some(true) => "True".to_owned(),
        Some(false) => "False".to_owned(),
        None => "<unset>".to_owned(),
    }
}

/// Upstream's `listWithMoreString`: the first `max` entries joined by `,`, then ` + N more...`;
/// `<unset>` for none.
pub(super) fn list_with_more(items: impl IntoIterator<Item = String>, max: usize) -> String {
    let mut list = Vec::new();
    let mut count = 0usize;
    for item in items {
        if list.len() < max {
            list.push(item);
        }
        count += 1;
    }
    let joined = list.join(",");
    if count > max {
        format!("{joined} + {} more...", count - max)
    } else if joined.is_empty() {
        "<unset>".to_owned()
    } else {
        joined
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn zero_values_for_anything_missing_or_mistyped() {
        let v = json!({"a": {"b": null, "s": 5, "n": "x", "f": 3.0, "big": u64::MAX}});
        assert_eq!(str_at(&v, &["a", "b"]), "");
        assert_eq!(str_at(&v, &["a", "s"]), "");
        assert_eq!(str_at(&v, &["x", "y", "z"]), "");
        assert_eq!(int_at(&v, &["a", "n"]), 0);
        assert_eq!(int_at(&v, &["a", "f"]), 3);
        assert_eq!(int_at(&v, &["a", "big"]), i64::MAX);
        assert!(!present(&v, &["a", "b"]));
        assert!(array_at(&json!([1]), &["a"]).is_empty());
        assert_eq!(opt_int(&v, &["a", "n"]), None);
    }

    #[test]
    fn times() {
        let now: Timestamp = "2025-06-01T12:00:00Z".parse().unwrap();
        let v = json!({"t": "2025-06-01T11:59:30Z", "zero": "0001-01-01T00:00:00Z", "bad": "yesterday",
                       "micro": "2025-06-01T11:00:00.123456Z"});
        assert_eq!(since(time_at(&v, &["t"]), now), "30s");
        assert_eq!(since(time_at(&v, &["zero"]), now), "<unknown>");
        assert_eq!(since(time_at(&v, &["bad"]), now), "<unknown>");
        assert_eq!(since(time_at(&v, &["missing"]), now), "<unknown>");
        assert_eq!(since(time_at(&v, &["micro"]), now), "59m");
    }

    #[test]
    fn labels_and_selectors() {
        let v = json!({"l": {"a": "2", "a.b": "1"}, "s": {"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]},
            "empty": {}, "bad": {"matchExpressions": [{"key": "k", "operator": "Near"}]}});
        // Sorted as `k=v` strings, like upstream's labels.Set.String: "a.b=1" < "a=2".
        assert_eq!(format_labels(&v, &["l"]), "a.b=1,a=2");
        assert_eq!(format_labels(&v, &["none"]), "<none>");
        assert_eq!(format_label_selector(&v, &["s"]), "app=web,tier in (a,b)");
        assert_eq!(format_label_selector(&v, &["empty"]), "<none>");
        assert_eq!(format_label_selector(&v, &["missing"]), "<none>");
        assert_eq!(format_label_selector(&v, &["bad"]), "<error>");
        assert_eq!(selector_string(&v, &["missing"]), Ok(String::new()));
    }

    #[test]
    fn lists_with_more() {
        let items = |n: usize| (0..n).map(|i| i.to_string());
        assert_eq!(list_with_more(items(0), 3), "<unset>");
        assert_eq!(list_with_more(items(3), 3), "0,1,2");
        assert_eq!(list_with_more(items(5), 3), "0,1,2 + 2 more...");
    }
}
