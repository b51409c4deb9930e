//! The "exec" group: ExecSync's stdout, stderr and exit code, and its timeout (the command is killed,
//! the call fails with DeadlineExceeded, which the kubelet's prober reads as a timeout).

use super::support::{exec_sync, new_pod, rpc, run_container};
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
        case(GROUP, "runtime should support execSync", exec_hello(client, &id).await),
        case(GROUP, "execSync: stdout, stderr and exit code apart", exec_streams(client, &id).await),
        case(GROUP, "runtime should support execSync with timeout", exec_timeout(client, &id).await),
    ]
}

async fn exec_hello(client: &mut CriClient, id: &str) -> Result<(), String> {
    let response = exec_sync(client, id, &["echo", "hello"], 30).await.map_err(|s| rpc("ExecSync", &s))?;
    ensure(response.stdout == b"hello\n", || {
        format!("stdout {:?}", String::from_utf8_lossy(&response.stdout))
    })?;
    ensure(response.stderr.is_empty(), || format!("stderr {:?}", String::from_utf8_lossy(&response.stderr)))?;
    ensure(response.exit_code == 0, || format!("exit code {}", response.exit_code))
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

/// `sleep 7654321` with a 1 s timeout: DeadlineExceeded, and no `sleep 7654321` left in the container.
async fn exec_timeout(client: &mut CriClient, id: &str) -> Result<(), String> {
    super::support::expect_code(
        "ExecSync of `sleep 7654321` with a 1 s timeout",
        exec_sync(client, id, &["sleep", "7654321"], 1).await,
        tonic::Code::DeadlineExceeded,
    )?;
    // Every process's command line (NUL-separated arguments), one per line.
    let list = "for p in /proc/[0-9]*; do cat $p/cmdline; echo; done";
    let deadline = std::time::Instant::now() + super::support::WAIT;
    loop {
        let response =
            exec_sync(client, id, &["sh", "-c", list], 30).await.map_err(|s| rpc("ExecSync", &s))?;
        let processes = String::from_utf8_lossy(&response.stdout).replace('\0', " ");
        if !processes.contains("7654321") {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            return Err(format!("the timed-out exec still runs: {processes}"));
        }
        tokio::time::sleep(super::support::POLL).await;
    }
}
