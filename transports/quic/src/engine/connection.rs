//! One connection's life: the dial, the TLS handshake, the hellos that make it ready,
//! and its failure (which loses its channels).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use ipl_transport_abi::ffi::CloseCode;
use ipl_transport_abi::TransportError;
use ipl_transport_kit::admission::Slot;
use quinn_proto::{ConnectionError, ConnectionHandle, Dir, StreamId, TransportErrorCode, VarInt};

use super::dispatch::End;
use super::{
    shutting_down, Engine, HostEvent, CODE_PROTOCOL, CODE_SHUTDOWN, DIAL_HANDSHAKE_TIMEOUT,
};
use crate::tls;
use crate::wire::StreamHeader;

/// Where a connection is in its life.
#[derive(Debug)]
pub(super) enum Phase {
    /// The TLS handshake runs.
    Handshaking,
    /// The handshake is done; the peer's hello has not come yet.
    Hello,
    /// Both hellos exchanged: channels may be opened.
    Ready,
    /// Closed or lost; the error is what a dialer waiting for it is told.
    Closed(TransportError),
}

/// One QUIC connection to a peer endpoint, carrying every channel between the two.
pub(super) struct Conn {
    pub(super) proto: quinn_proto::Connection,
    pub(super) peer: SocketAddr,
    /// The peer's endpoint id, from its hello.
    pub(super) peer_id: Option<u64>,
    /// The endpoint id a dialer expects (None on the accepting side).
    pub(super) expect: Option<u64>,
    pub(super) phase: Phase,
    /// The TLS handshake and the peer's hello must have completed by then.
    pub(super) hello_deadline: Instant,
    /// An incoming connection's place among those in the handshake
    /// (`quic.max_handshakes`), held until it is ready or closed.
    pub(super) slot: Option<Slot>,
    /// The peer's hello stream and the bytes read from it so far.
    pub(super) hello_in: Option<(StreamId, Vec<u8>)>,
    /// Stream → local channel; `None` once closed locally (what still comes is dropped).
    pub(super) streams: HashMap<StreamId, Option<u64>>,
    /// Streams the peer opened whose header is incomplete (or came before the hello).
    pub(super) pending: HashMap<StreamId, Vec<u8>>,
    /// Events to process (a datagram or a write reached it).
    pub(super) dirty: bool,
    /// Sends since stream data last came from the peer (see [`Engine::coalesce`]).
    pub(super) sends_since_data: u32,
    /// When a send last transmitted at once.
    pub(super) last_send_tx: Option<Instant>,
}

impl Conn {
    /// A connection whose handshake must complete by `deadline`.
    pub(super) fn new(
        proto: quinn_proto::Connection,
        peer: SocketAddr,
        expect: Option<u64>,
        deadline: Instant,
    ) -> Self {
        Conn {
            proto,
            peer,
            peer_id: None,
            expect,
            phase: Phase::Handshaking,
            hello_deadline: deadline,
            slot: None,
            hello_in: None,
            streams: HashMap::new(),
            pending: HashMap::new(),
            dirty: true,
            sends_since_data: 0,
            last_send_tx: None,
        }
    }
}

/// Counters of one endpoint's connections, for tests and diagnostics.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionStats {
    /// QUIC connections open now (hellos exchanged).
    pub open: usize,
    /// QUIC connections that completed the handshake since the endpoint was created.
    pub established: u64,
    /// Connections the endpoint holds state for, in any phase (closing ones too).
    pub connections: usize,
    /// Incoming connections in the handshake (TLS or hello) now.
    pub handshakes: usize,
    /// Incoming connections refused at once because `quic.max_handshakes` were in the
    /// handshake.
    pub refused: u64,
}

/// What the engine knows of a dial in progress.
pub(crate) enum DialState {
    /// Still handshaking.
    Pending,
    /// Usable.
    Ready,
    /// Failed.
    Failed(TransportError),
}

/// Why a connection ended, in words.
fn describe(e: &ConnectionError, peer: SocketAddr) -> String {
    match e {
        ConnectionError::ApplicationClosed(c)
            if c.error_code == VarInt::from_u32(CODE_SHUTDOWN) =>
        {
            format!("quic peer {peer} shut down")
        }
        ConnectionError::TimedOut => format!("quic peer {peer} stopped answering (idle timeout)"),
        ConnectionError::LocallyClosed => "quic endpoint shut down".to_string(),
        e => format!("quic connection to {peer} lost: {e}"),
    }
}

fn refused_handshake(peer: SocketAddr, e: &dyn std::fmt::Display) -> TransportError {
    TransportError::Refused(format!(
        "quic handshake with {peer} refused: {e} (the peer's certificate is not from this \
         pool's CA or ours is not from its: it does not know this pool's secret)"
    ))
}

/// Maps a connection error during connection set-up.
fn setup_error(e: &ConnectionError, peer: SocketAddr) -> TransportError {
    match e {
        ConnectionError::ConnectionClosed(c)
            if c.error_code == TransportErrorCode::CONNECTION_REFUSED =>
        {
            TransportError::Refused(format!(
                "quic endpoint at {peer} refused the connection: it is busy (too many \
                 connections in the handshake, see quic.max_handshakes) or shutting down; \
                 retry later"
            ))
        }
        ConnectionError::TimedOut => {
            TransportError::Timeout(format!("no quic endpoint answered at {peer}"))
        }
        ConnectionError::LocallyClosed => {
            TransportError::Closed("quic endpoint is shutting down".into())
        }
        e @ (ConnectionError::TransportError(_) | ConnectionError::ConnectionClosed(_)) => {
            refused_handshake(peer, e)
        }
        e => TransportError::Refused(format!("quic connection to {peer} failed: {e}")),
    }
}

impl Engine {
    /// The ready connection `connect` uses for peer endpoint `id`.
    pub(crate) fn ready_conn(&self, id: u64) -> Option<ConnectionHandle> {
        let ch = *self.by_peer.get(&id)?;
        self.conns
            .get(&ch)
            .filter(|c| matches!(c.phase, Phase::Ready))
            .map(|_| ch)
    }

    /// The dial in progress to peer endpoint `id`, or a new one.
    pub(crate) fn dial(
        &mut self,
        now: Instant,
        peer: SocketAddr,
        id: u64,
    ) -> Result<ConnectionHandle, TransportError> {
        if self.stopping {
            return Err(shutting_down());
        }
        if let Some(&ch) = self.dialing.get(&id) {
            if self.conns.contains_key(&ch) {
                return Ok(ch);
            }
        }
        let (ch, proto) = self
            .ep
            .connect(now, self.client.clone(), peer, &tls::server_name(id))
            .map_err(|e| TransportError::InvalidArgument(format!("quic connect to {peer}: {e}")))?;
        let mut conn = Conn::new(proto, peer, Some(id), now + DIAL_HANDSHAKE_TIMEOUT);
        conn.dirty = true;
        self.conns.insert(ch, conn);
        // A handle is reused once its connection is gone: no old reason applies to it.
        self.failed_dials.remove(&ch);
        self.dialing.insert(id, ch);
        Ok(ch)
    }

    /// Where a dial stands.
    pub(crate) fn dial_state(&mut self, ch: ConnectionHandle, id: u64) -> DialState {
        let state = match self.conns.get(&ch).map(|c| &c.phase) {
            None => DialState::Failed(self.failed_dials.remove(&ch).unwrap_or_else(|| {
                TransportError::Closed("quic connection ended during set-up".into())
            })),
            Some(Phase::Ready) => DialState::Ready,
            Some(Phase::Closed(e)) => DialState::Failed(e.clone()),
            Some(_) => DialState::Pending,
        };
        if !matches!(state, DialState::Pending) && self.dialing.get(&id) == Some(&ch) {
            self.dialing.remove(&id);
        }
        state
    }

    /// Gives up a dial (its caller's time ran out).
    pub(crate) fn abandon(&mut self, ch: ConnectionHandle, id: u64, now: Instant) {
        if self.dialing.get(&id) == Some(&ch) {
            self.dialing.remove(&id);
        }
        self.failed_dials.remove(&ch);
        if let Some(c) = self.conns.get_mut(&ch) {
            if !matches!(c.phase, Phase::Ready) {
                c.proto.close(
                    now,
                    VarInt::from_u32(CODE_PROTOCOL),
                    Bytes::from_static(b"timeout"),
                );
                c.dirty = true;
            }
        }
    }

    /// The TLS handshake is done: our hello (our endpoint id on a unidirectional stream)
    /// goes out, and the peer's is awaited.
    pub(super) fn connected(&self, conn: &mut Conn) {
        conn.phase = Phase::Hello;
        let hello = StreamHeader {
            opener: self.id,
            unreliable: false,
        }
        .encode();
        if let Some(id) = conn.proto.streams().open(Dir::Uni) {
            let mut s = conn.proto.send_stream(id);
            let _ = s.write(&hello);
            let _ = s.finish();
        }
    }

    /// quinn-proto lost the connection: during set-up the dialer learns why (a refused
    /// handshake names the secret); later every channel on it is lost.
    pub(super) fn lost(&mut self, ch: ConnectionHandle, conn: &mut Conn, reason: &ConnectionError) {
        let (err, why) = match conn.phase {
            Phase::Handshaking | Phase::Hello => {
                let err = setup_error(reason, conn.peer);
                if conn.expect.is_none() && !self.stopping {
                    // Rate-limited: a stream of strangers cannot flood the log.
                    self.admission.dropped(&conn.peer, &err);
                }
                let why = err.detail().to_string();
                (err, why)
            }
            _ => {
                let why = describe(reason, conn.peer);
                (TransportError::Closed(why.clone()), why)
            }
        };
        self.fail(ch, conn, err, &why);
    }

    /// Reads the peer's hello: once it is whole (and names the endpoint a dialer
    /// expects) the connection is ready, and the channels the peer opened meanwhile open.
    pub(super) fn read_hello(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Conn,
        data: &[Bytes],
        end: &End,
    ) {
        let Some((_, buf)) = conn.hello_in.as_mut() else {
            return;
        };
        for d in data {
            buf.extend_from_slice(d);
        }
        let Some(parsed) = StreamHeader::parse_prefix(buf) else {
            if !matches!(end, End::Open) {
                self.protocol_close(ch, conn, "bad hello: the stream ended early");
            }
            return;
        };
        conn.hello_in = None;
        let theirs = match parsed {
            Ok(t) => t,
            Err(e) => {
                self.protocol_close(ch, conn, &format!("bad hello: {e}"));
                return;
            }
        };
        if let Some(want) = conn.expect {
            if theirs.opener != want {
                let err = TransportError::Refused(format!(
                    "no quic endpoint {want:016x} at {} any more (found {:016x})",
                    conn.peer, theirs.opener
                ));
                conn.proto.close(
                    Instant::now(),
                    VarInt::from_u32(CODE_PROTOCOL),
                    Bytes::from_static(b"wrong endpoint"),
                );
                let why = err.detail().to_string();
                self.fail(ch, conn, err, &why);
                return;
            }
        }
        conn.peer_id = Some(theirs.opener);
        conn.phase = Phase::Ready;
        conn.slot = None;
        self.established += 1;
        let replace = conn.expect.is_some()
            || self
                .by_peer
                .get(&theirs.opener)
                .is_none_or(|c| !self.conns.contains_key(c));
        if replace {
            self.by_peer.insert(theirs.opener, ch);
        }
        tracing::debug!(
            endpoint = format_args!("{:016x}", self.id),
            peer = %conn.peer,
            peer_id = format_args!("{:016x}", theirs.opener),
            "quic connection established"
        );
        let waiting: Vec<StreamId> = conn.pending.keys().copied().collect();
        for id in waiting {
            self.try_open(ch, conn, id, &End::Open);
        }
    }

    /// A protocol error that ends the whole connection.
    pub(super) fn protocol_close(&mut self, ch: ConnectionHandle, conn: &mut Conn, what: &str) {
        if conn.slot.is_some() {
            // A stranger in the handshake (e.g. a bad hello): rate-limited.
            self.admission
                .dropped(&conn.peer, &format_args!("protocol error: {what}"));
        } else {
            tracing::warn!(peer = %conn.peer, "quic: protocol error from {}: {what}", conn.peer);
        }
        conn.proto.close(
            Instant::now(),
            VarInt::from_u32(CODE_PROTOCOL),
            Bytes::from_static(b"protocol error"),
        );
        let err = TransportError::Refused(format!("quic peer {}: {what}", conn.peer));
        self.fail(ch, conn, err, what);
    }

    /// A connection that is gone for good.
    pub(super) fn forget(&mut self, ch: ConnectionHandle, conn: &mut Conn) {
        if !matches!(conn.phase, Phase::Closed(_)) {
            let what = format!("quic connection to {} ended", conn.peer);
            self.fail(ch, conn, TransportError::Closed(what.clone()), &what);
        }
        self.unacked.retain(|(c, _)| *c != ch);
        if self.dialing.values().any(|c| *c == ch) {
            // Its dialer has not looked yet: keep the reason for it.
            if let Phase::Closed(e) = &conn.phase {
                self.failed_dials.insert(ch, e.clone());
            }
        }
        self.dialing.retain(|_, c| *c != ch);
    }

    /// Marks a connection closed: its channels are lost, `connect` stops using it.
    pub(super) fn fail(
        &mut self,
        ch: ConnectionHandle,
        conn: &mut Conn,
        err: TransportError,
        why: &str,
    ) {
        if matches!(conn.phase, Phase::Closed(_)) {
            return;
        }
        let st = conn.proto.stats();
        tracing::debug!(
            peer = %conn.peer,
            sent = st.udp_tx.datagrams,
            received = st.udp_rx.datagrams,
            lost = st.path.lost_packets,
            congestion_events = st.path.congestion_events,
            rtt_us = st.path.rtt.as_micros() as u64,
            "quic connection statistics"
        );
        if matches!(conn.phase, Phase::Ready) {
            tracing::debug!(peer = %conn.peer, "quic connection ended: {why}");
        }
        conn.phase = Phase::Closed(err);
        conn.slot = None;
        for local in conn.streams.values().flatten() {
            if self.chans.remove(local).is_some() && !self.stopping {
                self.events
                    .push_back(HostEvent::Closed(*local, CloseCode::LOST, why.to_string()));
            }
        }
        conn.streams.clear();
        conn.pending.clear();
        if let Some(id) = conn.peer_id {
            if self.by_peer.get(&id) == Some(&ch) {
                self.by_peer.remove(&id);
                // Another ready connection to the same peer (both sides dialed at once)
                // takes over.
                if let Some((other, _)) = self.conns.iter().find(|(h, o)| {
                    **h != ch && o.peer_id == Some(id) && matches!(o.phase, Phase::Ready)
                }) {
                    self.by_peer.insert(id, *other);
                }
            }
        }
    }
}
