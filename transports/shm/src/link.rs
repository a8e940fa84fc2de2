//! One connection between two endpoints: a shared segment with a ring per direction
//! and the Unix socket that set it up (kept for wake-ups and to notice the peer's
//! death). Every channel between the two endpoints travels on it.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};
use std::time::{Duration, Instant};

use ipl_transport_abi::TransportError;

use ipl_transport_kit::channels::{CachedLookup, ChannelLink, LinkChannels};

use crate::chan_map::ChanHasher;
use crate::consumer::Completion;
use crate::handshake::Established;
use crate::layout::Kind;
use crate::reassembly::Reassembly;
use crate::region::Region;
use crate::ring::{Cursor, DriverError, RingPlace, RingRx, RingTx, RxShared, Taken};

/// The receiving state, consumed by one thread at a time.
#[derive(Debug)]
pub(crate) struct RxState {
    pub ring: RingRx,
    /// The fragmented message being reassembled.
    pub reassembly: Reassembly,
    /// The channel of the last message taken (most messages follow one on the same
    /// channel).
    pub last_channel: CachedLookup,
}

/// A connection to a peer endpoint.
#[derive(Debug)]
pub(crate) struct Link {
    /// Serial number within the endpoint (for logs).
    pub serial: u64,
    pub peer_id: u64,
    pub sock: Arc<UnixStream>,
    pub region: Arc<Region>,
    pub cap: usize,
    tx: Mutex<RingTx>,
    pub rx: Mutex<RxState>,
    pub rx_shared: Arc<RxShared>,
    credit: (Mutex<()>, Condvar),
    alive: AtomicBool,
    /// How long a sender that finds the receiver's thread asleep now waits for a
    /// polling thread to take its slot (ns), learned per link between
    /// [`MIN_WAKE_SPIN`] and `Pacing::wake_after` (see `write_slot`).
    wake_spin_ns: AtomicU64,
    /// Wire id as received from the peer → local channel id. `None` once the link is
    /// lost: whoever takes an entry out owns the channel's last callback.
    pub chans: LinkChannels<ChanHasher>,
}

impl ChannelLink for Link {
    type Hasher = ChanHasher;
    fn channels(&self) -> &LinkChannels<ChanHasher> {
        &self.chans
    }
}

/// How a sender waits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pacing {
    /// Spin this long for credits before sleeping.
    pub spin: Duration,
    /// Spin up to this long for a polling receiver to take a slot before waking the
    /// receiver's sleeping thread.
    pub wake_after: Duration,
    /// Fail after waiting this long for credits.
    pub timeout: Duration,
}

/// The least a sender waits for a polling thread before it wakes the receiver's
/// sleeping thread: longer than a polling receiver takes to consume a slot (under a
/// microsecond here, even between cores far apart).
const MIN_WAKE_SPIN: Duration = Duration::from_micros(2);

/// Sends a wake-up byte; a full socket buffer already holds one, so it is dropped.
fn wake(sock: &UnixStream) {
    let _ = (&*sock).write(&[1]);
}

impl Link {
    /// A link over an established connection; `connector` tells which ring is ours.
    pub fn new(
        serial: u64,
        est: Established,
        connector: bool,
    ) -> Result<Arc<Link>, TransportError> {
        let (tx_ring, rx_ring) = if connector { (0, 1) } else { (1, 0) };
        est.sock
            .set_nonblocking(true)
            .map_err(|e| TransportError::Other(format!("shm socket option: {e}")))?;
        let sock = Arc::new(est.sock);
        let bad = |e| TransportError::Other(format!("shm segment: {e}"));
        let tx = RingTx::new(est.region.clone(), RingPlace::in_segment(tx_ring, est.cap))
            .map_err(bad)?;
        let s = sock.clone();
        let rx = RingRx::new(
            est.region.clone(),
            RingPlace::in_segment(rx_ring, est.cap),
            Box::new(move || wake(&s)),
        )
        .map_err(bad)?;
        Ok(Arc::new(Link {
            serial,
            peer_id: est.peer_id,
            sock,
            region: est.region,
            cap: est.cap,
            tx: Mutex::new(tx),
            rx_shared: rx.shared().clone(),
            rx: Mutex::new(RxState {
                ring: rx,
                reassembly: Reassembly::default(),
                last_channel: CachedLookup::default(),
            }),
            credit: (Mutex::new(()), Condvar::new()),
            alive: AtomicBool::new(true),
            wake_spin_ns: AtomicU64::new(u64::MAX),
            chans: LinkChannels::default(),
        }))
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Marks the link dead: senders fail, the peer sees the socket close.
    pub fn kill(&self) {
        self.alive.store(false, Ordering::Release);
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        self.notify_credits();
    }

    /// Wakes senders waiting for credits.
    pub fn notify_credits(&self) {
        let _g = self.credit.0.lock();
        self.credit.1.notify_all();
    }

    /// Drains wake-up bytes from the socket. `false` when the peer closed it (or it
    /// failed): the peer is gone.
    pub fn drain_socket(&self) -> bool {
        let mut buf = [0u8; 64];
        loop {
            match (&*self.sock).read(&mut buf) {
                Ok(0) => return false,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
    }

    /// Sends one message (or control slot) on wire id `wire`: one slot when it fits,
    /// else fragments of at most a quarter ring, all under the send lock so nothing
    /// interleaves. Blocks while the receiver has not granted the space, spinning for
    /// `pacing.spin` and then sleeping until it wakes us, at most `pacing.timeout`.
    /// With `polled`, a message whose channel a thread of the receiver's side polls
    /// (see `RingTx::polled`) is left for that thread without a wake-up.
    pub fn send(
        &self,
        kind: Kind,
        wire: u64,
        slices: &[&[u8]],
        total: usize,
        pacing: Pacing,
        polled: bool,
    ) -> Result<(), TransportError> {
        // The clock is read only once a slot has to wait (a read costs about 50 ns on
        // a virtual machine, as much as the rest of an uncontended send).
        let mut deadline = None;
        let mut tx = self.tx.lock();
        let mut cur = Cursor::new(slices);
        let max = tx.max_slot_payload() as usize;
        if total <= max {
            return self.write_slot(
                &mut tx,
                (kind, wire, polled),
                &mut cur,
                total as u32,
                pacing,
                &mut deadline,
            );
        }
        let mut left = total;
        while left > 0 {
            let n = left.min(max);
            let k = if left == n { Kind::FragEnd } else { Kind::Frag };
            let written = self.write_slot(
                &mut tx,
                (k, wire, polled),
                &mut cur,
                n as u32,
                pacing,
                &mut deadline,
            );
            if let Err(e) = written {
                if left < total {
                    // Part of the message is in the ring: the peer would take what
                    // follows for the rest of it. The link is unusable: both sides see
                    // it lost.
                    self.kill();
                }
                return Err(e);
            }
            left -= n;
        }
        Ok(())
    }

    /// Writes one slot (of `kind` on `wire`, `polled` as in [`send`](Self::send)),
    /// waiting for credits as `pacing` says; `deadline` is set from `pacing.timeout`
    /// when the first wait of the message begins.
    fn write_slot(
        &self,
        tx: &mut RingTx,
        (kind, wire, polled): (Kind, u64, bool),
        cur: &mut Cursor<'_>,
        len: u32,
        pacing: Pacing,
        deadline: &mut Option<Instant>,
    ) -> Result<(), TransportError> {
        let mut start = None;
        let mut waiting = false;
        let mut announced = false;
        let result = loop {
            if !self.is_alive() {
                break Err(TransportError::Closed(
                    "shm connection to the peer was lost".into(),
                ));
            }
            match tx.try_write(kind, wire, cur, len) {
                Ok(true) => break Ok(()),
                Ok(false) => {}
                Err(e) => break Err(self.protocol_error(&e)),
            }
            let now = Instant::now();
            let start = *start.get_or_insert(now);
            let deadline = *deadline.get_or_insert(now + pacing.timeout);
            if now >= deadline {
                break Err(TransportError::Timeout(format!(
                    "shm: the receiver granted no ring space for {} ms",
                    (now - start).as_millis()
                )));
            }
            if now - start < pacing.spin {
                std::hint::spin_loop();
                continue;
            }
            if !waiting {
                // Announce, then look again before sleeping (see ring.rs).
                tx.set_waiting(true);
                waiting = true;
                announced = true;
                // The slots that fill the ring may be data of a polled channel, sent
                // without a wake-up, and its receiver may not be polling now: have the
                // peer's endpoint thread take them if it sleeps.
                if tx.take_sleeping() {
                    wake(&self.sock);
                }
                continue;
            }
            let mut g = self.credit.0.lock();
            let nap = (deadline - now).min(Duration::from_millis(10));
            self.credit.1.wait_for(&mut g, nap);
            waiting = false;
        };
        if announced {
            tx.set_waiting(false);
        }
        if result.is_ok() && polled && tx.polled(wire) {
            // A thread of the receiver's side takes this channel's messages itself, and
            // withdraws the record (then looks at the ring again) before it stops: no
            // wake-up, and no wait for the slot to be taken (which would pull the line
            // of the receiver's read position over at every message).
            return result;
        }
        if result.is_ok() && tx.peer_sleeping() {
            // The receiver's thread sleeps. A thread polling the endpoint may take the
            // slot anyway: give it a while to do so before paying for a wake-up (the
            // clock is read every few polls of the receiver's position only). The
            // while adapts: it halves after each wait in vain (a stream to a receiver
            // that sleeps between messages, where waiting only slows the sender) and
            // doubles after each slot taken in time, between MIN_WAKE_SPIN and
            // `wake_after`.
            let max = pacing.wake_after;
            let spin = Duration::from_nanos(self.wake_spin_ns.load(Ordering::Relaxed))
                .min(max)
                .max(MIN_WAKE_SPIN.min(max));
            // The clock is first read after 16 polls: a polling receiver has usually
            // taken the slot by then, and the reading would cost as much as the wait.
            let mut t0: Option<Instant> = None;
            let mut polls = 0u32;
            while !spin.is_zero() && !tx.consumed() {
                polls = polls.wrapping_add(1);
                if polls.is_multiple_of(16) && t0.get_or_insert_with(Instant::now).elapsed() >= spin
                {
                    break;
                }
                std::hint::spin_loop();
            }
            let taken = tx.consumed();
            let next = if taken { spin * 2 } else { spin / 2 };
            self.wake_spin_ns
                .store(next.as_nanos() as u64, Ordering::Relaxed);
            if !taken && tx.take_sleeping() {
                wake(&self.sock);
            }
        }
        result
    }

    fn protocol_error(&self, e: &DriverError) -> TransportError {
        tracing::warn!(
            peer = format_args!("{:016x}", self.peer_id),
            serial = self.serial,
            "shm: peer broke the ring protocol: {e}"
        );
        self.kill();
        TransportError::Closed(format!(
            "shm connection lost: peer broke the ring protocol: {e}"
        ))
    }

    /// Takes the next slot if one arrived; slots beyond the zero-copy window (half the
    /// ring held by unreleased messages) are not held but copied.
    pub fn poll(rx: &mut RxState, cap: usize) -> Result<Option<Taken>, DriverError> {
        let window = (cap / 2) as u64;
        rx.ring
            .poll(|c: &Completion, held: u64| held + c.slot <= window)
    }
}
