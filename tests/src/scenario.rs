//! The command line and the end of a pool-check member: `PROGRAM SCENARIO` (with
//! `--help`), then `SCENARIO: ok` or `SCENARIO: FAILED: why` on stdout (the launcher
//! collects the lines) and exit status 0 or 1.

use std::error::Error;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};

/// The arguments every pool check takes.
#[derive(Parser)]
struct Args {
    /// The scenario to run (see the program's documentation).
    scenario: String,
}

/// A pool check's `main`: sets up logging, parses the command line of `program` (whose
/// scenarios are `scenarios`; anything else is a usage error), runs the scenario and
/// reports its outcome.
pub fn main(
    program: &'static str,
    about: &'static str,
    scenarios: &'static [&'static str],
    run: impl FnOnce(&str) -> Result<(), Box<dyn Error>>,
) -> ExitCode {
    ipl_tools::init_tracing("warn");
    let matches = Args::command()
        .name(program)
        .about(about)
        .mut_arg("scenario", |a| a.value_parser(scenarios.to_vec()))
        .get_matches();
    let Args { scenario } = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    report(&scenario, run(&scenario))
}

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
