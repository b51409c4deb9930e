//! The `keel-shim` binary: parses and validates the command line, then serves the CRI until SIGTERM
//! or SIGINT.

use std::process::ExitCode;

use std::path::PathBuf;

use clap::Parser;
use keel_shim::config::{Args, Config};

/// `keel-shim import PATH [--root DIR] [--base-name NAME]`: imports the images of an OCI image layout
/// directory or an OCI or Docker archive into the store, for nodes without a registry.
#[derive(Debug, Parser)]
#[command(name = "keel-shim import")]
struct ImportArgs {
    /// An OCI image layout directory, or a tar of one (oci-archive) or of `docker save`.
    path: PathBuf,
    /// keel-shim's root directory (its --root).
    #[arg(long, value_name = "DIR", default_value = "/var/lib/keel-shim")]
    root: PathBuf,
    /// The repository of images the layout names by a bare tag (`registry/repo`).
    #[arg(long, value_name = "NAME")]
    base_name: Option<String>,
}

fn import(args: &ImportArgs) -> ExitCode {
    let imported = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|runtime| {
            runtime.block_on(async {
                let store = keel_shim::image::ImageStore::open(&args.root, &[]).map_err(|e| e.to_string())?;
                store.import(&args.path, args.base_name.as_deref()).await.map_err(|e| e.to_string())
            })
        });
    match imported {
        Ok(images) => {
            for image in images {
                println!("{} {}", image.id, image.repo_tags.join(" "));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("keel-shim import {}: {e}", args.path.display());
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    // The hidden `keel-shim monitor ...`: one per container, started by keel-shim itself.
    if std::env::args_os().nth(1).is_some_and(|arg| arg == "monitor") {
        let args = keel_shim::monitor::MonitorArgs::parse_from(std::env::args_os().skip(1));
        return keel_shim::monitor::run(&args);
    }
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
    if std::env::args_os().nth(1).is_some_and(|a| a == "import") {
        return import(&ImportArgs::parse_from(std::env::args_os().skip(1)));
    }
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
