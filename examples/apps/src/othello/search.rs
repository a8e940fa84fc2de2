//! The evaluation and the sequential searches: negamax alpha-beta with move ordering
//! (the `--seq` and `--check` reference), and plain minimax (the tests' reference for
//! alpha-beta).
//!
//! Values are from the side to move's view. A position where the game is over scores
//! [`Board::final_score`] (the disc difference, empties to the winner) at any depth;
//! any other position at depth 0 scores [`evaluate`]. A side that cannot move passes,
//! and the pass is a ply (it takes one of the depth's plies).

use super::board::{moves, Board, Square};

/// The weight of each square for [`evaluate`]: corners are worth most, the squares
/// next to them (which give the corner away) least. One entry per square, a1 first.
#[rustfmt::skip]
const WEIGHTS: [i32; 64] = [
    100, -20,  10,   5,   5,  10, -20, 100,
    -20, -40,  -2,  -2,  -2,  -2, -40, -20,
     10,  -2,   1,   1,   1,   1,  -2,  10,
      5,  -2,   1,   0,   0,   1,  -2,   5,
      5,  -2,   1,   0,   0,   1,  -2,   5,
     10,  -2,   1,   1,   1,   1,  -2,  10,
    -20, -40,  -2,  -2,  -2,  -2, -40, -20,
    100, -20,  10,   5,   5,  10, -20, 100,
];

/// The value of one legal move more than the opponent has.
pub const MOBILITY_WEIGHT: i32 = 8;

/// The squares of each distinct weight, so that the positional sum is a few popcounts.
struct WeightClasses {
    classes: [(i32, u64); 12],
    len: usize,
}

const fn weight_classes() -> WeightClasses {
    let mut classes = [(0i32, 0u64); 12];
    let mut len = 0;
    let mut sq = 0;
    while sq < 64 {
        let w = WEIGHTS[sq];
        let mut i = 0;
        while i < len && classes[i].0 != w {
            i += 1;
        }
        if i == len {
            classes[len] = (w, 0);
            len += 1;
        }
        classes[i].1 |= 1u64 << sq;
        sq += 1;
    }
    WeightClasses { classes, len }
}

static CLASSES: WeightClasses = weight_classes();

/// The static evaluation of a position whose game is not over, for the side to move:
/// the square weights of its discs minus the opponent's, plus [`MOBILITY_WEIGHT`]
/// times its legal moves minus the opponent's.
#[inline]
pub fn evaluate(b: &Board) -> i32 {
    let mut v = 0;
    for &(w, mask) in &CLASSES.classes[..CLASSES.len] {
        v += w * ((b.me & mask).count_ones() as i32 - (b.opp & mask).count_ones() as i32);
    }
    let mobility = b.moves().count_ones() as i32 - moves(b.opp, b.me).count_ones() as i32;
    v + MOBILITY_WEIGHT * mobility
}

/// Larger than every value (evaluations stay within a few thousand).
pub const INFINITY: i32 = 1 << 20;

/// The move ordering: with `depth` plies to search below, the legal moves `m` of `b`,
/// best first. At depth 3 and more: the fewest replies for the opponent first, then
/// the higher square weight; below, by square weight only (the ordering costs more than
/// it saves near the leaves). Ties keep the square order.
pub fn ordered_moves(b: &Board, m: u64, depth: u32) -> ([Square; 64], usize) {
    let mut keyed = [(0i32, 0u8); 64];
    let mut n = 0;
    let mut rest = m;
    while rest != 0 {
        let sq = rest.trailing_zeros() as Square;
        rest &= rest - 1;
        let mut key = -WEIGHTS[sq as usize];
        if depth >= 3 {
            key += 16 * b.play(sq).moves().count_ones() as i32;
        }
        keyed[n] = (key, sq);
        n += 1;
    }
    keyed[..n].sort_by_key(|&(k, _)| k);
    let mut out = [0u8; 64];
    for (o, &(_, sq)) in out.iter_mut().zip(&keyed[..n]) {
        *o = sq;
    }
    (out, n)
}

/// What a search of a position gives: its value for the side to move and the best
/// move (`None` for a pass, the end of the game, or depth 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Searched {
    /// The value.
    pub value: i32,
    /// The best move.
    pub best: Option<Square>,
}

/// The sequential alpha-beta search, counting the nodes it visits. `tick` is called
/// every [`TICK`] nodes (the Satin version's safe point and node flush).
pub struct AlphaBeta<F: FnMut()> {
    /// Nodes visited so far (every call of the search: interior nodes, passes and
    /// leaves).
    pub nodes: u64,
    tick: F,
}

/// How often [`AlphaBeta`] calls its tick, in nodes.
pub const TICK: u64 = 256;

impl<F: FnMut()> AlphaBeta<F> {
    /// A search that calls `tick` every [`TICK`] nodes.
    pub fn new(tick: F) -> Self {
        AlphaBeta { nodes: 0, tick }
    }

    /// Negamax alpha-beta (fail-soft) of `b` to `depth` plies in the window
    /// `(alpha, beta)`: the exact value when it lies inside, an upper bound when it
    /// is at most `alpha`, a lower bound when it is at least `beta`.
    pub fn search(&mut self, b: &Board, depth: u32, mut alpha: i32, beta: i32) -> Searched {
        self.nodes += 1;
        if self.nodes.is_multiple_of(TICK) {
            (self.tick)();
        }
        let m = b.moves();
        if m == 0 {
            let passed = b.pass();
            if passed.moves() == 0 {
                return Searched {
                    value: b.final_score(),
                    best: None,
                };
            }
            if depth == 0 {
                return Searched {
                    value: evaluate(b),
                    best: None,
                };
            }
            let v = -self.search(&passed, depth - 1, -beta, -alpha).value;
            return Searched {
                value: v,
                best: None,
            };
        }
        if depth == 0 {
            return Searched {
                value: evaluate(b),
                best: None,
            };
        }
        let (order, n) = ordered_moves(b, m, depth);
        let mut best = -INFINITY;
        let mut best_move = order[0];
        for &sq in &order[..n] {
            let v = -self.search(&b.play(sq), depth - 1, -beta, -alpha).value;
            if v > best {
                best = v;
                best_move = sq;
                if v > alpha {
                    alpha = v;
                    if alpha >= beta {
                        break;
                    }
                }
            }
        }
        Searched {
            value: best,
            best: Some(best_move),
        }
    }
}

/// The sequential alpha-beta search of `b` to `depth` plies with the full window: its
/// minimax value, a best move and the nodes visited.
pub fn alphabeta(b: &Board, depth: u32) -> (Searched, u64) {
    let mut s = AlphaBeta::new(|| {});
    let r = s.search(b, depth, -INFINITY, INFINITY);
    (r, s.nodes)
}

/// Plain minimax (negamax without pruning) of `b` to `depth` plies: the reference
/// value for the tests (it visits every node).
pub fn minimax(b: &Board, depth: u32) -> i32 {
    let mut m = b.moves();
    if m == 0 {
        let passed = b.pass();
        if passed.moves() == 0 {
            return b.final_score();
        }
        if depth == 0 {
            return evaluate(b);
        }
        return -minimax(&passed, depth - 1);
    }
    if depth == 0 {
        return evaluate(b);
    }
    let mut best = -INFINITY;
    while m != 0 {
        let sq = m.trailing_zeros() as Square;
        m &= m - 1;
        best = best.max(-minimax(&b.play(sq), depth - 1));
    }
    best
}
