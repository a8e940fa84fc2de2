//! Behaviour of the embedded driver through the per-member `Registry` handle.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use ipl_registry::{
    EmbeddedRegistry, Event, IbisIdentifier, JoinRequest, PoolConfig, Registry, RegistryBackend,
    RegistryError, RegistryEventHandler, EVENT_THREAD_NAME,
};

const LONG: Option<Duration> = Some(Duration::from_secs(10));
const SHORT: Option<Duration> = Some(Duration::from_millis(50));

fn open() -> PoolConfig {
    PoolConfig::open_world()
}

fn join(reg: &EmbeddedRegistry, pool: &str) -> Registry {
    reg.join(pool, open(), JoinRequest::new("local"))
        .expect("join")
}

/// All currently queued events (no waiting).
fn drain(r: &Registry) -> Vec<Event> {
    let mut v = Vec::new();
    while let Some(e) = r.next_event(Some(Duration::ZERO)).expect("next_event") {
        v.push(e);
    }
    v
}

/// The next event, waiting at most 10 s.
fn next(r: &Registry) -> Event {
    r.next_event(LONG)
        .expect("next_event")
        .expect("an event within 10 s")
}

/// Skips events until one matches.
fn until(r: &Registry, mut pred: impl FnMut(&Event) -> bool) -> Event {
    loop {
        let e = next(r);
        if pred(&e) {
            return e;
        }
    }
}

fn joined(r: &Registry, n: usize) -> Vec<IbisIdentifier> {
    let mut v = Vec::new();
    while v.len() < n {
        if let Event::Joined(m) = next(r) {
            v.push(m);
        }
    }
    v
}

#[test]
fn sequential_joins_are_seen_in_join_order() {
    let reg = EmbeddedRegistry::new();
    let ms: Vec<Registry> = (0..4).map(|_| join(&reg, "p")).collect();
    let ids: Vec<IbisIdentifier> = ms.iter().map(|m| m.identifier().clone()).collect();
    for m in &ms {
        let evs = drain(m);
        assert_eq!(
            evs,
            ids.iter().cloned().map(Event::Joined).collect::<Vec<_>>()
        );
        assert_eq!(m.members().unwrap(), ids);
        assert_eq!(m.pool_size().unwrap(), 4);
    }
}

#[test]
fn concurrent_joins_are_totally_ordered() {
    const N: usize = 8;
    let reg = EmbeddedRegistry::new();
    let start = Arc::new(Barrier::new(N));
    let threads: Vec<_> = (0..N)
        .map(|i| {
            let reg = reg.clone();
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                let r = reg
                    .join("p", open(), JoinRequest::new(format!("c{}", i % 2)))
                    .unwrap();
                let seen = joined(&r, N);
                (r, seen)
            })
        })
        .collect();
    let results: Vec<(Registry, Vec<IbisIdentifier>)> =
        threads.into_iter().map(|t| t.join().unwrap()).collect();
    let first = &results[0].1;
    let mut ids: Vec<_> = first.iter().map(|m| m.id().get()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "join order = id order");
    ids.dedup();
    assert_eq!(ids.len(), N);
    for (_, seen) in &results {
        assert_eq!(seen, first);
    }
}

#[test]
fn leave_gives_left_and_drop_gives_died() {
    let reg = EmbeddedRegistry::new();
    let a = join(&reg, "p");
    let b = join(&reg, "p");
    let c = join(&reg, "p");
    drain(&a);
    let (bid, cid) = (b.identifier().clone(), c.identifier().clone());
    b.leave().unwrap();
    assert_eq!(next(&a), Event::Left(bid));
    drop(c);
    assert_eq!(next(&a), Event::Died(cid));
    assert_eq!(a.members().unwrap(), vec![a.identifier().clone()]);
}

#[test]
fn strict_election_with_racing_threads() {
    const N: usize = 8;
    let reg = EmbeddedRegistry::new();
    let members: Vec<Registry> = (0..N).map(|_| join(&reg, "p")).collect();
    let members = Arc::new(members);
    let start = Arc::new(Barrier::new(N));
    let winners: Vec<IbisIdentifier> = (0..N)
        .map(|i| {
            let members = Arc::clone(&members);
            let start = Arc::clone(&start);
            thread::spawn(move || {
                start.wait();
                members[i].elect("master").unwrap()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    assert!(winners.iter().all(|w| *w == winners[0]));
    for m in members.iter() {
        assert_eq!(
            m.get_election_result("master", SHORT).unwrap().as_ref(),
            Some(&winners[0])
        );
        let elected: Vec<_> = drain(m)
            .into_iter()
            .filter(|e| matches!(e, Event::Elected { .. }))
            .collect();
        assert_eq!(
            elected,
            vec![Event::Elected {
                election: "master".into(),
                winner: winners[0].clone()
            }]
        );
    }
}

#[test]
fn election_result_waits_with_timeout() {
    let reg = EmbeddedRegistry::new();
    let a = join(&reg, "p");
    let b = join(&reg, "p");
    let t0 = Instant::now();
    assert_eq!(a.get_election_result("e", SHORT).unwrap(), None);
    assert!(t0.elapsed() >= Duration::from_millis(50));
    assert_eq!(
        a.get_election_result("e", Some(Duration::ZERO)).unwrap(),
        None
    );

    let bid = b.identifier().clone();
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        tx.send(()).unwrap();
        a.get_election_result("e", LONG).unwrap()
    });
    rx.recv().unwrap();
    assert_eq!(b.elect("e").unwrap(), bid);
    assert_eq!(waiter.join().unwrap(), Some(bid));
}

#[test]
fn winner_leaving_unelects_and_a_new_election_can_be_won() {
    let reg = EmbeddedRegistry::new();
    let a = join(&reg, "p");
    let b = join(&reg, "p");
    assert_eq!(b.elect("e").unwrap(), *b.identifier());
    assert_eq!(a.elect("e").unwrap(), *b.identifier());
    drain(&a);
    b.leave().unwrap();
    assert_eq!(
        until(&a, |e| matches!(e, Event::Unelected { .. })),
        Event::Unelected {
            election: "e".into()
        }
    );
    assert_eq!(
        a.get_election_result("e", Some(Duration::ZERO)).unwrap(),
        None
    );
    assert_eq!(a.elect("e").unwrap(), *a.identifier());
}

#[test]
fn signals_arrive_at_exactly_their_targets() {
    let reg = EmbeddedRegistry::new();
    let ms: Vec<Registry> = (0..4).map(|_| join(&reg, "p")).collect();
    for m in &ms {
        drain(m);
    }
    let targets = [ms[1].identifier().clone(), ms[2].identifier().clone()];
    ms[0].signal("go", &targets).unwrap();
    let sig = Event::Signal {
        signal: "go".into(),
        source: ms[0].identifier().clone(),
    };
    assert_eq!(drain(&ms[0]), vec![]);
    assert_eq!(drain(&ms[1]), vec![sig.clone()]);
    assert_eq!(drain(&ms[2]), vec![sig]);
    assert_eq!(drain(&ms[3]), vec![]);

    // A target that is gone is an error and nothing is delivered.
    let gone = ms[3].identifier().clone();
    let mut ms = ms;
    ms.pop().unwrap().leave().unwrap();
    drain(&ms[1]);
    let err = ms[0]
        .signal("x", &[ms[1].identifier().clone(), gone])
        .unwrap_err();
    assert!(matches!(err, RegistryError::UnknownMember { .. }), "{err}");
    assert_eq!(drain(&ms[1]), vec![]);
}

#[test]
fn closed_world_pool() {
    let reg = EmbeddedRegistry::new();
    let cfg = PoolConfig::closed_world(3);
    let a = reg.join("p", cfg, JoinRequest::new("c")).unwrap();
    let _b = reg.join("p", cfg, JoinRequest::new("c")).unwrap();
    assert!(!a.is_closed().unwrap());
    assert_eq!(a.wait_until_pool_closed(SHORT), Err(RegistryError::Timeout));

    let reg2 = reg.clone();
    let (tx, rx) = mpsc::channel();
    let joiner = thread::spawn(move || {
        rx.recv().unwrap();
        reg2.join("p", cfg, JoinRequest::new("c")).unwrap()
    });
    tx.send(()).unwrap();
    a.wait_until_pool_closed(LONG).unwrap();
    assert!(a.is_closed().unwrap());
    let c = joiner.join().unwrap();
    c.wait_until_pool_closed(Some(Duration::ZERO)).unwrap();
    assert_eq!(until(&a, |e| *e == Event::PoolClosed), Event::PoolClosed);

    let err = reg.join("p", cfg, JoinRequest::new("c")).unwrap_err();
    assert_eq!(err, RegistryError::PoolClosed("p".into()));
    // Open world pools never close.
    let o = join(&reg, "open");
    assert!(matches!(
        o.wait_until_pool_closed(SHORT),
        Err(RegistryError::NotClosedWorld(_))
    ));
}

#[test]
fn terminate_reaches_everyone() {
    let reg = EmbeddedRegistry::new();
    let ms: Vec<Registry> = (0..3).map(|_| join(&reg, "p")).collect();
    assert!(!ms[0].has_terminated().unwrap());
    assert_eq!(
        ms[0].wait_until_terminated(SHORT),
        Err(RegistryError::Timeout)
    );
    ms[1].terminate().unwrap();
    let by = ms[1].identifier().clone();
    for m in &ms {
        assert_eq!(
            until(m, |e| matches!(e, Event::Terminated { .. })),
            Event::Terminated { by: by.clone() }
        );
        assert!(m.has_terminated().unwrap());
        m.wait_until_terminated(Some(Duration::ZERO)).unwrap();
    }
    let err = reg.join("p", open(), JoinRequest::new("c")).unwrap_err();
    assert_eq!(err, RegistryError::PoolTerminated("p".into()));
}

#[test]
fn maybe_dead_probes_liveness() {
    let reg = EmbeddedRegistry::new();
    let a = join(&reg, "p");
    let b = join(&reg, "p");
    let c = join(&reg, "p");
    assert_eq!(c.elect("e").unwrap(), *c.identifier());
    drain(&a);
    drain(&b);

    // A live member survives suspicion.
    a.maybe_dead(b.identifier()).unwrap();
    assert_eq!(a.pool_size().unwrap(), 3);
    assert_eq!(drain(&a), vec![]);

    // A crashed member is only noticed when suspected.
    let cid = c.identifier().clone();
    c.crash();
    assert_eq!(a.pool_size().unwrap(), 3);
    assert_eq!(drain(&a), vec![]);
    a.maybe_dead(&cid).unwrap();
    let expect = vec![
        Event::Died(cid.clone()),
        Event::Unelected {
            election: "e".into(),
        },
    ];
    assert_eq!(drain(&a), expect);
    assert_eq!(drain(&b), expect);
    assert_eq!(a.pool_size().unwrap(), 2);
    // Suspecting a member that is already gone is harmless.
    b.maybe_dead(&cid).unwrap();
    assert_eq!(drain(&a), vec![]);
}

#[test]
fn assume_dead_declares_death() {
    let reg = EmbeddedRegistry::new();
    let a = join(&reg, "p");
    let b = join(&reg, "p");
    drain(&a);
    a.assume_dead(b.identifier()).unwrap();
    assert_eq!(drain(&a), vec![Event::Died(b.identifier().clone())]);
    // The dead member's handle is cut off.
    assert!(matches!(
        b.elect("x"),
        Err(RegistryError::UnknownMember { .. })
    ));
    assert!(matches!(
        b.next_event(SHORT),
        Err(RegistryError::UnknownMember { .. })
    ));
    drop(b);
    assert_eq!(drain(&a), vec![]);
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
    let reg = EmbeddedRegistry::new();
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

#[test]
fn generic_join_through_a_backend_trait_object() {
    let backend: Arc<dyn RegistryBackend> = Arc::new(EmbeddedRegistry::new());
    let a = Registry::join(
        Arc::clone(&backend),
        "p",
        PoolConfig::closed_world(1),
        JoinRequest::new("site-a")
            .with_name("first")
            .with_address("inproc", b"a".to_vec()),
    )
    .unwrap();
    assert_eq!(a.identifier().name(), "first");
    assert_eq!(a.identifier().cluster(), "site-a");
    assert_eq!(a.identifier().addresses()[0].transport, "inproc");
    a.wait_until_pool_closed(Some(Duration::ZERO)).unwrap();
    assert_eq!(
        Registry::join(
            backend,
            "p",
            PoolConfig::closed_world(2),
            JoinRequest::new("x")
        )
        .unwrap_err(),
        RegistryError::ConfigMismatch {
            pool: "p".into(),
            existing: Some(1),
            requested: Some(2)
        }
    );
}

#[test]
fn next_event_times_out() {
    let reg = EmbeddedRegistry::new();
    let a = join(&reg, "p");
    drain(&a);
    let t0 = Instant::now();
    assert_eq!(a.next_event(SHORT).unwrap(), None);
    assert!(t0.elapsed() >= Duration::from_millis(50));
}
