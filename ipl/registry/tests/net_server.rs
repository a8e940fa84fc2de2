//! The registry server for real pools, on 127.0.0.1: several pools at once, finished
//! pools forgotten, heartbeats finding frozen members and frozen servers, suspicion
//! confined to the caller's pool.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use ipl_auth::{Initiator, PoolSecret, Responder};
use ipl_registry::net::protocol::{
    self, Challenge, ClientMsg, Finish, Hello, Liveness, Reply, Request, ServerMsg, Welcome,
    AUTH_CONTEXT, MAX_FRAME, MAX_HANDSHAKE_FRAME, PROTOCOL_VERSION,
};
use ipl_registry::net::Heartbeat;
use ipl_registry::{
    Event, IbisIdentifier, JoinRequest, MemberId, NetRegistry, PoolConfig, PoolStatus, Registry,
    RegistryError, RegistryServer, ServerHandle,
};

/// Bound on every wait.
const T: Duration = Duration::from_secs(10);

/// A short heartbeat, so that the tests find silence quickly.
fn short_heartbeat() -> Heartbeat {
    Heartbeat::new(Duration::from_millis(100), Duration::from_millis(600)).unwrap()
}

/// What the heartbeat promises: a silent peer is given up within `timeout +
/// interval`; plus slack for a loaded machine.
fn bound(hb: Heartbeat) -> Duration {
    hb.timeout() + hb.interval() + Duration::from_secs(3)
}

fn server(secret: &PoolSecret, hb: Heartbeat) -> ServerHandle {
    RegistryServer::bind("127.0.0.1:0", secret.clone())
        .unwrap()
        .with_heartbeat(hb)
        .run_in_background()
        .unwrap()
}

fn member(addr: SocketAddr, secret: &PoolSecret, pool: &str, config: PoolConfig) -> Registry {
    NetRegistry::connect(addr, secret, T)
        .unwrap()
        .join(pool, config, JoinRequest::new("c"))
        .unwrap()
}

/// Waits (bounded) until `cond` holds.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + T;
    while !cond() {
        assert!(Instant::now() < end, "{what}: not reached within {T:?}");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn one_server_serves_two_pools_at_once_and_forgets_finished_ones() {
    let secret = PoolSecret::generate().unwrap();
    let srv = server(&secret, Heartbeat::default());
    let addr = srv.local_addr();
    let pools = [("pool-a", 2usize), ("pool-b", 3usize)];
    let start = Arc::new(Barrier::new(5));
    let mut threads = Vec::new();
    for (pool, size) in pools {
        for _ in 0..size {
            let (start, secret) = (Arc::clone(&start), secret.clone());
            threads.push(thread::spawn(move || {
                start.wait();
                let client = NetRegistry::connect(addr, &secret, T).unwrap();
                let m = client
                    .join(pool, PoolConfig::closed_world(size), JoinRequest::new("c"))
                    .unwrap();
                m.wait_until_pool_closed(Some(T)).unwrap();
                let winner = m.elect("master").unwrap();
                let members = m.members().unwrap();
                (pool, m, winner, members, client)
            }));
        }
    }
    let results: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(srv.pools(), 2);
    for (pool, size) in pools {
        let mine: Vec<_> = results.iter().filter(|r| r.0 == pool).collect();
        assert_eq!(mine.len(), size);
        let winner = &mine[0].2;
        assert_eq!(winner.pool(), pool, "a winner from another pool");
        for (_, m, w, members, _) in &mine {
            assert_eq!(w, winner, "{pool}: members disagree on the master");
            assert_eq!(members.len(), size, "{pool}: {members:?}");
            assert!(members.iter().all(|x| x.pool() == pool), "{members:?}");
            assert_eq!(m.identifier().pool(), pool);
        }
    }

    // pool-a finishes by leaving; pool-b by dying (its connections dropped).
    let (a, b): (Vec<_>, Vec<_>) = results.into_iter().partition(|r| r.0 == "pool-a");
    for (_, m, _, _, _) in a {
        m.leave().unwrap();
    }
    // Leaving is a round trip: the pool is gone when the last leave returns.
    assert_eq!(srv.pools(), 1);
    assert!(srv.with_core(|c| c.pool("pool-a").is_err()));
    for (_, m, _, _, client) in b {
        // As if the process were killed.
        client.kill_connection();
        drop(m);
    }
    wait_for("pool-b forgotten", || srv.pools() == 0);

    // A new pool of the same name starts fresh: a new size, ids from 0.
    let again = member(addr, &secret, "pool-a", PoolConfig::closed_world(1));
    assert_eq!(again.identifier().id(), MemberId(0));
    again.wait_until_pool_closed(Some(T)).unwrap();
    assert_eq!(again.elect("master").unwrap(), *again.identifier());
    again.leave().unwrap();
    assert_eq!(srv.pools(), 0);
}

#[test]
fn suspicion_stays_within_the_callers_pool() {
    let secret = PoolSecret::generate().unwrap();
    let srv = server(&secret, Heartbeat::default());
    let open = PoolConfig::open_world();
    let x = member(srv.local_addr(), &secret, "x", open);
    let x2 = member(srv.local_addr(), &secret, "x", open);
    let y = member(srv.local_addr(), &secret, "y", open);
    // Same ids in two pools: the pool tells them apart.
    assert_eq!(x.identifier().id(), y.identifier().id());

    let err = x.assume_dead(y.identifier()).unwrap_err();
    assert!(matches!(err, RegistryError::UnknownMember { .. }), "{err}");
    let err = x.maybe_dead(y.identifier()).unwrap_err();
    assert!(matches!(err, RegistryError::UnknownMember { .. }), "{err}");
    assert_eq!(y.members().unwrap(), vec![y.identifier().clone()]);
    assert_eq!(
        srv.with_core(|c| c.pool("y").map(|p| p.size()).ok()),
        Some(1)
    );
    assert_eq!(x.members().unwrap().len(), 2);

    // Within the pool it still works.
    let x2_id = x2.identifier().clone();
    x.assume_dead(&x2_id).unwrap();
    loop {
        match x.next_event(Some(T)).unwrap() {
            Some(Event::Died(d)) => {
                assert_eq!(d, x2_id);
                break;
            }
            Some(_) => {}
            None => panic!("no Died within {T:?}"),
        }
    }
    drop(x2);
    assert_eq!(y.members().unwrap(), vec![y.identifier().clone()]);
}

/// Authenticates a raw connection over the protocol module; returns it with the
/// heartbeat settings the server sent.
fn raw_client(addr: SocketAddr, secret: &PoolSecret) -> (TcpStream, Liveness) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let (i, nonce) = Initiator::start(secret, AUTH_CONTEXT).unwrap();
    let hello = Hello {
        version: PROTOCOL_VERSION,
        nonce,
    };
    protocol::write_msg(&mut s, &hello).unwrap();
    let ch: Challenge = protocol::read_msg(&mut s, MAX_FRAME).unwrap();
    let proof = i.on_challenge(&ch.challenge.unwrap()).unwrap();
    protocol::write_msg(&mut s, &Finish { proof }).unwrap();
    let w: Welcome = protocol::read_msg(&mut s, MAX_FRAME).unwrap();
    (s, w.result.unwrap())
}

#[test]
fn a_frozen_member_is_reported_died_within_the_heartbeat_bound() {
    let secret = PoolSecret::generate().unwrap();
    let hb = short_heartbeat();
    let srv = server(&secret, hb);
    let open = PoolConfig::open_world();
    let a = member(srv.local_addr(), &secret, "p", open);
    let b = member(srv.local_addr(), &secret, "p", open);

    // A member that authenticates and joins, then stops reading and answering
    // (as a stopped process or a host behind a cut link would).
    let (mut raw, liveness) = raw_client(srv.local_addr(), &secret);
    assert_eq!(
        (liveness.interval_ms, liveness.timeout_ms),
        (hb.interval_ms(), hb.timeout_ms())
    );
    let join = ClientMsg::Request {
        id: 1,
        op: Request::Join {
            pool: "p".into(),
            config: open,
            request: JoinRequest::new("frozen"),
        },
    };
    // The server hears from it last at the join: measure from before it.
    let frozen_at = Instant::now();
    protocol::write_msg(&mut raw, &join).unwrap();
    let frozen = loop {
        match protocol::read_msg::<ServerMsg>(&mut raw, MAX_FRAME).unwrap() {
            ServerMsg::Response { id: 1, result } => match result.unwrap() {
                Reply::Joined(me) => break me,
                other => panic!("unexpected {other:?}"),
            },
            ServerMsg::Events { .. } | ServerMsg::Heartbeat { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    };

    let died = loop {
        match a.next_event(Some(bound(hb))).unwrap() {
            Some(Event::Died(d)) => break d,
            Some(_) => {}
            None => panic!("the frozen member was not reported within {:?}", bound(hb)),
        }
    };
    assert_eq!(died, frozen);
    let took = frozen_at.elapsed();
    assert!(
        // (Silence is measured in whole milliseconds.)
        took + Duration::from_millis(2) >= hb.timeout(),
        "declared dead after {took:?}, before the timeout"
    );
    assert!(took <= bound(hb), "declared dead after {took:?}");

    // The members that answer heartbeats stay, however idle: nothing more
    // happens for several timeouts.
    let b_id = b.identifier().clone();
    let quiet_for = hb.timeout() * 3;
    while let Some(e) = a.next_event(Some(quiet_for)).unwrap() {
        assert!(!matches!(e, Event::Died(_) | Event::Left(_)), "{e:?}");
    }
    assert_eq!(
        a.members().unwrap(),
        vec![a.identifier().clone(), b_id.clone()]
    );
    assert_eq!(srv.connections(), 2);
    b.leave().unwrap();
    a.leave().unwrap();
    drop(raw);
}

/// A suspect whose connection closes while the server probes it is dead at once: the
/// member that asked (`maybe_dead`) does not wait out the probe's timeout. Before the
/// fix it waited the whole timeout (60 s here; the test's bound is 30 s), which held up
/// Satin's recovery from a killed member by the default 5 s.
#[test]
fn a_suspect_whose_connection_closes_during_the_probe_is_dead_at_once() {
    let secret = PoolSecret::generate().unwrap();
    let srv = RegistryServer::bind("127.0.0.1:0", secret.clone())
        .unwrap()
        .with_probe_timeout(Duration::from_secs(60))
        .run_in_background()
        .unwrap();
    let open = PoolConfig::open_world();
    let a = member(srv.local_addr(), &secret, "p", open);
    let (mut raw, _) = raw_client(srv.local_addr(), &secret);
    let join = ClientMsg::Request {
        id: 1,
        op: Request::Join {
            pool: "p".into(),
            config: open,
            request: JoinRequest::new("suspect"),
        },
    };
    protocol::write_msg(&mut raw, &join).unwrap();
    let suspect = loop {
        if let ServerMsg::Response { id: 1, result } =
            protocol::read_msg::<ServerMsg>(&mut raw, MAX_FRAME).unwrap()
        {
            match result.unwrap() {
                Reply::Joined(me) => break me,
                other => panic!("unexpected {other:?}"),
            }
        }
    };
    let (done_tx, done_rx) = mpsc::channel();
    let asker = thread::spawn(move || {
        let r = a.maybe_dead(&suspect);
        let _ = done_tx.send(r.map_err(|e| e.to_string()));
        a
    });
    // The probe is in flight once the ping arrives (reads bounded by T); then the
    // suspect vanishes without answering.
    loop {
        if let ServerMsg::Ping { .. } =
            protocol::read_msg::<ServerMsg>(&mut raw, MAX_FRAME).unwrap()
        {
            break;
        }
    }
    drop(raw);
    let r = done_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("maybe_dead waited out the probe's timeout");
    assert_eq!(r, Ok(()));
    let a = asker.join().unwrap();
    assert_eq!(a.members().unwrap(), vec![a.identifier().clone()]);
    a.leave().unwrap();
}

/// A fake registry: accepts one connection, completes the handshake with the
/// given heartbeat settings, answers a join if `answer_join`, then freezes
/// (holds the connection without reading or writing) until `release` fires.
fn frozen_server(
    secret: &PoolSecret,
    liveness: Liveness,
    answer_join: bool,
) -> (SocketAddr, mpsc::Sender<()>, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (release, released) = mpsc::channel::<()>();
    let secret = secret.clone();
    let t = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        let hello: Hello = protocol::read_msg(&mut s, MAX_HANDSHAKE_FRAME).unwrap();
        let (r, ch) = Responder::on_hello(&secret, AUTH_CONTEXT, &hello.nonce).unwrap();
        let challenge = Challenge {
            challenge: Ok(ch.to_vec()),
        };
        protocol::write_msg(&mut s, &challenge).unwrap();
        let fin: Finish = protocol::read_msg(&mut s, MAX_HANDSHAKE_FRAME).unwrap();
        r.on_finish(&fin.proof).unwrap();
        protocol::write_msg(
            &mut s,
            &Welcome {
                result: Ok(liveness),
            },
        )
        .unwrap();
        if answer_join {
            let id = loop {
                let msg = protocol::read_msg::<ClientMsg>(&mut s, MAX_FRAME).unwrap();
                if let ClientMsg::Request { id, .. } = msg {
                    break id;
                }
            };
            let me = IbisIdentifier::new(MemberId(0), "p", "c", "member-0", Vec::new());
            let config = PoolConfig::closed_world(2);
            let status = PoolStatus {
                config,
                size: 1,
                joins: 1,
                closed: false,
                terminated: false,
            };
            let events = ServerMsg::Events {
                pool: "p".into(),
                member: MemberId(0),
                events: vec![(0, Event::Joined(me.clone()))],
                status,
            };
            protocol::write_msg(&mut s, &events).unwrap();
            let joined = ServerMsg::Response {
                id,
                result: Ok(Reply::Joined(me)),
            };
            protocol::write_msg(&mut s, &joined).unwrap();
        }
        // Frozen: neither reads nor writes, but keeps the connection open.
        let _ = released.recv_timeout(T * 3);
        drop(s);
    });
    (addr, release, t)
}

#[test]
fn a_frozen_server_fails_calls_with_a_heartbeat_timeout() {
    let secret = PoolSecret::generate().unwrap();
    let hb = short_heartbeat();
    let liveness = Liveness {
        interval_ms: hb.interval_ms(),
        timeout_ms: hb.timeout_ms(),
    };

    // Frozen before the join's answer: the join fails.
    let (addr, release, t) = frozen_server(&secret, liveness, false);
    let client = NetRegistry::connect(addr, &secret, T).unwrap();
    assert_eq!(client.heartbeat(), hb);
    let started = Instant::now();
    let err = client
        .join("p", PoolConfig::closed_world(2), JoinRequest::new("c"))
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::HeartbeatTimeout { .. }),
        "{err:?}"
    );
    assert!(started.elapsed() <= bound(hb), "{:?}", started.elapsed());
    assert!(client.is_disconnected());
    release.send(()).unwrap();
    t.join().unwrap();

    // Frozen while a member waits for its pool to close (with no timeout of
    // its own): the wait ends with the same error, and so do later calls.
    let (addr, release, t) = frozen_server(&secret, liveness, true);
    let client = NetRegistry::connect(addr, &secret, T).unwrap();
    let m = client
        .join("p", PoolConfig::closed_world(2), JoinRequest::new("c"))
        .unwrap();
    let started = Instant::now();
    let err = m.wait_until_pool_closed(None).unwrap_err();
    assert!(
        matches!(err, RegistryError::HeartbeatTimeout { .. }),
        "{err:?}"
    );
    assert!(started.elapsed() <= bound(hb), "{:?}", started.elapsed());
    assert!(matches!(
        m.elect("master"),
        Err(RegistryError::HeartbeatTimeout { .. })
    ));
    // Events that arrived before are still delivered; then the wait for the
    // next one ends with the error too.
    assert_eq!(
        m.next_event(None).unwrap(),
        Some(Event::Joined(m.identifier().clone()))
    );
    assert!(matches!(
        m.next_event(None),
        Err(RegistryError::HeartbeatTimeout { .. })
    ));
    assert!(err.to_string().contains("did not answer"), "{err}");
    release.send(()).unwrap();
    t.join().unwrap();
}

#[test]
fn a_server_that_accepts_and_never_answers_is_a_timeout() {
    let secret = PoolSecret::generate().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let started = Instant::now();
    // The listener's backlog accepts the connection; nobody ever answers.
    let err = NetRegistry::connect(
        listener.local_addr().unwrap(),
        &secret,
        Duration::from_millis(500),
    )
    .unwrap_err();
    assert!(matches!(err, RegistryError::Timeout), "{err:?}");
    assert!(started.elapsed() < T);
}

#[test]
fn unusable_heartbeat_settings_from_a_server_are_a_protocol_error() {
    let secret = PoolSecret::generate().unwrap();
    let bad = Liveness {
        interval_ms: 0,
        timeout_ms: 0,
    };
    let (addr, release, t) = frozen_server(&secret, bad, false);
    let err = NetRegistry::connect(addr, &secret, T).unwrap_err();
    assert!(matches!(err, RegistryError::Protocol(_)), "{err:?}");
    release.send(()).unwrap();
    t.join().unwrap();
}
