//! IPL command-line tools.
//!
//! * `ipl-server`: a standalone registry server ([`ipl_registry::RegistryServer`]).
//! * `ipl-run`: starts a registry in-process and launches a pool of N
//!   processes wired to it through environment variables ([`launcher`]), or has a
//!   cluster's launcher (`srun`, `mpirun`, `mpiexec`) start them
//!   ([`cluster_launcher`]).
//!
//! The binaries are thin; the logic lives here so that it can be tested and
//! reused: [`launcher::launch`] is `ipl-run`, [`launcher::PoolEnv`] is what a
//! launched process reads back.

#![forbid(unsafe_code)]

pub mod cluster_launcher;
pub mod control;
pub mod launcher;

/// Sets up `tracing` output on stderr: `RUST_LOG` if set, else `default`
/// (e.g. `"info"`). Does nothing if a subscriber is already installed.
pub fn init_tracing(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
