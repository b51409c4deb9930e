//! Small OCI images built offline from busybox-static with umoci, cached across test processes.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::UNIX_EPOCH;

use anyhow::{Context, Result};

use crate::registry::skopeo;

/// Where busybox-static installs its binary.
pub const BUSYBOX: &str = "/bin/busybox";
/// Applets linked into the image's `/bin`.
pub const APPLETS: &[&str] = &[
    "sh", "ls", "cat", "echo", "sleep", "nc", "httpd", "wget", "ip", "hostname", "env", "true", "false",
    "ps", "mount", "date", "id", "uname", "mkdir", "rm", "touch", "test", "chmod", "tar",
];
/// Bump when the image recipe changes, so caches built by an older recipe are not reused.
const RECIPE: &str = "v3";

/// An image in an OCI image layout directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciImage {
    pub layout: PathBuf,
    pub tag: String,
}

impl OciImage {
    /// The digest (`sha256:…`) of the manifest tagged `tag` in the layout's `index.json`.
    pub fn manifest_digest(&self) -> Result<String> {
        let index_path = self.layout.join("index.json");
        let text = std::fs::read_to_string(&index_path)
            .with_context(|| format!("reading {}", index_path.display()))?;
        let index: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", index_path.display()))?;
        let manifests = index["manifests"].as_array().map(Vec::as_slice).unwrap_or_default();
        manifests
            .iter()
            .find(|m| {
                m["annotations"]["org.opencontainers.image.ref.name"].as_str() == Some(self.tag.as_str())
            })
            .and_then(|m| m["digest"].as_str())
            .map(str::to_owned)
            .with_context(|| format!("no manifest tagged {:?} in {}", self.tag, index_path.display()))
    }

    /// The skopeo/containers transport reference, `oci:DIR:TAG`.
    pub fn oci_reference(&self) -> String {
        format!("oci:{}:{}", self.layout.display(), self.tag)
    }

    /// Writes the image as an `oci-archive` tarball at `out` (tagged with the same tag), e.g. for
    /// `ctr images import`.
    pub fn image_archive(&self, out: &Path) -> Result<()> {
        let dest = format!("oci-archive:{}:{}", out.display(), self.tag);
        skopeo(&["copy", &self.oci_reference(), &dest]).with_context(|| {
            format!("writing {} as an oci-archive to {}", self.oci_reference(), out.display())
        })?;
        Ok(())
    }
}

/// The directory that caches built images across processes: `$KEEL_TESTBED_CACHE`, or else
/// `<temp dir>/keel-testbed-cache`.
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("KEEL_TESTBED_CACHE") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => std::env::temp_dir().join("keel-testbed-cache"),
    }
}

/// A busybox image (tag `latest`, cmd `["sh"]`) built once per process and cached across processes.
///
/// The layout is built in a temporary directory inside the cache and renamed into place, so a parallel
/// process sees either no image or a whole one; when two processes race, the first rename wins and both
/// use its layout.
pub fn busybox_image() -> Result<&'static OciImage> {
    static IMAGE: Mutex<Option<&'static OciImage>> = Mutex::new(None);
    let mut slot = IMAGE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(image) = *slot {
        return Ok(image);
    }
    let image = busybox_image_in(&cache_dir()).context("building the busybox OCI image")?;
    let image: &'static OciImage = Box::leak(Box::new(image));
    *slot = Some(image);
    Ok(image)
}

/// The busybox image cached under `cache`, built there first if missing; safe to call from parallel
/// threads and processes (each builds in its own temp dir and the first rename into place wins).
pub fn busybox_image_in(cache: &Path) -> Result<OciImage> {
    let meta = std::fs::metadata(BUSYBOX).with_context(|| format!("{BUSYBOX} (install busybox-static)"))?;
    let mtime = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).unwrap_or_default();
    let key = format!("busybox-{RECIPE}-{}-{}", meta.len(), mtime.as_secs());
    let image = OciImage { layout: cache.join(&key), tag: "latest".into() };
    if image.manifest_digest().is_ok() {
        return Ok(image);
    }
    std::fs::create_dir_all(cache).with_context(|| format!("creating cache dir {}", cache.display()))?;
    let work = tempfile::Builder::new()
        .prefix(&format!(".{key}-build-"))
        .tempdir_in(cache)
        .with_context(|| format!("creating a build dir in {}", cache.display()))?;
    let layout = work.path().join("layout");
    build_busybox_layout(&layout, &image.tag, &work.path().join("bundle"))?;
    publish(&layout, image)
}

/// Renames a finished build's `layout` into `image`'s place in the cache and checks it.
fn publish(layout: &Path, image: OciImage) -> Result<OciImage> {
    if let Err(error) = std::fs::rename(layout, &image.layout) {
        // Another process may have renamed its build into place first; its image is as good as ours.
        if image.manifest_digest().is_err() {
            return Err(error)
                .with_context(|| format!("renaming {} to {}", layout.display(), image.layout.display()));
        }
    }
    image.manifest_digest().with_context(|| format!("checking the image at {}", image.layout.display()))?;
    Ok(image)
}

/// What the pause image runs: a shell that sleeps forever and exits at once on SIGTERM (a shell as PID 1
/// gets only the signals it traps; `wait` returns as soon as the trapped signal arrives).
pub const PAUSE_ENTRYPOINT: &[&str] = &["/bin/sh", "-c", "trap 'exit 0' TERM INT; sleep 2147483647 & wait"];

/// A pause image (the CRI's `sandbox_image`): the busybox image with [`PAUSE_ENTRYPOINT`], tag
/// `latest`, built once per process and cached across processes like [`busybox_image`].
pub fn pause_image() -> Result<&'static OciImage> {
    static IMAGE: Mutex<Option<&'static OciImage>> = Mutex::new(None);
    let mut slot = IMAGE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(image) = *slot {
        return Ok(image);
    }
    let busybox = busybox_image()?;
    let image = pause_image_in(&cache_dir(), busybox).context("building the pause OCI image")?;
    let image: &'static OciImage = Box::leak(Box::new(image));
    *slot = Some(image);
    Ok(image)
}

/// The pause image cached under `cache`, derived from `busybox` (a copy of its layout, reconfigured).
pub fn pause_image_in(cache: &Path, busybox: &OciImage) -> Result<OciImage> {
    let name = busybox.layout.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let key = format!("pause-{RECIPE}-from-{name}");
    let image = OciImage { layout: cache.join(&key), tag: busybox.tag.clone() };
    if image.manifest_digest().is_ok() {
        return Ok(image);
    }
    let work = tempfile::Builder::new()
        .prefix(&format!(".{key}-build-"))
        .tempdir_in(cache)
        .with_context(|| format!("creating a build dir in {}", cache.display()))?;
    let layout = work.path().join("layout");
    crate::process::run_tool("cp", &["-a", &busybox.layout.to_string_lossy(), &layout.to_string_lossy()])?;
    let reference = format!("{}:{}", layout.display(), busybox.tag);
    let mut args = vec!["config", "--image", &reference, "--clear=config.cmd"];
    for part in PAUSE_ENTRYPOINT {
        args.extend(["--config.entrypoint", part]);
    }
    umoci(&args)?;
    umoci(&["gc", "--layout", &layout.to_string_lossy()])?;
    publish(&layout, image)
}

/// Builds an OCI layout at `layout` (which must not exist) holding a busybox image tagged `tag`, unpacking
/// into `bundle` (scratch, must not exist) on the way. Runs umoci as root (no `--rootless`).
pub fn build_busybox_layout(layout: &Path, tag: &str, bundle: &Path) -> Result<()> {
    let image = format!("{}:{tag}", layout.display());
    let bundle_arg = bundle.to_string_lossy();
    umoci(&["init", "--layout", &layout.to_string_lossy()])?;
    umoci(&["new", "--image", &image])?;
    umoci(&["unpack", "--image", &image, &bundle_arg])?;
    let rootfs = bundle.join("rootfs");
    for dir in ["bin", "dev", "etc", "proc", "sys", "root", "tmp", "usr/bin"] {
        let path = rootfs.join(dir);
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
    }
    let tmp = rootfs.join("tmp");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777))
        .with_context(|| format!("chmod 1777 {}", tmp.display()))?;
    let bin = rootfs.join("bin");
    std::fs::copy(BUSYBOX, bin.join("busybox"))
        .with_context(|| format!("copying {BUSYBOX} into {}", bin.display()))?;
    for applet in APPLETS {
        symlink("busybox", bin.join(applet))
            .with_context(|| format!("linking /bin/{applet} in the rootfs"))?;
    }
    std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")
        .context("writing /etc/passwd in the rootfs")?;
    std::fs::write(rootfs.join("etc/group"), "root:x:0:\n").context("writing /etc/group in the rootfs")?;
    umoci(&["repack", "--image", &image, &bundle_arg])?;
    shell_config(&image)?;
    umoci(&["gc", "--layout", &layout.to_string_lossy()])?;
    Ok(())
}

/// Gives the image `LAYOUT:TAG` a busybox image's config: cmd `sh`, the usual PATH, working dir `/`.
pub(crate) fn shell_config(image: &str) -> Result<()> {
    umoci(&[
        "config",
        "--image",
        image,
        "--config.cmd",
        "sh",
        "--config.env",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--config.workingdir",
        "/",
    ])
}

fn umoci(args: &[&str]) -> Result<()> {
    crate::process::run_tool("umoci", args).map(drop)
}
