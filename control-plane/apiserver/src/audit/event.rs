//! The audit.k8s.io/v1 Event as kube-apiserver's log backend writes it: one JSON object per line,
//! fields in upstream's order and with its omissions (`user` and `responseStatus.metadata` always
//! there, empty lists and strings left out), times as metav1.MicroTime (RFC 3339, microseconds,
//! UTC); or the `legacy` one-line text form (upstream's EventString). No IO.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use serde_json::value::RawValue;

use super::policy::{Level, Stage};
use crate::auth::User;

/// authentication.k8s.io/v1 UserInfo.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UserInfo {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

impl From<&User> for UserInfo {
    fn from(user: &User) -> UserInfo {
        UserInfo {
            username: user.name.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
        }
    }
}

/// What the request is about (audit.k8s.io/v1 ObjectReference).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReference {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// The bounded fields of the response's metav1.Status that upstream copies into the event.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ResponseStatus {
    /// Always `{}` (ListMeta without omitempty).
    metadata: Empty,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "is_zero")]
    pub code: u16,
}

impl ResponseStatus {
    /// Just the code (a response that is not a Status).
    pub fn code(code: u16) -> ResponseStatus {
        ResponseStatus { code, ..ResponseStatus::default() }
    }

    /// From a metav1.Status as JSON.
    pub fn from_status(status: &serde_json::Value) -> ResponseStatus {
        let text =
            |key: &str| status.get(key).and_then(serde_json::Value::as_str).unwrap_or_default().to_owned();
        ResponseStatus {
            metadata: Empty,
            status: text("status"),
            message: text("message"),
            reason: text("reason"),
            details: status.get("details").filter(|d| !d.is_null()).cloned(),
            code: status
                .get("code")
                .and_then(serde_json::Value::as_u64)
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(0),
        }
    }
}

fn is_zero(code: &u16) -> bool {
    *code == 0
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Empty;

impl Serialize for Empty {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        serializer.serialize_map(Some(0))?.end()
    }
}

/// A JSON body logged as it is (shared between the stages of one request).
pub type Body = Arc<RawValue>;

/// One audit event.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    kind: &'static str,
    api_version: &'static str,
    #[serde(serialize_with = "display")]
    pub level: Level,
    #[serde(rename = "auditID", serialize_with = "display")]
    pub audit_id: Arc<str>,
    #[serde(serialize_with = "display")]
    pub stage: Stage,
    #[serde(rename = "requestURI")]
    pub request_uri: String,
    pub verb: String,
    pub user: UserInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<UserInfo>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    pub source_ips: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user_agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object_ref: Option<ObjectReference>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "raw")]
    pub request_object: Option<Body>,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "raw")]
    pub response_object: Option<Body>,
    #[serde(serialize_with = "micro_time")]
    pub request_received_timestamp: jiff::Timestamp,
    #[serde(serialize_with = "micro_time")]
    pub stage_timestamp: jiff::Timestamp,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Event {
    /// An event at `level` for the request `audit_id` received at `received`.
    pub fn new(level: Level, audit_id: Arc<str>, received: jiff::Timestamp) -> Event {
        Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level,
            audit_id,
            stage: Stage::RequestReceived,
            request_uri: String::new(),
            verb: String::new(),
            user: UserInfo::default(),
            impersonated_user: None,
            source_ips: Vec::new(),
            user_agent: String::new(),
            object_ref: None,
            response_status: None,
            request_object: None,
            response_object: None,
            request_received_timestamp: received,
            stage_timestamp: received,
            annotations: BTreeMap::new(),
        }
    }

    /// The JSON line (with its newline).
    pub fn to_json_line(&self) -> Vec<u8> {
        // Every field serializes: strings, maps of strings and JSON already checked.
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }

    /// upstream's `legacy` format: one line of text with a subset of the event.
    pub fn to_legacy_line(&self) -> Vec<u8> {
        let (username, groups) = if self.user.username.is_empty() {
            ("<none>".to_owned(), "<none>".to_owned())
        } else if self.user.groups.is_empty() {
            (self.user.username.clone(), "<none>".to_owned())
        } else {
            (self.user.username.clone(), quoted_list(&self.user.groups))
        };
        let (as_user, as_groups) = match &self.impersonated_user {
            Some(user) if !user.groups.is_empty() => (user.username.clone(), quoted_list(&user.groups)),
            Some(user) => (user.username.clone(), "<lookup>".to_owned()),
            None => ("<self>".to_owned(), "<lookup>".to_owned()),
        };
        let namespace = match &self.object_ref {
            Some(object) if !object.namespace.is_empty() => object.namespace.clone(),
            _ => "<none>".to_owned(),
        };
        let response = match &self.response_status {
            Some(status) => status.code.to_string(),
            None => "<deferred>".to_owned(),
        };
        let ip = self.source_ips.first().cloned().unwrap_or_else(|| "<unknown>".to_owned());
        let line = format!(
            "{} AUDIT: id={} stage={} ip={} method={} user={} groups={} as={} asgroups={} user-agent={} namespace={} uri={} response=\"{response}\"\n",
            rfc3339_nano(self.request_received_timestamp),
            go_quote(&self.audit_id),
            go_quote(self.stage.as_str()),
            go_quote(&ip),
            go_quote(&self.verb),
            go_quote(&username),
            go_quote(&groups),
            go_quote(&as_user),
            go_quote(&as_groups),
            go_quote(&self.user_agent),
            go_quote(&namespace),
            go_quote(&self.request_uri),
        );
        line.into_bytes()
    }
}

fn display<S: serde::Serializer, T: std::fmt::Display>(value: &T, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(value)
}

fn raw<S: serde::Serializer>(value: &Option<Body>, serializer: S) -> Result<S::Ok, S::Error> {
    match value {
        Some(body) => body.as_ref().serialize(serializer),
        None => serializer.serialize_none(),
    }
}

fn micro_time<S: serde::Serializer>(time: &jiff::Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&MicroTime(*time))
}

/// metav1.MicroTime's JSON form: `2006-01-02T15:04:05.000000Z` in UTC.
#[derive(Debug, Clone, Copy)]
pub struct MicroTime(pub jiff::Timestamp);

impl std::fmt::Display for MicroTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // By hand: strftime reads its format on every call, twice per event.
        let t = jiff::tz::Offset::UTC.to_datetime(self.0);
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
            t.year(),
            t.month(),
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.subsec_nanosecond() / 1000
        )
    }
}

/// Go's time.RFC3339Nano in UTC: the fraction without trailing zeros (none when zero).
fn rfc3339_nano(time: jiff::Timestamp) -> String {
    let seconds = time.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    let nanos = time.subsec_nanosecond();
    if nanos == 0 {
        return format!("{seconds}Z");
    }
    let fraction = format!("{nanos:09}");
    format!("{seconds}.{}Z", fraction.trim_end_matches('0'))
}

/// Go's `%q`: a double-quoted string with Go's escapes.
fn go_quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// upstream's auditStringSlice: each item quoted, joined by commas.
fn quoted_list(items: &[String]) -> String {
    items.iter().map(|i| go_quote(i)).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> jiff::Timestamp {
        text.parse().unwrap()
    }

    #[test]
    fn json_lines_as_upstream_writes_them() {
        let mut event = Event::new(Level::Metadata, "id-1".into(), at("2026-12-02T11:02:28.408503123Z"));
        event.request_uri = "/api/v1/namespaces/default/configmaps".into();
        event.verb = "create".into();
        event.source_ips = vec!["127.0.0.1".into()];
        event.user_agent = "curl/7.88.1".into();
        event.object_ref = Some(ObjectReference {
            resource: "configmaps".into(),
            namespace: "default".into(),
            api_version: "v1".into(),
            ..ObjectReference::default()
        });
        assert_eq!(
            String::from_utf8(event.to_json_line()).unwrap(),
            "{\"kind\":\"Event\",\"apiVersion\":\"audit.k8s.io/v1\",\"level\":\"Metadata\",\"auditID\":\"id-1\",\
             \"stage\":\"RequestReceived\",\"requestURI\":\"/api/v1/namespaces/default/configmaps\",\"verb\":\"create\",\
             \"user\":{},\"sourceIPs\":[\"127.0.0.1\"],\"userAgent\":\"curl/7.88.1\",\
             \"objectRef\":{\"resource\":\"configmaps\",\"namespace\":\"default\",\"apiVersion\":\"v1\"},\
             \"requestReceivedTimestamp\":\"2026-12-02T11:02:28.408503Z\",\"stageTimestamp\":\"2026-12-02T11:02:28.408503Z\"}\n"
        );
        event.stage = Stage::ResponseComplete;
        event.stage_timestamp = at("2026-12-02T11:02:29Z");
        event.user = UserInfo::from(&User::named("bob", &["system:authenticated"]));
        event.response_status = Some(ResponseStatus::code(201));
        event.request_object = Some(RawValue::from_string(r#"{"kind":"ConfigMap"}"#.into()).unwrap().into());
        event.annotations.insert("authorization.k8s.io/reason".into(), String::new());
        event.annotations.insert("authorization.k8s.io/decision".into(), "allow".into());
        let line: serde_json::Value = serde_json::from_slice(&event.to_json_line()).unwrap();
        assert_eq!(line["user"], serde_json::json!({"username": "bob", "groups": ["system:authenticated"]}));
        assert_eq!(line["responseStatus"], serde_json::json!({"metadata": {}, "code": 201}));
        assert_eq!(line["requestObject"], serde_json::json!({"kind": "ConfigMap"}));
        assert_eq!(line["stageTimestamp"], "2026-12-02T11:02:29.000000Z");
        assert_eq!(
            MicroTime(at("0987-01-02T03:04:05.000006999Z")).to_string(),
            "0987-01-02T03:04:05.000006Z"
        );
        let text = String::from_utf8(event.to_json_line()).unwrap();
        assert!(text.ends_with(
            "\"annotations\":{\"authorization.k8s.io/decision\":\"allow\",\"authorization.k8s.io/reason\":\"\"}}\n"
        ));
    }

    #[test]
    fn status_fields_copied() {
        let status = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "secrets \"s1\" not found", "reason": "NotFound",
            "details": {"name": "s1", "kind": "secrets"}, "code": 404
        });
        let copied = serde_json::to_value(ResponseStatus::from_status(&status)).unwrap();
        let mut expected = status.clone();
        expected.as_object_mut().unwrap().retain(|k, _| k != "kind" && k != "apiVersion");
        assert_eq!(copied, expected);
        let success = serde_json::json!({"status": "Success", "details": {"name": "a"}});
        assert_eq!(
            serde_json::to_value(ResponseStatus::from_status(&success)).unwrap(),
            serde_json::json!({"metadata": {}, "status": "Success", "details": {"name": "a"}})
        );
    }

    #[test]
    fn legacy_lines() {
        let mut event = Event::new(Level::Metadata, "id-1".into(), at("2026-12-02T11:02:28.4085Z"));
        event.verb = "get".into();
        event.request_uri = "/api/v1/pods".into();
        assert_eq!(
            String::from_utf8(event.to_legacy_line()).unwrap(),
            "2026-12-02T11:02:28.4085Z AUDIT: id=\"id-1\" stage=\"RequestReceived\" ip=\"<unknown>\" method=\"get\" \
             user=\"<none>\" groups=\"<none>\" as=\"<self>\" asgroups=\"<lookup>\" user-agent=\"\" namespace=\"<none>\" \
             uri=\"/api/v1/pods\" response=\"<deferred>\"\n"
        );
        event.user = UserInfo::from(&User::named("admin", &["system:masters", "system:authenticated"]));
        event.impersonated_user = Some(UserInfo::from(&User::named("alice", &[])));
        event.response_status = Some(ResponseStatus::code(403));
        event.user_agent = "say \"hi\"\n".into();
        event.request_received_timestamp = at("2026-12-02T11:02:28Z");
        let line = String::from_utf8(event.to_legacy_line()).unwrap();
        assert!(line.starts_with("2026-12-02T11:02:28Z AUDIT:"), "{line}");
        assert!(
            line.contains(
                r#"groups="\"system:masters\",\"system:authenticated\"" as="alice" asgroups="<lookup>""#
            ),
            "{line}"
        );
        assert!(line.contains(r#"user-agent="say \"hi\"\n""#), "{line}");
        assert!(line.ends_with("response=\"403\"\n"), "{line}");
    }
}
