//! The best value of a 0/1 knapsack of N generated items.
//!
//! `knapsack [N] [--workers N] [--seq] [--check] [--stats] [--policy P] [--report FILE]`
//! (default 32; `--help` for the details).
//!
//! Under `ipl-run` every process joins the pool: the elected master runs the root job,
//! the others steal from it (`--policy` or `SATIN_POLICY`: rs, crs, ...), and the master
//! prints the result and every member's statistics (see `ibis_apps::driver` and
//! `satin::dist`).

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    ibis_apps::driver::main::<ibis_apps::driver::KnapsackArgs>()
}
