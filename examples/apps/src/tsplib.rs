//! A reader of symmetric travelling-salesperson instances in the TSPLIB 95 format
//! (G. Reinelt, "TSPLIB 95", Universität Heidelberg): the input of [`crate::tsp`].
//!
//! A file is a header of `KEYWORD : value` lines (the spaces around the colon are
//! optional) followed by data sections, and may end with `EOF`:
//!
//! - `NAME`, `COMMENT` (kept, not interpreted); `TYPE` must be `TSP` if given (`ATSP`,
//!   `HCP`, `SOP`, `CVRP`, `TOUR` files are rejected); `DIMENSION` (the number of cities,
//!   1..=[`MAX_DIMENSION`]); `EDGE_WEIGHT_TYPE`; `EDGE_WEIGHT_FORMAT`; `NODE_COORD_TYPE`
//!   (`TWOD_COORDS`, `THREED_COORDS`, `NO_COORDS`); `DISPLAY_DATA_TYPE` (ignored).
//! - `NODE_COORD_SECTION`: one line `i x y` (or `i x y z`) per city `i` in `1..=DIMENSION`,
//!   in any order, each city exactly once.
//! - `EDGE_WEIGHT_SECTION`: the weights of an `EXPLICIT` instance in the layout of
//!   `EDGE_WEIGHT_FORMAT`, as whitespace-separated integers that may wrap across lines
//!   anywhere: `FULL_MATRIX` (which must be symmetric), `UPPER_ROW`, `LOWER_ROW`,
//!   `UPPER_DIAG_ROW`, `LOWER_DIAG_ROW`, `UPPER_COL`, `LOWER_COL`, `UPPER_DIAG_COL`,
//!   `LOWER_DIAG_COL`.
//! - `DISPLAY_DATA_SECTION`: coordinates for drawing only, skipped.
//!
//! The weight types computed from coordinates use the specification's formulas and its
//! rounding `nint(x) = (int)(x + 0.5)`: `EUC_2D`, `EUC_3D`, `CEIL_2D`, `MAN_2D`,
//! `MAN_3D`, `MAX_2D`, `MAX_3D`, `ATT` (pseudo-Euclidean) and `GEO` (coordinates are
//! `DDD.MM` degrees and minutes, the earth a sphere of radius 6378.388 km).
//!
//! Every error names the line it was found on ([`ParseError`]). Nothing is allocated
//! by a number from the file before it is checked: `DIMENSION` is at most
//! [`MAX_DIMENSION`], and the coordinates and weights are stored as they are read (so the
//! memory is proportional to the file's length). Coordinates are finite with an absolute
//! value of at most [`MAX_COORD`] and weights fit a `u32`, so every distance fits a `u32`.

use std::fmt;

/// The largest `DIMENSION` accepted (a documented limit: the branch and bound of
/// [`crate::tsp`] solves far smaller instances anyway).
pub const MAX_DIMENSION: usize = 10_000;

/// The largest absolute value of a coordinate: every computed distance fits a `u32`.
pub const MAX_COORD: f64 = 1e8;

/// A malformed or unsupported file: the line (1-based; the last line for what is
/// missing at the end) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The line, counting from 1.
    pub line: usize,
    /// What is wrong there.
    pub message: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

fn fail<T>(line: usize, message: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        line,
        message: message.into(),
    })
}

/// How the distance between two cities is given (`EDGE_WEIGHT_TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightType {
    /// `EXPLICIT`: an `EDGE_WEIGHT_SECTION`.
    Explicit,
    /// `EUC_2D`: rounded Euclidean distance.
    Euc2d,
    /// `EUC_3D`.
    Euc3d,
    /// `CEIL_2D`: Euclidean distance rounded up.
    Ceil2d,
    /// `MAN_2D`: rounded Manhattan distance.
    Man2d,
    /// `MAN_3D`.
    Man3d,
    /// `MAX_2D`: the larger of the rounded coordinate differences.
    Max2d,
    /// `MAX_3D`.
    Max3d,
    /// `ATT`: pseudo-Euclidean distance.
    Att,
    /// `GEO`: geographical distance in km.
    Geo,
}

impl WeightType {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "EXPLICIT" => Self::Explicit,
            "EUC_2D" => Self::Euc2d,
            "EUC_3D" => Self::Euc3d,
            "CEIL_2D" => Self::Ceil2d,
            "MAN_2D" => Self::Man2d,
            "MAN_3D" => Self::Man3d,
            "MAX_2D" => Self::Max2d,
            "MAX_3D" => Self::Max3d,
            "ATT" => Self::Att,
            "GEO" => Self::Geo,
            _ => return None,
        })
    }

    /// The type's TSPLIB name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Explicit => "EXPLICIT",
            Self::Euc2d => "EUC_2D",
            Self::Euc3d => "EUC_3D",
            Self::Ceil2d => "CEIL_2D",
            Self::Man2d => "MAN_2D",
            Self::Man3d => "MAN_3D",
            Self::Max2d => "MAX_2D",
            Self::Max3d => "MAX_3D",
            Self::Att => "ATT",
            Self::Geo => "GEO",
        }
    }

    /// The coordinates per city the type needs (0 for `EXPLICIT`).
    fn dims(self) -> usize {
        match self {
            Self::Explicit => 0,
            Self::Euc3d | Self::Man3d | Self::Max3d => 3,
            _ => 2,
        }
    }
}

/// The layout of an `EDGE_WEIGHT_SECTION` (`EDGE_WEIGHT_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightFormat {
    /// `FUNCTION`: no section, the weights are computed from coordinates.
    Function,
    /// `FULL_MATRIX`.
    FullMatrix,
    /// `UPPER_ROW`: the upper triangle by rows, without the diagonal.
    UpperRow,
    /// `LOWER_ROW`.
    LowerRow,
    /// `UPPER_DIAG_ROW`: the upper triangle by rows, with the diagonal.
    UpperDiagRow,
    /// `LOWER_DIAG_ROW`.
    LowerDiagRow,
    /// `UPPER_COL`: the upper triangle by columns, without the diagonal.
    UpperCol,
    /// `LOWER_COL`.
    LowerCol,
    /// `UPPER_DIAG_COL`.
    UpperDiagCol,
    /// `LOWER_DIAG_COL`.
    LowerDiagCol,
}

impl WeightFormat {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "FUNCTION" => Self::Function,
            "FULL_MATRIX" => Self::FullMatrix,
            "UPPER_ROW" => Self::UpperRow,
            "LOWER_ROW" => Self::LowerRow,
            "UPPER_DIAG_ROW" => Self::UpperDiagRow,
            "LOWER_DIAG_ROW" => Self::LowerDiagRow,
            "UPPER_COL" => Self::UpperCol,
            "LOWER_COL" => Self::LowerCol,
            "UPPER_DIAG_COL" => Self::UpperDiagCol,
            "LOWER_DIAG_COL" => Self::LowerDiagCol,
            _ => return None,
        })
    }

    /// The format's TSPLIB name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Function => "FUNCTION",
            Self::FullMatrix => "FULL_MATRIX",
            Self::UpperRow => "UPPER_ROW",
            Self::LowerRow => "LOWER_ROW",
            Self::UpperDiagRow => "UPPER_DIAG_ROW",
            Self::LowerDiagRow => "LOWER_DIAG_ROW",
            Self::UpperCol => "UPPER_COL",
            Self::LowerCol => "LOWER_COL",
            Self::UpperDiagCol => "UPPER_DIAG_COL",
            Self::LowerDiagCol => "LOWER_DIAG_COL",
        }
    }

    /// The number of weights the section holds for `n` cities.
    fn count(self, n: usize) -> usize {
        match self {
            Self::Function => 0,
            Self::FullMatrix => n * n,
            Self::UpperRow | Self::LowerRow | Self::UpperCol | Self::LowerCol => {
                n * n.saturating_sub(1) / 2
            }
            _ => n * (n + 1) / 2,
        }
    }

    /// The `(row, column)` of the `k`-th weight of the section. A column-wise triangle
    /// lists the same entries as the opposite row-wise one with rows and columns
    /// exchanged, which for a symmetric matrix is the same matrix.
    fn cells(self, n: usize) -> Box<dyn Iterator<Item = (usize, usize)>> {
        match self {
            Self::Function => Box::new(std::iter::empty()),
            Self::FullMatrix => Box::new((0..n).flat_map(move |i| (0..n).map(move |j| (i, j)))),
            Self::UpperRow | Self::LowerCol => {
                Box::new((0..n).flat_map(move |i| (i + 1..n).map(move |j| (i, j))))
            }
            Self::LowerRow | Self::UpperCol => {
                Box::new((0..n).flat_map(move |i| (0..i).map(move |j| (i, j))))
            }
            Self::UpperDiagRow | Self::LowerDiagCol => {
                Box::new((0..n).flat_map(move |i| (i..n).map(move |j| (i, j))))
            }
            Self::LowerDiagRow | Self::UpperDiagCol => {
                Box::new((0..n).flat_map(move |i| (0..=i).map(move |j| (i, j))))
            }
        }
    }
}

/// Where the distances come from.
#[derive(Debug, Clone, PartialEq)]
enum Weights {
    /// Each city's coordinates (the third is 0 in two dimensions).
    Coords(Vec<[f64; 3]>),
    /// The lower triangle with the diagonal, by rows: `(i, j)` with `j <= i` at
    /// `i (i + 1) / 2 + j`.
    Triangle(Vec<u32>),
}

/// A symmetric TSP instance read from a TSPLIB file.
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// `NAME` (empty if not given).
    pub name: String,
    /// `COMMENT` (the lines joined; empty if not given).
    pub comment: String,
    /// The number of cities.
    pub dimension: usize,
    /// `EDGE_WEIGHT_TYPE`.
    pub weight_type: WeightType,
    weights: Weights,
}

/// The specification's rounding to the nearest integer, `(int)(x + 0.5)`.
fn nint(x: f64) -> i64 {
    (x + 0.5) as i64
}

/// A `GEO` coordinate `DDD.MM` in radians: degrees and minutes, with the
/// specification's value of pi.
fn geo_radians(x: f64) -> f64 {
    // The specification's value, not std's: the published optima are computed with it.
    #[allow(clippy::approx_constant)]
    const PI: f64 = 3.141592;
    let deg = x.trunc();
    let min = x - deg;
    PI * (deg + 5.0 * min / 3.0) / 180.0
}

impl Instance {
    /// The distance between cities `i` and `j` (0-based, below [`Instance::dimension`]).
    pub fn distance(&self, i: usize, j: usize) -> u32 {
        if i == j {
            return 0;
        }
        let (a, b) = match &self.weights {
            Weights::Triangle(t) => {
                let (i, j) = if j <= i { (i, j) } else { (j, i) };
                return t[i * (i + 1) / 2 + j];
            }
            Weights::Coords(c) => (c[i], c[j]),
        };
        let (xd, yd, zd) = (a[0] - b[0], a[1] - b[1], a[2] - b[2]);
        let d = match self.weight_type {
            WeightType::Euc2d => nint((xd * xd + yd * yd).sqrt()),
            WeightType::Euc3d => nint((xd * xd + yd * yd + zd * zd).sqrt()),
            WeightType::Ceil2d => (xd * xd + yd * yd).sqrt().ceil() as i64,
            WeightType::Man2d => nint(xd.abs() + yd.abs()),
            WeightType::Man3d => nint(xd.abs() + yd.abs() + zd.abs()),
            WeightType::Max2d => nint(xd.abs()).max(nint(yd.abs())),
            WeightType::Max3d => nint(xd.abs()).max(nint(yd.abs())).max(nint(zd.abs())),
            WeightType::Att => {
                let r = ((xd * xd + yd * yd) / 10.0).sqrt();
                let t = nint(r);
                if (t as f64) < r {
                    t + 1
                } else {
                    t
                }
            }
            WeightType::Geo => {
                const RRR: f64 = 6378.388;
                let (lat_i, lon_i) = (geo_radians(a[0]), geo_radians(a[1]));
                let (lat_j, lon_j) = (geo_radians(b[0]), geo_radians(b[1]));
                let q1 = (lon_i - lon_j).cos();
                let q2 = (lat_i - lat_j).cos();
                let q3 = (lat_i + lat_j).cos();
                let c = (0.5 * ((1.0 + q1) * q2 - (1.0 - q1) * q3)).clamp(-1.0, 1.0);
                (RRR * c.acos() + 1.0) as i64
            }
            // Unreachable: an explicit instance holds a triangle.
            WeightType::Explicit => 0,
        };
        // Within u32 by MAX_COORD; `as` would saturate anyway.
        d.clamp(0, u32::MAX as i64) as u32
    }

    /// The full distance matrix by rows (`n * n` entries).
    pub fn matrix(&self) -> Vec<u32> {
        let n = self.dimension;
        (0..n)
            .flat_map(|i| (0..n).map(move |j| (i, j)))
            .map(|(i, j)| self.distance(i, j))
            .collect()
    }

    /// Parses a TSPLIB file's text (see the module documentation).
    pub fn parse(text: &str) -> Result<Instance, ParseError> {
        Parser::default().run(text)
    }

    /// Parses a TSPLIB file's bytes: text in any ASCII-compatible encoding (a comment in
    /// Latin-1 is read with replacement characters).
    pub fn parse_bytes(bytes: &[u8]) -> Result<Instance, ParseError> {
        Self::parse(&String::from_utf8_lossy(bytes))
    }
}

/// The header seen so far and the sections read.
#[derive(Default)]
struct Parser {
    name: Option<String>,
    comment: Vec<String>,
    seen_type: bool,
    dimension: Option<usize>,
    weight_type: Option<WeightType>,
    format: Option<WeightFormat>,
    coord_dims: Option<usize>,
    display_type: bool,
    coords: Option<Vec<[f64; 3]>>,
    coord_count: usize,
    triangle: Option<Vec<u32>>,
}

/// The lines of the text, numbered from 1, that are not blank.
type Lines<'a> = std::iter::Peekable<Box<dyn Iterator<Item = (usize, &'a str)> + 'a>>;

/// `KEY : value`, `KEY: value`, `KEY :value`, or a bare `KEY` (a section).
fn split_keyword(line: &str) -> (&str, &str) {
    match line.split_once(':') {
        Some((k, v)) => (k.trim(), v.trim()),
        None => match line.split_once(char::is_whitespace) {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (line, ""),
        },
    }
}

/// Whether the line starts with a number (it is data, not a keyword).
fn is_data(line: &str) -> bool {
    line.split_whitespace()
        .next()
        .is_some_and(|t| t.parse::<f64>().is_ok())
}

fn coordinate(line: usize, t: &str) -> Result<f64, ParseError> {
    match t.parse::<f64>() {
        Ok(x) if x.is_finite() && x.abs() <= MAX_COORD => Ok(x),
        Ok(_) => fail(
            line,
            format!(
                "coordinate {t} is not a finite number of absolute value at most {MAX_COORD:e}"
            ),
        ),
        Err(_) => fail(line, format!("coordinate {t:?} is not a number")),
    }
}

impl Parser {
    fn run(mut self, text: &str) -> Result<Instance, ParseError> {
        let numbered: Box<dyn Iterator<Item = (usize, &str)>> = Box::new(
            text.lines()
                .enumerate()
                .map(|(i, l)| (i + 1, l.trim()))
                .filter(|(_, l)| !l.is_empty()),
        );
        let mut lines: Lines = numbered.peekable();
        let mut last = text.lines().count().max(1);
        while let Some((no, line)) = lines.next() {
            let (key, value) = split_keyword(line);
            match key.to_ascii_uppercase().as_str() {
                "EOF" => {
                    last = no;
                    break;
                }
                "NAME" => self.name = Some(once(no, "NAME", self.name.is_some(), value)?),
                "COMMENT" => self.comment.push(value.to_string()),
                "TYPE" => {
                    once(no, "TYPE", self.seen_type, value)?;
                    self.seen_type = true;
                    // Some files write `TSP (M.~Hofmeister)` or the like after the type.
                    let t = value.split_whitespace().next().unwrap_or("");
                    if t != "TSP" {
                        return fail(
                            no,
                            format!(
                                "TYPE {value:?} is not supported: only symmetric TSP \
                                 instances (TYPE: TSP) are (not ATSP, HCP, SOP, CVRP or TOUR)"
                            ),
                        );
                    }
                }
                "DIMENSION" => {
                    once(no, "DIMENSION", self.dimension.is_some(), value)?;
                    match value.parse::<usize>() {
                        Ok(n) if (1..=MAX_DIMENSION).contains(&n) => self.dimension = Some(n),
                        _ => {
                            return fail(
                                no,
                                format!("DIMENSION {value:?} is not a number of cities in 1..={MAX_DIMENSION}"),
                            )
                        }
                    }
                }
                "EDGE_WEIGHT_TYPE" => {
                    once(no, "EDGE_WEIGHT_TYPE", self.weight_type.is_some(), value)?;
                    self.weight_type =
                        Some(WeightType::parse(value).ok_or_else(|| ParseError {
                            line: no,
                            message: format!(
                                "EDGE_WEIGHT_TYPE {value:?} is not supported (EXPLICIT, EUC_2D, \
                             EUC_3D, CEIL_2D, MAN_2D, MAN_3D, MAX_2D, MAX_3D, ATT, GEO)"
                            ),
                        })?);
                }
                "EDGE_WEIGHT_FORMAT" => {
                    once(no, "EDGE_WEIGHT_FORMAT", self.format.is_some(), value)?;
                    self.format = Some(WeightFormat::parse(value).ok_or_else(|| ParseError {
                        line: no,
                        message: format!(
                            "EDGE_WEIGHT_FORMAT {value:?} is not supported (FUNCTION, \
                             FULL_MATRIX, UPPER_ROW, LOWER_ROW, UPPER_DIAG_ROW, LOWER_DIAG_ROW, \
                             UPPER_COL, LOWER_COL, UPPER_DIAG_COL, LOWER_DIAG_COL)"
                        ),
                    })?);
                }
                "NODE_COORD_TYPE" => {
                    once(no, "NODE_COORD_TYPE", self.coord_dims.is_some(), value)?;
                    self.coord_dims = Some(match value {
                        "TWOD_COORDS" => 2,
                        "THREED_COORDS" => 3,
                        "NO_COORDS" => 0,
                        _ => {
                            return fail(
                                no,
                                format!(
                                    "NODE_COORD_TYPE {value:?} is not TWOD_COORDS, \
                                     THREED_COORDS or NO_COORDS"
                                ),
                            )
                        }
                    });
                }
                "DISPLAY_DATA_TYPE" => {
                    once(no, "DISPLAY_DATA_TYPE", self.display_type, value)?;
                    self.display_type = true;
                }
                "NODE_COORD_SECTION" => self.node_coords(no, &mut lines)?,
                "EDGE_WEIGHT_SECTION" => self.edge_weights(no, &mut lines)?,
                "DISPLAY_DATA_SECTION" => {
                    // Coordinates for drawing only: skipped.
                    while lines.next_if(|(_, l)| is_data(l)).is_some() {}
                }
                _ => return fail(no, format!("unknown or unsupported keyword {key:?}")),
            }
        }
        self.finish(last)
    }

    fn dimension(&self, no: usize, section: &str) -> Result<usize, ParseError> {
        match self.dimension {
            Some(n) => Ok(n),
            None => fail(no, format!("{section} before DIMENSION")),
        }
    }

    fn node_coords(&mut self, no: usize, lines: &mut Lines) -> Result<(), ParseError> {
        if self.coords.is_some() {
            return fail(no, "a second NODE_COORD_SECTION");
        }
        // At most MAX_DIMENSION cities: checked when DIMENSION was read.
        let n = self.dimension(no, "NODE_COORD_SECTION")?;
        let mut coords = vec![[0.0; 3]; n];
        let mut seen = vec![false; n];
        let mut dims = None;
        let mut last = no;
        for read in 0..n {
            let Some((l, line)) = lines.next_if(|(_, l)| is_data(l)) else {
                let missing = seen.iter().position(|s| !s).map_or(0, |i| i + 1);
                return fail(
                    lines.peek().map_or(last, |(l, _)| *l),
                    format!(
                        "NODE_COORD_SECTION ends after {read} of {n} cities (city {missing} is missing)"
                    ),
                );
            };
            last = l;
            let t: Vec<&str> = line.split_whitespace().collect();
            let id = match t[0].parse::<usize>() {
                Ok(id) if (1..=n).contains(&id) => id,
                _ => return fail(l, format!("city {:?} is not a number in 1..={n}", t[0])),
            };
            if seen[id - 1] {
                return fail(l, format!("city {id} is given twice"));
            }
            seen[id - 1] = true;
            let k = t.len() - 1;
            if !(k == 2 || k == 3) || dims.is_some_and(|d| d != k) {
                return fail(
                    l,
                    format!(
                        "city {id} has {k} coordinates (2 or 3, the same for every city{})",
                        dims.map_or(String::new(), |d| format!(": the first had {d}"))
                    ),
                );
            }
            dims = Some(k);
            for (x, tok) in coords[id - 1].iter_mut().zip(&t[1..]) {
                *x = coordinate(l, tok)?;
            }
        }
        if let Some((l, _)) = lines.next_if(|(_, l)| is_data(l)) {
            return fail(l, format!("NODE_COORD_SECTION has more than {n} cities"));
        }
        self.coord_count = dims.unwrap_or(0);
        self.coords = Some(coords);
        Ok(())
    }

    fn edge_weights(&mut self, no: usize, lines: &mut Lines) -> Result<(), ParseError> {
        if self.triangle.is_some() {
            return fail(no, "a second EDGE_WEIGHT_SECTION");
        }
        let n = self.dimension(no, "EDGE_WEIGHT_SECTION")?;
        let format = match self.format {
            None | Some(WeightFormat::Function) => {
                return fail(
                    no,
                    "EDGE_WEIGHT_SECTION without an EDGE_WEIGHT_FORMAT of the matrix before it",
                )
            }
            Some(f) => f,
        };
        let want = format.count(n);
        let mut cells = format.cells(n);
        // The weights in the file's order, stored as they are read: proportional to the
        // file's length.
        let mut raw: Vec<u32> = Vec::new();
        let mut read = 0;
        let mut last = no;
        while read < want {
            let Some((l, line)) = lines.next_if(|(_, l)| is_data(l)) else {
                return fail(
                    lines.peek().map_or(last, |(l, _)| *l),
                    format!(
                        "EDGE_WEIGHT_SECTION ends after {read} of the {want} weights of {} for {n} cities",
                        format.name()
                    ),
                );
            };
            last = l;
            for tok in line.split_whitespace() {
                let Some((i, j)) = cells.next() else {
                    return fail(
                        l,
                        format!(
                            "EDGE_WEIGHT_SECTION has more than the {want} weights of {} for {n} cities",
                            format.name()
                        ),
                    );
                };
                let w = match tok.parse::<u32>() {
                    Ok(w) => w,
                    Err(_) => {
                        return fail(
                            l,
                            format!("weight {tok:?} is not an integer in 0..={}", u32::MAX),
                        )
                    }
                };
                read += 1;
                // A full matrix's lower cell comes after the upper one it must equal.
                if format == WeightFormat::FullMatrix && j < i && raw[j * n + i] != w {
                    return fail(
                        l,
                        format!(
                            "the matrix is not symmetric: the weight from city {} to {} is {w}, from {} to {} is {}",
                            i + 1,
                            j + 1,
                            j + 1,
                            i + 1,
                            raw[j * n + i]
                        ),
                    );
                }
                raw.push(w);
            }
        }
        // Every weight was in the file: the triangle is at most `want + n` entries.
        let mut triangle = vec![0; n * (n + 1) / 2];
        for ((i, j), w) in format.cells(n).zip(raw) {
            let (r, c) = if j <= i { (i, j) } else { (j, i) };
            triangle[r * (r + 1) / 2 + c] = w;
        }
        self.triangle = Some(triangle);
        Ok(())
    }

    fn finish(self, last: usize) -> Result<Instance, ParseError> {
        let Some(n) = self.dimension else {
            return fail(last, "no DIMENSION");
        };
        let Some(weight_type) = self.weight_type else {
            return fail(last, "no EDGE_WEIGHT_TYPE");
        };
        let weights = if weight_type == WeightType::Explicit {
            let Some(mut t) = self.triangle else {
                return fail(last, "EDGE_WEIGHT_TYPE EXPLICIT but no EDGE_WEIGHT_SECTION");
            };
            // The distance from a city to itself is 0, whatever the file says.
            for i in 0..n {
                t[i * (i + 1) / 2 + i] = 0;
            }
            Weights::Triangle(t)
        } else {
            if self.triangle.is_some() {
                return fail(
                    last,
                    format!(
                        "an EDGE_WEIGHT_SECTION, but EDGE_WEIGHT_TYPE is {}, not EXPLICIT",
                        weight_type.name()
                    ),
                );
            }
            if self.format.is_some_and(|f| f != WeightFormat::Function) {
                return fail(
                    last,
                    format!(
                        "EDGE_WEIGHT_FORMAT is a matrix, but EDGE_WEIGHT_TYPE is {}, not EXPLICIT",
                        weight_type.name()
                    ),
                );
            }
            let Some(c) = self.coords else {
                return fail(
                    last,
                    format!(
                        "EDGE_WEIGHT_TYPE {} but no NODE_COORD_SECTION",
                        weight_type.name()
                    ),
                );
            };
            if self.coord_count != weight_type.dims()
                || self.coord_dims.is_some_and(|d| d != weight_type.dims())
            {
                return fail(
                    last,
                    format!(
                        "EDGE_WEIGHT_TYPE {} needs {} coordinates per city, NODE_COORD_SECTION has {}",
                        weight_type.name(),
                        weight_type.dims(),
                        self.coord_count
                    ),
                );
            }
            Weights::Coords(c)
        };
        Ok(Instance {
            name: self.name.unwrap_or_default(),
            comment: self.comment.join("\n"),
            dimension: n,
            weight_type,
            weights,
        })
    }
}

/// A header keyword's value, given at most once.
fn once(no: usize, key: &str, seen: bool, value: &str) -> Result<String, ParseError> {
    if seen {
        fail(no, format!("{key} is given twice"))
    } else {
        Ok(value.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The 4-city matrix every layout below writes.
    const M: [[u32; 4]; 4] = [[0, 3, 5, 9], [3, 0, 4, 7], [5, 4, 0, 6], [9, 7, 6, 0]];

    fn explicit(format: &str, section: &str) -> String {
        format!(
            "NAME : tiny\nTYPE: TSP\nCOMMENT: four cities\nDIMENSION:4\n\
             EDGE_WEIGHT_TYPE : EXPLICIT\nEDGE_WEIGHT_FORMAT: {format}\n\
             EDGE_WEIGHT_SECTION\n{section}\nEOF\n"
        )
    }

    fn matrix_of(text: &str) -> Vec<u32> {
        let inst = Instance::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(inst.dimension, 4);
        inst.matrix()
    }

    #[test]
    fn every_matrix_layout_gives_the_same_matrix() {
        let want: Vec<u32> = M.iter().flatten().copied().collect();
        // Hand-written layouts, wrapped differently on purpose.
        for (format, section) in [
            ("FULL_MATRIX", "0 3 5 9\n3 0 4 7\n5 4 0 6\n9 7 6 0"),
            ("FULL_MATRIX", "0 3 5 9 3 0\n4 7 5 4 0 6 9\n7 6 0"),
            ("UPPER_ROW", "3 5 9\n4 7\n6"),
            ("UPPER_ROW", "3\n5\n9 4\n7 6"),
            ("LOWER_ROW", "3\n5 4\n9 7 6"),
            ("UPPER_DIAG_ROW", "0 3 5 9\n0 4 7\n0 6\n0"),
            ("LOWER_DIAG_ROW", "0\n3 0\n5 4 0\n9 7 6 0"),
            ("LOWER_DIAG_ROW", "0 3 0 5 4 0 9 7 6 0"),
            // Columns of the upper triangle: column 2 is 3; column 3 is 5 4; ...
            ("UPPER_COL", "3\n5 4\n9 7 6"),
            // Columns of the lower triangle: column 1 is 3 5 9; column 2 is 4 7; ...
            ("LOWER_COL", "3 5 9\n4 7\n6"),
            ("UPPER_DIAG_COL", "0\n3 0\n5 4 0\n9 7 6 0"),
            ("LOWER_DIAG_COL", "0 3 5 9\n0 4 7\n0 6\n0"),
        ] {
            assert_eq!(
                matrix_of(&explicit(format, section)),
                want,
                "{format}: {section:?}"
            );
        }
    }

    #[test]
    fn the_diagonal_is_zero_whatever_the_file_says() {
        let m = matrix_of(&explicit("UPPER_DIAG_ROW", "8 3 5 9\n8 4 7\n8 6\n8"));
        assert_eq!(m, M.iter().flatten().copied().collect::<Vec<_>>());
    }

    fn coords(kind: &str, lines: &str, n: usize) -> Instance {
        let text = format!(
            "NAME: c\nTYPE: TSP\nDIMENSION: {n}\nEDGE_WEIGHT_TYPE: {kind}\n\
             NODE_COORD_SECTION\n{lines}\nEOF\n"
        );
        Instance::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    #[test]
    fn coordinate_distances_follow_the_specification() {
        let two = "1 0 0\n2 3 4";
        assert_eq!(coords("EUC_2D", two, 2).distance(0, 1), 5);
        assert_eq!(coords("MAN_2D", two, 2).distance(0, 1), 7);
        assert_eq!(coords("MAX_2D", two, 2).distance(0, 1), 4);
        // sqrt(2) = 1.41: rounded to 1, up to 2.
        let diag = "2 1 1\n1 0 0";
        assert_eq!(coords("EUC_2D", diag, 2).distance(0, 1), 1);
        assert_eq!(coords("CEIL_2D", diag, 2).distance(1, 0), 2);
        // sqrt(10^2 / 10) = 3.16: nint is 3, below it, so 4.
        assert_eq!(coords("ATT", "1 0 0\n2 10 0", 2).distance(0, 1), 4);
        // sqrt(30^2 / 10) = 9.49: nint is 9, below it, so 10; 0 stays 0.
        assert_eq!(coords("ATT", "1 0 0\n2 0 30", 2).distance(0, 1), 10);
        assert_eq!(coords("ATT", "1 0 0\n2 0 0", 2).distance(0, 1), 0);
        let three = "1 0 0 0\n2 2 3 6";
        assert_eq!(coords("EUC_3D", three, 2).distance(0, 1), 7);
        assert_eq!(coords("MAN_3D", three, 2).distance(0, 1), 11);
        assert_eq!(coords("MAX_3D", three, 2).distance(0, 1), 6);
        // GEO: the equator, 1 degree of longitude apart: RRR * (pi/180) = 111.3 km,
        // truncated after adding 1: 112. 0.30 is 30 minutes, half a degree: 56.
        assert_eq!(coords("GEO", "1 0 0\n2 0 1", 2).distance(0, 1), 112);
        assert_eq!(coords("GEO", "1 0 0\n2 0 0.30", 2).distance(0, 1), 56);
        assert_eq!(coords("GEO", "1 0 0\n2 0 0.30", 2).distance(1, 1), 0);
    }

    #[test]
    fn cities_may_come_in_any_order() {
        let a = coords("EUC_2D", "1 0 0\n2 3 4\n3 6 8", 3);
        let b = coords("EUC_2D", "3 6 8\n1 0 0\n2 3 4", 3);
        assert_eq!(a.matrix(), b.matrix());
        assert_eq!(a.distance(0, 2), 10);
    }

    #[test]
    fn display_data_and_a_missing_eof_are_fine() {
        let text = "NAME: d\nTYPE: TSP\nDIMENSION: 4\nEDGE_WEIGHT_TYPE: EXPLICIT\n\
                    EDGE_WEIGHT_FORMAT: UPPER_ROW\nDISPLAY_DATA_TYPE: TWOD_DISPLAY\n\
                    EDGE_WEIGHT_SECTION\n3 5 9\n4 7\n6\nDISPLAY_DATA_SECTION\n1 0 0\n\
                    2 1.5 2\n3 4 4\n4 5 5\n";
        assert_eq!(
            matrix_of(text),
            M.iter().flatten().copied().collect::<Vec<_>>()
        );
    }

    /// The error of `text`: its line and a part of its message.
    fn error(text: &str, line: usize, part: &str) {
        let e = Instance::parse(text).expect_err(text);
        assert_eq!(e.line, line, "{e}\n{text}");
        assert!(e.message.contains(part), "{part:?} not in {e}\n{text}");
    }

    #[test]
    fn errors_name_the_line() {
        error(
            "NAME: a\nTYPE: ATSP\nDIMENSION: 3\n",
            2,
            "only symmetric TSP",
        );
        error("NAME: a\nDIMENSION: 10001\n", 2, "1..=10000");
        error("NAME: a\nDIMENSION: 0\n", 2, "1..=10000");
        error("NAME: a\nDIMENSION: -3\n", 2, "1..=10000");
        error("DIMENSION: 3\nDIMENSION: 3\n", 2, "twice");
        error("NAME: a\nFOO: bar\n", 2, "unknown");
        error("NODE_COORD_SECTION\n1 0 0\n", 1, "before DIMENSION");
        error(
            "DIMENSION: 2\nEDGE_WEIGHT_TYPE: XRAY1\n",
            2,
            "not supported",
        );
        let head =
            "NAME: a\nTYPE: TSP\nDIMENSION: 3\nEDGE_WEIGHT_TYPE: EUC_2D\nNODE_COORD_SECTION\n";
        error(
            &format!("{head}1 0 0\n1 1 1\n3 2 2\nEOF\n"),
            7,
            "city 1 is given twice",
        );
        error(
            &format!("{head}1 0 0\n3 2 2\nEOF\n"),
            8,
            "city 2 is missing",
        );
        error(&format!("{head}1 0 0\n3 2 2\n"), 7, "city 2 is missing");
        error(&format!("{head}1 0 0\n4 1 1\n3 2 2\n"), 7, "1..=3");
        error(&format!("{head}1 0 0\n2 1\n3 2 2\n"), 7, "coordinates");
        error(
            &format!("{head}1 0 0\n2 1 1 1\n3 2 2\n"),
            7,
            "the first had 2",
        );
        error(&format!("{head}1 0 0\n2 1 x\n3 2 2\n"), 7, "not a number");
        error(&format!("{head}1 0 0\n2 1 inf\n3 2 2\n"), 7, "finite");
        error(&format!("{head}1 0 0\n2 1 1e9\n3 2 2\n"), 7, "finite");
        error(
            &format!("{head}1 0 0\n2 1 1\n3 2 2\n4 3 3\n"),
            9,
            "more than 3",
        );
        error(
            "NAME: a\nTYPE: TSP\nDIMENSION: 3\nEDGE_WEIGHT_TYPE: EUC_3D\nNODE_COORD_SECTION\n\
             1 0 0\n2 1 1\n3 2 2\nEOF\n",
            9,
            "needs 3 coordinates",
        );
        error(
            "NAME: a\nTYPE: TSP\nDIMENSION: 3\nEDGE_WEIGHT_TYPE: EUC_2D\nEOF\n",
            5,
            "no NODE_COORD_SECTION",
        );
        error(
            "NAME: a\nTYPE: TSP\nEDGE_WEIGHT_TYPE: EUC_2D\n",
            3,
            "no DIMENSION",
        );
        // Weights.
        let t = |format: &str, section: &str| explicit(format, section);
        error(
            &t("UPPER_ROW", "3 5 9\n4 x\n6"),
            9,
            "\"x\" is not an integer",
        );
        error(&t("UPPER_ROW", "3 5 9\n4 -7\n6"), 9, "not an integer");
        error(
            &t("UPPER_ROW", "3 5 9\n4 7"),
            10,
            "after 5 of the 6 weights of UPPER_ROW",
        );
        error(
            &t("UPPER_ROW", "3 5 9\n4 7\n6 1"),
            10,
            "more than the 6 weights",
        );
        error(
            &t("FULL_MATRIX", "0 3 5 9\n3 0 4 7\n5 4 0 6\n9 8 6 0"),
            11,
            "not symmetric",
        );
        error(&t("TRIANGLE", "3 5 9\n4 7\n6"), 6, "EDGE_WEIGHT_FORMAT");
        error(
            "NAME: a\nDIMENSION: 4\nEDGE_WEIGHT_TYPE: EXPLICIT\nEDGE_WEIGHT_SECTION\n1 2\n",
            4,
            "without an EDGE_WEIGHT_FORMAT",
        );
        error(
            "NAME: a\nDIMENSION: 2\nEDGE_WEIGHT_TYPE: EXPLICIT\nEDGE_WEIGHT_FORMAT: FUNCTION\nEOF\n",
            5,
            "no EDGE_WEIGHT_SECTION",
        );
    }

    #[test]
    fn a_latin1_comment_is_read() {
        let mut bytes = explicit("UPPER_ROW", "3 5 9\n4 7\n6").into_bytes();
        let at = bytes.windows(4).position(|w| w == b"four").unwrap();
        bytes[at] = 0xe4; // 'ä' in Latin-1
        let inst = Instance::parse_bytes(&bytes).unwrap();
        assert_eq!(
            inst.matrix(),
            M.iter().flatten().copied().collect::<Vec<_>>()
        );
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = Instance::parse_bytes(&bytes);
        }

        #[test]
        fn a_damaged_file_never_panics(
            cuts in proptest::collection::vec((0usize..200, any::<u8>()), 1..8),
            which in 0usize..3,
        ) {
            let texts = [
                explicit("UPPER_ROW", "3 5 9\n4 7\n6"),
                explicit("FULL_MATRIX", "0 3 5 9\n3 0 4 7\n5 4 0 6\n9 7 6 0"),
                "NAME: c\nTYPE: TSP\nDIMENSION: 3\nEDGE_WEIGHT_TYPE: GEO\n\
                 NODE_COORD_SECTION\n1 16.47 96.10\n2 16.47 94.44\n3 20.09 92.54\nEOF\n"
                    .to_string(),
            ];
            let mut bytes = texts[which].clone().into_bytes();
            for (at, b) in cuts {
                let at = at % bytes.len();
                // Replace a byte by a digit, a separator or anything.
                bytes[at] = match b % 4 {
                    0 => b'0' + b % 10,
                    1 => b' ',
                    2 => b'\n',
                    _ => b,
                };
            }
            if let Ok(inst) = Instance::parse_bytes(&bytes) {
                // A file that reads gives a matrix of its dimension.
                prop_assert_eq!(inst.matrix().len(), inst.dimension * inst.dimension);
            }
        }
    }
}
