//! The thin driver between the pure ring state machines ([`Producer`], [`Consumer`],
//! [`Reclaimer`]) and a [`Region`]: it loads and publishes the shared indices, copies
//! slots in and headers out, and runs the two wake-up handshakes.
//!
//! A slot is published by the first word of its header (see `layout.rs`); the
//! receiver polls that word at its read position, so it needs no index from the
//! producer.
//!
//! **Wake-ups** (both sides follow the same pattern, so no wake-up is ever lost): the
//! side that wants to sleep sets its flag, then re-checks the ring, and sleeps only if
//! nothing changed; the other side publishes (a header word, or its tail), then checks
//! the flag, and sends a wake-up only if it was set (clearing it). All four accesses
//! are `SeqCst`, so either the sleeper sees the new slot or the waker sees the flag.
//! - the receiver's `rx_sleeping`: set before its thread blocks; the producer wakes it
//!   after publishing a slot, unless the receiver's published read position shows
//!   that someone (a thread calling `progress`) already took the slot;
//! - the sender's `tx_waiting`: set when it lacks credits; the receiver wakes it after
//!   reclaiming space (and the sender, as it sets it, wakes a receiver that sleeps:
//!   see below).
//!
//! **Polled channels.** A thread of the receiver's side that takes a channel's
//! messages itself (a receive port's poll) records the channel in the `polled` table
//! of the control block. After publishing a data slot of a recorded channel, the
//! producer neither wakes the receiver nor waits for the slot to be taken: the polling
//! thread takes it. That wait was the costly part of a round trip: the producer read
//! the receiver's read position at every message, so each store of it by the receiver
//! became a transfer between cores on the receive path. The record stays while the
//! thread goes back and forth between receives (it is written only when it changes);
//! it is withdrawn, by the same pattern as above, before a thread of that side sleeps
//! (`progress_end`, `wait`): withdraw (`SeqCst`), then look at the ring and deliver
//! what came without a wake-up. The producer publishes, then reads the table
//! (`SeqCst`): either it sees the record withdrawn (and wakes as usual) or the
//! withdrawing thread sees its slot. A sender short of credits wakes a sleeping
//! receiver, since the slots that fill the ring may be of a recorded channel whose
//! thread does not poll now. Only data sent through a channel's fast path is left so;
//! the IPL's connection protocol goes through `send` and always announces.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::buffer::CtxCache;
use crate::consumer::{Completion, Consumer, RingError};
use crate::layout::{
    self, ring_offset, Kind, SlotHeader, HEADER_LEN, POLLED, POLLED_SLOTS, READ, RX_SLEEPING, TAIL,
    TX_WAITING,
};
use crate::producer::{BadTail, Producer};
use crate::reclaim::Reclaimer;
use crate::region::{OutOfBounds, Region};

/// The polled-table entry of `channel` (its wire id plus one; 0 marks a free entry),
/// or None for the one wire id that has none.
fn polled_entry(channel: u64) -> Option<u64> {
    channel.checked_add(1)
}

/// The offsets of one ring inside a region.
#[derive(Debug, Clone, Copy)]
pub struct RingPlace {
    /// Offset of the control block.
    pub control: usize,
    /// Offset of the data area.
    pub data: usize,
    /// Capacity of the data area.
    pub cap: usize,
}

impl RingPlace {
    /// Ring `ring` (0 or 1) of a segment with rings of `cap` bytes.
    pub fn in_segment(ring: usize, cap: usize) -> Self {
        RingPlace {
            control: layout::control_offset(ring),
            data: layout::data_offset(ring, cap),
            cap,
        }
    }
}

/// A ring access that failed: the peer broke the protocol (or the region is too small).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// The receiver published an impossible tail.
    #[error(transparent)]
    Tail(#[from] BadTail),
    /// The producer published something impossible.
    #[error(transparent)]
    Ring(#[from] RingError),
    /// An offset outside the region.
    #[error(transparent)]
    Bounds(#[from] OutOfBounds),
}

/// A cursor over a message given as scatter/gather slices, consumed piece by piece.
#[derive(Debug)]
pub struct Cursor<'a> {
    slices: &'a [&'a [u8]],
    idx: usize,
    off: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `slices`.
    #[inline]
    pub fn new(slices: &'a [&'a [u8]]) -> Self {
        Cursor {
            slices,
            idx: 0,
            off: 0,
        }
    }

    /// Copies the next `len` bytes (fewer if the slices end) to `dst`.
    ///
    /// # Safety
    /// `dst..dst + len` must be valid for writes and not overlap the slices.
    unsafe fn copy_to(&mut self, dst: *mut u8, len: usize) {
        let mut at = 0;
        while at < len && self.idx < self.slices.len() {
            let s = &self.slices[self.idx][self.off..];
            let n = s.len().min(len - at);
            // at + n <= len: inside the range the caller vouches for.
            let to = dst.wrapping_add(at);
            // SAFETY: `to..to + n` lies within `dst..dst + len` (at + n <= len), which the
            // caller guarantees writable and disjoint from the slices; the source is a
            // live slice of at least n bytes.
            unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), to, n) };
            at += n;
            self.off += n;
            if self.off == self.slices[self.idx].len() {
                self.idx += 1;
                self.off = 0;
            }
        }
    }
}

/// The 8-byte word at `off` of a data area.
///
/// # Safety
/// `data + off..data + off + 8` must be in a live mapping, 8-aligned, for the lifetime
/// the caller uses the reference.
unsafe fn word_at<'a>(data: *mut u8, off: usize) -> &'a AtomicU64 {
    let p = data.wrapping_add(off).cast::<AtomicU64>();
    // SAFETY: the caller guarantees that `p` is in a live mapping, 8-aligned, for the
    // lifetime of the reference; any bit pattern is a valid AtomicU64.
    unsafe { &*p }
}

// SAFETY: the only field that is not Send is `data`, a pointer into the mapping that the
// `Arc<Region>` beside it keeps alive; it is used by whoever owns the RingTx (one thread
// at a time, behind the link's lock), as the region's own accessors are.
unsafe impl Send for RingTx {}

/// The sending end of a ring.
#[derive(Debug)]
pub struct RingTx {
    region: Arc<Region>,
    place: RingPlace,
    /// The data area (`place.data..place.data + place.cap` of the region, checked at
    /// construction; the `Arc` keeps it mapped).
    data: *mut u8,
    producer: Producer,
    /// The receiver's tail as last read (checked). The shared tail is read again only
    /// when this one grants too little space, or when a small slot might go back to the
    /// start of a drained ring: a read of the line the receiver writes at every release
    /// is a cache miss between cores.
    tail: u64,
}

impl RingTx {
    /// The sending end of the ring at `place`, which must be fresh (all zero).
    pub fn new(region: Arc<Region>, place: RingPlace) -> Result<Self, OutOfBounds> {
        region.atomic(place.control + layout::CONTROL_LAST)?;
        let data = region.ptr(place.data, place.cap)?.cast_mut();
        // Header words must be 8-aligned, and offsets are masks of a power of two (a
        // ring capacity: at least 64 KiB).
        if !(data as usize).is_multiple_of(8) || !layout::valid_capacity(place.cap as u64) {
            return Err(OutOfBounds {
                off: place.data,
                len: place.cap,
                size: region.size(),
            });
        }
        Ok(RingTx {
            data,
            region,
            producer: Producer::new(place.cap as u64),
            place,
            tail: 0,
        })
    }

    fn index(&self, which: usize) -> &AtomicU64 {
        // Checked in `new` (the control block lies below the data area).
        self.region
            .atomic(self.place.control + which)
            .unwrap_or_else(|_| unreachable!("control block checked at construction"))
    }

    /// The largest payload of one slot; larger messages are fragmented.
    #[inline]
    pub fn max_slot_payload(&self) -> u32 {
        self.producer.max_slot_payload()
    }

    /// Writes one slot of `len` bytes taken from `data` and publishes it, if the
    /// credits allow; `Ok(false)` when the receiver must release space first.
    #[inline]
    pub fn try_write(
        &mut self,
        kind: Kind,
        channel: u64,
        payload: &mut Cursor<'_>,
        len: u32,
    ) -> Result<bool, DriverError> {
        let cached = match self.producer.plan(len, self.tail) {
            Ok(p) if !self.producer.may_rewind(len) => Some(p),
            _ => None,
        };
        let plan = match cached {
            Some(p) => p,
            None => {
                // SeqCst: pairs with the receiver's tail update (see `publish_tail`).
                self.tail = self
                    .producer
                    .check_tail(self.index(TAIL).load(Ordering::SeqCst))?;
                match self.producer.plan(len, self.tail) {
                    Ok(p) => p,
                    Err(_) => return Ok(false),
                }
            }
        };
        let cap = self.place.cap as u64;
        let at = ring_offset(plan.pos, cap) as usize;
        let next = ring_offset(plan.new_head, cap) as usize;
        let [first, second] = SlotHeader { len, kind, channel }.words();
        // Where each access below lands: `data` points to the `cap`-byte data area
        // (checked in `new`, kept mapped by `region`, 8-aligned). The plan keeps every
        // slot inside the area: slots start at multiples of 16 below `cap` (a power of
        // two, at least 64 KiB) and end at most at `cap`, so the header words at `at` and
        // `at + 8`, the payload at `at + 16..at + 16 + len`, the padding's header at the
        // old head's offset, and the header word at `next` (the offset after the slot,
        // or 0) are in bounds and 8-aligned. The credits give this range to the producer
        // alone until a first word publishes it; the words the peer also reads are
        // accessed atomically.
        //
        // The header after this slot reads "nothing yet" before this one can be seen
        // (the credits kept it free).
        // SAFETY: `next` is an 8-aligned offset in the data area (see above).
        unsafe { word_at(self.data, next) }.store(0, Ordering::Relaxed);
        let payload_at = self.data.wrapping_add(at + HEADER_LEN);
        // SAFETY: `at + 16..at + 16 + len` lies in the data area (see above), ours alone
        // until published, and cannot overlap the sender's slices (our mapping).
        unsafe { payload.copy_to(payload_at, len as usize) };
        // SAFETY: `at + 8` is an 8-aligned offset in the data area (see above).
        unsafe { word_at(self.data, at + 8) }.store(second, Ordering::Relaxed);
        match plan.pad {
            // SAFETY: `at` is an 8-aligned offset in the data area (see above).
            None => unsafe { word_at(self.data, at) }.store(first, Ordering::SeqCst),
            Some((pos, pad_len)) => {
                // The slot first, then the padding that leads the receiver to it.
                let [pad_first, pad_second] = SlotHeader {
                    len: pad_len,
                    kind: Kind::Pad,
                    channel: 0,
                }
                .words();
                let p = ring_offset(pos, cap) as usize;
                // SAFETY: `at` is an 8-aligned offset in the data area (see above).
                unsafe { word_at(self.data, at) }.store(first, Ordering::Release);
                // SAFETY: `p` (the old head's offset) and `p + 8` are 8-aligned offsets
                // in the data area (see above).
                unsafe { word_at(self.data, p + 8) }.store(pad_second, Ordering::Relaxed);
                // SAFETY: as the line above.
                unsafe { word_at(self.data, p) }.store(pad_first, Ordering::SeqCst);
            }
        }
        self.producer.commit(&plan);
        Ok(true)
    }

    /// Whether the receiver announced that it sleeps (a plain load, no claim).
    pub fn peer_sleeping(&self) -> bool {
        self.index(RX_SLEEPING).load(Ordering::SeqCst) != 0
    }

    /// After publishing a slot on `channel`: whether a thread of the receiver's side
    /// takes that channel's messages itself, so the slot needs no wake-up (see the
    /// module documentation). Loads of a line the receiver writes rarely.
    pub fn polled(&self, channel: u64) -> bool {
        let Some(entry) = polled_entry(channel) else {
            return false;
        };
        (0..POLLED_SLOTS).any(|i| self.index(POLLED + 8 * i).load(Ordering::SeqCst) == entry)
    }

    /// Whether the receiver has taken everything published so far.
    pub fn consumed(&self) -> bool {
        self.index(READ).load(Ordering::Acquire) >= self.producer.head()
    }

    /// After publishing: whether the receiver announced it sleeps (the flag is
    /// cleared, so exactly one wake-up is sent per announcement).
    pub fn take_sleeping(&self) -> bool {
        fence(Ordering::SeqCst);
        let f = self.index(RX_SLEEPING);
        f.load(Ordering::SeqCst) != 0 && f.swap(0, Ordering::SeqCst) != 0
    }

    /// Announces (or withdraws) that this sender waits for credits.
    pub fn set_waiting(&self, waiting: bool) {
        self.index(TX_WAITING)
            .store(u64::from(waiting), Ordering::SeqCst);
    }
}

/// The part of a ring's receiving end that released buffers need: shared with every
/// zero-copy buffer (through an `Arc`), so releases stay sound after the endpoint is
/// gone.
pub struct RxShared {
    region: Arc<Region>,
    place: RingPlace,
    reclaimer: Mutex<Reclaimer>,
    /// How far the consumer has read (a copy for lock-free peeks).
    read: AtomicU64,
    /// Sends the peer a wake-up (after reclaiming space it waits for).
    wake_peer: Box<dyn Fn() + Send + Sync>,
    /// The spare release context of buffers handed out in place.
    ctx_cache: CtxCache,
}

impl std::fmt::Debug for RxShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxShared")
            .field("place", &self.place)
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

impl RxShared {
    fn index(&self, which: usize) -> &AtomicU64 {
        self.region
            .atomic(self.place.control + which)
            .unwrap_or_else(|_| unreachable!("control block checked at construction"))
    }

    /// The spare release context of buffers handed out in place (see `buffer.rs`).
    pub(crate) fn release_ctx_cache(&self) -> &CtxCache {
        &self.ctx_cache
    }

    /// The region (to keep it mapped, and for pointer checks).
    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    /// Whether the producer published something not consumed yet (lock-free peek): the
    /// header at the read position is no longer zero.
    pub fn has_pending(&self) -> bool {
        let off = ring_offset(self.read.load(Ordering::Acquire), self.place.cap as u64) as usize;
        self.region
            .atomic(self.place.data + off)
            .is_ok_and(|w| w.load(Ordering::SeqCst) != 0)
    }

    /// Bytes consumed and not reclaimed yet (the fuzzing harness checks its bound).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn held(&self) -> u64 {
        self.reclaimer.lock().held()
    }

    /// Releases consumed slot `seq`; reclaims space and wakes a waiting sender.
    #[inline]
    pub fn release(&self, seq: u64) {
        let moved = self.reclaimer.lock().release(seq);
        if let Some(tail) = moved {
            self.publish_tail(tail);
        }
    }

    fn publish_tail(&self, tail: u64) {
        // The lock above is released, but tails only grow and each store carries the
        // newest value computed under it, so a late store of an older value could
        // only come from a racing release: store the maximum.
        // The SeqCst update of the tail and the SeqCst load of the flag pair with the
        // sender's SeqCst flag store and tail load (no fence needed: all four are in
        // the single SeqCst order).
        self.index(TAIL).fetch_max(tail, Ordering::SeqCst);
        let w = self.index(TX_WAITING);
        if w.load(Ordering::SeqCst) != 0 && w.swap(0, Ordering::SeqCst) != 0 {
            (self.wake_peer)();
        }
    }

    /// Records that a thread of this side takes `channel`'s messages itself (a
    /// receiver that polls): the producer then sends no wake-up for its data messages
    /// (see the module documentation). A no-op when it is recorded already (loads
    /// only) or when the table is full (the producer then wakes as for any channel).
    pub fn mark_polled(&self, channel: u64) {
        let Some(entry) = polled_entry(channel) else {
            return;
        };
        let slots = || (0..POLLED_SLOTS).map(|i| self.index(POLLED + 8 * i));
        if slots().any(|w| w.load(Ordering::Relaxed) == entry) {
            return;
        }
        for w in slots() {
            if w.compare_exchange(0, entry, Ordering::SeqCst, Ordering::Relaxed)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Clears `channel`'s record (the channel closed).
    pub fn unmark_polled(&self, channel: u64) {
        if let Some(entry) = polled_entry(channel) {
            for i in 0..POLLED_SLOTS {
                let _ = self.index(POLLED + 8 * i).compare_exchange(
                    entry,
                    0,
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                );
            }
        }
    }

    /// Clears every record (the threads of this side stop polling): from here on each
    /// slot is announced as usual. The caller then looks at the ring again
    /// ([`has_pending`](Self::has_pending)) and delivers what came before: a slot
    /// published while a record stood got no wake-up. Whether any record was cleared.
    pub fn unmark_all_polled(&self) -> bool {
        let mut any = false;
        for i in 0..POLLED_SLOTS {
            let w = self.index(POLLED + 8 * i);
            if w.load(Ordering::Relaxed) != 0 {
                w.store(0, Ordering::SeqCst);
                any = true;
            }
        }
        any
    }

    /// Announces that the receiving thread is about to sleep (then re-check
    /// [`has_pending`](Self::has_pending) before sleeping), or withdraws it.
    pub fn set_sleeping(&self, sleeping: bool) {
        self.index(RX_SLEEPING)
            .store(u64::from(sleeping), Ordering::SeqCst);
    }
}

/// The receiving end of a ring: the consumer and its reclaimer. One thread at a time
/// consumes (the caller holds a lock); releases come from any thread.
#[derive(Debug)]
pub struct RingRx {
    shared: Arc<RxShared>,
    consumer: Consumer,
}

impl Drop for RingRx {
    fn drop(&mut self) {
        // The spare release context refers to the ring: break the cycle.
        self.shared.ctx_cache.close();
    }
}

/// A slot that was consumed. A slot with a payload stays held until released with
/// [`RxShared::release`]`(seq)` — after its payload was copied, or when the host
/// releases the buffer handed out in place; other slots (padding, control) are
/// released at once and have no `seq`.
#[derive(Debug, Clone, Copy)]
pub struct Taken {
    /// The completion.
    pub completion: Completion,
    /// The release ticket of a slot with a payload.
    pub seq: Option<u64>,
    /// Whether the payload may be handed out in place (the zero-copy window allows it);
    /// otherwise copy it, then release.
    pub in_place: bool,
}

impl RingRx {
    /// The receiving end of the ring at `place`; `wake_peer` is called after reclaiming
    /// space the peer's sender waits for.
    pub fn new(
        region: Arc<Region>,
        place: RingPlace,
        wake_peer: Box<dyn Fn() + Send + Sync>,
    ) -> Result<Self, OutOfBounds> {
        region.atomic(place.control + layout::CONTROL_LAST)?;
        region.ptr(place.data, place.cap)?;
        Ok(RingRx {
            consumer: Consumer::new(place.cap as u64),
            shared: Arc::new(RxShared {
                region,
                place,
                reclaimer: Mutex::new(Reclaimer::new()),
                read: AtomicU64::new(0),
                wake_peer,
                ctx_cache: CtxCache::default(),
            }),
        })
    }

    /// The part shared with released buffers.
    #[inline]
    pub fn shared(&self) -> &Arc<RxShared> {
        &self.shared
    }

    /// Takes the next slot, if one was published. For a whole message ([`Kind::Data`]),
    /// `in_place` decides from the completion and the bytes held so far whether it may
    /// be handed out in place.
    pub fn poll(
        &mut self,
        in_place: impl FnOnce(&Completion, u64) -> bool,
    ) -> Result<Option<Taken>, DriverError> {
        let s = &*self.shared;
        let at = s.place.data + self.consumer.next_offset();
        let first = s.region.atomic(at)?.load(Ordering::Acquire);
        if first == 0 {
            return Ok(None);
        }
        // The second word as a word too (no byte copy): the acquire load above orders it.
        let second = s.region.atomic(at + 8)?.load(Ordering::Relaxed);
        let raw = SlotHeader::bytes_of_words([first, second]);
        // The credits are what this side reclaimed, from its private state: the tail
        // in the ring is the peer's to overwrite, and a tail it raised would let it
        // publish slots without end over the ones the host still holds.
        let mut rec = s.reclaimer.lock();
        let Some(c) = self.consumer.take(&raw, rec.tail())? else {
            return Ok(None);
        };
        s.read.store(self.consumer.read(), Ordering::Release);
        let held = rec.held();
        let payload = matches!(c.kind, Kind::Data | Kind::Frag | Kind::FragEnd);
        let in_place = c.kind == Kind::Data && in_place(&c, held);
        let seq = rec.push(c.slot, !payload);
        let moved = if payload { None } else { rec.advance() };
        drop(rec);
        if let Some(t) = moved {
            s.publish_tail(t);
        }
        Ok(Some(Taken {
            completion: c,
            seq: payload.then_some(seq),
            in_place,
        }))
    }

    /// Tells the producer how far this side has taken slots (it decides from it
    /// whether a wake-up is needed). Called once after a batch of [`poll`](Self::poll)s
    /// has been handled rather than at each: the store would otherwise stall the next
    /// locked instruction of the receive path for a transfer between cores.
    pub fn publish_read(&self) {
        let s = &*self.shared;
        let read = self.consumer.read();
        let shared = s.index(READ);
        if shared.load(Ordering::Relaxed) != read {
            shared.store(read, Ordering::Release);
        }
    }

    /// A pointer to a completion's payload inside the region.
    pub fn payload_ptr(&self, c: &Completion) -> Result<*const u8, OutOfBounds> {
        self.shared
            .region
            .ptr(self.shared.place.data + c.offset, c.len)
    }

    /// Appends a completion's payload to `v` (a copy).
    #[inline]
    pub fn copy_payload(&self, c: &Completion, v: &mut Vec<u8>) -> Result<(), OutOfBounds> {
        self.shared
            .region
            .append_to(self.shared.place.data + c.offset, c.len, v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    const CAP: usize = 1 << 16;

    fn pair() -> (RingTx, RingRx, Arc<AtomicUsize>) {
        pair_of(CAP)
    }

    fn pair_of(cap: usize) -> (RingTx, RingRx, Arc<AtomicUsize>) {
        let region = Arc::new(Region::heap(layout::segment_size(cap)));
        let place = RingPlace::in_segment(0, cap);
        let wakes = Arc::new(AtomicUsize::new(0));
        let w = wakes.clone();
        let tx = RingTx::new(region.clone(), place).unwrap();
        let rx = RingRx::new(
            region,
            place,
            Box::new(move || {
                w.fetch_add(1, Ordering::SeqCst);
            }),
        )
        .unwrap();
        (tx, rx, wakes)
    }

    fn send(tx: &mut RingTx, ch: u64, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        tx.try_write(Kind::Data, ch, &mut Cursor::new(parts), len as u32)
            .unwrap()
    }

    /// Receives one message; with `keep` its slot stays held (its ticket returned),
    /// else it is released after the copy.
    fn recv(rx: &mut RingRx, keep: bool) -> Option<(u64, Vec<u8>, Option<u64>)> {
        loop {
            let t = rx.poll(|_, _| true).unwrap()?;
            if t.completion.kind == Kind::Pad {
                assert_eq!(t.seq, None);
                continue;
            }
            assert!(t.in_place);
            let mut v = Vec::new();
            rx.copy_payload(&t.completion, &mut v).unwrap();
            let seq = t.seq.unwrap();
            if keep {
                return Some((t.completion.channel, v, Some(seq)));
            }
            rx.shared().release(seq);
            return Some((t.completion.channel, v, None));
        }
    }

    #[test]
    fn messages_wrap_around_in_order() {
        let (mut tx, mut rx, _) = pair();
        let mut sent = 0u32;
        let mut got = 0u32;
        // Sizes that do not divide the ring, so slots hit the end at odd places.
        while got < 200 {
            while sent < 200 {
                let body = vec![sent as u8; 1000 + (sent as usize * 37) % 3000];
                if !send(&mut tx, sent as u64, &[&sent.to_le_bytes(), &body]) {
                    break;
                }
                sent += 1;
            }
            while let Some((ch, v, seq)) = recv(&mut rx, false) {
                assert_eq!(seq, None);
                assert_eq!(ch, got as u64);
                assert_eq!(&v[..4], &got.to_le_bytes());
                assert!(v[4..].iter().all(|&b| b == got as u8));
                got += 1;
            }
        }
        assert!(tx.producer.head() > 3 * CAP as u64, "the ring wrapped");
    }

    /// Streams `n` messages of `size(i)` bytes through a ring of `cap` bytes from one
    /// thread to another and checks that each arrives once, in order, whole; returns the
    /// producer's final head.
    fn stream_between_threads(cap: usize, n: u32, size: impl Fn(u32) -> usize + Sync) -> u64 {
        let (mut tx, mut rx, _) = pair_of(cap);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        let size = &size;
        std::thread::scope(|sc| {
            let producer = sc.spawn(move || {
                for i in 0..n {
                    let body = vec![i as u8; size(i)];
                    while !send(&mut tx, u64::from(i), &[&i.to_le_bytes(), &body]) {
                        assert!(std::time::Instant::now() < deadline, "the consumer stalled");
                        std::thread::yield_now();
                    }
                }
                tx.producer.head()
            });
            let mut got = 0u32;
            while got < n {
                match recv(&mut rx, false) {
                    Some((ch, v, _)) => {
                        assert_eq!(ch, u64::from(got));
                        assert_eq!(v.len(), 4 + size(got));
                        assert_eq!(&v[..4], &got.to_le_bytes());
                        assert!(v[4..].iter().all(|&b| b == got as u8), "message {got} torn");
                        got += 1;
                    }
                    None => {
                        assert!(std::time::Instant::now() < deadline, "the producer stalled");
                        std::thread::yield_now();
                    }
                }
            }
            producer.join().unwrap()
        })
    }

    #[test]
    fn two_threads_see_every_slot_once_and_whole() {
        // The producer publishes by the header word while the consumer polls it from
        // another thread: every message arrives once, in order, with its bytes, through
        // rewinds (small slots on a drained ring) and wraps (a burst of large ones).
        let cap = 4 * crate::producer::REWIND_AT;
        let head = stream_between_threads(cap as usize, 20_000, |i| {
            if i % 100 < 90 {
                8
            } else {
                1 + (i as usize * 131) % 9000
            }
        });
        assert!(head > 8 * cap, "the ring went round many times ({head})");
    }

    #[test]
    fn large_slots_rewind_within_their_window_between_threads() {
        // Slots of 40-100 KiB in a 1 MiB ring: their hot window (four slots) is smaller
        // than the ring, so they go back to the start whenever the consumer keeps up,
        // and walk on when it lags.
        let cap = 1 << 20;
        let head = stream_between_threads(cap, 2_000, |i| {
            (40 << 10) + (i as usize * 7919) % (60 << 10)
        });
        assert!(
            head > 8 * cap as u64,
            "the ring went round many times ({head})"
        );
    }

    #[test]
    fn held_slots_block_credits_until_released_in_any_order() {
        let (mut tx, mut rx, wakes) = pair();
        let quarter = vec![1u8; tx.max_slot_payload() as usize];
        for _ in 0..3 {
            assert!(send(&mut tx, 1, &[&quarter]));
        }
        assert!(
            !send(&mut tx, 1, &[&quarter]),
            "no room for the header after it"
        );
        // The last 16 bytes stay free for the zeroed header after the last slot.
        assert!(send(&mut tx, 1, &[&quarter[16..]]));
        assert!(!send(&mut tx, 1, &[b"x"]), "ring full");
        let seqs: Vec<u64> = (0..4)
            .map(|_| recv(&mut rx, true).unwrap().2.unwrap())
            .collect();
        assert!(!send(&mut tx, 1, &[b"x"]), "consumed but not released");
        tx.set_waiting(true);
        rx.shared().release(seqs[3]);
        rx.shared().release(seqs[1]);
        assert!(
            !send(&mut tx, 1, &[b"x"]),
            "the oldest still holds the tail"
        );
        assert_eq!(wakes.load(Ordering::SeqCst), 0);
        rx.shared().release(seqs[0]);
        assert_eq!(wakes.load(Ordering::SeqCst), 1, "waiting sender woken");
        assert!(send(&mut tx, 1, &[b"x"]));
        rx.shared().release(seqs[2]);
        rx.shared().release(seqs[2]);
        assert_eq!(wakes.load(Ordering::SeqCst), 1, "no flag, no wake-up");
    }

    #[test]
    fn sleeping_receiver_is_woken_once() {
        let (mut tx, rx, _) = pair();
        assert!(!tx.take_sleeping());
        rx.shared().set_sleeping(true);
        assert!(!rx.shared().has_pending());
        assert!(send(&mut tx, 1, &[b"hi"]));
        assert!(tx.take_sleeping());
        assert!(!tx.take_sleeping());
        assert!(rx.shared().has_pending());
    }

    #[test]
    fn a_tail_the_peer_writes_grants_no_credits() {
        // The peer keeps writing our published tail as if we had reclaimed everything,
        // and publishes slot after slot while we hold them all (the host keeps the
        // buffers): the consumer goes by the space it reclaimed itself, so it stops at
        // a ring's worth with a protocol error instead of taking (and recording) slots
        // without end. Found by the shm_ring fuzz target.
        let (mut tx, mut rx, _) = pair();
        let mut refused = false;
        for _ in 0..2 * CAP / 1024 {
            rx.shared
                .index(TAIL)
                .store(tx.producer.head(), Ordering::SeqCst);
            assert!(
                send(&mut tx, 1, &[&[7u8; 1000]]),
                "the lie grants the space"
            );
            match rx.poll(|_, _| true) {
                Ok(Some(t)) => assert!(t.seq.is_some(), "held"),
                Ok(None) => unreachable!("a slot was published"),
                Err(e) => {
                    assert!(
                        matches!(e, DriverError::Ring(RingError::Credits { .. })),
                        "{e}"
                    );
                    refused = true;
                    break;
                }
            }
            let held = rx.shared.reclaimer.lock().held();
            assert!(held <= CAP as u64, "{held} bytes held in a ring of {CAP}");
        }
        assert!(refused, "slots beyond the ring were taken");
    }

    #[test]
    fn a_corrupted_ring_is_an_error() {
        let (mut tx, mut rx, _) = pair();
        assert!(send(&mut tx, 1, &[b"hello"]));
        // The peer scribbles over the header it published.
        rx.shared
            .region
            .write(rx.shared.place.data, &[0xff; 16])
            .unwrap();
        assert!(matches!(
            rx.poll(|_, _| true),
            Err(DriverError::Ring(RingError::Header { .. }))
        ));
        // A slot beyond the credits: a whole-ring message published at the start.
        let (_, mut rx, _) = pair();
        let h = SlotHeader {
            len: (CAP - HEADER_LEN) as u32,
            kind: Kind::Data,
            channel: 1,
        };
        rx.shared
            .region
            .write(rx.shared.place.data, &h.encode())
            .unwrap();
        assert!(matches!(
            rx.poll(|_, _| true),
            Err(DriverError::Ring(RingError::Credits { .. }))
        ));
        // A tail beyond the head: found when the producer next reads the tail, at the
        // latest once the space it knew of is used up.
        let (mut tx, rx, _) = pair();
        rx.shared.index(TAIL).store(u64::MAX / 2, Ordering::SeqCst);
        let mut result = Ok(true);
        for _ in 0..=CAP / 16 {
            result = tx.try_write(Kind::Data, 1, &mut Cursor::new(&[]), 0);
            if result.is_err() {
                break;
            }
        }
        assert!(matches!(result, Err(DriverError::Tail(_))), "{result:?}");
    }
}
