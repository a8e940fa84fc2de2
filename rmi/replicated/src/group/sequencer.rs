//! The sequencer's side: it numbers operations, applies them to its copy, multicasts
//! them, and admits joiners with a state transfer.

use std::sync::Arc;

use ipl::{Ibis, IplError, ReadMessage, ReceivePortIdentifier, SendPort};
use parking_lot::RwLock;

use super::{map_port_error, port_name, read_frame, send, type_tag, Group, Inner, Mode};
use crate::codec;
use crate::error::Result;
use crate::holdback::HoldBack;
use crate::wire::{ToReplica, ToSequencer};
use crate::{replica_type, request_type, Options, Replicated};

/// The sequencer's private state: the next number and its send ports.
pub(super) struct SeqState {
    pub(super) next: u64,
    pub(super) mcast: SendPort,
    pub(super) snap: SendPort,
}

impl<T: Replicated> Inner<T> {
    fn on_request(&self, mut m: ReadMessage) {
        let origin = m.origin().clone();
        let frame = match read_frame(&mut m) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(object = %self.name, error = %e, "unreadable request dropped");
                return;
            }
        };
        let from = origin.ibis.id().get();
        let target = ReceivePortIdentifier {
            ibis: origin.ibis.clone(),
            name: self.in_port(),
        };
        match ToSequencer::decode(frame) {
            Err(e) => {
                tracing::warn!(object = %self.name, from = %origin, error = %e, "malformed request dropped")
            }
            Ok(ToSequencer::Join { type_tag: tag }) => self.admit(&target, tag),
            Ok(ToSequencer::Write { req, op }) => match codec::decode::<T::Op>(op) {
                Ok(v) => {
                    self.sequence(from, req, Some((&v, op)));
                }
                Err(e) => {
                    tracing::warn!(object = %self.name, from = %origin, error = %e, "undecodable operation refused")
                }
            },
            Ok(ToSequencer::Sync { req }) => {
                self.sequence(from, req, None);
            }
            Ok(ToSequencer::Refresh) => {
                if let Some(seqr) = &self.seqr {
                    let mut s = seqr.lock();
                    let seq = s.next - 1;
                    self.transfer(&mut s, &target, seq);
                }
            }
            Ok(ToSequencer::Leave) => {
                if let Some(seqr) = &self.seqr {
                    let _ = seqr.lock().mcast.disconnect(&target);
                }
            }
        }
    }

    /// Gives an operation (or a sync marker) the next number, applies it to the
    /// sequencer's copy and multicasts it. Returns the local output.
    pub(super) fn sequence(
        &self,
        origin: u64,
        req: u64,
        op: Option<(&T::Op, &[u8])>,
    ) -> Option<T::Output> {
        let seqr = self.seqr.as_ref()?;
        let state = self.state.get()?;
        let mut s = seqr.lock();
        let seq = s.next;
        s.next += 1;
        let out = {
            let mut meta = self.meta.lock();
            let out = match op {
                Some((v, _)) if meta.failed.is_none() => self.apply_locked(&mut meta, state, v),
                _ => None,
            };
            meta.order.install(seq);
            self.cond.notify_all();
            out
        };
        let (head, body) = ToReplica::Ordered {
            seq,
            origin,
            req,
            op: op.map(|(_, b)| b),
        }
        .encode();
        match send(&mut s.mcast, &head, body) {
            Ok(_) | Err(IplError::NotConnected) => {}
            Err(IplError::ConnectionsLost { lost }) => {
                tracing::debug!(object = %self.name, ?lost, "replicas gone")
            }
            Err(e) => tracing::warn!(object = %self.name, error = %e, "multicast failed"),
        }
        out
    }

    /// Admits a joiner: connects the stream to it, then sends the snapshot of the state
    /// after the last operation multicast before the connection.
    fn admit(&self, target: &ReceivePortIdentifier, tag: &str) {
        let Some(seqr) = &self.seqr else { return };
        let mut s = seqr.lock();
        if tag != type_tag::<T>() {
            let reason = format!(
                "the object replicates {}, this member asked for {tag}",
                type_tag::<T>()
            );
            tracing::warn!(object = %self.name, joiner = %target, %reason, "join refused");
            let (head, body) = ToReplica::Refused { reason: &reason }.encode();
            self.send_once(&mut s.snap, target, &head, body);
            return;
        }
        if let Err(e) = s.mcast.connect(target, self.opts.timeout) {
            tracing::warn!(object = %self.name, joiner = %target, error = %e, "cannot connect the stream to a joiner");
            return;
        }
        let seq = s.next - 1;
        self.transfer(&mut s, target, seq);
        tracing::debug!(object = %self.name, joiner = %target, seq, "replica admitted");
    }

    /// Sends a snapshot of the sequencer's copy, which covers `seq`.
    pub(super) fn transfer(&self, s: &mut SeqState, target: &ReceivePortIdentifier, seq: u64) {
        let Some(state) = self.state.get() else {
            return;
        };
        let bytes = {
            let st = state.read();
            codec::encode(&*st)
        };
        match bytes {
            Ok(b) => {
                let (head, body) = ToReplica::Snapshot { seq, state: &b }.encode();
                self.send_once(&mut s.snap, target, &head, body);
            }
            Err(e) => {
                let reason = format!("state cannot be encoded: {e}");
                let (head, body) = ToReplica::Refused { reason: &reason }.encode();
                self.send_once(&mut s.snap, target, &head, body);
            }
        }
    }

    fn send_once(&self, port: &mut SendPort, target: &ReceivePortIdentifier, h: &[u8], b: &[u8]) {
        let r = port
            .connect(target, self.opts.timeout)
            .and_then(|_| send(port, h, b).map(|_| ()));
        if let Err(e) = r {
            tracing::warn!(object = %self.name, to = %target, error = %e, "snapshot not sent");
        }
        let _ = port.disconnect(target);
    }
}

impl<T: Replicated> Group<T> {
    pub(super) fn start_sequencer(
        ibis: &Ibis,
        name: &str,
        value: T,
        mode: Mode,
        opts: Options,
    ) -> Result<Self> {
        let err = |e| map_port_error(name, e);
        let mcast = ibis
            .create_send_port(&replica_type(), &port_name(name, "mcast"))
            .map_err(err)?;
        let snap = ibis
            .create_send_port(&replica_type(), &port_name(name, "snap"))
            .map_err(err)?;
        let inner = Arc::new(Inner::new(
            name,
            ibis.identifier().id().get(),
            ibis.identifier().clone(),
            mode,
            opts,
            HoldBack::started(0, opts.hold_limit),
            Some(SeqState {
                next: 1,
                mcast,
                snap,
            }),
        ));
        let state = Arc::new(RwLock::new(value));
        let _ = inner.state.set(Arc::clone(&state));
        let handler = Arc::clone(&inner);
        let requests = ibis
            .receive_port(&request_type(), &port_name(name, "seq"))
            .message_upcall(move |m: ReadMessage| handler.on_request(m))
            .create()
            .map_err(err)?;
        requests.enable_connections();
        requests.enable_message_upcalls()?;
        tracing::debug!(object = name, member = %ibis.identifier(), "sequencer started");
        Ok(Group {
            inner,
            state,
            req: None,
            stream: None,
            requests: Some(requests),
        })
    }
}
