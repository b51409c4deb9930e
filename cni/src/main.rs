//! The `keel-cni` binary: the CNI plugin (the runtime runs it with CNI_COMMAND set), or the installer
//! (`keel-cni install ...`, see `keel_cni::install`).

use std::io::{Read, Write};
use std::process::ExitCode;

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
    let _ = stdin;
    let _ = std::io::stdout().flush();
    ExitCode::FAILURE
}
