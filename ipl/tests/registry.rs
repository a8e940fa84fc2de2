//! The registry as seen through Ibis instances: membership, elections, signals, closed
//! world, termination, crashes and orderly ends.

mod common;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use common::{ibis_caps, pool, simple, LONG};
use ipl::{EmbeddedRegistry, Event, Ibis, IbisCapabilities as C, IbisIdentifier, RegistryError};

fn caps() -> C {
    C::MEMBERSHIP | C::ELECTIONS | C::SIGNALS | C::TERMINATION
}

/// The next event of `i` matching `pred`, skipping others; panics after `LONG`.
fn next_matching(i: &Ibis, what: &str, pred: impl Fn(&Event) -> bool) -> Event {
    let deadline = std::time::Instant::now() + LONG;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match i.registry().next_event(Some(left)).unwrap() {
            Some(e) if pred(&e) => return e,
            Some(_) => {}
            None => panic!("no {what} event within {LONG:?}"),
        }
    }
}

#[test]
fn joins_are_seen_by_all_members() {
    let reg = EmbeddedRegistry::new();
    let p = pool("joins");
    let members: Vec<Ibis> = (0..3)
        .map(|_| ibis_caps(&reg, &p, &[simple()], caps()))
        .collect();
    let ids: Vec<IbisIdentifier> = members.iter().map(|m| m.identifier().clone()).collect();
    for m in &members {
        let mut joined = Vec::new();
        while joined.len() < ids.len() {
            match next_matching(m, "Joined", |e| matches!(e, Event::Joined(_))) {
                Event::Joined(who) => joined.push(who),
                _ => unreachable!(),
            }
        }
        // Same order everywhere: join order.
        assert_eq!(joined, ids);
        assert_eq!(m.registry().members().unwrap(), ids);
        assert_eq!(m.identifier().pool(), p);
    }
}

#[test]
fn one_election_winner_among_racing_instances() {
    let reg = EmbeddedRegistry::new();
    let p = pool("elect");
    let members: Vec<Arc<Ibis>> = (0..4)
        .map(|_| Arc::new(ibis_caps(&reg, &p, &[], caps())))
        .collect();
    let barrier = Arc::new(Barrier::new(members.len()));
    let threads: Vec<_> = members
        .iter()
        .map(|m| {
            let m = Arc::clone(m);
            let b = Arc::clone(&barrier);
            std::thread::spawn(move || {
                b.wait();
                m.registry().elect("leader").unwrap()
            })
        })
        .collect();
    let winners: Vec<IbisIdentifier> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(winners.iter().all(|w| *w == winners[0]), "{winners:?}");
    assert!(members.iter().any(|m| *m.identifier() == winners[0]));
    for m in &members {
        assert_eq!(
            m.registry()
                .get_election_result("leader", Some(Duration::ZERO))
                .unwrap(),
            Some(winners[0].clone())
        );
        match next_matching(m, "Elected", |e| matches!(e, Event::Elected { .. })) {
            Event::Elected { election, winner } => {
                assert_eq!(election, "leader");
                assert_eq!(winner, winners[0]);
            }
            _ => unreachable!(),
        }
    }
    // Nobody wins an election nobody ran.
    assert_eq!(
        members[0]
            .registry()
            .get_election_result("other", Some(Duration::from_millis(10)))
            .unwrap(),
        None
    );
}

#[test]
fn signals_arrive() {
    let reg = EmbeddedRegistry::new();
    let p = pool("signals");
    let a = ibis_caps(&reg, &p, &[], caps());
    let b = ibis_caps(&reg, &p, &[], caps());
    let c = ibis_caps(&reg, &p, &[], caps());
    a.registry()
        .signal("wake up", &[b.identifier().clone(), c.identifier().clone()])
        .unwrap();
    for m in [&b, &c] {
        match next_matching(m, "Signal", |e| matches!(e, Event::Signal { .. })) {
            Event::Signal { signal, source } => {
                assert_eq!(signal, "wake up");
                assert_eq!(source, *a.identifier());
            }
            _ => unreachable!(),
        }
    }
}

#[test]
fn closed_world_waits_for_all_members() {
    let reg = EmbeddedRegistry::new();
    let p = pool("closed");
    let cw = C::MEMBERSHIP | C::CLOSED_WORLD;
    let build = || {
        Ibis::builder()
            .pool(&p)
            .registry(&reg)
            .capabilities(cw)
            .pool_size(3)
            .build()
            .unwrap()
    };
    let a = build();
    assert!(matches!(
        a.registry()
            .wait_until_pool_closed(Some(Duration::from_millis(30))),
        Err(RegistryError::Timeout)
    ));
    assert!(!a.registry().is_closed().unwrap());
    let late = std::thread::scope(|s| {
        let waiter = s.spawn(|| a.registry().wait_until_pool_closed(Some(LONG)));
        let b = build();
        let c = build();
        waiter.join().unwrap().unwrap();
        (b, c)
    });
    assert!(a.registry().is_closed().unwrap());
    next_matching(&a, "PoolClosed", |e| matches!(e, Event::PoolClosed));
    // A fourth member cannot join.
    let r = Ibis::builder()
        .pool(&p)
        .registry(&reg)
        .capabilities(cw)
        .pool_size(3)
        .build();
    assert!(r.is_err());
    drop(late);
}

#[test]
fn terminate_reaches_everyone() {
    let reg = EmbeddedRegistry::new();
    let p = pool("terminate");
    let a = ibis_caps(&reg, &p, &[], caps());
    let b = ibis_caps(&reg, &p, &[], caps());
    assert!(matches!(
        b.registry()
            .wait_until_terminated(Some(Duration::from_millis(10))),
        Err(RegistryError::Timeout)
    ));
    a.registry().terminate().unwrap();
    b.registry().wait_until_terminated(Some(LONG)).unwrap();
    assert!(b.registry().has_terminated().unwrap());
    match next_matching(&b, "Terminated", |e| matches!(e, Event::Terminated { .. })) {
        Event::Terminated { by } => assert_eq!(by, *a.identifier()),
        _ => unreachable!(),
    }
}

#[test]
fn abort_then_maybe_dead_is_died_and_end_is_left() {
    let reg = EmbeddedRegistry::new();
    let p = pool("death");
    let a = ibis_caps(&reg, &p, &[simple()], caps());
    let b = ibis_caps(&reg, &p, &[simple()], caps());
    let c = ibis_caps(&reg, &p, &[simple()], caps());
    let b_id = b.identifier().clone();
    let c_id = c.identifier().clone();

    b.abort();
    // A crash alone is silent ...
    assert_eq!(a.registry().members().unwrap().len(), 3);
    // ... until somebody suspects it.
    a.registry().maybe_dead(&b_id).unwrap();
    match next_matching(&a, "Died", |e| matches!(e, Event::Died(_) | Event::Left(_))) {
        Event::Died(who) => assert_eq!(who, b_id),
        other => panic!("expected Died, got {other:?}"),
    }
    // maybe_dead of a live member changes nothing.
    c.registry().maybe_dead(a.identifier()).unwrap();
    assert_eq!(a.registry().members().unwrap().len(), 2);

    c.end().unwrap();
    match next_matching(&a, "Left", |e| matches!(e, Event::Died(_) | Event::Left(_))) {
        Event::Left(who) => assert_eq!(who, c_id),
        other => panic!("expected Left, got {other:?}"),
    }
    assert_eq!(
        a.registry().members().unwrap(),
        vec![a.identifier().clone()]
    );
}
