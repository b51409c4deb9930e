//! Encryption at rest (`--encryption-provider-config`) held against kube-apiserver 1.34.
//!
//! One scenario runs in lockstep on the keel-apiserver binary (on etcd, under the prefix `/keel`)
//! and on kube-apiserver (on the same etcd, unprefixed), each restarted with the same
//! configuration at each step: Secrets stored plain, then encrypted (aesgcm, with identity to read
//! the old ones), the key rotated and every Secret rewritten by `kubectl replace`, moved to
//! secretbox, read with a wrong key, and decrypted again. What each server stores (the form of the
//! raw etcd value) and answers is compared step by step. At the encrypting steps the two read each
//! other's values: Keel's raw value copied to kube-apiserver's key for it is served by
//! kube-apiserver, and kube-apiserver's value is decrypted by Keel's transformers (then decoded
//! from its protobuf). Bad configuration files are refused with kube-apiserver's words.
//!
//! Under the configuration that cannot read what is stored, kube-apiserver is waited for on
//! `/livez`: its Secret cache cannot start, so it never turns ready (keel-apiserver does, and fails
//! the same reads with the same errors).

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use keel_apiserver::encryption::Transformers;
use keel_store::Store;
use keel_store::etcd::{EtcdOptions, EtcdStore};
use keel_testbed::kube_apiserver::{KubeApiServer, KubeApiServerOptions};
use keel_testbed::kubectl::{self, Kubectl};
use keel_testbed::loopback::free_port;
use keel_testbed::process::{Daemon, Readiness};

const K1: &str = "/LLt3TnwiHoyzLZ/Psj8IndqTowm1wBNYzOSHfpWHRs=";
const K2: &str = "+0QI3y5UJukJnqfZBM+T8l9b7ku1ThkHk/ZyEWqOu3Y=";
const WRONG: &str = "mjslBYwPgFb4Ix6ZLWQsfHrHWPViFYDzrUyzQ+QMMRk=";
const BOX: &str = "43s7EAz52NBWFk8dDWnIZr0xsxLfMEmpt9eX2InqmVs=";
const CBC: &str = "GWiqN+RNQsBmTlyXAG2jpA==";
const SECRET_VALUE: &str = "hunter2";
const KEEL_PREFIX: &str = "/keel";

/// An EncryptionConfiguration of these resource lists.
fn config(lists: &str) -> String {
    format!("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n{lists}")
}

/// The scenario's steps: a name and the configuration (none at first).
fn steps() -> Vec<(&'static str, Option<String>)> {
    let configmaps_cbc = format!(
        "- resources: [configmaps]\n  providers: [{{aescbc: {{keys: [{{name: c1, secret: {CBC}}}]}}}}]\n"
    );
    vec![
        ("plain", None),
        (
            "encrypt",
            Some(config(&format!(
                "- resources: [secrets]\n  providers:\n  - aesgcm: {{keys: [{{name: k1, secret: {K1}}}]}}\n  - identity: {{}}\n{configmaps_cbc}"
            ))),
        ),
        (
            "rotate",
            Some(config(&format!(
                "- resources: [secrets]\n  providers:\n  - aesgcm: {{keys: [{{name: k2, secret: {K2}}}, {{name: k1, secret: {K1}}}]}}\n  - identity: {{}}\n{configmaps_cbc}"
            ))),
        ),
        (
            "secretbox",
            Some(config(&format!(
                "- resources: [secrets]\n  providers:\n  - secretbox: {{keys: [{{name: b1, secret: {BOX}}}]}}\n  - aesgcm: {{keys: [{{name: k2, secret: {K2}}}]}}\n{configmaps_cbc}"
            ))),
        ),
        (
            "wrong-key",
            Some(config(&format!(
                "- resources: [secrets]\n  providers:\n  - aesgcm: {{keys: [{{name: b1, secret: {WRONG}}}]}}\n{configmaps_cbc}"
            ))),
        ),
        (
            "decrypt",
            Some(config(&format!(
                "- resources: [secrets]\n  providers:\n  - identity: {{}}\n  - secretbox: {{keys: [{{name: b1, secret: {BOX}}}]}}\n{configmaps_cbc}"
            ))),
        ),
    ]
}

/// One API server of the scenario.
trait Side {
    fn name(&self) -> &'static str;
    /// Restarts it with this configuration file (none: no encryption). `readable`: whether
    /// everything stored can be read under it (kube-apiserver is never ready otherwise).
    fn restart(&mut self, config: Option<&Path>, readable: bool) -> Result<()>;
    fn kubeconfig(&self) -> &Path;
    /// Where it keeps a store key in etcd.
    fn etcd_key(&self, key: &str) -> String;
}

struct Keel {
    daemon: Option<Daemon>,
    dir: PathBuf,
    port: u16,
    etcd: Vec<String>,
    kubeconfig: PathBuf,
}

impl Side for Keel {
    fn name(&self) -> &'static str {
        "keel-apiserver"
    }

    fn restart(&mut self, config: Option<&Path>, _readable: bool) -> Result<()> {
        if let Some(mut daemon) = self.daemon.take() {
            daemon.stop()?;
        }
        let mut command = Command::new(env!("CARGO_BIN_EXE_keel-apiserver"));
        command
            .arg("--data-dir")
            .arg(self.dir.join("data"))
            .arg(format!("--etcd-servers={}", self.etcd.join(",")))
            .arg(format!("--etcd-prefix={KEEL_PREFIX}"))
            .args(["--bind-address", "127.0.0.1", "--secure-port", &self.port.to_string()]);
        if let Some(config) = config {
            command.arg("--encryption-provider-config").arg(config);
        }
        let address = SocketAddr::from(([127, 0, 0, 1], self.port));
        self.daemon =
            Some(Daemon::start("keel-apiserver", command, Readiness::Tcp(address), Duration::from_secs(30))?);
        // The port is bound before the server has read its store: ready once /readyz answers.
        let deadline = Instant::now() + Duration::from_secs(60);
        let k = kubectl::newest()?;
        loop {
            let ready = self.kubeconfig.exists()
                && k.command()
                    .arg("--kubeconfig")
                    .arg(&self.kubeconfig)
                    .args(["get", "--raw", "/readyz", "--request-timeout=5s"])
                    .output()?
                    .status
                    .success();
            if ready {
                return Ok(());
            }
            ensure!(Instant::now() < deadline, "keel-apiserver not ready after 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    fn etcd_key(&self, key: &str) -> String {
        format!("{KEEL_PREFIX}{key}")
    }
}

struct Kube {
    server: KubeApiServer,
    kubeconfig: PathBuf,
}

impl Side for Kube {
    fn name(&self) -> &'static str {
        "kube-apiserver"
    }

    fn restart(&mut self, config: Option<&Path>, readable: bool) -> Result<()> {
        let mut options = KubeApiServerOptions::new();
        if !readable {
            // Its Secret cache cannot start, and so /readyz never answers 200.
            options = options.live_only();
        }
        if let Some(config) = config {
            options = options.arg(format!("--encryption-provider-config={}", config.display()));
        }
        self.server.restart_with(&options)
    }

    fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    fn etcd_key(&self, key: &str) -> String {
        key.to_owned()
    }
}

/// kubectl against one side; stdout, or stderr as the error.
fn kubectl(kubectl: &Kubectl, side: &dyn Side, args: &[&str]) -> Result<std::result::Result<String, String>> {
    let output = kubectl.command().arg("--kubeconfig").arg(side.kubeconfig()).args(args).output()?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    Ok(if output.status.success() { Ok(stdout) } else { Err(stderr) })
}

/// kubectl that must succeed.
fn ok(k: &Kubectl, side: &dyn Side, args: &[&str]) -> Result<String> {
    kubectl(k, side, args)?.map_err(|e| anyhow::anyhow!("{}: kubectl {args:?}: {e}", side.name()))
}

/// A Secret's value as a side serves it, or its error.
fn served(k: &Kubectl, side: &dyn Side, name: &str) -> Result<String> {
    Ok(match kubectl(k, side, &["get", "secret", name, "-o", "jsonpath={.data.a}"])? {
        Ok(data) => String::from_utf8_lossy(&STANDARD.decode(data.trim())?).into_owned(),
        Err(error) => format!("error: {error}"),
    })
}

fn resource_version(k: &Kubectl, side: &dyn Side, name: &str) -> Result<String> {
    ok(k, side, &["get", "secret", name, "-o", "jsonpath={.metadata.resourceVersion}"])
}

/// `kubectl get secrets -o json | kubectl replace -f -`: the rewrite upstream documents for
/// moving every Secret to the current key.
fn replace_all(k: &Kubectl, side: &dyn Side, dir: &Path) -> Result<()> {
    let list = ok(k, side, &["get", "secrets", "-o", "json"])?;
    let file = dir.join(format!("{}-secrets.json", side.name()));
    std::fs::write(&file, list)?;
    ok(k, side, &["replace", "-f", &file.display().to_string()])?;
    Ok(())
}

/// The form of a raw stored value: its provider and key (`k8s:enc:aesgcm:v1:k1`), or `plain`.
fn form(raw: Option<&Bytes>) -> String {
    let Some(raw) = raw else { return "absent".into() };
    if !raw.starts_with(b"k8s:enc:") {
        return if raw.starts_with(b"{") { "plain".into() } else { "plain-protobuf".into() };
    }
    let end = raw.iter().enumerate().filter(|(_, b)| **b == b':').nth(4).map_or(raw.len(), |(i, _)| i);
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

/// Keel's and kube-apiserver's stored forms differ only where their encodings do (JSON and
/// protobuf inside the same envelope), so `plain-protobuf` compares equal to `plain`.
fn comparable(form: String) -> String {
    if form == "plain-protobuf" { "plain".into() } else { form }
}

struct Raw {
    runtime: tokio::runtime::Runtime,
    store: Arc<EtcdStore>,
}

impl Raw {
    fn get(&self, key: &str) -> Result<Option<Bytes>> {
        Ok(self.runtime.block_on(self.store.get(key))?.map(|kv| kv.value))
    }

    fn put(&self, key: &str, value: Bytes) -> Result<()> {
        self.runtime.block_on(self.store.put(key, value))?;
        Ok(())
    }
}

#[test]
fn secrets_at_rest_as_kube_apiserver_keeps_them() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let k = kubectl::newest()?;
    let server = KubeApiServer::start()?;
    let etcd = server.etcd().client_urls();
    let kube_kubeconfig = dir.path().join("kube.kubeconfig");
    server.write_kubeconfig(&kube_kubeconfig, server.admin())?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let store = Arc::new(runtime.block_on(EtcdStore::connect(EtcdOptions::new(etcd.clone())))?);
    let raw = Raw { runtime, store };
    let mut keel = Keel {
        daemon: None,
        dir: dir.path().to_owned(),
        port: free_port()?,
        etcd,
        kubeconfig: dir.path().join("data").join("admin.kubeconfig"),
    };
    keel.restart(None, true)?;
    let mut kube = Kube { server, kubeconfig: kube_kubeconfig };
    let mut seen: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    let mut names: Vec<String> = Vec::new();
    for (step, text) in steps() {
        let file = text.as_ref().map(|_| dir.path().join(format!("{step}.yaml")));
        if let (Some(file), Some(text)) = (&file, &text) {
            std::fs::write(file, text)?;
        }
        let new = format!("made-at-{step}");
        for (i, side) in [&mut keel as &mut dyn Side, &mut kube as &mut dyn Side].into_iter().enumerate() {
            if step != "plain" {
                side.restart(file.as_deref(), step != "wrong-key")
                    .with_context(|| format!("{step}: restarting {}", side.name()))?;
            }
            let side: &dyn Side = side;
            let log = &mut seen[i];
            let before: Vec<String> = names
                .iter()
                .map(|n| resource_version(&k, side, n))
                .collect::<Result<_>>()
                .unwrap_or_default();
            if step != "wrong-key" {
                ok(
                    &k,
                    side,
                    &["create", "secret", "generic", &new, &format!("--from-literal=a={SECRET_VALUE}")],
                )?;
                // What rewrites: every Secret, changed or not.
                if matches!(step, "rotate" | "secretbox" | "decrypt") {
                    replace_all(&k, side, dir.path())?;
                }
            }
            let mut all = names.clone();
            all.push(new.clone());
            for (n, name) in all.iter().enumerate() {
                let stored = raw.get(&side.etcd_key(&format!("/registry/secrets/default/{name}")))?;
                let value = served(&k, side, name)?;
                let rewritten = match before.get(n) {
                    Some(rv) if value == SECRET_VALUE => {
                        (*rv != resource_version(&k, side, name)?).to_string()
                    }
                    _ => "-".into(),
                };
                log.push(format!(
                    "{step}: {name}: stored {}, served {value:?}, rewritten {rewritten}",
                    comparable(form(stored.as_ref()))
                ));
            }
            if step == "wrong-key" {
                // A list meets the first value it cannot read, and names its key.
                let listed = match kubectl(&k, side, &["get", "secrets", "-o", "name"])? {
                    Ok(names) => names.lines().collect::<Vec<_>>().join(" "),
                    Err(error) => format!("error: {error}"),
                };
                log.push(format!("{step}: list: {listed}"));
            }
            if step == "rotate" {
                // Once moved to the current key, an update that changes nothing writes nothing.
                let before = resource_version(&k, side, &new)?;
                replace_all(&k, side, dir.path())?;
                log.push(format!(
                    "{step}: no-op replace keeps the version: {}",
                    before == resource_version(&k, side, &new)?
                ));
            }
            if step == "encrypt" {
                ok(&k, side, &["create", "configmap", "cm", "--from-literal=a=plainly"])?;
                let stored = raw.get(&side.etcd_key("/registry/configmaps/default/cm"))?;
                log.push(format!("{step}: configmap stored {}", comparable(form(stored.as_ref()))));
                // The next steps name no rule for configmaps: an encrypted one would not be read.
                ok(&k, side, &["delete", "configmap", "cm"])?;
            }
        }
        if step != "wrong-key" {
            names.push(new.clone());
        }
        if let Some(file) = &file
            && matches!(step, "encrypt" | "secretbox")
        {
            cross_read(&raw, &k, &keel, &kube, file, step)?;
        }
    }
    let [keel_seen, kube_seen] = &seen;
    if keel_seen != kube_seen {
        bail!(
            "the servers differ:\n{}",
            keel_seen
                .iter()
                .zip(kube_seen)
                .map(|(a, b)| if a == b {
                    format!("  same  {a}")
                } else {
                    format!("  keel  {a}\n  kube  {b}")
                })
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    // What the steps must show, beyond agreeing: a sample of the story.
    for line in [
        "plain: made-at-plain: stored plain, served \"hunter2\", rewritten -",
        "encrypt: made-at-plain: stored plain, served \"hunter2\", rewritten false",
        "encrypt: made-at-encrypt: stored k8s:enc:aesgcm:v1:k1, served \"hunter2\", rewritten -",
        "encrypt: configmap stored k8s:enc:aescbc:v1:c1",
        "rotate: made-at-plain: stored k8s:enc:aesgcm:v1:k2, served \"hunter2\", rewritten true",
        "rotate: made-at-encrypt: stored k8s:enc:aesgcm:v1:k2, served \"hunter2\", rewritten true",
        "rotate: no-op replace keeps the version: true",
        "secretbox: made-at-rotate: stored k8s:enc:secretbox:v1:b1, served \"hunter2\", rewritten true",
        "decrypt: made-at-secretbox: stored plain, served \"hunter2\", rewritten true",
    ] {
        ensure!(keel_seen.iter().any(|l| l == line), "missing {line:?} in:\n{}", keel_seen.join("\n"));
    }
    ensure!(
        keel_seen
            .iter()
            .any(|l| l
                .starts_with("wrong-key: made-at-plain: stored k8s:enc:secretbox:v1:b1, served \"error: ")),
        "a wrong key fails the read:\n{}",
        keel_seen.join("\n")
    );
    ensure!(
        keel_seen
            .iter()
            .any(|l| l.starts_with("wrong-key: list: error: ") && l.contains("unable to transform key")),
        "a wrong key fails the list:\n{}",
        keel_seen.join("\n")
    );
    Ok(())
}

/// Each server reads what the other encrypted under `config`.
fn cross_read(raw: &Raw, k: &Kubectl, keel: &Keel, kube: &Kube, config: &Path, step: &str) -> Result<()> {
    // Keel's value at kube-apiserver's key for the same object: kube-apiserver decrypts it (the
    // store key is the authenticated data, so it must be the same object's key) and decodes Keel's
    // JSON.
    let name = format!("keel-made-{step}");
    ok(k, keel, &["create", "secret", "generic", &name, &format!("--from-literal=a={SECRET_VALUE}")])?;
    let key = format!("/registry/secrets/default/{name}");
    let value = raw.get(&keel.etcd_key(&key))?.context("keel stored nothing")?;
    ensure!(value.starts_with(b"k8s:enc:"), "{step}: keel stored {}", form(Some(&value)));
    raw.put(&key, value)?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let served = served(k, kube, &name)?;
        if served == SECRET_VALUE {
            break;
        }
        ensure!(Instant::now() < deadline, "{step}: kube-apiserver serves Keel's Secret as {served:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    // kube-apiserver's value, decrypted by Keel's transformers for the same configuration: its
    // protobuf Secret, with the value.
    let name = format!("kube-made-{step}");
    ok(k, kube, &["create", "secret", "generic", &name, &format!("--from-literal=a={SECRET_VALUE}")])?;
    let key = format!("/registry/secrets/default/{name}");
    let value = raw.get(&key)?.context("kube-apiserver stored nothing")?;
    let transformers = Transformers::load(config).map_err(anyhow::Error::msg)?;
    let transformer = transformers.for_key(&key).context("secrets are encrypted")?;
    let read = transformer.from_storage(&value, &key).map_err(anyhow::Error::msg)?;
    ensure!(!read.stale, "{step}: kube-apiserver wrote with the first key");
    let object = keel_api::protobuf::envelope::decode_object_typed(&read.data)
        .map_err(|e| anyhow::anyhow!("{step}: decoding kube-apiserver's Secret: {}", e.error))?;
    ensure!(
        object["data"]["a"] == STANDARD.encode(SECRET_VALUE),
        "{step}: Keel decrypted kube-apiserver's Secret as {object}"
    );
    // Gone before the next step: a later configuration without this key could not read them
    // (and kube-apiserver's Secret cache would not start).
    ok(k, kube, &["delete", "secret", &format!("keel-made-{step}"), &name])?;
    ok(k, keel, &["delete", "secret", &format!("keel-made-{step}")])?;
    Ok(())
}

/// The embedded store holds encrypted values too, and a restart with the same file reads them.
#[test]
fn the_embedded_store_keeps_secrets_encrypted() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("config.yaml");
    std::fs::write(
        &file,
        config(&format!(
            "- resources: [secrets]\n  providers: [{{aesgcm: {{keys: [{{name: k1, secret: {K1}}}]}}}}]\n"
        )),
    )?;
    let k = kubectl::newest()?;
    let start = || -> Result<(Daemon, PathBuf)> {
        let port = free_port()?;
        let mut command = Command::new(env!("CARGO_BIN_EXE_keel-apiserver"));
        command
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--bind-address", "127.0.0.1", "--secure-port", &port.to_string()])
            .arg("--encryption-provider-config")
            .arg(&file);
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let daemon =
            Daemon::start("keel-apiserver", command, Readiness::Tcp(address), Duration::from_secs(30))?;
        Ok((daemon, dir.path().join("data").join("admin.kubeconfig")))
    };
    let run = |kubeconfig: &Path, args: &[&str]| -> Result<String> {
        let output = k.command().arg("--kubeconfig").arg(kubeconfig).args(args).output()?;
        ensure!(output.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let (mut daemon, kubeconfig) = start()?;
    run(&kubeconfig, &["create", "secret", "generic", "s", &format!("--from-literal=a={SECRET_VALUE}")])?;
    daemon.stop()?;
    let store = keel_store::embedded::EmbeddedStore::open(keel_store::embedded::Options::new(
        dir.path().join("data").join("store"),
    ))?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let stored =
        runtime.block_on(store.get("/registry/secrets/default/s"))?.context("the Secret is stored")?;
    ensure!(stored.value.starts_with(b"k8s:enc:aesgcm:v1:k1:"), "stored as {}", form(Some(&stored.value)));
    let encoded = STANDARD.encode(SECRET_VALUE);
    ensure!(
        !stored.value.windows(encoded.len()).any(|w| w == encoded.as_bytes()),
        "the value is not in the store in the clear"
    );
    drop(store);
    let (_daemon, kubeconfig) = start()?;
    let data = run(&kubeconfig, &["get", "secret", "s", "-o", "jsonpath={.data.a}"])?;
    ensure!(data.trim() == encoded, "served {data:?} after a restart");
    Ok(())
}

#[test]
fn bad_configuration_files_refused_as_kube_apiserver_refuses_them() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let aesgcm = |secret: &str| format!("aesgcm: {{keys: [{{name: k1, secret: {secret}}}]}}");
    let cases = [
        (
            "short-key",
            config(&format!("- resources: [secrets]\n  providers: [{{{}}}]\n", aesgcm("c2hvcnQ="))),
        ),
        (
            "not-base64",
            config(&format!("- resources: [secrets]\n  providers: [{{{}}}]\n", aesgcm("'!!notbase64'"))),
        ),
        ("no-resources", config("")),
        ("empty-lists", config("- resources: []\n  providers: []\n")),
        (
            "no-keys",
            config(
                "- resources: [secrets]\n  providers: [{aesgcm: {keys: []}}, {secretbox: {keys: [{name: b}]}}]\n",
            ),
        ),
        (
            "secretbox-size",
            config(&format!(
                "- resources: [secrets]\n  providers: [{{secretbox: {{keys: [{{name: b, secret: {CBC}}}]}}}}]\n"
            )),
        ),
        ("no-provider", config("- resources: [secrets]\n  providers: [{}]\n")),
        (
            "names",
            config(
                "- resources: ['*', Secrets, events.events.k8s.io, x.extensions, secrets.*, serviceipallocations]\n  providers: [{identity: {}}]\n",
            ),
        ),
        ("overlap", config("- resources: [secrets, secrets, '*.']\n  providers: [{identity: {}}]\n")),
        (
            "masked",
            config(
                "- resources: ['*.*']\n  providers: [{identity: {}}]\n- resources: [secrets]\n  providers: [{identity: {}}]\n",
            ),
        ),
        (
            "masked-group",
            config(
                "- resources: ['*.apps']\n  providers: [{identity: {}}]\n- resources: [deployments.apps]\n  providers: [{identity: {}}]\n",
            ),
        ),
        (
            "wrong-version",
            "apiVersion: apiserver.config.k8s.io/v2\nkind: EncryptionConfiguration\nresources: []\n"
                .to_owned(),
        ),
        ("empty", String::new()),
    ];
    for (name, text) in &cases {
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, text)?;
        let upstream = common::kube_apiserver_refusing(
            dir.path(),
            &[format!("--encryption-provider-config={}", file.display())],
        )?;
        let mut keel = Command::new(env!("CARGO_BIN_EXE_keel-apiserver"));
        keel.arg("--data-dir").arg(dir.path().join("data")).arg("--encryption-provider-config").arg(&file);
        let (kube_error, keel_error) = (common::start_error(upstream)?, common::start_error(keel)?);
        assert_eq!(keel_error, kube_error, "{name}: {text:?}");
    }
    ensure!(!dir.path().join("data").exists(), "nothing written before the flags are checked");
    Ok(())
}
