//! UTS, the Unbalanced Tree Search benchmark (Olivier et al., LCPC 2006): count the
//! nodes, leaves and depth of an implicit tree whose shape only a walk reveals.
//!
//! Every node holds the 20-byte state of a splittable random number generator built on
//! SHA-1, as the reference's `rng/brg_sha1`: the root's state is the SHA-1 of 16 zero
//! bytes and the seed (`-r`, big-endian); child `i`'s state is the SHA-1 of its parent's
//! state and `i` (big-endian). A node's number of children is a function of its height
//! and of the last four bytes of its state (31 bits, as a probability in `[0, 1)`), by
//! the tree type:
//!
//! - binomial (`-t 0`): the root has `floor(b)` children; every other node has `m`
//!   children with probability `q`, else none;
//! - geometric (`-t 1`): a geometric number of children with mean `b_h`, the branching
//!   factor at height `h` given by the shape `-a` and the depth `-d`: 0 linear
//!   (`b (1 - h / d)`), 1 exponential decrease (`b h^(-ln b / ln d)`), 2 cyclic
//!   (`b^sin(2 pi h / d)`, nothing below `5 d`), 3 fixed (`b` above depth `d`);
//! - hybrid (`-t 2`): geometric above height `f * d` (`-f`, default 0.5), binomial
//!   below;
//! - balanced (`-t 3`): `b` children above depth `d`.
//!
//! As in the reference, a node has at most [`MAX_CHILDREN`] children (a binomial root at
//! most `ceil(b)`). The same parameters give the same tree in every walk order, so the
//! parallel count equals the sequential one; the published sample trees (T1-T5, see the
//! tests) are reproduced exactly.

use satin::{Ctx, Job};
use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};

/// The most children of a node (the reference's `MAXNUMCHILDREN`); a binomial root is
/// capped by its own branching factor instead.
pub const MAX_CHILDREN: u32 = 100;

/// The state of the splittable random number generator: a SHA-1 digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RngState(pub [u8; 20]);

impl RngState {
    /// The root's state for `seed`: SHA-1 of 16 zero bytes and the seed, big-endian.
    pub fn root(seed: i32) -> Self {
        let mut bytes = [0u8; 20];
        bytes[16..].copy_from_slice(&seed.to_be_bytes());
        RngState(Sha1::digest(bytes).into())
    }

    /// Child `i`'s state: SHA-1 of this state and `i`, big-endian.
    pub fn spawn(&self, i: u32) -> Self {
        let mut h = Sha1::new();
        h.update(self.0);
        h.update(i.to_be_bytes());
        RngState(h.finalize().into())
    }

    /// The state's random number: its last four bytes, big-endian, high bit cleared.
    pub fn rand(&self) -> u32 {
        let [.., a, b, c, d] = self.0;
        u32::from_be_bytes([a, b, c, d]) & 0x7fff_ffff
    }

    /// [`RngState::rand`] as a probability in `[0, 1)`.
    pub fn prob(&self) -> f64 {
        self.rand() as f64 / 2_147_483_648.0
    }
}

/// The tree types (`-t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TreeType {
    /// `-t 0`.
    Binomial,
    /// `-t 1`.
    Geometric,
    /// `-t 2`: geometric near the root, binomial below.
    Hybrid,
    /// `-t 3`.
    Balanced,
}

impl TreeType {
    /// The type of the reference's number `t`.
    pub fn from_number(t: u8) -> Option<Self> {
        [
            Self::Binomial,
            Self::Geometric,
            Self::Hybrid,
            Self::Balanced,
        ]
        .get(t as usize)
        .copied()
    }
}

/// The shapes of geometric trees (`-a`): the branching factor by height.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Shape {
    /// `-a 0`: decreasing linearly to 0 at the depth limit.
    Linear,
    /// `-a 1`: decreasing polynomially with the height.
    ExpDec,
    /// `-a 2`: periodic in the height.
    Cyclic,
    /// `-a 3`: constant down to the depth limit.
    Fixed,
}

impl Shape {
    /// The shape of the reference's number `a`.
    pub fn from_number(a: u8) -> Option<Self> {
        [Self::Linear, Self::ExpDec, Self::Cyclic, Self::Fixed]
            .get(a as usize)
            .copied()
    }
}

/// A tree's parameters (the reference program's options).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// `-t`.
    pub tree: TreeType,
    /// `-a`.
    pub shape: Shape,
    /// `-b`: the root's (binomial) or mean (geometric) branching factor.
    pub b0: f64,
    /// `-d`: the depth limit of geometric and balanced trees (`gen_mx`).
    pub depth: u32,
    /// `-q`: a binomial node's probability of having children.
    pub q: f64,
    /// `-m`: a binomial node's number of children when it has any.
    pub m: u32,
    /// `-f`: the hybrid tree's switch height as a fraction of the depth limit.
    pub shift: f64,
    /// `-r`: the root's seed.
    pub seed: i32,
    /// `-g`: SHA-1 evaluations per child (the reference's extra work per node; the
    /// state is the same however many).
    pub granularity: u32,
}

impl Default for Params {
    /// The reference's defaults: a geometric linear tree of 1,732 nodes.
    fn default() -> Self {
        Params {
            tree: TreeType::Geometric,
            shape: Shape::Linear,
            b0: 4.0,
            depth: 6,
            q: 15.0 / 64.0,
            m: 4,
            shift: 0.5,
            seed: 0,
            granularity: 1,
        }
    }
}

impl Params {
    fn binomial_children(&self, state: &RngState) -> u32 {
        if state.prob() < self.q {
            self.m
        } else {
            0
        }
    }

    fn geometric_children(&self, height: u32, state: &RngState) -> u32 {
        let (b0, h, d) = (self.b0, height as f64, self.depth as f64);
        let b = if height == 0 {
            b0
        } else {
            match self.shape {
                Shape::ExpDec => b0 * h.powf(-b0.ln() / d.ln()),
                Shape::Cyclic if height > 5 * self.depth => 0.0,
                Shape::Cyclic => b0.powf((2.0 * std::f64::consts::PI * h / d).sin()),
                Shape::Fixed if height < self.depth => b0,
                Shape::Fixed => 0.0,
                Shape::Linear => b0 * (1.0 - h / d),
            }
        };
        // The inverse of the geometric distribution's cumulative density with mean b.
        let p = 1.0 / (1.0 + b);
        let u = state.prob();
        // `as` saturates (NaN is 0): a negative mean gives no children.
        ((1.0 - u).ln() / (1.0 - p).ln()).floor() as i64 as u32
    }

    /// The number of children of a node at `height` with `state`.
    pub fn children(&self, height: u32, state: &RngState) -> u32 {
        let n = match self.tree {
            TreeType::Binomial if height == 0 => self.b0.floor() as u32,
            TreeType::Binomial => self.binomial_children(state),
            TreeType::Geometric => self.geometric_children(height, state),
            TreeType::Hybrid if (height as f64) < self.shift * self.depth as f64 => {
                self.geometric_children(height, state)
            }
            TreeType::Hybrid => self.binomial_children(state),
            TreeType::Balanced if height < self.depth => self.b0 as u32,
            TreeType::Balanced => 0,
        };
        if height == 0 && self.tree == TreeType::Binomial {
            n.min(self.b0.ceil() as u32)
        } else if self.tree != TreeType::Balanced {
            n.min(MAX_CHILDREN)
        } else {
            n
        }
    }

    /// Child `i`'s state (computed [`Params::granularity`] times, as the reference).
    fn child(&self, state: &RngState, i: u32) -> RngState {
        let mut c = state.spawn(i);
        for _ in 1..self.granularity {
            c = std::hint::black_box(state).spawn(i);
        }
        c
    }
}

/// What a walk counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Counts {
    /// The tree's size.
    pub nodes: u64,
    /// The nodes without children.
    pub leaves: u64,
    /// The largest height of a node (the root's is 0).
    pub depth: u32,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.nodes += o.nodes;
        self.leaves += o.leaves;
        self.depth = self.depth.max(o.depth);
    }
}

/// Walks the subtree of the node at `height` with `state`, depth first with an explicit
/// stack (binomial trees are thousands of levels deep).
pub fn walk(p: &Params, state: RngState, height: u32) -> Counts {
    let mut c = Counts::default();
    walk_some(p, &mut vec![(state, height)], u64::MAX, &mut c);
    c
}

/// The whole tree, sequentially.
pub fn uts_seq(p: &Params) -> Counts {
    walk(p, RngState::root(p.seed), 0)
}

/// Walks at most `budget` nodes of the subtree of the node at `height` (depth first,
/// as [`walk`]); returns their counts and the nodes still to walk (empty when the
/// subtree is done), oldest (nearest the root) first.
pub fn walk_bounded(
    p: &Params,
    state: RngState,
    height: u32,
    budget: u64,
) -> (Counts, Vec<(RngState, u32)>) {
    let mut c = Counts::default();
    let mut stack = vec![(state, height)];
    walk_some(p, &mut stack, budget, &mut c);
    (c, stack)
}

/// Walks at most `budget` nodes from the top of `stack` (depth first), adding them to
/// `c` and pushing their children.
fn walk_some(p: &Params, stack: &mut Vec<(RngState, u32)>, budget: u64, c: &mut Counts) {
    let mut walked = 0;
    while walked < budget {
        let Some((s, h)) = stack.pop() else {
            break;
        };
        walked += 1;
        c.nodes += 1;
        c.depth = c.depth.max(h);
        let n = p.children(h, &s);
        if n == 0 {
            c.leaves += 1;
        }
        stack.extend((0..n).map(|i| (p.child(&s, i), h + 1)));
    }
}

/// Walks the nodes of `stack` and their subtrees: `chunk` nodes at a time, and after
/// each chunk the older half of the nodes still to walk becomes a job of its own
/// ([`UtsNodes`]), the one a thief takes first. The stolen work is then always a
/// sizeable share of what is left (the oldest nodes are nearest the root), never
/// single leaves: the reference's chunked stealing, in spawn/sync form.
fn walk_split(p: &Params, mut stack: Vec<(RngState, u32)>, chunk: u64, ctx: &mut Ctx) -> Counts {
    let mut c = Counts::default();
    let mut f = ctx.frame();
    let mut tickets = Vec::new();
    loop {
        walk_some(p, &mut stack, chunk, &mut c);
        if stack.is_empty() {
            break;
        }
        if stack.len() >= 2 {
            let newer = stack.split_off(stack.len() / 2);
            let older = std::mem::replace(&mut stack, newer);
            tickets.push(f.spawn(UtsNodes {
                params: *p,
                nodes: older,
                chunk,
            }));
        }
    }
    let r = f.sync();
    for t in tickets {
        c.add(r.get(t));
    }
    c
}

/// Nodes of a tree still to walk with their subtrees (a split of [`Uts`]'s walk).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UtsNodes {
    /// The tree.
    pub params: Params,
    /// The nodes (state, height), oldest first.
    pub nodes: Vec<(RngState, u32)>,
    /// Nodes walked between splits.
    pub chunk: u64,
}

#[satin::job(name = "ibis_apps::uts::UtsNodes")]
impl Job for UtsNodes {
    type Output = Counts;
    fn run(self, ctx: &mut Ctx) -> Counts {
        walk_split(&self.params, self.nodes, self.chunk.max(1), ctx)
    }
}

/// The default of [`Uts::chunk`]: about a fifth of a millisecond of SHA-1 work.
pub const DEFAULT_CHUNK: u64 = 2048;

/// Counts the subtree of one node: nodes above [`Uts::spawn_depth`] spawn one job per
/// child; deeper ones are walked sequentially [`Uts::chunk`] nodes at a time, and
/// after each chunk the older half of the nodes left becomes a job ([`UtsNodes`]). So
/// the deep, thin subtrees of binomial trees (T3: depth 1572 with 2000 children at
/// the root) are split among thieves wherever they grow, not only near the root.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Uts {
    /// The tree.
    pub params: Params,
    /// The node's state.
    pub state: RngState,
    /// The node's height.
    pub height: u32,
    /// Nodes at a smaller height spawn their children.
    pub spawn_depth: u32,
    /// Nodes a job below the spawn depth walks before it spawns the rest (0: the
    /// whole subtree in one job).
    pub chunk: u64,
}

impl Uts {
    /// The root of the tree of `params`, spawning above `spawn_depth` and walking
    /// [`DEFAULT_CHUNK`] nodes per job below.
    pub fn new(params: Params, spawn_depth: u32) -> Self {
        Uts {
            params,
            state: RngState::root(params.seed),
            height: 0,
            spawn_depth,
            chunk: DEFAULT_CHUNK,
        }
    }

    /// The same with `chunk` nodes per job below the spawn depth (0: unbounded).
    pub fn with_chunk(self, chunk: u64) -> Self {
        Uts { chunk, ..self }
    }
}

#[satin::job(name = "ibis_apps::uts::Uts")]
impl Job for Uts {
    type Output = Counts;
    fn run(self, ctx: &mut Ctx) -> Counts {
        if self.height >= self.spawn_depth {
            if self.chunk == 0 {
                return walk(&self.params, self.state, self.height);
            }
            return walk_split(
                &self.params,
                vec![(self.state, self.height)],
                self.chunk,
                ctx,
            );
        }
        let n = self.params.children(self.height, &self.state);
        let mut c = Counts {
            nodes: 1,
            leaves: u64::from(n == 0),
            depth: self.height,
        };
        if n == 0 {
            return c;
        }
        let mut f = ctx.frame();
        let tickets: Vec<_> = (0..n)
            .map(|i| {
                f.spawn(Uts {
                    state: self.params.child(&self.state, i),
                    height: self.height + 1,
                    ..self
                })
            })
            .collect();
        let r = f.sync();
        for t in tickets {
            c.add(r.get(t));
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bounded_walk_and_its_rest_count_the_whole_subtree() {
        let p = Params {
            tree: TreeType::Binomial,
            b0: 20.0,
            q: 0.2,
            m: 4,
            seed: 7,
            ..Params::default()
        };
        let want = uts_seq(&p);
        for budget in [1, 2, 17, 1000] {
            let (mut c, mut rest) = walk_bounded(&p, RngState::root(p.seed), 0, budget);
            assert!(c.nodes <= budget);
            while let Some((s, h)) = rest.pop() {
                c.add(walk(&p, s, h));
            }
            assert_eq!(c, want, "budget {budget}");
        }
    }

    #[test]
    fn reference_default_tree() {
        // The reference's own check of its default parameters: 1,732 nodes, 1,050
        // leaves.
        let c = uts_seq(&Params::default());
        assert_eq!((c.nodes, c.leaves), (1732, 1050));
    }

    #[test]
    fn rng_is_sha1_of_the_seed_and_the_child_index() {
        // SHA-1 of 20 zero bytes (seed 0), a published test value of SHA-1.
        let root = RngState::root(0);
        assert_eq!(
            root.0,
            [
                0x67, 0x68, 0x03, 0x3e, 0x21, 0x64, 0x68, 0x24, 0x7b, 0xd0, 0x31, 0xa0, 0xa2, 0xd9,
                0x87, 0x6d, 0x79, 0x81, 0x8f, 0x8f
            ]
        );
        assert_eq!(root.rand(), 0x7981_8f8f);
        assert_ne!(root.spawn(0), root.spawn(1));
        assert_eq!(root.spawn(3), root.spawn(3));
    }

    #[test]
    fn child_counts_follow_the_shapes() {
        let p = Params {
            shape: Shape::Fixed,
            depth: 3,
            ..Params::default()
        };
        let s = RngState::root(1);
        assert_eq!(p.children(3, &s), 0, "fixed: nothing at the depth limit");
        let bin = Params {
            tree: TreeType::Binomial,
            b0: 2000.0,
            ..Params::default()
        };
        assert_eq!(bin.children(0, &s), 2000, "a binomial root has b children");
        let bal = Params {
            tree: TreeType::Balanced,
            b0: 3.0,
            depth: 4,
            ..Params::default()
        };
        let c = uts_seq(&bal);
        assert_eq!((c.nodes, c.leaves, c.depth), (1 + 3 + 9 + 27 + 81, 81, 4));
    }
}
