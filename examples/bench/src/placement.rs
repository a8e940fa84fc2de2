//! Where a two-process benchmark runs: left to the OS, split over two CPUs (one process
//! each), or both processes on one CPU. On a virtual machine the choice moves latencies
//! by an order of magnitude (a spinning peer on the same CPU waits for a time slice; a
//! sleeping one on the other CPU takes 11-12 us to wake), so benchmarks say which they
//! measured.

use std::io;

/// A placement of the measuring process and its peer (`--pin os|split|same`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Placement {
    /// The OS places (and moves) every thread.
    Os,
    /// The measuring process on CPU 0, its peer on CPU 1 (every thread of each).
    Split,
    /// Both processes on CPU 0.
    Same,
}

impl Placement {
    /// Parses `os`, `split` or `same`.
    pub fn parse(s: &str) -> Option<Placement> {
        match s {
            "os" => Some(Placement::Os),
            "split" => Some(Placement::Split),
            "same" => Some(Placement::Same),
            _ => None,
        }
    }

    /// The name `parse` accepts.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Os => "os",
            Placement::Split => "split",
            Placement::Same => "same",
        }
    }

    /// The CPU of the measuring process (`measuring`) or of its peer; `None`: the OS's
    /// choice.
    pub fn cpu(self, measuring: bool) -> Option<usize> {
        match self {
            Placement::Os => None,
            Placement::Split => Some(if measuring { 0 } else { 1 }),
            Placement::Same => Some(0),
        }
    }

    /// A description for report headers.
    pub fn describe(self) -> &'static str {
        match self {
            Placement::Os => "placed by the OS",
            Placement::Split => "pinned one process per CPU (CPU 0 and CPU 1)",
            Placement::Same => "both processes pinned to CPU 0",
        }
    }

    /// Pins the calling thread, and so every thread it starts afterwards (and every
    /// child process it spawns, until that re-pins itself), to this placement's CPU for
    /// the measuring process or its peer. Call it before any thread starts.
    pub fn apply(self, measuring: bool) -> io::Result<()> {
        let Some(cpu) = self.cpu(measuring) else {
            return Ok(());
        };
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).map_err(|e| {
            io::Error::other(format!(
                "placement {} needs CPU {cpu}, which cannot be used here: {e}",
                self.name()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_cpus_follow_the_placement() {
        for p in [Placement::Os, Placement::Split, Placement::Same] {
            assert_eq!(Placement::parse(p.name()), Some(p));
        }
        assert_eq!(Placement::parse("both"), None);
        assert_eq!(Placement::Split.cpu(true), Some(0));
        assert_eq!(Placement::Split.cpu(false), Some(1));
        assert_eq!(Placement::Same.cpu(false), Some(0));
        assert_eq!(Placement::Os.cpu(true), None);
    }

    #[test]
    fn pinning_moves_this_thread_to_the_cpu() {
        // In a thread of its own, so that the test harness's other threads keep theirs.
        std::thread::spawn(|| {
            Placement::Same.apply(true).unwrap();
            let set = rustix::thread::sched_getaffinity(None).unwrap();
            assert!(set.is_set(0));
            assert_eq!(set.count(), 1);
        })
        .join()
        .unwrap();
    }
}
