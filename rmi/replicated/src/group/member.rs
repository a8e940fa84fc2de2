//! A member's side (every member but the sequencer): it joins by a state transfer,
//! then follows the sequencer's stream of ordered operations.

use std::sync::Arc;
use std::time::Instant;

use ipl::{
    Disconnect, Ibis, IbisIdentifier, IplError, ReadMessage, ReceivePortConnectUpcall,
    ReceivePortIdentifier, SendPortIdentifier,
};
use parking_lot::{Mutex, RwLock};

use super::copy::Entry;
use super::{
    map_port_error, port_name, read_frame, send, to_sequencer_error, type_tag, Group, Inner, Mode,
};
use crate::codec;
use crate::error::{RepError, Result};
use crate::holdback::{HoldBack, Slot};
use crate::wire::{ToReplica, ToSequencer};
use crate::{replica_type, request_type, Options, Replicated};

impl<T: Replicated> Inner<T> {
    fn on_stream(&self, mut m: ReadMessage) {
        let origin = m.origin().clone();
        if origin.ibis != self.sequencer {
            tracing::warn!(object = %self.name, from = %origin, "message from a member that is not the sequencer dropped");
            return;
        }
        let frame = match read_frame(&mut m) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(object = %self.name, error = %e, "unreadable stream message dropped");
                return;
            }
        };
        match ToReplica::decode(frame) {
            Err(e) => {
                tracing::warn!(object = %self.name, from = %origin, error = %e, "malformed stream message dropped")
            }
            Ok(ToReplica::Snapshot { seq, state }) => self.on_snapshot(seq, state),
            Ok(ToReplica::Ordered {
                seq,
                origin,
                req,
                op,
            }) => self.on_ordered(seq, origin, req, op),
            Ok(ToReplica::Refused { reason }) => {
                let mut meta = self.meta.lock();
                meta.refused = Some(reason.to_string());
                self.cond.notify_all();
            }
            Ok(ToReplica::End) => {
                // Everything the sequencer sent before was delivered before this.
                let mut meta = self.meta.lock();
                meta.lost
                    .get_or_insert_with(|| "the sequencer left the group".into());
                self.cond.notify_all();
            }
        }
    }

    fn on_snapshot(&self, seq: u64, bytes: &[u8]) {
        let mut meta = self.meta.lock();
        if meta.order.is_ready() {
            tracing::debug!(object = %self.name, seq, "unrequested snapshot ignored");
            return;
        }
        if seq < meta.order.applied() {
            tracing::warn!(object = %self.name, seq, applied = meta.order.applied(), "stale snapshot ignored");
            return;
        }
        let value = match codec::decode::<T>(bytes) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(object = %self.name, error = %e, "snapshot undecodable");
                meta.failed = Some(format!("snapshot undecodable: {e}"));
                self.cond.notify_all();
                return;
            }
        };
        let state = match self.state.get() {
            Some(s) => {
                *s.write() = value;
                Arc::clone(s)
            }
            None => {
                let s = Arc::new(RwLock::new(value));
                // Only this upcall thread sets it, so it cannot be set already.
                let _ = self.state.set(Arc::clone(&s));
                s
            }
        };
        meta.order.install(seq);
        tracing::debug!(object = %self.name, seq, held = meta.order.held(), "snapshot installed");
        self.drain(&mut meta, &state);
        self.cond.notify_all();
    }

    fn on_ordered(&self, seq: u64, origin: u64, req: u64, op: Option<&[u8]>) {
        let mut meta = self.meta.lock();
        match meta.order.classify(seq) {
            Slot::Stale => {}
            Slot::Next => {
                if let Some(state) = self.state.get() {
                    meta.order.advance();
                    self.apply_entry(&mut meta, state, origin, req, op);
                    self.drain(&mut meta, state);
                }
            }
            Slot::Later => {
                let e = Entry {
                    origin,
                    req,
                    op: op.map(<[u8]>::to_vec),
                };
                if let Err(e) = meta.order.hold(seq, e) {
                    tracing::error!(object = %self.name, error = %e, "replica stops applying");
                    meta.failed = Some(e.to_string());
                }
            }
        }
        self.cond.notify_all();
    }

    pub(super) fn on_lost(&self, origin: &SendPortIdentifier, why: &Disconnect) {
        if origin.ibis == self.sequencer && origin.name == port_name(&self.name, "mcast") {
            let mut meta = self.meta.lock();
            tracing::debug!(object = %self.name, ?why, "stream from the sequencer ended");
            match why {
                // Messages sent before the close may still be queued: the End frame
                // (or the grace period) ends the stream after them.
                Disconnect::Closed => {
                    meta.closed_since.get_or_insert_with(Instant::now);
                }
                Disconnect::Lost(s) => {
                    meta.lost.get_or_insert_with(|| format!("stream lost: {s}"));
                }
                Disconnect::Local => {
                    meta.lost
                        .get_or_insert_with(|| "this replica closed its stream port".into());
                }
            }
            self.cond.notify_all();
        }
    }
}

/// Reports the loss of the sequencer's stream to the replica.
struct LostWatch<T: Replicated>(Arc<Inner<T>>);

impl<T: Replicated> ReceivePortConnectUpcall for LostWatch<T> {
    fn lost_connection(
        &self,
        _port: &ReceivePortIdentifier,
        origin: &SendPortIdentifier,
        why: &Disconnect,
    ) {
        self.0.on_lost(origin, why);
    }
}

impl<T: Replicated> Group<T> {
    pub(super) fn start_replica(
        ibis: &Ibis,
        name: &str,
        sequencer: IbisIdentifier,
        mode: Mode,
        opts: Options,
    ) -> Result<Self> {
        let err = |e| map_port_error(name, e);
        let deadline = Instant::now() + opts.timeout;
        let inner = Arc::new(Inner::<T>::new(
            name,
            ibis.identifier().id().get(),
            sequencer.clone(),
            mode,
            opts,
            HoldBack::awaiting_snapshot(opts.hold_limit),
            None,
        ));
        let handler = Arc::clone(&inner);
        let stream = ibis
            .receive_port(&replica_type(), &port_name(name, "in"))
            .message_upcall(move |m: ReadMessage| handler.on_stream(m))
            .connection_upcall(LostWatch(Arc::clone(&inner)))
            .create()
            .map_err(err)?;
        stream.enable_connections();
        stream.enable_message_upcalls()?;
        let mut req = ibis
            .create_send_port(&request_type(), &port_name(name, "req"))
            .map_err(err)?;
        match req.connect_to(&sequencer, &port_name(name, "seq"), opts.timeout) {
            Ok(_) => {}
            Err(IplError::ConnectTimeout { .. }) => {
                return Err(RepError::Timeout {
                    what: "connecting to the sequencer",
                    after: opts.timeout,
                })
            }
            Err(e) => return Err(RepError::SequencerLost(e.to_string())),
        }
        let (head, body) = ToSequencer::Join {
            type_tag: type_tag::<T>(),
        }
        .encode();
        send(&mut req, &head, body).map_err(to_sequencer_error)?;
        inner.wait_snapshot(deadline, "joining (state transfer)")?;
        let state = match inner.state.get() {
            Some(s) => Arc::clone(s),
            None => {
                return Err(RepError::Timeout {
                    what: "joining (state transfer)",
                    after: opts.timeout,
                })
            }
        };
        tracing::debug!(object = name, member = %ibis.identifier(), seq = inner.applied(), "replica joined");
        Ok(Group {
            inner,
            state,
            req: Some(Mutex::new(req)),
            stream: Some(stream),
            requests: None,
        })
    }
}
