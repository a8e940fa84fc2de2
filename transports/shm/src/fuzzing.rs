//! The decoders this transport runs on what a peer sends, for the cargo-fuzz targets in
//! `fuzz/` (feature `fuzzing`; not part of the transport's API): the handshake's
//! messages, and the receiving end of a ring whose shared memory a hostile peer writes.

use std::sync::Arc;

use ipl_auth::{Initiator, PoolSecret, Responder, CHALLENGE_LEN, HELLO_LEN};
use ipl_transport_kit::channels::CachedLookup;

use crate::handshake::{
    check_capacity, encode_reply, parse_reply, Third, MAGIC, REPLY_LEN, THIRD_LEN,
};
use crate::layout::{self, check_segment, segment_size, Kind, MIN_CAPACITY};
use crate::link::{Link, RxState};
use crate::reassembly::Reassembly;
use crate::region::Region;
use crate::ring::{Cursor, RingPlace, RingRx, RingTx};

/// Runs the handshake's decoding and checks on `data` as messages from a peer without
/// the pool's secret, on both sides: the accepting side reads the preamble and `Hello`,
/// then the last message (proof, ids, capacity) and a segment header; the connecting
/// side reads a `Challenge` and the answer. Panics if a proof made without the secret
/// passes, or a message does not read back as it was written.
pub fn handshake(data: &[u8]) {
    let secret = PoolSecret::from_bytes([0x5a; 32]);
    let context = b"ipl-shm/fuzz";
    if let Some((first, rest)) = data.split_at_checked(MAGIC.len() + HELLO_LEN) {
        if first[..MAGIC.len()] == MAGIC {
            let (resp, challenge) = Responder::on_hello(&secret, context, &first[MAGIC.len()..])
                .expect("a Hello of the right length is answered");
            assert_eq!(challenge.len(), CHALLENGE_LEN);
            if let Some((third, rest)) = rest.split_first_chunk::<THIRD_LEN>() {
                let t = Third::parse(third);
                assert_eq!(t.encode(), *third);
                assert!(
                    resp.on_finish(&t.finish).is_err(),
                    "a stranger's proof passed"
                );
                // What a member would be checked for next: the capacity, then the
                // segment's header and size.
                if let Ok(cap) = check_capacity(t.cap, 1 << 30) {
                    assert!(layout::valid_capacity(cap as u64));
                    if let Some((h, rest)) = rest.split_first_chunk::<16>() {
                        let size = rest
                            .first_chunk::<8>()
                            .map_or(segment_size(cap) as u64, |s| u64::from_le_bytes(*s));
                        if let Ok(c) = check_segment(h, t.cap, size) {
                            assert_eq!((c, size), (cap, segment_size(cap) as u64));
                        }
                    }
                }
            }
        }
    }
    let (init, _) = Initiator::start(&secret, context).expect("random nonce");
    assert!(
        init.on_challenge(data).is_err(),
        "a stranger's challenge passed"
    );
    if let Some(reply) = data.first_chunk::<REPLY_LEN>() {
        let (id, mapped) = parse_reply(reply);
        if reply[8] <= 1 {
            assert_eq!(encode_reply(id, mapped), *reply);
        }
    }
}

/// Ring capacity of the hostile ring harness (the smallest a ring may have).
const CAP: usize = MIN_CAPACITY;

/// `max_message` of the hostile ring harness's reassembly: a few fragments reach it.
const MAX_MESSAGE: usize = 4096;

/// Reads a little-endian number of `N` bytes from the front of `ops`, if there are.
fn take<const N: usize>(ops: &mut &[u8]) -> Option<[u8; N]> {
    let (v, rest) = ops.split_first_chunk::<N>()?;
    *ops = rest;
    Some(*v)
}

/// Runs the receiving end of a ring (and the sending end of the other) on a segment
/// whose every byte a hostile peer writes, between our reads, as `ops` says: one
/// opcode byte, then its operands.
///
/// - peer writes: bytes at an offset anywhere in the segment, or near the slot we
///   read next (so that headers land where they are looked at), or a word at a
///   control index of either ring;
/// - we take the next slot (as the endpoint does: `Link::poll`), copy its payload
///   (a fragment's into the message being reassembled, with a `max_message` of
///   [`MAX_MESSAGE`]), and keep the slot held or release it;
/// - we release a held slot (any one, in any order, twice at times);
/// - we publish our read position;
/// - we send a message on the other ring (whose credits the peer's tail grants).
/// - the peer's sender writes a well-formed slot (data, open, close, a fragment), as
///   a peer that keeps the protocol would; it reads the tail we publish (and gives up
///   when a hostile write broke it: the peer's problem).
///
/// Panics if a completion points outside the ring, a payload is longer than the ring,
/// the bytes consumed and not reclaimed exceed the ring, or a message being reassembled
/// or delivered is longer (or allocated larger) than `max_message`. A ring protocol
/// error ends the run, as it ends the connection; a reassembly error (a fragment of
/// another channel, a message too long) starts the next message afresh.
pub fn hostile_ring(mut ops: &[u8]) {
    // One segment for every run (allocating it costs more than a run), zeroed anew:
    // a fresh segment is all zero.
    thread_local! {
        static SEGMENT: Arc<Region> = Arc::new(Region::heap(segment_size(CAP)));
    }
    static ZERO: [u8; segment_size(CAP)] = [0; segment_size(CAP)];
    let region = SEGMENT.with(Arc::clone);
    region.write(0, &ZERO).expect("the segment's size");
    let rx_place = RingPlace::in_segment(0, CAP);
    let tx_place = RingPlace::in_segment(1, CAP);
    let Ok(rx) = RingRx::new(region.clone(), rx_place, Box::new(|| {})) else {
        unreachable!("the segment holds the ring");
    };
    let Ok(mut tx) = RingTx::new(region.clone(), tx_place) else {
        unreachable!("the segment holds the ring");
    };
    let mut rx = RxState {
        ring: rx,
        reassembly: Reassembly::default(),
        last_channel: CachedLookup::default(),
    };
    let shared = rx.ring.shared().clone();
    let Ok(mut peer) = RingTx::new(region.clone(), rx_place) else {
        unreachable!("the segment holds the ring");
    };
    let mut held: Vec<u64> = Vec::new();
    let mut next_read = 0u64;
    static PAYLOAD: [u8; CAP] = [0xa5; CAP];
    let payload = &PAYLOAD;
    while let Some([op]) = take::<1>(&mut ops) {
        match op % 9 {
            // Bytes anywhere in the segment.
            0 => {
                let (Some(off), Some([len])) = (take::<3>(&mut ops), take::<1>(&mut ops)) else {
                    return;
                };
                let off = u32::from_le_bytes([off[0], off[1], off[2], 0]) as usize;
                let (bytes, rest) = ops.split_at(usize::from(len).min(ops.len()));
                ops = rest;
                let off = off % region.size();
                let n = bytes.len().min(region.size() - off);
                region.write(off, &bytes[..n]).expect("in the segment");
            }
            // A slot header (16 bytes) near where we read next.
            1 => {
                let (Some([delta]), Some(h)) = (take::<1>(&mut ops), take::<16>(&mut ops)) else {
                    return;
                };
                let at = (next_read as usize + usize::from(delta) * 16) % CAP;
                region.write(rx_place.data + at, &h).expect("in the ring");
            }
            // A word at a control index (tail, flags, read position) of either ring.
            2 => {
                let (Some([which]), Some(w)) = (take::<1>(&mut ops), take::<8>(&mut ops)) else {
                    return;
                };
                let control = if which & 4 == 0 {
                    rx_place.control
                } else {
                    tx_place.control
                };
                let index = [
                    layout::TAIL,
                    layout::RX_SLEEPING,
                    layout::TX_WAITING,
                    layout::READ,
                ][usize::from(which % 4)];
                region
                    .write(control + index, &w)
                    .expect("in the control block");
            }
            // Take the next slot; keep or release it.
            3 | 4 => {
                let taken = match Link::poll(&mut rx, CAP) {
                    Ok(Some(t)) => t,
                    Ok(None) => continue,
                    Err(_) => return,
                };
                let c = taken.completion;
                assert!(c.offset >= layout::HEADER_LEN, "{c:?}");
                assert!(c.offset + c.len <= CAP, "payload outside the ring: {c:?}");
                assert!(c.slot as usize <= CAP, "{c:?}");
                next_read = c.pos + c.slot;
                if c.kind == Kind::Data {
                    let mut v = Vec::new();
                    rx.ring.copy_payload(&c, &mut v).expect("checked above");
                    assert_eq!(v.len(), c.len);
                }
                if matches!(c.kind, Kind::Frag | Kind::FragEnd) {
                    let RxState {
                        ring, reassembly, ..
                    } = &mut rx;
                    let last = c.kind == Kind::FragEnd;
                    let pushed = reassembly.push(c.channel, last, c.len, MAX_MESSAGE, |v| {
                        let before = v.len();
                        ring.copy_payload(&c, v).expect("checked above");
                        assert_eq!(v.len() - before, c.len);
                        Ok::<(), ()>(())
                    });
                    match pushed {
                        Ok(Some((ch, v))) => {
                            assert_eq!(ch, c.channel);
                            assert!(v.len() <= MAX_MESSAGE, "{} bytes delivered", v.len());
                        }
                        Ok(None) => {}
                        // The endpoint would drop the connection; here the next
                        // message starts afresh, so that the ring is explored further.
                        Err(_) => *reassembly = Reassembly::default(),
                    }
                    if let Some((_, len, cap)) = reassembly.pending() {
                        assert!(
                            len <= MAX_MESSAGE && cap <= MAX_MESSAGE,
                            "{len} bytes ({cap} allocated) of a message of at most {MAX_MESSAGE}"
                        );
                    }
                }
                match taken.seq {
                    Some(seq) if op % 9 == 3 && taken.in_place => held.push(seq),
                    Some(seq) => shared.release(seq),
                    None => {}
                }
                assert!(
                    shared.held() <= CAP as u64,
                    "{} bytes consumed and not reclaimed in a ring of {CAP}",
                    shared.held()
                );
            }
            // Release a held slot (the same one again at times).
            5 => {
                let Some([i]) = take::<1>(&mut ops) else {
                    return;
                };
                if !held.is_empty() {
                    let i = usize::from(i) % held.len();
                    let seq = if i.is_multiple_of(2) {
                        held.swap_remove(i)
                    } else {
                        held[i]
                    };
                    shared.release(seq);
                }
            }
            6 => rx.ring.publish_read(),
            // The peer's sender writes a slot by the protocol.
            8 => {
                let (Some(len), Some([kind, ch])) = (take::<2>(&mut ops), take::<2>(&mut ops))
                else {
                    return;
                };
                let kind = [
                    Kind::Data,
                    Kind::Open,
                    Kind::Close,
                    Kind::Frag,
                    Kind::FragEnd,
                ][usize::from(kind % 5)];
                let len = u32::from(u16::from_le_bytes(len)).min(peer.max_slot_payload());
                let slices: [&[u8]; 1] = [&payload[..len as usize]];
                let _ = peer.try_write(kind, u64::from(ch), &mut Cursor::new(&slices), len);
            }
            // Send a message (the peer's tail grants the space).
            _ => {
                let (Some(len), Some([ch])) = (take::<2>(&mut ops), take::<1>(&mut ops)) else {
                    return;
                };
                let len = u32::from(u16::from_le_bytes(len)).min(tx.max_slot_payload());
                let slices: [&[u8]; 1] = [&payload[..len as usize]];
                if tx
                    .try_write(Kind::Data, u64::from(ch), &mut Cursor::new(&slices), len)
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}
