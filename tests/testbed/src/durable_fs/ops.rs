//! The [`fuser::Filesystem`] implementation: translates FUSE requests into [`Tree`] calls.
//!
//! Operations not implemented here keep fuser's default reply, `ENOSYS`, which the kernel turns
//! into a local fallback: POSIX and BSD locks stay kernel-local (the INIT reply does not ask for
//! `FUSE_POSIX_LOCKS`/`FUSE_FLOCK_LOCKS`), `lseek(SEEK_DATA/SEEK_HOLE)` and `copy_file_range` use
//! generic code, and xattr calls fail with `EOPNOTSUPP`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
    WriteFlags,
};

use super::tree::{Attr, DirEntry, NewNode, NodeKind, Res, SetAttr, Tree};

/// How long the kernel may cache entries and attributes. Every change goes through the kernel,
/// so its caches stay right within a session; a power loss starts a new session with none.
const TTL: Duration = Duration::from_secs(1);
const BLOCK: u64 = 4096;
/// Capacity reported by `statfs` (the content lives in memory: this is only a ceiling).
const TOTAL_BLOCKS: u64 = (64 << 30) / BLOCK;
const TOTAL_INODES: u64 = 1 << 32;

/// State shared by the [`DurableFs`](super::DurableFs) handle and its mount sessions.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) tree: Tree,
    /// Bumped at every power loss and unmount: requests of older sessions get `EIO`.
    pub(crate) epoch: u64,
    /// Whether the last session opens files in direct-I/O mode (see [`Ops::init`]).
    pub(crate) direct_io: bool,
}

/// Locks `shared`, ignoring poisoning (the tree stays consistent: no operation panics midway).
pub(crate) fn lock(shared: &Mutex<Shared>) -> MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug, Default)]
struct DirHandles {
    next: u64,
    open: HashMap<u64, Vec<DirEntry>>,
}

/// One mount session's filesystem.
#[derive(Debug)]
pub(crate) struct Ops {
    shared: Arc<Mutex<Shared>>,
    epoch: u64,
    /// Directory listings snapshotted at `opendir`, so offsets stay stable.
    dirs: Mutex<DirHandles>,
    /// Flags of every file open reply.
    open_flags: FopenFlags,
}

fn file_type(kind: NodeKind) -> FileType {
    match kind {
        NodeKind::File => FileType::RegularFile,
        NodeKind::Dir => FileType::Directory,
        NodeKind::Symlink => FileType::Symlink,
        NodeKind::Fifo => FileType::NamedPipe,
        NodeKind::Socket => FileType::Socket,
        NodeKind::CharDev => FileType::CharDevice,
        NodeKind::BlockDev => FileType::BlockDevice,
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.crtime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: BLOCK as u32,
        flags: 0,
    }
}

fn time(t: Option<TimeOrNow>) -> Option<SystemTime> {
    t.map(|t| match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    })
}

fn perm(mode: u32, umask: u32) -> u16 {
    (mode & !umask & 0o7777) as u16
}

fn reply_entry(reply: ReplyEntry, res: Res<Attr>) {
    match res {
        Ok(attr) => reply.entry(&TTL, &file_attr(&attr), Generation(0)),
        Err(e) => reply.error(Errno::from_i32(e)),
    }
}

fn reply_attr(reply: ReplyAttr, res: Res<Attr>) {
    match res {
        Ok(attr) => reply.attr(&TTL, &file_attr(&attr)),
        Err(e) => reply.error(Errno::from_i32(e)),
    }
}

fn reply_data(reply: ReplyData, res: Res<Vec<u8>>) {
    match res {
        Ok(data) => reply.data(&data),
        Err(e) => reply.error(Errno::from_i32(e)),
    }
}

fn reply_empty(reply: ReplyEmpty, res: Res<()>) {
    match res {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(Errno::from_i32(e)),
    }
}

impl Ops {
    pub(crate) fn new(shared: Arc<Mutex<Shared>>, epoch: u64) -> Ops {
        Ops { shared, epoch, dirs: Mutex::default(), open_flags: FopenFlags::empty() }
    }

    /// Runs `f` on the tree, or fails with `EIO` if a power loss ended this session.
    fn with<T>(&self, f: impl FnOnce(&mut Tree) -> Res<T>) -> Res<T> {
        let mut shared = lock(&self.shared);
        if shared.epoch != self.epoch {
            return Err(libc::EIO);
        }
        f(&mut shared.tree)
    }

    fn dirs(&self) -> MutexGuard<'_, DirHandles> {
        self.dirs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn new_node(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        node: NewNode<'_>,
        perm: u16,
    ) -> Res<Attr> {
        self.with(|t| t.create(parent.0, name, node, perm, req.uid(), req.gid()))
    }
}

impl Filesystem for Ops {
    /// Asks for `FUSE_DIRECT_IO_ALLOW_MMAP` (Linux 6.6+). With it, files open with
    /// `FOPEN_DIRECT_IO`: read(2) and write(2) bypass the page cache, so on a file held open across
    /// a power loss they fail instead of being served from cache, while shared mappings (SQLite's
    /// `-shm`, bbolt) keep working. Without it, files use the page cache (write-through).
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let direct_io = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP).is_ok();
        self.open_flags = if direct_io { FopenFlags::FOPEN_DIRECT_IO } else { FopenFlags::empty() };
        lock(&self.shared).direct_io = direct_io;
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        reply_entry(reply, self.with(|t| t.lookup(parent.0, name)));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        let _stale_session = self.with(|t| {
            t.forget(ino.0, nlookup);
            Ok(())
        });
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        reply_attr(reply, self.with(|t| t.attr(ino.0)));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr { mode, uid, gid, size, atime: time(atime), mtime: time(mtime) };
        reply_attr(reply, self.with(|t| t.setattr(ino.0, &set)));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        reply_data(reply, self.with(|t| t.readlink(ino.0)));
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let node = match mode & libc::S_IFMT {
            0 | libc::S_IFREG => NewNode::File,
            libc::S_IFIFO => NewNode::Special(NodeKind::Fifo, 0),
            libc::S_IFSOCK => NewNode::Special(NodeKind::Socket, 0),
            libc::S_IFCHR => NewNode::Special(NodeKind::CharDev, rdev),
            libc::S_IFBLK => NewNode::Special(NodeKind::BlockDev, rdev),
            _ => return reply.error(Errno::EINVAL),
        };
        reply_entry(reply, self.new_node(req, parent, name, node, perm(mode, umask)));
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        reply_entry(reply, self.new_node(req, parent, name, NewNode::Dir, perm(mode, umask)));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.with(|t| t.unlink(parent.0, name)));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.with(|t| t.rmdir(parent.0, name)));
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let node = NewNode::Symlink(target.as_os_str());
        reply_entry(reply, self.new_node(req, parent, link_name, node, 0o777));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.with(|t| t.rename(parent.0, name, newparent.0, newname, flags.bits())));
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        reply_entry(reply, self.with(|t| t.link(ino.0, newparent.0, newname)));
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|t| t.check_open(ino.0, false)) {
            Ok(()) => reply.opened(FileHandle(0), self.open_flags),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        reply_data(reply, self.with(|t| t.read(ino.0, offset, size)));
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.with(|t| t.write(ino.0, offset, data)) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply_empty(reply, self.with(|t| t.fsync(ino.0)));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|t| t.readdir(ino.0)) {
            Ok(entries) => {
                let mut dirs = self.dirs();
                dirs.next = dirs.next.wrapping_add(1);
                let fh = dirs.next;
                dirs.open.insert(fh, entries);
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let dirs = self.dirs();
        let fresh;
        let entries = match dirs.open.get(&fh.0) {
            Some(entries) => entries,
            None => match self.with(|t| t.readdir(ino.0)) {
                Ok(entries) => {
                    fresh = entries;
                    &fresh
                }
                Err(e) => return reply.error(Errno::from_i32(e)),
            },
        };
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, e) in entries.iter().enumerate().skip(skip) {
            if reply.add(INodeNo(e.ino), i as u64 + 1, file_type(e.kind), &e.name) {
                break;
            }
        }
        drop(dirs);
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.dirs().open.remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        reply_empty(reply, self.with(|t| t.fsync(ino.0)));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.with(|t| Ok(t.usage())) {
            Ok((bytes, inodes)) => {
                let free = TOTAL_BLOCKS.saturating_sub(bytes.div_ceil(BLOCK));
                let ffree = TOTAL_INODES.saturating_sub(inodes);
                reply.statfs(TOTAL_BLOCKS, free, free, TOTAL_INODES, ffree, BLOCK as u32, 255, BLOCK as u32);
            }
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        reply_empty(reply, self.with(|t| t.access(ino.0, req.uid(), req.gid(), mask.bits())));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.new_node(req, parent, name, NewNode::File, perm(mode, umask)) {
            Ok(attr) => {
                reply.created(&TTL, &file_attr(&attr), Generation(0), FileHandle(0), self.open_flags);
            }
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.with(|t| t.fallocate(ino.0, offset, length, mode)));
    }
}
