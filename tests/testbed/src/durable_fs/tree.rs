//! The in-memory inode tree, with a *live* view and a *durable* view. Pure: no FUSE, no I/O.
//!
//! Every operation changes the live view. [`Tree::fsync`] copies one file's content into the
//! durable view and then commits the journal ([`Tree::commit`]): the metadata of every inode
//! changed since the last commit (names, links, attributes) is copied into the durable view,
//! but file content only ever moves there through `fsync`. [`Tree::power_loss`] replaces the
//! live view by the durable one. Errors are `errno` values.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::time::SystemTime;

use super::content::{Content, MAX_FILE_SIZE};

mod namespace;

/// An inode number, as the kernel sees it.
pub(crate) type Ino = u64;
/// The root directory's inode number (FUSE's `FUSE_ROOT_ID`).
pub(crate) const ROOT: Ino = 1;
/// A result whose error is an `errno` value.
pub(crate) type Res<T> = Result<T, libc::c_int>;

/// Longest file name accepted.
pub(crate) const NAME_MAX: usize = 255;
/// Size reported for directories, like most disk filesystems.
const DIR_SIZE: u64 = 4096;

/// The type of an inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeKind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDev,
    BlockDev,
}

/// What to create in [`Tree::create`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum NewNode<'a> {
    File,
    Dir,
    Symlink(&'a OsStr),
    /// A FIFO, socket or device node (never `File`, `Dir` or `Symlink`) with its `rdev`.
    Special(NodeKind, u32),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Body {
    File,
    Dir { entries: BTreeMap<OsString, Ino>, parent: Ino },
    Symlink(OsString),
    Special(NodeKind, u32),
}

/// Everything about an inode except file content: committed by the journal.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Meta {
    body: Body,
    perm: u16,
    uid: u32,
    gid: u32,
    nlink: u32,
    atime: SystemTime,
    mtime: SystemTime,
    ctime: SystemTime,
    crtime: SystemTime,
}

impl Meta {
    fn new(body: Body, perm: u16, uid: u32, gid: u32, nlink: u32) -> Meta {
        let now = SystemTime::now();
        Meta { body, perm, uid, gid, nlink, atime: now, mtime: now, ctime: now, crtime: now }
    }

    fn kind(&self) -> NodeKind {
        match self.body {
            Body::File => NodeKind::File,
            Body::Dir { .. } => NodeKind::Dir,
            Body::Symlink(_) => NodeKind::Symlink,
            Body::Special(kind, _) => kind,
        }
    }
}

#[derive(Clone, Debug, Default)]
struct View {
    meta: HashMap<Ino, Meta>,
    data: HashMap<Ino, Content>,
}

/// Attributes of an inode, as `stat` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Attr {
    pub(crate) ino: Ino,
    pub(crate) kind: NodeKind,
    pub(crate) size: u64,
    pub(crate) blocks: u64,
    pub(crate) perm: u16,
    pub(crate) nlink: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) rdev: u32,
    pub(crate) atime: SystemTime,
    pub(crate) mtime: SystemTime,
    pub(crate) ctime: SystemTime,
    pub(crate) crtime: SystemTime,
}

/// Attribute changes of [`Tree::setattr`]; `None` leaves a field alone.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SetAttr {
    pub(crate) mode: Option<u32>,
    pub(crate) uid: Option<u32>,
    pub(crate) gid: Option<u32>,
    pub(crate) size: Option<u64>,
    pub(crate) atime: Option<SystemTime>,
    pub(crate) mtime: Option<SystemTime>,
}

/// One entry of [`Tree::readdir`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DirEntry {
    pub(crate) ino: Ino,
    pub(crate) kind: NodeKind,
    pub(crate) name: OsString,
}

/// The inode tree. See the module docs.
#[derive(Debug)]
pub(crate) struct Tree {
    live: View,
    durable: View,
    /// Inodes whose metadata changed since the last commit (also removed ones).
    dirty: HashSet<Ino>,
    /// Kernel references (FUSE lookup counts) of the current mount session.
    lookups: HashMap<Ino, u64>,
    next_ino: Ino,
}

fn attr_with(ino: Ino, m: &Meta, size: u64, allocated: u64, rdev: u32) -> Attr {
    Attr {
        ino,
        kind: m.kind(),
        size,
        blocks: allocated.div_ceil(512),
        perm: m.perm,
        nlink: m.nlink,
        uid: m.uid,
        gid: m.gid,
        rdev,
        atime: m.atime,
        mtime: m.mtime,
        ctime: m.ctime,
        crtime: m.crtime,
    }
}

impl Tree {
    /// A tree holding an empty root directory owned by `uid`:`gid`, durable from the start.
    pub(crate) fn new(uid: u32, gid: u32) -> Tree {
        let root = Meta::new(Body::Dir { entries: BTreeMap::new(), parent: ROOT }, 0o755, uid, gid, 2);
        let mut live = View::default();
        live.meta.insert(ROOT, root);
        let durable = live.clone();
        Tree { live, durable, dirty: HashSet::new(), lookups: HashMap::new(), next_ino: ROOT + 1 }
    }

    fn meta(&self, ino: Ino) -> Res<&Meta> {
        self.live.meta.get(&ino).ok_or(libc::ENOENT)
    }

    fn meta_mut(&mut self, ino: Ino) -> Res<&mut Meta> {
        self.live.meta.get_mut(&ino).ok_or(libc::ENOENT)
    }

    fn entries(&self, dir: Ino) -> Res<&BTreeMap<OsString, Ino>> {
        match &self.meta(dir)?.body {
            Body::Dir { entries, .. } => Ok(entries),
            _ => Err(libc::ENOTDIR),
        }
    }

    fn entries_mut(&mut self, dir: Ino) -> Res<&mut BTreeMap<OsString, Ino>> {
        match &mut self.meta_mut(dir)?.body {
            Body::Dir { entries, .. } => Ok(entries),
            _ => Err(libc::ENOTDIR),
        }
    }

    fn child(&self, parent: Ino, name: &OsStr) -> Res<Ino> {
        self.entries(parent)?.get(name).copied().ok_or(libc::ENOENT)
    }

    fn is_dir(&self, ino: Ino) -> bool {
        self.meta(ino).is_ok_and(|m| m.kind() == NodeKind::Dir)
    }

    fn parent_of(&self, dir: Ino) -> Option<Ino> {
        match self.meta(dir).ok()?.body {
            Body::Dir { parent, .. } => Some(parent),
            _ => None,
        }
    }

    /// Whether `ino` is `dir` or lies below it.
    fn is_within(&self, dir: Ino, mut ino: Ino) -> bool {
        for _ in 0..=self.live.meta.len() {
            if ino == dir {
                return true;
            }
            match self.parent_of(ino) {
                Some(parent) if ino != ROOT => ino = parent,
                _ => return false,
            }
        }
        false
    }

    /// Marks inodes changed for the next commit and stamps their ctime (and mtime for directories
    /// whose entries changed).
    fn touch(&mut self, inos: &[Ino], mtime_too: bool) {
        let now = SystemTime::now();
        for &ino in inos {
            if let Some(m) = self.live.meta.get_mut(&ino) {
                m.ctime = now;
                if mtime_too {
                    m.mtime = now;
                }
            }
            self.dirty.insert(ino);
        }
    }

    /// Drops an inode from the live view once nothing names or references it.
    fn reap(&mut self, ino: Ino) {
        let unreferenced = !self.lookups.contains_key(&ino);
        if ino != ROOT && unreferenced && self.live.meta.get(&ino).is_some_and(|m| m.nlink == 0) {
            self.live.meta.remove(&ino);
            self.live.data.remove(&ino);
            self.dirty.insert(ino);
        }
    }

    /// Counts one kernel reference (an entry reply) to `ino`.
    fn remember(&mut self, ino: Ino) {
        *self.lookups.entry(ino).or_default() += 1;
    }

    /// Attributes of `ino`.
    pub(crate) fn attr(&self, ino: Ino) -> Res<Attr> {
        let m = self.meta(ino)?;
        let (size, allocated, rdev) = match &m.body {
            Body::File => {
                let content = self.live.data.get(&ino);
                (content.map_or(0, Content::size), content.map_or(0, Content::allocated), 0)
            }
            Body::Dir { .. } => (DIR_SIZE, DIR_SIZE, 0),
            Body::Symlink(target) => (target.len() as u64, 0, 0),
            Body::Special(_, rdev) => (0, 0, *rdev),
        };
        Ok(attr_with(ino, m, size, allocated, rdev))
    }

    /// Looks `name` up in `parent` and counts a kernel reference to the result.
    pub(crate) fn lookup(&mut self, parent: Ino, name: &OsStr) -> Res<Attr> {
        let ino = match name.as_bytes() {
            b"." => self.entries(parent).map(|_| parent)?,
            b".." => self.parent_of(parent).ok_or(libc::ENOTDIR)?,
            _ => {
                if name.len() > NAME_MAX {
                    return Err(libc::ENAMETOOLONG);
                }
                self.child(parent, name)?
            }
        };
        let attr = self.attr(ino)?;
        self.remember(ino);
        Ok(attr)
    }

    /// Drops `n` kernel references to `ino`.
    pub(crate) fn forget(&mut self, ino: Ino, n: u64) {
        if let Some(count) = self.lookups.get_mut(&ino) {
            *count = count.saturating_sub(n);
            if *count == 0 {
                self.lookups.remove(&ino);
                self.reap(ino);
            }
        }
    }

    /// The target of symlink `ino`.
    pub(crate) fn readlink(&self, ino: Ino) -> Res<Vec<u8>> {
        match &self.meta(ino)?.body {
            Body::Symlink(target) => Ok(target.as_bytes().to_vec()),
            _ => Err(libc::EINVAL),
        }
    }

    /// Checks that `ino` can be opened as a file (`dir == false`) or a directory.
    pub(crate) fn check_open(&self, ino: Ino, dir: bool) -> Res<()> {
        match (self.meta(ino)?.kind(), dir) {
            (NodeKind::Dir, true) => Ok(()),
            (_, true) => Err(libc::ENOTDIR),
            (NodeKind::Dir, false) => Err(libc::EISDIR),
            (_, false) => Ok(()),
        }
    }

    fn check_file(&self, ino: Ino) -> Res<()> {
        match self.meta(ino)?.kind() {
            NodeKind::File => Ok(()),
            NodeKind::Dir => Err(libc::EISDIR),
            _ => Err(libc::EINVAL),
        }
    }

    fn content_mut(&mut self, ino: Ino) -> Res<&mut Content> {
        self.check_file(ino)?;
        Ok(self.live.data.entry(ino).or_default())
    }

    /// Changes attributes; a size change is a data change (durable only at fsync).
    pub(crate) fn setattr(&mut self, ino: Ino, set: &SetAttr) -> Res<Attr> {
        if let Some(size) = set.size {
            if size > MAX_FILE_SIZE {
                return Err(libc::EFBIG);
            }
            self.content_mut(ino)?.truncate(size)?;
        }
        let now = SystemTime::now();
        let m = self.meta_mut(ino)?;
        if let Some(mode) = set.mode {
            m.perm = (mode & 0o7777) as u16;
        }
        m.uid = set.uid.unwrap_or(m.uid);
        m.gid = set.gid.unwrap_or(m.gid);
        m.atime = set.atime.unwrap_or(m.atime);
        m.mtime = set.mtime.or(set.size.map(|_| now)).unwrap_or(m.mtime);
        m.ctime = now;
        self.dirty.insert(ino);
        self.attr(ino)
    }

    /// Reads file content.
    pub(crate) fn read(&self, ino: Ino, offset: u64, len: u32) -> Res<Vec<u8>> {
        self.check_file(ino)?;
        Ok(self.live.data.get(&ino).map_or_else(Vec::new, |c| c.read(offset, len)))
    }

    /// Writes file content; returns the count written.
    pub(crate) fn write(&mut self, ino: Ino, offset: u64, data: &[u8]) -> Res<u32> {
        let written = u32::try_from(data.len()).map_err(|_| libc::EINVAL)?;
        self.content_mut(ino)?.write(offset, data)?;
        self.touch(&[ino], true);
        Ok(written)
    }

    /// `fallocate` with mode 0 (may grow the file) or `FALLOC_FL_KEEP_SIZE`; others `EOPNOTSUPP`.
    pub(crate) fn fallocate(&mut self, ino: Ino, offset: u64, len: u64, mode: i32) -> Res<()> {
        if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if len == 0 {
            return Err(libc::EINVAL);
        }
        let end = offset.checked_add(len).filter(|&e| e <= MAX_FILE_SIZE).ok_or(libc::EFBIG)?;
        let content = self.content_mut(ino)?;
        if mode == 0 && end > content.size() {
            content.truncate(end)?;
            self.touch(&[ino], true);
        }
        Ok(())
    }

    /// `fsync`/`fdatasync` of `ino`: makes a file's content durable, then commits the journal.
    pub(crate) fn fsync(&mut self, ino: Ino) -> Res<()> {
        let m = self.meta(ino)?;
        if m.kind() == NodeKind::File && m.nlink > 0 {
            let content = self.live.data.get(&ino).cloned().unwrap_or_default();
            self.durable.data.insert(ino, content);
        }
        self.commit();
        Ok(())
    }

    /// Journal commit: every metadata change so far becomes durable; file content does not.
    pub(crate) fn commit(&mut self) {
        for ino in self.dirty.drain() {
            match self.live.meta.get(&ino) {
                Some(m) if m.nlink > 0 || ino == ROOT => {
                    self.durable.meta.insert(ino, m.clone());
                }
                _ => {
                    self.durable.meta.remove(&ino);
                    self.durable.data.remove(&ino);
                }
            }
        }
    }

    /// Makes everything durable, like `sync(1)`.
    pub(crate) fn sync_all(&mut self) {
        for (ino, m) in &self.live.meta {
            if m.kind() == NodeKind::File && m.nlink > 0 {
                let content = self.live.data.get(ino).cloned().unwrap_or_default();
                self.durable.data.insert(*ino, content);
            }
        }
        self.commit();
    }

    /// Power loss: the live view becomes the durable one; kernel references are gone.
    pub(crate) fn power_loss(&mut self) {
        self.live = self.durable.clone();
        self.dirty.clear();
        self.lookups.clear();
    }

    /// Entries of directory `ino`, `.` and `..` first.
    pub(crate) fn readdir(&self, ino: Ino) -> Res<Vec<DirEntry>> {
        let entries = self.entries(ino)?;
        let parent = self.parent_of(ino).unwrap_or(ROOT);
        let dot = |ino, name: &str| DirEntry { ino, kind: NodeKind::Dir, name: name.into() };
        let mut out = vec![dot(ino, "."), dot(parent, "..")];
        for (name, &child) in entries {
            let kind = self.meta(child).map_or(NodeKind::File, Meta::kind);
            out.push(DirEntry { ino: child, kind, name: name.clone() });
        }
        Ok(out)
    }

    /// `access(2)` for a caller `uid`:`gid` and a mask of `R_OK | W_OK | X_OK` (or `F_OK`).
    pub(crate) fn access(&self, ino: Ino, uid: u32, gid: u32, mask: i32) -> Res<()> {
        let m = self.meta(ino)?;
        let wanted = (mask & 0o7) as u16;
        let granted = if uid == 0 {
            let any_exec = m.kind() == NodeKind::Dir || m.perm & 0o111 != 0;
            if any_exec { 0o7 } else { 0o6 }
        } else if uid == m.uid {
            (m.perm >> 6) & 0o7
        } else if gid == m.gid {
            (m.perm >> 3) & 0o7
        } else {
            m.perm & 0o7
        };
        if wanted & !granted != 0 { Err(libc::EACCES) } else { Ok(()) }
    }

    /// Inodes the kernel holds references to in the current session (and the root).
    pub(crate) fn referenced(&self) -> Vec<Ino> {
        std::iter::once(ROOT).chain(self.lookups.keys().copied().filter(|&i| i != ROOT)).collect()
    }

    /// Bytes of content held and inodes in the live view.
    pub(crate) fn usage(&self) -> (u64, u64) {
        let bytes = self.live.data.values().map(Content::allocated).fold(0u64, u64::saturating_add);
        (bytes, self.live.meta.len() as u64)
    }
}

#[cfg(test)]
mod tests;
