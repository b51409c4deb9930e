//! Image references normalized as containerd does, and malformed ones refused with InvalidArgument.

use keel_shim::image::Code;
use keel_shim::image::reference::Reference;

const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn norm(s: &str) -> String {
    Reference::parse(s).map(|r| r.to_string()).unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn normalizes_like_containerd() {
    assert_eq!(norm("busybox"), "docker.io/library/busybox:latest");
    assert_eq!(norm("busybox:1.36"), "docker.io/library/busybox:1.36");
    assert_eq!(norm("user/app"), "docker.io/user/app:latest");
    assert_eq!(norm("index.docker.io/library/busybox"), "docker.io/library/busybox:latest");
    assert_eq!(norm("registry.k8s.io/pause:3.9"), "registry.k8s.io/pause:3.9");
    assert_eq!(norm("localhost:5000/a/b:t"), "localhost:5000/a/b:t");
    assert_eq!(norm("localhost/pause"), "localhost/pause:latest");
    assert_eq!(norm("127.0.0.1:5000/pause"), "127.0.0.1:5000/pause:latest");
    assert_eq!(norm("[::1]:5000/pause"), "[::1]:5000/pause:latest");
    assert_eq!(norm(&format!("busybox@{D}")), format!("docker.io/library/busybox@{D}"));
    assert_eq!(norm(&format!("busybox:1.36@{D}")), format!("docker.io/library/busybox:1.36@{D}"));
    assert_eq!(norm("a.b/x__y.z-w---v:T_1.2-3"), "a.b/x__y.z-w---v:T_1.2-3");
    let r = Reference::parse("localhost:5000/a/b").unwrap();
    assert_eq!((r.registry.as_str(), r.repository.as_str()), ("localhost:5000", "a/b"));
    assert_eq!(r.name(), "localhost:5000/a/b");
}

#[test]
fn refuses_malformed_references() {
    for bad in [
        "",
        "Busybox",
        "busybox:",
        ":tag",
        "busybox:-x",
        "busybox@sha256:abc",
        "busybox@md5:0123456789abcdef0123456789abcdef",
        &format!("busybox@{}", D.to_uppercase().replace("SHA256", "sha256")),
        "a//b",
        "a/-b",
        "a/b.",
        "a/b..c",
        "host:port/x",
        "-bad.host/x",
        "localhost:5000/",
        "busy box",
        "busybox:a:b",
        &"a".repeat(256),
        &format!("busybox:{}", "t".repeat(129)),
    ] {
        let e = Reference::parse(bad).expect_err(bad);
        assert_eq!(e.code(), Code::InvalidArgument, "{bad}");
    }
}
