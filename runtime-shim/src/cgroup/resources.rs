//! CRI `LinuxContainerResources` → OCI `LinuxResources`, as containerd's `WithResources` maps them.

use k8s_cri::v1 as api;
use oci_spec::runtime::{LinuxCpu, LinuxHugepageLimit, LinuxMemory, LinuxResources};

/// The OCI resources for a CRI request: CPU period, quota and shares, cpuset cpus and mems, memory limit
/// and swap limit (each only when non-zero/non-empty, as containerd), hugepage limits when `hugetlb`
/// (the controller is present: [`super::Layout::hugetlb`]; without it they are dropped, as
/// containerd's default `tolerate_missing_hugetlb_controller` drops them, since the kubelet sends a
/// limit for every page size the node has even when no pod asks for hugepages), and the v2
/// `unified` map as given. Not set: the OOM killer stays enabled, no pids limit (the kubelet enforces
/// pod pids limits on the pod cgroup), no block IO. Unlike containerd, swap is not set to the memory
/// limit when the request leaves it 0 (containerd does so when the swap controller exists, to keep
/// containers from swapping): the kubelet sends the swap limit it wants since 1.28. `oom_score_adj`
/// is a process setting: the spec builder puts it in `process`.
pub fn resources(requested: &api::LinuxContainerResources, hugetlb: bool) -> LinuxResources {
    let mut cpu = LinuxCpu::default();
    if requested.cpu_period > 0 {
        cpu.set_period(u64::try_from(requested.cpu_period).ok());
    }
    if requested.cpu_quota != 0 {
        cpu.set_quota(Some(requested.cpu_quota));
    }
    if requested.cpu_shares > 0 {
        cpu.set_shares(u64::try_from(requested.cpu_shares).ok());
    }
    if !requested.cpuset_cpus.is_empty() {
        cpu.set_cpus(Some(requested.cpuset_cpus.clone()));
    }
    if !requested.cpuset_mems.is_empty() {
        cpu.set_mems(Some(requested.cpuset_mems.clone()));
    }
    let mut memory = LinuxMemory::default();
    if requested.memory_limit_in_bytes != 0 {
        memory.set_limit(Some(requested.memory_limit_in_bytes));
    }
    if requested.memory_swap_limit_in_bytes != 0 {
        memory.set_swap(Some(requested.memory_swap_limit_in_bytes));
    }
    let mut out = LinuxResources::default();
    if cpu != LinuxCpu::default() {
        out.set_cpu(Some(cpu));
    }
    if memory != LinuxMemory::default() {
        out.set_memory(Some(memory));
    }
    if !requested.hugepage_limits.is_empty() && !hugetlb {
        tracing::debug!("the hugetlb cgroup controller is absent: hugepage limits are not set");
    }
    if !requested.hugepage_limits.is_empty() && hugetlb {
        let limits = requested
            .hugepage_limits
            .iter()
            .map(|limit| {
                let mut hugepage = LinuxHugepageLimit::default();
                hugepage.set_page_size(limit.page_size.clone());
                hugepage.set_limit(i64::try_from(limit.limit).unwrap_or(i64::MAX));
                hugepage
            })
            .collect();
        out.set_hugepage_limits(Some(limits));
    }
    if !requested.unified.is_empty() {
        out.set_unified(Some(requested.unified.iter().map(|(k, v)| (k.clone(), v.clone())).collect()));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn nothing_requested_gives_empty_resources() {
        let out = resources(&api::LinuxContainerResources::default(), true);
        assert_eq!(out, LinuxResources::default());
        assert_eq!(serde_json::to_value(&out).unwrap(), serde_json::json!({}));
    }

    #[test]
    fn every_field_maps_to_its_oci_place() {
        let requested = api::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 512,
            memory_limit_in_bytes: 64 << 20,
            memory_swap_limit_in_bytes: 128 << 20,
            oom_score_adj: 999,
            cpuset_cpus: "0-1".into(),
            cpuset_mems: "0".into(),
            hugepage_limits: vec![api::HugepageLimit { page_size: "2MB".into(), limit: 4 << 21 }],
            unified: HashMap::from([("memory.high".to_owned(), "50000000".to_owned())]),
        };
        let json = serde_json::to_value(resources(&requested, true)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "cpu": {"period": 100000, "quota": 50000, "shares": 512, "cpus": "0-1", "mems": "0"},
                "memory": {"limit": 67108864, "swap": 134217728},
                "hugepageLimits": [{"pageSize": "2MB", "limit": 8388608}],
                "unified": {"memory.high": "50000000"},
            })
        );
        // Without the hugetlb controller the limits are dropped (runc would fail the container).
        let json = serde_json::to_value(resources(&requested, false)).unwrap();
        assert_eq!(json.get("hugepageLimits"), None);
        assert_eq!(json["memory"], serde_json::json!({"limit": 67108864, "swap": 134217728}));
    }

    #[test]
    fn zero_fields_are_left_out_and_unlimited_quota_is_kept() {
        let requested = api::LinuxContainerResources {
            cpu_quota: -1,
            memory_limit_in_bytes: 0,
            memory_swap_limit_in_bytes: -1,
            ..Default::default()
        };
        let json = serde_json::to_value(resources(&requested, true)).unwrap();
        assert_eq!(json, serde_json::json!({"cpu": {"quota": -1}, "memory": {"swap": -1}}));
    }
}
