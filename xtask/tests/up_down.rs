//! `cargo xtask up` and `down` for real (root): what `up` makes exists and works, and `down` leaves
//! nothing — no namespace, no process, no file.

use std::path::PathBuf;
use std::process::Command;

use keel_testbed::netns;

/// Runs `down` when dropped, so a failing test still cleans up.
struct Down(String);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = xtask(&["down", "--name", &self.0]);
    }
}

/// Runs xtask marked as a fixture process of this test: if the test process dies, the sweep of the next
/// `cargo xtask test` kills whatever it left (the supervisor inherits the mark).
fn xtask(args: &[&str]) -> std::process::Output {
    let me = std::process::id();
    Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(args)
        .env(keel_testbed::process::OWNER_ENV, me.to_string())
        .env(
            keel_testbed::process::OWNER_START_ENV,
            keel_testbed::process_start_time(me).unwrap().to_string(),
        )
        .output()
        .expect("run xtask")
}

fn namespaces_of(name: &str) -> Vec<String> {
    netns::list_named().unwrap().into_iter().filter(|n| n.starts_with(&format!("{name}-"))).collect()
}

fn open(ns: &str) -> netns::NetNsFd {
    netns::NetNsFd::open(&PathBuf::from(netns::NETNS_DIR).join(ns)).unwrap()
}

#[test]
fn up_starts_the_cluster_network_and_down_removes_everything() {
    keel_testbed::require_root().unwrap();
    // The supervisor `up` leaves running is re-parented to us when `up` exits, so we can reap it.
    // SAFETY: prctl(PR_SET_CHILD_SUBREAPER) only changes an attribute of this test process.
    assert_eq!(unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) }, 0);
    let name = keel_testbed::unique_prefix();
    let guard = Down(name.clone());

    let out = xtask(&[
        "up",
        "--no-build",
        "--nodes",
        "2",
        "--name",
        &name,
        "--registry-port",
        "0",
        "--apiserver-port",
        "0",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "up failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Keel is up"), "{stdout}");
    assert!(stdout.contains(&format!("cargo xtask down --name {name}")), "{stdout}");

    let mut made = namespaces_of(&name);
    made.sort();
    assert_eq!(made, [format!("{name}-fabric"), format!("{name}-node1"), format!("{name}-node2")]);
    let state_dir = PathBuf::from(keel_testbed::UP_STATE_DIR).join(&name);
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state_dir.join("state.json")).unwrap()).unwrap();
    let supervisor = u32::try_from(state["supervisor"].as_u64().unwrap()).unwrap();
    assert!(keel_testbed::pid_alive(supervisor));
    assert_eq!(state["nodes"][1]["address"], "198.18.0.3");

    // The nodes are on one network: node1 reaches node2's address.
    let node2 = open(&format!("{name}-node2"));
    let listener = node2.run(|| std::net::TcpListener::bind("198.18.0.3:10250")).unwrap().unwrap();
    let node1 = open(&format!("{name}-node1"));
    node1.run(|| std::net::TcpStream::connect("198.18.0.3:10250")).unwrap().unwrap();
    // Every node reaches the cluster's registry on the fabric, and it holds the busybox image, which
    // the machine reads through the forwarder.
    let cluster_registry: std::net::SocketAddr =
        state["registry"]["cluster_address"].as_str().unwrap().parse().unwrap();
    let v2 = node1
        .run(|| keel_testbed::loopback::http_get(cluster_registry, "/v2/", std::time::Duration::from_secs(5)))
        .unwrap()
        .unwrap();
    assert_eq!(v2.status, 200);
    let local = state["registry"]["local_address"].as_str().unwrap();
    let registry_pid = u32::try_from(state["registry"]["pid"].as_u64().unwrap()).unwrap();
    assert!(keel_testbed::pid_alive(registry_pid));
    let inspect = keel_testbed::registry::skopeo(&[
        "inspect",
        "--tls-verify=false",
        &format!("docker://{local}/busybox:latest"),
    ])
    .unwrap();
    let digest = state["registry"]["busybox_digest"].as_str().unwrap();
    assert!(digest.starts_with("sha256:"), "{digest}");
    assert!(inspect.contains(digest), "{inspect}");
    drop((listener, node1, node2));

    // keel-apiserver answers kubectl on the machine through the kubeconfig `up` printed.
    let kubeconfig = state["apiserver"]["kubeconfig"].as_str().unwrap();
    assert!(stdout.contains(&format!("kubectl --kubeconfig {kubeconfig} get namespaces")), "{stdout}");
    let get = keel_testbed::kubectl::minor(31)
        .unwrap()
        .command()
        .args(["--kubeconfig", kubeconfig, "get", "namespaces", "-o", "name"])
        .output()
        .unwrap();
    let namespaces = String::from_utf8_lossy(&get.stdout);
    assert!(namespaces.contains("namespace/default"), "{namespaces}{}", String::from_utf8_lossy(&get.stderr));
    // Each component's kubeconfig authenticates as upstream's user for it; RBAC and the Node
    // authorizer give it what upstream gives it. The kubeconfigs name the fabric address: they are
    // used from inside the fabric namespace.
    let fabric = open(state["fabric"].as_str().unwrap());
    let kubectl = keel_testbed::kubectl::minor(31).unwrap();
    let as_component = |component: &str, args: &[&str]| -> (bool, String) {
        let path = state["kubeconfigs"][component].as_str().unwrap_or_else(|| panic!("{component}: {state}"));
        let mut command = kubectl.command();
        command.args(["--kubeconfig", path]).args(args);
        fabric.enter_on_spawn(&mut command);
        let output = command.output().unwrap();
        (
            output.status.success(),
            format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)),
        )
    };
    for (component, user, groups) in [
        ("kube-scheduler", "system:kube-scheduler", r#"["system:authenticated"]"#),
        ("kube-controller-manager", "system:kube-controller-manager", r#"["system:authenticated"]"#),
        ("kube-proxy", "system:kube-proxy", r#"["system:authenticated"]"#),
        ("kubelet-node1", "system:node:node1", r#"["system:nodes","system:authenticated"]"#),
        ("kubelet-node2", "system:node:node2", r#"["system:nodes","system:authenticated"]"#),
    ] {
        let (ok, out) = as_component(component, &["auth", "whoami", "-o", "json"]);
        assert!(ok, "{component}: {out}");
        let me: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(me["status"]["userInfo"]["username"], user, "{out}");
        assert_eq!(me["status"]["userInfo"]["groups"].to_string(), groups, "{out}");
    }
    for (component, args, allowed) in [
        ("kube-scheduler", &["create", "pods", "--subresource=binding"][..], true),
        ("kube-scheduler", &["create", "pods"][..], false),
        (
            "kube-controller-manager",
            &["create", "serviceaccounts", "--subresource=token", "-n", "kube-system"][..],
            true,
        ),
        ("kube-proxy", &["list", "endpointslices.discovery.k8s.io"][..], true),
        ("kube-proxy", &["list", "secrets"][..], false),
        ("kubelet-node1", &["get", "nodes/node1"][..], true),
        ("kubelet-node1", &["list", "secrets"][..], false),
    ] {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        let (_, out) = as_component(component, &all);
        // stdout's answer comes first; kubectl may add warnings on stderr after it.
        let answer = out.lines().next().unwrap_or_default().trim();
        assert_eq!(answer == "yes", allowed, "{component} {args:?}: {out}");
    }
    let apiserver_pid = u32::try_from(state["apiserver"]["pid"].as_u64().unwrap()).unwrap();
    let apiserver_local = state["apiserver"]["local_address"].as_str().unwrap().to_owned();

    let out = xtask(&["down", "--name", &name]);
    assert!(out.status.success(), "down failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("supervisor (pid {supervisor})")));
    // Reap the supervisor (our re-parented child): it exited by itself on SIGTERM.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(supervisor).unwrap());
    let status = nix::sys::wait::waitpid(pid, None).unwrap();
    assert!(matches!(status, nix::sys::wait::WaitStatus::Exited(_, 0)), "{status:?}");
    assert_eq!(namespaces_of(&name), Vec::<String>::new());
    assert!(!state_dir.exists());
    assert!(!keel_testbed::pid_alive(registry_pid), "the registry outlived down");
    assert!(std::net::TcpStream::connect(local).is_err(), "the registry forwarder still listens");
    assert!(!keel_testbed::pid_alive(apiserver_pid), "keel-apiserver outlived down");
    assert!(std::net::TcpStream::connect(&apiserver_local).is_err(), "the apiserver forwarder still listens");

    // A second `down` finds nothing to do.
    std::mem::forget(guard);
    let out = xtask(&["down", "--name", &name]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to remove"));
}
