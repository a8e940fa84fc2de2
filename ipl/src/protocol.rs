//! The IPL's wire protocol between ports, as a sans-IO encoder/decoder.
//!
//! Every message on a channel starts with a 16-byte header (a multiple of 8, so that
//! arrays in the payload stay aligned):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | protocol version ([`VERSION`]) |
//! | 1 | kind: data, connect, accept, reject, disconnect |
//! | 2..8 | zero |
//! | 8..16 | data: the message's sequence number (u64 LE); control: payload length |
//!
//! Data messages carry the user's payload after the header. Control messages carry a
//! postcard-encoded [`Control`] value.

use crate::identifiers::{ReceivePortIdentifier, SendPortIdentifier};
use crate::port_type::PortType;

/// The protocol version in every header.
pub const VERSION: u8 = 1;
/// The size of the header.
pub const HEADER_LEN: usize = 16;

const KIND_DATA: u8 = 1;
const KIND_CONTROL: u8 = 2;

/// Why a receiver refused a connection.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RejectReason {
    /// No receive port with that name (yet).
    NoSuchPort,
    /// The port exists but does not accept connections (yet).
    NotEnabled,
    /// The port's type differs.
    TypeMismatch {
        /// The receive port's type.
        receiver: PortType,
    },
    /// The port already has a sender and its type lacks many-to-one.
    OnlyOneSender,
    /// The port's connection upcall said no.
    Refused,
    /// The port is closing.
    Closed,
}

impl RejectReason {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, RejectReason::NoSuchPort | RejectReason::NotEnabled)
    }
}

impl std::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RejectReason::NoSuchPort => f.write_str("no such receive port"),
            RejectReason::NotEnabled => f.write_str("receive port does not accept connections"),
            RejectReason::TypeMismatch { receiver } => {
                write!(f, "port type mismatch: receiver has {receiver}")
            }
            RejectReason::OnlyOneSender => f.write_str(
                "receive port already has a sender and its type lacks connection.manytoone",
            ),
            RejectReason::Refused => f.write_str("refused by the receiver's connection upcall"),
            RejectReason::Closed => f.write_str("receive port is closing"),
        }
    }
}

/// A control message.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Control {
    /// Sender to receiver: connect this channel to the named receive port.
    Connect {
        /// The sending port.
        sender: SendPortIdentifier,
        /// The receive port's name.
        receiver: String,
        /// The sender's port type.
        port_type: PortType,
    },
    /// Receiver to sender: connected.
    Accept {
        /// The receive port.
        receiver: ReceivePortIdentifier,
    },
    /// Receiver to sender: not connected.
    Reject(RejectReason),
    /// Sender to receiver: the connection ends; every earlier message was sent.
    Disconnect,
    /// Receiver to sender: this many more bytes may be sent (flow control: the receiver
    /// finished messages of that cost). A sender starts with [`window`] at `Accept`.
    Credit {
        /// Bytes granted.
        bytes: u64,
    },
}

/// How many bytes of messages a sender may have on one connection that the receiver has
/// not finished yet, so that the receive side's queue is bounded per connection (each
/// message costs its frame size, at least [`MIN_COST`]). A message larger than the whole
/// window may go when nothing else is in flight. The receiver returns credits once half
/// the window is finished. This is the window of an instance whose builder sets none
/// ([`IbisBuilder::window_bytes`](crate::IbisBuilder::window_bytes)): `IPL_WINDOW_BYTES`
/// if set (see [`config`](crate::config)), else [`WINDOW`]. A pool must agree on it.
pub fn window() -> u64 {
    crate::config::window_from_env().unwrap_or(WINDOW)
}

/// The default window: 64 MiB.
pub const WINDOW: u64 = 64 << 20;

/// The least a message costs against the window (bounds the number of small messages).
pub const MIN_COST: u64 = 256;

/// What a message of `frame_len` bytes costs against the window.
pub fn cost(frame_len: usize) -> u64 {
    (frame_len as u64).max(MIN_COST)
}

/// A decoded frame.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// User data; the payload starts at [`HEADER_LEN`].
    Data {
        /// The sequence number.
        seq: u64,
    },
    /// A control message.
    Control(Control),
}

/// A malformed frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// Shorter than a header.
    #[error("frame of {0} bytes is shorter than the {HEADER_LEN}-byte header")]
    Short(usize),
    /// Unknown version.
    #[error("protocol version {0}, expected {VERSION}")]
    Version(u8),
    /// Unknown kind.
    #[error("unknown frame kind {0}")]
    Kind(u8),
    /// The control payload is malformed.
    #[error("malformed control message: {0}")]
    Control(String),
}

/// The header of a data message with sequence number `seq`.
pub fn data_header(seq: u64) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0] = VERSION;
    h[1] = KIND_DATA;
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h
}

/// Encodes a control message into one frame.
pub fn encode_control(c: &Control) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_LEN];
    out[0] = VERSION;
    out[1] = KIND_CONTROL;
    // Serializing our own types into a Vec cannot fail; fall back to an empty payload
    // (which the peer rejects as malformed) rather than panic.
    let body = postcard::to_allocvec(c).unwrap_or_default();
    out[8..16].copy_from_slice(&(body.len() as u64).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The sequence number of a data frame, `None` for anything else (a control frame, or
/// a malformed one: [`decode`] says which). The hot path of every message: it builds no
/// [`Frame`].
pub fn data_seq(buf: &[u8]) -> Option<u64> {
    let h: &[u8; HEADER_LEN] = buf.get(..HEADER_LEN)?.try_into().ok()?;
    if h[0] != VERSION || h[1] != KIND_DATA {
        return None;
    }
    let mut word = [0u8; 8];
    word.copy_from_slice(&h[8..16]);
    Some(u64::from_le_bytes(word))
}

/// Decodes a frame's header (and a control message's body).
pub fn decode(buf: &[u8]) -> Result<Frame, ProtocolError> {
    if buf.len() < HEADER_LEN {
        return Err(ProtocolError::Short(buf.len()));
    }
    if buf[0] != VERSION {
        return Err(ProtocolError::Version(buf[0]));
    }
    let mut word = [0u8; 8];
    word.copy_from_slice(&buf[8..16]);
    let word = u64::from_le_bytes(word);
    match buf[1] {
        KIND_DATA => Ok(Frame::Data { seq: word }),
        KIND_CONTROL => {
            let body = &buf[HEADER_LEN..];
            if word != body.len() as u64 {
                return Err(ProtocolError::Control(format!(
                    "length field {word} but {} bytes follow",
                    body.len()
                )));
            }
            postcard::from_bytes(body)
                .map(Frame::Control)
                .map_err(|e| ProtocolError::Control(e.to_string()))
        }
        k => Err(ProtocolError::Kind(k)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn data_header_round_trips() {
        assert_eq!(decode(&data_header(42)).unwrap(), Frame::Data { seq: 42 });
    }

    #[test]
    fn control_round_trips() {
        let c = Control::Reject(RejectReason::NoSuchPort);
        assert_eq!(decode(&encode_control(&c)).unwrap(), Frame::Control(c));
        let c = Control::Disconnect;
        assert_eq!(decode(&encode_control(&c)).unwrap(), Frame::Control(c));
    }

    #[test]
    fn short_and_bad_frames_are_errors() {
        assert_eq!(decode(&[1, 1, 0]), Err(ProtocolError::Short(3)));
        let mut h = data_header(1);
        h[0] = 9;
        assert_eq!(decode(&h), Err(ProtocolError::Version(9)));
        h[0] = VERSION;
        h[1] = 77;
        assert_eq!(decode(&h), Err(ProtocolError::Kind(77)));
        let mut c = encode_control(&Control::Disconnect);
        c[8] = 200;
        assert!(matches!(decode(&c), Err(ProtocolError::Control(_))));
    }

    #[test]
    fn data_seq_takes_data_frames_only() {
        assert_eq!(data_seq(&data_header(42)), Some(42));
        let mut with_payload = data_header(7).to_vec();
        with_payload.extend_from_slice(b"payload");
        assert_eq!(data_seq(&with_payload), Some(7));
        assert_eq!(data_seq(&encode_control(&Control::Disconnect)), None);
        assert_eq!(data_seq(&data_header(1)[..15]), None, "short");
        let mut h = data_header(1);
        h[0] = 9;
        assert_eq!(data_seq(&h), None, "other version");
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(&bytes);
            // The fast path agrees with the full decoder.
            let fast = data_seq(&bytes);
            match decode(&bytes) {
                Ok(Frame::Data { seq }) => prop_assert_eq!(fast, Some(seq)),
                _ => prop_assert_eq!(fast, None),
            }
        }
    }
}
