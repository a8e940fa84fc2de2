//! Helpers shared by the integration tests: port types, unique pools, Ibis instances.
#![allow(dead_code)]

use std::time::Duration;

use ipl::{
    EmbeddedRegistry, Ibis, IbisCapabilities, PortCapabilities as P, PortType, ReceivePort,
    SendPort,
};

/// A generous bound for anything that should happen "soon" (loaded machines).
pub const LONG: Duration = Duration::from_secs(10);

#[path = "../../../tests/common/pool.rs"]
mod unique;
pub use unique::pool;

/// Reliable FIFO data-level type with the given connection pattern and receive modes.
pub fn ty(extra: P) -> PortType {
    PortType::new(extra | P::COMMUNICATION_RELIABLE | P::COMMUNICATION_FIFO).expect("valid type")
}

/// One-to-one, explicit + timeout + poll receipt, data level.
pub fn simple() -> PortType {
    ty(P::CONNECTION_ONE_TO_ONE
        | P::RECEIVE_EXPLICIT
        | P::RECEIVE_TIMEOUT
        | P::RECEIVE_POLL
        | P::SERIALIZATION_DATA)
}

/// Builds a member of `pool` on `reg` declaring `types`.
pub fn ibis(reg: &EmbeddedRegistry, pool: &str, types: &[PortType]) -> Ibis {
    ibis_caps(reg, pool, types, IbisCapabilities::MEMBERSHIP)
}

/// Like [`ibis`] with explicit Ibis capabilities.
pub fn ibis_caps(
    reg: &EmbeddedRegistry,
    pool: &str,
    types: &[PortType],
    caps: IbisCapabilities,
) -> Ibis {
    let mut b = Ibis::builder().pool(pool).registry(reg).capabilities(caps);
    for t in types {
        b = b.port_type(*t);
    }
    b.build().expect("ibis builds")
}

/// Waits (bounded) until `cond` holds; panics with `what` otherwise.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + LONG;
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Two members of a new pool on a registry of their own, the first with a send port
/// `"out"` connected to the second's receive port `"in"` (connections enabled), all of
/// type `t`: `(a, b, receive port, send port)`.
pub fn connected_pair(prefix: &str, t: PortType) -> (Ibis, Ibis, ReceivePort, SendPort) {
    connected_pair_named(prefix, t, "in", "out")
}

/// [`connected_pair`] with the ports' names given.
pub fn connected_pair_named(
    prefix: &str,
    t: PortType,
    receive: &str,
    send: &str,
) -> (Ibis, Ibis, ReceivePort, SendPort) {
    let reg = EmbeddedRegistry::new();
    let p = pool(prefix);
    let a = ibis(&reg, &p, &[t]);
    let b = ibis(&reg, &p, &[t]);
    let (rp, sp) = connect(&a, &b, t, receive, send);
    (a, b, rp, sp)
}

/// One member of a new pool whose send port `"out"` is connected to its own receive
/// port `"in"`: `(member, receive port, send port)`.
pub fn connected_loop(prefix: &str, t: PortType) -> (Ibis, ReceivePort, SendPort) {
    let reg = EmbeddedRegistry::new();
    let a = ibis(&reg, &pool(prefix), &[t]);
    let (rp, sp) = connect(&a, &a, t, "in", "out");
    (a, rp, sp)
}

/// A receive port of `to` (connections enabled) and a send port of `from` connected
/// to it.
pub fn connect(
    from: &Ibis,
    to: &Ibis,
    t: PortType,
    receive: &str,
    send: &str,
) -> (ReceivePort, SendPort) {
    let rp = to.create_receive_port(&t, receive).expect("receive port");
    rp.enable_connections();
    let mut sp = from.create_send_port(&t, send).expect("send port");
    sp.connect(rp.identifier(), LONG).expect("connect");
    (rp, sp)
}
