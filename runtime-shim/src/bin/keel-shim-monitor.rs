//! `keel-shim-monitor monitor ...`: the per-container monitor alone (see `keel_shim::monitor`), the
//! same as `keel-shim monitor ...` in a binary that links only what the monitor uses. One runs per
//! container, so its resident memory is paid per container: the big binary's start-up (the dynamic
//! relocations of its 0.5 MB of `.data.rel.ro`, the pages of its text it touches) costs each monitor
//! several MiB of RSS that this one does not.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // keel-shim passes `monitor` first, whichever binary it runs.
    let mut args = std::env::args_os().skip(1).peekable();
    if args.peek().is_none_or(|arg| arg != "monitor") {
        eprintln!("usage: keel-shim-monitor monitor --id ID --bundle DIR ... (started by keel-shim)");
        return ExitCode::from(2);
    }
    let args = keel_shim::monitor::MonitorArgs::parse_from(args);
    keel_shim::monitor::run(&args)
}
