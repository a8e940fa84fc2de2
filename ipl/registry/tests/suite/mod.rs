//! The behaviour every registry driver shares, written once and run for each backend:
//! a test file implements [`Backend`] and instantiates the suite with
//! [`registry_suite!`]. What only one driver does (the network's authentication, lost
//! connections, the embedded driver's upcall ordering) stays in that driver's file.
#![allow(dead_code)]

use std::sync::mpsc;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use ipl_registry::{
    Event, IbisIdentifier, JoinRequest, MemberId, PoolConfig, Registry, RegistryBackend,
    RegistryError,
};

pub const T: Duration = Duration::from_secs(10);
pub const LONG: Option<Duration> = Some(T);
pub const SHORT: Option<Duration> = Some(Duration::from_millis(50));

/// A registry driver under test.
pub trait Backend: Sync {
    /// A backend for one member, as a separate process would have it (the network
    /// driver: a connection of its own).
    fn client(&self) -> Arc<dyn RegistryBackend>;

    /// How long "nothing else arrives" is observed. The embedded driver queues events
    /// before an operation returns, so looking once is enough; over the network they
    /// come a little later.
    fn settle(&self) -> Duration;

    /// The size of `pool` as the registry itself (not a member) sees it.
    fn registry_pool_size(&self, pool: &str) -> Option<usize>;

    /// The connections the registry holds, for a driver that has connections.
    fn connections(&self) -> Option<usize>;
}

/// A member of the open-world `pool`.
pub fn join(b: &impl Backend, pool: &str) -> Registry {
    join_with(b, pool, PoolConfig::open_world(), JoinRequest::new("local")).expect("join")
}

/// A member joining with the given configuration and request.
pub fn join_with(
    b: &impl Backend,
    pool: &str,
    config: PoolConfig,
    request: JoinRequest,
) -> Result<Registry, RegistryError> {
    Registry::join(b.client(), pool, config, request)
}

/// The next event, waiting at most 10 s.
pub fn next(r: &Registry) -> Event {
    r.next_event(LONG)
        .expect("next_event")
        .expect("an event within 10 s")
}

/// Skips events until one matches.
pub fn until(r: &Registry, mut pred: impl FnMut(&Event) -> bool) -> Event {
    loop {
        let e = next(r);
        if pred(&e) {
            return e;
        }
    }
}

/// The next `n` members that join, in order (other events skipped).
pub fn joined(r: &Registry, n: usize) -> Vec<IbisIdentifier> {
    let mut v = Vec::new();
    while v.len() < n {
        if let Event::Joined(m) = next(r) {
            v.push(m);
        }
    }
    v
}

/// The events that arrive within the backend's settle time (those queued already
/// when it is zero).
pub fn quiet(b: &impl Backend, r: &Registry) -> Vec<Event> {
    let end = Instant::now() + b.settle();
    let mut v = Vec::new();
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match r.next_event(Some(left)).expect("next_event") {
            Some(e) => v.push(e),
            None => return v,
        }
    }
}

/// Waits (bounded) until `cond` holds.
pub fn wait_for(mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + T;
    while !cond() {
        assert!(Instant::now() < end, "condition not reached within 10 s");
        thread::sleep(Duration::from_millis(10));
    }
}

pub fn sequential_joins_are_seen_in_join_order(b: &impl Backend) {
    let ms: Vec<Registry> = (0..4).map(|_| join(b, "p")).collect();
    let ids: Vec<IbisIdentifier> = ms.iter().map(|m| m.identifier().clone()).collect();
    for m in &ms {
        assert_eq!(joined(m, 4), ids);
        assert_eq!(quiet(b, m), vec![]);
        assert_eq!(m.members().unwrap(), ids);
        assert_eq!(m.pool_size().unwrap(), 4);
    }
}

pub fn concurrent_joins_are_totally_ordered(b: &impl Backend) {
    const N: usize = 8;
    let start = Barrier::new(N);
    let results: Vec<(Registry, Vec<IbisIdentifier>)> = thread::scope(|sc| {
        let threads: Vec<_> = (0..N)
            .map(|i| {
                let start = &start;
                sc.spawn(move || {
                    let client = b.client();
                    start.wait();
                    let r = Registry::join(
                        client,
                        "p",
                        PoolConfig::open_world(),
                        JoinRequest::new(format!("c{}", i % 2)),
                    )
                    .unwrap();
                    let seen = joined(&r, N);
                    (r, seen)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let first = &results[0].1;
    let ids: Vec<u64> = first.iter().map(|m| m.id().get()).collect();
    // Join order is id order, every id once.
    assert_eq!(ids, (0..N as u64).collect::<Vec<_>>());
    for (r, seen) in &results {
        assert_eq!(seen, first);
        assert_eq!(&r.members().unwrap(), first);
        assert_eq!(r.pool_size().unwrap(), N);
    }
}

pub fn leave_gives_left_and_drop_gives_died(b: &impl Backend) {
    let a = join(b, "p");
    let m2 = join(b, "p");
    let m3 = join(b, "p");
    joined(&a, 3);
    assert_eq!(quiet(b, &a), vec![]);
    let (id2, id3) = (m2.identifier().clone(), m3.identifier().clone());
    m2.leave().unwrap();
    assert_eq!(next(&a), Event::Left(id2));
    drop(m3);
    assert_eq!(next(&a), Event::Died(id3));
    assert_eq!(a.members().unwrap(), vec![a.identifier().clone()]);
}

/// `is_gone` says departed only for a member reported Left or Died: not for a live
/// member, nor for one this member has not heard of (joined a moment ago, or never).
pub fn is_gone_only_after_a_reported_departure(b: &impl Backend) {
    let a = join(b, "p");
    let m2 = join(b, "p");
    let m3 = join(b, "p");
    joined(&a, 3);
    let (me, id2, id3) = (
        a.identifier().clone(),
        m2.identifier().clone(),
        m3.identifier().clone(),
    );
    let gone = |who: &IbisIdentifier| a.backend().is_gone(&me, who).unwrap();
    let unheard_of = IbisIdentifier::new(MemberId(id3.id().get() + 100), "p", "local", "x", vec![]);
    let other_pool = IbisIdentifier::new(id2.id(), "q", "local", "x", vec![]);
    assert!(!gone(&id2));
    assert!(!gone(&unheard_of), "a member not (yet) known is not gone");
    assert!(!gone(&other_pool));
    m2.leave().unwrap();
    assert_eq!(next(&a), Event::Left(id2.clone()));
    assert!(gone(&id2));
    assert!(!gone(&id3));
    drop(m3);
    assert_eq!(next(&a), Event::Died(id3.clone()));
    assert!(gone(&id3));
    assert!(!gone(&me));
    assert!(!gone(&unheard_of));
}

pub fn strict_election_with_racing_members(b: &impl Backend) {
    const N: usize = 8;
    let members: Vec<Registry> = (0..N).map(|_| join(b, "p")).collect();
    let start = Barrier::new(N);
    let winners: Vec<IbisIdentifier> = thread::scope(|sc| {
        let threads: Vec<_> = members
            .iter()
            .map(|m| {
                let start = &start;
                sc.spawn(move || {
                    start.wait();
                    m.elect("master").unwrap()
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert!(winners.iter().all(|w| *w == winners[0]));
    for m in &members {
        assert_eq!(
            m.get_election_result("master", SHORT).unwrap().as_ref(),
            Some(&winners[0])
        );
        assert_eq!(
            until(m, |e| matches!(e, Event::Elected { .. })),
            Event::Elected {
                election: "master".into(),
                winner: winners[0].clone()
            }
        );
        // Exactly one Elected event.
        assert!(!quiet(b, m)
            .iter()
            .any(|e| matches!(e, Event::Elected { .. })));
    }
}

pub fn election_result_waits_with_timeout(b: &impl Backend) {
    let a = join(b, "p");
    let m2 = join(b, "p");
    let t0 = Instant::now();
    assert_eq!(a.get_election_result("e", SHORT).unwrap(), None);
    assert!(t0.elapsed() >= Duration::from_millis(50));
    assert_eq!(
        a.get_election_result("e", Some(Duration::ZERO)).unwrap(),
        None
    );

    // A waiter is woken by the election, whether it waits already or not yet.
    let id2 = m2.identifier().clone();
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        tx.send(()).unwrap();
        a.get_election_result("e", LONG).unwrap()
    });
    rx.recv().unwrap();
    assert_eq!(m2.elect("e").unwrap(), id2);
    assert_eq!(waiter.join().unwrap(), Some(id2));
}

pub fn winner_leaving_unelects_and_a_new_election_can_be_won(b: &impl Backend) {
    let a = join(b, "p");
    let m2 = join(b, "p");
    assert_eq!(m2.elect("e").unwrap(), *m2.identifier());
    assert_eq!(a.elect("e").unwrap(), *m2.identifier());
    quiet(b, &a);
    m2.leave().unwrap();
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

pub fn signals_arrive_at_exactly_their_targets(b: &impl Backend) {
    let ms: Vec<Registry> = (0..4).map(|_| join(b, "p")).collect();
    for m in &ms {
        joined(m, 4);
        quiet(b, m);
    }
    let targets = [ms[1].identifier().clone(), ms[2].identifier().clone()];
    ms[0].signal("go", &targets).unwrap();
    let sig = Event::Signal {
        signal: "go".into(),
        source: ms[0].identifier().clone(),
    };
    assert_eq!(next(&ms[1]), sig);
    assert_eq!(next(&ms[2]), sig);
    for m in &ms {
        assert_eq!(quiet(b, m), vec![]);
    }

    // A target that is not a member (never was, or is gone) is an error, and
    // nothing is delivered.
    let stranger = IbisIdentifier::new(ipl_registry::MemberId(99), "p", "c", "x", vec![]);
    let err = ms[0]
        .signal("x", &[ms[1].identifier().clone(), stranger])
        .unwrap_err();
    assert!(matches!(err, RegistryError::UnknownMember { .. }), "{err}");
    assert_eq!(quiet(b, &ms[1]), vec![]);
    let gone = ms[3].identifier().clone();
    let mut ms = ms;
    ms.pop().unwrap().leave().unwrap();
    assert_eq!(
        until(&ms[1], |e| e.is_membership()),
        Event::Left(gone.clone())
    );
    let err = ms[0]
        .signal("x", &[ms[1].identifier().clone(), gone])
        .unwrap_err();
    assert!(matches!(err, RegistryError::UnknownMember { .. }), "{err}");
    assert_eq!(quiet(b, &ms[1]), vec![]);
}

pub fn closed_world_pool(b: &impl Backend) {
    let cfg = PoolConfig::closed_world(3);
    let a = join_with(b, "p", cfg, JoinRequest::new("c")).unwrap();
    let _m2 = join_with(b, "p", cfg, JoinRequest::new("c")).unwrap();
    assert!(!a.is_closed().unwrap());
    assert_eq!(a.wait_until_pool_closed(SHORT), Err(RegistryError::Timeout));

    let m3 = thread::scope(|sc| {
        let joiner = sc.spawn(|| join_with(b, "p", cfg, JoinRequest::new("c")).unwrap());
        a.wait_until_pool_closed(LONG).unwrap();
        joiner.join().unwrap()
    });
    assert!(a.is_closed().unwrap());
    m3.wait_until_pool_closed(Some(Duration::ZERO)).unwrap();
    assert_eq!(until(&a, |e| *e == Event::PoolClosed), Event::PoolClosed);

    let err = join_with(b, "p", cfg, JoinRequest::new("c")).unwrap_err();
    assert_eq!(err, RegistryError::PoolClosed("p".into()));
    let err = join_with(b, "p", PoolConfig::closed_world(4), JoinRequest::new("c")).unwrap_err();
    assert!(matches!(err, RegistryError::ConfigMismatch { .. }), "{err}");
    // Open world pools never close.
    let o = join(b, "open");
    assert!(matches!(
        o.wait_until_pool_closed(SHORT),
        Err(RegistryError::NotClosedWorld(_))
    ));
}

pub fn terminate_reaches_everyone(b: &impl Backend) {
    let ms: Vec<Registry> = (0..3).map(|_| join(b, "p")).collect();
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
    let err = join_with(b, "p", PoolConfig::open_world(), JoinRequest::new("c")).unwrap_err();
    assert_eq!(err, RegistryError::PoolTerminated("p".into()));
}

pub fn maybe_dead_probes_liveness(b: &impl Backend) {
    let a = join(b, "p");
    let m2 = join(b, "p");
    let m3 = join(b, "p");
    assert_eq!(m3.elect("e").unwrap(), *m3.identifier());
    joined(&a, 3);
    joined(&m2, 3);
    quiet(b, &a);
    quiet(b, &m2);

    // A live member survives suspicion.
    a.maybe_dead(m2.identifier()).unwrap();
    assert_eq!(a.pool_size().unwrap(), 3);
    assert_eq!(quiet(b, &a), vec![]);

    // A crashed member is only noticed when suspected.
    let id3 = m3.identifier().clone();
    m3.crash();
    assert_eq!(quiet(b, &a), vec![]);
    assert_eq!(a.pool_size().unwrap(), 3);
    assert_eq!(b.registry_pool_size("p"), Some(3));
    let t0 = Instant::now();
    a.maybe_dead(&id3).unwrap();
    assert!(t0.elapsed() < T);
    let expect = vec![
        Event::Died(id3.clone()),
        Event::Unelected {
            election: "e".into(),
        },
    ];
    // The member that asked has its events before the answer.
    let mut got = Vec::new();
    while let Some(e) = a.next_event(Some(Duration::ZERO)).unwrap() {
        got.push(e);
    }
    assert_eq!(got, expect);
    assert_eq!(vec![next(&m2), next(&m2)], expect);
    assert_eq!(quiet(b, &m2), vec![]);
    assert_eq!(a.pool_size().unwrap(), 2);
    // Suspecting a member that is already gone is harmless.
    m2.maybe_dead(&id3).unwrap();
    assert_eq!(quiet(b, &a), vec![]);
    // A driver with connections closes the one the crashed member kept open while it
    // hung, once the member was declared dead.
    if b.connections().is_some() {
        wait_for(|| b.connections() == Some(2));
    }
}

/// A member can neither probe nor declare dead a member of another pool (with
/// the same id: ids restart in every pool).
pub fn suspicion_stays_within_the_pool(b: &impl Backend) {
    let x = join(b, "x");
    let y = join(b, "y");
    assert_eq!(x.identifier().id(), y.identifier().id());
    let err = x.assume_dead(y.identifier()).unwrap_err();
    assert!(matches!(err, RegistryError::UnknownMember { .. }), "{err}");
    let err = x.maybe_dead(y.identifier()).unwrap_err();
    assert!(matches!(err, RegistryError::UnknownMember { .. }), "{err}");
    assert_eq!(b.registry_pool_size("y"), Some(1));
    assert_eq!(y.members().unwrap(), vec![y.identifier().clone()]);
    assert_eq!(quiet(b, &y), vec![Event::Joined(y.identifier().clone())]);
}

pub fn assume_dead_declares_death(b: &impl Backend) {
    let a = join(b, "p");
    let m2 = join(b, "p");
    joined(&a, 2);
    quiet(b, &a);
    let id2 = m2.identifier().clone();
    a.assume_dead(&id2).unwrap();
    assert_eq!(next(&a), Event::Died(id2));
    assert_eq!(quiet(b, &a), vec![]);
    // The victim learns it is no longer a member.
    wait_for(|| m2.members().is_err());
    assert!(matches!(
        m2.elect("x"),
        Err(RegistryError::UnknownMember { .. })
    ));
    drop(m2);
    assert_eq!(quiet(b, &a), vec![]);
}

pub fn generic_join_through_a_backend_trait_object(b: &impl Backend) {
    let a = join_with(
        b,
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
        join_with(b, "p", PoolConfig::closed_world(2), JoinRequest::new("x")).unwrap_err(),
        RegistryError::ConfigMismatch {
            pool: "p".into(),
            existing: Some(1),
            requested: Some(2)
        }
    );
}

pub fn next_event_times_out(b: &impl Backend) {
    let a = join(b, "p");
    joined(&a, 1);
    quiet(b, &a);
    let t0 = Instant::now();
    assert_eq!(a.next_event(SHORT).unwrap(), None);
    assert!(t0.elapsed() >= Duration::from_millis(50));
}

/// One `#[test]` per shared behaviour, each on a fresh backend made by `$make`.
macro_rules! registry_suite {
    ($make:expr) => {
        $crate::suite::registry_suite!(@tests $make;
            sequential_joins_are_seen_in_join_order,
            concurrent_joins_are_totally_ordered,
            leave_gives_left_and_drop_gives_died,
            is_gone_only_after_a_reported_departure,
            strict_election_with_racing_members,
            election_result_waits_with_timeout,
            winner_leaving_unelects_and_a_new_election_can_be_won,
            signals_arrive_at_exactly_their_targets,
            closed_world_pool,
            terminate_reaches_everyone,
            maybe_dead_probes_liveness,
            assume_dead_declares_death,
            suspicion_stays_within_the_pool,
            generic_join_through_a_backend_trait_object,
            next_event_times_out,
        );
    };
    (@tests $make:expr; $($name:ident,)*) => {
        $(
            #[test]
            fn $name() {
                suite::$name(&$make);
            }
        )*
    };
}
pub(crate) use registry_suite;
