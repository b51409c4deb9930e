//! The "runtime info" group (critest's "Runtime info", extended): Version, Status conditions and
//! verbose info, runtime handlers and features, RuntimeConfig, UpdateRuntimeConfig. critest asks
//! Version for fields it never checks (a string is never nil) and Status for RuntimeReady and
//! NetworkReady true, with a valid network only; the cases here check Version's values, the
//! conditions without a network or with a broken first config too (NetworkReady false with its
//! reason), the handlers and features Status lists, and the RPCs critest does not call.

use super::{CaseResult, CriClient, api, ensure};

const GROUP: &str = "runtime info";

/// What the runtime under test was started with.
#[derive(Debug, Clone, Copy)]
pub struct Env {
    /// Whether its CNI conf dir's first config (by name) loads: NetworkReady expected true. False for an
    /// empty conf dir, and for one whose first file is broken even if a later one is valid (libcni's
    /// callers use the first file and fail on it, they do not skip it).
    pub network_configured: bool,
}

/// Runs every case of the group.
pub async fn run(client: &mut CriClient, env: Env) -> Vec<CaseResult> {
    let mut results = Vec::new();
    let mut add = |case: &'static str, outcome: Result<(), String>| {
        results.push(CaseResult { group: GROUP, case, outcome });
    };
    add("version", version(client).await);
    add("version with an unknown API version", version_unknown(client).await);
    add("status: RuntimeReady", runtime_ready(client).await);
    add("status: NetworkReady", network_ready(client, env).await);
    add("status: verbose info", status_verbose(client).await);
    add("status: runtime handlers and features", status_handlers(client).await);
    add("runtime config: cgroup driver", runtime_config(client).await);
    add("update runtime config: pod CIDR", update_runtime_config(client).await);
    results
}

async fn get_version(client: &mut CriClient, requested: &str) -> Result<api::VersionResponse, String> {
    client
        .runtime
        .version(api::VersionRequest { version: requested.to_owned() })
        .await
        .map(tonic::Response::into_inner)
        .map_err(|s| format!("Version({requested:?}): {:?}: {}", s.code(), s.message()))
}

/// Version as kubelet and critest ask it ("0.1.0"): every field set, the kubelet API version "0.1.0"
/// and the CRI API "v1".
async fn version(client: &mut CriClient) -> Result<(), String> {
    let v = get_version(client, "0.1.0").await?;
    ensure(!v.runtime_name.is_empty(), || format!("empty runtime_name: {v:?}"))?;
    ensure(!v.runtime_version.is_empty(), || format!("empty runtime_version: {v:?}"))?;
    ensure(v.version == "0.1.0", || format!("version {:?}, expected \"0.1.0\"", v.version))?;
    ensure(v.runtime_api_version == "v1", || {
        format!("runtime_api_version {:?}, expected v1", v.runtime_api_version)
    })
}

/// An API version the runtime does not know is answered like a known one (the field is informative;
/// containerd and CRI-O ignore it).
async fn version_unknown(client: &mut CriClient) -> Result<(), String> {
    let known = get_version(client, "0.1.0").await?;
    for requested in ["v999alpha9", "", "not a version \u{1F600}"] {
        let v = get_version(client, requested).await?;
        ensure(v == known, || {
            format!("Version({requested:?}) answered {v:?}, Version(\"0.1.0\") {known:?}")
        })?;
    }
    Ok(())
}

async fn get_status(client: &mut CriClient, verbose: bool) -> Result<api::StatusResponse, String> {
    client
        .runtime
        .status(api::StatusRequest { verbose })
        .await
        .map(tonic::Response::into_inner)
        .map_err(|s| format!("Status: {:?}: {}", s.code(), s.message()))
}

fn find_condition<'a>(
    status: &'a api::StatusResponse,
    kind: &str,
) -> Result<&'a api::RuntimeCondition, String> {
    status
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.r#type == kind))
        .ok_or_else(|| format!("no {kind} condition in {status:?}"))
}

async fn runtime_ready(client: &mut CriClient) -> Result<(), String> {
    let status = get_status(client, false).await?;
    let c = find_condition(&status, "RuntimeReady")?;
    ensure(c.status, || format!("RuntimeReady is false: {c:?}"))
}

/// NetworkReady is true with a loadable CNI config; without one it is false with the reason
/// `NetworkPluginNotReady` (what kubelet shows on the node) and a message saying why.
async fn network_ready(client: &mut CriClient, env: Env) -> Result<(), String> {
    let status = get_status(client, false).await?;
    let c = find_condition(&status, "NetworkReady")?;
    if env.network_configured {
        ensure(c.status, || format!("NetworkReady is false with a valid CNI config: {c:?}"))
    } else {
        ensure(!c.status, || format!("NetworkReady is true without a CNI config: {c:?}"))?;
        ensure(c.reason == "NetworkPluginNotReady", || {
            format!("reason {:?}, expected NetworkPluginNotReady", c.reason)
        })?;
        ensure(!c.message.is_empty(), || format!("no message: {c:?}"))
    }
}

/// Verbose Status carries info whose "config" is a JSON object; plain Status carries none.
async fn status_verbose(client: &mut CriClient) -> Result<(), String> {
    let plain = get_status(client, false).await?;
    ensure(plain.info.is_empty(), || format!("Status(verbose=false) has info: {:?}", plain.info))?;
    let verbose = get_status(client, true).await?;
    let config = verbose.info.get("config").ok_or_else(|| format!("no \"config\" in {:?}", verbose.info))?;
    let value: serde_json::Value =
        serde_json::from_str(config).map_err(|e| format!("info[\"config\"] is not JSON ({e}): {config}"))?;
    ensure(value.is_object(), || format!("info[\"config\"] is not an object: {config}"))
}

/// Status lists the runtime handlers, the default one ("") among them, each once and with its
/// features (what the kubelet and critest read before asking for a recursive read-only mount), and
/// says the runtime applies SupplementalGroupsPolicy (and reports ContainerStatus.user).
async fn status_handlers(client: &mut CriClient) -> Result<(), String> {
    let status = get_status(client, false).await?;
    let names: Vec<&str> = status.runtime_handlers.iter().map(|h| h.name.as_str()).collect();
    ensure(names.contains(&""), || format!("no default handler (\"\") in runtime_handlers {names:?}"))?;
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    ensure(unique.len() == names.len(), || format!("a handler listed twice: {names:?}"))?;
    ensure(status.runtime_handlers.iter().all(|h| h.features.is_some()), || {
        format!("a handler without features: {:?}", status.runtime_handlers)
    })?;
    ensure(status.features.is_some_and(|f| f.supplemental_groups_policy), || {
        format!("features.supplemental_groups_policy is not true: {:?}", status.features)
    })
}

/// RuntimeConfig names the cgroup driver kubelet must use.
async fn runtime_config(client: &mut CriClient) -> Result<(), String> {
    let response = client
        .runtime
        .runtime_config(api::RuntimeConfigRequest {})
        .await
        .map_err(|s| format!("RuntimeConfig: {:?}: {}", s.code(), s.message()))?
        .into_inner();
    let linux = response.linux.ok_or("RuntimeConfig has no linux configuration")?;
    ensure(api::CgroupDriver::try_from(linux.cgroup_driver).is_ok(), || {
        format!("unknown cgroup driver {}", linux.cgroup_driver)
    })
}

/// UpdateRuntimeConfig accepts the pod CIDR kubelet sends, and an empty config.
async fn update_runtime_config(client: &mut CriClient) -> Result<(), String> {
    for config in [
        Some(api::RuntimeConfig {
            network_config: Some(api::NetworkConfig { pod_cidr: "10.88.0.0/16".to_owned() }),
        }),
        Some(api::RuntimeConfig { network_config: None }),
        None,
    ] {
        client
            .runtime
            .update_runtime_config(api::UpdateRuntimeConfigRequest { runtime_config: config.clone() })
            .await
            .map_err(|s| format!("UpdateRuntimeConfig({config:?}): {:?}: {}", s.code(), s.message()))?;
    }
    Ok(())
}
