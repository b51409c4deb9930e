//! Tables of custom resources, as apiextensions-apiserver's tableconvertor prints them: a Name
//! column, then the version's additionalPrinterColumns (an Age column when it declares none), each
//! cell read at the column's simple JSON path and typed by the column's type.

use jiff::Timestamp;
use serde_json::{Value, json};

use super::{NAME, Row, value};
use crate::custom::{CustomVersion, PrinterColumn};

/// The `columnDefinitions`.
pub(super) fn columns(version: &CustomVersion) -> Vec<Value> {
    let mut columns = vec![NAME.to_json()];
    columns.extend(version.columns.iter().map(|c| {
        json!({
            "name": c.name,
            "type": c.kind,
            "format": c.format,
            "description": c.description,
            "priority": c.priority,
        })
    }));
    columns
}

/// One object's row.
pub(super) fn row(version: &CustomVersion, object: &Value, now: Timestamp) -> Row {
    let mut cells = vec![json!(value::name(object))];
    cells.extend(version.columns.iter().map(|column| cell(column, object, now)));
    Row::new(cells)
}

/// The value at a simple JSON path (`.spec.replicas`; also `.spec.items[0].name`).
fn at<'a>(object: &'a Value, path: &str) -> Option<&'a Value> {
    let mut node = object;
    for part in path.trim_start_matches('.').split('.').filter(|p| !p.is_empty()) {
        let (name, indexes) = match part.find('[') {
            Some(at) => (&part[..at], &part[at..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            node = node.get(name)?;
        }
        for index in indexes.split(']').filter(|s| !s.is_empty()) {
            let index: usize = index.trim_start_matches('[').parse().ok()?;
            node = node.get(index)?;
        }
    }
    Some(node)
}

/// upstream's cellForJSONValue: integers and numbers as numbers, booleans as booleans, dates as
/// the time since, strings as jsonpath prints them; `null` for a missing value or one of another type.
fn cell(column: &PrinterColumn, object: &Value, now: Timestamp) -> Value {
    let Some(found) = at(object, &column.json_path).filter(|v| !v.is_null()) else { return Value::Null };
    match column.kind.as_str() {
        "integer" => match found {
            Value::Number(n) => {
                n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)).map_or(Value::Null, Value::from)
            }
            _ => Value::Null,
        },
        "number" => found.as_f64().map_or(Value::Null, Value::from),
        "boolean" => found.as_bool().map_or(Value::Null, Value::from),
        "date" => match found.as_str().and_then(|s| s.parse::<Timestamp>().ok()) {
            Some(time) => json!(value::since(Some(time), now)),
            None => Value::Null,
        },
        _ => match found {
            Value::String(s) => json!(s),
            Value::Number(_) | Value::Bool(_) => json!(found.to_string()),
            other => json!(other.to_string()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::schema::Schema;

    #[test]
    fn cells_by_type() {
        let column = |name: &str, kind: &str, path: &str| PrinterColumn {
            name: name.into(),
            kind: kind.into(),
            format: String::new(),
            description: String::new(),
            priority: 0,
            json_path: path.into(),
        };
        let version = CustomVersion {
            resource: crate::resources::find("", "v1", "pods").unwrap(),
            crd: String::new(),
            list_kind: String::new(),
            storage_version: String::new(),
            openapi_schema: Value::Null,
            schema: Schema::default(),
            apply_type: crate::managed_fields::schema::TypeDef::Deduced,
            columns: vec![
                column("Size", "integer", ".spec.size"),
                column("Color", "string", ".spec.color"),
                column("Ready", "boolean", ".status.ready"),
                column("Age", "date", ".metadata.creationTimestamp"),
                column("First", "string", ".spec.tags[0]"),
                column("Missing", "string", ".spec.nothing"),
            ],
            status: false,
            scale: None,
            selectable_fields: &[],
        };
        let object = json!({"metadata": {"name": "w", "creationTimestamp": "2025-06-01T11:00:00Z"},
            "spec": {"size": 3, "color": "red", "tags": ["a"]}, "status": {"ready": true}});
        let now: Timestamp = "2025-06-01T12:00:00Z".parse().unwrap();
        assert_eq!(
            row(&version, &object, now).cells,
            [json!("w"), json!(3), json!("red"), json!(true), json!("60m"), json!("a"), Value::Null]
        );
        assert_eq!(columns(&version)[1]["name"], "Size");
    }
}
