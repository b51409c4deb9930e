//! Through-the-kernel tests of the power-loss filesystem. They need root and /dev/fuse.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use keel_testbed::durable_fs::{DurableFs, sweep_stale_mounts};
use tempfile::TempDir;

/// A mounted filesystem on its own temporary directory; drops the mount before the directory.
struct Fixture {
    fs: DurableFs,
    _dir: TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let fs = DurableFs::mount(dir.path()).expect("mount");
        Fixture { fs, _dir: dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.fs.mountpoint().join(rel)
    }

    /// Unmounts and checks that no mount is left at the mountpoint.
    fn finish(self) {
        let mountpoint = self.fs.mountpoint().to_owned();
        assert_eq!(mounts_at(&mountpoint), 1, "exactly one live mount before drop");
        drop(self);
        assert_eq!(mounts_at(&mountpoint), 0, "mount left behind at {}", mountpoint.display());
    }
}

/// Mounts at `path` in this process's mount namespace, from /proc/self/mountinfo.
fn mounts_at(path: &Path) -> usize {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let wanted = path.to_str().expect("utf-8 path");
    info.lines().filter(|l| l.split(' ').nth(4) == Some(wanted)).count()
}

/// Runs `f` on another thread and fails if it does not finish in time (instead of hanging).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("{what} hung"))
}

fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

#[test]
fn fsynced_data_survives_unsynced_data_reverts() {
    let mut fx = Fixture::new();
    eprintln!("{:?}", fx.fs);
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let line = mountinfo.lines().find(|l| l.split(' ').nth(4) == fx.fs.mountpoint().to_str()).unwrap();
    eprintln!("{line}");
    assert!(line.contains(&format!(" - fuse.keel-durable keel-durable-{} ", std::process::id())), "{line}");
    let mut f = File::create(fx.path("a")).unwrap();
    f.write_all(b"synced").unwrap();
    f.sync_all().unwrap();
    f.write_all(b" but not this").unwrap();
    drop(f);
    assert_eq!(fs::read(fx.path("a")).unwrap(), b"synced but not this");

    let mut g = File::create(fx.path("b")).unwrap();
    g.write_all(&[1u8; 100_000]).unwrap();
    g.sync_data().unwrap();
    g.seek(SeekFrom::Start(50)).unwrap();
    g.write_all(b"overwrite").unwrap();
    g.set_len(10).unwrap();
    drop(g);

    fx.fs.power_loss().unwrap();
    assert_eq!(fs::read(fx.path("a")).unwrap(), b"synced");
    assert_eq!(fs::read(fx.path("b")).unwrap(), vec![1u8; 100_000]);

    // A sparse write reads back zeros in the hole, and survives once synced.
    let mut h = OpenOptions::new().write(true).open(fx.path("a")).unwrap();
    h.seek(SeekFrom::Start(1 << 20)).unwrap();
    h.write_all(b"end").unwrap();
    h.sync_all().unwrap();
    fx.fs.power_loss().unwrap();
    let data = fs::read(fx.path("a")).unwrap();
    assert_eq!(data.len(), (1 << 20) + 3);
    assert!(data[6..1 << 20].iter().all(|&b| b == 0));
    fx.finish();
}

#[test]
fn unsynced_create_vanishes_and_commit_keeps_it_empty() {
    let mut fx = Fixture::new();
    fs::write(fx.path("new"), b"never synced").unwrap();
    fs::create_dir(fx.path("dir")).unwrap();
    fx.fs.power_loss().unwrap();
    assert_eq!(fs::metadata(fx.path("new")).unwrap_err().kind(), ErrorKind::NotFound);
    assert_eq!(fs::metadata(fx.path("dir")).unwrap_err().kind(), ErrorKind::NotFound);

    fs::write(fx.path("new"), b"never synced").unwrap();
    let other = File::create(fx.path("other")).unwrap();
    other.sync_all().unwrap(); // journal commit
    fx.fs.power_loss().unwrap();
    assert_eq!(fs::read(fx.path("new")).unwrap(), b"");
    assert!(fx.path("other").exists());
    fx.finish();
}

#[test]
fn rename_over_after_fsync_is_durable_and_uncommitted_rename_is_undone() {
    let mut fx = Fixture::new();
    fs::create_dir(fx.path("d")).unwrap();
    let replace = |fx: &Fixture, tmp: &str, content: &[u8], commit: bool| {
        let mut f = File::create(fx.path(tmp)).unwrap();
        f.write_all(content).unwrap();
        f.sync_all().unwrap();
        fs::rename(fx.path(tmp), fx.path("d/target")).unwrap();
        if commit {
            File::open(fx.path("d")).unwrap().sync_all().unwrap(); // fsyncdir
        }
    };
    replace(&fx, "d/tmp", b"v1", true);
    fx.fs.power_loss().unwrap();
    assert_eq!(fs::read(fx.path("d/target")).unwrap(), b"v1");
    assert!(!fx.path("d/tmp").exists());

    replace(&fx, "d/tmp2", b"v2", false);
    assert_eq!(fs::read(fx.path("d/target")).unwrap(), b"v2");
    fx.fs.power_loss().unwrap();
    assert_eq!(fs::read(fx.path("d/target")).unwrap(), b"v1");
    assert_eq!(fs::read(fx.path("d/tmp2")).unwrap(), b"v2");
    fx.finish();
}

#[test]
fn file_held_open_across_power_loss_errors_instead_of_hanging() {
    let mut fx = Fixture::new();
    let mut f =
        OpenOptions::new().read(true).write(true).create(true).truncate(true).open(fx.path("held")).unwrap();
    f.write_all(b"cached content").unwrap();
    f.sync_all().unwrap();
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).unwrap(); // position is at the end: populate the cache explicitly
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut buf).unwrap();
    assert_eq!(buf, b"cached content");
    let dir = File::open(fx.fs.mountpoint()).unwrap();

    fx.fs.power_loss().unwrap();
    let (read, write, sync, readdir) = within("I/O on held files", move || {
        let mut f = f;
        let mut buf = [0u8; 4];
        let read = f.read_at(&mut buf, 0);
        let write = f.write_all(b"x");
        let sync = f.sync_all();
        let readdir = fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd())).map(Iterator::count);
        (read, write, sync, readdir)
    });
    let read = read.unwrap_err();
    assert_eq!(errno(&read), libc::ENOTCONN, "read: {read}");
    assert_eq!(errno(&write.unwrap_err()), libc::ENOTCONN);
    assert_eq!(errno(&sync.unwrap_err()), libc::ENOTCONN);
    assert!(readdir.is_err());
    // The new mount serves the durable content.
    assert_eq!(fs::read(fx.path("held")).unwrap(), b"cached content");
    fx.finish();
}

#[test]
fn drop_unmounts_even_when_the_test_panics_and_sweep_spares_live_pids() {
    let dir = tempfile::tempdir().unwrap();
    let mountpoint = dir.path().canonicalize().unwrap();
    let mut held = None;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let fs = DurableFs::mount(&mountpoint).unwrap();
        fs::write(fs.mountpoint().join("x"), b"1").unwrap();
        held = Some(File::open(fs.mountpoint().join("x")).unwrap());
        assert_eq!(mounts_at(&mountpoint), 1);
        panic!("test failure while mounted");
    }));
    assert!(outcome.is_err());
    assert_eq!(mounts_at(&mountpoint), 0);
    let held = held.unwrap();
    let read = within("read after drop", move || held.read_at(&mut [0u8; 1], 0));
    assert_eq!(errno(&read.unwrap_err()), libc::ENOTCONN);

    // A live mount (this pid) is left alone by the sweep.
    let fx = Fixture::new();
    fs::write(fx.path("f"), b"kept").unwrap();

    // A stale mount: fsname of a pid that has exited, connection dead.
    let stale_dir = tempfile::tempdir().unwrap();
    let stale = stale_dir.path().canonicalize().unwrap();
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    {
        let dev = OpenOptions::new().read(true).write(true).open("/dev/fuse").unwrap();
        let opts = format!("fd={},rootmode=40755,user_id=0,group_id=0", dev.as_raw_fd());
        nix::mount::mount(
            Some(format!("keel-durable-{dead_pid}").as_str()),
            &stale,
            Some("fuse.keel-durable"),
            nix::mount::MsFlags::empty(),
            Some(opts.as_str()),
        )
        .unwrap();
    } // closing /dev/fuse aborts the connection, like a crashed process
    assert_eq!(mounts_at(&stale), 1);

    // Another test process may sweep at the same time and unmount it first: assert the effect.
    let swept = sweep_stale_mounts().unwrap();
    assert_eq!(mounts_at(&stale), 0, "the stale mount is still there (this sweep unmounted {swept})");
    assert_eq!(mounts_at(fx.fs.mountpoint()), 1);
    assert_eq!(fs::read(fx.path("f")).unwrap(), b"kept");
    fx.finish();
}

#[test]
fn posix_operations_through_the_kernel() {
    let mut fx = Fixture::new();
    let root = fx.fs.mountpoint().to_owned();
    let p = |rel: &str| root.join(rel);
    fs::create_dir_all(p("a/b")).unwrap();
    assert_eq!(errno(&fs::create_dir(p("a")).unwrap_err()), libc::EEXIST);
    assert_eq!(errno(&fs::remove_dir(p("a")).unwrap_err()), libc::ENOTEMPTY);
    fs::write(p("a/f"), b"hello").unwrap();
    assert_eq!(errno(&fs::read_dir(p("a/f")).unwrap_err()), libc::ENOTDIR);
    assert_eq!(errno(&fs::remove_file(p("a/b")).unwrap_err()), libc::EISDIR);
    assert_eq!(errno(&File::open(p("a/nope")).unwrap_err()), libc::ENOENT);
    std::os::unix::fs::symlink("f", p("a/link")).unwrap();
    assert_eq!(fs::read_link(p("a/link")).unwrap(), Path::new("f"));
    assert_eq!(fs::read(p("a/link")).unwrap(), b"hello");
    fs::hard_link(p("a/f"), p("a/b/hard")).unwrap();
    assert_eq!(fs::metadata(p("a/f")).unwrap().nlink(), 2);
    let mut names: Vec<_> = fs::read_dir(p("a")).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    assert_eq!(names, ["b", "f", "link"]);

    // renameat2 flags.
    let renameat2 = |from: &str, to: &str, flags: u32| -> std::io::Result<()> {
        let from = std::ffi::CString::new(p(from).into_os_string().into_encoded_bytes()).unwrap();
        let to = std::ffi::CString::new(p(to).into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: both paths are valid NUL-terminated strings that outlive the call.
        let rc =
            unsafe { libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), flags) };
        if rc == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
    };
    assert_eq!(errno(&renameat2("a/link", "a/f", libc::RENAME_NOREPLACE).unwrap_err()), libc::EEXIST);
    renameat2("a/link", "a/link2", libc::RENAME_NOREPLACE).unwrap();
    renameat2("a/link2", "a/b", libc::RENAME_EXCHANGE).unwrap();
    assert!(fs::symlink_metadata(p("a/b")).unwrap().file_type().is_symlink());
    assert!(p("a/link2/hard").exists());

    // fallocate, chmod, chown, utimes, statfs.
    let f = OpenOptions::new().write(true).open(p("a/f")).unwrap();
    // SAFETY: plain syscalls on an open fd.
    assert_eq!(unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, 4096) }, 0);
    assert_eq!(f.metadata().unwrap().len(), 4096);
    // SAFETY: as above.
    assert_eq!(unsafe { libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, 8192) }, 0);
    assert_eq!(f.metadata().unwrap().len(), 4096);
    // SAFETY: as above.
    let punch = unsafe {
        libc::fallocate(f.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 0, 10)
    };
    assert_eq!((punch, errno(&std::io::Error::last_os_error())), (-1, libc::EOPNOTSUPP));
    fs::set_permissions(p("a/f"), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(p("a/f"), Some(1234), Some(5678)).unwrap();
    let when = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000);
    f.set_modified(when).unwrap();
    let m = fs::metadata(p("a/f")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.uid(), m.gid()), (0o600, 1234, 5678));
    assert_eq!(m.modified().unwrap(), when);
    let st = nix::sys::statvfs::statvfs(fx.fs.mountpoint()).unwrap();
    assert!(st.blocks() > 0 && st.blocks_free() > 0);

    // Attribute changes are durable at the next commit.
    f.sync_all().unwrap();
    drop(f);
    fx.fs.power_loss().unwrap();
    let m = fs::metadata(p("a/f")).unwrap();
    assert_eq!((m.mode() & 0o7777, m.uid(), m.len()), (0o600, 1234, 4096));
    assert_eq!(&fs::read(p("a/f")).unwrap()[..5], b"hello");

    // Locks are kernel-local: flock conflicts between two open file descriptions.
    let l1 = File::open(p("a/f")).unwrap();
    let l2 = File::open(p("a/f")).unwrap();
    l1.try_lock().unwrap();
    assert!(l2.try_lock().is_err());
    drop(l1);
    l2.try_lock().unwrap();
    drop(l2);

    // O_APPEND, O_TRUNC, large writes, and directories larger than one readdir buffer.
    let mut app = OpenOptions::new().append(true).create(true).open(p("app")).unwrap();
    app.write_all(b"one,").unwrap();
    app.write_all(b"two").unwrap();
    drop(app);
    assert_eq!(fs::read(p("app")).unwrap(), b"one,two");
    fs::write(p("app"), b"x").unwrap();
    assert_eq!(fs::read(p("app")).unwrap(), b"x");
    let big: Vec<u8> = (0..3_000_017u32).map(|i| (i * 7 % 251) as u8).collect();
    fs::write(p("big"), &big).unwrap();
    File::open(p("big")).unwrap().sync_data().unwrap();
    fs::create_dir(p("many")).unwrap();
    for i in 0..500 {
        File::create(p(&format!("many/{i:0>200}"))).unwrap();
    }
    assert_eq!(fs::read_dir(p("many")).unwrap().count(), 500);
    File::open(p("many")).unwrap().sync_all().unwrap();
    fx.fs.power_loss().unwrap();
    assert_eq!(fs::read(p("big")).unwrap(), big);
    assert_eq!(fs::read_dir(p("many")).unwrap().count(), 500);

    // sync_all makes everything durable.
    fs::write(p("late"), b"late data").unwrap();
    fx.fs.sync_all();
    fx.fs.power_loss().unwrap();
    assert_eq!(fs::read(p("late")).unwrap(), b"late data");
    fx.finish();
}

#[test]
fn mount_rejects_bad_mountpoints() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("x"), b"").unwrap();
    let err = DurableFs::mount(dir.path()).unwrap_err();
    assert!(err.to_string().contains("not an empty directory"), "{err}");
    let err = DurableFs::mount(&dir.path().join("x")).unwrap_err();
    assert!(err.to_string().contains("not an empty directory"), "{err}");
    let err = DurableFs::mount(&dir.path().join("missing")).unwrap_err();
    assert!(err.to_string().contains("cannot inspect"), "{err}");
    assert_eq!(mounts_at(dir.path()), 0);
}

/// Shared mappings stay coherent with read(2)/write(2), as bbolt (mmap reads, pwrite writes) and
/// SQLite's WAL index need; msync + fsync makes mapped writes durable.
#[test]
fn shared_mmap_is_coherent_with_read_and_write() {
    let mut fx = Fixture::new();
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(fx.path("m")).unwrap();
    f.write_all_at(&[b'a'; 8192], 0).unwrap();
    let len = 8192;
    // SAFETY: maps an open file of `len` bytes; the mapping is only used below, before munmap.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    // The mapping is shared with the kernel, which changes it behind Rust's back: only volatile accesses
    // through a raw pointer are sound (a `&mut [u8]` over it would be undefined behaviour).
    let base = map.cast::<u8>();
    // SAFETY: offsets 100 and 5000 are inside the live mapping of `len` bytes.
    let read = |offset: usize| unsafe { base.add(offset).read_volatile() };
    assert_eq!(read(100), b'a');
    f.write_all_at(b"b", 100).unwrap();
    assert_eq!(read(100), b'b', "mapping sees write(2)");
    // SAFETY: as above.
    unsafe { base.add(5000).write_volatile(b'c') };
    // SAFETY: `map` is a live mapping of `len` bytes.
    assert_eq!(unsafe { libc::msync(map, len, libc::MS_SYNC) }, 0);
    let mut one = [0u8; 1];
    f.read_exact_at(&mut one, 5000).unwrap();
    assert_eq!(one, *b"c", "read(2) sees the mapped write");
    f.sync_all().unwrap();
    // SAFETY: unmaps the mapping made above; `base` is not used after this.
    assert_eq!(unsafe { libc::munmap(map, len) }, 0);
    drop(f);
    fx.fs.power_loss().unwrap();
    let data = fs::read(fx.path("m")).unwrap();
    assert_eq!((data[100], data[5000], data.len()), (b'b', b'c', 8192));
    fx.finish();
}

/// Power losses while another thread keeps using the mount: that thread sees errors, never hangs,
/// and every mount is cleaned up.
#[test]
fn repeated_power_loss_under_concurrent_io() {
    let mut fx = Fixture::new();
    let root = fx.fs.mountpoint().to_owned();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = {
        let stop = stop.clone();
        thread::spawn(move || {
            let (mut ok, mut failed) = (0u64, 0u64);
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                i += 1;
                let step = || -> std::io::Result<()> {
                    let mut f = File::create(root.join(format!("w{}", i % 7)))?;
                    f.write_all(&i.to_le_bytes())?;
                    f.sync_all()?;
                    let _ = fs::read_dir(&root)?.count();
                    Ok(())
                };
                match step() {
                    Ok(()) => ok += 1,
                    Err(_) => failed += 1,
                }
            }
            (ok, failed)
        })
    };
    for _ in 0..10 {
        thread::sleep(Duration::from_millis(20));
        fx.fs.power_loss().unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = within("worker", move || worker.join().unwrap());
    eprintln!("worker: {ok} ok, {failed} failed");
    assert!(ok > 0);
    // Every synced file holds a whole 8-byte counter.
    for e in fs::read_dir(fx.fs.mountpoint()).unwrap() {
        let len = fs::read(e.unwrap().path()).unwrap().len();
        assert!(len == 8 || len == 0, "len {len}");
    }
    fx.finish();
}
