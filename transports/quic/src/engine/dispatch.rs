//! The endpoint's dispatch: received datagrams go to quinn-proto's endpoint and on to
//! their connection; each connection that has input, a write or a due timer is
//! processed: its endpoint events, its application events (each to its handler in
//! [`connection`](super::connection) or [`channels`](super::channels)) and its transmits,
//! in bursts of at most [`MAX_BURST`] datagrams.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use ipl_transport_abi::TransportError;
use quinn_proto::{
    ConnectionHandle, DatagramEvent, Dir, EcnCodepoint, Event, ReadError, StreamEvent, StreamId,
    VarInt,
};

use super::connection::{Conn, Phase};
use super::{Engine, Tx, CODE_HANDSHAKE_TIMEOUT, CODE_PROTOCOL, MAX_BURST};

/// The end of a stream's readable data, as far as one read got.
pub(super) enum End {
    /// More may come.
    Open,
    /// The peer finished the stream.
    Finished,
    /// The peer reset it.
    Reset(VarInt),
}

/// Reads what a stream has now (ordered).
fn read_all(proto: &mut quinn_proto::Connection, id: StreamId, out: &mut Vec<Bytes>) -> End {
    let mut rs = proto.recv_stream(id);
    let Ok(mut chunks) = rs.read(true) else {
        // Closed already (we stopped it, or saw its end).
        return End::Finished;
    };
    let end = loop {
        match chunks.next(usize::MAX) {
            Ok(Some(chunk)) => out.push(chunk.bytes),
            Ok(None) => break End::Finished,
            Err(ReadError::Blocked) => break End::Open,
            Err(ReadError::Reset(code)) => break End::Reset(code),
        }
    };
    // Whether a flow-control update is due is seen by the next poll_transmit anyway.
    let _ = chunks.finalize();
    end
}

impl Engine {
    /// The earliest time the engine needs to be driven again without input.
    pub(crate) fn next_timeout(&mut self) -> Option<Instant> {
        self.conns
            .values_mut()
            .filter_map(|c| {
                let t = c.proto.poll_timeout();
                if matches!(c.phase, Phase::Handshaking | Phase::Hello) {
                    Some(t.map_or(c.hello_deadline, |t| t.min(c.hello_deadline)))
                } else {
                    t
                }
            })
            .min()
    }

    /// Feeds one received UDP datagram.
    pub(crate) fn handle_datagram(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        local_ip: Option<IpAddr>,
        ecn: Option<EcnCodepoint>,
        data: BytesMut,
        tx: &mut Tx<'_>,
    ) {
        let mut resp = std::mem::take(&mut self.resp_buf);
        resp.clear();
        match self.ep.handle(now, remote, local_ip, ecn, data, &mut resp) {
            Some(DatagramEvent::ConnectionEvent(ch, ev)) => {
                if let Some(c) = self.conns.get_mut(&ch) {
                    c.proto.handle_event(ev);
                    c.dirty = true;
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => {
                if self.stopping {
                    let t = self.ep.refuse(incoming, &mut resp);
                    tx(&t, &resp[..t.size]);
                } else if !incoming.remote_address_validated()
                    && 2 * self.admission.pending() >= self.max_handshakes
                {
                    // Half the slots are taken: an Initial from an address not yet
                    // validated is answered with a Retry, and only one that comes back
                    // with its token (a real address) gets a slot, so a flood of Initials
                    // from spoofed addresses cannot hold them. Nothing is kept.
                    match self.ep.retry(incoming, &mut resp) {
                        Ok(t) => tx(&t, &resp[..t.size]),
                        Err(e) => self.ep.ignore(e.into_incoming()),
                    }
                } else {
                    let peer = incoming.remote_address();
                    // Beyond `quic.max_handshakes` strangers could hold the endpoint's
                    // memory and time: refused at once (CONNECTION_REFUSED; counted, the
                    // warning rate-limited). The slot is held until the connection is
                    // ready or closed, at most `quic.handshake_timeout_ms`.
                    let Some(slot) = self.admission.admit(&peer) else {
                        let t = self.ep.refuse(incoming, &mut resp);
                        tx(&t, &resp[..t.size]);
                        self.resp_buf = resp;
                        return;
                    };
                    match self
                        .ep
                        .accept(incoming, now, &mut resp, Some(self.server.clone()))
                    {
                        Ok((ch, proto)) => {
                            let mut conn =
                                Conn::new(proto, peer, None, now + self.handshake_timeout);
                            conn.slot = Some(slot);
                            self.conns.insert(ch, conn);
                        }
                        Err(e) => {
                            tracing::debug!(peer = %peer, "quic: incoming connection not accepted: {}", e.cause);
                            if let Some(t) = e.response {
                                tx(&t, &resp[..t.size]);
                            }
                        }
                    }
                }
            }
            Some(DatagramEvent::Response(t)) => tx(&t, &resp[..t.size]),
            None => {}
        }
        self.resp_buf = resp;
    }

    /// Processes every connection that has input, a write or a due timer: protocol
    /// events, host events, transmits.
    pub(crate) fn process(&mut self, now: Instant, tx: &mut Tx<'_>) {
        let mut handles = std::mem::take(&mut self.handles);
        handles.clear();
        handles.extend(self.conns.iter_mut().filter_map(|(ch, c)| {
            let due = c.dirty
                || c.proto.poll_timeout().is_some_and(|t| t <= now)
                || (matches!(c.phase, Phase::Handshaking | Phase::Hello)
                    && c.hello_deadline <= now);
            due.then_some(*ch)
        }));
        for &ch in &handles {
            self.process_conn(ch, now, tx);
        }
        self.handles = handles;
    }

    /// Processes one connection (see [`process`](Self::process)).
    pub(super) fn process_conn(&mut self, ch: ConnectionHandle, now: Instant, tx: &mut Tx<'_>) {
        let Some(mut conn) = self.conns.remove(&ch) else {
            return;
        };
        conn.dirty = false;
        if conn.proto.poll_timeout().is_some_and(|t| t <= now) {
            conn.proto.handle_timeout(now);
        }
        if matches!(conn.phase, Phase::Handshaking | Phase::Hello) && conn.hello_deadline <= now {
            let tls = matches!(conn.phase, Phase::Handshaking);
            let what = match (conn.expect, tls) {
                (Some(_), true) => format!("no quic endpoint answered at {} in time", conn.peer),
                (Some(_), false) => format!("quic peer {} sent no hello", conn.peer),
                (None, _) => format!(
                    "its handshake ({}) did not complete within quic.handshake_timeout_ms ({:?})",
                    if tls { "TLS" } else { "the hello" },
                    self.handshake_timeout
                ),
            };
            if conn.expect.is_none() && !self.stopping {
                self.admission.dropped(&conn.peer, &what);
            }
            // Closed with a reason the peer sees; the state is freed when the close has
            // drained, the slot now (in `fail`).
            conn.proto.close(
                now,
                VarInt::from_u32(CODE_HANDSHAKE_TIMEOUT),
                Bytes::from_static(b"handshake timeout"),
            );
            self.fail(ch, &mut conn, TransportError::Timeout(what.clone()), &what);
        }
        let mut buf = std::mem::take(&mut self.tx_buf);
        let mut drained = false;
        let mut sent = 0;
        loop {
            let mut progress = false;
            while let Some(ev) = conn.proto.poll_endpoint_events() {
                progress = true;
                drained |= ev.is_drained();
                if let Some(back) = self.ep.handle_event(ch, ev) {
                    conn.proto.handle_event(back);
                }
            }
            while let Some(ev) = conn.proto.poll() {
                progress = true;
                self.app_event(ch, &mut conn, ev);
            }
            loop {
                if sent >= MAX_BURST {
                    // More may wait: the driver reads the socket, then comes back.
                    conn.dirty = true;
                    self.more = true;
                    break;
                }
                buf.clear();
                let Some(t) = conn.proto.poll_transmit(now, self.max_datagrams, &mut buf) else {
                    break;
                };
                progress = true;
                sent += t.segment_size.map_or(1, |s| t.size.div_ceil(s.max(1)));
                tx(&t, &buf[..t.size]);
            }
            if !progress || sent >= MAX_BURST {
                break;
            }
        }
        self.tx_buf = buf;
        if drained {
            self.forget(ch, &mut conn);
        } else {
            self.conns.insert(ch, conn);
        }
    }

    /// Handles one application event of a connection.
    fn app_event(&mut self, ch: ConnectionHandle, conn: &mut Conn, ev: Event) {
        match ev {
            Event::HandshakeDataReady => {}
            Event::Connected => {
                self.connected(conn);
                self.accept_streams(ch, conn);
            }
            Event::ConnectionLost { reason } => self.lost(ch, conn, &reason),
            Event::Stream(StreamEvent::Opened { .. }) => self.accept_streams(ch, conn),
            Event::Stream(StreamEvent::Readable { id }) => self.read(ch, conn, id),
            Event::Stream(StreamEvent::Finished { id }) => {
                self.unacked.remove(&(ch, id));
            }
            Event::Stream(StreamEvent::Stopped { id, .. }) => {
                self.unacked.remove(&(ch, id));
            }
            Event::Stream(StreamEvent::Writable { .. } | StreamEvent::Available { .. }) => {}
            Event::DatagramReceived => self.read_datagrams(conn),
            Event::DatagramsUnblocked => {}
        }
    }

    /// Accepts the streams the peer opened and reads what they carry.
    fn accept_streams(&mut self, ch: ConnectionHandle, conn: &mut Conn) {
        while let Some(id) = conn.proto.streams().accept(Dir::Uni) {
            if conn.hello_in.is_none() && conn.peer_id.is_none() {
                conn.hello_in = Some((id, Vec::new()));
            } else {
                // Only one hello per connection.
                let _ = conn
                    .proto
                    .recv_stream(id)
                    .stop(VarInt::from_u32(CODE_PROTOCOL));
                continue;
            }
            self.read(ch, conn, id);
        }
        while let Some(id) = conn.proto.streams().accept(Dir::Bi) {
            conn.pending.insert(id, Vec::new());
            self.read(ch, conn, id);
        }
    }

    /// Reads a stream that became readable.
    fn read(&mut self, ch: ConnectionHandle, conn: &mut Conn, id: StreamId) {
        let mut data = Vec::new();
        let end = read_all(&mut conn.proto, id, &mut data);
        if conn.hello_in.as_ref().is_some_and(|(h, _)| *h == id) {
            self.read_hello(ch, conn, &data, &end);
        } else if conn.pending.contains_key(&id) {
            if let Some(p) = conn.pending.get_mut(&id) {
                for d in &data {
                    p.extend_from_slice(d);
                }
            }
            self.try_open(ch, conn, id, &end);
        } else {
            match conn.streams.get(&id).copied() {
                Some(Some(local)) => self.read_channel(conn, id, local, &data, &end),
                // Closed locally: what still comes is dropped until the stream ends.
                Some(None) if !matches!(end, End::Open) => {
                    conn.streams.remove(&id);
                }
                _ => {}
            }
        }
    }
}
