//! Barnes-Hut N-body simulation (the journal paper's figure 1), in two Satin versions:
//! the bodies as a Satin shared object ([`satin::Shared`]) that every process keeps a
//! copy of and the master updates once per iteration, and the bodies sent as a job
//! parameter with every job that leaves its process. `--check` compares both with the
//! sequential simulation bit for bit; the pool's statistics count the bytes each
//! version sends.
//!
//! The bodies start as a Plummer model (the SPLASH-2 and Java Satin benchmark's
//! input), from a seed. Every iteration builds an octree of the bodies, computes the
//! acceleration of every body by walking the tree (a cell whose size over distance is
//! below `theta` counts as one body at its centre of mass), and advances positions and
//! velocities by a leapfrog step. The force computation is the parallel part: a job
//! computes the accelerations of a range of bodies and spawns two halves above the
//! leaf size.

// Vector arithmetic on [f64; 3] reads best as loops over the three coordinates.
#![allow(clippy::needless_range_loop)]

use satin::{Ctx, Job, Replicated, Satin, Shared};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

/// A 3-vector.
pub type V3 = [f64; 3];

/// The most bodies (positions, velocities and the tree must fit in memory easily).
pub const MAX_BODIES: usize = 10_000_000;
/// The most iterations.
pub const MAX_ITERATIONS: u32 = 100_000;
/// The time step.
pub const DT: f64 = 0.025;
/// Plummer softening, squared.
pub const EPS2: f64 = 0.05 * 0.05;
/// The opening criterion: a cell of size `s` at distance `d` is one body if `s / d <
/// THETA`.
pub const THETA: f64 = 0.5;
/// The deepest the octree goes (bodies at the same place share a leaf below it).
const MAX_DEPTH: u32 = 48;

/// The bodies' state the force computation reads: positions and masses.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BodySet {
    /// Positions.
    pub pos: Vec<V3>,
    /// Masses.
    pub mass: Vec<f64>,
    /// The octree of `pos`, built once on first use in each process.
    #[serde(skip)]
    tree: OnceLock<Tree>,
}

impl BodySet {
    /// A body set without a tree yet.
    pub fn new(pos: Vec<V3>, mass: Vec<f64>) -> BodySet {
        BodySet {
            pos,
            mass,
            tree: OnceLock::new(),
        }
    }

    /// The number of bodies.
    pub fn len(&self) -> usize {
        self.pos.len()
    }

    /// Whether there are no bodies.
    pub fn is_empty(&self) -> bool {
        self.pos.is_empty()
    }

    /// The octree of the positions (built on first use).
    pub fn tree(&self) -> &Tree {
        self.tree.get_or_init(|| Tree::build(&self.pos, &self.mass))
    }

    /// The accelerations of bodies `lo..hi`.
    pub fn accelerations(&self, lo: usize, hi: usize) -> Vec<V3> {
        let t = self.tree();
        (lo..hi).map(|i| t.acceleration(i, &self.pos)).collect()
    }
}

/// One cell of the octree.
#[derive(Debug, Clone)]
struct Cell {
    center: V3,
    half: f64,
    mass: f64,
    com: V3,
    /// Children cell indices (0: none), for an inner cell.
    kids: [u32; 8],
    /// The bodies of a leaf.
    bodies: Vec<u32>,
}

/// An octree over a set of bodies, with masses and centres of mass per cell.
#[derive(Debug, Clone)]
pub struct Tree {
    cells: Vec<Cell>,
    mass: Vec<f64>,
}

fn octant(c: &V3, p: &V3) -> usize {
    (usize::from(p[0] >= c[0]))
        | (usize::from(p[1] >= c[1]) << 1)
        | (usize::from(p[2] >= c[2]) << 2)
}

impl Tree {
    /// Builds the tree by inserting the bodies in index order (so that the same
    /// positions give the same tree, and the same forces, in every process).
    pub fn build(pos: &[V3], mass: &[f64]) -> Tree {
        let mut lo = [f64::INFINITY; 3];
        let mut hi = [f64::NEG_INFINITY; 3];
        for p in pos {
            for d in 0..3 {
                lo[d] = lo[d].min(p[d]);
                hi[d] = hi[d].max(p[d]);
            }
        }
        let (center, half) = if pos.is_empty() {
            ([0.0; 3], 1.0)
        } else {
            let c = [
                (lo[0] + hi[0]) / 2.0,
                (lo[1] + hi[1]) / 2.0,
                (lo[2] + hi[2]) / 2.0,
            ];
            let h = (0..3).map(|d| hi[d] - lo[d]).fold(0.0f64, f64::max) / 2.0;
            (c, h.max(1e-9) * 1.000_001)
        };
        let mut t = Tree {
            cells: vec![Cell {
                center,
                half,
                mass: 0.0,
                com: [0.0; 3],
                kids: [0; 8],
                bodies: Vec::new(),
            }],
            mass: mass.to_vec(),
        };
        for i in 0..pos.len() {
            t.insert(i as u32, pos);
        }
        t.summarize(0, pos);
        t
    }

    fn insert(&mut self, b: u32, pos: &[V3]) {
        let mut c = 0usize;
        let mut depth = 0;
        loop {
            let is_leaf = self.cells[c].kids == [0; 8];
            if is_leaf {
                if self.cells[c].bodies.is_empty() || depth >= MAX_DEPTH {
                    self.cells[c].bodies.push(b);
                    return;
                }
                // Split: the leaf's bodies move one level down.
                let old = std::mem::take(&mut self.cells[c].bodies);
                for o in old {
                    let k = self.child(c, &pos[o as usize]);
                    self.cells[k].bodies.push(o);
                }
            }
            c = self.child(c, &pos[b as usize]);
            depth += 1;
            // The child may be an occupied leaf: the loop splits it.
        }
    }

    /// The child of cell `c` that holds `p`, made if missing.
    fn child(&mut self, c: usize, p: &V3) -> usize {
        let o = octant(&self.cells[c].center, p);
        let k = self.cells[c].kids[o];
        if k != 0 {
            return k as usize;
        }
        let h = self.cells[c].half / 2.0;
        let cc = self.cells[c].center;
        let center = [
            cc[0] + if o & 1 != 0 { h } else { -h },
            cc[1] + if o & 2 != 0 { h } else { -h },
            cc[2] + if o & 4 != 0 { h } else { -h },
        ];
        self.cells.push(Cell {
            center,
            half: h,
            mass: 0.0,
            com: [0.0; 3],
            kids: [0; 8],
            bodies: Vec::new(),
        });
        let k = self.cells.len() - 1;
        self.cells[c].kids[o] = k as u32;
        k
    }

    /// Masses and centres of mass, bottom up (explicit stack: no recursion limit).
    fn summarize(&mut self, root: usize, pos: &[V3]) {
        let mut order = Vec::with_capacity(self.cells.len());
        let mut stack = vec![root];
        while let Some(c) = stack.pop() {
            order.push(c);
            stack.extend(
                self.cells[c]
                    .kids
                    .iter()
                    .filter(|k| **k != 0)
                    .map(|k| *k as usize),
            );
        }
        for &c in order.iter().rev() {
            let (mut m, mut s) = (0.0, [0.0; 3]);
            for &b in &self.cells[c].bodies {
                let (bm, bp) = (self.mass[b as usize], pos[b as usize]);
                m += bm;
                for d in 0..3 {
                    s[d] += bm * bp[d];
                }
            }
            for k in self.cells[c].kids {
                if k != 0 {
                    let kc = &self.cells[k as usize];
                    m += kc.mass;
                    for d in 0..3 {
                        s[d] += kc.mass * kc.com[d];
                    }
                }
            }
            let cell = &mut self.cells[c];
            cell.mass = m;
            cell.com = if m > 0.0 {
                [s[0] / m, s[1] / m, s[2] / m]
            } else {
                cell.center
            };
        }
    }

    /// The number of cells.
    pub fn cells(&self) -> usize {
        self.cells.len()
    }

    /// The acceleration of body `i` (softened gravity, G = 1).
    pub fn acceleration(&self, i: usize, pos: &[V3]) -> V3 {
        let p = pos[i];
        let mut a = [0.0; 3];
        let mut add = |q: &V3, m: f64| {
            let d = [q[0] - p[0], q[1] - p[1], q[2] - p[2]];
            let r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + EPS2;
            let f = m / (r2 * r2.sqrt());
            for k in 0..3 {
                a[k] += f * d[k];
            }
        };
        let mut stack = vec![0usize];
        while let Some(c) = stack.pop() {
            let cell = &self.cells[c];
            if cell.mass == 0.0 {
                continue;
            }
            if cell.kids == [0; 8] {
                for &b in &cell.bodies {
                    if b as usize != i {
                        add(&pos[b as usize], self.mass[b as usize]);
                    }
                }
                continue;
            }
            let d = [cell.com[0] - p[0], cell.com[1] - p[1], cell.com[2] - p[2]];
            let dist2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
            let size = 2.0 * cell.half;
            if size * size < THETA * THETA * dist2 {
                add(&cell.com, cell.mass);
            } else {
                // Children in reverse, so they are walked in octant order.
                stack.extend(
                    cell.kids
                        .iter()
                        .rev()
                        .filter(|k| **k != 0)
                        .map(|k| *k as usize),
                );
            }
        }
        a
    }
}

/// The seeded generator of the initial model (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// A random vector of length `r`.
    fn sphere(&mut self, r: f64) -> V3 {
        loop {
            let v = [
                2.0 * self.unit() - 1.0,
                2.0 * self.unit() - 1.0,
                2.0 * self.unit() - 1.0,
            ];
            let n2 = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
            if n2 > 1e-6 && n2 <= 1.0 {
                let s = r / n2.sqrt();
                return [v[0] * s, v[1] * s, v[2] * s];
            }
        }
    }
}

/// The whole simulation state: bodies and velocities.
#[derive(Debug, Clone)]
pub struct Model {
    /// Positions and masses.
    pub bodies: BodySet,
    /// Velocities.
    pub vel: Vec<V3>,
}

/// A Plummer model of `n` equal-mass bodies (total mass 1) in standard units, from
/// `seed`, moved to its centre of mass frame.
pub fn plummer(n: usize, seed: u64) -> Model {
    let mut rng = Rng(seed ^ 0x005E_EDBA_25E5_u64);
    let scale = 16.0 / (3.0 * std::f64::consts::PI);
    let mut pos = Vec::with_capacity(n);
    let mut vel = Vec::with_capacity(n);
    for _ in 0..n {
        // The radius from the cumulative mass (cut at 99.9 % of it: no far outliers).
        let r = loop {
            let x = rng.unit() * 0.999;
            if x > 0.0 {
                break 1.0 / (x.powf(-2.0 / 3.0) - 1.0).sqrt();
            }
        };
        pos.push(rng.sphere(r / scale));
        // The speed by rejection on g(q) = q^2 (1 - q^2)^3.5.
        let q = loop {
            let q = rng.unit();
            let g = q * q * (1.0 - q * q).powf(3.5);
            if 0.1 * rng.unit() < g {
                break q;
            }
        };
        let v = q * std::f64::consts::SQRT_2 * (1.0 + r * r).powf(-0.25);
        vel.push(rng.sphere(v * scale.sqrt()));
    }
    let m = 1.0 / n.max(1) as f64;
    for set in [&mut pos, &mut vel] {
        let mut c = [0.0; 3];
        for p in set.iter() {
            for d in 0..3 {
                c[d] += p[d] / n.max(1) as f64;
            }
        }
        for p in set.iter_mut() {
            for d in 0..3 {
                p[d] -= c[d];
            }
        }
    }
    Model {
        bodies: BodySet::new(pos, vec![m; n]),
        vel,
    }
}

/// One leapfrog step with the accelerations `acc` of the current positions: the new
/// positions (velocities are updated in place).
fn advance(pos: &[V3], vel: &mut [V3], acc: &[V3]) -> Vec<V3> {
    pos.iter()
        .zip(vel.iter_mut())
        .zip(acc)
        .map(|((p, v), a)| {
            for d in 0..3 {
                v[d] += a[d] * DT;
            }
            [p[0] + v[0] * DT, p[1] + v[1] * DT, p[2] + v[2] * DT]
        })
        .collect()
}

/// What a run prints and `--check` compares: a digest of the final positions and
/// velocities (every bit), with the centre of mass and the kinetic energy to read.
#[derive(Clone, Copy)]
pub struct Outcome {
    /// FNV-1a over the bits of every final position and velocity.
    pub digest: u64,
    /// The bodies.
    pub bodies: usize,
    /// The iterations run.
    pub iterations: u32,
    /// The kinetic energy at the end.
    pub kinetic: f64,
}

impl PartialEq for Outcome {
    fn eq(&self, o: &Outcome) -> bool {
        self.digest == o.digest && self.bodies == o.bodies && self.iterations == o.iterations
    }
}

impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} bodies after {} iterations: kinetic energy {:.9}, digest {:016x}",
            self.bodies, self.iterations, self.kinetic, self.digest
        )
    }
}

fn outcome(m: &Model, iterations: u32) -> Outcome {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for v in m.bodies.pos.iter().chain(&m.vel) {
        for x in v {
            for b in x.to_bits().to_le_bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    let kinetic = m
        .vel
        .iter()
        .zip(&m.bodies.mass)
        .map(|(v, m)| 0.5 * m * (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]))
        .sum();
    Outcome {
        digest: h,
        bodies: m.bodies.len(),
        iterations,
        kinetic,
    }
}

/// The sequential simulation.
pub fn simulate_seq(mut m: Model, iterations: u32) -> Outcome {
    for _ in 0..iterations {
        let acc = m.bodies.accelerations(0, m.bodies.len());
        let pos = advance(&m.bodies.pos, &mut m.vel, &acc);
        m.bodies = BodySet::new(pos, std::mem::take(&mut m.bodies.mass));
    }
    outcome(&m, iterations)
}

/// The shared object of the shared-object version: the bodies and the iteration
/// they belong to.
#[derive(Debug, Serialize, Deserialize)]
pub struct Bodies {
    /// The version of the positions: grows by one per iteration, and by one when a
    /// run starts (see [`SimulateShared`]).
    pub iteration: u32,
    /// Positions and masses.
    pub set: BodySet,
}

/// The write method of [`Bodies`]: the positions of the next iteration (the
/// journal's `updateBodies`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Update {
    /// The iteration these positions are for.
    pub iteration: u32,
    /// The new positions.
    pub pos: Vec<V3>,
}

impl Replicated for Bodies {
    type Op = Update;
    type Output = ();
    fn apply(&mut self, u: &Update) {
        // Best effort: a late or repeated update never moves a copy back.
        if u.iteration > self.iteration && u.pos.len() == self.set.len() {
            self.iteration = u.iteration;
            self.set = BodySet::new(u.pos.clone(), std::mem::take(&mut self.set.mass));
        }
    }
}

/// The accelerations of bodies `lo..hi` at `iteration`, reading the shared object.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForcesShared {
    /// The first body.
    pub lo: usize,
    /// One past the last body.
    pub hi: usize,
    /// Ranges of at most this many bodies are computed, larger ones split.
    pub leaf: usize,
    /// The iteration the job belongs to.
    pub iteration: u32,
    /// The bodies, by reference (a name on the wire).
    pub bodies: Shared<Bodies>,
}

#[satin::job(name = "ibis_apps::barnes::ForcesShared")]
impl Job for ForcesShared {
    type Output = Vec<V3>;
    fn run(self, ctx: &mut Ctx) -> Vec<V3> {
        if self.hi - self.lo <= self.leaf {
            return self.bodies.read(|b| b.set.accelerations(self.lo, self.hi));
        }
        let mid = self.lo + (self.hi - self.lo) / 2;
        let mut f = ctx.frame();
        let a = f.spawn(ForcesShared {
            hi: mid,
            ..self.clone()
        });
        let b = f.spawn(ForcesShared { lo: mid, ..self });
        let r = f.sync();
        let mut v = r.get(a);
        v.extend(r.get(b));
        v
    }

    /// The journal's `guard_computeForces`: this process's copy holds the positions
    /// of the job's iteration.
    fn guard(&self) -> bool {
        self.bodies.read(|b| b.iteration == self.iteration)
    }
}

/// The shared-object version's root: every iteration spawns the force computation,
/// advances the bodies and writes the new positions to the shared object.
///
/// The shared object's `iteration` only grows: a run starts by writing the initial
/// positions as the version after the copy's current one (so that a master that
/// restarts the run after a crash starts from the initial model too, and no copy
/// holds a version the new jobs could mistake for theirs).
#[derive(Debug)]
pub struct SimulateShared {
    /// The bodies (the shared object holds the positions).
    pub bodies: Shared<Bodies>,
    /// The initial model.
    pub model: Model,
    /// Iterations to run.
    pub iterations: u32,
    /// The jobs' leaf size.
    pub leaf: usize,
}

impl Job for SimulateShared {
    type Output = Outcome;
    fn run(self, ctx: &mut Ctx) -> Outcome {
        let n = self.model.bodies.len();
        let mut vel = self.model.vel;
        let start = self.bodies.read(|b| b.iteration) + 1;
        self.bodies.write(Update {
            iteration: start,
            pos: self.model.bodies.pos,
        });
        for it in start..start + self.iterations {
            let mut f = ctx.frame();
            let t = f.spawn(ForcesShared {
                lo: 0,
                hi: n,
                leaf: self.leaf,
                iteration: it,
                bodies: self.bodies.clone(),
            });
            let acc = f.sync().get(t);
            let pos = self.bodies.read(|b| advance(&b.set.pos, &mut vel, &acc));
            self.bodies.write(Update {
                iteration: it + 1,
                pos,
            });
        }
        self.bodies.read(|b| {
            outcome(
                &Model {
                    bodies: b.set.clone(),
                    vel,
                },
                self.iterations,
            )
        })
    }
}

/// The accelerations of bodies `lo..hi`, with all the bodies as a parameter (sent
/// with the job when it leaves its process; shared by reference inside one).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForcesCopied {
    /// The first body.
    pub lo: usize,
    /// One past the last body.
    pub hi: usize,
    /// Ranges of at most this many bodies are computed, larger ones split.
    pub leaf: usize,
    /// Every body's position and mass.
    pub bodies: Arc<BodySet>,
}

#[satin::job(name = "ibis_apps::barnes::ForcesCopied")]
impl Job for ForcesCopied {
    type Output = Vec<V3>;
    fn run(self, ctx: &mut Ctx) -> Vec<V3> {
        if self.hi - self.lo <= self.leaf {
            return self.bodies.accelerations(self.lo, self.hi);
        }
        let mid = self.lo + (self.hi - self.lo) / 2;
        let mut f = ctx.frame();
        let a = f.spawn(ForcesCopied {
            hi: mid,
            ..self.clone()
        });
        let b = f.spawn(ForcesCopied { lo: mid, ..self });
        let r = f.sync();
        let mut v = r.get(a);
        v.extend(r.get(b));
        v
    }
}

/// The parameter version's root.
#[derive(Debug)]
pub struct SimulateCopied {
    /// The model.
    pub model: Model,
    /// Iterations to run.
    pub iterations: u32,
    /// The jobs' leaf size.
    pub leaf: usize,
}

impl Job for SimulateCopied {
    type Output = Outcome;
    fn run(self, ctx: &mut Ctx) -> Outcome {
        let Model { bodies, mut vel } = self.model;
        let mut bodies = Arc::new(bodies);
        for _ in 0..self.iterations {
            let mut f = ctx.frame();
            let t = f.spawn(ForcesCopied {
                lo: 0,
                hi: bodies.len(),
                leaf: self.leaf,
                bodies: bodies.clone(),
            });
            let acc = f.sync().get(t);
            let pos = advance(&bodies.pos, &mut vel, &acc);
            bodies = Arc::new(BodySet::new(pos, bodies.mass.clone()));
        }
        let bodies = Arc::try_unwrap(bodies).unwrap_or_else(|a| (*a).clone());
        outcome(&Model { bodies, vel }, self.iterations)
    }
}

/// The name of the shared object of the bodies.
pub const SHARED_NAME: &str = "ibis_apps::barnes::bodies";

/// Creates this process's copy of the bodies' shared object from `model` (every
/// process of a pool does, before the run).
pub fn share(model: &Model) -> Result<Shared<Bodies>, satin::SatinError> {
    Shared::new(
        SHARED_NAME,
        Bodies {
            iteration: 0,
            set: BodySet::new(model.bodies.pos.clone(), model.bodies.mass.clone()),
        },
    )
}

/// The shared-object version on `satin` (the bodies' copy of this process made by
/// [`share`]), from the initial `model`.
pub fn simulate_shared(
    satin: &Satin,
    bodies: &Shared<Bodies>,
    model: Model,
    iterations: u32,
    leaf: usize,
) -> Outcome {
    satin.run(SimulateShared {
        bodies: bodies.clone(),
        model,
        iterations,
        leaf,
    })
}

/// The parameter version on `satin`.
pub fn simulate_copied(satin: &Satin, model: Model, iterations: u32, leaf: usize) -> Outcome {
    satin.run(SimulateCopied {
        model,
        iterations,
        leaf,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direct(i: usize, b: &BodySet) -> V3 {
        let p = b.pos[i];
        let mut a = [0.0; 3];
        for (j, q) in b.pos.iter().enumerate() {
            if j == i {
                continue;
            }
            let d = [q[0] - p[0], q[1] - p[1], q[2] - p[2]];
            let r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2] + EPS2;
            let f = b.mass[j] / (r2 * r2.sqrt());
            for k in 0..3 {
                a[k] += f * d[k];
            }
        }
        a
    }

    #[test]
    fn the_tree_holds_every_body_and_the_whole_mass() {
        let m = plummer(500, 3);
        let t = m.bodies.tree();
        assert!((t.cells[0].mass - 1.0).abs() < 1e-12);
        let mut seen: Vec<u32> = t.cells.iter().flat_map(|c| c.bodies.clone()).collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..500).collect::<Vec<u32>>());
        // Every body lies inside its leaf's cube.
        for c in &t.cells {
            for &b in &c.bodies {
                let p = m.bodies.pos[b as usize];
                for d in 0..3 {
                    assert!((p[d] - c.center[d]).abs() <= c.half * (1.0 + 1e-9));
                }
            }
        }
    }

    #[test]
    fn tree_forces_are_close_to_direct_summation() {
        let m = plummer(400, 11);
        let mut worst: f64 = 0.0;
        for i in (0..400).step_by(7) {
            let a = m.bodies.tree().acceleration(i, &m.bodies.pos);
            let b = direct(i, &m.bodies);
            let nb = (b[0] * b[0] + b[1] * b[1] + b[2] * b[2]).sqrt();
            let e = ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt();
            worst = worst.max(e / nb);
        }
        assert!(worst < 0.05, "relative force error {worst}");
    }

    #[test]
    fn coincident_bodies_do_not_split_forever() {
        let b = BodySet::new(vec![[0.5; 3]; 100], vec![0.01; 100]);
        let a = b.accelerations(0, 100);
        assert!(a.iter().all(|v| v.iter().all(|x| *x == 0.0)));
        assert!(b.tree().cells() <= 1 + 8 * MAX_DEPTH as usize);
    }

    #[test]
    fn the_model_is_centred_and_bound() {
        let m = plummer(1000, 5);
        let c = m
            .bodies
            .pos
            .iter()
            .fold([0.0; 3], |s, p| [s[0] + p[0], s[1] + p[1], s[2] + p[2]]);
        assert!(c.iter().all(|x| x.abs() < 1e-9));
        let o = outcome(&m, 0);
        // Standard units: kinetic energy 1/4 (a sample of 1000 is near it).
        assert!((o.kinetic - 0.25).abs() < 0.05, "{}", o.kinetic);
    }

    #[test]
    fn both_satin_versions_give_the_sequential_bits() {
        let m = plummer(300, 2);
        let want = simulate_seq(m.clone(), 3);
        for workers in [1, 2, 4] {
            let s = Satin::builder().workers(workers).build().unwrap();
            assert_eq!(
                simulate_copied(&s, m.clone(), 3, 16),
                want,
                "{workers} workers"
            );
            let name = format!("test-bodies-{workers}");
            let b = Shared::new(
                name,
                Bodies {
                    iteration: 0,
                    set: m.bodies.clone(),
                },
            )
            .unwrap();
            assert_eq!(
                simulate_shared(&s, &b, m.clone(), 3, 16),
                want,
                "{workers} workers"
            );
            assert_eq!(b.read(|b| b.iteration), 4);
            // A second run (a restarted master) starts from the initial model again.
            assert_eq!(simulate_shared(&s, &b, m.clone(), 3, 16), want);
            assert_eq!(b.read(|b| b.iteration), 8);
        }
    }

    #[test]
    fn stale_or_odd_updates_do_not_move_a_copy() {
        let m = plummer(10, 1);
        let mut b = Bodies {
            iteration: 5,
            set: m.bodies.clone(),
        };
        b.apply(&Update {
            iteration: 4,
            pos: vec![[9.0; 3]; 10],
        });
        b.apply(&Update {
            iteration: 6,
            pos: vec![[9.0; 3]; 3],
        });
        assert_eq!(b.iteration, 5);
        assert_eq!(b.set.pos, m.bodies.pos);
        b.apply(&Update {
            iteration: 6,
            pos: vec![[9.0; 3]; 10],
        });
        assert_eq!(b.iteration, 6);
    }
}
