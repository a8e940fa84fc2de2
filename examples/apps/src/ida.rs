//! IDA* (Korf, 1985) on the 15-puzzle: the optimal number of moves of each instance of
//! a file, with the Manhattan-distance heuristic (the IDA* application of the Satin
//! thesis, section 2.7).
//!
//! Input: a text file, one instance per line: 16 distinct tiles `0..=15` separated by
//! white space, row by row, `0` the blank; a line of 17 numbers starts with the
//! instance's number (as in Korf's published list of 100 random instances). Empty
//! lines and lines starting with `#` are skipped. The goal is `0 1 2 ... 15` (the
//! blank in the upper left corner). An instance of the wrong parity (no sequence of
//! moves reaches the goal) is an error naming its line, as is anything else that is
//! not an instance; files are read up to [`MAX_FILE_BYTES`].
//!
//! The search: iteration after iteration, a depth-first search from the start that
//! cuts every node whose `f = g + h` (moves made plus Manhattan distance) exceeds the
//! iteration's bound, never undoing the previous move. The first bound is the start's
//! distance; every move changes the distance by exactly one, so the parity of `f` is
//! fixed and the bound grows by 2. The iteration that finds the goal is searched
//! whole: the result counts every solution at the optimal length (the number of
//! shortest move sequences) and every node expanded in every iteration (a node is
//! expanded when `f <= bound` and it is not the goal: its children are generated).
//! The counts do not depend on the order of the search, so the Satin version's result
//! equals the sequential one.
//!
//! The board is 16 four-bit tiles in a `u64` (position `i` in bits `4i..4i+4`); a move
//! slides a tile into the blank and updates the distance by that tile's change only.
//! The Satin version spawns one job per child down to a spawn depth (moves from the
//! start) and searches sequentially below; each job carries the board, the blank's
//! position, `g`, the bound and the last move, and returns (nodes expanded,
//! solutions).

use satin::{Ctx, Job};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::Path;

/// The longest optimal solution of any 15-puzzle instance (Brüngger et al., 1999): no
/// iteration beyond this bound is searched.
pub const MAX_MOVES: u32 = 80;

/// The default spawn depth of the Satin version (`--spawn-depth`), by measurement on
/// Korf's instance 1 (347 million nodes): with one worker the spawns of depths 8 and 12
/// cost no measurable time against the sequential search (3.53 s of CPU each; 16 costs
/// 2%), and on 2 processes the members idled 230 ms in all with 8 and 40 ms with 12.
pub const DEFAULT_SPAWN_DEPTH: u8 = 12;

/// The largest input file read (4 MiB: some 100,000 instances, far more than IDA*
/// solves in any reasonable time).
pub const MAX_FILE_BYTES: u64 = 4 << 20;

/// "No previous move" (the root): its opposite, `NO_MOVE ^ 1`, is no move either.
const NO_MOVE: u8 = 4;

/// A move of the blank: up, down, left, right (`d ^ 1` undoes `d`).
const DIRS: [(i8, i8); 4] = [(-1, 0), (1, 0), (0, -1), (0, 1)];

/// For every position of the blank, its moves (direction, the blank's new position),
/// unused entries with direction [`NO_MOVE`].
const MOVES: [[(u8, u8); 4]; 16] = {
    let mut t = [[(NO_MOVE, 0u8); 4]; 16];
    let mut p = 0;
    while p < 16 {
        let (r, c) = ((p / 4) as i8, (p % 4) as i8);
        let (mut d, mut k) = (0, 0);
        while d < 4 {
            let (nr, nc) = (r + DIRS[d].0, c + DIRS[d].1);
            if nr >= 0 && nr < 4 && nc >= 0 && nc < 4 {
                t[p][k] = (d as u8, (nr * 4 + nc) as u8);
                k += 1;
            }
            d += 1;
        }
        p += 1;
    }
    t
};

/// `DIST[tile][position]`: the Manhattan distance of `tile` at `position` from its goal
/// position (`tile` itself); 0 for the blank.
const DIST: [[u8; 16]; 16] = {
    let mut t = [[0u8; 16]; 16];
    let mut tile = 1;
    while tile < 16 {
        let mut p = 0;
        while p < 16 {
            let dr = (p / 4) as i32 - (tile / 4) as i32;
            let dc = (p % 4) as i32 - (tile % 4) as i32;
            t[tile][p] = (dr.abs() + dc.abs()) as u8;
            p += 1;
        }
        tile += 1;
    }
    t
};

/// The tile at `pos` of `board`.
#[inline(always)]
fn tile_at(board: u64, pos: usize) -> usize {
    ((board >> (4 * pos)) & 15) as usize
}

/// One instance: its tiles packed in a `u64`, checked solvable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Puzzle {
    /// The instance's number: the one given on its line, else its place in the file
    /// (from 1).
    pub id: u64,
    /// Position `i`'s tile in bits `4i..4i+4`.
    pub board: u64,
}

impl Puzzle {
    /// The instance with `tiles` (row by row, 0 the blank), if they are a permutation
    /// of `0..=15` that can reach the goal; else what is wrong.
    pub fn new(id: u64, tiles: &[u8; 16]) -> Result<Self, String> {
        let mut seen = [false; 16];
        for &t in tiles {
            let t = t as usize;
            if t > 15 {
                return Err(format!("tile {t} is not in 0..=15"));
            }
            if seen[t] {
                return Err(format!("tile {t} appears twice"));
            }
            seen[t] = true;
        }
        // Every move swaps the blank with a tile (a transposition) and moves the blank
        // by one row or column: the permutation's parity and the parity of the blank's
        // distance from its goal corner change together. The goal has both even.
        let inversions: usize = (0..16)
            .map(|i| (i + 1..16).filter(|&j| tiles[j] < tiles[i]).count())
            .sum();
        let blank = tiles.iter().position(|&t| t == 0).unwrap_or(0);
        if inversions % 2 != (blank / 4 + blank % 4) % 2 {
            return Err(
                "the instance cannot reach the goal 0 1 2 ... 15 (the parity of the tiles' \
                 permutation differs from the parity of the blank's distance to its goal \
                 corner)"
                    .to_string(),
            );
        }
        let board = tiles
            .iter()
            .enumerate()
            .fold(0u64, |b, (i, &t)| b | (t as u64) << (4 * i));
        Ok(Puzzle { id, board })
    }

    /// The tiles, row by row.
    pub fn tiles(&self) -> [u8; 16] {
        std::array::from_fn(|i| tile_at(self.board, i) as u8)
    }

    /// The search's root: the start, no move made.
    pub fn root(&self, bound: u32) -> Node {
        Node {
            board: self.board,
            blank: blank_of(self.board, 0).unwrap_or(0) as u8,
            g: 0,
            h: manhattan(self.board) as u8,
            bound: bound.min(MAX_MOVES) as u8,
            last: NO_MOVE,
        }
    }
}

/// The Manhattan distance of `board` from the goal.
pub fn manhattan(board: u64) -> u32 {
    (0..16).map(|p| DIST[tile_at(board, p)][p] as u32).sum()
}

/// A node of one iteration's search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    /// The tiles (see [`Puzzle::board`]).
    pub board: u64,
    /// The blank's position.
    pub blank: u8,
    /// Moves made from the start.
    pub g: u8,
    /// The Manhattan distance from the goal.
    pub h: u8,
    /// The iteration's bound on `g + h`.
    pub bound: u8,
    /// The move that led here (a direction, 4 at the root).
    pub last: u8,
}

impl Node {
    /// The children: every move of the blank but the one undoing the last move.
    fn children(self) -> impl Iterator<Item = Node> {
        let undo = self.last ^ 1;
        MOVES[self.blank as usize & 15]
            .into_iter()
            .filter(move |&(d, _)| d != NO_MOVE && d != undo)
            .map(move |(d, to)| {
                let (from, to) = (self.blank as usize & 15, to as usize);
                let t = tile_at(self.board, to);
                Node {
                    board: (self.board & !(15 << (4 * to))) | ((t as u64) << (4 * from)),
                    blank: to as u8,
                    g: self.g + 1,
                    h: (self.h + DIST[t][from]).wrapping_sub(DIST[t][to]),
                    bound: self.bound,
                    last: d,
                }
            })
    }
}

/// What the search of one subtree in one iteration found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Count {
    /// Nodes expanded.
    pub nodes: u64,
    /// Goals reached (at the bound: see the module doc).
    pub solutions: u64,
}

impl Count {
    fn add(&mut self, o: Count) {
        self.nodes += o.nodes;
        self.solutions += o.solutions;
    }
}

/// The depth-first search below `n` (inclusive) within its bound.
fn dfs(board: u64, blank: usize, g: u32, h: u32, bound: u32, last: u8, c: &mut Count) {
    if g + h > bound {
        return;
    }
    if h == 0 {
        c.solutions += 1;
        return;
    }
    c.nodes += 1;
    let undo = last ^ 1;
    for &(d, to) in &MOVES[blank] {
        if d == NO_MOVE {
            break;
        }
        if d == undo {
            continue;
        }
        let to = to as usize;
        let t = tile_at(board, to);
        let child = (board & !(15 << (4 * to))) | ((t as u64) << (4 * blank));
        let h = h + DIST[t][blank] as u32 - DIST[t][to] as u32;
        dfs(child, to, g + 1, h, bound, d, c);
    }
}

/// The position of the blank of `board`: `hint` if it holds the blank, else the
/// first position that does (none: `board` is not a board).
fn blank_of(board: u64, hint: u8) -> Option<usize> {
    let hint = hint as usize & 15;
    if tile_at(board, hint) == 0 {
        return Some(hint);
    }
    (0..16).find(|&p| tile_at(board, p) == 0)
}

impl Node {
    /// The node with its distance and blank taken from its board (a job from the wire
    /// is not trusted to agree with itself); `None` if the board has no blank.
    fn checked(self) -> Option<Node> {
        Some(Node {
            blank: blank_of(self.board, self.blank)? as u8,
            h: manhattan(self.board) as u8,
            ..self
        })
    }
}

/// One iteration's search of the subtree of `n`, sequentially.
pub fn search(n: Node) -> Count {
    let mut c = Count::default();
    let Some(n) = n.checked() else {
        return c;
    };
    dfs(
        n.board,
        n.blank.into(),
        n.g.into(),
        n.h.into(),
        n.bound.into(),
        n.last,
        &mut c,
    );
    c
}

/// An instance's answer (its `Debug` is short: `12: 45 moves, 329931 nodes, 1
/// solutions`, the result `--check` compares is a list of them).
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Solved {
    /// The instance's number.
    pub id: u64,
    /// The optimal number of moves.
    pub length: u32,
    /// Nodes expanded over all iterations.
    pub nodes: u64,
    /// The number of optimal move sequences (0 only if none was found within
    /// [`MAX_MOVES`], which no solvable instance needs).
    pub solutions: u64,
}

impl fmt::Debug for Solved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} moves, {} nodes, {} solutions",
            self.id, self.length, self.nodes, self.solutions
        )
    }
}

impl fmt::Display for Solved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.solutions == 0 {
            return write!(
                f,
                "instance {}: no solution within {} moves ({} nodes expanded)",
                self.id, MAX_MOVES, self.nodes
            );
        }
        write!(
            f,
            "instance {}: optimal length {}, nodes expanded {}, optimal solutions {}",
            self.id, self.length, self.nodes, self.solutions
        )
    }
}

/// IDA* on `p`, each iteration's search done by `iteration` (given the root with the
/// iteration's bound).
pub fn ida(p: &Puzzle, mut iteration: impl FnMut(Node) -> Count) -> Solved {
    let mut bound = manhattan(p.board);
    let mut nodes = 0;
    loop {
        let c = iteration(p.root(bound));
        nodes += c.nodes;
        if c.solutions > 0 || bound + 2 > MAX_MOVES {
            return Solved {
                id: p.id,
                length: bound,
                nodes,
                solutions: c.solutions,
            };
        }
        bound += 2;
    }
}

/// Every instance, sequentially.
pub fn ida_seq(puzzles: &[Puzzle]) -> Vec<Solved> {
    puzzles.iter().map(|p| ida(p, search)).collect()
}

/// One iteration's search of a node's subtree: nodes fewer than
/// [`IdaNode::spawn_depth`] moves from the start spawn a job per child, deeper ones
/// search sequentially.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct IdaNode {
    /// The node.
    pub node: Node,
    /// Nodes at a smaller `g` spawn their children.
    pub spawn_depth: u8,
}

#[satin::job(name = "ibis_apps::ida::IdaNode")]
impl Job for IdaNode {
    type Output = Count;
    fn run(self, ctx: &mut Ctx) -> Count {
        let Some(n) = self.node.checked() else {
            return Count::default();
        };
        if n.g >= self.spawn_depth || n.g as u32 + n.h as u32 > n.bound as u32 || n.h == 0 {
            return search(n);
        }
        let mut c = Count {
            nodes: 1,
            solutions: 0,
        };
        let mut f = ctx.frame();
        let mut tickets = Vec::with_capacity(4);
        for child in n.children() {
            if child.g as u32 + child.h as u32 > child.bound as u32 {
                continue; // cut: nothing to spawn
            }
            tickets.push(f.spawn(IdaNode {
                node: child,
                ..self
            }));
        }
        let r = f.sync();
        for t in tickets {
            c.add(r.get(t));
        }
        c
    }
}

/// Every instance of a file, one after the other, each iteration's tree searched by
/// [`IdaNode`] jobs: the root job of the Satin version.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ida {
    /// The instances.
    pub puzzles: Vec<Puzzle>,
    /// See [`IdaNode::spawn_depth`].
    pub spawn_depth: u8,
}

#[satin::job(name = "ibis_apps::ida::Ida")]
impl Job for Ida {
    type Output = Vec<Solved>;
    fn run(self, ctx: &mut Ctx) -> Vec<Solved> {
        let spawn_depth = self.spawn_depth;
        self.puzzles
            .iter()
            .map(|p| {
                ida(p, |node| {
                    let mut f = ctx.frame();
                    let t = f.spawn(IdaNode { node, spawn_depth });
                    f.sync().get(t)
                })
            })
            .collect()
    }
}

/// Reads the instances of `path` (see the module doc); an error names the file and
/// the line.
pub fn read_puzzles(path: &Path) -> Result<Vec<Puzzle>, String> {
    let name = path.display();
    let text = crate::input::read_text(path, MAX_FILE_BYTES, "the most an instance file may hold")?;
    let puzzles = parse_puzzles(&text).map_err(|e| format!("{name}:{e}"))?;
    if puzzles.is_empty() {
        return Err(format!("{name}: no instance in the file"));
    }
    Ok(puzzles)
}

/// The instances of `text` (see the module doc); an error starts with the line's
/// number and a colon.
pub fn parse_puzzles(text: &str) -> Result<Vec<Puzzle>, String> {
    let mut puzzles = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let at = |e: String| format!("{}: {e}", i + 1);
        let mut numbers = [0u64; 17];
        let mut count = 0;
        for word in line.split_whitespace() {
            let x: u64 = word
                .parse()
                .map_err(|_| at(format!("{word:?} is not a number")))?;
            if count == 17 {
                return Err(at(
                    "more than 17 numbers (16 tiles, optionally after the instance's number)"
                        .to_string(),
                ));
            }
            numbers[count] = x;
            count += 1;
        }
        let (id, tiles) = match count {
            16 => (puzzles.len() as u64 + 1, &numbers[..16]),
            17 => (numbers[0], &numbers[1..]),
            n => {
                return Err(at(format!(
                    "{n} numbers: an instance is 16 tiles, optionally after its number"
                )))
            }
        };
        let mut t = [0u8; 16];
        for (dst, &x) in t.iter_mut().zip(tiles) {
            *dst = u8::try_from(x)
                .ok()
                .filter(|&x| x <= 15)
                .ok_or_else(|| at(format!("tile {x} is not in 0..=15")))?;
        }
        puzzles.push(Puzzle::new(id, &t).map_err(at)?);
    }
    Ok(puzzles)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOAL: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];

    #[test]
    fn the_goal_takes_no_move() {
        let p = Puzzle::new(1, &GOAL).unwrap();
        assert_eq!(manhattan(p.board), 0);
        assert_eq!(
            ida_seq(&[p]),
            [Solved {
                id: 1,
                length: 0,
                nodes: 0,
                solutions: 1
            }]
        );
    }

    #[test]
    fn one_move_from_the_goal() {
        // Tile 1 slid left into the blank's corner: the blank is at position 1.
        let mut t = GOAL;
        t.swap(0, 1);
        let p = Puzzle::new(7, &t).unwrap();
        // The root is expanded; of its three children one is the goal, the others are
        // cut (f = 1 + 2).
        assert_eq!(
            ida_seq(&[p]),
            [Solved {
                id: 7,
                length: 1,
                nodes: 1,
                solutions: 1
            }]
        );
    }

    #[test]
    fn moves_and_distances() {
        // Corners have 2 moves, edges 3, the middle 4.
        let n = |p: usize| MOVES[p].iter().filter(|m| m.0 != NO_MOVE).count();
        assert_eq!((n(0), n(1), n(5), n(15)), (2, 3, 4, 2));
        assert_eq!(DIST[15][0], 6);
        assert_eq!(DIST[5][5], 0);
        assert_eq!(DIST[0][15], 0);
        // Korf's instance 1 has a Manhattan distance of 41.
        let k1 = [14, 13, 15, 7, 11, 12, 9, 5, 6, 0, 2, 1, 4, 8, 10, 3];
        assert_eq!(manhattan(Puzzle::new(1, &k1).unwrap().board), 41);
    }

    #[test]
    fn children_update_the_board_and_the_distance() {
        let k1 = [14, 13, 15, 7, 11, 12, 9, 5, 6, 0, 2, 1, 4, 8, 10, 3];
        let root = Puzzle::new(1, &k1).unwrap().root(41);
        let kids: Vec<Node> = root.children().collect();
        assert_eq!(kids.len(), 4, "the blank at position 9 has 4 moves");
        for k in kids {
            assert_eq!(k.h as u32, manhattan(k.board));
            assert_eq!(tile_at(k.board, k.blank as usize), 0);
            // No grandchild undoes the move.
            assert!(k.children().all(|c| c.board != root.board));
            assert_eq!(
                k.children().count(),
                MOVES[k.blank as usize]
                    .iter()
                    .filter(|m| m.0 != NO_MOVE)
                    .count()
                    - 1
            );
        }
    }

    #[test]
    fn unsolvable_and_malformed_instances_are_rejected() {
        let mut t = GOAL;
        t.swap(1, 2); // two tiles swapped: the other parity
        assert!(Puzzle::new(1, &t).unwrap_err().contains("cannot reach"));
        t = GOAL;
        t[3] = 5;
        assert!(Puzzle::new(1, &t).unwrap_err().contains("twice"));
        let e = parse_puzzles("# c\n\n0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 16\n").unwrap_err();
        assert!(
            e.starts_with("3: ") && e.contains("16 is not in 0..=15"),
            "{e}"
        );
        let e = parse_puzzles("0 1 2 x").unwrap_err();
        assert!(e.starts_with("1: ") && e.contains("\"x\""), "{e}");
        let e = parse_puzzles("0 1 2 3").unwrap_err();
        assert!(e.contains("4 numbers"), "{e}");
        let e = parse_puzzles(&"1 ".repeat(100)).unwrap_err();
        assert!(e.contains("more than 17"), "{e}");
        let e = parse_puzzles("2 1 0 3 4 5 6 7 8 9 10 11 12 13 14 15").unwrap_err();
        assert!(e.contains("cannot reach"), "{e}");
    }

    #[test]
    fn instance_numbers_are_read_or_counted() {
        let ps = parse_puzzles(
            "0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n\
             42 1 0 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n\
             1 0 2 3 4 5 6 7 8 9 10 11 12 13 14 15\n",
        )
        .unwrap();
        assert_eq!(ps.iter().map(|p| p.id).collect::<Vec<_>>(), [1, 42, 3]);
        assert_eq!(ps[1], Puzzle { id: 42, ..ps[2] });
    }
}
