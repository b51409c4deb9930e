//! Tests of the busybox image builder and the registry fixture.

use crate::common;

use std::time::Instant;

use anyhow::{Context, Result};
use common::assert_gone;
use keel_testbed::images::{OciImage, busybox_image};
use keel_testbed::registry::{Registry, skopeo};

fn inspect_digest(transport_ref: &str, extra: &[&str]) -> Result<String> {
    let mut args = vec!["inspect"];
    args.extend_from_slice(extra);
    args.push(transport_ref);
    let json: serde_json::Value = serde_json::from_str(&skopeo(&args)?).context("parsing skopeo inspect")?;
    json["Digest"].as_str().map(str::to_owned).context("no Digest in skopeo inspect")
}

#[test]
fn build_push_and_inspect_busybox() -> Result<()> {
    let started = Instant::now();
    let image = busybox_image()?;
    eprintln!("busybox image ready in {:?} at {}", started.elapsed(), image.layout.display());
    let digest = image.manifest_digest()?;
    assert!(digest.starts_with("sha256:"), "{digest}");
    let again = busybox_image()?;
    assert!(std::ptr::eq(image, again), "built twice in one process");
    assert_eq!(image.layout, again.layout);

    let started = Instant::now();
    let mut registry = Registry::start()?;
    eprintln!("registry ready in {:?} on {}", started.elapsed(), registry.addr());
    let pid = registry.daemon().pid();
    let reference = registry.push_oci_layout(&image.layout, &image.tag, "busybox", "latest")?;
    assert_eq!(reference, format!("127.0.0.1:{}/busybox:latest", registry.addr().port()));
    let pushed = inspect_digest(&format!("docker://{reference}"), &["--tls-verify=false"])?;
    assert_eq!(pushed, digest, "the registry holds another manifest than the layout");

    let missing = registry.push_oci_layout(&image.layout, "no-such-tag", "busybox", "x");
    assert!(missing.is_err(), "pushing a missing tag must fail");
    drop(registry);
    assert_gone(pid, "docker-registry");
    Ok(())
}

#[test]
fn a_registry_inside_a_host_is_reached_through_a_forwarder() -> Result<()> {
    keel_testbed::require_root()?;
    let image = busybox_image()?;
    let fabric = keel_testbed::Fabric::new()?;
    let host = fabric.add_host("registry")?;
    let addr = std::net::SocketAddr::from((host.address(), 5000));
    let mut registry = Registry::start_in(Some(host.fd()), addr)?;
    let pid = registry.daemon().pid();
    let forwarder = keel_testbed::Forwarder::start(host.fd(), addr)?;
    let via = forwarder.local_addr().to_string();
    let reference =
        keel_testbed::registry::push_oci_layout_to(&via, &image.layout, &image.tag, "busybox", "latest")?;
    let pushed = inspect_digest(&format!("docker://{reference}"), &["--tls-verify=false"])?;
    assert_eq!(pushed, image.manifest_digest()?);
    drop(forwarder);
    drop(registry);
    assert_gone(pid, "docker-registry");
    Ok(())
}

#[test]
fn oci_archive_has_the_same_manifest() -> Result<()> {
    let image = busybox_image()?;
    let dir = tempfile::tempdir()?;
    let archive = dir.path().join("busybox.tar");
    image.image_archive(&archive)?;
    let digest = inspect_digest(&format!("oci-archive:{}:{}", archive.display(), image.tag), &[])?;
    assert_eq!(digest, image.manifest_digest()?);
    Ok(())
}

#[test]
fn bad_layout_is_an_error_not_a_panic() {
    let image = OciImage { layout: "/nonexistent/layout".into(), tag: "latest".into() };
    assert!(image.manifest_digest().is_err());
    assert!(image.image_archive(std::path::Path::new("/nonexistent/out.tar")).is_err());
}

#[test]
fn parallel_builds_share_one_complete_layout() -> Result<()> {
    let cache = tempfile::tempdir()?;
    let images = std::thread::scope(|scope| {
        let handles: Vec<_> =
            (0..4).map(|_| scope.spawn(|| keel_testbed::images::busybox_image_in(cache.path()))).collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow::anyhow!("builder thread panicked"))?)
            .collect::<Result<Vec<_>>>()
    })?;
    let digest = images[0].manifest_digest()?;
    for image in &images {
        assert_eq!(image.layout, images[0].layout);
        assert_eq!(image.manifest_digest()?, digest);
    }
    let entries: Vec<_> = std::fs::read_dir(cache.path())?.flatten().map(|e| e.file_name()).collect();
    assert_eq!(entries.len(), 1, "build dirs left behind: {entries:?}");
    Ok(())
}

#[test]
fn image_runs_busybox_applets() -> Result<()> {
    let image = busybox_image()?;
    let dir = tempfile::tempdir()?;
    let bundle = dir.path().join("bundle");
    let status = std::process::Command::new("umoci")
        .args(["unpack", "--image", &format!("{}:{}", image.layout.display(), image.tag)])
        .arg(&bundle)
        .output()?;
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let rootfs = bundle.join("rootfs");
    for applet in keel_testbed::images::APPLETS {
        let link = std::fs::read_link(rootfs.join("bin").join(applet))?;
        assert_eq!(link, std::path::Path::new("busybox"), "{applet}");
    }
    let out = std::process::Command::new("chroot")
        .arg(&rootfs)
        .args(["/bin/sh", "-c", "echo hi from $(uname -s)"])
        .output()?;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "hi from Linux");
    let config = bundle.join("config.json");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(config)?)?;
    assert_eq!(config["process"]["args"], serde_json::json!(["sh"]));
    Ok(())
}
