//! Travelling salesperson, branch and bound, with the global bound as a RepMI replicated
//! object (thesis 2.7.7 and figure 5.4).
//!
//! `tsp-repmi [N] [--members P] [--seed S] [--depth D] [--read-every R] [--seq] [--check]`
//! (defaults N = 13 cities, P = 4 members, S = 1, D = 3, R = 16; `--help`)
//!
//! The cities are random points (from the seed) on a 1000 x 1000 grid with rounded
//! Euclidean distances; tours start and end in city 0. The search space is split into
//! jobs, one per route prefix of D cities. The replicated object `Search` holds the best
//! tour length found so far *and* the job counter: a member takes its next job with a
//! totally ordered write (a fetch-and-add that every replica applies in the same
//! order, so no job is given twice), reads the bound locally for every pruning
//! decision (every R search nodes; R = 1 reads it at every node as thesis figure 5.4
//! does), and writes a better bound when it completes a shorter tour (the
//! non-deterministic version: the bound starts unknown).
//!
//! Runs in this process with P Ibis instances (default, one command), or under
//! `ipl-run -n P -- tsp-repmi ...` with one member per process (member 0 prints). `--seq` runs
//! the sequential search only; `--check` runs both and fails (exit 1) unless the optimal
//! lengths are equal.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::builder::RangedU64ValueParser;
use clap::Parser;
use ibis_apps::members::{
    exit_code, in_process, mix, positive, rank_of, replicated_builder, under_ipl_run, Res,
};
use ibis_repmi::{Options, Replica, Replicated};
use ipl::Ibis;
use serde::{Deserialize, Serialize};

const WAIT: Duration = Duration::from_secs(600);

/// The problem: distances, each city's neighbours nearest first, and each city's
/// cheapest outgoing edge (for the lower bound).
struct Problem {
    n: usize,
    dist: Vec<Vec<u32>>,
    near: Vec<Vec<usize>>,
    min_out: Vec<u32>,
}

impl Problem {
    fn new(n: usize, seed: u64) -> Self {
        let pts: Vec<(f64, f64)> = (0..n as u64)
            .map(|i| {
                let r = mix(seed ^ mix(i));
                ((r % 1000) as f64, ((r >> 20) % 1000) as f64)
            })
            .collect();
        let dist: Vec<Vec<u32>> = pts
            .iter()
            .map(|a| {
                pts.iter()
                    .map(|b| ((a.0 - b.0).hypot(a.1 - b.1)).round() as u32)
                    .collect()
            })
            .collect();
        let near = (0..n)
            .map(|c| {
                let mut v: Vec<usize> = (0..n).filter(|&o| o != c).collect();
                v.sort_by_key(|&o| (dist[c][o], o));
                v
            })
            .collect();
        let min_out = (0..n)
            .map(|c| {
                (0..n)
                    .filter(|&o| o != c)
                    .map(|o| dist[c][o])
                    .min()
                    .unwrap_or(0)
            })
            .collect();
        Problem {
            n,
            dist,
            near,
            min_out,
        }
    }

    /// Depth-first branch and bound below a partial route ending in `last`, which has
    /// visited the cities in `visited`. `bound()` is the best known length; `found` is
    /// told about shorter complete tours and returns the new bound.
    fn search(
        &self,
        last: usize,
        visited: u64,
        length: u32,
        rest_min: u32,
        bound: &mut dyn FnMut() -> u32,
        found: &mut dyn FnMut(u32) -> u32,
    ) -> u64 {
        // Every remaining city, and `last`, must still be left once.
        if length + rest_min + self.min_out[last] >= bound() {
            return 1;
        }
        let mut nodes = 1;
        if visited.count_ones() as usize == self.n {
            let tour = length + self.dist[last][0];
            if tour < bound() {
                found(tour);
            }
            return nodes;
        }
        for &c in &self.near[last] {
            if visited & (1 << c) == 0 {
                nodes += self.search(
                    c,
                    visited | (1 << c),
                    length + self.dist[last][c],
                    rest_min - self.min_out[c],
                    bound,
                    found,
                );
            }
        }
        nodes
    }

    fn all_min(&self, visited: u64) -> u32 {
        (0..self.n)
            .filter(|c| visited & (1 << c) == 0)
            .map(|c| self.min_out[c])
            .sum()
    }

    /// The jobs: every route prefix 0, c1, .., c(depth-1) of distinct cities, shortest
    /// first.
    fn jobs(&self, depth: usize) -> Vec<Vec<usize>> {
        let mut out = vec![vec![0]];
        for _ in 1..depth.clamp(1, self.n) {
            out = out
                .into_iter()
                .flat_map(|p| {
                    (1..self.n)
                        .filter(|c| !p.contains(c))
                        .map(|c| {
                            let mut q = p.clone();
                            q.push(c);
                            q
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
        }
        // Shortest prefixes first: good tours (and a tight bound) come early.
        out.sort_by_key(|p| p.windows(2).map(|w| self.dist[w[0]][w[1]]).sum::<u32>());
        out
    }

    /// Searches below one prefix.
    fn search_prefix(
        &self,
        prefix: &[usize],
        bound: &mut dyn FnMut() -> u32,
        found: &mut dyn FnMut(u32) -> u32,
    ) -> u64 {
        let visited = prefix.iter().fold(0u64, |v, &c| v | (1 << c));
        let length = prefix.windows(2).map(|w| self.dist[w[0]][w[1]]).sum();
        let last = *prefix.last().unwrap_or(&0);
        self.search(last, visited, length, self.all_min(visited), bound, found)
    }

    fn sequential(&self) -> (u32, u64) {
        let best = std::cell::Cell::new(u32::MAX);
        let nodes = self.search_prefix(&[0], &mut || best.get(), &mut |t| {
            best.set(t);
            t
        });
        (best.get(), nodes)
    }
}

/// The replicated search state: the global minimum (figure 5.4) and the job counter.
#[derive(Serialize, Deserialize)]
struct Search {
    best: u32,
    next_job: u32,
    finished: u32,
    improvements: u32,
}

#[derive(Serialize, Deserialize)]
enum SearchOp {
    /// `set(new_val)`: keep the smaller. Returns the bound after it.
    Improve(u32),
    /// Take the next job. Returns its number.
    TakeJob,
    /// This member has no more jobs. Returns how many members are finished.
    Finished,
}

impl Replicated for Search {
    type Op = SearchOp;
    type Output = u32;
    fn apply(&mut self, op: &SearchOp) -> u32 {
        match op {
            SearchOp::Improve(v) => {
                if *v < self.best {
                    self.best = *v;
                    self.improvements += 1;
                }
                self.best
            }
            SearchOp::TakeJob => {
                self.next_job += 1;
                self.next_job - 1
            }
            SearchOp::Finished => {
                self.finished += 1;
                self.finished
            }
        }
    }
}

struct MemberOut {
    best: u32,
    nodes: u64,
    jobs: u64,
    improvements: u32,
    secs: f64,
}

fn member(
    ibis: &Ibis,
    size: usize,
    prob: &Problem,
    depth: usize,
    read_every: u32,
) -> Res<MemberOut> {
    let opts = Options::default().timeout(Duration::from_secs(120));
    let search = Replica::join_with(
        ibis,
        "tsp",
        || Search {
            best: u32::MAX,
            next_job: 0,
            finished: 0,
            improvements: 0,
        },
        opts,
    )?;
    let jobs = prob.jobs(depth);
    let start = Instant::now();
    let (mut nodes, mut taken) = (0u64, 0u64);
    let mut failure = None;
    let cache = std::cell::Cell::new((u32::MAX, 0u32));
    loop {
        let j = search.write(SearchOp::TakeJob)? as usize;
        let Some(prefix) = jobs.get(j) else { break };
        taken += 1;
        nodes += prob.search_prefix(
            prefix,
            &mut || {
                // A local read of the replica every `read_every` nodes; a bound that is a
                // little stale only prunes less (it never grows).
                let (bound, left) = cache.get();
                if left == 0 {
                    let b = search.read(|s| s.best);
                    cache.set((b, read_every - 1));
                    b
                } else {
                    cache.set((bound, left - 1));
                    bound
                }
            },
            &mut |t| match search.write(SearchOp::Improve(t)) {
                Ok(b) => {
                    cache.set((b, read_every - 1));
                    b
                }
                Err(e) => {
                    failure.get_or_insert(e);
                    t
                }
            },
        );
        if let Some(e) = failure.take() {
            return Err(e.into());
        }
    }
    search.write(SearchOp::Finished)?;
    // Every member's improvements are ordered before its Finished.
    search.wait_for(|s| s.finished as usize >= size, WAIT)?;
    let secs = start.elapsed().as_secs_f64();
    let (best, improvements) = search.read(|s| (s.best, s.improvements));
    // Nobody leaves (and takes the sequencer away) before everybody has read the result.
    search.write(SearchOp::Finished)?;
    search.wait_for(|s| s.finished as usize >= 2 * size, WAIT)?;
    Ok(MemberOut {
        best,
        nodes,
        jobs: taken,
        improvements,
        secs,
    })
}

/// Travelling salesperson by branch and bound; the global bound and the job counter are
/// a replicated object (RepMI).
#[derive(Parser)]
#[command(name = "tsp-repmi")]
struct Args {
    /// Cities (2 to 63).
    #[arg(default_value_t = 13, value_parser = RangedU64ValueParser::<usize>::new().range(2..=63))]
    n: usize,
    /// Members, as threads of this process (under ipl-run the pool is the members).
    #[arg(long, default_value_t = 4, value_parser = positive)]
    members: usize,
    /// Seed of the random cities.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Cities in a job's route prefix.
    #[arg(long, default_value_t = 3)]
    depth: usize,
    /// Search nodes between two reads of the bound (0 counts as 1).
    #[arg(long, default_value_t = 16)]
    read_every: u32,
    /// Run the sequential search only.
    #[arg(long = "seq")]
    seq_only: bool,
    /// Also run the sequential search and fail unless the optimal lengths are equal.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    ipl_tools::init_tracing("warn");
    let mut args = Args::parse();
    args.read_every = args.read_every.max(1);
    exit_code("tsp-repmi", run(args))
}

fn run(a: Args) -> Res<bool> {
    let prob = Problem::new(a.n, a.seed);
    let seq = if a.seq_only || a.check {
        let t = Instant::now();
        let (best, nodes) = prob.sequential();
        let secs = t.elapsed().as_secs_f64();
        ibis_apps::out!(
            "tsp n={} seed={} sequential: shortest tour {best} ({nodes} nodes) time {secs:.3} s",
            a.n,
            a.seed
        );
        ibis_apps::out!("tsp_seq_time {secs:.6} s");
        Some(best)
    } else {
        None
    };
    if a.seq_only {
        return Ok(true);
    }
    let pooled = under_ipl_run();
    let (outs, size, print) = if pooled {
        let ibis = replicated_builder().from_env()?.build()?;
        let (rank, size) = rank_of(&ibis)?;
        let out = member(&ibis, size, &prob, a.depth, a.read_every)?;
        ibis.end()?;
        (vec![out], size, rank == 0)
    } else {
        let (depth, read_every) = (a.depth, a.read_every);
        let outs = in_process("tsp", a.members, replicated_builder, |ibis, _, size| {
            member(ibis, size, &prob, depth, read_every)
        })?;
        (outs, a.members, true)
    };
    let best = outs[0].best;
    if outs.iter().any(|o| o.best != best) {
        ibis_apps::out!("members disagree on the bound: FAILED");
        return Ok(false);
    }
    if print {
        let secs = outs.iter().map(|o| o.secs).fold(0.0, f64::max);
        let nodes: u64 = outs.iter().map(|o| o.nodes).sum();
        let jobs: Vec<u64> = outs.iter().map(|o| o.jobs).collect();
        ibis_apps::out!(
            "tsp n={} seed={} parallel ({}) members={size}: shortest tour {best} ({} nodes here, jobs per member here {jobs:?}, {} bound updates) time {secs:.3} s",
            a.n,
            a.seed,
            if pooled { "processes" } else { "in-process" },
            nodes,
            outs[0].improvements,
        );
        ibis_apps::out!("tsp_time {secs:.6} s");
        ibis_apps::out!("tsp_length {best} length");
    }
    if let Some(s) = seq {
        if s != best {
            ibis_apps::out!("check: FAILED: parallel {best} != sequential {s}");
            return Ok(false);
        }
        if print {
            ibis_apps::out!("check: ok (parallel == sequential == {s})");
        }
    }
    Ok(true)
}
