//! Othello: move generation against the known perft counts, alpha-beta against plain
//! minimax, the Satin search against the sequential one (with and without abort), and
//! the position format.

use ibis_apps::othello::board::{
    self, parse_square, square_name, Board, Colour, Position, PositionError,
};
use ibis_apps::othello::search::{self, alphabeta, minimax, AlphaBeta};
use ibis_apps::othello::{othello_satin, othello_seq};
use satin::Satin;

/// The published perft counts of the initial position, depths 1-9 (a pass is a ply;
/// depths 1-8 hold no pass, the first 24 are at depth 9).
const PERFT: [u64; 9] = [4, 12, 56, 244, 1396, 8200, 55092, 390216, 3005288];

#[test]
fn perft_of_the_initial_position() {
    for (d, &want) in PERFT.iter().enumerate() {
        assert_eq!(Board::INITIAL.perft(d as u32 + 1), want, "depth {}", d + 1);
    }
}

fn names(mut m: u64) -> Vec<String> {
    let mut v = Vec::new();
    while m != 0 {
        v.push(square_name(m.trailing_zeros() as u8));
        m &= m - 1;
    }
    v
}

#[test]
fn the_opening_moves_and_flips() {
    // Black's four opening moves.
    assert_eq!(names(Board::INITIAL.moves()), ["d3", "c4", "f5", "e6"]);
    // d3 flips d4: Black then has d3 d4 d5 e4, White e5 alone, and White to move
    // may answer c3, e3 or c5.
    let after = Board::INITIAL.play(parse_square("d3").unwrap());
    assert_eq!(names(after.opp), ["d3", "d4", "e4", "d5"]);
    assert_eq!(names(after.me), ["e5"]);
    assert_eq!(names(after.moves()), ["c3", "e3", "c5"]);
    assert_eq!(
        board::flips(after.me, after.opp, parse_square("h8").unwrap()),
        0
    );
}

#[test]
fn square_names() {
    assert_eq!(square_name(0), "a1");
    assert_eq!(square_name(7), "h1");
    assert_eq!(square_name(8), "a2");
    assert_eq!(square_name(63), "h8");
    for sq in 0..64 {
        assert_eq!(parse_square(&square_name(sq)), Some(sq));
    }
    for bad in ["", "a", "a9", "i1", "a0", "a10", "11"] {
        assert_eq!(parse_square(bad), None, "{bad:?}");
    }
    assert_eq!(parse_square("H8"), Some(63));
}

/// Deterministic pseudo-random games: the position after `plies` plies of the game
/// numbered `seed` (passes included; stops early at the end of the game).
fn played(seed: u64, plies: u32) -> Board {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut b = Board::INITIAL;
    for _ in 0..plies {
        if b.game_over() {
            break;
        }
        let m = b.moves();
        if m == 0 {
            b = b.pass();
            continue;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let k = (x % u64::from(m.count_ones())) as usize;
        let mut rest = m;
        for _ in 0..k {
            rest &= rest - 1;
        }
        b = b.play(rest.trailing_zeros() as u8);
    }
    b
}

/// Plies that reach the end of the game from `b` on every line: a move per empty
/// square, a pass between two moves at most, and one before the first.
fn to_the_end(b: &Board) -> u32 {
    2 * b.empties() + 1
}

/// Test positions and depths: the initial one, middle games, and end games (about 10
/// empty squares, searched to the end of the game, passes included).
fn positions() -> Vec<(Board, u32)> {
    let mut v = vec![(Board::INITIAL, 6)];
    for seed in 1..=4 {
        v.push((played(seed, 20), 5));
    }
    for seed in 1..=4 {
        let b = played(seed, 50);
        v.push((b, to_the_end(&b)));
    }
    v
}

#[test]
fn the_end_games_have_passes_and_reach_the_end() {
    // Some end game in `positions` has a pass in its tree, so the pass is tested.
    let passes = |b: &Board, d: u32| {
        fn walk(b: &Board, d: u32) -> u64 {
            if d == 0 || b.game_over() {
                return 0;
            }
            let mut m = b.moves();
            if m == 0 {
                return 1 + walk(&b.pass(), d - 1);
            }
            let mut n = 0;
            while m != 0 {
                let sq = m.trailing_zeros() as u8;
                m &= m - 1;
                n += walk(&b.play(sq), d - 1);
            }
            n
        }
        walk(b, d)
    };
    assert!(positions().iter().any(|(b, d)| passes(b, *d) > 0));
}

#[test]
fn alphabeta_equals_minimax() {
    for (b, depth) in positions() {
        for d in 1..=depth.min(4) {
            assert_eq!(alphabeta(&b, d).0.value, minimax(&b, d), "{b:?} depth {d}");
        }
    }
    // End games to the end: the value is the final disc difference.
    for seed in 1..=4 {
        let b = played(seed, 52);
        let d = to_the_end(&b);
        let (r, _) = alphabeta(&b, d);
        assert_eq!(r.value, minimax(&b, d), "{b:?}");
        assert!(r.value.abs() <= 64);
    }
}

#[test]
fn alphabeta_bounds_outside_the_window() {
    // Fail-soft: a value at most alpha is an upper bound, at least beta a lower bound,
    // inside the window exact.
    for (b, depth) in positions() {
        let d = depth.min(4);
        let exact = minimax(&b, d);
        for (alpha, beta) in [
            (exact - 1, exact + 1),
            (exact, exact + 5),
            (exact - 5, exact),
        ] {
            let r = AlphaBeta::new(|| {}).search(&b, d, alpha, beta).value;
            if r <= alpha {
                assert!(exact <= r, "{b:?} ({alpha}, {beta}): {r} vs {exact}");
            } else if r >= beta {
                assert!(exact >= r, "{b:?} ({alpha}, {beta}): {r} vs {exact}");
            } else {
                assert_eq!(r, exact, "{b:?} ({alpha}, {beta})");
            }
        }
    }
}

#[test]
fn alphabeta_prunes() {
    // Plain minimax visits every node of the tree, depths 0..=6 of the perft counts
    // (no pass or game end that shallow); alpha-beta far fewer.
    let (_, ab) = alphabeta(&Board::INITIAL, 6);
    let tree: u64 = 1 + PERFT[..6].iter().sum::<u64>();
    assert!(ab < tree / 2, "{ab} nodes of {tree}");
}

#[test]
fn final_score_gives_the_empties_to_the_winner() {
    // 40 black discs, 20 white, 4 empty, Black to move: 40 - 20 + 4.
    let me = (1u64 << 40) - 1;
    let opp = ((1u64 << 60) - 1) & !me;
    let b = Board { me, opp };
    assert_eq!(b.final_score(), 24);
    assert_eq!(b.pass().final_score(), -24);
    let draw = Board {
        me: (1u64 << 30) - 1,
        opp: ((1u64 << 60) - 1) & !((1u64 << 30) - 1),
    };
    assert_eq!(draw.final_score(), 0);
}

/// FFO endgame test positions 40 and 41 (public test data: 20 and 22 empty squares,
/// Black to move).
const FFO_40: &str = include_str!("data/ffo-40.txt");
const FFO_41: &str = include_str!("data/ffo-41.txt");

fn ffo(text: &str) -> Board {
    let p = Position::parse(text).expect("an FFO position");
    assert_eq!(p.to_move, Colour::Black);
    p.board
}

#[test]
fn the_ffo_files_are_read() {
    let b = ffo(FFO_40);
    assert_eq!(b.empties(), 20);
    // Position 40: Black (X) has 12 discs, White 32; Black's moves include a2, the
    // known best one.
    assert_eq!((b.me.count_ones(), b.opp.count_ones()), (12, 32));
    assert!(b.moves() & (1 << parse_square("a2").unwrap()) != 0);
    assert_eq!(ffo(FFO_41).empties(), 22);
}

fn pools() -> Vec<Satin> {
    [1, 2, 4]
        .iter()
        .map(|&n| Satin::builder().workers(n).build().unwrap())
        .collect()
}

#[test]
fn satin_equals_the_sequential_value() {
    let pools = pools();
    let mut cases = positions();
    cases.push((Board::INITIAL, 8));
    cases.push((ffo(FFO_40), 5));
    cases.push((ffo(FFO_41), 4));
    for (b, depth) in cases {
        let want = othello_seq(&b, depth);
        for s in &pools {
            for spawn_depth in [0, 1, 3, 60] {
                for abort in [true, false] {
                    let got = othello_satin(s, &b, depth, spawn_depth, abort);
                    assert_eq!(
                        got.value,
                        want.value,
                        "{b:?} depth {depth} spawn {spawn_depth} abort {abort} on {} workers",
                        s.workers()
                    );
                    // The move printed is one of that value.
                    if let Some(sq) = got.best {
                        assert!(b.moves() & (1 << sq) != 0);
                        let v = -alphabeta(&b.play(sq), depth - 1).0.value;
                        assert_eq!(v, want.value, "{b:?}: {}", square_name(sq));
                    }
                }
            }
        }
    }
}

#[test]
fn abort_searches_fewer_nodes() {
    // One worker runs the spawned children in order: without abort it runs every one,
    // with abort it drops the queued ones after a cutoff, so it visits fewer nodes.
    let s = Satin::builder().workers(1).build().unwrap();
    let b = played(7, 16);
    let with = othello_satin(&s, &b, 7, 60, true);
    let without = othello_satin(&s, &b, 7, 60, false);
    assert_eq!(with.value, without.value);
    assert!(
        with.nodes < without.nodes,
        "{} nodes with abort, {} without",
        with.nodes,
        without.nodes
    );
}

#[test]
fn the_position_format() {
    let initial = "---------------------------OX------XO--------------------------- X";
    assert_eq!(Position::parse(initial).unwrap(), Position::INITIAL);
    assert_eq!(Position::INITIAL.to_string(), initial);
    // Rows on lines, lower case, `.` for empty, comments.
    let rows = "; the initial position\n........\n........\n........\n...ox...\n\
                ...xo...\n........\n........\n........\nx # Black to move\n";
    assert_eq!(Position::parse(rows).unwrap(), Position::INITIAL);
    // White to move: the board is from White's view.
    let w = Position::parse(&initial.replace(" X", " O")).unwrap();
    assert_eq!(w.to_move, Colour::White);
    assert_eq!(w.board, Board::INITIAL.pass());
    assert_eq!(w.discs(Colour::Black), Board::INITIAL.me);
}

#[test]
fn malformed_positions_are_clear_errors() {
    let initial = "---------------------------OX------XO--------------------------- X";
    let cases: [(String, PositionError); 6] = [
        (initial[..60].to_string(), PositionError::TooFewSquares(60)),
        (initial[..64].to_string(), PositionError::NoSide),
        (
            initial.replace(" X", " X X"),
            PositionError::TrailingText { ch: 'X', at: 66 },
        ),
        (
            initial.replacen('-', "?", 1),
            PositionError::BadCharacter { ch: '?', at: 1 },
        ),
        (
            initial.replace(" X", " -"),
            PositionError::BadCharacter { ch: '-', at: 65 },
        ),
        (String::new(), PositionError::TooFewSquares(0)),
    ];
    for (text, want) in cases {
        let e = Position::parse(&text).unwrap_err();
        assert_eq!(e, want, "{text:?}");
        assert!(!e.to_string().is_empty());
    }
    // The messages say what a position is.
    let e = Position::parse("x").unwrap_err().to_string();
    assert!(e.contains("64"), "{e}");
}

#[test]
fn search_evaluates_from_the_side_to_move() {
    // The evaluation is antisymmetric in the side to move.
    for (b, _) in positions() {
        if !b.game_over() {
            assert_eq!(search::evaluate(&b), -search::evaluate(&b.pass()));
        }
    }
}

proptest::proptest! {
    /// Any text is a position or a typed error, never a panic; a position read prints
    /// as text that reads back to it.
    #[test]
    fn any_text_parses_or_is_an_error(text in "[XOxo*.\\- ;#\\n?a-z]{0,90}") {
        if let Ok(p) = Position::parse(&text) {
            proptest::prop_assert_eq!(Position::parse(&p.to_string()), Ok(p));
        }
    }

    /// Every board of 64 squares and a side reads, and prints as the same text.
    #[test]
    fn every_board_reads_and_prints_back(text in "[XO\\-]{64} [XO]") {
        let p = Position::parse(&text);
        proptest::prop_assert!(p.is_ok(), "{:?}", p);
        proptest::prop_assert_eq!(p.map(|p| p.to_string()), Ok(text));
    }

    /// Squares flipped by any move on any board are the opponent's, and a legal move
    /// flips at least one.
    #[test]
    fn flips_are_the_opponents_discs(me in proptest::num::u64::ANY, opp in proptest::num::u64::ANY, sq in 0u8..64) {
        let opp = opp & !me;
        let f = board::flips(me, opp, sq);
        proptest::prop_assert_eq!(f & !opp, 0);
        let legal = board::moves(me, opp) & (1 << sq) != 0;
        proptest::prop_assert_eq!(legal, f != 0 && (me | opp) & (1 << sq) == 0);
    }
}
