//! Tests of the spec builder: each merge rule and error, and one full spec against a golden file.

use std::collections::HashMap;

use oci_spec::image::{ConfigBuilder, ImageConfiguration, ImageConfigurationBuilder};
use oci_spec::runtime::Capability;

use super::*;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn image(
    entrypoint: &[&str],
    cmd: &[&str],
    env: &[&str],
    working_dir: &str,
    user: &str,
) -> ImageConfiguration {
    let mut config = ConfigBuilder::default();
    if !entrypoint.is_empty() {
        config = config.entrypoint(strings(entrypoint));
    }
    if !cmd.is_empty() {
        config = config.cmd(strings(cmd));
    }
    if !env.is_empty() {
        config = config.env(strings(env));
    }
    if !working_dir.is_empty() {
        config = config.working_dir(working_dir.to_owned());
    }
    if !user.is_empty() {
        config = config.user(user.to_owned());
    }
    ImageConfigurationBuilder::default().config(config.build().unwrap()).build().unwrap()
}

/// A test's inputs, owned; `input()` borrows them as a [`SpecInput`].
struct Case {
    container: api::ContainerConfig,
    sandbox: api::PodSandboxConfig,
    image: ImageConfiguration,
    rootfs: tempfile::TempDir,
    namespaces: PodNamespaces,
    files: PodFiles,
    cgroups_path: String,
    privileged_allowed: bool,
}

impl Case {
    fn new() -> Case {
        let rootfs = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(rootfs.path().join("etc")).unwrap();
        std::fs::write(
            rootfs.path().join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(rootfs.path().join("etc/group"), "root:x:0:\nwheel:x:10:root\napp:x:1000:\n").unwrap();
        Case {
            container: api::ContainerConfig {
                metadata: Some(api::ContainerMetadata { name: "app".into(), attempt: 0 }),
                ..Default::default()
            },
            sandbox: api::PodSandboxConfig {
                metadata: Some(api::PodSandboxMetadata {
                    name: "pod".into(),
                    uid: "uid-1".into(),
                    namespace: "default".into(),
                    attempt: 0,
                }),
                hostname: "pod-host".into(),
                ..Default::default()
            },
            image: image(&["/bin/sh"], &["-c", "true"], &[], "", ""),
            rootfs,
            namespaces: PodNamespaces {
                net: Some("/run/ns/net".into()),
                ipc: Some("/run/ns/ipc".into()),
                uts: Some("/run/ns/uts".into()),
                pid: Some("/run/ns/pid".into()),
            },
            files: PodFiles::default(),
            cgroups_path: String::new(),
            privileged_allowed: true,
        }
    }

    fn sc(&mut self) -> &mut api::LinuxContainerSecurityContext {
        self.container
            .linux
            .get_or_insert_with(Default::default)
            .security_context
            .get_or_insert_with(Default::default)
    }

    fn build(&self) -> Result<Spec, SpecError> {
        let input = SpecInput {
            container: &self.container,
            sandbox: &self.sandbox,
            image: &self.image,
            rootfs: self.rootfs.path(),
            namespaces: &self.namespaces,
            files: &self.files,
            cgroups_path: &self.cgroups_path,
            privileged_allowed: self.privileged_allowed,
            recursive_read_only_supported: false,
        };
        build_on(&input, &test_host())
    }
}

fn test_host() -> Host {
    Host {
        root: PathBuf::from("/"),
        capabilities: caps::known(),
        hostname: "node-1".into(),
        unified_cgroups: false,
        hugetlb: true,
    }
}

fn process(spec: &Spec) -> &Process {
    spec.process().as_ref().unwrap()
}

fn linux(spec: &Spec) -> &Linux {
    spec.linux().as_ref().unwrap()
}

#[test]
fn args_merge_command_and_args_with_entrypoint_and_cmd_as_kubernetes() {
    let ep = strings(&["/ep", "-x"]);
    let cmd = strings(&["c1", "c2"]);
    type ArgsCase<'a> =
        (&'a [&'a str], &'a [&'a str], Option<&'a [String]>, Option<&'a [String]>, Result<&'a [&'a str], ()>);
    let cases: &[ArgsCase<'_>] = &[
        (&[], &[], Some(&ep), Some(&cmd), Ok(&["/ep", "-x", "c1", "c2"])),
        (&[], &["a1"], Some(&ep), Some(&cmd), Ok(&["/ep", "-x", "a1"])),
        (&["/bin/cmd"], &[], Some(&ep), Some(&cmd), Ok(&["/bin/cmd"])),
        (&["/bin/cmd"], &["a1", "a2"], Some(&ep), Some(&cmd), Ok(&["/bin/cmd", "a1", "a2"])),
        (&[], &[], None, Some(&cmd), Ok(&["c1", "c2"])),
        (&[], &["a1"], None, None, Ok(&["a1"])),
        (&[], &[], Some(&ep), None, Ok(&["/ep", "-x"])),
        (&[], &[], Some(&[String::new()]), Some(&cmd), Ok(&["c1", "c2"])),
        (&[], &[], None, None, Err(())),
        (&[], &[], Some(&[String::new()]), None, Err(())),
    ];
    for (command, args, entrypoint, image_cmd, want) in cases {
        let got = process_args(&strings(command), &strings(args), *entrypoint, *image_cmd);
        match (want, got) {
            (Ok(want), Ok(got)) => assert_eq!(got, strings(want), "{command:?} {args:?}"),
            (Err(()), Err(err)) => assert!(matches!(err, SpecError::NoCommand)),
            (want, got) => panic!("{command:?} {args:?}: want {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn env_overrides_replace_by_name_in_place() {
    let cases: &[(&[&str], &[&str], &[&str])] = &[
        (&["A=1", "B=2"], &["B=3"], &["A=1", "B=3"]),
        (&["A=1"], &["C=3"], &["A=1", "C=3"]),
        (&["A=1", "B=2"], &["A"], &["B=2"]),
        (&["A=1"], &["Z"], &["A=1"]),
        (&["A=1"], &["A="], &["A="]),
        (&["A=x=y"], &["A=p=q"], &["A=p=q"]),
    ];
    for (env, overrides, want) in cases {
        let mut got = strings(env);
        merge_env(&mut got, strings(overrides));
        assert_eq!(got, strings(want), "{env:?} + {overrides:?}");
    }
}

#[test]
fn env_is_path_hostname_image_then_cri() {
    let mut case = Case::new();
    case.image = image(&["/bin/sh"], &[], &["PATH=/image/bin", "FOO=image", "BAR=image"], "", "");
    case.container.envs = vec![
        api::KeyValue { key: "FOO".into(), value: "cri".into() },
        api::KeyValue { key: "NEW".into(), value: "v".into() },
    ];
    let spec = case.build().unwrap();
    assert_eq!(
        process(&spec).env().as_deref().unwrap(),
        strings(&["PATH=/image/bin", "HOSTNAME=pod-host", "FOO=cri", "BAR=image", "NEW=v"])
    );
    // No pod hostname: the host's.
    case.sandbox.hostname = String::new();
    let spec = case.build().unwrap();
    assert!(process(&spec).env().as_deref().unwrap().contains(&"HOSTNAME=node-1".to_owned()));
    assert_eq!(spec.hostname(), &None, "no hostname to set");
}

#[test]
fn a_tty_adds_term_before_the_image_env() {
    let mut case = Case::new();
    case.container.tty = true;
    let spec = case.build().unwrap();
    assert_eq!(
        process(&spec).env().as_deref().unwrap(),
        strings(&[DEFAULT_PATH, "TERM=xterm", "HOSTNAME=pod-host"])
    );
    case.image = image(&["/bin/sh"], &[], &["TERM=vt100"], "", "");
    let spec = case.build().unwrap();
    assert_eq!(
        process(&spec).env().as_deref().unwrap(),
        strings(&[DEFAULT_PATH, "TERM=vt100", "HOSTNAME=pod-host"])
    );
}

#[test]
fn image_volumes_become_mounts_unless_covered() {
    let config =
        ConfigBuilder::default().volumes(strings(&["/var/lib/data", "/cache", "/covered/"])).build().unwrap();
    let image = ImageConfigurationBuilder::default().config(config).build().unwrap();
    let container = api::ContainerConfig {
        mounts: vec![api::Mount {
            container_path: "/covered".into(),
            host_path: "/x".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let got = image_volume_mounts(&image, &container, Path::new("/root/containers/c1/volumes"));
    let pairs: Vec<(&str, &str)> =
        got.iter().map(|m| (m.container_path.as_str(), m.host_path.as_str())).collect();
    assert_eq!(
        pairs,
        [("/cache", "/root/containers/c1/volumes/0"), ("/var/lib/data", "/root/containers/c1/volumes/1"),]
    );
    assert!(image_volume_mounts(&ImageConfiguration::default(), &container, Path::new("/v")).is_empty());
}

#[test]
fn working_dir_comes_from_config_then_image_then_root() {
    let mut case = Case::new();
    assert_eq!(process(&case.build().unwrap()).cwd(), Path::new("/"));
    case.image = image(&["/bin/sh"], &[], &[], "/srv", "");
    assert_eq!(process(&case.build().unwrap()).cwd(), Path::new("/srv"));
    case.image = image(&["/bin/sh"], &[], &[], "srv", "");
    assert_eq!(process(&case.build().unwrap()).cwd(), Path::new("/srv"));
    case.container.working_dir = "/work".into();
    assert_eq!(process(&case.build().unwrap()).cwd(), Path::new("/work"));
    case.container.working_dir = "work".into();
    assert!(matches!(case.build(), Err(SpecError::InvalidWorkingDir(_))));
}

#[test]
fn user_comes_from_the_security_context_or_the_image() {
    let mut case = Case::new();
    let user = |spec: &Spec| {
        let u = process(spec).user();
        (u.uid(), u.gid(), u.additional_gids().clone().unwrap_or_default())
    };
    assert_eq!(user(&case.build().unwrap()), (0, 0, vec![0, 10]));
    case.image = image(&["/bin/sh"], &[], &[], "", "app");
    assert_eq!(user(&case.build().unwrap()), (1000, 1000, vec![1000]));
    case.sc().run_as_user = Some(api::Int64Value { value: 42 });
    case.sc().run_as_group = Some(api::Int64Value { value: 43 });
    case.sc().supplemental_groups = vec![5];
    assert_eq!(user(&case.build().unwrap()), (42, 43, vec![5, 43]));
    case.sc().run_as_username = "nobody-here".into();
    assert!(matches!(case.build(), Err(SpecError::UserNotFound(_))));
}

#[test]
fn defaults_for_an_unprivileged_container() {
    let case = Case::new();
    let spec = case.build().unwrap();
    assert_eq!(spec.version(), OCI_VERSION);
    let p = process(&spec);
    assert_eq!(p.terminal(), Some(false));
    assert_eq!(p.no_new_privileges(), Some(false));
    assert_eq!(p.rlimits(), &None);
    assert_eq!(p.oom_score_adj(), None);
    let caps = p.capabilities().as_ref().unwrap();
    assert_eq!(caps.bounding().as_ref(), Some(&caps::default_set()));
    assert_eq!(caps.ambient(), &None);
    assert_eq!(caps.inheritable(), &None);
    let l = linux(&spec);
    assert_eq!(l.masked_paths().as_deref(), Some(&[][..]));
    assert_eq!(l.readonly_paths().as_deref(), Some(&[][..]));
    assert_eq!(l.seccomp(), &None);
    assert_eq!(l.cgroups_path(), &None);
    assert_eq!(l.devices(), &None);
    let rules = l.resources().as_ref().unwrap().devices().clone().unwrap();
    assert_eq!(rules.len(), 1);
    assert!(!rules[0].allow());
    assert_eq!(spec.root().as_ref().unwrap().readonly(), Some(false));
    assert_eq!(spec.root().as_ref().unwrap().path(), case.rootfs.path());
    assert_eq!(spec.hostname().as_deref(), Some("pod-host"));
    let annotations = spec.annotations().clone().unwrap();
    assert_eq!(annotations[annotations::CONTAINER_TYPE], "container");
    assert_eq!(annotations[annotations::CONTAINER_NAME], "app");
    assert_eq!(annotations[annotations::SANDBOX_NAME], "pod");
    assert_eq!(annotations[annotations::SANDBOX_NAMESPACE], "default");
    assert_eq!(annotations[annotations::SANDBOX_UID], "uid-1");
}

#[test]
fn security_context_settings_reach_the_spec() {
    let mut case = Case::new();
    case.container.tty = true;
    let sc = case.sc();
    sc.no_new_privs = true;
    sc.readonly_rootfs = true;
    sc.masked_paths = strings(&["/proc/kcore"]);
    sc.readonly_paths = strings(&["/proc/sys"]);
    sc.capabilities = Some(api::Capability {
        add_capabilities: strings(&["SYS_TIME"]),
        drop_capabilities: strings(&["CAP_KILL"]),
        add_ambient_capabilities: Vec::new(),
    });
    sc.apparmor = Some(api::SecurityProfile { profile_type: 2, localhost_ref: "ignored".into() });
    case.files.hosts = Some("/pod/hosts".into());
    let spec = case.build().unwrap();
    let p = process(&spec);
    assert_eq!(p.terminal(), Some(true));
    assert_eq!(p.no_new_privileges(), Some(true));
    assert_eq!(p.apparmor_profile(), &None);
    let bounding = p.capabilities().as_ref().unwrap().bounding().clone().unwrap();
    assert!(bounding.contains(&Capability::SysTime) && !bounding.contains(&Capability::Kill));
    let l = linux(&spec);
    assert_eq!(l.masked_paths().clone().unwrap(), strings(&["/proc/kcore"]));
    assert_eq!(l.readonly_paths().clone().unwrap(), strings(&["/proc/sys"]));
    assert_eq!(spec.root().as_ref().unwrap().readonly(), Some(true));
    let hosts =
        spec.mounts().as_ref().unwrap().iter().find(|m| m.destination() == Path::new("/etc/hosts")).unwrap();
    assert!(hosts.options().as_ref().unwrap().contains(&"ro".to_owned()));

    case.sc().capabilities.as_mut().unwrap().add_capabilities = strings(&["NOT_A_CAP"]);
    assert!(matches!(case.build(), Err(SpecError::UnknownCapability(_))));
}

#[test]
fn privileged_needs_a_privileged_pod_and_gets_everything() {
    let mut case = Case::new();
    case.sc().privileged = true;
    case.sc().masked_paths = strings(&["/proc/kcore"]);
    case.sc().capabilities =
        Some(api::Capability { drop_capabilities: strings(&["ALL"]), ..Default::default() });
    let err = case.build().unwrap_err();
    assert!(matches!(err, SpecError::PrivilegedNotAllowed));
    assert_eq!(err.code(), tonic::Code::InvalidArgument);

    case.sandbox.linux = Some(api::LinuxPodSandboxConfig {
        security_context: Some(api::LinuxSandboxSecurityContext { privileged: true, ..Default::default() }),
        ..Default::default()
    });
    case.privileged_allowed = false;
    assert!(matches!(case.build(), Err(SpecError::PrivilegedDisabled)));

    case.privileged_allowed = true;
    let spec = case.build().unwrap();
    let bounding = process(&spec).capabilities().as_ref().unwrap().bounding().clone().unwrap();
    assert_eq!(bounding, caps::known(), "all capabilities, whatever add/drop say");
    let l = linux(&spec);
    assert_eq!(l.masked_paths().as_deref(), Some(&[][..]));
    let devices = l.devices().clone().unwrap();
    assert!(devices.iter().any(|d| d.path() == Path::new("/dev/null")), "host devices");
    let rules = l.resources().as_ref().unwrap().devices().clone().unwrap();
    assert!(rules.len() == 1 && rules[0].allow(), "all devices allowed");
    let sys = spec.mounts().as_ref().unwrap().iter().find(|m| m.destination() == Path::new("/sys")).unwrap();
    assert!(sys.options().as_ref().unwrap().contains(&"rw".to_owned()));
}

fn namespace_list(spec: &Spec) -> Vec<(LinuxNamespaceType, Option<PathBuf>)> {
    linux(spec).namespaces().clone().unwrap().iter().map(|n| (n.typ(), n.path().clone())).collect()
}

#[test]
fn namespaces_join_the_pods_or_stay_the_hosts() {
    use LinuxNamespaceType::{Ipc, Mount, Network, Pid, Uts};
    let mut case = Case::new();
    let mode = |case: &mut Case, pid: api::NamespaceMode| {
        case.sc().namespace_options = Some(api::NamespaceOption { pid: pid as i32, ..Default::default() });
    };
    let joined = vec![
        (Mount, None),
        (Network, Some(PathBuf::from("/run/ns/net"))),
        (Ipc, Some(PathBuf::from("/run/ns/ipc"))),
        (Uts, Some(PathBuf::from("/run/ns/uts"))),
    ];
    let with = |extra: Option<(LinuxNamespaceType, Option<PathBuf>)>| {
        let mut list = joined.clone();
        list.extend(extra);
        list
    };
    assert_eq!(
        namespace_list(&case.build().unwrap()),
        with(Some((Pid, Some("/run/ns/pid".into())))),
        "no options: the protobuf default, POD (as containerd reads it)"
    );
    mode(&mut case, api::NamespaceMode::Pod);
    assert_eq!(namespace_list(&case.build().unwrap()), with(Some((Pid, Some("/run/ns/pid".into())))));
    mode(&mut case, api::NamespaceMode::Node);
    assert_eq!(namespace_list(&case.build().unwrap()), with(None));
    mode(&mut case, api::NamespaceMode::Container);
    assert_eq!(namespace_list(&case.build().unwrap()), with(Some((Pid, None))));
    mode(&mut case, api::NamespaceMode::Pod);
    case.namespaces.pid = None;
    assert_eq!(
        namespace_list(&case.build().unwrap()),
        with(Some((Pid, None))),
        "POD without a pod namespace"
    );
    mode(&mut case, api::NamespaceMode::Target);
    assert!(matches!(case.build(), Err(SpecError::UnsupportedNamespace("TARGET"))));

    // The host's network, IPC and UTS namespaces: left out; no hostname; the host's /dev/shm.
    mode(&mut case, api::NamespaceMode::Container);
    case.namespaces = PodNamespaces::default();
    let spec = case.build().unwrap();
    assert_eq!(namespace_list(&spec), vec![(Mount, None), (Pid, None)]);
    assert_eq!(spec.hostname(), &None);
    let shm =
        spec.mounts().as_ref().unwrap().iter().find(|m| m.destination() == Path::new("/dev/shm")).unwrap();
    assert_eq!(shm.source().as_deref(), Some(Path::new("/dev/shm")));
}

#[test]
fn unified_hosts_give_unprivileged_containers_a_cgroup_namespace() {
    let mut case = Case::new();
    let host = Host { unified_cgroups: true, ..test_host() };
    let on_unified = |case: &Case| {
        let input = SpecInput {
            container: &case.container,
            sandbox: &case.sandbox,
            image: &case.image,
            rootfs: case.rootfs.path(),
            namespaces: &case.namespaces,
            files: &case.files,
            cgroups_path: &case.cgroups_path,
            privileged_allowed: true,
            recursive_read_only_supported: false,
        };
        build_on(&input, &host).unwrap()
    };
    let has_cgroup_ns = |spec: &Spec| {
        namespace_list(spec).iter().any(|(t, p)| *t == LinuxNamespaceType::Cgroup && p.is_none())
    };
    assert!(has_cgroup_ns(&on_unified(&case)));
    assert!(!has_cgroup_ns(&case.build().unwrap()), "not on v1 or hybrid hosts");
    case.sc().privileged = true;
    case.sandbox.linux = Some(api::LinuxPodSandboxConfig {
        security_context: Some(api::LinuxSandboxSecurityContext { privileged: true, ..Default::default() }),
        ..Default::default()
    });
    assert!(!has_cgroup_ns(&on_unified(&case)), "privileged containers see the host's cgroups");
}

#[test]
fn pod_sysctls_apply_to_the_namespaces_the_container_joins() {
    let mut case = Case::new();
    let sysctls = HashMap::from([
        ("net.ipv4.ip_unprivileged_port_start".to_owned(), "0".to_owned()),
        ("kernel.shm_rmid_forced".to_owned(), "1".to_owned()),
        ("kernel.domainname".to_owned(), "example".to_owned()),
    ]);
    case.sandbox.linux = Some(api::LinuxPodSandboxConfig { sysctls: sysctls.clone(), ..Default::default() });
    assert_eq!(linux(&case.build().unwrap()).sysctl().clone().unwrap(), sysctls);
    case.namespaces.net = None;
    let got = linux(&case.build().unwrap()).sysctl().clone().unwrap();
    assert!(!got.contains_key("net.ipv4.ip_unprivileged_port_start") && got.len() == 2);
    case.namespaces = PodNamespaces::default();
    assert_eq!(linux(&case.build().unwrap()).sysctl(), &None);
}

#[test]
fn resources_cgroups_path_and_oom_score_adj() {
    let mut case = Case::new();
    case.cgroups_path = "/kubepods/pod1/c1".into();
    case.container.linux.get_or_insert_with(Default::default).resources =
        Some(api::LinuxContainerResources {
            cpu_shares: 256,
            memory_limit_in_bytes: 1 << 26,
            oom_score_adj: 1500,
            ..Default::default()
        });
    let spec = case.build().unwrap();
    assert_eq!(process(&spec).oom_score_adj(), Some(1000), "clamped to the kernel's range");
    let l = linux(&spec);
    assert_eq!(l.cgroups_path().as_deref(), Some(Path::new("/kubepods/pod1/c1")));
    let resources = l.resources().as_ref().unwrap();
    assert_eq!(resources.cpu().as_ref().and_then(oci_spec::runtime::LinuxCpu::shares), Some(256));
    assert_eq!(resources.memory().as_ref().and_then(oci_spec::runtime::LinuxMemory::limit), Some(1 << 26));
}

#[test]
fn errors_map_to_grpc_codes() {
    let io = || io::Error::from(io::ErrorKind::PermissionDenied);
    let cases: Vec<(SpecError, tonic::Code)> = vec![
        (SpecError::NoCommand, tonic::Code::InvalidArgument),
        (SpecError::PrivilegedNotAllowed, tonic::Code::InvalidArgument),
        (SpecError::UnknownCapability("X".into()), tonic::Code::InvalidArgument),
        (SpecError::InvalidMount { path: "x".into(), reason: "r" }, tonic::Code::InvalidArgument),
        (SpecError::MountSource { path: "/x".into(), source: io() }, tonic::Code::FailedPrecondition),
        (SpecError::Device { path: "/x".into(), source: io() }, tonic::Code::FailedPrecondition),
        (SpecError::Rootfs { path: "/x".into(), source: io() }, tonic::Code::Internal),
        (SpecError::HostDevices(io()), tonic::Code::Internal),
    ];
    for (err, code) in cases {
        let message = err.to_string();
        let status = tonic::Status::from(err);
        assert_eq!(status.code(), code, "{message}");
        assert_eq!(status.message(), message);
    }
}

#[test]
fn annotate_adds_the_sandbox_id_and_image_name() {
    let mut spec = Case::new().build().unwrap();
    annotate(&mut spec, "sandbox-1", "docker.io/library/busybox:latest");
    let annotations = spec.annotations().clone().unwrap();
    assert_eq!(annotations[annotations::SANDBOX_ID], "sandbox-1");
    assert_eq!(annotations[annotations::IMAGE_NAME], "docker.io/library/busybox:latest");
    assert_eq!(annotations[annotations::CONTAINER_TYPE], "container", "kept");
}

const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/container-spec.json");

/// Capability sets are hash sets: sorted for a stable file.
fn sorted_json(spec: &Spec) -> serde_json::Value {
    let mut value = serde_json::to_value(spec).unwrap();
    if let Some(caps) = value.pointer_mut("/process/capabilities").and_then(|c| c.as_object_mut()) {
        for list in caps.values_mut() {
            if let Some(items) = list.as_array_mut() {
                items.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
            }
        }
    }
    value
}

/// One full spec against tests/golden/container-spec.json (`KEEL_UPDATE_GOLDEN=1` rewrites it).
#[test]
fn a_full_spec_matches_the_golden_file() {
    let mut case = Case::new();
    case.image = image(
        &["/docker-entrypoint.sh"],
        &["nginx"],
        &["PATH=/usr/bin:/bin", "NGINX_VERSION=1.25"],
        "/srv",
        "app",
    );
    case.container.args = strings(&["nginx", "-g", "daemon off;"]);
    case.container.envs = vec![api::KeyValue { key: "MODE".into(), value: "test".into() }];
    case.container.mounts = vec![api::Mount {
        container_path: "/config".into(),
        host_path: "/etc".into(),
        readonly: true,
        ..Default::default()
    }];
    case.container.linux = Some(api::LinuxContainerConfig {
        resources: Some(api::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 512,
            memory_limit_in_bytes: 128 << 20,
            oom_score_adj: 984,
            ..Default::default()
        }),
        security_context: Some(api::LinuxContainerSecurityContext {
            capabilities: Some(api::Capability {
                add_capabilities: strings(&["NET_ADMIN"]),
                drop_capabilities: strings(&["MKNOD"]),
                add_ambient_capabilities: Vec::new(),
            }),
            namespace_options: Some(api::NamespaceOption {
                pid: api::NamespaceMode::Pod as i32,
                ..Default::default()
            }),
            supplemental_groups: vec![2000],
            masked_paths: strings(&["/proc/acpi", "/proc/kcore"]),
            readonly_paths: strings(&["/proc/bus", "/proc/sys"]),
            no_new_privs: true,
            ..Default::default()
        }),
    });
    case.sandbox.linux = Some(api::LinuxPodSandboxConfig {
        sysctls: HashMap::from([("net.ipv4.ping_group_range".to_owned(), "0 2147483647".to_owned())]),
        ..Default::default()
    });
    case.files = PodFiles {
        hostname: Some("/var/lib/keel-shim/sandboxes/s1/hostname".into()),
        hosts: Some("/var/lib/keel-shim/sandboxes/s1/hosts".into()),
        resolv_conf: Some("/var/lib/keel-shim/sandboxes/s1/resolv.conf".into()),
        shm: None,
    };
    case.cgroups_path = "/kubepods/burstable/poduid-1/c1".into();
    let mut spec = case.build().unwrap();
    annotate(&mut spec, "s1", "docker.io/library/nginx:1.25");
    // The rootfs is a temporary directory: the golden file holds a fixed path.
    let mut root = spec.root().clone().unwrap();
    root.set_path(PathBuf::from("/var/lib/keel-shim/containers/c1/bundle/rootfs"));
    spec.set_root(Some(root));

    let got = sorted_json(&spec);
    if std::env::var_os("KEEL_UPDATE_GOLDEN").is_some() {
        std::fs::write(GOLDEN, serde_json::to_string_pretty(&got).unwrap() + "\n").unwrap();
    }
    let want: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(GOLDEN).unwrap()).unwrap();
    assert_eq!(got, want, "got:\n{}", serde_json::to_string_pretty(&got).unwrap());
    // The golden file is a spec runc would read back identically.
    let reread: Spec = serde_json::from_value(want).unwrap();
    assert_eq!(reread, spec);
}
