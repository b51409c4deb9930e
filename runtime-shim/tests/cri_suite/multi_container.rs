//! The "multi-container" group: containers of one pod share its network namespace (one listens on
//! localhost, the other connects), its PID namespace when the pod asks for one, and its hostname.
//! critest's "Multiple Containers" checks none of these: each container's own log and exec, and the pod
//! IP from the node; its "runtime should support PodPID" looks at one container only (PID 1 is not its
//! own process).

use super::support::{exec_until_ok, http_server, new_pod, run_container};
use super::{CaseResult, CriClient, Env, case, ensure};

const GROUP: &str = "multi-container";
const BODY: &str = "hello-from-the-first-container";

/// Runs every case of the group (one pod, two containers).
pub async fn run(client: &mut CriClient, env: &Env) -> Vec<CaseResult> {
    let setup = async {
        let (pod_id, pod) = new_pod(client, env, "multi").await?;
        let server = http_server("127.0.0.1:8081", BODY);
        let server: Vec<&str> = server.iter().map(String::as_str).collect();
        let first = run_container(client, env, &pod_id, &pod, "first", &server).await?;
        let second = run_container(client, env, &pod_id, &pod, "second", &["sleep", "1000"]).await?;
        Ok::<_, String>((first, second))
    };
    let (first, second) = match setup.await {
        Ok(ids) => ids,
        Err(e) => return vec![case(GROUP, "setup: two containers in one pod", Err(e))],
    };
    vec![
        case(GROUP, "containers of a pod share its network namespace", localhost(client, &second).await),
        case(GROUP, "containers of a pod share its PID namespace", processes(client, &second).await),
        case(GROUP, "containers of a pod share its hostname", hostnames(client, &first, &second).await),
    ]
}

async fn localhost(client: &mut CriClient, second: &str) -> Result<(), String> {
    let body = exec_until_ok(client, second, &["wget", "-q", "-O", "-", "http://127.0.0.1:8081/"]).await?;
    ensure(body.trim() == BODY, || format!("the second container got {body:?} from 127.0.0.1:8081"))
}

async fn processes(client: &mut CriClient, second: &str) -> Result<(), String> {
    let list = "for p in /proc/[0-9]*; do cat $p/cmdline; echo; done";
    let text = exec_until_ok(client, second, &["sh", "-c", list]).await?;
    ensure(text.contains("httpd"), || {
        format!("the second container does not see the first's httpd: {text:?}")
    })
}

async fn hostnames(client: &mut CriClient, first: &str, second: &str) -> Result<(), String> {
    let a = exec_until_ok(client, first, &["hostname"]).await?;
    let b = exec_until_ok(client, second, &["hostname"]).await?;
    ensure(a == b && !a.trim().is_empty(), || format!("hostnames {a:?} and {b:?}"))
}
