//! Tests of the etcd cluster fixture.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::assert_gone;
use keel_testbed::etcd::{EtcdCluster, etcdctl};

fn run(mut cmd: Command) -> Result<String> {
    let output = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        output.status.success(),
        "{cmd:?} exited with {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn pids(cluster: &mut EtcdCluster) -> Result<Vec<u32>> {
    (0..cluster.len()).map(|i| Ok(cluster.member(i)?.pid())).collect()
}

#[test]
fn one_member_put_get() -> Result<()> {
    let started = Instant::now();
    let mut cluster = EtcdCluster::start(1)?;
    eprintln!("1-member etcd ready in {:?}", started.elapsed());
    let mut put = cluster.etcdctl();
    put.args(["put", "/keel/one", "value-1"]);
    assert_eq!(run(put)?.trim(), "OK");
    let mut get = etcdctl(&cluster.endpoint(0)?);
    get.args(["get", "/keel/one", "--print-value-only"]);
    assert_eq!(run(get)?.trim(), "value-1");
    assert!(cluster.healthy(0)?);
    assert!(cluster.member(1).is_err(), "member 1 of a 1-member cluster");
    let pids = pids(&mut cluster)?;
    drop(cluster);
    for pid in pids {
        assert_gone(pid, "etcd member");
    }
    Ok(())
}

#[test]
fn three_members_survive_a_crash_and_rejoin() -> Result<()> {
    let started = Instant::now();
    let mut cluster = EtcdCluster::start(3)?;
    eprintln!("3-member etcd ready in {:?}", started.elapsed());
    assert_eq!(cluster.client_urls().len(), 3);
    let all_pids = pids(&mut cluster)?;

    let crashed = cluster.member(0)?.pid();
    cluster.member(0)?.kill();
    assert_gone(crashed, "the killed etcd member");
    let survivors = format!("{},{}", cluster.endpoint(1)?, cluster.endpoint(2)?);
    // The survivors may need an election first if the leader was killed.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut put = etcdctl(&survivors);
        put.args(["--command-timeout=2s", "put", "/keel/quorum", "still-here"]);
        match run(put) {
            Ok(out) if out.trim() == "OK" => break,
            result => {
                eprintln!("put at {:?}: {result:?}", started.elapsed());
                ensure!(Instant::now() < deadline, "put without one member failed: {result:?}");
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    eprintln!("put without member 0 done at {:?}", started.elapsed());
    let restarted = Instant::now();
    cluster.member(0)?.restart()?;
    eprintln!("etcd member rejoined in {:?}", restarted.elapsed());
    assert!(cluster.healthy(0)?, "the restarted member is not healthy");
    let mut get = etcdctl(&cluster.endpoint(0)?);
    get.args(["get", "/keel/quorum", "--print-value-only"]);
    assert_eq!(run(get)?.trim(), "still-here", "the restarted member missed a write");

    let restarted_pid = cluster.member(0)?.pid();
    eprintln!("checks done at {:?}", started.elapsed());
    drop(cluster);
    eprintln!("stopped at {:?}", started.elapsed());
    for pid in all_pids.into_iter().chain([restarted_pid]) {
        assert_gone(pid, "etcd member");
    }
    Ok(())
}

#[test]
fn zero_members_is_an_error() {
    assert!(EtcdCluster::start(0).is_err());
}
