use super::*;

const PROC_STAT: &str =
    "cpu  100 20 30 5000 40 5 5 10 0 0\ncpu0 50 10 15 2500 20 2 3 5 0 0\nintr 1\nbtime 1800000000\n";
const MEMINFO: &str = "MemTotal:        1000 kB\nMemFree:          400 kB\nMemAvailable:     700 kB\n\
                       Inactive(file):   100 kB\nAnonPages:        250 kB\n";

#[test]
fn node_figures_from_proc() {
    // user + nice + system + irq + softirq + steal = 170 ticks of 10 ms.
    assert_eq!(cpu_core_nanos(PROC_STAT, 100), Some(1_700_000_000));
    assert_eq!(cpu_core_nanos("intr 1\n", 100), None);
    assert_eq!(boot_time(PROC_STAT), Some(at(0)));
    assert_eq!(
        meminfo(MEMINFO),
        MemInfo { total: 1_024_000, free: 409_600, inactive_file: 102_400, anon: 256_000 }
    );
}

fn at(second: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + second).unwrap()
}

fn container_stats(uid: &str, name: &str, id: &str, cpu: u64, memory: u64) -> cri::ContainerStats {
    let labels = [("io.kubernetes.pod.uid".to_owned(), uid.to_owned())].into();
    cri::ContainerStats {
        attributes: Some(cri::ContainerAttributes {
            id: id.into(),
            metadata: Some(cri::ContainerMetadata { name: name.into(), attempt: 0 }),
            labels,
            annotations: Default::default(),
        }),
        cpu: Some(cri::CpuUsage {
            timestamp: at(10).as_nanosecond() as i64,
            usage_core_nano_seconds: Some(cri::UInt64Value { value: cpu }),
            usage_nano_cores: Some(cri::UInt64Value { value: 5_000_000 }),
        }),
        memory: Some(cri::MemoryUsage {
            timestamp: at(10).as_nanosecond() as i64,
            working_set_bytes: Some(cri::UInt64Value { value: memory }),
            ..cri::MemoryUsage::default()
        }),
        writable_layer: None,
        swap: None,
    }
}

fn pod(name: &str, uid: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "status": {"startTime": "2027-01-15T08:00:00Z"}
    }))
    .unwrap()
}

#[test]
fn the_summary_and_its_prometheus_form() {
    let previous = NodeSample { time: at(0), cpu_core_nanos: 1_000_000_000, memory: meminfo(MEMINFO) };
    let sample = NodeSample { time: at(10), cpu_core_nanos: 6_000_000_000, memory: meminfo(MEMINFO) };
    let pods = [pod("web", "u1"), pod("idle", "u2")];
    let containers = [
        container_stats("u1", "app", "c1", 2_000_000_000, 3000),
        container_stats("u1", "side", "c2", 500_000_000, 1000),
        container_stats("gone", "x", "c3", 1, 1),
    ];
    let started = BTreeMap::from([("c1".to_owned(), at(-60).as_nanosecond() as i64)]);
    let inputs = Inputs {
        node_name: "n1",
        boot_time: at(-3600),
        fs: Some((1000, 400, 100, 30)),
        pods: &pods,
        containers: &containers,
        started: &started,
    };
    let summary = summary(at(10), &sample, Some(&previous), &inputs);
    let node = &summary.node;
    // 5 s of CPU in 10 s: half a core.
    assert_eq!(
        (node.cpu.usage_nano_cores, node.cpu.usage_core_nano_seconds),
        (Some(500_000_000), Some(6_000_000_000))
    );
    assert_eq!(node.memory.working_set_bytes, Some(1_024_000 - 409_600 - 102_400));
    assert_eq!(node.fs.as_ref().and_then(|f| f.used_bytes), Some(600));
    // Only pods with stats, their containers summed.
    assert_eq!(summary.pods.len(), 1);
    let web = &summary.pods[0];
    assert_eq!(web.pod_ref, PodReference { name: "web".into(), namespace: "ns".into(), uid: "u1".into() });
    assert_eq!(
        (web.cpu.usage_core_nano_seconds, web.memory.working_set_bytes),
        (Some(2_500_000_000), Some(4000))
    );
    assert_eq!(web.containers[0].start_time, "2027-01-15T07:59:00Z");
    assert_eq!(
        web.containers[1].start_time, "2027-01-15T08:00:00Z",
        "the pod's start when the runtime's is unknown"
    );
    let json = serde_json::to_value(&summary).unwrap();
    assert_eq!(json["node"]["nodeName"], "n1");
    assert_eq!(json["pods"][0]["podRef"]["name"], "web");
    assert_eq!(json["pods"][0]["containers"][0]["cpu"]["usageCoreNanoSeconds"], 2_000_000_000u64);

    let text = resource_metrics(&summary);
    let ms = at(10).as_millisecond();
    for line in [
        "# TYPE container_cpu_usage_seconds_total counter".to_owned(),
        format!("container_cpu_usage_seconds_total{{container=\"app\",namespace=\"ns\",pod=\"web\"}} 2 {ms}"),
        format!(
            "container_memory_working_set_bytes{{container=\"side\",namespace=\"ns\",pod=\"web\"}} 1000 {ms}"
        ),
        format!("node_cpu_usage_seconds_total 6 {ms}"),
        format!("pod_cpu_usage_seconds_total{{namespace=\"ns\",pod=\"web\"}} 2.5 {ms}"),
        format!("pod_memory_working_set_bytes{{namespace=\"ns\",pod=\"web\"}} 4000 {ms}"),
        "resource_scrape_error 0".to_owned(),
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} missing from\n{text}");
    }
    assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

#[test]
fn kubelet_gauges() {
    let running = Running {
        pods: 2,
        containers: BTreeMap::from([("exited", 1), ("running", 3)]),
        pleg: crate::pleg::PlegCounts {
            connections: 1,
            errors: 4,
            latency_buckets: vec![2, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1],
            latency_sum_seconds: 60.5,
        },
    };
    let text = kubelet_metrics("n1", &running);
    for line in [
        "kubelet_evented_pleg_connection_success_count 1",
        "kubelet_evented_pleg_connection_error_count 4",
        "# TYPE kubelet_evented_pleg_connection_error_count counter",
        "kubelet_evented_pleg_connection_latency_seconds_bucket{le=\"0.005\"} 2",
        "kubelet_evented_pleg_connection_latency_seconds_bucket{le=\"1\"} 3",
        "kubelet_evented_pleg_connection_latency_seconds_bucket{le=\"10\"} 3",
        "kubelet_evented_pleg_connection_latency_seconds_bucket{le=\"+Inf\"} 4",
        "kubelet_evented_pleg_connection_latency_seconds_sum 60.5",
        "kubelet_evented_pleg_connection_latency_seconds_count 4",
        "kubelet_node_name{node=\"n1\"} 1",
        "kubelet_running_containers{container_state=\"exited\"} 1",
        "kubelet_running_containers{container_state=\"running\"} 3",
        "kubelet_running_pods 2",
        "# TYPE kubelet_running_pods gauge",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} missing from\n{text}");
    }
    assert_eq!(container_state(cri::ContainerState::ContainerRunning as i32), "running");
    assert_eq!(container_state(42), "unknown");
}
