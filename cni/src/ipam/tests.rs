//! The built-in IPAM over a real data directory (a tempdir): allocation, idempotency, release, CHECK,
//! GC, STATUS, error paths, and threads contending for one range.

use std::collections::HashSet;
use std::fs;
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Barrier};

use serde_json::{Value, json};

use super::store::{INDEX_PREFIX, Store};
use super::*;

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn conf(data_dir: &Path, ipam: Value) -> NetConf {
    let mut ipam = ipam;
    ipam["dataDir"] = json!(data_dir);
    let value = json!({"cniVersion": "1.1.0", "name": "kube", "type": "keel-cni", "ipam": ipam});
    NetConf::parse(value.to_string().as_bytes()).unwrap()
}

fn v4_24(data_dir: &Path) -> NetConf {
    conf(data_dir, json!({"subnet": "10.244.1.0/24", "routes": [{"dst": "0.0.0.0/0"}]}))
}

fn args(container_id: &str, ifname: &str) -> CmdArgs {
    CmdArgs { container_id: container_id.into(), ifname: ifname.into(), ..CmdArgs::default() }
}

fn addresses(result: &CniResult) -> Vec<IpAddr> {
    result.ips.iter().map(|config| config.address.addr()).collect()
}

/// The network directory's file names, sorted.
fn files(data_dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(data_dir.join("kube")) else { return Vec::new() };
    let mut names: Vec<String> = entries.map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

/// The allocated addresses on disk.
fn allocated(data_dir: &Path) -> HashSet<IpAddr> {
    files(data_dir).iter().filter_map(|name| name.parse().ok()).collect()
}

#[test]
fn allocates_in_host_locals_layout_with_gateway_and_routes() {
    let dir = tempfile::tempdir().unwrap();
    let conf = v4_24(dir.path());
    let result = HostLocal.allocate(&args("c1", "eth0"), &conf).unwrap();
    assert_eq!(
        result.to_json(crate::spec::Version::V1_1_0),
        json!({"cniVersion": "1.1.0", "ips": [{"address": "10.244.1.2/24", "gateway": "10.244.1.1"}],
               "routes": [{"dst": "0.0.0.0/0"}]})
    );
    let network = dir.path().join("kube");
    assert_eq!(fs::read_to_string(network.join("10.244.1.2")).unwrap(), "c1\r\neth0");
    assert_eq!(fs::read_to_string(network.join("last_reserved_ip.0")).unwrap(), "10.244.1.2");
    assert_eq!(
        files(dir.path()),
        ["10.244.1.2", "keel-cni:c1:eth0:0", "last_reserved_ip.0", "lock"].map(String::from)
    );
}

#[test]
fn resolv_conf_gives_the_results_dns_and_an_unreadable_one_allocates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let resolv = dir.path().join("resolv.conf");
    fs::write(&resolv, "nameserver 10.96.0.10\nsearch svc.cluster.local\noptions ndots:5\n").unwrap();
    let conf = conf(dir.path(), json!({"subnet": "10.244.1.0/24", "resolvConf": resolv}));
    let result = HostLocal.allocate(&args("c1", "eth0"), &conf).unwrap();
    assert_eq!(
        result.to_json(crate::spec::Version::V1_0_0)["dns"],
        json!({"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"], "options": ["ndots:5"]})
    );
    let missing = self::conf(dir.path(), json!({"subnet": "10.244.1.0/24", "resolvConf": "/nonexistent"}));
    let before = files(dir.path());
    assert_eq!(HostLocal.allocate(&args("c2", "eth0"), &missing).unwrap_err().code, error::IO_FAILURE);
    assert_eq!(files(dir.path()), before);
}

#[test]
fn allocation_is_idempotent_per_attachment_and_release_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let conf = v4_24(dir.path());
    let first = HostLocal.allocate(&args("c1", "eth0"), &conf).unwrap();
    assert_eq!(HostLocal.allocate(&args("c1", "eth0"), &conf).unwrap(), first);
    let second = HostLocal.allocate(&args("c1", "net1"), &conf).unwrap();
    assert_eq!(addresses(&second), [ip("10.244.1.3")]);
    HostLocal.release(&args("c1", "eth0"), &conf).unwrap();
    HostLocal.release(&args("c1", "eth0"), &conf).unwrap();
    assert_eq!(allocated(dir.path()), HashSet::from([ip("10.244.1.3")]));
    // Round robin: the released .2 is not handed out again at once.
    assert_eq!(addresses(&HostLocal.allocate(&args("c2", "eth0"), &conf).unwrap()), [ip("10.244.1.4")]);
    // Release of a network never allocated from creates nothing.
    let other = tempfile::tempdir().unwrap();
    HostLocal.release(&args("c1", "eth0"), &v4_24(other.path())).unwrap();
    assert!(fs::read_dir(other.path()).unwrap().next().is_none());
}

#[test]
fn a_released_address_file_is_renamed_into_place_for_the_next_allocation() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let conf = v4_24(dir.path());
    let network = dir.path().join("kube");
    HostLocal.allocate(&args("a-long-container-id", "eth0"), &conf).unwrap();
    let inode = fs::metadata(network.join("10.244.1.2")).unwrap().ino();
    HostLocal.release(&args("a-long-container-id", "eth0"), &conf).unwrap();
    assert_eq!(fs::metadata(network.join(store::SPARE_FILE)).unwrap().ino(), inode);
    HostLocal.allocate(&args("b", "net1"), &conf).unwrap();
    assert_eq!(fs::metadata(network.join("10.244.1.3")).unwrap().ino(), inode);
    assert_eq!(fs::read_to_string(network.join("10.244.1.3")).unwrap(), "b\r\nnet1");
    assert_eq!(files(dir.path()), ["10.244.1.3", "keel-cni:b:net1:0", "last_reserved_ip.0", "lock"]);
    // The spare is only renamed to a free address: a taken one keeps its file.
    HostLocal.release(&args("b", "net1"), &conf).unwrap();
    fs::write(network.join("last_reserved_ip.0"), "10.244.1.5").unwrap();
    fs::write(network.join("10.244.1.6"), "c\r\neth0").unwrap();
    assert_eq!(addresses(&HostLocal.allocate(&args("d", "eth0"), &conf).unwrap()), [ip("10.244.1.7")]);
    assert_eq!(fs::read_to_string(network.join("10.244.1.6")).unwrap(), "c\r\neth0");
    assert_eq!(fs::metadata(network.join("10.244.1.7")).unwrap().ino(), inode);
}

#[test]
fn dual_stack_allocates_one_address_per_set_and_a_failing_set_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let conf =
        conf(dir.path(), json!({"ranges": [[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd00:1::/126"}]]}));
    let first = HostLocal.allocate(&args("c1", "eth0"), &conf).unwrap();
    assert_eq!(addresses(&first), [ip("10.244.1.2"), ip("fd00:1::2")]);
    assert_eq!(first.ips[1].gateway, Some(ip("fd00:1::1")));
    assert_eq!(first.ips[1].address.prefix_len(), 126);
    assert_eq!(
        addresses(&HostLocal.allocate(&args("c2", "eth0"), &conf).unwrap()),
        [ip("10.244.1.3"), ip("fd00:1::3")]
    );
    let before = files(dir.path());
    let err = HostLocal.allocate(&args("c3", "eth0"), &conf).unwrap_err();
    assert_eq!(err.code, error::RANGE_EXHAUSTED);
    assert_eq!(
        err.msg,
        "failed to allocate for range 1: no IP addresses available in range set: fd00:1::1-fd00:1::3"
    );
    assert_eq!(files(dir.path()), before, "the IPv4 address of the failed ADD was released");
}

#[test]
fn an_exhausted_range_is_code_100_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let conf = conf(dir.path(), json!({"subnet": "10.0.0.0/30"}));
    assert_eq!(addresses(&HostLocal.allocate(&args("c1", "eth0"), &conf).unwrap()), [ip("10.0.0.2")]);
    let before = files(dir.path());
    let err = HostLocal.allocate(&args("c2", "eth0"), &conf).unwrap_err();
    assert_eq!(err.code, error::RANGE_EXHAUSTED);
    assert!(err.msg.contains("range set: 10.0.0.1-10.0.0.2"), "{}", err.msg);
    assert_eq!(files(dir.path()), before);
    let status = HostLocal.status(&CmdArgs::default(), &conf).unwrap_err();
    assert_eq!(status.code, error::PLUGIN_NOT_AVAILABLE);
    HostLocal.release(&args("c1", "eth0"), &conf).unwrap();
    HostLocal.status(&CmdArgs::default(), &conf).unwrap();
}

#[test]
fn requested_addresses_are_allocated_or_refused_with_code_7_leaving_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let conf = v4_24(dir.path());
    let mut with_ip = args("c1", "eth0");
    with_ip.args.push(("IP".into(), "10.244.1.50".into()));
    assert_eq!(addresses(&HostLocal.allocate(&with_ip, &conf).unwrap()), [ip("10.244.1.50")]);
    // The same attachment asking again gets what it holds; another container asking for it is refused.
    assert_eq!(addresses(&HostLocal.allocate(&with_ip, &conf).unwrap()), [ip("10.244.1.50")]);
    let before = files(dir.path());
    for (requested, words) in [
        (
            "10.244.1.50",
            "requested IP address 10.244.1.50 is not available in range set 10.244.1.1-10.244.1.254",
        ),
        ("10.244.1.1", "requested ip 10.244.1.1 is subnet's gateway"),
        ("10.244.2.1", "failed to allocate all requested IPs: 10.244.2.1"),
    ] {
        let mut other = args("c2", "eth0");
        other.args.push(("IP".into(), requested.into()));
        let err = HostLocal.allocate(&other, &conf).unwrap_err();
        assert_eq!((err.code, err.msg.as_str()), (error::INVALID_NETWORK_CONFIG, words));
        assert_eq!(files(dir.path()), before, "{requested}");
    }
    // runtimeConfig.ips (the ips capability), with a prefix length.
    let mut value = conf.raw.clone();
    value["runtimeConfig"] = json!({"ips": ["10.244.1.60/24"]});
    let runtime = NetConf::parse(value.to_string().as_bytes()).unwrap();
    assert_eq!(addresses(&HostLocal.allocate(&args("c3", "eth0"), &runtime).unwrap()), [ip("10.244.1.60")]);
}

#[test]
fn an_unusable_data_directory_is_code_5_and_status_50() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-directory");
    fs::write(&file, "").unwrap();
    let conf = v4_24(&file);
    let err = HostLocal.allocate(&args("c1", "eth0"), &conf).unwrap_err();
    assert_eq!(err.code, error::IO_FAILURE, "{err}");
    assert!(err.msg.contains("not-a-directory/kube"), "{}", err.msg);
    assert_eq!(HostLocal.status(&CmdArgs::default(), &conf).unwrap_err().code, error::PLUGIN_NOT_AVAILABLE);
    assert_eq!(fs::read(&file).unwrap(), b"");
    // Ranges only from the runtime (ipRanges with each ADD): STATUS judges the data directory alone.
    let runtime_ranges = self::conf(dir.path(), json!({}));
    HostLocal.status(&CmdArgs::default(), &runtime_ranges).unwrap();
    assert_eq!(
        HostLocal.status(&CmdArgs::default(), &self::conf(&file, json!({}))).unwrap_err().code,
        error::PLUGIN_NOT_AVAILABLE
    );
}

#[test]
fn check_passes_only_for_addresses_the_attachment_holds() {
    let dir = tempfile::tempdir().unwrap();
    let conf = v4_24(dir.path());
    let held = addresses(&HostLocal.allocate(&args("c1", "eth0"), &conf).unwrap());
    HostLocal.check(&args("c1", "eth0"), &conf, &held).unwrap();
    HostLocal.check(&args("c1", "eth0"), &conf, &[]).unwrap();
    for (attachment, addresses) in [
        (args("c1", "eth0"), vec![ip("10.244.1.9")]),
        (args("c1", "net1"), vec![]),
        (args("c2", "eth0"), held.clone()),
    ] {
        let err = HostLocal.check(&attachment, &conf, &addresses).unwrap_err();
        assert_eq!(err.code, error::DRIFT, "{attachment:?}");
    }
    HostLocal.release(&args("c1", "eth0"), &conf).unwrap();
    assert_eq!(HostLocal.check(&args("c1", "eth0"), &conf, &held).unwrap_err().code, error::DRIFT);
}

#[test]
fn allocations_written_by_host_local_are_found_without_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let conf = v4_24(dir.path());
    HostLocal.allocate(&args("c1", "eth0"), &conf).unwrap();
    let network = dir.path().join("kube");
    // As host-local writes them: no index link; an early version's bare container ID too.
    fs::write(network.join("10.244.1.3"), "c9\r\neth0").unwrap();
    fs::write(network.join("10.244.1.4"), "old").unwrap();
    HostLocal.check(&args("c9", "eth0"), &conf, &[ip("10.244.1.3")]).unwrap();
    // Found taken by their exclusive create, without a listing.
    assert_eq!(addresses(&HostLocal.allocate(&args("c10", "eth0"), &conf).unwrap()), [ip("10.244.1.5")]);
    HostLocal.check(&args("old", "eth7"), &conf, &[ip("10.244.1.4")]).unwrap();
    HostLocal.release(&args("c9", "eth0"), &conf).unwrap();
    HostLocal.release(&args("old", "eth0"), &conf).unwrap();
    assert_eq!(allocated(dir.path()), HashSet::from([ip("10.244.1.2"), ip("10.244.1.5")]));
}

#[test]
fn gc_releases_every_allocation_not_in_the_valid_attachments() {
    let dir = tempfile::tempdir().unwrap();
    let conf = v4_24(dir.path());
    for id in ["a", "b", "c", "d"] {
        HostLocal.allocate(&args(id, "eth0"), &conf).unwrap();
    }
    let network = dir.path().join("kube");
    fs::write(network.join("10.244.1.100"), "legacy\r\neth0").unwrap();
    fs::write(network.join("10.244.1.101"), "kept\r\neth0").unwrap();
    fs::write(network.join("10.244.1.102"), "").unwrap();
    // A link whose address file is gone (a crash between the two unlinks).
    fs::write(network.join(format!("{INDEX_PREFIX}z:eth0:0")), "z\r\neth0").unwrap();
    let valid = [
        Attachment { container_id: "b".into(), ifname: "eth0".into() },
        Attachment { container_id: "d".into(), ifname: "eth0".into() },
        Attachment { container_id: "kept".into(), ifname: "eth0".into() },
        Attachment { container_id: "a".into(), ifname: "net1".into() },
    ];
    HostLocal.gc(&CmdArgs::default(), &conf, &valid).unwrap();
    let held = HashSet::from([ip("10.244.1.3"), ip("10.244.1.5"), ip("10.244.1.101"), ip("10.244.1.102")]);
    assert_eq!(allocated(dir.path()), held);
    let links: Vec<String> = files(dir.path()).into_iter().filter(|n| n.starts_with(INDEX_PREFIX)).collect();
    assert_eq!(links, ["keel-cni:b:eth0:0", "keel-cni:d:eth0:0"]);
    HostLocal.gc(&CmdArgs::default(), &conf, &valid).unwrap();
    assert_eq!(allocated(dir.path()), held);
}

#[test]
fn a_hundred_threads_with_their_own_locks_get_a_hundred_distinct_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let conf = Arc::new(v4_24(dir.path()));
    let barrier = Arc::new(Barrier::new(100));
    let threads: Vec<_> = (0..100)
        .map(|i| {
            let (conf, barrier) = (Arc::clone(&conf), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                // Each HostLocal call opens the lock file itself: its own open file description.
                addresses(&HostLocal.allocate(&args(&format!("c{i}"), "eth0"), &conf).unwrap())[0]
            })
        })
        .collect();
    let got: HashSet<IpAddr> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(got.len(), 100);
    assert_eq!(allocated(dir.path()), got);

    // 80 released concurrently; the 20 left are "leaked", GC with 10 of them valid frees 10.
    let threads: Vec<_> = (0..80)
        .map(|i| {
            let conf = Arc::clone(&conf);
            std::thread::spawn(move || HostLocal.release(&args(&format!("c{i}"), "eth0"), &conf).unwrap())
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(allocated(dir.path()).len(), 20);
    let valid: Vec<Attachment> =
        (80..90).map(|i| Attachment { container_id: format!("c{i}"), ifname: "eth0".into() }).collect();
    HostLocal.gc(&CmdArgs::default(), &conf, &valid).unwrap();
    assert_eq!(allocated(dir.path()).len(), 10);
    for i in 80..90 {
        HostLocal.check(&args(&format!("c{i}"), "eth0"), &conf, &[]).unwrap();
    }
    HostLocal.gc(&CmdArgs::default(), &conf, &[]).unwrap();
    assert_eq!(files(dir.path()), ["keel-cni.spare", "last_reserved_ip.0", "lock"]);
}

/// CPU time (user, system) this thread has used, in nanoseconds: the cost of an operation without
/// the time other processes on the machine take from it.
fn thread_cpu() -> (u128, u128) {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a rusage into the pointer it is given, which is valid and aligned.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr());
        usage.assume_init()
    };
    let nanos = |t: libc::timeval| t.tv_sec as u128 * 1_000_000_000 + t.tv_usec as u128 * 1000;
    (nanos(usage.ru_utime), nanos(usage.ru_stime))
}

/// Not a timing assertion: prints what an ADD and a DEL cost in the store with 254 allocations held,
/// as CPU time (user+system) per operation
/// (`cargo nextest run -p keel-cni --release -E 'test(store_cost)' --no-capture`).
#[test]
fn store_cost_at_254_allocations() {
    let dir = tempfile::tempdir().unwrap();
    let conf = conf(dir.path(), json!({"subnet": "10.244.0.0/23"}));
    for i in 0..254 {
        let id = format!("held{i:03}-0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab");
        HostLocal.allocate(&args(&id, "eth0"), &conf).unwrap();
    }
    let rounds = 500;
    let (mut add, mut del) = ((0, 0), (0, 0));
    for round in 0..rounds {
        let attachment = args(&format!("bench{round}"), "eth0");
        let start = thread_cpu();
        HostLocal.allocate(&attachment, &conf).unwrap();
        let added = thread_cpu();
        HostLocal.release(&attachment, &conf).unwrap();
        let deleted = thread_cpu();
        add = (add.0 + added.0 - start.0, add.1 + added.1 - start.1);
        del = (del.0 + deleted.0 - added.0, del.1 + deleted.1 - added.1);
    }
    assert_eq!(allocated(dir.path()).len(), 254);
    let store = Store::open(dir.path(), "kube").unwrap();
    assert_eq!(store.list().unwrap().stale_links, Vec::<String>::new());
    let micros = |(user, system): (u128, u128)| (user / rounds / 1000, system / rounds / 1000);
    let (add, del) = (micros(add), micros(del));
    println!(
        "store with 254 allocations, CPU per operation: ADD {}+{} µs, DEL {}+{} µs (user+system)",
        add.0, add.1, del.0, del.1
    );
}

#[test]
fn dual_stack_requests_go_to_their_family_and_a_repeated_add_cannot_change_its_address() {
    let dir = tempfile::tempdir().unwrap();
    let value = json!({"cniVersion": "1.1.0", "name": "kube", "type": "keel-cni",
        "ipam": {"ranges": [[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd00:1::/64"}]], "dataDir": dir.path()},
        "args": {"cni": {"ips": ["fd00:1::99"]}}});
    let conf = NetConf::parse(value.to_string().as_bytes()).unwrap();
    let mut with_ip = args("c1", "eth0");
    with_ip.args.push(("IP".into(), "10.244.1.99".into()));
    let result = HostLocal.allocate(&with_ip, &conf).unwrap();
    assert_eq!(addresses(&result), [ip("10.244.1.99"), ip("fd00:1::99")]);
    HostLocal.status(&CmdArgs::default(), &conf).unwrap();

    let before = files(dir.path());
    let mut other_ip = args("c1", "eth0");
    other_ip.args.push(("IP".into(), "10.244.1.98".into()));
    let err = HostLocal.allocate(&other_ip, &conf).unwrap_err();
    assert_eq!(err.code, error::INVALID_NETWORK_CONFIG);
    assert!(err.msg.contains("already holds 10.244.1.99"), "{}", err.msg);
    assert_eq!(files(dir.path()), before);
    HostLocal.check(&args("c1", "eth0"), &conf, &addresses(&result)).unwrap();
    HostLocal.release(&args("c1", "eth0"), &conf).unwrap();
    assert!(allocated(dir.path()).is_empty());
}

#[test]
fn index_links_without_their_address_or_gone_stale_fall_back_to_the_listing() {
    let dir = tempfile::tempdir().unwrap();
    let conf = v4_24(dir.path());
    let network = dir.path().join("kube");
    // A link without the address attribute (a filesystem without user xattrs would make these).
    fs::create_dir_all(&network).unwrap();
    fs::write(network.join("10.244.1.7"), "c7\r\neth0").unwrap();
    fs::hard_link(network.join("10.244.1.7"), network.join("keel-cni:c7:eth0:0")).unwrap();
    assert_eq!(addresses(&HostLocal.allocate(&args("c7", "eth0"), &conf).unwrap()), [ip("10.244.1.7")]);
    HostLocal.check(&args("c7", "eth0"), &conf, &[ip("10.244.1.7")]).unwrap();
    HostLocal.release(&args("c7", "eth0"), &conf).unwrap();
    assert!(allocated(dir.path()).is_empty());
    assert!(!network.join("keel-cni:c7:eth0:0").exists());

    // A link whose address file was replaced behind its back (now another container's) is stale: it
    // neither gives c1 that address nor lets c1's DEL free it.
    HostLocal.allocate(&args("c1", "eth0"), &conf).unwrap();
    let address = allocated(dir.path()).into_iter().next().unwrap();
    fs::remove_file(network.join(address.to_string())).unwrap();
    fs::write(network.join(address.to_string()), "c2\r\neth0").unwrap();
    HostLocal.release(&args("c1", "eth0"), &conf).unwrap();
    assert_eq!(fs::read_to_string(network.join(address.to_string())).unwrap(), "c2\r\neth0");
    assert!(!network.join("keel-cni:c1:eth0:0").exists());
    HostLocal.check(&args("c2", "eth0"), &conf, &[address]).unwrap();
}

/// A DEL releases everything the attachment holds, as host-local's does (it releases by owner, not by
/// range): the node's conflist may have lost a family, or swapped them, since the ADD.
#[test]
fn release_frees_every_allocation_of_the_attachment_even_after_the_ranges_changed() {
    let dir = tempfile::tempdir().unwrap();
    let dual = conf(
        dir.path(),
        json!({"ranges": [[{"subnet": "10.244.1.0/24"}], [{"subnet": "fd00:10:244:1::/64"}]]}),
    );
    let v4_only = v4_24(dir.path());
    let v6_first = conf(
        dir.path(),
        json!({"ranges": [[{"subnet": "fd00:10:244:1::/64"}], [{"subnet": "10.244.1.0/24"}]]}),
    );
    for release_conf in [&v4_only, &v6_first] {
        HostLocal.allocate(&args("c1", "eth0"), &dual).unwrap();
        HostLocal.allocate(&args("c2", "eth0"), &dual).unwrap();
        assert_eq!(allocated(dir.path()).len(), 4);
        HostLocal.release(&args("c1", "eth0"), release_conf).unwrap();
        let left = files(dir.path());
        assert!(!left.iter().any(|name| name.contains("c1")), "{left:?}");
        assert_eq!(allocated(dir.path()).len(), 2, "{left:?}");
        HostLocal.release(&args("c2", "eth0"), &dual).unwrap();
        assert!(allocated(dir.path()).is_empty());
    }
}
