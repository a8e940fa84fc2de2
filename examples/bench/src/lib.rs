//! The ibis-rs micro-benchmarks' shared parts: the report format every benchmark uses
//! (a table for people, `name value unit` lines for scripts), sample statistics, the
//! placement of two processes, and a pool of two processes.

pub mod pair;
pub mod placement;

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

/// Microseconds as f64.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The README example, compiled and run as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctest;
