//! The "exec" group: what critest's ExecSync cases leave out — stdout, stderr and a non-zero exit code
//! kept apart, and the gRPC code of a timeout (DeadlineExceeded, which the kubelet's prober reads as a
//! timeout). critest covers the rest: "runtime should support execSync" (`echo` answers its output,
//! empty stderr, exit code 0) and "runtime should support execSync with timeout" (the call fails and
//! the command is gone afterwards).

use super::support::{exec_sync, expect_code, new_pod, rpc, run_container};
use super::{CaseResult, CriClient, Env, case, ensure};

const GROUP: &str = "exec";

/// Runs every case of the group (one pod, one container).
pub async fn run(client: &mut CriClient, env: &Env) -> Vec<CaseResult> {
    let setup = async {
        let (pod_id, pod) = new_pod(client, env, "exec").await?;
        run_container(client, env, &pod_id, &pod, "exec", &["sleep", "1000"]).await
    };
    let id = match setup.await {
        Ok(id) => id,
        Err(e) => return vec![case(GROUP, "setup: a running container", Err(e))],
    };
    vec![
        case(GROUP, "execSync: stdout, stderr and exit code apart", exec_streams(client, &id).await),
        case(GROUP, "execSync with timeout: DeadlineExceeded", exec_timeout(client, &id).await),
    ]
}

async fn exec_streams(client: &mut CriClient, id: &str) -> Result<(), String> {
    let cmd = ["sh", "-c", "echo out; echo err >&2; exit 7"];
    let response = exec_sync(client, id, &cmd, 30).await.map_err(|s| rpc("ExecSync", &s))?;
    ensure(response.stdout == b"out\n", || {
        format!("stdout {:?}", String::from_utf8_lossy(&response.stdout))
    })?;
    ensure(response.stderr == b"err\n", || {
        format!("stderr {:?}", String::from_utf8_lossy(&response.stderr))
    })?;
    ensure(response.exit_code == 7, || format!("exit code {}, expected 7", response.exit_code))
}

/// `sleep 7654321` with a 1 s timeout: DeadlineExceeded (critest checks only that it fails, and that the
/// command is gone afterwards).
async fn exec_timeout(client: &mut CriClient, id: &str) -> Result<(), String> {
    expect_code(
        "ExecSync of `sleep 7654321` with a 1 s timeout",
        exec_sync(client, id, &["sleep", "7654321"], 1).await,
        tonic::Code::DeadlineExceeded,
    )
}
