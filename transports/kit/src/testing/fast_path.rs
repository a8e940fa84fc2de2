//! The fast-path scenario (`TransportInstance::fast_path`), shared by the transports
//! that have one: a channel's fast path sends and takes as the instance does on that
//! channel, in order with the instance's own sends; another channel of the same link
//! closing does not stop it; after its own channel closes its sends fail as the
//! instance's do; and it stays safe to use after the endpoint is gone.

use std::time::Instant;

use ipl_transport_abi::{FastPath, TransportError, TransportInstance};

use super::{connect, EventLog, PATIENCE};

/// Takes through `fast` (channel `ch` of `lb`'s endpoint) until `want` all came, in
/// order, each once: taken, or delivered through the callback (a transport with its own
/// reader threads may deliver some meanwhile); `seen` messages of `ch` had been
/// delivered before. Panics at [`PATIENCE`].
fn take_all(fast: &FastPath, lb: &EventLog, ch: u64, seen: usize, want: &[&[u8]]) {
    let mut taken: Vec<Vec<u8>> = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut given = 0;
        fast.take(|buf| {
            given += 1;
            taken.push(buf.to_vec());
        });
        assert!(given <= 1, "{given} messages given in one take");
        let delivered: Vec<Vec<u8>> = lb.events().on(ch)[seen..]
            .iter()
            .map(|m| m.to_vec())
            .collect();
        if taken.len() + delivered.len() >= want.len() {
            let in_order = |got: &[Vec<u8>]| {
                let mut rest = want.iter();
                got.iter().all(|m| rest.any(|w| *w == m.as_slice()))
            };
            assert!(in_order(&taken), "taken out of order: {taken:?}");
            assert!(
                in_order(&delivered),
                "delivered out of order: {delivered:?}"
            );
            let mut all: Vec<&[u8]> = taken.iter().chain(&delivered).map(|m| &m[..]).collect();
            let mut expected = want.to_vec();
            all.sort_unstable();
            expected.sort_unstable();
            assert_eq!(all, expected, "taken {taken:?}, delivered {delivered:?}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "took only {taken:?}, delivered {delivered:?} of {want:?}"
        );
    }
}

/// Runs the scenario from `a` to `b` (whose log is `lb`); `a` is dropped at its end.
/// Panics on any breach.
pub fn fast_path_on_its_channel(a: TransportInstance, b: &TransportInstance, lb: &EventLog) {
    assert!(
        a.fast_path(12345).is_none(),
        "no fast path for an unknown channel"
    );
    // Two channels over the one link between the endpoints.
    let (one, two) = (connect(&a, b), connect(&a, b));
    let ev = lb.wait("two channels", |e| e.opened.len() == 2);
    let (in_one, in_two) = (ev.opened[0], ev.opened[1]);
    drop(ev);
    let fast = a
        .fast_path(one)
        .expect("a fast path on the connecting side");
    let fast_in = b
        .fast_path(in_one)
        .expect("a fast path on the accepting side");
    // Sends on the fast path arrive on its channel, in order with the instance's own.
    fast.send(&[b"f1"]).expect("fast send");
    a.send(one, &[b"s2"]).expect("send");
    fast.send(&[b"f", b"3"]).expect("fast send of two slices");
    a.send(two, &[b"other"]).expect("send on the other channel");
    // Taken through the accepting side's fast path: the channel's next message each
    // time; the other channel's comes through the callback.
    take_all(&fast_in, lb, in_one, 0, &[b"f1", b"s2", b"f3"]);
    lb.until("the other channel's message", |e| {
        e.on(in_two) == [b"other"]
    });
    // Another channel of the link closes: this one's fast path goes on.
    a.close_channel(two);
    lb.until("the other channel closed", |e| e.closed.len() == 1);
    let seen = lb.events().on(in_one).len();
    fast.send(&[b"after"])
        .expect("fast send after another channel closed");
    take_all(&fast_in, lb, in_one, seen, &[b"after"]);
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
    drop(fast);
}
