//! Barnes-Hut N-body simulation: the bodies as a Satin shared object, updated once per
//! iteration (stolen jobs wait on their guard until their iteration's positions are
//! there), or sent with every job that leaves its process (`--no-shared`).
//!
//! `barnes [--bodies N] [--iterations I] [--seed S] [--leaf L] [--no-shared] [--workers N] [--seq] [--check] [--stats] [--policy P] [--report FILE]`
//! (`--help` for the details).
//!
//! Under `ipl-run` every process joins the pool and makes its copy of the bodies; the
//! elected master runs the simulation, the others steal force computations from it,
//! and the master prints the result and every member's statistics (bytes sent among
//! them: compare `--no-shared`).

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    ibis_apps::driver::main::<ibis_apps::driver::BarnesArgs>()
}
