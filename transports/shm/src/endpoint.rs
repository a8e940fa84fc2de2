//! An shm endpoint: the listening socket, the links (one per peer endpoint), the
//! channel tables, delivery (from `progress` callers and from the endpoint's thread),
//! and the endpoint thread that sleeps when nobody polls.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use rustix::event::{PollFd, PollFlags};

use ipl_transport_abi::ffi::CloseCode;
use ipl_transport_abi::{
    ChannelSink, FastChannel, HostSink, PluginBuffer, TransportCapabilities, TransportError,
    TransportPlugin,
};
use ipl_transport_kit::admission::{Admission, Slot};
use ipl_transport_kit::channels::{CachedRoute, ChannelTable, Route};
use ipl_transport_kit::Gate;

use crate::address::{socket_name, Address, HostId};
use crate::buffer::in_place;
use crate::chan_map::ChanHasher;
use crate::config::{Config, WaitMode};
use crate::handshake;
use crate::layout::Kind;
use crate::link::{Link, Pacing, RxState};
use crate::sys;
use ipl_transport_kit::park::Parking;

/// Bit 63 of a wire channel id: set when the sender of the slot is the side that
/// opened the channel (as in the tcp transport), so the two directions never collide.
pub use ipl_transport_kit::channels::OPENED_BY_SENDER;

#[derive(Default)]
struct Handshakes {
    stopped: bool,
    /// Accepted sockets still in the handshake (so `shutdown` can break them).
    pending: HashMap<u64, UnixStream>,
    threads: Vec<JoinHandle<()>>,
}

struct Inner {
    id: u64,
    cfg: Config,
    context: Vec<u8>,
    here: HostId,
    address: Vec<u8>,
    host: HostSink,
    gate: Gate,
    stopping: AtomicBool,
    next_serial: AtomicU64,
    /// Every live link, as a snapshot that `progress` can scan without allocating.
    links: RwLock<Arc<[Arc<Link>]>>,
    /// The link `connect` uses for a peer endpoint id.
    by_peer: Mutex<HashMap<u64, Arc<Link>>>,
    /// Local channel id → route. Read on every send.
    channels: ChannelTable<Link, ChanHasher>,
    /// Wakes the endpoint thread (new link, shutdown).
    ctl: OwnedFd,
    handshakes: Mutex<Handshakes>,
    /// Accepted connections still in the handshake, and their bound.
    admission: Admission,
    /// Host threads parked in `wait`.
    parking: Parking,
    /// The endpoint thread is in (or about to enter) its `poll`. A parked host thread
    /// that drains a wake-up byte must then wake it (see `wait`).
    endpoint_asleep: AtomicBool,
}

/// A shared-memory endpoint (the plugin's instance type). See the crate documentation.
pub struct ShmTransport {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

fn random_id() -> Result<u64, TransportError> {
    let mut b = [0u8; 8];
    getrandom::getrandom(&mut b)
        .map_err(|e| TransportError::Unavailable(format!("random source failed: {e}")))?;
    Ok(u64::from_le_bytes(b))
}

fn abstract_addr(id: u64) -> std::io::Result<UnixAddr> {
    UnixAddr::from_abstract_name(socket_name(id).as_bytes())
}

impl Inner {
    /// How senders wait: for a polling receiver to take a slot before they wake the
    /// receiver's sleeping thread (not at all with `shm.wait=block`), and for credits.
    fn pacing(&self) -> Pacing {
        Pacing {
            spin: self.cfg.spin,
            wake_after: match self.cfg.wait {
                WaitMode::Block => Duration::ZERO,
                WaitMode::Spin | WaitMode::SpinBlock => self.cfg.spin,
            },
            timeout: self.cfg.send_timeout,
        }
    }

    fn register(&self, link: &Arc<Link>) -> Result<(), TransportError> {
        let mut by_peer = self.by_peer.lock();
        if self.stopping.load(Ordering::SeqCst) {
            return Err(TransportError::Closed(
                "shm endpoint is shutting down".into(),
            ));
        }
        by_peer.insert(link.peer_id, link.clone());
        let mut links = self.links.write();
        let mut v: Vec<Arc<Link>> = links.iter().cloned().collect();
        v.push(link.clone());
        *links = v.into();
        drop(links);
        drop(by_peer);
        sys::eventfd_signal(&self.ctl);
        tracing::debug!(
            endpoint = format_args!("{:016x}", self.id),
            peer = format_args!("{:016x}", link.peer_id),
            ring = link.cap,
            "shm connection established"
        );
        Ok(())
    }

    fn existing(&self, id: u64) -> Option<Arc<Link>> {
        let l = self.by_peer.lock().get(&id).cloned()?;
        (l.is_alive() && l.chans.is_open()).then_some(l)
    }

    fn dial(&self, addr: &Address, timeout: Duration) -> Result<Arc<Link>, TransportError> {
        let deadline = Instant::now() + timeout;
        let sa = abstract_addr(addr.id)
            .map_err(|e| TransportError::InvalidArgument(format!("shm socket name: {e}")))?;
        let sock = UnixStream::connect_addr(&sa).map_err(|e| {
            TransportError::Refused(format!(
                "no shm endpoint {:016x} on this host ({e})",
                addr.id
            ))
        })?;
        let est = handshake::initiate(
            sock,
            &self.cfg.secret,
            &self.context,
            self.id,
            addr.id,
            self.cfg.ring_size,
            deadline,
        )?;
        let link = Link::new(self.next_serial.fetch_add(1, Ordering::Relaxed), est, true)?;
        if let Err(e) = self.register(&link) {
            link.kill();
            return Err(e);
        }
        Ok(link)
    }

    /// The accepting side's handshake, on its own thread, bounded by `deadline`.
    fn serve_accepted(
        self: Arc<Self>,
        token: u64,
        sock: UnixStream,
        slot: Slot,
        deadline: Instant,
    ) {
        let result = handshake::respond(
            sock,
            &self.cfg.secret,
            &self.context,
            self.id,
            handshake_max_cap(&self.cfg),
            deadline,
        );
        drop(slot);
        self.handshakes.lock().pending.remove(&token);
        match result {
            Ok(est) => {
                match Link::new(self.next_serial.fetch_add(1, Ordering::Relaxed), est, false) {
                    Ok(link) => {
                        if self.register(&link).is_err() {
                            link.kill();
                        }
                    }
                    Err(e) => tracing::warn!("shm: cannot set up an accepted connection: {e}"),
                }
            }
            Err(why) => {
                if self.stopping.load(Ordering::SeqCst) {
                    tracing::debug!("shm: handshake cut by shutdown: {why}");
                } else {
                    self.admission.dropped(&"a local process", &why);
                }
            }
        }
    }

    fn accept_all(self: &Arc<Self>, listener: &UnixListener) {
        loop {
            let sock = match listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.admission.accept_failed(&e);
                    return;
                }
            };
            let deadline = Instant::now() + self.cfg.handshake_timeout;
            // Beyond `shm.max_handshakes` strangers could hold every thread and file
            // descriptor: closed at once (and counted, the warning rate-limited).
            let Some(slot) = self.admission.admit(&"a local process") else {
                drop(sock);
                continue;
            };
            if sock.set_nonblocking(false).is_err() {
                continue;
            }
            let token = self.next_serial.fetch_add(1, Ordering::Relaxed);
            let mut hs = self.handshakes.lock();
            if hs.stopped {
                return;
            }
            hs.threads.retain(|t| !t.is_finished());
            if let Ok(dup) = sock.try_clone() {
                hs.pending.insert(token, dup);
            }
            let me = self.clone();
            match thread::Builder::new()
                .name("ipl-shm-accept".into())
                .spawn(move || me.serve_accepted(token, sock, slot, deadline))
            {
                Ok(h) => hs.threads.push(h),
                Err(e) => {
                    tracing::warn!("shm: cannot start a handshake thread: {e}");
                    hs.pending.remove(&token);
                }
            }
        }
    }

    fn lookup(&self, link: &Link, rx: &mut RxState, wire: u64) -> Option<u64> {
        link.chans.get_cached(wire, &mut rx.last_channel)
    }

    /// Delivers everything that arrived on `link`, unless another thread is at it.
    /// Returns the number of messages delivered. When `want` names a channel (by wire
    /// id), that channel's next message goes to its sink instead of the host callback
    /// (still under the ring's lock, so nothing later of the channel overtakes it), and
    /// the consumption stops there.
    fn consume(&self, link: &Arc<Link>, mut want: Option<(u64, &mut ChannelSink<'_>)>) -> usize {
        let Some(mut rx) = link.rx.try_lock() else {
            return 0;
        };
        let mut n = 0;
        let mut taken_since_publish = 0u32;
        // Host callbacks may start while the gate is open: entered at the first one, and
        // then once for the batch (two locked instructions per message otherwise). Once
        // it is closed, messages are released undelivered. A message of `want` goes
        // back to the caller, which needs no callback (nor the gate).
        let mut entered = None;
        // Delivers one message; true when it went to `want`'s sink.
        let mut hand = |ch: u64, wire: u64, mut buf: PluginBuffer| -> bool {
            if let Some((_, sink)) = want.as_mut().filter(|(w, _)| *w == wire) {
                match sink.give(buf) {
                    Ok(()) => {
                        n += 1;
                        return true;
                    }
                    Err(b) => buf = b,
                }
            }
            if entered.get_or_insert_with(|| self.gate.enter()).is_some() {
                self.host.message(ch, buf);
                n += 1;
            }
            false
        };
        loop {
            // The sender learns how far we took slots after the batch (and every few
            // slots of a long one), not before each delivery (see `publish_read`).
            if taken_since_publish >= 16 {
                rx.ring.publish_read();
                taken_since_publish = 0;
            }
            let taken = match Link::poll(&mut rx, link.cap) {
                Ok(Some(t)) => t,
                Ok(None) => {
                    rx.ring.publish_read();
                    return n;
                }
                Err(e) => {
                    drop(rx);
                    self.link_lost(link, &format!("peer broke the ring protocol: {e}"));
                    return n;
                }
            };
            taken_since_publish += 1;
            let c = taken.completion;
            let release = || {
                if let Some(seq) = taken.seq {
                    link.rx_shared.release(seq);
                }
            };
            let mut given = false;
            let violation = match c.kind {
                Kind::Pad => None,
                Kind::Open => self.on_open(link, c.channel),
                Kind::Close => {
                    self.on_close(link, c.channel);
                    None
                }
                Kind::Data => {
                    match (self.lookup(link, &mut rx, c.channel), taken.seq) {
                        (Some(ch), Some(seq)) if taken.in_place => match rx.ring.payload_ptr(&c) {
                            Ok(ptr) => {
                                let buf = in_place(&link.rx_shared, seq, ptr, c.len);
                                given = hand(ch, c.channel, buf);
                            }
                            Err(_) => link.rx_shared.release(seq),
                        },
                        (None, _) | (_, None) => release(),
                        (Some(ch), Some(seq)) => {
                            // Beyond the zero-copy window: copy, release, deliver.
                            let mut v = Vec::with_capacity(c.len);
                            let copied = rx.ring.copy_payload(&c, &mut v);
                            link.rx_shared.release(seq);
                            if copied.is_ok() {
                                given = hand(ch, c.channel, PluginBuffer::owned(v));
                            }
                        }
                    }
                    None
                }
                Kind::Frag | Kind::FragEnd => {
                    let last = c.kind == Kind::FragEnd;
                    let RxState {
                        ring, reassembly, ..
                    } = &mut *rx;
                    let pushed =
                        reassembly.push(c.channel, last, c.len, self.cfg.max_message, |v| {
                            let copied = ring.copy_payload(&c, v);
                            release();
                            copied
                        });
                    match pushed {
                        Ok(None) => None,
                        Ok(Some((wire, v))) => {
                            if let Some(ch) = self.lookup(link, &mut rx, wire) {
                                given = hand(ch, wire, PluginBuffer::owned(v));
                            }
                            None
                        }
                        Err(why) => {
                            release();
                            Some(why)
                        }
                    }
                }
            };
            if let Some(why) = violation {
                drop(rx);
                self.link_lost(link, &format!("peer broke the ring protocol: {why}"));
                return n;
            }
            if given {
                rx.ring.publish_read();
                return n;
            }
        }
    }

    fn on_open(&self, link: &Arc<Link>, wire: u64) -> Option<String> {
        if wire & OPENED_BY_SENDER == 0 {
            return Some(format!("OPEN of channel {wire:#x} without the opener bit"));
        }
        let Some(local) = self.channels.accept(link, wire) else {
            return link
                .chans
                .is_open()
                .then(|| format!("duplicate OPEN of channel {wire:#x}"));
        };
        if let Some(_e) = self.gate.enter() {
            self.host.channel_opened(local);
        }
        None
    }

    fn on_close(&self, link: &Link, wire: u64) {
        link.rx_shared.unmark_polled(wire);
        if let Some(local) = self.channels.peer_closed(link, wire) {
            if let Some(_e) = self.gate.enter() {
                self.host
                    .channel_closed(local, CloseCode::CLOSED_BY_PEER, "closed by peer");
            }
        }
    }

    /// Forgets a link that ended and reports each of its channels lost.
    fn link_lost(&self, link: &Arc<Link>, reason: &str) {
        link.kill();
        let chans = link.chans.take();
        {
            let mut by_peer = self.by_peer.lock();
            if by_peer
                .get(&link.peer_id)
                .is_some_and(|l| Arc::ptr_eq(l, link))
            {
                by_peer.remove(&link.peer_id);
            }
            let mut links = self.links.write();
            if links.iter().any(|l| Arc::ptr_eq(l, link)) {
                let v: Vec<Arc<Link>> = links
                    .iter()
                    .filter(|l| !Arc::ptr_eq(l, link))
                    .cloned()
                    .collect();
                *links = v.into();
            }
            if let Some(other) = links
                .iter()
                .find(|l| l.peer_id == link.peer_id && l.is_alive())
            {
                by_peer.entry(link.peer_id).or_insert_with(|| other.clone());
            }
        }
        let Some(locals) = chans else { return };
        self.channels.forget_all(&locals);
        tracing::debug!(
            peer = format_args!("{:016x}", link.peer_id),
            channels = locals.len(),
            "shm connection ended: {reason}"
        );
        for l in locals {
            if let Some(_e) = self.gate.enter() {
                self.host.channel_closed(l, CloseCode::LOST, reason);
            }
        }
    }

    fn route(&self, channel: u64) -> Result<Route<Link>, TransportError> {
        self.channels.route("shm", channel)
    }

    /// A data message on a route (the size checked against `max_message`); `polled`
    /// as in [`Link::send`]: only for the fast path's data, whose receiver polls or
    /// else withdraws its record before it sleeps (a message sent otherwise, the IPL's
    /// connection protocol, always wakes whoever must deliver it).
    fn send_on(
        &self,
        route: &Route<Link>,
        slices: &[&[u8]],
        polled: bool,
    ) -> Result<(), TransportError> {
        let total: usize = slices.iter().map(|s| s.len()).sum();
        let max = self.cfg.max_message;
        if total > max {
            return Err(TransportError::InvalidArgument(format!(
                "message of {total} bytes exceeds max_message ({max})"
            )));
        }
        route
            .link
            .send(Kind::Data, route.wire, slices, total, self.pacing(), polled)
    }

    /// What `take` does once the wanted channel's link is known: that link first (the
    /// message, if there, goes to `sink`), then every link with something pending.
    fn take_on(&self, link: &Arc<Link>, wire_in: u64, sink: &mut ChannelSink<'_>) -> usize {
        // This thread polls the channel: its data needs no wake-up until `progress_end`
        // or `wait` withdraws the record.
        link.rx_shared.mark_polled(wire_in);
        let mut delivered = 0;
        if link.rx_shared.has_pending() {
            delivered += self.consume(link, Some((wire_in, &mut *sink)));
            if sink.given() {
                return delivered;
            }
        }
        delivered + self.progress_pending()
    }

    /// The threads of this endpoint stop polling (`progress_end`): every record of a
    /// polled channel is withdrawn, then what arrived without a wake-up is delivered
    /// through the callbacks (the withdrawal and the look are SeqCst, as the sender's
    /// publication and its look at the records: either it wakes us or we see its slot).
    fn stop_polling(&self) {
        let links = Arc::clone(&*self.links.read());
        let mut any = false;
        for l in links.iter() {
            any |= l.rx_shared.unmark_all_polled();
        }
        if any && links.iter().any(|l| l.rx_shared.has_pending()) {
            let (_, busy) = self.progress_all(&links);
            if busy {
                // Another thread consumes a ring and may stop at its own message: the
                // endpoint thread delivers the rest.
                sys::eventfd_signal(&self.ctl);
            }
        }
    }

    /// Delivers from every link with something pending (`progress`).
    fn progress_pending(&self) -> usize {
        // One look at each ring under the read lock (a few loads when nothing arrived).
        if !self.links.read().iter().any(|l| l.rx_shared.has_pending()) {
            return 0;
        }
        // The rings with something pending are consumed from a snapshot of the list,
        // outside the lock (a host callback may lead to `link_lost`, which takes the
        // write lock).
        let links = Arc::clone(&*self.links.read());
        self.progress_all(&links).0
    }

    /// Delivers from every link with pending slots; returns (delivered, some link was
    /// busy with another consumer).
    fn progress_all(&self, links: &[Arc<Link>]) -> (usize, bool) {
        let mut n = 0;
        let mut busy = false;
        for l in links {
            if l.rx_shared.has_pending() {
                n += self.consume(l, None);
                busy |= l.rx_shared.has_pending() && l.is_alive();
            }
        }
        (n, busy)
    }

    /// The endpoint thread: accepts connections, delivers when nobody else does, and
    /// notices dead peers. See the crate documentation for the wait protocol.
    fn run(self: Arc<Self>, listener: UnixListener) {
        sys::set_timer_slack(1_000);
        let mut spins = 0u32;
        while !self.stopping.load(Ordering::SeqCst) {
            let links = self.links.read().clone();
            let (n, busy) = self.progress_all(&links);
            if n > 0 {
                continue;
            }
            if busy {
                thread::yield_now();
                continue;
            }
            let timeout = match self.cfg.wait {
                WaitMode::Spin => {
                    spins = spins.wrapping_add(1);
                    if !spins.is_multiple_of(1024) {
                        std::hint::spin_loop();
                        continue;
                    }
                    Some(Duration::ZERO)
                }
                WaitMode::SpinBlock | WaitMode::Block => None,
            };
            let announce = timeout.is_none();
            // Before the announcement: a parked host thread that drains a byte this
            // thread was to be woken by sees it (SeqCst, as the flags).
            self.endpoint_asleep.store(true, Ordering::SeqCst);
            if announce {
                for l in links.iter() {
                    l.rx_shared.set_sleeping(true);
                }
                if links.iter().any(|l| l.rx_shared.has_pending()) {
                    for l in links.iter() {
                        l.rx_shared.set_sleeping(false);
                    }
                    self.endpoint_asleep.store(false, Ordering::SeqCst);
                    continue;
                }
            }
            let mut fds = poll_set(&[self.ctl.as_fd(), listener.as_fd()], &links);
            let ready = sys::poll(&mut fds, Some(timeout.unwrap_or(self.cfg.idle_check)));
            self.endpoint_asleep.store(false, Ordering::SeqCst);
            if announce {
                for l in links.iter() {
                    l.rx_shared.set_sleeping(false);
                }
            }
            match ready {
                Ok(0) => continue,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("shm: poll failed: {e}");
                    thread::sleep(Duration::from_millis(10));
                    continue;
                }
            }
            if !fds[0].revents().is_empty() {
                sys::eventfd_drain(&self.ctl);
            }
            if !fds[1].revents().is_empty() {
                self.accept_all(&listener);
            }
            for (l, p) in links.iter().zip(&fds[2..]) {
                if p.revents().is_empty() {
                    continue;
                }
                if l.drain_socket() {
                    l.notify_credits();
                } else {
                    // The peer is gone (or we killed the link): deliver what it
                    // published before, then report its channels lost.
                    let start = Instant::now();
                    while l.rx_shared.has_pending()
                        && start.elapsed() < Duration::from_secs(1)
                        && !self.stopping.load(Ordering::SeqCst)
                    {
                        if self.consume(l, None) == 0 {
                            thread::yield_now();
                        }
                    }
                    self.link_lost(l, "the peer process closed the connection or died");
                }
            }
        }
        tracing::debug!("shm: endpoint thread ended");
    }
}

/// The largest ring an accepting endpoint maps for a peer: its own ring size or the
/// default, whichever is larger (peers of one pool normally share a configuration).
fn handshake_max_cap(cfg: &Config) -> usize {
    cfg.ring_size.max(crate::config::DEFAULT_RING_SIZE)
}

/// What a sleeping thread polls for input: `own` descriptors first, then the
/// connection socket of each link, in the order of `links`. (Built at each sleep: the
/// sleep is a system call anyway.)
fn poll_set<'a>(own: &[BorrowedFd<'a>], links: &'a [Arc<Link>]) -> Vec<PollFd<'a>> {
    let socks = links.iter().map(|l| l.sock.as_fd());
    own.iter()
        .copied()
        .chain(socks)
        .map(|fd| PollFd::from_borrowed_fd(fd, PollFlags::IN))
        .collect()
}

impl ShmTransport {
    /// Test hook: whether `ptr` lies inside a segment mapped by this endpoint.
    #[doc(hidden)]
    pub fn maps(&self, ptr: *const u8) -> bool {
        self.inner
            .links
            .read()
            .iter()
            .any(|l| l.region.contains(ptr))
    }

    /// Receiver-driven progress: delivers what arrived on every link; with `want`
    /// (a channel and its sink), that channel's link is consumed first, up to the
    /// channel's next message, which goes to the sink.
    fn take_from(&self, want: Option<(u64, &mut ChannelSink<'_>)>) -> usize {
        let inner = &*self.inner;
        // One look at each ring under the read lock before the channel's route is looked
        // up: a receiver without the fast path (behind wan-emu, say) polls here in a loop,
        // and most of its polls find nothing.
        if !inner.links.read().iter().any(|l| l.rx_shared.has_pending()) {
            return 0;
        }
        match want.map(|(channel, sink)| (inner.route(channel), sink)) {
            Some((Ok(route), sink)) => inner.take_on(&route.link, route.wire_in(), sink),
            _ => inner.progress_pending(),
        }
    }
}

/// One channel's fast path: its route, found once (see [`CachedRoute`]).
struct ShmFast {
    inner: Arc<Inner>,
    route: CachedRoute<Link>,
}

impl FastChannel for ShmFast {
    fn send(&self, slices: &[&[u8]]) -> Result<(), TransportError> {
        let route = self.route.confirm(&self.inner.channels, "shm")?;
        self.inner.send_on(route, slices, true)
    }

    fn take(&self, sink: &mut ChannelSink<'_>) -> usize {
        let route = self.route.route();
        self.inner.take_on(&route.link, route.wire_in(), sink)
    }
}

impl TransportPlugin for ShmTransport {
    const NAME: &'static str = "shm";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    const CAPABILITIES: TransportCapabilities = TransportCapabilities::RELIABLE
        .union(TransportCapabilities::FIFO)
        .union(TransportCapabilities::ZERO_COPY)
        .union(TransportCapabilities::SAME_HOST)
        .union(TransportCapabilities::POLLED);
    const PRIORITY: i32 = 80;

    fn availability() -> Result<(), String> {
        HostId::local().map(|_| ())
    }

    fn create(config: &str, host: HostSink) -> Result<Self, TransportError> {
        let cfg = Config::parse(config)?;
        let here = HostId::local().map_err(TransportError::Unavailable)?;
        let id = random_id()?;
        let sa = abstract_addr(id)
            .map_err(|e| TransportError::Unavailable(format!("shm socket name: {e}")))?;
        let listener = UnixListener::bind_addr(&sa)
            .map_err(|e| TransportError::Unavailable(format!("shm: cannot listen: {e}")))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| TransportError::Unavailable(format!("shm: socket option: {e}")))?;
        let ctl = sys::eventfd()
            .map_err(|e| TransportError::Unavailable(format!("shm: eventfd: {e}")))?;
        let address = Address {
            host: here.clone(),
            id,
        }
        .to_bytes();
        let inner = Arc::new(Inner {
            id,
            context: cfg.auth_context(),
            admission: Admission::new("shm", cfg.max_handshakes),
            cfg,
            here,
            address,
            host,
            gate: Gate::new(),
            stopping: AtomicBool::new(false),
            next_serial: AtomicU64::new(1),
            links: RwLock::new(Arc::from(Vec::new())),
            by_peer: Mutex::new(HashMap::new()),
            channels: ChannelTable::default(),
            ctl,
            handshakes: Mutex::new(Handshakes::default()),
            parking: Parking::default(),
            endpoint_asleep: AtomicBool::new(false),
        });
        let me = inner.clone();
        let thread = thread::Builder::new()
            .name("ipl-shm".into())
            .spawn(move || me.run(listener))
            .map_err(|e| TransportError::Unavailable(format!("cannot start shm thread: {e}")))?;
        tracing::debug!(
            address = %String::from_utf8_lossy(&inner.address),
            "shm endpoint created"
        );
        Ok(ShmTransport {
            inner,
            thread: Mutex::new(Some(thread)),
        })
    }

    fn local_address(&self) -> Vec<u8> {
        self.inner.address.clone()
    }

    fn connect(&self, address: &[u8], timeout: Duration) -> Result<u64, TransportError> {
        let addr = Address::parse(address)?;
        addr.check_reachable(&self.inner.here)?;
        let inner = &self.inner;
        inner.channels.connect(
            "shm",
            &inner.stopping,
            || match inner.existing(addr.id) {
                Some(l) => Ok(l),
                None => inner.dial(&addr, timeout),
            },
            |_| TransportError::Closed("shm connection was lost".into()),
            |link, wire| {
                link.send(
                    Kind::Open,
                    wire,
                    &[],
                    0,
                    Pacing {
                        timeout: timeout.max(Duration::from_millis(1)),
                        ..inner.pacing()
                    },
                    false,
                )
            },
        )
    }

    fn send(&self, channel: u64, slices: &[&[u8]]) -> Result<(), TransportError> {
        let route = self.inner.route(channel)?;
        self.inner.send_on(&route, slices, false)
    }

    fn close_channel(&self, channel: u64) {
        // Unless the link's loss report owns the channel, tell the peer.
        if let Some(route) = self.inner.channels.close(channel) {
            route.link.rx_shared.unmark_polled(route.wire_in());
            if let Err(e) =
                route
                    .link
                    .send(Kind::Close, route.wire, &[], 0, self.inner.pacing(), false)
            {
                tracing::debug!("shm: CLOSE not sent: {e}");
            }
        }
    }

    fn progress(&self) -> usize {
        self.take_from(None)
    }

    /// A receiver stops polling: the channels it polled are announced as usual again,
    /// and what was sent to them without a wake-up meanwhile is delivered now.
    fn progress_end(&self) {
        self.inner.stop_polling();
    }

    fn take(&self, channel: u64, sink: &mut ChannelSink<'_>) -> usize {
        self.take_from(Some((channel, sink)))
    }

    fn fast_path(&self, channel: u64) -> Option<Box<dyn FastChannel>> {
        let route = CachedRoute::new(&self.inner.channels, "shm", channel)?;
        Some(Box::new(ShmFast {
            inner: Arc::clone(&self.inner),
            route,
        }))
    }

    /// Sleeps as the endpoint's thread does (announce on every ring, look again, `poll`
    /// on the sockets), so that a sender's wake-up byte wakes this thread directly, and
    /// on an eventfd of its own for `interrupt`. The endpoint's thread wakes too and
    /// finds the slot taken, or takes it first (the host then gets it through the
    /// callback).
    fn wait(&self, timeout: Duration) -> bool {
        let inner = &*self.inner;
        if inner.stopping.load(Ordering::SeqCst) {
            // Shutting down: the host must not keep coming back here.
            return false;
        }
        let parked = match inner.parking.park() {
            Ok(Some(p)) => p,
            Ok(None) => return true,
            Err(e) => {
                tracing::debug!("shm: cannot park a thread: {e}");
                return false;
            }
        };
        let links = Arc::clone(&*inner.links.read());
        // Withdrawn first (the sender then checks the flag set below); what came
        // without a wake-up before is seen by the look that follows.
        for l in links.iter() {
            l.rx_shared.unmark_all_polled();
        }
        for l in links.iter() {
            l.rx_shared.set_sleeping(true);
        }
        if links.iter().any(|l| l.rx_shared.has_pending()) {
            return true;
        }
        let mut fds = poll_set(&[parked.fd()], &links);
        if let Err(e) = sys::poll(&mut fds, Some(timeout)) {
            tracing::debug!("shm: poll of a parked thread failed: {e}");
        }
        // Wake-up bytes: ours to drain as much as the endpoint thread's (a byte may also
        // grant credits to a sender of this process). A closed socket is left to the
        // endpoint thread, which reports the link lost.
        let mut drained = false;
        for (l, p) in links.iter().zip(&fds[1..]) {
            if p.revents().contains(PollFlags::IN) && l.drain_socket() {
                l.notify_credits();
                drained = true;
            }
        }
        // A sender wakes once per announcement (it takes the flag): a byte drained here
        // may have been the endpoint thread's, which then sleeps on without an
        // announcement and misses the next message. If it is in `poll`, wake it: it
        // delivers what is pending and announces again.
        if drained && inner.endpoint_asleep.load(Ordering::SeqCst) {
            sys::eventfd_signal(&inner.ctl);
        }
        true
    }

    fn interrupt(&self) {
        self.inner.parking.interrupt();
    }

    fn shutdown(&self) {
        let inner = &self.inner;
        if inner.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        // From here on no host callback starts, and none is running when close returns.
        inner.gate.close();
        sys::eventfd_signal(&inner.ctl);
        let me = thread::current().id();
        if let Some(t) = self.thread.lock().take() {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
        let threads = {
            let mut hs = inner.handshakes.lock();
            hs.stopped = true;
            for s in hs.pending.values() {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
            hs.pending.clear();
            std::mem::take(&mut hs.threads)
        };
        for t in threads {
            if t.thread().id() != me {
                let _ = t.join();
            }
        }
        let links: Vec<Arc<Link>> = {
            let _by_peer = inner.by_peer.lock();
            let mut l = inner.links.write();
            let v = l.iter().cloned().collect();
            *l = Arc::from(Vec::new());
            v
        };
        inner.by_peer.lock().clear();
        inner.channels.clear();
        // Peers see the socket close and report their channels lost. Mappings stay
        // alive while the host holds buffers that point into them.
        for l in links {
            l.kill();
        }
        tracing::debug!(
            endpoint = format_args!("{:016x}", inner.id),
            "shm endpoint shut down"
        );
    }
}

impl Drop for ShmTransport {
    fn drop(&mut self) {
        self.shutdown();
    }
}
