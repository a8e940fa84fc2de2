//! Othello game-tree search with speculative parallelism and abort (thesis chapter 8,
//! the journal paper's Othello): the value of a position to a fixed depth, a best move
//! and the nodes searched.
//!
//! - [`board`]: the board as two bitboards, legal moves, flips, passes, the end of the
//!   game, perft, the position text format (64 squares `X`/`O`/`-` from a1 to h8 and
//!   the side to move, as in the FFO positions) and the square names `a1`..`h8`.
//! - [`search`]: the evaluation (square weights and mobility; the disc difference when
//!   the game is over) and the sequential negamax alpha-beta with move ordering, the
//!   reference of `--seq` and `--check`.
//! - The Satin search ([`Node`], [`othello_satin`]): a node fewer than `spawn_depth`
//!   plies from the root searches its first (best-ordered) child itself, as the
//!   sequential search does (young brothers wait), then spawns the others in a
//!   [`satin::CatchFrame`], each with the window the node has then. A child's value
//!   comes back as its error ([`Scored`]: in Satin a result that an inlet handles is
//!   thrown), and the inlet raises the node's best value and alpha; once alpha reaches
//!   beta (a cutoff), it aborts the node's other children ([`satin::Inlet::abort`]),
//!   queued or running anywhere. With `abort: false` (`--no-abort`) the others run to
//!   their end. Either way the root's window is infinite, so its value is the minimax
//!   value, the sequential search's; the best move may differ between equal values.
//!
//! Nodes are counted in the search (every visit of a position), per process
//! ([`othello_satin`] reports the ones of this process), and an aborted job counts the
//! nodes it visited up to its abort.

pub mod board;
pub mod search;

use board::{Board, Square};
use satin::{Ctx, Job};
use search::{ordered_moves, AlphaBeta, Searched, INFINITY, TICK};
use serde::{Deserialize, Serialize};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};

/// Nodes visited by the [`Node`] jobs of this process.
static NODES: AtomicU64 = AtomicU64::new(0);

/// The most plies a search may look ahead (a game has at most 60 moves; passes are
/// plies too, but a search this deep reaches nearly every game end).
pub const MAX_DEPTH: u32 = 60;

/// The result of a search: the value for the side to move, a best move (`None`: a
/// pass or the end of the game), and the nodes visited.
#[derive(Clone, Copy)]
pub struct Outcome {
    /// The value (see [`search`]).
    pub value: i32,
    /// A move of that value.
    pub best: Option<Square>,
    /// Nodes visited.
    pub nodes: u64,
}

/// Outcomes are equal when their values are: the best move may differ between moves
/// of equal value, and the nodes between searches.
impl PartialEq for Outcome {
    fn eq(&self, o: &Outcome) -> bool {
        self.value == o.value
    }
}

/// `value 12, best move d3, 1234 nodes`.
impl std::fmt::Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let best = self.best.map_or("pass".to_string(), board::square_name);
        write!(
            f,
            "value {}, best move {best}, {} nodes",
            self.value, self.nodes
        )
    }
}

/// The sequential search of `b` to `depth` plies.
pub fn othello_seq(b: &Board, depth: u32) -> Outcome {
    let (r, nodes) = search::alphabeta(b, depth);
    Outcome {
        value: r.value,
        best: r.best,
        nodes,
    }
}

/// No value: a [`Node`] never succeeds, it always passes its value to the inlet.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Never {}

/// A searched child, passed to its spawner's inlet as the child's error.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Scored {
    /// The child's value, for the child's side to move (the spawner negates it).
    pub value: i32,
    /// The move that led from the spawner to the child (`None`: a pass or the root).
    pub via: Option<Square>,
    /// The child's own best move.
    pub best: Option<Square>,
}

/// The search of one position in a window.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Node {
    /// The discs of the side to move.
    pub me: u64,
    /// The discs of the other side.
    pub opp: u64,
    /// The move that led here from the spawner (`None`: a pass or the root).
    pub via: Option<Square>,
    /// Plies to search.
    pub depth: u32,
    /// The window's lower end.
    pub alpha: i32,
    /// The window's upper end.
    pub beta: i32,
    /// This node spawns its children (all but the first) if it is above 0; its
    /// children get one less; at 0 the subtree is searched sequentially.
    pub spawn_depth: u32,
    /// Whether a cutoff aborts the other children.
    pub abort: bool,
}

impl Node {
    fn board(&self) -> Board {
        Board {
            me: self.me,
            opp: self.opp,
        }
    }

    /// The child `b` reached by `via`, searched in the window `(-beta, -alpha)`.
    fn child(&self, b: Board, via: Option<Square>, alpha: i32, beta: i32) -> Node {
        Node {
            me: b.me,
            opp: b.opp,
            via,
            depth: self.depth - 1,
            alpha: -beta,
            beta: -alpha,
            spawn_depth: self.spawn_depth - 1,
            abort: self.abort,
        }
    }
}

#[satin::job(name = "ibis_apps::othello::Node")]
impl Job for Node {
    /// Always `Err(scored)`: the value goes to the spawner's inlet.
    type Output = Result<Never, Scored>;

    fn run(self, ctx: &mut Ctx) -> Result<Never, Scored> {
        let r = search_node(ctx, &self);
        Err(Scored {
            value: r.value,
            via: self.via,
            best: r.best,
        })
    }
}

/// The sequential search of a node's subtree, counted in [`NODES`]; it stops at the
/// safe point of every [`TICK`]-th node if the job was aborted.
fn search_seq(ctx: &mut Ctx, n: &Node) -> Searched {
    let mut s = AlphaBeta::new(|| {
        NODES.fetch_add(TICK, Ordering::Relaxed);
        ctx.poll();
    });
    let r = s.search(&n.board(), n.depth, n.alpha, n.beta);
    NODES.fetch_add(s.nodes % TICK, Ordering::Relaxed);
    r
}

/// The search of a node: the same value as [`AlphaBeta::search`] in the same window
/// (a bound outside it), with its children after the first spawned if
/// `n.spawn_depth > 0`.
fn search_node(ctx: &mut Ctx, n: &Node) -> Searched {
    if n.spawn_depth == 0 || n.depth == 0 {
        return search_seq(ctx, n);
    }
    NODES.fetch_add(1, Ordering::Relaxed);
    let b = n.board();
    let m = b.moves();
    if m == 0 {
        let passed = b.pass();
        if passed.moves() == 0 {
            return Searched {
                value: b.final_score(),
                best: None,
            };
        }
        let v = -search_node(ctx, &n.child(passed, None, n.alpha, n.beta)).value;
        return Searched {
            value: v,
            best: None,
        };
    }
    let (order, count) = ordered_moves(&b, m, n.depth);
    let (mut alpha, beta) = (n.alpha, n.beta);
    // The first child is searched here, before any other is spawned.
    let first = order[0];
    let mut best = -search_node(ctx, &n.child(b.play(first), Some(first), alpha, beta)).value;
    let mut best_move = first;
    alpha = alpha.max(best);
    if alpha >= beta || count == 1 {
        return Searched {
            value: best,
            best: Some(best_move),
        };
    }
    let mut frame = ctx.catch_frame::<Scored>();
    // Spawned last to first: the newest child runs here first, so this worker takes
    // them in the sequential search's order.
    for &sq in order[1..count].iter().rev() {
        let _ = frame.spawn(n.child(b.play(sq), Some(sq), alpha, beta));
    }
    let abort = n.abort;
    let synced = frame.sync(|inlet, s: Scored| -> Result<(), Infallible> {
        let v = -s.value;
        if v > best {
            best = v;
            if let Some(sq) = s.via {
                best_move = sq;
            }
        }
        let was_open = alpha < beta;
        alpha = alpha.max(v);
        if abort && was_open && alpha >= beta {
            // A cutoff: the other children cannot change this node's value.
            inlet.abort();
        }
        Ok(())
    });
    match synced {
        Ok(_) => {}
        Err(never) => match never {},
    }
    Searched {
        value: best,
        best: Some(best_move),
    }
}

/// The Satin search of `b` to `depth` plies, spawning at the nodes fewer than
/// `spawn_depth` plies from the root; `abort`: a cutoff aborts the speculative
/// siblings. The nodes are the ones this process visited during the run.
pub fn othello_satin(
    satin: &satin::Satin,
    b: &Board,
    depth: u32,
    spawn_depth: u32,
    abort: bool,
) -> Outcome {
    let before = NODES.load(Ordering::Relaxed);
    let r = satin.run(Node {
        me: b.me,
        opp: b.opp,
        via: None,
        depth,
        alpha: -INFINITY,
        beta: INFINITY,
        spawn_depth,
        abort,
    });
    let nodes = NODES.load(Ordering::Relaxed) - before;
    let s = match r {
        Err(s) => s,
        Ok(never) => match never {},
    };
    Outcome {
        value: s.value,
        best: s.best,
        nodes,
    }
}
