//! The embedded driver through the per-member `Registry` handle: the shared registry
//! suite (`suite/mod.rs`), then what only this driver promises.

mod suite;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use ipl_registry::{
    EmbeddedRegistry, Event, IbisIdentifier, RegistryBackend, RegistryError, RegistryEventHandler,
    EVENT_THREAD_NAME,
};
use suite::{join, next, Backend, SHORT};

/// A fresh embedded registry; every member joins it directly.
struct Embedded(EmbeddedRegistry);

impl Embedded {
    fn new() -> Self {
        Embedded(EmbeddedRegistry::new())
    }
}

impl Backend for Embedded {
    fn client(&self) -> Arc<dyn RegistryBackend> {
        Arc::new(self.0.clone())
    }

    fn settle(&self) -> Duration {
        Duration::ZERO
    }

    fn registry_pool_size(&self, pool: &str) -> Option<usize> {
        self.0.with_core(|c| c.pool(pool).ok().map(|p| p.size()))
    }

    fn connections(&self) -> Option<usize> {
        None
    }
}

suite::registry_suite!(Embedded::new());

#[test]
fn assume_dead_cuts_the_handle_off_at_once() {
    let reg = Embedded::new();
    let a = join(&reg, "p");
    let b = join(&reg, "p");
    a.assume_dead(b.identifier()).unwrap();
    // Events still queued for the dead member are not handed out.
    assert!(matches!(
        b.next_event(SHORT),
        Err(RegistryError::UnknownMember { .. })
    ));
}

struct Recorder {
    tx: mpsc::Sender<(String, Event)>,
    active: Arc<AtomicUsize>,
}

impl Recorder {
    fn record(&mut self, e: Event) {
        let now = self.active.fetch_add(1, Ordering::SeqCst);
        assert_eq!(now, 0, "two upcalls at once");
        let name = thread::current().name().unwrap_or("").to_owned();
        // Widen the window in which a concurrent upcall would be detected.
        thread::yield_now();
        let _ = self.tx.send((name, e));
        self.active.fetch_sub(1, Ordering::SeqCst);
    }
}

impl RegistryEventHandler for Recorder {
    fn joined(&mut self, m: &IbisIdentifier) {
        self.record(Event::Joined(m.clone()));
    }
    fn left(&mut self, m: &IbisIdentifier) {
        self.record(Event::Left(m.clone()));
    }
    fn died(&mut self, m: &IbisIdentifier) {
        self.record(Event::Died(m.clone()));
    }
    fn got_signal(&mut self, signal: &str, source: &IbisIdentifier) {
        self.record(Event::Signal {
            signal: signal.into(),
            source: source.clone(),
        });
    }
    fn elected(&mut self, election: &str, winner: &IbisIdentifier) {
        self.record(Event::Elected {
            election: election.into(),
            winner: winner.clone(),
        });
    }
    fn unelected(&mut self, election: &str) {
        self.record(Event::Unelected {
            election: election.into(),
        });
    }
    fn pool_closed(&mut self) {
        self.record(Event::PoolClosed);
    }
    fn terminated(&mut self, by: &IbisIdentifier) {
        self.record(Event::Terminated { by: by.clone() });
    }
}

#[test]
fn event_handler_upcalls_in_order_one_at_a_time() {
    let reg = Embedded::new();
    let a = join(&reg, "p");
    // One event is taken explicitly before the handler is installed.
    assert_eq!(next(&a), Event::Joined(a.identifier().clone()));
    let (tx, rx) = mpsc::channel();
    let active = Arc::new(AtomicUsize::new(0));
    a.set_event_handler(Recorder { tx, active }).unwrap();
    assert_eq!(
        a.set_event_handler(ipl_registry_noop()),
        Err(RegistryError::HandlerAlreadySet)
    );
    assert_eq!(
        a.next_event(SHORT),
        Err(RegistryError::EventHandlerInstalled)
    );

    let mut expect = Vec::new();
    let mut others = Vec::new();
    for i in 0..20 {
        let m = join(&reg, "p");
        expect.push(Event::Joined(m.identifier().clone()));
        if i % 3 == 0 {
            m.signal("hi", &[a.identifier().clone()]).unwrap();
            expect.push(Event::Signal {
                signal: "hi".into(),
                source: m.identifier().clone(),
            });
        }
        others.push(m);
    }
    let w = others[0].elect("e").unwrap();
    expect.push(Event::Elected {
        election: "e".into(),
        winner: w.clone(),
    });
    let first = others.remove(0);
    first.leave().unwrap();
    expect.push(Event::Left(w));
    expect.push(Event::Unelected {
        election: "e".into(),
    });
    let d = others.pop().unwrap();
    expect.push(Event::Died(d.identifier().clone()));
    drop(d);
    others[0].terminate().unwrap();
    expect.push(Event::Terminated {
        by: others[0].identifier().clone(),
    });

    for want in &expect {
        let (thread_name, got) = rx.recv_timeout(Duration::from_secs(10)).expect("upcall");
        assert_eq!(thread_name, EVENT_THREAD_NAME);
        assert_eq!(&got, want);
    }
    // Leaving stops the upcall thread (join happens in drop, bounded by the poll interval).
    a.leave().unwrap();
    assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
}

fn ipl_registry_noop() -> impl RegistryEventHandler {
    struct Noop;
    impl RegistryEventHandler for Noop {}
    Noop
}
