use super::*;
use serde_json::json;

fn pod(uid: &str, spec: &serde_json::Value) -> Pod {
    serde_json::from_value(
        json!({"metadata": {"name": "p", "namespace": "default", "uid": uid}, "spec": spec}),
    )
    .unwrap()
}

fn container(name: &str, requests: &serde_json::Value, limits: &serde_json::Value) -> serde_json::Value {
    json!({"name": name, "image": "i", "resources": {"requests": requests, "limits": limits}})
}

const MI: i64 = 1 << 20;

#[test]
fn shares_and_quotas_as_upstream_converts_them() {
    assert_eq!(milli_cpu_to_shares(0), 2);
    assert_eq!(milli_cpu_to_shares(1), 2);
    assert_eq!(milli_cpu_to_shares(100), 102);
    assert_eq!(milli_cpu_to_shares(1000), 1024);
    assert_eq!(milli_cpu_to_shares(1_000_000), 262_144);
    assert_eq!(milli_cpu_to_quota(0, CPU_PERIOD), 0);
    assert_eq!(milli_cpu_to_quota(5, CPU_PERIOD), 1000);
    assert_eq!(milli_cpu_to_quota(250, CPU_PERIOD), 25_000);
    assert_eq!(hugetlb_size_name(2048), "2MB");
    assert_eq!(hugetlb_size_name(1 << 20), "1GB");
    assert_eq!(hugetlb_size_name(64), "64KB");
}

#[test]
fn best_effort_pods_get_two_shares_and_no_huge_pages() {
    let p = pod("u1", &json!({"containers": [{"name": "c", "image": "i"}]}));
    assert_eq!(pod_cgroup("/", &p), "/kubepods/besteffort/podu1");
    let resources = pod_resources(&p, &[2048]);
    assert_eq!(resources.cpu_shares, Some(2));
    assert_eq!((resources.cpu_quota, resources.memory), (None, None));
    assert_eq!(resources.hugetlb, BTreeMap::from([("2MB".to_owned(), 0)]));
}

#[test]
fn burstable_pods_are_limited_only_where_every_container_is() {
    let p = pod(
        "u2",
        &json!({"containers": [
            container("a", &json!({"cpu": "100m", "memory": "64Mi"}), &json!({"memory": "128Mi"})),
            container("b", &json!({"cpu": "200m"}), &json!({"cpu": "1", "memory": "32Mi"})),
        ]}),
    );
    assert_eq!(pod_cgroup("/keel-test/", &p), "/keel-test/kubepods/burstable/podu2");
    let resources = pod_resources(&p, &[]);
    assert_eq!(resources.cpu_shares, Some(307));
    // a has no CPU limit: no quota; both limit memory: the sum.
    assert_eq!((resources.cpu_quota, resources.cpu_period), (None, None));
    assert_eq!(resources.memory, Some(160 * MI));
    // An init container without limits takes the memory limit away.
    let mut with_init = p.clone();
    with_init.spec.as_mut().unwrap().init_containers =
        Some(vec![serde_json::from_value(container("i", &json!({}), &json!({}))).unwrap()]);
    assert_eq!(pod_resources(&with_init, &[]).memory, None);
}

#[test]
fn guaranteed_pods_are_limited_with_their_overhead() {
    let both = json!({"cpu": "500m", "memory": "100Mi"});
    let p = pod(
        "u3",
        &json!({"containers": [container("a", &both, &both), container("b", &both, &both)],
               "overhead": {"cpu": "100m", "memory": "10Mi"}}),
    );
    assert_eq!(pod_cgroup("/", &p), "/kubepods/podu3");
    let resources = pod_resources(&p, &[]);
    assert_eq!(resources.cpu_shares, Some(milli_cpu_to_shares(1100)));
    assert_eq!(resources.cpu_quota, Some(110_000));
    assert_eq!(resources.cpu_period, Some(CPU_PERIOD));
    assert_eq!(resources.memory, Some(210 * MI));
}

#[test]
fn init_containers_and_sidecars_count_as_upstream_aggregates_them() {
    // Containers 100m, a sidecar of 50m, then an init container of 300m: the init container runs
    // beside the sidecar (350m), more than the containers with the sidecar (150m).
    let p = pod(
        "u4",
        &json!({
            "initContainers": [
                {"name": "s", "image": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "50m"}}},
                {"name": "i", "image": "i", "resources": {"requests": {"cpu": "300m"}}},
            ],
            "containers": [container("c", &json!({"cpu": "100m"}), &json!({}))],
        }),
    );
    assert_eq!(pod_requests(&p).get("cpu"), Some(&350));
    assert_eq!(pod_resources(&p, &[]).cpu_shares, Some(358));
}

#[test]
fn huge_pages_requested_are_the_pods_limit() {
    let p = pod(
        "u5",
        &json!({"containers": [container(
            "c",
            &json!({"cpu": "1", "memory": "64Mi", "hugepages-2Mi": "4Mi"}),
            &json!({"cpu": "1", "memory": "64Mi", "hugepages-2Mi": "4Mi"}),
        )]}),
    );
    let resources = pod_resources(&p, &[2048, 1 << 20]);
    assert_eq!(resources.hugetlb, BTreeMap::from([("1GB".to_owned(), 0), ("2MB".to_owned(), 4 << 20)]));
}

#[test]
fn qos_cgroups_share_out_the_burstable_requests() {
    let burstable = |uid: &str, cpu: &str| {
        pod(uid, &json!({"containers": [container("c", &json!({"cpu": cpu}), &json!({}))]}))
    };
    let best_effort = pod("b", &json!({"containers": [{"name": "c", "image": "i"}]}));
    let pods = [burstable("x", "250m"), burstable("y", "750m"), best_effort];
    let (burstable, besteffort) = qos_resources(&pods, &[2048]);
    assert_eq!(burstable.cpu_shares, Some(1024));
    assert_eq!(besteffort.cpu_shares, Some(2));
    assert_eq!(burstable.hugetlb.get("2MB"), Some(&u64::MAX));
    let (none, _) = qos_resources(&[], &[]);
    assert_eq!(none.cpu_shares, Some(2));
}

#[test]
fn kubepods_takes_the_allocatable() {
    let allocatable = BTreeMap::from([
        ("cpu".to_owned(), Quantity::parse("1500m").unwrap()),
        ("memory".to_owned(), Quantity::parse("2Gi").unwrap()),
        ("hugepages-2Mi".to_owned(), Quantity::parse("8Mi").unwrap()),
    ]);
    let resources = kubepods_resources(&allocatable, &[2048]);
    assert_eq!(resources.cpu_shares, Some(1536));
    assert_eq!(resources.memory, Some(2048 * MI));
    assert_eq!(resources.hugetlb.get("2MB"), Some(&(8 << 20)));
}

#[test]
fn pod_cgroups_on_a_fake_tree() {
    let dir = tempfile::tempdir().unwrap();
    let layout = keel_cgroups::parse_mountinfo(keel_cgroups::examples::V1, dir.path()).unwrap();
    let cgroups =
        PodCgroups { layout, root: "/node1".into(), huge_page_sizes_kib: vec![], pod_pids_limit: 64 };
    let allocatable = BTreeMap::from([("cpu".to_owned(), Quantity::parse("2").unwrap())]);
    let missing = cgroups.set_up(Some(&allocatable)).unwrap_err();
    assert_eq!(missing, "invalid configuration: cgroup-root \"/node1\" doesn't exist");
    let cpu = dir.path().join("sys/fs/cgroup/cpu,cpuacct");
    for mount in ["cpu,cpuacct", "memory", "pids"] {
        std::fs::create_dir_all(dir.path().join("sys/fs/cgroup").join(mount).join("node1")).unwrap();
    }
    cgroups.set_up(Some(&allocatable)).unwrap();
    assert_eq!(std::fs::read_to_string(cpu.join("node1/kubepods/cpu.shares")).unwrap(), "2048");
    assert_eq!(std::fs::read_to_string(cpu.join("node1/kubepods/besteffort/cpu.shares")).unwrap(), "2");
    let p = pod("u6", &json!({"containers": [container("c", &json!({"cpu": "100m"}), &json!({}))]}));
    assert_eq!(cgroups.ensure(&p).unwrap(), "/node1/kubepods/burstable/podu6");
    assert_eq!(
        std::fs::read_to_string(cpu.join("node1/kubepods/burstable/podu6/cpu.shares")).unwrap(),
        "102"
    );
    cgroups.update_qos([&p]).unwrap();
    assert_eq!(std::fs::read_to_string(cpu.join("node1/kubepods/burstable/cpu.shares")).unwrap(), "102");
    // A pod cgroup left by a pod under another class (a fake tree's directories hold no interface
    // files, which the kernel's rmdir would not mind but a plain one does).
    for mount in ["cpu,cpuacct", "memory", "pids"] {
        let dir = dir.path().join("sys/fs/cgroup").join(mount).join("node1/kubepods/podu7");
        std::fs::create_dir_all(dir.join("container")).unwrap();
    }
    let found = [
        ("u7".to_owned(), "/node1/kubepods/podu7".to_owned()),
        ("u6".to_owned(), "/node1/kubepods/burstable/podu6".to_owned()),
    ];
    assert_eq!(cgroups.pods(), found);
    cgroups.destroy("u7").unwrap();
    assert_eq!(cgroups.pods(), found[1..]);
    assert!(cpu.join("node1/kubepods").is_dir());
    assert_eq!(pod_uid_of("pod"), None);
    assert_eq!(pod_uid_of("burstable"), None);
}
