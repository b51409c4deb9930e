//! Tests of the containerd fixture.

mod common;

use std::time::Instant;

use anyhow::Result;
use common::assert_gone;
use keel_testbed::containerd::{Containerd, ContainerdOptions};

#[test]
fn starts_with_cri_ok_and_stops_clean() -> Result<()> {
    let started = Instant::now();
    let mut containerd = Containerd::start(&ContainerdOptions::default())?;
    eprintln!("containerd ready in {:?}", started.elapsed());
    containerd.check_cri()?;
    let pid = containerd.daemon().pid();
    let socket = containerd.socket().to_owned();
    assert!(socket.exists());
    drop(containerd);
    assert_gone(pid, "containerd");
    assert!(!socket.exists(), "the socket dir was not removed");
    Ok(())
}

#[test]
fn runs_inside_a_test_host() -> Result<()> {
    keel_testbed::require_root()?;
    let fabric = keel_testbed::Fabric::new()?;
    let node = fabric.add_host("node1")?;
    let opts = ContainerdOptions { netns: Some(node.fd().clone()), ..ContainerdOptions::default() };
    let mut containerd = Containerd::start(&opts)?;
    containerd.check_cri()?;
    let pid = containerd.daemon().pid();
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net"))?;
    let node_ns = node.run(|| std::fs::read_link("/proc/thread-self/ns/net"))??;
    assert_eq!(theirs, node_ns, "containerd does not run in the host's network namespace");
    drop(containerd);
    assert_gone(pid, "containerd");
    Ok(())
}
