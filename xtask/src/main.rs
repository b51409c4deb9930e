//! `cargo xtask`: Keel's project commands. Each subcommand lives in its own module.

mod bench;
mod build;
mod codegen;
mod deps;
mod identities;
mod peers;
mod test;
mod up;
mod util;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "Keel's project commands", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Install (as root on Debian/Ubuntu) or list what Keel needs to build, test and run.
    Deps(deps::Args),
    /// Build the upstream reference components (Kubernetes v1.34, cri-tools, etcd 3.6, kwok) into
    /// /var/cache/keel/peers, each only when missing.
    Peers(peers::Args),
    /// THE test command: deps, fmt check, clippy, unit tests and root integration tests.
    Test(test::Args),
    /// Build and start what exists of Keel on this machine.
    Up(up::UpArgs),
    /// Remove every process, namespace, mount and file `up` made.
    Down(up::Instance),
    /// Run a benchmark program; `--record` appends its figures to docs/benchmarks.md.
    Bench(bench::Args),
    /// Build a release binary as Keel ships it (`cni`: keel-cni, statically linked; `shim`: keel-shim).
    Build(build::Args),
    /// Regenerate the committed data derived from the Kubernetes OpenAPI definitions.
    Codegen(codegen::Args),
    /// Internal: the supervisor process `up` leaves running.
    #[command(hide = true)]
    Supervise(up::SuperviseArgs),
}

fn main() -> std::process::ExitCode {
    // The error chain, without the backtrace anyhow would add under RUST_BACKTRACE (it shows xtask's
    // own frames, never the failing command's).
    match run(Cli::parse().command) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<()> {
    match command {
        Command::Deps(args) => deps::run(&args),
        Command::Peers(args) => peers::run(&args),
        Command::Test(args) => test::run(&args),
        Command::Up(args) => up::up(&args),
        Command::Down(instance) => up::down(&instance),
        Command::Bench(args) => bench::run(&args),
        Command::Build(args) => build::run(&args),
        Command::Codegen(args) => codegen::run(&args),
        Command::Supervise(args) => up::supervise(&args),
    }
}
