//! Allocations on disk, in host-local's layout, so a node switching its conflist from bridge+host-local
//! to keel-cni keeps its allocations (and back):
//!
//! ```text
//! <dataDir>/<network name>/
//!   lock                            flock(2)ed exclusively around every operation (host-local's too)
//!   10.244.1.5                      one file per allocated address: "<containerID>\r\n<ifname>"
//!   last_reserved_ip.0              the last address reserved from range set 0 (round robin)
//!   keel-cni:<cid>:<ifname>:<set>   keel-cni's index: a hard link to the attachment's address file
//!                                   of range set <set>
//!   keel-cni.spare                  a released address file, renamed into place by the next ADD
//! ```
//!
//! host-local finds an attachment's addresses by reading every file of the directory: at 254
//! allocations ~760 syscalls per ADD and per DEL. keel-cni keeps an index beside, a hard link per
//! allocation named after its owner, and records the address in the file's `user.keel-cni.address`
//! extended attribute (the link shares the inode), so:
//! - ADD and DEL look the attachment's links up by name — one `getxattr` per range set, which for a
//!   new attachment fails with ENOENT — and confirm a link by `statx`: the address file must be the
//!   link's inode (the link keeps it alive, so its number cannot be reused meanwhile). ADD creates the
//!   address file with `O_EXCL` after the last reserved address: no listing, no reads;
//! - CHECK, GC, and a DEL or ADD the index cannot answer (an attachment host-local allocated, a DEL
//!   repeated, a filesystem without user xattrs) list the directory once (`getdents64` returns each
//!   entry's inode, matching links to address files) and read only the address files no link points
//!   at.
//!
//! host-local lives with the links: their names do not parse as addresses, and when it releases an
//! attachment it removes every file whose content is the attachment's, the links included. `':'`
//! separates the link's fields because neither a container ID nor an interface name may contain one.
//! Hard links rather than symlinks naming the address: a hard link takes no inode, and creating
//! inodes is what costs on a journal-less ext4 (see [`Store::free`]).
//!
//! Cost at 254 allocations (`store_cost_at_254_allocations`): ADD 19 syscalls, ≈40–60 µs of CPU;
//! DEL 10 syscalls, ≈20–30 µs (a listing, when the index cannot answer: ≈250–300 µs).
//!
//! No fsync: host-local does none either, and it is fine here. A crash of the node loses every pod's
//! network namespace anyway; the runtime then DELs (or GCs) the sandboxes it knew, and a lost write
//! can only leave an allocation unwritten (the runtime retries ADD) or a released one on disk (GC with
//! the valid attachments frees it).

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirEntryExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AT_FDCWD, Flock, FlockArg, RenameFlags, renameat2};

use crate::spec::Attachment;
use crate::spec::error::Error;

mod xattr;

/// The lock file host-local flocks, in the network's directory.
pub const LOCK_FILE: &str = "lock";
/// host-local's round-robin cursor per range set: `last_reserved_ip.<index>`.
pub const LAST_RESERVED_PREFIX: &str = "last_reserved_ip.";
/// The prefix of keel-cni's index links.
pub const INDEX_PREFIX: &str = "keel-cni:";
/// A released address file kept for the next allocation to rename into place (see [`Store::free`]).
pub const SPARE_FILE: &str = "keel-cni.spare";
/// host-local's separator between the container ID and the interface name in an address file.
const LINE_BREAK: &str = "\r\n";

/// The network's allocation directory, locked: every method runs under the lock, released on drop.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
    /// The flock on `lock`, held for the store's life: its own open file description, so another
    /// process — or another thread with its own `Store` — waits for it.
    _lock: Flock<File>,
}

/// Who holds an address file, as far as a listing tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// An index link names the owner and the range set it was allocated from: the link's name
    /// (read with [`parse_index_name`] when needed).
    Indexed(String),
    /// No index link: the owner is in the file (host-local's allocations).
    Unindexed,
}

/// The directory's allocations at one point, under the lock.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    /// Every allocated address, with its holder as the index tells it.
    pub addresses: HashMap<IpAddr, Holder>,
    /// Index links whose address file is gone or is another file now (a crash, or host-local removed
    /// the address alone): removed by release and GC.
    pub stale_links: Vec<String>,
}

fn io_error(action: &str, path: &Path, err: &io::Error) -> Error {
    Error::io(format!("failed to {action} {}", path.display()), err)
}

/// The index link's name for `owner`'s address from range set `set`.
pub fn index_name(owner: &Attachment, set: usize) -> String {
    format!("{}{set}", index_prefix(owner))
}

fn index_prefix(owner: &Attachment) -> String {
    format!("{INDEX_PREFIX}{}:{}:", owner.container_id.trim(), owner.ifname)
}

/// The owner and range set an index link's name gives.
pub fn parse_index_name(name: &str) -> Option<(Attachment, usize)> {
    let rest = name.strip_prefix(INDEX_PREFIX)?;
    let (container_id, rest) = rest.split_once(':')?;
    let (ifname, set) = rest.split_once(':')?;
    let owner = Attachment { container_id: container_id.to_owned(), ifname: ifname.to_owned() };
    Some((owner, set.parse().ok()?))
}

/// What an address file says about its holder: `containerID\r\nifname`, or a bare container ID as
/// host-local's early versions wrote it (matching any interface, as host-local matches it).
fn parse_owner(content: &str) -> Option<(String, Option<String>)> {
    let content = content.trim();
    if content.is_empty() {
        return None;
    }
    Some(match content.split_once(LINE_BREAK) {
        Some((id, ifname)) => (id.trim().to_owned(), Some(ifname.trim().to_owned())),
        None => (content.to_owned(), None),
    })
}

impl Store {
    /// Opens and locks `<data_dir>/<network>/`, `None` when the directory does not exist (nothing is
    /// allocated): for DEL, CHECK and GC, which must not create it.
    pub fn open_existing(data_dir: &Path, network: &str) -> Result<Option<Store>, Error> {
        Store::open_with(data_dir, network, false)
    }

    /// Opens (creating it when missing) and locks `<data_dir>/<network>/`. Blocks while another
    /// process or thread holds the lock. An unusable directory is code 5.
    pub fn open(data_dir: &Path, network: &str) -> Result<Store, Error> {
        let store = Store::open_with(data_dir, network, true)?;
        store.ok_or_else(|| io_error("create", &data_dir.join(network), &ErrorKind::NotFound.into()))
    }

    fn open_with(data_dir: &Path, network: &str, create_dir: bool) -> Result<Option<Store>, Error> {
        let dir = data_dir.join(network);
        let path = dir.join(LOCK_FILE);
        let open =
            || OpenOptions::new().read(true).write(true).create(true).truncate(false).mode(0o644).open(&path);
        let file = match open() {
            Ok(file) => file,
            Err(err) if err.kind() == ErrorKind::NotFound && !create_dir => return Ok(None),
            Err(err) if err.kind() == ErrorKind::NotFound => {
                fs::create_dir_all(&dir)
                    .map_err(|err| io_error("create the IPAM data directory", &dir, &err))?;
                open().map_err(|err| io_error("open the IPAM lock", &path, &err))?
            }
            Err(err) => return Err(io_error("open the IPAM lock", &path, &err)),
        };
        let mut file = file;
        let lock = loop {
            match Flock::lock(file, FlockArg::LockExclusive) {
                Ok(lock) => break lock,
                // A signal while waiting for another holder: wait again.
                Err((again, Errno::EINTR)) => file = again,
                Err((_, errno)) => return Err(io_error("lock", &path, &io::Error::from(errno))),
            }
        };
        Ok(Some(Store { dir, _lock: lock }))
    }

    /// The network's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Lists the directory once: the allocated addresses and who holds those the index names.
    pub fn list(&self) -> Result<Listing, Error> {
        let entries = fs::read_dir(&self.dir).map_err(|err| io_error("list", &self.dir, &err))?;
        let mut by_inode: HashMap<u64, IpAddr> = HashMap::with_capacity(256);
        let mut links: Vec<(String, u64)> = Vec::with_capacity(256);
        for entry in entries {
            let entry = entry.map_err(|err| io_error("list", &self.dir, &err))?;
            let Ok(name) = entry.file_name().into_string() else { continue };
            if name.starts_with(INDEX_PREFIX) {
                links.push((name, entry.ino()));
            } else if let Ok(address) = name.parse::<IpAddr>() {
                by_inode.insert(entry.ino(), address);
            }
        }
        let mut addresses = HashMap::with_capacity(by_inode.len());
        let mut stale_links = Vec::new();
        for (name, inode) in links {
            match by_inode.remove(&inode) {
                Some(address) => {
                    addresses.insert(address, Holder::Indexed(name));
                }
                None => stale_links.push(name),
            }
        }
        addresses.extend(by_inode.into_values().map(|address| (address, Holder::Unindexed)));
        Ok(Listing { addresses, stale_links })
    }

    /// `owner`'s addresses from its index links of the first `sets` range sets, without listing the
    /// directory: one `getxattr` per set (no link: not found), and for each link found two `statx`
    /// confirming that the address file is the link's inode. `None` when a link carries no readable
    /// address (a filesystem without user xattrs): the caller lists the directory instead. A stale
    /// link (its address now another file) is left out.
    pub fn indexed(&self, owner: &Attachment, sets: usize) -> Option<Vec<(usize, IpAddr)>> {
        let mut found = Vec::new();
        for set in 0..sets {
            let link = self.dir.join(index_name(owner, set));
            let address = match xattr::address(&link) {
                Ok(Some(address)) => address,
                Ok(None) => continue,
                Err(_) => return None,
            };
            let same = |a: &Path, b: &Path| match (fs::metadata(a), fs::metadata(b)) {
                (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
                _ => false,
            };
            if same(&link, &self.dir.join(address.to_string())) {
                found.push((set, address));
            }
        }
        Some(found)
    }

    /// The holder written in an unindexed address file: the container ID and, unless written by
    /// host-local's early versions, the interface. `None` when it cannot be read.
    pub fn read_owner(&self, address: IpAddr) -> Option<(String, Option<String>)> {
        fs::read_to_string(self.dir.join(address.to_string())).ok().as_deref().and_then(parse_owner)
    }

    /// Whether `address` is `owner`'s, reading the file only when the index does not say.
    pub fn holds(&self, listing: &Listing, owner: &Attachment, address: IpAddr) -> bool {
        match listing.addresses.get(&address) {
            None => false,
            Some(Holder::Indexed(link)) => {
                link.strip_prefix(&index_prefix(owner)).is_some_and(|set| set.parse::<usize>().is_ok())
            }
            Some(Holder::Unindexed) => self.read_owner(address).is_some_and(|(id, ifname)| {
                id == owner.container_id.trim() && ifname.is_none_or(|ifname| ifname == owner.ifname)
            }),
        }
    }

    /// The addresses `owner` holds.
    pub fn held_by(&self, listing: &Listing, owner: &Attachment) -> Vec<IpAddr> {
        let mut held: Vec<IpAddr> = listing
            .addresses
            .keys()
            .copied()
            .filter(|address| self.holds(listing, owner, *address))
            .collect();
        held.sort();
        held
    }

    /// host-local's round-robin cursor for range set `set`.
    pub fn last_reserved(&self, set: usize) -> Option<IpAddr> {
        let path = self.dir.join(format!("{LAST_RESERVED_PREFIX}{set}"));
        // One read: an address is at most 45 bytes (`fs::read_to_string` would stat and read twice).
        let mut buffer = [0u8; 64];
        let length = File::open(path).and_then(|mut file| file.read(&mut buffer)).ok()?;
        std::str::from_utf8(&buffer[..length]).ok()?.trim().parse().ok()
    }

    /// Reserves `address` for `owner` from range set `set`: the address file (exclusive create, as
    /// host-local's, or the spare renamed into place without replacing), the index link, the set's
    /// cursor. `false` when the address is taken. Nothing is left behind on failure.
    pub fn reserve(&self, owner: &Attachment, address: IpAddr, set: usize) -> Result<bool, Error> {
        let path = self.dir.join(address.to_string());
        let content = format!("{}{LINE_BREAK}{}", owner.container_id.trim(), owner.ifname);
        match self.reuse_spare(&path, content.as_bytes())? {
            Some(true) => {}
            Some(false) => return Ok(false),
            None => {
                let mut file = match OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
                    Ok(file) => file,
                    Err(err) if err.kind() == ErrorKind::AlreadyExists => return Ok(false),
                    Err(err) => return Err(io_error("create", &path, &err)),
                };
                if let Err(err) = file.write_all(content.as_bytes()) {
                    drop(file);
                    let _ = fs::remove_file(&path);
                    return Err(io_error("write", &path, &err));
                }
            }
        }
        let link = self.dir.join(index_name(owner, set));
        let linked = fs::hard_link(&path, &link).or_else(|err| {
            // A stale link (its address released without it): replaced.
            if err.kind() == ErrorKind::AlreadyExists {
                fs::remove_file(&link).and_then(|()| fs::hard_link(&path, &link))
            } else {
                Err(err)
            }
        });
        if let Err(err) = linked {
            let _ = fs::remove_file(&path);
            return Err(io_error("link", &link, &err));
        }
        // Best effort: without it (a filesystem without user xattrs) DEL lists the directory instead.
        let _ = xattr::set_address(&path, address);
        let cursor = self.dir.join(format!("{LAST_RESERVED_PREFIX}{set}"));
        if let Err(err) = overwrite(&cursor, address.to_string().as_bytes()) {
            let _ = fs::remove_file(&link);
            let _ = fs::remove_file(&path);
            return Err(io_error("write", &cursor, &err));
        }
        Ok(true)
    }

    /// Puts the spare file (a released address file) in place as `path` with `content`: `None`
    /// without a spare, `Some(false)` when `path` exists (the address is taken).
    fn reuse_spare(&self, path: &Path, content: &[u8]) -> Result<Option<bool>, Error> {
        let spare = self.dir.join(SPARE_FILE);
        match overwrite_existing(&spare, content) {
            Ok(()) => {}
            Err(err) if err.kind() == ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(io_error("rewrite", &spare, &err)),
        }
        match renameat2(AT_FDCWD, &spare, AT_FDCWD, path, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) => Ok(Some(true)),
            Err(Errno::EEXIST) => Ok(Some(false)),
            Err(Errno::ENOENT) => Ok(None),
            Err(errno) => Err(io_error("rename", &spare, &io::Error::from(errno))),
        }
    }

    /// Frees `address`; `link` is its index link's name, when it has one. The link goes first, so a
    /// crash in between leaves a plain host-local allocation. Success when already gone.
    ///
    /// The address file is renamed to the spare when there is none, for the next allocation to
    /// rename into place: on ext4 without a journal (this machine's disk) creating an inode skips,
    /// one by one, every inode deleted in the last 60 s (`recently_deleted`), which made each create
    /// cost ≈0.5 ms under pod churn. Until then the spare still holds its last owner's line, which only
    /// host-local's CHECK of that deleted attachment would see.
    pub fn free(&self, link: Option<&str>, address: IpAddr) -> Result<(), Error> {
        if let Some(link) = link {
            remove(&self.dir.join(link))?;
        }
        let path = self.dir.join(address.to_string());
        let spare = self.dir.join(SPARE_FILE);
        match renameat2(AT_FDCWD, &path, AT_FDCWD, &spare, RenameFlags::RENAME_NOREPLACE) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(_) => remove(&path),
        }
    }

    /// Undoes [`Store::reserve`] entirely (the file removed, not kept as the spare): for an ADD that
    /// fails part-way and must leave nothing behind.
    pub fn unreserve(&self, owner: &Attachment, set: usize, address: IpAddr) -> Result<(), Error> {
        remove(&self.dir.join(index_name(owner, set)))?;
        remove(&self.dir.join(address.to_string()))
    }

    /// Releases everything `owner` holds and its stale index links; returns what was freed.
    pub fn release(&self, listing: &Listing, owner: &Attachment) -> Result<Vec<IpAddr>, Error> {
        let held = self.held_by(listing, owner);
        for address in &held {
            let link = match listing.addresses.get(address) {
                Some(Holder::Indexed(link)) => Some(link.as_str()),
                _ => None,
            };
            self.free(link, *address)?;
        }
        let prefix = index_prefix(owner);
        for name in listing.stale_links.iter().filter(|name| name.starts_with(&prefix)) {
            remove(&self.dir.join(name))?;
        }
        Ok(held)
    }

    /// Removes the stale index links of a listing.
    pub fn remove_stale_links(&self, listing: &Listing) -> Result<(), Error> {
        for name in &listing.stale_links {
            remove(&self.dir.join(name))?;
        }
        Ok(())
    }

    /// The set of allocated addresses, for the range logic.
    pub fn taken(listing: &Listing) -> HashSet<IpAddr> {
        listing.addresses.keys().copied().collect()
    }
}

/// Replaces a small file's content in place: written from offset 0, then cut to length. Not
/// `O_TRUNC` (what `fs::write` and host-local's `os.WriteFile` do): ext4 treats a truncation to zero
/// as "replace via truncate" and starts writeback of the new content on close (auto_da_alloc), and the
/// next truncation then waits for that I/O — measured here at ≈3 ms per allocation, more than all the
/// rest together. Cutting to a non-zero length does not trigger it.
fn overwrite(path: &Path, content: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).create(true).truncate(false).mode(0o644).open(path)?;
    file.write_all(content)?;
    file.set_len(content.len() as u64)
}

/// Rewrites an existing file (not created when missing), as [`overwrite`] does.
fn overwrite_existing(path: &Path, content: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).open(path)?;
    file.write_all(content)?;
    file.set_len(content.len() as u64)
}

fn remove(path: &Path) -> Result<(), Error> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == ErrorKind::NotFound => Ok(()),
        Err(err) => Err(io_error("remove", path, &err)),
    }
}
