//! Containers through runc and crun, at the library level (root): lifecycle, logs, exit codes,
//! exec, attach, re-adoption after a keel-shim restart, and nothing left behind after removal.
//!
//! The rootfs is keel-testbed's busybox image unpacked with umoci; the spec is a minimal one built
//! here (private namespaces, including the network's; a cgroup of the test's own).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_cri::v1 as api;
use keel_shim::container::{Containers, CreateRequest, Streams};
use oci_spec::runtime::Spec;
use tokio::io::AsyncReadExt;
use tokio::sync::broadcast;

const RUNC: &str = "/usr/sbin/runc";
const CRUN: &str = "/usr/bin/crun";

struct Fixture {
    root: tempfile::TempDir,
    rootfs: PathBuf,
    containers: Containers,
    created: Vec<(String, String)>,
}

fn runtimes() -> BTreeMap<String, PathBuf> {
    BTreeMap::from([("runc".to_owned(), PathBuf::from(RUNC)), ("crun".to_owned(), PathBuf::from(CRUN))])
}

/// The status the CRI server answers for a container error (its code and message).
fn grpc(error: keel_shim::container::Error) -> tonic::Status {
    tonic::Status::from(error)
}

fn monitor_binary() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_keel-shim"))
}

impl Fixture {
    fn new() -> Fixture {
        let root = tempfile::Builder::new().prefix("keel-shim-ctr-").tempdir().expect("temp dir");
        let image = keel_testbed::images::busybox_image().expect("busybox image");
        let unpacked = root.path().join("unpacked");
        let status = std::process::Command::new("umoci")
            .args(["unpack", "--image", &format!("{}:{}", image.layout.display(), image.tag)])
            .arg(&unpacked)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("umoci");
        assert!(status.success(), "umoci unpack failed");
        let containers = Containers::open_with_monitor(root.path(), &runtimes(), monitor_binary())
            .expect("open containers");
        Fixture { rootfs: unpacked.join("rootfs"), root, containers, created: Vec::new() }
    }

    fn reopen(&mut self) {
        self.containers =
            Containers::open_with_monitor(self.root.path(), &runtimes(), monitor_binary()).expect("reopen");
    }

    fn request(&mut self, handler: &str, args: &[&str]) -> CreateRequest {
        let id = format!("{:016x}{:08x}", rand_u64(), std::process::id());
        self.created.push((handler.to_owned(), id.clone()));
        request_for(self.root.path(), &self.rootfs, &id, handler, args)
    }

    fn runtime_state_dir(&self, handler: &str, id: &str) -> PathBuf {
        self.root.path().join("runtime").join(handler).join(id)
    }
}

/// A request for container `id` running `args` on `rootfs`, logging under `root/logs`.
fn request_for(root: &Path, rootfs: &Path, id: &str, handler: &str, args: &[&str]) -> CreateRequest {
    {
        let id = id.to_owned();
        let mut spec = Spec::default();
        if let Some(process) = spec.process_mut() {
            process.set_args(Some(args.iter().map(|arg| (*arg).to_owned()).collect()));
        }
        if let Some(linux) = spec.linux_mut() {
            linux.set_cgroups_path(Some(PathBuf::from(format!("/keel-shim-test-{id}"))));
        }
        spec.set_hostname(Some("box".to_owned()));
        CreateRequest {
            id: id.clone(),
            sandbox_id: "sandbox-1".to_owned(),
            metadata: api::ContainerMetadata { name: "box".to_owned(), attempt: 1 },
            image: api::ImageSpec { image: "busybox:latest".to_owned(), ..Default::default() },
            image_ref: "sha256:ref".to_owned(),
            image_id: "sha256:id".to_owned(),
            labels: HashMap::from([("app".to_owned(), "test".to_owned())]),
            annotations: HashMap::from([("note".to_owned(), "yes".to_owned())]),
            log_path: Some(root.join("logs").join(format!("{id}.log"))),
            spec,
            handler: handler.to_owned(),
            tty: false,
            stdin: false,
            stdin_once: false,
            rootfs_mounted_at: rootfs.to_owned(),
            mounts: Vec::new(),
            stop_signal: None,
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for (handler, id) in &self.created {
            let state = self.root.path().join("runtime").join(handler);
            if !state.join(id).exists() {
                continue;
            }
            let binary = if handler == "crun" { CRUN } else { RUNC };
            let mut command = std::process::Command::new(binary);
            command.arg("--root").arg(&state).args(["delete", "--force", id]);
            if handler == "crun" {
                // The same view crun is always given (see oci::runtime).
                command = std::process::Command::new("unshare");
                command.args(["--mount", "--propagation", "slave", "sh", "-c"]).arg(format!(
                    "umount -l /sys/fs/cgroup/unified 2>/dev/null; {CRUN} --root {} delete --force {id}",
                    state.display()
                ));
            }
            let _ = command.status();
        }
    }
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
    );
    hasher.finish()
}

fn state(containers: &Containers, id: &str) -> api::ContainerState {
    let status = containers.status(id).expect("status");
    api::ContainerState::try_from(status.state).expect("a state")
}

/// Waits (polling, without a deadline of its own beyond a generous cap) until `f` holds.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..600 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn wait_exited(containers: &Containers, id: &str) -> api::ContainerStatus {
    eventually("the container's exit", || state(containers, id) == api::ContainerState::ContainerExited)
        .await;
    containers.status(id).expect("status")
}

fn log_lines(path: &Path) -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            let mut parts = line.splitn(4, ' ');
            let stamp = parts.next().unwrap_or_default();
            assert!(
                jiff::Timestamp::strptime("%Y-%m-%dT%H:%M:%S%.fZ", stamp).is_ok()
                    || stamp.parse::<jiff::Timestamp>().is_ok(),
                "bad timestamp in {line:?}"
            );
            (
                parts.next().unwrap_or_default().to_owned(),
                parts.next().unwrap_or_default().to_owned(),
                parts.next().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn request_log(fixture: &Fixture, id: &str) -> PathBuf {
    fixture.root.path().join("logs").join(format!("{id}.log"))
}

fn process_gone(pid: i32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
        || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| stat.contains(") Z "))
}

fn next_event(events: &mut broadcast::Receiver<api::ContainerEventResponse>) -> api::ContainerEventType {
    let event = events.try_recv().expect("an event");
    let kind = api::ContainerEventType::try_from(event.container_event_type).expect("an event type");
    if kind == api::ContainerEventType::ContainerDeletedEvent {
        assert!(event.containers_statuses.iter().all(|status| status.id != event.container_id));
    } else {
        assert_eq!(event.containers_statuses[0].id, event.container_id);
    }
    api::ContainerEventType::try_from(event.container_event_type).expect("an event type")
}

async fn lifecycle(handler: &str) {
    let mut fixture = Fixture::new();
    let mut events = fixture.containers.events();
    let request =
        fixture.request(handler, &["sh", "-c", "trap '' TERM; echo hello; while true; do sleep 1; done"]);
    let id = request.id.clone();
    let log = request.log_path.clone().expect("log path");
    let created = fixture.containers.create(request).await.expect("create");
    assert_eq!(created.state, api::ContainerState::ContainerCreated as i32);
    assert!(created.created_at > 0);
    assert!(fixture.runtime_state_dir(handler, &id).exists());
    fixture.containers.start(&id).await.expect("start");
    let status = fixture.containers.status(&id).expect("status");
    assert_eq!(status.state, api::ContainerState::ContainerRunning as i32);
    assert!(status.started_at >= status.created_at);
    assert_eq!(status.labels.get("app").map(String::as_str), Some("test"));
    assert_eq!(status.log_path, log.display().to_string());
    // Listing filters.
    let by_label = api::ContainerFilter {
        label_selector: HashMap::from([("app".to_owned(), "test".to_owned())]),
        ..Default::default()
    };
    assert_eq!(fixture.containers.list(Some(&by_label)).len(), 1);
    let exited_only = api::ContainerFilter {
        state: Some(api::ContainerStateValue { state: api::ContainerState::ContainerExited as i32 }),
        ..Default::default()
    };
    assert!(fixture.containers.list(Some(&exited_only)).is_empty());
    let by_prefix = api::ContainerFilter { id: id[..8].to_owned(), ..Default::default() };
    assert_eq!(fixture.containers.list(Some(&by_prefix))[0].id, id);

    eventually("hello in the log", || log_lines(&log).iter().any(|(_, _, text)| text == "hello")).await;
    let pid_file = fixture.root.path().join("containers").join(&id).join("init.pid");
    let init: i32 = std::fs::read_to_string(pid_file).expect("pid").trim().parse().expect("pid");
    let record: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixture.root.path().join("containers").join(&id).join("container.json"))
            .expect("record"),
    )
    .expect("json");
    let monitor = record["monitor_pid"].as_i64().expect("monitor pid") as i32;

    // TERM is ignored: KILL after the grace period.
    fixture.containers.stop(&id, Duration::from_millis(500)).await.expect("stop");
    let status = fixture.containers.status(&id).expect("status");
    assert_eq!(status.state, api::ContainerState::ContainerExited as i32);
    assert_eq!(status.exit_code, 137);
    assert_eq!(status.reason, "Error");
    assert!(status.finished_at >= status.started_at);
    // Stopping again is fine.
    fixture.containers.stop(&id, Duration::from_secs(1)).await.expect("stop again");

    fixture.containers.remove(&id).await.expect("remove");
    assert_eq!(grpc(fixture.containers.status(&id).expect_err("gone")).code(), tonic::Code::NotFound);
    fixture.containers.remove(&id).await.expect("remove again");
    assert!(!fixture.runtime_state_dir(handler, &id).exists(), "runtime state left");
    assert!(!fixture.root.path().join("containers").join(&id).exists(), "container dir left");
    eventually("the monitor's end", || process_gone(monitor)).await;
    assert!(process_gone(init), "the init is still there");
    assert!(!Path::new(&format!("/sys/fs/cgroup/memory/keel-shim-test-{id}")).exists(), "cgroup left");

    let kinds: Vec<_> = (0..4).map(|_| next_event(&mut events)).collect();
    assert_eq!(
        kinds,
        vec![
            api::ContainerEventType::ContainerCreatedEvent,
            api::ContainerEventType::ContainerStartedEvent,
            api::ContainerEventType::ContainerStoppedEvent,
            api::ContainerEventType::ContainerDeletedEvent,
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_under_runc() {
    lifecycle("runc").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_under_crun() {
    lifecycle("crun").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn logs_are_in_cri_format_with_partial_lines_and_exit_codes_are_kept() {
    let mut fixture = Fixture::new();
    let script = "echo one; echo two >&2; busybox head -c 20000 /dev/zero | busybox tr '\\0' x; echo; \
                  printf tail; exit 3";
    let request = fixture.request("runc", &["sh", "-c", script]);
    let (id, log) = (request.id.clone(), request.log_path.clone().expect("log"));
    fixture.containers.create(request).await.expect("create");
    fixture.containers.start(&id).await.expect("start");
    let status = wait_exited(&fixture.containers, &id).await;
    assert_eq!(status.exit_code, 3);
    assert_eq!(status.reason, "Error");
    let lines = log_lines(&log);
    let stdout: Vec<_> = lines.iter().filter(|(stream, _, _)| stream == "stdout").collect();
    assert_eq!(stdout[0].1, "F");
    assert_eq!(stdout[0].2, "one");
    assert_eq!((stdout[1].1.as_str(), stdout[1].2.len()), ("P", 16 * 1024));
    assert_eq!((stdout[2].1.as_str(), stdout[2].2.len()), ("F", 20000 - 16 * 1024));
    assert_eq!((stdout[3].1.as_str(), stdout[3].2.as_str()), ("F", "tail"));
    assert!(lines.iter().any(|line| line == &("stderr".to_owned(), "F".to_owned(), "two".to_owned())));

    let request = fixture.request("runc", &["true"]);
    let id = request.id.clone();
    fixture.containers.create(request).await.expect("create");
    fixture.containers.start(&id).await.expect("start");
    let status = wait_exited(&fixture.containers, &id).await;
    assert_eq!((status.exit_code, status.reason.as_str()), (0, "Completed"));
    // Starting an exited container is refused.
    let error = fixture.containers.start(&id).await.expect_err("start of an exited container");
    assert_eq!(grpc(error).code(), tonic::Code::FailedPrecondition);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_log_is_reopened_after_rotation() {
    let mut fixture = Fixture::new();
    let request = fixture
        .request("runc", &["sh", "-c", "i=0; while true; do echo line$i; i=$((i+1)); sleep 0.05; done"]);
    let (id, log) = (request.id.clone(), request.log_path.clone().expect("log"));
    fixture.containers.create(request).await.expect("create");
    fixture.containers.start(&id).await.expect("start");
    eventually("a line", || !log_lines(&log).is_empty()).await;
    let rotated = log.with_extension("log.1");
    std::fs::rename(&log, &rotated).expect("rotate");
    fixture.containers.reopen_log(&id).await.expect("reopen");
    assert!(log.exists(), "the log is there again at once");
    eventually("a line in the new log", || !log_lines(&log).is_empty()).await;
    assert!(!log_lines(&rotated).is_empty());
    fixture.containers.remove(&id).await.expect("remove");
    let error = fixture.containers.reopen_log(&id).await.expect_err("reopen after remove");
    assert_eq!(grpc(error).code(), tonic::Code::NotFound);
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_sync_returns_output_and_exit_code_and_times_out() {
    let mut fixture = Fixture::new();
    let request = fixture.request("runc", &["sh", "-c", "while true; do sleep 1; done"]);
    let id = request.id.clone();
    fixture.containers.create(request).await.expect("create");
    let error = fixture
        .containers
        .exec_sync(&id, &["true".to_owned()], Duration::ZERO)
        .await
        .expect_err("not running");
    assert_eq!(grpc(error).code(), tonic::Code::FailedPrecondition);
    fixture.containers.start(&id).await.expect("start");
    let cmd: Vec<String> = ["sh", "-c", "echo out; echo err >&2; exit 7"].map(str::to_owned).to_vec();
    let (out, err, code) = fixture.containers.exec_sync(&id, &cmd, Duration::ZERO).await.expect("exec");
    assert_eq!((out.as_slice(), err.as_slice(), code), (&b"out\n"[..], &b"err\n"[..], 7));
    let cmd: Vec<String> = ["sleep", "1000"].map(str::to_owned).to_vec();
    let error =
        fixture.containers.exec_sync(&id, &cmd, Duration::from_millis(300)).await.expect_err("timeout");
    assert_eq!(grpc(error).code(), tonic::Code::DeadlineExceeded);
    // The timed-out process is gone: only the init's loop runs.
    let ps = ["sh", "-c", "ps -o comm | grep -c 'sleep 1000' || true"].map(str::to_owned).to_vec();
    let (out, _, _) =
        fixture.containers.exec_sync(&id, &["ps".to_owned()], Duration::ZERO).await.expect("ps");
    let _ = ps;
    assert!(!String::from_utf8_lossy(&out).contains("sleep 1000"), "{}", String::from_utf8_lossy(&out));
    let error = fixture.containers.exec_sync(&id, &["/no/such".to_owned()], Duration::ZERO).await;
    assert!(error.is_err() || error.is_ok_and(|(_, _, code)| code != 0));
    fixture.containers.remove(&id).await.expect("remove");
}

#[tokio::test(flavor = "multi_thread")]
async fn attach_reads_output_and_writes_stdin() {
    let mut fixture = Fixture::new();
    let mut request = fixture.request("runc", &["sh", "-c", "read line; echo got:$line; echo bye >&2"]);
    request.stdin = true;
    request.stdin_once = true;
    let id = request.id.clone();
    fixture.containers.create(request).await.expect("create");
    fixture.containers.start(&id).await.expect("start");
    let (out_writer, mut out_reader) = tokio::io::duplex(64 * 1024);
    let (err_writer, mut err_reader) = tokio::io::duplex(64 * 1024);
    let io = Streams {
        stdin: Some(Box::new(std::io::Cursor::new(b"hello\n".to_vec()))),
        stdout: Some(Box::new(out_writer)),
        stderr: Some(Box::new(err_writer)),
        resize: None,
    };
    fixture.containers.attach(&id, io).await.expect("attach");
    let (mut out, mut err) = (String::new(), String::new());
    out_reader.read_to_string(&mut out).await.expect("stdout");
    err_reader.read_to_string(&mut err).await.expect("stderr");
    assert_eq!(out, "got:hello\n");
    assert_eq!(err, "bye\n");
    let status = wait_exited(&fixture.containers, &id).await;
    assert_eq!(status.exit_code, 0);
    fixture.containers.remove(&id).await.expect("remove");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_keel_shim_readopts_a_running_container() {
    let mut fixture = Fixture::new();
    let request = fixture
        .request("runc", &["sh", "-c", "trap 'exit 5' TERM; echo ready; while true; do sleep 0.1; done"]);
    let id = request.id.clone();
    fixture.containers.create(request).await.expect("create");
    let log = request_log(&fixture, &id);
    fixture.containers.start(&id).await.expect("start");
    // TERM is trapped once the shell said so (a PID 1 ignores signals it has no handler for).
    eventually("ready in the log", || log_lines(&log).iter().any(|(_, _, text)| text == "ready")).await;
    fixture.reopen();
    let mut events = fixture.containers.events();
    assert_eq!(state(&fixture.containers, &id), api::ContainerState::ContainerRunning);
    fixture.containers.stop(&id, Duration::from_secs(60)).await.expect("stop");
    let status = fixture.containers.status(&id).expect("status");
    assert_eq!((status.exit_code, status.reason.as_str()), (5, "Error"));
    assert_eq!(next_event(&mut events), api::ContainerEventType::ContainerStoppedEvent);
    // And once more: an exited record stays exited.
    fixture.reopen();
    assert_eq!(state(&fixture.containers, &id), api::ContainerState::ContainerExited);
    fixture.containers.remove(&id).await.expect("remove");
    assert!(!fixture.runtime_state_dir("runc", &id).exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_creates_leave_nothing_behind() {
    let mut fixture = Fixture::new();
    let request = fixture.request("nope", &["true"]);
    let error = fixture.containers.create(request).await.expect_err("unknown handler");
    assert_eq!(grpc(error).code(), tonic::Code::InvalidArgument);
    let request = fixture.request("runc", &["/no/such/binary"]);
    let id = request.id.clone();
    // runc checks the binary at create.
    let error = fixture.containers.create(request).await.expect_err("missing binary");
    let message = error.to_string();
    assert!(message.contains("no such file") || message.contains("not found"), "{error:?}");
    assert!(!fixture.root.path().join("containers").join(&id).exists());
    assert!(!fixture.runtime_state_dir("runc", &id).exists());
    assert!(fixture.containers.list(None).is_empty());
}

fn memory_limit(bytes: i64) -> oci_spec::runtime::LinuxResources {
    let memory = oci_spec::runtime::LinuxMemoryBuilder::default().limit(bytes).build().expect("memory");
    oci_spec::runtime::LinuxResourcesBuilder::default().memory(memory).build().expect("resources")
}

#[tokio::test(flavor = "multi_thread")]
async fn an_oom_kill_is_reported_and_resources_update() {
    let mut fixture = Fixture::new();
    let mut request = fixture.request("runc", &["busybox", "tail", "-c", "400000000", "/dev/zero"]);
    if let Some(linux) = request.spec.linux_mut() {
        linux.set_resources(Some(memory_limit(32 << 20)));
    }
    let id = request.id.clone();
    fixture.containers.create(request).await.expect("create");
    fixture.containers.start(&id).await.expect("start");
    let status = wait_exited(&fixture.containers, &id).await;
    assert_eq!((status.exit_code, status.reason.as_str()), (137, "OOMKilled"));
    fixture.containers.remove(&id).await.expect("remove");

    let request = fixture.request("runc", &["sh", "-c", "while true; do sleep 1; done"]);
    let id = request.id.clone();
    fixture.containers.create(request).await.expect("create");
    fixture.containers.start(&id).await.expect("start");
    fixture.containers.update_resources(&id, memory_limit(64 << 20)).await.expect("update");
    let limit =
        std::fs::read_to_string(format!("/sys/fs/cgroup/memory/keel-shim-test-{id}/memory.limit_in_bytes"))
            .expect("the memory cgroup");
    assert_eq!(limit.trim(), (64u64 << 20).to_string());
    fixture.containers.remove(&id).await.expect("remove");
    let error = fixture.containers.update_resources(&id, memory_limit(64 << 20)).await.expect_err("gone");
    assert_eq!(grpc(error).code(), tonic::Code::NotFound);
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_streams_with_pipes_and_a_terminal_under_runc() {
    exec_streams("runc").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_streams_with_pipes_and_a_terminal_under_crun() {
    exec_streams("crun").await;
}

async fn exec_streams(handler: &str) {
    let mut fixture = Fixture::new();
    let request = fixture.request(handler, &["sh", "-c", "while true; do sleep 1; done"]);
    let id = request.id.clone();
    fixture.containers.create(request).await.expect("create");
    fixture.containers.start(&id).await.expect("start");

    let (out_writer, mut out_reader) = tokio::io::duplex(64 * 1024);
    let (err_writer, mut err_reader) = tokio::io::duplex(64 * 1024);
    let io = Streams {
        stdin: Some(Box::new(std::io::Cursor::new(b"abc".to_vec()))),
        stdout: Some(Box::new(out_writer)),
        stderr: Some(Box::new(err_writer)),
        resize: None,
    };
    let cmd: Vec<String> = ["sh", "-c", "cat; echo e >&2; exit 2"].map(str::to_owned).to_vec();
    let code = fixture.containers.exec(&id, &cmd, false, io).await.expect("exec");
    let (mut out, mut err) = (String::new(), String::new());
    out_reader.read_to_string(&mut out).await.expect("stdout");
    err_reader.read_to_string(&mut err).await.expect("stderr");
    assert_eq!((out.as_str(), err.as_str(), code), ("abc", "e\n", 2));

    let (out_writer, mut out_reader) = tokio::io::duplex(64 * 1024);
    let io = Streams { stdout: Some(Box::new(out_writer)), ..Default::default() };
    let cmd: Vec<String> = ["sh", "-c", "[ -t 1 ] && echo a-tty; exit 4"].map(str::to_owned).to_vec();
    let code = fixture.containers.exec(&id, &cmd, true, io).await.expect("exec with a tty");
    let mut out = String::new();
    out_reader.read_to_string(&mut out).await.expect("stdout");
    assert_eq!((out.trim(), code), ("a-tty", 4));

    // A terminal exec follows resizes.
    let (stdin_writer, stdin_reader) = tokio::io::duplex(1024);
    let (out_writer, out_reader) = tokio::io::duplex(64 * 1024);
    let (resize, resizes) = tokio::sync::mpsc::channel(4);
    let io = Streams {
        stdin: Some(Box::new(stdin_reader)),
        stdout: Some(Box::new(out_writer)),
        stderr: None,
        resize: Some(resizes),
    };
    let (containers, exec_id) = (fixture.containers.clone(), id.clone());
    let cmd: Vec<String> = ["sh", "-c", TERMINAL_LOOP].map(str::to_owned).to_vec();
    let exec = tokio::spawn(async move { containers.exec(&exec_id, &cmd, true, io).await });
    resize.send(keel_shim::container::TerminalSize { width: 100, height: 30 }).await.expect("resize");
    let (mut stdin, mut out) = (stdin_writer, out_reader);
    resize_seen(&mut stdin, &mut out).await;
    assert_eq!(exec.await.expect("join").expect("exec"), 0);
    fixture.containers.remove(&id).await.expect("remove");
}

#[tokio::test(flavor = "multi_thread")]
async fn attach_to_a_terminal_follows_resizes_under_runc() {
    attach_to_a_terminal("runc").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn attach_to_a_terminal_follows_resizes_under_crun() {
    attach_to_a_terminal("crun").await;
}

/// Asks the shell loop of [`TERMINAL_LOOP`] for its terminal's size until it answers `30 100`, then
/// makes it exit.
async fn resize_seen(stdin: &mut tokio::io::DuplexStream, out: &mut tokio::io::DuplexStream) {
    use tokio::io::AsyncWriteExt;
    let mut seen = String::new();
    let mut buf = vec![0u8; 4096];
    // Ask every 100 ms (the shell may not run yet, and a resize may land after a first answer); give up
    // after a minute.
    let give_up = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut ask = tokio::time::interval(Duration::from_millis(100));
    while !seen.contains("30 100") && tokio::time::Instant::now() < give_up {
        tokio::select! {
            _ = ask.tick() => stdin.write_all(b"s\n").await.expect("stdin"),
            read = out.read(&mut buf) => {
                let n = read.expect("output");
                assert!(n > 0, "the output ended: {seen:?}");
                seen.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }
    }
    assert!(seen.contains("30 100"), "{seen:?}");
    stdin.write_all(b"q\n").await.expect("stdin");
}

/// A shell that prints its terminal's size for every line and exits on `q`.
const TERMINAL_LOOP: &str = "while read x; do [ \"$x\" = q ] && exit 0; busybox stty size; done";

async fn attach_to_a_terminal(handler: &str) {
    let mut fixture = Fixture::new();
    let mut request = fixture.request(handler, &["sh", "-c", TERMINAL_LOOP]);
    request.tty = true;
    request.stdin = true;
    let (id, log) = (request.id.clone(), request.log_path.clone().expect("log"));
    fixture.containers.create(request).await.expect("create");
    fixture.containers.start(&id).await.expect("start");
    let (mut stdin, stdin_reader) = tokio::io::duplex(1024);
    let (out_writer, mut out_reader) = tokio::io::duplex(64 * 1024);
    let (resize, resizes) = tokio::sync::mpsc::channel(4);
    let io = Streams {
        stdin: Some(Box::new(stdin_reader)),
        stdout: Some(Box::new(out_writer)),
        stderr: None,
        resize: Some(resizes),
    };
    let containers = fixture.containers.clone();
    let attach_id = id.clone();
    let attached = tokio::spawn(async move { containers.attach(&attach_id, io).await });
    resize.send(keel_shim::container::TerminalSize { width: 100, height: 30 }).await.expect("resize");
    resize_seen(&mut stdin, &mut out_reader).await;
    attached.await.expect("join").expect("attach");
    let status = wait_exited(&fixture.containers, &id).await;
    assert_eq!(status.exit_code, 0);
    // A terminal's output is logged as stdout.
    assert!(log_lines(&log).iter().any(|(stream, _, text)| stream == "stdout" && text == "30 100"));
    fixture.containers.remove(&id).await.expect("remove");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_sharing_a_pid_namespace_ends_with_its_init() {
    let mut fixture = Fixture::new();
    let request = fixture.request("runc", &["sh", "-c", "while true; do sleep 1; done"]);
    let pod = request.id.clone();
    fixture.containers.create(request).await.expect("create");
    fixture.containers.start(&pod).await.expect("start");
    let pod_init: i32 =
        std::fs::read_to_string(fixture.root.path().join("containers").join(&pod).join("init.pid"))
            .expect("pid")
            .trim()
            .parse()
            .expect("pid");

    // A second container in the first one's PID namespace leaves a child behind that holds its
    // stdout: the monitor kills it when the init exits.
    let mut request = fixture.request("runc", &["sh", "-c", "busybox sleep 1234 & echo started; exit 0"]);
    if let Some(linux) = request.spec.linux_mut() {
        let mut namespaces = linux.namespaces().clone().unwrap_or_default();
        for ns in &mut namespaces {
            if ns.typ() == oci_spec::runtime::LinuxNamespaceType::Pid {
                ns.set_path(Some(PathBuf::from(format!("/proc/{pod_init}/ns/pid"))));
            }
        }
        linux.set_namespaces(Some(namespaces));
    }
    let id = request.id.clone();
    fixture.containers.create(request).await.expect("create");
    fixture.containers.start(&id).await.expect("start");
    let status = wait_exited(&fixture.containers, &id).await;
    assert_eq!((status.exit_code, status.reason.as_str()), (0, "Completed"));
    let (out, _, _) =
        fixture.containers.exec_sync(&pod, &["ps".to_owned()], Duration::ZERO).await.expect("ps");
    assert!(!String::from_utf8_lossy(&out).contains("sleep 1234"), "{}", String::from_utf8_lossy(&out));
    fixture.containers.remove(&id).await.expect("remove");
    fixture.containers.remove(&pod).await.expect("remove");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exit_while_keel_shim_is_away_is_read_from_the_exit_file() {
    let mut fixture = Fixture::new();
    let request = fixture.request("runc", &["sh", "-c", "while true; do sleep 1; done"]);
    let id = request.id.clone();
    fixture.containers.create(request).await.expect("create");
    fixture.containers.start(&id).await.expect("start");
    // "keel-shim is away": the Containers that watched the container is gone (one elsewhere replaces
    // it), and the container is killed meanwhile.
    let elsewhere = fixture.root.path().join("elsewhere");
    let old = std::mem::replace(
        &mut fixture.containers,
        Containers::open_with_monitor(&elsewhere, &runtimes(), monitor_binary()).expect("open"),
    );
    drop(old);
    let state = fixture.root.path().join("runtime/runc");
    let status = std::process::Command::new(RUNC)
        .arg("--root")
        .arg(&state)
        .args(["kill", &id, "KILL"])
        .status()
        .expect("runc kill");
    assert!(status.success());
    let dir = fixture.root.path().join("containers").join(&id);
    eventually("the exit file", || dir.join("exit.json").exists()).await;
    let record = std::fs::read_to_string(dir.join("container.json")).expect("record");
    assert!(record.contains("\"Running\""), "nobody updated the record meanwhile");
    fixture.reopen();
    let status = fixture.containers.status(&id).expect("status");
    assert_eq!(status.state, api::ContainerState::ContainerExited as i32);
    assert_eq!((status.exit_code, status.reason.as_str()), (137, "Error"));
    assert!(status.finished_at > 0);
    fixture.containers.remove(&id).await.expect("remove");
    assert!(!fixture.runtime_state_dir("runc", &id).exists());
}

/// The environment variable that makes [`keel_shim_process_that_creates_a_container`] run.
const CHILD_ENV: &str = "KEEL_SHIM_TEST_CHILD";

/// Run only as a child of [`a_container_outlives_the_keel_shim_process_that_made_it`]: creates and starts
/// a container (`KEEL_SHIM_TEST_CHILD=root,rootfs,id`), then exits, leaving its monitor behind.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "run by a_container_outlives_the_keel_shim_process_that_made_it"]
async fn keel_shim_process_that_creates_a_container() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let parts: Vec<&str> = spec.split(',').collect();
    let (root, rootfs, id) = (Path::new(parts[0]), Path::new(parts[1]), parts[2]);
    let containers = Containers::open_with_monitor(root, &runtimes(), monitor_binary()).expect("open");
    let args = ["sh", "-c", "trap 'exit 6' TERM; echo ready; while true; do sleep 0.1; done"];
    containers.create(request_for(root, rootfs, id, "runc", &args)).await.expect("create");
    containers.start(id).await.expect("start");
    let log = root.join("logs").join(format!("{id}.log"));
    eventually("ready in the log", || log_lines(&log).iter().any(|(_, _, text)| text == "ready")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_outlives_the_keel_shim_process_that_made_it() {
    let mut fixture = Fixture::new();
    let id = format!("{:016x}{:08x}", rand_u64(), std::process::id());
    fixture.created.push(("runc".to_owned(), id.clone()));
    // libtest names a test by its path in the binary, without the crate's name.
    let test = concat!(module_path!(), "::keel_shim_process_that_creates_a_container");
    let test = test.split_once("::").map_or(test, |(_, path)| path);
    let child = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", test, "--ignored", "--nocapture"])
        .env(CHILD_ENV, format!("{},{},{id}", fixture.root.path().display(), fixture.rootfs.display()))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("the child keel-shim");
    assert!(child.success(), "the child failed");
    fixture.reopen();
    assert_eq!(state(&fixture.containers, &id), api::ContainerState::ContainerRunning);
    let mut events = fixture.containers.events();
    fixture.containers.stop(&id, Duration::from_secs(60)).await.expect("stop");
    let status = fixture.containers.status(&id).expect("status");
    assert_eq!((status.exit_code, status.reason.as_str()), (6, "Error"));
    assert_eq!(next_event(&mut events), api::ContainerEventType::ContainerStoppedEvent);
    fixture.containers.remove(&id).await.expect("remove");
    assert!(!fixture.runtime_state_dir("runc", &id).exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_cut_short_by_a_crash_is_cleaned_up_at_open() {
    let mut fixture = Fixture::new();
    // What a keel-shim that died inside create leaves: a created container, no record.
    let request = fixture.request("runc", &["sh", "-c", "while true; do sleep 1; done"]);
    let id = request.id.clone();
    fixture.containers.create(request).await.expect("create");
    let dir = fixture.root.path().join("containers").join(&id);
    let monitor: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("container.json")).expect("record")).expect("json");
    let monitor = monitor["monitor_pid"].as_i64().expect("pid") as i32;
    std::fs::remove_file(dir.join("container.json")).expect("remove the record");
    fixture.reopen();
    assert!(!dir.exists(), "the directory is left");
    assert!(!fixture.runtime_state_dir("runc", &id).exists(), "the runtime still knows it");
    eventually("the monitor's end", || process_gone(monitor)).await;
    assert!(fixture.containers.list(None).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_sends_the_image_stop_signal() {
    let mut fixture = Fixture::new();
    let script = "trap 'exit 3' QUIT; trap '' TERM; echo ready; while true; do sleep 0.1; done";
    let mut request = fixture.request("runc", &["sh", "-c", script]);
    request.stop_signal = Some("SIGQUIT".to_owned());
    let (id, log) = (request.id.clone(), request.log_path.clone().expect("log"));
    fixture.containers.create(request).await.expect("create");
    // Stopping a created container leaves it as it is (containerd 1.6).
    fixture.containers.stop(&id, Duration::from_secs(1)).await.expect("stop of a created container");
    assert_eq!(state(&fixture.containers, &id), api::ContainerState::ContainerCreated);
    fixture.containers.start(&id).await.expect("start");
    eventually("ready in the log", || log_lines(&log).iter().any(|(_, _, text)| text == "ready")).await;
    fixture.containers.stop(&id, Duration::from_secs(60)).await.expect("stop");
    let status = fixture.containers.status(&id).expect("status");
    assert_eq!((status.exit_code, status.reason.as_str()), (3, "Error"));
    let by_sandbox = api::ContainerFilter { pod_sandbox_id: "sandbox-1".to_owned(), ..Default::default() };
    assert_eq!(fixture.containers.list(Some(&by_sandbox)).len(), 1);
    let other_sandbox = api::ContainerFilter { pod_sandbox_id: "other".to_owned(), ..Default::default() };
    assert!(fixture.containers.list(Some(&other_sandbox)).is_empty());
    fixture.containers.remove(&id).await.expect("remove");
}
