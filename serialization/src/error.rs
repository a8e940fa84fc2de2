//! Error types of the serialization layer.

use crate::level::Level;

/// An operation needed a higher serialization level than the port allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("operation needs serialization level `{needed}` but the port only allows `{allowed}`")]
pub struct LevelError {
    /// The level the operation needs.
    pub needed: Level,
    /// The level the port type allows.
    pub allowed: Level,
}

/// Errors while writing a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SerError {
    /// The value could not be encoded by postcard (e.g. a `Serialize` impl
    /// reported an error, or a sequence of unknown length was serialized).
    #[error("object serialization failed: {0}")]
    Object(#[source] postcard::Error),
    /// The port's serialization level does not allow this write.
    #[error(transparent)]
    Level(#[from] LevelError),
}

/// Errors while reading a message. Decoding never panics and never allocates
/// more than the bytes actually present justify; every malformed input maps
/// to one of these variants.
///
/// When a `read_*` method returns an error, the reader's position is left
/// where it was before the call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The message ended before a fixed-size item (scalar, length prefix,
    /// alignment padding or requested byte count) was complete.
    #[error("message truncated: needed {needed} bytes, {remaining} remaining")]
    Truncated {
        /// Bytes the item needs.
        needed: usize,
        /// Bytes left in the message.
        remaining: usize,
    },
    /// A length prefix (array or object) announces more bytes than remain in
    /// the message. `needed` saturates at `u64::MAX` on overflow.
    #[error("length prefix announces {needed} bytes but only {remaining} remain")]
    LengthTooLarge {
        /// Bytes the length prefix announces (element count times element size).
        needed: u64,
        /// Bytes left in the message after the prefix (and padding).
        remaining: usize,
    },
    /// A bool was encoded as a byte other than 0 or 1.
    #[error("invalid bool byte {0:#04x}")]
    InvalidBool(u8),
    /// A char was encoded as a u32 that is not a Unicode scalar value.
    #[error("invalid char code {0:#x}")]
    InvalidChar(u32),
    /// `read_array_into` was given an output slice whose length differs from
    /// the element count on the wire.
    #[error("array length mismatch: expected {expected} elements, message holds {found}")]
    LengthMismatch {
        /// Length of the caller's output slice.
        expected: usize,
        /// Element count found in the message.
        found: u64,
    },
    /// postcard failed to decode the object bytes.
    #[error("object deserialization failed: {0}")]
    Object(#[source] postcard::Error),
    /// The object decoded successfully but did not use all the bytes its
    /// length prefix announced.
    #[error("object left {unused} trailing bytes inside its length")]
    TrailingBytes {
        /// Number of unused bytes.
        unused: usize,
    },
    /// The port's serialization level does not allow this read.
    #[error(transparent)]
    Level(#[from] LevelError),
}
