//! N-queens: count all solutions. The board holds the queen's column per row; a
//! candidate column is checked against every earlier row (same column or diagonal).
//! Rows below [`SPAWN_ROWS`] spawn one child per valid column.

use satin::{Ctx, Job};
use serde::{Deserialize, Serialize};

/// Rows `< SPAWN_ROWS` spawn their children; deeper rows recurse sequentially.
pub const SPAWN_ROWS: usize = 4;
/// Largest supported board.
pub const MAX_N: usize = 32;

/// The columns of row `row` attacked by the queens of the earlier rows, as a bit set.
///
/// Every candidate column is checked against every earlier row for the same column or a
/// diagonal, as the algorithm prescribes; the check runs bit-parallel over the
/// candidates (one pass over the earlier rows marks the three columns each queen
/// attacks) instead of one candidate at a time, so the search visits the same boards in
/// the same order without a mispredicted branch per candidate.
#[inline]
fn attacked(board: &[u8; MAX_N], row: usize) -> u64 {
    let mut bad = 0u64;
    for (r, &c) in board.iter().enumerate().take(row.min(MAX_N)) {
        let d = (row - r) as u32;
        let q = 1u64 << (c as u32 & 63);
        bad |= q | (q << d) | (q >> d);
    }
    bad
}

/// The candidate columns of row `row` that no earlier queen attacks, lowest first.
#[inline]
fn free_columns(board: &[u8; MAX_N], row: usize, n: usize) -> u64 {
    let all = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    !attacked(board, row) & all
}

fn seq(board: &mut [u8; MAX_N], row: usize, n: usize) -> u64 {
    if row == n {
        return 1;
    }
    let mut count = 0;
    let mut free = free_columns(board, row, n);
    while free != 0 {
        board[row] = free.trailing_zeros() as u8;
        free &= free - 1;
        count += seq(board, row + 1, n);
    }
    count
}

/// The number of solutions, sequentially.
pub fn nqueens_seq(n: usize) -> u64 {
    assert!(n <= MAX_N);
    seq(&mut [0; MAX_N], 0, n)
}

/// Counts the completions of a board whose first `row` rows are placed.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct NQueens {
    /// Queen column per row (the first `row` entries are valid).
    pub board: [u8; MAX_N],
    /// The next row to place.
    pub row: u8,
    /// Board size.
    pub n: u8,
}

impl NQueens {
    /// The empty `n`×`n` board.
    pub fn new(n: usize) -> Self {
        assert!(n <= MAX_N);
        NQueens {
            board: [0; MAX_N],
            row: 0,
            n: n as u8,
        }
    }
}

#[satin::job(name = "ibis_apps::nqueens::NQueens")]
impl Job for NQueens {
    type Output = u64;
    fn run(mut self, ctx: &mut Ctx) -> u64 {
        let (row, n) = (self.row as usize, self.n as usize);
        if row >= SPAWN_ROWS || row == n {
            return seq(&mut self.board, row, n);
        }
        let mut f = ctx.frame();
        let mut tickets = Vec::with_capacity(n);
        let mut free = free_columns(&self.board, row, n);
        while free != 0 {
            let mut child = self;
            child.board[row] = free.trailing_zeros() as u8;
            child.row += 1;
            free &= free - 1;
            tickets.push(f.spawn(child));
        }
        let r = f.sync();
        tickets.into_iter().map(|t| r.get(t)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_solution_counts() {
        // OEIS A000170.
        let known = [1u64, 0, 0, 2, 10, 4, 40, 92, 352, 724, 2680];
        for (i, &k) in known.iter().enumerate() {
            assert_eq!(nqueens_seq(i + 1), k, "n = {}", i + 1);
        }
    }

    #[test]
    fn attacked_marks_column_and_both_diagonals() {
        let mut board = [0u8; MAX_N];
        board[0] = 3;
        board[1] = 7;
        // Row 2: the queen at (0, 3) attacks columns 1, 3 and 5, the one at (1, 7)
        // columns 6, 7 and 8.
        assert_eq!(
            attacked(&board, 2),
            (1 << 1) | (1 << 3) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8)
        );
        // Off the board on the left: only the column and the right diagonal remain.
        board[0] = 0;
        assert_eq!(attacked(&board, 1), 0b11);
        assert_eq!(free_columns(&board, 1, 4), 0b1100);
    }
}
