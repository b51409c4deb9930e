//! The images critest pulls (registry.k8s.io/e2e-test-images/… and gcr.io/k8s-staging-cri-tools/…),
//! built here from Debian packages and a few lines of C, so the suite runs without a registry on the
//! internet: [`build`] makes one OCI layout holding every recipe, [`push`] copies each image into a
//! local registry under its original repository and tag, and a runtime configured with that registry as
//! the mirror of [`MIRRORED`] pulls them by their original names.
//!
//! What each image must hold is what critest v1.34 runs in it (its `pkg/validate`): the default image
//! is a busybox with every applet as its own executable (a masked `/bin/ls` must fail as
//! `/bin/sh: ls: Permission denied`), `nginx` and `hostnet-nginx` a real nginx whose master writes
//! `/var/run/nginx.pid` and answers 200 on `/`, `nonewprivs` a setuid-root program printing its
//! effective uid, the user images a `USER` of each form, and the pull tests distinct and identical
//! images under several names.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use anyhow::{Context, Result, bail};

use crate::images::cache_dir;
use crate::process::run_tool;

/// Overrides [`DEFAULT_DEBS`].
pub const DEBS_ENV: &str = "KEEL_DEBS_DIR";
/// Where `cargo xtask deps` downloads [`DEB_PACKAGES`] (downloaded, never installed on the machine).
pub const DEFAULT_DEBS: &str = "/var/cache/keel/debs";

/// The Debian packages whose files go into the images, each with why.
pub const DEB_PACKAGES: &[(&str, &str)] = &[
    (
        "busybox",
        "the e2e busybox: dynamically linked and built without the standalone shell, so each applet is a \
         program of its own as in busybox:1.29 (busybox-static runs applets inside the shell, and a masked \
         /bin/ls would still run)",
    ),
    ("nginx", "the web server of nginx:1.14-2 and hostnet-nginx (Debian's nginx 1.22)"),
    ("nginx-common", "nginx's mime.types"),
];

/// Registries whose images [`push`] serves: a runtime lists the local registry as their mirror.
pub const MIRRORED: &[&str] = &["registry.k8s.io", "gcr.io"];

/// How an image is made from the e2e busybox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recipe {
    /// The e2e busybox itself: cmd `sh`.
    Busybox,
    /// busybox with `USER` set to this.
    User(&'static str),
    /// busybox with user `default-user` (1000) in group `group-defined-in-image` (50000), `USER 1000`
    /// (critest's image-predefined-group).
    PredefinedGroup,
    /// busybox with a file `/NAME` holding its name (critest's image-test, `ADD ${TEST} ${TEST}`): images
    /// with different names differ, names of one recipe are one image.
    File(&'static str),
    /// nginx listening on this port, `nginx -g 'daemon off;'` as PID 1.
    Nginx(u16),
    /// A web server on port 80 whose log names it `httpd` (busybox httpd, started by a shell that says
    /// so: Apache's start-up warning is what the original's log holds).
    Httpd,
    /// `/usr/local/bin/nnp`, setuid root, printing `Effective uid: N`.
    NoNewPrivs,
}

impl Recipe {
    /// The image's tag in [`build`]'s layout.
    fn tag(self) -> String {
        match self {
            Recipe::Busybox => "busybox".into(),
            Recipe::User(user) => format!("user-{}", user.replace(':', "-")),
            Recipe::PredefinedGroup => "predefined-group".into(),
            Recipe::File(name) => format!("file-{name}"),
            Recipe::Nginx(port) => format!("nginx-{port}"),
            Recipe::Httpd => "httpd".into(),
            Recipe::NoNewPrivs => "nonewprivs".into(),
        }
    }
}

/// An image under its original name.
#[derive(Debug, Clone, Copy)]
pub struct TestImage {
    /// `REGISTRY/REPOSITORY:TAG`, as the suite asks for it.
    pub reference: &'static str,
    pub recipe: Recipe,
}

const fn image(reference: &'static str, recipe: Recipe) -> TestImage {
    TestImage { reference, recipe }
}

/// The default image of critest's framework (`DefaultLinuxContainerImage`).
pub const BUSYBOX: &str = "registry.k8s.io/e2e-test-images/busybox:1.29-2";

/// Every image critest v1.34 pulls on Linux, but `test-image-digest@sha256:…`: a digest fixed by the
/// upstream build cannot be reproduced here, so the case that pulls it cannot pass.
pub const CRITEST: &[TestImage] = &[
    image(BUSYBOX, Recipe::Busybox),
    image("registry.k8s.io/e2e-test-images/nginx:1.14-2", Recipe::Nginx(80)),
    image("registry.k8s.io/e2e-test-images/httpd:2.4.39-4", Recipe::Httpd),
    image("registry.k8s.io/e2e-test-images/nonewprivs:1.3", Recipe::NoNewPrivs),
    image("gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64:latest", Recipe::Nginx(12003)),
    image("gcr.io/k8s-staging-cri-tools/test-image-user-uid:latest", Recipe::User("1002")),
    image("gcr.io/k8s-staging-cri-tools/test-image-user-username:latest", Recipe::User("www-data")),
    image("gcr.io/k8s-staging-cri-tools/test-image-user-uid-group:latest", Recipe::User("1003:1004")),
    image(
        "gcr.io/k8s-staging-cri-tools/test-image-user-username-group:latest",
        Recipe::User("www-data:1004"),
    ),
    image("gcr.io/k8s-staging-cri-tools/test-image-predefined-group:latest", Recipe::PredefinedGroup),
    image("gcr.io/k8s-staging-cri-tools/test-image-latest:latest", Recipe::File("test-image-latest")),
    image("gcr.io/k8s-staging-cri-tools/test-image-tag:test", Recipe::File("test-image-tag")),
    image("gcr.io/k8s-staging-cri-tools/test-image-tag:all", Recipe::File("test-image-tag")),
    image("gcr.io/k8s-staging-cri-tools/test-image-1:latest", Recipe::File("test-image-1")),
    image("gcr.io/k8s-staging-cri-tools/test-image-2:latest", Recipe::File("test-image-2")),
    image("gcr.io/k8s-staging-cri-tools/test-image-3:latest", Recipe::File("test-image-3")),
    image("gcr.io/k8s-staging-cri-tools/test-image-tags:1", Recipe::File("test-image-tags")),
    image("gcr.io/k8s-staging-cri-tools/test-image-tags:2", Recipe::File("test-image-tags")),
    image("gcr.io/k8s-staging-cri-tools/test-image-tags:3", Recipe::File("test-image-tags")),
];

/// Bump when a recipe changes, so layouts built by an older one are not reused.
const RECIPES: &str = "v2";

/// The program of the nonewprivs image (the original's `nnp`), built static.
const NNP_C: &str = r#"#include <stdio.h>
#include <unistd.h>
int main(void) { printf("Effective uid: %d\n", (int)geteuid()); return 0; }
"#;

/// Programs of the machine's that the e2e busybox holds: (path, Debian package).
const HOST_PROGRAMS: &[(&str, &str)] = &[("/usr/bin/pgrep", "procps"), ("/usr/bin/ipcs", "util-linux")];

const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
                      daemon:x:1:1:daemon:/usr/sbin:/bin/false\n\
                      www-data:x:33:33:www-data:/var/www:/bin/false\n\
                      nobody:x:65534:65534:nobody:/home:/bin/false\n";
const GROUP: &str = "root:x:0:\ndaemon:x:1:\nwww-data:x:33:\nnogroup:x:65534:\n";

/// The directory holding [`DEB_PACKAGES`]: `$KEEL_DEBS_DIR`, or else [`DEFAULT_DEBS`].
pub fn debs_dir() -> PathBuf {
    match std::env::var_os(DEBS_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(DEFAULT_DEBS),
    }
}

/// The downloaded `.deb` of `package` in [`debs_dir`] (`PACKAGE_VERSION_ARCH.deb`), failing with the
/// command that downloads it.
pub fn deb(package: &str) -> Result<PathBuf> {
    let dir = debs_dir();
    let prefix = format!("{package}_");
    let found = std::fs::read_dir(&dir).ok().into_iter().flatten().flatten().find_map(|entry| {
        let name = entry.file_name().to_string_lossy().into_owned();
        (name.starts_with(&prefix) && name.ends_with(".deb")).then(|| entry.path())
    });
    found.with_context(|| format!("no {package}_*.deb in {}: `cargo xtask deps` downloads it", dir.display()))
}

/// The layout holding every recipe of [`CRITEST`], each tagged by its recipe, built once per process and
/// cached across processes (like [`crate::images::busybox_image`]).
pub fn build() -> Result<&'static Path> {
    static LAYOUT: Mutex<Option<&'static Path>> = Mutex::new(None);
    let mut slot = LAYOUT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(layout) = *slot {
        return Ok(layout);
    }
    let layout = build_in(&cache_dir()).context("building critest's images")?;
    let layout: &'static Path = Box::leak(layout.into_boxed_path());
    *slot = Some(layout);
    Ok(layout)
}

/// Copies every image of `images` from [`build`]'s layout into the registry at `host` (`ADDR:PORT`,
/// plain HTTP) under its original repository and tag (`registry.k8s.io/x/y:t` → `host/x/y:t`).
pub fn push(host: &str, images: &[TestImage]) -> Result<()> {
    let layout = build()?;
    for image in images {
        let (repository, tag) = split(image.reference)?;
        crate::registry::push_oci_layout_to(host, layout, &image.recipe.tag(), repository, tag)?;
    }
    Ok(())
}

/// `registry/repository:tag` → (`repository`, `tag`), the registry being one of [`MIRRORED`].
fn split(reference: &str) -> Result<(&str, &str)> {
    let (registry, rest) = reference.split_once('/').context("a reference without a registry")?;
    if !MIRRORED.contains(&registry) {
        bail!("{reference}: {registry} is not one of the mirrored registries {MIRRORED:?}");
    }
    rest.rsplit_once(':').with_context(|| format!("{reference} has no tag"))
}

fn build_in(cache: &Path) -> Result<PathBuf> {
    let debs: Vec<PathBuf> = DEB_PACKAGES.iter().map(|(name, _)| deb(name)).collect::<Result<_>>()?;
    let versions: Vec<String> =
        debs.iter().filter_map(|d| d.file_stem()).map(|s| s.to_string_lossy().into_owned()).collect();
    let key = format!("critest-images-{RECIPES}-{:016x}", fnv1a(versions.join(" ").as_bytes()));
    let layout = cache.join(&key);
    let done = layout.join(".complete");
    if done.exists() {
        return Ok(layout);
    }
    std::fs::create_dir_all(cache).with_context(|| format!("creating cache dir {}", cache.display()))?;
    let work = tempfile::Builder::new()
        .prefix(&format!(".{key}-build-"))
        .tempdir_in(cache)
        .with_context(|| format!("creating a build dir in {}", cache.display()))?;
    let built = work.path().join("layout");
    Builder::new(work.path(), &built)?.all(&debs)?;
    std::fs::write(built.join(".complete"), "").context("marking the layout complete")?;
    if let Err(error) = std::fs::rename(&built, &layout) {
        // Another process renamed its build into place first; its layout is as good as ours.
        if !done.exists() {
            return Err(error).with_context(|| format!("renaming {} into place", built.display()));
        }
    }
    Ok(layout)
}

/// 64-bit FNV-1a: a cache key, not a security boundary.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| (hash ^ u64::from(*byte)).wrapping_mul(0x100_0000_01b3))
}

struct Builder<'a> {
    work: &'a Path,
    layout: String,
}

impl<'a> Builder<'a> {
    fn new(work: &'a Path, layout: &Path) -> Result<Builder<'a>> {
        let layout = layout.to_string_lossy().into_owned();
        umoci(&["init", "--layout", &layout])?;
        Ok(Builder { work, layout })
    }

    fn image(&self, tag: &str) -> String {
        format!("{}:{tag}", self.layout)
    }

    fn all(&self, debs: &[PathBuf]) -> Result<()> {
        let extracted = self.work.join("debs");
        for deb in debs {
            run_tool("dpkg-deb", &["-x", &deb.to_string_lossy(), &extracted.to_string_lossy()])?;
        }
        self.busybox(&extracted)?;
        let mut made = vec![Recipe::Busybox];
        for recipe in CRITEST.iter().map(|image| image.recipe) {
            if made.contains(&recipe) {
                continue;
            }
            self.derive(recipe, &extracted)?;
            made.push(recipe);
        }
        umoci(&["gc", "--layout", &self.layout])
    }

    /// The e2e busybox: Debian's dynamically linked busybox, a link per applet at the path busybox
    /// gives it, the C library it loads, and a passwd and group as the busybox image has.
    fn busybox(&self, extracted: &Path) -> Result<()> {
        let root = self.work.join("busybox-root");
        for dir in
            ["bin", "sbin", "usr/bin", "usr/sbin", "dev", "etc", "proc", "sys", "root", "run", "var", "home"]
        {
            mkdir(&root.join(dir))?;
        }
        chmod(&mkdir(&root.join("tmp"))?, 0o1777)?;
        symlink("../run", root.join("var/run")).context("linking /var/run")?;
        let busybox = extracted.join("bin/busybox");
        copy(&busybox, &root.join("bin/busybox"))?;
        let applets = run_tool(&busybox.to_string_lossy(), &["--list-full"])?;
        for applet in applets.lines().map(str::trim).filter(|a| !a.is_empty() && *a != "bin/busybox") {
            let link = root.join(applet);
            if let Some(parent) = link.parent() {
                mkdir(parent)?;
            }
            // Hard links, as the busybox image has them: a runtime masking /bin/ls (MaskedPaths) must
            // mask that applet alone, not the /bin/busybox a symlink would lead it to.
            std::fs::hard_link(root.join("bin/busybox"), &link)
                .with_context(|| format!("linking /{applet}"))?;
        }
        copy_libraries(&busybox, &root)?;
        // Applets critest runs that Debian's busybox is built without (busybox:1.29 has them): the
        // machine's own, from procps and util-linux, with their libraries.
        for (path, program) in HOST_PROGRAMS {
            let dest = root.join(path.trim_start_matches('/'));
            if dest.exists() {
                continue;
            }
            let found = Path::new(path);
            copy(found, &dest).with_context(|| format!("{program} provides {path}"))?;
            copy_libraries(found, &root)?;
        }
        std::fs::write(root.join("etc/passwd"), PASSWD).context("writing /etc/passwd")?;
        std::fs::write(root.join("etc/group"), GROUP).context("writing /etc/group")?;
        let image = self.image(&Recipe::Busybox.tag());
        umoci(&["new", "--image", &image])?;
        self.layer(&Recipe::Busybox.tag(), &Recipe::Busybox.tag(), &root)?;
        crate::images::shell_config(&image)
    }

    /// The image of `recipe`, from the busybox.
    fn derive(&self, recipe: Recipe, extracted: &Path) -> Result<()> {
        let tag = recipe.tag();
        let image = self.image(&tag);
        let busybox = Recipe::Busybox.tag();
        let scratch = self.work.join(format!("{tag}-root"));
        mkdir(&scratch)?;
        match recipe {
            Recipe::Busybox => {}
            Recipe::User(user) => {
                umoci(&["config", "--image", &self.image(&busybox), "--tag", &tag, "--config.user", user])?;
            }
            Recipe::PredefinedGroup => {
                mkdir(&scratch.join("etc"))?;
                let passwd = format!("{PASSWD}default-user:x:1000:1000::/home/default-user:/bin/sh\n");
                let group =
                    format!("{GROUP}default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n");
                std::fs::write(scratch.join("etc/passwd"), passwd)?;
                std::fs::write(scratch.join("etc/group"), group)?;
                mkdir(&scratch.join("home/default-user"))?;
                self.layer(&busybox, &tag, &scratch)?;
                umoci(&["config", "--image", &image, "--config.user", "1000"])?;
            }
            Recipe::File(name) => {
                std::fs::write(scratch.join(name), format!("{name}\n"))?;
                self.layer(&busybox, &tag, &scratch)?;
            }
            Recipe::Nginx(port) => {
                nginx_tree(extracted, &scratch, port)?;
                self.layer(&busybox, &tag, &scratch)?;
                let exposed = format!("{port}/tcp");
                let extra = ["--config.exposedports", &exposed, "--config.stopsignal", "SIGQUIT"];
                set_cmd(&image, &["nginx", "-g", "daemon off;"], &extra)?;
            }
            Recipe::Httpd => {
                let htdocs = mkdir(&scratch.join("usr/local/apache2/htdocs"))?;
                std::fs::write(htdocs.join("index.html"), "<html><body><h1>It works!</h1></body></html>\n")?;
                self.layer(&busybox, &tag, &scratch)?;
                let serve = "echo 'httpd: busybox httpd serving /usr/local/apache2/htdocs on :80'; \
                             exec httpd -f -p 80 -h /usr/local/apache2/htdocs";
                set_cmd(&image, &["sh", "-c", serve], &["--config.exposedports", "80/tcp"])?;
            }
            Recipe::NoNewPrivs => {
                let bin = mkdir(&scratch.join("usr/local/bin"))?;
                let source = self.work.join("nnp.c");
                std::fs::write(&source, NNP_C)?;
                let nnp = bin.join("nnp");
                run_tool("cc", &["-static", "-O2", "-o", &nnp.to_string_lossy(), &source.to_string_lossy()])
                    .context("compiling nnp (gcc and libc6-dev)")?;
                chmod(&nnp, 0o4755)?;
                self.layer(&busybox, &tag, &scratch)?;
                umoci(&[
                    "config",
                    "--image",
                    &image,
                    "--clear=config.cmd",
                    "--config.entrypoint",
                    "/usr/local/bin/nnp",
                ])?;
            }
        }
        Ok(())
    }

    /// Image `to` is image `from` with the tree at `tree` added at `/`, as one layer. (Unpacked and
    /// repacked: umoci 0.4.7's `insert` writes layers whose last entry is cut short, without the
    /// tar's padding and end blocks.)
    fn layer(&self, from: &str, to: &str, tree: &Path) -> Result<()> {
        let bundle = self.work.join(format!("bundle-{to}"));
        let bundle_arg = bundle.to_string_lossy();
        umoci(&["unpack", "--image", &self.image(from), &bundle_arg])?;
        let source = format!("{}/.", tree.display());
        run_tool("cp", &["-a", &source, &bundle.join("rootfs").to_string_lossy()])?;
        umoci(&["repack", "--image", &self.image(to), &bundle_arg])?;
        std::fs::remove_dir_all(&bundle).with_context(|| format!("removing {}", bundle.display()))
    }
}

/// nginx with the libraries it loads, a configuration of its own (`pid /var/run/nginx.pid`, the
/// access log on stdout and errors on stderr, as the official image links them) and a welcome page.
fn nginx_tree(extracted: &Path, root: &Path, port: u16) -> Result<()> {
    let nginx = extracted.join("usr/sbin/nginx");
    copy(&nginx, &mkdir(&root.join("usr/sbin"))?.join("nginx"))?;
    copy_libraries(&nginx, root)?;
    let etc = mkdir(&root.join("etc/nginx"))?;
    copy(&extracted.join("etc/nginx/mime.types"), &etc.join("mime.types"))?;
    std::fs::write(
        etc.join("nginx.conf"),
        format!(
            "user www-data;\nworker_processes 1;\nerror_log /dev/stderr warn;\npid /var/run/nginx.pid;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n  include /etc/nginx/mime.types;\n  access_log /dev/stdout;\n\
               server {{\n    listen {port};\n    server_name localhost;\n\
                 location / {{ root /usr/share/nginx/html; index index.html; }}\n  }}\n}}\n"
        ),
    )?;
    let html = mkdir(&root.join("usr/share/nginx/html"))?;
    std::fs::write(html.join("index.html"), "<html><body><h1>Welcome to nginx!</h1></body></html>\n")?;
    // Debian's build keeps its error log and temporary files here before the configuration is read.
    mkdir(&root.join("var/log/nginx"))?;
    mkdir(&root.join("var/lib/nginx"))?;
    Ok(())
}

/// Copies into `root`, at their paths on this machine, the shared libraries `binary` loads (ldd).
fn copy_libraries(binary: &Path, root: &Path) -> Result<()> {
    let listing = run_tool("ldd", &[&binary.to_string_lossy()])?;
    for line in listing.lines() {
        // `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)` or `/lib64/ld-linux-x86-64.so.2 (0x…)`.
        let path = match line.split_once("=>") {
            Some((_, target)) => target.split_whitespace().next(),
            None => line.split_whitespace().next(),
        };
        let Some(path) = path.filter(|p| p.starts_with('/')) else { continue };
        let relative = path.trim_start_matches('/');
        let dest = root.join(relative);
        if let Some(parent) = dest.parent() {
            mkdir(parent)?;
        }
        if !dest.exists() {
            copy(Path::new(path), &dest)?;
        }
    }
    Ok(())
}

fn mkdir(path: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
    Ok(path.to_owned())
}

fn chmod(path: &Path, mode: u32) -> Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {mode:o} {}", path.display()))
}

/// Copies a file's contents (following symlinks) and mode.
fn copy(from: &Path, to: &Path) -> Result<()> {
    std::fs::copy(from, to)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))
        .map(drop)
}

/// Sets the image's cmd to `cmd` (replacing the busybox's), with further `umoci config` flags.
fn set_cmd(image: &str, cmd: &[&str], extra: &[&str]) -> Result<()> {
    let mut args = vec!["config", "--image", image, "--clear=config.cmd"];
    for part in cmd {
        args.extend(["--config.cmd", part]);
    }
    args.extend(extra);
    umoci(&args)
}

fn umoci(args: &[&str]) -> Result<()> {
    run_tool("umoci", args).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_into_the_repository_and_tag_of_the_mirror() {
        assert_eq!(split(BUSYBOX).unwrap(), ("e2e-test-images/busybox", "1.29-2"));
        assert_eq!(
            split("gcr.io/k8s-staging-cri-tools/test-image-tags:3").unwrap(),
            ("k8s-staging-cri-tools/test-image-tags", "3")
        );
        assert!(split("docker.io/library/busybox:latest").is_err());
        assert!(split("registry.k8s.io/pause").is_err());
    }

    #[test]
    fn every_image_names_a_mirrored_registry_and_a_tag() {
        for image in CRITEST {
            split(image.reference).unwrap();
        }
    }

    #[test]
    fn recipes_have_distinct_tags() {
        for a in CRITEST {
            for b in CRITEST.iter().filter(|b| b.recipe != a.recipe) {
                assert_ne!(a.recipe.tag(), b.recipe.tag(), "{} and {}", a.reference, b.reference);
            }
        }
    }
}
