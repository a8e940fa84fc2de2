//! The channel tables of an endpoint that carries many channels over one link per peer
//! endpoint (channel pairing), as the tcp and shm transports do: sans-IO, generic over
//! the link type.
//!
//! Two tables say where a channel goes and where it came from:
//! - the endpoint's [`ChannelTable`]: local channel id → [`Route`] (the link and the
//!   channel's id in what we send), read on every send;
//! - each link's [`LinkChannels`]: wire id as received from the peer → local channel id,
//!   `None` once the link is lost. Whoever takes an entry out of it owns the channel's
//!   last callback (the link's loss report or a local close, never both).
//!
//! A wire id carries [`OPENED_BY_SENDER`] when the sender of the message is the side that
//! opened the channel, so the two directions of a link never collide: the opener
//! registers its channel `ch` under wire id `ch` and sends with `ch | OPENED_BY_SENDER`;
//! the acceptor registers it under `ch | OPENED_BY_SENDER` and sends with `ch`.
//!
//! No function here holds two of these locks at once, nor calls out while it holds one.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use ipl_transport_abi::TransportError;
use parking_lot::{Mutex, RwLock};

/// Bit 63 of a wire channel id: set when the sender of the message is the side that
/// opened the channel, so the two directions never collide.
pub const OPENED_BY_SENDER: u64 = 1 << 63;

/// The channels of one link: wire id as received from the peer → local channel id.
/// Closed (`None` inside) once the link is lost.
pub struct LinkChannels<S = RandomState> {
    map: Mutex<Option<HashMap<u64, u64, S>>>,
    /// Bumped (under the lock) whenever an entry leaves the table: a lookup cached at
    /// an older generation may be stale (see [`CachedLookup`]).
    generation: AtomicU64,
}

impl<S> std::fmt::Debug for LinkChannels<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkChannels")
            .field("map", &*self.map.lock())
            .field("generation", &self.generation)
            .finish()
    }
}

impl<S: BuildHasher + Default> Default for LinkChannels<S> {
    fn default() -> Self {
        LinkChannels {
            map: Mutex::new(Some(HashMap::default())),
            generation: AtomicU64::new(0),
        }
    }
}

/// The last lookup of a link's receiving side (wire id → local channel), kept by the
/// one thread at a time that consumes the link: a message on the same channel as the
/// one before finds its channel without the table's lock. It is valid while the
/// table's generation is unchanged, that is while no entry has left the table.
#[derive(Debug, Default, Clone, Copy)]
pub struct CachedLookup {
    /// (generation, wire id, local id) of the last successful lookup.
    last: Option<(u64, u64, u64)>,
}

impl<S: BuildHasher> LinkChannels<S> {
    /// Bumped whenever an entry leaves the table (a channel closed, or the link was
    /// lost): a route found at an older generation may be gone.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether the link is still open (not yet [`take`](Self::take)n).
    pub fn is_open(&self) -> bool {
        self.map.lock().is_some()
    }

    /// The local channel of wire id `wire`, if the link is open and has it.
    pub fn get(&self, wire: u64) -> Option<u64> {
        self.map.lock().as_ref()?.get(&wire).copied()
    }

    /// Enters `wire` → `local`. Returns false if the link is lost or already had `wire`
    /// (which it keeps as it was).
    pub fn insert_fresh(&self, wire: u64, local: u64) -> bool {
        match self.map.lock().as_mut() {
            Some(m) => match m.entry(wire) {
                std::collections::hash_map::Entry::Occupied(_) => false,
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(local);
                    true
                }
            },
            None => false,
        }
    }

    /// The local channel of wire id `wire`, as [`get`](Self::get), through `cache`:
    /// without the lock when `wire` is the id of the last lookup and no entry has left
    /// the table since.
    pub fn get_cached(&self, wire: u64, cache: &mut CachedLookup) -> Option<u64> {
        // Read before the lookup: an entry that leaves after it bumps the generation
        // past the one cached, so the next call looks again.
        let generation = self.generation.load(Ordering::Acquire);
        if let Some((g, w, local)) = cache.last {
            if g == generation && w == wire {
                return Some(local);
            }
        }
        let local = self.get(wire)?;
        cache.last = Some((generation, wire, local));
        Some(local)
    }

    /// Takes `wire` out; `Some(local)` makes the caller the owner of the channel's last
    /// callback. `None` if the link is lost or does not have `wire`.
    pub fn remove(&self, wire: u64) -> Option<u64> {
        let mut map = self.map.lock();
        let local = map.as_mut()?.remove(&wire)?;
        self.generation.fetch_add(1, Ordering::Release);
        Some(local)
    }

    /// Closes the link's table and returns its local channel ids in ascending order
    /// (`None` if it was closed already): the caller reports each of them lost.
    pub fn take(&self) -> Option<Vec<u64>> {
        let map = {
            let mut m = self.map.lock();
            let map = m.take()?;
            self.generation.fetch_add(1, Ordering::Release);
            map
        };
        let mut locals: Vec<u64> = map.into_values().collect();
        locals.sort_unstable();
        Some(locals)
    }
}

/// A link that carries channels: gives access to its [`LinkChannels`].
pub trait ChannelLink {
    /// The hasher of the link's channel map.
    type Hasher: BuildHasher;
    /// The link's channels.
    fn channels(&self) -> &LinkChannels<Self::Hasher>;
}

/// Where a local channel goes.
pub struct Route<L> {
    /// The link that carries the channel.
    pub link: Arc<L>,
    /// The channel's id in the messages we send.
    pub wire: u64,
}

impl<L> Route<L> {
    /// The channel's id in the messages we receive (the other direction's wire id).
    pub fn wire_in(&self) -> u64 {
        self.wire ^ OPENED_BY_SENDER
    }
}

impl<L> Clone for Route<L> {
    fn clone(&self) -> Self {
        Route {
            link: self.link.clone(),
            wire: self.wire,
        }
    }
}

/// A channel's route found once, for a transport's fast path: valid while its link's
/// channel generation is the one it was confirmed at. After any channel of the link
/// left the tables, [`confirm`](Self::confirm) looks the channel up again (and fails as
/// a lookup does once this one is gone), so another channel closing does not stop it.
pub struct CachedRoute<L> {
    channel: u64,
    route: Route<L>,
    /// The link's channel generation at which the route was last confirmed.
    generation: AtomicU64,
}

impl<L: ChannelLink> CachedRoute<L> {
    /// The route of `channel` in `table`, if it is open.
    pub fn new<S: BuildHasher>(
        table: &ChannelTable<L, S>,
        transport: &str,
        channel: u64,
    ) -> Option<Self> {
        let route = table.route(transport, channel).ok()?;
        let generation = route.link.channels().generation();
        // Still open after the generation was read: a close from now on bumps it.
        table.route(transport, channel).ok()?;
        Some(CachedRoute {
            channel,
            route,
            generation: AtomicU64::new(generation),
        })
    }

    /// The local channel.
    pub fn channel(&self) -> u64 {
        self.channel
    }

    /// The route, unconfirmed (for receiving: a closed channel's messages are dropped
    /// by the link's table anyway).
    pub fn route(&self) -> &Route<L> {
        &self.route
    }

    /// The route, if the channel is still open (for sending): one atomic load while no
    /// channel of the link closed, a lookup after one did.
    pub fn confirm<S: BuildHasher>(
        &self,
        table: &ChannelTable<L, S>,
        transport: &str,
    ) -> Result<&Route<L>, TransportError> {
        let now = self.route.link.channels().generation();
        if now != self.generation.load(Ordering::Relaxed) {
            // Read before the lookup: a close after it bumps the generation again.
            table.route(transport, self.channel)?;
            self.generation.store(now, Ordering::Relaxed);
        }
        Ok(&self.route)
    }
}

/// An endpoint's channels: local channel id → [`Route`], and the counter that hands out
/// local ids (from 1).
pub struct ChannelTable<L, S = RandomState> {
    next: AtomicU64,
    routes: RwLock<HashMap<u64, Route<L>, S>>,
}

impl<L, S: BuildHasher + Default> Default for ChannelTable<L, S> {
    fn default() -> Self {
        ChannelTable {
            next: AtomicU64::new(1),
            routes: RwLock::new(HashMap::default()),
        }
    }
}

impl<L: ChannelLink, S: BuildHasher> ChannelTable<L, S> {
    fn insert(&self, local: u64, link: &Arc<L>, wire: u64) {
        self.routes.write().insert(
            local,
            Route {
                link: link.clone(),
                wire,
            },
        );
    }

    fn forget(&self, local: u64) -> Option<Route<L>> {
        self.routes.write().remove(&local)
    }

    /// Opens a channel towards a peer, `connect`'s loop: up to two attempts, because a
    /// reused link may turn out dead only when the OPEN is sent.
    ///
    /// Each attempt fails with `Closed("<transport> endpoint is shutting down")` once
    /// `stopping` is set, else gets a link from `link` (which reuses a live link or
    /// dials; its error ends the loop), enters a new channel `ch` with wire id
    /// `ch | OPENED_BY_SENDER` in this table and as `ch` in the link, and sends the OPEN
    /// with `send_open(link, ch | OPENED_BY_SENDER)`. A link lost before the channel is
    /// entered gives `lost(link)` and another attempt; so does a failed OPEN, unless the
    /// link's loss report already owns the channel (then the channel is returned: the
    /// host learns it was lost). `transport` names the transport in the error of a loop
    /// that ends without one.
    pub fn connect(
        &self,
        transport: &str,
        stopping: &AtomicBool,
        mut link: impl FnMut() -> Result<Arc<L>, TransportError>,
        lost: impl Fn(&L) -> TransportError,
        mut send_open: impl FnMut(&Arc<L>, u64) -> Result<(), TransportError>,
    ) -> Result<u64, TransportError> {
        let mut last = None;
        for _ in 0..2 {
            if stopping.load(Ordering::SeqCst) {
                return Err(TransportError::Closed(format!(
                    "{transport} endpoint is shutting down"
                )));
            }
            let link = link()?;
            let ch = self.next.fetch_add(1, Ordering::Relaxed);
            self.insert(ch, &link, ch | OPENED_BY_SENDER);
            if !link.channels().insert_fresh(ch, ch) {
                self.forget(ch);
                last = Some(lost(&link));
                continue;
            }
            match send_open(&link, ch | OPENED_BY_SENDER) {
                Ok(()) => return Ok(ch),
                Err(e) => {
                    if link.channels().remove(ch).is_none() {
                        // The link was lost meanwhile; its loss report covers the channel.
                        return Ok(ch);
                    }
                    self.forget(ch);
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| TransportError::Closed(format!("{transport} connect failed"))))
    }

    /// Enters a channel the peer opened on `link` with wire id `wire` (which carries
    /// [`OPENED_BY_SENDER`]; the caller checked). Returns its new local id, or `None` if
    /// the link is lost or already has `wire` (then nothing is entered).
    pub fn accept(&self, link: &Arc<L>, wire: u64) -> Option<u64> {
        let local = self.next.fetch_add(1, Ordering::Relaxed);
        self.insert(local, link, wire & !OPENED_BY_SENDER);
        if link.channels().insert_fresh(wire, local) {
            Some(local)
        } else {
            self.forget(local);
            None
        }
    }

    /// The peer closed channel `wire` of `link`: takes it out of both tables and returns
    /// its local id, unless it was gone already (closed locally, or the link lost).
    pub fn peer_closed(&self, link: &L, wire: u64) -> Option<u64> {
        let local = link.channels().remove(wire)?;
        self.forget(local);
        Some(local)
    }

    /// Closes local channel `channel`: takes it out of both tables. Returns its route if
    /// the caller now owns the channel and should tell the peer (send a CLOSE); `None`
    /// if the channel is unknown or its link's loss report owns it.
    pub fn close(&self, channel: u64) -> Option<Route<L>> {
        let route = self.forget(channel)?;
        route
            .link
            .channels()
            .remove(route.wire ^ OPENED_BY_SENDER)
            .is_some()
            .then_some(route)
    }

    /// Takes the channels of a lost link (`locals`, from [`LinkChannels::take`]) out of
    /// this table.
    pub fn forget_all(&self, locals: &[u64]) {
        let mut table = self.routes.write();
        for l in locals {
            table.remove(l);
        }
    }

    /// The route of local channel `channel`, or a `Closed` error that names `transport`.
    pub fn route(&self, transport: &str, channel: u64) -> Result<Route<L>, TransportError> {
        self.routes
            .read()
            .get(&channel)
            .cloned()
            .ok_or_else(|| TransportError::Closed(format!("no open {transport} channel {channel}")))
    }

    /// Forgets every channel (at shutdown; links keep theirs until they are lost).
    pub fn clear(&self) {
        self.routes.write().clear();
    }
}

/// A link to one peer endpoint.
pub trait PeerLink {
    /// The peer endpoint's id.
    fn peer_id(&self) -> u64;
}

/// An endpoint's links: every open one by serial number, and the one `connect` uses for
/// each peer endpoint (there may be two to one peer when both sides dialed at once).
pub struct Peers<L> {
    /// Every open link by serial number.
    pub conns: HashMap<u64, Arc<L>>,
    /// The link `connect` uses for a peer endpoint id.
    pub by_peer: HashMap<u64, Arc<L>>,
}

impl<L> Default for Peers<L> {
    fn default() -> Self {
        Peers {
            conns: HashMap::new(),
            by_peer: HashMap::new(),
        }
    }
}

impl<L: PeerLink> Peers<L> {
    /// Forgets a link that ended (entered in `conns` under `serial`); if `connect` used
    /// it, another open link to the same peer takes over.
    pub fn remove(&mut self, serial: u64, link: &Arc<L>) {
        let peer_id = link.peer_id();
        self.conns.remove(&serial);
        if self
            .by_peer
            .get(&peer_id)
            .is_some_and(|c| Arc::ptr_eq(c, link))
        {
            self.by_peer.remove(&peer_id);
            // Another connection to the same peer (both sides dialed at once) takes over.
            let other = self
                .conns
                .values()
                .find(|c| c.peer_id() == peer_id)
                .cloned();
            if let Some(other) = other {
                self.by_peer.insert(peer_id, other);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Link {
        chans: LinkChannels,
    }

    impl ChannelLink for Link {
        type Hasher = RandomState;
        fn channels(&self) -> &LinkChannels {
            &self.chans
        }
    }

    fn closed(what: &str) -> TransportError {
        TransportError::Closed(what.into())
    }

    /// `connect` on `t` with links from `link`, a link lost before registration giving
    /// `Closed("lost")`, and OPENs sent by `send`.
    fn connect(
        t: &ChannelTable<Link>,
        stopping: bool,
        link: impl FnMut() -> Result<Arc<Link>, TransportError>,
        send: impl FnMut(&Arc<Link>, u64) -> Result<(), TransportError>,
    ) -> Result<u64, TransportError> {
        t.connect(
            "x",
            &AtomicBool::new(stopping),
            link,
            |_| closed("lost"),
            send,
        )
    }

    #[test]
    fn connect_enters_the_channel_in_both_tables() {
        let t: ChannelTable<Link> = ChannelTable::default();
        let link = Arc::new(Link::default());
        let mut sent = Vec::new();
        let ch = connect(
            &t,
            false,
            || Ok(link.clone()),
            |_, w| {
                sent.push(w);
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(ch, 1);
        assert_eq!(sent, [1 | OPENED_BY_SENDER]);
        let r = t.route("x", ch).unwrap();
        assert!(Arc::ptr_eq(&r.link, &link));
        assert_eq!(r.wire, 1 | OPENED_BY_SENDER);
        assert_eq!(link.chans.get(1), Some(1));
        // Our own messages on this link come back without the opener bit.
        assert_eq!(link.chans.get(1 | OPENED_BY_SENDER), None);
    }

    #[test]
    fn a_cached_route_outlives_other_channels_closing_but_not_its_own() {
        let t: ChannelTable<Link> = ChannelTable::default();
        let link = Arc::new(Link::default());
        let open = |t: &ChannelTable<Link>| connect(t, false, || Ok(link.clone()), |_, _| Ok(()));
        let (a, b) = (open(&t).unwrap(), open(&t).unwrap());
        assert!(CachedRoute::new(&t, "x", 99).is_none(), "no such channel");
        let fast = CachedRoute::new(&t, "x", a).unwrap();
        assert_eq!(fast.channel(), a);
        assert!(Arc::ptr_eq(&fast.route().link, &link));
        assert_eq!(fast.confirm(&t, "x").unwrap().wire, a | OPENED_BY_SENDER);
        // Another channel of the link closes: the generation moves, the route holds.
        let before = link.chans.generation();
        assert!(t.close(b).is_some());
        assert_ne!(link.chans.generation(), before);
        assert!(fast.confirm(&t, "x").is_ok());
        // Its own closes: confirming fails from then on, as a lookup does.
        assert!(t.close(a).is_some());
        let e = fast.confirm(&t, "x").err().unwrap();
        assert_eq!(e, closed(&format!("no open x channel {a}")));
        assert!(fast.confirm(&t, "x").is_err());
    }

    #[test]
    fn connect_retries_once_on_a_lost_link() {
        let t: ChannelTable<Link> = ChannelTable::default();
        let dead = Arc::new(Link::default());
        assert_eq!(dead.chans.take(), Some(vec![]));
        let live = Arc::new(Link::default());
        let mut links = vec![live.clone(), dead.clone()];
        let ch = connect(&t, false, || Ok(links.pop().unwrap()), |_, _| Ok(())).unwrap();
        assert_eq!(ch, 2, "the first id went to the dead link's attempt");
        assert!(Arc::ptr_eq(&t.route("x", ch).unwrap().link, &live));
        assert!(t.route("x", 1).is_err(), "the first attempt is rolled back");

        let mut dials = 0;
        let e = connect(
            &t,
            false,
            || {
                dials += 1;
                Ok(dead.clone())
            },
            |_, _| Ok(()),
        );
        assert_eq!(e, Err(closed("lost")));
        assert_eq!(dials, 2);
        assert!(t.route("x", 3).is_err() && t.route("x", 4).is_err());
    }

    #[test]
    fn connect_gives_up_after_two_failed_opens() {
        let t: ChannelTable<Link> = ChannelTable::default();
        let link = Arc::new(Link::default());
        let mut tries = 0;
        let e = connect(
            &t,
            false,
            || Ok(link.clone()),
            |_, w| {
                tries += 1;
                Err(closed(&format!("open {w:#x} failed")))
            },
        );
        assert_eq!(tries, 2);
        let last = format!("open {:#x} failed", 2 | OPENED_BY_SENDER);
        assert_eq!(e, Err(closed(&last)));
        assert_eq!(link.chans.take(), Some(vec![]), "both attempts withdrawn");
    }

    #[test]
    fn connect_stops_on_shutdown_and_on_a_link_error() {
        let t: ChannelTable<Link> = ChannelTable::default();
        let e = connect(&t, true, || panic!("dialed after shutdown"), |_, _| Ok(()));
        assert_eq!(e, Err(closed("x endpoint is shutting down")));
        let e = connect(&t, false, || Err(closed("refused")), |_, _| Ok(()));
        assert_eq!(e, Err(closed("refused")));
    }

    #[test]
    fn a_failed_open_on_a_link_lost_meanwhile_still_gives_the_channel() {
        let t: ChannelTable<Link> = ChannelTable::default();
        let link = Arc::new(Link::default());
        let ch = connect(
            &t,
            false,
            || Ok(link.clone()),
            |l, _| {
                // The link's loss report takes the channel while the OPEN fails.
                assert_eq!(l.chans.take(), Some(vec![1]));
                Err(closed("broken"))
            },
        );
        assert_eq!(ch, Ok(1));
    }

    #[test]
    fn accept_and_peer_close() {
        let t: ChannelTable<Link> = ChannelTable::default();
        let link = Arc::new(Link::default());
        let wire = 7 | OPENED_BY_SENDER;
        let local = t.accept(&link, wire).unwrap();
        assert_eq!(t.route("x", local).unwrap().wire, 7);
        assert_eq!(link.chans.get(wire), Some(local));
        assert_eq!(t.accept(&link, wire), None, "duplicate OPEN");
        assert_eq!(link.chans.get(wire), Some(local), "the first one stays");
        assert_eq!(t.peer_closed(&link, wire), Some(local));
        assert!(t.route("x", local).is_err());
        assert_eq!(t.peer_closed(&link, wire), None);

        link.chans.take();
        let before = t.next.load(Ordering::Relaxed);
        assert_eq!(t.accept(&link, wire), None, "lost link");
        assert!(t.route("x", before).is_err());
    }

    #[test]
    fn close_tells_whether_the_peer_must_be_told() {
        let t: ChannelTable<Link> = ChannelTable::default();
        let link = Arc::new(Link::default());
        let opened = connect(&t, false, || Ok(link.clone()), |_, _| Ok(())).unwrap();
        let accepted = t.accept(&link, 5 | OPENED_BY_SENDER).unwrap();
        let r = t.close(accepted).unwrap();
        assert_eq!(r.wire, 5);
        assert_eq!(link.chans.get(5 | OPENED_BY_SENDER), None);
        assert!(t.close(accepted).is_none(), "closed already");
        assert_eq!(link.chans.take(), Some(vec![opened]));
        assert!(t.close(opened).is_none(), "the loss report owns it");
        assert!(t.route("x", opened).is_err());
    }

    struct Peer(u64, u64);

    impl PeerLink for Peer {
        fn peer_id(&self) -> u64 {
            self.1
        }
    }

    #[test]
    fn another_link_to_the_same_peer_takes_over() {
        let mut p: Peers<Peer> = Peers::default();
        let (a, b, c) = (
            Arc::new(Peer(1, 7)),
            Arc::new(Peer(2, 7)),
            Arc::new(Peer(3, 8)),
        );
        for l in [&a, &b, &c] {
            p.conns.insert(l.0, l.clone());
        }
        p.by_peer.insert(7, a.clone());
        p.by_peer.insert(8, c.clone());
        p.remove(2, &b);
        assert!(Arc::ptr_eq(&p.by_peer[&7], &a), "b was not the one in use");
        p.conns.insert(2, b.clone());
        p.remove(1, &a);
        assert!(Arc::ptr_eq(&p.by_peer[&7], &b));
        assert_eq!(p.conns.len(), 2);
        p.remove(2, &b);
        assert!(!p.by_peer.contains_key(&7));
        assert!(Arc::ptr_eq(&p.by_peer[&8], &c));
        assert_eq!(p.conns.len(), 1);
    }

    #[test]
    fn a_cached_lookup_is_dropped_once_an_entry_leaves() {
        let t: ChannelTable<Link> = ChannelTable::default();
        let link = Arc::new(Link::default());
        let a = t.accept(&link, 4 | OPENED_BY_SENDER).unwrap();
        let b = t.accept(&link, 6 | OPENED_BY_SENDER).unwrap();
        let mut cache = CachedLookup::default();
        assert_eq!(
            link.chans.get_cached(4 | OPENED_BY_SENDER, &mut cache),
            Some(a)
        );
        assert_eq!(
            link.chans.get_cached(4 | OPENED_BY_SENDER, &mut cache),
            Some(a)
        );
        assert_eq!(
            link.chans.get_cached(6 | OPENED_BY_SENDER, &mut cache),
            Some(b)
        );
        assert_eq!(
            link.chans.get_cached(5, &mut cache),
            None,
            "unknown wire id"
        );
        // A closed channel is not found through the cache any more...
        assert_eq!(t.peer_closed(&link, 6 | OPENED_BY_SENDER), Some(b));
        assert_eq!(
            link.chans.get_cached(6 | OPENED_BY_SENDER, &mut cache),
            None
        );
        assert_eq!(
            link.chans.get_cached(4 | OPENED_BY_SENDER, &mut cache),
            Some(a)
        );
        // ...nor are the channels of a lost link.
        link.chans.take();
        assert_eq!(
            link.chans.get_cached(4 | OPENED_BY_SENDER, &mut cache),
            None
        );
    }

    #[test]
    fn a_lost_link_gives_its_channels_in_order_once() {
        let t: ChannelTable<Link> = ChannelTable::default();
        let link = Arc::new(Link::default());
        let a = t.accept(&link, 9 | OPENED_BY_SENDER).unwrap();
        let b = t.accept(&link, 3 | OPENED_BY_SENDER).unwrap();
        let locals = link.chans.take().unwrap();
        assert_eq!(locals, [a.min(b), a.max(b)]);
        assert!(!link.chans.is_open());
        assert_eq!(link.chans.take(), None);
        t.forget_all(&locals);
        assert_eq!(
            t.route("tcp", a).err(),
            Some(closed(&format!("no open tcp channel {a}")))
        );
    }
}
