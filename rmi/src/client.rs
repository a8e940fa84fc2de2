//! The client half of a runtime: the reply port, the call table, and connecting stubs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ipl::{
    Disconnect, Ibis, PortType, ReceivePort, ReceivePortConnectUpcall, ReceivePortIdentifier,
    SendPort, SendPortDisconnectUpcall, SendPortIdentifier,
};
use parking_lot::Mutex;

use crate::calls::CallTable;
use crate::error::RmiError;
use crate::reference::RawRef;

pub(crate) use crate::wire::REPLY_PORT;

/// Reports lost reply connections (a server vanished) to the call table.
struct ReplyLost(Arc<CallTable>);

impl ReceivePortConnectUpcall for ReplyLost {
    fn lost_connection(
        &self,
        _: &ReceivePortIdentifier,
        origin: &SendPortIdentifier,
        why: &Disconnect,
    ) {
        // An orderly close comes after every reply sent on it; a server that ends
        // while calls wait also closes their stubs' connections (reported there).
        if let Disconnect::Lost(s) = why {
            self.0.member_lost(&origin.ibis, s.clone());
        }
    }
}

/// Reports a lost request connection of one stub to the call table.
struct StubLost(Arc<CallTable>, u64);

impl SendPortDisconnectUpcall for StubLost {
    fn lost_connection(
        &self,
        _: &SendPortIdentifier,
        receiver: &ReceivePortIdentifier,
        why: &Disconnect,
    ) {
        match why {
            Disconnect::Lost(s) => self.0.stub_lost(self.1, format!("{receiver}: {s}")),
            Disconnect::Closed => self.0.stub_lost(self.1, format!("{receiver} was closed")),
            Disconnect::Local => {}
        }
    }
}

/// A stub's send port and its number (losses are reported per stub).
pub(crate) struct StubPort {
    pub(crate) id: u64,
    pub(crate) send: Mutex<SendPort>,
}

/// The client half of a runtime.
pub(crate) struct Client {
    pub(crate) ibis: Arc<Ibis>,
    pub(crate) port_type: PortType,
    pub(crate) replies: ReceivePort,
    pub(crate) table: Arc<CallTable>,
    next_call: AtomicU64,
    next_stub: AtomicU64,
    pub(crate) timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pump: Mutex<Option<JoinHandle<()>>>,
}

impl Client {
    pub(crate) fn new(
        ibis: Arc<Ibis>,
        port_type: PortType,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Result<Self, RmiError> {
        let table = Arc::new(CallTable::default());
        let replies = ibis
            .receive_port(&port_type, REPLY_PORT)
            .connection_upcall(ReplyLost(Arc::clone(&table)))
            .create()?;
        replies.enable_connections();
        Ok(Client {
            ibis,
            port_type,
            replies,
            table,
            next_call: AtomicU64::new(1),
            next_stub: AtomicU64::new(1),
            timeout,
            connect_timeout,
            pump: Mutex::new(None),
        })
    }

    /// A fresh call id (never 0).
    pub(crate) fn next_call(&self) -> u64 {
        self.next_call.fetch_add(1, Ordering::Relaxed)
    }

    /// Creates a send port and connects it to the object `target`.
    pub(crate) fn connect(&self, target: &RawRef) -> Result<Arc<StubPort>, RmiError> {
        if self.table.ended() {
            return Err(RmiError::Ended);
        }
        let id = self.next_stub.fetch_add(1, Ordering::Relaxed);
        let mut sp = self.ibis.create_send_port_with_upcall(
            &self.port_type,
            &format!("ibis-rmi/stub/{id}"),
            StubLost(Arc::clone(&self.table), id),
        )?;
        sp.connect_to(&target.member, &target.port, self.connect_timeout)?;
        Ok(Arc::new(StubPort {
            id,
            send: Mutex::new(sp),
        }))
    }

    /// Starts the pump thread (once) that receives replies for async calls.
    pub(crate) fn ensure_pump(self: &Arc<Self>) {
        let mut p = self.pump.lock();
        if p.is_some() {
            return;
        }
        let me = Arc::clone(self);
        match std::thread::Builder::new()
            .name("ibis-rmi-replies".into())
            .spawn(move || me.table.pump(&me.replies))
        {
            Ok(h) => *p = Some(h),
            // Async calls then complete only while some blocking call receives, or time
            // out: degraded, not broken.
            Err(e) => tracing::error!(error = %e, "cannot start the RMI reply pump"),
        }
    }

    /// Ends the client: fails every call, closes the reply port, stops the pump.
    pub(crate) fn end(&self) {
        self.table.end();
        self.replies.close(Some(Duration::ZERO));
        let h = self.pump.lock().take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}
