use serde_json::{Value, json};

use super::*;

const NOW: &str = "2026-11-30T12:00:00Z";

fn ctx(api_version: &str, kind: &str) -> Context<'static> {
    Context::builtin(api_version, kind, "", true, NOW.into())
}

#[expect(clippy::needless_pass_by_value, reason = "the tests build manifests inline")]
fn deployment(replicas: i64, containers: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "default"},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "d"}},
                    "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": containers}}}})
}

fn entry<'a>(object: &'a Value, manager: &str) -> Option<&'a Value> {
    object["metadata"]["managedFields"].as_array()?.iter().find(|e| e["manager"] == manager)
}

fn managers(object: &Value) -> Vec<String> {
    object["metadata"]["managedFields"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .map(|e| format!("{}/{}", e["manager"].as_str().unwrap(), e["operation"].as_str().unwrap()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn apply_creates_and_records_fields_v1() {
    let ctx = ctx("apps/v1", "Deployment");
    let applied = deployment(2, json!([{"name": "a", "image": "busybox", "ports": [{"containerPort": 80}]}]));
    let object = apply(&ctx, &json!({}), &applied, "mgr", false).unwrap();
    assert_eq!(object["spec"]["replicas"], 2);
    let mgr = entry(&object, "mgr").unwrap();
    assert_eq!(mgr["operation"], "Apply");
    assert_eq!(mgr["apiVersion"], "apps/v1");
    assert_eq!(mgr["time"], NOW);
    assert_eq!(
        mgr["fieldsV1"],
        json!({"f:spec": {"f:replicas": {}, "f:selector": {},
            "f:template": {"f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"a\"}": {".": {}, "f:image": {}, "f:name": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}}}}}}}}),
        "the selector is atomic, containers keyed by name, ports by containerPort and the defaulted protocol"
    );
    assert!(object["metadata"].get("managedFields").is_some());
}

#[test]
fn lists_merge_by_key_and_sets_by_value() {
    let ctx = ctx("apps/v1", "Deployment");
    let first = deployment(1, json!([{"name": "a", "image": "one"}]));
    let live = apply(&ctx, &json!({}), &first, "first", false).unwrap();
    // Another manager adds container b and changes nothing of a.
    let second = deployment(1, json!([{"name": "b", "image": "two"}]));
    let live = apply(&ctx, &live, &second, "second", false).unwrap();
    let names: Vec<&str> = live["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"], "items merged by key, not replaced");
    // Finalizers are a set: two appliers' items both stay.
    let ctx = self::ctx("v1", "ConfigMap");
    let cm = |finalizers: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "finalizers": finalizers}});
    let live = apply(&ctx, &json!({}), &cm(json!(["x"])), "one", false).unwrap();
    let live = apply(&ctx, &live, &cm(json!(["y"])), "two", false).unwrap();
    assert_eq!(live["metadata"]["finalizers"], json!(["x", "y"]));
    assert_eq!(
        entry(&live, "two").unwrap()["fieldsV1"],
        json!({"f:metadata": {"f:finalizers": {"v:\"y\"": {}}}})
    );
    // One applier drops its item: gone; the other's stays.
    let live = apply(&ctx, &live, &cm(json!([])), "one", false).unwrap();
    assert_eq!(live["metadata"]["finalizers"], json!(["y"]));
}

#[test]
fn atomic_lists_are_replaced_and_owned_whole() {
    let ctx = ctx("apps/v1", "Deployment");
    let with_args = |args: Value| deployment(1, json!([{"name": "a", "image": "i", "args": args}]));
    let live = apply(&ctx, &json!({}), &with_args(json!(["x", "y"])), "one", false).unwrap();
    let fields = &entry(&live, "one").unwrap()["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]
        ["k:{\"name\":\"a\"}"];
    assert_eq!(fields["f:args"], json!({}));
    // A second applier setting other args conflicts on the whole list.
    let err = apply(&ctx, &live, &with_args(json!(["z"])), "two", false).unwrap_err();
    let ApplyError::Conflicts(conflicts) = err else { panic!("{err:?}") };
    assert_eq!(conflicts[0].path.to_string(), ".spec.template.spec.containers[name=\"a\"].args");
    let forced = apply(&ctx, &live, &with_args(json!(["z"])), "two", true).unwrap();
    assert_eq!(forced["spec"]["template"]["spec"]["containers"][0]["args"], json!(["z"]));
}

#[test]
fn conflicts_name_field_and_manager_and_force_takes_ownership() {
    let ctx = ctx("apps/v1", "Deployment");
    let live =
        apply(&ctx, &json!({}), &deployment(1, json!([{"name": "a", "image": "i"}])), "kubectl", false)
            .unwrap();
    // An update (kubectl scale through the main resource) takes .spec.replicas.
    let mut scaled = live.clone();
    scaled["spec"]["replicas"] = json!(5);
    update(&ctx, Some(&live), &mut scaled, "scaler");
    assert_eq!(managers(&scaled), ["kubectl/Apply", "scaler/Update"]);
    assert_eq!(entry(&scaled, "scaler").unwrap()["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    assert_eq!(
        entry(&scaled, "kubectl").unwrap()["fieldsV1"]["f:spec"].get("f:replicas"),
        None,
        "the applier lost the field it no longer decides"
    );
    // Applying the same value is no conflict: both own it.
    let same =
        apply(&ctx, &scaled, &deployment(5, json!([{"name": "a", "image": "i"}])), "kubectl", false).unwrap();
    assert!(entry(&same, "kubectl").unwrap()["fieldsV1"]["f:spec"].get("f:replicas").is_some());
    // Another value conflicts.
    let err = apply(&ctx, &scaled, &deployment(2, json!([{"name": "a", "image": "i"}])), "kubectl", false)
        .unwrap_err();
    let ApplyError::Conflicts(conflicts) = err else { panic!("{err:?}") };
    assert_eq!(
        ApplyError::conflict_message(&conflicts),
        "Apply failed with 1 conflict: conflict with \"scaler\" using apps/v1: .spec.replicas"
    );
    assert_eq!(
        ApplyError::conflict_causes(&conflicts),
        [(".spec.replicas".to_owned(), "conflict with \"scaler\" using apps/v1".to_owned())]
    );
    // Forced: the applier takes it; the updater's entry, now empty, goes.
    let forced =
        apply(&ctx, &scaled, &deployment(2, json!([{"name": "a", "image": "i"}])), "kubectl", true).unwrap();
    assert_eq!(forced["spec"]["replicas"], 2);
    assert_eq!(managers(&forced), ["kubectl/Apply"]);
}

#[test]
fn several_conflicts_are_grouped_by_manager() {
    let ctx = ctx("v1", "ConfigMap");
    let cm = |a: &str, b: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": a, "b": b}});
    let live = apply(&ctx, &json!({}), &cm("1", "1"), "one", false).unwrap();
    let ApplyError::Conflicts(conflicts) = apply(&ctx, &live, &cm("2", "2"), "two", false).unwrap_err()
    else {
        panic!()
    };
    assert_eq!(
        ApplyError::conflict_message(&conflicts),
        "Apply failed with 2 conflicts: conflicts with \"one\":\n- .data.a\n- .data.b"
    );
}

#[test]
fn fields_no_longer_applied_are_removed_unless_owned() {
    let ctx = ctx("v1", "ConfigMap");
    let cm = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data});
    let live = apply(&ctx, &json!({}), &cm(json!({"a": "1", "b": "2", "c": "3"})), "one", false).unwrap();
    // A second applier shares c.
    let live = apply(&ctx, &live, &cm(json!({"c": "3"})), "two", false).unwrap();
    let live = apply(&ctx, &live, &cm(json!({"a": "1"})), "one", false).unwrap();
    assert_eq!(live["data"], json!({"a": "1", "c": "3"}), "b removed; c kept for its other owner");
    assert_eq!(entry(&live, "one").unwrap()["fieldsV1"], json!({"f:data": {"f:a": {}}}));
    // Dropping a whole struct field removes what is under it that nobody owns.
    let ctx = self::ctx("apps/v1", "Deployment");
    let mut d = deployment(1, json!([{"name": "a", "image": "i"}]));
    d["spec"]["strategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}});
    let live = apply(&ctx, &json!({}), &d, "one", false).unwrap();
    d["spec"].as_object_mut().unwrap().remove("strategy");
    let live = apply(&ctx, &live, &d, "one", false).unwrap();
    assert!(live["spec"].get("strategy").is_none(), "{}", live["spec"]);
    // A container dropped from the manifest goes.
    let two = deployment(1, json!([{"name": "a", "image": "i"}, {"name": "b", "image": "j"}]));
    let live = apply(&ctx, &json!({}), &two, "one", false).unwrap();
    let live =
        apply(&ctx, &live, &deployment(1, json!([{"name": "b", "image": "j"}])), "one", false).unwrap();
    assert_eq!(live["spec"]["template"]["spec"]["containers"], json!([{"name": "b", "image": "j"}]));
}

#[test]
fn updates_are_tracked_per_manager() {
    let ctx = ctx("v1", "ConfigMap");
    let mut created = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "uid": "u"}, "data": {"a": "1"}});
    update(&ctx, None, &mut created, "kubectl-create");
    assert_eq!(managers(&created), ["kubectl-create/Update"]);
    let e = entry(&created, "kubectl-create").unwrap();
    assert_eq!(e["apiVersion"], "v1");
    assert_eq!(e["time"], NOW);
    assert_eq!(e["fieldsV1"], json!({"f:data": {".": {}, "f:a": {}}}));
    // An update by another manager takes what it changes.
    let mut edited = created.clone();
    edited["data"]["a"] = json!("2");
    edited["data"]["b"] = json!("3");
    update(&ctx, Some(&created), &mut edited, "kubectl-edit");
    assert_eq!(
        entry(&edited, "kubectl-edit").unwrap()["fieldsV1"],
        json!({"f:data": {"f:a": {}, "f:b": {}}})
    );
    assert_eq!(
        entry(&edited, "kubectl-create").unwrap()["fieldsV1"],
        json!({"f:data": {}}),
        "the creator keeps the map it made, not the key the editor changed"
    );
    // A no-op update leaves the entries as they were.
    let mut same = edited.clone();
    update(&ctx, Some(&edited), &mut same, "third");
    assert_eq!(same["metadata"]["managedFields"], edited["metadata"]["managedFields"]);
    // An empty list resets; entries a client sends that do not decode are replaced by the live ones.
    let mut reset = edited.clone();
    reset["metadata"]["managedFields"] = json!([]);
    update(&ctx, Some(&edited), &mut reset, "x");
    assert!(reset["metadata"].get("managedFields").is_none());
    let mut invalid = edited.clone();
    invalid["metadata"]["managedFields"] = json!([{"manager": "m", "operation": "Bogus"}]);
    update(&ctx, Some(&edited), &mut invalid, "x");
    assert_eq!(invalid["metadata"]["managedFields"], edited["metadata"]["managedFields"]);
    // An object never tracked is not tracked by an update.
    let mut untracked = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "uid": "u"}, "data": {"a": "1"}});
    let before = untracked.clone();
    untracked["data"]["a"] = json!("9");
    update(&ctx, Some(&before), &mut untracked, "x");
    assert!(untracked["metadata"].get("managedFields").is_none());
}

#[test]
fn first_apply_gives_existing_fields_an_owner() {
    let ctx = ctx("v1", "ConfigMap");
    let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "uid": "u"}, "data": {"a": "1", "b": "2"}});
    let applied =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
    let object = apply(&ctx, &live, &applied, "mgr", false).unwrap();
    assert_eq!(managers(&object), ["mgr/Apply", "before-first-apply/Update"]);
    assert_eq!(
        entry(&object, "before-first-apply").unwrap()["fieldsV1"],
        json!({"f:data": {".": {}, "f:a": {}, "f:b": {}}})
    );
    let err = apply(
        &ctx,
        &live,
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "2"}}),
        "mgr",
        false,
    )
    .unwrap_err();
    let ApplyError::Conflicts(conflicts) = err else { panic!() };
    assert_eq!(conflicts[0].manager.describe(), "\"before-first-apply\" using v1");
}

#[test]
fn update_managers_are_capped() {
    let ctx = ctx("v1", "ConfigMap");
    let mut object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}});
    update(&ctx, None, &mut object, "creator");
    for i in 0..12 {
        let before = object.clone();
        object["data"][format!("k{i}")] = json!("v");
        let ctx = Context::builtin("v1", "ConfigMap", "", true, format!("2026-11-30T12:00:{:02}Z", i + 1));
        update(&ctx, Some(&before), &mut object, &format!("m{i:02}"));
    }
    let names = managers(&object);
    assert_eq!(names.len(), 10, "{names:?}");
    assert_eq!(names[0], "ancient-changes/Update", "the oldest folded, ordered by time: {names:?}");
    let ancient = entry(&object, "ancient-changes").unwrap();
    assert!(ancient["fieldsV1"]["f:data"].get("f:k0").is_some());
}

#[test]
fn bad_applies() {
    let ctx = ctx("apps/v1", "Deployment");
    let mut wrong = deployment(1, json!([{"name": "a", "image": "i"}]));
    wrong["apiVersion"] = json!("apps/v2");
    assert_eq!(
        apply(&ctx, &json!({}), &wrong, "m", false).unwrap_err(),
        ApplyError::BadRequest("invalid object type: apps/v2, Kind=Deployment".into())
    );
    let mut managed = deployment(1, json!([]));
    managed["metadata"]["managedFields"] = json!([]);
    assert_eq!(
        apply(&ctx, &json!({}), &managed, "m", false).unwrap_err(),
        ApplyError::BadRequest("metadata.managedFields must be nil".into())
    );
    let keyless = deployment(1, json!([{"image": "i"}]));
    let ApplyError::Internal(message) = apply(&ctx, &json!({}), &keyless, "m", false).unwrap_err() else {
        panic!()
    };
    assert!(message.contains(".spec.template.spec.containers: element 0: associative list with keys has an element that omits key field \"name\""), "{message}");
    let twice = deployment(1, json!([{"name": "a"}, {"name": "a"}]));
    let ApplyError::Internal(message) = apply(&ctx, &json!({}), &twice, "m", false).unwrap_err() else {
        panic!()
    };
    assert!(message.contains("duplicate entries for key [name=\"a\"]"), "{message}");
}

#[test]
fn custom_objects_are_deduced() {
    let ctx = Context::builtin("example.com/v1", "Widget", "", false, NOW.into());
    let widget = |items: Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1, "items": items, "nested": {"a": 1}}});
    let live = apply(&ctx, &json!({}), &widget(json!([1, 2])), "m", false).unwrap();
    assert_eq!(
        entry(&live, "m").unwrap()["fieldsV1"],
        json!({"f:spec": {".": {}, "f:items": {}, "f:nested": {".": {}, "f:a": {}}, "f:size": {}}}),
        "deduced maps are granular (each key a member), lists atomic"
    );
}

#[test]
fn custom_objects_follow_their_crd_schema() {
    let structural = crate::crd::schema::Schema::parse(
        &json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name", "protocol"],
                      "items": {"type": "object", "required": ["name"], "properties": {
                          "name": {"type": "string"}, "protocol": {"type": "string", "default": "TCP"},
                          "port": {"type": "integer"}}}},
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "plain": {"type": "array", "items": {"type": "string"}},
            "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}}}}}}),
        "openAPIV3Schema",
    )
    .unwrap();
    let root = schema::TypeDef::from_structural(&structural);
    let ctx = Context::custom(&root, "example.com/v1", "Widget", "", false, NOW.into());
    let widget = |spec: Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "labels": {"a": "b"}}, "spec": spec});
    let live = apply(
        &ctx,
        &json!({}),
        &widget(json!({"ports": [{"name": "a", "port": 1}], "tags": ["x"], "plain": ["p"], "selector": {"k": "v"}})),
        "one",
        false,
    )
    .unwrap();
    assert_eq!(
        entry(&live, "one").unwrap()["fieldsV1"],
        json!({"f:metadata": {"f:labels": {"f:a": {}}},
               "f:spec": {"f:plain": {}, "f:ports": {"k:{\"name\":\"a\",\"protocol\":\"TCP\"}": {".": {}, "f:name": {}, "f:port": {}}},
                          "f:selector": {}, "f:tags": {"v:\"x\"": {}}}})
    );
    // Another manager adds its own entry of the keyed list and of the set: no conflict, both kept.
    let merged = apply(
        &ctx,
        &live,
        &widget(json!({"ports": [{"name": "b", "port": 2}], "tags": ["y"]})),
        "two",
        false,
    )
    .unwrap();
    assert_eq!(merged["spec"]["ports"], json!([{"name": "a", "port": 1}, {"name": "b", "port": 2}]));
    assert_eq!(merged["spec"]["tags"], json!(["x", "y"]));
    // The atomic list still conflicts as a whole.
    let ApplyError::Conflicts(conflicts) =
        apply(&ctx, &merged, &widget(json!({"plain": ["q"]})), "two", false).unwrap_err()
    else {
        panic!()
    };
    assert_eq!(conflicts.len(), 1);
    assert_eq!(conflicts[0].path.to_string(), ".spec.plain");
}

#[test]
fn kubectl_keeps_the_client_side_annotation_up_to_date() {
    let ctx = ctx("v1", "ConfigMap");
    let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "uid": "u", "annotations": {LAST_APPLIED: "{\"old\":true}"}}, "data": {"a": "1"}});
    let applied =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "2"}});
    let object = apply(&ctx, &live, &applied, "kubectl", true).unwrap();
    let last: Value =
        serde_json::from_str(object["metadata"]["annotations"][LAST_APPLIED].as_str().unwrap()).unwrap();
    assert_eq!(last, applied);
    let other = apply(&ctx, &live, &applied, "other", true).unwrap();
    assert_eq!(
        other["metadata"]["annotations"][LAST_APPLIED], "{\"old\":true}",
        "only kubectl's applies update it"
    );
}
