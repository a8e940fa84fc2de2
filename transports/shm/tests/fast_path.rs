//! A channel's fast path (`TransportInstance::fast_path`): the same sends and takes as
//! the instance's own on that channel, found once; after the channel closes its sends
//! fail as the instance's do, and other channels of the same link closing does not
//! stop it.

mod common;

use common::*;
use ipl_auth::PoolSecret;
use ipl_transport_abi::TransportError;

#[test]
fn a_fast_path_sends_and_takes_on_its_channel_until_it_closes() {
    let s = PoolSecret::generate().unwrap();
    let (a, _la) = endpoint(&config(&s));
    let (b, lb) = endpoint(&config(&s));
    assert!(
        a.fast_path(12345).is_none(),
        "no fast path for an unknown channel"
    );
    // Two channels over the one link between the endpoints.
    let (one, two) = (connect(&a, &b), connect(&a, &b));
    let ev = lb.wait("two channels", |e| e.opened.len() == 2);
    let (in_one, in_two) = (ev.opened[0], ev.opened[1]);
    drop(ev);
    let fast = a.fast_path(one).expect("shm has fast paths");
    let fast_in = b.fast_path(in_one).expect("on the accepting side too");
    // Sends on the fast path arrive on its channel, in order with the instance's own.
    fast.send(&[b"f1"]).unwrap();
    a.send(one, &[b"s2"]).unwrap();
    fast.send(&[b"f", b"3"]).unwrap();
    a.send(two, &[b"other"]).unwrap();
    // Taken through the accepting side's fast path: the channel's next message each
    // time; the other channel's comes through the callback.
    let mut got: Vec<Vec<u8>> = Vec::new();
    let deadline = std::time::Instant::now() + PATIENCE;
    while got.len() < 3 {
        assert!(std::time::Instant::now() < deadline, "took only {got:?}");
        fast_in.take(|buf| got.push(buf.to_vec()));
    }
    assert_eq!(got, vec![b"f1".to_vec(), b"s2".to_vec(), b"f3".to_vec()]);
    lb.until("the other channel's message", |e| {
        e.on(in_two) == [b"other"]
    });
    // Another channel of the link closes: this one's fast path goes on.
    a.close_channel(two);
    lb.until("the other channel closed", |e| e.closed.len() == 1);
    fast.send(&[b"after"]).unwrap();
    let mut after = Vec::new();
    let deadline = std::time::Instant::now() + PATIENCE;
    while after.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing after the close"
        );
        fast_in.take(|buf| after.push(buf.to_vec()));
    }
    assert_eq!(after, vec![b"after".to_vec()]);
    // Its own channel closed: its sends fail as the instance's do.
    a.close_channel(one);
    let e = fast.send(&[b"late"]).unwrap_err();
    assert!(matches!(e, TransportError::Closed(_)), "{e:?}");
    assert!(matches!(
        a.send(one, &[b"late"]),
        Err(TransportError::Closed(_))
    ));
    // Still safe to use (and drop) after the endpoint is gone.
    drop(a);
    assert!(fast.send(&[b"gone"]).is_err());
}
