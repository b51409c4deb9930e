//! Keel's CRI conformance suite, modelled on critest's validation groups: each group is an async
//! function over a [`CriClient`] returning one [`CaseResult`] per case, so the same group runs against
//! keel-shim and against containerd (the reference). Where the reference itself differs from what a
//! case asserts, the test lists it as a [`KnownDifference`] with the reason; [`check`] then requires
//! that case to fail (so the list stays true) and every other case to pass.
//!
//! Groups: [`runtime_info`] (Version, Status, RuntimeConfig, UpdateRuntimeConfig; run on its own with
//! several CNI conf dirs), and the groups [`run_all`] runs in order on one runtime serving the suite
//! alone: [`sandbox`], [`container`], [`exec`], [`logs`], [`idempotence`], [`networking`],
//! [`streaming`], [`multi_container`], [`bad_input`], [`image`] (last: it removes an image).
//!
//! critest v1.34 runs in CI too (`tests/critest.rs`: keel-shim on runc and on crun, containerd), so a
//! case here checks what critest does not: where critest's case asserts everything one of ours did, ours
//! was deleted, and each group's doc says what critest covers instead (docs/critest-overlap.md has the
//! case-by-case table).

pub mod bad_input;
pub mod container;
pub mod exec;
pub mod idempotence;
pub mod image;
pub mod logs;
pub mod multi_container;
pub mod networking;
pub mod node;
pub mod runtime_info;
pub mod sandbox;
pub mod streaming;
pub mod support;

use std::net::IpAddr;
use std::path::PathBuf;

use keel_testbed::NetNsFd;

#[allow(unused_imports, reason = "each test binary uses a part of the suite")]
pub use keel_testbed::cri::{CriClient, api};

/// The outcome of one case of a group.
#[derive(Debug)]
pub struct CaseResult {
    /// The group, such as `runtime info`.
    pub group: &'static str,
    /// The case, unique in its group.
    pub case: &'static str,
    /// `Err` says what the runtime answered instead.
    pub outcome: Result<(), String>,
}

/// What the runtime under test was given, for the groups of [`run_all`].
#[derive(Debug, Clone)]
pub struct Env {
    /// The image every container runs (keel-testbed's busybox), by tag, as the runtime pulls it.
    pub image: String,
    /// An image only the image group uses and removes, by tag (`HOST/REPO:TAG`) …
    pub scratch_image: String,
    /// … and by digest (`HOST/REPO@sha256:…`).
    pub scratch_image_by_digest: String,
    /// A reference in the same registry naming nothing.
    pub missing_image: String,
    /// The node's network namespace: where the runtime runs its CNI plugins, where pod IPs, host ports
    /// and its streaming server are reachable. `None`: the test's own.
    pub node: Option<NetNsFd>,
    /// The subnet the CNI network's IPAM gives pod IPs from.
    pub pod_subnet: ipnet::IpNet,
    /// host-local's directory of the CNI network's allocations (`<dataDir>/<network name>`), when the
    /// suite can read it: a pod's IP must be the one allocated to its sandbox id, and none may be left
    /// after the cleanup.
    pub ipam_dir: Option<PathBuf>,
    /// An address of the node that host ports answer on (the CNI bridge's gateway address).
    pub host_ip: IpAddr,
    /// A directory for pod log directories and host paths (the caller removes it).
    pub scratch: PathBuf,
    /// The runtime handler every pod is run with (RunPodSandboxRequest.runtime_handler; empty: the
    /// runtime's default).
    pub runtime_handler: String,
}

/// Runs every group but [`runtime_info`] against the runtime behind `client`, which serves the suite
/// alone, then removes every pod and container it lists (a last case: nothing is left).
pub async fn run_all(client: &mut CriClient, env: &Env) -> Vec<CaseResult> {
    if let Err(status) = image::pull(client, &env.image).await {
        let outcome = Err(support::rpc(&format!("PullImage({})", env.image), &status));
        return vec![case("setup", "pulling the suite's image", outcome)];
    }
    let mut results = Vec::new();
    results.extend(sandbox::run(client, env).await);
    results.extend(container::run(client, env).await);
    results.extend(exec::run(client, env).await);
    results.extend(logs::run(client, env).await);
    results.extend(idempotence::run(client, env).await);
    results.extend(networking::run(client, env).await);
    results.extend(streaming::run(client, env).await);
    results.extend(multi_container::run(client, env).await);
    results.extend(bad_input::run(client, env).await);
    results.extend(image::run(client, env).await);
    results.push(case("cleanup", "removing every pod and container", cleanup(client, env).await));
    results
}

async fn cleanup(client: &mut CriClient, env: &Env) -> Result<(), String> {
    support::remove_everything(client).await?;
    let pods = support::list_pods(client, None).await?;
    let containers = support::list_containers(client, None).await?;
    ensure(pods.is_empty() && containers.is_empty(), || {
        format!("left after removal: pods {pods:?}, containers {containers:?}")
    })?;
    let held = env.ipam_dir.as_deref().map(support::allocations).unwrap_or_default();
    ensure(held.is_empty(), || format!("addresses still allocated after every pod was removed: {held:?}"))
}

/// A [`CaseResult`].
pub fn case(group: &'static str, case: &'static str, outcome: Result<(), String>) -> CaseResult {
    CaseResult { group, case, outcome }
}

/// A case a runtime is known to fail, and why (documented data, not a weakened assertion).
#[derive(Debug, Clone, Copy)]
pub struct KnownDifference {
    /// The case's name.
    pub case: &'static str,
    /// Why the runtime answers otherwise.
    pub reason: &'static str,
}

/// Fails, listing every offending case, unless exactly the cases of `known` failed.
pub fn check(runtime: &str, results: &[CaseResult], known: &[KnownDifference]) -> Result<(), String> {
    let mut problems = Vec::new();
    for result in results {
        let expected = known.iter().find(|k| k.case == result.case);
        // The whole table in the test's output, as critest prints its cases.
        match (&result.outcome, expected) {
            (Ok(()), _) => eprintln!("{runtime}: [{}] {}: ok", result.group, result.case),
            (Err(e), _) => eprintln!("{runtime}: [{}] {}: FAILED: {e}", result.group, result.case),
        }
        match (&result.outcome, expected) {
            (Ok(()), None) | (Err(_), Some(_)) => {}
            (Err(e), None) => problems.push(format!("[{}] {}: {e}", result.group, result.case)),
            (Ok(()), Some(k)) => problems.push(format!(
                "[{}] {}: passes, but is listed as a known difference ({}): update the list",
                result.group, result.case, k.reason
            )),
        }
    }
    for k in known {
        if !results.iter().any(|r| r.case == k.case) {
            problems.push(format!("known difference {:?} names no case that ran", k.case));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{runtime}: {} case(s) differ from the suite:\n{}", problems.len(), problems.join("\n")))
    }
}

/// Fails with `message` unless `condition` holds.
pub fn ensure(condition: bool, message: impl FnOnce() -> String) -> Result<(), String> {
    if condition { Ok(()) } else { Err(message()) }
}
