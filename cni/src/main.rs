//! The `keel-cni` binary: the CNI plugin (the runtime runs it with CNI_COMMAND set).

use std::io::{Read, Write};
use std::process::ExitCode;

use keel_cni::dataplane::kernel::Kernel;
use keel_cni::nft::NftFirewall;
use keel_cni::plugin::BridgePlugin;
use keel_cni::skel;

mod unavailable;

fn main() -> ExitCode {
    let mut stdin = Vec::new();
    if let Err(err) = std::io::stdin().read_to_end(&mut stdin) {
        eprintln!("keel-cni: read stdin: {err}");
        return ExitCode::FAILURE;
    }
    let mut plugin = BridgePlugin::new(unavailable::Ipam, NftFirewall::new(), Kernel::new());
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
