//! The ibis-rs example applications.
//!
//! - The Satin applications of thesis section 2.7 ([`fib`], [`nqueens`], [`integrate`],
//!   [`knapsack`], [`noverk`], [`primes`], [`matmul`], [`ida`]: IDA* on the
//!   15-puzzle), [`uts`], the Unbalanced Tree Search benchmark, [`sat`], a DPLL
//!   solver with speculative branches and abort, and [`othello`], alpha-beta
//!   game-tree search whose speculative children are aborted on a cutoff: each has a
//!   sequential version (the program with spawn/sync removed) and a Satin version
//!   (remote-capable jobs, registered with `#[satin::job]`). [`driver`] is the command line their binaries
//!   share (`fib 30 --check`, alone or under `ipl-run`).
//! - [`members`]: the RMI programs' start-up, members of an IPL pool as processes under
//!   a launcher or as threads of one process.
//!
//! Only the vector kernels of [`integrate`] use `unsafe` (processor-specific
//! instructions chosen at run time); the rest of the crate denies it.

#![deny(unsafe_code)]

#[macro_use]
pub mod output;
pub mod driver;
pub mod fib;
pub mod ida;
pub mod integrate;
pub mod knapsack;
pub mod matmul;
pub mod members;
pub mod noverk;
pub mod nqueens;
pub mod othello;
pub mod primes;
pub mod sat;
pub mod sine;
pub mod tsp;
pub mod tsplib;
pub mod uts;

/// The top-level README's examples (the IPL, Satin, RMI, replicated objects), compiled
/// and run as doc tests: this crate depends on every model they use.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct TopLevelReadmeDoctest;
