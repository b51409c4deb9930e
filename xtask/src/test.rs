//! `cargo xtask test`: THE test command (README, .ci/run).
//!
//! deps → sweep leftovers of crashed runs → fmt check → clippy → every unit and root integration test
//! (cargo-nextest, one process per test) → doctests (nextest does not run them) → no test left a
//! namespace or process behind → the machine's own network namespace is unchanged. Every step runs even when an earlier one failed, so one run says
//! everything; the exit code is non-zero when any failed.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use keel_testbed::host_state::HostNetState;

use crate::{deps, util};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run only tests whose name matches (nextest filter); fmt and clippy are skipped then.
    pub filter: Vec<String>,
    /// Skip installing prerequisites (only check them).
    #[arg(long)]
    pub no_install: bool,
}

struct Step {
    name: &'static str,
    outcome: Result<String>,
    took: Duration,
}

pub fn run(args: &Args) -> Result<()> {
    let started = Instant::now();
    let mut steps = Vec::new();
    let mut step = |name: &'static str, f: &mut dyn FnMut() -> Result<String>| {
        eprintln!("\n==> {name}");
        let begun = Instant::now();
        let outcome = f();
        if let Err(err) = &outcome {
            eprintln!("--> {name} FAILED: {err:#}");
        }
        steps.push(Step { name, outcome, took: begun.elapsed() });
    };

    step("deps", &mut || deps::ensure(args.no_install, deps::Peers::Needed).map(|()| "present".into()));
    if !util::is_root() {
        let message = "the root integration tests need root (network namespaces, mounts): run as root";
        if util::under_ci() {
            bail!("{message}");
        }
        eprintln!("warning: {message}");
    }
    let before = HostNetState::capture();
    step("sweep", &mut || {
        let removed = keel_testbed::sweep(keel_testbed::Sweep::All);
        Ok(if removed.is_empty() {
            "nothing left by earlier runs".into()
        } else {
            format!("removed {}", removed.join(", "))
        })
    });

    let filtered = !args.filter.is_empty();
    let mut counts = TestCounts::default();
    if !filtered {
        step("fmt", &mut || {
            util::run(util::cargo().args(["fmt", "--all", "--", "--check"])).map(|()| "clean".into())
        });
        step("clippy", &mut || {
            util::run(util::cargo().args([
                "clippy",
                "--workspace",
                "--all-targets",
                "--locked",
                "--",
                "-D",
                "warnings",
            ]))
            .map(|()| "clean".into())
        });
    }
    step("tests", &mut || {
        counts = nextest(&args.filter)?;
        if counts.failed > 0 {
            bail!("{} of {} tests failed", counts.failed, counts.run);
        }
        Ok(format!("{} run: {} passed, {} skipped", counts.run, counts.passed, counts.skipped))
    });
    if !filtered {
        step("doctests", &mut || {
            util::run(util::cargo().args(["test", "--workspace", "--doc", "--locked", "--quiet"]))
                .map(|()| "pass".into())
        });
    }
    step("no leftovers", &mut || leftovers().map(|()| "no test namespace or process remains".into()));
    step("host namespace unchanged", &mut || {
        let before = before.as_ref().map_err(|err| anyhow::anyhow!("{err:#}"))?;
        match HostNetState::capture()?.diff(before) {
            None => Ok("links, addresses, routes, rules, nft ruleset as before".into()),
            Some(diff) => bail!("the machine's own network namespace changed during the tests:\n{diff}"),
        }
    });

    eprintln!("\n==> summary ({:.0?} in all)", started.elapsed());
    let mut failed_steps = 0;
    for step in &steps {
        let (verdict, detail) = match &step.outcome {
            Ok(detail) => ("ok", detail.clone()),
            Err(err) => {
                failed_steps += 1;
                ("FAILED", format!("{err:#}").lines().next().unwrap_or_default().to_owned())
            }
        };
        eprintln!("  {:<26} {:<6} {:>7.1}s  {detail}", step.name, verdict, step.took.as_secs_f64());
    }
    // The closing line CI reads: tests, plus each check step counted as one (and a test step that
    // failed without a failing test — a build error, a cut-short run — as one failure).
    let checks = steps.iter().filter(|s| s.name != "tests").count();
    let failed_checks = steps.iter().filter(|s| s.name != "tests" && s.outcome.is_err()).count();
    let tests_broken = steps.iter().any(|s| s.name == "tests" && s.outcome.is_err()) && counts.failed == 0;
    println!(
        "keel: {} passed, {} failed",
        counts.passed + checks - failed_checks,
        counts.failed + failed_checks + usize::from(tests_broken)
    );
    if failed_steps > 0 {
        bail!("{failed_steps} step(s) failed");
    }
    Ok(())
}

#[derive(Debug, Default, Clone, Copy)]
struct TestCounts {
    run: usize,
    passed: usize,
    failed: usize,
    skipped: usize,
}

/// Runs cargo-nextest over the workspace, echoing its output, and reads its summary line.
fn nextest(filter: &[String]) -> Result<TestCounts> {
    let mut command = util::cargo();
    command.args(["nextest", "run", "--workspace", "--locked", "--no-fail-fast"]).args(filter);
    command.env("RUST_BACKTRACE", "1").stderr(Stdio::piped());
    let mut child = command.spawn().with_context(|| format!("run `{}`", util::describe(&command)))?;
    let stderr = child.stderr.take().context("nextest stderr")?;
    let mut counts = None;
    for line in BufReader::new(stderr).lines() {
        let line = line.context("read nextest output")?;
        eprintln!("{line}");
        if let Some(found) = parse_summary(&line) {
            counts = Some(found);
        }
    }
    let status = child.wait().context("wait for nextest")?;
    let Some(counts) = counts else {
        bail!("nextest exited with {status} without a summary (the build failed?)");
    };
    // A run cut short, or a filter that matched nothing, is a failure even when no test failed.
    if !status.success() && counts.failed == 0 {
        bail!("nextest exited with {status} after {} tests ({} passed)", counts.run, counts.passed);
    }
    Ok(counts)
}

/// Reads nextest's `Summary [ 1.2s] 12 tests run: 11 passed, 1 failed, 0 skipped` line.
fn parse_summary(line: &str) -> Option<TestCounts> {
    let line = line.trim_start();
    if !line.starts_with("Summary") {
        return None;
    }
    let (before, after) = line.split_once(" run: ")?;
    let run = before.split_whitespace().rev().nth(1)?.split('/').next()?.parse().ok()?;
    let mut counts = TestCounts { run, ..TestCounts::default() };
    for part in after.split(", ") {
        let mut words = part.split_whitespace();
        let n: usize = words.next()?.parse().ok()?;
        match words.next()? {
            "passed" => counts.passed += n,
            "skipped" => counts.skipped += n,
            // failed, timed out, leaky, exec fail: everything else is a failure.
            _ => counts.failed += n,
        }
    }
    Some(counts)
}

/// Fails when the tests left anything behind (test namespaces, fixture processes, power-loss mounts,
/// `up` state): every test process has exited, so whatever the sweep finds now was leaked. It is removed,
/// and named in the failure.
fn leftovers() -> Result<()> {
    let removed = keel_testbed::sweep(keel_testbed::Sweep::All);
    if !removed.is_empty() {
        bail!("tests left these behind (removed now): {}", removed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nextest_summaries_are_read() {
        let c = parse_summary("     Summary [   1.392s] 12 tests run: 12 passed, 0 skipped").unwrap();
        assert_eq!((c.run, c.passed, c.failed, c.skipped), (12, 12, 0, 0));
        let c =
            parse_summary("     Summary [   0.190s] 8/12 tests run: 7 passed, 1 failed, 0 skipped").unwrap();
        assert_eq!((c.run, c.passed, c.failed, c.skipped), (8, 7, 1, 0));
        let c =
            parse_summary("Summary [ 9.0s] 5 tests run: 3 passed, 1 timed out, 1 failed, 2 skipped").unwrap();
        assert_eq!((c.run, c.passed, c.failed, c.skipped), (5, 3, 2, 2));
        assert!(parse_summary("PASS [ 0.1s] x").is_none());
    }
}
