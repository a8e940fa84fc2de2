//! n over k by Pascal's recursion.
//!
//! `noverk N K [--workers N] [--seq] [--check] [--stats]` (default 33 16)
//!
//! Under `ipl-run` every process joins the pool: the elected master runs the root job,
//! the others steal from it (`SATIN_POLICY=rs|crs`), and the master prints the result
//! and every member's statistics (see `satin::app` and `satin::dist`).

fn main() {
    std::process::exit(satin::app::main_for("noverk"));
}
