//! The ibis-rs example applications.
//!
//! - The Satin applications of thesis section 2.7 ([`fib`], [`nqueens`], [`integrate`],
//!   [`knapsack`], [`noverk`], [`primes`], [`matmul`], [`ida`]: IDA* on the
//!   15-puzzle), [`uts`], the Unbalanced Tree Search benchmark, [`sat`], a DPLL
//!   solver with speculative branches and abort, [`othello`], alpha-beta game-tree
//!   search whose speculative children are aborted on a cutoff, [`raytrace`], a
//!   Whitted raytracer of the SPD sphereflake ([`sphereflake`], [`vec3`]) writing PNG
//!   files, [`setcover`], the minimum-cost set cover by branch and bound on
//!   OR-Library files ([`scp`]), and [`barnes`], Barnes-Hut with the bodies as a
//!   Satin shared object or as job parameters: each has a sequential version
//!   (the program with spawn/sync removed) and a Satin version (remote-capable jobs,
//!   registered with `#[satin::job]`). [`driver`] is the command line their binaries
//!   share (`fib 30 --check`, alone or under `ipl-run`).
//! - [`members`]: the RMI programs' start-up, members of an IPL pool as processes under
//!   a launcher or as threads of one process.
//!
//! Only the vector kernels of [`integrate`] use `unsafe` (processor-specific
//! instructions chosen at run time); the rest of the crate denies it.

#![deny(unsafe_code)]

#[macro_use]
pub mod output;
pub mod barnes;
pub mod bound;
pub mod driver;
pub mod fib;
pub mod ida;
pub mod input;
pub mod integrate;
pub mod knapsack;
pub mod matmul;
pub mod members;
pub mod noverk;
pub mod nqueens;
pub mod othello;
pub mod primes;
pub mod problems;
pub mod raytrace;
pub mod sat;
pub mod scp;
pub mod setcover;
pub mod sine;
pub mod sphereflake;
pub mod tsp;
pub mod tsplib;
pub mod uts;
pub mod vec3;

/// The top-level README's examples (the IPL, Satin, RMI, replicated objects), compiled
/// and run as doc tests: this crate depends on every model they use.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct TopLevelReadmeDoctest;
