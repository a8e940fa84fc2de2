//! The minimum-cost set cover by branch and bound: the cheapest set of columns that
//! together cover every row of an instance ([`crate::scp`]: OR-Library files or random
//! instances), and its cost.
//!
//! The search is depth first over include/exclude decisions. At each node it takes
//! the uncovered row with the fewest columns left (ties: the lowest row) and, of that
//! row's columns, the one of least cost per uncovered row it covers (ties: the lowest
//! column); the first child includes that column, the second excludes it. A node is
//! pruned when no column is left for some uncovered row, or when its cost plus a lower
//! bound on covering the rest is not below the best cover known. The bound gives every
//! uncovered row the least share of a column's cost that it can get: a column's cost
//! divided by the number of uncovered rows it covers. A cover pays every column it
//! uses, and every uncovered row gets at least its least share of one of them, so no
//! cover of the rest costs less than the sum of the shares. The search starts from
//! Chvátal's greedy cover with its redundant columns removed, so it prunes from the
//! first node.
//!
//! The Satin version ([`SetCover`]) spawns both children of every node with fewer
//! decisions than its spawn depth and searches sequentially below. The best cost is
//! shared as in [`crate::tsp`] ([`crate::bound`]): by a [`SharedBound`] within a
//! process, between processes by a Satin shared object that lowers every process's
//! bound while they search, and by the bound each job carries (a job stolen by another
//! process starts with the bound its spawner knew). The instance is
//! registered in every process under a digest ([`register`]) that the jobs name.
//!
//! Several covers may be optimal and which one a parallel run finds depends on the
//! timing, so [`Cover`] compares by cost (`--check` compares the optimal costs).

use crate::bound::{new_run_id, run_bound, Bound, SharedBound};
use crate::problems::Problems;
use crate::scp::Instance;
use satin::{Ctx, Job};
use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};
use std::fmt;
use std::sync::Arc;

/// A cover: its cost and its columns (0-based, ascending). Compared by cost only: two
/// optimal covers are equal.
#[derive(Clone, Serialize, Deserialize)]
pub struct Cover {
    /// The sum of the columns' costs.
    pub cost: u64,
    /// The columns, 0-based, ascending.
    pub columns: Vec<u32>,
}

impl PartialEq for Cover {
    fn eq(&self, o: &Cover) -> bool {
        self.cost == o.cost
    }
}

impl fmt::Debug for Cover {
    /// `COST (N columns: 3 17 ...)`, with the file's 1-based column numbers.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cost {} ({} columns:", self.cost, self.columns.len())?;
        for c in &self.columns {
            write!(f, " {}", c + 1)?;
        }
        write!(f, ")")
    }
}

/// An instance ready for the search: each row's columns and each column's rows.
#[derive(Debug)]
pub struct Problem {
    costs: Vec<u64>,
    row_columns: Vec<Vec<u32>>,
    column_rows: Vec<Vec<u32>>,
    key: u64,
}

/// What the search makes of a node.
enum Node {
    /// Every row is covered.
    Covered,
    /// No cover below is cheaper than the bound (or none exists).
    Pruned,
    /// Include or exclude this column.
    Branch(u32),
}

impl Problem {
    /// The problem of an instance.
    pub fn new(inst: &Instance) -> Problem {
        let mut column_rows = vec![Vec::new(); inst.columns()];
        for (i, cols) in inst.row_columns.iter().enumerate() {
            for &j in cols {
                column_rows[j as usize].push(i as u32);
            }
        }
        let mut h = Sha1::new();
        h.update((inst.rows as u64).to_le_bytes());
        h.update((inst.columns() as u64).to_le_bytes());
        for c in &inst.costs {
            h.update(c.to_le_bytes());
        }
        for cols in &inst.row_columns {
            h.update((cols.len() as u64).to_le_bytes());
            for j in cols {
                h.update(j.to_le_bytes());
            }
        }
        let d = h.finalize();
        let mut key = [0u8; 8];
        key.copy_from_slice(&d[..8]);
        Problem {
            costs: inst.costs.iter().map(|&c| c as u64).collect(),
            row_columns: inst.row_columns.clone(),
            column_rows,
            key: u64::from_le_bytes(key),
        }
    }

    /// The number of rows.
    pub fn rows(&self) -> usize {
        self.row_columns.len()
    }

    /// The number of columns.
    pub fn columns(&self) -> usize {
        self.costs.len()
    }

    /// The key the jobs name this problem by (a digest of the instance).
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The cost of `columns`, if they cover every row (`None` otherwise, or if a
    /// column is out of range).
    pub fn cost_of(&self, columns: &[u32]) -> Option<u64> {
        let mut covered = vec![false; self.rows()];
        let mut cost = 0;
        for &j in columns {
            cost += self.costs.get(j as usize)?;
            for &i in &self.column_rows[j as usize] {
                covered[i as usize] = true;
            }
        }
        covered.iter().all(|&c| c).then_some(cost)
    }

    /// Chvátal's greedy cover (the column of least cost per newly covered row, until
    /// every row is covered), without the columns whose rows the others cover (the
    /// dearest dropped first).
    pub fn greedy(&self) -> Cover {
        let mut s = State::new(self);
        while s.uncovered > 0 {
            let best = (0..self.columns() as u32)
                .filter(|&j| s.fresh[j as usize] > 0)
                .min_by(|&a, &b| s.cheaper(a, b))
                .unwrap_or(0);
            s.include(best);
        }
        let mut chosen = s.chosen.clone();
        chosen.sort_by_key(|&j| (std::cmp::Reverse(self.costs[j as usize]), j));
        let mut count = s.cover.clone();
        let mut kept = Vec::new();
        for j in chosen {
            let rows = &self.column_rows[j as usize];
            if rows.iter().all(|&i| count[i as usize] > 1) {
                for &i in rows {
                    count[i as usize] -= 1;
                }
            } else {
                kept.push(j);
            }
        }
        kept.sort_unstable();
        Cover {
            cost: kept.iter().map(|&j| self.costs[j as usize]).sum(),
            columns: kept,
        }
    }

    /// The optimal cover, sequentially.
    pub fn solve_seq(&self) -> Cover {
        let start = self.greedy();
        let bound = SharedBound::new(start.cost);
        State::new(self).search(&bound, &mut || {}).unwrap_or(start)
    }
}

/// A node of the search: what is chosen, excluded and covered.
struct State<'p> {
    p: &'p Problem,
    /// For each row, how many chosen columns cover it.
    cover: Vec<u32>,
    /// For each column, whether it is excluded.
    out: Vec<bool>,
    /// For each column, how many uncovered rows it covers.
    fresh: Vec<u32>,
    uncovered: usize,
    cost: u64,
    chosen: Vec<u32>,
}

impl<'p> State<'p> {
    /// The root: nothing chosen.
    fn new(p: &'p Problem) -> Self {
        State {
            p,
            cover: vec![0; p.rows()],
            out: vec![false; p.columns()],
            fresh: p.column_rows.iter().map(|r| r.len() as u32).collect(),
            uncovered: p.rows(),
            cost: 0,
            chosen: Vec::new(),
        }
    }

    /// Whether column `a` costs less per uncovered row than `b` (ties: the lower
    /// number); both cover an uncovered row.
    fn cheaper(&self, a: u32, b: u32) -> std::cmp::Ordering {
        let (ca, cb) = (self.p.costs[a as usize], self.p.costs[b as usize]);
        let (fa, fb) = (self.fresh[a as usize] as u64, self.fresh[b as usize] as u64);
        (ca * fb).cmp(&(cb * fa)).then(a.cmp(&b))
    }

    fn include(&mut self, j: u32) {
        let p = self.p;
        self.cost += p.costs[j as usize];
        self.chosen.push(j);
        for &i in &p.column_rows[j as usize] {
            if self.cover[i as usize] == 0 {
                self.uncovered -= 1;
                for &k in &p.row_columns[i as usize] {
                    self.fresh[k as usize] -= 1;
                }
            }
            self.cover[i as usize] += 1;
        }
    }

    /// Undoes the latest [`State::include`] of `j`.
    fn uninclude(&mut self, j: u32) {
        let p = self.p;
        for &i in &p.column_rows[j as usize] {
            self.cover[i as usize] -= 1;
            if self.cover[i as usize] == 0 {
                self.uncovered += 1;
                for &k in &p.row_columns[i as usize] {
                    self.fresh[k as usize] += 1;
                }
            }
        }
        self.chosen.pop();
        self.cost -= p.costs[j as usize];
    }

    /// Covered, pruned against `best`, or the column to branch on.
    fn examine(&self, best: u64) -> Node {
        if self.uncovered == 0 {
            return Node::Covered;
        }
        let p = self.p;
        let mut shares = 0.0f64;
        let mut branch_row = (usize::MAX, 0);
        for (i, cols) in p.row_columns.iter().enumerate() {
            if self.cover[i] > 0 {
                continue;
            }
            let mut left = 0;
            let mut least = f64::INFINITY;
            for &k in cols {
                if !self.out[k as usize] {
                    left += 1;
                    least = least.min(p.costs[k as usize] as f64 / self.fresh[k as usize] as f64);
                }
            }
            if left == 0 {
                return Node::Pruned;
            }
            shares += least;
            if left < branch_row.0 {
                branch_row = (left, i);
            }
        }
        // The covers' costs are integers: at least the shares' sum rounded up (less a
        // margin for the rounding of the floating-point sum).
        let rest = (shares - 1e-9 * shares.max(1.0)).ceil().max(0.0) as u64;
        if self.cost.saturating_add(rest) >= best {
            return Node::Pruned;
        }
        let column = p.row_columns[branch_row.1]
            .iter()
            .copied()
            .filter(|&k| !self.out[k as usize])
            .min_by(|&a, &b| self.cheaper(a, b));
        column.map_or(Node::Pruned, Node::Branch)
    }

    /// The node's cover, if it is cheaper than the bound (which it lowers).
    fn offer(&self, bound: &dyn Bound) -> Option<Cover> {
        if self.cost >= bound.read() {
            return None;
        }
        bound.offer(self.cost);
        let mut columns = self.chosen.clone();
        columns.sort_unstable();
        Some(Cover {
            cost: self.cost,
            columns,
        })
    }

    /// Depth-first branch and bound below this node (an explicit stack: the search
    /// may be as deep as there are columns): the cheapest cover below the bound found,
    /// if any. `poll` is called every 1024 nodes (the Satin version's safe point).
    fn search(mut self, bound: &dyn Bound, poll: &mut dyn FnMut()) -> Option<Cover> {
        let mut found: Option<Cover> = None;
        // The decisions below this node: a column, and whether it is now excluded.
        let mut stack: Vec<(u32, bool)> = Vec::new();
        let mut nodes = 0u64;
        'node: loop {
            nodes += 1;
            if nodes.is_multiple_of(1024) {
                poll();
            }
            match self.examine(bound.read()) {
                Node::Covered => {
                    if let Some(c) = self.offer(bound) {
                        found = Some(c);
                    }
                }
                Node::Pruned => {}
                Node::Branch(j) => {
                    self.include(j);
                    stack.push((j, false));
                    continue 'node;
                }
            }
            // Back up to the latest include and try its exclusion.
            loop {
                let Some((j, excluded)) = stack.pop() else {
                    return found;
                };
                if excluded {
                    self.out[j as usize] = false;
                } else {
                    self.uninclude(j);
                    self.out[j as usize] = true;
                    stack.push((j, true));
                    continue 'node;
                }
            }
        }
    }
}

/// The problems of this process, by key.
static PROBLEMS: Problems<Problem> = Problems::new();

/// Registers `problem` in this process for the jobs that name its key; returns it.
/// Also makes this process's copy of the runs' bounds ([`crate::bound::prepare`]), so
/// that every process of a pool has it before the run.
pub fn register(problem: Problem) -> Arc<Problem> {
    crate::bound::prepare();
    PROBLEMS.register(problem.key, problem)
}

/// A job's answer: the cheapest cover it found below its starting bound, if any; an
/// error if its problem is not registered in the process that ran it.
pub type Found = Result<Option<Cover>, String>;

/// Searches below a node given by its decisions: spawns the include and the exclude
/// child while it has fewer than [`SetCover::spawn_depth`] decisions, sequentially
/// below.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SetCover {
    /// The problem's key ([`register`]).
    pub problem: u64,
    /// The run (each run has its own bound in each process).
    pub run: u64,
    /// The columns included, in order.
    pub include: Vec<u32>,
    /// The columns excluded.
    pub exclude: Vec<u32>,
    /// The best cost the spawner knew.
    pub bound: u64,
    /// Nodes with fewer decisions spawn their children.
    pub spawn_depth: u32,
}

#[satin::job(name = "ibis_apps::setcover::SetCover")]
impl Job for SetCover {
    type Output = Found;

    fn run(self, ctx: &mut Ctx) -> Found {
        let Some(p) = PROBLEMS.get(self.problem) else {
            return Err(format!(
                "problem {:016x} is not registered in this process (every process must \
                 read the same instance before the run)",
                self.problem
            ));
        };
        let columns = p.columns();
        if self
            .include
            .iter()
            .chain(&self.exclude)
            .any(|&j| j as usize >= columns)
        {
            return Err(format!("a decision on a column beyond {columns}"));
        }
        let bound = run_bound(self.run, self.bound);
        let mut s = State::new(&p);
        for &j in &self.include {
            s.include(j);
        }
        for &j in &self.exclude {
            s.out[j as usize] = true;
        }
        if (self.include.len() + self.exclude.len()) as u32 >= self.spawn_depth {
            return Ok(s.search(&bound, &mut || ctx.poll()));
        }
        let j = match s.examine(bound.read()) {
            Node::Covered => return Ok(s.offer(&bound)),
            Node::Pruned => return Ok(None),
            Node::Branch(j) => j,
        };
        let mut f = ctx.frame();
        // The exclusion first: the newest child (the inclusion) runs here first, as
        // in the sequential search.
        let mut exclude = self.exclude.clone();
        exclude.push(j);
        let out = f.spawn(SetCover {
            exclude,
            bound: bound.read(),
            ..self.clone()
        });
        let mut include = self.include.clone();
        include.push(j);
        let inc = f.spawn(SetCover {
            include,
            bound: bound.read(),
            ..self
        });
        let r = f.sync();
        let (a, b) = (r.get(inc)?, r.get(out)?);
        Ok(match (a, b) {
            (Some(a), Some(b)) => Some(if b.cost < a.cost { b } else { a }),
            (a, b) => a.or(b),
        })
    }
}

/// The optimal cover by the Satin version: the root job from the greedy cover.
pub fn solve(satin: &satin::Satin, problem: &Problem, spawn_depth: u32) -> Result<Cover, String> {
    let start = problem.greedy();
    let found = satin.run(SetCover {
        problem: problem.key,
        run: new_run_id(),
        include: Vec::new(),
        exclude: Vec::new(),
        bound: start.cost,
        spawn_depth,
    })?;
    Ok(found.unwrap_or(start))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cheapest cover over all subsets of the columns (`None`: no cover).
    fn brute_force(p: &Problem) -> Option<u64> {
        let n = p.columns();
        (0u32..1 << n)
            .filter_map(|set| {
                let cols: Vec<u32> = (0..n as u32).filter(|j| set & (1 << j) != 0).collect();
                p.cost_of(&cols)
            })
            .min()
    }

    #[test]
    fn branch_and_bound_finds_the_brute_force_optimum() {
        for (rows, cols, density) in [(4, 5, 0.4), (8, 10, 0.25), (12, 14, 0.2), (15, 12, 0.3)] {
            for seed in 0..12 {
                let inst = Instance::random(rows, cols, density, seed);
                for inst in [inst.clone(), inst.unicost()] {
                    let p = Problem::new(&inst);
                    let want = brute_force(&p).expect("every row has a column");
                    let got = p.solve_seq();
                    assert_eq!(got.cost, want, "{rows}x{cols} seed {seed}");
                    assert_eq!(
                        p.cost_of(&got.columns),
                        Some(got.cost),
                        "a cover of its cost"
                    );
                    let g = p.greedy();
                    assert_eq!(p.cost_of(&g.columns), Some(g.cost), "greedy covers");
                    assert!(g.cost >= want);
                }
            }
        }
    }

    #[test]
    fn the_greedy_cover_drops_redundant_columns() {
        // Costs 3 1 1 3; row 1: columns 1 and 4, row 2: 1, 2 and 4, row 3: 3 and 4.
        // Greedy takes 2 (1 per row, before 4 by number), then 3, then 1 for row 1
        // (3 per row, before 4 by number); 1 also covers row 2, so 2 is dropped.
        let inst = Instance::parse("3 4\n3 1 1 3\n2 1 4\n3 1 2 4\n2 3 4\n").unwrap();
        let p = Problem::new(&inst);
        let g = p.greedy();
        assert_eq!((g.cost, g.columns.clone()), (4, vec![0, 2]), "{g:?}");
        // The optimum is column 4 alone.
        let best = p.solve_seq();
        assert_eq!((best.cost, best.columns), (3, vec![3]));
    }

    #[test]
    fn satin_finds_the_sequential_cost() {
        let p = register(Problem::new(&Instance::random(30, 40, 0.1, 7)));
        let want = p.solve_seq();
        for w in [1, 3] {
            let s = satin::Satin::builder().workers(w).build().unwrap();
            for depth in [0, 3, 12, 200] {
                let got = solve(&s, &p, depth).unwrap();
                assert_eq!(got.cost, want.cost, "{w} workers, depth {depth}");
                assert_eq!(p.cost_of(&got.columns), Some(got.cost));
            }
        }
    }

    #[test]
    fn unregistered_problems_are_errors() {
        let s = satin::Satin::builder().workers(1).build().unwrap();
        let job = SetCover {
            problem: 0x1234,
            run: 1,
            include: Vec::new(),
            exclude: Vec::new(),
            bound: 10,
            spawn_depth: 3,
        };
        assert!(s.run(job).unwrap_err().contains("not registered"));
    }
}
