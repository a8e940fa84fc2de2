//! The channel table: a channel is one bidirectional QUIC stream of a connection, opened
//! with a stream header and carrying length-prefixed messages; an unreliable channel's
//! messages go as datagrams when they fit.

use std::time::Instant;

use bytes::Bytes;
use ipl_transport_abi::ffi::CloseCode;
use ipl_transport_abi::TransportError;
use quinn_proto::{ConnectionHandle, Dir, StreamId, VarInt, WriteError};

use super::connection::{Conn, Phase};
use super::dispatch::End;
use super::{shutting_down, Engine, HostEvent, Tx, COALESCE_WINDOW, CODE_PROTOCOL, CODE_SHUTDOWN};
use crate::wire::{self, Decoder, StreamHeader, DATAGRAM_HEADER_LEN, STREAM_HEADER_LEN};

/// One channel: a bidirectional QUIC stream.
pub(super) struct Chan {
    pub(super) conn: ConnectionHandle,
    pub(super) stream: StreamId,
    /// Messages go as datagrams when they fit.
    pub(super) unreliable: bool,
    pub(super) decoder: Decoder,
    /// A sender is in the middle of a message that did not fit the stream's window.
    pub(super) busy: bool,
}

/// Refuses a stream the peer opened or broke: both halves end with the protocol error
/// code.
pub(super) fn reject_stream(conn: &mut Conn, id: StreamId, what: &str) {
    tracing::warn!(peer = %conn.peer, "quic: protocol error from {}: {what}", conn.peer);
    let _ = conn
        .proto
        .recv_stream(id)
        .stop(VarInt::from_u32(CODE_PROTOCOL));
    let _ = conn
        .proto
        .send_stream(id)
        .reset(VarInt::from_u32(CODE_PROTOCOL));
}

impl Engine {
    /// Opens a channel on ready connection `ch`; `Ok(None)` while the peer's stream limit
    /// holds it back.
    pub(crate) fn open_channel(
        &mut self,
        ch: ConnectionHandle,
        unreliable: bool,
    ) -> Result<Option<u64>, TransportError> {
        if self.stopping {
            return Err(shutting_down());
        }
        let Some(conn) = self.conns.get_mut(&ch) else {
            return Err(TransportError::Closed("quic connection ended".into()));
        };
        if let Phase::Closed(e) = &conn.phase {
            return Err(e.clone());
        }
        let Some(id) = conn.proto.streams().open(Dir::Bi) else {
            return Ok(None);
        };
        let header = StreamHeader {
            opener: self.id,
            unreliable,
        }
        .encode();
        // A fresh stream's window (megabytes) always takes its 14-byte header.
        let _ = conn.proto.send_stream(id).write(&header);
        conn.dirty = true;
        let local = self.add_channel(ch, id, unreliable);
        if let Some(conn) = self.conns.get_mut(&ch) {
            conn.streams.insert(id, Some(local));
        }
        Ok(Some(local))
    }

    /// Enters a channel on stream `id` of connection `ch`; the caller maps the stream
    /// to the returned local id.
    fn add_channel(&mut self, ch: ConnectionHandle, id: StreamId, unreliable: bool) -> u64 {
        let local = self.next_channel;
        self.next_channel += 1;
        self.chans.insert(
            local,
            Chan {
                conn: ch,
                stream: id,
                unreliable,
                decoder: Decoder::new(self.max_message),
                busy: false,
            },
        );
        local
    }

    /// A stream the peer opened: once its header is complete (and the peer's hello
    /// came), check it and announce the channel.
    pub(super) fn try_open(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Conn,
        id: StreamId,
        end: &End,
    ) {
        let Some(peer_id) = conn.peer_id else {
            return;
        };
        let complete = conn
            .pending
            .get(&id)
            .is_some_and(|b| b.len() >= STREAM_HEADER_LEN);
        if !complete {
            if !matches!(end, End::Open) {
                conn.pending.remove(&id);
            }
            return;
        }
        let Some(buf) = conn.pending.remove(&id) else {
            return;
        };
        let mut h = [0u8; STREAM_HEADER_LEN];
        h.copy_from_slice(&buf[..STREAM_HEADER_LEN]);
        let header = match StreamHeader::parse(&h) {
            Ok(h) if h.opener == peer_id => h,
            Ok(h) => {
                let what = format!(
                    "channel header names endpoint {:016x}, the connection's peer is {peer_id:016x}",
                    h.opener
                );
                return reject_stream(conn, id, &what);
            }
            Err(e) => return reject_stream(conn, id, &format!("stream header: {e}")),
        };
        let local = self.add_channel(ch, id, header.unreliable);
        conn.streams.insert(id, Some(local));
        self.events.push_back(HostEvent::Opened(local));
        let rest = Bytes::copy_from_slice(&buf[STREAM_HEADER_LEN..]);
        self.read_channel(conn, id, local, &[rest], end);
    }

    /// Decodes a channel's bytes into messages; reports the channel's end.
    pub(super) fn read_channel(
        &mut self,
        conn: &mut Conn,
        id: StreamId,
        local: u64,
        data: &[Bytes],
        end: &End,
    ) {
        let Some(chan) = self.chans.get_mut(&local) else {
            return;
        };
        if !data.is_empty() {
            conn.sends_since_data = 0;
        }
        let pool = &self.pool;
        let events = &mut self.events;
        let mut outcome: Option<Result<(CloseCode, String), String>> = None;
        for d in data {
            let pushed = chan.decoder.push(d, &mut || pool.take(), &mut |m| {
                events.push_back(HostEvent::Message(local, m))
            });
            match pushed {
                Ok(false) => {}
                Ok(true) => {
                    outcome = Some(Ok((
                        CloseCode::LOST,
                        format!("quic peer {} shut down", conn.peer),
                    )));
                    break;
                }
                Err(e) => {
                    outcome = Some(Err(format!("channel {local}: {e}")));
                    break;
                }
            }
        }
        let outcome = outcome.or_else(|| match end {
            End::Open => None,
            End::Finished if chan.decoder.at_boundary() => Some(Ok((
                CloseCode::CLOSED_BY_PEER,
                "closed by peer".to_string(),
            ))),
            End::Finished => Some(Ok((
                CloseCode::LOST,
                format!(
                    "quic peer {} ended channel {local} in the middle of a message",
                    conn.peer
                ),
            ))),
            End::Reset(code) => Some(Ok((
                CloseCode::LOST,
                format!("quic peer {} reset the channel (code {code})", conn.peer),
            ))),
        });
        let Some(outcome) = outcome else {
            return;
        };
        let (code, detail) = match outcome {
            Ok(x) => x,
            Err(what) => {
                reject_stream(conn, id, &what);
                (
                    CloseCode::LOST,
                    format!("quic protocol error from {}: {what}", conn.peer),
                )
            }
        };
        self.chans.remove(&local);
        conn.streams.remove(&id);
        // Our half ends too (a stopped or reset stream reports an error, ignored).
        let _ = conn
            .proto
            .recv_stream(id)
            .stop(VarInt::from_u32(CODE_SHUTDOWN));
        let _ = conn.proto.send_stream(id).finish();
        self.events
            .push_back(HostEvent::Closed(local, code, detail));
    }

    /// Delivers a connection's datagrams to their channels.
    pub(super) fn read_datagrams(&mut self, conn: &mut Conn) {
        while let Some(d) = conn.proto.datagrams().recv() {
            let (stream, body) = match wire::parse_datagram(&d) {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(peer = %conn.peer, "quic: protocol error from {}: datagram: {e}", conn.peer);
                    continue;
                }
            };
            if body.len() as u64 > u64::from(self.max_message) {
                tracing::warn!(peer = %conn.peer, "quic: datagram of {} bytes exceeds max_message", body.len());
                continue;
            }
            let local = VarInt::from_u64(stream)
                .ok()
                .map(StreamId::from)
                .and_then(|id| conn.streams.get(&id).copied().flatten());
            let Some(local) = local else {
                tracing::trace!(peer = %conn.peer, "quic: datagram for no open channel dropped");
                continue;
            };
            let mut buf = self.pool.take();
            buf.clear();
            buf.extend_from_slice(body);
            self.events.push_back(HostEvent::Message(local, buf));
        }
    }

    fn chan_error(local: u64) -> TransportError {
        TransportError::Closed(format!("no open quic channel {local}"))
    }

    /// Whether a sender is in the middle of a message on `local` (false if closed).
    pub(crate) fn is_busy(&self, local: u64) -> bool {
        self.chans.get(&local).is_some_and(|c| c.busy)
    }

    /// Marks a sender in (or out of) the middle of a message.
    pub(crate) fn set_busy(&mut self, local: u64, busy: bool) {
        if let Some(c) = self.chans.get_mut(&local) {
            c.busy = busy;
        }
    }

    /// Sends the message as a datagram if the channel is unreliable and it fits;
    /// returns whether it did.
    pub(crate) fn try_datagram(
        &mut self,
        local: u64,
        slices: &[&[u8]],
        total: u64,
    ) -> Result<bool, TransportError> {
        let chan = self
            .chans
            .get(&local)
            .ok_or_else(|| Self::chan_error(local))?;
        if !chan.unreliable {
            return Ok(false);
        }
        let (ch, stream) = (chan.conn, chan.stream);
        let Some(conn) = self.conns.get_mut(&ch) else {
            return Err(Self::chan_error(local));
        };
        let fits = conn
            .proto
            .datagrams()
            .max_size()
            .is_some_and(|m| DATAGRAM_HEADER_LEN as u64 + total <= m as u64);
        if !fits {
            return Ok(false);
        }
        let d = Bytes::from(wire::encode_datagram(u64::from(stream), slices));
        match conn.proto.datagrams().send(d, true) {
            Ok(()) => {
                conn.dirty = true;
                Ok(true)
            }
            Err(e) => {
                // Not possible after all (e.g. the path's size shrank): the stream
                // carries it, which is more than an unreliable channel promises.
                tracing::debug!("quic: datagram not sent ({e}); using the stream");
                Ok(false)
            }
        }
    }

    /// Writes as much of `data` on the channel's stream as its window takes.
    pub(crate) fn write(&mut self, local: u64, data: &[u8]) -> Result<usize, TransportError> {
        let chan = self
            .chans
            .get(&local)
            .ok_or_else(|| Self::chan_error(local))?;
        let (ch, stream) = (chan.conn, chan.stream);
        let Some(conn) = self.conns.get_mut(&ch) else {
            return Err(Self::chan_error(local));
        };
        let peer = conn.peer;
        match conn.proto.send_stream(stream).write(data) {
            Ok(n) => {
                conn.dirty = true;
                Ok(n)
            }
            Err(WriteError::Blocked) => Ok(0),
            Err(WriteError::Stopped(code)) => Err(TransportError::Closed(format!(
                "quic peer {peer} stopped channel {local} (code {code})"
            ))),
            Err(WriteError::ClosedStream) => Err(TransportError::Closed(format!(
                "quic channel {local} to {peer} is closed"
            ))),
        }
    }

    /// Resets a channel's stream after a partly written message.
    pub(crate) fn reset(&mut self, local: u64) {
        if let Some(chan) = self.chans.get(&local) {
            let (ch, stream) = (chan.conn, chan.stream);
            if let Some(conn) = self.conns.get_mut(&ch) {
                let _ = conn
                    .proto
                    .send_stream(stream)
                    .reset(VarInt::from_u32(CODE_PROTOCOL));
                conn.dirty = true;
            }
        }
    }

    /// Whether a message just written on `local` may wait for the next batch instead of
    /// being transmitted at once: when this connection streams (a second send with no
    /// stream data from the peer in between, within [`COALESCE_WINDOW`] of the last
    /// immediate transmit). A send that follows a message from the peer (a reply, a
    /// ping-pong) or a quiet spell always goes at once.
    pub(crate) fn coalesce(&mut self, local: u64, now: Instant) -> bool {
        let Some(ch) = self.chans.get(&local).map(|c| c.conn) else {
            return false;
        };
        let Some(conn) = self.conns.get_mut(&ch) else {
            return false;
        };
        conn.sends_since_data = conn.sends_since_data.saturating_add(1);
        let streaming = conn.sends_since_data >= 2
            && conn
                .last_send_tx
                .is_some_and(|t| now.saturating_duration_since(t) < COALESCE_WINDOW);
        if !streaming {
            conn.last_send_tx = Some(now);
        }
        streaming
    }

    /// Transmits what a connection has to send now (after a write).
    pub(crate) fn flush(&mut self, local: u64, now: Instant, tx: &mut Tx<'_>) {
        if let Some(ch) = self.chans.get(&local).map(|c| c.conn) {
            self.process_conn(ch, now, tx);
        }
    }

    /// Closes a channel: the stream is finished after what was written; what still
    /// arrives on it is dropped.
    pub(crate) fn close_channel(&mut self, local: u64) {
        let Some(chan) = self.chans.remove(&local) else {
            return;
        };
        if let Some(conn) = self.conns.get_mut(&chan.conn) {
            conn.streams.insert(chan.stream, None);
            if conn.proto.send_stream(chan.stream).finish().is_ok() {
                self.unacked.insert((chan.conn, chan.stream));
            }
            conn.dirty = true;
        }
    }
}
