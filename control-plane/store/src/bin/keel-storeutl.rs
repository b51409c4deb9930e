//! keel-storeutl: offline tools for an embedded store's data directory (etcdutl's role).
//!
//! - `check DIR`: opens the directory (verifying every page), prints its revision and key count.
//! - `load DIR`: writes with many concurrent writers until `--count` writes or killed, printing one
//!   line per acknowledged write (`ACK <writer> <n> <revision>`). The crash tests kill it mid-write
//!   and check every acknowledged write survived.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use bytes::Bytes;
use clap::{Parser, Subcommand};
use keel_store::embedded::{EmbeddedStore, Options};
use keel_store::{RangeRequest, Store, Txn, TxnOp};

#[derive(Debug, Parser)]
#[command(name = "keel-storeutl", about = "Offline tools for a keel-store data directory")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Open the data directory, verify it, print its revision and how many keys it holds.
    Check { data_dir: PathBuf },
    /// Write concurrently, printing every acknowledged write.
    Load {
        data_dir: PathBuf,
        #[arg(long, default_value_t = 64)]
        writers: usize,
        /// Writes per writer (0: until killed).
        #[arg(long, default_value_t = 0)]
        count: u64,
        #[arg(long, default_value = "/load/")]
        prefix: String,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        match cli.command {
            Command::Check { data_dir } => check(data_dir).await,
            Command::Load { data_dir, writers, count, prefix } => {
                load(data_dir, writers, count, prefix).await
            }
        }
    })
}

async fn check(data_dir: PathBuf) -> Result<()> {
    anyhow::ensure!(data_dir.is_dir(), "{} is not a directory", data_dir.display());
    // No scheduled compaction: checking should change as little as it can (a compaction an earlier run
    // left half-done is still finished by the open).
    let mut options = Options::new(&data_dir);
    options.compaction_interval = None;
    let store = EmbeddedStore::open(options)?;
    let revision = store.current_revision().await?;
    let keys = store.range(RangeRequest::prefix("/").count_only()).await?.count;
    println!("{}: revision {revision}, {keys} keys", data_dir.display());
    Ok(())
}

/// The value `load` writes for writer `w`'s `n`-th write, so a checker can recompute it.
fn load_value(w: usize, n: u64) -> String {
    format!("writer {w} write {n} {}", "x".repeat(64))
}

/// Each write is one transaction putting `<prefix>w<W>/<n>` and `<prefix>last/w<W>` = n: after a
/// crash the `last` key names a write that must itself be there (atomicity).
async fn load(data_dir: PathBuf, writers: usize, count: u64, prefix: String) -> Result<()> {
    let store = Arc::new(EmbeddedStore::open(Options::new(&data_dir))?);
    let stdout = Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (store, stdout, prefix) = (store.clone(), stdout.clone(), prefix.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0;
            while count == 0 || n < count {
                let txn = Txn::new().and_then([
                    TxnOp::put(format!("{prefix}w{w}/{n}"), Bytes::from(load_value(w, n))),
                    TxnOp::put(format!("{prefix}last/w{w}"), Bytes::from(n.to_string())),
                ]);
                let revision =
                    store.txn(txn).await.with_context(|| format!("writer {w} write {n}"))?.revision;
                let mut out = stdout.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                writeln!(out, "ACK {w} {n} {revision}")?;
                out.flush()?;
                n += 1;
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}
