//! The RMI wire format: request and reply headers, written with the IPL's data-level
//! primitives in front of the serde-encoded arguments or result.
//!
//! ```text
//! request: call id u64 | interface hash u32 | method u16 | flags u8 | args (object: a tuple)
//! reply:   call id u64 | status u8 | value (object: result, application error or RmiError)
//! ```
//!
//! One-way requests carry call id 0 and [`FLAG_ONEWAY`]; nothing answers them.

use ipl::{ReadMessage, WriteMessage};

use crate::error::RmiError;

/// The name of every client runtime's reply port.
pub const REPLY_PORT: &str = "ibis-rmi/replies";

/// Request flag: no reply is expected.
pub const FLAG_ONEWAY: u8 = 1;

/// The header of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    /// The caller's call id (unique per client runtime; 0 for one-way calls).
    pub call: u64,
    /// [`interface_hash`] of the interface the caller expects.
    pub interface: u32,
    /// The method's number: its position in the trait.
    pub method: u16,
    /// [`FLAG_ONEWAY`] or 0.
    pub flags: u8,
}

impl RequestHeader {
    /// Whether the caller waits for a reply.
    pub fn oneway(&self) -> bool {
        self.flags & FLAG_ONEWAY != 0
    }

    /// Writes the header.
    pub fn write(&self, m: &mut WriteMessage<'_, '_>) -> ipl::Result<()> {
        m.write_u64(self.call)?;
        m.write_u32(self.interface)?;
        m.write_u16(self.method)?;
        m.write_u8(self.flags)
    }

    /// Reads a header; a short or garbled message is [`RmiError::Malformed`].
    pub fn read(m: &mut ReadMessage) -> Result<Self, RmiError> {
        let bad = |e: ipl::IplError| RmiError::Malformed(format!("request header: {e}"));
        Ok(RequestHeader {
            call: m.read_u64().map_err(bad)?,
            interface: m.read_u32().map_err(bad)?,
            method: m.read_u16().map_err(bad)?,
            flags: m.read_u8().map_err(bad)?,
        })
    }
}

/// What a reply carries after its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    /// The method's result (`Ok` value).
    Ok = 0,
    /// The method's own error (`Err` value, of the method's error type).
    AppError = 1,
    /// An [`RmiError`] raised by the server's runtime (malformed request, panic, ...).
    RmiError = 2,
}

impl Status {
    /// Decodes a status byte.
    pub fn from_u8(b: u8) -> Result<Self, RmiError> {
        match b {
            0 => Ok(Status::Ok),
            1 => Ok(Status::AppError),
            2 => Ok(Status::RmiError),
            other => Err(RmiError::Malformed(format!("reply status {other}"))),
        }
    }
}

/// Writes a reply header.
pub fn write_reply_header(m: &mut WriteMessage<'_, '_>, call: u64, s: Status) -> ipl::Result<()> {
    m.write_u64(call)?;
    m.write_u8(s as u8)
}

/// FNV-1a of an interface name: a cheap check that caller and object agree.
pub const fn interface_hash(name: &str) -> u32 {
    let b = name.as_bytes();
    let mut h: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < b.len() {
        h ^= b[i] as u32;
        h = h.wrapping_mul(0x0100_0193);
        i += 1;
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_bytes_round_trip_and_unknown_is_malformed() {
        for s in [Status::Ok, Status::AppError, Status::RmiError] {
            assert_eq!(Status::from_u8(s as u8).unwrap(), s);
        }
        assert!(matches!(Status::from_u8(9), Err(RmiError::Malformed(_))));
    }

    #[test]
    fn interface_hash_distinguishes_names() {
        assert_ne!(interface_hash("a::Hello"), interface_hash("a::Hellp"));
        assert_eq!(interface_hash("x"), interface_hash("x"));
    }
}
