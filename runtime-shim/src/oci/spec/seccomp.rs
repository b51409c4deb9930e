//! The container's seccomp filter (`linux.seccomp`), chosen from its CRI security context as
//! containerd 1.6's CRI plugin chooses it (`generateSeccompSecurityProfile`):
//! - the `seccomp` field when set: RuntimeDefault (the field's zero value), Unconfined, or Localhost
//!   with `localhost_ref` the profile file's path;
//! - else the deprecated `seccomp_profile_path`: `runtime/default` or `docker/default`, `unconfined`,
//!   `localhost/<path>`, or empty — unconfined, as containerd without `unset_seccomp_profile`;
//! - privileged containers get no filter, whatever they ask (as containerd and the kubelet's docs).
//!
//! A Localhost profile is a file in the format Docker and containerd load (`defaultAction`,
//! `architectures`, `archMap`, `syscalls` with `name` or `names`, `action`, `errnoRet`, `args`, and
//! `includes`/`excludes` by capability and architecture); an OCI `linux.seccomp` object is one such file.
//!
//! RuntimeDefault is keel-shim's own profile ([`runtime_default`]): everything allowed but the system
//! calls Docker's seccomp documentation lists as blocked by its default profile, each denied with EPERM
//! unless the container holds the capability that allows it there, namespace-creating clone(2) flags
//! without CAP_SYS_ADMIN, and clone3 answering ENOSYS (libc falls back to clone, whose flags the filter
//! can see). It is a deny-list, not moby's allow-list: a system call this table does not name is
//! allowed.

use std::path::Path;

use oci_spec::runtime::{
    Arch, Capabilities, Capability, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg,
    LinuxSeccompArgBuilder, LinuxSeccompFilterFlag, LinuxSeccompOperator, LinuxSyscall,
};
use serde::Deserialize;

use k8s_cri::v1 as api;

use super::SpecError;

/// The filter for a container with security context `sc` and capabilities `caps`; `None` is
/// unconfined.
pub(super) fn seccomp(
    sc: Option<&api::LinuxContainerSecurityContext>,
    privileged: bool,
    caps: &Capabilities,
) -> Result<Option<LinuxSeccomp>, SpecError> {
    if privileged {
        return Ok(None);
    }
    let Some(sc) = sc else { return Ok(None) };
    let choice = match &sc.seccomp {
        Some(profile) => match api::security_profile::ProfileType::try_from(profile.profile_type) {
            Ok(api::security_profile::ProfileType::RuntimeDefault) => Choice::RuntimeDefault,
            Ok(api::security_profile::ProfileType::Unconfined) => Choice::Unconfined,
            Ok(api::security_profile::ProfileType::Localhost) => Choice::Localhost(&profile.localhost_ref),
            Err(_) => return Err(unsupported(&format!("profile type {}", profile.profile_type))),
        },
        #[expect(deprecated, reason = "the deprecated field is still sent by older kubelets and critest")]
        None => match sc.seccomp_profile_path.as_str() {
            "" | "unconfined" => Choice::Unconfined,
            "runtime/default" | "docker/default" => Choice::RuntimeDefault,
            path => match path.strip_prefix("localhost/") {
                Some(file) => Choice::Localhost(file),
                None => return Err(unsupported(path)),
            },
        },
    };
    match choice {
        Choice::Unconfined => Ok(None),
        Choice::RuntimeDefault => runtime_default(caps).map(Some),
        Choice::Localhost(path) => localhost(Path::new(path), caps).map(Some),
    }
}

enum Choice<'a> {
    RuntimeDefault,
    Unconfined,
    Localhost(&'a str),
}

fn unsupported(what: &str) -> SpecError {
    SpecError::Seccomp { profile: what.to_owned(), reason: "unsupported seccomp profile".to_owned() }
}

/// System calls RuntimeDefault denies (EPERM), each with the capability that allows it (`None`: never).
const DENIED: &[(&[&str], Option<Capability>)] = &[
    (&["acct"], Some(Capability::SysPacct)),
    // The kernel keyring is not namespaced.
    (&["add_key", "keyctl", "request_key"], None),
    (&["bpf"], Some(Capability::SysAdmin)),
    (&["clock_adjtime", "clock_settime", "settimeofday", "stime"], Some(Capability::SysTime)),
    (
        &["create_module", "delete_module", "finit_module", "get_kernel_syms", "init_module", "query_module"],
        Some(Capability::SysModule),
    ),
    (&["get_mempolicy", "mbind", "move_pages", "set_mempolicy"], Some(Capability::SysNice)),
    (&["ioperm", "iopl"], Some(Capability::SysRawio)),
    (&["kcmp", "process_vm_readv", "process_vm_writev", "userfaultfd"], Some(Capability::SysPtrace)),
    (&["kexec_file_load", "kexec_load", "reboot"], Some(Capability::SysBoot)),
    (
        &[
            "fanotify_init",
            "fsconfig",
            "fsmount",
            "fsopen",
            "fspick",
            "lookup_dcookie",
            "mount",
            "mount_setattr",
            "move_mount",
            "name_to_handle_at",
            "open_tree",
            "perf_event_open",
            "pivot_root",
            "quotactl",
            "setns",
            "swapoff",
            "swapon",
            "umount",
            "umount2",
            "unshare",
        ],
        Some(Capability::SysAdmin),
    ),
    (&["_sysctl", "nfsservctl", "sysfs", "uselib", "ustat", "vm86", "vm86old"], None),
    (&["open_by_handle_at"], Some(Capability::DacReadSearch)),
    (&["syslog"], Some(Capability::Syslog)),
];

/// clone(2) flags that make namespaces (linux/sched.h): denied without CAP_SYS_ADMIN.
const CLONE_NAMESPACE_FLAGS: &[u64] = &[
    0x0002_0000, // CLONE_NEWNS
    0x0200_0000, // CLONE_NEWCGROUP
    0x0400_0000, // CLONE_NEWUTS
    0x0800_0000, // CLONE_NEWIPC
    0x1000_0000, // CLONE_NEWUSER
    0x2000_0000, // CLONE_NEWPID
    0x4000_0000, // CLONE_NEWNET
];

const EPERM: u32 = 1;
const ENOSYS: u32 = 38;

/// The architectures a filter covers on this machine: the native one and those its processes may
/// also run as.
fn native_architectures() -> Vec<Arch> {
    if cfg!(target_arch = "x86_64") {
        vec![Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32]
    } else if cfg!(target_arch = "aarch64") {
        vec![Arch::ScmpArchAarch64, Arch::ScmpArchArm]
    } else {
        vec![Arch::ScmpArchNative]
    }
}

fn rule(names: Vec<String>, errno: u32, args: Vec<LinuxSeccompArg>) -> LinuxSyscall {
    let mut syscall = LinuxSyscall::default();
    syscall.set_names(names);
    syscall.set_action(LinuxSeccompAction::ScmpActErrno);
    syscall.set_errno_ret(Some(errno));
    syscall.set_args((!args.is_empty()).then_some(args));
    syscall
}

/// keel-shim's RuntimeDefault profile for a container holding `caps` (see the module docs).
pub(super) fn runtime_default(caps: &Capabilities) -> Result<LinuxSeccomp, SpecError> {
    let mut syscalls = Vec::new();
    let denied: Vec<String> = DENIED
        .iter()
        .filter(|(_, allowed_by)| allowed_by.is_none_or(|cap| !caps.contains(&cap)))
        .flat_map(|(names, _)| names.iter().map(|&n| n.to_owned()))
        .collect();
    syscalls.push(rule(denied, EPERM, Vec::new()));
    if !caps.contains(&Capability::SysAdmin) {
        for &flag in CLONE_NAMESPACE_FLAGS {
            // clone's flags are its first argument on x86 and arm; (flags & flag) == flag.
            let arg = LinuxSeccompArgBuilder::default()
                .index(0_usize)
                .value(flag)
                .value_two(flag)
                .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
                .build()
                .map_err(|e| SpecError::Seccomp {
                    profile: "RuntimeDefault".to_owned(),
                    reason: e.to_string(),
                })?;
            syscalls.push(rule(vec!["clone".to_owned()], EPERM, vec![arg]));
        }
        syscalls.push(rule(vec!["clone3".to_owned()], ENOSYS, Vec::new()));
    }
    let mut filter = LinuxSeccomp::default();
    filter.set_default_action(LinuxSeccompAction::ScmpActAllow);
    filter.set_architectures(Some(native_architectures()));
    filter.set_syscalls(Some(syscalls));
    Ok(filter)
}

/// A profile file in Docker's and containerd's format (an OCI `linux.seccomp` object is one too).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Profile {
    default_action: LinuxSeccompAction,
    #[serde(default)]
    default_errno_ret: Option<u32>,
    #[serde(default)]
    architectures: Vec<Arch>,
    #[serde(default)]
    arch_map: Vec<ArchMap>,
    #[serde(default)]
    flags: Vec<LinuxSeccompFilterFlag>,
    #[serde(default)]
    listener_path: Option<std::path::PathBuf>,
    #[serde(default)]
    listener_metadata: Option<String>,
    #[serde(default)]
    syscalls: Vec<Syscall>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArchMap {
    architecture: Arch,
    #[serde(default)]
    sub_architectures: Vec<Arch>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Syscall {
    #[serde(default)]
    name: String,
    #[serde(default)]
    names: Vec<String>,
    action: LinuxSeccompAction,
    #[serde(default)]
    errno_ret: Option<u32>,
    #[serde(default)]
    args: Vec<LinuxSeccompArg>,
    #[serde(default)]
    includes: Filter,
    #[serde(default)]
    excludes: Filter,
}

/// When a rule applies: every capability of `caps` held (includes) or any held (excludes), this
/// machine's architecture among `arches` (Go's names: amd64, arm64, ...).
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Filter {
    #[serde(default)]
    caps: Vec<String>,
    #[serde(default)]
    arches: Vec<String>,
}

/// This machine's architecture in Go's spelling, as profiles name it.
const GO_ARCH: &str = if cfg!(target_arch = "x86_64") {
    "amd64"
} else if cfg!(target_arch = "aarch64") {
    "arm64"
} else {
    std::env::consts::ARCH
};

fn holds(caps: &Capabilities, name: &str) -> bool {
    caps.iter().any(|cap| {
        serde_json::to_value(cap).is_ok_and(|v| v.as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)))
    })
}

/// Reads the Localhost profile at `path` for a container holding `caps`.
fn localhost(path: &Path, caps: &Capabilities) -> Result<LinuxSeccomp, SpecError> {
    let error = |reason: String| SpecError::Seccomp { profile: path.display().to_string(), reason };
    let text = std::fs::read(path).map_err(|e| error(format!("cannot load seccomp profile: {e}")))?;
    let profile: Profile =
        serde_json::from_slice(&text).map_err(|e| error(format!("decoding seccomp profile failed: {e}")))?;
    Ok(convert(profile, caps))
}

fn convert(profile: Profile, caps: &Capabilities) -> LinuxSeccomp {
    let native = native_architectures();
    let mut architectures = profile.architectures;
    for map in profile.arch_map.iter().filter(|m| native.first() == Some(&m.architecture)) {
        architectures.push(map.architecture);
        architectures.extend(&map.sub_architectures);
    }
    architectures.dedup();
    let applies = |syscall: &Syscall| {
        let included = syscall.includes.caps.iter().all(|c| holds(caps, c))
            && (syscall.includes.arches.is_empty() || syscall.includes.arches.iter().any(|a| a == GO_ARCH));
        let excluded = syscall.excludes.caps.iter().any(|c| holds(caps, c))
            || syscall.excludes.arches.iter().any(|a| a == GO_ARCH);
        included && !excluded
    };
    let syscalls: Vec<LinuxSyscall> = profile
        .syscalls
        .into_iter()
        .filter(applies)
        .map(|s| {
            let mut names = s.names;
            if !s.name.is_empty() {
                names.push(s.name);
            }
            let mut syscall = LinuxSyscall::default();
            syscall.set_names(names);
            syscall.set_action(s.action);
            syscall.set_errno_ret(s.errno_ret);
            syscall.set_args((!s.args.is_empty()).then_some(s.args));
            syscall
        })
        .collect();
    let mut filter = LinuxSeccomp::default();
    filter.set_default_action(profile.default_action);
    filter.set_default_errno_ret(profile.default_errno_ret);
    filter.set_architectures((!architectures.is_empty()).then_some(architectures));
    filter.set_flags((!profile.flags.is_empty()).then_some(profile.flags));
    filter.set_listener_path(profile.listener_path);
    filter.set_listener_metadata(profile.listener_metadata);
    filter.set_syscalls((!syscalls.is_empty()).then_some(syscalls));
    filter
}

#[cfg(test)]
mod tests {
    use super::*;

    #[expect(deprecated, reason = "the deprecated field is part of what is tested")]
    fn context(
        profile: Option<(api::security_profile::ProfileType, &str)>,
        path: &str,
    ) -> api::LinuxContainerSecurityContext {
        api::LinuxContainerSecurityContext {
            seccomp: profile.map(|(typ, localhost)| api::SecurityProfile {
                profile_type: typ.into(),
                localhost_ref: localhost.to_owned(),
            }),
            seccomp_profile_path: path.to_owned(),
            ..Default::default()
        }
    }

    fn denied(filter: &LinuxSeccomp) -> Vec<String> {
        let eperm = |s: &&LinuxSyscall| s.args().is_none() && s.errno_ret() == Some(EPERM);
        filter.syscalls().iter().flatten().filter(eperm).flat_map(|s| s.names().clone()).collect()
    }

    use api::security_profile::ProfileType;

    #[test]
    fn the_field_wins_over_the_deprecated_path_and_privileged_is_unconfined() {
        let caps = super::super::caps::default_set();
        let sc = context(Some((ProfileType::RuntimeDefault, "")), "unconfined");
        assert!(seccomp(Some(&sc), false, &caps).unwrap().is_some());
        assert!(seccomp(Some(&sc), true, &caps).unwrap().is_none(), "privileged: no filter");
        let sc = context(Some((ProfileType::Unconfined, "")), "runtime/default");
        assert!(seccomp(Some(&sc), false, &caps).unwrap().is_none());
        assert!(seccomp(None, false, &caps).unwrap().is_none(), "no security context: unconfined");
        for (path, confined) in
            [("", false), ("unconfined", false), ("runtime/default", true), ("docker/default", true)]
        {
            let sc = context(None, path);
            assert_eq!(seccomp(Some(&sc), false, &caps).unwrap().is_some(), confined, "{path:?}");
        }
        let sc = context(None, "apparmor/nope");
        let err = seccomp(Some(&sc), false, &caps).unwrap_err();
        assert_eq!(err.to_string(), "seccomp profile \"apparmor/nope\": unsupported seccomp profile");
    }

    #[test]
    fn runtime_default_denies_what_the_capabilities_do_not_allow() {
        let caps = super::super::caps::default_set();
        let filter = runtime_default(&caps).unwrap();
        assert_eq!(filter.default_action(), LinuxSeccompAction::ScmpActAllow);
        let names = denied(&filter);
        for name in ["mount", "unshare", "setns", "keyctl", "bpf", "reboot", "init_module", "clock_settime"] {
            assert!(names.iter().any(|n| n == name), "{name} denied by default");
        }
        assert!(names.iter().all(|n| n != "clone3"), "clone3 answers ENOSYS, not EPERM");
        let clone_rules = filter.syscalls().iter().flatten().filter(|s| s.names() == &["clone"]).count();
        assert_eq!(clone_rules, CLONE_NAMESPACE_FLAGS.len());
        let mut admin = caps.clone();
        admin.insert(Capability::SysAdmin);
        admin.insert(Capability::SysTime);
        let filter = runtime_default(&admin).unwrap();
        let names = denied(&filter);
        assert!(names.iter().all(|n| n != "mount" && n != "unshare" && n != "clock_settime"));
        assert!(names.iter().any(|n| n == "keyctl"), "never allowed");
        assert!(
            filter.syscalls().iter().flatten().all(|s| s.names() != &["clone"] && s.names() != &["clone3"])
        );
    }

    #[test]
    fn localhost_profiles_are_read_in_dockers_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.json");
        std::fs::write(
            &path,
            r#"{"defaultAction": "SCMP_ACT_ALLOW",
                "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
                "syscalls": [
                  {"names": ["chmod", "fchmodat"], "action": "SCMP_ACT_ERRNO"},
                  {"name": "sethostname", "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
                  {"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
                  {"names": ["ptrace"], "action": "SCMP_ACT_ERRNO", "excludes": {"caps": ["CAP_SYS_PTRACE"]}}
                ]}"#,
        )
        .unwrap();
        let caps = super::super::caps::default_set();
        let sc = context(Some((ProfileType::Localhost, path.to_str().unwrap())), "");
        let filter = seccomp(Some(&sc), false, &caps).unwrap().unwrap();
        let names: Vec<Vec<String>> = filter.syscalls().iter().flatten().map(|s| s.names().clone()).collect();
        assert_eq!(names, [vec!["chmod", "fchmodat"], vec!["sethostname"], vec!["ptrace"]]);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(
                filter.architectures().as_deref(),
                Some(&[Arch::ScmpArchX86_64, Arch::ScmpArchX86][..])
            );
        }
        let sc = context(None, &format!("localhost/{}", path.display()));
        assert!(seccomp(Some(&sc), false, &caps).unwrap().is_some(), "the deprecated localhost/ form");

        let missing = context(Some((ProfileType::Localhost, "/nonexistent/p.json")), "");
        let err = seccomp(Some(&missing), false, &caps).unwrap_err().to_string();
        assert!(
            err.starts_with("seccomp profile \"/nonexistent/p.json\": cannot load seccomp profile: "),
            "{err}"
        );
        std::fs::write(&path, "{").unwrap();
        let err = seccomp(Some(&sc), false, &caps).unwrap_err().to_string();
        assert!(err.contains("decoding seccomp profile failed"), "{err}");
    }
}
