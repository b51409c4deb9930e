//! The OCI runtime spec (`config.json`) of a container, built from its CRI `ContainerConfig`, its pod's
//! `PodSandboxConfig` and its image's config, as containerd's CRI plugin builds it
//! (`containerSpec` in pkg/cri/server/container_create_linux.go and the options of pkg/cri/opts,
//! containerd 1.6 — the one Debian ships and the conformance suite compares against).
//!
//! [`build`] is computation, apart from three reads of files: the rootfs's /etc/passwd and /etc/group
//! (resolved inside the rootfs, see `user`), the host's /dev for privileged containers, and the CRI
//! mounts' host paths (resolved; created when missing, as containerd and CRI-O do).
//!
//! What the spec holds:
//! - process: args (the CRI command/args merged with the image's Entrypoint/Cmd as Kubernetes
//!   defines it), env (PATH default, TERM=xterm with a tty, HOSTNAME, image env, then CRI envs
//!   replacing by name), cwd, user
//!   (see `user`), terminal = tty, no_new_privileges, oom_score_adj, capabilities (see `caps`);
//!   no rlimits, no AppArmor or SELinux labels (ignored); the seccomp filter the security context asks
//!   for (see `seccomp`: RuntimeDefault is keel-shim's own deny-list profile).
//! - mounts (see `mounts`), root (the rootfs, read-only when asked).
//! - namespaces: net, ipc and uts joined by path when the pod has its own ([`PodNamespaces`]; `None`
//!   is the host's, so the namespace is left out); pid private, or the pod's (POD with a path), or the
//!   host's (NODE); a new mount namespace; a new cgroup namespace on cgroup v2 (unified) hosts for
//!   unprivileged containers only, as containerd (none on v1 and hybrid hosts); no user namespace.
//! - privileged: every capability of keel-shim's bounding set, every host device and all devices
//!   allowed, no masked or read-only paths, /sys and /sys/fs/cgroup writable. Refused unless the
//!   pod's security context is privileged and the runtime allows it.
//! - masked and read-only paths: the CRI's lists. Empty lists stay empty, as in containerd 1.6 (its
//!   issue 5029): the kubelet sends the default lists for every container whose procMount is Default
//!   and empty ones for Unmasked, so defaults here would undo Unmasked.
//! - resources from [`crate::cgroup::resources`] plus the device rules (deny all but the runtime's
//!   defaults; CRI devices allowed), cgroupsPath as given.
//! - hostname (own UTS namespace only) and the pod's sysctls for the namespaces the container joins.
//! - annotations: containerd's `io.kubernetes.cri.*` (the sandbox id and image name through
//!   [`annotate`], which the caller knows).

mod caps;
mod mounts;
mod seccomp;
mod user;

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

use k8s_cri::v1 as api;
use oci_spec::runtime::{
    Capabilities, Linux, LinuxDeviceCgroup, LinuxDeviceType, LinuxNamespace, LinuxNamespaceType, Process,
    Root, Spec, User,
};
use serde::{Deserialize, Serialize};

pub use mounts::host_devices;

/// The OCI runtime spec version written (containerd 1.6's; runc 1.1 and crun 1.8 accept it).
pub const OCI_VERSION: &str = "1.0.2-dev";

/// The PATH a container gets unless its image or config sets one (containerd's `defaultUnixEnv`).
pub const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// containerd's annotation keys (pkg/cri/annotations).
pub mod annotations {
    /// `container` for containers, `sandbox` for a pod's sandbox.
    pub const CONTAINER_TYPE: &str = "io.kubernetes.cri.container-type";
    /// The pod sandbox's id.
    pub const SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";
    /// The pod's namespace.
    pub const SANDBOX_NAMESPACE: &str = "io.kubernetes.cri.sandbox-namespace";
    /// The pod's UID.
    pub const SANDBOX_UID: &str = "io.kubernetes.cri.sandbox-uid";
    /// The pod's name.
    pub const SANDBOX_NAME: &str = "io.kubernetes.cri.sandbox-name";
    /// The container's name in the pod.
    pub const CONTAINER_NAME: &str = "io.kubernetes.cri.container-name";
    /// The image's name (the reference it was pulled as).
    pub const IMAGE_NAME: &str = "io.kubernetes.cri.image-name";
}

/// The pod's namespaces, as bind-mounted files. `None` for net, ipc and uts: the host's (the pod asked
/// for NODE); for pid: no pod-wide namespace (each container gets its own unless the pod asks NODE).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodNamespaces {
    /// The network namespace.
    pub net: Option<PathBuf>,
    /// The IPC namespace.
    pub ipc: Option<PathBuf>,
    /// The UTS namespace.
    pub uts: Option<PathBuf>,
    /// The pod's shared PID namespace (PID namespace mode POD).
    pub pid: Option<PathBuf>,
}

/// The files the pod's sandbox wrote, bind-mounted into each container (when `Some`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodFiles {
    /// Mounted at /etc/hostname.
    pub hostname: Option<PathBuf>,
    /// Mounted at /etc/hosts.
    pub hosts: Option<PathBuf>,
    /// Mounted at /etc/resolv.conf.
    pub resolv_conf: Option<PathBuf>,
    /// The pod's /dev/shm (a tmpfs its sandbox mounted), shared by its containers; without it each
    /// container gets a tmpfs of its own (and the node's with host IPC).
    #[serde(default)]
    pub shm: Option<PathBuf>,
}

/// Everything a container's spec is built from.
#[derive(Debug, Clone, Copy)]
pub struct SpecInput<'a> {
    /// The CRI container config.
    pub container: &'a api::ContainerConfig,
    /// The pod's sandbox config.
    pub sandbox: &'a api::PodSandboxConfig,
    /// The image's config (Entrypoint, Cmd, Env, WorkingDir, User).
    pub image: &'a oci_spec::image::ImageConfiguration,
    /// The container's root filesystem (mounted): root.path, and where /etc/passwd is read.
    pub rootfs: &'a Path,
    /// The pod's namespaces.
    pub namespaces: &'a PodNamespaces,
    /// The pod's hostname, hosts and resolv.conf files.
    pub files: &'a PodFiles,
    /// linux.cgroupsPath (see [`crate::cgroup::cgroups_path`]); empty leaves it unset.
    pub cgroups_path: &'a str,
    /// Whether the runtime allows privileged containers at all.
    pub privileged_allowed: bool,
    /// Whether the handler's kernel and OCI runtime make recursive read-only mounts (see
    /// [`crate::oci::features`]); a CRI mount asking for one is refused otherwise.
    pub recursive_read_only_supported: bool,
}

/// Why a spec cannot be built. [`SpecError::code`] is the gRPC code CreateContainer answers.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// Neither the config nor the image gives a command.
    #[error("no command specified: the container config and the image have neither command nor args")]
    NoCommand,
    /// A privileged container in a pod that is not privileged.
    #[error("no privileged container allowed in sandbox: the pod's security context is not privileged")]
    PrivilegedNotAllowed,
    /// A privileged container when the runtime allows none.
    #[error("privileged containers are not allowed by this runtime")]
    PrivilegedDisabled,
    /// run_as_group without run_as_user or run_as_username.
    #[error("user group {0} is specified without user")]
    GroupWithoutUser(i64),
    /// A user string that is not `user`, `user:group`, or a negative or too large id.
    #[error("invalid user {0:?}")]
    InvalidUser(String),
    /// A negative or too large supplemental group.
    #[error("invalid supplemental group {0}")]
    InvalidGroup(i64),
    /// A user name the rootfs's /etc/passwd does not have.
    #[error("no such user {0:?} in the image's /etc/passwd")]
    UserNotFound(String),
    /// A group name the rootfs's /etc/group does not have.
    #[error("no such group {0:?} in the image's /etc/group")]
    GroupNotFound(String),
    /// A capability name Linux does not have.
    #[error("unknown capability {0:?}")]
    UnknownCapability(String),
    /// A CRI mount that cannot be made as asked.
    #[error("invalid mount {path:?}: {reason}")]
    InvalidMount {
        /// The mount's container (or host) path.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A CRI mount's host path that cannot be resolved or created.
    #[error("mount source {path}: {source}")]
    MountSource {
        /// The host path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A recursive read-only CRI mount on a handler whose kernel or OCI runtime cannot make one.
    #[error(
        "invalid mount {path:?}: recursive read-only mounts need Linux 5.12 and an OCI runtime with the \
         rro mount option, which this runtime handler lacks"
    )]
    RecursiveReadOnlyUnsupported {
        /// The mount's container path.
        path: String,
    },
    /// A CRI device that cannot be given as asked.
    #[error("invalid device {path:?}: {reason}")]
    InvalidDevice {
        /// The device's host (or container) path.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A CRI device's host path that cannot be read.
    #[error("device {path}: {source}")]
    Device {
        /// The host path.
        path: String,
        /// The error.
        source: io::Error,
    },
    /// A working directory that is not absolute.
    #[error("working directory {0:?} is not an absolute path")]
    InvalidWorkingDir(String),
    /// A namespace mode keel-shim does not support (TARGET: ephemeral containers' target process).
    #[error("namespace mode {0} is not supported")]
    UnsupportedNamespace(&'static str),
    /// Reading the rootfs failed.
    #[error("reading {path}: {source}")]
    Rootfs {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// Listing the host's devices (privileged) failed.
    #[error("listing host devices: {0}")]
    HostDevices(io::Error),
    /// A seccomp profile that cannot be used: an unknown kind, or a Localhost file that cannot be read.
    #[error("seccomp profile {profile:?}: {reason}")]
    Seccomp {
        /// The profile asked for (a kind or a file's path).
        profile: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl SpecError {
    /// The gRPC code: InvalidArgument for what the request asks, FailedPrecondition for host paths
    /// that cannot be used and for recursive read-only mounts the handler cannot make, Internal for
    /// failures reading the rootfs or /dev.
    pub fn code(&self) -> tonic::Code {
        match self {
            SpecError::MountSource { .. }
            | SpecError::Device { .. }
            | SpecError::RecursiveReadOnlyUnsupported { .. } => tonic::Code::FailedPrecondition,
            SpecError::Rootfs { .. } | SpecError::HostDevices(_) => tonic::Code::Internal,
            _ => tonic::Code::InvalidArgument,
        }
    }
}

impl From<SpecError> for tonic::Status {
    fn from(err: SpecError) -> tonic::Status {
        tonic::Status::new(err.code(), err.to_string())
    }
}

/// What [`build`] reads from the host, apart so tests can fix it.
#[derive(Debug, Clone)]
struct Host {
    /// Where /dev is read for privileged containers (`/`).
    root: PathBuf,
    /// "All" capabilities: keel-shim's bounding set.
    capabilities: Capabilities,
    /// The host's hostname (HOSTNAME when the pod has none).
    hostname: String,
    /// Whether /sys/fs/cgroup is the cgroup2 unified hierarchy (containers then get a cgroup
    /// namespace, as containerd gives them).
    unified_cgroups: bool,
    /// Whether hugepage limits can be set ([`crate::cgroup::Layout::hugetlb`]).
    hugetlb: bool,
}

static HUGETLB: std::sync::OnceLock<bool> = std::sync::OnceLock::new();

impl Host {
    fn real() -> Host {
        Host {
            root: PathBuf::from("/"),
            capabilities: caps::current(),
            hostname: nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_default(),
            unified_cgroups: nix::sys::statfs::statfs("/sys/fs/cgroup")
                .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC),
            // The mount table is read once: the hierarchies do not change under a running shim.
            hugetlb: *HUGETLB.get_or_init(|| crate::cgroup::Layout::host().is_ok_and(|l| l.hugetlb())),
        }
    }
}

/// Builds the container's spec (see the module documentation).
pub fn build(input: &SpecInput<'_>) -> Result<Spec, SpecError> {
    build_on(input, &Host::real())
}

/// Adds the annotations naming the pod's sandbox and the image (containerd's `sandbox-id` and
/// `image-name`), which the caller of [`build`] knows.
pub fn annotate(spec: &mut Spec, sandbox_id: &str, image_name: &str) {
    let mut map = spec.annotations().clone().unwrap_or_default();
    map.insert(annotations::SANDBOX_ID.to_owned(), sandbox_id.to_owned());
    map.insert(annotations::IMAGE_NAME.to_owned(), image_name.to_owned());
    spec.set_annotations(Some(map));
}

/// The image's volumes (`Volumes` of its config) that no CRI mount covers, as CRI mounts of fresh
/// directories `volumes_dir/<n>` (containerd's `volumeMounts`, which gives each an empty directory
/// under the container's root). The caller adds them to the config's mounts before [`build`], which
/// creates the directories; removing the container's directory removes them.
pub fn image_volume_mounts(
    image: &oci_spec::image::ImageConfiguration,
    config: &api::ContainerConfig,
    volumes_dir: &Path,
) -> Vec<api::Mount> {
    let mut volumes: Vec<String> =
        image.config().as_ref().and_then(|c| c.volumes().clone()).unwrap_or_default();
    volumes.sort();
    volumes.dedup();
    volumes
        .into_iter()
        .filter(|dst| !config.mounts.iter().any(|m| mounts::clean(&m.container_path) == mounts::clean(dst)))
        .enumerate()
        .map(|(n, dst)| api::Mount {
            container_path: dst,
            host_path: volumes_dir.join(n.to_string()).to_string_lossy().into_owned(),
            ..Default::default()
        })
        .collect()
}

/// The process args, as the kubelet documents and containerd's `WithProcessArgs` merges them: a
/// command replaces the image's Entrypoint and drops its Cmd; args alone replace the Cmd; neither
/// keeps both. An Entrypoint of `[""]` is no entrypoint (as Docker writes a cleared one).
pub fn process_args(
    command: &[String],
    args: &[String],
    entrypoint: Option<&[String]>,
    cmd: Option<&[String]>,
) -> Result<Vec<String>, SpecError> {
    let mut out: Vec<String> = command.to_vec();
    let mut args: Vec<String> = args.to_vec();
    if command.is_empty() {
        if args.is_empty() {
            args = cmd.unwrap_or_default().to_vec();
        }
        let entrypoint = entrypoint.unwrap_or_default();
        if !(entrypoint.len() == 1 && entrypoint[0].is_empty()) {
            out = entrypoint.to_vec();
        }
    }
    out.extend(args);
    if out.is_empty() {
        return Err(SpecError::NoCommand);
    }
    Ok(out)
}

/// `overrides` applied to `env` as containerd's `replaceOrAppendEnvValues`: `K=V` replaces K's entry
/// in place or is appended; a bare `K` removes K.
pub fn merge_env(env: &mut Vec<String>, overrides: impl IntoIterator<Item = String>) {
    for value in overrides {
        let key = value.split_once('=').map_or(value.as_str(), |(k, _)| k).to_owned();
        let position = env.iter().position(|e| e.split_once('=').map_or(e.as_str(), |(k, _)| k) == key);
        match (value.contains('='), position) {
            (true, Some(i)) => env[i] = value,
            (true, None) => env.push(value),
            (false, Some(i)) => {
                env.remove(i);
            }
            (false, None) => {}
        }
    }
}

/// Whether a sysctl lives in a namespace the container shares with the pod (so it may be set), given
/// which namespaces the pod has of its own. Sysctls outside net/ipc/uts are passed on (the runtime
/// refuses non-namespaced ones).
fn sysctl_applies(name: &str, namespaces: &PodNamespaces) -> bool {
    let ipc = name.starts_with("kernel.shm")
        || name.starts_with("kernel.msg")
        || name == "kernel.sem"
        || name.starts_with("fs.mqueue.");
    let uts = name == "kernel.hostname" || name == "kernel.domainname";
    if name.starts_with("net.") {
        namespaces.net.is_some()
    } else if ipc {
        namespaces.ipc.is_some()
    } else if uts {
        namespaces.uts.is_some()
    } else {
        true
    }
}

fn namespace(typ: LinuxNamespaceType, path: Option<&Path>) -> LinuxNamespace {
    let mut ns = LinuxNamespace::default();
    ns.set_typ(typ);
    ns.set_path(path.map(Path::to_path_buf));
    ns
}

/// The namespaces: mount new; net, ipc, uts joined when the pod has its own; pid by the container's
/// PID namespace mode.
fn namespaces(
    pod: &PodNamespaces,
    sc: Option<&api::LinuxContainerSecurityContext>,
) -> Result<Vec<LinuxNamespace>, SpecError> {
    // No namespace options is the protobuf default, POD, as containerd reads it (Go's nil-safe
    // getters): the container joins the pod's PID namespace when the pod has one.
    let pid_mode = sc
        .and_then(|sc| sc.namespace_options.as_ref())
        .map_or(api::NamespaceMode::Pod, api::NamespaceOption::pid);
    let mut out = vec![namespace(LinuxNamespaceType::Mount, None)];
    for (typ, path) in [
        (LinuxNamespaceType::Network, &pod.net),
        (LinuxNamespaceType::Ipc, &pod.ipc),
        (LinuxNamespaceType::Uts, &pod.uts),
    ] {
        if let Some(path) = path {
            out.push(namespace(typ, Some(path)));
        }
    }
    match pid_mode {
        api::NamespaceMode::Node => {}
        api::NamespaceMode::Pod => out.push(namespace(LinuxNamespaceType::Pid, pod.pid.as_deref())),
        api::NamespaceMode::Container => out.push(namespace(LinuxNamespaceType::Pid, None)),
        api::NamespaceMode::Target => return Err(SpecError::UnsupportedNamespace("TARGET")),
    }
    Ok(out)
}

fn build_on(input: &SpecInput<'_>, host: &Host) -> Result<Spec, SpecError> {
    let container = input.container;
    let sandbox = input.sandbox;
    let linux_config = container.linux.as_ref();
    let sc = linux_config.and_then(|l| l.security_context.as_ref());
    let image = input.image.config().clone().unwrap_or_default();

    let privileged = sc.is_some_and(|sc| sc.privileged);
    if privileged {
        let pod_privileged =
            sandbox.linux.as_ref().and_then(|l| l.security_context.as_ref()).is_some_and(|sc| sc.privileged);
        if !pod_privileged {
            return Err(SpecError::PrivilegedNotAllowed);
        }
        if !input.privileged_allowed {
            return Err(SpecError::PrivilegedDisabled);
        }
    }

    // Process.
    let args = process_args(
        &container.command,
        &container.args,
        image.entrypoint().as_deref(),
        image.cmd().as_deref(),
    )?;
    let hostname = if sandbox.hostname.is_empty() { host.hostname.clone() } else { sandbox.hostname.clone() };
    let mut env = vec![DEFAULT_PATH.to_owned()];
    if container.tty {
        // containerd's WithTTY.
        merge_env(&mut env, ["TERM=xterm".to_owned()]);
    }
    merge_env(&mut env, [format!("HOSTNAME={hostname}")]);
    merge_env(&mut env, image.env().clone().unwrap_or_default());
    merge_env(&mut env, container.envs.iter().map(|kv| format!("{}={}", kv.key, kv.value)));
    let cwd = if !container.working_dir.is_empty() {
        if !container.working_dir.starts_with('/') {
            return Err(SpecError::InvalidWorkingDir(container.working_dir.clone()));
        }
        container.working_dir.clone()
    } else {
        match image.working_dir().as_deref() {
            Some(dir) if dir.starts_with('/') => dir.to_owned(),
            Some(dir) if !dir.is_empty() => format!("/{dir}"),
            _ => "/".to_owned(),
        }
    };
    let accounts = user::Accounts::read(input.rootfs)?;
    let process_user = user::process_user(&accounts, sc, image.user().as_deref().unwrap_or_default())?;
    let mut oci_user = User::default();
    oci_user.set_uid(process_user.uid);
    oci_user.set_gid(process_user.gid);
    oci_user.set_additional_gids(Some(process_user.additional_gids));
    let capability_set = if privileged {
        host.capabilities.clone()
    } else {
        caps::apply(sc.and_then(|sc| sc.capabilities.as_ref()), &host.capabilities)?
    };

    let mut process = Process::default();
    process.set_terminal(Some(container.tty));
    process.set_console_size(None);
    process.set_user(oci_user);
    process.set_args(Some(args));
    process.set_env(Some(env));
    process.set_cwd(PathBuf::from(cwd));
    let seccomp_filter = seccomp::seccomp(sc, privileged, &capability_set)?;
    process.set_capabilities(Some(caps::linux_capabilities(capability_set)));
    process.set_rlimits(None);
    process.set_no_new_privileges(Some(sc.is_some_and(|sc| sc.no_new_privs)));
    process.set_apparmor_profile(None);
    process.set_selinux_label(None);
    let resources_config = linux_config.and_then(|l| l.resources.as_ref());
    process.set_oom_score_adj(
        resources_config.map(|r| i32::try_from(r.oom_score_adj).unwrap_or(1000).clamp(-1000, 1000)),
    );

    // Mounts and devices.
    let readonly_rootfs = sc.is_some_and(|sc| sc.readonly_rootfs);
    let (spec_mounts, rootfs_propagation) = mounts::mounts(
        container,
        input.files,
        mounts::MountOptions {
            readonly_rootfs,
            host_ipc: input.namespaces.ipc.is_none(),
            privileged,
            recursive_read_only_supported: input.recursive_read_only_supported,
        },
    )?;
    let (mut devices, device_rules) = mounts::cri_devices(container)?;
    let mut resources =
        resources_config.map(|r| crate::cgroup::resources(r, host.hugetlb)).unwrap_or_default();
    let mut rules = Vec::new();
    let mut all_devices = LinuxDeviceCgroup::default();
    all_devices.set_typ(Some(LinuxDeviceType::A));
    all_devices.set_access(Some("rwm".to_owned()));
    if privileged {
        let mut host_devices = host_devices(&host.root).map_err(SpecError::HostDevices)?;
        host_devices.retain(|d| !devices.iter().any(|own| own.path() == d.path()));
        devices.extend(host_devices);
        all_devices.set_allow(true);
        rules.push(all_devices);
    } else {
        all_devices.set_allow(false);
        rules.push(all_devices);
        rules.extend(device_rules);
    }
    resources.set_devices(Some(rules));

    // Linux.
    let sysctls: HashMap<String, String> = sandbox
        .linux
        .as_ref()
        .map(|l| &l.sysctls)
        .into_iter()
        .flatten()
        .filter(|(name, _)| sysctl_applies(name, input.namespaces))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let (masked, readonly) = if privileged {
        (Vec::new(), Vec::new())
    } else {
        (
            sc.map(|sc| sc.masked_paths.clone()).unwrap_or_default(),
            sc.map(|sc| sc.readonly_paths.clone()).unwrap_or_default(),
        )
    };
    let mut linux = Linux::default();
    let mut namespace_list = namespaces(input.namespaces, sc)?;
    if host.unified_cgroups && !privileged {
        namespace_list.push(namespace(LinuxNamespaceType::Cgroup, None));
    }
    linux.set_namespaces(Some(namespace_list));
    linux.set_resources(Some(resources));
    linux.set_cgroups_path((!input.cgroups_path.is_empty()).then(|| PathBuf::from(input.cgroups_path)));
    linux.set_devices((!devices.is_empty()).then_some(devices));
    linux.set_sysctl((!sysctls.is_empty()).then_some(sysctls));
    linux.set_rootfs_propagation(rootfs_propagation);
    linux.set_masked_paths(Some(masked));
    linux.set_readonly_paths(Some(readonly));
    linux.set_seccomp(seccomp_filter);

    let mut root = Root::default();
    root.set_path(input.rootfs.to_path_buf());
    root.set_readonly(Some(readonly_rootfs));

    let metadata = sandbox.metadata.clone().unwrap_or_default();
    let annotation_map = HashMap::from([
        (annotations::CONTAINER_TYPE.to_owned(), "container".to_owned()),
        (annotations::SANDBOX_NAMESPACE.to_owned(), metadata.namespace),
        (annotations::SANDBOX_UID.to_owned(), metadata.uid),
        (annotations::SANDBOX_NAME.to_owned(), metadata.name),
        (
            annotations::CONTAINER_NAME.to_owned(),
            container.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default(),
        ),
    ]);

    let mut spec = Spec::default();
    spec.set_version(OCI_VERSION.to_owned());
    spec.set_root(Some(root));
    spec.set_mounts(Some(spec_mounts));
    spec.set_process(Some(process));
    spec.set_hostname(
        input.namespaces.uts.is_some().then(|| sandbox.hostname.clone()).filter(|h| !h.is_empty()),
    );
    spec.set_domainname(None);
    spec.set_hooks(None);
    spec.set_annotations(Some(annotation_map));
    spec.set_linux(Some(linux));
    Ok(spec)
}

#[cfg(test)]
mod tests;
