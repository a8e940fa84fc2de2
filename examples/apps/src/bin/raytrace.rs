//! A Whitted raytracer of the SPD "balls" scene (the sphereflake) to a PNG file.
//!
//! `raytrace --size N --width W --height H --output FILE.png [--block B] [--workers N] [--seq] [--check] [--stats] [--policy P] [--report FILE]`
//! (`--help` for the details).
//!
//! Under `ipl-run` every process joins the pool: the elected master runs the root job,
//! the others steal from it (`--policy` or `SATIN_POLICY`: rs, crs, ...), and the master
//! prints the result and every member's statistics and writes the image (see
//! `ibis_apps::driver` and `satin::dist`).

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    ibis_apps::driver::main::<ibis_apps::driver::RaytraceArgs>()
}
