//! The container process's user: uid, gid and additional gids from the CRI security context or the
//! image's `User`, names resolved through the rootfs's /etc/passwd and /etc/group as containerd's
//! `WithUser`, `WithUserID`, `WithUsername` and `WithAdditionalGIDs` resolve them.
//!
//! The rootfs is the container's (an image's layers): its files are read with `openat2` and
//! `RESOLVE_IN_ROOT`, so a symlink such as `/etc/passwd -> /../../etc/shadow` resolves inside the rootfs
//! and never reaches the host's files.

use std::io::{self, Read};
use std::os::fd::AsFd;
use std::path::Path;

use k8s_cri::v1 as api;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag, openat2};
use nix::sys::stat::Mode;

use super::SpecError;

/// One /etc/passwd entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Passwd {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

/// One /etc/group entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Group {
    pub name: String,
    pub gid: u32,
    pub members: Vec<String>,
}

/// The uid, gid and additional gids of the container process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ProcessUser {
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
}

/// Reads `path` (absolute inside the rootfs) with every symlink resolved inside `root`; `None` when
/// it does not exist.
pub(super) fn read_in_root(root: &Path, path: &str) -> Result<Option<String>, SpecError> {
    let fail =
        |source: io::Error| SpecError::Rootfs { path: root.join(path.trim_start_matches('/')), source };
    let dir = std::fs::File::open(root).map_err(fail)?;
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_CLOEXEC)
        .mode(Mode::empty())
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let relative = path.trim_start_matches('/');
    let fd = match openat2(dir.as_fd(), relative, how) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR) => return Ok(None),
        Err(errno) => return Err(fail(io::Error::from(errno))),
    };
    let mut text = String::new();
    // Files under /etc are small; a bound keeps a hostile image from making keel-shim read forever.
    std::fs::File::from(fd).take(16 << 20).read_to_string(&mut text).map_err(fail)?;
    Ok(Some(text))
}

/// /etc/passwd entries (lines that do not parse are skipped).
pub(super) fn parse_passwd(text: &str) -> Vec<Passwd> {
    text.lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            Some(Passwd {
                name: (*fields.first()?).to_owned(),
                uid: fields.get(2)?.trim().parse().ok()?,
                gid: fields.get(3)?.trim().parse().ok()?,
            })
        })
        .collect()
}

/// /etc/group entries (lines that do not parse are skipped).
pub(super) fn parse_group(text: &str) -> Vec<Group> {
    text.lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(':').collect();
            Some(Group {
                name: (*fields.first()?).to_owned(),
                gid: fields.get(2)?.trim().parse().ok()?,
                members: fields
                    .get(3)
                    .map(|list| {
                        list.split(',').map(str::trim).filter(|m| !m.is_empty()).map(str::to_owned).collect()
                    })
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// The rootfs's users and groups, read once (a missing file is an empty list).
#[derive(Debug, Default)]
pub(super) struct Accounts {
    passwd: Option<Vec<Passwd>>,
    group: Option<Vec<Group>>,
}

impl Accounts {
    pub(super) fn read(root: &Path) -> Result<Accounts, SpecError> {
        Ok(Accounts {
            passwd: read_in_root(root, "/etc/passwd")?.map(|text| parse_passwd(&text)),
            group: read_in_root(root, "/etc/group")?.map(|text| parse_group(&text)),
        })
    }

    #[cfg(test)]
    pub(super) fn from_text(passwd: Option<&str>, group: Option<&str>) -> Accounts {
        Accounts { passwd: passwd.map(parse_passwd), group: group.map(parse_group) }
    }

    fn user_by_name(&self, name: &str) -> Option<&Passwd> {
        self.passwd.as_deref()?.iter().find(|p| p.name == name)
    }

    fn user_by_uid(&self, uid: u32) -> Option<&Passwd> {
        self.passwd.as_deref()?.iter().find(|p| p.uid == uid)
    }

    fn group_by_name(&self, name: &str) -> Option<&Group> {
        self.group.as_deref()?.iter().find(|g| g.name == name)
    }
}

/// The user string containerd builds from the security context (`generateUserString`): the
/// username, else the uid, with `:gid` when a group is given; a group without a user is an error.
fn security_context_user(sc: Option<&api::LinuxContainerSecurityContext>) -> Result<String, SpecError> {
    let Some(sc) = sc else { return Ok(String::new()) };
    let mut user = sc.run_as_user.as_ref().map(|v| v.value.to_string()).unwrap_or_default();
    if !sc.run_as_username.is_empty() {
        user.clone_from(&sc.run_as_username);
    }
    match (&sc.run_as_group, user.is_empty()) {
        (Some(group), true) => Err(SpecError::GroupWithoutUser(group.value)),
        (Some(group), false) => Ok(format!("{user}:{}", group.value)),
        (None, _) => Ok(user),
    }
}

/// A numeric id, as Go's `strconv.Atoi` would accept it for an id (an empty part is id 0 there too).
fn numeric_id(part: &str, userstr: &str) -> Result<Option<u32>, SpecError> {
    if part.is_empty() {
        return Ok(Some(0));
    }
    if part.bytes().all(|b| b.is_ascii_digit()) {
        return part.parse().map(Some).map_err(|_| SpecError::InvalidUser(userstr.to_owned()));
    }
    if part.starts_with('-') && part[1..].bytes().all(|b| b.is_ascii_digit()) {
        return Err(SpecError::InvalidUser(userstr.to_owned()));
    }
    Ok(None)
}

/// uid and gid of a user string (`uid`, `name`, `uid:gid`, `name:group`, ...) as containerd's
/// `WithUser` resolves it: a lone uid takes its passwd entry's gid (0 when it has none), a lone name
/// must exist in passwd, names in `user:group` must exist in passwd/group.
pub(super) fn resolve_user(accounts: &Accounts, userstr: &str) -> Result<(u32, u32), SpecError> {
    if userstr.is_empty() {
        return Ok((0, 0));
    }
    let parts: Vec<&str> = userstr.split(':').collect();
    match parts.as_slice() {
        [user] => match numeric_id(user, userstr)? {
            Some(uid) => Ok((uid, accounts.user_by_uid(uid).map_or(0, |p| p.gid))),
            None => accounts
                .user_by_name(user)
                .map(|p| (p.uid, p.gid))
                .ok_or_else(|| SpecError::UserNotFound((*user).to_owned())),
        },
        [user, group] => {
            let uid = match numeric_id(user, userstr)? {
                Some(uid) => uid,
                None => {
                    accounts
                        .user_by_name(user)
                        .ok_or_else(|| SpecError::UserNotFound((*user).to_owned()))?
                        .uid
                }
            };
            let gid = match numeric_id(group, userstr)? {
                Some(gid) => gid,
                None => {
                    accounts
                        .group_by_name(group)
                        .ok_or_else(|| SpecError::GroupNotFound((*group).to_owned()))?
                        .gid
                }
            };
            Ok((uid, gid))
        }
        _ => Err(SpecError::InvalidUser(userstr.to_owned())),
    }
}

/// The gids of the groups that list the user as a member (not its own-named group), as containerd's
/// `WithAdditionalGIDs`: a uid is turned into its name through passwd first (none: no groups).
pub(super) fn membership_gids(accounts: &Accounts, user: &str) -> Vec<u32> {
    let name = match user.parse::<u32>() {
        Ok(uid) => match accounts.user_by_uid(uid) {
            Some(entry) => entry.name.clone(),
            None => return Vec::new(),
        },
        Err(_) => user.to_owned(),
    };
    accounts
        .group
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|g| g.name != name && g.members.contains(&name))
        .map(|g| g.gid)
        .collect()
}

/// The process user of a container. The user is the security context's (`run_as_username`, else
/// `run_as_user`, with `run_as_group`), else the image's `User`, else root. Additional gids, sorted
/// and unique: the primary gid, the groups listing the user in /etc/group (unless the
/// supplemental-groups policy is Strict), and `supplemental_groups` — the user looked up for the
/// groups is the security context's, else the image user's name part, else "0", as containerd (since
/// 1.7; 1.6 ignored the image's user here).
pub(super) fn process_user(
    accounts: &Accounts,
    sc: Option<&api::LinuxContainerSecurityContext>,
    image_user: &str,
) -> Result<ProcessUser, SpecError> {
    let mut userstr = security_context_user(sc)?;
    if userstr.is_empty() {
        image_user.clone_into(&mut userstr);
    }
    let (uid, gid) = resolve_user(accounts, &userstr)?;

    let group_user = match sc {
        Some(sc) if !sc.run_as_username.is_empty() => sc.run_as_username.clone(),
        Some(sc) if sc.run_as_user.is_some() => sc.run_as_user.as_ref().map_or(0, |v| v.value).to_string(),
        _ if !image_user.is_empty() => image_user.split(':').next().unwrap_or_default().to_owned(),
        _ => "0".to_owned(),
    };
    let strict =
        sc.is_some_and(|sc| sc.supplemental_groups_policy == api::SupplementalGroupsPolicy::Strict as i32);
    let mut gids = vec![gid];
    if !strict {
        gids.extend(membership_gids(accounts, &group_user));
    }
    for group in sc.map(|sc| sc.supplemental_groups.as_slice()).unwrap_or_default() {
        gids.push(u32::try_from(*group).map_err(|_| SpecError::InvalidGroup(*group))?);
    }
    gids.sort_unstable();
    gids.dedup();
    Ok(ProcessUser { uid, gid, additional_gids: gids })
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n# comment\nbroken line\n\
        app:x:1000:1001::/home/app:/bin/sh\nnobody:x:65534:65534::/:/sbin/nologin\n";
    const GROUP: &str = "root:x:0:\nwheel:x:10:root,app\napp:x:1001:app\nvideo:x:44:app\nusers:x:100:other\n";

    fn accounts() -> Accounts {
        Accounts::from_text(Some(PASSWD), Some(GROUP))
    }

    #[test]
    fn user_strings_resolve_as_containerd_resolves_them() {
        let a = accounts();
        let none = Accounts::default();
        type Case<'a> = (&'a Accounts, &'a str, Result<(u32, u32), &'a str>);
        let cases: &[Case<'_>] = &[
            (&a, "", Ok((0, 0))),
            (&a, "0", Ok((0, 0))),
            (&a, "1000", Ok((1000, 1001))),
            (&a, "4242", Ok((4242, 0))),
            (&none, "1000", Ok((1000, 0))),
            (&a, "app", Ok((1000, 1001))),
            (&a, "ghost", Err("user \"ghost\"")),
            (&none, "app", Err("user \"app\"")),
            (&a, "1000:44", Ok((1000, 44))),
            (&a, "app:video", Ok((1000, 44))),
            (&a, "7:video", Ok((7, 44))),
            (&a, "app:5", Ok((1000, 5))),
            (&a, ":5", Ok((0, 5))),
            (&a, "app:ghosts", Err("group \"ghosts\"")),
            (&a, "a:b:c", Err("invalid")),
            (&a, "-1", Err("invalid")),
            (&a, "99999999999", Err("invalid")),
        ];
        for (accounts, userstr, want) in cases {
            let got = resolve_user(accounts, userstr);
            match (want, got) {
                (Ok(want), Ok(got)) => assert_eq!(got, *want, "{userstr}"),
                (Err(want), Err(err)) => assert!(err.to_string().contains(want), "{userstr}: {err}"),
                (want, got) => panic!("{userstr}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn membership_excludes_the_users_own_group() {
        let a = accounts();
        assert_eq!(membership_gids(&a, "app"), vec![10, 44]);
        assert_eq!(membership_gids(&a, "1000"), vec![10, 44]);
        assert_eq!(membership_gids(&a, "0"), vec![10]);
        assert_eq!(membership_gids(&a, "4242"), Vec::<u32>::new(), "a uid without a name has no groups");
        assert_eq!(membership_gids(&Accounts::default(), "app"), Vec::<u32>::new());
    }

    fn sc(f: impl FnOnce(&mut api::LinuxContainerSecurityContext)) -> api::LinuxContainerSecurityContext {
        let mut sc = api::LinuxContainerSecurityContext::default();
        f(&mut sc);
        sc
    }

    #[test]
    fn process_user_merges_security_context_image_and_groups() {
        let a = accounts();
        let user = |sc: Option<&api::LinuxContainerSecurityContext>, image: &str| process_user(&a, sc, image);

        // Nothing anywhere: root, root's memberships.
        assert_eq!(user(None, "").unwrap(), ProcessUser { uid: 0, gid: 0, additional_gids: vec![0, 10] });
        // The image's user.
        assert_eq!(
            user(None, "app").unwrap(),
            ProcessUser { uid: 1000, gid: 1001, additional_gids: vec![10, 44, 1001] }
        );
        assert_eq!(
            user(None, "app:video").unwrap(),
            ProcessUser { uid: 1000, gid: 44, additional_gids: vec![10, 44] }
        );
        // run_as_user overrides the image.
        let by_uid = sc(|s| s.run_as_user = Some(api::Int64Value { value: 65534 }));
        assert_eq!(
            user(Some(&by_uid), "app").unwrap(),
            ProcessUser { uid: 65534, gid: 65534, additional_gids: vec![65534] }
        );
        // run_as_username overrides run_as_user; run_as_group sets the gid.
        let by_name = sc(|s| {
            s.run_as_user = Some(api::Int64Value { value: 5 });
            s.run_as_username = "app".into();
            s.run_as_group = Some(api::Int64Value { value: 3000 });
            s.supplemental_groups = vec![2000, 10];
        });
        assert_eq!(
            user(Some(&by_name), "").unwrap(),
            ProcessUser { uid: 1000, gid: 3000, additional_gids: vec![10, 44, 2000, 3000] }
        );
        // Strict: no /etc/group memberships.
        let strict = sc(|s| {
            s.run_as_user = Some(api::Int64Value { value: 1000 });
            s.supplemental_groups = vec![7];
            s.supplemental_groups_policy = api::SupplementalGroupsPolicy::Strict as i32;
        });
        assert_eq!(
            user(Some(&strict), "").unwrap(),
            ProcessUser { uid: 1000, gid: 1001, additional_gids: vec![7, 1001] }
        );
        // Errors.
        let group_only = sc(|s| s.run_as_group = Some(api::Int64Value { value: 5 }));
        assert!(matches!(user(Some(&group_only), "app"), Err(SpecError::GroupWithoutUser(5))));
        let negative = sc(|s| {
            s.run_as_user = Some(api::Int64Value { value: 0 });
            s.supplemental_groups = vec![-1];
        });
        assert!(matches!(user(Some(&negative), ""), Err(SpecError::InvalidGroup(-1))));
        let negative_uid = sc(|s| s.run_as_user = Some(api::Int64Value { value: -3 }));
        assert!(matches!(user(Some(&negative_uid), ""), Err(SpecError::InvalidUser(_))));
    }

    #[test]
    fn rootfs_files_are_read_without_leaving_the_rootfs() {
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("secret"), "host:x:0:0::/:/bin/sh\n").unwrap();
        let root = host.path().join("rootfs");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        // An absolute symlink and a climbing relative one, both aimed at the host's file.
        let target = host.path().join("secret");
        symlink(&target, root.join("etc/passwd")).unwrap();
        symlink("../../secret", root.join("etc/group")).unwrap();
        assert_eq!(read_in_root(&root, "/etc/passwd").unwrap(), None, "resolved inside the rootfs: absent");
        assert_eq!(read_in_root(&root, "/etc/group").unwrap(), None);
        // A symlink that stays inside resolves.
        std::fs::write(root.join("etc/real"), "app:x:1:2::/:/bin/sh\n").unwrap();
        std::fs::remove_file(root.join("etc/passwd")).unwrap();
        symlink("/etc/real", root.join("etc/passwd")).unwrap();
        let accounts = Accounts::read(&root).unwrap();
        assert_eq!(resolve_user(&accounts, "app").unwrap(), (1, 2));
        // No /etc at all.
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(read_in_root(empty.path(), "/etc/passwd").unwrap(), None);
        // A missing rootfs is an error.
        assert!(matches!(
            read_in_root(&empty.path().join("nope"), "/etc/passwd"),
            Err(SpecError::Rootfs { .. })
        ));
    }
}
