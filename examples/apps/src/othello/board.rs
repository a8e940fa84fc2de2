//! The Othello board as two bitboards, legal moves, flips, passes, the end of the game,
//! the position text format and the square names.
//!
//! Square `i` (0..64) is bit `i`: row `i / 8` (rank 1 at the top, as in the standard
//! notation), column `i % 8` (file a on the left); a1 is bit 0, h1 bit 7, a2 bit 8,
//! h8 bit 63.

use std::fmt;

/// A square, 0..64 (see the module documentation).
pub type Square = u8;

/// The squares of file a (left column): a shift to the east must not land there.
const FILE_A: u64 = 0x0101_0101_0101_0101;
/// The squares of file h (right column).
const FILE_H: u64 = 0x8080_8080_8080_8080;

/// One step in each of the eight directions: `(shift left by, shift right by, mask
/// applied after the shift)` with exactly one of the shifts non-zero.
const DIRECTIONS: [(u32, u32, u64); 8] = [
    (1, 0, !FILE_A), // east
    (0, 1, !FILE_H), // west
    (8, 0, !0),      // south (towards rank 8)
    (0, 8, !0),      // north
    (9, 0, !FILE_A), // south-east
    (7, 0, !FILE_H), // south-west
    (0, 7, !FILE_A), // north-east
    (0, 9, !FILE_H), // north-west
];

#[inline(always)]
fn step(b: u64, (l, r, mask): (u32, u32, u64)) -> u64 {
    ((b << l) >> r) & mask
}

/// The squares where the side owning `me` may move against `opp`: empty squares from
/// which a line of one or more of `opp`'s discs ends in one of `me`'s.
#[inline]
pub fn moves(me: u64, opp: u64) -> u64 {
    let empty = !(me | opp);
    let mut all = 0;
    for d in DIRECTIONS {
        let mut x = step(me, d) & opp;
        // A line holds at most six of the opponent's discs.
        for _ in 0..5 {
            x |= step(x, d) & opp;
        }
        all |= step(x, d) & empty;
    }
    all
}

/// The discs of `opp` that a move of `me` on `sq` flips (empty if the move is not
/// legal).
#[inline]
pub fn flips(me: u64, opp: u64, sq: Square) -> u64 {
    let from = 1u64 << sq;
    let mut all = 0;
    for d in DIRECTIONS {
        let mut line = 0;
        let mut x = step(from, d);
        while x & opp != 0 {
            line |= x;
            x = step(x, d);
        }
        if x & me != 0 {
            all |= line;
        }
    }
    all
}

/// A colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Colour {
    /// Black (`X`), who moves first.
    Black,
    /// White (`O`).
    White,
}

impl Colour {
    /// The other colour.
    pub fn other(self) -> Colour {
        match self {
            Colour::Black => Colour::White,
            Colour::White => Colour::Black,
        }
    }

    /// `X` or `O`.
    pub fn letter(self) -> char {
        match self {
            Colour::Black => 'X',
            Colour::White => 'O',
        }
    }
}

/// A position seen from the side to move: its discs (`me`) and the opponent's (`opp`).
/// The colour of the side to move is kept beside it where it matters (printing).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Board {
    /// The discs of the side to move.
    pub me: u64,
    /// The discs of the other side.
    pub opp: u64,
}

impl Board {
    /// The initial position, Black to move: white discs on d4 and e5, black on d5 and
    /// e4.
    pub const INITIAL: Board = Board {
        me: (1 << 35) | (1 << 28),
        opp: (1 << 27) | (1 << 36),
    };

    /// The legal moves of the side to move.
    #[inline]
    pub fn moves(&self) -> u64 {
        moves(self.me, self.opp)
    }

    /// The position after the side to move plays `sq` (a legal move), the other side
    /// to move.
    #[inline]
    pub fn play(&self, sq: Square) -> Board {
        let f = flips(self.me, self.opp, sq);
        Board {
            me: self.opp & !f,
            opp: self.me | f | (1u64 << sq),
        }
    }

    /// The position after a pass: the same discs, the other side to move.
    #[inline]
    pub fn pass(&self) -> Board {
        Board {
            me: self.opp,
            opp: self.me,
        }
    }

    /// Whether the game is over: neither side can move.
    #[inline]
    pub fn game_over(&self) -> bool {
        self.moves() == 0 && moves(self.opp, self.me) == 0
    }

    /// The empty squares.
    #[inline]
    pub fn empties(&self) -> u32 {
        (!(self.me | self.opp)).count_ones()
    }

    /// The final score for the side to move: its discs minus the opponent's, the
    /// empty squares counted for the side with more discs (the tournament rule; a
    /// draw leaves them uncounted).
    pub fn final_score(&self) -> i32 {
        let me = self.me.count_ones() as i32;
        let opp = self.opp.count_ones() as i32;
        let empty = self.empties() as i32;
        match me.cmp(&opp) {
            std::cmp::Ordering::Greater => me - opp + empty,
            std::cmp::Ordering::Less => me - opp - empty,
            std::cmp::Ordering::Equal => 0,
        }
    }

    /// The number of move sequences of `depth` plies from this position (perft). A
    /// pass is a ply of its own (a position whose side cannot move but whose opponent
    /// can has one child, the pass); a position where the game is over is a leaf
    /// however many plies are left, and counts 1.
    pub fn perft(&self, depth: u32) -> u64 {
        if depth == 0 {
            return 1;
        }
        let mut m = self.moves();
        if m == 0 {
            let passed = self.pass();
            return if passed.moves() == 0 {
                1
            } else {
                passed.perft(depth - 1)
            };
        }
        if depth == 1 {
            return u64::from(m.count_ones());
        }
        let mut n = 0;
        while m != 0 {
            let sq = m.trailing_zeros() as Square;
            m &= m - 1;
            n += self.play(sq).perft(depth - 1);
        }
        n
    }
}

/// The name of a square in the standard notation: `a1` .. `h8` (file letter, rank
/// digit).
pub fn square_name(sq: Square) -> String {
    format!("{}{}", (b'a' + sq % 8) as char, sq / 8 + 1)
}

/// The square named `a1` .. `h8` (either case), if it is one.
pub fn parse_square(s: &str) -> Option<Square> {
    let b = s.as_bytes();
    if b.len() != 2 {
        return None;
    }
    let file = b[0].to_ascii_lowercase().wrapping_sub(b'a');
    let rank = b[1].wrapping_sub(b'1');
    (file < 8 && rank < 8).then(|| rank * 8 + file)
}

/// A position and the colour of the side to move, as read from text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Position {
    /// The discs from the side to move's view.
    pub board: Board,
    /// The colour of the side to move.
    pub to_move: Colour,
}

/// A position text that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PositionError {
    /// A character that is neither a square (`X`, `O`, `-`) nor a side.
    BadCharacter {
        /// The character.
        ch: char,
        /// Its 1-based place among the non-blank characters.
        at: usize,
    },
    /// Fewer than 64 squares.
    TooFewSquares(usize),
    /// No side to move after the 64 squares.
    NoSide,
    /// More after the side to move.
    TrailingText {
        /// The first character after it.
        ch: char,
        /// Its 1-based place among the non-blank characters.
        at: usize,
    },
}

impl fmt::Display for PositionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PositionError::BadCharacter { ch, at } => write!(
                f,
                "character {at} is {ch:?}: a square is X (black), O (white) or - (empty), \
                 the side to move X or O"
            ),
            PositionError::TooFewSquares(n) => {
                write!(f, "{n} squares, a position has 64 (then the side to move)")
            }
            PositionError::NoSide => {
                write!(f, "no side to move (X or O) after the 64 squares")
            }
            PositionError::TrailingText { ch, at } => write!(
                f,
                "character {at} is {ch:?}, after the side to move (a position is 64 \
                 squares and the side to move; `;` or `#` start a comment)"
            ),
        }
    }
}

impl std::error::Error for PositionError {}

impl Position {
    /// The initial position, Black to move.
    pub const INITIAL: Position = Position {
        board: Board::INITIAL,
        to_move: Colour::Black,
    };

    /// Reads a position: 64 squares row by row from a1 to h8 (`X` or `x` or `*`
    /// black, `O` or `o` white, `-` or `.` empty), then the side to move (`X` or `O`),
    /// as in the FFO test positions. Blanks and line ends may stand anywhere
    /// (`8 rows of 8` is fine); `;` or `#` start a comment to the end of the line.
    pub fn parse(text: &str) -> Result<Position, PositionError> {
        let mut black = 0u64;
        let mut white = 0u64;
        let mut squares = 0usize;
        let mut side: Option<Colour> = None;
        let mut at = 0usize;
        for line in text.lines() {
            let line = line.split([';', '#']).next().unwrap_or("");
            for ch in line.chars().filter(|c| !c.is_whitespace()) {
                at += 1;
                if side.is_some() {
                    return Err(PositionError::TrailingText { ch, at });
                }
                let colour = match ch {
                    'X' | 'x' | '*' => Some(Colour::Black),
                    'O' | 'o' => Some(Colour::White),
                    '-' | '.' => None,
                    _ => return Err(PositionError::BadCharacter { ch, at }),
                };
                if squares < 64 {
                    match colour {
                        Some(Colour::Black) => black |= 1 << squares,
                        Some(Colour::White) => white |= 1 << squares,
                        None => {}
                    }
                    squares += 1;
                } else {
                    match colour {
                        Some(c) => side = Some(c),
                        None => return Err(PositionError::BadCharacter { ch, at }),
                    }
                }
            }
        }
        if squares < 64 {
            return Err(PositionError::TooFewSquares(squares));
        }
        let to_move = side.ok_or(PositionError::NoSide)?;
        let board = match to_move {
            Colour::Black => Board {
                me: black,
                opp: white,
            },
            Colour::White => Board {
                me: white,
                opp: black,
            },
        };
        Ok(Position { board, to_move })
    }

    /// The discs of `c`.
    pub fn discs(&self, c: Colour) -> u64 {
        if c == self.to_move {
            self.board.me
        } else {
            self.board.opp
        }
    }
}

/// The position in the format [`Position::parse`] reads, on one line.
impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (black, white) = (self.discs(Colour::Black), self.discs(Colour::White));
        for sq in 0..64 {
            let bit = 1u64 << sq;
            let c = if black & bit != 0 {
                'X'
            } else if white & bit != 0 {
                'O'
            } else {
                '-'
            };
            write!(f, "{c}")?;
        }
        write!(f, " {}", self.to_move.letter())
    }
}
