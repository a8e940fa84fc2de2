//! The thin I/O driver around the [`Engine`]: the UDP socket (through quinn-udp, with
//! GSO and GRO where the kernel has them), the locks, the host callbacks, and who drives
//! the engine when.
//!
//! **Who drives.** Any thread may: the one that holds the engine's lock reads the
//! socket, feeds the engine, and sends what it transmits. A sender writes its message
//! and transmits it on its own thread. A receiver that polls (the transport has the
//! `polled` capability) drives the engine from [`Driver::progress`], so a message that
//! arrives while its receiver polls is read, decrypted and delivered on the receiver's
//! own thread, with no thread hand-off on either side. A background thread drives the
//! engine when nobody polls: it sleeps in `poll(2)` on the socket (and an eventfd that
//! wakes it) until a datagram or the engine's next timer. While a receiver polls, it
//! holds a *lease* ([`LEASE`]) that keeps the background thread off the socket (so that
//! it does not wake for every datagram and take the CPU from the receiver); it takes
//! over when the lease runs out.
//!
//! **Host callbacks** are made outside the engine's lock (a callback may send), in the
//! order the engine queued them, by one thread at a time.

use std::collections::VecDeque;
use std::io::IoSliceMut;
use std::net::UdpSocket;
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use ipl_transport_abi::HostSink;
use ipl_transport_kit::{BufferPool, Gate};
use parking_lot::{Condvar, Mutex, MutexGuard};
use quinn_proto::Transmit;
use quinn_udp::{RecvMeta, UdpSocketState};
use rustix::event::{PollFd, PollFlags};

use crate::engine::{Engine, HostEvent};

/// How long a polling receiver keeps the background thread off the socket after its
/// last poll: the longest a message that arrives just after the receiver stopped
/// polling waits for the background thread.
pub(crate) const LEASE: Duration = Duration::from_millis(1);
/// Datagrams read per receive call (each may carry several GRO segments).
const BATCH: usize = 8;
/// The longest the background thread sleeps without a timer (it wakes for datagrams
/// and through the eventfd anyway).
const IDLE_SLEEP: Duration = Duration::from_secs(1);
/// How long a waiting caller sleeps at most before it checks again (another thread may
/// have changed what it waits for without a datagram, e.g. ended a message).
const RECHECK: Duration = Duration::from_millis(1);

/// The engine and the buffers only its lock holder uses.
pub(crate) struct Locked {
    pub(crate) engine: Engine,
    recv_buf: Vec<u8>,
    /// A sender's buffer for a small message and its length prefix.
    pub(crate) scratch: Vec<u8>,
}

/// The endpoint's I/O. See the module documentation.
pub(crate) struct Driver {
    locked: Mutex<Locked>,
    socket: UdpSocket,
    udp: UdpSocketState,
    /// Wakes the background thread.
    waker: OwnedFd,
    epoch: Instant,
    /// Until when (ns since `epoch`) a polling receiver drives the engine.
    lease_until: AtomicU64,
    /// When (ns since `epoch`) the background thread next looks at the engine.
    bg_deadline: AtomicU64,
    /// Host events wait in the engine.
    pending: AtomicBool,
    /// A send left its message for the next batch: the background thread transmits it.
    flush_wanted: AtomicBool,
    /// The engine has connections (a poller with none has nothing to do).
    live: AtomicBool,
    deliver_lock: Mutex<VecDeque<HostEvent>>,
    /// Callers blocked in [`wait_for`](Driver::wait_for), woken when the engine moved.
    waiters: AtomicUsize,
    moved: Mutex<u64>,
    moved_cv: Condvar,
    pub(crate) host: HostSink,
    pub(crate) pool: BufferPool,
    pub(crate) gate: Gate,
    pub(crate) stop: AtomicBool,
}

fn timespec(d: Duration) -> rustix::event::Timespec {
    rustix::event::Timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: d.subsec_nanos().into(),
    }
}

impl Driver {
    /// A driver for `engine` on a bound socket.
    pub(crate) fn new(
        engine: Engine,
        socket: UdpSocket,
        udp: UdpSocketState,
        host: HostSink,
        pool: BufferPool,
    ) -> std::io::Result<Self> {
        let waker = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )?;
        let segment = engine.max_udp_payload() * udp.gro_segments().max(1);
        Ok(Driver {
            locked: Mutex::new(Locked {
                engine,
                recv_buf: vec![0; segment * BATCH],
                scratch: Vec::new(),
            }),
            socket,
            udp,
            waker,
            epoch: Instant::now(),
            lease_until: AtomicU64::new(0),
            bg_deadline: AtomicU64::new(u64::MAX),
            pending: AtomicBool::new(false),
            flush_wanted: AtomicBool::new(false),
            live: AtomicBool::new(false),
            deliver_lock: Mutex::new(VecDeque::new()),
            waiters: AtomicUsize::new(0),
            moved: Mutex::new(0),
            moved_cv: Condvar::new(),
            host,
            pool,
            gate: Gate::new(),
            stop: AtomicBool::new(false),
        })
    }

    fn ns(&self, t: Instant) -> u64 {
        t.saturating_duration_since(self.epoch).as_nanos() as u64
    }

    /// The engine's lock.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Locked> {
        self.locked.lock()
    }

    /// Sends one transmit; a full socket buffer waits (briefly) for room.
    fn transmit(&self, t: &Transmit, data: &[u8]) {
        let out = quinn_udp::Transmit {
            destination: t.destination,
            ecn: t
                .ecn
                .and_then(|e| quinn_udp::EcnCodepoint::from_bits(e as u8)),
            contents: data,
            segment_size: t.segment_size,
            src_ip: t.src_ip,
        };
        for _ in 0..100 {
            match self.udp.send((&self.socket).into(), &out) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let mut fds = [PollFd::new(&self.socket, PollFlags::OUT)];
                    let _ = rustix::event::poll(&mut fds, Some(&timespec(RECHECK)));
                }
                Err(e) => {
                    tracing::debug!("quic: send to {}: {e}", t.destination);
                    return;
                }
            }
        }
        tracing::debug!(
            "quic: socket stayed full; datagram to {} dropped",
            t.destination
        );
    }

    /// Reads every datagram waiting on the socket into the engine, then lets the engine
    /// process and transmit. Returns whether a datagram came.
    pub(crate) fn drive(&self, g: &mut Locked, now: Instant) -> bool {
        let mut got = self.receive(g, now);
        let mut now = now;
        loop {
            g.engine.process(now, &mut |t, d| self.transmit(t, d));
            if !g.engine.take_more() {
                break;
            }
            now = Instant::now();
            got |= self.receive(g, now);
        }
        self.publish(&g.engine);
        if got && self.waiters.load(Ordering::SeqCst) > 0 {
            *self.moved.lock() += 1;
            self.moved_cv.notify_all();
        }
        got
    }

    /// Reads every datagram waiting on the socket into the engine.
    fn receive(&self, g: &mut Locked, now: Instant) -> bool {
        let Locked {
            engine, recv_buf, ..
        } = g;
        let mut tx = |t: &Transmit, d: &[u8]| self.transmit(t, d);
        let mut got = false;
        let per = recv_buf.len() / BATCH;
        for _ in 0..64 {
            let mut metas = [RecvMeta::default(); BATCH];
            let n = {
                let mut iovs: smallvec::SmallVec<[IoSliceMut<'_>; BATCH]> =
                    recv_buf.chunks_mut(per).map(IoSliceMut::new).collect();
                match self.udp.recv((&self.socket).into(), &mut iovs, &mut metas) {
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        // E.g. ICMP port unreachable from a vanished peer: QUIC's timers
                        // deal with the peer; keep reading.
                        tracing::trace!("quic: receive: {e}");
                        continue;
                    }
                }
            };
            got |= n > 0;
            for (i, meta) in metas.iter().enumerate().take(n) {
                let buf = &recv_buf[i * per..i * per + meta.len];
                let stride = meta.stride.max(1);
                for seg in buf.chunks(stride) {
                    engine.handle_datagram(
                        now,
                        meta.addr,
                        meta.dst_ip,
                        meta.ecn
                            .and_then(|e| quinn_proto::EcnCodepoint::from_bits(e as u8)),
                        BytesMut::from(seg),
                        &mut tx,
                    );
                }
            }
            if n < BATCH {
                break;
            }
        }
        got
    }

    /// Lets the engine process and transmit what its callers changed (without reading
    /// the socket).
    pub(crate) fn flush(&self, g: &mut Locked) {
        g.engine
            .process(Instant::now(), &mut |t, d| self.transmit(t, d));
        self.settle(g);
    }

    /// After a send: transmits the channel's message at once, or (when the connection
    /// streams, see [`Engine::coalesce`]) leaves it to the background thread, which
    /// transmits everything written meanwhile in one batch.
    pub(crate) fn sent(&self, g: &mut Locked, channel: u64) {
        let now = Instant::now();
        if g.engine.coalesce(channel, now) {
            if !self.flush_wanted.swap(true, Ordering::AcqRel) {
                self.wake();
            }
            return;
        }
        self.flush_chan(g, channel);
    }

    /// [`flush`](Self::flush) for the connection of one channel (after a send).
    pub(crate) fn flush_chan(&self, g: &mut Locked, channel: u64) {
        g.engine
            .flush(channel, Instant::now(), &mut |t, d| self.transmit(t, d));
        self.settle(g);
    }

    /// After a flush: a burst that stopped at its limit goes on (reading the acks that
    /// came meanwhile, as the driver does); then what the engine now holds is published.
    fn settle(&self, g: &mut Locked) {
        if g.engine.take_more() {
            self.drive(g, Instant::now());
        } else {
            self.publish(&g.engine);
        }
        self.after_drive(g);
    }

    /// Mirrors the engine's state in the flags that lock-free callers read.
    fn publish(&self, engine: &Engine) {
        self.live.store(engine.has_connections(), Ordering::Relaxed);
        if engine.has_events() {
            self.pending.store(true, Ordering::Release);
        }
    }

    /// Wakes the background thread if the engine needs it before it planned to look.
    pub(crate) fn after_drive(&self, g: &mut Locked) {
        let next = g.engine.next_timeout().map(|t| self.ns(t));
        if next.is_some_and(|t| t < self.bg_deadline.load(Ordering::Acquire)) {
            self.wake();
        }
    }

    /// Wakes the background thread.
    pub(crate) fn wake(&self) {
        let _ = rustix::io::write(&self.waker, &1u64.to_ne_bytes());
    }

    /// Hands the queued host events to the host, in order, outside the engine's lock.
    /// Returns the number of messages delivered.
    pub(crate) fn deliver(&self) -> usize {
        let mut delivered = 0;
        while self.pending.load(Ordering::Acquire) {
            // One deliverer at a time keeps the order; a thread that finds another at
            // it leaves the events to it (it looks again before it lets go).
            let Some(mut batch) = self.deliver_lock.try_lock() else {
                return delivered;
            };
            loop {
                {
                    let mut g = self.lock();
                    g.engine.take_events(&mut batch);
                    self.pending.store(false, Ordering::Release);
                }
                if batch.is_empty() {
                    break;
                }
                let Some(_entered) = self.gate.enter() else {
                    // Shutting down: no callback any more.
                    batch.clear();
                    continue;
                };
                for ev in batch.drain(..) {
                    match ev {
                        HostEvent::Opened(c) => self.host.channel_opened(c),
                        HostEvent::Message(c, m) => {
                            delivered += 1;
                            self.pool.deliver(&self.host, c, m);
                        }
                        HostEvent::Closed(c, code, why) => self.host.channel_closed(c, code, &why),
                    }
                }
            }
        }
        delivered
    }

    /// Receiver-driven progress (see the module documentation).
    pub(crate) fn progress(&self) -> usize {
        if !self.live.load(Ordering::Relaxed) && !self.pending.load(Ordering::Relaxed) {
            return 0;
        }
        let now = Instant::now();
        self.lease_until
            .store(self.ns(now + LEASE), Ordering::Relaxed);
        if let Some(mut g) = self.locked.try_lock() {
            self.drive(&mut g, now);
        }
        self.deliver()
    }

    /// A poller stops polling: the background thread takes the socket back now instead
    /// of when the lease runs out.
    pub(crate) fn progress_end(&self) {
        if self.lease_until.swap(0, Ordering::Relaxed) > self.ns(Instant::now()) {
            self.wake();
        }
    }

    /// Waits until `check` (called with the engine after each drive) gives a value, or
    /// `deadline` passes (`None`). The caller drives the engine itself whenever it looks;
    /// in between it sleeps until another thread moved the engine (the background
    /// thread, which it lets take the socket, or a poller) or the engine's next timer.
    pub(crate) fn wait_for<R>(
        &self,
        deadline: Option<Instant>,
        mut check: impl FnMut(&mut Engine, Instant) -> Option<R>,
    ) -> Option<R> {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let r = self.wait_loop(deadline, &mut check);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        r
    }

    fn wait_loop<R>(
        &self,
        deadline: Option<Instant>,
        check: &mut impl FnMut(&mut Engine, Instant) -> Option<R>,
    ) -> Option<R> {
        loop {
            let seen = *self.moved.lock();
            let now = Instant::now();
            let next = {
                let mut g = self.lock();
                self.drive(&mut g, now);
                if let Some(r) = check(&mut g.engine, now) {
                    self.after_drive(&mut g);
                    drop(g);
                    self.deliver();
                    return Some(r);
                }
                self.after_drive(&mut g);
                g.engine.next_timeout()
            };
            self.deliver();
            if deadline.is_some_and(|d| now >= d) {
                return None;
            }
            // A blocked caller is no poller: the background thread reads the socket.
            self.progress_end();
            let mut until = now + RECHECK;
            for t in [next, deadline].into_iter().flatten() {
                until = until.min(t);
            }
            let mut moved = self.moved.lock();
            if *moved == seen {
                self.moved_cv
                    .wait_for(&mut moved, until.saturating_duration_since(now));
            }
        }
    }

    /// The background thread's loop (see the module documentation); ends with `stop`.
    pub(crate) fn run_background(&self) {
        let mut drain = [0u8; 8];
        while !self.stop.load(Ordering::Acquire) {
            let now = Instant::now();
            if self.flush_wanted.swap(false, Ordering::AcqRel) {
                // Messages that senders left for a batch go out now, lease or not.
                let mut g = self.lock();
                self.flush(&mut g);
            }
            let lease = self.lease_until.load(Ordering::Relaxed);
            let timeout = if lease > self.ns(now) {
                // A receiver polls: leave the socket to it until its lease runs out.
                self.bg_deadline.store(lease, Ordering::Release);
                let wait = Duration::from_nanos(lease - self.ns(now));
                let mut fds = [PollFd::new(&self.waker, PollFlags::IN)];
                let _ = rustix::event::poll(&mut fds, Some(&timespec(wait)));
                let _ = rustix::io::read(&self.waker, &mut drain);
                continue;
            } else {
                let mut g = self.lock();
                self.drive(&mut g, now);
                let next = g.engine.next_timeout();
                let until = next.map_or(now + IDLE_SLEEP, |t| t.min(now + IDLE_SLEEP));
                self.bg_deadline.store(self.ns(until), Ordering::Release);
                until.saturating_duration_since(now)
            };
            self.deliver();
            if timeout.is_zero() {
                continue;
            }
            let mut fds = [
                PollFd::new(&self.socket, PollFlags::IN),
                PollFd::new(&self.waker, PollFlags::IN),
            ];
            let _ = rustix::event::poll(&mut fds, Some(&timespec(timeout)));
            if !fds[1].revents().is_empty() {
                let _ = rustix::io::read(&self.waker, &mut drain);
            }
        }
    }
}
