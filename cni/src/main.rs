//! The `keel-cni` binary: the CNI plugin (the runtime runs it with CNI_COMMAND set), or the installer
//! (`keel-cni install ...`, see `keel_cni::install`).

use std::io::{Read, Write};
use std::process::ExitCode;

use keel_cni::dataplane::kernel::Kernel;
use keel_cni::ipam;
use keel_cni::nft::NftFirewall;
use keel_cni::plugin::BridgePlugin;
use keel_cni::plugin::Ipam;
use keel_cni::skel::{self, CmdArgs};
use keel_cni::spec::{Attachment, CniResult, Error, NetConf};

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_some_and(|arg| arg == "install") {
        return ExitCode::from(keel_cni::install::run(args));
    }
    let mut stdin = Vec::new();
    if let Err(err) = std::io::stdin().read_to_end(&mut stdin) {
        eprintln!("keel-cni: read stdin: {err}");
        return ExitCode::FAILURE;
    }
    let mut plugin = BridgePlugin::new(ConfIpam, NftFirewall::new(), Kernel::new());
    let outcome = skel::run(&|name| std::env::var(name).ok(), &stdin, &mut plugin);
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_all(&outcome.stdout).and_then(|()| stdout.flush());
    drop(stdout);
    // After the answer: work the runtime need not wait for (destroying retired veth pairs).
    plugin.finish();
    match (written, outcome.exit_code) {
        (Ok(()), 0) => ExitCode::SUCCESS,
        _ => ExitCode::FAILURE,
    }
}

/// The IPAM the configuration names (`ipam::for_conf`: built-in, or the delegated plugin), chosen per
/// call since the configuration is read inside `skel::run`.
struct ConfIpam;

impl Ipam for ConfIpam {
    fn allocate(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<CniResult, Error> {
        ipam::for_conf(conf).allocate(args, conf)
    }
    fn release(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error> {
        ipam::for_conf(conf).release(args, conf)
    }
    fn check(&mut self, args: &CmdArgs, conf: &NetConf, addresses: &[std::net::IpAddr]) -> Result<(), Error> {
        ipam::for_conf(conf).check(args, conf, addresses)
    }
    fn gc(&mut self, args: &CmdArgs, conf: &NetConf, valid: &[Attachment]) -> Result<(), Error> {
        ipam::for_conf(conf).gc(args, conf, valid)
    }
    fn status(&mut self, args: &CmdArgs, conf: &NetConf) -> Result<(), Error> {
        ipam::for_conf(conf).status(args, conf)
    }
}
