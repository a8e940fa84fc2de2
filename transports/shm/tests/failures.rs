//! Failures: strangers, other hosts, missing secrets, and peers that die.

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use ipl_auth::PoolSecret;
use ipl_transport_abi::{ChannelClosed, TransportError};

#[test]
fn create_without_a_secret_fails_clearly() {
    let e = plugin().create("pool=x", Log::new()).unwrap_err();
    assert!(matches!(e, TransportError::InvalidArgument(_)), "{e:?}");
    assert!(e.detail().contains("secret="), "{e}");
}

#[test]
fn a_stranger_with_another_secret_is_refused_on_both_sides() {
    let (a, la) = endpoint(&config(&PoolSecret::generate().unwrap()));
    let (b, lb) = endpoint(&config(&PoolSecret::generate().unwrap()));
    let e = a
        .connect(&b.local_address().unwrap(), PATIENCE)
        .unwrap_err();
    assert!(matches!(e, TransportError::Refused(_)), "{e:?}");
    assert!(e.detail().contains("secret"), "{e}");
    // Another pool name is another auth context: refused as well.
    let s = PoolSecret::generate().unwrap();
    let (c, _) = endpoint(&config(&s));
    let (d, ld) = endpoint(&format!("secret={}\npool=other", s.to_hex()));
    assert!(matches!(
        c.connect(&d.local_address().unwrap(), PATIENCE),
        Err(TransportError::Refused(_))
    ));
    std::thread::sleep(Duration::from_millis(50));
    assert!(lb.events().opened.is_empty());
    assert!(ld.events().opened.is_empty());
    assert!(la.events().opened.is_empty());
}

#[test]
fn an_address_on_another_host_fails_fast_with_unavailable() {
    let s = PoolSecret::generate().unwrap();
    let (a, _) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let addr = String::from_utf8(b.local_address().unwrap()).unwrap();
    let parts: Vec<&str> = addr.splitn(5, ';').collect();
    let forged = format!(
        "shm1;00000000-0000-0000-0000-000000000000;{};{};elsewhere",
        parts[2], parts[3]
    );
    let t0 = Instant::now();
    let e = a.connect(forged.as_bytes(), PATIENCE).unwrap_err();
    assert!(matches!(e, TransportError::Unavailable(_)), "{e:?}");
    assert!(e.detail().contains("another host"), "{e}");
    assert!(t0.elapsed() < PATIENCE);
    let other_ns = format!("shm1;{};net:[1];{};{}", parts[1], parts[3], parts[4]);
    assert!(matches!(
        a.connect(other_ns.as_bytes(), PATIENCE),
        Err(TransportError::Unavailable(_))
    ));
    assert!(matches!(
        a.connect(b"127.0.0.1:80/0000000000000001", PATIENCE),
        Err(TransportError::InvalidArgument(_))
    ));
    // A well-formed address of an endpoint that is gone: refused.
    let gone = format!(
        "shm1;{};{};0000000000000001;{}",
        parts[1], parts[2], parts[4]
    );
    assert!(matches!(
        a.connect(gone.as_bytes(), PATIENCE),
        Err(TransportError::Refused(_))
    ));
    assert!(lb.events().opened.is_empty());
}

#[test]
fn a_client_speaking_garbage_is_dropped_and_the_endpoint_lives_on() {
    use std::io::{Read, Write};
    use std::os::linux::net::SocketAddrExt;
    let s = PoolSecret::generate().unwrap();
    let (a, _) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    let addr = String::from_utf8(b.local_address().unwrap()).unwrap();
    let id = addr.split(';').nth(3).unwrap();
    let sa = std::os::unix::net::SocketAddr::from_abstract_name(format!("ipl-shm/{id}")).unwrap();
    let mut c = std::os::unix::net::UnixStream::connect_addr(&sa).unwrap();
    c.set_read_timeout(Some(PATIENCE)).unwrap();
    c.write_all(&[0xffu8; 64]).unwrap();
    let mut buf = [0u8; 1];
    // Dropped: end of stream, or a reset because our garbage was left unread.
    match c.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("expected the connection dropped, got {other:?}"),
    }
    // Real peers still get in.
    connect(&a, &b);
    lb.until("opened", |e| e.opened.len() == 1);
}

// ---- a peer in another process, killed with SIGKILL ------------------------------

const VICTIM_ENV: &str = "IPL_SHM_TEST_VICTIM";

/// Runs this test binary again as a victim process: it connects to `target` and
/// either streams messages forever (`stream`) or receives without ever releasing
/// (`hold`).
fn spawn_victim(target: &[u8], secret: &PoolSecret, mode: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "victim_process",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            VICTIM_ENV,
            format!(
                "{mode};{};{}",
                secret.to_hex(),
                String::from_utf8_lossy(target)
            ),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Kills the child, and reaps it even if the test fails.
struct Victim(Child);

impl Drop for Victim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
#[ignore = "helper: the process that the kill tests start and kill"]
fn victim_process() {
    let Ok(spec) = std::env::var(VICTIM_ENV) else {
        return;
    };
    let mut it = spec.splitn(3, ';');
    let (mode, secret, target) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());
    let s = PoolSecret::from_hex(secret).unwrap();
    let (me, log) = endpoint(&format!("{}\nshm.ring_size=65536", config(&s)));
    log.keep.store(mode == "hold", Ordering::SeqCst);
    let ch = me.connect(target.as_bytes(), PATIENCE).unwrap();
    let end = Instant::now() + PATIENCE;
    let mut i = 0u64;
    while Instant::now() < end {
        if mode == "stream" {
            // Large messages, so that the kill often lands in the middle of one.
            let _ = me.send(ch, &[&i.to_le_bytes(), &[5u8; 100_000]]);
            i += 1;
        } else {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

#[test]
fn a_peer_killed_mid_stream_is_reported_lost_and_leaves_nothing_behind() {
    let shm_before = dev_shm_entries();
    let s = PoolSecret::generate().unwrap();
    let (me, log) = endpoint(&config(&s));
    let mut victim = Victim(spawn_victim(&me.local_address().unwrap(), &s, "stream"));
    log.until("a few messages from the victim", |e| e.messages.len() >= 5);
    let ch = log.events().opened[0];
    let t0 = Instant::now();
    victim.0.kill().unwrap();
    let ev = log.wait("the channel reported lost", |e| !e.closed.is_empty());
    assert_eq!(ev.closed[0].0, ch);
    assert!(
        matches!(ev.closed[0].1, ChannelClosed::Lost(_)),
        "{:?}",
        ev.closed
    );
    assert!(t0.elapsed() < PATIENCE);
    // Every message that arrived is whole (a half-written one is never published).
    for (c, m) in &ev.messages {
        assert_eq!(*c, ch);
        assert_eq!(m.len(), 100_008);
        assert!(m[8..].iter().all(|&b| b == 5));
    }
    drop(ev);
    let _ = victim.0.wait();
    // memfds and abstract sockets leave no files behind.
    assert!(dev_shm_entries() <= shm_before, "/dev/shm grew");
    assert!(me.send(ch, &[b"x"]).is_err());
}

#[test]
fn a_sender_blocked_on_a_peer_that_dies_gets_an_error() {
    let s = PoolSecret::generate().unwrap();
    let (me, log) = endpoint(&format!("{}\nshm.send_timeout_ms=600000", config(&s)));
    let mut victim = Victim(spawn_victim(&me.local_address().unwrap(), &s, "hold"));
    log.until("the victim connects", |e| e.opened.len() == 1);
    let ch = log.events().opened[0];
    // The victim keeps every buffer: its 64 KiB ring fills up and the sender blocks.
    // The endpoint stays ours: were the sender's the last handle, its end would destroy
    // the endpoint, which may then close before it reports the loss.
    let me = std::sync::Arc::new(me);
    let sender = std::thread::spawn({
        let me = me.clone();
        move || {
            let chunk = vec![3u8; 4000];
            let mut sent = 0u64;
            loop {
                if let Err(e) = me.send(ch, &[&chunk]) {
                    return (sent, e);
                }
                sent += 1;
                if sent > 100_000 {
                    panic!("the receiver's ring never filled");
                }
            }
        }
    });
    // Give the sender time to fill the ring and block (no assertion depends on it).
    std::thread::sleep(Duration::from_millis(300));
    victim.0.kill().unwrap();
    let (sent, err) = sender.join().unwrap();
    assert!(sent > 0);
    assert!(matches!(err, TransportError::Closed(_)), "{err:?}");
    log.until("lost", |e| !e.closed.is_empty());
}
