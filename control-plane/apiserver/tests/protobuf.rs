//! Kubernetes protobuf against keel-apiserver, on the embedded store and on etcd: raw requests
//! whose bodies are made and read with k8s-pb's prost types (the peer), kubectl 1.32 and 1.33
//! (which send protobuf bodies on create), metadata-only lists and watches, and broken bodies.

use crate::common;

use std::io::{Read, Write};
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use keel_store::Store;
use keel_store::etcd::{EtcdOptions, EtcdStore};
use keel_testbed::etcd::EtcdCluster;
use keel_testbed::kubectl;
use prost::Message;
use serde_json::{Value, json};

use common::Server;

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// A server on the embedded store, or on a one-member etcd (kept alive with it).
async fn start(etcd: bool) -> Result<(Server, Option<EtcdCluster>)> {
    if !etcd {
        return Ok((Server::start().await?, None));
    }
    let cluster = EtcdCluster::start(1)?;
    let store: Arc<dyn Store> =
        Arc::new(EtcdStore::connect(EtcdOptions::new(cluster.client_urls()).prefix("/keel")).await?);
    Ok((Server::start_on(store, tempfile::tempdir()?).await?, Some(cluster)))
}

/// One HTTP/1.1 request as the admin; returns status, content type and the body's bytes
/// (de-chunked). A watch must carry `timeoutSeconds`: the body is read to its end.
async fn request(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(u16, String, Vec<u8>)> {
    let (address, ca, cert, key) = (
        server.address,
        server.pki.ca_pem.clone(),
        server.pki.admin_cert_pem.clone(),
        server.pki.admin_key_pem.clone(),
    );
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let body = body.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut tls = common::tls_stream(address, &ca, Some((&cert, &key)))?;
        tls.write_all(head.as_bytes())?;
        tls.write_all(&body)?;
        let mut response = Vec::new();
        match tls.read_to_end(&mut response) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {}
            Err(e) => return Err(e.into()),
        }
        let end = response.windows(4).position(|w| w == b"\r\n\r\n").context("no header end")?;
        let head = String::from_utf8_lossy(&response[..end]).into_owned();
        let mut body = response[end + 4..].to_vec();
        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).context("no status")?;
        let header = |name: &str| {
            head.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
        };
        if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            body = dechunk(&body)?;
        }
        Ok((status, header("content-type").unwrap_or_default(), body))
    })
    .await?
}

fn dechunk(mut body: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = body.windows(2).position(|w| w == b"\r\n").context("chunk size line")?;
        let size = usize::from_str_radix(std::str::from_utf8(&body[..line_end])?.trim(), 16)?;
        body = &body[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// An object in the envelope, as client-go sends it.
fn envelope(api_version: &str, kind: &str, message: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta { api_version: Some(api_version.into()), kind: Some(kind.into()) }),
        raw: Some(message.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// The kind and message of a response in the envelope.
fn open(bytes: &[u8]) -> Result<(String, Vec<u8>)> {
    ensure!(bytes.starts_with(b"k8s\0"), "no envelope: {:?}", String::from_utf8_lossy(bytes));
    let unknown = Unknown::decode(&bytes[4..])?;
    let kind = unknown.type_meta.and_then(|t| t.kind).unwrap_or_default();
    Ok((kind, unknown.raw.unwrap_or_default()))
}

/// The (type, kind, message) of each frame of a protobuf watch body.
fn frames(mut body: &[u8]) -> Result<Vec<(String, String, Vec<u8>)>> {
    let mut events = Vec::new();
    while !body.is_empty() {
        let len = u32::from_be_bytes(body[..4].try_into()?) as usize;
        let event = meta::WatchEvent::decode(&body[4..4 + len])?;
        let (kind, raw) = open(&event.object.and_then(|o| o.raw).unwrap_or_default())?;
        events.push((event.r#type.unwrap_or_default(), kind, raw));
        body = &body[4 + len..];
    }
    Ok(events)
}

fn pod(name: &str) -> core::Pod {
    core::Pod {
        metadata: Some(meta::ObjectMeta {
            name: Some(name.into()),
            labels: [("app".to_owned(), "web".to_owned())].into(),
            // What Go writes for its non-pointer fields.
            namespace: Some(String::new()),
            generate_name: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(meta::Time::default()),
            ..Default::default()
        }),
        spec: Some(core::PodSpec {
            containers: vec![core::Container {
                name: Some("app".into()),
                image: Some("busybox".into()),
                image_pull_policy: Some(String::new()),
                ports: vec![core::ContainerPort { container_port: Some(8080), ..Default::default() }],
                ..Default::default()
            }],
            enable_service_links: Some(false),
            ..Default::default()
        }),
        status: Some(core::PodStatus::default()),
    }
}

async fn crud(etcd: bool) -> Result<()> {
    let (server, _etcd) = start(etcd).await?;
    let pods = "/api/v1/namespaces/default/pods";
    let both = [("Content-Type", PROTOBUF), ("Accept", PROTOBUF)];
    // Create: a protobuf body in, the created Pod out in protobuf.
    let (status, content_type, body) =
        request(&server, "POST", pods, &both, &envelope("v1", "Pod", &pod("web"))).await?;
    ensure!(status == 201, "{status} {}", String::from_utf8_lossy(&body));
    ensure!(content_type == PROTOBUF, "{content_type}");
    let (kind, raw) = open(&body)?;
    ensure!(kind == "Pod");
    let created = core::Pod::decode(raw.as_slice())?;
    let metadata = created.metadata.clone().context("metadata")?;
    ensure!(metadata.namespace.as_deref() == Some("default") && metadata.uid.is_some_and(|u| !u.is_empty()));
    ensure!(metadata.creation_timestamp.and_then(|t| t.seconds).is_some_and(|s| s > 0));
    let spec = created.spec.clone().context("spec")?;
    ensure!(spec.enable_service_links == Some(false), "a false that was sent stays false");
    ensure!(
        spec.containers[0].image_pull_policy.as_deref() == Some("Always"),
        "an empty string is defaulted"
    );
    ensure!(spec.restart_policy.as_deref() == Some("Always"));
    // The JSON form of the same object agrees.
    let (status, _, json) = request(&server, "GET", &format!("{pods}/web"), &[], b"").await?;
    ensure!(status == 200);
    let json: Value = serde_json::from_slice(&json)?;
    ensure!(json["spec"]["containers"][0]["ports"][0]["containerPort"] == 8080, "{json}");
    ensure!(json["metadata"].get("generateName").is_none(), "Go's empty strings are not kept: {json}");
    // Get and list in protobuf.
    let (status, _, body) =
        request(&server, "GET", &format!("{pods}/web"), &[("Accept", PROTOBUF)], b"").await?;
    ensure!(status == 200);
    let got = core::Pod::decode(open(&body)?.1.as_slice())?;
    ensure!(got.metadata.and_then(|m| m.resource_version) == metadata.resource_version);
    let (status, _, body) = request(&server, "GET", pods, &[("Accept", PROTOBUF)], b"").await?;
    ensure!(status == 200);
    let (kind, raw) = open(&body)?;
    ensure!(kind == "PodList");
    let list = core::PodList::decode(raw.as_slice())?;
    ensure!(list.items.len() == 1);
    let list_version = list.metadata.and_then(|m| m.resource_version).context("list resourceVersion")?;
    // A change after the list, then a watch from it: the events in frames.
    let (status, _, _) = request(&server, "POST", pods, &both, &envelope("v1", "Pod", &pod("db"))).await?;
    ensure!(status == 201);
    let delete = meta::DeleteOptions { grace_period_seconds: Some(0), ..Default::default() };
    let (status, _, body) =
        request(&server, "DELETE", &format!("{pods}/db"), &both, &envelope("v1", "DeleteOptions", &delete))
            .await?;
    ensure!(status == 200, "{status} {}", String::from_utf8_lossy(&body));
    ensure!(open(&body)?.0 == "Pod");
    let watch = format!("{pods}?watch=true&resourceVersion={list_version}&timeoutSeconds=1");
    let (status, content_type, body) = request(&server, "GET", &watch, &[("Accept", PROTOBUF)], b"").await?;
    ensure!(status == 200 && content_type == format!("{PROTOBUF};stream=watch"), "{status} {content_type}");
    let events = frames(&body)?;
    let seen: Vec<(&str, String)> = events
        .iter()
        .map(|(kind, _, raw)| {
            let pod = core::Pod::decode(raw.as_slice()).unwrap_or_default();
            (kind.as_str(), pod.metadata.and_then(|m| m.name).unwrap_or_default())
        })
        .collect();
    // A pod deleted with grace 0 is first written with its deletionTimestamp, as upstream's pod
    // strategy does (pod_deletion_oracle compares it with kube-apiserver).
    let expected = [("ADDED", "db".to_owned()), ("MODIFIED", "db".to_owned()), ("DELETED", "db".to_owned())];
    ensure!(seen == expected, "{seen:?}");
    // An update and a binding in protobuf (what kube-scheduler sends through client-go).
    let mut changed = core::Pod::decode(
        open(&request(&server, "GET", &format!("{pods}/web"), &[("Accept", PROTOBUF)], b"").await?.2)?
            .1
            .as_slice(),
    )?;
    changed.metadata.as_mut().context("metadata")?.labels.insert("tier".into(), "front".into());
    let (status, _, body) =
        request(&server, "PUT", &format!("{pods}/web"), &both, &envelope("v1", "Pod", &changed)).await?;
    ensure!(status == 200, "{status} {}", String::from_utf8_lossy(&body));
    let updated = core::Pod::decode(open(&body)?.1.as_slice())?;
    ensure!(updated.metadata.as_ref().context("metadata")?.labels["tier"] == "front");
    let binding = core::Binding {
        metadata: Some(meta::ObjectMeta { name: Some("web".into()), ..Default::default() }),
        target: Some(core::ObjectReference {
            kind: Some("Node".into()),
            name: Some("node-1".into()),
            ..Default::default()
        }),
    };
    let (status, _, body) =
        request(&server, "POST", &format!("{pods}/web/binding"), &both, &envelope("v1", "Binding", &binding))
            .await?;
    ensure!(status == 201, "{status} {}", String::from_utf8_lossy(&body));
    let (_, _, body) = request(&server, "GET", &format!("{pods}/web"), &[("Accept", PROTOBUF)], b"").await?;
    let bound = core::Pod::decode(open(&body)?.1.as_slice())?;
    ensure!(bound.spec.and_then(|s| s.node_name).as_deref() == Some("node-1"));
    // An events.k8s.io Event as client-go's recorders send it: a MicroTime, Go's empty times.
    let event = k8s_pb::api::events::v1::Event {
        metadata: Some(meta::ObjectMeta { name: Some("web.1".into()), ..Default::default() }),
        event_time: Some(meta::MicroTime { seconds: Some(1_796_032_800), nanos: Some(123_456_000) }),
        reporting_controller: Some("keel.dev/test".into()),
        reporting_instance: Some("test-1".into()),
        action: Some("Binding".into()),
        reason: Some("Scheduled".into()),
        r#type: Some("Normal".into()),
        note: Some("bound".into()),
        regarding: Some(core::ObjectReference {
            kind: Some("Pod".into()),
            name: Some("web".into()),
            namespace: Some("default".into()),
            ..Default::default()
        }),
        deprecated_first_timestamp: Some(meta::Time::default()),
        deprecated_last_timestamp: Some(meta::Time::default()),
        deprecated_count: Some(0),
        ..Default::default()
    };
    let events_path = "/apis/events.k8s.io/v1/namespaces/default/events";
    let (status, _, body) =
        request(&server, "POST", events_path, &both, &envelope("events.k8s.io/v1", "Event", &event)).await?;
    ensure!(status == 201, "{status} {}", String::from_utf8_lossy(&body));
    let stored = k8s_pb::api::events::v1::Event::decode(open(&body)?.1.as_slice())?;
    ensure!(stored.event_time == event.event_time, "{:?}", stored.event_time);
    ensure!(
        stored.regarding.and_then(|r| r.name).as_deref() == Some("web")
            && stored.note.as_deref() == Some("bound")
    );
    let (_, _, json_event) = request(&server, "GET", &format!("{events_path}/web.1"), &[], b"").await?;
    let json_event: Value = serde_json::from_slice(&json_event)?;
    ensure!(json_event["eventTime"] == "2026-11-30T10:00:00.123456Z", "{json_event}");
    // A watch-list (client-go's streaming list): the objects, then the bookmark ending them.
    let watch_list = format!(
        "{pods}?watch=true&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&resourceVersion=&timeoutSeconds=1"
    );
    let (status, _, body) = request(&server, "GET", &watch_list, &[("Accept", PROTOBUF)], b"").await?;
    ensure!(status == 200);
    let events = frames(&body)?;
    ensure!(events.first().is_some_and(|e| e.0 == "ADDED"), "{events:?}");
    let bookmark = events.iter().find(|e| e.0 == "BOOKMARK").context("no bookmark")?;
    let bookmark = core::Pod::decode(bookmark.2.as_slice())?.metadata.context("bookmark metadata")?;
    ensure!(
        bookmark.annotations.get("k8s.io/initial-events-end").map(String::as_str) == Some("true"),
        "{bookmark:?}"
    );
    // Metadata only, in protobuf: a list and a watch (what metadata informers ask for).
    let as_list = format!("{PROTOBUF};as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json");
    let (status, _, body) = request(&server, "GET", pods, &[("Accept", &as_list)], b"").await?;
    ensure!(status == 200);
    let (kind, raw) = open(&body)?;
    ensure!(kind == "PartialObjectMetadataList");
    let list = meta::PartialObjectMetadataList::decode(raw.as_slice())?;
    let names: Vec<_> = list.items.iter().filter_map(|i| i.metadata.as_ref()?.name.clone()).collect();
    ensure!(names == ["web"] && list.items[0].metadata.as_ref().unwrap().labels["app"] == "web");
    let as_one = format!("{PROTOBUF};as=PartialObjectMetadata;g=meta.k8s.io;v=v1");
    let watch = format!("{pods}?watch=true&resourceVersion=0&timeoutSeconds=1");
    let (status, _, body) = request(&server, "GET", &watch, &[("Accept", &as_one)], b"").await?;
    ensure!(status == 200);
    let events = frames(&body)?;
    ensure!(
        events.len() == 1 && events[0].0 == "ADDED" && events[0].1 == "PartialObjectMetadata",
        "{events:?}"
    );
    let item = meta::PartialObjectMetadata::decode(events[0].2.as_slice())?;
    ensure!(item.metadata.and_then(|m| m.name).as_deref() == Some("web"));
    let (status, _, body) =
        request(&server, "GET", &format!("{pods}/web"), &[("Accept", &as_one)], b"").await?;
    ensure!(status == 200 && open(&body)?.0 == "PartialObjectMetadata");
    // No Table in protobuf: the next entry, or 406.
    let table = format!("{PROTOBUF};as=Table;v=v1;g=meta.k8s.io");
    let (status, _, _) = request(&server, "GET", pods, &[("Accept", &table)], b"").await?;
    ensure!(status == 406, "{status}");
    let (status, content_type, body) = request(
        &server,
        "GET",
        pods,
        &[("Accept", &format!("{table},application/json;as=Table;v=v1;g=meta.k8s.io"))],
        b"",
    )
    .await?;
    let table: Value = serde_json::from_slice(&body)?;
    ensure!(
        status == 200 && content_type.starts_with("application/json") && table["kind"] == "Table",
        "{table}"
    );
    // Errors come as a Status in protobuf.
    let (status, _, body) =
        request(&server, "GET", &format!("{pods}/missing"), &[("Accept", PROTOBUF)], b"").await?;
    ensure!(status == 404);
    let (kind, raw) = open(&body)?;
    let error = meta::Status::decode(raw.as_slice())?;
    ensure!(
        kind == "Status" && error.reason.as_deref() == Some("NotFound") && error.code == Some(404),
        "{error:?}"
    );
    // Discovery has no protobuf here: the next entry.
    let (status, content_type, _) =
        request(&server, "GET", "/api/v1", &[("Accept", &format!("{PROTOBUF}, application/json"))], b"")
            .await?;
    ensure!(status == 200 && content_type == "application/json");
    Ok(())
}

#[tokio::test]
async fn raw_protobuf_crud_watch_and_metadata() -> Result<()> {
    crud(false).await
}

#[tokio::test]
async fn raw_protobuf_crud_watch_and_metadata_on_etcd() -> Result<()> {
    crud(true).await
}

async fn broken_bodies(etcd: bool) -> Result<()> {
    let (server, _etcd) = start(etcd).await?;
    let pods = "/api/v1/namespaces/default/pods";
    let valid = envelope("v1", "Pod", &pod("web"));
    let garbage_raw = {
        let mut body = b"k8s\0".to_vec();
        body.extend(
            Unknown {
                type_meta: Some(TypeMeta { api_version: Some("v1".into()), kind: Some("Pod".into()) }),
                raw: Some(vec![0x0a, 0xff, 0xff, 0xff, 0x0f]),
                ..Default::default()
            }
            .encode_to_vec(),
        );
        body
    };
    let no_kind = envelope("v1", "", &pod("web"));
    let config_map = envelope(
        "v1",
        "ConfigMap",
        &core::ConfigMap {
            metadata: Some(meta::ObjectMeta { name: Some("c".into()), ..Default::default() }),
            ..Default::default()
        },
    );
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "no magic",
            br#"{"kind":"Pod"}"#.to_vec(),
            "the object provided is unrecognized (must be of type Pod): provided data does not appear to be a protobuf message, expected prefix [107 56 115 0] (7b226b696e64223a22506f64227d)",
        ),
        (
            "truncated",
            valid[..valid.len() / 2].to_vec(),
            "the object provided is unrecognized (must be of type Pod): unexpected EOF (6b3873000a",
        ),
        ("garbage", garbage_raw, "Pod in version \"v1\" cannot be handled as a Pod: unexpected EOF"),
        (
            "no kind",
            no_kind,
            "the object provided is unrecognized (must be of type Pod): Object 'Kind' is missing in 'runtime.TypeMeta{APIVersion:\"v1\", Kind:\"\"}'",
        ),
        (
            "unknown kind",
            envelope("v1", "Gadget", &pod("web")),
            "Gadget in version \"v1\" cannot be handled as a Pod: no kind \"Gadget\" is registered for version \"v1\"",
        ),
        ("other kind", config_map, "the kind in the data (ConfigMap) does not match the expected kind (Pod)"),
        (
            "other group",
            envelope("apps/v1", "Deployment", &k8s_pb::api::apps::v1::Deployment::default()),
            "the API version in the data (apps/v1) does not match the expected API version (v1)",
        ),
        (
            "empty",
            Vec::new(),
            "the object provided is unrecognized (must be of type Pod): provided data does not appear to be a protobuf message, expected prefix [107 56 115 0] (<empty>)",
        ),
    ];
    for (case, body, message) in cases {
        let (status, _, answer) =
            request(&server, "POST", pods, &[("Content-Type", PROTOBUF)], &body).await?;
        let answer: Value = serde_json::from_slice(&answer).with_context(|| case.to_owned())?;
        ensure!(status == 400 && answer["reason"] == "BadRequest", "{case}: {status} {answer}");
        let text = answer["message"].as_str().unwrap_or_default();
        ensure!(text.starts_with(message), "{case}: {text}");
    }
    // Asked for protobuf, the refusal is a Status in protobuf.
    let (status, _, answer) =
        request(&server, "POST", pods, &[("Content-Type", PROTOBUF), ("Accept", PROTOBUF)], b"k8s\0\xff")
            .await?;
    let refusal = meta::Status::decode(open(&answer)?.1.as_slice())?;
    ensure!(status == 400 && refusal.reason.as_deref() == Some("BadRequest"), "{refusal:?}");
    // Nothing was stored.
    let (_, _, list) = request(&server, "GET", pods, &[], b"").await?;
    let list: Value = serde_json::from_slice(&list)?;
    ensure!(list["items"] == json!([]), "{list}");
    Ok(())
}

#[tokio::test]
async fn broken_protobuf_bodies_are_bad_requests() -> Result<()> {
    broken_bodies(false).await
}

#[tokio::test]
async fn broken_protobuf_bodies_are_bad_requests_on_etcd() -> Result<()> {
    broken_bodies(true).await
}

/// `kubectl create` generators (typed clients: protobuf bodies from kubectl 1.32 on; `create -f`
/// sends JSON, as it goes through unstructured objects).
fn creations(name: &str) -> Vec<Vec<String>> {
    let lines = [
        "create configmap NAME-cfg --from-literal=a=1 --from-literal=b=two",
        "create secret generic NAME-secret --from-literal=password=secret",
        "create deployment NAME-deploy --image=busybox --replicas=0 --port=8080",
        "create service clusterip NAME-svc --tcp=80:8080",
        "create serviceaccount NAME-sa",
        "create job NAME-job --image=busybox -- sh -c true",
        "create priorityclass NAME-pc --value=1000 --description=test",
    ];
    lines.iter().map(|l| l.replace("NAME", name).split(' ').map(str::to_owned).collect()).collect()
}

/// The object without what the server fills per object (names, uids, times, versions, addresses).
fn comparable(mut object: Value, name: &str) -> Value {
    let text = serde_json::to_string(&object).unwrap_or_default().replace(name, "NAME");
    object = serde_json::from_str(&text).unwrap_or(Value::Null);
    // A Job's selector and labels carry its uid.
    let uid = object.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_owned);
    if let Some(uid) = uid {
        let text = serde_json::to_string(&object).unwrap_or_default().replace(&uid, "UID");
        object = serde_json::from_str(&text).unwrap_or(Value::Null);
    }
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["uid", "resourceVersion", "creationTimestamp", "managedFields"] {
            metadata.remove(key);
        }
    }
    if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
        for key in ["clusterIP", "clusterIPs"] {
            spec.remove(key);
        }
    }
    object
}

/// Removes from `object` the zero numbers and false booleans that `other` does not have.
fn drop_zeros_absent_in(object: &mut Value, other: &Value) {
    match (object, other) {
        (Value::Object(map), Value::Object(other)) => {
            map.retain(|key, value| {
                other.contains_key(key) || !(value == &json!(0) || value == &json!(false))
            });
            for (key, value) in map.iter_mut() {
                if let Some(theirs) = other.get(key) {
                    drop_zeros_absent_in(value, theirs);
                }
            }
        }
        (Value::Array(items), Value::Array(other)) => {
            for (item, theirs) in items.iter_mut().zip(other) {
                drop_zeros_absent_in(item, theirs);
            }
        }
        _ => {}
    }
}

/// kubectl 1.`minor` creates objects (in protobuf); read back as JSON they equal those kubectl
/// 1.31 created with the same commands (in JSON).
async fn kubectl_creates_in_protobuf(minor: u32, etcd: bool) -> Result<()> {
    let (server, _etcd) = start(etcd).await?;
    let kubeconfig = server.dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.pki.admin_kubeconfig(&format!("https://{}", server.address)))?;
    let run = |kubectl: &kubectl::Kubectl, args: &[&str], input: Option<String>| {
        let mut command = kubectl.command();
        command.arg("--kubeconfig").arg(&kubeconfig).args(args);
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = command.spawn()?;
        if let Some(input) = input {
            child.stdin.take().context("stdin")?.write_all(input.as_bytes())?;
        }
        let output = child.wait_with_output()?;
        let (out, err) = (
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        );
        let tail = &err[err.len().saturating_sub(3000)..];
        ensure!(output.status.success(), "kubectl 1.{} {args:?}: {tail}", kubectl.minor);
        Ok::<_, anyhow::Error>((out, err))
    };
    let new = kubectl::minor(minor)?;
    let old = kubectl::minor(31)?;
    for (protobuf, json) in creations("viaproto").into_iter().zip(creations("viajson")) {
        // Before the command's own `--`.
        let args: Vec<&str> = std::iter::once("-v=8").chain(protobuf.iter().map(String::as_str)).collect();
        let (_, log) = tokio::task::block_in_place(|| run(&new, &args, None))?;
        ensure!(
            log.contains("Content-Type: application/vnd.kubernetes.protobuf"),
            "kubectl 1.{minor} {protobuf:?} sent no protobuf body:\n{}",
            &log[log.len().saturating_sub(3000)..]
        );
        let args: Vec<&str> = json.iter().map(String::as_str).collect();
        tokio::task::block_in_place(|| run(&old, &args, None))?;
    }
    // kubectl's typed reads (describe: the object, its ReplicaSets or EndpointSlices, its events)
    // ask for protobuf first and read the answers.
    for args in [
        ["-v=8", "describe", "deployment", "viaproto-deploy"],
        ["-v=8", "describe", "service", "viaproto-svc"],
    ] {
        let (out, log) = tokio::task::block_in_place(|| run(&new, &args, None))?;
        ensure!(out.contains("Name:") && out.contains("viaproto-"), "{args:?}: {out}");
        ensure!(
            log.contains("Accept: application/vnd.kubernetes.protobuf,application/json")
                && log.contains("Content-Type: application/vnd.kubernetes.protobuf"),
            "{args:?} read no protobuf:\n{}",
            &log[log.len().saturating_sub(3000)..]
        );
    }
    for (kind, suffix) in [
        ("configmap", "cfg"),
        ("secret", "secret"),
        ("deployment", "deploy"),
        ("service", "svc"),
        ("serviceaccount", "sa"),
        ("job", "job"),
        ("priorityclass", "pc"),
    ] {
        let get = |name: &str| -> Result<Value> {
            let (out, _) = tokio::task::block_in_place(|| {
                run(&new, &["get", kind, &format!("{name}-{suffix}"), "-o", "json"], None)
            })?;
            Ok(comparable(serde_json::from_str(&out)?, name))
        };
        let (mut from_protobuf, from_json) = (get("viaproto")?, get("viajson")?);
        // Known difference: Go writes its non-pointer numbers and booleans even when zero, and
        // the codec cannot tell those from pointers set to zero (`replicas: 0`), so it keeps them
        // (`hostPort: 0`, `paused: false`). Only such zeros may differ.
        drop_zeros_absent_in(&mut from_protobuf, &from_json);
        ensure!(from_protobuf == from_json, "{kind}: protobuf\n{from_protobuf:#}\n!= JSON\n{from_json:#}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_1_32_creates_in_protobuf() -> Result<()> {
    kubectl_creates_in_protobuf(32, false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_1_33_creates_in_protobuf() -> Result<()> {
    kubectl_creates_in_protobuf(33, false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_1_33_creates_in_protobuf_on_etcd() -> Result<()> {
    kubectl_creates_in_protobuf(33, true).await
}

/// kubectl 1.33's drain goes through typed clients: the node and pods read in protobuf, each
/// evicted pod polled until a NotFound Status (in protobuf) says it is gone.
#[tokio::test(flavor = "multi_thread")]
async fn kubectl_1_33_drains_in_protobuf() -> Result<()> {
    let (server, _etcd) = start(false).await?;
    let kubeconfig = server.dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.pki.admin_kubeconfig(&format!("https://{}", server.address)))?;
    let json = [("Content-Type", "application/json")];
    let node = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}))?;
    ensure!(request(&server, "POST", "/api/v1/nodes", &json, &node).await?.0 == 201);
    for name in ["a", "b"] {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                         "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}});
        let (status, _, body) =
            request(&server, "POST", "/api/v1/namespaces/default/pods", &json, &serde_json::to_vec(&pod)?)
                .await?;
        ensure!(status == 201, "{status} {}", String::from_utf8_lossy(&body));
    }
    let output = tokio::task::block_in_place(|| {
        kubectl::minor(33)?
            .command()
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["-v=8", "drain", "n1", "--force", "--grace-period=0", "--timeout=60s"])
            .output()
            .context("running kubectl drain")
    })?;
    let (out, log) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    ensure!(output.status.success(), "kubectl drain: {out} {}", &log[log.len().saturating_sub(3000)..]);
    ensure!(
        out.contains("pod/a evicted") && out.contains("pod/b evicted") && out.contains("node/n1 drained"),
        "{out}"
    );
    // After evicting, drain polls each pod until it is gone: a GET in protobuf answered by a
    // NotFound Status in protobuf, which client-go must read as such for the drain to finish.
    let poll = log.find("/api/v1/namespaces/default/pods/a\" headers").context("no poll of pod a")?;
    let answer = &log[poll..(poll + 1200).min(log.len())];
    ensure!(
        answer.contains("Accept: application/vnd.kubernetes.protobuf,application/json")
            && answer.contains("404 Not Found")
            && answer.contains("Content-Type: application/vnd.kubernetes.protobuf"),
        "{answer}"
    );
    let (_, _, pods) = request(&server, "GET", "/api/v1/namespaces/default/pods", &[], b"").await?;
    let pods: Value = serde_json::from_slice(&pods)?;
    ensure!(pods["items"] == json!([]), "{pods}");
    Ok(())
}
