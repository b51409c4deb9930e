//! Tests of the etcd cluster fixture.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::assert_gone;
use keel_testbed::etcd::{EtcdCluster, EtcdConfig, etcdctl};

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
fn tls_client_certificates_and_auth() -> Result<()> {
    let mut cluster = EtcdCluster::start_with(EtcdConfig::new(1).client_cert_auth())?;
    let endpoint = cluster.endpoint(0)?;
    ensure!(endpoint.starts_with("https://127.0.0.1:"), "{endpoint}");
    let files = cluster.tls().context("no certificates")?.clone();
    for file in [&files.ca_cert, &files.server_cert, &files.server_key, &files.client_cert, &files.client_key]
    {
        ensure!(file.is_file(), "{} missing", file.display());
    }
    ensure!(cluster.info(0)?.health != cluster.info(0)?.client, "/health is not served apart from TLS");
    assert!(cluster.healthy(0)?);
    let mut put = cluster.etcdctl();
    put.args(["put", "/keel/tls", "secure"]);
    assert_eq!(run(put)?.trim(), "OK");
    // The CA alone is not enough: the members require a client certificate.
    let mut anonymous = etcdctl(&endpoint);
    anonymous.arg(format!("--cacert={}", files.ca_cert.display())).args([
        "--dial-timeout=1s",
        "--command-timeout=1s",
        "get",
        "/keel/tls",
    ]);
    ensure!(run(anonymous).is_err(), "a client without a certificate was served");

    cluster.enable_auth("pw-1")?;
    let mut get = cluster.etcdctl();
    get.args(["get", "/keel/tls", "--print-value-only"]);
    assert_eq!(run(get)?.trim(), "secure");
    let mut wrong = etcdctl(&endpoint);
    wrong
        .arg(format!("--cacert={}", files.ca_cert.display()))
        .arg(format!("--cert={}", files.client_cert.display()))
        .arg(format!("--key={}", files.client_key.display()))
        .args(["--user=root:wrong", "get", "/keel/tls"]);
    ensure!(run(wrong).is_err(), "a wrong password was accepted");
    ensure!(cluster.enable_auth("again").is_err(), "auth enabled twice");

    cluster.member(0)?.restart()?;
    assert!(cluster.healthy(0)?, "the restarted TLS member is not healthy");
    Ok(())
}

#[test]
fn zero_members_is_an_error() {
    assert!(EtcdCluster::start(0).is_err());
}
