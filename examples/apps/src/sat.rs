//! SAT: is a formula in conjunctive normal form satisfiable? DPLL (unit propagation
//! and branching) with speculative parallelism: both values of a branching variable are
//! searched at once, and the first branch that finds a model aborts the other (Satin's
//! inlets and abort, thesis chapter 8).
//!
//! Input: DIMACS CNF (`c` comment lines, the header `p cnf VARIABLES CLAUSES`, then
//! clauses as non-zero literals ended by `0`, wrapping lines freely; a `%` line ends the
//! formula, as in the SATLIB benchmark files). [`random_3sat`] generates uniform random
//! 3-SAT formulas instead (`--random VARS CLAUSES --seed S`).
//!
//! The search: unit propagation by scanning the clauses to a fixed point; the branching
//! variable is the unassigned one with the most occurrences (ties: the lowest number),
//! true first. The sequential search stops at its first model. The Satin job
//! ([`Dpll`]) carries the decisions of its branch (the formula is the same in every
//! process: each reads the same file, see [`set_formula`]); above `--spawn-depth`
//! decisions it spawns both branches in a [`satin::CatchFrame`]: a branch that finds a
//! model fails with it ([`Found`]), the inlet aborts the sibling and passes the model
//! up. With `--no-abort` the inlet only keeps the model and the sibling runs to its end
//! (the search counts the nodes it visits either way). A model is checked against every
//! clause before it is reported.

use parking_lot::Mutex;
use satin::{Ctx, Job};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Search nodes visited by the [`Dpll`] jobs of this process (aborted ones up to their
/// last multiple of 64).
static NODES: AtomicU64 = AtomicU64::new(0);

/// The most variables a formula may have.
pub const MAX_VARS: usize = 1 << 20;
/// The most literals (over all clauses) a formula may have.
pub const MAX_LITERALS: usize = 1 << 26;

/// A formula in conjunctive normal form: clauses of literals (`v` or `-v`, 1-based).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cnf {
    /// The number of variables (literals are in `-vars..=vars`, never 0).
    pub vars: usize,
    /// The clauses.
    pub clauses: Vec<Vec<i32>>,
}

/// A DIMACS file that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The 1-based line.
    pub line: usize,
    /// What is wrong.
    pub what: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.what)
    }
}

impl std::error::Error for ParseError {}

impl Cnf {
    /// Parses DIMACS CNF text.
    pub fn parse(text: &str) -> Result<Cnf, ParseError> {
        let err = |line: usize, what: String| ParseError { line, what };
        let mut header: Option<(usize, usize)> = None;
        let mut clauses: Vec<Vec<i32>> = Vec::new();
        let mut clause: Vec<i32> = Vec::new();
        let mut literals = 0usize;
        let mut last = 0;
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            last = n;
            let line = raw.trim();
            if line.is_empty() || line.starts_with('c') {
                continue;
            }
            if line.starts_with('%') {
                break;
            }
            if line.starts_with('p') {
                if header.is_some() {
                    return Err(err(n, "a second `p` line".into()));
                }
                let f: Vec<&str> = line.split_whitespace().collect();
                if f.len() != 4 || f[0] != "p" || f[1] != "cnf" {
                    return Err(err(
                        n,
                        format!("expected `p cnf VARIABLES CLAUSES`, got `{line}`"),
                    ));
                }
                let vars: usize = f[2]
                    .parse()
                    .map_err(|_| err(n, format!("bad variable count `{}`", f[2])))?;
                let count: usize = f[3]
                    .parse()
                    .map_err(|_| err(n, format!("bad clause count `{}`", f[3])))?;
                if vars > MAX_VARS {
                    return Err(err(n, format!("{vars} variables (at most {MAX_VARS})")));
                }
                // Every clause takes at least two characters ("0" and a separator).
                if count > text.len() / 2 + 1 {
                    return Err(err(n, format!("{count} clauses cannot fit in the file")));
                }
                clauses.reserve(count);
                header = Some((vars, count));
                continue;
            }
            let Some((vars, _)) = header else {
                return Err(err(n, "a clause before the `p cnf` line".into()));
            };
            for tok in line.split_whitespace() {
                let lit: i64 = tok
                    .parse()
                    .map_err(|_| err(n, format!("`{tok}` is not a literal")))?;
                if lit == 0 {
                    clauses.push(std::mem::take(&mut clause));
                    continue;
                }
                if lit.unsigned_abs() as usize > vars {
                    return Err(err(n, format!("literal {lit} beyond {vars} variables")));
                }
                literals += 1;
                if literals > MAX_LITERALS {
                    return Err(err(n, format!("more than {MAX_LITERALS} literals")));
                }
                clause.push(lit as i32);
            }
        }
        let Some((vars, count)) = header else {
            return Err(err(last, "no `p cnf` line".into()));
        };
        if !clause.is_empty() {
            return Err(err(last, "the last clause is not ended by 0".into()));
        }
        if clauses.len() != count {
            return Err(err(
                last,
                format!(
                    "the header says {count} clauses, the file has {}",
                    clauses.len()
                ),
            ));
        }
        Ok(Cnf { vars, clauses })
    }

    /// The formula as DIMACS text.
    pub fn to_dimacs(&self) -> String {
        let mut s = format!("p cnf {} {}\n", self.vars, self.clauses.len());
        for c in &self.clauses {
            for l in c {
                s.push_str(&format!("{l} "));
            }
            s.push_str("0\n");
        }
        s
    }

    /// Whether `model` (indexed by variable, 1-based; `model[0]` unused) satisfies
    /// every clause.
    pub fn satisfied_by(&self, model: &[bool]) -> bool {
        model.len() == self.vars + 1
            && self.clauses.iter().all(|c| {
                c.iter()
                    .any(|&l| model[l.unsigned_abs() as usize] == (l > 0))
            })
    }
}

/// A uniform random 3-SAT formula: `clauses` clauses of three distinct variables, each
/// negated with probability 1/2 (xorshift from `seed`). Near 4.26 clauses per
/// variable about half are satisfiable, and they are the hardest.
pub fn random_3sat(vars: usize, clauses: usize, seed: u64) -> Cnf {
    let mut x = seed ^ 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let vars = vars.max(3);
    let clauses = (0..clauses)
        .map(|_| {
            let mut c: Vec<i32> = Vec::with_capacity(3);
            while c.len() < 3 {
                let v = (next() % vars as u64) as i32 + 1;
                if c.iter().all(|l| l.abs() != v) {
                    c.push(if next() & 1 == 0 { v } else { -v });
                }
            }
            c
        })
        .collect();
    Cnf { vars, clauses }
}

/// The search state: the formula, an assignment (0 unassigned, 1 true, -1 false), the
/// trail of assigned variables, and the branching order.
struct Search<'f> {
    cnf: &'f Cnf,
    value: Vec<i8>,
    trail: Vec<u32>,
    order: &'f [u32],
    nodes: u64,
}

/// Variables by occurrences, most first (ties: lowest number first).
fn branching_order(cnf: &Cnf) -> Vec<u32> {
    let mut count = vec![0u64; cnf.vars + 1];
    for c in &cnf.clauses {
        for l in c {
            count[l.unsigned_abs() as usize] += 1;
        }
    }
    let mut order: Vec<u32> = (1..=cnf.vars as u32).collect();
    order.sort_by_key(|&v| (std::cmp::Reverse(count[v as usize]), v));
    order
}

impl<'f> Search<'f> {
    fn new(cnf: &'f Cnf, order: &'f [u32]) -> Self {
        Search {
            cnf,
            value: vec![0; cnf.vars + 1],
            trail: Vec::with_capacity(cnf.vars),
            order,
            nodes: 0,
        }
    }

    fn lit_value(&self, l: i32) -> i8 {
        let v = self.value[l.unsigned_abs() as usize];
        if l > 0 {
            v
        } else {
            -v
        }
    }

    fn assign(&mut self, l: i32) {
        let v = l.unsigned_abs();
        self.value[v as usize] = if l > 0 { 1 } else { -1 };
        self.trail.push(v);
    }

    fn undo_to(&mut self, mark: usize) {
        while self.trail.len() > mark {
            if let Some(v) = self.trail.pop() {
                self.value[v as usize] = 0;
            }
        }
    }

    /// Unit propagation to a fixed point; `false` on a conflict (an all-false clause).
    fn propagate(&mut self) -> bool {
        loop {
            let mut changed = false;
            for c in &self.cnf.clauses {
                let mut unassigned = 0;
                let mut unit = 0;
                let mut sat = false;
                for &l in c {
                    match self.lit_value(l) {
                        1 => {
                            sat = true;
                            break;
                        }
                        0 => {
                            unassigned += 1;
                            unit = l;
                        }
                        _ => {}
                    }
                }
                if sat {
                    continue;
                }
                match unassigned {
                    0 => return false,
                    1 => {
                        let v = unit.unsigned_abs();
                        self.value[v as usize] = if unit > 0 { 1 } else { -1 };
                        self.trail.push(v);
                        changed = true;
                    }
                    _ => {}
                }
            }
            if !changed {
                return true;
            }
        }
    }

    /// The next branching variable, or `None` when all are assigned.
    fn pick(&self) -> Option<u32> {
        self.order
            .iter()
            .copied()
            .find(|&v| self.value[v as usize] == 0)
    }

    fn model(&self) -> Vec<bool> {
        self.value.iter().map(|&v| v > 0).collect()
    }

    /// Applies decisions and propagates; `false` on a conflict.
    fn replay(&mut self, decisions: &[i32]) -> bool {
        for &d in decisions {
            match self.lit_value(d) {
                1 => continue,
                -1 => return false,
                _ => self.assign(d),
            }
            if !self.propagate() {
                return false;
            }
        }
        self.propagate()
    }

    /// Depth-first DPLL from the current assignment (propagated): a model, or `None`.
    /// `stop` is called at every node (the Satin version's safe point).
    fn dpll(&mut self, stop: &mut dyn FnMut()) -> Option<Vec<bool>> {
        self.nodes += 1;
        if self.nodes.is_multiple_of(64) {
            NODES.fetch_add(64, Ordering::Relaxed);
            stop();
        }
        let Some(v) = self.pick() else {
            return Some(self.model());
        };
        for l in [v as i32, -(v as i32)] {
            let mark = self.trail.len();
            self.assign(l);
            if self.propagate() {
                if let Some(m) = self.dpll(stop) {
                    return Some(m);
                }
            }
            self.undo_to(mark);
        }
        None
    }
}

/// What a search found: a model or none, and the nodes it visited.
#[derive(Clone, Serialize, Deserialize)]
pub struct Outcome {
    /// A model (`model[v]` is variable `v`'s value; index 0 unused), checked against
    /// every clause, or `None`: unsatisfiable.
    pub model: Option<Vec<bool>>,
    /// Search nodes visited (every branch searched, aborted ones up to their abort).
    pub nodes: u64,
}

impl Outcome {
    /// "SAT" or "UNSAT".
    pub fn answer(&self) -> &'static str {
        if self.model.is_some() {
            "SAT"
        } else {
            "UNSAT"
        }
    }
}

/// `SAT (model checked), 1234 nodes`: the model itself is not printed.
impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.model {
            Some(_) => write!(f, "SAT (model checked), {} nodes", self.nodes),
            None => write!(f, "UNSAT, {} nodes", self.nodes),
        }
    }
}

/// Outcomes are equal when their answers are (models and node counts differ between
/// searches).
impl PartialEq for Outcome {
    fn eq(&self, o: &Outcome) -> bool {
        self.model.is_some() == o.model.is_some()
    }
}

/// The sequential search.
pub fn sat_seq(cnf: &Cnf) -> Outcome {
    let order = branching_order(cnf);
    let mut s = Search::new(cnf, &order);
    let model = if s.propagate() {
        s.dpll(&mut || {})
    } else {
        s.nodes += 1;
        None
    };
    Outcome {
        model: model.filter(|m| cnf.satisfied_by(m)),
        nodes: s.nodes,
    }
}

/// A formula and its branching order.
struct Formula {
    cnf: Cnf,
    order: Vec<u32>,
}

/// The formulas the [`Dpll`] jobs of this process may search, by key.
static FORMULAS: OnceLock<Mutex<HashMap<u64, Arc<Formula>>>> = OnceLock::new();

fn formulas() -> &'static Mutex<HashMap<u64, Arc<Formula>>> {
    FORMULAS.get_or_init(Default::default)
}

/// Makes `cnf` searchable by [`Dpll`] jobs in this process and returns its key (a hash
/// of its clauses): every process of a pool registers the same formula (each reads the
/// same file), so a job carries only the key.
pub fn set_formula(cnf: Cnf) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    cnf.hash(&mut h);
    let key = h.finish();
    let order = branching_order(&cnf);
    formulas()
        .lock()
        .entry(key)
        .or_insert_with(|| Arc::new(Formula { cnf, order }));
    key
}

/// A model found: the branch fails with it, so the spawner's inlet sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Found(pub Vec<bool>);

/// The search of one branch: the decisions that lead to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Dpll {
    /// The formula's key ([`set_formula`]).
    pub formula: u64,
    /// The decided literals of the branch, in order.
    pub decisions: Vec<i32>,
    /// Branches with fewer decisions spawn both of their children.
    pub spawn_depth: u32,
    /// Whether a branch that found a model aborts its sibling.
    pub abort: bool,
}

#[satin::job(name = "ibis_apps::sat::Dpll")]
impl Job for Dpll {
    /// `Ok(())`: no model in this branch; `Err(found)`: a model.
    type Output = Result<(), Found>;

    fn run(self, ctx: &mut Ctx) -> Result<(), Found> {
        let Some(f) = formulas().lock().get(&self.formula).cloned() else {
            // Not reachable in the programs (every process sets the formula first).
            panic!("sat: formula {:x} is not set in this process", self.formula);
        };
        let mut s = Search::new(&f.cnf, &f.order);
        NODES.fetch_add(1, Ordering::Relaxed);
        if !s.replay(&self.decisions) {
            return Ok(());
        }
        if self.decisions.len() as u32 >= self.spawn_depth {
            let r = s.dpll(&mut || ctx.poll());
            NODES.fetch_add(s.nodes % 64, Ordering::Relaxed);
            return r.map_or(Ok(()), |m| Err(Found(m)));
        }
        let Some(v) = s.pick() else {
            return Err(Found(s.model()));
        };
        let mut frame = ctx.catch_frame::<Found>();
        // False is spawned first: the newest child (true) runs here first, as in the
        // sequential search.
        for l in [-(v as i32), v as i32] {
            let mut decisions = self.decisions.clone();
            decisions.push(l);
            let _ = frame.spawn(Dpll { decisions, ..self });
        }
        let abort = self.abort;
        let mut found: Option<Found> = None;
        frame.sync(|_, f: Found| {
            if abort {
                // Passed up: the sibling is aborted, and the parent's inlet aborts
                // this branch's siblings.
                return Err(f);
            }
            found.get_or_insert(f);
            Ok(())
        })?;
        found.map_or(Ok(()), Err)
    }
}

/// The Satin search of the formula `formula` ([`set_formula`]): spawns both branches of
/// the first `spawn_depth` decisions. The nodes are the ones this process visited.
pub fn sat_satin(satin: &satin::Satin, formula: u64, spawn_depth: u32, abort: bool) -> Outcome {
    let before = NODES.load(Ordering::Relaxed);
    let r = satin.run(Dpll {
        formula,
        decisions: Vec::new(),
        spawn_depth,
        abort,
    });
    let nodes = NODES.load(Ordering::Relaxed) - before;
    let f = formulas().lock().get(&formula).cloned();
    Outcome {
        model: r
            .err()
            .map(|found| found.0)
            .filter(|m| f.is_some_and(|f| f.cnf.satisfied_by(m))),
        nodes,
    }
}
