//! The product of two random N x N matrices (N = 64 * 2^k) by recursive blocks;
//! prints the sum of its elements, `--check` compares its bits.
//!
//! `matmul [N] [--workers N] [--seq] [--check] [--stats] [--policy P] [--report FILE]`
//! (default 1024; `--help` for the details).
//!
//! Under `ipl-run` every process joins the pool: the elected master runs the root job,
//! the others steal from it (`--policy` or `SATIN_POLICY`: rs, crs, ...), and the master
//! prints the result and every member's statistics (see `ibis_apps::driver` and
//! `satin::dist`).

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    ibis_apps::driver::main::<ibis_apps::driver::MatMulArgs>()
}
