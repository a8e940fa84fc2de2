//! Message upcalls (one at a time per port) and connection upcalls of receive ports.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use common::{ibis, pool, ty, wait_for, LONG};
use ipl::{
    Disconnect, EmbeddedRegistry, IplError, PortCapabilities as P, ReadMessage,
    ReceivePortConnectUpcall, ReceivePortIdentifier, SendPortIdentifier,
};

#[test]
fn message_upcalls_run_one_at_a_time() {
    const SENDERS: usize = 3;
    const N: usize = 20;
    let t = ty(P::CONNECTION_MANY_TO_ONE | P::RECEIVE_AUTO_UPCALLS | P::SERIALIZATION_DATA);
    let reg = EmbeddedRegistry::new();
    let p = pool("upcalls");
    let server = ibis(&reg, &p, &[t]);
    let running = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let handled = Arc::new(AtomicUsize::new(0));
    let log = Arc::new(Mutex::new(Vec::new()));
    let (r, m, h, l) = (
        Arc::clone(&running),
        Arc::clone(&max),
        Arc::clone(&handled),
        Arc::clone(&log),
    );
    let rp = server
        .receive_port(&t, "in")
        .message_upcall(move |mut msg: ReadMessage| {
            let now = r.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            let v = msg.read_u32().unwrap();
            l.lock().unwrap().push(("start", v));
            std::thread::sleep(Duration::from_millis(1));
            l.lock().unwrap().push(("finish", v));
            r.fetch_sub(1, Ordering::SeqCst);
            h.fetch_add(1, Ordering::SeqCst);
            msg.finish();
        })
        .create()
        .unwrap();
    rp.enable_connections();
    rp.enable_message_upcalls().unwrap();
    // Enabling twice is harmless.
    rp.enable_message_upcalls().unwrap();

    let senders: Vec<_> = (0..SENDERS)
        .map(|k| {
            let c = ibis(&reg, &p, &[t]);
            let target = rp.identifier().clone();
            std::thread::spawn(move || {
                let mut sp = c.create_send_port(&t, "out").unwrap();
                sp.connect(&target, LONG).unwrap();
                for i in 0..N {
                    let mut m = sp.new_message().unwrap();
                    m.write_u32((k * 1000 + i) as u32).unwrap();
                    m.finish().unwrap();
                }
                (c, sp)
            })
        })
        .collect();
    let keep: Vec<_> = senders.into_iter().map(|h| h.join().unwrap()).collect();
    wait_for("all messages handled", || {
        handled.load(Ordering::SeqCst) == SENDERS * N
    });
    assert_eq!(max.load(Ordering::SeqCst), 1, "upcalls overlapped");
    // Each upcall finished before the next started.
    let log = log.lock().unwrap();
    for pair in log.chunks(2) {
        assert_eq!(pair[0].0, "start");
        assert_eq!(pair[1].0, "finish");
        assert_eq!(pair[0].1, pair[1].1);
    }
    // Closing stops the upcall thread.
    assert_eq!(rp.close(Some(Duration::ZERO)), 0);
    drop(keep);
}

#[test]
fn upcalls_need_a_handler() {
    let t = ty(P::CONNECTION_ONE_TO_ONE | P::RECEIVE_AUTO_UPCALLS | P::SERIALIZATION_DATA);
    let reg = EmbeddedRegistry::new();
    let a = ibis(&reg, &pool("nohandler"), &[t]);
    let rp = a.create_receive_port(&t, "in").unwrap();
    assert!(matches!(
        rp.enable_message_upcalls(),
        Err(IplError::InvalidPortType(_))
    ));
}

#[derive(Debug, PartialEq)]
enum Ev {
    Got(SendPortIdentifier),
    Lost(SendPortIdentifier, Disconnect),
}

struct Recorder {
    accept: bool,
    tx: Mutex<mpsc::Sender<Ev>>,
}

impl ReceivePortConnectUpcall for Recorder {
    fn got_connection(&self, _: &ReceivePortIdentifier, origin: &SendPortIdentifier) -> bool {
        let _ = self.tx.lock().unwrap().send(Ev::Got(origin.clone()));
        self.accept
    }
    fn lost_connection(
        &self,
        _: &ReceivePortIdentifier,
        origin: &SendPortIdentifier,
        why: &Disconnect,
    ) {
        let _ = self
            .tx
            .lock()
            .unwrap()
            .send(Ev::Lost(origin.clone(), why.clone()));
    }
}

fn upcall_type() -> ipl::PortType {
    ty(P::CONNECTION_MANY_TO_ONE
        | P::CONNECTION_UPCALLS
        | P::RECEIVE_TIMEOUT
        | P::RECEIVE_POLL
        | P::SERIALIZATION_DATA)
}

#[test]
fn connection_upcalls_report_origin_close_and_loss() {
    let t = upcall_type();
    let reg = EmbeddedRegistry::new();
    let p = pool("connup");
    let server = ibis(&reg, &p, &[t]);
    let (tx, rx) = mpsc::channel();
    let rp = server
        .receive_port(&t, "in")
        .connection_upcall(Recorder {
            accept: true,
            tx: Mutex::new(tx),
        })
        .create()
        .unwrap();
    rp.enable_connections();

    // An orderly close: Closed, after every message reached the port.
    let c1 = ibis(&reg, &p, &[t]);
    let mut s1 = c1.create_send_port(&t, "s1").unwrap();
    s1.connect(rp.identifier(), LONG).unwrap();
    assert_eq!(
        rx.recv_timeout(LONG).unwrap(),
        Ev::Got(s1.identifier().clone())
    );
    for i in 0..100u32 {
        let mut m = s1.new_message().unwrap();
        m.write_u32(i).unwrap();
        m.finish().unwrap();
    }
    let s1_id = s1.identifier().clone();
    s1.close();
    assert_eq!(
        rx.recv_timeout(LONG).unwrap(),
        Ev::Lost(s1_id.clone(), Disconnect::Closed)
    );
    // Every message sent before the close is already in the port.
    for i in 0..100u32 {
        let mut m = rp.poll().unwrap().expect("message sent before close");
        assert_eq!(m.read_u32().unwrap(), i);
        assert_eq!(m.origin(), &s1_id);
    }
    assert!(rp.poll().unwrap().is_none());
    assert!(rp.lost_connections().is_empty());

    // An aborted sender: Lost.
    let c2 = ibis(&reg, &p, &[t]);
    let mut s2 = c2.create_send_port(&t, "s2").unwrap();
    s2.connect(rp.identifier(), LONG).unwrap();
    assert_eq!(
        rx.recv_timeout(LONG).unwrap(),
        Ev::Got(s2.identifier().clone())
    );
    let s2_id = s2.identifier().clone();
    c2.abort();
    match rx.recv_timeout(LONG).unwrap() {
        Ev::Lost(o, Disconnect::Lost(_)) => assert_eq!(o, s2_id),
        other => panic!("expected a lost connection, got {other:?}"),
    }
    let lost = rp.lost_connections();
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].0, s2_id);
    assert!(rp.connected_to().is_empty());
    // The orphaned send port of the aborted instance fails cleanly.
    let mut m = s2.new_message().unwrap();
    m.write_u8(0).unwrap();
    assert!(m.finish().is_err());
}

#[test]
fn connection_upcall_can_refuse() {
    let t = upcall_type();
    let reg = EmbeddedRegistry::new();
    let p = pool("refuse");
    let server = ibis(&reg, &p, &[t]);
    let (tx, rx) = mpsc::channel();
    let rp = server
        .receive_port(&t, "in")
        .connection_upcall(Recorder {
            accept: false,
            tx: Mutex::new(tx),
        })
        .create()
        .unwrap();
    rp.enable_connections();
    let c = ibis(&reg, &p, &[t]);
    let mut sp = c.create_send_port(&t, "s").unwrap();
    match sp.connect(rp.identifier(), LONG) {
        Err(IplError::ConnectFailed { reason, .. }) => {
            assert!(reason.contains("refused"), "reason: {reason}")
        }
        other => panic!("expected ConnectFailed, got {other:?}"),
    }
    assert_eq!(
        rx.recv_timeout(LONG).unwrap(),
        Ev::Got(sp.identifier().clone())
    );
    assert!(rp.connected_to().is_empty());
    assert!(sp.connected_to().is_empty());
    // A refused connection is never reported as lost.
    assert!(rx.recv_timeout(Duration::from_millis(20)).is_err());
}
