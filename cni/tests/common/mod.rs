//! What keel-cni's root tests share: a node namespace with a pod namespace, the binary run inside the
//! node, and the kernel's state read back with `ip -j` (fine in tests; keel-cni itself never runs `ip`).

use std::io::Write;
use std::net::{IpAddr, Shutdown, TcpListener, TcpStream, UdpSocket};
use std::path::Path;
use std::process::{Command, Stdio};

use keel_testbed::NetNs;
use serde_json::Value;

/// The keel-cni binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_keel-cni");

/// A new namespace named `<unique prefix>-<label>`.
pub fn netns(label: &str) -> NetNs {
    keel_testbed::require_root().unwrap();
    NetNs::create(&format!("{}-{label}", keel_testbed::unique_prefix())).unwrap()
}

/// `ip -j ARGS` inside `ns`, parsed.
pub fn ip(ns: &NetNs, args: &[&str]) -> Value {
    let output = ns.command("ip").arg("-j").args(args).output().unwrap();
    assert!(output.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    if output.stdout.iter().all(u8::is_ascii_whitespace) {
        return Value::Array(Vec::new());
    }
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The names of the links in `ns`.
pub fn links(ns: &NetNs) -> Vec<String> {
    let mut names: Vec<String> = ip(ns, &["link", "show"])
        .as_array()
        .unwrap()
        .iter()
        .map(|link| link["ifname"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

/// One link of `ns` with details (`ip -d`), if present.
pub fn link(ns: &NetNs, name: &str) -> Option<Value> {
    ip(ns, &["-d", "link", "show"]).as_array().unwrap().iter().find(|link| link["ifname"] == name).cloned()
}

/// `address/prefix` of every global address on `name` in `ns`.
pub fn addresses(ns: &NetNs, name: &str) -> Vec<String> {
    let Some(link) =
        ip(ns, &["address", "show"]).as_array().unwrap().iter().find(|l| l["ifname"] == name).cloned()
    else {
        return Vec::new();
    };
    link["addr_info"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|info| info["scope"] == "global")
        .map(|info| format!("{}/{}", info["local"].as_str().unwrap(), info["prefixlen"]))
        .collect()
}

/// `dst via gw dev` of every route (both families) in `ns`.
pub fn routes(ns: &NetNs) -> Vec<String> {
    let mut all = Vec::new();
    for family in ["-4", "-6"] {
        for route in ip(ns, &[family, "route", "show"]).as_array().unwrap() {
            if route["dst"].as_str().is_some_and(|dst| dst.starts_with("fe80") || dst.starts_with("ff00")) {
                continue;
            }
            let gw = route["gateway"].as_str().map(|gw| format!(" via {gw}")).unwrap_or_default();
            all.push(format!(
                "{}{gw} dev {}",
                route["dst"].as_str().unwrap(),
                route["dev"].as_str().unwrap()
            ));
        }
    }
    all.sort();
    all
}

/// The outcome of one run of the plugin.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|err| panic!("{err}: {:?}", self.stdout))
    }

    /// The spec's error code, or 0 on success.
    pub fn error_code(&self) -> u64 {
        if self.code == 0 { 0 } else { self.json()["code"].as_u64().unwrap() }
    }

    pub fn ok(self) -> Run {
        assert_eq!(self.code, 0, "{}", self.stdout);
        self
    }
}

/// Runs `program` inside `node` with exactly `env` and `stdin`.
pub fn run_in(node: &NetNs, program: &str, env: &[(&str, &str)], stdin: &[u8]) -> Run {
    let mut command: Command = node.command(program);
    command.env_clear().envs(env.iter().copied()).stdin(Stdio::piped()).stdout(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin).unwrap();
    drop(input);
    let output = child.wait_with_output().unwrap();
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
    }
}

/// The CNI environment of one attachment.
pub fn env<'a>(
    command: &'a str,
    container: &'a str,
    netns: &'a str,
    ifname: &'a str,
) -> Vec<(&'a str, &'a str)> {
    vec![
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", container),
        ("CNI_NETNS", netns),
        ("CNI_IFNAME", ifname),
        ("CNI_PATH", "/usr/lib/cni"),
    ]
}

/// keel-cni inside `node` for the attachment `(container, eth0)` in `pod`.
pub fn cni(node: &NetNs, command: &str, container: &str, pod: &Path, conf: &Value) -> Run {
    let netns = pod.to_str().unwrap();
    run_in(node, BIN, &env(command, container, netns, "eth0"), conf.to_string().as_bytes())
}

/// Waits (bounded) until `done` holds: for what the kernel finishes after the plugin exited.
pub fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..200 {
        if done() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    panic!("{what} did not happen within 5 s");
}

/// A TCP connection and a UDP datagram from a socket made in `from` to `to` on a listener made in
/// `server`, each carrying a line back and forth.
pub fn reach(from: &NetNs, server: &NetNs, to: IpAddr) {
    let listener = server.run(|| TcpListener::bind((to, 0))).unwrap().unwrap();
    let port = listener.local_addr().unwrap().port();
    let udp = server.run(|| UdpSocket::bind((to, 0))).unwrap().unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let (mut stream, _) = listener.accept().unwrap();
            std::io::copy(&mut stream.try_clone().unwrap(), &mut stream).unwrap();
        });
        scope.spawn(|| {
            let mut buffer = [0u8; 64];
            let (n, peer) = udp.recv_from(&mut buffer).unwrap();
            udp.send_to(&buffer[..n], peer).unwrap();
        });
        from.run(|| {
            let mut stream = TcpStream::connect((to, port)).unwrap();
            stream.write_all(b"ping tcp").unwrap();
            stream.shutdown(Shutdown::Write).unwrap();
            let mut echoed = String::new();
            std::io::Read::read_to_string(&mut stream, &mut echoed).unwrap();
            assert_eq!(echoed, "ping tcp");
            let socket = UdpSocket::bind((
                if to.is_ipv4() { IpAddr::from([0u8; 4]) } else { IpAddr::from([0u16; 8]) },
                0,
            ))
            .unwrap();
            socket.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
            socket.send_to(b"ping udp", (to, udp_port)).unwrap();
            let mut buffer = [0u8; 64];
            let (n, _) = socket.recv_from(&mut buffer).unwrap();
            assert_eq!(&buffer[..n], b"ping udp");
        })
        .unwrap();
    });
}
