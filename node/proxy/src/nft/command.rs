//! An [`Apply`] edge through the `nft` binary (`nft -f -`, the script on stdin): one process per
//! transaction, which `nft` commits atomically. The comparison peer of the netlink edge, and a
//! fallback; every call pays `nft`'s cache load (0.14–0.4 s at 10k services, MACHINE.md).

use std::io::Write;
use std::process::{Command, Stdio};

use super::{Apply, Transaction};

/// Runs `nft -f -` (in the caller's network namespace).
#[derive(Debug, Clone)]
pub struct NftCommand {
    program: String,
}

impl Default for NftCommand {
    fn default() -> Self {
        NftCommand { program: "nft".to_owned() }
    }
}

/// Why `nft` did not commit a transaction.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The program could not be run or fed.
    #[error("run {program}: {source}")]
    Run { program: String, source: std::io::Error },
    /// `nft` refused the script.
    #[error("{program} -f - refused the transaction: {stderr}")]
    Refused { program: String, stderr: String },
}

impl NftCommand {
    /// Runs `program` instead of `nft` from PATH.
    pub fn with_program(program: impl Into<String>) -> NftCommand {
        NftCommand { program: program.into() }
    }
}

impl Apply for NftCommand {
    type Error = CommandError;

    fn apply(&mut self, transaction: &Transaction) -> Result<(), CommandError> {
        let run = |source| CommandError::Run { program: self.program.clone(), source };
        let mut child = Command::new(&self.program)
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(run)?;
        let script = transaction.to_string();
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(script.as_bytes()).map_err(run)?;
        }
        let output = child.wait_with_output().map_err(run)?;
        if output.status.success() {
            Ok(())
        } else {
            let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
            Err(CommandError::Refused { program: self.program.clone(), stderr })
        }
    }
}
