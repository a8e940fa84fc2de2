//! The ibis-rs micro-benchmarks' shared parts: the report format every benchmark uses
//! (a table for people, `name value unit` lines for scripts), sample statistics, the
//! placement of two processes, a pool of two processes, and the baselines the
//! transports are measured against:
//!
//! - [`raw_shm`]: a plain spinning shared-memory ping-pong and stream between two
//!   processes, the raw limit of the shm transport;
//! - [`bare_ring`]: the shm transport's own rings between two processes with nothing
//!   above them, the floor its ring protocol sets;
//! - [`raw_tcp`]: a plain TCP socket, spinning or blocking, the raw limit of the tcp
//!   transport;
//! - [`raw_quic`]: a plain quinn (tokio) ping-pong and stream, the raw limit of the
//!   quic transport;
//! - [`mpi`]: Open MPI's compiler and launcher for the project's own MPI programs, the
//!   reference the users would pick instead;
//! - [`split_floor`]: fib on the owner's side of a split deque and nothing else, the
//!   floor under Satin's spawn and sync.

#![forbid(unsafe_code)]

pub mod bare_ring;
pub mod mpi;
pub mod pair;
pub mod placement;
pub mod raw_quic;
pub mod raw_shm;
pub mod raw_tcp;
pub mod segment;
pub mod spin;
pub mod split_floor;

use std::time::Duration;

/// One measured figure.
#[derive(Debug, Clone)]
pub struct Figure {
    /// Machine-readable name, e.g. `ipl.latency.inproc.1B.rtt_us`.
    pub name: String,
    /// The value.
    pub value: f64,
    /// Its unit, e.g. `us`.
    pub unit: &'static str,
    /// A human description for the table.
    pub what: String,
}

impl Figure {
    /// A figure named `name` (machine-readable), of `value` in `unit`, described as
    /// `what` in the table.
    pub fn new(
        name: impl Into<String>,
        value: f64,
        unit: &'static str,
        what: impl Into<String>,
    ) -> Figure {
        Figure {
            name: name.into(),
            value,
            unit,
            what: what.into(),
        }
    }
}

/// Prints figures as a table, then as `name value unit` lines.
pub fn report(title: &str, figures: &[Figure]) {
    println!("# {title}");
    let w = figures
        .iter()
        .map(|f| f.what.len())
        .max()
        .unwrap_or(10)
        .max(10);
    println!("{:<w$}  {:>12}  unit", "measurement", "value");
    for f in figures {
        println!("{:<w$}  {:>12.3}  {}", f.what, f.value, f.unit);
    }
    println!();
    for f in figures {
        println!("{} {:.3} {}", f.name, f.value, f.unit);
    }
}

/// Processes a benchmark started: those still running when it is dropped (a run that
/// failed half-way) are killed and reaped.
#[derive(Debug, Default)]
pub struct Children(pub Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// Summary statistics of round-trip samples.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    /// Median.
    pub median: Duration,
    /// Minimum.
    pub min: Duration,
    /// Mean.
    pub mean: Duration,
}

/// Computes median, minimum and mean of samples (which it sorts). Empty input gives zeros.
pub fn stats(samples: &mut [Duration]) -> Stats {
    if samples.is_empty() {
        return Stats {
            median: Duration::ZERO,
            min: Duration::ZERO,
            mean: Duration::ZERO,
        };
    }
    samples.sort_unstable();
    let total: Duration = samples.iter().sum();
    Stats {
        median: samples[samples.len() / 2],
        min: samples[0],
        mean: total / samples.len() as u32,
    }
}

/// The median of `v` (the upper one of an even count); 0 for no values.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// The capabilities of the benchmarks' port types: one-to-one connections, explicit
/// receives with a timeout, reliable FIFO communication, and `serialization`.
pub fn ping_pong_capabilities(serialization: ipl::PortCapabilities) -> ipl::PortCapabilities {
    use ipl::PortCapabilities as P;
    P::CONNECTION_ONE_TO_ONE
        | P::RECEIVE_EXPLICIT
        | P::RECEIVE_TIMEOUT
        | P::COMMUNICATION_RELIABLE
        | P::COMMUNICATION_FIFO
        | serialization
}

/// Ends a benchmark program: on an error, prints it after `program` on standard error
/// and exits with status 1.
pub fn exit_on_error<E: std::fmt::Display>(program: &str, result: Result<(), E>) {
    if let Err(e) = result {
        eprintln!("{program}: {e}");
        std::process::exit(1);
    }
}

/// A clap value parser for counts that must be at least 1 (`--repeat`, `--iters`, ...).
pub fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Microseconds as f64.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The README example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
