//! Adaptive integration of f(x) = 0.1 x sin(x) over [A, B] to tolerance EPS.
//!
//! `integrate A B EPS [--workers N] [--seq] [--check] [--stats]`
//! (default 0 100000 1e-6); `--check` compares the bits of the two results.
//!
//! Under `ipl-run` every process joins the pool: the elected master runs the root job,
//! the others steal from it (`SATIN_POLICY=rs|crs`), and the master prints the result
//! and every member's statistics (see `satin::app` and `satin::dist`).

fn main() {
    std::process::exit(satin::app::main_for("integrate"));
}
