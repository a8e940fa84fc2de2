//! The Satin applications of thesis section 2.7 that the examples and tests share:
//! each has a sequential version (the program with spawn/sync removed) and a Satin
//! version (remote-capable jobs, registered with `#[satin::job]`).

pub mod fib;
pub mod integrate;
pub mod knapsack;
pub mod matmul;
pub mod noverk;
pub mod nqueens;
pub mod primes;
pub mod sine;
