//! Othello game-tree search: the value of a position to a depth by alpha-beta, its children after the first searched speculatively and aborted on a cutoff.
//!
//! `othello [FILE | --position TEXT] [--depth D] [--spawn-depth S] [--no-abort] [--workers N] [--seq] [--check] [--stats] [--policy P] [--report FILE]`
//! (`--help` for the details).
//!
//! Under `ipl-run` every process joins the pool: the elected master runs the root job,
//! the others steal from it (`--policy` or `SATIN_POLICY`: rs, crs, ...), and the master
//! prints the result and every member's statistics (see `ibis_apps::driver` and
//! `satin::dist`).

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    ibis_apps::driver::main::<ibis_apps::driver::OthelloArgs>()
}
