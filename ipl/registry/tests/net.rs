//! The network driver, `RegistryServer` + `NetRegistry`, all on 127.0.0.1: the shared
//! registry suite (`suite/mod.rs`), then what only a network registry does
//! (authentication, connections shared or lost, bad frames, shutdown).

mod suite;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use ipl_auth::{Initiator, PoolSecret};
use ipl_registry::net::protocol::{
    self, Challenge, ClientMsg, Finish, Hello, Reply, Request, ServerMsg, Welcome, AUTH_CONTEXT,
    MAX_FRAME, PROTOCOL_VERSION,
};
use ipl_registry::{
    Event, IbisIdentifier, JoinRequest, NetRegistry, PoolConfig, Registry, RegistryBackend,
    RegistryError, RegistryEventHandler, RegistryServer, ServerHandle,
};
use suite::{joined, next, quiet, until, wait_for, Backend, LONG, SHORT, T};

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
}

impl Backend for Net {
    fn client(&self) -> Arc<dyn RegistryBackend> {
        Arc::new(self.connect())
    }

    fn settle(&self) -> Duration {
        QUIET
    }

    fn registry_pool_size(&self, pool: &str) -> Option<usize> {
        self.server
            .with_core(|c| c.pool(pool).ok().map(|p| p.size()))
    }

    fn connections(&self) -> Option<usize> {
        Some(self.server.connections())
    }
}

suite::registry_suite!(Net::new());

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
    assert_eq!(net.registry_pool_size("p"), Some(1));
    assert!(matches!(
        a.elect("e"),
        Ok(w) if w == *a.identifier()
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
    let (mut s, _, ch) = raw_hello(&net, &stranger, PROTOCOL_VERSION);
    assert!(ch.challenge.is_ok());
    protocol::write_msg(&mut s, &Finish { proof: [0; 32] }).unwrap();
    let w: Welcome = protocol::read_msg(&mut s, MAX_FRAME).unwrap();
    assert!(w.result.is_err());
    // An unsupported version is refused with a reason.
    let (_, _, ch) = raw_hello(&net, &stranger, 999);
    assert!(ch.challenge.unwrap_err().to_string().contains("version"));
    // So is protocol v2, whose refusal was a bare string (v3 made it `Refusal`).
    let (_, _, ch) = raw_hello(&net, &stranger, 2);
    assert!(ch.challenge.unwrap_err().to_string().contains("version 2"));

    assert_eq!(net.registry_pool_size("p"), Some(1));
    assert_eq!(a.members().unwrap(), vec![a.identifier().clone()]);
    assert_eq!(quiet(&net, &a), vec![Event::Joined(a.identifier().clone())]);
}

/// Opens a raw connection and sends the handshake's hello for `secret` with protocol
/// `version`: the stream, the handshake's initiator and the server's challenge.
fn raw_hello(net: &Net, secret: &PoolSecret, version: u32) -> (TcpStream, Initiator, Challenge) {
    let mut s = TcpStream::connect(net.addr()).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    let (i, nonce) = Initiator::start(secret, AUTH_CONTEXT).unwrap();
    protocol::write_msg(&mut s, &Hello { version, nonce }).unwrap();
    let ch: Challenge = protocol::read_msg(&mut s, MAX_FRAME).unwrap();
    (s, i, ch)
}

/// Authenticates a raw connection.
fn raw_client(net: &Net) -> TcpStream {
    let (mut s, i, ch) = raw_hello(net, &net.secret, PROTOCOL_VERSION);
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
            ServerMsg::Events { .. } | ServerMsg::Heartbeat { .. } => {}
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
    assert_eq!(net.registry_pool_size("p"), Some(2));
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

/// An address that is no `host:port` is a local error, not a lost connection.
#[test]
fn an_address_that_is_no_address_is_bad_address() {
    let secret = PoolSecret::generate().unwrap();
    for bad in ["no-port-here", "127.0.0.1:notaport"] {
        let err = NetRegistry::connect(bad, &secret, Duration::from_secs(2)).unwrap_err();
        assert!(
            matches!(err, RegistryError::BadAddress(_)),
            "{bad}: {err:?}"
        );
        assert!(!err.to_string().contains("disconnected"), "{err}");
    }
    let none: &[SocketAddr] = &[];
    let err = NetRegistry::connect(none, &secret, Duration::from_secs(2)).unwrap_err();
    assert!(matches!(err, RegistryError::BadAddress(_)), "{err:?}");
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
