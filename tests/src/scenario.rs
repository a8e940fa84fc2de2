//! The end of a pool-check member: it prints `SCENARIO: ok` or `SCENARIO: FAILED: why`
//! (the launcher collects the lines) and exits 0 or 1.

use std::error::Error;
use std::process::ExitCode;

/// Prints the outcome of `scenario` and turns it into the exit status.
pub fn report(scenario: &str, outcome: Result<(), Box<dyn Error>>) -> ExitCode {
    match outcome {
        Ok(()) => {
            println!("{scenario}: ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("{scenario}: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
