//! CreateContainer: the bundle written, the container's monitor started (it runs `<runtime> create`),
//! the record saved; on any error nothing is left behind.

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_cri::v1 as api;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;

use super::{
    Containers, CreateRequest, Entry, Error, MountRecord, Record, State, UserRecord, Watch, save,
    shares_pid_namespace, status_of,
};
use crate::monitor;
use crate::oci::runtime::Runtime;

impl Containers {
    /// Creates a container: writes its bundle, starts its monitor (which runs `<runtime> create`) and
    /// records it as CREATED. On error nothing is left behind.
    pub async fn create(&self, request: CreateRequest) -> Result<api::ContainerStatus, Error> {
        let id = request.id.clone();
        if id.is_empty() || id.contains('/') || id.starts_with('.') {
            return Err(Error::InvalidId(id));
        }
        if self.inner.entries.lock().unwrap_or_else(PoisonError::into_inner).contains_key(&id) {
            return Err(Error::AlreadyExists(id));
        }
        let runtime = self.runtime(&request.handler)?;
        let dir = self.inner.dir.join(&id);
        if let Err(e) = std::fs::create_dir(&dir) {
            return Err(if e.kind() == io::ErrorKind::AlreadyExists {
                Error::AlreadyExists(id)
            } else {
                Error::Io { context: "creating the container directory", source: e }
            });
        }
        match self.create_in(&dir, runtime.as_ref(), request).await {
            Ok(status) => Ok(status),
            Err(e) => {
                let _ = runtime.delete(&id, true);
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    async fn create_in(
        &self,
        dir: &Path,
        runtime: &dyn Runtime,
        request: CreateRequest,
    ) -> Result<api::ContainerStatus, Error> {
        let bundle = dir.join("bundle");
        std::fs::create_dir_all(&bundle).map_err(Error::io("creating the bundle"))?;
        let mut request = request;
        let absolute = |path: &Path| std::path::absolute(path).map_err(Error::io("resolving a path"));
        request.rootfs_mounted_at = absolute(&request.rootfs_mounted_at)?;
        if let Some(log) = &request.log_path {
            request.log_path = Some(absolute(log)?);
        }
        let mut spec = request.spec;
        let shared_pid = shares_pid_namespace(&spec);
        let user = UserRecord::of(&spec);
        let mut root = spec.root().clone().unwrap_or_default();
        root.set_path(request.rootfs_mounted_at.clone());
        spec.set_root(Some(root));
        if let Some(process) = spec.process_mut() {
            process.set_terminal(Some(request.tty));
        }
        spec.save(bundle.join("config.json")).map_err(Error::spec("writing config.json"))?;
        if let Some(parent) = request.log_path.as_ref().and_then(|path| path.parent()) {
            std::fs::create_dir_all(parent).map_err(Error::io("creating the log directory"))?;
        }

        let exit_file = dir.join("exit.json");
        let mut command = tokio::process::Command::new(&self.inner.monitor);
        command
            .arg("monitor")
            .arg("--id")
            .arg(&request.id)
            .arg("--bundle")
            .arg(&bundle)
            .arg("--runtime")
            .arg(runtime.binary())
            .arg("--runtime-root")
            .arg(runtime.root())
            .arg("--exit-file")
            .arg(&exit_file);
        if let Some(log) = &request.log_path {
            command.arg("--log-path").arg(log);
        }
        for (flag, on) in
            [("--tty", request.tty), ("--stdin", request.stdin), ("--stdin-once", request.stdin_once)]
        {
            if on {
                command.arg(flag);
            }
        }
        let monitor_log = std::fs::File::create(dir.join("monitor.log"))
            .map_err(Error::io("creating the monitor's log"))?;
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(monitor_log)
            .kill_on_drop(false);
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        let mut child = command.spawn().map_err(Error::io("starting the monitor"))?;
        let monitor_pid = child.id().and_then(|pid| i32::try_from(pid).ok()).unwrap_or_default();
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            let _ = BufReader::new(stdout).read_line(&mut line).await;
        }
        let pid = match line.trim().split_once(' ') {
            Some(("created", pid)) => pid.parse::<i32>().unwrap_or_default(),
            other => {
                let _ = child.wait().await;
                let message = match other {
                    Some(("error", message)) => message.to_owned(),
                    _ => std::fs::read_to_string(dir.join("monitor.log")).unwrap_or_default(),
                };
                return Err(Error::CreateFailed { id: request.id, message });
            }
        };
        let created_at = monitor::now().1;
        let record = Record {
            id: request.id.clone(),
            sandbox_id: request.sandbox_id,
            name: request.metadata.name,
            attempt: request.metadata.attempt,
            image: request.image.image,
            image_annotations: request.image.annotations,
            image_ref: request.image_ref,
            image_id: request.image_id,
            labels: request.labels,
            annotations: request.annotations,
            log_path: request.log_path,
            handler: request.handler,
            runtime: runtime.binary().to_owned(),
            tty: request.tty,
            stdin: request.stdin,
            stdin_once: request.stdin_once,
            rootfs: request.rootfs_mounted_at,
            mounts: request.mounts.iter().map(MountRecord::from).collect(),
            user,
            stop_signal: request.stop_signal,
            state: State::Created,
            created_at,
            started_at: 0,
            finished_at: 0,
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            monitor_pid,
            pid,
            shared_pid,
        };
        if let Err(e) = save(dir, &record) {
            let _ = runtime.delete(&record.id, true);
            let _ = child.wait().await;
            return Err(Error::Io { context: "writing the container record", source: e });
        }
        let (exited, _) = watch::channel(false);
        let entry =
            Arc::new(Entry { record: Mutex::new(record.clone()), op: tokio::sync::Mutex::new(()), exited });
        self.inner
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(record.id.clone(), Arc::clone(&entry));
        self.watch(entry, Watch::Child(child));
        self.emit(api::ContainerEventType::ContainerCreatedEvent, &record);
        Ok(status_of(&record))
    }
}
