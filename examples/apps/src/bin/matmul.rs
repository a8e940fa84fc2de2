//! Matrix multiplication by quadrant recursion (N = 64 * 2^k).
//!
//! `matmul N [--workers N] [--seq] [--check] [--stats]` (default 1024); prints a
//! checksum of C.
//!
//! Under `ipl-run` every process joins the pool: the elected master runs the root job,
//! the others steal from it (`SATIN_POLICY=rs|crs`), and the master prints the result
//! and every member's statistics (see `satin::app` and `satin::dist`).

fn main() {
    std::process::exit(satin::app::main_for("matmul"));
}
