//! Deterministic tests of the sans-IO core, plus a property test.

use std::collections::{BTreeMap, HashMap};

use ipl_registry::{
    Event, IbisIdentifier, JoinRequest, MaybeDead, MemberId, PoolConfig, PoolState, RegistryCore,
    RegistryError, Seq,
};
use proptest::prelude::*;

fn req(c: &str) -> JoinRequest {
    JoinRequest::new(c)
}

fn events(p: &mut PoolState, m: &IbisIdentifier) -> Vec<Event> {
    p.take_events(m.id())
        .expect("member")
        .into_iter()
        .map(|(_, e)| e)
        .collect()
}

#[test]
fn join_assigns_ids_in_order_and_catches_up() {
    let mut p = PoolState::new("p", PoolConfig::default()).unwrap();
    let a = p.join(req("c1").with_name("alpha")).unwrap();
    let b = p
        .join(req("c2").with_address("tcp", vec![1, 2, 3]))
        .unwrap();
    assert_eq!(a.id(), MemberId(0));
    assert_eq!(b.id(), MemberId(1));
    assert_eq!(a.name(), "alpha");
    assert_eq!(b.name(), "member-1");
    assert_eq!(b.cluster(), "c2");
    assert_eq!(b.pool(), "p");
    assert_eq!(b.address_for("tcp").unwrap().address, vec![1, 2, 3]);
    let c = p.join(req("c1")).unwrap();
    assert_eq!(
        events(&mut p, &a),
        vec![
            Event::Joined(a.clone()),
            Event::Joined(b.clone()),
            Event::Joined(c.clone())
        ]
    );
    let cs = p.take_events(c.id()).unwrap();
    assert_eq!(
        cs,
        vec![
            (0, Event::Joined(a.clone())),
            (1, Event::Joined(b.clone())),
            (2, Event::Joined(c.clone()))
        ]
    );
    assert_eq!(p.members(), vec![a, b, c]);
    assert_eq!(p.size(), 3);
}

#[test]
fn leave_and_die_notify_others_and_clear_elections() {
    let mut p = PoolState::new("p", PoolConfig::default()).unwrap();
    let a = p.join(req("c")).unwrap();
    let b = p.join(req("c")).unwrap();
    let c = p.join(req("c")).unwrap();
    assert_eq!(p.elect("boss", b.id()).unwrap(), b);
    assert_eq!(p.elect("boss", a.id()).unwrap(), b);
    assert_eq!(p.election_result("boss"), Some(b.clone()));
    for m in [&a, &b, &c] {
        p.take_events(m.id()).unwrap();
    }
    p.leave(b.id()).unwrap();
    assert_eq!(p.election_result("boss"), None);
    let expect = vec![
        Event::Left(b.clone()),
        Event::Unelected {
            election: "boss".into(),
        },
    ];
    assert_eq!(events(&mut p, &a), expect);
    assert_eq!(events(&mut p, &c), expect);
    assert_eq!(p.elect("boss", c.id()).unwrap(), c);
    p.died(c.id()).unwrap();
    assert_eq!(
        events(&mut p, &a),
        vec![
            Event::Elected {
                election: "boss".into(),
                winner: c.clone()
            },
            Event::Died(c.clone()),
            Event::Unelected {
                election: "boss".into()
            }
        ]
    );
    assert!(matches!(
        p.leave(b.id()),
        Err(RegistryError::UnknownMember { .. })
    ));
    assert!(p.take_events(b.id()).is_err());
    assert!(p.elect("x", c.id()).is_err());
}

#[test]
fn closed_world_closes_and_refuses_joins() {
    assert!(matches!(
        PoolState::new("p", PoolConfig::closed_world(0)),
        Err(RegistryError::InvalidConfig(_))
    ));
    let mut p = PoolState::new("p", PoolConfig::closed_world(2)).unwrap();
    let a = p.join(req("c")).unwrap();
    assert!(!p.is_closed());
    let b = p.join(req("c")).unwrap();
    assert!(p.is_closed());
    assert_eq!(
        events(&mut p, &a),
        vec![
            Event::Joined(a.clone()),
            Event::Joined(b.clone()),
            Event::PoolClosed
        ]
    );
    assert_eq!(events(&mut p, &b).last(), Some(&Event::PoolClosed));
    assert_eq!(p.join(req("c")), Err(RegistryError::PoolClosed("p".into())));
    // Leaving does not reopen a closed world.
    p.leave(b.id()).unwrap();
    assert!(p.join(req("c")).is_err());
}

#[test]
fn terminate_broadcasts_once_and_refuses_joins() {
    let mut p = PoolState::new("p", PoolConfig::default()).unwrap();
    let a = p.join(req("c")).unwrap();
    let b = p.join(req("c")).unwrap();
    p.take_events(a.id()).unwrap();
    p.take_events(b.id()).unwrap();
    p.terminate(b.id()).unwrap();
    p.terminate(a.id()).unwrap();
    assert!(p.is_terminated());
    assert_eq!(p.terminated_by(), Some(&b));
    for m in [&a, &b] {
        assert_eq!(events(&mut p, m), vec![Event::Terminated { by: b.clone() }]);
    }
    assert_eq!(
        p.join(req("c")),
        Err(RegistryError::PoolTerminated("p".into()))
    );
}

#[test]
fn signals_reach_exactly_their_targets() {
    let mut p = PoolState::new("p", PoolConfig::default()).unwrap();
    let ms: Vec<_> = (0..4).map(|_| p.join(req("c")).unwrap()).collect();
    for m in &ms {
        p.take_events(m.id()).unwrap();
    }
    p.signal(ms[0].id(), "go", &[ms[1].id(), ms[3].id(), ms[3].id()])
        .unwrap();
    let sig = Event::Signal {
        signal: "go".into(),
        source: ms[0].clone(),
    };
    assert!(!p.has_events(ms[0].id()));
    assert_eq!(events(&mut p, &ms[1]), vec![sig.clone()]);
    assert!(!p.has_events(ms[2].id()));
    assert_eq!(events(&mut p, &ms[3]), vec![sig]);
    // Unknown target: error, and nothing is sent to anybody.
    assert_eq!(
        p.signal(ms[0].id(), "x", &[ms[1].id(), MemberId(99)]),
        Err(RegistryError::UnknownMember {
            pool: "p".into(),
            member: MemberId(99)
        })
    );
    assert!(!p.has_events(ms[1].id()));
}

#[test]
fn maybe_dead_asks_the_driver_to_probe() {
    let mut p = PoolState::new("p", PoolConfig::default()).unwrap();
    let a = p.join(req("c")).unwrap();
    assert_eq!(p.maybe_dead(a.id()), MaybeDead::ProbeNeeded(a.id()));
    assert_eq!(p.maybe_dead(MemberId(7)), MaybeDead::NotAMember);
    let b = p.join(req("c")).unwrap();
    p.take_events(a.id()).unwrap();
    p.assume_dead(b.id()).unwrap();
    assert_eq!(events(&mut p, &a), vec![Event::Died(b.clone())]);
    assert_eq!(p.maybe_dead(b.id()), MaybeDead::NotAMember);
}

#[test]
fn drain_touched_reports_members_with_new_events() {
    let mut p = PoolState::new("p", PoolConfig::default()).unwrap();
    let a = p.join(req("c")).unwrap();
    let b = p.join(req("c")).unwrap();
    assert_eq!(p.drain_touched(), vec![a.id(), b.id()]);
    assert!(p.drain_touched().is_empty());
    p.signal(a.id(), "s", &[b.id()]).unwrap();
    assert_eq!(p.drain_touched(), vec![b.id()]);
}

#[test]
fn registry_core_routes_by_pool() {
    let mut core = RegistryCore::new();
    let a = core.join("p1", PoolConfig::default(), req("c")).unwrap();
    let b = core
        .join("p2", PoolConfig::closed_world(3), req("c"))
        .unwrap();
    assert_eq!(a.id(), MemberId(0));
    assert_eq!(b.id(), MemberId(0));
    assert_ne!(a, b);
    assert_eq!(
        core.join("p2", PoolConfig::default(), req("c")),
        Err(RegistryError::ConfigMismatch {
            pool: "p2".into(),
            existing: Some(3),
            requested: None
        })
    );
    // Cross-pool targets are unknown members.
    assert!(matches!(
        core.signal(&a, "s", std::slice::from_ref(&b)),
        Err(RegistryError::UnknownMember { .. })
    ));
    assert_eq!(core.elect("e", &a).unwrap(), a);
    assert_eq!(core.election_result("p1", "e").unwrap(), Some(a.clone()));
    assert_eq!(core.election_result("p2", "e").unwrap(), None);
    assert_eq!(
        core.election_result("nope", "e"),
        Err(RegistryError::UnknownPool("nope".into()))
    );
    assert!(core.has_events(&a));
    core.take_events(&a).unwrap();
    assert!(!core.has_events(&a));
    assert_eq!(core.pools().count(), 2);
    assert!(core.remove_pool("p1").is_some());
    assert!(core.member_pool(&a).is_err());
}

#[test]
fn error_messages_are_clear() {
    let e = RegistryError::UnknownMember {
        pool: "p".into(),
        member: MemberId(3),
    };
    assert_eq!(
        e.to_string(),
        "member #3 is not a member of pool \"p\" (it never joined, it left, or it was declared dead)"
    );
    assert!(RegistryError::PoolClosed("p".into())
        .to_string()
        .contains("closed"));
    assert!(RegistryError::Timeout.to_string().contains("timed out"));
}

// ---------------------------------------------------------------------------
// Property test.

#[derive(Debug, Clone)]
enum Op {
    Join(u8),
    Leave(usize),
    Died(usize),
    Elect(u8, usize),
    Signal(usize, Vec<usize>),
    Terminate(usize),
    MaybeDead(usize),
    Take(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3).prop_map(Op::Join),
        1 => any::<usize>().prop_map(Op::Leave),
        1 => any::<usize>().prop_map(Op::Died),
        3 => (0u8..3, any::<usize>()).prop_map(|(e, k)| Op::Elect(e, k)),
        2 => (any::<usize>(), proptest::collection::vec(any::<usize>(), 0..4))
            .prop_map(|(k, t)| Op::Signal(k, t)),
        1 => any::<usize>().prop_map(Op::Terminate),
        1 => any::<usize>().prop_map(Op::MaybeDead),
        3 => any::<usize>().prop_map(Op::Take),
    ]
}

proptest! {
    #[test]
    fn core_invariants(size in proptest::option::of(1usize..8), ops in proptest::collection::vec(op(), 0..80)) {
        let mut p = PoolState::new("p", PoolConfig { size }).unwrap();
        // Everything each member observed, and the members present at its join.
        let mut streams: BTreeMap<MemberId, Vec<(Seq, Event)>> = BTreeMap::new();
        let mut present_at_join: BTreeMap<MemberId, (Vec<IbisIdentifier>, IbisIdentifier)> = BTreeMap::new();
        let mut model_elections: BTreeMap<String, IbisIdentifier> = BTreeMap::new();
        let mut joins = 0usize;
        let mut terminated = false;

        fn pick(p: &PoolState, k: usize) -> Option<IbisIdentifier> {
            let ms = p.members();
            (!ms.is_empty()).then(|| ms[k % ms.len()].clone())
        }
        fn drain(p: &mut PoolState, s: &mut BTreeMap<MemberId, Vec<(Seq, Event)>>, m: &IbisIdentifier) {
            s.entry(m.id()).or_default().extend(p.take_events(m.id()).unwrap());
        }

        for op in ops {
            match op {
                Op::Join(c) => {
                    let before = p.members();
                    let closed = size.is_some_and(|n| joins >= n);
                    match p.join(JoinRequest::new(format!("c{c}"))) {
                        Ok(m) => {
                            prop_assert!(!closed && !terminated);
                            joins += 1;
                            present_at_join.insert(m.id(), (before, m));
                        }
                        Err(RegistryError::PoolTerminated(_)) => prop_assert!(terminated),
                        Err(RegistryError::PoolClosed(_)) => prop_assert!(closed && !terminated),
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                    prop_assert_eq!(p.is_closed(), size.is_some_and(|n| joins >= n));
                }
                Op::Leave(k) | Op::Died(k) => {
                    if let Some(m) = pick(&p, k) {
                        drain(&mut p, &mut streams, &m);
                        if matches!(op, Op::Leave(_)) { p.leave(m.id()).unwrap(); } else { p.died(m.id()).unwrap(); }
                        model_elections.retain(|_, w| *w != m);
                    }
                }
                Op::Elect(e, k) => {
                    if let Some(m) = pick(&p, k) {
                        let name = format!("e{e}");
                        let w = p.elect(&name, m.id()).unwrap();
                        let expect = model_elections.entry(name).or_insert(m).clone();
                        prop_assert_eq!(w, expect);
                    }
                }
                Op::Signal(k, ts) => {
                    if let Some(m) = pick(&p, k) {
                        let ms = p.members();
                        let targets: Vec<MemberId> = ts.iter().map(|t| ms[t % ms.len()].id()).collect();
                        p.signal(m.id(), "s", &targets).unwrap();
                    }
                }
                Op::Terminate(k) => {
                    if let Some(m) = pick(&p, k) {
                        p.terminate(m.id()).unwrap();
                        terminated = true;
                    }
                }
                Op::MaybeDead(k) => {
                    if let Some(m) = pick(&p, k) {
                        prop_assert_eq!(p.maybe_dead(m.id()), MaybeDead::ProbeNeeded(m.id()));
                    }
                }
                Op::Take(k) => {
                    if let Some(m) = pick(&p, k) { drain(&mut p, &mut streams, &m); }
                }
            }
            for e in 0..3 {
                let name = format!("e{e}");
                prop_assert_eq!(p.election_result(&name), model_elections.get(&name).cloned());
            }
        }
        let live = p.members();
        for m in &live { drain(&mut p, &mut streams, m); }

        // 1. Per stream: strictly increasing sequence numbers.
        // 2. Globally: one sequence number means one event.
        let mut log: BTreeMap<Seq, Event> = BTreeMap::new();
        for s in streams.values() {
            for w in s.windows(2) { prop_assert!(w[0].0 < w[1].0); }
            for (seq, ev) in s {
                if let Some(prev) = log.insert(*seq, ev.clone()) { prop_assert_eq!(&prev, ev); }
            }
        }
        // 3. Each stream starts with the catch-up Joined events of the members
        //    present at its join, then its own Joined; it then sees every
        //    membership event of the log until it left (complete for live members).
        let live_ids: HashMap<MemberId, ()> = live.iter().map(|m| (m.id(), ())).collect();
        for (id, s) in &streams {
            let (before, me) = &present_at_join[id];
            let n = before.len();
            let prefix: Vec<Event> = s.iter().take(n + 1).map(|(_, e)| e.clone()).collect();
            let mut expect: Vec<Event> = before.iter().cloned().map(Event::Joined).collect();
            let own_seq = s[n].0;
            expect.push(Event::Joined(me.clone()));
            prop_assert_eq!(prefix, expect);
            if live_ids.contains_key(id) {
                let seen: Vec<Seq> = s.iter().filter(|(q, e)| *q >= own_seq && e.is_membership()).map(|(q, _)| *q).collect();
                let all: Vec<Seq> = log.iter().filter(|(q, e)| **q >= own_seq && e.is_membership()).map(|(q, _)| *q).collect();
                prop_assert_eq!(seen, all);
            }
            // 4. At most one winner per election at a time, in every stream.
            let mut won: HashMap<String, bool> = HashMap::new();
            for (_, e) in s {
                match e {
                    Event::Elected { election, .. } => {
                        prop_assert!(!won.get(election).copied().unwrap_or(false), "two winners of {}", election);
                        won.insert(election.clone(), true);
                    }
                    Event::Unelected { election } => { won.insert(election.clone(), false); }
                    _ => {}
                }
            }
        }
    }
}
