//! `cargo xtask bench NAME`: runs a benchmark program and, with `--record`, appends its figures to
//! docs/benchmarks.md.
//!
//! A benchmark is a Cargo bench target with `harness = false` in any workspace crate. It measures Keel
//! and a peer side by side in the same run and prints, as its last line,
//! `bench NAME: key=value ...` with its headline figures and ratios.

use std::fs;
use std::io::{BufRead, BufReader};
use std::process::Stdio;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::util;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The benchmark to run; without it, the available benchmarks are listed.
    pub name: Option<String>,
    /// Append the run (date, machine, command, figures) to docs/benchmarks.md.
    #[arg(long)]
    pub record: bool,
    /// Arguments passed to the benchmark program.
    #[arg(last = true)]
    pub extra: Vec<String>,
}

pub fn run(args: &Args) -> Result<()> {
    let benches = list()?;
    let Some(name) = &args.name else {
        println!("benchmarks (cargo xtask bench NAME [--record] [-- ARGS]):");
        for (package, bench) in &benches {
            println!("  {bench:<20} ({package})");
        }
        return Ok(());
    };
    let Some((package, _)) = benches.iter().find(|(_, bench)| bench == name) else {
        bail!(
            "no benchmark named {name}; there are: {}",
            benches.iter().map(|(_, b)| b.as_str()).collect::<Vec<_>>().join(", ")
        );
    };
    // Every benchmark measures Keel beside an upstream peer: build any that is missing first.
    crate::peers::ensure(&|_| true)?;
    let mut command = util::cargo();
    if name == "cni" {
        // keel-cni is measured as it ships: the static release build (see build.rs).
        command.env("KEEL_CNI_BIN", crate::build::static_cni()?);
    }
    if name == "proxy" {
        // keel-proxy and kube-proxy are fed by keel-apiserver's release binary.
        util::run(util::cargo().args([
            "build",
            "--release",
            "--locked",
            "-p",
            "keel-apiserver",
            "--bin",
            "keel-apiserver",
        ]))?;
        command.env("KEEL_APISERVER_BIN", util::workspace_root().join("target/release/keel-apiserver"));
    }
    if name == "kubelet" {
        // Both kubelets' sides as they ship: keel-kubelet, keel-shim and keel-apiserver release builds.
        util::run(util::cargo().args([
            "build",
            "--release",
            "--locked",
            "-p",
            "keel-kubelet",
            "--bin",
            "keel-kubelet",
            "-p",
            "keel-apiserver",
            "--bin",
            "keel-apiserver",
        ]))?;
        let release = util::workspace_root().join("target/release");
        command.env("KEEL_KUBELET_BIN", release.join("keel-kubelet"));
        command.env("KEEL_APISERVER_BIN", release.join("keel-apiserver"));
        command.env("KEEL_SHIM_BIN", crate::build::release_shim()?);
    }
    if name == "cri" {
        // keel-shim is measured as it ships: the release build.
        command.env("KEEL_SHIM_BIN", crate::build::release_shim()?);
    }
    command.args(["bench", "--locked", "--package", package, "--bench", name, "--"]).args(&args.extra);
    command.stdout(Stdio::piped());
    let shown = format!("cargo xtask bench {name}{}", extra_suffix(&args.extra));
    let mut child = command.spawn().with_context(|| format!("run `{}`", util::describe(&command)))?;
    let stdout = child.stdout.take().context("benchmark stdout")?;
    let mut headline = None;
    let marker = format!("bench {name}:");
    for line in BufReader::new(stdout).lines() {
        let line = line.context("read benchmark output")?;
        println!("{line}");
        if line.starts_with(&marker) {
            headline = Some(line);
        }
    }
    let status = child.wait().context("wait for the benchmark")?;
    if !status.success() {
        bail!("`{}` failed: {status}", util::describe(&command));
    }
    let Some(headline) = headline else {
        bail!("benchmark {name} printed no `{marker} ...` line");
    };
    if args.record {
        record(&shown, &headline)?;
    }
    Ok(())
}

fn extra_suffix(extra: &[String]) -> String {
    if extra.is_empty() { String::new() } else { format!(" -- {}", extra.join(" ")) }
}

/// (package, bench target) for every bench target in the workspace.
fn list() -> Result<Vec<(String, String)>> {
    let output = util::cargo()
        .args(["metadata", "--format-version", "1", "--no-deps", "--locked"])
        .output()
        .context("run cargo metadata")?;
    if !output.status.success() {
        bail!("cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    let metadata: Value = serde_json::from_slice(&output.stdout).context("parse cargo metadata")?;
    let mut benches = Vec::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        for target in package["targets"].as_array().into_iter().flatten() {
            let is_bench = target["kind"].as_array().is_some_and(|kinds| kinds.iter().any(|k| k == "bench"));
            if let (true, Some(name), Some(pkg)) =
                (is_bench, target["name"].as_str(), package["name"].as_str())
            {
                benches.push((pkg.to_owned(), name.to_owned()));
            }
        }
    }
    benches.sort();
    Ok(benches)
}

/// Adds a row at the end of the results table of docs/benchmarks.md.
fn record(command: &str, headline: &str) -> Result<()> {
    let path = util::workspace_root().join("docs/benchmarks.md");
    let date = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let figures = headline.split_once(": ").map_or(headline, |(_, figures)| figures);
    let row = format!("| {date} | {} | `{command}` | {figures} |", machine());
    let text = fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let updated = insert_result_row(&text, &row)
        .with_context(|| format!("{} has no `## Results` table to add the run to", path.display()))?;
    fs::write(&path, updated).with_context(|| format!("write {}", path.display()))?;
    println!("recorded in {}", path.display());
    Ok(())
}

/// `text` with `row` after the last row of the table under `## Results`.
fn insert_result_row(text: &str, row: &str) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let results = lines.iter().position(|l| l.trim() == "## Results")?;
    let table_start = results + lines[results..].iter().position(|l| l.starts_with('|'))?;
    let table_end = table_start + lines[table_start..].iter().take_while(|l| l.starts_with('|')).count();
    let mut out: Vec<&str> = lines[..table_end].to_vec();
    out.push(row);
    out.extend_from_slice(&lines[table_end..]);
    Some(out.join("\n") + "\n")
}

/// "N cores, CPU model, kernel": enough to tell machines apart in the results table.
fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cpus} cores, {model}, Linux {}", kernel.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_go_at_the_end_of_the_results_table_not_the_file() {
        let text = "# B\n\n## Results\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n### notes\n\ntext\n";
        let updated = insert_result_row(text, "| 3 | 4 |").unwrap();
        assert_eq!(
            updated,
            "# B\n\n## Results\n\n| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n\n### notes\n\ntext\n"
        );
        assert!(insert_result_row("no table\n", "| x |").is_none());
    }
}
