//! Unit tests of the pure tree: no FUSE, no mount.

use super::*;

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

fn new_file(t: &mut Tree, parent: Ino, name: &str) -> Ino {
    t.create(parent, os(name), NewNode::File, 0o644, 0, 0).unwrap().ino
}

fn new_dir(t: &mut Tree, parent: Ino, name: &str) -> Ino {
    t.create(parent, os(name), NewNode::Dir, 0o755, 0, 0).unwrap().ino
}

/// Resolves a path from the root after a power loss (lookups count references; harmless here).
fn resolve(t: &mut Tree, path: &str) -> Res<Attr> {
    let mut attr = t.attr(ROOT)?;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        attr = t.lookup(attr.ino, os(part))?;
    }
    Ok(attr)
}

fn contents(t: &mut Tree, path: &str) -> Res<Vec<u8>> {
    let ino = resolve(t, path)?.ino;
    t.read(ino, 0, u32::MAX)
}

#[test]
fn synced_data_survives_unsynced_data_reverts() {
    let mut t = Tree::new(0, 0);
    let f = new_file(&mut t, ROOT, "f");
    t.write(f, 0, b"hello").unwrap();
    t.fsync(f).unwrap();
    t.write(f, 5, b" world").unwrap();
    t.setattr(f, &SetAttr { size: Some(2), ..SetAttr::default() }).unwrap();
    assert_eq!(t.read(f, 0, 100).unwrap(), b"he");
    t.power_loss();
    assert_eq!(contents(&mut t, "f").unwrap(), b"hello");
}

#[test]
fn unsynced_create_is_lost_and_commit_keeps_it_empty() {
    let mut t = Tree::new(0, 0);
    let a = new_file(&mut t, ROOT, "a");
    t.write(a, 0, b"data").unwrap();
    t.power_loss();
    assert_eq!(resolve(&mut t, "a"), Err(libc::ENOENT));

    let a = new_file(&mut t, ROOT, "a");
    t.write(a, 0, b"data").unwrap();
    let b = new_file(&mut t, ROOT, "b");
    t.fsync(b).unwrap();
    t.power_loss();
    assert_eq!(contents(&mut t, "a").unwrap(), b"");
    assert_eq!(resolve(&mut t, "a").unwrap().size, 0);
}

#[test]
fn rename_over_after_fsync_is_durable_only_after_commit() {
    let mut t = Tree::new(0, 0);
    let dir = new_dir(&mut t, ROOT, "d");
    let target = new_file(&mut t, dir, "target");
    t.write(target, 0, b"old").unwrap();
    t.fsync(target).unwrap();

    let tmp = new_file(&mut t, dir, "tmp");
    t.write(tmp, 0, b"new").unwrap();
    t.fsync(tmp).unwrap();
    t.rename(dir, os("tmp"), dir, os("target"), 0).unwrap();
    t.power_loss();
    // No commit after the rename: it is undone, tmp is back with its synced content.
    assert_eq!(contents(&mut t, "d/target").unwrap(), b"old");
    assert_eq!(contents(&mut t, "d/tmp").unwrap(), b"new");

    t.rename(dir, os("tmp"), dir, os("target"), 0).unwrap();
    t.fsync(dir).unwrap();
    t.power_loss();
    assert_eq!(contents(&mut t, "d/target").unwrap(), b"new");
    assert_eq!(resolve(&mut t, "d/tmp"), Err(libc::ENOENT));
}

#[test]
fn uncommitted_unlink_comes_back_with_durable_content() {
    let mut t = Tree::new(0, 0);
    let f = new_file(&mut t, ROOT, "f");
    t.write(f, 0, b"keep").unwrap();
    t.fsync(f).unwrap();
    t.write(f, 0, b"lost").unwrap();
    t.unlink(ROOT, os("f")).unwrap();
    assert_eq!(resolve(&mut t, "f"), Err(libc::ENOENT));
    t.power_loss();
    assert_eq!(contents(&mut t, "f").unwrap(), b"keep");
    // Committed unlink stays.
    t.unlink(ROOT, os("f")).unwrap();
    t.commit();
    t.power_loss();
    assert_eq!(resolve(&mut t, "f"), Err(libc::ENOENT));
}

#[test]
fn attributes_follow_the_journal() {
    let mut t = Tree::new(0, 0);
    let f = new_file(&mut t, ROOT, "f");
    t.commit();
    t.setattr(f, &SetAttr { mode: Some(0o100600), uid: Some(7), ..SetAttr::default() }).unwrap();
    t.power_loss();
    let a = resolve(&mut t, "f").unwrap();
    assert_eq!((a.perm, a.uid), (0o644, 0));
    t.setattr(f, &SetAttr { mode: Some(0o600), gid: Some(9), ..SetAttr::default() }).unwrap();
    t.commit();
    t.power_loss();
    let a = resolve(&mut t, "f").unwrap();
    assert_eq!((a.perm, a.gid), (0o600, 9));
}

#[test]
fn open_unlinked_file_lives_until_forget() {
    let mut t = Tree::new(0, 0);
    let f = new_file(&mut t, ROOT, "f"); // one kernel reference
    t.write(f, 0, b"x").unwrap();
    t.unlink(ROOT, os("f")).unwrap();
    assert_eq!(t.attr(f).unwrap().nlink, 0);
    assert_eq!(t.read(f, 0, 10).unwrap(), b"x");
    t.fsync(f).unwrap();
    t.forget(f, 1);
    assert_eq!(t.attr(f), Err(libc::ENOENT));
    t.power_loss();
    assert_eq!(t.attr(f), Err(libc::ENOENT));
}

#[test]
fn namespace_errors() {
    let mut t = Tree::new(0, 0);
    let d = new_dir(&mut t, ROOT, "d");
    let f = new_file(&mut t, d, "f");
    let mk = |t: &mut Tree, p, n: &str| t.create(p, os(n), NewNode::File, 0o644, 0, 0).map(|a| a.ino);
    assert_eq!(mk(&mut t, d, "f"), Err(libc::EEXIST));
    assert_eq!(mk(&mut t, f, "x"), Err(libc::ENOTDIR));
    assert_eq!(mk(&mut t, 999, "x"), Err(libc::ENOENT));
    assert_eq!(mk(&mut t, d, &"n".repeat(256)), Err(libc::ENAMETOOLONG));
    assert_eq!(mk(&mut t, d, "a/b"), Err(libc::EINVAL));
    assert_eq!(mk(&mut t, d, ".."), Err(libc::EEXIST));
    assert_eq!(t.rmdir(ROOT, os("d")), Err(libc::ENOTEMPTY));
    assert_eq!(t.rmdir(d, os("f")), Err(libc::ENOTDIR));
    assert_eq!(t.unlink(ROOT, os("d")), Err(libc::EISDIR));
    assert_eq!(t.unlink(ROOT, os("nope")), Err(libc::ENOENT));
    assert_eq!(t.read(d, 0, 1), Err(libc::EISDIR));
    assert_eq!(t.write(d, 0, b"x"), Err(libc::EISDIR));
    assert_eq!(t.setattr(d, &SetAttr { size: Some(0), ..SetAttr::default() }), Err(libc::EISDIR));
    assert_eq!(t.link(d, ROOT, os("d2")).map(|a| a.ino), Err(libc::EPERM));
    assert_eq!(t.readlink(f), Err(libc::EINVAL));
    assert_eq!(t.check_open(f, true), Err(libc::ENOTDIR));
    assert_eq!(t.check_open(d, false), Err(libc::EISDIR));
    assert_eq!(t.fallocate(f, 0, 10, libc::FALLOC_FL_PUNCH_HOLE), Err(libc::EOPNOTSUPP));
    assert_eq!(t.write(f, u64::MAX, b"x"), Err(libc::EFBIG));
    // Rename errors.
    let e = new_dir(&mut t, ROOT, "e");
    new_file(&mut t, e, "g");
    assert_eq!(t.rename(ROOT, os("d"), d, os("x"), 0), Err(libc::EINVAL));
    assert_eq!(t.rename(ROOT, os("d"), ROOT, os("e"), 0), Err(libc::ENOTEMPTY));
    assert_eq!(t.rename(d, os("f"), ROOT, os("e"), 0), Err(libc::EISDIR));
    assert_eq!(t.rename(ROOT, os("e"), d, os("f"), 0), Err(libc::ENOTDIR));
    assert_eq!(t.rename(ROOT, os("nope"), d, os("f"), 0), Err(libc::ENOENT));
    assert_eq!(t.rename(d, os("f"), e, os("g"), libc::RENAME_NOREPLACE), Err(libc::EEXIST));
    assert_eq!(t.rename(d, os("f"), e, os("zz"), libc::RENAME_EXCHANGE), Err(libc::ENOENT));
    assert_eq!(t.rename(d, os("f"), e, os("g"), libc::RENAME_WHITEOUT), Err(libc::EINVAL));
}

#[test]
fn rename_and_link_counts() {
    let mut t = Tree::new(0, 0);
    let a = new_dir(&mut t, ROOT, "a");
    let b = new_dir(&mut t, ROOT, "b");
    let sub = new_dir(&mut t, a, "sub");
    assert_eq!(t.attr(ROOT).unwrap().nlink, 4);
    assert_eq!(t.attr(a).unwrap().nlink, 3);
    t.rename(a, os("sub"), b, os("moved"), 0).unwrap();
    assert_eq!(t.attr(a).unwrap().nlink, 2);
    assert_eq!(t.attr(b).unwrap().nlink, 3);
    let dots = t.readdir(sub).unwrap();
    assert_eq!(dots[1], DirEntry { ino: b, kind: NodeKind::Dir, name: "..".into() });
    // Overwrite an empty directory.
    let empty = new_dir(&mut t, a, "empty");
    t.rename(b, os("moved"), a, os("empty"), 0).unwrap();
    assert_eq!(t.attr(empty).unwrap().nlink, 0);
    assert_eq!(t.attr(a).unwrap().nlink, 3);
    assert_eq!(t.attr(b).unwrap().nlink, 2);
    // Hard links.
    let f = new_file(&mut t, a, "f");
    t.link(f, b, os("f2")).unwrap();
    assert_eq!(t.attr(f).unwrap().nlink, 2);
    t.rename(a, os("f"), b, os("f2"), 0).unwrap(); // same inode: no-op
    assert_eq!(t.attr(f).unwrap().nlink, 2);
    assert_eq!(resolve(&mut t, "a/f").unwrap().ino, f);
    let g = new_file(&mut t, b, "g");
    t.rename(b, os("g"), b, os("f2"), 0).unwrap();
    assert_eq!(t.attr(f).unwrap().nlink, 1);
    assert_eq!(resolve(&mut t, "b/f2").unwrap().ino, g);
    // Exchange a directory and a file across parents.
    t.rename(a, os("empty"), b, os("f2"), libc::RENAME_EXCHANGE).unwrap();
    assert_eq!(resolve(&mut t, "b/f2").unwrap().ino, sub);
    assert_eq!(resolve(&mut t, "a/empty").unwrap().ino, g);
    assert_eq!(t.attr(a).unwrap().nlink, 2);
    assert_eq!(t.attr(b).unwrap().nlink, 3);
    assert_eq!(t.readdir(sub).unwrap()[1].ino, b);
    let names: Vec<_> = t.readdir(b).unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, [".", "..", "f2"]);
}

#[test]
fn symlinks_specials_and_lookup_dots() {
    let mut t = Tree::new(0, 0);
    let d = new_dir(&mut t, ROOT, "d");
    let l = t.create(d, os("l"), NewNode::Symlink(os("../target")), 0o777, 0, 0).unwrap();
    assert_eq!((l.kind, l.size), (NodeKind::Symlink, 9));
    assert_eq!(t.readlink(l.ino).unwrap(), b"../target");
    let p = t.create(d, os("p"), NewNode::Special(NodeKind::Fifo, 0), 0o600, 0, 0).unwrap();
    assert_eq!(p.kind, NodeKind::Fifo);
    assert_eq!(t.read(p.ino, 0, 1), Err(libc::EINVAL));
    assert_eq!(t.lookup(d, os("..")).unwrap().ino, ROOT);
    assert_eq!(t.lookup(d, os(".")).unwrap().ino, d);
    assert_eq!(t.lookup(ROOT, os("..")).unwrap().ino, ROOT);
    t.commit();
    t.power_loss();
    let l = resolve(&mut t, "d/l").unwrap().ino;
    assert_eq!(t.readlink(l).unwrap(), b"../target");
}

#[test]
fn fallocate_and_sync_all() {
    let mut t = Tree::new(0, 0);
    let f = new_file(&mut t, ROOT, "f");
    t.fallocate(f, 0, 100, libc::FALLOC_FL_KEEP_SIZE).unwrap();
    assert_eq!(t.attr(f).unwrap().size, 0);
    t.fallocate(f, 10, 100, 0).unwrap();
    assert_eq!(t.attr(f).unwrap().size, 110);
    assert_eq!(t.fallocate(f, 0, 0, 0), Err(libc::EINVAL));
    let g = new_file(&mut t, ROOT, "g");
    t.write(g, 3, b"z").unwrap();
    t.sync_all();
    t.power_loss();
    assert_eq!(resolve(&mut t, "f").unwrap().size, 110);
    assert_eq!(contents(&mut t, "g").unwrap(), b"\0\0\0z");
}

#[test]
fn access_checks_mode_bits() {
    let mut t = Tree::new(0, 0);
    let f = t.create(ROOT, os("f"), NewNode::File, 0o640, 10, 20).unwrap().ino;
    assert_eq!(t.access(f, 10, 99, libc::R_OK | libc::W_OK), Ok(()));
    assert_eq!(t.access(f, 11, 20, libc::R_OK), Ok(()));
    assert_eq!(t.access(f, 11, 20, libc::W_OK), Err(libc::EACCES));
    assert_eq!(t.access(f, 11, 21, libc::R_OK), Err(libc::EACCES));
    assert_eq!(t.access(f, 0, 0, libc::R_OK | libc::W_OK), Ok(()));
    assert_eq!(t.access(f, 0, 0, libc::X_OK), Err(libc::EACCES));
    assert_eq!(t.access(f, 11, 21, libc::F_OK), Ok(()));
    assert_eq!(t.access(999, 0, 0, libc::F_OK), Err(libc::ENOENT));
}
