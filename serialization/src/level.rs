//! The three IPL serialization levels and the check the IPL performs before
//! letting a port use a given kind of write or read.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::LevelError;

/// A serialization level of a port type.
///
/// Levels are ordered: `Byte < Data < Object`. A port type that allows a level
/// also allows every lower level (an object port may write raw bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Level {
    /// Raw bytes only ([`write_bytes`](crate::MessageWriter::write_bytes)).
    Byte,
    /// Primitive values and arrays of numeric primitives, little endian.
    Data,
    /// Arbitrary `serde` values, encoded with postcard.
    Object,
}

impl Level {
    /// All levels, lowest first.
    pub const ALL: [Level; 3] = [Level::Byte, Level::Data, Level::Object];

    /// Whether a port of level `self` may perform an operation that needs
    /// level `needed` (i.e. `needed <= self`).
    pub fn allows(self, needed: Level) -> bool {
        needed <= self
    }

    /// Like [`allows`](Self::allows) but returns an error describing the
    /// violation; convertible with `?` into [`SerError`](crate::SerError) and
    /// [`DecodeError`](crate::DecodeError).
    pub fn require(self, needed: Level) -> Result<(), LevelError> {
        if self.allows(needed) {
            Ok(())
        } else {
            Err(LevelError {
                needed,
                allowed: self,
            })
        }
    }

    /// Lower-case name of the level (`"byte"`, `"data"`, `"object"`).
    pub fn name(self) -> &'static str {
        match self {
            Level::Byte => "byte",
            Level::Data => "data",
            Level::Object => "object",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordering_and_allows() {
        assert!(Level::Byte < Level::Data && Level::Data < Level::Object);
        for (i, a) in Level::ALL.iter().enumerate() {
            for (j, b) in Level::ALL.iter().enumerate() {
                assert_eq!(a.allows(*b), j <= i, "{a} allows {b}");
                assert_eq!(a.require(*b).is_ok(), j <= i);
            }
        }
        let e = Level::Byte.require(Level::Object).unwrap_err();
        assert_eq!(e.needed, Level::Object);
        assert_eq!(e.allowed, Level::Byte);
        assert!(e.to_string().contains("object"));
    }
}
