//! The lifecycle over a recording fake of the OCI runtime ([`crate::oci::fake`]) and a fake monitor
//! (a shell script speaking the monitor's protocol), so the logic runs anywhere, without root: the
//! signals of a stop, the refusals, the cleanup after a failed create or start, exec's outcomes.
//! The real runtime, the real monitor, terminals and attach are tested as root in
//! `tests/containers.rs`.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::oci::fake::{self, Call, Op, RecordingRuntime};

#[test]
fn stop_signals_parse_as_images_spell_them() {
    assert_eq!(parse_signal("SIGQUIT"), Some(libc::SIGQUIT));
    assert_eq!(parse_signal("quit"), Some(libc::SIGQUIT));
    assert_eq!(parse_signal("9"), Some(9));
    assert_eq!(parse_signal("NOPE"), None);
}

/// keel-shim's container monitor, faked (the real one: [`crate::monitor`]). It reports `created <its
/// pid>`, then the "container" runs until its exit file appears: the tests write it where the runtime
/// would make the container's init die. Ids starting with `fail-` get an error report instead, ids
/// starting with `mute-` no report at all (only a line in the monitor's log). It gives up once the
/// container's bundle is gone (the test's directory removed) or after a minute.
const FAKE_MONITOR: &str = r#"#!/bin/sh
while [ $# -gt 0 ]; do
    case "$1" in
        --id) id=$2; shift ;;
        --bundle) bundle=$2; shift ;;
        --exit-file) exit_file=$2; shift ;;
    esac
    shift
done
case "$id" in
    fail-*) echo "error runc create failed: oops"; exit 1 ;;
    mute-*) echo "the monitor died" >&2; exit 1 ;;
esac
echo "created $$"
n=0
while [ ! -e "$exit_file" ] && [ -d "$bundle" ] && [ "$n" -lt 3000 ]; do
    sleep 0.02
    n=$((n + 1))
done
"#;

/// The fake monitor's script, written once beside the test binary (named by a hash of its text, so
/// later runs reuse it), or in a private temporary directory where that cannot be written. A script
/// just written can be "busy" for a moment (another thread's fork inherited the descriptor that
/// wrote it): it is run once, until it runs, before any test uses it.
fn fake_monitor() -> &'static Path {
    static SCRIPT: OnceLock<PathBuf> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        use sha2::Digest as _;
        let hash = crate::image::hex(&sha2::Sha256::digest(FAKE_MONITOR.as_bytes())[..8]);
        let name = format!("keel-shim-fake-monitor-{hash}.sh");
        let beside_the_binary = std::env::current_exe().unwrap().parent().unwrap().join(&name);
        let path = if beside_the_binary.exists() || write_script(&beside_the_binary).is_ok() {
            beside_the_binary
        } else {
            let path = tempfile::tempdir().unwrap().keep().join(&name);
            write_script(&path).unwrap();
            path
        };
        for _ in 0..100 {
            match std::process::Command::new(&path).stdout(std::process::Stdio::null()).status() {
                Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                other => {
                    other.unwrap();
                    break;
                }
            }
        }
        path
    })
}

/// Writes [`FAKE_MONITOR`] at `path`, executable, whole or not at all.
fn write_script(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension(format!("{}.tmp", std::process::id()));
    std::fs::write(&tmp, FAKE_MONITOR)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&tmp, path)
}

/// Containers over a fake runtime (handler `runc`, binary `/fake/runc`) and the fake monitor.
struct Fixture {
    dir: tempfile::TempDir,
    fake: Arc<RecordingRuntime>,
    containers: Containers,
}

const FAKE_RUNC: &str = "/fake/runc";

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let fake = RecordingRuntime::new();
        let containers = Fixture::open(dir.path(), &fake);
        Fixture { dir, fake, containers }
    }

    fn open(root: &Path, fake: &Arc<RecordingRuntime>) -> Containers {
        let runtimes = BTreeMap::from([(DEFAULT_HANDLER.to_owned(), PathBuf::from(FAKE_RUNC))]);
        Containers::open_with_runtime(root, &runtimes, fake_monitor(), fake.factory()).unwrap()
    }

    fn container_dir(&self, id: &str) -> PathBuf {
        self.dir.path().join("containers").join(id)
    }

    /// A request for container `id` (its own PID namespace, the default spec's).
    fn request(&self, id: &str) -> CreateRequest {
        CreateRequest {
            id: id.to_owned(),
            sandbox_id: "pod".to_owned(),
            metadata: api::ContainerMetadata { name: format!("name-{id}"), attempt: 0 },
            image: api::ImageSpec { image: "busybox".to_owned(), ..Default::default() },
            image_ref: "sha256:feed".to_owned(),
            image_id: "sha256:feed".to_owned(),
            labels: HashMap::new(),
            annotations: HashMap::new(),
            log_path: None,
            spec: oci_spec::runtime::Spec::default(),
            handler: String::new(),
            tty: false,
            stdin: false,
            stdin_once: false,
            rootfs_mounted_at: self.container_dir(id).join("bundle/rootfs"),
            mounts: Vec::new(),
            stop_signal: None,
        }
    }

    /// The container's init "dies" (its exit file written, as the monitor writes it) on the calls
    /// `dies` picks: a signal's exit code is 128 + the signal, a forced delete's 137.
    fn exit_on(&self, dies: impl Fn(&Call) -> bool + Send + Sync + 'static) {
        let containers = self.dir.path().join("containers");
        self.fake.on_call(move |call| {
            if !dies(call) {
                return;
            }
            let (id, exit_code) = match call {
                Call::Kill { id, signal, .. } => (id, 128 + signal),
                Call::Delete { id, .. } => (id, 137),
                _ => return,
            };
            write_exit(&containers.join(id), exit_code);
        });
    }

    /// Creates and starts container `id` from `request`.
    async fn running(&self, request: CreateRequest) -> String {
        let id = request.id.clone();
        self.containers.create(request).await.unwrap();
        self.containers.start(&id).await.unwrap();
        assert_eq!(self.state(&id), State::Running);
        id
    }

    fn state(&self, id: &str) -> State {
        self.containers.entry(id).unwrap().record().state
    }
}

/// Writes a container's exit file as the monitor does (whole, or not at all).
fn write_exit(dir: &Path, exit_code: i32) {
    let exit = ExitRecord {
        exit_code,
        signal: None,
        finished_at: String::new(),
        finished_at_ns: 1,
        reason: "Error".to_owned(),
    };
    let tmp = dir.join("exit.json.tmp");
    if std::fs::write(&tmp, serde_json::to_vec(&exit).unwrap()).is_ok() {
        let _ = std::fs::rename(tmp, dir.join("exit.json"));
    }
}

fn kill(id: &str, signal: i32, all: bool) -> Call {
    Call::Kill { id: id.to_owned(), signal, all }
}

fn start(id: &str) -> Call {
    Call::Start { id: id.to_owned() }
}

fn delete(id: &str) -> Call {
    Call::Delete { id: id.to_owned(), force: true }
}

fn event_kinds(
    events: &mut broadcast::Receiver<api::ContainerEventResponse>,
) -> Vec<api::ContainerEventType> {
    std::iter::from_fn(|| events.try_recv().ok())
        .map(|event| api::ContainerEventType::try_from(event.container_event_type).unwrap())
        .collect()
}

#[tokio::test]
async fn stop_sends_the_stop_signal_then_sigkill_after_the_timeout() {
    let fixture = Fixture::new();
    let mut events = fixture.containers.events();
    // The container ignores its stop signal; SIGKILL ends it.
    fixture.exit_on(|call| matches!(call, Call::Kill { signal: libc::SIGKILL, .. }));
    let mut request = fixture.request("ignores-term");
    request.stop_signal = Some("SIGQUIT".to_owned());
    let id = fixture.running(request).await;

    fixture.containers.stop(&id, Duration::from_millis(100)).await.unwrap();

    // The image's stop signal, then SIGKILL, to the init only (the container has its own PID
    // namespace: its init's death ends the rest).
    assert_eq!(
        fixture.fake.calls(),
        [start(&id), kill(&id, libc::SIGQUIT, false), kill(&id, libc::SIGKILL, false)]
    );
    let status = fixture.containers.status(&id).unwrap();
    assert_eq!(status.state, api::ContainerState::ContainerExited as i32);
    assert_eq!((status.exit_code, status.reason.as_str()), (137, "Error"));
    use api::ContainerEventType as E;
    assert_eq!(
        event_kinds(&mut events),
        [E::ContainerCreatedEvent, E::ContainerStartedEvent, E::ContainerStoppedEvent]
    );
    // An exited container is left as it is; an unknown one is stopped already.
    fixture.containers.stop(&id, Duration::from_secs(1)).await.unwrap();
    fixture.containers.stop("unknown", Duration::from_secs(1)).await.unwrap();
    assert_eq!(fixture.fake.calls().len(), 3);
}

#[tokio::test]
async fn stop_ends_with_the_stop_signal_when_the_container_obeys_it() {
    let fixture = Fixture::new();
    fixture.exit_on(|call| matches!(call, Call::Kill { .. }));
    let id = fixture.running(fixture.request("obeys-term")).await;
    fixture.containers.stop(&id, Duration::from_secs(60)).await.unwrap();
    assert_eq!(fixture.fake.calls(), [start(&id), kill(&id, libc::SIGTERM, false)]);
    assert_eq!(fixture.containers.status(&id).unwrap().exit_code, 128 + libc::SIGTERM);
}

#[tokio::test]
async fn stop_without_a_timeout_kills_every_process_of_a_shared_pid_namespace() {
    let fixture = Fixture::new();
    fixture.exit_on(|call| matches!(call, Call::Kill { .. }));
    let mut request = fixture.request("shares-pid");
    // No PID namespace of its own: the host's (or, with a path, the pod's).
    if let Some(linux) = request.spec.linux_mut() {
        let namespaces = linux.namespaces().clone().unwrap_or_default();
        let kept = namespaces.into_iter().filter(|ns| ns.typ() != oci_spec::runtime::LinuxNamespaceType::Pid);
        linux.set_namespaces(Some(kept.collect()));
    }
    let id = fixture.running(request).await;
    fixture.containers.stop(&id, Duration::ZERO).await.unwrap();
    assert_eq!(fixture.fake.calls(), [start(&id), kill(&id, libc::SIGKILL, true)]);
}

#[tokio::test]
async fn remove_kills_a_running_container_then_deletes_it() {
    let fixture = Fixture::new();
    fixture.exit_on(|call| matches!(call, Call::Kill { signal: libc::SIGKILL, .. }));
    let id = fixture.running(fixture.request("removed")).await;
    let mut events = fixture.containers.events();

    fixture.containers.remove(&id).await.unwrap();

    assert_eq!(fixture.fake.calls(), [start(&id), kill(&id, libc::SIGKILL, false), delete(&id)]);
    assert!(!fixture.container_dir(&id).exists());
    assert!(matches!(fixture.containers.status(&id), Err(Error::NotFound(gone)) if gone == id));
    use api::ContainerEventType as E;
    assert_eq!(event_kinds(&mut events), [E::ContainerStoppedEvent, E::ContainerDeletedEvent]);
    // Removing it again, or an unknown container, succeeds without asking the runtime.
    fixture.containers.remove(&id).await.unwrap();
    assert_eq!(fixture.fake.calls().len(), 3);
}

#[tokio::test]
async fn a_created_container_is_removed_through_the_runtime_delete() {
    let fixture = Fixture::new();
    // A forced delete kills the init that waits in the runtime; its monitor then writes its exit.
    fixture.exit_on(|call| matches!(call, Call::Delete { .. }));
    let id = "created-only".to_owned();
    fixture.containers.create(fixture.request(&id)).await.unwrap();
    fixture.containers.remove(&id).await.unwrap();
    assert_eq!(fixture.fake.calls(), [delete(&id)]);
    assert!(fixture.containers.list(None).is_empty());
}

#[tokio::test]
async fn a_failed_runtime_delete_keeps_the_container() {
    let fixture = Fixture::new();
    fixture.exit_on(|call| matches!(call, Call::Kill { signal: libc::SIGKILL, .. }));
    let id = fixture.running(fixture.request("undeletable")).await;
    fixture.fake.fail_next(Op::Delete, "device or resource busy");
    let error = fixture.containers.remove(&id).await.unwrap_err();
    assert_eq!(error.to_string(), "/fake/runc delete: device or resource busy");
    assert!(matches!(error, Error::Runtime(ref e) if !e.is_not_found()), "{error:?}");
    assert!(fixture.container_dir(&id).exists());
    assert_eq!(fixture.state(&id), State::Exited);
    // The next attempt goes through.
    fixture.containers.remove(&id).await.unwrap();
    assert!(!fixture.container_dir(&id).exists());
}

#[tokio::test]
async fn verbs_refuse_containers_in_the_wrong_state() {
    let fixture = Fixture::new();
    fixture.exit_on(|call| matches!(call, Call::Kill { .. }));
    let created = "created".to_owned();
    fixture.containers.create(fixture.request(&created)).await.unwrap();
    let running = fixture.running(fixture.request("running")).await;
    let calls = fixture.fake.calls().len();

    let cmd = ["true".to_owned()];
    assert!(matches!(
        fixture.containers.exec_sync(&created, &cmd, Duration::ZERO).await,
        Err(Error::NotRunning { state: State::Created, .. })
    ));
    assert!(matches!(fixture.containers.reopen_log(&created).await, Err(Error::NotRunning { .. })));
    assert!(matches!(
        fixture.containers.start(&running).await,
        Err(Error::NotCreated { state: State::Running, .. })
    ));
    assert!(matches!(
        fixture.containers.exec_sync(&running, &[], Duration::ZERO).await,
        Err(Error::EmptyCommand)
    ));
    fixture.containers.stop(&running, Duration::ZERO).await.unwrap();
    let resources = oci_spec::runtime::LinuxResources::default();
    assert!(matches!(
        fixture.containers.update_resources(&running, resources).await,
        Err(Error::Exited(id)) if id == running
    ));
    assert!(matches!(fixture.containers.status("nope"), Err(Error::NotFound(_))));
    // Refused before the runtime is asked anything (the stop's SIGKILL aside).
    assert_eq!(fixture.fake.calls()[calls..], [kill(&running, libc::SIGKILL, false)]);
}

#[tokio::test]
async fn create_refuses_bad_ids_taken_ids_and_unknown_handlers() {
    let fixture = Fixture::new();
    for bad in ["", "../escape", ".hidden"] {
        assert!(
            matches!(fixture.containers.create(fixture.request(bad)).await, Err(Error::InvalidId(_))),
            "{bad:?}"
        );
    }
    let mut request = fixture.request("kata-pod");
    request.handler = "kata".to_owned();
    assert!(matches!(fixture.containers.create(request).await, Err(Error::UnknownHandler(h)) if h == "kata"));
    assert!(!fixture.container_dir("kata-pod").exists());

    fixture.containers.create(fixture.request("abc1")).await.unwrap();
    assert!(matches!(fixture.containers.create(fixture.request("abc1")).await, Err(Error::AlreadyExists(_))));
    fixture.containers.create(fixture.request("abc2")).await.unwrap();
    // Ids resolve by unique prefix.
    assert!(matches!(fixture.containers.status("abc"), Err(Error::AmbiguousId(_))));
    assert_eq!(fixture.containers.status("abc2").unwrap().id, "abc2");
    assert!(fixture.fake.calls().is_empty());
}

#[tokio::test]
async fn a_failed_create_maps_the_monitors_report_and_leaves_nothing() {
    let fixture = Fixture::new();
    let id = "fail-create".to_owned();
    let error = fixture.containers.create(fixture.request(&id)).await.unwrap_err();
    assert_eq!(error.to_string(), "creating container fail-create: runc create failed: oops");
    assert!(matches!(error, Error::CreateFailed { .. }));
    // The runtime forgets whatever it made, and the directory goes.
    assert_eq!(fixture.fake.calls(), [delete(&id)]);
    assert!(!fixture.container_dir(&id).exists());

    // A monitor that dies without a report: its log is the message.
    let error = fixture.containers.create(fixture.request("mute-create")).await.unwrap_err();
    assert_eq!(error.to_string(), "creating container mute-create: the monitor died\n");
    assert!(!fixture.container_dir("mute-create").exists());
    assert!(fixture.containers.list(None).is_empty());
}

#[tokio::test]
async fn a_failed_start_records_a_start_error_and_deletes_the_init() {
    let fixture = Fixture::new();
    fixture.exit_on(|call| matches!(call, Call::Delete { .. }));
    let id = "bad-start".to_owned();
    fixture.containers.create(fixture.request(&id)).await.unwrap();
    let mut events = fixture.containers.events();
    fixture.fake.fail_next(Op::Start, "exec: \"/bin/nope\": no such file or directory");

    let error = fixture.containers.start(&id).await.unwrap_err();

    assert!(matches!(error, Error::Runtime(_)), "{error:?}");
    let message = "/fake/runc start: exec: \"/bin/nope\": no such file or directory";
    assert_eq!(error.to_string(), message);
    // As containerd: EXITED with 128 and StartError, the runtime's message kept.
    let status = fixture.containers.status(&id).unwrap();
    assert_eq!(status.state, api::ContainerState::ContainerExited as i32);
    assert_eq!(
        (status.exit_code, status.reason.as_str(), status.message.as_str()),
        (128, "StartError", message)
    );
    assert_eq!(fixture.fake.calls(), [start(&id), delete(&id)]);
    assert_eq!(event_kinds(&mut events), [api::ContainerEventType::ContainerStoppedEvent]);
}

#[tokio::test]
async fn exec_sync_returns_the_output_and_exit_code_and_tells_runtime_failures_apart() {
    let fixture = Fixture::new();
    fixture.exit_on(|call| matches!(call, Call::Kill { .. }));
    let id = fixture.running(fixture.request("execs")).await;
    let cmd = ["sh".to_owned(), "-c".to_owned(), "exit 3".to_owned()];

    // The runtime wrote the process's pid: whatever the exit status, it is the command's.
    fixture.fake.set_exec_script(r#"echo $$ > "$PID_FILE"; echo out; echo err >&2; exit 3"#);
    let (out, err, code) = fixture.containers.exec_sync(&id, &cmd, Duration::ZERO).await.unwrap();
    assert_eq!((out.as_slice(), err.as_slice(), code), (&b"out\n"[..], &b"err\n"[..], 3));
    let Some(Call::Exec { process, tty: false, .. }) = fixture.fake.calls().pop() else { panic!("no exec") };
    assert!(!process.exists(), "the process.json is removed");

    // No pid written and a failure: the runtime's own, its log's errors the message.
    fixture.fake.set_exec_script(r#"echo '{"level":"error","msg":"no such process"}' > "$LOG"; exit 1"#);
    let error = fixture.containers.exec_sync(&id, &cmd, Duration::ZERO).await.unwrap_err();
    assert_eq!(error.to_string(), "exec in container execs: no such process");
    assert!(matches!(error, Error::ExecFailed { .. }));
}

#[tokio::test]
async fn exec_sync_kills_a_command_still_running_at_its_timeout() {
    let fixture = Fixture::new();
    fixture.exit_on(|call| matches!(call, Call::Kill { .. }));
    let id = fixture.running(fixture.request("slow")).await;
    let seen = fixture.dir.path().join("seen.pid");
    fixture
        .fake
        .set_exec_script(&format!(r#"echo $$ > "$PID_FILE"; echo $$ > '{}'; exec sleep 60"#, seen.display()));
    let cmd = ["sleep".to_owned(), "60".to_owned()];

    let error = fixture.containers.exec_sync(&id, &cmd, Duration::from_millis(200)).await.unwrap_err();

    assert_eq!(error.to_string(), r#"command ["sleep", "60"] in container slow timed out after 200ms"#);
    assert!(matches!(error, Error::ExecTimeout { .. }));
    let pid: i32 = std::fs::read_to_string(&seen).unwrap().trim().parse().unwrap();
    assert!(!fake::alive(pid), "the command was killed (and reaped)");
}

#[tokio::test]
async fn exec_joins_the_streams_to_the_runtime_exec() {
    let fixture = Fixture::new();
    fixture.exit_on(|call| matches!(call, Call::Kill { .. }));
    let id = fixture.running(fixture.request("streams")).await;
    fixture.fake.set_exec_script("cat; echo done >&2; exit 4");
    let (mut client_in, stdin) = tokio::io::duplex(64);
    let (stdout, mut client_out) = tokio::io::duplex(64);
    let (stderr, mut client_err) = tokio::io::duplex(64);
    let io = Streams {
        stdin: Some(Box::new(stdin)),
        stdout: Some(Box::new(stdout)),
        stderr: Some(Box::new(stderr)),
        resize: None,
    };
    client_in.write_all(b"hello").await.unwrap();
    drop(client_in);

    let code = fixture.containers.exec(&id, &["cat".to_owned()], false, io).await.unwrap();

    let (mut out, mut err) = (String::new(), String::new());
    client_out.read_to_string(&mut out).await.unwrap();
    client_err.read_to_string(&mut err).await.unwrap();
    assert_eq!((code, out.as_str(), err.as_str()), (4, "hello", "done\n"));
}

#[tokio::test]
async fn update_resources_goes_to_the_runtime_and_the_bundle() {
    let fixture = Fixture::new();
    fixture.exit_on(|call| matches!(call, Call::Kill { .. }));
    let id = fixture.running(fixture.request("resized")).await;
    let memory = oci_spec::runtime::LinuxMemoryBuilder::default().limit(64 << 20).build().unwrap();
    let resources = oci_spec::runtime::LinuxResourcesBuilder::default().memory(memory).build().unwrap();

    fixture.containers.update_resources(&id, resources.clone()).await.unwrap();

    assert_eq!(
        fixture.fake.calls().last(),
        Some(&Call::Update { id: id.clone(), resources: Box::new(resources.clone()) })
    );
    let spec = oci_spec::runtime::Spec::load(fixture.container_dir(&id).join("bundle/config.json")).unwrap();
    assert_eq!(spec.linux().as_ref().and_then(|l| l.resources().clone()), Some(resources.clone()));

    // A container the runtime no longer knows: the runtime's error, which the edge answers NotFound.
    fixture.fake.fail_next(Op::Update, "container resized does not exist");
    let error = fixture.containers.update_resources(&id, resources).await.unwrap_err();
    assert!(matches!(error, Error::Runtime(ref e) if e.is_not_found()), "{error:?}");
}

#[tokio::test]
async fn open_readopts_running_containers_and_cleans_up_interrupted_creates() {
    let fixture = Fixture::new();
    let id = fixture.running(fixture.request("survivor")).await;
    // A create that never wrote its record (keel-shim died meanwhile).
    let unfinished = fixture.container_dir("unfinished");
    std::fs::create_dir_all(unfinished.join("bundle")).unwrap();

    let reopened = Fixture::open(fixture.dir.path(), &fixture.fake);

    assert!(!unfinished.exists());
    assert_eq!(fixture.fake.calls().last(), Some(&delete("unfinished")));
    let status = reopened.status(&id).unwrap();
    assert_eq!(status.state, api::ContainerState::ContainerRunning as i32);
    // The re-adopted container's exit is seen through its monitor's pidfd.
    let mut exited = reopened.entry(&id).unwrap().exited.subscribe();
    write_exit(&fixture.container_dir(&id), 3);
    tokio::time::timeout(Duration::from_secs(30), exited.wait_for(|done| *done)).await.unwrap().unwrap();
    assert_eq!(reopened.status(&id).unwrap().exit_code, 3);
}

#[tokio::test]
async fn status_reports_the_process_user_and_the_mounts_as_created() {
    let fixture = Fixture::new();
    let mut request = fixture.request("user");
    let mut user = oci_spec::runtime::User::default();
    user.set_uid(1000);
    user.set_gid(1000);
    user.set_additional_gids(Some(vec![1000, 1234, 50000]));
    let mut process = oci_spec::runtime::Process::default();
    process.set_user(user);
    request.spec.set_process(Some(process));
    request.mounts = vec![api::Mount {
        container_path: "/mnt".into(),
        host_path: "/srv".into(),
        readonly: true,
        recursive_read_only: true,
        ..Default::default()
    }];
    fixture.containers.create(request).await.unwrap();

    let want = api::ContainerUser {
        linux: Some(api::LinuxContainerUser {
            uid: 1000,
            gid: 1000,
            supplemental_groups: vec![1000, 1234, 50000],
        }),
    };
    let status = fixture.containers.status("user").unwrap();
    assert_eq!(status.user.as_ref(), Some(&want));
    assert!(status.mounts[0].readonly && status.mounts[0].recursive_read_only, "{:?}", status.mounts);
    // Kept in the record: the same after a restart.
    let reopened = Fixture::open(fixture.dir.path(), &fixture.fake);
    assert_eq!(reopened.status("user").unwrap().user, Some(want));

    // A spec without a process (none is built so) and a record from before the field: no user.
    let mut no_process = fixture.request("no-process");
    no_process.spec.set_process(None);
    fixture.containers.create(no_process).await.unwrap();
    assert_eq!(fixture.containers.status("no-process").unwrap().user, None);
    let path = fixture.container_dir("user").join("container.json");
    let mut old: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    old.as_object_mut().unwrap().remove("user");
    old["mounts"][0].as_object_mut().unwrap().remove("recursive_read_only");
    let record: Record = serde_json::from_value(old).unwrap();
    assert_eq!(record.user, None);
    assert!(!record.mounts[0].recursive_read_only);
}
