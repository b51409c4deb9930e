//! Keel's CRI conformance suite, modelled on critest's validation groups: each group is an async
//! function over a [`CriClient`] returning one [`CaseResult`] per case, so the same group runs against
//! keel-shim and against containerd (the reference). Where the reference itself differs from what a
//! case asserts, the test lists it as a [`KnownDifference`] with the reason; [`check`] then requires
//! that case to fail (so the list stays true) and every other case to pass.
//!
//! Groups: [`runtime_info`] (Version, Status, RuntimeConfig, UpdateRuntimeConfig). To come: sandbox,
//! container, exec, logs, image, idempotence, networking, streaming, multi-container.

#![allow(dead_code, reason = "each test binary uses a part of the suite")]

pub mod runtime_info;

#[allow(unused_imports, reason = "each test binary uses a part of the suite")]
pub use keel_testbed::cri::{CriClient, api};

/// The outcome of one case of a group.
#[derive(Debug)]
pub struct CaseResult {
    /// The group, such as `runtime info`.
    pub group: &'static str,
    /// The case, unique in its group.
    pub case: &'static str,
    /// `Err` says what the runtime answered instead.
    pub outcome: Result<(), String>,
}

/// A case a runtime is known to fail, and why (documented data, not a weakened assertion).
#[derive(Debug, Clone, Copy)]
pub struct KnownDifference {
    /// The case's name.
    pub case: &'static str,
    /// Why the runtime answers otherwise.
    pub reason: &'static str,
}

/// Fails, listing every offending case, unless exactly the cases of `known` failed.
pub fn check(runtime: &str, results: &[CaseResult], known: &[KnownDifference]) -> Result<(), String> {
    let mut problems = Vec::new();
    for result in results {
        let expected = known.iter().find(|k| k.case == result.case);
        // The whole table in the test's output, as critest prints its cases.
        match (&result.outcome, expected) {
            (Ok(()), _) => eprintln!("{runtime}: [{}] {}: ok", result.group, result.case),
            (Err(e), _) => eprintln!("{runtime}: [{}] {}: FAILED: {e}", result.group, result.case),
        }
        match (&result.outcome, expected) {
            (Ok(()), None) | (Err(_), Some(_)) => {}
            (Err(e), None) => problems.push(format!("[{}] {}: {e}", result.group, result.case)),
            (Ok(()), Some(k)) => problems.push(format!(
                "[{}] {}: passes, but is listed as a known difference ({}): update the list",
                result.group, result.case, k.reason
            )),
        }
    }
    for k in known {
        if !results.iter().any(|r| r.case == k.case) {
            problems.push(format!("known difference {:?} names no case that ran", k.case));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{runtime}: {} case(s) differ from the suite:\n{}", problems.len(), problems.join("\n")))
    }
}

/// Fails with `message` unless `condition` holds.
pub fn ensure(condition: bool, message: impl FnOnce() -> String) -> Result<(), String> {
    if condition { Ok(()) } else { Err(message()) }
}
