//! The wire format of the replication protocol, without any I/O.
//!
//! Two directions, each a frame that starts with a magic byte, a version and a kind:
//! - to the sequencer ([`ToSequencer`]): join, write, sync, refresh, leave;
//! - to a replica ([`ToReplica`]): a state snapshot, a sequenced operation, a refusal,
//!   the end of the stream.
//!
//! Operations and states travel as opaque bytes (the IPL's object serialization, encoded
//! once by the writer and relayed unchanged by the sequencer). Decoding borrows from the
//! frame and checks every length against what is left, so a malformed frame is an error,
//! never a panic or an allocation sized by the input.

/// First byte of every frame.
pub const MAGIC: u8 = 0xB5;
/// Protocol version (second byte).
pub const VERSION: u8 = 1;

const JOIN: u8 = 1;
const WRITE: u8 = 2;
const SYNC: u8 = 3;
const REFRESH: u8 = 4;
const LEAVE: u8 = 5;
const SNAPSHOT: u8 = 16;
const ORDERED: u8 = 17;
const REFUSED: u8 = 18;
const END: u8 = 19;

/// A frame that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The frame ends before a field does.
    #[error("frame truncated: {field} needs {needed} bytes, {left} left")]
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Bytes it needs.
        needed: usize,
        /// Bytes left in the frame.
        left: usize,
    },
    /// The first byte is not [`MAGIC`].
    #[error("not a replication frame (first byte {0:#04x})")]
    BadMagic(u8),
    /// Another protocol version.
    #[error("protocol version {0}, expected {VERSION}")]
    BadVersion(u8),
    /// A kind this direction does not know.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// A text field is not UTF-8.
    #[error("text field is not UTF-8")]
    BadText,
    /// A flag byte other than 0 or 1.
    #[error("bad flag byte {0}")]
    BadFlag(u8),
    /// Bytes left over after the last field.
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// A frame sent to the sequencer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToSequencer<'a> {
    /// A new replica asks for the current state and the stream from there. `type_tag`
    /// names the replicated type, so that two programs that disagree are refused.
    Join {
        /// The replicated type's name.
        type_tag: &'a str,
    },
    /// An operation to sequence; `req` is the writer's number for it.
    Write {
        /// The writer's request number.
        req: u64,
        /// The encoded operation.
        op: &'a [u8],
    },
    /// A no-op to sequence; when the writer sees it, it has seen everything before it.
    Sync {
        /// The writer's request number.
        req: u64,
    },
    /// Send me a fresh snapshot on my stream (best-effort mode).
    Refresh,
    /// I leave the group: stop sending to me.
    Leave,
}

/// A frame sent to a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToReplica<'a> {
    /// The object's state after operation `seq` (0: no operation yet).
    Snapshot {
        /// The last sequence number the state covers.
        seq: u64,
        /// The encoded state.
        state: &'a [u8],
    },
    /// Operation number `seq`, written by member `origin` as its request `req`.
    /// `op` is `None` for a sync marker.
    Ordered {
        /// Sequence number (1, 2, ...).
        seq: u64,
        /// The writer's member number.
        origin: u64,
        /// The writer's request number.
        req: u64,
        /// The encoded operation, or `None` for a sync marker.
        op: Option<&'a [u8]>,
    },
    /// The sequencer refused the join.
    Refused {
        /// Why.
        reason: &'a str,
    },
    /// The sequencer leaves: nothing follows on the stream.
    End,
}

fn header(kind: u8, capacity: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(3 + capacity);
    v.extend_from_slice(&[MAGIC, VERSION, kind]);
    v
}

/// A header and its body in one buffer.
fn joined((mut head, body): (Vec<u8>, &[u8])) -> Vec<u8> {
    head.extend_from_slice(body);
    head
}

fn put_str(v: &mut Vec<u8>, s: &str) {
    // Texts are short (type names, reasons); longer ones are cut at a char boundary.
    let mut end = s.len().min(u16::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    v.extend_from_slice(&(end as u16).to_le_bytes());
    v.extend_from_slice(&s.as_bytes()[..end]);
}

impl<'a> ToSequencer<'a> {
    /// Encodes the frame's header; a body (`Write`'s op) is returned separately so that
    /// it can be sent as its own slice without copying.
    pub fn encode(&self) -> (Vec<u8>, &'a [u8]) {
        match self {
            ToSequencer::Join { type_tag } => {
                let mut v = header(JOIN, 2 + type_tag.len());
                put_str(&mut v, type_tag);
                (v, &[])
            }
            ToSequencer::Write { req, op } => {
                let mut v = header(WRITE, 8);
                v.extend_from_slice(&req.to_le_bytes());
                (v, *op)
            }
            ToSequencer::Sync { req } => {
                let mut v = header(SYNC, 8);
                v.extend_from_slice(&req.to_le_bytes());
                (v, &[])
            }
            ToSequencer::Refresh => (header(REFRESH, 0), &[]),
            ToSequencer::Leave => (header(LEAVE, 0), &[]),
        }
    }

    /// Encodes the whole frame into one buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        joined(self.encode())
    }

    /// Decodes a frame.
    pub fn decode(bytes: &'a [u8]) -> Result<ToSequencer<'a>, WireError> {
        Reader::frame(bytes, |kind, r| {
            Ok(match kind {
                JOIN => ToSequencer::Join {
                    type_tag: r.text("type tag")?,
                },
                WRITE => ToSequencer::Write {
                    req: r.u64("request number")?,
                    op: r.rest(),
                },
                SYNC => ToSequencer::Sync {
                    req: r.u64("request number")?,
                },
                REFRESH => ToSequencer::Refresh,
                LEAVE => ToSequencer::Leave,
                k => return Err(WireError::UnknownKind(k)),
            })
        })
    }
}

impl<'a> ToReplica<'a> {
    /// Encodes the frame's header; the body (state or op) is returned separately.
    pub fn encode(&self) -> (Vec<u8>, &'a [u8]) {
        match self {
            ToReplica::Snapshot { seq, state } => {
                let mut v = header(SNAPSHOT, 8);
                v.extend_from_slice(&seq.to_le_bytes());
                (v, *state)
            }
            ToReplica::Ordered {
                seq,
                origin,
                req,
                op,
            } => {
                let mut v = header(ORDERED, 25);
                v.extend_from_slice(&seq.to_le_bytes());
                v.extend_from_slice(&origin.to_le_bytes());
                v.extend_from_slice(&req.to_le_bytes());
                v.push(u8::from(op.is_some()));
                (v, op.unwrap_or(&[]))
            }
            ToReplica::Refused { reason } => {
                let mut v = header(REFUSED, 2 + reason.len());
                put_str(&mut v, reason);
                (v, &[])
            }
            ToReplica::End => (header(END, 0), &[]),
        }
    }

    /// Encodes the whole frame into one buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        joined(self.encode())
    }

    /// Decodes a frame.
    pub fn decode(bytes: &'a [u8]) -> Result<ToReplica<'a>, WireError> {
        Reader::frame(bytes, |kind, r| {
            Ok(match kind {
                SNAPSHOT => ToReplica::Snapshot {
                    seq: r.u64("sequence number")?,
                    state: r.rest(),
                },
                ORDERED => {
                    let seq = r.u64("sequence number")?;
                    let origin = r.u64("origin")?;
                    let req = r.u64("request number")?;
                    let op = match r.u8("op flag")? {
                        0 => None,
                        1 => Some(r.rest()),
                        f => return Err(WireError::BadFlag(f)),
                    };
                    ToReplica::Ordered {
                        seq,
                        origin,
                        req,
                        op,
                    }
                }
                REFUSED => ToReplica::Refused {
                    reason: r.text("reason")?,
                },
                END => ToReplica::End,
                k => return Err(WireError::UnknownKind(k)),
            })
        })
    }
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], WireError> {
        if self.buf.len() < n {
            return Err(WireError::Truncated {
                field,
                needed: n,
                left: self.buf.len(),
            });
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Ok(a)
    }

    fn u8(&mut self, field: &'static str) -> Result<u8, WireError> {
        Ok(self.take(1, field)?[0])
    }

    fn u64(&mut self, field: &'static str) -> Result<u64, WireError> {
        let b = self.take(8, field)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }

    fn text(&mut self, field: &'static str) -> Result<&'a str, WireError> {
        let b = self.take(2, field)?;
        let n = u16::from_le_bytes([b[0], b[1]]) as usize;
        let t = self.take(n, field)?;
        std::str::from_utf8(t).map_err(|_| WireError::BadText)
    }

    /// Reads a whole frame: checks its header, lets `body` read the fields of its kind,
    /// then checks that nothing is left.
    fn frame<F>(
        bytes: &'a [u8],
        body: impl FnOnce(u8, &mut Reader<'a>) -> Result<F, WireError>,
    ) -> Result<F, WireError> {
        let mut r = Reader::new(bytes);
        let kind = r.header()?;
        let f = body(kind, &mut r)?;
        r.end()?;
        Ok(f)
    }

    fn header(&mut self) -> Result<u8, WireError> {
        let m = self.u8("magic")?;
        if m != MAGIC {
            return Err(WireError::BadMagic(m));
        }
        let v = self.u8("version")?;
        if v != VERSION {
            return Err(WireError::BadVersion(v));
        }
        self.u8("kind")
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    fn end(&self) -> Result<(), WireError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(WireError::Trailing(self.buf.len()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq_frames() -> Vec<ToSequencer<'static>> {
        vec![
            ToSequencer::Join { type_tag: "a::B" },
            ToSequencer::Write {
                req: 7,
                op: &[1, 2, 3],
            },
            ToSequencer::Write { req: 0, op: &[] },
            ToSequencer::Sync { req: u64::MAX },
            ToSequencer::Refresh,
            ToSequencer::Leave,
        ]
    }

    fn rep_frames() -> Vec<ToReplica<'static>> {
        vec![
            ToReplica::Snapshot {
                seq: 3,
                state: &[9; 40],
            },
            ToReplica::Ordered {
                seq: 1,
                origin: 2,
                req: 3,
                op: Some(&[4, 5]),
            },
            ToReplica::Ordered {
                seq: 10,
                origin: 0,
                req: 1,
                op: None,
            },
            ToReplica::Refused { reason: "wrong ü" },
            ToReplica::End,
        ]
    }

    #[test]
    fn frames_round_trip() {
        for f in seq_frames() {
            assert_eq!(ToSequencer::decode(&f.to_bytes()), Ok(f));
        }
        for f in rep_frames() {
            assert_eq!(ToReplica::decode(&f.to_bytes()), Ok(f));
        }
    }

    #[test]
    fn every_prefix_of_a_fixed_size_frame_is_an_error_not_a_panic() {
        let frames: Vec<Vec<u8>> = seq_frames()
            .iter()
            .map(|f| f.to_bytes())
            .chain(rep_frames().iter().map(|f| f.to_bytes()))
            .collect();
        for f in &frames {
            for n in 0..f.len() {
                // Frames whose last field is "the rest" decode from some prefixes; the
                // others must fail. Neither may panic.
                let _ = ToSequencer::decode(&f[..n]);
                let _ = ToReplica::decode(&f[..n]);
            }
        }
        let sync = ToSequencer::Sync { req: 5 }.to_bytes();
        assert!(matches!(
            ToSequencer::decode(&sync[..sync.len() - 1]),
            Err(WireError::Truncated { .. })
        ));
        let mut long = sync.clone();
        long.push(0);
        assert_eq!(ToSequencer::decode(&long), Err(WireError::Trailing(1)));
    }

    #[test]
    fn garbage_is_refused_with_the_reason() {
        assert_eq!(ToSequencer::decode(&[1, 2, 3]), Err(WireError::BadMagic(1)));
        assert_eq!(
            ToReplica::decode(&[MAGIC, 9, ORDERED]),
            Err(WireError::BadVersion(9))
        );
        assert_eq!(
            ToReplica::decode(&[MAGIC, VERSION, JOIN]),
            Err(WireError::UnknownKind(JOIN))
        );
        assert_eq!(
            ToSequencer::decode(&[MAGIC, VERSION, SNAPSHOT]),
            Err(WireError::UnknownKind(SNAPSHOT))
        );
        let mut bad_flag = ToReplica::Ordered {
            seq: 1,
            origin: 1,
            req: 1,
            op: None,
        }
        .to_bytes();
        *bad_flag.last_mut().unwrap() = 7;
        assert_eq!(ToReplica::decode(&bad_flag), Err(WireError::BadFlag(7)));
        let mut bad_text = ToReplica::Refused { reason: "ab" }.to_bytes();
        let n = bad_text.len();
        bad_text[n - 1] = 0xFF;
        assert_eq!(ToReplica::decode(&bad_text), Err(WireError::BadText));
        // A text length larger than the frame.
        assert!(matches!(
            ToSequencer::decode(&[MAGIC, VERSION, JOIN, 0xFF, 0xFF, b'a']),
            Err(WireError::Truncated { .. })
        ));
    }

    #[test]
    fn pseudo_random_bytes_never_panic() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for len in 0..200usize {
            let mut buf = Vec::with_capacity(len);
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                buf.push(x as u8);
            }
            if len > 2 {
                buf[0] = MAGIC;
                buf[1] = VERSION;
            }
            let _ = ToSequencer::decode(&buf);
            let _ = ToReplica::decode(&buf);
        }
    }
}
