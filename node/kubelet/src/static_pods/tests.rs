use super::*;

const WEB: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: c
    image: busybox:1.36
";

fn pod(text: &str) -> Result<Pod, String> {
    from_manifest(text.as_bytes(), "/etc/kubernetes/manifests/web.yaml", "worker-1", "2026-12-07T00:00:00Z")
}

#[test]
fn manifests_get_the_file_sources_defaults() {
    let web = pod(WEB).unwrap();
    assert_eq!(web.metadata.name.as_deref(), Some("web-worker-1"));
    assert_eq!(web.metadata.namespace.as_deref(), Some("default"));
    let uid = web.metadata.uid.clone().unwrap();
    assert_eq!(uid.len(), 32);
    let annotations = web.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[CONFIG_HASH], uid);
    assert_eq!(annotations[CONFIG_SOURCE], "file");
    assert_eq!(annotations[CONFIG_SEEN], "2026-12-07T00:00:00Z");
    let spec = web.spec.clone().unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("worker-1"));
    let tolerations = spec.tolerations.unwrap();
    assert_eq!(tolerations.len(), 1);
    assert_eq!(
        (tolerations[0].operator.as_deref(), tolerations[0].effect.as_deref()),
        (Some("Exists"), Some("NoExecute"))
    );
    // Defaulted as the API server defaults a pod.
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(spec.containers[0].image_pull_policy.as_deref(), Some("IfNotPresent"));
    assert_eq!(web.status.unwrap().phase.as_deref(), Some("Pending"));
    assert!(!is_mirror(&pod(WEB).unwrap()));

    // The same file on the same node keeps its UID; another file, node or content does not.
    assert_eq!(pod(WEB).unwrap().metadata.uid.unwrap(), uid);
    let elsewhere =
        from_manifest(WEB.as_bytes(), "/etc/kubernetes/manifests/other.yaml", "worker-1", "").unwrap();
    assert_ne!(elsewhere.metadata.uid.unwrap(), uid);
    let other_node =
        from_manifest(WEB.as_bytes(), "/etc/kubernetes/manifests/web.yaml", "worker-2", "").unwrap();
    assert_ne!(other_node.metadata.uid.unwrap(), uid);
    let changed = pod(&WEB.replace("1.36", "1.37")).unwrap();
    assert_ne!(changed.metadata.uid.unwrap(), uid);
    // A namespace and a toleration of its own are kept; the all-NoExecute one is not doubled.
    let own = pod(&WEB
        .replace("  name: web\n", "  name: web\n  namespace: kube-system\n")
        .replace("spec:\n", "spec:\n  tolerations: [{operator: Exists, effect: NoExecute}]\n"))
    .unwrap();
    assert_eq!(own.metadata.namespace.as_deref(), Some("kube-system"));
    assert_eq!(own.spec.unwrap().tolerations.unwrap().len(), 1);
}

#[test]
fn manifests_that_cannot_run_are_refused_in_upstreams_words() {
    assert!(pod("kind: Pod\n").unwrap_err().contains("couldn't parse as pod"));
    assert!(pod("apiVersion: v1\nmetadata: {name: x}\n").unwrap_err().contains("Object 'Kind' is missing"));
    assert!(
        pod("apiVersion: v1\nkind: Service\nmetadata: {name: x}\n")
            .unwrap_err()
            .contains("no kind \"Service\"")
    );
    assert_eq!(
        pod(&WEB.replace("  name: web\n", "  labels: {}\n")).unwrap_err(),
        "invalid pod: name is needed for the pod"
    );
    let invalid = pod(&WEB.replace("    image: busybox:1.36\n", "")).unwrap_err();
    assert!(invalid.starts_with("invalid pod: [spec.containers[0].image: Required value"), "{invalid}");
    let cases = [
        ("  serviceAccountName: builder\n", "serviceaccounts"),
        ("  volumes: [{name: s, secret: {secretName: db}}]\n", "secrets"),
        ("  imagePullSecrets: [{name: registry}]\n", "secrets"),
        ("  volumes: [{name: c, configMap: {name: settings}}]\n", "configmaps"),
        (
            "  volumes: [{name: t, projected: {sources: [{serviceAccountToken: {path: token}}]}}]\n",
            "serviceaccounts (via projected volumes)",
        ),
        ("  volumes: [{name: p, persistentVolumeClaim: {claimName: data}}]\n", "persistentvolumeclaims"),
    ];
    for (addition, resource) in cases {
        let refusal = pod(&format!("{WEB}{addition}")).unwrap_err();
        assert_eq!(refusal, format!("static pods may not reference {resource}"), "{addition}");
    }
    // Volumes of the node alone are fine.
    pod(&format!("{WEB}  volumes: [{{name: d, emptyDir: {{}}}}, {{name: h, hostPath: {{path: /etc}}}}]\n"))
        .unwrap();
}

#[test]
fn mirrors_carry_the_hash_and_belong_to_the_node() {
    let web = pod(WEB).unwrap();
    let mirrored = mirror(&web, "node-uid");
    assert!(is_mirror(&mirrored) && is_mirror_of(&mirrored, &web));
    assert_eq!(mirrored.metadata.uid, None);
    assert_eq!(mirrored.status, None);
    let owner = &mirrored.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Node", "worker-1", "node-uid")
    );
    assert_eq!(owner.controller, Some(true));
    let changed = pod(&WEB.replace("1.36", "1.37")).unwrap();
    assert!(!is_mirror_of(&mirrored, &changed));
}

#[test]
fn a_directory_gives_the_manifests_it_can_use() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("web.yaml"), WEB).unwrap();
    std::fs::write(dir.path().join(".hidden.yaml"), WEB.replace("web", "hidden")).unwrap();
    std::fs::write(dir.path().join("broken.yaml"), "kind: [").unwrap();
    std::fs::write(
        dir.path().join("db.json"),
        r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}"#,
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("nested")).unwrap();
    std::fs::write(dir.path().join("nested/inner.yaml"), WEB.replace("web", "inner")).unwrap();
    let pods = scan(dir.path(), "n1", &|_| "seen".to_owned());
    let names: Vec<_> = pods.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
    assert_eq!(names, ["db-n1", "web-n1"]);
    assert_eq!(pods[1].metadata.annotations.as_ref().unwrap()[CONFIG_SEEN], "seen");
    // One file may be the whole path; a missing path holds nothing.
    assert_eq!(scan(&dir.path().join("web.yaml"), "n1", &|_| String::new()).len(), 1);
    assert!(scan(&dir.path().join("absent"), "n1", &|_| String::new()).is_empty());
}
