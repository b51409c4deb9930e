//! `keel-cni install`: puts the plugin on a node — the binary into the runtime's CNI bin dir and a
//! conflist naming it into the conf dir — as a DaemonSet's init container does with the node's pod CIDR.
//!
//! Both files are written atomically: a temporary file in the same directory, fsynced, then renamed
//! over the old one (and the directory fsynced), so a runtime reading the conf dir or executing the
//! plugin never sees half a file, and a plugin process still running the old binary keeps its inode.
//!
//! The arguments are parsed by hand: the plugin path shares this binary and must start cheaply, and
//! the installer's dozen flags do not justify a parser crate in it.

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde_json::{Map, Value, json};

use crate::spec::Version;
use crate::spec::config::{DEFAULT_BRIDGE, RangeConf};

/// The plugin's file name in the bin dir: the conflist's `type`.
pub const PLUGIN_TYPE: &str = "keel-cni";
/// The conflist's `name` unless `--network-name` says otherwise.
pub const DEFAULT_NETWORK_NAME: &str = "keel";
/// The conflist's file name unless `--conf-name` says otherwise (runtimes take the first in lexical
/// order, hence the number).
pub const DEFAULT_CONF_NAME: &str = "10-keel.conflist";

/// The usage text of `keel-cni install`.
pub const USAGE: &str = "\
usage: keel-cni install --bin-dir DIR --conf-dir DIR --pod-cidr CIDR[,CIDR] [options]

Copies this binary into DIR/keel-cni and writes the network configuration list, both atomically.

  --bin-dir DIR                the runtime's CNI plugin directory (e.g. /opt/cni/bin)
  --conf-dir DIR               the runtime's CNI configuration directory (e.g. /etc/cni/net.d)
  --pod-cidr CIDR[,CIDR]       the node's pod CIDRs (Node.spec.podCIDRs), one per IP family
  --cluster-cidr CIDR[,CIDR]   the cluster's pod network: reached without masquerade
  --cni-version VERSION        1.0.0 (default; containerd 1.6 reads up to 1.0.0) or 1.1.0
  --bridge NAME                the node bridge (default cni0)
  --mtu N                      the bridge's and pods' MTU (default: the kernel's)
  --data-dir DIR               where IPAM keeps allocations (default /var/lib/cni/networks)
  --network-name NAME          the network's name (default keel)
  --conf-name FILE             the conflist's file name (default 10-keel.conflist)
";

/// What went wrong; printed as `keel-cni install: <error>` with a non-zero exit.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{0}\n\n{USAGE}")]
    Usage(String),
    #[error("invalid {flag} {value:?}: {reason}")]
    Invalid { flag: &'static str, value: String, reason: String },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn invalid(flag: &'static str, value: &str, reason: impl Into<String>) -> InstallError {
    InstallError::Invalid { flag, value: value.to_owned(), reason: reason.into() }
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> InstallError {
    let path = path.to_owned();
    move |source| InstallError::Io { what, path, source }
}

/// The installer's options, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallOptions {
    pub bin_dir: PathBuf,
    pub conf_dir: PathBuf,
    /// One per family at most: IPv4 first when both are given, as kubelet orders podCIDRs.
    pub pod_cidrs: Vec<IpNet>,
    pub cluster_cidrs: Vec<IpNet>,
    pub cni_version: Version,
    pub bridge: String,
    pub mtu: Option<u32>,
    pub data_dir: Option<PathBuf>,
    pub network_name: String,
    pub conf_name: String,
}

/// Parses the arguments after `install` (`--flag value` or `--flag=value`); `None` when `--help` asks
/// for the usage text.
pub fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Option<InstallOptions>, InstallError> {
    let mut args = args.into_iter();
    let mut bin_dir = None;
    let mut conf_dir = None;
    let mut pod_cidrs = None;
    let mut cluster_cidrs = Vec::new();
    let mut cni_version = Version::V1_0_0;
    let mut bridge = DEFAULT_BRIDGE.to_owned();
    let mut mtu = None;
    let mut data_dir = None;
    let mut network_name = DEFAULT_NETWORK_NAME.to_owned();
    let mut conf_name = DEFAULT_CONF_NAME.to_owned();
    while let Some(arg) = args.next() {
        let arg =
            arg.into_string().map_err(|arg| InstallError::Usage(format!("argument {arg:?} is not UTF-8")))?;
        if arg == "--help" || arg == "-h" {
            return Ok(None);
        }
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_owned(), Some(value.to_owned())),
            _ => (arg, None),
        };
        let mut value = || -> Result<String, InstallError> {
            match inline.clone() {
                Some(value) => Ok(value),
                None => args
                    .next()
                    .ok_or_else(|| InstallError::Usage(format!("{flag} needs a value")))?
                    .into_string()
                    .map_err(|value| InstallError::Usage(format!("{flag}: {value:?} is not UTF-8"))),
            }
        };
        match flag.as_str() {
            "--bin-dir" => bin_dir = Some(PathBuf::from(value()?)),
            "--conf-dir" => conf_dir = Some(PathBuf::from(value()?)),
            "--pod-cidr" => pod_cidrs = Some(pod_cidr_list(&value()?)?),
            "--cluster-cidr" => cluster_cidrs = cidr_list("--cluster-cidr", &value()?)?,
            "--cni-version" => cni_version = conflist_version(&value()?)?,
            "--bridge" => bridge = bridge_name(&value()?)?,
            "--mtu" => mtu = Some(mtu_value(&value()?)?),
            "--data-dir" => data_dir = Some(absolute("--data-dir", &value()?)?),
            "--network-name" => network_name = network_name_value(&value()?)?,
            "--conf-name" => conf_name = conf_name_value(&value()?)?,
            other => return Err(InstallError::Usage(format!("unknown argument {other:?}"))),
        }
    }
    let missing = |flag: &str| InstallError::Usage(format!("{flag} is required"));
    Ok(Some(InstallOptions {
        bin_dir: bin_dir.ok_or_else(|| missing("--bin-dir"))?,
        conf_dir: conf_dir.ok_or_else(|| missing("--conf-dir"))?,
        pod_cidrs: pod_cidrs.ok_or_else(|| missing("--pod-cidr"))?,
        cluster_cidrs,
        cni_version,
        bridge,
        mtu,
        data_dir,
        network_name,
        conf_name,
    }))
}

/// A comma-separated list of networks; each must be written as its network address.
fn cidr_list(flag: &'static str, text: &str) -> Result<Vec<IpNet>, InstallError> {
    let cidrs = text
        .split(',')
        .map(str::trim)
        .map(|item| {
            let cidr: IpNet =
                item.parse().map_err(|_| invalid(flag, item, "not a CIDR such as 10.244.1.0/24"))?;
            if cidr.trunc() != cidr {
                return Err(invalid(
                    flag,
                    item,
                    format!("host bits are set (the network is {})", cidr.trunc()),
                ));
            }
            Ok(cidr)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(cidrs)
}

/// The node's pod CIDRs: one or two, at most one per family, each large enough to allocate from.
fn pod_cidr_list(text: &str) -> Result<Vec<IpNet>, InstallError> {
    let mut cidrs = cidr_list("--pod-cidr", text)?;
    if cidrs.len() > 2 || (cidrs.len() == 2 && cidrs[0].addr().is_ipv4() == cidrs[1].addr().is_ipv4()) {
        return Err(invalid("--pod-cidr", text, "give one CIDR per IP family (IPv4, IPv6) at most"));
    }
    for cidr in &cidrs {
        let range = RangeConf { subnet: *cidr, range_start: None, range_end: None, gateway: None };
        range.validate().map_err(|err| invalid("--pod-cidr", &cidr.to_string(), err.msg))?;
    }
    cidrs.sort_by_key(|cidr| !cidr.addr().is_ipv4());
    Ok(cidrs)
}

fn conflist_version(text: &str) -> Result<Version, InstallError> {
    match Version::parse(text) {
        Ok(version @ (Version::V1_0_0 | Version::V1_1_0)) => Ok(version),
        _ => Err(invalid("--cni-version", text, "the conflist is written as 1.0.0 or 1.1.0")),
    }
}

fn bridge_name(text: &str) -> Result<String, InstallError> {
    // The kernel's limit (IFNAMSIZ - 1) and the characters it refuses in a link name.
    if text.is_empty() || text.len() > 15 || text.contains(['/', ' ', ':']) || text == "." || text == ".." {
        return Err(invalid(
            "--bridge",
            text,
            "a link name is 1 to 15 characters without '/', ':' or spaces",
        ));
    }
    Ok(text.to_owned())
}

fn mtu_value(text: &str) -> Result<u32, InstallError> {
    match text.parse::<u32>() {
        Ok(mtu) if (68..=65535).contains(&mtu) => Ok(mtu),
        _ => Err(invalid("--mtu", text, "the kernel accepts 68 to 65535")),
    }
}

fn absolute(flag: &'static str, text: &str) -> Result<PathBuf, InstallError> {
    let path = PathBuf::from(text);
    if !path.is_absolute() {
        return Err(invalid(flag, text, "an absolute path is needed (the runtime's working dir is unknown)"));
    }
    Ok(path)
}

fn network_name_value(text: &str) -> Result<String, InstallError> {
    // The name becomes a directory under the IPAM data dir.
    if text.is_empty() || text.contains('/') || text == "." || text == ".." {
        return Err(invalid("--network-name", text, "a name without '/' is needed"));
    }
    Ok(text.to_owned())
}

fn conf_name_value(text: &str) -> Result<String, InstallError> {
    if text.contains('/') || text.starts_with('.') || !text.ends_with(".conflist") {
        return Err(invalid("--conf-name", text, "a file name ending in .conflist is needed"));
    }
    Ok(text.to_owned())
}

/// The network configuration list: keel-cni alone, as the node's gateway and default route, with
/// masquerade of traffic leaving the cluster and hairpin for Services, one IPAM range set per pod CIDR
/// (keel-cni's built-in IPAM: no `ipam.type`), and the capabilities kubelet's CRI runtimes pass.
pub fn conflist(opts: &InstallOptions) -> Value {
    let mut plugin = Map::new();
    plugin.insert("type".into(), PLUGIN_TYPE.into());
    plugin.insert("bridge".into(), opts.bridge.clone().into());
    plugin.insert("isGateway".into(), true.into());
    plugin.insert("isDefaultGateway".into(), true.into());
    plugin.insert("ipMasq".into(), true.into());
    plugin.insert("hairpinMode".into(), true.into());
    if let Some(mtu) = opts.mtu {
        plugin.insert("mtu".into(), mtu.into());
    }
    if !opts.cluster_cidrs.is_empty() {
        let cidrs: Vec<Value> = opts.cluster_cidrs.iter().map(|cidr| cidr.to_string().into()).collect();
        plugin.insert("clusterCIDRs".into(), cidrs.into());
    }
    let ranges: Vec<Value> =
        opts.pod_cidrs.iter().map(|cidr| json!([{"subnet": cidr.to_string()}])).collect();
    let mut ipam = Map::new();
    ipam.insert("ranges".into(), ranges.into());
    if let Some(data_dir) = &opts.data_dir {
        ipam.insert("dataDir".into(), data_dir.to_string_lossy().into_owned().into());
    }
    plugin.insert("ipam".into(), ipam.into());
    plugin.insert("capabilities".into(), json!({"portMappings": true, "ips": true, "mac": true}));
    json!({
        "cniVersion": opts.cni_version.as_str(),
        "name": opts.network_name,
        "plugins": [plugin],
    })
}

/// The files `install` wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub binary: PathBuf,
    pub conflist: PathBuf,
}

/// Copies `binary` (the running executable, `/proc/self/exe`) into the bin dir and writes the
/// conflist, creating both directories if needed. The binary goes first: a runtime that sees the
/// conflist finds the plugin it names.
pub fn install(opts: &InstallOptions, binary: &Path) -> Result<Installed, InstallError> {
    for dir in [&opts.bin_dir, &opts.conf_dir] {
        std::fs::create_dir_all(dir).map_err(io("creating", dir))?;
    }
    let mut source = File::open(binary).map_err(io("opening", binary))?;
    let installed_binary = opts.bin_dir.join(PLUGIN_TYPE);
    write_atomically(&installed_binary, 0o755, |file| std::io::copy(&mut source, file).map(drop))?;
    let mut text = serde_json::to_vec_pretty(&conflist(opts)).unwrap_or_default();
    text.push(b'\n');
    let installed_conflist = opts.conf_dir.join(&opts.conf_name);
    write_atomically(&installed_conflist, 0o644, |file| file.write_all(&text))?;
    Ok(Installed { binary: installed_binary, conflist: installed_conflist })
}

/// Writes `path` through a temporary file in its directory: filled by `fill`, given `mode`, fsynced,
/// renamed over `path`, and the directory fsynced so the rename survives a crash. The temporary file
/// is removed when any step fails.
pub fn write_atomically(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut File) -> std::io::Result<()>,
) -> Result<(), InstallError> {
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    let temp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&temp)
            .map_err(io("creating", &temp))?;
        fill(&mut file).map_err(io("writing", &temp))?;
        // The mode given to open is filtered by the umask; the installed files need exactly `mode`.
        file.set_permissions(std::fs::Permissions::from_mode(mode)).map_err(io("chmod", &temp))?;
        file.sync_all().map_err(io("fsync", &temp))?;
        std::fs::rename(&temp, path).map_err(io("renaming into place", path))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written?;
    File::open(dir).and_then(|dir| dir.sync_all()).map_err(io("fsync", dir))
}

/// `keel-cni install ARGS`: parses, installs the running binary, reports on stdout; returns the exit
/// code (0, or 1 with the error on stderr).
pub fn run(args: impl IntoIterator<Item = OsString>) -> u8 {
    let outcome = parse_args(args).and_then(|opts| match opts {
        None => {
            print!("{USAGE}");
            Ok(None)
        }
        Some(opts) => install(&opts, Path::new("/proc/self/exe")).map(Some),
    });
    match outcome {
        Ok(None) => 0,
        Ok(Some(installed)) => {
            println!(
                "keel-cni: installed {} and {}",
                installed.binary.display(),
                installed.conflist.display()
            );
            0
        }
        Err(err) => {
            eprintln!("keel-cni install: {err}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::spec::NetConf;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn options(list: &[&str]) -> InstallOptions {
        parse_args(args(list)).unwrap().expect("options, not --help")
    }

    const REQUIRED: [&str; 6] =
        ["--bin-dir", "/opt/cni/bin", "--conf-dir", "/etc/cni/net.d", "--pod-cidr", ""];

    fn with_pod_cidr(cidr: &str, more: &[&str]) -> Vec<String> {
        let mut list: Vec<String> = REQUIRED.iter().map(|s| (*s).to_owned()).collect();
        list[5] = cidr.to_owned();
        list.extend(more.iter().map(|s| (*s).to_owned()));
        list
    }

    fn parse(list: &[String]) -> Result<Option<InstallOptions>, InstallError> {
        parse_args(list.iter().map(OsString::from))
    }

    /// Each plugin of the list as a runtime hands it to the plugin: the list's cniVersion and name
    /// added to the plugin's own object.
    fn plugin_confs(list: &Value) -> Vec<NetConf> {
        let plugins = list["plugins"].as_array().expect("plugins");
        plugins
            .iter()
            .map(|plugin| {
                let mut object = plugin.as_object().expect("plugin object").clone();
                object.insert("cniVersion".into(), list["cniVersion"].clone());
                object.insert("name".into(), list["name"].clone());
                NetConf::parse(Value::Object(object).to_string().as_bytes()).expect("keel-cni parses it")
            })
            .collect()
    }

    #[test]
    fn defaults_and_every_flag() {
        let opts = options(&["--bin-dir", "/b", "--conf-dir=/c", "--pod-cidr", "10.244.1.0/24"]);
        assert_eq!(opts.bin_dir, PathBuf::from("/b"));
        assert_eq!(opts.conf_dir, PathBuf::from("/c"));
        assert_eq!(opts.pod_cidrs, vec!["10.244.1.0/24".parse::<IpNet>().unwrap()]);
        assert_eq!(opts.cni_version, Version::V1_0_0);
        assert_eq!((opts.bridge.as_str(), opts.mtu, opts.data_dir.as_deref()), ("cni0", None, None));
        assert_eq!((opts.network_name.as_str(), opts.conf_name.as_str()), ("keel", "10-keel.conflist"));

        let opts = options(&[
            "--bin-dir=/b",
            "--conf-dir",
            "/c",
            "--pod-cidr",
            "fd00:10:244:1::/64, 10.244.1.0/24",
            "--cluster-cidr",
            "10.244.0.0/16,fd00:10:244::/48",
            "--cni-version",
            "1.1.0",
            "--bridge",
            "kbr0",
            "--mtu",
            "1450",
            "--data-dir",
            "/var/lib/keel/ipam",
            "--network-name",
            "pods",
            "--conf-name",
            "05-pods.conflist",
        ]);
        // IPv4 first, whatever order they came in.
        assert_eq!(opts.pod_cidrs[0], "10.244.1.0/24".parse::<IpNet>().unwrap());
        assert_eq!(opts.pod_cidrs[1], "fd00:10:244:1::/64".parse::<IpNet>().unwrap());
        assert_eq!(opts.cluster_cidrs.len(), 2);
        assert_eq!(opts.cni_version, Version::V1_1_0);
        assert_eq!((opts.bridge.as_str(), opts.mtu), ("kbr0", Some(1450)));
        assert_eq!(opts.data_dir, Some(PathBuf::from("/var/lib/keel/ipam")));
        assert_eq!((opts.network_name.as_str(), opts.conf_name.as_str()), ("pods", "05-pods.conflist"));
        assert_eq!(parse_args(args(&["--help"])).unwrap(), None);
    }

    #[test]
    fn bad_arguments_are_refused_naming_the_flag_and_value() {
        let cases: [(Vec<String>, &str); 15] = [
            (with_pod_cidr("10.244.1.0/33", &[]), "--pod-cidr \"10.244.1.0/33\""),
            (with_pod_cidr("banana", &[]), "--pod-cidr \"banana\""),
            (with_pod_cidr("10.244.1.5/24", &[]), "host bits are set (the network is 10.244.1.0/24)"),
            (with_pod_cidr("10.244.1.0/24,10.244.2.0/24", &[]), "one CIDR per IP family"),
            (with_pod_cidr("10.244.1.0/31", &[]), "too small"),
            (with_pod_cidr("10.244.1.0/24,", &[]), "--pod-cidr \"\""),
            (with_pod_cidr("10.244.1.0/24", &["--cluster-cidr", "10.244.0.0/33"]), "--cluster-cidr"),
            (with_pod_cidr("10.244.1.0/24", &["--cni-version", "0.4.0"]), "--cni-version \"0.4.0\""),
            (with_pod_cidr("10.244.1.0/24", &["--cni-version", "2.0.0"]), "--cni-version"),
            (with_pod_cidr("10.244.1.0/24", &["--mtu", "40"]), "--mtu \"40\""),
            (with_pod_cidr("10.244.1.0/24", &["--bridge", "a-very-long-bridge-name"]), "--bridge"),
            (with_pod_cidr("10.244.1.0/24", &["--data-dir", "relative/dir"]), "--data-dir"),
            (with_pod_cidr("10.244.1.0/24", &["--conf-name", "keel.conf"]), "--conf-name"),
            (with_pod_cidr("10.244.1.0/24", &["--frobnicate"]), "unknown argument \"--frobnicate\""),
            (with_pod_cidr("10.244.1.0/24", &["--mtu"]), "--mtu needs a value"),
        ];
        for (list, expected) in cases {
            let err = parse(&list).unwrap_err().to_string();
            assert!(err.contains(expected), "{list:?}: {err}");
        }
        let err = parse_args(args(&["--bin-dir", "/b", "--conf-dir", "/c"])).unwrap_err();
        assert!(err.to_string().starts_with("--pod-cidr is required"), "{err}");
    }

    #[test]
    fn the_conflist_is_what_keel_cni_reads_back() {
        let opts = options(&[
            "--bin-dir=/b",
            "--conf-dir=/c",
            "--pod-cidr=10.244.1.0/24,fd00:10:244:1::/64",
            "--cluster-cidr=10.244.0.0/16",
            "--mtu=1450",
            "--data-dir=/tmp/ipam",
        ]);
        let list = conflist(&opts);
        assert_eq!(list["cniVersion"], "1.0.0");
        assert_eq!(list["name"], "keel");
        assert_eq!(list["plugins"].as_array().unwrap().len(), 1);
        assert_eq!(
            list["plugins"][0]["capabilities"],
            json!({"portMappings": true, "ips": true, "mac": true})
        );
        let conf = &plugin_confs(&list)[0];
        assert_eq!(conf.cni_version, Version::V1_0_0);
        assert_eq!((conf.name.as_str(), conf.plugin_type.as_str()), ("keel", "keel-cni"));
        let bridge = &conf.bridge;
        assert!(bridge.is_gateway && bridge.is_default_gateway && bridge.ip_masq && bridge.hairpin_mode);
        assert_eq!((bridge.bridge.as_str(), bridge.mtu), ("cni0", Some(1450)));
        assert_eq!(bridge.cluster_cidrs, vec!["10.244.0.0/16".parse::<IpNet>().unwrap()]);
        assert_eq!(conf.ipam.plugin_type, None, "built-in IPAM");
        let subnets: Vec<String> = conf.ipam.ranges.iter().map(|set| set[0].subnet.to_string()).collect();
        assert_eq!(subnets, ["10.244.1.0/24", "fd00:10:244:1::/64"]);
        assert_eq!(conf.ipam.data_dir, PathBuf::from("/tmp/ipam"));

        // Optional keys stay out when not asked for: the default data dir, MTU and cluster CIDRs.
        let list = conflist(&options(&["--bin-dir=/b", "--conf-dir=/c", "--pod-cidr=10.244.1.0/24"]));
        let plugin = &list["plugins"][0];
        assert!(plugin.get("mtu").is_none() && plugin.get("clusterCIDRs").is_none());
        assert!(plugin["ipam"].get("dataDir").is_none() && plugin["ipam"].get("type").is_none());
        assert_eq!(
            plugin_confs(&list)[0].ipam.data_dir,
            PathBuf::from(crate::spec::config::DEFAULT_DATA_DIR)
        );
    }

    #[test]
    fn install_replaces_both_files_atomically_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source-binary");
        std::fs::write(&source, b"\x7fELF new plugin").unwrap();
        let bin_dir = dir.path().join("bin");
        let conf_dir = dir.path().join("net.d");
        std::fs::create_dir(&bin_dir).unwrap();
        // An old binary, held open as a running plugin would hold it: it keeps its inode and content.
        std::fs::write(bin_dir.join("keel-cni"), b"old plugin").unwrap();
        let old = File::open(bin_dir.join("keel-cni")).unwrap();
        let opts = InstallOptions {
            bin_dir: bin_dir.clone(),
            conf_dir: conf_dir.clone(),
            ..options(&["--bin-dir=/b", "--conf-dir=/c", "--pod-cidr=10.244.1.0/24", "--cni-version=1.1.0"])
        };
        let installed = install(&opts, &source).unwrap();
        assert_eq!(installed.binary, bin_dir.join("keel-cni"));
        assert_eq!(installed.conflist, conf_dir.join("10-keel.conflist"));
        assert_eq!(std::fs::read(&installed.binary).unwrap(), b"\x7fELF new plugin");
        assert_eq!(std::fs::metadata(&installed.binary).unwrap().mode() & 0o7777, 0o755);
        assert_eq!(std::fs::metadata(&installed.conflist).unwrap().mode() & 0o7777, 0o644);
        assert_ne!(old.metadata().unwrap().ino(), std::fs::metadata(&installed.binary).unwrap().ino());
        assert_eq!(std::io::read_to_string(&old).unwrap(), "old plugin");
        let list: Value = serde_json::from_slice(&std::fs::read(&installed.conflist).unwrap()).unwrap();
        assert_eq!(list["cniVersion"], "1.1.0");
        assert_eq!(plugin_confs(&list)[0].cni_version, Version::V1_1_0);
        for dir in [&bin_dir, &conf_dir] {
            let names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(names.len(), 1, "only the installed file in {}: {names:?}", dir.display());
        }

        // Installing again (a DaemonSet pod restarting) replaces both in place.
        install(&opts, &source).unwrap();
        assert_eq!(std::fs::read_dir(&bin_dir).unwrap().count(), 1);
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("10-keel.conflist");
        std::fs::write(&path, "old").unwrap();
        let err = write_atomically(&path, 0o644, |file| {
            file.write_all(b"half")?;
            Err(std::io::Error::other("disk full"))
        })
        .unwrap_err();
        assert!(err.to_string().contains("disk full"), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
