//! The fabric, hosts and forwarder against the real kernel (root).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use keel_testbed::host_state::HostNetState;
use keel_testbed::{Fabric, Forwarder, NetNs, Readiness, Sweep, netns};

fn names_with_prefix(prefix: &str) -> Vec<String> {
    netns::list_named().unwrap().into_iter().filter(|n| n.starts_with(prefix)).collect()
}

/// Accepts one connection on `listener` and echoes what it reads, upper-cased, until EOF.
fn serve_one_upper(listener: TcpListener) -> std::thread::JoinHandle<SocketAddr> {
    std::thread::spawn(move || {
        let (mut conn, peer) = listener.accept().unwrap();
        let mut buf = [0u8; 1024];
        loop {
            let n = conn.read(&mut buf).unwrap();
            if n == 0 {
                return peer;
            }
            conn.write_all(&buf[..n].to_ascii_uppercase()).unwrap();
        }
    })
}

fn roundtrip(stream: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
    stream.write_all(msg).unwrap();
    let mut reply = vec![0u8; msg.len()];
    stream.read_exact(&mut reply).unwrap();
    reply
}

#[test]
fn two_hosts_talk_tcp_across_the_fabric() {
    keel_testbed::require_root().unwrap();
    let fabric = Fabric::new().unwrap();
    let a = fabric.add_host("a").unwrap();
    let b = fabric.add_host("b").unwrap();
    assert_ne!(a.address(), b.address());

    let listener = a.run(|| TcpListener::bind((a.address(), 7000))).unwrap().unwrap();
    let server = serve_one_upper(listener);
    let mut stream = b.run(|| TcpStream::connect((a.address(), 7000))).unwrap().unwrap();
    assert_eq!(roundtrip(&mut stream, b"across the fabric"), b"ACROSS THE FABRIC");
    drop(stream);
    // The server saw the connection come from b's fabric address: it crossed the bridge.
    assert_eq!(server.join().unwrap().ip(), b.address());

    // The fabric's addresses exist only inside its namespaces, never on the machine itself. (No
    // connection is attempted from the machine's namespace: its traffic must stay on loopback.)
    let machine = std::process::Command::new("ip").args(["-o", "address"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&machine.stdout).contains(&a.address().to_string()));
}

#[test]
fn commands_and_async_blocks_run_inside_a_host() {
    keel_testbed::require_root().unwrap();
    let fabric = Fabric::new().unwrap();
    let host = fabric.add_host("node1").unwrap();

    let output = host.command("ip").args(["-o", "-4", "address", "show", "eth0"]).output().unwrap();
    assert!(output.status.success());
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(text.contains(&format!("{}/16", host.address())), "{text}");

    let routes = host.command("ip").args(["route", "show", "default"]).output().unwrap();
    assert!(String::from_utf8_lossy(&routes.stdout).contains("via 198.18.0.1 dev eth0"));

    // An async block inside the host binds on the host's address, which the machine does not have.
    let bound = host
        .block_on(|| async {
            tokio::net::TcpListener::bind((host.address(), 0)).await.map(|l| l.local_addr())
        })
        .unwrap();
    assert_eq!(bound.unwrap().unwrap().ip(), host.address());
    assert!(TcpListener::bind((host.address(), 0)).is_err());

    // The host's gateway (the fabric's bridge address) answers: connect to a listener in the fabric.
    let gw = fabric.ns().run(|| TcpListener::bind((Ipv4Addr::new(198, 18, 0, 1), 7001))).unwrap().unwrap();
    let server = serve_one_upper(gw);
    let mut stream = host.run(|| TcpStream::connect((fabric.gateway(), 7001))).unwrap().unwrap();
    assert_eq!(roundtrip(&mut stream, b"gw"), b"GW");
    drop(stream);
    server.join().unwrap();
}

#[test]
fn a_daemon_runs_inside_a_host_and_serves_another_host() {
    keel_testbed::require_root().unwrap();
    let fabric = Fabric::new().unwrap();
    let web = fabric.add_host("web").unwrap();
    let client = fabric.add_host("client").unwrap();
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("index.html"), "hello from the web host\n").unwrap();
    let addr = SocketAddr::from((web.address(), 80));
    let mut httpd = std::process::Command::new("busybox");
    httpd.args(["httpd", "-f", "-p", &addr.to_string(), "-h"]).arg(root.path());
    let ready = Readiness::Http { addr, path: "/index.html".into() };
    let daemon = web.start_daemon("httpd", httpd, ready, Duration::from_secs(10)).unwrap();
    let pid = daemon.pid();
    // It runs in the web host's namespace...
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net")).unwrap();
    assert_eq!(theirs, web.run(|| std::fs::read_link("/proc/thread-self/ns/net")).unwrap().unwrap());
    // ...and the client host reaches it across the fabric.
    let page =
        client.run(|| keel_testbed::loopback::http_get(addr, "/index.html", Duration::from_secs(5))).unwrap();
    let page = page.unwrap();
    assert_eq!((page.status, page.body.as_str()), (200, "hello from the web host\n"));
    drop(daemon);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "httpd was not stopped and reaped");
}

#[test]
fn the_forwarder_carries_a_connection_from_loopback_into_a_namespace() {
    keel_testbed::require_root().unwrap();
    let fabric = Fabric::new().unwrap();
    let host = fabric.add_host("api").unwrap();
    let listener = host.run(|| TcpListener::bind((host.address(), 6443))).unwrap().unwrap();
    let server = serve_one_upper(listener);

    let target = SocketAddr::from((host.address(), 6443));
    let forwarder = Forwarder::start(host.fd(), target).unwrap();
    assert!(forwarder.local_addr().ip().is_loopback());
    let mut stream = TcpStream::connect(forwarder.local_addr()).unwrap();
    assert_eq!(roundtrip(&mut stream, b"kubectl get pods"), b"KUBECTL GET PODS");
    assert_eq!(roundtrip(&mut stream, b"again"), b"AGAIN");
    drop(stream);
    // The upstream connection was made from inside the namespace: its source is the host's own address.
    assert_eq!(server.join().unwrap().ip(), host.address());

    // While nobody listens on the target, a client's connection is closed at once; once a server
    // listens, the same forwarder carries connections again.
    let later = SocketAddr::from((host.address(), 8080));
    let forwarder = Forwarder::start(host.fd(), later).unwrap();
    let mut stream = TcpStream::connect(forwarder.local_addr()).unwrap();
    let mut buf = [0u8; 1];
    assert!(matches!(stream.read(&mut buf), Ok(0) | Err(_)), "a connection to nobody stayed open");
    let listener = host.run(|| TcpListener::bind(later)).unwrap().unwrap();
    let server = serve_one_upper(listener);
    let mut stream = TcpStream::connect(forwarder.local_addr()).unwrap();
    assert_eq!(roundtrip(&mut stream, b"still serving"), b"STILL SERVING");
    drop(stream);
    server.join().unwrap();
}

/// Every process's reference to the network namespace with this inode: its threads' namespaces and
/// its open namespace files. A namespace without a name stays alive through any of them.
fn references_to_netns(inode: u64) -> Vec<String> {
    let wanted = format!("net:[{inode}]");
    let mut found = Vec::new();
    for proc_entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = proc_entry.file_name().to_string_lossy().into_owned();
        if !pid.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        for sub in ["task", "fd"] {
            for entry in std::fs::read_dir(proc_entry.path().join(sub)).into_iter().flatten().flatten() {
                let link = if sub == "task" { entry.path().join("ns/net") } else { entry.path() };
                if std::fs::read_link(&link).is_ok_and(|target| target.to_string_lossy() == wanted) {
                    found.push(link.display().to_string());
                }
            }
        }
    }
    found
}

#[test]
fn nothing_is_left_after_a_test_even_one_that_panics() {
    keel_testbed::require_root().unwrap();
    use std::os::unix::fs::MetadataExt;
    let mut prefix = String::new();
    let mut inodes = Vec::new();
    let mut forwarded = None;
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        let fabric = Fabric::new().unwrap();
        prefix = fabric.prefix().to_owned();
        let host = fabric.add_host("x").unwrap();
        for ns in [fabric.ns(), host.ns()] {
            inodes.push(std::fs::metadata(ns.path()).unwrap().ino());
        }
        let listener = host.run(|| TcpListener::bind((host.address(), 80))).unwrap().unwrap();
        let forwarder = Forwarder::start(host.fd(), SocketAddr::from((host.address(), 80))).unwrap();
        forwarded = Some(forwarder.local_addr());
        let _conn = TcpStream::connect(forwarder.local_addr()).unwrap();
        let _accepted = listener.accept().unwrap();
        assert_eq!(names_with_prefix(&prefix).len(), 2);
        assert!(!references_to_netns(inodes[1]).is_empty());
        panic!("a test failing half-way");
    }));
    assert!(result.is_err());
    assert!(!prefix.is_empty());
    assert_eq!(names_with_prefix(&prefix), Vec::<String>::new());
    // The forwarder stopped listening (its connections, whose sockets held the host's namespace, were
    // closed with it), and no thread or open namespace file of any process still holds the namespaces:
    // the kernel frees them, and the veth pairs and bridge in them with them.
    assert!(TcpStream::connect(forwarded.unwrap()).is_err(), "the forwarder still listens");
    for inode in inodes {
        assert_eq!(references_to_netns(inode), Vec::<String>::new(), "namespace net:[{inode}] is still held");
    }
}

#[test]
fn sweep_removes_leftovers_of_dead_processes_only() {
    keel_testbed::require_root().unwrap();
    // A pid that was alive and is not any more: a test process that crashed.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    assert!(!keel_testbed::pid_alive(dead));
    // A live process that is not us: another test running in parallel.
    let mut other = std::process::Command::new("sleep").arg("60").spawn().unwrap();

    let leftover = NetNs::create(&format!("keel-t{dead}-0-crashed")).unwrap();
    let leftover_name = leftover.name().to_owned();
    std::mem::forget(leftover); // as if its process died without running Drop
    let parallel = NetNs::create(&format!("keel-t{}-0-running", other.id())).unwrap();
    let mine = Fabric::new().unwrap();

    let removed = keel_testbed::sweep(Sweep::DeadOwners);
    // Other tests may sweep at the same time and remove the leftover first: assert the effect.
    let names = netns::list_named().unwrap();
    assert!(!names.contains(&leftover_name), "{removed:?}");
    assert!(names.contains(&parallel.name().to_owned()), "a live owner's namespace was swept");
    assert_eq!(names_with_prefix(mine.prefix()).len(), 1, "our own namespace was swept");
    drop(parallel);
    other.kill().unwrap();
    other.wait().unwrap();
}

#[test]
fn a_leftover_of_an_earlier_process_with_our_pid_is_taken_over() {
    keel_testbed::require_root().unwrap();
    // Names are unique within a process, so an existing name with our pid is an earlier process's.
    let name = format!("keel-t{}-999999-reused", std::process::id());
    std::mem::forget(NetNs::create(&name).unwrap());
    let again = NetNs::create(&name).unwrap();
    assert_eq!(netns::list_named().unwrap().iter().filter(|n| **n == name).count(), 1);
    drop(again);
    assert!(!netns::list_named().unwrap().contains(&name));
}

#[test]
fn the_machines_own_namespace_is_unchanged_by_the_testbed() {
    keel_testbed::require_root().unwrap();
    let before = HostNetState::capture().unwrap();
    {
        let fabric = Fabric::new().unwrap();
        let a = fabric.add_host("a").unwrap();
        let b = fabric.add_host("b").unwrap();
        let listener = a.run(|| TcpListener::bind((a.address(), 80))).unwrap().unwrap();
        let server = serve_one_upper(listener);
        let forwarder = Forwarder::start(a.fd(), SocketAddr::from((a.address(), 80))).unwrap();
        let mut stream = TcpStream::connect(forwarder.local_addr()).unwrap();
        assert_eq!(roundtrip(&mut stream, b"x"), b"X");
        drop(stream);
        server.join().unwrap();
        drop(b);
    }
    let after = HostNetState::capture().unwrap();
    if let Some(diff) = after.diff(&before) {
        panic!("the machine's network namespace changed:\n{diff}");
    }
}
