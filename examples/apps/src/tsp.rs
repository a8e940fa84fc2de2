//! The travelling salesperson problem by branch and bound: the shortest tour through
//! every city of a symmetric TSPLIB instance ([`crate::tsplib`]), and its length.
//!
//! The search is depth first over the tours that start in city 0: a node is a path
//! from city 0, its children extend it by an unvisited city, nearest first. A node is
//! pruned when its lower bound is not below the best known tour length: the path's
//! length, plus a minimum spanning tree of the unvisited cities, plus the cheapest
//! edges joining that tree to the path's two ends (every completion of the path is such
//! a tree and two such edges, so the bound never exceeds the best completion). The
//! search starts from the tour of the nearest-neighbour heuristic improved by 2-opt, so
//! it prunes from the first node.
//!
//! The Satin version ([`Tsp`]) spawns a job per child down to a spawn depth (the path's
//! length in cities) and searches sequentially below. The best known length is shared:
//!
//! - within a process by a [`SharedBound`] (an atomic minimum) that every job of the
//!   same run reads before each pruning decision and lowers when it completes a shorter
//!   tour;
//! - between processes by a Satin shared object
//!   ([`RunBounds`](crate::bound::RunBounds)): a process that
//!   lowers its bound writes the new length, which is applied to every other
//!   process's bound as it arrives, while they search. Each job also carries the
//!   bound its spawner knew ([`Tsp::bound`]), so a stolen job never starts with a
//!   worse one than its spawner had, and returns the best tour it found below it.
//!
//! The distance matrix does not travel with the jobs: a [`Problem`] is registered in a
//! process-wide table ([`register`]) under a key (a digest of its matrix) that the jobs
//! carry. Every process of a pool runs the same command line, so each reads the same
//! file and registers the same problem before the run; a job whose problem is not
//! registered in the process that runs it gives an error, never a wrong tour.
//!
//! Several tours may be optimal and which one a parallel run finds depends on the
//! timing, so [`Tour`] compares by length only (`--check` compares the optimal lengths).

use crate::bound::{new_run_id, run_bound, PoolBound};
pub use crate::bound::{Bound, SharedBound};
use crate::problems::Problems;
use crate::tsplib::Instance;
use satin::{Ctx, Job};
use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};
use std::fmt;
use std::sync::Arc;

/// The most cities the branch and bound takes (a path's cities are a 64-bit set; the
/// search is exponential long before).
pub const MAX_CITIES: usize = 64;

/// A tour: its length and its cities (0-based, starting with city 0). Compared by
/// length only: two optimal tours are equal.
#[derive(Clone, Serialize, Deserialize)]
pub struct Tour {
    /// The length, the way back to the first city included.
    pub length: u64,
    /// The cities in order, 0-based, starting with 0.
    pub cities: Vec<u8>,
}

impl PartialEq for Tour {
    fn eq(&self, o: &Tour) -> bool {
        self.length == o.length
    }
}

impl fmt::Debug for Tour {
    /// `LENGTH (tour: 1 14 13 ...)`, with the TSPLIB's 1-based city numbers.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (tour:", self.length)?;
        for c in &self.cities {
            write!(f, " {}", *c as usize + 1)?;
        }
        write!(f, ")")
    }
}

/// An instance ready for the search: the distances and each city's other cities,
/// nearest first.
#[derive(Debug)]
pub struct Problem {
    n: usize,
    dist: Vec<u32>,
    near: Vec<Vec<u8>>,
    key: u64,
}

impl Problem {
    /// The problem of a TSPLIB instance; an error if it has more than [`MAX_CITIES`].
    pub fn new(inst: &Instance) -> Result<Problem, String> {
        let n = inst.dimension;
        if n > MAX_CITIES {
            return Err(format!(
                "{} has {n} cities: the branch and bound takes at most {MAX_CITIES}",
                inst.name
            ));
        }
        Ok(Problem::from_matrix(n, inst.matrix()))
    }

    /// The problem of a symmetric `n x n` matrix by rows (`n` in `1..=MAX_CITIES`).
    fn from_matrix(n: usize, dist: Vec<u32>) -> Problem {
        let near = (0..n)
            .map(|c| {
                let mut v: Vec<u8> = (0..n).filter(|&o| o != c).map(|o| o as u8).collect();
                v.sort_by_key(|&o| (dist[c * n + o as usize], o));
                v
            })
            .collect();
        let mut h = Sha1::new();
        h.update((n as u64).to_le_bytes());
        for d in &dist {
            h.update(d.to_le_bytes());
        }
        let digest = h.finalize();
        let mut key = [0u8; 8];
        key.copy_from_slice(&digest[..8]);
        Problem {
            n,
            dist,
            near,
            key: u64::from_le_bytes(key),
        }
    }

    /// The number of cities.
    pub fn cities(&self) -> usize {
        self.n
    }

    /// The key the jobs name this problem by (a digest of the matrix).
    pub fn key(&self) -> u64 {
        self.key
    }

    fn d(&self, a: usize, b: usize) -> u64 {
        self.dist[a * self.n + b] as u64
    }

    /// The length of a closed tour.
    pub fn length(&self, cities: &[u8]) -> u64 {
        let n = cities.len();
        (0..n)
            .map(|i| self.d(cities[i] as usize, cities[(i + 1) % n] as usize))
            .sum()
    }

    fn all(&self) -> u64 {
        if self.n == 64 {
            u64::MAX
        } else {
            (1u64 << self.n) - 1
        }
    }

    /// A lower bound on the rest of a tour whose path ends in `last` and has visited
    /// `visited`: a minimum spanning tree of the unvisited cities (Prim) and the
    /// cheapest edges from it to `last` and to city 0.
    fn rest_bound(&self, last: usize, visited: u64) -> u64 {
        let left = self.all() & !visited;
        if left == 0 {
            return self.d(last, 0);
        }
        let mut key = [u64::MAX; MAX_CITIES];
        let mut cities = [0u8; MAX_CITIES];
        let mut k = 0;
        let (mut to_last, mut to_first) = (u64::MAX, u64::MAX);
        let mut m = left;
        while m != 0 {
            let c = m.trailing_zeros() as usize;
            m &= m - 1;
            cities[k] = c as u8;
            k += 1;
            to_last = to_last.min(self.d(last, c));
            to_first = to_first.min(self.d(0, c));
        }
        // Prim's algorithm over the k unvisited cities, from the first; `key[i]` is
        // the cheapest edge from the tree to `cities[i]`.
        let (cities, key) = (&cities[..k], &mut key[..k]);
        let mut in_tree = 1u64;
        let mut cur = cities[0] as usize;
        let mut tree = 0;
        for _ in 1..k {
            let mut best = (u64::MAX, 0);
            for (i, &c) in cities.iter().enumerate() {
                if in_tree & (1 << i) == 0 {
                    key[i] = key[i].min(self.d(cur, c as usize));
                    if key[i] < best.0 {
                        best = (key[i], i);
                    }
                }
            }
            tree += best.0;
            in_tree |= 1 << best.1;
            cur = cities[best.1] as usize;
        }
        tree + to_last + to_first
    }

    /// A stronger lower bound on the rest of the tour (a Hamiltonian path from `last`
    /// through the unvisited cities to city 0), by Lagrangian relaxation (Held and
    /// Karp): with a penalty `pi[c]` per city added to each of its edges, a minimum
    /// spanning tree of the path's cities, less every city's penalty times the degree
    /// the path gives it (2 inside, 1 at the ends), never exceeds the path's length.
    /// `iters` subgradient steps move the penalties (kept in `pi` for the children)
    /// towards the degrees; stops early once the bound reaches `target` (nothing below
    /// it is wanted). At least [`Problem::rest_bound`].
    fn lower_bound(
        &self,
        last: usize,
        visited: u64,
        pi: &mut Penalties,
        target: u64,
        iters: usize,
    ) -> u64 {
        let simple = self.rest_bound(last, visited);
        let left = self.all() & !visited;
        if simple >= target || last == 0 || left.count_ones() < 2 {
            return simple;
        }
        // The path's cities: `last`, the unvisited ones, then city 0.
        let mut cities = [0usize; MAX_CITIES + 1];
        let mut want = [2i32; MAX_CITIES + 1];
        cities[0] = last;
        want[0] = 1;
        let mut k = 1;
        let mut m = left;
        while m != 0 {
            cities[k] = m.trailing_zeros() as usize;
            m &= m - 1;
            k += 1;
        }
        cities[k] = 0;
        want[k] = 1;
        k += 1;
        let (cities, want) = (&cities[..k], &want[..k]);
        let mut best = simple as f64;
        let mut step = 1.0;
        for _ in 0..iters {
            // Prim over the penalised weights; `deg` counts each city's tree edges.
            let mut key = [f64::INFINITY; MAX_CITIES + 1];
            let mut from = [0usize; MAX_CITIES + 1];
            let mut deg = [0i32; MAX_CITIES + 1];
            let mut in_tree = 1u128;
            let mut cur = 0;
            let mut tree = 0.0;
            for _ in 1..k {
                let mut next = (f64::INFINITY, 0);
                for i in 1..k {
                    if in_tree & (1 << i) != 0 {
                        continue;
                    }
                    let (a, b) = (cities[cur], cities[i]);
                    let w = self.d(a, b) as f64 + pi[a] + pi[b];
                    if w < key[i] {
                        key[i] = w;
                        from[i] = cur;
                    }
                    if key[i] < next.0 {
                        next = (key[i], i);
                    }
                }
                let i = next.1;
                tree += next.0;
                in_tree |= 1 << i;
                deg[i] += 1;
                deg[from[i]] += 1;
                cur = i;
            }
            let penalties: f64 = (0..k).map(|i| pi[cities[i]] * want[i] as f64).sum();
            let bound = tree - penalties;
            best = best.max(bound);
            // Integer lengths: a bound of 12.3 means at least 13 (less a rounding margin).
            if (best - 1e-6).ceil() >= target as f64 {
                break;
            }
            let norm: i32 = (0..k).map(|i| (deg[i] - want[i]).pow(2)).sum();
            if norm == 0 {
                break; // the tree is a Hamiltonian path: the bound is exact
            }
            let gap = if target == u64::MAX {
                bound.abs() * 0.1 + 1.0
            } else {
                target as f64 - bound
            };
            let t = step * gap.max(1.0) / norm as f64;
            for i in 0..k {
                pi[cities[i]] += t * (deg[i] - want[i]) as f64;
            }
            step *= 0.8;
        }
        ((best - 1e-6).ceil().max(0.0) as u64).max(simple)
    }

    /// The nearest-neighbour tour from city 0, improved by 2-opt until no exchange of
    /// two edges shortens it.
    pub fn heuristic(&self) -> Tour {
        let n = self.n;
        let mut tour = vec![0u8];
        let mut visited = 1u64;
        while tour.len() < n {
            let last = *tour.last().unwrap_or(&0) as usize;
            let next = self.near[last]
                .iter()
                .copied()
                .find(|&c| visited & (1 << c) == 0)
                .unwrap_or(0);
            visited |= 1 << next;
            tour.push(next);
        }
        let mut improved = n >= 4;
        while improved {
            improved = false;
            for i in 0..n - 2 {
                for j in i + 2..n {
                    let (a, b) = (tour[i] as usize, tour[i + 1] as usize);
                    let (c, d) = (tour[j] as usize, tour[(j + 1) % n] as usize);
                    if a == d {
                        continue;
                    }
                    if self.d(a, c) + self.d(b, d) < self.d(a, b) + self.d(c, d) {
                        tour[i + 1..=j].reverse();
                        improved = true;
                    }
                }
            }
        }
        Tour {
            length: self.length(&tour),
            cities: tour,
        }
    }

    /// Depth-first branch and bound below `path` (of length `length`, visiting
    /// `visited`): the best tour shorter than the bound found, if any.
    pub fn search(
        &self,
        path: &mut Vec<u8>,
        visited: u64,
        length: u64,
        bound: &dyn Bound,
    ) -> Option<Tour> {
        self.search_below(path, visited, length, bound, &[0.0; MAX_CITIES])
    }

    /// Child `c` of the path ending in `last` (of `length`, visiting `visited`, with
    /// penalties `pi`): its length, visited cities and penalties; `None` if `c` is
    /// visited or the child's lower bound is not below the bound.
    fn child(
        &self,
        last: usize,
        c: u8,
        visited: u64,
        length: u64,
        pi: &Penalties,
        bound: &dyn Bound,
    ) -> Option<(u64, u64, Penalties)> {
        if visited & (1 << c) != 0 {
            return None;
        }
        let (len, vis) = (length + self.d(last, c as usize), visited | (1 << c));
        let mut child_pi = *pi;
        let target = bound.read().saturating_sub(len);
        let lb = self.lower_bound(c as usize, vis, &mut child_pi, target, NODE_ITERS);
        (len + lb < bound.read()).then_some((len, vis, child_pi))
    }

    /// [`Problem::search`] from the penalties `pi` of the path's node.
    fn search_below(
        &self,
        path: &mut Vec<u8>,
        visited: u64,
        length: u64,
        bound: &dyn Bound,
        pi: &Penalties,
    ) -> Option<Tour> {
        let last = *path.last()? as usize;
        if path.len() == self.n {
            let total = length + self.d(last, 0);
            if total < bound.read() {
                bound.offer(total);
                return Some(Tour {
                    length: total,
                    cities: path.clone(),
                });
            }
            return None;
        }
        let mut best: Option<Tour> = None;
        for &c in &self.near[last] {
            let Some((len, vis, child_pi)) = self.child(last, c, visited, length, pi, bound) else {
                continue;
            };
            path.push(c);
            if let Some(t) = self.search_below(path, vis, len, bound, &child_pi) {
                if best.as_ref().is_none_or(|b| t.length < b.length) {
                    best = Some(t);
                }
            }
            path.pop();
        }
        best
    }

    /// The optimal tour, sequentially.
    pub fn solve_seq(&self) -> Tour {
        let start = self.heuristic();
        let bound = SharedBound::new(start.length);
        self.search(&mut vec![0], 1, 0, &bound).unwrap_or(start)
    }
}

/// The Lagrangian penalties of the cities ([`Problem::lower_bound`]).
type Penalties = [f64; MAX_CITIES];

/// Subgradient steps per search node (the penalties start from the parent's).
const NODE_ITERS: usize = 6;

/// The problems of this process, by key.
static PROBLEMS: Problems<Problem> = Problems::new();

/// Registers `problem` in this process for the jobs that name its key; returns it.
/// Also makes this process's copy of the runs' bounds ([`crate::bound::prepare`]), so
/// that every process of a pool has it before the run.
pub fn register(problem: Problem) -> Arc<Problem> {
    crate::bound::prepare();
    PROBLEMS.register(problem.key, problem)
}

fn problem(key: u64) -> Option<Arc<Problem>> {
    PROBLEMS.get(key)
}

/// A job's answer: the best tour it found below its starting bound, if any; an error if
/// its problem is not registered in the process that ran it.
pub type Found = Result<Option<Tour>, String>;

/// Searches below a path: spawns a job per child while the path is shorter than
/// [`Tsp::spawn_depth`] cities, sequentially below.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Tsp {
    /// The problem's key ([`register`]).
    pub problem: u64,
    /// The run (each run has its own bound in each process).
    pub run: u64,
    /// The path from city 0.
    pub path: Vec<u8>,
    /// Its length.
    pub length: u64,
    /// The best tour length the spawner knew.
    pub bound: u64,
    /// The Lagrangian penalties of the path's node, by city (missing ones are 0): the
    /// children's bounds start from them, as in the sequential search.
    pub penalties: Vec<f64>,
    /// Paths shorter than this many cities spawn their children.
    pub spawn_depth: u32,
}

impl Tsp {
    /// The root job of a new run on `problem` (registered), starting from the bound
    /// `bound` (the length of a known tour).
    pub fn root(problem: &Problem, bound: u64, spawn_depth: u32) -> Tsp {
        Tsp {
            problem: problem.key,
            run: new_run_id(),
            path: vec![0],
            length: 0,
            bound,
            penalties: Vec::new(),
            spawn_depth,
        }
    }
}

#[satin::job(name = "ibis_apps::tsp::Tsp")]
impl Job for Tsp {
    type Output = Found;
    fn run(self, ctx: &mut Ctx) -> Found {
        let Some(p) = problem(self.problem) else {
            return Err(format!(
                "problem {:016x} is not registered in this process (every process must \
                 read the same instance before the run)",
                self.problem
            ));
        };
        let bound = run_bound(self.run, self.bound);
        let visited = self.path.iter().fold(0u64, |v, &c| v | 1 << c);
        let Some(&last) = self.path.last() else {
            return Ok(None);
        };
        let mut pi = [0.0; MAX_CITIES];
        for (p, q) in pi.iter_mut().zip(&self.penalties) {
            *p = *q;
        }
        if self.path.len() >= self.spawn_depth as usize || self.path.len() == p.n {
            let mut path = self.path;
            return Ok(p.search_below(&mut path, visited, self.length, &bound, &pi));
        }
        let last = last as usize;
        let mut best: Option<Tour> = None;
        let keep = |found: Option<Tour>, best: &mut Option<Tour>| {
            if let Some(tour) = found {
                if best.as_ref().is_none_or(|b| tour.length < b.length) {
                    *best = Some(tour);
                }
            }
        };
        let child = |c: u8, bound: &PoolBound| {
            let (length, _, child_pi) = p.child(last, c, visited, self.length, &pi, bound)?;
            let mut path = self.path.clone();
            path.push(c);
            Some(Tsp {
                path,
                length,
                bound: bound.read(),
                penalties: child_pi[..p.n].to_vec(),
                ..self.clone()
            })
        };
        // The nearest city first, searched here before the others are spawned (young
        // brothers wait): it is the sequential search's first choice and the likeliest
        // to lower the bound that prunes its siblings. (Spawned with them, it would run
        // after them: the sync takes the newest first, and spawns past the inlining
        // depth run at once.)
        let mut near = p.near[last].iter().copied();
        for c in near.by_ref() {
            if let Some(job) = child(c, &bound) {
                keep(job.run(ctx)?, &mut best);
                break;
            }
        }
        let mut f = ctx.frame();
        let mut tickets = Vec::new();
        for c in near {
            if let Some(job) = child(c, &bound) {
                tickets.push(f.spawn(job));
            }
        }
        let r = f.sync();
        for t in tickets {
            keep(r.get(t)?, &mut best);
        }
        Ok(best)
    }
}

/// The optimal tour by the Satin version: the root job from the heuristic's tour.
pub fn solve(satin: &satin::Satin, problem: &Problem, spawn_depth: u32) -> Result<Tour, String> {
    let start = problem.heuristic();
    let found = satin.run(Tsp::root(problem, start.length, spawn_depth))?;
    Ok(found.unwrap_or(start))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tour of `p` from city 0, by brute force.
    fn brute_force(p: &Problem) -> u64 {
        fn go(p: &Problem, path: &mut Vec<u8>, visited: u64, best: &mut u64) {
            if path.len() == p.n {
                *best = (*best).min(p.length(path));
                return;
            }
            for c in 1..p.n as u8 {
                if visited & (1 << c) == 0 {
                    path.push(c);
                    go(p, path, visited | 1 << c, best);
                    path.pop();
                }
            }
        }
        let mut best = u64::MAX;
        go(p, &mut vec![0], 1, &mut best);
        best
    }

    fn random_problem(n: usize, seed: u64) -> Problem {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let pts: Vec<(f64, f64)> = (0..n)
            .map(|_| ((next() % 1000) as f64, (next() % 1000) as f64))
            .collect();
        let dist = (0..n * n)
            .map(|k| {
                let (a, b) = (pts[k / n], pts[k % n]);
                ((a.0 - b.0).hypot(a.1 - b.1) + 0.5) as u32
            })
            .collect();
        Problem::from_matrix(n, dist)
    }

    #[test]
    fn branch_and_bound_finds_the_brute_force_optimum() {
        for n in 1..=9 {
            for seed in 0..4 {
                let p = random_problem(n, seed);
                let t = p.solve_seq();
                assert_eq!(t.length, brute_force(&p), "n = {n}, seed = {seed}");
                assert_eq!(p.length(&t.cities), t.length, "the tour has its length");
                let mut sorted = t.cities.clone();
                sorted.sort_unstable();
                assert_eq!(sorted, (0..n as u8).collect::<Vec<_>>(), "every city once");
            }
        }
    }

    /// The shortest completion of `path` into a tour, by brute force.
    fn best_completion(p: &Problem, path: &mut Vec<u8>, visited: u64) -> u64 {
        if path.len() == p.n {
            return p.length(path);
        }
        let mut best = u64::MAX;
        for c in 1..p.n as u8 {
            if visited & (1 << c) == 0 {
                path.push(c);
                best = best.min(best_completion(p, path, visited | 1 << c));
                path.pop();
            }
        }
        best
    }

    #[test]
    fn the_bounds_never_exceed_the_best_completion() {
        for seed in 0..6 {
            let p = random_problem(9, seed);
            // Paths 0, a, b of every pair of cities.
            for a in 1..9u8 {
                for b in (1..9u8).filter(|&b| b != a) {
                    let mut path = vec![0, a, b];
                    let visited = 1 | 1 << a | 1 << b;
                    let len = p.d(0, a as usize) + p.d(a as usize, b as usize);
                    let best = best_completion(&p, &mut path, visited) - len;
                    assert!(p.rest_bound(b as usize, visited) <= best, "{seed} {a} {b}");
                    let mut pi = [0.0; MAX_CITIES];
                    let lb = p.lower_bound(b as usize, visited, &mut pi, u64::MAX, 50);
                    assert!(lb <= best, "seed {seed}, path 0 {a} {b}: {lb} > {best}");
                    // Penalties inherited from another node still give a valid bound.
                    let lb = p.lower_bound(b as usize, visited, &mut pi, u64::MAX, 3);
                    assert!(lb <= best, "seed {seed}, path 0 {a} {b}: {lb} > {best}");
                }
            }
        }
    }

    #[test]
    fn the_lagrangian_bound_is_tighter() {
        // On the whole, not node by node: the subgradient steps must raise the bound.
        let p = random_problem(12, 9);
        let (mut simple, mut lagrangian) = (0, 0);
        for a in 1..12u8 {
            let visited = 1 | 1 << a;
            simple += p.rest_bound(a as usize, visited);
            let mut pi = [0.0; MAX_CITIES];
            lagrangian += p.lower_bound(a as usize, visited, &mut pi, u64::MAX, 40);
        }
        assert!(lagrangian > simple, "{lagrangian} <= {simple}");
    }

    #[test]
    fn heuristic_gives_a_tour() {
        let p = random_problem(12, 3);
        let h = p.heuristic();
        assert_eq!(h.length, p.length(&h.cities));
        assert!(h.length >= p.solve_seq().length);
    }

    #[test]
    fn satin_finds_the_sequential_length() {
        let p = register(random_problem(10, 7));
        let want = p.solve_seq();
        for w in [1, 3] {
            let s = satin::Satin::builder().workers(w).build().unwrap();
            for depth in [1, 3, 10] {
                assert_eq!(solve(&s, &p, depth).unwrap().length, want.length);
            }
        }
    }
}
