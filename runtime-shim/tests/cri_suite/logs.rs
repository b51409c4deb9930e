//! The "logs" group: the CRI log file a container's output goes to (one line per record:
//! `<RFC3339Nano timestamp> <stdout|stderr> <P|F> <text>`; a line longer than the runtime's buffer is
//! split into partial `P` records closed by an `F` record), and ReopenContainerLog of a stopped
//! container. critest covers the rest: "runtime should support starting container with log" (a stdout
//! line found, its tag unchecked) and "runtime should support reopening container log" (after a rename
//! the new file is made and grows, the renamed one stops).
use std::path::{Path, PathBuf};

use super::support::{
    container_config, create_container, new_pod, rpc, start_container, stop_container, wait_state,
};
use super::{CaseResult, CriClient, Env, api, case, ensure};

const GROUP: &str = "logs";

/// One record of a CRI log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub timestamp: String,
    pub stream: String,
    pub tag: String,
    pub text: String,
}

/// Runs every case of the group (one pod).
pub async fn run(client: &mut CriClient, env: &Env) -> Vec<CaseResult> {
    let (pod_id, pod) = match new_pod(client, env, "logs").await {
        Ok(pod) => pod,
        Err(e) => return vec![case(GROUP, "setup: a pod for the group", Err(e))],
    };
    vec![
        case(
            GROUP,
            "runtime should support starting container with log",
            with_log(client, env, &pod_id, &pod).await,
        ),
        case(
            GROUP,
            "log: a long line is split into partial records",
            long_line(client, env, &pod_id, &pod).await,
        ),
        case(
            GROUP,
            "reopening the log of a stopped container fails",
            reopen_stopped(client, env, &pod_id, &pod).await,
        ),
    ]
}

/// Whether `text` is an RFC 3339 timestamp with nanoseconds as Go's RFC3339Nano writes it
/// (`2006-01-02T15:04:05.999999999Z07:00`: trailing zeros of the fraction dropped).
pub fn is_rfc3339_nano(text: &str) -> bool {
    let b = text.as_bytes();
    let digits =
        |range: std::ops::Range<usize>| b.get(range).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    if b.len() < 20 || !digits(0..4) || b[4] != b'-' || !digits(5..7) || b[7] != b'-' || !digits(8..10) {
        return false;
    }
    if b[10] != b'T'
        || !digits(11..13)
        || b[13] != b':'
        || !digits(14..16)
        || b[16] != b':'
        || !digits(17..19)
    {
        return false;
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let n = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 || n > 9 {
            return false;
        }
        rest = &fraction[n..];
    }
    rest == "Z" || {
        let z = rest.as_bytes();
        z.len() == 6
            && (z[0] == b'+' || z[0] == b'-')
            && z[3] == b':'
            && z[1..3].iter().chain(&z[4..6]).all(u8::is_ascii_digit)
    }
}

/// The records of a CRI log file; an error names the first malformed line.
pub fn parse_log(text: &str) -> Result<Vec<LogRecord>, String> {
    let mut records = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(4, ' ');
        let (Some(timestamp), Some(stream), Some(tag)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("malformed log line {line:?}"));
        };
        let text = parts.next().unwrap_or_default();
        if !is_rfc3339_nano(timestamp) {
            return Err(format!("timestamp {timestamp:?} is not RFC3339Nano in {line:?}"));
        }
        if stream != "stdout" && stream != "stderr" {
            return Err(format!("stream {stream:?} in {line:?}"));
        }
        if tag != "P" && tag != "F" && !tag.starts_with("P:") && !tag.starts_with("F:") {
            return Err(format!("tag {tag:?} in {line:?}"));
        }
        records.push(LogRecord {
            timestamp: timestamp.into(),
            stream: stream.into(),
            tag: tag.into(),
            text: text.into(),
        });
    }
    Ok(records)
}

fn read_log(path: &Path) -> Result<Vec<LogRecord>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse_log(&text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("reading {}: {e}", path.display())),
    }
}

fn log_path(pod: &api::PodSandboxConfig, config: &api::ContainerConfig) -> PathBuf {
    Path::new(&pod.log_directory).join(&config.log_path)
}

/// A container echoing to stdout and stderr: one full record on each stream.
async fn with_log(
    client: &mut CriClient,
    env: &Env,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
) -> Result<(), String> {
    let config = container_config(env, "log", &["sh", "-c", "echo hello World; echo to stderr >&2"]);
    let id = create_container(client, pod_id, pod, &config).await?;
    start_container(client, &id).await.map_err(|s| rpc("StartContainer", &s))?;
    wait_state(client, &id, api::ContainerState::ContainerExited).await?;
    let records = read_log(&log_path(pod, &config))?;
    let has = |stream: &str, text: &str| {
        records.iter().any(|r| r.stream == stream && r.tag == "F" && r.text == text)
    };
    ensure(has("stdout", "hello World") && has("stderr", "to stderr"), || format!("log records {records:?}"))
}

/// A 32 KiB line: partial records then one full record, which together are the line.
async fn long_line(
    client: &mut CriClient,
    env: &Env,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
) -> Result<(), String> {
    let script = "s=x; i=0; while [ $i -lt 15 ]; do s=$s$s; i=$((i+1)); done; echo $s";
    let config = container_config(env, "long-line", &["sh", "-c", script]);
    let id = create_container(client, pod_id, pod, &config).await?;
    start_container(client, &id).await.map_err(|s| rpc("StartContainer", &s))?;
    wait_state(client, &id, api::ContainerState::ContainerExited).await?;
    let records = read_log(&log_path(pod, &config))?;
    let tags: Vec<&str> = records.iter().map(|r| r.tag.as_str()).collect();
    ensure(
        records.len() >= 2 && tags[..tags.len() - 1].iter().all(|&t| t == "P") && tags[tags.len() - 1] == "F",
        || format!("tags {tags:?}, expected P... then F"),
    )?;
    let line: String = records.iter().map(|r| r.text.as_str()).collect();
    ensure(line.len() == 32768 && line.bytes().all(|c| c == b'x'), || {
        format!("the records join to {} bytes", line.len())
    })
}

/// ReopenContainerLog of a container that ran and was stopped fails: nothing writes its log any more
/// (the kubelet's log rotation then leaves the file alone).
async fn reopen_stopped(
    client: &mut CriClient,
    env: &Env,
    pod_id: &str,
    pod: &api::PodSandboxConfig,
) -> Result<(), String> {
    let config = container_config(env, "reopen", &["sleep", "1000"]);
    let id = create_container(client, pod_id, pod, &config).await?;
    start_container(client, &id).await.map_err(|s| rpc("StartContainer", &s))?;
    wait_state(client, &id, api::ContainerState::ContainerRunning).await?;
    stop_container(client, &id, 0).await.map_err(|s| rpc("StopContainer", &s))?;
    let stopped = client
        .runtime
        .reopen_container_log(api::ReopenContainerLogRequest { container_id: id.clone() })
        .await;
    ensure(stopped.is_err(), || "ReopenContainerLog of a stopped container succeeded".to_owned())
}
