//! Images against a real registry (keel-testbed's docker-registry, images pushed by skopeo): pulls by
//! tag and by digest, an index with two platforms, coalesced concurrent pulls, plain HTTP only for
//! insecure registries, registry mirrors tried in order before the registry, a corrupted blob refused leaving nothing behind, layers unpacked with their
//! whiteouts and mounted as an overlay, records surviving a reopen, removal and garbage collection.
//! Run as root (device nodes, trusted xattrs, overlay mounts).

use std::io::Write as _;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, ensure};
use base64::Engine as _;
use keel_shim::image::{ImageError, ImageStore, RegistryMirror, rootfs, unpack};
use keel_testbed::cri::{CriClient, api};
use keel_testbed::images::busybox_image;
use keel_testbed::registry::{Registry, skopeo};
use serde_json::{Value, json};
use sha2::Digest as _;

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", sha2::Sha256::digest(bytes))
}

/// What a test layer holds.
enum Item<'a> {
    Dir(&'a str),
    File(&'a str, &'a str),
    Symlink(&'a str, &'a str),
    HardLink(&'a str, &'a str),
    CharDev(&'a str, u32, u32),
}

/// A layer tar of `items` (uncompressed), with raw names (so `..` can be written).
fn layer(items: &[Item<'_>]) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for item in items {
        let mut header = tar::Header::new_ustar();
        let (name, data): (&str, &[u8]) = match item {
            Item::Dir(n) => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                (n, b"")
            }
            Item::File(n, content) => {
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(0o640);
                (n, content.as_bytes())
            }
            Item::Symlink(n, target) => {
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_mode(0o777);
                header.set_link_name(target)?;
                (n, b"")
            }
            Item::HardLink(n, target) => {
                header.set_entry_type(tar::EntryType::Link);
                header.set_link_name(target)?;
                (n, b"")
            }
            Item::CharDev(n, major, minor) => {
                header.set_entry_type(tar::EntryType::Char);
                header.set_mode(0o666);
                header.set_device_major(*major)?;
                header.set_device_minor(*minor)?;
                (n, b"")
            }
        };
        let raw = &mut header.as_old_mut().name;
        ensure!(name.len() < raw.len(), "test name too long");
        raw.fill(0);
        raw[..name.len()].copy_from_slice(name.as_bytes());
        header.set_uid(1000);
        header.set_gid(1001);
        header.set_size(data.len() as u64);
        header.set_mtime(1_700_000_000);
        header.set_cksum();
        builder.append(&header, data)?;
    }
    Ok(builder.into_inner()?)
}

fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes)?;
    Ok(encoder.finish()?)
}

/// An OCI image layout written by hand.
struct Layout {
    dir: PathBuf,
    refs: Vec<Value>,
}

impl Layout {
    fn new(dir: &Path) -> Result<Layout> {
        std::fs::create_dir_all(dir.join("blobs/sha256"))?;
        std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)?;
        Ok(Layout { dir: dir.to_owned(), refs: Vec::new() })
    }

    fn blob(&self, media_type: &str, bytes: &[u8]) -> Result<Value> {
        let d = digest(bytes);
        std::fs::write(self.dir.join("blobs/sha256").join(&d["sha256:".len()..]), bytes)?;
        Ok(json!({ "mediaType": media_type, "digest": d, "size": bytes.len() }))
    }

    /// An image of `layers` (uncompressed tars; stored gzip-compressed when `gz`) for linux/`arch`;
    /// returns the manifest's descriptor.
    fn image(&self, layers: &[Vec<u8>], gz: bool, arch: &str) -> Result<Value> {
        let diff_ids: Vec<String> = layers.iter().map(|l| digest(l)).collect();
        let config = json!({
            "architecture": arch, "os": "linux",
            "config": { "Cmd": ["sh"], "User": "1000:1001", "Env": ["PATH=/bin"] },
            "rootfs": { "type": "layers", "diff_ids": diff_ids },
        });
        let config = self.blob("application/vnd.oci.image.config.v1+json", config.to_string().as_bytes())?;
        let mut descriptors = Vec::new();
        for l in layers {
            descriptors.push(if gz {
                self.blob("application/vnd.oci.image.layer.v1.tar+gzip", &gzip(l)?)?
            } else {
                self.blob("application/vnd.oci.image.layer.v1.tar", l)?
            });
        }
        let manifest = json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config, "layers": descriptors,
        });
        let mut desc =
            self.blob("application/vnd.oci.image.manifest.v1+json", manifest.to_string().as_bytes())?;
        desc["platform"] = json!({ "os": "linux", "architecture": arch });
        Ok(desc)
    }

    fn index(&self, manifests: &[Value]) -> Result<Value> {
        let index = json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests,
        });
        self.blob("application/vnd.oci.image.index.v1+json", index.to_string().as_bytes())
    }

    fn tag(&mut self, mut desc: Value, name: &str) -> Result<()> {
        desc["annotations"] = json!({ "org.opencontainers.image.ref.name": name });
        self.refs.push(desc);
        let index = json!({ "schemaVersion": 2, "manifests": self.refs });
        std::fs::write(self.dir.join("index.json"), index.to_string())?;
        Ok(())
    }
}

/// Pushes `tag` of `layout` (all its platforms) to `registry` as `repo:tag`.
fn push_all(registry: &Registry, layout: &Path, tag: &str, repo: &str) -> Result<String> {
    let reference = format!("{}/{repo}:{tag}", registry.host());
    let source = format!("oci:{}:{tag}", layout.display());
    skopeo(&["copy", "--all", "--dest-tls-verify=false", &source, &format!("docker://{reference}")])?;
    Ok(reference)
}

/// The two layers of the whiteout test: the second deletes `/b` and `/a/x`, makes `/d` opaque.
fn whiteout_layers() -> Result<Vec<Vec<u8>>> {
    let lower = layer(&[
        Item::Dir("a"),
        Item::File("a/x", "x"),
        Item::File("a/y", "y"),
        Item::File("b", "b"),
        Item::HardLink("c", "b"),
        Item::Dir("d"),
        Item::File("d/old", "old"),
        Item::Symlink("l", "/etc/passwd"),
        Item::CharDev("null", 1, 3),
    ])?;
    let upper = layer(&[
        Item::File(".wh.b", ""),
        Item::File("a/.wh.x", ""),
        Item::Dir("d"),
        Item::File("d/.wh..wh..opq", ""),
        Item::File("d/new", "new"),
    ])?;
    Ok(vec![lower, upper])
}

fn files_under(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        out.push(entry?.path());
    }
    Ok(out)
}

/// Checks the merged view of the whiteout image mounted at `target`.
fn check_merged(target: &Path) -> Result<()> {
    ensure!(!target.join("b").exists(), "/b is whited out");
    ensure!(!target.join("a/x").exists() && target.join("a/y").exists(), "/a/x whited out, /a/y kept");
    ensure!(std::fs::read_to_string(target.join("c"))? == "b", "the hard link keeps its content");
    ensure!(!target.join("d/old").exists(), "the opaque /d hides /d/old");
    ensure!(std::fs::read_to_string(target.join("d/new"))? == "new");
    ensure!(std::fs::read_link(target.join("l"))? == Path::new("/etc/passwd"));
    let null = std::fs::symlink_metadata(target.join("null"))?;
    ensure!(null.file_type().is_char_device() && null.rdev() == nix::sys::stat::makedev(1, 3));
    let y = std::fs::metadata(target.join("a/y"))?;
    ensure!((y.uid(), y.gid(), y.mode() & 0o7777) == (1000, 1001, 0o640), "{y:?}");
    Ok(())
}

#[test]
fn layers_unpack_with_whiteouts_and_mount_as_an_overlay() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let layers = whiteout_layers()?;
    let mut dirs = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let fs = dir.path().join(format!("layer{i}"));
        std::fs::create_dir(&fs)?;
        let compressed = gzip(l)?;
        let bytes = if i == 0 { compressed.as_slice() } else { l.as_slice() };
        unpack::unpack_layer(bytes, &fs, Some(&digest(l)))?;
        dirs.push(fs);
    }
    // In the layer: a 0/0 character device for a whiteout, the opaque xattr for an opaque directory.
    let wh = std::fs::symlink_metadata(dirs[1].join("b"))?;
    ensure!(wh.file_type().is_char_device() && wh.rdev() == 0, "{wh:?}");
    ensure!(!dirs[1].join(".wh.b").exists() && !dirs[1].join("d/.wh..wh..opq").exists());
    let opaque = std::process::Command::new("getfattr")
        .args(["-n", unpack::OPAQUE_XATTR, "--only-values"])
        .arg(dirs[1].join("d"))
        .output();
    if let Ok(out) = opaque {
        ensure!(out.stdout == b"y", "opaque xattr: {out:?}");
    }
    let target = dir.path().join("rootfs");
    rootfs::mount(&dirs, &dir.path().join("upper"), &dir.path().join("work"), &target)?;
    let checked = check_merged(&target);
    rootfs::unmount(&target)?;
    rootfs::unmount(&target)?;
    checked?;
    ensure!(files_under(&target)?.is_empty(), "unmounted");
    Ok(())
}

#[test]
fn layers_that_write_outside_are_refused() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside)?;
    let bad = [
        layer(&[Item::File("../escaped", "x")])?,
        layer(&[Item::Symlink("esc", &outside.to_string_lossy()), Item::File("esc/f", "x")])?,
        layer(&[Item::Symlink("esc", "../../outside"), Item::File("esc/g", "x")])?,
        layer(&[Item::HardLink("h", "../../outside/target")])?,
    ];
    for (i, l) in bad.iter().enumerate() {
        let fs = dir.path().join(format!("l{i}/fs"));
        std::fs::create_dir_all(&fs)?;
        let result = unpack::unpack_layer(l.as_slice(), &fs, None);
        ensure!(matches!(result, Err(ImageError::Invalid(_))), "layer {i}: {result:?}");
    }
    ensure!(files_under(&outside)?.is_empty(), "nothing written outside");
    ensure!(!dir.path().join("escaped").exists());
    // A layer whose content is not its diff id is refused.
    let fs = dir.path().join("mismatch");
    std::fs::create_dir(&fs)?;
    let l = layer(&[Item::File("f", "x")])?;
    let result = unpack::unpack_layer(l.as_slice(), &fs, Some(&digest(b"other")));
    ensure!(matches!(result, Err(ImageError::Digest { .. })), "{result:?}");
    Ok(())
}

fn blobs(root: &Path) -> Result<Vec<PathBuf>> {
    files_under(&root.join("content/blobs/sha256"))
}

fn snapshots(root: &Path) -> Result<Vec<PathBuf>> {
    files_under(&root.join("snapshots"))
}

#[test]
fn pulls_by_tag_and_digest_then_removes_and_collects() -> Result<()> {
    let registry = Registry::start()?;
    let busybox = busybox_image()?;
    let reference = registry.push_oci_layout(&busybox.layout, &busybox.tag, "keel/busybox", "v1")?;
    let manifest = busybox.manifest_digest()?;
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let insecure = vec![registry.host()];
    let rt = runtime()?;
    let store = ImageStore::open(&root, &insecure)?;
    let image = rt.block_on(store.pull(&reference, None))?;
    let name = format!("{}/keel/busybox", registry.host());
    ensure!(image.repo_tags == [format!("{name}:v1")], "{image:?}");
    ensure!(image.repo_digests == [format!("{name}@{manifest}")], "{image:?}");
    ensure!(image.id.starts_with("sha256:") && image.size > 0);
    ensure!(image.layers.iter().all(|l| l.join("bin/busybox").is_file()), "{:?}", image.layers);
    // The record is the config's digest, and the config's blob is stored.
    let hex = &image.id["sha256:".len()..];
    ensure!(root.join("images").join(format!("{hex}.json")).is_file());
    ensure!(root.join("content/blobs/sha256").join(hex).is_file());
    // Lookups: id, short id, tag, normalized digest.
    for name in [image.id.as_str(), &hex[..12], &reference, &format!("{name}@{manifest}")] {
        ensure!(store.get(name)?.id == image.id, "get {name}");
    }
    ensure!(matches!(store.get("keel/unknown"), Err(ImageError::NotFound(_))));
    // By digest: the same image, no tag added.
    let by_digest = rt.block_on(store.pull(&format!("{name}@{manifest}"), None))?;
    ensure!(by_digest.id == image.id && by_digest.repo_tags.len() == 1);
    // A reopened store has the image.
    drop(store);
    let store = ImageStore::open(&root, &insecure)?;
    ensure!(store.get(&reference)?.layers == image.layers);
    ensure!(store.list().len() == 1);
    // Snapshots a container holds stay after the image goes, until released.
    let held: std::collections::HashSet<PathBuf> = image.layers.iter().cloned().collect();
    store.in_use(held);
    rt.block_on(store.remove(&image.id))?;
    ensure!(store.list().is_empty() && blobs(&root)?.is_empty());
    ensure!(image.layers.iter().all(|l| l.join("bin/busybox").is_file()), "held snapshots are kept");
    store.in_use(std::collections::HashSet::new());
    ensure!(snapshots(&root)?.is_empty(), "released snapshots are collected");
    rt.block_on(store.pull(&reference, None))?;
    // Removed by a tag, all its names go, then its blobs and snapshots.
    rt.block_on(store.remove(&reference))?;
    ensure!(store.list().is_empty());
    ensure!(blobs(&root)?.is_empty(), "{:?}", blobs(&root)?);
    ensure!(snapshots(&root)?.is_empty(), "{:?}", snapshots(&root)?);
    ensure!(files_under(&root.join("images"))?.is_empty());
    // Removing an unknown image succeeds.
    rt.block_on(store.remove(&reference))?;
    // A Docker schema 2 manifest (with Docker media types) pulls as the OCI one did.
    let v2s2 = format!("{}/keel/docker:v1", registry.host());
    skopeo(&[
        "copy",
        "--format",
        "v2s2",
        "--dest-tls-verify=false",
        &busybox.oci_reference(),
        &format!("docker://{v2s2}"),
    ])?;
    let served = skopeo(&["inspect", "--tls-verify=false", "--raw", &format!("docker://{v2s2}")])?;
    ensure!(served.contains("application/vnd.docker.distribution.manifest.v2+json"), "{served}");
    let docker = rt.block_on(store.pull(&v2s2, None))?;
    ensure!(docker.layers.iter().all(|l| l.join("bin/busybox").is_file()));
    // A tag moves to the image pulled last; the image it left keeps its other names.
    let mut layout = Layout::new(&dir.path().join("layout"))?;
    let desc = layout.image(&[layer(&[Item::File("other", "x")])?], true, "amd64")?;
    layout.tag(desc, "v1")?;
    push_all(&registry, &layout.dir, "v1", "keel/docker")?;
    let other = rt.block_on(store.pull(&v2s2, None))?;
    ensure!(other.id != docker.id && other.repo_tags == [v2s2.clone()]);
    let left = store.get(&docker.id)?;
    ensure!(left.repo_tags.is_empty() && left.repo_digests.len() == 1, "{left:?}");
    rt.block_on(store.remove(&docker.id))?;
    rt.block_on(store.remove(&other.id))?;
    ensure!(blobs(&root)?.is_empty() && snapshots(&root)?.is_empty());
    // A malformed reference is InvalidArgument; an unknown tag NotFound.
    let err = rt.block_on(store.pull("Bad/Name", None)).unwrap_err();
    ensure!(err.code() == keel_shim::image::Code::InvalidArgument, "{err:?}");
    let err = rt.block_on(store.pull(&format!("{name}:nope"), None)).unwrap_err();
    ensure!(matches!(err, ImageError::NotFound(_)), "{err:?}");
    Ok(())
}

#[test]
fn an_index_gives_this_platforms_image_with_its_whiteouts_applied() -> Result<()> {
    let registry = Registry::start()?;
    let dir = tempfile::tempdir()?;
    let mut layout = Layout::new(&dir.path().join("layout"))?;
    let mut layers = whiteout_layers()?;
    layers.push(layer(&[Item::File("arch", "amd64")])?);
    let amd64 = layout.image(&layers, true, "amd64")?;
    let arm64 = layout.image(&[layer(&[Item::File("arch", "arm64")])?], false, "arm64")?;
    let index = layout.index(&[arm64, amd64.clone()])?;
    layout.tag(index, "multi")?;
    let reference = push_all(&registry, &layout.dir, "multi", "keel/multi")?;
    let root = dir.path().join("root");
    let rt = runtime()?;
    let store = ImageStore::open(&root, &[registry.host()])?;
    let image = rt.block_on(store.pull(&reference, None))?;
    let name = format!("{}/keel/multi", registry.host());
    // The repo digest is the index's as the registry serves it (skopeo may re-encode it).
    let served = skopeo(&["inspect", "--tls-verify=false", "--raw", &format!("docker://{reference}")])?;
    let served_index: Value = serde_json::from_str(&served)?;
    ensure!(served_index["manifests"].as_array().is_some_and(|m| m.len() == 2), "{served}");
    ensure!(image.repo_digests == [format!("{name}@{}", digest(served.as_bytes()))], "{image:?}");
    ensure!(image.layers.len() == 3);
    let record = store.record(&image.id)?;
    ensure!(record.index_digest.as_deref() == Some(digest(served.as_bytes()).as_str()));
    ensure!(record.manifest_digest == amd64["digest"].as_str().unwrap_or_default());
    ensure!(image.config.config().as_ref().and_then(|c| c.user().clone()).as_deref() == Some("1000:1001"));
    let target = dir.path().join("rootfs");
    rootfs::mount(&image.layers, &dir.path().join("upper"), &dir.path().join("work"), &target)?;
    let checked = check_merged(&target).and_then(|()| {
        ensure!(std::fs::read_to_string(target.join("arch"))? == "amd64");
        Ok(())
    });
    // A mounted snapshot survives the removal of its image; the rest is collected.
    let removed = rt.block_on(store.remove(&image.id));
    let kept = snapshots(&root);
    rootfs::unmount(&target)?;
    checked?;
    removed?;
    ensure!(kept?.len() == 3, "the mounted snapshots are kept");
    ensure!(blobs(&root)?.is_empty());
    // The next collection takes them.
    rt.block_on(store.pull(&reference, None))?;
    rt.block_on(store.remove(&reference))?;
    ensure!(snapshots(&root)?.is_empty() && blobs(&root)?.is_empty());
    Ok(())
}

/// How many times the registry served blob `digest` (its log has one "response completed" line per
/// request).
fn blob_gets(registry: &mut Registry, digest: &str) -> usize {
    let log = registry.daemon().log();
    log.lines()
        .filter(|l| {
            l.contains("response completed")
                && l.contains("method=GET")
                && l.contains(&format!("/blobs/{digest}"))
        })
        .count()
}

#[test]
fn concurrent_pulls_of_one_image_download_once() -> Result<()> {
    let mut registry = Registry::start()?;
    let dir = tempfile::tempdir()?;
    let mut layout = Layout::new(&dir.path().join("layout"))?;
    let big: String = "0123456789abcdef".repeat(64 * 1024);
    let l = layer(&[Item::File("big", &big)])?;
    let layer_digest = digest(&gzip(&l)?);
    let desc = layout.image(&[l], true, "amd64")?;
    layout.tag(desc, "v1")?;
    let reference = push_all(&registry, &layout.dir, "v1", "keel/big")?;
    let store = ImageStore::open(&dir.path().join("root"), &[registry.host()])?;
    let rt = runtime()?;
    let ids = rt.block_on(async {
        let pulls = (0..4).map(|_| store.pull(&reference, None));
        futures::future::join_all(pulls).await
    });
    let ids: Vec<String> = ids.into_iter().map(|r| r.map(|i| i.id)).collect::<Result<_, _>>()?;
    ensure!(ids.windows(2).all(|w| w[0] == w[1]));
    ensure!(blob_gets(&mut registry, &layer_digest) == 1, "{}", registry.daemon().log());
    Ok(())
}

#[test]
fn plain_http_only_for_insecure_registries() -> Result<()> {
    let registry = Registry::start()?;
    let busybox = busybox_image()?;
    let reference = registry.push_oci_layout(&busybox.layout, &busybox.tag, "keel/secure", "v1")?;
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let store = ImageStore::open(&root, &[])?;
    let err = runtime()?.block_on(store.pull(&reference, None)).unwrap_err();
    ensure!(matches!(err, ImageError::Registry(_)), "{err:?}");
    ensure!(store.list().is_empty() && blobs(&root)?.is_empty() && snapshots(&root)?.is_empty());
    Ok(())
}

/// The storage directory of `registry` (beside the config its command line names).
fn registry_storage(registry: &Registry) -> Result<PathBuf> {
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", registry.pid()))?;
    let config = cmdline
        .split(|b| *b == 0)
        .map(|a| PathBuf::from(String::from_utf8_lossy(a).into_owned()))
        .find(|a| a.extension().is_some_and(|e| e == "yml"))
        .context("the registry's config path")?;
    Ok(config.with_file_name("storage"))
}

#[test]
fn a_corrupted_blob_is_refused_leaving_nothing_behind() -> Result<()> {
    let registry = Registry::start()?;
    let dir = tempfile::tempdir()?;
    let mut layout = Layout::new(&dir.path().join("layout"))?;
    let l = layer(&[Item::File("f", "the real content")])?;
    let compressed = gzip(&l)?;
    let layer_digest = digest(&compressed);
    let desc = layout.image(&[l], true, "amd64")?;
    layout.tag(desc, "v1")?;
    let reference = push_all(&registry, &layout.dir, "v1", "keel/corrupt")?;
    let hex = &layer_digest["sha256:".len()..];
    let data = registry_storage(&registry)?
        .join(format!("docker/registry/v2/blobs/sha256/{}/{hex}/data", &hex[..2]));
    let mut corrupted = compressed.clone();
    let last = corrupted.len() - 10;
    corrupted[last] ^= 0xff;
    std::fs::write(&data, &corrupted).with_context(|| format!("corrupting {}", data.display()))?;
    let root = dir.path().join("root");
    let store = ImageStore::open(&root, &[registry.host()])?;
    let err = runtime()?.block_on(store.pull(&reference, None)).unwrap_err();
    ensure!(matches!(err, ImageError::Digest { .. }) || err.to_string().contains("igest"), "{err:?}");
    ensure!(store.list().is_empty() && snapshots(&root)?.is_empty());
    ensure!(blobs(&root)?.is_empty(), "{:?}", blobs(&root)?);
    Ok(())
}

/// keel-shim serving the CRI from `dir`, pulling over plain HTTP from `insecure`.
fn start_shim(dir: &Path, insecure: &str) -> Result<keel_testbed::Daemon> {
    let socket = dir.join("cri.sock");
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_keel-shim"));
    cmd.arg("--socket").arg(&socket).arg("--root").arg(dir.join("root"));
    cmd.arg("--cni-conf-dir").arg(dir.join("net.d")).arg("--cni-bin-dir").arg("/usr/lib/cni");
    cmd.args(["--insecure-registry", insecure]);
    keel_testbed::Daemon::start(
        "keel-shim",
        cmd,
        keel_testbed::Readiness::UnixSocket(socket),
        std::time::Duration::from_secs(20),
    )
}

fn spec(image: &str) -> Option<api::ImageSpec> {
    Some(api::ImageSpec { image: image.to_owned(), ..Default::default() })
}

#[test]
fn the_image_service_over_cri() -> Result<()> {
    let registry = Registry::start()?;
    let busybox = busybox_image()?;
    let reference = registry.push_oci_layout(&busybox.layout, &busybox.tag, "keel/cri", "v1")?;
    let manifest = busybox.manifest_digest()?;
    let dir = tempfile::tempdir()?;
    let _shim = start_shim(dir.path(), &registry.host())?;
    let rt = runtime()?;
    rt.block_on(async {
        let mut cri = CriClient::connect(&dir.path().join("cri.sock")).await?;
        let name = format!("{}/keel/cri", registry.host());
        // Unknown: an empty status, no error; removal succeeds.
        let status =
            cri.image.image_status(api::ImageStatusRequest { image: spec(&reference), verbose: false });
        ensure!(status.await?.into_inner().image.is_none());
        cri.image.remove_image(api::RemoveImageRequest { image: spec(&reference) }).await?;
        // A malformed reference is InvalidArgument; an unknown tag NotFound.
        let err = cri.image.pull_image(api::PullImageRequest { image: spec("Bad:"), ..Default::default() });
        let err = err.await.unwrap_err();
        ensure!(err.code() == tonic::Code::InvalidArgument, "{err:?}");
        let pull = api::PullImageRequest { image: spec(&format!("{name}:nope")), ..Default::default() };
        let err = cri.image.pull_image(pull).await.unwrap_err();
        ensure!(err.code() == tonic::Code::NotFound, "{err:?}");
        // Pulled by tag, then by digest: one image with both names.
        let pull = api::PullImageRequest { image: spec(&reference), ..Default::default() };
        let id = cri.image.pull_image(pull).await?.into_inner().image_ref;
        ensure!(id.starts_with("sha256:"), "{id}");
        let by_digest = format!("{name}@{manifest}");
        let pull = api::PullImageRequest { image: spec(&by_digest), ..Default::default() };
        ensure!(cri.image.pull_image(pull).await?.into_inner().image_ref == id);
        for name in [reference.as_str(), &id, &id[7..19], &by_digest] {
            let request = api::ImageStatusRequest { image: spec(name), verbose: true };
            let status = cri.image.image_status(request).await?.into_inner();
            let image = status.image.context("no image")?;
            ensure!(image.id == id && image.repo_tags == [reference.clone()], "{image:?}");
            ensure!(image.repo_digests == [by_digest.clone()] && image.size > 0, "{image:?}");
            ensure!(status.info.get("info").is_some_and(|i| i.contains("imageSpec")), "{:?}", status.info);
        }
        let listed = cri.image.list_images(api::ListImagesRequest { filter: None }).await?.into_inner();
        ensure!(listed.images.len() == 1 && listed.images[0].id == id);
        let filter = Some(api::ImageFilter { image: spec("keel/other") });
        let listed = cri.image.list_images(api::ListImagesRequest { filter }).await?.into_inner();
        ensure!(listed.images.is_empty());
        let fs = cri.image.image_fs_info(api::ImageFsInfoRequest {}).await?.into_inner();
        let usage = fs.image_filesystems.first().context("no image filesystem")?;
        ensure!(usage.used_bytes.as_ref().is_some_and(|b| b.value > 0), "{usage:?}");
        ensure!(usage.inodes_used.as_ref().is_some_and(|i| i.value > 1), "{usage:?}");
        // Removed by its digest name: gone under every name.
        cri.image.remove_image(api::RemoveImageRequest { image: spec(&by_digest) }).await?;
        let status = cri.image.image_status(api::ImageStatusRequest { image: spec(&id), verbose: false });
        ensure!(status.await?.into_inner().image.is_none());
        ensure!(blobs(&dir.path().join("root"))?.is_empty());
        Ok(())
    })
}

fn import(path: &Path, root: &Path, base_name: Option<&str>) -> Result<String> {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_keel-shim"));
    cmd.arg("import").arg(path).arg("--root").arg(root);
    if let Some(base) = base_name {
        cmd.args(["--base-name", base]);
    }
    let out = cmd.output()?;
    ensure!(out.status.success(), "import {}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn imports_layouts_and_archives() -> Result<()> {
    let busybox = busybox_image()?;
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    // A layout whose names are bare tags takes a base name.
    let out = import(&busybox.layout, &root, Some("keel.test/busybox"))?;
    ensure!(out.contains("keel.test/busybox:latest"), "{out}");
    // An oci-archive, and a docker-archive named by its RepoTags.
    let oci_archive = dir.path().join("busybox.oci.tar");
    busybox.image_archive(&oci_archive)?;
    import(&oci_archive, &root, Some("keel.test/archived"))?;
    let docker_archive = dir.path().join("busybox.docker.tar");
    let dest = format!("docker-archive:{}:keel.test/docker:v1", docker_archive.display());
    skopeo(&["copy", &busybox.oci_reference(), &dest])?;
    import(&docker_archive, &root, None)?;
    // A layout naming its image by a full reference, with whiteouts, no base name needed.
    let mut layout = Layout::new(&dir.path().join("layout"))?;
    let desc = layout.image(&whiteout_layers()?, true, "amd64")?;
    layout.tag(desc, "example.com/keel/whiteouts:v2")?;
    import(&layout.dir, &root, None)?;
    // A directory that is neither is refused.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_keel-shim"));
    let refused = cmd.arg("import").arg(dir.path().join("root/images")).arg("--root").arg(&root).output()?;
    ensure!(!refused.status.success());

    let store = ImageStore::open(&root, &[])?;
    let a = store.get("keel.test/busybox")?;
    let b = store.get("keel.test/archived:latest")?;
    let c = store.get("keel.test/docker:v1")?;
    // One image (one config) under three names; the docker archive's uncompressed layer is the
    // same snapshot as the layout's compressed one.
    ensure!(a.id == b.id && a.id == c.id && a.repo_tags.len() == 3, "{a:?}");
    ensure!(c.layers == a.layers && a.layers.len() == 1);
    ensure!(a.layers.iter().all(|l| l.join("bin/busybox").is_file()));
    ensure!(c.repo_digests.iter().any(|d| d.starts_with("keel.test/docker@sha256:")), "{c:?}");
    let w = store.get("example.com/keel/whiteouts:v2")?;
    let target = dir.path().join("rootfs");
    rootfs::mount(&w.layers, &dir.path().join("upper"), &dir.path().join("work"), &target)?;
    let checked = check_merged(&target);
    rootfs::unmount(&target)?;
    checked?;
    let rt = runtime()?;
    for image in store.list() {
        rt.block_on(store.remove(&image.id))?;
    }
    ensure!(blobs(&root)?.is_empty() && snapshots(&root)?.is_empty());
    Ok(())
}

#[test]
fn credentials_log_in_to_a_registry_with_basic_auth() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // A bcrypt hash (cost 4, so the registry checks it quickly), by the C library's crypt(3) through
    // Python (no htpasswd tool here).
    let hash = std::process::Command::new("python3")
        .args([
            "-c",
            "import crypt; print(crypt.crypt('s3cret', crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16)))",
        ])
        .output()?;
    let hash = String::from_utf8(hash.stdout)?.trim().replacen("$2b$", "$2y$", 1);
    ensure!(hash.starts_with("$2y$"), "no bcrypt: {hash}");
    let htpasswd = dir.path().join("htpasswd");
    std::fs::write(&htpasswd, format!("keel:{hash}\n"))?;
    let registry = Registry::start_with_htpasswd(&htpasswd)?;
    let busybox = busybox_image()?;
    let reference = format!("{}/keel/private:v1", registry.host());
    let dest = format!("docker://{reference}");
    skopeo(&[
        "copy",
        "--dest-tls-verify=false",
        "--dest-creds",
        "keel:s3cret",
        &busybox.oci_reference(),
        &dest,
    ])?;
    let root = dir.path().join("root");
    let store = ImageStore::open(&root, &[registry.host()])?;
    let rt = runtime()?;
    // Anonymous and wrong credentials are refused, leaving nothing.
    let err = rt.block_on(store.pull(&reference, None)).unwrap_err();
    ensure!(matches!(err, ImageError::Registry(_)), "{err:?}");
    let wrong = api::AuthConfig { username: "keel".into(), password: "wrong".into(), ..Default::default() };
    let err = rt.block_on(store.pull(&reference, Some(&wrong))).unwrap_err();
    ensure!(matches!(err, ImageError::Registry(_)), "{err:?}");
    ensure!(blobs(&root)?.is_empty() && store.list().is_empty());
    // Username and password, then base64 `auth`.
    let login = api::AuthConfig { username: "keel".into(), password: "s3cret".into(), ..Default::default() };
    let image = rt.block_on(store.pull(&reference, Some(&login)))?;
    rt.block_on(store.remove(&image.id))?;
    let auth = base64::engine::general_purpose::STANDARD.encode("keel:s3cret");
    let login = api::AuthConfig { auth, ..Default::default() };
    ensure!(rt.block_on(store.pull(&reference, Some(&login)))?.id == image.id);
    Ok(())
}

#[test]
fn an_overlay_of_more_layers_than_mount_options_hold() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let long = dir.path().join("a-long-directory-name-for-snapshots-".repeat(3));
    let mut layers = Vec::new();
    for i in 0..64 {
        let fs = long.join(format!("{i:064}/fs"));
        std::fs::create_dir_all(&fs)?;
        std::fs::write(fs.join(format!("f{i}")), format!("{i}"))?;
        std::fs::write(fs.join("top"), format!("{i}"))?;
        layers.push(fs);
    }
    let total: usize = layers.iter().map(|l| l.as_os_str().len() + 1).sum();
    ensure!(total > 4096, "{total} bytes of lowerdirs fit a page");
    let target = dir.path().join("rootfs");
    rootfs::mount(&layers, &dir.path().join("upper"), &dir.path().join("work"), &target)?;
    let checked = (|| {
        ensure!(std::fs::read_to_string(target.join("f0"))? == "0");
        ensure!(std::fs::read_to_string(target.join("f63"))? == "63");
        ensure!(std::fs::read_to_string(target.join("top"))? == "63", "the last layer is on top");
        Ok(())
    })();
    rootfs::unmount(&target)?;
    checked
}

/// `--registry-mirror`: each mirror of the image's registry in turn (a dead one skipped), then the
/// registry itself; the image keeps the name it was pulled by.
#[test]
fn registry_mirrors_are_tried_in_order_then_the_registry() -> Result<()> {
    let origin = Registry::start()?;
    let mirror = Registry::start()?;
    let busybox = busybox_image()?;
    mirror.push_oci_layout(&busybox.layout, &busybox.tag, "keel/mirrored", "v1")?;
    origin.push_oci_layout(&busybox.layout, &busybox.tag, "keel/origin", "v1")?;
    let dead = format!("127.0.0.1:{}", keel_testbed::loopback::free_port()?);
    let mirrors: Vec<RegistryMirror> = [dead, mirror.host()]
        .into_iter()
        .map(|host| RegistryMirror { registry: origin.host(), host, plain_http: true })
        .collect();
    let dir = tempfile::tempdir()?;
    let root = dir.path().join("root");
    let store = ImageStore::open_with_mirrors(&root, &[origin.host()], &mirrors)?;
    let rt = runtime()?;
    // Only the mirror has it: found there, past the dead mirror, under the origin's name.
    let name = format!("{}/keel/mirrored:v1", origin.host());
    let image = rt.block_on(store.pull(&name, None))?;
    ensure!(image.repo_tags == [name.clone()], "{image:?}");
    ensure!(store.get(&name).is_ok(), "not found by the name it was pulled by");
    // No mirror has it: the origin itself (the same content, so the same image gains the name).
    let origin_name = format!("{}/keel/origin:v1", origin.host());
    let image = rt.block_on(store.pull(&origin_name, None))?;
    ensure!(image.repo_tags == [name, origin_name], "{image:?}");
    // Nowhere: NotFound, and nothing more in the store.
    let err = rt.block_on(store.pull(&format!("{}/keel/missing:v1", origin.host()), None)).unwrap_err();
    ensure!(matches!(err, ImageError::NotFound(_)), "{err:?}");
    ensure!(store.list().len() == 1, "{:?}", store.list());
    Ok(())
}
