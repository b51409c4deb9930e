//! The `keel-shim` binary: parses and validates the command line, then serves the CRI until SIGTERM
//! or SIGINT.

use std::process::ExitCode;

use clap::Parser;
use keel_shim::config::{Args, Config};

fn main() -> ExitCode {
    // The pause process of a pod with a shared PID namespace (hidden; started by keel-shim itself).
    if std::env::args_os().nth(1).is_some_and(|a| a == keel_shim::sandbox::pause::SUBCOMMAND) {
        return keel_shim::sandbox::pause::run();
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let config = match Config::from_args(args, std::env::var_os("PATH").as_deref()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("keel-shim: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("keel-shim: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(keel_shim::server::run(config));
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keel-shim: {e:#}");
            ExitCode::FAILURE
        }
    }
}
