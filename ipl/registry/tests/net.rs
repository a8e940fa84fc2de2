//! The network driver: `RegistryServer` + `NetRegistry`, all on 127.0.0.1.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{mpsc, Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use ipl_auth::{Initiator, PoolSecret};
use ipl_registry::net::protocol::{
    self, Challenge, ClientMsg, Finish, Hello, Reply, Request, ServerMsg, Welcome, AUTH_CONTEXT,
    MAX_FRAME, PROTOCOL_VERSION,
};
use ipl_registry::{
    Event, IbisIdentifier, JoinRequest, NetRegistry, PoolConfig, Registry, RegistryError,
    RegistryEventHandler, RegistryServer, ServerHandle,
};

const T: Duration = Duration::from_secs(10);
const LONG: Option<Duration> = Some(T);
const SHORT: Option<Duration> = Some(Duration::from_millis(50));
/// How long "nothing else arrives" is observed.
const QUIET: Duration = Duration::from_millis(300);

struct Net {
    server: ServerHandle,
    secret: PoolSecret,
}

impl Net {
    fn new() -> Self {
        let secret = PoolSecret::generate().unwrap();
        let server = RegistryServer::bind("127.0.0.1:0", secret.clone())
            .unwrap()
            .with_probe_timeout(Duration::from_secs(1))
            .run_in_background()
            .unwrap();
        Net { server, secret }
    }

    fn addr(&self) -> SocketAddr {
        self.server.local_addr()
    }

    fn connect(&self) -> NetRegistry {
        NetRegistry::connect(self.addr(), &self.secret, T).unwrap()
    }

    /// A member on its own connection (as a separate process would be).
    fn join(&self, pool: &str) -> Registry {
        self.connect()
            .join(pool, PoolConfig::open_world(), JoinRequest::new("local"))
            .unwrap()
    }

    fn pool_size(&self, pool: &str) -> Option<usize> {
        self.server
            .with_core(|c| c.pool(pool).ok().map(|p| p.size()))
    }
}

fn next(r: &Registry) -> Event {
    r.next_event(LONG)
        .expect("next_event")
        .expect("an event within 10 s")
}

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

/// Events arriving within `QUIET`.
fn quiet(r: &Registry) -> Vec<Event> {
    let end = Instant::now() + QUIET;
    let mut v = Vec::new();
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        match r.next_event(Some(left)).unwrap() {
            Some(e) => v.push(e),
            None => break,
        }
    }
    v
}

fn wait_for(mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + T;
    while !cond() {
        assert!(Instant::now() < end, "condition not reached within 10 s");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn concurrent_joins_are_seen_in_one_order_by_all() {
    const N: usize = 6;
    let net = Arc::new(Net::new());
    let start = Arc::new(Barrier::new(N));
    let threads: Vec<_> = (0..N)
        .map(|_| {
            let net = Arc::clone(&net);
            let start = Arc::clone(&start);
            thread::spawn(move || {
                let client = net.connect();
                start.wait();
                let r = client
                    .join("p", PoolConfig::open_world(), JoinRequest::new("c"))
                    .unwrap();
                let seen = joined(&r, N);
                (r, seen)
            })
        })
        .collect();
    let results: Vec<(Registry, Vec<IbisIdentifier>)> =
        threads.into_iter().map(|t| t.join().unwrap()).collect();
    let first = &results[0].1;
    let ids: Vec<u64> = first.iter().map(|m| m.id().get()).collect();
    assert_eq!(ids, (0..N as u64).collect::<Vec<_>>());
    for (r, seen) in &results {
        assert_eq!(seen, first);
        assert_eq!(&r.members().unwrap(), first);
        assert_eq!(r.pool_size().unwrap(), N);
    }
}

#[test]
fn members_sharing_one_connection() {
    let net = Net::new();
    let client = net.connect();
    let ms: Vec<Registry> = (0..3)
        .map(|_| {
            client
                .join("p", PoolConfig::open_world(), JoinRequest::new("c"))
                .unwrap()
        })
        .collect();
    let ids: Vec<_> = ms.iter().map(|m| m.identifier().clone()).collect();
    for m in &ms {
        assert_eq!(joined(m, 3), ids);
    }
    // Members on one connection cannot act for each other's connection peers,
    // but each acts for itself.
    assert_eq!(ms[2].elect("e").unwrap(), ids[2]);
    assert_eq!(ms[0].elect("e").unwrap(), ids[2]);
}

#[test]
fn strict_election_with_racing_members() {
    const N: usize = 8;
    let net = Net::new();
    let members: Arc<Vec<Registry>> = Arc::new((0..N).map(|_| net.join("p")).collect());
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
        assert_eq!(
            until(m, |e| matches!(e, Event::Elected { .. })),
            Event::Elected {
                election: "master".into(),
                winner: winners[0].clone()
            }
        );
        assert!(!quiet(m).iter().any(|e| matches!(e, Event::Elected { .. })));
    }
}

#[test]
fn election_result_waits_for_a_winner() {
    let net = Net::new();
    let a = net.join("p");
    let b = net.join("p");
    assert_eq!(a.get_election_result("e", SHORT).unwrap(), None);
    let bid = b.identifier().clone();
    let (tx, rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        tx.send(()).unwrap();
        a.get_election_result("e", LONG).unwrap()
    });
    rx.recv().unwrap();
    thread::sleep(Duration::from_millis(20));
    assert_eq!(b.elect("e").unwrap(), bid);
    assert_eq!(waiter.join().unwrap(), Some(bid));
}

#[test]
fn signals_arrive_at_exactly_their_targets() {
    let net = Net::new();
    let ms: Vec<Registry> = (0..4).map(|_| net.join("p")).collect();
    for m in &ms {
        joined(m, 4);
    }
    let targets = [ms[1].identifier().clone(), ms[2].identifier().clone()];
    ms[0].signal("go", &targets).unwrap();
    let sig = Event::Signal {
        signal: "go".into(),
        source: ms[0].identifier().clone(),
    };
    assert_eq!(next(&ms[1]), sig);
    assert_eq!(next(&ms[2]), sig);
    assert_eq!(quiet(&ms[0]), vec![]);
    assert_eq!(quiet(&ms[3]), vec![]);

    // Unknown targets: an error, nothing delivered.
    let stranger = IbisIdentifier::new(ipl_registry::MemberId(99), "p", "c", "x", vec![]);
    let err = ms[0]
        .signal("x", &[ms[1].identifier().clone(), stranger])
        .unwrap_err();
    assert!(matches!(err, RegistryError::UnknownMember { .. }), "{err}");
    assert_eq!(quiet(&ms[1]), vec![]);
}

#[test]
fn closed_world_pool() {
    let net = Net::new();
    let cfg = PoolConfig::closed_world(3);
    let a = net.connect().join("p", cfg, JoinRequest::new("c")).unwrap();
    let _b = net.connect().join("p", cfg, JoinRequest::new("c")).unwrap();
    assert_eq!(a.wait_until_pool_closed(SHORT), Err(RegistryError::Timeout));
    let c2 = net.connect();
    let joiner = thread::spawn(move || c2.join("p", cfg, JoinRequest::new("c")).unwrap());
    a.wait_until_pool_closed(LONG).unwrap();
    assert!(a.is_closed().unwrap());
    let c = joiner.join().unwrap();
    c.wait_until_pool_closed(Some(Duration::ZERO)).unwrap();
    assert_eq!(until(&a, |e| *e == Event::PoolClosed), Event::PoolClosed);

    let err = net
        .connect()
        .join("p", cfg, JoinRequest::new("c"))
        .unwrap_err();
    assert_eq!(err, RegistryError::PoolClosed("p".into()));
    let err = net
        .connect()
        .join("p", PoolConfig::closed_world(4), JoinRequest::new("c"))
        .unwrap_err();
    assert!(matches!(err, RegistryError::ConfigMismatch { .. }), "{err}");
    let o = net.join("open");
    assert!(matches!(
        o.wait_until_pool_closed(SHORT),
        Err(RegistryError::NotClosedWorld(_))
    ));
}

#[test]
fn terminate_reaches_everyone() {
    let net = Net::new();
    let ms: Vec<Registry> = (0..3).map(|_| net.join("p")).collect();
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
    let err = net
        .connect()
        .join("p", PoolConfig::open_world(), JoinRequest::new("c"))
        .unwrap_err();
    assert_eq!(err, RegistryError::PoolTerminated("p".into()));
}

#[test]
fn leave_gives_left_drop_and_lost_connections_give_died() {
    let net = Net::new();
    let a = net.join("p");
    let b = net.join("p");
    let c = net.join("p");
    let d_client = net.connect();
    let d = d_client
        .join("p", PoolConfig::open_world(), JoinRequest::new("c"))
        .unwrap();
    assert_eq!(b.elect("e").unwrap(), *b.identifier());
    joined(&a, 4);
    let (bid, cid, did) = (
        b.identifier().clone(),
        c.identifier().clone(),
        d.identifier().clone(),
    );

    b.leave().unwrap();
    assert_eq!(until(&a, |e| e.is_membership()), Event::Left(bid));
    assert_eq!(
        until(&a, |e| matches!(e, Event::Unelected { .. })),
        Event::Unelected {
            election: "e".into()
        }
    );

    // Dropping a handle without leave: died.
    drop(c);
    assert_eq!(until(&a, |e| e.is_membership()), Event::Died(cid));

    // A connection that drops (a killed process): died.
    d_client.kill_connection();
    assert_eq!(until(&a, |e| e.is_membership()), Event::Died(did));
    wait_for(|| d_client.is_disconnected());
    assert!(matches!(d.elect("x"), Err(RegistryError::Disconnected(_))));
    // Events received before the loss can still be taken; then the member
    // is gone (the server declared it dead).
    let err = loop {
        match d.next_event(SHORT) {
            Ok(Some(_)) => {}
            Ok(None) => panic!("expected an error once the events are taken"),
            Err(e) => break e,
        }
    };
    assert!(matches!(err, RegistryError::UnknownMember { .. }), "{err}");
    drop(d);
    assert_eq!(a.members().unwrap(), vec![a.identifier().clone()]);
    assert_eq!(net.pool_size("p"), Some(1));
    assert!(matches!(
        a.elect("e"),
        Ok(w) if w == *a.identifier()
    ));
}

#[test]
fn maybe_dead_probes_liveness() {
    let net = Net::new();
    let a = net.join("p");
    let b = net.join("p");
    let c = net.join("p");
    assert_eq!(c.elect("e").unwrap(), *c.identifier());
    joined(&a, 3);
    joined(&b, 3);
    quiet(&a);
    quiet(&b);

    a.maybe_dead(b.identifier()).unwrap();
    assert_eq!(a.pool_size().unwrap(), 3);
    assert_eq!(quiet(&a), vec![]);

    let cid = c.identifier().clone();
    c.crash();
    assert_eq!(quiet(&a), vec![]);
    assert_eq!(net.pool_size("p"), Some(3));
    let t0 = Instant::now();
    a.maybe_dead(&cid).unwrap();
    assert!(t0.elapsed() < T);
    let expect = vec![
        Event::Died(cid.clone()),
        Event::Unelected {
            election: "e".into(),
        },
    ];
    // `a` asked: its events are pushed before the response.
    let mut got = Vec::new();
    while let Some(e) = a.next_event(Some(Duration::ZERO)).unwrap() {
        got.push(e);
    }
    assert_eq!(got, expect);
    assert_eq!(vec![next(&b), next(&b)], expect);
    assert_eq!(a.pool_size().unwrap(), 2);
    b.maybe_dead(&cid).unwrap();
    assert_eq!(quiet(&a), vec![]);
    // The crashed member's connection, kept open while it hung, is closed
    // once it was declared dead.
    wait_for(|| net.server.connections() == 2);
}

#[test]
fn assume_dead_declares_death() {
    let net = Net::new();
    let a = net.join("p");
    let b = net.join("p");
    joined(&a, 2);
    let bid = b.identifier().clone();
    a.assume_dead(&bid).unwrap();
    assert_eq!(next(&a), Event::Died(bid));
    // The victim learns it is no longer a member.
    wait_for(|| b.members().is_err());
    assert!(matches!(
        b.elect("e"),
        Err(RegistryError::UnknownMember { .. })
    ));
}

#[test]
fn wrong_secret_is_refused_and_never_joins() {
    let net = Net::new();
    let a = net.join("p");
    let stranger = PoolSecret::generate().unwrap();
    let err = NetRegistry::connect(net.addr(), &stranger, T).unwrap_err();
    match &err {
        RegistryError::Refused(msg) => assert!(msg.contains("secret"), "{msg}"),
        other => panic!("expected Refused, got {other:?}"),
    }
    // A forged proof (a client that skips the check) is refused by the server.
    let mut s = TcpStream::connect(net.addr()).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let (_i, nonce) = Initiator::start(&stranger, AUTH_CONTEXT).unwrap();
    protocol::write_msg(
        &mut s,
        &Hello {
            version: PROTOCOL_VERSION,
            nonce,
        },
    )
    .unwrap();
    let ch: Challenge = protocol::read_msg(&mut s, MAX_FRAME).unwrap();
    assert!(ch.challenge.is_ok());
    protocol::write_msg(&mut s, &Finish { proof: [0; 32] }).unwrap();
    let w: Welcome = protocol::read_msg(&mut s, MAX_FRAME).unwrap();
    assert!(w.result.is_err());
    // An unsupported version is refused with a reason.
    let mut s = TcpStream::connect(net.addr()).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    protocol::write_msg(
        &mut s,
        &Hello {
            version: 999,
            nonce,
        },
    )
    .unwrap();
    let ch: Challenge = protocol::read_msg(&mut s, MAX_FRAME).unwrap();
    assert!(ch.challenge.unwrap_err().contains("version"));

    assert_eq!(net.pool_size("p"), Some(1));
    assert_eq!(a.members().unwrap(), vec![a.identifier().clone()]);
    assert_eq!(quiet(&a), vec![Event::Joined(a.identifier().clone())]);
}

/// Authenticates a raw connection.
fn raw_client(net: &Net) -> TcpStream {
    let mut s = TcpStream::connect(net.addr()).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let (i, nonce) = Initiator::start(&net.secret, AUTH_CONTEXT).unwrap();
    protocol::write_msg(
        &mut s,
        &Hello {
            version: PROTOCOL_VERSION,
            nonce,
        },
    )
    .unwrap();
    let ch: Challenge = protocol::read_msg(&mut s, MAX_FRAME).unwrap();
    let proof = i.on_challenge(&ch.challenge.unwrap()).unwrap();
    protocol::write_msg(&mut s, &Finish { proof }).unwrap();
    let w: Welcome = protocol::read_msg(&mut s, MAX_FRAME).unwrap();
    w.result.unwrap();
    s
}

/// Whether the server closed `s` (reads hit end of stream or an error).
fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return true,
            Ok(_) => {}
        }
    }
}

#[test]
fn garbage_and_oversized_frames_do_not_disturb_the_server() {
    let net = Net::new();
    let a = net.join("p");

    // Garbage instead of a handshake.
    let mut g = TcpStream::connect(net.addr()).unwrap();
    g.set_read_timeout(Some(T)).unwrap();
    g.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    assert!(closed_by_server(&mut g));
    // A small frame of garbage.
    let mut g = TcpStream::connect(net.addr()).unwrap();
    g.set_read_timeout(Some(T)).unwrap();
    g.write_all(&[5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff])
        .unwrap();
    assert!(closed_by_server(&mut g));
    // An oversized frame length before authentication.
    let mut g = TcpStream::connect(net.addr()).unwrap();
    g.set_read_timeout(Some(T)).unwrap();
    g.write_all(&u32::MAX.to_le_bytes()).unwrap();
    assert!(closed_by_server(&mut g));

    // After authentication: a member joins over a raw connection, then the
    // connection sends an oversized frame; the server drops it (the member
    // dies) and carries on.
    let mut raw = raw_client(&net);
    protocol::write_msg(
        &mut raw,
        &ClientMsg::Request {
            id: 1,
            op: Request::Join {
                pool: "p".into(),
                config: PoolConfig::open_world(),
                request: JoinRequest::new("raw"),
            },
        },
    )
    .unwrap();
    let raw_id = loop {
        match protocol::read_msg::<ServerMsg>(&mut raw, MAX_FRAME).unwrap() {
            ServerMsg::Response { id: 1, result } => match result.unwrap() {
                Reply::Joined(me) => break me,
                other => panic!("unexpected {other:?}"),
            },
            ServerMsg::Events { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    };
    assert_eq!(
        until(&a, |e| e.is_membership()),
        Event::Joined(a.identifier().clone())
    );
    assert_eq!(
        until(&a, |e| e.is_membership()),
        Event::Joined(raw_id.clone())
    );
    raw.write_all(&((MAX_FRAME + 1) as u32).to_le_bytes())
        .unwrap();
    assert!(closed_by_server(&mut raw));
    assert_eq!(next(&a), Event::Died(raw_id));

    // Garbage after authentication.
    let mut raw = raw_client(&net);
    raw.write_all(&[3, 0, 0, 0, 0xee, 0xee, 0xee]).unwrap();
    assert!(closed_by_server(&mut raw));

    // Others keep working.
    let b = net.join("p");
    assert_eq!(next(&a), Event::Joined(b.identifier().clone()));
    assert_eq!(b.elect("e").unwrap(), *b.identifier());
    assert_eq!(a.elect("e").unwrap(), *b.identifier());
    assert_eq!(a.pool_size().unwrap(), 2);
}

#[test]
fn requests_for_members_of_other_connections_are_refused() {
    let net = Net::new();
    let a = net.join("p");
    let b = net.join("p");
    // `a`'s client cannot make `b` leave.
    let a_backend = a.backend().clone();
    let err = a_backend.leave(b.identifier()).unwrap_err();
    assert!(matches!(err, RegistryError::UnknownMember { .. }), "{err}");
    assert_eq!(net.pool_size("p"), Some(2));
}

#[test]
fn event_handler_upcalls_over_the_network() {
    struct H(mpsc::Sender<String>);
    impl RegistryEventHandler for H {
        fn joined(&mut self, m: &IbisIdentifier) {
            let _ = self.0.send(format!("joined {}", m.id()));
        }
        fn got_signal(&mut self, s: &str, _: &IbisIdentifier) {
            let _ = self.0.send(format!("signal {s}"));
        }
    }
    let net = Net::new();
    let a = net.join("p");
    let (tx, rx) = mpsc::channel();
    a.set_event_handler(H(tx)).unwrap();
    let b = net.join("p");
    b.signal("hi", &[a.identifier().clone()]).unwrap();
    let got: Vec<String> = (0..3).map(|_| rx.recv_timeout(T).unwrap()).collect();
    assert_eq!(got, vec!["joined #0", "joined #1", "signal hi"]);
    drop(b);
    a.leave().unwrap();
}

#[test]
fn server_shutdown_disconnects_clients() {
    let net = Net::new();
    let client = net.connect();
    let a = client
        .join("p", PoolConfig::closed_world(2), JoinRequest::new("c"))
        .unwrap();
    let waiter = thread::spawn(move || {
        let r = a.wait_until_pool_closed(LONG);
        (a, r)
    });
    thread::sleep(Duration::from_millis(50));
    let Net { server, .. } = net;
    server.shutdown();
    let (a, r) = waiter.join().unwrap();
    assert!(matches!(r, Err(RegistryError::Disconnected(_))), "{r:?}");
    assert!(matches!(a.elect("x"), Err(RegistryError::Disconnected(_))));
    assert!(client.is_disconnected());
}

#[test]
fn unreachable_server_is_a_clear_error() {
    let secret = PoolSecret::generate().unwrap();
    // Bind and drop to get a (very likely) closed port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let err = NetRegistry::connect(port, &secret, Duration::from_secs(2)).unwrap_err();
    assert!(matches!(err, RegistryError::Disconnected(_)), "{err:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn async_waits_over_the_network() {
    let net = Net::new();
    let cfg = PoolConfig::closed_world(2);
    let a = net.connect().join("p", cfg, JoinRequest::new("c")).unwrap();
    let first = tokio::time::timeout(T, a.next_event_async())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, Event::Joined(a.identifier().clone()));
    let c2 = net.connect();
    let other = thread::spawn(move || {
        let b = c2.join("p", cfg, JoinRequest::new("c")).unwrap();
        b.elect("leader").unwrap();
        b.terminate().unwrap();
        b
    });
    tokio::time::timeout(T, a.wait_until_pool_closed_async())
        .await
        .unwrap()
        .unwrap();
    let w = tokio::time::timeout(T, a.get_election_result_async("leader"))
        .await
        .unwrap()
        .unwrap();
    tokio::time::timeout(T, a.wait_until_terminated_async())
        .await
        .unwrap()
        .unwrap();
    let b = other.join().unwrap();
    assert_eq!(w, *b.identifier());
}
