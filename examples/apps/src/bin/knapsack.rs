//! 0/1 knapsack over N deterministic pseudo-random items, capacity half their weight.
//!
//! `knapsack N [--workers N] [--seq] [--check] [--stats]` (default N = 32)
//!
//! Under `ipl-run` every process joins the pool: the elected master runs the root job,
//! the others steal from it (`SATIN_POLICY=rs|crs`), and the master prints the result
//! and every member's statistics (see `satin::app` and `satin::dist`).

fn main() {
    std::process::exit(satin::app::main_for("knapsack"));
}
