//! IDA* finds known optimal lengths: the published lengths of Korf's instances (those
//! solved quickly), and the distances and shortest-path counts of a breadth-first
//! search from the goal, an independent method.

use ibis_apps::ida::{self, Puzzle, Solved};
use std::collections::HashMap;
use std::path::PathBuf;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// `korf100-lengths.txt`: instance number to published optimal length.
fn published_lengths() -> HashMap<u64, u32> {
    let text = std::fs::read_to_string(data("korf100-lengths.txt")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (id, len) = l.split_once(' ').unwrap();
            (id.parse().unwrap(), len.trim().parse().unwrap())
        })
        .collect()
}

#[test]
fn korf_instances_are_all_read_and_solvable() {
    // The parity check accepts every one of the 100 published (solvable) instances,
    // and their numbers are read from the lines.
    let ps = ida::read_puzzles(&data("korf100.txt")).unwrap();
    assert_eq!(ps.len(), 100);
    assert_eq!(
        ps.iter().map(|p| p.id).collect::<Vec<_>>(),
        (1..=100).collect::<Vec<_>>()
    );
    assert_eq!(published_lengths().len(), 100);
    // Each published length is at least the Manhattan distance, of the same parity.
    for p in &ps {
        let (h, len) = (ida::manhattan(p.board), published_lengths()[&p.id]);
        assert!(h <= len && (len - h) % 2 == 0, "instance {}", p.id);
    }
}

#[test]
fn ida_finds_korfs_optimal_lengths() {
    // The instances solved with fewer than ~4 million nodes (a debug build: well
    // under a second each).
    let easy = [9, 12, 19, 42, 48, 55, 79, 85, 94, 97];
    let lengths = published_lengths();
    let all = ida::read_puzzles(&data("korf100.txt")).unwrap();
    let ps: Vec<Puzzle> = all.into_iter().filter(|p| easy.contains(&p.id)).collect();
    assert_eq!(ps.len(), easy.len());
    for s in ida::ida_seq(&ps) {
        assert_eq!(s.length, lengths[&s.id], "instance {}: {s:?}", s.id);
        assert!(s.solutions >= 1 && s.nodes > 0, "{s:?}");
    }
    // The file of the pool test holds five of them.
    let five = ida::read_puzzles(&data("korf-easy.txt")).unwrap();
    let got: Vec<(u64, u32)> = ida::ida_seq(&five)
        .iter()
        .map(|s| (s.id, s.length))
        .collect();
    let want: Vec<(u64, u32)> = five.iter().map(|p| (p.id, lengths[&p.id])).collect();
    assert_eq!(got, want);
}

/// The board with the blank at `blank` moved to `to`.
fn slide(board: u64, blank: usize, to: usize) -> u64 {
    let t = (board >> (4 * to)) & 15;
    (board & !(15 << (4 * to))) | (t << (4 * blank))
}

fn neighbours(p: usize) -> impl Iterator<Item = usize> {
    let (r, c) = (p / 4, p % 4);
    [
        (r > 0).then(|| p - 4),
        (r < 3).then(|| p + 4),
        (c > 0).then(|| p - 1),
        (c < 3).then(|| p + 1),
    ]
    .into_iter()
    .flatten()
}

/// Breadth-first search from the goal to `depth`: every board within it, with its
/// distance and its number of shortest move sequences from the goal.
fn bfs(depth: u32) -> HashMap<u64, (u32, u64)> {
    let goal = (0..16u64).fold(0, |b, t| b | t << (4 * t));
    let mut seen = HashMap::from([(goal, (0u32, 1u64))]);
    let mut level = vec![goal];
    for d in 1..=depth {
        let mut next = Vec::new();
        for &b in &level {
            let paths = seen[&b].1;
            let blank = (0..16).find(|&p| (b >> (4 * p)) & 15 == 0).unwrap();
            for to in neighbours(blank) {
                let c = slide(b, blank, to);
                match seen.get_mut(&c) {
                    Some((dc, n)) if *dc == d => *n += paths,
                    Some(_) => {}
                    None => {
                        seen.insert(c, (d, paths));
                        next.push(c);
                    }
                }
            }
        }
        level = next;
    }
    seen
}

#[test]
fn ida_agrees_with_a_breadth_first_search() {
    const DEPTH: u32 = 14;
    let dist = bfs(DEPTH);
    // Boards at the two deepest levels (and a few nearer), picked in a fixed order.
    let mut picked: Vec<(u64, (u32, u64))> = dist
        .iter()
        .filter(|(_, &(d, _))| d + 1 >= DEPTH || d == 5 || d == 9)
        .map(|(&b, &v)| (b, v))
        .collect();
    picked.sort_unstable();
    let picked: Vec<_> = picked.iter().step_by(picked.len() / 40).collect();
    assert!(picked.len() >= 40);
    let puzzles: Vec<Puzzle> = picked
        .iter()
        .enumerate()
        .map(|(i, &&(b, _))| {
            let tiles: [u8; 16] = std::array::from_fn(|p| ((b >> (4 * p)) & 15) as u8);
            Puzzle::new(i as u64, &tiles).unwrap()
        })
        .collect();
    let solved = ida::ida_seq(&puzzles);
    let mut several = 0;
    for (s, &&(_, (d, paths))) in solved.iter().zip(&picked) {
        assert_eq!(
            (s.length, s.solutions),
            (d, paths),
            "instance {} (BFS: {d} moves, {paths} shortest sequences): {s:?}",
            s.id
        );
        several += usize::from(paths > 1);
    }
    assert!(several > 0, "some boards have several shortest solutions");
    // Deep boards were picked.
    assert!(solved.iter().any(|s: &Solved| s.length == DEPTH));
}
