//! A busy server's refusal lost on the way, on 127.0.0.1: a connection closed or reset
//! before the server's first answer is retried within the connect timeout, while a
//! refusal that came fails at once. A fake server in front of a real one plays the
//! lossy link.

use std::io::{self, Read};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use ipl_auth::PoolSecret;
use ipl_registry::net::protocol::{self, Challenge, Refusal};
use ipl_registry::{JoinRequest, NetRegistry, PoolConfig, RegistryError, RegistryServer};

/// Bound on every wait.
const T: Duration = Duration::from_secs(10);

/// Reads what the client sent first (its hello), within `T`.
fn read_some(s: &mut TcpStream) {
    s.set_read_timeout(Some(T)).unwrap();
    let mut b = [0u8; 256];
    let _ = s.read(&mut b);
}

/// Copies bytes from `a` to `b` until either side closes, then closes both ways.
fn pipe(mut a: TcpStream, mut b: TcpStream) {
    let _ = io::copy(&mut a, &mut b);
    let _ = a.shutdown(Shutdown::Both);
    let _ = b.shutdown(Shutdown::Both);
}

#[test]
fn a_connection_cut_before_any_answer_is_retried() {
    let secret = PoolSecret::generate().unwrap();
    let srv = RegistryServer::bind("127.0.0.1:0", secret.clone())
        .unwrap()
        .run_in_background()
        .unwrap();
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let front_addr = front.local_addr().unwrap();
    let real = srv.local_addr();
    let fake = thread::spawn(move || {
        // 1: the hello is read, then the connection is closed without an answer (EOF).
        let (mut s, _) = front.accept().unwrap();
        read_some(&mut s);
        drop(s);
        // 2: closed with the hello unread (usually a reset).
        let (s, _) = front.accept().unwrap();
        drop(s);
        // 3: passed on to the real server.
        let (s, _) = front.accept().unwrap();
        let to = TcpStream::connect(real).unwrap();
        let (s2, to2) = (s.try_clone().unwrap(), to.try_clone().unwrap());
        thread::spawn(move || pipe(s2, to2));
        thread::spawn(move || pipe(to, s));
    });
    let client = NetRegistry::connect(front_addr, &secret, T)
        .expect("a connection cut before any answer is retried");
    fake.join().unwrap();
    let m = client
        .join("pool", PoolConfig::closed_world(1), JoinRequest::new("c"))
        .unwrap();
    m.wait_until_pool_closed(Some(T)).unwrap();
    m.leave().unwrap();
}

#[test]
fn a_refusal_that_came_fails_at_once() {
    let secret = PoolSecret::generate().unwrap();
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = front.local_addr().unwrap();
    let fake = thread::spawn(move || {
        let (mut s, _) = front.accept().unwrap();
        read_some(&mut s);
        let refusal = Challenge {
            challenge: Err(Refusal::Other(
                "unsupported registry protocol version".into(),
            )),
        };
        protocol::write_msg(&mut s, &refusal).unwrap();
        let _ = s.shutdown(Shutdown::Write);
        read_some(&mut s);
        front
    });
    match NetRegistry::connect(addr, &secret, T) {
        Err(RegistryError::Refused(reason)) => assert!(reason.contains("version"), "{reason}"),
        other => panic!("expected Refused, got {other:?}"),
    }
    // No second attempt: nothing more waits to be accepted (a connection is queued by
    // the kernel as soon as the client's connect returns).
    let front = fake.join().unwrap();
    front.set_nonblocking(true).unwrap();
    match front.accept() {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
        Ok((_, peer)) => panic!("the client tried again after a refusal (from {peer})"),
        Err(e) => panic!("accept: {e}"),
    }
}
