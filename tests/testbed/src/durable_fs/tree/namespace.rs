//! Namespace operations of [`Tree`]: create, link, unlink, rmdir, rename.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use super::{Attr, Body, Content, Ino, Meta, NAME_MAX, NewNode, NodeKind, Res, Tree};

fn check_name(name: &OsStr) -> Res<()> {
    let bytes = name.as_bytes();
    if bytes.len() > NAME_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.iter().any(|&b| b == b'/' || b == 0) {
        return Err(libc::EINVAL);
    }
    Ok(())
}

impl Tree {
    /// Creates `name` in `parent`; counts a kernel reference to it.
    pub(crate) fn create(
        &mut self,
        parent: Ino,
        name: &OsStr,
        node: NewNode<'_>,
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Res<Attr> {
        if matches!(name.as_bytes(), b"." | b"..") {
            return Err(libc::EEXIST);
        }
        check_name(name)?;
        if self.entries(parent)?.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino;
        let (body, nlink) = match node {
            NewNode::File => (Body::File, 1),
            NewNode::Dir => (Body::Dir { entries: BTreeMap::new(), parent }, 2),
            NewNode::Symlink(target) => (Body::Symlink(target.to_owned()), 1),
            NewNode::Special(NodeKind::File | NodeKind::Dir | NodeKind::Symlink, _) => {
                return Err(libc::EINVAL);
            }
            NewNode::Special(kind, rdev) => (Body::Special(kind, rdev), 1),
        };
        let is_dir = matches!(body, Body::Dir { .. });
        self.next_ino += 1;
        self.entries_mut(parent)?.insert(name.to_owned(), ino);
        if is_dir {
            let p = self.meta_mut(parent)?;
            p.nlink = p.nlink.saturating_add(1);
        }
        self.live.meta.insert(ino, Meta::new(body, perm & 0o7777, uid, gid, nlink));
        if matches!(node, NewNode::File) {
            self.live.data.insert(ino, Content::default());
        }
        self.touch(&[parent], true);
        self.dirty.insert(ino);
        let attr = self.attr(ino)?;
        self.remember(ino);
        Ok(attr)
    }

    /// Adds the name `newname` in `newparent` for `ino`; counts a kernel reference to it.
    pub(crate) fn link(&mut self, ino: Ino, newparent: Ino, newname: &OsStr) -> Res<Attr> {
        if self.meta(ino)?.kind() == NodeKind::Dir {
            return Err(libc::EPERM);
        }
        check_name(newname).map_err(|e| if e == libc::EINVAL { libc::EEXIST } else { e })?;
        if self.entries(newparent)?.contains_key(newname) {
            return Err(libc::EEXIST);
        }
        let m = self.meta_mut(ino)?;
        m.nlink = m.nlink.checked_add(1).ok_or(libc::EMLINK)?;
        self.entries_mut(newparent)?.insert(newname.to_owned(), ino);
        self.touch(&[newparent], true);
        self.touch(&[ino], false);
        let attr = self.attr(ino)?;
        self.remember(ino);
        Ok(attr)
    }

    /// Removes the link `victim` had in `dir` (the entry itself is handled by the caller).
    fn drop_link(&mut self, victim: Ino, dir: Ino) {
        if let Some(m) = self.live.meta.get_mut(&victim) {
            if m.kind() == NodeKind::Dir {
                m.nlink = 0;
                if let Some(d) = self.live.meta.get_mut(&dir) {
                    d.nlink = d.nlink.saturating_sub(1);
                }
            } else {
                m.nlink = m.nlink.saturating_sub(1);
            }
        }
        self.touch(&[victim], false);
    }

    /// Removes the non-directory `name` from `parent`.
    pub(crate) fn unlink(&mut self, parent: Ino, name: &OsStr) -> Res<()> {
        check_name(name)?;
        let ino = self.child(parent, name)?;
        if self.is_dir(ino) {
            return Err(libc::EISDIR);
        }
        self.entries_mut(parent)?.remove(name);
        self.drop_link(ino, parent);
        self.touch(&[parent], true);
        self.reap(ino);
        Ok(())
    }

    /// Removes the empty directory `name` from `parent`.
    pub(crate) fn rmdir(&mut self, parent: Ino, name: &OsStr) -> Res<()> {
        check_name(name)?;
        let ino = self.child(parent, name)?;
        if !self.entries(ino)?.is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.entries_mut(parent)?.remove(name);
        self.drop_link(ino, parent);
        self.touch(&[parent], true);
        self.reap(ino);
        Ok(())
    }

    /// `renameat2`: `flags` may hold `RENAME_NOREPLACE` or `RENAME_EXCHANGE`.
    pub(crate) fn rename(
        &mut self,
        parent: Ino,
        name: &OsStr,
        newparent: Ino,
        newname: &OsStr,
        flags: u32,
    ) -> Res<()> {
        let (noreplace, exchange) = (flags & libc::RENAME_NOREPLACE, flags & libc::RENAME_EXCHANGE);
        if flags & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0 || (noreplace != 0 && exchange != 0)
        {
            return Err(libc::EINVAL);
        }
        check_name(name)?;
        check_name(newname)?;
        let src = self.child(parent, name)?;
        let dst = self.entries(newparent)?.get(newname).copied();
        let src_dir = self.is_dir(src);
        if exchange != 0 {
            let dst = dst.ok_or(libc::ENOENT)?;
            return self.exchange(parent, name, src, newparent, newname, dst);
        }
        if let Some(dst) = dst {
            if noreplace != 0 {
                return Err(libc::EEXIST);
            }
            if dst == src {
                return Ok(());
            }
        }
        if src_dir && self.is_within(src, newparent) {
            return Err(libc::EINVAL);
        }
        if let Some(dst) = dst {
            match (src_dir, self.is_dir(dst)) {
                (true, false) => return Err(libc::ENOTDIR),
                (false, true) => return Err(libc::EISDIR),
                (true, true) if !self.entries(dst)?.is_empty() => return Err(libc::ENOTEMPTY),
                _ => {}
            }
        }
        self.entries_mut(parent)?.remove(name);
        if let Some(dst) = dst {
            self.drop_link(dst, newparent);
        }
        self.entries_mut(newparent)?.insert(newname.to_owned(), src);
        if src_dir && parent != newparent {
            self.move_dir(src, parent, newparent);
        }
        self.touch(&[parent, newparent], true);
        self.touch(&[src], false);
        if let Some(dst) = dst {
            self.reap(dst);
        }
        Ok(())
    }

    /// Re-parents directory `dir` from `from` to `to` (entries are handled by the caller).
    fn move_dir(&mut self, dir: Ino, from: Ino, to: Ino) {
        if let Some(Meta { body: Body::Dir { parent, .. }, .. }) = self.live.meta.get_mut(&dir) {
            *parent = to;
        }
        if let Some(m) = self.live.meta.get_mut(&from) {
            m.nlink = m.nlink.saturating_sub(1);
        }
        if let Some(m) = self.live.meta.get_mut(&to) {
            m.nlink = m.nlink.saturating_add(1);
        }
    }

    fn exchange(
        &mut self,
        parent: Ino,
        name: &OsStr,
        src: Ino,
        newparent: Ino,
        newname: &OsStr,
        dst: Ino,
    ) -> Res<()> {
        if src == dst {
            return Ok(());
        }
        let (src_dir, dst_dir) = (self.is_dir(src), self.is_dir(dst));
        if (src_dir && self.is_within(src, newparent)) || (dst_dir && self.is_within(dst, parent)) {
            return Err(libc::EINVAL);
        }
        self.entries_mut(parent)?.insert(name.to_owned(), dst);
        self.entries_mut(newparent)?.insert(newname.to_owned(), src);
        if parent != newparent {
            if src_dir {
                self.move_dir(src, parent, newparent);
            }
            if dst_dir {
                self.move_dir(dst, newparent, parent);
            }
        }
        self.touch(&[parent, newparent], true);
        self.touch(&[src, dst], false);
        Ok(())
    }
}
