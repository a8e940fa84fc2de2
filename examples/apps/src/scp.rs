//! Set covering instances in the OR-Library's SCP format (Beasley), and random ones.
//!
//! The format (that of `scp41.txt`): the number of rows and the number of columns;
//! the cost of every column; then for each row the number of columns that cover it
//! and their numbers (1-based). Every item is a whitespace-separated integer and the
//! line breaks carry no meaning (the files wrap the lists at a dozen numbers a line).
//! Anything else is an error naming the line and the field: a missing or malformed
//! number, a column number out of range or repeated in a row, a row that no column
//! covers (no cover exists), counts beyond the limits or beyond what the file could
//! hold, and anything after the last row.

use std::fmt;
use std::path::Path;

/// The most rows an instance may have.
pub const MAX_ROWS: usize = 1 << 20;
/// The most columns an instance may have.
pub const MAX_COLUMNS: usize = 1 << 20;
/// The most (row, column) entries an instance may have.
pub const MAX_ENTRIES: usize = 1 << 26;
/// The largest file read (512 MiB: more than the largest OR-Library instance).
pub const MAX_FILE_BYTES: u64 = 512 << 20;

/// A set covering instance: which columns cover each row, and what each costs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Instance {
    /// The number of rows (at least 1).
    pub rows: usize,
    /// The cost of each column; its length is the number of columns (at least 1).
    pub costs: Vec<u32>,
    /// For each row the columns (0-based, distinct, ascending) that cover it; none
    /// is empty.
    pub row_columns: Vec<Vec<u32>>,
}

/// A file that is not an SCP instance: the line (1-based) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The line of the offending item (the last line when the file ended early).
    pub line: usize,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.what)
    }
}

impl std::error::Error for ParseError {}

/// The file's items with their lines.
struct Tokens<'t> {
    lines: std::iter::Enumerate<std::str::Lines<'t>>,
    words: std::str::SplitWhitespace<'t>,
    line: usize,
}

impl<'t> Tokens<'t> {
    fn new(text: &'t str) -> Self {
        Tokens {
            lines: text.lines().enumerate(),
            words: "".split_whitespace(),
            line: 0,
        }
    }

    fn next_word(&mut self) -> Option<&'t str> {
        loop {
            if let Some(w) = self.words.next() {
                return Some(w);
            }
            let (i, l) = self.lines.next()?;
            self.line = i + 1;
            self.words = l.split_whitespace();
        }
    }

    fn err(&self, what: String) -> ParseError {
        ParseError {
            line: self.line.max(1),
            what,
        }
    }

    /// The next item as a number in `min..=max`; `what` names it in errors.
    fn number(&mut self, what: &dyn Fn() -> String, min: u64, max: u64) -> Result<u64, ParseError> {
        let Some(w) = self.next_word() else {
            return Err(self.err(format!("the file ends before {}", what())));
        };
        let n: u64 = w
            .parse()
            .map_err(|_| self.err(format!("{} is `{w}`, not a non-negative integer", what())))?;
        if n < min || n > max {
            return Err(self.err(format!("{} is {n}, not in {min}..={max}", what())));
        }
        Ok(n)
    }
}

impl Instance {
    /// The number of columns.
    pub fn columns(&self) -> usize {
        self.costs.len()
    }

    /// Parses an instance in the SCP format (see the module doc).
    pub fn parse(text: &str) -> Result<Instance, ParseError> {
        let mut t = Tokens::new(text);
        // Every item takes at least two bytes (a digit and a separator): counts beyond
        // that cannot be right, and nothing is allocated for them.
        let fits = (text.len() / 2 + 1) as u64;
        let rows = t.number(
            &|| "the number of rows".into(),
            1,
            (MAX_ROWS as u64).min(fits),
        )?;
        let columns = t.number(
            &|| "the number of columns".into(),
            1,
            (MAX_COLUMNS as u64).min(fits),
        )? as usize;
        let mut costs = Vec::with_capacity(columns);
        for j in 0..columns {
            costs.push(t.number(
                &|| format!("the cost of column {}", j + 1),
                0,
                u32::MAX as u64,
            )? as u32);
        }
        let mut row_columns = Vec::with_capacity(rows as usize);
        let mut entries = 0usize;
        let mut seen = vec![false; columns];
        for i in 0..rows as usize {
            let k = t.number(
                &|| format!("the number of columns of row {}", i + 1),
                0,
                columns as u64,
            )? as usize;
            if k == 0 {
                return Err(t.err(format!(
                    "row {} is covered by no column: no cover exists",
                    i + 1
                )));
            }
            entries += k;
            if entries > MAX_ENTRIES {
                return Err(t.err(format!("more than {MAX_ENTRIES} entries")));
            }
            let mut cols = Vec::with_capacity(k);
            for c in 0..k {
                let j = t.number(
                    &|| format!("column {} of row {}", c + 1, i + 1),
                    1,
                    columns as u64,
                )? as usize
                    - 1;
                if std::mem::replace(&mut seen[j], true) {
                    return Err(t.err(format!("column {} appears twice in row {}", j + 1, i + 1)));
                }
                cols.push(j as u32);
            }
            for &j in &cols {
                seen[j as usize] = false;
            }
            cols.sort_unstable();
            row_columns.push(cols);
        }
        if let Some(w) = t.next_word() {
            return Err(t.err(format!("`{w}` after the last row")));
        }
        Ok(Instance {
            rows: rows as usize,
            costs,
            row_columns,
        })
    }

    /// Reads an instance file (at most [`MAX_FILE_BYTES`]); errors name the file and
    /// the line.
    pub fn read(path: &Path) -> Result<Instance, String> {
        let name = path.display();
        let text = crate::input::read_text(path, MAX_FILE_BYTES, "the most an SCP file may hold")?;
        Instance::parse(&text).map_err(|e| format!("{name}: {e}"))
    }

    /// The instance in the SCP format, 12 numbers a line.
    pub fn to_text(&self) -> String {
        fn list(out: &mut String, items: impl Iterator<Item = u64>) {
            for (k, x) in items.enumerate() {
                out.push_str(if k % 12 == 0 { "\n" } else { " " });
                out.push_str(&x.to_string());
            }
        }
        let mut s = format!("{} {}", self.rows, self.columns());
        list(&mut s, self.costs.iter().map(|&c| c as u64));
        for r in &self.row_columns {
            s.push_str(&format!("\n{}", r.len()));
            list(&mut s, r.iter().map(|&j| j as u64 + 1));
        }
        s.push('\n');
        s
    }

    /// A random instance: each column covers each row with probability `density`
    /// (a row left uncovered gets one random column), costs uniform in 1..=100
    /// (splitmix64 from `seed`). The caller bounds the sizes (`rows * columns` draws).
    pub fn random(rows: usize, columns: usize, density: f64, seed: u64) -> Instance {
        let mut x = seed;
        let mut next = move || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let columns = columns.max(1);
        let costs = (0..columns).map(|_| (next() % 100) as u32 + 1).collect();
        let row_columns = (0..rows.max(1))
            .map(|_| {
                let mut cols: Vec<u32> = (0..columns as u32)
                    .filter(|_| ((next() >> 11) as f64 / (1u64 << 53) as f64) < density)
                    .collect();
                if cols.is_empty() {
                    cols.push((next() % columns as u64) as u32);
                }
                cols
            })
            .collect();
        Instance {
            rows: rows.max(1),
            costs,
            row_columns,
        }
    }

    /// The same instance with every cost 1 (the unicost problem: the fewest columns).
    pub fn unicost(mut self) -> Instance {
        self.costs.iter_mut().for_each(|c| *c = 1);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = "3 4\n 5 1 2\n 7\n2\n 1 2\n3 2 3\n 4\n1 4\n";

    #[test]
    fn reads_every_field() {
        let inst = Instance::parse(SMALL).unwrap();
        assert_eq!(inst.rows, 3);
        assert_eq!(inst.columns(), 4);
        assert_eq!(inst.costs, vec![5, 1, 2, 7]);
        assert_eq!(inst.row_columns, vec![vec![0, 1], vec![1, 2, 3], vec![3]]);
        assert_eq!(Instance::parse(&inst.to_text()).unwrap(), inst);
    }

    #[test]
    fn random_instances_round_trip() {
        for seed in 0..5 {
            let inst = Instance::random(20, 30, 0.1, seed);
            assert_eq!(inst.rows, 20);
            assert!(inst.row_columns.iter().all(|r| !r.is_empty()));
            assert!(inst.costs.iter().all(|&c| (1..=100).contains(&c)));
            assert_eq!(Instance::parse(&inst.to_text()).unwrap(), inst);
        }
        assert_ne!(
            Instance::random(20, 30, 0.1, 1),
            Instance::random(20, 30, 0.1, 2)
        );
    }

    fn error(text: &str) -> ParseError {
        Instance::parse(text).unwrap_err()
    }

    #[test]
    fn errors_name_the_line_and_the_field() {
        let e = error("");
        assert!(e.what.contains("the number of rows"), "{e}");
        let e = error("3 x 1 2 3 4 5 6");
        assert_eq!(e.line, 1);
        assert!(e.what.contains("the number of columns is `x`"), "{e}");
        let e = error("0 4");
        assert!(e.what.contains("the number of rows is 0"), "{e}");
        let e = error("3 4\n5 1\n2 -7");
        assert_eq!(e.line, 3);
        assert!(e.what.contains("the cost of column 4"), "{e}");
        let e = error("3 4\n5 1 2 7\n2 1 2\n3 2 3");
        assert_eq!(e.line, 4);
        assert!(
            e.what.contains("the file ends before column 3 of row 2"),
            "{e}"
        );
        let e = error("3 4\n5 1 2 7\n2 1 5");
        assert_eq!(e.line, 3);
        assert!(
            e.what.contains("column 2 of row 1 is 5, not in 1..=4"),
            "{e}"
        );
        let e = error("3 4\n5 1 2 7\n2 1 1");
        assert!(e.what.contains("column 1 appears twice in row 1"), "{e}");
        let e = error("3 4\n5 1 2 7\n0");
        assert!(e.what.contains("row 1 is covered by no column"), "{e}");
        let e = error("3 4\n5 1 2 7\n5 1 2 3 4 4");
        assert!(
            e.what.contains("the number of columns of row 1 is 5"),
            "{e}"
        );
        let e = error(&format!("{SMALL}9\n"));
        assert_eq!(e.line, 9);
        assert!(e.what.contains("`9` after the last row"), "{e}");
        // Counts the file cannot hold: nothing is allocated for them.
        let e = error("1000000 3");
        assert!(e.what.contains("the number of rows is 1000000"), "{e}");
        let e = error("1 99999999999999999999");
        assert!(e.what.contains("not a non-negative integer"), "{e}");
    }

    proptest::proptest! {
        /// Random bytes, and valid files with a byte changed or cut short, give an
        /// instance or an error, never a panic.
        #[test]
        fn damaged_input_never_panics(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200),
            seed in 0u64..1000,
            at in 0usize..10_000,
            byte in proptest::num::u8::ANY,
            cut in 0usize..10_000,
        ) {
            let _ = Instance::parse(&String::from_utf8_lossy(&bytes));
            let mut text = Instance::random(6, 9, 0.3, seed).to_text().into_bytes();
            let i = at % text.len();
            text[i] = byte;
            let _ = Instance::parse(&String::from_utf8_lossy(&text));
            text.truncate(cut % (text.len() + 1));
            if let Ok(inst) = Instance::parse(&String::from_utf8_lossy(&text)) {
                proptest::prop_assert!(inst.row_columns.iter().all(|r| !r.is_empty()));
                proptest::prop_assert!(inst.row_columns.iter().flatten().all(|&j| (j as usize) < inst.columns()));
            }
        }
    }
}
